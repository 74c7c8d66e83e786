"""NumPy array statements of an ``@svod.jit`` function, as the loops they mean.

``B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2])`` is rewritten, for the shapes of one call, into the
``prange`` nest a numba user writes by hand, before the function is read into phases::

    for _svod_a0 in prange(998):
        for _svod_a1 in prange(998):
            B[1 + _svod_a0, 1 + _svod_a1] = 0.2 * (A[1 + _svod_a0, 1 + _svod_a1] + A[1 + _svod_a0, _svod_a1])

so every array statement is a phase that svod proves in bounds and free of races, tiles and threads as it
does a hand-written one, on every device. An expression is a lazy ``Expr`` (``svod.frontend.array_exprs``): a
shape, a dtype (NumPy's, found by applying the same operation to one-element arrays of the operands' dtypes,
so promotion is NumPy 2's), and its element at given indices; ``svod.frontend.array_values`` reads each of
the user's expressions into one. Nothing is computed into memory but what a statement stores: elementwise
operations, broadcasts, views and reductions of one statement fuse into one loop nest, a reduction
(``x.max(axis=1)``, a matmul's sum) being a loop of its own inside it, which svod's lowering computes once per
output it depends on (a row's max once per row, not once per element).

The loops are ``ast`` nodes built where they are needed (``svod.frontend.nodes``), never text parsed again,
each at the line of the user's statement it is written for; each array or value svod names (``_svod_t0``) is
recorded in the user's words (``Source.described``) for the errors that name it.

A slice's bounds may read the variables of the loops around the statement (``C[i, :i + 1]``), and inside a
``prange`` elements the work item reads (``A_val[A_row[i]:A_row[i + 1]]``): a length is then an extent
(``svod.frontend.extents``; the bounds: ``svod.frontend.slice_bounds``), its loop runs that long, two lengths
broadcast where they are provably equal, and an array made at such a length is made at the greatest and
viewed at the turn's. A ``prange`` nest's array statements become loops of its work item's own
(``parallel_nest``), arrays they make one per work item.

What a statement means is NumPy's: its right side is computed as if into a new array before the store (``A[1:]
= A[:-1] + 1`` into a temporary first: ``reads_apart``); a name bound to an array expression is a new array (a
temporary the plan makes); ``x += e`` updates ``x`` in place, in its dtype.
"""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, cast

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents, loop_widening, nodes, pylang, random_arrays
from svod.frontend.allocations import Allocations
from svod.frontend.array_calls import (
    Gathered,
    Masked,
    masked_by,
    reads_masked,
    stored_array,
    under_mask_of,
)
from svod.frontend.array_exprs import (
    KEY_NAMES,
    SIZE_ATTRIBUTES,
    AmbiguousScalarError,
    Emitter,
    Expr,
    Fused,
    Named,
    RepeatedWorkError,
    Reshaped,
    Scalar,
    Transposed,
    Value,
    Viewed,
    ambiguous_type,
    base_name,
    broadcast_element,
    computes,
    numpy,
    reads_apart,
    typed,
    unread,
)
from svod.frontend.array_fusion import names_read, recomputable
from svod.frontend.array_loops import parallel, sequential, widened
from svod.frontend.array_math import MATH_HELPERS
from svod.frontend.array_shapes import read_only
from svod.frontend.array_values import ArrayValues, broadcast_shape
from svod.frontend.compactions import Compactions
from svod.frontend.extents import Dim, node_of
from svod.frontend.histograms import KERNEL_NAMES, Histograms
from svod.frontend.host_values import HostValues, decisions_recorded, updated
from svod.frontend.linalg_calls import factored
from svod.frontend.names import renamed
from svod.frontend.names import stored as stored_names
from svod.frontend.nest_fusion import Limits, fused_nests
from svod.frontend.nodes import assign, call, code, constant, for_loop, load, placed, stands_for, stored, walk
from svod.frontend.phases import Ordering, Reader, in_range, linalg_call, runs_in_order, sorting_call
from svod.frontend.rebinding import PART_WRITTEN, Bindings, argument_bound_anew, exchanged, shrinking, viewed_names
from svod.frontend.shared_products import shared_products
from svod.frontend.shrinking import Shrinking
from svod.frontend.slice_bounds import LoopTurns
from svod.frontend.source import Source, refusal
from svod.frontend.ufunc_outs import ufunc_out, writes_out
from svod.frontend.unrolling import decided, unrolled

# ---- reading a function's array statements -----------------------------------------------------------------

