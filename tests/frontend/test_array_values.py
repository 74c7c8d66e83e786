"""Conditional expressions and ``and``/``or`` among the array statements of ``@svod.jit``: each compared on
every device with the same function run as plain Python, or refused where NumPy or Python would raise or where
the answer's shape, dtype or identity would depend on the run."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import KernelSyntaxError
from tests.frontend.test_jit import agrees_with_python

RNG = np.random.default_rng(71)
TESTS = [1.0, -0.0, np.nan, np.inf, -np.inf]
"""Values of a test read from memory: NaN compares false, -0.0 is not above zero."""


def data(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


@svod.jit
def picked_by_an_element(out, a, b, t):
    out[:] = (a if t[0] > 0 else b) * 2.0


@svod.jit
def picked_by_a_sum(out, a, b):
    out[:] = a if (a - b).sum() > 0.5 else b + 1.0


@pytest.mark.parametrize("n", [0, 1, 7, 17])
@pytest.mark.parametrize("test", TESTS)
def test_a_choice_between_arrays_by_a_value_of_the_run(device, n, test):
    """``a if c else b`` where ``c`` is known only at run time (an element, a reduction of no axes): the
    picked array's elements."""
    agrees_with_python(picked_by_an_element, device, np.zeros(n), data(n), data(n), np.array([test]))


@pytest.mark.parametrize("n", [1, 2, 13])
def test_a_choice_by_a_reduction_of_no_axes(device, n):
    a = data(n)
    for shift in (-10.0, 10.0):
        agrees_with_python(picked_by_a_sum, device, np.zeros(n), a, a + shift / n)


@svod.jit
def picked_by_the_host(out, a, b, k):
    out[:] = a if k > 2 else b


@pytest.mark.parametrize("k", [0, 3])
def test_a_choice_the_host_knows_reads_only_the_picked_operand(device, k):
    """A test of the scalar arguments picks its operand before the run, as Python does: the other may be of
    another shape (it broadcasts into ``out`` here), and each value of ``k`` has a plan of its own."""
    agrees_with_python(picked_by_the_host, device, np.zeros((3, 4)), data(3, 4), data(4), k)


@svod.jit
def pairs(seq, out):
    n = seq.shape[0]
    for i in prange(n - 1):
        out[i] = 1 if i > 0 and seq[i] + seq[i + 1] == 3 else 0
    return out


@pytest.mark.parametrize("n", [1, 2, 9, 31])
def test_a_scalar_choice_of_elements_in_a_work_item(device, n):
    """nussinov's ``pair = 1 if d > 1 and seq[i] + seq[j] == 3 else 0``: scalars, as the kernel computes them."""
    seq = RNG.integers(0, 4, n).astype(np.int32)
    agrees_with_python(pairs, device, seq, np.full(n, -1, np.int32))


@svod.jit
def mean_or_kept(x, out):
    total = 0.0
    count = 0
    for i in prange(x.shape[0]):
        if x[i] > 0:
            total += x[i]
            count += 1
    out[0] = total / count if count > 0 else out[0]
    out[1] = count > 2 or (x.shape[0] == 0 and total)
    return out


@pytest.mark.parametrize("n", [0, 1, 2, 5, 12])
def test_a_scalar_choice_of_reductions_on_the_host(device, n):
    """kmeans's ``total / count if count > 0 else centroids[c, t]``: an empty count keeps the element."""
    agrees_with_python(mean_or_kept, device, data(n), np.full(2, 7.5))


@svod.jit
def either_of_sums(out, a, b):
    out[0] = (a.sum() > 0) and (b.sum() > 0)
    out[1] = (a.sum() > 1) or (b.sum() > 1)


@pytest.mark.parametrize("shift", [-5.0, 0.5, 5.0])
def test_and_or_of_arrays_of_no_axes(device, shift):
    agrees_with_python(either_of_sums, device, np.zeros(2), data(4) + shift, data(3) - shift)


@svod.jit
def ambiguous_test(out, a, b):
    out[:] = a if a > 0 else b


@svod.jit
def shapes_by_the_run(out, a, t):
    out[:] = a if t[0] > 0 else 1.0


@svod.jit
def bound_to_either(a, b, t):
    v = a if t[0] > 0 else b
    v[0] = 5.0


@svod.jit
def and_of_arrays(out, a, b):
    out[:] = a and b


@pytest.mark.parametrize(("fn", "args", "message"), [
    (ambiguous_test, (np.zeros(3), np.ones(3), np.ones(3)), r"truth value of an array of shape \(3,\) is ambiguous"),
    (shapes_by_the_run, (np.zeros(3), np.ones(3), np.ones(1)), r"picks an array of shape \(3,\) and dtype float64 "
                                                                  r"or a scalar \(float\)"),
    (bound_to_either, (np.zeros(3), np.ones(3), np.ones(1)), r"one of the two arrays itself"),
    (and_of_arrays, (np.zeros(3), np.ones(3), np.ones(3)), r"`and` of an array is ambiguous"),
])
def test_choices_python_or_numpy_would_not_make_alike_are_refused_at_their_line(fn, args, message):
    with pytest.raises(KernelSyntaxError, match=rf"test_array_values.py:\d+: .*{message}"):
        fn(*args, device="CPU")
