"""A work item's own registers (``UOp.register``, ``Ops.DEFINE_REG`` in a kernel AST): what the IR accepts, and
the same values on every device as a numpy loop, the reference interpreter's included."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, UOp, dtypes
from svod.errors import GraphError
from svod.ir.validate import validate


def _recurrence(turns: int | None = None) -> UOp:
    """Per item, ``r = x[i]`` then ``turns`` times ``r = r * 0.5 + i`` (a recurrence no reduction folds), and
    ``out[i] = r``: the register carried from turn to turn through its memory states."""
    k = KernelBuilder("recurrence")
    n = k.var("n", 0, 1 << 20)
    t_end = k.var("turns", 0, 100) if turns is None else turns
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    r = UOp.register(0, dtypes.float32, i)
    zero = UOp.index_const(0)
    k.store(r.state(0).index(zero), x[i])
    t = k.range(t_end, AxisKind.LOOP)
    held = r.state(1, t).index(zero).load()
    k.store(r.state(1, t).index(zero), held * 0.5 + i.cast(dtypes.float32), t)
    k.store(out[i], r.state(2).index(zero).load())
    return k.build()


def _want(x: np.ndarray, turns: int) -> np.ndarray:
    r = x.astype(np.float32).copy()
    for _ in range(turns):
        r = (r * np.float32(0.5) + np.arange(len(x), dtype=np.float32)).astype(np.float32)
    return r


@pytest.mark.parametrize("n", [0, 1, 7, 33, 130])
@pytest.mark.parametrize("turns", [0, 1, 5])
def test_each_work_item_carries_its_own_register(device, n, turns):
    x = np.linspace(-3, 3, n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    svod.run(_recurrence(), [out, x], device=device, n=n, turns=turns)
    np.testing.assert_allclose(out, _want(x, turns), rtol=1e-6)


def test_a_kernel_with_a_register_takes_no_buffer_for_it():
    ast = _recurrence(3)
    validate(ast)
    assert sorted(u.arg for u in ast.toposort() if u.op is svod.Ops.PARAM) == [0, 1]


def _with_register_access(index: int = 0, atomic: bool = False) -> UOp:
    k = KernelBuilder("bad_register")
    out = k.buffer(dtypes.int32, 4)
    i = k.range(4)
    r = UOp.register(0, dtypes.int32, i)
    target = r.index(UOp.index_const(index))
    k.atomic_add(target, 1) if atomic else k.store(target, i.cast(dtypes.int32))
    k.store(out[i], r.index(UOp.index_const(0)).load())
    return k.build()


def test_a_register_is_accessed_at_index_zero_only():
    with pytest.raises(GraphError, match="a register is accessed at index 0"):
        validate(_with_register_access(index=1))


def test_a_register_is_not_updated_atomically():
    with pytest.raises(GraphError, match="nothing updates it atomically"):
        validate(_with_register_access(atomic=True))


def test_a_register_belongs_to_the_work_items_of_global_ranges():
    t = UOp.range(4, 1, AxisKind.LOOP)
    with pytest.raises(GraphError, match="one per work item of GLOBAL ranges"):
        UOp.register(0, dtypes.int32, t)
    with pytest.raises(GraphError, match="non-negative"):
        UOp.register(-1, dtypes.int32)
