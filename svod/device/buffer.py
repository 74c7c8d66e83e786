"""``Buffer``: typed device memory with lazy allocation and zero-copy views.

A buffer owns its allocation; a view shares its base's allocation at an element offset (views of views
compose to one offset into the base). Memory is allocated on first use and returned to the device's
allocator when the base buffer is garbage collected.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import numbers
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.device import dlpack
from svod.device.allocator import MAX_BYTES, HostMemory, serves_host_memory
from svod.device.device import Device, resolver
from svod.dtype import DType, dtypes
from svod.errors import BufferMismatchError, SvodError


class Buffer:
    """``size`` elements of ``dtype`` on ``device``."""

    def __init__(self, device: Device | str, dtype: DType, size: int, *, base: Buffer | None = None,
                 offset: int = 0) -> None:
        if dtype.kind == "void" or dtype.count != 1:
            raise SvodError("buffers hold scalar dtypes", stage="buffer", value=dtype)
        self._device = resolver.resolve(device)
        self.dtype = dtype
        self.size = _element_count(size, dtype, self._device.name)
        self.offset = offset
        self.base: Buffer = self if base is None else base
        self._handle: Any = None
        self._address: Any = None
        self.readonly: bool = False if base is None else base.readonly
        """The memory is a read-only array's (``from_numpy(copy=False)``): kernels may not write it."""
        self.shape: tuple[int, ...] = (self.size,)
        """The shape a kernel taking the buffer sees: the producer's for ``from_dlpack``, else flat."""
        self._imported: Any = None

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
            try:
                base._handle = allocator.allocate(base.nbytes)
            except SvodError as err:
                raise SvodError(f"cannot allocate {base.size} x {base.dtype.name} on {base.device}: {err.detail}",
                                stage=err.stage, value=err.value) from err
            weakref.finalize(base, allocator.free, base._handle, base.nbytes)
        return base._handle

    @property
    def address(self) -> Any:
        """What a kernel receives for this buffer (a pointer on host devices); fixed once allocated."""
        if self._address is None:
            self._address = self._device.allocator.address(self.handle, self.byte_offset)
        return self._address

    def view(self, offset: int, size: int) -> Buffer:
        """A zero-copy view of ``size`` elements starting ``offset`` elements into this buffer."""
        if not isinstance(offset, int) or not isinstance(size, int) or offset < 0 or size < 0 \
                or offset + size > self.size:
            raise SvodError(f"view [{offset}, {offset}+{size}) does not fit a buffer of {self.size}",
                            stage="buffer", value=(offset, size))
        return Buffer(self._device, self.dtype, size, base=self.base, offset=self.offset + offset)

    @staticmethod
    def from_numpy(array: np.ndarray, device: Device | str = "CPU", copy: bool = True) -> Buffer:
        """A buffer holding ``array``'s elements (flattened in C order). With ``copy=False`` the buffer *is*
        the array's memory, on a device whose buffers live in host memory: kernels read and write the
        array in place, and the buffer keeps it alive. That needs a C-contiguous array aligned to its
        itemsize; a read-only array gives a buffer kernels may only read."""
        array = np.asarray(array)
        dtype = dtypes.from_numpy(array.dtype)
        if not copy:
            return Buffer._sharing(array, resolver.resolve(device), dtype)
        buf = Buffer(device, dtype, int(array.size))
        buf.copyin(array)
        return buf

    @staticmethod
    def _sharing(array: np.ndarray, device: Device, dtype: DType) -> Buffer:
        if not (device.caps.host_memory and serves_host_memory(device.allocator)):
            raise BufferMismatchError(f"{device.name} keeps buffers in its own memory: an array can only be "
                                      "copied there (copy=True)", stage="buffer", value=device.name)
        if not array.flags.c_contiguous:
            raise BufferMismatchError("a zero-copy buffer needs a C-contiguous array (np.ascontiguousarray "
                                      "copies one, or pass copy=True)", stage="buffer", value=array.strides)
        if array.ctypes.data % array.dtype.itemsize:
            raise BufferMismatchError(f"a zero-copy buffer needs an array aligned to its itemsize "
                                      f"({array.dtype.itemsize}); pass copy=True", stage="buffer",
                                      value=array.ctypes.data % array.dtype.itemsize)
        buf = Buffer(device, dtype, int(array.size))
        buf._handle = HostMemory.of(array)
        buf.readonly = not array.flags.writeable
        return buf

    def host_view(self) -> np.ndarray:
        """The buffer's memory as a 1-D numpy array, without a copy (host-memory devices); the array keeps
        the buffer alive."""
        if not self._device.caps.host_memory:
            raise SvodError(f"a buffer on {self.device} is not in host memory; numpy() copies it out",
                            stage="buffer", value=self.device)
        if self.size == 0:
            return np.empty(0, self.dtype.numpy)
        memory = (ctypes.c_char * self.nbytes).from_address(self.address)
        memory.keepalive = self  # type: ignore[attr-defined]
        view = np.frombuffer(memoryview(memory), dtype=self.dtype.numpy)
        if self.readonly:
            view.flags.writeable = False
        return view

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's device: (kDLCPU, 0) for host memory, else the device's type (``caps.dlpack_device_type``)
        and id."""
        if self._device.caps.host_memory:
            return (dlpack.KDL_CPU, 0)
        return (self._device.caps.dlpack_device_type, self._device.device.device_id or 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        """A DLPack capsule sharing the buffer's memory: host memory through a numpy view, CUDA memory
        after the device has finished the work issued so far. OpenCL memory has no DLPack address."""
        if self._device.caps.host_memory:
            return self.host_view().__dlpack__(**kwargs)
        kind, device_id = self.__dlpack_device__()
        if kind != dlpack.KDL_CUDA:
            raise SvodError(f"a buffer on {self.device} cannot be exported through DLPack; copy it out with "
                            "numpy()", stage="buffer", value=self.device)
        self._device.synchronize()
        return dlpack.capsule(int(self.address), kind, device_id, self.dtype, self.size, keepalive=self)

    @staticmethod
    def from_dlpack(obj: Any, device: Device | str | None = None, copy: bool = False) -> Buffer:
        """A buffer sharing the memory of a DLPack producer, in the producer's shape (``shape``): on the host
        (numpy arrays, CPU torch tensors ...) for ``device`` (the CPU by default), or on a CUDA device (torch
        and cupy CUDA tensors) for that device. A strided producer is an error, or on the host a copy with
        ``copy=True``."""
        kind, device_id = dlpack.producer_device(obj)
        if kind == dlpack.KDL_CUDA:
            return Buffer._from_cuda(obj, device_id, device)
        try:
            array = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as err:
            raise SvodError(f"cannot import it through DLPack to the host: {err}", stage="buffer",
                            value=type(obj).__name__) from err
        target = "CPU" if device is None else device
        buf = Buffer.from_numpy(array, target) if copy else Buffer.from_numpy(array, target, copy=False)
        buf.shape = tuple(array.shape)
        return buf

    @staticmethod
    def _from_cuda(obj: Any, device_id: int, device: Device | str | None) -> Buffer:
        home = dlpack.device_name(dlpack.KDL_CUDA, device_id)
        target = resolver.resolve(home if device is None else device)
        if target.caps.dlpack_device_type != dlpack.KDL_CUDA or (target.device.device_id or 0) != device_id:
            raise BufferMismatchError(f"the tensor is on {home}, not on {target.name}", stage="buffer",
                                      value=target.name)
        imported = dlpack.take(obj.__dlpack__())
        if not imported.c_contiguous:
            raise BufferMismatchError(f"a DLPack tensor with strides {imported.strides} for shape {imported.shape} "
                                      "is not compact in C order (.contiguous() makes one)", stage="buffer",
                                      value=imported.strides)
        buf = Buffer(target, imported.dtype, math.prod(imported.shape))
        buf._handle = imported.address
        buf._imported = imported  # the producer's memory lives as long as the buffer
        buf.shape = imported.shape
        return buf

    def copyin(self, array: np.ndarray) -> Buffer:
        """Copy ``array`` in; its dtype and element count must equal the buffer's."""
        array = np.asarray(array)
        if array.dtype != self.dtype.numpy:
            raise BufferMismatchError(f"copyin of {array.dtype} into a buffer of {self.dtype.name}",
                                      stage="buffer", value=str(array.dtype))
        if array.size != self.size:
            raise BufferMismatchError(f"copyin of {array.size} elements into a buffer of {self.size}",
                                      stage="buffer", value=array.size)
        if self.size:
            data = np.ascontiguousarray(array).reshape(-1)
            self._device.allocator.copyin(self.handle, data.data, self.byte_offset)
        return self

    def numpy(self) -> np.ndarray:
        """A copy of the contents as a 1-D numpy array."""
        try:
            out = np.empty(self.size, dtype=self.dtype.numpy)
        except MemoryError as err:
            raise SvodError(f"out of memory for a host copy of {self.nbytes} bytes", stage="buffer",
                            value=self.nbytes) from err
        if self.size:
            self._device.allocator.copyout(out.data, self.handle, self.byte_offset)
        return out


