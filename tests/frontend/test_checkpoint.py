"""``svod.Tape``'s checkpoints: a time loop of kernel calls differentiated from a few kept states, the calls
between run again in the backward pass, against the tape that keeps every value (``checkpoint=False``), central
differences of the loop run in numpy, and the bytes the tape says it keeps."""

from __future__ import annotations

import math

import numpy as np
import pytest

import svod


@svod.kernel
def heat_step(out, u, k):
    for i in svod.prange(1, u.shape[0] - 1):
        for j in svod.prange(1, u.shape[1] - 1):
            c = u[i, j]
            out[i, j] = c + k * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * c) - k * c * c * c


@svod.kernel
def weighted_squares(loss, u, w):
    for i in svod.prange(u.shape[0]):
        for j in svod.prange(u.shape[1]):
            svod.atomic_add(loss, 0, u[i, j] * u[i, j] * w[i, j])


@svod.kernel
def damp_in_place(x, rate):
    for i in svod.prange(x.shape[0]):
        x[i] = x[i] - rate * svod.math.sin(x[i])


@svod.kernel
def weighted_sum(loss, x, w):
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(loss, 0, x[i] * w[i])


def jacobi(u0, w, steps, checkpoint, device=None):
    """The heat loop ping-ponging between two arrays, both u0 at first (their borders never written: each keeps
    u0's), its loss, and the gradient with respect to u0: the sum of the two arrays' as the block found them."""
    a, b, loss = u0.copy(), u0.copy(), np.zeros(1)
    first, second = a, b
    with svod.Tape(checkpoint=checkpoint) as tape:
        for _ in range(steps):
            heat_step(b, a, 0.1, device=device)
            a, b = b, a
        weighted_squares(loss, a, w, device=device)
    tape.backward(loss)
    return tape, tape.grad(first) + tape.grad(second), float(loss[0])


def numpy_jacobi(u0, w, steps):
    a, b = u0.copy(), u0.copy()
    for _ in range(steps):
        c = a[1:-1, 1:-1]
        b[1:-1, 1:-1] = c + 0.1 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4.0 * c) - 0.1 * c ** 3
        a, b = b, a
    return float(np.sum(a * a * w))


@pytest.mark.parametrize("steps", [1, 2, 7, 50])
def test_a_checkpointed_jacobi_loop_gives_the_gradient_of_the_tape_that_keeps_everything(steps):
    rng = np.random.default_rng(steps)
    u0, w = rng.random((7, 5)), rng.random((7, 5))
    _, got, loss = jacobi(u0, w, steps, checkpoint=True)
    _, expected, _ = jacobi(u0, w, steps, checkpoint=False)
    assert loss == pytest.approx(numpy_jacobi(u0, w, steps), rel=1e-12)
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-15)
    direction = rng.standard_normal(u0.shape)
    h = 1e-6
    differences = (numpy_jacobi(u0 + h * direction, w, steps) - numpy_jacobi(u0 - h * direction, w, steps)) / (2 * h)
    assert float(np.sum(got * direction)) == pytest.approx(differences, rel=1e-6)


@pytest.mark.parametrize("steps", [1, 7, 50])
def test_the_calls_run_again_give_the_same_gradient_bit_for_bit_in_plain_python(steps):
    """The plain-Python device adds in one order: the calls run again give the forward's values exactly."""
    rng = np.random.default_rng(1)
    u0, w = rng.random((5, 6)), rng.random((5, 6))
    _, got, _ = jacobi(u0, w, steps, checkpoint=True, device="PYTHON")
    _, expected, _ = jacobi(u0, w, steps, checkpoint=False, device="PYTHON")
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("steps", [1, 2, 7, 50])
def test_a_kernel_reading_and_writing_its_array_is_run_again_from_its_checkpoint(steps):
    rng = np.random.default_rng(steps)
    x0, w = rng.standard_normal(13), rng.standard_normal(13)
    grads = []
    for checkpoint in (True, False):
        x, loss = x0.copy(), np.zeros(1)
        with svod.Tape(checkpoint=checkpoint) as tape:
            for _ in range(steps):
                damp_in_place(x, 0.3)
            weighted_sum(loss, x, w)
        tape.backward(loss)
        tape.backward(loss)
        grads.append(tape.grad(x) / 2.0)
    expected = np.ones(13)
    v = x0.copy()
    for _ in range(steps):
        expected *= 1.0 - 0.3 * np.cos(v)
        v = v - 0.3 * np.sin(v)
    assert np.allclose(grads[0], grads[1], rtol=1e-13)
    assert np.allclose(grads[0], expected * w, rtol=1e-12)
    assert np.array_equal(x, v), "the forward's values are left, not the backward's"