class ArrayRewriter(HostValues, ArrayValues, Histograms, Compactions, Allocations, Shrinking):
    """Rewrites the array statements of one function for one call's arguments (``lower_arrays``)."""

    def __init__(self, source: Source, name: str, args: dict[str, Any], taped: bool = False) -> None:
        self.source = source
        self.taped = taped
        """Whether the rewriting is a tape's (``Emitter.everywhere``)."""
        self.name = name
        self.reader = Reader(source, name)
        self.arrays: dict[str, Expr] = {n: Named(v.shape, v.dtype, n) for n, v in args.items()
                                        if isinstance(v, np.ndarray)}
        self.arguments = set(self.arrays)
        self.aliases: set[str] = set()
        """Names bound to a view of another array (``v = a[1:]``): the same memory, as in NumPy."""
        self.outer = source.outer_names()
        """What the host reads besides ``host``: the names the function does not bind itself."""
        self.host: dict[str, Any] = {n: v for n, v in args.items() if not isinstance(v, np.ndarray)}
        self.read: set[str] = set()
        """The scalar arguments whose values the rewriting read (a slice's bound): the plan is for them."""
        self.sampled: set[str] = set()
        self.ranged: dict[str, tuple[int, int]] = {}
        self.rebound = frozenset(stored_names([source.node]))
        self.origins: dict[str, set[str]] = {}
        self.stand_ins: dict[str, tuple[Any, ...]] = {}
        self.counter = itertools.count()
        self.changed = False
        self.following: list[ast.stmt] = []
        """The statements after the one being rewritten, in its block."""
        self.pending: list[ast.stmt] = []
        """Statements an expression needs before the statement it stands in (a cumsum's own loops)."""
        self.described = dict(source.described)
        """What the user's code calls each name the rewriting gives a value of its own (``Source.described``)."""
        self.at: ast.stmt = source.node
        """The user's statement being rewritten: what svod writes for it stands at its line."""
        self.sized: dict[str, str] = {}
        """Each array of a length the data decides (``svod.frontend.compactions``): the scalar of its length."""
        self.viewed = viewed_names(source.node)
        """The names another name may view: an array made in a loop is made once, in one buffer each turn
        writes anew, only where no other name can still hold an earlier turn's array."""
        self.variables: dict[str, Dim | LoopTurns] = {}
        """The variables of the loops around the statement being rewritten, as extents with the values each
        loop gives its variable (what a slice's bound may read besides the numbers the host knows)."""
        self.stale: dict[str, str] = {}
        """Arrays a loop made whose length or place depends on its variable, once the loop has ended: why
        they cannot be read."""
        self.level = 0
        """How many blocks deep the statement being rewritten stands (1: the function's own)."""
        self.work: list[ast.For] = []
        """The ``prange`` loops around the statement being rewritten (its work item's), outermost first."""
        self.hoisted: list[ast.stmt] = []
        """The arrays the statements of a ``prange`` nest make, one per work item, made before the nest."""
        self.held_bounds: tuple[dict[Dim, Dim], int] = ({}, 0)
        """The bounds read from memory that the work item computed into locals (``held``) at the top of its
        body, and how deep that stands."""
        self.bases: dict[str, Named] = {}
        """Per array the rewriting makes at a length the host does not know: the array it is made in, of the
        greatest length, which it views."""
        self.bindings = Bindings(self.arrays, self.described, self.viewed, self.counter)
        """A name bound anew in straight-line code is a new array of a name of its own (``rebinding``)."""
        self.shrinking_state()

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def static(self, node: ast.AST, x: Expr, what: str) -> None:
        """Refuse ``what`` of ``x`` where a length of ``x`` is one the host does not know before the run."""
        if not extents.is_static(x.shape):
            raise self.refuse(node, f"{what} of an array of shape {extents.shown(x.shape)}, a length of which is known "
                                    "only at run time, is not one svod has; slice it to lengths the host knows")

    # ---- statements --------------------------------------------------------------------------------------

    def body(self, statements: Sequence[ast.stmt], looped: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        statements = list(statements)
        self.level += 1
        try:
            with self.bindings.block():
                position = 0
                while position < len(statements):
                    stmt = statements[position]
                    taken = unrolled(stmt, self.reader, self.on_host)  # (a loop whose variable decides shapes)
                    if taken is not None and isinstance(stmt, ast.For):  # its turns, counted on the host
                        self.read |= {n.id for n in walk(stmt.iter) if isinstance(n, ast.Name)} & set(self.host)
                    elif isinstance(stmt, ast.If) and (self.holds_array_statement(stmt) or
                                                       self.reader.holds_phases([stmt])):
                        made_for = (self.sampled | self.read) & set(self.host) | set(self.arrays)
                        taken = decided(stmt, made_for, self.outer, self.on_host)  # (by what the plan is made for)
                    if taken is not None:  # written out on the host: a loop's turns, the branch an if takes
                        statements[position:position + 1], self.changed = taken, True
                        continue
                    wide = None if self.work else self.widened_loop(statements[position])
                    if wide is not None:  # a loop of independent turns: its statements over every turn
                        statements[position:position + 1], self.changed = wide, True
                        continue
                    self.following = statements[position + 1:]
                    made = self.statement(statements[position], looped)
                    out += [*self.pending, *made]
                    self.pending = []
                    position += 1
        finally:
            self.level -= 1
        return out

    def widened_loop(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        """A loop of independent turns as its statements over all turns (``loop_widening``); its bounds read."""
        if not isinstance(stmt, ast.For) or not isinstance(self.source.node, ast.FunctionDef):
            return None
        loop = renamed(stmt, self.bindings.renames) if self.bindings.renames else stmt
        wide = loop_widening.widened(loop, self.source.node, self.arrays, self.source.names, self.on_host)
        if wide is not None:
            self.read |= loop_widening.bound_names(loop) & set(self.host)
        return wide

    def fused_into_next(self, name: str, stmt: ast.stmt) -> bool:
        """Whether array ``name``, about to be made by ``stmt``, is read by the next statement alone, which stores
        into no array of that name: then that statement computes its expression where it reads it, and it is
        never made (softmax's ``e = np.exp(...)`` then ``e / e.sum(...)``: one kernel). Nothing runs between
        the two, so what it reads is what it would have read. Or it is cheap, and read by a few statements
        that write no array (``array_fusion.recomputable``): each computes it where it reads it."""
        if not self.following:
            return False
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            reads = names_read(stmt.value, self.fused_value)
            reads |= {user for read in reads for user in self.bindings.spelled(read)}
            if recomputable(stmt.value, reads, self.bindings.spelled(name), self.following):
                return True
        spelled = self.bindings.spelled(name)  # (the statements after it still read the user's names)
        later = [bool(spelled & {n.id for n in walk(stmt) if isinstance(n, ast.Name)}) for stmt in self.following]
        nxt = self.following[0]
        stored = stored_names([nxt]) | \
            {t.value.id for t in walk(nxt) if isinstance(t, ast.Subscript) and isinstance(t.ctx, ast.Store)
             and isinstance(t.value, ast.Name)}
        simple = isinstance(nxt, (ast.Assign, ast.AugAssign, ast.Return)) and not any(
            isinstance(n, (ast.For, ast.While)) for n in walk(nxt))
        return later[0] and not any(later[1:]) and not spelled & stored and simple

    def fused_value(self, name: str) -> ast.expr | None:
        """The value array ``name`` is computed from where it is fused (``Fused``) and not made; else None."""
        array = self.arrays.get(name)
        if isinstance(array, Fused) and array.made is None and isinstance(array.statement, ast.Assign):
            return array.statement.value
        return None

    def statement(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt]:
        """``stmt`` rewritten; a fused array it would read at a cost is made first (``RepeatedWorkError``)."""
        stmt, rebound = self.bindings.current(stmt, self.following)
        self.changed |= rebound
        stmt = self.lengths_read(stmt)  # of the arrays a loop shrinks
        outer, self.at = self.at, stmt
        varying = stored_names([stmt]) if isinstance(stmt, (ast.For, ast.While, ast.If)) else set()
        if varying:
            self.remember_stand_ins_within(stmt)
        if not isinstance(stmt, ast.If):
            self.forget(varying)  # a loop's turns after the first see what its body assigned
        try:
            while True:
                before, known = len(self.pending), unread(self.arrays)
                try:
                    made = self.rewritten(stmt, looped)
                    if isinstance(stmt, ast.Assign):
                        for name in stored_names([stmt]):
                            self.stale.pop(name, None)  # bound anew
                    return made
                except AmbiguousScalarError as ambiguous:
                    raise self.refuse(stmt, ambiguous_type(ambiguous.scalar)) from None
                except RepeatedWorkError as unfuse:
                    del self.pending[before:]  # what the attempt needed, made again by the next
                    self.arrays = known  # and the arrays it named: a new one is no store into it the next time
                    self.make(unfuse.fused)
        finally:
            self.at = outer
            self.forget(varying)  # after it, what a turn or a branch may have assigned, or not

    def forget(self, names: set[str]) -> None:
        """The host no longer knows the values of ``names`` (a loop or a branch assigns them)."""
        for name in names:
            self.host.pop(name, None)

    def make(self, fused: Fused) -> None:
        """Make fused array ``fused`` after all, before the statement being rewritten (and, first, a fused
        array that making it would read at a cost)."""
        while True:
            before = len(self.pending)
            made = self.made_array(fused.name, fused.shape, fused.dtype, fused.statement)
            try:
                self.pending += self.allocation(fused.statement, made) + self.loops(fused.statement, made, fused.value)
            except RepeatedWorkError as unfuse:
                del self.pending[before:]
                self.make(unfuse.fused)
                continue
            self.arrays[fused.name] = fused.made = made
            return

    def rewritten(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt]:
        if isinstance(stmt, ast.For) and not self.work and runs_in_order(self.reader, stmt, self.arrays):
            stmt = in_range(stmt)
        if isinstance(stmt, ast.For) and not self.reader.is_prange(stmt):
            stmt = self.over_rows(stmt)
            if self.viewing(stmt.iter):  # range(len(v)) of a view v: its turns, of the view's length
                stmt = stands_for(copy.copy(stmt), stmt)
                stmt.iter = self.element_values(stmt.iter)
            if self.holds_array_statement(stmt):
                new = stands_for(copy.copy(stmt), stmt)
                with self.loop_variable(stmt), self.counting(stmt), self.shrinking(stmt) as before:
                    new.body = self.body(stmt.body, True)
                return [*before, new]
            return [stmt]
        compacted = self.compacted_in_place(stmt)
        if compacted is not None:
            return compacted
        if isinstance(stmt, ast.Assign) and len(stmt.targets) > 1:
            return [made for part in self.chained(stmt) for made in self.statement(part, looped)]
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple):
            parts = self.reader.unpacked(stmt)  # h, w = a.shape: a size each
            if parts != [stmt]:
                return [made for part in parts for made in self.statement(part, looped)]
            arrays = [n.id for n in stmt.targets[0].elts if isinstance(n, ast.Name) and n.id in self.arrays]
            if arrays:
                raise self.refuse(stmt, exchanged(arrays))
        if isinstance(stmt, ast.If):
            before, test = self.condition(stmt, stmt.test)
            branch = stands_for(copy.copy(stmt), stmt)
            known, held = dict(self.host), dict(self.arrays)
            branch.test, branch.body = test, self.body(stmt.body, looped)
            first = dict(self.arrays)
            # The other way starts from what was known before the if (each way makes its own arrays: ``remade``).
            self.host = known
            self.arrays.clear()
            self.arrays.update(held)
            branch.orelse = self.body(stmt.orelse, looped)
            self.arrays.update({name: array for name, array in first.items() if name not in self.arrays})
            return [*before, branch]
        if isinstance(stmt, ast.While):
            before, test = self.condition(stmt, stmt.test)
            loop = copy.copy(stmt)
            loop.test, loop.body = test, self.body(stmt.body, True)
            if before:  # the test computes on arrays: it is computed again at the top of each turn
                stop = placed([ast.If(ast.UnaryOp(ast.Not(), test), [ast.Break()], [])], stmt)[0]
                loop.test, loop.body = placed([constant(True)], stmt)[0], [*before, stop, *loop.body]
            return [stands_for(loop, stmt)]
        if isinstance(stmt, ast.For) and self.reader.is_prange(stmt):
            return self.parallel_nest(stmt, looped)
        ordered = self.ordered(stmt, looped)
        if ordered is not None:
            return ordered
        counted = self.counting_statement(stmt)
        if counted is not None:
            return counted
        unique = self.unique_statement(stmt, looped)
        if unique is not None:
            return unique
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return self.called(stmt, stmt.value, looped)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            return self.assign(stmt, stmt.targets[0], stmt.value, None, looped)
        if isinstance(stmt, ast.AugAssign):
            return self.assign(stmt, stmt.target, stmt.value, stmt.op, looped)
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            return self.returned(stmt, stmt.value)
        return [stmt]

    def chained(self, stmt: ast.Assign) -> list[ast.stmt]:
        """``a = b = e`` as Python runs it: ``e`` computed once (into a name of its own), then stored into each
        target from left to right."""
        name = f"_svod_chained{next(self.counter)}"
        self.described[name] = f"the value of `{code(stmt.value, 40)}`"
        self.changed = True
        return placed([assign(name, stmt.value), *(ast.Assign([target], load(name)) for target in stmt.targets)], stmt)

    def over_rows(self, stmt: ast.For) -> ast.For:
        """``for v in x`` over an array of several axes, or around array statements, as Python iterates it: a
        loop over ``x``'s first axis whose turn starts ``v = x[i]`` (a view of the row, or an element of a 1-D
        array, as it stands then). Any other loop as it is."""
        iterated = stmt.iter.id if isinstance(stmt.iter, ast.Name) else ""
        array = self.arrays.get(iterated)
        if array is None or not isinstance(stmt.target, ast.Name):
            return stmt
        if len(array.shape) < 2 and not any(self.is_array_statement(s) for inner in stmt.body for s in walk(inner)
                                    if isinstance(s, ast.stmt)):
            return stmt  # elements of a 1-D array: the kernel's own loop
        if not array.shape:
            raise self.refuse(stmt.iter, f"iteration over a 0-d array ({iterated}): NumPy raises TypeError")
        if stmt.orelse:
            raise self.refuse(stmt, "for ... else around array statements is not one svod has")
        if any(isinstance(n, ast.Name) and n.id == iterated and isinstance(n.ctx, ast.Store)
               for inner in stmt.body for n in walk(inner)):
            raise self.refuse(stmt.iter, f"the loop's body binds {iterated} anew, while the loop iterates the array "
                                         f"{iterated} named before it: loop over range(len({iterated})) and give the "
                                         "new array a name of its own")
        index = f"_svod_row{next(self.counter)}"
        self.described[index] = f"the index of the row `for {stmt.target.id} in {iterated}` is at"
        row = ast.Subscript(load(iterated), load(index), ast.Load())
        turns = call("range", node_of(array.shape[0]))
        loop = for_loop(index, turns, [*placed([ast.Assign([stmt.target], row)], stmt), *stmt.body])
        self.changed = True
        return stands_for(ast.fix_missing_locations(ast.copy_location(loop, stmt)), stmt)

    def parallel_nest(self, stmt: ast.For, looped: bool) -> list[ast.stmt]:
        """A ``prange`` nest whose work item runs array statements: each rewritten into loops of the work item's
        own (``range``; more ``prange``s of the nest where one statement is the nest's whole body) and
        reductions; an array a statement makes (a temporary NumPy computes first, a name bound to an array
        expression) is made once for every work item, before the nest, and each reads its own. A nest without
        array statements stays as written."""
        nest = [stmt]
        while len(nest[-1].body) == 1 and self.reader.is_prange(nest[-1].body[0]):
            nest.append(nest[-1].body[0])  # type: ignore[arg-type]  # (is_prange: a For)
        changed, hoisted, work, held = self.changed, self.hoisted, self.work, self.held_bounds
        self.changed, self.hoisted, self.work, self.held_bounds = False, [], [*work, *nest], ({}, self.level + 1)
        try:
            with ExitStack() as scope:
                for loop in nest:
                    scope.enter_context(self.loop_variable(loop))
                body = self.body(nest[-1].body, looped)
            rewritten, made = self.changed, self.hoisted
        finally:
            self.changed, self.hoisted, self.work, self.held_bounds = changed or self.changed, hoisted, work, held
        turns = [self.element_values(loop.iter) for loop in nest]  # prange(len(v)) of a view v: its length
        if not rewritten and all(t is loop.iter for t, loop in zip(turns, nest, strict=True)):
            return [stmt]
        if not rewritten:
            body = nest[-1].body
        for loop, iterated in zip(reversed(nest), reversed(turns), strict=True):
            copied = stands_for(copy.copy(loop), loop)
            copied.body, copied.iter = widened(body) if rewritten else body, iterated
            body = [copied]
        return [*made, *body]

    def condition(self, stmt: ast.stmt, test: ast.expr) -> tuple[list[ast.stmt], ast.expr]:
        """An ``if``'s or ``while``'s test: as written where it reads no array as a whole, else the statements
        that compute its one value into a name of its own, and that name."""
        value = self.value(test)
        if not isinstance(value, Expr):
            return [], self.element_values(test)
        if value.shape:
            raise self.refuse(test, f"the truth value of an array of shape {value.shape} is ambiguous (as in NumPy); "
                                    "use .any() or .all()")
        name = f"_svod_c{next(self.counter)}"
        self.described[name] = f"the test `{code(test, 40)}`"
        self.changed = True
        return self.new_array(stmt, name, value, False), stands_for(ast.copy_location(load(name), test), test)

    def called(self, stmt: ast.Expr, call: ast.Call, looped: bool) -> list[ast.stmt]:
        """A call made for its effect: ``x.fill(v)`` is ``x[...] = v``; other calls stand as written (the
        function's reader says what it makes of them)."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "fill" and len(call.args) == 1 and not call.keywords:
            owner = self.target(func.value)
            if owner is not None:
                everything = ast.copy_location(ast.Subscript(func.value, ast.Constant(...), ast.Store()), stmt)
                return self.assign(stmt, everything, call.args[0], None, looped)
        written = ufunc_out(self, stmt, call)  # np.add(z, c, z): into its out
        return [stmt] if written is None else self.assign(stmt, written[0], written[1], None, looped)

    def returned(self, stmt: ast.Return, node: ast.expr) -> list[ast.stmt]:
        """``return <array expressions>``: each a new array (or value) of a name of its own, returned by name;
        ``return a.shape`` the tuple of the numbers the host knows (the plan is made for them)."""
        shape = self.value(node) if isinstance(node, ast.Attribute) and node.attr == "shape" else None
        if isinstance(shape, Scalar) and isinstance(shape.held, tuple) and all(type(d) is int for d in shape.held):
            node = ast.copy_location(ast.Tuple([constant(d) for d in shape.held], ast.Load()), node)
            stmt, self.changed = placed([ast.Return(node)], stmt)[0], True
        values = list(node.elts) if isinstance(node, ast.Tuple) else [node]
        made: list[ast.stmt] = []
        names: list[ast.expr] = []
        prefixes = False
        for value in values:
            bound = self.arrays.get(value.id) if isinstance(value, ast.Name) else None
            if isinstance(value, ast.Name) and value.id in self.sized:
                names.append(self.sized_return(value.id, value))  # its first elements: those the data made
                prefixes = True
                continue
            if isinstance(value, ast.Name) and (bound is None or (isinstance(bound, Named) and bound.name == value.id)):
                names.append(value)  # an array of its own name, or a scalar
                continue
            if self.returned_prefix(value):
                names.append(value)  # its length computed where the return stands (Reader.prefixes)
                continue
            name = f"_svod_r{next(self.counter)}"
            assigned = placed([ast.Assign([ast.Name(name, ast.Store())], value)], stmt)[0]
            if sorting_call(self.reader, assigned) or linalg_call(self.reader, assigned):
                made += self.ordered(assigned, False) or []  # a sort's or np.linalg's result, by its name
                names.append(load(name))
                continue
            if self.is_unique(value):
                made += self.unique_statement(assigned, False) or []
                names.append(self.sized_return(name, value))
                continue
            computed = self.value(value)
            if isinstance(computed, Expr):
                self.static(value, computed, "returning")
            self.described[name] = f"the returned `{code(value, 40)}`"
            if isinstance(computed, Scalar):  # a number: a name of its own, an early return's too (Flow)
                if isinstance(computed.held, tuple):
                    raise self.refuse(value, "a tuple among returned values: return its numbers one by one")
                if isinstance(value, ast.Name):
                    names.append(value)
                    continue
                name = name.replace("_svod_r", "_svod_returned_r", 1)
                self.described[name] = f"the returned `{code(value, 40)}`"
                made += placed([assign(name, computed.node)], stmt)  # (as understood: b.shape[0] of a made b, 4)
                self.changed |= computed.spells_otherwise(value)
                names.append(load(name))
                continue
            made += self.new_array(stmt, name, computed, False)
            names.append(self.sized_return(name, value) if name in self.sized else load(name))
        if not made and not prefixes:
            return [stmt]
        result = ast.Tuple(names, ast.Load()) if isinstance(node, ast.Tuple) else names[0]
        return [*made, *placed([ast.Return(result)], stmt)]

    def ordered(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt] | None:
        """A sort's statement (``phases.sorting_call``: a plan step of its own, ``svod.frontend.sorting``) as it
        stands, its operand made an array of its own first where it is an expression or a view; its result
        array known by its name. None for any other statement."""
        found = sorting_call(self.reader, stmt)
        if found is None:
            return factored(self, stmt, looped)  # or a np.linalg statement's
        kind, call, owner = found
        operand = owner if owner is not None else call.args[0] if call.args else \
            next((k.value for k in call.keywords if k.arg == "a"), None)
        if operand is None:
            return [stmt]  # the reader says what is missing
        known, made = self.arrays.get(operand.id) if isinstance(operand, ast.Name) else None, []
        if not (isinstance(known, Named) and isinstance(operand, ast.Name) and known.name == operand.id):
            if owner is not None and kind in ("sort", "partition"):
                raise self.refuse(stmt, f"{ast.unparse(owner)}.{kind}() sorts a view in place, which svod does not; "
                                        "sort the array it views, or a copy")
            value = self.value(operand)
            if not isinstance(value, Expr):
                return [stmt]  # not an array: the reader says so
            name = f"_svod_s{next(self.counter)}"
            made = self.new_array(stmt, name, value, looped)
            known = self.arrays[name]
            call = copy.copy(call)
            if owner is not None:
                call.func = ast.copy_location(ast.Attribute(ast.Name(name, ast.Load()), kind, ast.Load()), call.func)
            else:
                call.args = [ast.copy_location(ast.Name(name, ast.Load()), operand), *call.args[1:]]
                call.keywords = [k for k in call.keywords if k.arg != "a"]
            stmt = ast.copy_location(type(stmt)(**{**{f: getattr(stmt, f) for f in stmt._fields}, "value": call}), stmt)
            self.changed = True
        self.static(stmt, known, f"np.{kind}")
        if isinstance(stmt, ast.Assign) and kind in ("sort", "argsort", "partition", "argpartition") and \
                isinstance(stmt.targets[0], ast.Name):
            ordering = self.reader.ordering(stmt)  # (a sort's own items: its axis)
            along = ordering[-1].axis if ordering and isinstance(ordering[-1], Ordering) else None
            shape = (int(np.prod(extents.numbers(known.shape))),) if along is None or len(known.shape) <= 1 \
                else known.shape
            dtype = known.dtype if kind in ("sort", "partition") else np.dtype(np.intp)
            self.arrays[stmt.targets[0].id] = Named(shape, dtype, stmt.targets[0].id)
        return [*made, stmt]

    def holds_array_statement(self, stmt: ast.stmt) -> bool:
        """Whether a statement inside ``stmt`` is an array statement."""
        return any(self.is_array_statement(s) for s in walk(stmt) if isinstance(s, ast.stmt) and s is not stmt)

    def is_array_statement(self, stmt: ast.stmt) -> bool:
        if self.is_counting_statement(stmt):
            return True
        if isinstance(stmt, ast.Expr):  # x.fill(v), np.add(x, y, out=x)
            return writes_out(self.reader, stmt)
        if isinstance(stmt, ast.Return) and stmt.value is not None:  # return x.shape, return (a * 2).shape[0]
            return any(isinstance(n, ast.Attribute) and n.attr in SIZE_ATTRIBUTES and self.reads_array(n.value)
                       for n in walk(stmt.value))
        if isinstance(stmt, (ast.Assign, ast.AugAssign)):
            names = {n.id for n in walk(stmt) if isinstance(n, ast.Name)}
            return bool(names & set(self.arrays)) and not any(isinstance(n, ast.For) for n in walk(stmt))
        return False

    def assign(self, stmt: ast.stmt, target: ast.expr, node: ast.expr, op: ast.operator | None,
               looped: bool) -> list[ast.stmt]:
        if isinstance(node, ast.Call) and self.reader.allocation(node) is not None and isinstance(target, ast.Name):
            return self.allocated(stmt, target.id, node)
        if isinstance(target, ast.Name) and op is None and (target.id not in self.arrays or target.id in self.aliases
                                                             or isinstance(self.arrays[target.id], Fused)):
            value = self.value(node)
            if isinstance(value, Scalar):
                if value.spells_otherwise(node):  # n = (a * 2).shape[0]: n = 5
                    stmt, node, self.changed = placed([assign(target.id, value.node)], stmt)[0], value.node, True
                self.remember_scalar(target.id, node, straight=self.level == 1)
                return [self.elements_read(stmt)]
            # a view: another name of the memory (a view of a computed value is a new array, computed here)
            if isinstance(value, (Named, Viewed, Transposed, Reshaped)) and not computes(value):
                self.arrays[target.id] = value
                self.aliases.add(target.id)
                return []
            if self.bindings.part_written(self.source.node, target.id, node):
                raise self.refuse(stmt, PART_WRITTEN)
            return self.new_array(stmt, target.id, value, looped)
        if isinstance(target, ast.Name) and op is None and target.id in self.arguments:
            raise self.refuse(stmt, argument_bound_anew(target.id))
        if isinstance(target, ast.Tuple) and op is None:
            self.remember_unpacked(target, node)
        stored = self.target(target)
        if stored is None and isinstance(target, ast.Name) and op is not None and nodes.holds_call(node) and \
                isinstance(value := self.value(node), Expr) and computes(value):
            whole = updated(target.id, op, node)  # s += x.sum(): s = s + x.sum()
            return self.assign(placed([ast.Assign([target], whole)], stmt)[0], target, whole, None, looped)
        if stored is None:  # a scalar's update (s += v[0])
            if isinstance(target, ast.Name) and op is not None:
                self.remember_scalar(target.id, updated(target.id, op, node), straight=self.level == 1)
            return [self.elements_read(stmt)]
        value = self.value(node)
        changed = self.bindings.unwritable(self.source.node, target.id, stored, value) \
            if isinstance(target, ast.Name) and op is None else None
        if changed is not None:
            raise self.refuse(stmt, changed)
        if isinstance(target, ast.Name) and op is None and not isinstance(stored, Masked) and reads_masked(value):
            raise self.refuse(stmt, shrinking(target.id))
        held: list[ast.stmt] = []
        if isinstance(stored, Masked) and isinstance(value, Expr) and not value.shape and not reads_masked(value):
            one = self.fresh_temporary((1,), value.dtype, node)  # ``x[m] = x.max()``: the number first, as NumPy's
            held, value = [*self.allocation(stmt, one), *self.loops(stmt, one, value)], Reshaped((), value.dtype, one)
        if isinstance(target, ast.Subscript) and isinstance(value, Scalar) and not stored.shape and \
                isinstance(stored, Viewed) and not stored.axes:
            return [self.elements_read(stmt)]  # an element's store of a scalar: a phase as written
        update = None
        if op is not None:
            combined = self.binary(stmt, stored, value, type(op))  # cast to stored's dtype at the store
            update = (op, value) if _added_in_place(op, stored, combined) else None
            value = combined
        if not stored.shape and isinstance(value, Scalar):
            return [stmt]
        return [*held, *self.store(stmt, stored, value, node if op is None else stmt, update)]

    def elements_read(self, stmt: ast.Assign | ast.AugAssign | ast.stmt) -> ast.stmt:
        """A scalar statement as written, but for an element of a view in it (``x[:k][-1]``), which it reads from
        the view's array (``x[k - 1]``): the kernel language has no slices."""
        if not isinstance(stmt, (ast.Assign, ast.AugAssign)) or not self.viewing(stmt):
            return stmt
        made = copy.copy(stmt)
        made.value = self.element_values(stmt.value)
        if isinstance(made, ast.AugAssign):  # (a store's target, ``stored``: the phase is then one that stores)
            made.target = cast(ast.Name, stored(self.element_values(made.target)))
        elif isinstance(made, ast.Assign):  # an element of a view, or of a work item's own array, stored
            made.targets = [stored(self.element_values(t)) for t in made.targets]
        return stands_for(ast.fix_missing_locations(made), stmt)

    def new_array(self, stmt: ast.stmt, name: str, value: Expr, looped: bool) -> list[ast.stmt]:
        """``name = <array expression>``: a new array, which the plan makes once (a statement of its own); one
        value (a reduction to a scalar) is a scalar the phase computes, in a loop too."""
        self.changed = True
        if not value.shape:  # one value: a scalar the phase computes, into the name itself
            if reads_masked(value):
                raise self.refuse(stmt, "a reduction of x[mask] is not one svod has: reduce np.where(m, x, 0) "
                                        "(a sum), or count the mask")
            self.host.pop(name, None)
            # NumPy's reduction gives a scalar of its dtype
            self.remember_stand_in(name, (value.dtype.type(0),), straight=self.level == 1)
            out = Emitter(self.counter)
            element = value.element([], out)
            if isinstance(element, ast.Name) and element.id in out.made.values():  # a reduction's accumulator
                return placed([renamed(s, {element.id: name}) for s in out.statements], stmt)
            return placed([*out.statements, assign(name, element)], stmt)
        if self.reduced_next(stmt, name, value):  # x[mask] that the next statement only reduces: reduced there
            self.arrays[name] = Fused(value.shape, value.dtype, name, value, stmt)
            return []
        compacted = self.compacted(stmt, name, value)
        if compacted is not None:
            return compacted
        if looped and name in self.viewed:
            holder, why = self.bindings.new_in_loop(self.source.node, name, stmt.lineno)
            raise self.refuse(stmt if holder is None else holder, why)
        if self.fused_into_next(name, stmt):
            self.arrays[name] = Fused(value.shape, value.dtype, name, value, stmt)
            return []
        made = self.made_array(name, value.shape, value.dtype, stmt)
        return [*self.allocation(stmt, made), *self.loops(stmt, made, value)]

    def made_array(self, name: str, shape: tuple[Dim, ...], dtype: np.dtype, at: ast.AST) -> Expr:
        """Array ``name``, which the rewriting makes, of ``shape``: where a length is one the host does not know
        before the run, made at the greatest (``bases``), viewed at the length (in a loop, at the turn's)."""
        items, positions = self.work_item(at) if self.work else ([], [])
        if extents.is_static(shape) and not items:
            self.arrays[name] = made = Named(shape, dtype, name)
            return made
        largest = next((d for d in (*items, *shape) if extents.high(d) > extents.TEMPORARY_LENGTH), None)
        if largest is not None:
            raise self.refuse(at, f"an array of shape {extents.shown(shape)} is made here, and the host does not know "
                                  f"how long `{largest}` may be before the run, which it makes the array at" +
                                  (" (one for each work item of the prange loops around it)" if items else ""))
        greatest = extents.greatest([*items, *shape])  # a work item's part at least one element long: the parts
        if items:  # stand apart when they are empty (else a store would be one element of every work item's)
            greatest = (*greatest[:len(items)], *(max(g, 1) for g in greatest[len(items):]))
        base = self.bases[name] = Named(greatest, dtype, name)
        axes = tuple((len(items) + k, 0, 1) for k in range(len(shape)))
        self.arrays[name] = view = Viewed(shape, dtype, base, axes, dict(enumerate(positions)))
        return view

    def allocation(self, stmt: ast.stmt, made: Expr) -> list[ast.stmt]:
        """``made = np.empty(shape, dtype)``: a temporary the plan makes (at its greatest shape: ``made``)."""
        name = base_name(made)
        assert name is not None  # (``made``'s array or a view of it)
        base = self.bases.get(name, made)
        shape = ast.Tuple([node_of(size) for size in base.shape], ast.Load())
        made_here: list[ast.stmt] = placed([assign(name, call(numpy("empty"), shape, numpy(made.dtype.name)))], stmt)
        if self.work:  # one for each work item: made before the prange nest
            self.hoisted += made_here
            return []
        return made_here

    def store(self, stmt: ast.stmt, stored: Expr, value: Value, node: ast.AST,
              update: tuple[ast.operator, Value] | None = None) -> list[ast.stmt]:
        """``stored[...] = value`` (the user's ``node``), through a temporary where the value reads ``stored``'s
        array elsewhere (anywhere, through indices that may repeat); else, with ``update`` (``stored += v``: the
        operator and ``v``, ``_added_in_place``), as each element's own ``+=``."""
        self.changed = True
        if isinstance(stored, Masked) and not masked_by(value, stored.key):
            raise self.refuse(stmt, "x[mask] = value takes a scalar, or an expression of arrays under the same mask "
                                    "(`x[m] = y[m] * 2`): NumPy assigns another array's first elements in order")
        if isinstance(value, Expr):
            broadcast_shape(self, stmt, (stored.shape, value.shape), to=stored.shape)
        base = stored_array(stored)  # (a value reading it elsewhere is computed whole first, as NumPy's)
        if base is not None and isinstance(value, Expr) and stored.shape and \
                reads_apart(value, stored, base, repeats=isinstance(stored, Gathered)):
            made = self.fresh_temporary(value.shape, value.dtype, node)
            temporary = under_mask_of(stored, made)
            return [*self.allocation(stmt, made), *self.loops(stmt, temporary, value),
                    *self.loops(stmt, stored, temporary)]
        if update is not None:
            return self.loops(stmt, stored, update[1], update=update[0])
        return self.loops(stmt, stored, value)

    def fresh_temporary(self, shape: tuple[Dim, ...], dtype: np.dtype, node: ast.AST) -> Expr:
        """A new array of ``shape`` and ``dtype``, which the plan makes, of the user's ``node``."""
        name = f"_svod_t{next(self.counter)}"
        made = self.made_array(name, shape, dtype, node)
        self.described[name] = f"the temporary array of `{code(node, 40)}`"
        return made

    def loops(self, stmt: ast.stmt, stored: Expr, value: Value, update: ast.operator | None = None) -> list[ast.stmt]:
        """The ``prange`` nest that stores ``value`` into each element of ``stored`` (with ``update``, adds it:
        ``stored[...] += value``)."""
        variables = [f"_svod_a{next(self.counter)}" for _ in stored.shape]
        index = [load(v) for v in variables]
        out = Emitter(self.counter)
        if not self.work:  # (a work item's own loops run in order: it makes no array of its own first)
            out.stores, out.separate = tuple(zip(variables, stored.shape, strict=True)), self.separate
            out.everywhere = self.taped
        element = broadcast_element(value, stored.shape, index, out)
        if update is None and stored.dtype != (value.dtype if isinstance(value, Expr) else None):
            element = typed(element, stored.dtype)
        if not isinstance(stored, Masked) and reads_masked(value):
            raise self.refuse(stmt, "x[mask] makes an array of the elements where the mask holds, which svod does "
                                    "not compact; store under the mask (`x[m] = ...`) or use np.where(m, x, ...)")
        target = stored.element(index, out)
        kept = stored.mask.element(index, out) if isinstance(stored, Masked) else None
        written = assign(target, element) if update is None else \
            ast.AugAssign(cast(ast.Subscript, nodes.stored(target)), update, element)
        body: list[ast.stmt] = [*out.statements, written if kept is None else ast.If(kept, [written], [])]
        loops = list(zip(variables, stored.shape, strict=True))
        if isinstance(stored, Gathered):  # through indices that may repeat: in order, NumPy's last write wins
            return placed(sequential(loops, body), stmt)
        if self.work:  # a work item's own loops (``parallel_nest`` widens a nest's only statement's)
            return placed(sequential(loops, body, elementwise=True), stmt)
        return placed(parallel(loops, body), stmt)

    def target(self, node: ast.expr) -> Expr | None:
        """What a store's target names: an array or a view of one (None: not an array's); a view NumPy makes
        read-only (``np.broadcast_to``'s, ``np.diagonal``'s) refused."""
        value = self.arrays.get(node.id) if isinstance(node, ast.Name) else \
            self.subscript(node, element=True) if isinstance(node, ast.Subscript) else None  # (an element: no axes)
        if isinstance(value, Expr) and (maker := read_only(value)) is not None:
            raise self.refuse(node, f"{maker}'s view is read-only (as NumPy's): store into the array it views")
        if isinstance(value, Expr) and not _memory(value):
            raise self.refuse(node, "a store into an array NumPy computes anew (np.repeat(x, 1), np.roll(x, 1)) "
                                    "changes no array the function has: name it first (`y = np.roll(x, 1)`)")
        return value if isinstance(value, Expr) else None

    # ---- arrays an expression makes first ----------------------------------------------------------------

    def separate(self, x: Expr) -> Expr:
        """Reduction ``x`` made into an array of its own, before the statement (``Emitter.separated``)."""
        made = self.fresh_temporary(x.shape, x.dtype, self.at)
        nest = [*self.allocation(self.at, made), *self.loops(self.at, made, x)]
        self.pending += nest
        return made

    def operand(self, node: ast.AST, x: Expr) -> Expr:
        """A product's operand (the user's ``node``) that it reads more than once (the other has rows or
        columns): an array or a view of one as it is; one whose elements are computed (``alpha * A``) made into
        an array first, before the statement. The product reads each element once per row or column of the
        other operand, and would compute it again each time."""
        if isinstance(x, Fused) and x.made is None:
            self.make(x)
            return x
        if not computes(x):
            return x
        made = self.fresh_temporary(x.shape, x.dtype, node)
        self.pending += [*self.allocation(self.at, made), *self.loops(self.at, made, x)]
        return made


def _memory(x: Expr) -> bool:
    """Whether ``x`` is memory a store may write: an array's (a temporary's too), or a view, a gather or a mask
    of one; not a value computed of arrays (``np.repeat(x, 1)``, whose elements NumPy makes anew)."""
    while isinstance(x, (Viewed, Transposed, Reshaped, Gathered, Masked)):
        x = x.base
    return isinstance(x, (Named, Fused))


def _added_in_place(op: ast.operator, stored: Expr, combined: Value) -> bool:
    """Whether ``stored += v`` (``-=``), whose sum is ``combined``, is stored as each element's own ``+=``: where
    the sum is in the stored array's dtype. The kernel then adds into an element the work items of a ``prange``
    share (``acc += a[i, :]``, numba's array reduction) as an atomic update (``Translator.summed_by_work_items``),
    where ``acc[j] = acc[j] + a[i, j]`` would race."""
    return isinstance(op, (ast.Add, ast.Sub)) and isinstance(combined, Expr) and bool(stored.shape) and \
        combined.dtype == stored.dtype and not isinstance(stored, (Masked, Gathered))


def lower_arrays(source: Source, name: str, args: dict[str, Any], taped: bool = False,
                 sampled: set[str] | None = None, ranged: dict[str, tuple[int, int]] | None = None,
                 limits: Limits | None = None) -> tuple[Source, set[str]] | None:
    """``source`` with its array statements rewritten as loops for arguments like ``args`` (the module
    docstring), and the scalar arguments whose values that read; None when it has none. ``taped``: for a
    tape, a reduction read at more elements than it depends on made into an array first (``Emitter.separated``).
    ``sampled`` is given the names of the scalars whose values the rewriting decided something by, and of those
    they were computed from (``HostValues.sampled``), whether or not it rewrote anything; ``ranged`` the int
    arguments read at run time as indices, with the values the rewriting holds for them (``passed_index``).
    Consecutive nests are fused (``nest_fusion``), and a matrix's two products with vectors read it once
    (``shared_products``), within the device's ``limits``, where given (not for a tape,
    which records each nest as a kernel call of its own)."""
    draws = random_arrays.Draws(source, name)
    source = draws.prepared()
    rewriter = ArrayRewriter(source, name, args, taped)
    node = stands_for(copy.copy(source.node), source.node)
    with decisions_recorded(rewriter):
        node.body = rewriter.body(source.node.body, False)
    if sampled is not None:
        sampled |= rewriter.sampled
    if ranged is not None:
        ranged.update((k, v) for k, v in rewriter.ranged.items() if k not in rewriter.sampled | rewriter.read)
    names = {**source.names, **MATH_HELPERS, "_svod_np": np, "_svod_prange": pylang.prange, **KERNEL_NAMES, **KEY_NAMES}
    node.body = draws.placed(Source(node, source.file, names))  # the random state the plan carries
    if limits is not None and not taped:
        node.body = shared_products(fused_nests(node, names, limits), names, limits)
    if not rewriter.changed and not draws.changed:
        return None
    return Source(node, source.file, names, {**rewriter.described, **draws.described}), rewriter.read

