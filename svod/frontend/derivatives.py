"""Each operation's derivative, in one place: the rules ``svod.vjp`` and ``svod.Tape`` build a kernel's adjoint
from (``svod.frontend.adjoint``).

A rule takes the operands, the result and the result's adjoint (each a name or a constant of the adjoint
kernel's source) and gives each operand's share of that adjoint, as the source of an expression; None where
the share is zero. Comparisons, ``floor``, ``ceil``, ``trunc``, ``round``, ``//`` and casts to an integer have
zero derivative, as in JAX; where two operands of ``max``/``min`` tie, each takes half.
The math functions are called through ``svod.math`` as ``MATH`` names it in the adjoint's source.
"""

from __future__ import annotations

import ast
import math as pymath
from collections.abc import Callable, Sequence

MATH = "_svod_math"
"""What the adjoint kernel's source calls ``svod.math``."""

Shares = tuple[str | None, ...]
Rule = Callable[[Sequence[str], str, str], Shares]
"""``(operands, result, adjoint)`` → each operand's share of the adjoint."""


def _call(name: str, *args: str) -> str:
    return f"{MATH}.{name}({', '.join(args)})"


def _winner(a: str, b: str, r: str, g: str) -> str:
    """The share of ``a`` in ``r``, a max or min of ``a`` and ``b``: all of the adjoint where ``a`` alone is the
    result, half where they tie. Told by the result, not by comparing the operands, so a NaN takes the rule of
    the function that met it: the number ``fmax`` (``svod.math.maximum``) keeps over a NaN takes the adjoint;
    where a NaN is the result (``np.maximum``), neither operand does."""
    return f"({g} if {a} == {r} and {b} != {r} else {g} * 0.5 if {a} == {b} else 0.0)"


def _larger(a: str, b: str, g: str) -> str:
    """The share of ``a`` in ``max(a, b)``: all of the adjoint where ``a`` is larger, half where they tie."""
    return f"({g} if {a} > {b} else {g} * 0.5 if {a} == {b} else 0.0)"


def _smaller(a: str, b: str, g: str) -> str:
    return f"({g} if {a} < {b} else {g} * 0.5 if {a} == {b} else 0.0)"


def _power(o: Sequence[str], r: str, g: str) -> Shares:
    a, b = o
    return (f"{g} * {b} * {a} ** ({b} - 1)", f"({g} * {r} * {_call('log', a)} if {a} > 0 else 0.0)")


def _clamp(o: Sequence[str], r: str, g: str) -> Shares:
    x, lo, hi = o
    inside = f"({g} if {lo} < {x} < {hi} else {g} * 0.5 if {x} == {lo} or {x} == {hi} else 0.0)"
    return inside, _larger(lo, x, g), _smaller(hi, x, g)


def _zero(o: Sequence[str], r: str, g: str) -> Shares:
    return (None,) * len(o)


BINARY: dict[type[ast.operator], Rule] = {
    ast.Add: lambda o, r, g: (g, g),
    ast.Sub: lambda o, r, g: (g, f"-{g}"),
    ast.Mult: lambda o, r, g: (f"{g} * {o[1]}", f"{g} * {o[0]}"),
    ast.Div: lambda o, r, g: (f"{g} / {o[1]}", f"-{g} * {r} / {o[1]}"),
    ast.Pow: _power,
    ast.FloorDiv: _zero,
    ast.Mod: lambda o, r, g: (g, f"-{g} * ({o[0]} // {o[1]})"),
}
"""The arithmetic operators of a kernel's expressions: ``a % b`` is ``a - b * (a // b)``, Python's floored
remainder (of floats too)."""

UNARY: dict[type[ast.unaryop], Rule] = {
    ast.USub: lambda o, r, g: (f"-{g}",),
    ast.UAdd: lambda o, r, g: (g,),
}

FUNCTIONS: dict[str, Rule] = {
    "exp": lambda o, r, g: (f"{g} * {r}",),
    "exp2": lambda o, r, g: (f"{g} * {r} * {pymath.log(2)!r}",),
    "log": lambda o, r, g: (f"{g} / {o[0]}",),
    "log2": lambda o, r, g: (f"{g} / ({o[0]} * {pymath.log(2)!r})",),
    "sin": lambda o, r, g: (f"{g} * {_call('cos', o[0])}",),
    "cos": lambda o, r, g: (f"-{g} * {_call('sin', o[0])}",),
    "tan": lambda o, r, g: (f"{g} * (1.0 + {r} * {r})",),
    "tanh": lambda o, r, g: (f"{g} * (1.0 - {r} * {r})",),
    "erf": lambda o, r, g: (f"{g} * {2 / pymath.sqrt(pymath.pi)!r} * {_call('exp', f'-{o[0]} * {o[0]}')}",),
    "sqrt": lambda o, r, g: (f"{g} * 0.5 / {r}",),
    "rsqrt": lambda o, r, g: (f"{g} * -0.5 * {r} / {o[0]}",),
    "sigmoid": lambda o, r, g: (f"{g} * {r} * (1.0 - {r})",),
    "abs": lambda o, r, g: (f"({g} if {o[0]} > 0 else -{g} if {o[0]} < 0 else 0.0)",),
    "pow": _power,
    "fmod": lambda o, r, g: (g, f"-{g} * {_call('trunc', f'{o[0]} / {o[1]}')}"),
    "maximum": lambda o, r, g: (_winner(o[0], o[1], r, g), _winner(o[1], o[0], r, g)),
    "minimum": lambda o, r, g: (_winner(o[0], o[1], r, g), _winner(o[1], o[0], r, g)),
    "clamp": _clamp,
    "floor": _zero,
    "ceil": _zero,
    "trunc": _zero,
    "round": _zero,
}
"""The math functions of kernels (``svod.math``, ``pylang.MATH_FUNCTIONS``) by the name they have there."""
FUNCTIONS["fabs"] = FUNCTIONS["abs"]



