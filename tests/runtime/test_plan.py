"""Execution plans: dependencies from byte ranges, replays with changing sizes, variable checks that run
nothing, host-parallel steps equal to sequential ones, profiles and traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

import svod
from svod import AxisKind, ExecutionPlan, KernelBuilder, dtypes
from svod.errors import BufferMismatchError, SvodError, VariableError
from svod.runtime.plan import _overlapped
from tests.helpers import cpu_device


def _axpb(name: str, a: float, b: float, limit: int = 1 << 16):
    """out[i] = x[i] * a + b over a symbolic n."""
    k = KernelBuilder(name)
    n = k.var("n", 1, limit)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * a + b)
    return k.build()


def _buffers(plan: ExecutionPlan, count: int, size: int, fill: float = 0.0) -> list[int]:
    return [plan.add_buffer(svod.Buffer.from_numpy(np.full(size, fill + j, np.float32))) for j in range(count)]


def test_raw_chain_and_an_independent_kernel():
    plan = ExecutionPlan("CPU")
    a, b, c, d, e = _buffers(plan, 5, 64)
    k0 = plan.add_kernel(_axpb("first", 2.0, 0.0, 64), [b, a])
    k1 = plan.add_kernel(_axpb("second", 1.0, 1.0, 64), [c, b])
    k2 = plan.add_kernel(_axpb("other", 3.0, 0.0, 64), [e, d])
    k3 = plan.add_kernel(_axpb("overwrite_input", 1.0, 5.0, 64), [a, d])
    plan.prepare()
    deps = {p.id: p.dependencies for p in plan.prepared_kernels}
    assert deps == {k0: (), k1: (k0,), k2: (), k3: (k0,)}
    plan.execute(n=64)
    np.testing.assert_array_equal(plan.buffers[c].numpy(), np.full(64, 1.0, np.float32))
    np.testing.assert_array_equal(plan.buffers[e].numpy(), np.full(64, 9.0, np.float32))
    np.testing.assert_array_equal(plan.buffers[a].numpy(), np.full(64, 8.0, np.float32))


def test_write_after_write_orders():
    plan = ExecutionPlan("CPU")
    a, b, c = _buffers(plan, 3, 16)
    k0 = plan.add_kernel(_axpb("w1", 1.0, 1.0, 16), [c, a])
    k1 = plan.add_kernel(_axpb("w2", 1.0, 2.0, 16), [c, b])
    plan.prepare()
    assert plan.prepared_kernels[1].dependencies == (k0,)
    assert plan.prepared_kernels[1].id == k1


def test_overlapping_and_disjoint_views_of_one_base():
    plan = ExecutionPlan("CPU")
    base = svod.Buffer.from_numpy(np.zeros(100, np.float32))
    src = plan.add_buffer(svod.Buffer.from_numpy(np.arange(100, dtype=np.float32)))
    low, high = plan.add_buffer(base.view(0, 50)), plan.add_buffer(base.view(50, 50))
    overlap = plan.add_buffer(base.view(40, 20))
    whole = plan.add_buffer(base)
    out = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(100, np.float32)))
    k_low = plan.add_kernel(_axpb("low", 1.0, 0.0), [low, src], fixedvars={"n": 50})
    k_high = plan.add_kernel(_axpb("high", 1.0, 100.0), [high, src], fixedvars={"n": 50})
    k_overlap = plan.add_kernel(_axpb("overlap", 0.0, -1.0), [overlap, src], fixedvars={"n": 20})
    k_read = plan.add_kernel(_axpb("read_all", 1.0, 0.0), [out, whole], fixedvars={"n": 100})
    plan.prepare()
    deps = {p.id: set(p.dependencies) for p in plan.prepared_kernels}
    assert deps[k_low] == set() and deps[k_high] == set()
    assert deps[k_overlap] == {k_low, k_high}
    assert deps[k_read] == {k_low, k_high, k_overlap}
    plan.execute()
    expected = np.concatenate([np.arange(50), np.arange(50) + 100]).astype(np.float32)
    expected[40:60] = -1
    np.testing.assert_array_equal(plan.buffers[out].numpy(), expected)


def test_reads_never_order_against_reads():
    plan = ExecutionPlan("CPU")
    x, o1, o2 = _buffers(plan, 3, 32)
    plan.add_kernel(_axpb("r1", 1.0, 0.0, 32), [o1, x])
    plan.add_kernel(_axpb("r2", 1.0, 0.0, 32), [o2, x])
    plan.prepare()
    assert [p.dependencies for p in plan.prepared_kernels] == [(), ()]


def test_copies_take_part_in_dependencies():
    plan = ExecutionPlan("CPU")
    a, b, c = _buffers(plan, 3, 8, fill=1.0)
    k0 = plan.add_kernel(_axpb("double", 2.0, 0.0, 8), [b, a])
    copy = plan.add_copy(c, b)
    k1 = plan.add_kernel(_axpb("inc", 1.0, 1.0, 8), [a, c])
    plan.prepare()
    assert plan.prepared_kernels[1].dependencies == (k0, copy)  # every earlier conflicting step, in plan order
    assert k1 == 2
    plan.execute(n=8)
    np.testing.assert_array_equal(plan.buffers[a].numpy(), np.full(8, 3.0, np.float32))
    with pytest.raises(BufferMismatchError):
        other = ExecutionPlan("CPU")
        i = other.add_buffer(svod.Buffer("CPU", dtypes.float32, 4))
        j = other.add_buffer(svod.Buffer("CPU", dtypes.float32, 5))
        other.add_copy(i, j)


def test_replays_with_changing_sizes():
    plan = ExecutionPlan("CPU")
    x, y = _buffers(plan, 2, 5000)
    plan.buffers[x].copyin(np.arange(5000, dtype=np.float32))
    plan.add_kernel(_axpb("grow", 2.0, 1.0, 5000), [y, x])
    for n in (1, 7, 4099, 5000, 2):
        plan.buffers[y].copyin(np.full(5000, -1.0, np.float32))
        plan.execute(n=n)
        result = plan.buffers[y].numpy()
        np.testing.assert_array_equal(result[:n], np.arange(n, dtype=np.float32) * 2 + 1)
        assert (result[n:] == -1).all()
        assert plan.prepared_kernels[0].vals[plan.prepared_kernels[0].kernel.var_names.index("n")] == n


MOST_M, MOST_N, MOST_DEPTH = 600, 1024, 160


class PackingPlan:
    """A plan of one matmul of variable sizes, up to ``MOST_*``, that packs ``b`` into a buffer of its own as large as
    a run's sizes ask (``b`` of 1.1 MB at the most, larger than a block on any host)."""

    def __init__(self) -> None:
        k = KernelBuilder("mm_of_sizes")
        m, n, depth = k.var("m", 0, MOST_M), k.var("n", 1, MOST_N), k.var("depth", 0, MOST_DEPTH)
        out = k.buffer(dtypes.float64, MOST_M * MOST_N)
        a, b = k.buffer(dtypes.float64, MOST_M * MOST_DEPTH), k.buffer(dtypes.float64, MOST_DEPTH * MOST_N)
        i, j, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
        k.store(out[i * n + j], (a[i * depth + r] * b[r * n + j]).reduce(r))
        self.device = cpu_device(2, "llvm")
        self.plan = ExecutionPlan(self.device)
        self.ids = [self.plan.add_buffer(svod.Buffer(self.device, dtypes.float64, size))
                    for size in (MOST_M * MOST_N, MOST_M * MOST_DEPTH, MOST_DEPTH * MOST_N)]
        self.plan.add_kernel(k.build(), self.ids)
        self.plan.prepare()
        self.rng = np.random.default_rng(5)

    def run(self, rows: int, columns: int, turns: int) -> None:
        """A run of the plan on new operands of these sizes, checked against numpy's ``a @ b``."""
        x, y = self.rng.standard_normal((rows, turns)), self.rng.standard_normal((turns, columns))
        self.plan.buffers[self.ids[1]].copyin(np.resize(x.ravel(), MOST_M * MOST_DEPTH))
        self.plan.buffers[self.ids[2]].copyin(np.resize(y.ravel(), MOST_DEPTH * MOST_N))
        self.plan.execute(m=rows, n=columns, depth=turns)
        got = self.plan.buffers[self.ids[0]].numpy()[:rows * columns].reshape(rows, columns)
        np.testing.assert_allclose(got, x @ y, rtol=1e-12, atol=1e-12)


