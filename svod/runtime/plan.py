"""``ExecutionPlan``: kernels, copies and loops over them, prepared once and replayed many times.

::

    plan.add_buffer / add_kernel / add_copy      (record)
    plan.loop(var, start, stop, [step,] body)    (the last steps added, or a sub-plan, repeated with var;
                                                  until=buffer ends it after a turn that sets that buffer)
    plan.branch(condition, then, otherwise)      (the last steps added, run as a buffer a kernel wrote says)
    plan.while_loop(condition, body)             (the last steps added, repeated while a buffer says so)
    plan.prepare()       compile the distinct kernels together, check every buffer, derive dependencies
                         from byte ranges, bind programs to buffers, fix launch sizes and the schedule
    plan.execute(n=..., buffers={slot: array})
                         check every variable, loop and rebound array, then run the schedule; nothing
                         runs if a check fails
    plan.binder([(slot, position), ...]); plan.execute_bound(binder, arguments, {var: value})
                         runs on arrays of fixed dtypes and sizes: check only what such an array may
                         change from run to run (``svod.runtime.binding.Binder``)

Dependencies come from the bytes each step touches on each storage (a view conflicts with its base where
they overlap): read-after-write, write-after-read and write-after-write order two steps, reads never do.
Steps are grouped into levels by their longest dependency chain; the steps of one level are independent,
and when several are host-parallel-safe and large enough to pay for it they run on host threads at once (a
kernel spread over the CPU's thread team is not: it already has every core, and runs after them).
A loop is one step of the level structure around it; its body has levels of its own, computed for one
turn, and turns run one after another (everything of a turn finishes before the next begins).

Where the device's runtime replays plans natively (``svod.device.PlanReplayer``; the CPU's does), a
prepared plan's steps, loops and launch sizes are handed to it once, described without naming a device,
and a replay costs one call from Python (on the CPU, a compiled dispatcher then takes a few nanoseconds a
step). A branch, a ``while`` loop and a loop's ``until`` whose buffer is in host memory are tested there too,
with no Python per decision. A profiled run, and plans on other devices, dispatch from Python, level by level.

A loop's variable takes the values ``range(start, stop, step)``; start, stop and step are integers,
names of variables (passed to ``execute``, or bound by an enclosing loop) or integer expressions of them.
Before anything runs, every value a loop variable may take is checked against the bounds of each kernel
that uses it: the values are bounded by intervals (the enclosing loops' ranges, the run's variables), so a
triangular nest is checked over its whole triangle.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Protocol

import numpy as np

from svod.device import Buffer, Device, PlanReplay, PlanReplayer, ReplayHost, ReplayItem, Variable, resolver
from svod.device.launch import INT64_MAX, INT64_MIN
from svod.dtype import dtypes
from svod.errors import BufferMismatchError, IndexOutOfBoundsError, RequirementError, SvodError, VariableError
from svod.ir import Ops, UOp, rename_variables
from svod.ir.bounds import Bounds, compute_bounds
from svod.runtime import generated
from svod.runtime.binding import ArrayBinding, Binder
from svod.runtime.bundle import read_plan, save_plan
from svod.runtime.cache import KernelCache, default_cache
from svod.runtime.failures import FailureFlag, failure
from svod.runtime.kernel import CachedKernel
from svod.runtime.parts import PartsLaunch
from svod.runtime.profiler import StepProfile, write_chrome_trace
from svod.runtime.schedule import schedule
from svod.runtime.steps import (
    BranchRequest,
    CopyRequest,
    KernelRequest,
    LoopRequest,
    LoopStep,
    PreparedKernel,
    Preparing,
    Request,
    Step,
    Values,
    WhileRequest,
    reached_steps,
)
from svod.runtime.taping import refuse_on_tape

PARALLEL_MIN_COST = 1 << 20
"""Steps estimated below this many bytes plus FLOPs run one after another: waking a host thread costs
tens of microseconds, more than such a step takes."""


def _overlapped(level: Sequence[Step]) -> tuple[Sequence[Step], Sequence[Step]]:
    """A level's steps (independent of each other) as those run on host threads at once, where two or more
    of them that may are large enough to pay for it (``PARALLEL_MIN_COST``), and those run one after another
    (after them). A run without native replay asks this of every level it runs: one step is answered at once."""
    if len(level) < 2 or sum(1 for s in level if s.parallel_safe and s.work >= PARALLEL_MIN_COST) < 2:
        return [], level
    return [s for s in level if s.parallel_safe], [s for s in level if not s.parallel_safe]


class PlanKernel(Protocol):
    """A kernel made for the plan's buffers when it is added (``@svod.kernel``): its AST over ``buffers``
    and the values of its size variables."""

    def plan_kernel(self, buffers: Sequence[Buffer],
                    scalars: Mapping[str, Scalar | str] | None = None) -> tuple[UOp, dict[str, Scalar]]: ...


Bound = int | str | UOp
Scalar = int | float


class ExecutionPlan:
    """A sequence of kernels, copies and loops over a set of buffers, prepared once and executed many
    times."""

    def __init__(self, device: str | Device = "CPU", cache: KernelCache | None = None) -> None:
        self.device = resolver.resolve(device)
        self.cache = default_cache() if cache is None else cache
        self.buffers: list[Buffer] = []
        self.buffer_names: dict[str, int] = {}
        self.buffer_shapes: dict[int, tuple[int, ...]] = {}
        """The shape each buffer given one has (``add_buffer(..., shape=)``)."""
        self.prepared_kernels: list[PreparedKernel] = []
        self._requests: list[Request] = []
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
        self._arrays = ArrayBinding(self.buffers, self.buffer_names, ())
        """Where the prepared steps keep each storage's address, for arrays bound per run."""
        self._executing = threading.RLock()
        self._preparing = threading.Lock()
        self._last_profile: list[StepProfile] = []
        self._prepared = False
        self._native: PlanReplay | None = None
        """The plan as its device replays it natively; None where steps dispatch from Python."""
        self._parts_checks: list[PartsLaunch] = []
        self.failure_flags: list[FailureFlag] = []
        """The buffers a run's steps set where the data makes it fail (``add_failure_flag``)."""
        self._bound_runs: dict[tuple[Binder, bool], Callable[[list[int], Mapping[str, int]], None]] = {}
        """``execute_bound``'s runs, generated once per binder (``bound_run``)."""

    # ---- building ----------------------------------------------------------------------------------------

    def add_buffer(self, buf: Buffer, name: str | None = None, shape: Sequence[int] | None = None) -> int:
        """Add a buffer; its index (and ``name``, if given) refers to it in kernels and in ``execute(buffers=...)``.
        ``shape`` is how its users see it (a bundle keeps it; ``map_plan`` returns its arrays so shaped)."""
        self._check_open()
        if not isinstance(buf, Buffer):
            raise BufferMismatchError("add_buffer() takes a svod.Buffer", stage="plan", value=type(buf).__name__)
        if shape is not None:
            shape = tuple(shape)
            if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape) or int(np.prod(shape)) != buf.size:
                raise BufferMismatchError(f"a buffer of {buf.size} elements cannot have shape {shape}", stage="plan",
                                          value=shape)
            self.buffer_shapes[len(self.buffers)] = tuple(int(d) for d in shape)
        if name is not None:
            if not isinstance(name, str) or not name:
                raise BufferMismatchError("a buffer's name is a non-empty string", stage="plan", value=name)
            if name in self.buffer_names:
                raise BufferMismatchError(f"the plan already has a buffer named {name}", stage="plan", value=name)
            self.buffer_names[name] = len(self.buffers)
        self.buffers.append(buf)
        return len(self.buffers) - 1

    def add_kernel(self, ast: UOp | PlanKernel, buffer_indices: Sequence[int],
                   fixedvars: Mapping[str, Scalar] | None = None, **scalars: Scalar | str) -> int:
        """Add a kernel over plan buffers (in kernel argument order); ``fixedvars`` are bound for good. A Python
        kernel (``@svod.kernel``) is built for those buffers, its size variables fixed at their sizes; its
        scalar arguments are given by name: a number is fixed, a name makes the argument that variable of
        the plan (a loop's variable, or one each run passes): ``add_kernel(step, [u], t="t", alpha=0.5)``.
        For a kernel AST, ``scalars`` fix or rename its variables the same way."""
        self._check_open()
        self._check_indices(buffer_indices)
        names = {name: value for name, value in scalars.items() if isinstance(value, str)}
        numbers = {name: value for name, value in scalars.items() if not isinstance(value, str)}
        if not isinstance(ast, UOp):
            ast, sizes = ast.plan_kernel([self.buffers[i] for i in buffer_indices], scalars)
            fixedvars = {**sizes, **(fixedvars or {})}
        else:
            fixedvars = {**numbers, **(fixedvars or {})}
        ast = rename_variables(ast, names)
        return self._append(KernelRequest(ast, tuple(buffer_indices), dict(fixedvars or {})))

    def add_failure_flag(self, buffer: int, kernel: str, message: str) -> None:
        """Read plan buffer ``buffer`` (int32, one element, which steps set nonzero where the run fails) after
        every run, and raise ``LinAlgError`` of ``message`` (``{value}``: what it held) where it is set
        (``svod.runtime.failures``); saved with the plan. Zeroed now, and after each run that set it."""
        self._check_open()
        self._check_indices([buffer])
        self.buffers[buffer].copyin(np.zeros(1, np.int32))
        self.failure_flags.append(FailureFlag(buffer, kernel, message))

    def add_copy(self, dst_index: int, src_index: int) -> int:
        """Add a copy of a whole buffer into another of the same dtype and size."""
        self._check_open()
        self._check_indices((dst_index, src_index))
        dst, src = self.buffers[dst_index], self.buffers[src_index]
        if dst.dtype != src.dtype or dst.size != src.size:
            raise BufferMismatchError(f"copy of {src.size} x {src.dtype.name} into {dst.size} x {dst.dtype.name}",
                                      stage="plan", value=(dst_index, src_index))
        return self._append(CopyRequest(dst_index, src_index))

    def loop(self, var: str | UOp, start: Bound, stop: Bound, *step_and_body: Any, step: Bound | None = None,
             body: Sequence[int] | ExecutionPlan | None = None, until: int | None = None) -> int:
        """Repeat ``body`` with ``var`` bound to each value of ``range(start, stop, step)`` (step 1 unless
        given); returns the loop's id. ``body`` is the ids of the steps added last (they move into the loop,
        in the order they were added) or a plan that was built but not prepared, whose buffers are this
        plan's (found by identity; any new one is added). ``var`` is a name or a kernel's variable
        (``k.var``); kernels in the body read it like any variable, in their code and their launch sizes.
        start, stop and step are integers, names of variables or integer expressions of them. ``until`` is a
        plan buffer whose first element, read after each turn, ends the loop when it is non-zero (a
        ``break``: the body's kernels set it)."""
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
        if until is not None:
            self._check_indices((until,))
        ids = self._adopt(body) if isinstance(body, ExecutionPlan) else \
            self._take_trailing(body, f"the body of the loop over {name}")
        return self._append(LoopRequest(name, bounds[0], bounds[1], bounds[2], ids, until))

    def branch(self, condition: int, then: Sequence[int], otherwise: Sequence[int] = ()) -> int:
        """Run the steps ``then`` when the first element of plan buffer ``condition`` is non-zero as the
        branch is reached, else the steps ``otherwise``; returns the branch's id. The two bodies are the
        steps added last, ``then``'s before ``otherwise``'s (they move into the branch)."""
        self._check_open()
        self._check_indices((condition,))
        then, otherwise = list(then), list(otherwise)
        if then and otherwise and max(then) > min(otherwise):
            raise SvodError("a branch's then steps come before its otherwise steps", stage="plan",
                            value=(then, otherwise))
        self._take_trailing([*then, *otherwise], "the branch's bodies")
        return self._append(BranchRequest(condition, tuple(sorted(then)), tuple(sorted(otherwise))))

    def while_loop(self, condition: int, body: Sequence[int]) -> int:
        """Repeat the steps ``body`` (the steps added last) as long as the first element of plan buffer
        ``condition``, read before each turn, is non-zero: the body's kernels compute it again. Returns the
        loop's id."""
        self._check_open()
        self._check_indices((condition,))
        return self._append(WhileRequest(condition, self._take_trailing(body, "the while loop's body")))

    def _append(self, request: Request) -> int:
        self._requests.append(request)
        self._top.append(len(self._requests) - 1)
        return len(self._requests) - 1

    def _take_trailing(self, body: Sequence[int], what: str) -> tuple[int, ...]:
        ids = list(body)
        if not all(isinstance(i, int) for i in ids) or sorted(ids) != self._top[len(self._top) - len(ids):]:
            raise SvodError(f"{what} must be the steps added last, outside any loop "
                            f"(the last are {self._top[-len(ids):] if ids else []})", stage="plan", value=ids)
        del self._top[len(self._top) - len(ids):]
        return tuple(sorted(ids))

    def _adopt(self, sub: ExecutionPlan) -> tuple[int, ...]:
        """Copy a sub-plan's steps into this plan: its buffers found here by identity or added; its steps
        outside loops become the body; its failure flags are this plan's."""
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
                mine[id(buf)] = self.add_buffer(buf, name if name not in self.buffer_names else None,
                                                sub.buffer_shapes.get(position))
            index.append(mine[id(buf)])
        first = len(self._requests)
        self._requests += [request.remapped(index, first) for request in sub._requests]
        self.failure_flags += [FailureFlag(index[flag.buffer], flag.kernel, flag.message) for flag in sub.failure_flags]
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
        preparing = Preparing(self.buffers, self._requests, self._compile_all(), self._run_levels)
        self._steps = preparing.steps(self._top, {})
        self._levels = schedule(self._steps)
        self._loops = preparing.loops
        self._runtime_bounds = preparing.runtime_bounds
        self._fixed_names = preparing.fixed_names
        loop_vars = {loop.var: loop for loop in self._loops}
        for name in self._runtime_bounds:
            if name in loop_vars:
                raise VariableError(f"variable {name} is bound by a loop and also needed outside it, by "
                                    f"{self._runtime_bounds[name][0][1]}", stage="plan", value=name)
        self.prepared_kernels = sorted(preparing.prepared_kernels, key=lambda p: p.id)
        self._checked_steps = [p for p in self.prepared_kernels if p.check is not None]
        self._arrays = ArrayBinding(self.buffers, self.buffer_names,
                                    [inner for step in self._steps for inner in step.flattened()])
        self._native = self._build_native()
        self._parts_checks = [p.launch for p in self.prepared_kernels
                               if p.check is not None and isinstance(p.launch, PartsLaunch)]
        self._prepared = True

    def _compile_all(self) -> dict[UOp, CachedKernel]:
        """Every distinct kernel a run may reach, compiled together: the compiler overlaps or batches the work."""
        reached = reached_steps(self._requests, self._top)
        distinct = list(dict.fromkeys(ast for op_id, request in enumerate(self._requests) if op_id in reached
                                      for ast in request.kernels()))
        return dict(zip(distinct, self.cache.get_many(distinct, self.device), strict=True))

    @property
    def executing(self) -> threading.RLock:
        """The lock a run holds (re-entrant): a caller that reads a result the run left in the plan's own memory
        holds it around the run and the read, so that another thread's run of the plan cannot come between."""
        return self._executing

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables each run passes to ``execute`` (prepares the plan first)."""
        self.prepare()
        return tuple(sorted(self._runtime_bounds))

    # ---- execute -----------------------------------------------------------------------------------------

    def execute(self, *, profile: bool = False, buffers: Mapping[int | str, Any] | None = None,
                **var_vals: int) -> list[StepProfile] | None:
        refuse_on_tape("a plan")
        if not self._prepared:
            self.prepare()
        native = self._native
        if native is None or profile or buffers:
            return self._execute_prepared(var_vals, profile, buffers)
        values = self._check_vars(var_vals) if var_vals or self._runtime_bounds else var_vals
        if self._loops:
            self._check_loops(values)
        with self._executing:  # the short way of execute_with_vars: what a replay of a CPU plan does
            if self._arrays.pointed is not None:
                self._arrays.restore()
            try:
                native.run(values)
            except BaseException:
                self._clear_stopped(native=True)
                raise
            if self.failure_flags or self._checked_steps:
                self._check_run()
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
        refuse_on_tape("a plan")
        self.prepare()
        return self._execute_prepared(var_vals, profile, buffers)

    def _execute_prepared(self, var_vals: Mapping[str, int], profile: bool,
                          buffers: Mapping[int | str, Any] | None) -> list[StepProfile] | None:
        """``execute_with_vars`` of a plan prepared, outside a tape (both callers have made sure)."""
        values = self._check_vars(var_vals)
        if self._loops:
            self._check_loops(values)
        bindings = self._arrays.check(buffers) if buffers else []
        with self._executing:
            self._arrays.attach(bindings)
            try:
                if profile:
                    records = self._run_profiled(values)
                else:
                    self._run_all(values)
                self._arrays.copy_out(bindings)
            finally:
                self._arrays.detach(bindings)
            if profile:
                self._last_profile = records
                failed = failure(self.buffers, self.failure_flags)
                self._check_steps()
                if failed is not None:
                    raise failed
                return records
            self._check_run()
        return None

    def binder(self, bound: Sequence[tuple[int | str, int]]) -> Binder | None:
        """Runs of one signature (``execute_bound``): an array bound to each plan buffer ``bound`` names, each
        (index or name, the position of its array among a run's arguments), every run's array a numpy array of
        its buffer's dtype and size, as the caller vouches (a jitted function's call key fixes them). None
        where every run must take the general path (``execute(buffers=...)``): a buffer copied in and out
        (a device's own memory, a step whose addresses are not kept), a buffer named twice, an empty one."""
        self.prepare()
        return self._arrays.binder(bound)

    def execute_bound(self, binder: Binder, arguments: Sequence[Any], var_vals: Mapping[str, int]) -> bool:
        """Run as ``execute(buffers=..., **var_vals)`` does with the arrays ``binder`` (this plan's) takes from
        ``arguments``, checking of them only what a run of its signature may change; or return False, having
        run nothing, where an array may not be used in place as it is: ``execute(buffers=...)`` then copies
        it or refuses it as it does any array. The steps stay pointed at the arrays after the run."""
        addresses = binder.addresses(arguments)
        if addresses is None:
            return False
        self.bound_run(binder, bool(var_vals))(addresses, var_vals)
        return True

    def bound_run(self, binder: Binder, valued: bool) -> Callable[[list[int], Mapping[str, int]], None]:
        """``execute_bound`` past its addresses, for a caller that computed them as ``binder`` would (a jitted
        function's generated call): ``run(addresses, var_vals)``, generated for this plan, with only the checks
        it needs (its variables' bounds where it has some or ``valued`` runs pass values, its loops', its
        failure flags and checked steps'), in ``execute_bound``'s order; generated once per binder."""
        key = (binder, valued)
        found = self._bound_runs.get(key)
        if found is None:
            found = self._bound_runs[key] = self._generated_run(binder, valued)
        return found

    def _generated_run(self, binder: Binder, valued: bool) -> Callable[[list[int], Mapping[str, int]], None]:
        """``bound_run``'s function, made."""
        namespace: dict[str, Any] = {}
        body = self._vars_checked(namespace) if valued or self._runtime_bounds else ["values = var_vals"]
        if self._loops:
            body.append("CHECK_LOOPS(values)")
        body += ["with LOCK:", "    pointed = ARRAYS.pointed",  # ``ArrayBinding.point``'s own test, first
                 "    if pointed is None or pointed[0] is not BINDER or pointed[1] != addresses:",
                 "        POINT(BINDER, addresses)"]
        if self._native is not None:  # ``_run_all``'s native way, written out
            body += ["    try:", "        NATIVE(values)", "    except BaseException:", "        CLEAR_STOPPED(True)",
                     "        raise"]
        else:
            body.append("    RUN_ALL(values)")
        if self.failure_flags or self._checked_steps:
            body.append("    CHECK_RUN()")
        return generated.function("run", ("addresses", "var_vals"), body, {
            **namespace, "CHECK_LOOPS": self._check_loops, "LOCK": self._executing,
            "ARRAYS": self._arrays, "POINT": self._arrays.point, "BINDER": binder,
            "NATIVE": getattr(self._native, "run", None), "RUN_ALL": self._run_all,
            "CLEAR_STOPPED": self._clear_stopped, "CHECK_RUN": self._check_run})

    def _run_all(self, values: Values) -> None:
        """Every step once: the native replay, or the schedule's levels and the device's synchronize."""
        try:
            if self._native is not None:
                self._native.run(values)
            else:
                self._run_levels(self._levels, values)
                self.device.synchronize()
        except BaseException:
            self._clear_stopped(native=self._native is not None)
            raise

    def _clear_stopped(self, native: bool) -> None:
        """Read and clear what a run that an exception stopped before its checks (a reference kernel's
        out-of-bounds access, an interrupt) left recorded: its failure flags and its checked steps' records.
        One left standing would fail the next run, whose data may be sound; the run raises its own exception."""
        failure(self.buffers, self.failure_flags)
        with contextlib.suppress(IndexOutOfBoundsError, RequirementError):
            if native:
                self._check_native()
            else:
                self._check_steps()

    def _check_run(self) -> None:
        """Raise what a run's checked steps recorded (``_run_all``'s run), then what its failure flags did."""
        failed = failure(self.buffers, self.failure_flags)
        if self._native is not None:
            self._check_native()
        else:
            self._check_steps()
        if failed is not None:
            raise failed

    def _run_levels(self, levels: Sequence[Sequence[Step]], values: Values) -> None:
        for level in levels:
            together, alone = _overlapped(level)
            if together:
                self._run_parallel(together, values, lambda step, vals: step.run(vals))
            for step in alone:
                step.run(values)

    def _check_native(self) -> None:
        recorded = [launch for launch in self._parts_checks if launch.recorded()]
        if recorded and self._native is not None:
            current = self._native.values()
            for launch in recorded:  # the values its error message evaluates sizes with
                launch.values = {**launch.values, **current}
        self._check_steps()

    def _check_steps(self) -> None:
        """Read (and clear) every checked step's record of out-of-bounds accesses, then raise the first failure: a
        record left standing would fail the next run, though it stayed in bounds."""
        failures = []
        for step in self._checked_steps:
            try:
                step.check()  # type: ignore[misc]
            except (IndexOutOfBoundsError, RequirementError) as err:
                failures.append(err)
        if failures:
            raise failures[0]

    def _vars_checked(self, namespace: dict[str, Any]) -> list[str]:
        """``_check_vars`` written out for this plan's variables (``_generated_run``): ``values`` from
        ``var_vals``, each value checked by each of its uses in turn."""
        namespace.update({"NAMES": frozenset(self._runtime_bounds), "REFUSE_NAMES": self._refuse_names})
        body = ["if var_vals.keys() != NAMES:", "    REFUSE_NAMES(var_vals)", "values = {}"]
        for k, (name, uses) in enumerate(self._runtime_bounds.items()):
            namespace[f"NAME{k}"] = name
            body.append(f"value = var_vals[NAME{k}]")
            checks = []
            for u, (var, kernel) in enumerate(uses):
                namespace[f"CHECKED{k}_{u}"], namespace[f"KERNEL{k}_{u}"] = var.checked, kernel
                checks.append(f"values[NAME{k}] = CHECKED{k}_{u}(value, kernel=KERNEL{k}_{u}, stage='bind')")
            if any(var.scalar is not None for var, _ in uses):  # a scalar's bits: its checks make them
                body += checks
                continue
            # ``check_var_value``'s common case, for every use at once: an int within all their bounds
            namespace[f"LOW{k}"], namespace[f"HIGH{k}"] = max(v.min for v, _ in uses), min(v.max for v, _ in uses)
            body += [f"if type(value) is int and LOW{k} <= value <= HIGH{k}:", f"    values[NAME{k}] = value",
                     "else:", *(f"    {line}" for line in checks)]
        return body

    def _check_vars(self, var_vals: Mapping[str, int]) -> dict[str, int]:
        """Every runtime variable given, and only those, each within the bounds of every kernel that reads it."""
        bounds = self._runtime_bounds
        if var_vals.keys() != bounds.keys():  # the names compared at once: a repeated call's are the plan's
            self._refuse_names(var_vals)
        values = {}
        for name, uses in bounds.items():
            for var, kernel in uses:
                values[name] = var.checked(var_vals[name], kernel=kernel, stage="bind")
        return values

    def _refuse_names(self, var_vals: Mapping[str, int]) -> None:
        """Refuse variables whose names are not the plan's runtime variables': fixed, unknown or missing."""
        for name in var_vals:
            if name in self._fixed_names and name not in self._runtime_bounds:
                raise VariableError(f"variable {name} is fixed in this plan and cannot be passed again",
                                    stage="bind", value=name)
            if name not in self._runtime_bounds:
                raise VariableError(f"unknown variable {name}; the plan takes {sorted(self._runtime_bounds) or 'none'}",
                                    stage="bind", value=name)
        for name, uses in self._runtime_bounds.items():
            if name not in var_vals:
                raise VariableError(f"missing runtime value for variable {name}", kernel=uses[0][1],
                                    stage="bind", value=name)

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
                                        f"[{var.min}, {var.max}]", kernel=kernel, stage="bind", value=(lo, hi))

    def _run_parallel(self, level: Sequence[Step], values: Values,
                      body: Callable[[Step, Values], object]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="svod-plan")
        futures = [self._pool.submit(body, step, dict(values)) for step in level[1:]]
        try:
            body(level[0], values)
        finally:
            wait(futures)  # a step that raises leaves no other running on past the run
        for future in futures:
            future.result()

    def _run_profiled(self, values: Values) -> list[StepProfile]:
        origin = time.perf_counter()
        records: list[StepProfile] = []
        lock = threading.Lock()

        def timed(step: Step, vals: Values) -> None:
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
                together, alone = _overlapped(level)
                if together:
                    self._run_parallel(together, vals, lambda step, v: step.run_timed(v, run_levels, timed))
                for step in alone:
                    step.run_timed(vals, run_levels, timed)

        try:
            run_levels(self._levels, values)
        except BaseException:
            self._clear_stopped(native=False)
            raise
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
            self._arrays.add_sites(replay.sites)
        return replay

    def _replay_work(self, levels: Sequence[Sequence[Step]]) -> list[ReplayItem]:
        """The levels' steps in run order, as a native replay runs them: a level run on host threads at once
        is Python's work."""
        work: list[ReplayItem] = []
        for level in levels:
            together, alone = _overlapped(level)
            if together:
                work.append(ReplayHost(functools.partial(self._run_levels, [together]), "host-parallel steps"))
            work += [step.replay_item(self._replay_work) for step in alone]
        return work

    # ---- arrays bound per run ------------------------------------------------------------------------------

    def export_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the last profiled run as Chrome trace events (open it in Perfetto)."""
        write_chrome_trace(path, self._last_profile)

    # ---- bundles -------------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the prepared plan to one file (``svod.runtime.bundle``): its buffers' layout, its steps,
        and every kernel's AST and compiled PROGRAMs, for ``svod.load_plan`` in another process. Prepares the
        plan first if need be. Buffer contents are not saved: a loaded plan's buffers start zeroed, and
        arrays are bound per run (``execute(buffers={name: array})``)."""
        self.prepare()
        save_plan(path, self.device, self.buffers, self.buffer_names, self.buffer_shapes, self._requests, self._top,
                  self.prepared_kernels, self._buffer_modes(), self.failure_flags)

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
        for step in (inner for top in self._steps for inner in top.flattened()):
            reads, writes = step.buffer_modes()
            read.update(reads)
            written.update(writes)
        return read, written

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


# ---- loading bundles ----------------------------------------------------------------------------------------

def load_plan(path: str | os.PathLike[str], device: str | Device | None = None,
              cache: KernelCache | None = None) -> ExecutionPlan:
    """The plan saved at ``path`` (``ExecutionPlan.save``), prepared on ``device`` (by default the one it was
    built for), its buffers zeroed; its kernels are loaded without compiling where the bundle's compiled code
    fits (``svod.runtime.bundle.read_plan``)."""
    saved = read_plan(path, device, default_cache() if cache is None else cache)
    plan = ExecutionPlan(saved.device, cache)
    for buf, name, shape in saved.buffers:
        plan.add_buffer(buf, name, shape)
    plan._requests = saved.requests
    plan._top = saved.top
    plan.failure_flags = saved.failure_flags
    plan.prepare()
    return plan


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
                            "it must stay positive or negative", stage="bind", value=step)
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


