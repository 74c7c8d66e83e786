"""What the array rewriting (``svod.frontend.arrays``) computes on the host before a run, and the scalars whose
values it decided something by: a slice's bound, a shape, an operand whose value NumPy's promotion or its refusal
of an out-of-range int reads (``Scalar.sample``), and those the host computed them from. A jitted function reads
its variant again for another value of an int among them only (``svod.frontend.jit``); any other int is a value
each run of the plan passes.
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from svod.frontend import extents
from svod.frontend.array_exprs import SAMPLED, Expr, types_once
from svod.frontend.nodes import copied, walk
from svod.frontend.rebinding import HostShape
from svod.frontend.source import Source


class HostValues:
    """``ArrayRewriter``'s computations on the host, each recording the scalars it reads where a value decides."""

    source: Source
    arrays: dict[str, Expr]
    host: dict[str, Any]
    outer: dict[str, Any]
    sampled: set[str]
    """The names of the scalars whose values the rewriting decided something by, with their ``origins``."""
    origins: dict[str, set[str]]
    """The host's scalars each scalar the host remembers (``remember_scalar``) was computed from, over every
    assignment of its name."""
    stand_ins: dict[str, tuple[Any, ...]]
    """For a scalar whose value only the run knows (``p = n[0]``), a zero of each type the assignments of its name
    give (a NumPy scalar is strong under NEP 50, a Python number weak), in the order first met; none where the host
    cannot tell the type of one."""

    def on_host(self, node: ast.expr, prototypes: bool = False) -> Any:
        """``node`` computed now, on the host: the function's globals, the scalar arguments, the scalars so far,
        and the shapes and dtypes of the arrays (arguments and those made so far) — never their elements, which
        only the run knows (each array stands for itself by its shape; with ``prototypes``, as an array of its
        shape and dtype that the ``_like`` allocations take, reading zeros). The scalars it reads, and those
        they were computed from, are recorded (``sampled``): the rewriting reads their values."""
        self.sampled |= self.origins_of(names(node))
        return self.computed(node, prototypes)

    def computed(self, node: ast.expr, prototypes: bool = False) -> Any:
        """``on_host``'s value, the scalars it reads not recorded: a scalar's sample, recorded where a decision
        reads it (``Scalar.sample``), or a scalar the host remembers (``remember_scalar``)."""
        static = {name: value for name, value in self.arrays.items()
                  if name not in self.host and extents.is_static(value.shape)}
        made = {name: np.broadcast_to(np.zeros((), value.dtype), extents.numbers(value.shape)) if prototypes else
                HostShape(extents.numbers(value.shape), value.dtype) for name, value in static.items()}
        return eval(compile(ast.Expression(node), self.source.file, "eval"), self.outer, {**made, **self.host})

    def origins_of(self, names: set[str]) -> set[str]:
        """``names`` and the names of the host's scalars each was computed from (``origins``)."""
        found = set(names)
        for name in names:
            found |= self.origins.get(name, set())
        return found

    def remember_scalar(self, name: str, node: ast.expr, straight: bool = False) -> None:
        """The value of scalar ``name``, assigned ``node``, where the host computes it (forgotten where not),
        and what it was computed from: recorded where a decision reads it. ``straight``: the assignment is in the
        function's own body (in no loop or branch), so every later statement reads its value and type."""
        self.origins.setdefault(name, set()).update(self.origins_of(names(node)))
        try:
            self.host[name] = self.computed(node)
        except Exception:
            self.host.pop(name, None)
        self.remember_stand_in(name, self.stand_in(node), straight)

    def remember_stand_in(self, name: str, stand_ins: tuple[Any, ...], straight: bool = False) -> None:
        """``stand_ins`` (``stand_ins``) for scalar ``name``, joining those of its earlier assignments: where they
        differ in type the host does not know which the run reads. Unknown (none) where one assignment's is. An
        assignment ``straight`` in the function's body replaces the earlier ones' (``remember_scalar``)."""
        if straight:
            self.stand_ins.pop(name, None)
        known = self.stand_ins.get(name, stand_ins) if stand_ins else ()
        self.stand_ins[name] = types_once((*known, *stand_ins)) if known else ()

    def stand_in(self, node: ast.expr) -> tuple[Any, ...]:
        """A zero of each type scalar ``node`` may compute at run time, the arrays' elements read as zeros of their
        dtypes and each name of several types (``stand_ins``) read as each of them: what NumPy's promotion reads
        of an operand whose value only the run knows. None where the host cannot tell (a name of unknown type, a
        name it does not know, too many combinations of types)."""
        made = {name: np.zeros([n if isinstance(n, int) else 1 for n in value.shape], value.dtype)
                for name, value in self.arrays.items() if name not in self.host}
        read = sorted(names(node) & {name for name, types in self.stand_ins.items() if types} - set(made))
        choices = [self.stand_ins[name] for name in read]
        ways = _each_way(node, set(self.host) - set(made))
        if len(ways) * math.prod(len(c) for c in choices) > _MOST_COMBINATIONS:
            return ()
        found: list[Any] = []
        for way, chosen in itertools.product(ways, itertools.product(*choices)):
            try:
                with np.errstate(all="ignore"):
                    value = eval(compile(ast.Expression(way), self.source.file, "eval"), self.outer,
                                 {**dict(zip(read, chosen, strict=True)), **made, **self.host})
            except Exception:
                return ()
            if isinstance(value, np.ndarray) and value.ndim == 0:
                value = value[()]
            if not isinstance(value, (bool, int, float, complex, np.generic)):
                return ()
            found.append(type(value)(0))
        return types_once(tuple(found))

    def remember_stand_ins_within(self, stmt: ast.stmt) -> None:
        """The types the scalars a loop or an if statement ``stmt`` assigns may have in it and after it
        (``stand_ins``): a loop's first turn sees those of before it, a later one those its body assigned, and
        after an if either branch's; found by reading the assignments until none adds a type."""
        for loop in walk(stmt):  # a range's variable: a Python int
            if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call):
                self.stand_ins.setdefault(loop.target.id, (0,))
        assignments = [found for inner in walk(stmt) if (found := _scalar_assignment(inner)) is not None
                       and found[0] not in self.arrays]
        known = self.host
        self.host = {name: value for name, value in known.items() if name not in {a[0] for a in assignments}}
        try:  # (a name it assigns holds, in it, any of its types, not the value the host knew before it)
            while True:
                before = dict(self.stand_ins)
                for name, value in assignments:
                    types = self.stand_in(value)
                    if types:
                        self.remember_stand_in(name, types)
                if self.stand_ins == before:
                    return
        finally:
            self.host = known


