"""The benchmark suite as a numba user writes it: ``@njit(parallel=True)`` loops over ``prange``, each writing
its result into ``out``. Importing this module needs numba (extra ``bench``); functions compile on first
call, which the benchmark's warm-up absorbs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange

jit = njit(parallel=True, cache=False)


@jit
def softmax(out: Any, x: Any) -> None:
    rows, cols = x.shape
    for r in prange(rows):
        top = -np.inf
        for c in range(cols):
            top = max(top, x[r, c])
        total = np.float32(0.0)
        for c in range(cols):
            e = np.exp(x[r, c] - top)
            out[r, c] = e
            total += e
        for c in range(cols):
            out[r, c] /= total


@jit
def layernorm(out: Any, x: Any) -> None:
    rows, cols = x.shape
    for r in prange(rows):
        mean = np.float32(0.0)
        for c in range(cols):
            mean += x[r, c]
        mean /= cols
        var = np.float32(0.0)
        for c in range(cols):
            var += (x[r, c] - mean) ** 2
        scale = np.float32(1.0) / np.sqrt(var / cols + np.float32(1e-5))
        for c in range(cols):
            out[r, c] = (x[r, c] - mean) * scale


@jit
def conv2d(out: Any, x: Any, w: Any) -> None:
    channels, size, _ = x.shape
    for o in prange(channels):
        for y in range(size):
            for xx in range(size):
                acc = np.float32(0.0)
                for ci in range(channels):
                    for ky in range(3):
                        iy = y + ky - 1
                        if 0 <= iy < size:
                            for kx in range(3):
                                ix = xx + kx - 1
                                if 0 <= ix < size:
                                    acc += x[ci, iy, ix] * w[o, ci, ky, kx]
                out[o, y, xx] = acc


@jit
def gather(out: Any, table: Any, ids: Any) -> None:
    for r in prange(ids.shape[0]):
        row = ids[r]
        for c in range(table.shape[1]):
            out[r, c] = table[row, c]


@jit
def histogram(counts: Any, values: Any) -> None:
    """One private histogram per thread, summed at the end: numba has no atomics on the CPU."""
    workers = get_num_threads()
    partial = np.zeros((workers, counts.shape[0]), np.int32)
    chunk = (values.shape[0] + workers - 1) // workers
    for t in prange(workers):
        for i in range(t * chunk, min(values.shape[0], (t + 1) * chunk)):
            partial[t, values[i]] += 1
    counts[:] = partial.sum(axis=0)


@jit
def cumsum(out: Any, x: Any) -> None:
    rows, cols = x.shape
    for r in prange(rows):
        running = np.float32(0.0)
        for c in range(cols):
            running += x[r, c]
            out[r, c] = running


@jit
def transpose(out: Any, x: Any) -> None:
    rows, cols = x.shape
    for r in prange(rows):
        for c in range(cols):
            out[c, r] = x[r, c]


@jit
def matmul(out: Any, a: Any, b: Any) -> None:
    n, depth = a.shape
    for i in prange(n):
        for j in range(b.shape[1]):
            out[i, j] = 0.0
        for r in range(depth):
            left = a[i, r]
            for j in range(b.shape[1]):
                out[i, j] += left * b[r, j]


@jit
def batched_matmul(out: Any, a: Any, b: Any) -> None:
    batch, n, depth = a.shape
    for s in prange(batch):
        for i in range(n):
            for j in range(b.shape[2]):
                out[s, i, j] = 0.0
            for r in range(depth):
                left = a[s, i, r]
                for j in range(b.shape[2]):
                    out[s, i, j] += left * b[s, r, j]


@jit
def matvec(out: Any, a: Any, x: Any) -> None:
    rows, cols = a.shape
    for i in prange(rows):
        acc = np.float32(0.0)
        for j in range(cols):
            acc += a[i, j] * x[j]
        out[i] = acc


@jit
def _dense(out: Any, x: Any, w: Any, bias: Any, relu: bool) -> None:
    for i in prange(x.shape[0]):
        for j in range(w.shape[1]):
            out[i, j] = bias[j]
        for r in range(x.shape[1]):
            left = x[i, r]
            for j in range(w.shape[1]):
                out[i, j] += left * w[r, j]
        if relu:
            for j in range(w.shape[1]):
                out[i, j] = max(out[i, j], np.float32(0.0))


def mlp(out: Any, x: Any, w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any) -> None:
    """Three dense layers, ReLU between them; the hidden activations are allocated per call, as a numba
    user's forward pass does."""
    h1 = np.empty((x.shape[0], w1.shape[1]), np.float32)
    h2 = np.empty((x.shape[0], w2.shape[1]), np.float32)
    _dense(h1, x, w1, b1, True)
    _dense(h2, h1, w2, b2, True)
    _dense(out, h2, w3, b3, False)


