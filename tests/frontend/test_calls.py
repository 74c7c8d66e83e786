"""Prepared calls of an ``@svod.kernel`` (``svod.frontend.calls``): a call like one before runs without binding
again, and every change of an argument the preparation fixed (a shape, a dtype, a scalar's type, the device) or
that an array may make from call to call (strides, a view, overlap with another argument, read-only) is taken as
the first call with it takes it: run with the values NumPy computes, or refused with the same words."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import BufferMismatchError, IndexOutOfBoundsError, SvodError
from svod.frontend.pykernel import Kernel


def add_one_fn(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] + 1.0


def shifted_fn(out, x, by):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] + by


@pytest.fixture
def general_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls that take the general path (``Kernel.bind``): a prepared call binds nothing."""
    calls: list[int] = []
    bind = Kernel.bind

    def counted(self: Kernel, *args: object, **kwargs: object) -> object:
        calls.append(len(args))
        return bind(self, *args, **kwargs)

    monkeypatch.setattr(Kernel, "bind", counted)
    return calls


def _call(kernel: Kernel, *args: object, device: object = None) -> tuple[object, ...] | None:
    """None where the call ran; the error it raised, as what tells one from another."""
    try:
        kernel(*args, device=device)
    except SvodError as err:
        return type(err), str(err), err.stage, err.kernel, err.value
    return None


@pytest.mark.parametrize("sizes", [(16, 7, 16), (1, 0, 1), (17, 1, 17, 7, 17)])
def test_shapes_that_come_back_take_their_own_preparation(device, sizes, general_calls):
    """Shape A, then B, then A again: each call computes over its own arrays' sizes, and a shape seen before runs
    as prepared (on a host-memory device; elsewhere every call binds)."""
    kernel = svod.kernel(add_one_fn)
    seen: set[int] = set()
    for turn, size in enumerate((*sizes, *sizes)):
        x = np.linspace(-3.0, 3.0, size, dtype=np.float32) + turn
        out = np.full(size, np.nan, dtype=np.float32)
        before = len(general_calls)
        kernel(out, x, device=device)
        np.testing.assert_array_equal(out, x + np.float32(1.0))
        if device.caps.host_memory and size in seen:
            assert len(general_calls) == before, f"size {size} came back and was bound again"
        seen.add(size)


def test_a_dtype_after_another_is_computed_in_its_own():
    kernel = svod.kernel(add_one_fn)
    for dtype in (np.float32, np.float64, np.int32, np.float32, np.int64, np.float64):
        x = np.array([-2, 0, 3, 7, 2**20], dtype=dtype)
        out = np.zeros(5, dtype=dtype)
        kernel(out, x)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, x + 1)


def test_a_byte_swapped_array_after_a_native_one_is_taken_as_a_first_call_takes_it():
    warmed = svod.kernel(add_one_fn)
    warmed(np.zeros(5, np.float32), np.arange(5, dtype=np.float32))
    swapped = np.arange(5, dtype=">f4")
    got_out, first_out = np.zeros(5, np.float32), np.zeros(5, np.float32)
    got = _call(warmed, got_out, swapped)
    assert got == _call(svod.kernel(add_one_fn), first_out, swapped.copy())
    np.testing.assert_array_equal(got_out, first_out)
    if got is None:
        np.testing.assert_array_equal(got_out, np.arange(5, dtype=np.float32) + 1)


def test_overlapping_views_after_arrays_apart_are_refused_as_at_a_first_call():
    """The overlap of a written array with another is checked again wherever an address changed: views of one
    array after arrays apart, the same array twice, and arrays apart again after that."""
    kernel = svod.kernel(add_one_fn)
    out, x = np.zeros(6), np.arange(6.0)
    kernel(out, x)
    kernel(out, x)  # prepared: nothing changed
    both = np.arange(9.0)
    cases = [(both[:6], both[3:]), (both[3:], both[:6]), (out, out), (both[:6], both[2:8])]
    for written, read in cases:
        before = both.copy(), out.copy()
        with pytest.raises(BufferMismatchError, match="share memory"):
            kernel(written, read)
        assert _call(kernel, written, read) == _call(svod.kernel(add_one_fn), written, read)
        np.testing.assert_array_equal(both, before[0])  # refused before anything ran
        np.testing.assert_array_equal(out, before[1])
    kernel(out, x)  # apart again, at the addresses of the first calls
    np.testing.assert_array_equal(out, x + 1)
    kernel(both[:6], both[6:].repeat(2))  # views of one array that do not meet
    np.testing.assert_array_equal(both[:6], np.arange(6.0, 9.0).repeat(2) + 1)


def test_arrays_swapped_between_calls_are_each_others_output_and_input():
    kernel = svod.kernel(add_one_fn)
    a, b = np.arange(4.0), np.zeros(4)
    for turn in range(5):
        kernel(b, a)
        a, b = b, a
        np.testing.assert_array_equal(a, np.arange(4.0) + turn + 1)


