"""Lowering that makes one pass over a loop do more, for a CPU and a GPU alike: a tile of neighbouring
outputs per pass (``upcast_reductions``: a CPU's register tile, a GPU work item's several outputs), and a
reduction as independent partials that share its loop (``split_reductions``); on a CPU, several rows of a
sum per pass (``stream_rows``: several streams from memory) and of an elementwise store (``share_rows``:
what the rows compute from the column alone, once). What they need to find such a tile (a reduction's
loads, a range read at unit stride) lives here too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence

from svod.codegen.lower import THREAD_MIN_WORK, _gated, most_iterations
from svod.codegen.nest_order import stride, unit_stride
from svod.codegen.ranges import free_axis, live_ranges, range_order
from svod.dtype import dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, UOp, substitute
from svod.ir.ops import ALU, EFFECTS, LANE_OPS, REASSOCIABLE
from svod.ir.uop import memory_of

__all__ = ["EXTREMA", "LANE_WIDTHS", "ROW_WIDTHS", "SPLIT_WIDTH", "TAIL_SPLIT_WIDTH", "UPCAST_WIDTHS", "share_rows",
           "split_reductions", "stream_rows", "upcast_loops",
           "upcast_reductions"]


UPCAST_WIDTHS = (16, 8, 4)
"""How many neighbouring outputs of a reduction one pass over its REDUCE range computes, widest first."""
ROW_WIDTHS = (32, *UPCAST_WIDTHS)
"""The widths a row of a tile sized in bytes (``row_bytes``) may take, widest first."""
LANE_WIDTHS = tuple(reversed(ROW_WIDTHS))
"""The widths a masked tile in lanes may take (``_masked_lanes``), narrowest first: the first that holds the
columns a row's whole tiles leave."""


def upcast_reductions(sink: UOp, rows: int = 4, edges: bool = False, row_bytes: int | None = None,
                      masked: bool = False, lanes: bool = False, own_rows: bool = False,
                      tiled: Collection[UOp] = ()) -> UOp:
    """Compute a tile of ``rows`` x ``W`` outputs of a reduction in one pass over its REDUCE range.

    When a store's reduction reads memory at unit stride along an output range ``j`` with a constant
    end divisible by ``W``, ``j`` becomes ``jo*W + c`` for ``c`` in ``0..W-1``: ``W`` stores whose
    reductions share one loop and whose loads are contiguous in ``c``, which the backend turns into
    vector code (a matmul's inner loop becomes a vector multiply-add over ``W`` columns). Then, where
    another output range ``i`` leaves those vector loads alone (``_row_range``), ``rows`` neighbours
    along ``i`` share each of them: a matmul's rows of ``a``, a convolution's output channels.

    With ``edges``, an end that no ``W`` (or ``rows``) divides, or a symbolic one, is tiled too: the tiles cover
    ``end // W * W`` indices and one more store runs over the ``end % W`` left (``_split``), so an odd column
    count keeps the tiles (a matmul of 850 columns otherwise runs untiled, far slower than one of 848); with
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

    With ``own_rows``, a store that no other range gives rows takes them from its own columns where the kernel,
    tiled, runs on one thread (its iterations, ``most_iterations``, a tile's ``W`` columns one, are
    ``THREAD_MIN_WORK`` at most, as ``lower_cpu.thread_split`` weighs them; ``_own_rows``): a vector-matrix
    product's row is otherwise one chain of dependent multiply-adds, as long as the reduction, for each row of
    columns in turn.
    """
    live = live_ranges(sink)
    iterations = most_iterations(sink) if own_rows and not masked else None
    planned = []
    for effect in sink.src:
        target = _upcast_range(effect, live, _widths(effect, row_bytes), edges or masked, masked=masked) \
            if effect.op is Ops.STORE and effect not in tiled else None
        planned.append(None if target is None else
                       (target, _row_range(effect, live, target[0], rows, edges or masked, masked)))
    entangled = _entangled(sink)
    if entangled and len({plan for e, plan in zip(sink.src, planned, strict=True) if e.op in EFFECTS}) > 1:
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
        one_thread = iterations is not None and iterations // target[1] <= THREAD_MIN_WORK  # as thread_split finds
        spread = _own_rows(effect, *target, rows, laned) if one_thread and row is None and not entangled else None
        if spread is not None:
            effects.extend(spread)
            continue
        columns, column_edge = _split(effect, *target, edge_axes.get(target[0]), laned, own_loop=not entangled)
        if row is None:
            effects.extend(columns)
            edge_effects.extend([column_edge] if column_edge is not None else [])
            continue
        for copy in [*columns, *([column_edge] if column_edge is not None else [])]:
            tile, row_edge = _split(copy, row, rows, edge_axes.get(row))
            (edge_effects if copy is column_edge else effects).extend(tile)
            edge_effects.extend([row_edge] if row_edge is not None else [])
    return sink.replace(src=(*effects, *edge_effects))


