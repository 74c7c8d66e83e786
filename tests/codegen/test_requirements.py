"""A kernel's requirements (``KernelBuilder.require``, ``svod.codegen.requirements``): recorded where they fail
in a work item that reaches them, raised after the kernel as ``RequirementError`` with their message, cleared
so the next run that fails none passes; beside bounds-checked accesses, on every device, called or in a plan."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder
from svod.codegen.requirements import record_requirements
from svod.device import Buffer
from svod.dtype import dtypes
from svod.errors import IndexOutOfBoundsError, RequirementError
from svod.ir import Ops, UOp
from svod.runtime.plan import ExecutionPlan


def _required(checked: bool = False) -> UOp:
    """``out[i] = x[i] * 2`` where ``x[i] >= 0`` is required of every element (message "negative"), and
    ``x[i] <= 100`` of those where ``x[i]`` is odd ("large odd"); ``checked``: ``out[i]`` also reads
    ``x[i + shift]``, which may leave ``x`` (a bounds check beside the requirements)."""
    k = KernelBuilder("required")
    n = k.var("n", 0, 1 << 20)
    out, x = k.buffer(dtypes.int32, n), k.buffer(dtypes.int32, n)
    i = k.range(n)
    value = x[i] * 2
    if checked:
        value = value + x[i + k.var("shift", 0, 4)] * 0
    k.store(out[i], value)
    k.require(x[i] < 0, "negative")
    k.require((x[i] % 2).eq(1) & (x[i] > 100), "large odd")
    return k.build()


def test_each_requirement_is_an_atomic_max_into_its_own_element_of_a_new_last_buffer():
    ast = _required()
    recorded, requirements = record_requirements(ast)
    assert requirements is not None and requirements.messages == ("negative", "large odd")
    assert requirements.buffer.arg == 2 and requirements.buffer.dtype.size == 2
    updates = [s for s in recorded.src if s.op is Ops.ATOMIC]
    assert [u.src[0].src[1].arg for u in updates] == [0, 1] and all(u.arg is Ops.MAX for u in updates)
    assert not any(s.op is Ops.REQUIRE for s in recorded.src)
    assert record_requirements(recorded) == (recorded, None)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_a_failed_requirement_raises_after_the_kernel_and_is_cleared(device, n):
    ast = _required()
    x = (np.arange(n, dtype=np.int32) * 3) % 100
    out = np.zeros(n, np.int32)
    svod.run(ast, [out, x], device, n=n)
    assert out.tolist() == (x * 2).tolist()
    if n == 0:
        return
    for bad, message in ((-1, "negative"), (101, "large odd")):
        x[n // 2] = bad
        with pytest.raises(RequirementError, match=message) as raised:
            svod.run(ast, [out, x], device, n=n)
        assert isinstance(raised.value, ValueError) and raised.value.stage == "execute"
        assert raised.value.kernel == "required"
        x[n // 2] = 102  # even: no requirement fails, and none is left standing
        svod.run(ast, [out, x], device, n=n)
        assert out.tolist() == (x * 2).tolist()


def test_requirements_beside_a_bounds_check_raise_the_access_first_and_leave_nothing_standing(device):
    ast = _required(checked=True)
    x = np.arange(5, dtype=np.int32)
    out = np.zeros(5, np.int32)
    svod.run(ast, [out, x], device, n=5, shift=0)
    x[2] = -1
    with pytest.raises(IndexOutOfBoundsError):
        svod.run(ast, [out, x], device, n=5, shift=3)
    x[2] = 2
    svod.run(ast, [out, x], device, n=5, shift=0)
    x[2] = -1
    with pytest.raises(RequirementError, match="negative"):
        svod.run(ast, [out, x], device, n=5, shift=0)
    x[2] = 2
    svod.run(ast, [out, x], device, n=5, shift=0)
    assert out.tolist() == (x * 2).tolist()


def test_a_plan_step_raises_at_the_run_and_the_next_run_passes(device, tmp_path):
    plan = ExecutionPlan(device)
    out = plan.add_buffer(Buffer(plan.device, dtypes.int32, 9), "out")
    x = plan.add_buffer(Buffer(plan.device, dtypes.int32, 9), "x")
    plan.add_kernel(_required(), [out, x], fixedvars={"n": 9})
    plan.save(tmp_path / "required.svodplan")
    for replay in (plan, svod.load_plan(tmp_path / "required.svodplan", device)):
        replay.execute(buffers={"x": np.arange(9, dtype=np.int32)})
        with pytest.raises(RequirementError, match="negative"):
            replay.execute(buffers={"x": -np.arange(9, dtype=np.int32)})
        replay.execute(buffers={"x": np.arange(9, dtype=np.int32) + 1})
        assert replay.buffers[replay.buffer_names["out"]].numpy().tolist() == list(range(2, 20, 2))
