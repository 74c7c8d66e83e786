"""``np.linalg.qr``, ``eigh`` and ``svd`` of an n x n float64 matrix inside ``@svod.jit`` beside NumPy's and
numba's (both LAPACK): the least CPU time (``time.process_time``) of a few calls each, after one that compiles,
so that a shared host's load counts less than it would in wall time.

    OPENBLAS_NUM_THREADS=1 SVOD_THREADS=1 NUMBA_NUM_THREADS=1 python -m benchmarks.linalg_factorisations [n] [calls]

Give every library one thread: CPU time then measures the work each does, not how many cores it found.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import svod
from benchmarks.peers import NOT_INSTALLED


def qr(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q, r = np.linalg.qr(a)
    return q, r


def eigh(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w, v = np.linalg.eigh(a)
    return w, v


def svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u, s, vh


FUNCTIONS: dict[str, Callable[[np.ndarray], Any]] = {"qr": qr, "eigh": eigh, "svd": svd}
CHECKED = {"qr": 0, "eigh": 0, "svd": 1}
"""The result each is checked by against NumPy's: Q, the eigenvalues, the singular values (the others'
signs are each library's choice)."""


def least_cpu_seconds(call: Callable[[], Any], calls: int) -> float:
    """The least CPU time of ``calls`` calls of ``call``, after one that compiles and warms the caches."""
    call()
    times = []
    for _ in range(calls):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return min(times)


def main(n: int = 256, calls: int = 3) -> dict[str, dict[str, float]]:
    x = np.random.default_rng(0).standard_normal((n, n))
    a = (x + x.T) / 2  # symmetric, so that eigh's matrix is every function's
    try:
        import numba
    except ImportError:
        numba = None
        print(f"numba: {NOT_INSTALLED}")
    found: dict[str, dict[str, float]] = {}
    for name, fn in FUNCTIONS.items():
        jitted = svod.jit(fn)
        if not np.allclose(jitted(a)[CHECKED[name]], fn(a)[CHECKED[name]]):
            raise SystemExit(f"svod's {name} disagrees with NumPy's")
        times = {"svod": least_cpu_seconds(lambda: jitted(a), calls),  # noqa: B023 (called at once)
                 "numpy": least_cpu_seconds(lambda: fn(a), calls)}  # noqa: B023
        if numba is not None:
            compiled = numba.njit(fn)
            times["numba"] = least_cpu_seconds(lambda: compiled(a), calls)  # noqa: B023
        found[name] = times
        print(f"n={n} {name:5s} " + "  ".join(f"{lib} {seconds * 1e3:9.2f} ms" for lib, seconds in times.items()))
    return found


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
