"""``svod.grad`` of a function given one array twice: the tape keeps a gradient per buffer, which would be the sum
of both arguments' partials; svod refuses, as ``svod.vjp`` does, and arguments apart still get each partial."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import GradientError


@svod.jit
def dot(a, b):
    return np.sum(a * b)


@svod.kernel
def product(y, a, b):
    for i in svod.prange(a.shape[0]):
        y[i] = a[i] * b[i]


@svod.jit
def total(z):
    return np.sum(z)


def plain_dot(a, b):
    y = np.zeros_like(a)
    product(y, a, b)
    return total(y)


@pytest.mark.parametrize("fn", [dot, plain_dot])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_one_array_given_twice_is_refused(fn, argnums):
    x = np.array([1.0, -2.0, 3.0])
    with pytest.raises(GradientError, match="shares memory"):
        svod.grad(fn, argnums=argnums)(x, x)
    with pytest.raises(GradientError, match="shares memory"):
        svod.grad(fn, argnums=argnums)(x, x[::-1])


@pytest.mark.parametrize("fn", [dot, plain_dot])
@pytest.mark.parametrize("n", [1, 5])
def test_arguments_apart_get_each_partial(fn, n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    b[0] = -0.0
    da, db = svod.grad(fn, argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(da, b)
    np.testing.assert_array_equal(db, a)
