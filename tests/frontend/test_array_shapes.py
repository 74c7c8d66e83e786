"""NumPy's shaping functions and index-made arrays in ``@svod.jit`` array statements
(``svod.frontend.array_shapes``): each compared, on every device, with the same function run as plain NumPy
(values, dtypes), over one-element, prime and empty shapes; a view is the memory it views (a later store shows
through it) exactly where NumPy's is, and a copy is not."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import Ops
from svod.errors import GraphError, KernelSyntaxError
from svod.frontend.array_exprs import reshape_runs
from tests.frontend.test_array_math import agrees_or_refused
from tests.helpers import refuses

SHAPES = [(1, 1), (5, 7), (0, 3)]


def matrix(*shape: int) -> np.ndarray:
    return np.arange(float(np.prod(shape))).reshape(shape) * 1.5 - 4.0


@svod.jit
def views(a, v):
    t = a.transpose()
    rows, columns = a.shape
    return (np.transpose(a), np.transpose(a, (1, 0)), a.transpose(1, 0) + 1.0, a.transpose((0, 1)), t * 2.0,
            np.swapaxes(a, 0, -1), np.reshape(a, (columns, -1)), a.reshape(rows * columns), a.reshape((-1, 1)),
            a.reshape(1, rows, columns), np.reshape(t, t.shape), np.flip(a, 0), np.flip(a), np.flip(a, axis=(0, 1)),
            np.fliplr(a), np.flipud(v), np.expand_dims(v, 0), np.expand_dims(a, (0, 3)), np.expand_dims(v, -1),
            np.squeeze(a[:1]), np.squeeze(np.expand_dims(v, 1), axis=1), np.broadcast_to(v, (3, v.shape[0])),
            np.broadcast_to(a[:, :1], a.shape) + a, a.ravel(), np.ravel(a.T), a.flatten())


@pytest.mark.parametrize("shape", SHAPES)
def test_views_of_an_array(device, shape):
    agrees_or_refused(views, device, matrix(*shape), np.array([1.0, -2.0, 3.5]), rtol=0)


@svod.jit
def stacks(a, v, w):
    return np.hstack((v, w)), np.hstack((a, a[:, :1])), np.vstack((v, w)), np.vstack((a, a)), \
        np.column_stack((v, w)), np.column_stack((a.T, a.T)), np.dstack((a, a)), \
        np.dstack((v, w))


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (0, 2)])
def test_stacks_give_each_part_the_dimensions_numpy_gives_it(device, shape):
    agrees_or_refused(stacks, device, matrix(*shape), np.array([1.0, -2.0, 3.5]), np.array([7.0, 8.0, -9.0]), rtol=0)


@svod.jit
def triangles(a, b, k):
    return np.tril(a), np.triu(a), np.tril(a, -1), np.triu(a, k), np.tril(b, 1), np.trace(a), np.trace(a, 1), \
        a.trace(-2), np.trace(a, offset=k), np.tril(a > 0).astype(a.dtype)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5)])
def test_triangles_and_traces_at_every_offset(device, shape):
    agrees_or_refused(triangles, device, matrix(*shape), np.ones((2, *shape)), 2, rtol=0)


@svod.jit
def diagonals(a, v, k):
    d = np.diagonal(a)
    seen = d * 1.0  # the view's elements before the store into a, and after it
    a[0, 0] = -5.0
    square = np.diag(v) + np.diag(v, 2)[2:, 2:] + np.diag(v, k=-1)[1:, 1:]
    return seen, d + 1.0, a.diagonal(1) * 2.0, np.diagonal(a, offset=-k), np.diag(a, -1), np.diag(a.T), \
        square, np.diag(v, k).sum(), np.diag(v[:0], k)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5), (6, 2)])
def test_diagonals_of_a_matrix_are_numpys_read_only_views_and_diag_makes_one(device, shape):
    """``np.diagonal(a)`` views ``a`` (a store into ``a`` shows in it), read-only as NumPy's; ``np.diag`` of a
    1-D array is a matrix with it on a diagonal, zeros elsewhere (of an empty one, a matrix of zeros)."""
    v = np.arange(1.0, min(shape) + 1.0) * -1.5
    agrees_or_refused(diagonals, device, matrix(*shape), v, 1, rtol=0)


@svod.jit
def moved_repeated_and_tiled(a, v):
    c = np.ascontiguousarray(a)  # a itself: the store below is one into a
    t = np.ascontiguousarray(a.T)  # a copy: the store into it leaves a as it is
    c[0, -1] = 9.0
    t[-1, 0] = -9.0
    return (np.moveaxis(a, 0, -1) * 1.0, np.moveaxis(a[np.newaxis], [0, 2], [2, 0]) + t.sum(), a,
            np.repeat(v, 3), np.repeat(a, 2, axis=1), a.repeat(2, axis=0), np.repeat(a, 2), np.repeat(v, 0),
            np.tile(v, 2), np.tile(a, (2, 1)), np.tile(v, (2, 1, 2)), np.tile(a, 3), np.tile(a, 1) + 1.0)


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 2)])
def test_moveaxis_ascontiguousarray_repeat_and_tile_as_numpys(device, shape):
    agrees_or_refused(moved_repeated_and_tiled, device, matrix(*shape), np.arange(1.0, shape[1] + 1.0), rtol=0)


@svod.jit
def filled_in_expressions(a, v, k):
    return (np.zeros_like(a) + a, np.ones(a.shape) * 2.0, np.full(a.shape, 3.0) - a, np.full_like(a, k) * a,
            np.ones_like(v, dtype=np.int32) + 1, np.zeros((2, 3)) + 1.0, np.full(4, 7) + 1,
            a + np.empty_like(a) * 0.0, np.full_like(a, 2.7, dtype=np.int32), a * np.ones(a.shape[1]))


@pytest.mark.parametrize("shape", [(1, 1), (3, 4)])
def test_arrays_of_one_number_inside_expressions(device, shape):
    """``np.zeros_like(a) + a``, ``np.full(a.shape, 3.0) - a``: each element the number in NumPy's dtype (a
    fill cast to the dtype given, as NumPy casts it); once refused as functions expressions lack."""
    v = np.arange(5.0)
    if refuses(device, svod.dtypes.float64) or refuses(device, svod.dtypes.int64):
        with pytest.raises(GraphError, match=r"float64|int64"):
            filled_in_expressions(matrix(*shape).astype(np.float32), v.astype(np.float32), 2.5, device=device)
        return
    agrees_or_refused(filled_in_expressions, device, matrix(*shape), v, 2.5, rtol=0)


@svod.jit
def stored_into_a_broadcasts_element(v):
    b = np.broadcast_to(v, (3, v.shape[0]))
    b[0, 1] = 7.0  # (a store of one number: it was written into v, where NumPy raises)
    return v


@svod.jit
def shape_returned(a):
    return a.shape


@svod.jit
def view_shape_returned(a):
    b = a.T
    return b.shape


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5,)])
def test_a_returned_shape_is_the_tuple_of_python_ints(shape):
    """``return a.shape`` (of a view too): NumPy's tuple of Python ints; once refused as "cannot convert a tuple
    of 2 to int64" without the line."""
    a = np.zeros(shape)
    for fn in (shape_returned, view_shape_returned):
        got, want = fn(a), fn.fn(a)
        assert got == want and all(type(d) is int for d in got)


