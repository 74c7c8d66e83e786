"""NumPy's indexing and functions beyond elementwise arithmetic in ``@svod.jit``'s array statements
(``svod.frontend.arrays``; the searches and sums are ``svod.frontend.array_lookups``'): gathers through integer
arrays (``lut[img]``, ``a[rows, cols]``), stores under a boolean mask (``x[x < 0] = 0``) and through integer arrays
(``a[idx] = v``, NumPy's last write winning), the class and logical functions, ``np.isclose`` and ``np.allclose``,
``np.sign``, ``np.clip``, ``np.diff`` (of any order, along any axis), ``np.roll`` (along axes or raveled),
``np.vdot``, ``np.inner``, ``np.interp``, ``np.searchsorted``, ``np.convolve``, ``np.correlate``,
``np.flatnonzero``, the methods of ufuncs (``np.add.reduce``, ``np.maximum.accumulate``, ``np.multiply.outer``),
``np.concatenate``, ``np.stack``, ``len`` (``np.linalg.norm``: ``svod.frontend.array_norms``).

Each is a lazy ``Expr`` like the others, its element an ``ast`` expression of the operands' elements, or a
method of the ``ArrayCalls`` part of the statements' ``ArrayRewriter``.
"""

from __future__ import annotations

import ast
import inspect
import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import (
    Counted,
    Elementwise,
    Emitter,
    Expr,
    Filled,
    Scalar,
    Transposed,
    Value,
    Viewed,
    base_name,
    broadcast_element,
    numpy,
    typed,
)
from svod.frontend.array_lookups import Convolved, Interpolated, Searched
from svod.frontend.extents import Dim, node_of
from svod.frontend.nodes import call, constant, copied, load, walk
from svod.frontend.temporaries import written_numbers

CLASS_FUNCTIONS = ("isnan", "isinf", "isfinite", "signbit", "logical_not")
"""One-argument NumPy functions that make a bool of each element."""
LOGICAL_FUNCTIONS = ("logical_and", "logical_or", "logical_xor")
"""Two-argument NumPy functions that make a bool of each pair of elements' truth."""
UFUNC_REDUCTIONS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min", "logical_and": "all",
                    "logical_or": "any"}
"""The ufuncs whose ``reduce`` svod has, each as the reduction it is."""
UFUNC_SCANS = {"add": "cumsum", "multiply": "cumprod", "maximum": "maximum", "minimum": "minimum"}
"""The ufuncs whose ``accumulate`` svod has, each as the running scan it is."""
RUNNING = ("maximum", "minimum")
"""The running scans that are a ufunc of the total so far and each element (``np.maximum.accumulate``)."""


@dataclass(eq=False)
class Gathered(Expr):
    """``base[..., i0, i1, ..., ...]`` with integer arrays as adjacent indices from axis ``first`` on, the other
    axes whole: the whole axes before them, an element of ``base`` at the indices' elements (a negative one
    counted from the end, as NumPy counts) in their broadcast shape's place, then the remaining axes."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    indices: tuple[Expr, ...] = ()
    first: int = 0

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        taken = len(self.shape) - (len(self.base.shape) - len(self.indices))
        inner = index[self.first:self.first + taken]
        at = [_from_end(broadcast_element(i, tuple(self.shape[self.first:self.first + taken]), inner, out), size,
                        i.dtype) for i, size in zip(self.indices, self.base.shape[self.first:], strict=False)]
        return self.base.element([*index[:self.first], *at, *index[self.first + taken:]], out)


@dataclass(eq=False)
class Masked(Expr):
    """``base[mask]`` with a boolean array of ``base``'s shape: as a store's target, the elements where the mask
    holds; read, only where the store's own mask (the same one) holds, so its element is ``base``'s."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    mask: Expr = field(default=None)  # type: ignore[assignment]
    key: str = ""
    """The mask's expression, as ``ast.dump`` shows it: two masks are one where their keys are."""

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        return self.base.element(index, out)


@dataclass(eq=False)
class Rolled(Expr):
    """``np.roll(base, shifts, axes)``: along each axis, the element its shift places before, around the end."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    shifts: tuple[int, ...] = ()
    """Each axis's shift, in ``[0, size)``."""

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        at = [i if not shift else ast.BinOp(ast.BinOp(i, ast.Add(), constant(size - shift)), ast.Mod(), constant(size))
              for i, size, shift in zip(index, extents.numbers(self.shape), self.shifts, strict=True)]
        return self.base.element(at, out)


