"""The lowering pipeline: the ordered, named passes that take a kernel AST to the SINK the linearizer
orders, chosen for a target from its ``DeviceCaps``, and those that take that SINK to the instruction list
a renderer spells. This module is the one place the order lives, and ``program`` its one entry: an AST and
a target to the PROGRAM every later station reads (its source written by the target's language writer,
its metadata derived here once).

::

    ast ─> parts (parallel_loops, then block_matmul on a CPU, else split_reduction) ─> for each part:
           validate ─ narrow_integers ─ check_dtypes ─ unbind ─ drop_empty_ranges ─ fuse_products ─ anchor_ranges
           ─ simplify ─ check_races ─ forward_stored ─ guard_accesses ─ decompose ─ <the target's passes> ─ simplify
           ─ keep_params
           ─> lowered SINK (``lower``)
    lowered SINK ─> check_accesses ─ linearize ─ lower_accumulators ─ check_barriers ─> LINEAR (``linearize``)
    LINEAR ─> loop turns checked ─ target.writer.render_linear ─> PROGRAM(SINK, DEVICE, LINEAR, SOURCE) (``program``)

    CPU: one of
         block_transposes                           (a transpose, however its loops were written)
         order_parallel_nest                        (a nest of parallel ranges, its stores' range innermost)
         ─ clamp_guarded_ranges ─ tile_for_cpu ─ share_reduction_loops ─ carry_rows ─ reduce_atomic_adds
         ─ split_for_threads ─ privatize_atomics ─ speculate_gated_loads
    GPU: one of
         tile_matmul                                (local memory is storage of its own)
         upcast_reductions, then one of
             reduce_per_item                        (local memory is ordinary memory, the loops fit)
             share_reductions
             to_gpu_indices ─ split_reductions      (the split only where a work item's loops do not fit)
         ─ speculate_gated_loads

A kernel with a loop that exits early (``Ops.EXIT``: a ``while``, a ``break``) runs each work item's program as
written: the passes that tile, share or split its work leave it (its loops' turns depend on its data), and the
parts, threads and launch it gets gate its exits as they gate its effects.

A pass returns the kernel it made, or None where it does not apply (the kernel goes on unchanged); a check
refuses a kernel or lets it through unchanged; in a ``FirstOf``, the first alternative that applies is
taken. ``SVOD_DEBUG=passes`` prints each pass that
ran and the kernel after it. What each pass guarantees is said where it is defined
(``svod.codegen.lower``, ``svod.codegen.safety``, and for the linear stage ``svod.codegen.checks``,
``svod.codegen.linearize``, ``svod.codegen.accumulators``, ``svod.codegen.barriers``). The lowered SINK,
before ``check_accesses``, is the kernel a PROGRAM carries: the linear stage's rewrites live only in its
instruction list.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO

from svod.codegen.accumulators import lower_accumulators
from svod.codegen.barriers import check_barriers
from svod.codegen.checks import check_accesses
from svod.codegen.collector import collector_paused
from svod.codegen.guarded_ranges import clamp_guarded_ranges
from svod.codegen.integer_width import NARROWED, narrow_integers, narrowable
from svod.codegen.linearize import linearize as order
from svod.codegen.loop_turns import checked_loop_turns, unproven_loop_turns
from svod.codegen.lower import (
    anchor_ranges,
    decompose,
    drop_empty_ranges,
    fuse_products,
    share_reduction_loops,
    speculate_gated_loads,
    split_reduction,
)
from svod.codegen.lower_cpu import (
    block_transposes,
    privatize_atomics,
    reduce_atomic_adds,
    thread_split,
    tile_for_cpu,
    vector_bytes,
)
from svod.codegen.lower_gpu import reduce_per_item, share_reductions, tile_matmul, to_gpu_indices
from svod.codegen.matmul_blocks import block_matmul
from svod.codegen.nest_order import order_parallel_nest
from svod.codegen.recurrences import carry_rows, forward_stored
from svod.codegen.requirements import Requirements, record_requirements, stated
from svod.codegen.safety import check_races, guard_accesses, parallel_loops, unbind
from svod.codegen.upcast import split_reductions, upcast_reductions
from svod.device import DeviceCaps, WorkGroupLimits, derive_metadata, entry_symbol
from svod.dtype import DeviceSpec, DType, PtrDType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp, simplify
from svod.ir.uop import exits, pointee, runs_as_written
from svod.ir.validate import kernel_label, validate


class Writer(Protocol):
    """What the pipeline asks of a language writer (a renderer): the text of an instruction list, and the
    turns of a loop its text runs for one instruction alone (a compare-exchange), where the device limits
    a work item's loop turns."""

    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str: ...

    def hidden_loop_turns(self, u: UOp) -> int: ...


