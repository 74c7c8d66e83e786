"""Complex numbers in a kernel, lowered to pairs of floats: svod's IR and its backends have no complex dtype, so
every device that holds the parts' float runs them (complex128 needs float64: a device without it refuses the
kernel as it refuses any float64).

::

    z = x[i] * 1j + c           ComplexValue(re, im): two UOps of one float dtype, or two Python floats (a
                                Python complex, weak as a Python float is: ``x32[i] * 1j`` is complex64)
    out[i] = z                  two stores: out's float view at [i, 0] and [i, 1] (``ComplexArray``)
    z = z * z + c  (in a loop)  the local ``z`` holds ``COMPLEX_LOCAL``; its parts are the locals ``z.re``, ``z.im``,
                                which loops carry and branches merge as any float local

The arithmetic is NumPy's on its complex types, operation by operation: a real operand is first made complex
(``x + 0j``, as NumPy converts it), ``*`` is ``(ac - bd) + (ad + bc)j``, ``/`` is Smith's method as NumPy's
loops compute it (a zero divisor gives NumPy's inf and NaN parts, no error), ``abs`` a hypot that neither
overflows nor underflows, ``**`` NumPy's power loop (``power`` for an integer constant, ``any_power`` choosing by
the value the run holds). Two
Python complex numbers compute in Python (``1j / 0`` is refused as Python raises). What NumPy orders (``<`` on
complex arrays, lexicographically) Python refuses, and so does a kernel.
"""

from __future__ import annotations

import ast
import cmath
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError
from svod.frontend.memory import Memory
from svod.frontend.values import (
    COMPLEX_LOCAL,
    ArrayValue,
    ComplexArray,
    ComplexValue,
    Undefined,
    describe,
    is_number,
)
from svod.ir import UOp

Parts = tuple[UOp, UOp]

CARRIED_PREFIX = "_svod_"
"""The names of the one-element arrays a jitted function's phases carry scalars in (``jit_plans.Builder.cell``)."""

POWER_LIMIT = 100
"""The largest magnitude of an integer exponent a complex ``**`` takes (NumPy's power loop multiplies for
those, and calls ``cpow`` past them)."""


def part_names(name: str) -> tuple[str, str]:
    """The locals holding complex local ``name``'s parts: not identifiers, so no Python name meets them."""
    return f"{name}.re", f"{name}.im"


def with_parts(names: set[str]) -> set[str]:
    """``names`` and the names of the parts each would have were it complex (a loop's assigned names)."""
    return names | {part for name in names for part in part_names(name)}


def is_complex(value: Any) -> bool:
    return isinstance(value, ComplexValue)


def is_python_complex(value: Any) -> bool:
    """A complex value of Python numbers (or a real Python number): computed now, in Python."""
    return (isinstance(value, ComplexValue) and is_number(value.re)) or is_number(value)


def python_complex(value: Any) -> complex:
    return complex(value.re, value.im) if isinstance(value, ComplexValue) else complex(value)


def of_python(value: complex) -> ComplexValue:
    return ComplexValue(float(value.real), float(value.imag))


# ---- arithmetic on parts --------------------------------------------------------------------------------------

def add(a: Parts, b: Parts) -> Parts:
    return a[0] + b[0], a[1] + b[1]


def subtract(a: Parts, b: Parts) -> Parts:
    return a[0] - b[0], a[1] - b[1]


def multiply(a: Parts, b: Parts) -> Parts:
    return a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]


def divide(a: Parts, b: Parts) -> Parts:
    """Smith's method, as NumPy's complex division loop computes it: the divisor's larger part divides the
    other, so no intermediate overflows where the quotient does not; a zero divisor divides each part by
    zero (inf or NaN parts, as NumPy gives)."""
    (ar, ai), (br, bi) = a, b
    abs_r, abs_i = abs(br), abs(bi)
    real_larger = (abs_r < abs_i).ne(True)  # NumPy's ``abs_r >= abs_i``, false where either is NaN
    zero = abs_r.eq(0.0) & abs_i.eq(0.0)
    ratio = br / bi
    scale = 1.0 / (bi + br * ratio)
    other = ((ar * ratio + ai) * scale, (ai * ratio - ar) * scale)
    ratio_r = bi / br
    scale_r = 1.0 / (br + bi * ratio_r)
    larger = ((ar + ai * ratio_r) * scale_r, (ai - ar * ratio_r) * scale_r)
    by_zero = (ar / abs_r, ai / abs_r)
    return tuple(real_larger.where(zero.where(z, lg), o)  # type: ignore[return-value]
                 for z, lg, o in zip(by_zero, larger, other, strict=True))