def _hypot(o: Sequence[str], r: str, g: str) -> Shares:
    return f"({g} * {o[0]} / {r} if {r} != 0 else 0.0)", f"({g} * {o[1]} / {r} if {r} != 0 else 0.0)"


def _arctan2(o: Sequence[str], r: str, g: str) -> Shares:
    """``x / (x*x + y*y)`` and ``-y / (x*x + y*y)`` with both operands first divided by the larger magnitude
    ``s``: the square of either would leave the float's range (a square below about 1e-38 in float32 is 0, and
    the share 0 instead of about 1/x)."""
    y, x = o
    s = f"{_call('maximum', _call('abs', x), _call('abs', y))}"
    xs, ys = f"({x} / {s})", f"({y} / {s})"
    square = f"({s} * ({xs} * {xs} + {ys} * {ys}))"
    return f"({g} * {xs} / {square} if {s} != 0 else 0.0)", f"(-{g} * {ys} / {square} if {s} != 0 else 0.0)"


def _logaddexp(power: str) -> Rule:
    """``logaddexp``'s (``power`` ``exp``) or ``logaddexp2``'s (``exp2``) rule: each operand's share is the
    logistic function of its lead over the other, ``1 / (1 + power(b - a))``, which holds where one operand is
    infinite (``exp(a - r)`` there is ``exp(inf - inf)``, a NaN); half each where they are equal (two
    infinities of one sign too, the limit along equal operands)."""
    def rule(o: Sequence[str], r: str, g: str) -> Shares:
        a, b = o
        return (f"({g} / (1.0 + {_call(power, f'{b} - {a}')}) if {a} != {b} else {g} * 0.5)",
                f"({g} / (1.0 + {_call(power, f'{a} - {b}')}) if {a} != {b} else {g} * 0.5)")
    return rule


HELPERS: dict[str, Rule] = {
    "log1p": lambda o, r, g: (f"{g} / (1.0 + {o[0]})",),
    "expm1": lambda o, r, g: (f"{g} * ({r} + 1.0)",),
    "sinh": lambda o, r, g: (f"{g} * 0.5 * ({_call('exp', o[0])} + {_call('exp', f'-{o[0]}')})",),
    "cosh": lambda o, r, g: (f"{g} * 0.5 * ({_call('exp', o[0])} - {_call('exp', f'-{o[0]}')})",),
    "arcsinh": lambda o, r, g: (f"{g} / {_call('sqrt', f'{o[0]} * {o[0]} + 1.0')}",),
    "arccosh": lambda o, r, g: (f"{g} / {_call('sqrt', f'{o[0]} * {o[0]} - 1.0')}",),
    "arctanh": lambda o, r, g: (f"{g} / (1.0 - {o[0]} * {o[0]})",),
    "arctan": lambda o, r, g: (f"{g} / (1.0 + {o[0]} * {o[0]})",),
    "arcsin": lambda o, r, g: (f"{g} / {_call('sqrt', f'1.0 - {o[0]} * {o[0]}')}",),
    "arccos": lambda o, r, g: (f"-{g} / {_call('sqrt', f'1.0 - {o[0]} * {o[0]}')}",),
    "cbrt": lambda o, r, g: (f"{g} / (3.0 * {r} * {r})",),
    "arctan2": _arctan2,
    "hypot": _hypot,
    "logaddexp": _logaddexp("exp"),
    "logaddexp2": _logaddexp("exp2"),
    "log10": lambda o, r, g: (f"{g} / ({o[0]} * {pymath.log(10)!r})", None),
}
"""NumPy's float functions that svod's rewriting of array statements computes with helpers of its own
(``svod.frontend.array_math``), by NumPy's name: the derivative of the function, not of the helper's steps
(``log10``'s second operand is a tolerance). Where ``hypot`` and ``arctan2`` have none (both operands 0), 0.0."""

BUILTINS: dict[str, str] = {"abs": "abs", "max": "maximum", "min": "minimum"}
"""Python's built-in functions of two operands (one for ``abs``) a kernel calls, as the math function whose rule
they take."""


def float_cast(o: Sequence[str], r: str, g: str) -> Shares:
    """A conversion to a float type (``float(x)``, ``svod.float32(x)``): the adjoint passes through."""
    return (g,)


__all__ = ["BINARY", "BUILTINS", "FUNCTIONS", "HELPERS", "MATH", "UNARY", "Rule", "float_cast"]
