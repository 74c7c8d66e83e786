"""NumPy array statements of an ``@svod.jit`` function, as the loops they mean (issue 45).

``B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2])`` is rewritten, for the shapes of one call, into the
``prange`` nest a numba user writes by hand, before the function is read into phases::

    for _svod_a0 in prange(998):
        for _svod_a1 in prange(998):
            B[1 + _svod_a0, 1 + _svod_a1] = 0.2 * (A[1 + _svod_a0, 1 + _svod_a1] + A[1 + _svod_a0, _svod_a1])

so every array statement is a phase that svod proves in bounds and free of races, tiles and threads as it
does a hand-written one, on every device. An expression is a lazy ``Expr`` (``svod.frontend.array_exprs``): a
shape, a dtype (NumPy's, found by applying the same operation to one-element arrays of the operands' dtypes,
so promotion is NumPy 2's), and its element at given indices. Nothing is computed into memory but what a
statement stores: elementwise operations, broadcasts, views and reductions of one statement fuse into one
loop nest, a reduction (``x.max(axis=1)``, a matmul's sum) being a loop of its own inside it, which svod's
lowering computes once per output it depends on (a row's max once per row, not once per element).

The loops are ``ast`` nodes built where they are needed (``svod.frontend.nodes``), never text parsed again:
each stands at the line of the user's statement it is written for, and an error about it shows that
statement; each array or value svod names (``_svod_t0``) is recorded in the user's words
(``Source.described``: ``the temporary array of `A[:-1] + 1```) for the errors that name it.

A slice's bounds may read the variables of the loops around the statement (``C[i, :i + 1]``), and inside a
``prange`` elements the work item reads (``A_val[A_row[i]:A_row[i + 1]]``): a length is then an extent
(``svod.frontend.extents``), its loop runs that long, two lengths broadcast where they are provably equal, and an
array made at such a length is made at the greatest and viewed at the turn's. A ``prange`` nest's array
statements become loops of its work item's own (``parallel_nest``), arrays they make one per work item.

What a statement means is NumPy's: its right side is computed as if into a new array before the store, so
``A[1:] = A[:-1] + 1`` computes into a temporary first, where the right side reads the stored array at
another element than the one stored (``reads_apart``); a name bound to an array expression is a new array
(a temporary the plan makes); ``x += e`` updates ``x`` in place, in its dtype.
"""

from __future__ import annotations

import ast
import copy
import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents, pylang, random_arrays
from svod.frontend.array_calls import Gathered, Masked, masked_by, reads_masked
from svod.frontend.array_exprs import (
    Elementwise,
    Emitter,
    Expr,
    Fused,
    Named,
    Product,
    Reduced,
    RepeatedWorkError,
    Reshaped,
    Scalar,
    Transposed,
    Value,
    Viewed,
    Whole,
    base_name,
    broadcast_element,
    computes,
    numpy,
    reads_apart,
    typed,
)
from svod.frontend.array_math import MATH_HELPERS
from svod.frontend.array_shapes import JOINS, MADE, read_only, viewed_by
from svod.frontend.array_stats import ArrayStatistics
from svod.frontend.compactions import Compactions
from svod.frontend.extents import Dim, node_of
from svod.frontend.histograms import KERNEL_NAMES, Histograms
from svod.frontend.names import renamed
from svod.frontend.nodes import assign, call, code, constant, for_loop, load, placed, stands_for, store
from svod.frontend.phases import SORTING, Ordering, Reader, refusal, sorting_call
from svod.frontend.rebinding import Bindings, HostShape
from svod.frontend.source import Source

UFUNCS = ("exp", "exp2", "log", "log2", "sin", "cos", "tan", "tanh", "sqrt", "floor", "ceil", "trunc", "abs",
          "fabs", "absolute", "negative")
"""The one-argument NumPy functions an array expression may call elementwise (``np.exp(x)``)."""
REDUCTIONS = ("sum", "prod", "max", "min", "mean", "amax", "amin", "argmax", "argmin", "any", "all")
"""The reductions an array expression may call, as a method or a NumPy function, over all axes or ``axis``."""
_OPERATORS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
"""The operators an array expression may apply elementwise, and what each computes on the host."""
_COMPARE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
TEMPORARY_LENGTH = (1 << 31) - 1
"""The longest axis of an array the rewriting makes at a length the host does not know before the run (at
the greatest the length may be): past it, the greatest is not known either."""


# ---- reading a function's array statements -----------------------------------------------------------------

