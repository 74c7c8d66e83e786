"""NumPy's scans and statistics in ``@svod.jit``'s array statements (``svod.frontend.arrays``): ``np.cumsum`` and
``np.cumprod`` (and the methods) with ``axis``; ``np.var`` and ``np.std`` (and the methods) with ``axis``,
``ddof``, ``keepdims``; ``np.average``, with or without ``weights``; ``np.count_nonzero``; ``np.cov``, ``np.corrcoef``;
the reductions that skip NaNs (``np.nansum``, ``nanprod``, ``nanmean``, ``nanmax``, ``nanmin``).

Each is computed as NumPy computes it, so its dtype and its values at the edges are NumPy's: a variance is
the mean of the squared deviations from the mean (two passes, never the sum of squares less the squared
sum), divided by ``max(n - ddof, 0)``; a weighted average is ``sum(a * w) / sum(w)`` in NumPy's result dtype; a
covariance is the products of the deviations from each row's mean, times ``1 / (n - 1)`` (inf where ``n <= 1``,
NaNs then, where NumPy warns and gives the same).
Where NumPy raises at run time (weights that sum to 0), the arithmetic gives inf or NaN instead.
"""

from __future__ import annotations

import ast
import itertools
from abc import abstractmethod
from typing import Any

import numpy as np

from svod.frontend import extents
from svod.frontend.array_calls import RUNNING, scan_start
from svod.frontend.array_exprs import (
    Emitter,
    Expr,
    Product,
    Reduced,
    Reshaped,
    Transposed,
    Value,
    Viewed,
    Whole,
    numpy,
    typed,
)
from svod.frontend.array_loops import parallel
from svod.frontend.array_shapes import ArrayShapes
from svod.frontend.extents import Dim
from svod.frontend.nodes import assign, call, constant, for_loop, load, placed, store

_STATISTICS = ("var", "std", "average", "count_nonzero")
NAN_REDUCTIONS = {"nansum": "sum", "nanprod": "prod", "nanmean": "mean", "nanmax": "max", "nanmin": "min"}
"""NumPy's reductions that skip NaNs, each as the reduction it is of the other elements."""


