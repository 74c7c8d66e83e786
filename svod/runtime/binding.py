"""Arrays bound to a prepared plan's buffers for one run (``ExecutionPlan.execute(buffers=...)``): each is
checked before anything runs, then either the steps are repointed at its memory (where they keep the
buffer's address in host memory) or it is copied in before the run and out after it.

Runs of one signature (``ExecutionPlan.binder``: arrays of fixed dtypes and sizes at fixed buffers) check only
what such an array may change from run to run (``Binder``), and leave the steps pointed at the arrays: the next
run that binds the same addresses writes none. Whatever runs the plan otherwise points them back at the plan's
own memory first (``ArrayBinding.restore``), so that no run reads an array the caller may have freed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from svod.device import Buffer
from svod.device.buffer import InPlace, array_address
from svod.device.protocols import Site
from svod.errors import BufferMismatchError
from svod.runtime.steps import Step


@dataclass(slots=True)
class Binding:
    """An array bound to a plan buffer for one run: its address is patched in, or it is copied in and out."""

    slot: int
    storage: int
    array: np.ndarray
    address: int
    patch: bool
    written: bool


@dataclass(frozen=True, slots=True)
class _Target:
    """The plan buffer a key of ``buffers`` names, and what that fixes for every array bound to it."""

    slot: int
    storage: int
    dtype: np.dtype[Any]
    size: int
    dtype_name: str
    written: bool
    host: bool
    patch: bool
    """Whether the steps are repointed at the array (else it is copied in and out)."""
    user: str | None
    """The first step that uses the buffer, which errors name."""


@dataclass(frozen=True, slots=True)
class Binder:
    """Arrays bound to some of a plan's buffers on runs of one signature (``ArrayBinding.binder``): each of its
    buffer's dtype and size, as the caller vouches (a jitted function's call key fixes them), so that a run
    checks only what such an array may change: C-contiguous, aligned, writeable where written, and sharing no
    memory with another storage of the plan where either is written."""

    storages: tuple[int, ...]
    own: tuple[int, ...]
    """The address of each bound storage in the plan's own memory."""
    arrays: InPlace
    """The arrays bound to the storages, in their order."""
    others: tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]
    """The host memory of the plan's other storages, as sorted disjoint (starts, ends): all of it (which a
    written array must not meet), and that of the written ones (which no array may meet)."""

    def addresses(self, arguments: Sequence[Any]) -> list[int] | None:
        """The address of each bound array among ``arguments``, where each may be used in place; None where one
        may not, having checked no more: the general path then copies it or refuses it, as on any run."""
        found = self.arrays.addresses(arguments)
        if found is not None and self.others[0][0] and self.meets_others(found):
            return None
        return found

    def meets_others(self, found: Sequence[int]) -> bool:
        """Whether an array at ``found`` (its addresses, in the order of ``arrays``) meets the plan's other
        storages where either is written."""
        nbytes = self.arrays.nbytes
        for index, (_, _, written) in enumerate(self.arrays.checks):
            starts, ends = self.others[0 if written else 1]
            at = bisect_right(ends, found[index])
            if at < len(starts) and starts[at] < found[index] + nbytes[index]:
                return True
        return False


