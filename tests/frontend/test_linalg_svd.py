"""``np.linalg.svd`` in ``@svod.jit`` functions against NumPy on every device: square, tall, wide and empty
matrices, ``full_matrices`` either way and ``compute_uv=False``, float32 and float64 (a device without float64
refuses it), rank-deficient and graded matrices (singular values within the rounding of the largest; u and vh
orthonormal, u s vh the matrix, and NumPy's up to sign where the singular values are apart), svod's sign
convention, NaN and infinity (NumPy's "SVD did not converge"), a factorisation inside a plan loop, and what
svod refuses at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError, LinAlgError, SvodError
from tests.frontend.linalg_cases import dtypes_of, jacobi_refused, shapes_of


@svod.jit
def full(a):
    u, s, vh = np.linalg.svd(a)
    return u, s, vh


@svod.jit
def reduced(a):
    return np.linalg.svd(a, full_matrices=False)


@svod.jit
def singular_values(a):
    s = np.linalg.svd(a, compute_uv=False)
    return s


@svod.jit
def largest_each_turn(a, turns):
    total = 0.0
    for t in range(turns):  # a loop around phases: the factorisation is a step of the plan loop
        b = a * (t + 1.0)
        s = np.linalg.svd(b, compute_uv=False)
        total += s[0]
    return total


@svod.jit
def pseudo_inverse(a):
    return np.linalg.pinv(a)


def check(a: np.ndarray, u: np.ndarray, s: np.ndarray, vh: np.ndarray, full_matrices: bool) -> None:
    m, n = a.shape
    eps = float(np.finfo(a.dtype).eps)
    want_u, want_s, want_vh = np.linalg.svd(a, full_matrices=full_matrices)
    assert u.shape == want_u.shape and s.shape == want_s.shape and vh.shape == want_vh.shape
    assert u.dtype == s.dtype == vh.dtype == a.dtype
    scale = max(float(want_s.max(initial=0.0)), 1e-30)
    tol = 50 * eps * max(m, n, 1)
    np.testing.assert_allclose(s, want_s, rtol=0, atol=tol * scale)
    assert np.all(np.diff(s) <= 0) and np.all(s >= 0)
    np.testing.assert_allclose(u.T @ u, np.eye(u.shape[1]), rtol=0, atol=tol)
    np.testing.assert_allclose(vh @ vh.T, np.eye(vh.shape[0]), rtol=0, atol=tol)
    k = min(m, n)
    np.testing.assert_allclose((u[:, :k] * s) @ vh[:k], a, rtol=0, atol=tol * scale)
    right = vh.T if m >= n else u  # svod's convention: the element of largest magnitude positive
    for column in right.T[:k]:
        assert column[np.argmax(np.abs(column))] > 0
    gaps = -np.diff(want_s)
    for i in range(k):
        if (i == 0 or gaps[i - 1] > 1e-2 * scale) and (i == k - 1 or gaps[i] > 1e-2 * scale) and \
                want_s[i] > 1e-2 * scale:
            assert abs(abs(float(u[:, i] @ want_u[:, i])) - 1) < 1e4 * eps * max(m, n)
            assert abs(abs(float(vh[i] @ want_vh[i])) - 1) < 1e4 * eps * max(m, n)


def test_svd_agrees_with_numpy(device):
    if jacobi_refused(device, full):
        return
    for dtype in dtypes_of(device):
        for m, n in shapes_of(device):
            a = np.random.default_rng(m * 100 + n).standard_normal((m, n)).astype(dtype)
            check(a, *full(a, device=device), True)
            check(a, *reduced(a, device=device), False)
            s = singular_values(a, device=device)
            np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=0,
                                       atol=50 * float(np.finfo(dtype).eps) * max(m, n, 1) * max(s.max(initial=0), 1))


def test_rank_deficient_and_graded_matrices(device):
    """A zero singular value's left vector (and full_matrices' extra columns) completes an orthonormal u, as
    NumPy's does, of tall and wide matrices with repeated and zero columns; a graded matrix's singular values
    are NumPy's within the rounding of the largest."""
    if jacobi_refused(device, full):
        return
    dtype = dtypes_of(device)[-1]
    rng = np.random.default_rng(6)
    repeated = rng.standard_normal((5, 4))
    repeated[:, 2] = repeated[:, 0]
    repeated[:, 3] = 0.0
    wide = rng.standard_normal((3, 5))  # (its transpose's columns span two dimensions: one is rounding left)
    wide[:, 3], wide[:, 4], wide[:, 2] = wide[:, 1], wide[:, 1], 0.0
    u, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    graded = (u * np.logspace(0, -12 if dtype == "float64" else -6, 6)) @ u.T
    for a in (repeated, repeated.T, wide, graded, np.zeros((3, 2)), np.ones((4, 4)), 1e150 * np.eye(2) if
              dtype == "float64" else 1e30 * np.eye(2)):
        a = a.astype(dtype)
        check(a, *full(a, device=device), True)
        check(a, *reduced(a, device=device), False)


