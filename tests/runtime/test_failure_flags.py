"""A plan's failure flags (``ExecutionPlan.add_failure_flag``): read after every run, on every path a run takes
(its own buffers, bound arrays, a loaded bundle, a loop body built as a plan of its own), raising
``LinAlgError`` with the flag's message and value, and cleared so the next run that sets nothing passes."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Buffer
from svod.dtype import dtypes
from svod.errors import LinAlgError
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
