"""A host loop whose turns are independent, as the array statements of all its turns at once.

A numba user writes a batch of small products as a loop (npbench's doitgen)::

    for r in range(NR):                                  tmp = A[0:NR, 0:NQ, :] @ C4
        for q in range(NQ):                      ->      A[0:NR, 0:NQ, :] = tmp
            tmp = A[r, q, :] @ C4
            A[r, q, :] = tmp

Turn by turn that is NR * NQ products of a row with a matrix, two kernels each; widened, it is one batched
product (the GEMM path) and one copy. The rewrite is exact where each turn touches only its own block of every
array the loop writes, which is what ``widened`` checks:

- the loops are a perfect nest over ``range(stop)`` or ``range(start, stop)``, bounds the host knows and no
  loop's variable sets, within the length of every axis they index;
- each variable is read only as a whole index of an array, and every such index names all of the nest's
  variables in order at its first axes, the rest of the axes whole (``A[r, q]``, ``A[r, q, :]``): turn
  ``(r, q)``'s block of ``A``;
- an array the loop writes (a base array, not a view) is read only so, by its own name: turn ``(r, q)`` reads and
  writes block ``(r, q)`` alone, and no other name that may view it is read;
- the statements are assignments of elementwise operators and ufuncs and of products with a matrix the loop
  does not write; a value's turn axes stand first wherever it meets another (every value that varies by turn
  has the result's number of axes, so broadcasting lines the turn axes up), and a product's batch is at most 3-D;
- a name the loop binds (a variable, a temporary) is read nowhere after it (but as another loop's variable):
  widened, a temporary holds every turn's value, where Python leaves the last turn's.

Then statement ``k`` of turn ``t`` sees block ``t`` as statements ``1 .. k-1`` of turn ``t`` left it, in either
order of running, so each statement runs for every turn before the next one does (loop distribution) and its
turn loops become its slices.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.frontend import extents
from svod.frontend.array_exprs import Expr, base_name
from svod.frontend.names import stored
from svod.frontend.nodes import copied, stands_for, walk
from svod.frontend.phases import resolve

BATCH_AXES = 3
"""The most axes a product's widened operand may have (``@`` of a batch of matrices)."""


class _NotWidenedError(Exception):
    """The loop is not widened: it runs turn by turn, as it did."""


@dataclass
class _Shape:
    """The shape of a value in one turn, and whether it varies from turn to turn."""

    axes: tuple[int, ...]
    varies: bool


@dataclass
class _Nest:
    """What ``widened`` learns of a loop nest."""

    variables: list[str]
    bounds: list[tuple[ast.expr | None, ast.expr]]
    """Each loop's ``range`` arguments as written: (start or None, stop)."""
    arrays: dict[str, Expr]
    globals: dict[str, Any]
    """The function's globals."""
    bound: set[str]
    """Every name the body binds."""
    temporaries: dict[str, _Shape] = field(default_factory=dict)
    """The names the body has bound so far, with their values' shapes."""
    written: set[str] = field(default_factory=set)
    """The arrays the loop stores into."""
    read: set[str] = field(default_factory=set)
    """The arrays the loop reads whole (not a turn's block)."""
    blocks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The arrays the loop reads or writes a turn's block of, with their shapes (the bounds are checked
    against their leading axes)."""
    views: set[str] = field(default_factory=set)
    """The temporaries that are another array's memory (``t = A[r, :]``): updated in place, they would write it."""
    sizes: list[int] = field(default_factory=list)
    """The number of elements each temporary holds, widened."""


