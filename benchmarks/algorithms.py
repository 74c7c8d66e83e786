"""Whole algorithms of many dependent steps, each one ``plan.execute()``: a dynamic-programming sweep over
anti-diagonals (nussinov), Durbin's Levinson recursion, a time-stepped 2-D Jacobi stencil and
Floyd-Warshall. Each is built as a plan with loops, run on arrays bound per run, and has numpy's spelling
(vectorised per step, a Python loop around it) and numba's (``benchmarks.numba_algorithms``: the loops as
written). The algorithms follow PolyBench's definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import svod
from svod import AxisKind, ExecutionPlan, KernelBuilder, dtypes
from svod.device import Device
from svod.ir import Ops, UOp


@dataclass
class Algorithm:
    """One algorithm at one size: svod's plan, numpy's spelling, the inputs and where the answer lands."""

    name: str
    size: str
    inputs: tuple[np.ndarray, ...]
    """Fresh inputs; each run starts from copies of them."""
    svod: Callable[[], np.ndarray]
    numpy: Callable[[], np.ndarray]
    tolerance: float
    plan: ExecutionPlan
    work: list[np.ndarray] = field(default_factory=list)


def _fresh(work: list[np.ndarray], inputs: tuple[np.ndarray, ...]) -> None:
    for target, source in zip(work, inputs, strict=True):
        np.copyto(target, source)


# ---- Floyd-Warshall ---------------------------------------------------------------------------------------

def floyd_warshall_kernel(n: int, offset: int) -> UOp:
    """Pivot ``k + offset``: ``out[i, j] = min(d[i, j], d[i, p] + d[p, j])`` (two buffers: a kernel reads
    no element another work item writes)."""
    k = KernelBuilder(f"floyd_warshall{offset}")
    pivot = k.var("k", 0, n - 1 - offset) + offset
    out, d = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    i, j = k.range(n), k.range(n)
    k.store(out[i, j], d[i, j].minimum(d[i, pivot] + d[pivot, j]))
    return k.build()


def floyd_warshall(n: int, device: Device | str = "CPU") -> Algorithm:
    rng = np.random.default_rng(7)
    dist = rng.uniform(1, 100, (n, n)).astype(np.float32)
    dist[rng.random((n, n)) < 0.5] = np.float32(1e9)
    np.fill_diagonal(dist, 0)
    if n % 2:
        raise ValueError("the Floyd-Warshall plan takes pivots two at a time: n must be even")
    plan = ExecutionPlan(device)
    d = plan.add_buffer(svod.Buffer(device, dtypes.float32, n * n), name="d")
    other = plan.add_buffer(svod.Buffer(device, dtypes.float32, n * n))
    plan.loop("k", 0, n, 2, [plan.add_kernel(floyd_warshall_kernel(n, 0), [other, d]),
                             plan.add_kernel(floyd_warshall_kernel(n, 1), [d, other])])
    plan.prepare()
    work = [np.empty_like(dist)]

    def run_svod() -> np.ndarray:
        _fresh(work, (dist,))
        plan.execute(buffers={"d": work[0]})
        return work[0]

    def run_numpy() -> np.ndarray:
        out = dist.copy()
        for pivot in range(n):
            np.minimum(out, out[:, pivot:pivot + 1] + out[pivot:pivot + 1, :], out=out)
        return out

    return Algorithm("floyd_warshall", f"N={n}", (dist,), run_svod, run_numpy, 0.0, plan, work)


# ---- Jacobi 2-D ------------------------------------------------------------------------------------------------

def jacobi2d_kernel(n: int, name: str) -> UOp:
    k = KernelBuilder(name)
    dst, src = k.buffer(dtypes.float64, (n, n)), k.buffer(dtypes.float64, (n, n))
    i, j = k.range(n - 2), k.range(n - 2)
    total = src[i + 1, j + 1] + src[i + 1, j] + src[i + 1, j + 2] + src[i + 2, j + 1] + src[i, j + 1]
    k.store(dst[i + 1, j + 1], total * 0.2)
    return k.build()


def jacobi2d(n: int, steps: int, device: Device | str = "CPU") -> Algorithm:
    rng = np.random.default_rng(8)
    a0, b0 = rng.random((n, n)), rng.random((n, n))
    plan = ExecutionPlan(device)
    a = plan.add_buffer(svod.Buffer(device, dtypes.float64, n * n), name="a")
    b = plan.add_buffer(svod.Buffer(device, dtypes.float64, n * n), name="b")
    plan.loop("t", 0, steps, [plan.add_kernel(jacobi2d_kernel(n, "jacobi2d_ab"), [b, a]),
                              plan.add_kernel(jacobi2d_kernel(n, "jacobi2d_ba"), [a, b])])
    plan.prepare()
    work = [np.empty_like(a0), np.empty_like(b0)]

    def run_svod() -> np.ndarray:
        _fresh(work, (a0, b0))
        plan.execute(buffers={"a": work[0], "b": work[1]})
        return work[0]

    def run_numpy() -> np.ndarray:
        x, y = a0.copy(), b0.copy()
        for _ in range(steps):
            y[1:-1, 1:-1] = 0.2 * (x[1:-1, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:] + x[2:, 1:-1] + x[:-2, 1:-1])
            x[1:-1, 1:-1] = 0.2 * (y[1:-1, 1:-1] + y[1:-1, :-2] + y[1:-1, 2:] + y[2:, 1:-1] + y[:-2, 1:-1])
        return x

    return Algorithm("jacobi2d", f"{n}x{n}, T={steps}", (a0, b0), run_svod, run_numpy, 1e-12, plan, work)


# ---- a dynamic-programming sweep (nussinov) ------------------------------------------------------------------

def nussinov_kernel(n: int) -> UOp:
    """Every cell of anti-diagonal ``d`` (``j = i + d``) from the diagonals below it: PolyBench's nussinov
    recurrence, the cells of one diagonal independent of each other."""
    k = KernelBuilder("nussinov_diagonal")
    d = k.var("d", 1, n - 1)
    table, seq = k.buffer(dtypes.int32, (n, n)), k.buffer(dtypes.int32, n)
    i = k.range(n - d)
    j = i + d
    pair = (seq[i] + seq[j]).eq(3).cast(dtypes.int32)
    inner = (d > 1).where(table[i + 1, j - 1] + pair, table[i + 1, j - 1])
    best = table[i, j - 1].maximum(table[i + 1, j]).maximum(inner)
    r = k.range(d - 1, AxisKind.REDUCE)
    split = (table[i, i + 1 + r] + table[i + 2 + r, j]).reduce(r, op=Ops.MAX)
    k.store(table[i, j], (d > 1).where(best.maximum(split), best))
    return k.build()


def nussinov_numpy(seq: np.ndarray) -> np.ndarray:
    n = seq.size
    table = np.zeros((n, n), np.int32)
    for d in range(1, n):
        i = np.arange(n - d)
        j = i + d
        pair = ((seq[i] + seq[j]) == 3).astype(np.int32)
        inner = table[i + 1, j - 1] + (pair if d > 1 else 0)
        best = np.maximum(np.maximum(table[i, j - 1], table[i + 1, j]), inner)
        if d > 1:
            r = np.arange(d - 1)
            split = (table[i[:, None], i[:, None] + 1 + r] + table[i[:, None] + 2 + r, j[:, None]]).max(axis=1)
            best = np.maximum(best, split)
        table[i, j] = best
    return table


def nussinov(n: int, device: Device | str = "CPU") -> Algorithm:
    seq = np.random.default_rng(9).integers(0, 4, n).astype(np.int32)
    plan = ExecutionPlan(device)
    table = plan.add_buffer(svod.Buffer(device, dtypes.int32, n * n), name="table")
    s = plan.add_buffer(svod.Buffer(device, dtypes.int32, n), name="seq")
    plan.loop("d", 1, n, [plan.add_kernel(nussinov_kernel(n), [table, s])])
    plan.prepare()
    zeros = np.zeros((n, n), np.int32)
    work = [np.empty_like(zeros)]

    def run_svod() -> np.ndarray:
        _fresh(work, (zeros,))
        plan.execute(buffers={"table": work[0], "seq": seq})
        return work[0]

    return Algorithm("dp_sweep", f"N={n}", (seq,), run_svod, lambda: nussinov_numpy(seq), 0.0, plan, work)


# ---- Durbin (Levinson recursion) -------------------------------------------------------------------------------

def durbin_kernels(n: int) -> tuple[UOp, UOp, UOp]:
    """Step ``k`` of Durbin's recursion in three kernels: the new alpha and beta from the old (a sum over
    ``k`` terms), ``z[i] = y[i] + alpha * y[k-1-i]``, then ``y[:k] = z[:k]`` and ``y[k] = alpha``."""
    scalars = KernelBuilder("durbin_alpha")
    step = scalars.var("k", 1, n - 1)
    fresh, state = scalars.buffer(dtypes.float64, 2), scalars.buffer(dtypes.float64, 2)
    r, y = scalars.buffer(dtypes.float64, n), scalars.buffer(dtypes.float64, n)
    one = scalars.range(1)
    alpha, beta = state[one * 0], state[one * 0 + 1]
    new_beta = (1.0 - alpha * alpha) * beta
    i = scalars.range(step, AxisKind.REDUCE)
    total = (r[step - i - 1] * y[i]).reduce(i)
    scalars.store(fresh[one * 0], -(r[step + one * 0] + total) / new_beta)
    scalars.store(fresh[one * 0 + 1], new_beta)
    update = KernelBuilder("durbin_z")
    step = update.var("k", 1, n - 1)
    z, y, fresh = (update.buffer(dtypes.float64, n), update.buffer(dtypes.float64, n),
                   update.buffer(dtypes.float64, 2))
    i = update.range(step)
    update.store(z[i], y[i] + fresh[i * 0] * y[step - i - 1])
    settle = KernelBuilder("durbin_y")
    step = settle.var("k", 1, n - 1)
    y, z, fresh = (settle.buffer(dtypes.float64, n), settle.buffer(dtypes.float64, n),
                   settle.buffer(dtypes.float64, 2))
    i = settle.range(step + 1)
    settle.store(y[i], (i < step).where(z[i], fresh[i * 0]))
    return scalars.build(), update.build(), settle.build()


def durbin_numpy(r: np.ndarray) -> np.ndarray:
    n = r.size
    y = np.zeros(n)
    y[0] = -r[0]
    beta, alpha = 1.0, -r[0]
    for k in range(1, n):
        beta = (1 - alpha * alpha) * beta
        total = np.dot(r[k - 1::-1], y[:k])
        alpha = -(r[k] + total) / beta
        y[:k] = y[:k] + alpha * y[k - 1::-1]
        y[k] = alpha
    return y


def durbin(n: int, device: Device | str = "CPU") -> Algorithm:
    r = np.random.default_rng(10).uniform(-1, 1, n) / n
    plan = ExecutionPlan(device)
    state = plan.add_buffer(svod.Buffer(device, dtypes.float64, 2), name="state")
    fresh = plan.add_buffer(svod.Buffer(device, dtypes.float64, 2))
    ri = plan.add_buffer(svod.Buffer(device, dtypes.float64, n), name="r")
    y = plan.add_buffer(svod.Buffer(device, dtypes.float64, n), name="y")
    z = plan.add_buffer(svod.Buffer(device, dtypes.float64, n), name="z")
    alpha, update, settle = durbin_kernels(n)
    plan.loop("k", 1, n, [plan.add_kernel(alpha, [fresh, state, ri, y]), plan.add_kernel(update, [z, y, fresh]),
                          plan.add_kernel(settle, [y, z, fresh]), plan.add_copy(state, fresh)])
    plan.prepare()
    start_state = np.array([-r[0], 1.0])
    start_y = np.zeros(n)
    start_y[0] = -r[0]
    work = [np.empty(2), np.empty(n)]

    def run_svod() -> np.ndarray:
        _fresh(work, (start_state, start_y))
        plan.execute(buffers={"state": work[0], "r": r, "y": work[1]})
        return work[1]

    return Algorithm("levinson", f"N={n}", (r,), run_svod, lambda: durbin_numpy(r), 1e-9, plan, work)


FULL_SIZES = (500, 4000, 1000, 100, 500)
"""(dp sweep N, Levinson N, Jacobi side, Jacobi steps, Floyd-Warshall N): the issue's sizes."""
QUICK_SIZES = (200, 1000, 400, 20, 200)


