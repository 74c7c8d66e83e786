"""NumPy's indexing and functions beyond elementwise arithmetic in ``@svod.jit`` array statements
(``svod.frontend.array_calls``): gathers, masked stores, scatters, bool and bit operators, the class and
logical functions, isclose and allclose, sign, clip, diff, roll, concatenate, stack, norm, len. Each function
is compared with itself run as plain Python (NumPy), on every device, over empty, one-element and prime sizes
and special values."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import GraphError, KernelSyntaxError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

SIZES = [0, 1, 7, 13]


def _values(device, n: int) -> np.ndarray:
    """``n`` values with the specials a device computes with (WGSL may assume floats finite)."""
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324] if device.caps.ieee_floats else [-0.0, 0.0]
    ordinary = np.linspace(-3.0, 3.0, 11)
    return np.resize(np.array([*specials, *ordinary]), n)


@svod.jit
def classes_and_logic(x):
    kept = (((x > 0) & (x < 2.5)) | np.isnan(x)).astype(x.dtype)  # no bool array made (WebGPU holds none)
    return kept + 2 * np.logical_or(~np.isfinite(x) ^ np.logical_and(x > -2, np.logical_not(x > 1)),
                                    np.isinf(x)).astype(x.dtype)


@pytest.mark.parametrize("n", SIZES)
def test_bool_operators_and_numpys_class_and_logical_functions(device, n):
    agrees_with_python(classes_and_logic, device, _values(device, n))


@svod.jit
def bits(i, j):
    return (i << 2) | (j >> 1), i ^ j, ~i & 0xFF


@pytest.mark.parametrize("n", SIZES)
def test_bit_operators_on_integer_arrays(device, n):
    i = np.arange(n, dtype=np.int32) - 3
    agrees_with_python(bits, device, i, (i * 7) % 11)


@svod.jit
def clipped_to_zero(x):
    x[x < 0] = 0.0
    return x


@svod.jit
def doubled_where(x, y):
    x[y > 1] = y[y > 1] * 2.0
    x[x > 4] += 10.0
    return x


@pytest.mark.parametrize("n", SIZES)
def test_stores_under_a_mask(device, n):
    agrees_with_python(clipped_to_zero, device, _values(device, n))
    agrees_with_python(doubled_where, device, np.arange(float(n)), (np.arange(float(n)) * 1.7) % 3)


@svod.jit
def looked_up(lut, img):
    return lut[img]


@svod.jit
def gathered(lut, img, a, rows, cols):
    return lut[img], a[rows, cols], a[rows, :] * 2.0


@pytest.mark.parametrize("n", SIZES)
def test_gathers_through_integer_arrays_with_negative_indices(device, n):
    lut = np.arange(10.0) * 3
    img = (np.arange(n * 2) % 13 - 3).reshape(n, 2)  # -3..9: from the end too
    agrees_with_python(looked_up, device, lut, img)
    a = np.arange(12.0).reshape(3, 4)
    rows, cols = np.arange(n) % 3, (np.arange(n) * 5) % 4 - 4
    if device.caps.index_bits == 32 and n:  # a row index times the row length may pass 32 bits: refused
        with pytest.raises(svod.errors.GraphError, match="computes indices in 32 bits"):
            gathered(lut.astype(np.float32), img.astype(np.int32), a.astype(np.float32), rows.astype(np.int32),
                     cols.astype(np.int32), device=device)
        return
    agrees_with_python(gathered, device, lut, img, a, rows, cols)


@pytest.mark.parametrize("n", SIZES)
def test_a_gather_through_narrow_indices_of_an_image(device, n):
    """``lut[img]`` of 8-bit pixels: an index's dtype need not hold the table's length (256), and an int8 one
    may count from the end."""
    lut = (np.arange(256) * 7 % 256).astype(np.uint8)
    pixels = (np.arange(n * 3) * 37 % 256).reshape(n, 3)
    if svod.dtypes.uint8 not in device.caps.element_dtypes:  # WebGPU holds no 8-bit buffers
        with pytest.raises(svod.errors.GraphError, match="cannot hold uint8"):
            looked_up(lut, pixels.astype(np.uint8), device=device)
        return
    agrees_with_python(looked_up, device, lut, pixels.astype(np.uint8))
    agrees_with_python(looked_up, device, lut, (pixels - 128).astype(np.int8))
    agrees_with_python(looked_up, device, lut[:97].copy(), (pixels % 97 - 97).astype(np.int16))


@svod.jit
def gathered_anywhere(a, idx, v):
    return (a[[0, 2]], a[:, [1, 0, 3]], a[:, idx], a[[2, -1], [0, 1]], v[[3, 3, 0]], a[idx][:, 1],
            a[:, idx] * 2.0)


@svod.jit
def scattered_from_itself(a, i, j, v):
    a[i] = a[j] * 0.5
    a[:, [1, 0]] = a[:, [0, 1]] + 1.0
    v[i] = v[::-1][i] + 1.0
    return a, v


@pytest.mark.parametrize("rows", [3, 5])
def test_gathers_through_lists_and_indices_after_whole_axes(device, rows):
    """``a[[0, 2]]``, ``a[:, idx]``: a list of integers written out is NumPy's int64 array; adjacent index
    arrays after whole axes put their shape in their place, as NumPy's."""
    a = np.arange(rows * 4.0).reshape(rows, 4)
    agrees_with_python(gathered_anywhere, device, a, np.array([2, 0, 2], np.int32), np.arange(5.0))


