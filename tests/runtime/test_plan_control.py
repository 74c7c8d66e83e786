"""Control flow inside plans: a branch on a buffer a kernel wrote, a ``while`` loop whose condition its body
computes again, and a loop that ends early (``until``); each against the same Python loop over numpy, on
every device, native replay included, and through a bundle."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import svod
from svod import ExecutionPlan, KernelBuilder, dtypes
from svod.device import ReplayBranch, ReplayLoop, ReplayWhile
from svod.dtype import DType
from svod.errors import SvodError
from svod.runtime.steps import BranchStep, LoopStep, WhileStep
from tests.helpers import assert_replayed_natively, open_device

DEVICES = ["llvm", "PYTHON", "CL:0", "CUDA:0", "WEBGPU:0"]


def _add_one(n: int) -> svod.UOp:
    """x[i] += 1."""
    k = KernelBuilder("add_one")
    x = k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(x[i], x[i] + 1.0)
    return k.build()


def _scale(n: int, by: float) -> svod.UOp:
    k = KernelBuilder(f"scale_{by:g}".replace(".", "_").replace("-", "m"))
    x = k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(x[i], x[i] * by)
    return k.build()


def _first_below(limit: float) -> svod.UOp:
    """flag[0] = x[0] < limit (one work item)."""
    k = KernelBuilder(f"below_{limit:g}".replace(".", "_"))
    flag, x = k.buffer(dtypes.int32, 1), k.buffer(dtypes.float32, 1)
    k.store(flag[0], (x[0] < limit).cast(dtypes.int32))
    return k.build()


def _plan(device: str, x0: np.ndarray) -> tuple[ExecutionPlan, int, int, int]:
    plan = ExecutionPlan(open_device(device))
    x = plan.add_buffer(svod.Buffer.from_numpy(x0, device=plan.device), "x")
    head = plan.add_buffer(svod.Buffer(plan.device, dtypes.float32, 1), "head")
    flag = plan.add_buffer(svod.Buffer(plan.device, dtypes.int32, 1), "flag")
    return plan, x, head, flag


def _head_copy(plan: ExecutionPlan, x: int, head: int, n: int) -> int:
    """head[0] = x[0], as a kernel (the flag kernels read a one-element buffer)."""
    k = KernelBuilder("head")
    dst, src = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, n)
    k.store(dst[0], src[0])
    return plan.add_kernel(k.build(), [head, x])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("start", [0.0, 5.0])
def test_a_branch_runs_the_body_a_kernel_chose(device, start):
    n = 13
    x0 = np.full(n, start, np.float32)
    plan, x, head, flag = _plan(device, x0)
    _head_copy(plan, x, head, n)
    plan.add_kernel(_first_below(1.0), [flag, head])
    then = plan.add_kernel(_add_one(n), [x])
    otherwise = plan.add_kernel(_scale(n, 2.0), [x])
    plan.branch(flag, [then], [otherwise])
    plan.execute()
    want = x0 + 1 if start < 1.0 else x0 * 2
    np.testing.assert_array_equal(plan.buffers[x].numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("start", [0.0, 2.5, 9.0])
def test_a_while_loop_repeats_until_its_body_clears_the_condition(device, start):
    n = 7
    x0 = np.full(n, start, np.float32)
    plan, x, head, flag = _plan(device, x0)
    _head_copy(plan, x, head, n)
    plan.add_kernel(_first_below(5.0), [flag, head])
    body = [plan.add_kernel(_add_one(n), [x]), _head_copy(plan, x, head, n),
            plan.add_kernel(_first_below(5.0), [flag, head])]
    plan.while_loop(flag, body)
    plan.execute()
    want = x0.copy()
    while want[0] < 5.0:
        want += 1
    np.testing.assert_array_equal(plan.buffers[x].numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
def test_a_loop_ends_after_the_turn_that_sets_its_exit(device, tmp_path):
    n = 5
    x0 = np.zeros(n, np.float32)
    plan, x, head, flag = _plan(device, x0)
    k = KernelBuilder("at_least_3")
    out, src = k.buffer(dtypes.int32, 1), k.buffer(dtypes.float32, 1)
    k.store(out[0], (src[0] >= 3.0).cast(dtypes.int32))
    body = [plan.add_kernel(_add_one(n), [x]), _head_copy(plan, x, head, n), plan.add_kernel(k.build(), [flag, head])]
    plan.loop("t", 0, 100, body, until=flag)
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[x].numpy(), np.full(n, 3.0, np.float32))
    if device == "llvm":  # a bundle keeps the exit
        path = tmp_path / "until.svod"
        plan.save(path)
        loaded = svod.load_plan(path)
        loaded.execute(buffers={"x": np.ones(n, np.float32)})
        assert loaded.buffers[loaded.buffer_names["flag"]].numpy()[0] == 1


def test_a_branch_takes_the_steps_added_last():
    plan = ExecutionPlan("CPU")
    x = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 4), "x")
    flag = plan.add_buffer(svod.Buffer("CPU", dtypes.int32, 1), "flag")
    first = plan.add_kernel(_add_one(4), [x])
    plan.add_kernel(_scale(4, 3.0), [x])
    with pytest.raises(SvodError, match="steps added last"):
        plan.branch(flag, [first])
    with pytest.raises(SvodError, match="no plan buffer 9"):
        plan.while_loop(9, [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chosen", [0, 1])
def test_a_condition_bound_per_run_is_the_bound_arrays(device, chosen):
    plan, x, _head, flag = _plan(device, np.zeros(3, np.float32))
    then = plan.add_kernel(_add_one(3), [x])
    otherwise = plan.add_kernel(_scale(3, -1.0), [x])
    plan.branch(flag, [then], [otherwise])
    plan.prepare()
    for _ in range(2):  # the array bound, not the plan's own buffer (left zero), decides
        plan.execute(buffers={"flag": np.array([chosen], np.int32), "x": (got := np.ones(3, np.float32))})
        np.testing.assert_array_equal(got, np.full(3, 2.0 if chosen else -1.0, np.float32))


# ---- native replay of control flow: no Python per decision ---------------------------------------------------

CPU_DEVICES = ["llvm", "clang", "PYTHON"]
"""The devices whose buffers are host memory: a CPU compiler pair replays natively, the reference from Python."""


def _python_decisions(plan: ExecutionPlan) -> list[int]:
    """A count of the times Python reads a control step's condition (once per decision it makes), kept
    current as the plan runs: every branch's and while loop's condition and every loop's ``until`` counted."""
    count = [0]

    def counted(read: Callable[[], bool]) -> Callable[[], bool]:
        def read_counted() -> bool:
            count[0] += 1
            return read()
        return read_counted

    plan.prepare()
    for step in (inner for top in plan._steps for inner in top.flattened()):
        if isinstance(step, (BranchStep, WhileStep)):
            step.condition = counted(step.condition)
        elif isinstance(step, LoopStep) and step.until is not None:
            step.until = counted(step.until)
    return count


