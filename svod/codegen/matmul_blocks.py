"""Lowering for a CPU matmul whose ``b`` outgrows L2 (``block_matmul``): run over blocks of ``b``, or for one
row of output in passes of a few of ``b``'s rows, after copies of ``b`` whose rows start cache lines an odd
number apart, or of an operand read across the layout a register tile reads. A split into parts the pipeline
makes before the passes; each product is added in the same order as before."""

from __future__ import annotations

import math
from collections.abc import Sequence

from svod.codegen.indexing import Facts, Poly, Prover, to_poly
from svod.codegen.lower import _params
from svod.codegen.ranges import live_ranges, nested, range_order
from svod.codegen.upcast import _reduction_loads
from svod.device.caps import ASSUMED_L2_BYTES, CACHE_LINE
from svod.ir import AxisKind, Ops, UOp, kernel_label, simplify, substitute
from svod.ir.ops import CONTINUED, EFFECTS
from svod.ir.uop import FUSED_DTYPES, memory_of, param_size, pointee, written_memory

__all__ = ["BLOCK_DEPTH", "BLOCK_MIN_ROWS", "STREAM_DEPTH", "block_matmul"]


BLOCK_SHARE = 2
"""A block of ``b`` takes at most a ``1/BLOCK_SHARE`` of a core's L2 cache, so it stays there while every
row of the output passes over it, with room for the rows of ``a``: a block as large as the whole L2 is
evicted by them, and each pass over it reads it from L3 again."""
BLOCK_MIN_ROWS = 512
"""The fewest rows of output (times batches) that repay copying ``b``, and the other form is blocks over
``b`` itself: fewer rows (an MLP's layers of a few hundred rows) run no faster over the copy than in place,
and the copy is work of its own. From this many on, the copy pays even where ``b``'s rows already lie an odd
number of cache lines apart: the array a caller passes need not start a cache line (NumPy's start 16 bytes
into one), and a 1000 x 2200 x 2200 float64 product ran at 55 GFLOP/s over such a ``b`` in place and at 78
over the copy, on a Zen 3 core pair."""
VARIABLE_MIN_ROWS = 64
"""``BLOCK_MIN_ROWS`` where a size is a variable, and the other form reads ``b`` as written, from L3 for each
row of tiles: a few dozen rows of output already read ``b`` often enough to repay its copy, where fewer
run faster reading it as written."""
ALIASED_MIN_ROWS = 16
"""The fewest rows that repay copying ``b`` where its rows are an even number of cache lines apart, and so
fall in a fraction of the cache's sets (float32 by 1024: rows 4 KiB apart): there every pass over ``b`` misses
the cache, so even a few rows of output run faster over the copy than in blocks over ``b`` or as written,
though a handful do not repay it."""
BLOCK_WIDTHS = (256, 128)
"""The widths a block of columns may take, widest first: multiples of every register tile's row."""
BLOCK_DEPTH = 512
"""The most turns of a sum one block of ``b``'s rows takes (fewer where the narrowest block of that depth
would not fit in its share of L2): the block then stays in L2 whatever the sum's length, and a row of
``a``'s register tile (8 rows, 16 KiB in float32) in L1 across the block's columns: a long sum, unblocked,
reads each row of ``a`` from L2 and each block of ``b`` from L3 (a large matmul, and NPBench's gemm)."""


