"""The suite's kernels on a CUDA GPU beside the peers GPU users pick: torch eager (cuBLAS, cuDNN and its own
kernels), ``torch.compile`` (Inductor's Triton kernels) and Triton as its users write the row kernels and the
matmul (``benchmarks.triton_kernels``). Each peer's answer is checked against numpy before it is timed, and
every figure is a median of device-synchronised calls on arrays resident on the GPU."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.framework_peers import torch_spellings
from benchmarks.timing import median_seconds
from svod.workloads import Workload, difference, load

TRITON_FAMILIES = ("softmax", "layernorm", "matmul")
COMPILED_FAMILIES = ("softmax", "layernorm", "matmul", "transpose", "cumsum")
"""The families timed through ``torch.compile`` too (each compile takes Inductor seconds)."""


@dataclass
class Row:
    name: str
    ms: dict[str, float] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)


def gpu_seconds(fn: Callable[[], object], synchronize: Callable[[], None], repeats: int, warmup: int = 3) -> float:
    """``timing.median_seconds`` of ``fn`` and the wait for the device after it: each call from a synchronised
    start to a synchronised end."""
    def waited() -> None:
        fn()
        synchronize()

    return median_seconds(waited, repeats, warmup)


def peers(workload: Workload, compiled: dict[tuple[str, str], Any]) -> dict[str, Callable[[], object] | str]:
    """Each peer's runner of ``workload`` on the GPU, checked against numpy, or why it has none."""
    import torch

    inputs = [torch.from_numpy(a).cuda() for a in workload.inputs]
    if workload.family == "histogram":
        inputs = [inputs[0].long(), workload.output.shape[0]]
    if workload.family == "attention":
        return {"torch": "torch's attention fuses the three kernels into one (flash attention): not the same work"}
    spelling = torch_spellings(torch)[workload.family]
    if workload.family == "mandelbrot":  # its sizes, not arrays: torch's spelling makes its arrays, on the GPU
        inputs = list(workload.output.shape)
        spelling = _made_on_the_gpu(torch, spelling)
    found: dict[str, Callable[[], object] | str] = {}
    candidates: dict[str, Callable[..., Any]] = {"torch": spelling}
    if workload.family in COMPILED_FAMILIES:
        key = (workload.family, workload.output.dtype.str)
        candidates["torch.compile"] = compiled.setdefault(key, torch.compile(spelling, dynamic=False))
    if workload.family in TRITON_FAMILIES:
        from benchmarks import triton_kernels
        candidates["triton"] = getattr(triton_kernels, workload.family)
    want = workload.numpy()
    for name, fn in candidates.items():
        try:
            result = fn(*inputs)
            torch.cuda.synchronize()
            ok, err = difference(result.float().cpu().numpy().astype(want.dtype), want, workload.tolerance)
            found[name] = functools.partial(fn, *inputs) if ok else f"differs from numpy by {err:.3g}"
        except Exception as err:  # a peer that cannot run says why
            found[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    return found


def _made_on_the_gpu(torch: Any, spelling: Callable[..., Any]) -> Callable[..., Any]:
    """``spelling`` with the arrays it makes (``arange``, ``zeros``) on the GPU, as a torch user sets it."""
    def made_there(*sizes: int) -> Any:
        with torch.device("cuda"):
            return spelling(*sizes)
    return made_there


def measure(workloads: list[Workload], device: str, repeats: int) -> list[Row]:
    import torch

    compiled: dict[tuple[str, str], Any] = {}
    rows = []
    for workload in workloads:
        row = Row(workload.name)
        try:
            loaded = load(workload, device)
            loaded()
            ok, err = difference(loaded.output(), workload.numpy(), workload.tolerance)
            if ok:
                row.ms["svod"] = gpu_seconds(loaded, lambda: None, repeats) * 1e3
            else:
                row.why["svod"] = f"WRONG: differs from numpy by {err:.3g}"
        except Exception as err:
            row.why["svod"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        for name, runner in peers(workload, compiled).items():
            if isinstance(runner, str):
                row.why[name] = runner
            else:
                row.ms[name] = gpu_seconds(runner, torch.cuda.synchronize, repeats) * 1e3
        rows.append(row)
        print(row, flush=True)
    return rows
