"""Atomic updates: work items combining into one element give exact (integer) or numpy-close (float)
results on every backend, threaded or not, every time."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, dtypes
from svod.codegen.lower_cpu import PRIVATE_BYTES
from svod.errors import GraphError, IndexOutOfBoundsError
from tests.helpers import cpu_device, refuses


def _histogram(bins: int, n: int, dtype=dtypes.int32):
    k = KernelBuilder(f"histogram_{bins}")
    counts, values = k.buffer(dtype, bins), k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.atomic_add(counts[values[i]], 1 if not dtype.is_float else 1.0)
    return k.build()


@pytest.mark.parametrize("bins", [16, 4096])
def test_a_histogram_of_a_million_values_is_exact(device, bins):
    n = 1_000_000 if device.device.base_type != "PYTHON" else 50_000
    values = np.random.default_rng(bins).integers(0, bins, n).astype(np.int32)
    expected = np.bincount(values, minlength=bins)
    for _ in range(20 if device.device.base_type != "PYTHON" else 1):
        counts = np.zeros(bins, np.int32)
        svod.run(_histogram(bins, n), [counts, values], device=device)
        np.testing.assert_array_equal(counts, expected)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_histograms_are_exact_on_any_number_of_threads(threads, compiler):
    device = cpu_device(threads, compiler)
    values = np.random.default_rng(threads).integers(0, 16, 1 << 18).astype(np.int32)
    for _ in range(20):
        counts = np.zeros(16, np.int32)
        svod.run(_histogram(16, 1 << 18), [counts, values], device=device)
        np.testing.assert_array_equal(counts, np.bincount(values, minlength=16))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("n", "bins"), [(1, 1), (7, 7), (1009, 7), (100_003, 251), (4099, 4096)])
def test_counts_kept_per_thread_add_to_what_the_buffer_held(threads, compiler, n, bins):
    """Each thread counts into a private copy and adds it to the buffer at the end (``privatize_atomics``):
    counts already there are kept, and int32 counts wrap as the atomics did."""
    values = np.random.default_rng(n).integers(0, bins, n).astype(np.int32)
    start = np.random.default_rng(bins).integers(-5, 5, bins).astype(np.int32)
    start[0] = np.iinfo(np.int32).max
    counts = start.copy()
    svod.run(_histogram(bins, n), [counts, values], device=cpu_device(threads, compiler))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(counts, start + np.bincount(values, minlength=bins).astype(np.int32))


def _histogram_of_n(dtype=dtypes.int32):
    """A histogram whose bin count and value count are variables."""
    k = KernelBuilder("histogram_of_n")
    bins, n = k.var("bins", 0, 1 << 20), k.var("n", 0, 1 << 24)
    counts, values = k.buffer(dtype, bins), k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.atomic_add(counts[values[i]], 1 if not dtype.is_float else 1.0)
    return k.build()


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize(("n", "bins"), [(0, 1), (1, 1), (1009, 7), (100_003, 251), (70_001, PRIVATE_BYTES // 8),
                                         (70_001, PRIVATE_BYTES // 8 + 1), (70_001, PRIVATE_BYTES // 4),
                                         (70_001, PRIVATE_BYTES // 4 + 1), (5, 100_000)])
def test_counts_of_a_symbolic_bin_count_are_kept_per_thread_where_they_fit(threads, compiler, n, bins):
    """Over a variable bin count the private copy holds ``PRIVATE_BYTES``: a histogram whose counts fit it adds
    into copies, one whose counts do not adds atomically into the buffer; both keep what it held."""
    values = np.random.default_rng(n).integers(0, bins, n).astype(np.int32)
    start = np.random.default_rng(bins).integers(-5, 5, bins).astype(np.int32)
    counts = start.copy()
    svod.run(_histogram_of_n(), [counts, values], device=cpu_device(threads, compiler), bins=bins, n=n)
    np.testing.assert_array_equal(counts, start + np.bincount(values, minlength=bins).astype(np.int32))


@svod.kernel
def pair_differences(g, p):
    """Over the pairs ``i < j``: what a gradient of a pair potential by positions scatters, each pair's term
    added into both bodies' rows."""
    n = p.shape[0]
    for i in svod.prange(n):
        for j in svod.prange(n):
            if j > i:
                for d in range(3):
                    svod.atomic_add(g, (i, d), p[i, d] - p[j, d])
                    svod.atomic_add(g, (j, d), p[j, d] - p[i, d])


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("n", [1, 2, 31, 1500, 2048, PRIVATE_BYTES // 24, PRIVATE_BYTES // 24 + 1])
def test_adds_into_a_pair_potentials_gradient_sum_over_every_pair(threads, compiler, n):
    """The gradient of 2,048 positions in 3-D (48 KiB of float64), and of as many as ``PRIVATE_BYTES`` holds, is
    kept per thread; one row past it is added into atomically: both sum ``p[i] - p[j]`` over every other body,
    ``n p[i] - sum(p)``."""
    p = np.random.default_rng(n).integers(-8, 8, (n, 3)).astype(np.float64)  # small integers: every sum exact
    g = np.full((n, 3), -0.0)
    pair_differences(g, p, device=cpu_device(threads, compiler))
    np.testing.assert_array_equal(g, n * p - p.sum(axis=0))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_float_sums_kept_per_thread_keep_special_values(threads, compiler):
    """A private float sum starts at -0.0: a bin nobody adds to keeps its -0.0, NaN and inf stay, and a bin
    that only gets +0.0 becomes +0.0, as the atomics would make it."""
    k = KernelBuilder("weighted_histogram")
    out, x, idx = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 4000), k.buffer(dtypes.int32, 4000)
    i = k.range(4000)
    k.atomic_add(out[idx[i]], x[i])
    rng = np.random.default_rng(9)
    indices = rng.choice(np.array([1, 2, 3, 5], np.int32), 4000)
    weights = rng.standard_normal(4000).astype(np.float32)
    weights[indices == 5] = 0.0
    start = np.array([-0.0, -0.0, np.nan, np.inf, 1.0, -0.0, -0.0, 2.5], np.float32)
    got = start.copy()
    svod.run(k.build(), [got, weights, indices], device=cpu_device(threads, compiler))
    expected = start.astype(np.float64)
    np.add.at(expected, indices, weights)
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=1e-4)
    assert list(np.signbit(got[[0, 5, 6]])) == [True, False, True]


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_a_count_outside_the_buffer_kept_per_thread_names_the_buffer(compiler):
    values = np.zeros(5000, np.int32)
    values[4321] = 16
    counts = np.zeros(16, np.int32)
    with pytest.raises(IndexOutOfBoundsError) as info:
        svod.run(_histogram(16, 5000), [counts, values], device=cpu_device(2, compiler))
    assert info.value.slot == 0 and info.value.index == 16


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32,
                                   dtypes.float64])