def widened(loop: ast.stmt, function: ast.FunctionDef, arrays: dict[str, Expr], names: dict[str, Any],
            on_host: Callable[[ast.expr], Any]) -> list[ast.stmt] | None:
    """The statements ``loop`` (a statement of ``function``) runs, widened over its turns (the module
    docstring), or None where it is kept. ``arrays`` are the rewriting's arrays by name, ``names`` the function's
    globals, ``on_host`` computes a bound on the host (recording what it read)."""
    if not isinstance(loop, ast.For):
        return None
    try:
        nest, body = _nest(loop, arrays, names)
        for stmt in body:
            _statement(stmt, nest)
        _independent(nest)
        if _read_after(function, loop):
            raise _NotWidenedError
        if not _bounded(nest, on_host):
            return []  # no turn: nothing runs
    except _NotWidenedError:
        return None
    return [_wide(stmt, nest) for stmt in body]


def bound_names(loop: ast.For) -> set[str]:
    """The names a nest's bounds read, which the host reads before the run: another value is another plan,
    even where the loop has no turn (rewritten to no statement, which reads none)."""
    return {n.id for f in walk(loop) if isinstance(f, ast.For) for n in walk(f.iter) if isinstance(n, ast.Name)}


def _nest(loop: ast.For, arrays: dict[str, Expr], names: dict[str, Any]) -> tuple[_Nest, list[ast.stmt]]:
    """The perfect nest of ``range`` loops ``loop`` starts, and the innermost body."""
    variables: list[str] = []
    bounds: list[tuple[ast.expr | None, ast.expr]] = []
    node: ast.stmt = loop
    while isinstance(node, ast.For):
        call = node.iter
        if not (isinstance(node.target, ast.Name) and isinstance(call, ast.Call) and resolve(names, call.func) is range
                and 1 <= len(call.args) <= 2 and not call.keywords and not node.orelse
                and node.target.id not in variables):
            raise _NotWidenedError
        if any(isinstance(n, ast.Name) and n.id in variables for a in call.args for n in walk(a)):
            raise _NotWidenedError  # a triangular nest
        variables.append(node.target.id)
        bounds.append((call.args[0] if len(call.args) == 2 else None, call.args[-1]))
        if len(node.body) != 1 or not isinstance(node.body[0], ast.For):
            break
        node = node.body[0]
    body = node.body  # type: ignore[attr-defined]
    if len(variables) > BATCH_AXES or any(not isinstance(s, (ast.Assign, ast.AugAssign)) for s in body):
        raise _NotWidenedError
    bound = stored(body)
    if any(isinstance(n, ast.Name) and n.id in bound for pair in bounds for b in pair if b is not None
           for n in walk(b)):
        raise _NotWidenedError  # a bound the body changes: Python's range read it once, a slice reads it again
    return _Nest(variables, bounds, arrays, names, bound), body


def _statement(stmt: ast.stmt, nest: _Nest) -> None:
    """Check one statement of the body and learn what it binds."""
    if isinstance(stmt, ast.Assign):
        if len(stmt.targets) != 1:
            raise _NotWidenedError
        target, value = stmt.targets[0], _shape(stmt.value, nest)
    else:
        assert isinstance(stmt, ast.AugAssign)
        target, value = stmt.target, _shape(stmt.value, nest)
    if isinstance(target, ast.Name):
        if isinstance(stmt, ast.AugAssign):
            held = nest.temporaries.get(target.id)
            if held is None or target.id in nest.views or _elementwise([held, value]).axes != held.axes:
                raise _NotWidenedError
            return
        if target.id in nest.variables or target.id in nest.arrays or not value.varies:
            raise _NotWidenedError
        nest.temporaries[target.id] = value
        if isinstance(stmt.value, (ast.Subscript, ast.Name)):
            nest.views.add(target.id)  # (a view of a block, or another name's array: no update may write through)
        nest.sizes.append(int(np.prod(value.axes, dtype=np.int64)))
        return
    block = _block(target, nest)
    if block is None or not isinstance(target, ast.Subscript) or not isinstance(target.value, ast.Name):
        raise _NotWidenedError
    name = target.value.id
    if base_name(nest.arrays[name]) != name:
        raise _NotWidenedError  # a view: another name's block
    if _elementwise([block, value]).axes != block.axes:
        raise _NotWidenedError
    nest.written.add(name)


