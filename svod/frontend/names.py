"""The names Python code reads and binds, as ``ast`` shows them: what statements read (``loaded``), read before
they bind it (``needs``) and bind (``stored``); and a copy of code under new names (``renamed``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar, cast

from svod.frontend.nodes import copied, stands_for, walk

_Node = TypeVar("_Node", bound=ast.AST)


def loaded(nodes: Iterable[ast.AST]) -> list[str]:
    """The names ``nodes`` read, in order of first use."""
    found: dict[str, None] = {}
    for node in nodes:
        for inner in walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                found.setdefault(inner.id, None)
    return list(found)


def needs(nodes: Sequence[ast.AST]) -> set[str]:
    """The names ``nodes`` read before they assign them, in the order Python evaluates them (a value before
    its targets; an assignment anywhere counts from where it stands)."""
    assigned: set[str] = set()
    found: set[str] = set()

    class Reads(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Load) and node.id not in assigned:
                found.add(node.id)
            elif isinstance(node.ctx, ast.Store):
                assigned.add(node.id)

        def visit_Assign(self, node: ast.Assign) -> None:
            self.visit(node.value)
            for target in node.targets:
                self.visit(target)

        def visit_AugAssign(self, node: ast.AugAssign) -> None:
            self.visit(node.value)
            if isinstance(node.target, ast.Name) and node.target.id not in assigned:
                found.add(node.target.id)
            self.visit(node.target)

        def visit_For(self, node: ast.For) -> None:
            self.visit(node.iter)
            before = set(assigned)
            self.visit(node.target)
            for stmt in [*node.body, *node.orelse]:
                self.visit(stmt)
            assigned.intersection_update(before)  # a loop may make no turn

        def visit_While(self, node: ast.While) -> None:
            self.visit(node.test)
            before = set(assigned)
            for stmt in [*node.body, *node.orelse]:
                self.visit(stmt)
            assigned.intersection_update(before)

        def visit_If(self, node: ast.If) -> None:
            """A name counts as assigned after an ``if`` only where both branches assign it."""
            self.visit(node.test)
            before = set(assigned)
            for stmt in node.body:
                self.visit(stmt)
            then = set(assigned)
            assigned.intersection_update(before)
            for stmt in node.orelse:
                self.visit(stmt)
            assigned.intersection_update(then | before)

    for node in nodes:
        Reads().visit(node)
    return found


def written(nodes: Iterable[ast.AST]) -> set[str]:
    """The names whose contents ``nodes`` may change, read from the syntax alone and so on the safe side: the
    root name of each element or attribute store (``a[i] = v``, ``a[i][j] = v``, ``a.real[i] = v``), of each
    argument a call is given whole or as a view, by position, keyword or star, and of whatever its ``out`` is (a
    call may write an array it is given: ``np.add(b, c, out=a[1:])``, ``svod.atomic_add(a, 0, v)``), and of each
    called method's owner (``a.fill(0)``, ``a.T.sort()``). Rebinding a name is ``stored``'s; the modules and
    scalars among the result are the caller's to set aside, as only it knows them."""
    found: set[str] = set()
    for node in nodes:
        for inner in walk(node):
            if isinstance(inner, (ast.Subscript, ast.Attribute)) and isinstance(inner.ctx, (ast.Store, ast.Del)):
                found |= _root(inner.value)
            elif isinstance(inner, ast.Call):
                given = [*inner.args, *(keyword.value for keyword in inner.keywords if keyword.arg != "out")]
                outs = [keyword.value for keyword in inner.keywords if keyword.arg == "out"]
                found |= {name for arg in _items(given) if _whole(arg) for name in _root(arg)}
                found |= {name for arg in _items(outs) for name in _root(arg)}  # (``out=a[i]``: a row of a)
                if isinstance(inner.func, ast.Attribute):
                    found |= _root(inner.func.value)
    return found


def _items(given: list[ast.expr]) -> list[ast.expr]:
    """A call's arguments, each tuple or list of them (``out=(a,)``) by its items."""
    return [item for arg in given
            for item in (_items(list(arg.elts)) if isinstance(arg, (ast.Tuple, ast.List)) else [arg])]


def _whole(arg: ast.expr) -> bool:
    """Whether a call's argument may be an array, by its spelling: a name, a star, a view (``a.T``, ``a.real``)
    or a part with a slice in it (``a[1:]``); an indexed element (``a[i]``) or a shape (``a.shape[0]``) is a
    value the call reads."""
    if isinstance(arg, (ast.Name, ast.Starred)):
        return True
    if isinstance(arg, ast.Attribute):
        return arg.attr in _VIEWS
    return isinstance(arg, ast.Subscript) and (any(isinstance(n, ast.Slice) for n in walk(arg.slice))
                                                or _whole(arg.value))


_VIEWS = frozenset({"T", "mT", "real", "imag", "flat"})
"""The attributes of an array that are views of it, which a call may write through."""


def _root(node: ast.expr) -> set[str]:
    """The name an element or attribute chain starts from (``a`` of ``a.T[0]``), if a name."""
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def stored(nodes: Iterable[ast.AST]) -> set[str]:
    return {inner.id for node in nodes for inner in walk(node)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}


def renamed(node: _Node, names: Mapping[str, str]) -> _Node:
    """A copy of ``node`` with each name in ``names`` replaced by its new name; an error about a part of it
    shows the part it copies (``nodes.shown``), in the user's names."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.AST:
            return ast.copy_location(ast.Name(names.get(name.id, name.id), name.ctx), name)

    made = cast(_Node, Rename().visit(copied(node)))  # a Name's replacement is a Name: same kind
    for old, new in zip(walk(node), walk(made), strict=True):  # the same shape, part for part
        if isinstance(new, (ast.expr, ast.stmt)):
            stands_for(new, old)
    return made
