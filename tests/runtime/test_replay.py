"""Native replay: the dispatcher's words against Python's definitions (launch-size arithmetic, loops), CPU
plans replayed natively equal to the same plans dispatched from Python, and the protocol through which a
plan hands its work to its device's runtime (``svod.device.PlanReplayer``)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import svod
from svod import ExecutionPlan, KernelBuilder, UOp, dtypes
from svod.backends.cpu_replay import NativeReplay, NativeReplayer
from svod.device import (
    BufferAddress,
    Device,
    HostArguments,
    HostCondition,
    PlanReplayer,
    ReplayBranch,
    ReplayCopy,
    ReplayHost,
    ReplayItem,
    ReplayKernel,
    ReplayLoop,
    ReplayWhile,
)
from svod.device.launch import evaluate
from svod.errors import LaunchError
from svod.ir import Ops


def _random_expression(rng: random.Random, variables: list[UOp], depth: int) -> UOp:
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.5:
            return rng.choice(variables)
        return UOp.index_const(rng.choice([0, 1, -1, 3, 7, -5, 1 << 40, 1 << 62, -(1 << 63) + 1]))
    a, b = _random_expression(rng, variables, depth - 1), _random_expression(rng, variables, depth - 1)
    return rng.choice([lambda: a + b, lambda: a - b, lambda: a * b, lambda: a // b, lambda: a % b,
                       lambda: a.maximum(b), lambda: UOp(Ops.MIN, a.dtype, (a, b)), lambda: -a,
                       lambda: abs(a)])()


@pytest.mark.parametrize("seed", range(4))
def test_the_dispatcher_evaluates_like_launch_sizes_do(seed):
    """Values and errors (overflow, division by zero) as ``svod.device.launch.evaluate`` gives them."""
    rng = random.Random(seed)
    variables = [UOp.define_var(f"v{k}", -(1 << 62), 1 << 62) for k in range(3)]
    for _ in range(100):
        expr = _random_expression(rng, variables, 4)
        values = {f"v{k}": rng.choice([0, 1, -1, 5, -7, 1 << 31, 1 << 61]) for k in range(3)}
        try:
            want: int | None = evaluate(expr, values)
        except LaunchError:
            want = None
        program = NativeReplay()
        for k in range(3):
            program.input(f"v{k}")
        slot = program.value(expr, "expression")
        program.finish()
        if want is None:
            with pytest.raises(LaunchError, match="invalid launch-size arithmetic"):
                program.run(values)
        else:
            program.run(values)
            assert program.table[slot] == want


def test_nested_words_visit_a_triangle_and_carry_python_errors():
    seen: list[tuple[int, int]] = []
    program = NativeReplay()
    n, one = program.input("n"), program.constant(1)
    t, i = program.variable("t"), program.variable("i")
    outer = program.loop_begin(t, program.constant(0), n, one)
    inner = program.loop_begin(i, program.value(UOp.define_var("t", 0, 100) + 1, "inner"), n, one)
    program.python(lambda: seen.append((program.values()["t"], program.values()["i"])), "record")
    program.loop_end(inner, i, n, one)
    program.loop_end(outer, t, n, one)
    program.finish()
    program.run({"n": 5})
    assert seen == [(t, i) for t in range(5) for i in range(t + 1, 5)]
    seen.clear()
    program.run({"n": 0})
    assert seen == []

    def fail() -> None:
        raise KeyError("from a step")

    failing = NativeReplay()
    failing.python(fail, "failing")
    failing.finish()
    with pytest.raises(KeyError, match="from a step"):
        failing.run({})


def _chain(count: int):
    plan = ExecutionPlan("CPU")
    buffers = [plan.add_buffer(svod.Buffer.from_numpy(np.full(16, j, np.float32))) for j in range(count + 1)]
    for j in range(count):
        k = KernelBuilder(f"step{j % 3}")
        s = k.var("s", 0, 100)
        out, x = k.buffer(dtypes.float32, 16), k.buffer(dtypes.float32, 16)
        i = k.range(16)
        k.store(out[i], x[i] * 0.5 + s.cast(dtypes.float32) + float(j % 3))
        plan.add_kernel(k.build(), [buffers[j + 1], buffers[j]])
    return plan, buffers


def test_a_cpu_plan_replays_natively_and_equals_the_python_dispatch():
    native, _ = _chain(40)
    python, _ = _chain(40)
    native.prepare()
    assert native._native is not None
    for s in (0, 3, 100):
        native.execute(s=s)
        steps = python.execute(s=s, profile=True)  # a profiled run dispatches from Python
        assert steps is not None and len(steps) == 40
        for a, b in zip(native.buffers, python.buffers, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert native.prepared_kernels[5].vals[native.prepared_kernels[5].kernel.var_names.index("s")] == 100


def test_a_loop_profiles_every_turn_and_matches_native_results():
    def build():
        k = KernelBuilder("accumulate")
        t = k.var("t", 0, 50)
        acc = k.buffer(dtypes.int64, 8)
        i = k.range(8)
        k.store(acc[i], acc[i] * 2 + (t + i).cast(dtypes.int64))
        plan = ExecutionPlan("CPU")
        index = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(8, np.int64)))
        plan.loop("t", 0, "turns", [plan.add_kernel(k.build(), [index])])
        return plan
    native, profiled = build(), build()
    native.execute(turns=9)
    steps = profiled.execute(turns=9, profile=True)
    assert steps is not None and [s.name for s in steps] == ["accumulate"] * 9
    want = np.zeros(8, np.int64)
    for t in range(9):
        want = want * 2 + t + np.arange(8)
    np.testing.assert_array_equal(native.buffers[0].numpy(), want)
    np.testing.assert_array_equal(profiled.buffers[0].numpy(), want)


def test_many_live_plans_all_replay_natively_on_their_own_frames():
    plans = [_chain(1)[0] for _ in range(40)]
    for s, plan in enumerate(plans):
        plan.execute(s=s % 100)
        np.testing.assert_array_equal(plan.buffers[1].numpy(), np.full(16, s % 100, np.float32))
    assert all(plan._native is not None for plan in plans)


class _PythonReplayer:
    """A runtime factory that replays from Python: every piece through its runner, loops that run every turn by
    their bounds. It
    checks that a plan's work reaches a replayer whole, and that the runtime asks the protocol, not the kind
    of device."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.work: list[ReplayItem] = []

    def __call__(self, compiled):
        return self.runtime(compiled)

    def replay(self, work, inputs):
        self.work = list(work)
        return _PythonReplay(self.work)


