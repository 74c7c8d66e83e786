"""Symbolic simplification: constant folding, algebraic identities, and folding decided by value bounds.

Every rule is exact, and none removes a load: every access a kernel is written to make happens (and is
bounds-checked) on every backend, as the reference makes it. Integer identities that could change a
wrapping result are not applied to floats, and
a float identity is kept only if it holds for -0.0, NaN and the infinities: ``x*1.0``, ``x/1.0``,
``x-0.0`` and ``x+(-0.0)`` are ``x``, but ``x+0.0`` is not (``-0.0+0.0`` is ``+0.0``) and ``x*0.0`` is
not (``inf*0.0`` is NaN). Folded float constants are rounded to their type once per op, which is exact
for the correctly rounded ops. Nothing here reorders float math.
"""

from __future__ import annotations

import math
import weakref

from svod.dtype import dtypes
from svod.ir.alu import bitcast, convert, exec_alu
from svod.ir.ops import ALU, FUSED, Ops
from svod.ir.pattern import PatternMatcher, UPat, graph_rewrite
from svod.ir.uop import UOp

_x = UPat.var("x")
_INTS = tuple(dt for dt in dtypes.all() if dt.is_int)
_UINTS = tuple(dt for dt in _INTS if dt.is_unsigned)
_FLOATS = tuple(dt for dt in dtypes.all() if dt.is_float)


def _fold_constants(node: UOp) -> UOp | None:
    """An op of constants is a constant; but not a ``FUSED`` product, which a sum rounds only after adding."""
    if node.op not in ALU or not node.src or any(s.op is not Ops.CONST for s in node.src) or node.arg == FUSED:
        return None
    return UOp.const(node.dtype, exec_alu(node.op, node.dtype, [s.arg for s in node.src]))


def _fold_cast(x: UOp, node: UOp) -> UOp:
    return UOp.const(node.dtype, convert(x.arg, node.dtype))


def _fold_bitcast(x: UOp, node: UOp) -> UOp:
    return UOp.const(node.dtype, bitcast(x.arg, x.dtype, node.dtype))


def _is_zero(c: UOp, negative: bool) -> bool:
    return c.arg == 0.0 and (math.copysign(1.0, c.arg) < 0) == negative


def _fold_by_bounds(node: UOp) -> UOp | None:
    """An integer or bool node whose bounds hold a single value is that value."""
    if node.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND) or not (node.dtype.is_int or node.dtype == dtypes.bool) \
            or node.reads_memory:
        return None
    if node.op not in ALU and node.op is not Ops.CAST:
        return None
    lo, hi = node.bounds
    return UOp.const(node.dtype, lo) if lo == hi else None


def _dropped(x: UOp, result: UOp) -> UOp | None:
    """``result``, which no longer computes ``x``, unless that would drop a load."""
    return None if x.reads_memory else result


def _dropped_condition(c: UOp, x: UOp) -> UOp | None:
    return _dropped(c, x)


def _div_by_bounds(x: UOp, c: UOp) -> UOp | None:
    """``x // c`` is 0 and ``x % c`` is ``x`` when ``0 <= x < c``."""
    if c.arg > 0 and x.vmin >= 0 and x.vmax < c.arg and not x.reads_memory:
        return UOp.const(x.dtype, 0)
    return None


def _mod_by_bounds(x: UOp, c: UOp) -> UOp | None:
    return x if c.arg > 0 and x.vmin >= 0 and x.vmax < c.arg else None


def _split_by_multiple(x: UOp, c: UOp, d: UOp | None, c2: UOp, node: UOp) -> UOp | None:
    """``(x*c + d) // c`` is ``x`` and ``(x*c + d) % c`` is ``d`` when nothing is negative and ``d < c``."""
    offset = 0 if d is None else d.arg
    if c.arg != c2.arg or c.arg <= 0 or not 0 <= offset < c.arg or node.src[0].vmin < 0 or x.vmin < 0:
        return None
    return x if node.op is Ops.IDIV else UOp.const(x.dtype, offset)


