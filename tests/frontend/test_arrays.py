"""NumPy array expressions inside ``@svod.jit``: views, broadcasting, ufuncs, reductions, ``@`` and
assignments, each compared on every device with the same function run as plain NumPy."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import GraphError, KernelSyntaxError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

RNG = np.random.default_rng(45)


def data(*shape: int, dtype: type = np.float64) -> np.ndarray:
    return RNG.normal(size=shape).astype(dtype)


# ---- views and assignment ------------------------------------------------------------------------------

@svod.jit
def stencil(a, b, steps):
    for _ in range(steps):
        b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])
        a[1:-1, 1:-1] = 0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:] + b[2:, 1:-1] + b[:-2, 1:-1])
    return a


@pytest.mark.parametrize("n", [2, 3, 8, 17])
def test_a_stencil_of_slices(device, n):
    agrees_with_python(stencil, device, data(n, n), np.zeros((n, n)), 3)


@svod.jit
def steps_and_negatives(out, x):
    out[::2] = x[::-2][: out[::2].shape[0]] * 2.0
    out[1::2] = x[-3:-1].sum() + x[1::3][0]


@pytest.mark.parametrize("n", [3, 4, 11])
def test_steps_and_negative_bounds(device, n):
    agrees_with_python(steps_and_negatives, device, np.zeros(n), data(n))


@svod.jit
def rows_columns_and_new_axes(out, a, v):
    out[0] = a[1] + v
    out[1:, 0] = a[1:, -1]
    out[1:, 1:] = a[1:, 1:] * v[None, 1:] + a.T[1:, 0][:, np.newaxis]


def test_integer_indices_drop_axes_and_new_axes_add_them(device):
    agrees_with_python(rows_columns_and_new_axes, device, np.zeros((5, 5)), data(5, 5), data(5))


@svod.jit
def shifted(a):
    a[1:] = a[:-1] + 1.0


@svod.jit
def reversed_in_place(a):
    a[:] = a[::-1]


@pytest.mark.parametrize("n", [1, 2, 9])
def test_a_statement_that_reads_what_it_stores_reads_it_as_before(device, n):
    """NumPy's meaning: the right side is computed as if into a new array before the store."""
    agrees_with_python(shifted, device, data(n))
    agrees_with_python(reversed_in_place, device, data(n))


@svod.jit
def column_recurrence(y, x):
    """deriche's sweeps: each column (row) from the two before it, stored into the array it reads."""
    for j in range(2, y.shape[1]):
        y[:, j] = 0.5 * x[:, j] + 0.25 * y[:, j - 1] - 0.125 * y[:, j - 2]
    for i in range(y.shape[0] - 3, -1, -1):
        y[i, :] = y[i + 1, :] * 0.5 + y[i + 2, :] * 0.25 + x[i, :]
    y[:, -1] = y[:, -2] + 1.0


@svod.jit
def column_from_itself(y, j):
    """Reads of the stored column itself, reversed or shifted, and of a column a number away on another axis'
    overlap: each computed before the store, as NumPy does."""
    y[:, j] = y[::-1, j] + 1.0
    y[1:, j] = y[:-1, j] * 2.0
    y[1:, j + 1] = y[:-1, j] - 1.0


@pytest.mark.parametrize("shape", [(1, 3), (2, 5), (7, 4), (17, 9)])
def test_a_store_that_reads_other_columns_of_its_array_runs_in_place(device, shape):
    """``y[:, j] = f(y[:, j - 1], ...)``: the columns read are never the one stored, so no temporary is made (the
    plan's buffers are the two arguments); a read that may meet the stored elements still goes through one."""
    agrees_with_python(column_recurrence, device, data(*shape), data(*shape))
    agrees_with_python(column_from_itself, device, data(*shape), shape[1] - 2)
    assert len(column_recurrence.plan(data(*shape), data(*shape)).buffers) == 2
    assert len(column_from_itself.plan(data(*shape), shape[1] - 2).buffers) > 1


