"""A kernel that needs more than one program launch on the user's buffers: it runs as parts
(``svod.codegen.pipeline.parts``: a large reduction split in two, or a CPU matmul in blocks that packs
``b`` or sums into scratch first), or it has buffers of its own (the scratch those parts share, the status
buffer its bounds-checked accesses report to, the buffer its requirements are recorded in), or both.

Each launch allocates its own buffers from the device, so the composite stays stateless and reentrant like
any program; a bound launch (a plan's step) allocates them once. After the parts, the status buffer is
read: a recorded failure raises ``IndexOutOfBoundsError`` naming the buffer, its size and the index; then the
requirements: one recorded failed raises ``RequirementError`` with its message.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.codegen import status_slots
from svod.device import Allocator, HostArguments, LaunchShape, Program, ProgramBase
from svod.device.allocator import HostMemory, serves_host_memory
from svod.device.launch import evaluate
from svod.dtype import DType, dtypes
from svod.errors import IndexOutOfBoundsError, RequirementError
from svod.ir import Ops, UOp


@dataclass(frozen=True, slots=True)
class Part:
    program: Program
    var_names: tuple[str, ...]
    launch: LaunchShape
    slots: tuple[int, ...]
    """The buffer slots the part's program takes, in its argument order."""


@dataclass(frozen=True, slots=True)
class OwnBuffers:
    """The buffers a kernel allocates for itself: slot -> bytes, an expression of the kernel's variables (a
    packed copy of a matrix of variable size is), and which slot (if any) is the status (of constant size)."""

    sizes: Mapping[int, UOp]
    status: int | None
    status_dtype: DType = dtypes.int64
    requirements: int | None = None
    """The slot of the buffer the kernel's requirements are recorded in (int32, ``svod.codegen.requirements``)."""
    messages: tuple[str, ...] = ()
    """Each requirement's message, in the order of its element."""

    @property
    def records(self) -> tuple[int, ...]:
        """The slots of the buffers a run records failures in, zeroed when allocated and read after each run."""
        return tuple(slot for slot in (self.status, self.requirements) if slot is not None)

    @property
    def sized(self) -> bool:
        """Whether a buffer's size depends on the kernel's variables, so a bound launch sizes it per run."""
        return any(size.op is not Ops.CONST for size in self.sizes.values())

    def nbytes(self, values: Mapping[str, int]) -> dict[int, int]:
        return {slot: evaluate(size, values) for slot, size in self.sizes.items()}


SPARE_BYTES = 1 << 16
"""A run's own buffers are kept for the next run of the program where they total no more than this: a status,
the requirements and a split reduction's partials are; a matmul's packed copy of ``b`` is allocated per run. A
small kernel's call spent most of its time allocating, zeroing and freeing them."""

SPARE_RUNS = 4
"""How many sets of own buffers a program keeps: one for each of as many threads calling it at once."""


class OwnMemory:
    """The own buffers of a run (a bound launch's, or one call's): a handle and size by slot, each buffer's
    address, and, where every record buffer is host memory, a view of each beside as many zero bytes:
    ``recorded`` sees a run that recorded nothing in one look at them, not a copy of them out. The record
    buffers are zero whenever no run is under way: zeroed here, and again by the check that finds one set."""

    def __init__(self, own: OwnBuffers, allocator: Allocator, nbytes: Mapping[int, int]) -> None:
        self.own = own
        self.allocator = allocator
        self.nbytes: dict[int, int] = {}
        self.handles: dict[int, Any] = {}
        self.addresses: dict[int, Any] = {}
        self.records: tuple[tuple[np.ndarray, bytes], ...] | None = None
        self.total = 0
        self.bound: list[tuple[Part, Any, tuple[tuple[int, int], ...] | None]] | None = None
        """Each part's launch bound to these buffers, where a call binds them (``PartsProgram.launches``)."""
        self.grow(nbytes)

    def grow(self, wanted: Mapping[int, int]) -> frozenset[int]:
        """Buffers at least as large as ``wanted`` says, allocating anew those smaller: the slots allocated."""
        grown = frozenset(slot for slot, size in wanted.items() if size > self.nbytes.get(slot, -1))
        if not grown:
            return grown
        made: dict[int, Any] = {}
        try:  # every new buffer first: one that cannot be had leaves the old ones, which the launches point at
            for slot in sorted(grown):
                made[slot] = self.allocator.allocate(wanted[slot])
                if slot in self.own.records:
                    self.allocator.copyin(made[slot], memoryview(bytes(wanted[slot])))
        except BaseException:
            for slot, handle in made.items():
                self.allocator.free(handle, wanted[slot])
            raise
        for slot, handle in made.items():
            if slot in self.handles:
                self.allocator.free(self.handles[slot], self.nbytes[slot])
            self.handles[slot], self.nbytes[slot] = handle, wanted[slot]
            self.addresses[slot] = self.allocator.address(handle)
        views = [(handle.array[:self.nbytes[slot]], bytes(self.nbytes[slot])) for slot in self.own.records
                 if isinstance(handle := self.handles.get(slot), HostMemory)]
        self.records = tuple(views) if len(views) == len(self.own.records) else None
        self.total = sum(self.nbytes.values())
        self.bound = None
        return grown

    def recorded(self) -> bool:
        """Whether the last run may have recorded a failure (where the records are not host memory, it may)."""
        return self.records is None or any(view.tobytes() != zeros for view, zeros in self.records)

    def clear_records(self) -> None:
        """Zero every record buffer: a check an interrupt stopped may have left one set."""
        for slot in self.own.records:
            if slot in self.handles:
                self.allocator.copyin(self.handles[slot], memoryview(bytes(self.nbytes[slot])))

    def free(self) -> None:
        for slot, handle in self.handles.items():
            self.allocator.free(handle, self.nbytes[slot])
        self.handles.clear()
        self.nbytes.clear()
        self.addresses.clear()
        self.total, self.bound = 0, None


