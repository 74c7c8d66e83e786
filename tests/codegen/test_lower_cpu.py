"""CPU lowering: an atomic add summed over the parallel ranges its element does not use
(``lower_cpu.reduce_atomic_adds``) gives numpy's sums on every device, and one add per element."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, UOp, dtypes
from svod.codegen import pipeline
from svod.codegen.lower_cpu import PRIVATE_BYTES
from svod.device import DeviceCaps
from svod.dtype import DType
from svod.ir import AxisKind
from tests.helpers import refuses

NUMPY = {dtypes.float64: np.float64, dtypes.float32: np.float32, dtypes.int32: np.int32}


def _row_sums(n: int, k: int, dtype: DType = dtypes.float64, gated: bool = False) -> UOp:
    """``z[i] += x[i, j] * w[j]`` for each ``i`` and ``j`` of two parallel ranges; ``gated``: only where
    ``j`` is even, a gate on the element that uses ``j``."""
    b = KernelBuilder("row_sums")
    z, x, w = b.buffer(dtype, max(n, 1)), b.buffer(dtype, (max(n, 1), k)), b.buffer(dtype, k)
    i, j = b.range(n), b.range(k)
    element = z.index(i, gate=(j % 2).eq(0)) if gated else z[i]
    b.atomic_add(element, x[i, j] * w[j])
    return b.build()


def _inputs(n: int, k: int, dtype: DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n * 100 + k)
    rows = max(n, 1)
    if dtype.is_float:
        x, w = rng.standard_normal((rows, k)), rng.standard_normal(k)
        z = rng.standard_normal(rows)
        z[0] = -0.0  # kept by a sum that adds only -0.0 (the sum starts from -0.0)
        x[0] = -0.0
        return z.astype(NUMPY[dtype]), x.astype(NUMPY[dtype]), w.astype(NUMPY[dtype])
    info = np.iinfo(np.int32)
    x = rng.integers(-1000, 1000, (rows, k)).astype(np.int32)
    x[0, 0] = info.max  # int32 sums wrap as the atomic adds did
    z = rng.integers(-5, 5, rows).astype(np.int32)
    z[0] = info.max
    return z, x, rng.integers(-3, 4, k).astype(np.int32)


def _expected(z: np.ndarray, x: np.ndarray, w: np.ndarray, n: int, gated: bool) -> np.ndarray:
    """The kernel run as plain Python, its work items in order (numpy's own sum drops the sign of -0.0)."""
    out = z.copy()
    with np.errstate(over="ignore"):
        for i in range(n):
            for j in range(x.shape[1]):
                if not gated or j % 2 == 0:
                    out[i] += x[i, j] * w[j]
    return out


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float32, dtypes.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("k", [1, 5, 32])
@pytest.mark.parametrize("n", [0, 1, 7, 31, 33])
def test_atomic_row_sums_match_numpy(device, n, k, dtype):
    if refuses(device, dtype):
        return
    z, x, w = _inputs(n, k, dtype)
    expected = _expected(z, x, w, n, gated=False)
    svod.run(_row_sums(n, k, dtype), [z, x, w], device=device)
    if dtype.is_float:
        tolerance = 1e-5 if dtype == dtypes.float32 else 1e-12
        np.testing.assert_allclose(z, expected, rtol=tolerance, atol=tolerance)
        assert np.signbit(z[0]) == np.signbit(expected[0])  # -0.0 stays -0.0
    else:
        np.testing.assert_array_equal(z, expected)


@pytest.mark.parametrize("n", [1, 7, 33])
def test_a_gate_that_uses_the_summed_range_keeps_its_adds_and_is_right(device, n):
    z, x, w = _inputs(n, 5, dtypes.float32)
    expected = _expected(z, x, w, n, gated=True)
    svod.run(_row_sums(n, 5, dtypes.float32, gated=True), [z, x, w], device=device)
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-5)


def _lowered(ast: UOp, threads: int = 2) -> UOp:
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=threads, vector_registers=16)
    return pipeline.lower(ast, pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)).sink