@svod.jit
def in_place_updates(x, y, k):
    x += 2.5 * y
    x[1:] *= y[:-1]
    k //= 2


def test_in_place_updates_keep_the_arrays_dtype(device):
    agrees_with_python(in_place_updates, device, data(7), data(7), np.arange(7, dtype=np.int32) * 5 - 13)


@svod.jit
def views_alias_their_base(a):
    v = a[1:-1]
    v[:] = 7.0
    w = a[::2]
    w += 1.0


def test_a_view_is_the_same_memory(device):
    agrees_with_python(views_alias_their_base, device, data(9))


# ---- elementwise, broadcasting, promotion --------------------------------------------------------------

@svod.jit
def elementwise(out, a, b):
    out[...] = np.where(a > b, np.exp(a) - np.sqrt(np.abs(b)), np.maximum(a, b) * -1) + np.minimum(a, 0.5)
    out[0] += np.fmax(a[0], b) - np.fmin(b, a[1])  # a NaN loses here, where np.maximum's wins


def test_ufuncs_where_and_comparisons(device):
    a, b = data(6, 5), data(5)
    a[0, 0], b[1] = np.nan, np.nan
    agrees_with_python(elementwise, device, np.zeros((6, 5)), a, b)


@svod.jit
def broadcast_edges(out, col, row, one):
    out[:, :] = col + row * one


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 4), (4, 1), (0, 3), (3, 0), (5, 7)])
def test_broadcasting_size_one_and_empty_dimensions(device, rows, cols):
    agrees_with_python(broadcast_edges, device, np.zeros((rows, cols)), data(rows, 1), data(cols), data(1, 1))


@svod.jit
def promoted(a, i):
    t = a * i + 1
    return t, (i // 3).astype(np.float32) * 0.5


def test_promotion_is_numpys(device):
    """float32 times int32 is float64 (NumPy 2): a device without float64 says so."""
    args = (data(4, dtype=np.float32), np.arange(4, dtype=np.int32) - 2)
    if refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match="cannot hold float64"):
            promoted(*args, device=device)
        return
    agrees_with_python(promoted, device, *args)


# ---- reductions ----------------------------------------------------------------------------------------

@svod.jit
def reductions(x):
    a = x.sum(axis=0)
    b = x.max(axis=1, keepdims=True)
    c = np.min(x, axis=(0, 1))
    d = x.mean(axis=-1)
    e = np.prod(x[:, :2], axis=1)
    return a, b, c, d, e


@pytest.mark.parametrize("shape", [(1, 2), (3, 4), (7, 5)])
def test_reductions_over_axes(device, shape):
    agrees_with_python(reductions, device, data(*shape), rtol=1e-5)


def test_a_nan_wins_a_max_and_a_min(device):
    x = data(4, 3)
    x[2, 1] = np.nan
    agrees_with_python(reductions, device, x, rtol=1e-5)


@svod.jit
def integer_sums(x):
    return x.sum(), x.sum(axis=1), np.prod(x[:, :3], axis=1)


def test_small_integers_sum_in_int64_as_numpy_does(device):
    """NumPy sums and multiplies int8 in int64: the sums start from ``np.int64(0)``, a typed constant, not a
    Python number that would take int8 and wrap (20000 is 32 in int8)."""
    x = np.full((4, 50), 100, np.int8)
    x[1, 1] = -7
    agrees_or_needs_int64(integer_sums, device, x)


@svod.jit
def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@svod.jit
def layernorm(x, gamma, beta):
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=1, keepdims=True)
    return centred / np.sqrt(var + 1e-5) * gamma + beta


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 17), (8, 64)])
def test_softmax_and_layernorm(device, rows, cols):
    agrees_with_python(softmax, device, data(rows, cols, dtype=np.float32), rtol=1e-5)
    # outputs of order 1: one that falls near 0 keeps float32's absolute error, not a relative one
    agrees_with_python(layernorm, device, data(rows, cols, dtype=np.float32), data(cols, dtype=np.float32),
                       data(cols, dtype=np.float32), rtol=1e-4, atol=1e-6)



