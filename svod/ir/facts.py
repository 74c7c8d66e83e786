"""Facts about a UOp found once, from its sources' facts, and kept in a slot of the node (``UOp.bounds``,
``UOp.reads_memory``, ``UOp.live_ranges``, ``UOp.unstated_memory``, ``UOp.ops_below``).

``fill`` finds one fact for a node and for every node below it that lacks it, in one walk that stops at the
nodes that know theirs and does not recurse: asking along a deep graph, or again after a pass rebuilt part of
it, costs time linear in what is new. Each fact here is a function of a node's op, arg and sources' facts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from svod.ir.bounds import Bounds, compute_bounds
from svod.ir.ops import Ops

if TYPE_CHECKING:
    from svod.ir.uop import UOp


def fill(root: UOp, slot: str, compute: Callable[[UOp], Any]) -> None:
    """Set the fact ``slot`` of ``root`` and of every node below it that lacks it, sources first: ``compute``
    finds a node's from its sources'."""
    stack = [root]
    while stack:
        node = stack[-1]
        if getattr(node, slot) is not None:
            stack.pop()
            continue
        missing = [s for s in node.src if getattr(s, slot) is None]
        if missing:
            stack.extend(missing)
            continue
        object.__setattr__(node, slot, compute(node))
        stack.pop()


def bounds_of(node: UOp) -> Bounds:
    return compute_bounds(node, _known_bounds)


def _known_bounds(u: UOp) -> Bounds:
    return cast(Bounds, u._bounds)  # sources come first, so theirs are known


def loads_of(node: UOp) -> bool:
    return node.op is Ops.LOAD or any(s._loads for s in node.src)


OP_BITS: dict[Ops, int] = {op: 1 << number for number, op in enumerate(Ops)}
"""Each op's bit in ``UOp.ops_below``."""
ALL_OPS = sum(OP_BITS.values())


def ops_of(node: UOp) -> int:
    bits = OP_BITS[node.op]
    for s in node.src:
        bits |= cast(int, s._ops)
    return bits


def live_of(node: UOp) -> frozenset[UOp]:
    ranges = union_of(node, "_live")
    if node.op is Ops.RANGE:
        return ranges | {node}
    if node.op is Ops.REDUCE and not ranges.isdisjoint(node.src[1:]):
        return ranges.difference(node.src[1:])
    return ranges


_NOTHING: frozenset[UOp] = frozenset()


def union_of(node: UOp, slot: str) -> frozenset[UOp]:
    """The union of the sets ``slot`` of ``node``'s sources, one of theirs where it holds the others (nodes whose
    set is their sources' share it)."""
    found = _NOTHING
    for s in node.src:
        more = getattr(s, slot)
        if not more <= found:
            found = found | more if found else more
    return found


__all__ = ["ALL_OPS", "OP_BITS", "bounds_of", "fill", "live_of", "loads_of", "ops_of", "union_of"]