def test_a_non_contiguous_or_read_only_array_after_prepared_calls(general_calls):
    kernel = svod.kernel(add_one_fn)
    out, x = np.zeros(5), np.arange(5.0)
    kernel(out, x)
    strided_out = np.zeros(10)[::2]
    kernel(strided_out, x)  # copied in and back
    np.testing.assert_array_equal(strided_out, x + 1)
    strided_x = np.arange(10.0)[::2]
    kernel(out, strided_x)
    np.testing.assert_array_equal(out, strided_x + 1)
    frozen = np.zeros(5)
    frozen.flags.writeable = False
    with pytest.raises(BufferMismatchError, match="read-only"):
        kernel(frozen, x)
    np.testing.assert_array_equal(frozen, 0.0)
    frozen_x = np.arange(5.0) * 2
    frozen_x.flags.writeable = False  # read, never written: runs in place
    kernel(out, frozen_x)
    np.testing.assert_array_equal(out, frozen_x + 1)
    bound = len(general_calls)
    kernel(out, x)  # prepared again after all of them
    np.testing.assert_array_equal(out, x + 1)
    assert len(general_calls) == bound


@pytest.mark.parametrize("size", [1, 7])
def test_read_only_inputs_between_writeable_ones_run_prepared(size, general_calls):
    """An input read-only at one call and writeable at the next (or a view that is not C-contiguous) runs in
    place with the values NumPy computes, each taking the prepared call but the view, which is copied."""
    kernel = svod.kernel(add_one_fn)
    out, x = np.zeros(size), np.arange(size, dtype=np.float64)
    kernel(out, x)
    frozen = x * 3 - 0.5
    frozen.flags.writeable = False
    bound = len(general_calls)
    for source in (frozen, x, frozen, frozen, x * 2, np.arange(2.0 * size)[::2], x, frozen):
        out[:] = np.nan
        kernel(out, source)
        np.testing.assert_array_equal(out, source + 1)
    assert len(general_calls) == bound + (size > 1)  # the strided view alone (of one element, it is contiguous)


def test_an_array_made_read_only_after_a_prepared_call_is_refused():
    kernel = svod.kernel(add_one_fn)
    out, x = np.zeros(3), np.arange(3.0)
    kernel(out, x)
    out.flags.writeable = False
    out.flags.writeable = True
    out[:] = -1.0
    out.flags.writeable = False
    with pytest.raises(BufferMismatchError, match="read-only"):
        kernel(out, x)
    np.testing.assert_array_equal(out, -1.0)
    out.flags.writeable = True
    kernel(out, x)
    np.testing.assert_array_equal(out, x + 1)


@pytest.mark.parametrize("by", [2, 2.5, True, np.float32(0.25), np.int8(-3), np.float64(-0.0), -2**31 + 1])
def test_a_scalars_type_after_others_is_computed_as_python_does(by):
    """A scalar of one type after scalars of others: each takes its own kernel, with NumPy's result for it."""
    kernel = svod.kernel(shifted_fn)
    x = np.array([1.5, -2.0, 0.0, 1e300], dtype=np.float64)
    for earlier in (1, 0.5, False, np.float32(3.0)):
        out = np.zeros(4)
        kernel(out, x, earlier)
        np.testing.assert_array_equal(out, x + earlier)
    out = np.zeros(4)
    kernel(out, x, by)
    np.testing.assert_array_equal(out, x + by)
    kernel(out, x, 1)  # the first kind again, with its own value
    np.testing.assert_array_equal(out, x + 1)


def test_a_scalar_out_of_bounds_after_prepared_calls_is_refused_in_the_sources_words():
    kernel = svod.kernel(shifted_fn)
    x, out = np.arange(3, dtype=np.int64), np.zeros(3, dtype=np.int64)
    kernel(out, x, 5)
    kernel(out, x, 6)
    np.testing.assert_array_equal(out, x + 6)
    with pytest.raises(svod.errors.VariableError, match="argument by="):
        kernel(out, x, 2**40)
    np.testing.assert_array_equal(out, x + 6)


def one_value_fn(out, t: svod.Int[2, 2]):
    for i in svod.prange(out.shape[0]):
        out[i] += t + 1


def test_an_int_bounded_to_one_value_is_checked_at_every_call():
    """Its variable is folded into the program, which then has no value of it to set: each call takes the general
    path, which checks the value (it crashed in preparing the call before)."""
    kernel = svod.kernel(one_value_fn)
    out = np.zeros(3, dtype=np.int64)
    kernel(out, 2)
    kernel(out, 2)
    np.testing.assert_array_equal(out, np.full(3, 6))
    with pytest.raises(svod.errors.VariableError, match=r"t=3 is outside its annotation svod\.Int\[2, 2\]"):
        kernel(out, 3)
    np.testing.assert_array_equal(out, np.full(3, 6))


