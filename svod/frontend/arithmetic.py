"""Values combined and converted as a kernel's Python computes them: two Python numbers now, in Python; a UOp
and a number, or two UOps, as UOps of one dtype by NumPy 2's promotion (``svod.frontend.promotion``: a Python
number is weak, two typed values unify). ``//`` and ``%`` floor as Python's do; a zero divisor never traps."""

from __future__ import annotations

import ast
import math as pymath
from collections.abc import Callable
from typing import Any

from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError
from svod.frontend.context import TranslationContext
from svod.frontend.promotion import Number
from svod.frontend.values import describe, is_number
from svod.ir import Ops, UOp
from svod.ir.alu import convert
from svod.ir.ops import ALU
from svod.random import KEY_VARIABLE, LAUNCH_VARIABLE


class Arithmetic(TranslationContext):
    """Arithmetic, comparisons, conversions and conditions on a kernel's values."""

    def binary(self, op: str, a: Any, b: Any, node: ast.AST | None = None) -> Any:
        if is_number(a) and is_number(b):
            try:
                return _python_binary(op, a, b)
            except (TypeError, ValueError, ZeroDivisionError, OverflowError) as err:
                raise KernelSyntaxError(f"{a!r} {op} {b!r}: {err}", kernel=self.name, stage="build",
                                        value=(a, b)) from None
        if isinstance(a, UOp) and isinstance(b, UOp) and self.weak(a) != self.weak(b):
            a, b = (self.held_by(a, b.dtype), b) if self.weak(a) else (a, self.held_by(b, a.dtype))
        av, bv = self.operands(a, b, node)
        if op in _INTEGER_ONLY and not av.dtype.is_int and av.dtype != dtypes.bool:
            raise KernelSyntaxError(f"{op} takes integers (or bools), not {describe(av)}", kernel=self.name,
                                    stage="build", value=op)
        if op == "/" and not av.dtype.is_float:
            av, bv = av.cast(self.platform.real), bv.cast(self.platform.real)
        if op in ("//", "%"):
            return _floored(op, av, bv)
        if op == "**" and av.dtype.is_int:
            if bv.vmin < 0:
                raise KernelSyntaxError(f"{describe(av)} ** an exponent that may be negative ({bv.vmin} at least): "
                                        "numpy refuses an integer to a negative power; make the base a float",
                                        kernel=self.name, stage="build", value=op)
            return _integer_power(av, bv)
        return _UOP_BINARY[op](av, bv)

    def operands(self, a: Any, b: Any, node: ast.AST | None = None) -> tuple[UOp, UOp]:
        """``a`` and ``b`` as UOps of one dtype (``svod.frontend.promotion``): two dtypes unify, a Python number
        takes the other's dtype (a float meeting an integer the platform's float), two numbers alone the
        platform's defaults; a weak value (``weak``) meeting a typed one is a number (``meets``)."""
        for v in (a, b):
            if not (isinstance(v, UOp) or is_number(v)):
                raise KernelSyntaxError(f"{describe(v)} in arithmetic", kernel=self.name, stage="build",
                                        value=describe(v))
        if isinstance(a, UOp) and isinstance(b, UOp):
            if self.weak(a) == self.weak(b):
                dtype = self.platform.unify(a.dtype, b.dtype)
            else:
                dtype = self.meets(a, b.dtype) if self.weak(a) else self.meets(b, a.dtype)
            return a.cast(dtype), b.cast(dtype)
        if not isinstance(a, UOp) and not isinstance(b, UOp):
            dtype = self.platform.unify(self.platform.alone(a), self.platform.alone(b))
            return self.cast(a, dtype), self.cast(b, dtype)
        if not isinstance(a, UOp):
            bv, av = self.operands(b, a, node)
            return av, bv
        dtype = self.meets(b, a.dtype)
        return a.cast(dtype), UOp.const(dtype, self.fitting(b, dtype))

    def meets(self, value: Number | UOp, other: DType) -> DType:
        """The dtype a Python number or a weak value (``weak``) takes meeting a typed value of ``other``: the
        other's where either is a float, as NEP 50 has it (a float meeting an integer, the platform's float);
        two integers unify (a weak integer meeting a narrow one in arithmetic is that one's first, ``held_by``)."""
        if not isinstance(value, UOp):
            return self.platform.weak(value, other)
        if value.dtype.is_float or other.is_float:
            return self.platform.weak(0.0 if value.dtype.is_float else 0, other)
        return self.platform.unify(value.dtype, other)

    def weak(self, value: UOp) -> bool:
        """Whether ``value`` is a Python number in plain Python: what stands for one (a size, a number
        argument), or arithmetic of such values and constants (a ``where``'s condition aside). It is weak as a
        number is: ``x_f32[i] * (1.0 / n)`` is a float32 product whether ``n`` is a size variable or, with
        ``static_shapes``, a constant. A constant alone is typed (``np.float64(0.0)``), and so is a conversion
        a kernel writes (``typed``)."""
        known = self._weak.get(value)
        if known is None:
            if value in self.numbers:
                known = True
            elif value.op not in _NUMBER_OPS or (value.op is Ops.CAST and value.src[0].dtype == value.dtype):
                known = False
            else:
                operands = value.src[1:] if value.op is Ops.WHERE else value.src
                known = any(self.weak(s) for s in operands) and \
                    all(s.op is Ops.CONST or self.weak(s) for s in operands)
            self._weak[value] = known
        return known

    def fitting(self, value: Any, dtype: DType) -> Any:
        """``value`` as it is, unless it is a Python int that the integer ``dtype`` does not hold: NumPy 2 then
        raises ``OverflowError`` (``a_i8[i] = 300``, ``a_i8[i] + 300``, ``np.int8(300)``, ``a_u8[i] = -1``)
        where a cast would wrap it, so the kernel is refused (the statement names the line). A comparison
        with such a number is no refusal: NumPy 2 answers it exactly (``compare``). An int argument stored
        into such an element is held to its values (``held_by``)."""
        if isinstance(value, UOp) and self.weak(value):
            self.held_by(value, dtype)
        if isinstance(value, int) and not isinstance(value, bool) and dtype.is_int and dtype != dtypes.index \
                and not dtype.min <= value <= dtype.max:
            raise KernelSyntaxError(f"Python integer {value} out of bounds for {dtype.name} (NumPy 2 raises "
                                    "OverflowError rather than wrap it)", kernel=self.name, stage="build",
                                    value=value)
        return value

    def settable(self, value: Any, dtype: DType) -> Any:
        """``value`` as an element of ``dtype`` is set to it: NumPy 2's setitem refuses an integer scalar of any
        type that ``dtype`` does not hold (``a_i8[i] = np.int64(300)``), where a conversion (``np.int8(...)``)
        wraps it, so an int argument stored is held to ``dtype``'s range whatever its own type (``held_by``)."""
        if isinstance(value, UOp) and value.op is Ops.DEFINE_VAR and not self.weak(value):
            return self.held_by(value, dtype)
        return value

    def held_by(self, value: UOp, dtype: DType) -> UOp:
        """A weak integer ``value`` meeting a narrow integer ``dtype`` (``a_i8[i] + n``, ``a_i8[i] = n``), as
        ``dtype``'s, where its values all fit it: NumPy 2 computes in ``dtype`` and raises ``OverflowError`` for
        a Python int past it, where a cast would wrap. An int argument or a size whose bounds are wider is held
        to ``dtype``'s range (``NarrowedIntError``: the kernel is translated again with those bounds, and a
        run's value past them is refused as NumPy refuses it); so is one that a sum or product of such an int
        and constants makes (``n - 200``: ``n`` is held to [72, 327]). Any other value (a sum of two ints,
        ``int(f)``) is left as it is, computed as wide as it may be."""
        if not (value.dtype.is_int and dtype.is_int and dtype != dtypes.index and dtype.itemsize < 8):
            return value
        lo, hi = int(dtype.min), int(dtype.max)
        if lo <= value.vmin and value.vmax <= hi:
            return value.cast(dtype)
        held = _holding(value, lo, hi)
        if held is None or is_internal(held[0].arg[0]):
            return value  # (svod's own ints, such as the random key, are not Python's: they wrap as written)
        var, bounds = held
        name = var.arg[0]
        raise NarrowedIntError(name, dtype, bounds, f"the int {name} meets {dtype.name} values: it is held to "
                               f"{list(bounds)}", kernel=self.name, stage="build", value=name)

    def typed(self, value: Any) -> Any:
        """``value`` as what a conversion the kernel writes makes (``np.float64(alpha)``, ``svod.int32(n)``):
        a numpy scalar, typed. A weak value is wrapped in a conversion to its own dtype, which ``weak`` reads
        as typed and simplification removes (a UOp is one node whatever made it, so the mark is a node)."""
        return UOp(Ops.CAST, value.dtype, (value,)) if isinstance(value, UOp) and self.weak(value) else value

    def cast(self, value: Any, dtype: DType) -> UOp:
        """``value`` converted to ``dtype`` as a cast converts it (a store's value too): a float to an integer
        truncates toward zero, saturating, an integer wraps."""
        if is_number(value):
            return UOp.const(dtype, convert(value, dtype))
        if not isinstance(value, UOp):
            raise KernelSyntaxError(f"cannot convert {describe(value)} to {dtype.name}", kernel=self.name,
                                    stage="build", value=describe(value))
        return value.cast(dtype)

    def truth(self, value: Any, node: ast.AST) -> UOp:
        if not isinstance(value, UOp):
            raise self.refuse(node, f"{describe(value)} is not a condition")
        if value.dtype == dtypes.bool:
            return value
        return value.ne(UOp.const(value.dtype, 0))

    def select(self, cond: UOp, a: Any, b: Any, node: ast.AST) -> Any:
        if not (isinstance(a, UOp) or is_number(a)) or not (isinstance(b, UOp) or is_number(b)):
            raise self.refuse(node, f"a local holds {describe(a)} on one branch and {describe(b)} on the other")
        av, bv = self.operands(a, b, node)
        return cond.where(av, bv)

    def logical_and(self, a: Any, b: Any) -> Any:
        if is_number(a):
            return b if a else False
        if is_number(b):
            return a if b else False
        return a & b

    def compare(self, name: str, a: Any, b: Any, node: ast.AST) -> Any:
        if is_number(a) and is_number(b):
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[name]
        if isinstance(a, UOp) and isinstance(b, UOp) and a.dtype.is_int and b.dtype.is_int and \
                a.dtype.is_unsigned != b.dtype.is_unsigned and not self.platform.unify(a.dtype, b.dtype).is_int:
            return _across_signs(name, a, b)
        if isinstance(a, UOp) != isinstance(b, UOp):
            beyond = _beyond_dtype(name, a, b) if isinstance(a, UOp) else _beyond_dtype(_FLIPPED[name], b, a)
            if beyond is not None:
                return beyond
        return _UOP_COMPARE[name](*self.operands(a, b, node))


