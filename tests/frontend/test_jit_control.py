"""The host code of ``@svod.jit`` functions means what its Python means: ``if``/``else``, ``while``, ``break``,
``continue`` and an early ``return`` around phases become plan control flow; scalars computed between phases
stay on the device; every statement kind is taken or refused, never dropped. Each function is compared with
itself run as plain Python, on every device."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

import svod
from svod import prange
from svod.device import ReplayBranch, ReplayLoop, ReplayWhile
from svod.errors import KernelSyntaxError, VariableError
from svod.frontend.phases import HOST_STATEMENTS
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import assert_replayed_natively


@svod.jit
def stops_at_three(x):
    for _t in range(100):
        x += 1.0
        if x[0] >= 3.0:
            break
    return x


@svod.jit
def flagged(x, flag):
    if flag > 0:
        x += 1.0
    return x


@svod.jit
def every_other_turn(x):
    for t in range(5):
        if t % 2 == 0:
            x += 1.0
        else:
            x *= 2.0
    return x


@svod.jit
def returns_early(x):
    for _t in range(50):
        x *= 2.0
        if x.max() > 1000.0:
            return x
    x[0] = -1.0
    return x


@svod.jit
def skips_turns(x, out):
    n = x.shape[0]
    for t in range(6):
        if t % 3 == 1:
            continue
        for i in prange(n):
            out[i] += x[i] * t
    return out


@svod.jit
def counts_up(x):
    while x[0] < 10.0:
        x += 1.0
    return x


@svod.jit
def halves_until_small(x):
    turns = 0
    while x.sum() > 1.0:
        x *= 0.5
        turns += 1
        if turns >= 40:
            break
    return x, turns


@svod.jit
def adds_its_sum(x):
    for _t in range(2):
        s = x.sum()
        x += s
    return x


@svod.jit
def mean_of(x):
    n = x.shape[0]
    s = x.sum()
    m = s / n
    return m


@svod.jit
def expression_returned(x):
    n = x.shape[0]
    return 4.0 * x.sum() / n


@svod.jit
def reduced_pair(x, y):
    s = 0.0
    t = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
        t += y[i]
    return s * 2.0, t


@svod.jit
def summed_then_counted(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    t = 3
    return s * 2.0, t, -s


@svod.jit
def scaled_and_itself(x, s):
    return s * 2.0, x, x.shape[0] - 1


@svod.jit
def ends_and_new(x):
    n = x.shape[0]
    return n * 2.0, x[n - 1] + 1.5, x + 1.0, x[0]


@svod.jit
def leading_negatives(a):
    h = 0
    for z in range(len(a)):
        if a[z] > -1:
            break
        h += 1
    return h


@svod.jit
def filled(x, v):
    x.fill(v)
    return x


@svod.jit
def chooses_a_phase(x, y):
    n = x.shape[0]
    if x[0] > 0.0:
        for i in prange(n):
            y[i] = x[i] * 2.0
    elif x[0] < 0.0:
        for i in prange(n):
            y[i] = -x[i]
    else:
        y[0] = 42.0
    return y


@pytest.mark.parametrize("start", [0.0, 2.5, 5.0])
def test_a_break_around_an_array_statement_ends_the_loop(device, start):
    agrees_with_python(stops_at_three, device, np.full(5, start))


@pytest.mark.parametrize("flag", [0, 1])
def test_an_if_around_an_in_place_statement_runs_it_only_when_true(device, flag):
    agrees_with_python(flagged, device, np.arange(7.0), flag)


def test_an_if_and_else_inside_a_time_loop(device):
    agrees_with_python(every_other_turn, device, np.arange(1.0, 6.0))


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e6])
def test_an_early_return_in_a_time_loop_skips_what_follows(device, scale):
    agrees_with_python(returns_early, device, np.arange(1.0, 6.0) * scale)


@pytest.mark.parametrize("n", [1, 2, 13])
def test_continue_skips_the_rest_of_a_turn(device, n):
    agrees_with_python(skips_turns, device, np.arange(float(n)), np.zeros(n))


@pytest.mark.parametrize("start", [0.0, 9.5, 12.0])
def test_a_while_loop_around_an_array_statement(device, start):
    agrees_with_python(counts_up, device, np.full(3, start))


@pytest.mark.parametrize("n", [1, 3, 13])
def test_a_while_loop_on_a_reduction_with_a_break_and_a_count(device, n):
    agrees_with_python(halves_until_small, device, np.full(n, 7.0))


@pytest.mark.parametrize("n", [1, 4, 7])
def test_a_scalar_computed_in_a_loop_is_fresh_each_turn(device, n):
    agrees_with_python(adds_its_sum, device, np.arange(float(n)))


@pytest.mark.parametrize("n", [1, 5])
def test_scalars_and_expressions_are_returned(device, n):
    agrees_with_python(mean_of, device, np.arange(float(n)))
    agrees_with_python(expression_returned, device, np.arange(float(n)))


@pytest.mark.parametrize("values", [[], [-0.0], [2.5], [1.0, -0.0, 3e38, -3e38, 7.0], [np.inf, 1.0], [np.nan, 2.0],
                                    list(range(13))])
def test_a_tuple_of_expressions_and_names_is_returned(device, values):
    """``return s * 2.0, t``: each expression of a returned tuple is a value of its own (the whole tuple was
    once one scalar, refused with ``cannot convert a tuple of 2 to int64``), beside names of scalars and of
    argument and new arrays, in order."""
    x = np.array(values, np.float64)
    if not device.caps.ieee_floats:  # WGSL's arithmetic of infinities and NaN is its compiler's (docs/devices.md)
        x = x[np.isfinite(x)]
    agrees_with_python(reduced_pair, device, x, x[::-1].copy())
    # the CPU may fold the sum in another order (docs/semantics.md): a term under its largest's rounding may be
    # lost in one order and not in another (1.0 and 7.0 beside 3e38 and -3e38)
    finite = np.abs(x[np.isfinite(x)])
    lost = finite[finite < x.size * np.finfo(np.float64).eps * finite.max(initial=0.0)].sum()
    agrees_with_python(summed_then_counted, device, x, atol=max(lost, 1e-12))
    agrees_with_python(scaled_and_itself, device, x, -1.25)
    if x.size:
        agrees_with_python(ends_and_new, device, x)


@pytest.mark.parametrize("values", [[1.0], [-5.0], [-5.0, -2.0, 3.0], [-5.0, -6.0]])
def test_a_break_in_a_one_turn_loop_that_carries_a_local(device, values):
    agrees_with_python(leading_negatives, device, np.array(values))


def test_fill_sets_every_element(device):
    agrees_with_python(filled, device, np.zeros((3, 4)), 7.5)


@pytest.mark.parametrize("first", [-2.0, 0.0, 3.0])
def test_if_elif_else_choose_which_phase_runs(device, first):
    x = np.arange(5.0)
    x[0] = first
    agrees_with_python(chooses_a_phase, device, x, np.zeros(5))


@svod.jit
def scale_per_branch(x, c):
    if c > 0:
        for i in prange(x.shape[0]):
            x[i] += 1.0
        r = 0.5
    else:
        for i in prange(x.shape[0]):
            x[i] -= 1.0
        r = 2.0
    for i in prange(x.shape[0]):
        x[i] = x[i] * r
    return r


@pytest.mark.parametrize("c", [1, -1])
def test_a_scalar_each_branch_defines_is_the_branch_takens(device, c):
    """``r = 0.5`` and ``r = 2.0`` in the branches of a plan's if: the phase after reads the one that ran (a
    definition read where used read the last one written)."""
    agrees_with_python(scale_per_branch, device, np.arange(4.0), c)


@pytest.mark.parametrize("fn, args, kinds", [
    (stops_at_three, (np.zeros(5),), {ReplayLoop}),
    (counts_up, (np.zeros(3),), {ReplayWhile}),
    (chooses_a_phase, (np.arange(5.0), np.zeros(5)), {ReplayBranch}),
    (halves_until_small, (np.full(3, 7.0),), {ReplayWhile, ReplayBranch}),
    (skips_turns, (np.arange(3.0), np.zeros(3)), {ReplayLoop, ReplayBranch})])
def test_control_flow_around_phases_replays_on_the_cpu_with_no_python_per_decision(fn, args, kinds):
    """On the CPU, a jitted function's ``if``, ``while`` and ``break`` are tested by the native dispatcher:
    its plan calls back into Python for nothing, and means what the Python means."""
    cpu = svod.get_device("CPU")
    plan = fn.plan(*args, device=cpu)
    plan.prepare()
    assert_replayed_natively(plan, kinds)
    agrees_with_python(fn, cpu, *args)


# ---- every statement: taken with Python's meaning, or refused at its line --------------------------------------

@svod.jit
def resizes(x):
    x.resize(1)
    return x


@svod.jit
def with_block(x):
    with np.errstate(all="ignore"):
        x += 1.0
    return x


@svod.jit
def asserts(x):
    assert x.shape[0] > 0
    x += 1.0
    return x


@svod.jit
def returns_two_things(x, y):
    for _t in range(3):
        x += 1.0
        if x[0] > 1.0:
            return y
    return x


@svod.jit
def index_past(x, limit):
    for i in range(x.shape[0]):
        if x[i] > limit:
            return i
    return -1


@svod.jit
def first_pair_past(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            if i * j > x[0]:
                return i * 0.5, j
    return -1.0, -x.shape[0]


@pytest.mark.parametrize("limit", [-1.0, 0.0, 3.5, 5.0, 100.0])
def test_an_early_return_of_an_expression_beside_a_last_one(device, limit):
    """numba's search, ``return i`` inside the loop and ``return -1`` after it: the early return gives its value to
    the name the last return's expression is given (once refused, naming that internal name)."""
    agrees_with_python(index_past, device, np.arange(6.0), limit)
    agrees_with_python(first_pair_past, device, np.full(4, limit))