@svod.jit
def numbers_of_made_shapes(a):
    b = a * 2.0
    n = (a + 1.0).shape[0]
    return b.shape[0], b.sum() + b.shape[-1], n + 1, (a + 1.0).T * 2.0


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 2)])
def test_the_numbers_of_a_made_arrays_shape_are_the_hosts(device, shape):
    """``b.shape[0]`` of an array made by an expression (``b = a * 2``) and not stored, ``(a + 1).shape[0]``, and
    ``(a + 1).T``: numbers (and a view) the host knows. Refused before with "name b is not defined" or "array a in
    arithmetic", the rewritten statement reading a name the kernel has not."""
    agrees_or_refused(numbers_of_made_shapes, device, np.arange(float(np.prod(shape))).reshape(shape),
                      needs=svod.dtypes.float64)


@svod.jit
def shape_of_an_expression_returned(a):
    return (a * 2).shape[0]


@svod.jit
def shape_of_an_expression_as_a_bound(a):
    n = (a * 2).shape[-1]
    return a[..., :n - 1].sum(), (a + 1.0).size, (a + 1.0).ndim


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 2)])
def test_a_number_of_an_expressions_shape_is_the_hosts_where_a_return_or_a_bound_reads_it(device, shape):
    """``return (a * 2).shape[0]`` and ``n = (a * 2).shape[-1]`` read as a slice's bound: refused before, as "array
    a in arithmetic" (the return was an array statement only as ``return x.shape``) and as a bound the host does
    not know (the statement kept as written)."""
    a = np.arange(float(np.prod(shape))).reshape(shape)
    agrees_or_refused(shape_of_an_expression_returned, device, a.astype(np.float32))
    agrees_or_refused(shape_of_an_expression_as_a_bound, device, a, needs=svod.dtypes.float64)


