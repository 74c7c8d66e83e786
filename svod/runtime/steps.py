"""Plan steps, one class per kind: a kernel, a copy, a loop, a branch, a ``while`` loop. Each kind is
recorded as a ``Request`` (what the user added, remapped when a sub-plan is adopted, written to a bundle's
manifest and read back from it) and prepared into a ``Step`` (its accesses for the dependencies, its Python
runner, its words for a native replay, the plan buffers it reads and writes). ``Preparing`` holds what
preparing a plan's steps shares: the compiled kernels, each variable a run or loop supplies with the kernel
that first checks it, and the work estimates made once per kernel. Adding a kind is one ``Request`` and one
``Step`` here.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from svod.device import (
    Buffer,
    BufferAddress,
    Device,
    HostArguments,
    HostCondition,
    KernelCall,
    ReplayBranch,
    ReplayCopy,
    ReplayHost,
    ReplayItem,
    ReplayKernel,
    ReplayLoop,
    ReplayWhile,
    Variable,
)
from svod.device.launch import evaluate
from svod.device.protocols import Site
from svod.errors import VariableError
from svod.ir import Ops, UOp
from svod.runtime.archive import GraphReader, GraphWriter, indices, require
from svod.runtime.kernel import CachedKernel
from svod.runtime.parts import PartsLaunch
from svod.runtime.profiler import estimate_cost
from svod.runtime.schedule import Access, schedule

Values = MutableMapping[str, int]
RunLevels = Callable[[Sequence[Sequence["Step"]], Values], None]
"""Runs a loop body's levels for one turn (the plan's: it may run a level's steps on host threads)."""
ReplayWork = Callable[[Sequence[Sequence["Step"]]], list[ReplayItem]]
"""A loop body's levels as a native replay runs them (the plan's: a host-parallel level stays Python's)."""


# ---- prepared steps ------------------------------------------------------------------------------------------

@dataclass(eq=False, kw_only=True)
class Step:
    """One step of a prepared plan, with everything decided at prepare time."""

    kind: ClassVar[str]
    id: int
    name: str
    accesses: tuple[Access, ...]
    """The byte ranges the step reads and writes: its dependencies are derived from them."""
    run: Callable[[Values], None]
    parallel_safe: bool
    """Whether it may run on a host thread beside other steps, and gains by it (a kernel spread over the
    device's threads does not)."""
    work: int
    """Estimated flops plus bytes moved at the largest variable values (small steps never overlap)."""
    cost_of: Callable[[Mapping[str, int]], tuple[int, int]]
    """(flops, bytes) for one run's variable values, for the profile."""
    dependencies: tuple[int, ...] = ()
    """Ids of the steps that must finish first (the latest conflicting ones; within one turn of a loop for
    the steps of its body)."""
    level: int = 0
    check: Callable[[], None] | None = None
    """Raises ``IndexOutOfBoundsError`` if the step's last run recorded an access outside a buffer."""
    sites: dict[int, list[Site]] | None = field(default_factory=dict)
    """Per storage, where the step keeps its address; None when the step's addresses cannot be rewritten
    (a device's own handles): an array bound to such a storage is copied in and out instead."""
    native: ReplayItem | None = None
    """The step as a native replay runs it; None for a step only Python runs."""

    def flattened(self) -> list[Step]:
        """This step and, for a loop, every step of its body (a loop before them)."""
        return [self]

    def buffer_modes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The plan buffers this step reads, and those it writes."""
        return (), ()

    def replay_item(self, work_of: ReplayWork) -> ReplayItem:
        """The step as a native replay runs it: its own words, or its Python runner."""
        return self.native or ReplayHost(self.run, self.name)

    def run_timed(self, values: Values, run_levels: RunLevels, timed: Callable[[Step, Values], None]) -> None:
        """Run for a profile: ``timed`` times this step (a loop times each step of each turn instead)."""
        timed(self, values)


@dataclass(eq=False, kw_only=True)
class PreparedKernel(Step):
    """One dispatch of a plan."""

    kind: ClassVar[str] = "kernel"
    ast: UOp
    kernel: CachedKernel
    device: Device
    buffer_indices: tuple[int, ...]
    output_indices: tuple[int, ...]
    vals: MutableSequence[int]
    """Variable values in ``kernel.var_names`` order, as of the last run (fixed ones never change)."""
    fixedvars: dict[str, int]
    buffer_ids: tuple[int, ...]
    """The storage each argument lives in (views of one base share it)."""
    runtime_vars: tuple[Variable, ...]
    """The variables each run must supply, with the bounds they are checked against (a loop's variable is
    the loop's to supply, not the run's)."""
    launch: Any = None
    """The program bound to the step's buffers."""

    def buffer_modes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        layout = self.kernel.layout
        return (tuple(i for i, a in zip(self.buffer_indices, layout, strict=True) if a.read),
                tuple(i for i, a in zip(self.buffer_indices, layout, strict=True) if a.written))