def _whole_again(x: UOp, a: UOp, c: UOp, y: UOp) -> UOp | None:
    """``(x // a) * c + y % c`` is ``y`` where ``y`` is ``x`` and ``a`` is ``c``, or ``y`` is ``x // d`` and
    ``a`` is ``d * c`` (C's quotient and remainder, as Python's, put back together give the number, whatever its
    sign): an index split into a view's digits, joined again (a store through a reshape that merges axes, which
    the race check must see as the one index it is)."""
    if c.arg <= 0:
        return None
    if y is x and a.arg == c.arg:
        return x
    if y.op is Ops.IDIV and y.src[0] is x and y.src[1].op is Ops.CONST and y.src[1].arg > 0 \
            and a.arg == y.src[1].arg * c.arg:
        return y
    return None


def _reassociate_add(x: UOp, c1: UOp, c2: UOp) -> UOp:
    return x + exec_alu(Ops.ADD, x.dtype, [c1.arg, c2.arg])


def _reassociate_mul(x: UOp, c1: UOp, c2: UOp) -> UOp:
    return x * exec_alu(Ops.MUL, x.dtype, [c1.arg, c2.arg])


def _single_iteration(r: UOp) -> UOp | None:
    """A range over one value is that value."""
    end = r.src[0]
    return UOp.index_const(0) if end.op is Ops.CONST and end.arg == 1 else None


def _reduce_without_single_ranges(node: UOp) -> UOp | None:
    """A REDUCE over ranges simplified to a constant no longer loops over them; with none left, it is its
    value (the identities svod reduces from are exact: ``-0.0 + x`` is ``x``)."""
    ranges = tuple(r for r in node.src[1:] if r.op is Ops.RANGE)
    if len(ranges) == len(node.src) - 1:
        return None
    return node.src[0] if not ranges else node.replace(src=(node.src[0], *ranges))


def _state_without_single_ranges(node: UOp) -> UOp | None:
    """A memory state (``AFTER``) over ranges simplified to a constant no longer follows their turns."""
    kept = tuple(s for s in node.src[1:] if s.op is not Ops.CONST)
    return None if len(kept) == len(node.src) - 1 else node.replace(src=(node.src[0], *kept))


def _const_last(node: UOp) -> UOp | None:
    """Commutative ops keep a constant on the right, so the other rules need one spelling each."""
    a, b = node.src
    return node.replace(src=(b, a)) if a.op is Ops.CONST and b.op is not Ops.CONST else None