@svod.jit
def shape_among_returns(a):
    return a.sum(), a.shape


@svod.jit
def stored_into_a_repeat(a):
    np.repeat(a, 1)[:] = 5.0  # (a copy in NumPy: it was written into a)
    return a


@svod.jit
def stored_into_a_diagonal(a):
    np.diagonal(a)[0] = 1.0
    return a


def test_the_trace_of_integers_is_numpys_int64(device):
    agrees_or_refused(triangles, device, np.arange(12, dtype=np.int32).reshape(3, 4),
                      np.ones((2, 3, 4), np.int32), 1, needs=svod.dtypes.int64)


@svod.jit
def made(n, m, x):
    return np.eye(n), np.eye(n, m, k=1, dtype=np.float32), np.eye(m, k=-2, dtype=x.dtype), np.identity(n), \
        np.identity(m, dtype=np.float32) * x[:m], np.tri(n, m, -1), np.tri(m, dtype=np.float32), \
        x + np.eye(x.shape[0])[0]


@pytest.mark.parametrize(("n", "m"), [(1, 1), (3, 5), (7, 2), (0, 3)])
def test_eye_identity_and_tri_as_values(device, n, m):
    agrees_or_refused(made, device, n, m, np.arange(7.0), rtol=0, needs=svod.dtypes.float64)


@svod.jit
def counted(n, start):
    return (np.arange(0.0, 1.0, 0.1), np.arange(start, 3.0, 0.3), np.arange(0.5, 3, 0.25, dtype=np.float32),
            np.arange(n), np.arange(-3, n, 2), np.arange(1.0, -1.0, -1.0 / 3.0), np.arange(0.1, 0.2, 0.7),
            np.linspace(0, 1, 7), np.linspace(start, 3.0, n), np.linspace(2.0, 3.0, 5, endpoint=False),
            np.linspace(0, 10, 4, dtype=np.int32), np.linspace(-1.0, 1.0, 1), np.linspace(1e-320, 2e-320, 3),
            np.linspace(0.0, 1.0, 6, dtype=np.float32))


@pytest.mark.parametrize("n", [0, 1, 2, 13])
def test_arange_and_linspace_are_numpys_to_the_bit(device, n):
    """``np.arange`` with float steps fills ``start + i * delta`` in its dtype, the second element as made;
    ``np.linspace`` is ``i * step + start``, its last element ``stop`` (an integer dtype floored)."""
    agrees_or_refused(counted, device, n, 0.2, rtol=0, needs=svod.dtypes.float64)
    agrees_or_refused(counted_in_float32, device, n, rtol=0)


