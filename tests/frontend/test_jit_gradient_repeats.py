"""Repeated gradient calls of ``@svod.jit`` functions: a tape derives each variant's kernels once and keeps them
for the calls after (``jit_tape``). Calls of other shapes and dtypes interleaved with them must not take another
variant's kernels: each call's gradients are bit for bit those of its first call, and agree with central
differences of the function run as plain Python (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.frontend import jit_tape
from tests.frontend.test_jit_gradients import weighted


@svod.jit
def softmax(x, w):
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    p = e / np.sum(e, axis=1, keepdims=True)
    return np.sum(p * w)


@svod.jit
def layernorm(x, g, b, w):
    mu = np.mean(x, axis=1, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=1, keepdims=True)
    y = d / np.sqrt(var + 1e-5) * g + b
    return np.sum(y * w)


@svod.jit
def counted_softmax(x, w):
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    return np.sum(e / np.sum(e, axis=1, keepdims=True) * w)


SIZES = (1, 7, 13)
DTYPES = (np.float32, np.float64)


def _arguments(fn, n: int, dtype: type) -> tuple:
    rng = np.random.default_rng(n * 5 + (dtype is np.float32))
    if fn is layernorm:
        values = (rng.standard_normal((n, n)), rng.standard_normal(n), rng.standard_normal(n),
                  rng.standard_normal((n, n)))
    else:
        values = (rng.standard_normal((n, n)), rng.standard_normal((n, n)))
    return tuple(v.astype(dtype) for v in values)


def _differences(fn, args: tuple, position: int, direction: np.ndarray, h: float = 1e-6) -> float:
    """The derivative of ``fn`` run as plain Python, in float64, along ``direction`` of argument ``position``."""
    wide = [np.asarray(a, np.float64) for a in args]

    def moved(sign: float) -> float:
        return float(np.sum(fn.fn(*(a + sign * h * direction if k == position else a for k, a in enumerate(wide)))))
    return (moved(1.0) - moved(-1.0)) / (2 * h)


def _check(grads: tuple, fn, args: tuple, dtype: type) -> None:
    rng = np.random.default_rng(len(args))
    loose = dtype is np.float32
    for position, grad in enumerate(grads):
        assert grad.dtype == dtype and grad.shape == args[position].shape
        direction = rng.standard_normal(grad.shape)
        expected = _differences(fn, args, position, direction)
        got = float(np.sum(grad.astype(np.float64) * direction))
        assert got == pytest.approx(expected, rel=1e-3 if loose else 1e-5, abs=1e-4 if loose else 1e-8)


@pytest.mark.parametrize("fn", [softmax, layernorm], ids=["softmax", "layernorm"])
def test_repeated_gradients_of_interleaved_shapes_and_dtypes_are_bit_for_bit_their_first(fn):
    first: dict[tuple[int, type], tuple] = {}
    for turn in range(3):
        for dtype in DTYPES:
            for n in SIZES:
                args = _arguments(fn, n, dtype)
                grads = svod.grad(fn, argnums=tuple(range(len(args))))(*args)
                if turn == 0:
                    _check(grads, fn, args, dtype)
                    first[(n, dtype)] = grads
                    continue
                for got, kept in zip(grads, first[(n, dtype)], strict=True):
                    assert got.dtype == kept.dtype and np.array_equal(got, kept)


def test_repeated_gradients_of_a_loop_of_other_turns_are_bit_for_bit_their_first():
    """The loop's bounds are the kernels' (``TapedCall.kernel``): a call of other turns takes its own."""
    first: dict[tuple[int, int, type], tuple] = {}
    for turn in range(2):
        for steps in (1, 3, 0):
            for dtype in DTYPES:
                for n in SIZES:
                    x, w = _arguments(softmax, n, dtype)
                    x, w = x[0], w[0]
                    grads = svod.grad(weighted, argnums=(0, 1))(x, w, steps)
                    if turn == 0:
                        first[(steps, n, dtype)] = grads
                        _check(grads, _Steps(steps), (x, w), dtype)
                        continue
                    for got, kept in zip(grads, first[(steps, n, dtype)], strict=True):
                        assert np.array_equal(got, kept)


class _Steps:
    """``weighted`` of some turns, as a function of its arrays (for ``_differences``)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def fn(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return weighted.fn(x, w, self.steps)


def test_a_repeated_gradient_call_rewrites_no_syntax_tree(monkeypatch):
    counts = {"float_reductions": 0, "hoisted": 0, "renamed": 0}

    def counting(name):
        original = getattr(jit_tape, name)

        def counted(*args, **keywords):
            counts[name] += 1
            return original(*args, **keywords)
        monkeypatch.setattr(jit_tape, name, counted)
    for name in counts:
        counting(name)
    args = _arguments(softmax, 7, np.float64)
    kept = svod.grad(counted_softmax, argnums=(0, 1))(*args)
    assert all(counts.values())
    counts.update(dict.fromkeys(counts, 0))
    again = svod.grad(counted_softmax, argnums=(0, 1))(*args)
    assert counts == {"float_reductions": 0, "hoisted": 0, "renamed": 0}
    assert all(np.array_equal(a, b) for a, b in zip(again, kept, strict=True))
    x32, w32 = (a.astype(np.float32) for a in args)
    svod.grad(counted_softmax)(x32, w32)  # another variant: derived for itself
    assert counts["float_reductions"] == 1


@svod.jit
def narrowed(x, dt):
    y = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = dt(x[i]) * dt(x[i])
    return np.sum(y)


@pytest.mark.parametrize("first", [np.float32, np.float64], ids=["float32-first", "float64-first"])
def test_a_constant_a_kernel_reads_is_its_own_for_each_call(first):
    """A dtype argument is a constant of the plan, read in the kernel as a global: calls of other constants, on
    a tape or not, take kernels of their own (a kernel's source is the same for each)."""
    x = np.linspace(0.1, 1.0, 7) + 1e-9
    second = np.float64 if first is np.float32 else np.float32
    for dt in (first, second, first, second):
        expected = narrowed.fn(x, dt)
        assert float(narrowed(x, dt)) == expected
        (value,), pullback = svod.vjp(narrowed, x, dt)
        assert float(value[0]) == expected
        (grad,) = pullback(np.ones(1))[:1]
        assert np.allclose(grad, 2 * x, rtol=1e-6 if dt is np.float32 else 1e-12)
