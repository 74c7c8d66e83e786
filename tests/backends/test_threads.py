"""CPU kernels split across core_id workers give the same bits as one thread."""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.backends.cpu_team import thread_team
from svod.codegen.lower import THREAD_MIN_WORK
from svod.codegen.lower_cpu import CHUNKS_PER_THREAD
from svod.config import settings
from svod.runtime import KernelCache
from tests.helpers import cpu_device


def _devices(compiler: str):
    return cpu_device(1, compiler), cpu_device(3, compiler)


CHUNKS = 3 * (CHUNKS_PER_THREAD - 1)
"""How many ids (chunks) a launch with work for many makes on the 3-thread device over 2**20 elements (or 256
partials): four chunks a thread, each rounded up to 16, would reach further past the end than one does."""


def _kernels():
    k = KernelBuilder("big_elementwise")
    n = k.var("n", 1, 1 << 20)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], (x[i] * 1.5 - 2.0).maximum(x[i].sin()))
    elementwise = k.build()
    k = KernelBuilder("row_sums")
    rows, cols = 999, 1031
    out, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, rows * cols)
    r = k.range(rows)
    c = k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r * cols + c].reduce(c))
    return elementwise, k.build()


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_threaded_results_equal_single_threaded(compiler):
    one, many = _devices(compiler)
    cache = KernelCache()
    elementwise, row_sums = _kernels()
    rng = np.random.default_rng(0)
    for size in (1, 31, 100_003, 1 << 20):
        x = rng.standard_normal(1 << 20).astype(np.float32)
        results = []
        for device in (one, many):
            out = svod.Buffer.from_numpy(np.zeros(1 << 20, np.float32), device)
            cache.get(elementwise, device)([out, svod.Buffer.from_numpy(x, device)], {"n": size})
            results.append(out.numpy())
        np.testing.assert_array_equal(results[0], results[1])
        assert (results[1][size:] == 0).all()
    x = rng.standard_normal(999 * 1031).astype(np.float32)
    sums = []
    for device in (one, many):
        out = svod.Buffer.from_numpy(np.zeros(999, np.float32), device)
        cache.get(row_sums, device)([out, svod.Buffer.from_numpy(x, device)])
        sums.append(out.numpy())
    np.testing.assert_array_equal(sums[0], sums[1])


def test_threaded_kernels_launch_chunks_for_every_thread():
    """A launch with work enough makes ``CHUNKS_PER_THREAD`` chunks for each of the 3 threads, which they take
    one at a time: a thread that loses its core delays only the chunk it holds."""
    one, many = _devices("llvm")
    elementwise, row_sums = _kernels()
    threaded = KernelCache().get(elementwise, many)
    assert threaded.var_names == ("n",)  # core_id: the CPU ABI's argument
    assert threaded.launch.static is None  # how many workers a launch wakes depends on n
    assert threaded.launch.dims({"n": 1 << 20}).global_size == (CHUNKS, 1, 1)
    # 999 x 1031, rows streamed four a pass: 249 passes, 3 chunks of 83 exactly; 6, 9 or 12 chunks would reach
    # past the 249th (an index's bounds are the chunks' reach), so one a thread
    fixed = KernelCache().get(row_sums, many)
    assert fixed.launch.static is not None and fixed.launch.static.global_size == (3, 1, 1)
    single = KernelCache().get(elementwise, one)
    assert single.var_names == ("n",) and single.global_size[0].arg == 1


class _TeamRuns:
    """The thread team's launches (their worker counts), recorded as they run."""

    def __init__(self, monkeypatch) -> None:
        team = thread_team()
        self.workers: list[int] = []
        run = team.run

        def recorded(job, workers: int) -> None:
            self.workers.append(workers)
            run(job, workers)

        monkeypatch.setattr(team, "run", recorded)


def test_a_launch_too_small_to_repay_waking_the_team_runs_on_the_calling_thread(monkeypatch):
    """A kernel split over 3 threads for up to 2**20 elements: a launch of a few elements wakes no worker (it
    runs on the thread that launched it), one of twice ``THREAD_MIN_WORK`` two, one of 2**20 every thread, with
    ``CHUNKS_PER_THREAD`` chunks each, and every result is the one-thread result."""
    one, many = _devices("llvm")
    elementwise, _ = _kernels()
    kernel = KernelCache().get(elementwise, many)
    reference = KernelCache().get(elementwise, one)
    team = _TeamRuns(monkeypatch)
    x = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32)
    for size, woken in ((1, []), (100, []), (THREAD_MIN_WORK, []), (THREAD_MIN_WORK + 1, [2]), (1 << 20, [CHUNKS])):
        team.workers.clear()
        out, want = svod.Buffer("CPU", dtypes.float32, 1 << 20), svod.Buffer("CPU", dtypes.float32, 1 << 20)
        for buffer in (out, want):
            buffer.copyin(np.zeros(1 << 20, np.float32))
        kernel([out, svod.Buffer.from_numpy(x)], {"n": size})
        assert team.workers == woken, size
        reference([want, svod.Buffer.from_numpy(x)], {"n": size})
        np.testing.assert_array_equal(out.numpy(), want.numpy())
        assert kernel.launch.dims({"n": size}).global_size == (woken[0] if woken else 1, 1, 1)


def _growing():
    """``out[i] += 1`` for ``i < m``: a plan loop over ``m`` launches it from 1 element to 2**17."""
    k = KernelBuilder("grow")
    m = k.var("m", 1, 1 << 17)
    out = k.buffer(dtypes.int32, 1 << 17)
    i = k.range(m)
    k.store(out[i], out[i] + 1)
    return k.build()


