"""NumPy's accumulating scatters and counts in ``@svod.jit``'s array statements (``svod.frontend.arrays``):
``np.add.at`` (and ``np.subtract.at``, ``np.maximum.at``, ``np.minimum.at``), ``np.bincount`` and
``np.histogram``, each rewritten into the loops it means, as the other array statements are.

- ``np.add.at(a, idx, v)`` is unbuffered: an index that repeats adds each of its values, a negative one counts
  from the end, one out of bounds is an ``IndexOutOfBoundsError``. Integers are updated in parallel by atomic
  updates (exact: integer addition wraps, in any order, to NumPy's result); floats in index order, in one
  sequential loop, so that the order-dependent sum is NumPy's bit for bit (and the same in every run).
- ``np.bincount(x, minlength=m)`` counts in parallel by atomic updates into ``m`` counters (``weights=`` sums in
  index order, as NumPy does); NumPy's result is longer where ``x`` holds a value of ``m`` or more, which svod
  cannot size before the run: such a value is an ``IndexOutOfBoundsError``, as a negative one is.
- ``np.histogram(x, bins, range)`` of ``bins`` equal bins: the edges as ``np.linspace`` computes them, each
  value's bin as NumPy finds it (the division, then the correction against the edges on either side: the last
  bin closed on the right), counted in parallel, each block of values into counts of its own, summed after;
  values outside the range (and NaNs) are dropped. Without a range it is the values' least and greatest
  (reductions before it).

Every number is computed in the dtype NumPy computes it in, found by applying NumPy's operation to samples of
the operands' types (a Python number is weak, a NumPy scalar is not), and cast to it in the loop's code.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents, pylang
from svod.frontend.array_calls import Gathered, stored_array
from svod.frontend.array_exprs import (
    Emitter,
    Expr,
    Named,
    Reduced,
    Scalar,
    Value,
    broadcast_element,
    numpy,
    typed,
)
from svod.frontend.extents import Dim, node_of
from svod.frontend.nodes import assign, call, code, constant, copied, for_loop, load, placed, stored, walk
from svod.frontend.phases import Reader

KERNEL_NAMES = {"_svod_atomic_add": pylang.atomic_add, "_svod_atomic_max": pylang.atomic_max,
                "_svod_atomic_min": pylang.atomic_min}
"""The names the loops written here call the atomic updates by."""
_AT = {np.add: ("add", ast.Add), np.subtract: ("subtract", ast.Sub), np.maximum: ("maximum", None),
       np.minimum: ("minimum", None)}
"""The ufuncs whose ``.at`` svod has: NumPy's name, and the operator of the two that have one."""
BLOCK = 1 << 16
"""The values a work item of a histogram counts into counters of its own (NumPy counts in blocks of as many)."""
COUNTERS = 1 << 22
"""The most counters a histogram's blocks have in all: fewer blocks where the bins are many."""
_ATOMIC_DTYPES = tuple(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64))
"""The integer dtypes an atomic update takes on every device that holds them."""
_NUMBERS = (int, float, np.generic)
"""What a histogram's range may hold: Python numbers (weak, as NumPy takes them) or NumPy scalars."""