@svod.jit
def numbers_written_out(x):
    w = np.array([0.25, 0.5, 0.25]) * x[:3]
    return w, np.asarray((1, -2, 3)) + x[3:6].astype(np.int64), np.array([True, False, True]) & (x[:3] > 0)


def test_numbers_written_out_inside_an_expression(device):
    """``np.array([0.25, 0.5, 0.25]) * x``: NumPy's array of the numbers (float64, int64, bool), inside an
    expression; once refused (a list is not an array expression)."""
    x = np.cos(np.arange(7.0))
    if refuses(device, svod.dtypes.float64) or refuses(device, svod.dtypes.int64):
        with pytest.raises(GraphError, match=r"float64|int64|bool"):
            numbers_written_out(x.astype(np.float32), device=device)
        return
    agrees_with_python(numbers_written_out, device, x, typed=True)


def test_a_scatter_whose_values_read_the_array_computes_them_first(device):
    """``a[i] = a[j] * 0.5`` swaps rows as NumPy does, every value computed of the array as it stands before
    any is stored; svod stored each as computed, so a row read after its store was the new one."""
    i, j = np.array([0, 1], np.int32), np.array([1, 0], np.int32)
    agrees_with_python(scattered_from_itself, device, np.arange(12.0).reshape(3, 4), i, j, np.arange(5.0))


def test_a_gather_out_of_bounds_is_an_error_as_in_numpy():
    with pytest.raises(IndexError):
        gathered.__wrapped__(np.arange(3.0), np.array([[5, 0]]), np.ones((3, 4)), np.array([0]), np.array([0]))
    with pytest.raises(svod.errors.IndexOutOfBoundsError):
        gathered(np.arange(3.0), np.array([[5, 0]]), np.ones((3, 4)), np.array([0]), np.array([0]))
    with pytest.raises(svod.errors.IndexOutOfBoundsError, match="accessed at index 200"):
        looked_up(np.arange(100, dtype=np.uint8), np.array([[0, 200]], np.uint8))


@svod.jit
def scattered(a, idx, v):
    a[idx] = v
    return a


def test_a_scatter_through_repeated_indices_keeps_numpys_last_write(device):
    agrees_with_python(scattered, device, np.zeros(5), np.array([1, 3, 1, 4, 1]), np.arange(1.0, 6.0))


@svod.jit
def updated_through_repeats(a, idx, m, rows, j):
    a[idx] += 1.0
    a[idx] = a[idx] * 2.0
    m[rows, j] -= 3.0
    return a, m


def test_an_update_through_repeated_indices_reads_every_element_first(device):
    """``a[idx] += 1`` with ``idx`` repeating an index adds once, as NumPy's (``a[idx] = a[idx] + 1``, every
    value read before any is stored; ``np.add.at`` is the unbuffered one): svod added once per repeat."""
    idx, rows = np.array([1, 3, 1, 4, 1], np.int32), np.array([0, 2, 0, 0], np.int32)
    if device.caps.index_bits == 32:  # an int argument's index times a row's length may pass 32 bits: refused
        with pytest.raises(GraphError, match="computes indices in 32 bits"):
            updated_through_repeats(np.arange(5.0, dtype=np.float32), idx, np.ones((4, 3), np.float32), rows, 1,
                                    device=device)
        return
    agrees_with_python(updated_through_repeats, device, np.arange(5.0), idx, np.arange(12.0).reshape(4, 3), rows, 1)


@svod.jit
def gathered_with_integers(a, b, idx, j):
    return a[idx, 1], a[-1, idx[:2]], a[idx, j], b[1, idx, :], b[:, 2, idx], b[idx, -1, :] * 2.0


@svod.jit
def scattered_with_an_integer(a, idx, j, v):
    a[idx, 0] = 5.0
    a[idx, j] = v
    return a