class ArrayStatistics(ArrayShapes):
    """The functions of this module, as the statements' ``ArrayRewriter`` calls them."""

    pending: list[ast.stmt]
    """The statements the statement being rewritten needs before it (``ArrayRewriter.pending``)."""
    at: ast.stmt
    """The statement being rewritten."""
    counter: itertools.count[int]

    @abstractmethod
    def fresh_temporary(self, shape: tuple[Dim, ...], dtype: np.dtype, node: ast.AST) -> Expr: ...

    @abstractmethod
    def allocation(self, stmt: ast.stmt, made: Expr) -> list[ast.stmt]: ...

    def cumsum(self, node: ast.AST, x: Expr, axis_node: ast.expr | None, name: str = "cumsum",
               dtype: np.dtype | None = None) -> Expr:
        """``np.cumsum`` (``np.cumprod``, ``np.maximum.accumulate``: ``name`` ``maximum``): computed into an array
        of its own first (a running sum, product, maximum, along the axis, in a loop of each other axis's element),
        which the expression then reads; in ``dtype`` where the user gives one (NumPy's own otherwise)."""
        if axis_node is None and len(x.shape) != 1:
            x = self.reshaped(node, x, (-1,))
        axis = 0 if axis_node is None else self.host_int(axis_node) % len(x.shape)  # type: ignore[operator]
        self.static(node, x, f"np.{name}")
        if dtype is None:
            dtype = x.dtype if name in RUNNING else getattr(np, name)(np.ones(1, x.dtype)).dtype
        made = self.fresh_temporary(x.shape, dtype, node)
        outer = [(f"_svod_a{next(self.counter)}", size) for k, size in enumerate(x.shape) if k != axis]
        along = f"_svod_a{next(self.counter)}"
        names = iter(name for name, _ in outer)
        index = [load(along if k == axis else next(names)) for k in range(len(x.shape))]
        out = Emitter(self.counter)
        element = x.element(index, out)
        total = out.fresh("s")
        step = assign(total, call(numpy(name), load(total), element)) if name in RUNNING else \
            ast.AugAssign(store(total), ast.Mult() if name == "cumprod" else ast.Add(), element)
        running = [*out.statements, step, assign(made.element(index, out), load(total))]
        nest = parallel(outer, [assign(total, typed(constant(scan_start(name, dtype)), dtype)),
                                 for_loop(along, call("range", constant(x.shape[axis])), running)])
        self.pending += [*self.allocation(self.at, made), *placed(nest, self.at)]
        return made

    def accumulated(self, node: ast.Call, dtype_node: ast.expr, name: str) -> np.dtype | None:
        """The ``dtype=`` of ``np.<name>``, which NumPy casts each element to and accumulates in: a bool,
        integer or float dtype the host knows before the run (a float one for a mean, whose integer division
        NumPy truncates); None where it is None, NumPy's own then (``np.dtype(None)`` is float64)."""
        try:
            given = self.on_host(dtype_node)
            if given is None:
                return None
            dtype = np.dtype(given)
        except Exception as err:
            raise self.refuse(node, f"np.{name}'s dtype= is one the host knows before the run ({err})") from None
        if dtype.kind not in ("f" if name == "mean" else "biuf"):
            raise self.refuse(node, f"np.{name}'s dtype={dtype.name} is not one svod takes (it takes "
                                    f"{'a float' if name == 'mean' else 'a bool, integer or float'} dtype)")
        return dtype

    @abstractmethod
    def operand(self, node: ast.AST, x: Expr) -> Expr: ...

    @abstractmethod
    def reduction(self, node: ast.Call, operand: Expr, name: str, keywords: list[ast.keyword],
                  args: list[Value]) -> Value: ...

    def extra_function(self, node: ast.Call, name: str, args: list[Value]) -> Value | None:
        if name == "cov" and args and isinstance(args[0], Expr):
            self.passed(node, np.cov, ("m",))
            return self.covariance(node, args[0])
        if name == "corrcoef" and args and isinstance(args[0], Expr):
            self.passed(node, np.corrcoef, ("x",))
            return self.correlation(node, args[0])
        if name in NAN_REDUCTIONS and args and isinstance(args[0], Expr):
            if args[0].dtype.kind not in "fc":  # no NaN to skip: the reduction itself, of NumPy's arguments
                return self.reduction(node, args[0], NAN_REDUCTIONS[name], node.keywords, args[1:])
            return self.skipping_nans(node, args[0], name)
        if name not in _STATISTICS or not args or not isinstance(args[0], Expr):
            return super().extra_function(node, name, args)
        return self.statistic(node, args[0], name)

    def extra_method(self, node: ast.Call, owner: Expr, name: str, args: list[Value]) -> Value | None:
        if name in ("var", "std"):
            return self.statistic(node, owner, name, node.func)
        return super().extra_method(node, owner, name, args)

    def statistic(self, node: ast.Call, x: Expr, name: str, owner: ast.expr | None = None) -> Value:
        """``np.var``, ``np.std``, ``np.average`` or ``np.count_nonzero`` of ``x`` (the method, called on
        ``owner``)."""
        takes = {"var": ("axis", "ddof", "keepdims"), "std": ("axis", "ddof", "keepdims"),
                 "average": ("axis", "weights", "keepdims"), "count_nonzero": ("axis", "keepdims")}[name]
        given = self.passed(node, getattr(np, name), takes, owner)
        axes = self.reduced_axes(given.get("axis"), len(x.shape), f"np.{name}'s axis")
        keepdims = bool(self.known(given["keepdims"], f"np.{name}'s keepdims")) if "keepdims" in given else False
        if name == "count_nonzero":
            counted = self.elementwise(node, lambda c: typed(ast.Compare(c[0], [ast.NotEq()], [constant(0)]),
                                                             np.dtype(np.intp)), np.dtype(np.intp), x)
            return reduced_over(counted, axes, keepdims)
        if name == "average":
            weights = given.get("weights")
            if weights is None or (isinstance(weights, ast.Constant) and weights.value is None):
                dtype = np.mean(np.ones(1, x.dtype)).dtype
                return reduced_over(x, axes, keepdims, "mean", dtype)
            return self.weighted(node, x, weights, axes, keepdims)
        ddof = self.known(given["ddof"], f"np.{name}'s ddof") if "ddof" in given else 0
        if isinstance(ddof, bool) or not isinstance(ddof, (int, float, np.integer, np.floating)):
            raise self.refuse(node, f"np.{name}'s ddof is a number")
        return self.spread(node, x, name, axes, keepdims, ddof)

    def skipping_nans(self, node: ast.Call, x: Expr, name: str) -> Value:
        """``np.nansum`` and the other ``NAN_REDUCTIONS`` as NumPy computes them: a NaN replaced by the sum's 0 or
        the product's 1; a mean the sum of the others over their count, in the sum's dtype; a max or min of the
        others, NaN where every element is one (where NumPy warns)."""
        plain = NAN_REDUCTIONS[name]
        takes = ("axis", "dtype", "keepdims") if plain in ("sum", "prod", "mean") else ("axis", "keepdims")
        given = self.passed(node, getattr(np, name), takes)
        axes = self.reduced_axes(given.get("axis"), len(x.shape), f"np.{name}'s axis")
        keepdims = bool(self.known(given["keepdims"], f"np.{name}'s keepdims")) if "keepdims" in given else False
        within = self.accumulated(node, given["dtype"], plain) if "dtype" in given else None
        if plain in ("max", "min"):
            self.static(node, x, f"np.{name}")
            if any(extents.numbers(x.shape)[a] == 0 for a in axes):
                raise self.refuse(node, f"np.{name} of an empty axis has no identity (NumPy raises too)")
        counted = np.dtype(np.int32 if extents.high(extents.elements(x.shape)) <= np.iinfo(np.int32).max else np.intp)
        kept = self.elementwise(node, lambda c: typed(ast.UnaryOp(ast.Not(), call(numpy("isnan"), c[0])), counted),
                                counted, x)
        count = reduced_over(kept, axes, keepdims)
        if plain in ("max", "min"):
            skipped = numpy("inf") if plain == "min" else ast.UnaryOp(ast.USub(), numpy("inf"))
            others = self.elementwise(node, lambda c: ast.IfExp(call(numpy("isnan"), c[0]), typed(skipped, x.dtype),
                                                                c[0]), x.dtype, x)
            extreme = reduced_over(others, axes, keepdims, plain, x.dtype)
            return self.elementwise(node, lambda c: ast.IfExp(ast.Compare(c[0], [ast.Eq()], [constant(0)]),
                                                              typed(numpy("nan"), x.dtype), c[1]), x.dtype, count,
                                    extreme)
        dtype = np.asarray(getattr(np, "sum" if plain == "mean" else plain)(np.ones(1, x.dtype), dtype=within)).dtype
        identity = constant(1 if plain == "prod" else 0)
        replaced = self.elementwise(node, lambda c: typed(ast.IfExp(call(numpy("isnan"), c[0]), identity, c[0]),
                                                          dtype), dtype, x)
        total = reduced_over(replaced, axes, keepdims, "sum" if plain == "mean" else plain, dtype)
        if plain != "mean":
            return total
        return self.elementwise(node, lambda c: typed(ast.BinOp(c[0], ast.Div(), c[1]), dtype), dtype, total, count)

    def covariance(self, node: ast.Call, x: Expr, what: str = "np.cov") -> Expr:
        """``np.cov(m)`` of NumPy's defaults (each row a variable, ``ddof`` 1): in float64 or wider, the rows'
        deviations from their means made once, their products summed, times ``1 / (n - 1)``; of one variable (a
        1-D array, one row) a 0-d variance, as NumPy squeezes it."""
        if len(x.shape) not in (1, 2):
            raise self.refuse(node, f"{what} of an array of {len(x.shape)} dimension(s) (it takes 1 or 2)")
        self.static(node, x, what)
        dtype = np.result_type(x.dtype, np.float64)
        rows = x if len(x.shape) == 2 else Reshaped((1, x.shape[0]), x.dtype, x)
        values = self.elementwise(node, lambda c: typed(c[0], dtype), dtype, rows)
        deviations = self.operand(node, self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Sub(), c[1]), dtype,
                                                         values, reduced_over(values, (1,), True, "mean", dtype)))
        variables, count = extents.numbers(rows.shape)
        products = Product((variables, variables), dtype, deviations,
                           Transposed((count, variables), dtype, deviations, (1, 0)))
        scale = ast.BinOp(typed(constant(1), dtype), ast.Div(), typed(constant(count - 1), dtype)) if count > 1 \
            else numpy("inf")  # NumPy's true_divide(1, fact), inf where fact <= 0
        covariances = self.elementwise(node, lambda c: typed(ast.BinOp(c[0], ast.Mult(), scale), dtype), dtype,
                                       products)
        if variables != 1:
            return covariances
        return Whole(Reshaped((), dtype, covariances))  # NumPy squeezes one variable's 1 x 1 to 0-d

    def correlation(self, node: ast.Call, x: Expr) -> Value:
        """``np.corrcoef(x)``: the covariances made once, each divided by its row's standard deviation, then by
        its column's, and clipped to [-1, 1], as NumPy computes them; of one variable ``c / c`` (1, or NaN)."""
        covariances = self.covariance(node, x, "np.corrcoef")
        dtype = covariances.dtype
        if not covariances.shape:
            return self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Div(), c[0]), dtype, covariances)
        made = self.operand(node, covariances)
        k = extents.numbers(made.shape)[0]
        diagonal = Viewed((k,), dtype, Reshaped((k * k,), dtype, made), ((0, 0, k + 1),), {})
        deviations = self.elementwise(node, lambda c: call(numpy("sqrt"), c[0]), dtype, diagonal)
        return self.elementwise(node, lambda c: call(numpy("minimum"), call(numpy("maximum"), ast.BinOp(ast.BinOp(
            c[0], ast.Div(), c[1]), ast.Div(), c[2]), typed(constant(-1), dtype)), typed(constant(1), dtype)), dtype,
            made, Reshaped((k, 1), dtype, deviations), Reshaped((1, k), dtype, deviations))

    def reduced_axes(self, node: ast.expr | None, ndim: int, what: str) -> tuple[int, ...]:
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return tuple(range(ndim))
        return tuple(sorted(self.axes(node, ndim, what)))

    def spread(self, node: ast.Call, x: Expr, name: str, axes: tuple[int, ...], keepdims: bool, ddof: Any) -> Value:
        """``np.var`` (``np.std``, its square root): the mean, the deviations from it, the mean of their
        squares over ``max(n - ddof, 0)``."""
        mean = reduced_over(x, axes, True, "mean", np.mean(np.ones(1, x.dtype)).dtype)
        deviation = self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Sub(), c[1]),
                                     self.dtype_of(node, np.subtract, x, mean), x, mean)
        squares = self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Mult(), c[0]), deviation.dtype, deviation)
        dtype = getattr(np, name)(np.ones(2, x.dtype)).dtype
        self.static(node, x, f"np.{name}")
        count = int(np.prod([extents.numbers(x.shape)[a] for a in axes]))
        divisor = max(count - ddof, 0)
        variance = self.elementwise(node, lambda c: typed(ast.BinOp(c[0], ast.Div(), constant(divisor)), dtype), dtype,
                                    reduced_over(squares, axes, keepdims, "sum", deviation.dtype))
        if name == "var":
            return variance
        return self.elementwise(node, lambda c: call(numpy("sqrt"), c[0]), dtype, variance)

    def weighted(self, node: ast.Call, x: Expr, weights_node: ast.expr, axes: tuple[int, ...],
                 keepdims: bool) -> Value:
        """``np.average(x, axis, weights)``: ``sum(x * w) / sum(w)`` in NumPy's result dtype; 1-D weights lie
        along the one axis."""
        weights = self.value(weights_node)
        if not isinstance(weights, Expr):
            raise self.refuse(weights_node, "np.average's weights are an array")
        if weights.shape != x.shape:
            if len(axes) != 1 or len(weights.shape) != 1 or weights.shape[0] != x.shape[axes[0]]:
                raise self.refuse(node, f"np.average's weights of shape {weights.shape} for an array of shape "
                                        f"{x.shape}: the same shape, or 1-D along the one axis")
            along = axes[0]
            weights = Viewed(tuple(s if k == along else 1 for k, s in enumerate(x.shape)), weights.dtype, weights,
                             tuple((0, 0, 1) if k == along else None for k in range(len(x.shape))), {})
        floats = ("f8",) if x.dtype.kind in "biu" else ()
        dtype = np.result_type(x.dtype, weights.dtype, *floats)
        products = self.elementwise(node, lambda c: ast.BinOp(typed(c[0], dtype), ast.Mult(), typed(c[1], dtype)),
                                    dtype, x, weights)
        scale = self.elementwise(node, lambda c: typed(c[0], dtype), dtype, weights)
        return self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Div(), c[1]), dtype,
                                reduced_over(products, axes, keepdims, "sum", dtype),
                                reduced_over(scale, axes, keepdims, "sum", dtype))

    def scan(self, node: ast.Call, x: Expr, name: str, owner: ast.expr | None = None) -> Expr:
        """``np.cumsum``/``np.cumprod`` (the method, called on ``owner``) along ``axis``, or of the flattened
        array; with ``dtype``, each element cast to it and the running total kept in it."""
        given = self.passed(node, getattr(np, name), ("axis", "dtype"), owner)
        axis = given.get("axis")
        if axis is not None:
            self.axes(axis, len(x.shape), f"np.{name}'s axis")
        dtype = self.accumulated(node, given["dtype"], name) if "dtype" in given else None
        if dtype is None:
            return self.cumsum(node, x, axis, name)
        return self.cumsum(node, self.elementwise(node, lambda c: typed(c[0], dtype), dtype, x), axis, name, dtype)


def reduced_over(x: Expr, axes: tuple[int, ...], keepdims: bool, op: str = "sum",
                 dtype: np.dtype | None = None) -> Expr:
    """``op`` (a sum, a mean, a max or a min) of ``x`` over ``axes``, in ``dtype`` (``x``'s); one value a
    ``Whole``."""
    shape = tuple(1 if a in axes else s for a, s in enumerate(x.shape) if keepdims or a not in axes)
    made = Reduced(shape, x.dtype if dtype is None else dtype, op, x, axes, keepdims)
    return Whole(made) if not shape and not keepdims else made


__all__ = ["ArrayStatistics", "reduced_over"]
