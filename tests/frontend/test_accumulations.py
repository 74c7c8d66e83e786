"""A sum into an output element, as numba users spell a product (``out[i, j] += x[i, r] * w[r, j]``, either loop
order, after a bias loop and before a ReLU loop), held in a local the loops fold: against NumPy (the sum is
reassociated, as every float sum svod folds), against plain Python where the result must be the sequential
one (NaN and infinities, signed zeros, a store that rounds, an element read at another index), and as one
store of a REDUCE, which is what reaches the product's lowering."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import SvodError
from svod.frontend.accumulations import fused, held, interchanged
from svod.frontend.oracle import run_as_python
from svod.ir import Ops
from tests.helpers import refuses

SIZES = [(1, 1, 1), (0, 3, 2), (3, 0, 5), (2, 3, 0), (3, 7, 5), (13, 17, 11), (4, 33, 9)]


@svod.kernel
def by_element(out, x, w):
    for i in svod.prange(x.shape[0]):
        for j in range(w.shape[1]):
            for r in range(x.shape[1]):
                out[i, j] += x[i, r] * w[r, j]


@svod.kernel
def by_element_plus(out, x, w):
    for i in svod.prange(x.shape[0]):
        for j in range(w.shape[1]):
            for r in range(x.shape[1]):
                out[i, j] = out[i, j] + x[i, r] * w[r, j]


@svod.kernel
def by_row(out, x, w):
    for i in svod.prange(x.shape[0]):
        for r in range(x.shape[1]):
            left = x[i, r]
            for j in range(w.shape[1]):
                out[i, j] += left * w[r, j]


@svod.kernel
def dense(out, x, w, bias, relu: bool):
    for i in svod.prange(x.shape[0]):
        for c in range(w.shape[1]):
            out[i, c] = bias[c]
        for r in range(x.shape[1]):
            left = x[i, r]
            for j in range(w.shape[1]):
                out[i, j] -= left * w[r, j]
        if relu:
            for j in range(w.shape[1]):
                out[i, j] = max(out[i, j], 0.0)


@svod.kernel
def accumulated(out, x, w, bias):
    for i in svod.prange(x.shape[0]):
        for j in range(w.shape[1]):
            acc = 0.0
            for r in range(x.shape[1]):
                acc += x[i, r] * w[r, j]
            out[i, j] = max(acc + bias[j], 0.0)


PRODUCTS = [by_element, by_element_plus, by_row]


def _operands(n: int, k: int, m: int, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n * 1000 + k * 10 + m)
    return (rng.standard_normal((n, k)).astype(dtype), rng.standard_normal((k, m)).astype(dtype),
            rng.standard_normal(m).astype(dtype))


def _tolerance(dtype: type) -> float:
    return 1e-4 if dtype == np.float32 else 1e-11


@pytest.mark.parametrize("kernel", PRODUCTS, ids=lambda k: k.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_a_sum_into_a_nonzero_output_adds_to_it(device, kernel, dtype, sizes):
    """``+=`` into an output already holding values adds the product to them, at every size (0 included)."""
    if refuses(device, svod.dtypes.from_numpy(np.dtype(dtype))):
        return
    x, w, start = _operands(*sizes, dtype)
    out = np.broadcast_to(start, (sizes[0], sizes[2])).copy()
    kernel(out, x, w, device=device)
    np.testing.assert_allclose(out, start + x.astype(np.float64) @ w, rtol=_tolerance(dtype), atol=_tolerance(dtype))


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_numbas_dense_layer_is_its_bias_less_the_product_through_a_relu(device, relu, dtype, sizes):
    """The bias loop, the sum by rows and the ReLU loop, fused: ``max(bias - x @ w, 0)``."""
    if refuses(device, svod.dtypes.from_numpy(np.dtype(dtype))):
        return
    x, w, bias = _operands(*sizes, dtype)
    out = np.full((sizes[0], sizes[2]), 9.0, dtype)
    dense(out, x, w, bias, relu, device=device)
    want = bias - x.astype(np.float64) @ w
    np.testing.assert_allclose(out, np.maximum(want, 0.0) if relu else want, rtol=_tolerance(dtype),
                               atol=_tolerance(dtype))


def _specials(dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of x: a NaN; +inf; +inf against a -inf column; -0.0s only; ordinary numbers."""
    x = np.array([[np.nan, 1.0, 2.0], [np.inf, 1.0, 1.0], [np.inf, 1.0, 0.0], [-0.0, -0.0, -0.0],
                  [1.5, -2.0, 0.25]], dtype)
    w = np.array([[1.0, 2.0, 1.0, -0.0], [1.0, -np.inf, 0.5, -0.0], [1.0, 3.0, 2.0, -0.0]], dtype)
    start = np.array([[-0.0, 0.0, 1.0, -0.0]] * 5, dtype)
    return x, w, start