class Lowering(ArrayStatistics, Histograms, Compactions):
    """Rewrites the array statements of one function for one call's arguments (``lower_arrays``)."""

    def __init__(self, source: Source, name: str, args: dict[str, Any]) -> None:
        self.source = source
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
        self.viewed = _viewed(source.node)
        """The names another name may view: an array made in a loop is made once, in one buffer each turn
        writes anew, only where no other name can still hold an earlier turn's array."""
        self.variables: dict[str, Dim | _Turns] = {}
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
        self.held_bounds: tuple[dict[Dim, Dim], int] = ({}, 0)
        """The bounds read from memory that the work item computed into locals (``held``) at the top of its
        body, and how deep that stands."""
        """The arrays the statements of a ``prange`` nest make, one per work item, made before the nest."""
        self.bases: dict[str, Named] = {}
        """Per array the rewriting makes at a length the host does not know: the array it is made in, of the
        greatest length, which it views."""
        self.bindings = Bindings(self.arrays, self.described, self.viewed, self.counter)
        """A name bound anew in straight-line code is a new array of a name of its own (``rebinding``)."""

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def static(self, node: ast.AST, x: Expr, what: str) -> None:
        """Refuse ``what`` of ``x`` where a length of ``x`` is one the host does not know before the run."""
        if not extents.is_static(x.shape):
            raise self.refuse(node, f"{what} of an array of shape {extents.shown(x.shape)}, a length of which is known "
                                    "only at run time, is not one svod has; slice it to lengths the host knows")

    def on_host(self, node: ast.expr, prototypes: bool = False) -> Any:
        """``node`` computed now, on the host: the function's globals, the scalar arguments, the scalars so far,
        and the shapes and dtypes of the arrays (arguments and those made so far) — never their elements, which
        only the run knows (each array stands for itself by its shape; with ``prototypes``, as an array of its
        shape and dtype that the ``_like`` allocations take, reading zeros)."""
        static = {name: value for name, value in self.arrays.items()
                  if name not in self.host and extents.is_static(value.shape)}
        made = {name: np.broadcast_to(np.zeros((), value.dtype), extents.numbers(value.shape)) if prototypes else
                HostShape(extents.numbers(value.shape), value.dtype) for name, value in static.items()}
        return eval(compile(ast.Expression(node), self.source.file, "eval"), self.outer, {**made, **self.host})

    # ---- statements --------------------------------------------------------------------------------------

    def body(self, statements: Sequence[ast.stmt], looped: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        self.level += 1
        try:
            with self.bindings.block():
                for position, stmt in enumerate(statements):
                    self.following = list(statements[position + 1:])
                    made = self.statement(stmt, looped)
                    out += [*self.pending, *made]
                    self.pending = []
        finally:
            self.level -= 1
        return out

    def fused_into_next(self, name: str) -> bool:
        """Whether array ``name``, about to be made, is read by the next statement alone, which stores into no
        array of that name: then that statement computes its expression where it reads it, and it is never
        made (softmax's ``e = np.exp(...)`` then ``e / e.sum(...)``: one kernel). Nothing runs between the
        two, so what it reads is what it would have read."""
        if not self.following:
            return False
        spelled = self.bindings.spelled(name)  # (the statements after it still read the user's names)
        later = [bool(spelled & {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}) for stmt in self.following]
        nxt = self.following[0]
        stored = {n.id for n in ast.walk(nxt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | \
            {t.value.id for t in ast.walk(nxt) if isinstance(t, ast.Subscript) and isinstance(t.ctx, ast.Store)
             and isinstance(t.value, ast.Name)}
        simple = isinstance(nxt, (ast.Assign, ast.AugAssign, ast.Return)) and not any(
            isinstance(n, (ast.For, ast.While)) for n in ast.walk(nxt))
        return later[0] and not any(later[1:]) and not spelled & stored and simple

    def statement(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt]:
        """``stmt`` rewritten; a fused array it would read at a cost is made first (``RepeatedWorkError``)."""
        stmt, rebound = self.bindings.current(stmt, self.following)
        self.changed |= rebound
        outer, self.at = self.at, stmt
        varying = _stored_names(stmt) if isinstance(stmt, (ast.For, ast.While, ast.If)) else set()
        if not isinstance(stmt, ast.If):
            self.forget(varying)  # a loop's turns after the first see what its body assigned
        try:
            while True:
                before = len(self.pending)
                try:
                    made = self.rewritten(stmt, looped)
                    if isinstance(stmt, ast.Assign):
                        for name in _stored_names(stmt):
                            self.stale.pop(name, None)  # bound anew
                    return made
                except RepeatedWorkError as unfuse:
                    del self.pending[before:]  # what the attempt needed, made again by the next
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
                self.pending += self.allocation(fused.statement, made) + self.loops(fused.statement, made,
                                                                                       fused.value)
            except RepeatedWorkError as unfuse:
                del self.pending[before:]
                self.make(unfuse.fused)
                continue
            self.arrays[fused.name] = fused.made = made
            return

    def rewritten(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt]:
        if isinstance(stmt, ast.For) and not self.reader.is_prange(stmt):
            if any(self.is_array_statement(s) for s in ast.walk(stmt) if isinstance(s, ast.stmt) and s is not stmt):
                new = stands_for(copy.copy(stmt), stmt)
                with self.loop_variable(stmt):
                    new.body = self.body(stmt.body, True)
                return [new]
            return [stmt]
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple):
            parts = self.reader.unpacked(stmt)  # h, w = a.shape: a size each
            if parts != [stmt]:
                return [made for part in parts for made in self.statement(part, looped)]
        if isinstance(stmt, ast.If):
            before, test = self.condition(stmt, stmt.test)
            branch = stands_for(copy.copy(stmt), stmt)
            known = dict(self.host)
            branch.test, branch.body = test, self.body(stmt.body, looped)
            self.host = known  # the other branch sees what the host knew before the if
            branch.orelse = self.body(stmt.orelse, looped)
            return [*before, branch]
        if isinstance(stmt, ast.While):
            before, test = self.condition(stmt, stmt.test)
            loop = copy.copy(stmt)
            loop.body = self.body(stmt.body, True)
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
        if not rewritten:
            return [stmt]
        for loop in reversed(nest):
            copied = stands_for(copy.copy(loop), loop)
            copied.body = _widened(body)
            body = [copied]
        return [*made, *body]

    def held(self, value: Dim) -> Dim:
        """Inside a ``prange``, a slice's start or length that reads memory (``A_row[i]``), computed once into a
        local of the work item, before the statement (and read again by the statements after it that slice
        alike, where it stands at the top of the loop's body)."""
        if isinstance(value, int) or not self.work or \
                not any(isinstance(n, ast.Subscript) for n in ast.walk(value.node())):
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

    def condition(self, stmt: ast.stmt, test: ast.expr) -> tuple[list[ast.stmt], ast.expr]:
        """An ``if``'s or ``while``'s test: as written where it reads no array as a whole, else the statements
        that compute its one value into a name of its own, and that name."""
        value = self.value(test)
        if not isinstance(value, Expr):
            return [], test
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
        return [stmt]

    def returned(self, stmt: ast.Return, node: ast.expr) -> list[ast.stmt]:
        """``return <array expressions>``: each a new array (or value) of a name of its own, returned by name."""
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
            if isinstance(value, ast.Call) and sorting_call(self.reader, assigned) is not None:
                made += self.ordered(assigned, False) or []  # a sort's result, returned by its name
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
            if isinstance(computed, Scalar):  # a number the function computes: a name of its own
                if isinstance(value, ast.Name):
                    names.append(value)
                    continue
                made += placed([assign(name, value)], stmt)
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
            return None
        kind, call, owner = found
        operand = owner if owner is not None else call.args[0] if call.args else \
            next((k.value for k in call.keywords if k.arg == "a"), None)
        if operand is None:
            return [stmt]  # the reader says what is missing
        known = self.arrays.get(operand.id) if isinstance(operand, ast.Name) else None
        made: list[ast.stmt] = []
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

    def is_array_statement(self, stmt: ast.stmt) -> bool:
        if self.is_counting_statement(stmt):
            return True
        if isinstance(stmt, (ast.Assign, ast.AugAssign)):
            names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            return bool(names & set(self.arrays)) and not any(
                isinstance(n, ast.For) for n in ast.walk(stmt))
        return False

    def assign(self, stmt: ast.stmt, target: ast.expr, node: ast.expr, op: ast.operator | None,
               looped: bool) -> list[ast.stmt]:
        if isinstance(node, ast.Call) and self.reader.allocation(node) is not None and isinstance(target, ast.Name):
            self.allocated(stmt, target.id, node)
            return [stmt]
        if isinstance(target, ast.Name) and op is None and (target.id not in self.arrays or target.id in self.aliases
                                                             or isinstance(self.arrays[target.id], Fused)):
            value = self.value(node)
            if isinstance(value, Scalar):
                self.remember_scalar(target.id, node)
                return [self.elements_read(stmt)]
            # a view: another name of the memory (a view of a computed value is a new array, computed here)
            if isinstance(value, (Named, Viewed, Transposed, Reshaped)) and not computes(value):
                self.arrays[target.id] = value
                self.aliases.add(target.id)
                return []
            return self.new_array(stmt, target.id, value, looped)
        if isinstance(target, ast.Name) and op is None and target.id in self.arguments:
            raise self.refuse(stmt, f"{target.id} = ... inside a loop or an if would make a new array of the name of "
                                    f"an argument, whose caller's array stays as it is; bind it before the loop or if, "
                                    f"assign into it (`{target.id}[...] = ...`) or use a new name")
        if isinstance(target, ast.Tuple) and op is None:
            self.remember_unpacked(target, node)
        stored = self.target(target)
        if stored is None:
            return [stmt]
        value = self.value(node)
        changed = self.bindings.unwritable(target.id, stored, value) if isinstance(target, ast.Name) and \
            op is None else None
        if changed is not None:
            raise self.refuse(stmt, changed)
        if isinstance(target, ast.Subscript) and isinstance(value, Scalar) and not stored.shape and \
                isinstance(stored, Viewed) and not stored.axes:
            return [self.elements_read(stmt)]  # an element's store of a scalar: a phase as written
        if op is not None:
            value = self.binary(stmt, stored, value, type(op))  # cast to stored's dtype at the store
        if not stored.shape and isinstance(value, Scalar):
            return [stmt]
        return self.store(stmt, stored, value, node if op is None else stmt)

    def elements_read(self, stmt: ast.Assign | ast.AugAssign | ast.stmt) -> ast.stmt:
        """A scalar statement as written, but for an element of a view in it (``x[:k][-1]``), which it reads from
        the view's array (``x[k - 1]``): the kernel language has no slices."""
        if not isinstance(stmt, (ast.Assign, ast.AugAssign)) or not self.viewing(stmt):
            return stmt
        lowering = self

        class Elements(ast.NodeTransformer):
            def visit(self, node: ast.AST) -> ast.AST:
                if isinstance(node, ast.expr) and not isinstance(node, ast.Slice) and lowering.viewing(node):
                    value = lowering.value(node)
                    if isinstance(value, Scalar) and not _slices(value.node):  # (an element: of its base's name)
                        return ast.copy_location(value.node, node)
                return self.generic_visit(node)

        made = copy.copy(stmt)
        made.value = cast(ast.expr, Elements().visit(copy.deepcopy(stmt.value)))  # (an expression's replacement is one)
        if isinstance(made, ast.AugAssign):
            made.target = cast(ast.Name, Elements().visit(copy.deepcopy(made.target)))
        self.changed = True
        return stands_for(ast.fix_missing_locations(made), stmt)

    def viewing(self, node: ast.AST) -> bool:
        """Whether ``node`` reads a slice, or a name of a view (of an array of another name, or of one made for
        each work item), which the kernel language has not."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Slice):
                return True
            if isinstance(inner, ast.Name) and inner.id in self.arrays:
                known = self.arrays[inner.id]
                if not (isinstance(known, Named) and known.name == inner.id):
                    return True
        return False

    def allocated(self, stmt: ast.stmt, name: str, call: ast.Call) -> None:
        if any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.arrays
               for n in ast.walk(call)):
            return  # (a shape or fill an array's element gives) the plan says what it makes of it, where it is made
        try:
            made = self.on_host(call, prototypes=True)
        except Exception:
            return  # the plan says what is wrong with it, where it is made
        self.arrays[name] = Named(made.shape, made.dtype, name)
        self.read |= {n.id for n in ast.walk(call) if isinstance(n, ast.Name)} & set(self.host)

    def remember_scalar(self, name: str, node: ast.expr) -> None:
        try:
            self.host[name] = self.on_host(node)
        except Exception:
            self.host.pop(name, None)

    def new_array(self, stmt: ast.stmt, name: str, value: Expr, looped: bool) -> list[ast.stmt]:
        """``name = <array expression>``: a new array, which the plan makes once (a statement of its own); one
        value (a reduction to a scalar) is a scalar the phase computes, in a loop too."""
        self.changed = True
        if not value.shape:  # one value: a scalar the phase computes, into the name itself
            if reads_masked(value):
                raise self.refuse(stmt, "a reduction of x[mask] is not one svod has: reduce np.where(m, x, 0) "
                                        "(a sum), or count the mask")
            out = Emitter(self.counter)
            element = value.element([], out)
            if isinstance(element, ast.Name) and element.id in out.made.values():  # a reduction's accumulator
                return placed([renamed(s, {element.id: name}) for s in out.statements], stmt)
            return placed([*out.statements, assign(name, element)], stmt)
        compacted = self.compacted(stmt, name, value)
        if compacted is not None:
            return compacted
        if looped and name in self.viewed:
            raise self.refuse(stmt, f"{name} is a new array in every turn of a loop around phases, and another name "
                                    f"views it: make it once before the loop (`{name} = np.empty(...)`) and "
                                    f"assign into it (`{name}[...] = ...`)")
        if self.fused_into_next(name):
            self.arrays[name] = Fused(value.shape, value.dtype, name, value, stmt)
            return []
        made = self.made_array(name, value.shape, value.dtype, stmt)
        return [*self.allocation(stmt, made), *self.loops(stmt, made, value)]

    def made_array(self, name: str, shape: tuple[Dim, ...], dtype: np.dtype, at: ast.AST) -> Expr:
        """Array ``name``, which the rewriting makes, of ``shape``: where a length is one the host does not know
        before the run, made at the greatest (``bases``) and viewed at the length (at each turn of a loop, the
        turn's)."""
        items, positions = self.work_item(at) if self.work else ([], [])
        if extents.is_static(shape) and not items:
            self.arrays[name] = made = Named(shape, dtype, name)
            return made
        largest = next((d for d in (*items, *shape) if extents.high(d) > TEMPORARY_LENGTH), None)
        if largest is not None:
            raise self.refuse(at, f"an array of shape {extents.shown(shape)} is made here, and the host does not know "
                                  f"how long `{largest}` may be before the run, which it makes the array at" +
                                  (" (one for each work item of the prange loops around it)" if items else ""))
        base = self.bases[name] = Named(extents.greatest([*items, *shape]), dtype, name)
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

    def store(self, stmt: ast.stmt, stored: Expr, value: Value, node: ast.AST) -> list[ast.stmt]:
        """``stored[...] = value`` (the user's ``node``), through a temporary where the value reads ``stored``'s
        array elsewhere."""
        self.changed = True
        if read_only(stored):
            raise self.refuse(stmt, "np.broadcast_to's view is read-only (as NumPy's): store into the array it views")
        if isinstance(stored, Masked) and not masked_by(value, stored.key):
            raise self.refuse(stmt, "x[mask] = value takes a scalar, or an expression of arrays under the same mask "
                                    "(`x[m] = y[m] * 2`): NumPy assigns another array's first elements in order")
        if isinstance(value, Expr):
            _broadcast_shape(self, stmt, (stored.shape, value.shape), to=stored.shape)
        base = base_name(stored)
        if base is not None and isinstance(value, Expr) and stored.shape and reads_apart(value, stored, base):
            temporary = self.fresh_temporary(value.shape, value.dtype, node)
            return [*self.allocation(stmt, temporary), *self.loops(stmt, temporary, value),
                    *self.loops(stmt, stored, temporary)]
        return self.loops(stmt, stored, value)

    def fresh_temporary(self, shape: tuple[Dim, ...], dtype: np.dtype, node: ast.AST) -> Expr:
        """A new array of ``shape`` and ``dtype``, which the plan makes, of the user's ``node``."""
        name = f"_svod_t{next(self.counter)}"
        made = self.made_array(name, shape, dtype, node)
        self.described[name] = f"the temporary array of `{code(node, 40)}`"
        return made

    def loops(self, stmt: ast.stmt, stored: Expr, value: Value) -> list[ast.stmt]:
        """The ``prange`` nest that stores ``value`` into each element of ``stored``."""
        variables = [f"_svod_a{next(self.counter)}" for _ in stored.shape]
        index = [load(v) for v in variables]
        out = Emitter(self.counter)
        element = broadcast_element(value, stored.shape, index, out)
        if stored.dtype != (value.dtype if isinstance(value, Expr) else None):
            element = typed(element, stored.dtype)
        if not isinstance(stored, Masked) and reads_masked(value):
            raise self.refuse(stmt, "x[mask] makes an array of the elements where the mask holds, which svod does "
                                    "not compact; store under the mask (`x[m] = ...`) or use np.where(m, x, ...)")
        target = stored.element(index, out)
        kept = stored.mask.element(index, out) if isinstance(stored, Masked) else None
        body: list[ast.stmt] = [*out.statements, assign(target, element) if kept is None else
                                ast.If(kept, [assign(target, element)], [])]
        loops = list(zip(variables, stored.shape, strict=True))
        if isinstance(stored, Gathered):  # through indices that may repeat: in order, NumPy's last write wins
            return placed(_sequential(loops, body), stmt)
        if self.work:  # a work item's own loops (``parallel_nest`` widens a nest's only statement's)
            return placed(_sequential(loops, body, elementwise=True), stmt)
        return placed(_parallel(loops, body), stmt)

    def target(self, node: ast.expr) -> Expr | None:
        """What a store's target names: an array or a view of one (None: not an array's)."""
        if isinstance(node, ast.Name):
            return self.arrays.get(node.id)
        if isinstance(node, ast.Subscript):
            value = self.subscript(node, element=True)  # an element is stored as a view of no axes
            return value if isinstance(value, Expr) else None
        return None

    # ---- expressions -------------------------------------------------------------------------------------

    def value(self, node: ast.expr) -> Value:
        method = _VALUES.get(type(node))
        if method is None:
            if any(isinstance(n, ast.Name) and n.id in self.arrays for n in ast.walk(node)):
                raise self.refuse(node, f"{type(node).__name__} of arrays is not an array expression svod has")
            return self.scalar(node)
        return method(self, node)

    def scalar(self, node: ast.expr) -> Scalar:
        """A scalar of the user's: its node, as written."""
        try:
            sample = self.on_host(node)
        except Exception:
            sample = 0
        if isinstance(sample, np.ndarray):
            sample = sample.flat[0] if sample.size else sample.dtype.type(0)
        return Scalar(copy.deepcopy(node), sample)

    def literal(self, node: ast.Constant) -> Value:
        return Scalar(copy.deepcopy(node), node.value)

    def name_value(self, node: ast.Name) -> Value:
        if node.id in self.stale:
            raise self.refuse(node, self.stale[node.id])
        if node.id in self.arrays:
            return self.arrays[node.id]
        return self.scalar(node)

    def attribute(self, node: ast.Attribute) -> Value:
        owner = self.value(node.value) if isinstance(node.value, (ast.Name, ast.Subscript, ast.Attribute)) and \
            any(isinstance(n, ast.Name) and n.id in self.arrays for n in ast.walk(node.value)) else None
        if isinstance(owner, Expr):
            if node.attr == "T":
                order = tuple(reversed(range(len(owner.shape))))
                return Transposed(tuple(owner.shape[a] for a in order), owner.dtype, owner, order)
            if node.attr in ("shape", "size", "ndim"):
                known = _attribute(owner, node.attr)
                if (node.attr == "shape" and not extents.is_static(known)) or isinstance(known, extents.Extent):
                    raise self.refuse(node, f"{ast.unparse(node)} is a length the host does not know before the run "
                                            f"(`{extents.shown(owner.shape)}`): write it from the slice's bounds")
                return Scalar(constant(known), known)
            if node.attr == "dtype":  # what astype and the allocations read on the host
                return Scalar(copy.deepcopy(node), owner.dtype)
            raise self.refuse(node, f"the attribute {node.attr} of an array expression is not one svod has")
        return self.scalar(node)

    def subscript(self, node: ast.Subscript, element: bool = False) -> Value:
        """``base[items]``: a view, a gather, or one element (a scalar; with ``element``, as a view of no axes,
        which a statement stores into)."""
        part = self.histogram_part(node)
        if part is not None:
            return part
        base = self.value(node.value)
        if not isinstance(base, Expr):
            return self.scalar(node)
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        items = _without_ellipsis(items, len(base.shape))
        advanced = self.advanced(node, base, items)
        if advanced is not None:
            return advanced
        axes: list[tuple[int, Dim, int] | None] = []
        fixed: dict[int, ast.expr] = {}
        shape: list[Dim] = []
        axis = 0
        for item in items:
            if (isinstance(item, ast.Constant) and item.value is None) or \
                    (isinstance(item, ast.Attribute) and item.attr == "newaxis"):
                axes.append(None)
                shape.append(1)
                continue
            if axis >= len(base.shape):
                raise self.refuse(node, f"too many indices for an array of {len(base.shape)} dimension(s)")
            size = base.shape[axis]
            if isinstance(item, ast.Slice):
                step = 1 if item.step is None else self.host_int(item.step)
                if step == 0:
                    raise self.refuse(node, "a slice step cannot be zero")
                lower, upper = (None if part is None else self.bound(part) for part in (item.lower, item.upper))
                start, length = extents.sliced(lower, upper, step, size)  # type: ignore[arg-type]
                start, length = self.held(start), self.held(length)
                shape.append(length)
                axes.append((axis, start, step))  # type: ignore[arg-type]
            else:
                fixed[axis] = self.index(node, item, axis, size)
            axis += 1
        for rest in range(axis, len(base.shape)):
            axes.append((rest, 0, 1))
            shape.append(base.shape[rest])
        if not axes and len(fixed) == len(base.shape) and not computes(base) and not element:  # a scalar
            return Scalar(base.element([fixed[a] for a in range(len(base.shape))], Emitter(self.counter)),
                          base.dtype.type(1))
        return Viewed(tuple(shape), base.dtype, base, tuple(axes), fixed)

    def index(self, node: ast.Subscript, item: ast.expr, axis: int, size: Dim) -> ast.expr:
        """An integer index of axis ``axis`` (of ``size`` elements): checked now where the host knows it; one of
        an axis whose length it does not know must be proven in it (NumPy raises past its end)."""
        index = self.value(item)
        if isinstance(index, Expr):
            raise self.refuse(node, "indexing with an array (a gather) is a prange loop's work; write one")
        known = self.host_int(item, required=False)
        if isinstance(size, int):
            if known is not None and not -size <= known < size:
                raise self.refuse(node, f"index {known} is out of bounds for axis {axis} of size {size}")
            return constant(known % size) if known is not None else index.node
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
            self.variables[name] = _Turns(stmt, dict(self.variables))
        before = dict(self.arrays)
        try:
            yield
        finally:
            self.variables.pop(name, None)
            for array, value in self.arrays.items():
                if before.get(array) is not value and _reads_name(value, name):
                    self.stale[array] = f"{array} is made in the loop at line {stmt.lineno}, and its shape or " \
                                        f"place depends on that loop's variable {name}: read it inside the loop"

    def variable(self, name: str, whole: ast.expr) -> Dim:
        """Loop variable ``name`` as an extent: the values its ``range`` gives it, found where a slice first
        reads it (so a plan is made for the scalar arguments a loop's bounds read only where a slice needs
        them)."""
        known = self.variables[name]
        if isinstance(known, _Turns):
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
        if array in _written(self.work[0]):
            raise self.refuse(node, f"a slice's bound reads {array}, which the prange loop around it writes: svod "
                                    "reads such a bound from an array the loop leaves as it is")
        limits = np.iinfo(dtype)
        names = frozenset(n.id for n in ast.walk(element) if isinstance(n, ast.Name))
        return extents.atom(f"read:{ast.dump(element)}", element, int(limits.min), int(limits.max), names)

    def bound_part(self, node: ast.expr, whole: ast.expr) -> Dim:
        known = self.host_int(node, required=False)
        return known if known is not None else self.symbolic(node, whole)

    def host_int(self, node: ast.expr, required: bool = True) -> int | None:
        """An index or bound the host computes now (a constant, a shape, a scalar argument)."""
        try:
            value = self.on_host(node)
        except Exception as err:
            if not required:
                return None
            raise self.refuse(node, f"a slice's bounds are numbers the host knows before the run ({err})") from err
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            if not required:
                return None
            raise self.refuse(node, "a slice's bounds are integers")
        self.read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(self.host)
        return int(value)

    def host_shape(self, node: ast.expr) -> tuple[int, ...]:
        """A shape the host computes now: an int, or a tuple of ints (``(n, 1)``, a name that holds one)."""
        try:
            value = self.on_host(node)
        except Exception as err:
            raise self.refuse(node, f"a shape is numbers the host knows before the run ({err})") from err
        shape = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in shape):
            raise self.refuse(node, "a shape is an int or a tuple of ints")
        self.read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(self.host)
        return tuple(int(d) for d in shape)

    def binop(self, node: ast.BinOp) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(node.op, ast.MatMult):
            return self.matmul(node, left, right)
        return self.binary(node, left, right, type(node.op))

    def binary(self, node: ast.AST, left: Value, right: Value, op: type[ast.operator]) -> Value:
        fn = _OPERATORS.get(op)
        if fn is None:
            raise self.refuse(node, "this operator is not one svod's array expressions have")
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            return Scalar(ast.BinOp(left.node, op(), right.node), _apply(fn, left.sample, right.sample))
        dtype = _result_dtype(self, node, fn, left, right)
        return self.elementwise(node, lambda c: ast.BinOp(c[0], op(), c[1]), dtype, left, right)

    def dtype_of(self, node: ast.AST, fn: Callable[..., object], *operands: Value) -> np.dtype:
        return _result_dtype(self, node, fn, *operands)

    def elementwise(self, node: ast.AST, combine: Callable[[list[ast.expr]], ast.expr], dtype: np.dtype,
                    *operands: Value) -> Expr:
        shapes = [o.shape for o in operands if isinstance(o, Expr)]
        return Elementwise(_broadcast_shape(self, node, shapes), np.dtype(dtype), combine, operands)

    def unary(self, node: ast.UnaryOp) -> Value:
        operand = self.value(node.operand)
        if isinstance(operand, Scalar):
            return self.scalar(node)
        op = type(node.op)
        if op is ast.Not:
            raise self.refuse(node, "`not` of an array is ambiguous (NumPy refuses it too); use ~ or ==")
        if op is ast.Invert and operand.dtype.kind not in "biu":
            raise self.refuse(node, f"~ of a {operand.dtype} array (NumPy's ~ takes bools and integers)")
        return self.elementwise(node, lambda c: ast.UnaryOp(op(), c[0]), operand.dtype, operand)

    def compare(self, node: ast.Compare) -> Value:
        if len(node.ops) != 1:
            raise self.refuse(node, "a chained comparison of arrays is ambiguous; compare twice and combine with &")
        left, right = self.value(node.left), self.value(node.comparators[0])
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            return self.scalar(node)
        op = type(node.ops[0])
        if op not in _COMPARE:
            raise self.refuse(node, "this comparison is not one svod's array expressions have")
        return self.elementwise(node, lambda c: ast.Compare(c[0], [op()], [c[1]]), np.dtype(bool), left, right)

    def call_value(self, node: ast.Call) -> Value:
        func = node.func
        if isinstance(func, ast.Attribute) and not isinstance(self.reader.resolve(func.value), type(np)):
            owner = self.value(func.value)
            if isinstance(owner, Expr):
                return self.method(node, owner, func.attr)
        callee = self.reader.resolve(func)
        drawn = random_arrays.array_value(self, node, callee)
        if drawn is not None:
            return drawn
        if callee in JOINS and len(node.args) == 1:
            return self.joined(node, callee.__name__)
        args = [self.value(a) for a in node.args]
        if callee is len and len(args) == 1 and isinstance(args[0], Expr) and args[0].shape:
            length = args[0].shape[0]
            return Scalar(node_of(length), length if isinstance(length, int) else 0)
        if callee is np.linalg.norm:
            found = self.extra_function(node, "norm", args)
            if found is not None:
                return found
        if callee in MADE:
            return self.made(node, callee.__name__)
        if not any(isinstance(a, Expr) for a in args):
            return self.scalar(node)
        name = getattr(callee, "__name__", None)
        if callee is getattr(np, str(name), None) or callee is abs:
            return self.numpy_call(node, str(name), args)
        raise self.refuse(node, f"{ast.unparse(func)} of an array is not a function svod's array expressions have")

    def numpy_call(self, node: ast.Call, name: str, args: list[Value]) -> Value:
        if name in SORTING:
            raise self.refuse(node, f"np.{name} is a statement of its own in a jitted function (`y = np.{name}(x)`), "
                                    "not a part of an expression")
        if name in ("abs", "absolute", "fabs"):
            name = "abs"
        if name in UFUNCS and len(args) == 1:
            (x,) = args
            fn = getattr(np, name)
            dtype = _result_dtype(self, node, fn, x)
            if name == "negative":
                return self.elementwise(node, lambda c: ast.UnaryOp(ast.USub(), c[0]), dtype, x)
            cast = dtype if isinstance(x, Expr) and x.dtype != dtype else None
            return self.elementwise(node, lambda c: call(load("abs") if name == "abs" else numpy(name),
                                                         typed(c[0], cast) if cast else c[0]), dtype, x)
        if name in ("maximum", "minimum", "fmax", "fmin") and len(args) == 2:
            dtype = _result_dtype(self, node, getattr(np, name), *args)
            return self.elementwise(node, lambda c: call(numpy(name), c[0], c[1]), dtype, *args)
        if name == "where" and len(args) == 3:
            dtype = _result_dtype(self, node, np.where, *args)
            return self.elementwise(node, lambda c: ast.IfExp(c[0], c[1], c[2]), dtype, *args)
        if name in REDUCTIONS and args and isinstance(args[0], Expr):
            return self.reduction(node, args[0], name, node.keywords, args[1:])
        if name in ("dot", "matmul") and len(args) == 2:
            return self.matmul(node, args[0], args[1])
        if name in ("cumsum", "cumprod") and args and isinstance(args[0], Expr):
            return self.scan(node, args[0], name)
        if name == "outer" and len(args) == 2 and all(isinstance(a, Expr) for a in args):
            a, b = (self.flat(node, a) for a in args)
            dtype = _result_dtype(self, node, np.multiply, a, b)
            return Product((a.shape[0], b.shape[0]), dtype, a, b, outer=True)
        found = self.extra_function(node, name, args)
        if found is not None:
            return found
        if name == "bincount":
            return self.bincount(node)
        if name == "unique":
            raise self.refuse(node, "np.unique makes an array of a length known only after the run: svod makes it as "
                                    "a statement of its own (`u = np.unique(x)`) and returns it")
        if name == "histogram":
            raise self.refuse(node, "np.histogram makes (counts, edges): assign both (`counts, edges = "
                                    "np.histogram(...)`) or take one (`np.histogram(...)[0]`)")
        raise self.refuse(node, f"np.{name} is not a function svod's array expressions have")

    def method(self, node: ast.Call, owner: Expr, name: str) -> Value:
        args = [self.value(a) for a in node.args]
        if name in REDUCTIONS:
            return self.reduction(node, owner, name, node.keywords, args)
        if name == "astype" and len(node.args) == 1:
            try:
                dtype = np.dtype(self.on_host(node.args[0]))
            except Exception as err:
                raise self.refuse(node, f"astype takes a dtype the host knows before the run ({err})") from err
            return self.elementwise(node, lambda c: typed(c[0], dtype), dtype, owner)
        if name == "clip" and len(args) == 2:
            found = self.extra_function(node, "clip", [owner, *args])
            assert found is not None
            return found
        if name == "copy" and not node.args:
            return self.elementwise(node, lambda c: c[0], owner.dtype, owner)
        if name in ("cumsum", "cumprod"):
            return self.scan(node, owner, name, node.func)
        found = self.extra_method(node, owner, name, args)
        if found is not None:
            return found
        raise self.refuse(node, f"the method {name} of an array is not one svod's array expressions have")

    def reduction(self, node: ast.Call, operand: Expr, name: str, keywords: list[ast.keyword],
                  args: list[Value]) -> Value:
        positional = node.args[1:] if len(args) < len(node.args) else node.args  # a function's, a method's
        axis_node = next((k.value for k in keywords if k.arg == "axis"), positional[0] if positional else None)
        if isinstance(axis_node, ast.Constant) and axis_node.value is None:
            axis_node = None  # axis=None: every axis
        keepdims = any(k.arg == "keepdims" and isinstance(k.value, ast.Constant) and k.value.value for k in keywords)
        ndim = len(operand.shape)
        if axis_node is None:
            axes = tuple(range(ndim))
        else:
            given = self.on_host(axis_node)
            given = given if isinstance(given, tuple) else (given,)
            if any(not -ndim <= a < ndim for a in given):
                raise self.refuse(node, f"axis {given} is out of bounds for an array of {ndim} dimension(s)")
            axes = tuple(sorted(a % ndim for a in given))
        if any(extents.low(operand.shape[a]) <= 0 for a in axes) and name in ("max", "min", "amax", "amin", "argmax",
                                                                               "argmin"):
            if all(isinstance(operand.shape[a], int) for a in axes):
                raise self.refuse(node, f"{name} of an empty axis has no identity (NumPy raises too)")
            raise self.refuse(node, f"{name} of an axis whose length (`{extents.shown(operand.shape)}`) may be 0 at "
                                    "run time, where it has no identity (NumPy raises)")
        if name in ("argmax", "argmin") and axis_node is not None and len(axes) != 1:
            raise self.refuse(node, f"{name} takes one axis, or none")
        sample = getattr(np, name)(np.ones([1] * ndim, operand.dtype), axis=axes if name[:3] != "arg" else None)
        dtype = np.asarray(sample).dtype
        shape = tuple(1 if a in axes else s for a, s in enumerate(operand.shape) if keepdims or a not in axes)
        reduced = Reduced(shape, dtype, name, operand, axes, keepdims)
        if not shape and not keepdims:
            return Whole(reduced)
        return reduced

    def cumsum(self, node: ast.AST, x: Expr, axis_node: ast.expr | None, name: str = "cumsum") -> Expr:
        """``np.cumsum`` (``np.cumprod``): computed into an array of its own first (a running sum, or product,
        along the axis, in a loop of each other axis's element), which the expression then reads."""
        if axis_node is None and len(x.shape) != 1:
            x = self.reshaped(node, x, (-1,))
        axis = 0 if axis_node is None else self.host_int(axis_node) % len(x.shape)  # type: ignore[operator]
        self.static(node, x, f"np.{name}")
        dtype = getattr(np, name)(np.ones(1, x.dtype)).dtype
        made = self.fresh_temporary(x.shape, dtype, node)
        outer = [(f"_svod_a{next(self.counter)}", size) for k, size in enumerate(x.shape) if k != axis]
        along = f"_svod_a{next(self.counter)}"
        names = iter(name for name, _ in outer)
        index = [load(along if k == axis else next(names)) for k in range(len(x.shape))]
        out = Emitter(self.counter)
        element = x.element(index, out)
        total = out.fresh("s")
        step = ast.Mult() if name == "cumprod" else ast.Add()
        running = [*out.statements, ast.AugAssign(store(total), step, element),
                   assign(made.element(index, out), load(total))]
        nest = _parallel(outer, [assign(total, typed(constant(int(name == "cumprod")), dtype)),
                                 for_loop(along, call("range", constant(x.shape[axis])), running)])
        self.pending += [*self.allocation(self.at, made), *placed(nest, self.at)]
        return made

    def flat(self, node: ast.AST, value: Value) -> Expr:
        if not isinstance(value, Expr) or len(value.shape) != 1:
            raise self.refuse(node, "np.outer takes two 1-D arrays here")
        return value

    def matmul(self, node: ast.BinOp | ast.Call, a: Value, b: Value) -> Value:
        if not isinstance(a, Expr) or not isinstance(b, Expr) or not 1 <= len(a.shape) <= 3 or \
                not 1 <= len(b.shape) <= 3 or {len(a.shape), len(b.shape)} == {1, 3}:
            raise self.refuse(node, "@ takes arrays of 1 or 2 dimensions, or a batch of matrices (3)")
        inner_b = b.shape[0] if len(b.shape) == 1 else b.shape[-2]
        if a.shape[-1] != inner_b:
            hint = "" if isinstance(inner_b, int) and isinstance(a.shape[-1], int) else \
                " (svod multiplies along lengths known only at run time where it proves them equal)"
            raise self.refuse(node, f"@ of shapes {extents.shown(a.shape)} and {extents.shown(b.shape)}: "
                                    f"{a.shape[-1]} != {inner_b}{hint}")
        if len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] != b.shape[0]:
            raise self.refuse(node, f"@ of batches of {a.shape[0]} and {b.shape[0]} matrices")
        sides = [node.left, node.right] if isinstance(node, ast.BinOp) else node.args
        a, b = (self.operand(sides[0], a) if len(b.shape) > 1 else a), \
            (self.operand(sides[1], b) if len(a.shape) > 1 else b)
        batch = a.shape[:1] if len(a.shape) == 3 else b.shape[:1] if len(b.shape) == 3 else ()
        rows = a.shape[len(a.shape) - 2:-1]
        columns = b.shape[-1:] if len(b.shape) > 1 else ()
        shape = (*batch, *rows, *columns)
        dtype = _result_dtype(self, node, np.matmul, a, b)
        product = Product(tuple(shape), dtype, a, b)
        return Whole(product) if not shape else product


    def operand(self, node: ast.AST, x: Expr) -> Expr:
        """A product's operand (the user's ``node``) that it reads more than once (the other has rows or
        columns): an array or a view of one as it is; one whose elements are computed (``alpha * A``) made into
        an array first, before the statement. The product reads each element once per row or column of the
        other operand, and would compute it again each time (k2mm's
        ``alpha * A @ B``, 800x1100 by 1100x900 float64: 24.3 ms with the multiply in the inner loop, 17.9 ms
        for the product of the array made first)."""
        if isinstance(x, Fused) and x.made is None:
            self.make(x)
            return x
        if not computes(x):
            return x
        made = self.fresh_temporary(x.shape, x.dtype, node)
        self.pending += [*self.allocation(self.at, made), *self.loops(self.at, made, x)]
        return made


@dataclass(frozen=True)
class _Turns:
    """A loop's variable whose values are not found yet (``Lowering.variable``): its loop, and the variables
    of the loops around it as they stood there."""

    loop: ast.For
    outer: dict[str, Dim | _Turns]


def _assigns(body: Sequence[ast.stmt], name: str) -> bool:
    """Whether ``body`` assigns ``name`` (then a loop's variable holds what the body gives it, not the loop's
    value)."""
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for stmt in body for n in ast.walk(stmt))


