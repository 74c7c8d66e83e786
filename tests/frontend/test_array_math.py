"""NumPy's ufuncs beyond the kernel's own math in ``@svod.jit`` array statements (``svod.frontend.array_math``):
each compared, on every device, with the same function run as plain NumPy: its values, its dtype (NumPy 2's
promotion) and the sign of each zero, over special values (NaN, infinities, signed zeros, the smallest
subnormal, arguments near 0 and 1 where a naive formula loses its digits) and an empty array."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import GraphError, KernelSyntaxError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses


def special_values(device) -> np.ndarray:
    """The values each function is tried at: the specials a device computes with (WGSL may assume floats finite
    and flush subnormals), the edges of the inverse functions' domains, and values near 0 and 1."""
    ieee = [np.nan, np.inf, -np.inf, 5e-324, 1e300, -1e300] if device.caps.ieee_floats else []
    return np.array([*ieee, -0.0, 0.0, 1.0, -1.0, 0.5, -0.5, 0.99, -0.999, 1.001, 2.5, -3.75, 1e-7, -3e-9, 0.3,
                     -0.2, 0.24, 0.26, 1e-30, 7.0, -12.5, 40.0, -30.0])


def agrees_or_refused(fn: svod.frontend.jit.Jit, device, *args: object, needs: svod.dtypes.DType | None = None,
                      rtol: float = 1e-13, atol: float = 0.0) -> None:
    """As ``agrees_with_python`` with dtypes and zeros' signs; a device that cannot hold the dtype NumPy gives the
    results (``needs``) refuses the function, saying so."""
    if needs is not None and refuses(device, needs):  # its buffers, or its values where they may not fit 32 bits
        with pytest.raises(GraphError, match=f"cannot hold {needs.name}|computes {needs.name} values in 32 bits"):
            fn(*args, device=device)
        return
    agrees_with_python(fn, device, *args, rtol=rtol, atol=atol, typed=True, numpy_warns=True)


