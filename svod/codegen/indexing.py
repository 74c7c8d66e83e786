"""Proofs about index expressions: is an index inside its buffer for every value the variables, ranges and
guards allow?

An index is turned into a polynomial over *atoms* (ranges, variables, loads, divisions and anything else
that is not ``+ - *``), with integer coefficients. A claim ``P >= 0`` is proven by eliminating atoms one
at a time: where ``P = A*a + B`` and the sign of ``A`` is known, ``a`` is replaced by its smallest or
largest value — a bound that may itself be symbolic (a range ``r`` over ``n`` is at most ``n - 1``, an
expression a guard says is ``< h`` is at most ``h - 1``). Symbolic bounds cancel (``n - 1 - (n - 1)``), so
sizes that move with a variable are proven for every value it may take. What is left is checked with
interval arithmetic over each variable's ``[min, max]``, which is sound: a claim it cannot prove is
reported unproven, never proven wrongly.

::

    index  i*w + j   (i < h, j < w)        claim  h*w - 1 - (i*w + j) >= 0
    eliminate j  (coefficient -1 <= 0: take j's largest, w - 1)   ->  h*w - w - i*w
    eliminate i  (coefficient -w <= 0: take i's largest, h - 1)   ->  0          proven for every h, w

Polynomials are kept only while they stay small and their arithmetic cannot wrap (every expanded node's
bounds lie well inside 64 bits); past that a node is an atom known by its interval only.
"""

from __future__ import annotations

import weakref
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from svod.dtype import DType, dtypes
from svod.ir import Ops, UOp, substitute
from svod.ir.bounds import Bounds
from svod.ir.uop import unknown_below

Monomial = tuple[UOp, ...]
"""Atoms multiplied together, sorted by their structural key (so one product has one spelling)."""

SAFE_MAGNITUDE = 1 << 62
"""An expression whose bounds stay within this never wraps in 64-bit arithmetic, so it may be expanded."""
MAX_TERMS = 64
"""A polynomial with more terms than this is not expanded further; its node becomes an atom."""
MAX_STEPS = 200
"""Work allowed for one proof before it gives up (unproven)."""


