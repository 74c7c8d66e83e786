"""Rewrite rules a renderer's ``decompositor()`` is built from: each turns an op a device lacks into ops it
has, keeping svod's meaning of the op (exactly for arithmetic; a math function to within a few ulps, as the
device's own functions are).

They run twice in a kernel's life, with the same matcher: on the lowered kernel (``lower.decompose``), and
on the accumulator updates made for REDUCEs once the kernel is ordered (``accumulators.lower_accumulators``).
"""

from __future__ import annotations

import math

from svod.dtype import dtypes
from svod.ir import Ops, PatternMatcher, UOp, UPat
from svod.ir.ops import ALU


def _half_in_float32(node: UOp) -> UOp | None:
    """An ALU op on float16 operands computed in float32, its float16 result rounded back. For ``+ - * /``
    and ``sqrt`` that is the correctly rounded half (float32 carries more than twice a half's precision,
    so rounding twice is rounding once); math functions are as exact as their float32 versions."""
    if node.op is Ops.WHERE or dtypes.float16 not in (node.dtype, *(s.dtype for s in node.src)):
        return None
    wide = tuple(s.cast(dtypes.float32) if s.dtype == dtypes.float16 else s for s in node.src)
    result_dtype = dtypes.float32 if node.dtype == dtypes.float16 else node.dtype
    result = UOp(node.op, result_dtype, wide, node.arg)
    return result.cast(dtypes.float16) if node.dtype == dtypes.float16 else result


FLOAT16_IN_FLOAT32 = PatternMatcher([(UPat(ALU, name="node"), _half_in_float32)])
"""float16 arithmetic for a device that stores halves but has no half arithmetic: every ALU op (but
``where``, which only chooses) reads its halves as float32 and rounds its float16 result back."""


def _power_of_any_base(node: UOp) -> UOp | None:
    """``x ** y`` from a power defined for ``x >= 0`` only (WGSL's): the sign of a negative base comes from
    the parity of an integer exponent, a negative base to a fractional exponent is NaN, and ``x ** 0`` and
    ``1 ** y`` are 1, as C's ``pow`` has them."""
    x, y = node.src
    if x.op is Ops.ABS:
        return None  # the power of a magnitude is already what the device computes
    magnitude = UOp(Ops.POW, node.dtype, (abs(x), y))
    whole = y.trunc().eq(y)
    odd = whole & (y * 0.5).trunc().ne(y * 0.5)
    negative = whole.where(odd.where(-magnitude, magnitude), UOp.const(node.dtype, math.nan))
    return (y.eq(0.0) | x.eq(1.0)).where(UOp.const(node.dtype, 1.0), (x < 0.0).where(negative, magnitude))


POWER_OF_NONNEGATIVE_BASE = PatternMatcher([(UPat(Ops.POW, name="node"), _power_of_any_base)])
"""``pow`` for a device whose ``pow(x, y)`` is only defined for ``x >= 0``."""

_ERF_SERIES = (1.0, -1 / 3, 1 / 10, -1 / 42, 1 / 216, -1 / 1320)
"""erf(x) = 2/sqrt(pi) * sum of c_n x**(2n+1): the Maclaurin series, to 1e-8 relative for |x| < 0.5."""
_ERFC_EXPONENT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                  1.48851587, -0.82215223, 0.17087277)
"""erfc(z) = t*exp(-z*z + P(t)), t = 1/(1 + z/2), z >= 0: the Chebyshev fit of Press et al., Numerical
Recipes 6.2, fractional error below 1.2e-7 everywhere."""


