"""Statements of ``@svod.jit``'s array statements that the host writes out from what it knows: a sequential loop
whose variable decides their shapes, turn by turn (``unrolled``), and an ``if`` whose test it knows, as the
branch taken (``decided``).

A plan is sized per shape: a loop whose turns make arrays of other shapes (a Stockham FFT's
``for i in range(K): yv = np.reshape(y, (R**i, R, R**(K - i - 1)))``) has no one plan to loop over. Where the
host knows the loop's turns (a ``range`` of numbers it knows, a few of them) and a shape in its body (a
reshape's, an allocation's) reads its variable, or a name the body computes from it, the array rewriting
(``svod.frontend.arrays``) reads the turns' statements in its place, each reading the turn's number for the
variable::

    for i in range(2):                    yv = np.reshape(y, (R**0, -1))
        yv = np.reshape(y, (R**i, -1))    ...
        ...                               yv = np.reshape(y, (R**1, -1))
                                          ...
                                          i = 1

which is what Python runs: the variable holds the last turn's value after the loop (is not bound where there is
none), each statement stands at the user's line. A body that leaves a turn early (``break``, ``continue``,
``return``) or assigns the variable is not written out.

An ``if`` whose test reads only what the plan is already made for — the arrays' shapes and dtypes, the numbers
the host has read before (a shape's ``NR``, ``NM``), the globals and constants — is its branch the test takes,
as Python runs it: the other is never built, so a statement there that could not run for these shapes (an
inverse of a matrix that is not square, a product of mismatched arrays) refuses nothing, and no flag is
computed at run time to choose between two plans' worth of steps. (An ``if`` around scalar code alone stays the
run's: the array rewriting asks only of one around array statements or plan steps.)
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Container, Sequence
from typing import Any

import numpy as np

from svod.frontend.host_values import names
from svod.frontend.nodes import assign, constant, copied, placed, walk
from svod.frontend.phases import Reader

UNROLLED_TURNS = 64
"""The most turns a loop is written out for: past them, its shapes stay a number the host does not know."""


def unrolled(stmt: ast.stmt, reader: Reader, host: Callable[[ast.expr], Any]) -> list[ast.stmt] | None:
    """``stmt``'s turns, written out (the module docstring), where it is such a loop; else None. ``host``
    evaluates a number the host knows (raising where it does not)."""
    if not (isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and not stmt.orelse and
            isinstance(stmt.iter, ast.Call) and reader.resolve(stmt.iter.func) is range and not stmt.iter.keywords):
        return None
    name = stmt.target.id
    if not _shapes_read(stmt.body, name, reader) or _leaves_or_assigns(stmt.body, name):
        return None
    try:
        turns = range(*(operator.index(host(a)) for a in stmt.iter.args))
    except Exception:
        return None  # (the rewriting says what it cannot know)
    if len(turns) > UNROLLED_TURNS:
        return None
    written: list[ast.stmt] = []
    for turn in turns:
        written += [_Substituted(name, turn).visit(copied(s)) for s in stmt.body]
    return [*written, *placed([assign(name, constant(turns[-1]))], stmt)] if turns else written


class _Substituted(ast.NodeTransformer):
    """A turn's statement: its loop variable read as the turn's number, at the user's place."""

    def __init__(self, name: str, turn: int) -> None:
        self.name, self.turn = name, turn

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return ast.copy_location(constant(self.turn), node) if node.id == self.name else node


def decided(stmt: ast.If, made_for: set[str], outer: Container[str], host: Callable[[ast.expr], Any]
            ) -> list[ast.stmt] | None:
    """The statements of the branch ``stmt`` takes, where its test reads no name but those the plan is made for
    (``made_for``: the arrays, the numbers the host has read) and the function's globals (``outer``), calls
    nothing (a call could have an effect), and computes a number on the ``host``; else None."""
    unknown = any(name not in made_for and name not in outer for name in names(stmt.test))
    if unknown or any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Lambda, ast.comprehension))
                      for n in walk(stmt.test)):
        return None
    try:
        value = host(stmt.test)
    except Exception:
        return None  # (the run computes it)
    if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return None
    return list(stmt.body if value else stmt.orelse)


def _shapes_read(body: Sequence[ast.stmt], name: str, reader: Reader) -> bool:
    """Whether a reshape's or an allocation's shape in ``body`` reads ``name``, or a name the body assigns from
    what reads it."""
    dependent = {name}
    while True:
        more = {t.id for stmt in body for node in walk(stmt) if isinstance(node, ast.Assign)
                and _reads(node.value, dependent) for t in node.targets if isinstance(t, ast.Name)} - dependent
        if not more:
            break
        dependent |= more
    for stmt in body:
        for node in walk(stmt):
            if isinstance(node, ast.Call) and any(_reads(shape, dependent) for shape in _shapes(node, reader)):
                return True
    return False


def _shapes(call: ast.Call, reader: Reader) -> list[ast.expr]:
    """The expressions of the shape ``call`` makes an array of, if it is a reshape or an allocation."""
    given = [k.value for k in call.keywords if k.arg in ("shape", "newshape")]
    if reader.resolve(call.func) is np.reshape:
        return [*call.args[1:], *given]
    if isinstance(call.func, ast.Attribute) and call.func.attr == "reshape":
        return [*call.args, *given]  # a method: its arguments are the shape
    if reader.allocation(call) is not None:
        return [*call.args[:1], *given]
    return []


def _reads(node: ast.expr, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in walk(node))


def _leaves_or_assigns(body: Sequence[ast.stmt], name: str) -> bool:
    """Whether ``body`` may leave a turn early, or assigns ``name``."""
    for stmt in body:
        for node in walk(stmt):
            if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
                return True
            if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                return True
    return False