def _own_rows(effect: UOp, r: UOp, width: int, rows: int, lanes: bool) -> list[UOp] | None:
    """``effect`` over range ``r`` as ``k * width`` copies over ``ro*k*width + c`` (``k`` rows of ``width``
    columns, ``k`` the most, up to ``rows``, that divides the tiles of a constant end): each row's reduction an
    independent chain that shares the loop and the loads that do not depend on ``r`` (a vector-matrix
    product's ``x[k]``); each output is still reduced in its order. None where no two rows divide the end."""
    end = r.src[0]
    if end.op is not Ops.CONST or int(end.arg) % width:
        return None
    tiles = int(end.arg) // width
    count = next((k for k in range(min(rows, tiles), 1, -1) if tiles % k == 0), None)
    if count is None:
        return None
    span = count * width
    outer = UOp.range(int(end.arg) // span, r.arg[0], r.arg[1])
    return [_moved(effect, r, outer * span + k * width + c if k else outer * span + c, outer)
            for k in range(count) for c in _columns(width, lanes)]


def upcast_loops(sink: UOp, row_bytes: int | None = None, lanes: bool = False) -> tuple[UOp, frozenset[UOp]]:
    """A tile of ``W`` outputs of a reduction per pass over it along a work item's own sequential loop, as
    ``upcast_reductions`` tiles a parallel range on a CPU (``row_bytes`` and ``lanes`` as there; an end no ``W``
    divides always takes an edge). A ``prange`` whose work item runs a vector-matrix product
    (covariance's ``data[:, i] @ data[:, i:M]``) otherwise sums each output down a strided column, one output
    after another; tiled, each turn of the sum reads ``W`` neighbours in one row. Taken only where the loop's
    turns may run in any order (``_independent_loop``); the tiles, and the store over the outputs they leave,
    stand where the loop stood, among the work item's other effects in their order, so no rows of another
    range are added (they would split the work item's effects apart). Returns the kernel and the effects that
    are its tiles."""
    live = live_ranges(sink)
    effects = [e for e in sink.src if e.op in EFFECTS]
    found: dict[UOp, tuple[UOp, int]] = {}
    for effect in effects:
        target = _upcast_range(effect, live, _widths(effect, row_bytes), edges=True, kind=AxisKind.LOOP) \
            if effect.op is Ops.STORE else None
        if target is not None and _independent_loop(effect, target[0], effects, live):
            found[effect] = target
    if not found:
        return sink, frozenset()
    split = [r for r, width in found.values() if not _divides(width, r.src[0])]
    before = sink.src
    sink, moved, edge_axes = _room_after(sink, split)
    out: list[UOp] = []
    made: list[UOp] = []
    for old, effect in zip(before, sink.src, strict=True):
        if old not in found:
            out.append(effect)
            continue
        r, width = moved[found[old][0]], found[old][1]
        tiles, edge = _split(effect, r, width, edge_axes.get(r), lanes and _lanes_fit(effect, r), own_loop=True)
        pieces = [*tiles, *([edge] if edge is not None else [])]
        out += pieces
        made += pieces
    return sink.replace(src=tuple(out)), frozenset(made)


def _independent_loop(store: UOp, r: UOp, effects: Sequence[UOp], live: Mapping[UOp, frozenset[UOp]]) -> bool:
    """Whether the turns of sequential loop ``r`` around ``store`` may run in any order, or several at once:
    ``r`` is the innermost loop of the store and of no other effect, no state the store reads through names it
    (it is the store's turn, not a position), the store writes a buffer, a distinct element each turn (at unit
    stride along ``r``), and reads nothing of that buffer (no turn sees another's store)."""
    target = store.src[0]
    memory = memory_of(target.src[0])
    if memory.op is not Ops.PARAM or not unit_stride(target.src[1], r, ascending=True):
        return False
    if any(r in live[e] for e in effects if e is not store):
        return False
    if any(o is not r and (range_order(o) > range_order(r) or r in o.src[0].toposort()) for o in live[store]):
        return False
    nodes = store.toposort()
    return not any(u.op is Ops.AFTER and r in u.src for u in nodes) and \
        not any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) is memory for u in nodes)


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


