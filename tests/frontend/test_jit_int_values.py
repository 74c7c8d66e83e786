"""An int argument whose value changes at each call of a jitted function: where the plan reads it only as a
run-time value (a kernel's scalar, a loop's bound around phases or inside a kernel, a branch's test a kernel
computes), every value runs the one plan through the first call's dispatcher, each call computing what plain
Python computes; where the host reads it before the run (a slice's bound, a temporary's length, an operand
NumPy promotes or refuses by its value), each value has a variant and a plan of its own; an index of an axis
(``u[:, t]``) has one for each side of zero. A value outside its variable's bounds is refused on each call, as
before, between values that run."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import KernelSyntaxError, SvodError, VariableError


@svod.jit
def stepped(out, x, steps, shift):
    for t in range(steps):
        for i in prange(x.shape[0]):
            total = x[i]
            turns = shift - 1
            for _ in range(turns + 1):
                total += 1.0
            if shift > 2:
                total = -total
            out[i] = out[i] + total + t - shift
    if shift < 0:
        for i in prange(x.shape[0]):
            out[i] = -out[i]


@svod.jit
def offset(out, x, k):
    for i in prange(x.shape[0]):
        out[i] = x[i] + k


@svod.jit
def widened(a, n):
    return a + n


@svod.jit
def shifted(a, n):
    return a + (n - 200)


@svod.jit
def shifted_in_turns(a, n):
    for _ in range(2):
        m = n - 200
        a[:] = a + m
    return a


@svod.jit
def truncated(a, f):
    return a + int(f)


@svod.jit
def head_sum(x, n):
    return x[:n].sum()


@svod.jit
def first_ones(x, n):
    out = np.zeros(n, x.dtype)
    for i in prange(n):
        out[i] = x[i] * 2.0
    return out


@svod.jit
def column_step(out, a, b, k):
    out[:, :, k] = a[:, :, k] * 2.0 + b[:, :, k]


@svod.jit
def view_column(out, x, k):
    """An index of a view whose columns start past its base's first: a negative one counts from the view's end."""
    v = x[:, 1:]
    out[:] = v[:, k] - x[:, k]


@svod.jit
def column_in_prange(out, x, k):
    for i in prange(x.shape[0]):
        out[i] = x[i, k] * 3.0


STEPS = ((1, 2), (3, 0), (0, 5), (2, -3), (1, 3), (4, 1), (-2, 4), (2, 7), (1, 1), (5, -1))
"""(steps, shift) of successive calls: no turns (0, negative), a kernel loop of none, a branch each way."""


def _float(device: svod.device.Device) -> type:
    return np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32


def _refuses_int8(device: svod.device.Device) -> bool:
    """Whether ``device`` holds no int8 (WebGPU): an int8 array's function is then refused, whatever the int."""
    if svod.dtypes.int8 in device.caps.element_dtypes:
        return False
    with pytest.raises(SvodError, match="cannot hold int8"):
        svod.jit(widened.fn)(np.zeros(3, np.int8), 1, device=device)
    return True


def _in_place(fn: svod.frontend.jit.Jit) -> bool:
    """Whether each plan of ``fn``'s calls runs on the caller's arrays in place (the PYTHON reference's does
    not): its dispatched calls then skip the general binding."""
    return all(call.prepared.binder is not None for call in fn._calls.values())


@pytest.mark.parametrize("n", (0, 1, 7, 13))
def test_ints_that_change_every_call_run_one_plan_as_python_computes(device, n, general_runs):
    """A loop count, a kernel's loop bound (through a scalar computed from the int) and scalar, a branch's test,
    new at each call: one plan, one variant, one dispatcher, its first call alone through the general binding;
    each call Python's answer."""
    fn, dtype = svod.jit(stepped.fn), _float(device)
    x = (np.arange(n, dtype=dtype) - 3.0) * 0.25  # exact sums in any float: the ints' effect alone compared
    for steps, shift in STEPS:
        out, want = np.full(n, 0.5, dtype), np.full(n, 0.5, dtype)
        fn(out, x, steps, shift, device=device)
        stepped.fn(want, x, steps, shift)
        np.testing.assert_array_equal(out, want)
    assert len(fn._plans) == 1 and len(fn._variants) == 1 and len(fn._calls) == 1
    if _in_place(fn):
        assert len(general_runs) == 1


