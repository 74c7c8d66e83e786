"""A reduction to one value inside an array statement, taken out of the loop over the statement's elements on a
tape (``svod.frontend.jit_tape``).

svod rewrites ``y = x / np.sum(x)`` into a loop over y's elements whose body starts with the loop that sums x;
the plan's compiler computes that sum once, but a tape records the loop as the kernel it is, whose adjoint would
sum x again for each element and add each element's share into every element of x's adjoint: a cost of n * n.
On a tape the run of statements the body starts with that reads none of the loops' variables and nothing the
loops assign becomes a phase of its own, before the loop, whose results pass to it in one-element arrays as any
scalar a phase computes for another::

    for i in svod.prange(n):                       for one in svod.prange(1):          a phase of its own
        r = _svod_np.float64(0)                        r = _svod_np.float64(0)
        for k in range(n):              ──▶            for k in range(n):
            r += x[k]                                      r += x[k]
        y[i] = x[i] / r                                _svod_r[one] = r
                                                   for i in svod.prange(n):           the loop, r read from
                                                       y[i] = x[i] / r                     its cell

The sum is a reduction into a scalar now, whose adds a backend may reorder (``jit_tape``): where it vectorises
the phase's loop and the plan sums in order, the values are an ulp apart (``np.exp(x) / np.sum(np.exp(x))``
of 64 float64 elements), not the plan's bits.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Mapping

import numpy as np

from svod.frontend import pylang
from svod.frontend.array_math import MATH_HELPERS
from svod.frontend.names import loaded, needs, stored, written
from svod.frontend.nodes import copied, walk
from svod.frontend.phases import Reader, scalar_type


def hoisted(statements: list[ast.stmt], reader: Reader,
            declared: Mapping[str, np.dtype]) -> tuple[list[ast.stmt], list[ast.stmt], set[str]] | None:
    """The invariant run of the first loop of ``statements`` that has one (the module's docstring), the
    statements without it, and the run's results the rest reads; None where no loop has one. A run's results
    are the scalars svod's rewriting starts as NumPy scalars (``declared``), so that their cells have their
    dtypes."""
    for position, found in enumerate(statements):
        if not isinstance(found, ast.For):
            continue
        loop = copied(found)  # (the function's own statements stay as they are, for its next calls)
        nest, body = _nest(loop)
        run = _run(nest, body, reader, declared)
        if not run:
            continue
        rest, earlier = body[len(run):], statements[:position]
        results = stored(run) & set(loaded(rest))
        if not results or not results <= set(declared) or stored(run) & stored(rest) \
                or not _before(run, earlier, reader, declared):
            continue
        inner = nest[-1]
        inner.body = rest or [ast.Pass()]
        return list(run), [*statements[:position], loop, *statements[position + 1:]], results
    return None


def _before(run: list[ast.stmt], earlier: list[ast.stmt], reader: Reader, declared: Mapping[str, np.dtype]) -> bool:
    """Whether ``run`` may run before the statements of its phase ahead of its loop: it reads no name they assign
    and no array they may write, and assigns no name they read or assign."""
    return not (needs(run) & stored(earlier) or stored(run) & (stored(earlier) | set(loaded(earlier)))
                or set(loaded(run)) & _arrays_written(earlier, reader, declared))


def _nest(loop: ast.For) -> tuple[list[ast.For], list[ast.stmt]]:
    """The loops of a nest (each the one statement of the one around it), and the innermost one's body."""
    nest = [loop]
    while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], ast.For):
        nest.append(nest[-1].body[0])
    return nest, nest[-1].body


def _run(nest: list[ast.For], body: list[ast.stmt], reader: Reader, declared: Mapping[str, np.dtype]) -> list[ast.stmt]:
    """The statements ``body`` starts with that compute the same in every turn: they read none of the nest's
    variables, no name the nest assigns before they assign it, and no array it stores into; they store no array
    element and call only pure functions (no draw, no atomic). Empty where they hold no loop: what they compute
    costs a turn no more than reading it from a cell would."""
    assigned = {target for loop in nest for target in stored([loop.target])} | stored(body)
    changed = _arrays_written(body, reader, declared)
    run: list[ast.stmt] = []
    for stmt in body:
        candidate = [*run, stmt]
        if needs(candidate) & assigned or set(loaded([stmt])) & changed or not _pure(stmt, reader):
            break
        run = candidate
    return run if any(isinstance(stmt, ast.For) for stmt in run) else []


def _arrays_written(body: list[ast.stmt], reader: Reader, declared: Mapping[str, np.dtype]) -> set[str]:
    """The names of the arrays ``body`` may write (``names.written``), less the modules whose functions it calls
    and svod's scalars (``declared``), which no call writes."""
    return {name for name in written(body) - set(declared)
            if not isinstance(reader.resolve(ast.Name(name, ast.Load())), types.ModuleType)}


def _pure(stmt: ast.stmt, reader: Reader) -> bool:
    """Whether ``stmt`` stores no element and calls only ``range``, NumPy's scalar types and ufuncs, svod's math
    functions and its helpers for NumPy's, and ``abs``, ``min`` and ``max``."""
    for node in walk(stmt):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            return False
        if isinstance(node, ast.Call):
            callee = reader.resolve(node.func)
            if not (callee in (range, abs, min, max) or isinstance(callee, np.ufunc)
                    or scalar_type(callee)
                    or any(callee is f for f in MATH_HELPERS.values())
                    or (isinstance(node.func, ast.Attribute) and reader.resolve(node.func.value) is pylang.math)):
                return False
    return True


__all__ = ["hoisted"]
