"""``svod.vjp`` of kernels whose work item runs sequential ``for ... in range(...)`` loops, on every device, against
central finite differences of the kernel's function run as plain Python: sums carried from turn to turn, locals
carried some other way (Horner's rule, a running maximum, two locals that swap), stores and updates in the loop,
loops under a condition, nested loops and reversed and strided ranges, each over loops of 0, 1 and a prime number
of turns; and each loop the adjoint refuses."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from tests.frontend.differences import agrees_with_differences, float_of

TURNS = [0, 1, 7]
"""Loop lengths: none, one, and a prime."""


@svod.kernel
def matvec(out, w, x):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for k in range(x.shape[0]):
            s += w[i, k] * x[k]
        out[i] = s


@svod.kernel
def horner(out, c, x):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for k in range(c.shape[0] - 1, -1, -1):
            s = s * x[i] + c[k]
        out[i] = s


@svod.kernel
def stencil(out, x, weights, r: svod.Int[0, 8]):
    for i in svod.prange(out.shape[0]):
        t = 0.0
        for d in range(-r, r + 1):
            if i + d >= 0 and i + d < x.shape[0]:
                t += x[i + d] * weights[d + r]
        out[i] = svod.math.tanh(t)


@svod.kernel
def running(out, x):
    for i in svod.prange(out.shape[0]):
        m = x[i, 0]
        p = 1.0
        for k in range(1, x.shape[1]):
            m = max(m, x[i, k] * 1.5)
            p = p * svod.math.sin(x[i, k]) + m * 0.25
        out[i, 0] = m + p


@svod.kernel
def swapped(out, x):
    for i in svod.prange(out.shape[0]):
        u = x[i, 0]
        v = x[i, 0] * 2.0
        for k in range(x.shape[1]):
            t = u
            u = v * x[i, k]
            v = t
        out[i, 0] = u * v


@svod.kernel
def cumulative(out, x):
    for i in svod.prange(out.shape[0]):
        s = x[i, 0]
        for k in range(x.shape[1]):
            out[i, k] = s * x[i, k]
            out[i, 0] += s
            s = s + svod.math.exp(x[i, k] * 0.1)


@svod.kernel
def strided(out, x):
    for i in svod.prange(out.shape[0]):
        a = 1.0
        b = 0.0
        for k in range(1, x.shape[1], 3):
            a = a * x[i, k] + 0.5
        for k in range(x.shape[1] - 1, -1, -2):
            b = b * 0.5 + x[i, k] * x[i, k]
        out[i] = a + b


@svod.kernel
def nested(out, x):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for a in range(x.shape[1]):
            t = x[i, a]
            for b in range(a + 1):
                t = t * 0.5 + x[i, b] * s
            s = s + t * 0.25
        out[i] = s


@svod.kernel
def triangular(out, x):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for j in range(i):
            s += x[j] * x[i]
        if x[i] > 0.0:
            for j in range(i + 1):
                s = s * 0.5 + x[j]
        out[i] = s


@svod.kernel
def overflowing(out, x):
    for i in svod.prange(out.shape[0]):
        s = x[i, 0] * 1e30
        for k in range(x.shape[1]):
            s = s * s
            out[i, k] = x[i, k] * 2.0
        out[i, 0] += 1.0 if s > 0.0 else 0.0


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("turns", TURNS)
def test_a_sum_over_a_loop_gives_each_turn_its_adjoint(device, turns):
    f = float_of(device)
    rng = _rng(turns)
    agrees_with_differences(matvec, device, np.zeros(5, f), rng.standard_normal((5, turns)).astype(f),
                            rng.standard_normal(turns).astype(f))


@pytest.mark.parametrize("turns", TURNS)
def test_horners_rule_runs_the_turns_before_each_again(device, turns):
    f = float_of(device)
    rng = _rng(turns + 1)
    agrees_with_differences(horner, device, np.zeros(3, f), rng.standard_normal(turns).astype(f),
                            rng.uniform(-1.2, 1.2, 3).astype(f))


@pytest.mark.parametrize("radius", [0, 1, 3])
def test_a_stencil_adds_into_its_neighbours_under_its_condition(device, radius):
    f = float_of(device)
    rng = _rng(radius + 2)
    agrees_with_differences(stencil, device, np.zeros(11, f), rng.standard_normal(11).astype(f),
                            rng.standard_normal(2 * radius + 1).astype(f), radius)


@pytest.mark.parametrize("turns", [1, 2, 7])
def test_a_running_maximum_and_product_carried_together(device, turns):
    f = float_of(device)
    agrees_with_differences(running, device, np.zeros((4, turns), f), _rng(turns + 3).standard_normal((4, turns))
                            .astype(f))


@pytest.mark.parametrize("turns", TURNS[1:])
def test_locals_that_swap_each_turn_carry_each_others_values(device, turns):
    f = float_of(device)
    agrees_with_differences(swapped, device, np.zeros((3, turns), f), _rng(turns + 4).standard_normal((3, turns))
                            .astype(f))


@pytest.mark.parametrize("turns", TURNS[1:])
def test_stores_and_updates_in_a_loop_take_their_adjoints_last_turn_first(device, turns):
    """out[i, 0] is stored at the first turn and updated at each: the turns after the store keep its adjoint."""
    f = float_of(device)
    rng = _rng(turns + 5)
    agrees_with_differences(cumulative, device, rng.standard_normal((3, turns)).astype(f),
                            rng.standard_normal((3, turns)).astype(f))


@pytest.mark.parametrize("turns", [1, 2, 7, 11])
def test_strided_and_reversed_ranges(device, turns):
    f = float_of(device)
    agrees_with_differences(strided, device, np.zeros(3, f), _rng(turns + 6).standard_normal((3, turns)).astype(f))


@pytest.mark.parametrize("turns", TURNS)
def test_a_loop_inside_a_loop_whose_range_counts_with_it(device, turns):
    f = float_of(device)
    agrees_with_differences(nested, device, np.zeros(3, f), _rng(turns + 7).standard_normal((3, turns)).astype(f))


def test_loops_of_as_many_turns_as_the_work_item_and_one_under_a_condition(device):
    """Work item 0's first loop has no turn; the second runs where x[i] > 0 only."""
    f = float_of(device)
    agrees_with_differences(triangular, device, np.zeros(13, f), _rng(8).standard_normal(13).astype(f))


