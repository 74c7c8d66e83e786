"""Ranges: which ranges a value depends on, and the order loops over ranges nest in. One definition for
the lowering passes, the linearizer and the profiler's cost estimate. The PYTHON reference device keeps
its own (``svod.backends.python``), on purpose: it checks where the linearizer puts loops, so it may not
share the rule. The race check asks another question (every range below a node, closed by a REDUCE or
not) and has its own walk (``safety._ranges``)."""

from __future__ import annotations

from svod.ir import AxisKind, Ops, UOp
from svod.ir.uop import unknown_below


def live_ranges(root: UOp, known: dict[UOp, frozenset[UOp]] | None = None) -> dict[UOp, frozenset[UOp]]:
    """For every node below ``root``, the ranges it depends on that no REDUCE between them has closed.
    ``known`` (filled in and returned) holds what an earlier call found, so nodes made later add theirs
    without walking what is known again."""
    live = {} if known is None else known
    for node in unknown_below(root, live):
        ranges = frozenset().union(*(live[s] for s in node.src)) if node.src else frozenset()
        if node.op is Ops.RANGE:
            ranges |= {node}
        elif node.op is Ops.REDUCE:
            ranges -= set(node.src[1:])
        live[node] = ranges
    return live


def free_axis(root: UOp) -> int:
    """The first axis number past every range's below ``root``: a range a pass makes there is a new node (a range
    is its end, axis and kind) and nests inside the ranges of the same kind (``range_order``)."""
    return 1 + max((u.arg[0] for u in root.toposort() if u.op is Ops.RANGE), default=-1)


def range_order(r: UOp) -> tuple[int, int, str]:
    """Loop nesting order: GLOBAL and LOOP ranges by axis, REDUCE ranges inside them; the key breaks ties
    deterministically."""
    return (int(r.arg[1] is AxisKind.REDUCE), r.arg[0], r.key)


def nested(ranges: frozenset[UOp]) -> tuple[UOp, ...]:
    """``ranges`` outermost first: by ``range_order``, and a range whose end uses another inside it."""
    pending = sorted(ranges, key=range_order)
    placed: list[UOp] = []
    while pending:
        ready = next(r for r in pending if not any(o in r.src[0].toposort() for o in pending if o is not r))
        placed.append(ready)
        pending.remove(ready)
    return tuple(placed)


__all__ = ["live_ranges", "nested", "range_order"]
