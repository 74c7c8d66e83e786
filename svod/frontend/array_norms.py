"""``np.linalg.norm(x, ord, axis, keepdims)`` in ``@svod.jit``'s array statements, as the array reductions NumPy's
own ``norm`` is written in, so that its dtype and its values at the edges are NumPy's:

- a vector's norm (one axis): ``inf`` the largest magnitude (0 of no elements), ``-inf`` the smallest, ``0``
  the count of the elements not zero, ``1`` the sum of magnitudes, ``None`` and ``2`` the square root of the
  sum of squares, any other number p the sum of the p-th powers of the magnitudes to the power 1 / p (that
  reciprocal rounded to the result's dtype first, as NumPy's);
- a matrix's norm (two axes): ``1`` and ``inf`` the largest column and row sum of magnitudes (0 of no
  elements), ``-1`` and ``-inf`` the smallest, ``None``, ``'fro'`` and ``'f'`` the square root of the sum of
  squares; ``2``, ``-2`` and ``'nuc'`` are the singular values' (``svod.frontend.linalg_compose``: a statement
  of its own, of one matrix);
- no ``ord`` and no ``axis``: the square root of the sum of squares of every element.

Integers and booleans are computed as float64, as NumPy converts them. What NumPy raises for (an order that is
not one for vectors or for matrices, three axes, an axis twice, an empty reduction with no identity) is
refused at the line.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from svod.frontend import extents
from svod.frontend.array_exprs import Expr, Value, numpy, typed
from svod.frontend.array_stats import reduced_over
from svod.frontend.nodes import call, constant

SINGULAR_ORDERS = (2, -2, "nuc")
"""The orders of a matrix's norm computed from its singular values."""


def norm(rw: Any, node: ast.Call) -> Value:
    """``np.linalg.norm`` of the call ``node`` of the array rewriting ``rw`` (an ``arrays.ArrayRewriter``)."""
    given = rw.passed(node, np.linalg.norm, ("ord", "axis", "keepdims"))
    x_node = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "x")
    x = rw.value(x_node)
    if not isinstance(x, Expr):
        return rw.scalar(node)
    order = rw.known(given["ord"], "np.linalg.norm's ord") if "ord" in given else None
    axis = rw.known(given["axis"], "np.linalg.norm's axis") if "axis" in given else None
    keepdims = bool(rw.known(given["keepdims"], "np.linalg.norm's keepdims")) if "keepdims" in given else False
    if x.dtype.kind in "biu":
        wide = np.dtype(np.float64)
        x = rw.elementwise(node, lambda c: typed(c[0], wide), wide, x)
    ndim = len(x.shape)
    if axis is None and (order is None or (order in ("f", "fro") and ndim == 2) or (_is(order, 2) and ndim == 1)):
        return _root_of_squares(rw, node, x, tuple(range(ndim)), keepdims)
    axes = axes_of(rw, node, axis, ndim)
    if len(axes) == 1:
        return _vector(rw, node, x, order, axes, keepdims)
    return _matrix(rw, node, x, order, axes, keepdims)


def _is(order: object, value: float) -> bool:
    """Whether ``order`` is the number ``value`` (not a string, which NumPy compares unequal)."""
    return not isinstance(order, str) and bool(order == value)


def axes_of(rw: Any, node: ast.Call, axis: object, ndim: int) -> tuple[int, ...]:
    """``axis`` as a tuple of axes of an array of ``ndim`` dimensions: one (a vector's) or two (a matrix's)."""
    if axis is None:
        picked: tuple[Any, ...] = tuple(range(ndim))
    elif isinstance(axis, tuple):
        picked = axis
    else:
        try:
            picked = (int(axis),)  # type: ignore[call-overload]  # (as NumPy's norm: an axis of 1.0 is 1)
        except (TypeError, ValueError):
            raise rw.refuse(node, "np.linalg.norm's axis must be None, an integer or a tuple of integers (NumPy "
                                  "raises TypeError)") from None
    if len(picked) not in (1, 2):
        raise rw.refuse(node, f"np.linalg.norm over {len(picked)} axes: Improper number of dimensions to norm "
                              "(NumPy raises ValueError)")
    if any(not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim for a in picked):
        raise rw.refuse(node, f"np.linalg.norm's axis {axis} is out of bounds for an array of {ndim} dimension(s)")
    axes = tuple(int(a) % ndim for a in picked)
    if len(axes) == 2 and axes[0] == axes[1]:
        raise rw.refuse(node, "np.linalg.norm: Duplicate axes given (NumPy raises ValueError)")
    return axes


def _magnitudes(rw: Any, node: ast.Call, x: Expr) -> Expr:
    dtype = _real(x.dtype)
    return rw.elementwise(node, lambda c: call(numpy("abs"), c[0]), dtype, x)