def _split(effect: UOp, r: UOp, width: int, axis: int | None, lanes: bool = False,
           own_loop: bool = False) -> tuple[list[UOp], UOp | None]:
    """``effect`` over range ``r`` as ``width`` copies over ``ro*width + c`` (``ro`` below ``end // width``),
    or with ``lanes`` one copy over ``ro*width + LANE``, and, unless ``width`` divides a constant ``end``, one
    copy over the ``end % width`` indices left: with ``lanes``, one more tile in lanes masked past the end
    (``_masked_lanes``; for a constant end, the narrowest that holds the indices left; for a variable one,
    with ``own_loop``, in a range of one turn where indices are left and none where not: effects that must run
    in each work item's order keep the tile unlooped, ``_entangled``); else on a range of ``end % width``. The
    range is on axis ``axis``, free right after ``r``'s (``_room_after``): never the same node as ``ro``, even
    where both ends are equal."""
    end = r.src[0]
    tiles = _tiles(effect, r, width, lanes)
    if _divides(width, end):
        return tiles, None
    if lanes and (end.op is Ops.CONST or not own_loop):
        held = width if end.op is not Ops.CONST else next(w for w in LANE_WIDTHS if w >= int(end.arg) % width)
        return tiles, _masked_lanes(effect, r, end // width * width, held)
    if axis is None:
        raise GraphError(f"no axis was set aside for the indices range {r.arg[0]}'s tiles leave", stage="lower",
                         value=r.arg)
    if lanes:  # a tile where indices are left: a loop of one turn, or none where the tiles cover the end
        edge = UOp.range((end % width).minimum(1), axis, r.arg[1])
        return tiles, _masked_lanes(effect, r, (end // width + edge) * width, width, edge)
    left, whole = (int(end.arg) % width, int(end.arg) // width) if end.op is Ops.CONST else (end % width, end // width)
    edge = UOp.range(left, axis, r.arg[1])
    return tiles, _moved(effect, r, edge + whole * width, edge)


def _masked_lanes(effect: UOp, r: UOp, start: UOp, width: int, loop: UOp | None = None) -> UOp:
    """``effect`` at ``start + LANE`` (``width`` lanes) in place of range ``r`` (run over range ``loop``, where
    ``start`` has one), each lane's store, and its loads that differ by lane, gated by ``start + LANE < end``:
    the columns a row's whole tiles leave, as one tile whose lanes past the end read and write nothing (a
    masked vector load and store). A range of scalar columns there cost a matmul with a few columns left a
    large part of its rate, which one masked tile in lanes almost wins back. Where no column is left, a tile
    run all the same with every lane off is work for nothing (a symbolic batched matmul's, attention's), so the
    tile runs only where a column is left."""
    (lane,) = _columns(width, lanes=True)
    value = start + lane
    if loop is not None:
        return _gated(_moved(effect, r, value, loop), value.lt(r.src[0]), depending_on=lane)
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
    if store.op is not Ops.STORE or target.arg is not None or not unit_stride(target.src[1], r, ascending=True) \
            or (len(target.src) == 3 and r in target.src[2].toposort()):
        return False
    laned = {r}
    for u in store.toposort():
        if u is r or not any(s in laned for s in u.src):
            continue
        laned.add(u)
        if not _spelled_on_vectors(u):
            return False
    return True


def _spelled_on_vectors(u: UOp, memories: tuple[Ops, ...] = (Ops.PARAM,)) -> bool:
    """Whether a renderer that spells vectors spells ``u`` on lanes: one of ``LANE_OPS`` on numbers (no bool
    or float16 in memory, no float16 at all), a division only by a constant other than 0 and -1, an access
    without a record of a check into one of ``memories`` (buffers; a work item's registers too, where they
    become vectors)."""
    if u.op not in LANE_OPS or dtypes.float16 in (u.dtype, *(s.dtype for s in u.src)):
        return False
    if u.op in (Ops.IDIV, Ops.MOD):
        return u.src[1].op is Ops.CONST and u.src[1].arg not in (0, -1)
    if u.op is Ops.INDEX:
        return u.arg is None and memory_of(u.src[0]).op in memories
    return not ((u.op is Ops.LOAD and u.dtype == dtypes.bool) or (u.op is Ops.STORE and u.src[1].dtype == dtypes.bool))


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


SPLIT_WIDTH = 8
"""How many partial results a split reduction keeps in one pass (a vector register of float32 on AVX2)."""
TAIL_SPLIT_WIDTH = 32
"""How many a reduction over a symbolic size keeps (``split_reductions``' ``tails``): four AVX2 registers of
float32, whose compare chains run side by side: in 8 partials (one register) each compare waits for the last.
Over a constant size, ``SPLIT_WIDTH`` stays faster: LLVM unrolls the constant loop and regroups 32 partials
badly."""
EXTREMA = (Ops.MAX, Ops.MIN)
"""The reductions a split leaves bit for bit the same: MAX and MIN are exactly associative and commutative
(svod's order ignores NaN and puts +0 above -0)."""


def split_reductions(sink: UOp, ops: tuple[Ops, ...], tails: bool = False, widths: tuple[int, int] = (
        SPLIT_WIDTH, TAIL_SPLIT_WIDTH)) -> UOp:
    """A reduction by one of ``ops`` over one range of constant size ``n`` (a multiple of ``W``, the first of
    ``widths``, at least twice it) as ``W`` reductions over ``r*W + c`` that share one loop, combined
    pairwise after it. Each step of one running reduction waits for the last; independent partials run
    side by side and their loads are contiguous, so the backend vectorises them. With ``tails``, a symbolic
    size is split too, in the second of ``widths`` partials, the ``n % W`` elements they leave reduced by a
    loop of their own (a softmax's row maximum over a symbolic row ran as one chain of dependent compares). For
    ``EXTREMA`` the result is the same bits; a float sum is added in another order (as any parallel sum is). Only a
    reduction with none nested in it is split (``_nested_reductions``): an outer one would copy each inner
    one ``W`` times, and a nest of them grow as ``W`` to the power of its depth (a fused attention's 320
    accumulators). Reductions that share a loop (a register tile's rows) share its ``W`` partials
    (``_partials``)."""

    replaced: dict[UOp, UOp] = {}
    nested = _nested_reductions(sink)
    topo = sink.toposort()
    split = [u for u in topo if u.op is Ops.REDUCE and u.arg in ops and len(u.src) == 2 and u not in nested]
    sharing = Counter(u.src[1] for u in split)
    free = free_axis(sink)
    tails_of: dict[tuple[UOp, int], UOp] = {}
    for node in split:  # in order: a reduction it uses first (softmax's maximum in its sum), built split
        r, value = node.src[1], substitute(node.src[0], replaced)
        size = r.src[0]
        first, symbolic = (_partials(w, sharing[r]) for w in widths)
        whole = size.op is Ops.CONST and first > 1 and not size.arg % first and size.arg >= 2 * first
        if not whole and not (tails and size.op is not Ops.CONST and symbolic > 1 and size.vmax >= 2 * symbolic):
            continue
        width = first if whole else symbolic
        outer = UOp.range(size.arg // width if whole else size // width, r.arg[0], r.arg[1])
        parts = [substitute(value, {r: outer * width + c}).reduce(outer, op=node.arg) for c in range(width)]
        if not whole:
            if (r, width) not in tails_of:  # the reductions that shared a loop share their tail's
                tails_of[(r, width)] = UOp.range(size % width, free, r.arg[1])
                free += 1
            tail = tails_of[(r, width)]
            parts.append(substitute(value, {r: size // width * width + tail}).reduce(tail, op=node.arg))
        while len(parts) > 1:
            odd = parts[-1:] if len(parts) % 2 else []  # an odd one out (the tail's) joins the next round
            parts = [*(a.alu(node.arg, b) for a, b in zip(parts[:-1:2], parts[1::2], strict=True)), *odd]
        replaced[node] = parts[0]
    return substitute(sink, replaced)


def _partials(width: int, sharing: int) -> int:
    """The partials each of ``sharing`` reductions over one loop keeps, so that together they keep at most
    ``width``: a power of two, or 1 (not split). The rows of a register tile are already independent chains
    of compares; each split in ``width`` more (16 rows of a gather's maximum in 65 partials each, 1,040
    copies of its body) no longer fit in registers, and took minutes to lower."""
    share = max(width // sharing, 1)
    return 1 << share.bit_length() - 1


STREAM_ROWS = 4
"""How many rows of a streamed sum (``stream_rows``) one pass reads: a matrix-vector product's rows read
side by side keep more of memory's streams busy than one at a time, and the gain ends at four."""
STREAMED_DTYPES = (dtypes.float32, dtypes.float64)
"""The sums ``stream_rows`` takes: float sums, the ones whose order a backend keeps unless told otherwise."""


def stream_rows(sink: UOp, rows: int = STREAM_ROWS) -> UOp:
    """A sum no output range reads at unit stride, but its own range does (a matrix-vector product's ``out[i]
    = sum_k a[i, k] * x[k]``, a row's sum), computed for ``rows`` neighbouring outputs along a range such a
    load depends on in one pass over the sum (``_split``, as a register tile's rows), each sum marked
    ``REASSOCIABLE``: ``rows`` streams read from memory at once, where one row a pass read one, the loads the
    rows share (``x[k]``) made once, and each sum vectorised along the loop by the backend as a loop's one
    sum is. (The backend's vectoriser takes such a loop where each sum may be reassociated; lowering, not the
    renderer, tells these rows from a register tile's, whose sums keep the reference's order.)"""
    return _rows_per_pass(sink, rows, lambda store, live: _streamed_row(store, live, rows), _reassociable)


def _reassociable(store: UOp) -> UOp:
    """``store`` with its one sum marked ``REASSOCIABLE``."""
    reduce = next(u for u in store.src[1].toposort() if u.op is Ops.REDUCE)
    return substitute(store, {reduce: reduce.replace(arg=(Ops.ADD, REASSOCIABLE))})


def _rows_per_pass(sink: UOp, rows: int, row_of: Callable[[UOp, Mapping[UOp, frozenset[UOp]]], UOp | None],
                   prepare: Callable[[UOp], UOp] | None = None) -> UOp:
    """``sink`` with each store that ``row_of`` gives a range split into ``rows`` copies along it (``_split``:
    tiles, and an edge store over the rows they leave), ``prepare``d first; as it is where no store is, where
    its effects must run in each work item's order (``_entangled``), or where a split would leave another
    effect of the rows' work items behind (``_left_behind``)."""
    live = live_ranges(sink)
    found = {e: row for e in sink.src if e.op is Ops.STORE and (row := row_of(e, live)) is not None}
    if not found or _entangled(sink) or _left_behind(sink, found, live):
        return sink
    split = [r for r in dict.fromkeys(found.values()) if not _divides(rows, r.src[0])]
    before = sink.src
    sink, moved, edge_axes = _room_after(sink, split)
    out = []
    for old, effect in zip(before, sink.src, strict=True):
        if old not in found:
            out.append(effect)
            continue
        row = moved[found[old]]
        tiles, edge = _split(effect if prepare is None else prepare(effect), row, rows, edge_axes.get(row))
        out += [*tiles, *([edge] if edge is not None else [])]
    return sink.replace(src=tuple(out))


def _left_behind(sink: UOp, found: Mapping[UOp, UOp], live: Mapping[UOp, frozenset[UOp]]) -> bool:
    """Whether an effect runs over a range that ``found`` splits some store along (by store) without being split
    along it too: the split stores' rows become a range of their own, and the effect stays on the old one, no
    longer in their work items. ``lower_cpu.thread_split`` spreads one of the two ranges over the threads and
    runs the other on one thread (a layer norm's adjoint, whose elementwise store and row sum ran in one pass
    over each row, ran every row's sum on one thread)."""
    return any(row in live[effect] and found.get(effect) is not row
               for row in dict.fromkeys(found.values()) for effect in sink.src if effect.op in EFFECTS)


def _streamed_row(store: UOp, live: Mapping[UOp, frozenset[UOp]], rows: int) -> UOp | None:
    """The output range ``stream_rows`` takes ``rows`` of per pass for ``store``, if it takes any: its value
    has one sum (ADD, of a float ``STREAMED_DTYPES``, over one range, with no reduction inside), on which every
    output range of the store depends, none read at unit stride by its loads that turn with the sum (a row's
    mean, read once per row, is no vector load); a load reads the sum's range at
    unit stride and depends on the row (innermost first), which tiles of ``rows`` fit (``_room``)."""
    reduces = [u for u in store.src[1].toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD or reduces[0].dtype not in STREAMED_DTYPES \
            or len(reduces[0].src) != 2:
        return None  # the value's one reduction: none is nested in it
    reduce, k = reduces[0], reduces[0].src[1]
    outputs = _upcastable(store, live, edges=True)
    if not outputs or any(r not in live[reduce] for r in live[store]):
        return None
    loads = [u for u in reduce.src[0].toposort() if u.op is Ops.LOAD]
    turned = [u for u in loads if _turns(u, k)]
    if any(unit_stride(load.src[0].src[1], r) for load in loads for r in outputs if not _strided_only(turned, r)):
        return None
    streamed = [load for load in loads if unit_stride(load.src[0].src[1], k)]
    return next((r for r in outputs if any(r in load.toposort() for load in streamed)
                 and (_divides(rows, r.src[0]) or _room(r.src[0], rows, masked=False))), None)


SHARED_ROWS = 8
"""How many rows of an elementwise store ``share_rows`` computes per pass over its columns: each row more
shares the column's work once more (a bilinear resize's source column and weights), until past eight the
rows' loads and weights no longer fit the registers."""
COLUMN_WORK = 8
"""The fewest operations on a column alone that repay sharing them between rows (``share_rows``): a bilinear
resize's source column and weights takes 12 (a division, conversions, clamps)."""


def share_rows(sink: UOp, rows: int = SHARED_ROWS) -> UOp:
    """An elementwise store over rows and columns whose value computes much from the column alone (at least
    ``COLUMN_WORK`` operations that depend on its innermost range and not on an outer one: a bilinear
    resize's source column and weights), computed for ``rows`` neighbouring rows per pass (``_split``): the
    rows' copies are one loop over the columns, and what does not depend on the row is the same node in
    each, computed once for ``rows`` outputs where it was computed for each."""
    return _rows_per_pass(sink, rows, lambda store, live: _shared_row(store, live, rows))


def _shared_row(store: UOp, live: Mapping[UOp, frozenset[UOp]], rows: int) -> UOp | None:
    """The range ``share_rows`` takes ``rows`` of per pass for ``store``, if any: the store runs in parallel
    ranges only and reduces nothing, and the outer range next to its innermost leaves at least
    ``COLUMN_WORK`` of its value's operations on the innermost alone, and takes tiles of ``rows``
    (``_room``)."""
    ranges = sorted(live[store], key=range_order)
    if len(ranges) < 2 or any(r.arg[1] is not AxisKind.GLOBAL for r in ranges) \
            or any(u.op is Ops.REDUCE for u in store.toposort()):
        return None
    column, row = ranges[-1], ranges[-2]
    work = sum(1 for u in store.src[1].toposort() if u.op in ALU and column in live[u] and row not in live[u])
    if work < COLUMN_WORK or not (_divides(rows, row.src[0]) or _room(row.src[0], rows, masked=False)):
        return None
    return row


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


def _turned_loads(store: UOp) -> list[UOp]:
    """The loads of ``store``'s reductions that read another element each turn (``_turns``)."""
    return [u for red in store.src[1].toposort() if red.op is Ops.REDUCE for u in red.src[0].toposort()
            if u.op is Ops.LOAD and any(_turns(u, r) for r in red.src[1:])]


def _turns(load: UOp, r: UOp) -> bool:
    """Whether ``load``'s index depends on range ``r``: which element it reads, not the memory state it reads it
    in (a load after a store in ``r``'s loop reads the state that turn's store left, one element every turn)."""
    return any(r in part.toposort() for part in load.src[0].src[1:])


def _strided_only(loads: list[UOp], r: UOp) -> bool:
    """Whether the loads that turn with a sum stride along output range ``r`` by a known step other than one,
    and none at unit stride: a load the turns share (a row's mean in a sum over the row's columns) read at unit
    stride along ``r`` gives the sum's loop no vector loads, and lanes along ``r`` would make the loads that turn
    strided gathers."""
    found = [stride(load.src[0].src[1], r) for load in loads if r in load.src[0].toposort()]
    return bool(found) and not any(unit_stride(load.src[0].src[1], r) for load in loads) \
        and all(f is not None and f.terms != {(): 1} for f in found)


def _upcastable(store: UOp, live: Mapping[UOp, frozenset[UOp]], exclude: UOp | None = None,
                edges: bool = False, kind: AxisKind = AxisKind.GLOBAL) -> list[UOp]:
    """Output ranges of ``store`` of ``kind`` with a constant end (any end, with ``edges``), innermost first."""
    return sorted((r for r in live[store] if r.arg[1] is kind and (edges or r.src[0].op is Ops.CONST)
                   and r is not exclude), key=range_order, reverse=True)


def _upcast_range(store: UOp, live: Mapping[UOp, frozenset[UOp]], widths: tuple[int, ...],
                  edges: bool = False, masked: bool = False,
                  kind: AxisKind = AxisKind.GLOBAL) -> tuple[UOp, int] | None:
    """An output range the reduction's loads read at unit stride, and the widest ``W`` of ``widths`` that
    divides its end and is smaller; with ``edges``, failing that, the widest smaller than its end (its largest
    value, if symbolic: ``_room``), the rest left to an edge store (``_split``). With ``masked`` (a GPU's
    tiles, ``_masked``), failing a range read at unit stride, one that some loads do not depend on: each of
    those then serves ``W`` outputs (attention's scores, ``q[i, d] * k[j, d]``)."""
    loads = _reduction_loads(store)
    ranges = _upcastable(store, live, edges=edges, kind=kind) if loads else []
    turned = _turned_loads(store)
    candidates = [j for j in ranges if any(unit_stride(load.src[0].src[1], j) for load in loads)
                  and not _strided_only(turned, j)]
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


def _row_range(store: UOp, live: Mapping[UOp, frozenset[UOp]], upcast: UOp, rows: int,
               edges: bool = False, masked: bool = False) -> UOp | None:
    """Another output range, whose end ``rows`` divides (or, with ``edges``, one ``_room`` gives such tiles),
    that some load of the reduction depends on and its vector loads (unit stride along ``upcast``) do not:
    each vector load then serves every row of the tile, and only the loads that differ by row are repeated
    (a matmul's ``a[i, r]``, one broadcast per row)."""
    loads = _reduction_loads(store)
    vector = [load for load in loads if unit_stride(load.src[0].src[1], upcast)] or \
        [load for load in loads if upcast in load.toposort()]  # a strided tile's (``_upcast_range``)
    for r in _upcastable(store, live, upcast, edges):
        end = r.src[0]
        tiles = (end.op is Ops.CONST and int(end.arg) % rows == 0 and int(end.arg) > rows) or \
            (edges and _room(end, rows, masked))
        if tiles and any(r in load.toposort() for load in loads) \
                and not any(r in load.toposort() for load in vector):
            return r
    return None
