"""``svod bench --suite kernels --device CUDA:0``: cold compile, plan replay (a CUDA graph beside torch's) and
the suite with the issue's GPU sizes, beside torch eager, ``torch.compile`` and Triton, as a table
(also ``python -m benchmarks.cuda_report [OUT.json]``)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import svod
from benchmarks.gpu_peers import gpu_seconds, measure
from benchmarks.harness import FULL, QUICK, Bench, Tinygrad
from benchmarks.suite import suite
from svod.workloads import layernorm, matmul, softmax


def torch_graph_us(count: int) -> float:
    """torch's CUDA graph of ``count`` 16-element adds, relaunched and waited for: microseconds per kernel."""
    import torch

    xs = [torch.full((16,), 1.5, device="cuda") for _ in range(count + 1)]

    def launches() -> None:
        for k in range(count):
            torch.add(xs[k], float(k), out=xs[k + 1])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launches()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launches()
    loops = 200

    def replays() -> None:
        for _ in range(loops):
            graph.replay()
            torch.cuda.synchronize()

    return gpu_seconds(replays, torch.cuda.synchronize, 20) / loops / count * 1e6


def report(device_name: str = "CUDA:0", path: str | None = None, quick: bool = False) -> int:
    device = svod.get_device(device_name)
    print(f"device: {device.name}", flush=True)
    start = time.perf_counter()
    bench = Bench(device, QUICK if quick else FULL, Tinygrad("CPU"), lambda title: None)
    cold = {m.name: m.svod for m in bench.compile_cold()}
    print(f"cold compile (nvrtc + load): {cold}", flush=True)
    replay = {m.name: m.svod for m in bench.replay()}
    replay["torch_cuda_graph_us_per_kernel.32"] = torch_graph_us(32)
    print(f"replay: {replay}", flush=True)
    static = suite(quick, static_shapes=True)  # sizes as constants: a symbolic conv2d's launch exceeds grid y
    workloads = static if quick else [*static, softmax(8192, 8192), layernorm(8192, 8192), matmul(4096),
                                      matmul(4096, dtype=np.float16, name="matmul4096_f16")]
    rows = measure(workloads, device.name, repeats=5 if quick else 20)
    names = ["svod", "torch", "torch.compile", "triton"]
    print(f"{'kernel':18}" + "".join(f"{n:>15}" for n in names) + "   svod/best")
    for row in rows:
        best = min((v for k, v in row.ms.items() if k != "svod"), default=float("nan"))
        cells = "".join(f"{row.ms[n]:>15.4f}" if n in row.ms else f"{'-':>15}" for n in names)
        print(f"{row.name:18}{cells}   {best / row.ms['svod'] if 'svod' in row.ms else float('nan'):.2f}x")
    for row in rows:
        for who, why in row.why.items():
            print(f"  {row.name} {who}: {why}")
    if path:
        with open(path, "w") as out:
            json.dump({"cold_ms": cold, "replay": replay, "rows": [vars(r) for r in rows],
                       "seconds": time.perf_counter() - start}, out, indent=1)
    return 1 if any(why.startswith("WRONG") for row in rows for why in row.why.values()) else 0


if __name__ == "__main__":
    sys.exit(report(path=sys.argv[1] if len(sys.argv) > 1 else None))
