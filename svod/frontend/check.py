"""``svod.check``: run one kernel (or a plan) on every backend here and on the reference, and say where they
differ.

The reference of a kernel AST, and of a plan, is the PYTHON device, which interprets the kernel AST itself.
The reference of an ``@svod.kernel`` is its own function run as plain Python (``svod.frontend.oracle``): the
PYTHON device interprets what the translator built, and would share its mistakes, so there it is one more
backend compared. Every device (each CPU compiler pair, each OpenCL device, ...) gets fresh copies of the same
inputs; each array is compared element by element with what the reference left in it. A plan runs whole on
each device (``svod.load_plan`` of its bundle), its buffers compared after: what only a plan does (native
replay, loops, threads) is checked too. Floats are equal when both are NaN or when they
are at most ``ulps`` units in the last place apart (reassociated reductions round differently); other
types must be identical.

An error is a result like any other: a backend agrees with a reference that raised only by raising the
same error class for the same reason (the same message; for an access out of bounds, the same buffer, and
then the arrays must agree too, unless a loop without a bound ends at the failure: a ``while``). A backend
that raises where the reference computes differs, and so does one that computes where the reference raised.
A backend is left uncompared, and the report says why, only where svod states beforehand that it cannot run
the kernel as the reference does: it cannot hold one of the kernel's dtypes, it limits loop turns and the
kernel has a ``while``, or (unless named in ``devices``) it computes floats without IEEE 754's promises.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from svod import random
from svod.backends.registry import default_registry
from svod.codegen import check_dtypes
from svod.device import Buffer, Device
from svod.dtype import PtrDType, dtypes
from svod.errors import BundleWarning, GraphError, IndexOutOfBoundsError, RequirementError, SvodError
from svod.frontend.api import run
from svod.frontend.jit import Jit
from svod.frontend.oracle import as_python, python_arguments, run_as_python
from svod.frontend.promotion import HOST, Platform
from svod.frontend.pykernel import Kernel
from svod.ir import Ops, UOp, kernel_label
from svod.ir.uop import is_unbounded
from svod.random.philox import PlainRandom
from svod.runtime import ExecutionPlan, load_plan

DEFAULT_ULPS = 16


@dataclass(frozen=True, slots=True)
class Difference:
    """The first element where a backend and the reference disagree."""

    argument: int
    flat_index: int
    index: tuple[int, ...]
    expected: object
    got: object
    ulps: int | None
    """The distance in units in the last place, for floats."""

    def __str__(self) -> str:
        where = f"argument {self.argument}[{', '.join(map(str, self.index))}] (flat {self.flat_index})"
        distance = "" if self.ulps is None else f", {self.ulps} ulp apart"
        return f"{where}: reference {self.expected!r}, got {self.got!r}{distance}"


@dataclass(frozen=True, slots=True)
class BackendResult:
    device: str
    ok: bool
    difference: Difference | None = None
    error: str | None = None
    """What the backend raised, or the error the reference raised and the backend did not."""
    skipped: str | None = None
    """Why the backend was not compared (``ok`` stays True: a stated limit is no difference)."""

    def __str__(self) -> str:
        if self.skipped is not None:
            return f"{self.device}: skipped, {self.skipped}"
        if self.ok:
            return f"{self.device}: equal"
        return f"{self.device}: {self.difference if self.difference is not None else self.error}"


@dataclass(slots=True)
class CheckReport:
    """Per backend, equal to the reference or the first difference; ``ok`` is False on any difference."""

    kernel: str
    reference_error: str | None
    results: list[BackendResult] = field(default_factory=list)
    reference: str = "PYTHON"
    """What the backends were compared with: the PYTHON device, or plain Python."""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def __str__(self) -> str:
        head = f"svod check {self.kernel}: reference {self.reference}" + (f" raised {self.reference_error}"
                                                                         if self.reference_error else "")
        return "\n".join([head, *(f"  {r}" for r in self.results)])


@dataclass(frozen=True, slots=True)
class _Outcome:
    arrays: list[np.ndarray]
    error: Exception | None
    """What was raised: a ``SvodError``, or, for plain Python, any exception (an ``IndexError``)."""


def _as_array(value: Buffer | np.ndarray) -> np.ndarray:
    return value.numpy() if isinstance(value, Buffer) else np.array(value, copy=True)


def _outcome(ast: UOp, inputs: Sequence[np.ndarray], device: Device, var_vals: Mapping[str, int]) -> _Outcome:
    arrays = [a.copy() for a in inputs]
    try:
        run(ast, arrays, device=device, **var_vals)
    except SvodError as err:
        return _Outcome(arrays, err)
    return _Outcome(arrays, None)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between floats of one dtype (-0.0 and +0.0 are 0 apart)."""
    bits = np.dtype(f"int{8 * a.dtype.itemsize}")
    lowest = float(np.iinfo(bits).min)

    def ordered(x: np.ndarray) -> np.ndarray:  # the bit patterns as one increasing line, in float64 (no wrap)
        raw = x.view(bits).astype(np.float64)
        return np.where(raw < 0, lowest - raw, raw)

    return np.abs(ordered(a) - ordered(b))