@pytest.mark.parametrize("j", [0, 2, -3])
def test_integers_beside_index_arrays_are_0d_index_arrays(device, j):
    """``a[idx, 1]``: an integer beside an index array is a 0-d index array, broadcast with it (the result's
    shape is the arrays', in their place), and so is an int argument; a negative one counts from the end, and a
    store through them writes those elements. Refused before, with the refusal of indices that are not
    adjacent."""
    a, b = np.arange(12.0).reshape(4, 3), np.arange(60.0).reshape(3, 4, 5)
    idx = np.array([2, 0, -1], np.int32)
    if device.caps.index_bits == 32:  # an int argument's index times a row's length may pass 32 bits: refused
        with pytest.raises(GraphError, match="computes indices in 32 bits"):
            gathered_with_integers(a.astype(np.float32), b.astype(np.float32), idx, j, device=device)
        return
    agrees_with_python(gathered_with_integers, device, a, b, idx, j)
    agrees_with_python(scattered_with_an_integer, device, a, idx, j, np.array([7.0, 8.0, 9.0]))


@svod.jit
def gathered_past_int64(a, idx):
    return a[idx, 1 << 70]


def test_an_integer_beside_index_arrays_is_checked_against_its_axis():
    with pytest.raises(svod.errors.IndexOutOfBoundsError):
        gathered_with_integers(np.ones((4, 3)), np.ones((3, 4, 5)), np.array([0]), 3)
    with pytest.raises(KernelSyntaxError, match="past int64's range"):
        gathered_past_int64(np.ones((4, 3)), np.array([0]))


@svod.jit
def shaped_functions(x):
    return np.sign(x), np.clip(x, -1.0, 2.5), x.clip(0.0, 1.0), np.diff(x), np.roll(x, 3), np.roll(x, -1)


@svod.jit
def differences_and_rolls(a, v):
    return (np.diff(v, 2), np.diff(a, axis=0), np.diff(a, n=2, axis=-1), np.diff(v, n=0),
            np.diff(v > 0.5).astype(v.dtype),
            np.roll(a, 1), np.roll(a, -1, axis=0), np.roll(a, (1, 2), axis=(0, 1)), np.roll(a, 5, axis=1),
            np.roll(a, np.int64(3)))


@pytest.mark.parametrize("shape", [(3, 3), (4, 7), (2, 5)])
def test_diff_of_any_order_along_an_axis_and_roll_along_axes(device, shape):
    """``np.diff`` ``n`` times along an axis (of bools ``!=``), ``np.roll`` along axes or raveled, as NumPy's."""
    a = np.cos(np.arange(float(np.prod(shape)))).reshape(shape) * 3.0
    v = a[0] ** 3
    agrees_with_python(differences_and_rolls, device, a, v)


@svod.jit
def inner_products(a, v, w, b):
    return np.vdot(v, w), np.vdot(a, a), np.inner(v, w), np.inner(a, v), np.inner(v, b), np.inner(a, b)


@svod.jit
def conjugated(z, y):
    return np.vdot(z, y), np.inner(z, y)


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 2)])
def test_vdot_and_inner_as_numpys(device, shape):
    """``np.vdot`` ravels and conjugates its first array; ``np.inner`` sums along both arrays' last axes."""
    a = np.cos(np.arange(float(np.prod(shape)))).reshape(shape)
    v = np.arange(1.0, shape[1] + 1.0)
    args = (a, v, v[::-1] * 0.5, a[::-1] + 1.0)
    if refuses(device, svod.dtypes.float64):
        args = tuple(x.astype(np.float32) for x in args)
    agrees_with_python(inner_products, device, *args, rtol=1e-5)
    if not refuses(device, svod.dtypes.float64):  # (agrees_with_python takes no complex arrays)
        z, y = v + 1j * v[::-1], v * 0.5 - 2j * v
        np.testing.assert_allclose(conjugated(z, y, device=device), conjugated.fn(z, y), rtol=1e-12)


@svod.jit
def ufunc_methods(a, v):
    return (np.add.reduce(a), np.add.reduce(a, axis=1), np.multiply.reduce(v), np.maximum.reduce(a, axis=None),
            np.minimum.reduce(a, 1), np.logical_or.reduce(a > 5).astype(a.dtype), np.add.reduce(a, keepdims=True),
            np.add.accumulate(a), np.multiply.accumulate(v), np.maximum.accumulate(v), np.minimum.accumulate(a, axis=1),
            np.add.accumulate(a, axis=1), np.add.outer(v, v), np.multiply.outer(a, v), np.maximum.outer(v, v[::-1]),
            np.greater.outer(v, v).astype(a.dtype))