@dataclass(eq=False, kw_only=True)
class CopyStep(Step):
    """A copy of one whole plan buffer into another."""

    kind: ClassVar[str] = "copy"
    dst: int
    src: int

    def buffer_modes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.src,), (self.dst,)


@dataclass(eq=False, kw_only=True)
class LoopStep(Step):
    """A loop: its body's steps run level by level, once per value of ``var``. A loop never runs on a host
    thread beside other steps (its body's levels may)."""

    kind: ClassVar[str] = "loop"
    var: str
    start: UOp
    stop: UOp
    step: UOp
    body: list[Step]
    levels: list[list[Step]]
    uses: list[tuple[Variable, str]]
    """Each kernel variable the loop binds, with the kernel's name: its values are checked against it."""

    def flattened(self) -> list[Step]:
        return [self, *(inner for step in self.body for inner in step.flattened())]

    until: Callable[[], bool] | None = None
    """Reads the one-element buffer that ends the loop after a turn that leaves it non-zero (a ``break``)."""
    native_until: HostCondition | None = None
    """That buffer as a native replay tests it; None where it is a device's own (read back by Python)."""

    def replay_item(self, work_of: ReplayWork) -> ReplayItem:
        if self.until is not None and self.native_until is None:
            return ReplayHost(self.run, self.name)
        return ReplayLoop(self.var, self.start, self.stop, self.step, tuple(work_of(self.levels)), self.run,
                          self.name, self.native_until)

    def repeat(self, values: Values, run_levels: RunLevels) -> None:
        """Run the body once for each value of the loop's variable (until its exit buffer is set)."""
        until = self.until
        for value in range(_value(self.start, values), _value(self.stop, values), _value(self.step, values)):
            values[self.var] = value
            run_levels(self.levels, values)
            if until is not None and until():
                break

    def run_timed(self, values: Values, run_levels: RunLevels, timed: Callable[[Step, Values], None]) -> None:
        self.repeat(values, run_levels)


@dataclass(eq=False, kw_only=True)
class BranchStep(Step):
    """``if``/``else``: the steps of ``then`` when a one-element buffer (a condition a kernel computed) is
    non-zero, else those of ``otherwise``. Like a loop, it never runs on a host thread beside other steps."""

    kind: ClassVar[str] = "branch"
    condition: Callable[[], bool]
    then: list[Step]
    otherwise: list[Step]
    then_levels: list[list[Step]]
    otherwise_levels: list[list[Step]]
    native_condition: HostCondition | None = None
    """The condition's buffer as a native replay tests it; None where it is a device's own."""

    def flattened(self) -> list[Step]:
        return [self, *(inner for step in (*self.then, *self.otherwise) for inner in step.flattened())]

    def replay_item(self, work_of: ReplayWork) -> ReplayItem:
        if self.native_condition is None:
            return ReplayHost(self.run, self.name)
        return ReplayBranch(self.native_condition, tuple(work_of(self.then_levels)),
                            tuple(work_of(self.otherwise_levels)), self.run, self.name)

    def chosen(self) -> list[list[Step]]:
        return self.then_levels if self.condition() else self.otherwise_levels

    def run_timed(self, values: Values, run_levels: RunLevels, timed: Callable[[Step, Values], None]) -> None:
        run_levels(self.chosen(), values)


@dataclass(eq=False, kw_only=True)
class WhileStep(Step):
    """``while``: the body's steps run turn after turn as long as a one-element buffer is non-zero, read
    before each turn (the body's own steps compute it again)."""

    kind: ClassVar[str] = "while"
    condition: Callable[[], bool]
    body: list[Step]
    levels: list[list[Step]]
    native_condition: HostCondition | None = None
    """The condition's buffer as a native replay tests it; None where it is a device's own."""

    def flattened(self) -> list[Step]:
        return [self, *(inner for step in self.body for inner in step.flattened())]

    def replay_item(self, work_of: ReplayWork) -> ReplayItem:
        if self.native_condition is None:
            return ReplayHost(self.run, self.name)
        return ReplayWhile(self.native_condition, tuple(work_of(self.levels)), self.run, self.name)

    def repeat(self, values: Values, run_levels: RunLevels) -> None:
        condition = self.condition
        while condition():
            run_levels(self.levels, values)

    def run_timed(self, values: Values, run_levels: RunLevels, timed: Callable[[Step, Values], None]) -> None:
        self.repeat(values, run_levels)


