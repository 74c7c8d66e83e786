"""NumPy functions each of whose elements is a loop of its own (``svod.frontend.array_lookups``): ``np.convolve``
and ``np.correlate`` in every mode, ``np.interp``, ``np.searchsorted``; each compared, on every device, with the
function run as plain NumPy, over one-element and longer arrays, NaN, infinities, ties."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import GraphError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses


@svod.jit
def convolutions(a, v):
    return (np.convolve(a, v), np.convolve(a, v, "same"), np.convolve(a, v, mode="valid"), np.correlate(a, v),
            np.correlate(a, v, "same"), np.correlate(a, v, "full"))


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 2), (5, 3), (3, 4), (8, 7), (2, 9)])
def test_convolve_and_correlate_in_every_mode(device, n, m):
    """The full convolution's elements each mode keeps, the shorter array's start as NumPy's (and NumPy's
    correlation of a shorter first array: the other way, reversed)."""
    rng = np.random.default_rng(n * 10 + m)
    a, v = rng.normal(size=n), rng.normal(size=m)
    if refuses(device, svod.dtypes.float64):
        a, v = a.astype(np.float32), v.astype(np.float32)
    agrees_with_python(convolutions, device, a, v, rtol=1e-5 if a.dtype == np.float32 else 1e-12)


@svod.jit
def interpolated(x, xp, fp):
    return np.interp(x, xp, fp), np.interp(x, xp, fp, left=-1.0, right=99.0), np.interp(x[0] + 0.5, xp, fp)


INTERPOLATIONS = {
    "points": ([-1.0, 0, 0.5, 1, 1.5, 2, 2.5, 3, 10, np.nan, np.inf, -np.inf], [0.0, 1, 2, 3], [0.0, 10, -5, 7]),
    "one point": ([-1.0, 0, 0.5, 1, 2], [1.0], [5.0]),
    "infinite values": ([0.5, 1.5, 2.0, 0.0], [0.0, 1, 2], [np.inf, np.inf, 1]),
    "random": (np.linspace(-2.0, 12.0, 101), np.sort(np.random.default_rng(0).uniform(0.0, 10.0, 17)),
               np.random.default_rng(1).normal(size=17)),
}


@pytest.mark.parametrize("case", list(INTERPOLATIONS))
def test_interp_as_numpy_computes_it(device, case):
    """The binary search and NumPy's float64 arithmetic: ``fp`` itself at a sample point, ``left``/``right`` (by
    default ``fp``'s ends) outside, NaN of NaN, a segment between infinities from its other end, float32 samples
    and integer ``x`` computed in float64 as NumPy's."""
    x, xp, fp = (np.array(v, np.float64) for v in INTERPOLATIONS[case])
    if refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match="cannot hold float64"):
            interpolated(x.astype(np.float32), xp.astype(np.float32), fp.astype(np.float32), device=device)
        return
    if not device.caps.ieee_floats:
        x, fp = np.nan_to_num(x, posinf=20.0, neginf=-20.0), np.nan_to_num(fp, posinf=5.0)
    agrees_with_python(interpolated, device, x, xp, fp, rtol=0, atol=0)
    agrees_with_python(interpolated, device, np.arange(-1, 4, dtype=np.int32), xp.astype(np.float32),
                       fp.astype(np.float32), rtol=0, atol=0)


@svod.jit
def placed_in_order(a, v):
    return (np.searchsorted(a, v), np.searchsorted(a, v, side="right"), np.searchsorted(a, 2.0),
            np.searchsorted(a, v[0], "right"))


@pytest.mark.parametrize("a", [[0.0, 1, 1, 1, 2, 3, np.nan, np.nan], [1.0], [-np.inf, 0, 2, 2, np.inf],
                               np.sort(np.random.default_rng(0).integers(0, 5, 17)).astype(float)])
def test_searchsorted_places_before_or_after_equal_elements_and_nan_last(device, a):
    """The binary search in NumPy's order (NaN after every number, as NumPy sorts it), on both sides; integer
    arrays compared as integers."""
    a, v = np.array(a), np.array([np.nan, -1, 0, 1, 1.5, 2, 3, 4, np.inf, -np.inf, -0.0])
    if not device.caps.ieee_floats:
        a, v = a[np.isfinite(a)], v[np.isfinite(v)]
    if refuses(device, svod.dtypes.float64):
        a, v = a.astype(np.float32), v.astype(np.float32)
    if refuses(device, svod.dtypes.int64):  # (NumPy's indices are int64)
        with pytest.raises(GraphError, match="cannot hold int64"):
            placed_in_order(a, v, device=device)
        return
    agrees_with_python(placed_in_order, device, a, v, rtol=0, atol=0, typed=True)
    integers = np.array([1, 3, 3, 7], np.int32)
    agrees_with_python(placed_in_order, device, integers, np.arange(-1, 9, dtype=np.int32), typed=True)
