"""A read at the work item's own index shifted by constants (a stencil's ``x[i - 1, j]``) adds its adjoint with a
plain ``+=`` in a pass of its own (``Adjoint.passes``): gradients against central differences and, element by
element, against the adjoint that adds every read atomically; a wrapped, clamped or colliding index keeps its
atomics."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend import adjoint_backward
from svod.frontend.adjoint import Adjoint, _Differentiator, adjoint
from tests.frontend.differences import agrees_with_differences, float_of, pulled


@svod.kernel
def jacobi(new, old):
    for i in svod.prange(1, old.shape[0] - 1):
        for j in svod.prange(1, old.shape[1] - 1):
            new[i, j] = 0.25 * (old[i - 1, j] + old[i + 1, j] + old[i, j - 1] + old[i, j + 1])


@svod.kernel
def three_point(y, x, w):
    for i in svod.prange(1, x.shape[0] - 1):
        y[i] = svod.math.sin(x[i - 1]) * w[i] + x[i] * x[1 + i] + (x[i + 1] * 2.0 if x[i] > 0.0 else 0.0)


@svod.kernel
def next_row(y, x):
    for i in svod.prange(x.shape[0] - 1):
        total = 0.0
        for k in range(x.shape[1]):
            total += x[i + 1, k] * svod.math.cos(x[i, k])
        y[i, 0] = total


@svod.kernel
def wrapped(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = x[(i + 1) % x.shape[0]] * x[i] + x[min(i + 1, x.shape[0] - 1)]


@svod.kernel
def colliding(y, x):
    for i in svod.prange(y.shape[0]):
        y[i] = x[i // 2] * x[i // 2 + 1]


def _atomic(kernel: svod.Kernel, floats: frozenset[str], monkeypatch: pytest.MonkeyPatch) -> Adjoint:
    """The adjoint that adds every read's adjoint atomically, as svod made it before shifted reads had passes."""
    with monkeypatch.context() as patch:
        patch.setattr(adjoint_backward, "shifted", lambda index, loops: False)
        return _Differentiator(kernel, floats).adjoint()


def _same_as_atomic(kernel, device, monkeypatch, *args: np.ndarray) -> Adjoint:
    floats = frozenset(p for p, a in zip(kernel.parameters, args, strict=True) if a.dtype.kind == "f")
    made, atomic = adjoint(kernel, floats), _atomic(kernel, floats, monkeypatch)
    assert not atomic.passes
    rng = np.random.default_rng(3)
    cotangents = {name: rng.standard_normal(args[0].shape).astype(args[0].dtype) for name in made.written}
    got = pulled(made, kernel, list(args), cotangents, device)
    expected = pulled(atomic, kernel, list(args), cotangents, device)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12 if g.dtype == np.float64 else 1e-5, atol=1e-12)
    return made


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 5), (13, 7)])
def test_a_stencils_reads_add_in_a_pass_each(device, monkeypatch, shape):
    f = float_of(device)
    old = np.random.default_rng(shape[0]).standard_normal(shape).astype(f)
    agrees_with_differences(jacobi, device, np.zeros(shape, f), old)
    made = _same_as_atomic(jacobi, device, monkeypatch, np.zeros(shape, f), old)
    assert len(made.passes) == 3  # and the last read's additions in the adjoint kernel itself
    assert "atomic" not in "".join(_source(k) for k in (*made.passes, made.kernel))


@pytest.mark.parametrize("n", [1, 2, 3, 11])
def test_a_three_point_stencil_recomputes_what_each_pass_needs(device, monkeypatch, n):
    rng = np.random.default_rng(n)
    f = float_of(device)
    x, w = rng.standard_normal(n).astype(f), rng.standard_normal(n).astype(f)
    agrees_with_differences(three_point, device, np.zeros(n, f), x, w)
    made = _same_as_atomic(three_point, device, monkeypatch, np.zeros(n, f), x, w)
    assert len(made.passes) == 2  # x[i - 1], x[i] and x[i + 1] (x[1 + i] too): the last in the kernel
    assert made.kernel is not None and "x_grad[i + 1] +=" in _source(made.kernel)


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (5, 4)])
def test_a_shifted_read_in_a_sequential_loop_adds_in_its_pass(device, monkeypatch, shape):
    f = float_of(device)
    x = np.random.default_rng(shape[0]).standard_normal(shape).astype(f)
    agrees_with_differences(next_row, device, np.zeros(shape, f), x)
    made = _same_as_atomic(next_row, device, monkeypatch, np.zeros(shape, f), x)
    assert len(made.passes) == 1 and "atomic" not in "".join(_source(k) for k in (*made.passes, made.kernel))


