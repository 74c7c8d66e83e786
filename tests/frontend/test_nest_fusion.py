"""Consecutive nests of ``@svod.jit``'s array statements run as one kernel, and a host loop around one nest
inside it, where each work item touches its own elements of what they write (``svod.frontend.nest_fusion``), and
as kernels of their own otherwise: every function here against its plain-Python run, and the kernels its plan
launches on the CPU counted."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError
from tests.frontend.test_arrays import data, kernels_of
from tests.frontend.test_jit import agrees_with_python

SHAPES = [(1, 1, 3), (7, 5, 4), (13, 3, 6), (2, 3, 2)]


@svod.jit
def thomas_forward(ccol, dcol, wcon, u, dtr):
    """vadv's forward sweep as npbench's numba version writes it: each turn's statements read the elements its
    earlier statements wrote (``ccol[:, :, k]``) and the previous turn's (``ccol[:, :, k - 1]``)."""
    for k in range(1, ccol.shape[2]):
        gav = -0.25 * (wcon[1:, :, k] + wcon[:-1, :, k])
        acol = gav * 0.5
        ccol[:, :, k] = 0.25 * (wcon[1:, :, k] - wcon[:-1, :, k])
        bcol = dtr - acol - ccol[:, :, k]
        divided = 1.0 / (bcol - ccol[:, :, k - 1] * acol)
        ccol[:, :, k] = ccol[:, :, k] * divided
        dcol[:, :, k] = (u[:, :, k] - dcol[:, :, k - 1] * acol) * divided


def _thomas_arguments(shape: tuple[int, int, int]) -> tuple[object, ...]:
    i, j, k = shape
    return data(i, j, k), data(i, j, k), data(i + 1, j, k), data(i, j, k), 3.0


@pytest.mark.parametrize("shape", SHAPES)
def test_a_turn_of_elementwise_statements_agrees_with_python(device, shape):
    agrees_with_python(thomas_forward, device, *_thomas_arguments(shape), rtol=1e-9)


def test_a_loop_of_elementwise_statements_is_one_kernel():
    """Its turns fused, then the loop sunk into the nest: each work item sweeps its own column."""
    args = _thomas_arguments((7, 5, 4))
    assert kernels_of(thomas_forward, *args, dtr=3.0) == 1


@svod.jit
def shifted_reader(x, y, z):
    y[:] = x * 2.0
    z[1:] = y[:-1] + y[1:]


@svod.jit
def transposed_reader(x, y):
    x[:] = x * 2.0 + 1.0
    y[:] = x.T - x


@svod.jit
def reduced_reader(x, y):
    x[:] = x + 1.0
    y[:] = x / x.sum(axis=1)[:, None]


@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_a_read_of_another_work_item_s_element_keeps_its_kernel(device, n):
    """A read of a neighbour's element (``y[:-1]``), the transpose's, or a row's sum must see every store of the
    statement before: each is a kernel of its own."""
    agrees_with_python(shifted_reader, device, data(n), data(n), data(n), rtol=1e-12)
    agrees_with_python(transposed_reader, device, data(n, n), data(n, n), rtol=1e-12)
    agrees_with_python(reduced_reader, device, data(n, 3), data(n, 3), rtol=1e-9)


def test_reads_of_other_elements_are_not_fused():
    assert kernels_of(shifted_reader, data(9), data(9), data(9)) == 2
    assert kernels_of(transposed_reader, data(5, 5), data(5, 5)) == 2


@svod.jit
def user_nests_and_arrays(x, y, out):
    n = x.shape[0]
    t = x * 3.0
    for i in svod.prange(n):
        y[i] = t[i] + 1.0
    for i in svod.prange(n):
        out[i] = y[i] * t[i] - np.sqrt(abs(x[i]))


@pytest.mark.parametrize("n", [1, 5, 64])
def test_written_nests_beside_array_statements(device, n):
    x = data(n)
    x[0] = -0.0
    agrees_with_python(user_nests_and_arrays, device, x, data(n), data(n), rtol=1e-12)
    assert kernels_of(user_nests_and_arrays, data(n), data(n), data(n)) == 2  # t's, then the loops' (ranges as written)


# ---- host loops sunk into their nest -----------------------------------------------------------------------

@svod.jit
def recurrences(y, x, a, b):
    """deriche's recurrences: along each row (a work item a row), then down each column."""
    for j in range(2, x.shape[1]):
        y[:, j] = a * x[:, j] + b * y[:, j - 1] - 0.25 * y[:, j - 2]
    for i in range(x.shape[0] - 2, -1, -1):
        y[i, :] = y[i, :] + b * y[i + 1, :]


@svod.jit
def diagonal(y, x):
    """Row ``r`` of turn ``j`` reads row ``r - 1`` of turn ``j - 1``: the turns stay launches of their own."""
    for j in range(1, x.shape[1]):
        y[1:, j] = y[:-1, j - 1] + x[1:, j]


@svod.jit
def variable_read_after(y, z):
    for j in range(1, y.shape[1]):
        y[:, j] = y[:, j - 1] * 0.5 + 1.0
    z[:] = j


@svod.jit
def steps_the_run_counts(y, n, x):
    """A loop the run bounds stays the plan's, which checks the count before the turns."""
    for t in range(n):
        y[:] = y * 0.5 + x[t]


@svod.jit
def zeroed_each_turn(y, x):
    for j in range(x.shape[1]):
        t = np.zeros(x.shape[0], x.dtype)
        t[:] += x[:, j]
        y[:, j] = t * 2.0


@svod.jit
def leaving_early(y, x):
    for j in range(1, x.shape[1]):
        y[:, j] = y[:, j - 1] + x[:, j]
        if j >= 3:
            break


def test_a_loop_whose_variable_is_read_after_it_keeps_its_refusal():
    """Sunk, the loop would leave no ``j`` on the host; it is not sunk, and refused as a loop around phases."""
    with pytest.raises(KernelSyntaxError, match="the variable j of a loop around phases is read after the loop"):
        variable_read_after(data(3, 4), data(3))


@pytest.mark.parametrize("shape", [(1, 3), (3, 3), (5, 7), (17, 4)])
def test_loops_around_one_nest_agree_with_python(device, shape):
    m, n = shape
    agrees_with_python(recurrences, device, data(m, n), data(m, n), 0.5, -0.75, rtol=1e-9)
    agrees_with_python(diagonal, device, data(m, n), data(m, n), rtol=1e-12)
    agrees_with_python(zeroed_each_turn, device, data(m, n), data(m, n), rtol=1e-12)
    agrees_with_python(leaving_early, device, data(m, n), data(m, n), rtol=1e-12)
    agrees_with_python(steps_the_run_counts, device, data(m), n, data(n), rtol=1e-12)


def test_which_loops_are_sunk():
    m, n = 6, 9
    assert kernels_of(recurrences, data(m, n), data(m, n), 0.5, -0.75, a=0.5, b=-0.75) == 2
    assert kernels_of(diagonal, data(m, n), data(m, n)) == n - 1
    assert kernels_of(zeroed_each_turn, data(m, n), data(m, n)) >= n  # np.zeros fills it at each turn
    assert kernels_of(steps_the_run_counts, data(m), 3, data(4), n=3) == 3

