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

Every walk here follows the source's order and the UOps' toposorts; no set of UOps is iterated.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import itertools
import math as pymath
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.codegen import reduce_identity
from svod.codegen.indexing import index_in_bounds
from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend import pylang
from svod.frontend.builder import KernelBuilder
from svod.frontend.promotion import HOST, Platform
from svod.frontend.source import Located, Source, size_names
from svod.frontend.values import (
    BUILTINS,
    NUMPY_MATH,
    ArrayValue,
    Builtin,
    MathFunction,
    Undefined,
    describe,
    is_atomic,
    is_number,
    math_function,
)
from svod.ir import AxisKind, Ops, UOp, simplify, substitute
from svod.ir.alu import convert
from svod.ir.ops import EFFECTS
from svod.ir.uop import is_state, memory_of, pointee, written_memory

REFUSED = {
    ast.While: "a while loop (loops are 'for ... in range(...)' or svod.prange(...))",
    ast.Try: "try", ast.With: "with", ast.AsyncWith: "async with", ast.AsyncFor: "async for",
    ast.Lambda: "lambda", ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression", ast.List: "a list",
    ast.Dict: "a dict", ast.Set: "a set", ast.Break: "break", ast.Continue: "continue",
    ast.FunctionDef: "a nested function (use @svod.func at module level)", ast.AsyncFunctionDef: "an async function",
    ast.ClassDef: "a class", ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Delete: "del",
    ast.Raise: "raise", ast.Assert: "assert", ast.Import: "import", ast.ImportFrom: "import",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from",
    ast.NamedExpr: "':=' (an assignment expression)",
    ast.JoinedStr: "an f-string", ast.Starred: "'*' unpacking", ast.Slice: "a slice (index one element at a time)",
    ast.Match: "match",
}
"""Constructs a kernel may not use, by what the error calls them."""


def _construct(node: ast.AST) -> str:
    return REFUSED.get(type(node), type(node).__name__)


def _code(node: ast.AST, limit: int = 60) -> str:
    """``node``'s code as one line, cut at ``limit`` characters (an operator node alone has none: '')."""
    code = " ".join(ast.unparse(node).split())
    return code if len(code) <= limit else code[:limit - 3] + "..."



# ---- the translator -------------------------------------------------------------------------------------

@dataclass
class Loop:
    range: UOp
    kind: AxisKind


@dataclass(frozen=True)
class Statement:
    """Where the translation stood before a statement: the effects stated so far, the buffers' versions."""

    effects: int
    versions: dict[UOp, int]


