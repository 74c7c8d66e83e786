"""``check_accesses``: the run-time test of every access no proof covers, made explicit in the kernel.

``safety.guard_accesses`` marks an access it cannot prove inside its buffer with ``INDEX`` arg ``CHECKED``.
This pass turns each into an access gated by an in-range test, and a record of where the test fails:

::

    INDEX(buf, idx[, gate], CHECKED)
      ─> INDEX(buf, idx[, gate], IF(failed, allowed, STORE(status[flag], 1), STORE(status[where], reported)[, idx]))

The IF is the record: where ``failed`` holds, the kernel stores a flag and the offending index in the
status buffer (``status_slots``), and svod raises ``IndexOutOfBoundsError`` after the kernel. The
linearizer places the record where its sources can first be computed (a row's test outside the loop over
the row's columns), or, for an access under a gate, beside the access (the index is then a source of the
record), runs it before the access, and emits the access as ``INDEX(buf, idx, allowed)``.

A loop without a bound (a ``while``) also ends once the status records a failure: its test could hang on the 0
a failed load gives (``while a[i] == 0``), where Python raises at the access. The failing work item ends its
loop after that turn (it reads its own record); the others once they see it, so an array a kernel writes after
such a failure holds what it holds when the kernel stops, and the call raises ``IndexOutOfBoundsError``.
"""

from __future__ import annotations

import functools

from svod.codegen.indexing import conjuncts, index_in_bounds
from svod.codegen.ranges import range_order
from svod.dtype import dtypes
from svod.errors import GraphError
from svod.ir import Ops, UOp
from svod.ir.ops import STATEMENTS
from svod.ir.uop import is_unbounded, memory_of, param_size, pointee

CHECKED = "checked"
"""The arg of an INDEX whose bounds could not be proven: it is tested at run time."""


def status_slots(slot: int) -> tuple[int, int]:
    """Where a checked access to buffer ``slot`` records a failure in the status buffer (int64): a flag,
    and the offending index."""
    return 2 * slot, 2 * slot + 1


def check_accesses(sink: UOp, status: UOp | None) -> UOp | None:
    """``sink`` with every ``CHECKED`` access gated by its in-range test and recording where it fails
    (the module docstring), or None when it has none. Afterwards no INDEX has arg ``CHECKED``."""
    topo = sink.toposort()
    if not any(u.op is Ops.INDEX and u.arg == CHECKED for u in topo):
        return None
    rebuilt: dict[UOp, UOp] = {}
    recorded: dict[int, None] = {}
    around = _loops_around(sink)
    for u in topo:
        src = tuple(rebuilt.get(s, s) for s in u.src)
        new = u if src == u.src else u.replace(src=src)
        if new.op is Ops.INDEX and new.arg == CHECKED:
            if status is None:
                raise GraphError("a bounds-checked access needs a status buffer", stage="lower")
            new = _recorded(new, status, around.get(u, ()))
            recorded[_reported(new).arg] = None
        if new is not u:
            rebuilt[u] = new
    checked = rebuilt.get(sink)
    if checked is None or status is None or not any(is_unbounded(e.src[0]) for e in checked.src if e.op is Ops.EXIT):
        return checked
    failed = functools.reduce(lambda a, b: a | b, [status.index(UOp.index_const(status_slots(slot)[0])).load().ne(0)
                                                   for slot in sorted(recorded)])
    return checked.replace(src=tuple(e.replace(src=(e.src[0], e.src[1] | failed, *e.src[2:]))
                                     if e.op is Ops.EXIT and is_unbounded(e.src[0]) else e for e in checked.src))


def _reported(index: UOp) -> UOp:
    """The buffer a checked access reports a failure of: its own, or the one a CPU thread's private copy is of."""
    buffer = memory_of(index.src[0])
    return buffer.src[0] if buffer.op is Ops.DEFINE_LOCAL else buffer


def _loops_around(sink: UOp) -> dict[UOp, tuple[UOp, ...]]:
    """For every node, the loops each statement that uses it runs in (those all of them run in, in range
    order): a loop a statement depends on runs around it, but not around its own end, and a reduction's ranges
    around its body."""
    topo = sink.toposort()
    seen: dict[UOp, frozenset[UOp]] = {}
    for u in reversed(topo):  # each user before what it uses
        if u is sink:
            continue
        mine = seen.get(u, u.live_ranges) if u.op not in STATEMENTS else u.live_ranges
        seen[u] = mine
        inner = mine | frozenset(u.src[1:]) if u.op is Ops.REDUCE else mine
        outer = mine - {u}  # a loop's end is computed before the loop
        for position, s in enumerate(u.src):
            loops = outer if u.op is Ops.RANGE else inner if position == 0 else mine
            seen[s] = seen[s] & loops if s in seen else loops
    return {u: tuple(sorted(loops, key=range_order)) for u, loops in seen.items()
            if u.op is Ops.INDEX and u.arg == CHECKED and loops}


