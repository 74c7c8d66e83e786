"""A term a store computes again after a sum of it: kept in the output the first time (CPU lowering).

softmax as written, ``out[r, c] = exp(x[r, c] - top) / sum_k exp(x[r, k] - top)``, computes each ``exp``
twice: once for the sum, once for the store. ``store_terms_first`` stores the term where its element goes,
sums the stored row, and divides the stored row in place: three statements, the ``exp`` once per element.
Each value is computed as before: a float stored and loaded back is the same float, and the sum adds the
same terms in the same order (a loop's one sum, which the backend may reassociate, as it did before).
"""

from __future__ import annotations

from svod.codegen.indexing import to_poly
from svod.codegen.ranges import free_axis, live_ranges, nested
from svod.ir import AxisKind, Ops, UOp, substitute
from svod.ir.ops import ALU, EFFECTS
from svod.ir.uop import memory_of, pointee

STORED_TERM_WORK = 16
"""The fewest operations on the element a term needs to be stored rather than computed again: the kept form
passes over the row twice more (the sum of the stored row, the store from it). An inline ``exp`` is about 25,
and a softmax runs faster storing it first than computing it twice; a cheap term (a difference, a scale) stays
computed as written."""


def store_terms_first(sink: UOp) -> UOp:
    """``sink``, where it is one store of a value that also sums a term of it over a range like the store's
    own column (``_stored_term``), as three statements over each row: the term stored to the output, the sum
    of the stored row, and the store's value computed from the stored term (``_kept``). As it is otherwise."""
    effects = [e for e in sink.src if e.op in EFFECTS]
    if len(effects) != 1 or effects[0].op is not Ops.STORE:
        return sink
    found = _stored_term(effects[0], sink)
    return sink if found is None else _kept(sink, effects[0], *found)


def _stored_term(store: UOp, sink: UOp) -> tuple[UOp, UOp, UOp] | None:
    """The sum, the term and the store's column ``store_terms_first`` takes, if any. The store is ungated,
    into a buffer the kernel reads nowhere, over parallel ranges that each index it (the race check proved
    that no two work items write one element), the column at unit stride and in no other term of the index,
    so that a row's elements are apart. The sum is a float ADD over one range whose end is the column's, and
    its term, over the column, is a node of the store's value of ``STORED_TERM_WORK`` operations or more on
    the element, of the output's dtype."""
    index, value = store.src[0], store.src[1]
    if len(index.src) != 2 or index.src[0].op is not Ops.PARAM:
        return None
    out = index.src[0]
    if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) is out for u in sink.toposort()):
        return None
    live = live_ranges(sink)
    ranges = live[store]
    if set(store.src[2:]) != ranges:  # the ranges it runs over are those it depends on (``anchor_ranges``)
        return None
    terms = to_poly(index.src[1]).terms
    if not ranges or any(r.arg[1] is not AxisKind.GLOBAL or not any(r in m for m in terms) for r in ranges):
        return None
    columns = [r for r in nested(ranges) if terms.get((r,)) == 1 and sum(r in m for m in terms) == 1]
    below = value.toposort()
    nodes = set(below)
    for total in below:
        if total.op is not Ops.REDUCE or total.arg is not Ops.ADD or len(total.src) != 2 \
                or total.dtype != pointee(out):
            continue
        k = total.src[1]
        for column in (c for c in columns if c.src[0] is k.src[0]):
            term = substitute(total.src[0], {k: column})
            if term in nodes and term.op in ALU and \
                    sum(1 for u in term.toposort() if u.op in ALU and column in live[u]) >= STORED_TERM_WORK:
                return total, term, column
    return None


def _kept(sink: UOp, store: UOp, total: UOp, term: UOp, column: UOp) -> UOp:
    """The three statements, each over a sequential loop of the column's end inside the store's other ranges
    (a work item is a row): the term stored through the output's first state, then the sum of the stored
    row and the store's value, each reading the output's state after the first statement."""
    index, out, k = store.src[0], store.src[0].src[0], total.src[1]
    axis = free_axis(sink)
    first, again = (UOp.range(column.src[0], axis + n, AxisKind.LOOP) for n in range(2))

    def element(r: UOp, version: int) -> UOp:
        return out.state(version, r)[substitute(index.src[1], {column: r})]

    rows = [r for r in store.src[2:] if r is not column]
    stored = element(first, 0).store(substitute(term, {column: first}), *rows, first)
    summed = element(k, 1).load().reduce(k, op=Ops.ADD)
    kept = substitute(store.src[1], {term: element(again, 1).load(), total: summed})
    last = element(again, 1).store(substitute(kept, {column: again}), *rows, again)
    return sink.replace(src=tuple(x for e in sink.src for x in ((stored, last) if e is store else (e,))))


__all__ = ["STORED_TERM_WORK", "store_terms_first"]
