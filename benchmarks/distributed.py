"""``distributed.shard_overhead_ms``: what ``svod.distributed.map_plan`` adds per shard on a local Ray cluster
of 2 CPUs, beside what Ray itself charges to send the same shard to an actor and back."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np

import svod
from benchmarks.results import Metric
from svod import ExecutionPlan, dtypes
from svod.distributed.cluster import Cluster, bundle_bytes
from svod.workloads import tiny

SHARDS = 64
ELEMENTS = 16


def echo_class() -> type:
    """A Ray actor class that returns its shard: Ray's own cost of one call with the shard's data.

    Made inside a function, so no module names it and Ray ships the class itself to its workers (cloudpickle
    pickles by value what it cannot import by name). A class at module level went as a reference to
    ``benchmarks.distributed``, which a worker imports from its own ``sys.path``: ``svod bench`` run outside
    the checkout lost its whole run to the worker's ``ModuleNotFoundError: No module named 'benchmarks'``."""

    class Echo:
        def run(self, index: int, shard: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return shard

    return Echo


def tiny_plan(device: str) -> ExecutionPlan:
    plan = ExecutionPlan(device)
    x, y, z = (plan.add_buffer(svod.Buffer(device, dtypes.float32, ELEMENTS), name=name) for name in "xyz")
    plan.add_kernel(tiny(0), [y, x])
    plan.add_kernel(tiny(1), [z, y])
    return plan


def per_shard_seconds(run: Callable[[list[dict[str, np.ndarray]]], Any], shards: list[dict[str, np.ndarray]],
                      rounds: int = 3) -> float:
    """The best of ``rounds`` runs over every shard, per shard (after one warm-up run)."""
    run(shards[:2])
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        run(shards)
        best = min(best, time.perf_counter() - start)
    return best / len(shards)


def shard_overhead(device: str, cluster: Cluster | None = None) -> list[Metric]:
    """Per shard: ``map_plan``'s wall time on 2 actors less the plan's own run in this process; the note
    gives Ray's round trip of the same shard to an echo actor. On ``cluster``, or on a local one of 2 CPUs
    started for it. No figure without Ray (the ``ray`` extra)."""
    try:
        import ray
    except ImportError:
        return []
    rng = np.random.default_rng(0)
    shards = [{"x": rng.standard_normal(ELEMENTS).astype(np.float32)} for _ in range(SHARDS)]
    plan = tiny_plan(device)
    with Cluster(num_cpus=2) if cluster is None else nullcontext(cluster) as running:
        bundle = bundle_bytes(plan)
        mapped = per_shard_seconds(lambda some: running.map_plan(bundle, some, device=device, workers=2), shards)
        echo_actor = ray.remote(echo_class()).options(num_cpus=0)
        echoes = [echo_actor.remote() for _ in range(2)]
        echoed = per_shard_seconds(lambda some: ray.get([echoes[i % 2].run.remote(i, shard)
                                                          for i, shard in enumerate(some)]), shards)
        for echo in echoes:
            ray.kill(echo)
    local = per_shard_seconds(lambda some: [plan.execute(buffers={"x": shard["x"]}) for shard in some], shards)
    return [Metric("distributed.shard_overhead_ms", "ms", "lower", max(mapped - local, 0.0) * 1e3,
                   note=f"map_plan of {SHARDS} shards of a 2-kernel plan on 2 local Ray actors, less the plan's "
                        f"own run; Ray's round trip of the same shard to an actor: {echoed * 1e3:.2f} ms")]