class _PythonReplay:
    def __init__(self, work):
        self.work = work
        self.sites = {}
        self.last: dict[str, int] = {}

    def run(self, values):
        self.last = dict(values)
        self._run(self.work, self.last)

    def _run(self, work, values):
        for item in work:
            if isinstance(item, ReplayLoop) and item.until is None:
                for value in range(*(evaluate(e, values) for e in (item.start, item.stop, item.step))):
                    values[item.var] = value
                    self._run(item.body, values)
            else:
                item.run(values)

    def values(self):
        return dict(self.last)


def _kernel_copy_loop(device):
    """acc = acc * 2 + t + i for t in range(turns), then a copy of acc."""
    k = KernelBuilder("accumulate")
    t = k.var("t", 0, 50)
    acc = k.buffer(dtypes.int64, 8)
    i = k.range(8)
    k.store(acc[i], acc[i] * 2 + (t + i).cast(dtypes.int64))
    plan = ExecutionPlan(device)
    acc_index = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(8, np.int64)))
    copy_index = plan.add_buffer(svod.Buffer("CPU", dtypes.int64, 8))
    plan.loop("t", 0, "turns", [plan.add_kernel(k.build(), [acc_index])])
    plan.add_copy(copy_index, acc_index)
    return plan


def test_a_device_replays_plans_through_the_protocol_its_runtime_has():
    """The CPU's runtime factories replay natively; a runtime without ``replay`` (the reference's) leaves
    steps to Python; any runtime with it gets the plan's work, whatever kind of device it serves."""
    for compiler in ("llvm", "clang"):
        assert isinstance(svod.get_device("CPU", compiler).runtime, PlanReplayer)
    reference = _kernel_copy_loop("PYTHON")
    reference.execute(turns=9)
    assert not isinstance(reference.device.runtime, PlanReplayer) and reference._native is None
    cpu = svod.get_device("CPU")
    replayer = _PythonReplayer(cpu.runtime)
    assert isinstance(replayer, PlanReplayer)
    plan = _kernel_copy_loop(Device("CPU", cpu.allocator, cpu.renderer, cpu.compiler, replayer, caps=cpu.caps))
    plan.execute(turns=9)
    loop, copy = replayer.work
    assert isinstance(loop, ReplayLoop) and isinstance(copy, ReplayCopy) and copy.owner == "copy 0 -> 1"
    (kernel,) = loop.body
    assert isinstance(kernel, ReplayKernel) and kernel.owner == "accumulate" and len(kernel.calls) == 1
    assert isinstance(kernel.calls[0].launch, HostArguments) and kernel.calls[0].var_names == ("t",)
    want = np.zeros(8, np.int64)
    for t in range(9):
        want = want * 2 + t + np.arange(8)
    for buffer in (*plan.buffers, *reference.buffers):
        np.testing.assert_array_equal(buffer.numpy(), want)
    assert plan.prepared_kernels[0].vals == [8]  # the launch's own array: the last turn's value