def _check_native(plan: ExecutionPlan, device: str, kinds: set[type]) -> None:
    """On a CPU compiler pair, the plan's control flow is in the dispatcher's words; the reference has no
    native replay."""
    if device == "PYTHON":
        assert plan._native is None
    else:
        assert_replayed_natively(plan, kinds)


def _count_down() -> svod.UOp:
    """c[0] -= 1."""
    k = KernelBuilder("count_down")
    c = k.buffer(dtypes.int32, 1)
    k.store(c[0], c[0] - 1)
    return k.build()


def _count_from_t() -> svod.UOp:
    """c[0] = t, the enclosing loop's variable."""
    k = KernelBuilder("count_from_t")
    c, t = k.buffer(dtypes.int32, 1), k.var("t", 0, 1000)
    k.store(c[0], t.cast(dtypes.int32))
    return k.build()


def _flag_at_least(n: int, limit: float, dtype: DType, held: float | int, not_held: float | int) -> svod.UOp:
    """flag[0] = held if x[0] >= limit else not_held, a ``dtype`` flag."""
    k = KernelBuilder(f"at_least_{limit:g}_{dtype.name}")
    flag, x = k.buffer(dtype, 1), k.buffer(dtypes.float32, n)
    k.store(flag[0], (x[0] >= limit).where(svod.UOp.const(dtype, held), svod.UOp.const(dtype, not_held)))
    return k.build()