@dataclass(frozen=True)
class Target:
    """What the pipeline needs to know of a device: its capabilities, the ops its language lacks, and the
    writer of its language (None where a kernel is only lowered)."""

    device: DeviceSpec
    caps: DeviceCaps
    decompositor: PatternMatcher | None
    writer: Writer | None = None

    @property
    def gpu(self) -> bool:
        return self.caps.work_groups is not None

    @property
    def parallel(self) -> bool:
        """Whether the device runs a kernel's work on more than one thread or work item."""
        return self.gpu or self.caps.threads > 1

    def hidden_loop_turns(self, u: UOp) -> int:
        return 0 if self.writer is None else self.writer.hidden_loop_turns(u)


@dataclass(frozen=True)
class Lowering:
    """A kernel on its way down: the AST as given, its name for errors, the SINK so far, the status buffer
    its checked accesses report to (if any), and the values of the variables it fixes."""

    ast: UOp
    kernel: str
    sink: UOp
    status: UOp | None = None
    fixed: tuple[tuple[str, int], ...] = ()
    workers: UOp | None = None
    """How many CPU workers a launch wakes, where the kernel's variables decide it (``thread_split``); None:
    what the lowered kernel says (``core_id``'s count, or one)."""
    requirements: Requirements | None = None
    """Where the kernel records its requirements, and their messages (``svod.codegen.requirements``)."""


Apply = Callable[[Lowering, Target], Lowering | None]


@dataclass(frozen=True)
class Pass:
    name: str
    apply: Apply


@dataclass(frozen=True)
class Check:
    """A pass that refuses a kernel it cannot let through (a ``GraphError``) and changes nothing."""

    name: str
    check: Callable[[Lowering, Target], None]


@dataclass(frozen=True)
class FirstOf:
    """The first of ``alternatives`` that applies (a pass that returns a kernel, or a sequence whose first
    pass does); the kernel goes on unchanged when none does."""

    name: str
    alternatives: tuple[LoweringStep, ...]


@dataclass(frozen=True)
class Then:
    """``steps`` in order, as one alternative of a ``FirstOf``: it applies when its first step does."""

    name: str
    steps: tuple[LoweringStep, ...]


LoweringStep = Pass | Check | FirstOf | Then


# ---- the passes, as the pipeline calls them ----------------------------------------------------------------

def _rewrite(rewrite: Callable[[UOp, Target], UOp | None]) -> Apply:
    def apply(state: Lowering, target: Target) -> Lowering | None:
        sink = rewrite(state.sink, target)
        return None if sink is None else dataclasses.replace(state, sink=sink)
    return apply


