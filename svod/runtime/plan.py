"""``ExecutionPlan``: kernels and copies prepared once and replayed many times.

::

    plan.add_buffer / add_kernel / add_copy      (record)
    plan.prepare()       compile the distinct kernels together, check every buffer, derive dependencies
                         from byte ranges, bind programs to buffers, fix launch sizes and the schedule
    plan.execute(n=...)  check every variable, then run the schedule; nothing runs if a check fails

Dependencies come from the bytes each step touches on each storage (a view conflicts with its base where
they overlap): read-after-write, write-after-read and write-after-write order two steps, reads never do.
Steps are grouped into levels by their longest dependency chain; the steps of one level are independent,
and when several are host-parallel-safe and large enough to pay for it they run on host threads at once.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from svod.backends.registry import default_registry
from svod.device import CORE_ID, Buffer, Device, Variable
from svod.device.spec import ProgramSpec
from svod.errors import BufferMismatchError, SvodError, VariableError
from svod.ir import UOp
from svod.runtime.cache import KernelCache, default_cache
from svod.runtime.kernel import CachedKernel
from svod.runtime.profiler import StepProfile, estimate_cost, write_chrome_trace
from svod.runtime.staged import StagedLaunch

PARALLEL_MIN_COST = 1 << 20
"""Steps estimated below this many bytes plus FLOPs run one after another: waking a host thread costs
tens of microseconds, more than such a step takes."""


@dataclass(frozen=True, slots=True)
class Access:
    """``[start, end)`` bytes of the storage ``storage`` (the id of a base buffer), read or written."""

    storage: int
    start: int
    end: int
    write: bool

    def conflicts(self, other: Access) -> bool:
        return (self.storage == other.storage and (self.write or other.write)
                and self.start < other.end and other.start < self.end)


@dataclass(eq=False, kw_only=True)
class Step:
    """One step of a plan (a kernel or a copy), with everything decided at prepare time."""

    id: int
    name: str
    kind: str
    accesses: tuple[Access, ...]
    """The byte ranges the step reads and writes: its dependencies are derived from them."""
    run: Callable[[Mapping[str, int]], None]
    parallel_safe: bool
    """Whether it may run on a host thread beside other steps."""
    work: int
    """Estimated flops plus bytes moved at the largest variable values (small steps never overlap)."""
    cost_of: Callable[[Mapping[str, int]], tuple[int, int]]
    """(flops, bytes) for one run's variable values, for the profile."""
    dependencies: tuple[int, ...] = ()
    """Ids of the steps that must finish first."""
    level: int = 0
    check: Callable[[], None] | None = None
    """Raises ``IndexOutOfBoundsError`` if the step's last run recorded an access outside a buffer."""


@dataclass(eq=False, kw_only=True)
class PreparedKernel(Step):
    """One dispatch of a plan."""

    ast: UOp
    kernel: CachedKernel
    device: Device
    buffer_indices: tuple[int, ...]
    output_indices: tuple[int, ...]
    vals: list[int]
    """Variable values in ``kernel.var_names`` order, as of the last run (fixed ones never change)."""
    fixedvars: dict[str, int]
    buffer_ids: tuple[int, ...]
    """The storage each argument lives in (views of one base share it)."""
    runtime_vars: tuple[Variable, ...]
    """The variables each run must supply, with the bounds they are checked against."""


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


