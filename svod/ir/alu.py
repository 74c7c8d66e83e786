"""What every ALU op computes, in C semantics, on Python values.

This is the definition of op semantics the compiling side computes with: constant folding uses it, and so
do constants, bounds and launch sizes. The PYTHON reference device does not: it spells every op again, with
numpy (``svod.backends.python``), so the two check each other. Integers wrap to their width; ``//`` and
``%`` truncate toward zero as in C; floats round to their width after every op. Where C leaves behaviour
undefined, svod defines it, and every renderer emits code with the same result:

- integer division or modulo by zero divides by one (``x // 0 == x``, ``x % 0 == 0``), and the most
  negative value divided by -1 wraps, so no kernel can trap;
- ``MAX`` and ``MIN`` on floats are IEEE 754-2019 maximumNumber and minimumNumber: a NaN operand yields
  the other operand, and +0.0 is greater than -0.0;
- a float converted to an integer type truncates toward zero and saturates at the type's limits, and
  NaN becomes 0 (as LLVM's ``fptosi.sat``, OpenCL's ``convert_*_sat`` and WGSL do).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from svod.dtype import DType
from svod.errors import SvodError
from svod.ir.ops import Ops

Value = bool | int | float


def wrap_int(value: int, dtype: DType) -> int:
    """Two's-complement wraparound of ``value`` to the width of ``dtype``."""
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.kind == "int" and value >> (bits - 1):
        value -= 1 << bits
    return value


_PACK_FORMAT = {"float16": "e", "float32": "f"}


