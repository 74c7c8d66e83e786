"""``ExecutionPlan``: kernels, copies and loops over them, prepared once and replayed many times.

::

    plan.add_buffer / add_kernel / add_copy      (record)
    plan.loop(var, start, stop, [step,] body)    (the last steps added, or a sub-plan, repeated with var)
    plan.prepare()       compile the distinct kernels together, check every buffer, derive dependencies
                         from byte ranges, bind programs to buffers, fix launch sizes and the schedule
    plan.execute(n=..., buffers={slot: array})
                         check every variable, loop and rebound array, then run the schedule; nothing
                         runs if a check fails

Dependencies come from the bytes each step touches on each storage (a view conflicts with its base where
they overlap): read-after-write, write-after-read and write-after-write order two steps, reads never do.
Steps are grouped into levels by their longest dependency chain; the steps of one level are independent,
and when several are host-parallel-safe and large enough to pay for it they run on host threads at once.
A loop is one step of the level structure around it; its body has levels of its own, computed for one
turn, and turns run one after another (everything of a turn finishes before the next begins).

Where the device's runtime replays plans natively (``svod.device.PlanReplayer``; the CPU's does), a
prepared plan's steps, loops and launch sizes are handed to it once, described without naming a device,
and a replay costs one call from Python (on the CPU, a compiled dispatcher then takes a few nanoseconds a
step). A profiled run, and plans on other devices, dispatch from Python, level by level.

A loop's variable takes the values ``range(start, stop, step)``; start, stop and step are integers,
names of variables (passed to ``execute``, or bound by an enclosing loop) or integer expressions of them.
Before anything runs, every value a loop variable may take is checked against the bounds of each kernel
that uses it: the values are bounded by intervals (the enclosing loops' ranges, the run's variables), so a
triangular nest is checked over its whole triangle.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from svod.config import VERSION
from svod.device import (
    Buffer,
    BufferAddress,
    Device,
    HostArguments,
    KernelCall,
    PlanReplay,
    PlanReplayer,
    ReplayCopy,
    ReplayHost,
    ReplayItem,
    ReplayKernel,
    ReplayLoop,
    Variable,
    resolver,
)
from svod.device.launch import INT64_MAX, INT64_MIN, evaluate
from svod.device.protocols import Site
from svod.dtype import DeviceSpec, dtypes
from svod.errors import BufferMismatchError, BundleError, BundleWarning, SvodError, VariableError
from svod.ir import Ops, UOp, kernel_label
from svod.ir.bounds import Bounds, compute_bounds
from svod.runtime.bundle import GraphReader, GraphWriter, indices, is_count, read_bundle, require, write_bundle
from svod.runtime.cache import KernelCache, default_cache
from svod.runtime.kernel import CachedKernel
from svod.runtime.profiler import StepProfile, estimate_cost, write_chrome_trace
from svod.runtime.schedule import Access, ByteRanges
from svod.runtime.staged import StagedLaunch

PARALLEL_MIN_COST = 1 << 20
"""Steps estimated below this many bytes plus FLOPs run one after another: waking a host thread costs
tens of microseconds, more than such a step takes."""

Values = MutableMapping[str, int]


@dataclass(eq=False, kw_only=True)
class Step:
    """One step of a plan (a kernel, a copy or a loop), with everything decided at prepare time."""

    id: int
    name: str
    kind: str
    accesses: tuple[Access, ...]
    """The byte ranges the step reads and writes: its dependencies are derived from them."""
    run: Callable[[Values], None]
    parallel_safe: bool
    """Whether it may run on a host thread beside other steps."""
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


@dataclass(eq=False, kw_only=True)
class PreparedKernel(Step):
    """One dispatch of a plan."""

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


@dataclass(eq=False, kw_only=True)
class LoopStep(Step):
    """A loop: its body's steps run level by level, once per value of ``var``. A loop never runs on a host
    thread beside other steps (its body's levels may)."""

    var: str
    start: UOp
    stop: UOp
    step: UOp
    body: list[Step]
    levels: list[list[Step]]
    uses: list[tuple[Variable, str]]
    """Each kernel variable the loop binds, with the kernel's name: its values are checked against it."""


class PlanKernel(Protocol):
    """A kernel made for the plan's buffers when it is added (``@svod.kernel``): its AST over ``buffers``
    and the values of its size variables."""

    def plan_kernel(self, buffers: Sequence[Buffer]) -> tuple[UOp, dict[str, int]]: ...


@dataclass(frozen=True, slots=True)
class _KernelRequest:
    ast: UOp
    buffer_indices: tuple[int, ...]
    fixedvars: dict[str, int]


@dataclass(frozen=True, slots=True)
class _CopyRequest:
    dst: int
    src: int


@dataclass(frozen=True, slots=True)
class _LoopRequest:
    var: str
    start: UOp
    stop: UOp
    step: UOp
    body: tuple[int, ...]


_Request = _KernelRequest | _CopyRequest | _LoopRequest
Bound = int | str | UOp


@dataclass(slots=True)
class _Binding:
    """An array bound to a plan buffer for one run: its address is patched in, or it is copied in and out."""

    slot: int
    storage: int
    array: np.ndarray
    address: int
    patch: bool
    written: bool


class ExecutionPlan:
    """A sequence of kernels, copies and loops over a set of buffers, prepared once and executed many
    times."""

    def __init__(self, device: str | Device = "CPU", cache: KernelCache | None = None) -> None:
        self.device = resolver.resolve(device)
        self.cache = default_cache() if cache is None else cache
        self.buffers: list[Buffer] = []
        self.buffer_names: dict[str, int] = {}
        self.prepared_kernels: list[PreparedKernel] = []
        self._requests: list[_Request] = []
        self._top: list[int] = []
        """The ids of the steps outside every loop, in the order they were added."""
        self._steps: list[Step] = []
        self._levels: list[list[Step]] = []
        self._loops: list[LoopStep] = []
        """Every loop, enclosing ones before the loops they contain."""
        self._runtime_bounds: dict[str, list[tuple[Variable, str]]] = {}
        self._fixed_names: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._checked_steps: list[Step] = []
        self._sites: dict[int, list[Site]] = {}
        self._copied_storages: set[int] = set()
        """Storages some step cannot be repointed for: arrays bound to them are copied in and out."""
        self._written_storages: dict[int, str] = {}
        """Each storage some step writes, with the first such step's name."""
        self._users: dict[int, str] = {}
        """Each storage, with the name of the first step that touches it."""
        self._host_ranges: list[tuple[int, int, int]] = []
        """(start, end, storage) of every storage in host memory, for the overlap check of bound arrays."""
        self._executing = threading.Lock()
        self._preparing = threading.Lock()
        self._last_profile: list[StepProfile] = []
        self._prepared = False
        self._work_estimates: dict[tuple[UOp, tuple[tuple[str, int], ...]], int] = {}
        self._shapes: dict[tuple[UOp, tuple[tuple[str, int], ...], tuple[bool, ...]], _Shape] = {}
        self._checked_by: dict[Variable, str] = {}
        """Each distinct variable a run or loop supplies, with the first kernel that has it (its checks'
        name): a plan checks each once, however many steps read it."""
        self._native: PlanReplay | None = None
        """The plan as its device replays it natively; None where steps dispatch from Python."""
        self._staged_checks: list[StagedLaunch] = []

    # ---- building ----------------------------------------------------------------------------------------

    def add_buffer(self, buf: Buffer, name: str | None = None) -> int:
        """Add a buffer; its index (and ``name``, if given) refers to it in kernels and in ``execute(buffers=...)``."""
        self._check_open()
        if not isinstance(buf, Buffer):
            raise BufferMismatchError("add_buffer() takes a svod.Buffer", stage="plan", value=type(buf).__name__)
        if name is not None:
            if not isinstance(name, str) or not name:
                raise BufferMismatchError("a buffer's name is a non-empty string", stage="plan", value=name)
            if name in self.buffer_names:
                raise BufferMismatchError(f"the plan already has a buffer named {name}", stage="plan", value=name)
            self.buffer_names[name] = len(self.buffers)
        self.buffers.append(buf)
        return len(self.buffers) - 1

    def add_kernel(self, ast: UOp | PlanKernel, buffer_indices: Sequence[int],
                   fixedvars: Mapping[str, int] | None = None) -> int:
        """Add a kernel over plan buffers (in kernel argument order); ``fixedvars`` are bound for good. A Python
        kernel (``@svod.kernel``) is built for those buffers, its size variables fixed at their sizes."""
        self._check_open()
        self._check_indices(buffer_indices)
        if not isinstance(ast, UOp):
            ast, sizes = ast.plan_kernel([self.buffers[i] for i in buffer_indices])
            fixedvars = {**sizes, **(fixedvars or {})}
        return self._append(_KernelRequest(ast, tuple(buffer_indices), dict(fixedvars or {})))

    def add_copy(self, dst_index: int, src_index: int) -> int:
        """Add a copy of a whole buffer into another of the same dtype and size."""
        self._check_open()
        self._check_indices((dst_index, src_index))
        dst, src = self.buffers[dst_index], self.buffers[src_index]
        if dst.dtype != src.dtype or dst.size != src.size:
            raise BufferMismatchError(f"copy of {src.size} x {src.dtype.name} into {dst.size} x {dst.dtype.name}",
                                      stage="plan", value=(dst_index, src_index))
        return self._append(_CopyRequest(dst_index, src_index))

    def loop(self, var: str | UOp, start: Bound, stop: Bound, *step_and_body: Any, step: Bound | None = None,
             body: Sequence[int] | ExecutionPlan | None = None) -> int:
        """Repeat ``body`` with ``var`` bound to each value of ``range(start, stop, step)`` (step 1 unless
        given); returns the loop's id. ``body`` is the ids of the steps added last (they move into the loop,
        in the order they were added) or a plan that was built but not prepared, whose buffers are this
        plan's (found by identity; any new one is added). ``var`` is a name or a kernel's variable
        (``k.var``); kernels in the body read it like any variable, in their code and their launch sizes.
        start, stop and step are integers, names of variables or integer expressions of them."""
        self._check_open()
        if len(step_and_body) > 2:
            raise SvodError("loop(var, start, stop, [step,] body) takes at most five arguments", stage="plan")
        if len(step_and_body) == 2:
            step, body = step_and_body
        elif len(step_and_body) == 1:
            if body is None:
                body = step_and_body[0]
            else:
                step = step_and_body[0]
        if body is None:
            raise SvodError("loop() needs a body: the ids of the steps added last, or a plan", stage="plan")
        name = _variable_name(var)
        bounds = tuple(_bound_expression(b, what) for b, what in ((start, "start"), (stop, "stop"),
                                                                    (1 if step is None else step, "step")))
        if bounds[2].op is Ops.CONST and bounds[2].arg == 0:
            raise SvodError(f"loop over {name} has step 0", stage="plan", value=0)
        ids = self._adopt(body) if isinstance(body, ExecutionPlan) else self._take_trailing(body, name)
        return self._append(_LoopRequest(name, bounds[0], bounds[1], bounds[2], body=ids))

    def _append(self, request: _Request) -> int:
        self._requests.append(request)
        self._top.append(len(self._requests) - 1)
        return len(self._requests) - 1

    def _take_trailing(self, body: Sequence[int], name: str) -> tuple[int, ...]:
        ids = list(body)
        if not all(isinstance(i, int) for i in ids) or sorted(ids) != self._top[len(self._top) - len(ids):]:
            raise SvodError(f"the body of the loop over {name} must be the steps added last, outside any loop "
                            f"(the last are {self._top[-len(ids):] if ids else []})", stage="plan", value=ids)
        del self._top[len(self._top) - len(ids):]
        return tuple(sorted(ids))

    def _adopt(self, sub: ExecutionPlan) -> tuple[int, ...]:
        """Copy a sub-plan's steps into this plan: its buffers found here by identity or added; its steps
        outside loops become the body."""
        if sub is self or sub._prepared:
            raise SvodError("a loop's body plan must be another plan, built but not prepared", stage="plan")
        if sub.device is not self.device:
            raise SvodError(f"a loop's body plan runs on {sub.device.name}, this plan on {self.device.name}",
                            stage="plan", value=sub.device.name)
        mine = {id(b): i for i, b in enumerate(self.buffers)}
        names = {index: name for name, index in sub.buffer_names.items()}
        index = []
        for position, buf in enumerate(sub.buffers):
            if id(buf) not in mine:
                name = names.get(position)
                mine[id(buf)] = self.add_buffer(buf, name if name not in self.buffer_names else None)
            index.append(mine[id(buf)])
        first = len(self._requests)
        for request in sub._requests:
            if isinstance(request, _KernelRequest):
                moved: _Request = _KernelRequest(request.ast, tuple(index[i] for i in request.buffer_indices),
                                                 request.fixedvars)
            elif isinstance(request, _CopyRequest):
                moved = _CopyRequest(index[request.dst], index[request.src])
            else:
                moved = _LoopRequest(request.var, request.start, request.stop, request.step,
                                     tuple(first + i for i in request.body))
            self._requests.append(moved)
        return tuple(first + i for i in sub._top)

    def _check_open(self) -> None:
        if self._prepared:
            raise SvodError("the plan is prepared; build a new plan to change it", stage="plan")

    def _check_indices(self, indices: Sequence[int]) -> None:
        for index in indices:
            if not isinstance(index, int) or not 0 <= index < len(self.buffers):
                raise BufferMismatchError(f"no plan buffer {index}; the plan has {len(self.buffers)}", stage="plan",
                                          value=index)

    # ---- prepare -----------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Compile, check and schedule everything; after this, execute() does the minimum per step."""
        with self._preparing:
            if not self._prepared:
                with _collector_paused():
                    self._prepare()

    def _prepare(self) -> None:
        kernels = self._compile_all()
        self._steps = self._prepare_steps(self._top, kernels, {})
        self._levels = _schedule(self._steps)
        loop_vars = {loop.var: loop for loop in self._loops}
        for name in self._runtime_bounds:
            if name in loop_vars:
                raise VariableError(f"variable {name} is bound by a loop and also needed outside it, by "
                                    f"{self._runtime_bounds[name][0][1]}", stage="plan", value=name)
        self.prepared_kernels.sort(key=lambda p: p.id)
        self._checked_steps = [p for p in self.prepared_kernels if p.check is not None]
        self._index_storages()
        self._native = self._build_native()
        self._staged_checks = [p.launch for p in self.prepared_kernels
                               if p.check is not None and isinstance(p.launch, StagedLaunch)]
        self._work_estimates.clear()
        self._shapes.clear()
        self._prepared = True

    def _compile_all(self) -> dict[UOp, CachedKernel]:
        """Every distinct kernel, compiled together: the compiler overlaps or batches the work."""
        distinct = list(dict.fromkeys(r.ast for r in self._requests if isinstance(r, _KernelRequest)))
        return dict(zip(distinct, self.cache.get_many(distinct, self.device), strict=True))

    def _prepare_steps(self, ids: Sequence[int], kernels: Mapping[UOp, CachedKernel],
                       scope: Mapping[str, LoopStep]) -> list[Step]:
        steps: list[Step] = []
        for op_id in ids:
            request = self._requests[op_id]
            if isinstance(request, _KernelRequest):
                steps.append(self._prepare_kernel(op_id, request, kernels[request.ast], scope))
            elif isinstance(request, _CopyRequest):
                steps.append(self._prepare_copy(op_id, request))
            else:
                steps.append(self._prepare_loop(op_id, request, kernels, scope))
        return steps

    def _prepare_loop(self, op_id: int, request: _LoopRequest, kernels: Mapping[UOp, CachedKernel],
                      scope: Mapping[str, LoopStep]) -> LoopStep:
        if request.var in scope:
            raise VariableError(f"loop over {request.var} inside a loop over the same variable", stage="plan",
                                value=request.var)
        for bound in (request.start, request.stop, request.step):
            for node in bound.toposort():
                if node.op is Ops.DEFINE_VAR and node.arg[0] not in scope:
                    if node.arg[0] == request.var:
                        raise VariableError(f"the bounds of the loop over {request.var} use its own variable",
                                            stage="plan", value=request.var)
                    self._runtime_bounds.setdefault(node.arg[0], []).append(
                        (Variable(node.arg[0], node.arg[1], node.arg[2]), f"loop over {request.var}"))
        loop = LoopStep(id=op_id, name=f"loop over {request.var}", kind="loop", accesses=(), run=_nothing,
                        parallel_safe=False, work=0, cost_of=_no_cost, var=request.var, start=request.start,
                        stop=request.stop, step=request.step, body=[], levels=[], uses=[])
        self._loops.append(loop)
        loop.body = self._prepare_steps(request.body, kernels, {**scope, request.var: loop})
        loop.levels = _schedule(loop.body)
        loop.accesses = _merged(a for step in loop.body for a in step.accesses)
        loop.run = self._loop_runner(loop)
        return loop

    def _loop_runner(self, loop: LoopStep) -> Callable[[Values], None]:
        start, stop, step, var = loop.start, loop.stop, loop.step, loop.var
        levels = loop.levels

        def run(values: Values) -> None:
            for value in range(_value(start, values), _value(stop, values), _value(step, values)):
                values[var] = value
                self._run_levels(levels, values)

        return run

    def _prepare_kernel(self, op_id: int, request: _KernelRequest, kernel: CachedKernel,
                        scope: Mapping[str, LoopStep]) -> Step:
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
                self._runtime_bounds.setdefault(var.name, []).append((var, kernel.name))
        self._fixed_names.update(fixed)
        accesses = _kernel_accesses(shape.modes, buffers)
        outputs = tuple(request.buffer_indices[pos] for pos in kernel.written_positions)
        launch, run, check, sites, emit, vals = _kernel_launcher(kernel, buffers, list(shape.vals), fixed)
        ast = request.ast

        def cost_of(values: Mapping[str, int]) -> tuple[int, int]:
            return estimate_cost(ast, {**values, **fixed, **kernel.fixed})

        prepared = PreparedKernel(
            id=op_id, name=kernel.name, kind="kernel", accesses=accesses, run=run,
            parallel_safe=kernel.host_parallel_safe, work=shape.work, cost_of=cost_of, check=check, sites=sites,
            native=emit, launch=launch, ast=ast, kernel=kernel, device=self.device,
            buffer_indices=request.buffer_indices, output_indices=outputs, vals=vals, fixedvars=fixed,
            buffer_ids=tuple(id(b.base) for b in buffers), runtime_vars=shape.runtime)
        self.prepared_kernels.append(prepared)
        return prepared

    def _shape(self, kernel: CachedKernel, request: _KernelRequest, scope: Mapping[str, LoopStep]) -> _Shape:
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

    def _check_fixed(self, kernel: CachedKernel, request: _KernelRequest) -> dict[str, int]:
        known = {v.name: v for v in kernel.variables}
        fixed = {}
        for name, value in request.fixedvars.items():
            if name not in known:
                raise VariableError(f"fixed variable {name} is not a variable of this kernel", kernel=kernel.name,
                                    stage="plan", value=name)
            fixed[name] = known[name].checked(value, kernel=kernel.name, stage="plan")
        return fixed

    def _prepare_copy(self, op_id: int, request: _CopyRequest) -> Step:
        dst, src = self.buffers[request.dst], self.buffers[request.src]
        accesses = (Access(id(src.base), src.byte_offset, src.byte_offset + src.nbytes, write=False),
                    Access(id(dst.base), dst.byte_offset, dst.byte_offset + dst.nbytes, write=True))
        name = f"copy {request.src} -> {request.dst}"
        run, sites, native = _copier(dst, src, name)
        moved = 2 * dst.nbytes

        def cost_of(values: Mapping[str, int]) -> tuple[int, int]:
            return (0, moved)

        return Step(id=op_id, name=name, kind="copy", accesses=accesses, run=run,
                    parallel_safe=dst.device_object.caps.host_memory and src.device_object.caps.host_memory,
                    work=moved, cost_of=cost_of, sites=sites, native=native)

    def _index_storages(self) -> None:
        """Per storage: where steps keep its address, who writes it, who uses it first, and its host range."""
        for step in _flatten(self._steps):
            for access in step.accesses:
                self._users.setdefault(access.storage, step.name)
                if access.write:
                    self._written_storages.setdefault(access.storage, step.name)
            if step.kind == "loop":
                continue
            if step.sites is None:
                self._copied_storages.update(a.storage for a in step.accesses)
            else:
                for storage, sites in step.sites.items():
                    self._sites.setdefault(storage, []).extend(sites)
        bases = {id(b.base): b.base for b in self.buffers}
        self._host_ranges = sorted((int(base.address), int(base.address) + base.nbytes, key)
                                   for key, base in bases.items()
                                   if base.device_object.caps.host_memory and base.nbytes and key in self._users)

    # ---- execute -----------------------------------------------------------------------------------------

    def execute(self, *, profile: bool = False, buffers: Mapping[int | str, Any] | None = None,
                **var_vals: int) -> list[StepProfile] | None:
        if not self._prepared:
            self.prepare()
        native = self._native
        if native is None or profile or buffers:
            return self.execute_with_vars(var_vals, profile=profile, buffers=buffers)
        values = self._check_vars(var_vals) if var_vals or self._runtime_bounds else var_vals
        if self._loops:
            self._check_loops(values)
        with self._executing:  # the short way of execute_with_vars: what a replay of a CPU plan does
            native.run(values)
            if self._checked_steps:
                self._check_native()
        return None

    def execute_with_vars(self, var_vals: Mapping[str, int], *, profile: bool = False,
                          buffers: Mapping[int | str, Any] | None = None) -> list[StepProfile] | None:
        """Check every variable, loop and bound array, then run every step; with ``profile`` return per-step
        timings. ``buffers`` binds arrays (numpy, any DLPack producer on the host, host Buffers) to plan
        buffers (by index or name) for this run: on a device whose buffers are host memory the kernels use
        the array's own memory, elsewhere it is copied in before the run and, if the plan writes it, back
        after.

        A plan may be executed from several threads: executions take turns (the steps' argument arrays
        and buffers are the plan's own, so two at once would mix their variables and their data).
        """
        self.prepare()
        values = self._check_vars(var_vals)
        if self._loops:
            self._check_loops(values)
        bindings = self._check_bindings(buffers) if buffers else []
        with self._executing:
            self._bind(bindings)
            try:
                if profile:
                    records = self._run_profiled(values)
                elif self._native is not None:
                    self._native.run(values)
                else:
                    self._run_levels(self._levels, values)
                    self.device.synchronize()
                self._copy_out(bindings)
            finally:
                self._unbind(bindings)
            if self._native is not None and not profile:
                self._check_native()
            else:
                self._check_steps()
            if profile:
                self._last_profile = records
                return records
        return None

    def _run_levels(self, levels: Sequence[Sequence[Step]], values: Values) -> None:
        for level in levels:
            if len(level) == 1 or not self._parallel(level):
                for step in level:
                    step.run(values)
            else:
                self._run_parallel(level, values, lambda step, vals: step.run(vals))

    def _check_native(self) -> None:
        if self._staged_checks and self._native is not None:
            current = self._native.values()
            for launch in self._staged_checks:  # the values its error message evaluates sizes with
                launch.values = {**launch.values, **current}
        self._check_steps()

    def _check_steps(self) -> None:
        for step in self._checked_steps:
            step.check()  # type: ignore[misc]

    def _check_vars(self, var_vals: Mapping[str, int]) -> dict[str, int]:
        for name in var_vals:
            if name in self._fixed_names and name not in self._runtime_bounds:
                raise VariableError(f"variable {name} is fixed in this plan and cannot be passed again",
                                    stage="execute", value=name)
            if name not in self._runtime_bounds:
                raise VariableError(f"unknown variable {name}; the plan takes {sorted(self._runtime_bounds) or 'none'}",
                                    stage="execute", value=name)
        values = {}
        for name, uses in self._runtime_bounds.items():
            if name not in var_vals:
                raise VariableError(f"missing runtime value for variable {name}", kernel=uses[0][1],
                                    stage="execute", value=name)
            for var, kernel in uses:
                values[name] = var.checked(var_vals[name], kernel=kernel, stage="execute")
        return values

    def _check_loops(self, values: Mapping[str, int]) -> None:
        """Every value each loop variable may take, within the bounds of every kernel that reads it, and no
        step that may be 0; intervals over the enclosing loops' values (a loop that never runs checks
        nothing)."""
        known: dict[str, Bounds | None] = {name: (value, value) for name, value in values.items()}
        for loop in self._loops:  # enclosing loops come first
            known[loop.var] = _loop_values(loop, known)
            if known[loop.var] is None:
                continue
            lo, hi = known[loop.var]  # type: ignore[misc]
            for var, kernel in loop.uses:
                if lo < var.min or hi > var.max:
                    shown = f"{lo}" if lo == hi else f"[{lo}, {hi}]"
                    raise VariableError(f"loop variable {var.name} may take {shown}, outside bounds "
                                        f"[{var.min}, {var.max}]", kernel=kernel, stage="execute", value=(lo, hi))

    def _parallel(self, level: Sequence[Step]) -> bool:
        return sum(1 for s in level if s.parallel_safe and s.work >= PARALLEL_MIN_COST) >= 2 and \
            all(s.parallel_safe for s in level)

    def _run_parallel(self, level: Sequence[Step], values: Values,
                      body: Callable[[Step, Values], object]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="svod-plan")
        futures = [self._pool.submit(body, step, dict(values)) for step in level[1:]]
        body(level[0], values)
        for future in futures:
            future.result()

    def _run_profiled(self, values: Values) -> list[StepProfile]:
        origin = time.perf_counter()
        records: list[StepProfile] = []
        lock = threading.Lock()

        def timed(step: Step, vals: Values) -> None:
            if isinstance(step, LoopStep):
                for value in range(_value(step.start, vals), _value(step.stop, vals), _value(step.step, vals)):
                    vals[step.var] = value
                    run_levels(step.levels, vals)
                return
            start = time.perf_counter()
            step.run(vals)
            self.device.synchronize()
            end = time.perf_counter()
            flops, nbytes = step.cost_of(vals)
            with lock:
                records.append(StepProfile(step.id, step.name, step.kind, start - origin, end - start, nbytes,
                                           flops, threading.get_ident() % 100_000))

        def run_levels(levels: Sequence[Sequence[Step]], vals: Values) -> None:
            for level in levels:
                if len(level) > 1 and self._parallel(level):
                    self._run_parallel(level, vals, timed)
                else:
                    for step in level:
                        timed(step, vals)

        run_levels(self._levels, values)
        return sorted(records, key=lambda r: r.start)

    # ---- native replay ---------------------------------------------------------------------------------------

    def _build_native(self) -> PlanReplay | None:
        """The plan as its device replays it natively, where the device's runtime can (the CPU's); None
        elsewhere, and where the replayer finds no native form (a launch size or loop bound)."""
        replayer = self.device.runtime
        if not isinstance(replayer, PlanReplayer) or not self._steps:
            return None
        replay = replayer.replay(self._replay_work(self._levels), tuple(self._runtime_bounds))
        if replay is not None:
            for storage, sites in replay.sites.items():
                self._sites.setdefault(storage, []).extend(sites)
        return replay

    def _replay_work(self, levels: Sequence[Sequence[Step]]) -> list[ReplayItem]:
        """The levels' steps in run order, as a native replay runs them: a level run on host threads at once
        is Python's work."""
        work: list[ReplayItem] = []
        for level in levels:
            if len(level) > 1 and self._parallel(level):
                work.append(ReplayHost(functools.partial(self._run_levels, [level]), "host-parallel steps"))
                continue
            for step in level:
                if isinstance(step, LoopStep):
                    body = tuple(self._replay_work(step.levels))
                    work.append(ReplayLoop(step.var, step.start, step.stop, step.step, body, step.name))
                else:
                    work.append(step.native or ReplayHost(step.run, step.name))
        return work

    # ---- arrays bound per run ------------------------------------------------------------------------------

    def _slot(self, key: int | str) -> int:
        if isinstance(key, str):
            if key not in self.buffer_names:
                raise BufferMismatchError(f"no plan buffer named {key}; the plan has "
                                          f"{sorted(self.buffer_names) or 'no names'}", stage="execute", value=key)
            return self.buffer_names[key]
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < len(self.buffers):
            raise BufferMismatchError(f"no plan buffer {key}; the plan has {len(self.buffers)}", stage="execute",
                                      value=key)
        return key

    def _check_bindings(self, arrays: Mapping[int | str, Any]) -> list[_Binding]:
        """Check every bound array before anything runs: a whole plan buffer's dtype and size, writeable if
        the plan writes it, in host memory laid out as a zero-copy buffer needs, and sharing no memory with
        another storage of the plan where either is written."""
        bindings: list[_Binding] = []
        seen: dict[int, int | str] = {}
        for key, obj in arrays.items():
            slot = self._slot(key)
            buf = self.buffers[slot]
            storage = id(buf.base)
            user = self._users.get(storage)
            if buf.is_view:
                raise BufferMismatchError(f"plan buffer {key} is a view at offset {buf.offset} of another; bind an "
                                          "array to the buffer it views", kernel=user, stage="execute", value=key)
            if storage in seen:
                raise BufferMismatchError(f"plan buffers {seen[storage]} and {key} are one buffer; bind it once",
                                          kernel=user, stage="execute", value=key)
            seen[storage] = key
            array = _host_array(obj, key, user)
            if array.dtype != buf.dtype.numpy:
                raise BufferMismatchError(f"plan buffer {key} holds {buf.dtype.name}; the array bound to it is "
                                          f"{array.dtype}", kernel=user, stage="execute", value=str(array.dtype))
            if array.size != buf.size:
                raise BufferMismatchError(f"plan buffer {key} has {buf.size} elements; the array bound to it has "
                                          f"{array.size}", kernel=user, stage="execute", value=array.size)
            written = storage in self._written_storages
            if written and not array.flags.writeable:
                raise BufferMismatchError(f"plan buffer {key} is written by the plan; the array bound to it is "
                                          "read-only", kernel=self._written_storages[storage], stage="execute",
                                          value=key)
            host = buf.device_object.caps.host_memory
            patch = host and storage not in self._copied_storages
            address = 0
            if host:
                if not array.flags.c_contiguous:
                    raise BufferMismatchError(f"the array bound to plan buffer {key} is not C-contiguous; kernels "
                                              "use its memory as it is (np.ascontiguousarray copies one)",
                                              kernel=user, stage="execute", value=array.strides)
                address = int(array.__array_interface__["data"][0])
                if address % array.dtype.itemsize:
                    raise BufferMismatchError(f"the array bound to plan buffer {key} is not aligned to its itemsize "
                                              f"({array.dtype.itemsize})", kernel=user, stage="execute",
                                              value=address % array.dtype.itemsize)
            bindings.append(_Binding(slot, storage, array, address, patch, written))
        self._check_unshared(bindings)
        return bindings

    def _check_unshared(self, bindings: Sequence[_Binding]) -> None:
        """A bound array written by the plan shares memory with no other storage it touches, and a bound
        array shares none with a storage the plan writes (the kernels are compiled assuming so)."""
        rebound = {b.storage for b in bindings if b.patch}
        ranges = [(start, end, storage, storage in self._written_storages)
                  for start, end, storage in self._host_ranges if storage not in rebound]
        ranges += [(b.address, b.address + b.array.nbytes, b.storage, b.written) for b in bindings if b.patch]
        ranges.sort()
        reach_end, reach_written, reach_storage = -1, False, 0
        for start, end, storage, written in ranges:
            if start < reach_end and (written or reach_written) and (storage in rebound or reach_storage in rebound):
                raise BufferMismatchError("an array bound for this run shares memory with another buffer of the "
                                          "plan, and one of them is written", kernel=self._users.get(storage),
                                          stage="execute", value=start)
            if end > reach_end:
                reach_end, reach_written, reach_storage = end, written, storage
            elif written:
                reach_written = True

    def _bind(self, bindings: Sequence[_Binding]) -> None:
        for binding in bindings:
            if binding.patch:
                for array, index, offset in self._sites.get(binding.storage, ()):
                    array[index] = binding.address + offset
            else:
                self.buffers[binding.slot].copyin(binding.array)

    def _copy_out(self, bindings: Sequence[_Binding]) -> None:
        for binding in bindings:
            if not binding.patch and binding.written:
                binding.array[...] = self.buffers[binding.slot].numpy().reshape(binding.array.shape)

    def _unbind(self, bindings: Sequence[_Binding]) -> None:
        for binding in bindings:
            if binding.patch:
                base = int(self.buffers[binding.slot].address)
                for array, index, offset in self._sites.get(binding.storage, ()):
                    array[index] = base + offset

    def export_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the last profiled run as Chrome trace events (open it in Perfetto)."""
        write_chrome_trace(path, self._last_profile)

    # ---- bundles -------------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the prepared plan to one file (``svod.runtime.bundle``): its buffers' layout, its steps,
        and every kernel's AST and compiled stages, for ``svod.load_plan`` in another process. Prepares the
        plan first if need be. Buffer contents are not saved: a loaded plan's buffers start zeroed, and
        arrays are bound per run (``execute(buffers={name: array})``)."""
        self.prepare()
        writer = GraphWriter()
        storages: dict[int, int] = {}
        storage_list: list[dict[str, Any]] = []
        for buf in self.buffers:
            if id(buf.base) not in storages:
                storages[id(buf.base)] = len(storage_list)
                storage_list.append({"dtype": buf.base.dtype.name, "size": buf.base.size,
                                     "device": _stored_device(buf.base.device_object, self.device)})
        read, written = self._buffer_modes()
        names = {index: name for name, index in self.buffer_names.items()}
        buffers = [{"storage": storages[id(buf.base)], "view": buf.is_view, "offset": buf.offset, "size": buf.size,
                    "dtype": buf.dtype.name, "name": names.get(i), "read": i in read, "written": i in written}
                   for i, buf in enumerate(self.buffers)]
        steps: list[dict[str, Any]] = []
        for request in self._requests:
            if isinstance(request, _KernelRequest):
                steps.append({"kind": "kernel", "ast": writer.add(request.ast), "buffers": list(request.buffer_indices),
                              "fixed": dict(sorted(request.fixedvars.items()))})
            elif isinstance(request, _CopyRequest):
                steps.append({"kind": "copy", "dst": request.dst, "src": request.src})
            else:
                steps.append({"kind": "loop", "var": request.var, "start": writer.add(request.start),
                              "stop": writer.add(request.stop), "step": writer.add(request.step),
                              "body": list(request.body)})
        kernels = {}
        for prepared in self.prepared_kernels:
            if prepared.ast not in kernels:
                kernels[prepared.ast] = {"ast": writer.add(prepared.ast), "key": prepared.ast.key,
                                         "name": prepared.kernel.name,
                                         "stages": [writer.add(stage) for stage in prepared.kernel.programs]}
        device = self.device
        manifest = {"svod": VERSION, "device": device.name, "renderer": device.renderer.cache_key,
                    "compiler": device.compiler.cache_key,
                    "target": {"cpu": str(getattr(device.compiler, "cpu", "")),
                               "features": str(getattr(device.compiler, "features", ""))},
                    "storages": storage_list, "buffers": buffers, "steps": steps, "top": list(self._top),
                    "kernels": list(kernels.values())}
        write_bundle(path, manifest, writer)

    def written_names(self) -> list[str]:
        """The names of the named buffers some step writes (a plan's outputs), in buffer order."""
        self.prepare()
        written = self._buffer_modes()[1]
        return [name for name, index in sorted(self.buffer_names.items(), key=lambda item: item[1])
                if index in written]

    def _buffer_modes(self) -> tuple[set[int], set[int]]:
        """The plan buffers some step reads, and those some step writes."""
        read: set[int] = set()
        written: set[int] = set()
        for prepared in self.prepared_kernels:
            for index, argument in zip(prepared.buffer_indices, prepared.kernel.layout, strict=True):
                if argument.read:
                    read.add(index)
                if argument.written:
                    written.add(index)
        for request in self._requests:
            if isinstance(request, _CopyRequest):
                read.add(request.src)
                written.add(request.dst)
        return read, written

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


# ---- loading bundles ----------------------------------------------------------------------------------------

def load_plan(path: str | os.PathLike[str], device: str | Device | None = None,
              cache: KernelCache | None = None) -> ExecutionPlan:
    """The plan saved at ``path`` (``ExecutionPlan.save``), prepared on ``device`` (by default the one it was
    built for), its buffers zeroed. Where the bundle's compiled code fits (the same device kind, renderer
    and compiler cache keys, which name the CPU, and the same svod) its kernels are loaded without
    compiling; otherwise they are compiled again from the ASTs the bundle stores, with one
    ``BundleWarning`` saying why. A file that is not a bundle, or a damaged one, is a ``BundleError``
    naming the file."""
    bundle = read_bundle(path)
    manifest, graph, source = bundle.manifest, bundle.graph, bundle.path
    for field_name, kind in (("storages", list), ("buffers", list), ("steps", list), ("top", list),
                             ("kernels", list), ("device", str), ("renderer", str), ("compiler", str), ("svod", str)):
        require(isinstance(manifest.get(field_name), kind), source, f"its manifest has no valid {field_name!r}")
    plan = ExecutionPlan(manifest["device"] if device is None else device, cache)
    storages = [_load_storage(entry, position, plan.device, source) for position, entry in
                enumerate(manifest["storages"])]
    for position, entry in enumerate(manifest["buffers"]):
        plan.add_buffer(_load_buffer(entry, position, storages, source), entry.get("name"))
    count = len(manifest["steps"])
    requests: list[_Request] = [_load_step(entry, position, count, len(plan.buffers), graph, source)
                                for position, entry in enumerate(manifest["steps"])]
    placed = list(manifest["top"]) + [i for r in requests if isinstance(r, _LoopRequest) for i in r.body]
    require(sorted(placed) == list(range(count)), source, "its steps are not each placed once, in the plan or a loop")
    plan._requests = requests
    plan._top = list(manifest["top"])
    asts = {r.ast for r in requests if isinstance(r, _KernelRequest)}
    stored = {}
    for position, entry in enumerate(manifest["kernels"]):
        require(isinstance(entry, dict) and isinstance(entry.get("stages"), list), source, f"kernel {position} "
                "has no stages")
        ast = graph.get(entry.get("ast"), f"kernel {position}")
        require(ast.op is Ops.SINK and ast.key == entry.get("key"), source,
                f"kernel {entry.get('name')!r} does not have the key it was saved with")
        stored[ast] = [graph.get(i, f"kernel {entry.get('name')!r}") for i in entry["stages"]]
    require(asts <= set(stored), source, "a kernel step has no compiled kernel")
    target = plan.device
    reasons = [why for differs, why in (
        (manifest["svod"] != VERSION, f"svod {manifest['svod']}, this is {VERSION}"),
        (DeviceSpec.parse(manifest["device"]).base_type != target.device.base_type,
         f"device {manifest['device']}, loaded on {target.name}"),
        (manifest["compiler"] != target.compiler.cache_key,
         f"compiler {manifest['compiler']}, this device's is {target.compiler.cache_key}"),
        (manifest["renderer"] != target.renderer.cache_key,
         f"renderer {manifest['renderer']}, this device's is {target.renderer.cache_key}"),
    ) if differs]
    if reasons:
        warnings.warn(f"svod: plan bundle {source} was built for {'; '.join(reasons)}: compiling its {len(stored)} "
                      "kernel(s) again from their stored ASTs", BundleWarning, stacklevel=2)
    else:
        for ast, stages in stored.items():
            try:
                plan.cache.adopt(ast, target, stages)
            except SvodError as err:
                raise BundleError(f"plan bundle {source} holds compiled code that does not load: {err.detail}",
                                  kernel=err.kernel or kernel_label(ast), stage="load", value=str(source)) from err
    plan.prepare()
    return plan


def _stored_device(device: Device, plan_device: Device) -> str | None:
    """How a bundle names a storage's device: None for the plan's own (a loaded plan puts it on its device)."""
    return None if device is plan_device else device.name


def _load_storage(entry: Any, position: int, device: Device, source: Path) -> Buffer:
    require(isinstance(entry, dict) and is_count(entry.get("size")) and isinstance(entry.get("dtype"), str),
            source, f"storage {position} has no size and dtype")
    where = entry.get("device")
    try:
        dtype = dtypes.from_name(entry["dtype"])
        return Buffer(device if where is None else where, dtype, entry["size"]).copyin(np.zeros(entry["size"],
                                                                                               dtype.numpy))
    except SvodError as err:
        raise BundleError(f"plan bundle {source}: storage {position} cannot be made: {err.detail}", stage="load",
                          value=entry) from err


def _load_buffer(entry: Any, position: int, storages: Sequence[Buffer], source: Path) -> Buffer:
    require(isinstance(entry, dict) and is_count(entry.get("storage")) and entry["storage"] < len(storages) and
            is_count(entry.get("offset")) and is_count(entry.get("size")) and
            (entry.get("name") is None or isinstance(entry.get("name"), str)), source,
            f"buffer {position} is not a storage, offset, size and name")
    storage = storages[entry["storage"]]
    if not entry.get("view"):
        require(entry["size"] == storage.size and entry["offset"] == 0, source, f"buffer {position} does not fit its "
                "storage")
        return storage
    require(entry["offset"] + entry["size"] <= storage.size, source, f"buffer {position} does not fit its storage")
    return storage.view(entry["offset"], entry["size"])


def _load_step(entry: Any, position: int, count: int, buffers: int, graph: GraphReader, source: Path) -> _Request:
    require(isinstance(entry, dict), source, f"step {position} is not a record")
    kind = entry.get("kind")
    if kind == "kernel":
        fixed = entry.get("fixed")
        require(indices(entry.get("buffers"), buffers) and isinstance(fixed, dict) and
                all(isinstance(k, str) and isinstance(v, int) for k, v in fixed.items()), source,
                f"kernel step {position} has no valid buffers and fixed variables")
        return _KernelRequest(graph.get(entry.get("ast"), f"step {position}"), tuple(entry["buffers"]), dict(fixed))
    if kind == "copy":
        require(indices([entry.get("dst"), entry.get("src")], buffers), source, f"copy step {position} names no "
                "buffers of the plan")
        return _CopyRequest(entry["dst"], entry["src"])
    require(kind == "loop" and isinstance(entry.get("var"), str) and entry["var"].isidentifier() and
            indices(entry.get("body"), count), source, f"step {position} is not a kernel, copy or loop")
    require(all(i < position for i in entry["body"]), source, f"loop step {position} has a body after it")
    start, stop, step = (graph.get(entry.get(k), f"loop step {position}") for k in ("start", "stop", "step"))
    return _LoopRequest(entry["var"], start, stop, step, tuple(entry["body"]))


# ---- helpers ------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a plan prepares: prepare makes several objects a step and frees
    none, and each collection it would trigger walks everything made so far (a quarter of the time of a
    plan of 4,000 steps)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


def _variable_name(var: str | UOp) -> str:
    if isinstance(var, UOp) and var.op is Ops.DEFINE_VAR:
        return str(var.arg[0])
    if isinstance(var, str) and var.isidentifier():
        return var
    raise SvodError("a loop's variable is a name or a kernel variable (k.var)", stage="plan", value=var)


def _bound_expression(bound: Bound, what: str) -> UOp:
    """A loop bound as an integer expression: an int, a variable's name, or an expression of variables."""
    if isinstance(bound, (int, np.integer)) and not isinstance(bound, (bool, np.bool_)):
        if not INT64_MIN <= int(bound) <= INT64_MAX:
            raise SvodError(f"a loop's {what} must fit 64-bit signed", stage="plan", value=bound)
        return UOp.index_const(int(bound))
    if isinstance(bound, str) and bound.isidentifier():
        return UOp.define_var(bound, INT64_MIN, INT64_MAX)
    if isinstance(bound, UOp) and (bound.dtype.is_int or bound.dtype == dtypes.index):
        return bound
    raise SvodError(f"a loop's {what} is an int, a variable's name or an integer expression of variables",
                    stage="plan", value=bound)


def _value(expr: UOp, values: Mapping[str, int]) -> int:
    if expr.op is Ops.CONST:
        return int(expr.arg)
    if expr.op is Ops.DEFINE_VAR:
        return values[expr.arg[0]]
    return evaluate(expr, values)


def _interval(expr: UOp, known: Mapping[str, Bounds | None]) -> Bounds:
    if expr.op is Ops.CONST:
        return (int(expr.arg), int(expr.arg))
    bounds: dict[UOp, Bounds] = {}
    for node in expr.toposort():
        if node.op is Ops.DEFINE_VAR:
            found = known.get(node.arg[0])
            bounds[node] = (node.arg[1], node.arg[2]) if found is None else found
        else:
            bounds[node] = compute_bounds(node, bounds.__getitem__)
    return bounds[expr]


def _loop_values(loop: LoopStep, known: Mapping[str, Bounds | None]) -> Bounds | None:
    """The interval of the values a loop's variable may take, or None if it never runs."""
    start, stop, step = (_interval(e, known) for e in (loop.start, loop.stop, loop.step))
    if step[0] <= 0 <= step[1]:
        raise VariableError(f"the step of the loop over {loop.var} may be {0 if step[0] == step[1] else step}; "
                            "it must stay positive or negative", stage="execute", value=step)
    if step[0] > 0:
        lo, hi = start[0], stop[1] - 1
        if start[0] == start[1] and step[0] == step[1] and hi >= lo:  # the last value a fixed stride reaches
            hi = lo + (hi - lo) // step[0] * step[0]
    else:
        lo, hi = stop[0] + 1, start[1]
        if start[0] == start[1] and step[0] == step[1] and hi >= lo:
            lo = hi - (hi - lo) // -step[0] * -step[0]
    if lo > hi:
        return None
    return (int(lo), int(hi))


def _schedule(steps: Sequence[Step]) -> list[list[Step]]:
    """Dependencies on the latest conflicting steps (byte ranges, in time linear in the steps), then
    levels: one more than the highest level waited for."""
    ranges = ByteRanges()
    level_of: dict[int, int] = {}
    levels: dict[int, list[Step]] = {}
    for step in steps:
        step.dependencies = ranges.add(step.id, step.accesses)
        step.level = level_of[step.id] = 1 + max((level_of[d] for d in step.dependencies), default=-1)
        levels.setdefault(step.level, []).append(step)
    return [levels[k] for k in sorted(levels)]


def _merged(accesses: Any) -> tuple[Access, ...]:
    """The accesses of a loop's body, each distinct one once."""
    return tuple(dict.fromkeys(accesses))


def _flatten(steps: Sequence[Step]) -> list[Step]:
    """Every step, a loop before the steps of its body."""
    found: list[Step] = []
    for step in steps:
        found.append(step)
        if isinstance(step, LoopStep):
            found += _flatten(step.body)
    return found


def _host_array(obj: Any, key: int | str, user: str | None) -> np.ndarray:
    """The host array ``obj`` is: a numpy array, a Buffer in host memory, or any DLPack producer on the host."""
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, Buffer):
        if not obj.device_object.caps.host_memory:
            raise BufferMismatchError(f"the buffer bound to plan buffer {key} is on {obj.device}, not in host "
                                      "memory", kernel=user, stage="execute", value=obj.device)
        return obj.host_view()
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as err:
            raise BufferMismatchError(f"the array bound to plan buffer {key} cannot be read through DLPack on the "
                                      f"host: {err}", kernel=user, stage="execute", value=type(obj).__name__) from err
    raise BufferMismatchError(f"plan buffer {key} can be bound to a numpy array, a DLPack producer or a host "
                              "Buffer", kernel=user, stage="execute", value=type(obj).__name__)


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
    check = launch.check if isinstance(launch, StagedLaunch) and launch.checks else None
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


