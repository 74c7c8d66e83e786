"""The lazy array expressions of ``@svod.jit``'s array statements (``svod.frontend.arrays``): each a shape, a
dtype and the code of its element at given indices, which a reduction's loops come before (``Emitter``).

An expression's dtype is NumPy's (found by applying the same operation to one-element arrays of the operands'
dtypes, so promotion is NumPy 2's); nothing is computed into memory but what a statement stores: elementwise
operations, broadcasts, views and reductions of one statement fuse into one loop nest, a reduction
(``x.max(axis=1)``, a matmul's sum) being a loop of its own inside it.
"""

from __future__ import annotations

import ast
import itertools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# ---- lazy array expressions -------------------------------------------------------------------------------

class Emitter:
    """Where an element's code is written: the statements a reduction needs before it (``lines``, at the
    depth of the innermost loop), and fresh names."""

    def __init__(self, counter: itertools.count[int]) -> None:
        self.lines: list[str] = []
        self.counter = counter
        self.made: dict[tuple[int, tuple[str, ...]], str] = {}
        self.reducing: frozenset[str] = frozenset()
        """The loop variables of the reductions around the element being written."""
        self.fused: Fused | None = None
        """The fused array whose element is being written, if any (``Fused``)."""

    def fresh(self, stem: str) -> str:
        return f"_svod_{stem}{next(self.counter)}"

    def inner(self, loops: Sequence[str]) -> Emitter:
        """The emitter of the body of a reduction over ``loops``."""
        inner = Emitter(self.counter)
        inner.made, inner.fused, inner.reducing = self.made, self.fused, self.reducing | frozenset(loops)
        return inner

    def check_fused(self, index: Sequence[str]) -> None:
        """A reduction of a fused array read inside a reduction that its element depends on would run again at
        every turn of that one (a matmul of a matmul): the fused array is made after all (``RepeatedWorkError``)."""
        if self.fused is not None and any(re.search(rf"\b{v}\b", " ".join(index)) for v in self.reducing):
            raise RepeatedWorkError(self.fused)


class RepeatedWorkError(Exception):
    """Raised where a fused array is read in a way that would repeat its work; ``Lowering`` then makes it."""

    def __init__(self, fused: Fused) -> None:
        super().__init__(fused.name)
        self.fused = fused


@dataclass(eq=False)
class Expr(ABC):
    """An array-valued expression: its shape and dtype, and the code of its element at indices."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def sample(self) -> Any:
        return np.ones(1, self.dtype)

    @abstractmethod
    def element(self, index: Sequence[str], out: Emitter) -> str:
        """The code of the element at ``index`` (one index expression per axis); a reduction's loops go to
        ``out.lines`` first."""


@dataclass(eq=False)
class Scalar:
    """A scalar among array expressions: its code and a value of its kind (a Python number stays weak, as in
    NumPy 2)."""

    code: str
    sample: Any


Value = Expr | Scalar


@dataclass(eq=False)
class Named(Expr):
    name: str = ""

    def element(self, index: Sequence[str], out: Emitter) -> str:
        return f"{self.name}[{', '.join(index)}]"


@dataclass(eq=False)
class Viewed(Expr):
    """A view of ``base``: each of its axes a base axis at ``start + step * i`` or a new axis of size 1; the
    base axes an integer index took stand at that index."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    axes: tuple[tuple[int, int, int] | None, ...] = ()
    fixed: dict[int, str] = field(default_factory=dict)

    def element(self, index: Sequence[str], out: Emitter) -> str:
        at = dict(self.fixed)
        for i, axis in zip(index, self.axes, strict=True):
            if axis is not None:
                base_axis, start, step = axis
                at[base_axis] = _affine(start, step, i)
        return self.base.element([at[k] for k in range(len(self.base.shape))], out)


@dataclass(eq=False)
class Transposed(Expr):
    base: Expr = field(default=None)  # type: ignore[assignment]
    order: tuple[int, ...] = ()

    def element(self, index: Sequence[str], out: Emitter) -> str:
        at = [""] * len(index)
        for position, axis in enumerate(self.order):
            at[axis] = index[position]
        return self.base.element(at, out)


@dataclass(eq=False)
class Elementwise(Expr):
    """``combine`` of the operands' elements, each broadcast to this shape."""

    combine: Callable[[list[str]], str] = field(default=None)  # type: ignore[assignment]
    operands: tuple[Value, ...] = ()

    def element(self, index: Sequence[str], out: Emitter) -> str:
        return self.combine([broadcast_element(v, self.shape, index, out) for v in self.operands])


