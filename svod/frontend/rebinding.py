"""A name of an ``@svod.jit`` function bound anew while it holds an array (``x = relu(x @ w1 + b1)``, then ``x =
relu(x @ w2 + b2)``): in Python a new array each time, of its own shape and dtype, while any other name that held
the old one keeps it.

The array rewriting (``svod.frontend.arrays``) gives each such binding in the function's straight-line code a
name of its own, and the statements after it read that name::

    x = relu(input @ w1 + b1)             x = relu(input @ w1 + b1)
    x = relu(x @ w2 + b2)          ->     _svod_x3 = relu(x @ w2 + b2)
    return x                              return _svod_x3

so each binding is a plan buffer of its own; an argument's name bound anew is a new array, and the caller's
array stays as it is, as in Python. A name bound there to the array another name holds (``y = x``, or a called
function's output returned into the caller's name) is that name from then on: one array, as in Python, which
the loops written by hand read as the array statements do.

A binding inside a loop or an ``if`` writes the array the name holds where the loop or ``if`` starts (one
buffer, each turn's), so its value must have that array's shape and dtype: one that changes from turn to turn,
or differs with the way taken, is no plan's, and is refused.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from svod.frontend.array_exprs import Expr, Named, Value, Viewed
from svod.frontend.array_shapes import viewed_by
from svod.frontend.names import loaded, renamed
from svod.frontend.nodes import walk


class Bindings:
    """What each name of the function's straight-line code holds as the rewriting goes: the name given to its
    latest binding where that was made anew (``renames``)."""

    def __init__(self, arrays: dict[str, Any], described: dict[str, str], viewed: set[str],
                 counter: Iterator[int]) -> None:
        self.arrays = arrays
        """The rewriting's arrays by name (``ArrayRewriter.arrays``)."""
        self.described = described
        self.viewed = viewed
        """The names another name may view (``viewed_names``): a new name of one is one too."""
        self.counter = counter
        self.renames: dict[str, str] = {}
        """Each name of the user's bound anew -> the name of its latest binding."""
        self.depth = 0
        """How many blocks enclose the statement being rewritten: 1 in the function's straight-line code."""

    @contextmanager
    def block(self) -> Iterator[None]:
        """The statements of one block (the function's, a loop's, a branch's) are being rewritten."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def current(self, stmt: ast.stmt, following: Sequence[ast.stmt]) -> tuple[ast.stmt, bool]:
        """``stmt`` reading each name as its latest binding; in straight-line code, a binding of a name that holds
        an array (or held one) made a binding of a name of its own, and a name bound to an array another name
        holds (``y = x``, ``x = helper_output``) that other name from then on (a pass stands in its place; where
        ``following``, the statements after it, read the other name, both hold the array: ``viewed``). Whether
        the names changed."""
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if self.depth != 1 or not isinstance(target, ast.Name):
            return (renamed(stmt, self.renames) if self.renames else stmt), False
        name = target.id
        value = stmt.value  # type: ignore[attr-defined]
        held = self.renames.get(value.id, value.id) if isinstance(value, ast.Name) else None
        if held is not None and isinstance(self.arrays.get(held), Named) and self.arrays[held].name == held:
            self.renames[name] = held  # the same array, as in Python
            if name in self.viewed or value.id in loaded(following):
                self.viewed.add(held)  # two names hold it (a helper's output bound to the caller's name: one)
            return ast.copy_location(ast.Pass(), stmt), True
        if name not in self.renames and name not in self.arrays:
            return (renamed(stmt, self.renames) if self.renames else stmt), False
        fresh = f"_svod_{name}{next(self.counter)}"
        made = renamed(stmt, self.renames)  # its value reads the binding before it
        made.targets = [ast.copy_location(ast.Name(fresh, ast.Store()), target)]  # type: ignore[attr-defined]
        self.renames[name] = fresh
        self.described[fresh] = self.described.get(name, name)
        if name in self.viewed:
            self.viewed.add(fresh)
        return made, True

    def part_written(self, function: ast.FunctionDef, name: str, value: ast.expr) -> bool:
        """Whether ``name = value`` binds an array's ``.real`` or ``.imag`` (``np.real(x)``, ``np.imag(x)``) to a
        name the function writes into: NumPy's is a view of ``x`` (``x`` itself of a real ``x``, read-only zeros
        for its ``imag``), where svod's would be a new array that the write never reaches ``x`` through."""
        return _part_of(value) and _written_in_place(function, self.spelled(name))

    def spelled(self, name: str) -> set[str]:
        """The names the user's code reads ``name`` by: its own, and the user's name it is the latest binding of."""
        return {name, *(user for user, latest in self.renames.items() if latest == name)}

    def unwritable(self, function: ast.FunctionDef, name: str, held: Expr, value: Value) -> str | None:
        """Why ``name = value``, inside a loop or an ``if``, cannot write the array ``held`` the name holds (None
        where it can): another name holds or views that array (and keeps it, in Python), or the value is of
        another shape or dtype, or a number, or another of the user's arrays or a view of one (``acc = x``: in
        Python the name then holds that array, and sees each later write to it; svod would write a copy)."""
        source = _aliased(value)
        if source is not None and not (isinstance(held, Named) and held.name == source) and \
                _written_in_place(function, {source, *self.spelled(name)}):
            return (f"{self.described.get(name, name)} is bound anew inside a loop or an if to another array or a "
                    "view of one, which it holds from then on in Python (a later write to either shows in both); "
                    "svod would write a copy into the array it holds: bind a copy (`= x.copy()`) or a new name")
        if name in self.viewed:
            return kept_elsewhere(self.described.get(name, name))
        if isinstance(value, Expr) and value.shape == held.shape and np.dtype(value.dtype) == np.dtype(held.dtype):
            return None
        what = f"an array of shape {value.shape} and dtype {value.dtype}" if isinstance(value, Expr) else "a number"
        return (f"{self.described.get(name, name)} is bound anew inside a loop or an if to {what}, and holds an array "
                f"of shape {held.shape} and dtype {held.dtype} where the loop or if starts: svod writes that array "
                "(a plan's arrays keep their shapes and dtypes, turn after turn); bind another name, or bind it "
                "before the loop or if")

    def new_in_loop(self, function: ast.FunctionDef, name: str, line: int) -> tuple[ast.AST | None, str]:
        """Why array ``name``, made anew (at ``line``) in every turn of a loop around phases, cannot be while
        another name holds it, and where to say so: where ``name`` is svod's (an inlined function's local), at
        the user's own name bound to it (``acc = getAcc(...)``: at the call's line) if any; else at the statement
        that makes it (None)."""
        if not name.startswith("_svod_"):
            return None, (f"{name} is a new array in every turn of a loop around phases, and another name views it: "
                          f"make it once before the loop (`{name} = np.empty(...)`) and assign into it "
                          f"(`{name}[...] = ...`)")
        holders = [node.targets[0] for node in walk(function) if isinstance(node, ast.Assign) and
                   len(node.targets) == 1 and isinstance(node.value, ast.Name) and node.value.id == name]
        holder = next((h for h in holders if isinstance(h, ast.Name) and not h.id.startswith("_svod_")), None)
        what = self.described.get(name, "an array a called function makes")
        held = f"{what} is" if not isinstance(holder, ast.Name) else f"{holder.id} is bound to {what}, which is"
        return holder, (f"{held} a new array (made at line {line}) in every turn of a loop around phases, which svod "
                        "makes once while another name holds it: have the function store into an array made once "
                        "before the loop, which the call passes it (`out[...] = ...` in it)")


