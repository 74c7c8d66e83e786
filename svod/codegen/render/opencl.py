"""OpenCL C: the C-style table with OpenCL's types, qualifiers and work-item functions.

Buffers arrive as a ``__global`` base pointer and a byte offset each, so a kernel can run on a view at
any element offset (OpenCL sub-buffers would need the device's base-address alignment). Variables
arrive as ``long`` arguments.
"""

from __future__ import annotations

from typing import ClassVar

from svod.codegen.render.cstyle import GPURenderer
from svod.dtype import DType
from svod.ir import Ops, UOp
from svod.ir.uop import pointee

_WORK_ITEM_FUNCTIONS = {"g": "get_group_id", "l": "get_local_id", "i": "get_global_id"}


class OpenCLRenderer(GPURenderer):
    type_names: ClassVar[dict[str, str]] = {
        "bool": "bool", "int8": "char", "uint8": "uchar", "int16": "short", "uint16": "ushort", "int32": "int",
        "uint32": "uint", "int64": "long", "index": "long", "uint64": "ulong", "float16": "half",
        "float32": "float", "float64": "double",
    }
    infinity: ClassVar[str] = "INFINITY"
    nan: ClassVar[str] = "NAN"
    math_suffix: ClassVar[dict[str, str]] = {"float32": "", "float64": ""}
    preamble: ClassVar[str] = "#pragma OPENCL FP_CONTRACT OFF\n"
    bitcast_template: ClassVar[str] = "as_{type}({value})"
    int64_suffix: ClassVar[tuple[str, str]] = ("L", "UL")
    bool_memory_type: ClassVar[str | None] = "uchar"
    signed_overflow_wraps: ClassVar[bool] = False
    helper_qualifier: ClassVar[str] = "inline"
    signbit: ClassVar[str] = "signbit"

    @property
    def fp16(self) -> bool:
        return self.caps.native_float16

    @property
    def cache_key(self) -> str:
        return f"{super().cache_key}-fp16{self.fp16}"

    def preamble_for(self, linear: tuple[UOp, ...]) -> str:
        used = {u.dtype.name for u in linear} | {pointee(u).name for u in linear if u.op is Ops.PARAM}
        pragmas = [self.preamble]
        if "float64" in used:
            pragmas.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n")
        if "float16" in used and self.fp16:
            pragmas.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n")
        if any(u.op is Ops.ATOMIC and u.src[1].dtype.itemsize == 8 for u in linear):
            pragmas.append("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n"
                           "#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable\n")
        return "".join(pragmas)

    def atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """32-bit integers use OpenCL's atomic functions; 64-bit integers the ``atom_*`` ones of the int64
        atomics extensions; floats a compare-exchange loop on their bit pattern."""
        t = self.type_name(dtype)
        if dtype.is_int:
            function = ("atomic_" if dtype.itemsize == 4 else "atom_") + op.name.lower()
            return f"{function}((volatile __global {t}*){pointer}, {value});"
        bits = "uint" if dtype.itemsize == 4 else "ulong"
        swap = "atomic_cmpxchg" if dtype.itemsize == 4 else "atom_cmpxchg"
        combine = self.combine(op, dtype, f"as_{t}(seen)", value)
        return (f"{{ volatile __global {bits}* word = (volatile __global {bits}*){pointer}; {bits} seen = *word; "
                f"for (;;) {{ {bits} want = as_{bits}({combine}); {bits} found = {swap}(word, seen, want); "
                f"if (found == seen) break; seen = found; }} }}")

    def signature(self, symbol: str, params: list[UOp], variables: list[UOp], linear: tuple[UOp, ...]) -> list[str]:
        args = [f"__global {self.pointer_type(p)} data{p.arg}_base, long data{p.arg}_offset" for p in params]
        args += [f"long {v.arg[0]}_arg" for v in variables]
        lines = [f"__kernel void {symbol}({', '.join(args)}) {{"]
        for p in params:
            pointer = f"__global {self.pointer_type(p)}"
            lines.append(f"  {pointer} data{p.arg} = ({pointer})((__global char*)data{p.arg}_base + "
                         f"data{p.arg}_offset);")
        lines += [f"  const {self.type_name(v.dtype)} {v.arg[0]} = ({self.type_name(v.dtype)}){v.arg[0]}_arg;"
                  for v in variables]
        return lines

    def declare_local(self, dtype: DType, name: str, size: int) -> str:
        return f"__local {self.memory_type_name(dtype)} {name}[{size}];"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def special(self, node: UOp) -> str:
        name: str = node.arg
        return f"(long){_WORK_ITEM_FUNCTIONS[name[0]]}({name[-1]})"

