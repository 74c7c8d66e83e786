"""Values a sequential loop carries from one turn to the next.

A turn that reads back what the turn before it stored (a running sum written through memory: ``out[r, j] =
out[r, j - 1] + x[r, j]``) waits on that store. Where the backend cannot tell the two addresses are one
element (a symbolic row length), it reads the element back from memory, a store's round trip on every turn.
``forward_stored`` keeps the stored value in a register instead, as the Python front end keeps a carried
local (``running += x[r, j]``). One such chain is a row's whole latency; ``carry_rows`` runs several work
items' chains side by side on a CPU, each in its own order, so their turns overlap.
"""

from __future__ import annotations

from collections.abc import Mapping

from svod.codegen.indexing import decided, facts_from_guard, to_poly
from svod.codegen.nest_order import unit_stride
from svod.codegen.ranges import live_ranges, nested
from svod.codegen.upcast import _divides, _room, _room_after, _spelled_on_vectors, _split
from svod.dtype import dtypes
from svod.ir import AxisKind, Ops, UOp, replacements_of, substitute
from svod.ir.ops import EFFECTS, STATEMENTS
from svod.ir.uop import exits, is_state, memory_of, pointee

__all__ = ["CARRIED_ROWS", "LANE_SPANS", "carried_rows", "carry_rows", "forward_stored"]


def forward_stored(sink: UOp) -> UOp | None:
    """``sink`` with each store whose value reads the element the store wrote the turn before
    (``_read_back``) carrying that value in a register (``_carried``); None where no store does, or where
    the kernel exits a loop early, reduces or updates atomically (a kernel with a register runs each work
    item as written: the passes that tile reductions and privatise atomics would leave it)."""
    topo = sink.toposort()
    if exits(sink) or any(u.op in (Ops.REDUCE, Ops.ATOMIC) for u in topo):
        return None
    live = live_ranges(sink)
    order = {u: n for n, u in enumerate(topo)}
    slot = 1 + max((u.arg for u in topo if u.op is Ops.DEFINE_REG), default=-1)
    statements: list[UOp] = []
    for number, statement in enumerate(sink.src):
        loads = _read_back(statement, sink, number, live, order)
        if loads:
            statements += _carried(statement, loads, slot, nested(live[statement]))
            slot += 1
        else:
            statements.append(statement)
    return None if len(statements) == len(sink.src) else sink.replace(src=tuple(statements))


def _read_back(store: UOp, sink: UOp, number: int, live: Mapping[UOp, frozenset[UOp]],
               order: dict[UOp, int]) -> list[UOp]:
    """The loads of ``store``'s value (statement ``number`` of ``sink``) that read, on every turn of its
    innermost loop but the first, the element the store wrote on the turn before: their index at the loop's
    index ``j`` is the store's at ``j - 1`` wherever ``j >= 1``, for every value of everything else
    (``indexing.decided``: ``max(j - 1, 0)`` there is ``j - 1``). The store is ungated, the only effect on its
    buffer (a PARAM, not bool), innermost in a sequential loop that no statement before it shares; neither
    index reads memory. The race check proved that no other work item writes what a work item reads, so the
    element still holds that value."""
    if store.op is not Ops.STORE or len(store.src[0].src) != 2:
        return []
    buffer, stored = store.src[0].src
    ranges = nested(live[store])
    if buffer.op is not Ops.PARAM or pointee(buffer) == dtypes.bool or stored.reads_memory or not ranges \
            or ranges[-1].arg[1] is not AxisKind.LOOP:
        return []
    loop = ranges[-1]
    if sum(1 for e in sink.src if e.op in EFFECTS and memory_of(e.src[0].src[0]) is buffer) != 1 \
            or any(loop in live[s] for s in sink.src[:number] if s.op in STATEMENTS):
        return []
    later = facts_from_guard(UOp.index_const(0).lt(loop) & loop.lt(loop.src[0]))  # the turns j >= 1
    before = to_poly(decided(substitute(stored, {loop: loop - 1}), later, order), later.guarded)
    return [u for u in store.src[1].toposort() if u.op is Ops.LOAD and u.src[0].src[0] is buffer
            and len(u.src[0].src) == 2 and not u.src[0].src[1].reads_memory
            and not (to_poly(decided(u.src[0].src[1], later, order), later.guarded) - before).terms]


