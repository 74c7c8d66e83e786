"""A taped jit call records once a phase that computes what an earlier phase of the call computed
(``svod.frontend.jit_tape_reuse``): the layer norm's mean, which svod's rewriting inlines into both statements
that read it, is one kernel on the tape, and the gradients stay those of central differences (float64) and of
the closed form; phases on other inputs, after a write to their inputs, or into the user's arrays are each
recorded."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.frontend import tape as tape_module


@svod.jit
def layernorm(x, gamma, beta):
    mean = np.mean(x, axis=1, keepdims=True)
    centred = x - mean
    variance = np.mean(centred * centred, axis=1, keepdims=True)
    return centred / np.sqrt(variance + 1e-5) * gamma + beta


@svod.jit
def two_means(x, w):
    a = x - np.mean(x, axis=1, keepdims=True)
    b = w - np.mean(w, axis=1, keepdims=True)
    return a * b


@svod.jit
def doubled_twice(x):
    a = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        a[i] = x[i] * 2.0
    b = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        b[i] = x[i] * 2.0
    return a, b


@svod.jit
def mean_before_and_after(x):
    a = x - np.mean(x, axis=1, keepdims=True)
    for i in svod.prange(x.shape[0]):
        x[i, 0] = x[i, 0] * 2.0
    b = x - np.mean(x, axis=1, keepdims=True)
    return a * b


def _layernorm64(x, gamma, beta):
    centred = x - x.mean(axis=1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + 1e-5) * gamma + beta


def _closed_form(x, gamma, seed):
    """The layer norm's gradients by x, gamma and beta for cotangent ``seed``, in float64."""
    centred = x - x.mean(axis=1, keepdims=True)
    scale = 1 / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + 1e-5)
    normal = centred * scale
    g = seed * gamma
    dx = scale * (g - g.mean(axis=1, keepdims=True) - normal * (g * normal).mean(axis=1, keepdims=True))
    return dx, (seed * normal).sum(axis=0), seed.sum(axis=0)


def _inputs(rows, cols, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols))
    if x.size > 2:
        x.flat[1], x.flat[2] = -0.0, 0.0
    return (x.astype(dtype), rng.uniform(0.5, 1.5, cols).astype(dtype), rng.standard_normal(cols).astype(dtype),
            rng.standard_normal((rows, cols)).astype(dtype))


@pytest.fixture
def recorded(monkeypatch):
    """The names of the kernels each recorded call ran, in order."""
    names: list[str] = []
    record = tape_module.Tape.record

    def counted(self, kernel, args, device):
        names.append(kernel.name)
        return record(self, kernel, args, device)

    monkeypatch.setattr(tape_module.Tape, "record", counted)
    return names


@pytest.mark.parametrize("rows", [1, 2, 7])
@pytest.mark.parametrize("cols", [1, 3, 257])
def test_the_layer_norms_gradients_are_those_of_the_closed_form_and_of_differences(rows, cols, recorded):
    x, gamma, beta, seed = _inputs(rows, cols, rows * 1000 + cols)
    y, pullback = svod.vjp(layernorm, x, gamma, beta)
    assert len(recorded) == (3 if cols > 1 else 2), "the mean (none of one column), the variance, the output"
    np.testing.assert_allclose(np.asarray(y).reshape(rows, cols), _layernorm64(x, gamma, beta), rtol=1e-12,
                               atol=1e-12)
    dx, dgamma, dbeta = pullback(seed)
    want = _closed_form(x, gamma, seed)
    for got, expected in zip((dx, dgamma, dbeta), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    direction = np.random.default_rng(5).standard_normal(x.shape)
    h = 1e-6
    along = np.sum(seed * (_layernorm64(x + h * direction, gamma, beta)
                           - _layernorm64(x - h * direction, gamma, beta))) / (2 * h)
    assert abs(np.sum(dx * direction) - along) <= 1e-4 * max(1.0, abs(along))


def test_a_nan_row_spoils_its_own_gradients_only():
    x, gamma, beta, seed = _inputs(7, 3, 11)
    x[4, 1] = np.nan
    _, pullback = svod.vjp(layernorm, x, gamma, beta)
    dx, dgamma, dbeta = pullback(seed)
    assert np.isnan(dx[4]).all()
    clean = np.delete(np.arange(7), 4)
    np.testing.assert_allclose(dx[clean], _closed_form(x[clean], gamma, seed[clean])[0], rtol=1e-9, atol=1e-9)
    assert np.isnan(dgamma).all()
    np.testing.assert_allclose(dbeta, seed.sum(axis=0), rtol=1e-12)


def test_the_float32_layer_norms_gradients_are_torchs():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    x, gamma, beta, seed = _inputs(7, 257, 3, np.float32)
    _, pullback = svod.vjp(layernorm, x, gamma, beta)
    got = pullback(seed)
    tensors = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, gamma, beta)]
    torch.nn.functional.layer_norm(tensors[0], (257,), tensors[1], tensors[2], eps=1e-5).backward(
        torch.tensor(seed, dtype=torch.float64))
    for mine, theirs in zip(got, tensors, strict=True):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_means_of_different_arrays_are_each_recorded(recorded):
    x, _, _, seed = _inputs(5, 4, 1)
    w = np.random.default_rng(2).standard_normal((5, 4))
    _, pullback = svod.vjp(two_means, x, w)
    assert len(recorded) == 4, "x's mean and a, w's mean and b (the product with b's loop)"
    dx, dw = pullback(seed)
    a, b = x - x.mean(axis=1, keepdims=True), w - w.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(dx, seed * b - (seed * b).mean(axis=1, keepdims=True), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, seed * a - (seed * a).mean(axis=1, keepdims=True), rtol=1e-12, atol=1e-12)


