"""``svod.distributed`` on a local Ray cluster of 2 CPUs: shards run on actors that load the bundle once,
outputs in order and bit for bit those of one process, a failing shard's error with its index, and a lost
actor replaced with its shards retried."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.errors import SvodError, VariableError

ray = pytest.importorskip("ray", reason="svod.distributed needs the ray extra (pip install ray)")

from svod.distributed import Cluster, map_plan  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
N = 1000


def make_plan() -> svod.ExecutionPlan:
    """y = sin(x) * 3 + x for the first n elements, and the square of each in z."""
    k = svod.KernelBuilder("wave")
    n = k.var("n", 1, N)
    y, x = k.buffer(dtypes.float32, N), k.buffer(dtypes.float32, N)
    i = k.range(n)
    k.store(y[i], x[i].sin() * 3.0 + x[i])
    square = svod.KernelBuilder("square")
    z, y2 = square.buffer(dtypes.float32, N), square.buffer(dtypes.float32, N)
    j = square.range(N)
    square.store(z[j], y2[j] * y2[j])
    plan = svod.ExecutionPlan("CPU")
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
    ray.kill(actors[0], no_restart=True)
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
