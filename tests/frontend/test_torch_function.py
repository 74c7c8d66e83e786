"""``svod.torch.function``: a kernel as a ``torch.autograd.Function``, checked by ``torch.autograd.gradcheck``
(float64 central differences) and against torch's own autograd of the same expression; integer, non-contiguous
and no-grad tensors, in-place kernels, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.dtype import dtypes
from svod.errors import BufferMismatchError, GradientError, GraphError

torch = pytest.importorskip("torch", reason="svod.torch needs torch (the bench extra); CI runs without it")


@svod.kernel
def elementwise(y, x, w, a):
    for i in svod.prange(x.shape[0]):
        y[i] = svod.math.sin(x[i]) * w[i] + x[i] / (w[i] * w[i] + a) - svod.math.exp(-x[i] * x[i])


@svod.kernel
def gather_scale(y, x, idx, a):
    for i in svod.prange(y.shape[0]):
        y[i] = x[idx[i]] * x[i] * a


@svod.kernel
def square_in_place(x):
    for i in svod.prange(x.shape[0]):
        x[i] = x[i] * x[i] + 0.5


@svod.kernel
def accumulate(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] += x[i] * x[i]


@svod.kernel
def matrix_scale(y, x, w):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            y[i, j] = x[i, j] * w[j] + svod.math.tanh(x[i, j])


@svod.kernel
def scaled_by(y, x, a):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * a[0]


@svod.kernel
def split(y, signs, x):
    for i in svod.prange(x.shape[0]):
        y[i] = abs(x[i])
        signs[i] = 1 if x[i] >= 0 else -1


@svod.kernel
def cumulative(y, x):
    for i in svod.prange(y.shape[0]):
        for j in range(i + 1):
            y[i] += x[j]


@svod.kernel
def doubling(y, x):
    for i in svod.prange(y.shape[0]):
        t = x[i]
        while t < 10.0:
            t = t * 2.0
        y[i] = t


@svod.jit
def doubled(out, x):
    out[:] = x * 2.0


SIZES = [0, 1, 7, 31, 1027]


def _float64(device) -> bool:
    """Whether ``device`` holds float64, which gradcheck's differences need; one that does not refuses a float64
    tensor in those words (checked here), and the gradcheck is left to the devices that do."""
    if dtypes.float64 in device.caps.element_dtypes:
        return True
    f = svod.torch.function(elementwise, device=device)
    x = _random(3, 0)
    with pytest.raises(GraphError, match="cannot hold float64"):
        f(torch.zeros(3, dtype=torch.float64), x, x.detach().clone(), 0.5)
    return False


def _tensor(values, requires_grad=False):
    return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)


def _random(size, seed, requires_grad=True):
    values = np.random.default_rng(seed).uniform(-2.0, 2.0, size)
    return _tensor(values, requires_grad)


def test_gradcheck_of_an_elementwise_kernel(device):
    if not _float64(device):
        return
    f = svod.torch.function(elementwise, device=device)
    for size in (1, 7):
        x, w = _random(size, 1), _random(size, 2)
        assert torch.autograd.gradcheck(lambda x, w: f(torch.zeros_like(x), x, w, 0.5), (x, w))


def test_gradcheck_of_a_gather_gives_the_integer_index_no_gradient(device):
    if not _float64(device):
        return
    f = svod.torch.function(gather_scale, device=device)
    idx = torch.tensor([2, 2, 0, 4, 1], dtype=torch.int32)
    x = _random(5, 3)
    assert torch.autograd.gradcheck(lambda x: f(torch.zeros(5, dtype=torch.float64), x, idx, 2.0), (x,))
    (y,) = f(torch.zeros(5, dtype=torch.float64), x, idx, 2.0)
    y.sum().backward()
    expected = x.detach()[idx.long()] * 2.0  # y[i]'s read of x[i], and its scatter into x[idx[i]]
    expected.index_add_(0, idx.long(), x.detach() * 2.0)
    torch.testing.assert_close(x.grad, expected)
    assert idx.grad is None and not idx.requires_grad


def test_gradcheck_of_an_in_place_kernel_and_of_an_update(device):
    if not _float64(device):
        return
    in_place = svod.torch.function(square_in_place, device=device)
    update = svod.torch.function(accumulate, device=device)
    x, y = _random(7, 4), _random(7, 5)
    assert torch.autograd.gradcheck(lambda x: in_place(x.clone()), (x,))
    assert torch.autograd.gradcheck(lambda y, x: update(y.clone(), x), (y, x))


@pytest.mark.parametrize("size", SIZES)
def test_values_and_gradients_match_torchs_autograd_of_the_same_expression(size):
    f = svod.torch.function(elementwise)
    x, w = _random(size, 6), _random(size, 7)
    (y,) = f(torch.zeros(size, dtype=torch.float64), x, w, 0.5)
    cotangent = _random(size, 8, requires_grad=False)
    (y * cotangent).sum().backward()
    xt, wt = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    expected = torch.sin(xt) * wt + xt / (wt * wt + 0.5) - torch.exp(-xt * xt)
    (expected * cotangent).sum().backward()
    torch.testing.assert_close(y.detach(), expected.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, xt.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.grad, wt.grad, rtol=1e-12, atol=1e-12)


def test_special_values_give_torchs_values_and_gradients():
    f = svod.torch.function(elementwise)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e308, 3.0]
    x = _tensor(special, requires_grad=True)
    w = _tensor([1.0, -0.0, 2.0, 0.5, 1.0, np.inf, 1e-200, np.nan], requires_grad=True)
    (y,) = f(torch.zeros(len(special), dtype=torch.float64), x, w, 0.0)
    y.sum().backward()
    xt, wt = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    expected = torch.sin(xt) * wt + xt / (wt * wt + 0.0) - torch.exp(-xt * xt)
    expected.sum().backward()
    torch.testing.assert_close(y.detach(), expected.detach(), equal_nan=True)
    torch.testing.assert_close(x.grad, xt.grad, equal_nan=True)
    torch.testing.assert_close(w.grad, wt.grad, equal_nan=True)


def test_the_forward_writes_the_callers_tensors_in_place_and_returns_them():
    f = svod.torch.function(gather_scale)
    y, x = torch.zeros(3, dtype=torch.float64), _tensor([1.0, 2.0, 3.0], requires_grad=True)
    version = y._version
    result = f(y, x, torch.tensor([2, 2, 0], dtype=torch.int64), 2.0)
    assert isinstance(result, tuple) and len(result) == 1 and result[0] is y
    assert y._version > version and y.requires_grad
    torch.testing.assert_close(y.detach(), _tensor([6.0, 12.0, 6.0]))
    assert f.apply(torch.zeros(3, dtype=torch.float64), x, torch.tensor([0, 1, 2]), 1.0)[0].tolist() == [1.0, 4.0, 9.0]
    assert issubclass(f, torch.autograd.Function) and f.kernel is gather_scale


def test_a_one_element_tensor_is_a_scalar_parameter_with_a_gradient():
    f = svod.torch.function(scaled_by)
    x, a = _random(31, 18), _tensor([1.5], requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, a: f(torch.zeros_like(x), x, a), (x, a))
    (y,) = f(torch.zeros_like(x), x, a)
    y.sum().backward()
    torch.testing.assert_close(a.grad, x.detach().sum().reshape(1))


def test_an_integer_result_is_not_differentiable():
    f = svod.torch.function(split)
    x = _tensor([-1.5, 0.0, 2.0], requires_grad=True)
    y, signs = f(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.int32), x)
    assert signs.tolist() == [-1, 1, 1] and not signs.requires_grad and y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [-1.0, 0.0, 1.0]


def test_a_tensor_that_requires_no_grad_gets_none_and_the_others_theirs():
    f = svod.torch.function(elementwise)
    x, w = _random(5, 9), _random(5, 10, requires_grad=False)
    (y,) = f(torch.zeros(5, dtype=torch.float64), x, w, 0.5)
    y.sum().backward()
    assert w.grad is None
    xt = x.detach().clone().requires_grad_()
    (torch.sin(xt) * w + xt / (w * w + 0.5) - torch.exp(-xt * xt)).sum().backward()
    torch.testing.assert_close(x.grad, xt.grad)
    (z,) = f(torch.zeros(5, dtype=torch.float64), x.detach(), w, 0.5)
    assert not z.requires_grad and z.grad_fn is None


def test_non_contiguous_tensors_are_read_and_written_through_their_strides():
    f = svod.torch.function(matrix_scale)
    base = _random((6, 5), 11, requires_grad=False)
    x = base.t().contiguous().t().requires_grad_()  # column-major
    w = _random(10, 12, requires_grad=False)[::2].requires_grad_()  # every other element of another tensor
    out = torch.zeros(12, 6, dtype=torch.float64)[::2, 1:]  # a strided view of a larger tensor
    assert not x.is_contiguous() and not w.is_contiguous() and not out.is_contiguous()
    (y,) = f(out, x, w)
    assert y is out
    y.sum().backward()
    xt, wt = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    expected = xt * wt + torch.tanh(xt)
    expected.sum().backward()
    torch.testing.assert_close(out.detach(), expected.detach())
    torch.testing.assert_close(x.grad, xt.grad)
    torch.testing.assert_close(w.grad, wt.grad)
    assert torch.autograd.gradcheck(lambda x: f(torch.zeros(6, 10, dtype=torch.float64)[:, ::2], x, w.detach()),
                                    (x,))


def test_a_leaf_that_requires_grad_is_refused_before_the_kernel_writes_it_and_written_under_no_grad():
    f = svod.torch.function(square_in_place)
    leaf = _tensor([1.0, 2.0, 3.0], requires_grad=True)
    for target in (leaf, leaf[1:]):
        with pytest.raises(GradientError, match=r"pass x\.clone\(\)") as err:
            f(target)
        assert err.value.value == "x" and leaf.tolist() == [1.0, 2.0, 3.0]
    (y,) = f((leaf * 2.0)[1:])  # a view of a tensor that is no leaf: torch's in-place rules take it
    y.sum().backward()
    assert leaf.grad.tolist() == [0.0, 16.0, 24.0]  # d((2x)^2 + 0.5)/dx = 8x
    with torch.no_grad():
        f(leaf)
    assert leaf.tolist() == [1.5, 4.5, 9.5]


def test_a_read_tensor_changed_before_backward_is_refused():
    f = svod.torch.function(elementwise)
    x, w = _random(4, 13), _random(4, 14, requires_grad=False)
    (y,) = f(torch.zeros(4, dtype=torch.float64), x, w, 0.5)
    w.add_(1.0)  # x's gradient reads w as the forward did
    with pytest.raises(GradientError, match="changed after the tape recorded") as err:
        y.sum().backward()
    assert err.value.value == "w"


def test_a_result_an_earlier_operation_saved_is_refused_by_torch():
    f = svod.torch.function(gather_scale)
    x = _random(3, 15)
    y = torch.ones(3, dtype=torch.float64)
    saved = (y * x).sum()  # saves y for its gradient with respect to x
    f(y, x, torch.tensor([0, 1, 2]), 1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()


def test_a_second_derivative_is_refused_rather_than_zero():
    f = svod.torch.function(square_in_place)
    x = _random(3, 16)
    (y,) = f(x.clone())
    (gradient,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)  # y's gradient depends on x
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gradient.sum().backward()


def test_a_sequential_loop_adds_each_turns_read_into_the_gradient():
    """y[i] sums x[:i + 1]: x[j]'s gradient is how many of the y after it are."""
    x = torch.arange(1.0, 6.0, dtype=torch.float64, requires_grad=True)
    (y,) = svod.torch.function(cumulative)(torch.zeros(5, dtype=torch.float64), x)
    torch.testing.assert_close(y, torch.cumsum(x.detach(), 0))
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.arange(5.0, 0.0, -1.0, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda x: svod.torch.function(cumulative)(torch.zeros(5, dtype=torch.float64),
                                                                            x)[0], (x.detach().requires_grad_(),))


