"""``t = np.zeros(shape)`` (or another of ``phases.ALLOCATIONS``) in an ``@svod.jit`` function's array
statements (``svod.frontend.arrays``).

At the function's level, or in a loop around phases, the statement is a plan buffer (``phases.Temporary``) and
stays as it is. In a ``prange`` nest's body Python makes a new array in every turn, and the turns of a
``prange`` are its work items, which run at once: so each work item gets an array of its own, all of them made
once before the nest as one array with the work items' axes first, each work item viewing its own part, and
filled where the statement stands::

    for i in prange(n):                      t = np.empty((n, m))            before the nest
        t = np.zeros(m)               ->     for i in prange(n):
        ...                                      for a in range(m):          each work item fills its own
                                                     t[i, a] = 0
                                                 ...                         and reads t[i, ...] as its t

A shape that depends on the work item (``np.zeros(i + 1)``) is made at the greatest it may be, each work item
viewing the first elements of its own part. What the host cannot bound before the run is refused, saying so.
"""

from __future__ import annotations

import ast
import copy
from abc import abstractmethod
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import Expr, Named, Value
from svod.frontend.extents import Dim
from svod.frontend.nodes import walk
from svod.frontend.phases import Reader
from svod.frontend.rebinding import Bindings
from svod.frontend.source import Source
from svod.frontend.temporaries import LITERAL_LIMIT, LITERALS, Temporary

_LIKE = ("empty_like", "zeros_like", "ones_like", "full_like")


