"""Rewrite rules a renderer's ``decompositor()`` is built from: each turns an op a device lacks into ops it
has, keeping svod's meaning of the op (exactly for arithmetic; a math function to within a few ulps, as the
device's own functions are).

They run twice in a kernel's life, with the same matcher: on the lowered kernel (``lower.decompose``), and
on the accumulator updates made for REDUCEs once the kernel is ordered (``accumulators.lower_accumulators``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from svod.dtype import DType, dtypes
from svod.ir import Ops, PatternMatcher, UOp, UPat
from svod.ir.ops import ALU
from svod.ir.uop import FUSED_DTYPES


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


def _fma(a: UOp, b: UOp | float, c: UOp | float) -> UOp:
    """``a * b + c``, rounded once (MULACC) where the dtype has a fused multiply-add: one instruction on a CPU
    with FMA, where a product and a sum are two, each rounded."""
    return a.alu(Ops.MULACC, b, c) if a.dtype in FUSED_DTYPES else a * b + c


def _horner(x: UOp, coefficients: tuple[float, ...]) -> UOp:
    result = UOp.const(x.dtype, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = _fma(result, x, c)
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


def _erf32(x: UOp) -> UOp:
    """float32 ``erf`` as two polynomials (20 multiply-adds, where ``_erf_from_exp`` is an ``exp`` and a
    division): an odd one near 0 (exact for -0.0 and subnormals), one toward 1 beyond, at most ``_ERF_ONE``
    (its value there 1.0); NaN stays NaN, infinities give +-1."""
    z = abs(x)
    near_zero = x * _horner(x * x, _ERF_NEAR_ZERO)
    toward_one = _horner((z > _ERF_ONE).where(_ERF_ONE, z) - _ERF_CENTRE, _ERF_TOWARD_ONE)
    return (z < _ERF_SPLIT).where(near_zero, (x < 0.0).where(-toward_one, toward_one))


_ERF64_SPLIT, _ERF64_ONE = 0.75, 6.0
_ERF64_NEAR_ZERO = (1.1283791670955126, -0.37612638903183754, 0.11283791670955126, -0.026866170645131252,
                    0.005223977625442188, -0.0008548327023450853, 0.00012055332981789664, -1.492565035840625e-05,
                    1.6462114365889248e-06, -1.6365844691234924e-07, 1.4807192815879218e-08,
                    -1.2290555301717928e-09, 9.422759064650411e-11, -6.7113668551641105e-12,
                    4.4632242632864775e-13, -2.7835162072109215e-14, 1.6342614095367152e-15)
"""erf(x) = x * P(x**2) for |x| < ``_ERF64_SPLIT``: the Maclaurin series, 2/sqrt(pi) (-1)**n / (n! (2n + 1)),
to terms below 2**-60 there."""
_ERFCX_CENTRE = 0.48863636363636365
_ERFCX = (0.2458108043840275, 0.8326471672301868, 0.9451427112410111, 0.6288263303780287, 0.07233747805615207,
          -0.21988240450531438, -0.06416406603983267, 0.12425978785746902, 0.02043006449644646,
          -0.09205866094066302, 0.02064367818904413, 0.06421114947333276, -0.05476555522190054,
          -0.023183056561994694, 0.06789841708669543, -0.017405064263230345, -0.044171098482693606)
"""erfc(x) * exp(x**2) = Q(t - ``_ERFCX_CENTRE``), t = 1 / (1 + x/2), over [``_ERF64_SPLIT``, ``_ERF64_ONE``]:
mpmath's Chebyshev fit of degree 16 (at 40 digits), whose error times exp(-x**2), the error it makes in erf,
is below 8e-17 there; past ``_ERF64_ONE`` erf rounds to 1 in float64."""


def _erf64(x: UOp) -> UOp:
    """float64 ``erf``: its odd series near 0, and 1 - exp(-x**2) * Q(t) beyond, with the inline ``exp``;
    within 2 ulps. NaN stays NaN, infinities give +-1."""
    z = abs(x)
    near_zero = x * _horner(x * x, _ERF64_NEAR_ZERO)
    clamped = (z > _ERF64_ONE).where(_ERF64_ONE, z)
    t = (clamped * 0.5 + 1.0).reciprocal()
    toward_one = 1.0 - _exp(-(clamped * clamped)) * _horner(t - _ERFCX_CENTRE, _ERFCX)
    return (z < _ERF64_SPLIT).where(near_zero, (x < 0.0).where(-toward_one, toward_one))


_ERF_BY_DTYPE = {dtypes.float32: _erf32, dtypes.float64: _erf64}


def _erf_by_polynomials(node: UOp) -> UOp | None:
    """``erf`` as polynomials a loop vectoriser keeps in vector registers, where the C library's is a scalar
    call per element."""
    erf = _ERF_BY_DTYPE.get(node.dtype)
    return None if erf is None else erf(node.src[0])


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


@dataclass(frozen=True)
class _Format:
    """What the inline ``exp`` and ``log`` of one float dtype need of its bits and its precision."""

    dtype: DType
    bits: DType
    """The integer of the same width, the float's bits read through a bitcast."""
    significand_bits: int
    bias: int
    ln2_high: float
    """ln 2 cut short, so that ``n * ln2_high`` is exact for every ``n`` the exponent field holds; the rest of
    ln 2 is ``ln2_low`` (Cody and Waite's two parts): the sum carries ln 2 well past the format's precision."""
    ln2_low: float
    exp_range: tuple[float, float]
    """Past these exp is 0 (below the least subnormal) and inf, in this format; a NaN passes the clamps."""
    exp_taylor: tuple[float, ...]
    """exp(r) for |r| <= ln(2)/2 by its Taylor series, to below half an ulp."""
    atanh_series: tuple[float, ...]
    """atanh(s)/s - 1 = s**2/3 + s**4/5 + ..., to below half an ulp over |s| <= 3 - 2 sqrt(2), where
    s = f / (2 + f) of a significand 1 + f in [sqrt(1/2), sqrt(2))."""

    @property
    def rounder(self) -> float:
        """Adding this to a float of magnitude below 2**(significand_bits - 1) rounds it to an integer (to
        nearest, ties to even, as ``round``), held in the low bits of the sum's significand: float arithmetic
        and a bitcast where a float to int conversion would be scalar code (x86 has no saturating vector
        conversion)."""
        return 1.5 * 2.0**self.significand_bits

    @property
    def rounder_bits(self) -> int:
        return self.bits_of(self.rounder)

    @property
    def sqrt_half_bits(self) -> int:
        """The bits of sqrt(1/2): a float's bits less these have, in their exponent field, the power of two
        that leaves its significand in [sqrt(1/2), sqrt(2)), and in their fraction that significand's."""
        return self.bits_of(math.sqrt(0.5))

    def bits_of(self, value: float) -> int:
        return int(np.array(value, self.dtype.numpy).view(self.bits.numpy))

    def power_of_two(self, n: UOp) -> UOp:
        """2**n for an integer ``1 - bias <= n <= bias``: n + bias in the exponent field."""
        return ((n + self.bias) << self.significand_bits).bitcast(self.dtype)


