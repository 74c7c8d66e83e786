"""A reduction to one value inside an array statement (``x - np.mean(x)``, ``x / np.sum(x)``) is computed once on
a tape, in a phase of its own, not again for each element (``svod.frontend.jit_tape_hoist``): the taped values
are the untaped run's bits, the gradients agree with central differences of plain Python (float64) and with the
derivatives worked out by hand, and no element's work item loops over the array."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend.pykernel import Kernel
from tests.frontend.differences import float_of

SIZES = [0, 1, 2, 7, 13]
"""Edge sizes and primes; a mean's from 1 (NumPy warns of the mean of nothing)."""


@svod.jit
def centre(x):
    return x - np.mean(x)


@svod.jit
def share(x, w):
    y = x / np.sum(x)
    return np.sum(y * w)


@svod.jit
def scaled(x, w):
    return (x - np.mean(x)) / np.sqrt(np.mean(x * x) + 1.0) * w


@svod.jit
def rows(x):
    return x / np.sum(x, axis=1, keepdims=True)


def _recorded(monkeypatch: pytest.MonkeyPatch, run) -> list[Kernel]:
    """The kernels ``run()`` calls, in order (a tape's records, and their adjoints)."""
    called: list[Kernel] = []
    call = Kernel.__call__

    def spy(self, *args, **kwargs):
        called.append(self)
        return call(self, *args, **kwargs)
    monkeypatch.setattr(Kernel, "__call__", spy)
    run()
    monkeypatch.undo()
    return called


def _nested_loops(kernel: Kernel) -> int:
    """How deep a kernel nests its loops over elements (its svod.prange loops too, but for the one work item of a
    svod.prange(1)): 1 where each element is reached once, 2 where a loop over them runs again for each."""
    def depth(node: ast.AST) -> int:
        inner = max((depth(child) for child in ast.iter_child_nodes(node)), default=0)
        return inner + (isinstance(node, ast.For) and ast.unparse(node.iter) != "_svod_prange(1)")
    return depth(kernel.source.node)


def _differences(fn, args, position, direction, weights, h=1e-6):
    def loss(sign):
        moved = [a + sign * h * direction if k == position else a for k, a in enumerate(args)]
        return float(np.sum(np.asarray(fn.fn(*moved)) * weights))
    return (loss(1.0) - loss(-1.0)) / (2 * h)


@pytest.mark.parametrize("n", SIZES[1:])
@pytest.mark.parametrize("fn", [centre, scaled], ids=lambda fn: fn.name)
def test_an_array_statements_reduction_to_one_value_is_computed_once_on_a_tape(monkeypatch, fn, n):
    rng = np.random.default_rng(n)
    args = [rng.random(n) + 0.5, rng.standard_normal(n)][:len(fn.parameters)]
    cotangent = rng.standard_normal(n)
    untaped = fn(*args)
    kernels = _recorded(monkeypatch, lambda: svod.vjp(fn, *args)[1](cotangent))
    (taped,), pullback = svod.vjp(fn, *args)
    np.testing.assert_array_equal(taped, untaped)  # the same bits
    grads = pullback(cotangent)
    for position, grad in enumerate(grads):
        direction = rng.standard_normal(n)
        expected = _differences(fn, args, position, direction, cotangent)
        assert float(np.sum(grad * direction)) == pytest.approx(expected, rel=1e-4, abs=1e-8)
    if fn is centre:
        np.testing.assert_allclose(grads[0], cotangent - np.mean(cotangent), rtol=1e-12, atol=1e-12)
    assert max(_nested_loops(k) for k in kernels) == 1


@pytest.mark.parametrize("n", SIZES)
def test_a_sum_a_statement_divides_by_is_summed_once_and_its_gradient_is_the_quotients(monkeypatch, n):
    rng = np.random.default_rng(n)
    x, w = rng.random(n) + 0.5, rng.standard_normal(n)
    kernels = _recorded(monkeypatch, lambda: svod.grad(share, argnums=(0, 1))(x, w))
    with svod.Tape():
        loss = share(x, w)
    assert float(loss[0]) == share(x, w)  # the same bits
    dx, dw = svod.grad(share, argnums=(0, 1))(x, w)
    total = np.sum(x)
    with np.errstate(all="ignore"):  # (no elements: 0 / 0, of none)
        np.testing.assert_allclose(dx, w / total - np.sum(x * w) / total ** 2, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(dw, x / total, rtol=1e-12)
    direction = rng.standard_normal(n)
    assert float(np.sum(dx * direction)) == pytest.approx(_differences(share, [x, w], 0, direction, 1.0),
                                                          rel=1e-4, abs=1e-8)
    assert max(_nested_loops(k) for k in kernels) == 1


def test_a_reduction_that_reads_the_elements_loop_stays_in_it():
    """A row's sum differs from row to row: each row's work items sum it (the hoisting takes what is the same
    for every element only), and its gradient is still the quotient's."""
    x = np.random.default_rng(3).random((3, 5)) + 0.5
    cotangent = np.random.default_rng(4).standard_normal((3, 5))
    (y,), pullback = svod.vjp(rows, x)
    np.testing.assert_array_equal(y, rows(x))
    (dx,) = pullback(cotangent)
    total = np.sum(x, axis=1, keepdims=True)
    np.testing.assert_allclose(dx, cotangent / total - np.sum(cotangent * x, axis=1, keepdims=True) / total ** 2,
                               rtol=1e-9, atol=1e-12)


def test_a_reduction_computed_once_runs_on_each_device(device):
    f = float_of(device)
    x = (np.random.default_rng(5).random(11) + 0.5).astype(f)
    cotangent = np.random.default_rng(6).standard_normal(11).astype(f)
    untaped = centre(x, device=device)
    with svod.Tape() as tape:
        taped = centre(x, device=device)
    if device.caps.dedicated_local_memory:  # a GPU's work group sums the untaped mean as a tree, the taped
        # kernel of the sum alone in order: the means differ in their last bits, which x - mean keeps
        np.testing.assert_allclose(taped, untaped, rtol=0, atol=4 * float(np.finfo(f).eps) * float(np.abs(x).max()))
    else:
        np.testing.assert_array_equal(taped, untaped)  # the same bits
    tape.backward(grads=[(taped, cotangent)])
    np.testing.assert_allclose(tape.grad(x), cotangent - np.mean(cotangent.astype(np.float64)),
                               rtol=1e-12 if f == np.float64 else 1e-5, atol=1e-12 if f == np.float64 else 1e-5)
