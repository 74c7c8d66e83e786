"""The loop nests an array statement is rewritten into (``svod.frontend.arrays``): a ``prange`` nest over the
stored array's axes, a work item's own loops, and the widening of a nest's only statement's loops into the
nest's grid.

An axis whose length is one the run carries (``svod.frontend.shrinking``) is looped over the longest it may
be, the body under ``if i < length``: a launch's size is known before its kernel runs, and a device that
bounds a work item's loops sees a bound.
"""

from __future__ import annotations

import ast
import copy

from svod.frontend import extents
from svod.frontend.extents import Dim, node_of
from svod.frontend.nodes import call, constant, for_loop, load

RUN_LENGTH = "run length "
"""How the key of an extent's atom that is a length the run carries starts (``svod.frontend.shrinking``)."""
ELEMENTWISE = "svod_elementwise"
"""The attribute of a loop ``sequential`` made whose turns are independent."""


def parallel(loops: list[tuple[str, Dim]], body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` inside a ``prange`` nest over ``loops``, outermost first."""
    for name, size in reversed(loops):
        bound, inside = guarded(name, size, body)
        body = [for_loop(name, call("_svod_prange", bound), inside)]
    return body


def sequential(loops: list[tuple[str, Dim]], body: list[ast.stmt], elementwise: bool = False) -> list[ast.stmt]:
    """``body`` inside a ``for`` nest over ``loops``, outermost first, in order; ``elementwise``: loops whose
    turns are independent (an elementwise store's), which a ``prange`` nest may take into its grid."""
    for name, size in reversed(loops):
        bound, inside = guarded(name, size, body)
        loop = for_loop(name, call("range", bound), inside)
        setattr(loop, ELEMENTWISE, elementwise)
        body = [loop]
    return body


def widened(body: list[ast.stmt]) -> list[ast.stmt]:
    """A ``prange`` nest's body, its one statement's elementwise loops (``sequential``) made ``prange`` loops
    of the nest: more work items, each storing one element."""
    if len(body) != 1 or not getattr(body[0], ELEMENTWISE, False):
        return body
    loop = copy.copy(body[0])
    assert isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)  # (``sequential`` made it)
    loop.iter = ast.copy_location(ast.Call(load("_svod_prange"), loop.iter.args, []), loop.iter)
    loop.body = widened(loop.body)
    return [ast.fix_missing_locations(loop)]


def carries_length(size: Dim) -> bool:
    """Whether ``size`` reads a length the run carries."""
    return not isinstance(size, int) and any(a.key.startswith(RUN_LENGTH) for a, _ in size.terms)


def guarded(name: str, size: Dim, body: list[ast.stmt]) -> tuple[ast.expr, list[ast.stmt]]:
    """A loop's bound over ``size`` and its body: where the size reads a length the run carries, the longest it
    may be, and the body under ``name < size``."""
    if not carries_length(size):
        return node_of(size), body
    within = ast.Compare(load(name), [ast.Lt()], [node_of(size)])
    return constant(max(extents.high(size), 0)), [ast.If(within, body, [])]
