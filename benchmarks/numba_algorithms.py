"""The algorithms of ``benchmarks.algorithms`` as a numba user writes them: the loops of their definitions,
``prange`` over what one step may do at once. Importing this module needs numba (extra ``bench``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=False)
def floyd_warshall(d: Any) -> None:
    n = d.shape[0]
    for k in range(n):
        for i in prange(n):
            through = d[i, k]
            for j in range(n):
                d[i, j] = min(d[i, j], through + d[k, j])


@njit(parallel=True, cache=False)
def jacobi2d(a: Any, b: Any, steps: int) -> None:
    n = a.shape[0]
    for _ in range(steps):
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                b[i, j] = 0.2 * (a[i, j] + a[i, j - 1] + a[i, j + 1] + a[i + 1, j] + a[i - 1, j])
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                a[i, j] = 0.2 * (b[i, j] + b[i, j - 1] + b[i, j + 1] + b[i + 1, j] + b[i - 1, j])


@njit(cache=False)
def nussinov(seq: Any, table: Any) -> None:
    n = seq.size
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            if j - 1 >= 0:
                table[i, j] = max(table[i, j], table[i, j - 1])
            if i + 1 < n:
                table[i, j] = max(table[i, j], table[i + 1, j])
            if j - 1 >= 0 and i + 1 < n:
                if i < j - 1:
                    pair = 1 if seq[i] + seq[j] == 3 else 0
                    table[i, j] = max(table[i, j], table[i + 1, j - 1] + pair)
                else:
                    table[i, j] = max(table[i, j], table[i + 1, j - 1])
            for k in range(i + 1, j):
                table[i, j] = max(table[i, j], table[i, k] + table[k + 1, j])


@njit(cache=False)
def durbin(r: Any, y: Any) -> None:
    n = r.size
    z = np.empty(n)
    y[0] = -r[0]
    beta = 1.0
    alpha = -r[0]
    for k in range(1, n):
        beta = (1 - alpha * alpha) * beta
        total = 0.0
        for i in range(k):
            total += r[k - i - 1] * y[i]
        alpha = -(r[k] + total) / beta
        for i in range(k):
            z[i] = y[i] + alpha * y[k - i - 1]
        for i in range(k):
            y[i] = z[i]
        y[k] = alpha
