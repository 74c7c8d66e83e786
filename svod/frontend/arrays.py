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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import pylang, random_arrays
from svod.frontend.array_calls import ArrayCalls, Gathered, Masked, masked_by, reads_masked
from svod.frontend.array_exprs import (
    Counted,
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
from svod.frontend.nodes import assign, call, code, constant, for_loop, load, placed, stands_for, store
from svod.frontend.phases import SORTING, Reader, refusal, renamed, sorting_call
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


# ---- reading a function's array statements -----------------------------------------------------------------

class Lowering(ArrayCalls):
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
        self.host.update({n: v for n, v in args.items() if isinstance(v, np.ndarray)})
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
        self.viewed = _viewed(source.node)
        """The names another name may view: an array made in a loop is made once, in one buffer each turn
        writes anew, only where no other name can still hold an earlier turn's array."""

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def on_host(self, node: ast.expr) -> Any:
        """``node`` computed now, on the host: the function's globals, the arguments, the scalars so far."""
        return eval(compile(ast.Expression(node), self.source.file, "eval"), self.outer, self.host)

    # ---- statements --------------------------------------------------------------------------------------

    def body(self, statements: Sequence[ast.stmt], looped: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for position, stmt in enumerate(statements):
            self.following = list(statements[position + 1:])
            made = self.statement(stmt, looped)
            out += [*self.pending, *made]
            self.pending = []
        return out

    def fused_into_next(self, name: str) -> bool:
        """Whether array ``name``, about to be made, is read by the next statement alone, which stores into no
        array of that name: then that statement computes its expression where it reads it, and it is never
        made (softmax's ``e = np.exp(...)`` then ``e / e.sum(...)``: one kernel). Nothing runs between the
        two, so what it reads is what it would have read."""
        if not self.following:
            return False
        later = [name in {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} for stmt in self.following]
        nxt = self.following[0]
        stored = {n.id for n in ast.walk(nxt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | \
            {t.value.id for t in ast.walk(nxt) if isinstance(t, ast.Subscript) and isinstance(t.ctx, ast.Store)
             and isinstance(t.value, ast.Name)}
        simple = isinstance(nxt, (ast.Assign, ast.AugAssign, ast.Return)) and not any(
            isinstance(n, (ast.For, ast.While)) for n in ast.walk(nxt))
        return later[0] and not any(later[1:]) and name not in stored and simple

    def statement(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt]:
        """``stmt`` rewritten; a fused array it would read at a cost is made first (``RepeatedWorkError``)."""
        outer, self.at = self.at, stmt
        try:
            while True:
                before = len(self.pending)
                try:
                    return self.rewritten(stmt, looped)
                except RepeatedWorkError as unfuse:
                    del self.pending[before:]  # what the attempt needed, made again by the next
                    self.make(unfuse.fused)
        finally:
            self.at = outer

    def make(self, fused: Fused) -> None:
        """Make fused array ``fused`` after all, before the statement being rewritten (and, first, a fused
        array that making it would read at a cost)."""
        while True:
            before = len(self.pending)
            made = Named(fused.shape, fused.dtype, fused.name)
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
                new.body = self.body(stmt.body, True)
                return [new]
            return [stmt]
        if isinstance(stmt, ast.If):
            before, test = self.condition(stmt, stmt.test)
            branch = stands_for(copy.copy(stmt), stmt)
            branch.test, branch.body, branch.orelse = test, self.body(stmt.body, looped), self.body(stmt.orelse, looped)
            return [*before, branch]
        if isinstance(stmt, ast.While):
            before, test = self.condition(stmt, stmt.test)
            loop = copy.copy(stmt)
            loop.body = self.body(stmt.body, True)
            if before:  # the test computes on arrays: it is computed again at the top of each turn
                stop = placed([ast.If(ast.UnaryOp(ast.Not(), test), [ast.Break()], [])], stmt)[0]
                loop.test, loop.body = placed([constant(True)], stmt)[0], [*before, stop, *loop.body]
            return [stands_for(loop, stmt)]
        ordered = self.ordered(stmt, looped)
        if ordered is not None:
            return ordered
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return self.called(stmt, stmt.value, looped)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            return self.assign(stmt, stmt.targets[0], stmt.value, None, looped)
        if isinstance(stmt, ast.AugAssign):
            return self.assign(stmt, stmt.target, stmt.value, stmt.op, looped)
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            return self.returned(stmt, stmt.value)
        return [stmt]

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
        for value in values:
            bound = self.arrays.get(value.id) if isinstance(value, ast.Name) else None
            if isinstance(value, ast.Name) and (bound is None or (isinstance(bound, Named) and bound.name == value.id)):
                names.append(value)  # an array of its own name, or a scalar
                continue
            name = f"_svod_r{next(self.counter)}"
            assigned = placed([ast.Assign([ast.Name(name, ast.Store())], value)], stmt)[0]
            if isinstance(value, ast.Call) and sorting_call(self.reader, assigned) is not None:
                made += self.ordered(assigned, False) or []  # a sort's result, returned by its name
                names.append(load(name))
                continue
            computed = self.value(value)
            self.described[name] = f"the returned `{code(value, 40)}`"
            if isinstance(computed, Scalar):  # a number the function computes: a name of its own
                if isinstance(value, ast.Name):
                    names.append(value)
                    continue
                made += placed([assign(name, value)], stmt)
                names.append(load(name))
                continue
            made += self.new_array(stmt, name, computed, False)
            names.append(load(name))
        if not made:
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
            if owner is not None and kind == "sort":
                raise self.refuse(stmt, f"{ast.unparse(owner)}.sort() sorts a view in place, which svod does not; "
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
        if isinstance(stmt, ast.Assign) and kind in ("sort", "argsort") and isinstance(stmt.targets[0], ast.Name):
            size = int(np.prod(known.shape))
            self.arrays[stmt.targets[0].id] = Named((size,), known.dtype if kind == "sort" else np.dtype(np.intp),
                                                    stmt.targets[0].id)
        return [*made, stmt]

    def is_array_statement(self, stmt: ast.stmt) -> bool:
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
                return [stmt]
            # a view: another name of the memory (a view of a computed value is a new array, computed here)
            if isinstance(value, (Named, Viewed, Transposed, Reshaped)) and not computes(value):
                self.arrays[target.id] = value
                self.aliases.add(target.id)
                return []
            return self.new_array(stmt, target.id, value, looped)
        if isinstance(target, ast.Name) and op is None and target.id in self.arguments:
            raise self.refuse(stmt, f"{target.id} = ... would make a new array of the name of an argument, whose "
                                    f"caller's array stays as it is; assign into it (`{target.id}[...] = ...`) or "
                                    "use a new name")
        stored = self.target(target)
        if stored is None:
            return [stmt]
        value = self.value(node)
        if op is not None:
            value = self.binary(stmt, stored, value, type(op))  # cast to stored's dtype at the store
        if not stored.shape and isinstance(value, Scalar):
            return [stmt]  # an element's store: a phase as written
        return self.store(stmt, stored, value, node if op is None else stmt)

    def allocated(self, stmt: ast.stmt, name: str, call: ast.Call) -> None:
        try:
            made = self.on_host(call)
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
        if looped and name in self.viewed:
            raise self.refuse(stmt, f"{name} is a new array in every turn of a loop around phases, and another name "
                                    f"views it: make it once before the loop (`{name} = np.empty(...)`) and "
                                    f"assign into it (`{name}[...] = ...`)")
        if self.fused_into_next(name):
            self.arrays[name] = Fused(value.shape, value.dtype, name, value, stmt)
            return []
        self.arrays[name] = made = Named(value.shape, value.dtype, name)
        return [*self.allocation(stmt, made), *self.loops(stmt, made, value)]

    def allocation(self, stmt: ast.stmt, made: Named) -> list[ast.stmt]:
        """``made = np.empty(shape, dtype)``: a temporary the plan makes."""
        shape = ast.Tuple([constant(size) for size in made.shape], ast.Load())
        return placed([assign(made.name, call(numpy("empty"), shape, numpy(made.dtype.name)))], stmt)

    def store(self, stmt: ast.stmt, stored: Expr, value: Value, node: ast.AST) -> list[ast.stmt]:
        """``stored[...] = value`` (the user's ``node``), through a temporary where the value reads ``stored``'s
        array elsewhere."""
        self.changed = True
        if isinstance(stored, Masked) and not masked_by(value, stored.key):
            raise self.refuse(stmt, "x[mask] = value takes a scalar, or an expression of arrays under the same mask "
                                    "(`x[m] = y[m] * 2`): NumPy assigns another array's first elements in order")
        if isinstance(value, Expr):
            _broadcast_shape(self, stmt, (stored.shape, value.shape), to=stored.shape)
        base = base_name(stored)
        if base is not None and isinstance(value, Expr) and reads_apart(value, stored, base):
            temporary = self.fresh_temporary(value.shape, value.dtype, node)
            return [*self.allocation(stmt, temporary), *self.loops(stmt, temporary, value),
                    *self.loops(stmt, stored, temporary)]
        return self.loops(stmt, stored, value)

    def fresh_temporary(self, shape: tuple[int, ...], dtype: np.dtype, node: ast.AST) -> Named:
        """A new array of ``shape`` and ``dtype``, which the plan makes, of the user's ``node``."""
        name = f"_svod_t{next(self.counter)}"
        self.arrays[name] = made = Named(shape, dtype, name)
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
        return placed(_parallel(loops, body), stmt)

    def target(self, node: ast.expr) -> Expr | None:
        """What a store's target names: an array or a view of one (None: not an array's)."""
        if isinstance(node, ast.Name):
            return self.arrays.get(node.id)
        if isinstance(node, ast.Subscript):
            value = self.value(node)
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
                return Scalar(constant(known), known)
            if node.attr == "dtype":  # what astype and the allocations read on the host
                return Scalar(copy.deepcopy(node), owner.dtype)
            raise self.refuse(node, f"the attribute {node.attr} of an array expression is not one svod has")
        return self.scalar(node)

    def subscript(self, node: ast.Subscript) -> Value:
        base = self.value(node.value)
        if not isinstance(base, Expr):
            return self.scalar(node)
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        items = _without_ellipsis(items, len(base.shape))
        advanced = self.advanced(node, base, items)
        if advanced is not None:
            return advanced
        axes: list[tuple[int, int, int] | None] = []
        fixed: dict[int, ast.expr] = {}
        shape: list[int] = []
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
                bounds = [None if part is None else self.host_int(part) for part in (item.lower, item.upper, item.step)]
                if bounds[2] == 0:
                    raise self.refuse(node, "a slice step cannot be zero")
                start, stop, step = slice(*bounds).indices(size)
                shape.append(len(range(start, stop, step)))
                axes.append((axis, start, step))
            else:
                index = self.value(item)
                if isinstance(index, Expr):
                    raise self.refuse(node, "indexing with an array (a gather) is a prange loop's work; write one")
                known = self.host_int(item, required=False)
                if known is not None and not -size <= known < size:
                    raise self.refuse(node, f"index {known} is out of bounds for axis {axis} of size {size}")
                fixed[axis] = constant(known % size) if known is not None else index.node
            axis += 1
        for rest in range(axis, len(base.shape)):
            axes.append((rest, 0, 1))
            shape.append(base.shape[rest])
        if not axes and len(fixed) == len(base.shape) and not computes(base):  # an element of memory: a scalar
            return Scalar(base.element([fixed[a] for a in range(len(base.shape))], Emitter(self.counter)),
                          base.dtype.type(1))
        return Viewed(tuple(shape), base.dtype, base, tuple(axes), fixed)

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
        if callee in (np.concatenate, np.stack) and len(node.args) == 1:
            return self.joined(node, callee.__name__)
        args = [self.value(a) for a in node.args]
        if callee is len and len(args) == 1 and isinstance(args[0], Expr) and args[0].shape:
            return Scalar(constant(args[0].shape[0]), args[0].shape[0])
        if callee is np.linalg.norm:
            found = self.extra_function(node, "norm", args)
            if found is not None:
                return found
        if callee in (np.arange, np.linspace):
            return self.counted(node, callee.__name__)
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
        if name == "cumsum" and len(args) == 1 and isinstance(args[0], Expr):
            return self.cumsum(node, args[0], next((k.value for k in node.keywords if k.arg == "axis"), None))
        if name == "outer" and len(args) == 2 and all(isinstance(a, Expr) for a in args):
            a, b = (self.flat(node, a) for a in args)
            dtype = _result_dtype(self, node, np.multiply, a, b)
            return Product((a.shape[0], b.shape[0]), dtype, a, b, outer=True)
        found = self.extra_function(node, name, args)
        if found is not None:
            return found
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
        if name == "cumsum":
            return self.cumsum(node, owner, next((k.value for k in node.keywords if k.arg == "axis"),
                                                 node.args[0] if node.args else None))
        if name in ("reshape", "ravel", "flatten"):
            shape = (-1,) if name != "reshape" else tuple(self.host_int(a) for a in node.args) if \
                not (len(node.args) == 1 and isinstance(node.args[0], ast.Tuple)) else \
                tuple(self.host_int(a) for a in node.args[0].elts)
            return self.reshaped(node, owner, tuple(int(d) for d in shape if d is not None))
        raise self.refuse(node, f"the method {name} of an array is not one svod's array expressions have")

    def reduction(self, node: ast.Call, operand: Expr, name: str, keywords: list[ast.keyword],
                  args: list[Value]) -> Value:
        positional = node.args[1:] if len(args) < len(node.args) else node.args  # a function's, a method's
        axis_node = next((k.value for k in keywords if k.arg == "axis"), positional[0] if positional else None)
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
        if any(operand.shape[a] == 0 for a in axes) and name in ("max", "min", "amax", "amin", "argmax", "argmin"):
            raise self.refuse(node, f"{name} of an empty axis has no identity (NumPy raises too)")
        if name in ("argmax", "argmin") and axis_node is not None and len(axes) != 1:
            raise self.refuse(node, f"{name} takes one axis, or none")
        if name in ("argmax", "argmin"):
            keepdims = keepdims and axis_node is not None
        sample = getattr(np, name)(np.ones([1] * ndim, operand.dtype), axis=axes if name[:3] != "arg" else None)
        dtype = np.asarray(sample).dtype
        shape = tuple(1 if a in axes else s for a, s in enumerate(operand.shape) if keepdims or a not in axes)
        reduced = Reduced(shape, dtype, name, operand, axes, keepdims)
        if not shape and not keepdims:
            return Whole(reduced)
        return reduced

    def counted(self, node: ast.Call, name: str) -> Expr:
        """``np.arange(start, stop, step)`` or ``np.linspace(start, stop, num)``, of host-known numbers."""
        try:
            made = self.on_host(node)
        except Exception as err:
            raise self.refuse(node, f"np.{name}'s arguments are numbers the host knows before the run ({err})") from err
        self.read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(self.host)
        self.changed = True
        if len(made) < 2:
            only = made[0].item() if len(made) else 0
            return Counted(made.shape, made.dtype, lambda i: constant(only))
        start, step = made[0].item(), (made[1] - made[0]).item()
        if name == "linspace":  # first + (last - first) * i / (count - 1)
            first, last, count = made[0].item(), made[-1].item(), len(made)
            return Counted(made.shape, made.dtype, lambda i: ast.BinOp(constant(first), ast.Add(), ast.BinOp(
                ast.BinOp(ast.BinOp(constant(last), ast.Sub(), constant(first)), ast.Mult(), i), ast.Div(),
                constant(count - 1))))
        return Counted(made.shape, made.dtype, lambda i: typed(
            ast.BinOp(constant(start), ast.Add(), ast.BinOp(constant(step), ast.Mult(), i)), made.dtype))

    def cumsum(self, node: ast.AST, x: Expr, axis_node: ast.expr | None) -> Expr:
        """``np.cumsum``: computed into an array of its own first (a running sum along the axis, in a loop of
        each other axis's element), which the expression then reads."""
        if axis_node is None and len(x.shape) != 1:
            x = self.reshaped(node, x, (-1,))
        axis = 0 if axis_node is None else self.host_int(axis_node) % len(x.shape)  # type: ignore[operator]
        dtype = np.cumsum(np.ones(1, x.dtype)).dtype
        made = self.fresh_temporary(x.shape, dtype, node)
        outer = [(f"_svod_a{next(self.counter)}", size) for k, size in enumerate(x.shape) if k != axis]
        along = f"_svod_a{next(self.counter)}"
        names = iter(name for name, _ in outer)
        index = [load(along if k == axis else next(names)) for k in range(len(x.shape))]
        out = Emitter(self.counter)
        element = x.element(index, out)
        total = out.fresh("s")
        running = [*out.statements, ast.AugAssign(store(total), ast.Add(), element),
                   assign(made.element(index, out), load(total))]
        nest = _parallel(outer, [assign(total, typed(constant(0), dtype)),
                                 for_loop(along, call("range", constant(x.shape[axis])), running)])
        self.pending += [*self.allocation(self.at, made), *placed(nest, self.at)]
        return made

    def reshaped(self, node: ast.AST, x: Expr, shape: tuple[int, ...]) -> Expr:
        size = int(np.prod(x.shape))
        if shape.count(-1) == 1:
            known = int(np.prod([d for d in shape if d != -1]))
            shape = tuple(size // known if d == -1 and known else d for d in shape)
        if int(np.prod(shape)) != size or any(d < 0 for d in shape):
            raise self.refuse(node, f"cannot reshape an array of size {size} into shape {shape}")
        return Reshaped(shape, x.dtype, x)

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
            raise self.refuse(node, f"@ of shapes {a.shape} and {b.shape}: {a.shape[-1]} != {inner_b}")
        if len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] != b.shape[0]:
            raise self.refuse(node, f"@ of batches of {a.shape[0]} and {b.shape[0]} matrices")
        sides = [node.left, node.right] if isinstance(node, ast.BinOp) else node.args
        a, b = self.operand(sides[0], a), self.operand(sides[1], b)
        batch = a.shape[:1] if len(a.shape) == 3 else b.shape[:1] if len(b.shape) == 3 else ()
        rows = a.shape[len(a.shape) - 2:-1]
        columns = b.shape[-1:] if len(b.shape) > 1 else ()
        shape = (*batch, *rows, *columns)
        dtype = _result_dtype(self, node, np.matmul, a, b)
        product = Product(tuple(shape), dtype, a, b)
        return Whole(product) if not shape else product


    def operand(self, node: ast.AST, x: Expr) -> Expr:
        """A product's operand (the user's ``node``): an array or a view of one as it is; one whose elements are
        computed (``alpha * A``) made into an array first, before the statement. The product reads each element
        once per row or column of the other operand, and would compute it again each time (k2mm's
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


def _viewed(function: ast.FunctionDef) -> set[str]:
    """The names whose value another name may be bound to whole or as a view (``q = p``, ``v = p[1:]``,
    ``t = p.T``, ``a, b = p, q``)."""
    found: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for value in values:
                if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute) and \
                        value.value.attr == "shape":
                    continue  # a size, not a view
                base = value
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name):
                    found.add(base.id)
    return found


def _parallel(loops: list[tuple[str, int]], body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` inside a ``prange`` nest over ``loops``, outermost first."""
    for name, size in reversed(loops):
        body = [for_loop(name, call("_svod_prange", constant(size)), body)]
    return body


def _sequential(loops: list[tuple[str, int]], body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` inside a ``for`` nest over ``loops``, outermost first, in order."""
    for name, size in reversed(loops):
        body = [for_loop(name, call("range", constant(size)), body)]
    return body


def _without_ellipsis(items: list[ast.expr], ndim: int) -> list[ast.expr]:
    """``items`` with an ``...`` spelled as the full slices it stands for."""
    spots = [k for k, item in enumerate(items) if isinstance(item, ast.Constant) and item.value is Ellipsis]
    if not spots:
        return items
    named = sum(1 for item in items if not (isinstance(item, ast.Constant) and item.value in (None, Ellipsis)))
    full = [ast.Slice() for _ in range(max(ndim - named, 0))]
    return [*items[:spots[0]], *full, *items[spots[0] + 1:]]


def _attribute(owner: Expr, attr: str) -> Any:
    return {"shape": owner.shape, "size": int(np.prod(owner.shape)), "ndim": len(owner.shape)}[attr]


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


def _broadcast_shape(lowering: Lowering, node: ast.AST, shapes: Sequence[tuple[int, ...]],
                     to: tuple[int, ...] | None = None) -> tuple[int, ...]:
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError as err:
        raise lowering.refuse(node, f"shapes {' and '.join(map(str, shapes))} do not broadcast") from err
    if to is not None and shape != to:
        raise lowering.refuse(node, f"a value of shape {shapes[1]} cannot be stored into an array view of shape {to}")
    return tuple(shape)



def lower_arrays(source: Source, name: str, args: dict[str, Any]) -> tuple[Source, set[str]] | None:
    """``source`` with its array statements rewritten as loops for arguments like ``args`` (the module
    docstring), and the scalar arguments whose values that read; None when it has none."""
    draws = random_arrays.Draws(source, name)
    source = draws.prepared()
    lowering = Lowering(source, name, args)
    node = stands_for(copy.copy(source.node), source.node)
    node.body = lowering.body(source.node.body, False)
    names = {**source.names, "_svod_np": np, "_svod_prange": pylang.prange}
    node.body = draws.placed(Source(node, source.file, names))  # the random state the plan carries
    if not lowering.changed and not draws.changed:
        return None
    return Source(node, source.file, names, {**lowering.described, **draws.described}), lowering.read


_VALUES: dict[type, Callable[[Lowering, Any], Value]] = {
    ast.Constant: Lowering.literal, ast.Name: Lowering.name_value, ast.Attribute: Lowering.attribute,
    ast.Subscript: Lowering.subscript, ast.BinOp: Lowering.binop, ast.UnaryOp: Lowering.unary,
    ast.Compare: Lowering.compare, ast.Call: Lowering.call_value,
}
"""The array expression each kind of AST node makes (``Lowering.value``)."""
