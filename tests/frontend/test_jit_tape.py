"""What a tape keeps of an ``@svod.jit`` call (``svod.frontend.jit_tape``): the arrays svod makes for the call are
its own, neither copied nor compared, and their values before their first write are one value; those the call
returns are the caller's, compared as any; an array the caller changes between two jit calls is refused. Each
gradient is checked against central differences of the function run as plain Python (float64)."""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest

import svod

SIZES = (0, 1, 2, 7, 13)


def summed_squares(y):
    """The loss both scaled sums take (a plain function: the jit functions calling it take its statements)."""
    total = np.zeros(1, y.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(total, 0, y[i] * y[i])
    return total


@svod.jit
def scaled_sum(x, w):
    y = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i]) * w[i]
    return summed_squares(y)


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


@pytest.mark.parametrize("start", [0.5, 1.0], ids=["constant", "number"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("steps", [1, 5, 17])
def test_a_made_array_updated_in_place_is_run_again_from_its_one_value(start, n, steps):
    """y's kernel reads and writes it each turn; over many turns the tape checkpoints, and the backward pass
    runs turns again from y's values before the first, which it keeps as one value, not a copy: y filled with
    a constant of the source, or with a number argument (``grown_from``)."""
    x = _values(n, 7)

    def fn(v):
        return grown_from_half(v, steps) if start == 0.5 else grown_from(v, start, steps)

    with svod.Tape() as tape:
        loss = fn(x)
    tape.backward(loss)
    assert float(loss[0]) == pytest.approx(_grown_from(x, start, steps), rel=1e-12)
    direction = np.random.default_rng(8).standard_normal(n)
    expected = _differences(lambda v: _grown_from(v, start, steps), x, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)
    grad = svod.grad(fn)(x)
    np.testing.assert_array_equal(grad, tape.grad(x))


@svod.jit
def gathered_steps(x, steps):
    y = np.zeros_like(x)
    order = np.zeros(x.shape[0], np.int64)
    for t in range(steps):
        for i in svod.prange(x.shape[0]):
            order[i] = (i * 3 + t) % x.shape[0]
        for i in svod.prange(x.shape[0]):
            y[i] = y[i] * 0.5 + svod.math.sin(x[order[i]]) * (t + 1)
    loss = np.zeros(1)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])
    return loss


def _gathered_steps(x, steps):
    y = np.zeros_like(x)
    for t in range(steps):
        y = y * 0.5 + np.sin(x[(np.arange(x.shape[0]) * 3 + t) % x.shape[0]]) * (t + 1)
    return float(np.sum(y * y))


@svod.jit
def made_each_turn(x, steps):
    y = np.zeros_like(x)
    for _ in range(steps):
        half = np.full_like(x, 0.5)
        for i in svod.prange(x.shape[0]):
            half[i] = half[i] * y[i] + svod.math.cos(x[i])
        for i in svod.prange(x.shape[0]):
            y[i] = half[i] * x[i]
    loss = np.zeros(1)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])
    return loss


