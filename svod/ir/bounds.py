"""Value bounds of integer UOps: the smallest and largest value a node can take, for every input.

Bounds are conservative. When an expression could leave the range of its dtype (and so wrap), its bounds
are the whole range of the dtype. Floats get ``(-inf, inf)`` unless they are constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from svod.dtype import PtrDType
from svod.ir.alu import trunc_quotient
from svod.ir.ops import Ops

if TYPE_CHECKING:
    from svod.ir.uop import UOp

Bounds = tuple[int | float, int | float]


def _dtype_bounds(u: UOp) -> Bounds:
    return (u.dtype.min, u.dtype.max)


def _add(a: Bounds, b: Bounds) -> Bounds:
    return (a[0] + b[0], a[1] + b[1])


def _sub(a: Bounds, b: Bounds) -> Bounds:
    return (a[0] - b[1], a[1] - b[0])


def _mul(a: Bounds, b: Bounds) -> Bounds:
    corners = [x * y for x in a for y in b]
    return (min(corners), max(corners))


def _idiv(a: Bounds, b: Bounds) -> Bounds | None:
    """A zero divisor divides by one (svod's trap-free division): a size that may be 0 divides as well."""
    if b[0] < 0:
        return None
    if b[1] == 0:
        return a
    corners = [trunc_quotient(int(x), int(y)) for x in a for y in (max(b[0], 1), b[1])]
    if b[0] == 0:
        corners += [int(a[0]), int(a[1])]
    return (min(corners), max(corners))


def _mod(a: Bounds, b: Bounds) -> Bounds | None:
    """The remainder takes the dividend's sign and is smaller than the divisor; by zero it is 0, which every
    bound below includes."""
    if b[0] < 0:
        return None
    if b[1] == 0:
        return (0, 0)
    top = b[1] - 1
    if a[0] >= 0:
        return (0, min(a[1], top))
    if a[1] <= 0:
        return (max(a[0], -top), 0)
    return (-top, top)


def _abs(a: Bounds) -> Bounds:
    if a[0] >= 0:
        return a
    if a[1] <= 0:
        return (-a[1], -a[0])
    return (0, max(-a[0], a[1]))


def _cmplt(a: Bounds, b: Bounds) -> Bounds:
    if a[1] < b[0]:
        return (1, 1)
    if a[0] >= b[1]:
        return (0, 0)
    return (0, 1)


def _cmple(a: Bounds, b: Bounds) -> Bounds:
    if a[1] <= b[0]:
        return (1, 1)
    if a[0] > b[1]:
        return (0, 0)
    return (0, 1)


def _cmpne(a: Bounds, b: Bounds) -> Bounds:
    if a[1] < b[0] or b[1] < a[0]:
        return (1, 1)
    if a[0] == a[1] == b[0] == b[1]:
        return (0, 0)
    return (0, 1)


def _cmpeq(a: Bounds, b: Bounds) -> Bounds:
    ne = _cmpne(a, b)
    return (1 - ne[1], 1 - ne[0])


def _bits(a: Bounds, b: Bounds) -> Bounds:
    """``|`` and ``^`` of integers within ``[-2**k, 2**k - 1]`` stay within it (two's complement sets no bit
    above ``k`` that is not the sign's); of non-negative ones, within ``[0, 2**k - 1]``."""
    k = max(int(n).bit_length() if n >= 0 else (~int(n)).bit_length() for n in (*a, *b))
    return (0 if a[0] >= 0 and b[0] >= 0 else -(1 << k), (1 << k) - 1)


def _shr(a: Bounds, amount: Bounds) -> Bounds | None:
    """``>>`` by a non-negative amount moves a value towards 0 (or -1), the further the larger the amount (svod's
    shift by the dtype's width or more gives 0 or -1, as Python's does)."""
    if amount[0] < 0:
        return None
    lo, hi, least, most = int(a[0]), int(a[1]), int(amount[0]), int(amount[1])
    return (lo >> least if lo < 0 else lo >> most, hi >> least if hi >= 0 else hi >> most)


_BINARY: dict[Ops, Callable[[Bounds, Bounds], Bounds | None]] = {
    Ops.ADD: _add, Ops.SUB: _sub, Ops.MUL: _mul, Ops.IDIV: _idiv, Ops.MOD: _mod,
    Ops.MAX: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    Ops.MIN: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    Ops.CMPLT: _cmplt, Ops.CMPLE: _cmple, Ops.CMPNE: _cmpne, Ops.CMPEQ: _cmpeq,
    Ops.OR: _bits, Ops.XOR: _bits, Ops.SHR: _shr,
}


def _range_bounds(end: Bounds) -> Bounds:
    return (0, max(int(end[1]) - 1, 0))


def compute_bounds(u: UOp, known: Callable[[UOp], Bounds]) -> Bounds:
    """Bounds of ``u`` given ``known``, which returns the (already computed) bounds of a source."""
    op = u.op
    if op is Ops.CONST:
        return (u.arg, u.arg)
    if u.dtype.kind == "void" or isinstance(u.dtype, PtrDType):
        return (0, 0)  # effects and pointers carry no value
    if not (u.dtype.is_int or u.dtype.kind == "bool"):
        return _dtype_bounds(u)
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op is Ops.LANE:
        return (0, u.arg - 1)
    result: Bounds | None = None
    if op in (Ops.BIND, Ops.AFTER):
        result = known(u.src[0])
    elif op in (Ops.RANGE, Ops.SPECIAL):
        result = _range_bounds(known(u.src[0]))
    elif op is Ops.NEG:
        lo, hi = known(u.src[0])
        result = (-hi, -lo)
    elif op is Ops.ABS:
        result = _abs(known(u.src[0]))
    elif op in _BINARY:
        if u.src[0].dtype.is_float:  # a float may be NaN, which no interval holds: only constants decide
            return _dtype_bounds(u)
        result = _BINARY[op](known(u.src[0]), known(u.src[1]))
    elif op is Ops.WHERE and u.src[0].op is Ops.CMPLT and u.src[0].src in ((u.src[1], u.src[2]),
                                                                             (u.src[2], u.src[1])):
        a, b = known(u.src[1]), known(u.src[2])
        pick = min if u.src[0].src[0] is u.src[1] else max  # (a < b ? a : b) is min(a, b)
        result = (pick(a[0], b[0]), pick(a[1], b[1]))
    elif op is Ops.WHERE:
        cond, a, b = (known(s) for s in u.src)
        if cond == (1, 1):
            result = a
        elif cond == (0, 0):
            result = b
        else:
            result = (min(a[0], b[0]), max(a[1], b[1]))
    elif op is Ops.CAST and (u.src[0].dtype.is_int or u.src[0].dtype.kind == "bool"):
        result = known(u.src[0])
    elif op is Ops.AND and u.dtype.is_int:
        a, b = known(u.src[0]), known(u.src[1])
        if a[0] >= 0 or b[0] >= 0:
            result = (0, min(x[1] for x in (a, b) if x[0] >= 0))
    if result is None or any(isinstance(x, float) and math.isnan(x) for x in result):
        return _dtype_bounds(u)
    if result[0] < u.dtype.min or result[1] > u.dtype.max:
        return _dtype_bounds(u)
    return result
