"""Probes of the adjoints left out for arrays no wanted gradient depends on (``Tape._dead``, ``Adjoint.pull``):
an argument made to depend on a wanted one by later in-place calls, every argnums subset in turn (each variant
of a kernel's adjoint kept apart), and a kernel only the tape still holds when ``backward`` runs; each against
float64 finite differences or the closed form."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import svod
from svod.frontend.tape import Tape

RNG = np.random.default_rng(97)


@svod.kernel
def scaled_sine(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i]) * 2.0


@svod.kernel
def mixed(z, y, w):
    for i in svod.prange(y.shape[0]):
        z[i] = y[i] * w[i] + y[i] * y[i] * w[i]


@svod.kernel
def times_in_place(w, x):
    for i in svod.prange(w.shape[0]):
        w[i] = w[i] * x[i]


@svod.kernel
def sum_of_squares(loss, y):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])


def chain(x, w, v):
    """``v`` and then ``w`` are written in place from what ``x`` makes: neither is dead for ``x``'s gradient
    after those calls, though each is before them."""
    y = np.zeros_like(x)
    scaled_sine(y, x)
    z = np.zeros_like(x)
    mixed(z, y, w)
    times_in_place(v, z)
    times_in_place(w, v)
    q = np.zeros_like(x)
    mixed(q, w, x)
    loss = np.zeros(1)
    sum_of_squares(loss, q)
    return loss


def chain_in_float64(x, w, v):
    y = np.sin(x) * 2.0
    z = y * w + y * y * w
    v = v * z
    w = w * v
    q = w * x + w * w * x
    return float(np.sum(q * q))


def finite_difference(args: list[np.ndarray], number: int, eps: float = 1e-6) -> np.ndarray:
    found = np.zeros_like(args[number])
    for at in range(args[number].size):
        up, down = [a.copy() for a in args], [a.copy() for a in args]
        up[number][at] += eps
        down[number][at] -= eps
        found[at] = (chain_in_float64(*up) - chain_in_float64(*down)) / (2 * eps)
    return found


@pytest.mark.parametrize("size", [1, 2, 7])
def test_each_argnums_subset_after_in_place_writes(size):
    """Run one after another on one set of kernels, so each subset's adjoint variants meet the others'."""
    args = [RNG.normal(size=size) for _ in range(3)]
    wanted = [finite_difference(args, number) for number in range(3)]
    for numbers in (0, 1, 2, (0, 1), (1, 2), (2, 0), (0, 1, 2), 1, 0, (0, 0)):
        got = svod.grad(chain, argnums=numbers)(*[a.copy() for a in args])
        asked = numbers if isinstance(numbers, tuple) else (numbers,)
        found = got if isinstance(got, tuple) else (got,)
        for gradient, number in zip(found, asked, strict=True):
            np.testing.assert_allclose(gradient, wanted[number], rtol=1e-5, atol=1e-6)


def product_kernel():
    """A kernel nothing but the tape's record holds after the call."""
    @svod.kernel
    def product(z, y, w):
        for i in svod.prange(y.shape[0]):
            z[i] = y[i] * w[i]
    return product


def collected_product(x, w):
    z = np.zeros_like(x)
    product_kernel()(z, x, w)
    gc.collect()
    loss = np.zeros(1)
    sum_of_squares(loss, z)
    return loss


def test_a_kernel_collected_between_the_call_and_the_backward_pass():
    x, w = RNG.normal(size=5), RNG.normal(size=5)
    np.testing.assert_allclose(svod.grad(collected_product, 0)(x.copy(), w.copy()), 2 * x * w * w, rtol=1e-12)
    np.testing.assert_allclose(svod.grad(collected_product, 1)(x.copy(), w.copy()), 2 * x * x * w, rtol=1e-12)
    tape, xs, ws = Tape(), x.copy(), w.copy()
    with tape:
        loss = collected_product(xs, ws)
    gc.collect()
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(xs), 2 * x * w * w, rtol=1e-12)
    np.testing.assert_allclose(tape.grad(ws), 2 * x * x * w, rtol=1e-12)