def check_dtypes(ast: UOp, caps: DeviceCaps, device: DeviceSpec, kernel: str,
                 computed: frozenset[DType] = frozenset()) -> None:
    """Refuse a kernel with a buffer the device cannot hold, or a value it cannot compute
    (``caps.element_dtypes``; bools and indices are always computed, and values of ``computed``: those
    ``narrow_integers`` decides). A float scalar travels as a variable of its bits (``KernelBuilder.scalar``):
    where the float's dtype is not held either, the refusal names it, the dtype the user passed, not the
    integer of its bits."""
    nodes = ast.toposort()
    bits_of = {u.src[0]: u.dtype for u in nodes if u.op is Ops.BITCAST and u.src[0].op is Ops.DEFINE_VAR
               and u.dtype not in caps.element_dtypes}
    for u in nodes:
        dtype = pointee(u) if u.op is Ops.PARAM else u.dtype
        if isinstance(dtype, PtrDType) or dtype in caps.element_dtypes or dtype in (dtypes.void, dtypes.index) \
                or (dtype == dtypes.bool and u.op is not Ops.PARAM) \
                or (dtype in computed and u.op is not Ops.PARAM and u not in bits_of):
            continue
        if u.op is Ops.PARAM:
            what = f"{dtype.name}, the dtype of buffer {u.arg}"
        elif u in bits_of:
            what = f"{bits_of[u].name} values (scalar {u.arg[0]}, which travels as its {dtype.name} bits)"
            dtype = bits_of[u]
        else:
            what = f"{dtype.name} values"
        held = ", ".join(sorted(d.name for d in caps.element_dtypes))
        reason = dict(caps.unheld_reasons).get(dtype)
        why = "" if reason is None else f" ({reason})"
        raise GraphError(f"{device} cannot hold {what}{why}; its buffers and values are {held}", kernel=kernel,
                         stage="render", value=dtype.name, buffers=(u.arg,) if u.op is Ops.PARAM else ())


def _unbind(state: Lowering, target: Target) -> Lowering:
    sink, fixed = unbind(state.sink, state.kernel)
    return dataclasses.replace(state, sink=sink, fixed=tuple(sorted(fixed.items())))


def _narrow_integers(state: Lowering, target: Target) -> Lowering | None:
    if dtypes.int64 in target.caps.element_dtypes or not narrowable(state.sink):
        return None
    check_dtypes(state.sink, target.caps, target.device, state.kernel, computed=frozenset(NARROWED))  # others first
    sink = narrow_integers(state.sink, state.kernel, str(target.device))
    return None if sink is None else dataclasses.replace(state, sink=sink)


def _guard_accesses(state: Lowering, target: Target) -> Lowering:
    sink, status = guard_accesses(state.sink, state.kernel, target.caps.index_bits)
    return dataclasses.replace(state, sink=sink, status=status)


def _keep_params(state: Lowering, target: Target) -> Lowering:
    """Every buffer of the AST stays an argument, even one that simplification made unused, so a kernel
    takes the buffers its author declared, in slot order."""
    kept = {u.arg for u in state.sink.toposort() if u.op is Ops.PARAM}
    lost = sorted((u for u in state.ast.toposort() if u.op is Ops.PARAM and u.arg not in kept), key=lambda u: u.arg)
    return dataclasses.replace(state, sink=state.sink.replace(src=(*state.sink.src, *lost))) if lost else state


def _split_for_threads(state: Lowering, target: Target) -> Lowering | None:
    sink, workers = thread_split(state.sink, target.caps.threads)
    return None if sink is state.sink else dataclasses.replace(state, sink=sink, workers=workers)


def _limits(target: Target) -> WorkGroupLimits:
    if target.caps.work_groups is None:
        raise GraphError("a GPU pass needs the device's work-group limits", stage="lower", value=str(target.device))
    return target.caps.work_groups


def _per_item(sink: UOp, target: Target) -> UOp | None:
    if target.caps.dedicated_local_memory or runs_as_written(sink):
        return None
    lowered = reduce_per_item(sink, _limits(target))
    return lowered if lowered is not None and loops_fit(lowered, target) else None


def _launch(sink: UOp, target: Target) -> UOp:
    flat = to_gpu_indices(sink, _limits(target), direct_index=False,
                          exact_groups=not target.caps.dedicated_local_memory)
    return flat if exits(flat) or loops_fit(flat, target) else split_reductions(flat, (Ops.ADD, Ops.MAX, Ops.MIN))