def _made_each_turn(x, steps):
    y = np.zeros_like(x)
    for _ in range(steps):
        y = (0.5 * y + np.cos(x)) * x
    return float(np.sum(y * y))


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoints", "all"])
@pytest.mark.parametrize("n", [1, 7, 13])
@pytest.mark.parametrize("steps", [1, 5, 17])
def test_made_integer_indices_and_arrays_made_each_turn_are_run_again_right(checkpoint, n, steps):
    """An int64 temporary (a gather's indices) rewritten each turn, and a temporary made anew each turn, both
    the tape's own, differentiated in one tape with and without checkpoints; then again after ``reset``."""
    x = _values(n, 11)
    with svod.Tape(checkpoint=checkpoint) as tape:
        first = gathered_steps(x, steps)
        second = made_each_turn(x, steps)
    tape.backward(first)
    tape.backward(second)
    direction = np.random.default_rng(12).standard_normal(n)
    both = _differences(lambda v: _gathered_steps(v, steps) + _made_each_turn(v, steps), x, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(both, rel=1e-6, abs=1e-9)
    tape.reset()
    with tape:
        first = gathered_steps(x, steps)
    tape.backward(first)
    alone = _differences(lambda v: _gathered_steps(v, steps), x, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(alone, rel=1e-6, abs=1e-9)


@svod.jit
def grown_in_columns(x, steps):
    y = np.full((x.shape[0], x.shape[1]), 0.5, order="F")
    for _ in range(steps):
        for i in svod.prange(x.shape[0]):
            for j in svod.prange(x.shape[1]):
                y[i, j] = y[i, j] * svod.math.cos(x[i, j]) + x[i, j]
    loss = np.zeros(1)
    for _ in svod.prange(1):
        for a in range(y.shape[0]):
            for b in range(y.shape[1]):
                loss[0] += y[a, b] * y[a, b] * (a + 2 * b + 1)
    return loss


@pytest.mark.parametrize("steps", [1, 6, 20])
@pytest.mark.parametrize("layout", ["F", "transposed"])
def test_a_made_column_first_array_is_run_again_from_its_one_value(steps, layout):
    """The one value a column-first temporary held is given back as a row-first array in the backward pass's
    runs: the kernels take it at the same values."""
    rng = np.random.default_rng(13)
    x = np.asfortranarray(rng.standard_normal((3, 5))) if layout == "F" else rng.standard_normal((4, 3)).T
    with svod.Tape() as tape:
        loss = grown_in_columns(x, steps)
    tape.backward(loss)
    assert float(loss[0]) == pytest.approx(float(grown_in_columns.fn(x, steps)[0]), rel=1e-12)
    direction = rng.standard_normal(x.shape)
    expected = _differences(lambda v: float(grown_in_columns.fn(v, steps)[0]), x, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)


@svod.jit
def twice_returned(x):
    y = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * x[i]
    return y, y


@svod.jit
def sum_of_squares_of(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@svod.kernel
def sum_of_cubes(loss, y):
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i] * y[i])


def test_a_made_array_returned_twice_or_as_a_scalar_is_the_callers_and_compared():
    """What a jit call returns is the caller's, as one array twice or as a returned scalar's one-element array:
    changed by numpy after a later kernel read it, backward refuses; unchanged, the gradient is the chain's."""
    x, loss = _values(7, 14), np.zeros(1)
    with svod.Tape() as tape:
        y, again = twice_returned(x)
        sum_of_cubes(loss, y)
    again[0] = 9.0
    with pytest.raises(svod.errors.GradientError, match="y changed after the tape recorded sum_of_cubes"):
        tape.backward(loss)
    x, loss = _values(7, 14), np.zeros(1)
    with svod.Tape() as tape:
        s = sum_of_squares_of(x)
        sum_of_cubes(loss, s)
    kept = s.copy()
    s[0] = np.nextafter(s[0], np.inf)
    with pytest.raises(svod.errors.GradientError, match="changed after the tape recorded sum_of_cubes"):
        tape.backward(loss)
    s[:] = kept
    tape.backward(loss)
    np.testing.assert_allclose(tape.grad(x), 3 * np.sum(x * x) ** 2 * 2 * x, rtol=1e-12, atol=1e-300)


@svod.jit
def sines_in_place(y):
    for i in svod.prange(y.shape[0]):
        y[i] = svod.math.sin(y[i])
    loss = np.zeros(1, y.dtype)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])
    return loss


@pytest.mark.parametrize("n", [1, 7])
def test_a_returned_array_then_written_in_place_by_another_jit_call_keeps_its_values_for_the_first(n):
    """squares' y is read by a kernel, then a second jit call overwrites it in place: the first reads' adjoint
    takes y as it was; and y changed by numpy after the second call is refused."""
    x, loss = _values(n, 15), np.zeros(1)
    with svod.Tape() as tape:
        y = squares(x)
        sum_of_cubes(loss, y)
        sines = sines_in_place(y)
        sum_of_cubes(loss, y)
    tape.backward(loss)
    tape.backward(sines)
    expected = 6 * x ** 5 + (3 * np.sin(x * x) ** 2 + 2 * np.sin(x * x)) * np.cos(x * x) * 2 * x
    np.testing.assert_allclose(tape.grad(x), expected, rtol=1e-12, atol=1e-300)
    x = _values(n, 15)
    with svod.Tape() as tape:
        y = squares(x)
        sines = sines_in_place(y)
    y[:] = 7.0
    with pytest.raises(svod.errors.GradientError, match="y changed after the tape recorded"):
        tape.backward(sines)


@pytest.mark.parametrize("n", [1, 7])
def test_vjp_of_a_jit_call_writing_its_argument_refuses_it_changed_before_the_pullback(n):
    """The argument is the call's result; its adjoint reads it after the write, so a change is refused."""
    x = _values(n, 16)
    before = x.copy()
    (written, loss), pullback = svod.vjp(sines_in_place, x)
    assert written is x
    np.testing.assert_allclose(loss, [np.sum(np.sin(before) ** 2)], rtol=1e-12)
    x[0] = np.nextafter(x[0], np.inf)
    with pytest.raises(svod.errors.GradientError, match="changed after the tape recorded"):
        pullback((np.zeros(n), np.ones(1)))
    x[0] = np.sin(before[0])
    (dx,) = pullback((np.zeros(n), np.ones(1)))
    np.testing.assert_allclose(dx, 2 * np.sin(before) * np.cos(before), rtol=1e-12, atol=1e-300)