class ArrayBinding:
    """Per storage of a prepared plan: where its steps keep its address, which step writes it first, which
    uses it first, and its host range; and, from that, the arrays of one run bound and unbound."""

    def __init__(self, buffers: Sequence[Buffer], names: Mapping[str, int], steps: Sequence[Step]) -> None:
        self.buffers = buffers
        self.names = names
        self.sites: dict[int, list[Site]] = {}
        self._copied: set[int] = set()
        """Storages some step cannot be repointed for: arrays bound to them are copied in and out."""
        self.written: dict[int, str] = {}
        """Each storage some step writes, with the first such step's name."""
        self.users: dict[int, str] = {}
        """Each storage, with the name of the first step that touches it."""
        self._host_ranges: list[tuple[int, int, int, bool]] = []
        """(start, end, storage, written) of every storage in host memory, for the overlap check of bound
        arrays."""
        self._targets: dict[int | str, _Target] = {}
        """What each key bound so far names (``_target``)."""
        self.pointed: tuple[Binder, list[int]] | None = None
        """The binder whose run left the steps pointed at its arrays, and their addresses; None where the steps
        point at the plan's own memory."""
        self._index(steps)

    def add_sites(self, sites: Mapping[int, Sequence[Site]]) -> None:
        """More places that keep storages' addresses (a native replay's own)."""
        for storage, found in sites.items():
            self.sites.setdefault(storage, []).extend(found)

    def slot(self, key: int | str) -> int:
        if isinstance(key, str):
            if key not in self.names:
                raise BufferMismatchError(f"no plan buffer named {key}; the plan has "
                                          f"{sorted(self.names) or 'no names'}", stage="bind", value=key)
            return self.names[key]
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < len(self.buffers):
            raise BufferMismatchError(f"no plan buffer {key}; the plan has {len(self.buffers)}", stage="bind",
                                      value=key)
        return key

    def check(self, arrays: Mapping[int | str, Any]) -> list[Binding]:
        """Check every bound array before anything runs: a whole plan buffer's dtype and size, writeable if
        the plan writes it, in host memory laid out as a zero-copy buffer needs, and sharing no memory with
        another storage of the plan where either is written."""
        bindings: list[Binding] = []
        seen: dict[int, int | str] = {}
        for key, obj in arrays.items():
            target = self._targets.get(key) or self._target(key)
            storage = target.storage
            if storage in seen:
                raise BufferMismatchError(f"plan buffers {seen[storage]} and {key} are one buffer; bind it once",
                                          kernel=target.user, stage="bind", value=key)
            seen[storage] = key
            array = obj if type(obj) is np.ndarray else _host_array(obj, key, target.user)
            if array.dtype != target.dtype or array.size != target.size:
                _refuse_shape(array, target, key)
            writeable = array.flags.writeable
            if target.written and not writeable:
                raise BufferMismatchError(f"plan buffer {key} is written by the plan; the array bound to it is "
                                          "read-only", kernel=self.written[storage], stage="bind",
                                          value=key)
            address = 0
            if target.host:
                if not array.flags.c_contiguous:
                    raise BufferMismatchError(f"the array bound to plan buffer {key} is not C-contiguous; kernels "
                                              "use its memory as it is (np.ascontiguousarray copies one)",
                                              kernel=target.user, stage="bind", value=array.strides)
                address = array_address(array, writeable)
                if address % target.dtype.itemsize:
                    raise BufferMismatchError(f"the array bound to plan buffer {key} is not aligned to its itemsize "
                                              f"({target.dtype.itemsize})", kernel=target.user, stage="bind",
                                              value=address % target.dtype.itemsize)
            bindings.append(Binding(target.slot, storage, array, address, target.patch, target.written))
        self._check_unshared(bindings)
        return bindings

    def binder(self, bound: Sequence[tuple[int | str, int]]) -> Binder | None:
        """A ``Binder`` of arrays to the buffers ``bound`` names, each (key, position of its array among a run's
        arguments); None where runs must take the general path: a buffer copied in and out, one bound twice,
        an empty one."""
        targets = [self._targets.get(key) or self._target(key) for key, _ in bound]
        storages = tuple(target.storage for target in targets)
        if len(set(storages)) < len(storages) or not all(target.patch and target.size for target in targets):
            return None
        rest = [r for r in self._host_ranges if r[2] not in storages]
        arrays = InPlace.of([(position, target.dtype.itemsize, target.size, target.written)
                             for (_, position), target in zip(bound, targets, strict=True)])
        return Binder(storages, tuple(int(self.buffers[target.slot].address) for target in targets), arrays,
                      (_merged([(start, end) for start, end, _, _ in rest]),
                       _merged([(start, end) for start, end, _, written in rest if written])))

    def point(self, binder: Binder, addresses: list[int]) -> None:
        """Point the steps at ``addresses`` for the binder's storages, writing only what changed since the run
        before where it was the binder's too."""
        pointed = self.pointed
        if pointed is not None and pointed[0] is binder:
            if pointed[1] == addresses:
                return
            for storage, address, before in zip(binder.storages, addresses, pointed[1], strict=True):
                if address != before:
                    self._repoint(storage, address)
        else:
            if pointed is not None:
                self.restore()
            for storage, address in zip(binder.storages, addresses, strict=True):
                self._repoint(storage, address)
        self.pointed = (binder, addresses)

    def restore(self) -> None:
        """Point the steps back at the plan's own memory where a ``Binder``'s run left them at its arrays."""
        if self.pointed is not None:
            binder = self.pointed[0]
            for storage, address in zip(binder.storages, binder.own, strict=True):
                self._repoint(storage, address)
            self.pointed = None

    def _repoint(self, storage: int, address: int) -> None:
        for array, index, offset in self.sites.get(storage, ()):
            array[index] = address + offset

    def _target(self, key: int | str) -> _Target:
        """What binding to ``key`` means, the same every run: checked and kept on first use."""
        slot = self.slot(key)
        buf = self.buffers[slot]
        storage = id(buf.base)
        user = self.users.get(storage)
        if buf.is_view:
            raise BufferMismatchError(f"plan buffer {key} is a view at offset {buf.offset} of another; bind an "
                                      "array to the buffer it views", kernel=user, stage="bind", value=key)
        host = buf.device_object.caps.host_memory
        target = _Target(slot, storage, np.dtype(buf.dtype.numpy), buf.size, buf.dtype.name, storage in self.written,
                         host, host and storage not in self._copied, user)
        self._targets[key] = target
        return target

    def _check_unshared(self, bindings: Sequence[Binding]) -> None:
        """A bound array written by the plan shares memory with no other storage it touches, and a bound
        array shares none with a storage the plan writes (the kernels are compiled assuming so)."""
        rebound = {b.storage for b in bindings if b.patch}
        ranges = [r for r in self._host_ranges if r[2] not in rebound]
        ranges += [(b.address, b.address + b.array.nbytes, b.storage, b.written) for b in bindings if b.patch]
        ranges.sort(key=itemgetter(0, 1))  # ranges alike in the order bound, not by storage id
        reach_end, reach_written, reach_storage = -1, False, 0
        for start, end, storage, written in ranges:
            if start < reach_end and (written or reach_written) and (storage in rebound or reach_storage in rebound):
                raise BufferMismatchError("an array bound for this run shares memory with another buffer of the "
                                          "plan, and one of them is written", kernel=self.users.get(storage),
                                          stage="bind", value=start)
            if end > reach_end:
                reach_end, reach_written, reach_storage = end, written, storage
            elif written:
                reach_written = True

    def attach(self, bindings: Sequence[Binding]) -> None:
        """Give one run the arrays ``bindings`` name: the steps pointed at each one used in place, each other one
        copied into its buffer (``detach`` after the run undoes it)."""
        if self.pointed is not None:
            self.restore()
        for binding in bindings:
            if binding.patch:
                self._repoint(binding.storage, binding.address)
            else:
                self.buffers[binding.slot].copyin(binding.array)

    def copy_out(self, bindings: Sequence[Binding]) -> None:
        for binding in bindings:
            if not binding.patch and binding.written:
                binding.array[...] = self.buffers[binding.slot].numpy().reshape(binding.array.shape)

    def detach(self, bindings: Sequence[Binding]) -> None:
        """Point the steps back at the plan's own buffers after a run ``attach`` gave arrays."""
        for binding in bindings:
            if binding.patch:
                self._repoint(binding.storage, int(self.buffers[binding.slot].address))

    def _index(self, steps: Sequence[Step]) -> None:
        """Per storage: where steps keep its address, who writes it, who uses it first, and its host range."""
        for step in steps:
            for access in step.accesses:
                self.users.setdefault(access.storage, step.name)
                if access.write:
                    self.written.setdefault(access.storage, step.name)
            if step.sites is None:
                self._copied.update(a.storage for a in step.accesses)
            else:
                for storage, sites in step.sites.items():
                    self.sites.setdefault(storage, []).extend(sites)
        bases = {id(b.base): b.base for b in self.buffers}
        self._host_ranges = sorted((int(base.address), int(base.address) + base.nbytes, key, key in self.written)
                                   for key, base in bases.items()
                                   if base.device_object.caps.host_memory and base.nbytes and key in self.users)


