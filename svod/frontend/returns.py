"""A called function's ``return`` statements as assignments of its result, in structured control flow with
Python's meaning: what a call compiled into its caller runs (``svod.frontend.inline``'s calls of jitted and
plain functions, a kernel's ``@svod.func`` helpers).

::

    def match(b1, b2):               if b1 + b2 == 3:             def first(x, v):           found = 0
        if b1 + b2 == 3:                 result = 1                   for i in range(n):     done = 0
            return 1            ->   else:                                if x[i] == v:  ->  for i in range(n):
        else:                            result = 0                           return i           if x[i] == v:
            return 0                                                  return -1                      found = i
                                                                                                     done = 1
                                                                                                     break
                                                                                             if not done:
                                                                                                 found = -1

A return where a branch of an ``if`` always returns moves what follows the ``if`` into its other branch; no flag
is needed then. A return inside a loop sets a flag and leaves the loop (``break``), each loop around it leaves
after it, and what follows runs under ``if not flag``; a function that needs the flag starts with it 0 and
its result 0 (then a result every way through assigns, as the languages svod reads it in need).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence
from dataclasses import dataclass

from svod.frontend.nodes import copied, placed, stands_for, walk

FLAG = "svod_flag"
"""The attribute of an assignment of a flag: the reader of a jitted function runs it where it stands (a phase),
never as a definition computed where read (``svod.frontend.phases``)."""


@dataclass(frozen=True)
class Returned:
    """What a body's returns give."""

    always: bool
    """Whether each way through the body ends in a return of a value (none falls off its end or returns None)."""
    nothing: bool
    """Whether no return gives a value."""


def returns_of(body: Sequence[ast.stmt]) -> Returned:
    """Whether every way through ``body`` returns a value, and whether no return gives one."""
    returns = [n for s in body for n in walk(s) if isinstance(n, ast.Return)]
    valued = [r for r in returns if r.value is not None and not _none(r.value)]
    return Returned(_always_returns(body) and len(valued) == len(returns), not valued)


def without_returns(body: Sequence[ast.stmt], target: ast.expr | None, flag: str) -> list[ast.stmt]:
    """``body`` with each ``return value`` made ``target = value`` (where ``target`` is None, the values are
    dropped: a caller whose values have effects passes a target), and what follows a return skipped as Python
    skips it (``flag`` names the flag where one is needed)."""
    rewriter = _ReturnRewriter(target, flag)
    made = rewriter.block(body, 0)
    if not rewriter.flagged:
        return _unflagged(made, flag)
    start = body[0] if body else None
    first = [_flag(flag, 0, start)] if start is not None else []
    if target is not None and start is not None:  # the result is assigned every way through, for each reader
        first += placed([ast.Assign([_stored(target)], _zero(target))], start)
    return [*first, *made]


