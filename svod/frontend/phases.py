"""The parts of an ``@svod.jit`` function (``svod.frontend.jit``): its top-level statements read as phases
(a ``prange`` nest, or sequential code: one kernel each), definitions of sizes and scalars, temporaries and
loops around phases; and which scalars its phases carry to one another (``carried``).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import pylang
from svod.frontend.source import Source

ALLOCATIONS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like")
"""The NumPy calls that make a temporary array."""
_HOST_CALLS = (len, min, max, abs, int, float, round)
"""What a definition (``n = a.shape[0] - 1``) may call: it is computed on the host as well as in kernels."""


@dataclass
class Phase:
    """Statements one kernel runs: a top-level ``prange`` loop nest, or sequential code (one work item)."""

    statements: list[ast.stmt]

    @property
    def line(self) -> int:
        return self.statements[0].lineno


@dataclass
class Definition:
    """``name = expression`` of sizes and scalars: computed where it is used (in a kernel, or on the host)."""

    name: str
    statement: ast.Assign


@dataclass
class Temporary:
    """``name = np.zeros(...)`` (or another allocation): a plan buffer, filled where the statement stands."""

    name: str
    call: ast.Call
    statement: ast.Assign

    @property
    def fill(self) -> ast.expr | None:
        """The value every element takes where the statement stands, or None (``np.empty``, or ``np.full``
        without one, which NumPy refuses when the host makes the array)."""
        kind = _allocation(self.call)
        if kind in ("zeros", "zeros_like"):
            return ast.Constant(0)
        if kind in ("ones", "ones_like"):
            return ast.Constant(1)
        if kind in ("full", "full_like"):
            return self.call.args[1] if len(self.call.args) > 1 else _keyword(self.call, "fill_value")
        return None


@dataclass
class Loop:
    """``for var in range(...)`` around phases: a plan loop."""

    var: str
    bounds: list[ast.expr]
    body: list[Item]
    statement: ast.For


Item = Phase | Definition | Temporary | Loop


@dataclass
class Structure:
    """A jitted function's top level: its items in order and the names it returns."""

    items: list[Item]
    returns: list[str] = field(default_factory=list)
    returns_tuple: bool = False