FRONT: tuple[LoweringStep, ...] = (
    Check("validate", lambda s, t: validate(s.ast)),
    Pass("narrow_integers", _narrow_integers),
    Check("check_dtypes", lambda s, t: check_dtypes(s.sink, t.caps, t.device, s.kernel)),
    Pass("unbind", _unbind),
    Pass("drop_empty_ranges", _rewrite(lambda sink, t: drop_empty_ranges(sink))),
    Pass("fuse_products", _rewrite(lambda sink, t: fuse_products(sink))),
    Pass("anchor_ranges", _rewrite(lambda sink, t: anchor_ranges(sink))),
    Pass("simplify", _rewrite(lambda sink, t: simplify(sink))),
    Check("check_races", lambda s, t: check_races(s.sink, s.kernel)),
    Pass("forward_stored", _rewrite(lambda sink, t: forward_stored(sink))),
    Pass("guard_accesses", _guard_accesses),
    Pass("decompose", _rewrite(lambda sink, t: decompose(sink, t.decompositor))),
)
"""What every target does first: refuse what it cannot run, and prove or guard every access."""

CPU: tuple[LoweringStep, ...] = (
    FirstOf("order_nest", (
        Pass("block_transposes", _rewrite(lambda sink, t: None if runs_as_written(sink) else block_transposes(sink))),
        Pass("order_parallel_nest", _rewrite(lambda sink, t: None if runs_as_written(sink) else
                                             order_parallel_nest(sink))),
    )),
    Pass("clamp_guarded_ranges", _rewrite(lambda sink, t: clamp_guarded_ranges(sink))),
    Pass("tile_for_cpu", _rewrite(lambda sink, t: None if runs_as_written(sink) else
                                  tile_for_cpu(sink, t.caps.vector_registers, t.caps.vector_lanes))),
    Pass("share_reduction_loops", _rewrite(lambda sink, t: None if runs_as_written(sink) else
                                           share_reduction_loops(sink))),
    Pass("carry_rows", _rewrite(lambda sink, t: carry_rows(sink, t.caps.vector_registers, vector_bytes(
        t.caps.vector_registers) if t.caps.vector_lanes else None))),
    Pass("reduce_atomic_adds", _rewrite(lambda sink, t: None if runs_as_written(sink) else
                                        reduce_atomic_adds(sink, t.caps.threads))),
    Pass("split_for_threads", _split_for_threads),
    Pass("privatize_atomics", _rewrite(lambda sink, t: None if runs_as_written(sink) else privatize_atomics(sink))),
    Pass("speculate_gated_loads", _rewrite(lambda sink, t: speculate_gated_loads(sink))),
)
"""A CPU: a nest of parallel ranges ordered by what it accesses, not as its loops were written (a transpose
walked in blocks that stay in cache; else the range its stores are contiguous in innermost), a parallel range
whose effects all test its index against a bound read before it ending at that bound, tiles for its vector
registers, independent sums over one length in one loop, work items that carry registers through a loop run
together (in vector lanes where they store neighbours), an atomic add's value summed over the parallel ranges
its element does not use, GLOBAL ranges spread over threads, each adding into a private copy of a small buffer
of atomic adds, and gated loads made branch-free where that is safe."""

GPU: tuple[LoweringStep, ...] = (
    FirstOf("work_groups", (
        Pass("tile_matmul", _rewrite(lambda sink, t: tile_matmul(sink, _limits(t), t.caps.local_memory)
                                     if t.caps.dedicated_local_memory and not runs_as_written(sink) else None)),
        Then("upcast", (
            Pass("upcast_reductions", _rewrite(lambda sink, t: sink if runs_as_written(sink) else
                                               upcast_reductions(sink, masked=True, lanes=t.caps.vector_lanes))),
            FirstOf("launch", (
                Pass("reduce_per_item", _rewrite(_per_item)),
                Pass("share_reductions", _rewrite(lambda sink, t: None if runs_as_written(sink) else
                                                  share_reductions(sink, _limits(t), t.caps.local_memory,
                                                                   t.caps.warp_size))),
                Pass("to_gpu_indices", _rewrite(_launch)),
            )),
        )),
    )),
    Pass("decompose_lowered", _rewrite(lambda sink, t: decompose(sink, t.decompositor))),
    Pass("speculate_gated_loads", _rewrite(lambda sink, t: speculate_gated_loads(sink))),
)
"""A GPU: a matmul's operands staged in local memory where that is storage of its own; else several
outputs of a reduction per work item and, where that applies, a row's reductions shared by a work group,
or computed once by each work item where local memory is ordinary memory and the device lets one work
item's loops come round that often; each GLOBAL range left a launch dimension, its reductions split into
partials that share a loop where that keeps a work item's loops within the device's limit; the ops those
steps made (a work group's tree of partials) decomposed as the kernel's were (a half's sum in float32 where
the device has no half arithmetic); and gated loads
made branch-free, as on a CPU (a masked tile's loads, which branches left slower on CL:0)."""

