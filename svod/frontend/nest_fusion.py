"""Consecutive ``prange`` nests of an ``@svod.jit`` function run as one kernel, and a host loop around one nest
inside it, where that keeps the Python's meaning (``fused_nests``, after ``svod.frontend.arrays`` has written
the array statements as nests).

Each array statement becomes a nest of its own, and a loop's turn of a stencil written as NumPy (npbench's
vadv: ``gav = -0.25 * (...)``, ``acol = gav * BET_P``, ``bcol = dtr - acol - ccol[:, :, k]``, ...) is a dozen
launches, each streaming its operands through memory again. numba's parfors fuse such neighbours; so does this.

Two nests over the same ranges (compared as written, the second's variables renamed as the first's) run as
one, the second's statements after the first's in each work item, where

- every array either stores into is used by both, at every use, as an element whose index has each of the
  nest's variables alone as one of its parts, at the same place in every use: distinct work items then touch
  distinct elements of it, and one work item's statements run in the order written, so each reads what the
  Python would have it read (``ccol[a, b, k - 1]`` beside ``ccol[a, b, k]`` qualifies; ``x[a + 1]`` does not);
- the innermost statements are straight-line code (no loop: a reduction or a product keeps the kernel of its
  own that its lowering recognises), neither binds a name the other reads, and every call is pure (a math
  function, a conversion: no draw, whose order would change);
- only allocations of names the first nest does not use stand between them: they move before it;
- where the device limits the buffers a kernel takes (WebGPU), the fused nest names no more arrays and scalars
  than that (``Limits``).

A host loop whose turn is one such nest (``for j in range(2, n): y[:, j] = a * x[:, j] + b * y[:, j - 1]``, a
recurrence along rows; vadv's sweep once its turn is fused) runs inside it, each work item taking every turn
for its own elements in order (``_Fusion.sunk``): one kernel, not a launch a turn, and each work item walks its
own row. The same rule makes that right: across all turns, distinct work items touch distinct elements of what
the nest writes.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.device.caps import DeviceCaps
from svod.frontend import pylang
from svod.frontend.accumulating import PURE_BUILTINS
from svod.frontend.accumulations import LEAVING, element_uses, names, stored_arrays
from svod.frontend.array_exprs import KEY_NAMES
from svod.frontend.array_math import MATH_HELPERS
from svod.frontend.names import renamed, stored
from svod.frontend.nodes import walk
from svod.frontend.phases import resolve, scalar_type
from svod.frontend.temporaries import ALLOCATIONS

__all__ = ["Limits", "fused_nests"]

_PURE = (*(getattr(builtins, name) for name in PURE_BUILTINS), *MATH_HELPERS.values(), *KEY_NAMES.values())
"""The builtins and svod's helpers that fused statements may call: each computes from its arguments alone."""


@dataclass(frozen=True)
class Limits:
    """What a device's kernels may not exceed, which fused nests keep to."""

    operands: int | None = None
    """The most buffers a kernel takes (``DeviceCaps.max_buffers``): a fused nest names no more arrays and
    scalars (each counted, as one the plan carries between kernels is a buffer)."""
    loop_turns: int | None = None
    """The turns after which the device ends a work item's loops (``DeviceCaps.max_loop_turns``): where it has
    such a limit, no host loop is sunk into a kernel."""
    threads: int | None = None
    """The host threads that run a kernel's work items, where the device is the host's CPU (``DeviceCaps.threads``);
    None for a device of many work items (``svod.frontend.shared_products`` is for the first)."""

    @staticmethod
    def of(caps: DeviceCaps) -> Limits:
        return Limits(caps.max_buffers, caps.max_loop_turns, caps.threads if caps.host_memory else None)


@dataclass(frozen=True)
class _Nest:
    """``for v0 in prange(..): for v1 in prange(..): <body>``: the statement, its variables and ranges."""

    statement: ast.For
    variables: tuple[str, ...]
    ranges: tuple[ast.expr, ...]
    body: list[ast.stmt]


def fused_nests(function: ast.FunctionDef, values: Mapping[str, Any], limits: Limits) -> list[ast.stmt]:
    """``function``'s body with its consecutive nests fused, and host loops around one nest sunk into it, where
    the module says; ``values`` the global names' values."""
    return _Fusion(function, values, limits).body(function.body)