def first_difference(position: int, expected: np.ndarray, got: np.ndarray, ulps: int) -> Difference | None:
    if expected.dtype.kind == "f" and got.dtype != expected.dtype and got.dtype.kind == "f":
        got = got.astype(expected.dtype)  # a jitted function's float32 scalar comes back as a Python float
    if expected.dtype.kind == "f":
        both_nan = np.isnan(expected) & np.isnan(got)
        distance = _ulps(expected, got)
        bad = ~both_nan & ((distance > ulps) | (np.isnan(expected) != np.isnan(got)))
    else:
        distance = None
        bad = expected != got
    flat = np.flatnonzero(bad.reshape(-1))
    if not len(flat):
        return None
    k = int(flat[0])
    index = tuple(int(i) for i in np.unravel_index(k, expected.shape)) if expected.ndim else ()
    return Difference(position, k, index, expected.reshape(-1)[k].item(), got.reshape(-1)[k].item(),
                      None if distance is None else int(distance.reshape(-1)[k]))  # exact below 2**53


def _same_failure(expected: Exception, got: SvodError) -> bool:
    """Whether a backend failed as the reference did: the same class for the same reason, which is the same
    message whatever kernel name or stage it gives; for an access out of bounds, the same buffer (work items
    may meet another bad index first)."""
    if isinstance(expected, IndexError):  # plain Python's: an access outside an array
        return isinstance(got, IndexOutOfBoundsError)
    if isinstance(expected, ValueError) and not isinstance(expected, SvodError):  # a draw's bounds: NumPy's
        return isinstance(got, RequirementError)
    if not isinstance(expected, SvodError) or type(expected) is not type(got):
        return False
    if isinstance(expected, IndexOutOfBoundsError):
        return isinstance(got, IndexOutOfBoundsError) and expected.slot == got.slot
    return expected.detail == got.detail


def _compare(name: str, reference: _Outcome, outcome: _Outcome, ulps: int, settled: bool = True) -> BackendResult:
    """``outcome`` against ``reference``. ``settled``: the arrays after an access out of bounds are the kernel's
    with the bad accesses skipped; not where a loop without a bound ends once an access has failed (a
    ``while``), at a turn that depends on which work items saw the failure when."""
    wanted, raised = reference.error, outcome.error
    if raised is not None and wanted is None:
        return BackendResult(name, False, error=f"raised {raised!s} where the reference computed")
    if wanted is not None and raised is None:
        return BackendResult(name, False, error=f"did not raise {type(wanted).__name__}: {_detail(wanted)}")
    if wanted is not None and isinstance(raised, SvodError):
        if not _same_failure(wanted, raised):
            return BackendResult(name, False, error=f"raised {raised!s} where the reference raised "
                                                    f"{type(wanted).__name__}: {_detail(wanted)}")
        if not isinstance(wanted, IndexOutOfBoundsError) or not settled:  # plain Python stops at its IndexError
            return BackendResult(name, True)
        # the kernel ran with the bad accesses skipped: the arrays must still agree
    for position, (expected, got) in enumerate(zip(reference.arrays, outcome.arrays, strict=True)):
        difference = first_difference(position, expected, got, ulps)
        if difference is not None:
            return BackendResult(name, False, difference=difference)
    return BackendResult(name, True)