def test_new_ints_between_two_signatures_in_turn_take_each_signatures_dispatcher(device, general_runs):
    """Calls on arrays of two shapes in turn, each with a new int: the last call's dispatcher is the other
    shape's, and the call finds its own shape's by the types of its numbers; each computes Python's answer."""
    fn, dtype = svod.jit(offset.fn), _float(device)
    for k in range(-6, 6):
        for n in (7, 0):
            x = np.arange(n, dtype=dtype) * 0.5
            out, want = np.zeros(n, dtype), np.zeros(n, dtype)
            fn(out, x, k * 3, device=device)
            offset.fn(want, x, k * 3)
            np.testing.assert_array_equal(out, want)
    assert len(fn._plans) == 2 and len(fn._calls) == 2
    if _in_place(fn):
        assert len(general_runs) == 2


@pytest.mark.parametrize("k", (int, np.int64, np.int32))
def test_an_int_past_its_variables_bounds_is_refused_between_new_values_that_run(device, k):
    """A new value at each call, its type's extremes among them, through the first call's dispatcher; a Python
    int outside what its variable takes is refused before anything runs, on each call, with the plan's words,
    between them. (A NumPy int's variable takes its dtype's every value.)"""
    fn, dtype = svod.jit(offset.fn), _float(device)
    x = np.arange(5, dtype=dtype) - 2.0
    narrowed = k is np.int64 and svod.dtypes.int64 not in device.caps.element_dtypes  # held to int32's range
    extreme = int(np.iinfo(np.int32 if narrowed else k).max) if k is not int else \
        (2**31 - 1) if device.caps.index_bits > 32 else 2**29
    goods = (-3, 0, 4, 1, -extreme - (k is not int), extreme)
    bads = (2**31, -(2**31), 2**62) if k is int else (2**31, -(2**31) - 1, 2**62) if narrowed else ()
    for good, bad in zip(goods, (*bads, *[None] * len(goods)), strict=False):
        out = np.full(5, -1.0, dtype)
        fn(out, x, k(good), device=device)
        want = np.full(5, -1.0, dtype)
        offset.fn(want, x, k(good))
        np.testing.assert_array_equal(out, want)
        if bad is None:
            continue
        out = np.full(5, -1.0, dtype)
        with pytest.raises(VariableError, match=f"k={bad} is outside") as raised:
            fn(out, x, k(bad), device=device)
        assert raised.value.stage == "bind"
        np.testing.assert_array_equal(out, np.full(5, -1.0, dtype))
    assert len(fn._plans) == 1 and len(fn._calls) == 1


def test_an_int_numpy_promotes_or_refuses_by_value_reads_a_variant_of_its_value(device):
    """``a_i8 + n``: NumPy 2 refuses a Python int past int8's range (OverflowError) and adds one within it, so
    the rewriting read ``n``'s value: each value has its variant, a refused one is refused on each call, between
    values that compute NumPy's answer."""
    fn = svod.jit(widened.fn)
    a = np.array([-128, -1, 0, 1, 5, 127], np.int8)
    if _refuses_int8(device):
        return
    for n in (5, 300, -128, -129, 127, 300, 0, 5):
        try:
            want = widened.fn(a, n)
        except OverflowError:
            with pytest.raises(KernelSyntaxError, match=f"Python integer {n} out of bounds for int8"):
                fn(a, n, device=device)
            continue
        got = fn(a, n, device=device)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert len(fn._variants) == 4  # one per value that runs; a refused one keeps none, refused at each call
    assert len(fn._plans) == 1  # the values that run share the plan, whose kernels read n at run time


