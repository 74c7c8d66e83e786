"""Program order inside a work item: loads, stores and atomics happen in the order the kernel states them,
per turn of the loops the effects share, on every device.

The generated corpus is checked against plain Python loops that run each work item's effects in order,
written here from the kernel's description: they share nothing with svod, the PYTHON device included."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, UOp, dtypes


def test_a_load_after_a_store_sees_it(device):
    k = KernelBuilder("store_then_load")
    t, o = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 4)
    i = k.range(4)
    k.store(t[i], t[i] + 1.0)
    k.store(o[i], t[i] * 2.0)
    t_np, o_np = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    svod.run(k.build(), [t_np, o_np], device=device)
    np.testing.assert_array_equal(t_np, [1, 2, 3, 4])
    np.testing.assert_array_equal(o_np, [2, 4, 6, 8])


@pytest.mark.parametrize("spelling", ["index", "load"])
def test_after_an_effect_is_the_element_itself(device, spelling):
    """``.after(store)`` on an element or a loaded value works, and adds nothing: a later effect's value is
    computed after the effects before it anyway."""
    k = KernelBuilder(f"after_{spelling}")
    dtype = dtypes.float64 if dtypes.float64 in device.caps.element_dtypes else dtypes.float32
    t, o = k.buffer(dtype, 4), k.buffer(dtype, 4)
    i = k.range(4)
    st = k.store(t[i], t[i] + 1.0)
    element = t[i].after(st) if spelling == "index" else t[i].load().after(st)
    k.store(o[i], element * 2.0)
    t_np, o_np = np.arange(4, dtype=dtype.numpy), np.zeros(4, dtype.numpy)
    svod.run(k.build(), [t_np, o_np], device=device)
    np.testing.assert_array_equal(o_np, [2, 4, 6, 8])


def test_the_same_value_stated_again_after_a_store_is_read_again(device):
    """``t[i] + 1`` before and after ``t[i]`` is written are two values, though one UOp."""
    k = KernelBuilder("same_value_twice")
    t, a, b = k.buffer(dtypes.int32, 5), k.buffer(dtypes.int32, 5), k.buffer(dtypes.int32, 5)
    i = k.range(5)
    k.store(a[i], t[i] + 1)
    k.store(t[i], t[i] * 3)
    k.store(b[i], t[i] + 1)
    t_np = np.arange(5, dtype=np.int32)
    a_np, b_np = np.zeros(5, np.int32), np.zeros(5, np.int32)
    svod.run(k.build(), [t_np, a_np, b_np], device=device)
    np.testing.assert_array_equal(a_np, np.arange(5) + 1)
    np.testing.assert_array_equal(b_np, np.arange(5) * 3 + 1)


def test_a_value_read_before_a_loop_is_read_again_in_each_turn_that_follows_a_store(device):
    """``x[i]`` copied out before the loop, then bumped in it: each turn reads what the turn before stored,
    not the read emitted before the loop (CPU and CL:0 added 1 once, not 3 times)."""
    k = KernelBuilder("bumps")
    y, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(y[i], x[i])
    k.store(x[i], x[i] + 1.0, k.range(3, AxisKind.LOOP))
    y_np, x_np = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    svod.run(k.build(), [y_np, x_np], device=device)
    np.testing.assert_array_equal(y_np, np.arange(8))
    np.testing.assert_array_equal(x_np, np.arange(8) + 3)


def test_two_stores_in_one_loop_interleave_per_turn(device):
    """A vertical sweep: turn ``m`` of the first store reads what the second stored in turn ``m - 1``."""
    rows, cols = 5, 7
    k = KernelBuilder("sweep")
    s, t, u = (k.buffer(dtypes.float32, (rows, cols)) for _ in range(3))
    i, m = k.range(rows), k.range(cols, AxisKind.LOOP)
    k.store(s[i, m], t[i, m] + (m > 0).where(u[i, (m - 1).maximum(0)], 0.0))
    k.store(u[i, m], s[i, m] * 2.0)
    t_np = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    s_np, u_np = np.zeros((rows, cols), np.float32), np.zeros((rows, cols), np.float32)
    svod.run(k.build(), [s_np, t_np, u_np], device=device)
    want_s, want_u = np.zeros_like(s_np), np.zeros_like(u_np)
    for col in range(cols):
        want_s[:, col] = t_np[:, col] + (want_u[:, col - 1] if col else np.float32(0))
        want_u[:, col] = want_s[:, col] * np.float32(2)
    np.testing.assert_array_equal(s_np, want_s)
    np.testing.assert_array_equal(u_np, want_u)


def test_an_atomic_update_after_a_store_adds_what_was_stored(device):
    k = KernelBuilder("store_then_atomic")
    t, x, total = k.buffer(dtypes.int32, 7), k.buffer(dtypes.int32, 7), k.buffer(dtypes.int32, 1)
    i = k.range(7)
    k.store(t[i], x[i] * 2)
    k.atomic_add(total[0], t[i] + 1)
    x_np = np.arange(7, dtype=np.int32) - 3
    t_np, total_np = np.zeros(7, np.int32), np.array([5], np.int32)
    svod.run(k.build(), [t_np, x_np, total_np], device=device)
    np.testing.assert_array_equal(t_np, x_np * 2)
    assert total_np[0] == 5 + int((x_np * 2 + 1).sum())


# ---- a generated corpus -----------------------------------------------------------------------------------

COLUMNS = 6
"""Every buffer is ``rows x COLUMNS`` int32; work item ``i`` touches row ``i`` only, so no two items meet."""

Column = tuple[Callable[[UOp], UOp | int], Callable[[int], int]]
"""A column as the kernel computes it from the loop's range, and as Python does from its value."""