def magnitude(a: Parts) -> UOp:
    """``abs(z)``: ``hypot(re, im)`` as the larger part times ``sqrt(1 + q*q)`` (q the ratio of the smaller to
    it), so a magnitude past the float's range never overflows on the way; inf where either part is infinite
    (a NaN other part too, as C's hypot), NaN where one is NaN."""
    x, y = abs(a[0]), abs(a[1])
    swap = x < y
    big, small = swap.where(y, x), swap.where(x, y)
    ratio = small / big
    value = big * (ratio * ratio + 1.0).sqrt()
    value = big.eq(0.0).where(small, value)  # 0, or NaN where the other part is
    return (_is_inf(x) | _is_inf(y)).where(UOp.const(x.dtype, math.inf), value)


def exponential(a: Parts) -> Parts:
    """``exp(z) = e**re (cos im + i sin im)``, with C99's ``cexp`` cases, as NumPy gives them: an imaginary part
    of zero stays that zero (``exp(inf+0j)`` is ``inf+0j``, not ``inf*0``); of an infinite or NaN imaginary part,
    a real part of +inf gives ``inf + nan j``, of -inf ``0 ± 0j`` (the zero signed as the imaginary part)."""
    re, im = a
    scale = re.exp()
    odd_im = _is_inf(im) | _is_nan(im)
    infinite_re, negative = _is_inf(re) & odd_im, _sign_bit(re)
    up, down = infinite_re & negative.ne(True), infinite_re & negative
    zero = UOp.const(re.dtype, 0.0)
    real = up.where(UOp.const(re.dtype, math.inf), down.where(zero, _scaled(re, scale, im.cos())))
    signed_zero = _sign_bit(im).where(UOp.const(re.dtype, -0.0), zero)
    imag = up.where(UOp.const(re.dtype, math.nan), down.where(signed_zero, _scaled(re, scale, im.sin())))
    return real, im.eq(0.0).where(im, imag)


def _scaled(re: UOp, scale: UOp, factor: UOp) -> UOp:
    """``exp(re) * factor``; where ``exp(re)`` overflows but the product need not (a power's part near a zero
    of its cosine or sine), ``exp(re / 2)`` twice, as the C library's ``cexp`` scales it."""
    limit = UOp.const(re.dtype, math.log(float(np.finfo(re.dtype.numpy).max)))
    half = (re * 0.5).exp()
    return limit.lt(re).where(half * factor * half, scale * factor)


def square_root(a: Parts) -> Parts:
    """The principal square root, as C99's ``csqrt``: ``t = sqrt((|re| + |z|) / 2)``; for ``re >= 0`` the root is
    ``t + i im/(2t)``, else ``|im|/(2t) ± i t`` with the sign of ``im`` (of ``-0.0`` too). A zero gives
    ``0 + i im``; an infinite imaginary part ``inf + i im``. A value whose magnitude nears the float's largest is
    scaled down by 4 first and its root up by 2 (both exact), so that ``|z|`` does not overflow on the way."""
    re, im = a
    scaled, huge = _scaled_down(a)
    half = (abs(scaled[0]) * 0.5 + magnitude(scaled) * 0.5).sqrt() * \
        huge.where(UOp.const(re.dtype, 2.0), UOp.const(re.dtype, 1.0))
    signed_half = _sign_bit(im).where(-half, half)
    across = im / (half * 2.0)
    positive = (re < 0.0).ne(True)
    root = (positive.where(half, abs(across)), positive.where(across, signed_half))
    zero = re.eq(0.0) & im.eq(0.0)
    infinite_im = _is_inf(im)
    inf = UOp.const(re.dtype, math.inf)
    return (infinite_im.where(inf, zero.where(UOp.const(re.dtype, 0.0), root[0])),
            infinite_im.where(im, zero.where(im, root[1])))


