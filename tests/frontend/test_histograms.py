"""NumPy's accumulating scatters and counts in ``@svod.jit`` functions (``svod.frontend.histograms``):
``np.add.at`` and the other ufuncs' ``.at``, ``np.bincount`` and ``np.histogram``, each compared with the same
function run as plain Python (NumPy) on every device: repeated and negative indices, sizes 0, 1 and primes,
NaNs, infinities, zeros of both signs and integer extremes; a float ``.at`` bit for bit (it runs in index
order), an index out of bounds an ``IndexOutOfBoundsError``."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.dtype import dtypes
from svod.errors import GraphError, IndexOutOfBoundsError, KernelSyntaxError
from svod.frontend.oracle import as_python, python_arguments
from tests.helpers import numpy_quietly

SIZES = (0, 1, 7, 13)


def held(device: Device, dtype: str) -> bool:
    return dtypes.from_numpy(np.dtype(dtype)) in device.caps.element_dtypes


def widest_float(device: Device) -> str:
    return "float64" if held(device, "float64") else "float32"


def exactly(fn: svod.frontend.jit.Jit, device: Device, *args: object) -> None:
    """``fn`` on ``device`` gives what plain Python gives, bit for bit: its arrays after the run, and what
    it returns (NaN where NumPy's is)."""
    want_args = python_arguments(args)
    with numpy_quietly():  # NaNs and overflows, as the device makes them
        want = as_python(fn)(*want_args)
    got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got = fn(*got_args, device=device)
    for expected, actual in zip(want_args, got_args, strict=True):
        if isinstance(expected, np.ndarray):
            np.testing.assert_array_equal(actual, expected)
    wanted, results = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(wanted) == len(results)
    for expected, actual in zip(wanted, results, strict=True):
        assert isinstance(actual, np.ndarray) and actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual, expected)


# ---- np.add.at and the others ----------------------------------------------------------------------------------

@svod.jit
def accumulates(a, idx, v):
    np.add.at(a, idx, v)
    np.subtract.at(a, idx[::2], 1)
    np.maximum.at(a, idx, v * 2)
    np.minimum.at(a, idx[1::3], v[1::3])
    return a


@svod.jit
def accumulates_rows(a, rows, cols, v):
    np.add.at(a, rows, v)  # each row of a at rows[k] gets v's row
    np.add.at(a, (rows, cols), 3)  # one element per (rows[k], cols[k])
    np.add.at(a, 0, v[0])
    return a


@svod.jit
def reads_what_it_updates(a, idx):
    np.add.at(a, idx, a[::-1])  # NumPy reads the values before any update
    np.add.at(a[1:], 0, 1)
    return a


