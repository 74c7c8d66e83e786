"""Whether an array a statement would make may instead be computed again in each statement that reads it.

``centred = x - mean`` read by the next two statements (a layer norm's variance, then its output) costs a
pass that writes ``centred`` and passes that read it back; computed where it is read, it is ``x[r, c] -
mean[r]`` in each reader, as a hand-written kernel spells it, and never stored. ``ArrayRewriter`` fuses an
array read by the next statement alone in any case (``fused_into_next``); this module says when an array read
by a few of the statements after it may be fused into all of them:

- its value is cheap to compute again: names and numbers under arithmetic operators (a reduction it reads,
  ``mean`` above, runs once in each reader: at most ``READERS_RECOMPUTED`` times, not once per element), and
  neither it nor a fused array it reads draws random numbers;
- every statement up to its last reader binds names only (``Assign``) or returns: none stores into an array
  (no subscript or attribute target, no ``out=``, no in-place method), none is a loop or a branch, and none
  binds a name its value reads; so each reader computes it from what it would have been made of;
- no statement after its last reader reads it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from svod.frontend.nodes import walk

READERS_RECOMPUTED = 3
"""The most statements after the one that would make an array that it may be computed again in."""

CHEAP = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.expr_context)
"""The nodes of a value that is cheap to compute again: names and numbers under arithmetic."""

DRAWS_PREFIX = "_svod_random"
"""The prefix of the names ``svod.frontend.random_arrays`` gives ``np.random``'s calls and the state they carry."""

IN_PLACE_METHODS = frozenset({"sort", "fill", "partition", "put", "at", "resize", "itemset", "setfield"})
"""Methods that write the array they are called on (``np.add.at`` writes its first argument)."""


def cheap(value: ast.expr) -> bool:
    """Whether ``value`` is names and numbers under elementwise arithmetic (not ``@``, a product of its own)."""
    return all(isinstance(node, CHEAP) and not isinstance(node, ast.MatMult) for node in walk(value))


def names_read(value: ast.expr, definition: Callable[[str], ast.expr | None]) -> set[str]:
    """The names ``value`` reads, and those that the values of the fused arrays it reads read
    (``definition``: a fused array's value, None for any other name)."""
    seen: set[str] = set()
    pending = [value]
    while pending:
        for node in walk(pending.pop()):
            if isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                defined = definition(node.id)
                if defined is not None:
                    pending.append(defined)
    return seen


def _binds_names_only(stmt: ast.stmt) -> set[str] | None:
    """The names ``stmt`` binds, where it is an assignment to names or a return that writes no array and runs
    no loop or branch; else None."""
    if isinstance(stmt, ast.Return):
        targets: list[ast.expr] = []
    elif isinstance(stmt, ast.Assign):
        targets = [t for target in stmt.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
    else:
        return None
    for node in walk(stmt):
        if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.comprehension)):
            return None
        if isinstance(node, ast.Call) and (any(k.arg == "out" for k in node.keywords) or (
                isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE_METHODS)):
            return None
    return {t.id for t in targets if isinstance(t, ast.Name)}


def recomputable(value: ast.expr, reads: set[str], spelled: set[str], following: Sequence[ast.stmt]) -> bool:
    """Whether an array of ``value`` (read by the user's code as ``spelled``; its value reading ``reads``, fused
    arrays' values included: ``names_read``) may be computed again in each of the ``following`` statements that
    read it (the module docstring)."""
    if not cheap(value) or any(name.startswith(DRAWS_PREFIX) for name in reads):
        return False
    readers = [k for k, stmt in enumerate(following)
               if spelled & {n.id for n in walk(stmt) if isinstance(n, ast.Name)}]
    if not readers or readers[-1] >= READERS_RECOMPUTED:
        return False
    for stmt in following[:readers[-1] + 1]:
        bound = _binds_names_only(stmt)
        if bound is None or bound & (reads | spelled):
            return False
    return True