class Histograms:
    """The statements' ``ArrayRewriter``, as the functions here use it."""

    reader: Reader
    arrays: dict[str, Expr]
    arguments: set[str]
    described: dict[str, str]
    host: dict[str, Any]
    counter: itertools.count[int]
    at: ast.stmt
    pending: list[ast.stmt]
    read: set[str]
    changed: bool

    @abstractmethod
    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...

    @abstractmethod
    def value(self, node: ast.expr) -> Value: ...

    @abstractmethod
    def on_host(self, node: ast.expr) -> Any: ...

    @abstractmethod
    def host_int(self, node: ast.expr, required: bool = True, numpy_bool: bool = False) -> int | None: ...

    @abstractmethod
    def fresh_temporary(self, shape: tuple[Dim, ...], dtype: np.dtype, node: ast.AST) -> Expr: ...

    @abstractmethod
    def allocation(self, stmt: ast.stmt, made: Named) -> list[ast.stmt]: ...

    @abstractmethod
    def static(self, node: ast.AST, x: Expr, what: str) -> None: ...

    @abstractmethod
    def loops(self, stmt: ast.stmt, stored: Expr, value: Value) -> list[ast.stmt]: ...

    @abstractmethod
    def store(self, stmt: ast.stmt, stored: Expr, value: Value, node: ast.AST) -> list[ast.stmt]: ...

    @abstractmethod
    def elementwise(self, node: ast.AST, combine: Callable[[list[ast.expr]], ast.expr], dtype: np.dtype,
                    *operands: Value) -> Expr: ...

    @abstractmethod
    def reshaped(self, node: ast.AST, x: Expr, shape: tuple[int, ...]) -> Expr: ...

    @abstractmethod
    def new_array(self, stmt: ast.stmt, name: str, value: Expr, looped: bool) -> list[ast.stmt]: ...

    def temporary(self, shape: tuple[int, ...], dtype: np.dtype, node: ast.AST) -> Named:
        """A new array of a shape the host knows (``fresh_temporary``'s array of its own)."""
        made = self.fresh_temporary(shape, dtype, node)
        assert isinstance(made, Named)
        return made

    def fresh(self, stem: str) -> str:
        return f"_svod_{stem}{next(self.counter)}"

    # ---- statements ----------------------------------------------------------------------------------------

    def counting_statement(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        """``np.add.at(a, idx, v)`` (and the other ufuncs' ``.at``) and ``counts, edges = np.histogram(...)``
        rewritten; None for any other statement."""
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return self.accumulated_at(stmt, stmt.value)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple) \
                and self.is_histogram(stmt.value):
            names = stmt.targets[0].elts
            if len(names) != 2 or not all(isinstance(n, ast.Name) for n in names):
                raise self.refuse(stmt, "np.histogram makes two arrays, (counts, edges): assign them to two names")
            assert isinstance(stmt.value, ast.Call)
            self.histogram(stmt.value, [n.id for n in names if isinstance(n, ast.Name)])
            made, self.pending = self.pending, []
            return made
        return None

    def is_counting_statement(self, stmt: ast.stmt) -> bool:
        """Whether ``stmt`` is a statement ``counting_statement`` rewrites (so a loop around it is rewritten)."""
        return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and self.ufunc_at(stmt.value)
                is not None) or (isinstance(stmt, ast.Assign) and self.is_histogram(stmt.value))

    def ufunc_at(self, node: ast.Call) -> np.ufunc | None:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "at"):
            return None
        ufunc = self.reader.resolve(func.value)
        return ufunc if isinstance(ufunc, np.ufunc) else None

    def is_histogram(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.reader.resolve(node.func) is np.histogram

    # ---- np.add.at and the others --------------------------------------------------------------------------

    def accumulated_at(self, stmt: ast.Expr, node: ast.Call) -> list[ast.stmt] | None:
        """``ufunc.at(a, indices, values)``: ``a[indices] op= values``, unbuffered."""
        ufunc = self.ufunc_at(node)
        if ufunc is None:
            return None
        if ufunc not in _AT:
            raise self.refuse(node, f"np.{ufunc.__name__}.at is not one svod has (np.add.at, np.subtract.at, "
                                    "np.maximum.at and np.minimum.at are)")
        name, operator = _AT[ufunc]
        if len(node.args) != 3 or node.keywords:
            raise self.refuse(node, f"np.{name}.at takes (a, indices, values)")
        a_node, indices, values = node.args
        self.changed = True
        target = self.value(ast.copy_location(ast.Subscript(copied(a_node), copied(indices),
                                                            ast.Load()), node))
        element = isinstance(target, Scalar) and isinstance(target.node, ast.Subscript)
        for operand in (target, self.value(values)):
            if isinstance(operand, Expr):
                self.static(node, operand, f"np.{name}.at")
        if not element and (not isinstance(target, Expr) or stored_array(target) is None):
            raise self.refuse(node, f"np.{name}.at updates an array of the function's (an argument or a temporary)")
        value = self.value(values)
        if isinstance(target, Scalar):  # one element, at an int index: its update as kernel code
            owner = self.value(a_node)
            if not isinstance(value, Scalar) or not isinstance(owner, Expr):
                raise self.refuse(node, f"np.{name}.at of one element takes one value")
            dtype = self.at_dtype(node, ufunc, owner, value)
            update = _combined(name, operator, copied(target.node), value.node, dtype)
            return placed([assign(stored(target.node), typed(update, owner.dtype))], stmt)
        dtype = self.at_dtype(node, ufunc, target, value)
        if isinstance(value, Expr):
            try:
                shape = np.broadcast_shapes(extents.numbers(target.shape), extents.numbers(value.shape))
            except ValueError:
                shape = ()
            if shape != target.shape:
                raise self.refuse(node, f"np.{name}.at's values of shape {value.shape} do not broadcast to the "
                                        f"shape {target.shape} of the elements they update")
        if not isinstance(target, Gathered):  # each element once (a slice, a mask, an index): a plain update
            combined = self.elementwise(node, lambda c: _combined(name, operator, c[0], c[1], dtype), dtype, target,
                                        value)
            return self.store(stmt, target, combined, stmt)
        before: list[ast.stmt] = []
        if _reads(value, target) or any(_reads(i, target) for i in target.indices):
            value, before = self.computed_first(stmt, value, node)  # NumPy reads the values before any update
        return [*before, *placed(self.updates(name, operator, target, value, dtype), stmt)]

    def at_dtype(self, node: ast.Call, ufunc: np.ufunc, target: Expr, value: Value) -> np.dtype:
        """The dtype ``ufunc.at`` computes in (NumPy's loop for the target's dtype and the values'), after
        NumPy's own check of the two on samples."""
        probe = np.zeros(1, target.dtype)
        sample = value.sample if isinstance(value, Scalar) else np.ones(1, value.dtype)
        try:
            with np.errstate(all="ignore"):
                ufunc.at(probe, np.zeros(1, np.intp), sample)
        except Exception as err:  # NumPy's own complaint, at the user's line
            raise self.refuse(node, f"NumPy refuses np.{ufunc.__name__}.at for an array of {target.dtype} and "
                                    f"values of {_kind(value)} ({err})") from err
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(np.ones(1, target.dtype), sample)).dtype

    def computed_first(self, stmt: ast.stmt, value: Value, node: ast.AST) -> tuple[Value, list[ast.stmt]]:
        """``value`` computed into a temporary of its own before the updates that would change what it reads."""
        if not isinstance(value, Expr):
            return value, []
        made = self.temporary(extents.numbers(value.shape), value.dtype, node)
        return made, [*self.allocation(stmt, made), *self.loops(stmt, made, value)]

    def updates(self, name: str, operator: type[ast.operator] | None, target: Gathered, value: Value,
                dtype: np.dtype) -> list[ast.stmt]:
        """The loops over the target's elements that update each: atomics in parallel where the update is exact
        in any order (integers, in their own dtype or one the update wraps into it), else in order."""
        variables = [self.fresh("a") for _ in target.shape]
        index = [load(v) for v in variables]
        out = Emitter(self.counter)
        element = target.element(index, out)
        amount = broadcast_element(value, target.shape, index, out)
        loops = list(zip(variables, target.shape, strict=True))
        atomic = target.dtype in _ATOMIC_DTYPES and dtype.kind in "iu" and (operator is not None or
                                                                            dtype == target.dtype)
        if atomic and isinstance(element, ast.Subscript) and isinstance(element.value, ast.Name):
            change = typed(amount, dtype)
            if name == "subtract":
                change = typed(ast.UnaryOp(ast.USub(), change), dtype)
            update = call(load("_svod_atomic_" + {"maximum": "max", "minimum": "min"}.get(name, "add")),
                          element.value, element.slice, typed(change, target.dtype))
            return _nest(loops, [*out.statements, ast.Expr(update)], parallel=True)
        combined = _combined(name, operator, element, amount, dtype)
        stores = [*out.statements, assign(stored(element), typed(combined, target.dtype))]
        return _nest(loops, stores, parallel=False)

    # ---- np.bincount ---------------------------------------------------------------------------------------

    def bincount(self, node: ast.Call) -> Named:
        """``np.bincount(x, weights=None, minlength=m)``: ``m`` counters, each value of ``x`` counted at its
        element (an ``IndexOutOfBoundsError`` where it is negative or ``m`` or more)."""
        arguments = self.bound_arguments(node, np.bincount)
        x = self.value(arguments["x"])
        if not isinstance(x, Expr) or len(x.shape) != 1 or x.dtype.kind not in "iub" or x.dtype == np.uint64:
            raise self.refuse(node, "np.bincount counts a 1-D array of integers (NumPy casts them to intp safely)")
        self.static(node, x, "np.bincount")
        minlength = arguments.get("minlength")
        if minlength is None:
            raise self.refuse(node, "np.bincount(x) makes max(x) + 1 counts, a length known only after the run; "
                                    "pass minlength=m (svod makes m counts, and a value of m or more is an "
                                    "IndexOutOfBoundsError)")
        length = self.host_int(minlength, required=False)
        if length is None or length < 0:
            raise self.refuse(node, "np.bincount's minlength is a non-negative int the host knows before the run")
        weights = arguments.get("weights")
        weighed = self.value(weights) if weights is not None and not _is_none(weights) else None
        if weighed is not None and (not isinstance(weighed, Expr) or weighed.shape != x.shape):
            raise self.refuse(node, "np.bincount's weights are an array of x's shape")
        dtype = np.dtype(np.float64 if weighed is not None and x.shape[0] else np.intp)  # (NumPy's, of no values)
        counts = self.temporary((length,), dtype, node)
        i = self.fresh("a")
        out = Emitter(self.counter)
        at = x.element([load(i)], out)
        if weighed is None:
            body: list[ast.stmt] = [ast.Expr(call(load("_svod_atomic_add"), load(counts.name), at,
                                                  typed(constant(1), dtype)))]
        else:
            total = ast.Subscript(load(counts.name), at, ast.Load())
            body = [assign(stored(total), ast.BinOp(copied(total), ast.Add(),
                                                    typed(weighed.element([load(i)], out), dtype)))]
        self.pending += [*placed([_zeros(counts)], self.at),
                         *placed(_nest([(i, x.shape[0])], [*out.statements, *body], parallel=weighed is None),
                                 self.at)]
        self.changed = True
        return counts

    def bound_arguments(self, node: ast.Call, function: Callable[..., Any]) -> dict[str, ast.expr]:
        """The argument nodes of a call of NumPy's ``function``, by its parameters' names."""
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.refuse(node, f"np.{function.__name__} takes its arguments written out (no * or **)")
        try:
            bound = inspect.signature(function).bind(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
        except TypeError as err:
            raise self.refuse(node, f"np.{function.__name__}: {err}") from None
        return dict(bound.arguments)

    # ---- np.histogram --------------------------------------------------------------------------------------

    def histogram_part(self, node: ast.Subscript) -> Named | None:
        """``np.histogram(...)[0]`` (the counts) or ``[1]`` (the edges); None for another subscript."""
        if not self.is_histogram(node.value):
            return None
        part = node.slice.value if isinstance(node.slice, ast.Constant) else None
        if part not in (0, 1, -1, -2) or isinstance(part, bool):
            raise self.refuse(node, "np.histogram makes (counts, edges): take [0] or [1] of it")
        assert isinstance(node.value, ast.Call) and isinstance(part, int)
        return self.histogram(node.value, None)[part]

    def histogram(self, node: ast.Call, names: list[str] | None) -> tuple[Named, Named]:
        """The counts and edges of ``np.histogram(x, bins, range)``, made by statements before the one being
        rewritten (under ``names`` where given, else names of svod's)."""
        arguments = self.bound_arguments(node, np.histogram)
        for option, allowed in (("weights", None), ("density", False)):
            given = arguments.get(option)
            if given is not None and not _is_none(given) and not (isinstance(given, ast.Constant) and
                                                                     given.value is allowed):
                raise self.refuse(node, f"np.histogram's {option}= is not one svod has")
        x = self.value(arguments["a"])
        if not isinstance(x, Expr) or x.dtype.kind not in "iuf":
            raise self.refuse(node, "np.histogram counts an array of integers or floats")
        self.static(node, x, "np.histogram")
        flat = self.reshaped(node, x, (-1,)) if len(x.shape) != 1 else x
        bins = self.bins(node, arguments.get("bins"))
        edges_of = self.edges(node, flat, arguments.get("range"), bins)
        counts, edges = (self.named_temporary(names, k, shape, dtype, node) for k, (shape, dtype) in
                         enumerate((((bins,), np.dtype(np.intp)), ((bins + 1,), edges_of.bin_type))))
        blocks = max(1, min(-(-extents.numbers(flat.shape)[0] // BLOCK), COUNTERS // bins))
        part = self.temporary((blocks, bins), np.dtype(np.intp), node)
        self.described[part.name] = f"the counts of each block of `{code(node, 40)}`"
        self.pending += placed([*self.allocation(self.at, edges), *edges_of.filled(edges, self.fresh("a")),
                                _zeros(part), *edges_of.counted(part, edges, flat, self.fresh("a"), self.fresh("a"),
                                                                self.counter)], self.at)
        total = Reduced((bins,), np.dtype(np.intp), "sum", part, (0,), False)
        self.pending += [*self.allocation(self.at, counts), *self.loops(self.at, counts, total)]
        self.changed = True
        return counts, edges

    def named_temporary(self, names: list[str] | None, k: int, shape: tuple[int, ...], dtype: np.dtype,
                        node: ast.AST) -> Named:
        if names is None:
            return self.temporary(shape, dtype, node)
        if names[k] in self.arguments:
            raise self.refuse(node, f"{names[k]} = ... would make a new array of the name of an argument, whose "
                                    "caller's array stays as it is; use a new name")
        made = Named(shape, dtype, names[k])
        self.arrays[names[k]] = made
        return made

    def bins(self, node: ast.Call, given: ast.expr | None) -> int:
        if given is None:
            return 10
        try:
            count = self.on_host(given)
        except Exception as err:
            raise self.refuse(node, f"np.histogram's bins is an int the host knows before the run ({err})") from err
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
            raise self.refuse(node, "np.histogram's bins is a number of equal bins here (an int): svod has no "
                                    "edges given as an array, nor the estimators' names")
        self.read |= {n.id for n in walk(given) if isinstance(n, ast.Name)} & set(self.host)
        if count < 1:
            raise self.refuse(node, "np.histogram's bins must be positive, when an integer (NumPy raises "
                                    "ValueError)")
        return int(count)

    def edges(self, node: ast.Call, x: Expr, given: ast.expr | None, bins: int) -> _Edges:
        """How the edges and the bins of ``x`` are computed: from a range the host knows (given, or NumPy's
        ``(0, 1)`` for no values), or from the values' least and greatest."""
        if given is not None and not _is_none(given):
            try:
                low, high = self.on_host(given)
            except Exception as err:
                raise self.refuse(node, "np.histogram's range is two numbers the host knows before the run "
                                        f"(constants or scalar arguments) ({err})") from err
            self.read |= {n.id for n in walk(given) if isinstance(n, ast.Name)} & set(self.host)
            if not all(isinstance(v, _NUMBERS) and not isinstance(v, (bool, np.bool_)) for v in (low, high)):
                raise self.refuse(node, "np.histogram's range is two numbers")
            if low > high:
                raise self.refuse(node, "max must be larger than min in range parameter (NumPy raises ValueError)")
            if not (np.isfinite(low) and np.isfinite(high)):
                raise self.refuse(node, f"supplied range of [{low}, {high}] is not finite (NumPy raises ValueError)")
            return _Edges.known(x.dtype, bins, low, high)
        if x.shape[0] == 0:
            return _Edges.known(x.dtype, bins, 0, 1)
        least, greatest, nans, i, value = (self.fresh(stem) for stem in ("lo", "hi", "nan", "a", "v"))
        out = Emitter(self.counter)
        element = x.element([load(i)], out)
        reduced: list[ast.stmt] = [*out.statements, assign(value, element),
                                   assign(least, call("min", load(least), load(value))),
                                   assign(greatest, call("max", load(greatest), load(value)))]
        if x.dtype.kind == "f":  # (a NaN makes the range NaN: NumPy's min and max)
            reduced.append(ast.AugAssign(ast.Name(nans, ast.Store()), ast.Add(),
                                         ast.Compare(load(value), [ast.NotEq()], [load(value)])))
        first = Emitter(self.counter)
        start = x.element([constant(0)], first)
        self.pending += placed([*first.statements, assign(least, start), assign(greatest, copied(start)),
                                assign(nans, constant(0)), *_nest([(i, x.shape[0])], reduced, parallel=True)], self.at)
        return _Edges.found(x.dtype, bins, least, greatest, nans)


class _Edges:
    """The numbers of a histogram's edges and bins, each a ``Scalar`` whose sample has NumPy's type for it:
    ``first`` and ``last`` (the outer edges, a range's ends widened by 0.5 each where they are equal), the
    ``bin_type`` of the edges, and the denominator of a value's position between them. ``found`` (the values'
    least and greatest, which a reduction computed into names) widens them in the loops' code, and tests that
    they are finite (NumPy raises where they are not: svod counts nothing and the edges are NaN)."""

    def __init__(self, dtype: np.dtype, bins: int, first: Scalar, last: Scalar, denominator: Scalar,
                 finite: ast.expr | None) -> None:
        self.dtype = dtype
        self.bins = bins
        self.first, self.last, self.denominator = first, last, denominator
        self.finite = finite
        bin_type = np.result_type(first.sample, last.sample, np.ones(1, dtype))
        self.bin_type = np.result_type(bin_type, float) if bin_type.kind in "iub" else bin_type

    @classmethod
    def known(cls, dtype: np.dtype, bins: int, low: Any, high: Any) -> _Edges:
        if low == high:
            low, high = low - 0.5, high + 0.5
        first, last = Scalar(_literal(low), low), Scalar(_literal(high), high)
        denominator = _unsigned_difference(high, low)
        return cls(dtype, bins, first, last, Scalar(_literal(denominator), denominator), None)

    @classmethod
    def found(cls, dtype: np.dtype, bins: int, least: str, greatest: str, nans: str) -> _Edges:
        """Edges of the values' least and greatest (a parallel reduction found them, and counted the NaNs in
        ``nans``), as NumPy scalars of their dtype; an integer's pair widened when equal is float64 in NumPy,
        and so is the rest of its arithmetic (its denominator is the unsigned difference, or 1.0 when
        widened)."""
        low, high = load(least), load(greatest)
        equal = ast.Compare(copied(low), [ast.Eq()], [copied(high)])
        sample = dtype.type(0)
        if dtype.kind == "f":
            first: ast.expr = ast.IfExp(equal, typed(ast.BinOp(low, ast.Sub(), constant(0.5)), dtype),
                                        copied(low))
            last: ast.expr = ast.IfExp(copied(equal), typed(ast.BinOp(high, ast.Add(), constant(0.5)), dtype),
                                       copied(high))
            finite = ast.BoolOp(ast.And(), [ast.Compare(load(nans), [ast.Eq()], [constant(0)]),
                                            call(numpy("isfinite"), copied(low)),
                                            call(numpy("isfinite"), copied(high))])
            denominator = typed(ast.BinOp(copied(last), ast.Sub(), copied(first)), dtype)
            return cls(dtype, bins, Scalar(first, sample), Scalar(last, sample), Scalar(denominator, sample),
                       finite)
        wide = np.dtype(np.float64)
        widened = ast.IfExp(equal, constant(0.5), constant(0.0))
        first = ast.BinOp(typed(low, wide), ast.Sub(), widened)
        last = ast.BinOp(typed(high, wide), ast.Add(), copied(widened))
        unsigned = np.dtype(f"u{dtype.itemsize}")
        difference = typed(typed(ast.BinOp(copied(high), ast.Sub(), copied(low)), unsigned), wide)
        denominator = ast.IfExp(copied(equal), constant(1.0), difference)
        return cls(dtype, bins, Scalar(first, wide.type(0)), Scalar(last, wide.type(0)),
                   Scalar(denominator, wide.type(1)), None)

    def filled(self, edges: Named, i: str) -> list[ast.stmt]:
        """The loop that writes the edges: ``np.linspace(first, last, bins + 1)`` as NumPy computes it (``i``
        times the step, or ``i / bins`` times the width where the step is zero, plus the first edge, in the
        first and last edges' inexact type; the last edge itself), then cast to the edges' type."""
        space = np.result_type(self.first.sample, self.last.sample, 1.0)
        start = np.asarray(self.first.sample).dtype  # NumPy adds the first edge as an array of its own dtype
        width = typed(ast.BinOp(typed(copied(self.last.node), space), ast.Sub(),
                                typed(copied(self.first.node), space)), space)
        step = typed(ast.BinOp(width, ast.Div(), constant(self.bins)), space)
        position = typed(load(i), space)
        stepped = typed(ast.BinOp(position, ast.Mult(), copied(step)), space)
        spread = typed(ast.BinOp(typed(ast.BinOp(copied(position), ast.Div(), constant(self.bins)), space),
                                 ast.Mult(), copied(width)), space)
        scaled = ast.IfExp(ast.Compare(copied(step), [ast.Eq()], [constant(0)]), spread, stepped)
        adding = np.result_type(np.ones(1, space), np.zeros((), start))
        moved = typed(ast.BinOp(typed(scaled, adding), ast.Add(), typed(copied(self.first.node), adding)),
                      space)
        edge = ast.IfExp(ast.Compare(load(i), [ast.Eq()], [constant(self.bins)]),
                         typed(copied(self.last.node), space), moved)
        if self.finite is not None:
            edge = ast.IfExp(copied(self.finite), edge, typed(numpy("nan"), space))
        element = ast.Subscript(load(edges.name), load(i), ast.Store())
        return _nest([(i, self.bins + 1)], [ast.Assign([element], typed(edge, self.bin_type))], parallel=True)

    def counted(self, part: Named, edges: Named, x: Expr, block: str, i: str,
                counter: itertools.count[int]) -> list[ast.stmt]:
        """The loops that count each value in its bin, each block of values into a row of counts of its own
        (``part``: exact in any order, and free of races): a value is kept where it lies between the outer
        edges; its position ``(value - first) / denominator * bins``, truncated (the last edge in the last
        bin: a kept value's position lies in [0, bins], so the clamp to the bins changes nothing else; it keeps
        the edges' reads in bounds for a value the test drops too, which the CPU's code may read them for, and
        proves each block's counts its own), corrected by one where the value lies below its bin's left edge,
        else where it lies at or above its right one (but the last bin's): NumPy's two tests, the second of
        which a value moved down fails (it lies below the edge that test reads)."""
        out = Emitter(counter)
        value = out.fresh("v")
        body: list[ast.stmt] = [assign(value, x.element([load(i)], out))]
        keep = [_compared(ast.GtE(), load(value), self.dtype, self.first),
                _compared(ast.LtE(), load(value), self.dtype, self.last)]
        if self.finite is not None:
            keep = [copied(self.finite)]  # the least and greatest are the values' own
        number = np.ones(1, self.bin_type)
        offset = np.result_type(number, self.first.sample)
        with np.errstate(all="ignore"):
            position = np.asarray((np.ones(1, offset) / self.denominator.sample) * self.bins).dtype
        own = typed(load(value), self.bin_type)
        above = typed(ast.BinOp(typed(own, offset), ast.Sub(), typed(copied(self.first.node), offset)), offset)
        ratio = typed(ast.BinOp(typed(above, position), ast.Div(),
                                typed(copied(self.denominator.node), position)), position)
        scaled = typed(ast.BinOp(ratio, ast.Mult(), constant(self.bins)), position)
        at, left, right = out.fresh("b"), out.fresh("l"), out.fresh("r")
        last = self.bins - 1
        counter_of = ast.Subscript(load(part.name), ast.Tuple([load(block), _clamped(load(at), last)], ast.Load()),
                                   ast.Load())
        raised = ast.If(ast.BoolOp(ast.And(), [ast.Compare(copied(own), [ast.GtE()], [load(right)]),
                                               ast.Compare(load(at), [ast.NotEq()], [constant(last)])]),
                        [assign(at, ast.BinOp(load(at), ast.Add(), constant(1)))], [])
        body += [*out.statements,
                 assign(at, _clamped(typed(scaled, np.dtype(np.intp)), last)),
                 assign(left, ast.Subscript(load(edges.name), load(at), ast.Load())),
                 assign(right, ast.Subscript(load(edges.name), ast.BinOp(load(at), ast.Add(), constant(1)),
                                             ast.Load())),
                 ast.If(ast.Compare(copied(own), [ast.Lt()], [load(left)]),
                        [assign(at, ast.BinOp(load(at), ast.Sub(), constant(1)))], [raised]),
                 ast.AugAssign(ast.Subscript(counter_of.value, counter_of.slice, ast.Store()), ast.Add(),
                               constant(1))]
        length = extents.numbers(x.shape)[0]
        per = -(-length // extents.numbers(part.shape)[0])
        start = ast.BinOp(load(block), ast.Mult(), constant(per))
        span = call("range", start, call("min", ast.BinOp(copied(start), ast.Add(), constant(per)),
                                         constant(length)))
        counting = for_loop(i, span, [body[0], ast.If(ast.BoolOp(ast.And(), keep), body[1:], [])])
        return _nest([(block, part.shape[0])], [counting], parallel=True)


# ---- helpers ---------------------------------------------------------------------------------------------------

def _clamped(index: ast.expr, last: int) -> ast.expr:
    """``index`` within ``[0, last]``."""
    return call("min", call("max", index, constant(0)), constant(last))


def _combined(name: str, operator: type[ast.operator] | None, old: ast.expr, amount: ast.expr,
              dtype: np.dtype) -> ast.expr:
    """The ufunc of the element and the value, both as ``dtype`` (NumPy's loop)."""
    left, right = typed(old, dtype), typed(amount, dtype)
    if operator is not None:
        return ast.BinOp(left, operator(), right)
    return call(numpy(name), left, right)


def _compared(op: ast.cmpop, element: ast.expr, dtype: np.dtype, edge: Scalar) -> ast.expr:
    """``element op edge`` in the dtype NumPy compares an array of ``dtype`` with the edge in."""
    common = np.result_type(np.ones(1, dtype), edge.sample)
    return ast.Compare(typed(element, common), [op], [typed(copied(edge.node), common)])


def _unsigned_difference(high: Any, low: Any) -> Any:
    """``high - low`` as NumPy's histogram takes it: of signed integers, in the unsigned type of their width
    (``high >= low``, so it never overflows)."""
    common = np.result_type(high, low)
    if common.kind == "i":
        unsigned = np.dtype(f"u{common.itemsize}")
        return np.subtract(np.asarray(high, common), np.asarray(low, common), casting="unsafe", dtype=unsigned)
    return np.subtract(high, low, dtype=common)


def _literal(number: Any) -> ast.expr:
    """``number`` in a loop's code, of its own type: a Python number as itself, a NumPy scalar cast to its
    dtype."""
    if isinstance(number, np.generic):
        return typed(constant(number.item()), number.dtype)
    return constant(number)


def _reads(value: Value, target: Expr) -> bool:
    """Whether ``value`` reads the array ``target`` updates."""
    base = stored_array(target)
    if not isinstance(value, Expr) or base is None:
        return False
    out = Emitter(itertools.count())
    element = value.element([load(f"_svod_p{k}") for k in range(len(value.shape))], out)
    return any(isinstance(n, ast.Name) and n.id == base for node in [element, *out.statements]
               for n in walk(node))


def _kind(value: Value) -> str:
    return str(value.dtype) if isinstance(value, Expr) else type(value.sample).__name__


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _zeros(made: Named) -> ast.stmt:
    """``made = np.zeros(shape, dtype)``: a temporary the plan makes, zeroed where it stands."""
    shape = ast.Tuple([constant(size) for size in made.shape], ast.Load())
    return assign(made.name, call(numpy("zeros"), shape, numpy(made.dtype.name)))


def _nest(loops: Sequence[tuple[str, Dim]], body: list[ast.stmt], parallel: bool) -> list[ast.stmt]:
    """``body`` inside a nest over ``loops``, outermost first: ``prange``s, or ``range``s run in order."""
    for name, size in reversed(loops):
        body = [for_loop(name, call("_svod_prange" if parallel else "range", node_of(size)), body)]
    return body