@svod.jit
def running_extremes(i):
    return np.maximum.accumulate(i), np.minimum.accumulate(i)


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 2)])
def test_ufunc_reduce_accumulate_and_outer_as_numpys(device, shape):
    """A ufunc's reduce and accumulate go along axis 0 unless told (where np.sum and np.cumsum take the whole
    array); a running maximum keeps NaN from where it meets one, and an integer's extremes; outer is the ufunc of
    every pair."""
    a = np.cos(np.arange(float(np.prod(shape)))).reshape(shape) * 10.0
    v = np.sin(np.arange(1.0, shape[1] + 1.0)) * 3.0
    if device.caps.ieee_floats and shape[1] > 1:
        v[1] = np.nan
    agrees_with_python(ufunc_methods, device, a, v)
    agrees_with_python(running_extremes, device, np.array([3, -2**31, 5, 2**31 - 1, 0], np.int32), typed=True)


@svod.jit
def subtracted_running(v):
    return np.subtract.accumulate(v)


def test_a_ufunc_method_svod_does_not_have_is_refused_naming_those_it_has():
    with pytest.raises(KernelSyntaxError, match=r"test_array_calls.py:\d+: np.subtract.accumulate of an array is not "
                                                r"one svod has: it has the reduce of add"):
        subtracted_running(np.ones(3))


@pytest.mark.parametrize("n", [1, 7, 13])
def test_sign_clip_diff_and_roll(device, n):
    agrees_with_python(shaped_functions, device, _values(device, n))


@svod.jit
def clipped_on_one_side(x, i):
    return np.clip(x, None, 0.4), np.clip(x, -0.1, None), x.clip(None, 1.0), np.clip(x, None, None), \
        np.clip(i, 2, None), i.clip(None, 4)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_clip_with_a_bound_of_none_clips_the_other_side(device, n):
    """A bound of None leaves that side as it is, as NumPy's (both None: a copy); once refused as "the constant
    None is not a number"."""
    agrees_with_python(clipped_on_one_side, device, _values(device, n), np.arange(n, dtype=np.int32) - 2)


@svod.jit
def joined(a, b, m):
    return np.concatenate((a, b)), np.stack((a, a), axis=1), np.concatenate((m, m), axis=1), \
        np.linalg.norm(b), len(a), a.astype(m.dtype)


@pytest.mark.parametrize("n", SIZES)
def test_concatenate_stack_norm_len_and_a_dtype_read_from_an_array(device, n):
    agrees_with_python(joined, device, np.arange(float(n)), np.array([3.0, 4.0, -0.0]),
                       np.arange(6.0, dtype=np.float32).reshape(2, 3))


@svod.jit
def masked_stores_of_reductions(x, y):
    x[x > 1.0] = x.max()
    x[x < 0.0] += x.sum() * 0.5
    y[x > 100.0] = y.mean()
    x[y > 0.0] = np.sum(x[x > 0.5])
    return x, y


@pytest.mark.parametrize("n", [1, 7, 13])
def test_a_masked_store_of_a_reduction_of_the_array_itself(device, n):
    """``x[m] = x.max()``: the number computed first, of the array as it stands, then stored where the mask holds
    (a mask that holds nowhere stores nothing); once refused as another array's elements."""
    x = np.cos(np.arange(float(n))) * 3.0
    agrees_with_python(masked_stores_of_reductions, device, x, np.sin(np.arange(float(n))))


@svod.jit
def masked_values_with_reductions(x, y):
    m = x > 0
    x[m] = x[m] * x.min()
    x[x < -1.0] = y[x < -1.0] + x.sum()
    y[y > 0] = y.max() - y[y > 0]
    return x, y


@pytest.mark.parametrize("n", [1, 7, 13])
def test_a_masked_store_of_the_masked_array_with_a_reduction_of_it(device, n):
    """``x[m] = x[m] * x.min()``: the value computed where the mask holds, of the array as it stands, then stored
    there; once refused as a race (the reduction read elements the store wrote)."""
    agrees_with_python(masked_values_with_reductions, device, np.cos(np.arange(float(n))) * 3.0,
                       np.sin(np.arange(float(n)) + 0.5))


@svod.jit
def flat_indices(x):
    return np.flatnonzero(x > 0)


@svod.jit
def nonzero_indices(x):
    found = np.nonzero(x)[0]
    return found


@svod.jit
def where_indices(a):
    return np.where(a > 1)[0]


@svod.jit
def indices_summed(a):
    return np.flatnonzero(a).sum()


