"""Philox4x32-10 and svod's draws in plain Python: the specification of the random numbers kernels make.

This module is the reference that kernels are checked against (``svod.check`` runs a kernel's function as
plain Python with ``np.random`` replaced by ``PlainRandom``). It is written apart from the code that builds
the same numbers as UOps (``svod.frontend.draws``) and shares nothing with it, so a mistake in one shows as
a difference from the other.

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC11; the
generator of cuRAND, JAX and Random123) maps a 128-bit counter and a 64-bit key to 128 random bits, four
32-bit words, in ten rounds of two 32x32->64-bit multiplications::

    round:   (hi0, lo0) = M0 * c0      (hi1, lo1) = M1 * c2
             c = (hi1 ^ c1 ^ k0,  lo1,  hi0 ^ c3 ^ k1,  lo0)
    between rounds the key is bumped:  k0 += W0, k1 += W1  (mod 2**32)

``philox4x32`` takes Python ints (one block) or numpy ``uint64`` arrays of values below 2**32 (a block per
element), with the same code: every product is exact in either.

How a draw's words become a value (``uniform_double`` ...) is stated once here and in the module docstring
of ``svod.random``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57
"""Philox4x32's multipliers."""
W0, W1 = 0x9E3779B9, 0xBB67AE85
"""Philox4x32's key increments (the golden ratio's and sqrt(3) - 1's first 32 bits)."""
ROUNDS = 10
MASK = 0xFFFFFFFF


def philox4x32(counter: Sequence[Any], key: Sequence[Any]) -> tuple[Any, Any, Any, Any]:
    """The four words Philox4x32-10 makes of ``counter`` (four words) and ``key`` (two words): ints, or arrays
    of them (as ``uint64``)."""
    c0, c1, c2, c3 = (_word(c) for c in counter)
    k0, k1 = (_word(k) for k in key)
    for turn in range(ROUNDS):
        if turn:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK, (p0 >> 32) ^ c3 ^ k1, p0 & MASK
    return c0, c1, c2, c3


def _word(value: Any) -> Any:
    """A word as exact arithmetic takes it: a Python int, or a ``uint64`` array (numpy's int64 scalars would
    overflow in the products)."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    return np.asarray(value).astype(np.uint64)


# ---- a draw's value from its block's words -----------------------------------------------------------------

def uniform_double(w0: Any, w1: Any) -> Any:
    """A float64 in [0, 1): the 27 high bits of ``w0`` above the 26 high bits of ``w1``, times 2**-53."""
    return (((w0 >> 5) << 26) | (w1 >> 6)) * 2.0 ** -53


def uniform_single(w0: Any) -> Any:
    """A float32 in [0, 1): the 24 high bits of ``w0`` times 2**-24 (the float64 draw cut to 24 bits)."""
    return np.float32((w0 >> 8) * 2.0 ** -24)


def uniforms(words: Sequence[int], double: bool) -> tuple[Any, Any]:
    """The two uniforms of one block: float64 from (w0, w1) and (w2, w3); float32 from w0 and w1."""
    if double:
        return np.float64(uniform_double(words[0], words[1])), np.float64(uniform_double(words[2], words[3]))
    return uniform_single(words[0]), uniform_single(words[1])


SERIES_TERMS = {np.float64: (11, 9), np.float32: (5, 6)}
"""Per float type, how many terms of atanh's series (the log) and of the cosine's and sine's reach its
precision on the ranges ``log`` and ``cos_two_pi`` reduce to."""
LN2 = {np.float64: (0.6931471805598903, 5.497923018708371e-14), np.float32: (0.693145751953125, 1.428606765330187e-06)}
"""ln 2 in two parts per float type: the first short enough that an exponent times it is exact."""


def _polynomial(z: Any, coefficients: list[float]) -> Any:
    """``c0 + c1 z + c2 z**2 + ...`` by Horner's rule, in ``z``'s float type."""
    kind = type(z)
    total = kind(coefficients[-1])
    for c in coefficients[-2::-1]:
        total = total * z + kind(c)
    return total


def log(t: Any) -> Any:
    """``log(t)`` for a numpy float ``t`` in (0, 1] as svod's draws compute it, from ``+ - * /`` alone (the same
    bits on every IEEE 754 device): t = m * 2**e with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh((m - 1) / (m +
    1)) by atanh's odd series, plus e ln 2 in two parts."""
    kind = type(t)
    m, e = np.frexp(t)
    if m < kind(math.sqrt(0.5)):
        m, e = m * kind(2.0), e - 1
    s = (m - kind(1.0)) / (m + kind(1.0))
    z = s * s
    series = _polynomial(z, [1 / (2 * k + 1) for k in range(1, SERIES_TERMS[kind][0] + 1)])
    exponent, (high, low) = kind(e), LN2[kind]
    return exponent * kind(high) + (exponent * kind(low) + (s + s * z * series) * kind(2.0))