INTERNAL_INTS = frozenset({KEY_VARIABLE, LAUNCH_VARIABLE})
"""The ``svod_`` names of ints svod's rewritings pass to a kernel; a user's other ``svod_...`` name is the user's."""


def is_internal(name: str) -> bool:
    """Whether svod, not the user, named the int ``name`` (its wrapping ints are not Python's)."""
    return name.startswith("_svod_") or name in INTERNAL_INTS


class NarrowedIntError(KernelSyntaxError):
    """An int argument's variable meets a narrow integer dtype in arithmetic or a store (``Arithmetic.held_by``):
    the kernel is translated again with the variable bounded to ``dtype``'s range (``svod.frontend.pykernel``)."""

    def __init__(self, variable: str, dtype: DType, bounds: tuple[int, int], message: str, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.variable = variable
        self.dtype = dtype
        self.bounds = bounds


# ---- helpers --------------------------------------------------------------------------------------------

def _holding(value: UOp, lo: int, hi: int) -> tuple[UOp, tuple[int, int]] | None:
    """The one variable weak int ``value`` is made of (an argument or a size) and the bounds on it that keep
    ``value`` within ``[lo, hi]``, undoing the sums and products with constants; None where ``value`` is
    another expression."""
    while value.op is not Ops.DEFINE_VAR:
        if lo > hi:
            return None
        constants = [s for s in value.src if s.op is Ops.CONST]
        others = [s for s in value.src if s.op is not Ops.CONST]
        if value.op is Ops.CAST and value.src[0].dtype.is_int and value.src[0].dtype.itemsize <= value.dtype.itemsize:
            value = value.src[0]
        elif value.op is Ops.NEG:
            value, lo, hi = value.src[0], -hi, -lo
        elif value.op in (Ops.ADD, Ops.SUB) and len(constants) == 1 and len(others) == 1:
            c = int(constants[0].arg) if value.op is Ops.ADD or value.src[1] is constants[0] else None
            if c is None:  # c - x
                value, lo, hi = others[0], int(constants[0].arg) - hi, int(constants[0].arg) - lo
            else:
                c = c if value.op is Ops.ADD else -c
                value, lo, hi = others[0], lo - c, hi - c
        elif value.op is Ops.MUL and len(constants) == 1 and len(others) == 1 and int(constants[0].arg) != 0:
            c = int(constants[0].arg)
            lo, hi = (lo, hi) if c > 0 else (-hi, -lo)
            value, lo, hi = others[0], -(-lo // abs(c)), hi // abs(c)
        else:
            return None
    return value, (lo, hi)


_NUMBER_OPS = ALU | {Ops.CAST, Ops.BITCAST}
"""What a Python number's value is computed by: arithmetic and conversions, no memory and no loop."""
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _across_signs(name: str, a: UOp, b: UOp) -> UOp:
    """``a <name> b`` of a signed and an unsigned integer no integer type holds both of (int64 and uint64),
    exactly, as NumPy 2 compares them: not in the float64 they promote to, which rounds past 2**53. A negative
    signed value is below every unsigned one; the others compare as unsigned."""
    if a.dtype.is_unsigned:
        return _across_signs(_FLIPPED[name], b, a)
    negative, unsigned = a < 0, _UOP_COMPARE[name](a.cast(dtypes.uint64), b.cast(dtypes.uint64))
    return negative | unsigned if name in ("<", "<=", "!=") else negative.ne(True) & unsigned


def _beyond_dtype(name: str, a: UOp, b: Any) -> bool | None:
    """``a <name> b`` of an integer value and a Python integer its dtype does not hold (``x_u8 < 300``): known
    now, as NumPy 2 compares them, where arithmetic with such a number is refused. None where ``b`` fits."""
    if not (a.dtype.is_int and isinstance(b, int) and not isinstance(b, bool)) or a.dtype.min <= b <= a.dtype.max:
        return None
    above = b > a.dtype.max
    return {"<": above, "<=": above, ">": not above, ">=": not above, "==": False, "!=": True}[name]


BINARY: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                            ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|",
                            ast.BitXor: "^", ast.BitAnd: "&"}
COMPARE: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UOP_COMPARE: dict[str, Callable[[UOp, UOp], UOp]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a.eq(b), "!=": lambda a, b: a.ne(b)}
_UOP_BINARY: dict[str, Callable[[UOp, UOp], UOp]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b, "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "&": lambda a, b: a & b}


def _python_binary(op: str, a: Any, b: Any) -> Any:
    """Two constants, computed now, as Python computes them; a zero divisor as NumPy's integer scalars divide
    by one (``//`` and ``%`` give 0) or IEEE 754 divides (``/``): a kernel never traps."""
    if op in ("//", "%") and isinstance(a, int) and isinstance(b, int) and b == 0:
        return 0
    if op == "/" and b == 0:
        return pymath.copysign(pymath.inf, a) * pymath.copysign(1.0, b) if a else pymath.nan
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
            "//": lambda: a // b, "%": lambda: a % b, "**": lambda: a ** b, "<<": lambda: a << b,
            ">>": lambda: a >> b, "|": lambda: a | b, "^": lambda: a ^ b, "&": lambda: a & b}[op]()


_INTEGER_ONLY = frozenset({"<<", ">>", "&", "|", "^"})


def _floored(op: str, a: UOp, b: UOp) -> UOp:
    """Python's ``a // b`` or ``a % b``: the quotient rounded down, the remainder with the divisor's sign. On
    integers from the IR's truncating IDIV and MOD, corrected where the remainder and the divisor have other
    signs (nothing to correct where both are proven non-negative); a zero divisor gives 0 for both, as NumPy's
    integer scalars do (the IR's IDIV gives the dividend). On floats ``_floored_float``."""
    if a.dtype.is_float:
        return _floored_float(op, a, b)
    floored = _floored_integer(op, a, b)
    if op == "//" and b.vmin <= 0 <= b.vmax:
        return b.ne(0).where(floored, UOp.const(a.dtype, 0))
    return floored


def _floored_integer(op: str, a: UOp, b: UOp) -> UOp:
    truncated = a // b if op == "//" else a % b
    if a.vmin >= 0 and b.vmin >= 0:
        return truncated
    remainder = a % b
    across = remainder.ne(0) & (remainder < 0).ne(b < 0)
    if op == "//":
        return truncated - across.cast(a.dtype)
    return across.where(remainder + b, remainder)


def _integer_power(base: UOp, exponent: UOp) -> UOp:
    """NumPy's integer ``base ** exponent`` for an exponent that is never negative: a product of squares of the
    base, wrapping as the multiplications do, one per bit the exponent may have set (a constant's bits picked
    now, a value's at run time)."""
    bits = int(exponent.vmax).bit_length()
    result, square = UOp.const(base.dtype, 1), base
    for bit in range(bits):
        if exponent.op is Ops.CONST:
            result = result * square if (int(exponent.arg) >> bit) & 1 else result
        else:
            result = ((exponent >> bit) & 1).ne(0).where(result * square, result)
        if bit + 1 < bits:
            square = square * square
    return result


def _floored_float(op: str, a: UOp, b: UOp) -> UOp:
    """Python's float ``a // b`` and ``a % b`` as NumPy computes them (``np.floor_divide``, ``np.remainder``),
    from the exact truncated remainder ``fmod``: the remainder moved to the divisor's side (a zero one takes
    the divisor's sign), the quotient ``(a - remainder) / b`` rounded to the integer it is. ``a - floor(a / b)
    * b`` would be wrong by up to the dividend's last unit, which dwarfs the divisor once the quotient passes
    the float's precision. A zero divisor gives ``a / b`` and NaN, as NumPy's do (Python raises)."""
    exact = a.fmod(b)
    across = exact.ne(0) & (exact < 0).ne(b < 0)
    if op == "%":
        signed_zero = (b < 0).where(UOp.const(a.dtype, -0.0), UOp.const(a.dtype, 0.0))
        return exact.ne(0).where(across.where(exact + b, exact), signed_zero)
    whole = (a - exact) / b
    whole = across.where(whole - 1.0, whole)
    floor = whole.floor()
    rounded = (whole - floor > 0.5).where(floor + 1.0, floor)
    quotient = whole.ne(0).where(rounded, (a / b) * 0.0)  # a zero with the sign of a / b
    return b.ne(0).where(quotient, a / b)


def builtin_extreme(op: Ops, first: UOp, second: UOp) -> UOp:
    """Python's ``max(first, second)`` (``op`` MAX) or ``min`` (MIN): ``second`` where it is strictly beyond
    ``first``, else ``first``. On floats that is not IEEE 754's maximumNumber: a NaN first is kept and a NaN
    second loses, and of two equal zeros the first is kept. Integers have no such cases: the op itself."""
    if not first.dtype.is_float:
        return first.alu(op, second)
    beyond = first < second if op is Ops.MAX else second < first
    return beyond.where(second, first)


def ufunc_extreme(op: Ops, first: UOp, second: UOp) -> UOp:
    """NumPy's ``np.maximum(first, second)`` (``op`` MAX) or ``np.minimum`` (MIN): a NaN of either operand wins;
    otherwise ``first`` where it is strictly beyond ``second``, else ``second`` (of equal zeros, the second, as
    NumPy's loops pick). ``np.fmax`` and ``np.fmin`` are maximumNumber and minimumNumber: MAX and MIN."""
    if not first.dtype.is_float:
        return first.alu(op, second)
    beyond = second < first if op is Ops.MAX else first < second
    return (beyond | first.ne(first)).where(first, second)


__all__ = ["Arithmetic", "BINARY", "COMPARE", "builtin_extreme", "ufunc_extreme"]