def logarithm(a: Parts) -> Parts:
    """The principal logarithm: ``log|z| + i atan2(im, re)`` (``log(0)`` is ``-inf`` with the zero's angle, as
    NumPy gives). Where ``|z|`` is near 1 (0.71 to 1.73, as the C library's ``clog`` bounds it) the real part is
    ``log1p(x) / 2`` of ``x = re² + im² - 1`` computed from exact squares, so that it keeps its precision
    relative to itself at every angle: a power's ``exp(p log z)`` of a large ``p`` reads it. A magnitude past the
    float's largest is taken of the value scaled down by 4 (``log 4`` added back)."""
    scaled, huge = _scaled_down(a)
    dtype = a[0].dtype
    added = huge.where(UOp.const(dtype, math.log(4.0)), UOp.const(dtype, 0.0))
    length = magnitude(scaled)
    x, y = abs(a[0]), abs(a[1])
    swap = x < y
    big, small = swap.where(y, x), swap.where(x, y)
    near = (length < 0.71).ne(True) & (length <= 1.73)
    near_one = _log1p(_squares_less_one(big, small)) * 0.5
    return near.where(near_one, length.log() + added), angle(a[1], a[0])


_SPLITTERS = {dtypes.float32: 4097.0, dtypes.float64: 134217729.0}
"""``2^s + 1`` for half a float's significand bits ``s``: Veltkamp's split of a value into two halves whose products
are exact."""


def _exact_square(x: UOp) -> tuple[UOp, UOp]:
    """``x²`` as a rounded square and the error of its rounding (Dekker's product of Veltkamp's halves)."""
    c = x * _SPLITTERS[x.dtype]
    high = c - (c - x)
    low = x - high
    square = x * x
    return square, ((high * high - square) + high * low * 2.0) + low * low


def _squares_less_one(big: UOp, small: UOp) -> UOp:
    """``big² + small² - 1`` for a magnitude near 1, where the terms cancel: each square exact as two floats, the
    two sums of the larger terms with their rounding errors kept (Knuth's two-sum), the small terms added last."""
    big_square, big_error = _exact_square(big)
    small_square, small_error = _exact_square(small)
    first, first_error = _two_sum(big_square, UOp.const(big.dtype, -1.0))
    total, total_error = _two_sum(first, small_square)
    return total + (((first_error + total_error) + big_error) + small_error)


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """``a + b`` rounded and the error of its rounding, of any order of magnitudes (Knuth)."""
    total = a + b
    b_part = total - a
    return total, (a - (total - b_part)) + (b - b_part)


def _log1p(x: UOp) -> UOp:
    """``log(1 + x)`` without the rounding of ``1 + x``: ``log(u) * x / (u - 1)`` of ``u = 1 + x`` (whose ratio
    corrects it), ``x`` itself where ``u`` rounds to 1."""
    u = x + 1.0
    return u.eq(1.0).where(x, u.log() * (x / (u - 1.0)))


def _scaled_down(a: Parts) -> tuple[Parts, UOp]:
    """``a`` divided by 4 where a part is past an eighth of the float's largest (exactly: a power of two), and
    where that is."""
    limit = UOp.const(a[0].dtype, float(np.finfo(a[0].dtype.numpy).max) / 8)
    huge = limit.lt(abs(a[0])) | limit.lt(abs(a[1]))
    return (huge.where(a[0] * 0.25, a[0]), huge.where(a[1] * 0.25, a[1])), huge


ATAN_TERMS = 22
"""Terms of atan's series after reduction to ``|t| <= tan(pi/8)``: the next is below float64's resolution."""
TAN_PI_8 = 0.41421356237309503


def _atan_reduced(t: UOp) -> UOp:
    """``atan(t)`` for ``0 <= t <= 1``: past ``tan(pi/8)`` as ``pi/4 + atan((t-1)/(t+1))``, then the alternating
    series ``t (1 - t²/3 + t⁴/5 - ...)`` by Horner's rule."""
    far = UOp.const(t.dtype, TAN_PI_8).lt(t)
    u = far.where((t - 1.0) / (t + 1.0), t)
    square = u * u
    series = UOp.const(t.dtype, (-1.0) ** (ATAN_TERMS - 1) / (2 * ATAN_TERMS - 1))
    for k in reversed(range(ATAN_TERMS - 1)):
        series = series * square + (-1.0) ** k / (2 * k + 1)
    return far.where(u * series + math.pi / 4, u * series)


