"""A sequential loop whose variable decides its array statements' shapes, written out turn by turn on the host
(``svod.frontend.unrolling``): a Stockham FFT's stride permutations, allocations of a turn's length, the
variable read after the loop, against the same function run as plain Python on every device, over no turn,
one, and primes; a loop that cannot be written out keeps its refusal, at its line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError
from svod.frontend.unrolling import UNROLLED_TURNS
from tests.frontend.test_jit import agrees_with_python


@svod.jit
def stride_permutations(x, R, K):
    y = x.copy()
    for i in range(K):
        yv = np.reshape(y, (R**i, R, R**(K - i - 1)))
        y[:] = np.reshape(np.transpose(yv, axes=(1, 0, 2)).copy(), (R**K,)) * (i + 1)
    return y


@svod.jit
def growing_parts(x, k):
    total = np.zeros(2, dtype=x.dtype)
    for i in range(1, k):
        m = i + 1
        part = np.empty(m, dtype=x.dtype)
        part[:] = x[:m] * 2
        for j in svod.prange(m):
            part[j] += j
        total[0] += part.sum()
        total[1] = m
    return total, i


def test_a_reshape_of_a_turns_shape_is_numpys(device):
    """One after another, so that a plan made for one count of turns is never taken for another."""
    for R, K in [(2, 0), (2, 1), (2, 3), (3, 2), (5, 2), (7, 1), (2, 2)]:
        agrees_with_python(stride_permutations, device, np.arange(float(R**K)) - 3.5, R, K)


def test_an_allocation_of_a_turns_length_and_the_variable_after_the_loop(device):
    for k in [2, 3, 7, 3]:
        agrees_with_python(growing_parts, device, np.linspace(-1.0, 2.0, 11), k)


@svod.jit
def permutations_until(x, R, K):
    y = x.copy()
    for i in range(K):
        if i == 2:
            break
        y[:] = np.reshape(np.transpose(np.reshape(y, (R**i, R, R**(K - i - 1))), axes=(1, 0, 2)).copy(), (R**K,))
    return y


@pytest.mark.parametrize(("fn", "args"), [(permutations_until, (np.arange(8.0), 2, 3)),
                                          (stride_permutations, (np.arange(2.0 ** 7), 2, 7))])
def test_a_loop_not_written_out_keeps_its_refusal_at_its_line(fn, args, monkeypatch):
    """One that leaves a turn early (``break``), or of more turns than ``UNROLLED_TURNS``."""
    monkeypatch.setattr("svod.frontend.unrolling.UNROLLED_TURNS", 6)
    assert UNROLLED_TURNS > 6
    with pytest.raises(KernelSyntaxError, match=r"test_unrolling.py:\d+: reshape's shape is a number the host knows "
                                                r"before the run \(name 'i' is not defined\)"):
        fn(*args)


@svod.jit
def float_counted(x, s):
    total = np.zeros(2, dtype=x.dtype)
    for i in range(int(s)):
        part = np.empty(i + 1, dtype=x.dtype)
        part[:] = x[:i + 1] * 2
        total[0] += part.sum()
    whole = np.empty(int(s) + 1, dtype=x.dtype)
    whole[:] = x[:int(s) + 1]
    total[1] = whole.sum()
    return total


def test_turns_and_lengths_a_float_argument_gives_follow_its_value(device):
    """A float's variant is made for its value where the host reads it: never one count's plan for another."""
    for s in [2.0, 5.0, 0.0, 1.0, 3.0, 2.0]:
        agrees_with_python(float_counted, device, np.linspace(-1.0, 2.0, 11), s)


@svod.jit
def by_dimensions(x):
    if x.ndim == 1:  # noqa: SIM108 (statements: the host decides, and the branch not taken is never built)
        y = x * 2.0
    else:
        y = x.sum(axis=1) * 2.0
    return y


@svod.jit
def inverse_or_transpose(a):
    if a.shape[0] == a.shape[1]:  # noqa: SIM108 (np.linalg is a statement of its own; inv of a rectangular
        # matrix is refused where it is built)
        x = np.linalg.inv(a)
    else:
        x = a.T * 2.0
    return x


@svod.jit
def chosen_by_sizes(x, n, m):
    out = np.zeros(n + m, dtype=x.dtype)  # (the plan is made for n and m: the if reads nothing new)
    if n == m:
        out[:] = 1.0
    elif n < m:
        out[:] = x[:n + m]
    return out


def test_an_if_the_host_decides_builds_the_branch_it_takes(device):
    """Its other branch, which could not run for these shapes, refuses nothing (Python never runs it); an
    ``elif`` chain is decided link by link, and each decision is the plan's: sizes that make arrays of one
    shape but take another way take another plan."""
    agrees_with_python(by_dimensions, device, np.linspace(-1.0, 2.0, 7))
    agrees_with_python(by_dimensions, device, np.linspace(-1.0, 2.0, 15).reshape(5, 3))
    for shape in [(3, 3), (4, 2), (1, 1), (2, 5)]:
        a = np.random.default_rng(sum(shape)).standard_normal(shape) + 3 * np.eye(*shape)
        agrees_with_python(inverse_or_transpose, device, a, rtol=1e-4, atol=1e-5)
    for n, m in [(2, 2), (1, 3), (3, 1), (2, 2), (0, 0)]:
        agrees_with_python(chosen_by_sizes, device, np.arange(7.0) - 2.5, n, m)


@svod.jit
def scaled_when(x, k):
    if k > 2:  # k is read by nothing before it: the run tests it, and one plan serves every k
        x *= 2.0
    return x


def test_an_if_on_a_number_the_plan_is_not_made_for_is_tested_by_the_run(device):
    for k in [3, 1, 5, 2]:
        agrees_with_python(scaled_when, device, np.arange(5.0), k)
    x = np.arange(5, dtype=np.float32)
    assert scaled_when.plan(x, 3, device=device) is scaled_when.plan(x, 1, device=device)


@svod.jit
def counted_beside_arrays(x, n):
    s = 0.0
    for i in range(n):  # no array statement in it: not written out, and n is read by nothing on the host
        s += i
    y = x * 2.0
    y[0] = s
    return y


def test_a_loop_the_host_does_not_write_out_takes_one_plan_for_every_count(device):
    x = np.arange(5, dtype=np.float32)
    for n in (3, 4, 0):
        agrees_with_python(counted_beside_arrays, device, x, n)
    assert counted_beside_arrays.plan(x, 3, device=device) is counted_beside_arrays.plan(x, 4, device=device)
