"""Locals a loop carries from turn to turn: each is a register of its work item, and an ``if`` that
assigns one stores it only where the ``if`` holds. Every device is compared with the kernel's own function
run as plain Python."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.ir import Ops
from svod.ir.uop import memory_of
from tests.frontend.test_held_values import agrees_with_python

SIZES = [1, 7, 33]


@svod.kernel
def escape_counts(out, max_iter: svod.Int[0, 1000]):
    """Mandelbrot's for/if form: every turn runs, and only the points still inside change."""
    for y in svod.prange(out.shape[0]):
        for x in range(out.shape[1]):
            cr = -2.0 + 3.0 * x / out.shape[1]
            ci = -1.5 + 3.0 * y / out.shape[0]
            zr = 0.0
            zi = 0.0
            k = 0
            for _ in range(max_iter):
                if zr * zr + zi * zi <= 4.0:
                    zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                    k += 1
            out[y, x] = k


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (17, 31)])
@pytest.mark.parametrize("max_iter", [0, 1, 30])
def test_an_escape_count_in_a_for_loop(device, shape, max_iter):
    agrees_with_python(escape_counts, device, np.zeros(shape, np.int32), max_iter)


@svod.kernel
def branches_that_assign(out, x):
    """Nested ifs and an else that each assign some of the carried locals, one of them from an array."""
    for i in svod.prange(x.shape[0]):
        a = 0.0
        b = 1.0
        n = 0
        for j in range(x.shape[1]):
            if a < 10.0:
                if j % 2 == 0:
                    a = a + b
                else:
                    b = b * 1.5
                    n += 1
            elif x[i, j] > 0:
                a, b = b, a - x[i, j]
            else:
                n -= 1
        out[i, 0] = a
        out[i, 1] = b
        out[i, 2] = n


@pytest.mark.parametrize("rows", SIZES)
def test_nested_branches_that_assign_carried_locals(device, rows):
    x = np.random.default_rng(rows).normal(size=(rows, 23)).astype(np.float32)
    agrees_with_python(branches_that_assign, device, np.zeros((rows, 3), np.float32), x)


@svod.kernel
def carried_only_on_one_branch(out, x):
    """The loop that carries ``v`` runs on one branch only: its register starts there; the other branch
    keeps the value before it, and what follows reads the right one."""
    for i in svod.prange(x.shape[0]):
        v = x[i, 0] - x[i, 0]
        if (x[i, 0] // (abs(v) % 3 + 1)) >= (x[i, 0] + v) % 5:
            for _ in range(i + 1):
                v = v // 2 + x[i, 0]
            if v > 0:
                out[i, 0] = 9
                v += out[i, 0] + x[i, 1]
        out[i, 0] = v


@pytest.mark.parametrize("rows", SIZES)
def test_a_register_set_up_on_one_branch(device, rows):
    x = np.random.default_rng(rows + 1).integers(-40, 40, (rows, 2)).astype(np.int32)
    agrees_with_python(carried_only_on_one_branch, device, np.zeros((rows, 1), np.int32), x)


def test_carried_locals_are_registers_not_buffers():
    bound = escape_counts.bind(np.zeros((3, 4), np.int32), 5)
    topo = bound.ast.toposort()
    assert len(bound.arrays) == 1 and [u.arg for u in topo if u.op is Ops.PARAM] == [0]
    assert sorted(u.arg for u in topo if u.op is Ops.DEFINE_REG) == [0, 1, 2]
    gated = [e for e in bound.ast.src if e.op is Ops.STORE and memory_of(e.src[0].src[0]).op is Ops.DEFINE_REG
             and len(e.src[0].src) == 3]
    assert len(gated) == 3  # zr, zi and k are stored only where the point is still inside


@svod.kernel
def gated_by_a_carried_local(x, idx, hist):
    for i in svod.prange(x.shape[0]):
        s = x[idx[i], 0]
        for j in range(x.shape[1]):
            s += x[i, j]
        t = 0
        for k in range(3):
            t = t + (x[i, 0] if (t < 2 and s > 0) else 1)
            svod.atomic_add(hist, 0, t)
            x[i, 1] = k


@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_read_before_a_loop_is_not_gated_by_a_local_the_loop_carries(device, n):
    """``x[idx[i], 0]`` is held from its statement, before the loop; its one use is in the loop, under
    ``t < 2``, which reads ``t``'s register at the start of each turn. The read was gated by that test, which
    cannot be computed before the loop, and OpenCL's linearizer refused the kernel."""
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 4
    agrees_with_python(gated_by_a_carried_local, device, x, np.arange(n, dtype=np.int32) * 5 % n,
                       np.zeros(1, np.float32))


@svod.kernel
def serial_root_then_parallel(out, m: svod.Int[0, 10_000]):
    """Serial code carries ``n`` through a ``while`` loop; every work item of the ``prange`` after it reads it."""
    n = 0
    while n * n < m:
        n += 1
    for i in svod.prange(out.shape[0]):
        out[i] = n + i


@svod.kernel
def serial_count_then_parallel(out, x):
    """The same through a ``for`` loop with a ``break``, its count read from an array the kernel only reads."""
    k = 0
    for j in range(x.shape[0]):
        if x[j] < 0:
            break
        k += 1
    for i in svod.prange(out.shape[0]):
        out[i] = k * 10 + i


@pytest.mark.parametrize("size", [1, 37, 100_003])  # 100,003: split over threads on the CPU
def test_a_local_serial_code_carries_reaches_every_work_item_of_a_later_prange(device, size):
    if device.caps.max_loop_turns is None:
        agrees_with_python(serial_root_then_parallel, device, np.zeros(size, np.int32), 50)
    x = np.array([3.0, 1.0, 2.0, -1.0, 5.0], np.float32)
    agrees_with_python(serial_count_then_parallel, device, np.zeros(size, np.int32), x)


@svod.kernel
def folded_to_its_negative(out, x):
    for i in svod.prange(out.shape[0]):
        v = x[i, 0]
        for _ in range(out.shape[1]):
            v = min(v, -v)  # stored where -v < v: a test of the local the loop stores
        w = x[i, 0] + 1.0
        for _ in range(out.shape[1]):
            if -w < w:  # noqa: PLR1730 (the if form is the point)
                w = -w
        out[i, 0] = v + w * 1000.0


@pytest.mark.parametrize("columns", [1, 2, 3, 4])
def test_a_store_gated_by_the_value_it_stores_is_tested_at_every_turn(device, columns):
    """``v = min(v, -v)`` stores ``-v`` where ``-v < v``: the test reads the local the loop stores, so it is made
    at each turn. It was made once, before the loop, which then stored ``-v`` at every turn: an even count of
    turns gave 3.5 where Python gives -3.5 (found by the oracle's random kernels of a row's cells, seed 42896;
    the reference interpreter, which runs no lowering, agreed with Python)."""
    x = np.repeat(np.array([[3.5], [-2.0], [0.0], [-0.0], [np.inf], [7.25]], np.float32), columns, axis=1)
    agrees_with_python(folded_to_its_negative, device, np.zeros_like(x), x)
