"""``Cluster`` and ``map_plan``: a plan bundle run once per shard on Ray actors.

::

    driver                                   actors (one svod device each, one CPU or GPU each)
      bundle bytes ── ray.put, once ──────>  PlanWorker: write the bytes to a file, svod.load_plan (once;
                                             kept between calls, so a second map_plan loads nothing)
      shard i ─── actor i mod n ───────────> run: bind the shard's arrays by name, execute, return the
                                             plan's outputs (the named buffers it writes)
      outputs, in shard order <───────────

Shards are mappings of buffer names to numpy arrays (read zero-copy from Ray's object store on the same
node) and of variable names to ints. A shard whose run raises a ``SvodError`` raises that error on the
driver, its message saying which shard (``err.shard``). An actor lost mid-run (its process killed, its
node gone) is replaced by a new one, which loads the bundle again, and each of its shards is retried
once there; a shard whose worker is lost twice raises ``SvodError``.

A bundle built for another CPU (or svod, or LLVM) is compiled again from its stored ASTs by each worker that
loads it, with a ``BundleWarning`` in the worker's log, into that machine's disk cache: the next worker
there to load it compiles nothing.

Ray is imported when a ``Cluster`` is made, never before: svod works without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from svod.errors import BundleWarning, SvodError
from svod.runtime import ExecutionPlan, default_cache, load_plan

Shard = Mapping[str, Any]


class PlanWorker:
    """The body of a Ray actor: one device, one loaded plan, any number of runs."""

    def __init__(self, bundle: bytes, device: str) -> None:
        self.directory = tempfile.mkdtemp(prefix="svod-worker-")
        path = Path(self.directory) / "plan.svodplan"
        path.write_bytes(bundle)
        cache = default_cache()
        compiled_before = cache.stats.compiles
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BundleWarning)
            self.plan = load_plan(path, device=device, cache=cache)
        for warning in caught:  # into the worker's log, as if not caught
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
        self.loading = {"compiles": cache.stats.compiles - compiled_before,
                        "warnings": [str(w.message) for w in caught if issubclass(w.category, BundleWarning)]}
        """What loading the bundle took: the kernels compiled (0 where its binaries fit this machine, or this
        machine's disk cache has them) and the ``BundleWarning``s it gave."""
        self.outputs = self.plan.written_names()
        self.runs = 0

    def pid(self) -> int:
        return os.getpid()

    def load_report(self) -> dict[str, Any]:
        return self.loading

    def run(self, index: int, shard: Shard, var_vals: Mapping[str, int],
            outputs: Sequence[str] | None) -> dict[str, np.ndarray]:
        """Run the plan on one shard; the outputs it asks for (by default every named buffer the plan
        writes), as arrays of their own. Every named buffer the plan writes is bound to a zeroed array of
        this run (or a copy of the shard's), so no shard sees another's results."""
        try:
            plan = self.plan
            arrays: dict[int | str, Any] = {}
            values = dict(var_vals)
            for name, value in shard.items():
                if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
                    values[name] = int(value)
                else:
                    arrays[name] = value
            wanted = list(self.outputs if outputs is None else outputs)
            for name in wanted:
                if name not in plan.buffer_names:
                    raise SvodError(f"the plan has no buffer named {name} to return", stage="bind", value=name)
            for name in dict.fromkeys([*self.outputs, *wanted]):  # every shard starts from zeroed outputs
                if name in arrays:  # read and written: a copy of its own (object store arrays are read-only)
                    arrays[name] = np.array(arrays[name], copy=True)
                else:
                    slot = plan.buffer_names[name]
                    buf = plan.buffers[slot]
                    arrays[name] = np.zeros(plan.buffer_shapes.get(slot, (buf.size,)), buf.dtype.numpy)
            plan.execute_with_vars(values, buffers=arrays)
            self.runs += 1
            return {name: arrays[name] for name in wanted}
        except SvodError as err:
            err.in_shard(index)
            raise

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class _Pool:
    """The actors that hold one bundle on one kind of device."""

    bundle: Any
    """The bundle's bytes in the object store."""
    device: str
    options: dict[str, Any]
    actors: list[Any] = field(default_factory=list)
    replaced: int = 0
    """Actors started again after one was lost."""


class Cluster:
    """A Ray cluster to run plans on: the running one if Ray is initialised (or ``address`` names one),
    else a local one with ``num_cpus`` CPUs, shut down by ``shutdown()`` (or leaving a ``with`` block).

    Actors are kept per (bundle, device, worker count), so a second ``map_plan`` with the same bundle
    loads nothing; each holds one CPU, and when a new bundle's actors would not fit the cluster's CPUs,
    the actors of the least recently used bundles end first."""

    def __init__(self, num_cpus: int | None = None, address: str | None = None, **init_options: Any) -> None:
        try:
            import ray
        except ImportError as err:
            raise SvodError("svod.distributed needs Ray: python -m pip install 'svod[ray]' (or ray)",
                            stage="plan") from err
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            options = {"include_dashboard": False, "log_to_driver": False, **init_options}
            if address is not None:
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=num_cpus, **options)
                self.started = True
        self._worker = ray.remote(PlanWorker)
        self._pools: dict[tuple[str, str, int, float], _Pool] = {}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """End this object's actors, and Ray itself if this object started it."""
        for pool in self._pools.values():
            for actor in pool.actors:
                self.ray.kill(actor)
        self._pools.clear()
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False

    def actors(self, bundle: str | os.PathLike[str] | bytes | ExecutionPlan, device: str = "CPU",
               workers: int | None = None, num_gpus: float = 0) -> list[Any]:
        """The actors holding ``bundle`` (started and loaded now if there are none yet)."""
        return list(self._pool(bundle_bytes(bundle), device, workers, num_gpus).actors)

    def map_plan(self, bundle: str | os.PathLike[str] | bytes | ExecutionPlan, shards: Sequence[Shard], *,
                 device: str = "CPU", workers: int | None = None, num_gpus: float = 0,
                 outputs: Sequence[str] | None = None, **var_vals: int) -> list[dict[str, np.ndarray]]:
        """Run the plan once per shard on the cluster's actors; per shard, its outputs by name, in shard
        order. ``bundle`` is a saved plan's path, its bytes, or a plan (saved now). ``var_vals`` apply to
        every shard; a shard's own ints override them. ``workers`` actors (default: one per CPU of the
        cluster) each take one CPU and ``num_gpus`` GPUs."""
        pool = self._pool(bundle_bytes(bundle), device, workers, num_gpus)
        ray = self.ray
        count = len(pool.actors)
        sent = [pool.actors[i % count] for i in range(len(shards))]
        pending = [actor.run.remote(i, shard, var_vals, outputs) for i, (actor, shard) in
                   enumerate(zip(sent, shards, strict=True))]
        results: list[dict[str, np.ndarray]] = []
        for i, ref in enumerate(pending):
            try:
                results.append(self._result(ref))
            except ray.exceptions.RayActorError:
                slot = i % count
                if pool.actors[slot] is sent[i]:  # the first of its shards to notice: start a new actor
                    pool.actors[slot] = self._start(pool)
                    pool.replaced += 1
                try:
                    results.append(self._result(pool.actors[slot].run.remote(i, shards[i], var_vals, outputs)))
                except ray.exceptions.RayActorError as err:
                    raise SvodError(f"shard {i}: its worker was lost twice ({type(err).__name__})",
                                    stage="execute", value=i) from err
        return results

    def _result(self, ref: Any) -> dict[str, np.ndarray]:
        try:
            result: dict[str, np.ndarray] = self.ray.get(ref)
            return result
        except self.ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, SvodError):
                raise cause from None
            raise SvodError(f"a worker failed: {err}", stage="execute") from err

    def _pool(self, bundle: bytes, device: str, workers: int | None, num_gpus: float) -> _Pool:
        if workers is None:
            workers = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        if workers < 1:
            raise SvodError("map_plan needs at least one worker", stage="plan", value=workers)
        key = (hashlib.sha256(bundle).hexdigest(), device, workers, num_gpus)
        pool = self._pools.pop(key, None)
        if pool is None:
            self._make_room(workers)
            pool = _Pool(self.ray.put(bundle), device, {"num_cpus": 1, "num_gpus": num_gpus})
            pool.actors = [self._start(pool) for _ in range(workers)]
        self._pools[key] = pool  # the most recently used last
        return pool

    def _make_room(self, workers: int) -> None:
        """End the actors of the least recently used bundles until ``workers`` more fit the cluster's CPUs
        (each actor holds one for its life: new ones would wait for ever)."""
        capacity = int(self.ray.cluster_resources().get("CPU", 1))
        held = sum(len(pool.actors) for pool in self._pools.values())
        for key in list(self._pools):
            if held + workers <= capacity:
                break
            dropped = self._pools.pop(key)
            for actor in dropped.actors:
                self.ray.kill(actor)
            held -= len(dropped.actors)

    def _start(self, pool: _Pool) -> Any:
        return self._worker.options(**pool.options).remote(pool.bundle, pool.device)


def bundle_bytes(bundle: str | os.PathLike[str] | bytes | ExecutionPlan) -> bytes:
    """A plan bundle's bytes: given as bytes, read from a path, or a plan saved now."""
    if isinstance(bundle, bytes):
        return bundle
    if isinstance(bundle, ExecutionPlan):
        with tempfile.TemporaryDirectory(prefix="svod-bundle-") as directory:
            path = Path(directory) / "plan.svodplan"
            bundle.save(path)
            return path.read_bytes()
    try:
        return Path(bundle).read_bytes()
    except OSError as err:
        raise SvodError(f"cannot read plan bundle {bundle}: {err}", stage="plan", value=str(bundle)) from err


_default: Cluster | None = None


def map_plan(bundle: str | os.PathLike[str] | bytes | ExecutionPlan, shards: Sequence[Shard], *,
             cluster: Cluster | None = None, **options: Any) -> list[dict[str, np.ndarray]]:
    """``Cluster.map_plan`` on ``cluster``, or on one made (and kept) for the process: the running Ray, or a
    local one."""
    global _default  # noqa: PLW0603 - the process's cluster, made on first use
    if cluster is None:
        if _default is None:
            _default = Cluster()
        cluster = _default
    return cluster.map_plan(bundle, shards, **options)
