"""LLVM IR for the CPU device.

Kernels have the CPU ABI ``void name(ptr bufs, ptr vars, i64 core_id)``. Loops are a head block with a
phi for the counter, a body, and a latch; accumulators are allocas in the entry block, which LLVM's
mem2reg turns into phis. The accumulation of a loop's only accumulator carries ``reassoc``, so the
reduction vectorises: its result may differ from a sequential sum by rounding, as with any parallel
reduction; so do the sums of a loop whose every sum lowering marked ``REASSOCIABLE`` (a matrix-vector
product's rows, streamed together). Other loops with several accumulators (an upcast matmul) stay exact: they
vectorise across the accumulators instead, which is also faster than vectorising each along the loop.
Float MAX and MIN (IEEE 754-2019 maximumNumber and minimumNumber: NaN-ignoring, +0 above -0) are spelled
out as compares and a select. LLVM's intrinsics are not usable: LLVM 22 vectorises ``llvm.maxnum``
reductions wrongly, dropping elements, and its x86 backend lowers ``llvm.maximumnum(a, b)`` wrongly when
it knows ``b`` is never NaN (a NaN ``a`` comes out; the random-kernel property test found it). Float to
integer conversions saturate, NaN to 0 (``llvm.fptosi.sat``'s meaning, spelled as a plain conversion and
selects, which x86 vectorises). A select whose condition is read from memory (an ``if`` on data) is
``!unpredictable``: x86 keeps it a conditional move. A gated access is a branch around the load (joined by
a phi with 0) or the store; atomics are ``atomicrmw`` for integers and float adds, and a compare-exchange
loop on the bit pattern for float MAX/MIN.

A value that depends on a ``LANE`` of width ``W`` (a register tile's row, ``svod.ir.ops.Ops.LANE``) is an
LLVM vector of ``W`` elements (``lane_widths``); a scalar it meets is broadcast. Its loads are one vector load
where the lanes read neighbouring elements, else a gather (masked by a gate that differs by lane), and its
stores one vector store: lowering lanes only stores at unit stride (``svod.codegen.lower._lanes_fit``). An
accumulator register of vectors is never one its loop reassociates. A register of work items in lanes
(``svod.codegen.recurrences.carry_rows``) is a vector too, addressed whole: a gate that differs by lane
selects what its store keeps in each lane, and gives 0 in the lanes it fails of a load.

Types and constants are spelled by ``llvm_types``; which loads a kernel prefetches is ``llvm_prefetch``'s
choice, and how far a register tile's loop is unrolled ``llvm_unroll``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from svod.codegen.decompositions import CPU_MATH
from svod.codegen.indexing import Poly
from svod.codegen.render.base import (
    KernelRenderer,
    ScopedNames,
    contiguous,
    lane_widths,
    launch_gates,
    reassociable_accumulators,
)
from svod.codegen.render.llvm_metadata import alias_scopes, loaded_values
from svod.codegen.render.llvm_prefetch import poly_constant, row_operands, strided_operands
from svod.codegen.render.llvm_types import INTRINSIC_SUFFIX, llvm_literal, llvm_type, memory_type
from svod.codegen.render.llvm_unroll import (
    PLAIN_ROW_INTERLEAVE,
    ROW_INTERLEAVE,
    ROW_UNROLL,
    SYMBOLIC_UNROLL_LANES,
    TILE_UNROLL,
    TILE_UPDATES,
    accumulators_per_loop,
    shared_row_loops,
    transcendental_loops,
)
from svod.device import CORE_ID, DeviceCaps, kernel_variables
from svod.device.caps import CACHE_LINE
from svod.dtype import DType, PtrDType, dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, PatternMatcher, UOp
from svod.ir.ops import LANE_OPS
from svod.ir.uop import is_unbounded, memory_of, pointee


def function_attributes(cpu: str, features: str) -> str:
    """The CPU and its features, for the optimiser; and where it has AVX-512, 512-bit vectors preferred.
    LLVM's default for most such CPUs is 256 bits, which splits each row of 32 float32 of a register tile
    (``tile_row_bytes``) over 4 registers instead of 2, and leaves half of the 32 registers unused."""
    if not cpu:
        return ""
    wide = ' "prefer-vector-width"="512"' if "+avx512f" in features.split(",") else ""
    return f'"target-cpu"="{cpu}" "target-features"="{features}"{wide}'


class LLVMRenderer(KernelRenderer):
    """Renders LLVM IR text; ``cpu`` and ``features`` become function attributes for the optimiser."""


    int_binary: ClassVar[dict[Ops, str]] = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and",
                                            Ops.OR: "or", Ops.XOR: "xor"}
    float_binary: ClassVar[dict[Ops, str]] = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv",
                                               Ops.FMOD: "frem"}
    float_intrinsic: ClassVar[dict[Ops, str]] = {
        Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.ABS: "fabs", Ops.EXP: "exp",
        Ops.LOG: "log", Ops.COS: "cos", Ops.FLOOR: "floor", Ops.CEIL: "ceil", Ops.TRUNC: "trunc", Ops.RINT: "rint",
        Ops.POW: "pow", Ops.MULACC: "fma"}
    libm_call: ClassVar[dict[Ops, str]] = {Ops.TAN: "tan", Ops.TANH: "tanh", Ops.ERF: "erf"}
    """Math LLVM has no intrinsic for (in every version llvmlite ships): a call into the C library, which
    the JIT resolves in the process."""

    def __init__(self, device: str = "CPU", caps: DeviceCaps | None = None, cpu: str = "", features: str = "") -> None:
        super().__init__(device, caps)
        self.cpu = cpu
        self.features = features

    def decompositor(self) -> PatternMatcher:
        return CPU_MATH  # llvm.exp and llvm.log would be a libm call per element, even in a vectorised loop

    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        return _FunctionWriter(self, symbol, linear).write()


def _held(gates: list[UOp]) -> frozenset[UOp]:
    """The gates and each condition they are the AND of: all hold in the kernel's ungated copy (an image read
    at ``where(0 < h, y * w + x, -1)`` there reads at ``y * w + x``)."""
    held: dict[UOp, None] = {}
    stack = list(gates)
    while stack:
        condition = stack.pop()
        if condition not in held:
            held[condition] = None
            if condition.op is Ops.AND and condition.dtype == dtypes.bool:
                stack.extend(condition.src)
    return frozenset(held)


class _FunctionWriter:
    """The state of rendering one function: SSA names, the current block, declarations needed."""

    def __init__(self, renderer: LLVMRenderer, symbol: str, linear: tuple[UOp, ...]) -> None:
        self.r = renderer
        self.symbol = symbol
        self.linear = linear
        self.names = ScopedNames()
        self.lines: list[str] = []
        self.declarations: set[str] = set()
        self.block = "entry"
        self.lanes, self.register_lanes = lane_widths(linear)
        self.w = 1
        """The lanes of the instruction being rendered."""
        self.splats = 0
        reassociable = {loop: updates for loop, updates in reassociable_accumulators(linear).items()
                        if not any(u.src[0].src[0] in self.register_lanes for u in updates)}
        self.reassociable = {u.src[0].src[0] for updates in reassociable.values() for u in updates}
        self.tile_loops = {u for u in linear if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE
                           and u not in reassociable}
        self.prefetched = {**row_operands(linear), **strided_operands(linear, self.tile_loops)}
        self.contiguous: set[UOp] = set()
        """The INDEXes of lanes that read or write neighbouring elements, named by lane 0's address."""
        self.masks: dict[UOp, UOp] = {}
        """The INDEXes at ``where(gate, offset, 0)`` of neighbouring elements, with their gate."""
        self.open_loops: list[UOp] = []
        self.around_short_tiles: set[UOp] = set()
        self.tile_turns_inside: dict[UOp, int] = {}
        """Per tile loop, the steps of the tile loops nested in it per step of its own (a convolution's
        ``ky`` and ``kx`` inside its channels): its unroll count shares ``TILE_UNROLL`` with them."""
        self.accumulators = accumulators_per_loop(linear, self.tile_loops, self.register_lanes)
        self.row_loops = shared_row_loops(linear)
        self.transcendental_rows = transcendental_loops(linear, self.row_loops)
        self.scopes, self.metadata = alias_scopes(linear)
        self.loaded = loaded_values(linear)
        self.unpredictable = ""
        """The ``!unpredictable`` metadata of a select whose condition depends on memory, once defined."""
        self._current: UOp = linear[0] if linear else UOp.sink()
        self.copy = ""
        """The prefix of the names of the copy of the kernel being rendered."""
        self.holds: frozenset[UOp] = frozenset()
        """The gates the copy being rendered runs under (``launch_gates``) and the conditions they are the AND
        of: its accesses behind them are not gated, and each is ``true`` there."""

    def _reassociable(self, node: UOp) -> bool:
        """A LOAD of an accumulator whose loop may reassociate it (``reassociable_accumulators``): the running
        value of a plain reduction, or of a streamed row's."""
        if node.op is not Ops.LOAD or not isinstance(node.src[0].dtype, PtrDType) or not node.src[0].dtype.local:
            return False
        return memory_of(node.src[0].src[0]) in self.reassociable

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def write(self) -> str:
        params = sorted((u for u in self.linear if u.op is Ops.PARAM), key=lambda u: u.arg)
        self.label("entry")
        for position, u in enumerate(params):
            self.names[u] = f"%data{u.arg}"
            self.emit(f"%data{u.arg}.slot = getelementptr inbounds ptr, ptr %bufs, i64 {position}")
            self.emit(f"%data{u.arg} = load ptr, ptr %data{u.arg}.slot, align 8")
        for u in self.linear:
            if u.op is Ops.DEFINE_REG and u in self.register_lanes:
                self.names[u] = f"%acc{u.arg}"
                self.emit(f"%acc{u.arg} = alloca <{self.register_lanes[u]} x {memory_type(pointee(u))}>")
            elif u.op is Ops.DEFINE_REG:
                self.names[u] = f"%acc{u.arg}"
                self.emit(f"%acc{u.arg} = alloca {memory_type(pointee(u))}, align 8")
            elif u.op is Ops.DEFINE_LOCAL and isinstance(u.dtype, PtrDType):  # a thread's private copy
                self.names[u] = f"%local{u.arg}"
                self.emit(f"%local{u.arg} = alloca [{u.dtype.size} x {memory_type(u.dtype.base)}], align 64")
        for slot, var in enumerate(kernel_variables(self.linear)):
            self.emit(f"%var.{var.arg[0]}.slot = getelementptr inbounds i64, ptr %vars, i64 {slot}")
            self.emit(f"%var.{var.arg[0]}.raw = load i64, ptr %var.{var.arg[0]}.slot, align 8{self._range(var)}")
            self._bind_variable(var, f"%var.{var.arg[0]}.raw")
        for var in self.linear:
            if var.op is Ops.DEFINE_VAR and var.arg[0] == CORE_ID:
                self._bind_variable(var, "%core_id")
        gates = launch_gates(self.linear, self.lanes)
        if gates:
            self._body("pre", {u for gate in gates for u in gate.toposort()})
            hold = self.operand(gates[0])
            for number, gate in enumerate(gates[1:]):
                self.emit(f"%ungated{number} = and i1 {hold}, {self.operand(gate)}")
                hold = f"%ungated{number}"
            self.emit(f"br i1 {hold}, label %ungated, label %gated")
            self.label("ungated")
            self.holds = _held(gates)
            self._body("u")
            self.emit("ret void")
            self.label("gated")
            self.holds = frozenset()
        self._body("")
        self.emit("ret void")
        attributes = function_attributes(self.r.cpu, self.r.features)
        header = f"define void @{self.symbol}(ptr noalias %bufs, ptr noalias %vars, i64 %core_id) #0 {{"
        return "\n".join([*sorted(self.declarations), header, *self.lines, "}",
                          f"attributes #0 = {{ nounwind {attributes} }}", *self.metadata, ""])

    def _body(self, copy: str, only: set[UOp] | None = None) -> None:
        """The kernel's instructions in order (or ``only`` those), named apart from another ``copy`` of them."""
        self.copy, self.tile_turns_inside = copy, {}
        for index, node in enumerate(self.linear):
            if node.op in (Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG, Ops.DEFINE_LOCAL) or node in self.holds:
                continue
            if only is None or node in only:
                self._node(node, f"%{copy}v{index}", index)  # a value placed twice gets the name of its latest place

    def _range(self, var: UOp) -> str:
        """The ``!range`` of a variable's load: its bounds, which every launch checks its value against
        (``check_vars`` in ``svod.runtime.kernel``). LLVM then knows a size is not negative: ``0 <= i < n`` is
        one unsigned compare, and a division by it needs no sign fix-up."""
        lo, hi = int(var.arg[1]), int(var.arg[2])
        if (lo, hi) == (int(dtypes.int64.min), int(dtypes.int64.max)):
            return ""
        end = hi + 1 if hi < dtypes.int64.max else int(dtypes.int64.min)  # LLVM's ranges wrap around
        node = len(self.metadata)
        self.metadata.append(f"!{node} = !{{i64 {lo}, i64 {end}}}")
        return f", !range !{node}"

    def _unpredictable(self) -> str:
        """``!unpredictable`` for a select on a value read from memory (an ``if`` on data, if-converted): x86's
        code generator otherwise turns a select in a loop whose condition is late and whose values are early
        into a branch, to take the condition off the loop's critical path, and on data that branch is
        mispredicted half the time (a CRC's bit loop ran several times slower)."""
        if not self.unpredictable:
            self.unpredictable = f", !unpredictable !{len(self.metadata)}"
            self.metadata.append(f"!{len(self.metadata)} = !{{}}")
        return self.unpredictable

    def _bind_variable(self, var: UOp, value: str) -> None:
        """Name ``var``, whose 64-bit value is ``value``, in its own type."""
        name, ty = var.arg[0], llvm_type(var.dtype)
        if ty != "i64":
            self.emit(f"%var.{name} = trunc i64 {value} to {ty}")
            value = f"%var.{name}"
        self.names[var] = value

    def operand(self, node: UOp) -> str:
        if node.op is Ops.CONST:
            return llvm_literal(node.arg, node.dtype)
        if node in self.holds:
            return "true"
        return self.names[node]

    def arg(self, node: UOp) -> str:
        """``node`` as an operand of the instruction being rendered: a scalar broadcast to its lanes."""
        if self.w == 1 or node in self.lanes:
            return self.operand(node)
        if node.op is Ops.CONST:
            return self.literal(node.arg, node.dtype)
        return self.splat(self.operand(node), node.dtype)

    def splat(self, value: str, dtype: DType) -> str:
        """The scalar ``value`` in every lane of the instruction being rendered."""
        self.splats += 1
        name, element = f"%splat{self.splats}", llvm_type(dtype)
        self.emit(f"{name}.one = insertelement <{self.w} x {element}> poison, {element} {value}, i64 0")
        self.emit(f"{name} = shufflevector <{self.w} x {element}> {name}.one, <{self.w} x {element}> poison, "
                  f"<{self.w} x i32> zeroinitializer")
        return name

    def ty(self, dtype: DType) -> str:
        """The LLVM type of a ``dtype`` value in the lanes of the instruction being rendered."""
        return llvm_type(dtype) if self.w == 1 else f"<{self.w} x {llvm_type(dtype)}>"

    def literal(self, value: bool | int | float, dtype: DType) -> str:
        if self.w == 1:
            return llvm_literal(value, dtype)
        element = f"{llvm_type(dtype)} {llvm_literal(value, dtype)}"
        return "<" + ", ".join([element] * self.w) + ">"

    def suffix(self, dtype: DType) -> str:
        """An intrinsic's name for a ``dtype`` operand in the current lanes (``f32``, ``v32f32``)."""
        scalar = INTRINSIC_SUFFIX.get(llvm_type(dtype), llvm_type(dtype))
        return scalar if self.w == 1 else f"v{self.w}{scalar}"

    def _node(self, node: UOp, out: str, index: int) -> None:
        op = node.op
        self._current = node
        self.w = self.lanes.get(node, 1)
        if op is Ops.CONST:
            return
        if self.w > 1 and ((op not in LANE_OPS and op is not Ops.LANE) or node.dtype == dtypes.float16):
            raise GraphError(f"no LLVM vector spelling of {op.name} on {node.dtype!r}", stage="render", value=op)
        if op is Ops.LANE:
            self.names[node] = "<" + ", ".join(f"i64 {c}" for c in range(node.arg)) + ">"
        elif op is Ops.AFTER:
            self.names[node] = self.operand(node.src[0])
        elif op is Ops.INDEX and self.w > 1 and memory_of(node.src[0]).op is not Ops.DEFINE_REG:
            self._lane_index(node, out)
        elif op is Ops.INDEX:
            element = memory_type(pointee(node))
            self.emit(f"{out} = getelementptr inbounds {element}, ptr {self.operand(node.src[0])}, "
                      f"i64 {self.operand(node.src[1])}")
            self.names[node] = out
            if node in self.prefetched:
                self._prefetch(out, element, self.prefetched[node])
        elif op is Ops.LOAD and self.lanes.get(node.src[0], 1) > 1:
            self._lane_load(node, out)
        elif op is Ops.LOAD:
            self._gated(node.src[0], out, lambda: self._load(node, out), node.dtype)
        elif op is Ops.STORE and len(node.src[0].src) == 3 and node.src[0].src[2] in self.lanes:
            self._store(node, out, node.src[0].src[2])  # a gate that differs by lane masks the store
        elif op is Ops.STORE:
            self._gated(node.src[0], out, lambda: self._store(node, out))
        elif op is Ops.ATOMIC:
            self._gated(node.src[0], out, lambda: self._atomic(node, out))
        elif op is Ops.RANGE:
            self._open_loop(node, index)
        elif op is Ops.IF:
            self._open_if(node, index)
        elif op is Ops.EXIT:
            loop = self.names[node.src[0]][1:-2]
            self.emit(f"br i1 {self.operand(node.src[1])}, label %{loop}.exit, label %{loop}.on{index}")
            self.label(f"{loop}.on{index}")
        elif op is Ops.END:
            self._close_scope(node.src[0])
        elif op is Ops.CAST:
            self.names[node] = self._cast(node.src[0], node.dtype, out)
        elif op is Ops.BITCAST:
            self.emit(f"{out} = bitcast {llvm_type(node.src[0].dtype)} {self.operand(node.src[0])} "
                      f"to {llvm_type(node.dtype)}")
            self.names[node] = out
        elif op is Ops.SPECIAL:
            raise GraphError("the LLVM CPU renderer has no GPU thread indices", stage="render", value=node.arg)
        else:
            self._alu(node, out)
            self.names[node] = out

    def _lane_index(self, node: UOp, out: str) -> None:
        """An INDEX whose offset differs by lane: the address of lane 0 where the lanes are neighbouring
        elements (a vector access), else a vector of addresses (a gather). An offset ``where(gate, offset, 0)``
        of neighbouring elements (a speculated load: ``svod.codegen.lower.speculate_gated_loads``) is their
        access masked by the gate, the lanes it fails given element 0 (``masks``): no gather."""
        element, offset = memory_type(pointee(node)), node.src[1]
        lane = next((u for u in offset.toposort() if u.op is Ops.LANE), None)
        if len(node.src) == 2 and offset.op is Ops.WHERE and offset.src[2].op is Ops.CONST and offset.src[2].arg == 0 \
                and lane is not None and offset.src[0] in self.lanes and contiguous(offset.src[1], lane):
            self.masks[node] = offset.src[0]
            offset = offset.src[1]
        self.emit(f"{out}.lanes = getelementptr {element}, ptr {self.operand(node.src[0])}, "
                  f"<{self.w} x i64> {self.arg(offset)}")
        if lane is None or not contiguous(offset, lane):
            self.names[node] = f"{out}.lanes"
            return
        self.contiguous.add(node)
        self.emit(f"{out} = extractelement <{self.w} x ptr> {out}.lanes, i64 0")
        self.names[node] = out
        if node in self.prefetched:  # each cache line the lanes span
            per_line = max(1, CACHE_LINE // pointee(node).itemsize)
            for line, first in enumerate(range(0, self.w, per_line)):
                self._prefetch(out, element, self.prefetched[node] + Poly.const(first),
                               f".{line}")

    def _lane_load(self, node: UOp, out: str) -> None:
        """A load at an INDEX that differs by lane: where one gate holds for every lane, a branch around
        it, as for a scalar; a gate that differs by lane masks a gather instead, or selects 0 in the lanes it
        fails of a register's vector (a register's INDEX is its address, whatever its gate)."""
        index = node.src[0]
        gate = index.src[2] if len(index.src) == 3 else None
        if memory_of(index.src[0]).op is Ops.DEFINE_REG and gate in self.lanes:
            self._load(node, f"{out}.all")
            self.emit(f"{out} = select <{self.w} x i1> {self.arg(gate)}, {self.ty(node.dtype)} {out}.all, "
                      f"{self.ty(node.dtype)} zeroinitializer")
            self.names[node] = out
        elif gate is not None and gate not in self.lanes:
            self._gated(index, out, lambda: self._lanes_read(node, out, None), node.dtype)
        else:
            self._lanes_read(node, out, gate)

    def _lanes_read(self, node: UOp, out: str, mask: UOp | None) -> None:
        """One vector load of neighbouring elements, else a gather; a lane ``mask`` fails reads nothing and
        gives 0, and masks a vector load of neighbouring elements. Neighbouring elements under a gate of
        their offset (``masks``): a masked vector load whose failing lanes give element 0."""
        index, ty, align = node.src[0], self.ty(node.dtype), node.dtype.itemsize
        if node.dtype.kind == "bool":
            raise GraphError("the LLVM renderer loads lanes of numbers only", stage="render", value="bool")
        masked = self.masks.get(index, mask)
        if index in self.contiguous and masked is None:
            self.emit(f"{out} = load {ty}, ptr {self.names[index]}, align {align}{self._scope(index)}")
        elif index in self.contiguous and masked is not None:
            passthru = "zeroinitializer"
            if index in self.masks:
                scalar = llvm_type(node.dtype)
                self.emit(f"{out}.first = load {scalar}, ptr {self.operand(index.src[0])}{self._scope(index)}")
                passthru = self.splat(f"{out}.first", node.dtype)
            intrinsic = f"@llvm.masked.load.{self.suffix(node.dtype)}.p0"
            self.declarations.add(f"declare {ty} {intrinsic}(ptr, i32, <{self.w} x i1>, {ty})")
            self.emit(f"{out} = call {ty} {intrinsic}(ptr {self.names[index]}, i32 {align}, <{self.w} x i1> "
                      f"{self.arg(masked)}, {ty} {passthru}){self._scope(index)}")
        else:
            addresses = f"{self.names[index]}.lanes" if index in self.contiguous else self.names[index]
            lanes = self.arg(mask) if mask is not None else self.literal(True, dtypes.bool)
            intrinsic = f"@llvm.masked.gather.{self.suffix(node.dtype)}.v{self.w}p0"
            self.declarations.add(f"declare {ty} {intrinsic}(<{self.w} x ptr>, i32, <{self.w} x i1>, {ty})")
            self.emit(f"{out} = call {ty} {intrinsic}(<{self.w} x ptr> {addresses}, i32 {align}, "
                      f"<{self.w} x i1> {lanes}, {ty} zeroinitializer){self._scope(index)}")
        self.names[node] = out

    def _prefetch(self, address: str, element: str, ahead: Poly, name: str = "") -> None:
        """A read prefetch of the element ``ahead`` elements past ``address`` into all cache levels (no
        ``inbounds``: past the buffer's end it is an address like any other, and a prefetch does not fault)."""
        if any(atom not in self.names for atom in ahead.atoms()):
            return  # a stride this function has not computed where the load is: no hint
        distance = self._index_value(ahead, f"{address}.ahead{name}")
        self.declarations.add("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
        self.emit(f"{address}.ahead{name} = getelementptr {element}, ptr {address}, i64 {distance}")
        self.emit(f"call void @llvm.prefetch.p0(ptr {address}.ahead{name}, i32 0, i32 3, i32 1)")

    def _index_value(self, poly: Poly, name: str) -> str:
        """An ``i64`` operand with the value of ``poly``, whose atoms are values computed before (the
        variables a stride is made of: LLVM takes what does not change out of the loop)."""
        if poly_constant(poly) is not None:
            return str(poly_constant(poly))
        terms = []
        for n, (monomial, coefficient) in enumerate(poly.terms.items()):
            term = str(coefficient)
            for m, atom in enumerate(monomial):
                self.emit(f"{name}.t{n}.{m} = mul i64 {term}, {self.operand(atom)}")
                term = f"{name}.t{n}.{m}"
            terms.append(term)
        total = terms[0]
        for n, term in enumerate(terms[1:]):
            self.emit(f"{name}.s{n} = add i64 {total}, {term}")
            total = f"{name}.s{n}"
        return total

    def _gated(self, index: UOp, out: str, access: Callable[[], None], dtype: DType | None = None) -> None:
        """Run ``access`` only where the INDEX's gate holds; a load elsewhere gives 0 (joined by a phi)."""
        if len(index.src) < 3 or index.src[2] in self.holds:
            access()
            return
        block = out[1:].replace(".", "_")
        self.emit(f"br i1 {self.operand(index.src[2])}, label %{block}.on, label %{block}.off")
        self.label(f"{block}.on")
        access()
        loaded, came_from = self.names.get(self._current), self.block
        self.emit(f"br label %{block}.join")
        self.label(f"{block}.off")
        self.emit(f"br label %{block}.join")
        self.label(f"{block}.join")
        if dtype is not None:
            self.emit(f"{out}.gated = phi {self.ty(dtype)} [ {loaded}, %{came_from} ], "
                      f"[ {self.literal(0, dtype)}, %{block}.off ]")
            self.names[self._current] = f"{out}.gated"

    def _load(self, node: UOp, out: str) -> None:
        ptr = self.operand(node.src[0])
        if self.w > 1:  # an accumulator register of vectors
            self.emit(f"{out} = load {self.ty(node.dtype)}, ptr {ptr}")
        elif node.dtype.kind == "bool":
            self.emit(f"{out}.byte = load i8, ptr {ptr}{self._scope(node.src[0])}")
            self.emit(f"{out} = icmp ne i8 {out}.byte, 0")
        else:
            self.emit(f"{out} = load {llvm_type(node.dtype)}, ptr {ptr}{self._scope(node.src[0])}")
        self.names[node] = out

    def _store(self, node: UOp, out: str, mask: UOp | None = None) -> None:
        ptr, value = self.operand(node.src[0]), self.arg(node.src[1])
        if self.w > 1:
            self._lanes_write(node, out, ptr, value, mask)
            return
        if node.src[1].dtype.kind == "bool":
            self.emit(f"{out}.byte = zext i1 {value} to i8")
            value = f"{out}.byte"
        self.emit(f"store {memory_type(node.src[1].dtype)} {value}, ptr {ptr}{self._scope(node.src[0])}")

    def _lanes_write(self, node: UOp, out: str, ptr: str, value: str, mask: UOp | None) -> None:
        """A vector store: into a register (the lanes ``mask`` fails, where given, keep what they hold), or
        of neighbouring elements of a buffer (lowering lanes no other store: ``svod.codegen.upcast._lanes_fit``),
        only the lanes ``mask`` passes where given (a tile's lanes past a row's end:
        ``svod.codegen.upcast._masked_lanes``)."""
        index, dtype = node.src[0], node.src[1].dtype
        ty, align = self.ty(dtype), dtype.itemsize
        if memory_of(index.src[0]).op is Ops.DEFINE_REG:
            if mask is not None:  # the lanes the mask fails keep what they hold
                self.emit(f"{out}.kept = load {ty}, ptr {ptr}")
                self.emit(f"{out}.merged = select <{self.w} x i1> {self.arg(mask)}, {ty} {value}, {ty} {out}.kept")
                value = f"{out}.merged"
            self.emit(f"store {ty} {value}, ptr {ptr}")
            return
        if index not in self.contiguous or dtype.kind == "bool":
            raise GraphError("the LLVM renderer stores lanes only to neighbouring elements of numbers", stage="render",
                             value=str(dtype))
        if mask is None:
            self.emit(f"store {ty} {value}, ptr {ptr}, align {align}{self._scope(index)}")
            return
        intrinsic = f"@llvm.masked.store.{self.suffix(dtype)}.p0"
        self.declarations.add(f"declare void {intrinsic}({ty}, ptr, i32, <{self.w} x i1>)")
        self.emit(f"call void {intrinsic}({ty} {value}, ptr {ptr}, i32 {align}, <{self.w} x i1> "
                  f"{self.arg(mask)}){self._scope(index)}")

    def _scope(self, index: UOp) -> str:
        """The alias scope metadata of an access to a buffer ("" for an accumulator or private memory)."""
        return self.scopes.get(memory_of(index.src[0]), "")

    def _atomic(self, node: UOp, out: str) -> None:
        ptr, value, dtype = self.operand(node.src[0]), self.operand(node.src[1]), node.src[1].dtype
        ty = llvm_type(dtype)
        if memory_of(node.src[0].src[0]).op is Ops.DEFINE_LOCAL:  # a thread's private copy: no other thread updates it
            if node.arg is not Ops.ADD:
                raise GraphError("a CPU thread's private copy takes atomic adds only", stage="render", value=node.arg)
            self.emit(f"{out}.old = load {ty}, ptr {ptr}")
            self.emit(f"{out}.new = {'fadd' if dtype.is_float else 'add'} {ty} {out}.old, {value}")
            self.emit(f"store {ty} {out}.new, ptr {ptr}")
            return
        if dtype.is_int or node.arg is Ops.ADD:
            kind = {Ops.ADD: "fadd" if dtype.is_float else "add",
                    Ops.MAX: "max" if dtype.kind == "int" else "umax",
                    Ops.MIN: "min" if dtype.kind == "int" else "umin"}[node.arg]
            self.emit(f"{out} = atomicrmw {kind} ptr {ptr}, {ty} {value} monotonic")
            return
        bits = f"i{dtype.bits}"
        entry, loop = self.block, f"{out[1:]}.cas"
        self.emit(f"{out}.first = load atomic {bits}, ptr {ptr} monotonic, align {dtype.itemsize}")
        self.emit(f"br label %{loop}")
        self.label(loop)
        self.emit(f"{out}.seen = phi {bits} [ {out}.first, %{entry} ], [ {out}.found, %{loop} ]")
        self.emit(f"{out}.old = bitcast {bits} {out}.seen to {ty}")
        self._maximum_number(node.arg, f"{out}.next", f"{out}.old", value, dtype)
        self.emit(f"{out}.want = bitcast {ty} {out}.next to {bits}")
        self.emit(f"{out}.pair = cmpxchg ptr {ptr}, {bits} {out}.seen, {bits} {out}.want monotonic monotonic")
        self.emit(f"{out}.found = extractvalue {{ {bits}, i1 }} {out}.pair, 0")
        self.emit(f"{out}.done = extractvalue {{ {bits}, i1 }} {out}.pair, 1")
        self.emit(f"br i1 {out}.done, label %{loop}.exit, label %{loop}")
        self.label(f"{loop}.exit")

    def _open_loop(self, r: UOp, index: int) -> None:
        if r in self.tile_loops and r.src[0].op is Ops.CONST and r.src[0].arg <= TILE_UNROLL:
            self.around_short_tiles.update(self.open_loops)
        if r in self.tile_loops:
            turns = int(r.src[0].arg) if r.src[0].op is Ops.CONST else TILE_UNROLL
            for outer in self.open_loops:
                if outer in self.tile_loops:
                    self.tile_turns_inside[outer] = self.tile_turns_inside.get(outer, 1) * turns
        self.open_loops.append(r)
        loop = f"{self.copy}loop{index}"
        self.names[r] = f"%{loop}.i"
        entry = self.block
        self.emit(f"br label %{loop}.head")
        self.label(f"{loop}.head")
        self.emit(f"%{loop}.i = phi i64 [ 0, %{entry} ], [ %{loop}.next, %{loop}.latch ]")
        if is_unbounded(r):  # a loop without a bound: its exits end it
            self.emit(f"br label %{loop}.body")
        else:
            self.emit(f"%{loop}.more = icmp slt i64 %{loop}.i, {self.operand(r.src[0])}")
            self.emit(f"br i1 %{loop}.more, label %{loop}.body, label %{loop}.exit")
        self.label(f"{loop}.body")
        self.names.open()

    def _open_if(self, guard: UOp, index: int) -> None:
        block = f"{self.copy}if{index}"
        self.names[guard] = f"%{block}"
        self.emit(f"br i1 {self.operand(guard.src[0])}, label %{block}.then, label %{block}.end")
        self.label(f"{block}.then")
        self.names.open()

    def _close_scope(self, scope: UOp) -> None:
        self.names.close()
        if scope.op is Ops.IF:
            block = self.names[scope][1:]
            self.emit(f"br label %{block}.end")
            self.label(f"{block}.end")
            return
        self.open_loops.pop()
        loop = self.names[scope][1:-2]
        self.emit(f"br label %{loop}.latch")
        self.label(f"{loop}.latch")
        self.emit(f"%{loop}.next = add nuw nsw i64 %{loop}.i, 1")
        self.emit(f"br label %{loop}.head{self._loop_hints(scope)}")
        self.label(f"{loop}.exit")

    def _loop_hints(self, loop: UOp) -> str:
        """Loop metadata for ``loop``, if it needs any: a register tile's loop is unrolled ``TILE_UNROLL``
        times, counting the steps of tile loops nested in it (a convolution's channel loop around its 3x3
        window: once, where 8 times cost LLVM's time for the same speed); over a symbolic count, half as far
        where the tile has at most ``SYMBOLIC_UNROLL_LANES`` accumulator lanes, and not at all where it has
        more: there LLVM hoisted the broadcasts of every unrolled step and spilled them (a batched 8x32 tile
        over symbolic sizes ran fastest unrolled once; a plain symbolic matmul the same either way); a loop
        around a tile's loop of at most ``TILE_UNROLL`` turns, which LLVM unrolls whole, is not vectorised
        along itself: the tile is the vector work already, and LLVM's loop vectoriser took seconds to compile
        such a loop (around one of 9 turns, which it does not unroll whole, it compiles quickly); a long loop over
        a row a loop beside it reads too (``shared_row_loops``) is unrolled ``ROW_UNROLL`` times, not whole, and
        over a symbolic row interleaved ``ROW_INTERLEAVE`` times where it computes a transcendental
        (``transcendental_loops``) and ``PLAIN_ROW_INTERLEAVE`` times where it does not."""
        if loop in self.tile_loops:
            accumulators = max(1, self.accumulators.get(loop, 1))
            steps = min(TILE_UNROLL, TILE_UPDATES // accumulators)
            if loop.src[0].op is not Ops.CONST:
                steps = steps // 2 if accumulators <= SYMBOLIC_UNROLL_LANES else 1
            count = max(1, steps // self.tile_turns_inside.get(loop, 1))
            hint = f'!{{!"llvm.loop.unroll.count", i32 {count}}}'
        elif loop in self.around_short_tiles:
            hint = '!{!"llvm.loop.vectorize.enable", i1 false}'
        elif loop in self.row_loops and loop.src[0].op is Ops.CONST:
            hint = f'!{{!"llvm.loop.unroll.count", i32 {ROW_UNROLL}}}'
        elif loop in self.row_loops:
            count = ROW_INTERLEAVE if loop in self.transcendental_rows else PLAIN_ROW_INTERLEAVE
            hint = f'!{{!"llvm.loop.interleave.count", i32 {count}}}'
        else:
            return ""
        node = len(self.metadata)  # metadata line k defines !k
        self.metadata.append(f"!{node} = distinct !{{!{node}, !{node + 1}}}")
        self.metadata.append(f"!{node + 1} = {hint}")
        return f", !llvm.loop !{node}"

    def _cast(self, src: UOp, dtype: DType, out: str) -> str:
        if dtypes.float16 in (src.dtype, dtype) and dtypes.float32 not in (src.dtype, dtype) and src.dtype != dtype:
            return self._half_cast(src, dtype, out)
        return self._convert(self.arg(src), src.dtype, dtype, out)

    def _half_cast(self, src: UOp, dtype: DType, out: str) -> str:
        """Half conversions go through float: a JIT process has compiler-rt's half routines only for float
        (``__truncdfhf2`` and the integer ones are missing). A double narrows by rounding to odd first, so
        the second rounding is the only one that decides a tie."""
        value = self.operand(src)
        if dtype != dtypes.float16:
            wide = self._convert(value, src.dtype, dtypes.float32, f"{out}.f32")
            return self._convert(wide, dtypes.float32, dtype, out)
        if src.dtype != dtypes.float64:
            wide = self._convert(value, src.dtype, dtypes.float32, f"{out}.f32")
            return self._convert(wide, dtypes.float32, dtype, out)
        self.declarations.add("declare double @llvm.fabs.f64(double)")
        for line in (f"{out}.near = fptrunc double {value} to float",
                     f"{out}.back = fpext float {out}.near to double",
                     f"{out}.bits = bitcast float {out}.near to i32",
                     f"{out}.aback = call double @llvm.fabs.f64(double {out}.back)",
                     f"{out}.avalue = call double @llvm.fabs.f64(double {value})",
                     f"{out}.over = fcmp ogt double {out}.aback, {out}.avalue",
                     f"{out}.under = fcmp olt double {out}.aback, {out}.avalue",
                     f"{out}.down = zext i1 {out}.over to i32",
                     f"{out}.toward0 = sub i32 {out}.bits, {out}.down",
                     f"{out}.inexact = or i1 {out}.over, {out}.under",
                     f"{out}.sticky = zext i1 {out}.inexact to i32",
                     f"{out}.oddbits = or i32 {out}.toward0, {out}.sticky",
                     f"{out}.odd = bitcast i32 {out}.oddbits to float",
                     f"{out} = fptrunc float {out}.odd to half"):
            self.emit(line)
        return out

    def _convert(self, value: str, a: DType, b: DType, out: str) -> str:
        ta, tb = self.ty(a), self.ty(b)
        if b.kind == "bool":
            zero = self.literal(0, a)
            self.emit(f"{out} = {'fcmp une' if a.is_float else 'icmp ne'} {ta} {value}, {zero}")
            return out
        if a.is_float and b.is_float:
            instr = "fpext" if b.itemsize > a.itemsize else "fptrunc"
        elif a in (dtypes.float32, dtypes.float64):
            return self._saturated(value, a, b, out)
        elif a.is_float:
            intrinsic = f"@llvm.{'fptoui' if b.is_unsigned else 'fptosi'}.sat.{self.suffix(b)}.{self.suffix(a)}"
            self.declarations.add(f"declare {tb} {intrinsic}({ta})")
            self.emit(f"{out} = call {tb} {intrinsic}({ta} {value})")
            return out
        elif b.is_float:
            instr = "sitofp" if a.kind == "int" else "uitofp"
        elif a.itemsize == b.itemsize and a.kind != "bool":
            return value
        elif b.itemsize < a.itemsize:
            instr = "trunc"
        else:
            instr = "sext" if a.kind == "int" else "zext"
        self.emit(f"{out} = {instr} {ta} {value} to {tb}")
        return out

    def _saturated(self, value: str, a: DType, b: DType, out: str) -> str:
        """float32/float64 ``value`` to the integer ``b`` as ``fptosi.sat``/``fptoui.sat`` convert (NaN to 0,
        saturating): the plain conversion, its lanes out of range replaced by selects (a lane's poison is
        never selected). x86 lowers the intrinsics one lane at a time; this, a vector conversion and blends
        (a bilinear resize's coordinates took 8 scalar conversions a vector)."""
        ta, tb, bits = self.ty(a), self.ty(b), 8 * b.itemsize
        least, most = (0, 2**bits - 1) if b.is_unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
        test = "i1" if self.w == 1 else f"<{self.w} x i1>"
        for line in (f"{out}.raw = {'fptoui' if b.is_unsigned else 'fptosi'} {ta} {value} to {tb}",
                     f"{out}.above = fcmp oge {ta} {value}, {self.literal(float(most + 1), a)}",
                     f"{out}.below = fcmp olt {ta} {value}, {self.literal(float(least), a)}",
                     f"{out}.nan = fcmp uno {ta} {value}, {value}",
                     f"{out}.high = select {test} {out}.above, {tb} {self.literal(most, b)}, {tb} {out}.raw",
                     f"{out}.low = select {test} {out}.below, {tb} {self.literal(least, b)}, {tb} {out}.high",
                     f"{out} = select {test} {out}.nan, {tb} {self.literal(0, b)}, {tb} {out}.low"):
            self.emit(line)
        return out

    def _alu(self, node: UOp, out: str) -> None:
        op = node.op
        args = [self.arg(s) for s in node.src]
        operand_dtype = node.src[-1].dtype
        ty = self.ty(operand_dtype)
        if op is Ops.WHERE:
            hint = self._unpredictable() if node.src[0] in self.loaded else ""
            self.emit(f"{out} = select {self.ty(dtypes.bool)} {args[0]}, {ty} {args[1]}, {ty} {args[2]}{hint}")
        elif operand_dtype.is_float:
            self._float_alu(node, out, args, ty)
        else:
            self._int_alu(node, out, args, ty, operand_dtype)

    def _float_alu(self, node: UOp, out: str, args: list[str], ty: str) -> None:
        op = node.op
        if op in self.r.float_binary:
            flags = " reassoc" if op in (Ops.ADD, Ops.MUL) and any(self._reassociable(s) for s in node.src) \
                else ""
            self.emit(f"{out} = {self.r.float_binary[op]}{flags} {ty} {args[0]}, {args[1]}")
        elif op in (Ops.MAX, Ops.MIN):
            self._maximum_number(op, out, args[0], args[1], node.dtype)
        elif op is Ops.MULACC and self._reassociable(node.src[2]):
            # a loop's reassociable sums may be vectorised along it, which LLVM does to a sum, not to
            # fma calls; the contract flags fuse each product with its addition on every CPU with FMA
            self.emit(f"{out}.product = fmul contract {ty} {args[0]}, {args[1]}")
            self.emit(f"{out} = fadd reassoc contract {ty} {args[2]}, {out}.product")
        elif op in self.r.float_intrinsic:
            intrinsic = f"@llvm.{self.r.float_intrinsic[op]}.{self.suffix(node.dtype)}"
            params = ", ".join(ty for _ in args)
            self.declarations.add(f"declare {ty} {intrinsic}({params})")
            self.emit(f"{out} = call {ty} {intrinsic}({', '.join(f'{ty} {a}' for a in args)})")
        elif op in self.r.libm_call:
            self._libm_call(self.r.libm_call[op], out, args[0], ty)
        elif op is Ops.NEG:
            self.emit(f"{out} = fneg {ty} {args[0]}")
        elif op is Ops.RECIPROCAL:
            self.emit(f"{out} = fdiv {ty} {self.literal(1.0, node.dtype)}, {args[0]}")
        elif op in _FCMP:
            self.emit(f"{out} = fcmp {_FCMP[op]} {ty} {args[0]}, {args[1]}")
        else:
            raise GraphError(f"no LLVM spelling of {op.name} on floats", stage="render", value=op)

    def _libm_call(self, name: str, out: str, value: str, ty: str) -> None:
        """``tanf``/``tan`` and the like; a half goes through float."""
        if ty == "half":
            self.emit(f"{out}.wide = fpext half {value} to float")
            self._libm_call(name, f"{out}.f32", f"{out}.wide", "float")
            self.emit(f"{out} = fptrunc float {out}.f32 to half")
            return
        function = f"@{name}{'f' if ty == 'float' else ''}"
        self.declarations.add(f"declare {ty} {function}({ty})")
        self.emit(f"{out} = call {ty} {function}({ty} {value})")

    def _maximum_number(self, op: Ops, out: str, a: str, b: str, dtype: DType) -> None:
        """maximumNumber (MAX) or minimumNumber (MIN) as selects alone: ``b`` where ``a`` is NaN, then the
        winner of the two, then, where they are equal, the AND (MAX) or OR (MIN) of their bits, which is
        the zero of the winning sign and any other value itself. Each compare feeds a select (a vector
        ``maxps`` and blends); compares combined with ``and``/``or`` left LLVM packing the masks of a split
        reduction's 32 lanes between every step (a softmax's row maximum ran several times slower than its
        sum)."""
        ty = self.ty(dtype)
        bits = f"i{dtype.bits}" if self.w == 1 else f"<{self.w} x i{dtype.bits}>"
        flag = self.ty(dtypes.bool)
        self.emit(f"{out}.nan = fcmp uno {ty} {a}, {a}")
        self.emit(f"{out}.a = select {flag} {out}.nan, {ty} {b}, {ty} {a}")
        self.emit(f"{out}.wins = fcmp {'ogt' if op is Ops.MAX else 'olt'} {ty} {b}, {out}.a")
        self.emit(f"{out}.winner = select {flag} {out}.wins, {ty} {b}, {ty} {out}.a")
        self.emit(f"{out}.equal = fcmp oeq {ty} {out}.a, {b}")
        self.emit(f"{out}.abits = bitcast {ty} {out}.a to {bits}")
        self.emit(f"{out}.bbits = bitcast {ty} {b} to {bits}")
        self.emit(f"{out}.signed = {'and' if op is Ops.MAX else 'or'} {bits} {out}.abits, {out}.bbits")
        self.emit(f"{out}.zero = bitcast {bits} {out}.signed to {ty}")
        self.emit(f"{out} = select {flag} {out}.equal, {ty} {out}.zero, {ty} {out}.winner")

    def _int_alu(self, node: UOp, out: str, args: list[str], ty: str, dtype: DType) -> None:
        op = node.op
        signed = dtype.kind == "int"
        if op in self.r.int_binary:
            self.emit(f"{out} = {self.r.int_binary[op]} {ty} {args[0]}, {args[1]}")
        elif op in (Ops.IDIV, Ops.MOD):
            self._int_division(node, out, args, ty, signed)
        elif op is Ops.NEG:
            self.emit(f"{out} = sub {ty} zeroinitializer, {args[0]}")
        elif op is Ops.ABS and not signed:
            self.emit(f"{out} = or {ty} {args[0]}, 0")
        elif op is Ops.ABS:
            self.emit(f"{out}.neg = sub {ty} 0, {args[0]}")
            self.emit(f"{out}.lt = icmp slt {ty} {args[0]}, 0")
            self.emit(f"{out} = select i1 {out}.lt, {ty} {out}.neg, {ty} {args[0]}")
        elif op in (Ops.MAX, Ops.MIN):
            predicate = ("s" if signed else "u") + ("gt" if op is Ops.MAX else "lt")
            self.emit(f"{out}.pick = icmp {predicate} {ty} {args[0]}, {args[1]}")
            self.emit(f"{out} = select {self.ty(dtypes.bool)} {out}.pick, {ty} {args[0]}, {ty} {args[1]}")
        elif op in _ICMP:
            predicate = _ICMP[op] if op not in (Ops.CMPLT, Ops.CMPLE) else ("s" if signed else "u") + _ICMP[op]
            self.emit(f"{out} = icmp {predicate} {ty} {args[0]}, {args[1]}")
        elif op in (Ops.SHL, Ops.SHR):
            self._shift(op, out, args, ty, dtype)
        else:
            raise GraphError(f"no LLVM spelling of {op.name} on integers", stage="render", value=op)

    def _shift(self, op: Ops, out: str, args: list[str], ty: str, dtype: DType) -> None:
        """svod's shifts (``svod.ir.alu.shift``): LLVM's give poison for an amount outside the bits, which
        the select never picks."""
        a, b = args
        instr = "shl" if op is Ops.SHL else "ashr" if dtype.kind == "int" else "lshr"
        self.emit(f"{out}.inside = icmp ult {ty} {b}, {dtype.bits}")
        self.emit(f"{out}.shifted = {instr} {ty} {a}, {b}")
        outside = f"{out}.sign" if instr == "ashr" else "0"
        if instr == "ashr":
            self.emit(f"{out}.sign = ashr {ty} {a}, {dtype.bits - 1}")
        self.emit(f"{out} = select i1 {out}.inside, {ty} {out}.shifted, {ty} {outside}")

    def _int_division(self, node: UOp, out: str, args: list[str], ty: str, signed: bool) -> None:
        """svod's trap-free division (see ``svod.ir.alu``); LLVM folds the guards for constant divisors."""
        a, b = args
        kind = ("s" if signed else "u") + ("div" if node.op is Ops.IDIV else "rem")
        divisor = node.src[1]
        if divisor.op is Ops.CONST and divisor.arg not in (0, -1):
            self.emit(f"{out} = {kind} {ty} {a}, {b}")
            return
        if self.w > 1:
            raise GraphError("the LLVM renderer divides lanes by constants only", stage="render", value=str(divisor))
        self.emit(f"{out}.zero = icmp eq {ty} {b}, 0")
        if not signed:
            self.emit(f"{out}.d = select i1 {out}.zero, {ty} 1, {ty} {b}")
            self.emit(f"{out} = {kind} {ty} {a}, {out}.d")
            return
        self.emit(f"{out}.m1 = icmp eq {ty} {b}, -1")
        self.emit(f"{out}.bad = or i1 {out}.zero, {out}.m1")
        self.emit(f"{out}.d = select i1 {out}.bad, {ty} 1, {ty} {b}")
        self.emit(f"{out}.q = {kind} {ty} {a}, {out}.d")
        wrapped = f"{out}.neg" if node.op is Ops.IDIV else "0"
        if node.op is Ops.IDIV:
            self.emit(f"{out}.neg = sub {ty} 0, {a}")
        self.emit(f"{out} = select i1 {out}.m1, {ty} {wrapped}, {ty} {out}.q")


_FCMP = {Ops.CMPLT: "olt", Ops.CMPLE: "ole", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}
_ICMP = {Ops.CMPLT: "lt", Ops.CMPLE: "le", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
