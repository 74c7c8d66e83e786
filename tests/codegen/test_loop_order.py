"""A nest of parallel ranges lowers by what it reads and writes, not by the order its loops were written in
(``svod.codegen.nest_order``): the spellings of one transpose, permute or copy lower to one kernel, and every
spelling computes what numpy does on every device."""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod
from svod import KernelBuilder, dtypes
from svod.codegen import pipeline
from svod.codegen.lower import anchor_ranges
from svod.codegen.lower_cpu import TRANSPOSE_BLOCK, block_transposes
from svod.codegen.nest_order import order_parallel_nest, parallel_nest, stride
from svod.codegen.ranges import nested
from svod.device import DeviceCaps
from svod.ir import AxisKind, Ops, UOp, simplify


def read_rows(out, x):
    rows, cols = x.shape
    for r in svod.prange(rows):
        for c in svod.prange(cols):
            out[c, r] = x[r, c]


def write_rows(out, x):
    m, n = out.shape
    for i in svod.prange(m):
        for j in svod.prange(n):
            out[i, j] = x[j, i]


def permute_read(out, x):
    a, b, c = x.shape
    for i in svod.prange(a):
        for j in svod.prange(b):
            for k in svod.prange(c):
                out[k, j, i] = x[i, j, k]


def permute_written(out, x):
    a, b, c = out.shape
    for i in svod.prange(a):
        for j in svod.prange(b):
            for k in svod.prange(c):
                out[i, j, k] = x[k, j, i]


def copy_by_columns(out, x):
    rows, cols = x.shape
    for c in svod.prange(cols):
        for r in svod.prange(rows):
            out[r, c] = x[r, c] * 2.0


def copy_by_rows(out, x):
    rows, cols = x.shape
    for r in svod.prange(rows):
        for c in svod.prange(cols):
            out[r, c] = x[r, c] * 2.0


TRANSPOSES = (read_rows, write_rows)
PERMUTES = (permute_read, permute_written)
COPIES = (copy_by_columns, copy_by_rows)


def _target(threads: int = 2) -> pipeline.Target:
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=threads, vector_registers=16,
                      vector_lanes=True)
    return pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)


def _lowered(fn, shape: tuple[int, ...], static: bool, out_shape: tuple[int, ...] | None = None) -> UOp:
    """``fn`` lowered for a CPU of two threads, on float32 arrays of ``shape`` (its output ``out_shape``, by
    default ``shape`` reversed), its name left out."""
    kernel = svod.kernel(fn, static_shapes=static)
    out = np.zeros(shape[::-1] if out_shape is None else out_shape, np.float32)
    sink = pipeline.lower(kernel.build(out, np.zeros(shape, np.float32)), _target()).sink
    return sink.replace(arg=None)


def _structure(sink: UOp) -> str:
    """``sink`` one node a line, each range's axis number by its rank among the kernel's: the nesting order,
    whatever numbers a pass gave the ranges."""
    axes = sorted({u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE})
    listing = pipeline.listing(sink)
    return re.sub(r"\((\d+), AxisKind", lambda m: f"(axis{axes.index(int(m.group(1)))}, AxisKind", listing)


def _innermost(effect: UOp) -> UOp:
    """The innermost loop ``effect`` runs in (after the thread split: a range of a constant axis order)."""
    return nested(frozenset(u for u in effect.toposort() if u.op is Ops.RANGE))[-1]


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize(("spellings", "shape"), [(TRANSPOSES, (96, 160)), (TRANSPOSES, (1000, 301)),
                                                  (PERMUTES, (64, 5, 96)), (COPIES, (70, 96))],
                         ids=["transpose", "ragged-transpose", "permute", "copy"])
