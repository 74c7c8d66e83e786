"""A name of an ``@svod.jit`` function bound anew while it holds an array (``svod.frontend.rebinding``): a new
array in straight-line code, of its own shape and dtype, an argument's caller's array left as it is; inside a
loop or an ``if``, the array the name holds, written in place, or a refusal where the shape or dtype would change.
Each is compared with the same function run as plain Python, on every device."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import KernelSyntaxError
from tests.frontend.test_arrays import line_of
from tests.frontend.test_jit import agrees_with_python


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def relu(x):
    return np.maximum(x, 0)


def softmax(x):
    tmp_max = np.max(x, axis=-1, keepdims=True)
    tmp_out = np.exp(x - tmp_max)
    tmp_sum = np.sum(tmp_out, axis=-1, keepdims=True)
    return tmp_out / tmp_sum


@svod.jit
def mlp(input, w1, b1, w2, b2, w3, b3):
    x = relu(input @ w1 + b1)
    x = relu(x @ w2 + b2)
    x = softmax(x @ w3 + b3)
    return x


@pytest.mark.parametrize(("batch", "sizes"), [(1, (1, 1, 1, 1)), (3, (5, 7, 2, 4)), (8, (13, 3, 9, 6))])
def test_a_name_bound_anew_takes_each_arrays_shape(device, batch, sizes):
    first, hidden, second, classes = sizes
    layers = [data(batch, first), data(first, hidden, seed=1), data(hidden, seed=2), data(hidden, second, seed=3),
              data(second, seed=4), data(second, classes, seed=5), data(classes, seed=6)]
    agrees_with_python(mlp, device, *layers, rtol=1e-5, atol=1e-6)


@svod.jit
def rebinds_its_argument(x, k):
    y = x
    x = x * 2
    x[0] = k
    x = x.astype(np.int32)
    return x, y


@pytest.mark.parametrize("n", [1, 2, 7])
def test_an_arguments_name_bound_anew_leaves_the_callers_array(device, n):
    """``x = x * 2`` makes a new array: the caller's ``x``, and ``y`` that holds it, keep their values, and a
    store into the new one is the new one's; a new dtype is the new array's."""
    agrees_with_python(rebinds_its_argument, device, data(n), 5.5)


@svod.jit
def sorts_into_its_name(x):
    x = np.sort(x)
    x = x[::2] + 1.0
    return x


@pytest.mark.parametrize("n", [1, 4, 13])
def test_a_sort_into_the_name_it_sorts_is_a_new_array(device, n):
    x = data(n)
    if n > 2:
        x[1], x[2] = np.nan, -0.0
    agrees_with_python(sorts_into_its_name, device, x)


def pool(x):
    out = np.empty((x.shape[0] // 2, x.shape[1]), dtype=x.dtype)
    for i in prange(out.shape[0]):
        for j in prange(x.shape[1]):
            out[i, j] = max(x[2 * i, j], x[2 * i + 1, j])
    return out


@svod.jit
def pools_twice(x, bias):
    x = relu(x + bias)
    x = pool(x)
    x = pool(x)
    x = x.reshape((x.shape[0] * x.shape[1],))
    return x


@pytest.mark.parametrize("rows", [4, 8, 12])
def test_a_temporarys_shape_follows_from_an_earlier_temporarys(device, rows):
    """A called function makes its output of its input's shape, and its input is a temporary: the host knows
    the shapes of the arrays the plan makes."""
    agrees_with_python(pools_twice, device, data(rows, 3), data(3, seed=1))


@svod.jit
def reshapes_anew(x, rows):
    flat = (x.shape[0] * x.shape[1],)
    x = np.reshape(x * 2.0, flat)
    x = x.reshape(rows, -1) + 1.0
    x = np.reshape(x, (x.shape[0] * x.shape[1],))[::2]
    return x


@pytest.mark.parametrize(("shape", "rows"), [((1, 1), 1), ((2, 6), 3), ((3, 5), 5)])
def test_a_name_bound_anew_to_its_reshaped_values(device, shape, rows):
    """``np.reshape(x, shape)`` and ``x.reshape(...)`` of a shape the host computes (a tuple a name holds too),
    each bound to the name anew."""
    agrees_with_python(reshapes_anew, device, data(*shape), rows)


@svod.jit
def squares_in_a_loop(x, w, steps):
    y = x * 1.0
    for _t in range(steps):
        y = y @ w
    return y


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_binding_in_a_loop_of_the_same_shape_writes_the_array(device, steps):
    agrees_with_python(squares_in_a_loop, device, data(2, 3), data(3, 3, seed=1) * 0.5, steps, rtol=1e-5)


def halved(a):
    out = a * 0.5
    return out


@svod.jit
def steps_from_a_helpers_output(a, w, steps):
    x = halved(a)  # x is the helper's output array from here: one name holds it
    for _t in range(steps):
        x = x @ w
    return x


@pytest.mark.parametrize("steps", [0, 2])
def test_a_helpers_output_bound_to_a_name_is_written_in_a_loop(device, steps):
    agrees_with_python(steps_from_a_helpers_output, device, data(2, 3), data(3, 3, seed=1), steps, rtol=1e-5)


@svod.jit
def views_itself_in_a_loop(x, steps):
    t = x * 1.0
    for _t in range(steps):
        t = t[:]  # the same memory: no other name keeps the array
        t += 1.0
    return t


@pytest.mark.parametrize("steps", [0, 3])
def test_a_name_bound_to_a_view_of_its_own_array_in_a_loop(device, steps):
    agrees_with_python(views_itself_in_a_loop, device, data(5), steps)


@svod.jit
def shrinks_in_a_loop(x, steps):
    y = x * 1.0
    for _t in range(steps):
        y = y[1:] * 2.0
    return y


@svod.jit
def widens_in_a_branch(x, flag):
    y = x * 2
    if flag:
        y = y + 0.5
    return y


@svod.jit
def rebinds_an_argument_in_a_loop(x, steps):
    for _t in range(steps):
        x = x + 1.0
    return x


@svod.jit
def rebinds_a_viewed_array_in_a_loop(x, steps):
    t = x * 1.0
    head = t[1:]
    for _t in range(steps):
        t = t * 2.0
    return head, t


@svod.jit
def rebinds_a_shared_array_in_a_loop(x, steps):
    t = x * 1.0
    kept = t
    for _t in range(steps):
        t = t * 2.0
    return kept, t


@svod.jit
def exchanges_in_a_loop(a, b, steps):
    x = a * 1.0
    y = b * 1.0
    for _t in range(steps):
        x, y = x * y + a, x - y
    return x, y


@svod.jit
def swaps(a, b):
    x = a * 1.0
    y = b * 1.0
    x, y = y, x
    return x - y


@svod.jit
def exchanges_through_a_temporary(a, b, steps):
    """``exchanges_in_a_loop`` as its refusal says to write it."""
    x = a * 1.0
    y = b * 1.0
    for _t in range(steps):
        t = x * y + a
        y[:] = x - y
        x[:] = t
    return x, y


@pytest.mark.parametrize(("n", "steps"), [(0, 2), (1, 3), (7, 0), (13, 3)])
def test_a_tuple_exchange_written_through_a_temporary_is_pythons(device, n, steps):
    agrees_with_python(exchanges_through_a_temporary, device, data(n), data(n, seed=1), steps, rtol=1e-5)


@pytest.mark.parametrize(("fn", "args", "statement", "words"), [
    (rebinds_a_viewed_array_in_a_loop, (np.zeros(4), 2), "t = t * 2.0", r"t is bound anew inside a loop or an if, "
     r"and another name holds or views the array it holds there \(`y = x`, `v = x\[1:\]`\), which keeps that array in "
     "Python"),
    (rebinds_a_shared_array_in_a_loop, (np.zeros(4), 2), "t = t * 2.0", "another name holds or views the array"),
    (shrinks_in_a_loop, (np.zeros(4), 2), "y = y[1:] * 2.0", r"y is bound anew inside a loop or an if to an array of "
     r"shape \(3,\) and dtype float64, and holds an array of shape \(4,\) and dtype float64 where the loop or if "
     "starts"),
    (widens_in_a_branch, (np.zeros(4, np.int32), True), "y = y + 0.5", r"to an array of shape \(4,\) and dtype "
     r"float64, and holds an array of shape \(4,\) and dtype int32"),
    (rebinds_an_argument_in_a_loop, (np.zeros(4), 2), "x = x + 1.0", "x = ... inside a loop or an if would make a "
     "new array of the name of an argument"),
    (exchanges_in_a_loop, (np.zeros(4), np.ones(4), 2), "x, y = x * y + a, x - y", r"x, y are arrays this tuple "
     r"assigns from values that read the names it assigns, .* \(`t = ...; x\[:\] = t`\)"),
    (swaps, (np.zeros(4), np.ones(4)), "x, y = y, x", "x, y are arrays this tuple assigns from values that read"),
])
def test_a_binding_inside_a_loop_or_if_that_changes_the_array_is_refused_at_its_line(fn, args, statement, words):
    with pytest.raises(KernelSyntaxError, match=words) as raised:
        fn(*args)
    assert f"test_rebinding.py:{line_of(fn, statement)}:" in str(raised.value)


@svod.jit
def holds_an_argument_in_a_loop(x, steps):
    acc = np.zeros_like(x)
    for _t in range(steps):
        acc = x
        x += acc * 0.5  # in Python acc is x: each turn's write shows through acc
    return x, acc


def returns_its_argument(v):
    w = v[:]
    return w


@svod.jit
def holds_a_helpers_view_of_an_argument_in_a_loop(x, steps):
    acc = np.zeros_like(x)
    for _t in range(steps):
        acc = returns_its_argument(x)
        x += acc * 0.5
    return x, acc


def test_a_name_bound_in_a_loop_to_an_array_written_in_place_is_refused_there():
    """``acc = x`` inside a loop, where ``x`` is written into after: in Python both names hold one array, each
    write showing through ``acc``; svod writes a copy of ``x`` into the array ``acc`` holds, which the writes do
    not reach, so it refuses at the binding, written or made by an inlined function's return."""
    with pytest.raises(KernelSyntaxError, match=r"acc is bound anew inside a loop or an if to another array or a "
                                                r"view of one") as raised:
        holds_an_argument_in_a_loop(data(5), 3)
    assert f"test_rebinding.py:{line_of(holds_an_argument_in_a_loop, '        acc = x')}:" in str(raised.value)
    with pytest.raises(KernelSyntaxError, match=r"another array or a view of one"):
        holds_a_helpers_view_of_an_argument_in_a_loop(data(5), 3)


