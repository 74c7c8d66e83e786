"""Control flow inside plans: a branch on a buffer a kernel wrote, a ``while`` loop whose condition its body
computes again, and a loop that ends early (``until``); each against the same Python loop over numpy, on
every device, native replay included, and through a bundle."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import ExecutionPlan, KernelBuilder, dtypes
from svod.errors import SvodError
from tests.helpers import open_device

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