@pytest.mark.parametrize("function", (shifted, shifted_in_turns))
def test_an_int_numpy_refuses_through_a_scalar_computed_from_it_reads_a_variant_of_its_value(device, function):
    """``a_i8 + (n - 200)``, and ``m = n - 200`` then ``a_i8 + m`` in a loop: the value NumPy refuses or adds
    is computed from ``n``, so ``n``'s value decides the rewriting (values of one range of int8's refused and
    taken in turn), each call NumPy's answer or its refusal."""
    fn = svod.jit(function.fn)
    if _refuses_int8(device):
        return
    for n in (100, 5, 250, 400, 200, 72, 73):
        a = np.array([-128, -1, 0, 1, 5, 127], np.int8)
        try:
            want = function.fn(a.copy(), n)
        except OverflowError:
            with pytest.raises(KernelSyntaxError, match="out of bounds for int8"):
                fn(a.copy(), n, device=device)
            continue
        got = fn(a.copy(), n, device=device)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_an_int_numpy_refuses_computed_from_a_float_reads_a_variant_of_the_floats_value(device):
    """``a_i8 + int(f)``: the int NumPy refuses or adds is computed from the float ``f``, so ``f``'s value
    decides the rewriting as an int's would: a value past int8's range after one within it is refused, not run
    by the variant made for the first (which wrapped it)."""
    fn = svod.jit(truncated.fn)
    if _refuses_int8(device):
        return
    for f in (1.0, 300.0, 2.5, -500.0, 127.9, np.float64(-129.0), np.float32(3.0)):
        a = np.array([-128, -1, 0, 1, 5, 127], np.int8)
        try:
            with np.errstate(over="ignore"):
                want = truncated.fn(a, f)
        except OverflowError:
            with pytest.raises(KernelSyntaxError, match="out of bounds for int8"):
                fn(a, f, device=device)
            continue
        got = fn(a, f, device=device)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", (0, 1, 6, 13))
def test_an_int_the_host_reads_makes_a_plan_of_its_value(device, n):
    """A slice's bound and a temporary's length are the host's, read before the run: each value its plan, each
    computing NumPy's answer (an empty slice, a negative bound from the end, one past the end)."""
    dtype = _float(device)
    x = (np.arange(n, dtype=dtype) - 2.5) * 0.5
    summed, made = svod.jit(head_sum.fn), svod.jit(first_ones.fn)
    bounds = (0, 3, -2, 100, 3, -2, n)
    for bound in bounds:
        np.testing.assert_allclose(summed(x, bound, device=device), head_sum.fn(x, bound), rtol=1e-6)
    assert len(summed._plans) == len(set(bounds))
    for length in (m for m in (0, 1, n, 1) if m <= n):
        got = made(x, length, device=device)
        assert got.shape == (length,)
        np.testing.assert_array_equal(got, first_ones.fn(x, length))


@svod.jit
def counted_down(n, x):
    out = np.zeros(n, x.dtype)
    for _ in range(out.shape[0]):
        n -= 1
        out[n] = x[n] * n
    return out, n


@svod.jit
def counted_up(n, x):
    head = np.zeros(n, x.dtype)
    n = n + 1
    tail = np.full(n, x[0])
    return head, tail, n


@pytest.mark.parametrize("n", (0, 1, 6, 13))
def test_an_int_that_sizes_a_temporary_and_is_assigned_after_is_its_argument_there(device, n):
    """``out = np.zeros(n)`` before ``n -= 1`` in a loop: the host makes the array of the argument's value (the
    function's copy of ``n`` holds it until a phase may change it). Refused before as "name '_svod_local_n' is not
    defined"; ``n = n + 1`` before a second array, which a kernel computes, is refused in the user's name."""
    x = (np.arange(13, dtype=_float(device)) - 2.5) * 0.5
    for m in (n, 13, n):
        got, left = counted_down(m, x, device=device)
        want, kept = counted_down.fn(m, x)
        np.testing.assert_array_equal(got, want)
        assert left == kept == 0
    with pytest.raises(KernelSyntaxError, match=r"`n` is a value the run computes, which the host knows only after "
                                                r"it\); .*`tail = np.full\(n, x\[0\]\)`"):
        counted_up(n, x, device=device)