def _free_spares(spares: list[OwnMemory]) -> None:
    while spares:
        spares.pop().free()


class PartsProgram(ProgramBase):
    """Runs ``parts`` one after another on the user's buffers (``user_slots``) and its own; ``vals``
    follow ``var_names``. ``sizes`` are the user buffers' element counts, for error messages. A call's own
    buffers are those a call before it left (``SPARE_BYTES``), else allocated."""

    def __init__(self, name: str, parts: Sequence[Part], var_names: Sequence[str], user_slots: Sequence[int],
                 own: OwnBuffers, allocator: Allocator, sizes: Mapping[int, UOp]) -> None:
        self.name = name
        self.parts = tuple(parts)
        self.var_names = tuple(var_names)
        self.user_slots = tuple(user_slots)
        self.own = own
        self.allocator = allocator
        self.sizes = dict(sizes)
        self.const_nbytes = None if own.sized else {slot: int(size.arg) for slot, size in own.sizes.items()}
        self.host = serves_host_memory(allocator)
        """Whether a buffer is its host address, so that a part's launch may be bound before a call's are known."""
        self._spares: list[OwnMemory] = []
        weakref.finalize(self, _free_spares, self._spares)

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        values = dict(zip(self.var_names, vals, strict=True))
        memory = self._take(values)
        table: dict[int, Any] | None = None  # every buffer by slot, for parts whose launch is not bound
        try:
            for part, launch, users in self.launches(memory):
                dims = part.launch.dims(values)
                if users is None:
                    if table is None:
                        table = dict(zip(self.user_slots, buffers, strict=True)) | memory.addresses
                    part.program.execute([table[s] for s in part.slots], [values[n] for n in part.var_names],
                                         dims.global_size, dims.local_size)
                    continue
                addresses = launch.buffer_addresses
                for index, position in users:
                    addresses[index] = buffers[position]
                launch([values[n] for n in part.var_names], dims.global_size, dims.local_size)
        except BaseException:
            memory.free()  # a run stopped before its check may leave a record set
            raise
        try:
            if memory.recorded():
                self.check(memory, values)
        finally:  # the check clears every record, also where an interrupt stops it
            self._give(memory)

    def launches(self, memory: OwnMemory) -> list[tuple[Part, Any, tuple[tuple[int, int], ...] | None]]:
        """Each part with its launch bound to ``memory`` once, and where in that launch's arguments each of the
        user's buffers goes (index, the buffer's position in a call's): a call writes its buffers' addresses
        there, where making a part's argument arrays anew took longer than its run. None in place of those
        where a launch keeps its arguments elsewhere, or the device's buffers are not host memory (the call then
        runs the part's program)."""
        if memory.bound is None:
            positions = {slot: position for position, slot in enumerate(self.user_slots)}
            memory.bound = []
            for part in self.parts:
                launch = part.program.bind([memory.addresses.get(slot, 0) for slot in part.slots]) \
                    if self.host else None
                users = tuple((index, positions[slot]) for index, slot in enumerate(part.slots) if slot in positions)
                memory.bound.append((part, launch, users if isinstance(launch, HostArguments) else None))
        return memory.bound

    def _take(self, values: Mapping[str, int]) -> OwnMemory:
        """Own buffers for a run with ``values``: a spare set grown to fit, else a new one."""
        nbytes = self.own.nbytes(values) if self.const_nbytes is None else self.const_nbytes
        try:
            memory = self._spares.pop()  # atomic: threads calling at once each take their own
        except IndexError:
            return OwnMemory(self.own, self.allocator, nbytes)
        if self.const_nbytes is None:  # (a spare of constant sizes fits)
            try:
                memory.grow(nbytes)
            except BaseException:
                memory.free()  # (a device's memory is not returned by the collector)
                raise
        return memory

    def _give(self, memory: OwnMemory) -> None:
        if memory.total <= SPARE_BYTES and len(self._spares) < SPARE_RUNS:
            self._spares.append(memory)
        else:
            memory.free()

    def check(self, memory: OwnMemory, values: Mapping[str, int]) -> None:
        """Raise ``IndexOutOfBoundsError`` for the first buffer the status records a failure for, else
        ``RequirementError`` for the first requirement recorded failed; every record is cleared first, so none
        is left standing to fail the next run that uses ``memory`` (where an interrupt stops the reading, all
        of them are)."""
        try:
            failures = [self._out_of_bounds(memory.handles, values), self._required(memory.handles)]
        except BaseException:
            memory.clear_records()
            raise
        failure = next((f for f in failures if f is not None), None)
        if failure is not None:
            raise failure

    def _out_of_bounds(self, handles: Mapping[int, Any], values: Mapping[str, int]) -> IndexOutOfBoundsError | None:
        if self.own.status is None:
            return None
        record = self._read(handles[self.own.status], self.own.status, self.own.status_dtype, values)
        for slot in self.user_slots:
            flag, where = status_slots(slot)
            if record[flag]:
                return IndexOutOfBoundsError(kernel=self.name, slot=slot, size=evaluate(self.sizes[slot], values),
                                             index=int(record[where]))
        return None

    def _required(self, handles: Mapping[int, Any]) -> RequirementError | None:
        if self.own.requirements is None:
            return None
        record = self._read(handles[self.own.requirements], self.own.requirements, dtypes.int32, {})
        failed = [message for message, flag in zip(self.own.messages, record, strict=True) if flag]
        return RequirementError(failed[0], kernel=self.name, stage="execute") if failed else None

    def _read(self, handle: Any, slot: int, dtype: DType, values: Mapping[str, int]) -> np.ndarray:
        """The record buffer ``slot`` holds, which is then zeroed where it records a failure."""
        nbytes = evaluate(self.own.sizes[slot], values)
        record = np.zeros(nbytes // dtype.itemsize, dtype.numpy)
        self.allocator.copyout(record.data, handle)
        if record.any():
            self.allocator.copyin(handle, memoryview(bytes(nbytes)))
        return record

    def bind(self, buffers: Sequence[Any]) -> PartsLaunch:
        return PartsLaunch(self, buffers)


class PartsLaunch:
    """A parts program bound to its buffers: its own buffers are allocated once (one of variable size when a
    run first needs it, and again when a run needs more), each part is bound, and ``check`` reads the status
    after a run (a plan calls it once the device is synchronized)."""

    def __init__(self, program: PartsProgram, buffers: Sequence[Any]) -> None:
        self.program = program
        self.buffers = tuple(buffers)
        own = program.own
        self.memory = OwnMemory(own, program.allocator,
                                {slot: int(size.arg) for slot, size in own.sizes.items() if size.op is Ops.CONST})
        # a finalizer that holds the memory frees it: a __del__ could run after the collector released it
        # with the launch (a plan is a reference cycle), and hand the pool buffers already released
        weakref.finalize(self, self.memory.free)
        table = self.table()
        self.launches = [(part, part.program.bind([table.get(s, 0) for s in part.slots])) for part in program.parts]
        self.values: dict[str, int] = {}
        self.resizes = own.sized
        """Whether a run may allocate (``fit``): such a launch runs from Python, never a native replay."""

    def table(self) -> dict[int, Any]:
        return dict(zip(self.program.user_slots, self.buffers, strict=True)) | self.memory.addresses

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        self.values = dict(zip(self.program.var_names, vals, strict=True))
        if self.resizes:
            self.fit(self.values)
        for part, launch in self.launches:
            dims = part.launch.dims(self.values)
            launch([self.values[n] for n in part.var_names], dims.global_size, dims.local_size)

    def fit(self, values: Mapping[str, int]) -> None:
        """Own buffers at least as large as a run with ``values`` needs, the parts pointed at any allocated
        anew: in place where a part keeps its arguments in host memory (a plan's record of the user buffers'
        addresses there stays true), bound again where it does not."""
        grown = self.memory.grow(self.program.own.nbytes(values))
        if not grown:
            return
        table = self.table()
        for position, (part, launch) in enumerate(self.launches):
            if not isinstance(launch, HostArguments):
                self.launches[position] = (part, part.program.bind([table[s] for s in part.slots]))
                continue
            for index, slot in enumerate(part.slots):
                if slot in grown:
                    launch.buffer_addresses[index] = table[slot]

    @property
    def checks(self) -> bool:
        return bool(self.program.own.records)

    def on_host(self) -> PartsOnHost | None:
        """This launch as a caller that alone runs it on host memory uses it (``PartsOnHost``); None where a part
        keeps its arguments elsewhere or a run may allocate."""
        hosts = [launch for _, launch in self.launches if isinstance(launch, HostArguments)]
        if self.resizes or len(hosts) != len(self.launches) or self.memory.records is None:
            return None
        return PartsOnHost(self, hosts)

    def recorded(self) -> bool:
        return self.memory.recorded()

    def check(self) -> None:
        if self.memory.recorded():
            self.program.check(self.memory, self.values)


class PartsOnHost:
    """A parts launch for a caller that alone runs it on host memory (a prepared call's, ``CachedKernel.launch_at``),
    as a one-part launch serves one: ``buffer_addresses[:n] = addresses`` points every part at the user's buffers,
    and ``with_values`` sets each part's values once and gives a call of no arguments that runs the parts and looks
    at the records: a call then neither takes own buffers nor binds the parts anew (``PartsProgram.execute``), work
    that cost a small kernel's call more than the rest of it."""

    __slots__ = ("buffer_addresses", "hosts", "launch")

    def __init__(self, launch: PartsLaunch, hosts: Sequence[HostArguments]) -> None:
        """``hosts``: each part's launch, as host arguments."""
        self.launch = launch
        self.hosts = tuple(hosts)
        sites: list[list[tuple[Any, int]]] = [[] for _ in launch.program.user_slots]
        positions = {slot: position for position, slot in enumerate(launch.program.user_slots)}
        for (part, _), host in zip(launch.launches, self.hosts, strict=True):
            for index, slot in enumerate(part.slots):
                if slot in positions:
                    sites[positions[slot]].append((host.buffer_addresses, index))
        self.buffer_addresses = UserAddresses(tuple(tuple(s) for s in sites))

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        values = dict(zip(self.launch.program.var_names, vals, strict=True))
        _run_parts((functools.partial(self.launch, vals, global_size, local_size),), self.launch, values)

    def with_values(self, vals: Sequence[int], global_size: tuple[int, int, int],
                    local_size: tuple[int, int, int] | None) -> Callable[[], None]:
        launch = self.launch
        values = dict(zip(launch.program.var_names, vals, strict=True))
        runs = []
        for (part, _), host in zip(launch.launches, self.hosts, strict=True):
            dims = part.launch.dims(values)
            runs.append(host.with_values([values[n] for n in part.var_names], dims.global_size, dims.local_size))
        return functools.partial(_run_parts, tuple(runs), launch, values)


def _run_parts(runs: tuple[Callable[[], None], ...], launch: PartsLaunch, values: Mapping[str, int]) -> None:
    """Run ``runs`` in order, then raise what ``launch``'s records report of a run with ``values`` (they are cleared
    where a run stops before its check, which could leave one set for the next)."""
    try:
        for run in runs:
            run()
    except BaseException:
        launch.memory.clear_records()
        raise
    if launch.memory.recorded():
        launch.program.check(launch.memory, values)


class UserAddresses:
    """Where each of a parts program's user buffers is kept in its parts' arguments: ``self[:n] = addresses``
    writes the ``n`` buffers' addresses, in the program's order, into every part that takes them."""

    __slots__ = ("sites",)

    def __init__(self, sites: tuple[tuple[tuple[Any, int], ...], ...]) -> None:
        self.sites = sites
        """Per user buffer, each (argument array, index) it is kept at."""

    def __setitem__(self, key: slice, addresses: Sequence[int]) -> None:
        for places, address in zip(self.sites[key], addresses, strict=True):
            for array, index in places:
                array[index] = address