@svod.jit
def row_extremes(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), x.max(axis=1), np.min(x, axis=1, keepdims=True)


def special_rows(cols: int, dtype: type = np.float32) -> np.ndarray:
    """Ordinary rows of ``cols``, then one for each special value a row's max and min treat apart: a NaN (first,
    last, beside both infinities), NaNs only, -inf only, +inf, -inf beside one number, -0.0 only."""
    rows = data(11, cols, dtype=dtype)
    last = cols - 1
    rows[2, last] = np.nan
    rows[3, 0] = np.nan
    rows[4, [0, last // 2, last]] = np.inf, np.nan, -np.inf
    rows[5] = np.nan
    rows[6] = -np.inf
    rows[7, last] = np.inf
    rows[8] = -np.inf
    rows[8, last // 2] = 1.5
    rows[9] = -0.0
    return rows


@pytest.mark.parametrize("cols,dtype", [(1, np.float32), (2, np.float32), (64, np.float32), (97, np.float32),
                                        (1024, np.float32), (1, np.float64), (67, np.float64), (128, np.float64)])
def test_a_row_with_a_nan_is_nan_in_a_softmax_and_its_extremes(device, cols, dtype):
    """NumPy's max and min of a row are NaN where an element is (one reduction of order keys, a NaN's beyond
    every number's); rows of infinities, of -0.0 (the zero's sign kept), of one element; no rows at all."""
    agrees_with_python(row_extremes, device, special_rows(cols, dtype), rtol=1e-5, atol=1e-7, typed=True,
                       numpy_warns=True)
    agrees_with_python(row_extremes, device, np.zeros((0, cols), dtype), typed=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_order_keys_order_floats_as_numpy_and_give_them_back(dtype):
    """In plain Python too: the keys' integer order is the floats' (-0.0 below +0.0), a NaN's key beyond every
    number's (above for a max, below for a min), and ``from_key`` gives back each float's bits, a NaN for a
    NaN's."""
    floats = np.array([-np.inf, -3.5, -np.finfo(dtype).tiny, -0.0, 0.0, np.finfo(dtype).smallest_subnormal, 2.0,
                       np.finfo(dtype).max, np.inf], dtype)
    keys = [svod.frontend.pylang.max_key(f) for f in floats]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert [svod.frontend.pylang.from_key(k).tobytes() for k in keys] == [f.tobytes() for f in floats]
    nan = dtype(np.nan)
    assert svod.frontend.pylang.max_key(nan) > keys[-1] and svod.frontend.pylang.min_key(nan) < keys[0]
    assert np.isnan(svod.frontend.pylang.from_key(svod.frontend.pylang.max_key(nan)))
    assert np.isnan(svod.frontend.pylang.from_key(svod.frontend.pylang.min_key(-nan)))

# ---- linear algebra ------------------------------------------------------------------------------------

@svod.jit
def products(a, b, v, w):
    return a @ b, v @ a, a @ w, np.dot(v, v), np.outer(v, w)


@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (3, 5, 2), (9, 4, 7)])
def test_matmul_dot_and_outer(device, n, k, m):
    agrees_with_python(products, device, data(n, k), data(k, m), data(n), data(k), rtol=1e-9)


@svod.jit
def down_the_columns(v, a, out):
    out += v @ a
    return v @ a, a.T @ v, a.sum(axis=0)


@pytest.mark.parametrize("rows,cols", [(0, 7), (1, 131101), (8, 16411), (9, 14593), (263, 521)])
def test_one_row_of_a_product_or_a_sum_down_the_columns(compiled_device, rows, cols):
    """Down the columns of ``a``: on a CPU, of an ``a`` larger than half of L2, rows streamed a few a pass (one
    pass, exactly one, one and a turn, primes); none at all."""
    # atol: a device without float64 runs float32 sums of up to 263 terms, whose rounding reaches 263 ulps of 1
    agrees_with_python(down_the_columns, compiled_device, data(rows), data(rows, cols), data(cols), rtol=1e-9,
                       atol=1e-4 if rows > 100 else 1e-12)


@svod.jit
def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * y @ A + z
    w += alpha * A @ x
    return A, x, w


def test_gemver_as_numpy_writes_it(device):
    n = 11
    agrees_with_python(gemver, device, 1.5, 1.2, data(n, n), *[data(n) for _ in range(8)], rtol=1e-9)


@svod.jit
def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, 0.0)
    h2 = np.maximum(h @ w2, 0.0)
    return h2 @ w3


def test_a_three_layer_mlp(device):
    agrees_with_python(mlp, device, data(5, 8, dtype=np.float32), data(8, 16, dtype=np.float32),
                       data(16, 6, dtype=np.float32), data(6, 3, dtype=np.float32), rtol=1e-4,
                       atol=1e-5)  # float32 sums of O(1) terms: an output that cancels to near 0 keeps their error


# ---- refusals ------------------------------------------------------------------------------------------

@svod.jit
def not_broadcasting(out, a, b):
    out[:] = a + b


@svod.jit
def index_outside(out, a):
    out[:] = a[5]


@svod.jit
def mismatched_product(a, b):
    return a @ b


def test_shapes_that_do_not_fit_are_refused_with_the_line():
    with pytest.raises(KernelSyntaxError, match=r"test_arrays.py:\d+: shapes \(3,\) and \(4,\) do not broadcast"):
        not_broadcasting(np.zeros(3), np.zeros(3), np.zeros(4))
    with pytest.raises(KernelSyntaxError, match=r"index 5 is out of bounds for axis 0 of size 2"):
        index_outside(np.zeros(3), np.zeros((2, 3)))
    with pytest.raises(KernelSyntaxError, match=r"@ of shapes \(2, 3\) and \(2, 3\)"):
        mismatched_product(np.zeros((2, 3)), np.zeros((2, 3)))


@svod.jit
def sliced_past_the_end(out, a):
    out[:] = a[1:9]


@svod.jit
def not_a_ufunc_here(out, a):
    out[:] = np.i0(a) + 1.0


@svod.jit
def numpy_refuses_it(out, a):
    out[:] = a * "x"


@svod.jit
def indexed_by_a_float(out, a):
    top = a.max()
    out[:] = a[top] * 2.0


def line_of(fn: svod.frontend.jit.Jit, text: str) -> int:
    """The line of ``fn``'s source file that holds ``text``."""
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize(("fn", "args", "statement", "shown"), [
    (not_broadcasting, (np.zeros(3), np.zeros(3), np.zeros(4)), "out[:] = a + b", "a + b"),
    (index_outside, (np.zeros(3), np.zeros((2, 3))), "out[:] = a[5]", "a[5]"),
    (sliced_past_the_end, (np.zeros(3), np.zeros(3)), "out[:] = a[1:9]", "out[:] = a[1:9]"),
    (not_a_ufunc_here, (np.zeros(3), np.zeros(3)), "out[:] = np.i0(a) + 1.0", "np.i0(a)"),
    (numpy_refuses_it, (np.zeros(3), np.zeros(3)), 'out[:] = a * "x"', "a * 'x'"),
    (indexed_by_a_float, (np.zeros(3), np.zeros(3)), "out[:] = a[top] * 2.0", "out[:] = a[top] * 2.0"),
])
def test_an_error_inside_an_array_statement_shows_the_users_line(fn, args, statement, shown):
    """Whether the array statement is refused as it is read or its loops are (an index of the wrong kind,
    found as the loop svod wrote for it is translated), the error names the file and line and shows the
    user's code: never a name of svod's own (``_svod_a0``) or ``<unknown>``."""
    with pytest.raises(KernelSyntaxError) as raised:
        fn(*args)
    message = str(raised.value)
    assert f"test_arrays.py:{line_of(fn, statement)}:" in message
    assert f"`{shown}`" in message
    assert "_svod_" not in message and "<unknown>" not in message


@svod.jit
def returned_product(a, b):
    return a @ b * 2.0


@pytest.mark.parametrize(("fn", "args", "called"), [
    (shifted, (data(4),), "the temporary array of `a[:-1] + 1.0`"),
    (returned_product, (data(3, 3), data(3, 3)), "the returned `a @ b * 2.0`"),
])
def test_an_array_svod_makes_is_called_in_the_users_words(device, fn, args, called):
    """A device that cannot hold an array svod makes for a statement (a temporary, a returned value) names
    it by the user's code, at its line."""
    if not refuses(device, svod.dtypes.float64):  # it holds them: the function computes what Python does
        agrees_with_python(fn, device, *args)
        return
    with pytest.raises(GraphError, match="cannot hold float64") as raised:
        fn(*args, device=device)
    message = str(raised.value)
    assert called in message and f"test_arrays.py:{line_of(fn, called.split('`')[1][:6])}" in message
    assert "_svod_" not in message


# ---- more reductions, scans, shapes --------------------------------------------------------------------

def agrees_or_needs_int64(fn: svod.frontend.jit.Jit, device, *args: object, rtol: float = 1e-6) -> None:
    """As ``agrees_with_python``; a device without int64 refuses the int64 results NumPy gives (a position, a
    count), saying so."""
    if refuses(device, svod.dtypes.int64):
        with pytest.raises(GraphError, match=r"cannot hold (int64|float64|int8)|computes int64 values in 32 bits"):
            fn(*args, device=device)
        return
    agrees_with_python(fn, device, *args, rtol=rtol)


@svod.jit
def positions_and_truths(x):
    return x.argmax(axis=1), np.argmin(x), (x > 0).any(axis=0), np.all(x > -1, axis=1), x.argmin(axis=0)


@pytest.mark.parametrize("shape", [(1, 1), (4, 6), (7, 3)])
def test_argmax_argmin_any_all(device, shape):
    x = np.round(data(*shape), 1)  # ties: the first one wins, as in NumPy
    agrees_or_needs_int64(positions_and_truths, device, x)


def test_a_nan_is_the_argmax(device):
    x = data(4, 6)
    x[1, 2] = x[3, 0] = np.nan
    agrees_or_needs_int64(positions_and_truths, device, x)


@svod.jit
def scans_and_shapes(x, m):
    running = np.cumsum(x, axis=1)
    flat = np.cumsum(x)
    every_third = x.reshape(-1)[::3] * np.arange(0, x.size, 3)
    ramp = np.linspace(0.0, 1.0, 7) + m.ravel()[:7]
    return running, flat, every_third, ramp


def test_cumsum_reshape_arange_linspace(device):
    agrees_or_needs_int64(scans_and_shapes, device, data(5, 6), data(2, 4), rtol=1e-9)


@svod.jit
def batched(a, b, c):
    return a @ b, a @ c


def test_a_batch_of_matmuls(device):
    agrees_with_python(batched, device, data(3, 5, 4), data(3, 4, 2), data(4, 6), rtol=1e-9)


# ---- fusion --------------------------------------------------------------------------------------------

def kernels_of(fn: svod.frontend.jit.Jit, *args: object, **scalars: float) -> int:
    return sum(step.kind == "kernel" for step in fn.plan(*args).execute(profile=True, **scalars))


def test_softmax_and_layernorm_are_one_kernel_each():
    """An array read only by the next statement is computed where that statement reads it (a row's max and
    sum are loops of their own, once per row); layernorm's ``centred``, cheap and read by the next two, is
    computed again in each (``array_fusion``)."""
    x = data(6, 10, dtype=np.float32)
    assert kernels_of(softmax, x) == 1
    assert kernels_of(layernorm, x, data(10, dtype=np.float32), data(10, dtype=np.float32)) == 1


def test_a_matmul_is_not_fused_into_a_matmul():
    """h = relu(x @ w1) read by h @ w2 would compute x @ w1 again at every turn of the second sum: h is made."""
    args = [data(5, 8, dtype=np.float32), data(8, 16, dtype=np.float32), data(16, 6, dtype=np.float32),
            data(6, 3, dtype=np.float32)]
    assert kernels_of(mlp, *args) == 3


@svod.jit
def scaled_products(alpha, a, b, c):
    return alpha * a @ b, a @ (b * 2.0 + c.T), np.exp(a.T) @ a


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (7, 9)])
def test_a_computed_operand_of_a_matmul_is_made_once_first(device, shape):
    """``alpha * a`` read by ``@`` once per column of ``b``: made into an array first, as NumPy makes it, not
    computed in the product's inner loop at every turn."""
    m, n = shape
    args = [1.5, data(m, n), data(n, m), data(m, n)]
    agrees_with_python(scaled_products, device, *args, rtol=1e-12)


