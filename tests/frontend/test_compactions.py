"""Arrays whose length the data decides, returned from ``@svod.jit`` functions (``svod.frontend.compactions``,
``Reader.prefixes``): ``return y[:k]`` of a count the function computes, ``x[mask]`` as a value (and reduced)
and ``np.unique``, against the same function run as plain Python on every device: sizes 0, 1 and primes, masks
that keep nothing and everything, NaNs (one value to ``np.unique``), zeros of both signs and integer extremes;
any other use of such an array refused at its line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.dtype import dtypes
from svod.errors import GraphError, KernelSyntaxError
from svod.frontend import compactions
from svod.frontend.oracle import as_python, python_arguments
from tests.frontend.test_jit import agrees_with_python
from tests.frontend.test_shrinking import escape
from tests.helpers import numpy_quietly

SIZES = (0, 1, 7, 13)


def held(device: Device, dtype: str) -> bool:
    return dtypes.from_numpy(np.dtype(dtype)) in device.caps.element_dtypes


def same(fn: svod.frontend.jit.Jit, device: Device, *args: object) -> None:
    """``fn`` on ``device`` returns what plain Python returns: arrays of the same length, dtype and numbers
    (NaN where NumPy's is; -0.0 and 0.0 alike, which NumPy's own sort may order either way)."""
    with numpy_quietly():  # NaNs and overflows, as the device makes them
        want = as_python(fn)(*python_arguments(args))
    got = fn(*args, device=device)
    wanted, results = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    for expected, actual in zip(wanted, results, strict=True):
        assert isinstance(actual, np.ndarray) and actual.dtype == expected.dtype and actual.shape == expected.shape
        np.testing.assert_array_equal(actual, expected)


def values(device: Device, dtype: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype)
    if kind.kind == "f":
        x = (np.round(rng.standard_normal(n) * 3) / 2).astype(kind)
        special = [np.nan, -0.0, 0.0, np.inf, -np.inf, np.nan] if device.caps.ieee_floats else [-0.0, 0.0]
    else:
        x = rng.integers(-4, 5, n).astype(kind)
        special = [np.iinfo(kind).min, np.iinfo(kind).max]
    x[:min(n, len(special))] = np.array(special[:n], kind)
    return x


def dtypes_of(device: Device) -> tuple[str, ...]:
    found = ("float64", "float32", "int32", "int64") if device.name == "CPU" else ("float32", "int32")
    return tuple(d for d in found if held(device, d))


# ---- return y[:k] ----------------------------------------------------------------------------------------------

@svod.jit
def positives(x):
    out = np.empty_like(x)
    k = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            out[k] = x[i]
            k += 1
    return out[:k], k


@svod.jit
def doubled_first(x, m):
    out = np.empty_like(x)
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * 2
    return out[:m], x[:m - 1]


@pytest.mark.parametrize("n", SIZES)
def test_a_prefix_of_a_length_the_function_computes_comes_back(device, n):
    """numba's way of compacting, as written: the first ``k`` elements of a temporary; a length of an
    argument's, negative or past the end as Python's slice takes it (an argument's prefix is a view)."""
    for dtype in dtypes_of(device):
        x = values(device, dtype, n, n)
        if n:  # (of no elements the array statement out[k] = x[i] is refused: the rewriting takes k as 0)
            got, k = positives(x, device=device)
            np.testing.assert_array_equal(got, x[x > 0])
            assert k == np.count_nonzero(x > 0) and got.dtype == x.dtype
        for m in (0, 3, -2, n + 5):
            same(doubled_first, device, x, m)
    x = np.arange(5.0).astype(dtypes_of(device)[0])
    assert doubled_first(x, 3, device=device)[1].base is x or device.name != "CPU"


# ---- x[mask] ---------------------------------------------------------------------------------------------------

@svod.jit
def kept(x, y):
    return x[x > 0], y[x > 0] * 2 + 1


@svod.jit
def kept_by_name(x):
    big = x[np.abs(x) > 1]
    return big


@pytest.mark.parametrize("n", SIZES)
def test_x_of_a_mask_as_a_value_is_its_kept_elements_in_order(device, n):
    for dtype in dtypes_of(device):
        x = values(device, dtype, n, n + 1)
        same(kept, device, x, np.arange(n).astype(dtype))
        same(kept_by_name, device, x)
        same(kept_by_name, device, np.resize(x, (2, n)))  # a 2-D mask: its elements in C order
    same(kept, device, np.full(n, -1.0, dtypes_of(device)[0]), np.zeros(n, dtypes_of(device)[0]))  # none kept


@svod.jit
def kept_in_blocks(x, y):
    return x[x > 0], y[x > 0] * 2 + 1


@svod.jit
def rows_kept_in_blocks(x):
    return x[np.abs(x) > 1]


@pytest.mark.parametrize("n", SIZES)
def test_x_of_a_mask_counted_and_filled_in_blocks_is_the_same_in_order(device, n, monkeypatch):
    """A large ``x[mask]`` is counted in blocks of rows, then filled (``Compactions.blocked``): here at every
    size, in blocks of 3 rows (the last one shorter)."""
    monkeypatch.setattr(compactions, "COMPACT_BLOCKED_FROM", 0)
    monkeypatch.setattr(compactions, "COMPACT_BLOCKS", 3)
    for dtype in dtypes_of(device):
        x = values(device, dtype, n, n + 2)
        same(kept_in_blocks, device, x, np.arange(n).astype(dtype))
        same(rows_kept_in_blocks, device, np.resize(x, (5, n)))  # rows of n elements, C order
    same(kept_in_blocks, device, np.full(n, -1.0, dtypes_of(device)[0]), np.zeros(n, dtypes_of(device)[0]))


@pytest.mark.parametrize("n", [compactions.COMPACT_BLOCKED_FROM + 3, 100_003])
def test_x_of_a_mask_of_many_elements_is_numpys(compiled_device, n):
    x = values(compiled_device, "float32", n, 5)
    got = kept(x, np.arange(n).astype(np.float32), device=compiled_device)
    np.testing.assert_array_equal(got[0], x[x > 0])
    np.testing.assert_array_equal(got[1], np.arange(n, dtype=np.float32)[x > 0] * 2 + 1)


@svod.jit
def masked_reductions(x, t):
    truths = np.zeros(2, dtype=x.dtype)
    truths[0] = x[x > t].any()
    truths[1] = np.all(x[x != t] - t)
    kept_by_name = x[x > t]
    total = kept_by_name.sum()
    return total, np.mean(x[x > t]), (x[(x > -3) & (x < 3)] * 2 + 1).prod(axis=0), truths


@svod.jit
def binned_means(data, radius, edges):
    res = np.zeros(edges.shape[0] - 1, dtype=data.dtype)
    for i in svod.prange(edges.shape[0] - 1):
        inside = np.logical_and(edges[i] <= radius, radius < edges[i + 1])
        values = data[inside]
        res[i] = values.mean()
    return res


@pytest.mark.parametrize("n", SIZES)
def test_a_reduction_of_x_of_a_mask_is_numpys_of_the_kept_elements(device, n):
    """sum, mean, prod, any and all of ``x[mask]``, never compacted: masks that keep nothing (a mean of NaN, as
    NumPy's), everything, or some, of 1-D and 2-D arrays; in a prange loop, a mask per work item (bins that
    nothing falls in). An int32 array's sum is NumPy's int64 and its mean float64, which a device without them
    refuses."""
    for dtype in dtypes_of(device):
        x = values(device, dtype, n, n + 3)
        if np.dtype(dtype).kind == "i" and not held(device, "int64"):
            with pytest.raises(GraphError, match=r"cannot hold (int64|float64)"):  # the sum's, or the mean's
                masked_reductions(x, 0, device=device)
            continue
        for t in (-10, 0, 1, 10):
            agrees_with_python(masked_reductions, device, x, t, numpy_warns=True)
            agrees_with_python(masked_reductions, device, np.resize(x, (2, n)), t, numpy_warns=True)
    if n:
        rng = np.random.default_rng(n)
        for bins in (1, 3, 2 * n + 1):
            edges = np.linspace(0.0, 1.0, bins + 1)  # (a device's division may round otherwise: none computed)
            agrees_with_python(binned_means, device, rng.random(n), rng.random(n), edges, numpy_warns=True)


@svod.jit
def masked_reductions_in(x, t):
    return (x[x > t].sum(dtype=np.int8), np.sum(x[x > t], dtype=np.float32), x[x > t].mean(dtype=np.float32),
            np.prod(x[(x > t) & (x < 4)], 0, np.int64), x[x > t].sum(None, np.int16))


@svod.jit
def masked_float32_sum(x):
    return np.sum(x[x > 0], dtype=np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_a_reduction_of_x_of_a_mask_takes_numpys_dtype(device, n):
    """``dtype=`` (by keyword or position) casts each kept element to it and reduces in it, as NumPy does: an
    int8 sum wraps, a float32 sum of 3e38s overflows to inf where float64's would not, an integer product
    truncates each factor. (Integer-valued and order-free: NumPy's pairwise float32 sum is another order.)"""
    if not held(device, "int64") or not held(device, "float64"):
        with pytest.raises(GraphError, match="cannot hold"):
            masked_reductions_in(np.arange(3.0), 0.0, device=device)
        return
    rng = np.random.default_rng(n)
    x = np.trunc(rng.uniform(-100, 100, n)) + 0.5
    for t in (-200.0, 0.0, 50.0, 200.0):
        agrees_with_python(masked_reductions_in, device, x, t, numpy_warns=True)
    agrees_with_python(masked_float32_sum, device, np.resize([3e38, -1.0, 3e38], n), numpy_warns=True)


@svod.jit
def masked_any_of_a_dtype(x):
    return x[x > 0].any(dtype=np.int8)


@svod.jit
def masked_mean_of_an_integer(x):
    return x[x > 0].mean(dtype=np.int32)


# ---- np.unique -------------------------------------------------------------------------------------------------

@svod.jit
def uniques(x):
    u = np.unique(x)
    return u, np.unique(x[1:] * 2, equal_nan=False)


@pytest.mark.parametrize("n", SIZES)
def test_unique_is_numpys(device, n):
    """Sorted, each number once (NaNs once, unless ``equal_nan=False``), of the flattened array."""
    for dtype in dtypes_of(device):
        x = values(device, dtype, n, n + 2)
        same(uniques, device, x)
        if n:
            same(uniques, device, np.resize(x, (3, n)))


# ---- what such an array may not be -----------------------------------------------------------------------------

@svod.jit
def reads_its_kept(x):
    y = x[x > 0]
    total = y.sum()
    return y, total


@svod.jit
def keeps_without_returning(x):
    y = x[x > 0]  # noqa: F841 (made, never returned: what is refused)
    x[0] = 1.0


@svod.jit
def unique_in_an_expression(x):
    return np.unique(x) + 1


@svod.jit
def unique_with_counts(x):
    u = np.unique(x, return_counts=True)
    return u


@svod.jit
def prefix_of_a_scalar(x):
    k = x.shape[0]
    return k[:2]


@svod.jit
def masked_max(x):
    return x[x > 0].max()


@svod.jit
def reduced_under_two_masks(x):
    return (x[x > 0] * x[x < 3]).sum()


@svod.jit
def masked_sum_along_an_axis(x):
    return x[x > 0].sum(axis=1)


@svod.jit
def masked_shape(x):
    return x[x > 0].shape[0]


@svod.jit
def masked_length(x):
    return len(x[x > 0]) * np.ones(3, np.float32)


@pytest.mark.parametrize(("fn", "says"), [
    (masked_max, r"max of x\[mask\]: the mask may hold nowhere, where NumPy raises"),
    (reduced_under_two_masks, r"a reduction of x\[mask\] reads arrays under one mask only"),
    (masked_sum_along_an_axis, r"sum of x\[mask\] takes no argument but axis \(None, 0 or -1: .*\) and dtype"),
    (masked_any_of_a_dtype, r"any of x\[mask\] takes no argument but axis \(None, 0 or -1"),
    (masked_mean_of_an_integer, r"np.mean's dtype=int32 is not one svod takes \(it takes a float dtype\)"),
    (masked_shape, r"x\[mask\].shape is of the mask's count, a number NumPy gives as a Python int"),
    (masked_length, r"len\(x\[mask\]\) is of the mask's count"),
    (reads_its_kept, r"y = x\[mask\] has a length known only after the run: svod returns such an array"),
    (keeps_without_returning, "svod makes it only to return it"),
    (unique_in_an_expression, "np.unique makes an array of a length known only after the run"),
    (unique_with_counts, "np.unique takes return_counts=True: svod takes False"),
    (prefix_of_a_scalar, r"returns k\[:...\], and k is not an array"),
])
def test_what_svod_cannot_make_of_such_arrays_is_refused_at_its_line(fn, says):
    with pytest.raises(KernelSyntaxError, match=f"test_compactions.py:\\d+: .*{says}"):
        fn(np.arange(4.0))


# ---- arrays that shrink at each turn of a loop ----------------------------------------------------------------

@svod.jit
def escape_under_a_mask(cr, ci, turns):
    """The loop of ``test_shrinking.escape`` as a refusal of it once said to write it: every array whole, a mask of the
    points still running."""
    n = np.zeros(cr.shape, np.int64)
    zr = np.zeros(cr.shape)
    zi = np.zeros(cr.shape)
    live = np.ones(cr.shape, np.bool_)
    for i in range(turns):
        t = np.where(live, zr * zr - zi * zi + cr, zr)
        zi[:] = np.where(live, 2.0 * zr * zi + ci, zi)
        zr[:] = t
        out = live & (zr * zr + zi * zi > 4.0)
        n[out] = i + 1
        live &= ~out
    return n


def points(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of the plane, some escaping at once, some after a few turns, some never."""
    return np.linspace(-2.5, 0.75, n), np.where(np.arange(n) % 3 == 0, 0.0, np.linspace(-1.25, 1.25, n))


@pytest.mark.parametrize("n", SIZES)
def test_an_array_that_shrinks_at_each_turn_computes_what_keeping_it_whole_computes(n):
    """(``svod.frontend.shrinking``; ``tests/frontend/test_shrinking.py`` on every device.)"""
    cr, ci = points(n)
    np.testing.assert_array_equal(escape(cr, ci, 20), escape_under_a_mask(cr, ci, 20))


@pytest.mark.parametrize("n", SIZES)
def test_the_whole_arrays_under_a_mask_compute_what_the_compacting_loop_computes(n):
    cr, ci = points(n)
    want = as_python(escape)(cr.copy(), ci.copy(), 20)
    np.testing.assert_array_equal(escape_under_a_mask(cr, ci, 20), want)
    same(escape_under_a_mask, svod.frontend.api.get_device("CPU"), cr, ci, 20)
