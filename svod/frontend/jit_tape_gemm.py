"""An ``@`` of an ``@svod.jit`` function's array statement, as a phase of its own on a tape
(``svod.frontend.jit_tape``), so that its adjoint is matrix products (``svod.frontend.adjoint_gemm``).

svod rewrites ``h = np.maximum(x @ w + b, 0.0)`` into one loop nest whose work item sums a row of ``x`` times a
column of ``w`` and stores what the rest of the statement makes of the sum; differentiated as it stands, every
product's adjoint would be added atomically into both factors'. On a tape the sum goes into a temporary array
of its own, a phase before the rest, which reads it from there::

    for i in svod.prange(M):                       for i in svod.prange(M):             the product, a
        for j in svod.prange(N):                       for j in svod.prange(N):         matmul kernel
            r = _svod_np.float32(0)                        r = _svod_np.float32(0)
            for k in range(K):            ──▶              for k in range(K):
                r += x[i, k] * w[k, j]                         r += x[i, k] * w[k, j]
            h[i, j] = max(r + b[j], 0.0)                   _svod_gemm_r[i, j] = r
                                                   for i in svod.prange(M):             the rest, an
                                                       for j in svod.prange(N):         elementwise kernel
                                                           r = _svod_gemm_r[i, j]
                                                           h[i, j] = max(r + b[j], 0.0)

The sum is the same sum in the same order, so the values are the plan's. A product of arrays the phase writes,
or one whose loops hold more than the two factors' variables (a batch of matrices), stays as it was.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from svod.frontend.adjoint_gemm import contraction, prange_nest
from svod.frontend.names import loaded, stored, written
from svod.frontend.nodes import assign, copied, load, placed, subscript


@dataclass(frozen=True)
class Split:
    """A phase's first matrix product as a phase of its own (``product``), storing into ``temporary`` (of the
    lengths ``extents`` of its loops and the NumPy float type ``dtype`` the sum starts as), and the phase
    without it (``rest``)."""

    product: list[ast.stmt]
    rest: list[ast.stmt]
    temporary: str
    extents: tuple[ast.expr, ...]
    dtype: str


def gemm_split(statements: list[ast.stmt], is_prange: Callable[[ast.stmt], bool]) -> Split | None:
    """The first matrix product of ``statements`` that may run before them as a phase of its own (the module's
    docstring), or None."""
    changed = written(statements)
    for position, stmt in enumerate(statements):
        nest = prange_nest(stmt, is_prange)
        if not nest or not all(_from_zero(loop) for loop in nest):
            continue
        outer = [loop.target.id for loop in nest if isinstance(loop.target, ast.Name)]
        body = nest[-1].body
        for at in range(len(body) - 1):
            found = contraction(body[at], body[at + 1], outer)
            if found is None or {found.left.array, found.right.array} & (changed | stored(body[:at])):
                continue
            start = body[at]
            assert isinstance(start, ast.Assign)
            dtype = start.value.func.attr if isinstance(start.value, ast.Call) and isinstance(
                start.value.func, ast.Attribute) else None
            rest = body[at + 2:]
            if at == 0 and _stores(rest, found.total):
                return None  # a product already: its kernel's adjoint is matrix products
            if dtype is None or found.total not in loaded(rest) or found.total in stored(rest) \
                    or set(loaded([found.bound])) & (stored(body[:at]) | stored(statements[:position])):
                continue
            return _split(statements, position, len(nest), at, found.total, dtype)
    return None


def _split(statements: list[ast.stmt], position: int, depth: int, at: int, total: str, dtype: str) -> Split:
    """``statements`` with the sum at ``at`` of the innermost body of nest ``position`` (of ``depth`` loops)
    taken out."""
    temporary = f"_svod_gemm_{total.removeprefix('_svod_')}"
    product = copied(statements[position])
    remaining = copied(statements[position])
    nest, kept = _loops(product, depth), _loops(remaining, depth)
    index = [load(loop.target.id) for loop in nest if isinstance(loop.target, ast.Name)]
    inner = nest[-1].body
    inner[:] = [*inner[at:at + 2], *placed([assign(subscript(temporary, index, ast.Store()), load(total))],
                                           inner[at + 1])]
    body = kept[-1].body
    body[at:at + 2] = placed([assign(total, subscript(temporary, index))], body[at])
    extents = tuple(loop.iter.args[0] for loop in nest if isinstance(loop.iter, ast.Call))
    return Split([product], [*statements[:position], remaining, *statements[position + 1:]], temporary, extents,
                 dtype)


def _from_zero(loop: ast.For) -> bool:
    """Whether ``loop`` runs from 0 (``svod.prange(n)``): the temporary is as long as the loop's one bound, so a
    loop from another start (``svod.prange(1, n)``) would index past it."""
    return isinstance(loop.iter, ast.Call) and len(loop.iter.args) == 1 and not loop.iter.keywords


def _stores(rest: list[ast.stmt], total: str) -> bool:
    """Whether ``rest`` only stores ``total`` into an element."""
    return len(rest) == 1 and isinstance(rest[0], ast.Assign) and isinstance(rest[0].targets[0], ast.Subscript) \
        and isinstance(rest[0].value, ast.Name) and rest[0].value.id == total


def _loops(stmt: ast.stmt, depth: int) -> list[ast.For]:
    """The ``depth`` loops of a nest (each the only statement of the one around it)."""
    loops: list[ast.For] = []
    while len(loops) < depth:
        assert isinstance(stmt, ast.For)
        loops.append(stmt)
        stmt = stmt.body[0]
    return loops


__all__ = ["Split", "gemm_split"]
