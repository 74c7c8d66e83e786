"""Arrays whose length the data decides, in ``@svod.jit``'s array statements (``svod.frontend.arrays``):
``x[mask]`` as a value and ``np.unique(x)``, which a plan sized per shape can make only as a buffer of the
largest length they may have and a count.

::

    y = x[mask]           y = np.empty(x.size)                 one work item, in order: each element where
    ...                   count = 0                            the mask holds, at the next place
    return y              for i0 in range(...): ...
                              if mask[i0, ...]:
                                  y[count] = x[i0, ...]; count += 1
                          return y[:count]                     the first ``count`` elements come back

    u = np.unique(x)      s = np.sort(x, axis=None)            a sort of the plan (``svod.frontend.sorting``)
                          u = np.empty(x.size); count = 0      then each first of a run of equal numbers
                          for i in range(x.size): ...          (NaNs one run, as NumPy's ``equal_nan``)
                          return u[:count]

A large ``x[mask]`` (``COMPACT_BLOCKED_FROM`` elements, two rows or more) is the same loop in blocks of rows:
a ``prange`` of the blocks counts each block's kept elements, one work item sums the counts in order (each
block's first place, and the count), and a second ``prange`` puts each block's elements from its first place,
so the threads share both passes and the order is the one work item's.

The function returns such an array as its first elements (``return y[:count]``: ``Reader.prefixes``), and
nothing else may read it: every other use of its name is refused, saying so.

A reduction of ``x[mask]`` (``x[m].mean()``; ``y = x[m]`` read by the next statement only so:
``MASKED_REDUCTIONS``) needs no compacted array: it reduces every element of ``x`` where the mask holds, as
the mask's count is its length::

    s = x[m].sum()        s = sum(x[i] if m[i] else 0 for each i)
    a = x[m].mean()       a = s / count(m)                     NaN where the mask holds nowhere, as NumPy's

A max or a min of it, which NumPy refuses where the mask holds nowhere, is refused; so is its length, a Python
int in NumPy (weak in arithmetic), which a count the run computes is not.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_calls import Masked, masked_by
from svod.frontend.array_exprs import (
    Elementwise,
    Emitter,
    Expr,
    Fused,
    Named,
    Reduced,
    Scalar,
    Value,
    Whole,
    computes,
    numpy,
    typed,
)
from svod.frontend.nodes import assign, call, code, constant, for_loop, load, placed, walk
from svod.frontend.phases import Reader
from svod.frontend.rebinding import Bindings
from svod.frontend.source import Source


class Compactions:
    """The statements' ``ArrayRewriter``, as the functions here use it."""

    source: Source
    reader: Reader
    arrays: dict[str, Expr]
    counter: itertools.count[int]
    described: dict[str, str]
    changed: bool
    sized: dict[str, str]
    """Each array of a length the data decides: the scalar that holds the length."""
    following: list[ast.stmt]
    bindings: Bindings

    @abstractmethod
    def static(self, node: ast.AST, x: Expr, what: str) -> None: ...

    @abstractmethod
    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...

    @abstractmethod
    def value(self, node: ast.expr) -> Value: ...

    @abstractmethod
    def allocation(self, stmt: ast.stmt, made: Named) -> list[ast.stmt]: ...

    @abstractmethod
    def new_array(self, stmt: ast.stmt, name: str, value: Expr, looped: bool) -> list[ast.stmt]: ...

    @abstractmethod
    def fused_into_next(self, name: str, stmt: ast.stmt) -> bool: ...

    @abstractmethod
    def elementwise(self, node: ast.AST, combine: Callable[[list[ast.expr]], ast.expr], dtype: np.dtype,
                    *operands: Value) -> Expr: ...

    @abstractmethod
    def accumulated(self, node: ast.Call, dtype_node: ast.expr, name: str) -> np.dtype | None: ...

    def returned_prefix(self, value: ast.expr) -> bool:
        """Whether ``value`` is ``y[:k]`` of an array ``y`` of its own name (or an argument): returned as its
        first ``k`` elements, ``k`` computed where the return stands (``Reader.prefixes``), whatever the host
        knows of it."""
        if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and
                isinstance(value.slice, ast.Slice) and value.slice.lower is None and value.slice.step is None and
                value.slice.upper is not None):
            return False
        bound = self.arrays.get(value.value.id)
        return isinstance(bound, Named) and bound.name == value.value.id and value.value.id not in self.sized

    def sized_return(self, name: str, at: ast.AST) -> ast.expr:
        """``name[:count]``: an array of a length the data decides, returned."""
        prefix = ast.Subscript(load(name), ast.Slice(None, load(self.sized[name]), None), ast.Load())
        return ast.copy_location(prefix, at)

    # ---- x[mask] -------------------------------------------------------------------------------------------

    def compacted(self, stmt: ast.stmt, name: str, value: Expr) -> list[ast.stmt] | None:
        """``name = x[mask]`` (or an expression of arrays under one mask: ``x[m] * 2``): the elements where the
        mask holds, in order, at the front of an array of the mask's size, and their count; None where
        ``value`` reads no mask."""
        masked = masked_in(value)
        if masked is None:
            return None
        if not masked_by(value, masked.key):
            raise self.refuse(stmt, "x[mask] is an array of its own here only alone, or in an expression of arrays "
                                    "under the same mask (`x[m] * 2`)")
        self.only_returned(stmt, name, "x[mask]")
        self.static(stmt, masked, "x[mask]")
        size = int(np.prod(extents.numbers(masked.shape)))
        made = Named((size,), value.dtype, name)
        self.arrays[name] = made
        count = self.fresh_count(name, f"the count of `{code(stmt, 40)}`")
        self.changed = True
        rows = extents.numbers(masked.shape)[0] if masked.shape else 1
        if size < COMPACT_BLOCKED_FROM or rows < 2:
            return [*self.allocation(stmt, made),
                    *placed([assign(count, constant(0)), *self.kept_in_order(name, value, masked, count)], stmt)]
        return [*self.allocation(stmt, made), *self.blocked(stmt, name, value, masked, count, rows)]

    def kept_in_order(self, name: str, value: Expr, masked: Masked, count: str,
                      rows: tuple[ast.expr, ast.expr] | None = None, counting: bool = False) -> list[ast.stmt]:
        """The loops over the mask's elements (``rows[1]`` rows from row ``rows[0]`` where given) that put each
        element of ``value`` where the mask holds at ``name[count]``, and add 1 to ``count``; with ``counting``,
        that only add 1."""
        variables = [f"_svod_a{next(self.counter)}" for _ in masked.shape]
        index: list[ast.expr] = [load(v) for v in variables]
        if rows is not None:
            index[0] = ast.BinOp(rows[0], ast.Add(), index[0])
        out = Emitter(self.counter)
        kept = masked.mask.element(index, out)
        counted = ast.AugAssign(ast.Name(count, ast.Store()), ast.Add(), constant(1))
        if counting:
            body: list[ast.stmt] = [*out.statements, ast.If(kept, [counted], [])]
        else:
            element = value.element(index, out)
            body = [*out.statements, ast.If(kept, [
                assign(ast.Subscript(load(name), load(count), ast.Load()), typed(element, value.dtype)), counted], [])]
        for depth, (variable, length) in reversed(list(enumerate(zip(variables, masked.shape, strict=True)))):
            turns = rows[1] if depth == 0 and rows is not None else constant(length)
            body = [for_loop(variable, call("range", turns), body)]
        return body

    def blocked(self, stmt: ast.stmt, name: str, value: Expr, masked: Masked, count: str,
                rows: int) -> list[ast.stmt]:
        """``kept_in_order`` in ``COMPACT_BLOCKS`` blocks of rows, which work items of a ``prange`` count, then
        (the exclusive sum of the counts, in order, each block's first place) fill in parallel: the same
        elements in the same order as one work item puts them. A block's rows are counted as at most ``per``
        (a device that bounds a work item's loops sees that bound)."""
        per = -(-rows // COMPACT_BLOCKS)
        blocks = -(-rows // per)
        counts, block, first = (f"_svod_{stem}{next(self.counter)}" for stem in ("counts", "block", "first"))
        at = load(block)
        start = ast.BinOp(at, ast.Mult(), constant(per))
        turns = call("min", constant(per), ast.BinOp(constant(rows), ast.Sub(), start))
        in_block = ast.Subscript(load(counts), at, ast.Load())
        held = np.dtype(np.int32 if extents.high(extents.elements(masked.shape)) <= np.iinfo(np.int32).max else np.intp)
        made = self.allocation(stmt, Named((blocks,), held, counts))
        counting = for_loop(block, call("_svod_prange", constant(blocks)), [
            assign(first, constant(0)),
            *self.kept_in_order(name, value, masked, first, (start, turns), counting=True),
            assign(ast.Subscript(load(counts), at, ast.Load()), load(first))])
        summed = [assign(count, constant(0)), for_loop(block, call("range", constant(blocks)), [
            assign(first, in_block), assign(ast.Subscript(load(counts), at, ast.Load()), load(count)),
            ast.AugAssign(ast.Name(count, ast.Store()), ast.Add(), load(first))])]
        filling = for_loop(block, call("_svod_prange", constant(blocks)), [
            assign(first, in_block), *self.kept_in_order(name, value, masked, first, (start, turns))])
        return [*made, *placed([counting, *summed, filling], stmt)]

    # ---- reductions of x[mask] ---------------------------------------------------------------------------

    def reduced_next(self, stmt: ast.stmt, name: str, value: Expr) -> bool:
        """Whether ``name = value``, an ``x[mask]``, is read by the next statement alone (``fused_into_next``),
        and there only whole, by a reduction or ``len`` (``reduced_only``): then it is computed where it is
        reduced (``Fused``), never compacted."""
        if masked_in(value) is None or not isinstance(stmt, ast.Assign) or not self.fused_into_next(name, stmt):
            return False
        return reduced_only(self.following[0], self.bindings.spelled(name), self.reader.resolve)

    def masked_reduction(self, node: ast.Call, operand: Expr, name: str, keywords: list[ast.keyword],
                         positional: list[ast.expr]) -> Value:
        """``name`` (a reduction) of ``operand``, which reads ``x[mask]``: of each element where the mask holds,
        as NumPy reduces the compacted array (the module docstring)."""
        if name not in MASKED_REDUCTIONS:
            raise self.refuse(node, f"{name} of x[mask]: the mask may hold nowhere, where NumPy raises (no identity); "
                                    f"svod reduces x[mask] by {', '.join(MASKED_REDUCTIONS)}")
        takes = ("axis", "dtype") if name in ("sum", "prod", "mean") else ("axis",)
        given = dict(zip(takes, positional, strict=False)) | {k.arg: k.value for k in keywords if k.arg}
        if not whole_axis(given.get("axis")) or len(positional) > len(takes) or set(given) - set(takes):
            raise self.refuse(node, f"{name} of x[mask] takes no argument but axis (None, 0 or -1: x[mask] is 1-D)"
                                    f"{' and dtype' if 'dtype' in takes else ''}")
        within = self.accumulated(node, given["dtype"], name) if "dtype" in given else None
        mask, under = self.under_mask(node, operand)
        identity: dict[str, ast.expr] = {"sum": constant(0), "prod": constant(1), "mean": constant(0),
                                         "any": constant(False), "all": constant(True)}
        if name in ("any", "all"):
            dtype = np.dtype(np.bool_)
            kept = self.elementwise(node, lambda c: ast.IfExp(c[0], ast.Compare(c[1], [ast.NotEq()], [constant(0)]),
                                                              identity[name]), dtype, mask, under)
        else:
            dtype = np.asarray(getattr(np, name)(np.ones(1, under.dtype), dtype=within)).dtype  # NumPy's
            kept = self.elementwise(node, lambda c: ast.IfExp(c[0], typed(c[1], dtype), typed(identity[name], dtype)),
                                    dtype, mask, under)
        axes = tuple(range(len(mask.shape)))
        total = Whole(Reduced((), dtype, "sum" if name == "mean" else name, kept, axes))
        if name != "mean":
            return total
        count = self.count(node, mask)  # NumPy divides by the count in the mean's dtype
        return self.elementwise(node, lambda c: typed(ast.BinOp(c[0], ast.Div(), typed(c[1], dtype)), dtype),
                                dtype, total, count)

    def count(self, node: ast.AST, mask: Expr) -> Expr:
        """How many elements of ``mask`` hold: an int32 where the mask has fewer elements than int32's greatest
        (every device holds int32), else an intp."""
        size = extents.high(extents.elements(mask.shape))
        dtype = np.dtype(np.int32 if size <= np.iinfo(np.int32).max else np.intp)
        counted = self.elementwise(node, lambda c: typed(c[0], dtype), dtype, mask)
        return Whole(Reduced((), dtype, "sum", counted, tuple(range(len(mask.shape)))))

    def under_mask(self, node: ast.AST, operand: Expr) -> tuple[Expr, Expr]:
        """The mask ``operand`` reads its arrays under (one mask: ``x[m] * y[m]``), and ``operand`` of the
        whole arrays, to read where the mask holds."""
        masked = masked_in(operand)
        assert masked is not None
        whole = unmasked(operand, masked.key)
        if not isinstance(whole, Expr):
            raise self.refuse(node, "a reduction of x[mask] reads arrays under one mask only, alone or in an "
                                    "expression of them (`(x[m] * y[m]).sum()`)")
        return masked.mask, whole

    # ---- np.unique -----------------------------------------------------------------------------------------

    def is_unique(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.reader.resolve(node.func) is np.unique

    def unique_statement(self, stmt: ast.stmt, looped: bool) -> list[ast.stmt] | None:
        """``u = np.unique(x)``: ``x`` sorted (flattened), then the first of each run of equal numbers at the
        next place, in one work item; None for another statement."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and self.is_unique(stmt.value)):
            return None
        target = stmt.targets[0]
        if not isinstance(target, ast.Name):
            raise self.refuse(stmt, "np.unique's array is assigned to a name, which the function returns")
        node = stmt.value
        assert isinstance(node, ast.Call)
        equal_nan = self.unique_options(node)
        self.only_returned(stmt, target.id, "np.unique(x)")
        operand = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "ar")
        made, source = self.own_array(stmt, operand, looped)
        self.static(stmt, source, "np.unique")
        size = int(np.prod(extents.numbers(source.shape)))
        ordered = f"_svod_s{next(self.counter)}"
        self.described[ordered] = f"the sorted numbers of `{code(node, 40)}`"
        self.arrays[ordered] = Named((size,), source.dtype, ordered)
        sort = ast.Call(numpy("sort"), [load(source.name)], [ast.keyword("axis", constant(None))])
        unique = Named((size,), source.dtype, target.id)
        self.arrays[target.id] = unique
        count = self.fresh_count(target.id, f"the count of `{code(node, 40)}`")
        i, value, before = (f"_svod_{stem}{next(self.counter)}" for stem in ("a", "v", "p"))
        differs: ast.expr = ast.Compare(load(value), [ast.NotEq()], [load(before)])
        if equal_nan and source.dtype.kind == "f":  # NaNs are one run (``v != v``: a NaN)
            both_nan = ast.BoolOp(ast.And(), [ast.Compare(load(value), [ast.NotEq()], [load(value)]),
                                              ast.Compare(load(before), [ast.NotEq()], [load(before)])])
            differs = ast.BoolOp(ast.And(), [differs, ast.UnaryOp(ast.Not(), both_nan)])
        first = ast.BoolOp(ast.Or(), [ast.Compare(load(i), [ast.Eq()], [constant(0)]), differs])
        earlier = call("max", ast.BinOp(load(i), ast.Sub(), constant(1)), constant(0))
        body: list[ast.stmt] = [
            assign(value, ast.Subscript(load(ordered), load(i), ast.Load())),
            assign(before, ast.Subscript(load(ordered), earlier, ast.Load())),
            ast.If(first, [assign(ast.Subscript(load(target.id), load(count), ast.Load()), load(value)),
                           ast.AugAssign(ast.Name(count, ast.Store()), ast.Add(), constant(1))], [])]
        self.changed = True
        return [*made, *placed([assign(ordered, sort)], stmt), *self.allocation(stmt, unique),
                *placed([assign(count, constant(0)), for_loop(i, call("range", constant(size)), body)], stmt)]

    def unique_options(self, node: ast.Call) -> bool:
        """NumPy's options of ``np.unique`` as svod takes them (one array back, sorted; the flattened array);
        whether NaNs are one value."""
        try:
            bound = inspect.signature(np.unique).bind(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
        except TypeError as err:
            raise self.refuse(node, f"np.unique: {err}") from None
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.refuse(node, "np.unique takes its arguments written out (no * or **)")
        allowed: dict[str, tuple[Any, ...]] = {"return_index": (False,), "return_inverse": (False,),
                                               "return_counts": (False,), "axis": (None,), "sorted": (True,),
                                               "equal_nan": (True, False)}
        options: dict[str, Any] = {}
        for name, given in bound.arguments.items():
            if name == "ar":
                continue
            value = given.value if isinstance(given, ast.Constant) else given
            if name not in allowed or value not in allowed[name]:
                raise self.refuse(node, f"np.unique takes {name}={ast.unparse(given)}: svod takes "
                                        f"{' or '.join(map(repr, allowed.get(name, ())))} (its one array, sorted, of "
                                        "the flattened array)")
            options[name] = value
        return bool(options.get("equal_nan", True))

    def own_array(self, stmt: ast.stmt, operand: ast.expr, looped: bool) -> tuple[list[ast.stmt], Named]:
        """``operand`` as an array of its own name: itself, or an expression or view made into a new array."""
        value = self.value(operand)
        if not isinstance(value, Expr):
            raise self.refuse(stmt, "np.unique takes an array")
        if isinstance(value, Named) and isinstance(operand, ast.Name) and value.name == operand.id and \
                not computes(value):
            return [], value
        name = f"_svod_s{next(self.counter)}"
        made = self.new_array(stmt, name, value, looped)
        found = self.arrays[name]
        assert isinstance(found, Named)
        return made, found

    # ---- what such an array may be -------------------------------------------------------------------------

    def fresh_count(self, name: str, described: str) -> str:
        count = f"_svod_count{next(self.counter)}"
        self.described[count] = described
        self.sized[name] = count
        return count

    def only_returned(self, stmt: ast.stmt, name: str, what: str) -> None:
        """Refuse a use of ``name``, an array of a length the data decides, other than the function's last
        ``return`` (and the statement ``stmt`` that makes it). (A name of svod's is one its return made.)"""
        if name.startswith("_svod_"):
            return
        function = self.source.node
        last = function.body[-1] if function.body else None
        allowed = {id(n) for n in walk(stmt)}
        if isinstance(last, ast.Return) and last.value is not None:
            returned = last.value.elts if isinstance(last.value, ast.Tuple) else [last.value]
            allowed |= {id(v) for v in returned if isinstance(v, ast.Name)}
        for found in walk(function):
            if isinstance(found, ast.Name) and found.id == name and id(found) not in allowed:
                raise self.refuse(found, f"{name} = {what} has a length known only after the run: svod returns such "
                                         f"an array (`return {name}`) and reads it nowhere else")
        returns = isinstance(last, ast.Return) and any(isinstance(n, ast.Name) and n.id == name for n in walk(last))
        if not returns:
            raise self.refuse(stmt, f"{name} = {what} has a length known only after the run: svod makes it only to "
                                    f"return it (`return {name}`)")


COMPACT_BLOCKS = 64
"""The blocks of rows whose elements ``x[mask]`` counts, then puts in place, in parallel: enough for the
threads of a CPU to share."""
COMPACT_BLOCKED_FROM = 1 << 16
"""The fewest elements ``x[mask]`` compacts in blocks; fewer are put in place by one work item, in order."""
MASKED_REDUCTIONS = ("sum", "prod", "mean", "any", "all")
"""The reductions of an ``x[mask]`` svod computes: each has a value where the mask holds nowhere."""


def reduced_only(stmt: ast.stmt, names: set[str], resolve: Callable[[ast.expr], Any]) -> bool:
    """Whether each read of ``names`` in ``stmt`` is a whole reduction of it (``y.sum()``, ``np.mean(y)``)."""
    whole: set[int] = set()
    for node in walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in MASKED_REDUCTIONS:
            whole.add(id(node.func.value))
        elif node.args and any(resolve(node.func) is getattr(np, name) for name in MASKED_REDUCTIONS):
            whole.add(id(node.args[0]))
    reads = [n for n in walk(stmt) if isinstance(n, ast.Name) and n.id in names]
    return bool(reads) and all(isinstance(n.ctx, ast.Load) and id(n) in whole for n in reads)


def whole_axis(axis: ast.expr | None) -> bool:
    """Whether a reduction's ``axis`` is every axis of a 1-D array: none, None, 0 or -1, as written."""
    try:
        return axis is None or ast.literal_eval(axis) in (None, 0, -1)
    except ValueError:
        return False


def unmasked(value: Value, key: str) -> Value | None:
    """``value`` of the whole arrays its ``x[mask]`` views under the mask of ``key`` (its element where the mask
    holds is ``value``'s); None where it reads an array otherwise."""
    if isinstance(value, Scalar):
        return value
    if isinstance(value, Masked):
        return value.base if value.key == key else None
    if isinstance(value, Fused) and value.made is None:
        return unmasked(value.value, key)
    if isinstance(value, Elementwise):
        operands = [unmasked(o, key) for o in value.operands]
        if any(o is None for o in operands):
            return None
        return replace(value, operands=tuple(o for o in operands if o is not None))
    return None


def masked_in(value: Value) -> Masked | None:
    """The first ``x[mask]`` that ``value`` reads, if any."""
    if isinstance(value, Masked):
        return value
    if not isinstance(value, Expr):
        return None
    parts = [p for v in vars(value).values() for p in (v if isinstance(v, tuple) else (v,))]
    return next((found for p in parts if isinstance(p, Expr) and (found := masked_in(p)) is not None), None)