# ---- recorded steps ------------------------------------------------------------------------------------------

class Request(ABC):
    """A step as the user added it, before the plan is prepared."""

    kind: ClassVar[str]

    def kernels(self) -> tuple[UOp, ...]:
        """The kernels the step runs, which the plan compiles together."""
        return ()

    def body(self) -> tuple[int, ...]:
        """The ids of the steps a loop holds."""
        return ()

    @abstractmethod
    def remapped(self, buffers: Sequence[int], first: int) -> Request:
        """The step in a plan that adopts its plan: its buffer ``i`` is ``buffers[i]`` there, its step ids
        start at ``first``."""

    @abstractmethod
    def prepare(self, op_id: int, preparing: Preparing, scope: Mapping[str, LoopStep]) -> Step:
        """The prepared step, inside the loops of ``scope`` (by variable)."""

    @abstractmethod
    def manifest(self, writer: GraphWriter) -> dict[str, Any]:
        """The step's entry in a bundle's manifest (its ``kind`` added by the writer)."""

    @classmethod
    @abstractmethod
    def from_manifest(cls, entry: dict[str, Any], position: int, count: int, buffers: int, graph: GraphReader,
                      source: Path) -> Request:
        """The step of a bundle's manifest entry, checked: a plan of ``count`` steps over ``buffers`` buffers."""


@dataclass(frozen=True, slots=True)
class KernelRequest(Request):
    kind: ClassVar[str] = "kernel"
    ast: UOp
    buffer_indices: tuple[int, ...]
    fixedvars: dict[str, int | float]
    """Values the kernel's variables are fixed at (a runtime scalar's a float)."""

    def kernels(self) -> tuple[UOp, ...]:
        return (self.ast,)

    def remapped(self, buffers: Sequence[int], first: int) -> Request:
        return KernelRequest(self.ast, tuple(buffers[i] for i in self.buffer_indices), self.fixedvars)

    def prepare(self, op_id: int, preparing: Preparing, scope: Mapping[str, LoopStep]) -> Step:
        return preparing.kernel_step(op_id, self, scope)

    def manifest(self, writer: GraphWriter) -> dict[str, Any]:
        return {"ast": writer.add(self.ast), "buffers": list(self.buffer_indices),
                "fixed": dict(sorted(self.fixedvars.items()))}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any], position: int, count: int, buffers: int, graph: GraphReader,
                      source: Path) -> Request:
        fixed: Any = entry.get("fixed")
        require(indices(entry.get("buffers"), buffers) and isinstance(fixed, dict) and
                all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in fixed.items()), source,
                f"kernel step {position} has no valid buffers and fixed variables")
        return KernelRequest(graph.get(entry.get("ast"), f"step {position}"), tuple(entry["buffers"]), dict(fixed))


@dataclass(frozen=True, slots=True)
class CopyRequest(Request):
    kind: ClassVar[str] = "copy"
    dst: int
    src: int

    def remapped(self, buffers: Sequence[int], first: int) -> Request:
        return CopyRequest(buffers[self.dst], buffers[self.src])

    def prepare(self, op_id: int, preparing: Preparing, scope: Mapping[str, LoopStep]) -> Step:
        dst, src = preparing.buffers[self.dst], preparing.buffers[self.src]
        accesses = (Access(id(src.base), src.byte_offset, src.byte_offset + src.nbytes, write=False),
                    Access(id(dst.base), dst.byte_offset, dst.byte_offset + dst.nbytes, write=True))
        name = f"copy {self.src} -> {self.dst}"
        run, sites, native = _copier(dst, src, name)
        moved = 2 * dst.nbytes

        def cost_of(values: Mapping[str, int]) -> tuple[int, int]:
            return (0, moved)

        return CopyStep(id=op_id, name=name, accesses=accesses, run=run,
                        parallel_safe=dst.device_object.caps.host_memory and src.device_object.caps.host_memory,
                        work=moved, cost_of=cost_of, sites=sites, native=native, dst=self.dst, src=self.src)

    def manifest(self, writer: GraphWriter) -> dict[str, Any]:
        return {"dst": self.dst, "src": self.src}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any], position: int, count: int, buffers: int, graph: GraphReader,
                      source: Path) -> Request:
        require(indices([entry.get("dst"), entry.get("src")], buffers), source, f"copy step {position} names no "
                "buffers of the plan")
        return CopyRequest(entry["dst"], entry["src"])