def _shape(node: ast.expr, nest: _Nest) -> _Shape:
    """The shape of ``node``'s value in one turn; ``_NotWidenedError`` where it is not an expression widening keeps."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        return _Shape((), False)
    if isinstance(node, ast.Name):
        if node.id in nest.variables:
            raise _NotWidenedError  # a variable read as a number
        if node.id in nest.temporaries:
            return nest.temporaries[node.id]
        if node.id in nest.bound:
            raise _NotWidenedError  # read before the turn binds it: the turn before's value
        array = nest.arrays.get(node.id)
        if array is None:
            if not isinstance(nest.globals.get(node.id, 0), (int, float, np.number)):
                raise _NotWidenedError  # a module's array, say: of a shape the rewriting does not hold
            return _Shape((), False)  # a number the loop does not bind
        nest.read.add(node.id)
        return _Shape(_static(array.shape), False)
    if isinstance(node, ast.Subscript):
        block = _block(node, nest)
        if block is None:
            raise _NotWidenedError
        return block
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        return _shape(node.operand, nest)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return _product(_shape(node.left, nest), _shape(node.right, nest), len(nest.variables))
    if isinstance(node, ast.BinOp):
        return _elementwise([_shape(node.left, nest), _shape(node.right, nest)])
    if isinstance(node, ast.Call) and not node.keywords:
        ufunc = resolve(nest.globals, node.func)
        if isinstance(ufunc, np.ufunc) and ufunc.nin == len(node.args) and ufunc.nout == 1:
            return _elementwise([_shape(a, nest) for a in node.args])
    raise _NotWidenedError


def _block(node: ast.expr, nest: _Nest) -> _Shape | None:
    """The shape of a turn's block where ``node`` is ``x[v1, ..., vk, :, ...]`` of an array ``x`` with the
    nest's variables in order; ``_NotWidenedError`` where it is a subscript of another kind; None where it is none."""
    if not isinstance(node, ast.Subscript):
        return None
    index = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    if not any(isinstance(n, ast.Name) and n.id in nest.variables for n in walk(node.slice)):
        raise _NotWidenedError  # an array's part the same in every turn: not one widening reads
    k = len(nest.variables)
    leading = [i.id if isinstance(i, ast.Name) else None for i in index[:k]]
    whole = all(isinstance(i, ast.Slice) and i.lower is i.upper is i.step is None for i in index[k:])
    array = nest.arrays.get(node.value.id) if isinstance(node.value, ast.Name) else None
    if leading != nest.variables or not whole or array is None or len(index) > len(array.shape):
        raise _NotWidenedError
    assert isinstance(node.value, ast.Name)
    if node.value.id in nest.temporaries:
        raise _NotWidenedError
    shape = nest.blocks[node.value.id] = _static(array.shape)
    return _Shape(shape[k:], True)


def _static(shape: Sequence[Any]) -> tuple[int, ...]:
    if not extents.is_static(tuple(shape)):
        raise _NotWidenedError
    return tuple(extents.numbers(tuple(shape)))


def _elementwise(operands: list[_Shape]) -> _Shape:
    """The shape of an elementwise op of ``operands``: NumPy's broadcast, each operand that varies by turn of
    the result's number of axes (so its turn axes, widened, stand where the result's do)."""
    try:
        axes = tuple(np.broadcast_shapes(*(o.axes for o in operands)))
    except ValueError:
        raise _NotWidenedError from None
    if any(o.varies and len(o.axes) != len(axes) for o in operands):
        raise _NotWidenedError
    return _Shape(axes, any(o.varies for o in operands))


