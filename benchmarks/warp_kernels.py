"""The benchmark suite as a user of NVIDIA Warp writes it for Warp's CPU device: a ``@wp.kernel`` per family,
one thread per row (or element) by ``wp.tid()``, over the numpy arrays'
memory. Importing this module needs warp-lang (extra ``bench``); a kernel compiles on
its first launch, which the benchmark's warm-up absorbs. Warp runs a CPU launch's threads one after another,
on one core: that is the peer users get.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import warp as wp

wp.config.log_level = wp.LOG_WARNING  # not a banner and a line per module load on stdout
wp.init()

A1 = wp.array(dtype=Any)
A2 = wp.array2d(dtype=Any)
A3 = wp.array3d(dtype=Any)
A4 = wp.array4d(dtype=Any)


@wp.kernel
def softmax(out: A2, x: A2):
    r = wp.tid()
    top = x[r, 0]
    for c in range(1, x.shape[1]):
        top = wp.max(top, x[r, c])
    total = x.dtype(0.0)
    for c in range(x.shape[1]):
        e = wp.exp(x[r, c] - top)
        out[r, c] = e
        total += e
    for c in range(x.shape[1]):
        out[r, c] = out[r, c] / total


@wp.kernel
def layernorm(out: A2, x: A2):
    r = wp.tid()
    cols = x.shape[1]
    mean = x.dtype(0.0)
    for c in range(cols):
        mean += x[r, c]
    mean = mean / x.dtype(cols)
    var = x.dtype(0.0)
    for c in range(cols):
        var += (x[r, c] - mean) * (x[r, c] - mean)
    scale = x.dtype(1.0) / wp.sqrt(var / x.dtype(cols) + x.dtype(1e-5))
    for c in range(cols):
        out[r, c] = (x[r, c] - mean) * scale


@wp.kernel
def conv2d(out: A3, x: A3, w: A4):
    o, y, xx = wp.tid()
    size = x.shape[1]
    acc = x.dtype(0.0)
    for ci in range(x.shape[0]):
        for ky in range(3):
            iy = y + ky - 1
            if iy >= 0 and iy < size:
                for kx in range(3):
                    ix = xx + kx - 1
                    if ix >= 0 and ix < size:
                        acc += x[ci, iy, ix] * w[o, ci, ky, kx]
    out[o, y, xx] = acc


@wp.kernel
def gather(out: A2, table: A2, ids: A1):
    r = wp.tid()
    row = int(ids[r])
    for c in range(table.shape[1]):
        out[r, c] = table[row, c]


@wp.kernel
def histogram(counts: A1, values: A1):
    i = wp.tid()
    wp.atomic_add(counts, int(values[i]), counts.dtype(1))


@wp.kernel
def cumsum(out: A2, x: A2):
    r = wp.tid()
    running = x.dtype(0.0)
    for c in range(x.shape[1]):
        running += x[r, c]
        out[r, c] = running


@wp.kernel
def transpose(out: A2, x: A2):
    r, c = wp.tid()
    out[c, r] = x[r, c]


@wp.kernel
def matmul(out: A2, a: A2, b: A2):
    i, j = wp.tid()
    acc = a.dtype(0.0)
    for r in range(a.shape[1]):
        acc += a[i, r] * b[r, j]
    out[i, j] = acc


@wp.kernel
def batched_matmul(out: A3, a: A3, b: A3):
    s, i, j = wp.tid()
    acc = a.dtype(0.0)
    for r in range(a.shape[2]):
        acc += a[s, i, r] * b[s, r, j]
    out[s, i, j] = acc


@wp.kernel
def matvec(out: A1, a: A2, x: A1):
    i = wp.tid()
    acc = a.dtype(0.0)
    for j in range(a.shape[1]):
        acc += a[i, j] * x[j]
    out[i] = acc


@wp.kernel
def dense(out: A2, x: A2, w: A2, bias: A1, relu: int):
    i, j = wp.tid()
    acc = bias[j]
    for r in range(x.shape[1]):
        acc += x[i, r] * w[r, j]
    if relu != 0:
        acc = wp.max(acc, x.dtype(0.0))
    out[i, j] = acc


@wp.kernel
def attention(out: A2, q: A2, k: A2, v: A2, scores: A2):
    i = wp.tid()
    length, width = q.shape[0], q.shape[1]
    scale = q.dtype(1.0) / wp.sqrt(q.dtype(width))
    top = q.dtype(-1e30)
    for j in range(length):
        s = q.dtype(0.0)
        for d in range(width):
            s += q[i, d] * k[j, d]
        scores[i, j] = s * scale
        top = wp.max(top, s * scale)
    for e in range(width):
        out[i, e] = q.dtype(0.0)
    total = q.dtype(0.0)
    for j in range(length):
        p = wp.exp(scores[i, j] - top)
        total += p
        for e in range(width):
            out[i, e] = out[i, e] + p * v[j, e]
    for e in range(width):
        out[i, e] = out[i, e] / total


@wp.kernel
def nbody(acc: A2, pos: A2, mass: A1):
    i = wp.tid()
    one = pos.dtype(1.0)
    ax = pos.dtype(0.0)
    ay = pos.dtype(0.0)
    az = pos.dtype(0.0)
    for j in range(pos.shape[0]):
        dx = pos[j, 0] - pos[i, 0]
        dy = pos[j, 1] - pos[i, 1]
        dz = pos[j, 2] - pos[i, 2]
        inv = one / wp.sqrt(dx * dx + dy * dy + dz * dz + pos.dtype(1e-3))
        strength = mass[j] * inv * inv * inv
        ax += dx * strength
        ay += dy * strength
        az += dz * strength
    acc[i, 0] = ax
    acc[i, 1] = ay
    acc[i, 2] = az


@wp.kernel
def resize(out: A2, image: A2):
    y, x = wp.tid()
    height, width = image.shape[0], image.shape[1]
    sy = wp.max((float(y) + 0.5) * float(height) / float(out.shape[0]) - 0.5, 0.0)
    sx = wp.max((float(x) + 0.5) * float(width) / float(out.shape[1]) - 0.5, 0.0)
    y0 = wp.min(int(sy), height - 1)
    x0 = wp.min(int(sx), width - 1)
    y1 = wp.min(y0 + 1, height - 1)
    x1 = wp.min(x0 + 1, width - 1)
    fy = sy - float(y0)
    fx = sx - float(x0)
    top = image[y0, x0] * (1.0 - fx) + image[y0, x1] * fx
    bottom = image[y1, x0] * (1.0 - fx) + image[y1, x1] * fx
    out[y, x] = top * (1.0 - fy) + bottom * fy


@wp.kernel
def black_scholes(call: A1, price: A1, strike: A1, years: A1):
    i = wp.tid()
    root = 0.3 * wp.sqrt(years[i])
    d1 = (wp.log(price[i] / strike[i]) + (0.02 + 0.5 * 0.3 * 0.3) * years[i]) / root
    d2 = d1 - root
    up = 0.5 * (1.0 + wp.erf(d1 * 0.7071067811865476))
    down = 0.5 * (1.0 + wp.erf(d2 * 0.7071067811865476))
    call[i] = price[i] * up - strike[i] * wp.exp(-0.02 * years[i]) * down


@wp.kernel
def mandelbrot(counts: A2):
    y, x = wp.tid()
    height, width = wp.float64(counts.shape[0]), wp.float64(counts.shape[1])
    cr = wp.float64(-2.0) + wp.float64(3.0) * wp.float64(x) / width
    ci = wp.float64(-1.5) + wp.float64(3.0) * wp.float64(y) / height
    zr = wp.float64(0.0)
    zi = wp.float64(0.0)
    k = int(0)  # noqa: UP018, RUF046 -- Warp mutates in a loop only a variable made by a type's constructor
    for _ in range(100):
        if zr * zr + zi * zi <= wp.float64(4.0):
            zr, zi = zr * zr - zi * zi + cr, wp.float64(2.0) * zr * zi + ci
            k += 1
    counts[y, x] = k


def _dims(family: str, output: np.ndarray, inputs: list[np.ndarray]) -> tuple[int, ...]:
    """The threads a family's launch has: one per row, or per element of the output (of the input for a
    transpose and a histogram)."""
    if family in ("softmax", "layernorm", "gather", "cumsum", "matvec", "attention", "nbody"):
        return (output.shape[0],)
    if family in ("transpose", "histogram"):
        return inputs[0].shape
    return output.shape


def _aliased(a: np.ndarray) -> Any:
    return wp.array(a, device="cpu", copy=False)


def launcher(family: str, output: np.ndarray, inputs: list[np.ndarray]) -> Callable[[], None]:
    """A call of ``family``'s Warp kernel on the CPU that leaves its answer in ``output``: Warp's arrays over
    the numpy arrays' memory."""
    out, args = _aliased(output), [_aliased(a) for a in inputs]
    if family == "mlp":
        x, w1, b1, w2, b2, w3, b3 = args
        hidden = [wp.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device="cpu") for w in (w1, w2)]
        layers = [(hidden[0], x, w1, b1, 1), (hidden[1], hidden[0], w2, b2, 1), (out, hidden[1], w3, b3, 0)]

        def forward() -> None:
            for into, *operands in layers:
                wp.launch(dense, dim=into.shape, inputs=[into, *operands], device="cpu")
        return lambda: (forward(), wp.synchronize_device("cpu"))[0]
    if family == "attention":
        args.append(wp.empty((output.shape[0], output.shape[0]), dtype=out.dtype, device="cpu"))
    kernel = globals()[family]
    dims = _dims(family, output, inputs)

    def run() -> None:
        if family == "histogram":
            out.zero_()
        wp.launch(kernel, dim=dims, inputs=[out, *args], device="cpu")
        wp.synchronize_device("cpu")
    return run
