"""Memory safety and race freedom, decided on the kernel AST before it is lowered.

``guard_accesses``: every access is proven inside its buffer for every value of every variable (see
``svod.codegen.indexing``), or it is bounds-checked at run time. An access inside a ``where`` branch is
proven under the branch's condition; when only the condition makes it safe, the access is gated by it
(skipped where the condition is false, as the ``where`` would discard it anyway), so a padded convolution
written the natural way needs no run-time test. What no proof covers gets ``INDEX`` arg ``CHECKED``:
``checks.check_accesses`` tests it, skips it when out of range and records it for ``IndexOutOfBoundsError``. On a device
whose indices are 32 bits, a checked index built from one value read from memory (``table[ids[r], c]``)
clamps that value to where the index still lands outside the buffer if it did before, so the index cannot
wrap into range; the error then reports the clamped index.

``check_races``: work items of parallel (GLOBAL) ranges run in any order at once, so a kernel is refused
when two of them may write one element with a plain STORE, or when one may read an element another writes.
Atomic updates are the way to combine into one element; a sequential LOOP range the way to carry values
from one iteration to the next. An index that chooses a negative constant where a check fails (a translator's
``where(k < n, row + k, -1)``) names an element only where the check holds: the access at ``-1`` is never made.

``parallel_loops``: a sequential loop whose turns the same proofs show independent runs as a parallel range.

``unbind``: a variable fixed by ``BIND`` stays a variable of the compiled kernel, so one compile serves
every fixed value; the value travels with the kernel.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from svod.codegen.access_meeting import meet_in_one_item
from svod.codegen.checks import CHECKED, rows_of
from svod.codegen.indexing import in_some_turn, index_in_bounds, to_poly
from svod.codegen.ranges import live_ranges, nested, range_order
from svod.dtype import dtypes
from svod.errors import GraphError, RaceError
from svod.ir import AxisKind, Ops, UOp, substitute
from svod.ir.ops import EFFECTS, STATEMENTS
from svod.ir.uop import (
    exits,
    is_state,
    kernel_label,
    memory_of,
    param_size,
    reads_unstated,
    state_version,
    stated_reads,
    unknown_below,
)


def unbind(sink: UOp, kernel: str) -> tuple[UOp, dict[str, int]]:
    """``sink`` with every ``BIND(var, value)`` replaced by ``var``, and the fixed values by name."""
    fixed: dict[str, int] = {}
    replacements: dict[UOp, UOp] = {}
    for node in sink.toposort():
        if node.op is Ops.BIND:
            name, value = node.src[0].arg[0], int(node.src[1].arg)
            if fixed.setdefault(name, value) != value:
                raise GraphError(f"variable {name} is bound to both {fixed[name]} and {value}", kernel=kernel,
                                 stage="lower", value=name)
            replacements[node] = node.src[0]
    return substitute(sink, replacements), fixed


# ---- bounds ----------------------------------------------------------------------------------------------

def guard_accesses(sink: UOp, kernel: str, index_bits: int = 64) -> tuple[UOp, UOp | None]:
    """``sink`` with each access proven, gated by the condition that proves it, or bounds-checked; and the
    status buffer checked accesses record failures in (a new last PARAM, an integer as wide as the
    device's indices), if any is checked."""
    order = {u: i for i, u in enumerate(sink.toposort())}
    statements = [e for e in sink.src if e.op in STATEMENTS]
    roots = [(*root, k) for k, e in enumerate(statements) for root in _statement_roots(e)]
    guarded = _Guarder(order, index_bits, _guards(roots, order, _Sites.of(statements)))
    effects = []
    for e in sink.src:
        if e.op is Ops.EXIT:  # a loop's exit test reads memory as a value does
            loop, *around = (guarded.rewrite(r) for r in (e.src[0], *e.src[2:]))
            effects.append(e.replace(src=(loop, guarded.rewrite(e.src[1]), *around)))
            continue
        if e.op not in EFFECTS:
            effects.append(e)
            continue
        target = guarded.target(e.src[0])
        effects.append(e.replace(src=(target, guarded.rewrite(e.src[1]), *(guarded.rewrite(r) for r in e.src[2:]))))
    new_sink = sink.replace(src=tuple(effects))
    if not guarded.checked:
        return new_sink, None
    slots = [u.arg for u in sink.toposort() if u.op is Ops.PARAM]
    status = UOp.param(max(slots) + 1, dtypes.int32 if index_bits == 32 else dtypes.int64, 2 * (max(slots) + 1))
    return new_sink.replace(src=(*new_sink.src, status)), status


def _statement_roots(statement: UOp) -> list[tuple[UOp, UOp | None]]:
    """The expressions ``statement`` computes, each with what holds wherever it is computed: its target's
    gate (under no condition), and its value and its target's position (an effect's; a loop exit's
    condition), both computed where the effect is made (``_value_guard``). A load in a position (``out[
    idx[j[i]]]``) is proven or checked as one in a value is."""
    gates = [(g, None) for g in statement.src[0].src[2:]] if statement.op in EFFECTS else []
    position = [statement.src[0].src[1]] if statement.op in EFFECTS else []
    return [*gates, *((r, None) for r in _statement_ranges(statement)),
            *((root, _value_guard(statement)) for root in [*position, statement.src[1]])]


def _statement_ranges(statement: UOp) -> tuple[UOp, ...]:
    """The ranges ``statement`` runs over (its sources past the value, ``anchor_ranges``; a loop exit's own
    loop too). Each range's end is computed where its loop starts, under no condition: a load in it (``range(
    counts[j])``) is made safe there, and rebuilt once, so that every use of the loop is one RANGE."""
    return (statement.src[0], *statement.src[2:]) if statement.op is Ops.EXIT else statement.src[2:]


def _gate_of(index: UOp) -> UOp | None:
    return index.src[2] if len(index.src) == 3 else None


def _value_guard(effect: UOp) -> UOp | None:
    """What holds wherever ``effect``'s value is computed: its target's gate, and each range it runs over
    (its sources past the value, ``anchor_ranges``) that may be empty has an iteration. A load that
    depends on none of them may be placed outside their loops; gated by this, it is not made (nor
    reported out of bounds) when the effect runs zero times. A loop's exit (``Ops.EXIT``): its condition's,
    in the turns of its loop and those around it."""
    runs = [r.src[0].gt(0) for r in _statement_ranges(effect) if r.op is Ops.RANGE and r.src[0].vmin < 1]
    guard = None if effect.op is Ops.EXIT else _gate_of(effect.src[0])
    for clause in runs:
        guard = _and(clause, guard)
    return guard


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None:
        return b
    return a if b is None else a & b


def _narrowed(position: UOp, size: UOp, bits: int) -> UOp:
    """``position`` with its one value read from memory ``v`` (``position = c*v + rest``) clamped to the
    widest ``[lo, hi]`` that keeps ``c*v + rest`` within ``bits``-bit integers. When that range reaches past
    the buffer on both sides (``c*lo + rest < 0`` and ``c*hi + rest >= size`` for every ``rest``), a
    clamped ``v`` lands outside the buffer exactly when ``v`` did, and an index that fits is reported
    exactly; otherwise ``position`` is left as it is (and a renderer refuses it)."""
    poly = to_poly(position)
    read = [a for a in poly.atoms() if _data_dependent(a)]
    parts = poly.split(read[0]) if len(read) == 1 else None
    if parts is not None and set(parts[0].terms) != {()}:
        return _narrowed_row(position, size, read[0])
    if parts is None:
        return position
    c, (rest_lo, rest_hi), size_hi = parts[0].terms[()], parts[1].interval(), size.vmax
    if not all(isinstance(b, int) for b in (rest_lo, rest_hi, size_hi)):
        return position
    smallest, largest = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if c > 0:  # ceiling and floor divisions
        lo, hi = -((rest_lo - smallest) // c), (largest - rest_hi) // c
    else:
        lo, hi = -((largest - rest_hi) // -c), (rest_lo - smallest) // -c
    if not (c * lo + rest_hi < 0 and c * hi + rest_lo >= size_hi if c > 0 else
            c * hi + rest_hi < 0 and c * lo + rest_lo >= size_hi):
        return position
    value = read[0]  # an index, or a narrower integer the position widens (which the polynomial sees through)
    source = value.src[0] if value.op is Ops.CAST and value.src[0].dtype.is_int else value  # clamped before a cast
    low, high = max(lo, int(source.dtype.min)), min(hi, int(source.dtype.max))
    if low > high:
        return position  # every value read is outside the buffer; nothing to narrow
    clamped = source.maximum(low).minimum(high)
    return substitute(position, {value: clamped if source is value else clamped.cast(value.dtype)})


def _narrowed_row(position: UOp, size: UOp, value: UOp) -> UOp:
    """A row access whose row is the one value read from memory and whose row length is symbolic (``x[ids[i],
    c]`` over ``x.shape[1]`` columns: ``checks.rows_of``) with the row clamped to ``[-1, R]``, ``R`` the most
    rows the buffer may have: a row outside the buffer stays outside it, one inside is kept, and the index
    then fits wherever the buffer's size does. A row read as a narrower integer is clamped before it widens
    (a ``uint32`` past ``2**31`` would not fit an index). Any other position is left as it is."""
    split = rows_of(position, size)
    if split is None or not isinstance(split[2].vmax, int):
        return position
    row = split[0]
    source = row.src[0] if row.op is Ops.CAST and row.src[0].dtype.is_int else row
    if source is not value and row is not value:  # the value, or it widened
        return position
    low, high = max(-1, int(source.vmin)), min(split[2].vmax, int(source.vmax))
    clamped = source.maximum(low).minimum(high)
    return substitute(position, {row: clamped if source is row else clamped.cast(row.dtype)})


class _Guarder:
    """Rebuilds expressions with each access proven, gated or checked under the conditions around it."""

    def __init__(self, order: Mapping[UOp, int], index_bits: int, guards: Mapping[UOp, list[UOp | None]]) -> None:
        self.order = order
        self.index_bits = index_bits
        self.guards = guards
        self.checked = False
        self.memo: dict[UOp, UOp] = {}
        self.pending: set[UOp] = set()
        """The loads being made safe, each inside the gate of the one before."""

    def proven(self, index: UOp, guard: UOp | None) -> bool:
        return index_in_bounds(index.src[1], param_size(index.src[0]), guard, self.order)

    def access(self, index: UOp, guards: list[UOp | None]) -> UOp:
        """An INDEX that is safe wherever one of ``guards`` holds (each the condition of some use of it;
        ``None`` for a use under no condition)."""
        own = _gate_of(index)
        if self.proven(index, own):
            return index
        guards = [self.computable(g) for g in guards]
        either = None if None in guards else _any([g for g in guards if g is not None])
        combined = _and(None if either is None else self.rewrite(either), own)
        if either is not None and all(self.proven(index, _and(g, own)) for g in guards):
            return UOp(Ops.INDEX, index.dtype, (*index.src[:2], combined))  # type: ignore[arg-type]
        self.checked = True
        gate = () if combined is None else (combined,)
        position = index.src[1] if self.index_bits == 64 else \
            _narrowed(index.src[1], param_size(index.src[0]), self.index_bits)
        return UOp(Ops.INDEX, index.dtype, (index.src[0], position, *gate), CHECKED)

    def computable(self, guard: UOp | None) -> UOp | None:
        """``guard`` without its conditions that read a load being made safe now (``pending``): a gate cannot
        read the load it gates (``b`` used where ``b != 6`` holds, and where it does not), nor one whose gate
        reads it. Leaving one out only weakens the guard."""
        kept = [c for c in _conjuncts(guard) if not any(load in self.pending for load in c.toposort())]
        return _all(kept[::-1])

    def target(self, index: UOp) -> UOp:
        """An effect's target with the loads in its position and its gate made safe, and itself proven or
        checked."""
        rewritten = tuple(self.rewrite(s) for s in index.src)  # the buffer too: a state over loops (``AFTER``)
        return self.access(index.replace(src=rewritten), [None])

    def rewrite(self, root: UOp) -> UOp:
        """``root`` with each load made safe under the guards its uses are read under (``_guards``). The gate
        a guard makes is rewritten too, its own loads (``where(e[j] > 0, f[k], 0)``'s ``e[j]``) made safe as
        they are where the guard is stated."""
        for node in root.toposort():
            if node in self.memo:
                continue
            src = tuple(self.memo[s] for s in node.src)
            rebuilt = node if src == node.src else node.replace(src=src)
            if node.op is Ops.LOAD:
                self.pending.add(node)
                try:
                    rebuilt = rebuilt.replace(src=(self.access(rebuilt.src[0], self.guards.get(node, [None])),))
                finally:
                    self.pending.discard(node)
            self.memo[node] = rebuilt
        return self.memo[root]


def _any(conditions: list[UOp]) -> UOp:
    """The disjunction of ``conditions``."""
    either = conditions[0]
    for c in conditions[1:]:
        either = either | c
    return either


@dataclass(eq=False)
class _Clauses:
    """The ``where`` conditions around a node, innermost first, as a shared list: a branch adds a cell in
    front of its ``where``'s, so the guards of a whole graph take space linear in it."""

    clause: UOp
    outer: _Clauses | None
    depth: int


Guards = tuple[_Clauses | None, ...]
"""The distinct lists of conditions a node is computed under, one per kind of use."""
MAX_CLAUSES = 16
"""The innermost conditions of a guard that proofs use; leaving outer ones out only weakens the guard."""
MAX_GUARDS = 4
"""Distinct guards kept for one node; past that they merge into one (``_merged``)."""


def _guards(roots: Iterable[tuple[UOp, UOp | None, int]], order: Mapping[UOp, int],
            sites: _Sites | None = None) -> dict[UOp, list[UOp | None]]:
    """For every load below ``roots``, conditions one of which holds wherever it is computed (``None``:
    nothing is known): the conditions of the ``where`` branches around each use of it and of each node
    above it, and of the other side of each boolean ``&`` (an inner ``if``'s test joined to an outer one's in
    a store's gate: the test's load is needed only where the outer holds), from each root's own (a store's
    gate). A node used under more than ``MAX_GUARDS`` different
    ones keeps one: the outer part they all share under the disjunction of the rest. One walk from users
    to sources, so a value shared by both branches of every ``where`` in a deep chain costs what one use
    does. A root is a statement's value or gate, with the statement's position: a node is computed by the
    first statement that uses it, or earlier (a read held from its statement), where a condition a later
    statement reads may not exist yet (``_Sites``); without ``sites`` the roots are one statement's."""
    cells: dict[tuple[UOp, _Clauses | None], _Clauses] = {}
    spelled = _Spelled()

    def push(clause: UOp, outer: Guards) -> Guards:
        pushed = []
        for g in outer:
            if (clause, g) not in cells:
                cells[(clause, g)] = _Clauses(clause, g, 0 if g is None else g.depth + 1)
            pushed.append(cells[(clause, g)])
        return tuple(pushed)

    around: dict[UOp, Guards] = {}

    def reach(node: UOp, guards: Guards) -> None:
        known = around.get(node)
        if known is None:
            merged = _weakest(guards)
        else:
            added = tuple(g for g in guards if g not in known)
            if not added:
                return  # as they were left: none extends another, and no more than MAX_GUARDS
            merged = _weakest(known + added)
        if len(merged) > MAX_GUARDS:
            shared, either = _merged(merged, spelled)
            merged = (shared,) if either is None else push(either, (shared,))
        around[node] = merged

    at: dict[UOp, int] = {}
    """The earliest statement each node may be computed at (``_Sites``)."""

    def used_by(node: UOp, statement: int) -> None:
        at[node] = min(at.get(node, statement), statement)

    loads = _loads_below([root for root, _, _ in roots])
    for root, condition, statement in roots:
        if root in loads:
            guards: Guards = (None,)
            for clause in _conjuncts(condition):  # one clause each: roots whose gates share conditions share them
                guards = push(clause, guards)
            reach(root, guards)
            used_by(root, statement)
    for node in sorted(loads, key=order.__getitem__, reverse=True):
        guards = around[node]
        if sites is not None and node.op is Ops.INDEX and is_state(node.src[0]):  # held: read at its statement
            used_by(node, sites.earliest(node.src[0]))
        if node.op is Ops.WHERE:
            choice = node.src[0]
            contexts = [guards, push(choice, guards), push(choice.ne(True), guards)]
        elif node.op is Ops.AND and node.dtype == dtypes.bool:  # each side decides only where the other holds
            contexts = [push(node.src[1], guards), push(node.src[0], guards)]
        else:
            contexts = [guards] * len(node.src)
        for s, c in zip(node.src, contexts, strict=True):
            if s in loads:
                reach(s, c)
                used_by(s, at[node])
    sites = sites or _Sites(frozenset(), None)
    return {node: [_condition(g, node, at[node], sites, spelled) for g in guards]
            for node, guards in around.items() if node.op is Ops.LOAD}


def _merged(guards: Guards, spelled: _Spelled) -> tuple[_Clauses | None, UOp | None]:
    """One guard that holds wherever one of ``guards`` does: the outer part they all share, and the
    disjunction of the conditions each adds inside it (None when one adds none). The disjunction keeps a
    load that every use discards unmade, and so unreported when a run-time check guards it; each guard
    adds its innermost ``MAX_CLAUSES`` conditions to it, as ``_condition`` keeps."""
    shared = guards[0]
    for g in guards[1:]:
        shared = _common(shared, g)
    inner = [_inside(g, shared, spelled) for g in guards]
    return shared, None if None in inner else spelled.any([c for c in inner if c is not None])


def _inside(clauses: _Clauses | None, outer: _Clauses | None, spelled: _Spelled) -> UOp | None:
    """The conjunction of the innermost ``MAX_CLAUSES`` conditions of ``clauses`` that are not in its
    outer part ``outer``, outermost first; None when there are none."""
    kept: list[UOp] = []
    while clauses is not outer and clauses is not None and len(kept) < MAX_CLAUSES:
        kept.append(clauses.clause)
        clauses = clauses.outer
    return spelled.all(kept)


def _all(innermost_first: list[UOp]) -> UOp | None:
    """The conjunction of conditions listed innermost first, spelled outermost first (None for none)."""
    condition = None
    for clause in reversed(innermost_first):
        condition = _and(condition, clause)
    return condition


class _Spelled:
    """Conjunctions and disjunctions of conditions, each built once per list of conditions: the guards of a deep
    chain of ``where`` ask for the same few thousands of times, and building a node, even one that exists,
    costs a look-up of its structure. Keyed by the conditions themselves (hash-consed), so each answer is the
    one ``_all`` or ``_any`` gives."""

    def __init__(self) -> None:
        self._conjunctions: dict[tuple[UOp, ...], UOp | None] = {}
        self._disjunctions: dict[tuple[UOp, ...], UOp] = {}

    def all(self, innermost_first: list[UOp]) -> UOp | None:
        key = tuple(innermost_first)
        if key not in self._conjunctions:
            self._conjunctions[key] = _all(innermost_first)
        return self._conjunctions[key]

    def any(self, conditions: list[UOp]) -> UOp:
        key = tuple(conditions)
        if key not in self._disjunctions:
            self._disjunctions[key] = _any(conditions)
        return self._disjunctions[key]


def _conjuncts(condition: UOp | None) -> list[UOp]:
    """The conditions ``condition`` is the AND of, outermost (first stated) first."""
    if condition is None:
        return []
    if condition.op is Ops.AND and condition.dtype == dtypes.bool:
        return [*_conjuncts(condition.src[0]), *_conjuncts(condition.src[1])]
    return [condition]


def _ranges(node: UOp, known: dict[UOp, frozenset[UOp]]) -> frozenset[UOp]:
    """The ranges ``node`` depends on (a memory state's loops among them), less those a REDUCE below it
    closes: a reduction's value exists outside its own loop (a condition on a row's sum guards an access
    that is made outside the sum's loop)."""
    for u in unknown_below(node, known):
        below = frozenset({u} if u.op is Ops.RANGE else ()).union(*(known[s] for s in u.src))
        known[u] = below - frozenset(u.src[1:]) if u.op is Ops.REDUCE else below
    return known[node]


def _loads_below(roots: Iterable[UOp]) -> set[UOp]:
    """The nodes below ``roots`` (themselves included) with a load at or below them."""
    found: set[UOp] = set()
    for root in roots:
        for node in root.toposort():
            if node.op is Ops.LOAD or any(s in found for s in node.src):
                found.add(node)
    return found


def _weakest(guards: Guards) -> Guards:
    """``guards`` without those that extend another of them (its conditions and more): the disjunction is
    the same. A node used in a ``where``'s condition and in its branch is computed wherever the condition is;
    kept, the branch's guard held the condition itself, a copy of the node that no check reached (the
    reduction of ``max(s, x[i, idx[k]])``, its gathers unchecked, computed twice)."""
    if len(guards) < 2:
        return guards
    members = set(guards)
    if None in members:  # nothing known: every other guard extends it
        return tuple(g for g in guards if g is None)
    clauses = [g for g in guards if g is not None]  # all of them
    shallowest = min(g.depth for g in clauses)
    kept: list[_Clauses | None] = []
    for g in clauses:  # one extends another where one of its outer parts, as deep as any, is another
        outer = g.outer
        while outer is not None and outer.depth >= shallowest and outer not in members:
            outer = outer.outer
        if outer is None or outer not in members:
            kept.append(g)
    return tuple(kept)


def _common(a: _Clauses | None, b: _Clauses | None) -> _Clauses | None:
    """The longest outer part two lists of conditions share."""
    while a is not b:
        if a is None or b is None:
            return None
        if a.depth > b.depth:
            a = a.outer
        elif b.depth > a.depth:
            b = b.outer
        else:
            a, b = a.outer, b.outer
    return a


@dataclass
class _Sites:
    """Where a node and a condition that might guard it are computed: a node over its ranges, at the first
    statement that uses it or, below a read through a memory state (``UOp.state``), as early as that read may
    be stated; a condition of a later use that reads memory the kernel writes, only after the effects stated
    before that use. What decides it is found once per node."""

    written: frozenset[UOp]
    """The memory the kernel's effects write."""
    effects_before: list[dict[UOp, int]] | None
    """For each statement, the effects stated before it on each memory (the version its statement reads);
    None where every root is one statement's."""
    stated_at: dict[tuple[UOp, int], int] = field(default_factory=dict)
    """The position of the effect of each version of each memory."""
    ranges: dict[UOp, frozenset[UOp]] = field(default_factory=dict)
    reads: dict[UOp, dict[UOp, int]] = field(default_factory=dict)
    unstated: dict[UOp, bool] = field(default_factory=dict)

    @staticmethod
    def of(statements: list[UOp]) -> _Sites:
        """The sites of a kernel's ``statements``, in order."""
        effects_before: list[dict[UOp, int]] = []
        stated_at: dict[tuple[UOp, int], int] = {}
        stated: dict[UOp, int] = {}
        for position, e in enumerate(statements):
            effects_before.append(dict(stated))
            version = state_version(e.src[0]) if e.op in EFFECTS else None
            if version is not None:
                stated[memory_of(e.src[0].src[0])] = version + 1
                stated_at[(memory_of(e.src[0].src[0]), version)] = position
        written = frozenset(memory_of(e.src[0].src[0]) for e in statements if e.op in EFFECTS)
        return _Sites(written, effects_before, stated_at)

    def earliest(self, state: UOp) -> int:
        """The first statement that may read through memory ``state``: the one after the effect before it."""
        return 0 if state.arg == 0 else self.stated_at.get((state.src[0], state.arg - 1), -1) + 1

    def computable(self, clause: UOp, node: UOp, statement: int) -> bool:
        """Whether ``clause`` can be computed where ``node``, computed at ``statement``, is: over no range
        but the node's; reading no state past the effects stated before the statement; and, for a node read
        through a state (held at its statement), reading no written memory where it is used (a carried local's
        register at the start of a later turn)."""
        if not _ranges(clause, self.ranges) <= _ranges(node, self.ranges):
            return False
        if self.effects_before is None:
            return True
        before = self.effects_before[statement]
        if any(version > before.get(memory, 0) for memory, version in stated_reads(clause, self.reads).items()):
            return False
        return not (stated_reads(node, self.reads) and reads_unstated(clause, self.written, self.unstated))



def _condition(clauses: _Clauses | None, node: UOp, statement: int, sites: _Sites,
               spelled: _Spelled) -> UOp | None:
    """The conjunction of the innermost ``MAX_CLAUSES`` conditions, outermost first, of those that can be
    computed where ``node``, computed at ``statement``, is (``_Sites.computable``): a use in a loop the node
    is outside of is made under conditions the loop computes, and a later statement's use under conditions
    that may read what an effect between them stores. Leaving one out only weakens the guard."""
    kept: list[UOp] = []
    while clauses is not None and len(kept) < MAX_CLAUSES:
        clause = _outside_loops(clauses.clause, node, sites)
        if clause is not None and sites.computable(clause, node, statement):
            kept.append(clause)
        clauses = clauses.outer
    return spelled.all(kept)


def _outside_loops(clause: UOp, node: UOp, sites: _Sites) -> UOp | None:
    """``clause`` as it guards ``node`` where the node is computed outside loops the clause is computed in
    (a load the same in every turn of a loop, used under a condition on the loop's variable): what holds
    where the clause holds in some turn of each of them (``in_some_turn``), innermost first; None where no
    such condition is found."""
    for r in reversed(nested(_ranges(clause, sites.ranges) - _ranges(node, sites.ranges))):
        projected = in_some_turn(clause, r)
        if projected is None:
            return None
        clause = projected
    return clause


# ---- races -----------------------------------------------------------------------------------------------

def check_races(sink: UOp, kernel: str) -> None:
    """Refuse a kernel whose parallel work items may write one element, or read one another writes. A
    register is each work item's own: no other sees it."""
    topo = sink.toposort()
    order = {u: i for i, u in enumerate(topo)}
    parallel = _parallel_ranges(topo)
    effects = [e for e in sink.src if e.op in EFFECTS and memory_of(e.src[0].src[0]).op is not Ops.DEFINE_REG]
    if not effects:
        return
    stores: dict[UOp, list[UOp]] = {}
    atomics: dict[UOp, list[UOp]] = {}
    for e in effects:
        (stores if e.op is Ops.STORE else atomics).setdefault(memory_of(e.src[0].src[0]), []).append(e)
    for buffer in atomics:
        if buffer in stores:
            raise _race(kernel, buffer, "is both stored to and updated atomically; use one or the other")
    if not any(parallel[e] for e in effects):
        return  # one work item: everything runs in order
    asked: dict[tuple[UOp | None, ...], bool] = {}
    for e in effects:
        if e.op is Ops.STORE:
            _check_store(e, parallel, order, kernel, asked)
    written = {*stores, *atomics}
    for e in [s for s in sink.src if s.op in STATEMENTS]:  # a loop's exit test reads as an effect's value does
        if not _reads_any(e, written):
            continue  # no read of it can meet a write: its loads' guards are not needed
        for index, guard in _loads_with_guards(e, order):
            buffer = memory_of(index.src[0])
            if buffer.op is Ops.DEFINE_REG:
                continue
            if buffer in atomics:
                raise _race(kernel, buffer, "is read while work items update it atomically; read it in a later "
                                            "kernel")
            for store in stores.get(buffer, []):
                if not _same_item(index, guard, parallel[e], store, parallel, order, asked):
                    raise _race(kernel, buffer, "is read at an element another work item may write; use an atomic "
                                                "update to combine into one element, read only the element each "
                                                "work item writes, use a sequential loop, or split the kernel")
    for updates in stores.values():
        for k, first in enumerate(updates):
            for second in updates[k + 1:]:
                if not _same_item(second.src[0], None, parallel[second], first, parallel, order, asked):
                    buffer = memory_of(first.src[0].src[0])
                    raise _race(kernel, buffer, "is written by two stores that may hit one element "
                                                             "from different work items")


def parallel_loops(sink: UOp) -> UOp | None:
    """``sink`` with its outermost sequential loops made parallel (GLOBAL) while ``check_races`` proves their
    turns independent: no turn writes an element another turn reads or writes. Then the turns' order cannot
    change what the kernel computes, and they tile and spread over threads as ``svod.prange`` turns do. A
    numba user's matmul is ``for i in prange(n): for j in range(m): ...``: its column loop, left
    sequential, ran as one dot product per column, many times slower than as a prange.

    Only a loop that every statement of the kernel runs inside is taken, with an end that no other loop's
    index sets and that reads no memory (a parallel range's end is a launch size), in a kernel without early
    exits (a ``while`` or ``break`` anywhere in it): a statement before or after it in the same work item (a
    register set before the loop and carried through it, a row finished after it) needs the turns in order;
    so does a register that a turn reads before it sets it (what the turn before left there). Each register
    is then one per turn, which its sources say (the new range is among them, as a ``prange``'s is). And only
    where each of the kernel's reductions depends on the loop's index: a sum the turns share is computed once
    before a sequential loop, and would be computed once per work item of a parallel one. A kernel that is
    one work item (no ``prange``) with reductions keeps its loops: each reduction is split over every
    thread, where a parallel loop of a few turns (k-means' clusters) would keep threads idle. None
    where no loop is made parallel. A kernel that stores through an index it reads from memory (a scatter,
    whose repeated indices keep the last turn's value) or updates atomically (a float sum rounds in the turns'
    order) keeps its loops: ``check_races`` lets parallel work items do both, in no order."""
    if any(_ordered(e) for e in sink.src if e.op in EFFECTS and memory_of(e.src[0].src[0]).op is not Ops.DEFINE_REG):
        return None
    made = sink
    while (loop := _outermost_loop(made)) is not None:
        registers = [u for u in made.toposort() if u.op is Ops.DEFINE_REG]
        if not all(_set_first(made, register) for register in registers):
            break
        turns = UOp.range(loop.src[0], loop.arg[0], AxisKind.GLOBAL)
        own = {g: g.replace(src=(*g.src, turns)) for g in registers}
        parallel = substitute(made, {loop: turns, **own, **_states_outside(made, loop, turns, own)})
        try:
            check_races(parallel, kernel_label(sink))
        except GraphError:
            break
        made = parallel
    return None if made is sink else made


def _ordered(effect: UOp) -> bool:
    """Whether turns of a loop around ``effect`` give another result in another order: an atomic update, or a
    store through an index read from memory."""
    return effect.op is not Ops.STORE or _data_dependent(effect.src[0].src[1])


def _set_first(sink: UOp, register: UOp) -> bool:
    """Whether each run of ``sink``'s statements sets ``register`` before anything reads it: its first
    statement that touches it stores it, ungated, a value that does not read it."""
    for statement in (s for s in sink.src if s.op in STATEMENTS):
        reads = any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) is register for u in statement.toposort())
        if statement.op is Ops.STORE and memory_of(statement.src[0].src[0]) is register:
            return not reads and len(statement.src[0].src) == 2
        if reads:
            return False
    return True


def _states_outside(sink: UOp, loop: UOp, turns: UOp, registers: Mapping[UOp, UOp]) -> dict[UOp, UOp]:
    """Each memory state naming ``loop`` as a sequential loop around its statement, without it (of the register
    ``registers`` maps its register to, if any): in a work item of the parallel range ``turns``, the state is
    after the item's own effects stated before. The loops it keeps count with ``turns`` where they counted with
    ``loop`` (``for k in range(j)``): a replacement is not rewritten again, and a loop left ending at ``loop``
    would bring the sequential loop back around every statement in it."""
    inner = {loop: turns}
    return {u: registers.get(u.src[0], u.src[0]).state(u.arg, *(substitute(r, inner) for r in u.src[1:]
                                                                 if r is not loop))
            for u in sink.toposort() if is_state(u) and loop in u.src[1:]}


def _outermost_loop(sink: UOp) -> UOp | None:
    """The kernel's outermost sequential loop where ``parallel_loops`` may make it parallel, else None."""
    topo = sink.toposort()
    ranges = [u for u in topo if u.op is Ops.RANGE]
    loops = [r for r in ranges if r.arg[1] is AxisKind.LOOP]
    if not loops or exits(sink):
        return None
    loop = min(loops, key=range_order)
    if any(u.op in (Ops.RANGE, Ops.LOAD) for u in loop.src[0].toposort()):
        return None  # another loop sets its end, or memory does: no launch size
    reductions = [u for u in topo if u.op is Ops.REDUCE]
    if reductions and not any(r.arg[1] is AxisKind.GLOBAL for r in ranges):
        return None  # one work item: its reductions are split over the threads (``split_reduction``)
    live = live_ranges(sink)
    inside = all(loop in live[s] for s in sink.src if s.op in STATEMENTS)
    return loop if inside and all(loop in live[u] for u in reductions) else None


def _race(kernel: str, buffer: UOp, what: str) -> RaceError:
    return RaceError(f"buffer {buffer.arg} {what}", kernel=kernel, stage="lower", value=buffer.arg,
                     buffers=(buffer.arg,))


def _parallel_ranges(topo: Iterable[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For every node, the GLOBAL ranges of more than one iteration it depends on."""
    found: dict[UOp, frozenset[UOp]] = {}
    for node in topo:
        ranges = frozenset().union(*(found[s] for s in node.src)) if node.src else frozenset()
        if node.op is Ops.RANGE and node.arg[1] is AxisKind.GLOBAL and node.src[0].vmax > 1:
            ranges |= {node}
        found[node] = ranges
    return found


def _check_store(store: UOp, parallel: Mapping[UOp, frozenset[UOp]], order: dict[UOp, int], kernel: str,
                 asked: dict[tuple[UOp | None, ...], bool]) -> None:
    target = store.src[0]
    missing = parallel[store] - parallel[target.src[1]]
    slot = memory_of(target.src[0]).arg
    if missing:
        raise RaceError(f"the store to buffer {slot} takes its value from work items of a parallel loop its index "
                        "does not depend on, so several of them write one element; combine them with an atomic "
                        "update, or make that loop sequential", kernel=kernel, stage="lower", value=slot,
                        buffers=(slot,))
    if _data_dependent(target.src[1]):
        return  # a scatter: each element gets the value of one of the work items that write it
    if not _same_item(target, None, parallel[store], store, parallel, order, asked):
        raise RaceError(f"the store to buffer {slot} may write one element from two work items (its index "
                        "does not tell the work items of its parallel loops apart); use an atomic update, or a "
                        "sequential loop", kernel=kernel, stage="lower", value=slot, buffers=(slot,))


def _data_dependent(index: UOp) -> bool:
    return any(u.op is Ops.LOAD for u in index.toposort())


def _reads_any(statement: UOp, memories: set[UOp]) -> bool:
    """Whether ``statement`` loads from any of ``memories``."""
    return any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in memories for u in statement.toposort())


def _loads_with_guards(effect: UOp, order: Mapping[UOp, int]) -> list[tuple[UOp, UOp | None]]:
    """The INDEX of every load below ``effect``, once with each condition it is read under (``_guards``):
    the value is read where the effect's gate holds and each range it runs over has an iteration."""
    target = effect.src[0]
    roots: list[tuple[UOp, UOp | None, int]] = [(target, None, 0), *((s, None, 0) for s in effect.src[2:])]
    if len(effect.src) > 1:
        roots.append((effect.src[1], _value_guard(effect), 0))
    guards = _guards(roots, order)
    found = {(node.src[0], guard): None for node, conditions in guards.items() if node.op is Ops.LOAD
             for guard in conditions}
    return sorted(found, key=lambda pair: (pair[0].key, "" if pair[1] is None else pair[1].key))


def _same_item(index: UOp, guard: UOp | None, ranges: frozenset[UOp], store: UOp,
               parallel: Mapping[UOp, frozenset[UOp]], order: dict[UOp, int],
               asked: dict[tuple[UOp | None, ...], bool]) -> bool:
    """Whether each element ``index`` reaches (where ``guard`` holds) is written by ``store`` only in the
    same work item, or never (``meet_in_one_item`` over the parallel ranges of both): ``x[i]`` read where
    ``x[i]`` is written is, ``x[i + 1]`` is not, and ``x[8*i + j - 1]`` for ``j >= 1`` is where ``x[8*i +
    j]`` is written (the same row). The answer is a function of the two accesses and the ranges, so one
    question that two statements ask (a value read twice, a store checked against itself and a read of its
    own element) is proven once, in ``asked``."""
    every = ranges | parallel[store]
    if not every:
        return True
    target = store.src[0]
    first, first_guard = _in_buffer(index.src[1], _and(guard, _gate_of(index)))
    second, second_guard = _in_buffer(target.src[1], _gate_of(target))
    ordered = sorted(every, key=order.__getitem__)
    question = (first, first_guard, second, second_guard, *ordered)
    if question not in asked:
        asked[question] = meet_in_one_item(first, first_guard, second, second_guard, ordered, order)
    return asked[question]


def _in_buffer(position: UOp, guard: UOp | None) -> tuple[UOp, UOp | None]:
    """``position`` where it may name an element, and ``guard`` with the conditions that say where: a choice
    of a negative constant (``where(k < n, row + min(k, n - 1), -1)``, the index a translator makes safe for
    every value of ``k``) names no element, and the access it chooses is never made (it is proven not to
    happen, or checked and skipped), so no work item writes or reads an element there."""
    while position.op is Ops.WHERE and position.dtype == dtypes.index:
        condition, taken, other = position.src
        if other.op is Ops.CONST and other.arg < 0:
            position, guard = taken, _and(guard, condition)
        elif taken.op is Ops.CONST and taken.arg < 0:
            position, guard = other, _and(guard, condition.ne(True))
        else:
            break
    return position, guard
