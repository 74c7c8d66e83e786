"""A matrix's product with a vector on each side read in one pass over the matrix on the CPU
(``svod.frontend.shared_products``): ``r @ A, A @ p`` (npbench's bicg) and ``x1 += A @ y_1`` beside
``x2 += y_2 @ A`` (its mvt), against the function run as plain Python on every device; and the functions where the
two passes must stay two."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from tests.frontend.test_arrays import data, kernels_of
from tests.frontend.test_jit import agrees_with_python

SHAPES = [(1, 1), (1, 5), (7, 1), (13, 11), (67, 129), (200, 3), (1031, 17)]
"""Rows and columns: single ones, fewer rows than a block takes, primes, and several blocks of which the last is
short."""


@svod.jit
def bicg(A, p, r):
    return r @ A, A @ p


@svod.jit
def bicg_row_first(A, p, r):
    q = A @ p
    s = r @ A
    return q, s


@svod.jit
def mvt(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += y_2 @ A


def summed(device, terms: int) -> float:
    """The absolute error a sum of ``terms`` products of normal numbers may carry on ``device``: float64's to
    1e-12; float32's (a device without float64 runs the float32 arrays) grows with the terms, which cancel to
    results near 0 (a draw of 1031 terms missed 1e-5 by 2.6e-5)."""
    return 1e-6 * terms if svod.dtypes.float64 not in device.caps.element_dtypes else 1e-12


@pytest.mark.parametrize("shape", SHAPES)
def test_both_products_agree_with_python(device, shape):
    rows, columns = shape
    atol = summed(device, max(rows, columns))
    agrees_with_python(bicg, device, data(rows, columns), data(columns), data(rows), rtol=1e-9, atol=atol)
    agrees_with_python(bicg_row_first, device, data(rows, columns), data(columns), data(rows), rtol=1e-9, atol=atol)
    agrees_with_python(mvt, device, data(rows), data(columns), data(columns), data(rows), data(rows, columns),
                       rtol=1e-9, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_each_product_keeps_its_dtype(device, dtype):
    a, p, r = (data(*shape) for shape in ((131, 9), (9,), (131,)))
    if np.dtype(dtype).kind == "i":
        a, p, r = (np.round(x * 50) for x in (a, p, r))
    agrees_with_python(bicg, device, *(x.astype(dtype) for x in (a, p, r)), rtol=1e-5, atol=1e-5, typed=True)


def test_one_pass_reads_the_matrix_and_a_second_sums_the_blocks():
    args = data(1031, 17), data(17), data(1031)
    assert kernels_of(bicg, *args) == 2
    assert kernels_of(bicg_row_first, *args) == 2
    assert kernels_of(mvt, data(1031), data(17), data(17), data(1031), args[0]) == 2


@svod.jit
def changed_between(A, p, r):
    s = r @ A
    p[0] = s[0]
    q = A @ p
    return s, q


@svod.jit
def chained(A, r):
    s = r @ A
    q = A @ s
    return s, q


@svod.jit
def two_matrices(A, B, p, r):
    return r @ A, B @ p


@pytest.mark.parametrize("shape", [(1, 1), (13, 13), (67, 67)])
def test_products_that_are_not_siblings_agree_with_python(device, shape):
    """A vector written between them, a product of the other's result, or two matrices: two passes, each as
    written."""
    rows, columns = shape
    agrees_with_python(changed_between, device, data(rows, columns), data(columns), data(rows), rtol=1e-9)
    agrees_with_python(chained, device, data(rows, columns), data(rows), rtol=1e-9, atol=summed(device, rows * columns))
    agrees_with_python(two_matrices, device, data(rows, columns), data(rows, columns), data(columns), data(rows),
                       rtol=1e-9)
    assert kernels_of(two_matrices, data(rows, columns), data(rows, columns), data(columns), data(rows)) == 2


@svod.jit
def allocated_between(A, p, r):
    s = r @ A
    t = np.zeros(s.shape, s.dtype)
    q = A @ p
    return s, t, q


def test_an_allocation_between_of_the_first_products_shape_moves_before_both(device):
    agrees_with_python(allocated_between, device, data(67, 5), data(5), data(67), rtol=1e-9)


def test_special_values_reach_the_sums_they_reach_in_python(device):
    """inf, NaN, -0.0 and -inf in the operands; on a device whose floats promise no NaN or infinity (WGSL), -0.0
    and magnitudes far from the others'."""
    specials = [np.inf, np.nan, -0.0, -np.inf] if device.caps.ieee_floats else [1e30, -1e-30, -0.0, -1e3]
    a = data(97, 5)
    a[3, 2], a[40, 0], a[96, 4] = specials[:3]
    p, r = data(5), data(97)
    r[50] = specials[3]
    agrees_with_python(bicg, device, a, p, r, rtol=1e-9, numpy_warns=True)
