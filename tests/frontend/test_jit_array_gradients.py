"""Gradients of ``@svod.jit`` functions written with NumPy's array statements: on a tape, each statement is the
kernels svod rewrites it into, differentiated by their adjoints. Each function is checked against central
differences of the function run as plain Python (float64, along random directions) and against
``torch.autograd`` of the same expression; what a tape does not take is refused at the user's line."""

from __future__ import annotations

import numpy as np
import pytest

try:
    import torch
except ImportError:  # without the bench extra central differences remain the oracle
    torch = None

import svod
from tests.frontend.test_jit_gradient_repeats import layernorm, softmax

SHAPES = [(1, 1), (1, 7), (7, 1), (3, 13)]
"""Rows and columns: edge sizes 1 and primes."""


def softmax_torch(x, w):
    return torch.sum(torch.softmax(x, dim=1) * w)


def layernorm_torch(x, g, b, w):
    return torch.sum(torch.nn.functional.layer_norm(x, (x.shape[1],), g, b, eps=1e-5) * w)


@svod.jit
def mlp_layer(x, W, b, v):
    h = np.tanh(x @ W + b)
    return np.sum(h @ v)


def mlp_layer_torch(x, W, b, v):
    return torch.sum(torch.tanh(x @ W + b) @ v)


@svod.jit
def logistic(X, y, w):
    z = X @ w
    return np.mean(np.log(1.0 + np.exp(-y * z)))


def logistic_torch(X, y, w):
    return torch.mean(torch.log(1.0 + torch.exp(-y * (X @ w))))


@svod.jit
def logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def logsumexp_torch(x):
    return torch.logsumexp(x.reshape(-1), dim=0)


def _arguments(name: str, rows: int, cols: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if name == "softmax":
        return [rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols))]
    if name == "layernorm":
        return [rng.standard_normal((rows, cols)), rng.standard_normal(cols), rng.standard_normal(cols),
                rng.standard_normal((rows, cols))]
    if name == "mlp_layer":
        return [rng.standard_normal((rows, 3)), rng.standard_normal((3, cols)), rng.standard_normal(cols),
                rng.standard_normal(cols)]
    if name == "logistic":
        return [rng.standard_normal((rows, cols)), np.where(rng.standard_normal(rows) > 0, 1.0, -1.0),
                rng.standard_normal(cols)]
    return [rng.standard_normal((rows, cols))]


CASES = [(softmax, softmax_torch), (layernorm, layernorm_torch), (mlp_layer, mlp_layer_torch),
         (logistic, logistic_torch), (logsumexp, logsumexp_torch)]


def _plain(fn, args):
    return float(fn.fn(*args))


def _differences(fn, args, position, direction, h=1e-6):
    """The derivative of ``fn`` run as plain Python along ``direction`` of argument ``position``."""
    def moved(sign):
        return [a + sign * h * direction if k == position else a for k, a in enumerate(args)]
    return (_plain(fn, moved(1.0)) - _plain(fn, moved(-1.0))) / (2 * h)


@pytest.mark.parametrize(("rows", "cols"), SHAPES)
@pytest.mark.parametrize(("fn", "spelled"), CASES, ids=[fn.name for fn, _ in CASES])
def test_grad_of_numpy_statements_agrees_with_differences_and_with_torch(fn, spelled, rows, cols):
    args = _arguments(fn.name, rows, cols, rows * 31 + cols)
    positions = tuple(k for k, a in enumerate(args) if not (fn is logistic and k == 1))
    grads = svod.grad(fn, argnums=positions)(*args)
    rng = np.random.default_rng(rows + cols)
    for position, grad in zip(positions, grads, strict=True):
        assert grad.shape == args[position].shape and grad.dtype == np.float64
        direction = rng.standard_normal(grad.shape)
        expected = _differences(fn, args, position, direction)
        assert float(np.sum(grad * direction)) == pytest.approx(expected, rel=1e-4, abs=1e-8)
    if torch is not None:
        leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
        spelled(*leaves).backward()
        for position, grad in zip(positions, grads, strict=True):
            np.testing.assert_allclose(grad, leaves[position].grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("fn", "spelled"), CASES, ids=[fn.name for fn, _ in CASES])