@dataclass(frozen=True, slots=True)
class LoopRequest(Request):
    kind: ClassVar[str] = "loop"
    var: str
    start: UOp
    stop: UOp
    step: UOp
    steps: tuple[int, ...]
    until: int | None = None
    """The plan buffer whose first element, non-zero after a turn, ends the loop."""

    def body(self) -> tuple[int, ...]:
        return self.steps

    def never_turns(self) -> bool:
        """Whether the loop's bounds are numbers of an empty range: its body never runs, so it is neither compiled
        nor prepared (an error only compiling it could find is one no run meets, as in Python)."""
        bounds = (self.start, self.stop, self.step)
        if not all(b.op is Ops.CONST for b in bounds):
            return False
        start, stop, step = (int(b.arg) for b in bounds)
        return not range(start, stop, step)  # (a step of 0 is refused where the loop is made or read)

    def remapped(self, buffers: Sequence[int], first: int) -> Request:
        return LoopRequest(self.var, self.start, self.stop, self.step, tuple(first + i for i in self.steps),
                           None if self.until is None else buffers[self.until])

    def prepare(self, op_id: int, preparing: Preparing, scope: Mapping[str, LoopStep]) -> Step:
        return preparing.loop_step(op_id, self, scope)

    def manifest(self, writer: GraphWriter) -> dict[str, Any]:
        found = {"var": self.var, "start": writer.add(self.start), "stop": writer.add(self.stop),
                 "step": writer.add(self.step), "body": list(self.steps)}
        return found if self.until is None else {**found, "until": self.until}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any], position: int, count: int, buffers: int, graph: GraphReader,
                      source: Path) -> Request:
        require(isinstance(entry.get("var"), str) and entry["var"].isidentifier() and
                indices(entry.get("body"), count), source, f"loop step {position} has no variable and body")
        require(all(i < position for i in entry["body"]), source, f"loop step {position} has a body after it")
        until = entry.get("until")
        require(until is None or indices([until], buffers), source, f"loop step {position} ends on no buffer")
        start, stop, step = (graph.get(entry.get(k), f"loop step {position}") for k in ("start", "stop", "step"))
        require(not (step.op is Ops.CONST and step.arg == 0), source, f"loop step {position} has a step of 0")
        return LoopRequest(entry["var"], start, stop, step, tuple(entry["body"]), until)


@dataclass(frozen=True, slots=True)
class BranchRequest(Request):
    kind: ClassVar[str] = "branch"
    condition: int
    """The plan buffer whose first element chooses: non-zero runs ``then``, zero ``otherwise``."""
    then: tuple[int, ...]
    otherwise: tuple[int, ...]

    def body(self) -> tuple[int, ...]:
        return (*self.then, *self.otherwise)

    def remapped(self, buffers: Sequence[int], first: int) -> Request:
        return BranchRequest(buffers[self.condition], tuple(first + i for i in self.then),
                             tuple(first + i for i in self.otherwise))

    def prepare(self, op_id: int, preparing: Preparing, scope: Mapping[str, LoopStep]) -> Step:
        return preparing.branch_step(op_id, self, scope)

    def manifest(self, writer: GraphWriter) -> dict[str, Any]:
        return {"condition": self.condition, "then": list(self.then), "otherwise": list(self.otherwise)}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any], position: int, count: int, buffers: int, graph: GraphReader,
                      source: Path) -> Request:
        require(indices([entry.get("condition")], buffers) and indices(entry.get("then"), count) and
                indices(entry.get("otherwise"), count), source, f"branch step {position} has no condition and bodies")
        require(all(i < position for i in (*entry["then"], *entry["otherwise"])), source,
                f"branch step {position} has a body after it")
        return BranchRequest(entry["condition"], tuple(entry["then"]), tuple(entry["otherwise"]))


@dataclass(frozen=True, slots=True)
class WhileRequest(Request):
    kind: ClassVar[str] = "while"
    condition: int
    """The plan buffer whose first element, read before each turn, keeps the loop going while non-zero."""
    steps: tuple[int, ...]

    def body(self) -> tuple[int, ...]:
        return self.steps

    def remapped(self, buffers: Sequence[int], first: int) -> Request:
        return WhileRequest(buffers[self.condition], tuple(first + i for i in self.steps))

    def prepare(self, op_id: int, preparing: Preparing, scope: Mapping[str, LoopStep]) -> Step:
        return preparing.while_step(op_id, self, scope)

    def manifest(self, writer: GraphWriter) -> dict[str, Any]:
        return {"condition": self.condition, "body": list(self.steps)}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any], position: int, count: int, buffers: int, graph: GraphReader,
                      source: Path) -> Request:
        require(indices([entry.get("condition")], buffers) and indices(entry.get("body"), count), source,
                f"while step {position} has no condition and body")
        require(all(i < position for i in entry["body"]), source, f"while step {position} has a body after it")
        return WhileRequest(entry["condition"], tuple(entry["body"]))


