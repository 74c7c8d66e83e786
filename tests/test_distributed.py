"""``svod.distributed`` on a local Ray cluster of 2 CPUs: shards run on actors that load the bundle once,
outputs in order and bit for bit those of one process, a failing shard's error with its index, and a lost
actor replaced with its shards retried."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.config import settings
from svod.errors import SvodError, VariableError
from svod.runtime import KernelCache
from tests.helpers import from_another_cpu

ray = pytest.importorskip("ray", reason="svod.distributed needs the ray extra (pip install ray)")

from svod.distributed import Cluster, map_plan  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
N = 1000


def make_plan(scale: float = 3.0, cache: KernelCache | None = None) -> svod.ExecutionPlan:
    """y = sin(x) * scale + x for the first n elements, and the square of each in z."""
    k = svod.KernelBuilder("wave")
    n = k.var("n", 1, N)
    y, x = k.buffer(dtypes.float32, N), k.buffer(dtypes.float32, N)
    i = k.range(n)
    k.store(y[i], x[i].sin() * scale + x[i])
    square = svod.KernelBuilder("square")
    z, y2 = square.buffer(dtypes.float32, N), square.buffer(dtypes.float32, N)
    j = square.range(N)
    square.store(z[j], y2[j] * y2[j])
    plan = svod.ExecutionPlan("CPU", cache)
    xs = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, N), name="x")
    ys = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, N), name="y")
    zs = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, N), name="z")
    plan.add_kernel(k.build(), [ys, xs])
    plan.add_kernel(square.build(), [zs, ys])
    return plan


def shards(count: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal(N).astype(np.float32)} for _ in range(count)]


def locally(plan: svod.ExecutionPlan, shard: dict[str, object], n: int) -> dict[str, np.ndarray]:
    out = {"y": np.zeros(N, np.float32), "z": np.zeros(N, np.float32)}
    plan.execute(buffers={"x": shard["x"], **out}, n=n)
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    os.environ["PYTHONPATH"] = str(REPO)  # the workers Ray starts import this checkout's svod
    started = Cluster(num_cpus=2)
    yield started
    started.shutdown()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, svod.ExecutionPlan]:
    plan = make_plan()
    path = tmp_path_factory.mktemp("bundle") / "wave.svodplan"
    plan.save(path)
    return path, plan


def kill(actor: object) -> None:
    """End ``actor`` and wait until Ray says so: ``ray.kill`` only asks, and a call sent right after it may
    still run."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote())  # type: ignore[attr-defined]
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"{actor} outlived ray.kill")


def test_map_plan_matches_one_process_bit_for_bit(cluster: Cluster, bundle: tuple[Path, svod.ExecutionPlan]
                                                  ) -> None:
    path, plan = bundle
    data = shards(4)
    results = map_plan(path, data, cluster=cluster, workers=2, n=N)
    assert len(results) == 4
    for shard, result in zip(data, results, strict=True):
        want = locally(plan, shard, N)
        assert sorted(result) == ["y", "z"]
        for name in ("y", "z"):
            assert np.array_equal(result[name], want[name]), name


def test_actors_keep_their_plan_between_calls(cluster: Cluster, bundle: tuple[Path, svod.ExecutionPlan]) -> None:
    path, plan = bundle
    actors = cluster.actors(path, workers=2)
    pids = ray.get([a.pid.remote() for a in actors])
    results = cluster.map_plan(path.read_bytes(), shards(2), workers=2, outputs=["z"], n=10)
    assert cluster.actors(path, workers=2) == actors
    assert ray.get([a.pid.remote() for a in actors]) == pids
    assert [sorted(r) for r in results] == [["z"], ["z"]]
    want = locally(plan, shards(2)[1], 10)
    assert np.array_equal(results[1]["z"], want["z"])


def test_a_failing_shard_raises_the_workers_error_with_its_index(cluster: Cluster,
                                                                   bundle: tuple[Path, svod.ExecutionPlan]) -> None:
    path, _ = bundle
    data = shards(3)
    data[1]["n"] = N + 5  # outside the kernel's bounds, in shard 1 only
    with pytest.raises(VariableError, match="shard 1") as caught:
        cluster.map_plan(path, data, workers=2, n=N)
    assert caught.value.shard == 1
    assert "outside bounds" in str(caught.value)


def test_a_lost_actor_is_replaced_and_its_shards_retried(cluster: Cluster,
                                                         bundle: tuple[Path, svod.ExecutionPlan]) -> None:
    path, plan = bundle
    actors = cluster.actors(path, workers=2)
    kill(actors[0])
    data = shards(4)
    results = cluster.map_plan(path, data, workers=2, n=N)
    for shard, result in zip(data, results, strict=True):
        assert np.array_equal(result["z"], locally(plan, shard, N)["z"])
    assert cluster.actors(path, workers=2)[0] != actors[0]
    assert cluster.actors(path, workers=2)[1] == actors[1]


def test_a_bundle_that_is_not_there(cluster: Cluster, tmp_path: Path) -> None:
    with pytest.raises(SvodError, match="cannot read plan bundle"):
        cluster.map_plan(tmp_path / "missing.svodplan", shards(1))


def test_a_second_bundle_ends_the_first_ones_actors_when_cpus_run_out(cluster: Cluster, tmp_path: Path,
                                                                      bundle: tuple[Path, svod.ExecutionPlan]
                                                                      ) -> None:
    path, plan = bundle
    first = cluster.actors(path, workers=2)
    other = make_plan()
    other.add_buffer(svod.Buffer("CPU", dtypes.float32, 4), name="unused")  # another bundle
    other_path = tmp_path / "other.svodplan"
    other.save(other_path)
    [result] = cluster.map_plan(other_path, shards(1), workers=2, n=N)  # waits for no CPU the first holds
    assert np.array_equal(result["y"], locally(plan, shards(1)[0], N)["y"])
    assert cluster.actors(path, workers=2) != first  # started again: the second bundle's took their place


