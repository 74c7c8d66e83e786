"""Parallel ranges that end where their guard does: a GLOBAL range whose every effect runs only where its index
is below a bound the kernel reads before its loop runs to that bound (``clamp_guarded_ranges``).

A ``prange`` cannot be as long as a value the run computes (a launch's size is known before its kernel runs),
so a kernel written for such a length loops over the longest it may be, under ``if i < n[0]``, and so do the
phases of ``@svod.jit``'s arrays that a loop shrinks (``svod.frontend.shrinking``). On a CPU the whole range
was walked, testing every index, even where ``n[0]`` was a tenth of it: a copy of 250000 elements that kept
1000 took as long as one that kept them all. The range's chunks are the same whichever thread runs them, so a
range that stops at the bound, with the test dropped, computes what the tested one did.
"""

from __future__ import annotations

from svod.codegen.checks import CHECKED
from svod.codegen.indexing import conjuncts
from svod.codegen.lower import _gated
from svod.codegen.ranges import live_ranges, range_order
from svod.dtype import DType, dtypes
from svod.ir import AxisKind, Ops, UOp, substitute
from svod.ir.ops import EFFECTS, STATEMENTS
from svod.ir.uop import memory_of, written_memory

__all__ = ["clamp_guarded_ranges"]


def clamp_guarded_ranges(sink: UOp) -> UOp | None:
    """``sink`` with each GLOBAL range ``i`` whose every effect is gated by ``i < b`` (one condition, an
    operand of each gate's conjunction), ``b`` an integer that reads no range and only memory the kernel does
    not write, ending at ``min(end, max(b, 0))`` and the condition taken for true; None where none is. A read
    of ``b`` whose bounds are tested at run time (``n`` of a symbolic length) is made only where the range has
    a turn: a range that makes none read nothing before.

    A kernel with a loop's exit is left as written (its turns depend on its data)."""
    statements = [e for e in sink.src if e.op in STATEMENTS]
    if not statements or any(e.op is Ops.EXIT for e in statements):
        return None
    written = written_memory(statements)
    replaced: dict[UOp, UOp] = {}
    live = live_ranges(sink)
    ranges = sorted({r for e in statements for r in live[e] if r.arg[1] is AxisKind.GLOBAL}, key=range_order)
    for r in ranges:
        inside = [e for e in statements if r in live[e]]
        shared = _bounding(inside[0], r, written)
        for effect in inside[1:]:
            shared = [c for c in shared if c in _bounding(effect, r, written)]
        if not shared:
            continue
        condition, end = shared[0], r.src[0]
        bound = condition.src[1]
        if end.vmin < 1 and any(u.op is Ops.INDEX and u.arg == CHECKED for u in bound.toposort()):
            bound = _gated(bound, end.gt(0), target=False)  # (an empty range read nothing, and failed nowhere)
        bound = bound if bound.dtype == dtypes.index else bound.cast(dtypes.index)
        replaced[r] = UOp.range(end.minimum(bound.maximum(0)), r.arg[0], r.arg[1])
        replaced[condition] = UOp.const(dtypes.bool, True)
    return substitute(sink, replaced) if replaced else None


def _bounding(effect: UOp, r: UOp, written: set[UOp]) -> list[UOp]:
    """The conditions ``r < b`` among the operands of ``effect``'s gate's conjunction, ``b`` as the
    module says: read before ``r``'s loop, and the same in every one of its turns."""
    if effect.op not in EFFECTS or len(effect.src[0].src) != 3:
        return []
    return [c for c in conjuncts(effect.src[0].src[2]) if _bounds(c, r, written)]


def _bounds(condition: UOp, r: UOp, written: set[UOp]) -> bool:
    if condition.op is not Ops.CMPLT:
        return False
    index, bound = condition.src
    if index.op is Ops.CAST and index.src[0] is r and _signed(index.dtype) and index.dtype.itemsize == 8:
        index = r
    if index is not r or not _signed(bound.dtype):
        return False
    nodes = bound.toposort()
    return not any(u.op in (Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_REG, Ops.DEFINE_LOCAL, Ops.LANE) or
                   (u.op is Ops.INDEX and (len(u.src) != 2 or u.arg not in (None, CHECKED))) or
                   (u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written) for u in nodes)


def _signed(dtype: DType) -> bool:
    return dtype.kind == "int" and dtype.count == 1 and dtype.itemsize <= 8
