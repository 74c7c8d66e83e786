"""``np.linalg.matrix_power``, ``matrix_rank``, ``cond`` and ``norm``'s orders of the singular values (2, -2,
``'nuc'``) in ``@svod.jit`` functions against NumPy on every device: orders 0, 1, 2, 5 and 17, empty, tall and
wide matrices, float32, float64 and integers, rank-deficient, singular and ill-conditioned matrices, NaN
(NumPy's ``LinAlgError``), calls inside expressions and returned, and what NumPy refuses, refused at the line.
A device that stops a work item's loops (WebGPU) refuses the singular values' Jacobi sweeps at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError, LinAlgError, SvodError
from tests.frontend.linalg_cases import dtypes_of, jacobi_refused


@svod.jit
def power(a, n):
    return np.linalg.matrix_power(a, n)


@svod.jit
def powers(a):
    return (np.linalg.matrix_power(a, -3), np.linalg.matrix_power(a, -1), np.linalg.matrix_power(a, 0),
            np.linalg.matrix_power(a, 1), np.linalg.matrix_power(a, 2), np.linalg.matrix_power(a, 3),
            np.linalg.matrix_power(a, 4), np.linalg.matrix_power(a, 13))


POWERS = (-3, -1, 0, 1, 2, 3, 4, 13)


@svod.jit
def power_in_expression(a):
    b = 2 * np.linalg.matrix_power(a + 1, 3) - np.linalg.matrix_power(a, -2)
    return b


@svod.jit
def rank(a):
    return np.linalg.matrix_rank(a)


@svod.jit
def rank_with(a, tol, rtol, hermitian):
    r = np.linalg.matrix_rank(a, tol, hermitian, rtol=rtol)
    return r


@svod.jit
def condition(a, p):
    c = np.linalg.cond(a, p)
    return c


@svod.jit
def singular_norm(a, order, keepdims):
    n = np.linalg.norm(a, order, keepdims=keepdims)
    return n


@svod.jit
def singular_norms(a):
    return (np.linalg.norm(a, 2), np.linalg.norm(a, 2, keepdims=True), np.linalg.norm(a, -2),
            np.linalg.norm(a, -2, keepdims=True), np.linalg.norm(a, "nuc"), np.linalg.norm(a, "nuc", keepdims=True))


SINGULAR_ORDERS = ((2, False), (2, True), (-2, False), (-2, True), ("nuc", False), ("nuc", True))


@svod.jit
def largest_and_sum(a):
    return np.linalg.norm(a, 2), np.linalg.norm(a, "nuc", keepdims=True)


@svod.jit
def norms_in_expression(a):
    return 3 * np.linalg.norm(a, 2) + np.linalg.norm(a.T, "nuc", axis=(1, 0)), np.linalg.norm(a[0], 2)


def orders_of(device: Device) -> tuple[int, ...]:
    return (0, 1, 2, 5) if device.name != "CPU" else (0, 1, 2, 5, 17)


def well_conditioned(n: int, dtype: str, seed: int) -> np.ndarray:
    """A matrix whose powers (and its inverse's) stay near 1 in size: eigenvalues within [0.5, 1.5]."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return ((q * np.linspace(0.5, 1.5, n)) @ q.T).astype(dtype)


def test_matrix_power_agrees_with_numpy(device):
    for dtype in dtypes_of(device):
        eps = float(np.finfo(dtype).eps)
        for n in orders_of(device):
            a = well_conditioned(n, dtype, n)
            for k, got in zip(POWERS, powers(a, device=device), strict=True):
                want = np.linalg.matrix_power(a, k)
                assert got.dtype == want.dtype and got.shape == want.shape
                scale = float(np.abs(want).max(initial=1.0))
                np.testing.assert_allclose(got, want, rtol=0, atol=10 * eps * max(n, 1) * max(abs(k), 1) * scale)


def test_matrix_power_of_integers_is_exact(device):
    """Integers stay integers for n >= 0 (their products wrap as NumPy's do); a negative power is inv's
    float64."""
    a = (np.arange(25).reshape(5, 5) % 7 - 3).astype(np.int32)
    for k in (0, 1, 9):
        got, want = power(a, k, device=device), np.linalg.matrix_power(a, k)
        assert got.dtype == want.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    small = np.array([[2, 1], [1, 1]], np.int32)
    if dtypes.float64 in device.caps.element_dtypes:
        got = power(small, -2, device=device)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, np.linalg.matrix_power(small, -2), rtol=1e-12)
    else:
        with pytest.raises(KernelSyntaxError, match="no float64"):
            power(small, -2, device=device)


