"""Ranges: which ranges a value depends on (``UOp.live_ranges``, kept on each node), and the order loops over
ranges nest in. One definition for the lowering passes, the linearizer and the profiler's cost estimate.
The PYTHON reference device keeps its own (``svod.backends.python``), on purpose: it checks where the
linearizer puts loops, so it may not share the rule. The race check asks another question (every range
below a node, closed by a REDUCE or not) and has its own walk (``safety._ranges``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from svod.ir import AxisKind, Ops, UOp


class LiveRanges(Mapping[UOp, frozenset[UOp]]):
    """For every node below ``root``, the ranges it depends on that no REDUCE between them has closed
    (``UOp.live_ranges``, which each node keeps: passes that ask of one graph again and again walk it once).
    A node made later has its own too."""

    def __init__(self, root: UOp) -> None:
        self.root = root

    def __getitem__(self, node: UOp) -> frozenset[UOp]:
        return node.live_ranges

    def __iter__(self) -> Iterator[UOp]:
        return iter(self.root.toposort())

    def __len__(self) -> int:
        return len(self.root.toposort())

    def __contains__(self, node: object) -> bool:
        return isinstance(node, UOp) and node in self.root.toposort()


def live_ranges(root: UOp) -> LiveRanges:
    """For every node below ``root``, the ranges it depends on that no REDUCE between them has closed."""
    return LiveRanges(root)


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