def angle(y: UOp, x: UOp) -> UOp:
    """``atan2(y, x)`` as C99 has it: the ratio of the smaller magnitude to the larger reduced to ``[0, 1]``,
    the quadrant from the magnitudes and the signs (of ``-0.0`` too: ``atan2(0.0, -0.0)`` is pi); both zero or
    both infinite take their exact angles, a NaN stays NaN."""
    ay, ax = abs(y), abs(x)
    steep = ax < ay
    ratio = steep.where(ax, ay) / steep.where(ay, ax)
    both_zero = ay.eq(0.0) & ax.eq(0.0)
    both_infinite = _is_inf(y) & _is_inf(x)
    base = both_infinite.where(UOp.const(x.dtype, math.pi / 4), _atan_reduced(both_zero.where(0.0, ratio)))
    turned = steep.where(math.pi / 2 - base, base)
    turned = _sign_bit(x).where(math.pi - turned, turned)
    return _sign_bit(y).where(-turned, turned)


_BITS = {dtypes.float32: dtypes.uint32, dtypes.float64: dtypes.uint64}


_EXPONENTS = {dtypes.float32: 0x7F800000, dtypes.float64: 0x7FF0000000000000}


def _magnitude_bits(value: UOp) -> tuple[UOp, UOp]:
    """``value``'s bits without the sign, and the bits of infinity: tests of a float's class from its bits hold
    where a compiler may assume floats are finite (WGSL)."""
    unsigned = _BITS[value.dtype]
    positive = UOp.const(unsigned, (1 << (unsigned.itemsize * 8 - 1)) - 1)
    return value.bitcast(unsigned) & positive, UOp.const(unsigned, _EXPONENTS[value.dtype])


def _is_inf(value: UOp) -> UOp:
    magnitude_bits, infinity = _magnitude_bits(value)
    return magnitude_bits.eq(infinity)


def _is_nan(value: UOp) -> UOp:
    magnitude_bits, infinity = _magnitude_bits(value)
    return infinity.lt(magnitude_bits)


def _sign_bit(value: UOp) -> UOp:
    """Whether ``value``'s sign bit is set (``-0.0`` too): its bits past the largest positive pattern."""
    unsigned = _BITS[value.dtype]
    return UOp.const(unsigned, (1 << (unsigned.itemsize * 8 - 1)) - 1).lt(value.bitcast(unsigned))


def power(a: Parts, exponent: int) -> Parts:
    """``z ** n`` for an integer constant ``n``, as NumPy's complex power loop computes it (``nc_pow``): a zero
    ``z`` (either zero's sign) is ``0+0j`` for ``n > 0`` and NaN parts for ``n < 0``; ``n`` of 1, 2 and 3 are
    unrolled products; other ``n`` binary powers starting from ``1+0j`` (whose product with an infinite part
    makes its neighbour NaN there too), and a negative ``n`` one over them by Smith's quotient (``divide``), as
    NumPy's ``cdiv`` divides there."""
    dtype = a[0].dtype
    one = UOp.const(dtype, 1.0), UOp.const(dtype, 0.0)
    if exponent == 0:
        return one
    if 1 <= exponent <= 3:
        result = a if exponent == 1 else multiply(a, a) if exponent == 2 else multiply(a, multiply(a, a))
    else:
        result, square, n, mask = one, a, abs(exponent), 1
        while True:
            if n & mask:
                result = multiply(result, square)
            mask <<= 1
            if n < mask:
                break
            square = multiply(square, square)
        if exponent < 0:
            result = divide(one, result)
    zero = a[0].eq(0.0) & a[1].eq(0.0)
    at_zero = UOp.const(dtype, 0.0 if exponent > 0 else math.nan)
    return zero.where(at_zero, result[0]), zero.where(at_zero, result[1])


BINARY_POWER_BITS = 7
"""The bits of a whole exponent's magnitude below ``POWER_LIMIT``: the steps of the binary power a run-time
exponent takes, each chosen by its bit."""