def test_matrix_power_of_a_singular_matrix_raises_and_in_expressions(device):
    dtype = dtypes_of(device)[-1]
    singular = np.array([[1.0, 2.0], [2.0, 4.0]], dtype)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix") as raised:
        power(singular, -1, device=device)
    assert isinstance(raised.value, SvodError) and isinstance(raised.value, LinAlgError)
    np.testing.assert_array_equal(power(singular, 2, device=device), singular @ singular)
    a = well_conditioned(4, dtype, 4)
    want = 2 * np.linalg.matrix_power(a + 1, 3) - np.linalg.matrix_power(a, -2)
    np.testing.assert_allclose(power_in_expression(a, device=device), want, rtol=0,
                               atol=1e3 * float(np.finfo(dtype).eps) * float(np.abs(want).max()))


def deficient(m: int, n: int, r: int, dtype: str, seed: int) -> np.ndarray:
    """An m x n matrix of rank r (r <= min(m, n)): r random columns, the others copies of them or zero."""
    rng = np.random.default_rng(seed)
    a = np.zeros((m, n))
    a[:, :r] = rng.standard_normal((m, r))
    for j in range(r, n):
        a[:, j] = a[:, j % r] if r and j % 2 else 0.0
    return a.astype(dtype)


def test_matrix_rank_agrees_with_numpy(device):
    if jacobi_refused(device, rank):
        return
    for dtype in dtypes_of(device):
        for m, n, r in ((0, 0, 0), (0, 3, 0), (1, 1, 1), (2, 2, 1), (5, 3, 3), (3, 5, 2), (5, 5, 0),
                        *(((17, 9, 4), (9, 17, 6)) if device.name == "CPU" else ())):
            a = deficient(m, n, r, dtype, m + n)
            assert rank(a, device=device) == np.linalg.matrix_rank(a) == r
        for vector in (np.zeros(4, dtype), np.array([0.0, -0.0, 1e-30], dtype), np.array([np.nan, 0.0], dtype),
                       np.zeros(0, dtype)):
            assert rank(vector, device=device) == np.linalg.matrix_rank(vector)


def test_matrix_rank_tol_rtol_and_hermitian(device):
    if jacobi_refused(device, rank):
        return
    dtype = dtypes_of(device)[-1]
    q, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((6, 6)))
    graded = ((q * np.array([1.0, 0.5, 1e-2, 1e-4, -1e-6, 0.0])) @ q.T).astype(dtype)
    for tol, rtol in ((None, None), (1e-3, None), (0.3, None), (None, 1e-3), (None, 0.6), (10.0, None)):
        for hermitian in (False, True):
            want = np.linalg.matrix_rank(graded, tol, hermitian, rtol=rtol)
            assert rank_with(graded, tol, rtol, hermitian, device=device) == want


def test_matrix_rank_of_nan_raises_as_numpys():
    a = np.eye(3)
    a[1, 2] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        np.linalg.matrix_rank(a)
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        rank(a)


def test_cond_agrees_with_numpy(device):
    if jacobi_refused(device, rank):
        with pytest.raises(KernelSyntaxError, match="Jacobi sweeps"):
            condition(np.eye(2, dtype=np.float32), None, device=device)
        return
    for dtype in dtypes_of(device):
        eps = float(np.finfo(dtype).eps)
        rng = np.random.default_rng(5)
        for a in (rng.standard_normal((5, 5)), rng.standard_normal((7, 3)), rng.standard_normal((3, 7)),
                  np.ones((1, 1)), np.diag([1.0, 1e-3, 1e-5]), 2.5 * np.eye(4)):
            a = a.astype(dtype)
            for p in (None, 2, -2):
                got, want = condition(a, p, device=device), np.linalg.cond(a, p)
                assert isinstance(got, float) and want.dtype == np.dtype(dtype)  # (one number: a Python float)
                kappa = float(np.linalg.cond(a))
                np.testing.assert_allclose(got, want, rtol=100 * eps * kappa * max(a.shape))


