"""Vector x matrix products in ``@svod.jit`` (``v @ A[:, i:M]``, ``A.T @ v``) and covariance's row of them,
``A[:, i] @ A[:, i:M]``, in a host loop and in a ``prange`` (where each work item's own loop over the outputs is
tiled along the matrix's rows: ``svod.codegen.upcast.upcast_loops``): each compared on every device with the
same function run as plain NumPy, over column counts either side of a tile's width, one row to many, float32,
float64 and int32, a NaN or an infinity in one element."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from tests.frontend.test_jit import agrees_with_python

SHAPES = [(1, 1), (2, 64), (7, 3), (33, 1), (33, 64), (67, 3)]
"""Columns and rows: each column count of 1, 2, 7, 33 and 67 (either side of a tile's 16 float64 or 32 float32
columns, two or four whole tiles and a masked edge) and each row count of 1, 3 and 64."""
DTYPES = [np.float32, np.float64, np.int32]


@svod.jit
def vector_matrix(v, A, i):
    return v @ A[:, i:A.shape[1]]


@svod.jit
def transposed_matrix_vector(A, v):
    return A.T @ v


@svod.jit
def columns_in_a_host_loop(A):
    M = A.shape[1]
    out = np.zeros((M, M), dtype=A.dtype)
    for i in range(M):
        out[i:M, i] = out[i, i:M] = A[:, i] @ A[:, i:M]
    return out


@svod.jit
def columns_in_a_prange(A):
    M = A.shape[1]
    out = np.zeros((M, M), dtype=A.dtype)
    for i in svod.prange(M):
        out[i:M, i] = out[i, i:M] = A[:, i] @ A[:, i:M]
    return out


@svod.jit
def covariance_in_a_prange(M, float_n, data):
    """npbench's covariance (its numba variant), the column count an argument as there."""
    mean = np.sum(data, axis=0) / float_n
    data -= mean
    cov = np.zeros((M, M), dtype=data.dtype)
    for i in svod.prange(M):
        cov[i:M, i] = cov[i, i:M] = data[:, i] @ data[:, i:M] / (float_n - 1.0)
    return cov


def matrix(rows: int, columns: int, dtype: type, special: float | None = None) -> np.ndarray:
    """A ``rows`` x ``columns`` matrix of ``dtype`` (small integers, exact in every sum), with ``special`` in
    the element at the middle row and the last column, where one is given."""
    rng = np.random.default_rng(rows * 1000 + columns)
    a = rng.integers(-9, 10, (rows, columns)).astype(dtype) if np.dtype(dtype).kind == "i" else \
        rng.normal(size=(rows, columns)).astype(dtype)
    if special is not None:
        a[rows // 2, columns - 1] = special
    return a


def tolerances(dtype: type, rows: int) -> dict[str, float]:
    """Integers exactly; floats to 1e-5 (float32) or 1e-12 (float64) of the result, and of the sum's terms
    (``rows`` of them, near 1) where it cancels."""
    if np.dtype(dtype).kind == "i":
        return {"rtol": 0.0, "atol": 0.0}
    rtol = 1e-5 if dtype is np.float32 else 1e-12
    return {"rtol": rtol, "atol": rtol * rows}


def specials(dtype: type) -> list[float | None]:
    return [None] if np.dtype(dtype).kind == "i" else [None, np.nan, np.inf]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("columns", "rows"), SHAPES)
@pytest.mark.parametrize("fn", [columns_in_a_prange, columns_in_a_host_loop], ids=["prange", "host_loop"])
def test_a_row_of_column_products_agrees_with_numpy(device, fn, columns, rows, dtype):
    for special in specials(dtype):
        a = matrix(rows, columns, dtype, special)
        agrees_with_python(fn, device, a, numpy_warns=True, **tolerances(dtype, rows))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("columns", "rows"), [(2, 1), (7, 64), (33, 3), (40, 64)])
def test_covariance_in_a_prange_agrees_with_numpy(device, columns, rows, dtype):
    for special in specials(dtype):
        a = matrix(rows, columns, dtype, special)
        agrees_with_python(covariance_in_a_prange, device, columns, float(rows), a, numpy_warns=True,
                           **tolerances(dtype, rows))


@pytest.mark.parametrize(("columns", "rows"), [(1, 1), (1, 4), (2, 3), (3, 1), (4, 5), (5, 2)])
def test_covariance_of_few_columns_in_a_prange_agrees_with_numpy(device, columns, rows):
    """One column (``M == 1``) was refused as a race: the rewriting wrote ``cov[i:M, i]`` for ``M == 1`` (one work
    item's store), and the kernel, proven for every ``M``, saw two work items meet. The kernel now takes ``M`` at
    the value its plan is made for."""
    for special in specials(np.float64):
        a = matrix(rows, columns, np.float64, special)
        agrees_with_python(covariance_in_a_prange, device, columns, float(rows), a, numpy_warns=True,
                           **tolerances(np.float64, rows))


@pytest.mark.parametrize("count", [np.int32, np.int64])
@pytest.mark.parametrize(("columns", "rows"), [(1, 4), (2, 3), (5, 2), (1, 1)])
def test_covariance_of_few_columns_counted_by_a_numpy_int_agrees_with_numpy(device, count, columns, rows):
    """``M`` a NumPy int, as npbench's sizes often are: its plan's kernels take ``M`` at its value as a Python
    int's do (at ``M == 1`` and ``2`` the kernel proven for every ``M`` was refused as a race, and WGSL's for an
    index past 32 bits, and WebGPU's for a variable of int64, which it has not)."""
    a = matrix(rows, columns, np.float64)
    agrees_with_python(covariance_in_a_prange, device, count(columns), float(rows), a, numpy_warns=True,
                       **tolerances(np.float64, rows))


def test_a_plan_made_for_one_column_count_refuses_another():
    """The plan for ``M == 1`` runs one work item: its kernels take ``M`` as the constant 1 (a Python int the host
    reads), so a run that passes another ``M`` raises rather than compute; a NumPy int's plan bounds its ``M``
    variable to the value."""
    plan = covariance_in_a_prange.plan(1, 4.0, matrix(4, 1, np.float64))
    assert "M" not in plan.variables
    plan.execute(float_n=4.0)
    with pytest.raises(svod.errors.VariableError, match="unknown variable M"):
        plan.execute(M=2, float_n=4.0)
    plan = covariance_in_a_prange.plan(np.int64(1), 4.0, matrix(4, 1, np.float64))
    plan.execute(M=1, float_n=4.0)
    with pytest.raises(svod.errors.VariableError, match=r"M=2 is outside bounds \[1, 1\]"):
        plan.execute(M=2, float_n=4.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("columns", "rows"), SHAPES)
def test_a_vector_times_a_matrix_agrees_with_numpy(device, columns, rows, dtype):
    for special in specials(dtype):
        a, v = matrix(rows, columns, dtype, special), matrix(1, rows, dtype)[0]
        for first in sorted({0, columns // 2, columns - 1}):
            agrees_with_python(vector_matrix, device, v, a, first, numpy_warns=True, **tolerances(dtype, rows))
        agrees_with_python(transposed_matrix_vector, device, a, v, numpy_warns=True, **tolerances(dtype, rows))