@svod.jit
def turns_until_large(x, n):
    s = 0.0
    for t in range(n):
        x *= 2.0
        s += x.sum()
        if x.max() > 100.0:
            return t, s
    return -1, -s


@pytest.mark.parametrize("scale", [0.001, 1.0, 30.0, 500.0])
def test_a_loop_around_phases_returns_its_count_early_and_adds_reductions(device, scale):
    """numba's convergence loop: ``s += x.sum()`` in a loop around phases (once refused as "an array has shape,
    ndim, dtype and size, not sum"; ``s = s + x.sum()`` was taken), and ``return t, s`` from inside it beside a
    last ``return -1, -s``."""
    agrees_with_python(turns_until_large, device, np.full(3, scale), 9)


@svod.jit
def returns_an_array_expression(x):
    for _t in range(3):
        if x[0] > 1.0:
            return x
        x += 1.0
    return x * 2.0


@pytest.mark.parametrize("fn, words", [
    (resizes, "x.resize is not a function svod knows"),
    (with_block, "a with block is not supported"),
    (asserts, "assert is not supported"),
    (returns_two_things, "an early return returns what the last statement does"),
    (returns_an_array_expression, r"an early return returns the names the last return does, and that one returns "
                                  r"expressions here: name each value before both returns \(`r = ...`, then "
                                  r"`return r`\)"),
])
def test_what_a_jitted_function_cannot_run_is_refused_at_its_line(fn, words):
    with pytest.raises(KernelSyntaxError, match=words) as err:
        fn(np.zeros(3), np.zeros(3)) if fn is returns_two_things else fn(np.zeros(3))
    line = inspect.getsourcelines(fn.fn)[1]
    lines = range(line, line + len(inspect.getsource(fn.fn).splitlines()))
    assert any(f"{__file__}:{n}:" in str(err.value) for n in lines), str(err.value)