address_of = ctypes.addressof
exported: Callable[[np.ndarray], ctypes.c_char] = ctypes.c_char.from_buffer  # type: ignore[assignment]
"""An array's memory as ctypes sees it: ``address_of`` it is the array's address, the fast way of ``array_address``.
ctypes takes the memory of a writeable, C-contiguous, non-empty array and refuses any other (``NOT_EXPORTED``), so a
call that succeeds has checked those flags too, without building the array's ``flags`` object."""
NOT_EXPORTED = (TypeError, ValueError, BufferError)
"""What ``exported`` raises for an array that is read-only or not C-contiguous (TypeError) or empty (ValueError)."""


def array_address(array: np.ndarray, writeable: bool) -> int:
    """The address of a numpy array's first element, ``writeable`` its flag (through ctypes when it is
    writeable: twice as fast as building ``__array_interface__``, which a call on small arrays notices)."""
    if writeable and array.size:
        with contextlib.suppress(*NOT_EXPORTED):  # writeable, yet no buffer to write (an ``np.broadcast_arrays`` view)
            return address_of(exported(array))
    return int(array.__array_interface__["data"][0])


@dataclass(frozen=True, slots=True)
class InPlace:
    """Numpy arrays among a call's arguments that a kernel or a plan uses in place, each of a dtype and size the
    caller vouches for (a call key fixes them): what a call checks of them, which is what such an array may
    change from call to call (C-contiguous, aligned, writeable where written, and no two sharing memory where
    one is written), and their addresses."""

    checks: tuple[tuple[int, int, bool], ...]
    """Per array: its position among a call's arguments, its itemsize, whether it is written."""
    nbytes: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...]
    """The arrays that must not share memory: one of each pair written, neither empty (indices into ``checks``)."""
    exportable: list[bool] = field(compare=False)
    """Per array: whether the last one there was ``exported`` (writeable, C-contiguous, not empty), as the next most
    likely is: a call tries that first (one call that checks the flags too), and reads the flags of one that is
    not (``exported`` refuses it only by raising, which costs more)."""

    @classmethod
    def of(cls, arrays: Sequence[tuple[int, int, int, bool]]) -> InPlace:
        """For arrays given as (position among a call's arguments, itemsize, element count, written)."""
        pairs = tuple((first, second) for first in range(len(arrays)) for second in range(first + 1, len(arrays))
                      if (arrays[first][3] or arrays[second][3]) and arrays[first][2] and arrays[second][2])
        return cls(tuple((position, itemsize, written) for position, itemsize, _, written in arrays),
                   tuple(itemsize * size for _, itemsize, size, _ in arrays), pairs,
                   [size > 0 for _, _, size, _ in arrays])

    def addresses(self, arguments: Sequence[Any]) -> list[int] | None:
        """The address of each array among ``arguments``, where each may be used in place; None where one may
        not, having checked no more (a general path then copies it, or says what is wrong)."""
        found = []
        exportable = self.exportable
        for index, (position, itemsize, written) in enumerate(self.checks):  # shared_address, written out
            array = arguments[position]
            address = None
            if exportable[index]:
                try:
                    address = address_of(exported(array))  # writeable and C-contiguous, or it raises
                except NOT_EXPORTED:
                    exportable[index] = False
            if address is None:
                flags = array.flags
                writeable = flags.writeable
                if not flags.c_contiguous or (written and not writeable):
                    return None
                exportable[index] = bool(writeable and array.size)
                address = array_address(array, writeable)
            if address % itemsize:
                return None
            found.append(address)
        nbytes = self.nbytes
        for first, second in self.pairs:
            if found[first] < found[second] + nbytes[second] and found[second] < found[first] + nbytes[first]:
                return None
        return found