def _written(loop: ast.For) -> set[str]:
    """The arrays ``loop`` may write: stored into by element, or passed whole to a call (an atomic update,
    ``x.fill``)."""
    found: set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            root = node.value
            while isinstance(root, ast.Subscript):
                root = root.value
            if isinstance(root, ast.Name):
                found.add(root.id)
        elif isinstance(node, ast.Call):
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            found |= {a.id for a in [*node.args, *([owner] if owner is not None else [])] if isinstance(a, ast.Name)}
    return found


def _slices(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Slice) for n in ast.walk(node))


def _stored_names(stmt: ast.stmt) -> set[str]:
    """The names ``stmt`` assigns anywhere in it."""
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _reads_name(value: Expr, name: str) -> bool:
    """Whether an element of ``value``, or its shape, reads ``name``."""
    out = Emitter(itertools.count())
    element = value.element([load(f"_svod_p{k}") for k in range(len(value.shape))], out)
    nodes = [element, *out.statements, *(node_of(d) for d in value.shape)]
    return any(isinstance(n, ast.Name) and n.id == name for node in nodes for n in ast.walk(node))


def _viewed(function: ast.FunctionDef) -> set[str]:
    """The names whose value another name may be bound to whole or as a view (``q = p``, ``v = p[1:]``,
    ``t = p.T``, ``a, b = p, q``; not ``p = p[1:]``, after which no other name holds ``p``'s array)."""
    found: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets):
            itself = node.targets[0].id if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) else None
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for value in [v for written in values for v in viewed_by(written)]:
                if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute) and \
                        value.value.attr == "shape":
                    continue  # a size, not a view
                base = value
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name) and base.id != itself:
                    found.add(base.id)
    return found


