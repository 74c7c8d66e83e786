"""``np.linalg.eigh`` and ``eigvalsh`` in ``@svod.jit`` functions against NumPy on every device: sizes 0, 1, 2,
primes and 64, float32 and float64 (a device without float64 refuses it), integers (float64), only the lower
triangle read, repeated and graded eigenvalues (eigenvalues within the rounding of the largest; eigenvectors up
to sign, where the eigenvalues are apart, else by what they span), svod's sign convention, NaN, a
factorisation inside a plan loop, and what svod refuses at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError
from tests.frontend.linalg_cases import dtypes_of, jacobi_refused, sizes_of


@svod.jit
def decomposed(a):
    w, v = np.linalg.eigh(a)
    return w, v


@svod.jit
def values(a):
    return np.linalg.eigvalsh(a, UPLO="L")


@svod.jit
def returned(a):
    return np.linalg.eigh(a)


@svod.jit
def shifted(a, turns):
    total = np.zeros(a.shape[0], a.dtype)
    for t in range(turns):  # a loop around phases: the factorisation is a step of the plan loop
        b = a + t * np.eye(a.shape[0], dtype=a.dtype)
        w = np.linalg.eigvalsh(b)
        total += w
    return total


def symmetric(n: int, dtype: str, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, n))
    return ((x + x.T) / 2).astype(dtype)


def check(a: np.ndarray, w: np.ndarray, v: np.ndarray) -> None:
    """``w`` is NumPy's (within the rounding of the largest eigenvalue); ``v`` is orthonormal, satisfies
    a v = v w, has svod's signs, and matches NumPy's up to sign where the eigenvalues are apart."""
    n = a.shape[0]
    eps = float(np.finfo(a.dtype).eps)
    lower = np.tril(a) + np.tril(a, -1).T
    want_w, want_v = np.linalg.eigh(a)
    scale = max(float(np.abs(want_w).max(initial=0.0)), 1e-30)
    tol = 50 * eps * max(n, 1) * scale
    np.testing.assert_allclose(w, want_w, rtol=0, atol=tol)
    assert np.all(np.diff(w) >= 0)  # ascending
    np.testing.assert_allclose(v.T @ v, np.eye(n), rtol=0, atol=50 * eps * max(n, 1))
    np.testing.assert_allclose(lower.astype(np.float64) @ v, v * w, rtol=0, atol=10 * tol)
    for column in v.T:  # svod's convention: the element of largest magnitude (the first such) positive
        assert column[np.argmax(np.abs(column))] > 0
    gaps = np.diff(want_w)
    apart = [i for i in range(n) if (i == 0 or gaps[i - 1] > 1e-2 * scale) and (i == n - 1 or gaps[i] > 1e-2 * scale)]
    for i in apart:
        assert abs(abs(float(v[:, i] @ want_v[:, i])) - 1) < 1e4 * eps * max(n, 1)


def test_eigenvalues_and_eigenvectors_agree_with_numpy(device):
    if jacobi_refused(device, decomposed):
        with pytest.raises(KernelSyntaxError, match="Jacobi sweeps"):
            values(np.eye(2, dtype=np.float32), device=device)
        return
    for dtype in dtypes_of(device):
        for n in sizes_of(device):
            a = symmetric(n, dtype, n)
            w, v = decomposed(a, device=device)
            assert w.dtype == v.dtype == np.dtype(dtype) and w.shape == (n,) and v.shape == (n, n)
            check(a, w, v)
            only = values(a, device=device)
            np.testing.assert_allclose(only, w, rtol=0, atol=50 * float(np.finfo(dtype).eps) * max(n, 1) *
                                       max(float(np.abs(w).max(initial=0.0)), 1e-30))


def test_only_the_lower_triangle_is_read(device):
    if jacobi_refused(device, decomposed):
        return
    dtype = dtypes_of(device)[-1]
    a = symmetric(5, dtype, 9)
    a[np.triu_indices(5, 1)] = 99.0  # NumPy reads the lower triangle only
    w, v = decomposed(a, device=device)
    check(a, w, v)


def test_repeated_graded_and_zero_eigenvalues(device):
    if jacobi_refused(device, decomposed):
        return
    dtype = dtypes_of(device)[-1]
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    for spectrum in ([2.0, 2.0, 2.0, -1.0, -1.0, 5.0], [1.0, 1e-3, 1e-6, 1e-9, -1e-4, 0.0], [0.0] * 6,
                     [1e30, -1e30, 1.0, 0.0, 2e30, 3.0]):
        a = ((u * np.array(spectrum)) @ u.T).astype(dtype)
        a = ((a + a.T) / 2).astype(dtype)
        if dtype == "float32" and max(np.abs(spectrum)) > 1e20:
            continue
        w, v = decomposed(a, device=device)
        check(a, w, v)
    w, v = decomposed(np.eye(4, dtype=dtype), device=device)
    np.testing.assert_array_equal(w, np.ones(4))
    np.testing.assert_array_equal(v, np.eye(4))
    diagonal = np.diag(np.array([3.0, -1.0, 2.0, -1.0], dtype))
    w, v = decomposed(diagonal, device=device)  # nothing to rotate: the diagonal sorted, ties in its order
    np.testing.assert_array_equal(w, [-1.0, -1.0, 2.0, 3.0])
    np.testing.assert_array_equal(v, np.eye(4)[:, [1, 3, 2, 0]])


def test_integers_and_a_returned_pair():
    a = np.array([[2, 1, 0], [1, 3, 1], [0, 1, 4]])
    w, v = returned(a)
    assert w.dtype == v.dtype == np.float64
    check(a.astype(np.float64), w, v)


def test_nan_gives_nan_as_numpys_does(device):
    if jacobi_refused(device, decomposed):
        return
    dtype = dtypes_of(device)[-1]
    for bad in (np.nan, np.inf):
        a = np.eye(3, dtype=dtype)
        a[1, 0] = bad
        w, _ = decomposed(a, device=device)
        want_w, _ = np.linalg.eigh(a)
        assert np.isnan(w).any() and np.isnan(want_w).any()
        assert np.isnan(w[-1])  # NaN sorts last, as NumPy sorts it


def test_a_factorisation_inside_a_plan_loop(device):
    if jacobi_refused(device, decomposed):
        return
    dtype = dtypes_of(device)[-1]
    a = symmetric(5, dtype, 1)
    got, want = shifted(a, 3, device=device), shifted.__wrapped__(a, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 if dtype == "float32" else 1e-12)


def test_refusals_name_the_line():
    @svod.jit
    def upper(a):
        return np.linalg.eigvalsh(a, UPLO="U")

    with pytest.raises(KernelSyntaxError, match=r"test_linalg_eigen.py:\d+: np.linalg.eigvalsh takes UPLO='L'"):
        upper(np.eye(2))

    @svod.jit
    def rectangular(a):
        w, v = np.linalg.eigh(a)
        return w, v

    with pytest.raises(KernelSyntaxError, match="must be square, not 2x3"):
        rectangular(np.ones((2, 3)))

    @svod.jit
    def one_name(a):
        wv = np.linalg.eigh(a)
        return wv

    with pytest.raises(KernelSyntaxError, match=r"two names \(`w, v = ...`\)"):
        one_name(np.eye(2))
