"""NumPy scalars where Python takes an integer, and a float scalar a device cannot hold: a kernel or an
``@svod.jit`` function takes what plain Python takes, computing the same, and refuses at the user's line what
Python refuses (``range(np.True_)``: a NumPy bool is no integer) or the device cannot hold (naming the dtype
the user passed)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.device import Device
from svod.errors import GraphError, KernelSyntaxError, VariableError
from svod.frontend.oracle import as_python, run_as_python
from tests.helpers import webgpu_devices


@svod.kernel
def first_ones(out, b):
    for i in range(b):
        out[i] = 1.0


@svod.kernel
def first_ones_in_parallel(out, b):
    for i in svod.prange(b):
        out[i] = 1.0


@svod.kernel
def bounded_loop(out, b):
    for i in range(0, b):
        out[i] = 1.0


@svod.kernel
def converted_bound(out, b):
    for i in range(int(b)):
        out[i] = 1.0


@svod.jit
def jit_first_ones(out, b):
    for i in range(b):
        out[i] = 1.0


def _line(fn: object, text: str) -> int:
    """The line of ``fn``'s source file where ``text`` stands (in ``fn``)."""
    lines, first = inspect.getsourcelines(fn.fn)  # type: ignore[attr-defined]
    return first + next(n for n, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("fn", [first_ones, first_ones_in_parallel, bounded_loop, jit_first_ones],
                         ids=["range", "prange", "range_from_zero", "jit"])
@pytest.mark.parametrize("b", [np.True_, np.False_, np.bool_(1)])
def test_a_numpy_bool_is_no_loop_bound(fn, b):
    """``range(np.True_)`` raises TypeError in Python (NumPy 2's bool has no ``__index__``): refused, at the
    loop's line, with Python's words."""
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        range(b)
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        as_python(fn)(np.zeros(3), b)
    line = _line(fn, "for i in")
    with pytest.raises(KernelSyntaxError, match=rf"test_scalar_arguments.py:{line}: a loop bound is an integer, not "
                                                r"a bool value .*'numpy.bool' object cannot be interpreted"):
        fn(np.zeros(3), b)


@pytest.mark.parametrize("b", [True, False, np.True_, 2, 0])
def test_a_python_bool_or_an_int_is_a_loop_bound(device, b):
    """Python's bool is an int (``range(True)`` is ``range(1)``); ``int(np.True_)`` is 1."""
    fn = converted_bound if isinstance(b, np.bool_) else first_ones
    out = np.zeros(3, np.float32)
    want = run_as_python(fn, out, b)[0]
    fn(out, b, device=device)
    np.testing.assert_array_equal(out, want)


@svod.kernel
def compared_bound(out, n):
    for i in range(out.shape[0] > 1):
        out[i] = 1.0
    for i in range(1, 1 + (n > 0)):
        out[i] = 2.0


@pytest.mark.parametrize(("size", "n"), [(1, 0), (2, 1), (3, -1), (5, 7)])
def test_a_comparison_of_python_numbers_is_a_loop_bound(device, size, n):
    """A comparison of sizes or int arguments is Python's bool in plain Python (``range(n > 0)`` runs once or
    not at all), not NumPy's: the loop runs as Python runs it."""
    out = np.zeros(size, np.float32)
    want = run_as_python(compared_bound, out, n)[0]
    compared_bound(out, n, device=device)
    np.testing.assert_array_equal(out, want)


@svod.kernel
def stored_at(out, b):
    out[b] = 3.0


@svod.jit
def jit_read_at(x, b):
    return x[b]


@pytest.mark.parametrize("fn", [stored_at, jit_read_at], ids=["kernel", "jit"])
@pytest.mark.parametrize("b", [True, np.True_, np.False_])
def test_a_bool_index_is_numpys_zero_d_mask_and_refused(fn, b):
    """NumPy reads ``x[True]`` as a 0-d mask (a new axis of 1, ``x[False]`` one of 0), not as ``x[1]``: an
    element of a kernel is not that, so it is refused, saying so."""
    assert np.zeros(3)[b].shape == ((1, 3) if b else (0, 3))
    with pytest.raises(KernelSyntaxError, match=r"an index.* is an integer, not .*bool.*0-d mask"):
        fn(np.zeros(3), b)


@svod.jit
def jit_prefix(x, b):
    return x[:b]


@svod.jit
def jit_prefix_doubled(x, b):
    y = x[:b] * 2.0
    return y


@svod.jit
def jit_identity(x, b):
    return np.eye(b) + x[0]


@pytest.mark.parametrize("fn", [jit_prefix, jit_prefix_doubled, jit_identity],
                         ids=["returned_prefix", "slice", "eye"])
@pytest.mark.parametrize("b", [np.True_, 1.5])
def test_a_numpy_bool_or_a_float_is_no_slice_bound_or_size(fn, b):
    """NumPy refuses ``x[:np.True_]``, ``x[:1.5]`` and ``np.eye(np.True_)`` (TypeError): so does svod, where
    the returned prefix was cut at ``int(b)``."""
    with pytest.raises(TypeError):
        as_python(fn)(np.arange(3.0), b)
    with pytest.raises(KernelSyntaxError, match=r"integer"):
        fn(np.arange(3.0), b)


@svod.jit
def jit_band(x, b):
    return np.eye(3, k=b) + np.tri(3, k=b) + x[0]


@svod.jit
def jit_lower(x, b):
    return np.tri(b, 2) + np.tri(3, b) + x[0]


@svod.jit
def jit_rows(x, b):
    return np.tri(b, 3) + x[0]


@pytest.mark.parametrize(("fn", "b"), [(jit_band, True), (jit_band, False), (jit_lower, True), (jit_lower, np.True_),
                                       (jit_rows, np.False_)])
def test_a_bool_numpy_takes_as_a_size_or_diagonal_computes_as_numpy(fn, b):
    """NumPy takes Python's bool as ``np.eye``'s and ``np.tri``'s diagonal, and any bool as ``np.tri``'s sizes
    (``np.tri(np.True_)`` is ``np.tri(1)``): svod computes those as NumPy does, refusing only what NumPy
    refuses (``np.eye(True)``, ``np.eye(3, k=np.True_)``)."""
    np.testing.assert_array_equal(fn(np.arange(3.0), b), as_python(fn)(np.arange(3.0), b))


@pytest.mark.parametrize("fn", [jit_prefix, jit_prefix_doubled, jit_identity],
                         ids=["returned_prefix", "slice", "eye"])
@pytest.mark.parametrize("b", [0, 1, 2, np.int32(3)])
def test_an_int_slice_bound_or_size_computes_as_numpy(fn, b):
    np.testing.assert_array_equal(fn(np.arange(3.0), b), as_python(fn)(np.arange(3.0), b))


@svod.kernel
def scaled(out, x, a):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * a


@svod.jit
def jit_scaled(x, a):
    x *= a


def _without_64_bits() -> Device:
    """The CPU as a device without float64 and int64 (as WebGPU is): its renderer's lowering sees so too."""
    cpu = svod.get_device("CPU")
    caps = dataclasses.replace(cpu.caps, element_dtypes=cpu.caps.element_dtypes - {dtypes.float64, dtypes.int64})
    renderer = copy.copy(cpu.renderer)
    renderer.caps = caps
    return Device("CPU", cpu.allocator, renderer, cpu.compiler, cpu.runtime, caps=caps)


def _narrow_devices() -> list[Device | str]:
    return [_without_64_bits(), *webgpu_devices()]


@pytest.mark.parametrize("device", _narrow_devices(), ids=lambda d: str(getattr(d, "device", d)))
@pytest.mark.parametrize("fn", [scaled, jit_scaled], ids=["kernel", "jit"])
def test_a_float64_scalar_a_device_cannot_hold_is_refused_naming_float64(device, fn):
    """A float scalar travels as a variable of its bits; a device that holds neither float64 nor int64 refuses
    an ``np.float64`` argument naming float64 (and the argument), not the int64 of its bits, at the user's
    line. An ``np.int64`` is int64, which such a device computes in 32 bits where that is exact
    (``narrow_integers``: here it only meets a float), its value held to int32's range; a Python float is the
    device's float32, as its kernels compute it."""
    x = np.ones(3, np.float32)
    args = (np.zeros(3, np.float32), x) if fn is scaled else (x,)
    line = _line(fn, "* a") if fn is scaled else _line(fn, "x *= a")
    with pytest.raises(GraphError, match=re.escape("cannot hold float64 values (scalar a, which travels as its int64 "
                                                   "bits); its buffers and values are")) as raised:
        fn(*args, np.float64(2.0), device=device)
    assert f"test_scalar_arguments.py:{line}" in str(raised.value)
    doubled = tuple(a.copy() for a in args)
    fn(*doubled, np.int64(2), device=device)
    np.testing.assert_array_equal(doubled[0], [2.0, 2.0, 2.0])
    with pytest.raises(VariableError, match=r"a=2147483648 is outside bounds \[-2147483648, 2147483647\]"):
        fn(*doubled, np.int64(2**31), device=device)
    fn(*args, 2.5, device=device)
    np.testing.assert_array_equal(args[0], np.full(3, 2.5, np.float32))


@svod.kernel
def numpy_bools_written(sums, products, counts, x, n):
    for i in svod.prange(x.shape[0]):
        sums[i] = x[i] + np.True_ - np.False_
        products[i] = x[i] * np.False_ + np.True_ * 2.5
    for i in svod.prange(n.shape[0]):
        counts[i] = n[i] + np.True_ + (3 + np.True_) * np.False_


FLOATS = np.array([-0.0, 0.0, 1.5, -2.5, 3e38, -3e38, np.inf, -np.inf, np.nan, 1e-45, 7.0, -1.0, 2.0], np.float32)
INTS = np.array([-2**31, 2**31 - 1, 0, -1, 1, 7, -7, 2**30, 12345, -99, 3, 2, 5], np.int32)


@pytest.mark.parametrize("size", [0, 1, 2, 7, 13])
def test_a_numpy_bool_written_in_a_kernel_computes_as_numpy(device, size):
    """``np.True_`` and ``np.False_`` written in a kernel are NumPy's bools, 1 and 0 in arithmetic, typed as
    NumPy types them (``x_f32 + np.True_`` float32, ``x_i32 + np.True_`` int32, wrapping at its top); the message
    once said ``numpy.True_ is not a math function``."""
    floats = FLOATS if device.caps.ieee_floats else FLOATS[np.isfinite(FLOATS)]  # (WGSL's: docs/devices.md)
    size = min(size, floats.size)
    args = (np.zeros(size, np.float32), np.zeros(size, np.float32), np.zeros(size, np.int32), floats[:size],
            INTS[:size])
    want = run_as_python(numpy_bools_written, *args)
    got = [a.copy() for a in args]
    numpy_bools_written(*got, device=device)
    for actual, expected in zip(got[:3], want[:3], strict=True):
        np.testing.assert_array_equal(actual, expected)
        if actual.dtype.kind == "f" and device.caps.ieee_floats:  # a NaN's sign is no IEEE promise: x86's
            signed = ~np.isnan(expected)                          # inf * 0 is -NaN, a GPU's +NaN
            np.testing.assert_array_equal(np.signbit(actual[signed]), np.signbit(expected[signed]))


@svod.kernel
def bool_indexed(out, x):
    out[0] = x[np.True_]


@svod.kernel
def bool_bounded(out):
    for i in range(np.True_):
        out[i] = 1.0


@svod.kernel
def bool_of_shape(out, x):
    out[0] = x.shape[np.True_]


@svod.kernel
def bools_added(out):
    out[0] = np.True_ + np.True_


@pytest.mark.parametrize(("fn", "error", "words"), [
    (bool_indexed, KernelSyntaxError, "an index is an integer, not a bool value: NumPy reads a bool index as a 0-d"),
    (bool_bounded, KernelSyntaxError, "a loop bound is an integer, not a bool value (Python's range refuses a NumPy"),
    (bool_of_shape, KernelSyntaxError, "a tuple (a shape) is indexed by an integer constant (Python refuses a NumPy"),
    (bools_added, GraphError, "ADD is not defined on bool"),
], ids=["index", "loop_bound", "shape", "sum"])
def test_a_numpy_bool_written_where_an_int_is_wanted_is_refused_at_its_line(fn, error, words):
    """Where Python or NumPy take no NumPy bool (a loop bound, a tuple's index), where NumPy reads one as a mask
    (an index), and where a kernel's bool arithmetic would be NumPy's ``or`` or Python's ``+``: refused, naming
    the line and what is wrong."""
    args = (np.zeros(3, np.float32), np.zeros(3, np.float32))[:len(fn.parameters)]
    with pytest.raises(error) as raised:
        fn(*args)
    assert words in str(raised.value)
    assert f"test_scalar_arguments.py:{_line(fn, 'np.True_')}" in str(raised.value)


@svod.kernel
def by_shape_of_bools(out, x, b):
    for i in svod.prange(x.shape[True]):
        out[i] = x[x.shape[False] - 1, i] * x.shape[-True] + x.shape[b]


@svod.jit
def jit_by_shape_of_bools(x, b):
    y = np.zeros(x.shape[True], x.dtype)
    for i in svod.prange(x.shape[True]):
        y[i] = x[0, i] * x.shape[False] + x.shape[b]
    return y, x.shape[True] - x.shape[not b]


@pytest.mark.parametrize("shape", [(1, 0), (1, 1), (3, 7), (2, 13)])
@pytest.mark.parametrize("b", [True, False])
def test_a_shape_indexed_by_a_python_bool_is_indexed_by_its_int(device, shape, b):
    """``x.shape[True]`` is ``x.shape[1]`` in Python (a bool is an int; ``-True`` is -1), written or passed."""
    x = np.arange(float(np.prod(shape)), dtype=np.float32).reshape(shape) - 3.5
    out = np.zeros(shape[1], np.float32)
    want = run_as_python(by_shape_of_bools, out, x, b)[0]
    by_shape_of_bools(out, x, b, device=device)
    np.testing.assert_array_equal(out, want)
    got, wanted = jit_by_shape_of_bools(x, b, device=device), as_python(jit_by_shape_of_bools)(x, b)
    np.testing.assert_array_equal(got[0], wanted[0])
    assert got[1] == wanted[1] and type(got[1]) is int


def test_a_shape_indexed_by_a_numpy_bool_argument_is_refused_as_python_refuses_it():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match=r"tuple indices must be integers or slices, not numpy\.bool"):
        as_python(jit_by_shape_of_bools)(x, np.True_)
    line = _line(jit_by_shape_of_bools, "x.shape[b]")
    with pytest.raises(KernelSyntaxError, match=rf"test_scalar_arguments.py:{line}: .*not numpy.bool"):
        jit_by_shape_of_bools(x, np.True_)