def test_the_spellings_of_one_kernel_lower_to_one_loop_nest(spellings, shape, static):
    first, second = (_lowered(fn, shape, static, shape if spellings is COPIES else None) for fn in spellings)
    assert _structure(first) == _structure(second)


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize("fn", [*TRANSPOSES, *PERMUTES])
def test_a_transpose_is_blocked_and_walked_along_the_rows_it_reads(fn, static):
    """Either spelling is walked in whole square blocks of ``TRANSPOSE_BLOCK`` of the two ranges it reads and
    writes along (4 ranges, with a permute's third outside them), along the rows read, whether the sizes are
    constants or variables (the edges past the whole blocks are statements of their own)."""
    shape = (96, 160) if fn in TRANSPOSES else (64, 5, 96)
    kernel = svod.kernel(fn, static_shapes=static)
    out, x = np.zeros(shape[::-1], np.float32), np.zeros(shape, np.float32)
    sink = pipeline.lower(kernel.build(out, x), _target(threads=1)).sink
    store = next(e for e in sink.src if e.op is Ops.STORE)
    load = next(u for u in store.toposort() if u.op is Ops.LOAD)
    assert len([u for u in store.toposort() if u.op is Ops.RANGE]) == len(shape) + 2
    inner = _innermost(store)
    assert stride(load.src[0].src[1], inner).terms == {(): 1}
    assert inner.src[0].op is Ops.CONST and inner.src[0].arg == TRANSPOSE_BLOCK


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
def test_a_copy_written_by_columns_stores_along_its_innermost_loop(static):
    sink = _lowered(copy_by_columns, (70, 96), static, (70, 96))
    store = next(e for e in sink.src if e.op is Ops.STORE)
    assert stride(store.src[0].src[1], _innermost(store)).terms == {(): 1}