def test_a_matmul_packing_b_into_a_buffer_of_its_own_sizes_it_for_each_replay():
    """The plan allocates the copy on the first run that packs and again when a run needs more (the native
    replay leaves such a step to Python), and every run is ``a @ b``, packed or not."""
    packing = PackingPlan()
    launch = packing.plan.prepared_kernels[0].launch
    assert [part.program.name for part in launch.program.parts] == [
        "mm_of_sizes_pack", "mm_of_sizes_packed", "mm_of_sizes"]
    for sizes in ((512, 64, 32), (520, 1000, 140), (3, 7, 5), (512, 1024, 160), (600, 1000, 40)):
        packing.run(*sizes)
    assert launch.memory.nbytes == {3: 160 * 1032 * 8}  # the largest copy; no status: all proven


def test_an_own_buffer_that_cannot_grow_leaves_the_plan_pointed_at_the_one_it_has(monkeypatch):
    """A larger copy that cannot be allocated: the run is refused, and the launch keeps the copy it had, not a
    freed block the pool may give another buffer (which a later run of the size it had would write into)."""
    packing = PackingPlan()
    packing.run(512, 1000, 140)
    memory = packing.plan.prepared_kernels[0].launch.memory
    had = dict(memory.nbytes)
    allocator = type(packing.device.allocator)
    allocate = allocator._alloc

    def refused(self, nbytes):  # the device out of memory, once
        monkeypatch.setattr(allocator, "_alloc", allocate)
        raise SvodError("out of memory", stage="buffer", value=nbytes)

    monkeypatch.setattr(allocator, "_alloc", refused)
    with pytest.raises(SvodError, match="out of memory"):
        packing.run(512, 1024, 160)
    assert memory.nbytes == had
    other = packing.device.allocator.allocate(had[3])  # the pool's block of that size, were the launch's freed
    other.array[:] = 0x5A
    packing.run(512, 1000, 140)
    assert (other.array == 0x5A).all()
    packing.run(512, 1024, 160)