def _product(left: _Shape, right: _Shape, turns: int) -> _Shape:
    """``left @ right`` where ``left`` varies by turn (a row or a matrix) and ``right`` is a matrix, the same in
    every turn or a matrix of each turn's, the batch widened within ``BATCH_AXES``."""
    if not left.varies or len(right.axes) != 2 or len(left.axes) not in (1, 2) or left.axes[-1] != right.axes[0]:
        raise _NotWidenedError
    if turns + len(left.axes) > BATCH_AXES or (right.varies and len(left.axes) != 2):
        raise _NotWidenedError
    return _Shape((*left.axes[:-1], right.axes[1]), True)


def _independent(nest: _Nest) -> None:
    """Keep a loop whose turns may meet: one that writes an array it reads whole, or reads through another name
    that may view it (``base_name``), where a turn's block is another turn's."""
    if not nest.written:
        raise _NotWidenedError
    if any(base_name(nest.arrays[name]) in nest.written for name in nest.read):
        raise _NotWidenedError
    if any(base_name(nest.arrays[name]) in nest.written - {name} for name in nest.blocks):
        raise _NotWidenedError


def _bounded(nest: _Nest, on_host: Callable[[ast.expr], Any]) -> bool:
    """Whether the nest turns at all, from its bounds computed on the host: each an int, a start not negative
    (Python counts a negative index from the end), and every stop within the axes the variable indexes; a
    widened temporary no larger than the largest array the loop writes."""
    stops: list[int] = []
    for start, stop in nest.bounds:
        lo = 0 if start is None else _host_int(start, on_host)
        hi = _host_int(stop, on_host)
        if hi <= lo:
            return False
        if lo < 0:
            raise _NotWidenedError
        stops.append(hi)
    if any(stop > size for shape in nest.blocks.values() for stop, size in zip(stops, shape, strict=False)):
        raise _NotWidenedError
    turns = int(np.prod(stops, dtype=np.int64))
    largest = max(int(np.prod(_static(nest.arrays[name].shape), dtype=np.int64)) for name in nest.written)
    if any(size * turns > largest for size in nest.sizes):
        raise _NotWidenedError
    return True


def _host_int(node: ast.expr, on_host: Callable[[ast.expr], Any]) -> int:
    try:
        value = on_host(node)
    except Exception:
        raise _NotWidenedError from None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _NotWidenedError
    return int(value)


def _read_after(function: ast.FunctionDef, loop: ast.For) -> bool:
    """Whether ``function`` reads a name ``loop`` binds anywhere outside it, but in the body of another ``for``
    loop that binds the name as its own variable. ``loop`` may be a renamed copy of the function's statement:
    the statement is found by its place, and its own names are asked for."""
    place = (loop.lineno, loop.col_offset)
    found = [n for n in walk(function) if isinstance(n, ast.For) and (n.lineno, n.col_offset) == place]
    if len(found) != 1:
        return True  # (an inlined function's loop, met twice: its place names neither)
    original = found[0]
    names = stored([original])

    def reads(node: ast.AST, bound: frozenset[str]) -> bool:
        if node is original:
            return False
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            inner = bound | {node.target.id}
            return reads(node.iter, bound) or any(reads(s, inner) for s in node.body) or \
                any(reads(s, bound) for s in node.orelse)
        if isinstance(node, ast.Name) and node.id in names and node.id not in bound:
            return True
        return any(reads(child, bound) for child in ast.iter_child_nodes(node))

    return any(reads(stmt, frozenset()) for stmt in function.body)


def _wide(stmt: ast.stmt, nest: _Nest) -> ast.stmt:
    """``stmt`` over every turn: each variable, where it indexes, the slice of its loop's turns."""
    slices = {v: ast.Slice(None if start is None else copied(start), copied(stop)) for v, (start, stop) in
              zip(nest.variables, nest.bounds, strict=True)}

    class Widen(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.copy_location(slices[node.id], node) if node.id in slices else node

    return stands_for(ast.fix_missing_locations(Widen().visit(copied(stmt))), stmt)