class Poly:
    """An integer polynomial over atoms: a mapping from monomials to non-zero coefficients. Never changed once
    made, so its interval and atoms are found once (a proof asks them of one polynomial many times)."""

    __slots__ = ("_atoms", "_interval", "terms")

    def __init__(self, terms: Mapping[Monomial, int] | None = None) -> None:
        self.terms: dict[Monomial, int] = {m: c for m, c in (terms or {}).items() if c}
        self._interval: Bounds | None = None
        self._atoms: list[UOp] | None = None

    @staticmethod
    def _of(terms: dict[Monomial, int]) -> Poly:
        """A polynomial that takes ``terms`` as they are: every coefficient already non-zero."""
        poly = Poly.__new__(Poly)
        poly.terms, poly._interval, poly._atoms = terms, None, None
        return poly

    @staticmethod
    def const(value: int) -> Poly:
        return Poly({(): value})

    @staticmethod
    def atom(node: UOp) -> Poly:
        return Poly._of({(node,): 1})

    def __add__(self, other: Poly) -> Poly:
        terms = dict(self.terms)
        for m, c in other.terms.items():
            total = terms.get(m, 0) + c
            if total:
                terms[m] = total
            else:
                del terms[m]  # c is not 0, so m was there
        return Poly._of(terms)

    def scale(self, k: int) -> Poly:
        return Poly._of({m: c * k for m, c in self.terms.items()}) if k else Poly()

    def __sub__(self, other: Poly) -> Poly:
        return self + other.scale(-1)

    def __mul__(self, other: Poly) -> Poly:
        terms: dict[Monomial, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = m1 + m2
                if len(m) == 2:
                    m = m if m[0].key <= m[1].key else (m[1], m[0])
                elif len(m) > 2:
                    m = tuple(sorted(m, key=_atom_order))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Poly(terms)

    def atoms(self) -> list[UOp]:
        if self._atoms is None:
            found: dict[UOp, None] = {}
            for m in self.terms:
                found.update(dict.fromkeys(m))
            self._atoms = list(found)
        return self._atoms

    def split(self, atom: UOp) -> tuple[Poly, Poly] | None:
        """``(A, B)`` with ``self == A*atom + B`` and neither containing ``atom``; None if ``atom`` appears
        squared. Atoms are told apart by identity (hash-consed), which a tuple's ``count`` would ask through
        ``UOp.__eq__``, once per atom of every monomial."""
        a_terms: dict[Monomial, int] = {}
        b_terms: dict[Monomial, int] = {}
        for m, c in self.terms.items():
            if len(m) == 1:
                if m[0] is atom:
                    a_terms[()] = c
                else:
                    b_terms[m] = c
                continue
            count = 0
            for a in m:
                if a is atom:
                    count += 1
            if count > 1:
                return None
            if count == 1:
                a_terms[tuple(a for a in m if a is not atom)] = c
            else:
                b_terms[m] = c
        return Poly._of(a_terms), Poly._of(b_terms)

    def substitute(self, atom: UOp, value: Poly) -> Poly | None:
        parts = self.split(atom)
        if parts is None:
            return None
        a, b = parts
        return a * value + b

    def interval(self, products: dict[Monomial, Bounds | None] | None = None) -> Bounds:
        """Sound bounds of the polynomial from its atoms' value bounds; ``products`` keeps each monomial's
        (``_product_bounds``) for the next polynomial that holds it."""
        if self._interval is None:
            lo: int | float = 0
            hi: int | float = 0
            for m, c in self.terms.items():
                term = _term_bounds(m, c, products)
                lo, hi = lo + term[0], hi + term[1]
            self._interval = (lo, hi)
        return self._interval

    def __repr__(self) -> str:
        parts = [f"{c}*{'*'.join(f'{a.op.name}{a.arg!r}' for a in m) or '1'}" for m, c in self.terms.items()]
        return " + ".join(parts) or "0"


def _term_bounds(monomial: Monomial, c: int, products: dict[Monomial, Bounds | None] | None) -> Bounds:
    """The bounds of ``c`` times the atoms of ``monomial``: corner products taken one atom at a time, or ``c``
    times the monomial's own bounds where those are integers (``_product_bounds``)."""
    if products is not None and monomial:
        if monomial not in products:
            products[monomial] = _product_bounds(monomial)
        whole = products[monomial]
        if whole is not None:
            return (c * whole[0], c * whole[1]) if c > 0 else (c * whole[1], c * whole[0])
    term: Bounds = (c, c)
    for atom in monomial:
        term = _mul_bounds(term, atom.bounds)
    return term


def _product_bounds(monomial: Monomial) -> Bounds | None:
    """The bounds of the product of ``monomial``'s atoms, where each atom's are integers (else None). Integer
    corner products are exact, and the extremes of a product over a box lie at its corners, so ``c`` times
    these is what the corners of ``c`` and the atoms, taken one at a time, give: the same bounds."""
    term: Bounds = (1, 1)
    for atom in monomial:
        bounds = atom.bounds
        if not (isinstance(bounds[0], int) and isinstance(bounds[1], int)):
            return None
        term = _mul_bounds(term, bounds)
    return term


def _atom_order(node: UOp) -> str:
    return node.key


def _mul_bounds(a: Bounds, b: Bounds) -> Bounds:
    corners = [_product(x, y) for x in a for y in b]
    return (min(corners), max(corners))


def _product(x: int | float, y: int | float) -> int | float:
    return 0 if x == 0 or y == 0 else x * y  # 0 * inf is 0 here: a zero coefficient contributes nothing


def _expandable(node: UOp) -> bool:
    if node.dtype != dtypes.index:
        return False
    lo, hi = node.bounds
    return lo > -SAFE_MAGNITUDE and hi < SAFE_MAGNITUDE


def to_poly(node: UOp, atoms: Iterable[UOp] = ()) -> Poly:
    """``node`` as a polynomial; nodes in ``atoms`` (expressions a guard constrains) stay whole."""
    keep = set(atoms)
    if not keep or keep.isdisjoint(node.toposort()):
        return _normal_form(node)
    done: dict[UOp, Poly] = {}
    for u in node.toposort():
        done[u] = _poly_of(u, done, keep)
    return done[node]


_NORMAL_FORMS: weakref.WeakKeyDictionary[UOp, Poly] = weakref.WeakKeyDictionary()
"""The polynomial of each node expanded so far with no atom kept whole, as long as the node lives: a function
of the node alone, asked again by every proof and pass that reads the same index (an atom's own, which would
keep the node alive, is made again each time: it is one term)."""


def _normal_form(node: UOp) -> Poly:
    """``to_poly(node)``, found once per node (``_NORMAL_FORMS``)."""
    known = _NORMAL_FORMS.get(node)
    if known is not None:
        return known
    if _whole(node):
        return Poly.atom(node)  # whatever lies below it: a walk there would find what is known already
    done: dict[UOp, Poly] = {}
    polys = ChainMap(done, _NORMAL_FORMS)
    for u in unknown_below(node, _NORMAL_FORMS):
        poly = done[u] = _poly_of(u, polys, set())
        if poly.terms.keys() != {(u,)}:
            _NORMAL_FORMS[u] = poly
    return done[node]


def _widening(u: UOp) -> bool:
    """Whether ``u`` converts an integer to an integer type holding every value of the source's: the same
    number, which a proof may see through (a Python kernel's ``min(int(x), n - 1)`` is int64 over an index
    ``n``)."""
    if u.op is not Ops.CAST or not u.dtype.is_int or not u.src[0].dtype.is_int:
        return False
    source = u.src[0].dtype
    return u.dtype.min <= source.min and source.max <= u.dtype.max


def _whole(u: UOp) -> bool:
    """Whether ``u``'s own polynomial is the atom ``u``, whatever its sources' are (``_poly_of`` with no atom
    kept whole)."""
    return not (u.op is Ops.CONST and u.dtype.is_int) and not _widening(u) \
        and (u.op not in _EXPANDED or not _expandable(u))


_EXPANDED = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG)
"""The ops a polynomial sees through."""