def test_the_computed_operands_of_matmuls_are_made_apart_from_the_products():
    """The three operands made first, by two kernels (the two of one shape by one: ``nest_fusion``), then the
    three products."""
    assert kernels_of(scaled_products, 1.5, data(5, 3), data(3, 5), data(5, 3), alpha=1.5) == 5


@svod.jit
def fused_then_stored_over_its_input(x):
    e = x * 2.0
    x[1:] = e[:-1] + 1.0  # e, computed where read, reads x where this stores it: a temporary keeps it right
    f = x + 0.5
    x[:] = f[::-1]
    return x


@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_fused_array_reads_what_it_would_have_read(device, n):
    agrees_with_python(fused_then_stored_over_its_input, device, data(n))


@svod.jit
def views_of_computed_values(out, a):
    v = (a * 2.0)[1:]
    a[:] = 0.0  # v was computed before: NumPy's v is a new array, not a view of a
    out[:] = v + a.sum(axis=0)[1] + (a + 1.0)[1, 2]
    return v


def test_a_view_of_a_computed_value_is_a_new_array_and_its_element_a_value(device):
    """``(a * 2.0)[1:]`` is a new array, computed where it stands (a later store into ``a`` leaves it), and an
    element of a computed value (``a.sum(axis=0)[1]``) is computed where it is read."""
    agrees_with_python(views_of_computed_values, device, np.zeros((2, 3)), data(3, 3))


