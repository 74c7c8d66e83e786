"""An array that a few statements read, computed again in each of them (``svod.frontend.array_fusion``), and
a returned temporary computed into the array returned (``Prepared.call``): each compared on every device with
the same function run as plain NumPy, on rows holding NaN and infinities."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend.arrays import lower_arrays
from tests.frontend.test_arrays import kernels_of
from tests.frontend.test_jit import agrees_with_python

RNG = np.random.default_rng(73)


def data(*shape: int, dtype: type = np.float64) -> np.ndarray:
    return RNG.normal(size=shape).astype(dtype)


def with_specials(rows: int, cols: int) -> np.ndarray:
    """float32 rows of normal values, the second holding a NaN, the third +inf, the fourth -inf, the fifth
    only -0.0 (where there are so many rows)."""
    x = data(rows, cols, dtype=np.float32)
    specials = {1: (cols // 2, np.nan), 2: (0, np.inf), 3: (cols - 1, -np.inf)}
    for row, (col, value) in specials.items():
        if row < rows:
            x[row, col] = value
    if rows > 4:
        x[4] = -0.0
    return x


@svod.jit
def layernorm_rows(x):
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=1, keepdims=True)
    return centred / np.sqrt(var + 1e-5)


@svod.jit
def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rows,cols", [(0, 5), (1, 1), (2, 7), (5, 17), (13, 31), (6, 129)])
def test_rows_normalised_in_one_kernel_agree_with_numpy(device, rows, cols):
    x = with_specials(rows, cols)
    agrees_with_python(layernorm_rows, device, x, rtol=1e-4, atol=1e-5, numpy_warns=True)
    agrees_with_python(softmax_rows, device, x, rtol=1e-5, atol=1e-6, numpy_warns=True)


def test_a_cheap_array_read_by_the_next_statements_is_not_made():
    assert kernels_of(layernorm_rows, data(5, 17, dtype=np.float32)) == 1


@svod.jit
def read_by_three(x):
    c = x - x.mean()
    a = c * 2.0
    b = c * c
    return a + b - c


@svod.jit
def read_after_three(x):
    c = x * 0.5
    a = c + 1.0
    b = a * 2.0
    d = b - 3.0
    return d + c


@pytest.mark.parametrize("n", [1, 3, 17])
def test_an_array_read_by_a_few_statements_or_past_them(device, n):
    agrees_with_python(read_by_three, device, data(n, 5), rtol=1e-9)
    agrees_with_python(read_after_three, device, data(n, 5), rtol=1e-9)


@svod.jit
def rebinds_what_it_reads(x, s):
    c = x * s
    s = s + 1.0
    y = c + s
    return y, c * 2.0


@svod.jit
def stores_into_what_it_reads(x):
    c = x + 1.0
    x[0] = 5.0
    return c * 2.0, c + x


@svod.jit
def stores_through_a_view(x):
    c = x + 1.0
    v = x[1:]
    v[0] = 7.0
    return c * 2.0, c - x


@pytest.mark.parametrize("n", [1, 2, 11])
def test_an_array_is_made_before_a_statement_changes_what_it_reads(device, n):
    """Computed again after a statement that binds a name its value reads, or writes an array it reads, it
    would read the new value: it is made where it stands."""
    agrees_with_python(rebinds_what_it_reads, device, data(n, 3), 1.5, rtol=1e-9)
    agrees_with_python(stores_into_what_it_reads, device, data(n, 3), rtol=1e-9)
    if n > 1:
        agrees_with_python(stores_through_a_view, device, data(n, 3), rtol=1e-9)


def test_a_returned_temporary_is_a_new_array_at_each_call(device):
    first_input, second_input = with_specials(7, 13), data(7, 13, dtype=np.float32)
    first = softmax_rows(first_input, device=device)
    kept = first.copy()
    second = softmax_rows(second_input, device=device)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, kept)
    first[...] = 0.0
    np.testing.assert_array_equal(softmax_rows(first_input, device=device), kept)
    np.testing.assert_array_equal(softmax_rows(second_input, device=device), second)


@svod.jit
def log_softmax_of_a_product(x, w):
    logits = x @ w
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    total = np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return shifted - total


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_a_new_array_that_makes_a_fused_one_first_is_made_too(device, rows):
    """``shifted`` reads the fused product at each turn of its row's max, so the product is made first and the
    statement rewritten again: the second time it still makes ``shifted``, which two statements read."""
    agrees_with_python(log_softmax_of_a_product, device, data(rows, 5), data(5, 3), rtol=1e-9)


@svod.jit
def columns_centred(x):
    return x - x.mean(axis=0)


@svod.jit
def rows_centred(x):
    return x - x.mean(axis=1, keepdims=True)


@svod.jit
def deviations_in_place(float_n, data):
    mean = np.sum(data, axis=0) / float_n
    data -= mean


@svod.jit
def columns_standardised(x):
    c = x - x.mean(axis=0)
    return c / np.sqrt((c * c).mean(axis=0)), c * c


@svod.jit
def product_across_rows(a, b, v):
    return a + b @ v


@pytest.mark.parametrize("rows,cols", [(0, 5), (1, 1), (2, 7), (8, 3), (9, 3), (13, 31), (6, 129)])
def test_a_reduction_read_across_an_outer_loop_it_does_not_depend_on(device, rows, cols):
    """A column's mean read at each element of a row-major nest is made first, once per column (npbench's
    covariance centres its data so), as a product read at each row is; NaN and infinities stay in their
    columns."""
    x = with_specials(rows, cols).astype(np.float64)
    agrees_with_python(columns_centred, device, x, rtol=1e-9, numpy_warns=True)
    agrees_with_python(deviations_in_place, device, float(rows), x, rtol=1e-9, numpy_warns=True)
    agrees_with_python(columns_standardised, device, x, rtol=1e-9, numpy_warns=True)
    agrees_with_python(product_across_rows, device, data(rows, cols), data(cols, cols), data(cols), rtol=1e-9)


def test_a_reduction_is_made_first_only_where_it_would_run_again_at_each_element():
    """A column's sum under a row's loop is made first: a kernel of its own; a row's runs once per row where
    it stands, and a column of a few terms is added again at each element, cheaper than a kernel."""
    assert kernels_of(columns_centred, data(9, 5)) == 2
    assert kernels_of(columns_centred, data(8, 5)) == 1
    assert kernels_of(columns_centred, data(1, 500)) == 1
    assert kernels_of(rows_centred, data(50, 40)) == 1
    assert kernels_of(product_across_rows, data(12, 10), data(10, 10), data(10)) == 2


@svod.jit
def cross_entropy_of_a_product(x, w, b, onehot):
    logits = x @ w + b
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_total = np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.sum(onehot * (shifted - log_total)) / x.shape[0]


@svod.jit
def product_and_its_transpose(a, b):
    y = a @ b
    return y + y.T


def _products_written(fn: svod.frontend.jit.Jit, args: dict[str, np.ndarray], taped: bool, operand: str) -> int:
    """How many sums over ``operand``'s rows the rewritten function writes: one per product it computes."""
    lowered = lower_arrays(fn.source, fn.name, args, taped)
    assert lowered is not None
    return sum(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == operand
               for n in ast.walk(lowered[0].node))