def cos_two_pi(u: Any) -> Any:
    """``cos(2 pi u)`` for a numpy float ``u`` in [0, 1) as svod's draws compute it, from ``+ - *`` alone: in
    quarter ``q`` of the turn and fraction ``f`` of it (both exact), a cosine or sine of pi/2 f (of pi/2 (1 -
    f) past one half, swapped), by their series, signed by the quarter."""
    kind = type(u)
    quarter = u * kind(4.0)
    q = int(quarter)
    f = quarter - kind(q)
    turned = bool(f > kind(0.5))
    angle = (kind(1.0) - f if turned else f) * kind(math.pi / 2)
    z = angle * angle
    terms = SERIES_TERMS[kind][1]
    cos = _polynomial(z, [(-1) ** k / math.factorial(2 * k) for k in range(terms)])
    sin = angle * _polynomial(z, [(-1) ** k / math.factorial(2 * k + 1) for k in range(terms)])
    if turned:
        cos, sin = sin, cos
    return (cos, -sin, -cos, sin)[q]


def box_muller(u1: Any, u2: Any) -> Any:
    """A standard normal from two uniforms in [0, 1): ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)`` (``1 - u1`` is
    in (0, 1], exact, so the log is finite), with ``log`` and ``cos_two_pi``, in the uniforms' float type."""
    kind = type(u1)
    return np.sqrt(log(kind(1.0) - u1) * kind(-2.0)) * cos_two_pi(u2)


def exponential(u: Any) -> Any:
    """A standard exponential from a uniform in [0, 1): ``-log(1 - u)``, never log(0)."""
    kind = type(u)
    return -log(kind(1.0) - u)


def sort_key(w0: Any, w1: Any, wide: bool) -> Any:
    """A shuffle's sort key of one element (``np.random.permutation``): ``w0`` above ``w1``, a uint64, where
    integers are 64-bit; else ``w0``, a uint32. A permutation is the stable order of its elements' keys."""
    if wide:
        return (np.asarray(w0, np.uint64) << np.uint64(32)) | np.asarray(w1, np.uint64)
    return np.asarray(w0, np.uint64).astype(np.uint32)


def bounded(words: Sequence[int], span: int) -> int:
    """An integer in [0, span) for 1 <= span <= 2**32, by Lemire's multiply-shift: ``(w * span) >> 32`` of the
    first of the four words whose low product ``(w * span) mod 2**32`` is at least ``2**32 mod span`` (an
    accepted word gives each integer with the same probability); where none is, the last word's (so the
    result is biased with a probability below ``(span / 2**32) ** 4``: 2**-64 for a span up to 2**16). Any
    other span gives 0."""
    if not 1 <= span <= 1 << 32:
        return 0
    threshold = (1 << 32) % span
    for w in words[:3]:
        product = int(w) * span
        if product & MASK >= threshold:
            return product >> 32
    return (int(words[3]) * span) >> 32


# ---- the generator a kernel's function uses in plain Python ----------------------------------------------------

