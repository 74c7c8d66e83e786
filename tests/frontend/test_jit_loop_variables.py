"""A name a jitted function uses as the variable of a loop around phases and elsewhere (another loop's element
variable, a scalar, a definition) means in each place what Python means: a phase inside the plan loop reads the
turn's value, never a scalar of the same name another part computes; what svod cannot give Python's value is
refused at the user's line. Each function is compared with itself run as plain Python, on every device."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import KernelSyntaxError
from tests.frontend.test_jit import agrees_with_python

SIZES = [1, 2, 7]
"""A single element, two, and a prime: the loops around phases make one turn, two, and several."""


@svod.jit
def host_loop_then_element_loop(y, x, n, m):
    for j in range(n):  # a loop around an array statement: a plan loop
        y[:, j] = j
    for j in range(n):  # one kernel's own loop over the same name
        x[j] = 2.0 * j
    for i in range(m):
        x[:] = x + 1.0
        for j in range(n):
            if x[j] > 3:
                y[2, j] = i
    return x, y


@svod.jit
def element_loop_then_host_loop(y, x, n):
    for j in range(n):
        x[j] = 2.0 * j
    for j in range(n):
        y[:, j] = j
    return x, y


@svod.jit
def one_name_three_loops(y, x, n):
    for j in range(n):
        y[:, j] = j
    for j in range(n):
        x[j] = 2.0 * j
    for j in range(n):
        y[1, j] = y[1, j] + j * 10
    return x, y


@svod.jit
def host_loop_then_prange(y, x, n):
    for j in range(n):
        y[:, j] = j
    for j in prange(n):
        x[j] = 2.0 * j
    return x, y


@svod.jit
def prange_then_host_loop(y, x, n):
    for j in prange(n):
        x[j] = 2.0 * j
    for j in range(n):
        y[:, j] = j - 1
    return x, y


@svod.jit
def nested_loops_reuse_the_outer_name(y, x, n):
    w = y.shape[1]  # (a size WGSL's 32-bit indices are proved to hold)
    for i in range(3):
        for j in range(w):
            y[i, j] = i + j
            x[:] = x + 1.0
    for i in range(w):
        for j in range(2):
            x[i] = x[i] + i * 10 + j
    return x, y


@svod.jit
def nested_host_loops_of_one_name(y, x, n):
    for j in range(3):
        for j in range(n):  # the inner loop rebinds the name
            y[:, j] = y[:, j] + j
    for j in range(n):
        x[j] = j * 1.0
    return x, y


@svod.jit
def defined_then_a_loop_variable(y, x, n):
    j = n - 1
    x[1] = j
    for j in range(n):
        y[:, j] = j
    return x, y


@svod.jit
def element_variable_read_after_a_host_loop(y, x, n):
    for j in range(n):
        x[j] = 2.0 * j
    for k in range(n):
        y[:, k] = k
    x[0] = j - 100.0
    return x, y


@svod.jit
def a_scalar_and_a_loop_variable_of_one_name(y, x, n):
    s = 0.0
    for i in range(y.shape[1]):  # (a size WGSL's 32-bit indices are proved to hold)
        s += i
    for i in range(3):
        y[i, :] = s + i
    x[0] = s
    return x, y


@svod.jit
def loop_variable_assigned_after_the_loop(y, x, n):
    for j in range(n):
        y[:, j] = j
    j = 0
    y[0, j] = 100
    x[0] = j
    return x, y


def _arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((3, n), dtype=np.int64), np.zeros((max(n, 2),), dtype=np.float64)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("m", [1, 3])
def test_a_host_loop_and_an_element_loop_of_one_name(device, n, m):
    agrees_with_python(host_loop_then_element_loop, device, *_arrays(n), n, m)


@pytest.mark.parametrize("fn", [element_loop_then_host_loop, one_name_three_loops, host_loop_then_prange,
                                prange_then_host_loop, nested_loops_reuse_the_outer_name,
                                nested_host_loops_of_one_name, defined_then_a_loop_variable,
                                element_variable_read_after_a_host_loop, a_scalar_and_a_loop_variable_of_one_name,
                                loop_variable_assigned_after_the_loop])
@pytest.mark.parametrize("n", SIZES)
def test_a_name_reused_by_loops_means_what_python_means(device, fn, n):
    agrees_with_python(fn, device, *_arrays(n), n)


def test_the_repro_gives_each_row_its_values():
    """The values themselves, not only agreement: rows 0 and 1 the host loop's turns, row 2 the last turn that
    saw each element above 3."""
    x, y = host_loop_then_element_loop(*_arrays(5), 5, 3)
    np.testing.assert_array_equal(y, [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 2, 2, 2, 2]])
    np.testing.assert_array_equal(x, [3.0, 5.0, 7.0, 9.0, 11.0])


@svod.jit
def read_after_the_loop_from_a_branch(y, x, n):
    j = 7
    if n > 2:
        for j in range(n):
            y[:, j] = j
    x[0] = j
    return x, y


@svod.jit
def read_by_the_next_turn(y, x, n):
    j = 0
    for i in range(2):
        x[i] = j
        for j in range(n):
            y[:, j] = j + i
    return x, y


@svod.jit
def assigned_inside_its_loop(y, x, n):
    for j in range(2):
        y[j, :] = j
        j = 2  # rebinds the loop's variable
        y[j, :] = 5
    return x, y


@svod.jit
def a_prange_over_its_name_inside_it(y, x, n):
    for j in range(2):
        y[j, :] = j
        for j in prange(n):  # rebinds the loop's variable
            x[j] = x[j] + 1.0
    return x, y


@pytest.mark.parametrize(("fn", "line", "what"), [
    (read_after_the_loop_from_a_branch, "for j in range", "the variable j of a loop around phases is read after"),
    (read_by_the_next_turn, "for j in range", "the variable j of a loop around phases is read after"),
    (assigned_inside_its_loop, "j = 2", "j is the variable of the loop around phases at line"),
    (a_prange_over_its_name_inside_it, "for j in prange", "j is the variable of the loop around phases at line"),
])
def test_a_loop_variable_svod_cannot_keep_is_refused_at_its_line(fn, line, what):
    """Python's answer differs from the turn's value here (``x[0]`` is 6 for ``n = 7``): refused, never run."""
    want = fn.__wrapped__(*_arrays(7), 7)
    assert want is not None
    with pytest.raises(KernelSyntaxError, match=what) as raised:
        fn(*_arrays(7), 7)
    assert line in str(raised.value)


@svod.jit
def scaled_per_turn(x, n):
    j = n - 1
    for j in range(3):
        for i in prange(x.shape[0]):
            x[i] = x[i] * 1.5 + j
    return x


@pytest.mark.parametrize("n", SIZES)
def test_a_loop_variable_on_a_tape_is_the_turns_not_a_definition_of_its_name(n):
    """On a tape the host runs the loop: each turn's kernel reads that turn's value, not ``j = n - 1``."""
    x = np.arange(float(n))
    want = scaled_per_turn.__wrapped__(x.copy(), n)
    with svod.Tape():
        got = scaled_per_turn(x, n)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    start = np.arange(float(n))
    np.testing.assert_allclose(want, ((start * 1.5) * 1.5 + 1.0) * 1.5 + 2.0, rtol=1e-12)