def _aliased(value: Value) -> str | None:
    """The user's array ``value`` is or views, None where the statement computes it (an inlined function's
    local, svod's name, is a new array of the call's)."""
    while isinstance(value, Viewed):
        value = value.base
    return value.name if isinstance(value, Named) and not value.name.startswith("_svod_") else None


PART_WRITTEN = ("this binds an array's .real or .imag, which NumPy gives as a view of the array, and a later "
                "statement writes into it: svod would write a copy and leave the array as it is; write the whole "
                "value (`z[...] = new + 1j * z.imag`), or bind a copy (`= z.real.copy()`)")
"""The refusal of a name bound to a part and written (``Bindings.part_written``)."""


def _part_of(value: ast.expr) -> bool:
    """Whether ``value`` reads as an array's part: ``x.real``, ``x.imag``, ``np.real(x)``, ``np.imag(x)``."""
    if isinstance(value, ast.Attribute):
        return value.attr in ("real", "imag")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
        value.func.attr in ("real", "imag") and len(value.args) == 1


def _written_in_place(function: ast.FunctionDef, names: set[str]) -> bool:
    """Whether ``function`` writes into any of ``names``' arrays (``x[...] = ...``, ``x += ...``): where two of
    its names hold one array, the write shows through both in Python, and a copy would not see it."""
    for node in walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AugAssign) else []
        for written in targets:
            into = isinstance(node, ast.AugAssign) or isinstance(written, ast.Subscript)
            base = written
            while isinstance(base, ast.Subscript):
                base = base.value
            if into and isinstance(base, ast.Name) and base.id in names:
                return True
    return False