@svod.jit
def holds_an_unwritten_argument_in_a_loop(x, steps):
    acc = np.zeros_like(x)
    for _t in range(steps):
        acc = x  # no name writes into either: a copy is Python's answer
    return acc * 2.0


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_name_bound_in_a_loop_to_an_array_no_one_writes_into_agrees(device, steps):
    agrees_with_python(holds_an_unwritten_argument_in_a_loop, device, data(7), steps)


@svod.jit
def made_either_way(a, s):
    if s > 0:
        x = a @ a  # each way makes x: the plan holds both in one buffer (``rebinding.remade``)
        z = np.zeros(a.shape[0], dtype=a.dtype)
    else:
        x = a * 2.0
        z = np.full(a.shape[0], 3.0, dtype=a.dtype)
    return x, z


@svod.jit
def inverted_or_sorted(a, s):
    if s > 0:  # noqa: SIM108 (np.linalg and np.sort are statements of their own)
        x = np.linalg.inv(a)
    else:
        x = np.sort(a, axis=1)
    return x


@svod.jit
def made_before_and_in_a_branch(a, s):
    x = a + 1.0
    if s > 0:
        x = np.linalg.inv(a)
    y = np.zeros_like(a)
    if s < 0:
        y = np.ones_like(a)
    return x, y


