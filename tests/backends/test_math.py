"""The math vocabulary on every backend against numpy: transcendental functions within a few ulp, rounding
functions exactly, over normal, subnormal, zero, infinite and NaN inputs; shifts and bitwise ops exactly."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, dtypes
from svod.dtype import DType
from tests.helpers import FLOAT_DIVIDENDS, FLOAT_DIVISORS, ieee_inputs, refuses

SPECIALS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, 2.5, -2.5, 3.7, -3.7, 0.1, 7.25, 20.0, -20.0, 100.0, -100.0,
            1e-3, 1e-30, 1e-40, -1e-40, 1e30, np.inf, -np.inf, np.nan]

UNARY = {  # name: (method, numpy in float64, ulps allowed)
    "exp": (lambda x: x.exp(), np.exp, 4), "log": (lambda x: x.log(), np.log, 4),
    "cos": (lambda x: x.cos(), np.cos, 4), "tan": (lambda x: x.tan(), np.tan, 4),
    "tanh": (lambda x: x.tanh(), np.tanh, 4), "erf": (lambda x: x.erf(), np.vectorize(__import__("math").erf), 4),
    "sigmoid": (lambda x: x.sigmoid(), lambda v: 1 / (1 + np.exp(-v)), 6),
    "rsqrt": (lambda x: x.rsqrt(), lambda v: 1 / np.sqrt(v), 4),
    "floor": (lambda x: x.floor(), np.floor, 0), "ceil": (lambda x: x.ceil(), np.ceil, 0),
    "trunc": (lambda x: x.trunc(), np.trunc, 0), "round": (lambda x: x.round(), np.round, 0),
    "clamp": (lambda x: x.clamp(-1.5, 2.0), lambda v: np.clip(v, -1.5, 2.0), 0),
}
FLOATS = [dtypes.float32, dtypes.float64, dtypes.float16]


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in units in the last place, with NaN matching NaN (any sign) and a zero's sign counted."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
    def ordered(a: np.ndarray) -> np.ndarray:
        i = a.view(bits).astype(np.int64)
        return np.where(i < 0, np.iinfo(bits).min - i, i)
    both_nan = np.isnan(got) & np.isnan(want)
    distance = np.abs(ordered(got) - ordered(want))
    return np.where(both_nan, 0, np.where(np.isnan(got) | np.isnan(want), 1 << 40, distance))


def _run_unary(device, dtype: DType, method) -> tuple[np.ndarray, np.ndarray]:
    values = np.array(SPECIALS, np.float64)
    with np.errstate(all="ignore"):
        inputs = values.astype(dtype.numpy)
    k = KernelBuilder("math")
    out, x = k.buffer(dtype, len(values)), k.buffer(dtype, len(values))
    i = k.range(len(values))
    k.store(out[i], method(x[i]))
    got = np.zeros(len(values), dtype.numpy)
    svod.run(k.build(), [got, inputs], device=device)
    return got, inputs


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_math_functions_match_numpy(device, name, dtype):
    if refuses(device, dtype):
        return
    method, reference, ulps = UNARY[name]
    got, inputs = _run_unary(device, dtype, method)
    with np.errstate(all="ignore"):
        want = reference(inputs.astype(np.float64)).astype(dtype.numpy)
    if not device.caps.ieee_floats:  # WGSL's accuracy: absolute for sin and cos, a few ulps elsewhere
        compared = ieee_inputs(device, inputs) & ieee_inputs(device, want) & (np.abs(inputs) <= 20)
        assert compared.sum() >= 9
        tolerance = 1e-4 if dtype == dtypes.float32 else 2e-3
        np.testing.assert_allclose(got[compared], want[compared], rtol=tolerance, atol=2 ** -11)
        return
    distance = _ulps(got, want)
    allowed = ulps if dtype != dtypes.float16 else min(ulps, 1)
    assert (distance <= allowed).all(), {float(v): (float(g), float(w)) for v, g, w, d
                                         in zip(inputs, got, want, distance, strict=True) if d > allowed}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_pow_with_float_and_integer_exponents(device, dtype):
    if refuses(device, dtype):
        return
    bases = np.array([2.0, -2.0, 0.5, 0.0, -0.0, 10.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0], np.float64)
    exponents = np.array([3.0, 3.0, -2.0, -1.0, 3.0, 0.5, 2.0, 3.0, 0.0, np.nan, 0.5, 2.5], np.float64)
    k = KernelBuilder("power")
    out, squared, x, y = (k.buffer(dtype, len(bases)) for _ in range(4))
    i = k.range(len(bases))
    k.store(out[i], x[i] ** y[i])
    k.store(squared[i], x[i].pow(2))
    got, got_squared = np.zeros(len(bases), dtype.numpy), np.zeros(len(bases), dtype.numpy)
    svod.run(k.build(), [got, got_squared, bases.astype(dtype.numpy), exponents.astype(dtype.numpy)], device=device)
    with np.errstate(all="ignore"):
        want = np.power(bases.astype(dtype.numpy).astype(np.float64), exponents).astype(dtype.numpy)
        want_squared = np.power(bases, 2.0).astype(dtype.numpy)
    compared = ieee_inputs(device, bases) & ieee_inputs(device, exponents) & ieee_inputs(device, want)
    assert (_ulps(got, want)[compared] <= 2).all(), (got, want)
    assert (_ulps(got_squared, want_squared)[compared] <= 1).all(), (got_squared, want_squared)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_fmod_is_the_exact_truncated_remainder(device, dtype):
    """C's ``fmod`` exactly, where the quotient is far past the float's precision too (``7.1e109 % 100``):
    the remainder is a float, so nothing is rounded."""
    if refuses(device, dtype):
        return
    pairs = np.array([(a, b) for a in FLOAT_DIVIDENDS for b in FLOAT_DIVISORS], np.float64)
    with np.errstate(all="ignore"):
        a, b = pairs[:, 0].astype(dtype.numpy), pairs[:, 1].astype(dtype.numpy)
        want = np.fmod(a.astype(np.float64), b.astype(np.float64)).astype(dtype.numpy)
    k = KernelBuilder("fmod")
    out, x, y = (k.buffer(dtype, len(pairs)) for _ in range(3))
    i = k.range(len(pairs))
    k.store(out[i], x[i].fmod(y[i]))
    got = np.zeros(len(pairs), dtype.numpy)
    svod.run(k.build(), [got, a, b], device=device)
    compared = ieee_inputs(device, a) & ieee_inputs(device, b) & ieee_inputs(device, want)
    assert compared.sum() >= 40
    wrong = _ulps(got, want)[compared] != 0
    assert not wrong.any(), list(zip(a[compared][wrong], b[compared][wrong], got[compared][wrong],
                                     want[compared][wrong], strict=True))


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64],
                         ids=lambda d: d.name)
def test_shifts_and_bitwise_ops_match_numpy(device, dtype):
    """An amount outside the type's bits shifts everything out (numpy's definition on this machine)."""
    if refuses(device, dtype):
        return
    values = np.array([1, 7, -8, 100, -1, 0, 5, 3, -128, 127], np.int64)
    amounts = np.array([0, 1, 2, 3, dtype.bits - 1, dtype.bits, dtype.bits + 3, 1, 4, -1], np.int64)
    x_np, s_np = values.astype(dtype.numpy), amounts.astype(dtype.numpy)
    k = KernelBuilder("bits")
    left, right, mixed, x, s = (k.buffer(dtype, len(values)) for _ in range(5))
    i = k.range(len(values))
    k.store(left[i], x[i] << s[i])
    k.store(right[i], x[i] >> s[i])
    k.store(mixed[i], (~x[i] & 0x5A) | (x[i] ^ 3) | (1 << (s[i] & 3)))
    got = [np.zeros(len(values), dtype.numpy) for _ in range(3)]
    svod.run(k.build(), [*got, x_np, s_np], device=device)
    inside = (s_np >= 0) & (s_np < dtype.bits)
    safe = np.where(inside, s_np, 0).astype(dtype.numpy)
    negative = np.where(x_np < 0, -1, 0).astype(dtype.numpy) if dtype.kind == "int" else np.zeros_like(x_np)
    np.testing.assert_array_equal(got[0], np.where(inside, np.left_shift(x_np, safe), 0).astype(dtype.numpy))
    np.testing.assert_array_equal(got[1], np.where(inside, np.right_shift(x_np, safe), negative))
    one = np.ones((), dtype.numpy)
    np.testing.assert_array_equal(got[2], (~x_np & 0x5A) | (x_np ^ 3) | np.left_shift(one, s_np & 3))


@pytest.mark.parametrize("amount", [31, 32, 99])
def test_a_constant_shift_amount_past_the_width_shifts_everything_out(device, amount):
    """WGSL refuses a constant amount past the width even in a branch that is never taken."""
    x_np = np.array([1, -8, 2**31 - 1, -(2**31)], np.int32)
    k = KernelBuilder(f"shift_by_{amount}")
    left, right, x = (k.buffer(dtypes.int32, len(x_np)) for _ in range(3))
    i = k.range(len(x_np))
    k.store(left[i], x[i] << amount)
    k.store(right[i], x[i] >> amount)
    got = [np.zeros(len(x_np), np.int32) for _ in range(2)]
    svod.run(k.build(), [*got, x_np], device=device)
    inside = amount < 32
    np.testing.assert_array_equal(got[0], np.left_shift(x_np, amount) if inside else 0)
    np.testing.assert_array_equal(got[1], np.right_shift(x_np, amount) if inside else np.where(x_np < 0, -1, 0))


def test_reductions_add_mul_max_min(device):
    data = np.array([[3.0, -1.0, 2.0, 0.5], [-4.0, 8.0, 1.5, -0.0]], np.float32)
    for op, reference in [(Ops.ADD, np.sum), (Ops.MUL, np.prod), (Ops.MAX, np.max), (Ops.MIN, np.min)]:
        k = KernelBuilder(f"reduce_{op.name.lower()}")
        out, x = k.buffer(dtypes.float32, 2), k.buffer(dtypes.float32, 8)
        row = k.range(2)
        r = k.range(4, svod.AxisKind.REDUCE)
        k.store(out[row], x[row * 4 + r].reduce(r, op=op))
        got = np.zeros(2, np.float32)
        svod.run(k.build(), [got, data.reshape(-1)], device=device)
        np.testing.assert_array_equal(got, reference(data, axis=1))


def test_comparisons_build_graphs_and_number_equality_is_refused():
    k = KernelBuilder("compare")
    x = k.buffer(dtypes.float32, 4)[0]
    for built, op in [(x < 1.0, Ops.CMPLT), (x <= 1.0, Ops.CMPLE), (x > 1.0, Ops.CMPLT), (x >= 1.0, Ops.CMPLE),
                      (x.eq(1.0), Ops.CMPEQ), (x.ne(1.0), Ops.CMPNE)]:
        assert built.op is op and built.dtype == dtypes.bool
    with pytest.raises(TypeError, match=r"\.eq\(1\.0\)"):
        _ = x == 1.0
    with pytest.raises(TypeError, match=r"\.ne\(2\)"):
        _ = x != 2
    assert x == x and x != x + 1.0  # UOps compare by identity, as API.md says


def test_where_accepts_numbers_in_both_branches(device):
    k = KernelBuilder("select")
    out, counts, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.int32, 4), k.buffer(dtypes.float32, 4)
    i = k.range(4)
    k.store(out[i], (x[i] > 0.0).where(1.0, -1.0))
    k.store(counts[i], (x[i] > 0.0).where(1, 0))
    got, got_counts = np.zeros(4, np.float32), np.zeros(4, np.int32)
    values = np.array([2.0, -3.0, 0.0, 5.0], np.float32)
    svod.run(k.build(), [got, got_counts, values], device=device)
    np.testing.assert_array_equal(got, np.where(values > 0, 1.0, -1.0))
    np.testing.assert_array_equal(got_counts, (values > 0).astype(np.int32))
    assert (x[0] > 0.0).where(1, 0, dtype=dtypes.uint8).dtype == dtypes.uint8
