"""A kernel run as parts (a reduction split in two, a status its checked reads report to) on buffers of its own,
which a call leaves to the next where they are small: every call starts clean, so a failure one call records is
that call's alone, whatever ran before it, in this thread or another."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import IndexOutOfBoundsError
from svod.runtime import parts
from svod.runtime.parts import SPARE_RUNS, PartsProgram
from tests.helpers import open_device

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
    assert len(program._spares) <= SPARE_RUNS  # a spare kept per thread at most: none given back twice
    assert program._spares, "every call, failed or not, leaves its buffers for the next"


def test_own_buffers_larger_than_a_spare_are_freed_after_each_call(compiled_device, monkeypatch):
    program = _program(compiled_device)
    program._spares.clear()
    monkeypatch.setattr(parts, "SPARE_BYTES", 0)
    assert [_call(compiled_device, n) for n in (5, SIZE + 2, 9)] == [_expected(n) for n in (5, SIZE + 2, 9)]
    assert program._spares == []


@pytest.mark.parametrize("compiler", ["llvm", "clang"])  # the packed form is a CPU's (blocked for its L2)
@pytest.mark.parametrize("kept", [False, True], ids=["allocated per call", "kept and grown"])
def test_a_packed_matmul_of_variable_sizes_has_a_copy_as_large_as_each_call_needs(compiler, monkeypatch, kept):
    """``b`` packed into a buffer of the kernel's own as large as each call's sizes ask: past ``SPARE_BYTES``,
    allocated for the call; where kept, a call that needs more than the one before allocates it anew and points
    its parts there."""
    device = open_device(compiler)
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
        svod.run(ast, [got, x, y], device=device, k=depth_, m=rows, n=columns)
        want = (x.astype(np.float64).T @ y.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert isinstance(svod.compile(ast, device).program, PartsProgram)


def test_a_check_an_interrupt_stops_leaves_its_records_to_no_later_call(monkeypatch):
    """An interrupt (a KeyboardInterrupt, a signal handler's exception) that stops the check of a run that
    recorded a failure, before it read and cleared every record: the check clears them as the interrupt goes
    on, so the next call, in bounds, does not raise its failure."""
    device = svod.get_device("CPU")
    assert _call(device, SIZE + 1) == "out of bounds"

    def interrupted(self, handles, values):  # the interrupt arrives as the check reads the status
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(PartsProgram, "_out_of_bounds", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _call(device, SIZE + 2)
    assert [_call(device, n) for n in (3, SIZE, SIZE + 1, 4)] == [_expected(n) for n in (3, SIZE, SIZE + 1, 4)]


@svod.jit
def _sum_first_of(x, n):  # type: ignore[no-untyped-def]
    acc = 0.0
    for i in range(n):
        acc += x[i]
    return acc


def test_a_plans_check_an_interrupt_stops_leaves_its_records_to_no_later_run(monkeypatch):
    """The same of a jit function's plan, whose launch keeps its own buffers from run to run."""
    x = np.arange(SIZE, dtype=np.float64)
    assert _sum_first_of(x, 3) == 3.0
    with pytest.raises(IndexOutOfBoundsError):
        _sum_first_of(x, SIZE + 1)

    def interrupted(self, handles, values):
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(PartsProgram, "_out_of_bounds", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _sum_first_of(x, SIZE + 2)
    assert _sum_first_of(x, 4) == 6.0 and _sum_first_of(x, SIZE) == float(x.sum())
