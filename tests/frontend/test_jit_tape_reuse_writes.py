"""A taped jit call whose input is written between two alike means (in place, through a view, through a
reshape) records the second mean again: the gradient with respect to the input as given is that of central
differences (float64), not that of a mean reused from before the write."""

from __future__ import annotations

import numpy as np
import pytest

import svod


@svod.jit
def scaled_between(x):
    a = x - np.mean(x, axis=1, keepdims=True)
    x *= 2.0
    b = x - np.mean(x, axis=1, keepdims=True)
    return a * b


@svod.jit
def row_scaled_through_view(x):
    a = x - np.mean(x, axis=1, keepdims=True)
    v = x[0:1]
    v *= 2.0
    b = x - np.mean(x, axis=1, keepdims=True)
    return a * b


def _scaled_between64(x):
    a = x - x.mean(axis=1, keepdims=True)
    x = x * 2.0
    return a * (x - x.mean(axis=1, keepdims=True))


def _row_scaled64(x):
    a = x - x.mean(axis=1, keepdims=True)
    x = x.copy()
    x[0:1] *= 2.0
    return a * (x - x.mean(axis=1, keepdims=True))


@pytest.mark.parametrize(("fn", "reference"), [(scaled_between, _scaled_between64),
                                               (row_scaled_through_view, _row_scaled64)])
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (3, 4), (7, 3)])
def test_a_write_between_alike_means_keeps_the_gradient(fn, reference, shape):
    rng = np.random.default_rng(shape[0] * 10 + shape[1])
    x = rng.standard_normal(shape)
    x.flat[0] = -0.0
    given = x.copy()
    results, pullback = svod.vjp(fn, x)
    assert results[0] is x, "the jit function writes x: it is its first result"
    np.testing.assert_allclose(results[1], reference(given), rtol=1e-12, atol=1e-12)
    seed = rng.standard_normal(shape)
    (dx,) = pullback((np.zeros(shape), seed))
    direction = rng.standard_normal(shape)
    h = 1e-6
    along = np.sum(seed * (reference(given + h * direction) - reference(given - h * direction))) / (2 * h)
    assert abs(np.sum(dx * direction) - along) <= 1e-6 * max(1.0, abs(along))
