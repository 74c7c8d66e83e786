"""NumPy's scans and statistics in ``@svod.jit`` array statements (``svod.frontend.array_stats``): each compared,
on every device, with the same function run as plain NumPy (values and dtypes), over one-element, prime and
empty shapes, with NaN and infinities where a device computes with them, and ``ddof`` past the count."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import GraphError, KernelSyntaxError
from tests.frontend.test_array_math import agrees_or_refused
from tests.helpers import numpy_quietly, refuses

SHAPES = [(1, 1), (4, 6), (7, 3)]


def data(device, *shape: int) -> np.ndarray:
    """Values of ``shape``, a NaN and an inf among them where the device computes with them."""
    x = np.cos(np.arange(float(np.prod(shape)))).reshape(shape) * 3.0
    if device.caps.ieee_floats and x.size > 4:
        x.flat[2], x.flat[-1] = np.nan, np.inf
    return x


@svod.jit
def scans(x):
    return np.cumprod(x, axis=1), np.cumprod(x), x.cumprod(0), x.cumprod(axis=-1), np.cumsum(x, 1), x.cumsum(), \
        np.cumprod(x[:1] + 1.0)


@pytest.mark.parametrize("shape", [*SHAPES, (0, 3)])
def test_cumprod_along_each_axis_and_flattened(device, shape):
    agrees_or_refused(scans, device, data(device, *shape), rtol=1e-12)


def test_the_scans_of_int32_are_numpys_int64(device):
    agrees_or_refused(scans, device, np.array([[3, -1, 7], [2, 0, -5]], np.int32), needs=svod.dtypes.int64)


@svod.jit
def spreads(x, ddof):
    return (x.var(), np.var(x, axis=0), np.var(x, axis=1, ddof=1, keepdims=True), x.std(axis=1), np.std(x, ddof=ddof),
            x.var(axis=(0, 1), keepdims=True), np.std(x, axis=-1, ddof=1.5), x.var(1, None, None, ddof),
            x.var(axis=None) - x.mean(axis=None))


@pytest.mark.parametrize("shape", SHAPES)
def test_var_and_std_are_the_mean_squared_deviation(device, shape):
    """With a NaN or an inf in a row, that row's is NaN; ``ddof`` at or past the count divides by 0 (NaN or inf,
    as NumPy's, which warns)."""
    x = data(device, *shape)
    agrees_or_refused(spreads, device, x, 1, rtol=1e-12)
    if device.caps.ieee_floats:  # WGSL's 0 / 0 need not be NaN
        agrees_or_refused(spreads, device, x, 7, rtol=1e-12)


def test_var_of_integers_is_float64(device):
    agrees_or_refused(spreads, device, np.array([[3, -1, 7], [2, 0, -5]], np.int32), 0, needs=svod.dtypes.float64)


@svod.jit
def averages(x, row_weights, weights):
    return np.average(x), np.average(x, axis=1), np.average(x, axis=1, weights=row_weights), \
        np.average(x, weights=weights), np.average(x, axis=0, weights=weights, keepdims=True), \
        np.average(x[0], weights=row_weights)


@pytest.mark.parametrize("shape", SHAPES)
def test_average_with_and_without_weights(device, shape):
    x = data(device, *shape)
    weights = np.abs(np.sin(np.arange(x.size, dtype=float))).reshape(shape) + 0.25
    agrees_or_refused(averages, device, x, weights[0] * 2.0, weights, rtol=1e-12)


def test_average_of_integers_is_float64(device):
    x = np.array([[3, -1, 7], [2, 0, -5]], np.int32)
    agrees_or_refused(averages, device, x, np.array([1, 2, 3], np.int32), x + 6, needs=svod.dtypes.float64)


@svod.jit
def counts(x):
    return np.count_nonzero(x), np.count_nonzero(x, axis=0), np.count_nonzero(x, axis=1, keepdims=True), \
        np.count_nonzero(x > 1)


@pytest.mark.parametrize("shape", [*SHAPES, (0, 3)])
def test_count_nonzero_counts_nan_and_not_negative_zero(device, shape):
    x = np.round(data(device, *shape)).astype(np.float32 if refuses(device, svod.dtypes.float64) else np.float64)
    x.flat[:1] = -0.0
    agrees_or_refused(counts, device, x, needs=svod.dtypes.int64)


