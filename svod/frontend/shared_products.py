"""One pass over a matrix for its two products with vectors: ``r @ A`` and ``A @ p`` of one ``@svod.jit`` function
(npbench's bicg; or ``x1 += A @ y1`` and ``x2 += y2 @ A``, its mvt), which the array front end writes as two
nests, each reading all of ``A``::

    for j in prange(M):                              for i in prange(N):
        s = 0                                            q = 0
        for k in range(N): s += r[k] * A[k, j]           for k in range(M): q += A[i, k] * p[k]
        x[j] = s                                         y[i] = q

On a CPU a matrix larger than its caches is read from memory at each pass, so two passes cost twice one. Where
both nests stand in one block with only allocations between them, they become one pass over ``A``'s rows, in
blocks: each block's work item computes its rows' ``y[i]`` and adds ``r[i] * A[i, :]`` into a row of partial
column sums of its own (``part[b, :]``), which a second nest adds up::

    for b in prange(B):
        part[b, :] = 0
        for i in <block b's rows>:
            q = 0
            for j in range(M): q += A[i, j] * p[j]; part[b, j] += r[i] * A[i, j]
            y[i] = q
    for j in prange(M): s = 0; for b in range(B): s += part[b, j]; x[j] = s

Each product's terms are the written ones (the same operands, types and order); the column sums are added in
another order, which ``@`` does not fix (NumPy's BLAS adds in its own). Only where the device runs kernels on a
few host threads (``Limits.threads``: on a GPU ``B`` work items would leave it idle), lets a work item's loops
run their course, and both sizes are numbers.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from svod.frontend.accumulations import names, stored_arrays
from svod.frontend.array_exprs import numpy
from svod.frontend.names import renamed
from svod.frontend.nest_fusion import Limits, allocation, is_prange, with_blocks
from svod.frontend.nodes import assign, call, constant, copied, for_loop, load, store, subscript
from svod.frontend.phases import resolve, scalar_type

ROWS_PER_BLOCK = 64
"""The fewest rows a block sums (fewer blocks for a short matrix: each block's partial row is a pass of its own)."""
BLOCKS_PER_THREAD = 8
"""Blocks for each thread, so that one a busy core holds back delays little (``svod.backends.cpu_team``)."""


def shared_products(body: Sequence[ast.stmt], values: Mapping[str, Any], limits: Limits) -> list[ast.stmt]:
    """``body`` with each pair of a matrix's row and column products made one pass (the module docstring), and the
    blocks of its loops and ``if``s in turn; ``values`` the global names' values."""
    if limits.threads is None or limits.loop_turns is not None:
        return list(body)
    return _Sharing(values, limits.threads, names(*body)).block(body)


@dataclass(frozen=True)
class _Product:
    """``for v in prange(extent): acc = dtype(0); for k in range(length): acc += term; out[v] = acc`` (or
    ``out[v] += acc``): a matrix's product with a vector, ``row`` where the matrix is indexed ``[v, k]`` (``A @ p``),
    else ``[k, v]``."""

    statement: ast.For
    variable: str
    inner: str
    extent: int
    length: int
    acc: str
    zero: ast.Call
    """What the sum starts at: ``dtype(0)``, whose ``dtype`` the partial sums are made of."""
    term: ast.expr
    out: str
    added: bool
    """Whether the sum is added to ``out[v]`` (``x += A @ p``) rather than stored."""
    matrix: str
    row: bool


class _Sharing:
    def __init__(self, values: Mapping[str, Any], threads: int, taken: set[str]) -> None:
        self.values, self.threads = values, threads
        self.taken = taken
        """The names the function uses, and those this made."""

    def block(self, body: Sequence[ast.stmt]) -> list[ast.stmt]:
        out = [self.inside(stmt) for stmt in body]
        products = [_product(stmt, self.values) for stmt in out]
        for first, product in enumerate(products):
            if product is None:
                continue
            for second in range(first + 1, len(out)):
                other = products[second]
                if other is not None:
                    if _siblings(product, other, out[first + 1:second]):
                        column, row = (product, other) if other.row else (other, product)
                        return [*out[:first], *out[first + 1:second], *self.one_pass(column, row),
                                *self.block(out[second + 1:])]
                    break
                if not allocation(out[second], self.values):
                    break
        return out

    def inside(self, stmt: ast.stmt) -> ast.stmt:
        if not isinstance(stmt, (ast.For, ast.While, ast.If)) or is_prange(stmt, self.values):
            return stmt
        return with_blocks(stmt, self.block)

    def fresh(self, stem: str) -> str:
        k = 0
        while f"_svod_{stem}{k}" in self.taken:
            k += 1
        self.taken.add(f"_svod_{stem}{k}")
        return f"_svod_{stem}{k}"

    def one_pass(self, column: _Product, row: _Product) -> list[ast.stmt]:
        """The two nests of ``column`` (``r @ A``) and ``row`` (``A @ p``) as one pass over the rows."""
        rows, columns = row.extent, column.extent
        per = max(ROWS_PER_BLOCK, -(-rows // (BLOCKS_PER_THREAD * self.threads)))
        blocks = -(-rows // per)
        part, b, i, j, acc = (self.fresh(stem) for stem in ("part", "b", "i", "j", "acc"))
        allocated = call(numpy("empty"), constant((blocks, columns)), copied(column.zero.func))
        first = ast.BinOp(load(b), ast.Mult(), constant(per))
        span = call("range", first, call("min", ast.BinOp(copied(first), ast.Add(), constant(per)),
                                         constant(rows)))
        partial = subscript(part, [load(b), load(j)], ast.Store())
        sweep = for_loop(j, call("range", constant(columns)), [
            ast.AugAssign(store(row.acc), ast.Add(), renamed(row.term, {row.inner: j, row.variable: i})),
            ast.AugAssign(partial, ast.Add(), renamed(column.term, {column.inner: i, column.variable: j}))])
        block_rows = for_loop(i, span, [assign(row.acc, copied(row.zero)), sweep,
                                        _stored(row, i, load(row.acc))])
        cleared = for_loop(j, call("range", constant(columns)), [assign(copied(partial),
                                                                        copied(column.zero))])
        passing = for_loop(b, _prange(row, blocks), [cleared, block_rows])
        summing = for_loop(j, _prange(column, columns), [
            assign(acc, copied(column.zero)),
            for_loop(b, call("range", constant(blocks)),
                     [ast.AugAssign(store(acc), ast.Add(), subscript(part, [load(b), load(j)]))]),
            _stored(column, j, load(acc))])
        return [ast.fix_missing_locations(ast.copy_location(s, row.statement))
                for s in (assign(part, allocated), passing, summing)]


def _product(stmt: ast.stmt, values: Mapping[str, Any]) -> _Product | None:
    """``stmt`` read as a matrix's product with a vector (``_Product``); None where it is not one."""
    if not is_prange(stmt, values) or len(stmt.body) != 3:  # type: ignore[attr-defined]
        return None
    assert isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and isinstance(stmt.iter, ast.Call)
    start, inner, stored = stmt.body
    extent = _number(stmt.iter.args)
    if extent is None or not (isinstance(start, ast.Assign) and len(start.targets) == 1
                              and isinstance(start.targets[0], ast.Name) and isinstance(start.value, ast.Call)
                              and scalar_type(resolve(values, start.value.func))):
        return None
    acc, v = start.targets[0].id, stmt.target.id
    if not (isinstance(inner, ast.For) and isinstance(inner.target, ast.Name) and not inner.orelse
            and isinstance(inner.iter, ast.Call) and resolve(values, inner.iter.func) is range
            and not inner.iter.keywords and len(inner.body) == 1):
        return None
    length, k, added = _number(inner.iter.args), inner.target.id, inner.body[0]
    if length is None or not (isinstance(added, ast.AugAssign) and isinstance(added.op, ast.Add)
                              and isinstance(added.target, ast.Name) and added.target.id == acc
                              and isinstance(added.value, ast.BinOp) and isinstance(added.value.op, ast.Mult)):
        return None
    if isinstance(stored, ast.Assign) and len(stored.targets) == 1:
        target, added_to = stored.targets[0], False
    elif isinstance(stored, ast.AugAssign) and isinstance(stored.op, ast.Add):
        target, added_to = stored.target, True
    else:
        return None
    out = _element(target, (v,))
    if out is None or not (isinstance(stored.value, ast.Name) and stored.value.id == acc):
        return None
    factors = (added.value.left, added.value.right)
    vector = [f for f in factors if _element(f, (k,)) is not None]
    matrix = [f for f in factors if _element(f, (v, k)) is not None or _element(f, (k, v)) is not None]
    if len(vector) != 1 or len(matrix) != 1 or vector[0] is matrix[0]:
        return None
    row = _element(matrix[0], (v, k)) is not None
    name = _element(matrix[0], (v, k) if row else (k, v))
    assert name is not None
    return _Product(stmt, v, k, extent, length, acc, start.value, added.value, out, added_to, name, row)


def _siblings(column: _Product, row: _Product, between: Sequence[ast.stmt]) -> bool:
    """Whether one of the two products is of each kind over one matrix of the other's sizes, each writing only its
    output, which the other does not read, nor the allocations between them bind (they move before both: an
    allocation's shape and values are the host's to know before the run, so none reads either output's elements)."""
    if column.row == row.row:
        return False
    if column.row:
        column, row = row, column
    if column.matrix != row.matrix or (column.extent, column.length) != (row.length, row.extent):
        return False
    outputs = {column.out, row.out}
    bound = {s.targets[0].id for s in between if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)}
    return len(outputs) == 2 and row.out not in names(column.statement) and column.out not in names(row.statement) \
        and not bound & (names(column.statement, row.statement) - outputs) \
        and set(stored_arrays([column.statement, row.statement])) == outputs


def _element(node: ast.expr, index: tuple[str, ...]) -> str | None:
    """The array ``node`` reads or writes at exactly the names ``index`` (``a[v]``, ``A[v, k]``), else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return None
    given = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    named = [g.id if isinstance(g, ast.Name) else None for g in given]
    return node.value.id if named == list(index) else None


def _number(args: Sequence[ast.expr]) -> int | None:
    """The length of ``range(args)`` where it is ``range(n)`` of an int constant."""
    if len(args) == 1 and isinstance(args[0], ast.Constant) and type(args[0].value) is int:
        return args[0].value
    return None


def _prange(product: _Product, extent: int) -> ast.Call:
    """``prange(extent)``, spelled as the product's nest spells it."""
    assert isinstance(product.statement.iter, ast.Call)
    return ast.Call(copied(product.statement.iter.func), [constant(extent)], [])


def _stored(product: _Product, at: str, total: ast.expr) -> ast.stmt:
    """``out[at] = total``, or ``out[at] += total`` where the product adds its sum to its output."""
    element = subscript(product.out, [load(at)], ast.Store())
    return ast.AugAssign(element, ast.Add(), total) if product.added else ast.Assign([element], total)
