"""A jitted function's number parameter that the function assigns, and one left to its default that it returns:
each run's answer is plain Python's (the argument's value where the function first reads it, the last value it
assigns where it returns it)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import SvodError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

SIZES = (0, 1, 2, 7, 13)


@svod.jit
def bumped(x, p):
    p = p + 1
    return p


@svod.jit
def toggled(x, p):
    if x.shape[0] > 2:
        p ^= 3
    return p


@svod.jit
def counted(x, p):
    for _ in range(x.shape[0]):
        p += 1
    return p


@svod.jit
def doubled_in_a_loop(x, p):
    for i in range(x.shape[0]):
        x[i] = x[i] + p
        p = p * 2
    return p


@svod.jit
def plain_then_toggled(x, p):
    p = p + 1
    if x.shape[0] > 2:
        p ^= 3
    t = 0
    for _ in range(x.shape[0]):
        t += p
    return t


@svod.jit
def toggled_by_default(x, p=1):
    if x.shape[0] > 2:
        p ^= 3
    return p


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fn", (bumped, counted, doubled_in_a_loop))
def test_a_number_parameter_the_function_assigns_starts_as_the_argument(device, fn, n):
    """The function reads the argument before it assigns the parameter, and returns what it last assigned."""
    x = np.arange(n, dtype=np.float32)
    for p in (1, -5, 12, 2.5):
        agrees_or_refuses_int64(fn, device, x, p)


@pytest.mark.parametrize("n", SIZES)
def test_a_number_parameter_a_branch_augments_starts_as_the_argument(device, n):
    """So too where only a branch assigns it, passed or left to its default (a Python int: int64, which a device
    without 64-bit integers refuses)."""
    x = np.arange(n, dtype=np.float32)
    for p in (1, -5, 6):
        agrees_or_refuses_int64(toggled, device, x, p)
        agrees_or_refuses_int64(toggled_by_default, device, x, p)
        agrees_or_refuses_int64(plain_then_toggled, device, x, p)
    agrees_or_refuses_int64(toggled_by_default, device, x)


def agrees_or_refuses_int64(fn: svod.frontend.jit.Jit, device: svod.Device, *args: object) -> None:
    """Plain Python's answer, or on a device without 64-bit integers (WebGPU) the refusal of a Python int's
    int64 arithmetic."""
    try:
        agrees_with_python(fn, device, *args)
    except SvodError as err:
        assert refuses(device, svod.dtypes.int64) and "computes indices in 32 bits" in str(err)


@svod.jit
def returns_its_defaults(x, scale=3, flag=np.True_, shift=-0.0):
    return x.shape[0] * scale, flag, shift


@pytest.mark.parametrize("n", (0, 1, 7))
def test_a_returned_default_comes_back_as_its_value(device, n):
    """A number left to its default that the function returns comes back as Python returns it, as it does when
    passed."""
    x = np.arange(n, dtype=np.float32)
    try:
        got = returns_its_defaults(x, device=device)
        assert got == (n * 3, True, 0.0) and np.signbit(got[2])
        assert returns_its_defaults(x, 2, False, 1.5, device=device) == (n * 2, False, 1.5)
    except SvodError as err:  # a Python int's int64 arithmetic, where a device has no 64-bit integers
        assert refuses(device, svod.dtypes.int64) and "computes indices in 32 bits" in str(err)


@svod.jit
def sum_and_last_turn(x):
    t = 0
    for p in range(x.shape[0]):
        t += p
    return t + p


@svod.jit
def stores_and_keeps_the_index(x):
    p = 0.5
    for p in range(x.shape[0]):
        x[p] = p
    return p


@svod.jit
def reads_the_index_again(x):
    t = 0.0
    for i in range(x.shape[0]):
        t += x[i]
    for i in range(2):
        t += i
    return t


@pytest.mark.parametrize("n", (1, 2, 7, 13))
@pytest.mark.parametrize("fn", (sum_and_last_turn, stores_and_keeps_the_index))
def test_a_loop_variable_read_after_its_loop_keeps_the_last_turn(device, fn, n):
    """Python keeps a for loop's last value in its variable; a loop a kernel runs left it as it was before the
    loop (or a buffer no run had set)."""
    try:
        agrees_with_python(fn, device, np.arange(n, dtype=np.float32))
    except SvodError as err:  # a Python int's int64 sum, where a device has no 64-bit integers
        assert fn is sum_and_last_turn and refuses(device, svod.dtypes.int64)
        assert "computes indices in 32 bits" in str(err)


def test_a_loop_variable_after_no_turn(device):
    """No turn: a variable bound before keeps its value, one unbound is refused as Python raises."""
    agrees_with_python(stores_and_keeps_the_index, device, np.zeros(0, dtype=np.float32))
    with pytest.raises(SvodError, match="makes no turn"):
        sum_and_last_turn(np.zeros(0, dtype=np.float32), device=device)


def test_a_loop_variable_a_later_loop_takes_again_is_kept(device):
    agrees_with_python(reads_the_index_again, device, np.arange(5, dtype=np.float32))


@svod.jit
def marks_down_to(x, k):
    p = -1
    for p in range(k, -1, -2):
        x[p] = 1.0
    return p


@svod.jit
def marks_then_breaks(x):
    p = 0
    for p in range(x.shape[0]):
        x[p] = 1.0
        if p > 1:
            break
    return p


@svod.jit
def marks_and_doubles(x):
    p = 0
    for p in range(x.shape[0]):
        x[p] = 1.0
        p = p * 2
    return p


@pytest.mark.parametrize("k", (-1, 0, 1, 4, 5))
def test_a_loop_variable_after_a_loop_of_an_argument_s_turns(device, k):
    """Turns an integer argument sets: the last turn's value where the loop turned, the earlier value where it
    did not."""
    agrees_with_python(marks_down_to, device, np.zeros(6, dtype=np.float32), k)


@pytest.mark.parametrize("fn", (marks_then_breaks, marks_and_doubles))
def test_a_loop_variable_a_break_or_the_body_sets_is_refused(device, fn):
    """Its last value is not the range's last: refused where read, naming the variable."""
    with pytest.raises(SvodError, match="assign it to another name inside the loop"):
        fn(np.zeros(5, dtype=np.float32), device=device)