def test_cond_of_singular_matrices_is_infinite_or_huge(device):
    """0 / 0 (a zero matrix's) is inf, as NumPy's NaN made inf; a singular matrix's condition number is inf or
    beyond 1 / eps in both."""
    if jacobi_refused(device, rank):
        return
    dtype = dtypes_of(device)[-1]
    eps = float(np.finfo(dtype).eps)
    zeros = np.zeros((3, 3), dtype)
    assert condition(zeros, None, device=device) == np.linalg.cond(zeros) == np.inf
    assert condition(zeros, -2, device=device) == np.linalg.cond(zeros, -2) == np.inf
    singular = deficient(4, 4, 2, dtype, 1)
    assert condition(singular, None, device=device) > 0.01 / eps and np.linalg.cond(singular) > 0.01 / eps
    assert condition(singular, -2, device=device) < 100 * eps


def test_norms_of_the_singular_values_agree_with_numpy(device):
    if jacobi_refused(device, rank):
        with pytest.raises(KernelSyntaxError, match="Jacobi sweeps"):
            singular_norm(np.eye(2, dtype=np.float32), 2, False, device=device)
        return
    for dtype in dtypes_of(device):
        eps = float(np.finfo(dtype).eps)
        for shape in ((1, 1), (2, 5), (5, 2), (7, 7)):
            a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
            scale = float(np.linalg.norm(a, 2))
            for (order, keepdims), got in zip(SINGULAR_ORDERS, singular_norms(a, device=device), strict=True):
                want = np.linalg.norm(a, order, keepdims=keepdims)
                assert np.asarray(got).shape == want.shape and want.dtype == np.dtype(dtype)
                assert np.asarray(got).dtype == want.dtype if keepdims else isinstance(got, float)
                np.testing.assert_allclose(got, want, rtol=0, atol=100 * eps * max(shape) * scale)
        for shape in ((0, 3), (3, 0)):
            a = np.zeros(shape, dtype)
            largest, total = largest_and_sum(a, device=device)
            assert largest == 0.0 and isinstance(largest, float)
            np.testing.assert_array_equal(total, np.linalg.norm(a, "nuc", keepdims=True))
            assert total.dtype == np.dtype(dtype) and np.linalg.norm(a, 2) == 0.0
        a = np.random.default_rng(1).standard_normal((4, 3)).astype(dtype)
        whole, row = norms_in_expression(a, device=device)
        np.testing.assert_allclose(whole, 3 * np.linalg.norm(a, 2) + np.linalg.norm(a, "nuc"), rtol=1000 * eps)
        np.testing.assert_allclose(row, np.linalg.norm(a[0]), rtol=100 * eps)


def test_refusals_name_the_line():
    for args, said in (((np.ones((2, 3)), 2), r"Last 2 dimensions of the array must be square, not 2x3"),
                       ((np.ones(3), 2), r"1-dimensional array given"),
                       ((np.eye(2), 2.0), r"exponent must be an integer, not 2.0")):
        with pytest.raises(KernelSyntaxError, match=r"test_linalg_compose.py:\d+: np.linalg.matrix_power.*" + said):
            power(*args)
        with pytest.raises((np.linalg.LinAlgError, TypeError)):
            np.linalg.matrix_power(*args)
    for p in (1, -np.inf, "fro", "nuc"):
        with pytest.raises(KernelSyntaxError, match=r"np.linalg.cond\(x, .*\): svod computes the condition number"):
            condition(np.eye(2), p)
    for empty in (np.ones((0, 0)), np.ones((0, 3))):
        with pytest.raises(KernelSyntaxError, match="cond is not defined on empty arrays"):
            condition(empty, None)
        with pytest.raises(np.linalg.LinAlgError, match="cond is not defined on empty arrays"):
            np.linalg.cond(empty)
    with pytest.raises(KernelSyntaxError, match="Last 2 dimensions of the array must be square, not 2x3"):
        rank_with(np.ones((2, 3)), None, None, True)
    with pytest.raises(KernelSyntaxError, match=r"np\.linalg\.matrix_rank takes an array"):
        rank(np.float64(1.0) * np.ones(()))
    with pytest.raises(KernelSyntaxError, match="Improper number of dimensions to norm"):
        singular_norm(np.ones((2, 2, 2)), "nuc", False)
    with pytest.raises(KernelSyntaxError, match="smallest of no singular values"):
        singular_norm(np.ones((0, 3)), -2, False)


@svod.jit
def least_squares(a, b):
    x, residuals, found, s = np.linalg.lstsq(a, b)
    return x, residuals, found, s


@svod.jit
def least_squares_solution(a, b, rcond):
    x, _, found, _ = np.linalg.lstsq(a, b, rcond=rcond)
    return x * 1, found