def _subclasses(kind: type) -> list[type]:
    found = []
    for sub in kind.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_every_statement_kind_is_taken_or_refused():
    """A new Python version's statement is noticed here, not dropped by the reader."""
    kinds = {k for k in _subclasses(ast.stmt) if k.__module__ == "ast" and not k.__name__.startswith("_")}
    assert kinds - set(HOST_STATEMENTS) == set()


# ---- convergence loops as numba users write them ----------------------------------------------------------------

@svod.jit
def conjugate_gradient(b, x, tol, maxiter):
    """A 5-point Poisson solve: a while loop with a tolerance and a break, scalars and arrays made each turn."""
    n = b.shape[0]
    r = b.copy()
    p = r.copy()
    ap = np.zeros_like(b)
    rr = np.sum(r * r)
    it = 0
    while it < maxiter:
        for i in prange(n):
            for j in range(n):
                v = 4.0 * p[i, j]
                if i > 0:
                    v -= p[i - 1, j]
                if i < n - 1:
                    v -= p[i + 1, j]
                if j > 0:
                    v -= p[i, j - 1]
                if j < n - 1:
                    v -= p[i, j + 1]
                ap[i, j] = v
        alpha = rr / np.sum(p * ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = np.sum(r * r)
        it += 1
        if np.sqrt(rr_new) < tol:
            break
        p[:] = r + (rr_new / rr) * p
        rr = rr_new
    return x, it


@svod.jit
def power_iteration(a, v, steps):
    lam = 0.0
    for _t in range(steps):
        w = a @ v
        lam = np.sqrt(np.sum(w * w))
        v[:] = w / lam
    return v, lam


@pytest.mark.parametrize("n, maxiter", [(1, 10), (2, 10), (5, 3), (12, 500)])
def test_a_conjugate_gradient_solve_takes_pythons_iterations(device, n, maxiter):
    b = np.random.default_rng(n).random((n, n))
    agrees_with_python(conjugate_gradient, device, b, np.zeros((n, n)), 1e-8, maxiter, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("n", [1, 2, 17])
def test_a_power_iteration_makes_its_product_each_turn(device, n):
    a = np.random.default_rng(n).random((n, n)) + 1.0
    agrees_with_python(power_iteration, device, a + a.T, np.ones(n), 20, rtol=1e-5, atol=1e-8)


# ---- calls: compiled into the caller ---------------------------------------------------------------------------

def relu(x):
    return np.maximum(x, 0.0)


@svod.jit
def relu_of_affine(x, w, b):
    h = x @ w
    h += b
    out = relu(h)
    return out


@svod.jit
def layers(x, w, b, steps):
    y = relu_of_affine(x, w, b)
    for _t in range(steps):
        bump(y, 0.5)
    scale_in_place(y, factor=2.0)
    return y


def bump(a, by):
    a += by


def scale_in_place(a, factor):
    a *= factor


@svod.jit
def calls_with_expressions(x):
    bump(x[1:], 1.0 + 2.0)
    total, largest = stats(x)
    return total, largest


def stats(a):
    s = a.sum()
    m = a.max()
    return s, m


def countdown(n, x):
    x += 1.0
    countdown(n - 1, x)


@svod.jit
def recurses(x):
    countdown(3, x)
    return x


@pytest.mark.parametrize("n", [1, 3, 8])
def test_calls_of_jitted_and_plain_functions_run_in_the_caller(device, n):
    rng = np.random.default_rng(n)
    x, w, b = rng.standard_normal((n, 4)), rng.standard_normal((4, 3)), rng.standard_normal(3)
    agrees_with_python(relu_of_affine, device, x, w, b, rtol=1e-5, atol=1e-9)
    agrees_with_python(layers, device, x, w, b, 2, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("n", [2, 5])
def test_a_call_binds_views_and_expressions_and_returns_a_tuple(device, n):
    agrees_with_python(calls_with_expressions, device, np.arange(float(n)))


def test_a_recursive_call_is_refused():
    with pytest.raises(KernelSyntaxError, match="countdown calls itself"):
        recurses(np.zeros(3))


@svod.jit
def fills_a_diagonal(x):
    np.fill_diagonal(x, 0.0)
    return x


def test_a_numpy_call_made_for_its_effect_is_refused_not_dropped():
    with pytest.raises(KernelSyntaxError, match=r"np\.fill_diagonal is not a function a jitted function runs"):
        fills_a_diagonal(np.ones((3, 3)))


@svod.jit
def first_above(x, limit):
    found = -1
    for i in range(x.shape[0]):
        for j in range(2):
            if x[i] * (j + 1) > limit:
                found = i
                return found
    x[0] = -5.0
    return found


@pytest.mark.parametrize("limit", [-10.0, 3.5, 100.0])
def test_a_return_inside_a_loop_that_is_one_kernel_leaves_the_function(device, limit):
    agrees_with_python(index_past, device, np.arange(6.0), limit)


@svod.jit
def sums_when_flagged(x, flag):
    if flag > 0:
        s = x.sum()
    x += 1.0
    return x, s


@svod.jit
def sums_on_both_paths(x, flag):
    if flag > 0:
        s = x.sum()
    else:
        if flag < -5:
            s = 0.0
            return x, s
        s = -1.0
    return x, s


def test_a_scalar_assigned_on_one_path_only_is_refused_where_python_would_raise():
    with pytest.raises(KernelSyntaxError, match="s is assigned in one branch only of the if at line"):
        sums_when_flagged(np.ones(3), 1)


@pytest.mark.parametrize("flag", [-9, 0, 1])
def test_a_scalar_every_path_assigns_or_leaves_before_is_read(device, flag):
    agrees_with_python(sums_on_both_paths, device, np.arange(4.0), flag)


@svod.jit
def differences(x):
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        if i == 0:
            step = x[0]
        elif 0 < i:  # noqa: SIM300 (the variable on the right: read as i > 0)
            step = x[i] - x[i - 1]
        out[i] = step
    for j in range(2, x.shape[0] + 2, 3):
        if j <= 2:
            d = 1.0
        elif j != 5:
            d = 2.0
        elif j == 5:
            d = 3.0
        out[(j - 2) // 3] += d
    return out


@svod.jit
def scaled_turns(x, n):
    for t in range(n):
        if t == 0:
            f = 2.0
        elif t >= 1:
            f = 0.5
        x *= f
    return x, f


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_an_elif_chain_that_covers_every_turn_assigns_on_every_path(device, n):
    """``if i == 0: ... elif i > 0: ...`` without an ``else``, of a loop's variable that is never negative:
    Python assigns on every turn, and so does svod (in a kernel, and between phases)."""
    agrees_with_python(differences, device, np.arange(float(n)) ** 2)
    agrees_with_python(scaled_turns, device, np.arange(float(n)), n)


@svod.jit
def from_minus_one(x, n):
    for i in range(-1, n):
        if i == 0:
            v = 1.0
        elif i > 0:
            v = 2.0
        x[0] += v
    return x


@svod.jit
def reassigned_variable(x, n):
    for i in range(n):
        i = i - 1
        if i == 0:
            v = 1.0
        elif i > 0:
            v = 2.0
        x[0] += v
    return x


@svod.jit
def stepped_down(x, n):
    for i in range(n, -1, -1):
        if i == 0:
            v = 1.0
        elif i > 0:
            v = 2.0
        x[0] += v
    return x


@pytest.mark.parametrize("fn", [from_minus_one, reassigned_variable, stepped_down])
def test_an_elif_chain_that_may_not_assign_stays_refused(fn):
    """A turn the tests may all miss (a variable that may be negative, that the body changes, of a step that
    is not positive): Python raises UnboundLocalError there, svod refuses the read."""
    with pytest.raises(KernelSyntaxError, match="v is assigned in one branch only of the if at line"):
        fn(np.zeros(2), 3)


@svod.jit
def sums_in_a_loop(x, n):
    for _t in range(n):
        s = x.sum()
        x += 1.0
    return x, s


@svod.jit
def last_element_of_a_loop(x, n):
    for t in range(n):
        s = x[t]
    return s


@svod.jit
def sums_while_below(x, n):
    while x[0] < n:
        x += 1.0
        s = x.sum()
    return x, s


@svod.jit
def sums_until_large(x, n):
    for _t in range(n):
        x += 1.0
        if x[0] > 2.0:
            break
        s = x.sum()
    return s


@pytest.mark.parametrize("fn", [sums_in_a_loop, last_element_of_a_loop])
def test_a_name_only_a_loop_assigns_is_read_after_it_where_the_loop_turns(device, fn):
    for n in (1, 3):
        agrees_with_python(fn, device, np.arange(5.0), n)


@pytest.mark.parametrize("fn", [sums_in_a_loop, last_element_of_a_loop])
def test_a_loop_that_makes_no_turn_before_a_read_of_its_name_is_an_error_not_a_stale_value(fn):
    fn(np.arange(5.0), 3)  # the plan for integer n, whose cell now holds a value
    with pytest.raises(UnboundLocalError):
        fn.__wrapped__(np.arange(5.0), 0)
    with pytest.raises(VariableError, match=r"s is read after the loop at line \d+, which makes no turn"):
        fn(np.arange(5.0), 0)


@pytest.mark.parametrize("fn", [sums_while_below, sums_until_large])
def test_a_name_a_loop_may_skip_is_refused_where_it_is_read_after(fn):
    with pytest.raises(KernelSyntaxError, match=r"s is assigned (only in the body of the while|in the loop at)"):
        fn(np.arange(5.0), 3.0 if fn is sums_while_below else 3)


@svod.jit
def counts_with_its_variable(x, n):
    for it in range(n):  # noqa: B007 - read after the loop, as the test means
        x += 1.0
    return x, it


def test_a_loop_variable_read_after_its_plan_loop_is_refused_with_what_to_write():
    with pytest.raises(KernelSyntaxError, match=r"the variable it of a loop around phases is read after the loop"):
        counts_with_its_variable(np.ones(3), 4)


@svod.jit
def two_phases_one_variable(x, y, c):
    if c > 0.0:
        for i in prange(x.shape[0]):
            y[i] = x[i] * 2.0
    for i in prange(x.shape[0]):
        x[i] = y[i] + 1.0
    return x


@pytest.mark.parametrize("c", [-1.0, 1.0])
def test_a_loop_variable_an_if_assigned_before_is_the_loops_own(device, c):
    agrees_with_python(two_phases_one_variable, device, np.arange(5.0), np.ones(5), c)


# ---- what npbench's programs met ---------------------------------------------------------------------------------

turn = 0
"""A module global of the name a jitted function's loop variable has: the function's own ``turn`` is not it."""


@svod.jit
def running_columns(a):
    for turn in range(1, a.shape[1]):
        a[:, turn] += a[:, turn - 1]
    return a


@svod.jit
def both_ways(a):
    for j in range(1, a.shape[1]):
        a[:, j] += a[:, j - 1]
    for j in range(a.shape[1] - 2, -1, -1):  # the same name, bound anew: nothing reads the first loop's
        a[:, j] += a[:, j + 1]
    return a


@svod.jit
def rebound_in_two_loops(a, out):
    for _ in range(2):
        t = -a
        out[:] = t
    for _ in range(2):
        t = a + 1.0
        out += t
    return out


@pytest.mark.parametrize("fn", [running_columns, both_ways])
def test_a_loop_variable_is_the_functions_own_whatever_the_module_or_a_later_loop_names(device, fn):
    agrees_with_python(fn, device, np.arange(12.0).reshape(3, 4))


def test_a_name_bound_to_a_new_array_expression_in_a_later_loop_is_a_new_array(device):
    agrees_with_python(rebound_in_two_loops, device, np.arange(5.0), np.zeros(5))


@svod.jit
def rows_up_to(n, a):
    for r in range(n):
        a[r, :] += 1.0
    return a


@svod.jit
def numbered_rows_up_to(n, a):
    for r in range(n):
        a[r, :] += r  # (a variable read as a number: the loop runs turn by turn)
    return a


@pytest.mark.parametrize("n", [0, 1, 4])
def test_a_loop_bounded_by_an_int_argument_indexes_rows_free_of_races(device, n):
    agrees_with_python(rows_up_to, device, n, np.zeros((4, 3)))  # one statement of its turns' rows
    if device.caps.index_bits == 32:  # a variable of up to 2**31 values times a row's length: refused
        with pytest.raises(svod.errors.GraphError, match="computes indices in 32 bits"):
            numbered_rows_up_to(n, np.zeros((4, 3), np.float32), device=device)
        return
    agrees_with_python(numbered_rows_up_to, device, n, np.zeros((4, 3)))


def test_a_loop_bounded_by_an_int_argument_past_32_bits_is_refused_before_it_runs():
    with pytest.raises(VariableError, match="loop variable r may take"):
        rows_up_to(1 << 40, np.zeros((4, 3)))


@svod.jit
def planes_up_to(nr, nq, a, c):
    for r in range(nr):
        for q in range(nq):
            row = a[r, q, :] @ c
            a[r, q, :] = row
    return a


@svod.jit
def shifted_planes_up_to(nr, nq, a, c):
    for r in range(nr):
        for q in range(nq):
            row = a[r, q, :] @ c
            a[r, q, :] = row + q  # (a variable read as a number: the loop runs turn by turn)
    return a


@pytest.mark.parametrize(("nr", "nq", "np_"), [(0, 2, 3), (1, 1, 1), (2, 3, 7), (3, 4, 13)])
def test_loops_bounded_by_int_arguments_index_planes_free_of_races(device, nr, nq, np_):
    """Each row ``a[r, q, :]`` of a plane is one phase's: its work items write apart for every ``r`` and ``q`` the
    int arguments allow (a ``q`` past ``a``'s planes is an index error, checked as it runs, and the next run is
    not the worse for it). Where the turns are independent and within the arrays, they run as one batched
    product (``loop_widening``), whose slices' bounds are the host's, on every device."""
    rng = np.random.default_rng(np_)
    a = rng.standard_normal((max(nr, 1), nq, np_)).astype(np.float32)
    c = rng.standard_normal((np_, np_)).astype(np.float32)
    agrees_with_python(planes_up_to, device, nr, nq, a, c, rtol=1e-4, atol=1e-5)
    narrow = device.caps.index_bits == 32 and nq * np_ > 1  # a variable of up to 2**31 values times a plane
    if narrow:
        with pytest.raises(svod.errors.GraphError, match="computes indices in 32 bits"):
            shifted_planes_up_to(nr, nq, a, c, device=device)
    else:
        agrees_with_python(shifted_planes_up_to, device, nr, nq, a, c, rtol=1e-4, atol=1e-5)
    if nr:
        with pytest.raises(svod.errors.IndexOutOfBoundsError):  # (its bounds constants of the kernels: 32 bits do)
            planes_up_to(nr, nq + 1, a.copy(), c, device=device)  # (past the planes: turn by turn)
        agrees_with_python(planes_up_to, device, nr, nq, a, c, rtol=1e-4, atol=1e-5)


def checksum(data, rounds, poly=0x8408):
    """A CRC-16 of ``data``'s bytes, ``rounds`` times over."""
    crc = 0xFFFF
    for _ in range(rounds):
        for b in data:
            byte = 0xFF & b
            for _ in range(8):
                if (crc & 0x0001) ^ (byte & 0x0001):
                    crc = (crc >> 1) ^ poly
                else:
                    crc >>= 1
                byte >>= 1
    crc = ~crc & 0xFFFF
    return ((crc << 8) | ((crc >> 8) & 0xFF)) & 0xFFFF


@svod.jit
def checksums(data, rounds, out):
    first = checksum(data, rounds)
    for i in prange(out.shape[0]):
        total = 0
        for b in data:
            total += b * i
        out[i] = total
    return first


@svod.jit
def over_rows(a):
    total = 0.0
    for row in a:
        total += row[0]
    return total


@pytest.mark.parametrize("n", [0, 1, 7, 64])
def test_a_loop_over_an_array_s_elements_binds_each_in_turn(device, n):
    """``for b in data`` (npbench's crc16) in sequential code, inside a sequential loop and inside a ``prange``."""
    data = np.random.default_rng(n).integers(0, 256, n).astype(np.int32)
    for rounds in (0, 1, 2):
        agrees_with_python(checksums, device, data, rounds, np.zeros(3, np.int32))


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (7, 2)])
def test_a_loop_over_a_2d_array_binds_each_row_in_turn(device, shape):
    agrees_with_python(over_rows, device, np.random.default_rng(shape[0]).normal(size=shape))


@svod.jit
def last_turns_scalar(x, out, n):
    b = 0.5
    for t in range(n):
        a = b + 1.0
        b = t * 10.0
        c = a * 2.0
        for i in svod.prange(x.shape[0]):
            out[i] += x[i] * a + c
    return b


def test_a_definition_reading_the_last_turns_value_of_a_later_one_is_pythons(device):
    """``a = b + 1.0`` reads the b of the turn before: computed where a phase reads it, it read this turn's."""
    for n in [0, 1, 2, 5]:
        agrees_with_python(last_turns_scalar, device, np.linspace(-1.0, 2.0, 7), np.zeros(7), n)


@svod.jit
def column_recurrence(c, a):
    for k in range(1, c.shape[2]):
        c[:, :, k] = c[:, :, k - 1] * 0.5 + a[:, :, k]
    return c


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_a_loop_that_never_turns_for_these_shapes_runs_nothing(device, depth):
    """At depth 1 the loop makes no turn: its statements' kernels, built for ``k = 1`` (past the axis, where two
    work items' flattened indices meet), are never compiled; WebGPU refused them as a race before."""
    rng = np.random.default_rng(depth)
    agrees_with_python(column_recurrence, device, rng.standard_normal((3, 4, depth)),
                       rng.standard_normal((3, 4, depth)))