def _recorded(u: UOp, status: UOp, around: tuple[UOp, ...]) -> UOp:
    """``buf[idx]`` that may leave its buffer: gated by an in-range test, with the record of a failure. The
    record fires only where the access is made: ``around`` are the loops its users run in, and one of them
    that its index does not name (the record is placed outside it) must turn at least once."""
    buffer, index = _reported(u), u.src[1]  # through a memory state, the buffer
    in_range, reported = _range_test(index, param_size(buffer))
    gate = u.src[2] if len(u.src) == 3 else None
    failed = in_range.ne(True) if gate is None else gate & in_range.ne(True)
    named = {r for r in index.toposort() if r.op is Ops.RANGE}
    for loop in around:
        if loop not in named and loop.src[0].vmin < 1:
            failed = failed & UOp.index_const(0).lt(loop.src[0])
    allowed = in_range if gate is None else gate & in_range
    recorded = pointee(status)
    stores = []
    for slot, value in zip(status_slots(buffer.arg), (UOp.index_const(1), reported), strict=True):
        stored = value if recorded == dtypes.int64 else value.cast(recorded)
        stores.append(UOp(Ops.STORE, dtypes.void, (status.index(slot), stored)))
    record = UOp(Ops.IF, dtypes.void, (failed, allowed, *stores, *_loops_kept(index, gate, in_range)))
    return UOp(Ops.INDEX, u.dtype, (*u.src[:2], *(() if gate is None else (gate,)), record))


def _loops_kept(index: UOp, gate: UOp | None, in_range: UOp) -> tuple[UOp, ...]:
    """The loops an access's record stays in beyond those its test and gate are computed in: the record runs
    where these are first computed, outside the access's other loops, each of which turns at least once
    (its end is at least 1, or the gate holds ``0 < end``). Then the record fires exactly when the access,
    made in the loop's first turn, would fail: the test is the same in every turn. A loop that may not turn
    keeps the record (a row's test, left beside the access in the loop over the row's columns, kept it from
    vector code: a gather of 64-float rows ran several times slower)."""
    outside = {u for u in (gate, in_range) if u is not None for u in u.toposort() if u.op is Ops.RANGE}
    clauses = conjuncts(gate)
    return tuple(r for r in index.toposort() if r.op is Ops.RANGE and r not in outside
                 and r.src[0].vmin < 1 and UOp.index_const(0).lt(r.src[0]) not in clauses)


def _range_test(index: UOp, size: UOp) -> tuple[UOp, UOp]:
    """The test that ``index`` lies in ``[0, size)``, and the index a failure reports. A row access (``rows_of``)
    is in range exactly when its row is: testing the row keeps the test out of the loop over the columns, and
    a failure reports the row's first element, itself outside the buffer. An index ``where(inside, at, -1)``
    whose ``at`` is proven in range wherever ``inside`` holds is in range exactly where ``inside`` holds: a
    Python kernel's ``image[y0, x0]`` of clamped coordinates is inside wherever the image is not empty,
    which one test before the loops tells."""
    if index.op is Ops.WHERE and index.src[2].op is Ops.CONST and int(index.src[2].arg) < 0:
        inside, at = index.src[:2]
        if index_in_bounds(at, size, inside, {u: n for n, u in enumerate((at < size).toposort())}):
            return inside, index.src[2]
    split = rows_of(index, size)
    if split is None:
        return (index >= 0) & (index < size), index
    row, scaled, rows = split
    return (row >= 0) & (row < rows), scaled


def rows_of(index: UOp, size: UOp) -> tuple[UOp, UOp, UOp] | None:
    """``index`` as a row access ``row * K + col`` with ``col`` proven in ``[0, K)`` (a shaped buffer's ``x[row,
    col]``, ``K`` a constant or a variable's size) and ``size`` a whole number of rows: ``(row, row * K, size /
    K)``; None for any other index. Such an index is in ``[0, size)`` exactly when its row is in ``[0, size /
    K)``."""
    if index.op is Ops.MUL:  # a row's first element, ``x[row, 0]``
        pairs = [(index, UOp.index_const(0))]
    elif index.op is Ops.ADD:
        pairs = [(index.src[0], index.src[1]), (index.src[1], index.src[0])]
    else:
        return None
    for scaled, col in pairs:
        if scaled.op is not Ops.MUL:
            continue
        for row, k in (scaled.src, scaled.src[::-1]):
            rows = _exact_quotient(size, k)
            if rows is not None and _within(col, k):
                return row, scaled, rows
    return None


def _within(col: UOp, k: UOp) -> bool:
    """Whether ``0 <= col < k`` for every value of the variables and ranges."""
    if k.op is Ops.CONST:
        return col.vmin >= 0 and col.vmax < int(k.arg)
    return index_in_bounds(col, k, None, {u: n for n, u in enumerate(col.toposort())})


def _exact_quotient(size: UOp, k: UOp) -> UOp | None:
    """``size / k`` when it is exact for every value of the size's variables, else None."""
    if k.op is not Ops.CONST:
        return size.src[1 - size.src.index(k)] if size.op is Ops.MUL and k in size.src else None
    divisor = int(k.arg)
    if divisor <= 0:
        return None
    if size.op is Ops.CONST:
        return UOp.index_const(int(size.arg) // divisor) if int(size.arg) % divisor == 0 else None
    if size.op is Ops.MUL and size.src[1].op is Ops.CONST and int(size.src[1].arg) % divisor == 0:
        return size.src[0] * (int(size.src[1].arg) // divisor)
    return None


__all__ = ["CHECKED", "check_accesses", "rows_of", "status_slots"]
