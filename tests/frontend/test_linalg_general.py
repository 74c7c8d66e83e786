"""``np.linalg.eig`` and ``eigvals`` of general real matrices in ``@svod.jit`` functions against NumPy on every
device: sizes 0, 1, 2, 7, 13 and 64, float32 and float64 (a device without float64 refuses it), integers
(float64); eigenvalues as NumPy's up to order (NumPy promises none), eigenpairs checked by ``a v = v w`` and
unit norms, vectors as NumPy's up to sign where the eigenvalues are apart; repeated eigenvalues and defective
(Jordan) blocks; complex eigenvalues, NaN and infinities raising ``LinAlgError``; a factorisation inside a plan
loop; and what svod refuses at the line. The results' dtype is the running NumPy's: real before NumPy 2.5,
complex from it (each imaginary part +0.0, each real part's sign kept)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import KernelSyntaxError, LinAlgError
from svod.frontend import linalg_general
from tests.frontend.linalg_cases import dtypes_of


@svod.jit
def decomposed(a):
    w, v = np.linalg.eig(a)
    return w, v


@svod.jit
def values(a):
    return np.linalg.eigvals(a)


@svod.jit
def shifted(a, turns):
    total = np.zeros(a.shape[0], a.dtype)
    for t in range(turns):  # a loop around phases: the factorisation is a step of the plan loop
        b = a + t * np.eye(a.shape[0], dtype=a.dtype)
        w = np.linalg.eigvals(b).real  # (complex from NumPy 2.5, which a float total does not take)
        ordered = np.sort(w)
        total += ordered
    return total


def eig_dtype(dtype: np.dtype | str) -> np.dtype:
    """The dtype of NumPy's ``eig`` and ``eigvals`` of a real matrix of float type ``dtype`` whose eigenvalues are
    real: ``dtype`` before NumPy 2.5, its complex type from 2.5 (always complex)."""
    return np.linalg.eigvals(np.eye(1, dtype=dtype)).dtype


def real_parts(got: np.ndarray) -> np.ndarray:
    """``got``'s values as reals: itself where real; where complex, its real parts, each imaginary part checked
    to be +0.0 (NumPy 2.5's cast of a real result)."""
    if got.dtype.kind != "c":
        return got
    assert np.array_equal(got.imag, np.zeros_like(got.imag)) and not np.signbit(got.imag).any(), got
    return got.real


def eig(a: np.ndarray, device: Device | str = "CPU") -> tuple[np.ndarray, np.ndarray]:
    """svod's ``eig`` of ``a``, of NumPy's dtype, as reals (``real_parts``)."""
    w, v = decomposed(a, device=device)
    assert w.dtype == v.dtype == eig_dtype(np.float32 if a.dtype == np.float32 else np.float64)  # ints: float64
    return real_parts(w), real_parts(v)


def eigvals(a: np.ndarray, device: Device | str = "CPU") -> np.ndarray:
    """svod's ``eigvals`` of ``a`` (a float matrix), of NumPy's dtype, as reals (``real_parts``)."""
    w = values(a, device=device)
    assert w.dtype == eig_dtype(a.dtype)
    return real_parts(w)


def refused(device: Device) -> bool:
    """Whether ``device`` stops a work item's loops, and so refuses the QR steps at the line: checked here
    where it does."""
    if device.caps.max_loop_turns is None:
        return False
    for call in (decomposed, values):
        with pytest.raises(KernelSyntaxError, match=r"QR steps \(eig, eigvals\) .* stops them after \d+ turns"):
            call(np.eye(3, dtype="float32"), device=device)
    return True


def sizes_of(device: Device) -> tuple[int, ...]:
    if device.name == "CPU":
        return (0, 1, 2, 7, 13, 64)
    return (0, 1, 2, 7) if device.name == "PYTHON" else (0, 1, 2, 7, 13)


def real_spectrum(n: int, dtype: str, seed: int) -> np.ndarray:
    """A non-symmetric matrix of real eigenvalues at least 1 apart: an orthogonal similarity of a triangular one."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    t = np.triu(rng.standard_normal((n, n)), 1) * 0.3 + np.diag(rng.permutation(n) - n / 2)
    return (q @ t @ q.T).astype(dtype)


def check(a: np.ndarray, w: np.ndarray, v: np.ndarray, apart: bool = True) -> None:
    """``w`` is NumPy's up to order, ``a v = v w``, each column of ``v`` of unit norm, and (``apart``: the
    eigenvalues are) each column NumPy's up to sign."""
    n = a.shape[0]
    eps = float(np.finfo(a.dtype).eps)
    want_w, want_v = (real_parts(part) for part in np.linalg.eig(a))  # every eigenvalue is real, NumPy's too
    scale = max(float(np.abs(a).max(initial=0.0)), 1e-30)
    tol = 100 * eps * max(n, 1) * scale
    np.testing.assert_allclose(np.sort(w), np.sort(want_w), rtol=0, atol=tol)
    np.testing.assert_allclose(np.linalg.norm(v.astype(np.float64), axis=0), np.ones(n), rtol=0, atol=10 * eps * n)
    np.testing.assert_allclose(a.astype(np.float64) @ v, v * w, rtol=0, atol=tol)
    if apart:
        for k in range(n):
            match = int(np.argmin(np.abs(want_w - w[k])))
            assert abs(abs(float(v[:, k].astype(np.float64) @ want_v[:, match])) - 1) < 1e3 * eps * max(n, 1)


