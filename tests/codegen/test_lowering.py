"""The lowering passes and the linearizer keep their guarantees."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.codegen import pipeline
from svod.codegen.loop_turns import loop_turns
from svod.codegen.lower import (
    CHUNK_ALIGNMENT,
    THREAD_MIN_WORK,
    anchor_ranges,
    describe,
    fuse_products,
    speculate_gated_loads,
    split_reduction,
)
from svod.codegen.lower_cpu import (
    CHUNKS_PER_THREAD,
    PRIVATE_BYTES,
    block_transposes,
    privatize_atomics,
    split_for_threads,
    thread_split,
    tile_for_cpu,
    tile_row_bytes,
    tile_rows,
)
from svod.codegen.lower_gpu import WorkGroupLimits, reduce_per_item, share_reductions, tile_matmul, to_gpu_indices
from svod.codegen.matmul_blocks import BLOCK_MIN_ROWS, STREAM_DEPTH, block_matmul
from svod.codegen.pipeline import linearize
from svod.codegen.render.c import CRenderer
from svod.codegen.render.cstyle import CStyleRenderer
from svod.codegen.render.llvm_unroll import TILE_UNROLL
from svod.codegen.render.llvmir import LLVMRenderer, function_attributes
from svod.codegen.render.wgsl import _COMPARE_EXCHANGE_TURNS, WGSLRenderer
from svod.codegen.upcast import (
    EXTREMA,
    SHARED_ROWS,
    STREAM_ROWS,
    TAIL_SPLIT_WIDTH,
    share_rows,
    split_reductions,
    stream_rows,
    upcast_reductions,
)
from svod.device import DeviceCaps
from svod.device.launch import evaluate, most
from svod.errors import GraphError
from svod.frontend.oracle import run_as_python
from svod.ir import simplify, substitute
from svod.ir.ops import CONTINUED, FUSED, REASSOCIABLE
from svod.ir.uop import param_size
from svod.ir.validate import kernel_label, validate
from svod.workloads import conv2d, gather, matmul, matmul_py, resize_py, softmax, transpose
from tests.helpers import cpu_device, evaluate_expression, open_device, refuses
from tests.kernels import attention


def _matmul(n=16, dtype=dtypes.float32):
    k = KernelBuilder("mm")
    c, a, b = (k.buffer(dtype, n * n) for _ in range(3))
    i, j = k.range(n), k.range(n)
    r = k.range(n, AxisKind.REDUCE)
    k.store(c[i * n + j], (a[i * n + r] * b[r * n + j]).reduce(r))
    return k.build()


def _lowered(ast, threads=1):
    return simplify(split_for_threads(simplify(ast), threads))


def test_linearizing_leaves_no_reduce():
    ops = {u.op for u in linearize(_matmul())}
    assert Ops.REDUCE not in ops and Ops.DEFINE_REG in ops


def test_every_range_has_one_end_and_loops_nest():
    linear = linearize(_lowered(_matmul()))
    stack = []
    for u in linear:
        if u.op is Ops.RANGE:
            stack.append(u)
        elif u.op is Ops.END:
            assert stack.pop() is u.src[0]
    assert not stack
    assert [u.arg[0] for u in linear if u.op is Ops.RANGE] == [0, 1, 2]


def test_each_node_is_placed_inside_every_range_it_uses():
    open_loops: list[UOp] = []
    seen: set[UOp] = set()
    for u in linearize(_lowered(_matmul())):
        if u.op is Ops.END:
            open_loops.pop()
            continue
        assert all(s in open_loops for s in u.src if s.op is Ops.RANGE)
        assert all(s in seen for s in u.src if s.op not in (Ops.CONST, Ops.DEFINE_VAR, Ops.PARAM)) or u.op is Ops.PARAM
        seen.add(u)
        if u.op is Ops.RANGE:
            open_loops.append(u)


def test_loop_invariant_values_are_hoisted():
    k = KernelBuilder("hoist")
    out, x, y = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i, j = k.range(8), k.range(8)
    k.store(out[i * 8 + j], x[j] * y[i].sqrt())
    linear = linearize(_lowered(k.build()))
    inner = next(u for u in linear if u.op is Ops.RANGE and u.arg[0] == 1)
    sqrt = next(u for u in linear if u.op is Ops.SQRT)
    assert linear.index(sqrt) < linear.index(inner)


@pytest.mark.parametrize(("chunks_per_thread", "pieces", "counts"), [
    (1, 3, (1, 1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3)),
    (CHUNKS_PER_THREAD, 9, (1, 1, 1, 1, 1, 1, 1, 2, 3, 3, 6, 9))])
def test_thread_split_covers_the_range_exactly(chunks_per_thread, pieces, counts):
    """The ids a launch runs (as many as have ``THREAD_MIN_WORK`` iterations each, up to 3 threads, then a
    multiple of 3, ``chunks_per_thread`` a thread at most) cover the range between them, each index once, and
    the ids it does not run have nothing to do. (Four chunks a thread would reach further past 2**20 than one
    does: three a thread.)"""
    k = KernelBuilder("fill")
    n = k.var("n", 1, 1 << 20)
    out = k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], i.cast(dtypes.int32))
    split, workers = thread_split(k.build(), 3, chunks_per_thread)
    assert workers is not None
    core = next(u for u in split.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_id")
    assert core.arg == ("core_id", 0, pieces - 1)
    turn = next(u for u in split.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP)  # the chunks
    loop = next(u for u in split.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL)
    store = next(e for e in split.src if e.op is Ops.STORE)
    named = {turn: UOp.define_var("turn", 0, pieces), loop: UOp.define_var("i", 0, 1 << 20)}
    first, count = substitute(store.src[0].src[1], named), substitute(loop.src[0], named)

    sizes = (1, 2, 47, 48, 49, 1000, THREAD_MIN_WORK, THREAD_MIN_WORK + 1, 2 * THREAD_MIN_WORK + 1,
             4 * THREAD_MIN_WORK + 1, 6 * THREAD_MIN_WORK + 1, 1 << 20)
    woken = {}
    for size in sizes:
        woken[size] = evaluate_expression(workers, {"n": size})
        covered = []
        for c in range(pieces):
            for t in range(evaluate_expression(turn.src[0], {"n": size, "core_id": c})):
                env = {"n": size, "core_id": c, "turn": t, "i": 0}
                at, length = evaluate_expression(first, env), evaluate_expression(count, env)
                assert c < woken[size] or length <= 0, (size, c)
                covered.extend(range(at, at + max(length, 0)))
        assert covered == list(range(size))
    assert woken == dict(zip(sizes, counts, strict=True))


def test_a_chunk_starts_at_its_loop_index_times_the_chunk_length():
    """Where the sizes are variables, the loop over the chunks is unclamped: a chunk starts at the loop's
    index times the chunk length (LLVM recomputed a start clamped by a MIN of the loop's index in the loop
    over the chunk's elements), and the chunk's length alone says whether the id runs it."""
    k = KernelBuilder("fill")
    n = k.var("n", 1, 1 << 20)
    out = k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], i.cast(dtypes.int32))
    split, workers = thread_split(k.build(), 2)
    assert workers is not None
    split = simplify(split)
    piece = next(u for u in split.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP)
    inner = next(u for u in split.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL)
    store = next(e for e in split.src if e.op is Ops.STORE)
    start = substitute(store.src[0].src[1], {inner: UOp.index_const(0)})
    assert piece.src[0].op is Ops.CONST
    assert not [u for u in start.toposort() if u.op in (Ops.MIN, Ops.MAX, Ops.WHERE) and piece in u.toposort()]
    for size in (1, 17, 100_003, 1 << 20):
        starts = [evaluate_expression(substitute(start, {piece: UOp.index_const(q)}), {"n": size})
                  for q in range(int(piece.src[0].arg))]
        assert starts == [q * starts[1] for q in range(len(starts))] and starts[1] >= 16


@pytest.mark.parametrize(("longest", "pieces"), [(1 << 20, 8), (1_000_000, 4), (1_000_016, 6)])
def test_chunks_reach_no_further_past_the_range_than_one_chunk_a_thread(longest, pieces):
    """An index's bounds are the chunks' reach: 8 chunks of up to 1000000 elements, each rounded up to 16, reach
    1000064, past the 1000000 of two, so the range is cut in 4 (a symbolic batched matmul's offset passed what
    a proof expands, by 2 of a reach of 1664512); 1000016 reaches 1000032 in 2 and in 6, 1000064 in 8."""
    k = KernelBuilder("fill")
    n = k.var("n", 1, longest)
    out = k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], i.cast(dtypes.int32))
    split, _ = thread_split(k.build(), 2)
    core = next(u for u in split.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_id")
    assert core.arg == ("core_id", 0, pieces - 1)


def test_a_launch_counts_the_work_of_each_index_of_the_split_range():
    """The DP sweep's diagonal ``d``: ``n - d`` cells, each a MAX over ``d - 1`` splits. Its first and last
    diagonals are too small for a second worker; the middle ones are not."""
    k = KernelBuilder("diagonal")
    n = 1000
    d = k.var("d", 1, n - 1)
    table = k.buffer(dtypes.int32, (n, n))
    i = k.range(n - d)
    r = k.range(d - 1, AxisKind.REDUCE)
    k.store(table[i, i + d], (table[i, i + 1 + r] + table[i + 2 + r, i + d]).reduce(r, op=Ops.MAX))
    _, workers = thread_split(k.build(), 2, chunks_per_thread=1)
    assert workers is not None
    counts = {diagonal: evaluate_expression(workers, {"d": diagonal}) for diagonal in (1, 2, 30, 40, 500, 960, 999)}
    assert counts == {1: 1, 2: 1, 30: 1, 40: 2, 500: 2, 960: 2, 999: 1}  # (n - d) * (d - 1) > 32768 from d = 35


def test_a_launch_adds_the_work_of_effects_that_share_the_split_range():
    """Two effects over the split range: their iterations add up, and one whose own range is empty (an edge
    tile's, where the tiles fit) adds nothing."""
    k = KernelBuilder("rows_and_edge")
    n, m = k.var("n", 1, 1 << 20), k.var("m", 0, 64)
    out, edge = k.buffer(dtypes.int32, (n, 16)), k.buffer(dtypes.int32, (n, 64))
    i, j, e = k.range(n), k.range(16), k.range(m)
    k.store(out[i, j], j.cast(dtypes.int32))
    k.store(edge[i, e], e.cast(dtypes.int32))
    _, workers = thread_split(k.build(), 2, chunks_per_thread=1)
    assert workers is not None
    counts = {(rows, left): evaluate_expression(workers, {"n": rows, "m": left})
              for rows, left in ((2048, 0), (2049, 0), (410, 64), (411, 64))}
    # a worker per ceil(32768 / (16 + m)) rows: 2048 of them at m = 0 (1928, were the empty range one turn),
    # 410 at m = 64
    assert counts == {(2048, 0): 1, (2049, 0): 2, (410, 64): 1, (411, 64): 2}


def test_a_launch_counts_effects_in_the_same_ranges_as_one_loop_nest():
    """The rows of a register tile are stores in the same ranges, one loop nest: 4 rows of 256 columns over
    ``n`` tiles are 256 iterations a tile, not 1024 (a symbolic 256x256x10 dense layer woke two workers for
    its 0.65 MFLOP, and ran 151 us against 89 on one)."""
    k = KernelBuilder("tile_rows")
    n = k.var("n", 1, 1 << 20)
    out = k.buffer(dtypes.int32, (n, 4, 256))
    i, j = k.range(n), k.range(256)
    for row in range(4):
        k.store(out[i, row, j], j.cast(dtypes.int32))
    _, workers = thread_split(k.build(), 2, chunks_per_thread=1)
    assert workers is not None
    assert {size: evaluate_expression(workers, {"n": size}) for size in (64, 128, 129)} == {64: 1, 128: 1, 129: 2}


@pytest.mark.parametrize(("chunks_per_thread", "most"), [(1, 8), (CHUNKS_PER_THREAD, 8 * CHUNKS_PER_THREAD)])
def test_constant_sizes_get_as_many_workers_as_have_work(chunks_per_thread, most):
    """Up to 8 threads, an id for each ``THREAD_MIN_WORK`` iterations; past 8, a multiple of 8 (20 of them
    make 16 ids), ``chunks_per_thread`` a thread at most; a range too short for that many aligned chunks
    (``8 * 16 * 2`` indices) makes as many as it holds."""
    def fill(size: int) -> UOp:
        k = KernelBuilder("fill")
        out = k.buffer(dtypes.int32, size)
        i = k.range(size)
        k.store(out[i], i.cast(dtypes.int32))
        return k.build()

    multiple = min(most, 16)
    for size, threads in ((THREAD_MIN_WORK, None), (THREAD_MIN_WORK + 16, 2), (20 * THREAD_MIN_WORK, multiple),
                          (1 << 20, most)):
        split, workers = thread_split(fill(size), 8, chunks_per_thread)
        assert workers is None  # a number: the kernel's core_id says it
        cores = [u.arg for u in split.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_id"]
        assert cores == ([] if threads is None else [("core_id", 0, threads - 1)])


def test_a_range_too_short_for_aligned_chunks_is_split_in_chunks_of_any_length():
    """A sort's 8 blocks of keys, each a sequential loop of its own, are the kernel's one parallel range: no
    chunk of 16 is left for a second worker, so the workers take 4 blocks each, every block once."""
    k = KernelBuilder("blocks")
    out, keys = k.buffer(dtypes.int64, 8), k.buffer(dtypes.int64, 8 << 13)
    b, i = k.range(8), k.range(1 << 13, AxisKind.REDUCE)
    k.store(out[b], keys[b * (1 << 13) + i].reduce(i))
    split, workers = thread_split(k.build(), 2)
    assert workers is None
    core = next(u for u in split.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_id")
    assert core.arg == ("core_id", 0, 1)
    store = next(e for e in split.src if e.op is Ops.STORE)
    chunk = next(u for u in split.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL)
    at = substitute(store.src[0].src[1], {chunk: UOp.define_var("turn", 0, 7)})
    covered = [evaluate_expression(at, {"core_id": c, "turn": t})
               for c in range(2) for t in range(evaluate_expression(chunk.src[0], {"core_id": c}))]
    assert sorted(covered) == list(range(8))


def test_a_reduce_range_outside_its_reduce_is_an_error():
    k = KernelBuilder("stray")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 16)
    i = k.range(4)
    r = k.range(4, AxisKind.REDUCE)
    k.store(out[i], x[i * 4 + r] + x[i * 4 + r].reduce(r))
    with pytest.raises(GraphError, match="outside a REDUCE") as info:
        svod.compile(k.build())
    assert info.value.kernel == "stray"


def test_c_source_reads_buffers_and_variables_by_position():
    k = KernelBuilder("args")
    n = k.var("n", 1, 10)
    out, x = k.buffer(dtypes.int32, n), k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], x[i] + 1)
    src = CRenderer("CPU").render(k.build()).src
    assert "bufs[0]" in src and "bufs[1]" in src and "vars[0]" in src and "svod_args" in src


def _add_into(out_dtype=dtypes.float32):
    k = KernelBuilder("add_into")
    out, a, b = k.buffer(out_dtype, 64), k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, 64)
    i = k.range(64)
    k.store(out[i], (a[i] + b[i]).cast(out_dtype))
    return k.build()


def test_cpu_code_says_a_written_buffer_shares_no_memory_with_another():
    """The runtime refuses such arguments, so the compilers may vectorise without checking overlap: C's
    ``restrict``, and LLVM alias scopes in which the two buffers only read may alias each other."""
    assert CRenderer("CPU").render(_add_into()).src.count("* restrict data") == 3
    src = LLVMRenderer("CPU").render(_add_into()).src
    lists = {name: re.findall(r"!\d+", body) if "distinct" not in body else []
             for name, body in re.findall(r"^(!\d+) = (.*)$", src, re.M)}
    accesses = [(kind, lists[scope], lists[apart]) for kind, scope, apart in
                re.findall(r"(load|store) float.*, !alias.scope (!\d+), !noalias (!\d+)", src)]
    (written,) = (scope for kind, scope, _ in accesses if kind == "store")
    read = [scope for kind, scope, _ in accesses if kind == "load"]
    assert len(read) == 2 and len({*written, *read[0], *read[1]}) == 3
    for kind, _, apart in accesses:  # the two read buffers may alias each other, never the written one
        assert apart == (read[0] + read[1] if kind == "store" else written)


@svod.kernel
def stretch(out, image):
    """Each pixel from the image's pixel at the same place, clamped to its last row and column (as a resize
    clamps its source pixels): in the image wherever it has a row and a column, which only a launch knows."""
    for y in svod.prange(out.shape[0]):
        for x in svod.prange(out.shape[1]):
            out[y, x] = image[max(min(y, image.shape[0] - 1), 0), max(min(x, image.shape[1] - 1), 0)]


