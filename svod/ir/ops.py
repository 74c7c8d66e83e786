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
    # ternary
    WHERE = auto()

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


UNARY = frozenset({Ops.NEG, Ops.ABS, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})
BINARY = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN, Ops.CMPLT,
                    Ops.CMPLE, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
TERNARY = frozenset({Ops.WHERE})
ALU = UNARY | BINARY | TERNARY
COMPARISON = frozenset({Ops.CMPLT, Ops.CMPLE, Ops.CMPNE, Ops.CMPEQ})
COMMUTATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
FLOAT_ONLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV})
INT_ONLY = frozenset({Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR})
BOOL_OPS = COMPARISON | {Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE}
"""The ALU ops defined on bool operands."""
REDUCE_OPS = frozenset({Ops.ADD, Ops.MAX, Ops.MIN, Ops.MUL})
ATOMIC_OPS = frozenset({Ops.ADD, Ops.MAX, Ops.MIN})
EFFECTS = frozenset({Ops.STORE, Ops.ATOMIC})
"""Ops that write memory: a kernel's SINK is made of them."""
SCOPES = frozenset({Ops.RANGE, Ops.IF})
"""Ops that open a block of code which an END closes: a loop, or a guarded block."""
STAGES = (Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE, Ops.BINARY)
"""The sources of a PROGRAM, in order: the kernel and each compilation stage."""