def test_the_users_arrays_stay_apart(recorded):
    x = np.array([1.5, -0.0, np.inf, -2.0])
    with svod.Tape() as tape:
        a, b = doubled_twice(x)
    assert len(recorded) == 2
    assert a is not b
    np.testing.assert_array_equal(a, x * 2)
    np.testing.assert_array_equal(b, x * 2)
    tape.backward(grads=[(a, np.ones(4)), (b, np.full(4, 3.0))])
    np.testing.assert_array_equal(tape.grad(x), np.full(4, 8.0))


@pytest.mark.parametrize("rows", [1, 7])
def test_a_mean_after_a_write_to_its_input_is_computed_again(rows):
    x = np.random.default_rng(rows).standard_normal((rows, 5))
    before, after = x.copy(), x.copy()
    after[:, 0] *= 2
    with svod.Tape():
        y = mean_before_and_after(x)
    want = (before - before.mean(axis=1, keepdims=True)) * (after - after.mean(axis=1, keepdims=True))
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


@svod.jit
def normalised_steps(x, steps):
    for _ in range(steps):
        mean = np.mean(x, axis=1, keepdims=True)
        centred = x - mean
        x[:, :] = centred / np.sqrt(np.mean(centred * centred, axis=1, keepdims=True) + 1.0)
    return x


def _normalised_steps64(x, steps):
    for _ in range(steps):
        centred = x - x.mean(axis=1, keepdims=True)
        x = centred / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + 1.0)
    return x


@pytest.mark.parametrize(("rows", "cols"), [(1, 3), (2, 1), (7, 257)])
@pytest.mark.parametrize("steps", [1, 3])
def test_a_phase_in_a_loop_is_recorded_each_turn(rows, cols, steps, recorded):
    """A loop's turn writes its temporaries again: no phase in it takes part (``written_once``), so each turn's
    mean reads that turn's x, and the gradient is that of central differences."""
    x, _, _, seed = _inputs(rows, cols, rows * 31 + cols)
    given = x.copy()
    with svod.Tape() as tape:
        y = normalised_steps(x, steps)
    np.testing.assert_allclose(y, _normalised_steps64(given, steps), rtol=1e-12, atol=1e-12)
    per_turn = len(recorded) // steps
    assert len(recorded) == per_turn * steps and per_turn >= (3 if cols > 1 else 2)
    tape.backward(grads=[(y, seed)])
    direction = np.random.default_rng(3).standard_normal(given.shape)
    h = 1e-6
    along = np.sum(seed * (_normalised_steps64(given + h * direction, steps)
                           - _normalised_steps64(given - h * direction, steps))) / (2 * h)
    assert abs(np.sum(tape.grad(x) * direction) - along) <= 1e-4 * max(1.0, abs(along))