@svod.jit
def one_argument(x):
    return (np.log1p(x), np.expm1(x), np.sinh(x), np.cosh(x), np.arcsinh(x), np.arccosh(x), np.arctanh(x),
            np.arctan(x), np.arcsin(x), np.arccos(x), np.log10(x), np.square(x), np.reciprocal(x), np.rint(x),
            np.degrees(x), np.radians(x), np.rad2deg(x), np.deg2rad(x), np.signbit(x).astype(x.dtype), np.cbrt(x),
            np.sinc(x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_one_argument_ufuncs_keep_their_special_values_and_digits(device, dtype):
    """A float16 computes in float32 and rounds once, as NumPy's float16 loops do."""
    with np.errstate(over="ignore"):
        x = special_values(device).astype(dtype)  # 1e300 is inf in float32
    needs = svod.dtypes.float16 if dtype == np.float16 else None
    rtol = {np.float64: 1e-13, np.float32: 2e-6, np.float16: 1e-3}[dtype]
    agrees_or_refused(one_argument, device, x, needs=needs, rtol=rtol)
    agrees_or_refused(one_argument, device, x[:0], needs=needs)


@svod.jit
def of_integers(i):
    return np.log1p(i), np.arcsinh(i), np.arctan(i), np.log10(i), np.degrees(i), np.rint(i), np.square(i), \
        np.expm1(i), np.cosh(i), np.cbrt(i), np.sinc(i)


def test_ufuncs_of_integers_are_float64_as_numpys_and_square_stays_an_integer(device):
    agrees_or_refused(of_integers, device, np.array([0, 1, -1, 3, 1000, -2**31, 46341], np.int32),
                      needs=svod.dtypes.float64)


def test_log10_of_a_power_of_ten_is_its_exponent(device):
    """``log(x) / ln 10`` misses 10.0 ** k by an ulp (``int(np.log10(1000))`` would be 2): svod's is k."""
    wide = not refuses(device, svod.dtypes.float64)
    big = 308 if wide else 38
    x = np.array([10.0 ** k for k in range(-big + 1, big)], np.float64 if wide else np.float32)
    got = log10_of(x, device=device)
    np.testing.assert_array_equal(got, np.arange(-big + 1, big, dtype=got.dtype))


@svod.jit
def log10_of(x):
    return np.log10(x)


@svod.jit
def two_arguments(x, y):
    return (np.arctan2(x, y), np.hypot(x, y), np.copysign(x, y), np.fmod(x, y), np.add(x, y), np.subtract(x, y),
            np.multiply(x, y), np.divide(x, y), np.true_divide(x, 2.0), np.floor_divide(x, y), np.remainder(x, y),
            np.mod(x, y), np.greater(x, y).astype(x.dtype), np.less_equal(x, 0.5).astype(x.dtype),
            np.equal(x, y).astype(x.dtype), np.not_equal(x, y).astype(x.dtype))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_two_argument_ufuncs_at_every_pair_of_special_values(device, dtype):
    """arctan2's quadrants and signed zeros (C99's table), hypot's inf beside a NaN, copysign of -0.0."""
    values = np.array([v for v in special_values(device) if abs(v) < 100 or not np.isfinite(v)])
    x, y = (a.ravel().astype(dtype) for a in np.meshgrid(values, values))
    agrees_or_refused(two_arguments, device, x, y, rtol=1e-13 if dtype == np.float64 else 2e-6)
    agrees_or_refused(logarithms_of_sums, device, x, y, rtol=1e-13 if dtype == np.float64 else 2e-6,
                      atol=64 * float(np.finfo(dtype).eps))
    ieee = device.caps.ieee_floats  # WGSL's pow is exp2(y * log2(x)), within 4e-6, flushing a subnormal
    kept = ieee or ((x != 0) & (abs(y) <= 8))
    agrees_or_refused(powers, device, x[kept], y[kept], rtol=1e-13 if dtype == np.float64 else 2e-6 if ieee else 1e-5)


@svod.jit
def powers(x, y):
    return np.power(x, y), np.power(x, 3)


@svod.jit
def logarithms_of_sums(x, y):
    """NumPy's formula, ``max + log1p(exp(-|x - y|))``, cancels where the sum is near 1: its error there is
    absolute, a few ulp of the operands."""
    return np.logaddexp(x, y), np.logaddexp2(x, y)


@svod.jit
def mixed_kinds(i, f):
    return np.arctan2(i, f), np.hypot(i, 2), np.copysign(3, f), np.power(i, 2), np.float_power(i, 2), \
        np.fmod(f, 2), np.logaddexp(i, i)


def test_two_argument_ufuncs_promote_as_numpy(device):
    """An int32 and a float32 are float64; an int32 and a Python number stay int32 where NumPy's do."""
    agrees_or_refused(mixed_kinds, device, np.array([-3, 0, 5, 7], np.int32),
                      np.array([1.5, -0.0, 2.0, -7.25], np.float32), needs=svod.dtypes.float64)


@svod.jit
def integer_remainders(a, b):
    return np.fmod(a, b), np.remainder(a, b), np.floor_divide(a, b)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_fmod_of_integers_takes_the_dividends_sign_and_is_0_of_a_zero_divisor(device, dtype):
    info = np.iinfo(dtype)
    a = np.array([7, -7, 7, -7, 0, 5, info.min, info.max, info.min, -1] if info.min else
                 [7, 200, 7, 255, 0, 5, 0, 255, 9, 1], dtype)
    b = np.array([2, 2, -2, -2, 3, 0, -1, 7, 3, 1] if info.min else [2, 2, 254, 3, 3, 0, 1, 7, 3, 1], dtype)
    agrees_or_refused(integer_remainders, device, a, b, needs=svod.dtypes.from_numpy(dtype))


@svod.jit
def rounded(x):
    return np.round(x), np.round(x, 2), np.around(x, -1), x.round(1), np.round(x, decimals=3)


@svod.jit
def rounded_integers(i):
    return np.round(i), i.round(2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_to_decimals_as_numpy_computes_it(device, dtype):
    """``rint(x * 10**d) / 10**d``: 2.675 rounds to 2.67 (its float is below), as NumPy's; halves to even."""
    x = np.array([2.675, -2.5, 0.5, 1.5, 0.125, -0.125, 1234.5678, -0.0, 15.0, 25.0, 1e-9, -7.55], dtype)
    agrees_or_refused(rounded, device, x, rtol=0)


def test_round_of_integers_is_the_integer(device):
    agrees_or_refused(rounded_integers, device, np.array([-7, 0, 12345, 2**31 - 1], np.int32))


@svod.jit
def rounded_to_tens(i):
    return np.round(i, -1)


@svod.jit
def reciprocal_of_integers(i):
    return np.reciprocal(i)


@svod.jit
def bessel(x):
    return np.i0(x)


@svod.jit
def added_into(x, y):
    return np.add(x, y, out=y)


@svod.jit
def rounded_into(x, y):
    return np.round(x, 1, out=y)


@pytest.mark.parametrize(("fn", "says"), [
    (rounded_to_tens, "np.round of int32 to -1 decimals"), (reciprocal_of_integers, "np.reciprocal of int32"),
    (bessel, "np.i0 is not a function svod's array expressions have"),
    (added_into, "np.add takes its operands alone here"), (rounded_into, "np.round takes an array and its decimals")])
def test_what_svod_does_not_compute_as_numpy_is_refused_at_its_line(fn, says):
    args = (np.arange(4, dtype=np.int32),) if fn in (rounded_to_tens, reciprocal_of_integers) else \
        (np.ones(4), np.ones(4))[:1 + (fn in (added_into, rounded_into))]
    with pytest.raises(KernelSyntaxError, match=f"test_array_math.py:\\d+: {says}"):
        fn(*args)