def _countdown_plan(device: str, n: int) -> tuple[ExecutionPlan, int, int]:
    """while c: c -= 1; x += 1 (x of n float32, c one int32)."""
    plan = ExecutionPlan(open_device(device))
    x = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(n, np.float32), device=plan.device), "x")
    c = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(1, np.int32), device=plan.device), "c")
    plan.while_loop(c, [plan.add_kernel(_count_down(), [c]), plan.add_kernel(_add_one(n), [x])])
    return plan, x, c


@pytest.mark.parametrize("device", CPU_DEVICES)
@pytest.mark.parametrize("turns", [0, 1, 1000])
def test_a_while_loop_of_none_one_and_many_turns_is_decided_natively(device, turns):
    plan, x, c = _countdown_plan(device, 3)
    decisions = _python_decisions(plan)
    plan.buffers[c].copyin(np.array([turns], np.int32))
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[x].numpy(), np.full(3, turns, np.float32))
    assert plan.buffers[c].numpy()[0] == 0
    _check_native(plan, device, {ReplayWhile})
    assert decisions[0] == (0 if device != "PYTHON" else turns + 1)
    plan.buffers[c].copyin(np.array([turns], np.int32))  # the same plan dispatched from Python agrees
    plan.execute(profile=True)
    np.testing.assert_array_equal(plan.buffers[x].numpy(), np.full(3, 2 * turns, np.float32))
    assert decisions[0] == (turns + 1 if device != "PYTHON" else 2 * turns + 2)


@pytest.mark.parametrize("device", CPU_DEVICES)
@pytest.mark.parametrize("limit", [1.0, 4.0, 100.0])
def test_a_loop_breaks_natively_at_the_first_turn_midway_or_never(device, limit):
    n = 4
    plan, x, _head, flag = _plan(device, np.zeros(n, np.float32))
    body = [plan.add_kernel(_add_one(n), [x]), plan.add_kernel(_flag_at_least(n, limit, dtypes.int32, 1, 0), [flag, x])]
    plan.loop("t", 0, 10, body, until=flag)
    decisions = _python_decisions(plan)
    plan.execute()
    want, last = np.zeros(n, np.float32), None
    for t in range(10):  # the same loop in plain Python
        want += 1
        last = t
        if want[0] >= limit:
            break
    np.testing.assert_array_equal(plan.buffers[x].numpy(), want)
    _check_native(plan, device, {ReplayLoop})
    if device != "PYTHON":
        assert decisions[0] == 0 and plan._native is not None and plan._native.values()["t"] == last


@pytest.mark.parametrize("device", CPU_DEVICES)
@pytest.mark.parametrize("taken", [0, 1])
@pytest.mark.parametrize("turns", [0, 4])
def test_a_while_inside_a_loop_inside_a_branch_is_decided_natively(device, taken, turns):
    """if flag: (for t in range(turns): c = t; while c: c -= 1; x += 1) else: x *= -1."""
    n = 5
    x0 = np.arange(n, dtype=np.float32)
    plan, x, _head, flag = _plan(device, x0)
    c = plan.add_buffer(svod.Buffer(plan.device, dtypes.int32, 1), "c")
    set_count = plan.add_kernel(_count_from_t(), [c])
    inner = plan.while_loop(c, [plan.add_kernel(_count_down(), [c]), plan.add_kernel(_add_one(n), [x])])
    outer = plan.loop("t", 0, "turns", [set_count, inner])
    otherwise = plan.add_kernel(_scale(n, -1.0), [x])
    plan.branch(flag, [outer], [otherwise])
    decisions = _python_decisions(plan)
    plan.buffers[flag].copyin(np.array([taken], np.int32))
    plan.execute(turns=turns)
    want = x0.copy()
    if taken:
        for t in range(turns):
            count = t
            while count:
                count -= 1
                want += 1
    else:
        want *= -1
    np.testing.assert_array_equal(plan.buffers[x].numpy(), want)
    _check_native(plan, device, {ReplayBranch, ReplayLoop, ReplayWhile})
    if device != "PYTHON":
        assert decisions[0] == 0


NEGATIVE_ZERO, NAN = -0.0, float("nan")
INT64_HIGH_BIT = -(1 << 63)
"""An int64 with only its top bit set."""


