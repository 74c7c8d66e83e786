"""NumPy's ufuncs beyond the kernel's own math in ``@svod.jit``'s array statements (``svod.frontend.arrays``):
``np.log1p``, ``np.expm1``, the hyperbolic and inverse trigonometric functions, ``np.cbrt``, ``np.sinc``,
``np.arctan2``, ``np.hypot``, ``np.copysign``, ``np.logaddexp``, ``np.fmod`` of integers, ``np.round`` to decimals,
and the ufunc spellings of the operators (``np.add``, ``np.power``, ``np.greater`` ...).

Each function the kernel's math lacks is written here in the kernel language, from its math (``exp``, ``log``,
``sqrt``) and ``np.signbit``, as an ``@svod.func`` helper the element's code calls (``_svod_m_log1p(x)``) and
the kernel inlines: a float16 element computes in float32 and rounds once, as NumPy's float16 loops do. The
forms are exact identities, chosen to keep NumPy's values at the edges: ``log1p(x)`` near 0 is ``2 atanh(x /
(2 + x))``'s series (right to a few ulp where ``log(1 + x)`` loses every digit), ``atan`` halves its
argument three times (``atan(t) = 2 atan(t / (1 + sqrt(1 + t*t)))``) to a short series, and each function
keeps its special values (signed zeros, infinities, NaN) as C99's and NumPy's do. Near 0, ``log1p`` and
``expm1`` are their series, which read no ``log`` or ``exp`` near 1 (where a GPU's may err by 2**-21).
"""

from __future__ import annotations

import ast
import math
from abc import abstractmethod
from typing import Any

import numpy as np

from svod.frontend import pylang
from svod.frontend.array_calls import ArrayCalls
from svod.frontend.array_exprs import Expr, Value, numpy, typed
from svod.frontend.nodes import call, constant, copied, load

LN2 = math.log(2.0)
LN10 = math.log(10.0)
LOG2E = 1.0 / math.log(2.0)
PI = math.pi
HALF_PI = math.pi / 2
QUARTER_PI = math.pi / 4
TINY = 2.0 ** -28
"""Below this, ``asinh``, ``atanh`` and ``atan`` are their argument to the last bit (the cube's term is past it
in float64), which also keeps a zero's sign."""
HUGE = 2.0 ** 28
"""Past this, ``asinh(x)`` and ``acosh(x)`` are ``log(2x)`` to the last bit (where ``x*x`` may overflow)."""


@pylang.func
def log1p(x: Any) -> Any:
    t = x * (2.0 / (2.0 + x))  # log(1 + x) = 2 atanh(t / 2): a series in (t / 2) ** 2 <= 1/25 near 0
    z = 0.25 * (t * t)
    p = z * (1.0 / 21.0) + 1.0 / 19.0
    p = z * p + 1.0 / 17.0
    p = z * p + 1.0 / 15.0
    p = z * p + 1.0 / 13.0
    p = z * p + 1.0 / 11.0
    p = z * p + 1.0 / 9.0
    p = z * p + 1.0 / 7.0
    p = z * p + 1.0 / 5.0
    p = z * p + 1.0 / 3.0
    near = t + t * (z * p)
    return near if -0.25 < x < 0.5 else np.log(1.0 + x)


@pylang.func
def expm1(x: Any) -> Any:
    p = x * (1.0 / 6227020800.0) + 1.0 / 479001600.0  # x * (1 + x/2! + ... + x**12/13!) for |x| < 1/4
    p = x * p + 1.0 / 39916800.0
    p = x * p + 1.0 / 3628800.0
    p = x * p + 1.0 / 362880.0
    p = x * p + 1.0 / 40320.0
    p = x * p + 1.0 / 5040.0
    p = x * p + 1.0 / 720.0
    p = x * p + 1.0 / 120.0
    p = x * p + 1.0 / 24.0
    p = x * p + 1.0 / 6.0
    p = x * p + 0.5
    near = x * (1.0 + x * p)  # of -0.0, -0.0
    return near if abs(x) < 0.25 else np.exp(x) - 1.0


@pylang.func
def sinh(x: Any) -> Any:
    e = expm1(x)
    h = np.exp(0.5 * abs(x))  # e**|x| / 2 as h * h / 2: finite wherever sinh is
    large = h * (0.5 * h) - (0.5 / h) / h
    return 0.5 * (e + e / (e + 1.0)) if abs(x) < 1.0 else (large if x > 0.0 else -large)


@pylang.func
def cosh(x: Any) -> Any:
    h = np.exp(0.5 * abs(x))
    return h * (0.5 * h) + (0.5 / h) / h


@pylang.func
def arcsinh(x: Any) -> Any:
    a = abs(x)
    r = np.log(a) + LN2 if a > HUGE else log1p(a + a * a / (1.0 + np.sqrt(1.0 + a * a)))
    return x if a < TINY else (r if x > 0.0 else -r)


