"""Slices whose bounds the host does not know before the run, in ``@svod.jit`` array statements: a loop's
variable in a slice's bound (``C[i, :i + 1]``), a temporary made at each turn's length, compared on every
device with the same function run as plain NumPy; and ``svod.frontend.extents``' meaning of a slice against
Python's."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import GraphError, KernelSyntaxError
from svod.frontend import extents
from tests.frontend.test_arrays import line_of
from tests.frontend.test_jit import agrees_with_python

RNG = np.random.default_rng(71)
SIZES = [1, 2, 7, 13]
"""Edge sizes: one element, two, primes (the first turns of the loops below slice 0 elements)."""


def data(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


# ---- the meaning of a slice ----------------------------------------------------------------------------------

def evaluated(value: extents.Dim, values: dict[str, int]) -> int:
    if isinstance(value, int):
        return value
    return eval(compile(ast.fix_missing_locations(ast.Expression(value.node())), "extent", "eval"), {}, values)


def test_a_slice_of_numbers_is_pythons():
    for size in range(7):
        for lower in (None, *range(-9, 10)):
            for upper in (None, *range(-9, 10)):
                for step in (-3, -2, -1, 1, 2, 3):
                    start, length = extents.sliced(lower, upper, step, size)
                    first, stop, stride = slice(lower, upper, step).indices(size)
                    assert length == len(range(first, stop, stride))
                    assert not length or start == first


@pytest.mark.parametrize("values", [(-9, 9), (0, 5), (-3, -1), (2, 8)])
def test_a_slice_of_a_loop_variable_is_pythons_at_each_of_its_values(values):
    """Negative bounds count from the end and bounds past an end are clamped, decided now where the variable's
    values tell and at run time where they do not; the length's bounds hold each value it takes."""
    i = extents.variable("i", "i@1", *values)
    made = [(i, None), (None, i), (extents.add(i, 1), None), (extents.times(i, -1), extents.add(i, 3))]
    for size in range(6):
        for lower, upper in made:
            for step in (-2, -1, 1, 2):
                start, length = extents.sliced(lower, upper, step, size)
                for value in range(values[0], values[1] + 1):
                    at = {"i": value}
                    bounds = [None if b is None else evaluated(b, at) for b in (lower, upper)]
                    first, stop, stride = slice(*bounds, step).indices(size)
                    assert evaluated(length, at) == len(range(first, stop, stride))
                    assert extents.low(length) <= evaluated(length, at) <= extents.high(length)
                    if range(first, stop, stride):
                        assert evaluated(start, at) == first


def test_lengths_written_alike_are_one_and_bounds_decide_clamps():
    i = extents.variable("i", "i@1", 0, 9)
    assert extents.add(extents.add(i, 3), -2) == extents.add(1, i)
    assert extents.sub(extents.add(i, 5), i) == 5
    assert extents.sliced(None, extents.add(i, 1), 1, 10) == (0, extents.add(i, 1))  # no min(i + 1, 10)
    assert str(extents.sliced(None, extents.add(i, 3), 1, 10)[1]) == "min(i + 3, 10)"
    assert extents.broadcast([(extents.add(i, 1),), (1,)]) == (extents.add(i, 1),)
    assert extents.broadcast([(extents.add(i, 1),), (i,)]) is None
    assert extents.broadcast([(extents.add(i, 1),), (10,)]) is None


# ---- a loop's variable in a slice's bound -------------------------------------------------------------------

@svod.jit
def syrk(alpha, beta, C, A):
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


@svod.jit
def trmm(alpha, A, B):
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            B[i, j] += np.dot(A[i + 1:, i], B[i + 1:, j])
    B *= alpha


@svod.jit
def lu(A):
    for i in range(A.shape[0]):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[:j, j]
            A[i, j] /= A[j, j]
        for j in range(i, A.shape[0]):
            A[i, j] -= A[i, :i] @ A[:i, j]


@svod.jit
def cholesky(A):
    A[0, 0] = np.sqrt(A[0, 0])
    for i in range(1, A.shape[0]):
        for j in range(i):
            A[i, j] -= np.dot(A[i, :j], A[j, :j])
            A[i, j] /= A[j, j]
        A[i, i] -= np.dot(A[i, :i], A[i, :i])
        A[i, i] = np.sqrt(A[i, i])