def _detail(err: Exception) -> str:
    return err.detail if isinstance(err, SvodError) else str(err)


def backends_here() -> list[tuple[str, Device | str]]:
    """Every device that works here but the reference, each compiler pair separately (``CPU (llvm)``,
    ``CPU (clang)``): the device, or why that pair cannot be opened. None is left out; ``check`` says per
    kernel which it does not compare."""
    registry = default_registry()
    found: list[tuple[str, Device | str]] = []
    for name in registry.available():
        if name == "PYTHON":
            continue
        for compiler in registry.compiler_names(name):
            try:
                found.append((f"{name} ({compiler})", registry.get(name, compiler)))
            except SvodError as err:
                found.append((f"{name} ({compiler})", f"cannot be opened: {err.detail}"))
    return found


def _uncompared(ast: UOp, name: str, device: Device, named: bool) -> str | None:
    """Why ``device`` is not compared on ``ast``, or None. It cannot hold a dtype of the kernel (its renderer
    refuses the kernel for that before compiling: a limit svod states, not a difference); or, unless it
    was named, it does not keep IEEE 754 floats (``caps.ieee_floats``) and the kernel computes floats,
    which the comparison needs bit for bit; or it stops a work item's loops after a number of turns
    (``caps.max_loop_turns``) and the kernel has a loop without a bound (a ``while``) or one bounded by memory,
    which it refuses."""
    try:
        check_dtypes(ast, device.caps, device.device, name)
    except GraphError as err:
        return err.detail
    if device.caps.max_loop_turns is not None and _endless(ast):
        return (f"{device.device} stops a work item's loops after {device.caps.max_loop_turns} turns, and the kernel "
                "has a while loop, whose turns nothing bounds")
    if device.caps.max_loop_turns is not None and _bounded_by_memory(ast):
        return (f"{device.device} stops a work item's loops after {device.caps.max_loop_turns} turns, and the kernel "
                "has a loop whose bound is read from memory, which it refuses")
    if not named and not device.caps.ieee_floats and any(
            (u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).is_float for u in ast.toposort()):
        return (f"{device.device} does not keep IEEE 754 floats (caps.ieee_floats) and the kernel computes "
                "floats; name it in devices= to compare anyway")
    return None


def check(target: UOp | Kernel | Jit | ExecutionPlan, buffers: Sequence[Any] | Mapping[int | str, Any] = (), *,
          devices: Sequence[str | Device] | None = None, ulps: int = DEFAULT_ULPS, **var_vals: int) -> CheckReport:
    """Run ``target`` on ``buffers`` on every backend here (or ``devices``) and on the reference; report per
    backend whether the results are equal, or the first difference.

    ``target`` is a kernel AST (``buffers`` its arrays in slot order), an ``@svod.kernel`` (its arguments:
    arrays and scalars; the reference is its function run as plain Python, and the PYTHON device is compared
    too), an ``@svod.jit`` function (its arguments; the reference is the function run as plain Python, and
    the arrays after the call and what it returns are compared), or an ``ExecutionPlan`` (``buffers`` arrays
    bound by name or index, as ``execute(buffers=...)`` takes them; each device runs the whole plan)."""
    if isinstance(target, ExecutionPlan):
        return _check_plan(target, dict(buffers) if isinstance(buffers, Mapping) else dict(enumerate(buffers)),
                           devices, ulps, var_vals)
    if isinstance(buffers, Mapping):
        raise SvodError("a kernel is checked on its arguments in order, not by name", stage="check",
                        value=sorted(map(str, buffers)))
    if isinstance(target, Kernel):
        return _check_python_kernel(target, buffers, devices, ulps, var_vals)
    if isinstance(target, Jit):
        return _check_jit(target, buffers, devices, ulps)
    inputs = [_as_array(b) for b in buffers]
    registry = default_registry()
    reference = _outcome(target, inputs, registry.get("PYTHON"), var_vals)
    return _report(target, inputs, reference, "PYTHON", devices, ulps, var_vals)