def test_rows_share_what_a_resize_computes_from_its_columns_alone():
    """A resize's source column and weights (a division, conversions, clamps) depend on its column only: eight
    rows a pass compute them once (the edge store takes the rows left). A copy's column work (a clamp of two
    ops) and a sum are not tiled so."""
    resize = simplify(resize_py.build(np.zeros((22, 8), np.float32), np.zeros((11, 4), np.float32)))
    assert len(share_rows(resize).src) == SHARED_ROWS + 1
    copy = simplify(stretch.bind(np.zeros((8, 8), np.float32), np.zeros((8, 8), np.float32)).ast)
    sums = simplify(_rows_times_vector(16, 64))
    assert share_rows(copy) is copy and share_rows(sums) is sums


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("static", [True, False])
def test_rows_sharing_column_work_compute_what_python_does(compiler, static):
    """The resize at edge sizes (1 to 23 rows: fewer than a tile, none left by the tiles or up to seven; one
    column), the kernel against itself run as plain Python."""
    device = open_device(compiler)
    kernel = resize_py if static else svod.kernel(resize_py.fn)
    for rows, cols in [(1, 1), (2, 5), (3, 3), (5, 2), (7, 16), (8, 1), (9, 9), (16, 3), (23, 4)]:
        image = np.random.default_rng(rows * 10 + cols).standard_normal((max(rows // 2, 1), cols)).astype(np.float32)
        out = np.full((rows, 2 * cols), np.nan, np.float32)
        (want, _) = run_as_python(kernel, out, image)
        kernel(out, image, device=device)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_llvm_runs_a_copy_without_the_gates_that_hold_for_the_whole_launch():
    """The reads of ``stretch`` are in the image for every launch with a non-empty image: LLVM's code runs
    a copy of the kernel without their gates when they hold (which its loop vectoriser can widen), and the
    gated kernel when they do not, where a read past the image is reported, as Python raises."""
    image = np.arange(14, dtype=np.float32).reshape(2, 7)
    src = LLVMRenderer("CPU").render(stretch.bind(np.zeros((3, 5), np.float32), image).ast).src
    ungated, gated = src.split("\nungated:\n")[1].split("\ngated:\n")
    assert not re.search(r"label %\S+\.on,", ungated) and re.search(r"label %\S+\.on,", gated)
    # the read's index is where(image not empty, y * w + x, -1): in the copy, the image is not empty; and the
    # column, clamped by the kernel itself, is not clamped again
    outside = r"select i1 %\S+, i64 %\S+, i64 -1"
    assert not re.search(outside, ungated) and re.search(outside, gated)
    assert len(re.findall(r"icmp sgt i64 %\S+, 0", ungated)) == 2
    for pair in ("llvm", "clang"):
        device = open_device(pair)
        for rows, cols, image_rows, image_cols in [(3, 5, 2, 7), (6, 1, 1, 1), (1, 9, 4, 3), (0, 4, 0, 0)]:
            image = np.random.default_rng(rows).standard_normal((image_rows, image_cols)).astype(np.float32)
            out = np.full((rows, cols), np.nan, np.float32)
            stretch(out, image, device=device)
            want = image[np.minimum(np.arange(rows), image_rows - 1)[:, None],
                         np.minimum(np.arange(cols), image_cols - 1)]
            np.testing.assert_array_equal(out, want)
        for image_rows, image_cols in [(0, 3), (3, 0)]:
            with pytest.raises(svod.errors.IndexOutOfBoundsError):
                stretch(np.zeros((2, 2), np.float32), np.zeros((image_rows, image_cols), np.float32), device=device)


@svod.kernel
def count_into(counts, values):
    for i in svod.prange(values.shape[0]):
        svod.atomic_add(counts, values[i], 1)


def test_llvm_copies_a_histogram_with_its_private_path_taken_and_tells_llvm_each_variables_bounds():
    """A histogram has two paths, chosen for the whole launch: private copies of its bins where they fit,
    global atomics where they do not. The ungated copy takes the first (requiring both, a gate and its
    negation, it never ran). Each variable's load carries its bounds as ``!range``: with ``0 <= bins`` known,
    ``0 <= v < bins`` is one unsigned compare."""
    values = np.array([3, 0, 3, 7, 2], np.int32)
    src = LLVMRenderer("CPU").render(count_into.bind(np.zeros(8, np.int32), values).ast).src
    branch = re.search(r"br i1 (\S+), label %ungated, label %gated", src)
    assert branch is not None
    assert re.search(rf"{re.escape(branch.group(1))} = icmp sle i64 %var.counts_shape0.raw, \d+", src)
    ranges = dict(re.findall(r"^(!\d+) = !\{i64 (-?\d+), i64 -?\d+\}$", src, re.M))
    loads = re.findall(r"%var\.(\w+)\.raw = load i64, ptr \S+ align 8, !range (!\d+)", src)
    assert sorted(name for name, _ in loads) == ["counts_shape0", "values_shape0"]
    assert all(ranges[node] == "0" for _, node in loads)
    for pair in ("llvm", "clang"):
        for bins in (8, PRIVATE_BYTES // 4 + 1):  # private copies; too many bins for them: global atomics
            counts = np.zeros(bins, np.int32)
            count_into(counts, values, device=open_device(pair))
            np.testing.assert_array_equal(counts, np.bincount(values, minlength=bins))


def test_llvm_unrolls_the_loop_of_a_register_tile_and_leaves_a_plain_sum_to_the_vectoriser():
    def unrolled(src):
        hints = dict(re.findall(r"^(!\d+) = distinct !\{!\d+, (!\d+)\}$", src, re.M))
        counts = dict(re.findall(r'^(!\d+) = !\{!"llvm.loop.unroll.count", i32 (\d+)\}$', src, re.M))
        return [int(counts[hints[loop]]) for loop in re.findall(r"br label %loop\d+.head, !llvm.loop (!\d+)", src)
                if hints[loop] in counts]

    assert unrolled(LLVMRenderer("CPU").render(_matmul(64)).src) == [TILE_UNROLL]
    k = KernelBuilder("sums")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, 256))
    i, j = k.range(4), k.range(256, AxisKind.REDUCE)
    k.store(out[i], x[i, j].reduce(j))
    assert unrolled(LLVMRenderer("CPU").render(k.build()).src) == []
    both = softmax(4, 128).steps[0].ast  # a split MAX (eight partials) and a plain sum
    assert unrolled(LLVMRenderer("CPU").render(both).src) == [TILE_UNROLL]
    conv = conv2d(16, 64).steps[0].ast  # the channels' loop, ky's (3 steps) and kx's (3), innermost first
    assert unrolled(LLVMRenderer("CPU").render(conv).src) == [TILE_UNROLL, TILE_UNROLL // 3, 1]
    avx512 = LLVMRenderer("CPU", dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=32))
    assert unrolled(avx512.render(_matmul(64)).src) == [TILE_UNROLL // 2]  # 8x32 accumulators: half the steps
    k = KernelBuilder("matmul_of_n")  # over a symbolic depth, an 8x32 tile's loop is not unrolled, its edges' are
    n = k.var("n", 1, 1024)
    c, a, b = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    i, j, r = k.range(n), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(c[i, j], (a[i, r] * b[r, j]).reduce(r))
    assert unrolled(avx512.render(k.build()).src)[0] == 1
    assert set(unrolled(avx512.render(k.build()).src)[1:]) == {TILE_UNROLL // 2}
    avx2 = LLVMRenderer("CPU", dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=16))
    assert set(unrolled(avx2.render(k.build()).src)) == {TILE_UNROLL // 2}  # 4x16 accumulators: half as far
    k = KernelBuilder("matmul_with_edges")  # the 8x32 tile's loop counts its own 256 updates, not the edge tiles'
    c, a, b = k.buffer(dtypes.float32, (64, 70)), k.buffer(dtypes.float32, (64, 64)), k.buffer(dtypes.float32, (64, 70))
    i, j, r = k.range(64), k.range(70), k.range(64, AxisKind.REDUCE)
    k.store(c[i, j], (a[i, r] * b[r, j]).reduce(r))
    assert unrolled(avx512.render(k.build()).src)[0] == TILE_UNROLL // 2


def test_a_tile_prefetches_the_rows_of_b_it_strides_over():
    """A matmul whose rows of ``b`` are 2 KiB apart: its tile loop prefetches the row 8 steps ahead, once
    per cache line of the tile's columns; ``a`` (one element a step) and rows 256 bytes apart are left to
    the CPU's own prefetcher."""
    avx512 = dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=32)
    src = LLVMRenderer("CPU", avx512).render(_matmul(512)).src
    ahead = re.findall(r"getelementptr float, ptr %\S+, i64 (\d+)", src)
    assert ahead == [str(8 * 512)] * 2  # 32 float32 columns: two lines
    assert src.count("call void @llvm.prefetch.p0") == 2
    assert "llvm.prefetch" not in LLVMRenderer("CPU", avx512).render(_matmul(64)).src


def test_a_tile_prefetches_rows_of_b_a_variable_apart():
    """Rows of ``b`` ``n`` elements apart, ``n`` a variable that may reach 1024: the prefetch is ``8 * n``
    elements ahead, computed from the variable where the load is."""
    k = KernelBuilder("matmul_of_n")
    n = k.var("n", 1, 1024)
    c, a, b = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    i, j, r = k.range(n), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(c[i, j], (a[i, r] * b[r, j]).reduce(r))
    avx2 = dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=16)
    src = LLVMRenderer("CPU", avx2).render(k.build()).src
    ahead = re.findall(r"^  (%\S+) = getelementptr float, ptr %\S+, i64 (%\S+)$", src, re.M)
    assert ahead and src.count("call void @llvm.prefetch.p0") == len(ahead)
    for _, distance in ahead:
        assert re.search(rf"^  {re.escape(distance)} = mul i64 8, %var\.n\.raw$", src, re.M)


@pytest.mark.parametrize("symbolic", [False, True])
def test_a_rows_first_pass_prefetches_the_row_two_ahead(symbolic):
    """Softmax's rows of 1024 float32 (a page each, where the CPU's own prefetcher stops): the maximum's loop,
    64 floats a turn, prefetches each of the four cache lines it reads two rows ahead; the passes after it
    over the same row (the ``exp``, the sum, the division), and the output, do not."""
    k = KernelBuilder("softmax_rows")
    rows, cols = (k.var("rows", 1, 4096), k.var("cols", 1, 4096)) if symbolic else (64, 1024)
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    i, r1, r2, c = k.range(rows), k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE), k.range(cols)
    top = x[i, r1].reduce(r1, op=Ops.MAX)
    total = (x[i, r2] - top).exp().reduce(r2)
    k.store(out[i, c], (x[i, c] - top).exp() / total)
    avx512 = dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=32)
    src = LLVMRenderer("CPU", avx512).render(k.build()).src
    prefetched = re.findall(r"^  (%\S+)\.ahead = getelementptr float, ptr \1, i64 (\S+)$", src, re.M)
    assert len(prefetched) == src.count("call void @llvm.prefetch.p0(ptr") == 4  # the partials' 4 lines a turn
    for name, distance in prefetched:
        assert re.search(rf"^  {re.escape(name)} = getelementptr inbounds float, ptr %data1,", src, re.M)  # x
        assert (re.search(rf"^  {re.escape(distance)} = mul i64 2, %var\.cols\.raw$", src, re.M) if symbolic
                else distance == str(2 * 1024))


def test_only_the_first_pass_over_a_row_prefetches():
    """A row's range (its maximum minus its minimum): two loops read the row 64 floats a turn, and only the
    first prefetches; the second finds the row in cache."""
    k = KernelBuilder("row_range")
    out, x = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, (64, 1024))
    i, r1, r2 = k.range(64), k.range(1024, AxisKind.REDUCE), k.range(1024, AxisKind.REDUCE)
    k.store(out[i], x[i, r1].reduce(r1, op=Ops.MAX) - x[i, r2].reduce(r2, op=Ops.MIN))
    avx512 = dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=32)
    src = LLVMRenderer("CPU", avx512).render(k.build()).src
    assert src.count("call void @llvm.prefetch.p0(ptr") == 4


def test_llvm_prefers_512_bit_vectors_where_the_cpu_has_them():
    """LLVM's default for most AVX-512 CPUs is 256 bits, which would split each row of a wide tile in four."""
    assert '"prefer-vector-width"="512"' in function_attributes("sapphirerapids", "+avx2,+avx512f,+fma")
    assert "prefer-vector-width" not in function_attributes("znver3", "+avx2,+fma,-avx512f")
    assert function_attributes("", "") == ""


@svod.kernel
def crc_bits(out, data, poly):
    """CRC-16 a bit at a time: an ``if`` on data in a sequential loop, if-converted to a select."""
    crc = 0xFFFF
    for i in range(data.shape[0]):
        byte = 0xFF & data[i]
        for _ in range(8):
            if (crc & 1) ^ (byte & 1):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            byte >>= 1
    out[0] = crc


@svod.kernel
def odd_zeroed(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] if i % 2 else 0.0


def test_llvm_marks_a_select_on_data_unpredictable_and_a_select_on_indices_not():
    """A select whose condition is read from memory carries ``!unpredictable``, so that x86's code generator
    keeps it a conditional move rather than a branch mispredicted on half the data; one on indices alone does
    not. The CRC is Python's for every length (none, one byte, a prime count) and for a negative polynomial."""
    data = np.random.default_rng(7).integers(0, 256, 1000).astype(np.uint8)
    src = LLVMRenderer("CPU").render(crc_bits.bind(np.zeros(1, np.int64), data, 0x8408).ast).src
    node = re.search(r"^(!\d+) = !\{\}$", src, re.M)
    assert node is not None
    assert re.search(rf"= select i1 %\S+, i64 %\S+, i64 %\S+, !unpredictable {node.group(1)}$", src, re.M)
    zeroed = LLVMRenderer("CPU").render(odd_zeroed.bind(np.zeros(9, np.float32), np.ones(9, np.float32)).ast).src
    assert "select" in zeroed and "!unpredictable" not in zeroed
    device = open_device("llvm")
    for length, poly in [(0, 0x8408), (1, 0x8408), (13, 0x8408), (1000, 0x8408), (13, -0x1021)]:
        out = np.zeros(1, np.int64)
        want = run_as_python(crc_bits, out.copy(), data[:length], poly)[0]
        crc_bits(out, data[:length], poly, device=device)
        assert out[0] == want[0]
        python = 0xFFFF
        for byte in data[:length].tolist():
            for _ in range(8):
                python = (python >> 1) ^ poly if (python ^ byte) & 1 else python >> 1
                byte >>= 1
        assert out[0] == python




def test_reductions_over_one_range_share_a_loop():
    k = KernelBuilder("sum_and_max")
    total, top, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 4 * 9)
    r = k.range(4)
    c = k.range(9, AxisKind.REDUCE)
    k.store(total[r], x[r * 9 + c].reduce(c))
    k.store(top[r], x[r * 9 + c].reduce(c, op=Ops.MAX))
    linear = linearize(k.build())
    loops = [u for u in linear if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE]
    ends = [u for u in linear if u.op is Ops.END and u.src[0] in loops]
    assert len(loops) == 1 and len(ends[0].src) == 3


@pytest.mark.parametrize("name", ["llvm", "clang", "PYTHON", "CL:0", "CUDA:0"])
def test_a_reduction_needing_another_over_the_same_range_gets_its_own_loop(name):
    k = KernelBuilder("softmax_denominator")
    out, x = k.buffer(dtypes.float32, 3), k.buffer(dtypes.float32, 3 * 5)
    r = k.range(3)
    c = k.range(5, AxisKind.REDUCE)
    biggest = x[r * 5 + c].reduce(c, op=Ops.MAX)
    k.store(out[r], (x[r * 5 + c] - biggest).exp2().reduce(c))
    ast = k.build()
    loops = [u for u in linearize(_lowered(ast)) if u.op is Ops.RANGE]
    assert len(loops) == 3
    data = np.random.default_rng(0).standard_normal(15).astype(np.float32)
    expected = np.exp2(data.reshape(3, 5) - data.reshape(3, 5).max(axis=1, keepdims=True)).sum(axis=1)
    got = np.zeros(3, np.float32)
    svod.run(ast, [got, data], device=open_device(name))  # a device missing here is a skip that says so
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_matmul_outputs_are_upcast_along_the_unit_stride_range():
    upcast = upcast_reductions(_matmul(64))
    stores = [u for u in upcast.src if u.op is Ops.STORE]
    assert len(stores) == 16 * 4
    linear = linearize(upcast)
    assert len([u for u in linear if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE]) == 1
    assert len(upcast_reductions(_matmul(17)).src) == 1


def _short_rows(most):
    k = KernelBuilder("short_rows")
    n = k.var("n", 1, most)
    out, x, y = k.buffer(dtypes.float32, 3 * n), k.buffer(dtypes.float32, 3 * n), k.buffer(dtypes.float32, n)
    i, j, r = k.range(3), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(out[i * n + j], (x[i * n + j] * y[r]).reduce(r))
    return k.build()


def test_a_symbolic_range_is_tiled_by_a_width_it_may_hold_twice():
    """``n <= 7`` columns in tiles of 4 would be one tile or none: bounds fold the loop over the tiles (at
    most one turn) away from the values the tile computes, which would then be computed, and their loads
    made, where no tile runs (4 columns of a row of 1). A CPU tiles it only by a width it may hold twice."""
    for registers in (16, 32):
        assert len(tile_for_cpu(simplify(_short_rows(7)), registers).src) == 1
        tiled = tile_for_cpu(simplify(_short_rows(15)), registers)  # 4 tiles of 4 columns (0 to 3 of them)
        assert len(tiled.src) == 4 + 1  # and a store over the columns left


