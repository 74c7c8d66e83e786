"""Sums over one length that run in the same loops and do not use each other share one loop on a CPU
(``svod.codegen.lower.share_reduction_loops``): a masked mean's sum and count read the mask once a turn; a sum
that uses another (a variance's), or that is the same across an outer range, keeps its own loop. The answers
are numpy's on both CPU backends, at edge sizes."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.codegen.lower import share_reduction_loops
from svod.codegen.render.c import CRenderer
from svod.codegen.render.llvmir import LLVMRenderer
from svod.ir.ops import REASSOCIABLE
from tests.helpers import open_device


def masked_mean(rows: int, cols: int) -> UOp:
    """``out[i] = sum(x[i, j] where m[i, j]) / count(m[i, :])``, each sum over a range of its own, as the front
    end writes a masked mean."""
    k = KernelBuilder("masked_mean")
    out, x = k.buffer(dtypes.float64, rows), k.buffer(dtypes.float64, (rows, cols))
    m = k.buffer(dtypes.bool, (rows, cols))
    i, j1, j2 = k.range(rows), k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    total = m[i, j1].where(x[i, j1], 0.0).reduce(j1)
    count = m[i, j2].cast(dtypes.int32).reduce(j2)
    k.store(out[i], total / count.cast(dtypes.float64))
    return k.build()


def centred_squares(rows: int, cols: int) -> UOp:
    """``out[i] = sum(x[i, :]) + sum((x[i, :] - sum(x[i, :]))**2) + sum(y)``: the second sum uses the first, and
    the third is the same for every row."""
    k = KernelBuilder("centred_squares")
    out, x, y = k.buffer(dtypes.float64, rows), k.buffer(dtypes.float64, (rows, cols)), k.buffer(dtypes.float64, cols)
    i, j1, j2, j3 = k.range(rows), *(k.range(cols, AxisKind.REDUCE) for _ in range(3))
    total = x[i, j1].reduce(j1)
    centred = x[i, j2] - total
    k.store(out[i], total + (centred * centred).reduce(j2) + y[j3].reduce(j3))
    return k.build()


def _sum_loops(sink: UOp) -> list[tuple[UOp, ...]]:
    """The reductions of ``sink`` by the range each runs over, in toposort order."""
    loops: dict[UOp, list[UOp]] = {}
    for u in sink.toposort():
        if u.op is Ops.REDUCE:
            loops.setdefault(u.src[1], []).append(u)
    return [tuple(found) for found in loops.values()]


def test_a_masked_means_sum_and_count_share_one_loop():
    shared = share_reduction_loops(masked_mean(3, 64))
    assert shared is not None
    [(total, count)] = _sum_loops(shared)
    assert total.dtype is dtypes.float64 and total.arg == (Ops.ADD, REASSOCIABLE)
    assert count.dtype is dtypes.int32 and count.arg is Ops.ADD  # an integer sum is exact in any order
    assert " reassoc " in LLVMRenderer("CPU").render(masked_mean(3, 64)).src
    assert "#pragma omp simd reduction(svod_sum:acc0) reduction(+:acc1)" in CRenderer("CPU").render(
        masked_mean(3, 64)).src


def test_a_sum_that_uses_another_or_is_the_same_for_every_row_keeps_its_own_loop():
    assert share_reduction_loops(centred_squares(3, 64)) is None
    assert len(_sum_loops(centred_squares(3, 64))) == 3


@pytest.mark.parametrize("backend", ["llvm", "clang"])
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 7), (5, 64), (2, 1031)])
def test_shared_loops_compute_numpys_answer(backend, rows, cols):
    device = open_device(backend)
    rng = np.random.default_rng(rows * cols)
    x = rng.standard_normal((rows, cols))
    x[0, 0] = -0.0
    mask = rng.random((rows, cols)) < 0.5
    mask[0, :] = False  # a row the mask holds nowhere: 0 / 0
    out = np.full(rows, 7.0)
    svod.run(masked_mean(rows, cols), [out, x, mask], device=device)
    with np.errstate(invalid="ignore"):
        expected = np.where(mask, x, 0.0).sum(axis=1) / mask.sum(axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert np.isnan(out[0])
    y = rng.standard_normal(cols)
    centred = np.zeros(rows)
    svod.run(centred_squares(rows, cols), [centred, x, y], device=device)
    totals = x.sum(axis=1)
    np.testing.assert_allclose(centred, totals + ((x - totals[:, None]) ** 2).sum(axis=1) + y.sum(), rtol=1e-10)
