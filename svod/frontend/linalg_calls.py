"""``np.linalg`` statements of an ``@svod.jit`` function as the array rewriting (``svod.frontend.arrays``) leaves
them: each operand an array of a name of its own (an expression or a view is made one first), the shapes
checked as NumPy checks them, the result array known by its name. The plan's steps are
``svod.frontend.linalg``'s.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from svod.frontend import extents
from svod.frontend.array_exprs import Expr, Named
from svod.frontend.linalg import result_dtype
from svod.frontend.nodes import stands_for
from svod.frontend.phases import linalg_call


def factored(rewriter: Any, stmt: ast.stmt, looped: bool) -> list[ast.stmt] | None:
    """A ``np.linalg`` statement (``phases.linalg_call``) of the array rewriting ``rewriter`` (an
    ``arrays.ArrayRewriter``), rewritten; None for any other statement."""
    kind = linalg_call(rewriter.reader, stmt)
    if kind is None or not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
        return None
    call = copy.copy(stmt.value)
    made: list[ast.stmt] = []
    operands: list[Named] = []
    for position, operand in enumerate(call.args):
        known = rewriter.arrays.get(operand.id) if isinstance(operand, ast.Name) else None
        if not (isinstance(known, Named) and isinstance(operand, ast.Name) and known.name == operand.id):
            value = rewriter.value(operand)
            if not isinstance(value, Expr):
                return [stmt]  # not an array: the reader says so
            name = f"_svod_s{next(rewriter.counter)}"
            made += rewriter.new_array(stmt, name, value, looped)
            known = rewriter.arrays[name]
            call.args = [*call.args[:position], ast.copy_location(ast.Name(name, ast.Load()), operand),
                         *call.args[position + 1:]]
            rewriter.changed = True
        rewriter.static(stmt, known, f"np.linalg.{kind}")
        operands.append(known)
    if not operands:
        return [stmt]  # the reader says what is missing
    _check_shapes(rewriter, stmt, kind, operands)
    if made:
        stmt = stands_for(ast.copy_location(ast.Assign(stmt.targets, call), stmt), stmt)
    target = stmt.targets[0]
    if kind in ("solve", "inv", "cholesky") and isinstance(target, ast.Name):
        rewriter.arrays[target.id] = Named(operands[-1].shape, result_dtype(*(o.dtype for o in operands)), target.id)
    return [*made, stmt]


def _check_shapes(rewriter: Any, stmt: ast.stmt, kind: str, operands: list[Named]) -> None:
    """Refuse, at the line, what NumPy raises for: a matrix that is not square, right-hand sides of another
    length; and a stack of matrices (which svod does not compute)."""
    shape = extents.numbers(operands[0].shape)
    if len(shape) < 2:
        raise rewriter.refuse(stmt, f"np.linalg.{kind}: {len(shape)}-dimensional array given. Array must be at "
                                    "least two-dimensional (NumPy raises LinAlgError)")
    if len(shape) > 2:
        raise rewriter.refuse(stmt, f"np.linalg.{kind} of a stack of matrices (shape {shape}) is not one svod has; "
                                    "a statement per matrix")
    if shape[0] != shape[1]:
        raise rewriter.refuse(stmt, f"np.linalg.{kind}: Last 2 dimensions of the array must be square, not "
                                    f"{shape[0]}x{shape[1]} (NumPy raises LinAlgError)")
    if kind == "solve":
        rhs = extents.numbers(operands[1].shape)
        if len(rhs) not in (1, 2) or rhs[0] != shape[0]:
            raise rewriter.refuse(stmt, f"np.linalg.solve of a {shape[0]}x{shape[1]} matrix takes right-hand sides of "
                                        f"shape ({shape[0]},) or ({shape[0]}, k), not {rhs} (NumPy raises ValueError)")
