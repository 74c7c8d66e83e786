"""The adjoint of a matrix product as matrix products: ``@`` in ``@svod.jit`` functions and matmul kernels, checked
against central differences of the plain-Python function (float64) and torch's autograd, on every device."""

from __future__ import annotations

import numpy as np
import pytest

try:
    import torch
except ImportError:  # without the bench extra central differences remain the oracle
    torch = None

import svod
from svod.frontend import adjoint_gemm
from svod.frontend.adjoint_gemm import GemmAdjoint, Product


@svod.jit
def two_by_two(x, W, b, v):
    return np.sum(np.tanh(x @ W + b) * v)


@svod.jit
def by_vector(A, u, v):
    return np.sum(np.tanh(A @ u) * v)


@svod.jit
def vector_by(u, B, v):
    return np.sum(np.sin(u @ B) * v)


@svod.jit
def dot(u, w):
    return np.tanh(u @ w)


@svod.jit
def twice(x, W, v):
    return np.sum(np.tanh(np.tanh(x @ W) @ W) * v)


@svod.jit
def chain(x, W1, b1, W2, b2):
    hidden = np.maximum(x @ W1 + b1, 0.0)
    out = np.tanh(np.dot(hidden, W2) + b2)
    return np.sum(out)


@svod.jit
def overwritten(x, W):
    h = x @ W
    W *= 2.0
    return np.sum(np.tanh(h) * (x @ W))


@svod.jit
def from_one(a, b, v):
    out = np.zeros((a.shape[0], b.shape[1]))
    for i in svod.prange(1, a.shape[0]):
        for j in svod.prange(b.shape[1]):
            s = np.float64(0.0)
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            out[i, j] = np.tanh(s)
    return np.sum(out * v)


def _torch_of(fn):
    spelled = {
        "two_by_two": lambda x, W, b, v: torch.sum(torch.tanh(x @ W + b) * v),
        "by_vector": lambda A, u, v: torch.sum(torch.tanh(A @ u) * v),
        "vector_by": lambda u, B, v: torch.sum(torch.sin(u @ B) * v),
        "dot": lambda u, w: torch.tanh(u @ w),
        "twice": lambda x, W, v: torch.sum(torch.tanh(torch.tanh(x @ W) @ W) * v),
        "chain": lambda x, W1, b1, W2, b2: torch.sum(torch.tanh(torch.relu(x @ W1 + b1) @ W2 + b2)),
    }
    return spelled[fn.name]


def _arguments(fn, m: int, k: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"two_by_two": [(m, k), (k, n), (n,), (m, n)], "by_vector": [(m, k), (k,), (m,)],
              "vector_by": [(k,), (k, n), (n,)], "dot": [(k,), (k,)], "twice": [(m, k), (k, k), (m, k)],
              "chain": [(m, k), (k, n), (n,), (n, 3), (3,)], "overwritten": [(m, k), (k, n)],
              "from_one": [(m, k), (k, n), (m, n)]}[fn.name]
    return [rng.standard_normal(shape) for shape in shapes]


def _plain(fn, args) -> float:
    return float(np.asarray(fn.fn(*[a.copy() for a in args])).reshape(-1)[0])


def _difference(fn, args, position, direction, h=1e-6) -> float:
    def moved(sign):
        return [a + sign * h * direction if k == position else a for k, a in enumerate(args)]
    return (_plain(fn, moved(1.0)) - _plain(fn, moved(-1.0))) / (2 * h)


def _check_differences(fn, args, grads, seed) -> None:
    rng = np.random.default_rng(seed)
    for position, grad in enumerate(grads):
        assert grad.shape == args[position].shape and grad.dtype == np.float64
        direction = rng.standard_normal(grad.shape)
        assert float(np.sum(grad * direction)) == pytest.approx(_difference(fn, args, position, direction),
                                                                rel=1e-6, abs=1e-9)


SIZES = [(1, 1, 1), (1, 7, 1), (7, 1, 5), (3, 13, 11), (17, 5, 2)]
"""``m``, ``k``, ``n``: sizes 1 and primes."""


@pytest.mark.parametrize(("m", "k", "n"), SIZES)
@pytest.mark.parametrize("fn", [two_by_two, by_vector, vector_by, dot, twice, chain], ids=lambda f: f.name)
def test_grad_of_matmuls_agrees_with_differences_and_with_torch(fn, m, k, n):
    args = _arguments(fn, m, k, n, m * 100 + k * 10 + n)
    grads = svod.grad(fn, argnums=tuple(range(len(args))))(*args)
    _check_differences(fn, args, grads, m + k + n)
    if torch is not None:
        leaves = [torch.tensor(a, requires_grad=True) for a in args]
        _torch_of(fn)(*leaves).backward()
        for grad, leaf in zip(grads, leaves, strict=True):
            np.testing.assert_allclose(grad, leaf.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (3, 13, 11)])
