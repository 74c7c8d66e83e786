"""``np.linalg.solve`` of an n x n float64 system inside ``@svod.jit`` beside NumPy's and numba's (both LAPACK):
the best of a few calls each, after one that compiles.

    python -m benchmarks.linalg_solve [n] [calls]

On a shared host give every library the same threads (``OPENBLAS_NUM_THREADS``, ``SVOD_THREADS``,
``NUMBA_NUM_THREADS``) and compare the best figures of several runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import svod
from benchmarks.peers import NOT_INSTALLED


def solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.solve(a, b)


solved = svod.jit(solve)


def best_seconds(call: Callable[[], Any], calls: int) -> float:
    """The fastest of ``calls`` calls of ``call``, after one that compiles and warms the caches."""
    call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main(n: int = 512, calls: int = 5) -> dict[str, float]:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal(n)
    if not np.allclose(solved(a, b), np.linalg.solve(a, b)):
        raise SystemExit("svod's solve disagrees with NumPy's")
    found = {"svod": best_seconds(lambda: solved(a, b), calls),
             "numpy": best_seconds(lambda: np.linalg.solve(a, b), calls)}
    try:
        import numba
    except ImportError:
        print(f"numba: {NOT_INSTALLED}")
    else:
        numba_solved = numba.njit(solve)
        found["numba"] = best_seconds(lambda: numba_solved(a, b), calls)
    for name, seconds in found.items():
        print(f"{name:6s} {seconds * 1e3:8.2f} ms  ({seconds / found['svod']:.2f}x svod's time)")
    return found


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