def _poly_of(u: UOp, done: Mapping[UOp, Poly], keep: set[UOp]) -> Poly:
    if u.op is Ops.CONST and u.dtype.is_int:
        return Poly.const(int(u.arg))
    if u not in keep and _widening(u):
        return done[u.src[0]]
    if u in keep or not _expandable(u) or u.op not in _EXPANDED:
        return Poly.atom(u)
    srcs = [done[s] for s in u.src]
    if u.op is Ops.ADD:
        result = srcs[0] + srcs[1]
    elif u.op is Ops.SUB:
        result = srcs[0] - srcs[1]
    elif u.op is Ops.NEG:
        result = srcs[0].scale(-1)
    else:
        result = srcs[0] * srcs[1]
    return result if len(result.terms) <= MAX_TERMS else Poly.atom(u)


@dataclass
class Facts:
    """What is known about atoms beyond their intervals: symbolic lower and upper bounds, from the
    structure (a range is below its end) and from the guards around an access."""

    lower: dict[UOp, list[Poly]] = field(default_factory=dict)
    upper: dict[UOp, list[Poly]] = field(default_factory=dict)
    never: bool = False
    """A clause is the constant false (a comparison simplification decided)."""

    def add_upper(self, node: UOp, bound: Poly) -> None:
        self.upper.setdefault(node, []).append(bound)

    def add_lower(self, node: UOp, bound: Poly) -> None:
        self.lower.setdefault(node, []).append(bound)

    @property
    def guarded(self) -> list[UOp]:
        return list(dict.fromkeys([*self.lower, *self.upper]))


