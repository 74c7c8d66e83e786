"""Lowering for a CPU: GLOBAL ranges spread over threads (``split_for_threads``), atomic adds into a small
buffer made into a private copy per thread (``privatize_atomics``), register tiles sized for the vector
registers (``tile_for_cpu``), and transposes, however their loops were written, walked in blocks
(``block_transposes``). A matmul whose ``b`` outgrows L2 runs over blocks of it (``svod.codegen.matmul_blocks``)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

from svod.codegen.lower import THREAD_MIN_WORK, _gated, gate_effects, most_iterations, private_statements
from svod.codegen.nest_order import anchored_in_order, parallel_nest
from svod.codegen.ranges import free_axis, live_ranges, nested, range_order
from svod.codegen.stored_terms import store_terms_first
from svod.codegen.upcast import (
    EXTREMA,
    SPLIT_WIDTH,
    TAIL_SPLIT_WIDTH,
    share_rows,
    split_reductions,
    stream_rows,
    upcast_loops,
    upcast_reductions,
)
from svod.device.caps import CORE_ID
from svod.dtype import PtrDType, dtypes
from svod.ir import AxisKind, Ops, UOp, simplify, substitute
from svod.ir.ops import EFFECTS, STATEMENTS
from svod.ir.uop import memory_of, param_size, written_memory

__all__ = ["CHUNKS_PER_THREAD", "PRIVATE_BYTES", "THREAD_CHUNK_ALIGN", "privatize_atomics", "reduce_atomic_adds",
           "split_for_threads", "thread_split", "tile_for_cpu", "tile_row_bytes", "tile_rows", "vector_bytes"]


# ---- CPU threads -----------------------------------------------------------------------------------------

THREAD_CHUNK_ALIGN = 16
"""Each thread's chunk of the split range starts on a multiple of this, so vector loops stay aligned."""


CHUNKS_PER_THREAD = 4
"""How many chunks of the split range a launch makes for each thread, where the range is long enough: the
threads take chunks one at a time (``cpu_team``), so a thread that loses its core to another process delays
only the chunk it holds, and the others run the rest. With one chunk a thread, two threads on a machine whose
other core ran another process took longer than one thread."""


def split_for_threads(sink: UOp, threads: int, chunks_per_thread: int = CHUNKS_PER_THREAD) -> UOp:
    """``sink`` split across ``threads`` workers (``thread_split``), without the launch's worker count."""
    return thread_split(sink, threads, chunks_per_thread)[0]