# ---- for v in x -------------------------------------------------------------------------------------------

@svod.jit
def over_rows(x, out):
    first = 0.0
    for v in x:
        out[:] = out * 0.5 + v * 2.0
        first += v[0]
    return out, first


@svod.jit
def rows_scaled_in_place(x):
    for v in x:
        v[...] = v * 2.0 + v[0]  # a view: the row of x itself
    return x


@svod.jit
def over_elements(x, out):
    for v in x:
        out[:] = out * v - 1.0
    return out


@svod.jit
def columns_by_rows(x, out):
    for i in prange(x.shape[-1]):
        total = 0.0
        for v in x:
            total += v[i] * v[-1]
        out[i] = total
    return out


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (3, 2), (7, 5)])
def test_for_over_an_array_iterates_its_rows_as_views(device, shape):
    """``for v in x`` around array statements, as Python iterates it: ``v`` is ``x[i]``, a view of the row
    (writing it writes ``x``), or an element of a 1-D array."""
    x = data(*shape)
    agrees_with_python(over_rows, device, x, np.full(shape[1], 1.5))
    agrees_with_python(rows_scaled_in_place, device, x)
    agrees_with_python(columns_by_rows, device, x, np.zeros(shape[1]))
    agrees_with_python(rows_scaled_in_place, device, data(*shape, 2))
    agrees_with_python(over_elements, device, x[:, 0].copy() if shape[1] else np.zeros(0), np.full(3, 2.0))


