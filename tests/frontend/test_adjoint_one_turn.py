"""A ``svod.prange(1)`` (an array statement's ``keepdims`` axis, as a tape records ``np.mean(x, axis=1,
keepdims=True)``) has one work item: a read whose index lacks its variable is still the work item's own element,
so its adjoint adds with a plain ``+=``. Gradients against central differences and, element by element, against
the adjoint that adds such reads atomically; a parallel loop of two turns keeps its atomics."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend import adjoint_forward
from svod.frontend.adjoint import Adjoint, _Differentiator, adjoint
from tests.frontend.differences import agrees_with_differences, float_of


@svod.kernel
def row_means(y, x):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(1):
            total = 0.0
            for k in range(x.shape[1]):
                total += x[i, k] * svod.math.sin(x[i, k])
            y[i, j] = total / x.shape[1] + x[i, 0] * 2.0


@svod.kernel
def one_item(y, x):
    for i in svod.prange(1):
        total = 0.0
        for k in range(x.shape[0]):
            total += x[k] * x[k]
        y[i] = svod.math.sqrt(total + 1.0)


@svod.kernel
def two_columns(y, x):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(2):
            total = 0.0
            for k in range(x.shape[1]):
                total += x[i, k] * x[i, k]
            y[i, j] = total * (j + 1.0)


def _pulled(made: Adjoint, kernel: svod.Kernel, args: list[np.ndarray], device) -> list[np.ndarray]:
    """The adjoints of ``args`` from random ones of its results."""
    rng = np.random.default_rng(5)
    found = {name: args[kernel.parameters.index(name)] for name, _ in made.grads}
    grads = {name: rng.standard_normal(a.shape).astype(a.dtype) if name in made.written else np.zeros_like(a)
             for name, a in found.items()}
    made.pull(dict(zip(kernel.parameters, [a.copy() for a in args], strict=True)), dict(grads),
              dict.fromkeys(grads, False), device)
    return list(grads.values())


def _checked(kernel: svod.Kernel, device, monkeypatch: pytest.MonkeyPatch, *args: np.ndarray) -> str:
    """``kernel``'s adjoint's source, once its gradients agree with central differences and with those of the
    adjoint that takes no parallel loop for one of a single turn."""
    agrees_with_differences(kernel, device, *args)
    floats = frozenset(kernel.parameters)
    made = adjoint(kernel, floats)
    with monkeypatch.context() as patch:
        patch.setattr(adjoint_forward, "one_turn", lambda loop: False)
        atomic = _Differentiator(kernel, floats).adjoint()
    for got, expected in zip(_pulled(made, kernel, list(args), device), _pulled(atomic, kernel, list(args), device),
                             strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12 if got.dtype == np.float64 else 1e-5, atol=1e-12)
    assert made.kernel is not None
    return ast.unparse(made.kernel.source.node)


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (7, 5), (13, 11)])
def test_a_single_turn_parallel_loop_leaves_each_row_the_work_items_own(device, monkeypatch, shape):
    f = float_of(device)
    x = np.random.default_rng(shape[0]).standard_normal(shape).astype(f)
    source = _checked(row_means, device, monkeypatch, np.zeros((shape[0], 1), f), x)
    assert "atomic" not in source and "x_grad[i, _svod_k2] +=" in source and "x_grad[i, 0] +=" in source


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_a_kernel_of_one_work_item_adds_every_adjoint_plainly(device, monkeypatch, n):
    f = float_of(device)
    x = np.random.default_rng(n).standard_normal(n).astype(f)
    assert "atomic" not in _checked(one_item, device, monkeypatch, np.zeros(1, f), x)


@pytest.mark.parametrize("shape", [(1, 1), (3, 2), (5, 7)])
def test_a_parallel_loop_of_two_turns_keeps_its_atomics(device, monkeypatch, shape):
    f = float_of(device)
    x = np.random.default_rng(shape[1]).standard_normal(shape).astype(f)
    assert "_svod_atomic_add(x_grad, (i, _svod_k2)" in _checked(two_columns, device, monkeypatch,
                                                         np.zeros((shape[0], 2), f), x)
