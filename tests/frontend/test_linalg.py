"""``np.linalg.solve``, ``inv``, ``det``, ``slogdet`` and ``cholesky`` in ``@svod.jit`` functions against NumPy on
every device: sizes 0, 1, 2, 3, a prime, 31 and 64 (and one past a CPU's vector width), float32 and float64 (a
device without float64 refuses it), well and badly conditioned matrices (within a tolerance the condition number
scales), pivoting, singular matrices (``LinAlgError``, which is NumPy's too, after the run; a determinant of 0)
and matrices that are not positive definite; and what svod refuses at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.dtype import dtypes
from svod.errors import IndexOutOfBoundsError, KernelSyntaxError, LinAlgError, SvodError
from svod.frontend import linalg
from svod.frontend.linalg import PANEL_COLUMNS
from svod.frontend.oracle import as_python
from tests.frontend.linalg_cases import complex_types_of, dtypes_of, sizes_of


@svod.jit
def factored(a, b):
    x = np.linalg.solve(a, b)
    i = np.linalg.inv(a)
    d = np.linalg.det(a)
    sign, logdet = np.linalg.slogdet(a)
    return x, i, d, sign, logdet


@svod.jit
def solved(a, b):
    return np.linalg.solve(a, b)


@svod.jit
def inverted(a):
    return np.linalg.inv(a)


@svod.jit
def determinant(a):
    d = np.linalg.det(a)
    return d


@svod.jit
def lower(a):
    return np.linalg.cholesky(a)


@svod.jit
def gram_factor(x):
    return np.linalg.cholesky(x.T @ x + np.eye(x.shape[1], dtype=x.dtype))  # an expression: an array first


@svod.jit
def refined(a, b, turns):
    x = np.zeros_like(b)
    for _ in range(turns):  # a loop around phases: the solve is a step of the plan loop
        r = b - a @ x
        dx = np.linalg.solve(a, r)
        x += dx
    return x


def matrix(n: int, dtype: str, seed: int) -> np.ndarray:
    """A random matrix whose first row is small (so that pivoting must swap rows), scaled so that its
    determinant stays within float32's range."""
    a = np.random.default_rng(seed).standard_normal((n, n)) / np.sqrt(max(n, 1))
    if n:
        a[0] *= 1e-3
    return a.astype(dtype)


def close(got: np.ndarray, want: np.ndarray, a: np.ndarray) -> None:
    """Within the dtype's rounding times the condition number (of a well scaled result: backward stable
    factorisations on both sides)."""
    eps = float(np.finfo(a.dtype).eps)
    condition = float(np.linalg.cond(a)) if a.size else 1.0
    scale = float(np.abs(want).max(initial=1.0))
    np.testing.assert_allclose(got, want, rtol=0, atol=50 * eps * condition * max(a.shape[0], 1) * scale)


def test_solve_inv_and_determinants_agree_with_numpy(device):
    for dtype in dtypes_of(device):
        for n in sizes_of(device):
            a = matrix(n, dtype, n)
            b = np.random.default_rng(n + 100).standard_normal((n, 2)).astype(dtype)
            x, i, d, sign, logdet = factored(a, b, device=device)
            assert x.dtype == i.dtype == np.dtype(dtype) and x.shape == (n, 2) and i.shape == (n, n)
            close(x, np.linalg.solve(a, b), a)
            close(i, np.linalg.inv(a), a)
            want_sign, want_log = np.linalg.slogdet(a)
            assert sign == want_sign
            np.testing.assert_allclose(logdet, want_log, rtol=0, atol=100 * np.finfo(dtype).eps * max(n, 1))
            np.testing.assert_allclose(d, np.linalg.det(a), rtol=100 * np.finfo(dtype).eps * max(n, 1))


def test_solve_of_one_right_hand_side_and_of_integers(device):
    for n in (1, 5):
        a = np.arange(n * n).reshape(n, n) % 7 + 3 * np.eye(n, dtype=int)  # integers: float64 as in NumPy
        b = np.arange(n, dtype=np.float32)
        if dtypes.float64 not in device.caps.element_dtypes:
            with pytest.raises(KernelSyntaxError, match="no float64"):
                solved(a, b, device=device)
            continue
        x = solved(a, b, device=device)
        assert x.dtype == np.float64 and x.shape == (n,)
        close(x, np.linalg.solve(a, b), a.astype(np.float64))


