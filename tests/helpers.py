"""Small references the tests share."""

from __future__ import annotations

from svod.ir import Ops, UOp
from svod.ir.alu import exec_alu


def evaluate_expression(expr: UOp, env: dict[str, int]) -> int:
    """The value of an ALU expression over constants and variables, in C semantics (``svod.ir.alu``)."""
    values: dict[UOp, int] = {}
    for node in expr.toposort():
        if node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.DEFINE_VAR:
            values[node] = env[node.arg[0]]
        else:
            values[node] = exec_alu(node.op, node.dtype, [values[s] for s in node.src])
    return values[expr]
