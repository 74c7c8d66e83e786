"""C for the CPU device: the base table of ``CStyleRenderer`` as it is, and lanes in GNU vectors.

A value of ``W`` lanes (``Ops.LANE``: a register tile's row) is a GNU C vector (``vector_size``), which gcc
and clang both take, so neither has to find the tile's vectors itself (gcc vectorised none of a matmul tile's
256 scalar accumulators). A value wider than one of the CPU's vector registers is rendered in parts of one
register each (``lane_part_bytes``): gcc keeps a vector wider than any register in memory. A bool of lanes
is a mask of 32-bit integers (-1 true, 0 false); C has no ``?:`` on vectors, so a select is bitwise. Loads and
stores of neighbouring elements go through ``memcpy`` (the elements need not be aligned as the vector is);
math functions and ``fma`` are a loop over the lanes, which both compilers vectorise.
"""

import dataclasses

from svod.codegen.decompositions import CPU_MATH
from svod.codegen.lower_cpu import vector_bytes
from svod.codegen.render.base import lane_widths, reassociable_accumulators
from svod.codegen.render.cstyle import CStyleRenderer, LaneAccess, lane_part_lanes
from svod.codegen.render.lane_lines import LINE_REACH, Line
from svod.codegen.render.llvm_unroll import ROW_INTERLEAVE, shared_row_loops
from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, PatternMatcher, UOp
from svod.ir.ops import COMPARISON

_ROW_LOOP = "svod_row_loop"
_ROW_LOOP_MACRO = (f'#if defined(__clang__)\n#define {_ROW_LOOP} _Pragma("clang loop unroll(disable) '
                   f'interleave_count({ROW_INTERLEAVE})")\n#else\n#define {_ROW_LOOP}\n#endif\n')
"""What a loop over a row that a loop beside it reads too (``shared_row_loops``) is told. clang unrolls a
layer norm's 1024-turn passes whole, as LLVM did, and spills the row across them; kept whole, its vectoriser
still interleaves each pass (its ``unroll_count`` is not heeded on a loop under ``omp simd``). gcc unrolls no
such loop whole, and takes no pragma between ``omp simd`` and its loop: it gets none."""
_MASK = dtypes.int32
"""The integers a bool of lanes is a mask of."""
_VECTOR_ELEMENTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
                    dtypes.uint64, dtypes.float32, dtypes.float64)
_SIGNED = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
_LANE_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.AND: "&",
               Ops.OR: "|", Ops.XOR: "^"}