def facts_from_guard(*conditions: UOp | None) -> Facts:
    """The bounds bool ``conditions`` imply where they all hold: each clause of a conjunction (``&``) that
    compares two integer expressions (or negates such a comparison) bounds each side by the other; ``a != b``
    moves a bound of ``a`` that equals ``b`` by one (``m != 0`` for a range ``m`` is ``m >= 1``)."""
    facts = Facts()
    for clause in (c for condition in conditions for c in conjuncts(condition)):
        if clause.op is Ops.CONST and not clause.arg:
            facts.never = True
        comparison = _comparison(clause)
        if comparison is None:
            continue
        op, a, b = comparison
        if op is Ops.CMPNE:
            _add_unequal(facts, a, b)
            _add_unequal(facts, b, a)
            continue
        slack = 1 if op is Ops.CMPLT else 0
        pa, pb = to_poly(a), to_poly(b)
        if a.op is not Ops.CONST:
            facts.add_upper(a, pb - Poly.const(slack))
        if b.op is not Ops.CONST:
            facts.add_lower(b, pa + Poly.const(slack))
        if op is Ops.CMPEQ:
            if a.op is not Ops.CONST:
                facts.add_lower(a, pb)
            if b.op is not Ops.CONST:
                facts.add_upper(b, pa)
    return facts


_NEGATED = {Ops.CMPLT: (Ops.CMPLE, True), Ops.CMPLE: (Ops.CMPLT, True), Ops.CMPEQ: (Ops.CMPNE, False),
            Ops.CMPNE: (Ops.CMPEQ, False)}
"""``not (a < b)`` is ``b <= a``, ``not (a <= b)`` is ``b < a``; equality and inequality swap."""


def _comparison(clause: UOp) -> tuple[Ops, UOp, UOp] | None:
    """``clause`` as ``(op, a, b)`` over index expressions, op one of ``< <= == !=``, seeing through logical
    negation (``~c``, ``c != True``, ``c == False``); None when it is not such a comparison."""
    negated = False
    while clause.op in (Ops.XOR, Ops.CMPNE, Ops.CMPEQ) and clause.src[0].dtype == dtypes.bool \
            and clause.src[1].op is Ops.CONST:
        negated ^= bool(clause.src[1].arg) is (clause.op is not Ops.CMPEQ)
        clause = clause.src[0]
    if clause.op not in _NEGATED or not _exact_as_index(clause.src[0].dtype):
        return None
    op, a, b = clause.op, *(s.cast(dtypes.index) for s in clause.src)  # an INDEX's spelling of a narrower int
    if negated:
        op, swap = _NEGATED[op]
        a, b = (b, a) if swap else (a, b)
    return op, a, b


def _add_unequal(facts: Facts, a: UOp, b: UOp) -> None:
    """``a != b`` for a constant ``b`` at one end of ``a``'s interval: ``a`` lies past it."""
    if a.op is Ops.CONST or b.op is not Ops.CONST:
        return
    lo, hi = a.bounds
    if lo == b.arg:
        facts.add_lower(a, Poly.const(int(b.arg) + 1))
    elif hi == b.arg:
        facts.add_upper(a, Poly.const(int(b.arg) - 1))


def _exact_as_index(dtype: DType) -> bool:
    """Whether every value of ``dtype`` keeps its value as an index (uint64 does not)."""
    return dtype.is_int and (dtype.itemsize < 8 or dtype.kind == "int")


def conjuncts(condition: UOp | None) -> list[UOp]:
    """The conditions ``condition`` is the AND of (none for no condition): of bools' ANDs, and of ``where``s false
    where their condition is (Python's ``a and b``)."""
    if condition is None:
        return []
    out, stack = [], [condition]
    while stack:
        c = stack.pop()
        if c.op is Ops.AND and c.dtype == dtypes.bool:
            stack.extend(c.src)
        elif c.op is Ops.WHERE and c.dtype == dtypes.bool and c.src[2].op is Ops.CONST and c.src[2].arg is False:
            stack.extend(c.src[:2])
        else:
            out.append(c)
    return out


