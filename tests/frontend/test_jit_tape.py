"""What a tape keeps of an ``@svod.jit`` call (``svod.frontend.jit_tape``): the arrays svod makes for the call are
its own, neither copied nor compared, and their values before their first write are one value; those the call
returns are the caller's, compared as any; an array the caller changes between two jit calls is refused. Each
gradient is checked against central differences of the function run as plain Python (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import svod

SIZES = (0, 1, 2, 7, 13)


@svod.jit
def scaled_sum(x, w):
    y = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i]) * w[i]
    total = np.zeros(1, x.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(total, 0, y[i] * y[i])
    return total


@svod.jit
def squares(x):
    y = np.empty_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * x[i]
    return y


@svod.jit
def sines_and_norm(x):
    y = np.empty_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i])
    s = np.zeros(1, x.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(s, 0, y[i] * y[i])
    return y, s


@svod.jit
def grown_from_half(x, steps):
    y = np.full(x.shape[0], 0.5, x.dtype)
    for _ in range(steps):
        for i in svod.prange(x.shape[0]):
            y[i] = y[i] * svod.math.cos(x[i]) + x[i]
    loss = np.zeros(1, x.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])
    return loss


@svod.jit
def grown_from_one(x, steps):
    y = np.ones_like(x)
    for _ in range(steps):
        for i in svod.prange(x.shape[0]):
            y[i] = y[i] * svod.math.cos(x[i]) + x[i]
    loss = np.zeros(1, x.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])
    return loss


@svod.kernel
def sum_of_squares(loss, y):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])


def _differences(loss, x, direction, h=1e-6):
    return (loss(x + h * direction) - loss(x - h * direction)) / (2 * h)


def _values(n, seed):
    """Random values, with -0.0 and an exact 0.0 where there is room."""
    values = np.random.default_rng(seed).standard_normal(n)
    if n > 2:
        values[1], values[2] = -0.0, 0.0
    return values


@pytest.mark.parametrize("n", SIZES)
def test_the_arrays_svod_makes_for_a_jit_call_are_neither_copied_nor_compared(n):
    """Only the arguments and the returned loss are copied to be compared; y, which only the call's kernels
    write, is not, nor are its zeros before the kernel that writes it."""
    x, w = _values(n, 1), _values(n, 2)
    with svod.Tape() as tape:
        total = scaled_sum(x, w)
    assert tape.checked_bytes == x.nbytes + w.nbytes + total.nbytes
    assert tape.peak_saved_bytes <= 2 * 8 * 3, "a value per array svod made, not a copy of it"
    tape.backward(total)
    np.testing.assert_allclose(total, [np.sum((np.sin(x) * w) ** 2)], rtol=1e-12)
    np.testing.assert_allclose(tape.grad(x), 2 * np.sin(x) * np.cos(x) * w * w, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(tape.grad(w), 2 * np.sin(x) ** 2 * w, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("n", [2, 7])
def test_an_array_a_jit_call_returns_is_the_callers_and_compared_as_any(n):
    x, loss = _values(n, 3), np.zeros(1)
    with svod.Tape() as tape:
        y = squares(x)
        y[1] = 5.0
        sum_of_squares(loss, y)
    with pytest.raises(svod.errors.GradientError, match=r"y, an argument of sum_of_squares at .* changed since"):
        tape.backward(loss)
    x, loss = _values(n, 3), np.zeros(1)
    with svod.Tape() as tape:
        y = squares(x)
        sum_of_squares(loss, y)
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(x), 4 * x ** 3, rtol=1e-12)


@pytest.mark.parametrize("n", [1, 7])
def test_vjp_refuses_a_returned_array_its_adjoint_reads_changed_before_the_pullback(n):
    x = _values(n, 4)
    (y, s), pullback = svod.vjp(sines_and_norm, x)
    np.testing.assert_allclose(s, [np.sum(np.sin(x) ** 2)], rtol=1e-12)
    kept = y.copy()
    y[0] = np.nextafter(y[0], np.inf)
    with pytest.raises(svod.errors.GradientError, match="changed after the tape recorded"):
        pullback((np.zeros(n), np.ones(1)))
    y[:] = kept
    dy, ds = np.ones(n), np.array([2.0])
    (dx,) = pullback((dy, ds))
    np.testing.assert_allclose(dx, np.cos(x) * (dy + 2.0 * ds[0] * np.sin(x)), rtol=1e-12)


def test_an_argument_changed_between_two_jit_calls_on_a_tape_is_refused():
    x, w = _values(7, 5), _values(7, 6)
    with svod.Tape() as tape:
        scaled_sum(x, w)
        w[3] = np.nextafter(w[3], np.inf)
        second = scaled_sum(x, w)
    with pytest.raises(svod.errors.GradientError, match=r"w, an argument of .* changed since the call before it"):
        tape.backward(second)


@pytest.mark.parametrize("fn", [grown_from_half, grown_from_one], ids=["full", "ones"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("steps", [1, 5, 17])
def test_a_made_array_updated_in_place_is_run_again_from_its_one_value(fn, n, steps):
    """y's kernel reads and writes it each turn; over many turns the tape checkpoints, and the backward pass
    runs turns again from y's values before the first, which it keeps as one value, not a copy."""
    x = _values(n, 7)
    with svod.Tape() as tape:
        loss = fn(x, steps)
    tape.backward(loss)
    assert float(loss[0]) == pytest.approx(float(fn.fn(x, steps)[0]), rel=1e-12)
    direction = np.random.default_rng(8).standard_normal(n)
    expected = _differences(lambda v: float(fn.fn(v, steps)[0]), x, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    grad = svod.grad(fn)(x, steps)
    np.testing.assert_array_equal(grad, tape.grad(x))
