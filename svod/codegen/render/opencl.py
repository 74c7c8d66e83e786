"""OpenCL C: the C-style table with OpenCL's types, qualifiers and work-item functions.

Buffers arrive as a ``__global`` base pointer and a byte offset each, so a kernel can run on a view at
any element offset (OpenCL sub-buffers would need the device's base-address alignment). Variables
arrive as ``long`` arguments.

A value of ``W`` lanes (``Ops.LANE``: a work item's row of a tile) is an OpenCL vector (``float16`` is 16
floats here), its bools an ``intW`` mask (-1 true, 0 false, as OpenCL's vector comparisons give); every
scalar it meets is broadcast explicitly, since OpenCL widens a scalar only of a lower rank. Neighbouring
elements are ``vloadW``/``vstoreW``, others one element per lane; conversions are ``convert_*`` (a float to
an integer ``_sat``: saturating, NaN to 0, as svod defines it).
"""

from __future__ import annotations

from typing import ClassVar

from svod.codegen.render.cstyle import GPURenderer
from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, UOp
from svod.ir.uop import pointee

_WORK_ITEM_FUNCTIONS = {"g": "get_group_id", "l": "get_local_id", "i": "get_global_id"}
_COMPONENTS = "0123456789abcdef"
_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.AND: "&",
          Ops.OR: "|", Ops.XOR: "^", Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
_SIGNED = {1: "char", 2: "short", 4: "int", 8: "long"}
_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


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

    # ---- lanes ---------------------------------------------------------------------------------------

    def lanes_type(self, dtype: DType, lanes: int) -> str:
        if lanes not in (2, 3, 4, 8, 16) or dtype == dtypes.float16:
            raise GraphError(f"OpenCL has no vector of {lanes} {dtype.name}", stage="render", value=lanes)
        return f"int{lanes}" if dtype.kind == "bool" else f"{self.type_name(dtype)}{lanes}"

    def lanes_broadcast(self, value: str, dtype: DType, lanes: int) -> str:
        if dtype.kind == "bool":
            return f"((int{lanes})(-(int)({value})))"
        return f"(({self.lanes_type(dtype, lanes)})({value}))"

    def lanes_ramp(self, lanes: int) -> str:
        return f"((long{lanes})({', '.join(str(c) for c in range(lanes))}))"

    def _mask(self, mask: str, itemsize: int, lanes: int) -> str:
        """A mask of lanes as ``select`` takes it for elements of ``itemsize`` bytes."""
        return mask if itemsize == 4 else f"convert_{_SIGNED[itemsize]}{lanes}({mask})"

    def lanes_alu(self, op: Ops, dtype: DType, operand_dtype: DType, args: list[str], lanes: int) -> str:
        a = args[0]
        vector = self.lanes_type(dtype, lanes)
        if op in (Ops.CMPLT, Ops.CMPLE, Ops.CMPNE, Ops.CMPEQ):
            compared = f"({a}{_INFIX[op]}{args[1]})"
            wide = operand_dtype.kind != "bool" and operand_dtype.itemsize != 4
            return f"convert_int{lanes}({compared})" if wide else compared
        if op is Ops.WHERE:
            itemsize = 4 if dtype.kind == "bool" else dtype.itemsize  # a bool of lanes is an intW mask
            return f"select({args[2]}, {args[1]}, {self._mask(a, itemsize, lanes)})"
        if op in (Ops.MAX, Ops.MIN) and dtype.is_float:
            wins = f"({a}{'>' if op is Ops.MAX else '<'}{args[1]})|isnan({args[1]})|" \
                   f"(({a}=={args[1]})&{'!' if op is Ops.MAX else ''}signbit({a}))"
            return f"select({args[1]}, {a}, {wins})"
        if op in (Ops.MAX, Ops.MIN):
            return f"select({args[1]}, {a}, {a}{'>' if op is Ops.MAX else '<'}{args[1]})"
        if op is Ops.MULACC or op in self.math_functions:
            return f"{self.math_functions[op]}({', '.join(args)})"
        if op is Ops.RECIPROCAL:
            return f"({self.lanes_broadcast(self.float_literal(1.0, dtype), dtype, lanes)}/{a})"
        wraps = self.wraps_in_unsigned(dtype)
        if op is Ops.NEG:
            return f"as_{vector}(-as_u{vector}({a}))" if wraps else f"(-{a})"
        if op in _INFIX:
            if wraps and op in (Ops.ADD, Ops.SUB, Ops.MUL):
                return f"as_{vector}(as_u{vector}({a}){_INFIX[op]}as_u{vector}({args[1]}))"
            return f"({a}{_INFIX[op]}{args[1]})"
        raise GraphError(f"no OpenCL vector spelling of {op.name}", stage="render", value=op)

    def lanes_cast(self, value: str, src: DType, dst: DType, lanes: int) -> str:
        if dst.kind == "bool":
            zero = self.lanes_broadcast(self.literal(0, src), src, lanes)
            return self.lanes_alu(Ops.CMPNE, dst, src, [value, zero], lanes)
        target = self.lanes_type(dst, lanes)
        if src.kind == "bool":
            return f"convert_{target}(-({value}))"
        if src.is_float and dst.is_int:
            return f"convert_{target}_sat({value})"
        if not (src.is_int and dst.is_int) or dst.itemsize > src.itemsize:
            return f"convert_{target}({value})"
        if dst.itemsize == src.itemsize:
            return f"as_{target}({value})"
        wide, narrow = f"{_UNSIGNED[src.itemsize]}{lanes}", f"{_UNSIGNED[dst.itemsize]}{lanes}"
        low = f"(({wide})({(1 << 8 * dst.itemsize) - 1}UL))"  # the bits an integer keeps, as C's cast keeps them
        return f"as_{target}(convert_{narrow}(as_{wide}({value})&{low}))"

    def lane_of(self, vector: str, lane: int) -> str:
        return f"({vector}).s{_COMPONENTS[lane]}"

    def lanes_of(self, dtype: DType, elements: list[str]) -> str:
        return f"(({self.lanes_type(dtype, len(elements))})({', '.join(elements)}))"

    def every_lane(self, mask: str, lanes: int) -> str:
        return f"all({mask})"

    def whole_load(self, pointer: str, dtype: DType, lanes: int) -> str:
        return f"vload{lanes}(0, {pointer})"

    def whole_store(self, pointer: str, value: str, lanes: int) -> str:
        return f"vstore{lanes}({value}, 0, {pointer});"
