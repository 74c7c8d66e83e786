"""The lazy array expressions of ``@svod.jit``'s array statements (``svod.frontend.arrays``): each a shape, a
dtype and its element at given indices as an ``ast`` expression, which a reduction's loops come before
(``Emitter``).

An expression's dtype is NumPy's (found by applying the same operation to one-element arrays of the operands'
dtypes, so promotion is NumPy 2's); nothing is computed into memory but what a statement stores: elementwise
operations, broadcasts, views and reductions of one statement fuse into one loop nest, a reduction
(``x.max(axis=1)``, a matmul's sum) being a loop of its own inside it, except one that loop would run again
at each turn of an outer loop it does not depend on (a column's mean under a row's loop), which is made into an
array of its own first (``Emitter.separated``).
"""

from __future__ import annotations

import ast
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.frontend import pylang
from svod.frontend.array_loops import guarded
from svod.frontend.extents import Dim, elements, node_of, numbers
from svod.frontend.nodes import assign, call, constant, copied, for_loop, load, store, subscript, walk

# ---- lazy array expressions -------------------------------------------------------------------------------

class Emitter:
    """Where an element's code is written: the statements a reduction needs before it (``statements``, at the
    depth of the innermost loop), and fresh names."""

    def __init__(self, counter: itertools.count[int]) -> None:
        self.statements: list[ast.stmt] = []
        self.counter = counter
        self.made: dict[tuple[int, tuple[str, ...]], str] = {}
        """The accumulator of each reduction at each index (by the index's ``ast.dump``) written so far."""
        self.reducing: frozenset[str] = frozenset()
        """The loop variables of the reductions around the element being written."""
        self.fused: Fused | None = None
        """The fused array whose element is being written, if any (``Fused``)."""
        self.stores: tuple[tuple[str, Dim], ...] = ()
        """The loops of the nest that stores the element, outermost first: each variable and its length."""
        self.separate: Callable[[Expr], Expr] | None = None
        """Makes a reduction into an array of its own first, and gives that array (``separated``)."""
        self.everywhere = False
        """On a tape: a reduction is made first wherever it is read at more elements than it depends on."""
        self.separations: dict[int, Expr] = {}
        """The array each reduction was made into (by ``id``), so that one read twice is made once."""

    def fresh(self, stem: str) -> str:
        return f"_svod_{stem}{next(self.counter)}"

    def inner(self, loops: Sequence[str]) -> Emitter:
        """The emitter of the body of a reduction over ``loops``."""
        inner = Emitter(self.counter)
        inner.made, inner.fused, inner.reducing = self.made, self.fused, self.reducing | frozenset(loops)
        inner.stores, inner.separate, inner.everywhere = self.stores, self.separate, self.everywhere
        inner.separations = self.separations
        return inner

    def separated(self, x: Expr, index: Sequence[ast.expr], terms: Dim) -> Expr | None:
        """The array reduction ``x`` (of ``terms`` terms each) is made into first where its element at ``index``
        would be computed again at each turn of a loop it does not depend on (``recomputed``); else None.

        The lowering computes a reduction once per turn of the loops around it that it depends on, and hoists
        it out of the loops inside those that it does not: a row's sum read at each element of the row runs
        once per row. A column's sum read at each element of a row-major nest (``x - x.mean(axis=0)``) has
        the row's loop outside the column's, and would run once per element, N times its work; made first it
        runs once, unless it is a few terms, fewer than a kernel of its own costs. On a tape (``everywhere``)
        it is made first wherever it is read at more elements than it depends on: the adjoint of a kernel
        differentiates each element's code as written, and would redo the reduction's backward pass at each
        element (quadratic in the row's length)."""
        if self.separate is None or not x.shape:
            return None
        if id(x) in self.separations:
            return self.separations[id(x)]
        names = {n.id for i in index for n in walk(i) if isinstance(n, ast.Name)}
        if self.everywhere:
            repeated = not {v for v, _ in self.stores} | self.reducing <= names
        else:
            repeated = recomputed(self.stores, names) and not (isinstance(terms, int) and terms <= CHEAP_TERMS)
        if not repeated:
            return None
        made = self.separations[id(x)] = self.separate(x)
        return made

    def check_fused(self, index: Sequence[ast.expr]) -> None:
        """A reduction of a fused array read inside a reduction that its element depends on would run again at
        every turn of that one (a matmul of a matmul): the fused array is made after all (``RepeatedWorkError``)."""
        if self.fused is not None and any(isinstance(n, ast.Name) and n.id in self.reducing
                                          for i in index for n in walk(i)):
            raise RepeatedWorkError(self.fused)

    def check_product(self, product: Expr, at: tuple[str, ...]) -> None:
        """A product of a fused array read at one element and then at another (its logits in a row's max and in
        the row's shifted values) would be computed in each: the fused array is made after all, once
        (``RepeatedWorkError``), and each reads it there. A product is never fused into two readers."""
        if self.fused is not None and self.fused.products.setdefault(product, at) != at:
            raise RepeatedWorkError(self.fused)