class ExecutionPlan:
    """A sequence of kernels and copies over a set of buffers, prepared once and executed many times."""

    def __init__(self, device: str | Device = "CPU", cache: KernelCache | None = None) -> None:
        self.device = default_registry().get(device)
        self.cache = default_cache() if cache is None else cache
        self.buffers: list[Buffer] = []
        self.prepared_kernels: list[PreparedKernel] = []
        self._requests: list[_KernelRequest | _CopyRequest] = []
        self._steps: list[Step] = []
        self._levels: list[list[Step]] = []
        self._runtime_bounds: dict[str, list[tuple[Variable, str]]] = {}
        self._fixed_names: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._checked_steps: list[Step] = []
        self._executing = threading.Lock()
        self._preparing = threading.Lock()
        self._last_profile: list[StepProfile] = []
        self._prepared = False

    # ---- building ----------------------------------------------------------------------------------------

    def add_buffer(self, buf: Buffer) -> int:
        self._check_open()
        if not isinstance(buf, Buffer):
            raise BufferMismatchError("add_buffer() takes a svod.Buffer", stage="plan", value=type(buf).__name__)
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
        self._requests.append(_KernelRequest(ast, tuple(buffer_indices), dict(fixedvars or {})))
        return len(self._requests) - 1

    def add_copy(self, dst_index: int, src_index: int) -> int:
        """Add a copy of a whole buffer into another of the same dtype and size."""
        self._check_open()
        self._check_indices((dst_index, src_index))
        dst, src = self.buffers[dst_index], self.buffers[src_index]
        if dst.dtype != src.dtype or dst.size != src.size:
            raise BufferMismatchError(f"copy of {src.size} x {src.dtype.name} into {dst.size} x {dst.dtype.name}",
                                      stage="plan", value=(dst_index, src_index))
        self._requests.append(_CopyRequest(dst_index, src_index))
        return len(self._requests) - 1

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
                self._prepare()

    def _prepare(self) -> None:
        kernels = self._compile_all()
        for op_id, request in enumerate(self._requests):
            if isinstance(request, _KernelRequest):
                self._steps.append(self._prepare_kernel(op_id, request, kernels[request.ast]))
            else:
                self._steps.append(self._prepare_copy(op_id, request))
        self._schedule()
        self._checked_steps = [step for step in self._steps if step.check is not None]
        self._prepared = True

    def _compile_all(self) -> dict[UOp, CachedKernel]:
        """Every distinct kernel, compiled together: the compiler overlaps or batches the work."""
        distinct = list(dict.fromkeys(r.ast for r in self._requests if isinstance(r, _KernelRequest)))
        return dict(zip(distinct, self.cache.get_many(distinct, self.device), strict=True))

    def _prepare_kernel(self, op_id: int, request: _KernelRequest, kernel: CachedKernel) -> Step:
        buffers = [self.buffers[i] for i in request.buffer_indices]
        fixed = self._check_fixed(kernel, request)
        runtime = tuple(v for v in kernel.variables if v.name not in fixed)
        largest = {**{v.name: v.max for v in runtime}, **fixed, **kernel.fixed}
        kernel.check_buffers(buffers, largest)
        for var in runtime:
            self._runtime_bounds.setdefault(var.name, []).append((var, kernel.name))
        self._fixed_names.update(fixed)
        accesses = tuple(self._kernel_accesses(kernel, buffers))
        outputs = tuple(request.buffer_indices[pos] for pos in kernel.written_positions)
        vals = kernel.vals(largest)
        run, check = _kernel_launcher(kernel, buffers, vals, fixed)

        def cost_of(values: Mapping[str, int]) -> tuple[int, int]:
            return estimate_cost(request.ast, {**values, **fixed, **kernel.fixed})

        prepared = PreparedKernel(
            id=op_id, name=kernel.name, kind="kernel", accesses=accesses, run=run,
            parallel_safe=kernel.host_parallel_safe, work=sum(estimate_cost(request.ast, largest)), cost_of=cost_of,
            check=check, ast=request.ast, kernel=kernel, device=self.device, buffer_indices=request.buffer_indices,
            output_indices=outputs, vals=vals, fixedvars=fixed, buffer_ids=tuple(id(b.base) for b in buffers),
            runtime_vars=runtime)
        self.prepared_kernels.append(prepared)
        return prepared

    def _check_fixed(self, kernel: CachedKernel, request: _KernelRequest) -> dict[str, int]:
        known = {v.name: v for v in kernel.variables}
        fixed = {}
        for name, value in request.fixedvars.items():
            if name not in known:
                raise VariableError(f"fixed variable {name} is not a variable of this kernel", kernel=kernel.name,
                                    stage="plan", value=name)
            fixed[name] = known[name].checked(value, kernel=kernel.name, stage="plan")
        return fixed

    @staticmethod
    def _kernel_accesses(kernel: CachedKernel, buffers: Sequence[Buffer]) -> list[Access]:
        accesses = []
        for buf, argument in zip(buffers, kernel.layout, strict=True):
            start, end = buf.byte_offset, buf.byte_offset + buf.nbytes
            if argument.read or not argument.written:  # an argument the kernel does not touch orders as a read
                accesses.append(Access(id(buf.base), start, end, write=False))
            if argument.written:
                accesses.append(Access(id(buf.base), start, end, write=True))
        return accesses

    def _prepare_copy(self, op_id: int, request: _CopyRequest) -> Step:
        dst, src = self.buffers[request.dst], self.buffers[request.src]
        accesses = (Access(id(src.base), src.byte_offset, src.byte_offset + src.nbytes, write=False),
                    Access(id(dst.base), dst.byte_offset, dst.byte_offset + dst.nbytes, write=True))
        run = _copier(dst, src)
        moved = 2 * dst.nbytes

        def cost_of(values: Mapping[str, int]) -> tuple[int, int]:
            return (0, moved)

        return Step(id=op_id, name=f"copy {request.src} -> {request.dst}", kind="copy", accesses=accesses, run=run,
                    parallel_safe=dst.device_object.caps.host_memory and src.device_object.caps.host_memory,
                    work=moved, cost_of=cost_of)

    def _schedule(self) -> None:
        """Dependencies on every earlier conflicting step (a step's id is its position), then levels."""
        for position, step in enumerate(self._steps):
            step.dependencies = tuple(e.id for e in self._steps[:position]
                                      if any(a.conflicts(b) for a in step.accesses for b in e.accesses))
            step.level = 1 + max((self._steps[d].level for d in step.dependencies), default=-1)
        levels: dict[int, list[Step]] = {}
        for step in self._steps:
            levels.setdefault(step.level, []).append(step)
        self._levels = [levels[k] for k in sorted(levels)]

    # ---- execute -----------------------------------------------------------------------------------------

    def execute(self, *, profile: bool = False, **var_vals: int) -> list[StepProfile] | None:
        return self.execute_with_vars(var_vals, profile=profile)

    def execute_with_vars(self, var_vals: Mapping[str, int], *, profile: bool = False) -> list[StepProfile] | None:
        """Check every variable, then run every step; with ``profile`` return per-step timings.

        A plan may be executed from several threads: executions take turns (the steps' argument arrays
        and buffers are the plan's own, so two at once would mix their variables and their data).
        """
        self.prepare()
        values = self._check_vars(var_vals)
        with self._executing:
            if profile:
                return self._run_profiled(values)
            for level in self._levels:
                if len(level) == 1 or not self._parallel(level):
                    for step in level:
                        step.run(values)
                else:
                    self._run_parallel(level, values, lambda step, vals: step.run(vals))
            self.device.synchronize()
            self._check_steps()
        return None

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

    def _parallel(self, level: list[Step]) -> bool:
        return sum(1 for s in level if s.parallel_safe and s.work >= PARALLEL_MIN_COST) >= 2 and \
            all(s.parallel_safe for s in level)

    def _run_parallel(self, level: list[Step], values: Mapping[str, int],
                      body: Callable[[Step, Mapping[str, int]], object]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="svod-plan")
        futures = [self._pool.submit(body, step, values) for step in level[1:]]
        body(level[0], values)
        for future in futures:
            future.result()

    def _run_profiled(self, values: Mapping[str, int]) -> list[StepProfile]:
        origin = time.perf_counter()
        records: list[StepProfile] = []
        lock = threading.Lock()

        def timed(step: Step, vals: Mapping[str, int]) -> None:
            start = time.perf_counter()
            step.run(vals)
            self.device.synchronize()
            end = time.perf_counter()
            flops, nbytes = step.cost_of(vals)
            with lock:
                records.append(StepProfile(step.id, step.name, step.kind, start - origin, end - start, nbytes,
                                           flops, threading.get_ident() % 100_000))

        for level in self._levels:
            if len(level) > 1 and self._parallel(level):
                self._run_parallel(level, values, timed)
            else:
                for step in level:
                    timed(step, values)
        self._last_profile = sorted(records, key=lambda r: r.start)
        self._check_steps()
        return self._last_profile

    def export_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the last profiled run as Chrome trace events (open it in Perfetto)."""
        write_chrome_trace(path, self._last_profile)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _copier(dst: Buffer, src: Buffer) -> Callable[[Mapping[str, int]], None]:
    """A whole-buffer copy: one memmove between host buffers, a round trip through the host otherwise."""
    if dst.device_object.caps.host_memory and src.device_object.caps.host_memory:
        dst_address, src_address, nbytes = dst.address, src.address, dst.nbytes

        def host_copy(values: Mapping[str, int]) -> None:
            ctypes.memmove(dst_address, src_address, nbytes)

        return host_copy

    def staged_copy(values: Mapping[str, int]) -> None:
        dst.copyin(src.numpy())

    return staged_copy


def _kernel_launcher(kernel: CachedKernel, buffers: Sequence[Buffer], vals: list[int],
                     fixed: Mapping[str, int]) -> tuple[Callable[[Mapping[str, int]], None], Callable[[], None] | None]:
    """The per-run work of one kernel, with everything that does not depend on the run decided now:
    the program is bound to its buffers, and static launch sizes are evaluated once. Second, the check to
    run once the device has finished, for a kernel whose accesses are bounds-checked."""
    launch = kernel.program.bind([b.address for b in buffers])
    check = launch.check if isinstance(launch, StagedLaunch) and launch.checks else None
    fixed = {**fixed, **kernel.fixed}
    slots = [(i, name) for i, name in enumerate(kernel.var_names) if name not in fixed and name != CORE_ID]
    static = kernel.static_dims
    if static is not None:
        global_size, local_size = static.global_size, static.local_size

        def run_static(values: Mapping[str, int]) -> None:
            for i, name in slots:
                vals[i] = values[name]
            launch(vals, global_size, local_size)

        return run_static, check

    def run(values: Mapping[str, int]) -> None:
        for i, name in slots:
            vals[i] = values[name]
        dims = ProgramSpec.resolve_launch_dims(kernel.global_size, kernel.local_size, {**values, **fixed})
        launch(vals, dims.global_size, dims.local_size)

    return run, check