class _Fusion:
    def __init__(self, function: ast.FunctionDef, values: Mapping[str, Any], limits: Limits) -> None:
        self.function, self.values, self.limits = function, values, limits

    def body(self, body: Sequence[ast.stmt]) -> list[ast.stmt]:
        """``body`` with its consecutive nests fused, and its loops' bodies in turn."""
        out: list[ast.stmt] = []
        last: tuple[int, _Nest] | None = None  # the latest nest in ``out``, its place, while only movable follow
        for written in body:
            made = self.inside(written)
            nest = _nest(made, self.values)
            if nest is not None and last is not None:
                at, previous = last
                between = out[at + 1:]
                movable = all(_movable(s, previous, self.values) for s in between)
                joined = self.joined(previous, nest) if movable else None
                if joined is not None:
                    out[at:] = [*between, joined.statement]
                    last = len(out) - 1, joined
                    continue
            out.extend(made if isinstance(made, list) else [made])
            if nest is not None:
                last = len(out) - 1, nest
            elif isinstance(made, list) or not _movable(made, None, self.values):
                last = None
        return out

    def inside(self, stmt: ast.stmt) -> ast.stmt | list[ast.stmt]:
        """``stmt`` with the statements of the host code it holds (a loop's, an ``if``'s) fused in turn, and a
        host loop around one nest sunk into it (``sunk``)."""
        if not isinstance(stmt, (ast.For, ast.While, ast.If)) or _nest(stmt, self.values) is not None:
            return stmt
        made = with_blocks(stmt, self.body)
        if isinstance(stmt, ast.For) and isinstance(made, ast.For):
            return self.sunk(stmt, made) or made
        return made

    def sunk(self, written: ast.For, loop: ast.For) -> list[ast.stmt] | None:
        """``for j in range(..): <allocations>; <nest>`` as ``<allocations>; for v in prange(..): for j in
        range(..): <the nest's statements>``: each work item runs every turn of its own elements in order, which
        is what the turns did where the nest's items are apart across turns too (every array it writes used at
        the nest's variables alone, as for fusion); its allocations (``np.empty``) made once; None where that
        is not so, where the loop's variable is read after the loop (``dead_after``), or where its bounds are not
        sizes (``sized``): a loop whose count the run passes or computes (``range(n[0])``) stays the plan's,
        which checks the values its variable takes before the turns; a kernel's loop would take any count."""
        if self.limits.loop_turns is not None or not isinstance(loop.target, ast.Name) or loop.orelse \
                or not isinstance(loop.iter, ast.Call) or loop.iter.keywords \
                or resolve(self.values, loop.iter.func) is not range \
                or not all(self.sized(bound, self.sizes) for bound in loop.iter.args):
            return None
        statements = [s for s in loop.body if not isinstance(s, ast.Pass)]
        if not statements:
            return None
        *allocations, last = statements
        nest = _nest(last, self.values)
        if nest is None or not all(allocation(s, self.values, ("empty", "empty_like")) for s in allocations):
            return None
        allocated = {s.targets[0].id for s in allocations if isinstance(s, ast.Assign)
                     and isinstance(s.targets[0], ast.Name)}
        if any(self.bindings[name] != 1 for name in allocated):
            return None  # made once before the loop, it would replace another array where the loop never turns
        j, writes = loop.target.id, set(stored_arrays(nest.body)) | stored(nest.body) | allocated
        if j in stored(nest.body) | set(nest.variables) or _values_read(*nest.ranges) & (writes | {j}) \
                or any(names(s) & (writes - allocated | {j}) for s in allocations):
            return None
        if not self.independent(nest.body, nest.variables) or not self.dead_after(written, j):
            return None
        turns = ast.copy_location(ast.For(loop.target, loop.iter, nest.body, [], None), loop)
        return [*allocations, _nested(nest, [turns])]

    @functools.cached_property
    def bindings(self) -> Counter[str]:
        """How many times the function binds each name, a parameter's binding by the call counted."""
        bound = (n.id for n in walk(self.function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        return Counter([*bound, *(a.arg for a in walk(self.function.args) if isinstance(a, ast.arg))])

    @functools.cached_property
    def sizes(self) -> frozenset[str]:
        """The names the function binds once, at its top level, to a size (``sized``: ``n = a.shape[0] - 1``)."""
        found: set[str] = set()
        for stmt in self.function.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and self.bindings[stmt.targets[0].id] == 1 and self.sized(stmt.value, found):
                found.add(stmt.targets[0].id)
        return frozenset(found)

    def sized(self, expr: ast.expr, sizes: Collection[str]) -> bool:
        """Whether ``expr`` is a size: int constants, names of ``sizes``, and the shapes, lengths and sizes of
        arrays the function binds once at most, under ``+ - * //``, ``min`` and ``max``; a number the arrays'
        memory bounds, which no value the run passes or computes sets."""
        if isinstance(expr, ast.Constant):
            return type(expr.value) is int
        if isinstance(expr, ast.Name):
            return expr.id in sizes
        if isinstance(expr, ast.Subscript):
            return self.sized(expr.value, sizes) and isinstance(expr.slice, ast.Constant)
        if isinstance(expr, ast.Attribute):
            return expr.attr in ("shape", "size", "ndim") and self.fixed(expr.value)
        if isinstance(expr, ast.BinOp):
            return isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)) \
                and self.sized(expr.left, sizes) and self.sized(expr.right, sizes)
        if isinstance(expr, ast.UnaryOp):
            return isinstance(expr.op, ast.USub) and self.sized(expr.operand, sizes)
        if isinstance(expr, ast.Call) and not expr.keywords:
            callee = resolve(self.values, expr.func)
            if callee is len:
                return len(expr.args) == 1 and self.fixed(expr.args[0])
            return (callee is min or callee is max) and all(self.sized(a, sizes) for a in expr.args)
        return False

    def fixed(self, expr: ast.expr) -> bool:
        """Whether ``expr`` names an array the function binds once (a parameter, a temporary): of one shape."""
        return isinstance(expr, ast.Name) and self.bindings[expr.id] == 1

    def joined(self, first: _Nest, second: _Nest) -> _Nest | None:
        """``first`` and ``second`` as one nest (see the module), or None where that would change what they do."""
        if len(first.variables) != len(second.variables):
            return None
        own = set(first.variables)
        if (names(second.statement) & own) - set(second.variables):
            return None  # the second reads a name the renaming would capture
        renaming = dict(zip(second.variables, first.variables, strict=True))
        second = _nest(renamed(second.statement, renaming), self.values)  # type: ignore[assignment]
        assert second is not None
        if [ast.dump(r) for r in first.ranges] != [ast.dump(r) for r in second.ranges]:
            return None
        both = [*first.body, *second.body]
        if stored(first.body) & names(*second.body) or stored(second.body) & names(*first.body) \
                or own & stored(both) or set(stored_arrays(both)) & _values_read(*first.ranges):
            return None
        operands = self.limits.operands
        if operands is not None and len(names(*both) - stored(both) - own - set(self.values)) > operands:
            return None
        return _Nest(_nested(first, both), first.variables, first.ranges, both) \
            if self.independent(both, first.variables) else None

    def independent(self, body: list[ast.stmt], variables: Sequence[str]) -> bool:
        """Whether the work items of ``body`` over ``variables`` touch distinct elements of what it writes, and
        its calls are pure (no draw, whose order would change)."""
        calls = [n for stmt in body for n in walk(stmt) if isinstance(n, ast.Call)]
        return all(_pure(c, self.values) for c in calls) \
            and all(_apart(body, array, variables) for array in stored_arrays(body))

    def dead_after(self, loop: ast.For, variable: str) -> bool:
        """Whether no statement reads the value ``loop`` leaves in ``variable``: every other use of the name is
        inside a loop that binds it first (``for variable in ...``, its range not reading it) and is not around
        ``loop`` (whose variable, a host loop's, the kernel may not bind), and it is no parameter."""
        if variable in {a.arg for a in walk(self.function.args) if isinstance(a, ast.arg)}:
            return False
        skipped: set[int] = set()
        for node in walk(self.function):
            if node is loop or (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                                and node.target.id == variable and variable not in names(node.iter)):
                inside = {id(inner) for inner in walk(node)}
                if node is not loop and id(loop) in inside:
                    return False
                skipped |= inside
        return not any(isinstance(n, ast.Name) and n.id == variable and id(n) not in skipped
                       for n in walk(self.function))


