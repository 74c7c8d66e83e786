"""``svod.Tape`` and ``svod.grad`` over programs of kernel calls, against central differences of the same program
run as plain Python; and the failures reported against Warp's tape, which svod gets right or refuses: a kernel
that reads and writes one array, an input overwritten later in the tape, an array changed before ``backward``,
nested loops of dynamic range."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import svod
from svod.dtype import dtypes
from svod.frontend.tape import DIGESTED_BYTES, key_of


@svod.kernel
def square_in_place(x):
    for i in svod.prange(x.shape[0]):
        x[i] = x[i] * x[i] + 0.5


@svod.kernel
def scaled(y, x, a):
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i]) * a


@svod.kernel
def overwrite(x, v):
    for i in svod.prange(x.shape[0]):
        x[i] = v


@svod.kernel
def sum_of_squares(loss, y):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])


@svod.kernel
def nested_dynamic(y, x, counts):
    for i in svod.prange(y.shape[0]):
        for j in range(counts[i]):
            for k in range(counts[j]):
                y[i] += x[k]


@svod.jit
def doubled(out, x):
    out[:] = x * 2.0


def program(x, w):
    """x squared in place, then sin(x) * 3 into y, x overwritten, and the loss sum(y ** 2) + sum((w * 0 + 2) ...)."""
    y = np.zeros_like(x)
    loss = np.zeros(1, x.dtype)
    square_in_place(x)
    scaled(y, x, 3.0)
    overwrite(x, 0.25)
    scaled(w, y, 2.0)
    sum_of_squares(loss, w)
    return loss


def _python_program(x, w):
    x = x * x + 0.5
    y = np.sin(x) * 3.0
    return float(np.sum((np.sin(y) * 2.0) ** 2))


def _differences(fn, x, direction, h=1e-6):
    return (fn(x + h * direction) - fn(x - h * direction)) / (2 * h)


def test_the_warp_failures_in_one_program_give_the_gradient_of_the_values_each_call_read(device):
    """x is read and written by one kernel, then read, then overwritten: each adjoint still sees the x its call
    read. Warp's tape took them at x's last state."""
    f = np.float64 if dtypes.float64 in device.caps.element_dtypes else np.float32
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(29)
    direction = rng.standard_normal(29)
    x, w = x0.astype(f), np.zeros(29, f)
    with svod.Tape() as tape:
        loss = program_on(device, x, w)
    tape.backward(loss)
    got = float(np.sum(tape.grad(x).astype(np.float64) * direction))
    expected = _differences(lambda v: _python_program(v, None), x0, direction)
    tolerance = 1e-4 if f == np.float64 else 2e-3
    assert got == pytest.approx(expected, rel=tolerance)
    assert np.all(x == f(0.25)), "the forward ran as recorded"


def program_on(device, x, w):
    y = np.zeros_like(x)
    loss = np.zeros(1, x.dtype)
    square_in_place(x, device=device)
    scaled(y, x, 3.0, device=device)
    overwrite(x, 0.25, device=device)
    scaled(w, y, 2.0, device=device)
    sum_of_squares(loss, w, device=device)
    return loss


def test_grad_differentiates_a_plain_function_of_kernel_calls_with_respect_to_each_argument_named():
    rng = np.random.default_rng(1)
    x0, w0 = rng.standard_normal(16), rng.standard_normal(16)
    gx = svod.grad(program)(x0.copy(), w0.copy())
    both = svod.grad(program, argnums=(0, 1))(x0.copy(), w0.copy())
    direction = rng.standard_normal(16)
    assert float(gx @ direction) == pytest.approx(_differences(lambda v: _python_program(v, None), x0, direction),
                                                  rel=1e-4)
    assert np.array_equal(both[0], gx)
    assert np.array_equal(both[1], np.zeros(16)), "w is overwritten before it is read"


def test_an_array_changed_by_numpy_before_backward_is_refused():
    x, y, loss = np.arange(4.0), np.zeros(4), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        sum_of_squares(loss, y)
    x[1] = 7.0
    recorded_at = r"x changed after the tape recorded scaled at .*test_tape\.py:\d+"
    with pytest.raises(svod.errors.GradientError, match=recorded_at):
        tape.backward(loss)
    x[1] = 1.0
    tape.backward(loss)
    assert np.allclose(tape.grad(x), 2 * y * 2.0 * np.cos(np.arange(4.0)))


def _next_float(x: np.ndarray) -> None:
    x[2] = np.nextafter(x[2], np.inf)


def _negative_zero(x: np.ndarray) -> None:
    x[0] = -0.0


def _swap(x: np.ndarray) -> None:
    x[[1, 3]] = x[[3, 1]]


def _other_nan(x: np.ndarray) -> None:
    x.view(np.uint64)[3] = np.float64(np.nan).view(np.uint64) | 1


SMALLEST_CHANGES = [_next_float, _negative_zero, _swap, _other_nan]
"""Changes by numpy the tape tells apart from no change, on ``x = [0, 1, 2, nan]``: one bit, or two elements
swapped."""


def _started(size: int) -> np.ndarray:
    """``[0, 1, 2, nan]``, then (past four elements) a ramp."""
    x = np.linspace(3.0, 4.0, size)
    x[:4] = [0.0, 1.0, 2.0, np.nan]
    return x


@pytest.mark.parametrize("size", [4, DIGESTED_BYTES // 8 + 5])
@pytest.mark.parametrize("change", SMALLEST_CHANGES, ids=lambda change: change.__name__.strip("_"))
def test_the_smallest_change_by_numpy_is_refused(change, size):
    """After the block or between its calls; of an array of ``DIGESTED_BYTES`` or more too, of which the tape keeps
    a digest and no copy. The array as it was gives the gradient again."""
    x, y, loss = _started(size), np.zeros(size), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        sum_of_squares(loss, y)
    assert tape.checked_bytes == loss.nbytes + (0 if x.nbytes >= DIGESTED_BYTES else x.nbytes + y.nbytes)
    change(x)
    with pytest.raises(svod.errors.GradientError, match="x changed after the tape recorded scaled"):
        tape.backward(loss)
    np.copyto(x, _started(size))
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(x), 2 * y * 2.0 * np.cos(x), rtol=1e-12)
    x = _started(size)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        change(y)
        sum_of_squares(loss, y)
    with pytest.raises(svod.errors.GradientError, match=r"y, an argument of sum_of_squares .* changed since"):
        tape.backward(loss)


@pytest.mark.parametrize("element", [0, (1 << 17) - 1, 1 << 17, 3 * (1 << 17) + 4])
def test_one_bit_changed_in_any_part_of_a_large_array_is_refused(element):
    """An array of several MiB, compared with the tape's copy bit for bit: a bit changed in its first element,
    at either side of a MiB's boundary, or in its last."""
    x, y, loss = np.linspace(0.0, 1.0, 3 * (1 << 17) + 5), np.zeros(3 * (1 << 17) + 5), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        sum_of_squares(loss, y)
    x.view(np.uint64)[element] ^= 1
    with pytest.raises(svod.errors.GradientError, match="x changed after the tape recorded scaled"):
        tape.backward(loss)
    x.view(np.uint64)[element] ^= 1
    tape.backward(loss)
    assert np.allclose(tape.grad(x), 2 * y * 2.0 * np.cos(x))