def block_matmul(sink: UOp, l2_bytes: int = ASSUMED_L2_BYTES) -> tuple[UOp, ...] | None:
    """A CPU matmul whose ``b`` is larger than its share of a core's L2 cache (``BLOCK_SHARE`` of
    ``l2_bytes``), over ``b`` in blocks of ``W`` columns: the blocks are an outermost sequential loop, so
    each thread passes its rows over every block, and the columns past the last whole block are a store of
    their own. A block of ``b`` (``K x W`` elements) then stays in L2 while the rows pass over it; ``b``
    read whole from L3 for each row of tiles runs much slower than where it fits in L2. A sum longer than
    ``BLOCK_DEPTH`` runs in blocks of ``D`` turns too, a loop inside the columns' loop: a block of ``b`` is
    then ``D x W``, and each block continues the sum the block before stored (``_continued``). Where the
    kernel stores something else of the sum (``alpha * sum + beta * c``), the sums go to a scratch buffer
    first and a last part stores the kernel's values (``_summed_first``).

    Rows of ``b`` an even number of cache lines apart map to part of the cache's sets (4 KiB apart: a
    sixteenth or fewer), and a block cut from them does not stay in L2 either (unlike rows 4224 bytes apart);
    rows that do not start a cache line split a tile's vector loads in two. Such a kernel, where at least
    ``ALIASED_MIN_ROWS`` rows of output read ``b``, and any, where at least ``BLOCK_MIN_ROWS`` do, runs as
    two that share every buffer and one more:

    - ``pack``: ``b`` copied into the scratch buffer, each row starting a cache line, an odd number apart;
    - ``packed``: the blocked matmul reading the copy.

    One row of output reads each block once, and blocks would only reorder its pass: where ``b``'s rows lie
    ``STREAM_ROW_BYTES`` or more apart, its sum runs in passes of a few of them instead (``_streamed``).

    Each product is added in the same order as before, so the result is the same bits. None unless the
    kernel is one store of a value with one float sum that every output range reads (a sum the same across one,
    a column's mean subtracted from each of its elements, is computed outside that range's loop, and a block
    could not continue it from the sum so far that each turn of the range stores), reading no memory the
    kernel writes, and ``b`` read at
    ``k * s + j + rest`` (``rest`` a multiple of ``s``: a batch); where a size is a variable, see
    ``_block_symbolic``.
    """
    effects = [e for e in sink.src if e.op in EFFECTS]
    if len(effects) != 1 or effects[0].op is not Ops.STORE:
        return None
    store = effects[0]
    reduces = [u for u in store.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD or reduces[0].dtype not in FUSED_DTYPES \
            or len(reduces[0].src) != 2:
        return None
    k = reduces[0].src[1]
    outputs = live_ranges(sink)[store]
    if not outputs or any(r.arg[1] is not AxisKind.GLOBAL for r in outputs):
        return None
    if not outputs <= reduces[0].live_ranges:
        return None  # a sum the same across an output range is computed outside its loop, where no block's start is
    written = written_memory(effects)
    loads = _reduction_loads(store)
    if any(memory_of(u.src[0].src[0]) in written for u in loads):
        return None  # the sum reads what the kernel writes: its blocks would read it in another order
    if k.src[0].op is not Ops.CONST or any(r.src[0].op is not Ops.CONST for r in outputs):
        blocked = _block_symbolic(sink, k, outputs, loads, written, l2_bytes // BLOCK_SHARE)
        return blocked if blocked is not None else _transposed_symbolic(sink, k, outputs, loads)
    copied, sink = _transposed(sink, k, outputs, loads)
    if copied:  # the sum now reads the copies
        store = _the_store(sink)
        loads = _reduction_loads(store)
    for load in loads:
        found = _blockable(load, k, outputs, written, l2_bytes // BLOCK_SHARE)
        if found is None:
            continue
        rows = math.prod(int(r.src[0].arg) for r in outputs) // int(found[0].src[0].arg)
        if rows < 2:  # one row reads each block once: blocks would only reorder its pass
            if found[1] * pointee(load.src[0].src[0]).itemsize < STREAM_ROW_BYTES:
                break
            return (*copied, *_streamed(sink, k, outputs))
        if found[-1] < int(k.src[0].arg) and not _blocks_store_value(store):
            return (*copied, *_summed_first(sink, load, k, found, outputs, rows))
        return (*copied, *_blocked(sink, load, k, *found, rows))
    return (*copied, sink) if copied else None


def _block_symbolic(sink: UOp, k: UOp, outputs: frozenset[UOp], loads: list[UOp], written: set[UOp],
                    block_bytes: int) -> tuple[UOp, ...] | None:
    """A matmul of variable sizes in blocks (``_blocked``) where ``b`` is read at ``k * n + j`` (plus a batch's
    offset), ``n`` the size of output range ``j``, the innermost (``b``'s rows are the output's). ``a.T``'s
    ``a[k, i]``, at ``k * m + i``, reads an outer range so: blocked as ``b``, the rows past its last block
    are a store at ``(m // W * W + r) * n + j`` that the race check does not prove its work items' own. How
    big ``b`` is, no compile knows; where it would stay in L2 as it is, its blocks cost a few loop turns, and
    where it would not, reading it from memory for each row of tiles takes several times as long as the blocks. The
    blocks are shaped as for a long sum (``_block_shape``). One row of output (a column sum, ``v @ A``, however
    its value uses the sum) reads each block once, so it is streamed instead (``_streamed``): blocks of 256
    columns walked 512 rows down a tile at a time read rows a page apart, a few cache lines each. Where rows
    of output pass over ``b``, each launch takes one of the forms of the kernel (``_launch_forms``); a kernel
    that stores something else of the sum (``sum + c``) that its blocks cannot store (``_blocks_store_value``)
    is blocked only where ``b`` is packed, its sums stored first."""
    plain = _blocks_store_value(_the_store(sink))
    for load in loads:
        index, param = load.src[0], load.src[0].src[0]
        if len(index.src) != 2 or param.op is not Ops.PARAM or param in written:
            continue
        terms = to_poly(index.src[1]).terms
        j = nested(outputs)[-1]
        if terms.get((j,)) != 1 or j.src[0].op is not Ops.DEFINE_VAR or any(j in m for m in terms if m != (j,)):
            continue
        rows = [(m, c) for m, c in terms.items() if k in m]  # the rest: a batch's offset
        if len(rows) != 1 or rows[0][1] != 1 or len(rows[0][0]) != 2 or set(rows[0][0]) != {k, j.src[0]}:
            continue
        if len(outputs) < 2:
            return _streamed(sink, k, outputs)
        shape = _block_shape(pointee(param).itemsize, block_bytes)
        if shape is None:
            return None
        packable = len(terms) == 2 and _holds(param_size(param), k.src[0] * j.src[0])
        if not plain and not packable:
            return None
        return _launch_forms(sink, load, k, j, outputs, shape, block_bytes, packable, plain)
    return None


PACK_MOST = 1 << 30
"""The longest rows whose copy's pitch is computed from their own length: longer rows are copied as they are
(the pitch is ``max(n, ...)``), so a pitch is never larger than the largest ``n`` by much, and the copy's
indices stay where a proof expands them (``indexing.SAFE_MAGNITUDE``), as ``b``'s own do."""


def _launch_forms(sink: UOp, load: UOp, k: UOp, j: UOp, outputs: frozenset[UOp], shape: tuple[int, int],
                  block_bytes: int, packable: bool, plain: bool) -> tuple[UOp, ...]:
    """A matmul of variable sizes (``b``, ``K x n``, read at ``k * n + j``, plus a batch's offset) in two
    forms, the parts of each taking the launches it is faster for (the other's outermost rows end at 0, so
    its parts run no turns):

    - ``pack`` and ``packed``: in blocks over a copy of ``b`` whose rows lie an odd number of cache lines apart
      (``_pitch``'s rule, of a variable ``n``), where ``b`` is larger than a block and holds two blocks'
      columns, and enough rows pass over it (``ALIASED_MIN_ROWS`` where its rows are an even number of lines
      apart, ``VARIABLE_MIN_ROWS`` where not): over rows of 4 KiB, as fast as the constant kernel, where read
      in place they are much slower;
    - as written for any other launch: over a ``b`` that stays in L2 (attention's ``p @ v``), where blocks
      only add loop turns, or that few rows read, which do not repay a copy or blocks.

    Where ``b`` is not ``packable`` (its batches, or a size no proof shows holds ``K x n``), the first form
    is in blocks over ``b`` itself. Where the blocks cannot store the kernel's value of the sum themselves (not
    ``plain``: ``_blocks_store_value``), the first form stores the sums to a buffer of their own, and a last
    part (``<name>_store``) the kernel's value of each (``sum + c``)."""
    b, n, depth = load.src[0].src[0], j.src[0], k.src[0]
    itemsize, width = pointee(b).itemsize, shape[0]
    rows = [r for r in nested(outputs) if r is not j]
    read_by = _monomial(tuple(r.src[0] for r in rows))
    aliased = _at_least(-((n * itemsize) % (2 * CACHE_LINE)), 0)  # rows an even number of lines apart
    aliased_rows = aliased * _at_least(read_by, ALIASED_MIN_ROWS)
    enough_rows = _at_least(aliased_rows + _at_least(read_by, VARIABLE_MIN_ROWS), 1)
    blocks = _at_least(_at_least(depth * n * itemsize, block_bytes + 1) + _at_least(n, 2 * width) + enough_rows, 3)
    written = _rows_gated(sink, rows[0], 1 - blocks)
    name = kernel_label(sink)
    if not packable:
        blocked = UOp.sink(*_rows_gated(sink, rows[0], blocks).src, name=f"{name}_blocked")
        return (*_blocked(blocked, load, k, j, None, *shape), written)
    summed, *stored = (sink,) if plain else _sums_first(sink, outputs)
    pitch = _variable_pitch(n, itemsize)
    params = _params(summed)
    scratch = UOp.param(params[-1].arg + 1, pointee(b), depth * pitch)
    row, column = UOp.range(_gated_end(depth, blocks), 0, AxisKind.GLOBAL), UOp.range(n, 1, AxisKind.GLOBAL)
    copy = UOp.sink(scratch[row * pitch + column].store(b[row * n + column].load()), *params, name=f"{name}_pack")
    packed = substitute(summed, {load: scratch[k * pitch + j].load()})
    packed = UOp.sink(*_rows_gated(packed, rows[0], blocks).src, *params, scratch, name=f"{name}_packed")
    last = (_rows_gated(part, rows[0], blocks) for part in stored)
    return (copy, *_blocked(packed, load, k, j, None, *shape), *last, written)


def _sums_first(sink: UOp, outputs: frozenset[UOp]) -> tuple[UOp, UOp]:
    """A kernel that stores something else of its sum as two: one storing the sums to a buffer of their own
    (``<name>_sum``), and one storing the kernel's value of each from there (``<name>_store``)."""
    store = _the_store(sink)
    reduce = next(u for u in store.src[1].toposort() if u.op is Ops.REDUCE)
    params, ranges = _params(sink), nested(outputs)
    count = simplify(_monomial(tuple(r.src[0] for r in ranges)))
    sums = UOp.param(params[-1].arg + 1, reduce.dtype, int(count.arg) if count.op is Ops.CONST else count)
    name = kernel_label(sink)
    summed = UOp.sink(sums[_flat(ranges)].store(reduce), *params, name=f"{name}_sum")
    return summed, UOp.sink(substitute(store, {reduce: sums[_flat(ranges)].load()}), *params, sums,
                            name=f"{name}_store")


def _variable_pitch(n: UOp, itemsize: int) -> UOp:
    """``_pitch`` of a variable ``n``, or ``n`` itself past ``PACK_MOST``; simplified, as the kernel it is put
    in will be, so that a buffer's size and the indices into it share their atoms."""
    line = CACHE_LINE // itemsize
    return simplify(n.maximum((n.minimum(PACK_MOST) + (line - 1)) // (2 * line) * (2 * line) + line))


def _transposed_symbolic(sink: UOp, k: UOp, outputs: frozenset[UOp], loads: list[UOp]) -> tuple[UOp, ...] | None:
    """A matmul of variable sizes that reads ``b`` across the layout a register tile reads (``b[j, k]``, at
    ``j * s + k``, where no load reads the innermost output range ``j`` at unit stride), in two forms: a copy
    of ``b.T`` with rows an odd number of lines apart (``<name>_transpose``) and the kernel reading it
    (``<name>_transposed``), for a launch where ``TRANSPOSE_MIN_ROWS`` rows of output or more read it, and the
    kernel as written for any other; the form a launch does not take runs no turns. Read in place, no
    register tile covers such an operand (attention's scores, ``q @ k.T``)."""
    j = nested(outputs)[-1]
    rows = [r for r in nested(outputs) if r is not j]
    operands = [(u, to_poly(u.src[0].src[1])) for u in loads
                if len(u.src[0].src) == 2 and u.src[0].src[0].op is Ops.PARAM]
    if not rows or any(poly.terms.get((j,)) == 1 for _, poly in operands):
        return None
    for load, poly in operands:
        across = {m: c for m, c in poly.terms.items() if m != (k,)}
        if poly.terms.get((k,)) != 1 or not across or any(k in m or m.count(j) != 1 for m in across):
            continue
        b, n, depth = load.src[0].src[0], j.src[0], k.src[0]
        pitch = _variable_pitch(n, pointee(b).itemsize)
        takes = _at_least(_monomial(tuple(r.src[0] for r in rows)), TRANSPOSE_MIN_ROWS)
        params = _params(sink)
        scratch = UOp.param(params[-1].arg + 1, pointee(b), depth * pitch)
        column, row = UOp.range(_gated_end(n, takes), 0, AxisKind.GLOBAL), UOp.range(depth, 1, AxisKind.GLOBAL)
        value = b[substitute(load.src[0].src[1], {j: column, k: row})].load()
        name = kernel_label(sink)
        copy = UOp.sink(scratch[row * pitch + column].store(value), *params, name=f"{name}_transpose")
        reading = substitute(sink, {load: scratch[k * pitch + j].load()})
        reading = UOp.sink(*_rows_gated(reading, rows[0], takes).src, *params, scratch, name=f"{name}_transposed")
        return copy, reading, _rows_gated(sink, rows[0], 1 - takes)
    return None


def _rows_gated(sink: UOp, rows: UOp, gate: UOp) -> UOp:
    """``sink`` whose range ``rows`` runs no turns unless ``gate`` (0 or 1) is 1: a form of a kernel its
    launch may not take."""
    return substitute(sink, {rows: rows.replace(src=(_gated_end(rows.src[0], gate),))})


def _holds(size: UOp, count: UOp) -> bool:
    """Whether a buffer of ``size`` elements holds ``count`` for every value of the variables."""
    return Prover(Facts(), {}).nonnegative(to_poly(size) - to_poly(count))


def _at_least(value: UOp, least: int) -> UOp:
    """1 where ``value >= least``, else 0, in the operations a launch size is made of. Conditions join in one
    such atom (``_at_least(a + b, 2)``: both), not as a product of them, which a proof would expand."""
    return (value - (least - 1)).maximum(0).minimum(1)


def _gated_end(end: UOp, gate: UOp) -> UOp:
    """``end`` where ``gate`` (0 or 1) is 1, else 0: a range that runs no turns unless its launch is taken,
    still bounded by ``end`` for the proofs."""
    return end.minimum(end * gate)


def _the_store(sink: UOp) -> UOp:
    """The one STORE of a kernel ``block_matmul`` took (its only effect), or of a part it built."""
    return next(e for e in sink.src if e.op is Ops.STORE)


TRANSPOSE_TILE = 16
"""The side of the squares a transposed copy moves one at a time: 16 rows of 16 elements, read and written a
cache line at a time while the square stays in L1."""


def _pitch(count: int, itemsize: int) -> int:
    """The elements between rows of ``count`` elements in a copy whose rows each start a cache line and lie
    an odd number of lines apart, so the lines of consecutive rows fall in every set of the caches before
    one repeats. Rows 4 KiB apart map to a sixteenth of the sets or fewer, rows 5 KiB apart (1280 float32)
    to half of L2's: a matmul reading such a ``b`` where it is runs much slower than over a copy an odd
    number of lines apart."""
    lines = -(-count * itemsize // CACHE_LINE)
    return (lines | 1) * CACHE_LINE // itemsize


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
"""The fewest rows of output that repay copying a transposed operand: read in place, no tile covers it, and
``a @ b.T`` or ``a.T @ b`` runs at a fraction of numpy's rate."""


def _transposed(sink: UOp, k: UOp, outputs: frozenset[UOp], loads: list[UOp]) -> tuple[tuple[UOp, ...], UOp]:
    """Each operand read across the layout a register tile reads, copied to a scratch buffer in that layout,
    and ``sink`` reading the copies: ``b[j, k]`` (``j`` the innermost output range, which no load reads at
    unit stride) as ``b.T``; then, where a load reads ``j`` at unit stride, ``a[k, i]`` as ``a.T``. The
    copies are parts (``<name>_transpose``) before the kernel; its sum is the same, in the same order."""
    j = nested(outputs)[-1]
    if math.prod(int(r.src[0].arg) for r in outputs if r is not j) < TRANSPOSE_MIN_ROWS:
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
    """A part copying ``load``'s buffer (at ``poly``) to a scratch buffer laid out ``[batch][outer][inner]``
    (rows starting cache lines, an odd number of lines apart), and ``sink`` reading the copy."""
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


def _summed_first(sink: UOp, load: UOp, k: UOp, found: tuple[UOp, int, int, int], outputs: frozenset[UOp],
                  rows: int) -> tuple[UOp, ...]:
    """A blocked sum that the kernel does not store as it is (``alpha * sum + beta * c``): the sums go to a
    scratch buffer first, blocked and continued there, and a last part stores the kernel's value of each
    (``_sums_first``)."""
    summed, stored = _sums_first(sink, outputs)
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
    shape = _block_shape(itemsize, block_bytes, depth, columns)
    return None if shape is None else (j, stride, *shape)


def _block_shape(itemsize: int, block_bytes: int, depth: int | None = None,
                 columns: int | None = None) -> tuple[int, int] | None:
    """The width and the depth (turns of the sum) of a block of ``b`` in ``block_bytes``: at most
    ``BLOCK_DEPTH`` turns, fewer where the narrowest block would not fit, in blocks as even as a known
    ``depth`` allows; the widest width that fits, and that known ``columns`` hold twice."""
    most = min(BLOCK_DEPTH, block_bytes // (BLOCK_WIDTHS[-1] * itemsize))
    if most < 1:
        return None
    deep = most if depth is None else -(-depth // -(-depth // most))
    width = next((w for w in BLOCK_WIDTHS if (columns is None or columns >= 2 * w)
                  and deep * w * itemsize <= block_bytes), None)
    return None if width is None else (width, deep)


def _blocked(sink: UOp, load: UOp, k: UOp, j: UOp, stride: int | None, width: int, deep: int,
             rows: int = 0) -> tuple[UOp, ...]:
    """The blocked kernel (``block_matmul``), after a copy of ``b`` where ``rows`` rows of output repay it
    (fewer where its rows, ``stride`` apart, alias; of variable sizes, never). The columns past the last whole
    block are a store of their own."""
    b = load.src[0].src[0]
    params = _params(sink)
    name = kernel_label(sink)
    copy: tuple[UOp, ...] = ()
    itemsize = pointee(b).itemsize
    aliased = stride is not None and stride * itemsize % (2 * CACHE_LINE) == 0
    if stride is not None and rows >= (ALIASED_MIN_ROWS if aliased else BLOCK_MIN_ROWS):
        pitch = _pitch(stride, itemsize)
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
    if k.src[0].op is not Ops.CONST or deep < int(k.src[0].arg):
        sink = _continued(sink, k, deep)
    columns = j.src[0]
    blocks, left = divmod(int(columns.arg), width) if columns.op is Ops.CONST else \
        (columns // width, columns - columns // width * width)
    block = UOp.range(blocks, 0, AxisKind.LOOP)  # outermost: every row passes over a block, each thread its rows
    inside = UOp.range(width, j.arg[0] + 2, AxisKind.GLOBAL)
    blocked = substitute(sink, {**renumbered, j: block * width + inside})
    if isinstance(left, int) and not left:
        return (*copy, blocked)
    rest = UOp.range(left, 3 + max(r.arg[0] for r in ranges), AxisKind.GLOBAL)  # the columns past the blocks
    store = _the_store(sink)
    edge = substitute(store, {**renumbered, j: blocks * width + rest})
    return (*copy, blocked.replace(src=(*blocked.src, edge)))


STREAM_ROW_BYTES = 4096
"""The least distance between rows of ``b`` from which one row of output streams them (``_streamed``): rows a
page apart, which a CPU's prefetcher does not follow from one to the next. Rows closer than that lie close
enough for it as they are, and the passes would add work for nothing (``v @ A`` over 3 columns)."""
STREAM_DEPTH = 8
"""How many turns of its sum a streamed product (``_streamed``) takes a pass: rows of ``b`` read side by side,
each along the whole of a thread's columns: more rows a pass keep more of memory's streams busy, and the
gain levels off by eight."""


def _streamed(sink: UOp, k: UOp, outputs: frozenset[UOp]) -> tuple[UOp, ...]:
    """A sum whose one row of output reads ``b`` along its columns (``v @ A``, ``A.sum(axis=0)``), over
    passes of ``STREAM_DEPTH`` turns of ``k`` (``_continued``, outermost), each over every column: a pass reads
    that many rows of ``b``, each along a thread's columns, and adds them to the sums the pass before stored.
    Read a tile of columns at a time down every row, ``b`` came from memory a few cache lines a row, each row
    a page apart, waiting on memory at every row; streamed, the rows come at memory's bandwidth. Each
    product is added in the same order as before. Where the kernel stores something else of the sum, the
    sums go to a buffer of their own first (``_sums_first``)."""
    summed, *stored = (sink,) if _blocks_store_value(_the_store(sink)) else _sums_first(sink, outputs)
    ranges = [r for r in summed.toposort() if r.op is Ops.RANGE]
    renumbered = {r: UOp.range(r.src[0], r.arg[0] + 2, r.arg[1]) for r in ranges}  # the passes' loop outside
    return (substitute(_continued(summed, k, STREAM_DEPTH), renumbered), *stored)


def _blocks_store_value(store: UOp) -> bool:
    """Whether the blocks of a continued sum (``_continued``) can store ``store``'s value of it themselves,
    the last block the value and the ones before it the sum so far, in the output: a plain sum, or a value of
    it (an MLP's ``relu(sum + bias)``) of the sum's type that reads no memory the kernel writes (``sum + c``
    reads the output, which holds a partial sum until the last block). Else the sums go to a buffer of their
    own first (``_sums_first``)."""
    value, target = store.src[1], store.src[0].src[0]
    if value.op is Ops.REDUCE:
        return True
    reduce = next(u for u in value.toposort() if u.op is Ops.REDUCE)
    return pointee(target) == reduce.dtype and all(
        memory_of(u.src[0].src[0]) is not memory_of(target) for u in value.toposort() if u.op is Ops.LOAD)


def _continued(sink: UOp, k: UOp, deep: int) -> UOp:
    """``sink``'s store, a sum over ``k``, as a loop over blocks of ``deep`` turns of ``k`` (axis 1, inside
    the loop over column blocks): each block continues the sum stored by the block before (``CONTINUED``),
    so each product is still added in order, and the result is the same bits. Where the kernel stores a value
    of the sum (``_blocks_store_value``), the last block stores that value of the whole sum."""
    store = _the_store(sink)
    length = k.src[0]
    if length.op is Ops.CONST:
        depth = UOp.range(-(-int(length.arg) // deep), 1, AxisKind.LOOP)
        turns: int | UOp = deep if int(length.arg) % deep == 0 else (length - depth * deep).minimum(deep)
    else:  # one block at least, which stores the sum where it is empty
        depth = UOp.range(((length + (deep - 1)) // deep).maximum(1), 1, AxisKind.LOOP)
        turns = (length - depth * deep).minimum(deep)
    turn = UOp.range(turns, k.arg[0] + 2, AxisKind.REDUCE)
    reduce = next(u for u in store.src[1].toposort() if u.op is Ops.REDUCE)
    partial = substitute(reduce.src[0], {k: depth * deep + turn}).reduce(turn, op=reduce.arg)
    before = (depth < 1).where(UOp.const(reduce.dtype, -0.0), store.src[0].load())
    total = UOp(Ops.ADD, reduce.dtype, (before, partial), CONTINUED)
    if store.src[1] is not reduce:
        total = (depth < depth.src[0] - 1).where(total, substitute(store.src[1], {reduce: total}))
    return substitute(sink, {store: store.src[0].store(total, *store.src[2:], depth)})


def _monomial(atoms: tuple[UOp, ...]) -> UOp:
    product = UOp.index_const(1)
    for atom in atoms:
        product = product * atom
    return product