def test_fixed_vars_refuse_a_new_value():
    plan = ExecutionPlan("CPU")
    x, y = _buffers(plan, 2, 64)
    plan.add_kernel(_axpb("fixed", 1.0, 1.0, 64), [y, x], fixedvars={"n": 10})
    plan.execute()
    with pytest.raises(VariableError, match="fixed"):
        plan.execute(n=20)
    assert plan.prepared_kernels[0].fixedvars == {"n": 10} and plan.prepared_kernels[0].runtime_vars == ()


def test_fixed_vars_are_checked_at_prepare():
    plan = ExecutionPlan("CPU")
    x, y = _buffers(plan, 2, 64)
    plan.add_kernel(_axpb("badfix", 1.0, 1.0, 64), [y, x], fixedvars={"n": 100})
    with pytest.raises(VariableError, match=r"n=100 is outside bounds \[1, 64\]"):
        plan.prepare()


@pytest.mark.parametrize(("values", "message"), [
    ({}, "missing runtime value for variable n"),
    ({"n": 0}, r"n=0 is outside bounds \[1, 64\]"),
    ({"n": 65}, r"n=65 is outside bounds \[1, 64\]"),
    ({"n": 4, "q": 1}, "unknown variable q"),
    ({"n": 2.0}, "must be integer"),
])
def test_bad_variables_run_nothing(values, message):
    plan = ExecutionPlan("CPU")
    x, y, z = _buffers(plan, 3, 64, fill=5.0)
    plan.add_kernel(_axpb("first", 1.0, 1.0, 64), [y, x], fixedvars={"n": 64})
    plan.add_kernel(_axpb("second", 1.0, 1.0, 64), [z, y])
    before = [b.numpy() for b in plan.buffers]
    with pytest.raises(VariableError, match=message):
        plan.execute_with_vars(values)
    for buf, old in zip(plan.buffers, before, strict=True):
        np.testing.assert_array_equal(buf.numpy(), old)