@pylang.func
def arccosh(x: Any) -> Any:
    t = x - 1.0
    r = np.log(x) + LN2 if x > HUGE else log1p(t + np.sqrt(t * (t + 2.0)))
    return r if x >= 1.0 else np.nan


@pylang.func
def arctanh(x: Any) -> Any:
    a = abs(x)
    r = 0.5 * log1p(2.0 * a / (1.0 - a))
    return x if a < TINY else (r if x > 0.0 else -r)


@pylang.func
def arctan(x: Any) -> Any:
    a = abs(x)
    t = 1.0 / a if a > 1.0 else a
    t = t / (1.0 + np.sqrt(1.0 + t * t))
    t = t / (1.0 + np.sqrt(1.0 + t * t))
    t = t / (1.0 + np.sqrt(1.0 + t * t))  # |t| <= tan(pi / 32): the series' ninth term is past the last bit
    s = t * t
    p = s * (1.0 / 17.0) - 1.0 / 15.0
    p = s * p + 1.0 / 13.0
    p = s * p - 1.0 / 11.0
    p = s * p + 1.0 / 9.0
    p = s * p - 1.0 / 7.0
    p = s * p + 1.0 / 5.0
    p = s * p - 1.0 / 3.0
    r = 8.0 * (t + t * (s * p))
    r = HALF_PI - r if a > 1.0 else r
    return x if a < TINY else (r if x > 0.0 else -r)


@pylang.func
def arcsin(x: Any) -> Any:
    return arctan(x / np.sqrt((1.0 - x) * (1.0 + x)))


@pylang.func
def arccos(x: Any) -> Any:
    return 2.0 * arctan(np.sqrt((1.0 - x) / (1.0 + x)))


@pylang.func
def arctan2(y: Any, x: Any) -> Any:
    b = abs(y)
    q = arctan(b / x)
    m = q if x > 0.0 else q + PI
    m = (0.0 if x > 0.0 else PI) if np.isinf(x) else m
    m = HALF_PI if x == 0.0 else m
    m = ((QUARTER_PI if x > 0.0 else 3.0 * QUARTER_PI) if np.isinf(x) else HALF_PI) if np.isinf(b) else m
    m = (0.0 if x > 0.0 or (x == 0.0 and not np.signbit(x)) else PI) if b == 0.0 else m
    m = np.nan if np.isnan(x) or np.isnan(y) else m
    return -m if np.signbit(y) else m


@pylang.func
def hypot(x: Any, y: Any) -> Any:
    a = abs(x)
    b = abs(y)
    m = a if a > b else b
    n = b if a > b else a
    r = n / m
    v = m if m == 0.0 else m * np.sqrt(1.0 + r * r)
    v = np.nan if np.isnan(a) or np.isnan(b) else v
    return np.inf if np.isinf(a) or np.isinf(b) else v


@pylang.func
def copysign(x: Any, y: Any) -> Any:
    return -abs(x) if np.signbit(y) else abs(x)


@pylang.func
def cbrt(x: Any) -> Any:
    a = abs(x)
    y = a ** (1.0 / 3.0)  # within a few ulp (a third is rounded); one Newton step, written so that no
    y = y - (y - a / (y * y)) * (1.0 / 3.0)  # square or cube of it leaves the range: a subnormal's is right too
    return x if a == 0.0 or np.isinf(a) or np.isnan(a) else (-y if x < 0.0 else y)


@pylang.func
def logaddexp(x: Any, y: Any) -> Any:
    d = x - y
    r = x + log1p(np.exp(-d)) if d > 0.0 else (y + log1p(np.exp(d)) if d <= 0.0 else d)
    return x + LN2 if x == y else r


@pylang.func
def logaddexp2(x: Any, y: Any) -> Any:
    d = x - y
    r = x + LOG2E * log1p(np.exp2(-d)) if d > 0.0 else (y + LOG2E * log1p(np.exp2(d)) if d <= 0.0 else d)
    return x + 1.0 if x == y else r


@pylang.func
def log10(x: Any, snap: Any) -> Any:
    r = np.log(x) * (1.0 / LN10)
    k = np.rint(r)
    return k if abs(r - k) <= snap * abs(k) else r  # 10.0 ** k itself gives k, as a correctly rounded log10


@pylang.func
def integer_fmod(x: Any, y: Any) -> Any:
    r = x % y  # Python's remainder takes the divisor's sign (and is 0 of a zero divisor, as NumPy's fmod)
    return r - y if r != 0 and (r < 0) != (x < 0) else r


def _helper(fn: pylang.Func) -> str:
    return f"_svod_m_{fn.fn.__name__}"


