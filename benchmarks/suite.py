"""``svod bench --suite kernels``: the kernels users write (``svod.workloads``), at the sizes the
benchmark times them, and how tinygrad spells each (or why it cannot). numba's spellings are in
``benchmarks.numba_kernels``. svod's contestants are the kernels written as Python functions
(``@svod.kernel``, ``workloads.written_in_python``) as the decorator compiles them by default, with symbolic
sizes, and beside them with ``static_shapes=True``, which build the same kernels as the builder versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from svod.workloads import (
    Workload,
    attention,
    batched_matmul,
    black_scholes,
    conv2d,
    cumsum,
    gather,
    histogram,
    layernorm,
    mandelbrot,
    matmul,
    matvec,
    mlp,
    nbody,
    resize,
    softmax,
    transpose,
    written_in_python,
)


def _black_scholes_tensors(price: Any, strike: Any, years: Any) -> Any:
    root = 0.3 * years.sqrt()
    d1 = ((price / strike).log() + (0.02 + 0.5 * 0.3 * 0.3) * years) / root
    normal = [0.5 * (1.0 + (d * 0.7071067811865476).erf()) for d in (d1, d1 - root)]
    return price * normal[0] - strike * (-0.02 * years).exp() * normal[1]


TINYGRAD: dict[str, Callable[..., Any] | str] = {
    "softmax": lambda t: t.softmax(axis=1),
    "layernorm": lambda t: t.layernorm(axis=1, eps=1e-5),
    "conv2d": lambda t, w: t.unsqueeze(0).conv2d(w, padding=1)[0],
    "gather": "tinygrad indexes by a tensor as a one-hot reduction over the whole table, not a gather",
    "histogram": "tinygrad has no scatter-add; a one-hot sum is a different algorithm",
    "cumsum": lambda t: t.cumsum(axis=1),
    "transpose": lambda t: t.T.contiguous(),
    "matmul": lambda a, b: a @ b,
    "attention": lambda q, k, v: q.scaled_dot_product_attention(k, v),
    "batched_matmul": lambda a, b: a @ b,
    "matvec": lambda a, x: a @ x,
    "mlp": lambda x, w1, b1, w2, b2, w3, b3: ((x @ w1 + b1).relu() @ w2 + b2).relu() @ w3 + b3,
    "nbody": "an n-body step in tinygrad tensors is an (n, n, 3) difference materialised, not a loop over bodies",
    "resize": "tinygrad has no bilinear interpolation",
    "black_scholes": _black_scholes_tensors,
    "mandelbrot": "a tinygrad loop of 100 turns unrolls into one graph of 100 steps: not comparable",
}
"""The computation on tinygrad tensors of a workload's inputs, or why tinygrad has no comparable spelling."""


def tinygrad_spelling(workload: Workload) -> Callable[..., Any] | str:
    return TINYGRAD[workload.family]


def row_kernels(quick: bool, rows: int | None = None) -> dict[str, Workload]:
    """The suite's softmax, layernorm and mlp (builder kernels) at its sizes, by name; with ``rows``, at that
    many rows (the mlp's batch) instead."""
    rows_of_1024 = rows or 4096 // (4 if quick else 1)
    return {"softmax": softmax(rows_of_1024, 1024), "layernorm": layernorm(rows_of_1024, 1024),
            "mlp": mlp(rows or 256, (1024, 512, 256, 10))}


def suite(quick: bool, static_shapes: bool = False) -> list[Workload]:
    """The suite's kernels as ``@svod.kernel`` builds them by default (sizes variables of each kernel), or
    with ``static_shapes=True`` (sizes constants: a compile per shape, the column beside it)."""
    scale = 4 if quick else 1
    rows = row_kernels(quick)
    kernels = [rows["softmax"], rows["layernorm"], conv2d(16, 128 // (2 if quick else 1)),
               gather((1 << 20) // scale, 50_000), histogram((1 << 22) // scale, 256), cumsum(4096 // scale, 1024),
               transpose(4096 // (2 if quick else 1)), attention(1024 // (2 if quick else 1), 64), matmul(1024),
               matmul(1024 // scale, dtype=np.float64, name="matmul_f64"),
               matmul(1000 // scale, 1001 // scale, 999 // scale, name="matmul_odd"),
               batched_matmul(64 // scale, 128), matvec(4096 // (2 if quick else 1), 4096),
               rows["mlp"], nbody(4096 // scale), resize(1024 // (2 if quick else 1)),
               black_scholes((1 << 22) // scale), mandelbrot(1000 // (2 if quick else 1), 1000 // (2 if quick else 1))]
    return [written_in_python(k, static_shapes) for k in (kernels if quick else [*kernels, matmul(2048)])]
