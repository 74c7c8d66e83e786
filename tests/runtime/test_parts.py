"""A kernel run as parts (a reduction split in two, a status its checked reads report to) on buffers of its own,
which a call leaves to the next where they are small: every call starts clean, so a failure one call records is
that call's alone, whatever ran before it, in this thread or another."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import IndexOutOfBoundsError, SvodError
from svod.runtime import parts
from svod.runtime.parts import SPARE_RUNS, PartsProgram
from svod.runtime.plan import ExecutionPlan
from tests.helpers import cpu_device

SIZE = 1000


@svod.kernel
def _sum_first(out, x, n):  # type: ignore[no-untyped-def]
    acc = 0.0
    for i in range(n):  # x[i] past x's end for n > len(x): a checked read
        acc += x[i]
    out[0] = acc


def _program(device: Device) -> PartsProgram:
    x, out = np.zeros(SIZE, np.float32), np.zeros(1, np.float32)
    program = svod.compile(_sum_first.bind(out, x, 1, device=device).ast, device).program
    assert isinstance(program, PartsProgram)
    return program


def _call(device: Device, n: int) -> float | str:
    """``_sum_first`` of the first ``n`` of 0, 1, ... (exact in float32), or that it read out of bounds."""
    x, out = np.arange(SIZE, dtype=np.float32), np.full(1, np.nan, np.float32)
    try:
        _sum_first(out, x, n, device=device)
    except IndexOutOfBoundsError as err:
        assert "_sum_first" in str(err) and SIZE <= err.index < n  # type: ignore[operator]
        return "out of bounds"
    return float(out[0])


def _expected(n: int) -> float | str:
    return "out of bounds" if n > SIZE else float(np.arange(n, dtype=np.float32).sum())


@pytest.mark.parametrize("order", [(1, 7, SIZE, SIZE + 1, 997, 2 * SIZE, 0, SIZE), (SIZE + 1, 1, SIZE + 3, 2)])
def test_a_call_that_fails_leaves_nothing_for_the_next(device, order):
    assert [_call(device, n) for n in order] == [_expected(n) for n in order]


def test_calls_from_threads_at_once_each_run_in_memory_of_their_own(compiled_device):
    program = _program(compiled_device)
    sizes = [n for k in range(60) for n in (k * 17 % (SIZE + 1), SIZE + 1 + k)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda n: _call(compiled_device, n), sizes))
    assert got == [_expected(n) for n in sizes]
    assert 1 <= len(program._spares) <= SPARE_RUNS


def test_own_buffers_larger_than_a_spare_are_freed_after_each_call(compiled_device, monkeypatch):
    program = _program(compiled_device)
    program._spares.clear()
    monkeypatch.setattr(parts, "SPARE_BYTES", 0)
    assert [_call(compiled_device, n) for n in (5, SIZE + 2, 9)] == [_expected(n) for n in (5, SIZE + 2, 9)]
    assert program._spares == []


@pytest.mark.parametrize("kept", [False, True], ids=["allocated per call", "kept and grown"])
def test_a_packed_matmul_of_variable_sizes_has_a_copy_as_large_as_each_call_needs(compiled_device, monkeypatch,
                                                                                   kept):
    """``b`` packed into a buffer of the kernel's own as large as each call's sizes ask: past ``SPARE_BYTES``,
    allocated for the call; where kept, a call that needs more than the one before allocates it anew and points
    its parts there."""
    if not compiled_device.name.startswith("CPU"):
        pytest.skip("the packed form is a CPU's (blocked for its L2)")
    if kept:
        monkeypatch.setattr(parts, "SPARE_BYTES", 1 << 30)
    k = svod.KernelBuilder("mm_of_sizes")
    depth, m, n = k.var("k", 0, 4096), k.var("m", 1, 4096), k.var("n", 1, 4096)
    out, a, b = (k.buffer(svod.dtypes.float32, shape) for shape in ((m, n), (depth, m), (depth, n)))
    i, j, r = k.range(m), k.range(n), k.range(depth, svod.AxisKind.REDUCE)
    k.store(out[i, j], (a[r, i] * b[r, j]).reduce(r))
    ast = k.build()
    rng = np.random.default_rng(3)
    for depth_, rows, columns in ((1024, 300, 512), (1100, 301, 700), (3, 5, 7), (1100, 299, 699)):
        x = rng.standard_normal((depth_, rows)).astype(np.float32)
        y = rng.standard_normal((depth_, columns)).astype(np.float32)
        got = np.full((rows, columns), np.nan, np.float32)
        svod.run(ast, [got, x, y], device=compiled_device, k=depth_, m=rows, n=columns)
        want = (x.astype(np.float64).T @ y.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert isinstance(svod.compile(ast, compiled_device).program, PartsProgram)


def test_a_check_an_interrupt_stops_leaves_its_records_to_no_later_call(monkeypatch):
    """An interrupt (a KeyboardInterrupt, a signal handler's exception) that stops the check of a run that
    recorded a failure, before it read and cleared every record: that call's buffers are not kept, so the next
    call, in bounds, does not raise its failure."""
    device = svod.get_device("CPU")
    assert _call(device, SIZE + 1) == "out of bounds"

    def interrupted(self, handles, values):  # the interrupt arrives as the check begins
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(PartsProgram, "check", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _call(device, SIZE + 2)
    assert [_call(device, n) for n in (3, SIZE, SIZE + 1, 4)] == [_expected(n) for n in (3, SIZE, SIZE + 1, 4)]


def test_an_own_buffer_that_cannot_grow_leaves_the_plan_pointed_at_the_one_it_has(monkeypatch):
    """A plan's packed matmul of variable sizes whose larger copy cannot be allocated: the run is refused, and
    the launch keeps the copy it had, not a freed block another buffer may be given (which a later run of the
    size it had would write into)."""
    most_m, most_n, most_depth = 600, 1024, 160
    k = svod.KernelBuilder("mm_of_sizes")
    m, n, depth = k.var("m", 0, most_m), k.var("n", 1, most_n), k.var("depth", 0, most_depth)
    out = k.buffer(svod.dtypes.float64, most_m * most_n)
    a, b = k.buffer(svod.dtypes.float64, most_m * most_depth), k.buffer(svod.dtypes.float64, most_depth * most_n)
    i, j, r = k.range(m), k.range(n), k.range(depth, svod.AxisKind.REDUCE)
    k.store(out[i * n + j], (a[i * depth + r] * b[r * n + j]).reduce(r))
    device = cpu_device(2, "llvm")
    plan = ExecutionPlan(device)
    ids = [plan.add_buffer(svod.Buffer(device, svod.dtypes.float64, size))
           for size in (most_m * most_n, most_m * most_depth, most_depth * most_n)]
    plan.add_kernel(k.build(), ids)
    plan.prepare()
    rng = np.random.default_rng(5)

    def run(rows: int, columns: int, turns: int) -> None:
        x, y = rng.standard_normal((rows, turns)), rng.standard_normal((turns, columns))
        plan.buffers[ids[1]].copyin(np.resize(x.ravel(), most_m * most_depth))
        plan.buffers[ids[2]].copyin(np.resize(y.ravel(), most_depth * most_n))
        plan.execute(m=rows, n=columns, depth=turns)
        got = plan.buffers[ids[0]].numpy()[:rows * columns].reshape(rows, columns)
        np.testing.assert_allclose(got, x @ y, rtol=1e-12, atol=1e-12)

    run(512, 1000, 140)
    memory = plan.prepared_kernels[0].launch.memory
    had = dict(memory.nbytes)
    allocate = type(device.allocator)._alloc

    def refused(self, nbytes):  # the device out of memory, once
        monkeypatch.setattr(type(device.allocator), "_alloc", allocate)
        raise SvodError("out of memory", stage="buffer", value=nbytes)

    monkeypatch.setattr(type(device.allocator), "_alloc", refused)
    with pytest.raises(SvodError, match="out of memory"):
        run(512, 1024, 160)
    assert memory.nbytes == had
    other = device.allocator.allocate(had[3])  # the pool's block of that size, were the launch's freed
    other.array[:] = 0x5A
    run(512, 1000, 140)
    assert (other.array == 0x5A).all()
    run(512, 1024, 160)