@pytest.mark.parametrize("n", [0, 1, 7, 13])
def test_nonzero_indices_are_a_compaction_of_the_indices(device, n):
    """``np.flatnonzero(m)``, ``np.nonzero(m)[0]`` and ``np.where(m)[0]`` of a 1-D ``m``: the indices where it
    holds, in order (NumPy's int64), an array of the length the data decides; a reduction of them needs none."""
    x = _values(device, n)
    matrix = (np.arange(n * 3) % 4).reshape(n, 3).astype(np.int32)
    if refuses(device, svod.dtypes.int64):
        with pytest.raises(GraphError, match="int64"):
            flat_indices(x.astype(np.float32), device=device)
        return
    for fn, arg in ((flat_indices, x), (nonzero_indices, x), (where_indices, matrix[:, 0]),
                    (indices_summed, matrix)):
        agrees_with_python(fn, device, arg, typed=True)


@svod.jit
def copies_and_numbers(x):
    c = np.copy(x)
    c[0] = 100.0
    d = np.array(x) * 2.0
    v = np.asarray(x)
    v[-1] = -9.0
    return c, d, x, float(x.sum()), int(x.max()), int(x.min()) // 3, float(x.max() > 1.0)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_a_copy_is_its_own_array_and_a_reduction_a_python_number(device, n):
    """``np.copy(x)`` and ``np.array(x)`` are new arrays (a store into one leaves ``x``), ``np.asarray(x)`` is
    ``x`` itself (a store into it is one into ``x``); ``float(x.sum())`` and ``int(x.max())`` Python's numbers of
    the one value (``int`` truncating); once refused as functions array expressions lack. A Python float is a
    float64: a device without it refuses the function, saying so."""
    x = np.cos(np.arange(float(n))) * 3.0
    if refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match="cannot hold float64"):
            copies_and_numbers(x.astype(np.float32), device=device)
        return
    agrees_with_python(copies_and_numbers, device, x)


@svod.jit
def closeness(x, y, tolerance):
    near = np.isclose(x, y).astype(np.int32) + 2 * np.isclose(x, y, equal_nan=True).astype(np.int32)
    loose = np.isclose(1.0, x, rtol=0.1, atol=0.0) + 2 * np.isclose(x, y, 1e-3, tolerance).astype(np.int32)
    return near, loose, int(np.allclose(x, y)) + 2 * int(np.allclose(y, y, equal_nan=True)) + 4 * int(np.allclose(
        x, x + 1e-9))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_isclose_and_allclose_as_numpy_computes_them(device, n, dtype):
    """An infinity is close to itself alone, NaN to NaN only with ``equal_nan``, ``|x - y| <= atol + rtol * |y|``
    in the dtype NumPy computes it in (an integer array's as float64), the tolerance an array too."""
    with np.errstate(invalid="ignore"):
        x = _values(device, n).astype(dtype)
        y = np.resize(np.array([*([np.nan, np.inf, np.inf, 1e-8, -0.0, 0.0] if device.caps.ieee_floats else
                                  [1e-8, 0.0]), *np.linspace(-3.0, 3.0, 11) * 1.0001]), n).astype(dtype)
    tolerance = np.resize(np.array([0.0, 1e-2, 0.5], dtype if dtype != np.int32 else np.float32), n)
    wide = dtype == np.int32 or np.dtype(dtype).itemsize == 8  # (the tests' float64 and NumPy's of integers)
    if wide and refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match=r"cannot hold float64|computes float64 values in 32 bits"):
            closeness(x, y, tolerance, device=device)
        return
    agrees_with_python(closeness, device, x, y, tolerance)


@svod.jit
def compacted_with_another_array(x):
    return x[x > 0] + x


@svod.jit
def masked_min(x):
    return x[x > 0].min()


@svod.jit
def nonzero_of_a_matrix(x):
    return np.nonzero(x.reshape(2, -1))[0]


@svod.jit
def stored_unmasked(x, y):
    x[x > 0] = y
    return x


@pytest.mark.parametrize(("fn", "says"), [(compacted_with_another_array, "under the same mask"),
                                          (masked_min, "min of x\\[mask\\]: the mask may hold nowhere"),
                                          (stored_unmasked, "takes a scalar, or an expression of arrays under"),
                                          (nonzero_of_a_matrix, r"np.nonzero\(m\) makes a tuple of index arrays")])
def test_what_masks_svod_does_not_have_is_refused_at_its_line(fn, says):
    with pytest.raises(KernelSyntaxError, match=f"test_array_calls.py:\\d+: .*{says}"):
        fn(np.arange(4.0), np.ones(4)) if fn is stored_unmasked else fn(np.arange(4.0))
