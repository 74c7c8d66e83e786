"""Lowering passes: rewrites of a kernel AST for a device, before the linearizer orders it. Each says the
one guarantee it gives; the order they run in, per target, is ``svod.codegen.pipeline``'s."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from svod.codegen.indexing import Poly, to_poly
from svod.codegen.ranges import live_ranges, nested, range_order
from svod.device.caps import ASSUMED_L2_BYTES, CORE_ID, WorkGroupLimits, launch_index
from svod.dtype import PtrDType, dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, UPat, graph_rewrite, kernel_label, substitute
from svod.ir.ops import CONTINUED, EFFECTS, FUSED, LANE_OPS
from svod.ir.uop import FUSED_DTYPES, memory_of, param_size, pointee, written_memory

__all__ = ["WorkGroupLimits", "anchor_ranges", "block_matmul", "decompose", "describe", "fuse_products",
           "privatize_atomics", "reduce_per_item", "share_reductions", "split_for_threads", "split_reduction",
           "split_reductions", "tile_matmul", "to_gpu_indices", "upcast_reductions"]


def anchor_ranges(sink: UOp) -> UOp:
    """Each effect keeps, as extra sources, the ranges it was written in (those its target and value
    depend on). Simplification may fold a dependency away (``min(j, -1)`` is ``-1`` for a LOOP range ``j``),
    but ``out[i] += min(j, -1)`` must still run once per ``j``: the ranges an effect runs over are decided
    by the kernel as written. Renderers read an effect's first two sources only."""
    live = live_ranges(sink)
    effects = [e.replace(src=(*e.src[:2], *sorted(live[e], key=range_order))) if e.op in EFFECTS and live[e] else e
               for e in sink.src]
    return sink.replace(src=tuple(effects))


def fuse_products(sink: UOp) -> UOp:
    """Each float32 or float64 sum of products (a REDUCE ADD whose value is a MUL) accumulates with one
    rounding per term, ``acc = fma(a, b, acc)``, as BLAS does: the MUL is marked ``FUSED``. It runs before
    any rewrite, so that what fuses is decided by the kernel as written, as the reference decides it."""
    def fused(node: UOp) -> UOp | None:
        value = node.src[0]
        if node.arg is not Ops.ADD or node.dtype not in FUSED_DTYPES or value.op is not Ops.MUL or value.arg == FUSED:
            return None
        return node.replace(src=(value.replace(arg=FUSED), *node.src[1:]))
    return graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="node"), fused)]), name="fuse_products")


def decompose(root: UOp, decompositor: PatternMatcher | None) -> UOp:
    return root if decompositor is None else graph_rewrite(root, decompositor, name="decompose")


def gate_effects(sink: UOp, conditions: Mapping[UOp, UOp]) -> UOp:
    """Each effect of ``sink`` that ``conditions`` names runs only where its condition holds: its target
    INDEX is gated (together with any gate it has), and so is every load it makes. (A work item past the
    end of a range must not load either: the accesses were proven safe for indices inside the range.)"""
    effects = []
    for e in sink.src:
        cond = conditions.get(e)
        effects.append(e if cond is None else _gated(e, cond))
    return sink.replace(src=tuple(effects))


def _gated(effect: UOp, cond: UOp, target: bool = True, depending_on: UOp | None = None) -> UOp:
    """``effect`` with ``cond`` added to the gate of each load below it (of those whose index depends on
    ``depending_on``, if given), and of its target unless ``target`` is False (then ``effect`` may be any
    value)."""
    def gate(index: UOp) -> UOp:
        return index.replace(src=(*index.src[:2], cond if len(index.src) == 2 else index.src[2] & cond))

    rebuilt: dict[UOp, UOp] = {}
    depends: dict[UOp, bool] = {}
    for u in effect.toposort():
        src = tuple(rebuilt[s] for s in u.src)
        node = u if src == u.src else u.replace(src=src)
        depends[u] = depending_on is None or u is depending_on or any(depends[s] for s in u.src)
        if (u.op is Ops.LOAD and depends[u.src[0]]) or (target and u is effect):
            node = node.replace(src=(gate(node.src[0]), *node.src[1:]))
        rebuilt[u] = node
    return rebuilt[effect]


# ---- CPU threads -----------------------------------------------------------------------------------------

THREAD_MIN_WORK = 1 << 14
"""Below this many innermost iterations (at the largest sizes the variables allow) a kernel stays on
one thread: waking workers would cost more than the work."""
THREAD_CHUNK_ALIGN = 16
"""Each thread's chunk of the split range starts on a multiple of this, so vector loops stay aligned."""


def split_for_threads(sink: UOp, threads: int) -> UOp:
    """Split the outermost GLOBAL range that has a chunk for each of ``threads`` workers (named by
    ``core_id``), else the outermost that has two, across the workers. (A register tile may leave few
    chunks on the outermost range: 16 channels in tiles of 8 rows are two.)

    Worker ``c`` runs indices ``[c*chunk, min((c+1)*chunk, end))`` where ``chunk`` is ``end/threads``
    rounded up to a multiple of ``THREAD_CHUNK_ALIGN`` for the innermost range (whose neighbours are
    neighbouring elements), of 1 for another. Other GLOBAL ranges become sequential loops inside it. An
    effect that does not use the split range runs on worker 0 only.
    """
    ranges = [u for u in sink.toposort() if u.op is Ops.RANGE]
    global_ranges = sorted((r for r in ranges if r.arg[1] is AxisKind.GLOBAL), key=range_order)
    if threads <= 1 or not global_ranges:
        return sink
    work = 1
    for r in ranges:
        work *= max(int(r.src[0].vmax), 1)
    aligns = {r: THREAD_CHUNK_ALIGN if r is global_ranges[-1] else 1 for r in global_ranges}
    outer = next((r for r in global_ranges if r.src[0].vmax >= threads * aligns[r]),
                 next((r for r in global_ranges if r.src[0].vmax >= 2 * aligns[r]), None))
    if work < THREAD_MIN_WORK or outer is None:
        return sink
    core_id = UOp.define_var(CORE_ID, 0, threads - 1)
    start, inner = _thread_chunk(outer, core_id, threads, aligns[outer])
    live = live_ranges(sink)
    first_only = {e: core_id.eq(0) for e in sink.src if e.op in EFFECTS and outer not in live[e]}
    return substitute(gate_effects(sink, first_only), {outer: start + inner})


def _thread_chunk(r: UOp, core_id: UOp, threads: int, align: int) -> tuple[UOp, UOp]:
    """Worker ``core_id``'s share of range ``r``, in chunks a multiple of ``align``: its first index, and a
    loop over its chunk (whose iterations are work items as before: independent of one another)."""
    end = r.src[0]
    per_thread = (end + (threads - 1)) // threads
    chunk = (per_thread + (align - 1)) // align * align
    start = core_id * chunk
    return start, UOp.range((end - start).minimum(chunk), r.arg[0], AxisKind.GLOBAL)  # still parallel work


PRIVATE_BYTES = 32 * 1024
"""The largest buffer of atomic adds a CPU thread keeps a private copy of: on its stack, in its L1 cache."""


def privatize_atomics(sink: UOp) -> UOp:
    """Atomic adds into a small buffer (a histogram's counts), made by each CPU thread into a private copy
    and added to the buffer once per element at the end.

    Threads that add into one small buffer contend for its cache lines, and each add is a locked
    instruction even without contention; a private copy takes plain adds. A buffer qualifies when its size
    is a constant of at most ``PRIVATE_BYTES``, the kernel only adds into it (no load, store, MAX or MIN),
    and it makes at least as many adds per thread as the buffer has elements (else the copy costs more
    than it saves). The kernel becomes: the copy set to 0 (``-0.0`` for floats, which any sum keeps),
    the kernel with its adds into the copy, then each thread's copy added into the buffer (integer zeros
    skipped). A private copy is a ``DEFINE_LOCAL`` whose source is the buffer it stands for, so a bounds
    check on it reports that buffer. Integer sums are exact; a float sum's order was never fixed.
    """
    topo = sink.toposort()
    live = live_ranges(sink)
    adds: dict[UOp, list[UOp]] = {}
    for e in sink.src:
        if e.op is Ops.ATOMIC and e.arg is Ops.ADD and e.src[0].src[0].op is Ops.PARAM:
            adds.setdefault(e.src[0].src[0], []).append(e)
    others = {memory_of(u.src[0].src[0]) for u in topo if u.op in (Ops.LOAD, Ops.STORE, Ops.ATOMIC)
              and not (u.op is Ops.ATOMIC and u in adds.get(u.src[0].src[0], ()))}
    axes = iter(range(1 + max((u.arg[0] for u in topo if u.op is Ops.RANGE), default=-1), 1 << 30))
    setup: list[UOp] = []
    flush: list[UOp] = []
    private: dict[UOp, UOp] = {}
    for buffer, found in adds.items():
        assert isinstance(buffer.dtype, PtrDType)
        size, base = buffer.dtype.size, buffer.dtype.base
        work = sum(math.prod(int(r.src[0].vmax) for r in live[e]) for e in found)
        if buffer.src or buffer in others or not 0 < size * base.itemsize <= PRIVATE_BYTES or work < size:
            continue
        copy = private[buffer] = UOp(Ops.DEFINE_LOCAL, base.ptr(size, local=True), (buffer,), len(private))
        setup.append(copy.index(UOp.range(size, next(axes), AxisKind.LOOP)).store(-0.0 if base.is_float else 0))
        each = UOp.range(size, next(axes), AxisKind.LOOP)
        total = copy.index(each).load()
        flush.append(buffer.index(each, gate=None if base.is_float else total.ne(0)).atomic(total))
    if not private:
        return sink
    body = [e.replace(src=(e.src[0].replace(src=(private[e.src[0].src[0]], *e.src[0].src[1:])), *e.src[1:]))
            if e.op is Ops.ATOMIC and e.src[0].src[0] in private else e for e in sink.src if e.op in EFFECTS]
    return sink.replace(src=(*setup, *body, *flush, *(u for u in sink.src if u.op not in EFFECTS)))


