"""A sequential loop whose turns' adjoints are independent (no carried local's adjoint changes from turn to turn, no
turn stores, none runs the turns before it again) takes its turns' adjoints in the forward's order, walking memory
as the forward does; any other keeps the last turn first. Gradients against central differences of plain Python
(float64) on every device, over loops of 0, 1 and a prime number of turns."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend.adjoint import adjoint
from tests.frontend.differences import agrees_with_differences, float_of


@svod.kernel
def squares(y, x, m):
    for i in svod.prange(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1]):
            s += (x[i, k] - m[i]) * (x[i, k] - m[i])
        y[i] = s


@svod.kernel
def last_wins(y, x):
    """Every turn stores y[i]: only the last turn's value reaches y, and only its read a gradient."""
    for i in svod.prange(x.shape[0]):
        for k in range(x.shape[1]):
            y[i] = x[i, k] * 2.0


@svod.kernel
def product(y, x):
    """A carried local whose adjoint changes from turn to turn."""
    for i in svod.prange(x.shape[0]):
        p = 1.0
        for k in range(x.shape[1]):
            p = p * x[i, k]
        y[i] = p


def _source(kernel, f: type, *args: np.ndarray) -> str:
    floats = frozenset(p for p, a in zip(kernel.parameters, args, strict=True) if a.dtype == f)
    made = adjoint(kernel, floats)
    assert made.kernel is not None
    return ast.unparse(made.kernel.source.node)


@pytest.mark.parametrize("turns", [0, 1, 7])
def test_a_sums_turns_run_in_the_forwards_order(device, turns):
    f = float_of(device)
    rng = np.random.default_rng(turns)
    args = (np.zeros(3, f), rng.standard_normal((3, turns)).astype(f), rng.standard_normal(3).astype(f))
    agrees_with_differences(squares, device, *args)
    source = _source(squares, f, *args)
    assert "-1, -1)" not in source and source.count(" in range(0, ") == 2


@pytest.mark.parametrize("turns", [1, 2, 7])
def test_a_loop_that_stores_keeps_the_last_turn_first(device, turns):
    f = float_of(device)
    rng = np.random.default_rng(turns + 10)
    args = (np.zeros(4, f), rng.standard_normal((4, turns)).astype(f))
    agrees_with_differences(last_wins, device, *args)
    _, pullback = svod.vjp(last_wins, *(a.copy() for a in args), device=device)
    _, dx = pullback(np.ones(4, f))
    expected = np.zeros((4, turns), f)
    expected[:, -1] = 2.0
    np.testing.assert_array_equal(dx, expected)
    assert "-1, -1)" in _source(last_wins, f, *args)


@pytest.mark.parametrize("turns", [0, 1, 7])
def test_a_product_keeps_the_last_turn_first(device, turns):
    f = float_of(device)
    rng = np.random.default_rng(turns + 20)
    args = (np.zeros(2, f), rng.uniform(0.5, 1.5, (2, turns)).astype(f))
    agrees_with_differences(product, device, *args)
    assert "-1, -1)" in _source(product, f, *args)
