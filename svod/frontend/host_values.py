"""What the array rewriting (``svod.frontend.arrays``) computes on the host before a run, and the scalars whose
values it decided something by: a slice's bound, a shape, an operand whose value NumPy's promotion or its refusal
of an out-of-range int reads (``Scalar.sample``), and those the host computed them from. A jitted function reads
its variant again for another value of an int among them only (``svod.frontend.jit``); any other int is a value
each run of the plan passes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from svod.frontend import extents
from svod.frontend.array_exprs import SAMPLED, Expr
from svod.frontend.rebinding import HostShape
from svod.frontend.source import Source


class HostValues:
    """``ArrayRewriter``'s computations on the host, each recording the scalars it reads where a value decides."""

    source: Source
    arrays: dict[str, Expr]
    host: dict[str, Any]
    outer: dict[str, Any]
    sampled: set[str]
    """The names of the scalars whose values the rewriting decided something by, with their ``origins``."""
    origins: dict[str, set[str]]
    """The host's scalars each scalar the host remembers (``remember_scalar``) was computed from, over every
    assignment of its name."""
    stand_ins: dict[str, Any]
    """For a scalar whose value only the run knows (``p = n[0]``), a zero of the type every assignment of its name
    gives (a NumPy scalar is strong under NEP 50, a Python number weak); ``None`` where they differ."""

    def on_host(self, node: ast.expr, prototypes: bool = False) -> Any:
        """``node`` computed now, on the host: the function's globals, the scalar arguments, the scalars so far,
        and the shapes and dtypes of the arrays (arguments and those made so far) — never their elements, which
        only the run knows (each array stands for itself by its shape; with ``prototypes``, as an array of its
        shape and dtype that the ``_like`` allocations take, reading zeros). The scalars it reads, and those
        they were computed from, are recorded (``sampled``): the rewriting reads their values."""
        self.sampled |= self.origins_of(names(node))
        return self.computed(node, prototypes)

    def computed(self, node: ast.expr, prototypes: bool = False) -> Any:
        """``on_host``'s value, the scalars it reads not recorded: a scalar's sample, recorded where a decision
        reads it (``Scalar.sample``), or a scalar the host remembers (``remember_scalar``)."""
        static = {name: value for name, value in self.arrays.items()
                  if name not in self.host and extents.is_static(value.shape)}
        made = {name: np.broadcast_to(np.zeros((), value.dtype), extents.numbers(value.shape)) if prototypes else
                HostShape(extents.numbers(value.shape), value.dtype) for name, value in static.items()}
        return eval(compile(ast.Expression(node), self.source.file, "eval"), self.outer, {**made, **self.host})

    def origins_of(self, names: set[str]) -> set[str]:
        """``names`` and the names of the host's scalars each was computed from (``origins``)."""
        found = set(names)
        for name in names:
            found |= self.origins.get(name, set())
        return found

    def remember_scalar(self, name: str, node: ast.expr) -> None:
        """The value of scalar ``name``, assigned ``node``, where the host computes it (forgotten where not),
        and what it was computed from: recorded where a decision reads it."""
        self.origins.setdefault(name, set()).update(self.origins_of(names(node)))
        try:
            self.host[name] = self.computed(node)
        except Exception:
            self.host.pop(name, None)
        self.remember_stand_in(name, self.stand_in(node))

    def remember_stand_in(self, name: str, stand_in: Any) -> None:
        """``stand_in`` (``stand_ins``) for scalar ``name``, or ``None`` where an earlier assignment gave another
        type: the host then does not know which the run reads."""
        if name in self.stand_ins and type(self.stand_ins[name]) is not type(stand_in):
            stand_in = None
        self.stand_ins[name] = stand_in

    def stand_in(self, node: ast.expr) -> Any:
        """A zero of the type scalar ``node`` computes at run time, the arrays' elements read as zeros of their
        dtypes: what NumPy's promotion reads of an operand whose value only the run knows. ``None`` where the host
        cannot tell (a name of no one type, a name it does not know)."""
        made = {name: np.zeros([n if isinstance(n, int) else 1 for n in value.shape], value.dtype)
                for name, value in self.arrays.items() if name not in self.host}
        known = {name: value for name, value in self.stand_ins.items() if value is not None}
        try:
            with np.errstate(all="ignore"):
                value = eval(compile(ast.Expression(node), self.source.file, "eval"), self.outer,
                             {**known, **made, **self.host})
        except Exception:
            return None
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        return type(value)(0) if isinstance(value, (bool, int, float, complex, np.generic)) else None


@contextmanager
def decisions_recorded(values: HostValues) -> Iterator[None]:
    """Within it, the names a decision reads of a scalar's sample (``Scalar.sample``) join ``values.sampled``,
    with their origins."""
    decided: set[str] = set()
    token = SAMPLED.set(decided)
    try:
        yield
    finally:
        SAMPLED.reset(token)
        values.sampled |= values.origins_of(decided)


def names(node: ast.AST) -> set[str]:
    """The names ``node`` reads or binds."""
    return {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name)}


__all__ = ["HostValues", "decisions_recorded", "names"]
