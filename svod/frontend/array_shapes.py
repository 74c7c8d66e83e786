"""NumPy's shaping functions and the arrays made from indices alone in ``@svod.jit``'s array statements
(``svod.frontend.arrays``): ``np.transpose`` and ``x.transpose``, ``np.swapaxes``, ``np.reshape`` and
``x.reshape``/``ravel``/``flatten``, ``np.flip``/``fliplr``/``flipud``, ``np.expand_dims``, ``np.squeeze``,
``np.broadcast_to``, ``np.hstack``/``vstack``/``column_stack``/``dstack``, ``np.tril``/``triu``, ``np.trace``,
``np.diagonal``/``np.diag``, ``np.moveaxis``, ``np.ascontiguousarray``, ``np.repeat``, ``np.tile``, and
``np.arange``, ``np.linspace``, ``np.eye``, ``np.identity``, ``np.tri``.

A view is a view here too: ``v = np.flip(x)`` names ``x``'s memory, as NumPy's does. ``np.broadcast_to``'s view
repeats elements, so it is read-only, as NumPy's, and so is ``np.diagonal``'s: a store into either is refused
(``read_only``). The numbers these
take (a shape, an axis, ``k``) are the host's, known before the run, as a slice's bounds are.
"""

from __future__ import annotations

import ast
import inspect
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import (
    Counted,
    Emitter,
    Expr,
    Filled,
    Named,
    Reduced,
    Reshaped,
    Scalar,
    Transposed,
    Value,
    Viewed,
    Whole,
    numpy,
    typed,
)
from svod.frontend.array_math import ArrayMath
from svod.frontend.extents import Dim
from svod.frontend.nodes import call, constant, copied, walk
from svod.frontend.source import Source

JOINS = (np.concatenate, np.stack, np.hstack, np.vstack, np.column_stack, np.dstack)
"""The functions that join a sequence of arrays written out (``np.hstack((a, b))``)."""
MADE = (np.arange, np.linspace, np.eye, np.identity, np.tri, np.zeros, np.ones, np.full, np.empty)
"""The functions that make an array of numbers the host knows (``np.eye(n)``): an expression of its indices."""
FILLED_LIKE = (np.zeros_like, np.ones_like, np.full_like, np.empty_like)
"""The functions that make an array of another's shape, each element one number."""
VIEWS = ("transpose", "swapaxes", "reshape", "ravel", "flip", "fliplr", "flipud", "expand_dims", "squeeze",
         "broadcast_to", "diagonal", "diag", "moveaxis", "ascontiguousarray")
"""The functions and methods whose array is a view of their operand's memory."""
_STACKS = {"hstack": 1, "vstack": 2, "column_stack": 2, "dstack": 3}
"""The joins that first give each part at least these dimensions."""


@dataclass(eq=False)
class ReadOnly(Viewed):
    """A view NumPy makes read-only: a store into it is refused, as NumPy raises."""

    maker: ClassVar[str] = ""
    """The function whose view it is, as the refusal names it."""


@dataclass(eq=False)
class Broadcast(ReadOnly):
    """``np.broadcast_to(base, shape)``: a view that reads an element of ``base`` at many indices (a step of 0
    along a stretched axis), so it is read-only."""

    maker = "np.broadcast_to"


@dataclass(eq=False)
class Diagonal(ReadOnly):
    """``np.diagonal(base, k)`` (``np.diag`` of a matrix): a step of a row and a column along the raveled
    matrix, read-only as NumPy's."""

    maker = "np.diagonal"


@dataclass(eq=False)
class DiagonalMatrix(Expr):
    """``np.diag(base, k)`` of a 1-D array: a square matrix with ``base`` on its diagonal ``j - i == k``, 0
    elsewhere (an element off it reads ``base`` at an index kept in bounds, and drops it)."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    k: int = 0

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        size = extents.numbers(self.base.shape)[0]
        if not size:
            return typed(constant(0), self.dtype)
        along = index[0] if self.k >= 0 else index[1]  # the index into base where the element is on the diagonal
        last = constant(size - 1)
        at = ast.IfExp(ast.Compare(along, [ast.Lt()], [last]), along, copied(last))
        on = ast.Compare(ast.BinOp(index[1], ast.Sub(), index[0]), [ast.Eq()], [constant(self.k)])
        return ast.IfExp(on, self.base.element([at], out), typed(constant(0), self.dtype))


@dataclass(eq=False)
class Banded(Expr):
    """A matrix (the last two axes) of whether each element's diagonal ``j - i`` stands to ``k`` as ``op``
    says, as ``dtype``: ``np.eye``'s ones on one diagonal (``==``), ``np.tri``'s below one (``<=``); as a bool,
    ``np.tril``'s and ``np.triu``'s masks."""

    k: int = 0
    op: type[ast.cmpop] = ast.Eq

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        test = ast.Compare(ast.BinOp(index[-1], ast.Sub(), index[-2]), [self.op()], [constant(self.k)])
        return test if self.dtype == np.bool_ else typed(test, self.dtype)


@dataclass(eq=False)
class Repeated(Expr):
    """``np.repeat(base, times, axis)``: each element of ``base`` along ``axis`` ``times`` times in a row."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    axis: int = 0
    times: int = 1

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        at = list(index)
        at[self.axis] = ast.BinOp(index[self.axis], ast.FloorDiv(), constant(self.times))
        return self.base.element(at, out)