_FORMATS = {
    dtypes.float32: _Format(dtypes.float32, dtypes.int32, 23, 127, 0.693145751953125, 1.428606765330187e-06,
                            (-104.0, 89.0), tuple(1 / math.factorial(k) for k in range(8)),
                            tuple(1 / (2 * k + 1) for k in range(1, 6))),
    dtypes.float64: _Format(dtypes.float64, dtypes.int64, 52, 1023, 0.6931471805598903, 5.497923018708371e-14,
                            (-746.0, 710.0), tuple(1 / math.factorial(k) for k in range(14)),
                            tuple(1 / (2 * k + 1) for k in range(1, 12))),
}
"""float32's ln 2 has 16 significant bits in its high part, float64's 42: room for the exponent's 9 and 11."""


def _exp(x: UOp) -> UOp:
    """exp as arithmetic a loop vectoriser keeps in vector registers, where the C library's ``exp`` is one
    scalar call per element: x = n*ln2 + r (ln 2 in two parts keeps r exact), exp(r) by its Taylor series,
    times 2**n applied in two halves so that subnormal and overflowing results round once; n is rounded by
    adding the format's rounder and read as an integer from the sum's bits. Within 2 ulps (float64: 1);
    NaN stays NaN, -inf gives 0."""
    f = _FORMATS[x.dtype]
    least, most = f.exp_range
    low = (x < least).where(least, x)
    clamped = (low > most).where(most, low)
    shifted = _fma(clamped, 1 / math.log(2), f.rounder)
    n = shifted - f.rounder
    r = _fma(n, -f.ln2_low, _fma(n, -f.ln2_high, clamped))
    whole = shifted.bitcast(f.bits) - f.rounder_bits
    half = whole >> 1
    result = _horner(r, f.exp_taylor) * f.power_of_two(half) * f.power_of_two(whole - half)
    return x.ne(x).where(x, result)