def test_tiles_of_a_range_that_may_turn_zero_times_do_not_run(device):
    """Columns ``n`` up to 7 tile on a GPU as ``ceil(n / 4)`` masked tiles of 4: with ``n`` below 4 no column
    past a row's ``n`` is written (the tiles' range, folded by its bounds to index 0, once stored 4 columns
    of each 1-column row)."""
    k = KernelBuilder("short_rows")
    n = k.var("n", 1, 7)
    out, x, y = k.buffer(dtypes.float32, 3 * n), k.buffer(dtypes.float32, 3 * n), k.buffer(dtypes.float32, n)
    i, j, r = k.range(3), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(out[i * n + j], (x[i * n + j] * y[r]).reduce(r))  # loads at unit stride along j: tiled along it
    ast = k.build()
    for cols in range(1, 8):
        x_value, y_value = np.arange(21, dtype=np.float32), np.arange(1, 8, dtype=np.float32)
        got = np.full(21, -7.0, np.float32)
        svod.run(ast, [got, x_value, y_value], device=device, n=cols)
        want = np.full(21, -7.0, np.float32)
        want[:3 * cols] = x_value[:3 * cols] * y_value[:cols].sum()
        np.testing.assert_array_equal(got, want, err_msg=f"n={cols}")


def test_edges_keep_a_matmul_on_its_tiles():
    """With ``edges`` (the CPU's tiling), 17 columns are a tile of 16 and an edge column, 17 rows tiles of 4
    and an edge row: 16 x 4 stores in the tiles, then 16 on the edge row, 4 on the edge column and 1 in
    the corner, the tiles first and as they were where the sizes divide."""
    tiled = upcast_reductions(_matmul(17), edges=True)
    assert len([u for u in tiled.src if u.op is Ops.STORE]) == 16 * 4 + 16 + 4 + 1
    assert upcast_reductions(_matmul(64), edges=True) is upcast_reductions(_matmul(64))
    sizes = sorted(u.src[0].arg for u in tiled.toposort() if u.op is Ops.RANGE and u.src[0].op is Ops.CONST)
    assert sizes == [1, 1, 1, 4, 17]  # edge row, edge column, tile columns, tile rows, the reduction
    symbolic = KernelBuilder("mm_n")
    n = symbolic.var("n", 1, 100)
    c, a, b = (symbolic.buffer(dtypes.float32, (n, n)) for _ in range(3))
    i, j, r = symbolic.range(n), symbolic.range(n), symbolic.range(n, AxisKind.REDUCE)
    symbolic.store(c[i, j], (a[i, r] * b[r, j]).reduce(r))
    assert len(upcast_reductions(symbolic.build(), edges=True).src) == 16 * 4 + 16 + 4 + 1
    assert len(upcast_reductions(symbolic.build()).src) == 1


def test_masked_tiles_cover_an_odd_matmul_without_edge_stores():
    """With ``masked`` (a GPU's tiling), 17 columns are 2 tiles of 16 and 17 rows 5 tiles of 4: 16 x 4 stores,
    each gated where its column or row may pass the end, and its loads of ``b`` (which depend on the
    column) gated with it; the loads of ``a`` a tile's columns share are not."""
    tiled = upcast_reductions(_matmul(17), masked=True)
    stores = [u for u in tiled.src if u.op is Ops.STORE]
    assert len(stores) == 16 * 4 and all(len(s.src[0].src) == 3 for s in stores)
    assert sorted(int(u.src[0].vmax) for u in tiled.toposort() if u.op is Ops.RANGE) == [2, 5, 17]
    gated = {u.src[0].src[0].arg: len(u.src[0].src) == 3 for u in tiled.toposort() if u.op is Ops.LOAD}
    assert gated == {1: True, 2: True}  # a by row, b by column
    a_loads = {u for u in tiled.toposort() if u.op is Ops.LOAD and u.src[0].src[0].arg == 1}
    assert len(a_loads) == 4 * 1  # one per row of the tile (each over the tile's k), shared by its 16 columns
    assert upcast_reductions(_matmul(64), masked=True) is upcast_reductions(_matmul(64))


def _scores(length: int, width: int):
    """Attention's scores, ``q[i, d] * k[j, d]``: no output range read at unit stride."""
    k = KernelBuilder("scores")
    out, q, key = k.buffer(dtypes.float32, (length, length)), *(k.buffer(dtypes.float32, (length, width)) for _ in "qk")
    i, j, d = k.range(length), k.range(length), k.range(width, AxisKind.REDUCE)
    k.store(out[i, j], (q[i, d] * key[j, d]).reduce(d))
    return k.build()


def test_a_gpu_tiles_a_sum_read_at_no_unit_stride_by_the_loads_it_shares():
    """On a GPU (``masked``), a tile of 16 ``j`` by 4 ``i`` shares each ``q[i, d]`` among 16 outputs and each
    ``k[j, d]`` among 4, where no output is read at unit stride; a CPU, which tiles for vector loads,
    leaves it alone."""
    tiled = upcast_reductions(_scores(64, 8), masked=True)
    assert len([u for u in tiled.src if u.op is Ops.STORE]) == 16 * 4
    loads = Counter(u.src[0].src[0].arg for u in tiled.toposort() if u.op is Ops.LOAD)
    assert loads == {1: 4, 2: 16}
    assert upcast_reductions(_scores(64, 8), edges=True) is upcast_reductions(_scores(64, 8))


def _odd_matmul(dtype, shape, transposed, batch):
    """``out[h, i, j] = sum_r a[h, i, r] * b[h, r, j] + 1`` (``b[h, j, r]`` transposed), of constant sizes
    ``shape``, or symbolic ones where it is None."""
    k = KernelBuilder("mm_odd")
    m, n, depth = shape or (k.var("m", 1, 70), k.var("n", 1, 70), k.var("k", 1, 70))
    out, a = k.buffer(dtype, (batch, m, n)), k.buffer(dtype, (batch, m, depth))
    b = k.buffer(dtype, (batch, n, depth) if transposed else (batch, depth, n))
    h, i, j, r = k.range(batch), k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(out[h, i, j], (a[h, i, r] * (b[h, j, r] if transposed else b[h, r, j])).reduce(r) + 1.0)
    return k.build()


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("transposed", "batch"), [(False, 1), (True, 3)], ids=["b", "batched b.T"])
def test_matmuls_with_edges_match_numpy(compiled_device, dtype, transposed, batch):
    """Edge tiles on the CPU, and each GPU's lowering of a matmul (staged in local memory, or upcast):
    every size below, past and between the tiles (1, primes, 4, 8, 16 and 32 plus and minus one), constant and
    symbolic, batched and with ``b`` transposed, on every device that holds the type."""
    device = compiled_device
    symbolic = _odd_matmul(dtype, None, transposed, batch)
    if refuses(device, dtype):
        with pytest.raises(GraphError, match=dtype.name):
            svod.compile(symbolic, device)
        return
    rng = np.random.default_rng(0)
    element = np.float32 if dtype == dtypes.float32 else np.float64
    shapes = [(19, 37, 6), (1, 1, 1), (1, 17, 3), (17, 1, 5), (3, 15, 2), (5, 33, 7), (65, 63, 1),
              (9, 31, 4), (8, 64, 9), (70, 70, 70)]
    for m, n, depth in shapes:
        x = rng.standard_normal((batch, m, depth)).astype(element)
        y = rng.standard_normal((batch, n, depth) if transposed else (batch, depth, n)).astype(element)
        expected = x @ (y.transpose(0, 2, 1) if transposed else y) + 1
        constant = [(_odd_matmul(dtype, (m, n, depth), transposed, batch), {})] if m in (19, 5, 65, 9, 8) else []
        for ast, sizes in [(symbolic, {"m": m, "n": n, "k": depth}), *constant]:
            got = np.zeros((batch, m, n), element)
            svod.run(ast, [got, x, y], device=device, **sizes)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=f"{m}x{n}x{depth} {sizes}")


def _loads_of(sink, slot):
    return {u for u in sink.toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM
            and u.src[0].src[0].arg == slot}


@pytest.mark.parametrize("registers", [16, 32])
def test_a_register_tile_has_rows_that_share_each_vector_load(registers):
    """AVX2's 16 registers take tiles of 4 rows of 16 columns, AVX-512's 32 tiles of 8 rows of 32: each row
    two vector registers. The rows are a matmul's rows of ``a`` and a convolution's output channels: the
    vector loads along the upcast columns (``b``, the shifted input) are made once per tile, the loads
    that differ by row once per row."""
    rows, columns = tile_rows(registers), tile_row_bytes(registers) // 4
    assert (rows, columns) == (registers // 4, registers)
    tiled = upcast_reductions(_matmul(64), rows)
    assert len([u for u in tiled.src if u.op is Ops.STORE]) == 16 * rows
    assert (len(_loads_of(tiled, 1)), len(_loads_of(tiled, 2))) == (rows, 16)
    wide = tile_for_cpu(_matmul(64), registers)
    assert len([u for u in wide.src if u.op is Ops.STORE]) == columns * rows
    assert (len(_loads_of(wide, 1)), len(_loads_of(wide, 2))) == (rows, columns)
    doubles = tile_for_cpu(_matmul(64, dtypes.float64), registers)  # a row is two registers of float64 too
    assert (len(_loads_of(doubles, 1)), len(_loads_of(doubles, 2))) == (rows, columns // 2)
    conv = upcast_reductions(simplify(anchor_ranges(conv2d(16, 64).steps[0].ast)), rows)
    assert (len(_loads_of(conv, 1)), len(_loads_of(conv, 2))) == (16, rows)


LANES = dataclasses.replace(LLVMRenderer("CPU").caps, vector_registers=32, vector_lanes=True)
"""An AVX-512 CPU whose renderer spells vectors (the LLVM pair's)."""


def _lanes(sink):
    return sorted({u.arg for u in sink.toposort() if u.op is Ops.LANE})


def test_a_tile_row_is_one_store_in_lanes_where_the_renderer_spells_vectors():
    """8 rows of 32 columns: 8 stores, each over 32 lanes, where the scalar tile has 256; LLVM gets vectors
    (one load of ``b`` per step, a broadcast of ``a`` per row), the same unrolling and prefetches."""
    tiled = tile_for_cpu(_matmul(64), 32, lanes=True)
    assert len([u for u in tiled.src if u.op is Ops.STORE]) == 8 and _lanes(tiled) == [32]
    assert describe(tiled).endswith("the widest updating 256 accumulator(s)")  # one per lane
    src = LLVMRenderer("CPU", LANES).render(_matmul(512)).src
    assert src.count("call <32 x float> @llvm.fma.v32f32") == 8
    assert re.search(r"= load <32 x float>, ptr %\S+, align 4", src) and "masked.gather" not in src
    assert src.count("call void @llvm.prefetch.p0") == 2  # two cache lines of 32 float32, as the scalar tile


def test_a_language_without_vectors_refuses_lanes_by_name():
    """Lowering lanes a tile only for a renderer that spells vectors (``DeviceCaps.vector_lanes``); one that
    does not, handed lanes anyway, refuses them with an error naming it, not with broken C."""
    with pytest.raises(GraphError, match="CStyleRenderer spells no vectors"):
        CStyleRenderer("CPU", LANES).render(_matmul(64))


def test_c_spells_a_tile_row_as_vectors_of_one_register_each():
    """The C pair's tile rows of 32 float32 are GNU C vectors in two parts of one AVX-512 register each (gcc
    keeps a wider vector in memory): 8 rows of two accumulators, each row's ``b`` loaded whole once a part,
    and each accumulator stored whole; no scalar accumulator is left."""
    src = CRenderer("CPU", LANES).render(_matmul(512)).src
    assert "typedef float svod_float32x16 __attribute__((vector_size(64)));" in src
    assert src.count("svod_float32x16 acc") == 16 and not re.search(r"\bfloat acc", src)
    assert src.count("svod_load(svod_float32x16, data") == 2 and src.count("svod_store(data0+") == 16
    assert "svod_float32x32" not in src


def _wide_matmul(columns, name="wide_mm"):
    """``out = a @ b`` over 16 rows, 8 turns and ``columns`` columns."""
    k = KernelBuilder(name)
    out, a, b = (k.buffer(dtypes.float32, shape) for shape in ((16, columns), (16, 8), (8, columns)))
    i, j, r = k.range(16), k.range(columns), k.range(8, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    return k.build()


@pytest.mark.parametrize(("columns", "edge"), [(1023, 32), (1001, 16), (1025, 4), (70, 8)])
def test_a_rows_last_columns_are_one_masked_tile_in_lanes(columns, edge):
    """The columns a row's whole tiles of 32 leave are one more tile, in the narrowest lanes that hold them,
    its store and its loads of ``b`` masked by ``column < end`` (no range of scalar columns: 1023 columns ran
    at 0.65x the GFLOP/s of 992). LLVM masks the vector load and store."""
    tiled = tile_for_cpu(_wide_matmul(columns), 32, lanes=True)
    stores = [u for u in tiled.src if u.op is Ops.STORE]
    masked = [s for s in stores if len(s.src[0].src) == 3]
    assert len(stores) == 16 and len(masked) == 8 and _lanes(tiled) == sorted({32, edge})
    for store in masked:
        (lane,) = {u for u in store.src[0].src[2].toposort() if u.op is Ops.LANE}
        assert lane.arg == edge and not any(u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL
                                            and u.src[0].op is Ops.CONST and u.src[0].arg == columns % 32
                                            for u in store.toposort())
    src = LLVMRenderer("CPU", LANES).render(_wide_matmul(columns)).src
    assert f"@llvm.masked.store.v{edge}f32" in src and f"@llvm.masked.load.v{edge}f32" in src


@pytest.mark.parametrize("name", ["llvm", "clang"])
@pytest.mark.parametrize("columns", [5, 33, 47, 63, 65])
def test_a_masked_tile_writes_nothing_past_a_row(name, columns):
    """The output ends where a buffer of sentinels begins: lanes past the last column, in the last row's
    masked tile, must leave them alone (and every row's neighbour), and the rest give the reference's bits."""
    rng = np.random.default_rng(columns)
    a, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, columns)).astype(np.float32)
    memory = np.full(16 * columns + 64, 7.0, np.float32)
    out = memory[:16 * columns].reshape(16, columns)
    ast = _wide_matmul(columns, name=f"wide_mm_{columns}")
    svod.run(ast, [out, a, b], device=open_device(name))
    want = np.zeros((16, columns), np.float32)
    svod.run(ast, [want, a, b], device=open_device("PYTHON"))
    np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32))
    assert (memory[16 * columns:] == 7.0).all()


def _symbolic_matmul():
    """``out = a @ b`` over 16 rows, 8 turns and ``n`` columns, ``n`` from 1 to 70."""
    k = KernelBuilder("symbolic_wide_mm")
    n = k.var("n", 1, 70)
    out, a, b = k.buffer(dtypes.float32, (16, n)), k.buffer(dtypes.float32, (16, 8)), k.buffer(dtypes.float32, (8, n))
    i, j, r = k.range(16), k.range(n), k.range(8, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    return k.build()


@pytest.mark.parametrize("name", ["llvm", "clang"])
def test_a_symbolic_rows_last_columns_are_one_masked_tile_in_lanes(name):
    """A symbolic column count leaves ``n % 32`` columns: one more tile of 32 lanes at ``n // 32 * 32``,
    masked by ``column < n``, in a loop of one turn, or none where 32 divides ``n`` (a tile with every lane
    off still ran its sum: a ninth more work for a batched matmul of 128 columns in tiles of 16); the C pair
    keeps a range of scalar columns. Every ``n`` gives the reference's bits and leaves the sentinels past the
    output alone."""
    tiled = tile_for_cpu(simplify(_symbolic_matmul()), 32, lanes=True)
    masked = [s for s in tiled.src if s.op is Ops.STORE and len(s.src[0].src) == 3]
    assert len(masked) == 8 and all(u.arg == 32 for s in masked for u in s.toposort() if u.op is Ops.LANE)
    for store in masked:
        turns = [{n: evaluate_expression(r.src[0], {"n": n}) for n in (32, 33, 64, 70)}
                 for r in store.toposort() if r.op is Ops.RANGE and r.src[0].op is not Ops.CONST]
        assert {32: 0, 33: 1, 64: 0, 70: 1} in turns
    device, ast = open_device(name), _symbolic_matmul()
    for n in (1, 5, 31, 32, 33, 64, 65, 70):
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, n)).astype(np.float32)
        memory = np.full(16 * n + 64, 7.0, np.float32)
        svod.run(ast, [memory[:16 * n], a, b], device=device, n=n)
        want = np.zeros(16 * n, np.float32)
        svod.run(ast, [want, a, b], device=open_device("PYTHON"), n=n)
        np.testing.assert_array_equal(memory[:16 * n].view(np.int32), want.view(np.int32), err_msg=f"n={n}")
        assert (memory[16 * n:] == 7.0).all()


def _store_of(value_of, name):
    """``out[i, j] = value_of(sum_r a[i, r] * b[r, j])`` over 16 x 64 outputs."""
    k = KernelBuilder(name)
    out, a, b = k.buffer(dtypes.float32, (16, 64)), k.buffer(dtypes.float32, (16, 8)), k.buffer(dtypes.float32, (8, 64))
    i, j, r = k.range(16), k.range(64), k.range(8, AxisKind.REDUCE)
    k.store(out[i, j], value_of((a[i, r] * b[r, j]).reduce(r)))
    return k.build()


