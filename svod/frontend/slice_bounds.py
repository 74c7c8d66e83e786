"""The numbers a slice takes in ``@svod.jit``'s array statements (``svod.frontend.arrays``): its bounds and an
index, each a number the host knows before the run or an extent (``svod.frontend.extents``) of those and of
the variables of the loops around the statement (``C[i, :i + 1]``: the values each loop gives its variable,
found where a slice first reads it) and, inside a ``prange``, of elements the work item reads
(``A_val[A_row[i]:A_row[i + 1]]``), which it computes once into a local of its own (``held``). An index of an
axis whose length only the run knows is one svod proves within it.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import Emitter, Expr, Scalar
from svod.frontend.array_loops import RUN_LENGTH
from svod.frontend.array_stats import ArrayStatistics
from svod.frontend.extents import Dim, node_of
from svod.frontend.names import written
from svod.frontend.nodes import assign, constant, load, placed, walk
from svod.frontend.phases import Reader


class SliceBounds(ArrayStatistics):
    """The functions of this module, as the statements' ``ArrayRewriter`` calls them."""

    reader: Reader
    counter: itertools.count[int]
    pending: list[ast.stmt]
    at: ast.stmt
    level: int
    work: list[ast.For]
    held_bounds: tuple[dict[Dim, Dim], int]
    variables: dict[str, Dim | LoopTurns]
    stale: dict[str, str]
    described: dict[str, str]
    counting_loops: dict[str, str]
    """The loop variables that count up to a length the run carries (``svod.frontend.shrinking``)."""
    host: dict[str, Any]
    origins: dict[str, set[str]]
    rebound: frozenset[str]
    """The names the function assigns anywhere (``stored``)."""
    ranged: dict[str, tuple[int, int]]
    """The int arguments that index an axis as they are (``passed_index``): the least and greatest value the
    plan runs with."""

    def held(self, value: Dim) -> Dim:
        """Inside a ``prange``, a slice's start or length that reads memory (``A_row[i]``), computed once into a
        local of the work item, before the statement (and read again by the statements after it that slice
        alike, where it stands at the top of the loop's body)."""
        if isinstance(value, int) or not self.work or \
                not any(isinstance(n, ast.Subscript) for n in walk(value.node())):
            return value
        known, depth = self.held_bounds
        if self.level == depth and value in known:
            return known[value]
        name = f"_svod_b{next(self.counter)}"
        self.pending += placed([assign(name, value.node())], self.at)
        made = extents.variable(name, name, value.low, value.high)
        if self.level == depth:
            known[value] = made
        return made

    def work_item(self, at: ast.AST) -> tuple[list[Dim], list[ast.expr]]:
        """The lengths of the ``prange`` loops around the statement, and each loop's position of its work item
        (what an array made once for every work item is indexed by)."""
        lengths: list[Dim] = []
        positions: list[ast.expr] = []
        for loop in self.work:
            assert isinstance(loop.iter, ast.Call) and isinstance(loop.target, ast.Name)  # (a prange loop)
            bounds = [self.bound(a) for a in loop.iter.args]
            start, stop = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
            lengths.append(extents.maximum(extents.sub(stop, start), 0))
            positions.append(load(loop.target.id) if isinstance(start, int) and start == 0 else
                             ast.BinOp(load(loop.target.id), ast.Sub(), node_of(start)))
        return lengths, positions

    def index(self, node: ast.Subscript, item: ast.expr, axis: int, size: Dim) -> ast.expr:
        """An integer index of axis ``axis`` (of ``size`` elements): checked now where the host knows it; one of
        an axis whose length it does not know must be proven in it (NumPy raises past its end)."""
        index = self.value(item)
        if isinstance(index, Expr):
            raise self.refuse(node, "indexing with an array (a gather) is a prange loop's work; write one")
        passed = self.passed_index(item, size)
        if passed is not None:
            return passed
        known = self.host_int(item, required=False)
        if isinstance(size, int):
            if known is not None and not -size <= known < size:
                raise self.refuse(node, f"index {known} is out of bounds for axis {axis} of size {size}")
            return constant(known % size) if known is not None else index.node
        if isinstance(item, ast.Name) and size == _run_length(self.counting_loops.get(item.id), size):
            return index.node  # (a variable of a loop over this length, which the run carries)
        at: Dim | None = known
        if at is None:
            try:
                at = self.bound(item)
            except KernelSyntaxError:
                at = None
        if at is not None and extents.low(at) < 0 and extents.high(at) < 0:
            at = extents.add(size, at)  # counted from the end
        if at is None or extents.low(at) < 0 or not extents.at_most(extents.add(at, 1), size):
            raise self.refuse(node, f"index `{ast.unparse(item)}` may be out of bounds for axis {axis}, whose length "
                                    f"`{size}` is known only at run time (NumPy raises there); svod takes an index it "
                                    "can prove within such an axis")
        return node_of(at)

    def passed_index(self, item: ast.expr, size: Dim) -> ast.expr | None:
        """An int argument of the call the function never rebinds, indexing an axis of a length the host knows
        (``u[:, t]``, ``x[i, k]``), within it: read at run time, as ``t``, or ``t + size`` where it counts from
        the end, so one plan runs every value on its side of zero that is within every axis it indexes
        (``ranged``, which the call's dispatcher checks) and a loop that calls with ``t`` of each turn makes
        one plan, not one a turn. None for any other index."""
        if not (isinstance(item, ast.Name) and isinstance(size, int) and item.id in self.host and
                item.id not in self.origins and item.id not in self.rebound):
            return None
        value = self.host[item.id]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or \
                not -size <= value < size:
            return None
        low, high = (0, size - 1) if value >= 0 else (-size, -1)
        known = self.ranged.get(item.id, (low, high))
        self.ranged[item.id] = (max(low, known[0]), min(high, known[1]))
        name = ast.copy_location(load(item.id), item)
        return name if value >= 0 else ast.BinOp(name, ast.Add(), constant(size))

    @contextmanager
    def loop_variable(self, stmt: ast.For) -> Iterator[None]:
        """Rewrite ``stmt``'s body knowing its variable (``variables``), unless the body assigns it. Arrays the
        body binds to a name whose length or place reads the variable are stale once the loop ends
        (``stale``)."""
        name = stmt.target.id if isinstance(stmt.target, ast.Name) else None
        if name is None:
            yield
            return
        self.host.pop(name, None)  # the loop's, not a scalar of the host's of that name
        self.variables.pop(name, None)
        if not _assigns(stmt.body, name):
            self.variables[name] = LoopTurns(stmt, dict(self.variables))
        before = dict(self.arrays)
        try:
            yield
        finally:
            self.variables.pop(name, None)
            for array, value in self.arrays.items():
                if before.get(array) is not value and _reads_name(value, name):
                    self.stale[array] = f"{array} is made in the loop at line {stmt.lineno}, and its shape or " \
                                        f"place depends on that loop's variable {_variable(self.described, name)}: " \
                                        "read it inside the loop"

    def variable(self, name: str, whole: ast.expr) -> Dim:
        """Loop variable ``name`` as an extent: the values its ``range`` gives it, found where a slice first
        reads it (so a plan is made for the scalar arguments a loop's bounds read only where a slice needs
        them)."""
        known = self.variables[name]
        if isinstance(known, LoopTurns):
            outer, self.variables = self.variables, known.outer
            try:
                values = self.turns(known.loop)
            finally:
                self.variables = outer
            if values is None:
                raise self.refuse(whole, f"a slice's bound reads {name}, a loop's variable whose values svod does not "
                                         "know before the run (its range's bounds are numbers the host knows or "
                                         "expressions of enclosing loops' variables, its step a number)")
            loop = known.loop
            known = self.variables[name] = extents.variable(name, f"{name}@{loop.lineno}:{loop.col_offset}", *values)
        return known

    def turns(self, stmt: ast.For) -> tuple[int, int] | None:
        """The least and greatest value ``for x in range(...)`` (or ``prange``) gives ``x``, from the bounds'
        bounds; None where a bound is not an extent or the step is not a number the host knows."""
        call_node = stmt.iter
        if not (isinstance(call_node, ast.Call) and (self.reader.is_range(call_node) or self.reader.is_prange(stmt))
                and 1 <= len(call_node.args) <= 3 and not call_node.keywords):
            return None
        try:
            bounds = [self.bound(a) for a in call_node.args]
        except KernelSyntaxError:
            return None
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        if not isinstance(step, int) or step == 0:
            return None
        least, most = (extents.low(start), extents.high(stop) - 1) if step > 0 else \
            (extents.low(stop) + 1, extents.high(start))
        return least, max(least, most)  # (a loop that never turns: its body never reads it)

    def bound(self, node: ast.expr) -> Dim:
        """A slice's bound (or an index): a number the host knows before the run, or an integer expression of
        such numbers and the variables of the loops around the statement (``+``, ``-``, ``*`` and ``//`` by a
        number, ``min``, ``max``)."""
        known = self.host_int(node, required=False)
        if known is not None:
            return known
        return self.symbolic(node, node)

    def symbolic(self, node: ast.expr, whole: ast.expr) -> Dim:
        if isinstance(node, ast.Name) and node.id in self.stale:
            raise self.refuse(node, self.stale[node.id])
        if isinstance(node, ast.Name) and node.id in self.variables:
            return self.variable(node.id, whole)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.bound_part(node.operand, whole)
            return extents.times(inner, -1) if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left, right = self.bound_part(node.left, whole), self.bound_part(node.right, whole)
            return extents.add(left, right, 1 if isinstance(node.op, ast.Add) else -1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv)):
            left, right = self.bound_part(node.left, whole), self.bound_part(node.right, whole)
            if isinstance(node.op, ast.Mult) and (isinstance(left, int) or isinstance(right, int)):
                return extents.times(right, left) if isinstance(left, int) else extents.times(left, right)  # type: ignore[arg-type]
            if isinstance(node.op, ast.FloorDiv) and isinstance(right, int) and right > 0:
                return extents.floor_div(left, right)
        if isinstance(node, ast.Subscript) and self.work:
            read = self.element_bound(node)
            if read is not None:
                return read
        if isinstance(node, ast.Call) and self.reader.resolve(node.func) in (min, max) and len(node.args) >= 2 \
                and not node.keywords:
            parts = [self.bound_part(a, whole) for a in node.args]
            fold = extents.minimum if self.reader.resolve(node.func) is min else extents.maximum
            found = parts[0]
            for part in parts[1:]:
                found = fold(found, part)
            return found
        raise self.refuse(whole, "a slice's bound is a number the host knows before the run, or an integer "
                                 "expression of those and the variables of the loops around it (+, -, * and // by "
                                 f"a number, min, max); `{ast.unparse(node)}` is neither")

    def element_bound(self, node: ast.Subscript) -> Dim | None:
        """An element of an integer array read inside a ``prange`` (``A_row[i]``: the work item's value), as an
        atom of the dtype's range; None where ``node`` is none. The nest must not write that array, so that the
        element is one value wherever the work item reads it."""
        value = self.value(node)
        element = value.node if isinstance(value, Scalar) else None
        if not (isinstance(element, ast.Subscript) and isinstance(element.value, ast.Name)
                and element.value.id in self.arrays):
            return None
        dtype = np.asarray(value.sample).dtype
        array = element.value.id
        if dtype.kind not in "iu":
            raise self.refuse(node, f"a slice's bound is an integer; {ast.unparse(node)} is an element of a {dtype} "
                                    "array")
        if array in written([self.work[0]]):
            raise self.refuse(node, f"a slice's bound reads {array}, which the prange loop around it writes: svod "
                                    "reads such a bound from an array the loop leaves as it is")
        limits = np.iinfo(dtype)
        names = frozenset(n.id for n in walk(element) if isinstance(n, ast.Name))
        return extents.atom(f"read:{ast.dump(element)}", element, int(limits.min), int(limits.max), names)

    def bound_part(self, node: ast.expr, whole: ast.expr) -> Dim:
        known = self.host_int(node, required=False)
        return known if known is not None else self.symbolic(node, whole)

    def host_int(self, node: ast.expr, required: bool = True, numpy_bool: bool = False) -> int | None:
        """An index or bound the host computes now (a constant, a shape, a scalar argument); ``numpy_bool``: where
        NumPy reads a NumPy bool as the integer it is (``np.roll``'s shift), not as a mask."""
        try:
            value = self.on_host(node)
        except Exception as err:
            if not required:
                return None
            raise self.refuse(node, f"a slice's bounds are numbers the host knows before the run ({err})") from err
        if isinstance(value, np.bool_) and not numpy_bool:  # (NumPy's bool has no __index__; Python's is an int)
            raise self.refuse(node, "an index or a slice's bound is an integer, not a NumPy bool (NumPy reads a bool "
                                    "index as a 0-d mask, and a slice refuses it); int(...) it")
        if not isinstance(value, (int, np.integer, np.bool_)):
            if not required:
                return None
            raise self.refuse(node, "a slice's bounds are integers")
        self.read |= {n.id for n in walk(node) if isinstance(n, ast.Name)} & set(self.host)
        return int(value)