_COMPARE_INFIX = {Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
_LANE_CALLS = (Ops.MULACC, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.FLOOR, Ops.CEIL, Ops.TRUNC, Ops.RINT)
_VECTOR_MACROS = (
    "#define svod_load(T, p) __extension__({ T svod_l; __builtin_memcpy(&svod_l, (p), sizeof svod_l); svod_l; })\n"
    "#define svod_store(p, v) do { __typeof__(v) svod_s = (v); __builtin_memcpy((p), &svod_s, sizeof svod_s); } "
    "while (0)\n#if defined(__clang__)\n#define svod_every(chain, loop) (chain)\n#else\n"
    "#define svod_every(chain, loop) (loop)\n#endif\n")


class CRenderer(CStyleRenderer):
    """C99 with GNU builtins, for clang or gcc. Kernels take ``(bufs, vars, core_id)``."""

    reduction_pragma = "#pragma omp simd {reductions}"
    branches_by_turn = True
    """A padded convolution's window passes whole at almost every turn: a branch the CPU predicts, and a vector
    load, where a gather of each lane's element ran several times slower."""
    float_sum = "svod_sum"
    """The reduction a float sum's pragma names: OpenMP's ``+`` starts each lane's partial sum from +0.0, which
    turns a sum of -0.0s into +0.0 (``-0.0 + +0.0``); this one starts them from -0.0, svod's identity."""

    def reduction_operator(self, update: UOp) -> str | None:
        operator = super().reduction_operator(update)
        return self.float_sum if operator == "+" and update.src[1].dtype in (dtypes.float32, dtypes.float64) \
            else operator

    def vectorised_sum_of_products(self, dtype: DType, args: list[str]) -> str:
        """gcc vectorises a sum of ``fmaf`` calls, but clang's vectoriser takes only ``acc + a*b`` for a sum of
        products, contracted (``fp contract(fast)``), which fuses on every CPU with FMA instructions."""
        return f"svod_sum_fma{self.math_suffix[dtype.name]}({', '.join(args)})"

    def helpers(self, linear: tuple[UOp, ...]) -> str:
        rows = _ROW_LOOP_MACRO if shared_row_loops(linear) else ""
        return self.vector_types(linear) + self.scalar_helpers(linear) + rows

    def loop_hints(self, linear: tuple[UOp, ...]) -> dict[UOp, str]:
        """The row loops (``shared_row_loops``) are told ``_ROW_LOOP``."""
        return dict.fromkeys(sorted(shared_row_loops(linear), key=linear.index), _ROW_LOOP)

    def scalar_helpers(self, linear: tuple[UOp, ...]) -> str:
        sums = any(self.reduction_operator(u) == self.float_sum
                   for updates in reassociable_accumulators(linear).values() for u in updates)
        declared = (f"#pragma omp declare reduction({self.float_sum} : float, double : omp_out += omp_in) "
                    "initializer(omp_priv = -0.0)\n") if sums else ""
        if not any(u.op is Ops.MULACC for u in linear):
            return super().helpers(linear) + declared
        contracted = '__extension__({ _Pragma("clang fp contract(fast)") (acc) + (a) * (b); })'
        return (super().helpers(linear) + declared + "#if defined(__clang__)\n"
                f"#define svod_sum_fmaf(a, b, acc) {contracted}\n#define svod_sum_fma(a, b, acc) {contracted}\n"
                "#else\n#define svod_sum_fmaf(a, b, acc) fmaf(a, b, acc)\n"
                "#define svod_sum_fma(a, b, acc) fma(a, b, acc)\n#endif\n")

    def extremum_helper(self, op: Ops, t: str, name: str) -> str:
        """gcc 12 vectorises neither spelling (at -O2 or -O3), and runs the one of branches faster (a row maximum of 32
        partials), where clang vectorises the selects."""
        beats, keeps = (">", "!") if op is Ops.MAX else ("<", "")
        branches = (f"{self.helper_qualifier} {t} {name}({t} a, {t} b) {{ return (a {beats} b || b != b || "
                    f"(a == b && {keeps}{self.signbit}(a))) ? a : b; }}\n")
        return f"#if defined(__clang__)\n{super().extremum_helper(op, t, name)}#else\n{branches}#endif\n"

    def declare_local(self, dtype: DType, name: str, size: int) -> str:
        """A thread's private copy of a buffer (``privatize_atomics``): an array on its stack."""
        return f"{self.type_name(dtype)} {name}[{size}] __attribute__((aligned(64)));"

    def local_atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """No other thread sees a private copy: a plain update."""
        return f"{self.deref(pointer)} = {self.combine(op, dtype, self.deref(pointer), value)};"

    def decompositor(self) -> PatternMatcher:
        """expf, logf and erff are one call per element: C compilers vectorise them only under -ffast-math."""
        halves = super().decompositor()
        return CPU_MATH if halves is None else halves + CPU_MATH

    # ---- lanes in GNU vectors ------------------------------------------------------------------------

    @property
    def lane_part_bytes(self) -> int | None:
        return vector_bytes(self.caps.vector_registers)

    def vector_types(self, linear: tuple[UOp, ...]) -> str:
        """The vector types of every number at each width the kernel's lanes take, and the load and store
        macros, where it has lanes."""
        lanes, registers = lane_widths(linear)
        if not lanes:
            return ""
        part = lane_part_lanes(linear, lanes, registers, self.lane_part_bytes)
        widths = sorted({min(w, part) for w in (*lanes.values(), *registers.values())})
        return "".join(f"typedef {self.type_names[d.name]} {self.lanes_type(d, w)} "
                       f"__attribute__((vector_size({w * d.itemsize})));\n"
                       for w in widths for d in _VECTOR_ELEMENTS) + _VECTOR_MACROS

    def lanes_type(self, dtype: DType, lanes: int) -> str:
        element = _MASK if dtype.kind == "bool" else dtypes.int64 if dtype == dtypes.index else dtype
        if element not in _VECTOR_ELEMENTS or lanes & (lanes - 1):
            raise GraphError(f"C has no vector of {lanes} {dtype.name}", stage="render", value=lanes)
        return f"svod_{element.name}x{lanes}"

    def lanes_broadcast(self, value: str, dtype: DType, lanes: int) -> str:
        """``value`` in every lane; computed once into a local where it is an expression (each lane would
        spell it out again)."""
        if not _spelled_once(value):
            scalar = self.type_name(dtypes.int32 if dtype.kind == "bool" else dtype)
            return (f"__extension__({{ {scalar} svod_x = {value}; "
                    f"{self.lanes_broadcast('svod_x', dtype, lanes)}; }})")
        element = f"-(int32_t)({value})" if dtype.kind == "bool" else value
        return f"(({self.lanes_type(dtype, lanes)}){{{', '.join([element] * lanes)}}})"

    def lanes_ramp(self, lanes: int) -> str:
        return f"(({self.lanes_type(dtypes.index, lanes)}){{{', '.join(str(c) for c in range(lanes))}}})"

    def mask_of(self, mask: str, itemsize: int, lanes: int) -> str:
        """A mask of lanes as integers of ``itemsize`` bytes (-1 stays -1)."""
        if itemsize == _MASK.itemsize:
            return mask
        return f"__builtin_convertvector({mask}, {self.lanes_type(_SIGNED[itemsize], lanes)})"

    def select(self, mask: str, if_true: str, if_false: str, dtype: DType, lanes: int) -> str:
        """Per lane ``if_true`` where ``mask`` holds, else ``if_false``: bitwise, as integers of the lanes' size."""
        if dtype.kind == "bool":
            return f"(({mask}&{if_true})|(~{mask}&{if_false}))"
        bits = self.lanes_type(_SIGNED[dtype.itemsize], lanes)
        return (f"__extension__({{ {bits} svod_m = {self.mask_of(mask, dtype.itemsize, lanes)}; "
                f"({self.lanes_type(dtype, lanes)})((({bits})({if_true})&svod_m)|(({bits})({if_false})&~svod_m)); }})")

    def compare(self, op: Ops, dtype: DType, a: str, b: str, lanes: int) -> str:
        """A comparison of lanes of ``dtype``, as a mask: of bools, as bits of their masks."""
        if dtype.kind == "bool":
            return {Ops.CMPLT: f"(~{a}&{b})", Ops.CMPLE: f"(~{a}|{b})", Ops.CMPNE: f"({a}^{b})",
                    Ops.CMPEQ: f"(~({a}^{b}))"}[op]
        compared = f"({a}{ {Ops.CMPLT: '<', Ops.CMPLE: '<=', Ops.CMPNE: '!=', Ops.CMPEQ: '=='}[op]}{b})"
        size = 8 if dtype == dtypes.index else dtype.itemsize
        return compared if size == _MASK.itemsize else \
            f"__builtin_convertvector({compared}, {self.lanes_type(dtypes.bool, lanes)})"

    def lines_compare(self, op: Ops, a: Line, b: Line, lanes: int, total: int) -> str | None:
        """``a`` against ``b`` as ``(k_a - k_b)*g`` against ``s_b - s_a`` in 32-bit lanes, one register where the
        64-bit offsets take two: the difference (exact in 128 bits) clamped to ``LINE_REACH``, past every
        constant, so that each lane compares as the whole difference does; None where the constants reach
        further or ``op`` is not one of these."""
        step, infix = a[1] - b[1], _COMPARE_INFIX.get(op)
        if infix is None or abs(step) * total >= LINE_REACH:
            return None
        parted = lanes < total
        constants = [f"{step}*({c}+{lanes}*{self.part_token})" if parted else str(step * c) for c in range(lanes)]
        difference = (f"__extension__({{ __int128 svod_d = (__int128)({b[0]}) - (__int128)({a[0]}); "
                      f"(int32_t)(svod_d < -{LINE_REACH} ? -{LINE_REACH} : svod_d > {LINE_REACH} ? {LINE_REACH} : "
                      "svod_d); })")
        return (f"({self.lanes_of(dtypes.int32, constants)}{infix}"
                f"{self.lanes_broadcast(difference, dtypes.int32, lanes)})")

    def per_lane(self, op: Ops, dtype: DType, args: list[str], lanes: int) -> str:
        """A math function (or ``fma``) lane by lane: a loop the compiler vectorises."""
        vector = self.lanes_type(dtype, lanes)
        names = [f"svod_{chr(ord('a') + k)}" for k in range(len(args))]
        bound = ", ".join(f"{name} = {arg}" for name, arg in zip(names, args, strict=True))
        call = self.math_call(op, dtype, [f"{name}[svod_l]" for name in names])
        return (f"__extension__({{ {vector} {bound}, svod_r; for (int svod_l = 0; svod_l < {lanes}; svod_l++) "
                f"svod_r[svod_l] = {call}; svod_r; }})")

    def extremum(self, op: Ops, dtype: DType, a: str, b: str, lanes: int) -> str:
        """MAX/MIN of lanes; of floats maximumNumber/minimumNumber as ``extremum_helper`` spells them."""
        beats = ">" if op is Ops.MAX else "<"
        if not dtype.is_float:
            return self.select(f"({a}{beats}{b})" if dtype.itemsize == 4 else self.compare(
                Ops.CMPLT, dtype, *((b, a) if op is Ops.MAX else (a, b)), lanes), a, b, dtype, lanes)
        vector, bits = self.lanes_type(dtype, lanes), self.lanes_type(_SIGNED[dtype.itemsize], lanes)
        x = self.select(self.compare(Ops.CMPNE, dtype, "svod_a", "svod_a", lanes), "svod_b", "svod_a", dtype, lanes)
        wins = self.select(self.compare(Ops.CMPLT, dtype, *(("svod_x", "svod_b") if op is Ops.MAX else
                                                           ("svod_b", "svod_x")), lanes), "svod_b", "svod_x", dtype,
                           lanes)
        sign = f"(({bits})svod_x<0)" if op is Ops.MAX else f"(({bits})svod_x>=0)"  # x's sign loses the tie
        tie = f"(({self.mask_of(self.compare(Ops.CMPEQ, dtype, 'svod_x', 'svod_b', lanes), dtype.itemsize, lanes)})"
        tie += f"&{sign})"
        keep = self.select(f"__builtin_convertvector({tie}, {self.lanes_type(dtypes.bool, lanes)})", "svod_b", "svod_w",
                           dtype, lanes)
        return (f"__extension__({{ {vector} svod_a = {a}, svod_b = {b}; {vector} svod_x = {x}; "
                f"{vector} svod_w = {wins}; {keep}; }})")

    def lanes_alu(self, op: Ops, dtype: DType, operand_dtype: DType, args: list[str], lanes: int) -> str:
        a = args[0]
        if op in COMPARISON:
            return self.compare(op, operand_dtype, a, args[1], lanes)
        if op is Ops.WHERE:
            return self.select(a, args[1], args[2], dtype, lanes)
        if op in (Ops.MAX, Ops.MIN):
            return self.extremum(op, dtype, a, args[1], lanes)
        if op in _LANE_CALLS:
            return self.per_lane(op, dtype, args, lanes)
        if op is Ops.RECIPROCAL:
            return f"({self.lanes_broadcast(self.float_literal(1.0, dtype), dtype, lanes)}/{a})"
        if op is Ops.NEG:
            return f"(-{a})"
        if op in _LANE_INFIX:
            return f"({a}{_LANE_INFIX[op]}{args[1]})"
        raise GraphError(f"no C vector spelling of {op.name}", stage="render", value=op)

    def lanes_cast(self, value: str, src: DType, dst: DType, lanes: int) -> str:
        """As ``cast`` converts one value: a float to an integer saturates, NaN to 0 (the conversion itself
        sees only the lanes in range)."""
        if dst.kind == "bool":
            return value if src.kind == "bool" else self.compare(
                Ops.CMPNE, src, value, self.lanes_broadcast(self.literal(0, src), src, lanes), lanes)
        target = self.lanes_type(dst, lanes)
        if src.kind == "bool":
            return f"__builtin_convertvector(-({value}), {target})"
        if not (src.is_float and dst.is_int):
            return f"__builtin_convertvector({value}, {target})"
        low = -(2.0 ** (dst.bits - 1)) if dst.kind == "int" else -1.0
        high = 2.0 ** (dst.bits - (dst.kind == "int"))
        lo, hi = (self.lanes_broadcast(self.float_literal(v, src), src, lanes) for v in (low, high))
        nan, below, above = (self.compare(op, src, *ab, lanes) for op, ab in (
            (Ops.CMPNE, ("svod_v", "svod_v")), (Ops.CMPLE, ("svod_v", lo)), (Ops.CMPLE, (hi, "svod_v"))))
        mask = self.lanes_type(dtypes.bool, lanes)
        zero = self.lanes_broadcast(self.literal(0, src), src, lanes)
        inside = self.select("~(svod_n|svod_lo|svod_hi)", "svod_v", zero, src, lanes)
        converted = f"__builtin_convertvector({inside}, {target})"
        edges = self.select("svod_lo", self.lanes_broadcast(self.literal(int(dst.min), dst), dst, lanes), converted,
                            dst, lanes)
        edges = self.select("svod_hi", self.lanes_broadcast(self.literal(int(dst.max), dst), dst, lanes), edges, dst,
                            lanes)
        edges = self.select("svod_n", self.lanes_broadcast(self.literal(0, dst), dst, lanes), edges, dst, lanes)
        return (f"__extension__({{ {self.lanes_type(src, lanes)} svod_v = {value}; {mask} svod_n = {nan}, "
                f"svod_lo = {below}, svod_hi = {above}; {edges}; }})")

    def lane_of(self, vector: str, lane: int) -> str:
        return f"({vector})[{lane}]"

    def lanes_of(self, dtype: DType, elements: list[str]) -> str:
        return f"(({self.lanes_type(dtype, len(elements))}){{{', '.join(elements)}}})"

    def every_lane(self, mask: str, lanes: int) -> str:
        """The lanes ANDed (``svod_every``: gcc takes the loop in vector registers, and the chain of lanes
        apart; clang, which takes the chain in them, the chain)."""
        chain = "&".join(self.lane_of(mask, c) for c in range(lanes))
        loop = (f"__extension__({{ {self.lanes_type(dtypes.bool, lanes)} svod_m = {mask}; int32_t svod_e = -1; "
                f"for (int svod_l = 0; svod_l < {lanes}; svod_l++) svod_e &= svod_m[svod_l]; svod_e; }})")
        return f"svod_every(({chain}), ({loop}))"

    def whole_load(self, pointer: str, dtype: DType, lanes: int) -> str:
        return f"svod_load({self.lanes_type(dtype, lanes)}, {pointer})"  # memcpy: no alignment assumed

    def whole_store(self, pointer: str, value: str, lanes: int) -> str:
        return f"svod_store({pointer}, {value});"

    def lanes_load(self, access: LaneAccess, gate: str | None, dtype: DType, lanes: int) -> str:
        """As every C-style renderer loads lanes, with the offsets and the gate named once: each is read in
        every lane's element and in the whole load, and a long index spelled out ``lanes + 1`` times was most
        of a packed matmul's source, and of clang's and gcc's time on it."""
        named, bindings = _named_once(access, gate)
        loaded = super().lanes_load(named, _gate_named(gate, bindings), dtype, lanes)
        if not bindings:
            return loaded
        return f"__extension__({{ {' '.join(bindings)} {loaded}; }})"

    def lanes_store(self, access: LaneAccess, value: str, gate: str | None, dtype: DType, lanes: int) -> str:
        named, bindings = _named_once(access, gate)
        stored = super().lanes_store(named, value, _gate_named(gate, bindings), dtype, lanes)
        return f"{{ {' '.join(bindings)} {stored} }}" if bindings else stored


def _named_once(access: LaneAccess, gate: str | None) -> tuple[LaneAccess, list[str]]:
    """``access`` with its offsets (and the positions it may be loaded whole from) read from locals, and the
    declarations of those locals and of the gate's (``svod_g``); none where each is cheap to spell again."""
    spelled = {"svod_o": access.offset, "svod_g": gate or ""}
    if access.whole is not None:
        spelled |= {"svod_w": access.whole[0], "svod_p": access.whole[1]}
    if all(_spelled_once(text) for text in spelled.values()):
        return access, []
    bindings = [f"__auto_type {name} = {text};" for name, text in spelled.items() if text]
    whole = None if access.whole is None else ("svod_w", "svod_p")
    return dataclasses.replace(access, offset="svod_o", whole=whole), bindings


def _spelled_once(text: str) -> bool:
    """Whether ``text`` is cheap to spell in every lane: nothing, a name, a literal or a short sum of them."""
    return not text or text.isidentifier() or (all(c.isalnum() or c in ".+-_()" for c in text) and len(text) <= 32)


def _gate_named(gate: str | None, bindings: list[str]) -> str | None:
    """The gate as ``lanes_load`` and ``lanes_store`` read it once ``_named_once`` has named it."""
    return "svod_g" if bindings and gate else gate
