"""The benchmark suite as a Taichi user writes it for Taichi's CPU backend: a ``@ti.kernel`` per family over
the numpy arrays as ``ti.types.ndarray()`` arguments, its outermost loop the parallel one (Taichi's rule), on
``settings.threads`` threads. Importing this module needs taichi (extra ``bench``); a kernel compiles for its
arguments' types on its first call, which the benchmark's warm-up absorbs.

Taichi's ndarray arguments are generic over their element type, but a literal ``0.0`` is its default float
(float32): a sum starts from ``a[i, 0] * 0``, a zero of its operands' type, so a float64 matmul sums in float64.
"""


import contextlib
import ctypes
import ctypes.util
import io
from collections.abc import Callable, Iterator

import numpy as np

from svod.config import settings


@contextlib.contextmanager
def _float_environment_kept() -> Iterator[None]:
    """This thread's floating-point environment as it was before: loading Taichi sets flush-to-zero and
    denormals-are-zero (its LLVM runtime is built for fast math), after which numpy, and every svod kernel the
    process runs, computed subnormals as 0 (svod's own exp test then failed by 9 million ulps)."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    saved = ctypes.create_string_buffer(64)  # a fenv_t, 32 bytes on x86-64
    libm.fegetenv(saved)
    try:
        yield
    finally:
        libm.fesetenv(saved)


with _float_environment_kept(), contextlib.redirect_stdout(io.StringIO()):  # not Taichi's banner among the figures
    import taichi as ti

    ti.init(arch=ti.cpu, cpu_max_num_threads=settings.threads, log_level=ti.WARN)

Array = ti.types.ndarray()

MISSING = {"black_scholes": "Taichi has no erf"}
"""The families Taichi cannot spell as written, and why."""


@ti.kernel
def softmax(out: Array, x: Array):
    for r in range(x.shape[0]):
        top = x[r, 0]
        for c in range(1, x.shape[1]):
            top = ti.max(top, x[r, c])
        total = top * 0
        for c in range(x.shape[1]):
            e = ti.exp(x[r, c] - top)
            out[r, c] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c] /= total


@ti.kernel
def layernorm(out: Array, x: Array):
    for r in range(x.shape[0]):
        cols = x.shape[1]
        mean = x[r, 0] * 0
        for c in range(cols):
            mean += x[r, c]
        mean /= cols
        var = mean * 0
        for c in range(cols):
            var += (x[r, c] - mean) ** 2
        scale = 1.0 / ti.sqrt(var / cols + 1e-5)
        for c in range(cols):
            out[r, c] = (x[r, c] - mean) * scale


@ti.kernel
def conv2d(out: Array, x: Array, w: Array):
    for o, y, xx in ti.ndrange(out.shape[0], out.shape[1], out.shape[2]):
        size = x.shape[1]
        acc = x[0, 0, 0] * 0
        for ci in range(x.shape[0]):
            for ky in range(3):
                iy = y + ky - 1
                if 0 <= iy < size:
                    for kx in range(3):
                        ix = xx + kx - 1
                        if 0 <= ix < size:
                            acc += x[ci, iy, ix] * w[o, ci, ky, kx]
        out[o, y, xx] = acc


@ti.kernel
def gather(out: Array, table: Array, ids: Array):
    for r in range(ids.shape[0]):
        row = ids[r]
        for c in range(table.shape[1]):
            out[r, c] = table[row, c]


@ti.kernel
def histogram(counts: Array, values: Array):
    for b in range(counts.shape[0]):
        counts[b] = 0
    for i in range(values.shape[0]):
        ti.atomic_add(counts[values[i]], 1)


@ti.kernel
def cumsum(out: Array, x: Array):
    for r in range(x.shape[0]):
        running = x[r, 0] * 0
        for c in range(x.shape[1]):
            running += x[r, c]
            out[r, c] = running


@ti.kernel
def transpose(out: Array, x: Array):
    for r, c in ti.ndrange(x.shape[0], x.shape[1]):
        out[c, r] = x[r, c]


@ti.kernel
def matmul(out: Array, a: Array, b: Array):
    for i, j in ti.ndrange(out.shape[0], out.shape[1]):
        acc = a[i, 0] * 0
        for r in range(a.shape[1]):
            acc += a[i, r] * b[r, j]
        out[i, j] = acc


@ti.kernel
def batched_matmul(out: Array, a: Array, b: Array):
    for s, i, j in ti.ndrange(out.shape[0], out.shape[1], out.shape[2]):
        acc = a[s, i, 0] * 0
        for r in range(a.shape[2]):
            acc += a[s, i, r] * b[s, r, j]
        out[s, i, j] = acc


@ti.kernel
def matvec(out: Array, a: Array, x: Array):
    for i in range(a.shape[0]):
        acc = a[i, 0] * 0
        for j in range(a.shape[1]):
            acc += a[i, j] * x[j]
        out[i] = acc


@ti.kernel
def dense(out: Array, x: Array, w: Array, bias: Array, relu: ti.i32):
    for i, j in ti.ndrange(out.shape[0], out.shape[1]):
        acc = bias[j]
        for r in range(x.shape[1]):
            acc += x[i, r] * w[r, j]
        if relu:
            acc = ti.max(acc, 0.0)
        out[i, j] = acc


@ti.kernel
def attention(out: Array, q: Array, k: Array, v: Array, scores: Array):
    for i in range(q.shape[0]):
        length, width = q.shape[0], q.shape[1]
        scale = 1.0 / ti.sqrt(width)
        top = -1e30
        for j in range(length):
            s = q[i, 0] * 0
            for d in range(width):
                s += q[i, d] * k[j, d]
            scores[i, j] = s * scale
            top = ti.max(top, s * scale)
        for e in range(width):
            out[i, e] = 0.0
        total = 0.0
        for j in range(length):
            p = ti.exp(scores[i, j] - top)
            total += p
            for e in range(width):
                out[i, e] += p * v[j, e]
        for e in range(width):
            out[i, e] /= total


@ti.kernel
def nbody(acc: Array, pos: Array, mass: Array):
    for i in range(pos.shape[0]):
        ax, ay, az = 0.0, 0.0, 0.0
        for j in range(pos.shape[0]):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            inv = 1.0 / ti.sqrt(dx * dx + dy * dy + dz * dz + 1e-3)
            strength = mass[j] * inv * inv * inv
            ax += dx * strength
            ay += dy * strength
            az += dz * strength
        acc[i, 0] = ax
        acc[i, 1] = ay
        acc[i, 2] = az


@ti.kernel
def resize(out: Array, image: Array):
    for y, x in ti.ndrange(out.shape[0], out.shape[1]):
        height, width = image.shape[0], image.shape[1]
        sy = ti.max((y + 0.5) * height / out.shape[0] - 0.5, 0.0)
        sx = ti.max((x + 0.5) * width / out.shape[1] - 0.5, 0.0)
        y0 = ti.min(ti.cast(sy, ti.i32), height - 1)
        x0 = ti.min(ti.cast(sx, ti.i32), width - 1)
        y1 = ti.min(y0 + 1, height - 1)
        x1 = ti.min(x0 + 1, width - 1)
        fy = sy - y0
        fx = sx - x0
        top = image[y0, x0] * (1.0 - fx) + image[y0, x1] * fx
        bottom = image[y1, x0] * (1.0 - fx) + image[y1, x1] * fx
        out[y, x] = top * (1.0 - fy) + bottom * fy


@ti.kernel
def mandelbrot(counts: Array):
    for y, x in ti.ndrange(counts.shape[0], counts.shape[1]):
        cr = ti.f64(-2.0) + ti.f64(3.0) * x / counts.shape[1]
        ci = ti.f64(-1.5) + ti.f64(3.0) * y / counts.shape[0]
        zr, zi = ti.f64(0.0), ti.f64(0.0)
        k = 0
        for _ in range(100):
            if zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                k += 1
        counts[y, x] = k


def launcher(family: str, output: np.ndarray, inputs: list[np.ndarray]) -> Callable[[], None]:
    """A call of ``family``'s Taichi kernel that leaves its answer in ``output``."""
    if family == "mlp":
        x, w1, b1, w2, b2, w3, b3 = inputs
        hidden = [np.empty((x.shape[0], w.shape[1]), x.dtype) for w in (w1, w2)]
        layers = [(hidden[0], x, w1, b1, 1), (hidden[1], hidden[0], w2, b2, 1), (output, hidden[1], w3, b3, 0)]

        def forward() -> None:
            for layer in layers:
                dense(*layer)
            ti.sync()
        return forward
    arguments = [output, *inputs]
    if family == "attention":
        arguments.append(np.empty((output.shape[0], output.shape[0]), output.dtype))
    kernel = globals()[family]

    def run() -> None:
        kernel(*arguments)
        ti.sync()
    return run
