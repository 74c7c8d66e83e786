"""The C-style renderer: one walk over LINEAR that C, OpenCL C, CUDA C and WGSL share.

A language is a table: type names, literal spellings, infix and math spellings per op, and a few hooks for
what differs structurally (the kernel signature, how buffers and variables arrive, thread indices,
atomics). The walk gives every value an immutable local (``const``; WGSL's ``let``), inlines constants and
pointer arithmetic, and opens a block per RANGE and IF.

Where C leaves a result undefined, the renderer spells svod's definition (``svod.ir.alu``): division
that cannot trap, float MAX/MIN as maximumNumber/minimumNumber (small helpers, since ``fmax`` leaves the
sign of a zero open), and float-to-integer conversion that saturates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from svod.codegen.checks import CHECKED
from svod.codegen.decompositions import FLOAT16_IN_FLOAT32
from svod.codegen.render.base import KernelRenderer, ScopedNames, contiguous, lane_widths, reassociable_accumulators
from svod.codegen.render.lane_lines import Line, lane_line
from svod.device import DeviceCaps, WorkGroupLimits, kernel_variables
from svod.dtype import DeviceSpec, DType, PtrDType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp
from svod.ir.ops import COMPARISON, MATH
from svod.ir.uop import is_unbounded, memory_of, pointee

_INFIX: dict[Ops, str] = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPNE: "!=",
    Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
_WRAPPING = (Ops.ADD, Ops.SUB, Ops.MUL)
_PRAGMA_OPS = {Ops.ADD: "+", Ops.MUL: "*", Ops.MULACC: "+"}
def _half_helpers(qualifier: str, u16: str, u32: str, u64: str, bitcast: Callable[[str, str, str], str],
                  with_double: bool, L: str) -> str:  # noqa: N803 (the suffix of 64-bit unsigned literals)
    """IEEE binary16 <-> binary32 (and binary64 -> binary16) conversions in integer arithmetic, rounding to
    nearest even, for a language without half arithmetic: a half is stored as its 16 bits. ``bitcast(to,
    from, value)`` spells a bit cast. A double narrows directly, never through float (rounding twice could
    miss a tie)."""
    to_float = (
        f"{qualifier} float svod_f16_to_f32({u16} h) {{\n"
        f"  {u32} sign = ({u32})(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
        f"  if (e == 0u) {{ float v = (float)m * 5.9604644775390625e-8f; return sign ? -v : v; }}\n"
        f"  {u32} x = sign | (e == 0x1fu ? 0x7f800000u : (e + 112u) << 23) | (m << 13);\n"
        f"  return {bitcast('float', u32, 'x')};\n}}\n")
    from_float = (
        f"{qualifier} {u16} svod_f32_to_f16(float value) {{\n"
        f"  {u32} x = {bitcast(u32, 'float', 'value')}, a = x & 0x7fffffffu;\n"
        f"  {u16} sign = ({u16})((x >> 16) & 0x8000u);\n"
        f"  if (a > 0x7f800000u) return ({u16})(sign | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
        f"  if (a >= 0x477ff000u) return ({u16})(sign | 0x7c00u);\n"
        f"  {u32} r, rem, tie;\n"
        f"  if (a >= 0x38800000u) {{ {u32} v = a - 0x38000000u; r = v >> 13; rem = v & 0x1fffu; tie = 0x1000u; }}\n"
        f"  else if ((a >> 23) < 102u) {{ return sign; }}\n"
        f"  else {{ {u32} s = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u; r = m >> s; "
        f"rem = m & ((1u << s) - 1u); tie = 1u << (s - 1u); }}\n"
        f"  if (rem > tie || (rem == tie && (r & 1u))) r += 1u;\n"
        f"  return ({u16})(sign | r);\n}}\n")
    if not with_double:
        return to_float + from_float
    from_double = (
        f"{qualifier} {u16} svod_f64_to_f16(double value) {{\n"
        f"  {u64} x = {bitcast(u64, 'double', 'value')}, a = x & 0x7fffffffffffffff{L};\n"
        f"  {u16} sign = ({u16})((x >> 48) & 0x8000u);\n"
        f"  if (a > 0x7ff0000000000000{L}) return ({u16})(sign | 0x7e00u | ((a >> 42) & 0x3ffu));\n"
        f"  if (a >= 0x40effe0000000000{L}) return ({u16})(sign | 0x7c00u);\n"
        f"  {u64} r, rem, tie;\n"
        f"  if (a >= 0x3f10000000000000{L}) {{ {u64} v = a - 0x3f00000000000000{L}; r = v >> 42; "
        f"rem = v & 0x3ffffffffff{L}; tie = 0x20000000000{L}; }}\n"
        f"  else if ((a >> 52) < 998{L}) {{ return sign; }}\n"
        f"  else {{ {u64} s = 1051{L} - (a >> 52), m = (a & 0xfffffffffffff{L}) | 0x10000000000000{L}; "
        f"r = m >> s; rem = m & ((1{L} << s) - 1{L}); tie = 1{L} << (s - 1{L}); }}\n"
        f"  if (rem > tie || (rem == tie && (r & 1{L}))) r += 1{L};\n"
        f"  return ({u16})(sign | r);\n}}\n")
    return to_float + from_float + from_double


class CStyleRenderer(KernelRenderer):
    """C as the base table; OpenCL and CUDA override entries."""

    type_names: ClassVar[dict[str, str]] = {
        "bool": "_Bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
        "index": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
        "uint64": "uint64_t", "float16": "_Float16", "float32": "float", "float64": "double"}
    infinity: ClassVar[str] = "__builtin_inf()"
    nan: ClassVar[str] = "__builtin_nan(\"\")"
    float_suffix: ClassVar[dict[str, str]] = {"float32": "f", "float64": ""}
    """Literal suffix per float type; other float types are spelled as a cast of a float literal."""
    math_functions: ClassVar[dict[Ops, str]] = {
        Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.ABS: "fabs", Ops.EXP: "exp",
        Ops.LOG: "log", Ops.COS: "cos", Ops.TAN: "tan", Ops.TANH: "tanh", Ops.ERF: "erf", Ops.FLOOR: "floor",
        Ops.CEIL: "ceil", Ops.TRUNC: "trunc", Ops.RINT: "rint", Ops.POW: "pow", Ops.FMOD: "fmod", Ops.MULACC: "fma",
    }
    math_suffix: ClassVar[dict[str, str]] = {"float32": "f", "float64": ""}
    """Appended to a math function's name per float type (``sinf``); float16 computes in float32."""
    preamble: ClassVar[str] = "#include <stdint.h>\n#include <math.h>\n"
    helper_qualifier: ClassVar[str] = "static inline"
    signbit: ClassVar[str] = "__builtin_signbit"
    bitcast_template: ClassVar[str] = "(((union {{ {source} from; {type} to; }}){{ .from = {value} }}).to)"
    """Reinterpret ``{value}`` of type ``{source}`` as ``{type}`` (a union: C has no bit cast gcc accepts)."""
    int64_suffix: ClassVar[tuple[str, str]] = ("ll", "ull")
    """Suffixes of 64-bit signed and unsigned literals."""
    bool_memory_type: ClassVar[str | None] = None
    """The type that stores a bool in a buffer, where the language has no bool in memory."""
    signed_overflow_wraps: ClassVar[bool] = True
    """Whether signed arithmetic wraps (C compiled with -fwrapv); if not, it is rendered in unsigned."""
    reduction_pragma: ClassVar[str | None] = None
    """Put before a loop whose accumulators it may reassociate (``reassociable_accumulators``), to let the
    compiler do so: ``{reductions}`` is filled in with a ``reduction(op:names)`` clause for each operator."""
    global_qualifier: ClassVar[str] = ""
    """What a pointer to a kernel buffer is qualified with (``__global`` in OpenCL)."""
    branches_by_turn: ClassVar[bool] = False
    """Whether a load of lanes whose gate may fail in some of them tests all its lanes at every turn of its loop,
    to load them whole where they all pass (else only where the gate is the same at every turn)."""
    part_token: ClassVar[str] = "@"
    """Stands for the part's number in the line of a value of lanes rendered in parts (``lane_part_bytes``);
    no spelling of the languages has it."""

    @property
    def lane_part_bytes(self) -> int | None:
        """The most bytes a value of lanes takes in one vector of the language, or None without a limit: wider
        values are rendered as several vectors (parts) side by side, each of a line of its own."""
        return None

    # ---- structure hooks -----------------------------------------------------------------------------

    def signature(self, symbol: str, params: list[UOp], variables: list[UOp], linear: tuple[UOp, ...]) -> list[str]:
        """The function header and the lines that bind buffers and variables to C names."""
        lines = [f"void {symbol}(void **bufs, const int64_t *vars, int64_t core_id) {{"]
        lines += [f"  {self.pointer_type(p)} restrict data{p.arg} = ({self.pointer_type(p)})bufs[{position}];"
                  for position, p in enumerate(params)]
        lines += [f"  const {self.type_name(v.dtype)} {v.arg[0]} = ({self.type_name(v.dtype)})vars[{k}];"
                  for k, v in enumerate(variables)]
        return lines

    def pointer_type(self, param: UOp) -> str:
        return f"{self.memory_type_name(pointee(param))}*"

    def memory_type_name(self, dtype: DType) -> str:
        if dtype.kind == "bool" and self.bool_memory_type is not None:
            return self.bool_memory_type
        return self.type_name(dtype)

    def preamble_for(self, linear: tuple[UOp, ...]) -> str:
        """Declarations the source needs before the kernel (headers, extension pragmas)."""
        return self.preamble

    def reduction_operator(self, update: UOp) -> str | None:
        """The operator ``reduction_pragma`` names for an accumulator's update (a STORE), or None: it has none."""
        return _PRAGMA_OPS.get(update.src[1].op)

    def loop_hints(self, linear: tuple[UOp, ...]) -> dict[UOp, str]:
        """A line to put before some loops (after any reduction pragma) on how to unroll them; none by default."""
        return {}

    # ---- statement shapes (C's; a language without pointers or ``?:`` overrides them) -------------------

    def declare(self, dtype: DType, name: str, value: str) -> str:
        """A local that names a value computed once."""
        return f"const {self.type_name(dtype)} {name} = {value};"

    def declare_register(self, dtype: DType, name: str) -> str:
        return f"{self.type_name(dtype)} {name};"

    def loop_header(self, name: str, end: str | None) -> str:
        """The line that opens a loop of ``name`` over ``0 .. end-1``; ``end`` None: without a bound (its
        exits end it)."""
        index = self.type_name(dtypes.index)
        test = "" if end is None else f" {name} < {end}"
        return f"for ({index} {name} = 0;{test}; {name}++) {{"

    def exit_loop(self, condition: str) -> str:
        """The statement that leaves the innermost loop where ``condition`` holds (``Ops.EXIT``)."""
        return f"if ({condition}) break;"

    def element(self, base: str, offset: str) -> str:
        """What names element ``offset`` of buffer ``base`` (a pointer in C)."""
        return f"({base}+{offset})"

    def register_element(self, register: str) -> str:
        return f"(&{register})"

    def local_element(self, base: str, offset: str) -> str:
        """What names element ``offset`` of work-group memory ``base``."""
        return self.element(base, offset)

    def declare_local(self, dtype: DType, name: str, size: int) -> str | None:
        """The statement that declares ``size`` elements of work-group memory in the kernel (None where they
        are declared outside it)."""
        raise GraphError(f"{type(self).__name__} has no work-group memory", stage="render", value=name)

    def local_atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """A statement that updates ``*pointer`` in work-group memory with ``op``, as one step for the group."""
        return self.atomic(op, dtype, pointer, value)

    def barrier(self) -> str:
        """The statement that waits for every work item of the group (``Ops.BARRIER``)."""
        raise GraphError(f"{type(self).__name__} has no work-group barrier", stage="render")

    def deref(self, element: str) -> str:
        """The value (or assignable place) an ``element`` names."""
        return f"*{element}"

    def choose(self, condition: str, if_true: str, if_false: str) -> str:
        return f"({condition}?{if_true}:{if_false})"

    def to_memory(self, value: str) -> str:
        """A bool as the buffer stores it (``bool_memory_type``)."""
        return f"({self.bool_memory_type})({value})"

    def special(self, node: UOp) -> str:
        raise GraphError(f"{type(self).__name__} has no thread index {node.arg}", stage="render", value=node.arg)

    def atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """A statement that updates ``*pointer`` with ``op`` atomically (relaxed order)."""
        t = self.type_name(dtype)
        if op is Ops.ADD and dtype.is_int:
            return f"__atomic_fetch_add({pointer}, {value}, __ATOMIC_RELAXED);"
        bits = self.type_name(_unsigned_of(dtype))
        combine = self.combine(op, dtype, "old", value)
        old = self.bitcast_template.format(type=t, source=bits, value="seen")
        want = self.bitcast_template.format(type=bits, source=t, value="next")
        return (f"{{ {bits} seen = __atomic_load_n(({bits}*){pointer}, __ATOMIC_RELAXED); {bits} want; do {{ "
                f"{t} old = {old}; {t} next = {combine}; want = {want}; }} while (!__atomic_compare_exchange_n("
                f"({bits}*){pointer}, &seen, want, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); }}")

    # ---- spellings -----------------------------------------------------------------------------------

    @property
    def emulates_float16(self) -> bool:
        """Whether a float16 is stored as its 16 bits and computed in float32, rounded back per op (the device
        has no half arithmetic: ``caps.native_float16`` is False)."""
        return not self.caps.native_float16

    def decompositor(self) -> PatternMatcher | None:
        return FLOAT16_IN_FLOAT32 if self.emulates_float16 else None

    def type_name(self, dtype: DType) -> str:
        if dtype == dtypes.float16 and self.emulates_float16:
            return self.type_names["uint16"]
        return self.type_names[dtype.name]

    def literal(self, value: bool | int | float, dtype: DType) -> str:
        if dtype.kind == "bool":
            return "1" if value else "0"
        if dtype.is_float:
            return self.float_literal(float(value), dtype)
        if -(1 << 31) < int(value) < (1 << 31):
            return str(int(value)) if value >= 0 else f"({int(value)})"
        type_name = self.type_name(dtype)
        signed, unsigned = self.int64_suffix
        if dtype.is_unsigned:
            return f"(({type_name}){int(value)}{unsigned})"
        if value == dtype.min and dtype.bits == 64:
            return f"(({type_name})(-{-int(value) - 1}{signed} - 1))"
        return f"(({type_name}){int(value)}{signed})"

    def float_literal(self, value: float, dtype: DType) -> str:
        if dtype == dtypes.float16 and self.emulates_float16:
            return f"(({self.type_name(dtype)}){int(np.array(value, np.float16).view(np.uint16)):#x})"
        cast = f"({self.type_name(dtype)})"
        if math.isnan(value):
            return f"({cast}{self.nan})"
        if math.isinf(value):
            return f"({cast}{'' if value > 0 else '-'}{self.infinity})"
        if dtype.name in self.float_suffix:
            return f"({value.hex()}{self.float_suffix[dtype.name]})"
        return f"({cast}{value.hex()}f)"

    def math_call(self, op: Ops, dtype: DType, args: list[str]) -> str:
        if dtype.name in self.math_suffix:
            return f"{self.math_functions[op]}{self.math_suffix[dtype.name]}({', '.join(args)})"
        wide = [f"(float)({a})" for a in args]
        return f"({self.type_name(dtype)}){self.math_functions[op]}{self.math_suffix['float32']}({', '.join(wide)})"

    def vectorised_sum_of_products(self, dtype: DType, args: list[str]) -> str:
        """``fma(a, b, acc)`` as the update of a sum the reduction pragma lets the compiler vectorise."""
        return self.math_call(Ops.MULACC, dtype, args)

    def combine(self, op: Ops, dtype: DType, a: str, b: str) -> str:
        """``op`` of two values as an atomic update combines them (an emulated half through float32, as the
        decompositor does for every other op)."""
        if dtype == dtypes.float16 and self.emulates_float16:
            wide = self.combine(op, dtypes.float32, f"svod_f16_to_f32({a})", f"svod_f16_to_f32({b})")
            return f"svod_f32_to_f16({wide})"
        if op in (Ops.MAX, Ops.MIN):
            return self.min_max(op, dtype, a, b)
        return f"({a}{_INFIX[op]}{b})"

    def min_max(self, op: Ops, dtype: DType, a: str, b: str) -> str:
        """MAX/MIN; on floats maximumNumber/minimumNumber through a helper of the preamble."""
        if dtype.is_float:
            return f"svod_{op.name.lower()}_{dtype.name}({a}, {b})"
        return f"({a}{'>' if op is Ops.MAX else '<'}{b}?{a}:{b})"

    def alu(self, op: Ops, dtype: DType, operand_dtype: DType, args: list[str], divisor: UOp | None = None) -> str:
        """The C expression of ALU ``op``; ``operand_dtype`` is the type of the operands and ``divisor``
        the divisor node of an integer division."""
        a = args[0]
        if op in MATH or op is Ops.MULACC or (op is Ops.ABS and dtype.is_float):
            return self.math_call(op, dtype, args)
        if op is Ops.RECIPROCAL:
            return f"({self.float_literal(1.0, dtype)}/{a})"
        if op is Ops.NEG and self.wraps_in_unsigned(dtype):
            return f"({self.type_name(dtype)})(0-({self.type_name(_unsigned_of(dtype))}){a})"
        if op is Ops.NEG:
            return f"(-{a})"
        if op is Ops.ABS:  # negated as NEG is: where that wraps, abs(MIN) is MIN, which no compiler may assume away
            return f"({a}<0?{self.alu(Ops.NEG, dtype, operand_dtype, args)}:{a})"
        if op in (Ops.MAX, Ops.MIN):
            return self.min_max(op, dtype, a, args[1])
        if op in (Ops.SHL, Ops.SHR):
            return self.shift(op, dtype, a, args[1])
        if op in (Ops.IDIV, Ops.MOD):
            return self.integer_division(op, operand_dtype, a, args[1], divisor)
        if op is Ops.WHERE:
            return self.choose(a, args[1], args[2])
        if op in _WRAPPING and self.wraps_in_unsigned(dtype):
            unsigned = self.type_name(_unsigned_of(dtype))
            return f"({self.type_name(dtype)})(({unsigned}){a}{_INFIX[op]}({unsigned}){args[1]})"
        return f"({a}{_INFIX[op]}{args[1]})"

    def shift(self, op: Ops, dtype: DType, a: str, b: str) -> str:
        """svod's shifts (``svod.ir.alu.shift``): an amount outside the bits shifts everything out; a left shift
        is unsigned (C leaves it undefined on negative numbers); the value is cast first (C shifts in its type)."""
        t, u = self.type_name(dtype), self.type_name(_unsigned_of(dtype))
        inside = f"({u}){b}<{dtype.bits}"
        if op is Ops.SHL:
            return f"({inside}?({t})(({u}){a}<<{b}):({t})0)"
        outside = f"({a}<0?({t})-1:({t})0)" if dtype.kind == "int" else f"({t})0"
        return f"({inside}?({t})(({t}){a}>>{b}):{outside})"

    def wraps_in_unsigned(self, dtype: DType) -> bool:
        return not self.signed_overflow_wraps and dtype.kind == "int" and dtype != dtypes.index

    def integer_division(self, op: Ops, dtype: DType, a: str, b: str, divisor: UOp | None) -> str:
        """svod's trap-free division: a zero divisor divides by one; MIN / -1 wraps. A constant divisor
        that is neither needs no guard."""
        t = self.type_name(dtype)
        if divisor is not None and divisor.op is Ops.CONST and divisor.arg not in (0, -1):
            return f"({a}{'/' if op is Ops.IDIV else '%'}{b})"
        if dtype.is_unsigned:
            return f"({b}==0?{a}:{a}/{b})" if op is Ops.IDIV else f"({b}==0?({t})0:{a}%{b})"
        negated = f"({t})(0-({self.type_name(_unsigned_of(dtype))}){a})"
        if op is Ops.IDIV:
            return f"({b}==0?{a}:({b}==-1?{negated}:{a}/{b}))"
        return f"(({b}==0||{b}==-1)?({t})0:{a}%{b})"

    def cast(self, value: str, src: DType, dst: DType) -> str:
        """A conversion; a float to an integer saturates and takes NaN to 0 (svod's definition)."""
        if self.emulates_float16 and dtypes.float16 in (src, dst) and src != dst:
            return self.half_cast(value, src, dst)
        t = self.type_name(dst)
        if not (src.is_float and dst.is_int):
            return f"({t})({value})"
        low = -(2.0 ** (dst.bits - 1)) if dst.kind == "int" else -1.0
        high = 2.0 ** (dst.bits - (dst.kind == "int"))
        lo, hi = self.float_literal(low, src), self.float_literal(high, src)
        smallest, largest = self.literal(int(dst.min), dst), self.literal(int(dst.max), dst)
        zero = self.literal(0, dst)
        return f"({value}!={value}?{zero}:{value}<={lo}?{smallest}:{value}>={hi}?{largest}:({t})({value}))"

    def half_cast(self, value: str, src: DType, dst: DType) -> str:
        """A conversion to or from an emulated float16: through float32, except a double, narrowed directly."""
        if src == dtypes.float16:
            wide = f"svod_f16_to_f32({value})"
            return wide if dst == dtypes.float32 else self.cast(wide, dtypes.float32, dst)
        if src == dtypes.float64:
            return f"svod_f64_to_f16({value})"
        return f"svod_f32_to_f16({value if src == dtypes.float32 else self.cast(value, src, dtypes.float32)})"

    def half_helpers(self, linear: tuple[UOp, ...]) -> str:
        """The float16 conversions, where float16 is emulated and the kernel has any."""
        used = {u.dtype.name for u in linear} | {pointee(u).name for u in linear
                                                 if u.op in (Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL)}
        if not self.emulates_float16 or "float16" not in used:
            return ""
        names = (self.type_name(dtypes.uint16), self.type_name(dtypes.uint32), self.type_name(dtypes.uint64))
        def bitcast(to: str, source: str, value: str) -> str:
            return self.bitcast_template.format(type=to, source=source, value=value)

        return _half_helpers(self.helper_qualifier, *names, bitcast, "float64" in used, self.int64_suffix[1])

    def helpers(self, linear: tuple[UOp, ...]) -> str:
        """Definitions of the helpers the kernel uses: float16 conversions, float MAX/MIN."""
        def computed_as(name: str) -> str:
            return "float32" if name == "float16" and self.emulates_float16 else name

        used = sorted({(u.op, computed_as(u.dtype.name)) for u in linear
                       if u.op in (Ops.MAX, Ops.MIN) and u.dtype.is_float}
                      | {(u.arg, computed_as(u.src[1].dtype.name)) for u in linear
                         if u.op is Ops.ATOMIC and u.arg in (Ops.MAX, Ops.MIN) and u.src[1].dtype.is_float},
                      key=lambda k: (k[0].name, k[1]))
        return "".join([self.half_helpers(linear), *(self.extremum_helper(op, self.type_names[name],
                                                                          f"svod_{op.name.lower()}_{name}")
                                                     for op, name in used)])

    def extremum_helper(self, op: Ops, t: str, name: str) -> str:
        """maximumNumber (MAX) or minimumNumber (MIN) of type ``t`` as selects: ``b`` where ``a`` is NaN, then
        the winner, then ``b`` where they are equal and the first's sign loses (-0 for MAX). A compiler
        vectorises selects, where the condition ``a wins || b is NaN || ...`` left a split row maximum scalar
        (through clang 14, many times slower than its sum)."""
        beats, loses = (">", "") if op is Ops.MAX else ("<", "!")
        return (f"{self.helper_qualifier} {t} {name}({t} a, {t} b) {{ {t} x = a != a ? b : a; "
                f"{t} w = b {beats} x ? b : x; return ((x == b) & ({loses}{self.signbit}(x) != 0)) ? b : w; }}\n")

    # ---- lanes (``Ops.LANE``: a language with vector types spells them; ``DeviceCaps.vector_lanes``) ----------

    def no_vectors(self, value: object) -> GraphError:
        """The error of a language without vector types asked to spell lanes (``DeviceCaps.vector_lanes``
        keeps lowering from making them for it)."""
        return GraphError(f"{type(self).__name__} spells no vectors", stage="render", value=value)

    def lanes_type(self, dtype: DType, lanes: int) -> str:
        """The type of ``lanes`` values of ``dtype`` (a bool's: the language's mask of lanes)."""
        raise self.no_vectors(lanes)

    def lanes_broadcast(self, value: str, dtype: DType, lanes: int) -> str:
        """A scalar ``value`` as the same value in every one of ``lanes`` lanes."""
        raise self.no_vectors(lanes)

    def lanes_ramp(self, lanes: int) -> str:
        """The lane numbers ``0 .. lanes-1`` (``Ops.LANE``)."""
        raise self.no_vectors(lanes)

    def lanes_alu(self, op: Ops, dtype: DType, operand_dtype: DType, args: list[str], lanes: int) -> str:
        """ALU ``op`` on operands of ``lanes`` lanes each."""
        raise self.no_vectors(op)

    def lines_compare(self, op: Ops, a: Line, b: Line, lanes: int, total: int) -> str | None:
        """A comparison of index lanes that are lines (``lane_lines``), as a mask of ``lanes`` lanes (a part of
        ``total``), or None to compare them as they are."""
        return None

    def lanes_cast(self, value: str, src: DType, dst: DType, lanes: int) -> str:
        """A conversion of ``lanes`` values, as ``cast`` converts one."""
        raise self.no_vectors(lanes)

    def lane_of(self, vector: str, lane: int) -> str:
        """Lane ``lane`` of the expression ``vector``."""
        raise self.no_vectors(vector)

    def lanes_of(self, dtype: DType, elements: list[str]) -> str:
        """A vector of ``elements``, one a lane."""
        raise self.no_vectors(elements)

    def every_lane(self, mask: str, lanes: int) -> str:
        """Whether the mask ``mask`` holds in every one of its ``lanes`` lanes."""
        raise self.no_vectors(mask)

    def whole_load(self, pointer: str, dtype: DType, lanes: int) -> str:
        """``lanes`` neighbouring elements from ``pointer`` in one vector load (no alignment assumed)."""
        raise self.no_vectors(pointer)

    def whole_store(self, pointer: str, value: str, lanes: int) -> str:
        """A statement storing the vector ``value`` at ``pointer`` in one vector store (no alignment assumed)."""
        raise self.no_vectors(pointer)

    def lanes_load(self, access: LaneAccess, gate: str | None, dtype: DType, lanes: int) -> str:
        """``lanes`` elements of a buffer (``access``), 0 where the lanes' ``gate`` (if any) fails: one vector
        load of neighbouring elements where every lane passes (or may be loaded whole, ``access.whole``), else
        each lane's element (C and OpenCL C have no masked load)."""
        base, offset = access.base, access.offset
        whole = self.whole_load(f"{base}+{self.lane_of(offset, 0)}", dtype, lanes)
        if access.neighbours and gate is None:
            return whole
        zero = self.literal(0, dtype)
        each = [f"{base}[{self.lane_of(offset, c)}]" for c in range(lanes)]
        if gate is not None:
            each = [f"({self.lane_of(gate, c)}?{element}:{zero})" for c, element in enumerate(each)]
        one_by_one = self.lanes_of(dtype, each)
        if access.neighbours and gate is not None:
            return f"({self.every_lane(gate, lanes)}?{whole}:{one_by_one})"
        if access.whole is not None:
            start, passes = access.whole
            whole = self.whole_load(f"{base}+{self.lane_of(start, 0)}", dtype, lanes)
            return f"({self.every_lane(passes, lanes)}?{whole}:{one_by_one})"
        return one_by_one

    def lanes_store(self, access: LaneAccess, value: str, gate: str | None, dtype: DType, lanes: int) -> str:
        """A statement storing ``lanes`` values at neighbouring elements (``access``), only the lanes the
        lanes' ``gate`` (if any) passes: one vector store where every lane passes, else each passing lane's
        element (no masked store either)."""
        base, offset = access.base, access.offset
        whole = self.whole_store(f"{base}+{self.lane_of(offset, 0)}", value, lanes)
        if gate is None:
            return whole
        each = " ".join(f"if ({self.lane_of(gate, c)}) {base}[{self.lane_of(offset, c)}] = "
                        f"{self.lane_of(value, c)};" for c in range(lanes))
        return f"if ({self.every_lane(gate, lanes)}) {{ {whole} }} else {{ {each} }}"

    # ---- the walk -------------------------------------------------------------------------------------

    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        params = sorted((u for u in linear if u.op is Ops.PARAM), key=lambda u: u.arg)
        variables = kernel_variables(linear)
        walk = _Walk(self)
        walk.lanes, walk.register_lanes = lane_widths(linear)
        walk.part_lanes = lane_part_lanes(linear, walk.lanes, walk.register_lanes, self.lane_part_bytes)
        lines = self.signature(symbol, params, variables, linear)
        pragma, hints = self.reduction_pragma, self.loop_hints(linear)
        reductions = {} if pragma is None else {  # a register of lanes is never reassociated
            loop: updates for loop, updates in reassociable_accumulators(linear).items()
            if not any(memory_of(u.src[0].src[0]) in walk.register_lanes for u in updates)}
        walk.vectorised_sums = {u.src[1] for updates in reductions.values() for u in updates
                                if u.src[1].op is Ops.MULACC}
        for index, node in enumerate(linear):
            pad = "  " * walk.depth
            updates = reductions.get(node, ())
            registers: dict[str | None, list[str]] = {}
            for u in updates:
                registers.setdefault(self.reduction_operator(u), []).append(walk.names[u.src[0].src[0]])
            if pragma is not None and registers and None not in registers:
                lines.append(pad + pragma.format(reductions=" ".join(
                    f"reduction({op}:{', '.join(names)})" for op, names in registers.items())))
            lines += [pad + hints[node]] if node in hints else []
            line = walk.node(node, index)
            if line is not None:
                lines += [("  " * walk.depth if node.op is Ops.END else pad) + part for part in walk.parts(node, line)]
        lines.append("}")
        return self.preamble_for(linear) + self.helpers(linear) + "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class LaneAccess:
    """How an INDEX of lanes reaches its buffer: the buffer's name, the lanes' offsets, whether they are
    neighbouring elements (lane ``c`` at lane 0's plus ``c``), and, for offsets ``where(g, p, 0)`` of
    neighbouring ``p``, ``p`` and ``g`` (where ``g`` passes in every lane, the access is ``p``'s)."""

    base: str
    offset: str
    neighbours: bool
    whole: tuple[str, str] | None = None


