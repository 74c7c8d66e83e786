"""``svod bench --suite kernels``: the kernels users write, each built the natural way with the builder,
checked against numpy, and timed beside numpy and numba (``@njit(parallel=True)``, compile excluded).

Each kernel is a ``SuiteKernel``: its svod AST and arguments, the numpy computation that checks it, and
the numba function when numba is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import svod
from svod import AxisKind, KernelBuilder, Ops, dtypes
from svod.device import Device
from svod.errors import SvodError
from svod.ir import UOp


@dataclass
class SuiteKernel:
    name: str
    ast: UOp
    inputs: list[np.ndarray]
    """Every argument; the first is the output."""
    numpy: Callable[[], np.ndarray]
    numba: Callable[[], Any] | None = None
    tolerance: float = 1e-4


def _rng() -> np.random.Generator:
    return np.random.default_rng(14)


def softmax(rows: int, cols: int) -> SuiteKernel:
    k = KernelBuilder("softmax")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, c = k.range(rows), k.range(cols)
    j1, j2 = k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    top = x[r, j1].reduce(j1, op=Ops.MAX)
    total = (x[r, j2] - top).exp().reduce(j2)
    k.store(out[r, c], (x[r, c] - top).exp() / total)
    data = _rng().standard_normal((rows, cols)).astype(np.float32)

    def reference() -> np.ndarray:
        e = np.exp(data - data.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return SuiteKernel("softmax", k.build(), [np.zeros_like(data), data], reference)


def layernorm(rows: int, cols: int) -> SuiteKernel:
    k = KernelBuilder("layernorm")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, c = k.range(rows), k.range(cols)
    j1, j2 = k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    mean = x[r, j1].reduce(j1) * (1.0 / cols)
    centered = x[r, j2] - mean
    var = (centered * centered).reduce(j2) * (1.0 / cols)
    k.store(out[r, c], (x[r, c] - mean) * (var + 1e-5).rsqrt())
    data = _rng().standard_normal((rows, cols)).astype(np.float32)

    def reference() -> np.ndarray:
        m = data.mean(axis=1, keepdims=True)
        return (data - m) / np.sqrt(data.var(axis=1, keepdims=True) + 1e-5)

    return SuiteKernel("layernorm", k.build(), [np.zeros_like(data), data], reference)


def conv2d(channels: int, size: int) -> SuiteKernel:
    k = KernelBuilder("conv2d")
    out = k.buffer(dtypes.float32, (channels, size, size))
    x, w = k.buffer(dtypes.float32, (channels, size, size)), k.buffer(dtypes.float32, (channels, channels, 3, 3))
    o, y, xx = k.range(channels), k.range(size), k.range(size)
    ci, ky, kx = k.range(channels, AxisKind.REDUCE), k.range(3, AxisKind.REDUCE), k.range(3, AxisKind.REDUCE)
    iy, ix = y + ky - 1, xx + kx - 1
    inside = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
    k.store(out[o, y, xx], (inside.where(x[ci, iy, ix], 0.0) * w[o, ci, ky, kx]).reduce(ci, ky, kx))
    rng = _rng()
    data = rng.standard_normal((channels, size, size)).astype(np.float32)
    weight = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32)

    def reference() -> np.ndarray:
        padded = np.pad(data, ((0, 0), (1, 1), (1, 1)))
        columns = np.stack([padded[:, dy:dy + size, dx:dx + size] for dy in range(3) for dx in range(3)], axis=1)
        return (weight.reshape(channels, -1) @ columns.reshape(-1, size * size)).reshape(channels, size, size)

    return SuiteKernel("conv2d", k.build(), [np.zeros_like(data), data, weight], reference, tolerance=1e-3)


def gather(rows: int, table_rows: int) -> SuiteKernel:
    k = KernelBuilder("gather")
    out, table = k.buffer(dtypes.float32, (rows, 64)), k.buffer(dtypes.float32, (table_rows, 64))
    ids = k.buffer(dtypes.int32, rows)
    r, c = k.range(rows), k.range(64)
    k.store(out[r, c], table[ids[r], c])
    rng = _rng()
    data = rng.standard_normal((table_rows, 64)).astype(np.float32)
    index = rng.integers(0, table_rows, rows).astype(np.int32)
    return SuiteKernel("gather", k.build(), [np.zeros((rows, 64), np.float32), data, index], lambda: data[index])


def histogram(count: int, bins: int) -> SuiteKernel:
    k = KernelBuilder("histogram")
    counts, values = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, count)
    i = k.range(count)
    k.atomic_add(counts[values[i]], 1)
    data = _rng().integers(0, bins, count).astype(np.int32)
    return SuiteKernel("histogram", k.build(), [np.zeros(bins, np.int32), data],
                       lambda: np.bincount(data, minlength=bins).astype(np.int32), tolerance=0)


def cumsum(rows: int, cols: int) -> SuiteKernel:
    k = KernelBuilder("cumsum")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, j = k.range(rows), k.range(cols, AxisKind.LOOP)
    k.store(out[r, j], (j > 0).where(out[r, (j - 1).maximum(0)], 0.0) + x[r, j])
    data = _rng().standard_normal((rows, cols)).astype(np.float32)
    return SuiteKernel("cumsum", k.build(), [np.zeros_like(data), data], lambda: np.cumsum(data, axis=1),
                       tolerance=1e-3)


def transpose(n: int) -> SuiteKernel:
    k = KernelBuilder("transpose")
    out, x = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    r, c = k.range(n), k.range(n)
    k.store(out[c, r], x[r, c])
    data = _rng().standard_normal((n, n)).astype(np.float32)
    return SuiteKernel("transpose", k.build(), [np.zeros_like(data), data], lambda: np.ascontiguousarray(data.T),
                       tolerance=0)


def matmul(n: int) -> SuiteKernel:
    k = KernelBuilder(f"matmul{n}")
    out, a, b = (k.buffer(dtypes.float32, (n, n)) for _ in range(3))
    i, j, r = k.range(n), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    rng = _rng()
    x, y = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    return SuiteKernel(f"matmul{n}", k.build(), [np.zeros_like(x), x, y], lambda: x @ y, tolerance=1e-3)


def suite(quick: bool) -> list[SuiteKernel]:
    scale = 4 if quick else 1
    kernels = [softmax(4096 // scale, 1024), layernorm(4096 // scale, 1024), conv2d(16, 128 // (2 if quick else 1)),
               gather((1 << 20) // scale, 50_000), histogram((1 << 22) // scale, 256), cumsum(4096 // scale, 1024),
               transpose(4096 // (2 if quick else 1)), matmul(1024)]
    return kernels if quick else [*kernels, matmul(2048)]


def check(kernel: SuiteKernel, device: Device) -> None:
    """Run once on ``device`` and compare with numpy; a wrong result is an error, not a timing."""
    arrays = [a.copy() for a in kernel.inputs]
    svod.run(kernel.ast, arrays, device=device)
    want = kernel.numpy()
    if kernel.tolerance == 0:
        ok = np.array_equal(arrays[0], want)
    else:
        ok = np.allclose(arrays[0], want, rtol=kernel.tolerance, atol=kernel.tolerance)
    if not ok:
        raise SvodError("the benchmark kernel disagrees with numpy", kernel=kernel.name, stage="bench",
                        value=float(np.max(np.abs(arrays[0].astype(np.float64) - want))))