def test_a_tile_row_leaves_lanes_for_what_no_vector_spells():
    """A value through a C library call, or a store that is not at unit stride along the lanes, keeps the
    tile's scalar copies."""
    assert _lanes(tile_for_cpu(_store_of(lambda s: s.maximum(0.0), "relu"), 32, lanes=True)) == [32]
    assert _lanes(tile_for_cpu(_store_of(lambda s: s.tan(), "tan"), 32, lanes=True)) == []
    k = KernelBuilder("transposed_out")
    out, a, b = k.buffer(dtypes.float32, (64, 16)), k.buffer(dtypes.float32, (16, 8)), k.buffer(dtypes.float32, (8, 64))
    i, j, r = k.range(16), k.range(64), k.range(8, AxisKind.REDUCE)
    k.store(out[j, i], (a[i, r] * b[r, j]).reduce(r))
    assert _lanes(tile_for_cpu(k.build(), 32, lanes=True)) == []


def _lane_kernels(n):
    """Kernels whose tiles take lanes of every kind: a gather (``b``'s columns permuted), a load gated by lane
    from a buffer of symbolic size (not speculated: a masked gather), a float MAX and an integer division by a
    constant, a conversion; a load gated by row is a branch around a vector load; an index ``where(g, p, 0)``
    of neighbouring ``p`` is a masked vector load whose other lanes get element 0."""
    k = KernelBuilder("permuted_columns")
    out, a, b, perm = (k.buffer(dtypes.float32, (9, 40)), k.buffer(dtypes.float32, (9, 7)),
                       k.buffer(dtypes.float32, (7, 40)), k.buffer(dtypes.int32, 40))
    i, j, r = k.range(9), k.range(40), k.range(7, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, perm[j].maximum(0).minimum(39)]).reduce(r).maximum(-0.0))
    gather = k.build()
    k = KernelBuilder("short_signal")
    size, rows = k.var("size", 1, 80), k.var("rows", 0, 8)
    out, w, x = k.buffer(dtypes.float32, (8, 64)), k.buffer(dtypes.float32, (8, 5)), k.buffer(dtypes.float32, size)
    bias = k.buffer(dtypes.float32, rows * 64)
    i, j, r = k.range(8), k.range(64), k.range(5, AxisKind.REDUCE)
    row_bias = bias.index(i * 64 + j, gate=i < rows).load()  # gated by row: a branch around a vector load
    first = x.index(i, gate=(j < size) & (i < size)).load()  # one element, gated by lane
    k.store(out[i, j], (w[i, r] * x.index(j + r, gate=j + r < size).load()).reduce(r) + row_bias + first)
    gated = k.build()
    k = KernelBuilder("clamped_window")  # lanes past 63 read element 0: a masked load, the rest given x[0]
    out, w, x = k.buffer(dtypes.float32, (8, 64)), k.buffer(dtypes.float32, (8, 5)), k.buffer(dtypes.float32, 68)
    scale = k.buffer(dtypes.float32, 64)
    i, j, r = k.range(8), k.range(64), k.range(5, AxisKind.REDUCE)
    k.store(out[i, j], (scale[j] * x[(j + r < 64).where(j + r, 0)] * w[i, r]).reduce(r))  # tiled along scale's j
    clamped = k.build()
    k = KernelBuilder("integer_tile")
    out, a, b = k.buffer(dtypes.float32, (5, n)), k.buffer(dtypes.int32, (5, 3)), k.buffer(dtypes.int32, (3, n))
    i, j, r = k.range(5), k.range(n), k.range(3, AxisKind.REDUCE)
    k.store(out[i, j], ((a[i, r] * b[r, j]).reduce(r) // 3).cast(dtypes.float32))
    return gather, gated, clamped, k.build()


@pytest.mark.parametrize("name", ["llvm", "clang", "CL:0", "CUDA:0"])
@pytest.mark.parametrize("n", [1, 31, 33, 64])
def test_lanes_give_the_reference_bits(n, name):
    """Each kernel of ``_lane_kernels`` on the LLVM pair and OpenCL (lanes) and the C pair (scalar copies)
    against the reference, bit for bit: NaN, infinities and signed zeros in the gather's operands, integer extremes
    (wrapping products) in the integer tile, every signal length from 1 past the outputs' reach."""
    rng = np.random.default_rng(n)
    gather, gated, clamped, integer = _lane_kernels(n)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, 3e38], np.float32)
    a = rng.standard_normal((9, 7)).astype(np.float32)
    a.flat[rng.choice(a.size, 7, replace=False)] = special
    b = rng.standard_normal((7, 40)).astype(np.float32)
    perm = rng.permutation(40).astype(np.int32)
    w, x = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal(80).astype(np.float32)
    ints = np.iinfo(np.int32)
    ia, ib = rng.integers(ints.min, ints.max, (5, 3), dtype=np.int32), rng.integers(ints.min, ints.max, (3, n),
                                                                                   dtype=np.int32)
    ia[0, 0], ib[0, 0] = ints.min, -1
    runs = [(gather, lambda: [np.full((9, 40), 7.0, np.float32), a, b, perm], {})]
    bias = rng.standard_normal(8 * 64).astype(np.float32)
    runs += [(gated, lambda size=size, rows=rows: [np.full((8, 64), 7.0, np.float32), w, x[:size].copy(),
                                                   bias[:rows * 64].copy()], {"size": size, "rows": rows})
             for size, rows in ((1, 0), (5, 3), (63, 8), (67, 1), (68, 5), (80, 8))]
    x68 = rng.standard_normal(68).astype(np.float32)
    runs += [(clamped, lambda: [np.full((8, 64), 7.0, np.float32), w, x68, x68[:64] + 1], {})]
    runs += [(integer, lambda: [np.full((5, n), 7.0, np.float32), ia, ib], {})]
    device = open_device(name)
    for ast, arrays, variables in runs:
        want, got = arrays(), arrays()
        svod.run(ast, want, device=open_device("PYTHON"), **variables)
        svod.run(ast, got, device=device, **variables)
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32),
                                      err_msg=f"{kernel_label(ast)} on {name}, {variables}")


def _gated_reads(size):
    """``out[i] = x[i - 1]`` where ``i > 0``, and ``y[i - 1]`` of a buffer it also writes."""
    k = KernelBuilder("gated_reads")
    out, x, y = k.buffer(dtypes.float32, size), k.buffer(dtypes.float32, size), k.buffer(dtypes.float32, size)
    i = k.range(size)
    k.store(out[i], x.index(i - 1, gate=i > 0).load() + y.index(i - 1, gate=i > 0).load())
    k.store(y[i], 1.0)
    return k.build()


def _gates(sink):
    return sorted(u.src[0].src[0].arg for u in sink.toposort() if u.op is Ops.LOAD and len(u.src[0].src) == 3)


def test_gated_loads_of_a_buffer_only_read_and_never_empty_become_branch_free():
    sink = simplify(_gated_reads(16))
    assert _gates(sink) == [1, 2]
    speculated = speculate_gated_loads(sink)
    assert _gates(speculated) == [2]  # y is written: another thread may be writing element 0
    [load] = _loads_of(speculated, 1)
    assert load.src[0].src[1].op is Ops.WHERE
    k = KernelBuilder("maybe_empty")
    n = k.var("n", 0, 64)
    out, x = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, n)
    i = k.range(64)
    k.store(out[i], x.index(i, gate=i < n).load())
    sink = simplify(k.build())
    assert _gates(speculate_gated_loads(sink)) == _gates(sink) == [1]


def _scaled_then_bounded(out, out2, x, y, n):
    """A statement long enough for the threads, then one too short, on worker 0 alone: its range clamped to
    ``n[0]``, a load gated by the worker's id, used by the gated load of ``y`` through that range."""
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * 2.0
    for j in svod.prange(y.shape[0]):
        if j < n[0]:
            out2[j] = y[j]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_a_gated_load_under_another_speculated_load_reads_its_own_element(threads, compiler):
    """A gated load whose index uses another gated load (a range clamped to a loaded bound, that load gated by
    the worker's id) reads through the same range as the store beside it: each made from the other's made
    nodes. (Made from the old nodes, the load of ``y`` ran in a loop of its own, and every element stored its
    last turn's value.)"""
    open_device(compiler)
    kernel = svod.kernel(_scaled_then_bounded, static_shapes=True)
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    y = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    for bound in (0, 1, 30, 40):
        out, out2 = np.zeros_like(x), np.full_like(y, np.nan)
        kernel(out, out2, x, y, np.array([bound], np.int64), device=cpu_device(threads, compiler))
        want = np.full_like(y, np.nan)
        want[:bound] = y[:bound]
        np.testing.assert_array_equal(out, x * 2)
        np.testing.assert_array_equal(out2, want)


@pytest.mark.parametrize("size", [8, 16, 17, 24, 1000, 1024])
def test_split_extremum_reductions_give_the_same_bits_in_independent_partials(size):
    """MAX and MIN are exactly associative, so eight partial extrema combined after the loop are the
    whole reduction's, signed zeros and NaNs included."""
    k = KernelBuilder("extrema")
    out, x = k.buffer(dtypes.float32, 2), k.buffer(dtypes.float32, size)
    r1, r2 = k.range(size, AxisKind.REDUCE), k.range(size, AxisKind.REDUCE)
    k.store(out[0], x[r1].reduce(r1, op=Ops.MAX))
    k.store(out[1], x[r2].reduce(r2, op=Ops.MIN))
    ast = k.build()
    split = split_reductions(ast, EXTREMA)
    partials = [u for u in split.toposort() if u.op is Ops.REDUCE]
    assert len(partials) == (16 if size % 8 == 0 and size >= 16 else 2)
    values = np.where(np.arange(size) % 3 == 0, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
    values[5::7] = np.nan
    got = np.zeros(2, np.float32)
    svod.run(ast, [got, values], device=svod.get_device("CPU", "llvm"))
    assert got[0] == 0 and not np.signbit(got[0]) and np.signbit(got[1])
    values[size // 2] = 3.5
    values[size - 1] = -2.0
    svod.run(ast, [got, values], device=svod.get_device("CPU", "llvm"))
    assert got.tolist() == [3.5, -2.0]


@pytest.mark.parametrize(("registers", "constant", "symbolic"), [(32, 64, 64), (16, 8, 32)])
def test_a_cpu_keeps_four_vector_registers_of_partial_extrema_where_it_has_32(registers, constant, symbolic):
    """A row maximum on the CPU: in 64 partials with AVX-512's 32 registers (four of 16 float32), over a constant
    row and a symbolic one (plus the loop over what they leave); as measured on AVX2 with 16."""
    for size in (1024, None):
        k = KernelBuilder("row_max")
        n = k.var("n", 1, 4096) if size is None else size
        out, x = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, (64, n))
        i, r = k.range(64), k.range(n, AxisKind.REDUCE)
        k.store(out[i], x[i, r].reduce(r, op=Ops.MAX))
        tiled = tile_for_cpu(k.build(), registers)
        partials = [u for u in tiled.toposort() if u.op is Ops.REDUCE and u.arg is Ops.MAX]
        assert len(partials) == (constant if size else symbolic + 1)


@pytest.mark.parametrize("size", [0, 1, 31, 63, 64, 65, 97, 1000])
def test_split_extremum_reductions_over_a_symbolic_size_keep_the_elements_their_partials_leave(size):
    """Over a variable's size, the partials cover ``n // W * W`` elements and a loop of its own the ``n % W``
    left: every element counts once, an empty reduction is the identity, and the bits are the whole one's."""
    k = KernelBuilder("extrema_of_n")
    n = k.var("n", 0, 1024)
    out, x = k.buffer(dtypes.float32, 2), k.buffer(dtypes.float32, n)
    r1, r2 = k.range(n, AxisKind.REDUCE), k.range(n, AxisKind.REDUCE)
    k.store(out[0], x[r1].reduce(r1, op=Ops.MAX))
    k.store(out[1], x[r2].reduce(r2, op=Ops.MIN))
    ast = k.build()
    partials = [u for u in split_reductions(ast, EXTREMA, tails=True).toposort() if u.op is Ops.REDUCE]
    assert len(partials) == 2 * (TAIL_SPLIT_WIDTH + 1)
    device = svod.get_device("CPU", "llvm")
    for case in range(size + 1 if size < 100 else 4):  # the extremes at each position in turn
        values = np.where(np.arange(size) % 3 == 0, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
        values[5::7] = np.nan
        if size:
            values[case % size] = 3.5
            values[(size - 1 - case) % size] = -2.0 if size > 1 else 3.5
        got = np.zeros(2, np.float32)
        svod.run(ast, [got, values], device=device, n=size)
        numbers = values[~np.isnan(values)]
        if size == 0:
            assert np.isnan(got).all()  # the identity, as the reference gives it
        else:
            assert got.tolist() == [numbers.max(), numbers.min()]


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_a_sum_over_rows_of_which_there_are_none_runs(compiler):
    """``out[i] = sum_k a[i, k] * x[k]`` over 0 rows: nothing to store, and nothing to divide by (the check of
    how many rows read a transposed operand divided the outputs' count by the columns': an internal error)."""
    k = KernelBuilder("no_rows")
    out, a, x = k.buffer(dtypes.float32, 0), k.buffer(dtypes.float32, 0), k.buffer(dtypes.float32, 5)
    i, r = k.range(0), k.range(5, AxisKind.REDUCE)
    k.store(out[i], (a[i * 5 + r] * x[r]).reduce(r))
    svod.run(k.build(), [np.zeros(0, np.float32), np.zeros(0, np.float32), np.ones(5, np.float32)],
             device=open_device(compiler))


def _rows_times_vector(rows, cols, dtype=dtypes.float32):
    """``out[i] = sum_k a[i, k] * x[k]``; a size given as None is a variable (``n`` rows, ``m`` columns)."""
    k = KernelBuilder("matvec")
    n = k.var("n", 0, 300) if rows is None else rows
    m = k.var("m", 0, 3000) if cols is None else cols
    out, a, x = k.buffer(dtype, n), k.buffer(dtype, n * m), k.buffer(dtype, m)
    i, r = k.range(n), k.range(m, AxisKind.REDUCE)
    k.store(out[i], (a[i * m + r] * x[r]).reduce(r))
    return k.build()


def _marked(sink):
    return [u for u in sink.toposort() if u.op is Ops.REDUCE and u.arg == (Ops.ADD, REASSOCIABLE)]


@pytest.mark.parametrize(("rows", "edge"), [(16, 0), (17, 1), (None, 1)])
def test_a_matrix_vector_product_streams_four_rows_a_pass_its_sums_marked(rows, edge):
    """Four rows share each pass over the columns (and the edge store the rows left), every sum marked for
    the backend to vectorise along the loop."""
    streamed = stream_rows(simplify(_rows_times_vector(rows, 64)))
    assert len(streamed.src) == STREAM_ROWS + edge
    assert len(_marked(streamed)) == STREAM_ROWS + edge


def _rows_times_their_scale(rows: int, cols: int):
    """``out[i] = sum_k a[i, k] * s[i]``: one scale per row, read at unit stride along the rows."""
    k = KernelBuilder("scaled_rows")
    out, a, s = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows)
    i, r = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[i], (a[i * cols + r] * s[i]).reduce(r))
    return k.build()


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (16, 64), (17, 33)])
def test_a_load_the_turns_of_a_sum_share_leaves_its_rows_streamed(rows, cols):
    """A row's own scale, read once per row, gives the sum no vector loads: the rows stream as a matrix-vector
    product's, and no tile puts them in lanes (where each turn's ``a[i, k]`` would be a gather)."""
    sink = simplify(_rows_times_their_scale(rows, cols))
    laned = upcast_reductions(sink, edges=True, row_bytes=64, lanes=True)
    assert not any(u.op is Ops.LANE for u in laned.toposort())
    if rows >= STREAM_ROWS:
        assert len(_marked(stream_rows(sink))) >= STREAM_ROWS
    rng = np.random.default_rng(rows)
    a, scale = rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(rows).astype(np.float32)
    out = np.zeros(rows, np.float32)
    svod.run(_rows_times_their_scale(rows, cols), [out, a.ravel(), scale])
    np.testing.assert_allclose(out, (a * scale[:, None]).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_register_tiles_and_sums_of_rows_others_use_are_not_streamed():
    """A matmul's sums are a register tile's (``upcast_reductions``: their order is the reference's), and a
    softmax's row sums feed stores over a range they do not depend on: neither is a streamed row's."""
    for ast in (_matmul(64), softmax(16, 64).steps[0].ast):
        sink = simplify(ast)
        assert stream_rows(sink) is sink
        assert not _marked(tile_for_cpu(sink, 16))


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_the_backend_may_reassociate_only_the_streamed_sums(compiler):
    """The renderers let the compiler reassociate each of the four streamed sums (LLVM's ``reassoc``, C's
    reduction pragma naming all four accumulators); a register tile's sums keep their order."""
    device = open_device(compiler)
    streamed = svod.compile(_rows_times_vector(64, 64), device).code
    tile = svod.compile(_matmul(64), device).code
    if compiler == "llvm":
        assert streamed.count("fadd reassoc contract") == STREAM_ROWS and "reassoc" not in tile
    else:
        assert re.search(r"reduction\(svod_sum:(\w+, ){3}\w+\)", streamed) and "reduction(" not in tile


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 8), (4, 33), (5, 1000), (7, 17), (97, 64), (0, 5), (6, 0)])
def test_streamed_rows_give_numpys_sums_at_edge_sizes(compiler, static, rows, cols):
    """Every row summed once, whatever the rows' and columns' remainders, float32 and float64."""
    device = open_device(compiler)
    rng = np.random.default_rng(rows * 1000 + cols)
    for dtype in (dtypes.float32, dtypes.float64):
        a, x = rng.standard_normal((rows, cols)).astype(dtype.numpy), rng.standard_normal(cols).astype(dtype.numpy)
        out = np.full(rows, np.nan, dtype.numpy)
        kernel = _rows_times_vector(rows, cols, dtype) if static else _rows_times_vector(None, None, dtype)
        svod.run(kernel, [out, a, x], device=device, **({} if static else {"n": rows, "m": cols}))
        np.testing.assert_allclose(out, a.astype(np.float64) @ x, rtol=1e-5, atol=1e-5 * max(cols, 1))


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_streamed_sums_keep_special_values(compiler):
    """Reassociated, a row of -0.0 still sums to -0.0, an inf to inf, inf and -inf to NaN, a NaN to NaN."""
    device = open_device(compiler)
    a = np.ones((5, 40), np.float32)
    a[0] = -0.0
    a[1, 7] = np.inf
    a[2, 3], a[2, 30] = np.inf, -np.inf
    a[3, 21] = np.nan
    x = np.ones(40, np.float32)
    out = np.zeros(5, np.float32)
    svod.run(_rows_times_vector(5, 40), [out, a, x], device=device)
    assert out[0] == 0 and np.signbit(out[0])
    assert out[1] == np.inf and np.isnan(out[2]) and np.isnan(out[3]) and out[4] == 40