@dataclass(eq=False)
class Tiled(Expr):
    """``np.tile(base, reps)``: ``base`` repeated whole along each of its axes (the last ones of this shape)."""

    base: Expr = field(default=None)  # type: ignore[assignment]

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        sizes = extents.numbers(self.base.shape)
        lead = len(self.shape) - len(sizes)
        return self.base.element([ast.BinOp(i, ast.Mod(), constant(size)) if size != reps else i for i, size, reps in
                                  zip(index[lead:], sizes, extents.numbers(self.shape)[lead:], strict=True)], out)


def read_only(x: Expr) -> str | None:
    """The function whose read-only view ``x`` views (``np.broadcast_to``, whose one element a store would write
    many times; ``np.diagonal``), as NumPy has them; None where it views none."""
    while isinstance(x, (Viewed, Transposed, Reshaped)):
        if isinstance(x, ReadOnly):
            return x.maker
        x = x.base
    return None


def viewed_by(node: ast.expr) -> list[ast.expr]:
    """What ``node`` may view: a view function's or method's operand (``np.flip(a)``, ``a.transpose()``:
    ``a``, and for a method, what it is called on); ``node`` itself otherwise."""
    if not isinstance(node, ast.Call):
        return [node]
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in VIEWS:
        return [node]
    return [*([func.value] if isinstance(func, ast.Attribute) else []), *node.args[:1]]