def reached_steps(requests: Sequence[Request], top: Sequence[int]) -> set[int]:
    """The ids of the steps a run may reach from ``top``: all but those inside a loop that never turns."""
    reached, pending = set(), list(top)
    while pending:
        op_id = pending.pop()
        reached.add(op_id)
        request = requests[op_id]
        if not (isinstance(request, LoopRequest) and request.never_turns()):
            pending += request.body()
    return reached


REQUESTS: dict[str, type[Request]] = {kind.kind: kind for kind in (KernelRequest, CopyRequest, LoopRequest,
                                                                   BranchRequest, WhileRequest)}
"""Each step kind by the name a bundle's manifest gives it."""


# ---- preparing --------------------------------------------------------------------------------------------------

class Preparing:
    """What preparing one plan's steps shares: its buffers, its recorded steps and their compiled kernels,
    and, as the steps are prepared, each variable a run or a loop supplies (checked once, naming the first
    kernel that has it), the loops, and the work of each kernel estimated once."""

    def __init__(self, buffers: Sequence[Buffer], requests: Sequence[Request], kernels: Mapping[UOp, CachedKernel],
                 run_levels: RunLevels) -> None:
        self.buffers = buffers
        self.requests = requests
        self.kernels = kernels
        self.run_levels = run_levels
        self.prepared_kernels: list[PreparedKernel] = []
        self.loops: list[LoopStep] = []
        """Every loop, enclosing ones before the loops they contain."""
        self.runtime_bounds: dict[str, list[tuple[Variable, str]]] = {}
        self.fixed_names: set[str] = set()
        self._checked_by: dict[Variable, str] = {}
        """Each distinct variable a run or loop supplies, with the first kernel that has it (its checks'
        name): a plan checks each once, however many steps read it."""
        self._shapes: dict[tuple[UOp, tuple[tuple[str, int | float], ...], tuple[bool, ...]], _Shape] = {}
        self._work_estimates: dict[tuple[UOp, tuple[tuple[str, int], ...]], int] = {}

    def steps(self, ids: Iterable[int], scope: Mapping[str, LoopStep]) -> list[Step]:
        """The steps ``ids``, prepared inside the loops of ``scope``."""
        return [self.requests[op_id].prepare(op_id, self, scope) for op_id in ids]

    def loop_step(self, op_id: int, request: LoopRequest, scope: Mapping[str, LoopStep]) -> LoopStep:
        if request.var in scope:
            raise VariableError(f"loop over {request.var} inside a loop over the same variable", stage="plan",
                                value=request.var)
        for bound in (request.start, request.stop, request.step):
            for node in bound.toposort():
                if node.op is Ops.DEFINE_VAR and node.arg[0] not in scope:
                    if node.arg[0] == request.var:
                        raise VariableError(f"the bounds of the loop over {request.var} use its own variable",
                                            stage="plan", value=request.var)
                    self.runtime_bounds.setdefault(node.arg[0], []).append(
                        (Variable(node.arg[0], node.arg[1], node.arg[2]), f"loop over {request.var}"))
        loop = LoopStep(id=op_id, name=f"loop over {request.var}", accesses=(), run=_nothing,
                        parallel_safe=False, work=0, cost_of=_no_cost, var=request.var, start=request.start,
                        stop=request.stop, step=request.step, body=[], levels=[], uses=[])
        self.loops.append(loop)
        loop.body = [] if request.never_turns() else self.steps(request.steps, {**scope, request.var: loop})
        loop.levels = schedule(loop.body)
        loop.accesses = _merged(a for step in loop.body for a in step.accesses)
        if request.until is not None:
            loop.until, loop.sites, loop.native_until = self.reader(request.until)
            loop.accesses = self.control_accesses(request.until, loop.body)
        run_levels = self.run_levels

        def run(values: Values) -> None:
            loop.repeat(values, run_levels)

        loop.run = run
        return loop

    def branch_step(self, op_id: int, request: BranchRequest, scope: Mapping[str, LoopStep]) -> BranchStep:
        then, otherwise = self.steps(request.then, scope), self.steps(request.otherwise, scope)
        accesses = self.control_accesses(request.condition, (*then, *otherwise))
        condition, sites, native = self.reader(request.condition)
        branch = BranchStep(id=op_id, name=f"branch on buffer {request.condition}", accesses=accesses, run=_nothing,
                            parallel_safe=False, work=0, cost_of=_no_cost, sites=sites, condition=condition,
                            then=then, otherwise=otherwise, then_levels=schedule(then),
                            otherwise_levels=schedule(otherwise), native_condition=native)
        run_levels = self.run_levels

        def run(values: Values) -> None:
            run_levels(branch.chosen(), values)

        branch.run = run
        return branch

    def while_step(self, op_id: int, request: WhileRequest, scope: Mapping[str, LoopStep]) -> WhileStep:
        body = self.steps(request.steps, scope)
        accesses = self.control_accesses(request.condition, body)
        condition, sites, native = self.reader(request.condition)
        loop = WhileStep(id=op_id, name=f"while buffer {request.condition}", accesses=accesses, run=_nothing,
                         parallel_safe=False, work=0, cost_of=_no_cost, sites=sites, condition=condition, body=body,
                         levels=schedule(body), native_condition=native)
        run_levels = self.run_levels

        def run(values: Values) -> None:
            loop.repeat(values, run_levels)

        loop.run = run
        return loop

    def reader(self, index: int) -> tuple[Callable[[], bool], dict[int, list[Site]] | None, HostCondition | None]:
        """Whether plan buffer ``index``'s first element is non-zero, read when asked (after the device has
        finished what came before); where the reader keeps the buffer's address; and the element as a native
        replay tests it. In host memory it reads the element where it lies, through an address an array bound
        per run repoints (as a kernel's); a device's own buffer is read back whole (an array bound to it is
        copied in and out), and only Python reads it."""
        buf = self.buffers[index]
        if buf.size < 1:
            raise VariableError(f"plan buffer {index} decides a branch or a loop's end but has no element",
                                stage="plan", value=index)
        device = buf.device_object
        if not device.caps.host_memory:
            def read_back() -> bool:
                device.synchronize()
                return bool(buf.numpy()[0])

            return read_back, None, None
        dtype = buf.dtype.numpy
        raw = ctypes.c_char * dtype.itemsize  # any dtype, float16 included (ctypes has no type of its own for it)
        address = (ctypes.c_int64 * 1)(buf.address)

        def read() -> bool:
            device.synchronize()
            return bool(np.frombuffer(memoryview(raw.from_address(address[0])), dtype, 1)[0])

        native = HostCondition(BufferAddress(address[0], id(buf.base), buf.byte_offset), buf.dtype.itemsize,
                               buf.dtype.is_float)
        return read, {id(buf.base): [(address, 0, buf.byte_offset)]}, native

    def control_accesses(self, condition: int, body: Sequence[Step]) -> tuple[Access, ...]:
        """What a step that decides on plan buffer ``condition``'s first element and runs ``body`` touches."""
        buf = self.buffers[condition]
        read = Access(id(buf.base), buf.byte_offset, buf.byte_offset + buf.dtype.itemsize, write=False)
        return _merged((read, *(a for step in body for a in step.accesses)))


    def kernel_step(self, op_id: int, request: KernelRequest, scope: Mapping[str, LoopStep]) -> PreparedKernel:
        kernel = self.kernels[request.ast]
        buffers = [self.buffers[i] for i in request.buffer_indices]
        shape = self._shape(kernel, request, scope)
        fixed, largest = shape.fixed, shape.largest
        kernel.check_buffers(buffers, largest)
        for var in shape.looped:
            uses = scope[var.name].uses
            if var not in self._checked_by:
                self._checked_by[var] = kernel.name
                uses.append((var, kernel.name))
            elif (var, self._checked_by[var]) not in uses:
                uses.append((var, self._checked_by[var]))
        for var in shape.runtime:  # one check per distinct variable, naming the first kernel that has it
            if var not in self._checked_by:
                self._checked_by[var] = kernel.name
                self.runtime_bounds.setdefault(var.name, []).append((var, kernel.name))
        self.fixed_names.update(fixed)
        accesses = _kernel_accesses(shape.modes, buffers)
        outputs = tuple(request.buffer_indices[pos] for pos in kernel.written_positions)
        launch, run, check, sites, emit, vals = _kernel_launcher(kernel, buffers, list(shape.vals), fixed)
        ast = request.ast

        def cost_of(values: Mapping[str, int]) -> tuple[int, int]:
            return estimate_cost(ast, {**values, **fixed, **kernel.fixed})

        prepared = PreparedKernel(
            id=op_id, name=kernel.name, accesses=accesses, run=run,
            parallel_safe=kernel.host_parallel_safe and not _spread(kernel, launch), work=shape.work,
            cost_of=cost_of, check=check, sites=sites,
            native=emit, launch=launch, ast=ast, kernel=kernel, device=kernel.device,
            buffer_indices=request.buffer_indices, output_indices=outputs, vals=vals, fixedvars=fixed,
            buffer_ids=tuple(id(b.base) for b in buffers), runtime_vars=shape.runtime)
        self.prepared_kernels.append(prepared)
        return prepared

    def _shape(self, kernel: CachedKernel, request: KernelRequest, scope: Mapping[str, LoopStep]) -> _Shape:
        """What every step of one kernel with the same fixed values inside the same loops shares, worked out
        once per prepare."""
        key = (request.ast, tuple(sorted(request.fixedvars.items())), tuple(v.name in scope for v in kernel.variables))
        shape = self._shapes.get(key)
        if shape is not None:
            return shape
        fixed = self._check_fixed(kernel, request)
        looped = []
        for var in kernel.variables:
            if var.name in scope and var.name in fixed:
                raise VariableError(f"variable {var.name} is fixed in this kernel and bound by a loop",
                                    kernel=kernel.name, stage="plan", value=var.name)
            if var.name in scope:
                if var.scalar is not None:
                    raise VariableError(f"the loop variable {var.name} is a runtime scalar of this kernel",
                                        kernel=kernel.name, stage="plan", value=var.name)
                looped.append(var)
        runtime = tuple(v for v in kernel.variables if v.name not in fixed and v.name not in scope)
        largest = {**{v.name: v.max for v in kernel.variables}, **fixed, **kernel.fixed}
        modes = tuple((argument.read or not argument.written, argument.written) for argument in kernel.layout)
        shape = _Shape(fixed, runtime, tuple(looped), largest, tuple(kernel.vals(largest)),
                       self._work(request.ast, largest), modes)
        self._shapes[key] = shape
        return shape

    def _work(self, ast: UOp, largest: Mapping[str, int]) -> int:
        """FLOPs plus bytes of ``ast`` at the largest values, estimated once per kernel and values: a plan
        that repeats a kernel walks it once."""
        key = (ast, tuple(sorted(largest.items())))
        if key not in self._work_estimates:
            self._work_estimates[key] = sum(estimate_cost(ast, largest))
        return self._work_estimates[key]

    def _check_fixed(self, kernel: CachedKernel, request: KernelRequest) -> dict[str, int]:
        known = {v.name: v for v in kernel.variables}
        fixed = {}
        for name, value in request.fixedvars.items():
            if name not in known:
                raise VariableError(f"fixed variable {name} is not a variable of this kernel", kernel=kernel.name,
                                    stage="plan", value=name)
            fixed[name] = known[name].checked(value, kernel=kernel.name, stage="plan")
        return fixed