@svod.jit
def products_in_expressions(a, b, x):
    return np.dot(a, b) * 2.0 + a.sum(), np.sqrt(np.dot(a, a)) - np.linalg.norm(a), \
        np.argmax(x, axis=1, keepdims=True), np.argmin(x, axis=0, keepdims=True), x.argmax(keepdims=True)


@pytest.mark.parametrize("n", [1, 7])
def test_a_dot_of_vectors_is_a_scalar_in_an_expression_and_argmax_keeps_dims(device, n):
    a, b, x = np.arange(n) - 2.5, np.cos(np.arange(n)), np.cos(np.arange(3 * n)).reshape(3, n)
    if not refuses(device, svod.dtypes.float64):
        agrees_or_refused(products_in_expressions, device, a, b, x, needs=svod.dtypes.int64, rtol=1e-12)
    agrees_or_refused(products_in_expressions, device, *(v.astype(np.float32) for v in (a, b, x)),
                      needs=svod.dtypes.int64, rtol=1e-5)


@svod.jit
def var_in_float32(x):
    return np.var(x, dtype=np.float32)


@svod.jit
def average_returned(x):
    return np.average(x, returned=True)


@svod.jit
def covariances(x):
    return np.cov(x), np.cov(x[:1]), np.cov(x[0]), np.cov(x.T) * 2.0


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 5), (7, 3), (2, 13), (3, 0)])
def test_cov_is_numpys_of_rows_and_of_one_variable(device, shape):
    """Each row a variable: float64 of float64 or integer data, one variable's (a row, a 1-D array) squeezed to a
    0-d variance, and NaNs where a row has one value or none (NumPy warns, ``1 / (n - 1)`` is inf there)."""
    agrees_or_refused(covariances, device, data(device, *shape), needs=svod.dtypes.float64, rtol=1e-12)
    with np.errstate(invalid="ignore"):  # the NaN and inf data holds, as int32
        integers = (data(device, *shape) * 7).astype(np.int32)
    agrees_or_refused(covariances, device, integers, needs=svod.dtypes.float64, rtol=1e-12)


@svod.jit
def correlations(x):
    return np.corrcoef(x), np.corrcoef(x[:1]), np.corrcoef(x[0]), np.corrcoef(x.T + 1.0)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 5), (7, 3), (2, 13), (3, 0)])
def test_corrcoef_is_numpys_clipped_and_of_one_variable(device, shape):
    """Each covariance over its row's deviation, then its column's, clipped to [-1, 1]; of one variable ``c / c``
    (1.0, or NaN where the variance is); NaN rows where a row holds one value or a NaN."""
    agrees_or_refused(correlations, device, data(device, *shape), needs=svod.dtypes.float64, rtol=1e-12)
    agrees_or_refused(correlations, device, np.arange(np.prod(shape)).reshape(shape) % 3, needs=svod.dtypes.float64,
                      rtol=1e-12)


@svod.jit
def cov_by_columns(x):
    return np.cov(x, rowvar=False)


@svod.jit
def weights_across(x, w):
    return np.average(x, weights=w)


@svod.jit
def cumprod_out(x, y):
    return np.cumprod(x, out=y)


@svod.jit
def scan_past_the_axes(x):
    return np.cumprod(x, axis=2)


@pytest.mark.parametrize(("fn", "says"), [
    (var_in_float32, "np.var's dtype= is not one svod takes"), (average_returned, "np.average's returned="),
    (weights_across, r"np.average's weights of shape \(4,\) for an array of shape \(3, 4\)"),
    (cumprod_out, "np.cumprod's out= is not one svod takes"),
    (scan_past_the_axes, r"np.cumprod's axis \(2,\) is not an axis"),
    (cov_by_columns, "np.cov's rowvar= is not one svod takes")])
