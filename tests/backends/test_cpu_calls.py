"""A prepared call's checks and launch in native code (``svod.backends.cpu_calls``): a call of the signature it was
made for runs there, and every other call (another dtype object, shape, strides, flags, alignment, overlap, a
subclass) is declined, having run nothing, and taken by the checks in Python as before: computed as NumPy computes
it, or refused in the same words."""

from __future__ import annotations

import ctypes
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import svod
from svod.backends.cpu_calls import array_addresses, array_call, native_calls
from svod.device import CallArray, CallScalar, Variable
from svod.dtype import dtypes
from svod.errors import SvodError
from tests.helpers import open_device


def scaled_sum_fn(out, x, y):
    for i in range(out.shape[0]):
        out[i] = x[i] * 2.0 + y[i]


class Tagged(np.ndarray):
    """An ndarray subclass: its objects are not numpy's own arrays, which the native call reads."""


def _answers(kernel: svod.Kernel) -> list[bool]:
    """What the native call of ``kernel``'s last prepared call answers from now on (True ran, False declined)."""
    prepared = kernel._calls.last
    assert prepared is not None
    namespace = prepared.run.__globals__
    assert "NATIVE" in namespace, "a tiny kernel's prepared call on a CPU calls natively"
    answers: list[bool] = []
    native: Callable[[tuple[Any, ...]], bool] = namespace["NATIVE"]

    def counted(args: tuple[Any, ...]) -> bool:
        answers.append(native(args))
        return answers[-1]

    namespace["NATIVE"] = counted
    return answers


def _outcome(kernel: svod.Kernel, out: np.ndarray, x: np.ndarray, y: np.ndarray, device: object) -> object:
    """The array ``out`` becomes, or the error the call raises (its type and words)."""
    try:
        kernel(out, x, y, device=device)
    except SvodError as err:
        return type(err), str(err)
    return np.array(out)


def _unaligned(values: np.ndarray) -> np.ndarray:
    raw = np.zeros(values.nbytes + 1, np.uint8)
    array = raw[1:].view(values.dtype)
    array[:] = values
    return array


def test_numpys_arrays_are_laid_out_as_the_native_call_reads_them():
    assert native_calls() is not None


def test_the_checks_alone_answer_the_addresses_of_arrays_of_their_signature_and_none_for_others():
    """``array_addresses``, a jitted function's native check: the addresses of arrays as the signature says, in
    its order; None, having read nothing past them, for anything else."""
    out, x = np.zeros(5), np.arange(5.0)
    check = array_addresses(2, [CallArray(1, x.dtype, x.shape, False), CallArray(0, out.dtype, out.shape, True)],
                            [(0, 1)])
    assert check is not None
    assert check((out, x)) == [x.ctypes.data, out.ctypes.data]
    frozen = np.zeros(5)
    frozen.flags.writeable = False
    declined = {"a list of them": [out, x], "one argument more": (out, x, x), "one fewer": (out,),
                "the output read too": (out, out), "a read-only output": (frozen, x), "a number": (out, 1.0),
                "another dtype": (out, x.astype(np.float32)), "strided": (out, np.zeros(10)[::2]),
                "a subclass": (out, x.view(Tagged)), "another shape": (out, np.zeros(6))}
    assert {name: check(args) for name, args in declined.items()} == dict.fromkeys(declined)
    fresh = np.zeros(5)
    assert check((fresh, frozen)) == [frozen.ctypes.data, fresh.ctypes.data]  # a read-only input is read in place