def in_some_turn(condition: UOp, r: UOp) -> UOp | None:
    """A condition over no ``r`` that holds wherever ``condition`` holds in some turn of range ``r`` (``0 ..
    end - 1``), or None where none is found. A guard that a loop computes guards a value hoisted out of the
    loop this way: the value is needed where the guard holds in one of the turns. For a comparison ``a op b``
    with ``a - b = c*r + rest`` (``c`` a constant, ``rest`` over no ``r``), and where the loop turns: ``<`` and
    ``<=`` hold in some turn where they hold in the turn of the lowest ``a - b`` (the first for ``c >= 0``, the
    last for ``c < 0``); ``==`` where ``a - b`` is at most 0 there and at least 0 in the other end turn (exact
    for ``c`` of -1, 0 or 1, weaker but sound otherwise); ``!=`` where the loop turns twice or the first turn
    differs (weaker but sound for ``c == 0``). An OR holds where one of its parts does; an AND implies each of
    its parts, so the parts found make a weaker but sound condition. A part shared by several is found once: a
    condition is a graph, and a chain of ``where``s shares its parts, which a walk of its tree meets
    exponentially often."""
    found: dict[UOp, UOp | None] = {}
    pending = [condition]
    while pending:
        node = pending[-1]
        if node in found:
            pending.pop()
            continue
        if node.op in (Ops.AND, Ops.OR) and node.dtype == dtypes.bool:
            missing = [s for s in node.src if s not in found]
            if missing:
                pending.extend(missing)
                continue
            first, second = (found[s] for s in node.src)
            if node.op is Ops.OR:
                found[node] = None if first is None or second is None else first | second
            else:
                found[node] = second if first is None else first if second is None else first & second
        else:
            found[node] = _comparison_in_some_turn(node, r)
        pending.pop()
    return found[condition]


def _comparison_in_some_turn(condition: UOp, r: UOp) -> UOp | None:
    """``in_some_turn`` of a comparison."""
    comparison = _comparison(condition)
    if comparison is None:
        return None
    op, a, b = comparison
    parts = (to_poly(a) - to_poly(b)).split(r)
    if parts is None or any(m for m in parts[0].terms) or any(r in u.toposort() for u in parts[1].atoms()):
        return None
    end = r.src[0]
    ends = (UOp.index_const(0), end - 1)
    low, high = ({r: turn} for turn in (ends if parts[0].terms.get((), 0) >= 0 else ends[::-1]))
    if op is Ops.CMPEQ:  # the difference is lowest at ``low``, highest at ``high``
        held = substitute(a, low).le(substitute(b, low)) & substitute(b, high).le(substitute(a, high))
    elif op is Ops.CMPNE:
        held = end.gt(1) | substitute(a, low).ne(substitute(b, low))
    else:
        held = substitute(condition, low)
    return held if end.vmin >= 1 else end.gt(0) & held


