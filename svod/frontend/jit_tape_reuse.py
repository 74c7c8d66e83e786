"""Phases of one taped jit call that compute what an earlier phase computed: recorded once.

svod's rewriting of array statements inlines a value into each statement that reads it, so a value with a
reduction in it (``mean`` in ``centred = x - mean``, read by two later statements) is computed by one kernel per
statement, each into an array of its own. The tape would record each, and its adjoint would add into the
gradient of what it reads once per copy. A phase whose kernel body (svod's own names aside), inputs and the
starting values of what it writes are those of a phase recorded before in the call, with nothing written since to
any array either reads or writes, leaves the arrays it writes equal to that phase's: the call reads those instead.

Only phases that write svod's own temporaries, each untouched before (one value throughout) and written by no
other statement of the function (``written_once``: none in a loop, as a loop's next turn would write again), take
part, so a user's array never becomes another's and no later write reaches an array two names share. Any other
write (to an argument, to a temporary written before, to a scalar's cell) forgets every phase recorded so far; a
write into an array an earlier phase read forgets that phase.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import numpy as np

from svod.frontend.names import renamed, stored, written
from svod.frontend.nodes import walk
from svod.frontend.phases import Definition, Item, Phase
from svod.frontend.temporaries import Temporary

_OWN = re.compile(r"_svod_[a-z][0-9]")
"""The names svod's rewriting of array statements gives values of its own."""


class Reuse:
    """What one taped call computed so far in phases that only wrote untouched temporaries of svod's own."""

    def __init__(self, once: Collection[str] = frozenset()) -> None:
        self.once = frozenset(once)
        """svod's own temporaries written by one statement of the function, outside any loop (``written_once``)."""
        self.fresh: dict[str, bytes] = {}
        """Each temporary of svod's own that no phase wrote yet, by name, with the bytes of its one value."""
        self.done: dict[tuple[Any, ...], tuple[list[np.ndarray], dict[int, np.ndarray]]] = {}
        """By form and arguments: the arrays a phase read (to tell them by identity) and those it wrote, by
        position among its arguments."""

    def made(self, name: str, array: Any, uniform: bool) -> None:
        """``name`` now holds a new temporary; one value throughout where ``uniform``."""
        self.fresh.pop(name, None)
        if uniform and isinstance(array, np.ndarray) and _OWN.match(name) and name in self.once:
            self.fresh[name] = array.reshape(-1)[:1].tobytes()

    def key(self, form: str, parameters: Sequence[str], args: Sequence[Any],
            written: frozenset[str]) -> tuple[Any, ...] | None:
        """The phase's key: its body's ``form`` and each argument as the phase sees it; None where it does not
        take part (it writes other than untouched temporaries of svod's own)."""
        if not written or not written <= self.fresh.keys():
            return None
        parts: list[Any] = [form]
        for name, value in zip(parameters, args, strict=True):
            if isinstance(value, np.ndarray):
                layout = (value.shape, value.strides, value.dtype.str)
                parts.append(("out", *layout, self.fresh[name]) if name in written else
                             ("in", value.__array_interface__["data"][0], *layout))
            else:
                parts.append((type(value).__name__, repr(value)))
        return tuple(parts)

    def found(self, key: tuple[Any, ...] | None, parameters: Sequence[str],
              args: Sequence[Any]) -> dict[str, np.ndarray] | None:
        """The arrays, by this phase's names, that an earlier phase of ``key`` wrote, if one did on these
        arrays (the same objects) and nothing wrote to them since."""
        if key is None or key not in self.done:
            return None
        inputs, outputs = self.done[key]
        reads = [(position, value) for position, value in enumerate(args) if isinstance(value, np.ndarray)
                 and position not in outputs]
        if len(reads) != len(inputs) or any(a is not b for (_, a), b in zip(reads, inputs, strict=True)):
            return None
        for position in outputs:
            del self.fresh[parameters[position]]
        return {parameters[position]: array for position, array in outputs.items()}

    def wrote(self, key: tuple[Any, ...] | None, parameters: Sequence[str], args: Sequence[Any],
              written: frozenset[str]) -> None:
        """A phase of ``key`` (None: one not taking part) ran, writing ``written``."""
        for name in written:
            self.fresh.pop(name, None)
        changed = [value for name, value in zip(parameters, args, strict=True) if name in written]
        for done, (inputs, _) in list(self.done.items()):
            if any(a is b for a in inputs for b in changed):
                del self.done[done]
        if key is None:
            self.done.clear()
            return
        arrays = [(position, name, value) for position, (name, value) in enumerate(zip(parameters, args, strict=True))
                  if isinstance(value, np.ndarray)]
        self.done[key] = ([value for _, name, value in arrays if name not in written],
                          {position: value for position, name, value in arrays if name in written})


def form(body: Sequence[ast.stmt]) -> str:
    """The kernel body ``body`` with svod's own names numbered in the order they first stand: two phases of
    one form differ only in the names of svod's temporaries."""
    order: dict[str, str] = {}
    for stmt in body:
        for node in walk(stmt):
            if isinstance(node, ast.Name) and _OWN.match(node.id) and node.id not in order:
                order[node.id] = f"_svod_c{len(order)}"
    return "\n".join(ast.dump(renamed(stmt, order)) for stmt in body)


def changed_by(body: Sequence[ast.AST], names: Collection[str]) -> frozenset[str]:
    """The ``names`` (a kernel's parameters) that ``body`` may write (``names.written``) or bind anew."""
    return frozenset((written(body) | stored(body)).intersection(names))


def written_once(items: Sequence[Item]) -> frozenset[str]:
    """The names one statement of a function's top-level phases writes and no other statement does: one inside
    a loop (or any other item) counts twice, as it may run more than once; a temporary's allocation writes
    nothing."""
    counts: Counter[str] = Counter()
    for item in items:
        if isinstance(item, (Temporary, Definition)):
            continue
        weight = 1 if isinstance(item, Phase) else 2
        for stmt in item.statements if isinstance(item, Phase) else _trees(item):
            for name in written([stmt]) | stored([stmt]):
                counts[name] += weight
    return frozenset(name for name, count in counts.items() if count == 1)


def _trees(item: Any) -> Iterator[ast.AST]:
    """Every syntax tree an item holds, in field order."""
    if isinstance(item, ast.AST):
        yield item
    elif isinstance(item, (list, tuple)):
        for part in item:
            yield from _trees(part)
    elif dataclasses.is_dataclass(item) and not isinstance(item, type):
        for field in dataclasses.fields(item):
            yield from _trees(getattr(item, field.name))


__all__ = ["Reuse", "changed_by", "form", "written_once"]