@svod.jit
def iterated_rebound(x, out):
    for v in x:
        out[:] = out + v
        x = out * 2.0
    return out


@svod.jit
def row_after_the_loop(x, out):
    for v in x:
        out[:] = out + v
    return v


@svod.jit
def over_no_axes(x, out):
    for v in x:
        out[:] = out + v


@pytest.mark.parametrize(("fn", "args", "message"), [
    (iterated_rebound, (np.zeros((2, 3)), np.zeros(3)), r"the loop's body binds x anew, while the loop iterates"),
    (row_after_the_loop, (np.zeros((2, 3)), np.zeros(3)), r"v is made in the loop at line \d+, and its shape or "
                                                           r"place depends on that loop's variable \(the index of the "
                                                           r"row `for v in x` is at\)"),
    (over_no_axes, (np.zeros(()), np.zeros(3)), r"iteration over a 0-d array \(x\)"),
])
def test_for_over_an_array_refuses_what_it_cannot_mean_alike(fn, args, message):
    with pytest.raises(KernelSyntaxError, match=rf"test_arrays.py:\d+: {message}"):
        fn(*args)


# ---- chained assignments ----------------------------------------------------------------------------------

@svod.jit
def mirrored_products(data, corr):
    m = data.shape[1]
    for i in prange(m - 1):
        corr[i + 1:m, i] = corr[i, i + 1:m] = data[:, i] @ data[:, i + 1:m]
    return corr


