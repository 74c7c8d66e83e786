"""``KernelRenderer``: the shared half of every language writer, and what the writers share about an
instruction list (names scoped by blocks, lanes, plain reductions). The pipeline drives
(``svod.codegen.pipeline.program``); a renderer describes its device for it (``target``) and writes the
instruction list it is handed (``render_linear``)::

    ast ──pipeline.lower()──> lowered SINK ──linearize()──> LINEAR ──renderer.render_linear()──> SOURCE ──> PROGRAM
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from typing import TextIO

from svod.codegen import pipeline
from svod.codegen.indexing import to_poly
from svod.config import settings
from svod.device import CORE_ID, DeviceCaps, ProgramSpec
from svod.dtype import DeviceSpec, DType
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp
from svod.ir.ops import ALU, REASSOCIABLE
from svod.ir.uop import memory_of


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


def inside_loops(linear: tuple[UOp, ...]) -> Iterator[tuple[UOp, list[UOp]]]:
    """Each node of a linear kernel but its loops' ends, with the loops open around it, outermost first (the
    walk's own list: copy it to keep it)."""
    open_loops: list[UOp] = []
    for u in linear:
        if u.op is Ops.END and open_loops and u.src[0] is open_loops[-1]:
            open_loops.pop()
            continue
        yield u, open_loops
        if u.op is Ops.RANGE:
            open_loops.append(u)


def reassociable_accumulators(linear: tuple[UOp, ...]) -> dict[UOp, tuple[UOp, ...]]:
    """Each loop whose sums a backend may vectorise along it by reassociating them, with their updates (STOREs
    to accumulator registers): a loop that updates exactly one accumulator (a plain reduction), or whose
    updates lowering marked ``REASSOCIABLE`` (``svod.codegen.upcast.stream_rows``,
    ``svod.codegen.lower.share_reduction_loops``), with any integer sums beside them (exact in any order). Any
    other loop with accumulators is a register tile's, whose sums keep their order."""
    found = {}
    for end in linear:
        if end.op is Ops.END:
            updates = tuple(s for s in end.src[1:] if s.op is Ops.STORE and s.src[0].src[0].op is Ops.DEFINE_REG)
            marked = [u.src[1].arg == REASSOCIABLE for u in updates]
            if len(updates) == 1 or (any(marked) and all(m or _integer_sum(u) for m, u in zip(marked, updates,
                                                                                                strict=True))):
                found[end.src[0]] = updates
    return found


def _integer_sum(update: UOp) -> bool:
    return update.src[1].op is Ops.ADD and update.src[1].dtype.is_int


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


_LAUNCH_VALUES = ALU | {Ops.CONST, Ops.DEFINE_VAR, Ops.CAST, Ops.BITCAST}
"""The ops of a value the same for the whole launch: arithmetic on constants and variables."""


def _same_for_the_launch(value: UOp) -> bool:
    """Whether ``value`` is arithmetic on constants and the kernel's variables, not on the thread's core."""
    return all(u.op in _LAUNCH_VALUES and not (u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID)
               for u in value.toposort())


def launch_gates(linear: tuple[UOp, ...], lanes: Mapping[UOp, int]) -> list[UOp]:
    """The gates of accesses that hold or fail for the whole launch, in program order: functions of the
    kernel's variables alone, not of the thread's core (an image of ``h`` rows read at ``min(y, h - 1)`` is
    in it when ``h >= 1``). A renderer may run a copy of the kernel in which they hold, ungated: LLVM's loop
    vectoriser stops at an access behind a branch, and does not unswitch a loop on a condition that does
    not vary in it. Of a gate and its negation (a kernel's two paths, as a private copy of a histogram
    that fits and the global atomics where it does not), the first met: both cannot hold."""
    gates: dict[UOp, None] = {}
    for u in linear:
        if u.op in (Ops.LOAD, Ops.STORE, Ops.ATOMIC) and u.src[0].op is Ops.INDEX and len(u.src[0].src) == 3:
            gate = u.src[0].src[2]
            if gate not in lanes and _same_for_the_launch(gate) and not any(_negates(gate, g) for g in gates):
                gates[gate] = None
    return list(gates)


def _negates(a: UOp, b: UOp) -> bool:
    """Whether boolean ``a`` is ``not b`` or ``b`` is ``not a`` (``x != True``, as the IR spells a negation)."""
    def negation_of(x: UOp, y: UOp) -> bool:
        return x.op is Ops.CMPNE and x.src[0] is y and x.src[1].op is Ops.CONST and x.src[1].arg is True
    return negation_of(a, b) or negation_of(b, a)


def contiguous(offset: UOp, lane: UOp) -> bool:
    """Whether ``offset`` is ``lane`` plus terms without it: lane ``c`` reads the element ``c`` past lane 0's."""
    terms = to_poly(offset).terms
    return terms.get((lane,)) == 1 and not any(lane in atom.toposort() for m in terms if m != (lane,) for atom in m)


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

    @property
    def target(self) -> pipeline.Target:
        """This renderer's device, as the pipeline needs to know it."""
        return pipeline.Target(self.device, self.caps, self.decompositor(), self)

    def parts(self, ast: UOp) -> tuple[UOp, ...]:
        """The kernels ``ast`` runs as, in order (``pipeline.parts``)."""
        return pipeline.parts(ast, self.target, _trace())

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        """The PROGRAM of ``ast`` on this renderer's device (``pipeline.program``)."""
        return pipeline.program(ast, self.target, name, _trace())

    def render(self, ast: UOp, name: str | None = None) -> ProgramSpec:
        """The spec of ``ast``'s PROGRAM (``program``), read from the metadata the pipeline derived."""
        return ProgramSpec.of(self.program(ast, name))

    def shuffle_down(self, dtype: DType, value: str, distance: int) -> str:
        """The expression of ``Ops.SHUFFLE_DOWN``, in a language with warps (``DeviceCaps.warp_size``)."""
        raise GraphError(f"{type(self).__name__} has no warps to exchange values in", stage="render",
                         value=distance)

    @abstractmethod
    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        """Source code for the instruction list ``linear`` as a function called ``symbol``."""