class Reader:
    """Reads a function's body into phases, definitions, temporaries and loops."""

    def __init__(self, source: Source, name: str) -> None:
        self.source = source
        self.name = name

    def structure(self) -> Structure:
        body = list(self.source.node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        found = Structure([])
        last = body[-1] if body else None
        if isinstance(last, ast.Return):
            found.returns, found.returns_tuple = self.returned(last)
            body.pop()
        found.items = self.items(body)
        return found

    def returned(self, stmt: ast.Return) -> tuple[list[str], bool]:
        value = stmt.value
        if value is None:
            return [], False
        values = value.elts if isinstance(value, ast.Tuple) else [value]
        if not all(isinstance(v, ast.Name) for v in values):
            raise self.refuse(stmt, "a jitted function returns arrays by name (`return out` or `return a, b`)")
        return [v.id for v in values if isinstance(v, ast.Name)], isinstance(value, ast.Tuple)

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def items(self, body: Iterable[ast.stmt]) -> list[Item]:
        found: list[Item] = []
        for stmt in (single for statement in body for single in self.unpacked(statement)):
            item = self.item(stmt)
            if isinstance(item, Phase) and found and isinstance(found[-1], Phase) and not self.parallel(found[-1]) \
                    and not self.parallel(item):
                found[-1].statements += item.statements  # sequential code runs as one kernel
            else:
                found.append(item)
        return found

    def unpacked(self, stmt: ast.stmt) -> list[ast.stmt]:
        """``h, w = a.shape`` (or ``a, b = 1, n``) as one assignment per name, so each is a definition."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
                and all(isinstance(t, ast.Name) for t in stmt.targets[0].elts)):
            return [stmt]
        names = [t.id for t in stmt.targets[0].elts if isinstance(t, ast.Name)]
        value = stmt.value
        if isinstance(value, ast.Tuple) and len(value.elts) == len(names):
            if any(set(loaded([v])) & set(names) for v in value.elts):  # a, b = b, a: one statement
                return [stmt]
            parts = list(value.elts)
        elif isinstance(value, ast.Attribute) and value.attr == "shape":
            parts = [ast.Subscript(value, ast.Constant(axis), ast.Load()) for axis in range(len(names))]
        else:
            return [stmt]
        return [ast.fix_missing_locations(ast.copy_location(ast.Assign([ast.Name(n, ast.Store())], part), stmt))
                for n, part in zip(names, parts, strict=True)]

    def item(self, stmt: ast.stmt) -> Item:
        if isinstance(stmt, ast.Return):
            raise self.refuse(stmt, "a jitted function returns at its end only")
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if isinstance(stmt.value, ast.Call) and self.allocation(stmt.value) is not None:
                return Temporary(name, stmt.value, stmt)
            if self.pure(stmt.value):
                return Definition(name, stmt)
        if isinstance(stmt, ast.For) and self.is_range(stmt.iter) and isinstance(stmt.target, ast.Name) \
                and self.holds_phases(stmt.body):
            if stmt.orelse:
                raise self.refuse(stmt, "a loop's else is not supported in a jitted function")
            return Loop(stmt.target.id, list(stmt.iter.args), self.items(stmt.body), stmt)  # type: ignore[attr-defined]
        if any(isinstance(node, ast.Call) and self.allocation(node) is not None for node in ast.walk(stmt)):
            raise self.refuse(stmt, "a temporary array is made by a statement of its own at the top of a jitted "
                          "function or of a loop around phases (`tmp = np.zeros(n)`)")
        return Phase([stmt])

    def reductions(self, stmt: ast.stmt) -> set[str]:
        """The locals a parallel loop reduces across its work items, as numba reads it: ``s += e``, ``s *= e``,
        ``s = max(s, e)``, ``s = min(s, e)`` on a name the loop's body does not otherwise assign."""
        if not self.is_prange(stmt):
            return set()
        reduced: set[str] = set()
        assigned: set[str] = set()
        for inner in ast.walk(stmt):
            if isinstance(inner, ast.AugAssign) and isinstance(inner.target, ast.Name) \
                    and isinstance(inner.op, (ast.Add, ast.Sub, ast.Mult)):
                reduced.add(inner.target.id)
            elif isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name):
                name = inner.targets[0].id
                value = inner.value
                if isinstance(value, ast.Call) and self.resolve(value.func) in (max, min) and \
                        any(isinstance(a, ast.Name) and a.id == name for a in value.args):
                    reduced.add(name)
                else:
                    assigned.add(name)
        return reduced - assigned

    def sequential(self, stmt: ast.stmt) -> ast.stmt:
        """A prange nest as a sequential loop nest (a reduction across its work items, which svod's lowering
        splits over threads in a fixed order)."""
        reader = self

        class Sequential(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.AST:
                self.generic_visit(node)
                if reader.resolve(node.func) is pylang.prange:
                    return ast.copy_location(ast.Call(ast.Name("range", ast.Load()), node.args, node.keywords), node)
                return node

        return ast.fix_missing_locations(Sequential().visit(_copy(stmt)))

    def parallel(self, phase: Phase) -> bool:
        return any(self.is_prange(s) for s in phase.statements)

    def holds_phases(self, body: Sequence[ast.stmt]) -> bool:
        """Whether a loop's body holds a parallel loop or a temporary at its top level (or in a loop there
        that does): then the loop is the plan's, else it is sequential code of one kernel."""
        for stmt in body:
            if self.is_prange(stmt):
                return True
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and self.allocation(stmt.value):
                return True
            if isinstance(stmt, ast.For) and self.is_range(stmt.iter) and self.holds_phases(stmt.body):
                return True
        return False

    def is_prange(self, stmt: ast.stmt) -> bool:
        return isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Call) and \
            self.resolve(stmt.iter.func) is pylang.prange

    def is_range(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.resolve(node.func) is range and not node.keywords

    def allocation(self, call: ast.Call) -> str | None:
        kind = _allocation(call)
        return kind if kind is not None and self.resolve(call.func) is getattr(np, kind) else None

    def pure(self, node: ast.expr) -> bool:
        """Whether ``node`` computes a scalar from sizes and scalars alone (no array element, no call but
        ``len``, ``min``, ``max``, ``abs``, ``int``, ``float``, ``round``)."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Subscript) and not (isinstance(inner.value, ast.Attribute)
                                                         and inner.value.attr == "shape"):
                return False
            if isinstance(inner, ast.Call) and self.resolve(inner.func) not in _HOST_CALLS:
                return False
            if isinstance(inner, (ast.Lambda, ast.NamedExpr, ast.ListComp, ast.GeneratorExp, ast.Await)):
                return False
        return True

    def resolve(self, node: ast.expr) -> Any:
        """What a callee names in the function's globals (None where it is not a global or an attribute of
        one)."""
        if isinstance(node, ast.Name):
            return self.source.names.get(node.id, getattr(__builtins__, node.id, None) if not isinstance(
                __builtins__, dict) else __builtins__.get(node.id))
        if isinstance(node, ast.Attribute):
            owner = self.resolve(node.value)
            return getattr(owner, node.attr, None) if owner is not None else None
        return None


def _copy(node: ast.stmt) -> ast.stmt:
    return copy.deepcopy(node)


def _allocation(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name if name in ALLOCATIONS else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def refusal(source: Source, name: str, node: ast.AST, what: str) -> KernelSyntaxError:
    """``what`` is wrong with ``node`` of a jitted function: the error names its file and line and shows the
    code."""
    code = " ".join(ast.unparse(node).split())
    shown = code if len(code) <= 80 else code[:77] + "..."
    return KernelSyntaxError(f"{source.file}:{getattr(node, 'lineno', source.node.lineno)}: {what}: `{shown}`",
                             kernel=name, stage="translate", value=shown)


def loaded(nodes: Iterable[ast.AST]) -> list[str]:
    """The names ``nodes`` read, in order of first use."""
    found: dict[str, None] = {}
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                found.setdefault(inner.id, None)
    return list(found)


def statement(code: str, at: ast.AST) -> ast.stmt:
    """One statement svod adds to a phase, placed (for errors) at ``at``."""
    statement = ast.parse(code).body[0]
    for inner in ast.walk(statement):
        ast.copy_location(inner, at)
    return statement


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
            self.visit(node.target)
            for stmt in [*node.body, *node.orelse]:
                self.visit(stmt)

    for node in nodes:
        Reads().visit(node)
    return found


def _nodes(item: Item) -> list[ast.AST]:
    if isinstance(item, Phase):
        return list(item.statements)
    if isinstance(item, Definition):
        return [item.statement]
    if isinstance(item, Temporary):
        return [item.call]
    return list(item.bounds)


def _flat(items: Sequence[Item]) -> list[Item]:
    return [inner for item in items for inner in ([item, *_flat(item.body)] if isinstance(item, Loop) else [item])]


def carried(structure: Structure, reader: Reader) -> set[str]:
    """The scalars a phase computes (sequential code's locals, a parallel loop's reductions) that another
    part of the function reads or returns: each lives in a one-element plan buffer between phases."""
    items = _flat(structure.items)
    made: dict[int, set[str]] = {}
    for position, item in enumerate(items):
        if isinstance(item, Phase):
            parallel = [st for st in item.statements if reader.is_prange(st)]
            made[position] = set().union(*(reader.reductions(st) for st in parallel)) if parallel \
                else stored(item.statements)
        elif isinstance(item, Definition):
            made[position] = {item.name}
    found: set[str] = set()
    for position, names in made.items():
        others = set(structure.returns).union(*(needs(_nodes(item)) for other, item in enumerate(items)
                                                if other != position and not isinstance(item, Loop)))
        found |= names & others
    phases_make = set().union(*(names for position, names in made.items() if isinstance(items[position], Phase)))
    return found & phases_make


def stores_elements(nodes: Iterable[ast.AST], reader: Reader) -> bool:
    """Whether ``nodes`` store into an array's element (or call an atomic on one)."""
    atomics = (pylang.atomic_add, pylang.atomic_max, pylang.atomic_min)
    return any((isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Store))
               or (isinstance(inner, ast.Call) and reader.resolve(inner.func) in atomics)
               for node in nodes for inner in ast.walk(node))


def stored(nodes: Iterable[ast.AST]) -> set[str]:
    return {inner.id for node in nodes for inner in ast.walk(node)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}