@dataclass(frozen=True)
class LoopTurns:
    """A loop's variable whose values are not found yet (``SliceBounds.variable``): its loop, and the variables
    of the loops around it as they stood there."""

    loop: ast.For
    outer: dict[str, Dim | LoopTurns]


def _run_length(name: str | None, size: Dim) -> Dim | None:
    """``size`` where it is the length of that ``name`` the run carries (``svod.frontend.shrinking``)."""
    if name is None or isinstance(size, int) or size.constant or len(size.terms) != 1:
        return None
    atom, coefficient = size.terms[0]
    return size if coefficient == 1 and atom.key == RUN_LENGTH + name else None


def _variable(described: dict[str, str], name: str) -> str:
    """A loop variable as an error shows it: the user's name, or what svod's own name stands for."""
    return f"({described[name]})" if name in described else name


def _assigns(body: Sequence[ast.stmt], name: str) -> bool:
    """Whether ``body`` assigns ``name`` (then a loop's variable holds what the body gives it, not the loop's
    value)."""
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for stmt in body for n in walk(stmt))


def _reads_name(value: Expr, name: str) -> bool:
    """Whether an element of ``value``, or its shape, reads ``name``."""
    out = Emitter(itertools.count())
    element = value.element([load(f"_svod_p{k}") for k in range(len(value.shape))], out)
    nodes = [element, *out.statements, *(node_of(d) for d in value.shape)]
    return any(isinstance(n, ast.Name) and n.id == name for node in nodes for n in walk(node))