_LIMITS = WorkGroupLimits(256, (256, 256, 64))


def _shared(ast, local_memory=32 << 10):
    return share_reductions(simplify(anchor_ranges(ast)), _LIMITS, local_memory)


def test_reductions_that_skip_the_column_are_shared_by_a_work_group():
    """softmax: the row maximum, then the row sum that uses it, each in local memory between barriers, its 128
    partials combined in 7 steps of a barrier each; the columns become each work item's strided loop."""
    shared = _shared(softmax(64, 1024).steps[0].ast)
    assert shared is not None
    topo = shared.toposort()
    temps = {u for u in topo if u.op is Ops.DEFINE_LOCAL}
    assert [u.dtype.size for u in sorted(temps, key=lambda u: u.arg)] == [128, 128]
    assert [u.op for u in shared.src[:32]] == [Ops.STORE, Ops.BARRIER] * 16
    assert not any(u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL for u in topo)
    assert {u.arg for u in topo if u.op is Ops.SPECIAL} == {"lidx0", "gidx1"}
    depth = 0
    for u in linearize(shared):
        depth += (u.op in (Ops.RANGE, Ops.IF)) - (u.op is Ops.END)
        if u.op is Ops.BARRIER:
            assert depth == 0  # every work item reaches it


def test_reductions_that_use_the_column_stay_with_each_work_item():
    assert _shared(_matmul(64)) is None


def test_local_memory_bounds_the_group():
    ast = softmax(64, 1024).steps[0].ast
    small = _shared(ast, local_memory=2 * 32 * 4)
    assert small is not None
    assert {u.dtype.size for u in small.toposort() if u.op is Ops.DEFINE_LOCAL} == {32}
    assert _shared(ast, local_memory=8) is None


def _per_item(ast, limits=_LIMITS):
    return reduce_per_item(simplify(anchor_ranges(ast)), limits)


def _loop_nesting(sink) -> list[tuple[int, str]]:
    """Each loop and IF of the linearized kernel with its depth."""
    depth, found = 0, []
    for u in linearize(sink):
        if u.op in (Ops.RANGE, Ops.IF):
            found.append((depth, u.op.name if u.op is Ops.IF else u.arg[1].name))
        depth += (u.op in (Ops.RANGE, Ops.IF)) - (u.op is Ops.END)
    return found


def test_without_dedicated_local_memory_each_work_item_reduces_its_row_once():
    """softmax on a CPU's OpenCL: one work item per row, no local memory or barrier; the row maximum and
    sum each split into 8 partials in one loop, both before (not inside) the loop over the columns."""
    sink = _per_item(softmax(64, 1024).steps[0].ast)
    assert sink is not None
    topo = sink.toposort()
    assert not any(u.op in (Ops.DEFINE_LOCAL, Ops.BARRIER) for u in topo)
    assert {u.arg for u in topo if u.op is Ops.SPECIAL} == {"gidx0"}
    assert _loop_nesting(sink) == [(0, "REDUCE"), (0, "REDUCE"), (0, "LOOP")]
    assert describe(sink) == "launch gidx0 < 64; 2 reduction loop(s), the widest updating 8 accumulator(s)"
    assert _per_item(_matmul(64)) is None
    assert _per_item(attention()) is None  # reductions nested in reductions stay shared by the group
    assert _per_item(softmax(64, 1024).steps[0].ast, WorkGroupLimits(256, (256, 256, 64), (32, 32, 32))) is None


def _matvec(rows, cols):
    k = KernelBuilder("matvec_n")
    out, a, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, cols)
    i, j = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[i], (a[i * cols + j] * x[j]).reduce(j))
    return k.build()


def test_one_sum_per_output_is_a_work_item_of_its_own_without_dedicated_local_memory():
    """A matrix-vector product on a CPU's OpenCL: one work item per row, its sum split into 8 partials over
    contiguous columns, which the device vectorises (4096x4096 on PoCL: 12.4 -> 3.7 ms; 64 items of a
    group each summing a row read the rows 16 KiB apart)."""
    sink = _per_item(_matvec(64, 1024))
    assert sink is not None
    assert describe(sink) == "launch gidx0 < 64; 1 reduction loop(s), the widest updating 8 accumulator(s)"


@pytest.mark.parametrize("rows, cols", [(0, 5), (1, 1), (7, 9), (33, 16), (40, 300)])
def test_matrix_vector_products_with_symbolic_sizes_match_numpy(device, rows, cols):
    k = KernelBuilder("matvec_sym")
    m, n = k.var("rows", 0, 40), k.var("cols", 1, 300)
    out, a, x = k.buffer(dtypes.float32, m), k.buffer(dtypes.float32, m * n), k.buffer(dtypes.float32, n)
    i, j = k.range(m), k.range(n, AxisKind.REDUCE)
    k.store(out[i], (a[i * n + j] * x[j]).reduce(j))
    ast = k.build()
    rng = np.random.default_rng(rows + cols)
    matrix = rng.standard_normal((rows, cols)).astype(np.float32)
    vector = rng.standard_normal(cols).astype(np.float32)
    got = np.full(max(rows, 1) + 2, 7.0, np.float32)
    svod.run(ast, [got, matrix.reshape(-1) if rows else np.zeros(1, np.float32), vector], device=device,
             rows=rows, cols=cols)
    want = np.full(max(rows, 1) + 2, 7.0, np.float32)
    want[:rows] = matrix @ vector
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_row_count_that_may_be_0_empties_the_loops_instead_of_an_if_around_them():
    """An IF around the row's effects would keep its reduction inside the loop over the columns; one group
    is launched even for 0 rows, and it must not load."""
    k = KernelBuilder("softmax_rows_n")
    rows, cols = k.var("rows", 0, 40), k.var("cols", 1, 300)
    out, x = k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows * cols)
    r, c, j = k.range(rows), k.range(cols), k.range(cols, AxisKind.REDUCE)
    k.store(out[r * cols + c], x[r * cols + c] / x[r * cols + j].reduce(j))
    sink = _per_item(k.build())
    assert _loop_nesting(sink) == [(0, "REDUCE"), (0, "LOOP")]
    gated = [u for u in sink.toposort() if u.op is Ops.INDEX and len(u.src) == 3]
    assert [u.src[0].arg for u in gated] == [1, 1]  # both loads of x; the store's loop is empty


@svod.kernel
def prefix_sums_less_the_row_max(out, x):  # type: ignore[no-untyped-def]
    for r in svod.prange(x.shape[0]):
        top = x[r, 0]
        for c in range(x.shape[1]):
            top = max(top, x[r, c])
        for c in svod.prange(x.shape[1]):
            s = 0.0
            for k in range(c + 1):
                s += x[r, k]
            out[r, c] = s - top


@pytest.mark.parametrize("rows, cols", [(0, 3), (1, 1), (1, 17), (2, 33), (5, 70)])
def test_a_loop_counting_with_the_column_keeps_its_column_when_the_row_count_may_be_0(device, rows, cols):
    """A prefix sum over ``range(c + 1)`` beside the row's maximum (``reduce_per_item`` on PoCL): every loop's
    end is emptied for a row past the last, the prefix's end built over the column's own emptied loop. Built
    from the column loop as it was, it brought that loop back around the upcast columns, and the first 16
    columns of each row summed the whole row."""
    x = (np.arange(rows * cols) % 7).astype(np.float32).reshape(rows, cols)
    out = np.full((rows, cols), 9.0, np.float32)
    prefix_sums_less_the_row_max(out, x, device=device)
    np.testing.assert_array_equal(out, run_as_python(prefix_sums_less_the_row_max, np.full_like(out, 9.0), x)[0])
    sink = _per_item(prefix_sums_less_the_row_max.build(out, x))
    assert sink is not None
    axes = Counter(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE)
    assert max(axes.values()) == 1, axes


def test_users_cannot_write_barriers():
    k = KernelBuilder("user_barrier")
    out = k.buffer(dtypes.float32, 4)
    i = k.range(4)
    k.store(out[i], 1.0)
    ast = k.build()
    with pytest.raises(GraphError):
        validate(ast.replace(src=(UOp(Ops.BARRIER), *ast.src)))


def test_a_convolution_is_upcast_along_its_shifted_columns_and_threaded_over_channels():
    """``x[ci, y + ky - 1, xx + kx - 1]`` steps one element per ``xx`` (the index is a sum and a difference);
    after the upcast no range is 32 long, and the 16 channels are split over the threads instead."""
    sink = split_for_threads(upcast_reductions(simplify(anchor_ranges(conv2d(16, 64).steps[0].ast))), 2, 1)
    assert describe(sink) == "2 chunks of the outermost parallel range, which the threads share; 1 reduction " \
                             "loop(s), the widest updating 64 accumulator(s)"


def test_describe_names_the_launch_and_local_memory():
    shared = _shared(softmax(64, 1024).steps[0].ast)
    assert describe(shared).startswith("launch gidx1 < 64, lidx0 < 128; 2 reduction(s) shared by each work group "
                                       "in local memory (128 float32 + 128 float32), 16 barriers")


def _tiled(ast, limits=_LIMITS, local_memory=32 << 10):
    return tile_matmul(simplify(anchor_ranges(ast)), limits, local_memory)


def test_a_matmul_is_staged_in_local_memory_between_barriers_in_its_block_loop():
    """A 16x16 work group per 64x64 tile of ``out``, each item computing 4x4 of it: a 64x16 block of ``a`` and
    a 16x64 block of ``b`` staged (4 stores of each per item), then, between two barriers inside the loop over
    blocks of ``k``, 16 running sums in local memory, whose reductions share one loop; the sums stored to
    ``out`` after the last block."""
    tiled = _tiled(matmul(256).steps[0].ast)
    assert tiled is not None
    assert [u.op for u in tiled.src] == [*[Ops.STORE] * 8, Ops.BARRIER, *[Ops.STORE] * 16, Ops.BARRIER,
                                         *[Ops.STORE] * 16]
    loops = [r for r in tiled.src[8].src if r.op is Ops.RANGE]
    assert len(loops) == 1 and loops[0].arg[1] is AxisKind.LOOP and loops[0].src[0].vmin == loops[0].src[0].vmax == 16
    assert all(loops[0] not in u.toposort() for u in tiled.src[-16:])  # stored once, after the loop
    assert describe(simplify(tiled)) == (
        "launch gidx0 < 4, gidx1 < 4, lidx0 < 16, lidx1 < 16; operands staged block by block in local memory "
        "(1024 float32 + 1024 float32 + 4096 float32), 2 barriers a block; 1 reduction loop(s), the widest "
        "updating 16 accumulator(s)")


def test_only_a_plain_matmul_that_fits_the_device_is_staged():
    assert _tiled(softmax(64, 1024).steps[0].ast) is None  # not one store of a sum of two operands' products
    assert _tiled(conv2d(16, 24).steps[0].ast) is None  # more loads, and more ranges
    assert _tiled(matmul(64).steps[0].ast, local_memory=1024) is None  # 3 KiB of the smallest tile do not fit
    small = _tiled(matmul(64).steps[0].ast, local_memory=8 << 10)  # 24 KiB for 4x4 outputs an item do not
    assert small is not None and "(256 float32 + 256 float32 + 256 float32)" in describe(simplify(small))
    assert _tiled(matmul(64).steps[0].ast, limits=WorkGroupLimits(128, (128, 128, 64))) is None
    k = KernelBuilder("scaled")
    out, a, b, s = (k.buffer(dtypes.float32, (32, 32)) for _ in range(4))
    i, j, r = k.range(32), k.range(32), k.range(32, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j] * s[i, j]).reduce(r))
    assert _tiled(k.build()) is None  # a third load would be read past the operands' ends


def test_a_transpose_gets_square_work_groups_and_a_gather_long_rows():
    """A transpose's store steps along the second launch dimension: 16x16 groups read and write runs of 16.
    A gather's row index steps that way too, but it does not depend on the column: 64x4 groups."""
    def launch(ast):
        return describe(simplify(to_gpu_indices(simplify(anchor_ranges(ast)), _LIMITS, direct_index=False)))

    assert launch(transpose(256).steps[0].ast) == "launch gidx0 < 16, gidx1 < 16, lidx0 < 16, lidx1 < 16"
    assert launch(gather(1024, 100).steps[0].ast) == "launch gidx1 < 256, lidx0 < 64, lidx1 < 4"


def _gated_effects(sink):
    return [e for e in sink.src if e.op is Ops.STORE and len(e.src[0].src) == 3]


@pytest.mark.parametrize(("rows", "columns", "groups"), [
    (1002, 64, "launch gidx1 < 334, lidx0 < 64, lidx1 < 3"),
    (256, 96, "launch gidx0 < 2, gidx1 < 64, lidx0 < 48, lidx1 < 4"),
    (256, 67, "launch gidx0 < 67, gidx1 < 64, lidx0 < 1, lidx1 < 4")])  # a prime: groups of 1
def test_a_cpu_driver_gets_groups_that_divide_each_end(rows, columns, groups):
    """A CPU's OpenCL or Vulkan driver (``exact_groups``) gets the largest local size up to the power of two
    that divides each constant end: no group is ragged, no effect gated. A GPU keeps powers of two and gates
    the last group's items past the end."""
    k = KernelBuilder("scaled")
    out, x = k.buffer(dtypes.float32, (rows, columns)), k.buffer(dtypes.float32, (rows, columns))
    i, j = k.range(rows), k.range(columns)
    k.store(out[i, j], x[i, j] * 2.0)
    ast = simplify(anchor_ranges(k.build()))
    exact = simplify(to_gpu_indices(ast, _LIMITS, direct_index=False, exact_groups=True))
    assert describe(exact) == groups and not _gated_effects(exact)
    assert len(_gated_effects(simplify(to_gpu_indices(ast, _LIMITS, direct_index=False)))) == 1