@svod.kernel
def spelled(y, x):
    for i in svod.prange(1, x.shape[0] - 1):
        y[i] = x[1 + i] * x[i - -1] + x[i + 0] * x[i + 1] - x[-1 + i]


@svod.kernel
def read_back(y, x):
    for i in svod.prange(x.shape[0] - 1):
        y[i + 1] = x[i] * 2.0
        y[1 + i] += svod.math.sin(y[i + 1]) * (1.0 if y[1 + i] > 0.0 else -1.0)


@pytest.mark.parametrize("n", [1, 2, 3, 11])
def test_an_index_spelled_other_ways_shares_one_pass(device, monkeypatch, n):
    """``x[1 + i]``, ``x[i - -1]`` and ``x[i + 1]`` are one element: one pass adds their adjoints, as ``x[i + 0]``'s
    and ``x[i]``'s."""
    f = float_of(device)
    x = np.random.default_rng(n).standard_normal(n).astype(f)
    agrees_with_differences(spelled, device, np.zeros(n, f), x)
    made = _same_as_atomic(spelled, device, monkeypatch, np.zeros(n, f), x)
    assert len(made.passes) == 2 and made.kernel is not None  # x[i + 1], x[i]; x[i - 1] in the kernel
    assert "atomic" not in "".join(_source(k) for k in (*made.passes, made.kernel))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_read_back_of_a_stored_element_is_its_stored_value_however_its_index_is_spelled(device, n):
    f = float_of(device)
    x = np.random.default_rng(n).standard_normal(n).astype(f)
    agrees_with_differences(read_back, device, np.zeros(n, f), x)
    (y,), _ = svod.vjp(read_back, np.zeros(n, f), x, device=device)
    untaped, plain = np.zeros(n, f), np.zeros(n)
    read_back(untaped, x, device=device)
    read_back.fn(plain, x.astype(np.float64))
    np.testing.assert_array_equal(y, untaped)
    np.testing.assert_allclose(y, plain, rtol=1e-12 if f == np.float64 else 1e-5)


@pytest.mark.parametrize("kernel", [wrapped, colliding])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_wrapped_clamped_or_colliding_index_keeps_its_atomics(device, monkeypatch, kernel, n):
    rng = np.random.default_rng(n)
    f = float_of(device)
    x = rng.standard_normal(n + 2).astype(f)
    y = np.zeros(n + 2 if kernel is wrapped else 2 * n, f)
    agrees_with_differences(kernel, device, y, x)
    made = _same_as_atomic(kernel, device, monkeypatch, y, x)
    assert len(made.passes) == (1 if kernel is wrapped else 0)  # wrapped's x[i]: beside the atomics, in a pass
    assert made.kernel is not None and "_svod_atomic_add(x_grad" in _source(made.kernel)


def _source(kernel: svod.Kernel) -> str:
    return ast.unparse(kernel.source.node)


@svod.kernel
def stored_twice(y, x):
    for i in svod.prange(1, x.shape[0]):
        y[i] = x[i] * 2.0
        y[i + 0] = y[i] * y[0 + i] + x[i - 1]


@svod.kernel
def updated_then_stored(y, x):
    for i in svod.prange(1, x.shape[0]):
        y[i] += x[i] * 2.0
        if x[i] > 0.0:
            y[i] = y[i] * 3.0 + x[i - 1]


@svod.kernel
def stored_each_turn(y, x):
    for i in svod.prange(1, x.shape[0]):
        for k in range(3):
            y[i] = x[i - 1] * (k + 1.0) + x[i]


@pytest.mark.parametrize("kernel", [stored_twice, updated_then_stored, stored_each_turn])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_an_element_stored_over_keeps_its_zero_adjoint_beside_a_shifted_read(device, monkeypatch, kernel, n):
    """The adjoint of what a later store overwrote is zero: a pass, which writes no adjoint of a store, would read
    it as it was before that store's adjoint set it to zero and add it again, so such a kernel's shifted reads
    add atomically in the adjoint kernel."""
    rng = np.random.default_rng(n)
    f = float_of(device)
    x = rng.standard_normal(n).astype(f)
    agrees_with_differences(kernel, device, rng.standard_normal(n).astype(f), x)
    made = _same_as_atomic(kernel, device, monkeypatch, rng.standard_normal(n).astype(f), x)
    assert not made.passes