@svod.jit
def counted_in_float32(n):
    return np.arange(0.5, 3, 0.25, dtype=np.float32), np.arange(n, dtype=np.int32), np.eye(n, dtype=np.float32)


@svod.jit
def view_shows_a_later_store(a):
    flipped = np.flip(a, 0)
    transposed = np.transpose(a)
    reshaped = a.reshape(-1)
    broadcast = np.broadcast_to(a[0], (2, a.shape[1]))
    squeezed = np.squeeze(np.expand_dims(a, 0))
    a[0, 0] = 100.0
    return flipped * 1.0, transposed * 1.0, reshaped * 1.0, broadcast * 1.0, squeezed * 1.0


@svod.jit
def copy_hides_a_later_store(a):
    raveled = a.T.ravel()  # not C-contiguous: a copy, as NumPy's ravel
    flattened = a.flatten()
    reshaped = a.T.reshape(-1)  # not one C-ordered block: a copy
    a[0, 1] = 100.0
    return raveled, flattened, reshaped


@svod.jit
def split_transpose_is_a_view(a):
    split = a.T.reshape(2, 2, 3)  # splits the transposed axis of 4 into 2 x 2: NumPy views it
    a[1, 0] = 100.0
    return split * 1.0


def test_a_view_is_numpys_view_and_a_copy_numpys_copy(device):
    agrees_or_refused(view_shows_a_later_store, device, matrix(3, 4), rtol=0)
    agrees_or_refused(copy_hides_a_later_store, device, matrix(3, 4), rtol=0)
    agrees_or_refused(split_transpose_is_a_view, device, matrix(3, 4), rtol=0)


@svod.jit
def reshaped_in_runs(a, w):
    """Reshapes that keep axes, add or drop axes of one, merge and split them, of a view and of a copy; and a
    convolution's window, summed as npbench's conv2d sums it (an axis of one added to read it as a product)."""
    n, k, _, c = a.shape
    window = np.reshape(a, (n, k, k, c, 1)) * np.reshape(w, (1, k, k, c, w.shape[3]))
    return (np.reshape(a, (n, k, k, c, 1)) * 2.0, a.reshape(1, n, k * k, c), a.reshape(n * k, k, c) + 1.0,
            a.reshape(n, k, 1, k * c), np.reshape(a.transpose(3, 0, 1, 2), (c, n, k * k)),
            np.reshape(a[:, ::-1], (1, n, k, k, c, 1)), np.sum(np.sum(np.sum(window, axis=1), axis=1), axis=1))


@pytest.mark.parametrize(("n", "k", "c"), [(1, 1, 1), (5, 3, 2), (2, 7, 1), (0, 3, 2), (3, 2, 0)])
def test_a_reshape_reads_each_run_of_axes_as_numpy_does(device, n, k, c):
    """Each reshape of ``reshaped_in_runs`` is NumPy's, at sizes of one, primes and zero."""
    a = np.arange(float(n * k * k * c)).reshape(n, k, k, c) * 0.5 - 3.0
    w = np.linspace(-1.0, 1.0, k * k * c * 3).reshape(k, k, c, 3)
    agrees_or_refused(reshaped_in_runs, device, a, w, rtol=1e-12)