BACK: tuple[LoweringStep, ...] = (
    Pass("simplify", _rewrite(lambda sink, t: simplify(sink))),
    Pass("keep_params", _keep_params),
)


def passes(target: Target) -> tuple[LoweringStep, ...]:
    """The passes that lower a kernel for ``target``, in order."""
    return (*FRONT, *(GPU if target.gpu else CPU), *BACK)


# ---- running them --------------------------------------------------------------------------------------------

def parts(ast: UOp, target: Target, trace: TextIO | None = None) -> tuple[UOp, ...]:
    """The kernels ``ast`` runs as, its parts, in order: itself, or on a CPU a matmul in blocks of columns
    (two parts where it packs ``b``), or the two parts of a split reduction where the device has parallelism
    to spread the first over. Parts take the kernel's buffers and, after them, one scratch buffer (the last
    PARAM of the first part). Sequential loops whose turns are independent are parallel in every part
    (``parallel_loops``). A kernel that states requirements runs as written, in one part: its records are made
    by the first lowering pass, which the analyses here do not know."""
    if stated(ast):
        return (ast,)
    parallel = parallel_loops(ast)
    if trace is not None:
        _report(trace, "parallel_loops", f"{kernel_label(ast)} for {target.device}",
                None if parallel is None else (parallel,))
    ast = ast if parallel is None else parallel
    if runs_as_written(ast):
        return (ast,)
    split = None if target.gpu else block_matmul(ast, target.caps.l2_bytes)
    if trace is not None and not target.gpu:
        _report(trace, "block_matmul", f"{kernel_label(ast)} for {target.device}", split)
    if split is None and target.parallel:
        split = split_reduction(ast)
        if trace is not None:
            _report(trace, "split_reduction", f"{kernel_label(ast)} for {target.device}", split)
    return (ast,) if split is None else split


def lower(ast: UOp, target: Target, trace: TextIO | None = None) -> Lowering:
    """``ast`` through ``passes(target)``; ``trace`` receives each pass's name and the kernel after it."""
    recorded, requirements = record_requirements(ast)
    state = Lowering(recorded, kernel_label(ast), recorded, requirements=requirements)
    for step in passes(target):
        state = _run(step, state, target, trace) or state
    return state


def _run(step: LoweringStep, state: Lowering, target: Target, trace: TextIO | None) -> Lowering | None:
    if isinstance(step, Pass):
        after = step.apply(state, target)
        if trace is not None:
            _report(trace, step.name, f"{state.kernel} for {target.device}", None if after is None else (after.sink,))
        return after
    if isinstance(step, Check):
        step.check(state, target)
        if trace is not None:
            print(f"svod: pass {step.name} on {state.kernel} for {target.device}: passed", file=trace)
        return state
    if isinstance(step, FirstOf):
        for alternative in step.alternatives:
            after = _run(alternative, state, target, trace)
            if after is not None:
                return after
        return None
    first = _run(step.steps[0], state, target, trace)
    if first is None:
        return None
    for later in step.steps[1:]:
        first = _run(later, first, target, trace) or first
    return first


# ---- the linear stage ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Linearizing:
    """A lowered kernel on its way to an instruction list: its name for errors, the SINK to order, the status
    buffer its checked accesses report to (if any), the device's decompositor, and the instructions once
    ordered."""

    kernel: str
    sink: UOp
    status: UOp | None = None
    decompositor: PatternMatcher | None = None
    linear: tuple[UOp, ...] = ()