def test_scatter_add_with_repeated_indices(device, dtype):
    if refuses(device, dtype):
        return
    k = KernelBuilder("scatter_add")
    out, x, idx = k.buffer(dtype, 37), k.buffer(dtype, 5000), k.buffer(dtypes.int32, 5000)
    i = k.range(5000)
    k.atomic_add(out[idx[i]], x[i])
    rng = np.random.default_rng(3)
    indices = rng.integers(0, 37, 5000).astype(np.int32)
    x_np = (rng.standard_normal(5000) * 100).astype(dtype.numpy) if dtype.is_float else \
        rng.integers(0, 1000, 5000).astype(dtype.numpy)
    expected = np.zeros(37, dtype.numpy)
    np.add.at(expected, indices, x_np)
    # atomic adds land in any order: each of a bin's roundings (its own adds and numpy's) is within eps of a
    # running sum, itself within the sum of |x| (a lost or doubled add is off by a whole |x|, ~100 here)
    magnitude = np.zeros(37)
    np.add.at(magnitude, indices, np.abs(x_np.astype(np.float64)))
    bound = np.bincount(indices, minlength=37) * magnitude * (np.finfo(dtype.numpy).eps if dtype.is_float else 0)
    for _ in range(5):
        got = np.zeros(37, dtype.numpy)
        svod.run(k.build(), [got, x_np, indices], device=device)
        if dtype.is_float:
            assert np.all(np.abs(got.astype(np.float64) - expected) <= bound), (got, expected)
        else:
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.float32, dtypes.float64])
@pytest.mark.parametrize(("op", "reference"), [(Ops.MAX, np.fmax), (Ops.MIN, np.fmin)])
def test_atomic_max_and_min_per_segment(device, dtype, op, reference):
    if refuses(device, dtype):
        return
    k = KernelBuilder(f"segment_{op.name.lower()}")
    out, x, seg = k.buffer(dtype, 10), k.buffer(dtype, 3000), k.buffer(dtypes.int32, 3000)
    i = k.range(3000)
    (k.atomic_max if op is Ops.MAX else k.atomic_min)(out[seg[i]], x[i])
    rng = np.random.default_rng(5)
    segments = rng.integers(0, 10, 3000).astype(np.int32)
    x_np = rng.standard_normal(3000).astype(dtype.numpy) * 50 if dtype.is_float else \
        rng.integers(0, 1 << 20, 3000).astype(dtype.numpy)
    if dtype.is_float:
        x_np[::7] = np.nan  # ignored, as maximumNumber ignores NaN
    start = np.full(10, np.nan if dtype.is_float else (0 if op is Ops.MAX else np.iinfo(dtype.numpy).max),
                    dtype.numpy)
    expected = start.copy()
    reference.at(expected, segments, x_np)
    got = start.copy()
    svod.run(k.build(), [got, x_np, segments], device=device)
    np.testing.assert_array_equal(got, expected)


def test_atomics_count_as_writes_in_plans(device):
    k = KernelBuilder("count")
    counts, values = k.buffer(dtypes.int32, 4), k.buffer(dtypes.int32, 100)
    i = k.range(100)
    k.atomic_add(counts[values[i]], 1)
    z = KernelBuilder("zero")
    target = z.buffer(dtypes.int32, 4)
    j = z.range(4)
    z.store(target[j], 0)
    plan = svod.ExecutionPlan(device)
    c = plan.add_buffer(svod.Buffer(device, dtypes.int32, 4))
    v = plan.add_buffer(svod.Buffer.from_numpy(np.arange(100, dtype=np.int32) % 4, device))
    zero_step = plan.add_kernel(z.build(), [c])
    count_step = plan.add_kernel(k.build(), [c, v])
    plan.prepare()
    assert zero_step in plan.prepared_kernels[count_step].dependencies
    for _ in range(3):
        plan.execute()
        np.testing.assert_array_equal(plan.buffers[c].numpy(), [25, 25, 25, 25])


def test_atomics_on_small_or_bool_types_are_refused():
    k = KernelBuilder("tiny")
    out = k.buffer(dtypes.int8, 4)
    i = k.range(4)
    k.atomic_add(out[i], 1)
    with pytest.raises(GraphError, match="atomics update") as info:
        svod.compile(k.build())
    assert info.value.kernel == "tiny"


def test_a_buffer_both_stored_and_updated_atomically_is_refused():
    k = KernelBuilder("mixed")
    out = k.buffer(dtypes.int32, 4)
    i = k.range(4)
    k.store(out[i], 0)
    k.atomic_add(out[i], 1)
    with pytest.raises(GraphError, match="both stored to and updated atomically"):
        svod.compile(k.build())