@dataclass(eq=False)
class Joined(Expr):
    """``np.concatenate(parts, axis)``: the part an index along ``axis`` falls in, at its offset there."""

    parts: tuple[Expr, ...] = ()
    axis: int = 0

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        ends = np.cumsum([extents.numbers(p.shape)[self.axis] for p in self.parts])
        value: ast.expr | None = None
        for part, end in reversed(list(zip(self.parts, ends, strict=True))):
            start = int(end) - part.shape[self.axis]
            at = list(index)
            at[self.axis] = ast.BinOp(index[self.axis], ast.Sub(), constant(start)) if start else index[self.axis]
            element = part.element(at, out)
            element = typed(element, self.dtype) if part.dtype != self.dtype else element
            value = element if value is None else ast.IfExp(  # the parts before the last: where the index is below
                ast.Compare(index[self.axis], [ast.Lt()], [constant(int(end))]), element, value)
        assert value is not None
        return value


def scan_start(name: str, dtype: np.dtype) -> Any:
    """What a running scan of ``dtype`` starts from: ``np.cumsum``'s 0, ``np.cumprod``'s 1, a running maximum's
    lowest value of the dtype (-inf, an integer's minimum, False), a running minimum's highest."""
    if name not in RUNNING:
        return int(name == "cumprod")
    lowest = name == "maximum"
    if dtype.kind == "b":
        return not lowest
    if dtype.kind == "f":
        return -math.inf if lowest else math.inf
    return int(np.iinfo(dtype).min if lowest else np.iinfo(dtype).max)


LISTED_LIMIT = 256
"""The most numbers a list written out inside an expression holds (``a[[0, 2, 5]]``, ``np.array([0.25, 0.5])``):
each is a branch of its element."""


def _integer(value: Value | None) -> TypeGuard[Scalar]:
    """Whether ``value`` is an integer scalar (not a bool): beside an index array, NumPy's 0-d index array."""
    return isinstance(value, Scalar) and isinstance(value.held, (int, np.integer)) and \
        not isinstance(value.held, (bool, np.bool_))


def _listed(node: ast.expr, kinds: tuple[type, ...] = (int,)) -> Expr | None:
    """A list of numbers written out inside an expression, of the Python ``kinds`` (an index's integers:
    ``a[[0, 2]]``; ``np.array([0.25, 0.5, 0.25])``'s numbers), as the 1-D array NumPy makes of it; None for
    another node."""
    numbers = written_numbers(node, kinds)
    if not numbers or len(numbers) > LISTED_LIMIT or any(isinstance(e, (ast.List, ast.Tuple)) for e in walk(node)
                                                         if e is not node):
        return None  # (of one dimension: a nest of lists is a temporary of its own, ``temporaries``)
    made = np.array(numbers).dtype

    def element(i: ast.expr) -> ast.expr:
        chosen: ast.expr = typed(constant(numbers[-1]), made)
        for k in reversed(range(len(numbers) - 1)):
            chosen = ast.IfExp(ast.Compare(copied(i), [ast.Eq()], [constant(k)]),
                               typed(constant(numbers[k]), made), chosen)
        return chosen
    return Counted((len(numbers),), made, element)


def written_out(node: ast.Call) -> Expr | None:
    """``np.array([0.25, 0.5, 0.25])`` (``np.asarray``) of numbers written out inside an expression, as the array
    NumPy makes; None for another call."""
    return _listed(node.args[0], (bool, int, float)) if len(node.args) == 1 and not node.keywords else None


def _from_end(index: ast.expr, size: Dim, dtype: np.dtype) -> ast.expr:
    """An index as NumPy takes it: a negative one counts from the end. An unsigned index is never negative (and
    its dtype may not hold the size: ``lut[img]`` of uint8 pixels), so it is taken as it is; a narrower signed
    one is widened to int32 first (as an int32 index, the size is added to it in its own dtype)."""
    if dtype.kind == "u":
        return index
    if dtype.itemsize < 4:
        index = typed(index, np.dtype(np.int32))
    return ast.IfExp(ast.Compare(index, [ast.Lt()], [constant(0)]), ast.BinOp(index, ast.Add(), node_of(size)),
                     index)


def masked_by(value: Value, key: str) -> bool:
    """Whether ``value`` reads arrays only under the mask of ``key`` (``y[m] * 2`` for a store into ``x[m]``)."""
    if isinstance(value, Scalar) or (isinstance(value, Expr) and not value.shape and not reads_masked(value)):
        return True  # (a number, or one computed of arrays: ``x[m] = x.max()``, which every element takes)
    if isinstance(value, Masked):
        return value.key == key
    if isinstance(value, Elementwise):
        return all(masked_by(o, key) for o in value.operands)
    return False


def stored_array(target: Expr) -> str | None:
    """The name of the array whose elements ``target`` names (through indices or a mask, or a view)."""
    return base_name(target.base if isinstance(target, (Gathered, Masked)) else target)