@pytest.mark.parametrize("size", [1, 3, (1 << 16) + 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bit_changed_in_the_last_element_of_an_odd_length_array_is_refused(size, dtype):
    """An array whose bytes are no multiple of a word's (float32 of odd length) is compared byte by byte."""
    x, y, loss = np.linspace(-1.0, 1.0, size).astype(dtype), np.zeros(size, dtype), np.zeros(1, dtype)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        sum_of_squares(loss, y)
    bits = x.view(np.uint32 if dtype == np.float32 else np.uint64)
    bits[-1] ^= 1 << 31 if dtype == np.float32 else 1
    with pytest.raises(svod.errors.GradientError, match="x changed after the tape recorded scaled"):
        tape.backward(loss)
    bits[-1] ^= 1 << 31 if dtype == np.float32 else 1
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(x), 2 * y * 2.0 * np.cos(x), rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_the_tape_keeps_one_copy_of_each_array_it_took_to_check_it():
    x, y, loss = np.arange(5.0), np.zeros(5), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        sum_of_squares(loss, y)
        scaled(y, x, 3.0)
    assert tape.checked_bytes == x.nbytes + y.nbytes + loss.nbytes


def test_vjp_refuses_an_array_its_adjoint_reads_changed_before_the_pullback():
    x, y = np.arange(4.0), np.zeros(4)
    _, pullback = svod.vjp(scaled, y, x, 2.0)
    x[2] = -0.0
    with pytest.raises(svod.errors.GradientError, match="x changed after the tape recorded scaled"):
        pullback(np.ones(4))
    x[2] = 2.0
    _, gx, _ = pullback(np.ones(4))
    np.testing.assert_allclose(gx, 2.0 * np.cos(x))


def test_an_array_changed_by_numpy_and_then_overwritten_in_the_tape_is_refused():
    x, y, loss = np.arange(4.0), np.zeros(4), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        x += 1.0
        overwrite(x, 0.0)
        sum_of_squares(loss, y)
    with pytest.raises(svod.errors.GradientError, match=r"x, an argument of overwrite at .* changed since the call"):
        tape.backward(loss)


def test_an_array_changed_by_numpy_between_recorded_calls_is_refused():
    """y's change by numpy cuts x out of the loss, which a tape replaying the calls would not know."""
    x, y, loss = np.arange(4.0), np.zeros(4), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        y[:] = 1.0
        sum_of_squares(loss, y)
    with pytest.raises(svod.errors.GradientError, match=r"y, an argument of sum_of_squares at .*test_tape\.py:\d+, "
                                                        "changed since the call before it"):
        tape.backward(loss)
    tape.reset()
    with svod.Tape() as tape:
        scaled(y, x, 2.0)
        sum_of_squares(loss, y)
    tape.backward(loss)
    assert np.allclose(tape.grad(x), 2 * y * 2.0 * np.cos(x))


def test_grad_refuses_an_argument_no_kernel_call_took():
    with pytest.raises(svod.errors.GradientError, match="argument 0 of <lambda> was passed to no kernel call"):
        svod.grad(lambda x, w: program(x * 1.0, w))(np.ones(3), np.zeros(3))


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_nested_loops_of_dynamic_range_add_each_turn_once(device):
    """x[k]'s gradient counts the turns that read it: those of j < counts[i] with k < counts[j], once each."""
    counts = np.array([1, 3, 0, 2], np.int32)
    x, y = np.arange(1.0, 5.0), np.zeros(4)
    with svod.Tape() as tape:
        nested_dynamic(y, x, counts, device=device)
    w = np.array([1.0, 10.0, 100.0, 1000.0])
    tape.backward(grads=[(y, w)])
    turns = np.array([[sum(1 for j in range(c) if k < counts[j]) for k in range(4)] for c in counts])
    assert np.array_equal(y, turns @ x)
    assert np.array_equal(tape.grad(x), w @ turns)


def test_backward_adds_up_and_zero_and_reset_clear():
    x, y, loss = np.arange(3.0), np.zeros(3), np.zeros(1)
    with svod.Tape() as tape:
        scaled(y, x, 1.0)
        sum_of_squares(loss, y)
    tape.backward(loss)
    once = tape.grad(x).copy()
    assert np.allclose(once, 2 * np.sin(x) * np.cos(x))
    tape.backward(grads=[(loss, np.array([2.0]))])
    assert np.allclose(tape.grad(x), 3 * once)
    tape.zero()
    assert np.array_equal(tape.grad(x), np.zeros(3))
    tape.backward(grads=[(y, np.ones(3))])
    assert np.allclose(tape.grad(x), np.cos(x)), "from y, the loss's call plays no part"
    tape.reset()
    with pytest.raises(svod.errors.GradientError, match="no call the tape recorded wrote"):
        tape.backward(loss)


def test_what_a_tape_cannot_record_is_refused():
    x, out = np.ones(4), np.zeros(4)
    plan = doubled.plan(out, x)
    with pytest.raises(svod.errors.GradientError, match="a plan runs inside"), svod.Tape():
        plan.execute()
    with pytest.raises(svod.errors.GradientError, match=r"kernel 'scaled' \(svod\.run\) runs inside"), svod.Tape():
        svod.run(scaled.build(out, x, 1.0), [out, x], a=1.0)
    with pytest.raises(svod.errors.GradientError, match="inside another's"), svod.Tape(), svod.Tape():
        pass
    with pytest.raises(svod.errors.GradientError, match="argument x is a Buffer"), svod.Tape():
        scaled(out, svod.Buffer.from_numpy(x), 1.0)
    with pytest.raises(svod.errors.GradientError, match="share memory with another array"), svod.Tape():
        scaled(out, x, 1.0)
        scaled(x[:2], out[:2], 1.0)
    with svod.Tape() as tape:
        scaled(out, x, 1.0)
    with pytest.raises(svod.errors.GradientError, match="one-element array"):
        tape.backward(out)
    with pytest.raises(svod.errors.GradientError, match=r"return loss, not loss\[0\]"):
        svod.grad(lambda v: float(np.sum(v)))(x)
    with pytest.raises(svod.errors.GradientError, match="no float numpy array"):
        svod.grad(program)(np.arange(3), np.zeros(3))


@svod.kernel
def smooth(out, u):
    for i in svod.prange(1, u.shape[0] - 1):
        out[i] = 0.5 * (u[i - 1] + u[i + 1])


@pytest.mark.parametrize("size", [2, 3, 11])
def test_a_linear_kernels_adjoint_reads_no_values_so_the_tape_keeps_none(size):
    """smooth's adjoint adds its output's adjoint into its input's; it reads neither array, so a loop of it
    overwriting two arrays in turn keeps no copy and runs no call again."""
    rng = np.random.default_rng(size)
    u0, weights = rng.standard_normal(size), rng.standard_normal(size)
    a, b = u0.copy(), u0.copy()
    first, second = a, b
    with svod.Tape(checkpoint=False) as tape:
        for _ in range(7):
            smooth(b, a)
            a, b = b, a
    tape.backward(grads=[(a, weights)])
    assert tape.peak_saved_bytes == 0
    step = np.eye(size)
    for i in range(1, size - 1):
        step[i] = 0.0
        step[i, i - 1] = step[i, i + 1] = 0.5
    expected = np.linalg.matrix_power(step, 7).T @ weights
    np.testing.assert_allclose(tape.grad(first) + tape.grad(second), expected, rtol=1e-12, atol=1e-12)


@svod.kernel
def weighted_sines(y, x, w):
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i]) * w[i]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("size", [3, 8, (1 << 15) + 5, 1 << 18])
def test_a_bit_changed_in_an_integer_or_bool_array_a_kernel_read_is_refused(dtype, size):
    """Integer and bool arguments, of byte counts that are and are not a multiple of a word's, across the
    compared chunks: the first, a middle and the last element."""
    x, y, loss = np.linspace(-1.0, 1.0, size), np.zeros(size), np.zeros(1)
    w = (np.arange(size) % 3 + 1).astype(dtype)
    with svod.Tape() as tape:
        weighted_sines(y, x, w)
        sum_of_squares(loss, y)
    for at in (0, size // 2, size - 1):
        w.view(np.uint8)[at * w.itemsize] ^= 1
        with pytest.raises(svod.errors.GradientError, match="w changed after the tape recorded weighted_sines"):
            tape.backward(loss)
        w.view(np.uint8)[at * w.itemsize] ^= 1
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(x), 2 * np.sin(x) * np.cos(x) * w.astype(np.float64) ** 2, rtol=1e-12,
                               atol=1e-300)


