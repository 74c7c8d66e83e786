"""Buffers a gradient's own work takes from a pool and gives back (``svod.frontend.buffers``): the next gradient
reuses them, and nothing the caller is given is one of them.

A pool's free buffers are filled with NaN between calls (``_dirty``): a buffer reused without the zeros or the
copy its use needs shows in the next gradient, which must be bit for bit the first and agree with central
differences of the function run as plain Python."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import svod
from svod.errors import GradientError
from svod.frontend.buffers import Lease, Pool
from tests.frontend.differences import float_of


def _dirty(pool: Pool) -> int:
    """Fill every free buffer of ``pool`` with NaN (bytes 0xff for an integer dtype); how many there were."""
    count = 0
    for buffers in pool._free.values():
        for buffer in buffers:
            buffer.view(np.uint8).fill(0xFF)
            count += 1
    return count


def _free(pool: Pool) -> list[np.ndarray]:
    return [buffer for buffers in pool._free.values() for buffer in buffers]


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---- the pool and the lease --------------------------------------------------------------------------------

def test_a_buffer_given_back_is_taken_again_for_the_same_bytes_and_dtype_only():
    pool = Pool()
    lease = Lease(pool)
    a = lease.empty((3, 5), np.float32)
    base = a.base
    lease.release()
    assert pool.free_bytes == 60
    other = Lease(pool)
    assert other.empty((15,), np.int32).base is not base  # same bytes, another dtype
    assert other.empty((5, 3), np.float32).base is base  # any shape of those bytes
    assert pool.made == 2 and pool.free_bytes == 0


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (13, 3), (4, 0, 2)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_a_leased_zeros_and_copy_hold_what_they_say_over_a_dirty_buffer(shape, order):
    pool = Pool()
    for _ in range(2):
        lease = Lease(pool)
        zeros = lease.zeros(shape, np.float64, order)
        assert zeros.shape == shape and (zeros.flags.f_contiguous if order == "F" else zeros.flags.c_contiguous)
        assert np.array_equal(zeros, np.zeros(shape)) and not np.signbit(zeros).any()
        values = np.array([-0.0, np.nan, np.inf, -np.inf, 1.5] * 20)[:int(np.prod(shape))].reshape(shape)
        copied = lease.copy(values)
        assert copied.flags.c_contiguous and _bits_equal(copied, values)
        lease.release()
        _dirty(pool)


def test_release_since_a_mark_gives_back_only_what_was_taken_after_it():
    pool = Pool()
    lease = Lease(pool)
    kept = lease.empty((4,), np.float64)
    mark = lease.mark()
    lease.empty((4,), np.float64)
    lease.empty((2,), np.float64)
    lease.give(kept)  # given back early, before the mark: the release below leaves the others
    assert pool.free_bytes == 32
    lease.release(mark)
    assert pool.free_bytes == 32 + 32 + 16
    lease.give(np.zeros(4))  # not the lease's: nothing happens
    assert pool.free_bytes == 80


def test_the_pool_keeps_at_most_the_most_one_lease_held_oldest_size_first():
    pool = Pool()
    lease = Lease(pool)
    lease.empty((100,), np.float64)
    lease.empty((200,), np.float64)
    lease.release()  # the most one lease held: 300 elements
    for size in (50, 20):
        lease = Lease(pool)
        lease.empty((size,), np.float64)
        lease.release()
        assert pool.free_bytes <= 300 * 8
    assert sorted(buffer.size for buffer in _free(pool)) == [20, 50, 200]  # the 100 went first, the oldest
    bounded = Pool(limit=0)
    lease = Lease(bounded)
    lease.empty((10,), np.float32)
    lease.release()
    assert bounded.free_bytes == 0 and not _free(bounded)


class _Owner:
    """Stands for a tape: a lease gives its buffers back when its owner is freed."""


def test_a_lease_gives_its_buffers_back_when_its_tape_is_freed():
    pool, owner = Pool(), _Owner()
    lease = Lease(pool)
    lease.on_free(owner)
    buffer = lease.empty((8,), np.float32).base
    del owner
    gc.collect()
    assert pool.take(8, np.dtype(np.float32)) is buffer and pool.made == 1


def test_a_tape_freed_while_its_pool_is_locked_gives_its_buffers_back_without_waiting():
    """The cycle collector runs a freed tape's finalizer wherever it starts, also inside the pool's lock (an
    allocation in ``give``): the finalizer must not wait for the lock its own thread holds."""
    pool, owners = Pool(), [_Owner()]
    lease = Lease(pool)
    lease.on_free(owners[0])
    buffer = lease.empty((8,), np.float32).base

    def free_inside_the_lock() -> None:
        with pool._lock:
            owners.clear()
            gc.collect()

    thread = threading.Thread(target=free_inside_the_lock, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the finalizer waited for the pool's lock its own thread held"
    assert pool.take(8, np.dtype(np.float32)) is buffer


# ---- gradients reuse them --------------------------------------------------------------------------------------

@svod.jit
def layernorm(x, g, b):
    mu = np.mean(x, axis=1, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=1, keepdims=True)
    return d / np.sqrt(var + 1e-5) * g + b


@svod.jit
def layernorm_loss(x, g, b, w):
    mu = np.mean(x, axis=1, keepdims=True)
    d = x - mu
    var = np.mean(d * d, axis=1, keepdims=True)
    return np.sum((d / np.sqrt(var + 1e-5) * g + b) * w)


@svod.kernel
def square_in_place(x):
    for i in svod.prange(x.shape[0]):
        x[i] = x[i] * x[i]


@svod.kernel
def scaled(y, x, a):
    for i in svod.prange(x.shape[0]):
        y[i] = a * svod.math.sin(x[i])


@svod.kernel
def weighted_sum(loss, y, w):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * w[i])


def _rows(n: int, dtype: type, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n + 2)).astype(dtype), rng.uniform(0.5, 1.5, n + 2).astype(dtype),
            rng.standard_normal(n + 2).astype(dtype))


def _layernorm_differences(args: tuple[np.ndarray, ...], cotangent: np.ndarray, position: int,
                           direction: np.ndarray, h: float = 1e-6) -> float:
    wide = [a.astype(np.float64) for a in args]

    def at(sign: float) -> float:
        moved = [a + sign * h * direction if k == position else a for k, a in enumerate(wide)]
        return float(np.sum(layernorm.fn(*moved) * cotangent))
    return (at(1.0) - at(-1.0)) / (2 * h)


def _agree(grads: tuple[np.ndarray, ...], args: tuple[np.ndarray, ...], cotangent: np.ndarray) -> None:
    rng = np.random.default_rng(3)
    loose = args[0].dtype == np.float32
    for position, grad in enumerate(grads):
        assert grad.shape == args[position].shape and grad.dtype == args[position].dtype
        direction = rng.standard_normal(grad.shape)
        expected = _layernorm_differences(args, cotangent.astype(np.float64), position, direction)
        got = float(np.sum(grad.astype(np.float64) * direction))
        assert got == pytest.approx(expected, rel=1e-3 if loose else 1e-6, abs=1e-3 if loose else 1e-8)


def _apart(arrays: list[np.ndarray], others: list[np.ndarray]) -> bool:
    """No array of ``arrays`` shares memory with another of them or with any of ``others``."""
    return not any(np.shares_memory(a, b) for k, a in enumerate(arrays) for b in [*arrays[k + 1:], *others])


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_a_second_vjp_of_a_jit_function_gives_the_first_gradients_in_arrays_of_the_callers_own(device, n):
    dtype = float_of(device)
    layernorm.gradient_pool.clear()
    args = _rows(n, dtype, n)
    cotangent = np.random.default_rng(n + 1).standard_normal((n, n + 2)).astype(dtype)
    result, pullback = svod.vjp(layernorm, *args, device=device)
    first = pullback(cotangent)
    _agree(first, args, cotangent)
    again = pullback(cotangent)  # the same pullback twice: new arrays, the same values
    assert all(_bits_equal(a, b) for a, b in zip(again, first, strict=True))
    assert _apart([*first, *again, *result], list(args))
    del result, pullback
    gc.collect()
    assert layernorm.gradient_pool.free_bytes > 0  # the freed pullback's tape gave its buffers back
    kept = [g.copy() for g in first]
    assert _dirty(layernorm.gradient_pool) > 0
    second = svod.vjp(layernorm, *args, device=device)[1](cotangent)
    assert all(_bits_equal(a, b) for a, b in zip(second, kept, strict=True))
    assert _apart([*first, *second], _free(layernorm.gradient_pool))
    second[0][...] = 7.0  # the caller's: writing one changes no other gradient
    assert all(_bits_equal(a, b) for a, b in zip(first, kept, strict=True))
    third = svod.vjp(layernorm, *args, device=device)[1](cotangent)
    assert all(_bits_equal(a, b) for a, b in zip(third, kept, strict=True))


def test_vjps_alive_at_once_take_buffers_apart(device):
    dtype = float_of(device)
    args = _rows(5, dtype, 11)
    other = tuple(a * 2 for a in args)
    cotangent = np.ones((5, 7), dtype)
    alone = svod.vjp(layernorm, *args, device=device)[1](cotangent), svod.vjp(layernorm, *other, device=device)[1](
        cotangent)
    _dirty(layernorm.gradient_pool)
    pulls = [svod.vjp(layernorm, *a, device=device)[1] for a in (args, other, args)]
    got = [pull(cotangent) for pull in reversed(pulls)]
    for grads, expected in zip(got, [alone[0], alone[1], alone[0]], strict=True):
        assert all(_bits_equal(a, b) for a, b in zip(grads, expected, strict=True))


@pytest.mark.parametrize("n", [1, 3, 13])
def test_a_second_grad_is_the_first_after_the_pool_is_dirtied(device, n):
    dtype = float_of(device)
    x, g, b = _rows(n, dtype, 2 * n)
    w = np.random.default_rng(n).standard_normal((n, n + 2)).astype(dtype)
    gradient = svod.grad(layernorm_loss, argnums=(0, 1, 2))
    first = gradient(x, g, b, w, device=device)
    _agree(first, (x, g, b), w)
    assert layernorm_loss.gradient_pool.free_bytes > 0  # svod.grad gives its tape's buffers back at once
    kept = [a.copy() for a in first]
    for _ in range(2):
        _dirty(layernorm_loss.gradient_pool)
        again = svod.grad(layernorm_loss, argnums=(0, 1, 2))(x, g, b, w, device=device)
        assert all(_bits_equal(a, c) for a, c in zip(again, kept, strict=True))
        assert _apart([*first, *again], [x, g, b, w, *_free(layernorm_loss.gradient_pool)])
        again[1][...] = np.nan
        assert all(_bits_equal(a, c) for a, c in zip(first, kept, strict=True))


@pytest.mark.parametrize("n", [1, 7, 13])
def test_a_kernels_pullback_gives_new_arrays_each_call(device, n):
    dtype = float_of(device)
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(dtype), np.zeros(n, dtype)
    cotangent = rng.standard_normal(n).astype(dtype)
    _, pullback = svod.vjp(scaled, y, x, 2.0, device=device)
    first = pullback(cotangent)
    expected = 2.0 * np.cos(x.astype(np.float64)) * cotangent
    np.testing.assert_allclose(first[1], expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert np.array_equal(first[0], np.zeros(n)) and first[2] is None
    first[1][...] = 5.0
    again = pullback(cotangent)
    np.testing.assert_allclose(again[1], expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert _apart([first[0], first[1], again[0], again[1]], [x, y, cotangent, *_free(scaled.gradient_pool)])


@pytest.mark.parametrize("n", [1, 2, 11])
def test_a_reset_tape_reuses_its_copies_and_gives_each_rounds_gradients(device, n):
    """A kernel that squares its argument in place: the tape copies it before the call, from its pool after the
    first round (dirtied between rounds), and the gradient is that of the values the call read."""
    dtype = float_of(device)
    tape = svod.Tape(checkpoint=False)
    kept = []
    for turn in range(3):
        x0 = np.linspace(-2.0, 3.0, n).astype(dtype) + turn
        x, y, w, loss = x0.copy(), np.zeros(n, dtype), np.full(n, 0.5, dtype), np.zeros(1, dtype)
        with tape:
            square_in_place(x, device=device)
            scaled(y, x, 3.0, device=device)
            weighted_sum(loss, y, w, device=device)
        tape.backward(loss)
        grad = tape.grad(x)
        kept.append((grad, grad.copy()))
        wide = x0.astype(np.float64)
        expected = 0.5 * 3.0 * np.cos(wide * wide) * 2.0 * wide
        np.testing.assert_allclose(grad, expected, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-6)
        tape.reset()
        assert _dirty(tape._lease.pool) > 0
    assert all(_bits_equal(grad, copy) for grad, copy in kept)  # each round's gradient as it was given


def test_a_recorded_array_changed_before_backward_is_refused_with_copies_from_the_pool(device):
    dtype = float_of(device)
    args = _rows(4, dtype, 5)
    cotangent = np.ones((4, 6), dtype)
    expected = svod.vjp(layernorm, *args, device=device)[1](cotangent)
    for _ in range(2):
        _dirty(layernorm.gradient_pool)
        x = args[0].copy()
        _, pullback = svod.vjp(layernorm, x, *args[1:], device=device)
        x[1, 2] = np.nextafter(x[1, 2], np.inf)
        with pytest.raises(GradientError, match="changed"):
            pullback(cotangent)
        x[1, 2] = args[0][1, 2]  # as the forward read it again: the pullback runs
        assert all(_bits_equal(a, b) for a, b in zip(pullback(cotangent), expected, strict=True))


def test_gradients_of_one_function_in_threads_at_once_take_buffers_apart():
    args = [_rows(6, np.float64, seed) for seed in range(4)]
    cotangent = np.random.default_rng(0).standard_normal((6, 8))
    expected = [svod.vjp(layernorm, *a)[1](cotangent) for a in args]
    got: dict[int, list] = {}

    def run(k: int) -> None:
        got[k] = [svod.vjp(layernorm, *args[k])[1](cotangent) for _ in range(5)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(4):
        for grads in got[k]:
            assert all(_bits_equal(a, b) for a, b in zip(grads, expected[k], strict=True))


@pytest.mark.parametrize("pulled", ["jit", "kernel"])
def test_one_pullback_called_from_threads_at_once_gives_each_the_gradients_alone(pulled):
    """A pullback's tape holds the running gradients and the lease of one backward pass: two passes of it at
    once would add into each other's gradients and give back each other's buffers."""
    rng = np.random.default_rng(4)
    if pulled == "jit":
        fn, args = layernorm, _rows(48, np.float64, 9)
        cotangent = rng.standard_normal((48, 50))
    else:
        fn, args = scaled, (np.zeros(4099), rng.standard_normal(4099), 1.5)
        cotangent = rng.standard_normal(4099)
    expected = svod.vjp(fn, *args)[1](cotangent)
    got: list[tuple] = []
    for _ in range(8):
        pullback = svod.vjp(fn, *args)[1]

        def run(pull=pullback) -> None:
            for _ in range(4):
                got.append(pull(cotangent))

        threads = [threading.Thread(target=run) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(got) == 8 * 3 * 4
    for grads in got:
        assert all((a is None and b is None) or _bits_equal(a, b) for a, b in zip(grads, expected, strict=True))