def slow_plan() -> svod.ExecutionPlan:
    """y[i] = sum over j < m of sin(x[i] + j): as slow as a shard's m asks."""
    k = svod.KernelBuilder("slow")
    m = k.var("m", 1, 1 << 24)
    y, x = k.buffer(dtypes.float32, N), k.buffer(dtypes.float32, N)
    i, j = k.range(N), k.range(m, svod.AxisKind.REDUCE)
    k.store(y[i], (x[i] + j.cast(dtypes.float32)).sin().reduce(j))
    plan = svod.ExecutionPlan("CPU")
    plan.add_kernel(k.build(), [plan.add_buffer(svod.Buffer("CPU", dtypes.float32, N), name=name)
                                for name in ("y", "x")])
    return plan


SLOW_SECONDS = 4.0
"""How long the shard an actor is killed in runs on this machine, the kill landing half a second in."""


def slow_length(plan: svod.ExecutionPlan) -> int:
    """The ``m`` that keeps ``plan`` running for about ``SLOW_SECONDS`` here, measured: a fixed one ran for
    seconds on a 2-core Zen 3 and for a tenth of one on a Zen 5 with AVX-512, which then finished the shard
    before the kill."""
    m = 1 << 14
    start = time.perf_counter()
    plan.execute(buffers={"x": np.zeros(N, np.float32), "y": np.zeros(N, np.float32)}, m=m)
    took = time.perf_counter() - start
    return min(1 << 24, max(m, int(m * SLOW_SECONDS / max(took, 1e-6))))


def test_an_actor_killed_mid_run_is_replaced_and_its_shard_retried(cluster: Cluster, tmp_path: Path) -> None:
    plan = slow_plan()
    path = tmp_path / "slow.svodplan"
    plan.save(path)
    actors = cluster.actors(path, workers=2)
    doomed = ray.get(actors[0].pid.remote())
    data = [{"x": shard["x"], "m": m} for shard, m in zip(shards(2), (slow_length(plan), 10), strict=True)]
    with ThreadPoolExecutor(1) as driver:
        running = driver.submit(cluster.map_plan, path, data, workers=2)
        time.sleep(0.5)  # shard 0 runs for seconds on the first actor
        os.kill(doomed, signal.SIGKILL)
        results = running.result(timeout=300)
    for shard, result in zip(data, results, strict=True):
        want = np.zeros(N, np.float32)
        plan.execute(buffers={"x": shard["x"], "y": want}, m=shard["m"])
        assert np.array_equal(result["y"], want)
    assert cluster.actors(path, workers=2)[0] != actors[0]
    assert ray.get(cluster.actors(path, workers=2)[0].pid.remote()) != doomed


def test_workers_on_another_cpu_compile_once_into_their_disk_cache(cluster: Cluster, tmp_path: Path) -> None:
    """A bundle whose stored CPU is not this one: its first worker compiles with the warning; the worker
    that replaces it loads the kernels from the disk cache the first one filled."""
    plan = make_plan(scale=5.0, cache=KernelCache(dataclasses.replace(settings, disk_cache=False)))
    path = tmp_path / "here.svodplan"
    plan.save(path)
    other = from_another_cpu(path, tmp_path / "other-cpu.svodplan")
    [first] = cluster.actors(other, workers=1)
    report = ray.get(first.load_report.remote())
    assert report["compiles"] > 0
    assert len(report["warnings"]) == 1 and "compiler" in report["warnings"][0]
    kill(first)
    [result] = cluster.map_plan(other, shards(1), workers=1, n=N)
    [second] = cluster.actors(other, workers=1)
    assert second != first
    assert ray.get(second.load_report.remote())["compiles"] == 0
    assert np.array_equal(result["y"], locally(plan, shards(1)[0], N)["y"])


def test_a_jitted_functions_results_come_back_shaped(cluster: Cluster, tmp_path: Path) -> None:
    """Arrays ``map_plan`` returns have the shapes the plan's buffers were given (a jitted function's arrays
    keep theirs), not the flat buffers'."""

    @svod.jit
    def transposed(x):
        out = np.empty((x.shape[1], x.shape[0]))
        for i in svod.prange(x.shape[0]):
            for j in range(x.shape[1]):
                out[j, i] = x[i, j]
        return out

    x = np.arange(6.0).reshape(2, 3)
    path = tmp_path / "transposed.svodplan"
    transposed.save(path, x)
    [result] = cluster.map_plan(path, [{"x": x}], workers=1)
    assert result["out"].shape == (3, 2)
    np.testing.assert_array_equal(result["out"], x.T)


def test_the_bench_takes_the_shard_overhead_on_a_running_cluster(cluster: Cluster) -> None:
    """``svod bench``'s distributed step on this module's cluster (the tiny whole bench of
    ``tests/benchmarks/test_harness.py`` leaves it here rather than start Ray again): one figure, with Ray's
    own round trip in its note; the cluster still runs after it."""
    from benchmarks.distributed import SHARDS, shard_overhead

    [metric] = shard_overhead("CPU", cluster)
    assert (metric.name, metric.unit, metric.better) == ("distributed.shard_overhead_ms", "ms", "lower")
    assert isinstance(metric.svod, float) and metric.svod >= 0  # less the plan's own run: no less than nothing
    assert f"map_plan of {SHARDS} shards" in metric.note and "Ray's round trip" in metric.note
    assert ray.is_initialized()