def _check_python_kernel(kernel: Kernel, args: Sequence[Any], devices: Sequence[str | Device] | None, ulps: int,
                         var_vals: dict[str, int]) -> CheckReport:
    """An ``@svod.kernel`` against its function run as plain Python: the arrays it writes, compared (those a
    call allocates beside them, for carried locals, are not)."""
    bound = kernel.bind(*args, index_bits=32)  # sizes bounded for every device (WebGPU's indices too)
    arrays = [a for a in python_arguments(args) if isinstance(a, np.ndarray)]
    launch = random.generator.next_launch() if bound.draws else random.Launch(0, 0)  # one for all, plain Python too
    if bound.draws:
        var_vals = {**launch.variables(), **var_vals}
    try:
        ran = run_as_python(kernel, *args, launch=launch, platform=bound.platform)
        reference = _Outcome([a for a in ran if isinstance(a, np.ndarray)], None)
    except Exception as err:  # the function's own error (an IndexError) is its answer
        reference = _Outcome(arrays, err)
    inputs = [_as_array(b) for b in bound.arrays]
    report = _report(bound.ast, inputs, reference, "plain Python", devices, ulps, {**bound.var_vals, **var_vals},
                     compared=len(arrays), python_device=True)
    report.kernel = kernel.name
    return report


def _check_jit(fn: Jit, args: Sequence[Any], devices: Sequence[str | Device] | None, ulps: int) -> CheckReport:
    """An ``@svod.jit`` function against itself run as plain Python (``svod.prange`` as ``range``) on copies of
    ``args``: each array argument after the call, then each value it returns. Plain Python and every device
    draw from one launch of svod's generator, in the widths of the device's floats and integers."""
    launch = random.generator.next_launch()
    references: dict[Platform, _Outcome] = {}

    def reference(platform: Platform) -> _Outcome:
        if platform not in references:
            references[platform] = _plain_run(fn, args, launch, platform)
        return references[platform]

    report = CheckReport(fn.name, None if reference(HOST).error is None else str(reference(HOST).error),
                         reference="plain Python")
    registry = default_registry()
    targets = [("PYTHON", registry.get("PYTHON")), *backends_here()] if devices is None else \
        [(str(d), registry.get(d)) for d in devices]
    for label, device in targets:
        why = device if isinstance(device, str) else _unheld(args, device)
        if isinstance(device, str) or why is not None:
            report.results.append(BackendResult(label, True, skipped=why))
            continue
        expected = reference(Platform(device.caps.index_bits, dtypes.float64 in device.caps.element_dtypes))
        copies = python_arguments(args)
        try:
            outcome = _Outcome(_results(copies, fn.run(copies, device, launch)), None)
        except SvodError as err:
            outcome = _Outcome([], err)
        if expected.error is None and outcome.error is None and len(outcome.arrays) != len(expected.arrays):
            report.results.append(BackendResult(label, False, error=f"gave {len(outcome.arrays)} arrays and values, "
                                                                    f"plain Python {len(expected.arrays)}"))
            continue
        report.results.append(_compare(label, expected, outcome, ulps, settled=False))
    return report


def _plain_run(fn: Jit, args: Sequence[Any], launch: random.Launch, platform: Platform) -> _Outcome:
    """``fn`` run as plain Python on copies of ``args``, its draws ``launch``'s in ``platform``'s widths: the
    arrays and values it leaves, or the error it raised (the function's own error is its answer)."""
    arguments = python_arguments(args)
    generator = PlainRandom(launch.key, launch.launch, platform.float64, platform.index_bits > 32)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return _Outcome(_results(arguments, as_python(fn, generator)(*arguments)), None)
    except Exception as err:
        return _Outcome([], err)


def _results(arguments: Sequence[Any], returned: Any) -> list[np.ndarray]:
    """The arrays among ``arguments``, then each value returned (a tuple's each), as arrays."""
    values = returned if isinstance(returned, tuple) else () if returned is None else (returned,)
    return [*(a for a in arguments if isinstance(a, np.ndarray)), *(np.asarray(v) for v in values)]


def _unheld(args: Sequence[Any], device: Device) -> str | None:
    """Why ``device`` cannot run a jitted function on ``args``: an array dtype it cannot hold."""
    for value in args:
        if isinstance(value, np.ndarray) and dtypes.from_numpy(value.dtype) not in device.caps.element_dtypes:
            return f"{device.device} cannot hold {value.dtype} arrays"
    return None


