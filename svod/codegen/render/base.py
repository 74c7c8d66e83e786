"""``KernelRenderer``: the shared half of every renderer. It lowers an AST for its device, linearizes
it, and hands the instruction list to the language-specific ``render_linear``.

::

    ast ──lower()──> lowered SINK ──linearize()──> LINEAR ──render_linear()──> source ──> ProgramSpec
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from svod.codegen.linearize import linearize
from svod.codegen.lower import (
    anchor_ranges,
    decompose,
    privatize_atomics,
    speculate_gated_loads,
    split_for_threads,
    split_reduction,
    tile_for_cpu,
)
from svod.codegen.safety import check_races, guard_accesses, unbind
from svod.device import DeviceCaps, KernelMetadata, ProgramSpec, entry_symbol
from svod.device.launch import most
from svod.dtype import DeviceSpec, PtrDType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp, simplify
from svod.ir.uop import pointee
from svod.ir.validate import kernel_label, validate

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def kernel_name(ast: UOp, name: str | None) -> str:
    """A C identifier for the kernel: the given name, the SINK's name, or ``kernel``."""
    raw = name or (ast.arg if isinstance(ast.arg, str) else "") or "kernel"
    ident = _NOT_IDENTIFIER.sub("_", raw)
    return ident if ident[0].isalpha() else "k_" + ident


def _keep_params(lowered: UOp, ast: UOp) -> UOp:
    """Every buffer of the AST stays an argument, even one that simplification made unused, so a kernel
    takes the buffers its author declared, in slot order."""
    kept = {u.arg for u in lowered.toposort() if u.op is Ops.PARAM}
    lost = sorted((u for u in ast.toposort() if u.op is Ops.PARAM and u.arg not in kept), key=lambda u: u.arg)
    return lowered.replace(src=(*lowered.src, *lost)) if lost else lowered


def check_dtypes(ast: UOp, caps: DeviceCaps, device: DeviceSpec, kernel: str) -> None:
    """Refuse a kernel with a buffer the device cannot hold, or a value it cannot compute
    (``caps.element_dtypes``; bools and indices are always computed)."""
    for u in ast.toposort():
        dtype = pointee(u) if u.op is Ops.PARAM else u.dtype
        if isinstance(dtype, PtrDType) or dtype in caps.element_dtypes or dtype in (dtypes.void, dtypes.index):
            continue
        if u.op is Ops.PARAM or dtype != dtypes.bool:
            held = ", ".join(sorted(d.name for d in caps.element_dtypes))
            what = f"buffer {u.arg} of {dtype.name}" if u.op is Ops.PARAM else f"{dtype.name} values"
            reason = dict(caps.unheld_reasons).get(dtype)
            why = "" if reason is None else f" ({reason})"
            raise GraphError(f"{device} cannot hold {what}{why}; its buffers and values are {held}", kernel=kernel,
                             stage="render", value=dtype.name)


@dataclass(frozen=True, slots=True)
class Lowered:
    """A kernel lowered for a device: the rewritten SINK, the status buffer its checked accesses report to
    (if any), and the values of the variables it fixes."""

    sink: UOp
    status: UOp | None
    fixed: tuple[tuple[str, int], ...]


def sole_accumulators(linear: tuple[UOp, ...]) -> dict[UOp, UOp]:
    """Each loop that updates exactly one accumulator register, with that update (a STORE). Such a loop
    is a plain reduction, which a backend may vectorise along the loop by reassociating it."""
    found = {}
    for end in linear:
        if end.op is Ops.END:
            updates = [s for s in end.src[1:] if s.op is Ops.STORE and s.src[0].src[0].op is Ops.DEFINE_REG]
            if len(updates) == 1:
                found[end.src[0]] = updates[0]
    return found


def loop_turns(linear: tuple[UOp, ...], hidden: Callable[[UOp], int]) -> UOp:
    """How many times the loops of one work item come round, at most: each loop's trips and the test that
    ends it, times the trips of the loops around it. ``hidden`` gives the turns of a loop the renderer
    writes for one instruction (a compare-exchange), around which the kernel has none."""
    total = UOp.index_const(0)
    around = [UOp.index_const(1)]
    for u in linear:
        if u.op is Ops.RANGE:
            trips = u.src[0].maximum(0)
            total = total + around[-1] * (trips + 1)
            around.append(around[-1] * trips)
        elif u.op is Ops.END and u.src[0].op is Ops.RANGE:
            around.pop()
        elif turns := hidden(u):
            total = total + around[-1] * turns
    return simplify(total)