# ---- helpers ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Shape:
    fixed: dict[str, int]
    runtime: tuple[Variable, ...]
    looped: tuple[Variable, ...]
    """The kernel's variables an enclosing loop binds."""
    largest: dict[str, int]
    vals: tuple[int, ...]
    work: int
    modes: tuple[tuple[bool, bool], ...]
    """Per argument: whether it orders as a read (an argument the kernel does not touch does), whether as
    a write."""


def _kernel_accesses(modes: Sequence[tuple[bool, bool]], buffers: Sequence[Buffer]) -> tuple[Access, ...]:
    accesses = []
    for buf, (read, written) in zip(buffers, modes, strict=True):
        storage, start = id(buf.base), buf.offset * buf.dtype.itemsize
        end = start + buf.size * buf.dtype.itemsize
        if read:
            accesses.append(Access(storage, start, end, False))
        if written:
            accesses.append(Access(storage, start, end, True))
    return tuple(accesses)


def _nothing(values: Values) -> None:
    return None


def _no_cost(values: Mapping[str, int]) -> tuple[int, int]:
    return (0, 0)



def _value(expr: UOp, values: Mapping[str, int]) -> int:
    if expr.op is Ops.CONST:
        return int(expr.arg)
    if expr.op is Ops.DEFINE_VAR:
        return values[expr.arg[0]]
    return evaluate(expr, values)