def _exp_by_polynomial(node: UOp) -> UOp | None:
    return _exp(node.src[0]) if node.dtype in _FORMATS else None


def _log_by_polynomial(node: UOp) -> UOp | None:
    """``log`` as arithmetic a loop vectoriser keeps in vector registers, where the C library's ``log`` is
    one scalar call per element: x = 2**e * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), read from x's bits
    (a subnormal x is first scaled by 2**significand_bits), and log(1 + f) = 2 atanh(f / (2 + f)) by its
    odd series; e * ln 2 is added in two parts. Within 2 ulps; log of a negative or NaN is NaN, of either
    zero -inf, of inf inf."""
    if node.dtype not in _FORMATS:
        return None
    f, x = _FORMATS[node.dtype], node.src[0]
    width, fraction = f.significand_bits, (1 << f.significand_bits) - 1
    subnormal = x < 2.0 ** (1 - f.bias)
    offset = subnormal.where(x * 2.0**width, x).bitcast(f.bits) - f.sqrt_half_bits
    exponent = (offset >> width) - subnormal.where(UOp.const(f.bits, width), UOp.const(f.bits, 0))
    significand = ((offset & fraction) + f.sqrt_half_bits).bitcast(f.dtype)
    m = significand - 1.0
    s = m / (m + 2.0)
    two_s, z = s * 2.0, s * s
    log1p = _fma(two_s, z * _horner(z, f.atanh_series), two_s)
    e = exponent.cast(f.dtype)
    result = _fma(e, f.ln2_high, _fma(e, f.ln2_low, log1p))
    special = (x < 0.0).where(UOp.const(f.dtype, math.nan), x.eq(0.0).where(UOp.const(f.dtype, -math.inf), x))
    return ((x <= 0.0) | x.eq(math.inf) | x.ne(x)).where(special, result)


EXP_BY_POLYNOMIAL = PatternMatcher([(UPat(Ops.EXP, name="node"), _exp_by_polynomial)])
"""float32 and float64 ``exp`` computed inline for a CPU, so loops over it vectorise."""

CPU_MATH = EXP_BY_POLYNOMIAL + PatternMatcher([(UPat(Ops.LOG, name="node"), _log_by_polynomial),
                                               (UPat(Ops.ERF, name="node"), _erf_by_polynomials)])
"""float32 and float64 ``exp``, ``log`` and ``erf`` computed inline for a CPU, so loops over them
vectorise: the C library's are one scalar call per element, which the compilers vectorise only under
``-ffast-math`` or a vector math library."""


__all__ = ["CPU_MATH", "ERF_FROM_EXP", "EXP_BY_POLYNOMIAL", "FLOAT16_IN_FLOAT32", "POWER_OF_NONNEGATIVE_BASE",
           "TRUNCATING_DIVISION_BY_SAFE_DIVISORS"]