_DRAWS = itertools.count(1)


@svod.jit
def filled_from_a_draw(x):
    drawn = np.full(x.shape[0], float(next(_DRAWS)))
    loss = np.zeros(1)
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(loss, 0, x[i] * drawn[i])
    return loss


def test_a_fill_the_plan_refuses_is_refused_on_a_tape_at_its_line_in_the_same_words():
    """A fill a kernel cannot compute (``float(next(counter))``: user code the host alone runs) is refused by the
    plan at its line; the tape, which computed it on the host at every call, now refuses it as the plan does,
    the host running it as often as the plan's build does (for the array's dtype and shape)."""
    x = np.arange(1.0, 4.0)
    before = next(_DRAWS)
    with pytest.raises(svod.errors.SvodError) as untaped:
        filled_from_a_draw(x)
    after_plan = next(_DRAWS)
    with pytest.raises(svod.errors.SvodError) as taped, svod.Tape():
        filled_from_a_draw(x)
    after_tape = next(_DRAWS)
    lines, first = inspect.getsourcelines(filled_from_a_draw.fn)
    assert f"test_jit_tape.py:{first + next(k for k, line in enumerate(lines) if 'next(' in line)}" \
        in str(untaped.value)
    assert untaped.value.detail == taped.value.detail
    assert after_tape - after_plan == after_plan - before <= 3


@svod.jit
def filled_from_an_element(x):
    first = np.full(x.shape[0], x[0] * 2.0)
    loss = np.zeros(1)
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(loss, 0, x[i] * first[i] * first[i])
    return loss


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_a_fill_read_from_an_element_is_computed_by_a_kernel_and_differentiated(n):
    """``np.full(n, 2 * x[0])`` on a tape is the plan's: the value, and its derivative through ``x[0]``, which
    a fill the host computed would have dropped. loss = sum(x) * (2 x0)**2: d/dx_i = 4 x0**2, plus 8 x0 sum(x)
    for x0."""
    x = np.linspace(-1.5, 2.0, n) + 0.25
    with svod.Tape() as tape:
        loss = filled_from_an_element(x)
    plain = float(np.sum(x) * (2 * x[0]) ** 2)
    np.testing.assert_allclose(loss, [plain], rtol=1e-12)
    np.testing.assert_allclose(filled_from_an_element(x), [plain], rtol=1e-12)
    tape.backward(loss)
    want = np.full(n, 4 * x[0] ** 2)
    want[0] += 8 * x[0] * np.sum(x)
    np.testing.assert_allclose(tape.grad(x), want, rtol=1e-12)


@svod.jit
def grown_from(x, start, steps):
    y = np.full(x.shape[0], start)
    for _ in range(steps):
        for i in svod.prange(x.shape[0]):
            y[i] = y[i] * svod.math.cos(x[i]) + x[i]
    loss = np.zeros(1)
    for i in svod.prange(y.shape[0]):
        svod.atomic_add(loss, 0, y[i] * y[i])
    return loss


def _grown_from(x, start, steps):
    y = np.full(x.shape[0], start)
    for _ in range(steps):
        y = y * np.cos(x) + x
    return float(np.sum(y * y))


@pytest.mark.parametrize("start", ["distinct", "same"])
def test_a_temporary_filled_from_an_array_is_refused_on_a_tape_as_without_one(start):
    """``np.full(n, start)`` of an array ``start``: the plan refuses it at the line, and so does the tape, in the
    same words (it ran such a fill on the host)."""
    x = _values(3, 18)
    given = {"distinct": np.arange(3) + 0.5, "same": np.full(3, 0.5)}[start]
    with pytest.raises(svod.errors.KernelSyntaxError, match="cannot convert array start") as untaped:
        grown_from(x, given, 1)
    with pytest.raises(svod.errors.KernelSyntaxError) as taped, svod.Tape():
        grown_from(x, given, 1)
    lines, first = inspect.getsourcelines(grown_from.fn)
    assert f"test_jit_tape.py:{first + next(k for k, line in enumerate(lines) if 'np.full' in line)}" \
        in str(untaped.value)
    assert taped.value.detail == untaped.value.detail