symbolic = PatternMatcher([
    (UPat(Ops.RANGE, name="r"), _single_iteration),
    (UPat(Ops.REDUCE, name="node"), _reduce_without_single_ranges),
    (UPat(Ops.AFTER, name="node"), _state_without_single_ranges),
    (UPat(tuple(ALU), name="node"), _fold_constants),
    (UPat(Ops.CAST, src=(UPat.cvar("x"),), name="node"), _fold_cast),
    (UPat(Ops.BITCAST, src=(UPat.cvar("x"),), name="node"), _fold_bitcast),
    (UPat((Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPEQ, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR), name="node"),
     _const_last),
    # identities that hold for every dtype
    (UPat(Ops.ADD, src=(_x, UPat.const(0))), lambda x: x),
    (UPat(Ops.ADD, dtype=_FLOATS, src=(_x, UPat.cvar("c"))), lambda x, c: x if _is_zero(c, negative=True) else None),
    (UPat(Ops.SUB, src=(_x, UPat.const(0))), lambda x: x),
    (UPat(Ops.SUB, dtype=_FLOATS, src=(_x, UPat.cvar("c"))), lambda x, c: x if _is_zero(c, negative=False) else None),
    (UPat(Ops.MUL, src=(_x, UPat.const(1))), lambda x: x),
    (UPat(Ops.MUL, src=(_x, UPat.const(1.0))), lambda x: x),
    (UPat(Ops.FDIV, src=(_x, UPat.const(1.0))), lambda x: x),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_x,)),)), lambda x: x),
    (UPat(Ops.CAST, src=(_x,), name="node"), lambda x, node: x if x.dtype == node.dtype else None),
    (UPat(Ops.WHERE, src=(UPat.var("c"), _x, _x)), _dropped_condition),
    # integer-only identities
    (UPat(Ops.MUL, dtype=_INTS, src=(_x, UPat.const(0))), lambda x: _dropped(x, UOp.const(x.dtype, 0))),
    (UPat(Ops.IDIV, dtype=_INTS, src=(_x, UPat.const(1))), lambda x: x),
    (UPat(Ops.ABS, dtype=_UINTS, src=(_x,)), lambda x: x),
    (UPat(Ops.MOD, dtype=_INTS, src=(_x, UPat.const(1))), lambda x: _dropped(x, UOp.const(x.dtype, 0))),
    (UPat(Ops.SUB, dtype=_INTS, src=(_x, _x)), lambda x: _dropped(x, UOp.const(x.dtype, 0))),
    (UPat(Ops.IDIV, dtype=_INTS, src=(_x, UPat.cvar("c"))), _div_by_bounds),
    (UPat(Ops.MOD, dtype=_INTS, src=(_x, UPat.cvar("c"))), _mod_by_bounds),
    (UPat(Ops.ADD, dtype=_INTS, src=(UPat(Ops.MUL, src=(UPat(Ops.IDIV, src=(_x, UPat.cvar("a"))), UPat.cvar("c"))),
                                     UPat(Ops.MOD, src=(UPat.var("y"), UPat.cvar("c"))))), _whole_again),
    (UPat(Ops.ADD, dtype=_INTS, src=(UPat(Ops.ADD, src=(_x, UPat.cvar("c1"))), UPat.cvar("c2"))),
     _reassociate_add),
    (UPat(Ops.MUL, dtype=_INTS, src=(UPat(Ops.MUL, src=(_x, UPat.cvar("c1"))), UPat.cvar("c2"))),
     _reassociate_mul),
    (UPat((Ops.IDIV, Ops.MOD), dtype=_INTS, name="node", src=(
        UPat(Ops.ADD, src=(UPat(Ops.MUL, src=(_x, UPat.cvar("c"))), UPat.cvar("d"))), UPat.cvar("c2"))),
     _split_by_multiple),
    (UPat((Ops.IDIV, Ops.MOD), dtype=_INTS, name="node", src=(UPat(Ops.MUL, src=(_x, UPat.cvar("c"))),
                                                                UPat.cvar("c2"))),
     lambda x, c, c2, node: _split_by_multiple(x, c, None, c2, node)),
    (UPat(Ops.CMPLT, src=(UPat(Ops.RANGE, name="r"), _x)),
     lambda r, x: UOp.const(dtypes.bool, True) if r.src[0] is x else None),
    (UPat(Ops.CMPLT, src=(_x, _x)), lambda x: _dropped(x, UOp.const(dtypes.bool, False))),
    (UPat((Ops.CMPNE, Ops.CMPEQ), src=(UPat.var("x", (*_INTS, dtypes.bool)), UPat.var("x")), name="node"),
     lambda x, node: _dropped(x, UOp.const(dtypes.bool, node.op is Ops.CMPEQ))),
    (UPat(Ops.INDEX, src=(UPat.var("b"), UPat.var("i"), UPat.const(True)), name="node"),
     lambda b, i, node: node.replace(src=(b, i))),  # a gate that always holds is none
    (UPat(Ops.CMPNE, dtype=dtypes.bool, src=(_x, UPat.const(False))), lambda x: x),
    (UPat(Ops.CMPEQ, dtype=dtypes.bool, src=(_x, UPat.const(True))), lambda x: x),
    # comparisons and other integer results that the bounds decide
    (UPat(name="node"), _fold_by_bounds),
])


_SIMPLIFIED: weakref.WeakSet[UOp] = weakref.WeakSet()
"""Nodes no rule of ``symbolic`` changes. Simplification is a function of a node alone, so a node met
again (a kernel simplified once more after a pass changed part of it) is not matched again."""


def simplify(root: UOp) -> UOp:
    """``root`` with every rule of ``symbolic`` applied to a fixed point."""
    return graph_rewrite(root, symbolic, name="simplify", fixed_points=_SIMPLIFIED)
