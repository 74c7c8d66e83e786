"""CUDA C: the C-style table with CUDA's types, qualifiers and thread indices.

Buffers arrive as device pointers (a view is its base pointer plus the view's byte offset), variables
as ``long long``. CUDA always launches with a block size, so every GLOBAL range gets ``gidx``/``lidx``.
"""

from __future__ import annotations

from typing import ClassVar

from svod.codegen.render.cstyle import GPURenderer
from svod.device import DeviceCaps
from svod.device.caps import CUDA_CAPS
from svod.dtype import DeviceSpec, DType
from svod.ir import Ops, UOp

_AXES = "xyz"
_BITCAST_HELPER = ("template <class T, class F> __device__ inline T svod_bitcast(F v) "
                   "{ union { F f; T t; } u; u.f = v; return u.t; }\n")


class CUDARenderer(GPURenderer):
    type_names: ClassVar[dict[str, str]] = {
        "bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
        "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int", "int64": "long long",
        "index": "long long", "uint64": "unsigned long long", "float32": "float", "float64": "double",
    }
    infinity: ClassVar[str] = "(1.0/0.0)"
    nan: ClassVar[str] = "(0.0/0.0)"
    preamble: ClassVar[str] = _BITCAST_HELPER
    bitcast_template: ClassVar[str] = "svod_bitcast<{type}>({value})"
    signed_overflow_wraps: ClassVar[bool] = False
    helper_qualifier: ClassVar[str] = "__device__ inline"
    signbit: ClassVar[str] = "signbit"

    def __init__(self, device: DeviceSpec | str = "CUDA", caps: DeviceCaps = CUDA_CAPS) -> None:
        super().__init__(device, caps)

    def atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """CUDA's atomicAdd/atomicMax/atomicMin where they exist (64-bit signed adds go through the unsigned
        form: two's complement makes them one); float MAX/MIN through a compare-and-swap loop."""
        t = self.type_name(dtype)
        if op is Ops.ADD or dtype.is_int:
            target = "unsigned long long" if dtype.name == "int64" and op is Ops.ADD else t
            name = {Ops.ADD: "atomicAdd", Ops.MAX: "atomicMax", Ops.MIN: "atomicMin"}[op]
            return f"{name}(({target}*){pointer}, ({target}){value});"
        bits = "unsigned int" if dtype.itemsize == 4 else "unsigned long long"
        combine = self.combine(op, dtype, f"svod_bitcast<{t}>(seen)", value)
        return (f"{{ {bits}* word = ({bits}*){pointer}; {bits} seen = *word; for (;;) {{ "
                f"{bits} want = svod_bitcast<{bits}>({combine}); {bits} found = atomicCAS(word, seen, want); "
                f"if (found == seen) break; seen = found; }} }}")

    def signature(self, symbol: str, params: list[UOp], variables: list[UOp], linear: tuple[UOp, ...]) -> list[str]:
        args = [f"{self.pointer_type(p)} data{p.arg}" for p in params]
        args += [f"long long {v.arg[0]}_arg" for v in variables]
        lines = [f'extern "C" __global__ void {symbol}({", ".join(args)}) {{']
        lines += [f"  const {self.type_name(v.dtype)} {v.arg[0]} = ({self.type_name(v.dtype)}){v.arg[0]}_arg;"
                  for v in variables]
        return lines

    def shuffle_down(self, dtype: DType, value: str, distance: int) -> str:
        """``__shfl_down_sync`` over the whole warp, which moves 4 and 8 bytes: a narrower value (a bool, a
        half's bits) as an int and back."""
        if dtype.itemsize >= 4:
            return f"__shfl_down_sync(0xffffffffu, {value}, {distance})"
        return f"({self.type_name(dtype)})__shfl_down_sync(0xffffffffu, (int){value}, {distance})"

    def declare_local(self, dtype: DType, name: str, size: int) -> str:
        return f"__shared__ {self.memory_type_name(dtype)} {name}[{size}];"

    def barrier(self) -> str:
        return "__syncthreads();"

    def special(self, node: UOp) -> str:
        name: str = node.arg
        axis = _AXES[int(name[-1])]
        if name.startswith("g"):
            return f"(long long)blockIdx.{axis}"
        if name.startswith("l"):
            return f"(long long)threadIdx.{axis}"
        return f"((long long)blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})"
