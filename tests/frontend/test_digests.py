"""The digest a tape keeps of a large array (``svod.frontend.digests``): the two sums it is documented to be, as
plain Python computes them word by word, over sizes around its blocks and a tail of bytes; and changed by every
small change a tape must see: one bit anywhere, two elements swapped, two signs flipped (which a plain sum of the
words would miss), a NaN's payload, a zero's sign."""

from __future__ import annotations

import numpy as np
import pytest

from svod.frontend.digests import BLOCK_WORDS, digest

MASK = (1 << 32) - 1


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK
    return h ^ (h >> 16)


def _sums(data: bytes) -> tuple[int, int]:
    """The digest's two sums, one word at a time in plain Python integers."""
    first = second = 0
    for position in range(len(data) // 4):
        mixed = _fmix(int.from_bytes(data[4 * position:4 * position + 4], "little") ^ (position & MASK))
        first += mixed
        second += mixed ^ (mixed >> 7)
    return first & MASK, second & MASK


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 31, 4 * BLOCK_WORDS - 4, 4 * BLOCK_WORDS, 4 * BLOCK_WORDS + 7,
                                  8 * BLOCK_WORDS + 12])
def test_a_digest_is_its_two_sums_of_mixed_words_and_its_tail(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    found = digest(data)
    assert found.sums == _sums(data.tobytes())
    assert found.tail == data.tobytes()[size // 4 * 4:]
    assert (found.shape, found.dtype) == ((size,), "|u1")


def test_no_bit_of_one_sum_follows_from_the_other():
    """Each bit of ``first ^ second`` varies over random arrays: the two sums hold 64 bits between them, not
    fewer (the second sum through ``h ^ (h << 7)`` had the first's low 7 bits)."""
    tied = (1 << 32) - 1
    pattern = None
    for seed in range(16):
        data = np.random.default_rng(seed).integers(0, 256, 4 * 1000, dtype=np.uint8)
        first, second = digest(data).sums
        pattern = first ^ second if pattern is None else pattern
        tied &= ~((first ^ second) ^ pattern)
    assert tied == 0, f"bits {tied:#010x} of first ^ second are the same on every array"


def _changes(n: int) -> list[tuple[str, object]]:
    """Small changes of a float64 array of ``n`` elements, each a function of a copy."""
    def bit(element: int, which: int):  # type: ignore[no-untyped-def]
        def flip(x: np.ndarray) -> None:
            x.view(np.uint64)[element] ^= np.uint64(1 << which)
        return flip

    def swap(x: np.ndarray) -> None:
        x[[1, n - 2]] = x[[n - 2, 1]]

    def signs(x: np.ndarray) -> None:
        x[[0, BLOCK_WORDS // 2]] *= -1.0

    def payload(x: np.ndarray) -> None:
        x.view(np.uint64)[5] = np.float64(np.nan).view(np.uint64) | np.uint64(1)

    def zero_sign(x: np.ndarray) -> None:
        x[7] = -0.0

    found = [(f"bit {which} of element {element}", bit(element, which))
             for element in (0, BLOCK_WORDS // 2 - 1, BLOCK_WORDS // 2, n - 1) for which in (0, 31, 32, 63)]
    return [*found, ("two swapped", swap), ("two signs flipped", signs), ("a NaN's payload", payload),
            ("a zero's sign", zero_sign)]


N = 3 * BLOCK_WORDS + 5
"""A float64 array over six blocks of words and a part of one more."""


@pytest.mark.parametrize(("name", "change"), _changes(N), ids=[name for name, _ in _changes(N)])
def test_every_small_change_changes_the_digest(name, change):
    x = np.linspace(-1.0, 1.0, N)
    x[5], x[7] = np.nan, 0.0
    before = digest(x)
    changed = x.copy()
    change(changed)
    assert not np.array_equal(changed.view(np.uint64), x.view(np.uint64))
    assert digest(changed) != before
    assert digest(x.copy()) == before


def test_a_view_s_digest_is_that_of_its_elements_in_order():
    x = np.arange(24.0).reshape(4, 6)
    assert digest(x[:, 1::2]) == digest(np.ascontiguousarray(x[:, 1::2]))
    assert digest(x.T) == digest(x.T.copy())
    assert digest(x.T) != digest(x)
    assert digest(x.reshape(6, 4)) != digest(x)  # the same bytes, another shape