class KernelRenderer(ABC):
    """Renders kernels for one device, as its capabilities allow: ``caps.threads`` > 1 splits CPU kernels
    across ``core_id`` workers, ``caps.work_groups`` shapes GPU launches."""

    splits_reductions: bool = False
    """Whether a kernel that is one large reduction runs as two stages (``split_reduction``) where the
    device has parallelism to spread the first over."""

    def __init__(self, device: DeviceSpec | str, caps: DeviceCaps | None = None) -> None:
        self.device = DeviceSpec.parse(device)
        self.caps = caps if caps is not None else DeviceCaps(host_memory=True, overlaps_on_host=True)

    @property
    def threads(self) -> int:
        return self.caps.threads

    @property
    def cache_key(self) -> str:
        """Names every setting that changes the rendered code."""
        return (f"{type(self).__name__}-threads{self.threads}-vregs{self.caps.vector_registers}"
                f"{'' if self.caps.native_float16 else '-half16'}")

    def decompositor(self) -> PatternMatcher | None:
        return None

    def hidden_loop_turns(self, u: UOp) -> int:
        """How many times a loop the rendered code runs for instruction ``u`` alone may come round; none by
        default."""
        return 0

    def loops_fit(self, sink: UOp) -> bool:
        """Whether the loops of one work item of ``sink`` (mid-lowering: its status buffer, if any, is its
        last source) surely come round no more often than the device lets them (``caps.max_loop_turns``)."""
        if self.caps.max_loop_turns is None:
            return True
        status = sink.src[-1] if sink.src and sink.src[-1].op is Ops.PARAM else None
        return self.unproven_loop_turns(linearize(simplify(sink), status, self.decompositor())) is None

    def unproven_loop_turns(self, linear: tuple[UOp, ...]) -> UOp | None:
        """A work item's loop turns (``loop_turns``) where the device stops its loops after
        ``caps.max_loop_turns`` and no bound keeps them within it; else None."""
        limit = self.caps.max_loop_turns
        if limit is None:
            return None
        turns = loop_turns(linear, self.hidden_loop_turns)
        return None if turns.vmax <= limit else turns

    def checked_loop_turns(self, linear: tuple[UOp, ...], kernel: str) -> UOp | None:
        """The loop turns each launch must check (``unproven_loop_turns``). A kernel that exceeds the limit
        even at the variables' smallest values is refused."""
        turns = self.unproven_loop_turns(linear)
        if turns is None:
            return None
        limit = self.caps.max_loop_turns
        least = most(turns, {v.arg[0]: v.arg[1] for v in turns.toposort() if v.op is Ops.DEFINE_VAR})
        if limit is not None and least > limit:
            raise GraphError(f"a work item's loops come round up to {least} times, and {self.device} stops them "
                             f"after {limit} without a word: give the kernel more work items, each with less to do",
                             kernel=kernel, stage="render", value=least)
        return turns

    def stages(self, ast: UOp) -> tuple[UOp, ...]:
        """The kernels ``ast`` runs as, in order: itself, or the stages of a split reduction. Stages take
        the kernel's buffers and, after them, one scratch buffer (the last PARAM of the first stage)."""
        split = split_reduction(ast) if self.splits_reductions and self.parallel else None
        return (ast,) if split is None else split

    @property
    def parallel(self) -> bool:
        """Whether the device runs a kernel's work on more than one thread or work item."""
        return self.threads > 1

    def parallelize(self, sink: UOp) -> UOp:
        """Shape the kernel's work for the device; by default for a CPU: tiles for its vector registers
        (``tile_for_cpu``), then its GLOBAL ranges spread over threads, each adding into a private copy of a
        small buffer of atomic adds, and gated loads made branch-free where that is safe."""
        tiled = tile_for_cpu(sink, self.caps.vector_registers)
        return speculate_gated_loads(privatize_atomics(split_for_threads(tiled, self.threads)))

    def lower(self, ast: UOp) -> Lowered:
        """The lowering passes of ``svod.codegen.lower``, in order."""
        validate(ast)
        kernel = kernel_label(ast)
        check_dtypes(ast, self.caps, self.device, kernel)
        sink, fixed = unbind(ast, kernel)
        sink = simplify(anchor_ranges(sink))
        check_races(sink, kernel)
        sink, status = guard_accesses(sink, kernel, self.caps.index_bits)
        sink = decompose(sink, self.decompositor())
        sink = _keep_params(simplify(self.parallelize(sink)), ast)
        return Lowered(sink, status, tuple(sorted(fixed.items())))

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        """The PROGRAM of ``ast`` built stage by stage: SINK (lowered), DEVICE, LINEAR, SOURCE."""
        name = kernel_name(ast, name)
        try:
            lowered = self.lower(ast)
            linear = linearize(lowered.sink, lowered.status, self.decompositor())
            entry = entry_symbol(name, lowered.sink)
            turns = self.checked_loop_turns(linear, kernel_label(ast))
            source = self.render_linear(entry, linear)
        except GraphError as err:
            if err.kernel is not None:
                raise
            raise GraphError(err.detail, kernel=kernel_label(ast), stage=err.stage or "render",
                             value=err.value) from err
        status = None if lowered.status is None else int(lowered.status.arg)
        return UOp.program(lowered.sink, UOp.device(self.device), UOp.linear(*linear), UOp.source(source),
                           metadata=KernelMetadata(name=name, status_slot=status, fixed=lowered.fixed,
                                                   entry=entry, loop_turns=turns))

    def render(self, ast: UOp, name: str | None = None) -> ProgramSpec:
        """Lower, linearize and render ``ast``; the spec's metadata is derived from the lowered kernel."""
        return ProgramSpec.from_uop(self.program(ast, name))

    @abstractmethod
    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        """Source code for the instruction list ``linear`` as a function called ``symbol``."""
