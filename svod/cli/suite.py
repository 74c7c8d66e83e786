"""``svod bench --suite kernels``: the kernels users write, each built the natural way with the builder,
checked against numpy, and timed beside numpy, numba (``svod.cli.suite_numba``) and tinygrad.

Each kernel is a ``SuiteKernel``: the svod kernels that compute it and the arrays they run on, the numpy
computation that checks it, and how tinygrad spells it (or why tinygrad cannot).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import svod
from svod import AxisKind, KernelBuilder, Ops, dtypes
from svod.device import Device
from svod.errors import SvodError
from svod.ir import UOp


@dataclass(frozen=True)
class Step:
    """One svod kernel of a suite entry, run on ``SuiteKernel.arrays`` at the positions ``args``."""

    ast: UOp
    args: tuple[int, ...]


@dataclass
class SuiteKernel:
    name: str
    steps: list[Step]
    output: np.ndarray
    inputs: list[np.ndarray]
    numpy: Callable[[], np.ndarray]
    tinygrad: Callable[..., Any] | str
    """The computation on tinygrad tensors of ``inputs``, or why tinygrad has no comparable spelling."""
    scratch: list[np.ndarray] = field(default_factory=list)
    tolerance: float = 1e-4

    @property
    def arrays(self) -> list[np.ndarray]:
        """What the steps index: the output, the inputs, then scratch arrays between steps."""
        return [self.output, *self.inputs, *self.scratch]


def single(name: str, ast: UOp, output: np.ndarray, inputs: list[np.ndarray], numpy: Callable[[], np.ndarray],
           tinygrad: Callable[..., Any] | str, tolerance: float = 1e-4) -> SuiteKernel:
    """A suite entry computed by one svod kernel over every array in order."""
    return SuiteKernel(name, [Step(ast, tuple(range(1 + len(inputs))))], output, inputs, numpy, tinygrad,
                       tolerance=tolerance)


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

    return single("softmax", k.build(), np.zeros_like(data), [data], reference, lambda t: t.softmax(axis=1))


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

    return single("layernorm", k.build(), np.zeros_like(data), [data], reference,
                  lambda t: t.layernorm(axis=1, eps=1e-5))


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

    return single("conv2d", k.build(), np.zeros_like(data), [data, weight], reference,
                  lambda t, w: t.unsqueeze(0).conv2d(w, padding=1)[0], tolerance=1e-3)


def gather(rows: int, table_rows: int) -> SuiteKernel:
    k = KernelBuilder("gather")
    out, table = k.buffer(dtypes.float32, (rows, 64)), k.buffer(dtypes.float32, (table_rows, 64))
    ids = k.buffer(dtypes.int32, rows)
    r, c = k.range(rows), k.range(64)
    k.store(out[r, c], table[ids[r], c])
    rng = _rng()
    data = rng.standard_normal((table_rows, 64)).astype(np.float32)
    index = rng.integers(0, table_rows, rows).astype(np.int32)
    return single("gather", k.build(), np.zeros((rows, 64), np.float32), [data, index], lambda: data[index],
                  "tinygrad indexes by a tensor as a one-hot reduction over the whole table, not a gather")


def histogram(count: int, bins: int) -> SuiteKernel:
    k = KernelBuilder("histogram")
    counts, values = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, count)
    i = k.range(count)
    k.atomic_add(counts[values[i]], 1)
    data = _rng().integers(0, bins, count).astype(np.int32)
    return single("histogram", k.build(), np.zeros(bins, np.int32), [data],
                  lambda: np.bincount(data, minlength=bins).astype(np.int32),
                  "tinygrad has no scatter-add; a one-hot sum is a different algorithm", tolerance=0)


def cumsum(rows: int, cols: int) -> SuiteKernel:
    k = KernelBuilder("cumsum")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, j = k.range(rows), k.range(cols, AxisKind.LOOP)
    k.store(out[r, j], (j > 0).where(out[r, (j - 1).maximum(0)], 0.0) + x[r, j])
    data = _rng().standard_normal((rows, cols)).astype(np.float32)
    return single("cumsum", k.build(), np.zeros_like(data), [data], lambda: np.cumsum(data, axis=1),
                  lambda t: t.cumsum(axis=1), tolerance=1e-3)


def transpose(n: int) -> SuiteKernel:
    k = KernelBuilder("transpose")
    out, x = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    r, c = k.range(n), k.range(n)
    k.store(out[c, r], x[r, c])
    data = _rng().standard_normal((n, n)).astype(np.float32)
    return single("transpose", k.build(), np.zeros_like(data), [data], lambda: np.ascontiguousarray(data.T),
                  lambda t: t.T.contiguous(), tolerance=0)


def matmul(n: int) -> SuiteKernel:
    k = KernelBuilder(f"matmul{n}")
    out, a, b = (k.buffer(dtypes.float32, (n, n)) for _ in range(3))
    i, j, r = k.range(n), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    rng = _rng()
    x, y = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    return single(f"matmul{n}", k.build(), np.zeros_like(x), [x, y], lambda: x @ y, lambda a, b: a @ b,
                  tolerance=1e-3)


def attention(length: int, width: int) -> SuiteKernel:
    """One head, ``softmax(q @ k.T / sqrt(width)) @ v``, as the three kernels it is made of: the scores, the
    softmax of each row, and the probabilities times ``v``."""
    k = KernelBuilder("attention_scores")
    scores = k.buffer(dtypes.float32, (length, length))
    q, key = k.buffer(dtypes.float32, (length, width)), k.buffer(dtypes.float32, (length, width))
    i, j, d = k.range(length), k.range(length), k.range(width, AxisKind.REDUCE)
    k.store(scores[i, j], (q[i, d] * key[j, d]).reduce(d) * (1.0 / np.sqrt(width)))
    scores_ast = k.build()

    probabilities_ast = softmax(length, length).steps[0].ast

    k = KernelBuilder("attention_values")
    out, p = k.buffer(dtypes.float32, (length, width)), k.buffer(dtypes.float32, (length, length))
    v = k.buffer(dtypes.float32, (length, width))
    i, e, j = k.range(length), k.range(width), k.range(length, AxisKind.REDUCE)
    k.store(out[i, e], (p[i, j] * v[j, e]).reduce(j))
    values_ast = k.build()

    rng = _rng()
    qx, kx, vx = (rng.standard_normal((length, width)).astype(np.float32) for _ in range(3))

    def reference() -> np.ndarray:
        logits = qx @ kx.T / np.float32(np.sqrt(width))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True)) @ vx

    steps = [Step(scores_ast, (4, 1, 2)), Step(probabilities_ast, (5, 4)), Step(values_ast, (0, 5, 3))]
    return SuiteKernel("attention", steps, np.zeros_like(qx), [qx, kx, vx], reference,
                       lambda a, b, c: a.scaled_dot_product_attention(b, c),
                       scratch=[np.zeros((length, length), np.float32) for _ in range(2)], tolerance=1e-3)


def suite(quick: bool) -> list[SuiteKernel]:
    scale = 4 if quick else 1
    kernels = [softmax(4096 // scale, 1024), layernorm(4096 // scale, 1024), conv2d(16, 128 // (2 if quick else 1)),
               gather((1 << 20) // scale, 50_000), histogram((1 << 22) // scale, 256), cumsum(4096 // scale, 1024),
               transpose(4096 // (2 if quick else 1)), attention(1024 // (2 if quick else 1), 64), matmul(1024)]
    return kernels if quick else [*kernels, matmul(2048)]


def check(kernel: SuiteKernel, device: Device) -> None:
    """Run once on ``device`` and compare with numpy; a wrong result is an error, not a timing."""
    arrays = [a.copy() for a in kernel.arrays]
    for step in kernel.steps:
        svod.run(step.ast, [arrays[a] for a in step.args], device=device)
    agrees(kernel, arrays[0], "svod")


def agrees(kernel: SuiteKernel, result: np.ndarray, who: str) -> None:
    """``result`` matches numpy within the kernel's tolerance, or a SvodError says by how much."""
    want = kernel.numpy()
    if kernel.tolerance == 0:
        ok = np.array_equal(result, want)
    else:
        ok = np.allclose(result, want, rtol=kernel.tolerance, atol=kernel.tolerance)
    if not ok:
        raise SvodError(f"{who}'s result disagrees with numpy", kernel=kernel.name, stage="bench",
                        value=float(np.max(np.abs(result.astype(np.float64) - want))))