@svod.jit
def chained_stores(x, a, b):
    a[1:] = b[:-1] = x[:-1] * 2.0 + x[1:]
    s = t = x.sum()
    k = h = np.exp(-s) * 0.5  # deriche's scalars, read by the array statements after them
    b[:1] = a[:1] * k + h
    for i in prange(x.shape[0]):
        u = v = x[i] * k
        a[i] += u - v * 0.5
    return a, b, s + t


@pytest.mark.parametrize("shape", [(3, 1), (5, 4), (2, 9)])
def test_a_chained_assignment_computes_its_value_once_and_stores_it_into_each_target(device, shape):
    """npbench's correlation: ``corr[i + 1:m, i] = corr[i, i + 1:m] = data[:, i] @ data[:, i + 1:m]``, each work
    item's column below the diagonal and row right of it; and scalars, on the host and in a work item."""
    agrees_with_python(mirrored_products, device, data(*shape), np.zeros((shape[1], shape[1])), rtol=1e-12)
    n = shape[0] * shape[1]
    agrees_with_python(chained_stores, device, data(n), np.zeros(n), np.zeros(n), rtol=1e-12)


@svod.jit
def _scattered_through_a_reshaped_view(xn, yn, vals, steps):
    rows = np.empty((xn, yn), dtype=np.int64)
    for i in range(xn):
        rows[i, :] = i
    rows = np.reshape(rows, (xn * yn))
    out = np.zeros((xn, yn))
    for _turn in range(steps):
        vals[:] = vals * 2
        for j in range(xn * yn):
            out[rows[j], j % yn] = vals[j]
    return out


@pytest.mark.parametrize(("xn", "yn"), [(0, 3), (1, 1), (2, 3), (5, 7)])
def test_an_element_stored_at_indices_a_view_holds(device, xn, yn):
    """A store whose index reads a view (``out[rows[j], ...]`` after ``rows = np.reshape(rows, n)``) is written as
    a store: its statement's loop was read as storing nothing, and dropped, returning zeros."""
    if refuses(device, svod.dtypes.float64):  # rows is int64 and out float64, which the device has not
        with pytest.raises(svod.errors.SvodError, match=r"int64|float64"):
            _scattered_through_a_reshaped_view(xn, yn, np.arange(xn * yn, dtype=np.float32), 2, device=device)
        return
    agrees_with_python(_scattered_through_a_reshaped_view, device, xn, yn, np.arange(xn * yn) - 2.5, 2)