def test_cholesky_agrees_with_numpy(device):
    for dtype in dtypes_of(device):
        for n in sizes_of(device):
            x = np.random.default_rng(n).standard_normal((n + 2, n)).astype(dtype)
            spd = (x.T @ x + np.eye(n, dtype=dtype)).astype(dtype)
            spd[np.triu_indices(n, 1)] = 99.0  # NumPy reads the lower triangle only
            got = lower(spd, device=device)
            assert got.dtype == np.dtype(dtype) and got.shape == (n, n)
            close(got, np.linalg.cholesky(spd), np.tril(spd) + np.tril(spd, -1).T)
            gram = x.T @ x + np.eye(n, dtype=dtype)
            close(gram_factor(x, device=device), np.linalg.cholesky(gram), gram)


@svod.jit
def cholesky_update(a):
    a[:] = np.linalg.cholesky(a) + np.triu(a, k=1)  # npbench's cholesky2, as its numba version writes it


@svod.jit
def in_expressions(a, b):
    x = np.linalg.solve(np.linalg.inv(a), b) * 2.0
    x += np.linalg.inv(a) @ b
    return x, 2 * np.linalg.det(a)


def test_calls_inside_expressions_agree_with_numpy(device):
    """A np.linalg call inside an expression is computed first, into an array of its own, as Python calls it
    before the expression reads it; one inside another's arguments before that one."""
    for dtype in dtypes_of(device):
        for n in sizes_of(device):
            x = np.random.default_rng(n).standard_normal((n + 2, n)).astype(dtype)
            spd = (x.T @ x + np.eye(n, dtype=dtype)).astype(dtype)
            got = spd.copy()
            cholesky_update(got, device=device)
            close(got, np.linalg.cholesky(spd) + np.triu(spd, k=1), spd)
            a = matrix(n, dtype, n)
            b = np.random.default_rng(n + 1).standard_normal((n, 2)).astype(dtype)
            solved_twice, d = in_expressions(a, b, device=device)
            assert solved_twice.dtype == np.dtype(dtype) and solved_twice.shape == (n, 2)
            close(solved_twice, np.linalg.solve(np.linalg.inv(a), b) * 2.0 + np.linalg.inv(a) @ b, a)
            np.testing.assert_allclose(d, 2 * np.linalg.det(a), rtol=100 * np.finfo(dtype).eps * max(n, 1))


def test_a_singular_matrix_raises_numpys_error_and_has_determinant_zero(device):
    dtype = dtypes_of(device)[-1]
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], dtype)
    for call in (lambda: inverted(singular, device=device),
                 lambda: solved(singular, np.ones(3, dtype), device=device)):
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix") as raised:
            call()
        assert isinstance(raised.value, SvodError) and isinstance(raised.value, LinAlgError)
        assert raised.value.stage == "execute" and raised.value.value == 3  # LAPACK's info: the third column
        assert "test_linalg.py" in str(raised.value) and "np.linalg." in str(raised.value)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.inv(singular)  # NumPy raises too
    assert determinant(singular, device=device) == 0.0 == np.linalg.det(singular)
    assert determinant(np.zeros((2, 2), dtype), device=device) == 0.0
    assert determinant(2 * np.eye(2, dtype=dtype), device=device) == 4.0  # each run's factorisation its own
    np.testing.assert_allclose(inverted(np.eye(3, dtype=dtype), device=device), np.eye(3))  # then runs again