@pytest.mark.parametrize("turns", TURNS[1:])
def test_a_carried_local_no_result_depends_on_adds_no_nan_where_it_overflows(device, turns):
    """s reaches out only through a comparison: its adjoint is zero, and 0 * inf, a NaN, is never computed."""
    f = float_of(device)
    x = _rng(turns + 10).standard_normal((3, turns)).astype(f)
    x[:, 0] = 1.0
    agrees_with_differences(overflowing, device, np.zeros((3, turns), f), x)


def test_the_pullback_of_a_matrix_vector_product_is_both_products_by_the_adjoint():
    rng = _rng(9)
    w, x = rng.standard_normal((4, 7)), rng.standard_normal(7)
    (out,), pullback = svod.vjp(matvec, np.zeros(4), w, x)
    assert np.allclose(out, w @ x)
    g = rng.standard_normal(4)
    dout, dw, dx = pullback(g)
    assert np.array_equal(dout, np.zeros(4))
    assert np.allclose(dw, np.outer(g, x)) and np.allclose(dx, w.T @ g)


@svod.kernel
def loop_own_read_after(y, x):
    for i in svod.prange(y.shape[0]):
        for k in range(x.shape[0]):
            t = x[k]
        y[i] = t


@svod.kernel
def variable_read_after(y, x):
    for i in svod.prange(y.shape[0]):
        s = 0.0
        for k in range(x.shape[0]):
            s += x[k]
        y[i] = s * k


@svod.kernel
def assigns_its_variable(y, x):
    for i in svod.prange(y.shape[0]):
        for k in range(x.shape[0]):
            k = 0
            y[i] += x[k]


@svod.kernel
def reads_what_it_stores(y, x):
    for i in svod.prange(y.shape[0]):
        for _turn in range(3):
            y[i] = y[i] * x[i]


@svod.kernel
def dynamic_step(y, x, idx):
    for i in svod.prange(y.shape[0]):
        for k in range(0, x.shape[0], idx[0]):
            y[i] += x[k]


@svod.kernel
def over_an_array(y, x):
    for i in svod.prange(y.shape[0]):
        for v in x:
            y[i] += v


@svod.kernel
def leaves_early(y, x):
    for i in svod.prange(y.shape[0]):
        for k in range(x.shape[0]):
            if x[k] > 0.0:
                break
            y[i] += x[k]


@svod.kernel
def inner_variable_carried(y, x):
    for i in svod.prange(y.shape[0]):
        j = 0
        for _turn in range(3):
            for j in range(2):
                y[i] += x[j]
        y[i] += x[j]


@svod.kernel
def argument_as_variable(y, x):
    for i in svod.prange(y.shape[0]):
        for x in range(3):  # noqa: PLR1704 (the construct refused)
            y[i] += x * 0.5


LOOPS_REFUSED = [
    (loop_own_read_after, "y[i] = t", "a read of t where it holds no value of its own", "assign t before the loop"),
    (variable_read_after, "s * k", "a read of k where it holds no value of its own", "assign k before the loop"),
    (assigns_its_variable, "k = 0", "an assignment to a tuple, an argument or a loop variable", "a local name"),
    (reads_what_it_stores, "y[i] * x[i]", "a read of y after the work item wrote it", "read every array before"),
    (dynamic_step, "for k", "a range whose step is not an integer constant", "write the step as a number"),
    (over_an_array, "for v", "a loop over what is not range(...) inside svod.prange", "loop over range("),
    (inner_variable_carried, "for _turn", "a loop whose turn leaves j without a value of its own",
     "give j a value"),
    (argument_as_variable, "for x", "a loop whose variable x is an argument", "a variable of its own"),
    (leaves_early, "break", "the statement Break", "assignments, stores"),
]


@pytest.mark.parametrize("kernel, line_text, what, change", LOOPS_REFUSED, ids=[r[0].name for r in LOOPS_REFUSED])
def test_each_loop_outside_the_slice_is_refused_at_its_line(kernel, line_text, what, change):
    lines, first = inspect.getsourcelines(kernel.fn)
    line = first + next(k for k, text in enumerate(lines) if line_text in text)
    args = (np.zeros(4), np.ones(4), np.ones(4, np.int32))[:len(kernel.parameters)]
    with pytest.raises(svod.errors.GradientError) as raised:
        svod.vjp(kernel, *args)
    error = raised.value
    assert error.kernel == kernel.name and error.stage == "gradient"
    assert f"{__file__}:{line}: {what}" in error.detail and change in error.detail
    assert np.array_equal(args[0], np.zeros(4)), "a refused kernel does not run"