def test_what_is_refused():
    with pytest.raises(GradientError, match="takes an @svod\\.kernel") as err:
        svod.torch.function(doubled)
    assert err.value.stage == "gradient"
    f = svod.torch.function(gather_scale)
    x = _random(3, 17)
    with pytest.raises(GradientError, match="runs on CPU tensors") as err:
        f(torch.zeros(3, dtype=torch.float64, device="meta"), x, torch.tensor([0, 1, 2]), 1.0)
    assert err.value.value == "meta"
    with pytest.raises(BufferMismatchError, match="takes torch tensors and numbers"):
        f(np.zeros(3), x, torch.tensor([0, 1, 2]), 1.0)
    with pytest.raises(BufferMismatchError, match="cannot be read through DLPack"):
        f(torch.zeros(3, dtype=torch.bfloat16), x, torch.tensor([0, 1, 2]), 1.0)
    with pytest.raises(BufferMismatchError, match=r"0-d tensor.*a\.reshape\(1\)"):
        f(torch.zeros(3, dtype=torch.float64), x, torch.tensor([0, 1, 2]), torch.tensor(2.0, requires_grad=True))
    with pytest.raises(BufferMismatchError, match="takes 4 arguments"):
        f(torch.zeros(3, dtype=torch.float64), x)
    with pytest.raises(GradientError, match=r"a while loop inside svod\.prange"):
        svod.torch.function(doubling)(torch.zeros(3, dtype=torch.float64), x)
