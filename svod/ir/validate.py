"""The type checker of kernel ASTs: every node's sources, dtypes and arg fit its op.

``validate(sink)`` runs before any lowering, on every kernel, whether a builder made it or a hand wrote it,
so a malformed graph is a ``GraphError`` that names the kernel, the node and what was expected, instead of
code that stores eight bytes into a four-byte slot. It also checks the structure the lowering relies on:

- a PARAM slot is one node (one dtype, one size), and a variable name has one set of bounds;
- a REDUCE range is used only inside a REDUCE over it, and a REDUCE reduces only REDUCE ranges;
- a GLOBAL range's end depends on variables only, so it is a launch size;
- the SINK holds effects (STORE, ATOMIC), the early exits of sequential loops (EXIT) and the PARAMs a kernel
  keeps but does not use;
- an EXIT is of a LOOP range, one per loop, stated after every effect that runs in the loop, and its condition
  runs in that loop or loops around it (so it is tested in the loop's own turn);
- an AFTER is a memory state (``UOp.state``): a PARAM or DEFINE_REG after a count of effects, in the turn of
  loops;
- a DEFINE_REG (``UOp.register``) is one element per work item, accessed at index 0, which only atomics do not
  update (there is nothing to combine in memory no other work item sees).
"""

from __future__ import annotations

from collections.abc import Callable

from svod.dtype import DType, PtrDType, dtypes
from svod.errors import GraphError
from svod.ir.ops import (
    ALU,
    ATOMIC_OPS,
    BINARY,
    BOOL_OPS,
    COMPARISON,
    EFFECTS,
    FLOAT_ONLY,
    INT_ONLY,
    REDUCE_OPS,
    TERNARY,
    AxisKind,
    Ops,
)
from svod.ir.uop import FUSED_DTYPES, UOp, is_state, is_unbounded, kernel_label, memory_of

ATOMIC_DTYPES = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64})
"""The element types an atomic update may target on every backend."""

_KERNEL_OPS = frozenset({Ops.SINK, Ops.PARAM, Ops.DEFINE_VAR, Ops.BIND, Ops.RANGE, Ops.INDEX, Ops.LOAD, Ops.STORE,
                         Ops.ATOMIC, Ops.REDUCE, Ops.CONST, Ops.CAST, Ops.BITCAST, Ops.AFTER, Ops.EXIT,
                         Ops.DEFINE_REG}) | ALU