@dataclass(eq=False)
class Reduced(Expr):
    """``op`` over ``axes`` of ``operand``: a loop over them at the element, into an accumulator."""

    op: str = "sum"
    operand: Expr = field(default=None)  # type: ignore[assignment]
    axes: tuple[int, ...] = ()
    keepdims: bool = False

    def element(self, index: Sequence[str], out: Emitter) -> str:
        key = (id(self), tuple(index))
        if key in out.made:
            return out.made[key]
        kept = iter(index)
        loops = {axis: out.fresh("k") for axis in self.axes}
        at = []
        for axis in range(len(self.operand.shape)):
            if axis in loops:
                at.append(loops[axis])
                if self.keepdims:
                    next(kept)
            else:
                at.append(next(kept))
        count = int(np.prod([self.operand.shape[a] for a in self.axes]))
        out.made[key] = result = out.fresh("r")
        out.check_fused(index)
        body: list[str] = []
        value = out.fresh("v")
        inner = out.inner(list(loops.values()))
        element = self.operand.element(at, inner)
        body += inner.lines
        body.append(f"{value} = {element}")
        out.lines += _accumulate(self.op, result, value, self.dtype, self.operand.dtype, count,
                                 [(loops[a], self.operand.shape[a]) for a in self.axes], body)
        return result


@dataclass(eq=False)
class Product(Expr):
    """``a @ b`` (or ``np.outer``): a sum over the shared axis of products, or the products alone."""

    a: Expr = field(default=None)  # type: ignore[assignment]
    b: Expr = field(default=None)  # type: ignore[assignment]
    outer: bool = False

    def element(self, index: Sequence[str], out: Emitter) -> str:
        if self.outer:
            return f"({self.a.element([index[0]], out)} * {self.b.element([index[1]], out)})"
        key = (id(self), tuple(index))
        if key in out.made:
            return out.made[key]
        k = out.fresh("k")
        batch = list(index[:1]) if len(self.shape) == 3 else []
        a_at = [k] if len(self.a.shape) == 1 else [*batch[:len(self.a.shape) - 2], index[-2 if len(self.b.shape) > 1
                                                                                          else -1], k]
        b_at = [k] if len(self.b.shape) == 1 else [*batch[:len(self.b.shape) - 2], k, index[-1]]
        out.check_fused(index)
        inner = out.inner([k])
        term = f"({self.a.element(a_at, inner)} * {self.b.element(b_at, inner)})"
        out.made[key] = result = out.fresh("r")
        out.lines += _accumulate("sum", result, None, self.dtype, self.dtype, self.a.shape[-1],
                                 [(k, self.a.shape[-1])], [*inner.lines], term)
        return result


@dataclass(eq=False)
class Counted(Expr):
    """A 1-D array made from its index alone (``np.arange``, ``np.linspace``)."""

    make: Callable[[str], str] = field(default=None)  # type: ignore[assignment]

    def element(self, index: Sequence[str], out: Emitter) -> str:
        return self.make(index[0])


@dataclass(eq=False)
class Reshaped(Expr):
    """``base`` read in C order as this shape (``reshape``, ``ravel``)."""

    base: Expr = field(default=None)  # type: ignore[assignment]

    def element(self, index: Sequence[str], out: Emitter) -> str:
        flat = "0"
        for i, size in zip(index, self.shape, strict=True):
            flat = i if flat == "0" else f"(({flat}) * {size} + {i})"
        at = []
        stride = int(np.prod(self.base.shape))
        for size in self.base.shape:
            stride //= max(size, 1)
            at.append(f"(({flat}) // {stride}) % {size}" if stride > 1 else f"({flat}) % {size}")
        return self.base.element(at, out)


@dataclass(eq=False)
class Fused(Expr):
    """An array read only by the next statement (``Lowering.fused_into_next``): its expression, computed
    where that statement reads it; made after all where that would repeat a reduction's work."""

    name: str = ""
    value: Expr = field(default=None)  # type: ignore[assignment]
    statement: ast.stmt = field(default=None)  # type: ignore[assignment]
    made: Named | None = None
    """The array it is, once made after all."""

    def element(self, index: Sequence[str], out: Emitter) -> str:
        if self.made is not None:
            return self.made.element(index, out)
        outer, out.fused = out.fused, self
        try:
            return self.value.element(index, out)
        finally:
            out.fused = outer


def _affine(start: int, step: int, i: str) -> str:
    scaled = i if step == 1 else f"{step} * {i}"
    return scaled if start == 0 else f"{start} + {scaled}"


def broadcast_element(value: Value, shape: tuple[int, ...], index: Sequence[str], out: Emitter) -> str:
    if isinstance(value, Scalar):
        return value.code
    offset = len(shape) - len(value.shape)
    at = [index[offset + k] if size != 1 or shape[offset + k] == 1 else "0" for k, size in enumerate(value.shape)]
    return value.element(at, out)


def _nested(loops: list[tuple[str, int]], body: list[str]) -> list[str]:
    """``body`` inside ``for`` loops over ``loops``, outermost first."""
    lines = [f"{'    ' * depth}for {name} in range({size}):" for depth, (name, size) in enumerate(loops)]
    return [*lines, *(f"{'    ' * len(loops)}{line}" for line in body)]


