"""NumPy functions each of whose elements is a loop of its own in the element's code, in ``@svod.jit``'s array
statements (``svod.frontend.array_calls``): ``np.interp`` and ``np.searchsorted`` (a binary search of a sorted
array), ``np.convolve`` and ``np.correlate`` (a sum over the arrays' overlap).

Each loop is a template written in the kernel language (``SEARCH``, ``CONVOLUTION``), whose names are made fresh
and whose reads of the operands' elements are filled in where the element is written (``_written``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from svod.frontend import extents
from svod.frontend.array_exprs import Emitter, Expr, Value, broadcast_element, typed
from svod.frontend.names import stored
from svod.frontend.nodes import constant, copied, store


@dataclass(eq=False)
class Interpolated(Expr):
    """``np.interp(x, xp, fp, left, right)``: each element of ``x`` found among the increasing ``xp`` by a binary
    search, then NumPy's own arithmetic in float64 (``SEARCH``, ``SEGMENT``, ``ENDS``)."""

    x: Value = field(default=None)  # type: ignore[assignment]
    xp: Expr = field(default=None)  # type: ignore[assignment]
    fp: Expr = field(default=None)  # type: ignore[assignment]
    left: Value | None = None
    right: Value | None = None

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        size = extents.numbers(self.xp.shape)[0]
        wide = np.dtype(np.float64)

        def side(value: Value | None, at: int) -> ast.expr:
            given = None if value is None else broadcast_element(value, self.shape, index, out)
            return typed(self.fp.element([constant(at)], out) if given is None else given, wide)

        template = [SEARCH.replace("AFTER", "x >= XP(mid)"), SEGMENT if size > 1 else "r = FP(0)", ENDS]
        return _written(template, out, typed(broadcast_element(self.x, self.shape, index, out), wide),
                        {"n": constant(size), "LEFT": side(self.left, 0), "RIGHT": side(self.right, size - 1)},
                        {"XP": lambda i: typed(self.xp.element([i], out), wide),
                         "FP": lambda i: typed(self.fp.element([i], out), wide)})


@dataclass(eq=False)
class Searched(Expr):
    """``np.searchsorted(a, v, side)``: where each element of ``v`` would go among the sorted ``a`` to keep it
    sorted (before equal ones, or after them), by a binary search in NumPy's order (NaN after every number)."""

    v: Value = field(default=None)  # type: ignore[assignment]
    a: Expr = field(default=None)  # type: ignore[assignment]
    right: bool = False
    compared: np.dtype = field(default=np.dtype(np.float64))
    """The dtype both are compared in (NumPy's common one)."""

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        after = "not (x < XP(mid) or (XP(mid) != XP(mid) and x == x))" if self.right else \
            "XP(mid) < x or (x != x and XP(mid) == XP(mid))"
        return _written([SEARCH.replace("AFTER", after), "lo"], out,
                        typed(broadcast_element(self.v, self.shape, index, out), self.compared),
                        {"n": constant(extents.numbers(self.a.shape)[0])},
                        {"XP": lambda i: typed(self.a.element([i], out), self.compared)})


@dataclass(eq=False)
class Convolved(Expr):
    """``np.convolve(a, v, mode)`` of 1-D arrays: each element of the full convolution from ``start`` on, the
    sum of ``a[j] * v[k - j]`` over the ``j`` where both are (``CONVOLUTION``)."""

    a: Expr = field(default=None)  # type: ignore[assignment]
    v: Expr = field(default=None)  # type: ignore[assignment]
    start: int = 0

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        n, m = (extents.numbers(x.shape)[0] for x in (self.a, self.v))
        at = ast.BinOp(index[0], ast.Add(), constant(self.start)) if self.start else index[0]
        return _written([CONVOLUTION], out, at, {"n": constant(n), "m": constant(m),
                                                 "ZERO": typed(constant(0), self.dtype)},
                        {"A": lambda j: typed(self.a.element([j], out), self.dtype),
                         "V": lambda j: typed(self.v.element([j], out), self.dtype)})


CONVOLUTION = """
s = ZERO
for j in range(max(0, x - (m - 1)), min(x, n - 1) + 1):
    s += A(j) * V(x - j)
s
"""
"""Element ``x`` of the full convolution of ``A`` (``n`` long) and ``V`` (``m``), in order of ``j``."""


def _written(template: list[str], out: Emitter, x: ast.expr, values: dict[str, ast.expr],
             reads: dict[str, Callable[[ast.expr], ast.expr]]) -> ast.expr:
    """The parts of ``template`` (statements, the last an expression: the element) written into ``out``, ``x``
    the element searched for: the names it assigns made fresh, ``values`` put in for names, ``reads`` for calls."""
    body = [s for part in template for s in ast.parse(part).body]
    assigned = sorted(stored(body) | {"x"})
    filling = _Filling({name: out.fresh(f"search_{name}") for name in assigned}, values, reads)
    body = [filling.visit(s) for s in body]
    out.statements += [ast.Assign([store(filling.names["x"])], x), *body[:-1]]
    found = body[-1]
    assert isinstance(found, ast.Expr)
    return found.value


class _Filling(ast.NodeTransformer):
    """A template's names made fresh (``names``), its other names ``values``, and its calls of ``reads`` the
    elements they read; what it puts in is not visited again (an array may be named as a template's name is)."""

    def __init__(self, names: dict[str, str], values: dict[str, ast.expr],
                 reads: dict[str, Callable[[ast.expr], ast.expr]]) -> None:
        self.names, self.values, self.reads = names, values, reads

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.names:
            return ast.Name(self.names[node.id], node.ctx)
        return copied(self.values[node.id]) if node.id in self.values else node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        if isinstance(node.func, ast.Name) and node.func.id in self.reads:
            return self.reads[node.func.id](self.visit(node.args[0]))
        return self.generic_visit(node)  # type: ignore[return-value]


SEARCH = """
lo = 0
hi = n
while lo < hi:
    mid = (lo + hi) // 2
    if AFTER:
        lo = mid + 1
    else:
        hi = mid
"""
"""A binary search for ``x`` among the ``n`` sorted elements ``XP``: ``lo`` is the count of them ``AFTER`` which
it goes. ``np.searchsorted``'s, and the first step of NumPy's ``interp`` of one element (``numpy/_core/src/
multiarray/compiled_base.c``'s steps), there ``lo`` the count of ``xp`` at most ``x``; ``FP``, ``LEFT`` and
``RIGHT`` the other elements interp reads."""
SEGMENT = """
k = min(max(lo - 1, 0), n - 2)
slope = (FP(k + 1) - FP(k)) / (XP(k + 1) - XP(k))
r = slope * (x - XP(k)) + FP(k)
r = slope * (x - XP(k + 1)) + FP(k + 1) if r != r else r
r = FP(k) if r != r and FP(k) == FP(k + 1) else r
r = FP(k) if XP(k) == x else r
"""
"""Then the segment ``k`` it falls in (of two points or more), and the value along it: from its right end where
that is NaN, the segment's one value where both ends hold it, ``fp`` itself at a sample point."""
ENDS = """
r = FP(n - 1) if lo >= n else r
r = RIGHT if x > XP(n - 1) else r
r = LEFT if lo == 0 else r
x if x != x else r
"""
"""Last, ``fp``'s last at the last point, ``right`` past it, ``left`` before the first, NaN of NaN."""


__all__ = ["Convolved", "Interpolated", "Searched"]