def _merged(accesses: Any) -> tuple[Access, ...]:
    """The accesses of a loop's body, each distinct one once."""
    return tuple(dict.fromkeys(accesses))


def _copier(dst: Buffer, src: Buffer, name: str) -> tuple[Callable[[Values], None], dict[int, list[Site]] | None,
                                                         ReplayCopy | None]:
    """A whole-buffer copy: one memmove between host buffers, a round trip through the host otherwise."""
    if dst.device_object.caps.host_memory and src.device_object.caps.host_memory:
        addresses = (ctypes.c_int64 * 2)(dst.address, src.address)
        nbytes = dst.nbytes
        sites: dict[int, list[Site]] = {}
        sites.setdefault(id(dst.base), []).append((addresses, 0, dst.byte_offset))
        sites.setdefault(id(src.base), []).append((addresses, 1, src.byte_offset))

        def host_copy(values: Values) -> None:
            ctypes.memmove(addresses[0], addresses[1], nbytes)

        native = ReplayCopy(BufferAddress(addresses[0], id(dst.base), dst.byte_offset),
                            BufferAddress(addresses[1], id(src.base), src.byte_offset), nbytes, host_copy, name)
        return host_copy, sites, native

    def staged_copy(values: Values) -> None:
        dst.copyin(src.numpy())

    return staged_copy, None, None



