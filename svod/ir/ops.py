"""The op vocabulary of the UOp IR, grouped by what a pass needs to know about each op."""

from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
    # kernel structure
    SINK = auto()
    PARAM = auto()
    DEFINE_VAR = auto()
    BIND = auto()
    RANGE = auto()
    IF = auto()
    END = auto()
    SPECIAL = auto()
    DEFINE_REG = auto()
    DEFINE_LOCAL = auto()
    """Memory one work group shares (OpenCL ``__local``, CUDA ``__shared__``, WGSL ``var<workgroup>``):
    ``dtype`` is ``base.ptr(size, local=True)``, ``arg`` its number. On a CPU, where a thread is a group of
    one, the private copy of the buffer that is its source (an array on the thread's stack). Made by
    lowering, not by users."""
    LANE = auto()
    """The lane of a vector computation: ``arg`` is its width ``W``, ``dtype`` index. Every value that
    depends on it is ``W`` values at once, lane ``c`` being what the value is where LANE is ``c``: a register
    tile's row of ``W`` outputs computed as one vector (``svod.codegen.lower.upcast_reductions``). Made by
    lowering, for a renderer that spells vectors, not by users."""
    BARRIER = auto()
    """A SINK source, between effects: every work item of a group waits here until all have arrived, and
    then sees what the others stored to local memory before it. Made by GPU lowering, not by users."""
    SHUFFLE_DOWN = auto()
    """``SHUFFLE_DOWN(value)``, arg ``d``: ``value`` as the work item ``d`` places further along the same warp
    computed it (its own where that is past the warp's end). Every item of the warp reaches it together, so
    lowering makes it only where a whole warp runs the same code (``DeviceCaps.warp_size``): a work group's
    last partials combined without local memory or barriers. Made by GPU lowering, not by users."""
    EXIT = auto()
    """``EXIT(range, condition)``: an early exit of the sequential loop over ``range`` (a ``LOOP`` range, see
    ``UOp.exit``). A SINK source stated after every effect that runs in that loop: after each turn, once its
    effects have happened, the loop ends if ``condition`` holds (a ``break``, or a ``while`` whose test fails),
    and no later turn runs. A turn always runs whole; what a ``break`` in the middle of it skips, the
    frontend gates. In a LINEAR, ``EXIT(loop, condition)`` is the last instruction of its loop's block."""
    REQUIRE = auto()
    """``REQUIRE(failed, *ranges)``, arg the message: a SINK source stated as an effect is, where the run fails
    if ``failed`` holds in a work item that reaches it (NumPy raises there: ``np.random.randint`` of bounds that
    span no integer). Made by the frontend; lowering records it in a buffer of the kernel's own, which svod
    reads after the run (``svod.codegen.requirements``)."""
    INDEX = auto()
    LOAD = auto()
    STORE = auto()
    ATOMIC = auto()
    REDUCE = auto()
    AFTER = auto()
    # compilation stages carried by a PROGRAM
    PROGRAM = auto()
    DEVICE = auto()
    LINEAR = auto()
    SOURCE = auto()
    BINARY = auto()
    # values
    CONST = auto()
    CAST = auto()
    BITCAST = auto()
    # unary
    NEG = auto()
    ABS = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIPROCAL = auto()
    EXP = auto()
    LOG = auto()
    COS = auto()
    TAN = auto()
    TANH = auto()
    ERF = auto()
    FLOOR = auto()
    CEIL = auto()
    TRUNC = auto()
    RINT = auto()
    """Round to the nearest integer, ties to even (numpy's ``round``)."""
    # binary
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()
    MIN = auto()
    CMPLT = auto()
    CMPLE = auto()
    CMPNE = auto()
    CMPEQ = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    POW = auto()
    FMOD = auto()
    """The float remainder of truncated division (C's ``fmod``): exact, with the dividend's sign; NaN for a
    zero divisor, an infinite dividend or a NaN. Python's float ``%`` and ``//`` are built from it."""
    SHL = auto()
    SHR = auto()
    """Shifts: an amount outside ``0 .. bits-1`` shifts everything out (0, or -1 for a negative ``>>``),
    as numpy defines them."""
    # ternary
    WHERE = auto()
    MULACC = auto()
    """``a * b + c`` rounded once (IEEE 754 fusedMultiplyAdd), on float32 and float64. Lowering makes a
    float sum of products accumulate with it (``FUSED``)."""

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    __hash__ = object.__hash__
    """Identity hashing in C: ops are hashed on every node built and every rule tried (Enum's own hash is
    a Python function). Nothing iterates a set of ops in an order that matters."""