_MOST_COMBINATIONS = 64
"""The most combinations of the types of the names a scalar reads that ``stand_in`` tries."""


def _each_way(node: ast.expr, known: set[str]) -> list[ast.expr]:
    """``node`` with each ``a if c else b`` in it replaced by ``a`` or by ``b``, each ``a or b`` (``and``) by one
    of its operands, and each ``max(a, b)`` (``min``) by one of its arguments, every way: the value's type may be
    either's, whichever the run chooses (Python's ``max(np.int64(5), 2.5)`` is the int64, ``max(np.int64(1),
    2.5)`` the float). A choice by values the host knows (``known``: the plan is made for them) is the host's."""
    walked = list(walk(node))
    position = next((k for k, inner in enumerate(walked) if _options(inner) and not names(
        inner.test if isinstance(inner, ast.IfExp) else inner) <= known), None)
    if position is None:
        return [node]
    ways: list[ast.expr] = []
    for option in range(len(_options(walked[position]))):
        made = copied(node)
        chosen = list(walk(made))[position]  # (the walk's order is the copy's too)
        picked = _options(chosen)[option]
        ways += _each_way(picked if chosen is made else _replaced(made, chosen, picked), known)
        if len(ways) > _MOST_COMBINATIONS:
            break
    return ways


def _options(node: ast.AST) -> list[ast.expr]:
    """The values ``node`` chooses its own from, where it is such a choice (``_each_way``); else none."""
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min") and \
            len(node.args) >= 2 and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
        return list(node.args)
    return []


def _replaced(node: ast.expr, old: ast.AST, new: ast.expr) -> ast.expr:
    """``node`` with its subtree ``old`` replaced by ``new`` (in place)."""
    for parent in walk(node):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
            elif isinstance(value, list) and any(item is old for item in value):
                setattr(parent, field, [new if item is old else item for item in value])
    return node


def _scalar_assignment(stmt: ast.AST) -> tuple[str, ast.expr] | None:
    """The name and value ``stmt`` assigns where it binds one name (``s = e``, ``s += e`` as ``s + e``)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, updated(stmt.target.id, stmt.op, stmt.value)
    return None


def updated(name: str, op: ast.operator, value: ast.expr) -> ast.expr:
    """The value ``name op= value`` assigns ``name``: ``name op value``."""
    made = ast.BinOp(ast.copy_location(ast.Name(name, ast.Load()), value), op, value)
    return ast.fix_missing_locations(ast.copy_location(made, value))


@contextmanager
def decisions_recorded(values: HostValues) -> Iterator[None]:
    """Within it, the names a decision reads of a scalar's sample (``Scalar.sample``) join ``values.sampled``,
    with their origins."""
    decided: set[str] = set()
    token = SAMPLED.set(decided)
    try:
        yield
    finally:
        SAMPLED.reset(token)
        values.sampled |= values.origins_of(decided)


def names(node: ast.AST) -> set[str]:
    """The names ``node`` reads or binds."""
    return {inner.id for inner in walk(node) if isinstance(inner, ast.Name)}


__all__ = ["HostValues", "decisions_recorded", "names", "updated"]
