"""``np.linalg`` statements of an ``@svod.jit`` function as the array rewriting (``svod.frontend.arrays``) leaves
them: each operand an array of a name of its own (an expression or a view is made one first), the shapes
checked as NumPy checks them, the result array known by its name. The plan's steps are
``svod.frontend.linalg``'s.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

import numpy as np

from svod.frontend import extents, linalg_compose, linalg_general
from svod.frontend.array_exprs import Expr, Named
from svod.frontend.linalg import COMPOSED, FUNCTIONS, RECTANGULAR, keywords, result_dtype, unpacked
from svod.frontend.linalg_qr import qr_shapes
from svod.frontend.linalg_svd import svd_shapes
from svod.frontend.nodes import load, placed, stands_for
from svod.frontend.phases import linalg_call


def factored(rewriter: Any, stmt: ast.stmt, looped: bool) -> list[ast.stmt] | None:
    """A ``np.linalg`` statement (``phases.linalg_call``) of the array rewriting ``rewriter`` (an
    ``arrays.ArrayRewriter``), rewritten, or a statement whose expression holds ``np.linalg`` calls
    (``_hoisted``); None for any other statement."""
    if linalg_compose.singular_norm(rewriter, stmt):
        assert isinstance(stmt, ast.Assign)
        return linalg_compose.norm(rewriter, stmt, looped)
    hoisted = _hoisted(rewriter, stmt, looped)
    if hoisted is not None:
        return hoisted
    kind = linalg_call(rewriter.reader, stmt)
    if kind is None or not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
        return None
    if kind in COMPOSED:
        return linalg_compose.composed(rewriter, stmt, kind, looped)
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
    dtype = result_dtype(*(o.dtype for o in operands))
    if kind in ("solve", "inv", "cholesky") and isinstance(target, ast.Name):
        rewriter.arrays[target.id] = Named(operands[-1].shape, dtype, target.id)
    shape = extents.numbers(operands[0].shape)
    made_shapes = {"qr": qr_shapes(shape), "eigh": (shape[:1], shape), "eigvalsh": (shape[:1],),
                   "eig": (shape[:1], shape), "eigvals": (shape[:1],),
                   "pinv": (shape[::-1],)}.get(kind, ())
    if kind == "svd":
        u, s, vh = svd_shapes((shape[0], shape[1]), keywords(call).get("full_matrices", True) is True)
        made_shapes = (s,) if unpacked(kind, call) is None else (u, s, vh)
    if kind in ("eig", "eigvals"):
        dtype = linalg_general.result_dtype(dtype)
    names = target.elts if isinstance(target, ast.Tuple) else [target]
    for made_name, made_shape in zip(names, made_shapes, strict=False):
        if isinstance(made_name, ast.Name):
            rewriter.arrays[made_name.id] = Named(made_shape, dtype, made_name.id)
    return [*made, stmt]


def _check_shapes(rewriter: Any, stmt: ast.stmt, kind: str, operands: list[Named]) -> None:
    """Refuse, at the line, what NumPy raises for: a matrix that is not square (but for ``RECTANGULAR``'s), right-hand
    sides of another length; and a stack of matrices (which svod does not compute)."""
    shape = extents.numbers(operands[0].shape)
    if len(shape) < 2:
        raise rewriter.refuse(stmt, f"np.linalg.{kind}: {len(shape)}-dimensional array given. Array must be at "
                                    "least two-dimensional (NumPy raises LinAlgError)")
    if len(shape) > 2:
        raise rewriter.refuse(stmt, f"np.linalg.{kind} of a stack of matrices (shape {shape}) is not one svod has; "
                                    "a statement per matrix")
    if shape[0] != shape[1] and kind not in RECTANGULAR:
        raise rewriter.refuse(stmt, f"np.linalg.{kind}: Last 2 dimensions of the array must be square, not "
                                    f"{shape[0]}x{shape[1]} (NumPy raises LinAlgError)")
    if kind == "solve":
        rhs = extents.numbers(operands[1].shape)
        if len(rhs) not in (1, 2) or rhs[0] != shape[0]:
            raise rewriter.refuse(stmt, f"np.linalg.solve of a {shape[0]}x{shape[1]} matrix takes right-hand sides of "
                                        f"shape ({shape[0]},) or ({shape[0]}, k), not {rhs} (NumPy raises ValueError)")


def _hoisted(rewriter: Any, stmt: ast.stmt, looped: bool) -> list[ast.stmt] | None:
    """A statement whose expression holds ``np.linalg`` calls (``A[:] = np.linalg.cholesky(A) + np.triu(A)``,
    ``return 2 * np.linalg.det(a)``), as a ``np.linalg`` statement of each call, into a name of its own, in the
    order Python calls them, then the statement reading those names; None where it holds none. A call returned
    whole stays (the reader names a returned value, and ``slogdet``'s pair as two). A call that
    Python may not make (in a branch of ``a if c else b``, after an ``and``/``or``, in a lambda or a
    comprehension) stays where it is, and the array rewriting refuses it there."""
    if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Expr, ast.Return)) or stmt.value is None:
        return None
    whole = stmt.value if linalg_call(rewriter.reader, stmt) or isinstance(stmt, ast.Return) else None
    lifter = _Lifter(rewriter, whole)
    value = lifter.visit(stmt.value)
    if not lifter.lifted:
        return None
    rewriter.changed = True
    made: list[ast.stmt] = []
    for name, call in lifter.lifted:
        assigned = placed([ast.Assign([ast.Name(name, ast.Store())], call)], stmt)[0]
        made += rewriter.ordered(assigned, looped) or [assigned]
    new = stands_for(copy.copy(stmt), stmt)
    new.value = value
    return [*made, *rewriter.statement(new, looped)]


class _Lifter(ast.NodeTransformer):
    """Each ``np.linalg`` call of an expression but ``whole`` replaced by a name (``lifted``: name and call),
    the calls inside a call's arguments first; not where Python may not evaluate them."""

    def __init__(self, rewriter: Any, whole: ast.expr | None) -> None:
        self.rewriter, self.whole = rewriter, whole
        self.lifted: list[tuple[str, ast.Call]] = []

    def visit_Call(self, node: ast.Call) -> ast.expr:
        is_whole = node is self.whole
        node = self.generic_visit(node)
        callee = self.rewriter.reader.resolve(node.func)
        if linalg_compose.is_singular_norm(self.rewriter, node):
            is_whole = False  # (a statement of its own, returned too: the reader's returned value is an expression)
        elif is_whole or not any(callee is getattr(np.linalg, kind) for kind in (*FUNCTIONS, *COMPOSED)):
            return node
        name = f"_svod_l{next(self.rewriter.counter)}"
        self.lifted.append((name, node))
        return ast.copy_location(load(name), node)

    def generic_visit(self, node: Any) -> Any:
        """A copy of ``node`` with its parts visited (the user's tree stays as it is)."""
        node = copy.copy(node)
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                setattr(node, field, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
            elif isinstance(value, ast.AST):
                setattr(node, field, self.visit(value))
        return node

    def visit(self, node: ast.AST) -> Any:
        return node if isinstance(node, _MAYBE_EVALUATED) else super().visit(node)


_MAYBE_EVALUATED = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
"""The expressions whose parts Python may not evaluate (``_Lifter``)."""
