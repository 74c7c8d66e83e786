"""numba's array reductions over a ``prange``: ``acc[j] += v`` (``-=``), or ``acc += row`` in a jitted function,
where the work items of the parallel loop share the element (its index does not use the loop's variable) and
each adds a value of its own. Each adds as an atomic update, which gives Python's sum in some order; where
the sum would be cast back to the array's dtype, or every item adds the same value, the store is refused as
a race, as it was."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.codegen.lower_cpu import PRIVATE_BYTES
from svod.dtype import dtypes
from svod.errors import IndexOutOfBoundsError, RaceError
from tests.helpers import refuses


@svod.kernel
def column_sums(out, a):
    for i in prange(a.shape[0]):
        for j in range(a.shape[1]):
            out[j] += a[i, j]


@svod.kernel
def column_differences(out, a):
    for i in prange(a.shape[0]):
        for j in range(a.shape[1]):
            out[j] -= a[i, j]


@svod.jit
def rows_summed(a, start):
    acc = np.full(a.shape[1], start, a.dtype)
    for i in prange(a.shape[0]):
        acc += a[i, :]
    return acc


@svod.jit
def rows_taken_away(a):
    acc = np.zeros(a.shape[1], a.dtype)
    for i in prange(a.shape[0]):
        acc -= a[i, :] * 2
    return acc


@svod.kernel
def positive_rows_summed(out, a):
    for i in prange(a.shape[0]):
        if a[i, 0] > 0:  # (a gate that reads the loop's variable: the element is still shared)
            for j in range(a.shape[1]):
                out[j] += a[i, j]


@svod.jit
def positive_rows(a):
    acc = np.zeros(a.shape[1], a.dtype)
    for i in prange(a.shape[0]):
        if a[i, 0] > 0:
            acc += a[i, :]
    return acc


@svod.kernel
def counted_once_each(out, a):
    for _i in prange(a.shape[0]):
        out[0] += 1.0  # every item the same value: NumPy's sum is the count, which a store would lose


@svod.kernel
def truncated_each_turn(out, a):
    for i in prange(a.shape[0]):
        out[0] += a[i] * 0.5  # int32 + float64 is cast back each turn: not a sum of the halves


def _floats(device) -> list[type]:
    return [f for f in (np.float32, np.float64) if not refuses(device, dtypes.from_numpy(np.dtype(f)))]


@pytest.mark.parametrize("rows", [0, 1, 7, 997])
def test_a_prange_adds_into_shared_elements_as_python_does(device, rows):
    rng = np.random.default_rng(rows)
    for f in _floats(device):
        a = rng.standard_normal((rows, 5)).astype(f)
        start = np.array([1.5, -0.0, np.inf, 2.0, -3.0], f)
        got, taken = start.copy(), start.copy()
        column_sums(got, a, device=device)
        column_differences(taken, a, device=device)
        want = start.astype(np.float64) + a.astype(np.float64).sum(axis=0)
        np.testing.assert_allclose(got, want, rtol=1e-5 if f == np.float32 else 1e-12, atol=1e-5)
        np.testing.assert_allclose(taken, start.astype(np.float64) - a.astype(np.float64).sum(axis=0),
                                   rtol=1e-5 if f == np.float32 else 1e-12, atol=1e-5)
        if rows == 0:
            assert np.signbit(got[1]) and np.array_equal(got, start)  # nothing added: -0.0 stays


def test_an_int32_sum_into_shared_elements_wraps_exactly(device):
    info = np.iinfo(np.int32)
    a = np.array([[info.max, info.min, 7], [1, -1, -8], [info.max, info.min, 3]], np.int32)
    got = np.array([5, 0, -2], np.int32)
    want = got + a.sum(axis=0, dtype=np.int32)  # (wraps, as NumPy's int32 elements do)
    column_sums(got, a, device=device)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [1, 13, 1000])
def test_a_jitted_array_reduction_over_a_prange_is_the_rows_sum(device, rows):
    f = _floats(device)[-1]
    a = np.random.default_rng(rows).standard_normal((rows, 3)).astype(f)
    got = rows_summed(a, f(0.25), device=device)
    np.testing.assert_allclose(got, rows_summed.fn(a, f(0.25)), rtol=1e-5 if f == np.float32 else 1e-12)
    assert got.dtype == f
    np.testing.assert_allclose(rows_taken_away(a, device=device), rows_taken_away.fn(a),
                               rtol=1e-5 if f == np.float32 else 1e-12)


@svod.jit
def weighted_planes(planes, weights):
    acc = np.zeros(planes.shape[1:], planes.dtype)
    for n in prange(planes.shape[0]):
        w = weights[n] * 0.5
        acc += w * planes[n]
    return acc


@svod.jit
def started_planes(planes, start):
    acc = start.copy()
    for n in prange(planes.shape[0]):
        acc -= planes[n]
    return acc


@svod.jit
def planes_and_a_race(planes, out):
    acc = np.zeros(planes.shape[1:], planes.dtype)
    for n in prange(planes.shape[0]):
        out[0] = n  # every work item writes out[0]: refused, whatever acc's size
        acc += planes[n]
    return acc


@pytest.mark.parametrize("turns", [1, 3, 8])
def test_a_reduction_into_a_large_array_runs_its_turns_in_order(device, turns):
    """An array the turns share larger than a CPU thread's private copies hold (``PRIVATE_BYTES``) takes its
    turns in order, each statement over every thread, where the loop does nothing else but compute its turn's
    names: from zero the sum is Python's, bit for bit (with one kernel and atomic adds it would be the
    threads' order); from another start, the start plus the turns' sum, as a ``range`` loop's is. A loop that
    also races stays a ``prange``, and is refused as it was."""
    f = _floats(device)[-1]
    shape = (turns, 3 + PRIVATE_BYTES // np.dtype(f).itemsize // 97, 97)
    rng = np.random.default_rng(turns)
    planes = rng.standard_normal(shape).astype(f)
    planes[0, 0, :3] = [np.nan, np.inf, -0.0]
    weights = rng.standard_normal(turns).astype(f)
    got = weighted_planes(planes, weights, device=device)
    np.testing.assert_array_equal(got, weighted_planes.fn(planes, weights))
    assert got.dtype == f and np.isnan(got[0, 0]) and np.isinf(got[0, 1])
    start = rng.standard_normal(shape[1:]).astype(f)
    np.testing.assert_allclose(started_planes(planes, start, device=device), started_planes.fn(planes, start),
                               rtol=1e-5 if f == np.float32 else 1e-12, atol=1e-5)
    if turns > 1:  # (one work item races with none)
        with pytest.raises(RaceError, match="out"):
            planes_and_a_race(planes, np.zeros(1, f), device=device)


def test_an_array_reduction_under_an_if_adds_the_rows_it_takes(device):
    f = _floats(device)[-1]
    a = np.random.default_rng(4).standard_normal((101, 4)).astype(f)
    got = np.zeros(4, f)
    positive_rows_summed(got, a, device=device)
    tolerance = 1e-5 if f == np.float32 else 1e-12
    np.testing.assert_allclose(got, a[a[:, 0] > 0].astype(np.float64).sum(axis=0), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(positive_rows(a, device=device), positive_rows.fn(a), rtol=tolerance, atol=tolerance)


def test_a_shared_element_every_item_sets_alike_or_casts_back_stays_a_race():
    with pytest.raises(RaceError, match="the store to out"):
        counted_once_each(np.zeros(1), np.zeros(4))
    with pytest.raises(RaceError, match="the store to out"):
        truncated_each_turn(np.zeros(1, np.int32), np.arange(4, dtype=np.int32))


@svod.kernel
def histogram(counts, v):
    for i in prange(v.shape[0]):
        counts[v[i]] += 1


@svod.kernel
def weighted_scatter(out, v, w):
    for i in prange(v.shape[0]):
        out[v[i]] -= w[i]


@svod.jit
def bincounts(v, bins):
    counts = np.zeros(bins, np.int32)
    for i in prange(v.shape[0]):
        counts[v[i]] += 1
    return counts


@pytest.mark.parametrize("n", [0, 1, 7, 997])
def test_a_prange_adds_into_the_element_its_data_picks_as_python_does(device, n):
    """``counts[v[i]] += 1``: the index uses the loop's variable only through memory, so two work items may pick
    one element (numba's histogram races there); each adds atomically."""
    rng = np.random.default_rng(n)
    v = rng.integers(0, 6, n).astype(np.int32)
    counts = np.full(6, 5, np.int32)
    histogram(counts, v, device=device)
    want = np.full(6, 5, np.int32)
    np.add.at(want, v, 1)
    np.testing.assert_array_equal(counts, want)
    np.testing.assert_array_equal(bincounts(v % 6, 6, device=device), np.bincount(v % 6, minlength=6))
    for f in _floats(device):
        w = rng.standard_normal(n).astype(f)
        got, expected = np.zeros(6, f), np.zeros(6, np.float64)
        weighted_scatter(got, v, w, device=device)
        np.subtract.at(expected, v, w.astype(np.float64))
        np.testing.assert_allclose(got, expected, rtol=1e-5 if f == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("picked", [4, -1])
def test_an_element_the_data_picks_outside_the_array_is_refused_by_bounds(device, picked):
    """A kernel's index read from memory is checked as every access is (a negative one too: docs/semantics.md)."""
    counts = np.zeros(4, np.int32)
    with pytest.raises(IndexOutOfBoundsError, match=f"counts has 4 elements but was accessed at index {picked}"):
        histogram(counts, np.array([0, 1, picked, 2], np.int32), device=device)


@svod.jit
def complex_rows_summed(z):
    acc = np.zeros(z.shape[1], z.dtype)
    for i in prange(z.shape[0]):
        acc += z[i, :] * 2
    return acc


@pytest.mark.parametrize("rows", [0, 1, 7, 541])  # (WebGPU's 32-bit indices hold 812 rows of its 3-D views)
def test_a_prange_adds_complex_values_into_shared_elements_part_by_part(device, rows):
    """A complex ``acc[j] += z[i, j]`` (npbench's scattering self-energies): each part adds atomically, the real
    value's zero imaginary part too."""
    rng = np.random.default_rng(rows)
    for f in _floats(device):
        c = np.complex64 if f == np.float32 else np.complex128
        z = (rng.standard_normal((rows, 4)) + 1j * rng.standard_normal((rows, 4))).astype(c)
        x = rng.standard_normal((rows, 4)).astype(f)
        tolerance = 1e-5 if f == np.float32 else 1e-12
        got = np.array([1.5 - 2j, -0.0 - 0.0j, 3j, -4.0], c)
        want = got + z.astype(np.complex128).sum(axis=0)
        column_sums(got, z, device=device)  # (a kernel takes complex arrays as they come)
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
        got = np.array([1.5 - 2j, -0.0 - 0.0j, 3j, -4.0], c)
        want = got - x.astype(np.float64).sum(axis=0)
        column_differences(got, x, device=device)
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
        if rows:
            np.testing.assert_allclose(complex_rows_summed(z, device=device), complex_rows_summed.fn(z),
                                       rtol=tolerance, atol=tolerance)
