"""Device memory: the ``Allocator`` template, host memory, and a size-bucketed reuse pool.

Public methods validate their arguments and turn backend failures into ``SvodError``; subclasses fill in
the private hooks (``_alloc``, ``_free``, ``_copyin``, ``_copyout``, ``_address``). Byte offsets let one
allocation back many views.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from typing import Any

import numpy as np

from svod.errors import SvodError

ALIGNMENT = 64
MAX_BYTES = (1 << 63) - 1
"""The most bytes one allocation may have: every byte offset into it fits signed 64-bit arithmetic (the
kernels' indices, numpy's sizes)."""


class Allocator(ABC):
    """Allocates, frees and copies device memory. Handles are backend objects; ``address`` gives the
    value a kernel receives for one (a pointer for host memory)."""

    def allocate(self, nbytes: int) -> Any:
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or not 0 <= nbytes <= MAX_BYTES:
            raise SvodError("allocation size must be a non-negative integer of at most 2**63 - 1 bytes",
                            stage="buffer", value=nbytes)
        try:
            return self._alloc(nbytes)
        except MemoryError as err:
            raise SvodError(f"out of memory allocating {nbytes} bytes", stage="buffer", value=nbytes) from err

    def free(self, handle: Any, nbytes: int) -> None:
        self._free(handle, nbytes)

    def copyin(self, handle: Any, src: memoryview, offset: int = 0) -> None:
        """Copy the bytes of ``src`` into device memory at byte ``offset``."""
        self._copyin(handle, src.cast("B"), offset)

    def copyout(self, dst: memoryview, handle: Any, offset: int = 0) -> None:
        """Copy device memory starting at byte ``offset`` into ``dst`` (its length decides how much)."""
        self._copyout(dst.cast("B"), handle, offset)

    def address(self, handle: Any, offset: int = 0) -> Any:
        """What a kernel receives for this memory at byte ``offset``."""
        return self._address(handle, offset)

    @abstractmethod
    def _alloc(self, nbytes: int) -> Any: ...

    def _free(self, handle: Any, nbytes: int) -> None:  # noqa: B027 - memory that needs no release
        """Release memory; the default lets the garbage collector do it."""

    @abstractmethod
    def _copyin(self, handle: Any, src: memoryview, offset: int) -> None: ...

    @abstractmethod
    def _copyout(self, dst: memoryview, handle: Any, offset: int) -> None: ...

    @abstractmethod
    def _address(self, handle: Any, offset: int) -> Any: ...


class HostMemory:
    """A 64-byte aligned block of host memory, kept alive by the numpy array that owns it."""

    __slots__ = ("address", "array")

    def __init__(self, nbytes: int) -> None:
        try:
            raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        except ValueError as err:  # numpy's refusal of a size past its index range: memory no one has
            raise MemoryError(str(err)) from err
        start = -raw.ctypes.data % ALIGNMENT
        self.array = raw[start:start + nbytes]
        self.address: int = raw.ctypes.data + start  # numpy reports the base address for empty slices

    @classmethod
    def of(cls, array: np.ndarray) -> HostMemory:
        """The memory of a C-contiguous ``array``, shared (the array stays alive as long as this does)."""
        memory = cls.__new__(cls)
        memory.array = array.reshape(-1).view(np.uint8)
        memory.address = array.ctypes.data
        return memory


class HostAllocator(Allocator):
    """Plain host memory, aligned for the widest vector loads."""

    def _alloc(self, nbytes: int) -> HostMemory:
        return HostMemory(nbytes)

    def _copyin(self, handle: HostMemory, src: memoryview, offset: int) -> None:
        handle.array[offset:offset + len(src)] = np.frombuffer(src, dtype=np.uint8)

    def _copyout(self, dst: memoryview, handle: HostMemory, offset: int) -> None:
        np.frombuffer(dst, dtype=np.uint8)[:] = handle.array[offset:offset + len(dst)]

    def _address(self, handle: HostMemory, offset: int) -> int:
        return handle.address + offset


def serves_host_memory(allocator: Allocator) -> bool:
    """Whether ``allocator``'s handles are ``HostMemory`` (a host allocator, possibly behind pools), so
    memory svod did not allocate can stand in for an allocation."""
    while isinstance(allocator, ReusePool):
        allocator = allocator.inner
    return isinstance(allocator, HostAllocator)


class ReusePool(Allocator):
    """Keeps freed blocks by size and hands them out again, so repeated allocations of the same sizes do
    not go back to the system. At most ``max_cached`` bytes are kept; allocation failure empties the pool
    and tries once more."""

    def __init__(self, inner: Allocator, max_cached: int = 1 << 30) -> None:
        self.inner = inner
        self.max_cached = max_cached
        self.cached_bytes = 0
        self._free_blocks: defaultdict[int, list[Any]] = defaultdict(list)
        self._lock = threading.RLock()
        """Re-entrant: the garbage collector may run a dropped Buffer's finalizer, which frees into this pool,
        on any allocation, including one made while this thread holds the lock."""

    def clear(self) -> None:
        with self._lock:
            blocks = [(nbytes, h) for nbytes, handles in self._free_blocks.items() for h in handles]
            self._free_blocks.clear()
            self.cached_bytes = 0
        for nbytes, handle in blocks:
            self.inner.free(handle, nbytes)

    def _alloc(self, nbytes: int) -> Any:
        with self._lock:
            blocks = self._free_blocks.get(nbytes)
            if blocks:
                self.cached_bytes -= nbytes
                return blocks.pop()
        try:
            return self.inner.allocate(nbytes)
        except SvodError:
            self.clear()
            return self.inner.allocate(nbytes)

    def _free(self, handle: Any, nbytes: int) -> None:
        with self._lock:
            if self.cached_bytes + nbytes <= self.max_cached:
                self._free_blocks[nbytes].append(handle)
                self.cached_bytes += nbytes
                return
        self.inner.free(handle, nbytes)

    def _copyin(self, handle: Any, src: memoryview, offset: int) -> None:
        self.inner.copyin(handle, src, offset)

    def _copyout(self, dst: memoryview, handle: Any, offset: int) -> None:
        self.inner.copyout(dst, handle, offset)

    def _address(self, handle: Any, offset: int) -> Any:
        return self.inner.address(handle, offset)