def algorithms(sizes: tuple[int, int, int, int, int], device: Device | str = "CPU") -> list[Algorithm]:
    dp, levinson, side, steps, pivots = sizes
    return [nussinov(dp, device), durbin(levinson, device), jacobi2d(side, steps, device),
            floyd_warshall(pivots, device)]


def numba_runner(algorithm: Algorithm, module: Any) -> tuple[Callable[[], object], Callable[[], np.ndarray]]:
    """The algorithm's numba spelling on copies of its inputs (``module`` is ``benchmarks.numba_algorithms``),
    and where its answer lands."""
    inputs = algorithm.inputs
    if algorithm.name == "floyd_warshall":
        d = np.empty_like(inputs[0])

        def floyd() -> None:
            np.copyto(d, inputs[0])
            module.floyd_warshall(d)

        return floyd, lambda: d
    if algorithm.name == "jacobi2d":
        a, b = np.empty_like(inputs[0]), np.empty_like(inputs[1])
        steps = int(algorithm.size.split("T=")[1])

        def jacobi() -> None:
            np.copyto(a, inputs[0])
            np.copyto(b, inputs[1])
            module.jacobi2d(a, b, steps)

        return jacobi, lambda: a
    if algorithm.name == "dp_sweep":
        table = np.zeros((inputs[0].size, inputs[0].size), np.int32)

        def sweep() -> None:
            table.fill(0)
            module.nussinov(inputs[0], table)

        return sweep, lambda: table
    y = np.empty_like(inputs[0])
    return (lambda: module.durbin(inputs[0], y)), lambda: y


def agree(algorithm: Algorithm, result: Any, want: np.ndarray) -> bool:
    result = np.asarray(result).reshape(want.shape)
    if algorithm.tolerance == 0:
        return bool(np.array_equal(result, want))
    return bool(np.allclose(result, want, rtol=algorithm.tolerance, atol=algorithm.tolerance))