def updates(device: Device, dtype: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An array of 11 ``dtype`` numbers, ``n`` indices into it (repeating, some negative) and ``n`` values."""
    rng = np.random.default_rng(seed)
    a = np.arange(-5, 6).astype(dtype)
    idx = rng.integers(-11, 11, n).astype(np.int32 if not held(device, "int64") else np.int64)
    if np.dtype(dtype).kind == "f":
        v = (rng.standard_normal(n) * 3).astype(dtype)
        special = [np.nan, np.inf, -np.inf, -0.0, 1e-30] if device.caps.ieee_floats else [-0.0, 1e-30]
        v[:min(n, len(special))] = special[:n]
    else:
        info = np.iinfo(dtype)
        v = rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(dtype)
        v[:min(n, 2)] = [info.max, info.min][:n]  # sums that wrap, as NumPy's do
    return a, idx, v


@pytest.mark.parametrize("n", SIZES)
def test_ufunc_at_updates_as_numpy_unbuffered(device, n):
    """Floats are updated in index order (NumPy's sum bit for bit), integers by atomic updates (exact)."""
    for dtype in (widest_float(device), "int32", "uint32", "int64"):
        if held(device, dtype):
            exactly(accumulates, device, *updates(device, dtype, n, n))


def test_ufunc_at_through_rows_and_pairs_of_indices(device):
    dtype = widest_float(device)
    rows = np.array([2, 0, 2, -1, 2], np.int32)
    cols = np.array([1, 1, 1, 0, -2], np.int32)
    exactly(reads_what_it_updates, device, np.arange(7.0).astype(dtype), np.array([1, 1, 6, 0, 1, 2, 1], np.int32))
    for kind in (dtype, "int32"):
        a = np.arange(12).reshape(4, 3).astype(kind)
        v = np.arange(15).reshape(5, 3).astype(kind) / 4 if kind == dtype else np.arange(15, dtype=kind).reshape(5, 3)
        if device.caps.index_bits == 32:  # a row index read from memory times the row's length may pass 32 bits
            with pytest.raises(GraphError, match="computes indices in 32 bits"):
                accumulates_rows(a, rows, cols, v, device=device)
            continue
        exactly(accumulates_rows, device, a, rows, cols, v)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_ufunc_at_past_either_end_is_an_index_error(device, dtype):
    for idx in ([0, 3], [-4, 1]):
        with pytest.raises(IndexOutOfBoundsError, match=r"test_histograms\.py"):
            accumulates(np.zeros(3, dtype), np.array(idx, np.int32), np.ones(2, dtype), device=device)


@svod.jit
def multiplies_at(a, idx):
    np.multiply.at(a, idx, 2.0)


@svod.jit
def subtracts_at_bools(a, idx):
    np.subtract.at(a, idx, True)


@svod.jit
def adds_a_longer_array_at(a, idx, v):
    np.add.at(a, idx, v)


@svod.jit
def adds_at_a_computed_array(a, idx):
    np.add.at(a * 2, idx, 1.0)


@pytest.mark.parametrize(("fn", "args", "says"), [
    (multiplies_at, (np.zeros(3), np.zeros(2, np.int64)), "np.multiply.at is not one svod has"),
    (subtracts_at_bools, (np.zeros(3, bool), np.zeros(2, np.int64)), "NumPy refuses np.subtract.at for an array"),
    (adds_a_longer_array_at, (np.zeros(3), np.zeros(2, np.int64), np.ones(5)), r"values of shape \(5,\) do not"),
    (adds_at_a_computed_array, (np.zeros(3), np.zeros(2, np.int64)), "updates an array of the function's"),
])
def test_what_ufunc_at_svod_does_not_have_is_refused_at_its_line(fn, args, says):
    with pytest.raises(KernelSyntaxError, match=f"test_histograms.py:\\d+: .*{says}"):
        fn(*args)


# ---- np.bincount -----------------------------------------------------------------------------------------------

@svod.jit
def counts(x, w):
    return np.bincount(x, minlength=9), np.bincount(x, weights=w, minlength=11)


@pytest.mark.parametrize("n", SIZES)
def test_bincount_of_m_counters_agrees_with_numpy(device, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 9, n).astype(np.int32)
    w = rng.standard_normal(n)
    if not held(device, "int64"):  # NumPy's counts are int64, which WebGPU holds none of
        with pytest.raises(GraphError, match="cannot hold int64"):
            counts(x, w.astype(np.float32), device=device)
        return
    exactly(counts, device, x, w.astype(widest_float(device)))


def test_bincount_of_a_value_past_its_counters_is_an_index_error(device):
    if not held(device, "int64"):  # the counts are int64, which the device holds none of
        with pytest.raises(GraphError, match="cannot hold int64"):
            counts(np.array([0, 9], np.int32), np.ones(2, np.float32), device=device)
        return
    for x in ([0, 9], [-1, 2]):
        with pytest.raises(IndexOutOfBoundsError, match=r"test_histograms\.py"):
            counts(np.array(x, np.int64), np.ones(2), device=device)


@svod.jit
def counts_to_the_largest(x):
    return np.bincount(x)


@svod.jit
def counts_floats(x):
    return np.bincount(x, minlength=3)


@pytest.mark.parametrize(("fn", "x", "says"), [
    (counts_to_the_largest, np.zeros(3, np.int64), r"makes max\(x\) \+ 1 counts, a length known only after the run"),
    (counts_floats, np.zeros(3), "counts a 1-D array of integers"),
])
def test_what_bincount_svod_does_not_have_is_refused_at_its_line(fn, x, says):
    with pytest.raises(KernelSyntaxError, match=f"test_histograms.py:\\d+: .*{says}"):
        fn(x)


# ---- np.histogram ----------------------------------------------------------------------------------------------

@svod.jit
def histograms(x, bins):
    counted, edges = np.histogram(x, bins, range=(-1.0, 2.5))
    found, spread = np.histogram(x, 5)
    whole = np.histogram(x, bins=3, range=(0, 10))[0] * 2
    return counted, edges, found, spread, whole


def histogram_values(device: Device, dtype: str, n: int, seed: int) -> np.ndarray:
    """``n`` numbers of ``dtype`` on and around the edges, with the specials (floats: NaN and infinities where
    a range drops them, zeros of both signs, the range's ends)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = (np.round(rng.standard_normal(n) * 8) / 4).astype(dtype)
        special = [-1.0, 2.5, -0.0, 0.0, 0.5, 2.4999999, -1.0000001]
    else:
        x = rng.integers(-3, 12, n).astype(dtype)
        special = [0, 10, -1, 11, np.iinfo(dtype).min if n > 12 else 0]
    x[:min(n, len(special))] = np.array(special[:n]).astype(dtype)
    return x


@pytest.mark.parametrize("n", (1, 7, 13, 1000))
def test_histogram_agrees_with_numpy(device, n):
    """Each value's bin as NumPy finds it (the last bin closed on the right, values outside dropped), the
    edges as ``np.linspace`` computes them, in the values' dtype where NumPy keeps it."""
    n = min(n, 101) if device.name == "PYTHON" else n  # the reference interprets each value's bin search
    for dtype in (widest_float(device), "float32", "int32", "int64"):
        if not held(device, dtype):
            continue
        if not held(device, "int64"):  # the counts are int64 (a float32 histogram's positions float64, as NumPy's)
            with pytest.raises(GraphError, match=r"cannot hold (int64|float64)"):
                histograms(histogram_values(device, dtype, n, n), 7, device=device)
            return
        exactly(histograms, device, histogram_values(device, dtype, n, n), 7)


@svod.jit
def found_range(x):
    counted, edges = np.histogram(x, 4)
    return counted, edges


def test_histogram_of_equal_values_empty_arrays_and_nd_arrays(device):
    if not held(device, "int64"):  # the counts are int64, which the device holds none of
        with pytest.raises(GraphError, match="cannot hold int64"):
            found_range(np.full(5, 3.0, np.float32), device=device)
        return
    dtype = widest_float(device)
    for x in (np.full(5, 3.0, dtype), np.full(4, 7, np.int64), np.zeros(0, dtype), np.arange(12.0).reshape(3, 4),
              np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]), np.array([1e-300, 2e-300, 1e300])):
        if held(device, str(x.dtype)):
            exactly(found_range, device, x)


