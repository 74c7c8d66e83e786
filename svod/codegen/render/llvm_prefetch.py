"""Which buffer loads an LLVM kernel prefetches, and how far ahead: operands a register tile's loop strides
through further apart than a CPU's own prefetcher follows (``strided_operands``), and rows a loop over rows
walks a page or more apart (``row_operands``)."""

from __future__ import annotations

from collections.abc import Iterator

from svod.codegen.indexing import Monomial, Poly, to_poly
from svod.codegen.render.base import inside_loops
from svod.device.caps import CACHE_LINE
from svod.ir import Ops, UOp
from svod.ir.uop import memory_of, pointee

__all__ = ["PREFETCH_STEPS", "PREFETCH_STRIDE_BYTES", "ROWS_AHEAD", "poly_constant", "row_operands",
           "strided_operands"]


PREFETCH_STEPS = 8
"""How many steps of a register tile's loop ahead a strided operand is prefetched."""
ROWS_AHEAD = 2
"""How many rows ahead ``row_operands`` prefetches: two ran fastest of one, two and four rows ahead (a
softmax); prefetching the output's rows for writing as well ran slower."""
PREFETCH_STRIDE_BYTES = 1024
"""The stride (bytes per step of a tile's loop) from which an operand is prefetched: a CPU's own stride prefetcher
follows short strides, not a matmul's rows of ``b`` 4 KiB apart, which each step then waited for."""


def strided_operands(linear: tuple[UOp, ...], tile_loops: set[UOp]) -> dict[UOp, Poly]:
    """The INDEXes of buffer loads that a register tile's loop moves by a stride of at least
    ``PREFETCH_STRIDE_BYTES`` (where the stride is a variable's, that it may reach), one per cache line of
    those that differ by a constant, with how many elements ahead that loop prefetches them: ``PREFETCH_STEPS``
    steps (a prefetch is a hint: it touches no memory a program can see and never faults). A variable stride
    is one of the kernel's variables alone (a symbolic matmul's ``b``, read where it is or packed), computed
    where it is prefetched. A loop of ``PREFETCH_STEPS`` turns or fewer reads nothing that far ahead, and
    prefetches nothing (a streamed ``v @ A``'s 8 rows a pass ran slower with the next pass's rows
    prefetched)."""
    found: dict[UOp, Poly] = {}
    lines: dict[tuple[UOp, frozenset[tuple[Monomial, int]]], list[tuple[Poly, set[int]]]] = {}
    for index, loops in _buffer_loads(linear):
        if loops[-1] not in tile_loops:
            continue
        if loops[-1].src[0].op is Ops.CONST and loops[-1].src[0].arg <= PREFETCH_STEPS:
            continue
        offset, itemsize = to_poly(index.src[1]), pointee(index).itemsize
        parts = offset.split(loops[-1])
        if parts is None or not _far(parts[0], itemsize):
            continue
        step = parts[0]
        if _opens_line(lines.setdefault((memory_of(index.src[0]), frozenset(step.terms.items())), []), offset,
                       itemsize):
            found[index] = step.scale(PREFETCH_STEPS)
    return found


def _buffer_loads(linear: tuple[UOp, ...]) -> Iterator[tuple[UOp, tuple[UOp, ...]]]:
    """The INDEX of each load of a buffer (a PARAM, ungated) inside a loop, with the loops open around it,
    outermost first."""
    for u, open_loops in inside_loops(linear):
        if u.op is Ops.LOAD and open_loops and len(u.src[0].src) == 2 and memory_of(u.src[0].src[0]).op is Ops.PARAM:
            yield u.src[0], tuple(open_loops)


def _far(step: Poly, itemsize: int) -> bool:
    """Whether a stride is loop-invariant (``_invariant``) and may reach ``PREFETCH_STRIDE_BYTES``: one a CPU's
    own prefetcher does not follow."""
    return _invariant(step) and max(abs(b) for b in step.interval()) * itemsize >= PREFETCH_STRIDE_BYTES


def _opens_line(group: list[tuple[Poly, set[int]]], offset: Poly, itemsize: int) -> bool:
    """Whether a load at ``offset`` is the first of a ``group`` of loads (each with the offset of its group's
    first and the cache lines seen from it) on its cache line, that line then seen: one prefetch a line."""
    for first, seen in group:
        apart = poly_constant(offset - first)
        if apart is not None:
            line = apart * itemsize // CACHE_LINE
            if line in seen:
                return False
            seen.add(line)
            return True
    group.append((offset, {0}))
    return True


def row_operands(linear: tuple[UOp, ...]) -> dict[UOp, Poly]:
    """The INDEXes of buffer loads in a loop that walks a row a cache line or more a turn (the partial maxima
    of a softmax row, 64 floats a turn), inside a loop over rows at least ``PREFETCH_STRIDE_BYTES`` apart, in
    the first such loop of a row that reads the buffer: one per cache line of those that differ by a
    constant, prefetched ``ROWS_AHEAD`` rows ahead. A row of 4 KiB is a page, where a CPU's own prefetcher
    stops: each row's first pass waited for memory (a softmax's maximum took as long as its ``exp``)."""
    found: dict[UOp, Poly] = {}
    first: dict[tuple[UOp, UOp], UOp] = {}
    lines: dict[tuple[UOp, UOp], list[tuple[Poly, set[int]]]] = {}
    for index, loops in _buffer_loads(linear):
        if len(loops) < 2:
            continue
        (row, inner), buffer = loops[-2:], memory_of(index.src[0])
        offset, itemsize = to_poly(index.src[1]), pointee(index).itemsize
        along, across = offset.split(inner), offset.split(row)
        turn = None if along is None else poly_constant(along[0])
        if turn is None or not CACHE_LINE <= abs(turn) * itemsize < PREFETCH_STRIDE_BYTES or across is None \
                or not _far(across[0], itemsize):
            continue
        if first.setdefault((buffer, row), inner) is not inner:
            continue  # a later pass over the row: the first brought it in
        if _opens_line(lines.setdefault((buffer, inner), []), offset, itemsize):
            found[index] = across[0].scale(ROWS_AHEAD)
    return found


def _invariant(step: Poly) -> bool:
    """Whether a stride is a constant or made of the kernel's variables alone (no range moves it)."""
    return bool(step.terms) and all(u.op is not Ops.RANGE for atom in step.atoms() for u in atom.toposort())


def poly_constant(poly: Poly) -> int | None:
    """The polynomial's value if it is a constant."""
    if not poly.terms:
        return 0
    return poly.terms[()] if list(poly.terms) == [()] else None
