"""The names Python code reads and binds, as ``ast`` shows them: what statements read (``loaded``), read before
they bind it (``needs``) and bind (``stored``); and a copy of code under new names (``renamed``).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar, cast

from svod.frontend.nodes import stands_for

_Node = TypeVar("_Node", bound=ast.AST)


def loaded(nodes: Iterable[ast.AST]) -> list[str]:
    """The names ``nodes`` read, in order of first use."""
    found: dict[str, None] = {}
    for node in nodes:
        for inner in ast.walk(node):
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


def stored(nodes: Iterable[ast.AST]) -> set[str]:
    return {inner.id for node in nodes for inner in ast.walk(node)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}


def renamed(node: _Node, names: Mapping[str, str]) -> _Node:
    """A copy of ``node`` with each name in ``names`` replaced by its new name; an error about a part of it
    shows the part it copies (``nodes.shown``), in the user's names."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.AST:
            return ast.copy_location(ast.Name(names.get(name.id, name.id), name.ctx), name)

    made = cast(_Node, Rename().visit(copy.deepcopy(node)))  # a Name's replacement is a Name: same kind
    for old, new in zip(ast.walk(node), ast.walk(made), strict=True):  # the same shape, part for part
        if isinstance(new, (ast.expr, ast.stmt)):
            stands_for(new, old)
    return made
