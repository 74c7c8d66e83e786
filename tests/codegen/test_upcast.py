"""Register tiles and split reductions (``svod.codegen.upcast``): reductions that share a loop, a tile's rows,
share its partials, so a gather inside a maximum lowers to a kernel of a few hundred nodes that compiles in
a second or two and computes what numpy does."""

from __future__ import annotations

import time

import numpy as np
import pytest

import svod
from svod.codegen import pipeline
from svod.codegen.checks import CHECKED
from svod.codegen.upcast import EXTREMA, split_reductions
from svod.device import DeviceCaps
from svod.errors import IndexOutOfBoundsError
from svod.ir import Ops
from tests.helpers import refuses


@svod.kernel
def gathered_maximum(out, x, y, idx):
    n = x.shape[0]
    for i in svod.prange(n):
        s = -svod.inf
        for k in range(idx.shape[0]):
            s = max(s, x[i, idx[k]] - y[i, idx[i]])
        out[i] = s


def _arguments(n: int, m: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.zeros(n), rng.standard_normal((n, m)), rng.standard_normal((n, m)), rng.integers(0, m, n)]


def _expected(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    rows = np.arange(x.shape[0])
    if len(idx) == 0:
        return np.full(x.shape[0], -np.inf)
    return x[:, idx].max(axis=1) - y[rows, idx[rows]]


def test_a_gather_inside_a_maximum_lowers_to_a_small_kernel_quickly():
    """On a CPU with AVX-512's registers, the 16 rows of a register tile each split their maximum into 64
    partials and a tail: 1,040 copies of the gather, 578 checked accesses proven one by one, minutes. Sharing
    the loop's 64 partials, the rows keep 2 each."""
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=2, vector_registers=32, vector_lanes=True)
    target = pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)
    ast = gathered_maximum.build(*_arguments(7, 5))
    start = time.perf_counter()
    lowered = pipeline.lower(ast, target)
    pipeline.linearize(lowered.sink, lowered.status, target)
    assert time.perf_counter() - start < 20  # a hang guard only: the counts below are what the test checks
    topo = lowered.sink.toposort()
    maxima = [u for u in topo if u.op is Ops.REDUCE and u.arg is Ops.MAX]
    loops = {r for u in maxima for r in u.src[1:]}
    assert len(maxima) <= 64 + len(loops)  # a loop's partials, and a tail each
    assert sum(u.op is Ops.INDEX and u.arg == CHECKED for u in topo) <= 2 * len(maxima)


@pytest.mark.parametrize(("n", "m"), [(0, 3), (1, 1), (7, 5), (16, 3), (17, 40), (100, 9)])
def test_a_gather_inside_a_maximum_computes_what_numpy_does(compiled_device, n, m):
    if refuses(compiled_device, svod.dtypes.float64):
        return
    args = _arguments(n, m, seed=n)
    start = time.perf_counter()
    gathered_maximum(*args, device=compiled_device)
    assert time.perf_counter() - start < 60  # a hang guard only
    np.testing.assert_array_equal(args[0], _expected(*args[1:]))


@pytest.mark.parametrize("bad", [-1, 5])
def test_a_gather_inside_a_maximum_refuses_an_index_past_its_row(compiled_device, bad):
    if refuses(compiled_device, svod.dtypes.float64):
        return
    args = _arguments(7, 5)
    args[3][3] = bad
    with pytest.raises(IndexOutOfBoundsError):
        gathered_maximum(*args, device=compiled_device)


def test_reductions_that_share_a_loop_share_its_partials():
    """Four maxima over one loop (a tile's rows) keep 64 partials in all, 16 each; one alone keeps 64."""
    k = svod.KernelBuilder("four_maxima")
    n = k.var("n", 0, 4096)
    out, x = k.buffer(svod.dtypes.float32, 4), k.buffer(svod.dtypes.float32, (4, n))
    r = k.range(n, svod.AxisKind.REDUCE)
    for row in range(4):
        k.store(out[row], x[row, r].reduce(r, op=Ops.MAX))
    split = split_reductions(k.build(), EXTREMA, tails=True, widths=(64, 64))
    maxima = [u for u in split.toposort() if u.op is Ops.REDUCE]
    assert len(maxima) == 4 * (16 + 1)
    assert len({u.src[1] for u in maxima}) == 2  # the partials' loop and one tail loop for all four
    values = np.random.default_rng(1).standard_normal((4, 1001)).astype(np.float32)
    got = np.zeros(4, np.float32)
    svod.run(split, [got, values], device=svod.get_device("CPU", "llvm"), n=1001)
    np.testing.assert_array_equal(got, values.max(axis=1))
