"""The backward pass reads a cotangent where the caller gave it and copies it only before an adjoint writes into it;
an adjoint whose array's gradient before the call nothing reads (a jit function's temporary, the result ``svod.vjp``
gives) leaves it unzeroed. Neither may show: the caller's cotangent is never written, a pullback gives the gradient
at the cotangent it is given each time, and a gradient asked for is never the caller's array. Checked against
NumPy's layer norm gradient in float64, over edge shapes, NaN and infinities, layouts and aliases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import svod
from benchmarks.gradient_programs import mlp_loss
from tests.frontend.differences import float_of
from tests.frontend.test_adjoint_sums import _normed_args, normed


@svod.jit
def normalised(x, g, b):
    mean = np.mean(x, axis=1, keepdims=True)
    centred = x - mean
    variance = np.mean(centred * centred, axis=1, keepdims=True)
    return centred / np.sqrt(variance + 1e-5) * g + b


@svod.jit
def twice(x):
    return x * 2.0, x * x


@svod.jit
def into_half(y, x):
    for i in svod.prange(x.shape[0] // 2):
        y[i] = x[i] * 3.0


@svod.kernel
def accumulate(acc, x):
    for i in svod.prange(x.shape[0]):
        acc[i] += x[i] * 2.0


def _layernorm_vjp(x, g, b, c) -> tuple[np.ndarray, ...]:
    """NumPy's gradients of ``sum(c * normalised(x, g, b))`` in float64."""
    x, g, c = (a.astype(np.float64) for a in (x, g, c))
    with np.errstate(invalid="ignore"):  # (NaN where an infinity meets itself, as svod's)
        centred = x - x.mean(1, keepdims=True)
        scale = 1.0 / np.sqrt((centred * centred).mean(1, keepdims=True) + 1e-5)
        unit = centred * scale
        along = c * g
        dx = scale * (along - along.mean(1, keepdims=True) - unit * (along * unit).mean(1, keepdims=True))
        return dx, (c * unit).sum(0), c.sum(0)


def _close(got, expected, f) -> None:
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == f
        scale = float(np.nanmax(np.abs(e), initial=0.0)) + 1.0
        np.testing.assert_allclose(g, e, rtol=1e-9 if f == np.float64 else 1e-4,
                                   atol=1e-9 * scale if f == np.float64 else 1e-4 * scale)


def _arguments(shape: tuple[int, int], f: type, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed + shape[0] * 31 + shape[1])
    return (rng.standard_normal(shape).astype(f), rng.uniform(0.5, 1.5, shape[1]).astype(f),
            rng.standard_normal(shape[1]).astype(f), rng.standard_normal(shape).astype(f))


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (5, 1), (13, 37)])
def test_a_pullback_leaves_the_cotangent_and_gives_the_gradient_at_each_given(device, shape):
    f = float_of(device)
    x, g, b, c = _arguments(shape, f)
    c[0, 0] = -0.0
    kept = c.copy()
    _, pullback = svod.vjp(normalised, x, g, b, device=device)
    first = pullback(c)
    assert np.array_equal(c.view(f"u{c.itemsize}"), kept.view(f"u{c.itemsize}"))  # bits: -0.0 stays
    _close(first, _layernorm_vjp(x, g, b, c), f)
    held = [a.copy() for a in first]
    c *= 2.0  # the caller changes it: the next pullback's gradient is at the new one
    if device.caps.ieee_floats:  # (WGSL's compilers may take floats as finite: docs/devices.md)
        c[-1, -1] = np.nan
    second = pullback(c)
    _close(second, _layernorm_vjp(x, g, b, c), f)
    if device.caps.ieee_floats:
        assert np.isnan(second[0][-1]).all() and np.isnan(second[1][-1]) and np.isnan(second[2][-1])
    for a, h in zip(first, held, strict=True):  # the first gradients are the caller's, untouched
        np.testing.assert_array_equal(a, h)


