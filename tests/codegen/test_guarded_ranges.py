"""``clamp_guarded_ranges``: a parallel range whose effects all run under ``i < n[0]`` ends at ``n[0]`` on a CPU,
and computes what the tested range did on every device, whatever ``n[0]`` is (below 0, past the range's end,
at an integer's extremes); a range with an effect outside the test, or a bound that reads another range, is
walked whole."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.codegen import pipeline
from svod.device import Device, DeviceCaps
from svod.errors import GraphError
from svod.frontend.jit import Jit
from svod.frontend.pykernel import Kernel
from svod.ir import Ops, UOp


@svod.jit
def doubled_below(out, x, n):
    """The idiom for a length the run computes: a ``prange`` over the longest, under ``if i < n[0]``."""
    for i in svod.prange(out.shape[0]):
        if i < n[0]:
            out[i] = x[i] * 2.0


@svod.kernel
def doubled_below_kernel(out, x, n):
    """The same in a kernel of symbolic sizes: ``n[0]``'s read is tested at run time (``n`` may be empty)."""
    for i in svod.prange(out.shape[0]):
        if i < n[0]:
            out[i] = x[i] * 2.0


@svod.jit
def positive_below(out, x, n):
    """The bound is one operand of the test's conjunction."""
    for i in svod.prange(out.shape[0]):
        if i < n[0] and x[i] > 0.0:
            out[i] = x[i] * 2.0


@svod.jit
def partly_below(out, seen, x, n):
    """An effect outside the test: every index runs."""
    for i in svod.prange(out.shape[0]):
        seen[i] = 1
        if i < n[0]:
            out[i] = x[i] * 2.0


@svod.jit
def rows_below(out, x, lengths):
    """A bound read at another range's index: every index runs."""
    for r in svod.prange(out.shape[0]):
        for c in svod.prange(out.shape[1]):
            if c < lengths[r]:
                out[r, c] = x[r, c] + 1.0


SIZES = [1, 7, 97, 4099, 100003]


def _counts(size: int, dtype: type) -> list[int]:
    info = np.iinfo(dtype)
    return sorted({0, 1, size - 1, size, size + 1, -1, info.min, info.max, size // 3})


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_a_range_guarded_by_a_loaded_bound_runs_to_it(device: Device, size: int, dtype: type):
    x = np.linspace(-3.0, 5.0, size).astype(np.float32)
    if dtype is np.int64 and svod.dtypes.int64 not in device.caps.element_dtypes:  # (WebGPU): refused, not run
        for kernel in (doubled_below, doubled_below_kernel, positive_below):
            with pytest.raises(GraphError, match="cannot hold int64"):
                kernel(np.zeros(size, np.float32), x, np.array([1], dtype), device=device)
        return
    for count in _counts(size, dtype):
        kept = min(max(count, 0), size)
        for kernel, expected in ((doubled_below, np.where(np.arange(size) < kept, x * 2, -7.0)),
                                 (doubled_below_kernel, np.where(np.arange(size) < kept, x * 2, -7.0)),
                                 (positive_below, np.where((np.arange(size) < kept) & (x > 0), x * 2, -7.0))):
            out = np.full(size, -7.0, np.float32)
            kernel(out, x, np.array([count], dtype), device=device)
            np.testing.assert_array_equal(out, expected.astype(np.float32), err_msg=f"{kernel} n={count}")


def test_a_bound_tested_at_run_time_is_read_only_where_the_range_has_a_turn(device: Device):
    """An empty range reads nothing, so an empty ``n`` is no error there, as in Python; past it, it is one."""
    doubled_below_kernel(np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32), device=device)
    with pytest.raises(svod.errors.SvodError, match="accessed at index 0"):
        doubled_below_kernel(np.zeros(3, np.float32), np.ones(3, np.float32), np.zeros(0, np.int32), device=device)


@pytest.mark.parametrize("size", [1, 97, 100003])
def test_an_effect_outside_the_test_runs_at_every_index(device: Device, size: int):
    x = np.arange(size, dtype=np.float32)
    for count in (0, size // 2, size + 3):
        out, seen = np.zeros(size, np.float32), np.zeros(size, np.int32)
        partly_below(out, seen, x, np.array([count], np.int32), device=device)
        np.testing.assert_array_equal(seen, np.ones(size, np.int32))
        np.testing.assert_array_equal(out, np.where(np.arange(size) < count, x * 2, 0.0))


def test_a_bound_read_at_another_range_is_tested_at_each_index(device: Device):
    x = np.arange(5 * 37, dtype=np.float32).reshape(5, 37)
    lengths = np.array([0, 1, 36, 37, -4], np.int32)
    out = np.zeros_like(x)
    rows_below(out, x, lengths, device=device)
    np.testing.assert_array_equal(out, np.where(np.arange(37) < lengths[:, None], x + 1, 0.0))


def _lowered(fn: Jit | Kernel, *args: object) -> UOp:
    """The one kernel of ``fn`` (of its plan, for a jit function) for ``args``, lowered for a CPU of two threads."""
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=2, vector_registers=16)
    ast = fn.build(*args) if isinstance(fn, Kernel) else fn.plan(*args).prepared_kernels[0].ast
    return pipeline.lower(ast, pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)).sink


def _ends_at_a_load(sink: UOp) -> bool:
    return any(u.op is Ops.RANGE and any(s.op is Ops.LOAD for s in u.src[0].toposort()) for u in sink.toposort())


def test_the_cpu_range_ends_at_the_bound_only_where_every_effect_is_tested():
    x, n = np.zeros(100003, np.float32), np.array([5], np.int32)
    assert _ends_at_a_load(_lowered(doubled_below, np.zeros_like(x), x, n))
    assert _ends_at_a_load(_lowered(positive_below, np.zeros_like(x), x, n))
    assert _ends_at_a_load(_lowered(doubled_below_kernel, np.zeros_like(x), x, n))
    assert not _ends_at_a_load(_lowered(partly_below, np.zeros_like(x), np.zeros(100003, np.int32), x, n))