def test_what_svod_does_not_take_is_refused_at_its_line(fn, says):
    x = np.ones((3, 4))
    args = (x, np.ones(4)) if fn is weights_across else (x, x.copy()) if fn is cumprod_out else (x,)
    with pytest.raises(KernelSyntaxError, match=f"test_array_stats.py:\\d+: {says}"):
        fn(*args)


@svod.jit
def covariance_of_columns(data):
    """npbench's covariance2: each column of ``data`` a variable."""
    return np.cov(np.transpose(data))


@svod.jit
def covariance_filled(m, float_n, data):
    """npbench's covariance: the deviations in place, then each row of the upper triangle and its mirror."""
    mean = np.sum(data, axis=0) / float_n
    data -= mean
    cov = np.zeros((m, m), dtype=data.dtype)
    for i in range(m):
        cov[i:m, i] = cov[i, i:m] = data[:, i] @ data[:, i:m] / (float_n - 1.0)
    return cov


def columns(rows: int, variables: int) -> np.ndarray:
    return np.cos(np.arange(rows * variables, dtype=np.float64) * 0.7).reshape(rows, variables) * 3.0 + 1.5


@pytest.mark.parametrize("shape", [(1, 4), (2, 1), (2, 2), (3, 5), (7, 3), (13, 11), (9, 17)])
def test_covariance_of_columns_is_numpys_either_way_npbench_writes_it(device, shape):
    """``data - mean``, then ``cov[i, j] = sum_k d[k, i] * d[k, j] / (n - 1)``: np.cov of the transpose, and
    npbench's loop filling the upper triangle and its mirror, each against NumPy's np.cov (NaN of one row)."""
    data = columns(*shape)
    with numpy_quietly():
        want = np.cov(data.T)
    if refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match="cannot hold float64"):
            covariance_of_columns(data, device=device)
        return
    np.testing.assert_allclose(covariance_of_columns(data, device=device), want, rtol=1e-12, atol=1e-13)
    filled = covariance_filled(shape[1], float(shape[0]), data.copy(), device=device)
    np.testing.assert_allclose(filled, want.reshape(filled.shape), rtol=1e-12, atol=1e-13)


@svod.jit
def skipping_nans(x):
    return (np.nansum(x), np.nansum(x, axis=1), np.nanprod(x, axis=0, keepdims=True), np.nanmean(x),
            np.nanmean(x, axis=1), np.nanmax(x, axis=1), np.nanmin(x), np.nanmax(x, axis=(0, 1), keepdims=True),
            np.nanmean(x, axis=0, dtype=np.float32))


def nans_in(device, *shape: int) -> np.ndarray:
    """``data``, where the device computes with NaN a row of NaNs too (its max, min and mean are NaN)."""
    x = data(device, *shape)
    if device.caps.ieee_floats and shape[0] > 1:
        x[-1, :] = np.nan
    return x


@pytest.mark.parametrize("shape", SHAPES)
def test_the_nan_reductions_skip_nans_as_numpys_do(device, shape):
    """``np.nansum``, ``nanprod``, ``nanmean``, ``nanmax``, ``nanmin``: the reduction of the other elements (a
    line of NaNs only: 0, 1, or NaN where NumPy warns); once refused as functions svod's array expressions lack."""
    x = nans_in(device, *shape)
    # a float32 mean's sum, in the order the device folds it: its error is relative to its terms (up to 3 here),
    # not to the mean (the float64 call returns one too: the tolerance is every output's)
    agrees_or_refused(skipping_nans, device, x, needs=svod.dtypes.float64, rtol=2e-6, atol=1e-6)
    agrees_or_refused(skipping_nans, device, x.astype(np.float32), rtol=2e-6, atol=1e-6)


def test_the_nan_reductions_of_integers_are_the_reductions(device):
    agrees_or_refused(skipping_nans, device, np.array([[3, -1, 7], [2, 0, -5]], np.int32), needs=svod.dtypes.int64)


@svod.jit
def nan_max_of_nothing(x):
    return np.nanmax(x, axis=1)


def test_a_nan_max_of_an_empty_axis_is_refused_as_numpy_raises():
    with pytest.raises(KernelSyntaxError, match=r"np\.nanmax of an empty axis has no identity"):
        nan_max_of_nothing(np.zeros((3, 0)))
