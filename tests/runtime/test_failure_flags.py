"""A plan's failure flags (``ExecutionPlan.add_failure_flag``): read after every run, on every path a run takes
(its own buffers, bound arrays, a loaded bundle, a loop body built as a plan of its own), raising
``LinAlgError`` with the flag's message and value, and cleared so the next run that sets nothing passes."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder
from svod.device import Buffer
from svod.dtype import dtypes
from svod.errors import IndexOutOfBoundsError, LinAlgError
from svod.ir import UOp
from svod.runtime.plan import ExecutionPlan


def flagged(into_loop: bool) -> tuple[ExecutionPlan, int]:
    """A plan whose one step copies buffer ``source`` into its failure flag (directly, or as the body of a
    one-turn loop built as a plan of its own): the run fails where ``source`` holds a non-zero value."""
    plan = ExecutionPlan("CPU")
    source = plan.add_buffer(Buffer(plan.device, dtypes.int32, 1), "source")
    flag = plan.add_buffer(Buffer(plan.device, dtypes.int32, 1), "flag")
    plan.buffers[source].copyin(np.zeros(1, np.int32))
    if into_loop:
        body = ExecutionPlan(plan.device)
        body.add_buffer(plan.buffers[source])
        body.add_buffer(plan.buffers[flag])
        body.add_copy(1, 0)
        body.add_failure_flag(1, "fn", "where: failed at {value}")
        plan.loop("i", 0, 1, body=body)
    else:
        plan.add_copy(flag, source)
        plan.add_failure_flag(flag, "fn", "where: failed at {value}")
    return plan, flag


@pytest.mark.parametrize("into_loop", [False, True])
def test_a_set_flag_raises_and_is_cleared(into_loop, tmp_path):
    plan, flag = flagged(into_loop)
    plan.save(tmp_path / "flagged.svodplan")
    for replay in (plan, svod.load_plan(tmp_path / "flagged.svodplan")):
        replay.execute()  # the flag zeroed where it was added, and where it was loaded
        with pytest.raises(LinAlgError, match="where: failed at 7") as raised:
            replay.execute(buffers={"source": np.array([7], np.int32)})
        assert raised.value.value == 7 and raised.value.kernel == "fn" and raised.value.stage == "execute"
        assert int(replay.buffers[flag].numpy()[0]) == 0  # cleared: the next run that sets nothing passes
        replay.execute(buffers={"source": np.array([0], np.int32)})
        replay.buffers[replay.buffer_names["source"]].copyin(np.array([3], np.int32))
        with pytest.raises(LinAlgError, match="failed at 3"):
            replay.execute()
        replay.buffers[replay.buffer_names["source"]].copyin(np.array([0], np.int32))
        assert replay.execute_with_vars({}) is None



def _row_read() -> UOp:
    """``out[j] = x[k, j] + flag[0]`` of a 2 x 2 ``x``: ``k`` may be 2, a row past ``x``, so the read is
    checked (the PYTHON reference raises ``IndexOutOfBoundsError`` as the kernel ends, before the run's checks),
    and the read of the flag orders it after the step that sets it."""
    k = KernelBuilder("row_read")
    out, x, flag = k.buffer(dtypes.int32, 2), k.buffer(dtypes.int32, (2, 2)), k.buffer(dtypes.int32, 1)
    row = k.var("k", 0, 2)
    j = k.range(2)
    k.store(out[j], x[row, j] + flag[0])
    return k.build()


def test_a_run_a_kernel_stops_leaves_no_flag_standing(device):
    """A run that sets the flag and then stops at an access out of bounds raises that access's error; the next
    run, in bounds and setting nothing, computes its values and raises nothing (on the reference, where the
    kernel raised before the run read its flags, that run raised the first run's ``LinAlgError``)."""
    plan = ExecutionPlan(device)
    source = plan.add_buffer(Buffer(plan.device, dtypes.int32, 1), "source")
    flag = plan.add_buffer(Buffer(plan.device, dtypes.int32, 1), "flag")
    out = plan.add_buffer(Buffer(plan.device, dtypes.int32, 2), "out")
    matrix = np.array([[1, 2], [-2**31, 2**31 - 1]], np.int32)
    rows = plan.add_buffer(Buffer.from_numpy(matrix, device=plan.device))
    plan.buffers[source].copyin(np.zeros(1, np.int32))
    plan.buffers[flag].copyin(np.zeros(1, np.int32))
    plan.add_copy(flag, source)
    plan.add_failure_flag(flag, "fn", "where: failed at {value}")
    plan.add_kernel(_row_read(), [out, rows, flag])
    for _ in range(2):
        with pytest.raises(IndexOutOfBoundsError, match="row_read"):
            plan.execute(k=2, buffers={"source": np.array([7], np.int32)})
        assert int(plan.buffers[flag].numpy()[0]) == 0
        for k in (1, 0):
            plan.execute(k=k, buffers={"source": np.array([0], np.int32)})
            np.testing.assert_array_equal(plan.buffers[out].numpy(), matrix[k])


class InterruptedRunError(Exception):
    """What stops a run from outside its steps (as an interrupt would)."""


@pytest.mark.parametrize("path", ["replay", "bound", "profiled"])
def test_a_run_an_exception_interrupts_leaves_no_flag_standing(monkeypatch, path):
    """A run interrupted after the step that sets the flag (the CPU's native replay of the plan's own buffers
    and of bound arrays, and a profiled run's dispatch from Python) raises the interruption; the next run,
    setting nothing, passes, and one that sets the flag raises its own value."""
    plan, flag = flagged(into_loop=False)
    plan.prepare()
    profile = path == "profiled"
    owner, name = (plan.device, "synchronize") if profile else (plan._native, "run")
    original = getattr(owner, name)

    def interrupted(*args: object) -> None:
        original(*args)
        raise InterruptedRunError

    def run(value: int) -> None:
        if path == "replay":
            plan.buffers[plan.buffer_names["source"]].copyin(np.array([value], np.int32))
            plan.execute()
        else:
            plan.execute(profile=profile, buffers={"source": np.array([value], np.int32)})

    monkeypatch.setattr(owner, name, interrupted)
    with pytest.raises(InterruptedRunError):
        run(7)
    monkeypatch.undo()
    assert int(plan.buffers[flag].numpy()[0]) == 0
    run(0)
    with pytest.raises(LinAlgError, match="failed at 5"):
        run(5)