class AxisKind(Enum):
    """What a RANGE means: parallel work (GLOBAL, LOCAL after lowering), a sequential LOOP, or a REDUCE."""

    GLOBAL = auto()
    LOCAL = auto()
    LOOP = auto()
    REDUCE = auto()

    def __repr__(self) -> str:
        return f"AxisKind.{self.name}"

    __hash__ = object.__hash__


MATH = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.EXP, Ops.LOG, Ops.COS, Ops.TAN, Ops.TANH, Ops.ERF,
                  Ops.FLOOR, Ops.CEIL, Ops.TRUNC, Ops.RINT, Ops.POW, Ops.FMOD})
"""Float functions every C math library has (``expf``, ``powf`` ...), rendered as calls or intrinsics."""
UNARY = frozenset({Ops.NEG, Ops.ABS, Ops.RECIPROCAL}) | (MATH - {Ops.POW, Ops.FMOD})
BINARY = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN, Ops.CMPLT,
                    Ops.CMPLE, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.POW, Ops.FMOD, Ops.SHL,
                    Ops.SHR})
TERNARY = frozenset({Ops.WHERE, Ops.MULACC})
ALU = UNARY | BINARY | TERNARY
COMPARISON = frozenset({Ops.CMPLT, Ops.CMPLE, Ops.CMPNE, Ops.CMPEQ})
COMMUTATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
FLOAT_ONLY = MATH | {Ops.RECIPROCAL, Ops.FDIV, Ops.MULACC}
INT_ONLY = frozenset({Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
BOOL_OPS = COMPARISON | {Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE}
"""The ALU ops defined on bool operands."""
REDUCE_OPS = frozenset({Ops.ADD, Ops.MAX, Ops.MIN, Ops.MUL})
ATOMIC_OPS = frozenset({Ops.ADD, Ops.MAX, Ops.MIN})
FUSED = "fused"
"""The arg of a float32 or float64 MUL whose product a sum accumulates with one rounding: lowering marks
the MUL a float ADD REDUCE sums, so that no rewrite folds the product on its own, and turns each update of
its accumulator into a MULACC (``svod.codegen.accumulators``)."""
CONTINUED = "continued"
"""The arg of a float ADD of a value and a REDUCE ADD whose accumulator starts from that value instead of the
identity: ``acc = start; acc = fma(a, b, acc) ...``, a sum continued from a partial sum stored before (a
matmul blocked over its reduction, ``svod.codegen.lower.block_matmul``). Made by lowering only."""
REASSOCIABLE = "reassociable"
"""Lowering's mark of a float sum the backend may add in any order (``svod.codegen.upcast.stream_rows``): the
second element of its REDUCE's arg, ``(Ops.ADD, REASSOCIABLE)``, and then the arg of each update of its
accumulator (an ADD or a MULACC, ``svod.codegen.accumulators``), whose loop a renderer lets its compiler
vectorise by reassociating. Made by lowering only: a sum's order is otherwise the reference's, or a loop's one
sum's (``svod.codegen.render.base.reassociable_accumulators``)."""
LANE_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG, Ops.MAX, Ops.MIN, Ops.WHERE, Ops.SQRT,
                      Ops.EXP2, Ops.LOG2, Ops.FLOOR, Ops.CEIL, Ops.TRUNC, Ops.RINT, Ops.RECIPROCAL, Ops.AND, Ops.OR,
                      Ops.XOR, Ops.IDIV, Ops.MOD, Ops.CAST, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.REDUCE}) | COMPARISON
"""The ops a value that depends on a ``LANE`` may go through: what a renderer that spells vectors spells on
them (lowering checks the rest: ``svod.codegen.lower._lanes_fit``)."""
LEAVES = (Ops.PARAM, Ops.DEFINE_VAR, Ops.CONST, Ops.DEFINE_LOCAL, Ops.LANE)
"""The ops an instruction list names before its first instruction: each is computed by no instruction."""
EFFECTS = frozenset({Ops.STORE, Ops.ATOMIC})
"""Ops that write memory: a kernel's SINK is made of them."""
STATEMENTS = EFFECTS | {Ops.EXIT}
"""What a SINK states in order, each at its place in a work item's program: the effects, and the early exits
of the loops they run in."""
SCOPES = frozenset({Ops.RANGE, Ops.IF})
"""Ops that open a block of code which an END closes: a loop, or a guarded block."""
STAGES = (Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE, Ops.BINARY)
"""The sources of a PROGRAM, in order: the kernel and each compilation stage."""