def test_prepare_checks_buffers_for_the_largest_sizes():
    plan = ExecutionPlan("CPU")
    x, y = _buffers(plan, 2, 100)
    plan.add_kernel(_axpb("big", 1.0, 1.0, 1000), [y, x])
    with pytest.raises(BufferMismatchError, match="has 100 elements, the kernel needs 1000"):
        plan.prepare()
    plan2 = ExecutionPlan("CPU")
    i = plan2.add_buffer(svod.Buffer.from_numpy(np.zeros(4, np.int32)))
    plan2.add_kernel(_axpb("dtype", 1.0, 1.0, 4), [i, i])
    with pytest.raises(BufferMismatchError, match="int32"):
        plan2.prepare()
    with pytest.raises(BufferMismatchError, match="no plan buffer 7"):
        plan2.add_kernel(_axpb("x", 1.0, 1.0, 4), [7, 0])


def _heavy(name: str, seed: float, size: int):
    k = KernelBuilder(name)
    out, x = k.buffer(dtypes.float32, size), k.buffer(dtypes.float32, size)
    i = k.range(size)
    v = x[i] + seed
    for _ in range(4):
        v = (v * 0.999 + 0.25).sin()
    k.store(out[i], v)
    return k.build()


def _heavy_numpy(x: np.ndarray, seed: float) -> np.ndarray:
    """What ``_heavy(name, seed, size)`` computes, step by step in float32 (the plan is checked against
    numpy, not against the same compiled kernel run another way)."""
    v = x + np.float32(seed)
    for _ in range(4):
        v = np.sin(v * np.float32(0.999) + np.float32(0.25))
    return v


def test_sixteen_independent_kernels_equal_sequential_execution():
    """One CPU thread a kernel: the sixteen run on host threads at once."""
    size = 1 << 16
    rng = np.random.default_rng(0)
    plan = ExecutionPlan(cpu_device(1, "llvm"))
    inputs = [plan.add_buffer(svod.Buffer.from_numpy(rng.standard_normal(size).astype(np.float32)))
              for _ in range(16)]
    outputs = [plan.add_buffer(svod.Buffer("CPU", dtypes.float32, size)) for _ in range(16)]
    kernels = [_heavy(f"heavy{j}", float(j), size) for j in range(16)]
    for j in range(16):
        plan.add_kernel(kernels[j], [outputs[j], inputs[j]])
    plan.prepare()
    assert all(p.dependencies == () for p in plan.prepared_kernels)
    assert _overlapped(plan._levels[0]) == (plan._levels[0], [])
    expected = [_heavy_numpy(plan.buffers[inputs[j]].numpy(), float(j)) for j in range(16)]
    for _ in range(3):
        plan.execute()
        for j in range(16):
            np.testing.assert_allclose(plan.buffers[outputs[j]].numpy(), expected[j], rtol=1e-5, atol=1e-6)