def test_a_reshape_that_keeps_or_adds_axes_of_one_divides_nothing():
    """Only axes a reshape merges or splits are flattened and divided (``reshape_runs``): a convolution's
    window read through an added axis of one indexes its input and weights with products and sums alone."""
    assert reshape_runs((8, 5, 5, 3, 1), (8, 5, 5, 3)) == [([0], [0]), ([1], [1]), ([2], [2]), ([3], [3])]
    assert reshape_runs((1, 5, 5, 3, 8), (5, 5, 3, 8)) == [([1], [0]), ([2], [1]), ([3], [2]), ([4], [3])]
    assert reshape_runs((6, 4), (2, 3, 4)) == [([0], [0, 1]), ([1], [2])]
    assert reshape_runs((2, 2, 3), (4, 3)) == [([0, 1], [0]), ([2], [1])]
    assert reshape_runs((4, 3), (3, 4)) == [([0, 1], [0, 1])]
    assert reshape_runs((1, 1), (1,)) == []
    assert reshape_runs((0, 3), (3, 0)) == [([0, 1], [0, 1])]
    a, w = np.ones((2, 3, 3, 2)), np.ones((3, 3, 2, 4))
    plan = reshaped_in_runs.plan(a, w, device="CPU")
    plan.prepare()
    windows = [kernel.ast for kernel in plan.prepared_kernels if any(
        u.op is Ops.REDUCE for u in kernel.ast.toposort())]
    assert windows and not any(u.op in (Ops.IDIV, Ops.MOD) for ast in windows for u in ast.toposort())


@svod.jit
def stored_through_views(a):
    np.flip(a, 1)[0] = -1.0
    t = a.transpose()
    t[0] = 7.0
    return a


def test_a_store_through_a_view_writes_the_array(device):
    agrees_or_refused(stored_through_views, device, matrix(3, 4), rtol=0)


@svod.jit
def stored_into_a_broadcast(v):
    b = np.broadcast_to(v, (3, v.shape[0]))
    b[0] = 1.0
    return v


@svod.jit
def wrong_axes(a):
    return np.transpose(a, (0, 0))


@svod.jit
def wrong_size(a):
    return a.reshape(5, -1)


@svod.jit
def squeezed_wide_axis(a):
    return np.squeeze(a, axis=1)


@svod.jit
def not_broadcast(a):
    return np.broadcast_to(a, (2, 5))


@svod.jit
def fortran_order(a):
    return a.reshape(-1, order="F")


@svod.jit
def diagonal_of_a_cube(a):
    return np.diagonal(a.reshape(1, 3, 4))


@svod.jit
def eye_of_an_element(a):
    return np.eye(int(a[0, 0]))


@svod.jit
def views_made_in_a_loop(a, steps):
    for _ in range(steps):
        b = a * 2.0
        c = np.flip(b)
        a[...] = c + 1.0
    return a


@pytest.mark.parametrize(("fn", "says"), [
    (stored_into_a_broadcast, "np.broadcast_to's view is read-only"),
    (stored_into_a_broadcasts_element, "np.broadcast_to's view is read-only"),
    (stored_into_a_diagonal, "np.diagonal's view is read-only"),
    (stored_into_a_repeat, "a store into an array NumPy computes anew"),
    (shape_among_returns, "a tuple among returned values: return its numbers one by one"),
    (wrong_axes, r"np.transpose's axes \(0, 0\) is not an axis, or distinct axes"),
    (wrong_size, "cannot reshape an array of size 12 into shape"), (squeezed_wide_axis, "np.squeeze of an axis"),
    (not_broadcast, r"an array of shape \(3, 4\) does not broadcast to shape \(2, 5\)"),
    (fortran_order, "svod reshapes in C order"), (diagonal_of_a_cube, r"np.diagonal of an array of 3 dimension"),
    (eye_of_an_element, "np.eye's N is a number the host knows before the run"),
    (views_made_in_a_loop, "b is a new array in every turn of a loop around phases, and another name views it")])
def test_what_numpy_refuses_or_svod_does_not_have_is_refused_at_its_line(fn, says):
    vectors = (stored_into_a_broadcast, stored_into_a_broadcasts_element)
    args = (np.arange(3.0),) if fn in vectors else (matrix(3, 4), 2)[:1 + (fn is views_made_in_a_loop)]
    with pytest.raises(KernelSyntaxError, match=f"test_array_shapes.py:\\d+: {says}"):
        fn(*args)
