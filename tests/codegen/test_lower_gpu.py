"""GPU lowering (``svod.codegen.lower_gpu``): sibling ``prange`` loops, one of them over rows with a
reduction per row and the other of atomic adds, run each turn of each loop once, on every device, and share
one launch dimension on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.codegen import pipeline
from svod.device.caps import CUDA_CAPS
from svod.frontend.oracle import run_as_python
from svod.ir import Ops


@svod.kernel
def sums_then_counts(y, x, hist):
    n = x.shape[0]
    for i in svod.prange(n):
        s = 0.0
        for k in range(n):
            s += x[k]
        y[i] = s
    for _ in svod.prange(n):
        svod.atomic_add(hist, 0, 1)


@svod.kernel
def sums_beside_counts(y, x, z, hist):
    for i in svod.prange(y.shape[0]):
        s = 0.0
        for k in range(x.shape[0]):
            s += x[k] * i
        y[i] = s
    for j in svod.prange(z.shape[0]):
        svod.atomic_add(hist, j % 3, 1)
        z[j] = j + 1


@pytest.mark.parametrize("n", [0, 1, 5, 70])
def test_atomic_adds_beside_a_reduction_per_row_run_once_per_turn(device, n):
    """Each row's work group summed the row and then ran every turn of the loop beside it: n * n adds."""
    x = np.arange(n, dtype=np.float32)
    args = [np.zeros(n, np.float32), x, np.zeros(1, np.int32)]
    want = run_as_python(sums_then_counts, *args)
    sums_then_counts(*args, device=device)
    assert args[2][0] == n
    for expected, actual in zip(want, args, strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5)


@pytest.mark.parametrize(("rows", "turns"), [(0, 3), (3, 0), (2, 7), (7, 2), (100, 3), (3, 100)])
def test_sibling_loops_of_different_lengths_run_each_of_their_own_turns(device, rows, turns):
    """Where there are no rows, the loop beside them still runs all its turns; where it is longer than the
    rows, its turns past them run too, and the rows' work does not run past its own end."""
    args = [np.full(rows, -1, np.float32), np.ones(4, np.float32), np.zeros(turns, np.float32),
            np.zeros(3, np.int32)]
    want = run_as_python(sums_beside_counts, *args)
    sums_beside_counts(*args, device=device)
    np.testing.assert_array_equal(args[3], np.bincount(np.arange(turns) % 3, minlength=3))
    for expected, actual in zip(want, args, strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_sibling_loops_share_one_launch_dimension():
    """Two loops of up to 2**31 - 1 turns each, side by side, launch as one dimension of work items: as a grid
    of every pair of their turns, the groups along its second dimension exceeded a CUDA or WebGPU limit and
    the kernel was refused."""
    target = pipeline.Target(svod.DeviceSpec.parse("CUDA:0"), CUDA_CAPS, None)
    ast = sums_beside_counts.build(np.zeros(4, np.float32), np.ones(4, np.float32), np.zeros(5, np.float32),
                                   np.zeros(3, np.int32))
    lowered = pipeline.lower(ast, target).sink
    launch = {u.arg for u in lowered.toposort() if u.op is Ops.SPECIAL}
    assert launch == {"gidx0", "lidx0"}
    assert not any(u.op is Ops.RANGE and u.arg[1] is svod.AxisKind.GLOBAL for u in lowered.toposort())