def _horner(x: UOp, coefficients: tuple[float, ...]) -> UOp:
    result = UOp.const(x.dtype, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = result * x + c
    return result


def _erf_from_exp(node: UOp) -> UOp:
    """erf by its series near 0 and by a fit of erfc elsewhere, for a device without erf."""
    x = node.src[0]
    z = abs(x)
    series = x * _horner(x * x, _ERF_SERIES) * (2 / math.sqrt(math.pi))
    t = (z * 0.5 + 1.0).reciprocal()
    tail = 1.0 - t * (_horner(t, _ERFC_EXPONENT) - z * z).exp()
    return (z < 0.5).where(series, (x < 0.0).where(-tail, tail))


ERF_FROM_EXP = PatternMatcher([(UPat(Ops.ERF, name="node"), _erf_from_exp)])
"""``erf`` for a device without one, within a few float32 ulps."""


_ERF_NEAR_ZERO = (1.1283791450269385, -0.3761249839591686, 0.11282326193171476, -0.026808436380906086,
                  0.005114256906563983, -0.0007449968181113466, 6.252746294595927e-05)
"""erf(x) = x * P(x**2) for |x| < ``_ERF_SPLIT``: a least-squares fit of degree 6 (numpy's ``Polynomial.fit`` on
3,000 Chebyshev nodes), within 3 float32 ulps."""
_ERF_SPLIT, _ERF_CENTRE, _ERF_ONE = 1.25, 2.5875, 3.925
_ERF_TOWARD_ONE = (0.9997470751477352, 0.0013954620078683534, -0.0036114469647526228, 0.005767804099138389,
                   -0.0062527125856831995, 0.004727074137886821, -0.0024268372238158407, 0.0006954050642812345,
                   9.556781832536761e-05, -0.0002148650778896007, 7.473052142842786e-05, 1.095582992749408e-05,
                   -8.581344919133302e-06)
"""erf(x) = Q(x - ``_ERF_CENTRE``) over [``_ERF_SPLIT``, ``_ERF_ONE``], fitted the same way with degree 12: within
1 ulp, and 1.0 exactly at ``_ERF_ONE``, past which erf rounds to 1 in float32."""


def _erf_by_polynomials(node: UOp) -> UOp | None:
    """float32 ``erf`` as two polynomials a loop vectoriser keeps in vector registers (20 multiply-adds, where
    the C library's ``erff`` is a scalar call and ``_erf_from_exp`` an ``exp`` and a division): an odd one near
    0 (exact for -0.0 and subnormals), one toward 1 beyond, at most ``_ERF_ONE`` (its value there 1.0); NaN
    stays NaN, infinities give +-1."""
    if node.dtype != dtypes.float32:
        return None
    x = node.src[0]
    z = abs(x)
    near_zero = x * _horner(x * x, _ERF_NEAR_ZERO)
    toward_one = _horner((z > _ERF_ONE).where(_ERF_ONE, z) - _ERF_CENTRE, _ERF_TOWARD_ONE)
    return (z < _ERF_SPLIT).where(near_zero, (x < 0.0).where(-toward_one, toward_one))


def _may_be(x: UOp, value: int) -> bool:
    """Whether ``x``'s bounds let it take ``value``: a guard for a value it cannot take is left out."""
    return bool(x.vmin <= value <= x.vmax)


def _safe_divisor(a: UOp, b: UOp) -> UOp | None:
    """``b``, or 1 where svod's ``a // b`` is ``a // 1``: a zero divisor divides by one, and ``MIN // -1``
    wraps to MIN. None when ``b`` can be neither (by its bounds and ``a``'s)."""
    unsafe = [b.eq(0)] if _may_be(b, 0) else []
    if b.dtype.kind == "int" and _may_be(b, -1) and _may_be(a, int(a.dtype.min)):
        unsafe.append(a.eq(int(a.dtype.min)) & b.eq(-1))
    if not unsafe:
        return None
    condition = unsafe[0] if len(unsafe) == 1 else unsafe[0] | unsafe[1]
    return condition.where(UOp.const(b.dtype, 1), b)


def _guarded(a: UOp, b: UOp) -> bool:
    """Whether ``b`` is already the divisor ``_safe_divisor`` makes of some divisor of ``a``."""
    return b.op is Ops.WHERE and _safe_divisor(a, b.src[2]) is b


def _divide_by_safe_divisor(node: UOp) -> UOp | None:
    """``a // b`` as ``a // d`` with ``d`` the safe divisor: equal by svod's definitions, and the device's
    own division then only sees operands where it truncates like C."""
    a, b = node.src
    if not node.dtype.is_int or _guarded(a, b):
        return None
    safe = _safe_divisor(a, b)
    return None if safe is None else UOp(Ops.IDIV, node.dtype, (a, safe))


def _remainder_from_quotient(node: UOp) -> UOp | None:
    """``a % b`` as ``a - (a // d) * d``, C's truncated remainder (its sign follows ``a``), with ``d`` the
    safe divisor: 0 for a zero divisor and for ``MIN % -1``, as svod defines them. Operands that cannot be
    negative keep the device's ``%``, by the safe divisor (``x % 1`` is 0 too): ``i % n`` over a size ``n``."""
    a, b = node.src
    if not node.dtype.is_int or _guarded(a, b):
        return None
    safe = _safe_divisor(a, b)
    if a.dtype.kind == "uint" or (a.vmin >= 0 and b.vmin >= 0):
        return None if safe is None else UOp(Ops.MOD, node.dtype, (a, safe))
    divisor = b if safe is None else safe
    return a - UOp(Ops.IDIV, node.dtype, (a, divisor)) * divisor


TRUNCATING_DIVISION_BY_SAFE_DIVISORS = PatternMatcher([
    (UPat(Ops.IDIV, name="node"), _divide_by_safe_divisor),
    (UPat(Ops.MOD, name="node"), _remainder_from_quotient),
])
"""Integer ``//`` and ``%`` for a device whose division truncates like C's but whose zero divisors and
``MIN / -1`` have no defined result, and whose ``%`` is only right for non-negative operands (GLSL's, as
wgpu's OpenGL backend translates WGSL's). Every division left divides by a divisor that is never 0, nor -1
under MIN; every remainder of a possibly negative operand is taken from the quotient."""


_LN2_HIGH, _LN2_LOW = 0.693145751953125, 1.428606765330187e-06
"""ln 2 split so that ``n * _LN2_HIGH`` is exact in float32 for every ``|n| <= 256`` (its 16 significant
bits leave room for n's 9), and the sum carries ln 2 to about 2**-40."""
_EXP_TAYLOR = tuple(1 / math.factorial(k) for k in range(8))
"""exp(r) for |r| <= ln(2)/2 to 5e-9 relative: the Taylor series to r**7."""


_ROUNDER = 1.5 * 2**23
"""Adding this to a float32 of magnitude below 2**22 rounds it to an integer (to nearest, ties to even, as
``round``), held in the low bits of the sum's significand: float arithmetic and a bitcast where a float to
int conversion would be scalar code (x86 has no saturating vector conversion)."""
_ROUNDER_BITS = 0x4B400000
"""The bit pattern of ``_ROUNDER``."""


def _power_of_two(n: UOp) -> UOp:
    """2**n as a float32, for an int32 ``-126 <= n <= 127``: n + 127 in the exponent field."""
    return ((n + 127) << 23).bitcast(dtypes.float32)


def _exp_by_polynomial(node: UOp) -> UOp | None:
    """float32 ``exp`` as arithmetic a loop vectoriser keeps in vector registers, where the C library's
    ``expf`` is one scalar call per element: x = n*ln2 + r (Cody and Waite's two-part ln 2 keeps r exact),
    exp(r) by its Taylor series, times 2**n applied in two halves so that subnormal and overflowing
    results round once; n is rounded by adding ``_ROUNDER`` and read as an integer from the sum's bits.
    Within 2 ulps of the correctly rounded result; NaN stays NaN, -inf gives 0."""
    if node.dtype != dtypes.float32:
        return None
    x = node.src[0]
    low = (x < -104.0).where(-104.0, x)  # exp is 0 below and inf above, in float32; a NaN passes through
    clamped = (low > 89.0).where(89.0, low)
    shifted = clamped * (1 / math.log(2)) + _ROUNDER
    n = shifted - _ROUNDER
    r = clamped - n * _LN2_HIGH - n * _LN2_LOW
    whole = shifted.bitcast(dtypes.int32) - _ROUNDER_BITS
    half = whole >> 1
    result = _horner(r, _EXP_TAYLOR) * _power_of_two(half) * _power_of_two(whole - half)
    return x.ne(x).where(x, result)


_SQRT_HALF_BITS = 0x3F3504F3
"""The bit pattern of sqrt(1/2) in float32: a float's bits less these have, in their exponent field, the
power of two that leaves its significand in [sqrt(1/2), sqrt(2)), and in their fraction that significand's."""
_ATANH_SERIES = tuple(1 / (2 * k + 1) for k in range(1, 6))
"""atanh(s)/s - 1 = s**2/3 + s**4/5 + ...: to 1e-10 over |s| <= 3 - 2 sqrt(2), where s = f / (2 + f) of a
significand 1 + f in [sqrt(1/2), sqrt(2))."""
_SMALLEST_NORMAL = 2.0**-126


def _log_by_polynomial(node: UOp) -> UOp | None:
    """float32 ``log`` as arithmetic a loop vectoriser keeps in vector registers, where ``logf`` is one
    scalar call per element: x = 2**e * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), read from x's bits
    (a subnormal x is first scaled by 2**23), and log(1 + f) = 2 atanh(f / (2 + f)) by its odd series;
    e * ln 2 is added in Cody and Waite's two parts. Within 2 ulps; log of a negative or NaN is NaN, of
    either zero -inf, of inf inf."""
    if node.dtype != dtypes.float32:
        return None
    x = node.src[0]
    subnormal = x < _SMALLEST_NORMAL
    offset = subnormal.where(x * 2.0**23, x).bitcast(dtypes.int32) - _SQRT_HALF_BITS
    exponent = (offset >> 23) - subnormal.where(UOp.const(dtypes.int32, 23), UOp.const(dtypes.int32, 0))
    significand = ((offset & 0x007FFFFF) + _SQRT_HALF_BITS).bitcast(dtypes.float32)
    f = significand - 1.0
    s = f / (f + 2.0)
    two_s, z = s * 2.0, s * s
    log1p = two_s + two_s * (z * _horner(z, _ATANH_SERIES))
    e = exponent.cast(dtypes.float32)
    result = e * _LN2_HIGH + (e * _LN2_LOW + log1p)
    special = (x < 0.0).where(UOp.const(dtypes.float32, math.nan), x.eq(0.0).where(
        UOp.const(dtypes.float32, -math.inf), x))
    return ((x <= 0.0) | x.eq(math.inf) | x.ne(x)).where(special, result)


EXP_BY_POLYNOMIAL = PatternMatcher([(UPat(Ops.EXP, name="node"), _exp_by_polynomial)])
"""float32 ``exp`` computed inline for a CPU, so loops over it vectorise."""

CPU_MATH = EXP_BY_POLYNOMIAL + PatternMatcher([(UPat(Ops.LOG, name="node"), _log_by_polynomial),
                                               (UPat(Ops.ERF, name="node"), _erf_by_polynomials)])
"""float32 ``exp``, ``log`` and ``erf`` computed inline for a CPU, so loops over them
vectorise: the C library's are one scalar call per element, which the compilers vectorise only under
``-ffast-math`` or a vector math library."""


__all__ = ["CPU_MATH", "ERF_FROM_EXP", "EXP_BY_POLYNOMIAL", "FLOAT16_IN_FLOAT32", "POWER_OF_NONNEGATIVE_BASE",
           "TRUNCATING_DIVISION_BY_SAFE_DIVISORS"]