def _axes(nest_ranges: tuple[UOp, ...], built: UOp) -> list[int]:
    """Which of the kernel's ranges, by the order they were written in, ``nest_ranges`` are."""
    written = sorted((u for u in built.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    return [written.index(r) for r in nest_ranges]


def _built(shape: tuple[int, ...], store: tuple[int, ...], loads: tuple[tuple[int, ...], ...]) -> UOp:
    k = KernelBuilder("nest")
    out = k.buffer(dtypes.float32, tuple(shape[a] for a in store))
    ins = [k.buffer(dtypes.float32, tuple(shape[a] for a in load)) for load in loads]
    ranges = [k.range(n) for n in shape]
    values = [buffer[tuple(ranges[a] for a in load)] for buffer, load in zip(ins, loads, strict=True)]
    total = values[0]
    for value in values[1:]:
        total = total + value
    k.store(out[tuple(ranges[a] for a in store)], total)
    return simplify(anchor_ranges(k.build()))


@pytest.mark.parametrize(("store", "loads", "outer", "loaded", "stored"), [
    ((0, 1), ((1, 0),), [], 0, 1),                    # a transpose written along its output
    ((1, 0), ((0, 1),), [], 1, 0),                    # one written along its input
    ((2, 1, 0), ((0, 1, 2),), [1], 2, 0),             # a permute: its middle axis outside the pair
    ((3, 1, 0, 2), ((0, 1, 2, 3),), [1, 0], 3, 2),    # the other ranges by the stride the store takes over them
    ((1, 0), ((1, 0),), [1], None, 0),                # a copy along its columns
    ((0, 1), ((0,), (1,)), [0], None, 1),             # an outer product: no load crosses the stored range
    ((0, 1), ((0, 1), (1, 0)), [], 0, 1),             # a sum with a transpose: the crossing load
])
def test_a_nest_is_ordered_by_the_strides_of_its_accesses(store, loads, outer, loaded, stored):
    sink = _built((4, 5, 6, 7)[:max(store) + 1], store, loads)
    nest = parallel_nest(sink)
    assert nest is not None
    assert _axes(nest.outer, sink) == outer
    assert (None if nest.loaded is None else _axes((nest.loaded,), sink)[0]) == loaded
    assert _axes((nest.stored,), sink)[0] == stored


def test_kernels_that_are_no_parallel_nest_keep_their_order():
    """A reduction, a store contiguous in no range (a stride of 2), and one range alone are left as written."""
    k = KernelBuilder("sums")
    out, x = k.buffer(dtypes.float32, (8,)), k.buffer(dtypes.float32, (8, 8))
    i, r = k.range(8), k.range(8, AxisKind.REDUCE)
    k.store(out[i], x[r, i].reduce(r))
    k2 = KernelBuilder("strided")
    out2, x2 = k2.buffer(dtypes.float32, 128), k2.buffer(dtypes.float32, (8, 8))
    a, b = k2.range(8), k2.range(8)
    k2.store(out2[b * 16 + a * 2], x2[a, b])
    k3 = KernelBuilder("one")
    out3, x3 = k3.buffer(dtypes.float32, 64), k3.buffer(dtypes.float32, 64)
    c = k3.range(64)
    k3.store(out3[c], x3[c])
    for built in (k.build(), k2.build(), k3.build()):
        sink = simplify(anchor_ranges(built))
        assert parallel_nest(sink) is None
        assert order_parallel_nest(sink) is None and block_transposes(sink) is None


def test_a_nest_already_in_order_is_left():
    sink = _built((4, 5), (0, 1), ((0, 1),))
    assert parallel_nest(sink) is not None
    assert order_parallel_nest(sink) is None


TRANSPOSE_SHAPES = [(0, 5), (5, 0), (1, 1), (1, 70), (70, 1), (7, 13), (17, 16), (31, 37), (16, 67), (67, 131),
                    (15, 3001), (3001, 15)]
"""Empty, single, prime and vector-width-ragged sizes; (16, 67) and (67, 131) hold two symbolic blocks each way,
the thin last two a range under a block (the blocks cut short, in the threads' outer blocks)."""
STATIC_SHAPES = [(1, 7), (64, 67), (97, 64)]
"""Constant sizes: the last two hold two constant blocks each way, the last starting a block before its end."""
PERMUTE_SHAPES = [(0, 3, 4), (1, 1, 1), (2, 3, 5), (17, 3, 19), (16, 2, 33), (5, 15, 301), (5, 301, 15)]


@pytest.mark.parametrize("fn", TRANSPOSES)
def test_both_spellings_of_a_transpose_match_numpy(device, fn):
    kernel = svod.kernel(fn)
    for shape in TRANSPOSE_SHAPES:
        data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        out = np.full(shape[::-1], np.nan, np.float32)
        kernel(out, data, device=device)
        np.testing.assert_array_equal(out, data.T, err_msg=str(shape))


@pytest.mark.parametrize("fn", TRANSPOSES)
@pytest.mark.parametrize("shape", STATIC_SHAPES)
def test_both_spellings_of_a_transpose_of_constant_sizes_match_numpy(device, fn, shape):
    data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    out = np.full(shape[::-1], np.nan, np.float32)
    svod.kernel(fn, static_shapes=True)(out, data, device=device)
    np.testing.assert_array_equal(out, data.T)


@pytest.mark.parametrize("fn", PERMUTES)
def test_both_spellings_of_a_permute_match_numpy(device, fn):
    kernel = svod.kernel(fn)
    for shape in PERMUTE_SHAPES:
        data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        out = np.full(shape[::-1], np.nan, np.float32)
        kernel(out, data, device=device)
        np.testing.assert_array_equal(out, data.transpose(2, 1, 0), err_msg=str(shape))


@pytest.mark.parametrize("fn", COPIES)
def test_both_spellings_of_a_copy_match_numpy(device, fn):
    kernel = svod.kernel(fn)
    for shape in [(0, 4), (1, 1), (3, 70), (67, 17)]:
        data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        out = np.full(shape, np.nan, np.float32)
        kernel(out, data, device=device)
        np.testing.assert_array_equal(out, data * np.float32(2.0), err_msg=str(shape))


@svod.kernel(static_shapes=True)
def rows_of_one(out: svod.Array[svod.float32, 2], n: svod.Int[1, 1]):
    for a in svod.prange(out.shape[1]):
        for p in range(n):  # one turn: made a parallel range whose index does not move
            out[p, a] = p + a


@pytest.mark.parametrize("columns", [1, 4, 37])
def test_a_range_the_store_does_not_move_with_orders_as_the_outermost(device, columns):
    """A range of one turn the store's index does not move with reaches nowhere: it is ordered outermost, and
    the nest lowers (it raised an internal error)."""
    out = np.zeros((1, columns), np.float32)
    rows_of_one(out, 1, device=device)
    np.testing.assert_array_equal(out, np.arange(columns, dtype=np.float32)[None, :])