def test_a_factorisation_of_several_panels_agrees_with_numpy_and_finds_a_later_zero_pivot(device, monkeypatch):
    """Past ``PANEL_COLUMNS`` columns the factorisation runs panel by panel (a GPU, and a device that stops a work
    item's loops, take panels of one column): a last panel of a few columns, pivots swapped from rows below a
    panel, and a zero column in a later panel, which is LAPACK's info (its column, from 1). Each element's
    operations are those of the factorisation column by column, in its order: panels of one column give the
    same bits."""
    dtype = dtypes_of(device)[-1]
    n = PANEL_COLUMNS + 1 if device.name == "PYTHON" else 2 * PANEL_COLUMNS + 6
    a = matrix(n, dtype, n)
    b = np.random.default_rng(n).standard_normal((n, 5)).astype(dtype)
    x, i, d, sign, logdet = factored(a, b, device=device)
    close(x, np.linalg.solve(a, b), a)
    close(i, np.linalg.inv(a), a)
    assert sign == np.linalg.slogdet(a)[0]
    np.testing.assert_allclose(logdet, np.linalg.slogdet(a)[1], rtol=0, atol=100 * np.finfo(dtype).eps * n)
    np.testing.assert_allclose(d, np.linalg.det(a), rtol=100 * np.finfo(dtype).eps * n)
    zero = n - 3
    singular = matrix(n, dtype, 7)
    singular[:, zero] = 0
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix") as raised:
        solved(singular, b, device=device)
    assert raised.value.value == zero + 1
    assert determinant(singular, device=device) == 0.0
    monkeypatch.setattr(linalg, "PANEL_COLUMNS", 1)
    by_columns = svod.jit(factored.fn)(a, b, device=device)  # (a function of its own: a plan of its own)
    for got, want in zip((x, i, d, sign, logdet), by_columns, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_nearly_singular_matrix_gives_numpys_large_numbers(device):
    dtype = dtypes_of(device)[-1]
    eps = float(np.finfo(dtype).eps)
    a = np.array([[1.0, 1.0], [1.0, 1.0 + 64 * eps]], dtype)
    got, want = inverted(a, device=device), np.linalg.inv(a)
    np.testing.assert_allclose(got, want, rtol=1e-3)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_raises(device):
    dtype = dtypes_of(device)[-1]
    for a in (-np.eye(2, dtype=dtype), np.array([[1.0, 2.0], [2.0, 1.0]], dtype), np.zeros((1, 1), dtype)):
        with pytest.raises(np.linalg.LinAlgError, match="Matrix is not positive definite") as raised:
            lower(a, device=device)
        assert isinstance(raised.value, SvodError) and raised.value.value in (1, 2)
        with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
            np.linalg.cholesky(a)


def test_a_cholesky_factorisation_of_several_panels_agrees_with_numpy(device):
    """Past ``PANEL_COLUMNS`` columns the Cholesky factorisation runs panel by panel on a CPU (what the columns
    left of a panel take from it a matmul): a last panel of a few columns, and a leading minor that is not
    positive in a later panel, which is potrf's info (its order)."""
    n = PANEL_COLUMNS + 1 if device.name == "PYTHON" else 2 * PANEL_COLUMNS + 6
    x = np.random.default_rng(n).standard_normal((n, n))
    for dtype in dtypes_of(device):
        a = (x @ x.T / n + np.eye(n)).astype(dtype)
        got = lower(a, device=device)
        want = np.linalg.cholesky(a)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=0, atol=100 * np.finfo(dtype).eps * n * np.abs(want).max())
        assert np.all(np.triu(got, 1) == 0)
    failing = a.copy()
    failing[n - 2, n - 2] = -1
    with pytest.raises(np.linalg.LinAlgError, match="Matrix is not positive definite") as raised:
        lower(failing, device=device)
    assert raised.value.value == n - 1


def test_empty_matrices_follow_numpy(device):
    dtype = dtypes_of(device)[-1]
    a = np.zeros((0, 0), dtype)
    assert inverted(a, device=device).shape == (0, 0)
    assert solved(a, np.zeros(0, dtype), device=device).shape == (0,)
    assert determinant(a, device=device) == 1.0 == np.linalg.det(a)
    assert lower(a, device=device).shape == (0, 0)


def test_a_solve_inside_a_plan_loop(device):
    dtype = dtypes_of(device)[-1]
    a = matrix(7, dtype, 1) + 4 * np.eye(7, dtype=dtype)
    b = np.arange(7, dtype=dtype)
    close(refined(a, b, 3, device=device), np.linalg.solve(a, b), a)


