"""The translator behind ``@svod.kernel``: a Python function's source (its ``ast``) to kernel UOps, built
through ``KernelBuilder``. Nothing of the function's body runs in Python.

::

    def f(out, x):                       Translator
        for r in svod.prange(n):   ──▶    RANGE(GLOBAL)          (a sequential ``range``: RANGE(LOOP))
            s = 0.0                        a local: a value, no node yet
            for c in range(m):             the body is stated twice once it is known to change ``s``:
                s += x[r, c]               ``s`` becomes REDUCE(x[r, c'], c', ADD) over a REDUCE range
            out[r] = s             ──▶    STORE(INDEX(out, r), REDUCE) through the builder

- **Values**: a local is a UOp, or a Python number until it meets one. Dtypes follow NumPy 2's promotion
  (``svod.frontend.promotion``): a Python number is weak, two typed values promote, a local that holds values
  of two dtypes unifies them; two Python numbers compute in Python. ``//`` and ``%`` floor, as Python's do
  (the IR's truncate, as C's: the floored form costs nothing where both operands are proven non-negative).
- **Loops**: ``svod.prange`` is a GLOBAL range, ``range`` a LOOP range. Every effect in a loop names the
  loop's range (``STORE(..., *ranges)``), so a body that does not use its variable still runs every turn.
  A local that the body changes is stated again with a placeholder in its place: what the body makes of
  the placeholder says whether it is a reduction (``s op= e``, ``s = max(s, e)``, also under ``if``), and
  anything else is refused.
- **if**: a condition that is a UOp gates the stores under it and makes each local it changes a
  ``where``; a Python constant keeps one branch.
- **Errors**: each statement's translation is wrapped, so any ``SvodError`` it raises names the file and
  line (``SvodError.locate``); nodes, buffers and dtypes remember the statement that made them first, so
  errors raised later (races, bounds, dtypes) can be located too (``Located``).

The translator is built in parts, one module each, each on the one before: ``context`` (what a translation holds,
how it refuses) <- ``arithmetic`` (values combined and converted) <- ``memory`` (buffer accesses, stores, carried
locals' cells) <- ``randoms`` (``np.random`` draws and where each is made) <- ``expressions`` <- ``loops`` <-
``accumulating`` (a sum into an array's element as a local's) <- this module (statements, ``if``, the final
kernel). ``values`` says what a name can stand for, ``source`` what a
kernel's source is and where its parts come from.

Every walk here follows the source's order and the UOps' toposorts; no set of UOps is iterated.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Sequence
from typing import Any

from svod.errors import KernelSyntaxError, SvodError
from svod.frontend import pylang
from svod.frontend.accumulating import Accumulating
from svod.frontend.accumulations import Held
from svod.frontend.arithmetic import BINARY
from svod.frontend.loops import lazy
from svod.frontend.memory import unstated
from svod.frontend.values import (
    ArrayValue,
    Builtin,
    ComplexArray,
    ComplexMethod,
    ComplexValue,
    MathFunction,
    RandomFunction,
    describe,
    is_atomic,
    is_number,
)
from svod.ir import AxisKind, Ops, UOp, substitute
from svod.ir.validate import ATOMIC_DTYPES


class Translator(Accumulating):
    """Builds one kernel from a function's source and its arguments' values (arrays, scalars, constants)."""

    # ---- driving ----------------------------------------------------------------------------------------

    def translate(self) -> UOp:
        body = self.source.node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        self.block(body, top=True)
        if not self.k.effects:
            raise KernelSyntaxError(f"{self.where(self.source.node)}: kernel {self.name} stores nothing; a kernel "
                                    "writes its results into array arguments", kernel=self.name, stage="build",
                                    value=self.name)
        return self._sized(self._renumbered(unstated(self.k.build(), self.stated)))

    def least_size(self, var: UOp) -> int:
        """The least value size variable ``var`` may take: its own, or what a constant index needs of it."""
        return max([var.arg[1], *(size for size, _, _ in self.least_sizes.get(var, ()))])

    def _sized(self, sink: UOp) -> UOp:
        """``sink`` with each size variable bounded below by its least size (``least_sizes``)."""
        raised = {var: UOp.define_var(var.arg[0], self.least_size(var), var.arg[2], var.dtype)
                  for var in self.least_sizes if self.least_size(var) > var.arg[1]}
        if not raised:
            return sink
        sized = substitute(sink, raised)
        self.located.record(self.where(self.source.node), [sized])
        return sized

    def block(self, body: Sequence[ast.stmt], top: bool = False) -> None:
        body = self.held_elements(body)
        position = 0
        while position < len(body):
            stmt = body[position]
            if isinstance(stmt, ast.Return):
                last = position == len(body) - 1 and top
                if stmt.value is not None or not last:
                    what = "returning a value" if stmt.value is not None else "return before the end"
                    raise KernelSyntaxError(
                        f"{self.where(stmt)}: {what} is not supported in a kernel: a kernel writes its results into "
                        "array arguments",
                        kernel=self.name, stage="build", value="return")
                position += 1
                continue
            rewritten = self.rewritten(body, position)
            if rewritten is not None:  # a region that neither breaks nor continues
                statements, consumed = rewritten
                for each in statements:
                    self.statement(each)
                position += consumed
                continue
            turn = self.turns[-1] if self.turns else None
            mark = 0 if turn is None else len(turn.leaves)
            self.statement(stmt)
            position += 1
            if turn is None or len(turn.leaves) == mark:
                continue
            left = [c for c in turn.leaves[mark:] if c is not None]  # the statement may leave: a break or continue
            if len(left) == len(turn.leaves) - mark and position < len(body):
                self.unless_left(body[position:], functools.reduce(lambda a, b: a | b, map(lazy, left)), stmt)
            return  # the rest ran where the turn was not left, or never (after a break or continue it always takes)

    def unless_left(self, rest: Sequence[ast.stmt], left: UOp, stmt: ast.stmt) -> None:
        """The statements ``rest`` after ``stmt``, which leaves the loop's turn where ``left`` holds: they run
        only where it does not, and each local keeps, where it does, its value when the turn was left."""
        saved_env, saved_gate = dict(self.env), self.gate
        stay = left.ne(True)
        self.gate = stay if saved_gate is None else saved_gate & stay
        try:
            self.block(rest)
        finally:
            self.gate = saved_gate
        self.env = self.merged(left, saved_env, self.env, stmt, f"it is assigned after the break or continue at "
                                                                 f"line {stmt.lineno}, which may skip it")

    def statement(self, stmt: ast.stmt) -> None:
        where = self.where(stmt)
        mark = len(self.k.effects)
        try:
            self._statement(stmt)
        except SvodError as err:
            if err.kernel is None:
                err.name_kernel(self.name)
            if err.location is None and not err.detail.startswith(f"{self.source.file}:"):
                err.locate(where)  # the innermost statement names it first
            raise
        self.located.record(where, [*self.k.effects[mark:], *(v for v in self.env.values() if isinstance(v, UOp))])

    def _statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, Held):  # a store into an element held in a local: the store's conversion
            self.assign(stmt.targets[0], self.cast(self.fitting(self.expr(stmt.value), stmt.dtype), stmt.dtype))
        elif isinstance(stmt, ast.Assign):
            value = self.expr(stmt.value)
            for target in stmt.targets:
                self.assign(target, value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is None or not isinstance(stmt.target, ast.Name):
                raise self.unsupported(stmt, ": annotate a local as it is assigned, 'x: svod.float32 = 0.0'")
            dtype = self.static_dtype(stmt.annotation)
            self.assign(stmt.target, self.cast(self.fitting(self.expr(stmt.value), dtype), dtype))
        elif isinstance(stmt, ast.AugAssign):
            self.augmented(stmt)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, ast.While):
            self.while_loop(stmt)
        elif isinstance(stmt, (ast.Break, ast.Continue)):
            self.leave(stmt)
        elif isinstance(stmt, ast.If):
            self.branch(stmt)
        elif isinstance(stmt, ast.Expr):
            self.expression_statement(stmt)
        elif not isinstance(stmt, ast.Pass):  # a ``pass`` builds nothing
            raise self.unsupported(stmt)

    # ---- statements -------------------------------------------------------------------------------------

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, (Builtin, MathFunction, pylang.Cast, ComplexMethod)) or value is None:
                raise self.refuse(target, f"cannot assign {value!r} to a local")
            self.assign_local(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.refuse(target, f"cannot unpack {describe(value)} into {len(target.elts)} names")
            for t, v in zip(target.elts, value, strict=True):
                self.assign(t, v)
        elif isinstance(target, ast.Subscript):
            array, index = self.subscript(target)
            self.store(array, index, value)
        else:
            raise self.unsupported(target, " as an assignment target")

    def augmented(self, stmt: ast.AugAssign) -> None:
        op = BINARY.get(type(stmt.op))
        if op is None:
            raise self.unsupported(stmt.op)
        value = self.expr(stmt.value)
        if isinstance(stmt.target, ast.Name):
            self.assign_local(stmt.target.id, self.binary(op, self.lookup(stmt.target.id, stmt.target), value))
        elif isinstance(stmt.target, ast.Subscript):
            array, index = self.subscript(stmt.target)
            if isinstance(array, ComplexArray):
                self.complex_augmented(op, array, index, value)
                return
            target = self.element(array, index)
            summed = self.binary(op, target.load(), value)
            if not self.summed_by_work_items(op, array, target, value, summed):
                self.store(array, index, summed)
                return
            self.add_atomically(op, array, target, self.cast(value, array.dtype))
        else:
            raise self.unsupported(stmt.target, " as an assignment target")

    def complex_augmented(self, op: str, array: ComplexArray, index: tuple[Any, ...], value: Any) -> None:
        """``array[i] += v`` (``-=``) of a complex array: where work items share the element (``summed_by_work_items``
        of a part: the index decides, the real part's value usually), each part is added atomically, a part the
        same in every work item too (adding it in any order gives one sum); else the sum is stored."""
        summed = self.binary(op, self.complex_load(array, index), value)
        if op in ("+", "-") and isinstance(summed, ComplexValue):
            parts = [(self.element(array.parts, (*index, p)), v, s) for p, v, s in
                     zip((0, 1), self.complex_parts(value, array.dtype), self.complex_parts(summed, array.dtype),
                         strict=True)]
            if any(self.summed_by_work_items(op, array.parts, t, v, s) for t, v, s in parts):
                for t, v, _ in parts:
                    self.add_atomically(op, array.parts, t, v)
                return
        self.complex_store(array, index, summed)

    def add_atomically(self, op: str, array: ArrayValue, target: UOp, value: UOp) -> None:
        """``array[i] += value`` (``-=``) as an atomic update (``x - v`` is ``x + -v``: exactly, for floats and
        wrapping ints)."""
        added = value if op == "+" else -value
        self.wrote(array.buffer.param, self.k.atomic_add(target, added, *self.running(target, added)))

    def summed_by_work_items(self, op: str, array: ArrayValue, target: UOp, value: Any, summed: Any) -> bool:
        """Whether ``array[i] += v`` (``-=``) adds into an element the work items of a parallel loop may share, as
        an array reduction or a histogram over a numba ``prange``: where its index does not use the loop's
        variable and ``v`` does (``acc[j] += x[i, j]``), or where the index uses it only through memory it reads
        (``counts[v[i]] += 1``: the data picks the element, and two work items may pick one). Then each adds its
        ``v`` as an atomic update, which gives the sum Python's turns make, in some order (a float sum's rounding
        is the order's). Only where the sum is computed in the array's own dtype (a sum cast back to it, as
        ``int32 += 0.5``, truncates each turn's) and the dtype is one atomics add (32- and 64-bit). (A ``v`` the
        same in every work item into an element they share stays a store: the race check takes it or refuses
        it, as it did.)"""
        if not (op in ("+", "-") and isinstance(summed, UOp) and summed.dtype == array.dtype and
                array.dtype in ATOMIC_DTYPES):
            return False
        index = target.src[1]  # (the position alone: an if's gate may read the loop)
        indexed, direct = index.toposort(), _outside_loads(index)
        added = value.toposort() if isinstance(value, UOp) else ()
        return any(loop.kind is AxisKind.GLOBAL and loop.range.src[0].vmax > 1 and (
                   (loop.range not in indexed and loop.range in added) or
                   (loop.range in indexed and loop.range not in direct)) for loop in self.loops)

    def expression_statement(self, stmt: ast.Expr) -> None:
        node = stmt.value
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return  # a string on its own: a comment
        if not isinstance(node, ast.Call):
            raise self.refuse(stmt, "an expression whose value is not used does nothing in a kernel")
        callee = self.expr(node.func)
        if is_atomic(callee):
            self.atomic(node, callee)
            return
        if isinstance(callee, pylang.Func):
            self.call(node, used=False)
            return
        if isinstance(callee, RandomFunction):  # np.random.seed(s), or a draw whose number is skipped
            self.random_draw(node, callee)
            return
        raise self.refuse(stmt, "an expression whose value is not used does nothing in a kernel")

    def atomic(self, node: ast.Call, callee: Callable[..., Any]) -> None:
        if len(node.args) != 3 or node.keywords:
            raise self.refuse(node, f"svod.{callee.__name__} takes (array, index, value)")
        array = self.expr(node.args[0])
        if not isinstance(array, ArrayValue):
            raise self.refuse(node.args[0], f"svod.{callee.__name__} updates an array argument")
        index = self.expr(node.args[1])
        index = index if isinstance(index, tuple) else (index,)
        value = self.cast(self.fitting(self.expr(node.args[2]), array.dtype), array.dtype)
        target = self.element(array, self.indices(node, array, index))
        op = {"atomic_add": self.k.atomic_add, "atomic_max": self.k.atomic_max, "atomic_min": self.k.atomic_min}
        self.wrote(array.buffer.param, op[callee.__name__](target, value, *self.running(target, value)))

    # ---- if ---------------------------------------------------------------------------------------------

    def branch(self, stmt: ast.If) -> None:
        condition = self.expr(stmt.test)
        if is_number(condition):
            self.block(stmt.body if condition else stmt.orelse)
            return
        cond = self.truth(condition, stmt.test)
        before, saved_gate = dict(self.env), self.gate
        try:
            self.gate = cond if saved_gate is None else saved_gate & cond
            self.block(stmt.body)
            taken = self.env
            self.env = dict(before)
            if stmt.orelse:
                self.gate = cond.ne(True) if saved_gate is None else saved_gate & cond.ne(True)
                self.block(stmt.orelse)
            other = self.env
        finally:
            self.gate = saved_gate
        self.env = self.merged(cond, taken, other, stmt, f"it is assigned in one branch only of the if at line "
                                                         f"{stmt.lineno}")

    # ---- the final kernel -------------------------------------------------------------------------------

    def _renumbered(self, sink: UOp) -> UOp:
        """The kernel's ranges numbered as a builder user numbers them: parallel ranges first, in the order
        the loops open, then the sequential and reduction ranges in the order they were made. (Ranges made
        for a first pass over a loop body are gone.)"""
        present = {u for u in sink.toposort() if u.op is Ops.RANGE}
        kept = [r for r in dict.fromkeys(self.ranges) if r in present]
        order = [r for r in kept if r.arg[1] is AxisKind.GLOBAL] + \
            sorted((r for r in kept if r.arg[1] is not AxisKind.GLOBAL), key=lambda r: r.arg[0])
        mapping: dict[UOp, UOp] = {}
        for axis, r in enumerate(order):
            end = substitute(r.src[0], mapping)
            mapping[r] = UOp.range(end, axis, r.arg[1])
        if all(mapping[r] is r for r in order):
            return sink
        renamed = substitute(sink, mapping)
        self.located.record(self.where(self.source.node), [renamed])
        return renamed


def _outside_loads(root: UOp) -> set[UOp]:
    """The nodes of ``root`` that are not below a LOAD: what it computes from values it has, not from memory."""
    seen, stack = {root}, [root]
    while stack:
        node = stack.pop()
        if node.op is not Ops.LOAD:
            for s in node.src:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
    return seen


__all__ = ["Translator"]