class ArrayShapes(ArrayMath):
    """The functions of this module, as the statements' ``ArrayRewriter`` calls them."""

    source: Source
    host: dict[str, Any]
    outer: dict[str, Any]
    arrays: dict[str, Expr]
    read: set[str]
    sampled: set[str]
    changed: bool

    @abstractmethod
    def on_host(self, node: ast.expr) -> Any: ...

    @abstractmethod
    def computed(self, node: ast.expr) -> Any: ...

    @abstractmethod
    def origins_of(self, names: set[str]) -> set[str]: ...

    # ---- the user's arguments ----------------------------------------------------------------------------

    def passed(self, node: ast.Call, fn: Callable[..., Any], takes: Sequence[str],
               owner: ast.expr | None = None) -> dict[str, ast.expr]:
        """The user's argument nodes of ``np.<fn>`` (of the method, called on ``owner``), by NumPy's parameter
        names; a parameter given that is not among ``takes`` is refused, naming it."""
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.refuse(node, f"np.{fn.__name__} takes its arguments written out (no * or **)")
        try:
            bound = inspect.signature(fn).bind(*([owner] if owner is not None else []), *node.args,
                                               **{str(k.arg): k.value for k in node.keywords})
        except TypeError as err:
            raise self.refuse(node, f"np.{fn.__name__}: {err}") from None
        defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()}
        first = 0 if fn in MADE else 1  # the array itself, or what the method is called on
        given = [(name, value) for name, value in list(bound.arguments.items())[first:]
                 if not (isinstance(value, ast.Constant) and value.value is None and defaults[name] is None)]
        refused = [name for name, _ in given if name not in takes]
        if refused:
            raise self.refuse(node, f"np.{fn.__name__}'s {refused[0]}= is not one svod takes (it takes "
                                    f"{', '.join(takes) or 'none'})")
        return dict(given)

    def known(self, node: ast.expr, what: str) -> Any:
        """``node`` computed on the host (a shape, an axis), each array of the function a stand-in of its shape
        and dtype (``x.shape`` of a temporary too, never an element, which the run computes); the scalar
        arguments it reads, recorded."""
        stand_ins = {name: _Shaped(extents.numbers(a.shape), a.dtype) for name, a in self.arrays.items()
                     if extents.is_static(a.shape)}
        self.sampled |= self.origins_of({n.id for n in walk(node) if isinstance(n, ast.Name)})
        try:
            value = eval(compile(ast.Expression(node), self.source.file, "eval"), self.outer,
                         {**self.host, **stand_ins})
        except Exception as err:
            raise self.refuse(node, f"{what} is a number the host knows before the run ({err})") from err
        self.read |= {n.id for n in walk(node) if isinstance(n, ast.Name)} & (set(self.host) - set(self.arrays))
        return value

    def remember_unpacked(self, target: ast.Tuple, node: ast.expr) -> None:
        """``n, m = x.shape``: the names' values where they are numbers the host knows (a shape, the numbers it
        reads), so a slice or a shape may read them; a name not an array's, forgotten where they are not."""
        names = [e.id for e in target.elts if isinstance(e, ast.Name)]
        try:
            values = self.known(node, "an unpacked tuple")
        except KernelSyntaxError:
            values = None
        if isinstance(values, tuple) and len(values) == len(names) == len(target.elts) and all(
                isinstance(v, (int, float, np.integer, np.floating)) for v in values):
            self.host.update(zip(names, values, strict=True))
            return
        for name in names:
            if name not in self.arrays:
                self.host.pop(name, None)

    def numbers(self, node: ast.expr | Sequence[ast.expr], what: str) -> tuple[Any, ...]:
        """A number or a tuple of them the host knows, written as one value or one by one (``x.reshape(2, 3)``,
        ``x.reshape((2, 3))``)."""
        given = self.known(node, what) if isinstance(node, ast.AST) else [self.known(n, what) for n in node]
        if isinstance(given, list) and len(given) == 1 and isinstance(given[0], (tuple, list)):
            given = given[0]
        return tuple(given) if isinstance(given, (tuple, list)) else (given,)

    def numbers_value(self, node: ast.Tuple) -> Scalar:
        """A tuple of numbers (a shape: ``(x.shape[1], -1)``), as a scalar argument of a call."""
        parts = [self.value(e) for e in node.elts]
        if any(isinstance(p, Expr) for p in parts):
            raise self.refuse(node, "a tuple of arrays is not an array expression svod has")
        return Scalar(copied(node), tuple(p.held for p in parts if isinstance(p, Scalar)))

    def axes(self, node: ast.expr | Sequence[ast.expr], ndim: int, what: str) -> tuple[int, ...]:
        """An axis or a tuple of axes the host knows, each counted from the end where negative, in order."""
        given = self.numbers(node, what)
        at = node if isinstance(node, ast.AST) else node[0]
        if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim
               for a in given) or len({int(a) % ndim for a in given}) != len(given):
            raise self.refuse(at, f"{what} {given} is not an axis, or distinct axes, of {ndim} dimension(s)")
        return tuple(int(a) % ndim for a in given)

    def shape_of(self, node: ast.expr | Sequence[ast.expr], x: Expr, what: str) -> tuple[int, ...]:
        """A reshape's shape (a tuple, or its sizes one by one), with one ``-1`` for the size the others leave."""
        sizes = self.numbers(node, what)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in sizes):
            raise self.refuse(node if isinstance(node, ast.AST) else node[0], f"{what} {sizes} is not a shape")
        return tuple(int(d) for d in sizes)

    # ---- dispatch ----------------------------------------------------------------------------------------

    def extra_function(self, node: ast.Call, name: str, args: list[Value]) -> Value | None:
        x = args[0] if args and isinstance(args[0], Expr) else None
        if x is not None and getattr(np, name) in FILLED_LIKE:
            return self.filled(node, getattr(np, name), x)
        if x is None or name not in _SHAPING:
            return super().extra_function(node, name, args)
        fn = getattr(np, name)
        return _SHAPING[name](self, node, x, self.passed(node, fn, _TAKES.get(name, ())))

    def extra_method(self, node: ast.Call, owner: Expr, name: str, args: list[Value]) -> Value | None:
        if name == "transpose":  # the axes one by one, or as a tuple
            if node.keywords:
                raise self.refuse(node, "x.transpose takes its axes alone")
            return self.transposed(node, owner, {"axes": node.args} if node.args else {})
        if name == "reshape":  # the sizes one by one, or as a tuple
            if any(k.arg != "order" for k in node.keywords):
                raise self.refuse(node, "x.reshape takes a shape, and order= alone")
            return self.reshaped_to(node, owner, {"shape": node.args, **{str(k.arg): k.value for k in node.keywords}})
        if name in ("ravel", "flatten", "swapaxes", "squeeze", "trace", "diagonal", "repeat"):
            fn = np.ravel if name == "flatten" else getattr(np, name)
            made = _SHAPING[fn.__name__](self, node, owner, self.passed(node, fn, _TAKES[fn.__name__], node.func))
            return made if name != "flatten" else self.elementwise(node, lambda c: c[0], owner.dtype, made)  # a copy
        if name == "round":
            decimals = self.passed(node, np.round, ("decimals",), node.func).get("decimals")
            return self.rounded(node, owner, decimals)
        return super().extra_method(node, owner, name, args)

    # ---- views -------------------------------------------------------------------------------------------

    def transposed(self, node: ast.Call, x: Expr, given: dict[str, Any]) -> Expr:
        ndim = len(x.shape)
        axes = given.get("axes")  # a node, or the method's nodes one by one
        if axes is not None and not (isinstance(axes, ast.Constant) and axes.value is None):
            order = self.axes(axes, ndim, "np.transpose's axes")
            if len(order) != ndim:
                raise self.refuse(node, f"np.transpose's axes {order} do not name each of {ndim} axes once")
        else:
            order = tuple(reversed(range(ndim)))
        return Transposed(tuple(x.shape[a] for a in order), x.dtype, x, order)

    def swapped(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        ndim = len(x.shape)
        first, second = (self.axes(given[k], ndim, "np.swapaxes's axis")[0] for k in ("axis1", "axis2"))
        order = list(range(ndim))
        order[first], order[second] = second, first
        return Transposed(tuple(x.shape[a] for a in order), x.dtype, x, tuple(order))

    def moved(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        """``np.moveaxis(x, source, destination)``: the transpose that puts each source axis at its destination,
        the others in their order."""
        ndim = len(x.shape)
        source = self.axes(given["source"], ndim, "np.moveaxis's source")
        destination = self.axes(given["destination"], ndim, "np.moveaxis's destination")
        if len(source) != len(destination):
            raise self.refuse(node, "np.moveaxis's source and destination name as many axes each")
        order = [k for k in range(ndim) if k not in source]
        for to, axis in sorted(zip(destination, source, strict=True)):
            order.insert(to, axis)
        return Transposed(tuple(x.shape[a] for a in order), x.dtype, x, tuple(order))

    def contiguous(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        """``np.ascontiguousarray(x)``: ``x`` itself where its memory is in C order (at least 1-D), else a copy."""
        if not x.shape:
            return self.reshaped(node, x, (1,))
        strides = _strides(x)
        if strides is not None and _contiguous(extents.numbers(x.shape), strides) is not None:
            return x
        return self.elementwise(node, lambda c: c[0], x.dtype, x)

    def repeated(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        """``np.repeat(x, times, axis)`` by a count the host knows (of ``x`` raveled where no axis is given)."""
        times = _integer(self, given["repeats"], "np.repeat's count (one the host knows: svod repeats each element "
                                                 "as often)")
        if times < 0:
            raise self.refuse(node, f"np.repeat's count {times} is negative (NumPy raises)")
        axis_node = given.get("axis")
        if axis_node is None:
            x, axis = self.reshaped(node, x, (-1,)), 0
        else:
            axis = self.axes(axis_node, len(x.shape), "np.repeat's axis")[0]
        self.static(node, x, "np.repeat")
        shape = list(extents.numbers(x.shape))
        shape[axis] *= times
        return Repeated(tuple(shape), x.dtype, x, axis, times)

    def tiled(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        """``np.tile(x, reps)`` of counts the host knows: ``x`` given leading axes of 1 up to ``len(reps)``, and
        ``reps`` leading ones up to ``x``'s dimensions, as NumPy's."""
        reps = self.numbers(given["reps"], "np.tile's reps")
        if any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0 for r in reps):
            raise self.refuse(node, f"np.tile's reps {reps} are counts")
        self.static(node, x, "np.tile")
        if len(reps) > len(x.shape):
            x = _expanded(x, tuple(range(len(reps) - len(x.shape))))
        counts = (1,) * (len(x.shape) - len(reps)) + tuple(int(r) for r in reps)
        shape = tuple(size * r for size, r in zip(extents.numbers(x.shape), counts, strict=True))
        return Tiled(shape, x.dtype, x) if shape != x.shape else self.elementwise(node, lambda c: c[0], x.dtype, x)

    def reshaped_to(self, node: ast.Call, x: Expr, given: dict[str, Any]) -> Expr:
        if "order" in given and self.known(given["order"], "the order") != "C":
            raise self.refuse(node, "svod reshapes in C order (order='C')")
        if "shape" not in given:
            raise self.refuse(node, "reshape takes a shape")
        return self.reshaped(node, x, self.shape_of(given["shape"], x, "reshape's shape"), views=True)

    def reshaped(self, node: ast.AST, x: Expr, shape: tuple[int, ...], views: bool = False) -> Expr:
        """``x`` read in C order as ``shape``: where ``views``, a view of ``x``'s memory where NumPy's reshape
        makes one (else a copy); otherwise a view where ``x`` is C-contiguous, as NumPy's ravel."""
        self.static(node, x, "a reshape")
        given = extents.numbers(x.shape)
        size = int(np.prod(given))
        if shape.count(-1) == 1:
            known = int(np.prod([d for d in shape if d != -1]))
            shape = tuple(size // known if d == -1 and known else d for d in shape)
        if int(np.prod(shape)) != size or any(d < 0 for d in shape):
            raise self.refuse(node, f"cannot reshape an array of size {size} into shape {shape}")
        made = Reshaped(shape, x.dtype, x)
        strides = _strides(x)
        if strides is not None and (_reshaped_strides(given, strides, shape) if views else
                                    _contiguous(given, strides)) is not None:
            return made
        return self.elementwise(node, lambda c: c[0], x.dtype, made)  # a copy

    def raveled(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        if "order" in given and self.known(given["order"], "the order") != "C":
            raise self.refuse(node, "svod ravels in C order (order='C')")
        return self.reshaped(node, x, (-1,))

    def flipped(self, node: ast.Call, x: Expr, given: dict[str, ast.expr], axes: tuple[int, ...] | None = None) -> Expr:
        ndim = len(x.shape)
        if axes is None:
            axis = given.get("axis")
            axes = tuple(range(ndim)) if axis is None or (isinstance(axis, ast.Constant) and axis.value is None) \
                else self.axes(axis, ndim, "np.flip's axis")
        if any(a >= ndim for a in axes):
            raise self.refuse(node, f"np.flip's axis {max(axes)} is out of bounds for {ndim} dimension(s)")
        return Viewed(x.shape, x.dtype, x, tuple((k, _last(size), -1) if k in axes else (k, 0, 1)
                                                 for k, size in enumerate(x.shape)), {})

    def new_axes(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        ndim = len(x.shape) + len(_tuple(self.known(given["axis"], "np.expand_dims's axis")))
        return _expanded(x, self.axes(given["axis"], ndim, "np.expand_dims's axis"))

    def squeezed(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        axis = given.get("axis")
        ones = tuple(k for k, size in enumerate(x.shape) if size == 1)
        dropped = ones if axis is None or (isinstance(axis, ast.Constant) and axis.value is None) else \
            self.axes(axis, len(x.shape), "np.squeeze's axis")
        if any(x.shape[a] != 1 for a in dropped):
            raise self.refuse(node, f"np.squeeze of an axis of shape {x.shape} whose size is not 1 (NumPy raises)")
        return Viewed(tuple(s for k, s in enumerate(x.shape) if k not in dropped), x.dtype, x,
                      tuple((k, 0, 1) for k in range(len(x.shape)) if k not in dropped),
                      {k: constant(0) for k in dropped})

    def broadcast(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Expr:
        shape = self.shape_of(given["shape"], x, "np.broadcast_to's shape")
        lead = len(shape) - len(x.shape)
        if lead < 0 or any(s not in (1, shape[lead + k]) for k, s in enumerate(x.shape)):
            raise self.refuse(node, f"an array of shape {x.shape} does not broadcast to shape {shape}")
        return Broadcast(shape, x.dtype, x, (*[None] * lead, *((k, 0, int(s == shape[lead + k]))
                                                              for k, s in enumerate(x.shape))), {})

    def stacked(self, node: ast.Call, name: str) -> Expr:
        """``np.hstack``/``vstack``/``column_stack``/``dstack``: each part with at least the dimensions the join
        gives it, then ``np.concatenate`` along NumPy's axis."""
        if node.keywords:
            raise self.refuse(node, f"np.{name} takes the arrays alone here")
        parts = self.parts(node, name)
        least = _STACKS[name]
        if any(not p.shape for p in parts):
            raise self.refuse(node, f"np.{name} of a 0-dimensional array")
        if name == "hstack":
            return self.join(node, name, parts, 0 if len(parts[0].shape) == 1 else 1)
        if name == "column_stack":
            parts = [_expanded(p, (1,)) if len(p.shape) == 1 else p for p in parts]
        else:  # vstack: (n,) as (1, n); dstack: (n,) as (1, n, 1), (m, n) as (m, n, 1)
            parts = [_expanded(p, (0, 2)[:least - 1] if len(p.shape) == 1 else (2,)) if len(p.shape) < least
                     else p for p in parts]
        return self.join(node, name, parts, {"vstack": 0, "column_stack": 1, "dstack": 2}[name])

    def joined(self, node: ast.Call, name: str) -> Expr:
        if name in _STACKS:
            return self.stacked(node, name)
        return super().joined(node, name)

    # ---- triangles and the diagonal ----------------------------------------------------------------------

    def triangle(self, node: ast.Call, x: Expr, given: dict[str, ast.expr], lower: bool) -> Expr:
        """``np.tril`` (``np.triu``): ``x`` where ``j - i <= k`` (``>= k``), 0 elsewhere."""
        if len(x.shape) < 2:
            raise self.refuse(node, f"np.{'tril' if lower else 'triu'} of an array of {len(x.shape)} dimension(s) "
                                    "(svod's take a matrix, or a stack of them)")
        k = _integer(self, given.get("k"), "k")
        mask = Banded(x.shape[-2:], np.dtype(bool), k, ast.LtE if lower else ast.GtE)
        return self.elementwise(node, lambda c: ast.IfExp(c[1], c[0], typed(constant(0), x.dtype)), x.dtype, x, mask)

    def traced(self, node: ast.Call, x: Expr, given: dict[str, ast.expr]) -> Value:
        """``np.trace(x, offset)`` of a matrix: the sum of its diagonal ``offset`` places right (left)."""
        if len(x.shape) != 2:
            raise self.refuse(node, f"np.trace of an array of {len(x.shape)} dimension(s) (svod's takes a matrix)")
        self.static(node, x, "np.trace")
        diagonal = self.diagonal_of(x, _integer(self, given.get("offset"), "offset"))
        dtype = np.trace(np.ones((1, 1), x.dtype)).dtype
        return Whole(Reduced((), dtype, "sum", diagonal, (0,)))

    def diagonal_of(self, x: Expr, k: int) -> Diagonal:
        """The diagonal ``k`` places right (left) of a matrix of static shape."""
        rows, columns = extents.numbers(x.shape)
        length = max(0, min(rows - max(-k, 0), columns - max(k, 0)))
        start = max(-k, 0) * columns + max(k, 0) if length else 0
        return Diagonal((length,), x.dtype, Reshaped((rows * columns,), x.dtype, x), ((0, start, columns + 1),), {})

    def diagonal(self, node: ast.Call, x: Expr, given: dict[str, ast.expr], name: str) -> Expr:
        """``np.diagonal(x, offset)`` of a matrix, and ``np.diag(x, k)``: of a matrix its diagonal, of a 1-D
        array the square matrix with it on the diagonal ``k``."""
        if len(x.shape) not in ((1, 2) if name == "diag" else (2,)):
            raise self.refuse(node, f"np.{name} of an array of {len(x.shape)} dimension(s) (svod's takes a matrix"
                                    f"{', or a 1-D array' if name == 'diag' else ''})")
        self.static(node, x, f"np.{name}")
        k = _integer(self, given.get("k", given.get("offset")), "the diagonal's offset")
        if len(x.shape) == 2:
            return self.diagonal_of(x, k)
        size = extents.numbers(x.shape)[0] + abs(k)
        return DiagonalMatrix((size, size), x.dtype, x, k)

    # ---- arrays made of numbers --------------------------------------------------------------------------

    def made(self, node: ast.Call, name: str) -> Expr:
        """``np.arange``, ``np.linspace``, ``np.eye``, ``np.identity``, ``np.tri`` of numbers the host knows: an
        expression of the indices, computed as NumPy computes each element."""
        fn = getattr(np, name)
        if name in ("zeros", "ones", "full", "empty"):
            return self.filled(node, fn, None)
        given = {k: self.known(v, f"np.{name}'s {k}") for k, v in self.passed(node, fn, _TAKES[name]).items()}
        self.changed = True
        if name in ("arange", "linspace"):
            return self.counted(node, name, given)
        for key in ("N", "M", "k", "n"):
            value = given.get(key)
            if value is not None and not _takes_as_integer(name, key, value):
                raise self.refuse(node, f"np.{name}'s {key} is an integer, not {value!r}")
        rows = int(given.get("N", given.get("n", 0)))
        columns = rows if given.get("M") is None else int(given["M"])
        dtype = np.dtype(given.get("dtype") or float)
        return Banded((rows, columns), dtype, int(given.get("k", 0)), ast.LtE if name == "tri" else ast.Eq)

    def filled(self, node: ast.Call, fn: Any, like: Expr | None) -> Expr:
        """``np.zeros(shape, dtype)``, ``np.full(shape, v)``, ``np.ones_like(x)`` ... inside an expression (as a
        statement of its own, it is a temporary the plan makes): each element the one number, of NumPy's dtype."""
        name = fn.__name__
        given = self.passed(node, fn, ("shape", "fill_value", "dtype") if like is None else ("fill_value", "dtype"))
        if "shape" not in given and like is None:
            raise self.refuse(node, f"np.{name} takes a shape")
        shape = self.numbers(given["shape"], f"np.{name}'s shape") if like is None else like.shape
        if not extents.is_static(shape) or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0
                                               for d in extents.numbers(shape)):
            raise self.refuse(node, f"np.{name}'s shape {shape} is not one of lengths the host knows")
        fill: Value | int = {"zeros": 0, "ones": 1, "empty": 0}.get(name.removesuffix("_like"), 0)
        if name.startswith("full"):
            if "fill_value" not in given:
                raise self.refuse(node, f"np.{name} takes a fill_value")
            fill = self.value(given["fill_value"])
            if not isinstance(fill, Scalar):
                raise self.refuse(node, f"np.{name}'s fill_value is a number here (np.broadcast_to for an array)")
        sample = fill.sample if isinstance(fill, Scalar) else fill
        dtype_given = self.known(given["dtype"], f"np.{name}'s dtype") if "dtype" in given else None
        dtype = np.dtype(dtype_given) if dtype_given is not None else like.dtype if like is not None else \
            np.full((), sample).dtype if name == "full" else np.dtype(float)
        self.changed = True
        return Filled(tuple(int(d) for d in extents.numbers(shape)), dtype, fill)

    def counted(self, node: ast.Call, name: str, given: dict[str, Any]) -> Expr:
        """``np.arange``: ``start + i * delta`` in its dtype, ``delta`` its second element less its first (as
        NumPy fills it); ``np.linspace`` as NumPy computes it (``i * step + start``, its last element ``stop``)."""
        if name == "linspace":
            return self.spaced(given)
        made = np.arange(given.pop("start_or_stop"), **given)
        if len(made) < 2:
            only = made[0].item() if len(made) else 0
            return Counted(made.shape, made.dtype, lambda i: typed(constant(only), made.dtype))
        first, second, dtype = made[0], made[1], made.dtype

        def element(i: ast.expr) -> ast.expr:
            value = ast.BinOp(typed(constant(first), dtype), ast.Add(),
                              ast.BinOp(typed(i, dtype), ast.Mult(), typed(constant(second - first), dtype)))
            return ast.IfExp(ast.Compare(i, [ast.Eq()], [constant(1)]), typed(constant(second), dtype), value)
        return Counted(made.shape, dtype, element)

    def spaced(self, given: dict[str, Any]) -> Expr:
        """``np.linspace``: ``i * step + start`` in the numbers' float dtype (``i / div * delta + start`` where
        the step is 0, ``i * delta + start`` where there is none), the last ``stop``, then ``dtype`` (an
        integer one floored first)."""
        made = np.linspace(**given)
        samples, step = np.linspace(**{**given, "dtype": None}, retstep=True)
        computed = samples.dtype
        count, endpoint = len(samples), given.get("endpoint", True)
        divisor = count - 1 if endpoint else count
        start, stop = computed.type(given["start"]), computed.type(given["stop"])
        delta = np.subtract(stop, start, dtype=computed)

        def element(i: ast.expr) -> ast.expr:
            value: ast.expr = typed(i, computed)
            if divisor > 0 and step != 0:
                value = ast.BinOp(value, ast.Mult(), typed(constant(step), computed))
            else:
                if divisor > 0:
                    value = ast.BinOp(value, ast.Div(), constant(divisor))
                value = ast.BinOp(value, ast.Mult(), typed(constant(delta), computed))
            value = ast.BinOp(value, ast.Add(), typed(constant(start), computed))
            if endpoint and count > 1:
                value = ast.IfExp(ast.Compare(i, [ast.Eq()], [constant(count - 1)]), typed(constant(stop), computed),
                                  value)
            if made.dtype.kind in "iu":
                value = call(numpy("floor"), value)
            return typed(value, made.dtype) if made.dtype != computed else value
        return Counted(made.shape, made.dtype, element)


class _Shaped:
    """An array as the host knows it before the run: its shape, dtype, size and dimensions, not its elements."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape, self.dtype = shape, dtype
        self.ndim, self.size = len(shape), int(np.prod(shape))

    def __len__(self) -> int:
        return self.shape[0]


def _last(size: Dim) -> Dim:
    """The index of an axis's last element, where it has one (a view of none starts at 0)."""
    return max(size - 1, 0) if isinstance(size, int) else extents.sub(size, 1)


def _strides(x: Expr) -> tuple[int, ...] | None:
    """The step in elements of ``x``'s memory along each of its axes, where ``x`` is an array or a view of one;
    None where its elements are computed."""
    if not extents.is_static(x.shape):
        return None
    if isinstance(x, Named):
        return tuple(int(np.prod(x.shape[k + 1:])) for k in range(len(x.shape)))  # type: ignore[arg-type]
    if not isinstance(x, (Viewed, Transposed, Reshaped)):
        return None
    base = _strides(x.base)
    if base is None:
        return None
    if isinstance(x, Viewed):
        return tuple(0 if axis is None else axis[2] * base[axis[0]] for axis in x.axes)
    if isinstance(x, Transposed):
        return tuple(base[a] for a in x.order)
    if not extents.is_static(x.base.shape):
        return None
    return _reshaped_strides(extents.numbers(x.base.shape), base, extents.numbers(x.shape))


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """``strides`` where they are C order's for ``shape`` (an axis of size 1 takes any), else None."""
    ordered = all(size == 1 or stride == int(np.prod(shape[k + 1:]))
                  for k, (size, stride) in enumerate(zip(shape, strides, strict=True)))
    return strides if ordered or 0 in shape else None


def _reshaped_strides(shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of ``new`` over the memory that ``shape`` and ``strides`` view, read in C order, where one
    view can read it so (NumPy's reshape without a copy); None where it takes a copy. The axes of each run
    whose sizes' products agree must step through memory as one C-ordered block."""
    if 0 in shape:
        return tuple(0 for _ in new)
    old = [(size, stride) for size, stride in zip(shape, strides, strict=True) if size != 1]
    kept = [k for k, size in enumerate(new) if size != 1]
    made = [0] * len(new)
    o = n = 0
    while o < len(old) and n < len(kept):
        o_end, n_end, o_size, n_size = o + 1, n + 1, old[o][0], new[kept[n]]
        while o_size != n_size:
            if o_size < n_size:
                o_size, o_end = o_size * old[o_end][0], o_end + 1
            else:
                n_size, n_end = n_size * new[kept[n_end]], n_end + 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(o, o_end - 1)):
            return None
        stride = old[o_end - 1][1]
        for k in reversed(range(n, n_end)):
            made[kept[k]], stride = stride, stride * new[kept[k]]
        o, n = o_end, n_end
    return tuple(made)


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _integer(lowering: ArrayShapes, node: ast.expr | None, what: str) -> int:
    if node is None:
        return 0
    value = lowering.known(node, what)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise lowering.refuse(node, f"{what} is an integer")
    return int(value)


def _expanded(x: Expr, positions: Sequence[int]) -> Viewed:
    """``x`` with new axes of size 1 at ``positions`` of the result."""
    base = iter(range(len(x.shape)))
    axes: list[tuple[int, int, int] | None] = []
    for k in range(len(x.shape) + len(positions)):
        axes.append(None if k in positions else (next(base), 0, 1))
    shape = tuple(1 if a is None else x.shape[a[0]] for a in axes)
    return Viewed(shape, x.dtype, x, tuple(axes), {})


_SHAPING: dict[str, Callable[[ArrayShapes, ast.Call, Expr, dict[str, Any]], Value]] = {
    "transpose": ArrayShapes.transposed, "swapaxes": ArrayShapes.swapped, "reshape": ArrayShapes.reshaped_to,
    "ravel": ArrayShapes.raveled, "flip": ArrayShapes.flipped,
    "fliplr": lambda self, node, x, given: self.flipped(node, x, given, (1,)),
    "flipud": lambda self, node, x, given: self.flipped(node, x, given, (0,)),
    "expand_dims": ArrayShapes.new_axes, "squeeze": ArrayShapes.squeezed, "broadcast_to": ArrayShapes.broadcast,
    "tril": lambda self, node, x, given: self.triangle(node, x, given, True),
    "triu": lambda self, node, x, given: self.triangle(node, x, given, False), "trace": ArrayShapes.traced,
    "diagonal": lambda self, node, x, given: self.diagonal(node, x, given, "diagonal"),
    "diag": lambda self, node, x, given: self.diagonal(node, x, given, "diag"),
    "moveaxis": ArrayShapes.moved, "ascontiguousarray": ArrayShapes.contiguous, "repeat": ArrayShapes.repeated,
    "tile": ArrayShapes.tiled,
}
"""The shaping functions of an array, by NumPy's name, each given the user's argument nodes by parameter."""
_TAKES: dict[str, tuple[str, ...]] = {
    "transpose": ("axes",), "swapaxes": ("axis1", "axis2"), "reshape": ("shape", "order"), "ravel": ("order",),
    "flip": ("axis",), "expand_dims": ("axis",), "squeeze": ("axis",), "broadcast_to": ("shape",), "tril": ("k",),
    "triu": ("k",), "trace": ("offset",), "diagonal": ("offset",), "diag": ("k",),
    "moveaxis": ("source", "destination"), "repeat": ("repeats", "axis"), "tile": ("reps",),
    "arange": ("start_or_stop", "stop", "step", "dtype"),
    "linspace": ("start", "stop", "num", "endpoint", "dtype"), "eye": ("N", "M", "k", "dtype"),
    "identity": ("n", "dtype"), "tri": ("N", "M", "k", "dtype"),
}
"""The parameters of each function svod takes (another given is refused, naming it)."""


def _takes_as_integer(name: str, key: str, value: Any) -> bool:
    """Whether NumPy takes ``value`` as ``np.<name>``'s integer ``key`` (``np.eye``, ``np.identity``, ``np.tri``).
    An integer, or a bool where NumPy reads it as one: Python's as a diagonal ``k`` and as any of ``np.tri``'s,
    NumPy's as ``np.tri``'s sizes alone (``np.eye(True)`` and ``np.eye(3, k=np.True_)`` are TypeErrors). A float
    is refused: NumPy refuses most, and ``np.tri`` compares its indices with one."""
    if isinstance(value, bool):
        return name == "tri" or key == "k"
    if isinstance(value, np.bool_):
        return name == "tri" and key in ("N", "M")
    return isinstance(value, (int, np.integer))


__all__ = ["JOINS", "MADE", "ArrayShapes", "Banded", "Broadcast", "read_only", "viewed_by"]