FLOAT_HELPERS: dict[str, pylang.Func] = {
    "log1p": log1p, "expm1": expm1, "sinh": sinh, "cosh": cosh, "arcsinh": arcsinh, "arccosh": arccosh,
    "arctanh": arctanh, "arctan": arctan, "arcsin": arcsin, "arccos": arccos, "arctan2": arctan2, "hypot": hypot,
    "copysign": copysign, "cbrt": cbrt, "logaddexp": logaddexp, "logaddexp2": logaddexp2}
"""NumPy's float ufuncs written here, by NumPy's name."""
MATH_HELPERS: dict[str, pylang.Func] = {_helper(fn): fn for fn in [*FLOAT_HELPERS.values(), log10, integer_fmod]}
"""The names the rewritten function calls the helpers by (``lower_arrays`` adds them to its names)."""
SCALED = {"degrees": 180.0 / PI, "rad2deg": 180.0 / PI, "radians": PI / 180.0,
          "deg2rad": PI / 180.0}
"""The angle conversions: the element times a constant."""
OPERATORS: dict[str, type[ast.operator]] = {
    "add": ast.Add, "subtract": ast.Sub, "multiply": ast.Mult, "divide": ast.Div, "true_divide": ast.Div,
    "floor_divide": ast.FloorDiv, "remainder": ast.Mod, "mod": ast.Mod, "power": ast.Pow,
    "bitwise_and": ast.BitAnd, "bitwise_or": ast.BitOr, "bitwise_xor": ast.BitXor, "left_shift": ast.LShift,
    "right_shift": ast.RShift}
"""The ufuncs that are Python's operators (``np.power(a, b)`` is ``a ** b``)."""
COMPARISONS: dict[str, type[ast.cmpop]] = {
    "greater": ast.Gt, "greater_equal": ast.GtE, "less": ast.Lt, "less_equal": ast.LtE, "equal": ast.Eq,
    "not_equal": ast.NotEq}
"""The ufuncs that are Python's comparisons."""
UFUNCS: dict[str, int] = {
    **{name: 2 for name in [*OPERATORS, *COMPARISONS, "fmod", "float_power"]},
    **{name: fn.fn.__code__.co_argcount for name, fn in FLOAT_HELPERS.items()},
    **{name: 1 for name in ["square", "reciprocal", "rint", "log10", "sinc", *SCALED]}}
"""Every ufunc of this module, and how many operands it takes."""


