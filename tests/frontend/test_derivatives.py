"""The rules of derivatives: one for each math function a kernel has, each agreeing with central finite
differences of the function as plain Python computes it (``svod.math`` outside a kernel)."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend import pylang
from svod.frontend.derivatives import BINARY, FUNCTIONS, HELPERS, MATH, UNARY

POINTS = {
    "log": [(0.3,), (2.5,)], "log2": [(0.3,), (2.5,)], "sqrt": [(0.3,), (4.0,)], "rsqrt": [(0.3,), (4.0,)],
    "pow": [(1.3, 2.5), (0.7, -1.5)], "fmod": [(5.3, 1.7), (-4.1, 1.5)], "maximum": [(0.3, -1.0), (-2.0, 0.5)],
    "minimum": [(0.3, -1.0), (-2.0, 0.5)], "clamp": [(0.3, -1.0, 1.0), (-2.0, -1.0, 1.0), (3.0, -1.0, 1.0)],
    "tan": [(0.4,), (-1.1,)],
}
"""Points away from where a function's derivative jumps; every other function of one operand is tried at
``DEFAULT``."""
DEFAULT = [(0.37,), (-1.3,), (2.1,)]
ZERO = {"floor", "ceil", "trunc", "round"}


def _shares(rule, operands: tuple[float, ...], result: float, adjoint: float) -> list[float]:
    """A rule's shares, evaluated as Python evaluates the adjoint kernel's source."""
    names = {f"o{k}": v for k, v in enumerate(operands)} | {"r": result, "g": adjoint, MATH: svod.math}
    shares = rule([f"o{k}" for k in range(len(operands))], "r", "g")
    return [0.0 if share is None else float(eval(share, names)) for share in shares]


def test_every_math_function_of_a_kernel_has_one_rule():
    assert set(FUNCTIONS) == set(pylang.MATH_FUNCTIONS)
    assert set(UNARY) == {ast.USub, ast.UAdd}
    assert {ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow} <= set(BINARY)


@pytest.mark.parametrize("name", sorted(pylang.MATH_FUNCTIONS))
def test_each_rule_agrees_with_central_differences(name):
    fn = getattr(svod.math, name)
    for point in POINTS.get(name, DEFAULT):
        shares = _shares(FUNCTIONS[name], point, float(fn(*point)), 0.75)
        for k in range(len(point)):
            h = 1e-6
            up, down = list(point), list(point)
            up[k] += h
            down[k] -= h
            expected = 0.0 if name in ZERO else 0.75 * (float(fn(*up)) - float(fn(*down))) / (2 * h)
            assert shares[k] == pytest.approx(expected, rel=1e-6, abs=1e-8), (name, point, k)


@pytest.mark.parametrize("op, fn", [(ast.Add, np.add), (ast.Sub, np.subtract), (ast.Mult, np.multiply),
                                    (ast.Div, np.divide), (ast.Pow, np.power), (ast.Mod, np.mod)])
def test_each_operator_agrees_with_central_differences(op, fn):
    point = {ast.Pow: (1.7, 2.6), ast.Mod: (-5.3, 1.7)}.get(op, (1.7, -0.6))
    shares = _shares(BINARY[op], point, float(fn(*point)), -1.25)
    for k in range(2):
        up, down = list(point), list(point)
        up[k] += 1e-6
        down[k] -= 1e-6
        assert shares[k] == pytest.approx(-1.25 * (fn(*up) - fn(*down)) / 2e-6, rel=1e-6), (op, k)


def test_ties_of_max_and_min_share_the_adjoint_equally():
    assert _shares(FUNCTIONS["maximum"], (2.0, 2.0), 2.0, 1.0) == [0.5, 0.5]
    assert _shares(FUNCTIONS["minimum"], (2.0, 2.0), 2.0, 1.0) == [0.5, 0.5]
    assert _shares(FUNCTIONS["abs"], (0.0,), 0.0, 1.0) == [0.0]
    assert _shares(BINARY[ast.FloorDiv], (7.0, 2.0), 3.0, 1.0) == [0.0, 0.0]


HELPER_POINTS = {
    "log1p": [(-0.999,), (-0.5,), (0.0,), (3.0,)], "expm1": [(-5.0,), (-1e-8,), (0.0,), (2.0,)],
    "sinh": [(-3.0,), (0.0,), (20.0,)], "cosh": [(-3.0,), (0.0,), (20.0,)],
    "arcsinh": [(-1e3,), (0.0,), (2.0,)], "arccosh": [(1.001,), (1.5,), (1e3,)],
    "arctanh": [(-0.999,), (0.0,), (0.9,)], "arctan": [(-50.0,), (0.0,), (1.0,)],
    "arcsin": [(-0.999,), (0.0,), (0.999,)], "arccos": [(-0.999,), (0.0,), (0.999,)],
    "arctan2": [(1.0, 1.0), (-2.0, 0.5), (0.3, -4.0), (1e-170, 2e-170), (3e160, -1e160), (1e-30, 1.0)],
    "hypot": [(3.0, 4.0), (-1e-200, 1e-200), (0.0, 2.0), (1e200, -1e200)],
    "logaddexp": [(0.0, 0.0), (-3.0, 700.0), (3.0, -3.0), (1e-3, 2e-3)],
    "logaddexp2": [(0.0, 0.0), (-3.0, 1000.0), (4.0, -4.0), (1e-3, 2e-3)],
    "log10": [(1e-300,), (0.5,), (1e5,)], "cbrt": [(-8.0,), (1e-30,), (27.0,), (1e200,)],
}
"""Points for each helper's rule: ordinary ones, near a domain's edge, at tiny and huge magnitudes."""


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_each_helpers_rule_agrees_with_central_differences_near_its_edges(name):
    fn = getattr(np, name)
    for point in HELPER_POINTS[name]:
        shares = _shares(HELPERS[name], (*point, 1e-12) if name == "log10" else point, float(fn(*point)), 0.75)
        for k in range(len(point)):
            h = 1e-7 * (abs(point[k]) or 1.0)
            up, down = list(point), list(point)
            up[k] += h
            down[k] -= h
            expected = 0.75 * (float(fn(*up)) - float(fn(*down))) / (up[k] - down[k])
            assert shares[k] == pytest.approx(expected, rel=1e-5, abs=1e-300), (name, point, k)


@pytest.mark.parametrize(("name", "point", "expected"), [
    ("logaddexp", (np.inf, 0.0), [1.0, 0.0]), ("logaddexp", (0.0, np.inf), [0.0, 1.0]),
    ("logaddexp", (-np.inf, 0.0), [0.0, 1.0]), ("logaddexp", (np.inf, np.inf), [0.5, 0.5]),
    ("logaddexp", (-np.inf, -np.inf), [0.5, 0.5]), ("logaddexp2", (np.inf, -3.0), [1.0, 0.0]),
    ("logaddexp2", (5.0, np.inf), [0.0, 1.0]), ("arctan2", (0.0, 0.0), [0.0, 0.0]),
    ("hypot", (0.0, -0.0), [0.0, 0.0]),
])
def test_helpers_rules_at_infinities_and_zeros_are_their_limits(name, point, expected):
    """An operand at +inf takes all of logaddexp's adjoint (the other none); two equal infinities share it as
    equal operands do; arctan2 and hypot take 0 where both operands are 0."""
    with np.errstate(all="ignore"):
        assert _shares(HELPERS[name], point, float(getattr(np, name)(*point)), 1.0) == expected


@pytest.mark.parametrize(("name", "fn"), [("maximum", np.fmax), ("minimum", np.fmin)])
def test_the_number_fmax_keeps_over_a_nan_takes_the_adjoint(name, fn):
    """svod.math.maximum is NumPy's fmax: its result is the operand that is no NaN, which takes the adjoint;
    where the result is a NaN (np.maximum's), neither operand takes it."""
    assert _shares(FUNCTIONS[name], (np.nan, 1.5), float(fn(np.nan, 1.5)), 1.0) == [0.0, 1.0]
    assert _shares(FUNCTIONS[name], (1.5, np.nan), float(fn(1.5, np.nan)), 1.0) == [1.0, 0.0]
    assert _shares(FUNCTIONS[name], (np.nan, 1.5), np.nan, 1.0) == [0.0, 0.0]
    assert _shares(FUNCTIONS[name], (-0.0, 0.0), float(fn(-0.0, 0.0)), 1.0) == [0.5, 0.5]