def _replayed(kernel: CachedKernel, launch: Any, fixed: Mapping[str, int],
              run: Callable[[Values], None]) -> ReplayKernel:
    """A kernel bound to its buffers as a native replay runs it: each program launch it makes (one, or a
    staged kernel's stages, each with its own launch size), or else ``run``."""
    if isinstance(launch, StagedLaunch):
        calls = tuple(KernelCall(sub, stage.var_names, stage.launch) for stage, sub in launch.launches)
    else:
        calls = (KernelCall(launch, kernel.var_names, kernel.launch),)
    return ReplayKernel(calls, fixed, run, kernel.name)


def _launch_sites(launch: Any, buffers: Sequence[Buffer]) -> dict[int, list[Site]] | None:
    """Where a bound launch keeps each buffer's address: its argument array in host memory
    (``HostArguments``), or those of a staged kernel's stages; None for launches whose arguments are a
    device's own."""
    sites: dict[int, list[Site]] = {}
    if isinstance(launch, HostArguments):
        addresses = launch.buffer_addresses
        for position, buf in enumerate(buffers):
            sites.setdefault(id(buf.base), []).append((addresses, position, buf.byte_offset))
        return sites
    if isinstance(launch, StagedLaunch):
        user = {slot: position for position, slot in enumerate(launch.program.user_slots)}
        for stage, stage_launch in launch.launches:
            if not isinstance(stage_launch, HostArguments):
                return None
            addresses = stage_launch.buffer_addresses
            for index, slot in enumerate(stage.slots):
                if slot in user:
                    buf = buffers[user[slot]]
                    sites.setdefault(id(buf.base), []).append((addresses, index, buf.byte_offset))
        return sites
    return None