def _quotient_bound(atom: UOp, coefficient: Poly, lower: bool) -> Poly | None:
    """``coefficient * atom`` bounded without the division, for an atom ``x // c`` (``x >= 0``, ``c > 0``) whose
    coefficient every term of which ``c`` divides: ``c*q <= x`` (an upper bound) and ``c*q >= x - c + 1``
    (a lower one), so ``k*c*q`` is at least ``k*(x - c + 1)`` for ``k >= 0`` and at least ``k*x`` for ``k <=
    0``. (A matmul's blocks of ``W`` columns: ``W * (n // W) <= n``.)"""
    if atom.op is not Ops.IDIV or atom.src[1].op is not Ops.CONST or atom.src[0].vmin < 0:
        return None
    c = int(atom.src[1].arg)
    if c <= 0 or any(k % c for k in coefficient.terms.values()):
        return None
    x = to_poly(atom.src[0])
    scaled = Poly({m: k // c for m, k in coefficient.terms.items()})
    return scaled * (x - Poly.const(c - 1) if lower else x)


class Prover:
    """Proves ``P >= 0`` for polynomials over one kernel's atoms, under the facts of one access.

    It remembers what it settled: a claim proven, and a claim whose whole search failed within the step
    budget (not one cut short by it). The search meets the same claim by many paths (each order of taking
    atoms out), and the comparisons of two accesses ask many claims under the same facts."""

    def __init__(self, facts: Facts, order: Mapping[UOp, int]) -> None:
        self.facts = facts
        self.order = order
        self.steps = 0
        self.settled: dict[frozenset[tuple[Monomial, int]], bool] = {}
        self.ranks: dict[UOp, int] = {}
        """Each atom's place in the elimination order, the largest first (``order`` may be a chain of maps)."""
        self.bounds: dict[tuple[UOp, bool], tuple[list[Poly], list[Poly]]] = {}
        """Each atom's candidate bounds and its MIN's or MAX's sides, lower (True) or upper: the facts do not
        change while the prover lives."""
        self.products: dict[Monomial, Bounds | None] = {}
        """Each monomial's bounds (``_product_bounds``), asked again by every claim that holds it."""

    def nonnegative(self, poly: Poly) -> bool:
        self.steps = 0
        return self._prove(poly)

    def _prove(self, poly: Poly) -> bool:
        claim = frozenset(poly.terms.items())
        known = self.settled.get(claim)
        if known is not None:
            return known
        self.steps += 1
        if self.steps > MAX_STEPS:
            return False
        proven = self._search(poly)
        if proven or self.steps <= MAX_STEPS:
            self.settled[claim] = proven
        return proven

    def _search(self, poly: Poly) -> bool:
        if poly.interval(self.products)[0] >= 0:
            return True
        for atom in sorted(poly.atoms(), key=self._rank):
            parts = poly.split(atom)
            if parts is None:
                continue
            coefficient, rest = parts
            lo, hi = coefficient.interval(self.products)
            if lo >= 0 or hi <= 0:
                candidates, every = self._bounds_of(atom, lo >= 0)
            else:
                continue
            if any(self._prove(coefficient * c + rest) for c in candidates):
                return True
            quotient = _quotient_bound(atom, coefficient, lo >= 0)
            if quotient is not None and self._prove(quotient + rest):
                return True
            if every and all(self._prove(coefficient * side + rest) for side in every):
                return True  # the claim holds for either side, so for whichever one a MIN or MAX takes
        shifted = _shifted(poly, self._least)
        return shifted is not None and self._prove(shifted)

    def _rank(self, atom: UOp) -> int:
        rank = self.ranks.get(atom)
        if rank is None:
            rank = self.ranks[atom] = -self.order.get(atom, -1)
        return rank

    def _bounds_of(self, atom: UOp, lower: bool) -> tuple[list[Poly], list[Poly]]:
        """The bounds of ``atom`` a proof may put in its place, its least (``lower``) or largest, and the sides
        of a MIN (for its least) or MAX (for its largest) of which the claim must hold for each."""
        known = self.bounds.get((atom, lower))
        if known is None:
            candidates = self._lower(atom) if lower else self._upper(atom)
            known = self.bounds[(atom, lower)] = (candidates, [to_poly(side) for side in
                                                               _sides(atom, Ops.MIN if lower else Ops.MAX)])
        return known

    def _least(self, variable: UOp) -> int:
        """The least value of a variable: its own, or a constant lower bound the facts give (``0 < n``)."""
        bounds = [int(b.terms.get((), 0)) for b in self.facts.lower.get(variable, []) if set(b.terms) <= {()}]
        return max([int(variable.vmin), *bounds])

    def _lower(self, atom: UOp) -> list[Poly]:
        found = list(self.facts.lower.get(atom, []))
        if atom.op is Ops.RANGE:
            found.append(Poly.const(0))
        elif atom.op is Ops.MAX and atom.dtype.is_int:
            found += [to_poly(s) for s in atom.src]
        elif atom in self.facts.upper or atom in self.facts.lower:
            found += _expansion(atom)
        return found

    def _upper(self, atom: UOp) -> list[Poly]:
        found = list(self.facts.upper.get(atom, []))
        if atom.op is Ops.RANGE:
            found.append(to_poly(atom.src[0]) - Poly.const(1))
        elif atom.op is Ops.MIN and atom.dtype.is_int:
            found += [to_poly(s) for s in atom.src]
        elif atom in self.facts.upper or atom in self.facts.lower:
            found += _expansion(atom)
        return found


def _shifted(poly: Poly, least: Callable[[UOp], int]) -> Poly | None:
    """``poly`` with a variable it holds squared (which elimination cannot take out) written as its ``least``
    value plus a variable from 0: ``w*w - 2*w - 3`` for ``w >= 3`` is ``t*t + 4*t`` for ``t >= 0``, which the
    interval proves (a 3x3 window's ``w[o, c, ky, kx]`` over a symbolic window size; ``h*h - h`` where a
    guard says ``0 < h``). None where there is no such variable with a least value above 0."""
    for atom in poly.atoms():
        if atom.op is not Ops.DEFINE_VAR or not isinstance(atom.vmin, int) or not _squared(poly, atom):
            continue
        lowest = least(atom)
        if lowest > 0:
            above = UOp.define_var(f"{atom.arg[0]}_above_{lowest}", 0, int(atom.vmax) - lowest)
            value = Poly.atom(above) + Poly.const(lowest)
            shifted = Poly()
            for m, c in poly.terms.items():
                term = Poly({tuple(a for a in m if a is not atom): c})
                for _ in range(m.count(atom)):
                    term = term * value
                shifted = shifted + term
            return shifted
    return None


def _squared(poly: Poly, atom: UOp) -> bool:
    """Whether a monomial of ``poly`` holds ``atom`` more than once (told by identity)."""
    return any(sum(a is atom for a in m) > 1 for m in poly.terms if len(m) > 1)


def _sides(atom: UOp, op: Ops) -> tuple[UOp, ...]:
    """The sides of ``atom`` if it is an integer ``op`` (a MIN whose least, or a MAX whose largest value a
    proof needs: ``max(c - 1, 0) < n`` holds because each side is below ``n``), else none."""
    return atom.src if atom.op is op and atom.dtype.is_int else ()


def impossible(facts: Facts, order: Mapping[UOp, int]) -> bool:
    """Whether the facts contradict each other, so the guard they come from never holds: some upper bound
    of an expression lies below what its lower bounds allow (``r < 0`` for a range ``r``)."""
    prover = Prover(facts, order)
    return facts.never or any(prover.nonnegative(Poly.atom(atom) - bound - Poly.const(1))
                              for atom, bounds in facts.upper.items() for bound in bounds)


def _expansion(atom: UOp) -> list[Poly]:
    """A guarded expression is also what it expands to (when it is more than an atom)."""
    expanded = to_poly(atom)
    return [] if expanded.terms == {(atom,): 1} else [expanded]


def index_in_bounds(index: UOp, size: UOp, guard: UOp | None, order: Mapping[UOp, int]) -> bool:
    """Whether ``0 <= index < size`` holds wherever ``guard`` does (everywhere when there is none), for
    every value of the variables and ranges. ``order`` ranks nodes so that derived atoms (a range whose
    end uses another range) are eliminated first. Both sides are ``decided`` alike, so a choice made in one
    (``min(n, 2**30)`` is ``n`` where ``n < 2**30``) is made in the other, and their atoms stay the same."""
    facts = facts_from_guard(guard)
    if impossible(facts, order):
        return True  # the access is never made
    prover = Prover(facts, order)
    poly = to_poly(decided(index, facts, order), facts.guarded)
    if not prover.nonnegative(poly):
        return False
    return prover.nonnegative(to_poly(decided(size, facts, order), facts.guarded) - Poly.const(1) - poly)


def decided(index: UOp, facts: Facts, order: Mapping[UOp, int]) -> UOp:
    """``index`` with each ``max``/``min``, division and remainder by a constant, comparison and the choices it
    makes that the facts decide replaced by what it is: under ``t >= 1``, ``max(8*b + t - 1, 0)`` is ``8*b + t -
    1``; ``(2 + 2*r) // 2`` is ``1 + r``; ``r % 4`` for ``r < 4`` is ``r``; ``where(r < n, x, y)`` for a range
    ``r`` over ``n`` is ``x``."""
    done: dict[UOp, UOp] = {}
    prover = Prover(facts, order)
    for u in _outside_ranges(index):
        if u.op is Ops.RANGE:  # an atom whatever its end decides to: rebuilt, it would be another range
            done[u] = u
            continue
        src = tuple(done[s] for s in u.src)
        node = u if src == u.src else u.replace(src=src)
        if node.dtype == dtypes.index and node.op in (Ops.MAX, Ops.MIN, Ops.IDIV, Ops.MOD):
            node = _decided_node(node, facts, prover)
        elif node.op in (Ops.CMPLT, Ops.CMPLE) and node.src[0].dtype == dtypes.index:
            node = _decided_comparison(node, facts, prover)
        elif node.op is Ops.AND and node.dtype == dtypes.bool and any(s.op is Ops.CONST for s in node.src):
            node = _and_of_constant(node)
        elif node.op is Ops.WHERE and node.src[0].op is Ops.CONST:
            node = node.src[1] if node.src[0].arg else node.src[2]
        done[u] = node
    return done[index]


def _outside_ranges(root: UOp) -> list[UOp]:
    """``root``'s nodes in order, but for those only a range's end reaches."""
    topo = root.toposort()
    reached = {root}
    for node in reversed(topo):
        if node in reached and node.op is not Ops.RANGE:
            reached.update(node.src)
    return [u for u in topo if u in reached]


def _decided_comparison(node: UOp, facts: Facts, prover: Prover) -> UOp:
    """``a < b`` (or ``a <= b``) as the constant the facts decide it is, else itself: an index a translator
    made safe for every value (``where(k < n, row + min(k, n - 1), -1)``) is its plain form where ``k < n``
    is proven."""
    a, b = (to_poly(s, facts.guarded) for s in node.src)
    slack = Poly.const(1 if node.op is Ops.CMPLT else 0)
    if prover.nonnegative(b - a - slack):
        return UOp.const(dtypes.bool, True)
    if prover.nonnegative(a - b + slack - Poly.const(1)):
        return UOp.const(dtypes.bool, False)
    return node


def _and_of_constant(node: UOp) -> UOp:
    constant, other = node.src if node.src[0].op is Ops.CONST else node.src[::-1]
    return other if constant.arg else constant


def _decided_node(node: UOp, facts: Facts, prover: Prover) -> UOp:
    first, second = (to_poly(s, facts.guarded) for s in node.src)
    if node.op in (Ops.MAX, Ops.MIN):
        larger = 0 if prover.nonnegative(first - second) else 1 if prover.nonnegative(second - first) else None
        return node if larger is None else node.src[larger if node.op is Ops.MAX else 1 - larger]
    if set(second.terms) != {()} or second.terms[()] <= 0:
        return node
    divisor = second.terms[()]
    if node.op is Ops.IDIV and all(c % divisor == 0 for c in first.terms.values()):
        return _as_uop(Poly({m: c // divisor for m, c in first.terms.items()}))  # exact: no rounding
    if node.op is Ops.MOD and prover.nonnegative(first) and prover.nonnegative(second - Poly.const(1) - first):
        return node.src[0]
    return node


def _as_uop(poly: Poly) -> UOp:
    """An index expression with the value of ``poly``."""
    total = UOp.index_const(0)
    for m, c in poly.terms.items():
        term = UOp.index_const(c)
        for atom in m:
            term = term * atom
        total = total + term
    return total
