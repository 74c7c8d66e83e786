"""The pass pipeline: one ordered list of named passes per target, and ``SVOD_DEBUG=passes`` to watch it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.codegen import pipeline
from svod.codegen.pipeline import Check, FirstOf, LoweringStep, Pass, Then
from svod.device import DeviceCaps, WorkGroupLimits
from tests.helpers import open_device

FRONT = ["validate", "narrow_integers", "check_dtypes", "unbind", "drop_empty_ranges", "fuse_products", "anchor_ranges",
         "simplify", "check_races", "forward_stored", "guard_accesses", "decompose"]

LINEAR = ["check_accesses", "linearize", "lower_accumulators", "check_barriers"]


def _names(steps: tuple[LoweringStep, ...]) -> list[str]:
    """Every pass name, alternatives and sequences flattened in order."""
    out: list[str] = []
    for step in steps:
        if isinstance(step, Pass | Check):
            out.append(step.name)
        elif isinstance(step, FirstOf):
            out += _names(step.alternatives)
        else:
            assert isinstance(step, Then)
            out += _names(step.steps)
    return out


def _target(gpu: bool, dedicated: bool = False) -> pipeline.Target:
    limits = WorkGroupLimits(256, (256, 256, 64)) if gpu else None
    caps = DeviceCaps(host_memory=not gpu, overlaps_on_host=not gpu, threads=1 if gpu else 4, work_groups=limits,
                      local_memory=32 << 10, dedicated_local_memory=dedicated)
    return pipeline.Target(svod.DeviceSpec.parse("CL:0" if gpu else "CPU"), caps, None)


def test_each_target_has_one_ordered_list_of_passes():
    assert _names(pipeline.passes(_target(gpu=False))) == [
        *FRONT, "block_transposes", "order_parallel_nest", "clamp_guarded_ranges", "tile_for_cpu",
        "share_reduction_loops", "carry_rows", "reduce_atomic_adds", "split_for_threads", "privatize_atomics",
        "speculate_gated_loads", "simplify", "keep_params"]
    assert _names(pipeline.passes(_target(gpu=True))) == [
        *FRONT, "tile_matmul", "upcast_reductions", "reduce_per_item", "share_reductions", "to_gpu_indices",
        "decompose_lowered", "speculate_gated_loads", "simplify", "keep_params"]


def _matmul(n: int = 32):
    k = KernelBuilder("matmul")
    c, a, b = (k.buffer(dtypes.float32, (n, n)) for _ in range(3))
    i, j, r = k.range(n), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(c[i, j], (a[i, r] * b[r, j]).reduce(r))
    return k.build()


def _ran(target: pipeline.Target) -> list[str]:
    """The passes that applied to a matmul, read from the trace."""
    lines: list[str] = []

    class Trace:
        def write(self, text: str) -> None:
            lines.extend(line for line in text.splitlines() if line.startswith("svod: pass"))

        def flush(self) -> None: ...

    pipeline.lower(_matmul(), target, Trace())  # type: ignore[arg-type]
    return [line.split()[2] for line in lines if not line.endswith("does not apply")]


def test_the_first_alternative_that_applies_is_taken():
    """Where local memory is storage of its own a matmul is staged in it, and none of the other GPU
    strategies runs; elsewhere it is upcast and launched by work item."""
    staged = _ran(_target(gpu=True, dedicated=True))
    assert "tile_matmul" in staged and "upcast_reductions" not in staged and "to_gpu_indices" not in staged
    flat = _ran(_target(gpu=True, dedicated=False))
    assert "tile_matmul" not in flat and flat.index("upcast_reductions") < flat.index("to_gpu_indices")


@pytest.mark.parametrize("device", ["CPU", "CL:0", "CUDA:0", "WEBGPU:0"])
def test_svod_debug_passes_prints_each_pass_and_the_kernel_after_it(device):
    open_device(device)  # skips, naming what this machine lacks, where the device is not here
    code = ("import svod; from svod import dtypes\n"
            "k = svod.KernelBuilder('twice'); x = k.buffer(dtypes.float32, 64); i = k.range(64)\n"
            "k.store(x[i], x[i] * 2.0)\n"
            f"svod.compile(k.build(), {device!r})\n")
    env = {**os.environ, "SVOD_DEBUG": "passes", "SVOD_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    passes = [line.split()[2] for line in done.stderr.splitlines() if line.startswith("svod: pass")]
    gpu = device != "CPU"
    assert passes == ["parallel_loops", *([] if gpu else ["block_matmul"]), "split_reduction", *FRONT,
                      *(["tile_matmul", "upcast_reductions", "reduce_per_item", "share_reductions",
                         "to_gpu_indices", "decompose_lowered", "speculate_gated_loads"] if gpu else
                        ["block_transposes", "order_parallel_nest", "clamp_guarded_ranges", "tile_for_cpu",
                         "share_reduction_loops", "carry_rows", "reduce_atomic_adds", "split_for_threads",
                         "privatize_atomics", "speculate_gated_loads"]),
                      "simplify", "keep_params", *LINEAR]
    assert f"svod: pass guard_accesses on twice for {device}" in done.stderr
    assert f"svod: pass linearize on twice for {device}" in done.stderr
    assert "STORE" in done.stderr.split("svod: pass keep_params")[1]  # the kernel after the last pass
