"""svod's definitions where C leaves results open, on every backend: exact float identities, float MAX/MIN
as maximumNumber/minimumNumber, saturating float-to-int conversion, and fixed variables."""

from __future__ import annotations

import math

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.errors import VariableError
from svod.ir import simplify
from tests.helpers import ieee_inputs, refuses

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38, 0.5],
                    np.float32)


SIZE = len(SPECIALS)


def _elementwise(name, dtype_in, dtype_out, build, size=SIZE):
    k = KernelBuilder(name)
    out, x = k.buffer(dtype_out, size), k.buffer(dtype_in, size)
    i = k.range(size)
    k.store(out[i], build(x[i]))
    return k.build()


@pytest.mark.parametrize(("name", "build", "reference"), [
    ("plus_zero", lambda v: v + 0.0, lambda x: x + np.float32(0.0)),
    ("plus_minus_zero", lambda v: v + (-0.0), lambda x: x + np.float32(-0.0)),
    ("minus_zero", lambda v: v - 0.0, lambda x: x - np.float32(0.0)),
    ("times_one", lambda v: v * 1.0, lambda x: x * np.float32(1.0)),
    ("times_zero", lambda v: v * 0.0, lambda x: x * np.float32(0.0)),
    ("over_one", lambda v: v / 1.0, lambda x: x / np.float32(1.0)),
    ("double_negation", lambda v: v.alu(Ops.NEG).alu(Ops.NEG), lambda x: x),
    ("self_difference", lambda v: v - v, lambda x: x - x),
    ("self_compare", lambda v: (v < v).cast(dtypes.float32), lambda x: (x < x).astype(np.float32)),
])
def test_float_identities_hold_for_signed_zeros_nan_and_infinities(device, name, build, reference):
    out = np.zeros(len(SPECIALS), np.float32)
    with np.errstate(all="ignore"):
        expected = reference(SPECIALS)
        svod.run(_elementwise(name, dtypes.float32, dtypes.float32, build), [out, SPECIALS], device=device)
    compared = ieee_inputs(device, SPECIALS)
    np.testing.assert_array_equal(out[compared], expected[compared])
    # WGSL may fold x * 0.0 to +0.0; IEEE 754 leaves the sign of an invalid operation's NaN open (x86 sets it,
    # a GPU's canonical NaN does not)
    signed = compared & (device.caps.ieee_floats | (expected != 0)) & ~np.isnan(expected)
    assert (np.signbit(out) == np.signbit(expected))[signed].all(), name


def test_folded_constants_keep_ieee():
    minus_zero = UOp.const(dtypes.float32, -0.0)
    assert math.copysign(1, simplify(minus_zero + 0.0).arg) == 1
    x = UOp.param(0, dtypes.float32, 4)[0].load()
    assert simplify(x + 0.0).op is Ops.ADD and simplify(x * 0.0).op is Ops.MUL
    assert simplify(x + (-0.0)) is x and simplify(x - 0.0) is x and simplify(x / 1.0) is x
    assert simplify(UOp.const(dtypes.float32, 16777217.0) + 1.0).arg == 16777216.0  # rounded to float32 once


def _saturated(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    wide = np.trunc(x.astype(np.float64))
    out = np.zeros(x.shape, dtype)
    for k, v in enumerate(wide):
        out[k] = 0 if np.isnan(v) else info.max if v >= info.max else info.min if v <= info.min else int(v)
    return out


CONVERT_INPUTS = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 2.9, -2.9, 2.0**31, -(2.0**31), 2.0**63, 255.5,
                           -0.5, 128.0, -129.0, 65535.9, 1e19], np.float32)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                   dtypes.int64, dtypes.uint64])
@pytest.mark.parametrize("source", [dtypes.float32, dtypes.float64])
def test_float_to_integer_saturates_and_takes_nan_to_zero(device, dtype, source):
    if refuses(device, dtype) or refuses(device, source):
        return
    x = CONVERT_INPUTS.astype(source.numpy)
    out = np.ones(len(x), dtype.numpy)
    svod.run(_elementwise("convert", source, dtype, lambda v: v.cast(dtype), len(x)), [out, x], device=device)
    np.testing.assert_array_equal(out, _saturated(x, dtype.numpy))


def _bounds_of(dtype: np.dtype) -> list[float]:
    """float64 values at and beside an integer type's ends: each end, the nearest doubles inside and
    outside it, and halves past it that truncate back in."""
    info = np.iinfo(dtype)
    ends = [float(info.min), float(info.max) + 1.0]
    near = [np.nextafter(e, d) for e in ends for d in (-np.inf, np.inf)]
    return [*ends, *near, float(info.min) - 0.5, float(info.max) + 0.5, float(info.max), -0.99, np.nan, -np.inf]


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64,
                                   dtypes.uint64])