def test_a_long_jacobi_loop_keeps_at_most_two_square_roots_of_its_steps_of_states():
    """512 by 512, 200 steps: the tape keeps a state every 16 calls (13 of them, one array each and of the other
    only its border, which the step never writes), and the backward pass runs each 16 again keeping a state
    every 4, so at most 2 * sqrt(200) arrays are held at once; without checkpoints, one per step."""
    rng = np.random.default_rng(2)
    steps, u0, w = 200, rng.random((512, 512)), rng.random((512, 512))
    tape, got, _ = jacobi(u0, w, steps, checkpoint=True)
    assert tape.saved_bytes <= math.sqrt(steps) * u0.nbytes
    assert tape.peak_saved_bytes <= 2 * math.sqrt(steps) * u0.nbytes
    assert np.all(np.isfinite(got)) and np.any(got != 0.0)


def test_without_checkpoints_the_tape_keeps_every_step():
    rng = np.random.default_rng(3)
    steps, u0, w = 20, rng.random((16, 16)), rng.random((16, 16))
    tape, _, _ = jacobi(u0, w, steps, checkpoint=False)
    assert tape.saved_bytes == tape.peak_saved_bytes == (steps - 1) * u0.nbytes
    tape.reset()
    assert tape.saved_bytes == tape.peak_saved_bytes == 0


@svod.kernel
def products(z, features, weights):
    for i in svod.prange(features.shape[0]):
        for k in svod.prange(features.shape[1]):
            svod.atomic_add(z, i, features[i, k] * weights[k])


@svod.kernel
def softplus_sum(loss, z):
    for i in svod.prange(z.shape[0]):
        svod.atomic_add(loss, 0, svod.math.log(1.0 + svod.math.exp(z[i])))


def test_calls_whose_adjoints_find_what_they_read_are_not_run_again():
    """z is written once and read after: each adjoint reads the caller's arrays, and the backward pass makes no
    copy (no call runs again)."""
    rng = np.random.default_rng(4)
    features, weights = rng.standard_normal((11, 3)), rng.standard_normal(3)
    z, loss = np.zeros(11), np.zeros(1)
    with svod.Tape() as tape:
        products(z, features, weights)
        softplus_sum(loss, z)
    tape.backward(loss)
    assert tape.peak_saved_bytes == tape.saved_bytes == z.nbytes + loss.nbytes, "their values before the calls"
    sigmoid = 1.0 / (1.0 + np.exp(-(features @ weights)))
    assert np.allclose(tape.grad(weights), features.T @ sigmoid, rtol=1e-12)


@svod.kernel
def middle_products(y, x):
    for i in svod.prange(1, x.shape[0] - 1):
        y[i] = svod.math.sin(x[i - 1] * x[i + 1])


@svod.kernel
def add_products(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] += 0.3 * svod.math.sin(x[i]) * x[i]


@svod.kernel
def cosines(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.cos(x[i])


def _random_program(seed, checkpoint):
    """Calls drawn at random over three arrays: in place, stores into part of an array, updates, whole stores
    (each of bounded growth: the values stay finite)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-0.5, 0.5, 7) for _ in range(3)]
    found = list(arrays)
    loss, w = np.zeros(1), rng.uniform(0.0, 1.0, 7)
    with svod.Tape(checkpoint=checkpoint) as tape:
        for _ in range(int(rng.integers(1, 40 if seed % 8 else 130))):
            kind, (to, of) = int(rng.integers(0, 4)), rng.choice(3, 2, replace=False)
            if kind == 0:
                damp_in_place(arrays[to], -0.4)
            else:
                (middle_products, add_products, cosines)[kind - 1](arrays[to], arrays[of])
        for array in arrays:
            weighted_sum(loss, array, w)
    tape.backward(loss)
    return float(loss[0]), [tape.grad(array) for array in found]


@pytest.mark.parametrize("seed", range(24))
def test_random_programs_give_the_gradient_of_the_tape_that_keeps_everything(seed):
    loss, got = _random_program(seed, checkpoint=True)
    same_loss, expected = _random_program(seed, checkpoint=False)
    assert loss == same_loss
    for array, other in zip(got, expected, strict=True):
        assert np.all(np.isfinite(array)) and np.allclose(array, other, rtol=1e-11, atol=1e-14)
