"""Kernels the tests share: each builder returns the AST and a function giving numpy's answer."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes, workloads

Reference = Callable[..., np.ndarray]

SMALL_WORKLOADS: dict[str, Callable[[], workloads.Workload]] = {
    "saxpy": lambda: workloads.saxpy(1001), "row_sum": lambda: workloads.row_sum(7, 33),
    "softmax": lambda: workloads.softmax(5, 7), "layernorm": lambda: workloads.layernorm(3, 33),
    "conv2d": lambda: workloads.conv2d(2, 5), "gather": lambda: workloads.gather(9, 11),
    "histogram": lambda: workloads.histogram(100, 7), "cumsum": lambda: workloads.cumsum(3, 17),
    "transpose": lambda: workloads.transpose(13), "matmul": lambda: workloads.matmul(17),
    "attention": lambda: workloads.attention(13, 5), "batched_matmul": lambda: workloads.batched_matmul(3, 7),
    "matvec": lambda: workloads.matvec(13, 17), "mlp": lambda: workloads.mlp(5, (17, 9, 3, 2)),
    "nbody": lambda: workloads.nbody(37), "resize": lambda: workloads.resize(11),
    "black_scholes": lambda: workloads.black_scholes(1001), "mandelbrot": lambda: workloads.mandelbrot(13, 29),
}
"""svod's kernel collection at small and odd sizes."""


def qk_v(s: int = 8, d: int = 4) -> UOp:
    """``(Q @ K^T) @ V`` as one kernel: a reduction over ``j`` whose body holds a reduction over ``d``."""
    k = KernelBuilder("qk_v")
    out, q, kk, v = (k.buffer(dtypes.float32, s * d) for _ in range(4))
    i, e = k.range(s), k.range(d)
    j, c = k.range(s, AxisKind.REDUCE), k.range(d, AxisKind.REDUCE)
    score = (q[i * d + c] * kk[j * d + c]).reduce(c)
    k.store(out[i * d + e], (score * v[j * d + e]).reduce(j))
    return k.build()


def attention(s: int = 64, d: int = 16) -> UOp:
    """``softmax(Q K^T / sqrt(d)) V`` for one head, fused into one kernel."""
    k = KernelBuilder("attention")
    out, q, kk, v = (k.buffer(dtypes.float32, s * d) for _ in range(4))
    i, e = k.range(s), k.range(d)
    j, c = k.range(s, AxisKind.REDUCE), k.range(d, AxisKind.REDUCE)
    score = (q[i * d + c] * kk[j * d + c]).reduce(c) * (math.log2(math.e) / math.sqrt(d))
    weight = (score - score.reduce(j, op=Ops.MAX)).exp2()
    k.store(out[i * d + e], (weight * v[j * d + e]).reduce(j) / weight.reduce(j))
    return k.build()


def attention_reference(q: np.ndarray, kk: np.ndarray, v: np.ndarray) -> np.ndarray:
    scores = q.astype(np.float64) @ kk.astype(np.float64).T / math.sqrt(q.shape[1])
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v


def ab_c(m: int = 5, n: int = 6, p: int = 7, q: int = 3) -> UOp:
    """``(A @ B) @ C``: the inner product feeds an outer reduction over another range."""
    k = KernelBuilder("ab_c")
    out, a, b, c = (k.buffer(dtypes.float32, size) for size in (m * q, m * n, n * p, p * q))
    i, e = k.range(m), k.range(q)
    r, t = k.range(p, AxisKind.REDUCE), k.range(n, AxisKind.REDUCE)
    ab = (a[i * n + t] * b[t * p + r]).reduce(t)
    k.store(out[i * q + e], (ab * c[r * q + e]).reduce(r))
    return k.build()


def softmax_rows(rows: int = 5, cols: int = 11) -> UOp:
    """A row softmax: the normaliser is a reduction whose body holds another reduction (the max)."""
    k = KernelBuilder("softmax")
    out, x = k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows * cols)
    i, j = k.range(rows), k.range(cols)
    c = k.range(cols, AxisKind.REDUCE)
    top = x[i * cols + c].reduce(c, op=Ops.MAX)
    total = (x[i * cols + c] - top).exp2().reduce(c)
    k.store(out[i * cols + j], (x[i * cols + j] - top).exp2() / total)
    return k.build()


def softmax_reference(x: np.ndarray) -> np.ndarray:
    shifted = np.exp2(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def broadcast_reduction(rows: int = 4, cols: int = 5, depth: int = 6) -> UOp:
    """``out[i, j] = sum_r x[j, r] + y[i, j]``: the reduction does not depend on ``i``."""
    k = KernelBuilder("broadcast_sum")
    out, x, y = (k.buffer(dtypes.float32, size) for size in (rows * cols, cols * depth, rows * cols))
    i, j = k.range(rows), k.range(cols)
    r = k.range(depth, AxisKind.REDUCE)
    k.store(out[i * cols + j], x[j * depth + r].reduce(r) + y[i * cols + j])
    return k.build()


def variance(n: int = 37) -> UOp:
    """A reduction whose result feeds a later reduction over another range (the mean, then squares)."""
    k = KernelBuilder("variance")
    out, x = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, n)
    a, b = k.range(n, AxisKind.REDUCE), k.range(n, AxisKind.REDUCE)
    mean = x[a].reduce(a) / float(n)
    k.store(out[0], ((x[b] - mean) * (x[b] - mean)).reduce(b) / float(n))
    return k.build()


def nested_corpus() -> list[tuple[UOp, Callable[[np.random.Generator], tuple[list[np.ndarray], np.ndarray]]]]:
    """Kernels with reductions nested in reductions, each with inputs and numpy's answer."""
    def qkv_case(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
        q, kk, v = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3))
        return [q, kk, v], (q @ kk.T) @ v

    def attention_case(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
        q, kk, v = (rng.standard_normal((64, 16)).astype(np.float32) for _ in range(3))
        return [q, kk, v], attention_reference(q, kk, v)

    def ab_c_case(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
        a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 6), (6, 7), (7, 3)))
        return [a, b, c], (a @ b) @ c

    def softmax_case(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
        x = rng.standard_normal((5, 11)).astype(np.float32)
        return [x], softmax_reference(x)

    def broadcast_case(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
        x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
        return [x, y], x.sum(axis=1)[None, :] + y

    def variance_case(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
        x = rng.standard_normal(37).astype(np.float32)
        return [x], np.array([x.astype(np.float64).var()])

    return [(qk_v(), qkv_case), (attention(), attention_case), (ab_c(), ab_c_case), (softmax_rows(), softmax_case),
            (broadcast_reduction(), broadcast_case), (variance(), variance_case)]