class _Walk:
    """The state of rendering one kernel: each node's C spelling, and the gate of each gated INDEX."""

    def __init__(self, renderer: CStyleRenderer) -> None:
        self.r = renderer
        self.names = ScopedNames()
        self.gates: dict[UOp, str] = {}
        self.depth = 1
        self.vectorised_sums: set[UOp] = set()
        """The MULACC updates of loops the reduction pragma lets the compiler vectorise."""
        self.lanes: dict[UOp, int] = {}
        self.register_lanes: dict[UOp, int] = {}
        """How many lanes each value and accumulator register of more than one holds (``lane_widths``)."""
        self.part_lanes = 0
        """How many lanes one part of a value of lanes holds, 0 where values are not split in parts."""
        self.offsets: dict[UOp, LaneAccess] = {}
        """How each INDEX of lanes reaches its buffer."""
        self.depths: dict[UOp, int] = {}
        """How deep in loops and IFs each value of its own line is computed."""

    def node(self, node: UOp, index: int) -> str | None:
        """The line of ``node`` (None for a node that only names a value); a value without a statement of
        its own becomes a ``const`` local."""
        statement = _STATEMENTS.get(node.op)
        if statement is not None:
            return statement(self, node, index)
        self.names[node] = f"v{index}{self.part_suffix(self.lanes.get(node, 1))}"
        self.depths[node] = self.depth
        lanes = self.width(self.lanes.get(node, 1))
        if lanes > 1:
            return f"const {self.r.lanes_type(node.dtype, lanes)} {self.names[node]} = {self.lane_value(node, lanes)};"
        return self.r.declare(node.dtype, self.names[node], self.value(node))

    def width(self, lanes: int) -> int:
        """The lanes of one part of a value of ``lanes`` lanes."""
        return min(lanes, self.part_lanes) if self.part_lanes else lanes

    def part_suffix(self, lanes: int) -> str:
        """What ends the name of a value of ``lanes`` lanes: its part's number where it has more than one."""
        return f"_{self.r.part_token}" if self.width(lanes) < lanes else ""

    def parts(self, node: UOp, line: str) -> list[str]:
        """``node``'s line once per part of its lanes (the part's number for ``part_token``)."""
        lanes = self.lanes.get(node, self.register_lanes.get(node, 1))
        count = lanes // self.width(lanes)
        return [line.replace(self.r.part_token, str(part)) for part in range(count)] if count > 1 else [line]

    def end(self, node: UOp, index: int) -> str:
        self.depth -= 1
        self.names.close()
        return "}"

    def after(self, node: UOp, index: int) -> None:
        self.names[node] = self.names[node.src[0]]

    def register(self, node: UOp, index: int) -> str:
        lanes = self.register_lanes.get(node, 1)
        self.names[node] = f"acc{node.arg}{self.part_suffix(lanes)}"
        if lanes > 1:
            return f"{self.r.lanes_type(pointee(node), self.width(lanes))} {self.names[node]};"
        return self.r.declare_register(pointee(node), self.names[node])

    def lane(self, node: UOp, index: int) -> None:
        lanes = self.width(int(node.arg))
        ramp = self.r.lanes_ramp(lanes)
        if lanes < int(node.arg):  # part p's lanes are p*lanes onwards
            ramp = f"({ramp}+{self.r.lanes_broadcast(f'{lanes}*{self.r.part_token}', dtypes.index, lanes)})"
        self.names[node] = ramp

    def local(self, node: UOp, index: int) -> str | None:
        self.names[node] = local_name(node)
        return self.r.declare_local(pointee(node), self.names[node], local_size(node))

    def barrier(self, node: UOp, index: int) -> str:
        return self.r.barrier()

    def const(self, node: UOp, index: int) -> None:
        self.names[node] = self.r.literal(node.arg, node.dtype)

    def variable(self, node: UOp, index: int) -> None:
        self.names[node] = node.arg[0]

    def param(self, node: UOp, index: int) -> None:
        self.names[node] = f"data{node.arg}"

    def special(self, node: UOp, index: int) -> str:
        self.names[node] = node.arg
        return self.r.declare(dtypes.index, node.arg, self.r.special(node))

    def index(self, node: UOp, index: int) -> None:
        base, offset = self.names[node.src[0]], self.names[node.src[1]]
        if _register_of(node.src[0]) is not None:  # a register's address, whatever its gate
            self.names[node] = self.r.register_element(base)
        elif node in self.lanes:
            self.offsets[node] = self.lane_access(node)
        elif memory_of(node.src[0]).op is Ops.DEFINE_LOCAL:
            self.names[node] = self.r.local_element(base, offset)
        else:
            self.names[node] = self.r.element(base, offset)
        if len(node.src) == 3:
            self.gates[node] = self.names[node.src[2]]

    def if_(self, node: UOp, index: int) -> str:
        self.depth += 1
        self.names.open()
        return f"if ({self.names[node.src[0]]}) {{"

    def loop(self, node: UOp, index: int) -> str:
        name = self.names[node] = f"ridx{node.arg[0]}_{index}"
        self.depth += 1
        self.names.open()
        return self.r.loop_header(name, None if is_unbounded(node) else self.names[node.src[0]])

    def exit_(self, node: UOp, index: int) -> str:
        return self.r.exit_loop(self.names[node.src[1]])

    def effect(self, node: UOp, index: int) -> str:
        r = self.r
        dtype = node.src[1].dtype
        gate = self.gates.get(node.src[0])
        if node.src[0] in self.offsets:  # lanes stored to a buffer
            access, lanes = self.offsets[node.src[0]], self.width(self.lanes[node])
            if not access.neighbours or dtype.kind == "bool":
                raise GraphError("lanes are stored to neighbouring elements of numbers only", stage="render",
                                 value=str(dtype))
            masked = len(node.src[0].src) == 3 and node.src[0].src[2] in self.lanes
            line = r.lanes_store(access, self.operand(node.src[1], lanes), gate if masked else None, dtype, lanes)
            gate = None if masked else gate
        elif node.op is Ops.ATOMIC:
            local = memory_of(node.src[0].src[0]).op is Ops.DEFINE_LOCAL
            line = (r.local_atomic if local else r.atomic)(node.arg, dtype, self.names[node.src[0]],
                                                            self.names[node.src[1]])
        elif gate is not None and self.gate_of(node.src[0]) in self.lanes:  # lanes into a register, by lane
            lanes = self.width(self.lanes[node])
            kept = r.lanes_alu(Ops.WHERE, dtype, dtypes.bool, [gate, self.operand(node.src[1], lanes),
                                                               r.deref(self.names[node.src[0]])], lanes)
            return f"{r.deref(self.names[node.src[0]])} = {kept};"
        else:  # a value, or lanes into an accumulator register
            value = self.operand(node.src[1], self.width(self.lanes.get(node, 1)))
            if dtype.kind == "bool" and r.bool_memory_type is not None:
                value = r.to_memory(value)
            line = f"{r.deref(self.names[node.src[0]])} = {value};"
        return line if gate is None else f"if ({gate}) {{ {line} }}"

    def value(self, node: UOp) -> str:
        r = self.r
        src = [self.names[s] for s in node.src]
        if node.op is Ops.LOAD:
            loaded = r.deref(src[0])
            if node.dtype.kind == "bool" and r.bool_memory_type:
                loaded = f"({loaded}!=0)"
            gate = self.gates.get(node.src[0])
            return loaded if gate is None else r.choose(gate, loaded, r.literal(0, node.dtype))
        if node.op is Ops.CAST:
            return r.cast(src[0], node.src[0].dtype, node.dtype)
        if node.op is Ops.BITCAST:
            return r.bitcast_template.format(type=r.type_name(node.dtype), source=r.type_name(node.src[0].dtype),
                                             value=src[0])
        if node in self.vectorised_sums:
            return r.vectorised_sum_of_products(node.dtype, src)
        if node.op is Ops.SHUFFLE_DOWN:
            return r.shuffle_down(node.dtype, src[0], node.arg)
        operands = node.src[1:] if node.op is Ops.WHERE else node.src
        return r.alu(node.op, node.dtype, operands[0].dtype, src, node.src[-1])

    def lane_access(self, index: UOp) -> LaneAccess:
        """How an INDEX of lanes reaches its buffer. An offset ``where(g, p, 0)`` of neighbouring ``p`` (a
        speculated load: ``svod.codegen.lower.speculate_gated_loads``) whose ``g`` holds across the loop it
        is read in notes ``p`` and ``g``: where every lane passes, the lanes are ``p``'s neighbouring
        elements (``outside_the_loop``)."""
        lanes, offset = self.width(self.lanes[index]), index.src[1]
        lane = next((u for u in offset.toposort() if u.op is Ops.LANE), None)  # or only its gate has lanes
        whole = None
        if lane is not None and offset.op is Ops.WHERE and offset.src[2].op is Ops.CONST and offset.src[2].arg == 0 \
                and offset.src[0] in self.lanes and self.outside_the_loop(offset.src[0]) \
                and contiguous(offset.src[1], lane):
            whole = (self.operand(offset.src[1], lanes), self.operand(offset.src[0], lanes))
        return LaneAccess(self.names[index.src[0]], self.offset_lanes(offset, lanes),
                          lane is not None and contiguous(offset, lane), whole)

    def offset_lanes(self, offset: UOp, lanes: int) -> str:
        """An INDEX's offsets: where they are a line (``lane_lines``), each lane's own sum of one scalar, which
        the compiler takes lane by lane (a tile's lane 0, or each lane a gate passes), not 64-bit lanes."""
        line = self.line(offset) if offset in self.lanes else None
        if line is None:
            return self.operand(offset, lanes)
        at = [f"{c}+{lanes}*{self.r.part_token}" if lanes < self.lanes[offset] else str(c) for c in range(lanes)]
        index = self.r.type_name(dtypes.index)
        return self.r.lanes_of(dtypes.index, [f"{line[0]}+({index}){line[1]}*({g})" for g in at])

    def line(self, node: UOp) -> Line | None:
        """``node`` as a line (``lane_line``) whose scalar and constants are summed in the index type: a lane's
        offset may pass ``2**31`` where each constant does not."""
        return lane_line(node, self.lanes, self.names.__getitem__, f"(({self.r.type_name(dtypes.index)})0)")

    def outside_the_loop(self, gate: UOp) -> bool:
        """Whether ``gate`` is computed outside the loop (or IF) the line being written is in: a test of all
        its lanes is then the same at every turn (a masked tile's last columns: one branch, which the compiler
        hoists). A gate that changes by turn made a branch there (a padded convolution's window: PoCL then
        stops vectorising across work items, and conv2d ran slower), where each lane's element did not; a
        language whose lanes are the CPU's own vectors (``branches_by_turn``) takes the branch at every turn."""
        return self.r.branches_by_turn or self.depths.get(gate, 0) < self.depth

    @staticmethod
    def gate_of(index: UOp) -> UOp | None:
        """The gate of an INDEX, if it has one."""
        return index.src[2] if len(index.src) == 3 else None

    def operand(self, node: UOp, lanes: int) -> str:
        """``node`` as an operand of an instruction of ``lanes`` lanes: a scalar broadcast to them."""
        if node in self.lanes or lanes == 1:
            return self.names[node]
        return self.r.lanes_broadcast(self.names[node], node.dtype, lanes)

    def lane_value(self, node: UOp, lanes: int) -> str:
        """The expression of a value of ``lanes`` lanes."""
        r = self.r
        if node.op is Ops.LOAD and node.src[0] in self.offsets:
            gate = node.src[0].src[2] if len(node.src[0].src) == 3 else None
            if node.dtype.kind == "bool":
                raise GraphError("lanes are loaded from numbers only", stage="render", value="bool")
            spelled = None if gate is None else self.operand(gate, lanes) if gate in self.lanes else None
            access = self.offsets[node.src[0]]
            if gate is not None and spelled is not None and not self.outside_the_loop(gate):
                access = dataclasses.replace(access, neighbours=False)  # each lane's element, as gated
            loaded = r.lanes_load(access, spelled, node.dtype, lanes)
            if gate is not None and gate not in self.lanes:
                zero = r.lanes_broadcast(r.literal(0, node.dtype), node.dtype, lanes)
                return r.choose(self.names[gate], loaded, zero)
            return loaded
        if node.op is Ops.LOAD:  # an accumulator register of lanes, 0 in the lanes a gate of lanes fails
            gate = self.gate_of(node.src[0])
            if gate in self.lanes:
                zero = r.lanes_broadcast(r.literal(0, node.dtype), node.dtype, lanes)
                return r.lanes_alu(Ops.WHERE, node.dtype, dtypes.bool, [self.names[gate], r.deref(
                    self.names[node.src[0]]), zero], lanes)
            return r.deref(self.names[node.src[0]])
        if node.op is Ops.CAST:
            return r.lanes_cast(self.operand(node.src[0], lanes), node.src[0].dtype, node.dtype, lanes)
        if node.op in (Ops.IDIV, Ops.MOD) and (node.src[1].op is not Ops.CONST or node.src[1].arg in (0, -1)):
            raise GraphError("lanes are divided by constants only", stage="render", value=str(node.src[1]))
        if node.op in COMPARISON and node.src[0].dtype == dtypes.index:
            a, b = (self.line(s) for s in node.src)
            spelled = None if a is None or b is None else r.lines_compare(node.op, a, b, lanes, self.lanes[node])
            if spelled is not None:
                return spelled
        operands = node.src[1:] if node.op is Ops.WHERE else node.src
        return r.lanes_alu(node.op, node.dtype, operands[0].dtype, [self.operand(s, lanes) for s in node.src], lanes)


