"""``Buffer``: typed device memory with lazy allocation and zero-copy views.

A buffer owns its allocation; a view shares its base's allocation at an element offset (views of views
compose to one offset into the base). Memory is allocated on first use and returned to the device's
allocator when the base buffer is garbage collected.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from svod.device.device import Device, resolver
from svod.dtype import DType, dtypes
from svod.errors import BufferMismatchError, SvodError


class Buffer:
    """``size`` elements of ``dtype`` on ``device``."""

    def __init__(self, device: Device | str, dtype: DType, size: int, *, base: Buffer | None = None,
                 offset: int = 0) -> None:
        if not isinstance(size, int) or size < 0:
            raise SvodError("buffer size must be a non-negative integer", stage="buffer", value=size)
        if dtype.kind == "void" or dtype.count != 1:
            raise SvodError("buffers hold scalar dtypes", stage="buffer", value=dtype)
        self._device = resolver.resolve(device)
        self.dtype = dtype
        self.size = size
        self.offset = offset
        self.base: Buffer = self if base is None else base
        self._handle: Any = None

    def __repr__(self) -> str:
        view = f", view of {self.base.size} at {self.offset}" if self.is_view else ""
        return f"<Buffer {self.device} {self.dtype!r} x {self.size}{view}>"

    @property
    def device(self) -> str:
        return self._device.name

    @property
    def device_object(self) -> Device:
        return self._device

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def byte_offset(self) -> int:
        return self.offset * self.dtype.itemsize

    @property
    def is_view(self) -> bool:
        return self.base is not self

    @property
    def is_allocated(self) -> bool:
        return self.base._handle is not None

    @property
    def handle(self) -> Any:
        """The base allocation, allocating it now if this is its first use."""
        base = self.base
        if base._handle is None:
            allocator = base._device.allocator
            base._handle = allocator.allocate(base.nbytes)
            weakref.finalize(base, allocator.free, base._handle, base.nbytes)
        return base._handle

    @property
    def address(self) -> Any:
        """What a kernel receives for this buffer (a pointer on host devices)."""
        return self._device.allocator.address(self.handle, self.byte_offset)

    def view(self, offset: int, size: int) -> Buffer:
        """A zero-copy view of ``size`` elements starting ``offset`` elements into this buffer."""
        if not isinstance(offset, int) or not isinstance(size, int) or offset < 0 or size < 0 \
                or offset + size > self.size:
            raise SvodError(f"view [{offset}, {offset}+{size}) does not fit a buffer of {self.size}",
                            stage="buffer", value=(offset, size))
        return Buffer(self._device, self.dtype, size, base=self.base, offset=self.offset + offset)

    @staticmethod
    def from_numpy(array: np.ndarray, device: Device | str = "CPU") -> Buffer:
        array = np.asarray(array)
        buf = Buffer(device, dtypes.from_numpy(array.dtype), int(array.size))
        buf.copyin(array)
        return buf

    def copyin(self, array: np.ndarray) -> Buffer:
        """Copy ``array`` in; its dtype and element count must equal the buffer's."""
        array = np.asarray(array)
        if array.dtype != self.dtype.numpy:
            raise BufferMismatchError(f"copyin of {array.dtype} into a buffer of {self.dtype.name}",
                                      stage="copyin", value=str(array.dtype))
        if array.size != self.size:
            raise BufferMismatchError(f"copyin of {array.size} elements into a buffer of {self.size}",
                                      stage="copyin", value=array.size)
        if self.size:
            data = np.ascontiguousarray(array).reshape(-1)
            self._device.allocator.copyin(self.handle, data.data, self.byte_offset)
        return self

    def numpy(self) -> np.ndarray:
        """A copy of the contents as a 1-D numpy array."""
        try:
            out = np.empty(self.size, dtype=self.dtype.numpy)
        except MemoryError as err:
            raise SvodError(f"out of memory for a host copy of {self.nbytes} bytes", stage="copyout",
                            value=self.nbytes) from err
        if self.size:
            self._device.allocator.copyout(out.data, self.handle, self.byte_offset)
        return out