def test_plans_launch_small_and_large_steps_alike():
    """A plan loop whose kernel grows from 1 element to more than 3 workers' worth (the native replay
    evaluates the worker count of each turn), and a step whose size the plan fixes (its worker count
    evaluated once, at prepare): all dispatched natively, and the values are right."""
    _, many = _devices("llvm")
    plan = svod.ExecutionPlan(many)
    out = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(1 << 17, np.int32)), name="out")
    turns = list(range(1, 1 << 17, 20_000))
    plan.loop("m", 1, 1 << 17, 20_000, [plan.add_kernel(_growing(), [out])])
    plan.add_kernel(_growing(), [out], fixedvars={"m": 5})
    plan.execute()
    assert plan._native is not None and not plan._native.callbacks  # every step dispatched by the native replay
    want = np.zeros(1 << 17, np.int32)
    for m in [*turns, 5]:
        want[:m] += 1
    np.testing.assert_array_equal(plan.buffers[out].numpy(), want)
    plan.close()


def test_small_kernels_stay_on_one_thread():
    _, many = _devices("llvm")
    k = KernelBuilder("tiny")
    out = k.buffer(dtypes.int32, 100)
    i = k.range(100)
    k.store(out[i], i.cast(dtypes.int32))
    assert KernelCache().get(k.build(), many).global_size[0].arg == 1


def test_the_thread_team_is_real_here():
    team = thread_team()
    assert team.parallel, team.error


def _stats():
    k = KernelBuilder("stats")
    n = k.var("n", 1, 1 << 20)
    x = k.buffer(dtypes.float32, n)
    total, top, mean = (k.buffer(dtypes.float32, 1) for _ in range(3))
    r = k.range(n, AxisKind.REDUCE)
    k.store(total[0], x[r].reduce(r))
    k.store(top[0], x[r].reduce(r, op=svod.Ops.MAX))
    k.store(mean[0], x[r].reduce(r) / n.cast(dtypes.float32))
    return k.build()


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_a_large_reduction_is_split_across_threads(compiler):
    _, many = _devices(compiler)
    kernel = KernelCache().get(_stats(), many)
    assert type(kernel.program).__name__ == "PartsProgram" and kernel.var_names == ("n",)
    ids = kernel.program.parts[0].launch.dims({"n": 1 << 20}).global_size
    assert ids[1:] == (1, 1) and ids[0] >= 3 and ids[0] % 3 == 0  # on every thread, in equal shares of chunks
    assert kernel.outs == (1, 2, 3) and kernel.ins == (0,) and [v.name for v in kernel.variables] == ["n"]
    x = np.random.default_rng(5).standard_normal(1 << 20).astype(np.float32)
    for n in (1, 2, 47, 100_003, 1 << 20):
        first = [np.zeros(1, np.float32) for _ in range(3)]
        svod.run(_stats(), [x, *first], device=many, n=n)
        again = [np.zeros(1, np.float32) for _ in range(3)]
        svod.run(_stats(), [x, *again], device=many, n=n)
        assert [a[0] for a in first] == [a[0] for a in again]  # the combine order is fixed
        reference = x[:n].astype(np.float64)
        np.testing.assert_allclose(first[0][0], reference.sum(), rtol=1e-4, atol=1e-3)
        assert first[1][0] == x[:n].max()
        np.testing.assert_allclose(first[2][0], reference.mean(), rtol=1e-4, atol=1e-6)


def test_split_reductions_run_in_plans_and_load_from_disk(tmp_path):
    _, many = _devices("llvm")
    config = dataclasses.replace(settings, cache_dir=tmp_path, disk_cache=True)
    cold = KernelCache(config)
    plan = svod.ExecutionPlan(many, cold)
    x = plan.add_buffer(svod.Buffer.from_numpy(np.ones(1 << 20, np.float32)))
    outs = [plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 1)) for _ in range(3)]
    plan.add_kernel(_stats(), [x, *outs])
    plan.execute(n=1000)
    assert [plan.buffers[o].numpy()[0] for o in outs] == [1000.0, 1.0, 1.0]
    assert cold.stats.compiles == 2
    warm = KernelCache(config)
    warm.get(_stats(), many)
    assert warm.stats.compiles == 0 and warm.disk is not None and warm.disk.stats.hits == 2


def test_without_a_thread_team_workers_run_in_turn():
    """The path taken where there is no thread team: the same workers, one after another."""
    _, many = _devices("llvm")
    elementwise, _ = _kernels()
    kernel = KernelCache().get(elementwise, many)
    x = np.random.default_rng(9).standard_normal(1 << 20).astype(np.float32)
    reference = svod.Buffer("CPU", dtypes.float32, 1 << 20)
    kernel([reference, svod.Buffer.from_numpy(x)], {"n": 1 << 20})
    expected = reference.numpy()
    assert expected.any()
    out, src = svod.Buffer("CPU", dtypes.float32, 1 << 20), svod.Buffer.from_numpy(x)
    bufs = (ctypes.c_void_p * 2)(out.address, src.address)
    variables = (ctypes.c_int64 * 2)(*kernel.vals({"n": 1 << 20}))
    kernel.program.run_job(None, bufs, variables, kernel.launch.dims({"n": 1 << 20}).global_size[0])
    np.testing.assert_array_equal(out.numpy(), expected)
