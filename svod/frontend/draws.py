"""The UOps of one random draw: Philox4x32-10 of the draw's place, and the value its words make.

::

    Place(key, launch, ordinal, element, stream) ──block──▶ w0 w1 w2 w3 (uint32) ──value──▶ random(), normal(...)

``draw`` is the one entry: the translator of ``@svod.kernel`` calls it for each ``np.random.*`` call (with the
place its hidden locals say), and whatever else builds kernels that draw may call it the same way. The layout
of a place and what each function makes of the words are ``svod.random``'s (its docstring); the plain-Python
reference of the same numbers is ``svod.random.philox``, which this module shares no code with.

A multiplication of two uint32 into their 64-bit product (``mul_hi_lo``) uses 64-bit integers where the
device has them (``wide``), and 16-bit halves in uint32 arithmetic where it does not (WebGPU).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from svod.dtype import DType, dtypes
from svod.ir import UOp

MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
"""Philox4x32's round multipliers M0, M1."""
BUMPS = (0x9E3779B9, 0xBB67AE85)
"""Philox4x32's key increments W0, W1."""
ROUNDS = 10
LOW_HALF = 0xFFFF

Words = tuple[UOp, UOp, UOp, UOp]


@dataclass(frozen=True)
class Signature:
    """The arguments of an ``np.random`` function, as NumPy names them: the first ``required`` have no default,
    each other its default (``randint``'s ``high`` None: ``randint(high)`` draws from 0)."""

    parameters: tuple[tuple[str, float | None], ...] = ()
    required: int = 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.parameters)

    def describe(self, name: str) -> str:
        shown = [p if k < self.required else f"{p}={default}" for k, (p, default) in enumerate(self.parameters)]
        return f"np.random.{name}({', '.join(shown)})"


FUNCTIONS: dict[str, Signature] = {
    "seed": Signature((("seed", None),), required=1),
    "random": Signature(), "random_sample": Signature(), "rand": Signature(),
    "uniform": Signature((("low", 0.0), ("high", 1.0))),
    "normal": Signature((("loc", 0.0), ("scale", 1.0))),
    "standard_normal": Signature(), "randn": Signature(),
    "exponential": Signature((("scale", 1.0),)),
    "standard_exponential": Signature(),
    "randint": Signature((("low", None), ("high", None)), required=1),
}
"""The ``np.random`` functions a kernel may call, one number per call (NumPy's ``size`` is refused); ``seed``
sets the key and draws nothing."""
ALIASES = {"random_sample": "random", "rand": "random", "randn": "standard_normal"}


@dataclass(frozen=True)
class Place:
    """Where a draw is made: what its block is a function of (``svod.random``'s layout). Each a uint32, but
    ``element``, the work item's linear index (an integer of the kernel's index width)."""

    key: UOp
    launch: UOp
    ordinal: UOp
    element: UOp
    stream: UOp


def mul_hi_lo(a: UOp, b: UOp | int, wide: bool) -> tuple[UOp, UOp]:
    """The high and low uint32 words of the exact product of uint32s ``a`` and ``b``: through uint64 where
    ``wide``, else from the four products of their 16-bit halves (each below 2**32, as the sums of their
    parts taken here are)."""
    if isinstance(b, int):
        b = UOp.const(dtypes.uint32, b)
    if wide:
        product = a.cast(dtypes.uint64) * b.cast(dtypes.uint64)
        return (product >> 32).cast(dtypes.uint32), product.cast(dtypes.uint32)
    a_low, a_high, b_low, b_high = a & LOW_HALF, a >> 16, b & LOW_HALF, b >> 16
    low_low, low_high, high_low = a_low * b_low, a_low * b_high, a_high * b_low
    middle = (low_low >> 16) + (low_high & LOW_HALF) + (high_low & LOW_HALF)
    high = a_high * b_high + (low_high >> 16) + (high_low >> 16) + (middle >> 16)
    return high, a * b


