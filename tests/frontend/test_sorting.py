"""Sorting and order statistics in ``@svod.jit`` functions: ``np.sort``, ``x.sort()``, ``np.argsort``,
along an axis of an n-d array too, ``np.partition``, ``np.argpartition``, ``x.partition(k)``, ``np.median``,
``np.percentile`` and ``np.quantile`` against NumPy on every device, on sizes 0, 1, 2, a prime and sizes that
are no multiple of the blocks a pass splits the keys into; NaNs of both signs (last, and a median's NaN), zeros
of both signs (one key for a stable argsort), infinities, ties and integer extremes."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Buffer, Device
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend import sorting
from tests.helpers import numpy_quietly

SIZES = (0, 1, 2, 7, 97, 1000, 5003)
"""The last is no multiple of the blocks of a pass on any device (a CPU's threads' blocks, a GPU's)."""
DTYPES = ("float64", "float32", "int32", "int64", "uint32")


def numbers(n: int, dtype: str, seed: int, nans: bool = True) -> np.ndarray:
    """``n`` numbers of ``dtype`` with ties, and the values a sort must place right: for floats NaNs of both
    signs (where ``nans``), zeros of both signs, infinities, the largest and the smallest normal; for integers
    the extremes."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype)
    if kind.kind == "f":
        x = (np.round(rng.standard_normal(n) * 4) / 2).astype(kind)
        info = np.finfo(kind)
        special = [0.0, -0.0, np.inf, -np.inf, info.max, -info.tiny, info.tiny, -info.max]
        if nans:
            special = [np.nan, np.copysign(np.nan, -1), *special]
    else:
        x = rng.integers(0 if kind.kind == "u" else -5, 6, n).astype(kind)
        info = np.iinfo(kind)
        special = [info.min, info.max, info.max - 1, info.min + 1]
    count = min(n, len(special))
    x[rng.choice(n, count, replace=False)] = np.array(special[:count], kind)
    return x


def held(device: Device, dtype: str) -> bool:
    return dtypes.from_numpy(np.dtype(dtype)) in device.caps.element_dtypes


def same(got: object, want: object, device: Device, scale: float = 0.0) -> None:
    """Equal, NaN where NumPy's is; on a device without float64, within float32's rounding of numbers of
    magnitude ``scale`` (its median of ints is float32, its percentile's fraction too)."""
    got_array, want_array = np.asarray(got), np.asarray(want)
    if dtypes.float64 in device.caps.element_dtypes:
        np.testing.assert_array_equal(got_array, want_array)
    else:
        np.testing.assert_allclose(got_array, want_array, rtol=2e-6, atol=2e-7 * scale)


@svod.jit
def orders(x):
    y = np.sort(x)
    i = np.argsort(x, kind="stable")
    m = np.median(x)
    return y, i, m


@svod.jit
def ranks(x, q):
    low = np.percentile(x, q)
    quarter = np.quantile(x, 0.25)
    top = np.quantile(x, 1)
    return low, quarter, top


@svod.jit
def sorts_in_place(x):
    x.sort()


def cases(device: Device) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The dtypes and sizes a device sorts here: every one on the CPU; on the others, which compile (or, the
    reference interpreter, run) each dtype and size at a cost, a float of the widest width they hold, and
    fewer sizes."""
    if device.name == "CPU":
        return DTYPES, SIZES
    if device.name == "PYTHON":
        return ("float32",), (0, 1, 2, 7, 97)
    if dtypes.float64 not in device.caps.element_dtypes:  # static kernels: each size compiles (WebGPU)
        return ("float32",), (0, 1, 7, 97)
    return ("float64",), SIZES


def test_sort_argsort_and_median_agree_with_numpy(device):
    kinds, sizes = cases(device)
    for dtype in kinds:
        for n in sizes:
            for nans in (True, False) if n >= 7 else (False,):
                x = numbers(n, dtype, n, nans)
                y, i, m = orders(x, device=device)
                assert y.dtype == x.dtype and y.shape == (n,)
                np.testing.assert_array_equal(y, np.sort(x))  # NaN last (as positive NaNs), -0.0 with 0.0
                np.testing.assert_array_equal(i, np.argsort(x, kind="stable"))
                assert i.dtype == sorting.index_dtype(device)
                with numpy_quietly():  # NumPy warns of an empty array's median (NaN)
                    want = np.median(x)
                scale = float(np.abs(x[np.isfinite(x)]).max(initial=0))
                if device.caps.ieee_floats or np.isnan(want):
                    same(m, want, device, scale)
                else:  # WGSL may flush a subnormal mean of the middle two to zero
                    np.testing.assert_allclose(m, want, rtol=2e-6, atol=max(2e-7 * scale, 1.2e-38))
                sorts_in_place(x, device=device)
                np.testing.assert_array_equal(x, np.sort(x))


def test_percentile_and_quantile_agree_with_numpy(device):
    kinds, sizes = cases(device)
    fractions = (0.0, 12.5, 50, 90.0, 100) if device.name == "CPU" else (12.5, 90.0)
    for dtype in kinds:
        for n in [n for n in sizes if 0 < n < 1000 and (device.name != "PYTHON" or n < 10)]:
            x = numbers(n, dtype, n, nans=False)
            if not device.caps.ieee_floats:
                x = x[np.isfinite(x) & (np.abs(x) < 1e30)] if x.dtype.kind == "f" else x
            scale = float(np.abs(x).max())
            for q in fractions:
                low, quarter, top = ranks(x, q, device=device)
                # NumPy interpolates from an infinity to NaN (inf - inf, inf * 0), and takes the difference of two
                # integers in their dtype, which wraps between the extremes: svod gives the same numbers
                with np.errstate(invalid="ignore", over="ignore"):
                    want_low, want_quarter, want_top = np.percentile(x, q), np.quantile(x, 0.25), np.quantile(x, 1)
                same(low, want_low, device, scale)
                same(quarter, want_quarter, device, scale)
                assert top == want_top and type(top) is type(want_top.item())  # taken as it is


def test_a_nan_makes_the_median_and_quantiles_nan(device):
    for dtype in ("float32", "float64"):
        if not held(device, dtype) or (device.name == "PYTHON" and dtype == "float64"):
            continue
        x = np.array([3.0, np.nan, 1.0, -2.0, 7.0], dtype)
        _, i, m = orders(x, device=device)
        assert np.isnan(m) and list(i) == [3, 2, 0, 4, 1]
        assert all(np.isnan(v) for v in ranks(x, 50.0, device=device))


def test_argsort_is_stable_among_equal_keys(device):
    dtype = "float32"
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, 211).astype(dtype)
    x[rng.choice(211, 60, replace=False)] = -0.0  # equal to 0.0: their order is the input's
    _, i, _ = orders(x, device=device)
    np.testing.assert_array_equal(i, np.argsort(x, kind="stable"))
    for key in np.unique(x):
        same_key = i[x[i] == key]
        assert (np.diff(same_key) > 0).all()


def presorted(n: int, dtype: str, per: int, seed: int) -> dict[str, np.ndarray]:
    """Numbers already in order, or nearly: rising (ties among them; NaNs last, zeros of both signs,
    infinities, subnormals), strictly falling (no ties: one reversal sorts them), falling with ties, each
    block of ``per`` rising (or falling) but the blocks not, and rising but for the last number."""
    x = numbers(n, dtype, seed)
    kind = np.dtype(dtype)
    if kind.kind == "f" and n >= 4:
        x[:4] = np.array([np.finfo(kind).smallest_subnormal, -np.finfo(kind).smallest_subnormal, 0.0, -0.0], kind)
    rising = np.sort(x)
    zeros = rising == 0
    rising[zeros] = np.where(np.arange(zeros.sum()) < np.signbit(x[x == 0]).sum(), -0.0, 0.0)  # -0.0 first
    distinct = np.unique(x[~np.isnan(x)]) if kind.kind == "f" else np.unique(x)
    blocks = np.concatenate([np.sort(x[b: b + per]) for b in range(0, n, per)]) if n else x
    last = rising.copy()
    if n >= 2:
        last[-1] = rising[0]
    return {"rising": rising, "falling": distinct[::-1].copy(), "falling with ties": rising[::-1].copy(),
            "rising blocks": blocks, "falling blocks": blocks[::-1].copy(), "rising but the last": last}


def test_keys_already_in_order_sort_with_no_pass_or_one_reversal(device):
    """Sorted input runs no radix pass, strictly falling input one reversal; falling input with ties and input
    that is in order only within each block (or but for its last number) sorts as any other: each against
    NumPy (-0.0 before 0.0, which NumPy counts as equal), the passes it runs as the plan's profile names
    them. Past ``STATIC_FROM`` each dtype compiles kernels of its own for the size: there a float, a signed
    and an unsigned integer (each way a number becomes a key, both widths) stand for the five dtypes the
    smaller sizes sort."""
    kinds, sizes = cases(device)
    for dtype in kinds:
        static = device.name == "CPU" and dtype in ("float32", "int64", "uint32")
        for n in (*sizes, *((sorting.STATIC_FROM + 13,) if static else ())):
            _, per = sorting.blocks(device, n)
            for what, x in presorted(n, dtype, per, n).items():
                y, i, _ = orders(x, device=device)
                np.testing.assert_array_equal(y, np.sort(x), err_msg=f"{what}, {n} {dtype}")
                zeros = np.signbit(y[y == 0])  # NumPy leaves equal zeros as its algorithm meets them
                assert zeros.sum() == np.signbit(x[x == 0]).sum() and (np.diff(zeros.astype(int)) <= 0).all()
                np.testing.assert_array_equal(i, np.argsort(x, kind="stable"), err_msg=f"{what}, {n} {dtype}")
            if n >= 7:
                names = [step.name for step in orders.plan(x, device=device).execute(profile=True, buffers={"x": x})
                         or []]
                assert sum(name.startswith("sort_scatter") for name in names) > 0  # rising but the last
                cases_ran = presorted(n, dtype, per, n)
                for what, reversals in (("rising", 0), ("falling", 2)):
                    x = cases_ran[what]
                    names = [step.name for step in
                             orders.plan(x, device=device).execute(profile=True, buffers={"x": x}) or []]
                    assert not any(name.startswith("sort_scatter") for name in names), what
                    assert sum(name.startswith("sort_reverse") for name in names) == reversals, what


@svod.jit
def sort_then_compute(x, out):
    y = np.sort(x)
    low = np.median(y[: x.shape[0] // 2])
    for j in svod.prange(x.shape[0]):
        out[j] = y[j] - low
    return out, low


@svod.jit
def sorts_each_turn(x):
    smallest = 0.0
    for t in range(3):
        for j in svod.prange(x.shape[0]):
            x[j] = x[j] * -1.5 + t
        x.sort()
        smallest += x[0]
    return x, smallest


@svod.jit
def sorted_expression(a):
    return np.sort(a[::2] * 2.0), a.argsort()


def test_sorted_arrays_and_order_statistics_feed_later_phases(device):
    dtype = "float32" if not held(device, "float64") else "float64"
    x = numbers(29, dtype, 1, nans=False)
    x = x[np.isfinite(x) & (np.abs(x) < 1e30)]
    out, low = sort_then_compute(x, np.zeros_like(x), device=device)
    y = np.sort(x)
    want = np.median(y[: y.shape[0] // 2])
    same(low, want, device)
    np.testing.assert_allclose(out, y - want, rtol=1e-6)

    start = np.linspace(-3.0, 3.0, 13).astype(dtype)
    got, smallest = sorts_each_turn(start.copy(), device=device)
    want_x, want_small = start.copy(), 0.0
    for t in range(3):
        want_x = np.sort(want_x * -1.5 + t)
        want_small += want_x[0]
    np.testing.assert_allclose(got, want_x, rtol=1e-6)
    np.testing.assert_allclose(smallest, want_small, rtol=1e-6)

    a = numbers(14, dtype, 2)
    evens, order = sorted_expression(a, device=device)
    with np.errstate(over="ignore"):  # twice the largest float is an infinity, as the kernel computes it
        doubled = a[::2] * 2.0
    np.testing.assert_array_equal(evens, np.sort(doubled))
    np.testing.assert_array_equal(order, np.argsort(a, kind="stable"))


@svod.jit
def median_and_quartile(x):
    m = np.median(x)
    q = np.quantile(x, 0.25)
    return m, q


def test_a_selection_reads_the_keys_it_kept_once_few_have_the_digits_found(device):
    """Distinct numbers (0 .. n-1, shuffled): every key's top byte is the same and the next leaves a few keys
    with the digits of each selected rank, so the third pass keeps those and the passes after read them
    alone (the steps the plan's profile names); the median (of an even and an odd count; on the CPU, of one
    whose kernels are compiled for its size too) and a quantile are NumPy's."""
    dtype = "float64" if held(device, "float64") and device.name != "PYTHON" else "float32"
    passes = 8 if dtype == "float64" else 4
    for n in (96, 97, *((sorting.STATIC_FROM + 11,) if device.name == "CPU" else ())):
        x = np.random.default_rng(n).permutation(n).astype(dtype)
        m, q = median_and_quartile(x, device=device)
        same(m, np.median(x), device, n)
        same(q, np.quantile(x, 0.25), device, n)
        profile = median_and_quartile.plan(x, device=device).execute(profile=True, buffers={"x": x})
        names = [step.name for step in profile or []]
        assert names.count("select_histogram") == 2 * 3
        assert names.count("select_kept_histogram") == 2 * (passes - 3)


@svod.jit
def flattened(x):
    y = np.sort(x, axis=None)
    m = np.median(x)
    return y, m


def test_an_nd_array_sorts_flattened_where_axis_is_none():
    x = numbers(35, "float64", 3, nans=False).reshape(5, 7)
    y, m = flattened(x)
    np.testing.assert_array_equal(y, np.sort(x, axis=None))
    assert m == np.median(x)


@svod.jit
def along_axes(x):
    y = np.sort(x)
    i = np.argsort(x, axis=0)
    j = x.argsort(axis=-2, kind="stable")
    return y, i, j


@svod.jit
def sorts_columns_in_place(x):
    x.sort(axis=0)


def axis_cases(device: Device) -> list[tuple[str, tuple[int, ...]]]:
    """The dtypes and shapes a device sorts along their axes here (each dtype and shape compiles kernels of
    its own): every dtype on a few shapes, the device's widest float on more."""
    shapes = ((1, 1), (3, 5), (2, 3, 7), (4, 1, 2), (0, 3), (3, 0), (2, 97))
    if device.name == "PYTHON":
        return [("float32", shape) for shape in ((1, 1), (3, 5), (2, 3, 4), (0, 3))]
    if dtypes.float64 not in device.caps.element_dtypes:
        return [(dtype, shape) for dtype in ("float32", "int32") for shape in ((1, 1), (3, 5), (2, 3, 7), (0, 3))]
    every = DTYPES if device.name == "CPU" else ("int32",)
    return [*((dtype, (2, 3, 7)) for dtype in every), *(("float64", shape) for shape in shapes),
            *((("float64", (13, 1000)),) if device.name == "CPU" else ())]


def test_sorts_along_an_axis_of_an_nd_array_agree_with_numpy(device):
    for dtype, shape in axis_cases(device):
        x = numbers(int(np.prod(shape)), dtype, len(shape)).reshape(shape)
        y, i, j = along_axes(x, device=device)
        np.testing.assert_array_equal(y, np.sort(x))  # each row on its own: NaN last, -0.0 with 0.0
        assert y.shape == shape and i.shape == shape and i.dtype == sorting.index_dtype(device)
        np.testing.assert_array_equal(i, np.argsort(x, axis=0, kind="stable"))
        np.testing.assert_array_equal(j, np.argsort(x, axis=-2, kind="stable"))
        columns = x.copy()
        sorts_columns_in_place(columns, device=device)
        np.testing.assert_array_equal(columns, np.sort(x, axis=0))


@svod.jit
def partitions(x):
    p = np.partition(x, 2)
    q = np.argpartition(x, (0, -1), axis=0)
    return p, q


@svod.jit
def partitions_in_place(x):
    x.partition(1)


def partitioned(got: np.ndarray, x: np.ndarray, kth: int, axis: int) -> None:
    """NumPy's contract of a partition along ``axis``: each row holds its own numbers, the ``kth`` smallest
    at ``kth``, none greater before it, none less after it (positions NumPy leaves unspecified are not
    compared)."""
    want = np.sort(x, axis=axis)
    np.testing.assert_array_equal(np.sort(got, axis=axis), want)
    at = np.take(got, [kth], axis=axis)
    np.testing.assert_array_equal(at, np.take(want, [kth], axis=axis))
    k = kth % x.shape[axis]
    assert (np.take(got, range(k), axis=axis) <= at).all()
    assert (np.take(got, range(k + 1, x.shape[axis]), axis=axis) >= at).all()


def test_partitions_keep_numpys_contract(device):
    dtype = "float32" if not held(device, "float64") else "float64"
    shapes = ((3, 5), (4, 3)) if device.name == "PYTHON" else ((3, 5), (7, 11), (4, 3, 13))
    for shape in shapes:
        x = numbers(int(np.prod(shape)), dtype, shape[0], nans=False).reshape(shape)
        p, q = partitions(x, device=device)
        partitioned(p, x, 2, -1)
        taken = np.take_along_axis(x, q, axis=0)
        assert q.dtype == sorting.index_dtype(device)
        np.testing.assert_array_equal(np.sort(q, axis=0), np.broadcast_to(
            np.arange(shape[0]).reshape(-1, *[1] * (len(shape) - 1)), shape))  # each column's positions once
        partitioned(taken, x, 0, 0)
        partitioned(taken, x, -1, 0)
        inside = x.copy()
        partitions_in_place(inside, device=device)
        partitioned(inside, x, 1, -1)


def test_passes_whose_digit_never_changes_are_skipped_and_any_count_of_passes_lands_right():
    """Keys that differ in no byte (no pass), in the lowest only (one pass, the keys left in the second
    buffer), in the two lowest (two passes), and in every byte."""
    rng = np.random.default_rng(7)
    for x in (np.full(50, 7, np.int64), rng.integers(0, 256, 300).astype(np.int64),
              rng.integers(0, 60000, 300).astype(np.int64), rng.integers(-(2**62), 2**62, 300)):
        y, i, _ = orders(x)
        np.testing.assert_array_equal(y, np.sort(x))
        np.testing.assert_array_equal(i, np.argsort(x, kind="stable"))
        rows, first, _ = along_axes(x.reshape(-1, 10))  # a row's passes, each of them a copy where skipped
        np.testing.assert_array_equal(rows, np.sort(x.reshape(-1, 10)))
        np.testing.assert_array_equal(first, np.argsort(x.reshape(-1, 10), axis=0, kind="stable"))


def test_large_sorts_use_kernels_of_their_sizes():
    """From ``STATIC_FROM`` keys the kernels are compiled for their sizes (constants prove their accesses);
    a size that is no multiple of the blocks."""
    x = numbers(sorting.STATIC_FROM + 13, "float64", 11)
    y, i, m = orders(x)
    np.testing.assert_array_equal(y, np.sort(x))
    np.testing.assert_array_equal(i, np.argsort(x, kind="stable"))
    assert np.isnan(m)


# ---- what svod refuses, with what to write --------------------------------------------------------------------

@svod.jit
def sorts_rows(x):
    y = np.sort(x)
    return y


@svod.jit
def sorts_on_a_missing_axis(x):
    y = np.sort(x, axis=2)
    return y


@svod.jit
def partitions_past_the_end(x):
    x.partition(4)


@svod.jit
def partitions_with_a_variable_kth(x):
    k = x.shape[0] // 2
    p = np.partition(x, k)
    return p


@svod.jit
def sorts_inside_an_expression(x):
    y = np.sort(x) + 1.0
    return y


@svod.jit
def percentile_past_100(x):
    p = np.percentile(x, 101)
    return p


@svod.jit
def other_method(x):
    p = np.percentile(x, 50, method="nearest")
    return p


@svod.jit
def rebinds(x):
    for _turn in range(2):
        x = np.sort(x)  # (in straight-line code a new array of a name of its own: test_rebinding)
    return x


@svod.jit
def two_quantiles(x):
    p = np.quantile(x, [0.25, 0.75])
    return p


@svod.jit
def empty_percentile(x):
    p = np.percentile(x, 50)
    return p


@svod.jit
def row_medians(x):
    m = np.median(x, axis=1)
    return m


@svod.jit
def column_quartiles(x):
    q = np.quantile(x, 0.25, axis=0)
    return q


@svod.jit
def last_axis_percentile(x):
    p = np.percentile(x, 30, axis=-1)
    return p


@pytest.mark.parametrize("fn, x, words", [
    (row_medians, np.zeros((3, 4)), r"np.median along an axis: svod takes axis=None \(the whole array\)"),
    (column_quartiles, np.zeros((3, 4)), "np.quantile along an axis"),
    (last_axis_percentile, np.zeros((2, 5)), "np.percentile along an axis"),
    (sorts_on_a_missing_axis, np.zeros((3, 4)), r"axis 2 is out of bounds for an array of dimension 2"),
    (partitions_past_the_end, np.zeros(4), r"kth\(=4\) out of bounds \(4\)"),
    (partitions, np.zeros((3, 2)), r"kth\(=2\) out of bounds \(2\)"),
    (partitions_with_a_variable_kth, np.zeros(4), "kth is an int or a tuple of ints written out"),
    (rebinds, np.zeros(4), r"makes a new array of the name x; sort it in place \(`x.sort\(\)`\)"),
    (two_quantiles, np.zeros(4), "takes one q in a jitted function"),
    (sorts_inside_an_expression, np.zeros(4), "np.sort is a statement of its own"),
    (percentile_past_100, np.zeros(4), r"Percentiles must be in the range \[0, 100\]"),
    (other_method, np.zeros(4), "svod takes 'linear'"),
    (empty_percentile, np.zeros(0), "of an empty array"),
    (sorts_rows, np.zeros(4, np.int16), "svod sorts 32- and 64-bit integers and floats, not int16"),
])
def test_what_svod_cannot_sort_is_refused_at_its_line(fn, x, words):
    with pytest.raises(KernelSyntaxError, match=words) as err:
        fn(x)
    assert __file__ in str(err.value)


def test_a_device_without_64_bit_buffers_refuses_64_bit_keys():
    device = next((svod.get_device(name) for name in svod.available_devices()
                   if dtypes.uint64 not in svod.get_device(name).caps.element_dtypes), None)
    if device is None:
        pytest.skip("no device here lacks 64-bit buffers: WebGPU's adapters (wgpu over lavapipe or Mesa's OpenGL) "
                    "are missing")
    assert "holds no uint64 buffers" in str(sorting.sortable(np.dtype(np.float64), device))
    plan = svod.ExecutionPlan(device)
    source = plan.add_buffer(Buffer(device, dtypes.float32, 4))
    with pytest.raises(SvodError, match="values, indices or both"):
        sorting.add_sort(plan, source)


def test_a_sorting_plan_is_saved_and_loaded_as_a_bundle(tmp_path):
    """The keys' buffers are views of the numbers' memory as unsigned ints: a bundle keeps their dtype."""
    x = numbers(50, "float64", 4)
    orders.save(tmp_path / "orders.svodplan", x)
    plan = svod.load_plan(tmp_path / "orders.svodplan")
    plan.execute(buffers={"x": x})
    np.testing.assert_array_equal(plan.buffers[plan.buffer_names["y"]].numpy(), np.sort(x))
    np.testing.assert_array_equal(plan.buffers[plan.buffer_names["i"]].numpy(), np.argsort(x, kind="stable"))


def test_the_axis_of_a_vector_is_the_whole_array():
    """A 1-D array's one axis, given, is what ``axis=None`` computes (the refusal above is of n-d arrays only)."""
    x = np.array([0.5, -2.0, 7.25, 3.0, 1.0])
    assert last_axis_percentile(x) == np.percentile(x, 30, axis=-1)