@pytest.mark.parametrize("device", CPU_DEVICES)
@pytest.mark.parametrize(("dtype", "held", "not_held"), [
    (dtypes.float32, NAN, NEGATIVE_ZERO), (dtypes.float64, NAN, NEGATIVE_ZERO),
    (dtypes.int64, INT64_HIGH_BIT, 0), (dtypes.bool, True, False), (dtypes.uint8, 128, 0)])
def test_a_kernel_written_condition_holds_as_python_bool_says(device, dtype, held, not_held):
    """A loop that breaks on NaN (true) and runs on through -0.0 (false), an int64 with only its high bit set
    (true), a bool, and a byte with only its high bit set."""
    assert bool(held) and not bool(not_held)
    n = 3
    plan, x, _head, _flag = _plan(device, np.zeros(n, np.float32))
    flag = plan.add_buffer(svod.Buffer(plan.device, dtype, 1), "typed_flag")
    body = [plan.add_kernel(_add_one(n), [x]), plan.add_kernel(_flag_at_least(n, 3.0, dtype, held, not_held),
                                                              [flag, x])]
    plan.loop("t", 0, 10, body, until=flag)
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[x].numpy(), np.full(n, 3.0, np.float32))
    written = plan.buffers[flag].numpy()[0]
    assert (np.isnan(written) if dtype.is_float else written == np.array(held, dtype.numpy))
    _check_native(plan, device, {ReplayLoop})


@pytest.mark.parametrize("device", CPU_DEVICES)
@pytest.mark.parametrize(("dtype", "value"), [
    (np.float32, 0.0), (np.float32, -0.0), (np.float32, np.nan), (np.float32, -np.inf), (np.float32, 1e-45),
    (np.float32, -1e-45), (np.float64, -0.0), (np.float64, np.nan), (np.float64, -5e-324),
    (np.int64, INT64_HIGH_BIT), (np.int64, 0), (np.int64, 1 << 32), (np.int32, -(1 << 31)), (np.int16, -1),
    (np.int8, 0), (np.uint64, 1 << 63), (np.bool_, True), (np.bool_, False), (np.float16, -0.0),
    (np.float16, np.nan), (np.float16, 6e-8)])
def test_a_branch_on_a_bound_array_goes_as_python_bool_of_its_element(device, dtype, value):
    """The array bound for the run decides (the plan's own buffer stays zero), as ``bool`` of its first
    element does in Python: natively, and dispatched from Python alike."""
    plan = ExecutionPlan(open_device(device))
    x = plan.add_buffer(svod.Buffer(plan.device, dtypes.float32, 3), "x")
    flag = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(2, dtype), device=plan.device), "flag")
    plan.branch(flag, [plan.add_kernel(_add_one(3), [x])], [plan.add_kernel(_scale(3, -1.0), [x])])
    decisions = _python_decisions(plan)
    condition = np.array([value, 1], dtype)  # the first element decides, the second does not
    want = np.full(3, 2.0 if bool(condition[0]) else -1.0, np.float32)
    for profile in (False, True):
        got = np.ones(3, np.float32)
        plan.execute(buffers={"flag": condition, "x": got}, profile=profile)
        np.testing.assert_array_equal(got, want)
    _check_native(plan, device, {ReplayBranch})
    assert decisions[0] == (1 if device != "PYTHON" else 2)  # the profiled run's decision only


@pytest.mark.parametrize("device", CPU_DEVICES)
def test_a_while_loop_counts_down_the_array_bound_for_each_run(device):
    """The TEST and the kernels that write the condition use the bound array's memory, run after run."""
    plan, x, c = _countdown_plan(device, 2)
    plan.prepare()
    for turns in (3, 0, 7):
        counter, got = np.array([turns], np.int32), np.zeros(2, np.float32)
        plan.execute(buffers={"c": counter, "x": got})
        np.testing.assert_array_equal(got, np.full(2, turns, np.float32))
        assert counter[0] == 0
        if device != "PYTHON":  # repointed, not copied in and out (as the reference's kernels are)
            assert plan.buffers[c].numpy()[0] == 0 and not plan.buffers[x].numpy().any()
    _check_native(plan, device, {ReplayWhile})