def test_eigenvalues_and_eigenvectors_agree_with_numpy(device):
    if refused(device):
        return
    for dtype in dtypes_of(device):
        for n in sizes_of(device):
            a = real_spectrum(n, dtype, n)
            w, v = eig(a, device)
            assert w.shape == (n,) and v.shape == (n, n)
            check(a, w, v)
            np.testing.assert_array_equal(eigvals(a, device), w)  # the same steps, without the vectors


def test_a_triangular_matrix_keeps_its_diagonal_order(device):
    if refused(device):
        return
    dtype = dtypes_of(device)[-1]
    a = np.triu(np.arange(1.0, 26.0).reshape(5, 5)).astype(dtype) * np.array([1, -1, 1, -1, 1], dtype)
    w, v = eig(a, device)
    np.testing.assert_array_equal(w, np.diag(a))  # as NumPy's (its Schur form is the matrix itself)
    np.testing.assert_array_equal(w, real_parts(np.linalg.eigvals(a)))
    check(a, w, v)


def test_repeated_eigenvalues_and_defective_blocks(device):
    if refused(device):
        return
    dtype = dtypes_of(device)[-1]
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    a = ((q * np.array([2.0, 2.0, 2.0, -1.0, -1.0, 5.0])) @ q.T).astype(dtype)
    w, v = eig(a, device)
    check(a, w, v, apart=False)
    assert np.linalg.matrix_rank(v.astype(np.float64), tol=1e-3) == 6  # a diagonalisable matrix: a basis
    for n in (2, 13) if device.name != "PYTHON" else (2, 5):
        jordan = (np.eye(n, k=1) + 3 * np.eye(n)).astype(dtype)  # one eigenvector, e_0
        w, v = eig(jordan, device)
        np.testing.assert_array_equal(w, np.full(n, 3.0))
        assert np.isfinite(v).all()
        np.testing.assert_allclose(np.abs(v[0]), np.ones(n), rtol=0, atol=1e-3)  # each nearly e_0, as NumPy's
        np.testing.assert_allclose(jordan.astype(np.float64) @ v, 3 * v, rtol=0, atol=1e-3)
    for a in (np.zeros((3, 3), dtype), np.full((3, 3), -0.0, dtype), np.eye(4, dtype=dtype)):
        w, v = eig(a, device)  # nothing to reduce: the diagonal, the identity's columns
        np.testing.assert_array_equal(w, np.diag(a))
        assert np.array_equal(np.signbit(w), np.signbit(np.diag(a)))  # -0.0 kept, in a complex result too
        np.testing.assert_array_equal(v, np.eye(a.shape[0]))