_STATEMENTS: dict[Ops, Callable[[_Walk, UOp, int], str | None]] = {
    Ops.END: _Walk.end, Ops.AFTER: _Walk.after, Ops.DEFINE_REG: _Walk.register, Ops.CONST: _Walk.const,
    Ops.DEFINE_VAR: _Walk.variable, Ops.PARAM: _Walk.param, Ops.SPECIAL: _Walk.special, Ops.INDEX: _Walk.index,
    Ops.IF: _Walk.if_, Ops.RANGE: _Walk.loop, Ops.STORE: _Walk.effect, Ops.ATOMIC: _Walk.effect,
    Ops.DEFINE_LOCAL: _Walk.local, Ops.BARRIER: _Walk.barrier, Ops.LANE: _Walk.lane, Ops.EXIT: _Walk.exit_,
}
"""How each statement of LINEAR is spelled (or named, for nodes inlined where they are used)."""


def lane_part_lanes(linear: tuple[UOp, ...], lanes: dict[UOp, int], registers: dict[UOp, int],
                    part_bytes: int | None) -> int:
    """How many lanes one part of a value of lanes holds where the language's vectors take at most
    ``part_bytes`` (0: no limit): as many as fit of the widest number the lanes compute, indices left out
    (a tile's offsets, of which only lane 0's is used where the lanes read neighbours) and bools (masks)."""
    if part_bytes is None:
        return 0
    kinds = [u.dtype for u in lanes if u.dtype not in (dtypes.index, dtypes.bool) and not isinstance(u.dtype, PtrDType)]
    widest = max((d.itemsize for d in (*kinds, *(pointee(r) for r in registers)) if d.itemsize), default=4)
    return max(1, part_bytes // widest)


def local_name(node: UOp) -> str:
    """The name of work-group memory ``node`` (a DEFINE_LOCAL; on a CPU, a thread's private copy of its source)."""
    return f"{'private' if node.src else 'shared'}{node.arg}"


def local_size(node: UOp) -> int:
    """How many elements work-group memory ``node`` (a DEFINE_LOCAL) holds."""
    assert isinstance(node.dtype, PtrDType)
    return node.dtype.size


def _register_of(node: UOp) -> UOp | None:
    """The accumulator register behind a chain of AFTERs, if there is one."""
    node = memory_of(node)
    return node if node.op is Ops.DEFINE_REG else None


def _unsigned_of(dtype: DType) -> DType:
    return {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize]


class GPURenderer(CStyleRenderer):
    """What OpenCL, CUDA and WGSL share: work items instead of CPU threads, within the device's work-group
    limits (which the pipeline's GPU passes shape launches for)."""

    def __init__(self, device: DeviceSpec | str, caps: DeviceCaps) -> None:
        if caps.work_groups is None:
            raise GraphError(f"{type(self).__name__} needs the device's work-group limits", stage="render",
                             value=str(device))
        super().__init__(device, caps)
        self.limits: WorkGroupLimits = caps.work_groups

    @property
    def cache_key(self) -> str:
        return (f"{type(self).__name__}-{self.limits.max_work_group_size}-{self.limits.max_item_sizes}"
                f"-local{self.caps.local_memory}{'-dedicated' if self.caps.dedicated_local_memory else ''}")


__all__ = ["CHECKED", "CStyleRenderer", "GPURenderer", "local_name", "local_size"]
