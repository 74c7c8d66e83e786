"""``svod demo``: a handful of kernels from svod's collection (``svod.workloads``), and a plan of
two of them replayed at several sizes, each checked against numpy and timed.

Each case is a workload (its kernel, its inputs and numpy's answer) and the work it does, for a rate;
``run_case`` compiles it through the kernel cache, runs it, compares, and times it. A case whose result
differs from numpy fails the demo.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import svod
from svod import dtypes
from svod.cli.table import format_table
from svod.device import Device
from svod.workloads import (
    Workload,
    affine,
    compare,
    difference,
    load,
    matmul,
    row_sum,
    saxpy,
    sum_of_squares,
)


@dataclass(frozen=True)
class DemoCase:
    workload: Workload
    bytes_moved: int
    flops: int


@dataclass(frozen=True)
class CaseResult:
    name: str
    ok: bool
    max_error: float
    compile_ms: float
    run_ms: float
    rate: str


def saxpy_case(n: int = 1 << 22) -> DemoCase:
    return DemoCase(saxpy(n), 12 * n, 2 * n)


def row_sum_case(rows: int = 4096, cols: int = 1024) -> DemoCase:
    return DemoCase(row_sum(rows, cols), 4 * rows * cols, rows * cols)


def matmul_case(n: int = 128) -> DemoCase:
    return DemoCase(matmul(n), 12 * n * n, 2 * n ** 3)


DEMO_CASES: tuple[Callable[[], DemoCase], ...] = (saxpy_case, row_sum_case, matmul_case)


def _rate(case: DemoCase, seconds: float) -> str:
    if case.flops > case.bytes_moved:
        return f"{case.flops / seconds / 1e9:.1f} GFLOP/s"
    return f"{case.bytes_moved / seconds / 1e9:.1f} GB/s"


def run_case(case: DemoCase, device: Device, repeats: int = 5) -> CaseResult:
    """Compile (timed), run ``repeats`` times (timed), then compare with numpy: numpy's answer is computed
    after svod's runs, because numpy's BLAS threads keep spinning for a while after a call, and on a
    machine with few cores they would steal the cores svod's workers are timed on."""
    workload = case.workload
    start = time.perf_counter()
    for step in workload.steps:
        svod.compile(step.ast, device)
    compile_ms = (time.perf_counter() - start) * 1e3
    loaded = load(workload, device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        loaded()
        times.append(time.perf_counter() - start)
    ok, error = compare(workload, loaded.output())
    seconds = statistics.median(times)
    return CaseResult(workload.name, ok, error, compile_ms, seconds * 1e3, _rate(case, seconds))


PLAN_SIZES = (1000, 4099, 1 << 20)


def run_plan(device: Device, sizes: tuple[int, ...] = PLAN_SIZES) -> list[CaseResult]:
    """One plan prepared once and replayed at several sizes, each replay checked against numpy."""
    limit = max(sizes)
    x = np.random.default_rng(3).uniform(-1, 1, limit).astype(np.float32)
    plan = svod.ExecutionPlan(device)
    xi = plan.add_buffer(svod.Buffer.from_numpy(x, device))
    yi = plan.add_buffer(svod.Buffer(device, dtypes.float32, limit))
    ti = plan.add_buffer(svod.Buffer(device, dtypes.float32, 1))
    plan.add_kernel(affine(2.0, limit), [yi, xi])  # y = 2x + 1, then total = sum(y * y): a dependency
    plan.add_kernel(sum_of_squares(limit), [ti, yi])
    start = time.perf_counter()
    plan.prepare()
    prepare_ms = (time.perf_counter() - start) * 1e3
    results = []
    for n in sizes:
        runs = [plan.execute(n=n, profile=True) or [] for _ in range(5)]
        seconds = statistics.median(sum(s.seconds for s in steps) for steps in runs)
        rate = f"{sum(s.bytes for s in runs[-1]) / seconds / 1e9:.1f} GB/s"
        y = x[:n].astype(np.float64) * 2 + 1
        ok, error = difference(plan.buffers[ti].numpy(), np.array([np.sum(y * y)], np.float32), 1e-3)
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
