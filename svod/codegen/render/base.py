"""``KernelRenderer``: the shared half of every renderer. It lowers an AST for its device (the passes of
``svod.codegen.pipeline``), linearizes it, and hands the instruction list to the language-specific
``render_linear``.

::

    ast ──pipeline.lower()──> lowered SINK ──linearize()──> LINEAR ──render_linear()──> source ──> ProgramSpec
"""

from __future__ import annotations

import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TextIO

from svod.codegen import pipeline
from svod.codegen.indexing import to_poly
from svod.config import settings
from svod.device import DeviceCaps, KernelMetadata, ProgramSpec, entry_symbol
from svod.device.launch import most
from svod.dtype import DeviceSpec
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp, simplify
from svod.ir.uop import memory_of
from svod.ir.validate import kernel_label

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def kernel_name(ast: UOp, name: str | None) -> str:
    """A C identifier for the kernel: the given name, the SINK's name, or ``kernel``."""
    raw = name or kernel_label(ast)
    ident = _NOT_IDENTIFIER.sub("_", raw)
    return ident if ident[0].isalpha() else "k_" + ident


def _trace() -> TextIO | None:
    """Where the lowering passes report (``SVOD_DEBUG=passes``), if anywhere."""
    return sys.stderr if settings.debug_passes else None


class ScopedNames(dict[UOp, str]):
    """Each node's name in the rendered code, scoped by the loops and IFs it is defined in. The linearizer
    may place one value twice: in a block, and later hoisted before a block that encloses that one (a
    masked tile's gate, in its reduction's loads and at its store). The inner place names it only until
    its block closes; after the block, the code sees the name from before it again, whose definition comes
    first and dominates what follows."""

    def __init__(self) -> None:
        super().__init__()
        self._before: list[dict[UOp, str | None]] = []
        """For each open block, the name each node renamed in it had when it opened (None: it had none)."""

    def open(self) -> None:
        self._before.append({})

    def close(self) -> None:
        for node, name in self._before.pop().items():
            if name is not None:
                super().__setitem__(node, name)

    def __setitem__(self, node: UOp, name: str) -> None:
        if self._before and node not in self._before[-1]:
            self._before[-1][node] = self.get(node)
        super().__setitem__(node, name)


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


def lane_widths(linear: tuple[UOp, ...]) -> tuple[dict[UOp, int], dict[UOp, int]]:
    """How many lanes each instruction of more than one computes, and each accumulator register of more than
    one holds: a LANE's width; an INDEX's from its offset and gate (not from its memory); a register's from
    the values stored into it, and its loads hold as many. Registers are loaded before their first store in
    order, so the walk repeats until nothing changes."""
    widths: dict[UOp, int] = {}
    registers: dict[UOp, int] = {}
    changed = True
    while changed:
        changed = False
        for u in linear:
            if u.op is Ops.LANE:
                width = int(u.arg)
            elif u.op is Ops.INDEX:
                width = max((widths.get(s, 1) for s in u.src[1:]), default=1)
            elif u.op in (Ops.AFTER, Ops.END, Ops.RANGE, Ops.IF, Ops.DEFINE_REG):
                continue
            elif u.op is Ops.LOAD and memory_of(u.src[0].src[0]).op is Ops.DEFINE_REG:
                width = registers.get(memory_of(u.src[0].src[0]), 1)
            else:
                width = max((widths.get(s, 1) for s in u.src), default=1)
            if u.op is Ops.STORE and memory_of(u.src[0].src[0]).op is Ops.DEFINE_REG:
                register = memory_of(u.src[0].src[0])
                width = max(width, registers.get(register, 1))  # its first value too, a scalar identity
                if width > 1 and registers.get(register) != width:
                    registers[register] = width
                    changed = True
            if width > 1 and widths.get(u) != width:
                widths[u] = width
                changed = True
    return widths, registers


def contiguous(offset: UOp, lane: UOp) -> bool:
    """Whether ``offset`` is ``lane`` plus terms without it: lane ``c`` reads the element ``c`` past lane 0's."""
    terms = to_poly(offset).terms
    return terms.get((lane,)) == 1 and not any(lane in atom.toposort() for m in terms if m != (lane,) for atom in m)


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
    across ``core_id`` workers, ``caps.work_groups`` shapes GPU launches (``pipeline.passes``)."""

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
                f"-l2{self.caps.l2_bytes}{'' if self.caps.native_float16 else '-half16'}")

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
        return self.unproven_loop_turns(pipeline.linearize(simplify(sink), status, self.target)) is None

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
            if any(u.op is Ops.LOAD for u in turns.toposort()):
                raise GraphError(f"a loop's bound is read from memory, so nothing keeps its turns within the "
                                 f"{limit} after which {self.device} stops a work item's loops without a word: run "
                                 "the kernel on another device, or bound the loop by a size and skip the turns past "
                                 "the one read (for k in range(width): if k < count: ...)", kernel=kernel,
                                 stage="render", value=limit)
            raise GraphError(f"a work item's loops come round up to {least} times, and {self.device} stops them "
                             f"after {limit} without a word: give the kernel more work items, each with less to do",
                             kernel=kernel, stage="render", value=least)
        return turns

    @property
    def target(self) -> pipeline.Target:
        """What the lowering passes need to know of this renderer's device."""
        return pipeline.Target(self.device, self.caps, self.decompositor(), self.loops_fit)

    def stages(self, ast: UOp) -> tuple[UOp, ...]:
        """The kernels ``ast`` runs as, in order (``pipeline.stages``)."""
        return pipeline.stages(ast, self.target, _trace())

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        """The PROGRAM of ``ast`` built stage by stage: SINK (lowered), DEVICE, LINEAR, SOURCE."""
        name = kernel_name(ast, name)
        try:
            lowered = pipeline.lower(ast, self.target, _trace())
            linear = pipeline.linearize(lowered.sink, lowered.status, self.target, _trace())
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