def _carried(store: UOp, loads: list[UOp], slot: int, ranges: tuple[UOp, ...]) -> list[UOp]:
    """``store`` as three statements, as the front end writes a carried local: a register of each work item
    set before its loop, the store, and the stored value kept in the register. ``loads`` read the register
    on every turn but the first (which reads memory, as before). Every load of the buffer reads its state
    before this turn's store, so the value the register keeps is the one stored, not one read again after."""
    loop, loops = ranges[-1], [r for r in ranges if r.arg[1] is AxisKind.LOOP]
    buffer = store.src[0].src[0]
    dtype = pointee(buffer)
    held = buffer.state(0, *loops)

    def through_held(index: UOp) -> UOp:  # its index and gate as they were
        return index.replace(src=(held, *index.src[1:]))

    kept = UOp.register(slot, dtype, *(r for r in ranges if r.arg[1] is AxisKind.GLOBAL))[UOp.index_const(0)]
    reads = replacements_of(store.src[1], lambda u: through_held(u.src[0]).load()
                            if u.op is Ops.LOAD and u.src[0].src[0] is buffer else None)
    later = UOp.index_const(0).lt(loop)
    value = substitute(store.src[1], {**reads, **{u: later.where(kept.load(), reads[u]) for u in loads}})
    first = kept.store(UOp.const(dtype, 0), *ranges[:-1])  # in the turn of any loop around it: no loop splits
    return [first, store.replace(src=(through_held(store.src[0]), value, *store.src[2:])), kept.store(value, *ranges)]


CARRIED_ROWS = 8
"""The most work items' chains ``carry_rows`` runs side by side in one loop: an add waits 3 cycles for the one
before it and two can start a cycle, so six to eight chains keep a core's adders busy (a cumsum's rows ran
fastest eight a pass)."""