def test_threads_calling_with_their_own_ints_at_once_each_get_their_answer(device):
    """Four threads call the same function at once, each with its own array and a new int at each call: each
    call's result is its own value's (the one plan, its variables bound per call)."""
    fn, dtype = svod.jit(offset.fn), _float(device)
    x = np.arange(9, dtype=dtype) - 4.0
    fn(np.zeros(9, dtype), x, 1, device=device)
    failures: list[str] = []

    def calls(thread: int) -> None:
        out = np.zeros(9, dtype)
        for turn in range(60):
            k = thread * 1000 - turn * (thread + 1)
            fn(out, x, k, device=device)
            if not np.array_equal(out, x + dtype(k)):
                failures.append(f"thread {thread}, k={k}: {out}")

    threads = [threading.Thread(target=calls, args=(thread,)) for thread in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert len(fn._plans) == 1


def test_an_int_error_names_the_kernel_and_stage():
    """The refusal of an int past its bounds is an ``SvodError`` that names the kernel and the stage."""
    fn = svod.jit(offset.fn)
    x = np.zeros(3, np.float32)
    fn(np.zeros(3, np.float32), x, 2)
    with pytest.raises(SvodError) as raised:
        fn(np.zeros(3, np.float32), x, 2**40)
    assert raised.value.kernel and raised.value.stage == "bind"


@svod.jit
def stored(a, n):
    for i in prange(a.shape[0]):
        a[i] = n
    return a


@svod.jit
def added(out, a, n):
    for i in prange(a.shape[0]):
        out[i] = a[i] + n
    return out


@pytest.mark.parametrize("function", (stored, added))
def test_a_kernels_int_argument_numpy_refuses_by_value_is_refused(device, function):
    """``a_i8[i] = n`` and ``a_i8[i] + n`` in a prange: NumPy 2 raises OverflowError for a Python int past
    int8's range, so svod must refuse the call (an SvodError), not store it wrapped."""
    if _refuses_int8(device):
        return
    fn = svod.jit(function.fn)
    for n in (3, 200, -1, -300):
        a = np.array([-128, -1, 0, 1, 5, 127], np.int8)
        args = (a,) if function is stored else (np.zeros(6, np.int8), a)
        try:
            with np.errstate(over="ignore"):
                want = function.fn(*(x.copy() for x in args), n)
        except OverflowError:
            try:
                got = fn(*args, n, device=device)
            except SvodError:
                continue
            raise AssertionError(f"n={n}: NumPy refuses it, svod computed {got}") from None
        np.testing.assert_array_equal(fn(*args, n, device=device), want)


@svod.jit
def mixed(out, a, x, n, m):
    for i in prange(a.shape[0]):
        out[i] = a[i] - m + x[n] + (a[i] < n)
    return out


def _outcome(function, args):
    """What ``function`` computes of copies of ``args``, or ``OverflowError`` where it raises one (an
    ``SvodError`` that reads as NumPy's refusal, for a jitted function)."""
    try:
        with np.errstate(over="ignore"):
            return function(*(x.copy() if isinstance(x, np.ndarray) else x for x in args))
    except OverflowError:
        return OverflowError
    except SvodError as err:
        assert "out of bounds for" in str(err) and "Python integer" in str(err), str(err)
        assert err.kernel and err.kernel.startswith("mixed") and err.stage in ("bind", "build"), str(err)
        return OverflowError


@pytest.mark.parametrize("dtype", ("uint8", "int8", "int16", "uint16"))
def test_an_int_meeting_a_narrow_element_is_numpys_by_value(device, dtype):
    """``a[i] - m`` of a narrow element and a Python int runs in the element's dtype, as NumPy 2 computes it,
    and a value past the dtype is refused (each call, between values that run); the same int indexing an
    array and compared with an element is read as wide as it is (a comparison is exact in NumPy)."""
    fn = svod.jit(mixed.fn)
    info = np.iinfo(dtype)
    a = np.array([info.min, 0, 1, 5, info.max], dtype)
    x = np.arange(7, dtype=dtype)
    if getattr(svod.dtypes, dtype) not in device.caps.element_dtypes:  # WebGPU: 32-bit integers only
        with pytest.raises(SvodError, match=f"cannot hold {dtype}"):
            fn(np.zeros(5, np.int32), a, x, 3, 1, device=device)
        return
    for n, m in ((3, 1), (6, -1), (0, info.max), (2, info.max + 1), (4, info.min - 1), (1, 40000), (5, 2)):
        args = (np.zeros(5, np.int32), a, x, n, m)
        want, got = _outcome(mixed.fn, args), _outcome(lambda *v: fn(*v, device=device), args)
        if want is OverflowError or got is OverflowError:
            assert got is want, f"n={n}, m={m}: {got} where Python gives {want}"
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"n={n}, m={m}")