def _condition_cases() -> list[np.ndarray]:
    """One-element arrays of every scalar dtype at the values a test could get wrong: zero and NaN of either
    sign, the infinities, the smallest subnormals, an integer's extremes and its high bit alone, a bool whose
    byte is 2."""
    floats = [0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf"), 1.0, -1.0]
    cases = [np.array([v], d) for d in (np.float16, np.float32, np.float64) for v in floats]
    cases += [np.array([np.finfo(d).smallest_subnormal * s], d) for d in (np.float16, np.float32, np.float64)
              for s in (1, -1)]
    cases += [np.array([v], d) for d in (np.int8, np.int16, np.int32, np.int64)
              for v in (0, 1, -1, np.iinfo(d).min, np.iinfo(d).max)]
    cases += [np.array([v], d) for d in (np.uint8, np.uint16, np.uint32, np.uint64) for v in (0, 1, np.iinfo(d).max)]
    cases += [np.array([1 << 63], np.uint64), np.array([True]), np.array([False]), np.array([2], np.uint8).view(bool)]
    return cases


def test_the_dispatcher_tests_a_condition_as_python_bool_does():
    """A branch, a while loop and a loop's ``until`` on each case, from the device-neutral records: the words
    take the way ``bool`` of the element says, and call no Python runner of theirs."""
    seen: list[str] = []

    def record(what: str) -> ReplayHost:
        return ReplayHost(lambda values: seen.append(what), what)

    def clear(array: np.ndarray) -> ReplayHost:
        return ReplayHost(lambda values: array.fill(0), "clear")

    def refuse(values: dict[str, int]) -> None:
        raise AssertionError("the dispatcher decides; no Python runner of a control piece runs")

    for case in _condition_cases():
        condition = HostCondition(BufferAddress(case.ctypes.data, id(case), 0), case.itemsize,
                                  case.dtype.kind == "f")
        one = UOp.index_const(1)
        work: list[ReplayItem] = [
            ReplayBranch(condition, (record("then"),), (record("otherwise"),), refuse, "branch"),
            ReplayBranch(condition, (record("only then"),), (), refuse, "branch without otherwise"),
            ReplayLoop("t", UOp.index_const(0), UOp.index_const(3), one, (record("turn"),), refuse, "until",
                       condition),
            ReplayWhile(condition, (record("while"), clear(case)), refuse, "while")]
        replay = NativeReplayer().replay(work, ())
        assert replay is not None
        held, shown = bool(case[0]), repr(case)  # before the while loop's body clears it
        seen.clear()
        replay.run({})
        branches = ["then", "only then"] if held else ["otherwise"]
        assert seen == [*branches, *(["turn"] if held else ["turn"] * 3), *(["while"] if held else [])], shown


def test_a_control_step_on_memory_not_the_hosts_is_pythons_work():
    """A condition in a device's own memory is read back by Python: its step is a ``ReplayHost`` piece."""
    cpu = svod.get_device("CPU")
    replayer = _PythonReplayer(cpu.runtime)
    device = Device("CPU", cpu.allocator, cpu.renderer, cpu.compiler, replayer,
                    caps=dataclasses.replace(cpu.caps, host_memory=False))
    plan = ExecutionPlan(device)
    x = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(4, np.float32), device=device))
    flag = plan.add_buffer(svod.Buffer.from_numpy(np.ones(1, np.int32), device=device))
    k = KernelBuilder("add_one")
    buf = k.buffer(dtypes.float32, 4)
    i = k.range(4)
    k.store(buf[i], buf[i] + 1.0)
    plan.branch(flag, [plan.add_kernel(k.build(), [x])])
    plan.execute()
    (branch,) = replayer.work
    assert isinstance(branch, ReplayHost) and branch.owner == "branch on buffer 1"
    np.testing.assert_array_equal(plan.buffers[x].numpy(), np.ones(4, np.float32))