CHEAP_TERMS = 8
"""The most terms of a reduction that is computed again where it is read rather than made first
(``Emitter.separated``): a few adds at each element cost less than a kernel and an array of its own."""


def recomputed(stores: Sequence[tuple[str, Dim]], names: set[str]) -> bool:
    """Whether a value whose index reads ``names`` would be computed again at each turn of a loop of
    ``stores`` (outermost first) of more than one turn: one it does not depend on, outside one it does."""
    deepest = max((k + 1 for k, (v, _) in enumerate(stores) if v in names), default=0)
    return any(v not in names and not is_one(length) for v, length in stores[:deepest])


class RepeatedWorkError(Exception):
    """Raised where a fused array is read in a way that would repeat its work; ``ArrayRewriter`` then makes it."""

    def __init__(self, fused: Fused) -> None:
        super().__init__(fused.name)
        self.fused = fused


@dataclass(eq=False)
class Expr(ABC):
    """An array-valued expression: its shape (each length an int, or an extent the host does not know before
    the run: ``svod.frontend.extents``) and dtype, and the code of its element at indices."""

    shape: tuple[Dim, ...]
    dtype: np.dtype

    @property
    def sample(self) -> Any:
        return np.ones(1, self.dtype)

    @abstractmethod
    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        """The element at ``index`` (one index expression per axis); a reduction's loops go to
        ``out.statements`` first."""


SAMPLED: ContextVar[set[str] | None] = ContextVar("svod_sampled", default=None)
"""Where a rewriting records the names whose values it decided something by (``Scalar.sample``), while one does
(``svod.frontend.arrays.lower_arrays``)."""


@dataclass(eq=False)
class Scalar:
    """A scalar among array expressions: its expression (the user's, or svod's for a value it knows) and a
    value of its kind, ``held`` (a Python number stays weak, as in NumPy 2), computed from the call's values.
    A decision read from it (a dtype NumPy promotes to, a refusal, a length) reads ``sample``, which records the
    names its expression reads (``SAMPLED``): a variant decided by an argument's value is read again for another
    value. A scalar's value computed from others' reads their ``held``: it decides nothing itself. Only an
    integer's value decides (NumPy refuses an int past a dtype's range, a length is one); a float or complex one
    decides by its type alone, which keys a variant anyway, so its names are not recorded and a new float runs
    the plan made for the last (``a_f32 * (n * 0.5)``, ``x ** p``)."""

    node: ast.expr
    held: Any
    alternatives: tuple[Any, ...] = ()
    """Where the paths to it give the scalar values of other types than ``held``'s (``s = 0.0`` before a loop,
    ``s += x[i]`` in it: a Python float, then a NumPy float64), a zero of each other type. A decision must come out
    the same for each (``samples``); ``sample`` refuses to decide by one of them (``AmbiguousScalarError``)."""
    run_only: bool = False
    """Whether only the run knows its value (``held`` and ``alternatives`` are zeros of its types)."""

    def spells_otherwise(self, node: ast.expr) -> bool:
        """Whether ``node``, an expression read as this scalar, is a Python int svod knows that it reads of the
        shape of an array expression (``(a * 2).shape[0]``), which a statement is then better written as the
        number: no kernel must compute the array whose shape it reads."""
        return type(self.held) is int and isinstance(self.node, ast.Constant) and any(
            isinstance(n, ast.Attribute) and n.attr in SIZE_ATTRIBUTES and not isinstance(n.value, ast.Name)
            for n in walk(node))

    @property
    def sample(self) -> Any:
        if self.alternatives:
            raise AmbiguousScalarError(self)
        return self.samples[0]

    @property
    def samples(self) -> tuple[Any, ...]:
        """``held`` and ``alternatives``: a value of each type the scalar may have, its names recorded as
        ``sample``'s are."""
        recorded = SAMPLED.get()
        if recorded is not None and isinstance(self.held, (int, np.integer, np.bool_)):
            recorded.update(n.id for n in walk(self.node) if isinstance(n, ast.Name))
        return (self.held, *self.alternatives)