def test_histogram_without_a_range_of_values_that_are_not_finite_counts_nothing(device):
    """NumPy raises ValueError (the range it finds is not finite), which a plan cannot before its run:
    svod counts nothing and the edges are NaN (what docs/numpy.md says)."""
    if not held(device, "int64"):  # the counts are int64, which the device holds none of
        with pytest.raises(GraphError, match="cannot hold int64"):
            found_range(np.array([1.0, np.nan, 2.0], np.float32), device=device)
        return
    if not device.caps.ieee_floats:
        pytest.skip(f"{device.name}'s floats are not IEEE 754: NaN and inf are not values it keeps")
    for bad in (np.nan, np.inf):
        got, edges = found_range(np.array([1.0, bad, 2.0]), device=device)
        np.testing.assert_array_equal(got, np.zeros(4, np.int64))
        assert np.isnan(edges).all()
        with pytest.raises(ValueError, match="is not finite"):
            np.histogram(np.array([1.0, bad, 2.0]), 4)


@svod.jit
def histogram_of_edges(x):
    counted, _edges = np.histogram(x, np.array([0.0, 1.0, 3.0]))
    return counted


@svod.jit
def weighed_histogram(x):
    counted, _edges = np.histogram(x, 4, weights=x)
    return counted


@svod.jit
def backwards_range(x):
    counted, _edges = np.histogram(x, 4, range=(2.0, 1.0))
    return counted


@svod.jit
def infinite_range(x):
    counted, _edges = np.histogram(x, 4, range=(0.0, np.inf))
    return counted


@svod.jit
def histogram_in_an_expression(x):
    return np.histogram(x, 4) + 1


@svod.jit
def range_of_the_values(x):
    low = x.min()
    counted, _edges = np.histogram(x, 4, range=(low, 1.0))
    return counted


@pytest.mark.parametrize(("fn", "says"), [
    (histogram_of_edges, "bins is a number of equal bins here"),
    (weighed_histogram, "weights= is not one svod has"),
    (backwards_range, "max must be larger than min in range parameter"),
    (infinite_range, r"supplied range of \[0.0, inf\] is not finite"),
    (histogram_in_an_expression, r"np.histogram makes \(counts, edges\)"),
    (range_of_the_values, "range is two numbers the host knows before the run"),
])
def test_what_histogram_svod_does_not_have_is_refused_at_its_line(fn, says):
    with pytest.raises(KernelSyntaxError, match=f"test_histograms.py:\\d+: .*{says}"):
        fn(np.arange(4.0))
