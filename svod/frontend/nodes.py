"""Python code svod writes into a jitted function (an array statement's loops, a temporary's fill, a carried
scalar's loads and stores), built as ``ast`` nodes, never as text parsed again; and, for errors, the statement
of the user's each stands for.

``placed(statements, at)`` puts svod's own nodes at the line of the user's statement ``at`` and marks them
with it: an error about one of them shows the user's code (``shown``), not svod's names (``_svod_a0``).
A node of the user's inside them (a scalar of the statement, deep-copied) keeps its own place and shows itself.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

SHOWN = "svod_shown"
"""The attribute of a node svod made that holds the user's node an error shows in its place."""

_Node = TypeVar("_Node", bound=ast.AST)


def load(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def store(name: str) -> ast.Name:
    return ast.Name(name, ast.Store())


def constant(value: Any) -> ast.expr:
    """``value`` as a literal: a NumPy scalar as the Python number it holds (a literal holds only those), a
    tuple as a tuple of literals (as Python reads ``(3, 4)``)."""
    if isinstance(value, tuple):
        return ast.Tuple([constant(item) for item in value], ast.Load())
    return ast.Constant(value.item() if isinstance(value, np.generic) else value)


def call(func: ast.expr | str, *args: ast.expr) -> ast.Call:
    return ast.Call(load(func) if isinstance(func, str) else func, list(args), [])


def subscript(array: str, index: Sequence[ast.expr], ctx: ast.expr_context | None = None) -> ast.Subscript:
    """``array[i]``, or ``array[i, j, ...]`` (``array[()]`` for no index)."""
    at: ast.expr = index[0] if len(index) == 1 else ast.Tuple(list(index), ast.Load())
    return ast.Subscript(load(array), at, ctx or ast.Load())


def stored(target: ast.expr) -> ast.expr:
    """``target`` (a name or a subscript made to be read) as the target of an assignment."""
    made = copy.copy(target)
    made.ctx = ast.Store()  # type: ignore[attr-defined]
    return made


def assign(target: ast.expr | str, value: ast.expr) -> ast.Assign:
    return ast.Assign([store(target) if isinstance(target, str) else stored(target)], value)


def for_loop(variable: str, iterable: ast.expr, body: list[ast.stmt]) -> ast.For:
    return ast.For(store(variable), iterable, body, [])


def placed(statements: Sequence[_Node], at: ast.AST) -> list[_Node]:
    """``statements``, which svod wrote for the user's statement ``at``: each of svod's own nodes in them (one
    without a location) at ``at``'s place and shown as ``at`` in errors, and a node that stands twice in them
    copied, so that each stands once."""
    seen: set[int] = set()
    user = shown(at)

    def visit(node: ast.AST) -> ast.AST:
        if id(node) in seen:
            node = copy.deepcopy(node)
        seen.add(id(node))
        if isinstance(node, (ast.expr, ast.stmt)) and not hasattr(node, "lineno"):
            ast.copy_location(node, at)
            setattr(node, SHOWN, user)
        for name, value in ast.iter_fields(node):
            for position, item in enumerate(value if isinstance(value, list) else [value]):
                made = visit(item) if _owned(item) else item
                if made is not item and isinstance(value, list):
                    value[position] = made
                elif made is not item:
                    setattr(node, name, made)
        return node

    made = [visit(statement) for statement in statements]
    for statement in made:
        ast.fix_missing_locations(statement)
    return made  # type: ignore[return-value]  # (each is its statement, or a copy of it: the same kind)


def stands_for(node: _Node, at: ast.AST) -> _Node:
    """``node``, a rewritten copy of the user's ``at``, shown as ``at`` in errors."""
    setattr(node, SHOWN, shown(at))
    return node


def shown(node: ast.AST) -> ast.AST:
    """The user's node an error about ``node`` shows: the one svod wrote it for, or ``node`` itself."""
    return getattr(node, SHOWN, node)


def code(node: ast.AST, limit: int) -> str:
    """The user's code of ``node`` (``shown``) on one line, cut at ``limit`` characters, as an error shows it."""
    text = " ".join(ast.unparse(shown(node)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def holds_call(*nodes: ast.AST) -> bool:
    """Whether a call is anywhere in ``nodes``."""
    return any(isinstance(n, ast.Call) for node in nodes for n in ast.walk(node))


def _owned(value: object) -> bool:
    """Whether ``value`` is a node of its own in a tree (an operator or a context is one shared object)."""
    return isinstance(value, ast.AST) and not isinstance(value, (ast.expr_context, ast.operator, ast.unaryop,
                                                                  ast.boolop, ast.cmpop))


__all__ = ["SHOWN", "assign", "call", "code", "constant", "for_loop", "holds_call", "load", "placed", "shown",
           "stands_for", "store", "stored", "subscript"]