class _ReturnRewriter:
    def __init__(self, target: ast.expr | None, flag: str) -> None:
        self.target = target
        self.flag = flag
        self.flagged = False
        """Whether a test of the flag was written (else its assignments are dropped)."""

    def block(self, stmts: Sequence[ast.stmt], loops: int) -> list[ast.stmt]:
        """``stmts`` without returns; ``loops``: how many of the function's loops enclose them."""
        out: list[ast.stmt] = []
        for position, stmt in enumerate(stmts):
            if not _returns([stmt]):
                out.append(stmt)
                continue
            rest = list(stmts[position + 1:])
            if isinstance(stmt, ast.Return):
                return [*out, *self.returned(stmt, loops)]
            if isinstance(stmt, ast.If):
                return [*out, *self.branch(stmt, rest, loops)]
            if isinstance(stmt, (ast.For, ast.While)):
                made = stands_for(copy.copy(stmt), stmt)
                made.body = self.block(stmt.body, loops + 1) or placed([ast.Pass()], stmt)
                made.orelse = self.block(stmt.orelse, loops)
                out.append(made)
                if loops:  # the loop around it leaves too
                    self.flagged = True
                    out += placed([ast.If(ast.Name(self.flag, ast.Load()), [ast.Break()], [])], stmt)
            else:
                out.append(stmt)  # (a return inside a with or try: the reader refuses those statements)
            return [*out, *self.after(rest, loops, stmt)]
        return out

    def branch(self, stmt: ast.If, rest: list[ast.stmt], loops: int) -> list[ast.stmt]:
        """An ``if`` that returns somewhere: what follows it moves into a branch that does not always return,
        where the other always does; else it runs under the flag."""
        then_returns, else_returns = _always_returns(stmt.body), _always_returns(stmt.orelse)
        body, orelse = list(stmt.body), list(stmt.orelse)
        tail: list[ast.stmt] = []
        if then_returns and not else_returns:
            orelse += rest
        elif else_returns and not then_returns:
            body += rest
        elif not then_returns:
            tail = rest
        made = stands_for(ast.copy_location(ast.If(stmt.test, self.block(body, loops) or placed([ast.Pass()], stmt),
                                                   self.block(orelse, loops)), stmt), stmt)
        return [made, *self.after(tail, loops, stmt)]

    def after(self, rest: list[ast.stmt], loops: int, at: ast.stmt) -> list[ast.stmt]:
        """What follows a statement that may return: inside a loop as it is (a return left the loop), else
        under ``if not flag``."""
        if not rest:
            return []
        if loops:
            return self.block(rest, loops)
        self.flagged = True
        test = ast.UnaryOp(ast.Not(), ast.Name(self.flag, ast.Load()))
        return placed([ast.If(test, self.block(rest, loops), [])], at)

    def returned(self, stmt: ast.Return, loops: int) -> list[ast.stmt]:
        made: list[ast.stmt] = []
        if stmt.value is not None and self.target is not None:
            made.append(stands_for(ast.copy_location(ast.Assign([_stored(self.target)], stmt.value), stmt), stmt))
        made.append(_flag(self.flag, 1, stmt))
        if loops:
            made += placed([ast.Break()], stmt)
        return [ast.fix_missing_locations(s) for s in made]


def _returns(stmts: Sequence[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in walk(s))


def _always_returns(stmts: Sequence[ast.stmt]) -> bool:
    """Whether every way through ``stmts`` ends in a return (a loop is taken to end without one)."""
    return any(isinstance(s, ast.Return) or
               (isinstance(s, ast.If) and _always_returns(s.body) and _always_returns(s.orelse)) for s in stmts)


def _none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _flag(name: str, value: int, at: ast.AST | None) -> ast.stmt:
    made = ast.Assign([ast.Name(name, ast.Store())], ast.Constant(value))
    setattr(made, FLAG, True)
    return placed([made], at)[0] if at is not None else ast.fix_missing_locations(made)


def _stored(target: ast.expr) -> ast.expr:
    """A fresh copy of an assignment's ``target`` (each assignment its own nodes)."""
    return copied(target)


def _zero(target: ast.expr) -> ast.expr:
    """0 for each name of ``target`` (a name, or a tuple of names)."""
    if isinstance(target, ast.Tuple):
        return ast.Tuple([_zero(t) for t in target.elts], ast.Load())
    return ast.Constant(0)


def _unflagged(stmts: list[ast.stmt], flag: str) -> list[ast.stmt]:
    """``stmts`` without the assignments of a flag nothing tests."""

    class Drop(ast.NodeTransformer):
        def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
            return None if getattr(node, FLAG, False) and _assigns(node, flag) else node

    made = [s for s in (Drop().visit(s) for s in stmts) if s is not None]
    for node in (n for s in made for n in walk(s)):  # a body the dropping emptied holds a pass
        if isinstance(node, (ast.If, ast.For, ast.While)) and not node.body:
            node.body = placed([ast.Pass()], node)
    return made


def _assigns(node: ast.Assign, name: str) -> bool:
    return len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name


__all__ = ["FLAG", "Returned", "returns_of", "without_returns"]