def test_complex_eigenvalues_raise(device):
    if refused(device):
        return
    dtype = dtypes_of(device)[-1]
    rotation = np.array([[0.0, -1.0], [1.0, 0.0]], dtype)
    cycle = np.eye(4, dtype=dtype)[[1, 2, 3, 0]]  # eigenvalues 1, -1, i, -i
    for a in (rotation, cycle, np.random.default_rng(7).standard_normal((7, 7)).astype(dtype)):
        assert np.linalg.eigvals(a).dtype.kind == "c"
        for call in (decomposed, values):
            with pytest.raises(LinAlgError, match=r"np.linalg.eig(vals)?: .*complex eigenvalues .*\(failure 2\)"):
                call(a, device=device)
    w = eigvals(np.diag(np.array([1.0, 2.0], dtype)), device)  # the flag cleared: the next run returns
    np.testing.assert_array_equal(w, [1.0, 2.0])


def test_non_finite_elements_raise_as_numpys_do(device):
    if refused(device):
        return
    dtype = dtypes_of(device)[-1]
    for bad in (np.nan, np.inf, -np.inf):
        a = np.eye(3, dtype=dtype)
        a[2, 0] = bad
        with pytest.raises(np.linalg.LinAlgError, match="infs or NaNs"):
            np.linalg.eig(a)
        for call in (decomposed, values):
            with pytest.raises(np.linalg.LinAlgError, match=r"infs or NaNs .*\(failure 1\)"):
                call(a, device=device)


def test_integers_and_a_single_element():
    a = np.array([[2, 1, 0], [1, 3, 1], [0, 0, 4]])  # eigenvalues 4 and (5 ± sqrt 5) / 2
    w, v = eig(a)  # of float64's dtype
    check(a.astype(np.float64), w, v)
    w, v = eig(np.array([[-0.5]]))
    np.testing.assert_array_equal(w, [-0.5])
    np.testing.assert_array_equal(v, [[1.0]])


def test_a_factorisation_inside_a_plan_loop(device):
    if refused(device):
        return
    dtype = dtypes_of(device)[-1]
    a = real_spectrum(5, dtype, 1)
    got, want = shifted(a, 3, device=device), shifted.__wrapped__(a, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 if dtype == "float32" else 1e-12)


def test_refusals_name_the_line():
    @svod.jit
    def rectangular(a):
        return np.linalg.eigvals(a)

    with pytest.raises(KernelSyntaxError, match=r"test_linalg_general.py:\d+: .*must be square, not 2x3"):
        rectangular(np.ones((2, 3)))
    with pytest.raises(KernelSyntaxError, match=r"eigvals of real matrices only .* not of complex128"):
        rectangular(np.eye(2) + 0j)
    with pytest.raises(KernelSyntaxError, match="stack of matrices"):
        rectangular(np.ones((2, 2, 2)))

    @svod.jit
    def one_name(a):
        wv = np.linalg.eig(a)
        return wv

    with pytest.raises(KernelSyntaxError, match=r"two names \(`w, v = ...`\)"):
        one_name(np.eye(2))


def test_huge_and_tiny_magnitudes_are_scaled_not_refused(device):
    if refused(device):
        return
    for dtype in dtypes_of(device):
        info = np.finfo(dtype)
        spectrum = real_spectrum(6, "float64", 5)
        # the largest element near the overflow threshold, near the smallest normal, and subnormal: squares of
        # such elements overflow or vanish, which NumPy's geev avoids by scaling the matrix first
        for factor in (float(info.max) / 16, float(info.tiny) * 4, float(info.smallest_subnormal) * 2 ** 20):
            a = (spectrum / np.abs(spectrum).max() * factor).astype(dtype)
            tol = 1e3 * max(float(info.eps), float(info.smallest_subnormal) / factor)  # subnormal w: 20 bits
            w, v = eig(a, device)
            assert np.isfinite(w).all() and np.isfinite(v).all()
            want = np.sort(real_parts(np.linalg.eigvals(a)).astype(np.float64))
            np.testing.assert_allclose(np.sort(w.astype(np.float64)) / factor, want / factor, rtol=0, atol=tol)
            residual = (a.astype(np.float64) / factor) @ v - v * (w.astype(np.float64) / factor)
            assert np.abs(residual).max() < tol


