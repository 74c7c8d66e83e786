"""A kernel's sums into its output, however numba users spell them, as the sum of a local that the loops fold.

``for r in range(k): out[i, j] += x[i, r] * w[r, j]`` writes memory every turn: the loop is carried, a load and
a store a turn, and never reaches the product's lowering that ``acc += ...; out[i, j] = acc`` reaches (a REDUCE
of the products, added to what ``out[i, j]`` held). The rewritings here turn the first into the second, on the
statements' syntax; the translator checks the names' values (``Accumulating._apart``) before using them:

- **held elements** (``held``): where every use of an array in some statements is one element, whose index
  those statements do not change, the element is a local of those statements: read before them where they may
  read it first, each store a conversion to the array's dtype (``Held``: the same rounding as the store), and
  stored back after them. No other name may reach the array's memory (kernel arguments never share memory:
  binding refuses it), and no use may sit under a condition (its index may be safe only there).
- **interchange** (``interchanged``): ``for r: left = x[i, r]; for j: out[i, j] += left * w[r, j]`` runs as
  ``for j: for r: ...``: each ``out[i, j]`` still adds its terms in the order of ``r``, since the index names
  ``j`` alone as one of its parts (distinct turns of ``j`` touch distinct elements).
- **fusion** (``fused``): consecutive loops over one range whose every use of an array they write is the
  turn's element (``out[i, j] = bias[j]``; the sum; ``out[i, j] = max(out[i, j], 0)``) run as one loop: turn
  ``j`` of the second reads only what turn ``j`` of the first wrote.

A held element's sum is then a reduction as a local's is (``svod.frontend.loops``): it starts from the element's
value and adds the sum of the terms, which, like every float sum svod folds, is reassociated (vectorised, and
blocked by the product's lowering, ``svod.codegen.matmul_blocks``): NaN and infinities propagate as the
sequential sum's do (a NaN term, or +inf and -inf both, give NaN in any order), while the rounding of finite
terms, and whether a sum of finite terms overflows, follow the reassociated order.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

from svod.dtype import DType
from svod.frontend.names import stored
from svod.frontend.nodes import copied, holds_call, statements_in, walk

__all__ = ["Held", "element_uses", "fused", "held", "interchanged", "mentions", "names", "rebinds_only",
           "stored_arrays"]

LEAVING = (ast.Break, ast.Continue, ast.Return, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
           ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await, ast.ClassDef, ast.comprehension,
           ast.NamedExpr, ast.Try, ast.With)
"""What leaves a region's straight path, or binds names other than by assignment: a region with one is not
rewritten."""
CONDITIONAL = (ast.If, ast.IfExp, ast.BoolOp)
"""Where a use of an element may run only under a condition."""
BOUND_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Attribute, ast.Subscript, ast.expr_context,
               ast.operator, ast.unaryop)
"""The syntax of a loop bound that may be compared before the loop: names, numbers, arithmetic and
``x.shape[k]`` (no call, which may draw, and no read of an element, which the region may write first)."""
INDEX_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.expr_context, ast.operator,
               ast.unaryop)
"""The syntax an element's index may use to be held: names, numbers and arithmetic (no call, no read)."""


Node = TypeVar("Node", bound=ast.AST)


class Held(ast.Assign):
    """``local = value`` converted to ``dtype`` first: a store into a held element, which rounds as the array's
    store would."""

    dtype: DType


def names(*nodes: ast.AST) -> set[str]:
    """Every name that ``nodes`` use or bind."""
    return {n.id for node in nodes for n in walk(node) if isinstance(n, ast.Name)}


def mentions(name: str, *nodes: ast.AST) -> int:
    """How many times ``nodes`` name ``name``."""
    return sum(isinstance(n, ast.Name) and n.id == name for node in nodes for n in walk(node))