def _arg_extreme(op: str, result: str, item: str, operand: np.dtype, loops: list[tuple[str, int]],
                 body: list[str]) -> list[str]:
    """NumPy's argmax (argmin): the flat position of the first greatest (least) element, or of the first NaN."""
    best = f"{result}_best"
    worst = ("-_svod_np.inf" if op == "argmax" else "_svod_np.inf") if operand.kind == "f" else \
        str(np.iinfo(operand).min if op == "argmax" else np.iinfo(operand).max) if operand.kind in "iu" else \
        ("False" if op == "argmax" else "True")
    flat = "0"
    for name, size in loops:
        flat = name if flat == "0" else f"({flat}) * {size} + {name}"
    better = f"{item} > {best}" if op == "argmax" else f"{item} < {best}"
    if operand.kind == "f":
        better = f"{better} or ({item} != {item} and {best} == {best})"
    first = f"{result} == -1"
    return [f"{best} = {typed(worst, operand)}", f"{result} = -1",
            *_nested(loops, [*body, f"if {first} or {better}:", f"    {best} = {item}", f"    {result} = {flat}"])]


def typed(value: str, dtype: np.dtype) -> str:
    return f"_svod_np.{dtype.name}({value})"


def _accumulate(op: str, result: str, value: str | None, dtype: np.dtype, operand: np.dtype, count: int,
                loops: list[tuple[str, int]], body: list[str], term: str | None = None) -> list[str]:
    """The statements that reduce ``value`` (computed by ``body``, or ``term``) over ``loops`` into
    ``result``, as NumPy's reduction: a float max or min is NaN where any element is (a count of NaNs beside
    it), a mean divides the sum."""
    item = term if term is not None else value
    assert item is not None
    if op in ("argmax", "argmin"):
        return _arg_extreme(op, result, item, operand, loops, body)
    if op in ("any", "all"):  # a count of the elements that decide it
        test = f"{item} != 0" if op == "any" else f"{item} == 0"
        lines = [f"{result}_n = 0", *_nested(loops, [*body, f"{result}_n += {test}"]),
                 f"{result} = {result}_n {'>' if op == 'any' else '=='} 0"]
        return lines
    nan_aware = op in ("max", "min", "amax", "amin") and dtype.kind == "f"
    kind = "max" if op in ("max", "amax") else "min" if op in ("min", "amin") else op
    if kind in ("sum", "mean"):
        lines = [f"{result} = {typed('0', dtype)}"]
        update = f"{result} += {item}"
    elif kind == "prod":
        lines = [f"{result} = {typed('1', dtype)}"]
        update = f"{result} *= {item}"
    else:
        lowest = "-_svod_np.inf" if dtype.kind == "f" else str(np.iinfo(dtype).min)
        highest = "_svod_np.inf" if dtype.kind == "f" else str(np.iinfo(dtype).max)
        lines = [f"{result} = {typed(lowest if kind == 'max' else highest, dtype)}"]
        update = f"{result} = {kind}({result}, {item})"
    if nan_aware:
        lines.append(f"{result}_nan = 0")
    depth = 0
    for name, size in loops:
        lines.append(f"{'    ' * depth}for {name} in range({size}):")
        depth += 1
    lines += [f"{'    ' * depth}{line}" for line in body]
    lines.append(f"{'    ' * depth}{update}")
    if nan_aware:
        lines.append(f"{'    ' * depth}{result}_nan += {item} != {item}")
        lines.append(f"{result} = {result} if {result}_nan == 0 else {typed('_svod_np.nan', dtype)}")
    if kind == "mean":
        lines.append(f"{result} = {typed(f'{result} / {count}', dtype)}")
    return lines


def computes(x: Expr) -> bool:
    """Whether reading an element of ``x`` computes something: not an array's element, a view's, an index's."""
    if isinstance(x, (Viewed, Transposed, Reshaped)):
        return computes(x.base)
    if isinstance(x, Fused):
        return x.made is None
    return not isinstance(x, (Named, Counted))


@dataclass(eq=False)
class Whole(Expr):
    """A reduction to one value: an expression whose shape is ``()``."""

    def __init__(self, inner: Expr) -> None:
        super().__init__((), inner.dtype)
        self.inner = inner

    def element(self, index: Sequence[str], out: Emitter) -> str:
        return self.inner.element(index, out)


def base_name(stored: Expr) -> str | None:
    while isinstance(stored, (Viewed, Transposed)):
        stored = stored.base
    return stored.name if isinstance(stored, Named) else None


def reads_apart(value: Expr, stored: Expr, base: str) -> bool:
    """Whether ``value`` may read ``base`` at another element than the one ``stored`` names at each index
    (then it is computed into a temporary first, as NumPy's meaning is)."""
    index = [f"_svod_p{k}" for k in range(len(stored.shape))]
    out = Emitter(itertools.count())
    target = stored.element(index, out)
    code = broadcast_element(value, stored.shape, index, out) + "\n" + "\n".join(out.lines)
    reads = [ast.unparse(n) for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Subscript)
             and isinstance(n.value, ast.Name) and n.value.id == base]
    return any(read != ast.unparse(ast.parse(target).body[0].value) for read in reads)  # type: ignore[attr-defined]
