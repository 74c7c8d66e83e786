"""DLPack capsules for device memory numpy cannot describe (a CUDA buffer): the ``DLManagedTensor`` of
the DLPack ABI, built with ctypes, and the capsule that hands it to a consumer.

The tensor owns nothing but a reference to what keeps its memory alive; the consumer calls its deleter
when done, and a capsule nobody consumed calls it when it is collected.
"""

from __future__ import annotations

import ctypes
from typing import Any

from svod.dtype import DType
from svod.errors import SvodError

KDL_CPU, KDL_CUDA, KDL_OPENCL, KDL_WEBGPU = 1, 2, 4, 15
"""DLPack's device types (``DLDeviceType``) of the devices svod has."""
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
_pythonapi = ctypes.pythonapi
_pythonapi.PyCapsule_New.restype = ctypes.py_object
_pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
_pythonapi.PyCapsule_IsValid.restype = ctypes.c_int
_pythonapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_DESTRUCTOR
def _unconsumed(capsule: int) -> None:
    """A capsule collected without a consumer taking the tensor: delete the tensor ourselves."""
    if _pythonapi.PyCapsule_IsValid(capsule, b"dltensor"):
        _alive.pop(_pythonapi.PyCapsule_GetPointer(capsule, b"dltensor"), None)


def capsule(address: int, device_type: int, device_id: int, dtype: DType, count: int, keepalive: Any) -> Any:
    """A DLPack capsule for ``count`` elements of ``dtype`` at ``address``: 1-D, compact, read and written
    by the consumer in place while ``keepalive`` is held for it."""
    if dtype.kind not in _CODES:
        raise SvodError(f"{dtype.name} has no DLPack type", stage="dlpack", value=dtype.name)
    shape = (ctypes.c_int64 * 1)(count)
    managed = _DLManagedTensor()
    managed.dl_tensor = _DLTensor(address, _DLDevice(device_type, device_id), 1,
                                  _DLDataType(_CODES[dtype.kind], dtype.itemsize * 8, 1), shape, None, 0)
    managed.deleter = _delete
    _alive[ctypes.addressof(managed)] = (managed, shape, keepalive)
    return _pythonapi.PyCapsule_New(ctypes.addressof(managed), b"dltensor", _unconsumed)
