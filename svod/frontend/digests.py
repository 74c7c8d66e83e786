"""The digest of an array's bits, which a tape keeps of a large array in place of a copy (``svod.frontend.tape``)
to find it changed outside its calls: computing one reads the array once, where a copy and a comparison move it
three times and hold a second array as large.

A digest is two sums, modulo 2**32, over the array's 32-bit words (its bytes past the last whole word are kept as
they are). Each word, its position xored in, goes through MurmurHash3's finalizer (``fmix32``: xor-shifts and two
multiplies, a bijection with full avalanche); the first sum adds what comes out, the second the same through an
xorshift, ``h ^ (h >> 7)`` (a bijection, and not linear over the sum's adds; an xor of two rotations, as SHA-2's
Σ functions are, is one too, and took a third of the digest's time; a shift left would tie the low 7 bits of
the two sums). So changing one word always changes both sums, moving one word to another position changes them,
and changes of several words leave both as they were about once in 2**64. The two sums share one finalizer
rather than each taking its own: a vector multiply of 32-bit lanes is the slowest step. A svod kernel computes
them, the words in blocks the CPU's threads share, the position a 32-bit counter beside the index."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from svod.frontend.pykernel import Kernel
from svod.frontend.pylang import func, prange
from svod.runtime.taping import unrecorded

BLOCK_WORDS = 1 << 14
"""The words each work item of the digest adds up: ``DIGEST_SUMS``' blocks."""


@func
def _finalized(h):  # type: ignore[no-untyped-def]
    """MurmurHash3's ``fmix32`` of a 32-bit word: each step, and so the whole, a bijection."""
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@func
def _spread(h):  # type: ignore[no-untyped-def]
    """``h`` xored with itself shifted right by 7 bits: a bijection (each bit from the highest down is found
    again from those above it)."""
    return h ^ (h >> np.uint32(7))


def _digest_sums(words, sums):  # type: ignore[no-untyped-def]
    """``sums[b, 0]`` and ``sums[b, 1]``: block ``b``'s two sums of its mixed words."""
    for b in prange(sums.shape[0]):
        first = np.uint32(0)
        second = np.uint32(0)
        at = np.uint32(b * BLOCK_WORDS)
        for k in range(b * BLOCK_WORDS, min(b * BLOCK_WORDS + BLOCK_WORDS, words.shape[0])):
            mixed = _finalized(words[k] ^ at)
            first += mixed
            second += _spread(mixed)
            at += np.uint32(1)
        sums[b, 0] = first
        sums[b, 1] = second


DIGEST_SUMS = Kernel(_digest_sums, name="digest_sums")


@dataclass(frozen=True)
class Digest:
    """What ``digest`` keeps of an array: its shape, dtype, the two sums of its words and its bytes past them."""

    shape: tuple[int, ...]
    dtype: str
    sums: tuple[int, int]
    tail: bytes


def digest(array: np.ndarray) -> Digest:
    """The digest of ``array``'s elements in C order (of a copy, where it is not C-contiguous), computed on the CPU
    outside any tape's recording."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    whole = flat.size // 4 * 4
    words = flat[:whole].view(np.uint32)
    sums = (0, 0)
    if words.size:
        blocks = np.empty((-(-words.size // BLOCK_WORDS), 2), np.uint32)
        with unrecorded():
            DIGEST_SUMS(words, blocks, device="CPU")
        sums = (int(blocks[:, 0].sum(dtype=np.uint32)), int(blocks[:, 1].sum(dtype=np.uint32)))
    return Digest(array.shape, array.dtype.str, sums, flat[whole:].tobytes())


__all__ = ["BLOCK_WORDS", "Digest", "digest"]
