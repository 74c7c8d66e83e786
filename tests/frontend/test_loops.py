"""The variable of a ``for`` loop a kernel runs, read after the loop: Python's value (the last turn's where the
loop turned, the one before the loop where it did not), or refused where no bound tells it."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError


@svod.kernel
def last_of_a_stepped_range(x, out, n: int):
    p = 7
    for p in range(1, n, 3):
        x[p] = 1.0
    out[0] = p


@svod.kernel
def last_of_a_downward_range(x, out, n: int):
    p = -5
    for p in range(n - 1, -1, -2):
        x[p] = 1.0
    out[0] = p


@svod.kernel
def last_work_item(x, out):
    p = 7
    for p in svod.prange(x.shape[0]):
        x[p] = 1.0
    out[0] = p


@svod.kernel
def inner_last_carried(x, out, n: int):
    p = 100
    q = 0
    for i in range(n):
        for p in range(i):
            x[p] += 1.0
        q += p
    out[0] = q
    out[1] = p


@svod.kernel
def unbound_before(x, out, n: int):
    for p in range(n):
        x[p] = 1.0
    out[0] = p


def python_last(start: int, stop: int, step: int, before: int) -> int:
    p = before
    for p in range(start, stop, step):  # noqa: B007 (the value after the loop is the point)
        pass
    return p


@pytest.mark.parametrize("n", (0, 1, 2, 4, 5, 8, 9))
def test_a_range_loop_leaves_its_last_value(device, n):
    for kernel, bounds in ((last_of_a_stepped_range, (1, n, 3, 7)), (last_of_a_downward_range, (n - 1, -1, -2, -5))):
        x, out = np.zeros(9, np.float32), np.zeros(1, np.int32)
        kernel(x, out, n, device=device)
        assert out[0] == python_last(*bounds), kernel


@pytest.mark.parametrize("n", (0, 1, 2, 3, 7))
def test_an_inner_loop_s_last_value_carried_by_the_outer_loop(device, n):
    """The outer loop carries what the inner loop leaves: its last value, or the value before where it made no
    turn (its first turn)."""
    p, q = 100, 0
    for i in range(n):
        for p in range(i):  # noqa: B007 (the value after the loop is the point)
            pass
        q += p
    x, out = np.zeros(9, np.float32), np.zeros(2, np.int32)
    inner_last_carried(x, out, n, device=device)
    assert tuple(out) == (q, p)


@pytest.mark.parametrize("n", (0, 1, 5, 13))
def test_a_parallel_loop_leaves_its_last_value(device, n):
    x, out = np.zeros(n, np.float32), np.zeros(1, np.int32)
    last_work_item(x, out, device=device)
    assert out[0] == python_last(0, n, 1, 7) and x.sum() == n


def test_a_loop_that_may_not_turn_leaves_an_unbound_variable_refused(device):
    with pytest.raises(KernelSyntaxError, match="p is not defined here: it is the variable of the loop at line"):
        unbound_before(np.zeros(3, np.float32), np.zeros(1, np.int32), 3, device=device)


@svod.jit
def _prange_of_a_count(a, out):
    k = 0
    for j in range(a.shape[0]):
        if a[j] > 0:
            k += 1
    for i in svod.prange(k):
        out[i] = a[i] * 2
    return k


@svod.kernel
def _prange_of_an_element(bounds, out):
    for i in svod.prange(bounds[0]):
        out[i] = 1.0


def test_a_prange_over_a_value_the_run_computes_is_refused_at_its_line():
    """A prange's length is its kernel's launch size; one read from memory (a count an earlier phase made, an
    element) is refused at the user's line, where the graph's checker used to refuse the launch size alone."""
    with pytest.raises(KernelSyntaxError, match=r"test_loops\.py:\d+: svod\.prange's bounds are numbers known before "
                                                r"its kernel runs") as raised:
        _prange_of_a_count(np.array([1.0, -1.0, 2.0]), np.zeros(3))
    assert "prange(k)" in str(raised.value) or "'k'" in str(raised.value)
    with pytest.raises(KernelSyntaxError, match=r"svod\.prange's bounds are numbers known before its kernel runs"):
        _prange_of_an_element(np.array([2], dtype=np.int32), np.zeros(3))