def test_threaded_kernels_of_one_level_take_the_team_in_turn():
    """Four CPU threads whatever this machine has (a one-core host would otherwise split no kernel): two
    independent kernels, each split over the threads, run one after the other, not on host threads at once
    (where each would take the cores from the other)."""
    size = 1 << 18
    plan = ExecutionPlan(cpu_device(4, "llvm"))
    x = plan.add_buffer(svod.Buffer.from_numpy(np.linspace(-1, 1, size, dtype=np.float32)))
    a, b, c = (plan.add_buffer(svod.Buffer("CPU", dtypes.float32, size)) for _ in range(3))
    k = KernelBuilder("rowsum")
    out, inp = k.buffer(dtypes.float32, 512), k.buffer(dtypes.float32, size)
    r = k.range(512)
    col = k.range(size // 512, AxisKind.REDUCE)
    k.store(out[r], inp[r * (size // 512) + col].reduce(col))
    sums = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 512))
    plan.add_kernel(_heavy("left", 1.0, size), [a, x])
    plan.add_kernel(_heavy("right", 2.0, size), [b, x])
    plan.add_kernel(_axpb("combine", 1.0, 0.0, size), [c, a], fixedvars={"n": size})
    plan.add_kernel(k.build(), [sums, c])
    plan.prepare()
    assert _overlapped(plan._levels[0]) == ([], plan._levels[0])  # left and right, one after the other
    plan.execute()
    expected_a = _heavy_numpy(plan.buffers[x].numpy(), 1.0)
    np.testing.assert_allclose(plan.buffers[a].numpy(), expected_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(plan.buffers[b].numpy(), _heavy_numpy(plan.buffers[x].numpy(), 2.0), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(plan.buffers[c].numpy(), plan.buffers[a].numpy())
    np.testing.assert_allclose(plan.buffers[sums].numpy(), expected_a.reshape(512, -1).sum(axis=1), rtol=1e-4,
                               atol=1e-3)
    assert any(p.kernel.global_size[0].arg > 1 for p in plan.prepared_kernels)  # split over the threads


def test_profile_and_chrome_trace(tmp_path):
    plan = ExecutionPlan("CPU")
    x, y = _buffers(plan, 2, 4096)
    plan.add_kernel(_axpb("profiled", 2.0, 1.0, 4096), [y, x])
    plan.add_copy(x, y)
    with pytest.raises(SvodError, match="no profiled run"):
        plan.export_trace(tmp_path / "none.json")
    steps = plan.execute(profile=True, n=4096)
    assert steps is not None and [s.kind for s in steps] == ["kernel", "copy"]
    assert steps[0].bytes == 2 * 4096 * 4 and steps[0].flops == 2 * 4096 and steps[0].seconds > 0
    plan.export_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert [e["name"] for e in trace["traceEvents"]] == ["profiled", "copy 1 -> 0"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in trace["traceEvents"])


def test_plans_on_the_python_device():
    plan = ExecutionPlan("PYTHON")
    x, y = (plan.add_buffer(svod.Buffer.from_numpy(np.arange(6, dtype=np.float32), "PYTHON")) for _ in range(2))
    plan.add_kernel(_axpb("py", 3.0, 0.0, 6), [y, x])
    plan.execute(n=6)
    np.testing.assert_array_equal(plan.buffers[y].numpy(), np.arange(6, dtype=np.float32) * 3)


def test_one_plan_executed_from_several_threads_keeps_each_call_s_values():
    """``a = n`` then ``b = a - n``: b stays zero unless two executions interleave (one's n with the
    other's a), which is what sharing the plan's argument arrays used to do."""
    import threading

    fill = KernelBuilder("fill_n")
    n = fill.var("n", 1, 1000)
    a = fill.buffer(dtypes.int64, 4096)
    i = fill.range(4096)
    fill.store(a[i], (i * 0 + n).cast(dtypes.int64))
    diff = KernelBuilder("minus_n")
    n = diff.var("n", 1, 1000)
    b, a2 = diff.buffer(dtypes.int64, 4096), diff.buffer(dtypes.int64, 4096)
    j = diff.range(4096)
    diff.store(b[j], a2[j] - n.cast(dtypes.int64))
    plan = svod.ExecutionPlan("CPU")
    a_index = plan.add_buffer(svod.Buffer("CPU", dtypes.int64, 4096))
    b_index = plan.add_buffer(svod.Buffer("CPU", dtypes.int64, 4096))
    plan.add_kernel(fill.build(), [a_index])
    plan.add_kernel(diff.build(), [b_index, a_index])
    plan.prepare()
    nonzero: list[int] = []

    def worker(value: int) -> None:
        for _ in range(1500):
            plan.execute(n=value)
            seen = plan.buffers[b_index].numpy()
            if seen.any():
                nonzero.append(int(seen[seen != 0][0]))

    threads = [threading.Thread(target=worker, args=(v,)) for v in (3, 17, 42, 999)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not nonzero


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("row", [0, 1, 127, 128])
def test_a_checked_kernel_runs_on_every_thread_in_a_plan(compiler, row):
    """A kernel whose access svod checks at run time (``x[k, j]`` may reach past ``x`` when ``k`` is 128) ran
    only its first thread's rows inside a plan: native replay took the checked kernel's launch size, one
    worker, for its part's, two."""
    n = 128
    k = KernelBuilder("checked_rows")
    out, x = k.buffer(dtypes.int32, (n, n)), k.buffer(dtypes.int32, (n, n))
    kv = k.var("k", 0, n)
    i, j = k.range(n), k.range(n)
    k.store(out[i, j], x[i, j] + x[kv, j])
    plan = ExecutionPlan(cpu_device(2, compiler))
    values = np.arange(n * n, dtype=np.int32)
    out_buf = svod.Buffer(plan.device, dtypes.int32, n * n)
    source = svod.Buffer.from_numpy(values, device=plan.device)
    plan.add_kernel(k.build(), [plan.add_buffer(out_buf), plan.add_buffer(source)])
    plan.prepare()
    out_buf.copyin(np.zeros(n * n, np.int32))
    if row == n:
        with pytest.raises(svod.errors.IndexOutOfBoundsError):
            plan.execute(k=row)
        return
    plan.execute(k=row)
    grid = values.reshape(n, n)
    np.testing.assert_array_equal(out_buf.numpy().reshape(n, n), grid + grid[row])


def _checked_row(name: str, n: int):
    """``out[i, j] = x[i, j] + x[k, j]``: ``k`` may be ``n``, one row past ``x``, so the read is checked."""
    k = KernelBuilder(name)
    out, x = k.buffer(dtypes.int32, (n, n)), k.buffer(dtypes.int32, (n, n))
    kv = k.var("k", 0, n)
    i, j = k.range(n), k.range(n)
    k.store(out[i, j], x[i, j] + x[kv, j])
    return k.build()


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_every_failure_a_run_records_is_cleared_with_the_one_it_raises(compiler):
    """Two kernels of a plan read out of bounds in one run: the run raises the first, and the next run, in bounds,
    neither raises the second's stale record nor computes anything else than in-bounds reads."""
    n = 4
    plan = ExecutionPlan(cpu_device(2, compiler))
    values = np.arange(n * n, dtype=np.int32)
    source = plan.add_buffer(svod.Buffer.from_numpy(values, device=plan.device))
    outs = [svod.Buffer(plan.device, dtypes.int32, n * n) for _ in range(2)]
    for name, out in zip(("first_row", "second_row"), outs, strict=True):
        plan.add_kernel(_checked_row(name, n), [plan.add_buffer(out), source])
    plan.prepare()
    with pytest.raises(svod.errors.IndexOutOfBoundsError, match="first_row"):
        plan.execute(k=n)
    plan.execute(k=1)
    grid = values.reshape(n, n)
    for out in outs:
        np.testing.assert_array_equal(out.numpy().reshape(n, n), grid + grid[1])