def _cases(size: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Calls after calls of ``(out, x, y)`` of ``size`` float64 elements each, by what is new in them."""
    x, y = np.linspace(-2.0, 3.0, size), np.arange(size, dtype=np.float64)
    frozen, shared = np.full(size, np.nan), np.linspace(1.0, 2.0, size)
    frozen.flags.writeable = False
    return {
        "new arrays": (np.full(size, np.nan), x + 1.0, y * 3.0),
        "a strided input": (np.full(size, np.nan), np.linspace(0.0, 1.0, 2 * size)[::2], y),
        "a byte-swapped input": (np.full(size, np.nan), x.astype(">f8"), y),
        "an unaligned input": (np.full(size, np.nan), _unaligned(x), y),
        "a subclass": (np.full(size, np.nan), x.view(Tagged), y),
        "a read-only output": (frozen, x, y),
        "an input that is the output": (shared, shared, y),
        "another float dtype": (np.full(size, np.nan), x.astype(np.float32), y),
        "another shape": (np.full(size + 1, np.nan), np.ones(size + 1), np.ones(size + 1)),
    }


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("size", [1, 7, 16])
@pytest.mark.parametrize("case", list(_cases(1)))
def test_calls_of_the_prepared_signature_run_natively_and_others_as_before(compiler, size, case):
    """After two calls of one signature, a call of it runs natively; any other is declined and taken as a first
    call of it is: computed as plain Python computes it (the output and an input one array too), or refused in the
    same words."""
    device = open_device(compiler)
    kernel = svod.kernel(scaled_sum_fn)
    x, y = np.linspace(-2.0, 3.0, size), np.arange(size, dtype=np.float64)
    for _ in range(2):
        kernel(np.full(size, np.nan), x, y, device=device)
    answers = _answers(kernel)
    got = _outcome(kernel, *_cases(size)[case], device)
    first = _outcome(svod.kernel(scaled_sum_fn), *_cases(size)[case], device)  # the same arrays anew
    if isinstance(first, tuple):
        assert got == first
    else:
        out, x_, y_ = (np.array(a) for a in _cases(size)[case])
        if case == "an input that is the output":
            x_ = out
        scaled_sum_fn(out, x_, y_)
        np.testing.assert_array_equal(first, out)
        np.testing.assert_array_equal(got, out)
    native = case == "new arrays" or (case == "a strided input" and size == 1)  # (one element: contiguous)
    assert answers == [native]
    kernel(out := np.full(size, np.nan), x, y, device=device)
    np.testing.assert_array_equal(out, x * 2.0 + y)


def test_calls_from_threads_at_once_each_run_on_their_own_arrays():
    kernel = svod.kernel(scaled_sum_fn)
    size = 9
    x, y = np.arange(size, dtype=np.float64), np.ones(size)
    kernel(np.zeros(size), x, y)
    kernel(np.zeros(size), x, y)
    failures: list[str] = []

    def calls(seed: int) -> None:
        for turn in range(300):
            out, shift = np.full(size, np.nan), float(seed * 1000 + turn)
            kernel(out, x + shift, y)
            if not np.array_equal(out, (x + shift) * 2.0 + y):
                failures.append(f"thread {seed}, turn {turn}")

    threads = [threading.Thread(target=calls, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_svod_run_of_the_arrays_it_ran_on_first_runs_natively_and_of_others_as_before(compiler):
    """``svod.run`` in place with no variable values: a call on arrays like the first one's runs natively; others
    (longer than the kernel needs, strided, read-only, another dtype, one array twice) are declined and taken as
    before: run in place, through a copy, or refused; one of another count of arrays is refused before the native
    call could read past them."""
    device = open_device(compiler)
    k = svod.KernelBuilder("plus_one_natively")
    out, x = k.buffer(svod.dtypes.float32, 16), k.buffer(svod.dtypes.float32, 16)
    i = k.range(16)
    k.store(out[i], x[i] + 1.0)
    ast = k.build()
    values = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
    svod.run(ast, [np.zeros(16, np.float32), values], device=device)
    reused = svod.compile(ast, device)._reused
    answers: list[bool] = []
    native = reused.native
    reused.native = lambda args: answers.append(native(args)) or answers[-1]
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    shared = values.copy()
    cases = [(np.zeros(16, np.float32), values + 1), (np.zeros(17, np.float32), np.ones(17, np.float32)),
             (np.zeros(16, np.float32), np.linspace(0, 1, 32, dtype=np.float32)[::2]), (frozen, values),
             (np.zeros(16, np.float64), values), (shared, shared)]
    for number, (target, source) in enumerate(cases):
        want = source[:16].astype(np.float32) + np.float32(1.0)
        try:
            svod.run(ast, [target, source], device=device)
        except SvodError as err:
            assert number in (3, 4), err  # read-only, and float64 where the kernel writes float32
        else:
            np.testing.assert_array_equal(target[:16], want)
    assert answers == [True, False, False, False, False, False]
    for wrong in ([np.zeros(16, np.float32)], [np.zeros(16, np.float32), values, values]):  # a count of its own
        with pytest.raises(SvodError, match=f"kernel takes 2 buffers, got {len(wrong)}"):
            svod.run(ast, wrong, device=device)
    assert answers == [True, False, False, False, False, False]


def scaled_by_fn(out, x, a):
    for i in range(out.shape[0]):
        out[i] = x[i] * a


def raised_by_fn(out, x, k):
    for i in range(out.shape[0]):
        out[i] = x[i] + k


def _float_of_bits(bits: int) -> float:
    return float(np.array(bits, np.uint64).view(np.float64))


FLOATS = [0.5, -0.0, math.nan, -math.nan, _float_of_bits(0x7FF0_0000_0000_0001), _float_of_bits(0xFFF8_0000_0000_0123),
          math.inf, -math.inf, 5e-324, 1e-310, 1.4e-45, 2.0**-150, 3.4028235e38, 3.5e38, 1e39, -1e300, 1.0 + 2.0**-24,
          1.0 + 2.0**-30, 16777217.0]
"""Floats whose float32 is each a case of its own: signed zeros and NaNs (a signalling one, one with a payload),
infinities, subnormals of both widths, the largest float32, values past it that round to it or overflow, halfway
and below-half roundings."""
INTS = [0, -1, 7, 127, 128, -129, 2**31 - 1, 2**31, -(2**31) - 1, 2**62, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1,
        2**64]
"""Ints across the edges of 8-, 32- and 64-bit integers, and past them."""


def _outcomes(kernel: svod.Kernel, x: np.ndarray, number: object, device: object) -> object:
    """What ``kernel`` makes of ``x`` and ``number`` (a new output), or the error it raises."""
    return _outcome(kernel, np.zeros(x.shape, x.dtype), x, number, device)  # type: ignore[arg-type]


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_float_argument_is_read_natively_as_python_reads_it(compiler, dtype):
    """A float that scales a float32 or float64 array is read in native code as its variable's bits, as a first
    call reads it in Python: numpy's cast to float32 (round to nearest, past the largest finite an infinity),
    the float64 itself; every call of the signature runs natively."""
    device = open_device(compiler)
    kernel = svod.kernel(scaled_by_fn)
    x = np.array([-2.5, -1.0, -0.0, 0.0, 1e-30, 3.0, 7.25], dtype)
    for warm in (1.0, 2.0):
        kernel(np.zeros(7, dtype), x, warm, device=device)
    answers = _answers(kernel)
    for number in FLOATS:
        got = _outcomes(kernel, x, number, device)
        assert isinstance(got, np.ndarray), got
        np.testing.assert_array_equal(got, _outcomes(svod.kernel(scaled_by_fn), x, number, device))
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(got, x * dtype(number))
    assert answers == [True] * len(FLOATS)


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_an_int_argument_is_read_natively_as_python_reads_it_or_declined(compiler, dtype):
    """An int added to an integer array is read in native code, as a first call reads it in Python: within its
    variable's range and its dtype's, it runs natively and computes what a first call computes; past them, the
    call is declined and a first call's checks take it (a value or an error, the same as a first call's)."""
    device = open_device(compiler)
    kernel = svod.kernel(raised_by_fn)
    x = np.array([0, 1, 2, 3, 5], dtype)
    for warm in (1, 2):
        kernel(np.zeros(5, dtype), x, warm, device=device)
    answers = _answers(kernel)
    ran = []
    for number in INTS:
        got, first = (_outcomes(k, x, number, device) for k in (kernel, svod.kernel(raised_by_fn)))
        if isinstance(first, tuple):
            assert got == first
        else:
            np.testing.assert_array_equal(got, first)
            ran.append(number)
    assert ran, "some of the ints are ones a first call runs"
    assert answers[:len(INTS)] == [number in ran and number < 2**63 for number in INTS]


def recurrence_fn(out, x):
    value = 0.0
    for r in range(out.shape[0]):
        for i in range(x.shape[0]):
            value = value * 0.5 + x[i]
        out[r] = value


def _counted_while(call: Callable[[], object]) -> tuple[float, float]:
    """How long ``call`` took, and how long a thread counting in Python ran meanwhile (its count over its rate,
    which it counts at while this thread sleeps): with the GIL held throughout, only a switch of threads before
    the call lets it run, for at most a switch interval."""
    count, stop = [0], threading.Event()

    def counting() -> None:
        while not stop.is_set():
            count[0] += 1

    counter = threading.Thread(target=counting)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    counter.start()
    try:
        start, at = count[0], time.perf_counter()
        time.sleep(0.05)
        rate = (count[0] - start) / (time.perf_counter() - at)
        start, at = count[0], time.perf_counter()
        call()
        took, counted = time.perf_counter() - at, count[0] - start
    finally:
        stop.set()
        counter.join()
        sys.setswitchinterval(interval)
    return took, counted / rate


@pytest.mark.parametrize("entry", ["kernel", "jit"])
def test_a_native_call_lets_other_threads_run_while_its_kernel_runs(entry):
    """A native call (a kernel's, a jitted function's replay) releases the GIL while its kernel runs, as a
    ctypes call did: another thread runs through a long one, for a tenth of it at least where the two share a
    busy machine's core (a call that holds the GIL lets it run for 1% of it or less)."""
    out, x = np.zeros(6000), np.full(20000, 0.5)
    function = svod.kernel(recurrence_fn) if entry == "kernel" else svod.jit(recurrence_fn)
    for _ in range(2):
        function(out, x)
    np.testing.assert_array_equal(out, 1.0)  # 1 - 2**-n, rounded
    if entry == "kernel":
        assert "NATIVE" in function._calls.last.run.__globals__
    took, other = _counted_while(lambda: function(out, x))
    assert other > 0.1 * took, f"another thread ran {other * 1e3:.1f} ms of a {took * 1e3:.1f} ms call"