@pytest.mark.parametrize("kind", ["fortran", "strided", "readonly", "x itself", "the result"])
def test_cotangents_of_every_layout_and_alias(device, kind):
    f = float_of(device)
    x, g, b, c = _arguments((6, 9), f, seed=1)
    y, pullback = svod.vjp(normalised, x, g, b, device=device)
    if kind == "fortran":
        c = np.asfortranarray(c)
    elif kind == "strided":
        c = np.repeat(c, 2, axis=1)[:, ::2]
    elif kind == "readonly":
        c.flags.writeable = False
    elif kind == "x itself":
        c = x
    else:
        c = y[0]
    kept = np.array(c, copy=True)
    got = pullback(c)
    np.testing.assert_array_equal(c, kept)
    _close(got, _layernorm_vjp(x, g, b, kept), f)


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
def test_special_values_in_x_reach_the_gradients_as_numpys(special):
    x, g, b, c = _arguments((5, 7), np.float64, seed=2)
    x[2, 3] = special
    _, pullback = svod.vjp(normalised, x, g, b)
    got = pullback(c)
    expected = _layernorm_vjp(x, g, b, c)
    _close(got, expected, np.float64)
    assert np.isnan(got[0][2]).all() and not np.isnan(got[0][[0, 1, 3, 4]]).any()


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_one_cotangent_for_two_results(device, n):
    f = float_of(device)
    x = np.random.default_rng(n).standard_normal(n).astype(f)
    c = np.random.default_rng(n + 1).standard_normal(n).astype(f)
    kept = c.copy()
    _, pullback = svod.vjp(twice, x, device=device)
    (got,) = pullback((c, c))
    np.testing.assert_array_equal(c, kept)
    np.testing.assert_allclose(got, 2.0 * kept + 2.0 * x * kept, rtol=1e-6 if f == np.float32 else 1e-14)


@pytest.mark.parametrize("n", [1, 2, 9])
def test_an_argument_written_in_place_has_its_gradient_and_the_cotangent_stays(device, n):
    """y's gradient is asked for: its adjoint is set to zero where the call stored, on a copy of the cotangent."""
    f = float_of(device)
    rng = np.random.default_rng(n)
    y, x, c = rng.standard_normal(n).astype(f), rng.standard_normal(n).astype(f), rng.standard_normal(n).astype(f)
    kept = c.copy()
    result, pullback = svod.vjp(into_half, y, x, device=device)
    assert len(result) == 1 and result[0] is y
    dy, dx = pullback(c)
    np.testing.assert_array_equal(c, kept)
    half = n // 2
    np.testing.assert_array_equal(dy, np.concatenate([np.zeros(half, f), kept[half:]]))
    np.testing.assert_allclose(dx, np.concatenate([3.0 * kept[:half], np.zeros(n - half, f)]), rtol=1e-6)
    assert dy is not c


def test_a_kernels_pullback_gives_the_written_arrays_gradient_and_leaves_the_cotangent(device):
    f = float_of(device)
    args = _normed_args(4, 5, f)
    c = np.random.default_rng(3).standard_normal((4, 5)).astype(f)
    kept = c.copy()
    _, pullback = svod.vjp(normed, *args, device=device)
    grads = pullback(c)
    np.testing.assert_array_equal(c, kept)
    np.testing.assert_array_equal(grads[0], np.zeros((4, 5), f))  # y, overwritten everywhere


def test_a_tapes_gradient_of_a_seeded_array_is_its_own():
    """A tape that keeps every gradient gives y's as an array of its own, not the cotangent."""
    args = _normed_args(3, 4, np.float64)
    c = np.random.default_rng(5).standard_normal((4, 4))[:3]  # a view whose rows run along memory
    with svod.Tape() as tape:
        normed(*args)
    tape.backward(grads=[(args[0], c)])
    grad = tape.grad(args[0])
    np.testing.assert_array_equal(grad, np.zeros((3, 4)))
    kept_x = tape.grad(args[1]).copy()
    c[:] = 7.0
    np.testing.assert_array_equal(tape.grad(args[1]), kept_x)
    assert not np.may_share_memory(grad, c)


