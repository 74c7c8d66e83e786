"""An ``if``/``elif`` chain without an ``else`` whose tests cover every value a loop's variable takes, read as the
``if``/``else`` Python runs it as.

::

    for i in range(n):                    for i in range(n):
        if i == 0:                            if i == 0:
            v = x[0]                              v = x[0]
        elif i > 0:                           else:                  i >= 0 and i != 0: i > 0 holds
            v = x[i] - x[i - 1]                   v = x[i] - x[i - 1]
        out[i] = v                            out[i] = v

Python assigns ``v`` on every turn, and so does the chain as rewritten, which the checks of what a read finds
assigned (``svod.frontend.flow.check_assigned``, the kernels' translation) then take as it is. A chain is
closed so only where its tests compare the variable of a ``range`` (or ``prange``) loop around it, of a
non-negative step and a start written as an int, which the loop's body never assigns, with ints
(``i == 0``, ``i > 0``, ``0 < i``, ``i != 3``): the last test is then one that holds wherever the tests
before it do not, and evaluating it has no effect. Any other chain stays as written (and a read that it may
not have assigned is refused, as Python would raise ``UnboundLocalError``).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from svod.frontend import pylang
from svod.frontend.names import stored
from svod.frontend.nodes import copied, stands_for
from svod.frontend.source import Source

Interval = tuple[float, float]
"""The ints from the first to the last, inclusive (``-inf``, ``inf`` unbounded)."""

_FLIPPED: dict[type, type] = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Eq: ast.Eq,
                              ast.NotEq: ast.NotEq}


def closed_chains(source: Source, resolve: Callable[[ast.expr], Any]) -> Source:
    """``source`` with each chain the module docstring describes closed by an ``else``; itself where none is."""
    closer = _Closer(resolve)
    node = closer.visit(copied(source.node))
    if not closer.closed:
        return source
    return Source(stands_for(node, source.node), source.file, source.names, source.described)


class _Closer(ast.NodeTransformer):
    def __init__(self, resolve: Callable[[ast.expr], Any]) -> None:
        self.resolve = resolve
        self.lowest: dict[str, int] = {}
        """The variables of the loops around the node being visited -> the least value each takes."""
        self.closed = False

    def visit_For(self, node: ast.For) -> ast.For:
        name = node.target.id if isinstance(node.target, ast.Name) else None
        start = self.start(node)
        outer = dict(self.lowest)
        for assigned in stored([*node.body, *node.orelse]):
            self.lowest.pop(assigned, None)  # (an inner loop's own variable, or one the body changes)
        if name is not None:
            self.lowest.pop(name, None)
            if start is not None and name not in stored([*node.body, *node.orelse]):
                self.lowest[name] = start
        node.body = [self.visit(s) for s in node.body]
        self.lowest = outer
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    def visit_While(self, node: ast.While) -> ast.While:
        outer = dict(self.lowest)
        for assigned in stored(node.body):
            self.lowest.pop(assigned, None)
        self.generic_visit(node)
        self.lowest = outer
        return node

    def start(self, loop: ast.For) -> int | None:
        """The least value ``loop``'s variable takes, where it is a ``range`` of a non-negative step and a start
        written as an int (0 where none is)."""
        call = loop.iter
        if not (isinstance(call, ast.Call) and not call.keywords and 1 <= len(call.args) <= 3 and
                self.resolve(call.func) in (range, pylang.prange)):
            return None
        if len(call.args) == 3 and not (_int(call.args[2]) or 0) > 0:
            return None
        return 0 if len(call.args) == 1 else _int(call.args[0])

    def visit_If(self, node: ast.If) -> ast.If:
        self.generic_visit(node)
        chain = [node]
        while len(chain[-1].orelse) == 1 and isinstance(chain[-1].orelse[0], ast.If):
            chain.append(chain[-1].orelse[0])
        if len(chain) < 2 or chain[-1].orelse:
            return node
        covered = [self.covered(link.test) for link in chain]
        variables = {found[0] for found in covered if found is not None}
        if None in covered or len(variables) != 1:
            return node
        lowest = self.lowest[variables.pop()]
        if _covers([interval for found in covered if found is not None for interval in found[1]], lowest):
            chain[-2].orelse = chain[-1].body  # the last test holds wherever those before it do not
            self.closed = True
        return node

    def covered(self, test: ast.expr) -> tuple[str, list[Interval]] | None:
        """The loop variable ``test`` compares with an int, and the ints where it holds; None for another test."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _FLIPPED):
            return None
        left, right, op = test.left, test.comparators[0], type(test.ops[0])
        if isinstance(right, ast.Name) and not isinstance(left, ast.Name):
            left, right, op = right, left, _FLIPPED[op]
        value = _int(right)
        if not isinstance(left, ast.Name) or left.id not in self.lowest or value is None:
            return None
        intervals: dict[type, list[Interval]] = {
            ast.Eq: [(value, value)], ast.NotEq: [(-math.inf, value - 1), (value + 1, math.inf)],
            ast.Lt: [(-math.inf, value - 1)], ast.LtE: [(-math.inf, value)], ast.Gt: [(value + 1, math.inf)],
            ast.GtE: [(value, math.inf)]}
        return left.id, intervals[op]


def _covers(intervals: list[Interval], lowest: int) -> bool:
    """Whether ``intervals`` hold every int from ``lowest`` on."""
    reached: float = lowest  # every int below it is covered
    for first, last in sorted(intervals):
        if first > reached:
            return False
        reached = max(reached, last + 1)
    return reached == math.inf


def _int(node: ast.expr) -> int | None:
    """The int ``node`` writes (``3``, ``-3``), if it writes one."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None