def _atomics(sink: UOp) -> list[UOp]:
    return [e for e in sink.src if e.op is Ops.ATOMIC]


def test_a_large_buffer_gets_one_add_per_element_of_a_sum_over_the_other_range():
    """``z`` is past ``PRIVATE_BYTES``: each of its elements gets one add, of a REDUCE over ``j``, in the
    parallel range of ``i`` alone."""
    n = PRIVATE_BYTES // 8 * 4
    (add,) = _atomics(_lowered(_row_sums(n, 32)))
    (total,) = [u for u in add.src[1].toposort() if u.op is Ops.REDUCE]
    (summed,) = total.src[1:]
    assert summed.arg[1] is AxisKind.REDUCE and int(summed.src[0].arg) == 32
    assert all(r.arg[1] is AxisKind.GLOBAL for r in add.live_ranges)
    assert add.src[0].live_ranges == add.live_ranges  # the add runs once per element


def _summed(sink: UOp) -> list[int]:
    """The buffers (slots) of the atomic adds of ``sink`` whose value is a sum."""
    return [int(e.src[0].src[0].arg) for e in _atomics(sink) if any(u.op is Ops.REDUCE for u in e.src[1].toposort())]


def _two_adds(name: str, element: Callable[[UOp, UOp, UOp], UOp], value: Callable[[UOp, UOp, UOp], UOp],
              store: bool = False) -> UOp:
    """``element(z, i, j) += value(y, i, j)`` and ``w[i] += x[i, j]`` (which is summed) over ``i < 2^14`` and
    ``j < 8``; ``store``: ``y[i, j] = x[i, j] * 2`` first."""
    b = KernelBuilder(name)
    z, w = b.buffer(dtypes.float64, 1 << 14), b.buffer(dtypes.float64, 1 << 14)
    y, x = b.buffer(dtypes.float64, (1 << 14, 8)), b.buffer(dtypes.float64, (1 << 14, 8))
    i, j = b.range(1 << 14), b.range(8)
    if store:
        b.store(y[i, j], x[i, j] * 2.0)
    b.atomic_add(element(z, i, j), value(y, i, j))
    b.atomic_add(w[i], x[i, j])
    return b.build()


def test_a_gate_that_uses_the_range_leaves_the_add_in_it():
    sink = _lowered(_two_adds("gated", lambda z, i, j: z.index(i, gate=(j % 2).eq(0)), lambda y, i, j: y[i, j]))
    assert _summed(sink) == [1]


def test_an_add_into_one_element_stays_parallel():
    """Summed over every range, the add would run on one thread: it keeps its adds in both ranges."""
    sink = _lowered(_two_adds("energy", lambda z, i, j: z[0], lambda y, i, j: y[i, j]))
    assert _summed(sink) == [1]
    (energy,) = [e for e in _atomics(sink) if e.src[0].src[0].arg == 0]
    assert sum(r.arg[1] is AxisKind.GLOBAL for r in energy.live_ranges) == 2


def test_a_value_that_reads_what_the_kernel_writes_keeps_its_adds():
    """The store into ``y`` runs in ``j`` as before; a sum over ``j`` apart from it would read ``y`` before it."""
    sink = _lowered(_two_adds("store_then_add", lambda z, i, j: z[i], lambda y, i, j: y[i, j], store=True))
    assert _summed(sink) == [1]


def test_a_range_outside_the_element_s_is_not_summed():
    """``z[j] += y[i, j]``: summed over ``i``, each element would walk every row."""
    sink = _lowered(_two_adds("columns", lambda z, i, j: z[j], lambda y, i, j: y[i, j]))
    assert _summed(sink) == [1]


def test_fewer_elements_than_threads_keep_their_parallel_adds():
    """One element on two threads: summed, it would run on one."""
    assert _summed(_lowered(_row_sums(2, 1 << 16), threads=4)) == []
    assert _summed(_lowered(_row_sums(2, 1 << 16), threads=2)) == [0]