def _report(ast: UOp, inputs: list[np.ndarray], reference: _Outcome, label: str,
            devices: Sequence[str | Device] | None, ulps: int, var_vals: Mapping[str, int],
            compared: int | None = None, python_device: bool = False) -> CheckReport:
    """Each backend's outcome on ``ast`` against ``reference`` (its first ``compared`` arrays)."""
    registry = default_registry()
    name = kernel_label(ast)
    report = CheckReport(name, None if reference.error is None else str(reference.error), reference=label)
    targets = backends_here() if devices is None else [(str(d), registry.get(d)) for d in devices]
    if python_device and devices is None:
        targets = [("PYTHON", registry.get("PYTHON")), *targets]
    for target_label, device in targets:
        why = device if isinstance(device, str) else _uncompared(ast, name, device, devices is not None)
        if isinstance(device, str) or why is not None:
            report.results.append(BackendResult(target_label, True, skipped=why))
            continue
        outcome = _outcome(ast, inputs, device, var_vals)
        outcome = _Outcome(outcome.arrays[:compared], outcome.error)
        report.results.append(_compare(target_label, reference, outcome, ulps, not _endless(ast)))
    return report


def _endless(ast: UOp) -> bool:
    """Whether ``ast`` has a loop without a bound (a ``while``)."""
    return any(u.op is Ops.RANGE and is_unbounded(u) for u in ast.toposort())


def _bounded_by_memory(ast: UOp) -> bool:
    """Whether ``ast`` has a loop whose end reads memory (``range(counts[j])``)."""
    return any(u.op is Ops.RANGE and any(s.op is Ops.LOAD for s in u.src[0].toposort()) for u in ast.toposort())


def _check_plan(plan: ExecutionPlan, bound: dict[int | str, Any], devices: Sequence[str | Device] | None,
                ulps: int, var_vals: dict[str, int]) -> CheckReport:
    """Each device runs ``plan`` whole, loaded from its bundle, on copies of the plan's buffers (the bound
    arrays in theirs); every buffer is compared with what the PYTHON device's run left in it."""
    registry = default_registry()
    with tempfile.TemporaryDirectory(prefix="svod-check-") as folder:
        bundle = Path(folder) / "checked.svodplan"
        plan.save(bundle)
        contents = [b.base.numpy() for b in plan.buffers]
        reference = _run_plan(bundle, registry.get("PYTHON"), contents, bound, var_vals)
        report = CheckReport("plan", None if reference.error is None else str(reference.error))
        targets = backends_here() if devices is None else [(str(d), registry.get(d)) for d in devices]
        for label, device in targets:
            if isinstance(device, str):
                report.results.append(BackendResult(label, True, skipped=device))
                continue
            why = next((w for w in (_uncompared(step.ast, "plan", device, devices is not None)
                                    for step in plan.prepared_kernels) if w is not None), None)
            if why is not None:
                report.results.append(BackendResult(label, True, skipped=why))
                continue
            settled = not any(_endless(step.ast) for step in plan.prepared_kernels)
            report.results.append(_compare(label, reference, _run_plan(bundle, device, contents, bound, var_vals),
                                           ulps, settled))
    return report


def _run_plan(bundle: Path, device: Device, contents: list[np.ndarray], bound: Mapping[int | str, Any],
              var_vals: dict[str, int]) -> _Outcome:
    """The plan of ``bundle`` run once on ``device``, its buffers starting from ``contents`` and ``bound``'s
    arrays (copied in, so that a CPU plan replays natively, as it runs unbound): every buffer's storage
    after, or the error it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BundleWarning)  # another device's code: compiled again, as expected
            plan = load_plan(bundle, device=device)
        for buf, content in zip(plan.buffers, contents, strict=True):
            buf.base.copyin(content)
        for key, value in bound.items():
            plan.buffers[plan.buffer_names[key] if isinstance(key, str) else key].copyin(_as_array(value))
        plan.execute(**cast(Any, var_vals))  # the native replay of a CPU plan, as a user runs it
    except SvodError as err:
        return _Outcome([], err)
    return _Outcome([b.base.numpy() for b in plan.buffers], None)
