"""``svod demo``: a handful of kernels built with ``KernelBuilder``, and a plan of two of them replayed at
several sizes, each checked against numpy and timed.

Each case says how to build its kernel, its inputs, and numpy's answer; ``run_case`` compiles it through
the kernel cache, runs it, compares, and times it. A case whose result differs from numpy fails the demo.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.cli.table import format_table
from svod.device import Device
from svod.ir import UOp


@dataclass(frozen=True)
class DemoCase:
    name: str
    ast: UOp
    inputs: list[np.ndarray]
    """Arrays in slot order; the output comes first and starts as zeros."""
    var_vals: dict[str, int]
    expected: Callable[[], np.ndarray]
    """numpy's answer, computed after svod's runs: numpy's BLAS threads keep spinning for a while after a
    call, and on a machine with few cores they would steal the cores svod's workers are timed on."""
    bytes_moved: int
    flops: int
    rtol: float = 1e-5
    atol: float = 1e-5


@dataclass(frozen=True)
class CaseResult:
    name: str
    ok: bool
    max_error: float
    compile_ms: float
    run_ms: float
    rate: str


def check_result(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> tuple[bool, float]:
    """Whether ``got`` matches ``expected`` within tolerance, and the largest absolute difference."""
    if got.shape != expected.shape:
        return False, float("inf")
    error = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)), initial=0.0))
    return bool(np.allclose(got, expected, rtol=rtol, atol=atol)), error


def saxpy_case(n: int = 1 << 22) -> DemoCase:
    k = KernelBuilder("saxpy")
    size = k.var("n", 1, 1 << 26)
    out, x, y = (k.buffer(dtypes.float32, size) for _ in range(3))
    i = k.range(size)
    k.store(out[i], x[i] * 2.5 + y[i])
    rng = np.random.default_rng(0)
    x_np, y_np = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    return DemoCase("saxpy", k.build(), [np.zeros(n, np.float32), x_np, y_np], {"n": n},
                    lambda: x_np * np.float32(2.5) + y_np, 12 * n, 2 * n)


def row_sum_case(rows: int = 4096, cols: int = 1024) -> DemoCase:
    k = KernelBuilder("row_sum")
    out, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, rows * cols)
    r = k.range(rows)
    c = k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r * cols + c].reduce(c))
    x_np = np.random.default_rng(1).standard_normal(rows * cols).astype(np.float32)
    return DemoCase("row_sum", k.build(), [np.zeros(rows, np.float32), x_np], {},
                    lambda: x_np.reshape(rows, cols).sum(axis=1), 4 * rows * cols, rows * cols, atol=1e-3)


def matmul_case(m: int = 128, n: int = 128, kk: int = 128) -> DemoCase:
    b = KernelBuilder("matmul")
    c, a, bm = b.buffer(dtypes.float32, m * n), b.buffer(dtypes.float32, m * kk), b.buffer(dtypes.float32, kk * n)
    i, j = b.range(m), b.range(n)
    r = b.range(kk, AxisKind.REDUCE)
    b.store(c[i * n + j], (a[i * kk + r] * bm[r * n + j]).reduce(r))
    rng = np.random.default_rng(2)
    a_np, b_np = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
    return DemoCase("matmul", b.build(), [np.zeros(m * n, np.float32), a_np.reshape(-1), b_np.reshape(-1)], {},
                    lambda: (a_np @ b_np).reshape(-1), 4 * (m * kk + kk * n + m * n), 2 * m * n * kk, atol=1e-3,
                    rtol=1e-4)


DEMO_CASES: tuple[Callable[[], DemoCase], ...] = (saxpy_case, row_sum_case, matmul_case)


def _rate(case: DemoCase, seconds: float) -> str:
    if case.flops > case.bytes_moved:
        return f"{case.flops / seconds / 1e9:.1f} GFLOP/s"
    return f"{case.bytes_moved / seconds / 1e9:.1f} GB/s"


def run_case(case: DemoCase, device: Device, repeats: int = 5) -> CaseResult:
    start = time.perf_counter()
    kernel = svod.compile(case.ast, device)
    compile_ms = (time.perf_counter() - start) * 1e3
    buffers = [svod.Buffer.from_numpy(a, device) for a in case.inputs]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        kernel(buffers, case.var_vals)
        times.append(time.perf_counter() - start)
    ok, error = check_result(buffers[0].numpy(), case.expected(), case.rtol, case.atol)
    seconds = statistics.median(times)
    return CaseResult(case.name, ok, error, compile_ms, seconds * 1e3, _rate(case, seconds))


PLAN_SIZES = (1000, 4099, 1 << 20)


def plan_kernels(limit: int) -> tuple[UOp, UOp]:
    """``y = 2x + 1`` and ``total = sum(y * y)`` over a symbolic ``n``: two kernels with a dependency."""
    k = KernelBuilder("affine")
    n = k.var("n", 1, limit)
    y, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(y[i], x[i] * 2.0 + 1.0)
    affine = k.build()
    k = KernelBuilder("sum_of_squares")
    n = k.var("n", 1, limit)
    total, y = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, n)
    r = k.range(n, AxisKind.REDUCE)
    k.store(total[0], (y[r] * y[r]).reduce(r))
    return affine, k.build()


def run_plan(device: Device, sizes: tuple[int, ...] = PLAN_SIZES) -> list[CaseResult]:
    """One plan prepared once and replayed at several sizes, each replay checked against numpy."""
    limit = max(sizes)
    x = np.random.default_rng(3).uniform(-1, 1, limit).astype(np.float32)
    plan = svod.ExecutionPlan(device)
    xi = plan.add_buffer(svod.Buffer.from_numpy(x, device))
    yi = plan.add_buffer(svod.Buffer(device, dtypes.float32, limit))
    ti = plan.add_buffer(svod.Buffer(device, dtypes.float32, 1))
    affine, squares = plan_kernels(limit)
    plan.add_kernel(affine, [yi, xi])
    plan.add_kernel(squares, [ti, yi])
    start = time.perf_counter()
    plan.prepare()
    prepare_ms = (time.perf_counter() - start) * 1e3
    results = []
    for n in sizes:
        runs = [plan.execute(n=n, profile=True) or [] for _ in range(5)]
        seconds = statistics.median(sum(s.seconds for s in steps) for steps in runs)
        rate = f"{sum(s.bytes for s in runs[-1]) / seconds / 1e9:.1f} GB/s"
        y = x[:n].astype(np.float64) * 2 + 1
        ok, error = check_result(plan.buffers[ti].numpy(), np.array([np.sum(y * y)], np.float32), 1e-4, 1e-3)
        results.append(CaseResult(f"plan n={n}", ok, error, prepare_ms, seconds * 1e3, rate))
    return results


def run_demo(device_name: str = "CPU", compiler: str | None = None,
             cases: tuple[Callable[[], DemoCase], ...] = DEMO_CASES, plan_sizes: tuple[int, ...] = PLAN_SIZES) -> int:
    device = svod.get_device(device_name, compiler)
    print(f"svod demo on {device.name} ({device.compiler.cache_key})")
    results = [run_case(make(), device, repeats=1 if device.device.base_type == "PYTHON" else 5) for make in cases]
    results += run_plan(device, plan_sizes) if plan_sizes else []
    rows = [(r.name, "ok" if r.ok else "WRONG", f"{r.max_error:.2g}", f"{r.compile_ms:.1f}", f"{r.run_ms:.3f}", r.rate)
            for r in results]
    print(format_table(("kernel", "vs numpy", "max error", "compile ms", "run ms", "throughput"), rows))
    return 0 if all(r.ok for r in results) else 1