@pytest.mark.parametrize("n", [1, 8])
def test_a_cotangent_no_adjoint_writes_is_copied_into_the_tapes_gradient(n):
    """acc's adjoint is only read (an update keeps it): the tape's gradient of acc is the cotangent's values in
    an array of its own, which the caller's later writes do not reach."""
    acc, x = np.ones(n), np.arange(n, dtype=np.float64)
    c = np.linspace(-1.0, 1.0, n)
    with svod.Tape() as tape:
        accumulate(acc, x)
    tape.backward(grads=[(acc, c)])
    kept = c.copy()
    c[:] = 5.0
    np.testing.assert_array_equal(tape.grad(acc), kept)
    np.testing.assert_array_equal(tape.grad(x), 2.0 * kept)


@pytest.mark.parametrize("n", [1, 8])
def test_a_tapes_own_gradient_as_a_cotangent_of_a_second_pass_is_read_before_the_pass_adds_into_it(n):
    """A second backward pass adds into the gradients the first gave; one of them given as another array's
    cotangent is read as it was before that add, whichever array's gradient the pass adds first."""
    first, second, x = np.zeros(n), np.zeros(n), np.linspace(-1.0, 2.0, n)
    with svod.Tape() as tape:
        accumulate(first, x)
        accumulate(second, x)
    tape.backward(grads=[(first, np.full(n, 0.5)), (second, np.full(n, 2.0))])
    cotangent = tape.grad(second)
    kept = cotangent.copy()
    tape.backward(grads=[(second, np.full(n, 10.0)), (first, cotangent)])
    np.testing.assert_array_equal(tape.grad(first), 0.5 + kept)
    np.testing.assert_array_equal(tape.grad(second), np.full(n, 12.0))
    np.testing.assert_array_equal(tape.grad(x), 2.0 * (0.5 + 2.0) + 2.0 * (kept + 10.0))


@svod.kernel
def stored_twice(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i])
        y[i] = x[i] * 3.0


@svod.kernel
def stored_in_turns(y, x):
    for i in svod.prange(x.shape[0]):
        for j in range(3):
            y[i] = x[i] * (j + 1.0)


@svod.kernel
def summed(loss, y):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i])


@pytest.mark.parametrize(("kernel", "slope"), [(stored_twice, 3.0), (stored_in_turns, 3.0)])
@pytest.mark.parametrize("n", [1, 7])
def test_an_array_a_call_stores_more_than_once_per_element_has_the_last_stores_gradient_alone(device, kernel,
                                                                                               slope, n):
    """y is svod.grad's temporary, which no earlier call takes: its adjoint is left unzeroed where a store
    overwrites it only if no earlier store of the same call reads it after (the first store's adjoint would
    take the cotangent again)."""
    dtype = float_of(device)

    def loss_of(x):
        y, loss = np.zeros_like(x), np.zeros(1, x.dtype)
        kernel(y, x, device=device)
        summed(loss, y, device=device)
        return loss

    x = np.linspace(-1.0, 1.0, n).astype(dtype)
    np.testing.assert_array_equal(svod.grad(loss_of)(x), np.full(n, slope, dtype))


def test_an_mlps_gradient_agrees_with_differences():
    """The matrix products' adjoints leave their results' adjoints unzeroed where nothing reads them."""
    rng = np.random.default_rng(9)
    widths = (5, 4, 3, 2)
    weights = []
    for fan_in, fan_out in itertools.pairwise(widths):
        weights += [rng.standard_normal((fan_in, fan_out)), 0.1 * rng.standard_normal(fan_out)]
    x = rng.standard_normal((3, 5))
    onehot = np.eye(2)[[0, 1, 1]]
    grads = svod.grad(mlp_loss, argnums=tuple(range(6)))(*weights, x, onehot)
    h = 1e-6
    for position, grad in enumerate(grads):
        direction = rng.standard_normal(grad.shape)

        def moved(sign: float, position: int = position, direction: np.ndarray = direction) -> float:
            return float(mlp_loss.fn(*(w + sign * h * direction if k == position else w
                                        for k, w in enumerate(weights)), x, onehot))
        expected = (moved(1.0) - moved(-1.0)) / (2 * h)
        assert abs(float(np.sum(grad * direction)) - expected) <= 1e-6 * (abs(expected) + 1.0), position