def thread_split(sink: UOp, threads: int, chunks_per_thread: int = CHUNKS_PER_THREAD) -> tuple[UOp, UOp | None]:
    """Split the outermost GLOBAL range that has a chunk for each of ``threads`` workers (named by
    ``core_id``), else the outermost that has two, across the workers (a register tile may leave few
    chunks on the outermost range: 16 channels in tiles of 8 rows are two); and how many workers a launch
    wakes, where the kernel's variables decide it (None: ``core_id``'s count).

    The range is cut into ``pieces`` chunks: ``chunks_per_thread`` for each thread, fewer where the range
    holds fewer aligned chunks, ``threads`` at least (``_pieces``). A chunk is ``end/pieces`` indices, rounded
    up to a multiple of ``THREAD_CHUNK_ALIGN`` for the innermost range (whose neighbours are neighbouring
    elements), of 1 for another, or for any where no range is long enough for aligned chunks (a sort's 8
    blocks of keys ran on one thread); chunk ``q`` is indices ``[q*chunk, min((q+1)*chunk, end))``. A
    ``core_id`` is a chunk, or a run of them, that the team's threads claim one at a time. A worker is worth
    waking for ``THREAD_MIN_WORK`` iterations or more: a kernel with no more than that (at the largest sizes
    its variables allow) stays on one thread, and one with more takes ``w`` ids (``_ids``): as many as hold
    that much work each, up to ``threads``, and past ``threads`` a multiple of it, ``pieces`` at most, so the
    threads share the ids evenly (by an upper bound of one index's work, ``_work_per_index``). Where the sizes
    are constants, ``w`` is a number: the kernel has ``w`` ids of a chunk each. Where they are variables, the
    kernel computes ``w`` as the launch does, and id ``c`` runs chunks ``c*m .. c*m + m - 1`` (``m =
    ceil(pieces / w)``): a launch with little work runs on the calling thread alone (the tiny wavefronts of a
    DP sweep). There a loop over all ``pieces`` chunks gives the others none to do, so that a chunk starts at
    the loop's index times ``chunk``, which LLVM keeps out of the chunk's loop: a start clamped to the last
    chunk (a ``min`` of the loop's index) it recomputed for every element. The chunks stay ``end/pieces`` long,
    so an index's bounds are what they were (a chunk as long as ``end``, for one worker, would double them and
    leave neighbouring lanes unproven). Other GLOBAL ranges become sequential loops inside the split one. An
    effect that does not use the split range runs on worker 0 only (and a loop's exit that does not ends its
    loop on the others). A chunk's code is the same whichever thread runs it, and no reduction crosses a
    chunk, so results do not depend on the split.
    """
    ranges = [u for u in sink.toposort() if u.op is Ops.RANGE]
    global_ranges = sorted((r for r in ranges if r.arg[1] is AxisKind.GLOBAL), key=range_order)
    if threads <= 1 or not global_ranges:
        return sink, None
    heaviest = _heaviest_ranges(sink)
    global_ranges.sort(key=lambda r: r not in heaviest)  # stable: each side stays in nesting order
    work = most_iterations(sink)
    aligns = {r: THREAD_CHUNK_ALIGN if r is global_ranges[-1] else 1 for r in global_ranges}
    outer = next((r for r in global_ranges if r.src[0].vmax >= threads * aligns[r]),
                 next((r for r in global_ranges if r.src[0].vmax >= 2 * aligns[r]), None))
    if outer is None:  # too short for aligned chunks: chunks of any length
        outer = next((r for r in global_ranges if r.src[0].vmax >= 2), None)
        aligns = dict.fromkeys(global_ranges, 1)
    if work <= THREAD_MIN_WORK or outer is None:
        return sink, None
    end = outer.src[0]
    pieces = _pieces(int(end.vmax), aligns[outer], threads, chunks_per_thread)
    effects = [e for e in sink.src if e.op in STATEMENTS]
    live = live_ranges(sink)
    least = _ceil_div(UOp.index_const(THREAD_MIN_WORK), _work_per_index(outer, effects, live).maximum(1))
    workers = _ids(_ceil_div(_launch_bound(end), least), threads, pieces)
    if workers.op is Ops.CONST:
        pieces = int(workers.arg)
        if pieces <= 1:
            return sink, None
    core_id = UOp.define_var(CORE_ID, 0, pieces - 1)
    chunk = _aligned(_ceil_div(end, pieces), aligns[outer])
    mine: UOp | None = None  # whether this id runs the chunk, where it is not the only one
    if workers.op is Ops.CONST:
        piece = core_id
    else:  # every chunk, of which this id runs core_id*each .. core_id*each + each - 1 (the others run none)
        each = _ceil_div(UOp.index_const(pieces), workers)
        # on the split range's axis, so it nests just outside it (whose end reads it) and inside what did before
        piece = UOp.range(pieces, outer.arg[0], AxisKind.LOOP)
        first = core_id * each
        mine = piece.ge(first) & piece.lt(first + each)
    start = piece * chunk
    length = (end - start).minimum(chunk)
    if mine is not None:
        length = mine.where(length, 0)
    inner = UOp.range(length, outer.arg[0], AxisKind.GLOBAL)  # still parallel work
    private = private_statements(sink)
    first_only = {e: core_id.eq(0) for e in sink.src
                  if e.op in STATEMENTS and outer not in live[e] and e not in private}
    return (substitute(gate_effects(sink, first_only), {outer: start + inner}),
            None if workers.op is Ops.CONST else workers)