@svod.jit
def _updated_through_a_view(a):
    v = a[1:]
    for j in range(a.shape[0] - 1):
        v[j] += 1.0
        v[j] *= -2.0
    return a


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13])
def test_an_element_of_a_view_updated_in_sequential_code(device, n):
    """``v[j] += 1.0`` through a view: its loop was read as storing nothing, and dropped, leaving ``a`` as it was."""
    a = np.linspace(-1.0, 1.0, n)
    a[:min(n, 2)] = np.array([np.inf, -0.0])[:n]
    agrees_with_python(_updated_through_a_view, device, a)


@svod.jit
def _turns_of_a_views_length(a, out):
    v = a[1:]
    for k in range(v.shape[0]):  # the view's length, read by the host loop that stores into the view
        v[k] += k
    w = v[::2]  # a view of a view
    for k in range(len(w)):
        w[k] = w[k] * -2.0
    for k in range(1, v.size):  # the loop reading the view, writing the base
        a[k] = v[k - 1] + a[k]
    for k in svod.prange(len(v)):  # a parallel loop over the view's length, writing another array
        out[k] = v[k] * 0.5
    if v.shape[0] > 2:
        out[:1] = -out[:1]
    return a, out


@svod.jit
def _while_within_a_views_length(a, out):
    w = a[1:][::2]
    k = 0
    while k < len(w):  # a while loop's test
        out[k] += w[k]
        k += 1
    return out


@svod.jit
def _turns_of_a_views_rows(a):
    v = a[1:, ::2]
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            v[i, j] += i * j
    return a


@svod.jit
def _turns_of_a_length_each_turn_gives(a):
    for t in range(a.shape[0]):
        r = a[t, t:]
        for k in range(len(r)):
            r[k] *= 2.0
    return a


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13])
def test_a_host_loop_over_a_views_length_runs_as_python_does(device, n):
    """``for k in range(v.shape[0]): v[k] += k`` over a view ``v``, and ``len(v)``, ``v.size``, a view of a view,
    a ``prange``'s and a ``while``'s bound, an ``if``'s test: the view's length was left unread, and the loop
    refused ("name v is not defined")."""
    a = np.linspace(-1.0, 1.0, n)
    a[:min(n, 3)] = np.array([np.inf, -0.0, np.nan])[:n]
    agrees_with_python(_turns_of_a_views_length, device, a, np.zeros(max(n - 1, 0)))
    if device.device.base_type == "WEBGPU" and n > 1:  # a work item's loops stop there after 65535 turns
        with pytest.raises(GraphError, match="a while loop has no bound on its turns"):
            _while_within_a_views_length(a.astype(np.float32), np.zeros(n, np.float32), device=device)
    else:
        agrees_with_python(_while_within_a_views_length, device, a, np.zeros(n))
    agrees_with_python(_turns_of_a_views_rows, device, np.arange(n * 5, dtype=np.float64).reshape(n, 5) - 3.5)


def test_a_host_loop_over_the_length_of_a_view_each_turn_slices_is_refused_at_its_index():
    """A view whose length a loop around it decides (``a[t, t:]``): svod does not prove ``k`` within it, and says
    so at the index, as it does where the bound is written out."""
    with pytest.raises(KernelSyntaxError, match=r"index `k` may be out of bounds for axis 0.*`r\[k\]`") as err:
        _turns_of_a_length_each_turn_gives(np.zeros((3, 5)))
    assert f"{__file__}:{line_of(_turns_of_a_length_each_turn_gives, 'r[k] *= 2.0')}" in str(err.value)