@jit
def attention(out: Any, q: Any, k: Any, v: Any) -> None:
    length, width = q.shape
    scale = np.float32(1.0 / math.sqrt(width))
    for i in prange(length):
        scores = np.empty(length, np.float32)
        top = -np.inf
        for j in range(length):
            s = np.float32(0.0)
            for d in range(width):
                s += q[i, d] * k[j, d]
            scores[j] = s * scale
            top = max(top, scores[j])
        total = np.float32(0.0)
        for e in range(width):
            out[i, e] = 0.0
        for j in range(length):
            p = np.exp(scores[j] - top)
            total += p
            for e in range(width):
                out[i, e] += p * v[j, e]
        for e in range(width):
            out[i, e] /= total


@jit
def nbody(acc: Any, pos: Any, mass: Any) -> None:
    n = pos.shape[0]
    for i in prange(n):
        ax = np.float32(0.0)
        ay = np.float32(0.0)
        az = np.float32(0.0)
        for j in range(n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            inv = np.float32(1.0) / np.sqrt(dx * dx + dy * dy + dz * dz + np.float32(1e-3))
            strength = mass[j] * inv * inv * inv
            ax += dx * strength
            ay += dy * strength
            az += dz * strength
        acc[i, 0] = ax
        acc[i, 1] = ay
        acc[i, 2] = az


@jit
def resize(out: Any, image: Any) -> None:
    height, width = image.shape
    for y in prange(out.shape[0]):
        for x in range(out.shape[1]):
            sy = max((y + 0.5) * height / out.shape[0] - 0.5, 0.0)
            sx = max((x + 0.5) * width / out.shape[1] - 0.5, 0.0)
            y0 = max(min(int(sy), height - 1), 0)
            x0 = max(min(int(sx), width - 1), 0)
            y1 = min(y0 + 1, height - 1)
            x1 = min(x0 + 1, width - 1)
            fy = sy - y0
            fx = sx - x0
            top = image[y0, x0] * (1.0 - fx) + image[y0, x1] * fx
            bottom = image[y1, x0] * (1.0 - fx) + image[y1, x1] * fx
            out[y, x] = top * (1.0 - fy) + bottom * fy


@jit
def black_scholes(call: Any, price: Any, strike: Any, years: Any) -> None:
    for i in prange(price.shape[0]):
        root = 0.3 * math.sqrt(years[i])
        d1 = (math.log(price[i] / strike[i]) + (0.02 + 0.5 * 0.3 * 0.3) * years[i]) / root
        d2 = d1 - root
        up = 0.5 * (1.0 + math.erf(d1 * 0.7071067811865476))
        down = 0.5 * (1.0 + math.erf(d2 * 0.7071067811865476))
        call[i] = price[i] * up - strike[i] * math.exp(-0.02 * years[i]) * down


@jit
def mandelbrot(counts: Any) -> None:
    height, width = counts.shape
    for y in prange(height):
        for x in range(width):
            cr = -2.0 + 3.0 * x / width
            ci = -1.5 + 3.0 * y / height
            zr = 0.0
            zi = 0.0
            k = 0
            for _ in range(100):
                if zr * zr + zi * zi <= 4.0:
                    zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                    k += 1
            counts[y, x] = k
