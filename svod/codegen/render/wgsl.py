"""WGSL for WebGPU: the C-style walk with WGSL's types, declarations and builtins, and no pointers.

- Buffers are ``array<T>`` storage bindings ``0 .. P-1``; binding ``P`` is a uniform ``array<vec4<i32>>``
  holding each buffer's byte offset (a view binds its whole base buffer) and then the variables.
- WGSL has no 64-bit integers: index arithmetic is 32-bit, so every index value of the kernel must be
  proven to fit an ``i32`` by its bounds, or the kernel is refused (``check_index_width``).
- Buffers hold 32-bit numbers and halves (no bool, 8-, 16- or 64-bit buffers: ``DeviceCaps.element_dtypes``
  refuses them before lowering). A buffer updated atomically is an ``array<atomic<T>>`` (floats as
  ``atomic<u32>`` updated by compare-exchange) and may only be accessed atomically in that kernel.
- Integer ``/`` and ``%`` are WGSL's, which already mean what svod's do (a zero divisor divides by one,
  ``MIN / -1`` wraps), except where wgpu translates them to GLSL's (its OpenGL backend): there they divide
  by divisors made safe and take remainders from quotients (``DeviceCaps.native_integer_division``).
  Shifts and float-to-integer conversions spell svod's definitions with ``select``.
- WGSL has no NaN or infinity literal, and lets a shader compiler assume floats are finite: a NaN test
  is done on the bits, and a kernel's NaN and infinity constants are bit casts of a value the compiler
  cannot fold. Arithmetic on NaN, infinities and -0.0 is what the device's compiler makes of it.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from svod.codegen.decompositions import (
    ERF_FROM_EXP,
    POWER_OF_NONNEGATIVE_BASE,
    TRUNCATING_DIVISION_BY_SAFE_DIVISORS,
)
from svod.codegen.render.cstyle import GPURenderer, local_name, local_size
from svod.device import parse_launch_index
from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp
from svod.ir.uop import UNBOUNDED, is_unbounded, memory_of, pointee

_AXES = "xyz"
_INT32 = (-(1 << 31), (1 << 31) - 1)
_MISSING_MATH = POWER_OF_NONNEGATIVE_BASE + ERF_FROM_EXP
"""WGSL's ``pow`` is undefined for a negative base, and it has no ``erf``."""
_COMPARE_EXCHANGE_TURNS = 64
"""The turns a float atomic's compare-exchange loop is counted for (``hidden_loop_turns``): it comes round
once more for each work item that updated the element first, and a CPU device runs a batch of up to 16 work
items in lockstep, so 64 leaves room for other batches."""

_FMOD = """fn svod_fmod_float32(a: f32, b: f32) -> f32 {
  let x = bitcast<u32>(a) & 0x7fffffffu;
  let y = bitcast<u32>(b) & 0x7fffffffu;
  let nan = x >= 0x7f800000u || y > 0x7f800000u || y == 0u;
  let m = bitcast<f32>(y);
  var r = bitcast<f32>(x);
  if (!nan && x >= y) {
    var d = m;
    while (r - d >= d) { d = d + d; }
    loop {
      if (r >= d) { r = r - d; }
      if (d == m) { break; }
      d = d * 0.5;
    }
  }
  let signed = select(r, -r, bitcast<u32>(a) > 0x7fffffffu);
  return select(signed, bitcast<f32>(svod_opaque(0x7fc00000u)), nan);
}
"""
"""C's ``fmod`` by long division on the magnitudes: ``d`` doubles from the divisor to just under the dividend
and halves back (each exactly), and each subtraction ``r - d`` with ``d <= r < 2d`` is exact (Sterbenz), so the
remainder is exact. Nothing grows past the dividend: an overflow is not infinity to a WGSL compiler (and
lavapipe's ``ldexp`` scaled some lanes wrongly). A float16 remainder is computed in float32, where its operands
and its remainder are exact (``_FMOD_FLOAT16``)."""
_FMOD_FLOAT16 = "fn svod_fmod_float16(a: f16, b: f16) -> f16 { return f16(svod_fmod_float32(f32(a), f32(b))); }\n"