def _values_read(*nodes: ast.expr) -> set[str]:
    """The names ``nodes`` read the values of: not an array whose shape alone they read (``x.shape[0]``)."""
    shapes = {id(n.value) for node in nodes for n in walk(node)
              if isinstance(n, ast.Attribute) and n.attr in ("shape", "ndim", "size") and isinstance(n.value, ast.Name)}
    return {n.id for node in nodes for n in walk(node) if isinstance(n, ast.Name) and id(n) not in shapes}


def with_blocks(stmt: ast.For | ast.While | ast.If, rewrite: Callable[[list[ast.stmt]], list[ast.stmt]]) -> ast.stmt:
    """A copy of ``stmt`` whose body and ``else`` are ``rewrite``'s of its own."""
    made = copy.copy(stmt)
    made.body, made.orelse = rewrite(stmt.body), rewrite(stmt.orelse)
    return made


def _nest(stmt: ast.stmt | list[ast.stmt], values: Mapping[str, Any]) -> _Nest | None:
    """``stmt`` read as a nest of ``prange`` loops around straight-line statements; None where it is not."""
    if isinstance(stmt, list):
        return None
    variables: list[str] = []
    ranges: list[ast.expr] = []
    node: ast.stmt = stmt
    while is_prange(node, values):
        assert isinstance(node, ast.For) and isinstance(node.target, ast.Name)
        variables.append(node.target.id)
        ranges.append(node.iter)
        if len(node.body) != 1 or not is_prange(node.body[0], values):
            break
        node = node.body[0]
    if not variables:
        return None
    assert isinstance(node, ast.For) and isinstance(stmt, ast.For)
    if any(isinstance(n, (*LEAVING, ast.For, ast.AsyncFor, ast.While, ast.With, ast.Try))
           for inner in node.body for n in walk(inner)):
        return None
    return _Nest(stmt, tuple(variables), tuple(ranges), node.body)


