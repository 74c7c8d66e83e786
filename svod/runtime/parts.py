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

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.codegen import status_slots
from svod.device import Allocator, HostArguments, LaunchShape, Program, ProgramBase
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

    def allocate(self, allocator: Allocator, nbytes: Mapping[int, int]) -> dict[int, Any]:
        handles = {slot: allocator.allocate(size) for slot, size in nbytes.items()}
        for slot in self.records:
            if slot in handles:
                allocator.copyin(handles[slot], memoryview(bytes(nbytes[slot])))
        return handles

    @staticmethod
    def free(allocator: Allocator, handles: Mapping[int, Any], nbytes: Mapping[int, int]) -> None:
        for slot, handle in handles.items():
            allocator.free(handle, nbytes[slot])


class PartsProgram(ProgramBase):
    """Runs ``parts`` one after another on the user's buffers (``user_slots``) and its own; ``vals``
    follow ``var_names``. ``sizes`` are the user buffers' element counts, for error messages."""

    def __init__(self, name: str, parts: Sequence[Part], var_names: Sequence[str], user_slots: Sequence[int],
                 own: OwnBuffers, allocator: Allocator, sizes: Mapping[int, UOp]) -> None:
        self.name = name
        self.parts = tuple(parts)
        self.var_names = tuple(var_names)
        self.user_slots = tuple(user_slots)
        self.own = own
        self.allocator = allocator
        self.sizes = dict(sizes)

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        values = dict(zip(self.var_names, vals, strict=True))
        nbytes = self.own.nbytes(values)
        handles = self.own.allocate(self.allocator, nbytes)
        try:
            table = self.table(buffers, handles)
            for part in self.parts:
                dims = part.launch.dims(values)
                part.program.execute([table[s] for s in part.slots], [values[n] for n in part.var_names],
                                     dims.global_size, dims.local_size)
            self.check(handles, values)
        finally:
            self.own.free(self.allocator, handles, nbytes)

    def table(self, buffers: Sequence[Any], handles: Mapping[int, Any]) -> dict[int, Any]:
        table = dict(zip(self.user_slots, buffers, strict=True))
        table.update({slot: self.allocator.address(h) for slot, h in handles.items()})
        return table

    def check(self, handles: Mapping[int, Any], values: Mapping[str, int]) -> None:
        """Raise ``IndexOutOfBoundsError`` for the first buffer the status records a failure for, else
        ``RequirementError`` for the first requirement recorded failed; every record is cleared first, so none
        is left standing to fail the next run."""
        failures = [self._out_of_bounds(handles, values), self._required(handles)]
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
        self.nbytes = {slot: int(size.arg) for slot, size in own.sizes.items() if size.op is Ops.CONST}
        self.handles = own.allocate(program.allocator, self.nbytes)
        # a finalizer that holds the handles returns them: a __del__ could run after the collector released
        # them with the launch (a plan is a reference cycle), and hand the pool buffers already released
        weakref.finalize(self, OwnBuffers.free, program.allocator, self.handles, self.nbytes)
        table = program.table(buffers, self.handles)
        self.launches = [(part, part.program.bind([table.get(s, 0) for s in part.slots])) for part in program.parts]
        self.values: dict[str, int] = {}
        self.resizes = own.sized
        """Whether a run may allocate (``fit``): such a launch runs from Python, never a native replay."""

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
        allocator, wanted = self.program.allocator, self.program.own.nbytes(values)
        grown = {slot: size for slot, size in wanted.items() if size > self.nbytes.get(slot, -1)}
        if not grown:
            return
        OwnBuffers.free(allocator, {slot: self.handles.pop(slot) for slot in grown if slot in self.handles},
                        self.nbytes)
        self.handles.update(self.program.own.allocate(allocator, grown))
        self.nbytes.update(grown)
        table = self.program.table(self.buffers, self.handles)
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

    def check(self) -> None:
        self.program.check(self.handles, self.values)