class Allocations:
    """The statements' ``ArrayRewriter``, as the functions here use it."""

    source: Source
    reader: Reader
    arrays: dict[str, Expr]
    host: dict[str, Any]
    read: set[str]
    viewed: set[str]
    bindings: Bindings
    work: list[ast.For]

    @abstractmethod
    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...

    @abstractmethod
    def on_host(self, node: ast.expr, prototypes: bool = False) -> Any: ...

    @abstractmethod
    def value(self, node: ast.expr) -> Value: ...

    @abstractmethod
    def bound(self, node: ast.expr) -> Dim: ...

    @abstractmethod
    def made_array(self, name: str, shape: tuple[Dim, ...], dtype: np.dtype, at: ast.AST) -> Expr: ...

    @abstractmethod
    def allocation(self, stmt: ast.stmt, made: Expr) -> list[ast.stmt]: ...

    @abstractmethod
    def loops(self, stmt: ast.stmt, stored: Expr, value: Value) -> list[ast.stmt]: ...

    def allocated(self, stmt: ast.stmt, name: str, call: ast.Call) -> list[ast.stmt]:
        """``name = call`` rewritten: as it stands at the function's level or in a loop around phases (the plan
        makes it: its shape and dtype recorded where the host knows them), one array per work item in a
        ``prange`` nest's body (the module docstring)."""
        if self.work:
            return self.per_work_item(stmt, name, call)
        if any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.arrays
               for n in walk(call)):
            return [stmt]  # (a shape or fill an array's element gives) the plan says what it makes of it, there
        try:
            made = self.on_host(call, prototypes=True)
        except Exception:
            return [stmt]  # the plan says what is wrong with it, where it is made
        if self.reader.allocation(call) in LITERALS and made.size > LITERAL_LIMIT:
            raise self.refuse(stmt, f"an array of {made.size} numbers written out: svod fills one of at most "
                                    f"{LITERAL_LIMIT} where it stands; pass a larger one as an argument")
        self.arrays[name] = Named(made.shape, made.dtype, name)
        self.read |= {n.id for n in walk(call) if isinstance(n, ast.Name)} & set(self.host)
        return [self.shape_written(stmt, call, made.shape)]

    def shape_written(self, stmt: ast.stmt, call: ast.Call, shape: tuple[int, ...]) -> ast.stmt:
        """``stmt`` with its allocation's shape written out where it reads a view's name (``np.zeros(C.shape)``
        after ``C = np.reshape(C, n)``): the plan makes the array on the host, which holds the arrays it makes,
        not the views the rewriting names (the shape is the plan's: one is made per shape of the arguments)."""
        views = {n for n, v in self.arrays.items() if not (isinstance(v, Named) and v.name == n)}
        if self.reader.allocation(call) in _LIKE or not call.args or \
                not any(isinstance(n, ast.Name) and n.id in views for n in walk(call.args[0])):
            return stmt
        written = copy.copy(call)
        written.args = [ast.copy_location(ast.Tuple([ast.Constant(s) for s in shape], ast.Load()), call.args[0]),
                        *call.args[1:]]
        made = copy.copy(stmt)
        assert isinstance(made, ast.Assign)  # (arrays.assign's)
        made.value = ast.fix_missing_locations(written)
        return made

    def per_work_item(self, stmt: ast.stmt, name: str, call: ast.Call) -> list[ast.stmt]:
        """An allocation in a ``prange`` nest's body: the array of each work item's own, made before the nest,
        and the statements that fill it where ``stmt`` stands (none for ``np.empty``)."""
        if name in self.viewed:
            raise self.refuse(stmt, f"{name} is made anew by every work item of the prange around it, and another "
                                    f"name is bound to it, which svod does not follow there: use the name {name}")
        if self.reader.allocation(call) in LITERALS:
            raise self.refuse(stmt, "an array of numbers written out in a prange's body (one per work item): make it "
                                    "once, before the loop")
        fill = Temporary(name, call, stmt).fill  # type: ignore[arg-type]  # (an Assign: arrays.assign's)
        filled = self.value(fill) if fill is not None else None
        if isinstance(filled, Expr):
            raise self.refuse(stmt, f"np.{self.reader.allocation(call)}'s fill value in a prange's body is a number, "
                                    "not an array: make the array, then assign into it")
        shape, dtype = self.made_shape(stmt, call, filled.sample if filled is not None else None)
        made = self.made_array(name, shape, dtype, stmt)
        self.read |= {n.id for n in walk(call) if isinstance(n, ast.Name)} & set(self.host)
        return [*self.allocation(stmt, made), *(self.loops(stmt, made, filled) if filled is not None else [])]

    def made_shape(self, stmt: ast.stmt, call: ast.Call, sample: Any) -> tuple[tuple[Dim, ...], np.dtype]:
        """The shape and dtype of the array ``call`` makes for one work item: as the host computes them, or, for
        a shape of the loops' variables, its lengths as extents of them (``bound``) and its dtype the host's
        of a shape of ones. ``sample`` stands for a fill the work item computes (NumPy's dtype of it)."""
        kind = self.reader.allocation(call)
        probe = copy.copy(call)
        if kind in ("full", "full_like") and sample is not None and len(call.args) > 1:
            probe.args = [call.args[0], ast.Constant(sample.item() if isinstance(sample, np.generic) else sample),
                          *call.args[2:]]
        try:
            made = self.on_host(ast.fix_missing_locations(probe), prototypes=True)
            return tuple(made.shape), made.dtype
        except Exception as err:
            if kind in _LIKE or not probe.args:
                raise self.refuse(stmt, f"an array made in a prange's body is of a shape and dtype the host knows "
                                        f"before the run ({err})") from err
        written = probe.args[0]
        parts = list(written.elts) if isinstance(written, (ast.Tuple, ast.List)) else [written]
        try:
            shape = tuple(self.bound(part) for part in parts)
        except KernelSyntaxError:
            raise self.refuse(stmt, f"the shape `{ast.unparse(written)}` of an array made in a prange's body is of "
                                    "numbers the host knows before the run and the loops' variables (+, -, * and // "
                                    "by a number, min, max), not of values the run computes: make the array before "
                                    "the loop, at the greatest length") from None
        negative = next((p for p, d in zip(parts, shape, strict=True) if extents.low(d) < 0), None)
        if negative is not None:
            raise self.refuse(stmt, f"the length `{ast.unparse(negative)}` of an array made in a prange's body may "
                                    "be negative for some work item (NumPy raises ValueError)")
        probe.args = [ast.Tuple([ast.Constant(1) for _ in parts], ast.Load()), *probe.args[1:]]
        try:
            made = self.on_host(ast.fix_missing_locations(probe), prototypes=True)
        except Exception as err:
            raise self.refuse(stmt, f"an array made in a prange's body is of a dtype the host knows before the run "
                                    f"({err})") from err
        return shape, made.dtype