@svod.jit
def jit_rolled(x, b):
    return np.roll(x, b)


@svod.jit
def jit_rolled_by_written_bools(x):
    y = np.roll(x, np.True_) * 2.0 + np.roll(x, np.False_)
    return y


@pytest.mark.parametrize("size", [0, 1, 2, 5, 17])
@pytest.mark.parametrize("b", [True, np.True_, np.False_, np.bool_(1), -1])
def test_a_roll_by_a_bool_shifts_by_its_int(device, size, b):
    """NumPy's ``np.roll(x, np.True_)`` (and by ``True``) shifts by 1, by ``np.False_`` not at all, as an int
    does: svod once refused a NumPy bool shift as an index's mask."""
    x = np.arange(size, dtype=np.float32) - 2.5
    np.testing.assert_array_equal(jit_rolled(x, b, device=device), np.roll(x, b))
    if b is True:
        np.testing.assert_array_equal(jit_rolled_by_written_bools(x, device=device), np.roll(x, 1) * 2.0 + x)


@svod.kernel
def offset_by(as_float, as_int, x, n, by):
    for i in svod.prange(x.shape[0]):
        as_float[i] = x[i] + by
        as_int[i] = n[i] + by


UINT64_SCALARS = [5, 2**63, 2**64 - 1, 0, 2**63 - 1, 2**63 + 7]