class _Checker:
    def __init__(self, sink: UOp) -> None:
        self.sink = sink
        self.kernel = kernel_label(sink)
        self.params: dict[int, UOp] = {}
        self.registers: dict[int, UOp] = {}
        self.variables: dict[str, UOp] = {}

    def fail(self, node: UOp, expected: str) -> GraphError:
        return GraphError(f"{node.op.name} node: {expected}", kernel=self.kernel, stage="build",
                          value=_describe(node))

    def run(self) -> None:
        if not isinstance(self.sink, UOp) or self.sink.op is not Ops.SINK:
            raise GraphError("a kernel AST must be a SINK of stores", stage="build",
                             value=getattr(self.sink, "op", self.sink))
        topo = self.sink.toposort()
        for node in topo:
            if node.op not in _KERNEL_OPS:
                raise self.fail(node, "is not an op of a kernel AST (SPECIAL, IF, END and the like come from lowering)")
            check = _CHECKS.get(node.op)
            if check is not None:
                check(self, node)
            elif node.op in ALU:
                self.alu(node)
        self.scopes(topo)
        self.exits()

    # ---- per op -----------------------------------------------------------------------------------------

    def sink_node(self, node: UOp) -> None:
        if node is not self.sink:
            raise self.fail(node, "a SINK may only be the root of a kernel")
        if not any(s.op in EFFECTS for s in node.src):
            raise self.fail(node, "a kernel needs at least one STORE or ATOMIC")
        for s in node.src:
            if s.op not in EFFECTS and s.op not in (Ops.PARAM, Ops.EXIT):
                raise self.fail(node, f"a SINK holds STOREs, ATOMICs, EXITs and unused PARAMs, not {s.op.name}")

    def const(self, node: UOp) -> None:
        self.scalar(node, node.dtype)
        kinds = {"bool": (bool,), "int": (int,), "uint": (int,), "float": (float,)}[node.dtype.kind]
        if type(node.arg) not in kinds:
            raise self.fail(node, f"a {node.dtype!r} constant holds a {kinds[0].__name__}")
        if node.dtype.is_int and not node.dtype.min <= node.arg <= node.dtype.max:
            raise self.fail(node, f"constant outside the range of {node.dtype!r}")

    def define_var(self, node: UOp) -> None:
        if not (isinstance(node.arg, tuple) and len(node.arg) == 3 and isinstance(node.arg[0], str)):
            raise self.fail(node, "arg is (name, min, max)")
        name, lo, hi = node.arg
        if not node.dtype.is_int or node.src:
            raise self.fail(node, "a variable is an integer with no sources")
        if not (isinstance(lo, int) and isinstance(hi, int) and node.dtype.min <= lo <= hi <= node.dtype.max):
            raise self.fail(node, f"bounds [min, max] within {node.dtype!r}")
        seen = self.variables.setdefault(name, node)
        if seen is not node:
            raise self.fail(node, f"variable {name} is defined twice, with bounds {seen.arg[1:]} and {node.arg[1:]}")

    def bind(self, node: UOp) -> None:
        if len(node.src) != 2 or node.src[0].op is not Ops.DEFINE_VAR or node.src[1].op is not Ops.CONST:
            raise self.fail(node, "BIND(DEFINE_VAR, CONST)")
        name, lo, hi = node.src[0].arg
        if node.dtype != node.src[0].dtype or not lo <= node.src[1].arg <= hi:
            raise self.fail(node, f"a value of {name} within [{lo}, {hi}]")

    def param(self, node: UOp) -> None:
        if not isinstance(node.dtype, PtrDType) or node.dtype.local:
            raise self.fail(node, "a PARAM is a pointer to global memory")
        self.scalar(node, node.dtype.base)
        if not isinstance(node.arg, int) or isinstance(node.arg, bool) or node.arg < 0:
            raise self.fail(node, "arg is a non-negative buffer slot")
        if len(node.src) > 1 or (node.src and node.src[0].dtype != dtypes.index):
            raise self.fail(node, "at most one source, an index-typed size")
        seen = self.params.setdefault(node.arg, node)
        if seen is not node:
            raise self.fail(node, f"buffer slot {node.arg} is declared twice, as {seen.dtype!r} and {node.dtype!r}")

    def register(self, node: UOp) -> None:
        if not isinstance(node.dtype, PtrDType) or not node.dtype.local or node.dtype.size != 1 or \
                any(r.op is not Ops.RANGE or r.arg[1] is not AxisKind.GLOBAL for r in node.src):
            raise self.fail(node, "a DEFINE_REG is a local pointer to one element, of the work items of GLOBAL "
                                  "ranges (its sources)")
        self.scalar(node, node.dtype.base)
        if not isinstance(node.arg, int) or isinstance(node.arg, bool) or node.arg < 0:
            raise self.fail(node, "arg is a non-negative register slot")
        seen = self.registers.setdefault(node.arg, node)
        if seen is not node:
            raise self.fail(node, f"register {node.arg} is declared twice, as {seen.dtype!r} and {node.dtype!r}")

    def range_node(self, node: UOp) -> None:
        if not (isinstance(node.arg, tuple) and len(node.arg) == 2 and isinstance(node.arg[0], int)
                and isinstance(node.arg[1], AxisKind) and node.arg[1] is not AxisKind.LOCAL):
            raise self.fail(node, "arg is (axis, AxisKind.GLOBAL, LOOP or REDUCE)")
        if len(node.src) != 1 or node.src[0].dtype != dtypes.index or node.dtype != dtypes.index:
            raise self.fail(node, "an index-typed RANGE over one index-typed end")
        if node.arg[1] is AxisKind.GLOBAL:
            used = next((u for u in node.src[0].toposort() if u.op in (Ops.RANGE, Ops.LOAD)), None)
            if used is not None:
                raise self.fail(node, "a GLOBAL range's end is a launch size: it may use variables, "
                                      f"not a {used.op.name}")

    def state(self, node: UOp) -> None:
        if not is_state(node) or node.src[0].op not in (Ops.PARAM, Ops.DEFINE_REG) or \
                node.dtype != node.src[0].dtype or node.arg < 0 or \
                any(r.op is not Ops.RANGE or r.arg[1] is AxisKind.GLOBAL for r in node.src[1:]):
            raise self.fail(node, "a memory state is AFTER(PARAM or DEFINE_REG, *sequential ranges) with its dtype and "
                                  "a version (a count of effects) for arg")

    def index(self, node: UOp) -> None:
        if len(node.src) not in (2, 3) or not isinstance(node.src[0].dtype, PtrDType) or \
                node.src[0].op not in (Ops.PARAM, Ops.DEFINE_REG, Ops.AFTER):
            raise self.fail(node, "INDEX(buffer, register or memory state, index[, gate])")
        if memory_of(node.src[0]).op is Ops.DEFINE_REG and (node.src[1].op is not Ops.CONST or node.src[1].arg != 0):
            raise self.fail(node, "a register is accessed at index 0")
        if node.dtype != node.src[0].dtype:
            raise self.fail(node, "an INDEX has its buffer's pointer dtype")
        if node.src[1].dtype != dtypes.index:
            raise self.fail(node, f"the index is dtypes.index, not {node.src[1].dtype!r}; cast it")
        if len(node.src) == 3 and node.src[2].dtype != dtypes.bool:
            raise self.fail(node, "the gate of an INDEX is a bool")

    def load(self, node: UOp) -> None:
        if len(node.src) != 1 or node.src[0].op is not Ops.INDEX:
            raise self.fail(node, "LOAD(INDEX)")
        if node.dtype != node.src[0].dtype.base:  # type: ignore[attr-defined]
            raise self.fail(node, f"a LOAD has its buffer's element dtype {node.src[0].dtype.base!r}")  # type: ignore[attr-defined]

    def store(self, node: UOp) -> None:
        if len(node.src) < 2 or node.src[0].op is not Ops.INDEX or node.dtype != dtypes.void or \
                any(r.op is not Ops.RANGE or r.arg[1] is AxisKind.REDUCE for r in node.src[2:]):
            raise self.fail(node, f"{node.op.name}(INDEX, value, *ranges) of dtype void, the ranges GLOBAL or LOOP")
        base: DType = node.src[0].dtype.base  # type: ignore[attr-defined]
        if node.src[1].dtype != base:
            raise self.fail(node, f"the value stored into a buffer of {base!r} is {base!r}, not {node.src[1].dtype!r}")
        if node.op is Ops.ATOMIC:
            if node.arg not in ATOMIC_OPS:
                raise self.fail(node, f"arg is one of {sorted(o.name for o in ATOMIC_OPS)}")
            if memory_of(node.src[0].src[0]).op is Ops.DEFINE_REG:
                raise self.fail(node, "a register is its work item's own: store to it; nothing updates it atomically")
            if base not in ATOMIC_DTYPES:
                raise self.fail(node, f"atomics update {', '.join(sorted(d.name for d in ATOMIC_DTYPES))}")

    def reduce(self, node: UOp) -> None:
        if len(node.src) < 2 or node.arg not in REDUCE_OPS:
            raise self.fail(node, f"REDUCE(value, *ranges) with an op among {sorted(o.name for o in REDUCE_OPS)}")
        for r in node.src[1:]:
            if r.op is not Ops.RANGE or r.arg[1] is not AxisKind.REDUCE:
                raise self.fail(node, "a REDUCE reduces RANGEs of kind AxisKind.REDUCE")
        if node.dtype != node.src[0].dtype or node.dtype.kind == "bool":
            raise self.fail(node, "a REDUCE has its value's dtype, a number")
        if len(set(node.src[1:])) != len(node.src) - 1:
            raise self.fail(node, "a range is reduced twice")

    def exit(self, node: UOp) -> None:
        if len(node.src) < 2 or node.dtype != dtypes.void or node.src[0].op is not Ops.RANGE or \
                node.src[0].arg[1] is not AxisKind.LOOP or node.src[1].dtype != dtypes.bool or \
                any(r.op is not Ops.RANGE or r.arg[1] is AxisKind.REDUCE for r in node.src[2:]):
            raise self.fail(node, "EXIT(LOOP range, bool condition, *ranges) of dtype void, the ranges GLOBAL or LOOP")
        if node not in self.sink.src:
            raise self.fail(node, "an EXIT is stated in the SINK, after the effects of its loop")

    def cast(self, node: UOp) -> None:
        if len(node.src) != 1:
            raise self.fail(node, "one source")
        self.scalar(node, node.dtype)
        self.scalar(node, node.src[0].dtype)
        if node.op is Ops.BITCAST:
            if dtypes.bool in (node.dtype, node.src[0].dtype):
                raise self.fail(node, "a bitcast to or from bool is not defined; cast instead")
            if node.dtype.itemsize != node.src[0].dtype.itemsize:
                raise self.fail(node, f"a bitcast keeps the size: {node.src[0].dtype!r} is "
                                      f"{node.src[0].dtype.itemsize} bytes, {node.dtype!r} {node.dtype.itemsize}")

    def alu(self, node: UOp) -> None:
        op = node.op
        operands = node.src[1:] if op is Ops.WHERE else node.src
        arity = 3 if op in TERNARY else 2 if op in BINARY else 1
        if len(node.src) != arity:
            raise self.fail(node, f"{arity} source(s)")
        dtype = operands[0].dtype
        for s in node.src:
            self.scalar(node, s.dtype)
        if any(s.dtype != dtype for s in operands):
            given = ", ".join(repr(s.dtype) for s in operands)
            raise self.fail(node, f"operands of one dtype, not {given}; cast first")
        if op is Ops.WHERE and node.src[0].dtype != dtypes.bool:
            raise self.fail(node, "a bool condition")
        if op in FLOAT_ONLY and not dtype.is_float:
            raise self.fail(node, "float operands")
        if op in INT_ONLY and dtype.is_float:
            raise self.fail(node, "integer operands")
        if op is Ops.MULACC and dtype not in FUSED_DTYPES:
            raise self.fail(node, "float32 or float64 operands")
        if dtype.kind == "bool" and op not in BOOL_OPS:
            raise self.fail(node, "numbers, not bools; cast first")
        want = dtypes.bool if op in COMPARISON else dtype
        if node.dtype != want:
            raise self.fail(node, f"result dtype {want!r}")

    def scalar(self, node: UOp, dtype: DType) -> None:
        if isinstance(dtype, PtrDType) or dtype.kind == "void" or dtype.count != 1:
            raise self.fail(node, f"scalar values, not {dtype!r}")

    # ---- structure --------------------------------------------------------------------------------------

    def scopes(self, topo: tuple[UOp, ...]) -> None:
        """REDUCE ranges stay inside their REDUCEs: an effect depends on no REDUCE range that no REDUCE between
        them closes (``UOp.live_ranges``)."""
        for node in topo:
            if node.op in EFFECTS or node.op is Ops.EXIT:
                axes = sorted(r.arg[0] for r in node.live_ranges if r.arg[1] is AxisKind.REDUCE)
                if axes:
                    raise self.fail(node, f"REDUCE range(s) on axis {axes} used outside a REDUCE over them; "
                                          "reduce them, or make them LOOP ranges")

    def exits(self) -> None:
        """Each loop exits early at most once, after every effect in it, testing a condition of its own turn: the
        loop is the innermost of the ranges the EXIT runs in (the others number before it: they nest outside)."""
        seen: dict[UOp, UOp] = {}
        for statement in self.sink.src:
            if statement.op is Ops.PARAM:
                continue
            if statement.op in EFFECTS:
                ended = next((r for r in statement.live_ranges if r in seen), None)
                if ended is not None:
                    raise self.fail(statement, f"an effect in the loop on axis {ended.arg[0]} is stated after the "
                                               "loop's EXIT; state the EXIT after every effect of its loop")
                continue
            loop = statement.src[0]
            if loop in seen:
                raise self.fail(statement, f"the loop on axis {loop.arg[0]} has two EXITs; join their conditions")
            seen[loop] = statement
            inner = sorted(r.arg[0] for r in statement.live_ranges if r is not loop and r.arg[0] >= loop.arg[0])
            if inner:
                raise self.fail(statement, f"the condition of the EXIT of the loop on axis {loop.arg[0]} runs in "
                                           f"loops on axes {inner}, inside it; an exit tests its own loop's turn")
        endless = next((u for u in self.sink.toposort() if u.op is Ops.RANGE and is_unbounded(u) and u not in seen),
                       None)
        if endless is not None:
            raise self.fail(endless, f"the loop on axis {endless.arg[0]} has no bound and no EXIT: it would never end")


_CHECKS: dict[Ops, Callable[[_Checker, UOp], None]] = {
    Ops.SINK: _Checker.sink_node, Ops.CONST: _Checker.const, Ops.DEFINE_VAR: _Checker.define_var,
    Ops.BIND: _Checker.bind, Ops.PARAM: _Checker.param, Ops.DEFINE_REG: _Checker.register,
    Ops.RANGE: _Checker.range_node, Ops.INDEX: _Checker.index,
    Ops.LOAD: _Checker.load, Ops.STORE: _Checker.store, Ops.ATOMIC: _Checker.store, Ops.REDUCE: _Checker.reduce,
    Ops.CAST: _Checker.cast, Ops.BITCAST: _Checker.cast, Ops.AFTER: _Checker.state, Ops.EXIT: _Checker.exit,
}


def _describe(node: UOp) -> str:
    sources = ", ".join(f"{s.op.name}:{s.dtype!r}" for s in node.src)
    arg = "" if node.arg is None else f" arg={node.arg!r}"
    return f"{node.op.name}:{node.dtype!r}{arg} <- ({sources})"


def validate(sink: UOp) -> None:
    """Raise ``GraphError`` if ``sink`` is not a well-formed kernel AST."""
    _Checker(sink).run()
