"""The adjoints of broadcast reads (``svod.frontend.adjoint``): a read whose index holds some of the parallel loops'
variables and not the others, so that every work item of the loops it lacks reads one element (a layer norm's
``gamma[j]`` inside rows ``i`` and columns ``j``, its ``mean[i, 0]`` inside ``j``).

Added where the work item reads it, its adjoint would be one atomic add per work item into a few elements, which
contend, and whose order changes from run to run. Instead each group of such reads (by the variables their
indices hold) gets a pass of its own (``Adjoint.passes``): the loops the indices hold stay parallel, the others
run inside each work item as sequential loops, and the work item sums the adjoints of its element into a local,
which it stores once::

    for i in svod.prange(rows):                 for j in svod.prange(cols):            the kept loop
        for j in svod.prange(cols):                 _svod_s0 = gamma_grad[j]
            y[i, j] = x[i, j] * gamma[j]   ──▶      for i in range(rows):              the lacked one, in order
                                                        ... the work item's forward and backward ...
                                                        _svod_s0 += _svod_d3
                                                    gamma_grad[j] = _svod_s0

Each element is one work item's, and its sum runs in one order, so the adjoint is the same bits at every thread
count and every run. A read whose index holds a variable twice, or a component that is neither a parallel loop's
variable nor an integer constant, holds no loop's variable, or reads an array that another read of the group
reaches through another arrangement of the variables (``t[i, j]`` and ``t[j, i]``), keeps its atomic add; so do
all of them where a parallel loop's bounds read another's variable (the loops cannot be reordered), and in a
kernel that adds with ``svod.atomic_add`` (``svod.frontend.adjoint``).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from svod.frontend.adjoint_text import Lines, Loop, Value, components, indented, integer, names_in
from svod.frontend.nodes import walk

Pattern = tuple[str | None, ...]
"""Per component of a read's index: the parallel loop's variable it is, or None for an integer constant."""


@dataclass(frozen=True)
class Reduction:
    """A pass that sums the adjoints of a group of broadcast reads over the parallel loops their indices lack."""

    lacked: tuple[str, ...]
    """The parallel loops' variables no read of the group holds: sequential loops inside each work item."""
    sums: tuple[tuple[str, str, str], ...]
    """Each read's array and index, and the local its adjoints add into (one per element: reads of one element
    share it)."""

    def local(self, array: str, index: str) -> str | None:
        return next((local for a, i, local in self.sums if (a, i) == (array, index)), None)


def pattern(index: str, spread: list[str], loops: list[str]) -> Pattern | None:
    """``index``'s arrangement of parallel loops' variables (``spread``, of ``loops``) where it is a broadcast
    read's: each component a variable (none twice), an integer constant or the variable of a loop of one turn,
    some variables held and some lacked."""
    parts = components(ast.parse(index, mode="eval").body)
    found: list[str | None] = []
    for part in parts:
        if isinstance(part, ast.Name) and part.id in spread:
            found.append(part.id)
        elif integer(part) is not None or (isinstance(part, ast.Name) and part.id in loops):
            found.append(None)
        else:
            return None
    held = [name for name in found if name is not None]
    if not held or len(set(held)) != len(held) or len(held) == len(spread):
        return None
    return tuple(found)


def reductions(reads: list[tuple[str, str]], spread: list[str], loops: list[str],
               names: itertools.count[int]) -> list[Reduction]:
    """The passes of the broadcast reads among ``reads`` (array, index; each once), one per set of variables
    held, in the order of their first reads; ``names`` numbers the locals."""
    groups: dict[tuple[str, ...], list[tuple[str, str, Pattern]]] = {}
    for array, index in reads:
        found = pattern(index, spread, loops)
        if found is not None:
            groups.setdefault(tuple(v for v in spread if v not in found), []).append((array, index, found))
    passes = []
    for lacked, group in groups.items():
        arranged: dict[str, set[Pattern]] = {}
        for array, _, found in group:
            arranged.setdefault(array, set()).add(found)
        sums = tuple((array, index, f"_svod_s{next(names)}") for array, index, _ in group
                     if len(arranged[array]) == 1)
        if sums:
            passes.append(Reduction(lacked, sums))
    return passes


def reorderable(nest: list[ast.For]) -> bool:
    """Whether the parallel loops' bounds read none of their variables, so that any of them may run inside."""
    variables = {_variable(loop) for loop in nest}
    return not any(isinstance(name, ast.Name) and name.id in variables
                   for loop in nest for name in walk(loop.iter))


def reduction_source(nest: list[ast.For], reduction: Reduction, grads: dict[str, str], body: Lines) -> Lines:
    """The pass of ``reduction``, from below the statements before the nest: the loops the reads hold (and those
    of one turn) parallel, each local set to its element's adjoint, the lacked loops sequential around ``body``,
    each local stored back."""
    outer = [loop for loop in nest if _variable(loop) not in reduction.lacked]
    inner = [loop for loop in nest if _variable(loop) in reduction.lacked]
    lines: Lines = []
    for depth, loop in enumerate(outer):
        lines += indented([(f"for {_variable(loop)} in {ast.unparse(loop.iter)}:", loop.lineno)], depth)
    first = inner[0].lineno
    inside: Lines = [(f"{local} = {grads[array]}[{index}]", first) for array, index, local in reduction.sums]
    for depth, loop in enumerate(inner):
        assert isinstance(loop.iter, ast.Call)
        sequential = ast.Call(ast.Name("range", ast.Load()), loop.iter.args, [])
        inside += indented([(f"for {_variable(loop)} in {ast.unparse(sequential)}:", loop.lineno)], depth)
    inside += indented(body, len(inner))
    inside += [(f"{grads[array]}[{index}] = {local}", first) for array, index, local in reduction.sums]
    return lines + indented(inside, len(outer))


Element = tuple[str, str, str | None]
"""A read's array, index and condition (None: none)."""


def turn_sums(loop: Loop, assigned: set[str], summed: Callable[[Value], bool],
              names: itertools.count[int]) -> dict[Element, str]:
    """The reads of ``loop``'s turns (not of the loops inside) whose element and condition no turn changes (they
    name none of ``assigned``, the names the turns assign), where ``summed`` takes the read: each with a local
    that the turns' adjoints add into, and that adds into the element once, after the loop (one add per work
    item, where there was one per turn, which a loop's turns made one after another through memory)."""
    found: dict[Element, str] = {}
    for v in loop.values:
        if not isinstance(v, Value) or v.array is None or v.stored is not None or not summed(v):
            continue
        reads = names_in([(v.index, v.line), *([(v.guard, v.line)] if v.guard is not None else [])])[0]
        if not reads & assigned:
            found.setdefault((v.array, v.index, v.guard), f"_svod_e{next(names)}")
    return found


def _variable(loop: ast.For) -> str:
    assert isinstance(loop.target, ast.Name)
    return loop.target.id


__all__ = ["Element", "Reduction", "pattern", "reduction_source", "reductions", "reorderable", "turn_sums"]