def _merged(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The union of byte ranges, as the starts and ends of sorted disjoint ranges."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(ranges):
        if ends and start < ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return tuple(starts), tuple(ends)


def _refuse_shape(array: np.ndarray, target: _Target, key: int | str) -> None:
    if array.dtype != target.dtype:
        raise BufferMismatchError(f"plan buffer {key} holds {target.dtype_name}; the array bound to it is "
                                  f"{array.dtype}", kernel=target.user, stage="bind", value=str(array.dtype))
    raise BufferMismatchError(f"plan buffer {key} has {target.size} elements; the array bound to it has "
                              f"{array.size}", kernel=target.user, stage="bind", value=array.size)


def _host_array(obj: Any, key: int | str, user: str | None) -> np.ndarray:
    """The host array ``obj`` is: a numpy array, a Buffer in host memory, or any DLPack producer on the host."""
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, Buffer):
        if not obj.device_object.caps.host_memory:
            raise BufferMismatchError(f"the buffer bound to plan buffer {key} is on {obj.device}, not in host "
                                      "memory", kernel=user, stage="bind", value=obj.device)
        return obj.host_view()
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as err:
            raise BufferMismatchError(f"the array bound to plan buffer {key} cannot be read through DLPack on the "
                                      f"host: {err}", kernel=user, stage="bind", value=type(obj).__name__) from err
    raise BufferMismatchError(f"plan buffer {key} can be bound to a numpy array, a DLPack producer or a host "
                              "Buffer", kernel=user, stage="bind", value=type(obj).__name__)