def _scatter(kind: str, bins: int = 256, n: int = 1 << 15):
    k = KernelBuilder(kind)
    out, idx = k.buffer(dtypes.float32, bins), k.buffer(dtypes.int32, n)
    i = k.range(n)
    if kind == "max":
        k.atomic_max(out[idx[i]], 1.0)
    else:
        k.atomic_add(out[idx[i]], out[idx[i] // 2] if kind == "reads" else 1.0)
    return k.build()


def _private_copies(sink):
    return [u for u in privatize_atomics(sink).toposort() if u.op is Ops.DEFINE_LOCAL]


def test_a_thread_adds_into_a_private_copy_of_a_small_buffer():
    sink = privatize_atomics(_lowered(_scatter("add", n=1 << 16), threads=2))  # work for 2 workers
    (copy,) = [u for u in sink.toposort() if u.op is Ops.DEFINE_LOCAL]
    assert copy.src[0].op is Ops.PARAM and copy.src[0].arg == 0 and copy.dtype.size == 256
    assert [e.op for e in sink.src if e.op in (Ops.STORE, Ops.ATOMIC)] == [Ops.STORE, Ops.ATOMIC, Ops.ATOMIC]
    assert describe(sink).startswith("2 chunks of the outermost parallel range, which the threads share; atomic "
                                     "adds into a private copy per chunk of 1 buffer(s) (256 float32)")


def test_a_buffer_of_symbolic_size_gets_a_copy_used_where_it_fits():
    """The copy holds ``PRIVATE_BYTES``; the adds into it run where the buffer fits, and the same adds into the
    buffer itself, atomically, in a loop nest of their own that ends at once where it fits."""
    k = KernelBuilder("histogram_of_n")
    bins = k.var("bins", 0, 1 << 20)
    counts, values = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, 1 << 16)
    i = k.range(1 << 16)
    k.atomic_add(counts[values[i]], 1)
    sink = privatize_atomics(_lowered(k.build(), threads=2))
    (copy,) = [u for u in sink.toposort() if u.op is Ops.DEFINE_LOCAL]
    assert copy.dtype.size == PRIVATE_BYTES // 4
    adds = [e for e in sink.src if e.op is Ops.ATOMIC]
    assert [e.src[0].src[0].op for e in adds] == [Ops.DEFINE_LOCAL, Ops.PARAM, Ops.PARAM]  # copy, buffer, flush
    own = [r for r in adds[1].toposort() if r.op is Ops.RANGE]
    assert own and not set(own) & {r for r in adds[0].toposort() if r.op is Ops.RANGE}


POSITIONS = PRIVATE_BYTES * 3 // 4 // 8
"""Float64 elements of three quarters of ``PRIVATE_BYTES`` (as the gradient of some thousand positions in 3-D)."""


def _positions_gradients(count: int):
    """Adds into ``count`` float64 buffers of ``POSITIONS`` elements each."""
    k = KernelBuilder("positions")
    idx = k.buffer(dtypes.int32, 1 << 16)
    i = k.range(1 << 16)
    for _ in range(count):
        k.atomic_add(k.buffer(dtypes.float64, POSITIONS)[idx[i]], 1.0)
    return k.build()


def test_the_buffers_a_kernel_adds_into_share_the_private_bytes():
    """A thread's copies are on its stack together: one float64 buffer of three quarters of ``PRIVATE_BYTES``
    is copied whole, two are not (each past its half)."""
    assert [c.dtype.size for c in _private_copies(_lowered(_positions_gradients(1), threads=2))] == [POSITIONS]
    assert _private_copies(_lowered(_positions_gradients(2), threads=2)) == []


def test_a_buffer_of_symbolic_size_is_not_copied_in_a_kernel_that_does_more_than_add():
    """The adds into the buffer itself would run in loops of their own, apart from the kernel's other effects."""
    k = KernelBuilder("histogram_and_store")
    bins = k.var("bins", 0, 1 << 20)
    counts, values = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, 1 << 16)
    i = k.range(1 << 16)
    k.atomic_add(counts[values[i]], 1)
    k.store(values[i], 0)
    lowered = _lowered(k.build(), threads=2)
    assert privatize_atomics(lowered) is lowered


@pytest.mark.parametrize(("kind", "bins", "n"), [("reads", 256, 1 << 15), ("max", 256, 1 << 15), ("add", 256, 255),
                                                 ("add", PRIVATE_BYTES // 4 + 1, 1 << 20)])
def test_a_buffer_the_kernel_reads_updates_otherwise_or_barely_uses_is_not_copied(kind, bins, n):
    assert not _private_copies(_lowered(_scatter(kind, bins, n)))


# ---- a device that stops a work item's loops (Mesa's llvmpipe) ---------------------------------------------

def _limited(limit: int | None, dedicated: bool = False) -> WGSLRenderer:
    return WGSLRenderer("WEBGPU:0", DeviceCaps(host_memory=False, overlaps_on_host=False, work_groups=_LIMITS,
                                               local_memory=32 << 10, dedicated_local_memory=dedicated,
                                               max_loop_turns=limit))


def _nest(columns, length) -> UOp:
    """Per column of a sequential loop, the sum of a row: ``columns`` loops of ``length`` turns."""
    k = KernelBuilder("nest")
    out, x = k.buffer(dtypes.float32, columns), k.buffer(dtypes.float32, (columns, length))
    c, j = k.range(columns, AxisKind.LOOP), k.range(length, AxisKind.REDUCE)
    k.store(out[c], x[c, j].reduce(j))
    return k.build()


def _turns(renderer, ast):
    return loop_turns(renderer.program(ast).src[2].src, renderer.hidden_loop_turns)


def test_each_loop_counts_its_turns_and_the_test_that_ends_it():
    assert _turns(_limited(None), _nest(3, 7)).arg == (3 + 1) + 3 * (7 + 1)
    assert _turns(_limited(None), _nest(1, 1)).arg == 0  # loops of one turn are not written


def test_a_kernel_past_the_limit_at_every_size_is_refused_when_rendered():
    limit = 4 + 3 * 8
    assert _limited(limit).render(_nest(3, 7)).loop_turns is None  # proven within: nothing to check per launch
    with pytest.raises(GraphError, match="come round up to 31 times") as raised:
        _limited(limit).render(_nest(3, 8))
    assert (raised.value.kernel, raised.value.stage, raised.value.value) == ("nest", "render", 31)


def test_symbolic_loops_are_left_to_each_launch_to_check():
    """A row of ``n`` added into its output in a sequential loop of one work item: its turns known per launch."""
    k = KernelBuilder("prefix")
    n = k.var("n", 1, 1 << 20)
    out, x = k.buffer(dtypes.float32, 5), k.buffer(dtypes.float32, (5, n))
    r, j = k.range(5), k.range(n, AxisKind.LOOP)
    k.store(out[r], out[r] + x[r, j])
    turns = _limited(1000).render(k.build()).loop_turns
    assert turns is not None
    assert most(turns, {"n": 998}) == 999 and most(turns, {"n": 1000}) == 1001
    assert _limited(None).render(k.build()).loop_turns is None


def test_a_float_atomic_counts_its_compare_exchange_loop():
    k = KernelBuilder("scatter")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, 10))
    r, j = k.range(4), k.range(10, AxisKind.LOOP)
    k.atomic_add(out[r], x[r, j])
    assert _turns(_limited(None), k.build()).arg == 11 + 10 * _COMPARE_EXCHANGE_TURNS


def test_long_rows_are_shared_by_a_group_or_split_into_partials():
    """A row of 100000: on a GPU, shared by a work group of 128 items (782 turns each, their partials then
    combined in 7 steps, none a loop); where a work group runs as a loop on a CPU core, the row is one item's,
    split into 8 partials that vectorise (12500 turns), limit or none."""
    k = KernelBuilder("rows")
    out, x = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, (64, 100000))
    r, j = k.range(64), k.range(100000, AxisKind.REDUCE)
    k.store(out[r], x[r, j].reduce(j))
    assert "workgroupBarrier" in _limited(None, dedicated=True).render(k.build()).src
    assert _turns(_limited(65535, dedicated=True), k.build()).vmax == 782 + 1
    assert _turns(_limited(65535), k.build()).arg == 12500 + 1
    assert _turns(_limited(None), k.build()).arg == 12500 + 1


def test_per_item_rows_give_way_to_shared_ones_past_the_limit():
    """softmax's rows on a CPU's Vulkan: one work item per row, unless its loops would come round more often
    than the device lets them; then a work group shares the row."""
    short, long = softmax(4, 4096).steps[0].ast, softmax(4, 60000).steps[0].ast
    assert "workgroupBarrier" not in _limited(65535).render(short).src
    assert "workgroupBarrier" not in _limited(None).render(long).src
    assert "workgroupBarrier" in _limited(65535).render(long).src