class HostShape:
    """What the host knows, before a run, of an array the plan makes (a temporary, an array statement's result):
    its shape and dtype, which the shapes of the arrays made after it may be computed from (``np.empty((x.shape[0],
    2))``); its elements only the run computes (reading one on the host raises ``TypeError``)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape))

    def __getitem__(self, key: Any) -> HostShape:
        """A view's stand-in (``x[::2].shape``); an element is the run's, never the host's."""
        view = np.broadcast_to(np.zeros((), np.int8), self.shape)[key]
        if view.ndim == 0:
            raise TypeError("an array's elements are known only when the function runs")
        return HostShape(view.shape, self.dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]


def shrinking(name: str) -> str:
    """The refusal of ``name = name[mask]`` (or of an expression under a mask) where ``name`` is an array already,
    at a turn of a loop: each turn would make it shorter, and a plan holds each array at one shape for the whole
    run. Keeping it whole with a mask of the elements still live is the same computation at one shape."""
    return (f"{name} = ...[mask] makes {name} shorter at each turn of the loop around it, and a plan holds an "
            f"array at one shape for the whole run: keep {name} whole and a mask of its elements still live "
            f"(`live &= ~done`), computing under it (`{name}[:] = np.where(live, ..., {name})`, `out[done] = ...`)")


def exchanged(names: list[str]) -> str:
    """The refusal of ``x, y = f(x, y), g(x, y)`` (``x, y = y, x`` too) where ``x`` or ``y`` is an array: each
    value reads a name another binds, and a plan holds each name's array in a buffer of its own, which binding
    one name to another's value would share."""
    first = names[0]
    return (f"{', '.join(names)} {'is an array' if len(names) == 1 else 'are arrays'} this tuple assigns from "
            f"values that read the names it assigns, which svod does not exchange: compute into a temporary "
            f"first and assign into each array (`t = ...; {first}[:] = t`)")


def remade(name: str, held: tuple[int, tuple[int, ...], Any] | None, shape: tuple[int, ...], dtype: np.dtype,
           argument: bool, viewed: set[str]) -> int | None:
    """The plan buffer of the array ``name`` holds (``held``: its buffer, shape and dtype; ``argument``: the
    caller's) where ``name`` is bound to a new array of ``shape`` and ``dtype`` again (each way through an ``if``
    makes its own, a statement in a loop makes one each turn): the plan holds both in that one, as no other name
    can hold the old array. None where ``name`` holds no array yet; ValueError, saying why, where the plan
    cannot hold both in one."""
    if held is None:
        return None
    if argument:
        raise ValueError(argument_bound_anew(name))
    slot, shape_held, dtype_held = held
    if (tuple(shape_held), np.dtype(dtype_held)) != (tuple(shape), np.dtype(dtype)):
        raise ValueError(f"{name} is made as an array of shape {tuple(shape)} and dtype {np.dtype(dtype).name}, and "
                         f"as one of {tuple(shape_held)} and {np.dtype(dtype_held).name} before, or on another way "
                         "through an if: a plan holds the arrays of one name in one buffer; use a name for each")
    if name in viewed:
        raise ValueError(kept_elsewhere(name))
    return int(slot)


def kept_elsewhere(name: str) -> str:
    """Why ``name``, bound anew inside a loop or an ``if``, cannot be written where it holds an array another name
    holds or views."""
    return (f"{name} is bound anew inside a loop or an if, and another name holds or views the array it holds there "
            "(`y = x`, `v = x[1:]`), which keeps that array in Python; svod would write it: bind a new name, or copy "
            "the other (`y = x.copy()`)")


def argument_bound_anew(name: str) -> str:
    """Why ``name``, an argument's, cannot be bound to a new array inside a loop or an ``if``."""
    return (f"{name} = ... inside a loop or an if would make a new array of the name of an argument, whose caller's "
            f"array stays as it is; bind it before the loop or if, assign into it (`{name}[...] = ...`) or use a new "
            "name")


def viewed_names(function: ast.FunctionDef) -> set[str]:
    """The names whose value another name may be bound to whole or as a view (``q = p``, ``v = p[1:]``,
    ``t = p.T``, ``a, b = p, q``; not ``p = p[1:]``, after which no other name holds ``p``'s array)."""
    found: set[str] = set()
    for node in walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets):
            itself = node.targets[0].id if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) else None
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for value in [v for written in values for v in viewed_by(written)]:
                if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute) and \
                        value.value.attr == "shape":
                    continue  # a size, not a view
                base = value
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name) and base.id != itself:
                    found.add(base.id)
    return found


__all__ = ["Bindings", "HostShape", "argument_bound_anew", "kept_elsewhere", "remade", "viewed_names"]