@dataclass(frozen=True)
class LinearPass:
    name: str
    apply: Callable[[Linearizing], Linearizing | None]


@dataclass(frozen=True)
class LinearCheck:
    """A pass of the linear stage that refuses an instruction list it cannot let through and changes nothing."""

    name: str
    check: Callable[[Linearizing], None]


LinearStep = LinearPass | LinearCheck


def _check_accesses(state: Linearizing) -> Linearizing | None:
    sink = check_accesses(state.sink, state.status)
    return None if sink is None else dataclasses.replace(state, sink=sink)


def _lower_accumulators(state: Linearizing) -> Linearizing | None:
    linear = lower_accumulators(state.linear, state.decompositor)
    return None if linear is state.linear else dataclasses.replace(state, linear=linear)


LINEAR: tuple[LinearStep, ...] = (
    LinearPass("check_accesses", _check_accesses),
    LinearPass("linearize", lambda s: dataclasses.replace(s, linear=order(s.sink, s.status))),
    LinearPass("lower_accumulators", _lower_accumulators),
    LinearCheck("check_barriers", lambda s: check_barriers(s.linear)),
)
"""What every target does with a lowered kernel: each access no proof covers tested and recorded where it
fails (``svod.codegen.checks``), the kernel ordered into instructions (``svod.codegen.linearize``), each
reduction an accumulator register (``svod.codegen.accumulators``), and every barrier reached by every work
item of its group (``svod.codegen.barriers``)."""


def linearize(sink: UOp, status: UOp | None = None, target: Target | None = None,
              trace: TextIO | None = None) -> tuple[UOp, ...]:
    """The instruction list of the lowered kernel ``sink``: ``sink`` through ``LINEAR``. ``status`` is the buffer
    checked accesses record failures in; the accumulator updates are computed through ``target``'s
    decompositor, as ``decompose`` computed the rest of the kernel; ``trace`` receives each pass's name and
    the kernel after it."""
    kernel = kernel_label(sink) if target is None else f"{kernel_label(sink)} for {target.device}"
    state = Linearizing(kernel_label(sink), sink, status, None if target is None else target.decompositor)
    try:
        for step in LINEAR:
            if isinstance(step, LinearCheck):
                step.check(state)
                if trace is not None:
                    print(f"svod: pass {step.name} on {kernel}: passed", file=trace)
                continue
            after = step.apply(state)
            if trace is not None:
                if after is None:
                    _report(trace, step.name, kernel, None)
                elif after.linear:
                    print(f"svod: pass {step.name} on {kernel}", file=trace)
                    print(linear_listing(after.linear), file=trace)
                else:
                    _report(trace, step.name, kernel, (after.sink,))
            state = after or state
    except GraphError as err:
        if err.kernel is not None:
            raise
        raise GraphError(err.detail, kernel=state.kernel, stage=err.stage or "lower", value=err.value) from err
    return state.linear


def loops_fit(sink: UOp, target: Target) -> bool:
    """Whether the loops of one work item of ``sink`` (mid-lowering: its status buffer, if any, is its last
    source) surely come round no more often than the device lets them (``caps.max_loop_turns``)."""
    if target.caps.max_loop_turns is None:
        return True
    status = sink.src[-1] if sink.src and sink.src[-1].op is Ops.PARAM else None
    linear = linearize(simplify(sink), status, target)
    return unproven_loop_turns(linear, target.caps.max_loop_turns, target.hidden_loop_turns) is None


# ---- the entry: an AST to its PROGRAM ------------------------------------------------------------------------

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def kernel_name(ast: UOp, name: str | None) -> str:
    """A C identifier for the kernel: the given name, the SINK's name, or ``kernel``."""
    ident = _NOT_IDENTIFIER.sub("_", name or kernel_label(ast))
    return ident if ident[0].isalpha() else "k_" + ident