@pytest.mark.parametrize("size", [1, 7, 40001])
def test_a_change_to_a_strided_view_a_kernel_read_is_refused(size):
    """A view of every other element is compared as the elements it holds, not its base's memory."""
    base = np.linspace(-1.0, 1.0, 2 * size)
    x, y, loss = base[::2], np.zeros(size), np.zeros(1)
    with svod.Tape() as tape:
        weighted_sines(y, x, np.ones(size))
        sum_of_squares(loss, y)
    base[1] = 5.0  # outside the view: no change to x
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(x), 2 * np.sin(x) * np.cos(x), rtol=1e-12, atol=1e-300)
    x[-1] = np.nextafter(x[-1], np.inf)
    with pytest.raises(svod.errors.GradientError, match="x changed after the tape recorded weighted_sines"):
        tape.backward(loss)


def _views(base: np.ndarray) -> list[np.ndarray]:
    """Views of ``base`` (a 6 x 8 array) apart and overlapping: rows, columns, reversed, strided, empty, 0-d."""
    return [base[0], base[1:3], base[5, ::-1], base[:, 0], base[::2, 1], base[3:3], base[2, 4], base[::-1, ::-3],
            base[4:, 6:], base.T[7], base[1, 2:2], base.reshape(-1)[47:]]


def test_a_tape_refuses_an_array_meeting_another_where_numpy_says_they_may_share_memory():
    """``Tape._key`` finds a new array's neighbours among those it took by their sorted extents: it agrees with
    ``np.may_share_memory`` for every pair of views, whichever came first."""
    base = np.arange(48.0).reshape(6, 8)
    views = _views(base)
    for first, second in itertools.product(range(len(views)), repeat=2):
        a, b = views[first], views[second]
        tape = svod.Tape()
        tape._key(a, square_in_place)
        if key_of(a) == key_of(b):
            continue
        meets = np.may_share_memory(a, b)
        try:
            tape._key(b, square_in_place)
        except svod.errors.GradientError:
            assert meets, (first, second)
        else:
            assert not meets, (first, second)


def test_many_arrays_apart_are_taken_and_one_meeting_any_of_them_is_refused():
    block = np.zeros(1000)
    tape = svod.Tape()
    for start in range(0, 1000, 10)[::-1]:  # (taken in an order that is not the memory's)
        tape._key(block[start:start + 5], square_in_place)
    for start in range(5, 1000, 10):
        tape._key(block[start:start + 5], square_in_place)  # the gaps between them
    for start in (0, 4, 499, 995):
        with pytest.raises(svod.errors.GradientError, match="share memory with another array"):
            tape._key(block[start:start + 2][::-1], square_in_place)