def test_a_failure_at_any_turn_raises():
    @svod.jit
    def each(stack):
        total = np.zeros((2, 2))
        for t in range(stack.shape[0]):
            m = stack[t] * 1.0
            i = np.linalg.inv(m)
            total += i
        return total

    fine = np.stack([np.eye(2), 2 * np.eye(2), np.eye(2)])
    np.testing.assert_allclose(each(fine), 2.5 * np.eye(2))
    broken = fine.copy()
    broken[1] = 0.0  # the middle turn's matrix is singular, the last one is not
    with pytest.raises(LinAlgError, match="Singular matrix"):
        each(broken)


@svod.jit
def log_determinant(a):
    return np.linalg.slogdet(a)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7])
def test_a_returned_slogdet_is_numpys_pair(device, n):
    """``return np.linalg.slogdet(a)`` returns NumPy's pair (sign, logabsdet), as a tuple (NumPy's is a named
    one): of a matrix whose determinant is negative, positive, and of a singular one (0, -inf)."""
    for dtype in dtypes_of(device):
        swapped = matrix(n, dtype, 5)[::-1].copy()  # a row swap flips the sign
        singular = np.zeros((n, n), dtype)
        for a in (matrix(n, dtype, 5), swapped, singular):
            got, want = log_determinant(a, device=device), log_determinant.__wrapped__(a)
            assert isinstance(got, tuple) and len(got) == 2
            assert got[0] == want[0]
            if n and not a.any():
                assert got[1] == want[1] == -np.inf
            else:
                close(np.array(got[1]), np.array(want[1]), a)


def test_a_call_stopped_by_an_access_out_of_bounds_leaves_the_next_call_sound(device):
    """A call whose solve fails and whose later gather then reads out of bounds raises; the next call, of a
    sound matrix and indices, returns NumPy's values: the failed call's flag is not left standing (the reference
    raised the gather's error before the call read its flags, and the next call raised a stale
    ``LinAlgError``)."""
    @svod.jit
    def gathered(a, b, idx):
        x = np.linalg.solve(a, b)
        return x[idx]

    dtype = dtypes_of(device)[-1]
    a = np.array([[2.0, 1.0], [1.0, 3.0]], dtype)
    b = np.array([1.0, 2.0], dtype)
    singular = np.array([[1.0, 2.0], [2.0, 4.0]], dtype)
    for _ in range(2):
        with pytest.raises(IndexOutOfBoundsError):
            gathered(singular, b, np.array([0, 5], np.int32), device=device)
        for idx in (np.array([1, 0], np.int32), np.array([-1, 1, 1], np.int32)):
            close(gathered(a, b, idx, device=device), np.linalg.solve(a, b)[idx], a)


def test_refusals_name_the_line():
    @svod.jit
    def rectangular(a):
        return np.linalg.inv(a)

    with pytest.raises(KernelSyntaxError, match=r"test_linalg.py:\d+: np.linalg.inv: Last 2 dimensions of the "
                                                r"array must be square, not 2x3"):
        rectangular(np.ones((2, 3)))

    @svod.jit
    def stacked(a):
        return np.linalg.det(a)

    with pytest.raises(KernelSyntaxError, match="stack of matrices"):
        stacked(np.ones((2, 3, 3)))

    @svod.jit
    def vector(a):
        return np.linalg.inv(a)

    with pytest.raises(KernelSyntaxError, match="1-dimensional array given"):
        vector(np.ones(3))

    @svod.jit
    def mismatched(a, b):
        return np.linalg.solve(a, b)

    with pytest.raises(KernelSyntaxError, match=r"right-hand sides of shape \(3,\) or \(3, k\), not \(4,\)"):
        mismatched(np.eye(3), np.ones(4))

    @svod.jit
    def halves(a):
        return np.linalg.inv(a)

    with pytest.raises(KernelSyntaxError, match="float16 is unsupported in linalg"):
        halves(np.eye(2, dtype=np.float16))

    @svod.jit
    def keyword(a):
        d = np.linalg.slogdet(a)
        return d

    with pytest.raises(KernelSyntaxError, match=r"two names \(`sign, logdet = ...`\)"):
        keyword(np.eye(2))

    @svod.jit
    def nested(a):
        return np.linalg.slogdet(a), a

    with pytest.raises(KernelSyntaxError, match=r"test_linalg.py:\d+: np.linalg.slogdet's result is assigned to two "
                                                r"names"):
        nested(np.eye(2))

    @svod.jit
    def maybe(a, b):
        return np.linalg.det(a) if b.shape[0] else 0.0  # a call Python may not make stays in its expression

    with pytest.raises(KernelSyntaxError, match=r"test_linalg.py:\d+: np.linalg.det is a statement of its own"):
        maybe(np.eye(2), np.ones(1))