COLUMN_SHAPES: dict[str, Column] = {
    "m": (lambda m: m, lambda m: m),
    "m-1": (lambda m: (m - 1).maximum(0), lambda m: max(m - 1, 0)),
    "m+1": (lambda m: (m + 1).minimum(COLUMNS - 1), lambda m: min(m + 1, COLUMNS - 1)),
    "flip": (lambda m: (COLUMNS - 1) - m, lambda m: COLUMNS - 1 - m),
    "first": (lambda m: 0, lambda m: 0),
    "last": (lambda m: COLUMNS - 1, lambda m: COLUMNS - 1),
}
TARGET_SHAPES = ("m", "m-1", "m+1", "flip")
"""Target columns that depend on the loop, so every effect of a looped kernel runs in the loop."""


@dataclass(frozen=True)
class Effect:
    atomic: bool
    buffer: int
    column: str
    value: tuple


def _expression(rng: random.Random, readable: list[int], depth: int) -> tuple:
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.25:
            return ("const", rng.randint(-3, 3))
        return ("load", rng.choice(readable), rng.choice(sorted(COLUMN_SHAPES)))
    op = rng.choice(("add", "sub", "max"))
    return (op, _expression(rng, readable, depth - 1), _expression(rng, readable, depth - 1))


def _program(seed: int) -> tuple[int, int, bool, list[Effect]]:
    rng = random.Random(seed)
    rows, buffers, looped = rng.choice((1, 3, 7, 17)), rng.randint(1, 3), rng.random() < 0.7
    atomic = [b > 0 and rng.random() < 0.3 for b in range(buffers)]  # stored to, or updated atomically and
    readable = [b for b in range(buffers) if not atomic[b]]           # then not read (svod refuses it)
    targets = [rng.randrange(buffers) for _ in range(rng.randint(2, 4))]
    effects = [Effect(atomic[b], b, rng.choice(TARGET_SHAPES) if looped else rng.choice(sorted(COLUMN_SHAPES)),
                      _expression(rng, readable, 3)) for b in targets]
    return rows, buffers, looped, effects


def _kernel(seed: int, rows: int, buffers: int, looped: bool, effects: list[Effect]) -> UOp:
    k = KernelBuilder(f"program_order_{seed}")
    bufs = [k.buffer(dtypes.int32, (rows, COLUMNS)) for _ in range(buffers)]
    i = k.range(rows)
    m = k.range(COLUMNS, AxisKind.LOOP) if looped else UOp.index_const(2)

    def build(expr: tuple) -> UOp | int:
        if expr[0] == "const":
            return UOp.const(dtypes.int32, expr[1])
        if expr[0] == "load":
            return bufs[expr[1]][i, COLUMN_SHAPES[expr[2]][0](m)]
        a, b = build(expr[1]), build(expr[2])
        assert isinstance(a, UOp)
        return a + b if expr[0] == "add" else a - b if expr[0] == "sub" else a.maximum(b)

    for e in effects:
        target, value = bufs[e.buffer][i, COLUMN_SHAPES[e.column][0](m)], build(e.value)
        if e.atomic:
            k.atomic_add(target, value)
        else:
            k.store(target, value)
    return k.build()


def _expected(rows: int, looped: bool, effects: list[Effect], arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Each work item runs its effects in order, per turn of the loop, in plain Python (int32 wraps)."""
    memory = [a.astype(np.int64).copy() for a in arrays]

    def value(expr: tuple, row: int, turn: int) -> int:
        if expr[0] == "const":
            return expr[1]
        if expr[0] == "load":
            return int(memory[expr[1]][row, COLUMN_SHAPES[expr[2]][1](turn)])
        a, b = value(expr[1], row, turn), value(expr[2], row, turn)
        return a + b if expr[0] == "add" else a - b if expr[0] == "sub" else max(a, b)

    for row in range(rows):
        for turn in range(COLUMNS) if looped else (2,):
            for e in effects:
                col = COLUMN_SHAPES[e.column][1](turn)
                result = value(e.value, row, turn) + (memory[e.buffer][row, col] if e.atomic else 0)
                memory[e.buffer][row, col] = (result + 2**31) % 2**32 - 2**31
    return [a.astype(np.int32) for a in memory]


@pytest.mark.parametrize("seed", range(24))
def test_generated_multi_effect_kernels_run_in_program_order(device, seed):
    rows, buffers, looped, effects = _program(seed)
    ast = _kernel(seed, rows, buffers, looped, effects)
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-50, 50, (rows, COLUMNS), dtype=np.int32) for _ in range(buffers)]
    want = _expected(rows, looped, effects, arrays)
    svod.run(ast, arrays, device=device)
    for slot, (got, expected) in enumerate(zip(arrays, want, strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=f"buffer {slot} of {effects}")


def test_a_range_of_no_turns_runs_nothing_and_checks_nothing(device):
    """A range whose end is a constant 0 makes no turns: its effects never happen, a reduction over it is its
    identity, and the accesses under it are not checked (the CPU once reported b[1] out of bounds: simplification
    took the empty range's one bound, 0, for its value and hoisted the check out of the loop)."""
    k = KernelBuilder("empty")
    a, b, s = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, 1)
    i, r = k.range(0), k.range(0, AxisKind.REDUCE)
    k.store(b[i + 1], a[i] + a[i + 2])
    k.store(s[0], a[r + 5].reduce(r))
    out, total = np.full(1, 7.0, np.float32), np.full(1, 7.0, np.float32)
    svod.run(k.build(), [np.ones(1, np.float32), out, total], device=device)
    assert out[0] == 7.0 and total[0] == 0.0 and np.signbit(total[0])  # a float sum of no terms is -0.0