@pytest.mark.parametrize("start", [0.5, np.float64(-1.25)])
@pytest.mark.parametrize("n", [1, 2, 7])
@pytest.mark.parametrize("steps", [1, 17])
def test_a_temporary_filled_from_a_number_argument_is_differentiated(start, n, steps):
    """``np.full(n, start)`` of a number argument: filled by a kernel where the statement stands, as without a
    tape; the gradient through the loop that grows it is central differences'."""
    x = _values(n, 18)
    given = start
    with svod.Tape() as tape:
        loss = grown_from(x, given, steps)
    tape.backward(loss)
    assert float(loss[0]) == pytest.approx(_grown_from(x, given, steps), rel=1e-12)
    direction = np.random.default_rng(19).standard_normal(n)
    expected = _differences(lambda v: _grown_from(v, given, steps), x, direction)
    assert float(np.sum(tape.grad(x) * direction)) == pytest.approx(expected, rel=1e-6, abs=1e-9)


@svod.jit
def scaled_sines_in_place(x, w):
    for i in svod.prange(x.shape[0]):
        x[i] = svod.math.sin(x[i]) * w[i]
    return summed_squares(x)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("wrapped", [False, True], ids=["jit", "function"])
def test_grad_of_a_jit_function_keeps_no_copy_to_compare(n, wrapped, monkeypatch):
    """``svod.grad`` of a jit function runs its backward right after the call: nothing of the caller's runs
    between, so the tape copies no argument to compare (a plain function calling it keeps them). x, which the
    call overwrites, is still differentiated at its values before the call."""
    checked: list[int] = []
    backward = svod.Tape.backward

    def counted(self, *args, **keywords):
        checked.append(self.checked_bytes)
        return backward(self, *args, **keywords)

    monkeypatch.setattr(svod.Tape, "backward", counted)
    x, w = _values(n, 21), _values(n, 22)
    given = x.copy()

    def called(a, b):
        return scaled_sines_in_place(a, b)

    fn = called if wrapped else scaled_sines_in_place
    dx, dw = svod.grad(fn, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(x, np.sin(given) * w, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(dx, 2 * np.sin(given) * np.cos(given) * w * w, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dw, 2 * np.sin(given) ** 2 * w, rtol=1e-12, atol=1e-15)
    if wrapped:
        assert checked[0] >= x.nbytes + w.nbytes and checked[0] > 0
    else:
        assert checked[0] == 0


class _Bumper:
    """A callable svod does not read as a function of its own (as it reads a plain function): the host runs it."""

    def __call__(self, a):
        a[0] += 1.0
        return 0.0


_bumped = _Bumper()


@svod.jit
def squares_then_bumped(x):
    y = np.zeros_like(x)
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * x[i]
    z = np.full(x.shape[0], _bumped(x))
    loss = np.zeros(1)
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(loss, 0, y[i] + z[i])
    return loss


def test_grad_of_a_jit_function_whose_fill_runs_the_callers_code_is_refused():
    """A temporary's fill that calls the caller's code (which writes an argument a kernel of the call read) is
    refused, by ``svod.grad`` as on a tape, never differentiated at values the kernel never read."""
    x = _values(5, 23)
    with pytest.raises(svod.errors.SvodError, match="_bumped"):
        svod.grad(squares_then_bumped)(x)


@svod.jit
def filled_beyond_uint8(x):
    k = np.full(x.shape[0], 300, np.uint8)
    loss = np.zeros(1)
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(loss, 0, x[i] * k[i])
    return loss


@svod.jit
def filled_from_the_first(x):
    first = np.full(x.shape[0], x[0])
    loss = np.zeros(1)
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(loss, 0, x[i] * first[i])
    return loss


@pytest.mark.parametrize(("function", "x", "complaint"), [
    (filled_beyond_uint8, np.arange(3.0), "Python integer 300 out of bounds for uint8"),
    (filled_from_the_first, np.zeros(0), "index 0 is out of bounds for axis 0 with size 0")])
def test_a_temporary_the_host_cannot_make_is_refused_on_a_tape_as_without_one(function, x, complaint):
    """NumPy's own complaint making the array (the fill beyond its dtype, an element of an empty array) is the
    plan's refusal at the line, on a tape too: an SvodError, not NumPy's exception escaping the call."""
    with pytest.raises(svod.errors.KernelSyntaxError, match=complaint) as untaped:
        function(x)
    with pytest.raises(svod.errors.KernelSyntaxError, match=complaint) as taped, svod.Tape():
        function(x)
    assert taped.value.detail == untaped.value.detail
    assert f"test_jit_tape.py:{function.__wrapped__.__code__.co_firstlineno + 2}" in str(taped.value)
    with pytest.raises((OverflowError, IndexError), match=complaint):
        function.__wrapped__(x)