def speculate_gated_loads(sink: UOp) -> UOp:
    """Gated loads from a buffer the kernel only reads, of a constant size of at least one element, as
    loads at ``gate.where(index, 0)`` whose value counts only where the gate holds.

    Such a load always reads inside the buffer (binding checks it holds the constant size), and without a
    branch per access, a CPU vectorises the lanes of a register tile: a padded convolution's edge test
    becomes a masked gather instead of sixteen branches. On a GPU, a masked tile's loads no longer diverge
    (and PoCL vectorises the work items of a group again). Where the gate fails, the value read (element 0,
    which another kernel may be writing) is discarded; LLVM gives a racing plain load an undefined value,
    not undefined behaviour. A checked access (``CHECKED``) keeps its run-time test.
    """
    topo = sink.toposort()
    written = written_memory(topo)
    replaced: dict[UOp, UOp] = {}
    for load in topo:
        index = load.src[0] if load.op is Ops.LOAD else None
        if index is None or len(index.src) != 3 or index.arg is not None:
            continue
        buffer, position, gate = index.src
        memory = memory_of(buffer)
        if memory.op is not Ops.PARAM or memory in written or not isinstance(memory.dtype, PtrDType) \
                or memory.dtype.size < 1:
            continue
        always = index.replace(src=(buffer, gate.where(position, 0)))
        replaced[load] = gate.where(load.replace(src=(always, *load.src[1:])), UOp.const(load.dtype, 0))
    return substitute(sink, replaced) if replaced else sink


BLOCK_SHARE = 2
"""A block of ``b`` takes at most a ``1/BLOCK_SHARE`` of a core's L2 cache, so it stays there while every
row of the output passes over it, with room for the rows of ``a`` (on the Xeon's 2 MiB, matmul 2048: 209
GFLOP/s in blocks of 1 MiB, 163 in blocks of 2; float64 1024: 126 against 94)."""
BLOCK_MIN_ROWS = 512
"""The fewest rows of output (times batches) that repay copying ``b`` where its rows alias: an MLP's 256-row
layer over a 4 MiB ``b`` took 1.22 ms unpacked and 1.23 packed, the copy costing what the blocks saved."""
BLOCK_WIDTHS = (256, 128)
"""The widths a block of columns may take, widest first: multiples of every register tile's row."""
BLOCK_DEPTH = 512
"""The most turns of a sum one block of ``b``'s rows takes (fewer where the narrowest block of that depth
would not fit in its share of L2): the block then stays in L2 whatever the sum's length, and a row of
``a``'s register tile (8 rows, 16 KiB in float32) in L1 across the block's columns. matmul 2048: 73 -> 52
ms; float64 1024: 16.9 -> 13.5; NPBench's gemm (2500x2750x3000 float64, blocks of 500): 1.43 s -> 0.32."""