def _real(dtype: np.dtype) -> np.dtype:
    return np.empty(0, dtype).real.dtype


def _root_of_squares(rw: Any, node: ast.Call, x: Expr, axes: tuple[int, ...], keepdims: bool) -> Expr:
    """The square root of the sum of ``x``'s squares over ``axes`` (of the squares of both parts, complex)."""
    dtype = _real(x.dtype)

    def square(c: list[ast.expr]) -> ast.expr:
        if x.dtype.kind != "c":
            return ast.BinOp(c[0], ast.Mult(), c[0])
        real, imag = (ast.Attribute(c[0], part, ast.Load()) for part in ("real", "imag"))
        return ast.BinOp(ast.BinOp(real, ast.Mult(), real), ast.Add(), ast.BinOp(imag, ast.Mult(), imag))

    squares = rw.elementwise(node, square, dtype, x)
    return rw.elementwise(node, lambda c: call(numpy("sqrt"), c[0]), dtype, reduced_over(squares, axes, keepdims))


def _extreme(rw: Any, node: ast.Call, x: Expr, op: str, axes: tuple[int, ...], keepdims: bool) -> Expr:
    """The largest (``max``; 0 of no elements, NumPy's ``initial=0``) or the smallest (``min``) of ``x``, of
    magnitudes, over ``axes``; the smallest of no elements is refused (NumPy raises)."""
    lengths = [x.shape[a] for a in axes]
    if all(isinstance(n, int) for n in lengths) and 0 in lengths:
        if op == "min":
            raise rw.refuse(node, "np.linalg.norm: the smallest of no elements (zero-size array to reduction "
                                  "operation minimum which has no identity: NumPy raises ValueError)")
        return reduced_over(x, axes, keepdims)  # the sum of none: 0
    if any(extents.low(n) <= 0 for n in lengths):
        raise rw.refuse(node, f"np.linalg.norm's {op} over an axis whose length (`{extents.shown(x.shape)}`) may "
                              "be 0 at run time")
    return reduced_over(x, axes, keepdims, op)


def _vector(rw: Any, node: ast.Call, x: Expr, order: Any, axes: tuple[int, ...], keepdims: bool) -> Expr:
    if _is(order, np.inf) or _is(order, -np.inf):
        return _extreme(rw, node, _magnitudes(rw, node, x), "max" if order > 0 else "min", axes, keepdims)
    dtype = _real(x.dtype)
    if _is(order, 0):
        counted = rw.elementwise(node, lambda c: typed(ast.Compare(c[0], [ast.NotEq()], [constant(0)]), dtype),
                                 dtype, x)
        return reduced_over(counted, axes, keepdims)
    if _is(order, 1):
        return reduced_over(_magnitudes(rw, node, x), axes, keepdims)
    if order is None or _is(order, 2):
        return _root_of_squares(rw, node, x, axes, keepdims)
    if isinstance(order, str) or not isinstance(order, (int, float, np.integer, np.floating)):
        raise rw.refuse(node, f"np.linalg.norm: Invalid norm order {order!r} for vectors (NumPy raises ValueError)")
    power = constant(order)
    powers = rw.elementwise(node, lambda c: ast.BinOp(call(numpy("abs"), c[0]), ast.Pow(), power), dtype, x)
    root = constant(np.reciprocal(np.asarray(order, dtype=dtype)))
    return rw.elementwise(node, lambda c: ast.BinOp(c[0], ast.Pow(), root), dtype,
                          reduced_over(powers, axes, keepdims))


def _matrix(rw: Any, node: ast.Call, x: Expr, order: Any, axes: tuple[int, ...], keepdims: bool) -> Expr:
    """A matrix norm over ``axes`` (rows, then columns): a column's or a row's sum of magnitudes first (kept
    as an axis of length 1), then their largest or smallest over both axes."""
    rows, columns = axes
    if order is None or order in ("f", "fro"):
        return _root_of_squares(rw, node, x, axes, keepdims)
    if any(_is(order, value) for value in (1, -1, np.inf, -np.inf)):
        summed = rows if abs(order) == 1 else columns
        sums = reduced_over(_magnitudes(rw, node, x), (summed,), True)
        return _extreme(rw, node, sums, "max" if order > 0 else "min", tuple(sorted(axes)), keepdims)
    if _is(order, 2) or _is(order, -2) or order == "nuc":
        raise rw.refuse(node, f"np.linalg.norm(x, {order!r}) of a matrix is computed from its singular values: a "
                              f"statement of its own of one matrix (`n = np.linalg.norm(a, {order!r})`)")
    raise rw.refuse(node, f"np.linalg.norm: Invalid norm order {order!r} for matrices (NumPy raises ValueError)")