def under_mask_of(stored: Expr, made: Expr) -> Expr:
    """``made`` (a temporary of a store's value) under the mask of the store into ``stored``, where it has one:
    ``x[m] = x[m] * x.min()`` computes the value where the mask holds, then stores it there."""
    return Masked(made.shape, made.dtype, made, stored.mask, stored.key) if isinstance(stored, Masked) else made


def reads_masked(value: Value) -> bool:
    """Whether ``value`` reads an ``x[mask]`` anywhere in it."""
    if isinstance(value, Masked):
        return True
    if not isinstance(value, Expr):
        return False
    parts = [p for v in vars(value).values() for p in (v if isinstance(v, tuple) else (v,))]
    return any(reads_masked(p) for p in parts if isinstance(p, Expr))


class ArrayCalls:
    """The statements' ``ArrayRewriter``, as the functions here use it."""

    reader: Any
    """The function's ``phases.Reader``, which resolves the names a call reads."""

    @abstractmethod
    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...

    @abstractmethod
    def value(self, node: ast.expr) -> Value: ...

    @abstractmethod
    def host_int(self, node: ast.expr, required: bool = True, numpy_bool: bool = False) -> int | None: ...

    @abstractmethod
    def static(self, node: ast.AST, x: Expr, what: str) -> None: ...

    @abstractmethod
    def elementwise(self, node: ast.AST, combine: Callable[[list[ast.expr]], ast.expr], dtype: np.dtype,
                    *operands: Value) -> Expr: ...

    @abstractmethod
    def dtype_of(self, node: ast.AST, fn: Callable[..., object], *operands: Value) -> np.dtype: ...

    @abstractmethod
    def known(self, node: ast.expr, what: str) -> Any: ...

    @abstractmethod
    def passed(self, node: ast.Call, fn: Callable[..., Any], takes: Sequence[str],
               owner: ast.expr | None = None) -> dict[str, ast.expr]: ...

    @abstractmethod
    def axes(self, node: ast.expr | Sequence[ast.expr], ndim: int, what: str) -> tuple[int, ...]: ...

    @abstractmethod
    def numbers(self, node: ast.expr | Sequence[ast.expr], what: str) -> tuple[Any, ...]: ...

    @abstractmethod
    def reshaped(self, node: ast.AST, x: Expr, shape: tuple[int, ...], views: bool = False) -> Expr: ...

    @abstractmethod
    def matmul(self, node: ast.BinOp | ast.Call, a: Value, b: Value) -> Value: ...

    @abstractmethod
    def numpy_call(self, node: ast.Call, name: str, args: list[Value]) -> Value: ...

    @abstractmethod
    def scan(self, node: ast.Call, x: Expr, name: str, owner: ast.expr | None = None) -> Expr: ...

    @abstractmethod
    def cumsum(self, node: ast.AST, x: Expr, axis_node: ast.expr | None, name: str = "cumsum",
               dtype: np.dtype | None = None) -> Expr: ...

    @abstractmethod
    def reduction(self, node: ast.Call, operand: Expr, name: str, keywords: list[ast.keyword],
                  args: list[Value]) -> Value: ...

    def bare(self, node: ast.Call, what: str, takes: Sequence[str] = ()) -> None:
        """Refuses a keyword of ``what``'s call other than ``takes``, naming it: svod never drops an argument
        NumPy would act on (``out=``, ``where=``, ``dtype=``)."""
        refused = [k for k in node.keywords if k.arg not in takes]
        if refused:
            shown = "**" if refused[0].arg is None else f"{refused[0].arg}="
            raise self.refuse(node, f"{what}'s {shown} is not one svod takes (it takes {', '.join(takes) or 'none'})")

    def advanced(self, node: ast.Subscript, base: Expr, items: list[ast.expr]) -> Expr | None:
        """``base[items]`` where an item is an array (or a list of integers written out): a gather through
        adjacent integer arrays (and integers, each as NumPy takes it beside them: a 0-d index array), the other
        axes whole, or a boolean mask of ``base``'s shape; None where no item is an array."""
        values = [None if isinstance(i, (ast.Slice, ast.Tuple)) else _listed(i) or self.value(i) for i in items]
        if not any(isinstance(v, Expr) for v in values):
            return None
        if any(_integer(v) and not -(1 << 63) <= int(v.held) < 1 << 63 for v in values):
            raise self.refuse(node, "an index past int64's range (NumPy raises IndexError)")
        values = [Filled((), np.asarray(v.held).dtype, v) if _integer(v) else v for v in values]
        arrays = [v for v in values if isinstance(v, Expr)]
        if len(items) == 1 and arrays[0].dtype == np.bool_:
            mask = arrays[0]
            if mask.shape != base.shape:
                raise self.refuse(node, f"a boolean mask of shape {extents.shown(mask.shape)} for an array of shape "
                                        f"{extents.shown(base.shape)}: svod's masks have the array's shape")
            return Masked(base.shape, base.dtype, base, mask, ast.dump(items[0]))
        first = next(k for k, v in enumerate(values) if isinstance(v, Expr))
        end = first + len(arrays)
        if any(not isinstance(v, Expr) for v in values[first:end]) or \
                any(not (isinstance(i, ast.Slice) and i.lower is i.upper is i.step is None)
                    for i in [*items[:first], *items[end:]]):
            raise self.refuse(node, "svod gathers through adjacent integer arrays and integers, the other axes whole "
                                    "(`a[idx]`, `a[rows, cols]`, `a[:, idx]`, `a[idx, 1]`)")
        if end > len(base.shape) or any(a.dtype.kind not in "iu" for a in arrays):
            raise self.refuse(node, "a gather's index arrays are integers, at most one per axis")
        shape = extents.broadcast([a.shape for a in arrays])
        if shape is None:
            raise self.refuse(node, f"index arrays of shapes {', '.join(extents.shown(a.shape) for a in arrays)} do "
                                    "not broadcast")
        return Gathered((*base.shape[:first], *shape, *base.shape[end:]), base.dtype, base, tuple(arrays), first)

    def extra_function(self, node: ast.Call, name: str, args: list[Value]) -> Value | None:
        """The NumPy functions of this module, by name; None for another."""
        if name in (*CLASS_FUNCTIONS, *LOGICAL_FUNCTIONS, "sign", "clip"):
            self.bare(node, f"np.{name}")
        if name in CLASS_FUNCTIONS and len(args) == 1:
            dtype = self.dtype_of(node, getattr(np, name), *args)
            return self.elementwise(node, lambda c: call(numpy(name), c[0]), dtype, *args)
        if name in LOGICAL_FUNCTIONS and len(args) == 2:
            dtype = self.dtype_of(node, getattr(np, name), *args)
            return self.elementwise(node, lambda c: call(numpy(name), c[0], c[1]), dtype, *args)
        if name == "sign" and len(args) == 1:
            dtype = self.dtype_of(node, np.sign, *args)
            return self.elementwise(node, lambda c: _sign(c[0], dtype), dtype, *args)
        if name == "clip" and len(args) == 3:
            return self.clipped(node, args)
        if name in ("isclose", "allclose"):
            close = self.closeness(node, getattr(np, name))
            everywhere = ast.copy_location(ast.Call(numpy("all"), [node], []), node)
            return close if name == "isclose" else self.reduction(everywhere, close, "all", [], [])
        if name in ("copy", "array", "asarray") and len(node.args) == 1 and isinstance(args[0], Expr):
            self.bare(node, f"np.{name}")  # a new array, or (asarray) the array itself: a view of its memory
            return args[0] if name == "asarray" else self.elementwise(node, lambda c: c[0], args[0].dtype, args[0])
        if name == "flatnonzero" and len(args) == 1:
            self.bare(node, "np.flatnonzero")
            return self.nonzero_indices(node, args[0])
        if name in ("convolve", "correlate") and len(args) >= 2:
            return self.convolved(node, getattr(np, name))
        if name == "interp":
            return self.interpolated(node)
        if name == "searchsorted":
            return self.searched(node)
        if name in ("vdot", "inner") and len(args) == 2 and all(isinstance(a, Expr) for a in args):
            self.bare(node, f"np.{name}")
            return self.inner_product(node, name, *args)  # type: ignore[arg-type]
        if name == "diff" and args and isinstance(args[0], Expr):
            return self.difference(node, args[0], self.passed(node, np.diff, ("n", "axis")))
        if name == "roll" and args and isinstance(args[0], Expr):
            return self.rolled(node, args[0], self.passed(node, np.roll, ("shift", "axis")))
        return None

    def clipped(self, node: ast.Call, args: list[Value]) -> Value:
        """``np.clip(x, lo, hi)`` (``x.clip(lo, hi)``: ``args`` holds ``x`` first either way): ``np.maximum`` by
        ``lo``, then ``np.minimum`` by ``hi``, a bound of None leaving its side as it is (both None: a copy)."""
        written = node.args[len(node.args) - 2:]  # (the bounds as the call writes them)
        bounds = [None if isinstance(w, ast.Constant) and w.value is None else a
                  for a, w in zip(args[1:], written, strict=True)]
        sides = [side for side, bound in zip(("maximum", "minimum"), bounds, strict=True) if bound is not None]
        given = [bound for bound in bounds if bound is not None]

        def clip(x: Any, *values: Any) -> Any:  # NumPy's own clip, for the result's dtype
            rest = iter(values)
            return np.clip(x, *(None if bound is None else next(rest) for bound in bounds))

        def combine(c: list[ast.expr]) -> ast.expr:
            value = c[0]
            for k, side in enumerate(sides):
                value = call(numpy(side), value, c[1 + k])
            return value

        return self.elementwise(node, combine, self.dtype_of(node, clip, args[0], *given), args[0], *given)

    def closeness(self, node: ast.Call, fn: Callable[..., Any]) -> Expr:
        """``np.isclose(a, b, rtol, atol, equal_nan)`` as NumPy computes it: ``|a - b| <= atol + rtol * |b|``
        where ``b`` is finite, or ``a == b`` (an infinity is close to itself alone); NaN close to NaN only with
        ``equal_nan``. ``b`` is a float at least, as NumPy makes it, and the arithmetic in the dtype NumPy's
        gives; the tolerances may be arrays too."""
        passed = self.passed(node, fn, ("b", "rtol", "atol", "equal_nan"))
        if not node.args or "b" not in passed:
            raise self.refuse(node, f"np.{fn.__name__} takes two arrays (or an array and a number)")
        defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()}
        given = {"a": self.value(node.args[0]), **{name: self.value(passed[name]) if name in passed else
                                                   Scalar(constant(defaults[name]), defaults[name])
                                                   for name in ("b", "rtol", "atol")}}
        a, b, rtol, atol = given["a"], given["b"], given["rtol"], given["atol"]
        equal_nan = "equal_nan" in passed and bool(self.known(passed["equal_nan"], f"np.{fn.__name__}'s equal_nan"))
        if not any(isinstance(v, Expr) for v in given.values()):
            raise self.refuse(node, f"np.{fn.__name__} of numbers alone: svod's compares arrays (math.isclose "
                                    "compares two numbers)")
        if any(isinstance(v, Expr) and v.dtype.kind not in "biuf" for v in given.values()):
            raise self.refuse(node, f"np.{fn.__name__} of complex arrays is not one svod has")

        def difference(x: Any, y: Any, r: Any, t: Any) -> Any:  # NumPy's arithmetic, for its dtype
            y = np.asarray(y, np.result_type(y, 1.0))
            return abs(x - y) - (t + r * abs(y))
        dtype = self.dtype_of(node, difference, a, b, rtol, atol)

        def element(c: list[ast.expr]) -> ast.expr:
            x, y, r, t = (typed(e, dtype) for e in c)
            near = ast.Compare(call(load("abs"), ast.BinOp(x, ast.Sub(), y)), [ast.LtE()],
                               [ast.BinOp(t, ast.Add(), ast.BinOp(r, ast.Mult(), call(load("abs"), y)))])
            close = ast.BinOp(ast.BinOp(near, ast.BitAnd(), call(numpy("isfinite"), y)), ast.BitOr(),
                              ast.Compare(x, [ast.Eq()], [y]))
            both_nan = ast.BinOp(call(numpy("isnan"), x), ast.BitAnd(), call(numpy("isnan"), y))
            return ast.BinOp(close, ast.BitOr(), both_nan) if equal_nan else close
        return self.elementwise(node, element, np.dtype(bool), a, b, rtol, atol)

    def indices_part(self, node: ast.Subscript) -> Expr | None:
        """``np.nonzero(m)[0]`` and ``np.where(m)[0]`` of a 1-D ``m``: ``np.flatnonzero(m)``; None for another
        subscript."""
        call_ = node.value
        if not (isinstance(call_, ast.Call) and len(call_.args) == 1 and not call_.keywords and
                self.reader.resolve(call_.func) in (np.nonzero, np.where)):
            return None
        mask = self.value(call_.args[0])
        if not (isinstance(node.slice, ast.Constant) and node.slice.value in (0, -1) and isinstance(mask, Expr) and
                len(mask.shape) == 1):
            raise self.refuse(node, "np.nonzero(m) makes a tuple of index arrays, one per axis: svod takes [0] of it "
                                    "for a 1-D m, and np.flatnonzero(m) of any")
        return self.nonzero_indices(node, mask)

    def nonzero_indices(self, node: ast.expr, mask: Value) -> Expr:
        """``np.flatnonzero(m)``: the indices of the raveled ``m`` where it is not zero, in order, as
        ``np.arange(m.size)[m.ravel() != 0]`` (a length the data decides: a compaction, or a masked reduction)."""
        if not isinstance(mask, Expr) or mask.dtype.kind == "c":
            raise self.refuse(node, "np.flatnonzero of a number or of a complex array is not one svod has")
        flat = self.reshaped(node, mask, (-1,)) if len(mask.shape) != 1 else mask
        if flat.dtype != np.bool_:
            flat = self.elementwise(node, lambda c: ast.Compare(c[0], [ast.NotEq()], [constant(0)]), np.dtype(bool),
                                    flat)
        wide = np.dtype(np.intp)
        counted = Counted(flat.shape, wide, lambda i: typed(i, wide))
        return Masked(flat.shape, wide, counted, flat, ast.dump(node))

    def convolved(self, node: ast.Call, fn: Callable[..., Any]) -> Expr:
        """``np.convolve(a, v, mode)`` and ``np.correlate(a, v, mode)`` (the convolution with ``v`` reversed, and
        conjugated) of 1-D arrays of static lengths: the full convolution's elements, of those ``mode`` keeps."""
        given = self.passed(node, fn, ("v", "mode"))
        a, v = self.value(node.args[0]), self.value(given["v"])
        mode = self.known(given["mode"], f"np.{fn.__name__}'s mode") if "mode" in given else \
            ("full" if fn is np.convolve else "valid")
        if not (isinstance(a, Expr) and isinstance(v, Expr) and len(a.shape) == len(v.shape) == 1) or \
                mode not in ("full", "same", "valid"):
            raise self.refuse(node, f"np.{fn.__name__} takes two 1-D arrays and a mode of 'full', 'same' or 'valid'")
        for x in (a, v):
            self.static(node, x, f"np.{fn.__name__}")
        n, m = (extents.numbers(x.shape)[0] for x in (a, v))
        if not n or not m:
            raise self.refuse(node, f"np.{fn.__name__} of an empty array (NumPy raises)")
        if fn is np.correlate:
            v = Viewed(v.shape, v.dtype, v, ((0, m - 1, -1),), {})
            if v.dtype.kind == "c":
                v = self.elementwise(node, lambda c: call(numpy("conj"), c[0]), v.dtype, v)
        short, long = min(n, m), max(n, m)
        start, length = {"full": (0, n + m - 1), "same": ((short - 1) // 2, long),
                         "valid": (short - 1, long - short + 1)}[mode]
        if fn is np.correlate and n < m:  # NumPy's correlates the longer with the shorter, then reverses that
            start = n + m - 1 - start - length
        return Convolved((length,), self.dtype_of(node, np.multiply, a, v), a, v, start)

    def interpolated(self, node: ast.Call) -> Expr:
        """``np.interp(x, xp, fp, left, right)`` of real 1-D samples of one static length, as NumPy computes it
        (float64 values; ``xp`` increasing, as NumPy requires)."""
        given = {name: self.value(v) for name, v in self.passed(node, np.interp, ("xp", "fp", "left", "right")).items()}
        x = self.value(node.args[0]) if node.args else None
        xp, fp = given.get("xp"), given.get("fp")
        if x is None or not isinstance(xp, Expr) or not isinstance(fp, Expr) or len(xp.shape) != 1 or xp.shape != \
                fp.shape or any(isinstance(v, Expr) and v.dtype.kind not in "biuf" for v in (x, xp, fp)):
            raise self.refuse(node, "np.interp takes x and two real 1-D arrays of sample points and values of one "
                                    "length (svod's takes no period=, nor complex values)")
        self.static(node, xp, "np.interp")
        if not extents.numbers(xp.shape)[0]:
            raise self.refuse(node, "np.interp of no sample points (NumPy raises)")
        bounds = [given.get(k) for k in ("left", "right")]
        if any(isinstance(b, Expr) and b.shape for b in bounds):
            raise self.refuse(node, "np.interp's left and right are numbers")
        shape = x.shape if isinstance(x, Expr) else ()
        return Interpolated(shape, np.dtype(np.float64), x, xp, fp, *bounds)

    def searched(self, node: ast.Call) -> Expr:
        """``np.searchsorted(a, v, side)`` of a sorted 1-D array of a static length (no ``sorter=``)."""
        given = self.passed(node, np.searchsorted, ("v", "side"))
        a = self.value(node.args[0]) if node.args else None
        v = self.value(given["v"]) if "v" in given else None
        side = self.known(given["side"], "np.searchsorted's side") if "side" in given else "left"
        if not isinstance(a, Expr) or len(a.shape) != 1 or v is None or side not in ("left", "right") or any(
                isinstance(x, Expr) and x.dtype.kind not in "biuf" for x in (a, v)):
            raise self.refuse(node, "np.searchsorted takes a real 1-D array, the values to place and side='left' or "
                                    "'right' (svod's takes no sorter=)")
        self.static(node, a, "np.searchsorted")
        compared = self.dtype_of(node, np.add, a, v) if a.dtype != np.bool_ else np.dtype(np.int64)
        return Searched(v.shape if isinstance(v, Expr) else (), np.dtype(np.intp), v, a, side == "right", compared)

    def ufunc_method(self, node: ast.Call, ufunc: np.ufunc, method: str, args: list[Value]) -> Value:
        """``np.add.reduce``, ``np.maximum.accumulate``, ``np.multiply.outer`` and the like: the reduction or the
        running scan the ufunc's method is, along axis 0 unless told (NumPy's methods' default, where ``np.sum``
        and ``np.cumsum`` take the whole array), or the ufunc of every pair of the two arrays' elements."""
        name, x = ufunc.__name__, args[0] if args else None
        if method == "outer" and len(args) == 2 and isinstance(x, Expr) and isinstance(args[1], Expr):
            b = args[1]
            spread = Viewed((*x.shape, *(1 for _ in b.shape)), x.dtype, x,
                            (*((k, 0, 1) for k in range(len(x.shape))), *(None for _ in b.shape)), {})
            return self.numpy_call(node, name, [spread, b])
        known = UFUNC_REDUCTIONS if method == "reduce" else UFUNC_SCANS if method == "accumulate" else {}
        if not isinstance(x, Expr) or name not in known or len(node.args) > 2:
            raise self.refuse(node, f"np.{name}.{method} of an array is not one svod has: it has the reduce of "
                                    f"{', '.join(UFUNC_REDUCTIONS)}, the accumulate of {', '.join(UFUNC_SCANS)} (each "
                                    "with the array and its axis, the rest by keyword), and outer of two arrays")
        along = node.args[1:] or [k.value for k in node.keywords if k.arg == "axis"] or \
            [ast.copy_location(constant(0), node)]
        same = ast.copy_location(ast.Call(node.func, node.args[:1], [
            *(k for k in node.keywords if k.arg != "axis"), ast.keyword("axis", along[0])]), node)
        if method == "reduce":
            return self.reduction(same, x, known[name], same.keywords, [])
        if name in ("add", "multiply"):
            return self.scan(same, x, known[name])
        self.bare(node, f"np.{name}.accumulate", ("axis",))
        if not x.shape or x.dtype.kind not in "biuf":
            raise self.refuse(node, f"np.{name}.accumulate of a 0-d or complex array is not one svod has")
        axis = self.axes(along[0], len(x.shape), f"np.{name}.accumulate's axis")[0]
        return self.cumsum(node, x, ast.copy_location(constant(axis), node), known[name])

    def inner_product(self, node: ast.Call, name: str, a: Expr, b: Expr) -> Value:
        """``np.vdot(a, b)``: the arrays raveled, ``a`` conjugated, as one number; ``np.inner(a, b)`` of arrays of
        1 or 2 dimensions: the sums of products along the last axes (``a @ b.T``)."""
        if name == "vdot":
            a, b = (self.reshaped(node, x, (-1,)) for x in (a, b))
            if a.dtype.kind == "c":
                a = self.elementwise(node, lambda c: call(numpy("conj"), c[0]), a.dtype, a)
            return self.matmul(node, a, b)
        if not (1 <= len(a.shape) <= 2 and 1 <= len(b.shape) <= 2):
            raise self.refuse(node, "np.inner of arrays of 1 or 2 dimensions is the one svod has")
        if len(b.shape) == 1:
            return self.matmul(node, a, b)
        turned = Transposed((b.shape[1], b.shape[0]), b.dtype, b, (1, 0))
        return self.matmul(node, a, turned) if len(a.shape) == 2 else self.matmul(node, b, a)

    def difference(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        """``np.diff(x, n, axis)``: ``x[1:] - x[:-1]`` along the axis (``!=`` of bools, as NumPy's), ``n``
        times (``x`` itself for 0)."""
        times = self.host_int(given["n"]) if "n" in given else 1
        assert times is not None
        if times < 0:
            raise self.refuse(node, f"np.diff's order n={times} is negative (NumPy raises)")
        if not x.shape:
            raise self.refuse(node, "np.diff of a 0-d array (NumPy raises)")
        axis = self.axes(given["axis"], len(x.shape), "np.diff's axis")[0] if "axis" in given else len(x.shape) - 1
        for _ in range(times):
            if extents.low(x.shape[axis]) <= 0:
                raise self.refuse(node, "np.diff of an array with no elements along its axis" + (
                    "" if isinstance(x.shape[axis], int) else f" at some turns (`{x.shape[axis]}`)"))
            axes: list[tuple[int, Dim, int]] = [(k, 0, 1) for k in range(len(x.shape))]
            shape = tuple(extents.sub(size, 1) if k == axis else size for k, size in enumerate(x.shape))
            earlier = Viewed(shape, x.dtype, x, tuple(axes), {})
            axes[axis] = (axis, 1, 1)
            later = Viewed(shape, x.dtype, x, tuple(axes), {})
            if x.dtype == np.bool_:
                x = self.elementwise(node, lambda c: ast.Compare(c[0], [ast.NotEq()], [c[1]]), x.dtype, later, earlier)
            else:
                x = self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Sub(), c[1]),
                                     self.dtype_of(node, np.subtract, later, earlier), later, earlier)
        return x

    def rolled(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        """``np.roll(x, shift, axis)``: by shifts the host knows, one per axis named (one shift for all of them),
        or of ``x`` raveled where no axis is named, as NumPy's."""
        self.static(node, x, "np.roll")
        if "axis" not in given:
            along = {**given, "axis": ast.copy_location(constant(0), node)}
            flat = self.rolled(node, self.reshaped(node, x, (-1,)), along)
            return self.reshaped(node, flat, extents.numbers(x.shape)) if len(x.shape) != 1 else flat
        named = self.axes(given["axis"], len(x.shape), "np.roll's axis")
        by = self.numbers(given["shift"], "np.roll's shift")  # (NumPy shifts by a bool's 0 or 1)
        if any(not isinstance(s, (int, np.integer, np.bool_)) for s in by) or len(by) not in (1, len(named)):
            raise self.refuse(node, f"np.roll's shift {by} is an integer, or one for each axis named")
        shifts = [0] * len(x.shape)
        for axis, shift in zip(named, by * len(named) if len(by) == 1 else by, strict=True):
            shifts[axis] = int(shift)
        sizes = extents.numbers(x.shape)
        shifts = [shift % size if size else 0 for shift, size in zip(shifts, sizes, strict=True)]
        return Rolled(x.shape, x.dtype, x, tuple(shifts)) if any(shifts) else x

    def extra_method(self, node: ast.Call, owner: Expr, name: str, args: list[Value]) -> Value | None:
        """The array methods of the modules beyond this one, by name; None for another."""
        return None

    def joined(self, node: ast.Call, name: str) -> Expr:
        """``np.concatenate((a, b, ...), axis=0)`` and ``np.stack((a, b, ...), axis=0)`` of arrays."""
        self.bare(node, f"np.{name}", ("axis",))
        axis_node = next((k.value for k in node.keywords if k.arg == "axis"), None)
        axis = 0 if axis_node is None else self.host_int(axis_node)
        assert axis is not None
        return self.join(node, name, self.parts(node, name), axis)

    def parts(self, node: ast.Call, name: str) -> list[Expr]:
        """The arrays a join's sequence, written out, holds."""
        sequence = node.args[0]
        if not isinstance(sequence, (ast.Tuple, ast.List)) or not sequence.elts:
            raise self.refuse(node, f"np.{name} takes a tuple or list of arrays written out")
        parts = [self.value(e) for e in sequence.elts]
        if not all(isinstance(p, Expr) for p in parts):
            raise self.refuse(node, f"np.{name} joins arrays")
        arrays = [p for p in parts if isinstance(p, Expr)]
        for part in arrays:
            self.static(node, part, f"np.{name}")
        return arrays

    def join(self, node: ast.Call, name: str, arrays: list[Expr], axis: int) -> Expr:
        """``arrays`` joined along ``axis`` (``np.stack``: along a new axis there)."""
        ndim = len(arrays[0].shape) + (name == "stack")
        if not -ndim <= axis < ndim or any(len(a.shape) != len(arrays[0].shape) for a in arrays):
            raise self.refuse(node, f"np.{name} of arrays of dimensions {[len(a.shape) for a in arrays]} "
                                    f"along axis {axis}")
        axis %= ndim
        if name == "stack":  # each part a view with a new axis of size 1
            if any(a.shape != arrays[0].shape for a in arrays):
                raise self.refuse(node, "np.stack takes arrays of one shape")
            arrays = [Viewed((*a.shape[:axis], 1, *a.shape[axis:]), a.dtype, a,
                             (*((k, 0, 1) for k in range(axis)), None,
                              *((k, 0, 1) for k in range(axis, len(a.shape)))), {}) for a in arrays]
        shapes = [a.shape[:axis] + a.shape[axis + 1:] for a in arrays]
        if any(s != shapes[0] for s in shapes):
            raise self.refuse(node, f"np.{name} of shapes {[a.shape for a in arrays]} along axis {axis}")
        dtype = np.result_type(*(a.dtype for a in arrays))
        length = sum(extents.numbers(a.shape)[axis] for a in arrays)
        shape = (*arrays[0].shape[:axis], length, *arrays[0].shape[axis + 1:])
        return Joined(shape, dtype, tuple(arrays), axis)



def _sign(x: ast.expr, dtype: np.dtype) -> ast.expr:
    """NumPy's sign: 1, -1, or the element itself (a zero, a NaN), as ``dtype``."""
    same = typed(x, dtype)
    if dtype.kind == "f":
        same = ast.IfExp(ast.Compare(x, [ast.NotEq()], [x]), same, typed(constant(0), dtype))
    return ast.IfExp(ast.Compare(x, [ast.Gt()], [constant(0)]), typed(constant(1), dtype),
                     ast.IfExp(ast.Compare(x, [ast.Lt()], [constant(0)]), typed(constant(-1), dtype), same))
