"""NumPy code that draws random numbers, gathers, masks and sorts, as numba users write it inside ``@njit``,
under ``@svod.jit`` beside the same text under ``@numba.njit(parallel=True)`` and NumPy running it as plain
Python (``svod bench --suite numpy``: ``numpy.<name>_ms``, timed as ``benchmarks.jit_programs``' programs are).

- ``monte_carlo_pi``: pi from ``points`` points in the unit square, two draws each (10**8 draws in all at the
  full size); ``random_walk``: ``walkers`` walkers, each moved -1 or +1 at each of ``steps`` steps (one draw a
  walker a step). Each library draws with its own generator (svod's Philox, numba's per-thread Mersenne
  Twisters, NumPy's), so the answers are compared by a statistic: pi's estimate, and the walkers' mean squared
  distance (``steps`` for a fair walk).
- ``equalize``: a histogram equalisation of an 8-bit image through its table (``lut[img]``); ``masked_clip``:
  ``x[x < 0] = 0``; ``compaction``: the elements under a mask (``x[mask]``); ``sort``, ``argsort`` and
  ``median`` of float64 numbers, each compared exactly with NumPy's answer (``argsort``'s numbers are distinct:
  NumPy's default sort is not stable, so tied numbers' order is its own); the same of float32 and of int32
  numbers (``sort_float32``, ``argsort_int32``, ...): other widths of keys, which NumPy sorts by other code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.jit_programs import Program, array_program

MONTE_CARLO_PI = """
def monte_carlo_pi(points):
    inside = (np.random.random(points) ** 2 + np.random.random(points) ** 2 < 1.0).sum()
    return 4.0 * inside / points
"""

RANDOM_WALK = """
def random_walk(positions, steps):
    for _ in range(steps):
        positions += np.where(np.random.random(positions.shape[0]) < 0.5, -1.0, 1.0)
    return positions
"""

EQUALIZE = """
def equalize(img, lut):
    return lut[img]
"""

MASKED_CLIP = """
def masked_clip(x):
    x[x < 0] = 0
    return x
"""

COMPACTION = """
def compaction(x, mask):
    return x[mask]
"""

SORT = """
def sort(x):
    return np.sort(x)
"""

ARGSORT = """
def argsort(x):
    return np.argsort(x)
"""

MEDIAN = """
def median(x):
    return np.median(x)
"""


def normals(n: int) -> tuple[Any, ...]:
    """``n`` float64 numbers of a standard normal, a few of them equal (ties) and -0.0 and 0.0 among them."""
    x = np.random.default_rng(21).standard_normal(n)
    x[: n // 100] = np.round(x[: n // 100], 1)
    x[1: n // 1000: 2] = -0.0
    return (x,)


def typed(dtype: str, distinct: bool) -> Callable[[int], tuple[Any, ...]]:
    """``n`` numbers of ``dtype``: for floats, normals as ``normals`` draws them; for ints, the whole range
    (ties among them); where ``distinct``, a shuffle of ``n`` distinct numbers of either sign."""
    def make(n: int) -> tuple[Any, ...]:
        rng = np.random.default_rng(25)
        if distinct:
            return ((rng.permutation(n) - n // 2).astype(dtype),)
        if np.dtype(dtype).kind == "f":
            return (normals(n)[0].astype(dtype),)
        info = np.iinfo(dtype)
        return (rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True),)
    return make


def typed_programs() -> list[Program]:
    """``sort``, ``argsort`` and ``median`` of float32 and int32 numbers, each a program of its own name."""
    made = []
    for dtype in ("float32", "int32"):
        for call in ("sort", "argsort", "median"):
            name = f"{call}_{dtype}"
            made.append(array_program(name, f"\ndef {name}(x):\n    return np.{call}(x)\n",
                                      typed(dtype, call == "argsort"), full=(10_000_000,), quick=(1_000_000,),
                                      small=(101,), size_text=f"{{0}} {dtype}"))
    return made


def image(height: int, width: int) -> tuple[Any, ...]:
    """An 8-bit image of a dark scene and the table that equalises its histogram (its cumulative histogram
    stretched to 0..255)."""
    pixels = np.random.default_rng(22).beta(2.0, 5.0, (height, width))
    img = (pixels * 255).astype(np.uint8)
    cdf = np.cumsum(np.bincount(img.ravel(), minlength=256))
    lowest = cdf[cdf > 0][0] if cdf[-1] else 0
    lut = ((cdf - lowest) * 255 // max(int(cdf[-1] - lowest), 1)).clip(0, 255).astype(np.uint8)
    return img, lut


NUMPY_PROGRAMS = [
    array_program("monte_carlo_pi", MONTE_CARLO_PI, lambda points: (points,), full=(50_000_000,),
                  quick=(5_000_000,), small=(20_000,), size_text="{0} points", tolerance=0.05,
                  statistic=lambda estimate: np.array([estimate])),
    array_program("random_walk", RANDOM_WALK, lambda walkers, steps: (np.zeros(walkers), steps),
                  full=(1_000_000, 100), quick=(200_000, 50), small=(20_000, 5), size_text="{0} walkers, {1} steps",
                  tolerance=0.05, statistic=lambda positions: np.array([np.mean(positions ** 2)])),
    array_program("equalize", EQUALIZE, image, full=(4000, 2500), quick=(1000, 1000), small=(7, 13),
                  size_text="{0}x{1} uint8"),
    array_program("masked_clip", MASKED_CLIP, normals, full=(10_000_000,), quick=(1_000_000,), small=(101,),
                  size_text="{0} float64"),
    array_program("compaction", COMPACTION, lambda n: (*normals(n), np.random.default_rng(23).random(n) < 0.5),
                  full=(10_000_000,), quick=(1_000_000,), small=(101,), size_text="{0} float64, half kept"),
    array_program("sort", SORT, normals, full=(10_000_000,), quick=(1_000_000,), small=(101,),
                  size_text="{0} float64"),
    array_program("argsort", ARGSORT, lambda n: (np.random.default_rng(24).standard_normal(n),),
                  full=(10_000_000,), quick=(1_000_000,), small=(101,), size_text="{0} float64"),
    array_program("median", MEDIAN, normals, full=(10_000_000,), quick=(1_000_000,), small=(101,),
                  size_text="{0} float64"),
    *typed_programs(),
]
"""The programs, by the order ``svod bench --suite numpy`` reports them."""
