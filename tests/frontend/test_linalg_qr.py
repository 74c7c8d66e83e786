"""``np.linalg.qr`` (reduced) in ``@svod.jit`` functions against NumPy on every device: square, tall and wide
matrices of sizes 0, 1, 2, primes and 64, float32 and float64 (a device without float64 refuses it), integers
(float64, as NumPy's), Q and R themselves (LAPACK's signs: R's diagonal may be negative) where the matrix is
well conditioned, Q R and Q's orthonormality where it is not or is rank-deficient, NaN and infinity, a
factorisation inside a plan loop, and what svod refuses at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError
from tests.frontend.linalg_cases import dtypes_of, shapes_of


@svod.jit
def factored(a):
    q, r = np.linalg.qr(a)
    return q, r


@svod.jit
def returned(a):
    return np.linalg.qr(a, mode="reduced")


@svod.jit
def qr_iteration(a, turns):
    x = a * 1.0
    for _ in range(turns):  # a loop around phases: the factorisation is a step of the plan loop
        q, r = np.linalg.qr(x)
        x[:] = r @ q
    return x


def tolerance(a: np.ndarray) -> float:
    """The dtype's rounding times the condition number and the size (backward stable on both sides)."""
    eps = float(np.finfo(a.dtype).eps)
    condition = float(np.linalg.cond(a)) if a.size else 1.0
    return 50 * eps * condition * max(a.shape, default=1)


def test_q_and_r_are_numpys(device):
    for dtype in dtypes_of(device):
        for m, n in shapes_of(device):
            a = np.random.default_rng(m * 100 + n).standard_normal((m, n)).astype(dtype)
            q, r = factored(a, device=device)
            want_q, want_r = np.linalg.qr(a)
            assert q.dtype == r.dtype == np.dtype(dtype)
            assert q.shape == want_q.shape and r.shape == want_r.shape
            np.testing.assert_allclose(q, want_q, rtol=0, atol=tolerance(a))
            np.testing.assert_allclose(r, want_r, rtol=0, atol=tolerance(a) * max(np.abs(a).max(initial=1.0), 1))
            assert not np.tril(r, -1).any()  # zeros below the diagonal, exactly


def test_a_returned_pair_and_integers():
    a = np.arange(12).reshape(4, 3) % 5 + np.eye(4, 3, dtype=int)
    q, r = returned(a)  # integers: float64, as NumPy's
    want_q, want_r = np.linalg.qr(a)
    assert q.dtype == r.dtype == np.float64
    np.testing.assert_allclose(q, want_q, atol=1e-13)
    np.testing.assert_allclose(r, want_r, atol=1e-13)


def test_ill_conditioned_and_rank_deficient_matrices(device):
    """Q R is the matrix and Q is orthonormal however badly conditioned it is; a zero column is left as it is
    (no reflection: R's diagonal 0 there, as LAPACK's), and where the matrix has a rank the columns of Q that
    span it are NumPy's."""
    dtype = dtypes_of(device)[-1]
    eps = float(np.finfo(dtype).eps)
    rng = np.random.default_rng(3)
    u, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    graded = (u * np.logspace(0, -10 if dtype == "float64" else -5, 6)) @ u.T
    low_rank = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 5))
    zero_column = rng.standard_normal((5, 4))
    zero_column[:, 0] = 0.0
    for a in (graded.astype(dtype), low_rank.astype(dtype), zero_column.astype(dtype), np.zeros((3, 3), dtype)):
        q, r = factored(a, device=device)
        scale = max(float(np.abs(a).max(initial=0.0)), 1.0)
        np.testing.assert_allclose(q @ r, a, rtol=0, atol=100 * eps * scale * a.shape[0])
        np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), rtol=0, atol=100 * eps * a.shape[0])
        assert not np.tril(r, -1).any()
    q, r = factored(zero_column.astype(dtype), device=device)
    want_q, want_r = np.linalg.qr(zero_column.astype(dtype))
    assert r[0, 0] == 0.0 == want_r[0, 0]
    np.testing.assert_allclose(r, want_r, rtol=0, atol=1000 * eps)
    np.testing.assert_allclose(q, want_q, rtol=0, atol=1000 * eps)
    q, r = factored(np.zeros((3, 3), dtype), device=device)
    np.testing.assert_array_equal(q, np.eye(3))  # nothing to reflect: NumPy's too
    np.testing.assert_array_equal(q, np.linalg.qr(np.zeros((3, 3), dtype))[0])


def test_large_and_small_magnitudes_neither_overflow_nor_vanish(device):
    """The norms are scaled (as dnrm2's are): a column whose squares overflow, or underflow, factors as NumPy
    factors it."""
    dtype = dtypes_of(device)[-1]
    huge, tiny = (1e200, 1e-200) if dtype == "float64" else (1e25, 1e-25)
    a = np.random.default_rng(5).standard_normal((4, 3)).astype(dtype)
    for scale in (huge, tiny):
        scaled = (a * np.asarray(scale, dtype)).astype(dtype)
        q, r = factored(scaled, device=device)
        want_q, want_r = np.linalg.qr(scaled)
        assert np.isfinite(q).all() and np.isfinite(r).all()
        np.testing.assert_allclose(q, want_q, rtol=0, atol=1e-5 if dtype == "float32" else 1e-12)
        np.testing.assert_allclose(r / scale, want_r / scale, rtol=0, atol=1e-4 if dtype == "float32" else 1e-12)


def test_nan_and_infinity_give_nan_as_numpys_do(device):
    dtype = dtypes_of(device)[-1]
    for bad in (np.nan, np.inf):
        a = np.eye(3, dtype=dtype)
        a[1, 0] = bad
        q, r = factored(a, device=device)
        want_q, want_r = np.linalg.qr(a)
        assert np.isnan(q).any() and np.isnan(want_q).any()
        assert np.isnan(r).any() and np.isnan(want_r).any()


def test_a_factorisation_inside_a_plan_loop(device):
    """The QR iteration (a = R Q, each turn) of a symmetric matrix: every turn's signs are LAPACK's, so the
    iterates are NumPy's."""
    dtype = dtypes_of(device)[-1]
    x = np.random.default_rng(2).standard_normal((5, 5))
    a = (x + x.T).astype(dtype)
    got, want = qr_iteration(a, 6, device=device), qr_iteration.__wrapped__(a, 6)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 if dtype == "float32" else 1e-10)


def test_refusals_name_the_line():
    @svod.jit
    def complete(a):
        q, r = np.linalg.qr(a, mode="complete")
        return q, r

    with pytest.raises(KernelSyntaxError, match=r"test_linalg_qr.py:\d+: np.linalg.qr takes mode='reduced' in a "
                                                r"jitted function"):
        complete(np.ones((3, 2)))

    @svod.jit
    def vector(a):
        q, r = np.linalg.qr(a)
        return q, r

    with pytest.raises(KernelSyntaxError, match="1-dimensional array given"):
        vector(np.ones(3))
    with pytest.raises(KernelSyntaxError, match="stack of matrices"):
        vector(np.ones((2, 3, 3)))

    @svod.jit
    def one_name(a):
        qr = np.linalg.qr(a)
        return qr

    with pytest.raises(KernelSyntaxError, match=r"two names \(`q, r = ...`\)"):
        one_name(np.eye(2))

    @svod.jit
    def complex_matrix(a):
        q, r = np.linalg.qr(a)
        return q, r

    with pytest.raises(KernelSyntaxError, match="qr of real matrices only, not of complex128 ones"):
        complex_matrix(np.eye(2, dtype=complex))