class ArrayMath(ArrayCalls):
    """The ufuncs of this module, as the statements' ``ArrayRewriter`` calls them."""

    @abstractmethod
    def binary(self, node: ast.AST, left: Value, right: Value, op: type[ast.operator], operator: bool = True
               ) -> Value: ...

    def extra_function(self, node: ast.Call, name: str, args: list[Value]) -> Value | None:
        if name in ("round", "around") and args and isinstance(args[0], Expr):
            if len(node.args) > 2 or any(k.arg != "decimals" for k in node.keywords):
                raise self.refuse(node, f"np.{name} takes an array and its decimals here (no out=)")
            decimals = next((k.value for k in node.keywords if k.arg == "decimals"), None)
            return self.rounded(node, args[0], node.args[1] if len(node.args) > 1 else decimals)
        if name not in UFUNCS or len(args) != UFUNCS[name]:
            return super().extra_function(node, name, args)
        if node.keywords:
            raise self.refuse(node, f"np.{name} takes its operands alone here (no out=, where=, dtype=)")
        if name in OPERATORS:
            return self.binary(node, args[0], args[1], OPERATORS[name], operator=False)
        if name in COMPARISONS:
            op = COMPARISONS[name]
            return self.elementwise(node, lambda c: ast.Compare(c[0], [op()], [c[1]]), np.dtype(bool), *args)
        if name in FLOAT_HELPERS:
            return self.helped(node, name, args)
        if name == "fmod":
            return self.fmod(node, args[0], args[1])
        if name == "float_power":
            dtype = self.dtype_of(node, np.float_power, *args)
            return self.elementwise(node, lambda c: ast.BinOp(_as(c[0], args[0], dtype), ast.Pow(),
                                                              _as(c[1], args[1], dtype)), dtype, *args)
        return self.one_argument(node, name, args[0])

    def one_argument(self, node: ast.Call, name: str, x: Value) -> Expr:
        """``np.square``, ``np.reciprocal``, ``np.rint``, ``np.log10``, ``np.sinc`` and the angle conversions."""
        dtype = self.dtype_of(node, getattr(np, name), x)
        if name == "square":
            return self.elementwise(node, lambda c: c[0] if dtype == np.bool_ else typed(
                ast.BinOp(c[0], ast.Mult(), c[0]), dtype), dtype, x)
        if name == "reciprocal":
            if dtype.kind == "c":
                return self.elementwise(node, lambda c: call(numpy("reciprocal"), c[0]), dtype, x)
            if dtype.kind != "f":
                raise self.refuse(node, f"np.reciprocal of {dtype} (NumPy's truncates to 0 but of 1 and -1, and "
                                        "of 0 gives the minimum): divide 1.0 by it")
            return self.elementwise(node, lambda c: ast.BinOp(constant(1.0), ast.Div(), _as(c[0], x, dtype)),
                                    dtype, x)
        if name == "rint":
            return self.elementwise(node, lambda c: call(numpy("rint"), _as(c[0], x, dtype)), dtype, x)
        if name == "sinc":
            return self.elementwise(node, lambda c: _sinc(_as(c[0], x, dtype), dtype), dtype, x)
        if name == "log10":  # a result within 8 ulp of an integer is that integer (the log's own error: 4)
            return self.helped(node, name, [x], 8.0 * float(np.finfo(np.float32 if dtype == np.float16 else dtype).eps))
        return self.elementwise(node, lambda c: ast.BinOp(_as(c[0], x, dtype), ast.Mult(), constant(SCALED[name])),
                                dtype, x)

    def helped(self, node: ast.Call, name: str, args: list[Value], *constants: float) -> Expr:
        """A ufunc of ``FLOAT_HELPERS`` (or ``log10``): its helper called on the operands as floats of NumPy's
        dtype (a float16 in float32), and on ``constants``."""
        dtype = self.dtype_of(node, getattr(np, name), *args)
        computed = np.dtype(np.float32) if dtype == np.float16 else dtype
        helper = _helper(log10 if name == "log10" else FLOAT_HELPERS[name])

        def element(c: list[ast.expr]) -> ast.expr:
            made = call(load(helper), *(_as(e, a, computed) for e, a in zip(c, args, strict=True)),
                        *map(constant, constants))
            return typed(made, dtype) if computed != dtype else made
        return self.elementwise(node, element, dtype, *args)

    def fmod(self, node: ast.Call, x: Value, y: Value) -> Expr:
        """``np.fmod``: the remainder with the dividend's sign (C's), of floats the kernel's own; of integers
        from Python's, 0 where the divisor is."""
        dtype = self.dtype_of(node, np.fmod, x, y)
        fn = numpy("fmod") if dtype.kind == "f" else load(_helper(integer_fmod))
        return self.elementwise(node, lambda c: call(copied(fn), _as(c[0], x, dtype), _as(c[1], y, dtype)),
                                dtype, x, y)

    def rounded(self, node: ast.Call, x: Expr, decimals: ast.expr | None) -> Expr:
        """``np.round(x, decimals)`` (``np.around``, ``x.round``) as NumPy computes it: ``rint(x * 10**d) /
        10**d`` (``rint(x / 10**-d) * 10**-d`` for a negative ``d``); an integer array is itself."""
        places = 0 if decimals is None else self.host_int(decimals)
        assert places is not None
        dtype = self.dtype_of(node, np.round, x)
        if dtype.kind != "f":
            if places < 0:
                raise self.refuse(node, f"np.round of {dtype} to {places} decimals (to tens, hundreds ...) is not "
                                        "one svod has; round a float copy")
            return self.elementwise(node, lambda c: c[0], dtype, x)
        scale = 10.0 ** abs(places)
        grow, shrink = (ast.Mult, ast.Div) if places >= 0 else (ast.Div, ast.Mult)

        def element(c: list[ast.expr]) -> ast.expr:
            if places == 0:
                return call(numpy("rint"), c[0])
            return ast.BinOp(call(numpy("rint"), ast.BinOp(c[0], grow(), constant(scale))), shrink(), constant(scale))
        return self.elementwise(node, element, dtype, x)


def _sinc(x: ast.expr, dtype: np.dtype) -> ast.expr:
    """NumPy's ``sinc``, step by step in ``dtype``: ``y = pi * x``, the dtype's epsilon where that is 0 (so 1
    there), then ``sin(y) / y``."""
    y = typed(ast.BinOp(typed(constant(PI), dtype), ast.Mult(), x), dtype)
    y = ast.IfExp(ast.Compare(y, [ast.NotEq()], [constant(0)]), y, typed(constant(float(np.finfo(dtype).eps)), dtype))
    return ast.BinOp(typed(call(numpy("sin"), y), dtype), ast.Div(), y)


def _as(element: ast.expr, operand: Value, dtype: np.dtype) -> ast.expr:
    """An operand's element as ``dtype`` (a conversion only where it is of another)."""
    return element if isinstance(operand, Expr) and operand.dtype == dtype else typed(element, dtype)


__all__ = ["MATH_HELPERS", "ArrayMath"]
