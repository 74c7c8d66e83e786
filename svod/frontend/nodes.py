"""Python code svod writes into a jitted function (an array statement's loops, a temporary's fill, a carried
scalar's loads and stores), built as ``ast`` nodes, never as text parsed again; and, for errors, the statement
of the user's each stands for.

``placed(statements, at)`` puts svod's own nodes at the line of the user's statement ``at`` and marks them
with it: an error about one of them shows the user's code (``shown``), not svod's names (``_svod_a0``).
A node of the user's inside them (a scalar of the statement, copied) keeps its own place and shows itself.
"""

from __future__ import annotations

import ast
import copy
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, TypeGuard, TypeVar

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


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and every node under it, in ``ast.walk``'s order (breadth first), in half its time: the frontend
    reads every statement's nodes many times over, and ``ast.walk`` spends most of its time in the generators of
    ``ast.iter_child_nodes``."""
    todo = deque([node])
    while todo:
        found = todo.popleft()
        for name in found._fields:
            value = getattr(found, name, None)
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend([item for item in value if isinstance(item, ast.AST)])
        yield found


_BODIES = ("body", "handlers", "orelse", "finalbody", "cases")
"""The fields that hold statements (or a handler's or case's, which hold them), in the order ``ast`` lists them."""


def statements_in(stmt: ast.stmt) -> Iterator[ast.stmt]:
    """``stmt`` and every statement nested in it, in ``walk``'s order, without visiting their expressions (where
    no statement stands): a branch's and a loop's bodies, a ``try``'s handlers, a ``match``'s cases."""
    todo: deque[ast.AST] = deque([stmt])
    while todo:
        found = todo.popleft()
        for name in _BODIES:
            todo.extend(getattr(found, name, ()))
        if isinstance(found, ast.stmt):
            yield found


def copied(node: _Node) -> _Node:
    """A copy of ``node``'s tree as ``copy.deepcopy`` makes it (a node or a list of them that stands twice in it
    stands twice in the copy), at a fraction of its cost: what is not a node is shared, not copied, and so is
    svod's note of the user's node an error shows (``SHOWN``). That note is the user's node as the user wrote it:
    an error about the copy quotes the user's code even where svod rewrites the copy later (unrolls a loop's
    bound), where a deep copy of the note would quote the rewriting."""
    made: dict[int, Any] = {}

    def copy_of(original: ast.AST) -> ast.AST:
        twin = made.get(id(original))
        if twin is None:
            twin = made[id(original)] = original.__class__.__new__(original.__class__)
            state = dict(original.__dict__)  # its fields, its place and svod's notes on it
            for name in original._fields:
                value = state.get(name)
                if isinstance(value, ast.AST):
                    state[name] = copy_of(value)
                elif isinstance(value, list):
                    state[name] = list_of(value)
            twin.__dict__.update(state)
        return twin

    def list_of(original: list[Any]) -> list[Any]:
        twin = made.get(id(original))
        if twin is None:
            twin = made[id(original)] = [copy_of(item) if isinstance(item, ast.AST) else item for item in original]
        return twin

    return copy_of(node)  # type: ignore[return-value]  # (a copy is of its original's class)


def placed(statements: Sequence[_Node], at: ast.AST) -> list[_Node]:
    """``statements``, which svod wrote for the user's statement ``at``: each of svod's own nodes in them (one
    without a location) at ``at``'s place and shown as ``at`` in errors, and a node that stands twice in them
    copied, so that each stands once."""
    seen: set[int] = set()
    user = shown(at)
    location = _location(at)

    def visit(node: ast.AST) -> ast.AST:
        if id(node) in seen:
            node = copied(node)
        seen.add(id(node))
        if isinstance(node, (ast.expr, ast.stmt)) and "lineno" not in node.__dict__:
            node.__dict__.update(location)
            node.__dict__[SHOWN] = user
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for position, item in enumerate(value):
                    if _owned(item) and (made := visit(item)) is not item:
                        value[position] = made
            elif _owned(value) and (made := visit(value)) is not value:
                setattr(node, name, made)
        return node

    made = [visit(statement) for statement in statements]
    for statement in made:
        ast.fix_missing_locations(statement)
    return made  # type: ignore[return-value]  # (each is its statement, or a copy of it: the same kind)


def _location(at: ast.AST) -> dict[str, Any]:
    """The place ``ast.copy_location`` gives a node of ``at``'s (a statement's or an expression's)."""
    return {attr: getattr(at, attr, None) for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset")
            if attr in at._attributes
            and (getattr(at, attr, None) is not None or (attr.startswith("end_") and hasattr(at, attr)))}


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
    return any(isinstance(n, ast.Call) for node in nodes for n in walk(node))


def _owned(value: object) -> TypeGuard[ast.AST]:
    """Whether ``value`` is a node of its own in a tree (an operator or a context is one shared object)."""
    return isinstance(value, ast.AST) and not isinstance(value, (ast.expr_context, ast.operator, ast.unaryop,
                                                                  ast.boolop, ast.cmpop))


__all__ = ["SHOWN", "assign", "call", "code", "constant", "copied", "for_loop", "holds_call", "load", "placed", "shown",
           "stands_for", "statements_in", "store", "stored", "subscript", "walk"]
