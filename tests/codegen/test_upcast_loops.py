"""A work item's own loop of reductions tiled along the rows its loads read (``svod.codegen.upcast.upcast_loops``):
covariance's row of column products, ``out[i, i + j] = sum(a[r, i] * a[r, i + j])`` for ``j`` in a sequential loop
of work item ``i``, takes tiles of neighbouring ``j``; a loop whose turn reads what an earlier turn stored keeps
its order. Both compared with NumPy (or Python) on both CPU compiler pairs over triangles of 1 to 257 columns."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.codegen.lower import anchor_ranges
from svod.codegen.lower_cpu import tile_for_cpu
from svod.codegen.upcast import upcast_loops
from svod.ir import AxisKind, Ops, UOp, simplify


def _rows_of_products(columns: int, rows: int, chained: bool = False) -> UOp:
    """Work item ``i`` stores ``out[i, i + j] = sum(a[r, i] * a[r, i + j])`` for ``j < columns - i`` in a loop
    of its own, then ``first[i] = 2 * a[0, i]``, so the loop is not the work item's whole body. ``chained``: the turn
    ``j`` adds the element the turn before it stored (``out[i, i + j] = sum + out[i, i + j - 1]``, from ``j = 1``)."""
    k = svod.KernelBuilder("rows_of_products")
    out, a = k.buffer(svod.dtypes.float64, (columns, columns)), k.buffer(svod.dtypes.float64, (rows, columns))
    first = k.buffer(svod.dtypes.float64, columns)
    i = k.range(columns)
    j = k.range(columns - i - int(chained), AxisKind.LOOP) + int(chained)
    r = k.range(rows, AxisKind.REDUCE)
    total = (a[r, i] * a[r, i + j]).reduce(r)
    k.store(out[i, i + j], total + out[i, i + j - 1] if chained else total)
    k.store(first[i], a[0, i] * 2.0)
    return k.build()


def _reductions(sink: UOp) -> int:
    return sum(1 for u in sink.toposort() if u.op is Ops.REDUCE)


def test_a_work_items_loop_of_independent_sums_is_tiled_and_one_of_chained_sums_is_not():
    """257 float64 columns, AVX-512's rows of 16: tiles of 16 sums in lanes and a tile in masked lanes for the
    columns they leave (16 sums and a loop of one over the columns they leave, where the renderer spells no
    vectors), which the parallel range's tiles then leave alone; the chained loop keeps its one sum a turn."""
    def kernel(chained: bool) -> UOp:
        return simplify(anchor_ranges(_rows_of_products(257, 5, chained)))

    in_lanes = tile_for_cpu(kernel(False), 32, lanes=True)
    assert _reductions(in_lanes) == 2 and any(u.op is Ops.LANE for u in in_lanes.toposort())
    assert _reductions(tile_for_cpu(kernel(False), 32, lanes=False)) == 17
    sink, tiled = upcast_loops(kernel(False), 128, lanes=True)
    assert len(tiled) == 2 and all(e in sink.src for e in tiled)
    assert upcast_loops(kernel(True), 128, lanes=True) == (kernel(True), frozenset())


def _expected(a: np.ndarray, chained: bool) -> np.ndarray:
    columns = a.shape[1]
    out = np.zeros((columns, columns))
    for i in range(columns):
        for j in range(int(chained), columns - i):
            total = float(a[:, i] @ a[:, i + j])
            out[i, i + j] = total + out[i, i + j - 1] if chained else total
    return out


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("columns", [1, 2, 7, 33, 257])
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_a_work_items_loop_of_sums_computes_what_numpy_does(compiler, columns, rows):
    device = svod.get_device("CPU", compiler)
    a = np.random.default_rng(columns * 7 + rows).standard_normal((rows, columns))
    a[rows // 2, columns - 1] = np.inf if columns % 2 else np.nan
    for chained in (False, True):
        got, first = np.zeros((columns, columns)), np.zeros(columns)
        with np.errstate(invalid="ignore"):
            svod.run(_rows_of_products(columns, rows, chained), [got, a, first], device=device)
            want = _expected(a, chained)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * rows)
        np.testing.assert_array_equal(first, 2 * a[0])