def carried_rows(registers: int, vector_registers: int) -> int:
    """How many work items' chains run side by side where each carries ``registers`` registers: up to
    ``CARRIED_ROWS``, their registers at most half the CPU's (the rest hold what a turn computes)."""
    return min(CARRIED_ROWS, vector_registers // (2 * registers))


def carry_rows(sink: UOp, vector_registers: int, vector_bytes: int | None = None) -> UOp | None:
    """A kernel whose work items carry registers through a sequential loop, with neighbouring work items along
    the innermost parallel range every statement runs in (``_carrying_row``) run together: in vector lanes
    where the renderer spells them (``vector_bytes``, the bytes of a vector register) and the work items store
    only at neighbouring elements along it (``_lane_width``); else ``carried_rows`` of them in one pass, each
    statement as that many copies, one per work item, the copies of a statement next to each other, and after
    them the copies over the work items the passes leave (``upcast._split``). Each copy has registers of its
    own (``_own_registers``). Within a work item, statements keep their order; the race check proved work
    items apart, so interleaving them changes nothing they compute. None where it does not apply."""
    registers = [u for u in sink.toposort() if u.op is Ops.DEFINE_REG]
    row = _carrying_row(sink, registers) if registers else None
    if row is None:
        return None
    effects = [s for s in sink.src if s.op in EFFECTS]
    if all(unit_stride(e.src[0].src[1], row, ascending=True) for e in effects
           if memory_of(e.src[0].src[0]).op is Ops.PARAM):
        width = _lane_width(sink, row, registers, vector_registers, vector_bytes) if vector_bytes else 0
        return _together(sink, row, registers, width, lanes=True)
    if any(len(e.src[0].src) != 2 for e in effects):
        return None  # a gate around a loop: the copies' gates would run their loop apart
    return _together(sink, row, registers, carried_rows(len(registers), vector_registers), lanes=False)


def _together(sink: UOp, row: UOp, registers: list[UOp], width: int, lanes: bool) -> UOp | None:
    """``sink`` with ``width`` work items along ``row`` a pass: each statement's tiles (``upcast._split``: in
    ``lanes``, one over ``ro*W + LANE``; else ``width`` copies next to each other), then its tile over the work
    items the passes leave, each tile with registers of its own (``_lane_registers``, ``_own_registers``).
    None where ``row``'s end takes no such tiles (``upcast._room``)."""
    if width < 2 or not (_divides(width, row.src[0]) or _room(row.src[0], width, masked=False)):
        return None
    axis = None
    if not lanes and not _divides(width, row.src[0]):  # the copies leave a loop of their own
        sink, moved, axes = _room_after(sink, [row])
        row, axis = moved[row], axes[moved[row]]
    own = _lane_registers if lanes else _own_registers
    stride = 1 + max(u.arg for u in registers)
    tiled: list[UOp] = []
    edges: list[UOp] = []
    for statement in (s for s in sink.src if s.op in EFFECTS):
        tiles, edge = _split(statement, row, width, axis, lanes)
        tiled += [own(tile, copy, stride) for copy, tile in enumerate(tiles)]
        edges += [] if edge is None else [own(edge, len(tiles), stride)]
    edges = _after_the_tiles(edges, [s for s in sink.src if s.op in EFFECTS])
    return sink.replace(src=(*tiled, *edges, *(s for s in sink.src if s.op not in EFFECTS)))


def _after_the_tiles(edges: list[UOp], statements: list[UOp]) -> list[UOp]:
    """The edge's statements, which run after every tile's, reading and writing each buffer through memory
    states numbered past the ``statements``' effects on it (a state counts the effects before it). Sharing the
    tiles' states, an edge's read of what its own first store wrote was to be made before a tile's last store
    on that buffer, which runs before that first store: no order has both."""
    writes: dict[UOp, int] = {}
    for statement in statements:
        memory = memory_of(statement.src[0].src[0])
        writes[memory] = writes.get(memory, 0) + 1
    states = {u: u.replace(arg=u.arg + writes[u.src[0]]) for edge in edges for u in edge.toposort()
              if is_state(u) and u.src[0] in writes}
    return [substitute(edge, states) for edge in edges] if states else edges


def _carrying_row(sink: UOp, registers: list[UOp]) -> UOp | None:
    """The range ``carry_rows`` takes work items of together, if any: the innermost GLOBAL range that every
    statement runs in and each of ``registers`` is one per work item of, in a kernel with a sequential loop,
    without early exits, reductions or atomic updates, that sets no other range's end."""
    topo = sink.toposort()
    if exits(sink) or not any(u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP for u in topo) \
            or any(u.op in (Ops.REDUCE, Ops.ATOMIC, Ops.DEFINE_LOCAL) for u in topo):
        return None
    effects = [s for s in sink.src if s.op in EFFECTS]
    live = live_ranges(sink)
    shared = frozenset.intersection(*(live[e] for e in effects))
    rows_of = [r for r in nested(shared) if r.arg[1] is AxisKind.GLOBAL and all(r in g.src for g in registers)]
    if not rows_of:
        return None
    row = rows_of[-1]
    if any(row in r.src[0].toposort() for r in topo if r.op is Ops.RANGE and r is not row):
        return None  # a loop whose turns differ by work item: the copies' loops would be loops apart
    return row


LANE_SPANS = (4, 2, 1)
"""How many vector registers a register of work items in lanes spans (``carry_rows``), widest first: the
widest whose registers take at most half the CPU's. A turn of Mandelbrot's loop is a chain of four dependent
float64 operations; lanes in more registers run more chains side by side, up to four: eight or sixteen ran
slower."""


def _lane_width(sink: UOp, row: UOp, registers: list[UOp], vector_registers: int, vector_bytes: int) -> int:
    """How many neighbouring work items along ``row`` run in vector lanes (``carry_rows``): the widest value a
    register holds or a work item stores, in as many vector registers as ``LANE_SPANS`` lets each register
    span. Each register is then a vector, one value a lane, a work item's loop runs once for them all, and a
    test that differs by lane masks the stores it gates instead of branching. 0 where a value that differs by
    lane is one the renderer cannot spell on vectors (``_lanes_through``)."""
    stored = [e.src[1].dtype for e in sink.src if e.op in EFFECTS]
    widest = max(d.itemsize for d in (*stored, *(pointee(g) for g in registers)))
    span = next((s for s in LANE_SPANS if s * len(registers) <= vector_registers // 2), 0)
    return span * vector_bytes // widest if _lanes_through(sink, row) else 0


def _lanes_through(sink: UOp, row: UOp) -> bool:
    """Whether, with ``row`` in lanes, every value that differs by lane (that depends on ``row``, or loads a
    register such a value was stored into) is one the LLVM renderer spells on vectors: ``LANE_OPS`` on numbers
    other than bool and float16 in memory, division only by a constant other than 0 and -1, accesses of
    buffers and registers without a record of a check, and a buffer's store gated alike in every lane. A loop
    whose turns differ by lane, or a work item's IF, is not."""
    topo = sink.toposort()
    if any(u.op is Ops.IF for u in topo):
        return False
    laned, registers = {row}, set()
    changed = True
    while changed:
        changed = False
        for u in topo:
            if u in laned or u.op in (Ops.DEFINE_REG, Ops.AFTER, Ops.SINK):
                continue
            if any(s in laned for s in u.src) or (u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in registers):
                laned.add(u)
                changed = True
                if u.op is Ops.STORE and memory_of(u.src[0].src[0]).op is Ops.DEFINE_REG:
                    registers.add(memory_of(u.src[0].src[0]))
    return all(_spelled_on_vectors(u, (Ops.PARAM, Ops.DEFINE_REG)) and not _gated_by_lane(u, laned)
               for u in laned - {row})


def _gated_by_lane(u: UOp, laned: set[UOp]) -> bool:
    """Whether ``u`` stores to a buffer under a gate that differs by lane."""
    return u.op is Ops.STORE and memory_of(u.src[0].src[0]).op is Ops.PARAM and len(u.src[0].src) == 3 \
        and u.src[0].src[2] in laned


def _lane_registers(statement: UOp, copy: int, stride: int) -> UOp:
    """``statement``, copy ``copy`` of a work item's over work items in lanes, with registers of its own: each
    register of its work items becomes one of the ranges that number them now and of its ``LANE`` (a vector,
    one value a lane), in slot ``slot + copy*stride``. The LANE among its sources makes what reads it differ
    by lane, as a value computed from the LANE does: a test of it masks the stores it gates (no IF can hold a
    test of every lane)."""
    lane = next(u for u in statement.toposort() if u.op is Ops.LANE)
    made = {u: UOp(Ops.DEFINE_REG, u.dtype, (*dict.fromkeys(r for s in u.src for r in s.toposort()
                                                             if r.op is Ops.RANGE), lane), u.arg + copy * stride)
            for u in statement.toposort() if u.op is Ops.DEFINE_REG}
    return substitute(statement, made) if made else statement


def _own_registers(statement: UOp, copy: int, stride: int) -> UOp:
    """``statement``, one copy of a work item's, with registers of its own: each register the copy made one
    of work items ``r*rows + copy`` becomes slot ``slot + copy*stride``, one per work item of the ranges its
    work items are now numbered by."""
    made = {u: UOp.register(u.arg + copy * stride, pointee(u),
                            *(r for s in u.src for r in s.toposort() if r.op is Ops.RANGE))
            for u in statement.toposort() if u.op is Ops.DEFINE_REG and any(s.op is not Ops.RANGE for s in u.src)}
    return substitute(statement, made) if made else statement
