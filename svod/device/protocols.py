"""The roles a backend fills: a ``Renderer`` makes source, a ``Compiler`` compiles it, and a runtime
factory turns the result into a ``Program`` that runs. Optionally, a runtime factory also replays a
prepared plan natively (``PlanReplayer``), from a description of the plan's work that names no device:

::

    ReplayKernel   a step's program launches (one, or one per part of a kernel in parts), with its Python runner
    ReplayCopy     a memmove between two host buffers
    ReplayLoop     body repeated for var in range(start, stop, step), left early after a turn that sets
                   a condition (until)
    ReplayBranch   then or otherwise, as a condition says
    ReplayWhile    body repeated while a condition holds, tested before each turn
    ReplayHost     Python work (steps run on host threads at once, a step with no native form)

A condition (``HostCondition``) is the first element of a one-element buffer in host memory, which a kernel
wrote; a control step whose buffer is a device's own is Python's work. A plan prepares these once, in run
order, and the replayer turns them into a ``PlanReplay`` that runs them all from one call, through a piece's
Python runner (every piece has one) where it has no native form of its own. The CPU's dispatcher is one
replayer; a CUDA graph would be another.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from svod.device.launch import LaunchShape
from svod.device.spec import CompiledSpec, ProgramSpec, Variable
from svod.dtype import DeviceSpec
from svod.ir import PatternMatcher, UOp

if TYPE_CHECKING:
    import numpy as np


class Launch(Protocol):
    """A program bound to its buffers once, for replay: each call passes only what changes per run, and
    may return before the device finishes (``Device.synchronize`` waits)."""

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None: ...


@runtime_checkable
class Program(Protocol):
    """A loaded kernel. Stateless and reentrant: one program may run on several host threads at once.

    ``buffers`` are raw addresses or backend handles in kernel argument order; ``vals`` are variable
    values in ``var_names`` order; launch sizes are the evaluated ones of this dispatch. ``execute``
    returns when the kernel has finished; ``bind`` prepares a ``Launch`` for replays.
    """

    name: str

    def execute(self, buffers: Sequence[Any], vals: Sequence[int],
                global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None: ...

    def bind(self, buffers: Sequence[Any]) -> Launch: ...


class ProgramBase(ABC):
    """What every program shares: ``bind`` that replays through ``execute``. Backends whose launches can
    be prepared (argument arrays, kernel arguments) override it."""

    @abstractmethod
    def execute(self, buffers: Sequence[Any], vals: Sequence[int],
                global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None: ...

    def bind(self, buffers: Sequence[Any]) -> Launch:
        bound = list(buffers)

        def launch(vals: Sequence[int], global_size: tuple[int, int, int],
                   local_size: tuple[int, int, int] | None) -> None:
            self.execute(bound, vals, global_size, local_size)

        return launch


@runtime_checkable
class Compiler(Protocol):
    """Turns a rendered ``ProgramSpec`` into a ``CompiledSpec``.

    ``cache_key`` names everything that changes the output (toolchain, version, target, flags): compiled
    code is cached under it, so two compilers with one key must produce interchangeable code.
    """

    cache_key: str

    def compile(self, spec: ProgramSpec) -> CompiledSpec: ...

    def compile_many(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        """Compile several kernels at once, in order (a plan's kernels, for one)."""
        ...


class CompilerBase(ABC):
    """``compile_many`` for compilers that run outside the GIL (a C compiler process, an OpenCL
    driver, nvrtc): one thread per kernel, up to the number of cores."""

    cache_key: str

    @abstractmethod
    def compile(self, spec: ProgramSpec) -> CompiledSpec: ...

    def compile_many(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        if len(specs) <= 1:
            return [self.compile(spec) for spec in specs]
        from concurrent.futures import ThreadPoolExecutor  # here: ``import svod`` does not need the thread pools

        with ThreadPoolExecutor(max_workers=min(len(specs), os.cpu_count() or 1)) as pool:
            return list(pool.map(self.compile, specs))


@runtime_checkable
class Renderer(Protocol):
    """Lowers a kernel AST for ``device`` and renders it to source, as a ``ProgramSpec``."""

    device: DeviceSpec

    @property
    def cache_key(self) -> str:
        """Names every setting that changes the rendered code (with the compiler's, it keys compiled code)."""

    def render(self, ast: UOp, name: str | None = None) -> ProgramSpec: ...

    def decompositor(self) -> PatternMatcher | None: ...

    def parts(self, ast: UOp) -> tuple[UOp, ...]:
        """The kernels ``ast`` runs as, its parts, in order (itself, unless the device splits it)."""
        ...

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        """The PROGRAM of one of those kernels: SINK, DEVICE, LINEAR, SOURCE, with its metadata whole
        (``ProgramSpec.of`` reads it; ``render`` is that spec)."""
        ...


RuntimeFactory = Callable[[CompiledSpec], Program]
"""Loads a compiled kernel into a runnable ``Program``."""


# ---- native replay of a plan ----------------------------------------------------------------------------

Runner = Callable[[MutableMapping[str, int]], None]
"""Python work of a run, given the values of the run's variables and of the loops around it."""

Site = tuple[Any, int, int]
"""Where a buffer's address is kept: (array of machine words, index, byte offset into the storage).
Binding other memory to the storage for one run writes its address plus the offset there, and the old
one back afterwards."""


class HostArguments(ABC):
    """A ``Launch`` that keeps its arguments in host memory of its own for as long as it lives, where its
    callers may read and write them: ``buffer_addresses`` holds the buffers' addresses in argument order
    (writing one points the launch at other memory); ``variable_values(initial)`` sets its variable values
    and returns them as a sequence that shows those of its last run, whoever ran it. A base class, not a
    protocol: a plan asks each of its launches, and a protocol's ``isinstance`` costs microseconds."""

    __slots__ = ()

    @property
    @abstractmethod
    def buffer_addresses(self) -> Any: ...

    @abstractmethod
    def variable_values(self, initial: Sequence[int]) -> MutableSequence[int]: ...

    @abstractmethod
    def with_values(self, vals: Sequence[int], global_size: tuple[int, int, int],
                    local_size: tuple[int, int, int] | None) -> Callable[[], None]:
        """This launch with ``vals`` set now, as a call of no arguments that runs it with them at these sizes:
        for a caller that alone runs it, with the same values every time (the values a call sets are written
        once, not per run)."""

    def array_call(self, vals: Sequence[int], global_size: tuple[int, int, int], arguments: int,
                   arrays: Sequence[CallArray], apart: Sequence[tuple[int, int]], scalars: Sequence[CallScalar] = ()
                   ) -> Callable[[tuple[Any, ...]], bool] | None:
        """This launch's program with ``vals`` at these sizes as a call of a call's ``arguments`` arguments (a
        tuple) that checks the numpy arrays ``arrays`` among them (no two of ``apart``, indices into ``arrays``,
        sharing memory) and the numbers ``scalars`` (each setting a variable of ``vals``, checked as
        ``Variable.checked`` checks it) and runs it on them, in native code: it answers True where it ran, False
        where the arguments are not as these say (the caller checks them then). Reentrant: it keeps its
        arguments apart from this launch's. None where the device has no such call."""
        return None


@dataclass(frozen=True, slots=True)
class CallArray:
    """A numpy array a call's signature fixes (``HostArguments.array_call``): its position among the call's
    arguments, its dtype (this object: an equal one of another identity is checked in Python), its shape, and
    whether the kernel writes it."""

    position: int
    dtype: np.dtype
    shape: tuple[int, ...]
    written: bool


@dataclass(frozen=True, slots=True)
class CallScalar:
    """A number a call's signature passes as a kernel variable's value (``HostArguments.array_call``): its position
    among the call's arguments, the slot of the variable among the kernel's values, its Python type (``int`` or
    ``float``, as the call's key fixes it), and the variable (its bounds; a runtime scalar's dtype)."""

    position: int
    slot: int
    kind: type
    variable: Variable


@runtime_checkable
class HostArrayChecks(Protocol):
    """A runtime factory that checks a call's numpy arrays in native code (the CPU's): ``array_addresses`` is
    a call of a call's ``arguments`` arguments (a tuple) that answers the addresses of ``arrays`` among them
    (no two of ``apart``, indices into ``arrays``, sharing memory), or None where the arguments are not as these
    say (the caller checks them then); or None where it cannot check such arrays."""

    def array_addresses(self, arguments: int, arrays: Sequence[CallArray], apart: Sequence[tuple[int, int]]
                        ) -> Callable[[tuple[Any, ...]], list[int] | None] | None: ...


@dataclass(slots=True)
class BufferAddress:
    """A buffer's address as a step uses it, with its storage (``id`` of the base buffer) and its byte
    offset there."""

    value: int
    storage: int
    offset: int


@dataclass(slots=True)
class KernelCall:
    """One program launch: the launch bound to its buffers, its variables in argument order, its sizes."""

    launch: Launch
    var_names: tuple[str, ...]
    shape: LaunchShape


@dataclass(slots=True)
class ReplayKernel:
    """A kernel step: its launches in order (none where only its Python runner may run it), the variable
    values fixed for it, its Python runner (which does everything the launches do) and its name, for
    errors."""

    calls: tuple[KernelCall, ...]
    fixed: Mapping[str, int]
    run: Runner
    owner: str


@dataclass(slots=True)
class ReplayCopy:
    """A copy of ``nbytes`` between two buffers in host memory, with its Python runner and its name."""

    dst: BufferAddress
    src: BufferAddress
    nbytes: int
    run: Runner
    owner: str


@dataclass(slots=True)
class HostCondition:
    """The first element of a one-element buffer in host memory that decides a branch or a loop's end, as a
    native test reads it: where it lies (``address.value``, repointed with the storage's other addresses when
    an array is bound per run), its size in bytes and whether it is a float. It holds as Python's ``bool`` of
    the value says: a float unless it is zero of either sign (NaN holds), an integer or a bool unless every
    bit is zero. The test reads it without waiting: the work before it has finished (a launch on a device
    whose buffers are host memory returns when the kernel is done, and a Python runner's work is done when
    it returns)."""

    address: BufferAddress
    size: int
    floating: bool


@dataclass(slots=True)
class ReplayLoop:
    """``body`` once per value of ``var`` in ``range(start, stop, step)``, left after the first turn that
    leaves ``until`` holding (a ``break``); the bounds are integer expressions of the run's variables and the
    enclosing loops'. ``run`` is its Python runner: the whole loop, its body's steps dispatched from Python."""

    var: str
    start: UOp
    stop: UOp
    step: UOp
    body: tuple[ReplayItem, ...]
    run: Runner
    owner: str
    until: HostCondition | None = None


@dataclass(slots=True)
class ReplayBranch:
    """The pieces of ``then`` where ``condition`` holds when the branch is reached, else those of
    ``otherwise``; ``run`` is its Python runner."""

    condition: HostCondition
    then: tuple[ReplayItem, ...]
    otherwise: tuple[ReplayItem, ...]
    run: Runner
    owner: str


@dataclass(slots=True)
class ReplayWhile:
    """``body`` turn after turn while ``condition``, tested before each turn, holds (the body computes it
    again); ``run`` is its Python runner."""

    condition: HostCondition
    body: tuple[ReplayItem, ...]
    run: Runner
    owner: str


@dataclass(slots=True)
class ReplayHost:
    """Work Python does at this point of the run."""

    run: Runner
    owner: str


ReplayItem = ReplayKernel | ReplayCopy | ReplayLoop | ReplayBranch | ReplayWhile | ReplayHost
"""One piece of a plan's work. The pieces are made anew for each plan a device replays, one or more per
step, so they are plain records (a frozen dataclass's ``__init__`` costs a call per field)."""


class PlanReplay(Protocol):
    """A plan's work prepared for native replay. ``run`` does all of it once with the run's variable values,
    and raises the error that stopped it, naming the step (a launch size that is not positive, launch-size
    arithmetic that overflows, a Python runner's own exception). ``values`` are the variables' values as of
    the last run, loop variables included. ``sites`` are where it keeps buffer addresses, per storage."""

    @property
    def sites(self) -> Mapping[int, Sequence[Site]]: ...

    def run(self, values: Mapping[str, int]) -> None: ...

    def values(self) -> dict[str, int]: ...


@runtime_checkable
class PlanReplayer(Protocol):
    """A runtime factory that also replays plans of the programs it loads natively. ``replay`` builds the
    replay of ``work`` (in run order) whose runs supply the variables ``inputs``, or returns None where
    some of it has no native form that it can fall back from (a launch size it cannot evaluate)."""

    def replay(self, work: Sequence[ReplayItem], inputs: Sequence[str]) -> PlanReplay | None: ...