def test_the_device_asked_for_is_part_of_what_a_call_is_prepared_for(general_calls):
    kernel = svod.kernel(add_one_fn)
    out, x = np.zeros(4, np.float32), np.arange(4, dtype=np.float32)
    for device in (None, "CPU", "cpu", svod.get_device("CPU"), "PYTHON", None, "PYTHON"):
        out[:] = 0
        kernel(out, x, device=device)
        np.testing.assert_array_equal(out, x + 1)
    assert len(general_calls) == 5  # once per device as asked for: None, "CPU", "cpu", the Device, "PYTHON"


def test_a_call_with_another_count_of_arguments_is_refused_as_at_a_first_call():
    kernel = svod.kernel(add_one_fn)
    out, x = np.zeros(4), np.arange(4.0)
    kernel(out, x)
    assert _call(kernel, out, x, x) == _call(svod.kernel(add_one_fn), out, x, x)
    assert _call(kernel, out) == _call(svod.kernel(add_one_fn), out)


def gated_fn(out, x, flag, by):
    for i in svod.prange(x.shape[0]):
        out[i] = (x[i] + (flag * 2) * by) - x[i]


@pytest.mark.parametrize("n", (0, 1, 7))
def test_a_numpy_bool_and_a_python_bool_are_kernels_apart(n: int) -> None:
    """``np.True_`` is typed as NumPy's scalars are (``np.True_ * 2`` an int64, times a Python float a float64 that
    keeps what float32 arithmetic would lose), ``True`` a Python number (``True * 2 * 1e-8`` a weak float, float32
    with a float32 element): calls in any order, each by the first call's path or a prepared one, compute what
    plain Python does."""
    kernel = svod.kernel(gated_fn)
    x = np.full(n, 1.1, np.float32)
    for flag in (np.True_, True, np.False_, False, np.True_, True, True, np.True_):
        out, want = np.zeros_like(x), np.zeros_like(x)
        kernel(out, x, flag, 1e-8)
        gated_fn(want, x, flag, 1e-8)
        np.testing.assert_array_equal(out, want)


def gather_fn(out, x, at):
    for i in range(out.shape[0]):
        out[i] = x[at[i]]


@pytest.mark.parametrize("scalar", [False, True], ids=["values fixed", "values per call"])
def test_a_gather_out_of_bounds_after_prepared_calls_raises_and_the_next_call_runs(device, scalar, general_calls):
    """A kernel whose reads are checked at run time runs as parts with a status of its own (``PartsOnHost`` on a
    host-memory device, bound once): an index the data gives out of bounds raises, naming the kernel, the buffer
    and the index, at every call that reads it, and the calls in bounds between them compute NumPy's gather."""
    def kernel_fn(out, x, at, by):
        for i in range(out.shape[0]):
            out[i] = x[at[i]] + by

    kernel = svod.kernel(kernel_fn if scalar else gather_fn)
    x = np.arange(5, dtype=np.int32) * 10
    for turn, at in enumerate(([4, 0, 2], [1, 1, 3], [0, 5, 1], [3, 2, 4], [9, 0, 0], [2, 2, 2])):
        out, index = np.full(3, -1, np.int32), np.array(at, np.int32)
        args = (out, x, index, turn) if scalar else (out, x, index)
        before = len(general_calls)
        if max(at) >= x.size:
            with pytest.raises(IndexOutOfBoundsError, match=r"kernel_fn|gather_fn") as caught:
                kernel(*args, device=device)
            assert caught.value.index == max(at) and caught.value.size == x.size
        else:
            kernel(*args, device=device)
            np.testing.assert_array_equal(out, x[index] + (turn if scalar else 0))
        if device.caps.host_memory and turn:
            assert len(general_calls) == before, "a call of the same signature was bound again"


def first_row_plus_one_fn(out, x):
    for i in range(out.shape[1]):
        out[0, i] = x[0, i] + 1.0


@pytest.mark.filterwarnings("ignore:future versions will not create a writeable array:FutureWarning")
def test_a_broadcast_view_as_the_output_is_written_as_python_writes_it(general_calls):
    """``np.broadcast_arrays``'s views are writeable, but NumPy exports no buffer to write them through (it warns of
    a write instead): a call writes them at their address, first and prepared, as plain Python does."""
    kernel = svod.kernel(first_row_plus_one_fn)
    x = np.arange(4.0).reshape(1, 4)
    for _ in range(3):
        out, _ = np.broadcast_arrays(np.zeros(4), np.zeros((1, 4)))
        kernel(out, x)
        np.testing.assert_array_equal(out, x + 1.0)