class WGSLRenderer(GPURenderer):
    type_names: ClassVar[dict[str, str]] = {
        "bool": "bool", "int32": "i32", "uint32": "u32", "index": "i32", "float16": "f16", "float32": "f32",
    }
    math_functions: ClassVar[dict[Ops, str]] = {
        Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.ABS: "abs", Ops.EXP: "exp",
        Ops.LOG: "log", Ops.COS: "cos", Ops.TAN: "tan", Ops.TANH: "tanh", Ops.FLOOR: "floor", Ops.CEIL: "ceil",
        Ops.TRUNC: "trunc", Ops.RINT: "round", Ops.POW: "pow", Ops.MULACC: "fma",
    }
    """WGSL's builtins; ``fmod`` is svod's (``svod_fmod_*``): WGSL's float ``%`` is ``a - b * trunc(a / b)``,
    which is far from the remainder once the quotient passes the float's precision."""
    math_suffix: ClassVar[dict[str, str]] = {"float32": "", "float16": ""}
    preamble: ClassVar[str] = ""
    bitcast_template: ClassVar[str] = "bitcast<{type}>({value})"
    signed_overflow_wraps: ClassVar[bool] = True

    @property
    def cache_key(self) -> str:
        guarded = "" if self.caps.native_integer_division else "-safediv"
        return f"{super().cache_key}-{self.limits.max_groups}{guarded}"

    # ---- statement shapes --------------------------------------------------------------------------

    def decompositor(self) -> PatternMatcher | None:
        halves = super().decompositor()
        missing = _MISSING_MATH
        if not self.caps.native_integer_division:
            missing += TRUNCATING_DIVISION_BY_SAFE_DIVISORS
        return missing if halves is None else halves + missing

    def hidden_loop_turns(self, u: UOp) -> int:
        return _COMPARE_EXCHANGE_TURNS if u.op is Ops.ATOMIC and u.src[1].dtype.is_float else 0

    def declare(self, dtype: DType, name: str, value: str) -> str:
        return f"let {name}: {self.type_name(dtype)} = {value};"

    def declare_register(self, dtype: DType, name: str) -> str:
        return f"var {name}: {self.type_name(dtype)};"

    def loop_header(self, name: str, end: str | None) -> str:
        test = "" if end is None else f" {name} < {end}"
        return f"for (var {name}: i32 = 0;{test}; {name}++) {{"

    def exit_loop(self, condition: str) -> str:
        return f"if ({condition}) {{ break; }}"

    def element(self, base: str, offset: str) -> str:
        return f"{base}[{base}_at + {offset}]"

    def register_element(self, register: str) -> str:
        return register

    def local_element(self, base: str, offset: str) -> str:
        return f"{base}[{offset}]"

    def declare_local(self, dtype: DType, name: str, size: int) -> None:
        """Work-group memory is declared at module scope (``signature``)."""
        return None

    def barrier(self) -> str:
        return "workgroupBarrier();"

    def deref(self, element: str) -> str:
        return element

    def choose(self, condition: str, if_true: str, if_false: str) -> str:
        return f"select({if_false}, {if_true}, {condition})"

    # ---- spellings ---------------------------------------------------------------------------------

    def literal(self, value: bool | int | float, dtype: DType) -> str:
        if dtype.kind == "bool":
            return "true" if value else "false"
        if dtype.is_float:
            return self.float_literal(float(value), dtype)
        if dtype.is_unsigned:
            return f"{int(value)}u"
        return f"{int(value)}i" if value >= 0 else f"i32({int(value)})"

    def float_literal(self, value: float, dtype: DType) -> str:
        t = self.type_name(dtype)
        if not math.isfinite(value):
            bits = int(np.array(value, np.float32).view(np.uint32))
            return f"{t}(bitcast<f32>(svod_opaque({bits}u)))"
        # naga reads hex halves wrongly; a half's shortest decimal reads back exactly
        text = f"{value!r}h" if dtype == dtypes.float16 else f"{value.hex()}f"
        return f"({text})" if text.startswith("-") else text  # `a - -1.0` would read as `a -- 1.0`

    def math_call(self, op: Ops, dtype: DType, args: list[str]) -> str:
        if op is Ops.FMOD:
            return f"svod_fmod_{dtype.name}({', '.join(args)})"
        if op not in self.math_functions:
            raise GraphError(f"WGSL has no {op.name.lower()}", stage="render", value=op.name)
        return f"{self.math_functions[op]}({', '.join(args)})"

    def alu(self, op: Ops, dtype: DType, operand_dtype: DType, args: list[str], divisor: UOp | None = None) -> str:
        if op is Ops.ABS and dtype.is_int:
            return f"abs({args[0]})"
        if op is Ops.NEG and dtype.is_unsigned:  # WGSL has no unary minus on unsigned integers
            return f"({self.literal(0, dtype)}-{args[0]})"
        if op in (Ops.IDIV, Ops.MOD):
            return f"({args[0]}{'/' if op is Ops.IDIV else '%'}{args[1]})"
        if op is Ops.XOR and dtype == dtypes.bool:  # WGSL's ^ takes integers only
            return f"({args[0]}!={args[1]})"
        if op in (Ops.CMPLT, Ops.CMPLE, Ops.CMPEQ, Ops.CMPNE) and operand_dtype.is_float:
            nan = f"({self.is_nan(args[0], operand_dtype)}||{self.is_nan(args[1], operand_dtype)})"
            compared = super().alu(op, dtype, operand_dtype, args, divisor)
            return f"({nan}||{compared})" if op is Ops.CMPNE else f"(!{nan}&&{compared})"
        return super().alu(op, dtype, operand_dtype, args, divisor)

    def is_nan(self, value: str, dtype: DType) -> str:
        return f"svod_isnan_{dtype.name}({value})"

    def shift(self, op: Ops, dtype: DType, a: str, b: str) -> str:
        t = self.type_name(dtype)
        amount = f"u32({b})"
        masked = f"({amount}&{dtype.bits - 1}u)"  # naga refuses a constant amount past the width, chosen or not
        if op is Ops.SHL:
            return self.choose(f"{amount}<{dtype.bits}u", f"({a}<<{masked})", f"{t}(0)")
        outside = self.choose(f"{a}<{t}(0)", f"{t}(-1)", f"{t}(0)") if dtype.kind == "int" else f"{t}(0)"
        return self.choose(f"{amount}<{dtype.bits}u", f"({a}>>{masked})", outside)

    def cast(self, value: str, src: DType, dst: DType) -> str:
        """A conversion; a float to an integer saturates and takes NaN to 0 (svod's definition)."""
        t = self.type_name(dst)
        if not (src.is_float and dst.is_int):
            return f"{t}({value})"
        low = -(2.0 ** (dst.bits - 1)) if dst.kind == "int" else -1.0
        high = 2.0 ** (dst.bits - (dst.kind == "int"))
        wide = value if src == dtypes.float32 else f"f32({value})"
        saturated = self.choose(f"{wide}>={self.float_literal(high, dtypes.float32)}", self.literal(int(dst.max), dst),
                                self.choose(f"{wide}<={self.float_literal(low, dtypes.float32)}",
                                            self.literal(int(dst.min), dst), f"{t}({wide})"))
        return self.choose(self.is_nan(value, src), self.literal(0, dst), saturated)

    def min_max(self, op: Ops, dtype: DType, a: str, b: str) -> str:
        if dtype.is_float:
            return f"svod_{op.name.lower()}_{dtype.name}({a}, {b})"
        return f"{'max' if op is Ops.MAX else 'min'}({a}, {b})"

    def atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """``atomicAdd``/``atomicMax``/``atomicMin`` on 32-bit integers; floats by compare-exchange on
        their bits."""
        if dtype.is_int:
            return f"atomic{op.name.capitalize()}(&{pointer}, {value});"
        t = self.type_name(dtype)
        combine = self.combine(op, dtype, f"bitcast<{t}>(seen)", value)
        return (f"{{ var seen = atomicLoad(&{pointer}); loop {{ let swap = atomicCompareExchangeWeak(&{pointer}, "
                f"seen, bitcast<u32>({combine})); if (swap.exchanged) {{ break; }} seen = swap.old_value; }} }}")

    def special(self, node: UOp) -> str:
        kind, axis = parse_launch_index(node.arg) or ("", 0)
        builtin = {"group": "svod_group", "local": "svod_local"}.get(kind)
        if builtin is None:
            raise GraphError(f"WGSL has no thread index {node.arg}", stage="render", value=node.arg)
        return f"i32({builtin}.{_AXES[axis]})"

    # ---- the kernel around the walk ---------------------------------------------------------------

    def preamble_for(self, linear: tuple[UOp, ...]) -> str:
        used = {u.dtype.name for u in linear} | {pointee(u).name for u in linear if u.op is Ops.PARAM}
        return "enable f16;\n" if "float16" in used else ""

    def helpers(self, linear: tuple[UOp, ...]) -> str:
        """NaN and sign tests on a float's bits, float MAX/MIN as maximumNumber/minimumNumber, the exact
        ``fmod`` where the kernel takes one, and the identity function that keeps the compiler from folding a
        NaN or infinity constant."""
        held = {pointee(u) for u in linear if u.op in (Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL)}
        floats = sorted({u.dtype.name for u in linear if u.dtype.is_float} | {d.name for d in held if d.is_float})
        out = ["fn svod_opaque(x: u32) -> u32 { return x; }\n"]
        for name in floats:
            t = self.type_names[name]
            bits = "bitcast<u32>(x)" if name == "float32" else "bitcast<u32>(f32(x))"  # no 16-bit integers in WGSL
            out.append(f"fn svod_isnan_{name}(x: {t}) -> bool {{ return ({bits} & 0x7fffffffu) > 0x7f800000u; }}\n"
                       f"fn svod_signbit_{name}(x: {t}) -> bool {{ return ({bits} >> 31u) != 0u; }}\n")
            for op, wins in (("max", ">"), ("min", "<")):
                sign = "!" if op == "max" else ""
                a_wins = f"a {wins} b || svod_isnan_{name}(b) || (a == b && {sign}svod_signbit_{name}(a))"
                out.append(f"fn svod_{op}_{name}(a: {t}, b: {t}) -> {t} {{ "
                           f"return select(b, a, !svod_isnan_{name}(a) && ({a_wins})); }}\n")
        if any(u.op is Ops.FMOD for u in linear):
            out.append(_FMOD)
            if "float16" in floats:
                out.append(_FMOD_FLOAT16)
        return "".join(out)

    def signature(self, symbol: str, params: list[UOp], variables: list[UOp], linear: tuple[UOp, ...]) -> list[str]:
        atomic = atomic_buffers(linear)
        if self.caps.max_buffers is not None and len(params) > self.caps.max_buffers:
            raise GraphError(f"the kernel takes {len(params)} buffers and the device binds at most "
                             f"{self.caps.max_buffers}", stage="render", value=len(params))
        lines = []
        for p in params:
            element = self.memory_type_name(pointee(p))
            if p.arg in atomic:
                element = f"atomic<{'u32' if pointee(p).is_float else element}>"
            lines.append(f"@group(0) @binding({p.arg}) var<storage, read_write> data{p.arg}: array<{element}>;")
        words = len(params) + len(variables)
        lines.append(f"@group(0) @binding({len(params)}) var<uniform> svod_args: array<vec4<i32>, "
                     f"{max(1, -(-words // 4))}>;")
        for u in linear:
            if u.op is Ops.DEFINE_LOCAL:
                lines.append(f"var<workgroup> {local_name(u)}: array<{self.type_name(pointee(u))}, {local_size(u)}>;")
        sizes = workgroup_size(linear)
        lines.append(f"@compute @workgroup_size({', '.join(map(str, sizes))})")
        lines.append(f"fn {symbol}(@builtin(workgroup_id) svod_group: vec3<u32>, "
                     "@builtin(local_invocation_id) svod_local: vec3<u32>) {")
        for k, p in enumerate(params):
            lines.append(f"  let data{p.arg}_at: i32 = svod_args[{k // 4}][{k % 4}] / {pointee(p).itemsize};")
        for k, v in enumerate(variables, start=len(params)):
            word = f"svod_args[{k // 4}][{k % 4}]"
            lines.append(f"  let {v.arg[0]}: {self.type_name(v.dtype)} = {self.type_name(v.dtype)}({word});")
        return lines

    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        check_index_width(linear)
        check_atomic_access(linear)
        return super().render_linear(symbol, linear)