@pytest.mark.parametrize("taped", [False, True], ids=["plan", "tape"])
def test_a_product_read_at_two_elements_is_made_once(taped):
    """The logits read by a row's max and by the row's shifted values, and ``y`` read at ``[i, j]`` and ``[j,
    i]``: a product is fused into one reader at most, else made (on a tape, the max made first had its own copy
    of the product, and the shifted statement computed it again)."""
    x, w, b = data(4, 6), data(6, 3), data(3)
    onehot = np.eye(3)[[0, 2, 1, 1]]
    logits = {"x": x, "w": w, "b": b, "onehot": onehot}
    assert _products_written(cross_entropy_of_a_product, logits, taped, "w") == 1
    assert _products_written(product_and_its_transpose, {"a": data(5, 4), "b": data(4, 5)}, taped, "b") == 1


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_a_product_made_once_computes_what_numpy_does(device, rows):
    x, w, b = data(rows, 6), data(6, 3), data(3)
    x[0, 0] = -0.0
    onehot = np.eye(3)[np.arange(rows) % 3]
    agrees_with_python(cross_entropy_of_a_product, device, x, w, b, onehot, rtol=1e-9)
    agrees_with_python(product_and_its_transpose, device, data(rows, 5), data(5, rows), rtol=1e-9)


@pytest.mark.parametrize("rows", [1, 4])
def test_the_gradient_of_a_product_made_once_is_the_differences(rows):
    x, w, b = data(rows, 6), data(6, 3), data(3)
    onehot = np.eye(3)[np.arange(rows) % 3]
    dw, db = svod.grad(cross_entropy_of_a_product, argnums=(1, 2))(x, w, b, onehot)
    for position, grad in ((1, dw), (2, db)):
        direction = RNG.normal(size=grad.shape)

        def moved(sign: float, position: int = position, direction: np.ndarray = direction) -> float:
            args = [x, w, b, onehot]
            args[position] = args[position] + sign * 1e-6 * direction
            return float(cross_entropy_of_a_product.fn(*args))
        expected = (moved(1.0) - moved(-1.0)) / 2e-6
        assert float(np.sum(grad * direction)) == pytest.approx(expected, rel=1e-5, abs=1e-9)