@pytest.mark.parametrize("n", [(1 << 15) + 1, 4_000_003])
def test_reductions_over_ranges_and_dtypes_of_their_own_are_split_into_partials(device, n):
    """A histogram's least, greatest and count of NaNs of one array, each over a range of its own, two
    dtypes: split into chunks of a multiple of ``CHUNK_ALIGNMENT`` (one scratch buffer a reduction), and
    combined in order; the answers are numpy's, NaN counted, the extremes ignoring it as svod's do."""
    def extremes(size: int) -> UOp:
        k = KernelBuilder("extremes")
        lo, hi, nans, x = (k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, 1), k.buffer(dtypes.int32, 1),
                           k.buffer(dtypes.float32, size))
        a, b, c = (k.range(size, AxisKind.REDUCE) for _ in range(3))
        k.store(lo[0], x[a].reduce(a, op=Ops.MIN))
        k.store(hi[0], x[b].reduce(b, op=Ops.MAX))
        k.store(nans[0], x[c].ne(x[c]).cast(dtypes.int32).reduce(c))
        return k.build()

    split = split_reduction(extremes(n))
    assert split is not None
    partial, _ = split
    assert len([u for u in partial.toposort() if u.op is Ops.STORE]) == 3
    chunks = {int(u.src[0].vmax) for u in partial.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE}
    assert len(chunks) == 1 and chunks.pop() % CHUNK_ALIGNMENT == 0
    if device.name == "PYTHON":
        n = (1 << 15) + 1  # the reference interprets every turn
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    x[[3, n // 2, n - 1]] = np.nan, -7.5, 9.25
    lo, hi, nans = np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.int32)
    svod.run(extremes(n), [lo, hi, nans, x], device=device)
    assert (lo[0], hi[0], nans[0]) == (np.nanmin(x), np.nanmax(x), 1)


def test_a_reduction_of_memory_the_kernel_writes_is_not_split_into_partials(device):
    """``x[l] = sum(x)`` for l in 0..3 in order: each sum sees the stores before it. Split into partials
    (a reduction this large with no parallel range would be) every sum would be taken before the first
    store, and all four would be 2**15."""
    def sum_into_itself(n: int) -> UOp:
        k = KernelBuilder("sum_into_itself")
        x = k.buffer(dtypes.int32, n)
        step, r = k.range(4, AxisKind.LOOP), k.range(n, AxisKind.REDUCE)
        k.store(x[step], x[r].reduce(r))
        return k.build()

    assert split_reduction(sum_into_itself(1 << 15)) is None
    n = 97 if device.name == "PYTHON" else 1 << 15  # the reference splits nothing and interprets every turn
    got = np.ones(n, np.int32)
    svod.run(sum_into_itself(n), [got], device=device)
    want = np.ones(n, np.int64)
    for s in range(4):
        want[s] = want.sum()
    np.testing.assert_array_equal(got, want)


def test_loops_around_a_short_register_tile_are_not_vectorised_along_themselves():
    """A tiled matmul whose reduction has 2, 4 or 8 steps: LLVM unrolls the tile's loop whole, and its loop
    vectoriser then spent long on the loop around it, for nothing to gain; the renderer asks it not to. A
    reduction of 9 steps keeps its loop, so nothing around it is marked."""
    def matmul(steps: int) -> str:
        k = KernelBuilder("short_matmul")
        a, b = k.buffer(dtypes.float32, (64, steps)), k.buffer(dtypes.float32, (steps, 64))
        out = k.buffer(dtypes.float32, (64, 64))
        i, j = k.range(64), k.range(64)
        r = k.range(steps, AxisKind.REDUCE)
        k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
        return LLVMRenderer("CPU", svod.get_device("CPU").caps).render(k.build()).src

    assert '!"llvm.loop.vectorize.enable", i1 false' in matmul(4)
    assert "llvm.loop.vectorize.enable" not in matmul(9)


def _sums(dtype, term, op=Ops.ADD):
    k = KernelBuilder(f"sum_{dtype.name}")
    out, a, b = k.buffer(dtype, 4), k.buffer(dtype, (4, 8)), k.buffer(dtype, 8)
    i, r = k.range(4), k.range(8, AxisKind.REDUCE)
    k.store(out[i], term(a[i, r], b[r]).reduce(r, op=op))
    return k.build()


@pytest.mark.parametrize(("dtype", "term", "op", "fused"), [
    (dtypes.float32, lambda x, y: x * y, Ops.ADD, True),
    (dtypes.float64, lambda x, y: x * y, Ops.ADD, True),
    (dtypes.float16, lambda x, y: x * y, Ops.ADD, False),
    (dtypes.int32, lambda x, y: x * y, Ops.ADD, False),
    (dtypes.float32, lambda x, y: x * y, Ops.MAX, False),
    (dtypes.float32, lambda x, y: x * y + 1.0, Ops.ADD, False),
    (dtypes.float32, lambda x, y: (x * y).alu(Ops.NEG), Ops.ADD, False),
])
def test_only_a_float_sum_of_products_fuses(dtype, term, op, fused):
    marked = [u for u in fuse_products(_sums(dtype, term, op)).toposort() if u.op is Ops.MUL and u.arg == FUSED]
    assert len(marked) == fused


def test_a_fused_product_of_constants_is_not_folded_before_its_addition():
    k = KernelBuilder("constant_terms")
    out = k.buffer(dtypes.float32, 1)
    r = k.range(3, AxisKind.REDUCE)
    third = UOp.const(dtypes.float32, 1 / 3)
    k.store(out[0], (third * UOp.const(dtypes.float32, 3.0)).reduce(r))
    sink = simplify(fuse_products(k.build()))
    assert any(u.op is Ops.MUL and u.arg == FUSED for u in sink.toposort())


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_each_update_of_a_sum_of_products_is_one_fused_multiply_add(dtype):
    code = svod.compile(_sums(dtype, lambda x, y: x * y), "CPU").code
    fused = re.search(r"@llvm\.fma\.f(32|64)\(", code) or re.search(r"fmul contract .*\n.*fadd reassoc contract", code)
    assert fused and not re.search(r"fmul (?!contract)", code), code


def _big_matmul(m, n, depth, dtype=dtypes.float32, batch=1, transposed=False, name="big_mm", pitch=None):
    """``out = a @ b`` over ``batch``; ``b``'s rows ``pitch`` elements apart (``n`` unless given)."""
    k = KernelBuilder(name)
    out, a = k.buffer(dtype, (batch, m, n)), k.buffer(dtype, (batch, m, depth))
    b = k.buffer(dtype, (batch, n, depth) if transposed else (batch, depth, pitch or n))
    h, i, j, r = k.range(batch), k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(out[h, i, j], (a[h, i, r] * (b[h, j, r] if transposed else b[h, r, j])).reduce(r))
    return k.build()


def test_a_large_matmul_packs_b_with_longer_rows_and_blocks_its_columns():
    """b of 4 MiB, rows 4 KiB apart: a copy with rows 64 bytes longer, then the matmul over it in blocks of
    256 columns by 512 rows, the outermost ranges, sequential: each thread passes its rows over every block."""
    pack, packed = block_matmul(_big_matmul(512, 1024, 1024))
    scratch = max((u for u in pack.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    assert scratch.arg == 3 and scratch.dtype.size == 1024 * (1024 + 16)
    loads = {u.src[0].src[0].arg for u in packed.toposort() if u.op is Ops.LOAD}
    assert loads == {0, 1, 3}  # out (the sum so far), a and the copy of b; b itself only in the pack
    ranges = sorted((u for u in packed.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    assert [(int(r.src[0].vmax), r.arg[1]) for r in ranges] == [
        (4, AxisKind.LOOP), (2, AxisKind.LOOP), (1, AxisKind.GLOBAL), (512, AxisKind.GLOBAL), (256, AxisKind.GLOBAL),
        (512, AxisKind.REDUCE)]  # blocks of columns, blocks of k, batch, rows, columns, k


def _variable_matmul(dtype=dtypes.float32):
    """``out = a @ b`` over a batch, every size a variable (a Python kernel's default): ``m x depth`` by ``depth
    x n``."""
    k = KernelBuilder("symbolic_mm")
    m, n, depth = k.var("m", 1, 1 << 14), k.var("n", 1, 1 << 14), k.var("depth", 0, 1 << 14)
    batch = k.var("batch", 1, 64)
    out, a, b = (k.buffer(dtype, (batch, m, n)), k.buffer(dtype, (batch, m, depth)),
                 k.buffer(dtype, (batch, depth, n)))
    h, i, j, r = k.range(batch), k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(out[h, i, j], (a[h, i, r] * b[h, r, j]).reduce(r))
    return k.build()


def test_a_matmul_of_variable_sizes_is_blocked_too():
    """No compile knows how big ``b`` is: the blocks are those a long sum over constant sizes takes (256 columns
    by 512 rows in 2 MiB of L2, 128 by 512 of float64 in 1 MiB), whole blocks of columns in the outer loop and
    the columns past them a store of their own, for launches whose ``b`` (one batch's) is larger than a block
    and read by 16 rows or more (rows of ``b`` an even number of cache lines apart; two batches of 8 here);
    the kernel as written for the others. A batch's ``b`` is read where it is."""
    for dtype, width, l2 in ((dtypes.float32, 256, 2 << 20), (dtypes.float64, 256, 2 << 20),
                             (dtypes.float64, 128, 1 << 20)):
        ast = _variable_matmul(dtype)
        n, depth = (next(u for u in ast.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == v) for v in ("n", "depth"))
        blocked, written = block_matmul(ast, l2)
        assert (kernel_label(blocked), kernel_label(written)) == ("symbolic_mm_blocked", "symbolic_mm")
        for m_n_depth, taken in (((8, 2 * width, 4096), blocked), ((7, 2 * width, 4096), written),
                                 ((8, 2 * width - 1, 4096), written),
                                 ((8, 4096, l2 // 2 // 4096 // dtype.itemsize), written)):
            values = dict(zip(("m", "n", "depth"), m_n_depth, strict=True), batch=2)
            for part in (blocked, written):
                assert (_rows_run(part, values) > 0) == (part is taken)
        stores = [e for e in blocked.src if e.op is Ops.STORE]
        assert len(stores) == 2  # the blocks, and the columns left
        loops = sorted((u for u in stores[0].toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP),
                       key=lambda r: r.arg[0])
        assert [r.src[0].key for r in loops] == [(n // width).key, ((depth + 511) // 512).maximum(1).key]
        assert {u.src[0].src[0].arg for u in blocked.toposort() if u.op is Ops.LOAD} == {0, 1, 2}


def _variable_product(name, dtype=dtypes.float32, transposed=False, dense=False):
    """``out = a @ b`` (``a @ b.T`` where ``transposed``; ``relu(a @ b + bias)`` where ``dense``), ``m x depth``
    by ``depth x n``, every size a variable, no batch."""
    k = KernelBuilder(name)
    m, n, depth = k.var("m", 0, 1 << 14), k.var("n", 1, 1 << 14), k.var("depth", 0, 1 << 14)
    out, a = k.buffer(dtype, (m, n)), k.buffer(dtype, (m, depth))
    b = k.buffer(dtype, (n, depth) if transposed else (depth, n))
    i, j, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    total = (a[i, r] * (b[j, r] if transposed else b[r, j])).reduce(r)
    k.store(out[i, j], (total + k.buffer(dtype, n)[j]).maximum(0.0) if dense else total)
    return k.build()


def _rows_run(part, values):
    """How many turns the outermost parallel range of a kernel's part runs for these variable values."""
    first = min((u for u in part.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL),
                key=lambda r: r.arg[0])
    return evaluate(first.src[0], values)


@pytest.mark.parametrize(("m", "n", "depth", "packed", "pitch"),
                         [(512, 1024, 1024, True, 1040), (16, 1024, 1024, True, 1040), (15, 1024, 1024, False, 1040),
                          (64, 1040, 128, True, 1040), (63, 1040, 128, False, 1040), (600, 1000, 128, True, 1008),
                          (600, 1000, 32, False, 1008), (512, 255, 1024, False, 272), (512, 256, 1024, True, 272),
                          (1, 4096, 4096, False, 4112)])
def test_a_matmul_of_variable_sizes_is_packed_where_its_launch_repays_the_copy(m, n, depth, packed, pitch):
    """Two forms: the copy of ``b`` (rows an odd number of cache lines apart) and the blocks over it, where ``b``
    is larger than a block (128 KiB of float32 here) and its columns hold two blocks of 128, and 16 rows of
    output or more read it where its rows are an even number of lines apart, 64 where they are not; the
    kernel as written for any other launch. The form a launch does not take has rows that end at 0."""
    pack, packed_form, written = block_matmul(_variable_product("plain_mm"), 256 << 10)
    values = {"m": m, "n": n, "depth": depth}

    assert [kernel_label(p) for p in (pack, packed_form, written)] == ["plain_mm_pack", "plain_mm_packed", "plain_mm"]
    scratch = max((u for u in pack.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    assert evaluate(param_size(scratch), values) == depth * pitch
    assert [_rows_run(p, values) for p in (pack, packed_form, written)] == ([depth, m, 0] if packed else [0, 0, m])


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("m", "n", "depth"), [(16, 1024, 300), (15, 1024, 300), (64, 1000, 513), (63, 1000, 64),
                                               (3, 5, 7), (512, 17, 1), (512, 48, 0), (0, 64, 64), (600, 64, 1024)])
def test_a_matmul_of_variable_sizes_computes_a_at_b_in_each_form(compiler, m, n, depth):
    """Launches on either side of each form's gate: rows 8 KiB apart copied or not for 16 rows or 15, rows an
    odd number of lines apart for 64 or 63, an empty sum, no rows, a ``b`` that stays in L2."""
    rng = np.random.default_rng(m + n + depth)
    a, b = rng.standard_normal((m, depth)), rng.standard_normal((depth, n))
    out = np.full((m, n), np.nan)
    device = cpu_device(2, compiler)
    ast = _variable_product("plain_mm", dtypes.float64)
    svod.run(ast, [out, a, b], device=device, m=m, n=n, depth=depth)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    assert svod.compile(ast, device).program.own.status is None  # all proven


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("m", "n", "depth"),
                         [(16, 512, 300), (15, 512, 300), (512, 1000, 1030), (512, 1000, 130), (3, 5, 7),
                          (16, 256, 0), (16, 256, 1)])
def test_a_matmul_of_variable_sizes_storing_a_value_of_its_sum_stores_it_from_the_last_block(compiler, m, n, depth):
    """``relu(a @ b + bias)``: where ``b`` is packed, the blocks keep the sum so far in the output and the last
    one stores the kernel's value of the whole sum (no part of its own, no buffer of sums); as written
    otherwise. Every value is the plain matmul's sum (the same blocks, the same bits) through ``+ bias`` and
    ``relu``, in one sum's block (``depth`` 130) or several (1030), the empty sum and one product among them."""
    parts = block_matmul(_variable_product("dense", dtypes.float64, dense=True), 512 << 10)
    assert [kernel_label(p) for p in parts] == ["dense_pack", "dense_packed", "dense"]
    rng = np.random.default_rng(m + n + depth)
    a, b, bias = rng.standard_normal((m, depth)), rng.standard_normal((depth, n)), rng.standard_normal(n)
    bias[::7] = -np.inf
    device = cpu_device(2, compiler)
    sums, out = np.full((m, n), np.nan), np.full((m, n), np.nan)
    svod.run(_variable_product("plain_mm", dtypes.float64), [sums, a, b], device=device, m=m, n=n, depth=depth)
    ast = _variable_product("dense", dtypes.float64, dense=True)
    svod.run(ast, [out, a, b, bias], device=device, m=m, n=n, depth=depth)
    np.testing.assert_array_equal(out, np.maximum(sums + bias, 0))
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-12, atol=1e-12)
    assert svod.compile(ast, device).program.own.status is None


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("m", "n", "depth"), [(16, 512, 1030), (3, 5, 7)])
def test_a_matmul_adding_its_output_to_its_sum_stores_the_sums_first(compiler, m, n, depth):
    """``out += a @ b``: the value reads the output, which the blocks would fill with partial sums, so the
    sums go to a buffer of their own and a last part adds them."""
    k = KernelBuilder("accumulate")
    mv, nv, dv = k.var("m", 0, 1 << 14), k.var("n", 1, 1 << 14), k.var("depth", 0, 1 << 14)
    out, a = k.buffer(dtypes.float64, (mv, nv)), k.buffer(dtypes.float64, (mv, dv))
    b = k.buffer(dtypes.float64, (dv, nv))
    i, j, r = k.range(mv), k.range(nv), k.range(dv, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r) + out[i, j])
    ast = k.build()
    assert [kernel_label(p) for p in block_matmul(ast, 512 << 10)] == [
        "accumulate_pack", "accumulate_packed", "accumulate_store", "accumulate"]
    rng = np.random.default_rng(m + n + depth)
    a_, b_, c = rng.standard_normal((m, depth)), rng.standard_normal((depth, n)), rng.standard_normal((m, n))
    out_ = c.copy()
    svod.run(ast, [out_, a_, b_], device=cpu_device(2, compiler), m=m, n=n, depth=depth)
    np.testing.assert_allclose(out_, a_ @ b_ + c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("m", "n", "depth", "copied", "pitch"),
                         [(8, 1024, 64, True, 1040), (7, 1024, 64, False, 1040), (100, 1000, 3, True, 1008)])
def test_a_matmul_of_variable_sizes_reading_b_transposed_copies_it_where_rows_repay_it(m, n, depth, copied, pitch):
    """``a @ b.T``: where 8 rows of output or more read ``b``, a copy of ``b.T`` (rows an odd number of cache
    lines apart) and the kernel over it; else the kernel as written. The form a launch does not take has no
    turns."""
    transpose, transposed, written = block_matmul(_variable_product("mm_bt", transposed=True), 512 << 10)
    values = {"m": m, "n": n, "depth": depth}

    assert [kernel_label(p) for p in (transpose, transposed, written)] == [
        "mm_bt_transpose", "mm_bt_transposed", "mm_bt"]
    scratch = max((u for u in transpose.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    assert evaluate(param_size(scratch), values) == depth * pitch
    assert [_rows_run(p, values) for p in (transpose, transposed, written)] == ([n, m, 0] if copied else [0, 0, m])


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("m", "n", "depth"), [(8, 1024, 64), (7, 300, 64), (9, 33, 1000), (100, 17, 5), (16, 5, 0),
                                               (0, 8, 8), (1, 1, 1)])
def test_a_matmul_of_variable_sizes_reading_b_transposed_computes_a_at_b_t(compiler, m, n, depth):
    rng = np.random.default_rng(m + n + depth)
    a, b = rng.standard_normal((m, depth)), rng.standard_normal((n, depth))
    out = np.full((m, n), np.nan)
    device = cpu_device(2, compiler)
    ast = _variable_product("mm_bt", dtypes.float64, transposed=True)
    svod.run(ast, [out, a, b], device=device, m=m, n=n, depth=depth)
    np.testing.assert_allclose(out, a @ b.T, rtol=1e-12, atol=1e-12)
    assert svod.compile(ast, device).program.own.status is None


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("batch", "m", "n", "depth"),
                         [(1, 3, 600, 1100), (1, 2, 256, 512), (3, 5, 255, 513), (1, 1, 1, 1), (2, 4, 300, 0)])
def test_a_blocked_matmul_of_variable_sizes_computes_a_at_b(compiler, batch, m, n, depth):
    """Whole blocks and the columns left, sums of several blocks of rows and of part of one, an empty sum,
    batches."""
    rng = np.random.default_rng(m * n + depth)
    a, b = rng.standard_normal((batch, m, depth)), rng.standard_normal((batch, depth, n))
    out = np.full((batch, m, n), np.nan)
    svod.run(_variable_matmul(dtypes.float64), [out, a, b], device=cpu_device(2, compiler), m=m, n=n, depth=depth,
             batch=batch)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_rows_that_do_not_alias_are_blocked_where_they_are_below_the_rows_that_repay_a_copy():
    """Rows of 4160 bytes start cache lines and map to every set of the cache: fewer than ``BLOCK_MIN_ROWS``
    rows of output read ``b`` itself in blocks; that many read a copy at the same pitch (the array a caller
    passes need not start a cache line). Rows of 4000 bytes do not start cache lines: the copy's rows are
    4032 bytes. 1000 columns are 3 blocks of 256 and a store over the 232 left, which each thread runs over
    its rows too."""
    (blocked,) = block_matmul(_big_matmul(BLOCK_MIN_ROWS - 1, 1024, 1024, pitch=1040))
    assert {u.src[0].src[0].arg for u in blocked.toposort() if u.op is Ops.LOAD} == {0, 1, 2}
    pack, _ = block_matmul(_big_matmul(BLOCK_MIN_ROWS, 1024, 1024, pitch=1040))
    assert max((u for u in pack.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg).dtype.size == 1024 * 1040
    pack, odd = block_matmul(_big_matmul(512, 1000, 1024))
    scratch = max((u for u in pack.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    assert scratch.dtype.size == 1024 * 1008
    stores = [e for e in odd.src if e.op is Ops.STORE]
    assert len(stores) == 2
    blocks, edge = ({int(r.src[0].vmax) for r in store.toposort() if r.op is Ops.RANGE} for store in stores)
    assert blocks == {3, 2, 1, 512, 256} and edge == {2, 1, 512, 232}


@pytest.mark.parametrize(("columns", "pitch"), [(1280, 1296), (1536, 1552), (768, 784), (1024, 1040)])
def test_rows_an_even_number_of_lines_apart_are_copied_an_odd_number_apart(columns, pitch):
    """Rows 80 lines apart (5 KiB) map to half of L2's sets, as rows 64 apart map to a sixteenth: the copy's
    rows are 81 lines apart, so a block's rows fall in every set."""
    pack, _ = block_matmul(_big_matmul(512, columns, 1024))
    scratch = max((u for u in pack.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    assert scratch.dtype.size == 1024 * pitch


def test_a_sum_too_deep_for_a_block_of_columns_is_blocked_and_continued():
    """float64 over 1536 turns: blocks of 256 columns by 512 turns, the turns a loop inside the columns'
    loop; each block's sum starts from what the one before stored. Blocks of a prime length are as even
    as they can be, the last one shorter."""
    (blocked,) = block_matmul(_big_matmul(BLOCK_MIN_ROWS - 1, 520, 1536, dtypes.float64))  # in place
    stores = [e for e in blocked.src if e.op is Ops.STORE]
    assert len(stores) == 2  # 2 blocks of 256 columns and the 8 past them
    ranges = sorted((u for u in stores[0].toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    assert [(int(r.src[0].vmax), r.arg[1]) for r in ranges] == [
        (2, AxisKind.LOOP), (3, AxisKind.LOOP), (1, AxisKind.GLOBAL), (BLOCK_MIN_ROWS - 1, AxisKind.GLOBAL),
        (256, AxisKind.GLOBAL), (512, AxisKind.REDUCE)]
    for store in stores:
        continued = store.src[1]
        assert continued.op is Ops.ADD and continued.arg == CONTINUED and continued.src[1].op is Ops.REDUCE
    (prime,) = block_matmul(_big_matmul(BLOCK_MIN_ROWS - 1, 520, 1531, dtypes.float64))  # 1531: 511, 511, 509
    turns = next(u for u in prime.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE)
    assert (turns.src[0].vmin, turns.src[0].vmax) == (509, 511)



def _block_shape(blocked):
    """The (columns, turns) of the first store's block: its innermost GLOBAL range and its REDUCE range."""
    store = next(e for e in blocked.src if e.op is Ops.STORE)
    ranges = sorted((u for u in store.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    return int(ranges[-2].src[0].vmax), int(ranges[-1].src[0].vmax)


def test_blocks_take_half_of_the_hosts_l2():
    """Zen 3's L2 is 512 KiB: a block of ``b`` takes 256 KiB, 128 columns by 512 turns of float32 or 256 of
    float64 (blocks of 1 MiB would be read from L3 there), and a ``b`` of 1 MiB, which the Xeon's 2 MiB
    keep whole, is blocked. The host's size reaches lowering through ``DeviceCaps.l2_bytes``."""
    zen3 = 512 << 10
    assert block_matmul(_big_matmul(512, 512, 512)) is None
    assert _block_shape(block_matmul(_big_matmul(512, 512, 512), zen3)[-1]) == (128, 512)
    assert _block_shape(block_matmul(_big_matmul(512, 1024, 1024, pitch=1040), zen3)[-1]) == (128, 512)
    assert _block_shape(block_matmul(_big_matmul(512, 1024, 1024, dtypes.float64, pitch=1032), zen3)[-1]) == (128, 256)
    assert _block_shape(block_matmul(_big_matmul(512, 1024, 1024, dtypes.float64, pitch=1032))[-1]) == (256, 512)


def _gemm(m, n, depth, name="gemm"):
    """NPBench's gemm, in place: ``c = 1.5 * a @ b + 1.2 * c``, float64."""
    k = KernelBuilder(name)
    c, a, b = (k.buffer(dtypes.float64, shape) for shape in ((m, n), (m, depth), (depth, n)))
    i, j, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(c[i, j], (a[i, r] * b[r, j]).reduce(r) * 1.5 + c[i, j] * 1.2)
    return k.build()


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("rows", [512, 37])
def test_a_deep_sum_the_kernel_scales_is_summed_blocked_first_and_stored_after(monkeypatch, compiler, rows):
    """The sums of a gemm go to a scratch buffer, continued block by block, and a last part computes
    ``1.5 * sum + 1.2 * c`` from them: the bits of the kernel unblocked, and numpy's answer. ``BLOCK_MIN_ROWS``
    rows sum over a copy of ``b``, fewer over ``b`` itself."""
    device = open_device(compiler)
    ast = _gemm(rows, 520, 1536)
    *packs, summed, stored = device.renderer.parts(ast)
    assert len(packs) == (rows >= BLOCK_MIN_ROWS)
    scratch = next(u for u in summed.toposort() if u.op is Ops.PARAM and u.arg == 3)
    assert scratch.dtype.size == rows * 520
    assert not any(u.op is Ops.REDUCE for u in stored.toposort())
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((rows, 1536)), rng.standard_normal((1536, 520)), rng.standard_normal((rows, 520))
    blocked = c.copy()
    svod.run(ast, [blocked, a, b], device=device)
    np.testing.assert_allclose(blocked, 1.5 * a @ b + 1.2 * c, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, l2_bytes=1 << 62))  # b fits
    plain = _gemm(rows, 520, 1536, name="gemm_unblocked")
    assert device.renderer.parts(plain) == (plain,)
    unblocked = c.copy()
    svod.run(plain, [unblocked, a, b], device=device)
    np.testing.assert_array_equal(blocked, unblocked)


def _vector_matrix(depth, n, plus=False, name="v_at_a"):
    """``out = v @ a`` (``a`` of ``depth`` rows of ``n``), float64; with ``plus``, ``out += v @ a``."""
    k = KernelBuilder(name)
    out, v, a = k.buffer(dtypes.float64, n), k.buffer(dtypes.float64, depth), k.buffer(dtypes.float64, (depth, n))
    j, r = k.range(n), k.range(depth, AxisKind.REDUCE)
    total = (v[r] * a[r, j]).reduce(r)
    k.store(out[j], out[j] + total if plus else total)
    return k.build()


def test_one_row_of_output_over_rows_a_page_apart_is_streamed_in_passes_of_its_sum():
    """``v @ a`` over 520 float64 columns (rows 4160 bytes apart) by 260 turns, ``a`` larger than half of L2:
    passes of ``STREAM_DEPTH`` turns, the outermost loop, each over every column and continuing the sum the
    pass before stored. Rows closer than a page are read as written; ``out += v @ a`` sums first."""
    (streamed,) = block_matmul(_vector_matrix(260, 520))
    (store,) = [e for e in streamed.src if e.op is Ops.STORE]
    ranges = sorted((u for u in store.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    assert [(int(r.src[0].vmax), r.arg[1]) for r in ranges] == [
        (33, AxisKind.LOOP), (520, AxisKind.GLOBAL), (STREAM_DEPTH, AxisKind.REDUCE)]  # 32 passes of 8, one of 4
    assert store.src[1].op is Ops.ADD and store.src[1].arg == CONTINUED
    assert block_matmul(_vector_matrix(280, 500)) is None  # rows 4000 bytes apart
    summed, stored = block_matmul(_vector_matrix(260, 520, plus=True))
    assert (kernel_label(summed), kernel_label(stored)) == ("v_at_a_sum", "v_at_a_store")


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("depth", "n", "plus"), [(1, 131101, False), (8, 16411, False), (9, 14593, True),
                                                  (263, 521, False), (263, 521, True)])
def test_a_streamed_row_of_output_is_numpys_and_the_bits_of_the_kernel_unstreamed(monkeypatch, compiler, depth, n,
                                                                                   plus):
    """One pass, exactly one, one and a turn, and primes (a last pass of 7 turns), into ``out`` and into a sum
    added to it; special values in ``a`` (NaN, infinities, -0.0) stay where NumPy has them. The same bits as
    unstreamed, in the columns of whole register tiles (the C pair adds a loop's one sum, the columns past
    them, in any order)."""
    device = open_device(compiler)
    ast = _vector_matrix(depth, n, plus)
    assert len(device.renderer.parts(ast)) == 1 + plus
    rng = np.random.default_rng(depth)
    v, a, out = rng.standard_normal(depth), rng.standard_normal((depth, n)), rng.standard_normal(n)
    a[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    streamed = out.copy()
    svod.run(ast, [streamed, v, a], device=device)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(streamed, out * plus + v @ a, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, l2_bytes=1 << 62))
    plain = _vector_matrix(depth, n, plus, name="v_at_a_unstreamed")
    assert device.renderer.parts(plain) == (plain,)
    unstreamed = out.copy()
    svod.run(plain, [unstreamed, v, a], device=device)
    tiled = n if compiler == "llvm" else n // 16 * 16
    np.testing.assert_array_equal(streamed[:tiled], unstreamed[:tiled])


def _transposed_matmul(m, n, depth, dtype=dtypes.float32, a_t=False, b_t=True):
    """``out = a @ b`` with ``a`` stored as ``a.T`` and ``b`` as ``b.T`` where asked."""
    k = KernelBuilder("mm_t")
    out = k.buffer(dtype, (m, n))
    a, b = k.buffer(dtype, (depth, m) if a_t else (m, depth)), k.buffer(dtype, (n, depth) if b_t else (depth, n))
    i, j, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(out[i, j], ((a[r, i] if a_t else a[i, r]) * (b[j, r] if b_t else b[r, j])).reduce(r))
    return k.build()


def test_transposed_operands_are_copied_to_the_layout_a_tile_reads():
    """``b[j, r]`` is copied as ``b.T`` (rows of 40 float32 padded to 48) and ``a[r, i]`` as ``a.T``; the
    kernel reads the copies at unit stride along ``j`` and ``r``. With fewer than 8 rows, nothing is
    copied."""
    b_t, kernel = block_matmul(_transposed_matmul(40, 40, 24))
    scratch = max((u for u in b_t.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    assert (scratch.arg, scratch.dtype.size) == (3, 24 * 48)
    assert {u.src[0].src[0].arg for u in kernel.toposort() if u.op is Ops.LOAD} == {1, 3}
    copies = block_matmul(_transposed_matmul(40, 48, 24, a_t=True, b_t=True))
    assert [s.arg for s in copies] == ["mm_t_transpose", "mm_t_transposed_transpose", "mm_t_transposed_transposed"]
    assert {u.src[0].src[0].arg for u in copies[-1].toposort() if u.op is Ops.LOAD} == {3, 4}
    assert block_matmul(_transposed_matmul(7, 48, 24)) is None


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("a_t", "b_t"), [(False, True), (True, False), (True, True)],
                         ids=["a@b.T", "a.T@b", "a.T@b.T"])
def test_transposed_matmuls_match_numpy(compiled_device, dtype, a_t, b_t):
    """Sizes the copy's squares of 16 divide and do not, the tiles' widths ± 1, primes, and 1; a device
    that holds no such type (a WebGPU buffer and float64) refuses the kernel by name."""
    if dtype not in compiled_device.caps.element_dtypes:
        with pytest.raises(GraphError, match=f"cannot hold {dtype.name}, the dtype of buffer 0") as raised:
            svod.compile(_transposed_matmul(8, 1, 1, dtype, a_t, b_t), compiled_device)
        assert raised.value.kernel == "mm_t"
        return
    for m, n, depth in [(8, 1, 1), (37, 31, 29), (64, 48, 16), (33, 65, 17)]:
        rng = np.random.default_rng(m * n + depth)
        a = rng.standard_normal((m, depth)).astype(dtype.numpy)
        b = rng.standard_normal((depth, n)).astype(dtype.numpy)
        out = np.full((m, n), np.nan, dtype.numpy)
        args = [out, np.ascontiguousarray(a.T) if a_t else a, np.ascontiguousarray(b.T) if b_t else b]
        svod.run(_transposed_matmul(m, n, depth, dtype, a_t, b_t), args, device=compiled_device)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(depth))


def test_the_thread_split_is_a_range_of_the_effect_with_the_most_work():
    """A blocked matmul of 64 rows: its store over the blocks (896 columns, tiles of 4 rows) and its store of
    the 4 columns past them (rows of one) have rows of their own. The split is over the first's; over the
    second's, the blocks ran on worker 0 alone."""
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=2, l2_bytes=512 << 10)
    target = pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)
    out, a, b = np.empty((64, 900)), np.empty((64, 1100)), np.empty((1100, 900))
    *_, blocked = pipeline.parts(svod.kernel(matmul_py.fn, static_shapes=True).build(out, a, b), target)
    split = pipeline.lower(blocked, target).sink

    def nesting(effect):
        return len([r for r in effect.toposort() if r.op is Ops.RANGE])

    # a store of a tile in the blocks: in the blocks' loop too (the split cut its rows into several chunks)
    heaviest = max((e for e in split.src if e.op is Ops.STORE), key=nesting)
    core_id = next(u for u in split.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_id")
    assert core_id.eq(0) not in heaviest.toposort()
    assert core_id in heaviest.src[0].toposort()


def test_a_matmul_is_not_blocked_where_it_would_not_pay():
    assert block_matmul(_big_matmul(512, 512, 512)) is None  # b of 1 MiB stays in L2
    assert block_matmul(_big_matmul(1, 1000, 1024)) is None  # one row over rows less than a page apart
    copy, *_, blocked = block_matmul(_big_matmul(512, 1024, 1024, transposed=True))  # b's rows are its columns
    assert copy.arg == "big_mm_transpose" and any(u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP
                                                  for u in blocked.toposort())  # copied as b.T, then blocked
    for rows, columns in ((511, 1000), (15, 1024)):  # too few rows to repay a copy of b: rows 4000 bytes apart
        (blocked,) = block_matmul(_big_matmul(rows, columns, 1024))  # (not starting lines), or 4 KiB apart
        assert {u.src[0].src[0].arg for u in blocked.toposort() if u.op is Ops.LOAD} == {0, 1, 2}
    for rows, columns in ((512, 1000), (16, 1024)):  # enough rows do
        pack, _ = block_matmul(_big_matmul(rows, columns, 1024))
        assert pack.arg == "big_mm_pack"


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("l2_bytes", [None, 512 << 10], ids=["host_l2", "zen3_l2"])
@pytest.mark.parametrize(("dtype", "batch", "columns", "pitch", "depth", "rows"), [
    (dtypes.float32, 1, 1024, 1024, 1024, 512), (dtypes.float64, 2, 1024, 1024, 512, 512),
    (dtypes.float32, 1, 1024, 1040, 1024, 512), (dtypes.float32, 1, 1000, 1000, 1024, 512),
    (dtypes.float64, 1, 520, 520, 1531, 512), (dtypes.float32, 1, 1031, 1031, 2100, 512),
    (dtypes.float64, 1, 520, 520, 1531, 511), (dtypes.float32, 1, 1000, 1000, 1024, 97)])
def test_a_blocked_matmul_gives_the_bits_of_the_unblocked_one(monkeypatch, compiler, l2_bytes, dtype, batch, columns,
                                                              pitch, depth, rows):
    """Blocks and the packed copy move ``b``, and blocks of the sum continue it, not change its order: the
    same bits as the kernel as it was, with blocks sized for this host's L2 or for Zen 3's. ``BLOCK_MIN_ROWS``
    rows of output and more read a copy; fewer read ``b`` in place, where its rows are not 4 KiB apart."""
    device = open_device(compiler)
    if l2_bytes is not None:
        monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, l2_bytes=l2_bytes))
    ast = _big_matmul(rows, columns, depth, dtype, batch, pitch=pitch)
    assert len(device.renderer.parts(ast)) == (2 if rows >= BLOCK_MIN_ROWS else 1)  # a copy, then the blocks
    rng = np.random.default_rng(3)
    a = rng.standard_normal((batch, rows, depth)).astype(dtype.numpy)
    b = rng.standard_normal((batch, depth, pitch)).astype(dtype.numpy)
    blocked = np.full((batch, rows, columns), np.nan, dtype.numpy)  # a continued sum's first block reads none of it
    svod.run(ast, [blocked, a, b], device=device)
    np.testing.assert_allclose(blocked, a @ b[:, :, :columns], rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, l2_bytes=1 << 62))  # b fits
    plain = _big_matmul(rows, columns, depth, dtype, batch, name="big_mm_unblocked", pitch=pitch)  # another compile
    assert device.renderer.parts(plain) == (plain,)
    unblocked = np.zeros_like(blocked)
    svod.run(plain, [unblocked, a, b], device=device)
    np.testing.assert_array_equal(blocked, unblocked)


def _added_transpose(n: int) -> UOp:
    """``out[c, r] += x[r, c]``: a transpose that reads what it writes."""
    k = KernelBuilder("added_transpose")
    out, x = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    r, c = k.range(n), k.range(n)
    k.store(out[c, r], out[c, r] + x[r, c])
    return k.build()


def test_a_transpose_is_walked_in_blocks_that_stay_in_cache():
    """``out[c, r] = x[r, c]`` reads along one range and writes along the other: whole 16x16 blocks (4 ranges),
    the last along each range starting a block before its end where 16 does not divide it; a transpose that
    reads what it writes has its last blocks cut short instead (running a work item twice would add twice);
    a copy along one range is left."""
    for n, blocks in [(96, 6), (100, 7)]:
        blocked = block_transposes(simplify(anchor_ranges(transpose(n).steps[0].ast)))
        assert blocked is not None and len(blocked.src) == 1
        assert sorted(r.src[0].arg for r in blocked.toposort() if r.op is Ops.RANGE) == [blocks, blocks, 16, 16]
    added = block_transposes(simplify(anchor_ranges(_added_transpose(100))))
    assert added is not None
    ends = [r.src[0] for r in added.toposort() if r.op is Ops.RANGE]
    assert sorted(e.arg for e in ends if e.op is Ops.CONST) == [7, 7]
    assert [e.op for e in ends if e.op is not Ops.CONST] == [Ops.MIN, Ops.MIN]  # min(100 - 16*block, 16)
    k = KernelBuilder("copy")
    out, x = k.buffer(dtypes.float32, (64, 64)), k.buffer(dtypes.float32, (64, 64))
    r, c = k.range(64), k.range(64)
    k.store(out[r, c], x[r, c])
    assert block_transposes(simplify(anchor_ranges(k.build()))) is None


@pytest.mark.parametrize("n", [40, 100])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_a_transpose_that_reads_what_it_writes_adds_each_element_once(compiler, n):
    open_device(compiler)
    data = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
    out = np.ones((n, n), np.float32)
    svod.run(_added_transpose(n), [out, data], device=cpu_device(3, compiler))
    np.testing.assert_array_equal(out, 1 + data.T)


@pytest.mark.parametrize("shape", [(64, 64), (65, 97), (100, 64), (31, 200), (257, 129), (1, 70), (0, 80),
                                   (16, 17), (47, 15), (33, 0), (1000, 1007)])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("threads", [1, 3])
def test_blocked_transposes_of_symbolic_sizes_match_numpy(compiler, shape, threads):
    """Over sizes that are variables, whole blocks, the last along each range over elements the one before
    also covers, and the kernel as written where a size is under a block (the output starts as NaN); on one
    thread and on three (1000x1007 wakes them, sharing 63 rows of blocks unevenly)."""
    @svod.kernel
    def transposed(out, x):
        for r in svod.prange(x.shape[0]):
            for c in svod.prange(x.shape[1]):
                out[c, r] = x[r, c]
    sink = simplify(anchor_ranges(transposed.build(np.zeros(shape[::-1], np.float32), np.zeros(shape, np.float32))))
    assert block_transposes(sink) is not None
    data = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)
    out = np.full(shape[::-1], np.nan, np.float32)
    open_device(compiler)  # a skip where this machine lacks it
    transposed(out, data, device=cpu_device(threads, compiler))
    np.testing.assert_array_equal(out, data.T)


@pytest.mark.parametrize("n", [64, 96, 100])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_blocked_transposes_match_numpy(compiler, n):
    device = open_device(compiler)
    data = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
    out = np.full((n, n), np.nan, np.float32)
    svod.run(transpose(n).steps[0].ast, [out, data], device=device)
    np.testing.assert_array_equal(out, data.T)


def _column_sums(m, n, depth, centered, name="column_sums"):
    """``out[i, c]`` = column ``i``'s sum of ``b`` (``depth x m``), or ``x[c, i]`` less its mean: a sum that
    the output's inner range ``c`` does not read, and ``b`` read at unit stride along the outer ``i``."""
    k = KernelBuilder(name)
    out, b, x = (k.buffer(dtypes.float64, (m, n)), k.buffer(dtypes.float64, (depth, m)),
                 k.buffer(dtypes.float64, (n, m)))
    i, c, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    total = b[r, i].reduce(r)
    k.store(out[i, c], x[c, i] - total / float(depth) if centered else total)
    return k.build()


def test_a_sum_the_same_across_an_output_range_is_not_blocked():
    """Blocks continue a sum from what each element stores; a sum the same across ``c`` is computed outside
    ``c``'s loop, where no element is: such a kernel stays as written, where a matmul of that ``b`` is blocked."""
    assert block_matmul(_column_sums(256, 8, 300, centered=False), 64 << 10) is None
    assert block_matmul(_column_sums(263, 600, 300, centered=True), 64 << 10) is None
    assert block_matmul(_big_matmul(8, 256, 300, dtypes.float64), 64 << 10) is not None


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("m", "n", "depth"), [(256, 8, 300), (263, 2, 257), (384, 7, 301), (257, 1, 300)])
@pytest.mark.parametrize("centered", [False, True])
def test_column_sums_over_an_l2_they_outgrow_match_numpy(monkeypatch, compiler, m, n, depth, centered):
    """Refused before: blocked, the sum was continued from each element's partial sum outside their loop."""
    device = open_device(compiler)
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, l2_bytes=64 << 10))
    rng = np.random.default_rng(m + n)
    b, x = rng.standard_normal((depth, m)), rng.standard_normal((n, m))
    out = np.full((m, n), np.nan)
    svod.run(_column_sums(m, n, depth, centered, f"column_sums_{int(centered)}"), [out, b, x], device=device)
    sums = np.broadcast_to(b.sum(axis=0)[:, None], (m, n))
    np.testing.assert_allclose(out, x.T - sums / depth if centered else sums, rtol=1e-12, atol=1e-12)


@svod.kernel
def deviations_by_column(out, data):
    """``out[i, n]``: ``data[n, i]`` less column ``i``'s mean, summed for each ``n`` (sizes a launch's)."""
    for i in svod.prange(out.shape[0]):
        for n in svod.prange(out.shape[1]):
            total = 0.0
            for k in range(data.shape[0]):
                total += data[k, i]
            out[i, n] = data[n, i] - total / data.shape[0]


@svod.jit
def covariance_of_columns(data):
    return np.cov(np.transpose(data))


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("rows", "variables"), [(37, 263), (64, 256), (67, 300), (2, 257)])
def test_covariance_of_columns_that_outgrow_l2_matches_numpy(monkeypatch, compiler, rows, variables):
    """npbench's covariance2 at sizes whose deviations kernel a 64 KiB L2 would block (its mean, a sum the
    same for every row, refused before), and a Python kernel of variable sizes doing the same."""
    device = open_device(compiler)
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, l2_bytes=64 << 10))
    data = np.cos(np.arange(rows * variables) * 0.3).reshape(rows, variables) * 2.0 + 0.5
    np.testing.assert_allclose(covariance_of_columns(data, device=device), np.cov(data.T), rtol=1e-11, atol=1e-12)
    out = np.full((variables, rows), np.nan)
    deviations_by_column(out, data, device=device)
    np.testing.assert_allclose(out, (data - data.mean(axis=0)).T, rtol=1e-12, atol=1e-12)