def test_a_returned_scalar_comes_back_on_a_tape_as_the_one_element_array_its_kernel_wrote(fn, spelled):
    args = _arguments(fn.name, 5, 7, 3)
    with svod.Tape():
        loss = fn(*args)
    assert isinstance(loss, np.ndarray) and loss.shape == (1,)
    expected = fn(*args)  # the plan's value (its sums may add in another order)
    assert float(loss[0]) == pytest.approx(float(expected), rel=1e-12)
    if torch is not None:
        assert float(loss[0]) == pytest.approx(float(spelled(*(torch.tensor(a) for a in args))), rel=1e-12)


@svod.jit
def rows_softmax(x):
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def _softmax_vjp(x: np.ndarray, cotangent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row softmax and its pullback in closed form, p * (c - sum(p * c)): an oracle that needs no torch."""
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    p = e / np.sum(e, axis=1, keepdims=True)
    return p, p * (cotangent - np.sum(p * cotangent, axis=1, keepdims=True))


@pytest.mark.parametrize(("rows", "cols"), SHAPES)
def test_vjp_of_a_returned_array_agrees_with_torch(rows, cols):
    rng = np.random.default_rng(rows * cols)
    x, cotangent = rng.standard_normal((rows, cols)), rng.standard_normal((rows, cols))
    (p,), pullback = svod.vjp(rows_softmax, x)
    (dx,) = pullback(cotangent)
    rows_p, rows_dx = _softmax_vjp(x, cotangent)
    np.testing.assert_allclose(p, rows_p, rtol=1e-12)
    np.testing.assert_allclose(dx, rows_dx, rtol=1e-9, atol=1e-12)
    if torch is not None:
        leaf = torch.tensor(x, requires_grad=True)
        expected = torch.softmax(leaf, dim=1)
        expected.backward(torch.tensor(cotangent))
        np.testing.assert_allclose(p, expected.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(dx, leaf.grad.numpy(), rtol=1e-9, atol=1e-12)


@svod.jit
def extremes(x, y):
    a = np.maximum(x, y) - np.minimum(x, 0.5 * y)
    b = np.clip(x, -0.5, 0.5) + np.abs(y)
    return np.max(a) - np.min(b) + np.sum(np.where(x > 0, x, 0.1 * x) ** 2) + np.var(x)


def extremes_torch(x, y):
    a = torch.maximum(x, y) - torch.minimum(x, 0.5 * y)
    b = torch.clamp(x, -0.5, 0.5) + torch.abs(y)
    return torch.max(a) - torch.min(b) + torch.sum(torch.where(x > 0, x, 0.1 * x) ** 2) + torch.var(x,
                                                                                                     unbiased=False)


@pytest.mark.parametrize("n", [1, 2, 13])
def test_elementwise_statements_and_reductions_have_the_derivatives_numpy_means(n):
    """Random values (no ties, no element at a kink): the max and min reach the one element that wins."""
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    dx, dy = svod.grad(extremes, argnums=(0, 1))(x, y)
    if torch is not None:
        leaves = [torch.tensor(v, requires_grad=True) for v in (x, y)]
        extremes_torch(*leaves).backward()
        np.testing.assert_allclose(dx, leaves[0].grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(dy, leaves[1].grad.numpy(), rtol=1e-9, atol=1e-12)
    direction = rng.standard_normal(n)
    expected = _differences(extremes, [x, y], 0, direction)
    assert float(np.sum(dx * direction)) == pytest.approx(expected, rel=1e-4, abs=1e-8)


@svod.jit
def helped(x, y):
    a = np.log1p(x) + np.expm1(x) + np.sinh(x) + np.cosh(x) + np.arcsinh(x) + np.arctanh(x)
    b = np.arctan(x) + np.arcsin(x) + np.arccos(x) + np.arccosh(y) + np.log10(y)
    c = np.arctan2(x, y) + np.hypot(x, y) + np.logaddexp(x, y) + np.logaddexp2(y, x) + np.cbrt(y) + np.sinc(x)
    return np.sum(a * b + c)


def helped_torch(x, y):
    a = torch.log1p(x) + torch.expm1(x) + torch.sinh(x) + torch.cosh(x) + torch.asinh(x) + torch.atanh(x)
    b = torch.atan(x) + torch.asin(x) + torch.acos(x) + torch.acosh(y) + torch.log10(y)
    c = torch.atan2(x, y) + torch.hypot(x, y) + torch.logaddexp(x, y) + torch.logaddexp2(y, x) + y ** (1.0 / 3.0) + \
        torch.sinc(x)
    return torch.sum(a * b + c)


@pytest.mark.parametrize("n", [1, 13])
def test_numpys_functions_svod_computes_with_helpers_take_their_derivatives(n):
    """log1p, arctan2, cbrt and the others are helpers of svod's own on a device; the adjoint takes the
    function's derivative, not the helper's steps (sinc's are the kernel's own arithmetic)."""
    rng = np.random.default_rng(n)
    x, y = rng.uniform(-0.9, 0.9, n), rng.uniform(1.1, 3.0, n)
    dx, dy = svod.grad(helped, argnums=(0, 1))(x, y)
    if torch is not None:
        leaves = [torch.tensor(v, requires_grad=True) for v in (x, y)]
        helped_torch(*leaves).backward()
        np.testing.assert_allclose(dx, leaves[0].grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(dy, leaves[1].grad.numpy(), rtol=1e-9, atol=1e-12)
    for position, grad in ((0, dx), (1, dy)):
        direction = rng.standard_normal(n)
        expected = _differences(helped, [x, y], position, direction)
        assert float(np.sum(grad * direction)) == pytest.approx(expected, rel=1e-4, abs=1e-8)


@svod.jit
def max_of_nan(x):
    return np.max(x * 2.0)


def test_a_max_on_a_tape_is_the_plans_for_nan_and_signed_zeros():
    """The float kept is the one the plan's order keys pick: a NaN wins, 0.0 beats -0.0 whichever comes first."""
    for values in ([1.0, np.nan, 3.0], [-0.0, 0.0], [0.0, -0.0], [-np.inf, -np.inf], [-np.inf, 2.0]):
        x = np.array(values)
        with svod.Tape():
            got = max_of_nan(x)
        expected = max_of_nan(x)
        np.testing.assert_array_equal(got, [np.max(x * 2.0)])
        np.testing.assert_array_equal(got, [expected])
        assert np.signbit(got[0]) == np.signbit(expected)


@svod.jit
def running(x):
    c = np.cumsum(x)
    c[0] = np.sum(c)  # refused: running
    return np.sum(c * c)


@svod.jit
def helper(x):
    return np.sum(np.copysign(x, 1.0))  # refused: helper


@svod.jit
def ordered(x):
    y = np.sort(x)  # refused: ordered
    return np.sum(y * y)


def _line(name: str) -> int:
    with open(__file__) as source:
        return next(k for k, text in enumerate(source, start=1) if text.rstrip().endswith(f"# refused: {name}"))


@pytest.mark.parametrize(("fn", "words"), [
    (running, r"a read of the temporary array of `np\.cumsum\(x\)` at elements of other work items.*the line is "
              "an array statement"),
    (helper, r"a call of np\.copysign: .*the line is an array statement"),
    (ordered, "a sort, a median or a quantile"),
], ids=["read_and_stored", "copysign", "sort"])
def test_an_array_statement_the_adjoint_does_not_take_is_refused_at_its_line_in_the_users_words(fn, words):
    x = np.array([1.0, -2.0, 3.0])
    with pytest.raises(svod.errors.GradientError, match=words) as caught:
        svod.grad(fn)(x)
    assert f"{__file__}:{_line(fn.name)}:" in str(caught.value)
    assert "_svod_" not in caught.value.detail
    assert caught.value.stage == "gradient"


@svod.jit
def scanned(x):
    c = np.cumsum(x) * np.cumprod(x)
    s = np.sum(c * c)
    t = np.sum(x * s)
    return t / x.shape[0]


def scanned_torch(x):
    return torch.sum(x * torch.sum((torch.cumsum(x, 0) * torch.cumprod(x, 0)) ** 2)) / x.shape[0]


@pytest.mark.parametrize("n", [1, 2, 13])
def test_sequential_statements_one_after_another_are_a_kernel_each_passing_scalars(n):
    """Scans, a sum of them, and a sum the first sum scales: each line its own kernel, the scalars passed in
    one-element arrays (else the sum's adjoint would read the scan's array after writing it)."""
    x = np.random.default_rng(n).standard_normal(n)
    dx = svod.grad(scanned)(x)
    if torch is not None:
        leaf = torch.tensor(x, requires_grad=True)
        scanned_torch(leaf).backward()
        np.testing.assert_allclose(dx, leaf.grad.numpy(), rtol=1e-9, atol=1e-12)
    direction = np.random.default_rng(n + 1).standard_normal(n)
    assert float(np.sum(dx * direction)) == pytest.approx(_differences(scanned, [x], 0, direction), rel=1e-4,
                                                          abs=1e-8)


def test_numpy_statements_on_a_tape_run_on_each_device(device):
    """The recorded kernels and their adjoints on each device: float64 where it has it, else float32."""
    pytest.importorskip("torch", reason="torch.autograd is this check's only oracle; torch comes with the bench extra")
    f = np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32
    x, w = (np.random.default_rng(k).standard_normal((3, 13)).astype(f) for k in (5, 6))
    with svod.Tape() as tape:
        loss = softmax(x, w, device=device)
    tape.backward(loss)
    leaves = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (x, w)]
    expected = softmax_torch(*leaves)
    expected.backward()
    tolerance = 1e-9 if f == np.float64 else 1e-4
    assert loss.dtype == f
    np.testing.assert_allclose(loss, [float(expected.detach())], rtol=tolerance)
    np.testing.assert_allclose(tape.grad(x), leaves[0].grad.numpy(), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(tape.grad(w), leaves[1].grad.numpy(), rtol=tolerance, atol=tolerance)


@svod.jit
def turns(y, x):
    for t in range(3):
        s = 0.0
        for k in range(x.shape[0]):
            s += x[k] * (t + 1.0)
        y[t] = s * s


@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_scalar_one_line_computes_for_the_next_starts_again_at_each_turn(n):
    """s, defined on the host at each turn, summed by one line's kernel and read by the next's."""
    x, dy = np.random.default_rng(n).standard_normal(n), np.array([1.0, 0.5, -2.0])
    (y,), pullback = svod.vjp(turns, np.zeros(3), x)
    total = float(np.sum(x))
    np.testing.assert_allclose(y, [(total * (t + 1)) ** 2 for t in range(3)], rtol=1e-12)
    _, dx = pullback(dy)
    expected = sum(dy[t] * 2.0 * total * (t + 1) ** 2 for t in range(3))
    np.testing.assert_allclose(dx, np.full(n, expected), rtol=1e-12)


@svod.jit
def fmax_fmin(x, y):
    return np.sum(np.fmax(x, y) + 2.0 * np.fmin(x, y))


@svod.jit
def logaddexp_sum(x, y):
    return np.sum(np.logaddexp(x, y))


@svod.jit
def arctan2_sum(x, y):
    return np.sum(np.arctan2(x, y))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nans_infinities_and_tiny_operands_take_the_limits_of_the_derivatives(dtype):
    """fmax and fmin keep the number over a NaN, which takes the adjoint (a tie shares it); an operand of
    logaddexp at +inf takes all of its adjoint, at -inf none; arctan2 of operands whose squares leave the float's
    range keeps its derivative (not 0)."""
    x, y = np.array([np.nan, 1.0, 3.0], dtype), np.array([2.0, np.nan, 3.0], dtype)
    dx, dy = svod.grad(fmax_fmin, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(dx, [0.0, 3.0, 1.5])
    np.testing.assert_array_equal(dy, [3.0, 0.0, 1.5])
    x, y = np.array([np.inf, 0.0, -np.inf, 1.0], dtype), np.array([0.0, np.inf, 2.0, 1.0], dtype)
    dx, dy = svod.grad(logaddexp_sum, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(dx, [1.0, 0.0, 0.0, 0.5])
    np.testing.assert_array_equal(dy, [0.0, 1.0, 1.0, 0.5])
    tiny = 1e-170 if dtype == np.float64 else 1e-25
    x, y = np.array([tiny, 3.0], dtype), np.array([2 * tiny, 4.0], dtype)
    dx, dy = svod.grad(arctan2_sum, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(dx, [0.4 / tiny, 0.16], rtol=1e-5)
    np.testing.assert_allclose(dy, [-0.2 / tiny, -0.12], rtol=1e-5)


class _Listed(svod.Tape):
    """A tape that lists the kernels it records, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[str] = []

    def record(self, kernel, args, device) -> None:
        self.kernels.append(kernel.name)
        super().record(kernel, args, device)


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 13), (5, 257)])
def test_a_tape_records_a_row_reduction_its_reader_broadcasts_as_a_kernel_of_its_own(rows, cols):
    """Softmax's row sum, which the plan fuses into the statement that divides by it, is recorded as its own
    kernel (the max, the sum, the division, the loss; the returned rows: the max, the sum, the division, the
    max that svod's rewriting inlines into both statements recorded once), so each kernel's adjoint reduces a
    row once, not once per element of it. A row of one element reduces to the element itself: no reduction to
    record."""
    args = _arguments("softmax", rows, cols, rows + cols)
    with _Listed() as tape:
        loss = softmax(*args)
    assert len(tape.kernels) == (4 if cols > 1 else 3)
    tape.backward(loss)
    x, cotangent = args
    assert float(loss[0]) == pytest.approx(float(np.sum(_softmax_vjp(x, cotangent)[0] * cotangent)), rel=1e-12)
    rng = np.random.default_rng(rows * cols)
    for position in range(len(args)):
        grad = tape.grad(args[position])
        direction = rng.standard_normal(grad.shape)
        assert float(np.sum(grad * direction)) == pytest.approx(_differences(softmax, args, position, direction),
                                                                rel=1e-4, abs=1e-8)
    if torch is not None:
        leaves = [torch.tensor(a, requires_grad=True) for a in args]
        expected = softmax_torch(*leaves)
        expected.backward()
        assert float(loss[0]) == pytest.approx(float(expected.detach()), rel=1e-12)
        for array, leaf in zip(args, leaves, strict=True):
            np.testing.assert_allclose(tape.grad(array), leaf.grad.numpy(), rtol=1e-9, atol=1e-12)
    with _Listed() as tape:
        p = rows_softmax(x)
    assert len(tape.kernels) == (3 if cols > 1 else 2)
    tape.backward(grads=[(p, cotangent)])
    rows_p, rows_dx = _softmax_vjp(x, cotangent)
    np.testing.assert_allclose(p, rows_p, rtol=1e-12)
    np.testing.assert_allclose(tape.grad(x), rows_dx, rtol=1e-9, atol=1e-12)
    if torch is not None:
        leaf = torch.tensor(x, requires_grad=True)
        torch.softmax(leaf, dim=1).backward(torch.tensor(cotangent))
        np.testing.assert_allclose(p, torch.softmax(torch.tensor(x), dim=1).numpy(), rtol=1e-12)
        np.testing.assert_allclose(tape.grad(x), leaf.grad.numpy(), rtol=1e-9, atol=1e-12)