def test_a_device_without_float64_refuses_it():
    webgpu = [d for d in ("WEBGPU:0", "WEBGPU:1") if _opens(d)]
    if not webgpu:
        return  # (the refusal is the device's: no float64 device here to refuse)
    device = svod.get_device(webgpu[0])
    with pytest.raises(KernelSyntaxError, match="holds no float64"):
        inverted(np.eye(2), device=device)
    np.testing.assert_allclose(inverted(np.eye(2, dtype=np.float32) * 2, device=device), np.eye(2) / 2)


def _opens(name: str) -> bool:
    try:
        return dtypes.float64 not in svod.get_device(name).caps.element_dtypes
    except SvodError:
        return False


@svod.jit
def solved_into(a, b):
    x = np.linalg.solve(a, b)
    return x


def test_a_plan_taken_out_or_saved_raises_as_the_call_does(device, tmp_path):
    """``Jit.plan`` and its bundle keep the factorisation's failure flag: a singular matrix raises
    ``LinAlgError`` on every replay (bound arrays, the plan's own buffers, a loaded bundle), a healthy one after
    it gives NumPy's values (the flag cleared)."""
    dtype = dtypes_of(device)[-1]
    a = np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]], dtype)
    b = np.array([1.0, 2.0, 3.0], dtype)
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], dtype)
    plan = solved_into.plan(a, b, device=device)
    plan.save(tmp_path / "solved.svodplan")
    for replay in (plan, svod.load_plan(tmp_path / "solved.svodplan", device=device)):
        x = replay.buffers[replay.buffer_names["x"]]
        for _ in range(2):  # a healthy run after a failed one
            replay.execute(buffers={"a": a, "b": b})
            close(x.numpy(), np.linalg.solve(a, b), a)
            with pytest.raises(LinAlgError, match="Singular matrix") as raised:
                replay.execute(buffers={"a": singular, "b": b})
            assert raised.value.value == 3 and "test_linalg.py" in str(raised.value)
        replay.buffers[replay.buffer_names["a"]].copyin(singular)  # the plan's own buffers, no binding
        replay.buffers[replay.buffer_names["b"]].copyin(b)
        with pytest.raises(LinAlgError, match="Singular matrix"):
            replay.execute()
        replay.buffers[replay.buffer_names["a"]].copyin(a)
        replay.execute()
        close(x.numpy(), np.linalg.solve(a, b), a)


def test_a_loop_variable_named_as_the_kernels_scalars(device):
    """A loop's variable ``k``, ``j`` or ``n`` around a factorisation is the user's, not the column the
    factorisation's kernels number (a plan binds variables by name)."""
    dtype = dtypes_of(device)[-1]

    @svod.jit
    def each(a, turns):
        total = np.zeros(a.shape, a.dtype)
        for k in range(turns):
            for j in range(1):
                for n in range(1):
                    x = np.linalg.solve(a, a[1])
                    c = np.linalg.cholesky(a @ a.T)
                    d = np.linalg.det(a)
                    total += c + d
                    total[0] += x + k + j + n
        return total

    def plain(a, turns):
        total = np.zeros(a.shape, a.dtype)
        for k in range(turns):
            total += np.linalg.cholesky(a @ a.T) + np.linalg.det(a)
            total[0] += np.linalg.solve(a, a[1]) + k
        return total

    a = matrix(3, dtype, 2) + 2 * np.eye(3, dtype=dtype)
    close(each(a, 2, device=device), plain(a, 2), a @ a.T)


