"""``while``, ``break`` and ``continue`` in Python kernels: loops whose turns depend on the data, on
every device against the same function run as plain Python (``svod.frontend.oracle``). A device whose loops
have a turn limit (WebGPU on llvmpipe) refuses a ``while`` (nothing bounds its turns) and runs the bounded
``for ... break`` form."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import GraphError, IndexOutOfBoundsError
from svod.frontend.oracle import run_as_python
from svod.frontend.pykernel import Kernel
from tests.helpers import refuses

SIZES = [0, 1, 7, 13]
"""Sizes 0 and 1, and primes: no tile or group divides them."""


def agrees(kernel: Kernel, device: Device, *args: object, rtol: float = 1e-6, endless: bool = False) -> None:
    """Run ``kernel`` on ``device`` on copies of ``args`` and compare every array with plain Python's; a kernel
    with a ``while`` (``endless``) on a device that limits loop turns must be refused instead, naming the loop."""
    for a in args:
        if isinstance(a, np.ndarray) and refuses(device, svod.dtypes.from_numpy(a.dtype)):
            return
    want = run_as_python(kernel, *args)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    if endless and device.caps.max_loop_turns is not None:
        with pytest.raises(GraphError, match="a while loop has no bound on its turns") as raised:
            kernel(*got, device=device)
        assert raised.value.kernel == kernel.name and "test_while.py:" in str(raised.value)
        return
    kernel(*got, device=device)
    for expected, actual in zip(want, got, strict=True):
        if isinstance(expected, np.ndarray):
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0)


# ---- while ---------------------------------------------------------------------------------------------------

@svod.kernel
def mandelbrot(out, max_iter):
    h, w = out.shape
    for py in svod.prange(h):
        for px in svod.prange(w):
            cr = -2.0 + 3.0 * px / w
            ci = -1.5 + 3.0 * py / h
            zr = 0.0; zi = 0.0; n = 0  # noqa: E702
            while n < max_iter and zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                n += 1
            out[py, px] = n


@pytest.mark.parametrize("size", SIZES)
def test_mandelbrot_in_the_while_form(device, size):
    agrees(mandelbrot, device, np.zeros((size, size + 4), np.int32), 40, endless=True)


def test_mandelbrot_escapes_early_and_stops_at_max_iter():
    out = np.zeros((9, 11), np.int32)
    mandelbrot(out, 25)
    assert out.max() == 25 and out.min() < 5  # points inside run every turn, points outside leave early
    np.testing.assert_array_equal(out, run_as_python(mandelbrot, np.zeros((9, 11), np.int32), 25)[0])


@svod.kernel
def newton_sqrt(out, x):
    for i in svod.prange(x.shape[0]):
        guess = x[i] + 1.0
        step = 1.0
        while abs(step) > 1e-6:
            step = (guess * guess - x[i]) / (2.0 * guess)
            guess -= step
        out[i] = guess


@pytest.mark.parametrize("size", SIZES)
def test_a_convergence_loop(device, size):
    x = np.linspace(0.0, 50.0, size).astype(np.float32)
    agrees(newton_sqrt, device, np.zeros(size, np.float32), x, rtol=1e-6, endless=True)


@svod.kernel
def collatz_steps(out, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        steps = 0
        while v != 1:
            if v % 2 == 0:  # noqa: SIM108
                v = v // 2
            else:
                v = 3 * v + 1
            steps += 1
        out[i] = steps


@pytest.mark.parametrize("size", SIZES)
def test_a_while_on_integers(device, size):
    agrees(collatz_steps, device, np.zeros(size, np.int32), np.arange(1, size + 1, dtype=np.int32), endless=True)


@svod.kernel
def never_runs(out, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        while v < 0:
            v += 1
            out[i] = 99
        out[i] = v * 2


@svod.kernel
def never_runs_by_constant(out):
    n = 5
    while n < 3:
        n += 1
    for i in svod.prange(out.shape[0]):
        out[i] = n


def test_a_while_that_never_runs(device):
    agrees(never_runs, device, np.zeros(7, np.int32), np.arange(7, dtype=np.int32), endless=True)
    agrees(never_runs_by_constant, device, np.zeros(7, np.int32))  # a test false before the loop: no loop at all


@svod.kernel
def digit_sums(out, x):
    for i in svod.prange(x.shape[0]):
        for j in range(x.shape[1]):  # a while nested in a sequential loop
            v = x[i, j]
            s = 0
            while v > 0:
                s += v % 10
                v //= 10
            out[i, j] = s


@pytest.mark.parametrize("size", [0, 1, 5])
def test_a_while_nested_in_a_for(device, size):
    x = (np.arange(size * 3, dtype=np.int32).reshape(size, 3) * 7919) % 100003
    agrees(digit_sums, device, np.zeros((size, 3), np.int32), x, endless=True)


@svod.kernel
def while_true_with_break(out, x):
    for i in svod.prange(x.shape[0]):
        k = 0
        while True:
            if k >= x.shape[1] or x[i, k] < 0:
                break
            k += 1
        out[i] = k


@pytest.mark.parametrize("size", SIZES)
def test_while_true_left_by_a_break(device, size):
    x = np.ones((size, 6), np.int32)
    x[::3, 2] = -1
    agrees(while_true_with_break, device, np.zeros(size, np.int32), x, endless=True)


@svod.kernel
def single_item_while(out, x):
    total = 0
    i = 0
    while i < x.shape[0]:
        total += x[i]
        i += 1
    out[0] = total


def test_a_while_outside_any_prange_runs_as_one_work_item(device):
    agrees(single_item_while, device, np.zeros(1, np.int32), np.arange(11, dtype=np.int32), endless=True)


# ---- break and continue ------------------------------------------------------------------------------------------

@svod.kernel
def first_above(out, x, limit):
    for i in svod.prange(x.shape[0]):
        found = -1
        for j in range(x.shape[1]):
            if x[i, j] > limit:
                found = j
                break
        out[i] = found


@pytest.mark.parametrize("size", SIZES)
def test_a_search_with_break(device, size):
    x = np.random.default_rng(size).random((size, 9), dtype=np.float32)
    agrees(first_above, device, np.zeros(size, np.int32), x, 0.7)


@svod.kernel
def sum_of_positives(out, x):
    for i in svod.prange(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            if x[i, j] < 0.0:
                continue
            s += x[i, j]
        out[i] = s


@pytest.mark.parametrize("size", SIZES)
def test_continue_skips_elements(device, size):
    x = np.random.default_rng(size).standard_normal((size, 11)).astype(np.float32)
    agrees(sum_of_positives, device, np.zeros(size, np.float32), x, rtol=1e-5)


@svod.kernel
def continue_then_store(out, x):
    for i in svod.prange(x.shape[0]):
        count = 0
        for j in range(x.shape[1]):
            v = x[i, j]
            if v % 3 == 0:
                continue
            count += 1
            out[i, j] = count  # stores after a continue run where it was not taken
        out[i, 0] = out[i, 0] + 100 * count


def test_continue_gates_the_stores_after_it(device):
    agrees(continue_then_store, device, np.zeros((5, 7), np.int32), np.arange(35, dtype=np.int32).reshape(5, 7))


@svod.kernel
def break_inner_only(out, x):
    for i in svod.prange(x.shape[0]):
        total = 0
        for j in range(x.shape[1]):
            for k in range(x.shape[1]):
                if k > j:
                    break  # leaves the k loop; the j loop goes on
                total += x[i, k]
        out[i] = total


@pytest.mark.parametrize("size", SIZES)
def test_break_leaves_the_inner_range_loop_only(device, size):
    agrees(break_inner_only, device, np.zeros(size, np.int32), np.arange(size * 6, dtype=np.int32).reshape(size, 6))


@svod.kernel
def break_keeps_values_at_the_break(out, x):
    for i in svod.prange(x.shape[0]):
        a = 0
        b = 0
        for j in range(x.shape[1]):
            a = x[i, j]
            if a > 50:
                b = -a
                break
            b = a + 1000  # not reached in the turn that breaks
        out[i, 0] = a
        out[i, 1] = b


def test_a_local_keeps_its_value_at_the_break(device):
    x = np.arange(7 * 4, dtype=np.int32).reshape(7, 4) * 3
    agrees(break_keeps_values_at_the_break, device, np.zeros((7, 2), np.int32), x)


@svod.kernel
def break_and_continue(out, x):
    for i in svod.prange(x.shape[0]):
        s = 0
        n = 0
        for j in range(x.shape[1]):
            v = x[i, j]
            if v == 0:
                continue
            if v < 0:
                break
            s += v
            n += 1
        out[i, 0] = s
        out[i, 1] = n


@pytest.mark.parametrize("size", SIZES)
def test_break_and_continue_in_one_loop(device, size):
    x = np.random.default_rng(size + 3).integers(-2, 5, (size, 10)).astype(np.int32)
    agrees(break_and_continue, device, np.zeros((size, 2), np.int32), x)


@svod.kernel
def while_with_continue_and_break(out, x):
    for i in svod.prange(x.shape[0]):
        j = 0
        odd = 0
        while j < x.shape[1]:
            v = x[i, j]
            j += 1
            if v % 2 == 0:
                continue
            if v > 40:
                break
            odd += v
        out[i] = odd * 100 + j


def test_continue_and_break_in_a_while(device):
    x = np.random.default_rng(5).integers(0, 50, (7, 8)).astype(np.int32)
    agrees(while_with_continue_and_break, device, np.zeros(7, np.int32), x, endless=True)


@svod.kernel
def stores_in_a_loop_with_break(out, x):
    for i in svod.prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * 2
            if x[i, j] == 0:
                break


def test_effects_before_a_break_happen_and_after_it_do_not(device):
    x = np.array([[1, 2, 0, 4, 5], [0, 1, 1, 1, 1], [3, 3, 3, 3, 3]], np.int32)
    agrees(stores_in_a_loop_with_break, device, np.full((3, 5), -1, np.int32), x)


@svod.kernel
def bounded_search(out, x):
    for i in svod.prange(x.shape[0]):
        k = 0
        for _ in range(x.shape[1]):  # the bounded form of a while: every device runs it
            if x[i, k] < 0:
                break
            k += 1
        out[i] = k


def test_the_bounded_form_runs_where_a_while_is_refused(device):
    x = np.ones((13, 5), np.int32)
    x[1::2, 3] = -1
    agrees(bounded_search, device, np.zeros(13, np.int32), x)


@svod.kernel
def unconditional_break(out, x):
    for i in svod.prange(x.shape[0]):
        n = 0
        for j in range(x.shape[1]):
            n += x[i, j]
            break
        out[i] = n


def test_an_unconditional_break_runs_one_turn(device):
    agrees(unconditional_break, device, np.zeros(4, np.int32), np.arange(12, dtype=np.int32).reshape(4, 3) + 1)


# ---- loops inside loops, reads of what the loop writes -----------------------------------------------------

@svod.kernel
def nested_carry(out, x):
    for i in svod.prange(x.shape[0]):
        total = 0
        for j in range(x.shape[1]):
            k = 0
            while k < x[i, j]:
                total += 1
                k += 1
        out[i] = total

@svod.kernel
def reads_what_it_writes(out, x):
    for i in svod.prange(x.shape[0]):
        c = 0
        while x[i] > 0 or c < 2:
            x[i] -= 3
            c += 1
        out[i] = c

@svod.kernel
def while_in_while(out, x):
    for i in svod.prange(x.shape[0]):
        a = x[i]
        steps = 0
        while a > 1:
            b = a
            while b % 2 == 0:
                b //= 2
                steps += 1
            a = b - 1 if b > 1 else b
            steps += 10
        out[i] = steps

@svod.kernel
def break_with_store_same_array(x):
    for i in svod.prange(x.shape[0]):
        for j in range(1, x.shape[1]):
            if x[i, j - 1] > 5:
                break
            x[i, j] = x[i, j - 1] + x[i, j]

@svod.kernel
def continue_in_while(out, x):
    for i in svod.prange(x.shape[0]):
        j = 0
        s = 0.0
        while j < x.shape[1]:
            j += 1
            if x[i, j - 1] < 0:
                continue
            s += x[i, j - 1]
            if s > 3.0:
                break
        out[i] = s

@svod.kernel
def float32_while(out, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        n = 0
        while v > svod.float32(1.0):
            v = v * svod.float32(0.5)
            n += 1
        out[i] = n


MORE = {
    "nested_carry": (nested_carry, lambda: [np.zeros(5, np.int32), np.arange(15, dtype=np.int32).reshape(5, 3) % 4]),
    "reads_what_it_writes": (reads_what_it_writes,
                             lambda: [np.zeros(6, np.int32), np.arange(6, dtype=np.int32) * 4 - 3]),
    "while_in_while": (while_in_while, lambda: [np.zeros(9, np.int32), np.arange(9, dtype=np.int32) * 7 + 1]),
    "break_with_store_same_array": (break_with_store_same_array,
                                    lambda: [np.arange(24, dtype=np.int32).reshape(4, 6) % 5]),
    "continue_in_while": (continue_in_while,
                          lambda: [np.zeros(4, np.float32), (np.arange(20, dtype=np.float32).reshape(4, 5) - 8) / 3]),
    "float32_while": (float32_while, lambda: [np.zeros(7, np.int32), np.linspace(0.1, 1000, 7).astype(np.float32)]),
}
"""A while's test reading the array its body writes, a while in a while, one carrying a local of the loop
around it, a break in a loop that stores into the array its test reads."""


@pytest.mark.parametrize("name", sorted(MORE))
def test_loops_around_loops_and_reads_of_what_they_write(device, name):
    kernel, make = MORE[name]
    endless = name != "break_with_store_same_array"
    agrees(kernel, device, *make(), endless=endless)


# ---- out of bounds -------------------------------------------------------------------------------------------

@svod.kernel
def find_zero(out, x):
    for i in svod.prange(x.shape[0]):
        j = 0
        while x[i, j] != 0:
            j += 1
        out[i] = j


@svod.kernel
def skip_zeros(out, x):
    for i in svod.prange(out.shape[0]):
        j = 0
        while x[j] == 0:  # no nonzero: Python raises IndexError; a failed read gives 0, which must not loop for ever
            j += 1
        out[i] = j


def test_a_while_that_runs_past_its_array_raises_and_ends(device):
    if device.caps.max_loop_turns is not None:
        return  # refused there (test_mandelbrot_in_the_while_form)
    x = np.ones((4, 5), np.int32)
    x[[0, 2], 3] = 0
    with pytest.raises(IndexError):
        run_as_python(find_zero, np.zeros(4, np.int32), x)
    with pytest.raises(IndexOutOfBoundsError):
        find_zero(np.zeros(4, np.int32), x, device=device)
    with pytest.raises(IndexOutOfBoundsError):
        skip_zeros(np.zeros(3, np.int32), np.zeros(6, np.int32), device=device)
    ok = np.ones((4, 5), np.int32)
    ok[:, 4] = 0
    agrees(find_zero, device, np.zeros(4, np.int32), ok)


def test_svod_check_agrees_on_a_while_that_runs_past_its_array():
    """Each backend raises as plain Python does; the arrays then hold what the loops had done when they saw the
    failure, which depends on timing, and are not compared."""
    x = np.ones((6, 5), np.int32)
    x[::2, 2] = 0
    report = svod.check(find_zero, [np.zeros(6, np.int32), x])
    assert report.ok, report


@svod.kernel
def counted_with_else(out, x, limit):
    for i in svod.prange(out.shape[0]):
        k = 0
        while k < i:
            k += 1
            if x[k] == limit:
                break
            for j in range(3):
                if j == k:
                    break
        else:
            k = -k
        out[i] = k


@pytest.mark.parametrize("limit", [0.5, 2.5, 7.0])
def test_a_whiles_else_runs_where_no_break_of_its_own_ended_it(device, limit):
    """``while ... else``: the else where the test failed, not where the loop's ``break`` (nor where a break of the
    loop inside it) was taken; once refused."""
    x = np.array([0.25, -3.0, 0.5, 1.5, 2.5, -0.75, 4.5], np.float32)
    agrees(counted_with_else, device, np.zeros(x.size, np.int32), x, limit, endless=True)