@svod.jit
def back_substitution(A, y):
    x = np.zeros_like(y)
    for i in range(A.shape[0] - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return x


@pytest.mark.parametrize("n", SIZES)
def test_triangular_updates_and_dots_of_a_turns_length(device, n):
    """PolyBench's syrk, trmm, lu and cholesky as numba users write them: each turn's slice is a row's prefix
    or suffix, of 0 elements at the first or last turn."""
    agrees_with_python(syrk, device, 1.5, 1.2, data(n, n), data(n, 3))
    agrees_with_python(trmm, device, 1.5, data(n, n), data(n, 4))
    spd = data(n, n)
    spd = spd @ spd.T + n * np.eye(n)
    agrees_with_python(lu, device, spd.copy(), rtol=1e-5)
    agrees_with_python(cholesky, device, spd.copy(), rtol=1e-5)
    agrees_with_python(back_substitution, device, spd, data(n), rtol=1e-5)


@svod.jit
def durbin(r):
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, r.shape[0]):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + np.dot(np.flip(r[:k]), y[:k])) / beta
        y[:k] += alpha * np.flip(y[:k])   # reads y backwards: into a temporary of the turn's length first
        y[k] = alpha
    return y


@svod.jit
def views_of_views(out, x):
    n = x.shape[0]
    for k in range(n):
        out[k] = x[:k + 1][::-1][0] + x[k:][::2].sum() + x[-k - 1:].mean()
        out[k] += x[: n - k][-1] * len(x[k:])


@pytest.mark.parametrize("n", SIZES)
def test_reversed_prefixes_and_views_of_views(device, n):
    """np.flip and [::-1] of a turn's prefix, a step, a negative bound from a loop variable, a mean over a
    turn's length, an index from the end of a turn's slice."""
    agrees_with_python(durbin, device, RNG.uniform(0.0, 0.3, n))
    agrees_with_python(views_of_views, device, np.zeros(n), data(n))


@svod.jit
def gramschmidt(A):
    Q = np.zeros_like(A)
    R = np.zeros((A.shape[1], A.shape[1]), dtype=A.dtype)
    for k in range(A.shape[1]):
        nrm = np.dot(A[:, k], A[:, k])
        R[k, k] = np.sqrt(nrm)
        Q[:, k] = A[:, k] / R[k, k]
        for j in range(k + 1, A.shape[1]):
            R[k, j] = np.dot(Q[:, k], A[:, j])
            A[:, j] -= Q[:, k] * R[k, j]
    return Q, R


@svod.jit
def running_windows(out, x, width):
    for i in range(x.shape[0]):
        window = x[max(i - width, 0):i + 1] * 2.0   # a new array at each turn, of the turn's length
        out[i] = window.sum() / (min(i, width) + 1)
        out[i] += window.prod()


@pytest.mark.parametrize("n", SIZES)
def test_an_array_made_at_each_turns_length(device, n):
    agrees_with_python(gramschmidt, device, data(n + 2, n), rtol=1e-5)
    agrees_with_python(running_windows, device, np.zeros(n), data(n), 3)


@svod.jit
def shapes_unpacked(in_field, out_field):
    rows, columns = out_field.shape[0], out_field.shape[1]
    out_field[:, :] = in_field[1:rows + 1, 1:columns + 1] - in_field[0:rows, 0:columns]


@svod.jit
def rebound(x, out):
    res = x[1:, :] - x[:-1, :]
    out[0] = res.sum()
    res = x[:, 1:] - x[:, :-1]      # a new array of another shape, as in NumPy
    out[1] = res.sum() + res[0, 0]
    return res


def test_sizes_unpacked_from_a_tuple_and_a_name_bound_anew(device):
    """hdiff's ``I, J, K = out_field.shape[0], ...`` gives sizes the host knows; its ``res`` is bound to an
    array of one shape, then of another."""
    agrees_with_python(shapes_unpacked, device, data(6, 7), np.zeros((5, 6)))
    agrees_with_python(rebound, device, data(4, 5), np.zeros(2))


# ---- refusals -----------------------------------------------------------------------------------------------