def philox(counter: Sequence[UOp], key: Sequence[UOp], wide: bool) -> Words:
    """Philox4x32-10: ten rounds on the four counter words, the two key words bumped between rounds."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for turn in range(ROUNDS):
        if turn:
            k0, k1 = k0 + BUMPS[0], k1 + BUMPS[1]
        high0, low0 = mul_hi_lo(c0, MULTIPLIERS[0], wide)
        high1, low1 = mul_hi_lo(c2, MULTIPLIERS[1], wide)
        c0, c1, c2, c3 = high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0
    return c0, c1, c2, c3


def block(place: Place, wide: bool) -> Words:
    """The block of ``place``: key (key, launch), counter (ordinal, element's low and high words, stream)."""
    if wide:
        element = place.element.cast(dtypes.uint64)
        low, high = element.cast(dtypes.uint32), (element >> 32).cast(dtypes.uint32)
    else:
        low, high = place.element.cast(dtypes.uint32), UOp.const(dtypes.uint32, 0)
    return philox((place.ordinal, low, high, place.stream), (place.key, place.launch), wide)


def uniform(words: Words, real: DType) -> UOp:
    """A uniform in [0, 1): float64 from 27 bits of w0 and 26 of w1 (exact at every step), float32 from 24
    bits of w0."""
    if real == dtypes.float64:
        high, low = (words[0] >> 5).cast(real), (words[1] >> 6).cast(real)
        return (high * float(1 << 26) + low) * 2.0 ** -53
    return (words[0] >> 8).cast(real) * 2.0 ** -24


@dataclass(frozen=True)
class _Float:
    """What ``log_unit`` and ``cos_two_pi`` need of a float type: its bits as an integer, its fraction's width,
    ln 2 in two parts (the high one short enough that an exponent times it is exact), and how many terms of
    each series reach its precision."""

    bits: DType
    fraction_bits: int
    ln2_high: float
    ln2_low: float
    atanh_terms: int
    trig_terms: int


_FLOATS = {dtypes.float64: _Float(dtypes.int64, 52, 0.6931471805598903, 5.497923018708371e-14, 11, 9),
           dtypes.float32: _Float(dtypes.int32, 23, 0.693145751953125, 1.428606765330187e-06, 5, 6)}


def _horner(z: UOp, coefficients: Sequence[float]) -> UOp:
    """``c0 + z * (c1 + z * (c2 + ...))``."""
    p = UOp.const(z.dtype, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        p = p * z + c
    return p


def log_unit(t: UOp) -> UOp:
    """``log(t)`` for a float ``t`` in (0, 1] (never a subnormal: a draw's is a multiple of 2**-53, or of
    2**-24), from ``+ - * /`` alone, so that it is the same bits on every device that rounds those as IEEE 754
    does: t = 2**e * m with m in [sqrt(1/2), sqrt(2)) read from t's bits, log(m) = 2 atanh(s) with s = (m - 1) /
    (m + 1) by its odd series, e * ln 2 added in two parts. Within a few ulps of the true log."""
    f = _FLOATS[t.dtype]
    root_half = int(np.array(math.sqrt(0.5), t.dtype.numpy).view(f.bits.numpy))
    offset = t.bitcast(f.bits) - root_half
    exponent = (offset >> f.fraction_bits).cast(t.dtype)
    m = ((offset & ((1 << f.fraction_bits) - 1)) + root_half).bitcast(t.dtype)
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    series = _horner(z, [1 / (2 * k + 1) for k in range(1, f.atanh_terms + 1)])
    return exponent * f.ln2_high + (exponent * f.ln2_low + (s + s * z * series) * 2.0)


def cos_two_pi(u: UOp) -> UOp:
    """``cos(2 pi u)`` for a float ``u`` in [0, 1), from ``+ - *`` alone (same bits on every IEEE 754 device):
    the quarter turn ``q`` and the fraction ``f`` of it are exact (4u is), ``cos(pi/2 (q + f))`` is a cosine or
    a sine of ``pi/2 f`` by ``q``'s sign table, and a fraction past one half is turned into ``1 - f`` (exact), so
    each series runs on an angle within pi/4. Of the two series each work item needs one: its Horner steps
    take the coefficients of the one it needs (the same operations, so the same bits, as that series alone)."""
    f = _FLOATS[u.dtype]
    quarter = u * 4.0
    q = quarter.cast(f.bits)
    fraction = quarter - q.cast(u.dtype)
    turned = fraction > 0.5
    angle = turned.where(1.0 - fraction, fraction) * (math.pi / 2)
    z = angle * angle
    sine = turned.ne((q & 1).eq(1))  # a quarter's sine, or a turned fraction's cosine
    cos = [(-1) ** k / math.factorial(2 * k) for k in range(f.trig_terms)]
    sin = [(-1) ** k / math.factorial(2 * k + 1) for k in range(f.trig_terms)]
    series = sine.where(sin[-1], cos[-1], u.dtype)
    for c, s in zip(reversed(cos[:-1]), reversed(sin[:-1]), strict=True):
        series = series * z + sine.where(s, c, u.dtype)
    value = sine.where(angle * series, series)
    return (q.eq(1) | q.eq(2)).where(-value, value)


def standard_normal(words: Words, real: DType) -> UOp:
    """Box-Muller: ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)``, u1 and u2 from the first and second half of the
    block (float32: from w0 and w1); the log and cosine are ``log_unit`` and ``cos_two_pi``, and sqrt is
    IEEE 754's."""
    if real == dtypes.float64:
        u1, u2 = uniform(words, real), uniform((words[2], words[3], words[0], words[1]), real)
    else:
        u1, u2 = uniform(words, real), uniform((words[1], words[0], words[2], words[3]), real)
    radius = (log_unit(1.0 - u1) * -2.0).sqrt()
    return radius * cos_two_pi(u2)


def standard_exponential(words: Words, real: DType) -> UOp:
    """``-log(1 - u)`` (``log_unit``): 1 - u is in (0, 1], so the log is finite."""
    return -log_unit(1.0 - uniform(words, real))


def bounded(words: Words, low: UOp, high: UOp, wide: bool) -> UOp:
    """``low`` plus an integer in [0, high - low), by Lemire's multiply-shift on the first word whose low product
    is at least 2**32 mod the span (else on the last); ``low`` where the span is outside 1 .. 2**32. ``low`` and
    ``high`` are of the kernel's integer dtype."""
    integer = low.dtype
    span = high - low
    s = span.cast(dtypes.uint32)
    threshold = (UOp.const(dtypes.uint32, 0) - s) % s
    chosen: UOp | None = None
    for w in reversed(words):
        high_word, low_word = mul_hi_lo(w, s, wide)
        chosen = high_word if chosen is None else (low_word < threshold).where(chosen, high_word)
    assert chosen is not None
    inside = (span >= 1) & (span <= (1 << 32)) if wide else span >= 1
    if wide:
        chosen = span.eq(1 << 32).where(words[0], chosen)
    return low + inside.where(chosen.cast(integer), UOp.const(integer, 0))


def sort_key(words: Words, wide: bool) -> UOp:
    """A shuffle's sort key (``np.random.permutation``): w0 above w1, a uint64, where the device has 64-bit
    integers; else w0."""
    if wide:
        return (words[0].cast(dtypes.uint64) << 32) | words[1].cast(dtypes.uint64)
    return words[0]


def draw(name: str, place: Place, arguments: Sequence[UOp], real: DType, integer: DType, wide: bool) -> UOp:
    """The value of ``np.random.<name>(*arguments)`` drawn at ``place``: a float of dtype ``real`` (``randint``:
    an integer of dtype ``integer``; ``keys``: a shuffle's sort key, ``sort_key``). ``arguments`` are the
    function's, in ``FUNCTIONS``' order, each already of the result's dtype; ``wide``: the device has 64-bit
    integers."""
    name = ALIASES.get(name, name)
    words = block(place, wide)
    if name == "random":
        return uniform(words, real)
    if name == "uniform":
        low, high = arguments
        return low + (high - low) * uniform(words, real)
    if name == "standard_normal":
        return standard_normal(words, real)
    if name == "normal":
        loc, scale = arguments
        return loc + scale * standard_normal(words, real)
    if name == "standard_exponential":
        return standard_exponential(words, real)
    if name == "exponential":
        (scale,) = arguments
        return scale * standard_exponential(words, real)
    if name == "randint":
        low, high = arguments
        return bounded(words, low, high, wide)
    if name == "keys":
        return sort_key(words, wide)
    raise ValueError(f"np.random.{name} is not a draw")


__all__ = ["ALIASES", "FUNCTIONS", "Place", "Signature", "block", "bounded", "cos_two_pi", "draw", "log_unit",
           "mul_hi_lo", "philox", "sort_key", "standard_exponential", "standard_normal", "uniform"]