def test_nan_and_infinity_raise_numpys_error(device):
    if jacobi_refused(device, full):
        return
    dtype = dtypes_of(device)[-1]
    for bad in (np.nan, np.inf, -np.inf):
        a = np.eye(3, dtype=dtype)
        a[1, 0] = bad
        for call in (full, singular_values):
            with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge") as raised:
                call(a, device=device)
            assert isinstance(raised.value, SvodError) and isinstance(raised.value, LinAlgError)
            assert "test_linalg_svd.py" in str(raised.value)
        if np.isnan(bad):  # (NumPy's gesdd, OpenBLAS's here, never returns on an infinity: not called on one)
            with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
                np.linalg.svd(a)
    np.testing.assert_allclose(singular_values(2 * np.eye(2, dtype=dtype), device=device), [2.0, 2.0])  # again


def test_a_factorisation_inside_a_plan_loop(device):
    if jacobi_refused(device, full):
        return
    dtype = dtypes_of(device)[-1]
    a = np.random.default_rng(8).standard_normal((4, 3)).astype(dtype)
    got, want = largest_each_turn(a, 3, device=device), largest_each_turn.__wrapped__(a, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_pinv_agrees_with_numpy(device):
    """Of full-rank, rank-deficient (a zero column: its singular value 0, under NumPy's cutoff, 1e-15 of the
    largest, dropped) and empty matrices, tall and wide."""
    if jacobi_refused(device, full):
        with pytest.raises(KernelSyntaxError, match="Jacobi sweeps"):
            pseudo_inverse(np.ones((2, 3), np.float32), device=device)
        return
    for dtype in dtypes_of(device):
        eps = float(np.finfo(dtype).eps)
        rng = np.random.default_rng(11)
        deficient = rng.standard_normal((5, 4))
        deficient[:, 1] = 0.0
        for a in (rng.standard_normal((4, 3)), rng.standard_normal((3, 6)), deficient, np.zeros((3, 2)),
                  np.zeros((0, 3)), np.ones((1, 1))):
            a = a.astype(dtype)
            got, want = pseudo_inverse(a, device=device), np.linalg.pinv(a)
            assert got.shape == want.shape and got.dtype == want.dtype
            kept = np.linalg.svd(a, compute_uv=False) if a.size else np.ones(1)
            condition = float(kept.max() / kept[kept > 0].min()) if kept.any() else 1.0
            np.testing.assert_allclose(got, want, rtol=0, atol=100 * eps * condition * max(a.shape))


def test_refusals_name_the_line():
    @svod.jit
    def hermitian(a):
        return np.linalg.svd(a, hermitian=True)

    with pytest.raises(KernelSyntaxError, match=r"test_linalg_svd.py:\d+: np.linalg.svd takes full_matrices=True "
                                                r"or False, compute_uv=True or False, hermitian=False"):
        hermitian(np.eye(2))

    @svod.jit
    def computed(a, flag):
        return np.linalg.svd(a, compute_uv=flag)

    with pytest.raises(KernelSyntaxError, match="written out"):
        computed(np.eye(2), True)

    @svod.jit
    def two_names(a):
        u, s = np.linalg.svd(a)
        return u, s

    with pytest.raises(KernelSyntaxError, match=r"three names \(`u, s, vh = ...`\)"):
        two_names(np.eye(2))