def test_a_weight_overwritten_after_its_product_is_saved_before_the_overwrite(m, k, n):
    args = _arguments(overwritten, m, k, n, 7)
    kept = [a.copy() for a in args]
    grads = svod.grad(overwritten, argnums=(0, 1))(*args)
    np.testing.assert_array_equal(args[1], 2.0 * kept[1])  # (the call's own overwrite)
    if torch is not None:
        leaves = [torch.tensor(a, requires_grad=True) for a in kept]
        torch.sum(torch.tanh(leaves[0] @ leaves[1]) * (leaves[0] @ (2.0 * leaves[1]))).backward()
        for grad, leaf in zip(grads, leaves, strict=True):
            np.testing.assert_allclose(grad, leaf.grad.numpy(), rtol=1e-10, atol=1e-12)
    _check_differences(overwritten, kept, grads, 3)


def test_an_empty_sum_gives_zero_gradients_of_its_shapes():
    x, W, b, v = _arguments(two_by_two, 3, 0, 2, 1)
    gx, gW, gb, gv = svod.grad(two_by_two, argnums=(0, 1, 2, 3))(x, W, b, v)
    assert gx.shape == (3, 0) and gW.shape == (0, 2)
    np.testing.assert_allclose(gb, np.sum((1.0 - np.tanh(b) ** 2) * v, axis=0), rtol=1e-12)
    np.testing.assert_allclose(gv, np.tanh(np.broadcast_to(b, (3, 2))), rtol=1e-12)


def test_a_products_adjoint_on_a_tape_is_matrix_products_without_the_unasked_input(monkeypatch):
    """Each ``@`` is a kernel of its own whose adjoint is a GemmAdjoint; ``svod.grad`` by the weights computes no
    adjoint for the input batch (no contraction of its shape), and asked for it, gives it right."""
    args = _arguments(chain, 13, 7, 5, 2)
    with svod.Tape() as tape:
        chain(*args)
    products = [r for r in tape._records if isinstance(r.adjoint, GemmAdjoint)]
    assert len(products) == 2 and all(Product.of(r.kernel) is not None for r in products)
    written: list[tuple[int, ...]] = []
    original = adjoint_gemm._kernel

    def counted(form):
        kernel = original(form)

        def call(out, *rest, device=None):
            if form[0] == "contract":
                written.append(out.shape)
            return kernel(out, *rest, device=device)
        return call

    monkeypatch.setattr(adjoint_gemm, "_kernel", counted)
    grads = svod.grad(chain, argnums=(1, 2, 3, 4))(*args)
    assert sorted(written) == [(5, 3), (7, 5), (13, 5)]  # dW2, dW1 and the hidden layer's; not the input's
    written.clear()
    full = svod.grad(chain, argnums=(0, 1, 2, 3, 4))(*args)
    assert sorted(written) == [(5, 3), (7, 5), (13, 5), (13, 7)]
    for grad, again in zip(grads, full[1:], strict=True):
        np.testing.assert_allclose(grad, again, rtol=1e-12)
    _check_differences(chain, args, full, 5)