def test_a_nearly_repeated_complex_pair_raises_as_numpys_is_complex(device):
    if refused(device):
        return
    for dtype in dtypes_of(device):
        eps, off = float(np.finfo(dtype).eps), float(np.finfo(dtype).tiny) ** 0.25  # off * off still normal
        # eigenvalues 1 ± sqrt(delta) i: the subdiagonal delta is below eps beside the diagonal, yet the pair is
        # complex (LAPACK's deflation test weighs it against its neighbour above the diagonal, as svod's must)
        for a in (np.array([[1.0, 1.0], [-eps / 100, 1.0]], dtype), np.array([[1.0, -off], [off, 1.0]], dtype),
                  np.array([[5.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, -eps / 100, 1.0]], dtype)):
            assert np.linalg.eigvals(a).dtype.kind == "c"
            with pytest.raises(LinAlgError, match=r"complex eigenvalues .*\(failure 2\)"):
                values(a, device=device)
        a = np.array([[1.0, 1.0], [eps / 100, 1.0]], dtype)  # 1 ± sqrt(delta): real, as NumPy's
        w = eigvals(a, device)
        np.testing.assert_allclose(np.sort(w), np.sort(real_parts(np.linalg.eigvals(a))), rtol=0, atol=10 * eps)


def test_a_badly_scaled_matrix_is_balanced_as_numpys_is(device):
    if refused(device):
        return
    for dtype in dtypes_of(device):
        rng = np.random.default_rng(11)
        q, _ = np.linalg.qr(rng.standard_normal((9, 9)))
        grading = np.diag(10.0 ** np.linspace(-4, 4, 9))  # a similarity: the eigenvalues stay 1..9
        a = (grading @ (q * np.arange(1.0, 10.0)) @ q.T @ np.linalg.inv(grading)).astype(dtype)
        want = np.sort(real_parts(np.linalg.eigvals(a)))
        w, v = eig(a, device)  # unbalanced, its QR steps err by eps times ||a|| (1e8): 1e-5, or raise
        eps = float(np.finfo(dtype).eps)
        np.testing.assert_allclose(np.sort(w), want, rtol=0, atol=1e3 * eps)
        np.testing.assert_allclose(np.sort(w), np.arange(1.0, 10.0), rtol=0, atol=1e3 * eps)
        np.testing.assert_allclose(np.linalg.norm(v.astype(np.float64), axis=0), np.ones(9), rtol=0, atol=100 * eps)


@svod.jit
def decomposed_as_numpy_25(a):
    w, v = np.linalg.eig(a)
    return w, v, np.linalg.eigvals(a)


def test_numpy_25s_complex_results_are_the_real_ones_with_positive_zero_imaginary_parts(device, monkeypatch):
    """Where the running NumPy makes ``eig``'s results complex (2.5, whichever NumPy runs here), svod's are the
    real ones converted, each real part as computed (a -0.0 too) and each imaginary part +0.0."""
    if refused(device):
        return
    dtype = dtypes_of(device)[-1]
    a = real_spectrum(5, dtype, 5)
    a[:, 2] = 0.0  # a zero eigenvalue
    real_w, real_v = decomposed(a, device=device)
    monkeypatch.setattr(linalg_general, "COMPLEX_RESULTS", True)
    w, v, only = decomposed_as_numpy_25(a, device=device)
    complex_ = np.result_type(dtype, np.complex64)
    assert w.dtype == v.dtype == only.dtype == complex_
    for got, real in ((w, np.real(real_w)), (v, np.real(real_v)), (only, np.real(real_w))):
        np.testing.assert_array_equal(got.real, real)
        assert np.array_equal(np.signbit(got.real), np.signbit(real)) and not np.signbit(got.imag).any()
        assert not got.imag.any()
