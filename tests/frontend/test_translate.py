"""Python kernels (``@svod.kernel``), construct by construct, on every device, against numpy: loops (parallel,
sequential, triangular, repeating a body that ignores its variable), reductions, locals, if, values, math,
atomics, helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.device import Device
from svod.frontend.oracle import run_as_python
from svod.ir import Ops
from tests.helpers import FLOAT_DIVIDENDS, FLOAT_DIVISORS, ieee_inputs, refuses

PRIMES = [1, 7, 13]


def _rng() -> np.random.Generator:
    return np.random.default_rng(30)


@svod.kernel
def axpb(out, x, a, b):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * a + b


@pytest.mark.parametrize("n", PRIMES)
def test_elementwise_with_scalars(device, n):
    x = _rng().standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    axpb(out, x, 2.5, 3, device=device)  # a float scalar (float64 unless annotated), an int variable
    np.testing.assert_allclose(out, (x.astype(np.float64) * 2.5 + 3).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("a", [1e30, -1e300, math.inf, math.nan, 5e-324])
def test_a_float_argument_takes_any_float(device, a):
    """A float argument travels as its bits: no value of it is out of range (an int's bounds are not its). A
    device that may assume floats finite is compared where the argument and the results are finite."""
    x = np.array([0.0, 1.0, -2.0], np.float64)
    if refuses(device, dtypes.float64):
        return
    out = np.zeros_like(x)
    axpb(out, x, a, 1, device=device)
    want = run_as_python(axpb, np.zeros_like(x), x, a, 1)[0]
    keep = ieee_inputs(device, want) & ieee_inputs(device, np.full_like(x, a))
    np.testing.assert_array_equal(out[keep], want[keep])


@svod.kernel
def rows(total, biggest, smallest, product, x):
    n, m = x.shape
    for r in svod.prange(n):
        s = 0.0
        top = -svod.inf
        low = math.inf
        p = 1.0
        for c in range(m):
            s += x[r, c]
            top = max(top, x[r, c])
            low = min(x[r, c], low)
            p *= x[r, c]
        total[r] = s
        biggest[r] = top
        smallest[r] = low
        product[r] = p


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (3, 64)])
def test_reductions_sum_max_min_product(device, shape):
    x = (_rng().random(shape) + 0.5).astype(np.float32)
    got = [np.zeros(shape[0], np.float32) for _ in range(4)]
    rows(*got, x, device=device)
    np.testing.assert_allclose(got[0], x.sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(got[1], x.max(axis=1))
    np.testing.assert_array_equal(got[2], x.min(axis=1))
    np.testing.assert_allclose(got[3], x.prod(axis=1), rtol=1e-5)


@svod.kernel
def extremes(out, a, b):
    for i in svod.prange(a.shape[0]):
        out[i, 0] = max(a[i], b[i])
        out[i, 1] = max(b[i], a[i])
        out[i, 2] = min(a[i], b[i])
        out[i, 3] = min(b[i], a[i], 0.5)
        out[i, 4] = np.maximum(a[i], b[i])
        out[i, 5] = np.minimum(b[i], a[i])
        out[i, 6] = np.fmax(a[i], b[i])
        out[i, 7] = np.fmin(a[i], b[i])


def _same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values, NaN where NaN, and zeros of the same sign."""
    np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


def test_max_and_min_of_floats_mean_what_python_and_numpy_say(device):
    """Python's ``max(a, b)`` is ``b`` only where ``b > a``: a NaN first stays, a NaN second loses, and of equal
    zeros the first is kept. ``np.maximum`` lets a NaN win and keeps the second of equal zeros; ``np.fmax``
    ignores a NaN (of equal zeros numpy's own picks either, by array length). Each pair of special values,
    both ways round, against the function run as plain Python."""
    specials = np.array([np.nan, 1.0, -0.0, 0.0, -np.inf, np.inf, 2.5, -3.0], np.float32)
    a, b = (m.ravel() for m in np.meshgrid(specials, specials))
    keep = ieee_inputs(device, a) & ieee_inputs(device, b)
    out = np.zeros((a.size, 8), np.float32)
    want = run_as_python(extremes, out, a, b)[0]
    extremes(out, a, b, device=device)
    if not device.caps.ieee_floats:  # a NaN may be assumed away there: the columns that ignore it (README)
        keep &= ~np.isnan(want[:, 0]) & ~np.isnan(want[:, 1])
    _same_bits(out[keep, :6], want[keep, :6])
    np.testing.assert_array_equal(out[keep, 6:], want[keep, 6:])  # numpy's own fmax orders zeros either way


@svod.kernel
def row_extremes(out, x, start):
    for r in svod.prange(x.shape[0]):
        first, ifs, later, low = start, start, start, start
        for c in range(x.shape[1]):
            first = max(first, x[r, c])
            if x[r, c] > ifs:  # noqa: PLR1730 (the spelling under test)
                ifs = x[r, c]
            later = max(x[r, c], later)  # not a fold: a NaN x replaces it, the next x replaces the NaN
            low = min(low, x[r, c])
        out[r, 0], out[r, 1], out[r, 2], out[r, 3] = first, ifs, later, low


@pytest.mark.parametrize("start", [-math.inf, math.nan, 0.25])
@pytest.mark.parametrize("columns", [0, 1, 5, 67])
def test_a_max_loop_keeps_pythons_meaning_of_nan(device, start, columns):
    """``m = max(m, x)`` (and ``if x > m: m = x``) is a MAX reduction: the NaNs among the terms lose, a NaN
    start stays NaN, and a start no term passes is kept (-inf over no terms or NaNs only); ``max(x, m)`` is
    carried turn by turn. Rows: NaN first, in the middle, last, NaN only, none. A device that may assume
    floats finite is compared on the rows without a NaN or an infinity, in or out."""
    x = _rng().standard_normal((6, columns)).astype(np.float32)
    if columns:
        x[0, 0] = x[1, columns // 2] = x[2, -1] = np.nan
        x[3] = np.nan
    out = np.zeros((6, 4), np.float32)
    want = run_as_python(row_extremes, out, x, start)[0]
    row_extremes(out, x, start, device=device)
    finite_start = bool(ieee_inputs(device, np.array([start], np.float32))[0])
    rows = ieee_inputs(device, x).all(axis=1) & ieee_inputs(device, want).all(axis=1) & finite_start
    _same_bits(out[rows], want[rows])


def test_a_max_loop_is_a_reduction_and_max_the_other_way_round_is_not():
    """``max(m, x)`` and ``if x > m: m = x`` build one and the same MAX reduction; ``max(x, m)`` none."""
    graph = row_extremes.build(np.zeros((2, 4), np.float32), np.zeros((2, 3), np.float32), 0.0)
    assert sorted(u.arg.name for u in graph.toposort() if u.op is Ops.REDUCE) == ["MAX", "MIN"]


@svod.kernel
def offset_sum(out, x):
    for r in svod.prange(x.shape[0]):
        s = 10.0  # not the identity of a sum: added to it
        for c in range(x.shape[1]):
            s -= x[r, c]
        out[r] = s


def test_a_reduction_from_any_start(device):
    x = _rng().random((5, 9)).astype(np.float32)
    out = np.zeros(5, np.float32)
    offset_sum(out, x, device=device)
    np.testing.assert_allclose(out, 10.0 - x.sum(axis=1), rtol=1e-5)


@svod.kernel
def gated_sum(out, x, limit):
    for r in svod.prange(x.shape[0]):
        s = 0
        for c in range(x.shape[1]):
            if x[r, c] > limit:
                s += x[r, c]
            elif x[r, c] < -limit:
                s += 1
        out[r] = s


def test_a_reduction_under_if_and_elif(device):
    x = _rng().integers(-9, 10, (6, 11)).astype(np.int32)
    out = np.zeros(6, np.int32)
    gated_sum(out, x, 4, device=device)
    want = np.where(x > 4, x, 0).sum(axis=1) + (x < -4).sum(axis=1)
    np.testing.assert_array_equal(out, want)


@svod.kernel
def prefix_sums(out, x):
    n = x.shape[0]
    for i in svod.prange(n):
        s = 0.0
        for k in range(i + 1):
            s += x[k]
        out[i] = s


@svod.kernel
def upper_sums(out, x):
    n = x.shape[0]
    for i in svod.prange(n):
        s = 0.0
        for j in range(i + 1, n):
            s += x[j]
        out[i] = s


@svod.kernel
def lower_triangle(out, x):
    n = x.shape[0]
    for i in svod.prange(n):
        for j in svod.prange(i + 1):  # a rectangle with a guard
            out[i, j] = x[i, j] * 2.0


@svod.kernel
def suffix_sums_under_a_triangle(out, x):
    n = x.shape[0]
    for i in svod.prange(n):
        for j in svod.prange(i + 1):
            s = 0.0
            for k in range(j, n):  # its turns, n - j, simplified with the guarded range's end
                s += x[k]
            out[i, j] = s


@pytest.mark.parametrize("n", PRIMES)
def test_a_sum_over_a_triangular_range_s_index_is_one_loop(device, n):
    """A loop whose turns count with the index of a ``prange(i + 1)`` runs inside that one range: the kernel
    has one range per loop, and every element of the triangle is its suffix sum, as Python computes it."""
    x = _rng().standard_normal(n).astype(np.float32)
    out = np.full((n, n), 7.0, np.float32)
    ast = suffix_sums_under_a_triangle.build(out, x)
    loops = [u.arg for u in ast.toposort() if u.op is Ops.RANGE]
    assert len(loops) == len(set(loops))
    want = run_as_python(suffix_sums_under_a_triangle, out, x)[0]
    suffix_sums_under_a_triangle(out, x, device=device)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(want, np.where(np.tri(n, dtype=bool), [x[j:].sum() for j in range(n)], 7.0),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", PRIMES)
def test_triangular_loops(device, n):
    x = _rng().standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    prefix_sums(out, x, device=device)
    np.testing.assert_allclose(out, np.cumsum(x), rtol=1e-5, atol=1e-5)
    upper_sums(out, x, device=device)
    want = np.array([x[i + 1:].sum() for i in range(n)], np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    square = _rng().standard_normal((n, n)).astype(np.float32)
    got = np.full((n, n), 7.0, np.float32)
    lower_triangle(got, square, device=device)
    np.testing.assert_array_equal(got, np.where(np.tri(n, dtype=bool), square * 2, 7.0).astype(np.float32))


@svod.kernel
def doubling(x, times):
    for i in svod.prange(x.shape[0]):
        for _ in range(times):  # the body does not use the loop variable: it still runs every turn
            x[i] = x[i] * 2


@pytest.mark.parametrize("times", [0, 1, 5])
def test_a_loop_repeats_a_body_that_ignores_its_variable(device, times):
    x = np.arange(1, 8, dtype=np.int32)
    doubling(x, times, device=device)
    np.testing.assert_array_equal(x, np.arange(1, 8, dtype=np.int32) << times)


@svod.kernel
def stepping(out, x):
    n = x.shape[0]
    for i in svod.prange(n):
        s = 0
        for k in range(n - 1, -1, -2):  # a negative constant step
            s += x[k] * (k + 1)
        out[i] = s + i


def test_a_range_with_a_step(device):
    x = np.arange(9, dtype=np.int32)
    out = np.zeros(9, np.int32)
    stepping(out, x, device=device)
    want = sum(int(x[k]) * (k + 1) for k in range(8, -1, -2))
    np.testing.assert_array_equal(out, want + np.arange(9))


@svod.kernel
def locals_and_branches(out, x):
    n, m = x.shape
    for i in svod.prange(n):
        for j in svod.prange(m):
            v = x[i, j]
            a, b = v * 2, v + 1
            if v > 0:
                w = a
            elif v < -1:
                w = b
            else:
                w = 0
            w += 1
            out[i, j] = w if j % 2 == 0 else -w


def test_locals_if_elif_else_and_conditional_values(device):
    x = _rng().integers(-5, 6, (4, 7)).astype(np.int32)
    out = np.zeros_like(x)
    locals_and_branches(out, x, device=device)
    w = np.where(x > 0, x * 2, np.where(x < -1, x + 1, 0)) + 1
    np.testing.assert_array_equal(out, np.where(np.arange(7) % 2 == 0, w, -w))


@svod.kernel
def gated_stores(out, x):
    for i in svod.prange(x.shape[0]):
        if x[i] > 0 and i % 3 != 0:
            out[i] = x[i]
        else:
            out[i] += 100


def test_gated_stores_and_augmented_array_stores(device):
    x = _rng().integers(-3, 4, 10).astype(np.int32)
    out = np.ones(10, np.int32)
    gated_stores(out, x, device=device)
    keep = (x > 0) & (np.arange(10) % 3 != 0)
    np.testing.assert_array_equal(out, np.where(keep, x, 101))


@svod.kernel
def in_order(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = 1.0
        out[i] = out[i] + x[i]
        out[i] *= 3.0


def test_reads_and_writes_of_one_array_follow_program_order(device):
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    in_order(out, x, device=device)
    np.testing.assert_array_equal(out, (1 + x) * 3)


@svod.kernel
def integer_ops(out, a, b):
    for i in svod.prange(a.shape[0]):
        x, y = a[i], b[i]
        out[0, i] = x // y
        out[1, i] = x % y
        out[2, i] = (x & 6) | (y ^ 3)
        out[3, i] = (x << 2) >> 1
        out[4, i] = ~x
        out[5, i] = abs(x) + min(x, y, 2) + max(x, y)
        out[6, i] = 1 if (x > y or not x < 0) else 0
        out[7, i] = x ** 2 if False else x * x  # a constant condition keeps one side


def test_integer_operators_follow_python(device):
    """``//`` and ``%`` floor, as Python's (the IR's IDIV and MOD truncate, as C's)."""
    a = np.array([7, -7, 7, -7, 0, 5, -2**31, 2**31 - 1], np.int32)
    b = np.array([3, 3, -3, -3, 2, 5, 7, -2], np.int32)
    out = np.zeros((8, 8), np.int32)  # out[k, i], not out[i, k]: see test_pykernel's symbolic sizes test
    integer_ops(out, a, b, device=device)
    with np.errstate(over="ignore"):
        want = np.stack([a // b, a % b, (a & 6) | (b ^ 3), (a << 2) >> 1, ~a,
                         abs(a) + np.minimum(np.minimum(a, b), 2) + np.maximum(a, b), ((a > b) | (a >= 0)), a * a], 0)
    np.testing.assert_array_equal(out, want.astype(np.int32))


@svod.kernel
def integer_division_and_powers(out, a, b):
    for i in svod.prange(a.shape[0]):
        out[0, i] = a[i] // b[i]
        out[1, i] = a[i] % b[i]
        out[2, i] = a[i] // 0
        out[3, i] = a[i] ** 3 + 2 ** i + (i + 1) ** 0
        out[4, i] = a[i] ** abs(b[i] % 5)


def test_integer_division_by_zero_and_integer_powers_follow_numpys_scalars(device):
    """``//`` and ``%`` by zero give 0, as NumPy's integer scalars do (Python raises; the IR's IDIV gives the
    dividend); ``**`` of integers wraps as NumPy's does, by a constant or by a value never negative."""
    a = np.array([5, -7, 0, -2**31, 3, 2**31 - 1, 1, -1], np.int32)
    b = np.array([0, 0, 0, -1, 40, 7, -3, 2], np.int32)
    out = np.zeros((5, a.size), np.int64)  # Python's sums of int32 and Python ints pass int32
    if refuses(device, dtypes.int64):
        return
    want = run_as_python(integer_division_and_powers, out.copy(), a, b)[0]
    integer_division_and_powers(out, a, b, device=device)
    np.testing.assert_array_equal(out, want)
    assert want[2].tolist() == [0] * a.size and want[0, 0] == 0


@svod.kernel
def signed_against_unsigned(out, s, u):
    for i in svod.prange(s.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = s[i] < u[i], s[i] <= u[i], s[i] > u[i]
        out[i, 3], out[i, 4], out[i, 5] = s[i] >= u[i], s[i] == u[i], s[i] != u[i]
        out[i, 6], out[i, 7], out[i, 8] = u[i] < s[i], u[i] >= s[i], u[i] == s[i]


def test_int64_and_uint64_compare_exactly(device):
    """No integer type holds both, so arithmetic between them is float64 (NumPy's promotion); a comparison
    is exact, as NumPy 2's, not rounded past 2**53."""
    if refuses(device, dtypes.int64) or refuses(device, dtypes.uint64):
        return
    big = 2**63 - 1
    s = np.array([big, -1, 5, 2**53 + 1, 2**53, -big - 1, 0, big], np.int64)
    u = np.array([2**63, 2**64 - 1, 5, 2**53, 2**53 + 1, 0, 0, big], np.uint64)
    out = np.zeros((s.size, 9), np.int32)
    want = run_as_python(signed_against_unsigned, out.copy(), s, u)[0]
    signed_against_unsigned(out, s, u, device=device)
    np.testing.assert_array_equal(out, want)
    assert want[0, 0] == 1 and want[3, 2] == 1  # float64 has them equal


@svod.kernel
def against_numbers_beyond(out, u, s):
    for i in svod.prange(u.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = u[i] < 300, 256 <= u[i], u[i] == -1  # noqa: SIM300 (the number first, on purpose)
        out[i, 3], out[i, 4], out[i, 5] = s[i] > -129, -200 >= s[i], s[i] != 2**70  # noqa: SIM300


def test_an_integer_compared_with_a_number_its_dtype_does_not_hold_is_answered(device):
    """NumPy 2 compares ``x_u8 < 300`` (arithmetic with 300 it refuses): known without reading the element."""
    if refuses(device, dtypes.uint8) or refuses(device, dtypes.int8):
        return
    u = np.array([0, 5, 255], np.uint8)
    s = np.array([-128, 0, 127], np.int8)
    out = np.zeros((3, 6), np.int32)
    want = run_as_python(against_numbers_beyond, out.copy(), u, s)[0]
    against_numbers_beyond(out, u, s, device=device)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(want, [[1, 0, 0, 1, 0, 1]] * 3)


@svod.kernel
def negative_power(out, a, b):
    for i in svod.prange(a.shape[0]):
        out[i] = a[i] ** b[i]


def test_an_integer_to_a_power_that_may_be_negative_is_refused():
    a = np.arange(3, dtype=np.int32)
    with pytest.raises(svod.errors.KernelSyntaxError, match="may be negative"):
        negative_power(a.copy(), a, a)


@svod.kernel
def float_division(q, r, a, b):
    for i in svod.prange(a.shape[0]):
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_float_floor_division_and_remainder(device, dtype):
    """Python's float ``//`` and ``%`` bit for bit, as NumPy computes them: the remainder takes the divisor's
    sign (a zero one too), the quotient is the floor of the exact one, an infinite dividend gives NaN, and a
    quotient past the float's precision leaves a remainder below the divisor (``7.1e109 % 100`` is 92, not
    ``a - floor(a / b) * b``'s -8e93). A zero divisor gives NumPy's ``a / b`` and NaN (Python raises)."""
    if refuses(device, dtype):
        return
    pairs = np.array([(a, b) for a in FLOAT_DIVIDENDS for b in FLOAT_DIVISORS], np.float64)
    with np.errstate(all="ignore"):
        a, b = pairs[:, 0].astype(dtype.numpy), pairs[:, 1].astype(dtype.numpy)
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    q, r = np.zeros_like(a), np.zeros_like(a)
    float_division(q, r, a, b, device=device)
    if dtype == dtypes.float64:  # NumPy's are Python's wherever Python divides
        divides = b != 0
        python = [(x // y, x % y) for x, y in zip(a[divides].tolist(), b[divides].tolist(), strict=True)]
        np.testing.assert_array_equal(np.array(python), np.stack([want_q[divides], want_r[divides]], 1))
    compared = ieee_inputs(device, a) & ieee_inputs(device, b) & ieee_inputs(device, want_q) \
        & ieee_inputs(device, want_r)
    for got, want in ((q, want_q), (r, want_r)):
        same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
        assert same[compared].all(), list(zip(a[compared & ~same], b[compared & ~same], got[compared & ~same],
                                              want[compared & ~same], strict=True))


@svod.kernel
def true_division(out, a, b):
    for i in svod.prange(a.shape[0]):
        out[i] = a[i] / b[i]


def test_division_of_integers_is_float64(device):
    """As in Python: ``1 / 3`` of two int32 values is a float64 (float32 on a device without float64)."""
    a, b = np.array([1, -7, 2**31 - 1], np.int32), np.array([3, 2, 3], np.int32)
    dtype = np.float64 if dtypes.float64 in device.caps.element_dtypes else np.float32
    out = np.zeros(3, dtype)
    true_division(out, a, b, device=device)
    np.testing.assert_array_equal(out, (a.astype(dtype) / b.astype(dtype)))


@svod.kernel
def float32_meets_ints(out, x, n32):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * i + x[i] * n32[i] + x[i] * 3


def test_a_float32_meeting_an_integer_computes_as_numpy_does(device):
    """NumPy's promotion, as numba's: float32 with int64 (a loop variable) or int32 is float64; a Python int is
    weak, float32 times 3 stays float32 (where the device has float64: WebGPU computes float32)."""
    x, n32 = np.full(5, 0.1, np.float32), np.arange(7, 12, dtype=np.int32)
    wide = dtypes.float64 in device.caps.element_dtypes
    out = np.zeros(5, np.float64 if wide else np.float32)
    if refuses(device, dtypes.from_numpy(out.dtype)):
        return
    float32_meets_ints(out, x, n32, device=device)
    i = np.arange(5)
    want = x * i + x * n32 + x * np.float32(3) if wide else \
        (x * i.astype(np.float32) + x * n32.astype(np.float32) + x * np.float32(3)).astype(np.float32)
    assert want.dtype == out.dtype
    np.testing.assert_allclose(out, want, rtol=0 if wide else 1e-6)  # a GPU may fuse a product with its sum


def python_numbers_meet_arrays(out, x, counts, alpha, k):
    n = x.shape[0]
    for i in svod.prange(n):
        out[0, i] = x[i] * (1.0 / n)
        out[1, i] = x[i] * alpha
        out[2, i] = counts[i] * k + n


@pytest.mark.parametrize("static", [False, True], ids=["sizes", "static"])
def test_sizes_and_python_number_arguments_are_weak_as_in_python(device, static):
    """A size is a Python int and a number argument a Python int or float, in plain Python as with
    ``static_shapes``: each takes the dtype of the float it meets (NEP 50), and ``x_f32[i] * (1.0 / n)`` is a
    float32 product whether the size is a variable of the kernel or one of its constants. Meeting an int32, either
    is NumPy 2's int32 (the argument held to int32's values): ``counts_i32[i] * k + n`` wraps in int32, as plain
    Python does."""
    kernel = svod.kernel(python_numbers_meet_arrays, static_shapes=static)
    x = np.array([1.0, 3.0, 0.1], np.float32)
    counts = np.array([2**30, 7, -(2**30)], np.int32)
    out = np.zeros((3, 3), np.float64)
    if refuses(device, dtypes.float64):
        return
    want = run_as_python(kernel, out, x, counts, 1 / 3, 4)[0]
    assert want[0, 0] == np.float32(1 / 3)
    kernel(out, x, counts, 1 / 3, 4, device=device)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out[2], (counts * np.int32(4)).astype(np.int64) + 3)


def test_a_python_float_and_a_numpy_float64_argument_are_two_kernels(device):
    """``1 / 3`` is weak and ``np.float64(1 / 3)`` typed: one dtype, but the first makes ``x_f32[i] * alpha`` a
    float32 product and the second a float64 one, called in either order on one kernel."""
    if refuses(device, dtypes.float64):
        return
    kernel = svod.kernel(python_numbers_meet_arrays)
    x, counts = np.array([1.0, 3.0, 0.1], np.float32), np.array([1, 2, 3], np.int32)
    for alpha in (1 / 3, np.float64(1 / 3), 1 / 3):
        out = np.zeros((3, 3), np.float64)
        kernel(out, x, counts, alpha, 4, device=device)
        np.testing.assert_array_equal(out[1], run_as_python(kernel, out, x, counts, alpha, 4)[0][1])


def typed_and_weak_mixed(out, x, codes, alpha, beta: float):
    n = x.shape[0]
    total = np.float64(0.0)
    for j in range(n):
        total += x[j]
    for i in svod.prange(n):
        scale = 1.0 / n if x[i] > 0 else 0.5
        out[0, i] = x[i] * np.float64(alpha)
        out[1, i] = x[i] * scale + x[i] * beta
        out[2, i] = total
        out[3, i] = min(codes[i], n - 1)


def test_what_the_kernel_types_stays_typed_and_a_size_is_not_narrowed(device):
    """A conversion the kernel writes is a numpy scalar, typed: ``np.float64(0.0)`` sums float32 elements in
    float64 and ``x_f32[i] * np.float64(alpha)`` is a float64 product. A ``where`` of weak values is weak
    whatever its condition reads, and a ``float`` hint changes nothing. A size meeting a uint8 unifies
    (``min(codes_u8[i], n - 1)`` is 299, not 299 wrapped to 43)."""
    if refuses(device, dtypes.float64) or refuses(device, dtypes.uint8):
        return
    kernel = svod.kernel(typed_and_weak_mixed)
    n = 300
    x = np.full(n, 0.1, np.float32)
    x[1] = -3.0
    codes = np.full(n, 255, np.uint8)
    out = np.zeros((4, n), np.float64)
    want = run_as_python(kernel, out, x, codes, 1 / 3, 1 / 7)[0]
    kernel(out, x, codes, 1 / 3, 1 / 7, device=device)
    np.testing.assert_array_equal(out[:2], want[:2])
    np.testing.assert_allclose(out[2], want[2], rtol=1e-12)  # a float64 sum, in whatever order
    assert want[2, 0] != np.float32(want[2, 0]) and out[3, 0] == 255 and want[3, 0] == 255
    np.testing.assert_array_equal(out[3], want[3])

@svod.kernel
def below_the_size(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] < x.shape[0]


def test_a_narrow_integer_compared_with_a_size_is_compared_exactly(device):
    """A weak size meeting a uint8 is not narrowed to uint8 in a comparison (300 would be 44): NumPy compares a
    Python int beyond a dtype's range exactly."""
    x = (np.arange(300) % 256).astype(np.uint8)
    out = np.zeros(300, np.int32)
    if refuses(device, dtypes.uint8):
        return
    below_the_size(out, x, device=device)
    np.testing.assert_array_equal(out, run_as_python(below_the_size, np.zeros(300, np.int32), x)[0])
    assert out.all()


@svod.kernel
def stored_converted(ints, small):
    for i in svod.prange(ints.shape[0]):
        ints[i] = 2.5
        small[i] = ints[i] - 3


def test_a_stored_value_is_converted_to_the_arrays_dtype(device):
    """A value the kernel computes is converted as a cast converts it (a Python int the dtype does not hold is
    refused instead: ``test_arithmetic``)."""
    if refuses(device, dtypes.uint8):
        return
    ints, small = np.zeros(3, np.int32), np.zeros(3, np.uint8)
    stored_converted(ints, small, device=device)
    np.testing.assert_array_equal(ints, [2, 2, 2])  # truncated, as numpy's assignment
    np.testing.assert_array_equal(small, [255, 255, 255])  # wrapped, as a cast


@svod.func
def sigmoid(v):
    return 1.0 / (1.0 + svod.math.exp(-v))


@svod.func
def store_twice(out, i, v):
    out[6, i] = v
    out[7, i] = v * 2.0


@svod.kernel
def math_kernel(out, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        out[0, i] = svod.math.exp(v) + math.sqrt(abs(v)) + np.tanh(v)
        out[1, i] = svod.math.log(abs(v) + 1.0) + svod.math.sin(v) * svod.math.cos(v)
        out[2, i] = sigmoid(v) + v ** 2.0
        out[3, i] = svod.math.floor(v) + math.ceil(v) + svod.math.trunc(v) + svod.math.round(v) * math.pi
        out[4, i] = svod.math.pow(abs(v), 1.5) + svod.math.erf(v) + svod.math.rsqrt(abs(v) + 1.0)
        out[5, i] = svod.float32(svod.int32(v * 10.0)) + float(2) + int(3.7)
        store_twice(out, i, svod.math.clamp(v, -0.5, 0.5))


def test_math_functions_helpers_and_casts(device):
    x = np.array([-1.7, -0.3, 0.0, 0.4, 2.2, 3.5], np.float32)
    out = np.zeros((8, 6), np.float32)
    math_kernel(out, x, device=device)
    v = x.astype(np.float64)
    clamped = np.clip(v, -0.5, 0.5)
    erf = np.vectorize(math.erf)(v)
    want = np.stack([np.exp(v) + np.sqrt(abs(v)) + np.tanh(v), np.log(abs(v) + 1) + np.sin(v) * np.cos(v),
                     1 / (1 + np.exp(-v)) + v ** 2, np.floor(v) + np.ceil(v) + np.trunc(v) + np.round(v) * math.pi,
                     abs(v) ** 1.5 + erf + 1 / np.sqrt(abs(v) + 1), np.trunc(v * 10) + 5, clamped, clamped * 2], 0)
    tolerance = 1e-5 if device.caps.ieee_floats else 3e-3
    np.testing.assert_allclose(out, want.astype(np.float32), rtol=tolerance, atol=tolerance)


@svod.kernel
def searched_with_else(out, x, limit):
    for i in svod.prange(out.shape[0]):
        found = -1.0
        for j in range(i + 1):
            if x[j] > limit:
                found = j * 1.0
                break
            if x[j] < -limit:
                continue
        else:
            found = found - 100.0
        k = 0
        for v in x:
            if v > limit * 2.0:
                break
        else:
            k += 1000
        out[i] = found + k


@pytest.mark.parametrize("limit", [-1.0, 0.5, 2.0, 100.0])
def test_a_loops_else_runs_where_no_break_of_its_own_ended_it(device, limit):
    """``for ... else`` as Python runs it (numba's too): the else after the loop, unless a ``break`` of that loop
    ended it (a ``continue`` does not, nor a break of a loop inside it); once refused in every kernel. (``while
    ... else``: ``test_while``.)"""
    x = np.array([0.25, -3.0, 0.5, 1.5, 2.5, -0.75, 4.5], np.float32)
    out = np.zeros(x.size, np.float32)
    searched_with_else(out, x, limit, device=device)
    np.testing.assert_array_equal(out, run_as_python(searched_with_else, np.zeros_like(out), x, limit)[0])


@svod.kernel
def prange_with_else(out):
    for i in svod.prange(out.shape[0]):
        out[i] = 1.0
        if i > 5:
            break
    else:
        out[0] = 2.0


def test_a_pranges_else_is_refused_at_its_line():
    with pytest.raises(svod.errors.KernelSyntaxError, match=r"a svod\.prange's else is not supported") as err:
        prange_with_else(np.zeros(3))
    assert f"{__file__}:" in str(err.value)


@svod.kernel
def rounded(out, x):
    for i in svod.prange(x.shape[0]):
        out[0, i] = round(x[i])
        out[1, i] = round(x[i] * 2.0) - round(i + 0.5) + round(-2.5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_round_is_pythons_an_int_of_a_half_to_even(device, dtype):
    """``round(x)``: the nearest int, a half to the even one (Python's and ``np.rint``'s), an int that a float
    output stores; once refused as an unknown name. A device that cannot hold the input's dtype refuses the
    kernel, saying so."""
    values = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -2.6, 7.0, -0.0, 1e6 + 0.5, 3.25]
    x = np.array(values).astype(dtype)
    out = np.zeros((2, x.size), np.float32 if refuses(device, dtypes.float64) else np.float64)
    if refuses(device, dtypes.from_numpy(np.dtype(dtype))):
        with pytest.raises(svod.errors.GraphError, match=f"cannot hold {np.dtype(dtype).name}"):
            rounded(out, x, device=device)
        return
    rounded(out, x, device=device)
    np.testing.assert_array_equal(out, run_as_python(rounded, np.zeros_like(out), x)[0])
    np.testing.assert_array_equal(out[0], np.rint(x.astype(np.float64)))


@svod.kernel
def rounded_to_places(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = round(x[i], 2)


def test_round_to_decimal_places_is_refused_with_what_to_write():
    with pytest.raises(svod.errors.KernelSyntaxError, match=r"round\(x, ndigits\) is not supported in a kernel"):
        rounded_to_places(np.zeros(3), np.ones(3))


@svod.kernel
def remainders(out, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        out[0, i] = math.fmod(v, 0.75)
        out[1, i] = np.fmod(v * 1e30, 0.5)
        out[2, i] = svod.math.fmod(-v, i)


def test_fmod_as_math_numpy_and_svod_spell_it(device):
    """C's ``fmod``: the dividend's sign, exact where the quotient is far past the float's precision."""
    x = np.array([-1.7, -0.3, 0.0, 0.4, 2.2, 3.5], np.float32)
    out = np.zeros((3, 6), np.float32)
    remainders(out, x, device=device)
    with np.errstate(all="ignore"):
        want = np.stack([np.fmod(x, np.float32(0.75)), np.fmod(x * np.float32(1e30), np.float32(0.5)),
                         np.fmod(-x, np.arange(6, dtype=np.float32))])
    compared = ieee_inputs(device, want)
    np.testing.assert_array_equal(out[compared], want[compared])


@svod.kernel
def float_classes(out, x, y):
    for i in svod.prange(x.shape[0]):
        out[i, 0] = np.isnan(x[i])
        out[i, 1] = np.isinf(x[i])
        out[i, 2] = np.isfinite(x[i])
        out[i, 3] = math.isnan(x[i]) or math.isinf(y[i])
        out[i, 4] = np.logical_and(x[i] > 0, y[i])
        out[i, 5] = np.logical_or(np.isnan(y[i]), x[i])
        out[i, 6] = np.logical_xor(x[i] < 0, y[i] < 0)
        out[i, 7] = np.logical_not(x[i]) ^ np.isfinite(y[i])
        out[i, 8] = np.signbit(x[i])


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8],
                         ids=lambda d: d.name)
def test_numpys_float_classes_and_logical_functions_from_the_bits(device, dtype):
    """``np.isnan``/``isinf``/``isfinite`` (and ``math``'s) and ``np.signbit`` read a float's bits, so they hold on
    a device whose compiler may assume floats finite (WGSL) and see the sign of -0.0 and of a NaN; of an
    integer the classes are constants, the sign its own. The logical functions take their operands' truth.
    Every special value, against the kernel run as plain Python and NumPy."""
    if refuses(device, dtype):
        return
    if dtype.is_float:
        info = np.finfo(dtype.numpy)
        x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal, info.max, -1.5, 2.0],
                     dtype.numpy)
    else:
        x = np.array([0, 1, 2, np.iinfo(dtype.numpy).max, np.iinfo(dtype.numpy).min], dtype.numpy)
    y = np.roll(x, 3)
    out = np.zeros((x.size, 9), np.int32)  # WebGPU holds no bool
    with np.errstate(all="ignore"):
        want = run_as_python(float_classes, out.copy(), x, y)[0]
        np.testing.assert_array_equal(want[:, [0, 1, 2, 8]], np.stack([np.isnan(x), np.isinf(x), np.isfinite(x),
                                                                       np.signbit(x)], axis=1))
    float_classes(out, x, y, device=device)
    np.testing.assert_array_equal(out, want)


@svod.kernel
def histogram2(counts, peaks, values):
    for i in svod.prange(values.shape[0]):
        v = values[i]
        svod.atomic_add(counts, (i % 2, v), 1)
        svod.atomic_max(peaks, v % 3, i)
        svod.atomic_min(peaks, 3, -i)


@pytest.mark.parametrize("n", [1, 97])
def test_atomics_with_tuple_indices(device, n):
    values = _rng().integers(0, 8, n).astype(np.int32)
    counts, peaks = np.zeros((2, 8), np.int32), np.zeros(4, np.int32)
    histogram2(counts, peaks, values, device=device)
    want = np.zeros((2, 8), np.int32)
    np.add.at(want, (np.arange(n) % 2, values), 1)
    np.testing.assert_array_equal(counts, want)
    for k in range(3):
        hits = np.nonzero(values % 3 == k)[0]
        assert peaks[k] == (hits.max() if hits.size else 0)
    assert peaks[3] == -(n - 1)


@svod.kernel
def gather_rows(out, table, ids):
    for r in svod.prange(ids.shape[0]):
        for c in svod.prange(table.shape[1]):
            out[r, c] = table[ids[r], c] + (ids[r] + r) * 0  # an index of any integer dtype meets a loop variable


@pytest.mark.parametrize("index_dtype", [dtypes.int8, dtypes.int32, dtypes.uint32, dtypes.int64], ids=lambda d: d.name)
def test_indices_of_any_integer_dtype(device, index_dtype):
    if refuses(device, index_dtype):
        return
    table = np.arange(20, dtype=np.int32).reshape(5, 4)
    ids = np.array([4, 0, 2, 2], index_dtype.numpy)
    out = np.zeros((4, 4), np.int32)
    gather_rows(out, table, ids, device=device)
    np.testing.assert_array_equal(out, table[ids.astype(np.int64)])


@svod.kernel
def first_of_rows(out, table, ids):
    for r in svod.prange(ids.shape[0]):
        out[r] = table[ids[r], 0]


@pytest.mark.parametrize("index_dtype", [dtypes.int32, dtypes.uint32], ids=lambda d: d.name)
def test_a_gather_of_each_rows_first_element(device, index_dtype):
    """``table[ids[r], 0]`` is ``ids[r] * table.shape[1]`` alone, a row access all the same: on a device of 32-bit
    indices its row is narrowed to the rows the table may have, and a row outside the table is reported."""
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    ids = np.array([4, 0, 2, 2, 3], index_dtype.numpy)
    out = np.zeros(5, np.float32)
    first_of_rows(out, table, ids, device=device)
    np.testing.assert_array_equal(out, table[ids.astype(np.int64), 0])
    for outside in (5, 2**31 + 7 if index_dtype == dtypes.uint32 else -6):
        ids[1] = outside
        with pytest.raises(svod.errors.IndexOutOfBoundsError):
            first_of_rows(out, table, ids, device=device)


@svod.kernel
def widening(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * 0.1 + 1  # a float literal in a float64 expression is float64


def test_literals_take_the_dtype_they_meet(device):
    if refuses(device, dtypes.float64):
        return
    x = np.array([1.0, 3.0, 1e10], np.float64)
    out = np.zeros(3, np.float64)
    widening(out, x, device=device)
    np.testing.assert_array_equal(out, x * 0.1 + 1)


@svod.kernel
def nan_and_inf(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = svod.nan if x[i] < 0 else (svod.inf if x[i] > 1 else x[i])


def test_inf_and_nan(device: Device):
    if not device.caps.ieee_floats:
        pytest.skip("this device's compiler may assume floats are finite (DeviceCaps.ieee_floats)")
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    out = np.zeros(3, np.float32)
    nan_and_inf(out, x, device=device)
    assert np.isnan(out[0]) and out[1] == 0.5 and out[2] == np.inf


@svod.kernel
def unrolled(out: svod.Array[svod.float32, 1], x: svod.Array[svod.float32, 1], times: svod.Const[int],
             scale: svod.float32):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        if times > 2:  # a constant: one branch is translated
            v = v * scale
        out[i] = v + times


def test_annotations_constants_and_float32_scalars(device):
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    unrolled(out, x, 3, 0.5, device=device)
    np.testing.assert_array_equal(out, x * 0.5 + 3)
    unrolled(out, x, 1, 0.5, device=device)
    np.testing.assert_array_equal(out, x + 1)


@svod.kernel
def running(out, counts, x):
    n, m = x.shape
    for r in svod.prange(n):
        total = 0.0
        seen = 0
        for c in range(m):
            total += x[r, c]  # read below in the same turn: carried from turn to turn, not a reduction
            if x[r, c] > 0:
                seen += 1
            out[r, c] = total * seen
        counts[r] = seen


@pytest.mark.parametrize("shape", [(1, 1), (3, 17)])
def test_locals_carried_from_turn_to_turn(device, shape):
    x = _rng().standard_normal(shape).astype(np.float32)
    out, counts = np.zeros(shape, np.float32), np.zeros(shape[0], np.int32)
    running(out, counts, x, device=device)
    seen = np.cumsum(x > 0, axis=1)
    np.testing.assert_allclose(out, np.cumsum(x, axis=1) * seen, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(counts, seen[:, -1])


@svod.kernel
def fibonacci(out, steps):
    a, b = 0, 1
    for _ in range(steps):
        a, b = b, a + b
    out[0] = a


def test_a_carried_pair_in_one_work_item(device):
    out = np.zeros(1, np.int32)
    fibonacci(out, 20, device=device)
    assert out[0] == 6765


@svod.kernel
def two_loops_one_name(out, x):
    for r in svod.prange(x.shape[0]):
        for c in range(x.shape[1]):
            e = x[r, c] * 2
            out[r, c] = e
        for c in range(x.shape[1]):
            e = out[r, c] + 1  # a new local of the second loop
            out[r, c] = e


def test_locals_of_one_loop_do_not_leak_into_the_next(device):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = np.zeros_like(x)
    two_loops_one_name(out, x, device=device)
    np.testing.assert_array_equal(out, x * 2 + 1)


@svod.kernel
def own_locals(out, x):
    v = 0.0
    for i in svod.prange(x.shape[0]):
        v = x[i] * 2.0  # each work item's own v
        out[i] = v


def test_a_local_a_prange_assigns_is_each_work_items_own(device):
    x = np.arange(5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    own_locals(out, x, device=device)
    np.testing.assert_array_equal(out, x * 2)


@svod.kernel
def converted(out8, out32, out64, x):
    for i in svod.prange(x.shape[0]):
        out8[i] = svod.int8(x[i])
        out32[i] = svod.int32(x[i])
        out64[i] = svod.int64(x[i] * 1e10)


def test_a_cast_computes_in_plain_python_what_it_computes_in_a_kernel(device):
    """A float converted to an integer truncates and saturates, NaN to 0, in a kernel and outside one (where
    numpy's own conversion gives the type's minimum, with a warning): plain Python is the kernel's oracle."""
    x = np.array([np.nan, np.inf, -np.inf, 1e300, -1e300, -3.7, 2.5e9, -2.5e9, 127.9, -128.9, 300.0, -0.0])
    outs = [np.zeros(len(x), np.int8), np.zeros(len(x), np.int32), np.zeros(len(x), np.int64)]
    with np.errstate(over="ignore"):  # 1e300 * 1e10 is inf, as the kernel computes it
        scaled = x * 1e10
    want = [np.array([cast(v) for v in values], dtype) for cast, values, dtype in
            ((svod.int8, x, np.int8), (svod.int32, x, np.int32), (svod.int64, scaled, np.int64))]
    np.testing.assert_array_equal(want[1][:5], [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31])
    if any(refuses(device, dtype) for dtype in (dtypes.int8, dtypes.int64, dtypes.float64)):
        return
    converted(*outs, x, device=device)
    for got, expected in zip(outs, want, strict=True):
        np.testing.assert_array_equal(got, expected)