def any_power(a: Parts, b: Parts) -> Parts:
    """``a ** b`` for any exponent, as NumPy's ``npy_cpow`` chooses by the values the run holds: an exponent of
    zero gives ``1+0j`` (of any base, NaN too); a zero base ``0+0j`` where the exponent's real part is positive
    and NaN parts otherwise; a real whole exponent below ``POWER_LIMIT`` in magnitude ``power``'s products (the
    binary power's steps each taken where the exponent's bit is set, which multiplies as the loop does); any
    other ``exp(b log a)`` with C's product, as the C library's ``cpow`` computes it."""
    (ar, ai), (br, bi) = a, b
    dtype = ar.dtype
    small = abs(br) < float(POWER_LIMIT)
    clamped = small.where(br, UOp.const(dtype, 0.0))
    whole = bi.eq(0.0) & small & clamped.trunc().eq(clamped)
    count = clamped.cast(dtypes.int32)
    magnitude_n = (count < 0).where(-count, count)
    one = UOp.const(dtype, 1.0), UOp.const(dtype, 0.0)
    result, square = one, a
    for bit in range(BINARY_POWER_BITS):
        taken = (magnitude_n & (1 << bit)).ne(0)
        product = multiply(result, square)
        result = (taken.where(product[0], result[0]), taken.where(product[1], result[1]))
        square = multiply(square, square)
    inverse = divide(one, result)
    negative = count < 0
    binary = (negative.where(inverse[0], result[0]), negative.where(inverse[1], result[1]))
    squared = multiply(a, a)
    cubed = multiply(a, squared)
    general = exponential(_c_product(b, logarithm(a)))
    choices = [(count.eq(1), a), (count.eq(2), squared), (count.eq(3), cubed)]
    chosen = binary
    for test, value in choices:
        chosen = (test.where(value[0], chosen[0]), test.where(value[1], chosen[1]))
    chosen = (whole.where(chosen[0], general[0]), whole.where(chosen[1], general[1]))
    at_zero = (UOp.const(dtype, 0.0) < br).where(UOp.const(dtype, 0.0), UOp.const(dtype, math.nan))
    zero_base = ar.eq(0.0) & ai.eq(0.0)
    zero_exponent = br.eq(0.0) & bi.eq(0.0)
    return tuple(zero_exponent.where(unit, zero_base.where(at_zero, part))  # type: ignore[return-value]
                 for unit, part in zip(one, chosen, strict=True))


def _c_product(a: Parts, b: Parts) -> Parts:
    """``a * b`` as C's complex product (Annex G): where both parts of the plain product are NaN and an operand
    is infinite, the infinite operand's parts become 1 or 0 with their signs, NaNs 0, and the product is taken
    again times infinity, so an infinite factor keeps an infinite result."""
    plain = multiply(a, b)
    both_nan = _is_nan(plain[0]) & _is_nan(plain[1])
    a_inf = _is_inf(a[0]) | _is_inf(a[1])
    b_inf = _is_inf(b[0]) | _is_inf(b[1])
    dtype = a[0].dtype
    boxed_a = tuple(_boxed(part, a_inf) for part in a)
    boxed_b = tuple(_boxed(part, b_inf) for part in b)
    recovered = multiply(boxed_a, boxed_b)  # type: ignore[arg-type]
    inf = UOp.const(dtype, math.inf)
    again = both_nan & (a_inf | b_inf)
    return again.where(recovered[0] * inf, plain[0]), again.where(recovered[1] * inf, plain[1])


def _boxed(part: UOp, infinite: UOp) -> UOp:
    """An operand's part as Annex G's recovery takes it: of an infinite operand, 1 with the sign of an infinite
    part and 0 with the sign of a finite one; of a finite one, 0 with its sign for a NaN part."""
    dtype = part.dtype
    signed = lambda value: _sign_bit(part).where(UOp.const(dtype, -value), UOp.const(dtype, value))  # noqa: E731
    return infinite.where(_is_inf(part).where(signed(1.0), signed(0.0)),
                          _is_nan(part).where(signed(0.0), part))


def reciprocal(a: Parts) -> Parts:
    """``np.reciprocal(z)``, which NumPy's operator computes for an array's ``** -1``, as its loop does: by the
    ratio of the smaller part to the larger, ``r = im / re``, ``d = re + im r``, ``1/d - i r/d`` where ``|im| <=
    |re|``, else ``r = re / im``, ``d = re r + im``, ``r/d - i/d`` (a NaN part takes the second way). It keeps
    signed zeros and infinities where the power loop (``power``) gives NaN parts: ``1/(inf+0j)`` is ``0-0j``."""
    re, im = a
    first = abs(im) <= abs(re)
    r = first.where(im / re, re / im)
    d = first.where(re + im * r, re * r + im)
    one = UOp.const(re.dtype, 1.0)
    return first.where(one / d, r / d), first.where(-(r / d), -(one / d))