def test_a_failed_run_keeps_the_writes_before_the_call():
    """NumPy raises at the call, after the function's writes before it: an argument svod runs on a contiguous
    copy of (a transposed view) is written back before ``LinAlgError`` leaves the call."""
    @svod.jit
    def zeroed_then_solved(a, b):
        a[0, :] = 0.0
        x = np.linalg.solve(a, b)
        return x

    a = np.arange(1.0, 10.0).reshape(3, 3).T  # not C-contiguous
    want = a.copy()
    want[0, :] = 0.0
    with pytest.raises(LinAlgError, match="Singular matrix"):
        zeroed_then_solved(a, np.ones(3))
    np.testing.assert_array_equal(a, want)


def test_complex_solve_and_inv_agree_with_numpy(device):
    """Complex matrices factor as real ones do, the pivot the largest |re| + |im| (LAPACK's izamax); a real
    matrix with complex right-hand sides, or the other way, computes in NumPy's complex type."""
    for dtype in complex_types_of(device):
        for n in sizes_of(device)[:5]:  # (each size compiles kernels of its own: 64 adds time, not cases)
            a = (matrix(n, "float64", n) + 1j * matrix(n, "float64", n + 50)).astype(dtype)
            b = (np.random.default_rng(n).standard_normal((n, 3)) * (1 - 2j)).astype(dtype)
            x, i = solved(a, b, device=device), inverted(a, device=device)
            assert x.dtype == i.dtype == np.dtype(dtype) and x.shape == (n, 3) and i.shape == (n, n)
            close(x, np.linalg.solve(a, b), a)
            close(i, np.linalg.inv(a), a)
        real = a.real.copy()  # (of the last size)
        mixed = solved(real, b, device=device)
        assert mixed.dtype == np.linalg.solve(real, b).dtype
        close(mixed, np.linalg.solve(real, b), real)
        close(solved(a, b.real.copy(), device=device), np.linalg.solve(a, b.real), a)


def test_a_singular_complex_matrix_raises_numpys_error(device):
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]) * (1 + 1j)
    singular = singular.astype(complex_types_of(device)[-1])
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix") as raised:
        inverted(singular, device=device)
    assert raised.value.value == 3  # LAPACK's info: the third column
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.inv(singular)  # NumPy raises too
    with pytest.raises(KernelSyntaxError, match="det of real matrices only, not of complex"):
        determinant(singular, device=device)


@svod.jit
def shifted_solutions(a, b, shifts):
    total = np.zeros(b.shape, dtype=b.dtype)
    for i in svod.prange(len(shifts)):  # its body holds a solve: its turns run in order, as range's
        z = shifts[i]
        m = np.zeros(a.shape, dtype=b.dtype)
        for j in svod.prange(a.shape[0]):
            m[j, :] = a[j, :]
            m[j, j] += z
        x = np.linalg.solve(m, b)
        if abs(z) < 1.0:
            x = -x
        total += z * x
    return total


@svod.jit
def sorted_rows(a):
    out = np.zeros_like(a)
    for i in svod.prange(a.shape[0]):  # a sort is a plan step too: the rows are sorted one after another
        s = np.sort(a[i])
        out[i] = s
    return out


def test_a_prange_loop_holding_plan_steps_runs_its_turns_in_order(device):
    """numba runs such a loop's turns at once, its array ``+=`` a reduction; svod runs them as Python's
    ``range`` does (each step over every thread), so the sums are Python's."""
    dtype = complex_types_of(device)[-1]
    for n, turns in [(1, 1), (3, 4), (7, 5), (4, 0)]:
        rng = np.random.default_rng(n + turns)
        a = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)) + 4 * np.eye(n)).astype(dtype)
        b = (rng.standard_normal((n, 2)) + 1j).astype(dtype)
        shifts = (rng.standard_normal(turns) + 0.5j * rng.standard_normal(turns)).astype(dtype)
        want = as_python(shifted_solutions)(a, b, shifts)
        np.testing.assert_allclose(shifted_solutions(a, b, shifts, device=device), want, rtol=1e-4, atol=1e-4)
    for shape in [(1, 1), (5, 7), (3, 0)]:
        a = np.random.default_rng(shape[1]).standard_normal(shape).astype(dtypes_of(device)[-1])
        np.testing.assert_array_equal(sorted_rows(a, device=device), np.sort(a, axis=1))
