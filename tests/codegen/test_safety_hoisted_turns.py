"""``in_some_turn`` and the guards made with it, probed past the shapes ``test_safety_hoisted`` covers: nested
loops whose inner end is the outer variable plus a size that may be 0 or negative, conditions mixing both
loop variables under AND, OR and NOT, loops with negative steps and steps of 2, and racy kernels whose read
is guarded by a loop variable. The guard may be weaker than the loop (more checks, more refusals), never
stronger: a turn that reads memory always finds the value made and checked."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import svod
from svod import UOp
from svod.codegen.indexing import in_some_turn
from svod.errors import RaceError
from svod.ir import substitute
from tests.codegen.test_safety_hoisted import _agrees, kernel_device  # noqa: F401 (a fixture)
from tests.helpers import evaluate_expression

_M, _N, _K = UOp.define_var("m", -4, 4), UOp.define_var("n", -1, 3), UOp.define_var("k", -1, 2)
_OUTER = UOp.range(_N, 0)
_INNER = UOp.range(_OUTER + _K, 1)
_AS_VARIABLES = {_OUTER: UOp.define_var("outer", -9, 9), _INNER: UOp.define_var("inner", -9, 9)}


def _linear(rng: random.Random) -> UOp:
    """A sum of both loop variables and two sizes, each with a coefficient of either sign, 0 or a large one."""
    total = UOp.index_const(rng.choice([-3, 0, 1, 4]))
    for v in (_INNER, _OUTER, _M, _K):
        total = total + v * rng.choice([-3, -2, -1, 0, 1, 2, 1000])
    return total


def _condition(rng: random.Random, depth: int = 0) -> UOp:
    """A random comparison of two sums, or an AND, OR or NOT of such conditions."""
    pick = rng.random()
    if depth < 2 and pick < 0.5:
        first, second = _condition(rng, depth + 1), _condition(rng, depth + 1)
        return first & second if pick < 0.25 else first | second
    if depth < 2 and pick < 0.55:
        return _condition(rng, depth + 1).ne(True)
    a, b = _linear(rng), _linear(rng)
    return rng.choice([a < b, a <= b, a.gt(b), a.eq(b), a.ne(b), (a < b).ne(True)])


def _some_turn(condition: UOp, env: dict[str, int], outer: int) -> bool:
    """Whether some turn of the inner loop, in turn ``outer`` of the outer, satisfies ``condition``."""
    return any(evaluate_expression(condition, {**env, "outer": outer, "inner": inner})
               for inner in range(outer + env["k"]))


@pytest.mark.parametrize("seed", range(4))
def test_a_condition_over_a_triangular_nest_holds_wherever_a_turn_satisfies_it(seed):
    """Taken over the inner loop, then the outer (as ``safety`` does, innermost first), the condition holds
    for every size where some turn of the nest satisfies it, inner ends 0 and negative included."""
    rng = random.Random(seed)
    for _ in range(25):
        condition = _condition(rng)
        inner = in_some_turn(condition, _INNER)
        whole = None if inner is None else in_some_turn(inner, _OUTER)
        spelled = substitute(condition, _AS_VARIABLES)
        for m, n, k in itertools.product(range(-4, 5), range(-1, 4), range(-1, 3)):
            env = {"m": m, "n": n, "k": k}
            turns = [o for o in range(n) if _some_turn(spelled, env, o)]
            if inner is not None:
                assert _INNER not in inner.toposort()
                for o in turns:
                    assert evaluate_expression(substitute(inner, _AS_VARIABLES), {**env, "outer": o}), (condition, env)
            if whole is not None and turns:
                assert _OUTER not in whole.toposort()
                assert evaluate_expression(whole, env), (condition, env)


# x is read 8 past m, so that m down to -8 reads no negative index (plain Python would wrap it)
@svod.kernel
def counting_down(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e, -1, -1):
            out[i] = x[11 + m - 3] if j > m else out[i] + 1.0


@svod.kernel
def odd_turns_equal(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(1, e, 2):
            out[i] = x[8 + m] if j == m else out[i] + 1.0


@svod.kernel
def down_by_two_differ(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e, 0, -2):
            out[i] = out[i] + 1.0 if j != m else x[8 + m - 1]


@svod.kernel
def neither_below_nor_above(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = out[i] + 1.0 if not (j < m or j > m + 1) else x[8 + m + 2]


@svod.kernel
def two_loop_variables(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            for k in range(e):
                out[i] = x[8 + m] if k - 2 * j > m - 4 else out[i] + 0.5


@svod.kernel
def a_large_coefficient(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = x[8 + m] if 1000 * j - 999 * m >= m else out[i] + 1.0


@svod.kernel
def summed_at_two_turns(out, x, m: svod.Int[-8, 64], e: svod.Int[-4, 16]):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for j in range(e):
            if j == m or j == m + 3:
                s += x[8 + m + 1]
        out[i] = s


STEPPED = [counting_down, odd_turns_equal, down_by_two_differ, neither_below_nor_above, two_loop_variables,
           a_large_coefficient, summed_at_two_turns]


@pytest.mark.parametrize("kernel", STEPPED, ids=lambda k: k.name)
def test_a_hoisted_load_under_stepped_and_negated_loops_is_pythons(kernel_device, kernel):  # noqa: F811
    """Negative ``m`` and loop ends, sizes 0, 1 and 3, and ``m`` past the buffer: the outputs, or the
    out-of-bounds error, are plain Python's."""
    for n in (0, 1, 3):
        x = np.arange(1.0, 3 * n + 13, dtype=np.float32)
        for m in (-8, -5, -1, 0, 1, 2, 3, 5, 3 * n, 3 * n + 2, 3 * n + 5):
            for e in (-1, 0, 1, 2, 5):
                _agrees(kernel, kernel_device, [np.full(n, -0.0, np.float32), x, m, e])


@svod.kernel
def reads_the_next_in_some_turn(out, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = out[i + 1] + 1.0 if j < m else out[i]


@svod.kernel
def reads_the_first_from_two_items(out, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = out[0] + 1.0 if j + i == 1 else out[i]


@svod.kernel
def reads_at_even_items(out, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(2):
            out[i] = out[3] + 1.0 if 2 * j == i else out[i]


@svod.kernel
def reads_under_a_triangle(out, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            for k in range(j):
                out[i] = out[m] + 1.0 if k + i > j + 2 else out[i]


@pytest.mark.parametrize("kernel", [reads_the_next_in_some_turn, reads_the_first_from_two_items, reads_at_even_items,
                                    reads_under_a_triangle], ids=lambda k: k.name)
def test_a_read_guarded_by_a_loop_variable_that_another_item_writes_is_a_race(kernel):
    """The guard over the loop's turns names the work items that read: some other than the writer's do."""
    with pytest.raises(RaceError, match="read"):
        kernel(np.zeros(8, np.float32), 3, 4)