def _pieces(longest: int, align: int, threads: int, chunks_per_thread: int) -> int:
    """How many chunks a range of at most ``longest`` indices is cut into for ``threads`` threads: a multiple
    of ``threads``, at most ``chunks_per_thread`` of them a thread and as many chunks of ``align`` indices as
    the range holds, ``threads`` at least; and no more than reach as far past ``longest`` as one chunk a thread
    does (chunks of ``ceil(longest / pieces)`` rounded up to ``align`` reach ``pieces`` times that). An index's
    bounds are the chunks' reach: a symbolic batched matmul's 1664510 rows in 8 chunks reach 1664512, and the
    product of its offset's bounds passed what a proof expands, where 2 chunks' 1664510 did not."""
    def reach(pieces: int) -> int:
        chunk = -(-longest // pieces)
        return pieces * -(-chunk // align) * align

    most = max(1, min(chunks_per_thread, longest // (align * threads)))
    return threads * next(k for k in range(most, 0, -1) if reach(threads * k) <= reach(threads))


def _ids(wanted: UOp, threads: int, pieces: int) -> UOp:
    """How many ids a launch runs where ``wanted`` hold ``THREAD_MIN_WORK`` each: ``wanted`` up to ``threads``,
    then the largest multiple of ``threads`` not past ``wanted`` or ``pieces`` (three ids on two threads would
    leave one thread a third of the work alone to finish)."""
    shared = (wanted // threads).minimum(pieces // threads) * threads
    return simplify(wanted.minimum(threads).maximum(shared).maximum(1))


def _heaviest_ranges(sink: UOp) -> frozenset[UOp]:
    """The ranges of the effect that runs the most iterations (at the largest sizes), the first of those
    on a tie. The split range is one of them where one may be: a range the heaviest effect does not run in
    leaves it on worker 0 alone (a blocked matmul's 64 rows split over its 4 columns past the blocks, not
    its 896 in blocks, ran those blocks on one worker)."""
    def work(effect: UOp) -> int:
        return math.prod(max(int(r.src[0].vmax), 1) for r in effect.toposort() if r.op is Ops.RANGE)

    effects = [e for e in sink.src if e.op in STATEMENTS]
    if not effects:
        return frozenset()
    heaviest = max(effects, key=work)
    return frozenset(r for r in heaviest.toposort() if r.op is Ops.RANGE)


def _ceil_div(a: UOp, b: int | UOp) -> UOp:
    return (a + (b - 1)) // b


def _aligned(count: UOp, align: int) -> UOp:
    return _ceil_div(count, align) * align


_LAUNCH_OPS = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN,
                         Ops.NEG, Ops.ABS, Ops.CAST})
"""What a launch size may be made of (``svod.device.launch``, and the CPU's native replay)."""


def _launch_bound(end: UOp) -> UOp:
    """An upper bound of ``end`` a launch evaluates from the kernel's variables: ``end`` where it reads only
    them, the smaller bound of the two sides of a MIN, else its largest value (a range that ends where a value
    the kernel loads says, ``guarded_ranges``)."""
    if all(u.op in _LAUNCH_OPS and u.dtype.is_int and not (u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID)
           for u in end.toposort()):
        return end if end.dtype == dtypes.index else end.cast(dtypes.index)
    if end.op is Ops.MIN:
        return _launch_bound(end.src[0]).minimum(_launch_bound(end.src[1]))
    return UOp.index_const(max(int(end.vmax), 0))


def _work_per_index(outer: UOp, effects: Sequence[UOp], live: Mapping[UOp, frozenset[UOp]]) -> UOp:
    """An upper bound of the iterations one index of ``outer`` runs, at most ``THREAD_MIN_WORK`` (all a
    launch asks of it), that a launch evaluates from the kernel's variables: over the effects that run in
    ``outer``, the sum of the products of their other ranges' turns, each its end where the end reads only
    variables, the smaller bound of the two sides of a MIN, else the end's largest value. A range the
    effect runs in (``live``) encloses all its work, and where it is empty the effect runs nothing; effects
    in the same ranges are one loop nest (a symbolic 256x256x10 dense layer, counting its empty tiles' loops
    and each row of its edge tile as a loop of 256 turns, woke two workers for too little work, and ran slower
    than on one); any other range counts at least 1 (a range that may be empty is a sibling loop as often as a
    nested one). (One product over every range of the kernel took an edge tile's range for a factor of every
    effect: a symbolic 256^2 matmul woke one worker of two; a split maximum's tail, empty over 1024 columns,
    kept a softmax on one.)"""
    most = UOp.index_const(THREAD_MIN_WORK)
    total = UOp.index_const(0)
    nests: set[frozenset[UOp]] = set()
    for effect in effects:
        ranges = [u for u in effect.toposort() if u.op is Ops.RANGE]
        nest = frozenset(ranges)
        if outer not in nest or nest in nests:
            continue  # effects in the same ranges run in the same loops (the rows of a register tile)
        nests.add(nest)
        product = UOp.index_const(1)
        for r in ranges:
            if r is not outer:
                least = 0 if r in live[effect] else 1
                product = (product * _launch_bound(r.src[0]).maximum(least).minimum(most)).minimum(most)
        total = (total + product).minimum(most)
    return simplify(total)


def reduce_atomic_adds(sink: UOp, threads: int) -> UOp | None:
    """Atomic adds whose value depends on parallel ranges their element does not (``z[i] += f[i, k] * w[k]``
    over ``i`` and ``k``), made one per element: the value summed over copies of those ranges (REDUCE ranges
    on free axes), then added once. A buffer too large for a private copy (``privatize_atomics``) took a locked
    compare-exchange loop per work item: a logistic regression's ``features @ weights`` into 10^6 float64 ran
    13.7 times slower than a sum per row. None where no add qualifies (``_summed_ranges``).

    Only the atomic add's use of the ranges changes: the kernel's other effects keep running in them. So the
    add's value may not read memory the kernel writes (its work item's own store, made in a range the sum
    now walks apart from it), nor may the kernel do anything to the added buffer but atomic adds. Integer sums
    are exact; a float sum's order was never fixed for atomics, and the sum starts from -0.0, so an empty range
    adds nothing that changes an element (``reduce_identity``)."""
    topo = sink.toposort()
    written = written_memory(e for e in sink.src if e.op in EFFECTS)
    others = {memory_of(u.src[0].src[0]) for u in topo if u.op in (Ops.LOAD, Ops.STORE)
              or (u.op is Ops.ATOMIC and u.arg is not Ops.ADD)}
    ranges = [u for u in topo if u.op is Ops.RANGE]
    axes = iter(range(free_axis(sink), 1 << 30))
    effects: list[UOp] = []
    for e in sink.src:
        summed = _summed_ranges(e, ranges, written, others, threads)
        if not summed:
            effects.append(e)
            continue
        copies = {r: UOp.range(r.src[0], next(axes), AxisKind.REDUCE) for r in summed}
        total = substitute(e.src[1], copies).reduce(*copies.values())
        effects.append(e.replace(src=(e.src[0], total, *(r for r in e.src[2:] if r not in copies))))
    return None if effects == list(sink.src) else sink.replace(src=tuple(effects))


def _summed_ranges(effect: UOp, ranges: Sequence[UOp], written: set[UOp], others: set[UOp],
                   threads: int) -> tuple[UOp, ...]:
    """The GLOBAL ranges an atomic add (``effect``) may sum its value over (``reduce_atomic_adds``), in nesting
    order; none for any other effect. A range qualifies where the value uses it and the element (index and
    gate) does not, it nests inside the parallel ranges the element uses (summed over an outer range, a
    gradient's ``dw[k] += x[i, k] * dz[i]`` walked every row once per column, where its private copy walked
    the rows once: a logistic regression's gradient took 1.3 to 2 times as long), its end uses no range (the
    sum's loop needs no other), and no other range the add runs in ends at a value that depends on it. The add
    qualifies where its buffer takes atomic adds alone, its value reads no memory the kernel writes, and the
    ranges it keeps are parallel and hold ``threads`` work items at their largest: an add into one element (an
    energy) keeps its parallel atomic adds, which ``privatize_atomics`` makes private."""
    if effect.op is not Ops.ATOMIC or effect.arg is not Ops.ADD or memory_of(effect.src[0].src[0]) in others:
        return ()
    element, value = effect.src[0], effect.src[1]
    if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written for u in value.toposort()):
        return ()
    kept = [r for r in element.live_ranges if r.arg[1] is AxisKind.GLOBAL]
    if not kept or math.prod(int(r.src[0].vmax) for r in kept) < threads:
        return ()
    running, innermost_kept = effect.live_ranges, max(range_order(r) for r in kept)
    return tuple(sorted((r for r in value.live_ranges - element.live_ranges if r.arg[1] is AxisKind.GLOBAL
                         and range_order(r) > innermost_kept
                         and not any(u.op is Ops.RANGE for u in r.src[0].toposort())
                         and not any(o is not r and o in running and r in o.src[0].toposort() for o in ranges)),
                        key=range_order))


PRIVATE_BYTES = 128 * 1024
"""The most bytes of private copies of buffers of atomic adds a CPU thread keeps for a kernel: on its stack (a
thread's is megabytes: glibc gives each the process's stack limit, 8 MiB by default), in its L2 cache. A
gradient's adds into the adjoint of a few thousand 3-D positions (an n-body energy's), or a cloth's spring forces
into its 4,096 particles' (96 KiB), are plain adds there, locked ones past it: a locked add of a float is a
compare-and-swap loop, which cost the cloth's forward most of its time."""


def privatize_atomics(sink: UOp) -> UOp:
    """Atomic adds into a small buffer (a histogram's counts), made by each CPU thread into a private copy
    and added to the buffer once per element at the end.

    Threads that add into one small buffer contend for its cache lines, and each add is a locked
    instruction even without contention; a private copy takes plain adds. A buffer qualifies when it may hold
    at most its share of ``PRIVATE_BYTES`` (which the copies of the buffers a kernel adds into hold together),
    the kernel only adds into it (no load, store, MAX or MIN), and it makes at least
    as many adds per thread as the buffer may have elements (else the copy costs more than it saves). The
    kernel becomes: the copy set to 0 (``-0.0`` for floats, which any sum keeps), the kernel with its adds into
    the copy, then each thread's copy added into the buffer (integer zeros skipped). A buffer of symbolic size
    gets a copy of its share, used where the buffer fits it, its adds made atomically into the buffer
    where it does not (a histogram of a symbolic bin count, all locked adds, ran many times slower), in a
    loop nest of their own after the kernel's (a gate that no loop computes opens its IF around the loops). So
    only in a kernel that makes these adds and nothing else: an effect beside them would share the loop the IF
    splits, or be split from them (its loop run twice: a value read before a store and used after it was read
    again after it). A private copy is a ``DEFINE_LOCAL`` whose source is the buffer it stands for, so a
    bounds check on it reports that buffer. Integer sums are exact; a float sum's order was never fixed.
    """
    topo = sink.toposort()
    live = live_ranges(sink)
    adds: dict[UOp, list[UOp]] = {}
    for e in sink.src:
        if e.op is Ops.ATOMIC and e.arg is Ops.ADD and e.src[0].src[0].op is Ops.PARAM:
            adds.setdefault(e.src[0].src[0], []).append(e)
    others = {memory_of(u.src[0].src[0]) for u in topo if u.op in (Ops.LOAD, Ops.STORE, Ops.ATOMIC)
              and not (u.op is Ops.ATOMIC and u in adds.get(u.src[0].src[0], ()))}
    axes = iter(range(free_axis(sink), 1 << 30))
    setup: list[UOp] = []
    flush: list[UOp] = []
    private: dict[UOp, tuple[UOp, UOp | None]] = {}  # the copy, and where the buffer fits it (None: always)
    share = PRIVATE_BYTES // max(len(adds), 1)  # the copies hold PRIVATE_BYTES together, on each thread's stack
    for buffer, found in adds.items():
        assert isinstance(buffer.dtype, PtrDType)
        base, size = buffer.dtype.base, param_size(buffer)
        held = share // base.itemsize
        work = sum(math.prod(int(r.src[0].vmax) for r in live[e]) for e in found)
        if buffer in others or size.vmax <= 0 or size.vmin > held \
                or work < min(held, int(size.vmax)):
            continue
        fits = None if size.vmax <= held else size <= held
        if fits is not None and any(e.op in EFFECTS and e not in found for e in sink.src):
            continue  # the kernel does more than these adds: see the docstring
        capacity = int(size.vmax) if fits is None else held
        copy = UOp(Ops.DEFINE_LOCAL, base.ptr(capacity, local=True), (buffer,), len(private))
        private[buffer] = (copy, fits)
        zero = copy.index(UOp.range(size, next(axes), AxisKind.LOOP), gate=fits).store(-0.0 if base.is_float else 0)
        setup.append(zero)
        each = UOp.range(size, next(axes), AxisKind.LOOP)
        total = copy.index(each, gate=fits).load()
        nonzero = None if base.is_float else total.ne(0)
        gate = nonzero if fits is None else fits if nonzero is None else fits & nonzero
        flush.append(buffer.index(each, gate=gate).atomic(total))
    if not private:
        return sink
    body: list[UOp] = []
    elsewhere: list[UOp] = []
    for e in sink.src:
        if e.op not in EFFECTS:
            continue
        if e.op is not Ops.ATOMIC or e.src[0].src[0] not in private:
            body.append(e)
            continue
        copy, fits = private[e.src[0].src[0]]
        into_copy = e.replace(src=(e.src[0].replace(src=(copy, *e.src[0].src[1:])), *e.src[1:]))
        if fits is None:
            body.append(into_copy)
        else:  # the copy's loops or the buffer's run, each whole: the buffer's after the kernel's own
            body.append(_gated(into_copy, fits))
            elsewhere.append(_gated(_in_loops_of_its_own(e, live[e], axes, fits), fits.ne(True)))
    return sink.replace(src=(*setup, *body, *elsewhere, *flush, *(u for u in sink.src if u.op not in EFFECTS)))


def _in_loops_of_its_own(effect: UOp, ranges: frozenset[UOp], axes: Iterator[int], skipped: UOp) -> UOp:
    """``effect`` over copies of ``ranges`` (on axes from ``axes``, in their nesting order; an end that uses
    another range uses its copy), the outermost ending at once where ``skipped`` holds: a loop nest of its
    own, which runs whole before or after the effects beside it, or not at all."""
    copies: dict[UOp, UOp] = {}
    for r in nested(ranges):
        end = substitute(r.src[0], copies)
        copies[r] = UOp.range(end if copies else skipped.where(UOp.index_const(0), end), next(axes), r.arg[1])
    return substitute(effect, copies)


# ---- register tiles --------------------------------------------------------------------------------------

def tile_rows(vector_registers: int) -> int:
    """How many rows a CPU register tile has: its accumulators take a quarter of the vector registers
    at most, the rest holding loads and broadcasts. A row of 16 float32 is two AVX2 registers (4 rows of
    16) or one AVX-512 register (8 rows of 16, of 32 registers)."""
    return max(1, vector_registers // 4)


def vector_bytes(vector_registers: int) -> int:
    """The bytes of one of a CPU's vector registers: 64 where it has 32 (AVX-512), else 32 (AVX2's 16)."""
    return 64 if vector_registers >= 32 else 32


def tile_row_bytes(vector_registers: int) -> int:
    """The bytes of a CPU register tile's row: two vector registers, 128 with AVX-512 (32 registers of 512
    bits: rows of 32 float32), 64 with AVX2's 16 (rows of 16). A tile twice as wide reads each broadcast of
    ``a`` for twice the work."""
    return 2 * vector_bytes(vector_registers)


def tile_for_cpu(sink: UOp, vector_registers: int, lanes: bool = False) -> UOp:
    """A term a store computes again after summing it kept in the output (``store_terms_first``: softmax's
    ``exp``), rows of a sum no output reads at unit stride streamed several a pass (``stream_rows``), rows of an
    elementwise store sharing what they compute from the column alone (``share_rows``), register
    tiles of outputs per pass over a reduction (along a work item's own loop, ``upcast_loops``, else along a
    parallel range, ``upcast_reductions``; sized for ``vector_registers``, rows in ``lanes`` where the renderer
    spells vectors), and MAX/MIN reductions split into independent partials
    (``split_reductions`` of ``EXTREMA``): what a CPU's vector registers and memory streams need."""
    rows, looped = upcast_loops(share_rows(stream_rows(store_terms_first(sink))), tile_row_bytes(vector_registers),
                                lanes=lanes)
    tiled = upcast_reductions(rows, tile_rows(vector_registers), edges=True, row_bytes=tile_row_bytes(vector_registers),
                              lanes=lanes, own_rows=True, tiled=looped)
    return split_reductions(tiled, EXTREMA, tails=True, widths=extrema_partials(vector_registers))


def extrema_partials(vector_registers: int) -> tuple[int, int]:
    """How many partials a MAX or MIN reduction keeps (``split_reductions``), over a constant size and a
    symbolic one. With AVX-512's 32 registers, 64 for both: four registers of 16 float32 whose compare chains
    run side by side (8 partials leave each compare waiting for the last; at 128, LLVM no longer keeps them in
    registers). With AVX2's 16, ``SPLIT_WIDTH`` and ``TAIL_SPLIT_WIDTH``, chosen there."""
    return (64, 64) if vector_registers >= 32 else (SPLIT_WIDTH, TAIL_SPLIT_WIDTH)


TRANSPOSE_BLOCK = 16
"""The side of the square blocks ``block_transposes`` walks: 16 float32 rows and columns are a cache line
each, and whole blocks of a constant side are what LLVM turns into transposes in vector registers. On a
4096x4096 float32 transpose on a Zen 1, blocks of 16 ran in 16 ms over constant sizes, as blocks of 32 did,
compiled in 0.13 s instead of 1.3; over variable sizes in 19 ms, where blocks of 32 took 78 ms and blocks of
8 (or any side cut short to a variable end, a loop of single elements) 42."""


def block_transposes(sink: UOp) -> UOp | None:
    """A nest of parallel ranges that writes along one range and reads along another (a transpose:
    ``out[c, r] = x[r, c]``, however its loops are nested; ``nest_order.parallel_nest``) with those two ranges
    walked in square blocks of ``TRANSPOSE_BLOCK``, each along the rows it reads, so that the lines it
    writes are filled while they are in cache: row by row, each store touches a line of its own and a page of
    its own every block. Its other ranges (a permute's) nest outside the blocks, in the order
    ``parallel_nest`` gives them.

    Every block is whole (``_whole_blocks``) where the kernel reads nothing it writes; otherwise the last
    block along each range is cut short (its ranges end at ``min(block, end - start)``, loops LLVM cannot
    unroll). None for any other kernel: no such nest, no such pair of accesses, or one of the two ends may
    not hold two blocks."""
    nest = parallel_nest(sink)
    if nest is None or nest.loaded is None:
        return None
    pair, block = (nest.stored, nest.loaded), TRANSPOSE_BLOCK
    if any(r.src[0].vmax < 2 * block or r.src[0].vmin < 0 for r in pair):
        return None
    first = free_axis(sink)
    outer = {r: UOp.range(r.src[0], first + n, AxisKind.GLOBAL) for n, r in enumerate(nest.outer)}
    ordered = substitute(anchored_in_order(sink, nest), outer)
    topo = ordered.toposort()
    written = written_memory(topo)
    if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written for u in topo):
        return _cut_short_blocks(ordered, pair, first + len(outer))
    return _whole_blocks(ordered, pair, first + len(outer))


def _whole_blocks(sink: UOp, pair: tuple[UOp, UOp], first: int) -> UOp:
    """``sink`` over whole blocks of the two ranges of ``pair`` (stored, loaded), from axis ``first``, the
    range of more turns outside (``_nesting``), each block along the rows it reads. The last block along each
    range starts a whole block before its end, over elements the block before it also covers: a kernel that
    reads nothing it writes computes and stores the same again, so running some work items twice changes
    nothing, and blocks of constant sides are what LLVM unrolls into vector transposes. (Where the threads'
    split puts the last two outer blocks on two workers, both store the same values to the elements they
    share: a race on no value.) Where either range is under a block at run time, the blocks are cut short
    (``_in_block``) in a second statement over no turns otherwise, in the same outer blocks, which the
    threads split for both."""
    block = TRANSPOSE_BLOCK
    outer, inner = _nesting(pair)
    outer_end, inner_end = outer.src[0], inner.src[0]
    fits = simplify((outer_end // block).minimum(1) * (inner_end // block).minimum(1))  # 1 where both hold one
    outer_block = UOp.range(simplify(_ceil_div(outer_end, block)), first, AxisKind.GLOBAL)
    inner_block = UOp.range(simplify(_ceil_div(inner_end, block) * fits), first + 1, AxisKind.GLOBAL)
    items = {r: UOp.range(block, first + 2 + n, AxisKind.GLOBAL) for n, r in enumerate(pair)}  # loaded innermost
    whole = substitute(sink, {r: (b * block).minimum(r.src[0] - block) + items[r]
                              for r, b in ((outer, outer_block), (inner, inner_block))})
    if fits.op is Ops.CONST:
        return whole
    short_block = UOp.range(simplify(_ceil_div(inner_end, block) * (1 - fits)), first + 4, AxisKind.GLOBAL)
    short = _in_cut_blocks(sink, ((outer, outer_block), (inner, short_block)), first + 5)
    return whole.replace(src=(*whole.src, *(e for e in short.src if e.op in STATEMENTS)))


def _nesting(pair: tuple[UOp, UOp]) -> tuple[UOp, UOp]:
    """The outer and the inner blocks of a transpose's two ranges (stored, loaded): the range of more turns
    outside, the stored one where that is not known (variable ends of one bound). A thin transpose of
    constant sizes (47 rows of 400,000) walked along its 3 blocks of rows outermost would pass over its whole
    output three times, and the threads would split 3 blocks."""
    return (pair[1], pair[0]) if pair[1].src[0].vmax > pair[0].src[0].vmax else pair


def _in_block(end: UOp, b: UOp, block: int) -> int | UOp:
    """How many indices block ``b`` holds: ``block``, or what is left of ``end`` in the last."""
    if end.op is Ops.CONST and int(end.arg) % block == 0:
        return block
    return simplify((end - b * block).minimum(block))


def _cut_short_blocks(sink: UOp, pair: tuple[UOp, UOp], first: int) -> UOp:
    """``sink`` over blocks of the two ranges of ``pair``, from axis ``first``, the last along each cut short
    to the range's end."""
    blocks = [UOp.range(simplify(_ceil_div(r.src[0], TRANSPOSE_BLOCK)), first + n, AxisKind.GLOBAL)
              for n, r in enumerate(pair)]
    return _in_cut_blocks(sink, tuple(zip(pair, blocks, strict=True)), first + 2)


def _in_cut_blocks(sink: UOp, blocked: Sequence[tuple[UOp, UOp]], first: int) -> UOp:
    """``sink`` with each range of ``blocked`` walked in its block range's blocks of ``TRANSPOSE_BLOCK``, the
    last cut short to the range's end (``_in_block``), the items on axes from ``first`` in the order given."""
    items = [UOp.range(_in_block(r.src[0], b, TRANSPOSE_BLOCK), first + n, AxisKind.GLOBAL)
             for n, (r, b) in enumerate(blocked)]
    return substitute(sink, {r: b * TRANSPOSE_BLOCK + item for (r, b), item in zip(blocked, items, strict=True)})