@svod.jit
def unequal_lengths(x, y):
    for i in range(x.shape[0]):
        for j in range(i):
            x[:i] += y[:j]


@svod.jit
def a_length_beside_a_number(x, y):
    for i in range(x.shape[0]):
        x[:i] += y


@svod.jit
def an_index_past_a_turns_end(x, out):
    for i in range(1, x.shape[0]):
        out[i] = x[:i][3]


@svod.jit
def a_max_of_nothing(x, out):
    for i in range(x.shape[0]):
        out[i] = x[:i].max()


@svod.jit
def a_carried_bound(x, out):
    m = 1
    for i in range(x.shape[0]):
        out[i] = x[:m].sum()
        m = m * 2


@svod.jit
def reshaped_prefix(x, out):
    for i in range(x.shape[0]):
        out[i] = x[:i].reshape(-1).sum()


@svod.jit
def made_then_read_after_its_loop(x, out):
    for i in range(x.shape[0]):
        part = x[:i] * 2.0
        out[i] = part.sum()
    out[0] = part.sum()


@pytest.mark.parametrize(("fn", "statement", "message"), [
    (unequal_lengths, "x[:i] += y[:j]", r"shapes \(i,\) and \(j,\) do not broadcast \(svod broadcasts lengths known "
                                       r"only at run time where it proves them equal\)"),
    (a_length_beside_a_number, "x[:i] += y", r"shapes \(i,\) and \(5,\) do not broadcast"),
    (an_index_past_a_turns_end, "out[i] = x[:i][3]", r"index `3` may be out of bounds for axis 0, whose length `i` "
                                                     r"is known only at run time"),
    (a_max_of_nothing, "out[i] = x[:i].max()", r"max of an axis whose length \(`\(i,\)`\) may be 0 at run time"),
    (a_carried_bound, "out[i] = x[:m].sum()", r"a slice's bound is a number the host knows before the run, or an "
                                              r"integer expression of those and the variables of the loops around it"),
    (reshaped_prefix, "out[i] = x[:i].reshape(-1).sum()", r"a reshape of an array of shape \(i,\), a length of which "
                                                          r"is known only at run time, is not one svod has"),
    (made_then_read_after_its_loop, "out[0] = part.sum()", r"part is made in the loop at line \d+, and its shape or "
                                                           r"place depends on that loop's variable i"),
])
def test_what_cannot_be_proven_is_refused_with_the_line(fn, statement, message):
    """Lengths that may differ, an index that may fall outside a turn's slice (NumPy raises there; svod never
    reads past it silently), a reduction with no identity over what may be empty: refused at the line."""
    with pytest.raises(KernelSyntaxError, match=message) as raised:
        fn(data(5), np.zeros(5))
    assert f"test_extents.py:{line_of(fn, statement)}:" in str(raised.value)


# ---- array statements inside a prange ----------------------------------------------------------------------

@svod.jit
def trmm_parallel(alpha, A, B):
    for i in range(B.shape[0]):
        for j in prange(B.shape[1]):
            B[i, j] += np.dot(A[i + 1:, i], B[i + 1:, j])
    B *= alpha


@svod.jit
def symm(alpha, beta, C, A, B):
    temp2 = np.empty((C.shape[1], ), dtype=C.dtype)
    C *= beta
    for i in range(C.shape[0]):
        for j in prange(C.shape[1]):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            temp2[j] = B[:i, j] @ A[i, :i]
        C[i, :] += alpha * B[i, :] * A[i, i] + alpha * temp2


@svod.jit
def rows(out, x):
    for i in prange(x.shape[0]):
        out[i, :] = x[i, :] * 2.0 + x[i, ::-1]        # the nest's only statement: its loop joins the grid


@svod.jit
def shifted_rows(x, out):
    for i in prange(x.shape[0]):
        x[i, 1:] = x[i, :-1] * 2.0                    # NumPy's temporary first: one for each work item
        doubled = x[i, :] * 2.0                       # a new array of each work item's
        out[i] = doubled.sum()
        out[i] += doubled[-1]