def types_once(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values``, the first of each type only (``Scalar.alternatives``)."""
    seen: dict[type, Any] = {}
    for value in values:
        seen.setdefault(type(value), value)
    return tuple(seen.values())


SIZE_ATTRIBUTES = ("shape", "size", "ndim")
"""The attributes of an array that are numbers of its shape, which the host knows."""


class AmbiguousScalarError(Exception):
    """Raised where a decision reads one type of a scalar the paths to which give it several
    (``Scalar.alternatives``); the statement being rewritten is then refused at its line."""

    def __init__(self, scalar: Scalar) -> None:
        super().__init__(ast.unparse(scalar.node))
        self.scalar = scalar


def ambiguous_type(scalar: Scalar) -> str:
    """Why svod refuses a decision by ``scalar``'s type (``AmbiguousScalarError``)."""
    return (f"`{ast.unparse(scalar.node)}` is {ambiguous_types(scalar)} on different paths to here, and what this "
            f"statement computes depends on which; give it one type on every path")


def ambiguous_types(scalar: Scalar) -> str:
    names = [type_name(sample) for sample in (scalar.held, *scalar.alternatives)]
    return ", ".join(names[:-1]) + " or " + names[-1]


def type_name(sample: Any) -> str:
    """How a refusal names ``sample``'s type: a Python number's, or a NumPy scalar's."""
    kind = type(sample)
    return f"a Python {kind.__name__}" if kind in (bool, int, float, complex) else f"a NumPy {kind.__name__}"


Value = Expr | Scalar


@dataclass(eq=False)
class Named(Expr):
    name: str = ""

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        return subscript(self.name, index)


@dataclass(eq=False)
class Filled(Expr):
    """``np.zeros(shape)``, ``np.full_like(x, v)`` and the like inside an expression: each element ``fill``, as the
    dtype (``np.empty``'s, whose elements NumPy leaves unset, 0); an integer among a gather's index arrays, as
    a 0-d one (``a[idx, 1]``)."""

    fill: Value | int = 0

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        given = copied(self.fill.node) if isinstance(self.fill, Scalar) else constant(self.fill)
        return typed(given, self.dtype)


@dataclass(eq=False)
class Viewed(Expr):
    """A view of ``base``: each of its axes a base axis at ``start + step * i`` (``start`` an int or an extent)
    or a new axis of size 1; the base axes an integer index took stand at that index."""

    base: Expr = field(default=None)  # type: ignore[assignment]
    axes: tuple[tuple[int, Dim, int] | None, ...] = ()
    fixed: dict[int, ast.expr] = field(default_factory=dict)

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        at = {axis: copied(fixed) for axis, fixed in self.fixed.items()}  # each statement its own nodes
        for i, axis in zip(index, self.axes, strict=True):
            if axis is not None:
                base_axis, start, step = axis
                at[base_axis] = _affine(start, step, i)
        return self.base.element([at[k] for k in range(len(self.base.shape))], out)


@dataclass(eq=False)
class Transposed(Expr):
    base: Expr = field(default=None)  # type: ignore[assignment]
    order: tuple[int, ...] = ()

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        at: list[ast.expr] = list(index)
        for position, axis in enumerate(self.order):
            at[axis] = index[position]
        return self.base.element(at, out)


@dataclass(eq=False)
class Elementwise(Expr):
    """``combine`` of the operands' elements, each broadcast to this shape."""

    combine: Callable[[list[ast.expr]], ast.expr] = field(default=None)  # type: ignore[assignment]
    operands: tuple[Value, ...] = ()

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        return self.combine([broadcast_element(v, self.shape, index, out) for v in self.operands])


@dataclass(eq=False)
class Reduced(Expr):
    """``op`` over ``axes`` of ``operand``: a loop over them at the element, into an accumulator."""

    op: str = "sum"
    operand: Expr = field(default=None)  # type: ignore[assignment]
    axes: tuple[int, ...] = ()
    keepdims: bool = False

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        key = (id(self), tuple(ast.dump(i) for i in index))
        if key in out.made:
            return load(out.made[key])
        count = elements([self.operand.shape[a] for a in self.axes])
        made = out.separated(self, index, count)
        if made is not None:
            return made.element(index, out)
        kept = iter(index)
        loops = {axis: out.fresh("k") for axis in self.axes}
        at: list[ast.expr] = []
        for axis in range(len(self.operand.shape)):
            if axis in loops:
                at.append(load(loops[axis]))
                if self.keepdims:
                    next(kept)
            else:
                at.append(next(kept))
        out.made[key] = result = out.fresh("r")
        out.check_fused(index)
        value = out.fresh("v")
        inner = out.inner(list(loops.values()))
        element = self.operand.element(at, inner)
        body = [*inner.statements, assign(value, element)]
        out.statements += _accumulate(self.op, result, load(value), self.dtype, self.operand.dtype, count,
                                      [(loops[a], self.operand.shape[a]) for a in self.axes], body)
        return load(result)


@dataclass(eq=False)
class Product(Expr):
    """``a @ b`` (or ``np.outer``): a sum over the shared axis of products, or the products alone."""

    a: Expr = field(default=None)  # type: ignore[assignment]
    b: Expr = field(default=None)  # type: ignore[assignment]
    outer: bool = False

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        if self.outer:
            return ast.BinOp(self.a.element([index[0]], out), ast.Mult(), self.b.element([index[1]], out))
        key = (id(self), tuple(ast.dump(i) for i in index))
        if key in out.made:
            return load(out.made[key])
        out.check_product(self, key[1])
        made = out.separated(self, index, self.a.shape[-1])
        if made is not None:
            return made.element(index, out)
        k = out.fresh("k")
        batch = list(index[:1]) if len(self.shape) == 3 else []
        a_at = [load(k)] if len(self.a.shape) == 1 else \
            [*batch[:len(self.a.shape) - 2], index[-2 if len(self.b.shape) > 1 else -1], load(k)]
        b_at = [load(k)] if len(self.b.shape) == 1 else [*batch[:len(self.b.shape) - 2], load(k), index[-1]]
        out.check_fused(index)
        inner = out.inner([k])
        term = ast.BinOp(self.a.element(a_at, inner), ast.Mult(), self.b.element(b_at, inner))
        out.made[key] = result = out.fresh("r")
        out.statements += _accumulate("sum", result, term, self.dtype, self.dtype, self.a.shape[-1],
                                      [(k, self.a.shape[-1])], [*inner.statements])
        return load(result)


@dataclass(eq=False)
class Counted(Expr):
    """A 1-D array made from its index alone (``np.arange``, ``np.linspace``)."""

    make: Callable[[ast.expr], ast.expr] = field(default=None)  # type: ignore[assignment]

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        return self.make(index[0])


@dataclass(eq=False)
class Reshaped(Expr):
    """``base`` read in C order as this shape (``reshape``, ``ravel``)."""

    base: Expr = field(default=None)  # type: ignore[assignment]

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        """The base's element at ``index`` read in C order, run by run (``reshape_runs``): an axis that keeps
        its size reads the base's axis directly, and only axes merged or split are flattened and divided."""
        shape, base = numbers(self.shape), numbers(self.base.shape)
        at: list[ast.expr] = [constant(0)] * len(base)
        for new, old in reshape_runs(shape, base):
            flat: ast.expr = constant(0)
            for k in new:
                flat = index[k] if _is_zero(flat) else \
                    ast.BinOp(ast.BinOp(flat, ast.Mult(), constant(shape[k])), ast.Add(), index[k])
            stride = int(np.prod([base[k] for k in old]))
            for position, k in enumerate(old):
                stride //= max(base[k], 1)
                quotient = ast.BinOp(flat, ast.FloorDiv(), constant(stride)) if stride > 1 else flat
                at[k] = quotient if position == 0 else ast.BinOp(quotient, ast.Mod(), constant(base[k]))
        return self.base.element(at, out)


def reshape_runs(shape: Sequence[int], base: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """The axes of ``shape`` and of ``base`` (a reshape's result and its operand) in runs whose sizes multiply
    to the same number, each run's axes in order: an index of the run's result axes, flattened in C order, is
    the flattened index of its base axes. Axes of size 1 are in no run (their index is 0); where a size is 0
    (no element), every axis is in one run."""
    if 0 in shape or 0 in base:
        return [(list(range(len(shape))), list(range(len(base))))]
    new = [k for k, size in enumerate(shape) if size != 1]
    old = [k for k, size in enumerate(base) if size != 1]
    runs: list[tuple[list[int], list[int]]] = []
    n = o = 0
    while n < len(new):  # the sizes' products agree, so both lists end together
        n_end, o_end, n_size, o_size = n + 1, o + 1, shape[new[n]], base[old[o]]
        while n_size != o_size:
            if n_size < o_size:
                n_size, n_end = n_size * shape[new[n_end]], n_end + 1
            else:
                o_size, o_end = o_size * base[old[o_end]], o_end + 1
        runs.append((new[n:n_end], old[o:o_end]))
        n, o = n_end, o_end
    return runs


@dataclass(eq=False)
class Fused(Expr):
    """An array read only by the next statement (``ArrayRewriter.fused_into_next``): its expression, computed
    where that statement reads it; made after all where that would repeat a reduction's work."""

    name: str = ""
    value: Expr = field(default=None)  # type: ignore[assignment]
    statement: ast.stmt = field(default=None)  # type: ignore[assignment]
    made: Expr | None = None
    """The array it is, once made after all (or a view of it at its length: ``ArrayRewriter.made``)."""
    products: dict[Expr, tuple[str, ...]] = field(default_factory=dict)
    """The element at which each product of its value was read, in the statement being rewritten
    (``Emitter.check_product``)."""

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        if self.made is not None:
            return self.made.element(index, out)
        outer, out.fused = out.fused, self
        try:
            return self.value.element(index, out)
        finally:
            out.fused = outer


def unread(arrays: dict[str, Expr]) -> dict[str, Expr]:
    """A copy of ``arrays``, each fused array's products forgotten (``Emitter.check_product``): a statement's
    attempt to be rewritten reads them anew."""
    for array in arrays.values():
        if isinstance(array, Fused):
            array.products.clear()
    return dict(arrays)


@dataclass(eq=False)
class Whole(Expr):
    """A reduction to one value: an expression whose shape is ``()``."""

    def __init__(self, inner: Expr) -> None:
        super().__init__((), inner.dtype)
        self.inner = inner

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        return self.inner.element(index, out)


# ---- the code of elements and reductions ------------------------------------------------------------------

def numpy(attr: str) -> ast.Attribute:
    """``_svod_np.<attr>``: NumPy's, under the name svod gives it in a function it rewrites."""
    return ast.Attribute(load("_svod_np"), attr, ast.Load())


def typed(value: ast.expr, dtype: np.dtype) -> ast.expr:
    """``value`` as a NumPy scalar of ``dtype``."""
    return call(numpy(dtype.name), value)


def _affine(start: Dim, step: int, i: ast.expr) -> ast.expr:
    scaled = i if step == 1 else ast.BinOp(constant(step), ast.Mult(), i)
    return scaled if isinstance(start, int) and start == 0 else ast.BinOp(node_of(start), ast.Add(), scaled)


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 0


def is_one(length: Dim) -> bool:
    """Whether an axis has one element, as the host knows before the run (it broadcasts)."""
    return isinstance(length, int) and length == 1


def broadcast_element(value: Value, shape: tuple[Dim, ...], index: Sequence[ast.expr], out: Emitter) -> ast.expr:
    if isinstance(value, Scalar):
        return copied(value.node)  # each statement its own nodes, placed at its line
    offset = len(shape) - len(value.shape)
    at = [index[offset + k] if not is_one(length) or is_one(shape[offset + k]) else constant(0)
          for k, length in enumerate(value.shape)]
    return value.element(at, out)


def _nested(loops: list[tuple[str, Dim]], body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` inside ``for`` loops over ``loops`` (sequential ones), outermost first."""
    for name, length in reversed(loops):
        bound, inside = guarded(name, length, body)  # (a length the run carries: under an if)
        body = [for_loop(name, call("range", bound), inside)]
    return body


def _flat(loops: list[tuple[str, Dim]]) -> ast.expr:
    """The position in C order that the variables of ``loops`` name together."""
    flat: ast.expr = constant(0)
    for name, length in loops:
        flat = load(name) if _is_zero(flat) else ast.BinOp(ast.BinOp(flat, ast.Mult(), node_of(length)), ast.Add(),
                                                            load(name))
    return flat


def _arg_extreme(op: str, result: str, item: ast.expr, operand: np.dtype, loops: list[tuple[str, Dim]],
                 body: list[ast.stmt]) -> list[ast.stmt]:
    """NumPy's argmax (argmin): the flat position of the first greatest (least) element, or of the first NaN."""
    best = f"{result}_best"
    worst: ast.expr
    if operand.kind == "f":
        worst = ast.UnaryOp(ast.USub(), numpy("inf")) if op == "argmax" else numpy("inf")
    elif operand.kind in "iu":
        worst = constant(int(np.iinfo(operand).min if op == "argmax" else np.iinfo(operand).max))
    else:
        worst = constant(op != "argmax")
    tests: list[ast.expr] = [ast.Compare(load(result), [ast.Eq()], [constant(-1)]),
                             ast.Compare(item, [ast.Gt() if op == "argmax" else ast.Lt()], [load(best)])]
    if operand.kind == "f":  # or the first NaN
        tests.append(ast.BoolOp(ast.And(), [ast.Compare(item, [ast.NotEq()], [item]),
                                            ast.Compare(load(best), [ast.Eq()], [load(best)])]))
    update = ast.If(ast.BoolOp(ast.Or(), tests), [assign(best, item), assign(result, _flat(loops))], [])
    return [assign(best, typed(worst, operand)), assign(result, constant(-1)), *_nested(loops, [*body, update])]


KEYED: dict[np.dtype[Any], np.dtype[Any]] = {np.dtype(np.float32): np.dtype(np.int32),
                                              np.dtype(np.float64): np.dtype(np.int64)}
"""The floats whose max and min reduce order keys (``pylang.max_key``), and the integer of each key."""
KEY_NAMES = {"_svod_max_key": pylang.max_key, "_svod_min_key": pylang.min_key, "_svod_from_key": pylang.from_key}
"""The names the loops written here call the order keys by."""


def _keyed_extreme(kind: str, result: str, item: ast.expr, bits: np.dtype, loops: list[tuple[str, Dim]],
                   body: list[ast.stmt]) -> list[ast.stmt]:
    """NumPy's max (``kind``) or min of floats as the integer maximum (minimum) of their order keys, a NaN's
    beyond every number's: one reduction that a NaN wins, which a CPU splits into partials as the kernel
    spelling's maximum, where a count of NaNs beside a float maximum took a second."""
    key, limits = f"{result}_key", np.iinfo(bits)
    start = typed(constant(int(limits.min if kind == "max" else limits.max)), bits)
    update = assign(key, call(kind, load(key), call(load(f"_svod_{kind}_key"), item)))
    return [assign(key, start), *_nested(loops, [*body, update]),
            assign(result, call(load("_svod_from_key"), load(key)))]


def _accumulate(op: str, result: str, item: ast.expr, dtype: np.dtype, operand: np.dtype, count: Dim,
                loops: list[tuple[str, Dim]], body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that reduce ``item`` (computed after ``body``) over ``loops`` into ``result``, as
    NumPy's reduction: a float max or min is NaN where any element is (of float32 and float64, one reduction of
    order keys: ``_keyed_extreme``; of float16, beside it the maximum of 1 for a NaN and 0 for any other, which a
    CPU splits into partials in the same pass as the other), a mean divides the sum."""
    if op in ("argmax", "argmin"):
        return _arg_extreme(op, result, item, operand, loops, body)
    if op in ("any", "all"):  # a count of the elements that decide it
        counted = f"{result}_n"
        test = ast.Compare(item, [ast.NotEq() if op == "any" else ast.Eq()], [constant(0)])
        decided = ast.Compare(load(counted), [ast.Gt() if op == "any" else ast.Eq()], [constant(0)])
        return [assign(counted, constant(0)),
                *_nested(loops, [*body, ast.AugAssign(store(counted), ast.Add(), test)]),
                assign(result, decided)]
    nan_aware = op in ("max", "min", "amax", "amin") and dtype.kind == "f"
    kind = "max" if op in ("max", "amax") else "min" if op in ("min", "amin") else op
    if nan_aware and dtype in KEYED:
        return _keyed_extreme(kind, result, item, KEYED[dtype], loops, body)
    update: ast.stmt
    made: list[ast.stmt]
    if kind in ("sum", "mean"):
        made = [assign(result, typed(constant(0), dtype))]
        update = ast.AugAssign(store(result), ast.Add(), item)
    elif kind == "prod":
        made = [assign(result, typed(constant(1), dtype))]
        update = ast.AugAssign(store(result), ast.Mult(), item)
    else:
        lowest = ast.UnaryOp(ast.USub(), numpy("inf")) if dtype.kind == "f" else constant(int(np.iinfo(dtype).min))
        highest = numpy("inf") if dtype.kind == "f" else constant(int(np.iinfo(dtype).max))
        made = [assign(result, typed(lowest if kind == "max" else highest, dtype))]
        update = assign(result, call(kind, load(result), item))
    nans = f"{result}_nan"
    updates = [update]
    if nan_aware:
        flag = np.dtype(np.int32)
        made.append(assign(nans, typed(constant(0), flag)))
        updates.append(assign(nans, call("max", load(nans), typed(ast.Compare(item, [ast.NotEq()], [item]), flag))))
    made += _nested(loops, [*body, *updates])
    if nan_aware:
        made.append(assign(result, ast.IfExp(ast.Compare(load(nans), [ast.Eq()], [constant(0)]), load(result),
                                             typed(numpy("nan"), dtype))))
    if kind == "mean":
        made.append(assign(result, typed(ast.BinOp(load(result), ast.Div(), node_of(count)), dtype)))
    return made


# ---- what an expression reads -----------------------------------------------------------------------------

def computes(x: Expr) -> bool:
    """Whether reading an element of ``x`` computes something: not an array's element, a view's, an index's."""
    if isinstance(x, (Viewed, Transposed, Reshaped)):
        return computes(x.base)
    if isinstance(x, Fused):
        return x.made is None
    return not isinstance(x, (Named, Counted))


def base_name(stored: Expr) -> str | None:
    """The name of the array whose memory ``stored`` is, through its views; None where it is no array's."""
    while isinstance(stored, (Viewed, Transposed, Reshaped)):
        stored = stored.base
    return stored.name if isinstance(stored, Named) else None


def reads_apart(value: Expr, stored: Expr, base: str, repeats: bool = False) -> bool:
    """Whether ``value`` may read ``base`` at another element than the one ``stored`` names at each index
    (then it is computed into a temporary first, as NumPy's meaning is): the reads' nodes compared with the
    store's. Where ``stored``'s indices may name one element ``repeats``-ly (a store through index arrays), any
    read of ``base`` may: the element's store at one index comes before its read at another."""
    index = [load(f"_svod_p{k}") for k in range(len(stored.shape))]
    out = Emitter(itertools.count())
    target = stored.element(index, out)
    element = broadcast_element(value, stored.shape, index, out)
    reads = [n for node in [element, *out.statements] for n in walk(node)
             if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == base]
    return any(repeats or (ast.dump(read) != ast.dump(target) and not _apart(read, target)) for read in reads)


def _apart(read: ast.expr, target: ast.expr) -> bool:
    """Whether element ``read`` of an array is never one ``target`` names, at any index of the store: on some
    axis both are one sum of the same names, the store's indices (``_svod_p*``) not among them, that differ by a
    number (``y[:, j - 1]`` read where ``y[:, j]`` is stored): an index is within its axis, so they differ."""
    if not (isinstance(read, ast.Subscript) and isinstance(target, ast.Subscript)):
        return False
    axes = [_axes(read), _axes(target)]
    if len(axes[0]) != len(axes[1]):
        return False
    for one, other in zip(*axes, strict=True):
        a, b = _linear(one), _linear(other)
        if a is not None and b is not None and a[0] == b[0] and a[1] != b[1] and \
                not any(name.startswith("_svod_p") for name, _ in a[0]):
            return True
    return False


def _axes(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def _linear(node: ast.expr) -> tuple[frozenset[tuple[str, int]], int] | None:
    """``node`` as a sum of names times numbers plus a number, if it is one (``j - 1``, ``2 * k + n``)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return frozenset(), node.value
    if isinstance(node, ast.Name):
        return frozenset({(node.id, 1)}), 0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _linear(node.operand)
        return None if inner is None else (frozenset((n, -c) for n, c in inner[0]), -inner[1])
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        left, right = _linear(node.left), _linear(node.right)
        if left is None or right is None:
            return None
        sign = 1 if isinstance(node.op, ast.Add) else -1
        terms = dict(left[0])
        for name, coefficient in right[0]:
            terms[name] = terms.get(name, 0) + sign * coefficient
        return frozenset((n, c) for n, c in terms.items() if c), left[1] + sign * right[1]
    return None
