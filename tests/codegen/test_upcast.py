"""Register tiles and split reductions (``svod.codegen.upcast``): reductions that share a loop, a tile's rows,
share its partials, so a gather inside a maximum lowers to a kernel of a few hundred nodes that compiles in
a second or two and computes what numpy does."""

from __future__ import annotations

import time

import numpy as np
import pytest

import svod
from svod.codegen import pipeline
from svod.codegen.checks import CHECKED
from svod.codegen.lower import anchor_ranges, describe
from svod.codegen.lower_cpu import tile_for_cpu
from svod.codegen.upcast import EXTREMA, split_reductions
from svod.device import DeviceCaps
from svod.device.caps import CORE_ID
from svod.errors import IndexOutOfBoundsError
from svod.ir import Ops, UOp, simplify
from tests.helpers import refuses


@svod.kernel
def gathered_maximum(out, x, y, idx):
    n = x.shape[0]
    for i in svod.prange(n):
        s = -svod.inf
        for k in range(idx.shape[0]):
            s = max(s, x[i, idx[k]] - y[i, idx[i]])
        out[i] = s


def _arguments(n: int, m: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.zeros(n), rng.standard_normal((n, m)), rng.standard_normal((n, m)), rng.integers(0, m, n)]


def _expected(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    rows = np.arange(x.shape[0])
    if len(idx) == 0:
        return np.full(x.shape[0], -np.inf)
    return x[:, idx].max(axis=1) - y[rows, idx[rows]]


def test_a_gather_inside_a_maximum_lowers_to_a_small_kernel_quickly():
    """On a CPU with AVX-512's registers, the 16 rows of a register tile each split their maximum into 64
    partials and a tail: 1,040 copies of the gather, 578 checked accesses proven one by one, minutes. Sharing
    the loop's 64 partials, the rows keep 2 each."""
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=2, vector_registers=32, vector_lanes=True)
    target = pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)
    ast = gathered_maximum.build(*_arguments(7, 5))
    start = time.perf_counter()
    lowered = pipeline.lower(ast, target)
    pipeline.linearize(lowered.sink, lowered.status, target)
    assert time.perf_counter() - start < 20  # a hang guard only: the counts below are what the test checks
    topo = lowered.sink.toposort()
    maxima = [u for u in topo if u.op is Ops.REDUCE and u.arg is Ops.MAX]
    loops = {r for u in maxima for r in u.src[1:]}
    assert len(maxima) <= 64 + len(loops)  # a loop's partials, and a tail each
    assert sum(u.op is Ops.INDEX and u.arg == CHECKED for u in topo) <= 2 * len(maxima)


@pytest.mark.parametrize(("n", "m"), [(0, 3), (1, 1), (7, 5), (16, 3), (17, 40), (100, 9)])
def test_a_gather_inside_a_maximum_computes_what_numpy_does(compiled_device, n, m):
    if refuses(compiled_device, svod.dtypes.float64):
        return
    args = _arguments(n, m, seed=n)
    start = time.perf_counter()
    gathered_maximum(*args, device=compiled_device)
    assert time.perf_counter() - start < 60  # a hang guard only
    np.testing.assert_array_equal(args[0], _expected(*args[1:]))


@pytest.mark.parametrize("bad", [-1, 5])
def test_a_gather_inside_a_maximum_refuses_an_index_past_its_row(compiled_device, bad):
    if refuses(compiled_device, svod.dtypes.float64):
        return
    args = _arguments(7, 5)
    args[3][3] = bad
    with pytest.raises(IndexOutOfBoundsError):
        gathered_maximum(*args, device=compiled_device)


def test_reductions_that_share_a_loop_share_its_partials():
    """Four maxima over one loop (a tile's rows) keep 64 partials in all, 16 each; one alone keeps 64."""
    k = svod.KernelBuilder("four_maxima")
    n = k.var("n", 0, 4096)
    out, x = k.buffer(svod.dtypes.float32, 4), k.buffer(svod.dtypes.float32, (4, n))
    r = k.range(n, svod.AxisKind.REDUCE)
    for row in range(4):
        k.store(out[row], x[row, r].reduce(r, op=Ops.MAX))
    split = split_reductions(k.build(), EXTREMA, tails=True, widths=(64, 64))
    maxima = [u for u in split.toposort() if u.op is Ops.REDUCE]
    assert len(maxima) == 4 * (16 + 1)
    assert len({u.src[1] for u in maxima}) == 2  # the partials' loop and one tail loop for all four
    values = np.random.default_rng(1).standard_normal((4, 1001)).astype(np.float32)
    got = np.zeros(4, np.float32)
    svod.run(split, [got, values], device=svod.get_device("CPU", "llvm"), n=1001)
    np.testing.assert_array_equal(got, values.max(axis=1))