def test_float64_to_integer_saturates_at_each_end_in_vector_loops(device, dtype):
    """Every value at once, in a loop long enough to run in vectors (the CPU's conversion is a vector one
    with selects for lanes out of range)."""
    if refuses(device, dtype) or refuses(device, dtypes.float64):
        return
    x = np.tile(np.array(_bounds_of(dtype.numpy), np.float64), 7)
    out = np.ones(len(x), dtype.numpy)
    svod.run(_elementwise("convert", dtypes.float64, dtype, lambda v: v.cast(dtype), len(x)), [out, x], device=device)
    np.testing.assert_array_equal(out, _saturated(x, dtype.numpy))


def test_float_to_bool_is_true_for_nan(device):
    if refuses(device, dtypes.bool):
        return
    x = np.array([0.0, -0.0, np.nan, 1e-45, -np.inf], np.float32)
    out = np.zeros(5, np.bool_)
    svod.run(_elementwise("truthy", dtypes.float32, dtypes.bool, lambda v: v.cast(dtypes.bool), 5), [out, x],
             device=device)
    np.testing.assert_array_equal(out, [False, False, True, True, True])


ZEROS_A = np.array([0.0, -0.0, -0.0, 0.0, np.nan, -0.0, 1.0, np.nan], np.float32)
ZEROS_B = np.array([-0.0, 0.0, -0.0, 0.0, -0.0, np.nan, np.nan, np.nan], np.float32)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_max_and_min_order_signed_zeros_and_ignore_nan(device, dtype):
    if refuses(device, dtype):
        return
    k = KernelBuilder("extremes")
    top, bottom, a, b = (k.buffer(dtype, 8) for _ in range(4))
    i = k.range(8)
    k.store(top[i], a[i].maximum(b[i]))
    k.store(bottom[i], a[i].minimum(b[i]))
    top_np, bottom_np = np.zeros(8, dtype.numpy), np.zeros(8, dtype.numpy)
    svod.run(k.build(), [top_np, bottom_np, ZEROS_A.astype(dtype.numpy), ZEROS_B.astype(dtype.numpy)], device=device)
    np.testing.assert_array_equal(top_np, [0, 0, -0.0, 0, -0.0, -0.0, 1, np.nan])
    np.testing.assert_array_equal(np.signbit(top_np), [False, False, True, False, True, True, False, False])
    np.testing.assert_array_equal(np.signbit(bottom_np), [True, True, True, False, True, True, False, False])


@pytest.mark.parametrize("size", [2, 17, 64, 1001])
def test_max_reductions_of_signed_zeros_give_plus_zero(device, size):
    k = KernelBuilder("zero_max")
    out, x = k.buffer(dtypes.float32, 2), k.buffer(dtypes.float32, size)
    r = k.range(size, AxisKind.REDUCE)
    k.store(out[0], x[r].reduce(r, op=Ops.MAX))
    k.store(out[1], x[r].reduce(r, op=Ops.MIN))
    x_np = np.where(np.arange(size) % 3 == 0, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
    got = np.ones(2, np.float32)
    svod.run(k.build(), [got, x_np], device=device)
    assert got[0] == 0 and not np.signbit(got[0]) and np.signbit(got[1])


@pytest.mark.parametrize("size", [2, 17, 64, 1001])
def test_sums_of_negative_zeros_give_negative_zero(device, size):
    """A float sum starts from -0.0, the identity of addition: a sum of -0.0s (a row's alone, four rows'
    streamed together, a sum of products) is -0.0, however a backend splits or vectorises it."""
    k = KernelBuilder("zero_sums")
    out, x = k.buffer(dtypes.float32, 6), k.buffer(dtypes.float32, (4, size))
    i, r, s = k.range(4), k.range(size, AxisKind.REDUCE), k.range(size, AxisKind.REDUCE)
    k.store(out[i], x[i, r].reduce(r))
    k.store(out[4], x[0, s].reduce(s))
    t = k.range(size, AxisKind.REDUCE)
    k.store(out[5], (x[1, t] * 2.0).reduce(t))
    got = np.ones(6, np.float32)
    svod.run(k.build(), [got, np.full((4, size), -0.0, np.float32)], device=device)
    assert (got == 0).all() and np.signbit(got).all(), got


def test_a_fixed_variable_compiles_and_keeps_its_value(device):
    k = KernelBuilder("fixed_end")
    n = k.var("n", 1, 100)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, 100)
    i = k.range(n.bind(10))
    k.store(out[i], x[i] * 2.0)
    out_np, x_np = np.full(100, -1.0, np.float32), np.arange(100, dtype=np.float32)
    svod.run(k.build(), [out_np, x_np], device=device)
    np.testing.assert_array_equal(out_np[:10], x_np[:10] * 2)
    assert (out_np[10:] == -1).all()
    with pytest.raises(VariableError, match="fixed"):
        svod.run(k.build(), [out_np, x_np], device=device, n=5)