def _same(actual: np.ndarray, expected: np.ndarray, device: Device) -> None:
    """NaN where Python's is, the same infinities, equal numbers, and on IEEE devices zeros' signs."""
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)])
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-6)
    zeros = expected == 0
    if device.caps.ieee_floats:
        np.testing.assert_array_equal(np.signbit(actual[zeros]), np.signbit(expected[zeros]))


@pytest.mark.parametrize("kernel", PRODUCTS, ids=lambda k: k.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_infinities_and_signed_zeros_are_the_sequential_sums(device, kernel, dtype):
    """NaN and infinities propagate as the loop's own order of additions does (inf - inf is NaN in any order),
    and a -0.0 output plus -0.0 terms stays -0.0 while +0.0 plus them is +0.0."""
    if refuses(device, svod.dtypes.from_numpy(np.dtype(dtype))):
        return
    x, w, start = _specials(dtype)
    want = run_as_python(kernel, start.copy(), x, w)[0]
    out = start.copy()
    kernel(out, x, w, device=device)
    _same(out, want, device)


@svod.kernel
def rounded(out, x, w):
    for i in svod.prange(x.shape[0]):
        for j in range(w.shape[1]):
            for r in range(x.shape[1]):
                out[i, j] += x[i, r] * w[r, j]


def test_a_float64_sum_into_float32_rounds_at_every_store(device):
    """A float64 term added into a float32 element is rounded to float32 at each store, as the loop does:
    held, the element is converted so at every turn (then carried, not reassociated)."""
    if refuses(device, svod.dtypes.float64):
        return
    x = np.array([[1.0, 1e-8, 1e-8, 1e-8, -1.0]] * 3)
    w = np.ones((5, 2))
    out = np.full((3, 2), 0.5, np.float32)
    want = run_as_python(rounded, out.copy(), x, w)[0]
    rounded(out, x, w, device=device)
    np.testing.assert_array_equal(out, want)
    assert want[0, 0] == np.float32(0.5)  # each 1e-8 is lost against 1.5 in float32, not summed first


@svod.kernel
def squared(out, w):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            for r in range(out.shape[1]):
                out[i, j] += out[i, r] * w[r, j]


def test_a_sum_reading_its_own_output_elsewhere_is_the_sequential_loop(device):
    """``out[i, j] += out[i, r] * w[r, j]`` reads other elements of the output as the loop writes them: not held,
    the plain loop's answer."""
    rng = np.random.default_rng(3)
    out = rng.standard_normal((3, 5)).astype(np.float32)
    w = rng.standard_normal((5, 5)).astype(np.float32) / 4
    want = run_as_python(squared, out.copy(), w)[0]
    squared(out, w, device=device)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@svod.kernel
def counted(out, x):
    for i in svod.prange(x.shape[0]):
        for r in range(x.shape[1]):
            out[i] += x[i, r]


def test_an_integer_sum_wraps_as_the_loop_does(device):
    """int32 elements: held and folded, the wrapped sum is the same in any order."""
    x = np.array([[2**31 - 1, 5, -3], [-(2**31), -1, 7], [0, 0, 0]], np.int32)
    out = np.array([10, -10, -(2**31)], np.int32)
    want = run_as_python(counted, out.copy(), x)[0]
    counted(out, x, device=device)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("kernel", PRODUCTS, ids=lambda k: k.name)
def test_an_output_sharing_memory_with_an_operand_is_refused(kernel):
    """Kernel arguments share no memory where one is written (a held element could not see the operand
    change): the call is refused, naming the kernel."""
    a = np.ones((4, 4), np.float32)
    with pytest.raises(SvodError, match="share memory") as raised:
        kernel(a, a, np.ones((4, 4), np.float32))
    assert raised.value.kernel == kernel.name


@pytest.mark.parametrize("kernel", [*PRODUCTS, accumulated], ids=lambda k: k.name)
def test_each_spelling_is_one_store_of_a_sum(kernel):
    """Each spelling builds what the product's lowering takes: one store, of a value with one ADD REDUCE."""
    x, w, bias = _operands(4, 6, 5, np.float32)
    args = (np.zeros((4, 5), np.float32), x, w) + ((bias,) if kernel is accumulated else ())
    sink = kernel.bind(*args).ast
    stores = [u for u in sink.toposort() if u.op is Ops.STORE]
    reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
    assert len(stores) == 1 and len(reduces) == 1 and reduces[0].arg is Ops.ADD


def test_the_dense_layer_is_one_store_of_a_sum():
    x, w, bias = _operands(4, 6, 5, np.float32)
    sink = dense.bind(np.zeros((4, 5), np.float32), x, w, bias, True).ast
    assert [u.op for u in sink.toposort() if u.op in (Ops.STORE, Ops.REDUCE)].count(Ops.STORE) == 1
    assert any(u.op is Ops.REDUCE for u in sink.toposort())


@svod.kernel
def read_after(out, y, b):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = b[j] * (i + 1)
        for j in range(out.shape[1]):
            y[i, j] = out[i, out.shape[1] - 1 - j]
        for j in range(out.shape[1]):
            for _ in range(3):
                out[i, j] += y[i, j]


def test_loops_reading_elements_other_turns_write_are_not_fused(device):
    """A second loop reading the element another turn of the first loop writes: the loops stay apart (a
    kernel's later sum, after those stores, is left as written)."""
    b = np.array([1.0, -2.0, 3.5, 0.25, -0.0], np.float32)
    out, y = np.zeros((3, 5), np.float32), np.zeros((3, 5), np.float32)
    want = run_as_python(read_after, out.copy(), y.copy(), b)
    read_after(out, y, b, device=device)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(y, want[1])


# ---- the rewritings' syntax -------------------------------------------------------------------------------

def _statements(text: str) -> list[ast.stmt]:
    return ast.parse(text).body


def _held(text: str, ndim: int = 1) -> list[ast.stmt] | None:
    return held(_statements(text), "out", svod.dtypes.float32, ndim)


def test_an_element_used_at_two_indices_or_under_an_if_is_not_held():
    assert _held("for r in range(k):\n    out[i] += out[r]") is None
    assert _held("for r in range(k):\n    if c:\n        out[i] += x[r]") is None
    assert _held("for r in range(k):\n    out[i] += x[r]\n    f(out)") is None
    assert _held("for r in range(k):\n    i = r\n    out[i] += x[r]") is None
    assert _held("for r in range(k):\n    out[i, j] += x[r]", 3) is None
    assert _held("for r in prange(k):\n    out[i] += x[r]") is None
    kept = _held("for r in range(k):\n    out[i, j] += x[r]", 2)
    assert kept is not None and [type(s).__name__ for s in kept] == ["Assign", "For", "If"]
    assert ast.unparse(kept[0]) == "out[i, j] = out[i, j] if k > 0 else 0"  # read and stored only where k turns
    written = _held("out[i, j] = 0.0\nfor r in range(k):\n    out[i, j] += x[r]", 2)
    assert written is not None and [type(s).__name__ for s in written] == ["Held", "For", "Assign"]


def test_a_nest_is_interchanged_only_where_each_turn_has_its_own_element():
    nest = "for r in range(k):\n    left = x[r]\n    for j in range(m):\n        out[{}] += left * w[r, j]"
    assert interchanged(_statements(nest.format("i, j"))[0]) is not None
    assert interchanged(_statements(nest.format("i, j // 2"))[0]) is None  # turns of j share elements
    assert interchanged(_statements(nest.format("r, j"))[0]) is None
    assert interchanged(_statements(nest.replace("range(m)", "range(r)").format("i, j"))[0]) is None
    assert interchanged(_statements(nest.replace("x[r]", "out[i, r]").format("i, j"))[0]) is None


def test_loops_are_fused_only_where_each_turn_reads_what_its_own_turn_wrote():
    def joined(first: str, second: str) -> object:
        return fused(_statements(first)[0], _statements(second)[0], lambda call: True)

    assert joined("for j in range(m):\n    out[i, j] = b[j]", "for c in range(m):\n    out[i, c] += 1.0") is not None
    assert joined("for j in range(m):\n    out[i, j] = b[j]", "for j in range(m):\n    out[i, j] += out[i, 0]") is None
    assert joined("for j in range(m):\n    out[i, j] = b[j]", "for j in range(n):\n    out[i, j] += 1.0") is None
    assert joined("for j in range(m):\n    s = b[j]", "for j in range(m):\n    out[i, j] = s") is None
    assert joined("for j in range(m):\n    out[i][j] = b[j]", "for j in range(m):\n    y[i, j] = out[i][m - 1]") is None


# ---- in @svod.jit ------------------------------------------------------------------------------------------

@svod.jit
def jit_dense(out, x, w, bias, relu):
    for i in svod.prange(x.shape[0]):
        for j in range(w.shape[1]):
            out[i, j] = bias[j]
        for r in range(x.shape[1]):
            left = x[i, r]
            for j in range(w.shape[1]):
                out[i, j] += left * w[r, j]
        if relu:
            for j in range(w.shape[1]):
                out[i, j] = max(out[i, j], np.float32(0.0))


@svod.jit
def jit_through_a_view(out, w):
    v = out
    for i in svod.prange(out.shape[0]):
        for j in range(w.shape[1]):
            for r in range(w.shape[0]):
                out[i, j] += v[i, r] * w[r, j]


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("sizes", [(1, 1, 1), (3, 0, 5), (13, 17, 11)], ids=str)
def test_numbas_dense_layer_in_jit(device, relu, sizes):
    x, w, bias = _operands(*sizes, np.float32)
    out = np.full((sizes[0], sizes[2]), 9.0, np.float32)
    jit_dense(out, x, w, bias, relu, device=device)
    want = bias + x.astype(np.float64) @ w
    np.testing.assert_allclose(out, np.maximum(want, 0.0) if relu else want, rtol=1e-4, atol=1e-4)


def test_a_view_of_the_output_read_in_the_sum_is_the_sequential_loop(device):
    """``v = out`` then ``out[i, j] += v[i, r] * w[r, j]``: the sum reads elements the loop writes, through
    another name; the element is not held, and the answer is plain Python's."""
    out = np.arange(16, dtype=np.float32).reshape(4, 4) / 10
    w = np.ones((4, 4), np.float32)
    want = out.copy()
    for i in range(4):
        for j in range(4):
            for r in range(4):
                want[i, j] += want[i, r] * w[r, j]
    jit_through_a_view(out, w, device=device)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_jit_arguments_sharing_memory_are_refused():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(SvodError, match="shares memory"):
        jit_dense(a, a, np.ones((4, 4), np.float32), np.ones(4, np.float32), True)


@svod.kernel
def longer_rows(out, x):
    for i in svod.prange(x.shape[0]):
        for r in range(x.shape[1]):
            out[i] += x[i, r]


@svod.kernel
def longer_rows_backwards(out, x):
    for i in svod.prange(x.shape[0]):
        for r in range(x.shape[1] - 1, 0, -1):
            out[i] += x[i, r]


@pytest.mark.parametrize("kernel", [longer_rows, longer_rows_backwards], ids=lambda k: k.name)
@pytest.mark.parametrize("columns", [0, 1, 3])
def test_a_sum_of_no_terms_never_touches_its_element(device, kernel, columns):
    """With no terms Python never reads ``out[i]``, so an ``out`` shorter than ``x``'s rows is no error; with
    terms the element is read, and past its end that is refused."""
    x = np.arange(5 * columns, dtype=np.float32).reshape(5, columns)
    out = np.full(2, 0.5, np.float32)
    if len(range(columns) if kernel is longer_rows else range(columns - 1, 0, -1)):
        with pytest.raises(svod.errors.IndexOutOfBoundsError):
            kernel(out, x, device=device)
        return
    kernel(out, x, device=device)
    np.testing.assert_array_equal(out, [0.5, 0.5])
    fits = np.full(5, 0.5, np.float32)
    kernel(fits, x, device=device)
    np.testing.assert_array_equal(fits, run_as_python(kernel, np.full(5, 0.5, np.float32), x)[0])


@svod.kernel
def marked_first(out, seen, x):
    for i in svod.prange(x.shape[0]):
        seen[i] = 1.0
        for r in range(x.shape[1]):
            out[i] += x[i, r]


def test_a_store_into_another_array_first_still_reads_the_element(device):
    """The block's first statement stores into ``seen``, not ``out``: ``out[i]`` is still read before the sum."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out, seen = np.array([5.0, -1.0, 0.25], np.float32), np.zeros(3, np.float32)
    want = run_as_python(marked_first, out.copy(), seen.copy(), x)
    marked_first(out, seen, x, device=device)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(seen, want[1])


@svod.kernel
def renamed_after(out, last, bias):
    for i in svod.prange(out.shape[0]):
        j = -1
        for c in range(out.shape[1]):
            out[i, c] = bias[c]
        for j in range(out.shape[1]):
            out[i, j] = max(out[i, j], 0.0)
        last[i] = j


@pytest.mark.parametrize("columns", [0, 1, 3])
def test_a_fused_loops_variable_keeps_its_last_value(device, columns):
    """Fusing renames the ReLU loop's ``j`` as the bias loop's ``c``; ``j`` read after the loops is still the
    last turn's (or, with no turns, its value before)."""
    bias = np.array([1.0, -2.0, 3.0], np.float32)[:columns]
    out, last = np.full((2, columns), 7.0, np.float32), np.zeros(2, np.float32)
    want = run_as_python(renamed_after, out.copy(), last.copy(), bias)
    renamed_after(out, last, bias, device=device)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(last, want[1])


@svod.kernel
def swapped_after(out, x, w, last):
    for i in svod.prange(x.shape[0]):
        r, j = -1, -1
        for r in range(x.shape[1]):
            left = x[i, r]
            for j in range(w.shape[1]):
                out[i, j] += left * w[r, j]
        last[i, 0] = r
        last[i, 1] = j


@pytest.mark.parametrize("sizes", [(2, 0, 3), (2, 3, 0), (2, 3, 2)], ids=str)
def test_an_interchanged_nests_variables_keep_their_last_values(device, sizes):
    """Python's ``r`` after the nest is the last row's however many columns there are, and ``j`` is unchanged
    when there are no rows: the interchange (``j`` outside) must not change either."""
    n, k, m = sizes
    x, w = np.ones((n, k), np.float32), np.ones((k, m), np.float32)
    out, last = np.zeros((n, m), np.float32), np.zeros((n, 2), np.float32)
    want = run_as_python(swapped_after, out.copy(), x, w, last.copy())
    swapped_after(out, x, w, last, device=device)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_array_equal(last, want[3])