@pytest.mark.parametrize("n", SIZES)
def test_array_statements_in_a_prange(device, n):
    """Inside a prange, an array statement is loops of its work item's (or the nest's grid, where it is the
    body) and reductions; symm's two statements share the work item; trmm's dot reads its own column."""
    agrees_with_python(trmm_parallel, device, 1.5, data(n, n), data(n, 3))
    agrees_with_python(symm, device, 1.5, 1.2, data(n, 3), data(n, n), data(n, 3))
    agrees_with_python(rows, device, np.zeros((n, 5)), data(n, 5))
    agrees_with_python(shifted_rows, device, data(n, 4), np.zeros(n))


@svod.jit
def spmv(A_row, A_col, A_val, x):
    y = np.empty(A_row.size - 1, A_val.dtype)
    for i in prange(A_row.size - 1):
        cols = A_col[A_row[i]:A_row[i + 1]]
        vals = A_val[A_row[i]:A_row[i + 1]]
        y[i] = vals @ x[cols]
    return y


@pytest.mark.parametrize("rows_pointers", [[0, 2, 2, 5, 6], [0], [0, 6], [3, 1, -2, 7, -9, 6]])
def test_slices_whose_bounds_each_work_item_reads(device, rows_pointers):
    """npbench's spmv: each row's slice is bounded by two elements the work item reads; empty rows, and
    bounds past the ends or negative, are sliced as Python slices them (clamped, counted from the end)."""
    values, columns = data(6), np.array([0, 3, 1, -1, 2, 4])
    agrees_with_python(spmv, device, np.array(rows_pointers), columns, values, data(5))


@svod.jit
def conv2d(input, weights):
    K = weights.shape[0]
    N = input.shape[0]
    H_out = input.shape[1] - K + 1
    W_out = input.shape[2] - K + 1
    C_in = input.shape[3]
    C_out = weights.shape[3]
    output = np.empty((N, H_out, W_out, C_out), dtype=np.float32)
    for i in prange(H_out):
        for j in prange(W_out):
            inp = input[:, i:i + K, j:j + K, :].copy()
            output[:, i, j, :] = np.sum(np.sum(np.sum(np.reshape(inp, (N, K, K, C_in, 1)) *
                                                      np.reshape(weights, (1, K, K, C_in, C_out)), axis=1),
                                               axis=1), axis=1)
    return output


def test_a_convolution_as_npbench_writes_it(device):
    """``i:i + K`` is K long whatever ``i`` is: a length the host knows, which a reshape takes."""
    agrees_with_python(conv2d, device, data(2, 6, 5, 3).astype(np.float32), data(3, 3, 3, 2).astype(np.float32),
                       rtol=1e-4)


@svod.jit
def floyd_warshall(path):
    for k in range(path.shape[0]):
        for i in prange(path.shape[0]):
            path[i, :] = np.minimum(path[i, :], path[i, k] + path[k, :])


@svod.jit
def bound_written(ptr, x, y):
    for i in prange(y.shape[0]):
        y[i] = x[ptr[i]:ptr[i + 1]].sum()
        ptr[i] = 0


def test_what_a_prange_cannot_run_is_refused():
    """Floyd-Warshall as npbench writes it: work item k writes row k while the others read it (a race numba
    runs); a bound read from an array the loop writes."""
    with pytest.raises(GraphError, match="path is read at an element another work item may write"):
        floyd_warshall(data(4, 4))
    with pytest.raises(KernelSyntaxError, match="a slice's bound reads ptr, which the prange loop around it "
                                                "writes") as raised:
        bound_written(np.array([0, 1, 2]), data(2), np.zeros(2))
    assert f"test_extents.py:{line_of(bound_written, 'y[i] = x[ptr[i]')}:" in str(raised.value)


@svod.jit
def prefix_of_an_element(a, x):
    return x[:a[0]] * 1.0  # refused: an element only the run knows


def test_a_bound_read_from_an_array_element_is_never_the_first_calls_value():
    """The host knows an argument's shape before the run, never its elements: a slice bound that reads one was
    taken from the first call's array and reused (x[:a[0]] kept its first length when a[0] changed)."""
    with pytest.raises(KernelSyntaxError, match=r"`a\[0\]` is neither") as caught:
        prefix_of_an_element(np.array([2]), np.arange(5.0))
    assert f"test_extents.py:{line_of(prefix_of_an_element, '# refused')}:" in str(caught.value)