@pytest.mark.parametrize("n", [1, 3, 6])
def test_an_array_each_way_through_an_if_makes_is_pythons(device, n):
    """A name no array held before the ``if``, made on both ways (an expression, a product, a temporary, an
    inverse, a sort), or held before and made again on one: the way the run takes is the name's array."""
    a = (data(n, n) + 3 * np.eye(n)).astype(np.float32)
    for s in (1.0, -1.0):
        agrees_with_python(made_either_way, device, a, s, rtol=1e-5, atol=1e-5)
        agrees_with_python(inverted_or_sorted, device, a, s, rtol=1e-4, atol=1e-5)
        agrees_with_python(made_before_and_in_a_branch, device, a, s, rtol=1e-4, atol=1e-5)


@svod.jit
def remade_while_viewed(a, s):
    x = a + 1.0
    y = x[1:]
    if s > 0:
        x = np.zeros(3)
    return x, y


@svod.jit
def made_of_two_shapes(a, s):
    if s > 0:  # noqa: SIM108 (the temporaries are statements of their own, each made at its line)
        x = np.zeros(3)
    else:
        x = np.zeros(4)
    return x


@pytest.mark.parametrize(("fn", "statement", "words"), [
    (remade_while_viewed, "x = np.zeros(3)", r"x is bound anew inside a loop or an if, and another name holds or "
     r"views the array it holds there"),
    (made_of_two_shapes, "x = np.zeros(4)", r"x is made as an array of shape \(4,\) and dtype float64, and as one of "
     r"\(3,\) and float64 before, or on another way through an if"),
])
def test_an_array_made_again_that_a_plan_cannot_hold_in_one_buffer_is_refused_at_its_line(fn, statement, words):
    with pytest.raises(KernelSyntaxError, match=words) as raised:
        fn(np.ones(3), 1.0)
    assert f"test_rebinding.py:{line_of(fn, statement)}:" in str(raised.value)