@pytest.mark.parametrize("size", [0, 1, 7, 13])
def test_a_uint64_scalar_past_int64s_range_computes_as_numpy(device, size):
    """A ``np.uint64`` argument of 2**63 or more travels as int64 bits that read negative: the kernel takes it
    as the unsigned value it is (LLVM was told its load lay below 2**63, and converted it to float as signed),
    on a first call and on each prepared call after one of another value. A device that holds no uint64 or
    float64 refuses it."""
    x = np.array([-0.0, 1.5, np.inf, np.nan, -2.0, 1e300, 3.0, 0.0, 7.0, -1.0, 2.0, 5.0, 1.0][:size])
    n = np.array([0, 1, 2**64 - 1, 2**63, 2**63 - 1, 12345, 7, 3, 2, 5, 6, 4, 9][:size], np.uint64)
    holds = {dtypes.uint64, dtypes.float64} <= device.caps.element_dtypes
    for value in UINT64_SCALARS:
        by = np.uint64(value)
        as_float, as_int = np.full(size, -1.0), np.zeros(size, np.uint64)
        if not holds:
            with pytest.raises(GraphError, match="cannot hold"):
                offset_by(as_float, as_int, x, n, by, device=device)
            continue
        offset_by(as_float, as_int, x, n, by, device=device)
        np.testing.assert_array_equal(as_float, x + by)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(as_int, n + by)