def test_lstsq_agrees_with_numpy(device):
    """Tall, wide, square and empty systems of one and of several right-hand sides (and of none); the
    residuals NumPy's (empty where m <= n, or the rank is below n); computed in float64 as NumPy's is, the
    results in the operands' dtype."""
    if jacobi_refused(device, rank):
        with pytest.raises(KernelSyntaxError, match="Jacobi sweeps"):
            least_squares(np.eye(2, dtype=np.float32), np.ones(2, np.float32), device=device)
        return
    rng = np.random.default_rng(12)
    for dtype in dtypes_of(device):
        eps = float(np.finfo(dtype).eps)
        for (m, n), columns in (((5, 3), 2), ((3, 5), None), ((7, 2), None), ((1, 1), None), ((0, 3), None),
                                ((3, 0), 2), ((6, 2), 0)):
            a = rng.standard_normal((m, n)).astype(dtype)
            b = rng.standard_normal((m,) if columns is None else (m, columns)).astype(dtype)
            got, want = least_squares(a, b, device=device), np.linalg.lstsq(a, b)
            for part, (g, w) in enumerate(zip(got, want, strict=True)):
                g = np.asarray(g)
                assert g.shape == np.shape(w), (m, n, columns, part)
                if part != 2:
                    assert g.dtype == w.dtype
                kappa = float(np.linalg.cond(a)) if a.size else 1.0
                scale = max(float(np.abs(w).max(initial=0.0)), 1.0)
                np.testing.assert_allclose(g, w, rtol=0, atol=100 * eps * kappa * max(m, n, 1) * scale)


def test_lstsq_of_rank_deficient_and_ill_conditioned_systems(device):
    """A rank-deficient system's minimum-norm solution and empty residuals; rcond's cutoff (the default,
    NumPy's float64 epsilon times max(m, n), even of float32 operands; a larger one dropping small singular
    values)."""
    if jacobi_refused(device, rank):
        return
    for dtype in dtypes_of(device):
        eps = float(np.finfo(dtype).eps)
        for a in (deficient(6, 4, 2, dtype, 2), deficient(4, 6, 3, dtype, 3), np.zeros((3, 2), dtype)):
            b = np.arange(a.shape[0], dtype=dtype) - 1
            x, residuals, r, s = least_squares(a, b, device=device)
            want = np.linalg.lstsq(a, b)
            assert r == want[2] and residuals.shape == want[1].shape == (0,)
            np.testing.assert_allclose(x, want[0], rtol=0, atol=1e3 * eps * max(float(np.abs(want[0]).max()), 1))
            np.testing.assert_allclose(s, want[3], rtol=0, atol=100 * eps * max(float(want[3].max(initial=0)), 1))
        graded = np.diag(np.array([1.0, 1e-2, 1e-4, 1e-6])).astype(dtype)
        b = np.ones(4, dtype)
        for rcond in (None, 1e-3, 1e-5, -1.0):
            x, r = least_squares_solution(graded, b, rcond, device=device)
            want = np.linalg.lstsq(graded, b, rcond=rcond)
            assert r == want[2]
            np.testing.assert_allclose(x, want[0], rtol=100 * eps)


def test_lstsq_of_nan_raises_and_its_refusals():
    """NaN raises NumPy's LinAlgError (NumPy's own lstsq is not called with it: its LAPACK gelsd may never
    return on NaN)."""
    a = np.eye(3)
    a[0, 1] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        least_squares(a, np.ones(3))
    with pytest.raises(KernelSyntaxError, match=r"test_linalg_compose.py:\d+: np.linalg.lstsq: Incompatible dim"):
        least_squares(np.ones((3, 2)), np.ones(4))
    with pytest.raises(KernelSyntaxError, match="1-dimensional array given"):
        least_squares(np.ones(3), np.ones(3))

    @svod.jit
    def residuals_read(a, b):
        _x, residuals, _rank, _s = np.linalg.lstsq(a, b)
        return residuals.sum()

    with pytest.raises(KernelSyntaxError, match=r"residuals .* has a length known only after the run"):
        residuals_read(np.ones((4, 2)), np.ones(4))
    np.testing.assert_array_equal(residuals_read(np.ones((2, 4)), np.ones(2)), 0.0)  # (m <= n: empty, read)

    @svod.jit
    def one_name(a, b):
        return np.linalg.lstsq(a, b)

    with pytest.raises(KernelSyntaxError, match=r"four names \(`x, residuals, rank, s = ...`\)"):
        one_name(np.ones((4, 2)), np.ones(4))