def block_matmul(sink: UOp, l2_bytes: int = ASSUMED_L2_BYTES) -> tuple[UOp, ...] | None:
    """A CPU matmul whose ``b`` is larger than its share of a core's L2 cache (``BLOCK_SHARE`` of
    ``l2_bytes``), over ``b`` in blocks of ``W`` columns: the blocks are an outermost sequential loop, so
    each thread passes its rows over every block, and the columns past the last whole block are a store of
    their own. A block of ``b`` (``K x W`` elements) then stays in L2 while the rows pass over it; ``b``
    read whole from L3 for each row of tiles ran at 92 GFLOP/s on one core, against 163 where it fits in
    L2. A sum longer than ``BLOCK_DEPTH`` runs in blocks of ``D`` turns too, a loop inside the columns'
    loop: a block of ``b`` is then ``D x W``, and each block continues the sum the block before stored
    (``_continued``). Where the kernel stores something else of the sum (``alpha * sum + beta * c``), the
    sums go to a scratch buffer first and a last stage stores the kernel's values (``_summed_first``).

    Rows of ``b`` a multiple of 4 KiB apart map to a sixteenth of the cache's sets or fewer, and a block cut
    from them does not stay in L2 either (94 GFLOP/s in blocks, 167 over rows 4224 bytes apart); rows that
    do not start a cache line split a tile's vector loads in two (2500x2750x3000 float64: 0.36 s, 0.30 over
    rows of 2752). Such a kernel, where at least ``BLOCK_MIN_ROWS`` rows of output read ``b``, runs as two
    that share every buffer and one more:

    - ``pack``: ``b`` copied into the scratch buffer, each row starting a cache line, none 4 KiB apart;
    - ``packed``: the blocked matmul reading the copy.

    Each product is added in the same order as before, so the result is the same bits. None unless the
    kernel is one store of a value with one float sum over a range of constant size, reading no memory the
    kernel writes, its output ranges constant, and ``b`` read at ``k * s + j + rest`` (``rest`` a multiple
    of ``s``: a batch).
    """
    effects = [e for e in sink.src if e.op in EFFECTS]
    if len(effects) != 1 or effects[0].op is not Ops.STORE:
        return None
    store = effects[0]
    reduces = [u for u in store.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD or reduces[0].dtype not in FUSED_DTYPES \
            or len(reduces[0].src) != 2 or reduces[0].src[1].src[0].op is not Ops.CONST:
        return None
    k = reduces[0].src[1]
    outputs = live_ranges(sink)[store]
    if not outputs or any(r.arg[1] is not AxisKind.GLOBAL or r.src[0].op is not Ops.CONST for r in outputs):
        return None
    written = written_memory(effects)
    loads = _reduction_loads(store)
    if any(memory_of(u.src[0].src[0]) in written for u in loads):
        return None  # the sum reads what the kernel writes: its blocks would read it in another order
    copied, sink = _transposed(sink, k, outputs, loads)
    if copied:  # the sum now reads the copies
        store = _the_store(sink)
        loads = _reduction_loads(store)
    for load in loads:
        found = _blockable(load, k, outputs, written, l2_bytes // BLOCK_SHARE)
        if found is None:
            continue
        rows = math.prod(int(r.src[0].arg) for r in outputs) // int(found[0].src[0].arg)
        if rows < 2:
            break  # one row reads each block once: blocks only reorder its pass (1x4096x4096: 2.3 -> 4.3 ms)
        if found[-1] < int(k.src[0].arg) and store.src[1].op is not Ops.REDUCE:
            return (*copied, *_summed_first(sink, load, k, found, nested(outputs), rows))
        return (*copied, *_blocked(sink, load, k, *found, rows))
    return (*copied, sink) if copied else None


def _the_store(sink: UOp) -> UOp:
    """The one STORE of a kernel ``block_matmul`` took (its only effect), or of a stage it built."""
    return next(e for e in sink.src if e.op is Ops.STORE)


TRANSPOSE_TILE = 16
"""The side of the squares a transposed copy moves one at a time: 16 rows of 16 elements, read and written a
cache line at a time while the square stays in L1."""


def _pitch(count: int, itemsize: int) -> int:
    """The elements between rows of ``count`` elements in a copy whose rows each start a cache line and
    lie no multiple of 4 KiB apart (such rows map to a sixteenth of the cache's sets or fewer)."""
    line = -(-count * itemsize // 64) * 64
    return (line + 64 if line % 4096 == 0 else line) // itemsize


def _transpose_order(columns: int, depth: int, axis: int) -> tuple[UOp, UOp]:
    """The column and the row of a transposed copy, on ranges from ``axis`` on: squares of
    ``TRANSPOSE_TILE`` where it divides both, the loop inside a square along the copy's rows (contiguous
    writes); else rows along the source's (contiguous reads)."""
    t = TRANSPOSE_TILE
    if columns % t or depth % t:
        return UOp.range(columns, axis, AxisKind.GLOBAL), UOp.range(depth, axis + 1, AxisKind.GLOBAL)
    squares, across = UOp.range(columns // t, axis, AxisKind.GLOBAL), UOp.range(depth // t, axis + 1, AxisKind.GLOBAL)
    inner_row, inner_column = UOp.range(t, axis + 2, AxisKind.GLOBAL), UOp.range(t, axis + 3, AxisKind.GLOBAL)
    return squares * t + inner_column, across * t + inner_row


TRANSPOSE_MIN_ROWS = 8
"""The fewest rows of output that repay copying a transposed operand: read in place, no tile covers it (a
1024x1024 ``a @ b.T`` ran at 0.13x numpy, ``a.T @ b`` at 0.43x)."""


def _transposed(sink: UOp, k: UOp, outputs: frozenset[UOp], loads: list[UOp]) -> tuple[tuple[UOp, ...], UOp]:
    """Each operand read across the layout a register tile reads, copied to a scratch buffer in that layout,
    and ``sink`` reading the copies: ``b[j, k]`` (``j`` the innermost output range, which no load reads at
    unit stride) as ``b.T``; then, where a load reads ``j`` at unit stride, ``a[k, i]`` as ``a.T``. The
    copies are stages ``transpose`` before the kernel; its sum is the same, in the same order."""
    j = nested(outputs)[-1]
    if math.prod(int(r.src[0].arg) for r in outputs) // int(j.src[0].arg) < TRANSPOSE_MIN_ROWS:
        return (), sink
    operands = []
    for load in loads:
        found = _operand(load, k, outputs)
        if found is not None:
            operands.append((load, *found))
    copies: list[UOp] = []
    if not any(poly.terms[(x,)] == 1 for _, x, poly in operands if x is j):
        b = next(((load, poly) for load, x, poly in operands if x is j and poly.terms[(k,)] == 1), None)
        if b is None:
            return (), sink
        copy, sink = _copy(sink, b[0], k, j, b[1])
        copies.append(copy)
    for load, x, poly in operands:
        if x is not j and poly.terms[(x,)] == 1 and poly.terms[(k,)] != 1:
            copy, sink = _copy(sink, load, x, k, poly)
            copies.append(copy)
    return tuple(copies), sink


def _operand(load: UOp, k: UOp, outputs: frozenset[UOp]) -> tuple[UOp, Poly] | None:
    """The output range a load of a matmul's operand reads with ``k``, and its index, where it is
    ``x * s + k * t + offset`` (``s``, ``t`` positive; ``x`` the output range of the least stride) plus
    batches (output ranges times positive strides) into a buffer of constant size."""
    index, memory = load.src[0], load.src[0].src[0]
    if len(index.src) != 2 or memory.op is not Ops.PARAM or param_size(memory).op is not Ops.CONST:
        return None
    poly = to_poly(index.src[1])
    strided = [(m, c) for m, c in poly.terms.items() if m != ()]
    if poly.terms.get((k,), 0) <= 0 or any(len(m) != 1 or c <= 0 or (m[0] is not k and m[0] not in outputs)
                                           for m, c in strided):
        return None
    reads = sorted((r for r in outputs if (r,) in poly.terms), key=lambda r: poly.terms[(r,)])
    return (reads[0], poly) if reads else None


def _copy(sink: UOp, load: UOp, outer: UOp, inner: UOp, poly: Poly) -> tuple[UOp, UOp]:
    """A stage copying ``load``'s buffer (at ``poly``) to a scratch buffer laid out ``[batch][outer][inner]``
    (rows starting cache lines, none 4 KiB apart), and ``sink`` reading the copy."""
    memory = load.src[0].src[0]
    itemsize, count, rows = pointee(memory).itemsize, int(inner.src[0].arg), int(outer.src[0].arg)
    pitch = _pitch(count, itemsize)
    batches = sorted((m[0] for m in poly.terms if m not in ((), (outer,), (inner,))),
                     key=lambda h: (-poly.terms[(h,)], range_order(h)))  # the widest stride outermost
    params = _params(sink)
    size = math.prod(int(h.src[0].arg) for h in batches) * rows * pitch
    scratch = UOp.param(params[-1].arg + 1, pointee(memory), size)
    copied = [UOp.range(h.src[0], axis, AxisKind.GLOBAL) for axis, h in enumerate(batches)]
    column, row = _transpose_order(count, rows, len(batches))
    source = sum((h * poly.terms[(b,)] for h, b in zip(copied, batches, strict=True)), start=UOp.index_const(0))
    value = memory[source + row * poly.terms[(outer,)] + column * poly.terms[(inner,)] + poly.terms.get((), 0)].load()
    name = kernel_label(sink)
    copy = UOp.sink(scratch[(_flat(copied) * rows + row) * pitch + column].store(value), *params,
                    name=f"{name}_transpose")
    at = (_flat(batches) * rows + outer) * pitch + inner
    reading = UOp.sink(*substitute(sink, {load: scratch[at].load()}).src, *params, scratch, name=f"{name}_transposed")
    return copy, reading


def _flat(ranges: Sequence[UOp]) -> UOp:
    """The index of a turn of ``ranges`` (outermost first) among all their turns."""
    flat = UOp.index_const(0)
    for r in ranges:
        flat = flat * r.src[0] + r
    return flat


def _summed_first(sink: UOp, load: UOp, k: UOp, found: tuple[UOp, int, int, int], outputs: tuple[UOp, ...],
                  rows: int) -> tuple[UOp, ...]:
    """A blocked sum that the kernel does not store as it is (``alpha * sum + beta * c``): the sums go to a
    scratch buffer first, blocked and continued there, and a last stage stores the kernel's value of each."""
    store = _the_store(sink)
    reduce = next(u for u in store.src[1].toposort() if u.op is Ops.REDUCE)
    params = _params(sink)
    flat = _flat(outputs)
    sums = UOp.param(params[-1].arg + 1, reduce.dtype, math.prod(int(r.src[0].arg) for r in outputs))
    name = kernel_label(sink)
    summed = UOp.sink(sums[flat].store(reduce), *params, name=f"{name}_sum")
    stored = UOp.sink(substitute(store, {reduce: sums[flat].load()}), *params, sums, name=f"{name}_store")
    return (*_blocked(summed, load, k, *found, rows), stored)


def _blockable(load: UOp, k: UOp, outputs: frozenset[UOp], written: set[UOp],
               block_bytes: int) -> tuple[UOp, int, int, int] | None:
    """``load``'s column range ``j``, its row stride ``s``, the block width and the block depth (turns of
    ``k``), where ``_blocked`` applies to blocks of at most ``block_bytes``: a sum longer than a block's
    depth in blocks as even as there can be, the last one shorter where they do not divide it."""
    index, param = load.src[0], load.src[0].src[0]
    if len(index.src) != 2 or param.op is not Ops.PARAM or param in written or param_size(param).op is not Ops.CONST:
        return None
    poly, itemsize = to_poly(index.src[1]), pointee(param).itemsize
    stride = poly.terms.get((k,), 0)
    j = next((r for r in outputs if poly.terms.get((r,)) == 1), None)
    if j is None or stride <= 0 or int(j.src[0].arg) > stride or int(param_size(param).arg) % stride \
            or any(k in m or j in m or c % stride for m, c in poly.terms.items() if m not in ((k,), (j,))):
        return None
    columns, depth = int(j.src[0].arg), int(k.src[0].arg)
    if depth * columns * itemsize <= block_bytes:
        return None  # b stays in L2 as it is
    most = min(BLOCK_DEPTH, block_bytes // (BLOCK_WIDTHS[-1] * itemsize))
    if most < 1:
        return None
    deep = -(-depth // -(-depth // most))
    width = next((w for w in BLOCK_WIDTHS if columns >= 2 * w and deep * w * itemsize <= block_bytes), None)
    return None if width is None else (j, stride, width, deep)


def _blocked(sink: UOp, load: UOp, k: UOp, j: UOp, stride: int, width: int, deep: int,
             rows: int) -> tuple[UOp, ...]:
    """The blocked kernel (``block_matmul``), after a copy of ``b`` where its rows alias or do not start a
    cache line, and ``rows`` rows of output repay the copy."""
    b = load.src[0].src[0]
    params = _params(sink)
    name = kernel_label(sink)
    copy: tuple[UOp, ...] = ()
    itemsize = pointee(b).itemsize
    pitch = _pitch(stride, itemsize)
    if pitch != stride and rows >= BLOCK_MIN_ROWS:
        b_rows = int(param_size(b).arg) // stride
        scratch = UOp.param(params[-1].arg + 1, pointee(b), b_rows * pitch)
        row, column = UOp.range(b_rows, 0, AxisKind.GLOBAL), UOp.range(stride, 1, AxisKind.GLOBAL)
        copy = (UOp.sink(scratch[row * pitch + column].store(b[row * stride + column].load()), *params,
                         name=f"{name}_pack"),)
        poly = to_poly(load.src[0].src[1])
        row_of = sum((_monomial(m) * (c // stride) for m, c in poly.terms.items() if m not in ((k,), (j,))),
                     start=k)
        sink = UOp.sink(*substitute(sink, {load: scratch[row_of * pitch + j].load()}).src, *params, scratch,
                        name=f"{name}_packed")
    ranges = [r for r in sink.toposort() if r.op is Ops.RANGE]
    renumbered = {r: UOp.range(r.src[0], r.arg[0] + 2, r.arg[1]) for r in ranges}
    if deep < int(k.src[0].arg):
        sink = _continued(sink, k, deep)
    blocks, left = divmod(int(j.src[0].arg), width)
    block = UOp.range(blocks, 0, AxisKind.LOOP)  # outermost: every row passes over a block, each thread its rows
    inside = UOp.range(width, j.arg[0] + 2, AxisKind.GLOBAL)
    blocked = substitute(sink, {**renumbered, j: block * width + inside})
    if not left:
        return (*copy, blocked)
    rest = UOp.range(left, 3 + max(r.arg[0] for r in ranges), AxisKind.GLOBAL)  # the columns past the blocks
    store = _the_store(sink)
    edge = substitute(store, {**renumbered, j: blocks * width + rest})
    return (*copy, blocked.replace(src=(*blocked.src, edge)))


def _continued(sink: UOp, k: UOp, deep: int) -> UOp:
    """``sink``'s store, a sum over ``k``, as a loop over blocks of ``deep`` turns of ``k`` (axis 1, inside
    the loop over column blocks): each block continues the sum stored by the block before (``CONTINUED``),
    so each product is still added in order, and the result is the same bits."""
    store = _the_store(sink)
    length = int(k.src[0].arg)
    depth = UOp.range(-(-length // deep), 1, AxisKind.LOOP)
    turns: int | UOp = deep if length % deep == 0 else (length - depth * deep).minimum(deep)
    turn = UOp.range(turns, k.arg[0] + 2, AxisKind.REDUCE)
    reduce = store.src[1]
    partial = substitute(reduce.src[0], {k: depth * deep + turn}).reduce(turn, op=reduce.arg)
    before = (depth < 1).where(UOp.const(reduce.dtype, -0.0), store.src[0].load())
    total = UOp(Ops.ADD, reduce.dtype, (before, partial), CONTINUED)
    return substitute(sink, {store: store.src[0].store(total, *store.src[2:], depth)})


def _params(sink: UOp) -> tuple[UOp, ...]:
    """The buffers of ``sink`` by slot: every stage a pass makes of a kernel takes all of them, and a buffer
    of the kernel's own takes the next slot."""
    return tuple(sorted((u for u in sink.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg))


def _monomial(atoms: tuple[UOp, ...]) -> UOp:
    product = UOp.index_const(1)
    for atom in atoms:
        product = product * atom
    return product


REDUCTION_PARTIALS = 256
"""How many partial results a split reduction computes: a constant, so the result is the same whatever
the thread count or device."""


def split_reduction(sink: UOp, partials: int = REDUCTION_PARTIALS) -> tuple[UOp, UOp] | None:
    """A kernel that is one large reduction (no GLOBAL range to share out) as two kernels that share
    every buffer and one more, a scratch buffer of partial results:

    - ``partial``: a GLOBAL range over ``partials`` chunks of the reduction, each reduced into
      ``scratch``; the device spreads that range as it spreads any (CPU threads, GPU work items);
    - ``combine``: one pass reduces the partials in order and finishes the stores.

    Chunks and combine order are fixed, so results do not depend on timing, threads or device. None
    when the kernel is not a reduction of that shape: several reductions must share one range, dtype
    and scope, and read no memory the kernel writes (its stores would all come after every partial).
    """
    topo = sink.toposort()
    reduces = [u for u in topo if u.op is Ops.REDUCE]
    if not reduces or any(u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL for u in topo) \
            or any(u.op is Ops.ATOMIC for u in sink.src):
        return None
    written = written_memory(sink.src)
    if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written for red in reduces
           for u in red.src[0].toposort()):
        return None  # the partials would all be summed before the kernel's first store, not after those before
    r = reduces[0].src[1]
    nested = any(inner.op is Ops.REDUCE for red in reduces for inner in red.src[0].toposort())
    live = live_ranges(sink)
    if nested or any(red.src[1:] != (r,) or red.dtype != reduces[0].dtype for red in reduces) \
            or r.src[0].vmax < THREAD_MIN_WORK or any(live[red] for red in reduces):
        return None
    params = _params(sink)
    scratch = UOp.param(params[-1].arg + 1, reduces[0].dtype, len(reduces) * partials)
    end = r.src[0]
    worker = UOp.range(partials, 1 + max(u.arg[0] for u in topo if u.op is Ops.RANGE), AxisKind.GLOBAL)
    chunk = (end + (partials - 1)) // partials
    start = worker * chunk
    inner = UOp.range((end - start).minimum(chunk), r.arg[0], AxisKind.REDUCE)
    chunked = {r: start + inner}
    stores = [scratch[k * partials + worker].store(substitute(red.src[0], chunked).reduce(inner, op=red.arg))
              for k, red in enumerate(reduces)]
    each = UOp.range(partials, r.arg[0], AxisKind.REDUCE)
    combined = {red: scratch[k * partials + each].reduce(each, op=red.arg) for k, red in enumerate(reduces)}
    name = kernel_label(sink)
    partial = UOp.sink(*stores, *params, name=f"{name}_partial")
    combine = UOp.sink(*substitute(sink, combined).src, *params, scratch, name=f"{name}_combine")
    return partial, combine


# ---- GPU work items ----------------------------------------------------------------------------------------

PREFERRED_GROUP_SIZE = (64, 4, 1)
"""Work-group shape to aim for, per launch dimension, before the device's limits and the sizes cut it."""
SQUARE_GROUP_SIZE = (16, 16, 1)
"""The shape for a kernel with an access that depends on both its first two launch dimensions and steps
one element at a time along the second (a transpose's store): each group then reads and writes runs of
16 neighbouring elements, instead of 64 neighbours one way and 4 the other."""


def _power_of_two_at_most(limit: int) -> int:
    return 1 << max(int(limit), 1).bit_length() - 1


def to_gpu_indices(sink: UOp, limits: WorkGroupLimits, direct_index: bool, exact_groups: bool = False) -> UOp:
    """Map up to three GLOBAL ranges, innermost first, to launch dimensions; others stay loops.

    With ``direct_index`` a single-range kernel without reductions uses ``idx0`` and leaves the
    work-group size to the runtime, which covers the range exactly. Otherwise each dimension gets
    ``gidxN * L + lidxN`` with a local size ``L`` that fits the limits and ``ceil(end / L)`` groups; an
    effect runs only on the work items inside its ranges (when an end is not a multiple of ``L``), and
    only on the first work item along a dimension it does not use.

    ``L`` is a power of two; with ``exact_groups`` (a CPU's driver), where that does not divide a constant
    end, the largest size below it that does (``_exact_local``): no group is ragged.
    """
    topo = sink.toposort()
    globals_ = sorted((u for u in topo if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL), key=range_order)
    dims = list(reversed(globals_[-3:]))
    if not dims:
        return sink
    effects = [e for e in sink.src if e.op in EFFECTS]
    uses = {e: set(e.toposort()) for e in effects}
    if direct_index and len(dims) == 1 and dims[0].src[0].vmin >= 1 and not any(u.op is Ops.REDUCE for u in topo):
        index = UOp.special(dims[0].src[0], launch_index("global", 0))
        first = {e: index.eq(0) for e in effects if dims[0] not in uses[e]}
        return substitute(gate_effects(sink, first), {dims[0]: index})
    budget = limits.max_work_group_size
    accesses = [u.src[1] for u in topo if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM]
    shape = SQUARE_GROUP_SIZE if len(dims) > 1 and any(_unit_stride(a, dims[1]) and dims[0] in a.toposort()
                                                        for a in accesses) else PREFERRED_GROUP_SIZE
    indices: dict[UOp, UOp] = {}
    conditions: dict[UOp, list[UOp]] = {e: [] for e in effects}
    spare = len(dims)
    for d, r in enumerate(dims):
        end = r.src[0]
        fixed = int(end.vmax) if end.vmin == end.vmax else None  # a constant end, by its bounds
        local = _power_of_two_at_most(min(shape[d], budget, limits.max_item_sizes[d], int(end.vmax)))
        if exact_groups and fixed is not None:
            local = _exact_local(fixed, local)
        budget //= local
        count = (end + (local - 1)) // local
        count = count if end.vmin >= 1 else count.maximum(1)  # >= 1 group
        most = None if limits.max_groups is None else limits.max_groups[d]
        if most is not None and count.vmax > most:
            group, spare = _groups_over_two_dimensions(count, d, spare, limits)
        else:
            group = UOp.special(count, launch_index("group", d))
        item = UOp.special(local, launch_index("local", d))
        index = indices[r] = group * local + item
        ragged = fixed is None or fixed % local != 0 or fixed < 1 or group.op is not Ops.SPECIAL
        for e in effects:
            if r in uses[e]:
                if ragged:
                    conditions[e].append(index.lt(end))
            else:
                conditions[e].append(group.eq(0) & item.eq(0))
    return substitute(gate_effects(sink, {e: _all(conds) for e, conds in conditions.items() if conds}), indices)


def _exact_local(end: int, local: int) -> int:
    """The largest local size up to ``local`` that divides ``end`` (1 divides every end). A CPU's OpenCL or Vulkan
    driver runs a group's work items as the turns of a loop it vectorises across them; an effect gated to the items
    inside a ragged end makes each of their accesses a gather (PoCL, a matmul in tiles of 4 rows by 16 columns: 1000
    rows in 85 ms with groups of 4 tiles and the last gated, 31 in groups of 2; 992 columns in 62 ms with groups of
    64 tiles, 24 in groups of 62; 1063 columns, 67 tiles, in 68 ms, 20 in groups of 1). A GPU runs a gated group as
    it runs any other: there, groups stay a power of two, whole warps."""
    return next(size for size in range(local, 0, -1) if end % size == 0)


GROUP_SIZE = 128
"""Work items that share one work group's reductions, where the device allows that many."""


def share_reductions(sink: UOp, limits: WorkGroupLimits, local_memory: int) -> UOp | None:
    """A kernel whose reductions do not depend on its innermost GLOBAL range (a softmax's row maximum and
    sum, a layernorm's mean and variance), launched so that each reduction is computed once per work group,
    by all its work items together, instead of once per work item.

    The innermost GLOBAL range ``c`` becomes the group's ``G`` work items (``lidx0``): item ``l`` handles
    ``c = l, l + G, l + 2G ...``. Each outer GLOBAL range (at most two) becomes a group index. Each such
    reduction over ``j`` becomes, in order:

    - every item reduces ``j = l, l + G ...`` and stores the partial result to local memory slot ``l``;
    - ``BARRIER``; item 0 reduces the ``G`` partials in order into slot ``G``; ``BARRIER``;
    - the kernel reads slot ``G`` where it read the reduction.

    A reduction that uses another (a sum of ``exp(x - max)``) comes after it; independent ones share the
    barriers. None when the kernel has no such reduction, or has a shape this does not cover (sequential
    loops around effects, reductions over several ranges, more than three GLOBAL ranges), or the device's
    local memory or group counts are too small: ``to_gpu_indices`` then launches it as usual.
    """
    found = _row_reductions(sink)
    if found is None:
        return None
    column, rows, shared = found
    if column is None:  # one sum per output: nothing for a group to share
        return None
    topo, live = sink.toposort(), live_ranges(sink)
    effects = [e for e in sink.src if e.op in EFFECTS]
    size = _power_of_two_at_most(min(GROUP_SIZE, limits.max_work_group_size, limits.max_item_sizes[0]))
    while size > 1 and sum((size + 1) * u.dtype.itemsize for u in shared) > local_memory:
        size //= 2
    most = limits.max_groups
    if size < 2 or (most is not None and any(r.src[0].vmax > most[len(rows) - d] for d, r in enumerate(rows))):
        return None
    item = UOp.special(size, launch_index("local", 0))
    groups = {r: UOp.special(r.src[0] if r.src[0].vmin >= 1 else r.src[0].maximum(1),
                             launch_index("group", len(rows) - d)) for d, r in enumerate(rows)}
    inside = {r: r.lt(r.src[0]) for r in rows if r.src[0].vmin < 1}
    axes = iter(range(1 + max(u.arg[0] for u in topo if u.op is Ops.RANGE), 1 << 30))

    def strided(end: UOp, kind: AxisKind) -> tuple[UOp, UOp, list[UOp]]:
        """A range ``k``, the values ``item + G*k`` below ``end`` that work item ``item`` takes, and, when
        the loop runs once at most, the test that the value is below ``end``: ``k`` then folds to 0, and
        what used it no longer depends on the loop and may be hoisted out of it."""
        k = UOp.range((end - item + (size - 1)) // size, next(axes), kind)
        return k, item + k * size, [(item + k * size).lt(end)] if k.src[0].vmax <= 1 else []

    def gated(node: UOp, conditions: list[UOp], target: bool = True) -> UOp:
        return _gated(node, _all(conditions), target) if conditions else node

    replaced: dict[UOp, UOp] = {}
    levels: dict[UOp, int] = {}
    staged: list[UOp] = []
    for u in shared:  # in toposort order: a reduction comes after those it uses
        levels[u] = 1 + max((levels[v] for v in u.src[0].toposort() if v in levels), default=-1)
    for level in range(max(levels.values()) + 1):
        partials, combines = [], []
        for u in (u for u in shared if levels[u] == level):
            temp = UOp(Ops.DEFINE_LOCAL, u.dtype.ptr(size + 1, local=True), (), shared.index(u))
            k, j, below = strided(u.src[1].src[0], AxisKind.REDUCE)
            body = gated(substitute(substitute(u.src[0], replaced), {u.src[1]: j}), below, target=False)
            partials.append(gated(temp.index(item).store(body.reduce(k, op=u.arg)),
                                  [inside[r] for r in rows if r in live[u] and r in inside]))
            m = UOp.range(size, next(axes), AxisKind.REDUCE)
            combines.append(temp.index(size, gate=item.eq(0)).store(temp.index(m).load().reduce(m, op=u.arg)))
            replaced[u] = temp.index(size).load()
        staged += [*partials, UOp(Ops.BARRIER), *combines, UOp(Ops.BARRIER)]
    _, columns, below = strided(column.src[0], AxisKind.LOOP)
    for e in effects:
        conditions = [*(inside[r] for r in rows if r in live[e] and r in inside),
                      *(groups[r].eq(0) for r in rows if r not in live[e])]
        body = substitute(e, replaced)
        staged.append(gated(substitute(body, {column: columns}), [*conditions, *below]) if column in live[e]
                      else gated(body, [*conditions, item.eq(0)]))
    rest = [u for u in sink.src if u.op not in EFFECTS]
    return substitute(sink.replace(src=(*staged, *rest)), groups)


def _row_reductions(sink: UOp) -> tuple[UOp | None, list[UOp], list[UOp]] | None:
    """The innermost GLOBAL range of ``sink``, its outer GLOBAL ranges (at most two), and the reductions,
    each over one range, that depend on none but those outer ones (a softmax's row maximum and sum); None
    when there is no such reduction, an effect also depends on a sequential loop, or a reduction reads
    memory the kernel writes (computed ahead of the effects, it would not see their stores). A kernel of one
    GLOBAL range whose effects and reductions are all one per row is all rows and no column (a
    matrix-vector product: one sum per output); where one is not (a sum over all rows), that range is the
    column, and such a sum is computed once, before the loop over it."""
    topo = sink.toposort()
    globals_ = sorted((u for u in topo if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL), key=range_order)
    if not globals_ or len(globals_) > 3:
        return None
    live = live_ranges(sink)
    per_row = len(globals_) == 1 and all(globals_[0] in live[u] for u in topo if u.op in EFFECTS or u.op is Ops.REDUCE)
    column, rows = (None, globals_) if per_row else (globals_[-1], globals_[:-1])
    shared = [u for u in topo if u.op is Ops.REDUCE and live[u] <= set(rows)]
    written = written_memory(sink.src)
    if not shared or any(len(u.src) != 2 for u in shared) or any(
            not live[e] <= set(globals_) for e in sink.src if e.op in EFFECTS) or any(
            v.op is Ops.LOAD and memory_of(v.src[0].src[0]) in written for u in shared for v in u.toposort()):
        return None
    return column, rows, shared


def reduce_per_item(sink: UOp, limits: WorkGroupLimits) -> UOp | None:
    """The kernels ``share_reductions`` covers, for a device that runs a work group on one core as a loop
    over its items (local memory in ordinary memory: PoCL, lavapipe), where cooperating on a row costs a
    pass over the group per barrier: a work group of one item per row (per outer GLOBAL index), which
    computes the row's reductions once and then loops over the innermost GLOBAL range, as a CPU thread
    does. The reductions are split into independent partials (``split_reductions``) that the device's
    compiler vectorises.

    Where a row count may be 0 (one group is still launched), that group's loops are empty and its loads
    gated, so nothing it would compute before them touches memory: an IF around the row's effects would
    keep the reductions inside the loop. None when the kernel has no such reduction, nests reductions in
    reductions (a fused attention: ``share_reductions`` keeps those apart), or has more rows than the
    device has groups."""
    found = _row_reductions(sink)
    if found is None or _nested_reductions(sink):
        return None
    column, rows, _ = found
    most = limits.max_groups
    if most is not None and any(r.src[0].vmax > most[len(rows) - 1 - d] for d, r in enumerate(rows)):
        return None
    groups = {r: UOp.special(r.src[0] if r.src[0].vmin >= 1 else r.src[0].maximum(1),
                             launch_index("group", len(rows) - 1 - d)) for d, r in enumerate(rows)}
    if column is not None:
        sink = substitute(sink, {column: UOp.range(column.src[0], column.arg[0], AxisKind.LOOP)})
    outside = [groups[r].lt(r.src[0]) for r in rows if r.src[0].vmin < 1]
    if outside:  # a group past the last row: its loops run no step, its loads and row-only effects are gated
        inside, live = _all(outside), live_ranges(sink)
        sink = sink.replace(src=tuple(_gated(e, inside, target=live[e] <= set(rows)) if e.op in EFFECTS else e
                                      for e in sink.src))
        sink = substitute(sink, {u: UOp.range(inside.where(u.src[0], 0), *u.arg) for u in sink.toposort()
                                 if u.op is Ops.RANGE and u not in groups})
    return split_reductions(substitute(sink, groups), (Ops.ADD, Ops.MAX, Ops.MIN))


MATMUL_TILE = 16
"""The side of the square output tile a work group computes in ``tile_matmul``, and of the blocks of its
operands it stages in local memory."""


def tile_matmul(sink: UOp, limits: WorkGroupLimits, local_memory: int) -> UOp | None:
    """A matmul-shaped kernel, ``out[i, j] = sum(f(a(i, k), b(k, j)), k)`` over GLOBAL ``i`` and ``j``,
    as the classic GPU kernel with its operands staged in local memory.

    A work group of ``T`` x ``T`` items (``lidx1`` rows, ``lidx0`` columns) computes a ``T`` x ``T`` tile of
    ``out``. For each block ``kt`` of ``T`` steps of ``k``, in a loop every item runs the same number of
    times: each item loads one element of ``a``'s ``T`` x ``T`` block and one of ``b``'s into local memory
    (0 outside the operands); ``BARRIER``; each item adds ``T`` products read from local memory to its
    element of ``out`` (steps past ``k``'s end add nothing); ``BARRIER``. Every element of ``a`` and ``b``
    is read from global memory ``T`` times fewer than by one item per output. ``out`` holds the running sum
    between blocks; the first block starts it.

    None unless the kernel is one such store, its value a sum over one REDUCE range whose only loads are
    one of ``a`` (ranges ``i``, ``k``) and one of ``b`` (``k``, ``j``), neither bounds-checked at run time,
    and the device takes the work group and its ``2 T^2`` elements of local memory.
    """
    stores = [e for e in sink.src if e.op in EFFECTS]
    if len(stores) != 1 or stores[0].op is not Ops.STORE or stores[0].arg is not None:
        return None
    store = stores[0]
    target, value = store.src[0], store.src[1]
    live = live_ranges(sink)
    globals_ = sorted(live[store], key=range_order)
    if len(target.src) != 2 or value.op is not Ops.REDUCE or value.arg is not Ops.ADD or len(value.src) != 2 \
            or len(globals_) != 2 or any(r.arg[1] is not AxisKind.GLOBAL for r in globals_) \
            or any(u.op is Ops.LOAD for u in target.src[1].toposort()):
        return None
    (i, j), k = globals_, value.src[1]
    loads = [u for u in value.src[0].toposort() if u.op is Ops.LOAD]
    a = next((u for u in loads if live[u] == {i, k}), None)
    b = next((u for u in loads if live[u] == {k, j}), None)
    size = MATMUL_TILE
    if a is None or b is None or len(loads) != 2 or any(u.src[0].arg is not None for u in loads) \
            or 2 * size * size * value.dtype.itemsize > local_memory \
            or size * size > limits.max_work_group_size or min(limits.max_item_sizes[:2]) < size:
        return None
    groups = [(r.src[0] + (size - 1)) // size for r in (j, i)]
    groups = [g if g.vmin >= 1 else g.maximum(1) for g in groups]
    if limits.max_groups is not None and any(g.vmax > most for g, most in zip(groups, limits.max_groups, strict=False)):
        return None
    column, row = (UOp.special(size, launch_index("local", d)) for d in (0, 1))
    tile_j, tile_i = (UOp.special(g, launch_index("group", d)) for d, g in enumerate(groups))
    first = 1 + max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE)
    blocks = (k.src[0] + (size - 1)) // size
    kt = UOp.range(blocks if blocks.vmin >= 1 else blocks.maximum(1), first, AxisKind.LOOP)
    kk = UOp.range(size, first + 1, AxisKind.REDUCE)
    at = {i: tile_i * size + row, j: tile_j * size + column}
    staged_a = UOp(Ops.DEFINE_LOCAL, a.dtype.ptr(size * size, local=True), (), 0)
    staged_b = UOp(Ops.DEFINE_LOCAL, b.dtype.ptr(size * size, local=True), (), 1)
    step = kt * size + column  # the k this item stages of a's block; of b's: kt * size + row
    stage = [_gated_unless_true(staged_a.index(row * size + column).store(substitute(a, {**at, k: step})),
                                [at[i].lt(i.src[0]), step.lt(k.src[0])], target=False),
             _gated_unless_true(staged_b.index(row * size + column).store(substitute(b, {**at, k: kt * size + row})),
                                [at[j].lt(j.src[0]), (kt * size + row).lt(k.src[0])], target=False)]
    body = substitute(value.src[0], {a: staged_a.index(row * size + kk).load(),
                                     b: staged_b.index(kk * size + column).load()})
    zero = -0.0 if value.dtype.is_float else 0
    inside = (kt * size + kk).lt(k.src[0])
    part = (substitute(body, at) if inside.vmin else inside.where(substitute(body, at), zero)).reduce(kk)
    out = substitute(target, at)
    total = kt.lt(1).where(zero, out.load()).alu(Ops.ADD, part)  # -0.0 + x is x for every x
    accumulate = _gated_unless_true(out.store(total), [at[i].lt(i.src[0]), at[j].lt(j.src[0])])
    barrier = UOp(Ops.BARRIER, dtypes.void, (kt,))
    rest = [u for u in sink.src if u.op not in EFFECTS]
    return sink.replace(src=(*stage, barrier, accumulate.replace(src=(*accumulate.src, kt)), barrier, *rest))


def _gated_unless_true(effect: UOp, conditions: list[UOp], target: bool = True) -> UOp:
    """``_gated`` by the conditions that may fail."""
    uncertain = [c for c in conditions if not c.vmin]
    return _gated(effect, _all(uncertain), target) if uncertain else effect


def _all(conditions: list[UOp]) -> UOp:
    gate = conditions[0]
    for more in conditions[1:]:
        gate = gate & more
    return gate


def _groups_over_two_dimensions(count: UOp, d: int, spare: int, limits: WorkGroupLimits) -> tuple[UOp, int]:
    """A group number along dimension ``d`` that may exceed the device's groups per dimension, spread over
    ``d`` and the unused dimension ``spare``: ``row * limit + column``, with as many columns as there are
    groups up to the limit; the next spare dimension. (Constant strides keep the bounds of the group
    number tight, which a device with 32-bit indices needs.)"""
    assert limits.max_groups is not None
    most = limits.max_groups[d]
    if spare > 2 or math.ceil(count.vmax / most) > limits.max_groups[spare]:
        raise GraphError(f"the launch needs up to {int(count.vmax)} work groups along dimension {d}, and the "
                         f"device allows {most}, with no dimension left to spread them over", stage="lower",
                         value=int(count.vmax))
    rows = (count + (most - 1)) // most
    group = UOp.special(rows, launch_index("group", spare)) * most + UOp.special(count.minimum(most),
                                                                                  launch_index("group", d))
    return group, spare + 1


# ---- upcasting -------------------------------------------------------------------------------------------

UPCAST_WIDTHS = (16, 8, 4)
"""How many neighbouring outputs of a reduction one pass over its REDUCE range computes, widest first."""
ROW_WIDTHS = (32, *UPCAST_WIDTHS)
"""The widths a row of a tile sized in bytes (``row_bytes``) may take, widest first."""
LANE_WIDTHS = tuple(reversed(ROW_WIDTHS))
"""The widths a masked tile in lanes may take (``_masked_lanes``), narrowest first: the first that holds the
columns a row's whole tiles leave."""


def upcast_reductions(sink: UOp, rows: int = 4, edges: bool = False, row_bytes: int | None = None,
                      masked: bool = False, lanes: bool = False) -> UOp:
    """Compute a tile of ``rows`` x ``W`` outputs of a reduction in one pass over its REDUCE range.

    When a store's reduction reads memory at unit stride along an output range ``j`` with a constant
    end divisible by ``W``, ``j`` becomes ``jo*W + c`` for ``c`` in ``0..W-1``: ``W`` stores whose
    reductions share one loop and whose loads are contiguous in ``c``, which the backend turns into
    vector code (a matmul's inner loop becomes a vector multiply-add over ``W`` columns). Then, where
    another output range ``i`` leaves those vector loads alone (``_row_range``), ``rows`` neighbours
    along ``i`` share each of them: a matmul's rows of ``a``, a convolution's output channels.

    With ``edges``, an end that no ``W`` (or ``rows``) divides, or a symbolic one, is tiled too: the tiles
    cover ``end // W * W`` indices and one more store runs over the ``end % W`` left (``_split``), so an
    odd column count keeps the tiles (a 512x850x900 matmul ran untiled, 7x slower than 512x848x900); with
    ``lanes``, that store is one more tile in lanes, masked past the end.

    With ``masked``, such an end is tiled instead by ``ceil(end / W)`` tiles whose outputs past the end are
    masked: their stores, and the loads that depend on them, are gated off (``_masked``). A GPU launches
    each range as a dimension of its own, so an edge store over ``end % W`` would run in a launch of its
    own shape, and not at all where no tile does.

    With ``row_bytes``, a tile's row is the widest of ``ROW_WIDTHS`` that holds at most that many bytes of
    the store's type: a CPU's tile row is two vector registers, 32 float32 or 16 float64 with AVX-512 (32
    float64 took all 32 registers for the accumulators alone).

    With ``lanes``, a row of ``W`` columns is one store over ``jo*W + LANE`` (``Ops.LANE`` of width ``W``),
    which the renderer computes as vectors, where ``_lanes_fit`` finds every op of the store it reaches one a
    renderer spells on vectors (with ``masked``, where ``W`` divides the columns too: a lane is never
    masked): ``rows`` stores where there were ``rows * W``, so that lowering, ordering and
    the backend's optimiser each handle a tile's row once (matmul 1024: a 3,880-line kernel, whose 256 scalar
    updates LLVM's SLP vectoriser regrouped into vectors).
    """
    live = live_ranges(sink)
    planned = []
    for effect in sink.src:
        target = _upcast_range(effect, live, _widths(effect, row_bytes), edges or masked, masked=masked) \
            if effect.op is Ops.STORE else None
        planned.append(None if target is None else
                       (target, _row_range(effect, live, target[0], rows, edges or masked, masked)))
    if _entangled(sink) and len({plan for e, plan in zip(sink.src, planned, strict=True) if e.op in EFFECTS}) > 1:
        return sink  # tiles of one shape for some effects only would run a work item's effects apart
    split = list(dict.fromkeys(r for plan in planned if plan is not None and not masked
                               for r, width in ((plan[0][0], plan[0][1]), (plan[1], rows))
                               if r is not None and not _divides(width, r.src[0])))
    sink, moved, edge_axes = _room_after(sink, split)
    plans = {effect: None if plan is None else
             ((moved[plan[0][0]], plan[0][1]), None if plan[1] is None else moved[plan[1]])
             for effect, plan in zip(sink.src, planned, strict=True)}
    effects, edge_effects = [], []
    for effect in sink.src:
        plan = plans[effect]
        if plan is None:
            effects.append(effect)
            continue
        target, row = plan
        laned = lanes and _lanes_fit(effect, target[0])
        if masked:
            for column in _masked(effect, *target, laned):
                effects.extend([column] if row is None else _masked(column, row, rows))
            continue
        columns, column_edge = _split(effect, *target, edge_axes.get(target[0]), laned)
        if row is None:
            effects.extend(columns)
            edge_effects.extend([column_edge] if column_edge is not None else [])
            continue
        for copy in [*columns, *([column_edge] if column_edge is not None else [])]:
            tile, row_edge = _split(copy, row, rows, edge_axes.get(row))
            (edge_effects if copy is column_edge else effects).extend(tile)
            edge_effects.extend([row_edge] if row_edge is not None else [])
    return sink.replace(src=(*effects, *edge_effects))


def _divides(width: int, end: UOp) -> bool:
    return end.op is Ops.CONST and int(end.arg) % width == 0


def _room_after(sink: UOp, ranges: Sequence[UOp]) -> tuple[UOp, dict[UOp, UOp], dict[UOp, int]]:
    """``sink`` with a free axis number right after each of ``ranges``, for the range of the indices its
    tiles leave (``_split``): every range numbered after one moves up. That range then nests where the one
    it splits does, outside the loops that range held (a work item's loops stay inside its own range: a
    number past every range's would nest it inside them, and run a work item's effects in loops apart).
    Returns the sink, each range's new node (every range of ``sink`` maps), and the axis free after each."""
    order = sorted(ranges, key=range_order)
    shift = {r: sum(1 for o in order if o.arg[0] < r.arg[0]) for r in sink.toposort() if r.op is Ops.RANGE}
    moved: dict[UOp, UOp] = {}
    for r in sink.toposort():
        if r.op is Ops.RANGE:
            moved[r] = UOp.range(substitute(r.src[0], moved), r.arg[0] + shift[r], r.arg[1])
    free = {moved[r]: r.arg[0] + shift[r] + 1 + sum(1 for o in order[:k] if o.arg[0] == r.arg[0])
            for k, r in enumerate(order)}
    renamed = {r: m for r, m in moved.items() if m is not r}
    return (substitute(sink, renamed) if renamed else sink), moved, free


def _entangled(sink: UOp) -> bool:
    """Whether two effects of ``sink`` run in the same work items (the parallel ranges of one are among the
    other's) and touch one memory, one of them writing it: they must then run in each work item's order, as
    stated (tiled alike), not in loops or threads of their own. (A blocked matmul's store over whole blocks
    of columns and its store over the columns left run in other work items.)"""
    effects = [e for e in sink.src if e.op in EFFECTS]
    live = live_ranges(sink)
    items = [{r for r in live[e] if r.arg[1] is AxisKind.GLOBAL} for e in effects]
    writes = [memory_of(e.src[0].src[0]) for e in effects]
    reads = [{memory_of(u.src[0].src[0]) for u in e.toposort() if u.op is Ops.LOAD} for e in effects]
    return any((items[a] <= items[b] or items[b] <= items[a]) and
               (writes[a] == writes[b] or writes[a] in reads[b] or writes[b] in reads[a])
               for a in range(len(effects)) for b in range(a + 1, len(effects)))


def _widths(store: UOp, row_bytes: int | None) -> tuple[int, ...]:
    if row_bytes is None:
        return UPCAST_WIDTHS
    return tuple(w for w in ROW_WIDTHS if w * store.src[1].dtype.itemsize <= row_bytes)


def _split(effect: UOp, r: UOp, width: int, axis: int | None, lanes: bool = False) -> tuple[list[UOp], UOp | None]:
    """``effect`` over range ``r`` as ``width`` copies over ``ro*width + c`` (``ro`` below ``end // width``),
    or with ``lanes`` one copy over ``ro*width + LANE``, and, unless ``width`` divides a constant ``end``, one
    copy over the ``end % width`` indices left: with ``lanes``, one more tile in lanes masked past the end
    (``_masked_lanes``; for a constant end, the narrowest that holds the indices left); else on a range of
    its own (axis ``axis``, free right after ``r``'s (``_room_after``): never the same node as ``ro``, even
    where both ends are equal)."""
    end = r.src[0]
    tiles = _tiles(effect, r, width, lanes)
    if _divides(width, end):
        return tiles, None
    if lanes:
        held = width if end.op is not Ops.CONST else next(w for w in LANE_WIDTHS if w >= int(end.arg) % width)
        return tiles, _masked_lanes(effect, r, end // width * width, held)
    left, whole = (int(end.arg) % width, int(end.arg) // width) if end.op is Ops.CONST else (end % width, end // width)
    if axis is None:
        raise GraphError(f"no axis was set aside for the indices range {r.arg[0]}'s tiles leave", stage="lower",
                         value=r.arg)
    edge = UOp.range(left, axis, r.arg[1])
    return tiles, _moved(effect, r, edge + whole * width, edge)


def _masked_lanes(effect: UOp, r: UOp, start: UOp, width: int) -> UOp:
    """``effect`` at ``start + LANE`` (``width`` lanes) in place of range ``r``, each lane's store, and its
    loads that differ by lane, gated by ``start + LANE < end``: the columns a row's whole tiles leave, as
    one tile whose lanes past the end read and write nothing (a masked vector load and store). A range of
    scalar columns there cost 1000x1001x999 (9 left): 270 GFLOP/s against 340 at 992 columns, and 1023
    columns (31 left) 220; in lanes, 310 and 315 (a symbolic count of 1023: 85 -> 106, 992: 140)."""
    (lane,) = _columns(width, lanes=True)
    value = start + lane
    moved = substitute(effect, {r: value})
    moved = moved.replace(src=(*moved.src[:2], *(s for s in moved.src[2:] if s is not value)))
    return _gated(moved, value.lt(r.src[0]), depending_on=lane)


def _tiles(effect: UOp, r: UOp, width: int, lanes: bool) -> list[UOp]:
    """``effect`` over range ``r`` as ``width`` copies over ``ro*width + c``, or with ``lanes`` one over
    ``ro*width + LANE``, ``ro`` below ``end // width``."""
    end = r.src[0]
    outer = UOp.range(int(end.arg) // width if end.op is Ops.CONST else end // width, r.arg[0], r.arg[1])
    return [_moved(effect, r, outer * width + c, outer) for c in _columns(width, lanes)]


def _columns(width: int, lanes: bool) -> list[UOp]:
    """A tile row's columns past its first: ``0 .. width-1``, one copy each, or one ``LANE`` of ``width``."""
    return [UOp(Ops.LANE, dtypes.index, (), width)] if lanes else [UOp.index_const(c) for c in range(width)]


def _lanes_fit(store: UOp, r: UOp) -> bool:
    """Whether ``store``, with its row of outputs along ``r`` in lanes, stays within what a renderer spells
    on vectors: ``LANE_OPS`` on numbers (no bool or float16 in memory, no float16 at all, division only by
    a constant other than 0 and -1), loads of buffers (gathers and gated loads too) whose bounds are proven
    (a ``CHECKED`` access records its failure under a branch of its own), and the store itself at unit
    stride along ``r``, proven, its gate (if any) the same for every lane."""
    target = store.src[0]
    if store.op is not Ops.STORE or target.arg is not None or not _unit_stride(target.src[1], r, ascending=True) \
            or (len(target.src) == 3 and r in target.src[2].toposort()):
        return False
    laned = {r}
    for u in store.toposort():
        if u is r or not any(s in laned for s in u.src):
            continue
        laned.add(u)
        if u.op not in LANE_OPS or u.dtype == dtypes.float16 or any(s.dtype == dtypes.float16 for s in u.src):
            return False
        if u.op in (Ops.IDIV, Ops.MOD) and (u.src[1].op is not Ops.CONST or u.src[1].arg in (0, -1)):
            return False
        if u.op is Ops.INDEX and (u.arg is not None or memory_of(u.src[0]).op is not Ops.PARAM):
            return False
        if (u.op is Ops.LOAD and u.dtype == dtypes.bool) or (u.op is Ops.STORE and u.src[1].dtype == dtypes.bool):
            return False
    return True


def _masked(effect: UOp, r: UOp, width: int, lanes: bool = False) -> list[UOp]:
    """``effect`` over range ``r`` as ``width`` copies over ``ro*width + c``, ``ro`` below ``ceil(end / width)``,
    or with ``lanes`` one over ``ro*width + LANE``; where ``width`` may not divide the end, each copy (each
    lane) stores, and loads what depends on ``ro``, only where ``ro*width + c < end``."""
    end = r.src[0]
    if end.op is Ops.CONST and int(end.arg) % width == 0:
        return _tiles(effect, r, width, lanes)
    outer = UOp.range((end + (width - 1)) // width, r.arg[0], r.arg[1])
    return [_gated(_moved(effect, r, outer * width + c, outer), (outer * width + c).lt(end), depending_on=outer)
            for c in _columns(width, lanes)]


def _moved(effect: UOp, r: UOp, value: UOp, loop: UOp) -> UOp:
    """``effect`` with ``value`` for range ``r``, run over the range ``loop`` in ``r``'s place. Its ranges
    list the RANGE itself, not ``value``: bounds may fold an expression of a loop that turns at most once to
    a constant, and the effect would then run once where the loop may turn 0 times (the tiles of ``n // 4``
    for ``n`` up to 7 stored 4 columns of a 1-column row)."""
    moved = substitute(effect, {r: value})
    return moved.replace(src=(*moved.src[:2], *(loop if s is value else s for s in moved.src[2:])))


def tile_rows(vector_registers: int) -> int:
    """How many rows a CPU register tile has: its accumulators take a quarter of the vector registers
    at most, the rest holding loads and broadcasts. A row of 16 float32 is two AVX2 registers (4 rows of
    16) or one AVX-512 register (8 rows of 16, of 32 registers)."""
    return max(1, vector_registers // 4)


def tile_row_bytes(vector_registers: int) -> int:
    """The bytes of a CPU register tile's row: two vector registers, 128 with AVX-512 (32 registers of 512
    bits: rows of 32 float32), 64 with AVX2's 16 (rows of 16). A tile twice as wide reads each broadcast of
    ``a`` for twice the work (matmul 1024 on a Xeon: 45 -> 121 GFLOP/s)."""
    return 128 if vector_registers >= 32 else 64


def tile_for_cpu(sink: UOp, vector_registers: int, lanes: bool = False) -> UOp:
    """Register tiles of outputs per pass over a reduction (``upcast_reductions``, sized for
    ``vector_registers``, rows in ``lanes`` where the renderer spells vectors), and MAX/MIN reductions split
    into independent partials (``split_reductions`` of ``EXTREMA``): what a CPU's vector registers need."""
    tiled = upcast_reductions(sink, tile_rows(vector_registers), edges=True, row_bytes=tile_row_bytes(vector_registers),
                              lanes=lanes)
    return split_reductions(tiled, EXTREMA)


SPLIT_WIDTH = 8
"""How many partial results a split reduction keeps in one pass (a vector register of float32 on AVX2)."""
EXTREMA = (Ops.MAX, Ops.MIN)
"""The reductions a split leaves bit for bit the same: MAX and MIN are exactly associative and commutative
(svod's order ignores NaN and puts +0 above -0)."""


def split_reductions(sink: UOp, ops: tuple[Ops, ...]) -> UOp:
    """A reduction by one of ``ops`` over one range of constant size ``n`` (a multiple of ``SPLIT_WIDTH``,
    at least twice it) as ``SPLIT_WIDTH`` reductions over ``r*W + c`` that share one loop, combined
    pairwise after it. Each step of one running reduction waits for the last; independent partials run
    side by side and their loads are contiguous, so the backend vectorises them. For ``EXTREMA`` the
    result is the same bits; a float sum is added in another order (as any parallel sum is). Only a
    reduction with none nested in it is split (``_nested_reductions``): an outer one would copy each inner
    one ``W`` times, and a nest of them grow as ``W`` to the power of its depth (a fused attention's 320
    accumulators)."""

    replaced: dict[UOp, UOp] = {}
    nested = _nested_reductions(sink)
    for node in sink.toposort():  # a reduction it uses first (softmax's maximum in its sum), built split
        if node.op is not Ops.REDUCE or node.arg not in ops or len(node.src) != 2 or node in nested:
            continue
        r, value = node.src[1], substitute(node.src[0], replaced)
        size = r.src[0]
        if size.op is not Ops.CONST or size.arg % SPLIT_WIDTH or size.arg < 2 * SPLIT_WIDTH:
            continue
        outer = UOp.range(size.arg // SPLIT_WIDTH, r.arg[0], r.arg[1])
        parts = [substitute(value, {r: outer * SPLIT_WIDTH + c}).reduce(outer, op=node.arg)
                 for c in range(SPLIT_WIDTH)]
        while len(parts) > 1:
            parts = [a.alu(node.arg, b) for a, b in zip(parts[::2], parts[1::2], strict=True)]
        replaced[node] = parts[0]
    return substitute(sink, replaced)


def _nested_reductions(sink: UOp) -> list[UOp]:
    """The reductions of ``sink`` with another nested in them: one that runs inside their loop because it
    depends on their range (attention's ``q.k`` in the softmax over keys). A reduction whose result merely
    feeds theirs (softmax's maximum in its sum) is computed before their loop and does not count."""
    live = live_ranges(sink)
    inner: dict[UOp, frozenset[UOp]] = {}  # the ranges some reduction below a node depends on
    for node in sink.toposort():
        sets = [inner[s] for s in node.src if inner[s]]
        below = sets[0] if len(sets) == 1 else frozenset().union(*sets)
        inner[node] = below | live[node] if node.op is Ops.REDUCE else below
    return [u for u in sink.toposort() if u.op is Ops.REDUCE and not inner[u.src[0]].isdisjoint(u.src[1:])]


def _reduction_loads(store: UOp) -> list[UOp]:
    return [u for red in store.src[1].toposort() if red.op is Ops.REDUCE for u in red.src[0].toposort()
            if u.op is Ops.LOAD]


def _upcastable(store: UOp, live: dict[UOp, frozenset[UOp]], exclude: UOp | None = None,
                edges: bool = False) -> list[UOp]:
    """Output ranges of ``store`` with a constant end (any end, with ``edges``), innermost first."""
    return sorted((r for r in live[store] if r.arg[1] is AxisKind.GLOBAL and (edges or r.src[0].op is Ops.CONST)
                   and r is not exclude), key=range_order, reverse=True)


def _upcast_range(store: UOp, live: dict[UOp, frozenset[UOp]], widths: tuple[int, ...],
                  edges: bool = False, masked: bool = False) -> tuple[UOp, int] | None:
    """An output range the reduction's loads read at unit stride, and the widest ``W`` of ``widths`` that
    divides its end and is smaller; with ``edges``, failing that, the widest smaller than its end (its largest
    value, if symbolic: ``_room``), the rest left to an edge store (``_split``). With ``masked`` (a GPU's
    tiles, ``_masked``), failing a range read at unit stride, one that some loads do not depend on: each of
    those then serves ``W`` outputs (attention's scores, ``q[i, d] * k[j, d]``)."""
    loads = _reduction_loads(store)
    ranges = _upcastable(store, live, edges=edges) if loads else []
    candidates = [j for j in ranges if any(_unit_stride(load.src[0].src[1], j) for load in loads)]
    if masked and not candidates:
        candidates = [j for j in ranges if 0 < sum(j in load.toposort() for load in loads) < len(loads)]
    for j in candidates:
        end = j.src[0]
        width = next((w for w in widths if end.op is Ops.CONST and int(end.arg) % w == 0
                      and int(end.arg) > w), None)
        if width is None and edges:
            width = next((w for w in widths if _room(end, w, masked)), None)
        if width is not None:
            return j, width
    return None


def _room(end: UOp, width: int, masked: bool) -> bool:
    """Whether an end that ``width`` does not divide takes tiles of ``width``: a constant end past it; a
    symbolic one that may hold two whole tiles, or, for masked tiles (``ceil(end / width)`` of them), one that
    may pass ``width``. The loop over ``end // width`` whole tiles (``_split``) of at most one turn would be
    folded away by bounds from the values its tile computes, which would then be computed, and their loads
    made, where no tile runs (``n <= 7`` columns in tiles of 4 read 4 columns of a row of 1)."""
    if end.op is Ops.CONST or masked:
        return int(end.vmax) > width
    return int(end.vmax) >= 2 * width


def _row_range(store: UOp, live: dict[UOp, frozenset[UOp]], upcast: UOp, rows: int,
               edges: bool = False, masked: bool = False) -> UOp | None:
    """Another output range, whose end ``rows`` divides (or, with ``edges``, one ``_room`` gives such tiles),
    that some load of the reduction depends on and its vector loads (unit stride along ``upcast``) do not:
    each vector load then serves every row of the tile, and only the loads that differ by row are repeated
    (a matmul's ``a[i, r]``, one broadcast per row)."""
    loads = _reduction_loads(store)
    vector = [load for load in loads if _unit_stride(load.src[0].src[1], upcast)] or \
        [load for load in loads if upcast in load.toposort()]  # a strided tile's (``_upcast_range``)
    for r in _upcastable(store, live, upcast, edges):
        end = r.src[0]
        tiles = (end.op is Ops.CONST and int(end.arg) % rows == 0 and int(end.arg) > rows) or \
            (edges and _room(end, rows, masked))
        if tiles and any(r in load.toposort() for load in loads) \
                and not any(r in load.toposort() for load in vector):
            return r
    return None


def _unit_stride(index: UOp, r: UOp, ascending: bool = False) -> bool:
    """``index`` is ``r`` plus (or minus) terms without ``r``: neighbouring ``r`` read neighbouring elements
    (with ``ascending``, ``r`` is not subtracted: they also come in ``r``'s order, as a store of lanes needs)."""
    terms = _terms(index)
    added = [t for t, sign in terms if sign > 0]
    return [t for t, _ in terms].count(r) == 1 and not any(r in t.toposort() for t, _ in terms if t is not r) \
        and (not ascending or r in added)


def _terms(index: UOp, sign: int = 1) -> list[tuple[UOp, int]]:
    """The terms of a sum with their signs, nested ADDs and SUBs flattened."""
    if index.op is Ops.ADD:
        return [t for s in index.src for t in _terms(s, sign)]
    if index.op is Ops.SUB:
        return [*_terms(index.src[0], sign), *_terms(index.src[1], -sign)]
    return [(index, sign)]


# ---- what lowering did -----------------------------------------------------------------------------------

def describe(sink: UOp) -> str:
    """One line on how a lowered kernel uses the device (``SVOD_DEBUG``): CPU threads or the launch shape,
    buffers of atomic adds each thread keeps a private copy of, reductions a work group shares in local
    memory, and how many reductions share one loop (the output
    tile of an upcast reduction, or the partials of a split MAX/MIN)."""
    topo = sink.toposort()
    parts = []
    cores = next((u.arg[2] + 1 for u in topo if u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID), None)
    specials = {u.arg: u.src[0] for u in topo if u.op is Ops.SPECIAL}
    if cores is not None:
        parts.append(f"{cores} threads over the outermost parallel range")
    elif specials:
        def size(end: UOp) -> str:
            return str(end.arg) if end.op is Ops.CONST else f"up to {int(end.vmax)}"

        parts.append("launch " + ", ".join(f"{name} < {size(end)}" for name, end in sorted(specials.items())))
    else:
        parts.append("one thread")
    locals_ = sorted((u for u in topo if u.op is Ops.DEFINE_LOCAL), key=lambda u: u.arg)
    copies = [u.dtype for u in locals_ if u.src and isinstance(u.dtype, PtrDType)]
    temps = [u.dtype for u in locals_ if not u.src and isinstance(u.dtype, PtrDType)]
    if copies:
        parts.append(f"atomic adds into a private copy per thread of {len(copies)} buffer(s) "
                     f"({' + '.join(f'{t.size} {t.base.name}' for t in copies)})")
    barriers = [u for u in sink.src if u.op is Ops.BARRIER]
    sizes = ' + '.join(f'{t.size} {t.base.name}' for t in temps)
    if temps and any(b.src for b in barriers):  # barriers inside a loop: tile_matmul
        parts.append(f"operands staged block by block in local memory ({sizes}), {len(barriers)} barriers a block")
    elif temps:
        parts.append(f"{len(temps)} reduction(s) shared by each work group in local memory ({sizes}), "
                     f"{len(barriers)} barriers")
    loops: dict[tuple[UOp, ...], int] = {}
    for u in topo:
        if u.op is Ops.REDUCE:  # a reduction in lanes is one accumulator per lane
            lanes = max((int(n.arg) for n in u.src[0].toposort() if n.op is Ops.LANE), default=1)
            loops[u.src[1:]] = loops.get(u.src[1:], 0) + lanes
    if loops:
        parts.append(f"{len(loops)} reduction loop(s), the widest updating {max(loops.values())} accumulator(s)")
    return "; ".join(parts)