def _vector_matrix(columns: int, n: int, dtype: svod.DType = svod.dtypes.float64) -> UOp:
    """``y[j] = sum(x[r] * m[r, j] for r in range(n))``: no range but ``j``'s gives the tile rows."""
    k = svod.KernelBuilder("vector_matrix")
    y, x, m = k.buffer(dtype, columns), k.buffer(dtype, n), k.buffer(dtype, (n, columns))
    j, r = k.range(columns), k.range(n, svod.AxisKind.REDUCE)
    k.store(y[j], (x[r] * m[r, j]).reduce(r))
    return k.build()


def test_a_small_vector_matrix_product_takes_its_tile_rows_from_its_columns():
    """128 float64 columns: 8 rows of 16 lanes that share the loop and ``x[r]``'s broadcast, where one row of 16
    was one chain of dependent multiply-adds per pass; 256 over 256 (16 tiles, one thread's work) 8 rows twice,
    80 take 5 rows, 16 two of 8. A product past one thread's work keeps one row (its columns are the threads'
    chunks), and 13 columns theirs: a tile of 8 and one of the 5 left, in masked lanes."""
    def tiled(columns: int, n: int) -> UOp:
        return tile_for_cpu(simplify(anchor_ranges(_vector_matrix(columns, n))), 32, lanes=True)

    for columns, n, rows in ((128, 128, 8), (256, 256, 8), (80, 64, 5), (128, 8192, 1), (16, 64, 2), (13, 64, 2)):
        sink = tiled(columns, n)
        assert len([u for u in sink.src if u.op is Ops.STORE and Ops.LANE in {s.op for s in u.toposort()}]) == rows
    assert describe(tiled(128, 128)).endswith("the widest updating 128 accumulator(s)")
    assert describe(tiled(13, 64)).endswith("the widest updating 16 accumulator(s)")


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("columns", [0, 1, 13, 16, 80, 128, 256])
@pytest.mark.parametrize("n", [0, 1, 7, 128])
def test_a_vector_matrix_product_in_rows_of_its_columns_computes_what_numpy_does(compiler, columns, n):
    device = svod.get_device("CPU", compiler)
    rng = np.random.default_rng(columns * 131 + n)
    x, m = rng.integers(-9, 10, n), rng.integers(-9, 10, (n, columns))
    got = np.full(columns, -1, np.int64)
    svod.run(_vector_matrix(columns, n, svod.dtypes.int64), [got, x, m], device=device)
    np.testing.assert_array_equal(got, x @ m)  # integers: exact
    values = [rng.standard_normal(n), rng.standard_normal((n, columns))]
    if n:
        values[1][0, :3] = [np.inf, -0.0, np.nan][:min(columns, 3)]
    found = np.full(columns, -1.0)
    svod.run(_vector_matrix(columns, n), [found, *values], device=device)
    np.testing.assert_allclose(found, values[0] @ values[1], rtol=1e-12, atol=1e-12)


@svod.kernel
def scaled_rows_and_their_sums(x, scale, out, sums):
    for i in svod.prange(x.shape[0]):
        total = 0.0
        for k in range(x.shape[1]):
            v = x[i, k] * scale[i]
            total += v
            out[i, k] += v
        sums[i] += total


def _scaled_rows(n: int, m: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n * 31 + m)
    return [rng.integers(-9, 10, (n, m)).astype(np.float64), rng.integers(-3, 4, n).astype(np.float64),
            rng.integers(-9, 10, (n, m)).astype(np.float64), rng.integers(-9, 10, n).astype(np.float64)]


def test_a_row_sum_beside_an_elementwise_store_runs_on_every_thread():
    """A layer norm's adjoint stores each row's elements and adds up the row in one pass. Two ways split the sum
    off to loops of its own, which the threads' split left to one thread (ten times the pass's time): streamed
    rows (``stream_rows``: the store stayed behind on the row range), and a tile of 16 rows per pass whose
    loads of ``x`` were gathers down a column (``upcast_reductions``, which took ``scale[i]``, read after each
    turn's store to ``out``, for a load that turns with the sum). Every store runs in the threads' chunks."""
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=2, vector_registers=16, vector_lanes=True)
    target = pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)
    sink = pipeline.lower(scaled_rows_and_their_sums.build(*_scaled_rows(512, 256)), target).sink

    def in_chunks(store: UOp) -> bool:
        return any(r.op is Ops.RANGE and any(v.op is Ops.DEFINE_VAR and v.arg[0] == CORE_ID
                                             for v in r.src[0].toposort()) for r in store.toposort())

    stores = [e for e in sink.src if e.op is Ops.STORE]
    assert len(stores) == 2
    assert all(in_chunks(store) for store in stores)


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 256), (7, 3), (17, 33), (512, 256)])
def test_a_row_sum_beside_an_elementwise_store_computes_what_numpy_does(compiled_device, n, m):
    if refuses(compiled_device, svod.dtypes.float64):
        return
    x, scale, out, sums = _scaled_rows(n, m)
    scaled = x * scale[:, None]
    expected_out, expected_sums = out + scaled, sums + scaled.sum(axis=1)
    scaled_rows_and_their_sums(x, scale, out, sums, device=compiled_device)
    np.testing.assert_array_equal(out, expected_out)
    np.testing.assert_array_equal(sums, expected_sums)