def _buffer_of(index: UOp) -> int | None:
    base = memory_of(index.src[0])
    return int(base.arg) if base.op is Ops.PARAM else None


def atomic_buffers(linear: tuple[UOp, ...]) -> frozenset[int]:
    """The buffers the kernel updates atomically."""
    return frozenset(b for u in linear if u.op is Ops.ATOMIC and (b := _buffer_of(u.src[0])) is not None)


def check_atomic_access(linear: tuple[UOp, ...]) -> None:
    """An atomically updated buffer is an array of atomics in WGSL, which plain loads and stores cannot
    touch."""
    atomic = atomic_buffers(linear)
    for u in linear:
        if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX:
            continue
        slot = _buffer_of(u.src[0])
        if slot is not None and slot in atomic:
            raise GraphError(f"WGSL cannot load or store buffer {slot} in the kernel that updates it atomically; do "
                             "it in another kernel", stage="render", value=slot, buffers=(slot,))


def check_index_width(linear: tuple[UOp, ...]) -> None:
    """Every index value must fit WGSL's 32-bit integers for every value the kernel's variables may take. A loop
    without a bound (a ``while``) is written without its end, and its counter, which no bound keeps within 32
    bits, is checked where it is used."""
    for u in linear:
        if is_unbounded(u) or (u.op is Ops.CONST and u.dtype == dtypes.index and u.arg == UNBOUNDED):
            continue
        if u.dtype == dtypes.index and not _INT32[0] <= u.vmin <= u.vmax <= _INT32[1]:
            extreme = int(u.vmax if u.vmax > _INT32[1] else u.vmin)
            names = sorted({v.arg[0] for v in u.toposort() if v.op is Ops.DEFINE_VAR})
            which = f"some values of {', '.join(names)}" if names else "the kernel's sizes"
            raise GraphError(f"WGSL computes indices in 32 bits, and an index may reach {extreme} for {which}; "
                             "bound them closer (a variable's bounds; a Python kernel's int argument by its "
                             "annotation, n: svod.Int[lo, hi], its sizes by static_shapes=True)", stage="render",
                             value=extreme)


def workgroup_size(linear: tuple[UOp, ...]) -> tuple[int, int, int]:
    """The work-group shape, from the kernel's ``lidxN`` indices (each a constant size)."""
    sizes = [1, 1, 1]
    for u in linear:
        if u.op is Ops.SPECIAL and (found := parse_launch_index(u.arg)) is not None and found[0] == "local":
            sizes[found[1]] = int(u.src[0].arg)
    return sizes[0], sizes[1], sizes[2]


__all__ = ["WGSLRenderer"]