_MATH: dict[str, Callable[[Parts], Parts]] = {"exp": exponential, "log": logarithm, "sqrt": square_root}
"""The math of a complex value a kernel has, besides ``abs`` (a real: ``magnitude``)."""
_BINARY = {"+": add, "-": subtract, "*": multiply, "/": divide}


class CarriedComplexError(KernelSyntaxError):
    """A phase of a jitted function stores a complex value into the buffer of a scalar it carries to the phases
    after it, a buffer of a real dtype: the rounds that settle carried dtypes make that buffer complex (``parts``
    the dtype of its parts), and a plan that still has it real refuses."""

    def __init__(self, carried: str, parts: DType, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.carried = carried
        self.parts = parts


# ---- the translator's part ------------------------------------------------------------------------------------

class Complexes(Memory):
    """Complex values in arithmetic, comparisons, conditions, branches and array elements."""

    def complex_dtype(self, *values: Any) -> DType:
        """The parts' dtype of the complex result of ``values`` (complex and real), as NumPy 2 promotes: the
        typed values' dtypes unify and a Python number is weak; an integer or float16 result is widened to a
        float NumPy has a complex of (``int32 + complex64`` is complex128, ``float16 * 1j`` complex64)."""
        typed = [part.dtype for part in map(_first_part, values) if isinstance(part, UOp) and not self.weak(part)]
        if not typed:
            return self.platform.real
        dtype = typed[0]
        for other in typed[1:]:
            dtype = self.platform.unify(dtype, other)
        if not dtype.is_float:
            dtype = self.meets(0.0, dtype)
        return dtypes.float32 if dtype == dtypes.float16 else dtype

    def complex_parts(self, value: Any, dtype: DType) -> Parts:
        """``value`` (complex, or real made complex: ``x + 0j``) as two UOps of ``dtype``."""
        if isinstance(value, ComplexValue):
            return self.cast(value.re, dtype), self.cast(value.im, dtype)
        return super().cast(value, dtype), UOp.const(dtype, 0.0)

    def complex_binary(self, op: str, a: Any, b: Any, node: ast.AST | None) -> ComplexValue:
        if op not in (*_BINARY, "**"):
            raise self._complex_refusal(node, f"{op} of complex numbers (Python and NumPy refuse it)")
        if is_python_complex(a) and is_python_complex(b):
            try:
                return of_python(_python_binary(op, python_complex(a), python_complex(b)))
            except (ZeroDivisionError, OverflowError) as err:
                raise self._complex_refusal(node, f"{python_complex(a)!r} {op} {python_complex(b)!r}: {err}") from None
        if op == "**":
            return self.complex_power(a, b, node)
        dtype = self.complex_dtype(a, b)
        return ComplexValue(*_BINARY[op](self.complex_parts(a, dtype), self.complex_parts(b, dtype)))

    def complex_power(self, a: Any, b: Any, node: ast.AST | None) -> ComplexValue:
        """``a ** b``: of a whole real constant below ``POWER_LIMIT`` NumPy's products, written out; of any other
        exponent (a value only the run holds, a fraction, a complex number) ``any_power``, which chooses as NumPy
        does by the value."""
        if not (is_complex(b) or is_number(b) or isinstance(b, UOp)):
            raise self._complex_refusal(node, f"a complex ** {describe(b)}: the exponent is not a number")
        exponent = python_complex(b) if is_python_complex(b) else None
        if exponent is not None and exponent.imag == 0 and math.isfinite(exponent.real) and \
                exponent.real == int(exponent.real) and abs(exponent.real) < POWER_LIMIT:
            dtype = self.complex_dtype(a)
            return ComplexValue(*power(self.complex_parts(a, dtype), int(exponent.real)))
        dtype = self.complex_dtype(a, b)
        return ComplexValue(*any_power(self.complex_parts(a, dtype), self.complex_parts(b, dtype)))

    def complex_compare(self, name: str, a: Any, b: Any, node: ast.AST) -> Any:
        if name not in ("==", "!="):
            raise self.refuse(node, f"complex numbers have no order ({name}): Python refuses to compare them; "
                                    "compare abs(z), z.real or z.imag")
        if is_python_complex(a) and is_python_complex(b):
            return (python_complex(a) == python_complex(b)) == (name == "==")
        dtype = self.complex_dtype(a, b)
        (ar, ai), (br, bi) = self.complex_parts(a, dtype), self.complex_parts(b, dtype)
        return ar.eq(br) & ai.eq(bi) if name == "==" else ar.ne(br) | ai.ne(bi)

    def complex_unary(self, op: ast.unaryop, value: ComplexValue, node: ast.AST) -> Any:
        if isinstance(op, ast.UAdd):
            return value
        if isinstance(op, ast.USub):
            return ComplexValue(-value.re, -value.im)
        if isinstance(op, ast.Not):
            return not python_complex(value) if is_python_complex(value) else self.truth(value, node).ne(True)
        raise self.refuse(node, "~ of a complex number (Python and NumPy refuse it)")

    def complex_math(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        """``np.exp``, ``np.sqrt``, ``np.abs`` of a complex value, ``np.power`` of complex values (NumPy's power
        loop, as ``**``); other math of one is refused."""
        if name == "pow" and len(args) == 2:
            return self.complex_binary("**", args[0], args[1], node)
        if len(args) != 1 or name not in (*_MATH, "abs"):
            raise self.refuse(node, f"{name} of a complex value is not supported in a kernel (it has exp, log, sqrt, "
                                    "abs, np.power, np.angle, and .real, .imag, .conjugate())")
        value = args[0]
        if is_python_complex(value):
            number = python_complex(value)
            return abs(number) if name == "abs" else of_python(getattr(cmath, name)(number))
        parts = self.complex_parts(value, self.complex_dtype(value))
        if name == "abs":
            return magnitude(parts)
        return ComplexValue(*_MATH[name](parts))

    def complex_builtin(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        """``complex(re, im)``, ``np.real``/``imag``/``conj``/``conjugate`` of complex or real values."""
        if name == "complex":
            if not 1 <= len(args) <= 2 or any(is_complex(a) for a in args):
                raise self.refuse(node, "complex(re, im) takes one or two real numbers in a kernel")
            re, im = (*args, 0.0)[:2]
            if is_number(re) and is_number(im):
                return ComplexValue(float(re), float(im))
            dtype = self.platform.real  # numba's complex() is complex128, as Python's
            return ComplexValue(super().cast(re, dtype), super().cast(im, dtype))
        if len(args) != 1:
            raise self.refuse(node, f"{name} takes one value in a kernel")
        value = args[0]
        if name in ("np.complex64", "np.complex128"):  # a NumPy complex scalar: typed
            dtype = dtypes.float32 if name == "np.complex64" else dtypes.float64
            re, im = self.complex_parts(value, dtype)
            return ComplexValue(self.typed(re), self.typed(im))
        if name == "np.reciprocal":
            if is_python_complex(value):
                return of_python(complex(np.reciprocal(np.complex128(python_complex(value)))))
            if not is_complex(value):
                raise self.refuse(node, "np.reciprocal of a real value is not supported in a kernel; divide 1.0 by it")
            return ComplexValue(*reciprocal(self.complex_parts(value, self.complex_dtype(value))))
        if name == "np.angle":
            if is_python_complex(value):
                return cmath.phase(python_complex(value))
            re, im = self.complex_parts(value, self.complex_dtype(value))
            return angle(im, re)
        if not is_complex(value):
            if not (is_number(value) or isinstance(value, UOp)):
                raise self.refuse(node, f"{name} of {describe(value)}")
            return 0.0 * value if name == "np.imag" and is_number(value) else \
                UOp.const(value.dtype, 0.0) if name == "np.imag" else value
        return self.complex_attribute(node, value, {"np.real": "real", "np.imag": "imag"}.get(name, "conjugate"))

    def complex_attribute(self, node: ast.AST, value: ComplexValue, attr: str) -> Any:
        if attr == "real":
            return value.re
        if attr == "imag":
            return value.im
        if attr in ("conjugate", "conj"):
            return ComplexValue(value.re, -value.im)
        raise self.refuse(node, f"a complex number has real, imag, conjugate() and conj(), not {attr}")

    # ---- array elements ------------------------------------------------------------------------------------

    def complex_load(self, array: ComplexArray, index: tuple[Any, ...]) -> ComplexValue:
        return ComplexValue(self.element(array.parts, (*index, 0)).load(),
                            self.element(array.parts, (*index, 1)).load())

    def complex_store(self, array: ComplexArray, index: tuple[Any, ...], value: Any) -> None:
        re, im = self.complex_parts(value, array.dtype)
        super().store(array.parts, (*index, 0), re)
        super().store(array.parts, (*index, 1), im)

    # ---- locals ---------------------------------------------------------------------------------------------

    def complex_local(self, name: str, node: ast.AST) -> ComplexValue:
        """The value of complex local ``name`` from its parts."""
        parts = [self.env.get(part) for part in part_names(name)]
        for part in parts:
            if isinstance(part, Undefined):
                raise self.refuse(node, f"{name} is not defined here: {part.why}")
        return ComplexValue(*parts)

    def assign_local(self, name: str, value: Any) -> None:
        """Bind local ``name``: a complex value to its parts (``part_names``); a real one where a complex was
        leaves the old parts undefined."""
        if isinstance(value, ComplexValue):
            self.env[name] = COMPLEX_LOCAL
            self.env.update(zip(part_names(name), (value.re, value.im), strict=True))
            return
        if self.env.get(name) is COMPLEX_LOCAL:
            why = f"{name} was complex and holds a real value now"
            self.env.update({part: Undefined(part, why) for part in part_names(name)})
        self.env[name] = value

    # ---- what the arithmetic below does, with complex values ------------------------------------------------

    def binary(self, op: str, a: Any, b: Any, node: ast.AST | None = None) -> Any:
        if is_complex(a) or is_complex(b):
            return self.complex_binary(op, a, b, node)
        return super().binary(op, a, b, node)

    def select(self, cond: UOp, a: Any, b: Any, node: ast.AST) -> Any:
        if not (is_complex(a) or is_complex(b)):
            return super().select(cond, a, b, node)
        dtype = self.complex_dtype(a, b)
        (ar, ai), (br, bi) = self.complex_parts(a, dtype), self.complex_parts(b, dtype)
        return ComplexValue(cond.where(ar, br), cond.where(ai, bi))

    def compare(self, name: str, a: Any, b: Any, node: ast.AST) -> Any:
        if is_complex(a) or is_complex(b):
            return self.complex_compare(name, a, b, node)
        return super().compare(name, a, b, node)

    def truth(self, value: Any, node: ast.AST) -> UOp:
        if isinstance(value, ComplexValue):
            re, im = self.complex_parts(value, self.complex_dtype(value))
            return re.ne(0.0) | im.ne(0.0)
        return super().truth(value, node)

    def cast(self, value: Any, dtype: DType) -> UOp:
        if isinstance(value, ComplexValue):
            raise KernelSyntaxError(f"{describe(value)} converted to {dtype.name}: that would discard its imaginary "
                                    "part (Python refuses float(z), NumPy warns); take z.real", kernel=self.name,
                                    stage="build", value=dtype.name)
        return super().cast(value, dtype)

    def operands(self, a: Any, b: Any, node: ast.AST | None = None) -> tuple[UOp, UOp]:
        if is_complex(a) or is_complex(b):
            raise KernelSyntaxError(f"{describe(a if is_complex(a) else b)} where a kernel takes real numbers only",
                                    kernel=self.name, stage="build", value="complex")
        return super().operands(a, b, node)

    def store(self, array: ArrayValue, index: tuple[Any, ...], value: Any) -> None:
        if isinstance(array, ComplexArray):
            self.complex_store(array, index, value)
            return
        if isinstance(value, ComplexValue) and array.name.startswith(CARRIED_PREFIX):
            raise CarriedComplexError(array.name.removeprefix(CARRIED_PREFIX), self.complex_dtype(value),
                                 f"a complex scalar that one part of a jitted function computes and another reads "
                                    f"({array.name.removeprefix(CARRIED_PREFIX)}: a complex np.sum or np.mean, a "
                                    "complex local set by one loop and read after it) is not supported yet; keep it "
                                    "in a one-element complex array", kernel=self.name, stage="build",
                                 value=array.name.removeprefix(CARRIED_PREFIX))
        super().store(array, index, value)

    def _complex_refusal(self, node: ast.AST | None, what: str) -> KernelSyntaxError:
        if node is not None:
            return self.refuse(node, what)
        return KernelSyntaxError(what, kernel=self.name, stage="build", value="complex")


def _first_part(value: Any) -> Any:
    return value.re if isinstance(value, ComplexValue) else value


def _python_binary(op: str, a: complex, b: complex) -> complex:
    return _PYTHON_BINARY[op](a, b)


_PYTHON_BINARY: dict[str, Callable[[complex, complex], complex]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow}


__all__ = ["CarriedComplexError", "Complexes", "POWER_LIMIT", "is_complex", "part_names", "with_parts"]