@svod.kernel
def matmul(c, a, b):
    for i in svod.prange(a.shape[0]):
        for j in svod.prange(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            c[i, j] = s


@svod.kernel
def matvec(y, a, x):
    for i in svod.prange(a.shape[0]):
        s = 0.0
        for k in range(a.shape[1]):
            s += a[i, k] * x[k]
        y[i] = s


@svod.kernel
def corner(c, a, b):
    for i in svod.prange(a.shape[0] - 1):
        for j in svod.prange(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            c[i, j] = s


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (5, 3, 7), (13, 17, 2)])
def test_a_matmul_kernels_vjp_is_the_products_numpy_gives_on_each_device(device, m, k, n):
    f = np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32
    tolerance = 1e-12 if f == np.float64 else 1e-4
    rng = np.random.default_rng(m * k * n)
    a, b, g = (rng.standard_normal(s).astype(f) for s in ((m, k), (k, n), (m, n)))
    (c,), pullback = svod.vjp(matmul, np.zeros((m, n), f), a, b, device=device)
    np.testing.assert_allclose(c, a @ b, rtol=tolerance, atol=tolerance)
    dc, da, db = pullback(g)
    np.testing.assert_allclose(da, g @ b.T, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(db, a.T @ g, rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(dc, np.zeros((m, n), f))
    x, gy = rng.standard_normal(k).astype(f), rng.standard_normal(m).astype(f)
    (y,), pullback = svod.vjp(matvec, np.zeros(m, f), a, x, device=device)
    np.testing.assert_allclose(y, a @ x, rtol=tolerance, atol=tolerance)
    _, da, dx = pullback(gy)
    np.testing.assert_allclose(da, np.outer(gy, x), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(dx, a.T @ gy, rtol=tolerance, atol=tolerance)


def test_a_matmul_kernel_that_covers_part_of_its_arrays_takes_the_general_adjoint():
    rng = np.random.default_rng(4)
    a, b, g = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    with svod.Tape() as tape:
        c = np.full((5, 4), 7.0)
        corner(c, a, b)
    assert not isinstance(tape._records[0].adjoint, GemmAdjoint)
    tape.backward(grads=[(c, g)])
    np.testing.assert_allclose(tape.grad(a)[:4], g[:4] @ b.T, rtol=1e-12)
    np.testing.assert_array_equal(tape.grad(a)[4], np.zeros(3))
    np.testing.assert_allclose(tape.grad(b), a[:4].T @ g[:4], rtol=1e-12)


def test_one_array_as_both_factors_adds_both_adjoints():
    rng = np.random.default_rng(6)
    a, g = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    with svod.Tape() as tape:
        c = np.zeros((4, 4))
        matmul(c, a, a)
    assert isinstance(tape._records[0].adjoint, GemmAdjoint)
    tape.backward(grads=[(c, g)])
    np.testing.assert_allclose(tape.grad(a), g @ a.T + a.T @ g, rtol=1e-12)


def test_a_product_read_again_after_a_second_call_accumulates_into_its_adjoint():
    rng = np.random.default_rng(8)
    a, b, g1, g2 = (rng.standard_normal(s) for s in ((3, 5), (5, 2), (3, 2), (3, 2)))
    with svod.Tape() as tape:
        c1, c2 = np.zeros((3, 2)), np.zeros((3, 2))
        matmul(c1, a, b)
        matmul(c2, a, b)
    tape.backward(grads=[(c1, g1), (c2, g2)])
    np.testing.assert_allclose(tape.grad(a), (g1 + g2) @ b.T, rtol=1e-12)
    np.testing.assert_allclose(tape.grad(b), a.T @ (g1 + g2), rtol=1e-12)


def test_a_jit_functions_products_differentiate_on_each_device(device):
    pytest.importorskip("torch", reason="torch.autograd is this check's only oracle; torch comes with the bench extra")
    f = np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32
    tolerance = 1e-10 if f == np.float64 else 1e-4
    args = [a.astype(f) for a in _arguments(chain, 5, 3, 7, 9)]
    with svod.Tape() as tape:
        loss = chain(*args, device=device)
    tape.backward(loss)
    leaves = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in args]
    _torch_of(chain)(*leaves).backward()
    for array, leaf in zip(args, leaves, strict=True):
        np.testing.assert_allclose(tape.grad(array), leaf.grad.numpy(), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (2, 3, 1), (7, 5, 3)])
def test_a_product_over_rows_from_one_differentiates_on_a_tape(m, k, n):
    """A ``prange(1, m)`` nest's sum is indexed from 1: a temporary of the loop's first bound would be too short
    for it (the tape's forward read past it); its adjoint agrees with central differences."""
    args = _arguments(from_one, m, k, n, 11)
    kept = [a.copy() for a in args]
    grads = svod.grad(from_one, argnums=(0, 1, 2))(*args)
    _check_differences(from_one, kept, grads, 13)
    np.testing.assert_array_equal(grads[0][0], np.zeros(k))


@svod.kernel
def gathered(y, x, idx):
    for i in svod.prange(y.shape[0]):
        y[i] = x[idx[i]] * svod.math.sin(x[i])


def _float16_calls(m: int, k: int, n: int) -> list[tuple[svod.Kernel, list[np.ndarray]]]:
    """A product whose loops cover its arrays (matrix products' adjoint), one whose rows do not (the general
    one, which would add atomically), and a gather and an elementwise kernel: each on float16 arrays, its
    outputs holding 7 to show the forward never ran."""
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    x = rng.standard_normal(m).astype(np.float16)
    return [(matmul, [np.full((m, n), 7, np.float16), a, b]), (corner, [np.full((m, n), 7, np.float16), a, b]),
            (gathered, [np.full(m, 7, np.float16), x, rng.integers(0, m, m).astype(np.int32)]),
            (matvec, [np.full(m, 7, np.float32), a, rng.standard_normal(k).astype(np.float32)])]


@pytest.mark.parametrize("how", ["vjp", "grad", "tape"])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (2, 3, 1), (7, 5, 3)])
def test_float16_is_refused_by_both_adjoints_before_the_forward_runs(m, k, n, how):
    """Whichever adjoint the kernel would get (matrix products or the general one), and from ``svod.vjp``,
    ``svod.grad`` and a tape alike: a ``GradientError`` naming the kernel, the stage and float16."""
    for kernel, args in _float16_calls(m, k, n):
        with pytest.raises(svod.errors.GradientError, match=r"is a float16 array.*astype\(np\.float32\)") as err:
            _differentiate(how, kernel, args)
        assert (err.value.kernel, err.value.stage, err.value.value) == (kernel.name, "gradient", "float16")
        assert np.all(args[0] == 7)


def _differentiate(how: str, kernel: svod.Kernel, args: list[np.ndarray]) -> None:
    if how == "vjp":
        svod.vjp(kernel, *args)
    elif how == "tape":
        with svod.Tape():
            kernel(*args)
    else:
        def loss(*inputs):
            kernel(args[0], *inputs)
            raise AssertionError(f"{kernel.name} ran on float16 arrays on a tape")
        svod.grad(loss)(*args[1:])