def test_threads_storing_their_own_ints_into_int8_each_get_their_answer_or_refusal():
    """Threads call at once with values inside and outside int8: each in-range call stores its value, each
    other is refused."""
    fn = svod.jit(stored.fn)
    fn(np.zeros(5, np.int8), 1)
    failures: list[str] = []

    def calls(thread: int) -> None:
        for turn in range(40):
            n = (thread * 37 + turn * 11) % 400 - 200
            a = np.zeros(5, np.int8)
            try:
                fn(a, n)
            except SvodError:
                if -128 <= n <= 127:
                    failures.append(f"n={n} refused")
                continue
            if not (-128 <= n <= 127 and (a == n).all()):
                failures.append(f"n={n}: {a}")

    threads = [threading.Thread(target=calls, args=(thread,)) for thread in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


@svod.jit
def read_at(out, x, n):
    for i in prange(out.shape[0]):
        out[i] = x[n] + i
    return out


@svod.jit
def rows_at(out, x, n):
    for i in prange(out.shape[0]):
        out[i] = x[i, n] + x[n, i] * 10.0
    return out


@svod.jit
def written_at(x, n):
    x[n] = -1.0
    return x


@svod.jit
def picked(x, n):
    y = x * 2.0
    return y[n]


def _plainly(function):
    """``function`` called as a jitted one is, its ``device`` ignored: plain Python."""
    def called(*args, device):
        return function(*args)
    return called


def _indexed(function, device, args):
    """What ``function`` gives of copies of ``args``, or ``IndexError`` where it refuses the index."""
    try:
        return function(*(x.copy() if isinstance(x, np.ndarray) else x for x in args), device=device)
    except IndexError:
        return IndexError
    except SvodError as err:
        assert "out of bounds" in str(err) or "accessed at index" in str(err), str(err)
        return IndexError


@pytest.mark.parametrize("order", (1, -1))
def test_a_run_time_index_is_pythons_from_the_end(device, order):
    """``x[n]`` with a run-time ``n`` in a kernel and in host code: a negative ``n`` counts from the end, once,
    and one past either end is refused, as Python's ``IndexError``; in either order of calls (the first call's
    value makes the plan)."""
    dtype = _float(device)
    length = 7
    x, x2 = np.arange(length, dtype=dtype) * 1.5 - 2.0, (np.arange(length * length, dtype=dtype) - 9.0).reshape(
        length, length)
    functions = [(svod.jit(read_at.fn), read_at.fn, lambda n: (np.zeros(3, dtype), x, n)),
                 (svod.jit(rows_at.fn), rows_at.fn, lambda n: (np.zeros(length, dtype), x2, n)),
                 (svod.jit(written_at.fn), written_at.fn, lambda n: (x, n)),
                 (svod.jit(picked.fn), picked.fn, lambda n: (x, n))]
    for n in (-length, -1, 0, length - 1, length, -length - 1, -3, 2)[::order]:
        for fn, plain, args in functions:
            want = _indexed(_plainly(plain), device, args(n))
            got = _indexed(fn, device, args(n))
            if want is IndexError or got is IndexError:
                assert got is want, f"{plain.__name__}, n={n}: {got} where Python gives {want}"
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{plain.__name__}, n={n}")


@svod.jit
def shifted(out, a, n):
    for i in prange(a.shape[0]):
        out[i] = a[i] + (n - 200)
    return out


def _narrow_outcome(function, args, device):
    """What ``function`` gives of copies of ``args`` on ``device`` (plain Python where it has no ``jit``'s
    ``fn``), or ``OverflowError`` where it raises one or refuses the call as NumPy 2 does (an ``SvodError``)."""
    copies = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    try:
        with np.errstate(over="ignore"):
            return function(*copies, device=device) if hasattr(function, "fn") else function(*copies)
    except OverflowError:
        return OverflowError
    except SvodError as err:
        assert "out of bounds for int8" in str(err), str(err)
        return OverflowError


def _as_numpy_does(fn, plain, cases, device):
    """Each case's answer from jitted ``fn`` is plain ``plain``'s: its values, or a refusal where it raises."""
    for args in cases:
        want, got = _narrow_outcome(plain, args, device), _narrow_outcome(fn, args, device)
        if want is OverflowError or got is OverflowError:
            assert got is want, f"{args[1:]!r}: {got} where Python gives {want}"
        else:
            np.testing.assert_array_equal(got, want, err_msg=repr(args[1:]))


def test_a_compound_int_expression_meeting_int8_is_numpys(device):
    """``a_i8[i] + (n - 200)`` into an int64 array: NumPy 2 computes the sum in int8 (wrapping: 100 + 100 is
    -56) and raises OverflowError where ``n - 200`` itself is past int8 (n = 500, n = 10)."""
    if _refuses_int8(device):
        return
    a = np.array([100, -1, 127, -128, 0], np.int8)
    cases = [(np.zeros(5, np.int64), a, n) for n in (300, 250, 200, 327, 328, 72, 71, 500, 10)]
    _as_numpy_does(svod.jit(shifted.fn), shifted.fn, cases, device)


def test_a_numpy_integer_argument_stored_into_int8_is_numpys(device):
    """``a_i8[i] = n`` with ``n`` an ``np.int64``/``np.uint8``/``np.int16``: NumPy 2's setitem refuses a value
    int8 does not hold (``np.int64(300)``, ``np.uint8(200)``) and stores one it holds."""
    if _refuses_int8(device):
        return
    values = (np.int64(5), np.int16(-3), np.int64(-128), np.uint8(127), np.int64(300), np.uint8(200),
              np.int16(-129))
    _as_numpy_does(svod.jit(stored.fn), stored.fn, [(np.zeros(3, np.int8), n) for n in values], device)


@pytest.mark.parametrize("function", (column_step, view_column, column_in_prange))
def test_an_int_indexing_an_axis_reads_one_plan_for_each_side_of_zero(device, function):
    """``out[:, :, k] = a[:, :, k] ...``, an index of a view that starts at column 1, an element ``x[i, k]`` in a
    ``prange``, with a new ``k`` at each call: read at run time, one variant and one plan for every value within
    the axis on its side of zero, each call plain Python's answer; a value past the axis is refused as NumPy
    raises, on each call, between values that run."""
    fn, dtype = svod.jit(function.fn), _float(device)
    shape = (3, 5, 4) if function is column_step else (3, 5)
    a = np.arange(np.prod(shape), dtype=dtype).reshape(shape) * 0.5
    b = a[::-1].copy()
    arrays = (a, b) if function is column_step else (a,)
    for k in (0, 3, 1, -1, -4, 4, 2, -2, -5, 3, -3, 7):
        out, want = (np.zeros(shape, dtype), np.zeros(shape, dtype)) if function is column_step else \
            (np.zeros(3, dtype), np.zeros(3, dtype))
        try:
            function.fn(want, *arrays, k)
        except IndexError:
            with pytest.raises(KernelSyntaxError, match="out of bounds"):
                fn(out, *arrays, k, device=device)
            continue
        fn(out, *arrays, k, device=device)
        np.testing.assert_array_equal(out, want, err_msg=f"k={k}")
    assert len(fn._variants) == 2 and len(fn._plans) == 2


def test_a_plan_made_for_an_index_refuses_a_value_past_its_range_when_run_alone():
    """The plan of ``v[:, k]`` (``v = x[:, 1:]``) for ``k = 2`` holds ``k`` to 0..3 in its kernels: run on its own
    (as a saved plan is), ``k = -1``, which would count from the base's end, not the view's, is refused."""
    fn = svod.jit(view_column.fn)
    x, out = np.arange(15.0).reshape(3, 5), np.zeros(3)
    plan = fn.plan(out, x, 2)
    with pytest.raises(VariableError, match=r"k=-1 is outside bounds \[0, 3\]"):
        plan.execute(k=-1)