def shared_address(array: np.ndarray, itemsize: int, written: bool) -> int | None:
    """The address a kernel may use ``array`` at in place: C-contiguous, aligned to ``itemsize``, writeable where
    ``written``; None where it may not (a general path copies it, or says what is wrong)."""
    flags = array.flags
    if not flags.c_contiguous or (written and not flags.writeable):
        return None
    start = array_address(array, flags.writeable)
    return None if start % itemsize else start


def _element_count(size: object, dtype: DType, device: str) -> int:
    """``size`` as an int: a non-negative integer (Python or numpy, not a bool) whose bytes one allocation
    can hold. Checked when the buffer is made, so a size no device can have fails here and not as
    numpy's or a driver's own error at first use."""
    if type(size) is not int and (isinstance(size, (bool, np.bool_)) or not isinstance(size, numbers.Integral)):
        raise SvodError(f"a buffer size on {device} must be a non-negative integer", stage="buffer", value=size)
    count = int(size)
    if count < 0:
        raise SvodError(f"a buffer size on {device} must be a non-negative integer", stage="buffer", value=size)
    if count * dtype.itemsize > MAX_BYTES:
        raise SvodError(f"a buffer of {count} x {dtype.name} on {device} needs {count * dtype.itemsize} bytes; "
                        "one allocation holds at most 2**63 - 1", stage="buffer", value=count)
    return count