def _kernel_launcher(kernel: CachedKernel, buffers: Sequence[Buffer], initial: list[int], fixed: Mapping[str, int]
                     ) -> tuple[Any, Callable[[Values], None], Callable[[], None] | None, dict[int, list[Site]] | None,
                                ReplayKernel, MutableSequence[int]]:
    """The per-run work of one kernel, with everything that does not depend on the run decided now: the
    program is bound to its buffers, and static launch sizes are evaluated once. Returns the bound launch;
    its Python runner; the check to run once the device has finished, for a kernel whose accesses are
    bounds-checked; where the launch keeps each buffer's address; the step as a native replay runs it; and
    the variable values of its last run."""
    launch = kernel.program.bind([b.address for b in buffers])
    check = launch.check if isinstance(launch, PartsLaunch) and launch.checks else None
    fixed = {**fixed, **kernel.fixed}
    slots = [(i, name) for i, name in enumerate(kernel.var_names) if name not in fixed]
    vals: MutableSequence[int] = initial
    if isinstance(launch, HostArguments):  # the launch's own array: a native replay's values show too
        vals = launch.variable_values(initial)
    static = kernel.launch.static
    sites = _launch_sites(launch, buffers)
    if static is not None:
        global_size, local_size = static.global_size, static.local_size

        def run_static(values: Values) -> None:
            for i, name in slots:
                vals[i] = values[name]
            launch(vals, global_size, local_size)

        return launch, run_static, check, sites, _replayed(kernel, launch, fixed, run_static), vals

    def run(values: Values) -> None:
        for i, name in slots:
            vals[i] = values[name]
        dims = kernel.launch.dims({**values, **fixed})
        launch(vals, dims.global_size, dims.local_size)

    return launch, run, check, sites, _replayed(kernel, launch, fixed, run), vals


def _spread(kernel: CachedKernel, launch: Any) -> bool:
    """Whether a kernel's launches spread over several workers (the CPU's thread team: every core), or may (a
    launch size the run decides). Such a kernel gains nothing from a host thread of its own beside other steps,
    and two at once take turns at the same cores: beside each other, npbench's azimint_hist's histogram and
    its scatter of 4e6 values took 33 ms, one after the other 24."""
    launches = [part.launch for part, _ in launch.launches] if isinstance(launch, PartsLaunch) else [kernel.launch]
    return any(each.static is None or each.static.global_size[0] > 1 for each in launches)


def _replayed(kernel: CachedKernel, launch: Any, fixed: Mapping[str, int],
              run: Callable[[Values], None]) -> ReplayKernel:
    """A kernel bound to its buffers as a native replay runs it: each program launch it makes (one, or a
    kernel's parts, each with its own launch size), or else ``run`` (no launches: parts whose own buffers a
    run may have to allocate first)."""
    if isinstance(launch, PartsLaunch):
        calls = () if launch.resizes else \
            tuple(KernelCall(sub, part.var_names, part.launch) for part, sub in launch.launches)
    else:
        calls = (KernelCall(launch, kernel.var_names, kernel.launch),)
    return ReplayKernel(calls, fixed, run, kernel.name)


def _launch_sites(launch: Any, buffers: Sequence[Buffer]) -> dict[int, list[Site]] | None:
    """Where a bound launch keeps each buffer's address: its argument array in host memory
    (``HostArguments``), or those of a kernel's parts; None for launches whose arguments are a
    device's own."""
    sites: dict[int, list[Site]] = {}
    if isinstance(launch, HostArguments):
        addresses = launch.buffer_addresses
        for position, buf in enumerate(buffers):
            sites.setdefault(id(buf.base), []).append((addresses, position, buf.byte_offset))
        return sites
    if isinstance(launch, PartsLaunch):
        user = {slot: position for position, slot in enumerate(launch.program.user_slots)}
        for part, part_launch in launch.launches:
            if not isinstance(part_launch, HostArguments):
                return None
            addresses = part_launch.buffer_addresses
            for index, slot in enumerate(part.slots):
                if slot in user:
                    buf = buffers[user[slot]]
                    sites.setdefault(id(buf.base), []).append((addresses, index, buf.byte_offset))
        return sites
    return None
