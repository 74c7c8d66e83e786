"""DLPack capsules for device memory numpy cannot describe (a CUDA buffer): the ``DLManagedTensor`` of
the DLPack ABI, built with ctypes, the capsule that hands one to a consumer, and ``take``, which imports a
producer's (a torch or cupy CUDA tensor's).

The tensor owns nothing but a reference to what keeps its memory alive; the consumer calls its deleter
when done, and a capsule nobody consumed calls it when it is collected.
"""

from __future__ import annotations

import ctypes
from typing import Any

from svod.device.caps import KDL_CPU, KDL_CUDA
from svod.dtype import DType
from svod.errors import SvodError

_CODES = {"int": 0, "uint": 1, "float": 2, "bool": 6}


# DLPack's structs (dlpack.h), under their C names: _DLDevice is DLPack's device, not a svod Device.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    """Its fields are set after the class, because its deleter takes a pointer to it."""


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_alive: dict[int, tuple[_DLManagedTensor, Any, Any]] = {}
"""Each exported tensor (by address) with its shape array and what keeps its memory alive, until deleted."""


@_DELETER
def _delete(managed: Any) -> None:
    _alive.pop(ctypes.addressof(managed.contents), None)


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _pythonapi(name: str, result: Any, *arguments: Any) -> Any:
    """Python's C API function ``name`` under svod's own prototype: ``ctypes.pythonapi``'s function objects
    are shared by the whole process, and a library that sets their argtypes (Warp does) would change them."""
    return ctypes.PYFUNCTYPE(result, *arguments)((name, ctypes.pythonapi))


_capsule_new = _pythonapi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR)
_address_valid = _pythonapi("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_address_pointer = _pythonapi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)


@_DESTRUCTOR
def _unconsumed(capsule: int) -> None:
    """A capsule collected without a consumer taking the tensor: delete the tensor ourselves."""
    if _address_valid(capsule, b"dltensor"):
        _alive.pop(_address_pointer(capsule, b"dltensor"), None)


def capsule(address: int, device_type: int, device_id: int, dtype: DType, count: int, keepalive: Any) -> Any:
    """A DLPack capsule for ``count`` elements of ``dtype`` at ``address``: 1-D, compact, read and written
    by the consumer in place while ``keepalive`` is held for it."""
    if dtype.kind not in _CODES:
        raise SvodError(f"{dtype.name} has no DLPack type", stage="buffer", value=dtype.name)
    shape = (ctypes.c_int64 * 1)(count)
    managed = _DLManagedTensor()
    managed.dl_tensor = _DLTensor(address, _DLDevice(device_type, device_id), 1,
                                  _DLDataType(_CODES[dtype.kind], dtype.itemsize * 8, 1), shape, None, 0)
    managed.deleter = _delete
    _alive[ctypes.addressof(managed)] = (managed, shape, keepalive)
    return _capsule_new(ctypes.addressof(managed), b"dltensor", _unconsumed)


# ---- importing: a producer's tensor as svod memory ----------------------------------------------------------

def producer_device(obj: Any) -> tuple[int, int]:
    """DLPack's (device type, device id) of ``obj``: the host's for an object that does not say."""
    return obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (KDL_CPU, 0)


def in_device_memory(obj: Any) -> bool:
    """Whether ``obj`` is a DLPack producer whose memory is a device's (a CUDA tensor), not the host's."""
    return producer_device(obj)[0] != KDL_CPU


def device_name(device_type: int, device_id: int) -> str:
    """svod's name of the device DLPack calls so: ``CPU`` or ``CUDA:N``; svod has no other memory to import."""
    if device_type == KDL_CPU:
        return "CPU"
    if device_type == KDL_CUDA:
        return f"CUDA:{device_id}"
    raise SvodError(f"svod imports DLPack memory of the host and of CUDA devices, not of device type {device_type}",
                    stage="buffer", value=device_type)


_capsule_valid = _pythonapi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_pointer = _pythonapi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_capsule_rename = _pythonapi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_KINDS = {code: kind for kind, code in _CODES.items()}


class Imported:
    """A tensor taken from a producer's capsule: its memory's address (``byte_offset`` included), device,
    dtype and shape. The tensor is the importer's from then on: its deleter runs when this is collected."""

    def __init__(self, managed: int) -> None:
        self._owned = False
        self._managed = _DLManagedTensor.from_address(managed)
        tensor = self._managed.dl_tensor
        self.address: int = (tensor.data or 0) + tensor.byte_offset
        self.device_type: int = tensor.device.device_type
        self.device_id: int = tensor.device.device_id
        self.shape = tuple(int(tensor.shape[k]) for k in range(tensor.ndim))
        self.strides = None if not tensor.strides else tuple(int(tensor.strides[k]) for k in range(tensor.ndim))
        self.dtype = _imported_dtype(tensor.dtype)

    @property
    def c_contiguous(self) -> bool:
        """Compact in C order (a dimension of one element may have any stride, as DLPack allows)."""
        if self.strides is None:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def __del__(self) -> None:
        if getattr(self, "_owned", False) and self._managed.deleter:
            self._managed.deleter(ctypes.pointer(self._managed))


def _imported_dtype(dtype: _DLDataType) -> DType:
    from svod.dtype import dtypes

    kind = _KINDS.get(dtype.code)
    name = "bool" if kind == "bool" else f"{kind}{dtype.bits}"
    if kind is None or dtype.lanes != 1 or name not in {d.name for d in dtypes.all()}:
        raise SvodError(f"svod has no dtype for DLPack's type code {dtype.code} of {dtype.bits} bits x {dtype.lanes}",
                        stage="buffer", value=(dtype.code, dtype.bits, dtype.lanes))
    return dtypes.from_name(name)


def take(capsule: Any) -> Imported:
    """The tensor of an unconsumed ``dltensor`` capsule, which is marked used (its deleter is ours to run)."""
    if not _capsule_valid(capsule, b"dltensor"):
        raise SvodError("the producer's __dlpack__ gave no unconsumed DLPack capsule", stage="buffer",
                        value=type(capsule).__name__)
    imported = Imported(_capsule_pointer(capsule, b"dltensor"))
    _capsule_rename(capsule, b"used_dltensor")
    imported._owned = True
    return imported