def _parallel(loops: list[tuple[str, Dim]], body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` inside a ``prange`` nest over ``loops``, outermost first."""
    for name, size in reversed(loops):
        body = [for_loop(name, call("_svod_prange", node_of(size)), body)]
    return body


def _sequential(loops: list[tuple[str, Dim]], body: list[ast.stmt], elementwise: bool = False) -> list[ast.stmt]:
    """``body`` inside a ``for`` nest over ``loops``, outermost first, in order; ``elementwise``: loops whose
    turns are independent (an elementwise store's), which a ``prange`` nest may take into its grid."""
    for name, size in reversed(loops):
        loop = for_loop(name, call("range", node_of(size)), body)
        setattr(loop, ELEMENTWISE, elementwise)
        body = [loop]
    return body


ELEMENTWISE = "svod_elementwise"
"""The attribute of a loop ``_sequential`` made whose turns are independent."""


def _widened(body: list[ast.stmt]) -> list[ast.stmt]:
    """A ``prange`` nest's body, its one statement's elementwise loops (``_sequential``) made ``prange`` loops
    of the nest: more work items, each storing one element."""
    if len(body) != 1 or not getattr(body[0], ELEMENTWISE, False):
        return body
    loop = copy.copy(body[0])
    assert isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)  # (``_sequential`` made it)
    loop.iter = ast.copy_location(ast.Call(load("_svod_prange"), loop.iter.args, []), loop.iter)
    loop.body = _widened(loop.body)
    return [ast.fix_missing_locations(loop)]


def _without_ellipsis(items: list[ast.expr], ndim: int) -> list[ast.expr]:
    """``items`` with an ``...`` spelled as the full slices it stands for."""
    spots = [k for k, item in enumerate(items) if isinstance(item, ast.Constant) and item.value is Ellipsis]
    if not spots:
        return items
    named = sum(1 for item in items if not (isinstance(item, ast.Constant) and item.value in (None, Ellipsis)))
    full = [ast.Slice() for _ in range(max(ndim - named, 0))]
    return [*items[:spots[0]], *full, *items[spots[0] + 1:]]


def _attribute(owner: Expr, attr: str) -> Any:
    return {"shape": owner.shape, "size": extents.elements(owner.shape), "ndim": len(owner.shape)}[attr]


def _result_dtype(lowering: Lowering, node: ast.AST, fn: Callable[..., Any], *operands: Value) -> np.dtype:
    """The dtype NumPy gives ``fn`` of the operands: ``fn`` applied to one-element arrays of their dtypes (a
    Python number as itself: weak, as NEP 50 has it); where NumPy refuses them, a refusal at ``node``."""
    samples = [o.sample for o in operands]
    with np.errstate(all="ignore"):
        try:
            return np.asarray(fn(*samples)).dtype
        except Exception as err:  # NumPy's own complaint, at the user's line
            raise lowering.refuse(node, f"NumPy refuses this for operands of {_kinds(operands)} ({err})") from err


def _kinds(operands: Sequence[Value]) -> str:
    return " and ".join(str(o.dtype) if isinstance(o, Expr) else type(o.sample).__name__ for o in operands)


def _apply(fn: Callable[..., Any], *samples: Any) -> Any:
    with np.errstate(all="ignore"):
        try:
            return fn(*samples)
        except Exception:
            return 0


def _broadcast_shape(lowering: Lowering, node: ast.AST, shapes: Sequence[tuple[Dim, ...]],
                     to: tuple[Dim, ...] | None = None) -> tuple[Dim, ...]:
    """NumPy's broadcast of ``shapes``; lengths the host does not know before the run broadcast where they
    are provably equal (``extents.broadcast``)."""
    shape = extents.broadcast(shapes)
    if shape is None:
        static = all(extents.is_static(s) for s in shapes)
        raise lowering.refuse(node, f"shapes {' and '.join(map(extents.shown, shapes))} do not broadcast" + (
            "" if static else " (svod broadcasts lengths known only at run time where it proves them equal)"))
    if to is not None and shape != to:
        raise lowering.refuse(node, f"a value of shape {extents.shown(shapes[1])} cannot be stored into an array view "
                                    f"of shape {extents.shown(to)}")
    return shape



def lower_arrays(source: Source, name: str, args: dict[str, Any]) -> tuple[Source, set[str]] | None:
    """``source`` with its array statements rewritten as loops for arguments like ``args`` (the module
    docstring), and the scalar arguments whose values that read; None when it has none."""
    draws = random_arrays.Draws(source, name)
    source = draws.prepared()
    lowering = Lowering(source, name, args)
    node = stands_for(copy.copy(source.node), source.node)
    node.body = lowering.body(source.node.body, False)
    names = {**source.names, **MATH_HELPERS, "_svod_np": np, "_svod_prange": pylang.prange, **KERNEL_NAMES}
    node.body = draws.placed(Source(node, source.file, names))  # the random state the plan carries
    if not lowering.changed and not draws.changed:
        return None
    return Source(node, source.file, names, {**lowering.described, **draws.described}), lowering.read


_VALUES: dict[type, Callable[[Lowering, Any], Value]] = {
    ast.Constant: Lowering.literal, ast.Name: Lowering.name_value, ast.Attribute: Lowering.attribute,
    ast.Subscript: Lowering.subscript, ast.BinOp: Lowering.binop, ast.UnaryOp: Lowering.unary,
    ast.Compare: Lowering.compare, ast.Call: Lowering.call_value, ast.Tuple: Lowering.numbers_value,
}
"""The array expression each kind of AST node makes (``Lowering.value``)."""
