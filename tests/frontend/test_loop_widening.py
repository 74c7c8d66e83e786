"""A host loop whose turns are independent run as the array statements of all its turns
(``svod.frontend.loop_widening``): npbench's doitgen, elementwise bodies and temporaries, against the function run
as plain Python on every device; the loops that must run turn by turn, which give Python's answer too; and the
reshaped views those rewrites store through."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from tests.frontend.test_arrays import data, kernels_of
from tests.frontend.test_jit import agrees_with_python


@svod.jit
def doitgen(NR, NQ, NP, A, C4):
    for r in range(NR):
        for q in range(NQ):
            tmp = A[r, q, :] @ C4
            A[r, q, :] = tmp


@svod.jit
def rows_of(lo, hi, A, w, B):
    for i in range(lo, hi):
        t = np.exp(A[i]) * w
        t += 1.0
        B[i, :] = -t / (A[i, :] + 3.0)


@svod.jit
def matrices_of(A, M, out):
    for b in range(A.shape[0]):
        out[b] = A[b] @ M + A[b]


SHAPES = [(1, 1, 1), (2, 3, 5), (7, 1, 13), (5, 11, 17), (3, 4, 64)]
"""Turns of both loops and the product's length: single ones, primes, and a row longer than a vector."""


@pytest.mark.parametrize("shape", SHAPES)
def test_a_batch_of_products_agrees_with_python(device, shape):
    nr, nq, n = shape
    agrees_with_python(doitgen, device, nr, nq, n, data(nr, nq, n), data(n, n), rtol=1e-9, atol=1e-12)
    if nr > 1:  # fewer turns than the array has rows: the rest kept
        agrees_with_python(doitgen, device, nr - 1, nq, n, data(nr, nq, n), data(n, n), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rows", [1, 2, 13])
def test_an_elementwise_body_with_a_temporary_agrees_with_python(device, rows):
    a, w = data(rows, 9), data(9)
    agrees_with_python(rows_of, device, 0, rows, a, w, np.zeros((rows, 9)))
    if rows > 2:
        agrees_with_python(rows_of, device, 1, rows - 1, a, w, np.zeros((rows, 9)))


@pytest.mark.parametrize("batch", [1, 6])
def test_a_product_of_each_turns_matrix_agrees_with_python(device, batch):
    agrees_with_python(matrices_of, device, data(batch, 5, 3), data(3, 3), np.zeros((batch, 5, 3)), rtol=1e-9)


def test_the_turns_run_as_one_statement_each():
    a, c = data(5, 7, 16), data(16, 16)
    assert kernels_of(doitgen, 5, 7, 16, a, c) <= 2  # (not 5 * 7 products and copies)
    assert kernels_of(rows_of, 0, 6, data(6, 4), data(4), np.zeros((6, 4))) == 1


# ---- loops that run turn by turn ---------------------------------------------------------------------------

@svod.jit
def reads_another_turns_row(A):
    for i in range(A.shape[0]):
        A[i, :] = A[i, :] + A[0, :]


@svod.jit
def reads_through_a_view(A):
    flipped = A[::-1]
    for i in range(A.shape[0]):
        A[i, :] = flipped[i, :] + 1.0


@svod.jit
def temporary_read_after(A, B):
    for i in range(A.shape[0]):
        t = A[i, :] * 2.0
        B[i, :] = t
    return t


@svod.jit
def carried_temporary(A, B):
    t = A[0, :] * 0.0
    for i in range(A.shape[0]):
        B[i, :] = t
        t = A[i, :] * 2.0


@svod.jit
def variable_as_number(A):
    for i in range(A.shape[0]):
        A[i, :] = A[i, :] * i


@svod.jit
def reads_the_array_whole(A, B):
    for i in range(A.shape[0]):
        B[i, :] = A[i, :] + B.sum()


@svod.jit
def updates_through_a_temporary_view(A, B):
    last = A[-1]
    for i in range(A.shape[0]):
        t = A[i, :]
        t += 1.0  # (writes A's row i: the later turns' `last` is the row before its turn)
        B[i, :] = t + last


KEPT = [reads_another_turns_row, reads_through_a_view, variable_as_number]


@pytest.mark.parametrize("fn", KEPT, ids=lambda f: f.fn.__name__)
def test_loops_whose_turns_meet_agree_with_python(device, fn):
    agrees_with_python(fn, device, data(6, 5))


def test_a_temporary_carried_or_read_after_the_loop_is_not_widened(device):
    """Widened, a temporary would hold every turn's value where Python's holds the last turn's, and one read
    before the turn binds it holds the turn before's: those loops run turn by turn (svod refuses an array a loop
    makes read after it, as it did)."""
    with pytest.raises(svod.errors.KernelSyntaxError, match="made in the loop"):
        temporary_read_after(data(4, 3), np.zeros((4, 3)), device=device)
    agrees_with_python(carried_temporary, device, data(4, 3), np.zeros((4, 3)))
    agrees_with_python(reads_the_array_whole, device, data(4, 3), data(4, 3), rtol=1e-9)
    agrees_with_python(updates_through_a_temporary_view, device, data(4, 3), np.zeros((4, 3)))


@svod.jit
def rows_up_to(n, a):
    for r in range(n):
        a[r, :] += 1.0
    return a


def test_a_loop_of_no_turns_is_no_plan_for_another_count():
    """``n = 0`` rewrites the loop to nothing, a plan that reads no ``n``: a later count is a plan of its own."""
    assert rows_up_to(0, np.zeros((4, 3))).sum() == 0
    assert rows_up_to(3, np.zeros((4, 3))).sum() == 9
    with pytest.raises(svod.errors.IndexOutOfBoundsError):
        rows_up_to(5, np.zeros((4, 3)))


def test_a_loop_past_the_arrays_end_is_refused():
    """Turn by turn, the turn past the end is an index out of bounds; widened it would be a shorter slice."""
    with pytest.raises(svod.errors.SvodError):
        doitgen(3, 2, 4, data(2, 2, 4), data(4, 4))


# ---- stores through a reshape -------------------------------------------------------------------------------

@svod.jit
def product_in_place_through_a_reshape(A, m):
    rows = A.reshape(-1, A.shape[-1])
    rows[:] = rows @ m


@svod.jit
def fill_through_a_flat_view(A):
    A.reshape(-1)[:] = 1.5


def test_a_product_stored_through_a_reshape_reads_the_rows_first(device):
    """``rows[:] = rows @ m`` of a view that merges axes: NumPy computes the product before it stores, so a
    temporary (the view's memory is the argument's), and the store's merged index is one work item's element."""
    agrees_with_python(product_in_place_through_a_reshape, device, data(3, 5, 4), data(4, 4), rtol=1e-9)
    agrees_with_python(fill_through_a_flat_view, device, data(2, 3, 7))