def rebinds_only(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` names ``name`` only as a loop's variable, rebound before each turn reads it (``for name in
    range(...)``, also as a branch of an ``if``): no value ``name`` held before ``stmt`` is read by it or, where
    every later use is such a loop, after it."""
    if isinstance(stmt, ast.For):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name and name not in names(stmt.iter)
    if isinstance(stmt, ast.If):
        return name not in names(stmt.test) and \
            all(rebinds_only(each, name) for each in [*stmt.body, *stmt.orelse] if name in names(each))
    return False


def stored_arrays(region: Sequence[ast.stmt]) -> list[str]:
    """The names ``region`` stores elements of (``a[...] = v``, ``a[...] op= v``), in order of first store."""
    found: dict[str, None] = {}
    for stmt in region:
        for node in statements_in(stmt):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                written = target
                while isinstance(written, ast.Subscript):  # a[i][j] = v writes a
                    written = written.value
                    if isinstance(written, ast.Name):
                        found.setdefault(written.id)
    return list(found)


def element_uses(region: Sequence[ast.stmt], name: str) -> list[ast.Subscript] | None:
    """Every ``name[index]`` in ``region``; None where ``name`` is used otherwise (bare, an attribute, bound)."""
    parents = {child: node for stmt in region for node in walk(stmt) for child in ast.iter_child_nodes(node)}
    uses = []
    for stmt in region:
        for node in walk(stmt):
            if isinstance(node, ast.Name) and node.id == name:
                parent = parents.get(node)
                if not (isinstance(parent, ast.Subscript) and parent.value is node):
                    return None
                uses.append(parent)
    return uses


def _one_index(region: Sequence[ast.stmt], name: str) -> ast.expr | None:
    """The one index every use of ``name`` in ``region`` reads or writes, where that index is names and numbers
    that ``region`` does not bind; None otherwise, or where ``region`` leaves its path or never uses ``name``."""
    if any(isinstance(node, LEAVING) or (isinstance(node, ast.For) and not _is_range(node))
           for stmt in region for node in walk(stmt)):
        return None  # a prange's work items would each hold the element
    uses = element_uses(region, name)
    if not uses or len({ast.dump(use.slice) for use in uses}) != 1:
        return None
    index = uses[0].slice
    if not all(isinstance(node, INDEX_NODES) for node in walk(index)) or names(index) & stored(region):
        return None
    return index


def _conditional(region: Sequence[ast.stmt], name: str) -> bool:
    """Whether ``name`` is used under a condition in ``region`` (an ``if``, a conditional expression, ``and``)."""
    return any(isinstance(node, CONDITIONAL) and name in names(node) for stmt in region for node in walk(stmt))


def _stores_only(region: Sequence[ast.stmt], name: str) -> bool:
    """Whether every store of ``name`` in ``region`` is a statement of one target."""
    for stmt in region:
        for node in walk(stmt):
            if isinstance(node, ast.Assign) and len(node.targets) > 1 and name in names(*node.targets):
                return False
            if isinstance(node, ast.AnnAssign) and name in names(node.target):
                return False
    return True


def _touched_when(region: Sequence[ast.stmt], name: str, bound: set[str]) -> list[ast.expr] | None:
    """The conditions, all of which hold where ``region`` reads or writes ``name`` (none: always), on names
    ``region`` does not bind (in ``bound``): each loop's turning at least once, down to a statement of its own
    that uses ``name``; None where they are not that (the element used in two loops, a bound assigned)."""
    users = [stmt for stmt in region if name in names(stmt)]
    if any(not isinstance(stmt, ast.For) for stmt in users):
        return []
    if len(users) != 1 or not _is_range(users[0]):
        return None
    loop = users[0]
    assert isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
    turns = _turns(loop.iter.args)
    inner = _touched_when(loop.body, name, bound)
    if turns is None or names(turns) & bound or inner is None:
        return None
    return [turns, *inner]


def _turns(bounds: Sequence[ast.expr]) -> ast.expr | None:
    """``range(*bounds)`` turns at least once, as a comparison of the bounds; None where a bound calls or reads
    an element (its value may differ before the loop) or the step is not a constant."""
    if not 1 <= len(bounds) <= 3 or not all(isinstance(node, BOUND_NODES) and not (
            isinstance(node, ast.Subscript) and not isinstance(node.value, ast.Attribute))
            for bound in bounds for node in walk(bound)):
        return None
    start, stop = (ast.Constant(0), bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
    try:
        step = ast.literal_eval(bounds[2]) if len(bounds) == 3 else 1
    except ValueError:
        return None
    if type(step) is not int or step == 0:
        return None
    low, high = (start, stop) if step > 0 else (stop, start)
    return ast.Compare(copied(high), [ast.Gt()], [copied(low)])


def in_range_loop(region: Sequence[ast.stmt], name: str) -> bool:
    """Whether ``name`` is used inside a ``for ... in range(...)`` of ``region``."""
    return any(isinstance(node, ast.For) and _is_range(node) and name in names(*node.body)
               for stmt in region for node in walk(stmt))


def held(region: Sequence[ast.stmt], name: str, dtype: DType, ndim: int) -> list[ast.stmt] | None:
    """``region`` with the one element of array ``name`` (of ``ndim`` dimensions) it uses held in a local (see
    the module), or None where it does not qualify by its syntax (a row, ``out[i]`` of a matrix, is not an
    element). The local is named as the element (``out[i, j]``), so a message about it reads as the source."""
    index = _one_index(region, name)
    touched = _touched_when(region, name, stored(region))
    if index is None or touched is None or _conditional(region, name) or not _stores_only(region, name) \
            or name not in stored_arrays(region):
        return None
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    if len(parts) != ndim:
        return None
    local = f"{name}[{', '.join(ast.unparse(part) for part in parts)}]"
    holding = _Holding(name, local, dtype)
    body: list[ast.stmt] = [holding.visit(copied(stmt)) for stmt in region]
    first = region[0]
    written_first = isinstance(first, ast.Assign) and len(first.targets) == 1 \
        and isinstance(first.targets[0], ast.Subscript) and isinstance(first.targets[0].value, ast.Name) \
        and first.targets[0].value.id == name and name not in names(first.value)
    element: ast.expr = ast.Subscript(ast.Name(name, ast.Load()), copied(index), ast.Load())
    after: ast.stmt = ast.Assign([ast.Subscript(ast.Name(name, ast.Load()), copied(index), ast.Store())],
                                 ast.Name(local, ast.Load()))
    if touched:  # Python touches the element only where its loops turn: a sum of no terms does not
        when = functools.reduce(lambda a, b: ast.BinOp(a, ast.BitAnd(), b), touched)
        element, after = ast.IfExp(when, element, ast.Constant(0)), ast.If(copied(when), [after], [])
    before = [] if written_first else [_at(ast.Assign([ast.Name(local, ast.Store())], element), first)]
    return [*before, *body, _at(after, region[-1])]


class _Holding(ast.NodeTransformer):
    """Uses of array ``name``'s element as uses of ``local``; stores as ``Held`` conversions."""

    def __init__(self, name: str, local: str, dtype: DType) -> None:
        self.name, self.local, self.dtype = name, local, dtype

    def _mine(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == self.name

    def _held(self, value: ast.expr, where: ast.stmt) -> ast.stmt:
        stmt = Held([ast.Name(self.local, ast.Store())], value)
        stmt.dtype = self.dtype
        return _at(stmt, where)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        return _at(ast.Name(self.local, ast.Load()), node) if self._mine(node) else self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if len(node.targets) == 1 and self._mine(node.targets[0]):
            return self._held(self.visit(node.value), node)
        return self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if self._mine(node.target):
            value = _at(ast.BinOp(ast.Name(self.local, ast.Load()), node.op, self.visit(node.value)), node)
            assert isinstance(value, ast.expr)
            return self._held(value, node)
        return self.generic_visit(node)


class _Renaming(ast.NodeTransformer):
    """Every use of name ``old`` as ``new``."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return _at(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _at(node: Node, where: ast.AST) -> Node:
    return ast.fix_missing_locations(ast.copy_location(node, where))


def _is_range(node: ast.AST) -> bool:
    """Whether ``node`` is ``for name in range(...)`` without ``else``."""
    return isinstance(node, ast.For) and isinstance(node.target, ast.Name) and not node.orelse \
        and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range" \
        and not node.iter.keywords


def _accumulated(stmt: ast.stmt) -> tuple[str, ast.expr, ast.expr] | None:
    """``(array, index, term)`` of ``a[index] += term`` / ``-=``, or ``a[index] = a[index] + term``; else None."""
    target: ast.expr
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Add, ast.Sub)):
        target, term = stmt.target, stmt.value
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.BinOp) \
            and isinstance(stmt.value.op, (ast.Add, ast.Sub)) \
            and ast.dump(stmt.value.left) == ast.dump(_loaded(stmt.targets[0])):
        target, term = stmt.targets[0], stmt.value.right
    else:
        return None
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
        return None
    return target.value.id, target.slice, term


def _loaded(target: ast.expr) -> ast.expr:
    loaded = copied(target)
    for node in walk(loaded):
        if hasattr(node, "ctx"):
            node.ctx = ast.Load()
    return loaded


def _names_part(index: ast.expr, variable: str) -> bool:
    """Whether ``index`` has ``variable`` alone as one of its parts (distinct values, distinct elements)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return any(isinstance(part, ast.Name) and part.id == variable for part in parts)


def interchanged(loop: ast.stmt) -> ast.For | None:
    """``for r: <locals>; for j: a[.., j, ..] += term`` as ``for j: for r: <locals>; a[...] += term`` (see the
    module), or None where the nest is not that: the locals are assignments of names computed without calls,
    without ``a`` or ``j``; the inner range reads neither ``r`` nor the locals, the outer not ``j``; the index reads
    neither ``r`` nor the locals."""
    if not _is_range(loop):
        return None
    assert isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
    *pre, inner = loop.body
    if not isinstance(inner, ast.For) or not _is_range(inner) or len(inner.body) != 1:
        return None
    assert isinstance(inner.target, ast.Name)
    r, j = loop.target.id, inner.target.id
    if not all(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) for s in pre):
        return None
    locals_ = stored(pre)
    found = _accumulated(inner.body[0])
    if found is None or r == j:
        return None
    array, index, term = found
    values = [s.value for s in pre]  # type: ignore[attr-defined]
    if holds_call(term, *values) or array in names(term, *values) | locals_ or j in names(*values) | locals_ \
            or names(index) & (locals_ | {r}) or names(inner.iter) & (locals_ | {r, array}) \
            or j in names(loop.iter) or not _names_part(index, j):
        return None
    swapped = ast.For(loop.target, loop.iter, [*pre, inner.body[0]], [], None)
    return _at(ast.For(inner.target, inner.iter, [_at(swapped, loop)], [], None), inner)


def fused(first: ast.stmt, second: ast.stmt, pure: Callable[[ast.Call], bool]) -> ast.For | None:
    """The loops ``first`` and ``second`` over one range as one loop (see the module), or None where they are
    not: each array either writes is used, in both, only at one index with the loop's variable alone as one of
    its parts; neither binds a name the other uses or the range reads; every call is ``pure`` (no draw, whose
    order would change)."""
    if not (_is_range(first) and _is_range(second)):
        return None
    assert isinstance(first, ast.For) and isinstance(second, ast.For) and isinstance(first.target, ast.Name)
    assert isinstance(second.target, ast.Name)
    if ast.dump(first.iter) != ast.dump(second.iter):
        return None
    if first.target.id != second.target.id:  # the second's variable renamed as the first's, where it is free
        if first.target.id in names(second):
            return None
        second = _Renaming(second.target.id, first.target.id).visit(copied(second))
        assert isinstance(second, ast.For)
    j, both = first.target.id, [*first.body, *second.body]
    if any(isinstance(node, LEAVING) for stmt in both for node in walk(stmt)):
        return None
    if stored(first.body) & names(*second.body) or stored(second.body) & names(*first.body) \
            or names(first.iter) & stored(both) or j in stored(both):
        return None
    if not all(pure(n) for stmt in both for n in walk(stmt) if isinstance(n, ast.Call)):
        return None
    for array in stored_arrays(both):
        index = _one_index(both, array)
        if index is None or not _names_part(index, j):
            return None
    return _at(ast.For(first.target, first.iter, both, [], None), first)
