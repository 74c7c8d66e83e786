"""The order of a nest of parallel ranges, chosen from what the kernel reads and writes, not from the order
its loops were written in: ``for r: for c: out[c, r] = x[r, c]`` and ``for i: for j: out[i, j] = x[j, i]``
are one transpose, and lower to one loop nest.

A kernel whose every range is GLOBAL (parallel work items, no reduction, sequential loop or early exit) may
run its work items in any order. ``parallel_nest`` reads which order streams its memory: innermost the range
every store is contiguous in (neighbouring turns write neighbouring elements), outside it a range a load that
also moves with the stored range is contiguous in (a transpose: the rows it reads cross the rows it writes),
and outside those the other ranges, the one the store strides over farthest outermost.
``order_parallel_nest`` nests the ranges so; ``lower_cpu.block_transposes`` walks a transpose's two ranges
in blocks, the others outside them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from svod.codegen.indexing import MAX_TERMS, Poly
from svod.codegen.ranges import free_axis, live_ranges, range_order
from svod.ir import AxisKind, Ops, UOp, substitute
from svod.ir.ops import STATEMENTS
from svod.ir.uop import memory_of

NESTS_KEPT = 8
"""The kernels whose ``parallel_nest`` is kept: the one lowering now asks for twice, on each of a few threads."""

__all__ = ["Nest", "anchored_in_order", "expanded", "order_parallel_nest", "parallel_nest", "stride", "unit_stride"]


@dataclass(frozen=True)
class Nest:
    """A kernel's GLOBAL ranges by what its accesses stream along: ``stored``, the range every store is
    contiguous in; ``loaded``, another range a load that moves with ``stored`` too is contiguous in (None where
    none is: a load along ``stored``, or one the stored range's turns share, streams as the stores do);
    ``outer``, the other ranges, outermost first."""

    outer: tuple[UOp, ...]
    loaded: UOp | None
    stored: UOp

    @property
    def ranges(self) -> tuple[UOp, ...]:
        """Every range, outermost first, in the order that streams the stores: the stored range innermost."""
        return (*self.outer, *(() if self.loaded is None else (self.loaded,)), self.stored)


def stride(index: UOp, r: UOp) -> Poly | None:
    """How far ``index`` moves when range ``r`` moves one turn: the polynomial ``A`` of ``index = A*r + B``, where
    ``A`` uses no range and ``B`` does not use ``r`` (``r`` is in no division, modulo or product with itself); None
    where ``index`` is not such a sum."""
    parts = expanded(index).split(r)
    if parts is None:
        return None
    coefficient, rest = parts
    if any(u.op is Ops.RANGE for atom in coefficient.atoms() for u in atom.toposort()) or \
            any(r in atom.toposort() for atom in rest.atoms()):
        return None
    return coefficient


def expanded(index: UOp) -> Poly:
    """``index``'s sums and products multiplied out, whatever their bounds: a polynomial to read strides from,
    never to prove with (``indexing.to_poly`` keeps a product that might wrap whole, as a 4-D array's index of
    variable sizes may; a stride is the same either way). A polynomial of more than ``MAX_TERMS`` terms is an atom."""
    done: dict[UOp, Poly] = {}
    for u in index.toposort():
        srcs = [done[s] for s in u.src]
        if u.op is Ops.CONST and u.dtype.is_int:
            poly = Poly.const(int(u.arg))
        elif u.dtype.is_int and u.op is Ops.ADD:
            poly = srcs[0] + srcs[1]
        elif u.dtype.is_int and u.op is Ops.SUB:
            poly = srcs[0] - srcs[1]
        elif u.dtype.is_int and u.op is Ops.MUL:
            poly = srcs[0] * srcs[1]
        else:
            poly = Poly.atom(u)
        done[u] = poly if len(poly.terms) <= MAX_TERMS else Poly.atom(u)
    return done[index]


def unit_stride(index: UOp, r: UOp, ascending: bool = False) -> bool:
    """``index`` is ``r`` plus (or minus) terms without ``r``: neighbouring turns of ``r`` reach neighbouring
    elements (with ``ascending``, ``r`` is not subtracted: they also come in ``r``'s order, as a store of lanes
    and a nest's innermost range need). The one test of it every pass makes (``upcast``, ``recurrences``,
    ``lower_gpu``, ``parallel_nest``)."""
    terms = _terms(index)
    added = [t for t, sign in terms if sign > 0]
    return [t for t, _ in terms].count(r) == 1 and not any(r in t.toposort() for t, _ in terms if t is not r) \
        and (not ascending or r in added)


def _terms(index: UOp, sign: int = 1) -> list[tuple[UOp, int]]:
    """The terms of a sum with their signs, nested ADDs and SUBs flattened."""
    if index.op is Ops.ADD:
        return [t for s in index.src for t in _terms(s, sign)]
    if index.op is Ops.SUB:
        return [*_terms(index.src[0], sign), *_terms(index.src[1], -sign)]
    return [(index, sign)]


def _reach(index: UOp, r: UOp) -> tuple[int, int]:
    """How far ``index`` strides over ``r``, for ordering ranges outermost first: the most variables one term
    of the stride multiplies (a row-major array's leading dimensions stride over the product of the others'
    sizes), then its largest constant factor; an index that is no such sum reaches farthest."""
    found = stride(index, r)
    if found is None:
        return (1 << 30, 0)
    if not found.terms:
        return (0, 0)  # the index does not move with r: it reaches nowhere
    return (max(len(m) for m in found.terms), max(abs(c) for c in found.terms.values()))


@functools.lru_cache(maxsize=NESTS_KEPT)
def parallel_nest(sink: UOp) -> Nest | None:
    """The order that streams ``sink``'s memory (see the module's docs), or None where ``sink`` is not such a nest:
    a range that is not GLOBAL or whose end uses another, fewer than two ranges, a reduction or an exit, a
    statement that is not a store into a buffer over every range, or stores not all contiguous in one range.
    Any order of such a nest's turns computes the same: ``safety.check_races`` let it through, so no work item
    reads an element another writes. Derived once per kernel (UOps are hash-consed): the CPU's two nest passes
    both ask, ``order_parallel_nest`` of the kernel ``lower_cpu.block_transposes`` did not block."""
    topo = sink.toposort()
    ranges = sorted((u for u in topo if u.op is Ops.RANGE), key=range_order)
    if len(ranges) < 2 or any(r.arg[1] is not AxisKind.GLOBAL or
                              any(u.op is Ops.RANGE for u in r.src[0].toposort()) for r in ranges) \
            or any(u.op in (Ops.REDUCE, Ops.EXIT) for u in topo):
        return None
    statements = [e for e in sink.src if e.op in STATEMENTS]
    live = live_ranges(sink)
    if not statements or any(e.op is not Ops.STORE or e.src[0].op is not Ops.INDEX or
                             memory_of(e.src[0].src[0]).op is not Ops.PARAM or live[e] != frozenset(ranges)
                             for e in statements):
        return None
    loads = [u.src[0] for u in topo if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    stores = [e.src[0].src[1] for e in statements]
    stored = next((r for r in ranges if all(unit_stride(index, r, ascending=True) for index in stores)), None)
    if stored is None:
        return None
    crossing = [index.src[1] for index in loads if stored in index.src[1].toposort()]  # not one broadcast along it
    loaded = next((r for index in crossing for r in ranges
                   if r is not stored and unit_stride(index, r, ascending=True)), None)
    others = [r for r in ranges if r is not stored and r is not loaded]
    outer = sorted(others, key=lambda r: _reach(stores[0], r), reverse=True)  # stable: ties as written
    return Nest(tuple(outer), loaded, stored)


def order_parallel_nest(sink: UOp) -> UOp | None:
    """``sink``'s ranges nested as ``parallel_nest`` orders them (renumbered past every axis, outermost first);
    None where it is no such nest, or nests so already."""
    nest = parallel_nest(sink)
    if nest is None or list(nest.ranges) == sorted(nest.ranges, key=range_order):
        return None
    first = free_axis(sink)
    return substitute(anchored_in_order(sink, nest),
                      {r: UOp.range(r.src[0], first + n, AxisKind.GLOBAL) for n, r in enumerate(nest.ranges)})


def anchored_in_order(sink: UOp, nest: Nest) -> UOp:
    """``sink`` with each store's ranges (``lower.anchor_ranges``) listed as ``nest`` orders them: a kernel is
    one graph however its loops were written."""
    def anchored(e: UOp) -> UOp:
        if e.op is not Ops.STORE or set(e.src[2:]) != set(nest.ranges):
            return e
        return e.replace(src=(*e.src[:2], *nest.ranges))

    return sink.replace(src=tuple(anchored(e) for e in sink.src))
