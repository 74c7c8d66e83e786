"""LLVM's spelling of svod's types and constants: a value's type in registers (``llvm_type``) and in memory
(``memory_type``), an intrinsic's suffix for a float type, and a constant's literal."""

from __future__ import annotations

import struct

from svod.dtype import DType, PtrDType

__all__ = ["INTRINSIC_SUFFIX", "llvm_literal", "llvm_type", "memory_type"]


def llvm_type(dtype: DType) -> str:
    if isinstance(dtype, PtrDType):
        return "ptr"
    return _TYPES[dtype.name]


def memory_type(dtype: DType) -> str:
    """How a value is stored in memory: bools are a byte there, ``i1`` in registers."""
    return "i8" if dtype.kind == "bool" else llvm_type(dtype)


_TYPES = {
    "bool": "i1", "int8": "i8", "uint8": "i8", "int16": "i16", "uint16": "i16", "int32": "i32", "uint32": "i32",
    "int64": "i64", "uint64": "i64", "index": "i64", "float16": "half", "float32": "float", "float64": "double",
}
INTRINSIC_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}


def llvm_literal(value: bool | int | float, dtype: DType) -> str:
    if dtype.kind == "bool":
        return "true" if value else "false"
    if dtype.is_int:
        return str(int(value))
    if dtype.name == "float16":
        return "0xH" + struct.pack(">e", value).hex().upper()
    # LLVM spells float and double constants as the 64-bit pattern of the (exactly representable) double
    return "0x" + struct.pack(">d", float(value)).hex().upper()
