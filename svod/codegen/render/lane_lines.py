"""Index lanes as a line: a tile's offsets are ``s + k*g`` at lane ``g`` (``s`` one scalar, ``k`` a constant), so
a comparison of two of them is ``(k_a - k_b)*g`` against ``s_b - s_a``, constants of the lanes against one
scalar. A C renderer compares them as 32-bit lanes, one register, where the offsets themselves are 64-bit lanes
twice as wide as a register (a padded convolution's window tests: gcc took them lane by lane)."""

from __future__ import annotations

from collections.abc import Callable

from svod.dtype import dtypes
from svod.ir import Ops, UOp

__all__ = ["Line", "LINE_REACH", "lane_line"]

Line = tuple[str, int]
"""A value of index lanes as ``(s, k)``: lane ``g`` (of all the value's lanes) holds ``s + k*g``; ``s`` is the C
expression of one scalar."""
LINE_REACH = 1 << 24
"""The most a line's constants (``k*g``) may reach either way to be compared as 32-bit lanes: far inside them,
so that a difference clamped to 32 bits compares as the whole one does."""


def lane_line(node: UOp, lanes: dict[UOp, int], name: Callable[[UOp], str], zero: str) -> Line | None:
    """``node`` (of index lanes, or a scalar index seen in every lane) as a line, where it is a sum of the lane
    number scaled by constants and scalars: a LANE, a scalar, and sums, differences and constant multiples of
    those; None otherwise. ``name`` spells a scalar; ``zero`` is a LANE's scalar, the index type's zero, so that
    a scalar of constants alone (a last tile's start times a stride) is summed in the index type, not in a
    narrower one that overflows past ``2**31``."""
    if node.dtype != dtypes.index:
        return None
    if node not in lanes:
        return name(node), 0
    if node.op is Ops.LANE:
        return zero, 1
    if node.op in (Ops.ADD, Ops.SUB):
        a, b = (lane_line(s, lanes, name, zero) for s in node.src)
        if a is None or b is None:
            return None
        sign = "+" if node.op is Ops.ADD else "-"
        return f"({a[0]}{sign}{b[0]})", a[1] + b[1] if node.op is Ops.ADD else a[1] - b[1]
    if node.op is Ops.MUL:
        for line, scale in ((node.src[0], node.src[1]), (node.src[1], node.src[0])):
            if scale.op is Ops.CONST and scale not in lanes:
                found = lane_line(line, lanes, name, zero)
                return None if found is None else (f"({found[0]}*{int(scale.arg)})", found[1] * int(scale.arg))
    return None
