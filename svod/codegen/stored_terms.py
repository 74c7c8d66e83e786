"""A term a store computes again after a sum of it: kept in the output the first time (CPU lowering).

softmax as written, ``out[r, c] = exp(x[r, c] - top) / sum_k exp(x[r, k] - top)``, computes each ``exp``
twice: once for the sum, once for the store. ``store_terms_first`` stores the term where its element goes,
sums the stored row, and divides the stored row in place: three statements, the ``exp`` once per element.
Each value is computed as before: a float stored and loaded back is the same float, and the sum adds the
same terms in the same order (a loop's one sum, which the backend may reassociate, as it did before).

numba's spelling stores the term itself, sums it, and rescales the row in place (``_one_store``): a reader of
that kernel would run ``exp`` a second time for the sum, so it is first put in the kernel's form, one store
of the rescaled term, which reaches the same three statements.
"""

from __future__ import annotations

from collections.abc import Iterable

from svod.codegen.indexing import to_poly
from svod.codegen.nest_order import stride
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
    sink = _one_store(sink)
    effects = [e for e in sink.src if e.op in EFFECTS]
    if len(effects) != 1 or effects[0].op is not Ops.STORE:
        return sink
    found = _stored_term(effects[0], sink)
    return sink if found is None else _kept(sink, effects[0], *found)


def _one_store(sink: UOp) -> UOp:
    """``sink``, where it is two stores of one row, ``out[r, c] = t(c)`` and then ``out[r, c'] = f(out[r, c'],
    sum_k t(k))`` (numba's softmax: the second divides by the sum), as the one store ``out[r, c'] = f(t(c'),
    sum_k t(k))``: the second reads back, element by element, what the first stored (a store's value is of
    its buffer's dtype, so read back it is the same float), and overwrites all of it. Both are ungated, over
    the same parallel ranges and a sequential column of one end (``_row_store``), and nothing else of the
    kernel reads the output. As it is otherwise."""
    if len(sink.src) != 2 or any(e.op is not Ops.STORE for e in sink.src):
        return sink
    first, second = sink.src
    found, again = _row_store(first), _row_store(second)
    if found is None or again is None or found[0] is not again[0]:
        return sink
    column, column_again = found[1], again[1]
    if column_again is column or column_again.src[0] is not column.src[0] \
            or set(first.src[2:]) - {column} != set(second.src[2:]) - {column_again} \
            or second.src[0] is not substitute(first.src[0], {column: column_again}):
        return sink  # not the same row's elements, turn by turn
    term, read_back = first.src[1], second.src[0].load()
    if not _reads_only_its_own_element(second, read_back, term) or not _sums(second.src[1], term, column):
        return sink
    value = substitute(second.src[1], {read_back: substitute(term, {column: column_again})})
    return sink.replace(src=(second.replace(src=(second.src[0], value, *second.src[2:])),))


def _row_store(store: UOp) -> tuple[UOp, UOp] | None:
    """The output and the column of an ungated store into a bare buffer over parallel ranges that each index
    it and one sequential loop, the column, along which the index moves one element a turn and nothing else
    of it moves (``_moves_by_one``)."""
    index, ranges = store.src[0], store.src[2:]
    if len(index.src) != 2 or index.src[0].op is not Ops.PARAM or any(r.op is not Ops.RANGE for r in ranges):
        return None  # (a pass that reindexes a store, as block_transposes does, leaves expressions of ranges)
    loops = [r for r in ranges if r.arg[1] is not AxisKind.GLOBAL]
    if len(loops) != 1 or loops[0].arg[1] is not AxisKind.LOOP or not _moves_by_one(index, loops[0]) \
            or not _indexed_by_each(index, ranges):
        return None
    return index.src[0], loops[0]


def _indexed_by_each(index: UOp, ranges: Iterable[UOp]) -> bool:
    """Whether every one of ``ranges`` is in a term of ``index``: no two of their turns store one element
    that the others would tell apart."""
    terms = to_poly(index.src[1]).terms
    return all(any(r in m for m in terms) for r in ranges)


def _moves_by_one(index: UOp, column: UOp) -> bool:
    """Whether ``index`` moves one element a turn of ``column`` and the rest of it does not depend on the
    column (``nest_order.stride``: no ``c == 1``, ``c // 2`` or load at ``c`` beside it), so that each turn
    writes an element of its own."""
    moved = stride(index.src[1], column)
    return moved is not None and moved.terms == {(): 1}


def _reads_only_its_own_element(store: UOp, read_back: UOp, term: UOp) -> bool:
    """Whether the output is read, by ``store``'s value and by the stored ``term``, only as ``read_back``:
    the element ``store`` writes."""
    reads = (u for u in (*term.toposort(), *store.src[1].toposort()) if u.op is Ops.LOAD)
    return all(memory_of(u.src[0].src[0]) is not store.src[0].src[0] or u is read_back for u in reads)


def _sums(value: UOp, term: UOp, column: UOp) -> bool:
    """Whether ``value`` holds an ADD reduction of ``term`` over a range of ``column``'s end."""
    return any(u.op is Ops.REDUCE and u.arg is Ops.ADD and len(u.src) == 2 and u.src[1].src[0] is column.src[0]
               and u.src[0] is substitute(term, {column: u.src[1]}) for u in value.toposort())


def _stored_term(store: UOp, sink: UOp) -> tuple[UOp, UOp, UOp] | None:
    """The sum, the term and the store's column ``store_terms_first`` takes, if any. The store is ungated,
    into a buffer the kernel reads nowhere, over ranges that each index it: parallel ones (the race check
    proved that no two work items write one element) and the column, parallel or a sequential loop, at unit
    stride and in no other term of the index, so that a row's elements are apart. The sum is a float ADD over
    one range whose end is the column's, and its term, over the column, is a node of the store's value of
    ``STORED_TERM_WORK`` operations or more on the element, of the output's dtype."""
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
    if not ranges or any(r.arg[1] is AxisKind.REDUCE for r in ranges) or not _indexed_by_each(index, ranges) \
            or sum(r.arg[1] is AxisKind.LOOP for r in ranges) > 1:
        return None
    columns = [r for r in nested(ranges) if _moves_by_one(index, r)
               and all(o.arg[1] is AxisKind.GLOBAL for o in ranges if o is not r)]
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