def program(ast: UOp, target: Target, name: str | None = None, trace: TextIO | None = None) -> UOp:
    """The PROGRAM of one kernel ``ast`` runs as (one of ``parts``) on ``target``: SINK (lowered), DEVICE,
    LINEAR (its instruction list), SOURCE (written by ``target.writer``), and the kernel's metadata, derived
    here once for every later station (a compiler adds BINARY; a runtime reads what it launches). The cyclic
    garbage collector waits meanwhile (``svod.codegen.collector``)."""
    with collector_paused():
        return _program(ast, target, name, trace)


def _program(ast: UOp, target: Target, name: str | None, trace: TextIO | None) -> UOp:
    if target.writer is None:
        raise GraphError("a PROGRAM needs its target's language writer", kernel=kernel_label(ast), stage="render",
                         value=str(target.device))
    name = kernel_name(ast, name)
    label = kernel_label(ast)
    try:
        lowered = lower(ast, target, trace)
        linear = linearize(lowered.sink, lowered.status, target, trace)
        entry = entry_symbol(name, lowered.sink)
        turns = checked_loop_turns(linear, target.caps.max_loop_turns, target.hidden_loop_turns, target.device,
                                   label)
        source = target.writer.render_linear(entry, linear)
        derived = derive_metadata(lowered.sink)
    except GraphError as err:
        if err.kernel is not None:
            raise
        raise GraphError(err.detail, kernel=label, stage=err.stage or "render", value=err.value) from err
    status = None if lowered.status is None else int(lowered.status.arg)
    required = lowered.requirements
    metadata = dataclasses.replace(derived, name=name, status_slot=status, fixed=lowered.fixed, entry=entry,
                                   loop_turns=turns, requirement_slot=None if required is None else
                                   int(required.buffer.arg), requirements=() if required is None else
                                   required.messages)
    if lowered.workers is not None:
        metadata = dataclasses.replace(metadata, global_size=(lowered.workers, *derived.global_size[1:]))
    return UOp.program(lowered.sink, UOp.device(target.device), UOp.linear(*linear), UOp.source(source),
                       metadata=metadata)


def linear_listing(linear: tuple[UOp, ...]) -> str:
    """An instruction list one instruction a line, indented by the blocks it is in: ``%n = OP dtype [sources]
    arg``, a source named by its position (``?`` for one that is not an instruction)."""
    position = {u: i for i, u in enumerate(linear)}
    lines, depth = [], 1
    for i, u in enumerate(linear):
        depth -= u.op is Ops.END
        srcs = ", ".join(f"%{position[s]}" if s in position else "?" for s in u.src)
        lines.append(f"{'  ' * depth}%{i} = {u.op.name} {u.dtype!r} [{srcs}]{'' if u.arg is None else f' {u.arg!r}'}")
        depth += u.op in (Ops.RANGE, Ops.IF)
    return "\n".join(lines)


def _report(trace: TextIO, name: str, kernel: str, kernels: tuple[UOp, ...] | None) -> None:
    """A pass's line in the trace: its name, and the kernels it made, or that it does not apply."""
    if kernels is None:
        print(f"svod: pass {name} on {kernel}: does not apply", file=trace)
        return
    print(f"svod: pass {name} on {kernel}", file=trace)
    for sink in kernels:
        print(listing(sink), file=trace)


def listing(sink: UOp) -> str:
    """The kernel one node a line, sources before users: ``%n = OP dtype [sources] arg``."""
    topo = sink.toposort()
    position = {u: i for i, u in enumerate(topo)}
    return "\n".join(f"  %{i} = {u.op.name} {u.dtype!r} [{', '.join(f'%{position[s]}' for s in u.src)}]"
                     f"{'' if u.arg is None else f' {u.arg!r}'}" for i, u in enumerate(topo))


__all__ = ["BACK", "CPU", "FRONT", "GPU", "LINEAR", "Check", "FirstOf", "LinearCheck", "LinearPass", "Linearizing",
           "Lowering", "Pass", "Target", "Then", "Writer", "check_dtypes", "kernel_name", "linear_listing", "linearize",
           "listing", "loops_fit", "lower", "parts", "passes", "program"]