def is_prange(node: ast.stmt, values: Mapping[str, Any]) -> bool:
    return isinstance(node, ast.For) and isinstance(node.target, ast.Name) and not node.orelse \
        and isinstance(node.iter, ast.Call) and not node.iter.keywords \
        and resolve(values, node.iter.func) is pylang.prange


def _loops(nest: _Nest) -> list[ast.For]:
    loops = [nest.statement]
    while len(loops) < len(nest.variables):
        inner = loops[-1].body[0]
        assert isinstance(inner, ast.For)
        loops.append(inner)
    return loops


def _nested(first: _Nest, body: list[ast.stmt]) -> ast.For:
    """A copy of ``first``'s loops around ``body``."""
    made: list[ast.stmt] = body
    for loop in reversed(_loops(first)):
        made = [ast.copy_location(ast.For(loop.target, loop.iter, made, [], None), loop)]
    assert isinstance(made[0], ast.For)
    return made[0]


def _apart(region: Sequence[ast.stmt], array: str, variables: Sequence[str]) -> bool:
    """Whether every use of ``array`` in ``region`` is an element whose index has each variable alone as one
    of its parts, at the same place in every use (distinct work items, distinct elements)."""
    uses = element_uses(region, array)
    if uses is None:
        return False
    places = set()
    for use in uses:
        parts = use.slice.elts if isinstance(use.slice, ast.Tuple) else [use.slice]
        places.add(tuple(next((p for p, part in enumerate(parts) if isinstance(part, ast.Name) and part.id == v), -1)
                         for v in variables))
    return len(places) == 1 and -1 not in next(iter(places))


def _movable(stmt: ast.stmt, before: _Nest | None, values: Mapping[str, Any]) -> bool:
    """Whether ``stmt`` is an allocation (or ``pass``) that may run before the nest ``before`` instead of after
    it: ``before`` neither uses the name it binds nor stores into what its arguments read."""
    if isinstance(stmt, ast.Pass):
        return True
    if not allocation(stmt, values):
        return False
    assert isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
    return before is None or (stmt.targets[0].id not in names(before.statement)
                              and not names(stmt.value) & set(stored_arrays([before.statement])))


def allocation(stmt: ast.stmt, values: Mapping[str, Any], kinds: Sequence[str] = ALLOCATIONS) -> bool:
    """Whether ``stmt`` is ``name = np.<kind>(...)`` of one of ``kinds``."""
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
        and isinstance(stmt.value, ast.Call) and any(resolve(values, stmt.value.func) is getattr(np, kind)
                                                     for kind in kinds)


def _pure(call: ast.Call, values: Mapping[str, Any]) -> bool:
    """Whether ``call`` computes a value from its arguments alone (a math function, a conversion)."""
    callee = resolve(values, call.func)
    if callee is None:
        return False
    if isinstance(callee, (np.ufunc, pylang.Cast)) or any(callee is f for f in _PURE):
        return True
    if scalar_type(callee):
        return True
    return getattr(math, getattr(callee, "__name__", ""), None) is callee