def test_kernels_fixing_different_values_share_one_compile():
    def build(value: int):
        k = KernelBuilder("fixed_scale")
        n = k.var("n", 1, 64)
        out = k.buffer(dtypes.int32, 64)
        i = k.range(64)
        k.store(out[i], (i * n.bind(value)).cast(dtypes.int32))
        return k.build()

    first, second = svod.compile(build(3)), svod.compile(build(5))
    assert first.code == second.code and first.fixed == {"n": 3} and second.fixed == {"n": 5}
    got = np.zeros(64, np.int32)
    svod.run(build(5), [got])
    np.testing.assert_array_equal(got, np.arange(64) * 5)


# ---- a gated load yields 0 where its gate fails --------------------------------------------------------

def _shifted(size):
    """``out[i] = x[i - 1]`` for ``i >= 1``, 0 at ``i = 0``: the load's gate fails at the first element, and
    nothing but the gate makes it 0."""
    k = KernelBuilder("shift_right")
    out, x = k.buffer(dtypes.float32, size), k.buffer(dtypes.float32, size)
    i = k.range(size)
    k.store(out[i], x.index(i - 1, gate=i > 0).load())
    return k.build()


@pytest.mark.parametrize("size", [1, 2, SIZE, 1031])
def test_a_failed_gate_gives_zero_whatever_the_buffer_holds(device, size):
    """On a CPU, a gated load from a buffer the kernel only reads is a load from element 0 where the gate
    fails, its value discarded: element 0's NaN or infinity must not reach the result."""
    x = np.resize(np.roll(SPECIALS, -SPECIALS.tolist().index(0.5) + 6), size).astype(np.float32)
    x[0] = np.nan
    out = np.full(size, 7.0, np.float32)
    svod.run(_shifted(size), [out, x], device=device)
    want = np.concatenate([[0.0], x[:-1]]).astype(np.float32)
    mask = ieee_inputs(device, want)
    np.testing.assert_array_equal(out.view(np.int32)[mask], want.view(np.int32)[mask])


def test_a_gated_load_from_a_buffer_that_may_be_empty_reads_nothing(device):
    """A buffer whose size is a variable may hold no element: its gated loads keep their branch."""
    k = KernelBuilder("padded_copy")
    n, m = k.var("n", 0, 64), k.var("m", 1, 64)
    out, x = k.buffer(dtypes.float32, m), k.buffer(dtypes.float32, n)
    i = k.range(m)
    k.store(out[i], x.index(i, gate=i < n).load() - 1.0)
    for size in (0, 3):
        x_np = np.arange(size, dtype=np.float32) + 10
        out_np = np.zeros(5, np.float32)
        svod.run(k.build(), [out_np, x_np], device=device, n=size, m=5)
        np.testing.assert_array_equal(out_np, np.concatenate([x_np, np.zeros(5 - size, np.float32)]) - 1.0)


@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.uint32, dtypes.uint64])
def test_abs_of_an_unsigned_value_is_the_value(device, dtype):
    """``abs`` of an unsigned integer is the integer itself, the negation of one included (wgpu's OpenGL
    adapter took the absolute value of its signed reading: ``abs(-851)`` gave 851)."""
    if refuses(device, dtype):
        return
    k = KernelBuilder(f"abs_{dtype.name}")
    out, a = k.buffer(dtype, 5), k.buffer(dtype, 5)
    i = k.range(5)
    k.store(out[i], abs(-a[i]) + abs(a[i]) * 0)
    values = np.array([85, 0, 1, dtype.max // 2 + 5, dtype.max], dtype.numpy)
    got = np.zeros(5, dtype.numpy)
    svod.run(k.build(), [got, values], device=device)
    np.testing.assert_array_equal(got, -values)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.int64])
def test_abs_of_the_most_negative_integer_wraps_to_itself(device, dtype):
    """``abs(MIN)`` is ``MIN``, as negation wraps: ``max(abs(x), 0)`` of it is 0. OpenCL C's ``abs`` returns an
    unsigned value, and a C compiler may take ``-x`` never to be negative where it does not wrap."""
    if refuses(device, dtype):
        return
    k = KernelBuilder(f"abs_min_{dtype.name}")
    out, a = k.buffer(dtype, 4), k.buffer(dtype, 4)
    i = k.range(4)
    k.store(out[i], abs(a[i]).maximum(0))
    values = np.array([dtype.min, -5, 3, dtype.max], dtype.numpy)
    got = np.zeros(4, dtype.numpy)
    svod.run(k.build(), [got, values], device=device)
    np.testing.assert_array_equal(got, [0, 5, 3, dtype.max])