class Translator:
    """Builds one kernel from a function's source and its arguments' values (arrays, scalars, constants)."""

    def __init__(self, source: Source, name: str, builder: KernelBuilder, arguments: dict[str, Any],
                 platform: Platform = HOST) -> None:
        self.source = source
        self.platform = platform
        self.name = name
        self.k = builder
        self.env: dict[str, Any] = dict(arguments)
        self.loops: list[Loop] = []
        self.gate: UOp | None = None
        self.ranges: list[UOp] = []
        """Every range made, in order: the final kernel numbers them again (``_renumbered``)."""
        self.located = Located(names={v.buffer.param.arg: v.name for v in arguments.values()
                                      if isinstance(v, ArrayValue)}, variables=size_names(arguments))
        self.inlining: list[pylang.Func] = []
        self.cell_of: dict[tuple[Any, ...], tuple[UOp, UOp]] = {}
        self.cells: list[tuple[UOp, Any]] = []
        """The buffers of carried locals (``cell``), each with its size: the call allocates them."""
        self.versions: dict[UOp, int] = {}
        """How many effects the statements so far state on each buffer: the version of its memory state."""
        self.least_sizes: dict[UOp, list[tuple[int, str, int]]] = {}
        """Per size variable, the least size each constant index past an array's first dimension needs of it:
        ``(size, array, axis)`` (``dimension_checked``)."""
        self.stated: dict[UOp, dict[UOp, int]] = {}
        """The versions each effect's statement saw (``_unstated`` compares them with its reads')."""
        self._placeholders = itertools.count()

    # ---- driving ----------------------------------------------------------------------------------------

    def translate(self) -> UOp:
        body = self.source.node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        self.block(body, top=True)
        if not self.k.effects:
            raise KernelSyntaxError(f"{self.where(self.source.node)}: kernel {self.name} stores nothing; a kernel "
                                    "writes its results into array arguments", kernel=self.name, stage="translate",
                                    value=self.name)
        return self._sized(self._renumbered(_unstated(self.k.build(), self.stated)))

    def where(self, node: ast.AST) -> str:
        return f"{self.source.file}:{getattr(node, 'lineno', self.source.node.lineno)}"

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

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        """``what`` is wrong with ``node``: the error names its line and shows its code (the error's value)."""
        code = _code(node)
        shown = what if not code or code in what else f"{what}: `{code}`"
        return KernelSyntaxError(f"{self.where(node)}: {shown}", kernel=self.name, stage="translate", value=code)

    def unsupported(self, node: ast.AST, extra: str = "") -> KernelSyntaxError:
        return self.refuse(node, f"{_construct(node)} is not supported in a kernel{extra}")

    def block(self, body: Sequence[ast.stmt], top: bool = False) -> None:
        for position, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                last = position == len(body) - 1 and top
                if stmt.value is not None or not last:
                    what = "returning a value" if stmt.value is not None else "return before the end"
                    raise KernelSyntaxError(
                        f"{self.where(stmt)}: {what} is not supported in a kernel: a kernel writes its results into "
                        "array arguments",
                        kernel=self.name, stage="translate", value="return")
                continue
            self.statement(stmt)

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
        if isinstance(stmt, ast.Assign):
            value = self.expr(stmt.value)
            for target in stmt.targets:
                self.assign(target, value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is None or not isinstance(stmt.target, ast.Name):
                raise self.unsupported(stmt, ": annotate a local as it is assigned, 'x: svod.float32 = 0.0'")
            dtype = self.static_dtype(stmt.annotation)
            self.assign(stmt.target, self.cast(self.expr(stmt.value), dtype))
        elif isinstance(stmt, ast.AugAssign):
            self.augmented(stmt)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, ast.If):
            self.branch(stmt)
        elif isinstance(stmt, ast.Expr):
            self.expression_statement(stmt)
        elif not isinstance(stmt, ast.Pass):  # a ``pass`` builds nothing
            raise self.unsupported(stmt)

    # ---- statements -------------------------------------------------------------------------------------

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, (Builtin, MathFunction, pylang.Cast)) or value is None:
                raise self.refuse(target, f"cannot assign {value!r} to a local")
            self.env[target.id] = value
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
        op = _BINARY.get(type(stmt.op))
        if op is None:
            raise self.unsupported(stmt.op)
        value = self.expr(stmt.value)
        if isinstance(stmt.target, ast.Name):
            self.env[stmt.target.id] = self.binary(op, self.lookup(stmt.target.id, stmt.target), value)
        elif isinstance(stmt.target, ast.Subscript):
            array, index = self.subscript(stmt.target)
            self.store(array, index, self.binary(op, self.element(array, index).load(), value))
        else:
            raise self.unsupported(stmt.target, " as an assignment target")

    def store(self, array: ArrayValue, index: tuple[Any, ...], value: Any) -> None:
        value = self.cast(value, array.dtype)
        target = self.element(array, index)
        self.wrote(array.buffer.param, self.k.store(target, value, *self.running(target, value)))

    # ---- memory -----------------------------------------------------------------------------------------

    def memory(self, param: UOp) -> UOp:
        """The memory state of buffer ``param`` at the statement being translated (``UOp.state``): the
        effects stated on it so far, in the current turn of the sequential loops around the statement. Every
        access goes through it, so a value read here is the value the statement read, whatever later
        statements store (states of buffers the kernel never writes are dropped at the end: ``_unstated``)."""
        loops = [loop.range for loop in self.loops if loop.kind is not AxisKind.GLOBAL]
        return param.state(self.versions.get(param, 0), *loops)

    def wrote(self, param: UOp, effect: UOp) -> None:
        """``effect`` on ``param`` was stated: the statements after it see the next state."""
        self.stated[effect] = dict(self.versions)
        self.versions[param] = self.versions.get(param, 0) + 1

    def element(self, array: ArrayValue, index: tuple[Any, ...]) -> UOp:
        """``array[index]`` at this statement: through the array's memory state, gated by the conditions the
        statement runs under (a load may be computed ahead of its branch, a value being held from its
        statement on, and then reads nothing where the branch is not taken), each index checked against its
        own dimension as numpy and numba check it (``dimension_checked``)."""
        param = array.buffer.param
        checked, inside = self.dimension_checked(array, index)
        return array.buffer.index(checked, self.gate, self.memory(param), inside)

    def dimension_checked(self, array: ArrayValue, index: tuple[Any, ...]) -> tuple[tuple[Any, ...], UOp | None]:
        """``index`` with each index past the first that may leave its dimension (which the flat buffer
        would not show: ``x[i, 3]`` of an ``(n, 3)`` array is ``x[i + 1, 0]``) clamped to it, and the condition
        that none leaves: the access is then checked at run time (``IndexOutOfBoundsError``), and its flat
        index stays within the array (which a device of 32-bit indices must know). A constant index (or one
        whose range is constant) of a symbolic dimension instead sets the least size the dimension may take,
        which the call checks (and which lets the race check tell ``x[i, 1]`` from ``x[i + 1, 0]``); one
        outside a constant dimension is refused now."""
        unproven: list[UOp] = []
        checked = list(index)
        for axis, (i, dim) in enumerate(zip(index, array.dims, strict=True)):
            if axis == 0:
                continue  # the buffer's own bounds check the first
            at = UOp.index_const(i) if isinstance(i, int) else i.cast(dtypes.index)
            if isinstance(dim, int) and at.op is Ops.CONST and not 0 <= int(at.arg) < dim:
                raise KernelSyntaxError(f"index {at.arg} is outside dimension {axis} of {array.name}, of size {dim}",
                                        kernel=self.name, stage="translate", value=int(at.arg))
            if isinstance(dim, UOp) and dim.op is Ops.DEFINE_VAR and at.vmin >= 0 and \
                    not any(u.op is Ops.DEFINE_VAR for u in at.toposort()):
                self.least_sizes.setdefault(dim, []).append((int(at.vmax) + 1, array.name, axis))
                continue
            size = dim if isinstance(dim, UOp) else UOp.index_const(dim)
            order = {u: k for k, u in enumerate((at < size).toposort())}
            if not index_in_bounds(at, size, self.gate, order):
                unproven.append((at >= 0) & (at < size))
                checked[axis] = at.maximum(0).minimum(size - 1)
        return tuple(checked), functools.reduce(lambda a, b: a & b, unproven) if unproven else None

    def running(self, *parts: UOp) -> list[UOp]:
        """The ranges of the loops around an effect that its ``parts`` do not use: it names them, so that it
        runs once per turn of each all the same. A memory state's loops do not count: the state may go
        (``_unstated``)."""
        used: set[UOp] = set()
        stack = list(parts)
        while stack:
            u = stack.pop()
            if u not in used:
                used.add(u)
                stack.extend(u.src[:1] if is_state(u) else u.src)
        return [loop.range for loop in self.loops if loop.range not in used]

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
            self.call(node)
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
        value = self.cast(self.expr(node.args[2]), array.dtype)
        target = self.element(array, self.indices(node, array, index))
        op = {"atomic_add": self.k.atomic_add, "atomic_max": self.k.atomic_max, "atomic_min": self.k.atomic_min}
        self.wrote(array.buffer.param, op[callee.__name__](target, value, *self.running(target, value)))

    # ---- loops ------------------------------------------------------------------------------------------

    def loop(self, stmt: ast.For) -> None:
        if stmt.orelse:
            raise self.refuse(stmt, "for ... else is not supported in a kernel")
        if not isinstance(stmt.target, ast.Name):
            raise self.refuse(stmt.target, "a loop variable is one name")
        call = stmt.iter
        callee = self.expr(call.func) if isinstance(call, ast.Call) else None
        if callee is pylang.prange:
            kind = AxisKind.GLOBAL
        elif callee is BUILTINS["range"]:
            kind = AxisKind.LOOP
        else:
            raise self.refuse(stmt.iter, "a kernel loops over range(...) (sequential) or svod.prange(...) (parallel)")
        assert isinstance(call, ast.Call)
        if call.keywords or not 1 <= len(call.args) <= (2 if kind is AxisKind.GLOBAL else 3):
            raise self.refuse(call, "svod.prange takes (stop) or (start, stop)" if kind is AxisKind.GLOBAL
                              else "range takes (stop), (start, stop) or (start, stop, step)")
        bounds = [self.expr(a) for a in call.args]
        start, stop = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        step = bounds[2] if len(bounds) == 3 else 1
        if not isinstance(step, int) or isinstance(step, bool) or step == 0:
            raise self.refuse(call, "a range's step is a nonzero integer constant")
        for b, arg in zip((start, stop), call.args, strict=False):
            if not (isinstance(b, int) and not isinstance(b, bool)) and not (isinstance(b, UOp) and b.dtype.is_int):
                raise self.refuse(arg, f"a loop bound is an integer, not {describe(b)}")
        if kind is AxisKind.GLOBAL and any(loop.kind is AxisKind.LOOP for loop in self.loops):
            raise self.refuse(stmt, "svod.prange inside a sequential loop: every turn of the loop would need the "
                                    "whole grid of the turn before; run one kernel per turn in an ExecutionPlan")
        count = self.count(start, stop, step)
        saved_gate = self.gate
        if kind is AxisKind.GLOBAL:
            count, guard = self.rectangle(count)
            r = self.k.range(count, kind)
            if guard is not None:
                self.gate = (r < guard) if self.gate is None else self.gate & (r < guard)
        else:
            r = self.k.range(count, kind)
            if self.where(stmt) not in self.located.loops:
                self.located.loops.append(self.where(stmt))
        self.ranges.append(r)
        variable: Any = r if _is_zero(start) and step == 1 else self.binary("+", _index(start), r * step)
        try:
            self.loop_body(stmt, r, kind, variable)
        finally:
            self.gate = saved_gate

    def count(self, start: Any, stop: Any, step: int) -> Any:
        """How many turns ``range(start, stop, step)`` takes, simplified (``range(n - 1, -1, -1)`` takes ``n``:
        the proofs of bounds and races then see that ``n - 1 - r`` stays within ``n``)."""
        if is_number(start) and is_number(stop):
            return len(range(start, stop, step))
        start, stop = _index(start), _index(stop)
        if step == 1:
            return stop if _is_zero(start) else simplify(stop - start)
        if step > 0:
            return simplify((stop - start + (step - 1)) // step)
        return simplify((start - stop + (-step - 1)) // -step)

    def rectangle(self, count: Any) -> tuple[Any, UOp | None]:
        """A parallel range's end that depends on enclosing parallel ranges (``prange(i + 1)``) becomes its
        largest value, at either end of each (a bound linear in them), and a guard ``r < count``."""
        if not isinstance(count, UOp):
            return count, None
        outer = [loop.range for loop in self.loops if loop.kind is AxisKind.GLOBAL and loop.range in count.toposort()]
        if not outer:
            return count, None
        largest = count
        for g in outer:
            low, high = (simplify(substitute(largest, {g: at})) for at in (UOp.index_const(0), g.src[0] - 1))
            largest = high if high.vmin >= low.vmax else low if low.vmin >= high.vmax else low.maximum(high)
        return largest, count

    def loop_body(self, stmt: ast.For, r: UOp, kind: AxisKind, variable: Any) -> None:
        name = stmt.target.id  # type: ignore[attr-defined]
        before = dict(self.env)
        start = Statement(len(self.k.effects), dict(self.versions))
        self.loops.append(Loop(r, kind))
        assigned = _assigned(stmt.body)
        changed = [n for n in before if n != name and n in assigned and not isinstance(before[n], Undefined)]
        try:
            if kind is AxisKind.GLOBAL:  # a local a parallel loop assigns is each work item's own
                self.env.update({n: Undefined(n, f"the svod.prange at line {stmt.lineno} assigns it, so each of its "
                                                 "work items has its own, read here before it is assigned; work "
                                                 "items share no local (combine into an array with "
                                                 "svod.atomic_add)") for n in changed})
                changed = []
            self.env[name] = variable
            self.block(stmt.body)
            results = self.carry(stmt, r, variable, before, start, changed) if changed else {}
        finally:
            self.loops.pop()
        inside = [n for n in self.env if n not in before or (kind is AxisKind.GLOBAL and n in assigned)]
        self.env = {**before, **results}
        for n in inside:
            self.env[n] = Undefined(n, f"it is assigned inside the loop at line {stmt.lineno}, and a loop's "
                                       "locals end with it")

    def carry(self, stmt: ast.For, r: UOp, variable: Any, before: dict[str, Any], start: Statement,
              changed: list[str]) -> dict[str, Any]:
        """The values after the loop of the locals it ``changed``. The body is stated again with a placeholder
        for each: one whose turn makes ``p op term`` of it, and that the loop reads nowhere else, is a
        reduction over the loop's range; the others are carried from turn to turn in a cell of their own per
        work item (``cell``): stored before the loop and at the end of each turn, loaded at the start of each
        turn (held, as every read is, until the turn ends) and after the loop. Whatever a carried local's cell
        makes of another local carries that one too, so the body is stated until no more locals join them."""
        name = stmt.target.id  # type: ignore[attr-defined]
        first = dict(self.env)
        placeholders = {n: self.placeholder(n, self.holding(n, before[n], first[n])) for n in changed}
        cells: dict[str, tuple[UOp, UOp]] = {}
        while True:
            self.k.discard_effects(start.effects)
            self.versions = dict(start.versions)
            self.env = dict(before)
            with self.outside_loop():  # each cell starts before the loop
                for n, (param, at) in cells.items():
                    self.cell_store(param, at, before[n])
            self.env.update({n: p for n, p in placeholders.items() if n not in cells})
            self.env.update({n: self.memory(param).index(at).load() for n, (param, at) in cells.items()})
            self.env[name] = variable
            self.block(stmt.body)
            for n, (param, at) in cells.items():  # each turn ends storing what it made of the carried locals
                self.cell_store(param, at, self.env[n])
            grown = {n: self.holding(n, p, self.env[n]) for n, p in placeholders.items()}
            grown = {n: dtype for n, dtype in grown.items() if dtype != placeholders[n].dtype}
            if grown:  # a turn makes a value of a wider dtype: the local holds that from the start
                placeholders.update({n: self.placeholder(n, dtype) for n, dtype in grown.items()})
                cells = {n: cell for n, cell in cells.items() if n not in grown}
                continue
            splits = {n: self.reduction(n, p, placeholders, start.effects) for n, p in placeholders.items()
                      if n not in cells}
            joining = [n for n, split in splits.items() if split is None]
            if not joining:
                break
            for n in joining:
                cells[n] = self.cell((self.source.file, stmt.lineno, stmt.col_offset, n), placeholders[n].dtype)
        with self.outside_loop():
            results: dict[str, Any] = {n: self.memory(param).index(at).load() for n, (param, at) in cells.items()}
        for n, split in splits.items():
            assert split is not None
            op, term = split
            if op is None:
                results[n] = before[n]
                continue
            red = UOp.range(r.src[0], r.arg[0], AxisKind.REDUCE)  # the loop's axis: nested loops keep their order
            self.ranges.append(red)
            results[n] = self.initial(before[n], _merged_reduce(substitute(term, {r: red}), red, op), op)
        return results

    @contextmanager
    def outside_loop(self) -> Iterator[None]:
        """State what follows as if just before (or after) the innermost loop: a carried local's first store,
        its value after the loop."""
        current = self.loops.pop()
        try:
            yield
        finally:
            self.loops.append(current)

    def reduction(self, name: str, p: UOp, placeholders: dict[str, UOp], mark: int) -> tuple[Ops | None, UOp] | None:
        """``(op, term)`` when local ``name`` (``p`` at the start of a turn) is a reduction of the loop just
        stated; None when it must be carried instead: the loop reads it elsewhere, or its term reads memory
        the loop writes (a reduction is folded in a loop of its own, which would read that memory at other
        times than the statement does)."""
        value = self.env[name]
        others = [v for m, v in self.env.items() if m != name and m in placeholders and isinstance(v, UOp)]
        effects = self.k.effects[mark:]
        if any(p in e.toposort() for e in effects) or any(p in v.toposort() for v in others):
            return None
        split = _accumulation(value, p)
        if split is None or any(q in split[1].toposort() for q in placeholders.values()):
            return None
        written = written_memory(effects)
        if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written for u in split[1].toposort()):
            return None
        return split

    def cell(self, key: tuple[Any, ...], dtype: DType) -> tuple[UOp, UOp]:
        """A carried local's memory: one element per work item of the enclosing parallel loops (an extra
        buffer argument the call allocates), and this work item's element. One per ``key`` (the loop's place
        in the source and the local's name): stating a loop again reuses it."""
        known = self.cell_of.get((*key, dtype))
        if known is not None:
            return known
        parallel = [loop.range for loop in self.loops if loop.kind is AxisKind.GLOBAL]
        size: Any = 1
        at: Any = 0
        for g in parallel:
            size = self.binary("*", size, g.src[0])
            at = self.binary("+", self.binary("*", at, g.src[0]), g)
        param = self.k.buffer(self.platform.storage(dtype), size)
        self.cells.append((param, size))
        self.located.names[param.arg] = f"the memory that carries local {key[-1]} from turn to turn"
        self.cell_of[(*key, dtype)] = param, at if isinstance(at, UOp) else UOp.index_const(at)
        return self.cell_of[(*key, dtype)]

    def cell_store(self, param: UOp, at: UOp, value: Any) -> None:
        target = self.memory(param).index(at, self.gate)
        value = self.cast(value, pointee(param))
        self.wrote(param, self.k.store(target, value, *self.running(target, value)))

    def placeholder(self, name: str, dtype: DType) -> UOp:
        """A stand-in for local ``name`` of ``dtype`` at the start of a turn: a node nothing else is (a
        DEFINE_VAR that never reaches a kernel)."""
        return UOp(Ops.DEFINE_VAR, dtype, (), (f"turn_{name}_{next(self._placeholders)}", 0, 0))

    def holding(self, name: str, *values: Any) -> DType:
        """The dtype of local ``name`` that holds each of ``values`` in turn (``Platform.unify``; a Python
        number is weak, as in arithmetic): an earlier value is never narrowed."""
        for v in values:
            if not (isinstance(v, UOp) or is_number(v)):
                raise KernelSyntaxError(f"local {name} changes in a loop and holds {describe(v)}",
                                        kernel=self.name, stage="translate", value=name)
        typed = [v.dtype for v in values if isinstance(v, UOp)]
        if not typed:
            numbers = [self.platform.alone(v) for v in values]
            return functools.reduce(self.platform.unify, numbers)
        dtype = functools.reduce(self.platform.unify, typed)
        for v in values:
            if is_number(v):
                dtype = self.platform.unify(dtype, self.platform.weak(v, dtype))
        return dtype

    def initial(self, init: Any, reduced: UOp, op: Ops) -> Any:
        """``init op reduced``, or ``reduced`` alone where ``init`` is the op's identity: 0 for a sum, 1 for a
        product, -inf/+inf (or NaN) for a float max/min, the type's limit for an integer one. (A float sum of no
        terms, or of -0.0s only, is then -0.0, and a float max over no values or NaNs only is NaN.)"""
        if isinstance(init, UOp):
            return _combine(op, self.cast(init, reduced.dtype), reduced)
        dtype = reduced.dtype
        identity = {Ops.ADD: (0,), Ops.MUL: (1,),
                    Ops.MAX: (-pymath.inf, pymath.nan) if dtype.is_float else (dtype.min,),
                    Ops.MIN: (pymath.inf, pymath.nan) if dtype.is_float else (dtype.max,)}[op]
        if is_number(init) and any(init == i or (pymath.isnan(i) and pymath.isnan(init)) for i in identity):
            return reduced
        return _combine(op, self.cast(init, dtype), reduced)

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
        merged: dict[str, Any] = {}
        for name in dict.fromkeys([*taken, *other]):
            a, b = taken.get(name), other.get(name)
            if name not in taken or name not in other:
                merged[name] = Undefined(name, f"it is assigned in one branch only of the if at line {stmt.lineno}")
            elif a is b:
                merged[name] = a
            elif isinstance(a, Undefined) or isinstance(b, Undefined):
                merged[name] = a if isinstance(a, Undefined) else b
            else:
                merged[name] = self.select(cond, a, b, stmt)
        self.env = merged

    def select(self, cond: UOp, a: Any, b: Any, node: ast.AST) -> Any:
        if not (isinstance(a, UOp) or is_number(a)) or not (isinstance(b, UOp) or is_number(b)):
            raise self.refuse(node, f"a local holds {describe(a)} on one branch and {describe(b)} on the other")
        av, bv = self.operands(a, b, node)
        return cond.where(av, bv)

    # ---- expressions ------------------------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Any:
        method = _EXPRESSIONS.get(type(node))
        if method is None:
            raise self.unsupported(node)
        return getattr(self, method)(node)

    def _constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, (bool, int, float)):
            return node.value
        raise self.refuse(node, f"the constant {node.value!r} is not a number")

    def _name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, Undefined):
                raise self.refuse(node, f"{name} is not defined here: {value.why}")
            return value
        if name in self.source.names:
            return self.static(self.source.names[name], name, node)
        if name in BUILTINS:
            return BUILTINS[name]
        raise self.refuse(node, f"name {name} is not defined")

    def static(self, value: Any, name: str, node: ast.AST) -> Any:
        """A global the kernel names: a number (a constant of the kernel, read when it is translated), svod
        or one of its names, a math module, numpy, a ``@svod.func``."""
        if is_number(value) or isinstance(value, (np.integer, np.floating)):
            return value.item() if isinstance(value, np.generic) else value
        if isinstance(value, (types.ModuleType, pylang.Cast, pylang.Func)) or value is pylang.math or \
                value is pylang.prange or is_atomic(value):
            return value
        if isinstance(value, type) and issubclass(value, np.generic) and value is not np.generic:
            return pylang.Cast(dtypes.from_numpy(value))
        function = math_function(value)
        if function is not None:
            return function
        name_of = getattr(value, "__name__", None)
        if isinstance(name_of, str) and name_of in BUILTINS and value is getattr(builtins, name_of, None):
            return BUILTINS[name_of]
        if hasattr(value, "svod_kernel"):
            raise self.refuse(node, f"{name} is an @svod.kernel: a kernel cannot call another; make the helper "
                                    "@svod.func")
        if callable(value):
            raise self.refuse(node, f"{name} is {describe(value)}, neither svod's nor an @svod.func: a kernel calls "
                                    "svod's names, math functions and @svod.func helpers")
        raise self.refuse(node, f"{name} is {describe(value)}, which a kernel cannot use (numbers, svod's names, "
                                "math, numpy's math and @svod.func helpers it can)")

    def _attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, ArrayValue):
            if attr == "shape":
                return base.dims
            if attr == "ndim":
                return len(base.dims)
            if attr == "dtype":
                return pylang.Cast(base.dtype)
            if attr == "size":
                total: Any = 1
                for d in base.dims:
                    total = self.binary("*", total, d)
                return total
            raise self.refuse(node, f"an array has shape, ndim, dtype and size, not {attr}")
        if base is pylang.math or base is pymath or base is np:
            if attr in ("pi", "e", "inf", "nan"):
                return float(getattr(pymath, attr))
            name = attr if base is not np else NUMPY_MATH.get(attr)
            if name is not None and name in pylang.MATH_FUNCTIONS and (base is pylang.math or hasattr(base, attr)):
                return MathFunction(name)
            if base is np and hasattr(np, attr) and isinstance(getattr(np, attr), type) and \
                    issubclass(getattr(np, attr), np.generic):
                return pylang.Cast(dtypes.from_numpy(getattr(np, attr)))
            raise self.refuse(node, f"{'svod.math' if base is pylang.math else base.__name__}.{attr} is not a math "
                                    f"function a kernel has ({', '.join(sorted(pylang.MATH_FUNCTIONS))})")
        if isinstance(base, types.ModuleType):
            if not hasattr(base, attr):
                raise self.refuse(node, f"{base.__name__} has no {attr}")
            return self.static(getattr(base, attr), f"{base.__name__}.{attr}", node)
        raise self.refuse(node, f"attribute {attr} of {describe(base)}")

    def _subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        if isinstance(base, tuple):
            index = self.expr(node.slice)
            if not isinstance(index, int) or isinstance(index, bool):
                raise self.refuse(node.slice, "a tuple (a shape) is indexed by an integer constant")
            try:
                return base[index]
            except IndexError:
                raise self.refuse(node, f"index {index} is outside a tuple of {len(base)}") from None
        array, index = self.subscript(node)
        return self.element(array, index).load()

    def subscript(self, node: ast.Subscript) -> tuple[ArrayValue, tuple[Any, ...]]:
        array = self.expr(node.value)
        if not isinstance(array, ArrayValue):
            raise self.refuse(node.value, f"only array arguments are indexed, not {describe(array)}")
        raw = node.slice
        values = [self.expr(e) for e in raw.elts] if isinstance(raw, ast.Tuple) else [self.expr(raw)]
        flat: list[Any] = []
        for v in values:
            flat.extend(v if isinstance(v, tuple) else (v,))
        return array, self.indices(node, array, tuple(flat))

    def indices(self, node: ast.AST, array: ArrayValue, index: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(index) != len(array.dims):
            raise self.refuse(node, f"{array.name} has {len(array.dims)} dimension(s) and takes as many indices, "
                                    f"got {len(index)}")
        out = []
        for i, dim in zip(index, array.dims, strict=True):
            if isinstance(i, bool) or not (isinstance(i, int) or (isinstance(i, UOp) and i.dtype.is_int)):
                raise self.refuse(node, f"an index is an integer, not {describe(i)}")
            out.append(self.binary("+", dim, i) if isinstance(i, int) and i < 0 else i)  # a[-1]: from the end
        return tuple(out)

    def _tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return tuple(self.expr(e) for e in node.elts)

    def _bin_op(self, node: ast.BinOp) -> Any:
        op = _BINARY.get(type(node.op))
        if op is None:
            raise self.unsupported(node.op)
        return self.binary(op, self.expr(node.left), self.expr(node.right))

    def _unary_op(self, node: ast.UnaryOp) -> Any:
        value = self.expr(node.operand)
        if is_number(value):
            ops: dict[type, Callable[[Any], Any]] = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v,
                                                     ast.Not: lambda v: not v, ast.Invert: lambda v: ~v}
            return ops[type(node.op)](value)
        if not isinstance(value, UOp):
            raise self.refuse(node, f"{describe(value)} in arithmetic")
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.Not):
            return self.truth(value, node).ne(True)
        return ~value

    def _bool_op(self, node: ast.BoolOp) -> Any:
        result = self.expr(node.values[0])
        for operand in node.values[1:]:
            if is_number(result):  # Python's short circuit on a constant
                if (not result) if isinstance(node.op, ast.And) else bool(result):
                    return result
                result = self.expr(operand)
                continue
            left = self.truth(result, node)
            with self.under(left if isinstance(node.op, ast.And) else left.ne(True)):
                right = self.expr(operand)
            right = right if is_number(right) else self.truth(right, operand)
            if is_number(right):
                result = left if bool(right) == isinstance(node.op, ast.And) else bool(right)
            elif isinstance(node.op, ast.And):  # a right side that reads memory only where the left holds
                result = left.where(right, False) if right.reads_memory else left & right
            else:
                result = left.where(True, right) if right.reads_memory else left | right
        return result

    def _compare(self, node: ast.Compare) -> Any:
        result: Any = True
        left = self.expr(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.expr(comparator)
            name = _COMPARE.get(type(op))
            if name is None:
                raise self.unsupported(op)
            test = self.compare(name, left, right, node)
            result = test if result is True else (result and test) if is_number(result) and is_number(test) \
                else self.logical_and(result, test)
            left = right
        return result

    def logical_and(self, a: Any, b: Any) -> Any:
        if is_number(a):
            return b if a else False
        if is_number(b):
            return a if b else False
        return a & b

    def compare(self, name: str, a: Any, b: Any, node: ast.AST) -> Any:
        if is_number(a) and is_number(b):
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[name]
        av, bv = self.operands(a, b, node)
        return {"<": lambda: av < bv, "<=": lambda: av <= bv, ">": lambda: av > bv, ">=": lambda: av >= bv,
                "==": lambda: av.eq(bv), "!=": lambda: av.ne(bv)}[name]()

    def _if_exp(self, node: ast.IfExp) -> Any:
        condition = self.expr(node.test)
        if is_number(condition):
            return self.expr(node.body if condition else node.orelse)
        cond = self.truth(condition, node.test)
        with self.under(cond):
            chosen = self.expr(node.body)
        with self.under(cond.ne(True)):
            other = self.expr(node.orelse)
        return self.select(cond, chosen, other, node)

    @contextmanager
    def under(self, cond: UOp) -> Iterator[None]:
        """Translate what follows where ``cond`` holds too (a branch, the right side of ``and``): its loads
        read nothing elsewhere."""
        saved = self.gate
        self.gate = cond if saved is None else saved & cond
        try:
            yield
        finally:
            self.gate = saved

    def _call(self, node: ast.Call) -> Any:
        callee = self.expr(node.func)
        if isinstance(callee, pylang.Func):
            return self.call(node)
        if node.keywords:
            raise self.refuse(node, "keyword arguments are for @svod.func helpers only")
        args = [self.expr(a) for a in node.args]
        if isinstance(callee, pylang.Cast):
            if len(args) != 1:
                raise self.refuse(node, f"{callee!r} converts one value")
            return self.cast(args[0], callee.dtype)
        if isinstance(callee, MathFunction):
            return self.math(node, callee.name, args)
        if isinstance(callee, Builtin):
            return self.builtin(node, callee.name, args)
        if callee is pylang.prange:
            raise self.refuse(node, "svod.prange is a loop: 'for i in svod.prange(n)'")
        if is_atomic(callee):
            raise self.refuse(node, f"svod.{callee.__name__} is a statement of its own and has no value")
        raise self.refuse(node, f"{describe(callee)} is neither svod's nor an @svod.func: a kernel calls svod's "
                                "names, math functions and @svod.func helpers")

    def builtin(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        if name == "range":
            raise self.refuse(node, "range is a loop: 'for i in range(n)'")
        if name in ("min", "max") and len(args) >= 2:
            result = args[0]
            for a in args[1:]:
                if is_number(result) and is_number(a):
                    result = min(result, a) if name == "min" else max(result, a)
                else:
                    x, y = self.operands(result, a, node)
                    result = x.minimum(y) if name == "min" else x.maximum(y)
            return result
        if name in ("min", "max"):
            raise self.refuse(node, f"{name} takes two or more values in a kernel (a sequence, or one value, it "
                                    "cannot take)")
        if len(args) != 1:
            raise self.refuse(node, f"{name} takes one argument here")
        value = args[0]
        if name == "len":
            if isinstance(value, ArrayValue):
                return value.dims[0]
            if isinstance(value, tuple):
                return len(value)
            raise self.refuse(node, f"len of {describe(value)}")
        if name == "abs":
            return abs(value) if is_number(value) or isinstance(value, UOp) else self._bad(node, value)
        if name == "bool":
            return bool(value) if is_number(value) else self.truth(value, node)
        dtype = self.platform.integer if name == "int" else self.platform.real  # typed, as numba's int() and float()
        return self.cast(value, dtype)

    def _bad(self, node: ast.AST, value: Any) -> Any:
        raise self.refuse(node, f"{describe(value)} in arithmetic")

    def math(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        method, arity = pylang.MATH_FUNCTIONS[name]
        if len(args) != arity:
            raise self.refuse(node, f"{name} takes {arity} argument(s)")
        if all(is_number(a) for a in args) and hasattr(pymath, name) and name not in ("floor", "ceil", "trunc"):
            return float(getattr(pymath, name)(*args))  # a constant: computed now, in float64
        first = args[0]
        if is_number(first) or (isinstance(first, UOp) and not first.dtype.is_float):
            others = [a for a in args[1:] if isinstance(a, UOp) and a.dtype.is_float]
            first = self.cast(first, others[0].dtype if others else self.platform.real)
        if not isinstance(first, UOp):
            return self._bad(node, first)
        rest = [self.cast(a, first.dtype) for a in args[1:]]
        return getattr(first, method)(*rest)

    def call(self, node: ast.Call) -> Any:
        """A ``@svod.func`` call, inlined: its parameters bound to the arguments' values, its body stated in a
        scope of its own, its final ``return`` the call's value."""
        helper = self.expr(node.func)
        assert isinstance(helper, pylang.Func)
        if helper in self.inlining:
            raise self.refuse(node, f"{helper.fn.__qualname__} calls itself: recursion is not supported in a kernel")
        if helper.source is None:
            helper.source = Source.of(helper.fn)
        source = helper.source
        try:
            bound = inspect.signature(helper.fn).bind(*[self.expr(a) for a in node.args],
                                                       **{k.arg: self.expr(k.value) for k in node.keywords if k.arg})
        except TypeError as err:
            raise self.refuse(node, f"{helper.fn.__qualname__}: {err}") from None
        bound.apply_defaults()
        saved = (self.env, self.source)
        self.env, self.source = dict(bound.arguments), source
        self.inlining.append(helper)
        try:
            body = list(source.node.body)
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            result = None
            if body and isinstance(body[-1], ast.Return):
                self.block(body[:-1])
                final = body[-1]
                assert isinstance(final, ast.Return)
                result = self.expr(final.value) if final.value is not None else None
            else:
                self.block(body)
            return result
        finally:
            self.inlining.pop()
            self.env, self.source = saved

    # ---- arithmetic -------------------------------------------------------------------------------------

    def binary(self, op: str, a: Any, b: Any, node: ast.AST | None = None) -> Any:
        if is_number(a) and is_number(b):
            try:
                return _python_binary(op, a, b)
            except (TypeError, ValueError, ZeroDivisionError, OverflowError) as err:
                raise KernelSyntaxError(f"{a!r} {op} {b!r}: {err}", kernel=self.name, stage="translate",
                                        value=(a, b)) from None
        av, bv = self.operands(a, b, node)
        if op in _INTEGER_ONLY and not av.dtype.is_int and av.dtype != dtypes.bool:
            raise KernelSyntaxError(f"{op} takes integers (or bools), not {describe(av)}", kernel=self.name,
                                    stage="translate", value=op)
        if op == "/" and not av.dtype.is_float:
            av, bv = av.cast(self.platform.real), bv.cast(self.platform.real)
        if op in ("//", "%"):
            return _floored(op, av, bv)
        return _UOP_BINARY[op](av, bv)

    def operands(self, a: Any, b: Any, node: ast.AST | None = None) -> tuple[UOp, UOp]:
        """``a`` and ``b`` as UOps of one dtype (``svod.frontend.promotion``): two dtypes unify, a Python number
        takes the other's dtype (a float meeting an integer the platform's float), two numbers alone the
        platform's defaults."""
        for v in (a, b):
            if not (isinstance(v, UOp) or is_number(v)):
                raise KernelSyntaxError(f"{describe(v)} in arithmetic", kernel=self.name, stage="translate",
                                        value=describe(v))
        if isinstance(a, UOp) and isinstance(b, UOp):
            dtype = self.platform.unify(a.dtype, b.dtype)
            return a.cast(dtype), b.cast(dtype)
        if not isinstance(a, UOp) and not isinstance(b, UOp):
            dtype = self.platform.unify(self.platform.alone(a), self.platform.alone(b))
            return self.cast(a, dtype), self.cast(b, dtype)
        if not isinstance(a, UOp):
            bv, av = self.operands(b, a, node)
            return av, bv
        dtype = self.platform.weak(b, a.dtype)
        return a.cast(dtype), UOp.const(dtype, b)

    def cast(self, value: Any, dtype: DType) -> UOp:
        """``value`` converted to ``dtype`` as a cast converts it (a store's value too): a float to an integer
        truncates toward zero, saturating, an integer wraps."""
        if is_number(value):
            return UOp.const(dtype, convert(value, dtype))
        if not isinstance(value, UOp):
            raise KernelSyntaxError(f"cannot convert {describe(value)} to {dtype.name}", kernel=self.name,
                                    stage="translate", value=describe(value))
        return value.cast(dtype)

    def truth(self, value: Any, node: ast.AST) -> UOp:
        if not isinstance(value, UOp):
            raise self.refuse(node, f"{describe(value)} is not a condition")
        if value.dtype == dtypes.bool:
            return value
        return value.ne(UOp.const(value.dtype, 0))

    def static_dtype(self, node: ast.expr) -> DType:
        value = self.expr(node)
        if isinstance(value, pylang.Cast):
            return value.dtype
        raise self.refuse(node, "a local's annotation is a svod dtype (svod.float32)")

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


# ---- helpers --------------------------------------------------------------------------------------------

_EXPRESSIONS: dict[type, str] = {ast.Constant: "_constant", ast.Name: "_name", ast.Attribute: "_attribute",
    ast.Subscript: "_subscript", ast.Tuple: "_tuple", ast.BinOp: "_bin_op", ast.UnaryOp: "_unary_op",
    ast.BoolOp: "_bool_op", ast.Compare: "_compare", ast.IfExp: "_if_exp", ast.Call: "_call"}
"""The method that translates each kind of expression a kernel may use."""
_BINARY: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                            ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|",
                            ast.BitXor: "^", ast.BitAnd: "&"}
_COMPARE: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UOP_BINARY: dict[str, Callable[[UOp, UOp], UOp]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b, "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "&": lambda a, b: a & b}


def _python_binary(op: str, a: Any, b: Any) -> Any:
    """Two constants, computed now, as Python computes them; a zero divisor as svod's kernels divide by one
    (``//`` and ``%`` of integers) or IEEE 754 divides (``/``): a kernel never traps."""
    if op in ("//", "%") and isinstance(a, int) and isinstance(b, int) and b == 0:
        return a if op == "//" else 0
    if op == "/" and b == 0:
        return pymath.copysign(pymath.inf, a) * pymath.copysign(1.0, b) if a else pymath.nan
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
            "//": lambda: a // b, "%": lambda: a % b, "**": lambda: a ** b, "<<": lambda: a << b,
            ">>": lambda: a >> b, "|": lambda: a | b, "^": lambda: a ^ b, "&": lambda: a & b}[op]()


_INTEGER_ONLY = frozenset({"<<", ">>", "&", "|", "^"})


def _floored(op: str, a: UOp, b: UOp) -> UOp:
    """Python's ``a // b`` or ``a % b``: the quotient rounded down, the remainder with the divisor's sign. On
    integers from the IR's truncating IDIV and MOD, corrected where the remainder and the divisor have other
    signs (nothing to correct where both are proven non-negative); on floats from ``floor``."""
    if a.dtype.is_float:
        quotient = (a / b).floor()
        return quotient if op == "//" else a - quotient * b
    truncated = a // b if op == "//" else a % b
    if a.vmin >= 0 and b.vmin >= 0:
        return truncated
    remainder = a % b
    across = remainder.ne(0) & (remainder < 0).ne(b < 0)
    if op == "//":
        return truncated - across.cast(a.dtype)
    return across.where(remainder + b, remainder)


def _assigned(body: Sequence[ast.stmt]) -> set[str]:
    """The names statements assign anywhere in ``body`` (a loop's body: those it may change from turn to turn;
    a value compared with the one before would miss ``b = a + b`` that happens to equal it once)."""
    names: set[str] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
                targets = [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _is_zero(value: Any) -> bool:
    return is_number(value) and value == 0


def _index(value: Any) -> Any:
    return value.cast(dtypes.index) if isinstance(value, UOp) else value


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return a.alu(op, b)


def _accumulation(value: Any, p: UOp) -> tuple[Ops | None, UOp] | None:
    """How a turn changes local ``p``: ``(op, term)`` where ``value`` is ``p op term`` (under ``where``s, ``p``
    kept as is where a branch leaves it: the term is then the op's identity), ``(None, p)`` where the turn
    leaves it, None for anything else."""
    if value is p:
        return None, p
    if not isinstance(value, UOp):
        return None
    if value.op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN) and len(value.src) == 2:
        a, b = value.src
        if a is p and p not in b.toposort():
            return value.op, b
        if b is p and p not in a.toposort():
            return value.op, a
    if value.op is Ops.SUB and value.src[0] is p and p not in value.src[1].toposort():
        return Ops.ADD, -value.src[1]
    if value.op is Ops.WHERE and p not in value.src[0].toposort():
        sides = [_accumulation(s, p) for s in value.src[1:]]
        if any(s is None for s in sides):
            return None
        ops = [s[0] for s in sides if s is not None and s[0] is not None]
        if not ops:
            return None, p
        if any(o is not ops[0] for o in ops):
            return None
        op = ops[0]
        identity = UOp.const(p.dtype, reduce_identity(op, p.dtype))
        terms = [s[1] if s is not None and s[0] is not None else identity for s in sides]
        return op, value.src[0].where(terms[0], terms[1])
    return None


def _unstated(sink: UOp, stated: dict[UOp, dict[UOp, int]]) -> UOp:
    """``sink`` without the memory states that change nothing, and without the gates of the loads that lose
    them. A state holds a read at its statement; the builder's rule reads where the value is used, after the
    effects before that. The two read the same wherever no effect on the buffer comes between a read and
    the statements that use it, which is so of every buffer the kernel reads but never writes, or writes
    but never reads, and most that it updates in place (``x[i] = x[i] * 2``; a scan's ``out[r, c - 1]``):
    their kernels are the builder's, and lower as its do. A gate keeps a held read (perhaps computed ahead
    of its branch) from reading where the branch is not taken; a read where its value is used needs none."""
    changed = {memory_of(u.src[0].src[0]) for e in sink.src if e.op in EFFECTS for u in e.toposort()
               if u.op is Ops.LOAD and is_state(u.src[0].src[0]) and _between(e, u.src[0].src[0], stated[e])}
    sink = substitute(sink, {u: u.src[0] for u in sink.toposort() if is_state(u) and u.src[0] not in changed})
    return substitute(sink, {u: u.replace(src=(u.src[0].replace(src=u.src[0].src[:2]),)) for u in sink.toposort()
                             if u.op is Ops.LOAD and len(u.src[0].src) == 3 and u.src[0].src[0].op is Ops.PARAM})


def _between(effect: UOp, state: UOp, stated: dict[UOp, int]) -> bool:
    """Whether an effect on the buffer of memory ``state`` may come between a read through it and ``effect``,
    which uses the read: one stated in between, or one in a loop around ``effect`` that the read is outside
    of (read where it is used, in every turn, it would see the turns before)."""
    loops = {u for u in effect.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP}
    return stated.get(state.src[0], 0) != state.arg or not loops <= set(state.src[1:])


def _merged_reduce(term: UOp, r: UOp, op: Ops) -> UOp:
    """``term`` reduced over ``r`` by ``op``: one REDUCE over ``r`` and the ranges of a same-op REDUCE that
    ``term`` is (nested loops of one sum are one sum over their ranges, outermost first)."""
    if term.op is Ops.REDUCE and term.arg is op:
        return term.src[0].reduce(r, *term.src[1:], op=op)
    return term.reduce(r, op=op)


__all__ = ["Translator"]
