"""Gradients of ``@svod.jit`` functions: on a tape, each of their ``svod.prange`` loops is the kernel call it is,
differentiated by its kernel's adjoint. Each supported case is checked against central differences of the
function run as plain Python (float64) and against the same program spelled as ``@svod.kernel`` calls; what
a tape does not record is refused at its line before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.dtype import dtypes

SIZES = (0, 1, 2, 7, 13)


# ---- one program, spelled as a jit function and as kernel calls ------------------------------------------

@svod.jit
def weighted(x, w, steps):
    y = np.zeros_like(x)
    for t in range(steps):
        for i in svod.prange(x.shape[0]):
            y[i] += w[i] * svod.math.sin(x[i]) * (t * 0.5 + 1.0)
    loss = np.zeros(1, x.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i] + x[i] / (1.0 + w[i] * w[i]))
    return loss


@svod.kernel
def accumulate(y, x, w, t):
    for i in svod.prange(x.shape[0]):
        y[i] += w[i] * svod.math.sin(x[i]) * (t * 0.5 + 1.0)


@svod.kernel
def weighted_loss(loss, y, x, w):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i] + x[i] / (1.0 + w[i] * w[i]))


def weighted_by_kernels(x, w, steps, device=None):
    y = np.zeros_like(x)
    for t in range(steps):
        accumulate(y, x, w, t, device=device)
    loss = np.zeros(1, x.dtype)
    weighted_loss(loss, y, x, w, device=device)
    return loss


@svod.jit
def smooth(x, steps):
    """Averages each inner element with its neighbours, ``steps`` times, in place."""
    tmp = np.zeros_like(x)
    n = x.shape[0]
    for _ in range(steps):
        for i in svod.prange(1, n - 1):
            tmp[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0
        for i in svod.prange(1, n - 1):
            x[i] = svod.math.tanh(tmp[i])


@svod.kernel
def sum_of_squares(loss, y):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])


@svod.kernel
def average(tmp, x):
    for i in svod.prange(1, x.shape[0] - 1):
        tmp[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0


@svod.kernel
def squash(x, tmp):
    for i in svod.prange(1, x.shape[0] - 1):
        x[i] = svod.math.tanh(tmp[i])


def _python_smooth_loss(x, steps):
    x = x.copy()
    smooth.fn(x, steps)
    return float(np.sum(x * x))


def _differences(loss, args, position, direction, h=1e-6):
    """The derivative of ``loss(*args)`` along ``direction`` of argument ``position``, by central differences."""
    def moved(sign):
        return [a + sign * h * direction if k == position else a for k, a in enumerate(args)]
    return (loss(*moved(1.0)) - loss(*moved(-1.0))) / (2 * h)


def _values(n, seed):
    """Values of an argument: random, with -0.0 and an exact 0.0 where there is room."""
    values = np.random.default_rng(seed).standard_normal(n)
    if n > 2:
        values[1], values[2] = -0.0, 0.0
    return values


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_grad_of_a_jit_function_agrees_with_differences_and_with_its_kernel_spelling(n, steps):
    x, w = _values(n, 1), _values(n, 2)
    dx, dw = svod.grad(weighted, argnums=(0, 1))(x, w, steps)
    kx, kw = svod.grad(weighted_by_kernels, argnums=(0, 1))(x, w, steps)
    np.testing.assert_allclose(dx, kx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dw, kw, rtol=1e-12, atol=1e-14)

    def plain(x, w):
        return float(weighted.fn(x, w, steps)[0])
    for position, grad in ((0, dx), (1, dw)):
        direction = np.random.default_rng(3 + position).standard_normal(n)
        expected = _differences(plain, [x, w], position, direction)
        assert float(np.sum(grad * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert dx.shape == x.shape and dx.dtype == x.dtype


def test_a_jit_call_on_a_tape_runs_each_device_as_its_kernel_spelling(device):
    f = np.float64 if dtypes.float64 in device.caps.element_dtypes else np.float32
    x, w = _values(11, 4).astype(f), _values(11, 5).astype(f)
    with svod.Tape() as tape:
        loss = weighted(x, w, 2, device=device)
    tape.backward(loss)
    got = tape.grad(x)
    with svod.Tape() as spelled:
        expected_loss = weighted_by_kernels(x, w, 2, device=device)
    spelled.backward(expected_loss)
    tolerance = 1e-12 if f == np.float64 else 1e-5
    np.testing.assert_allclose(loss, expected_loss, rtol=tolerance)
    np.testing.assert_allclose(got, spelled.grad(x), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(loss, weighted(x, w, 2, device=device), rtol=tolerance)  # the plan's value


@pytest.mark.parametrize("n", [1, 2, 3, 7, 13])
@pytest.mark.parametrize("steps", [0, 1, 4])
def test_a_tape_records_a_jit_function_that_changes_its_argument_in_place(n, steps):
    """The gradient is with respect to x as the block found it, through the function's changes of x and a
    kernel call after it."""
    x0 = _values(n, 6)
    x, loss = x0.copy(), np.zeros(1)
    with svod.Tape() as tape:
        smooth(x, steps)
        sum_of_squares(loss, x)
    tape.backward(loss)
    plain = x0.copy()
    smooth.fn(plain, steps)
    np.testing.assert_allclose(x, plain, rtol=1e-12)
    direction = np.random.default_rng(8).standard_normal(n)
    expected = _differences(_python_smooth_loss, [x0, steps], 0, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)

    k, kernel_loss, tmp = x0.copy(), np.zeros(1), np.zeros(n)
    with svod.Tape() as spelled:
        for _ in range(steps):
            average(tmp, k)
            squash(k, tmp)
        sum_of_squares(kernel_loss, k)
    spelled.backward(kernel_loss)
    np.testing.assert_allclose(tape.grad(x), spelled.grad(k), rtol=1e-12, atol=1e-14)


@svod.jit
def scaled_pair(y, x, a=2.0):
    out = np.empty_like(x)
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * x[i] * a
    for i in svod.prange(x.shape[0]):
        y[i] = out[i] + x[i]
    return out


@pytest.mark.parametrize("n", SIZES)
def test_vjp_of_a_jit_function_gives_its_written_arguments_then_its_returned_arrays(n):
    x = _values(n, 9)
    (y, out), pullback = svod.vjp(scaled_pair, np.zeros(n), x, 3.0)
    np.testing.assert_array_equal(out, x * x * 3.0)
    np.testing.assert_array_equal(y, x * x * 3.0 + x)
    dy_bar, dout_bar = _values(n, 10), _values(n, 11)
    dy, dx, da = pullback((dy_bar, dout_bar))
    np.testing.assert_array_equal(dy, np.zeros(n))  # y's values before the call are overwritten
    np.testing.assert_allclose(dx, dy_bar * (6.0 * x + 1.0) + dout_bar * 6.0 * x, rtol=1e-12)
    assert da is None


def test_vjp_of_a_jit_function_refuses_arguments_that_share_memory_and_a_wrong_count_of_cotangents():
    x = np.ones(4)
    with pytest.raises(svod.errors.GradientError, match="share memory"):
        svod.vjp(scaled_pair, x, x)
    _, pullback = svod.vjp(scaled_pair, np.zeros(4), x)
    with pytest.raises(svod.errors.GradientError, match="gives 2 arrays; the pullback was given 1"):
        pullback((np.ones(4),))


def test_a_jit_function_called_twice_on_a_tape_is_differentiated_through_both_calls():
    x = _values(7, 12)
    y, z, loss = np.zeros(7), np.zeros(7), np.zeros(1)
    with svod.Tape() as tape:
        scaled_pair(y, x, 0.5)
        scaled_pair(z, y, a=0.5)
        sum_of_squares(loss, z)
    tape.backward(loss)

    def plain(v):
        first = v * v * 0.5 + v
        second = first * first * 0.5 + first
        return float(np.sum(second * second))
    direction = np.random.default_rng(13).standard_normal(7)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(_differences(plain, [x], 0, direction),
                                                                    rel=1e-6)


@svod.jit
def banded(a, x):
    """A loop's variable in its kernels' bounds and indices: row k from column k on."""
    n = a.shape[0]
    c = np.zeros_like(a)
    for k in range(n):
        for i in svod.prange(k, n):
            c[k, i] = a[k, i] * svod.math.exp(x[i - k]) + c[k, i]
    loss = np.zeros(1)
    for k in range(n):
        for i in svod.prange(n):
            svod.atomic_add(loss, 0, c[k, i] * c[i, k] * x[k])
    return loss


@svod.kernel
def band(c, a, x, k: svod.Int[0, 4096]):
    for i in svod.prange(k, c.shape[0]):
        c[k, i] = a[k, i] * svod.math.exp(x[i - k]) + c[k, i]


@svod.kernel
def band_loss(loss, c, x, k: svod.Int[0, 4096]):
    for i in svod.prange(c.shape[0]):
        svod.atomic_add(loss, 0, c[k, i] * c[i, k] * x[k])


def banded_by_kernels(a, x):
    c, loss = np.zeros_like(a), np.zeros(1)
    for k in range(a.shape[0]):
        band(c, a, x, k)
    for k in range(a.shape[0]):
        band_loss(loss, c, x, k)
    return loss


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_a_loop_variable_in_kernel_bounds_and_indices_is_differentiated(n):
    """The phases' adjoints keep the bounds the loop gives its variable (without them the race prover could not
    tell row k's work items apart)."""
    rng = np.random.default_rng(n)
    a, x = rng.standard_normal((n, n)), rng.standard_normal(n)
    da, dx = svod.grad(banded, argnums=(0, 1))(a, x)
    ka, kx = svod.grad(banded_by_kernels, argnums=(0, 1))(a, x)
    np.testing.assert_allclose(da, ka, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dx, kx, rtol=1e-12, atol=1e-14)

    def plain(a, x):
        return float(banded.fn(a, x)[0])
    for position, grad in ((0, da), (1, dx)):
        direction = rng.standard_normal(grad.shape)
        expected = _differences(plain, [a, x], position, direction)
        assert float(np.sum(grad * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)


# ---- array statements, reductions into scalars and sequential code --------------------------------------

@svod.jit
def array_statement(y, x):
    y[:] = x * 2.0


@svod.jit
def reduction(y, x):
    s = 0.0
    for i in svod.prange(x.shape[0]):
        s += x[i]
    for i in svod.prange(x.shape[0]):
        y[i] = s * x[i]


@svod.jit
def sequential(y, x):
    y[0] = x[0] * 2.0


@svod.jit
def row_expression(y, x):
    for i in svod.prange(x.shape[0]):
        v = x[i:i + 1] * 2.0
        y[i] = v[0] * x[i]


TAKEN = [
    (array_statement, lambda x, dy: 2.0 * dy),
    (reduction, lambda x, dy: np.sum(dy * x) + dy * np.sum(x)),
    (sequential, lambda x, dy: np.concatenate([[2.0 * dy[0]], np.zeros(x.size - 1)])),
    (row_expression, lambda x, dy: 4.0 * x * dy),
]


@pytest.mark.parametrize(("fn", "pulled"), TAKEN, ids=[fn.name for fn, _ in TAKEN])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_array_statements_reductions_and_sequential_code_are_recorded_as_the_kernels_they_are(fn, pulled, n):
    """A reduction into a scalar across a prange's work items, and sequential code, are the one work item of a
    svod.prange(1) on a tape; an array statement is the loops svod rewrites it into."""
    x, dy = _values(n, 14), _values(n, 15)
    (y,), pullback = svod.vjp(fn, np.zeros(n), x)
    expected = np.zeros(n)
    fn.fn(expected, x)
    np.testing.assert_allclose(y, expected, rtol=1e-12)
    _, dx = pullback(dy)
    np.testing.assert_allclose(dx, pulled(x, dy), rtol=1e-12, atol=1e-14)


# ---- what a tape does not record -------------------------------------------------------------------------

@svod.jit
def data_branch(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i]
    if y[0] > 0.0:  # refused: data_branch
        for i in svod.prange(x.shape[0]):
            y[i] = 2.0 * x[i]


@svod.jit
def repeat(y, x):
    while y[0] < 10.0:  # refused: repeat
        for i in svod.prange(x.shape[0]):
            y[i] += x[i] + 1.0


@svod.jit
def sorted_first(y, x):
    x.sort()  # refused: sorted_first
    for i in svod.prange(x.shape[0]):
        y[i] = x[i]


@svod.jit
def early_end(y, x):
    for _ in range(3):  # refused: early_end
        for i in svod.prange(x.shape[0]):
            y[i] += x[i]
        if y[0] > 2.0:
            break


@svod.jit
def product_update(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = 1.0
    for i in svod.prange(x.shape[0]):
        y[i] *= x[i]  # refused: product_update


@svod.jit
def last_turn(y, x):
    for t in range(3):  # refused: last_turn
        c = t * 1.0
        for i in svod.prange(x.shape[0]):
            y[i] += x[i]
    for i in svod.prange(x.shape[0]):
        y[i] += c * x[i]


@svod.jit
def prefix(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * 2.0
    return y[:2]  # refused: prefix


REFUSED = [
    (data_branch, "an if around svod.prange loops"),
    (repeat, "a while loop around svod.prange loops"),
    (sorted_first, "a sort, a median or a quantile"),
    (early_end, "a break or return inside a loop around svod.prange loops"),
    (product_update, r"an update other than|\*="),
    (last_turn, "c, assigned only inside a loop and read after it"),
    (prefix, r"a return of y\[:k\]"),
]


def _line(name: str) -> int:
    with open(__file__) as source:
        return next(k for k, text in enumerate(source, start=1) if text.rstrip().endswith(f"# refused: {name}"))


@pytest.mark.parametrize(("fn", "words"), REFUSED, ids=[fn.name for fn, _ in REFUSED])
def test_what_a_tape_does_not_record_of_a_jit_function_is_refused_at_its_line(fn, words):
    x, y = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    with pytest.raises(svod.errors.GradientError, match=words) as caught:
        svod.grad(fn, argnums=1)(y, x)
    assert f"{__file__}:{_line(fn.name)}:" in str(caught.value)
    assert caught.value.stage == "gradient"
    assert (caught.value.kernel or "").startswith(fn.name)
    if fn is not product_update:  # (refused by its kernel's adjoint, after the loop before it ran)
        np.testing.assert_array_equal(y, np.zeros(3))  # nothing ran
        np.testing.assert_array_equal(x, [1.0, -2.0, 3.0])


def test_outside_a_tape_the_refused_functions_still_run_as_plans():
    x, y = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    data_branch(y, x)
    np.testing.assert_array_equal(y, 2.0 * x)
    repeat(y, x)
    np.testing.assert_array_equal(y, [10.0, -8.0, 22.0])


@svod.jit
def weighted_by_rounds(x):
    s = 0.0
    for i in svod.prange(x.shape[0]):
        s += x[i] * round(x[i] * 2.0)
    return s


@pytest.mark.parametrize("n", SIZES)
def test_round_has_no_derivative_as_int_has_none(n):
    """``round(x)`` is an int of ``x``: its derivative is zero (as JAX's of ``round``), so the sum's gradient is
    each weight ``round(2x)``; the points lie away from the halves where it jumps."""
    x = np.linspace(-2.1, 3.3, n) + 0.01
    np.testing.assert_allclose(svod.grad(weighted_by_rounds)(x), np.round(2.0 * x), rtol=0, atol=0)