def round_float(value: float, dtype: DType) -> float:
    """Round a Python float to the precision of ``dtype`` (round to nearest even, overflow to inf)."""
    fmt = _PACK_FORMAT.get(dtype.name)
    if fmt is None or math.isnan(value) or math.isinf(value):
        return value
    try:
        return float(struct.unpack(fmt, struct.pack(fmt, value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def convert(value: Value, dtype: DType) -> Value:
    """A value of any scalar type converted to ``dtype`` as a C cast would, or as svod defines it where C
    does not: a float saturates at the integer type's limits and NaN becomes 0."""
    if dtype.kind == "bool":
        return bool(value)
    if dtype.is_float:
        return round_float(float(value), dtype)
    if dtype.is_int:
        if isinstance(value, float):
            return saturate_float(value, dtype)
        return wrap_int(int(value), dtype)
    raise SvodError(f"cannot convert a value to {dtype!r}", stage="build", value=value)


def saturate_float(value: float, dtype: DType) -> int:
    """``value`` truncated toward zero and clamped to the range of integer ``dtype``; NaN is 0."""
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return int(dtype.max if value > 0 else dtype.min)
    return max(int(dtype.min), min(int(dtype.max), math.trunc(value)))


def bitcast(value: Value, src: DType, dst: DType) -> Value:
    """Reinterpret the bytes of ``value`` (of ``src``) as ``dst``; both must have one size."""
    if src.itemsize != dst.itemsize:
        raise SvodError(f"bitcast from {src!r} to {dst!r} changes the size", stage="build", value=value)
    data = struct.pack(_struct_code(src), value)
    return convert(struct.unpack(_struct_code(dst), data)[0], dst)


def _struct_code(dtype: DType) -> str:
    codes = {"bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
             "uint32": "I", "int64": "q", "index": "q", "uint64": "Q", "float16": "e", "float32": "f",
             "float64": "d"}
    return "<" + codes[dtype.name]


def trunc_quotient(a: int, b: int) -> int:
    """``a / b`` truncated toward zero, exactly (no wraparound); ``b`` must not be zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def trunc_div(a: int, b: int, dtype: DType) -> int:
    """C's ``a / b`` on integers of ``dtype``, with svod's definition for a zero divisor."""
    return a if b == 0 else wrap_int(trunc_quotient(a, b), dtype)


def trunc_mod(a: int, b: int, dtype: DType) -> int:
    """C's ``a % b``: the sign follows the dividend."""
    return 0 if b == 0 else wrap_int(a - b * trunc_quotient(a, b), dtype)


def _fdiv(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _exp2(a: float) -> float:
    try:
        return math.pow(2.0, a)
    except OverflowError:
        return math.inf


def _log2(a: float) -> float:
    if math.isnan(a) or a < 0.0:
        return math.nan
    if a == 0.0:
        return -math.inf
    return math.log2(a)


def _sin(a: float) -> float:
    return math.nan if math.isinf(a) else math.sin(a)


def _sqrt(a: float) -> float:
    return math.nan if a < 0.0 else math.sqrt(a)


def _maximum_number(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    if a == b:  # equal: only the sign of a zero can differ, and +0 wins
        return b if math.copysign(1.0, a) < 0 else a
    return a if a > b else b


def _minimum_number(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a < b else b


def _in_float64(fn: Callable[..., Any]) -> Callable[..., float]:
    """A numpy function on Python floats, quiet about overflow and invalid operands (IEEE results)."""
    def apply(*args: float) -> float:
        with np.errstate(all="ignore"):
            return float(fn(*(np.float64(a) for a in args)))
    return apply


_FLOAT_OPS: dict[Ops, Callable[..., float]] = {
    Ops.NEG: lambda a: -a, Ops.ABS: abs, Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _sqrt,
    Ops.RECIPROCAL: lambda a: _fdiv(1.0, a), Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b, Ops.FDIV: _fdiv, Ops.MAX: _maximum_number, Ops.MIN: _minimum_number,
    Ops.EXP: _in_float64(np.exp), Ops.LOG: _in_float64(np.log), Ops.COS: _in_float64(np.cos),
    Ops.TAN: _in_float64(np.tan), Ops.TANH: _in_float64(np.tanh), Ops.ERF: math.erf,
    Ops.FLOOR: _in_float64(np.floor), Ops.CEIL: _in_float64(np.ceil), Ops.TRUNC: _in_float64(np.trunc),
    Ops.RINT: _in_float64(np.rint), Ops.POW: _in_float64(np.power), Ops.FMOD: _in_float64(np.fmod),
}
_INT_OPS: dict[Ops, Callable[..., int]] = {
    Ops.NEG: lambda a: -a, Ops.ABS: abs, Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b, Ops.MAX: max, Ops.MIN: min, Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b,
    Ops.XOR: lambda a, b: a ^ b,
}
_BOOL_OPS: dict[Ops, Callable[[bool, bool], bool]] = {
    Ops.AND: lambda a, b: a and b, Ops.OR: lambda a, b: a or b, Ops.XOR: lambda a, b: a != b,
}
_COMPARE: dict[Ops, Callable[[Value, Value], bool]] = {
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPLE: lambda a, b: a <= b, Ops.CMPNE: lambda a, b: a != b,
    Ops.CMPEQ: lambda a, b: a == b,
}


def fused_multiply_add(a: float, b: float, c: float, dtype: DType) -> float:
    """``a * b + c`` rounded once to ``dtype`` (float32 or float64), as IEEE 754's fusedMultiplyAdd.

    The exact value is a ``Fraction``; for float32 it is first rounded to float64 *to odd* (an inexact
    result keeps an odd last bit), so that rounding it again to float32 gives the correctly rounded result
    (float64 has more than twice float32's 24 bits, plus two)."""
    if not (math.isfinite(a) and math.isfinite(b)) or math.isnan(c):
        return round_float(a * b + c, dtype)  # an infinite or NaN product: the unfused sum gives IEEE's result
    if math.isinf(c):
        return c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # the product is exact (a nonzero one is never -c); this gives the sign of the zero
    try:
        nearest = float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    if dtype.itemsize == 8 or Fraction(nearest) == exact:
        return round_float(nearest, dtype)
    odd = nearest if struct.unpack("<q", struct.pack("<d", nearest))[0] & 1 else \
        math.nextafter(nearest, math.inf if exact > nearest else -math.inf)
    return round_float(odd, dtype)


def shift(op: Ops, a: int, amount: int, dtype: DType) -> int:
    """``a << amount`` or ``a >> amount`` (arithmetic for signed types); an amount outside the type's
    bits shifts everything out."""
    if not 0 <= amount < dtype.bits:
        return -1 if op is Ops.SHR and a < 0 else 0
    return wrap_int(a << amount, dtype) if op is Ops.SHL else a >> amount


def exec_alu(op: Ops, dtype: DType, operands: Sequence[Value]) -> Value:
    """The result of ALU ``op`` with result type ``dtype`` on already-converted ``operands``."""
    if op in _COMPARE:
        return _COMPARE[op](operands[0], operands[1])
    if op is Ops.WHERE:
        return operands[1] if operands[0] else operands[2]
    if op is Ops.MULACC:
        a, b, c = (float(v) for v in operands)
        return fused_multiply_add(a, b, c, dtype)
    if dtype.is_float:
        return round_float(_FLOAT_OPS[op](*(float(v) for v in operands)), dtype)
    if dtype.kind == "bool":
        return _BOOL_OPS[op](bool(operands[0]), bool(operands[1]))
    ints = [int(v) for v in operands]
    if op is Ops.IDIV:
        return trunc_div(ints[0], ints[1], dtype)
    if op is Ops.MOD:
        return trunc_mod(ints[0], ints[1], dtype)
    if op in (Ops.SHL, Ops.SHR):
        return shift(op, ints[0], ints[1], dtype)
    fn = _INT_OPS.get(op)
    if fn is None:
        raise SvodError(f"{op!r} is not defined on {dtype!r}", stage="build", value=op)
    return wrap_int(fn(*ints), dtype)