class PlainRandom:
    """``np.random`` as a kernel's function sees it in plain Python (``svod.frontend.oracle``): svod's
    generator, with the stream layout of ``svod.random``, instead of NumPy's. One object per launch: ``key``
    and ``launch`` are the launch's values from the process generator; ``double`` says whether floats are
    float64 (else float32), ``wide`` whether integers are int64 (else int32), as the device's are.

    It follows where the function is: ``prange`` (the function's ``svod.prange``) tells it when a nest opens
    and which work item runs, so each draw gets the block the kernel's draw at that place gets."""

    def __init__(self, key: int, launch: int, double: bool = True, wide: bool = True) -> None:
        self.key = key & MASK
        self.launch = launch & MASK
        self.double = double
        self.wide = wide
        self.ordinal = 0
        """Draws so far in the current stream."""
        self.nests = 0
        """The nests opened so far (since a seed in serial code)."""
        self.stream = 0
        """0 for the launch's serial code; inside a nest, the count of nests with it."""
        self.levels: list[list[int]] = []
        """Per open ``prange`` level, outermost first: [its number of turns, the turn running]."""

    # ---- where the function is --------------------------------------------------------------------------

    def prange(self, *bounds: Any) -> Iterator[np.int64]:
        """``svod.prange`` as plain Python: ``range`` of int64 values, each turn a work item with a stream of its
        own (the ordinal from 0, the key the nest opened with)."""
        turns = range(*(operator.index(b) for b in bounds))  # Python's bounds: no NumPy bool, no float
        saved = (self.key, self.launch, self.ordinal, self.stream)
        if not self.levels:  # a nest opens: its stream is the count of nests
            self.nests = (self.nests + 1) & MASK
            self.stream = self.nests
        opened = (self.key, self.launch, self.stream)
        level = [len(turns), 0]
        self.levels.append(level)
        try:
            for turn, value in enumerate(turns):
                level[1] = turn
                self.key, self.launch, self.stream = opened
                self.ordinal = 0
                yield np.int64(value)
        finally:
            self.levels.pop()
            self.key, self.launch, self.ordinal, self.stream = saved

    def element(self) -> int:
        """The running work item: its linear index in the open nest's grid (0 in serial code)."""
        index = 0
        for turns, turn in self.levels:
            index = index * turns + turn
        return index

    def block(self) -> tuple[int, int, int, int]:
        """The next draw's words: key (seed, launch), counter (ordinal, element low, element high, stream)."""
        element = self.element()
        words = philox4x32((self.ordinal, element & MASK, (element >> 32) & MASK, self.stream),
                           (self.key, self.launch))
        self.ordinal = (self.ordinal + 1) & MASK
        return words

    # ---- np.random's names ------------------------------------------------------------------------------

    def seed(self, seed: Any) -> None:
        """``np.random.seed(s)``: the key becomes ``s`` (its low 32 bits), the launch 0, and the stream starts
        again from its first draw."""
        self.key = int(seed) & MASK
        self.launch = 0
        self.ordinal = 0
        if not self.levels:
            self.nests = 0

    def random(self, size: Any = None) -> Any:
        """``np.random.random()``: a float64 in [0, 1) (float32 where floats are float32); with ``size``, an
        array of them (``array``)."""
        if size is not None:
            return self.array(size, self.random)
        words = self.block()
        return np.float64(uniform_double(words[0], words[1])) if self.double else uniform_single(words[0])

    random_sample = random

    def rand(self, *dims: Any) -> Any:
        """``np.random.rand(d0, d1, ...)``: ``random((d0, d1, ...))``; ``rand()``: one number."""
        return self.random(dims or None)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        """``np.random.uniform(low, high)``: ``low + (high - low) * random()``, in the draw's float type."""
        if size is not None:
            return self.array(size, lambda: self.uniform(low, high))
        u = self.random()
        kind = type(u)
        return kind(kind(low) + kind(kind(high) - kind(low)) * u)

    def standard_normal(self, size: Any = None) -> Any:
        """A standard normal: Box-Muller on the block's two uniforms (``uniforms``)."""
        if size is not None:
            return self.array(size, self.standard_normal)
        return box_muller(*uniforms(self.block(), self.double))

    def randn(self, *dims: Any) -> Any:
        """``np.random.randn(d0, d1, ...)``: ``standard_normal((d0, d1, ...))``; ``randn()``: one number."""
        return self.standard_normal(dims or None)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        """``np.random.normal(loc, scale)``: ``loc + scale * standard_normal()``."""
        if size is not None:
            return self.array(size, lambda: self.normal(loc, scale))
        z = self.standard_normal()
        kind = type(z)
        return kind(kind(loc) + kind(scale) * z)

    def standard_exponential(self, size: Any = None) -> Any:
        if size is not None:
            return self.array(size, self.standard_exponential)
        return exponential(self.random())

    def exponential(self, scale: Any = 1.0, size: Any = None) -> Any:
        """``np.random.exponential(scale)``: ``scale * -log(1 - random())``."""
        if size is not None:
            return self.array(size, lambda: self.exponential(scale))
        e = self.standard_exponential()
        kind = type(e)
        return kind(kind(scale) * e)

    def randint(self, low: Any, high: Any = None, size: Any = None) -> Any:
        """``np.random.randint(low, high)`` (or ``randint(high)``: from 0): an integer in [low, high). An empty
        range raises NumPy's ``ValueError``, and so does one wider than a kernel draws from (2**32 integers;
        2**31 - 1 with 32-bit integers), as a kernel's run fails (``svod.errors.RequirementError``)."""
        if size is not None:
            return self.array(size, lambda: self.randint(low, high), integers=True)
        low, high = (0, low) if high is None else (low, high)
        start, stop = int(low), int(high)
        if stop <= start:
            raise ValueError("low >= high")
        if stop - start > (1 << 32 if self.wide else (1 << 31) - 1):
            raise ValueError(f"randint({start}, {stop}) draws from more integers than a kernel draws from")
        kind = np.int64 if self.wide else np.int32
        return kind(start + bounded(self.block(), stop - start))

    def permutation(self, x: Any) -> Any:
        """``np.random.permutation(n)``: the order of ``n`` sort keys (``sort_key``) drawn as an array draw
        draws them, stable; of an array, its elements (rows) in that order, a new array."""
        if isinstance(x, (int, np.integer)):
            return self.order(int(x))
        array = np.asarray(x)
        return array[self.order(len(array))]

    def shuffle(self, x: np.ndarray) -> None:
        """``np.random.shuffle(x)``: ``x`` (its rows) in the order of ``permutation``, in place."""
        x[...] = self.permutation(x)

    # ---- arrays of draws ----------------------------------------------------------------------------------

    def array(self, size: Any, one: Callable[[], Any], integers: bool = False) -> np.ndarray:
        """An array of draws, ``size`` as NumPy takes it (an int or a tuple of them), as a ``prange`` over its
        elements (C order) draws them: a nest of its own, each element ``one`` draw of its work item."""
        shape = tuple(int(d) for d in size) if isinstance(size, tuple) else (int(size),)
        values = [one() for _ in self.prange(math.prod(shape))]
        if integers:
            dtype: type = np.int64 if self.wide else np.int32
        else:
            dtype = np.float64 if self.double else np.float32
        return np.array(values, dtype).reshape(shape)

    def order(self, n: int) -> np.ndarray:
        """The permutation of ``n`` elements that their sort keys give (``sort_key``, stable), the keys drawn
        as ``array`` draws an array: a nest of its own, element ``e``'s words its work item's first block."""
        self.nests = (self.nests + 1) & MASK
        element = np.arange(n, dtype=np.uint64)
        words = philox4x32((0, element & MASK, element >> 32, self.nests), (self.key, self.launch))
        order = np.argsort(sort_key(words[0], words[1], self.wide), kind="stable")
        return order.astype(np.int64 if self.wide else np.int32)


__all__ = ["M0", "M1", "MASK", "ROUNDS", "W0", "W1", "PlainRandom", "bounded", "box_muller", "cos_two_pi",
           "exponential", "log", "philox4x32", "sort_key", "uniform_double", "uniform_single", "uniforms"]