RECORDING = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
"""A kernel's entry (``svod.backends.cpu_runtime``): its buffers, its variables' values, a job."""


@pytest.mark.parametrize("scalar", [None, dtypes.float32, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int16,
                                    dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64])
def test_a_number_sets_its_variable_to_the_bits_variable_checked_gives_or_is_declined(scalar):
    """Each number a native call reads sets the kernel's variable to the bits ``Variable.checked`` gives it, in
    the call's own copy of the values: a float's float32 or float64 bits, an int's value or its dtype's bits.
    Declined, having run nothing, exactly where ``Variable.checked`` refuses it, or for a float32 NaN (CPython's
    packing keeps a signalling one so from 3.14 on), or an int past int64's range."""
    seen: list[list[int]] = []
    entry = RECORDING(lambda bufs, values, job: seen.append(list((ctypes.c_int64 * 2).from_address(values))))
    low, high = (-5, 100) if scalar is None else (-(2 ** (8 * scalar.itemsize - 1)), 2 ** (8 * scalar.itemsize - 1) - 1)
    variable = Variable("a", low, high, scalar)
    kind = float if scalar is not None and scalar.is_float else int
    out = np.zeros(1)
    call = array_call(ctypes.cast(entry, ctypes.c_void_p).value or 0, [11, 0], 2,
                      [CallArray(0, out.dtype, out.shape, True)], [], [CallScalar(1, 1, kind, variable)])
    assert call is not None
    for number in FLOATS if kind is float else [*INTS, -5, 100, 101, -6]:
        try:
            want: int | None = variable.checked(number)
        except SvodError:
            want = None
        nan32 = scalar == dtypes.float32 and math.isnan(number)
        declined = want is None or (kind is int and number >= 2**63) or nan32
        seen.clear()
        assert call((out, number)) is not declined, number
        assert seen == ([] if declined else [[11, want]]), number
