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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from svod.dtype import DType, dtypes
from svod.ir import Ops, UOp
from svod.ir.bounds import Bounds

Monomial = tuple[UOp, ...]
"""Atoms multiplied together, sorted by their structural key (so one product has one spelling)."""

SAFE_MAGNITUDE = 1 << 62
"""An expression whose bounds stay within this never wraps in 64-bit arithmetic, so it may be expanded."""
MAX_TERMS = 64
"""A polynomial with more terms than this is not expanded further; its node becomes an atom."""
MAX_STEPS = 200
"""Work allowed for one proof before it gives up (unproven)."""


class Poly:
    """An integer polynomial over atoms: a mapping from monomials to non-zero coefficients."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[Monomial, int] | None = None) -> None:
        self.terms: dict[Monomial, int] = {m: c for m, c in (terms or {}).items() if c}

    @staticmethod
    def const(value: int) -> Poly:
        return Poly({(): value})

    @staticmethod
    def atom(node: UOp) -> Poly:
        return Poly({(node,): 1})

    def __add__(self, other: Poly) -> Poly:
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return Poly(terms)

    def scale(self, k: int) -> Poly:
        return Poly({m: c * k for m, c in self.terms.items()})

    def __sub__(self, other: Poly) -> Poly:
        return self + other.scale(-1)

    def __mul__(self, other: Poly) -> Poly:
        terms: dict[Monomial, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2, key=_atom_order))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Poly(terms)

    def atoms(self) -> list[UOp]:
        found: dict[UOp, None] = {}
        for m in self.terms:
            found.update(dict.fromkeys(m))
        return list(found)

    def split(self, atom: UOp) -> tuple[Poly, Poly] | None:
        """``(A, B)`` with ``self == A*atom + B`` and neither containing ``atom``; None if ``atom`` appears
        squared."""
        a_terms: dict[Monomial, int] = {}
        b_terms: dict[Monomial, int] = {}
        for m, c in self.terms.items():
            count = m.count(atom)
            if count > 1:
                return None
            if count == 1:
                rest = list(m)
                rest.remove(atom)
                a_terms[tuple(rest)] = c
            else:
                b_terms[m] = c
        return Poly(a_terms), Poly(b_terms)

    def substitute(self, atom: UOp, value: Poly) -> Poly | None:
        parts = self.split(atom)
        if parts is None:
            return None
        a, b = parts
        return a * value + b

    def interval(self) -> Bounds:
        """Sound bounds of the polynomial from its atoms' value bounds."""
        lo: int | float = 0
        hi: int | float = 0
        for m, c in self.terms.items():
            term: Bounds = (c, c)
            for atom in m:
                term = _mul_bounds(term, atom.bounds)
            lo, hi = lo + term[0], hi + term[1]
        return (lo, hi)

    def __repr__(self) -> str:
        parts = [f"{c}*{'*'.join(f'{a.op.name}{a.arg!r}' for a in m) or '1'}" for m, c in self.terms.items()]
        return " + ".join(parts) or "0"


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
    done: dict[UOp, Poly] = {}
    for u in node.toposort():
        done[u] = _poly_of(u, done, keep)
    return done[node]


def _poly_of(u: UOp, done: dict[UOp, Poly], keep: set[UOp]) -> Poly:
    if u.op is Ops.CONST and u.dtype.is_int:
        return Poly.const(int(u.arg))
    if u in keep or not _expandable(u) or u.op not in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG):
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

    def add_upper(self, node: UOp, bound: Poly) -> None:
        self.upper.setdefault(node, []).append(bound)

    def add_lower(self, node: UOp, bound: Poly) -> None:
        self.lower.setdefault(node, []).append(bound)

    @property
    def guarded(self) -> list[UOp]:
        return list(dict.fromkeys([*self.lower, *self.upper]))


def facts_from_guard(condition: UOp | None) -> Facts:
    """The bounds a bool ``condition`` implies where it holds: each clause of a conjunction (``&``) that
    compares two integer expressions bounds each side by the other."""
    facts = Facts()
    for clause in _conjuncts(condition):
        if clause.op not in (Ops.CMPLT, Ops.CMPLE, Ops.CMPEQ) or not _exact_as_index(clause.src[0].dtype):
            continue
        a, b = (s.cast(dtypes.index) for s in clause.src)  # the spelling an INDEX gives a narrower integer
        slack = 1 if clause.op is Ops.CMPLT else 0
        pa, pb = to_poly(a), to_poly(b)
        if a.op is not Ops.CONST:
            facts.add_upper(a, pb - Poly.const(slack))
        if b.op is not Ops.CONST:
            facts.add_lower(b, pa + Poly.const(slack))
        if clause.op is Ops.CMPEQ:
            if a.op is not Ops.CONST:
                facts.add_lower(a, pb)
            if b.op is not Ops.CONST:
                facts.add_upper(b, pa)
    return facts


def _exact_as_index(dtype: DType) -> bool:
    """Whether every value of ``dtype`` keeps its value as an index (uint64 does not)."""
    return dtype.is_int and (dtype.itemsize < 8 or dtype.kind == "int")


def _conjuncts(condition: UOp | None) -> list[UOp]:
    if condition is None:
        return []
    out, stack = [], [condition]
    while stack:
        c = stack.pop()
        if c.op is Ops.AND and c.dtype == dtypes.bool:
            stack.extend(c.src)
        else:
            out.append(c)
    return out


class Prover:
    """Proves ``P >= 0`` for polynomials over one kernel's atoms, under the facts of one access."""

    def __init__(self, facts: Facts, order: Mapping[UOp, int]) -> None:
        self.facts = facts
        self.order = order
        self.steps = 0

    def nonnegative(self, poly: Poly) -> bool:
        self.steps = 0
        return self._prove(poly)

    def _prove(self, poly: Poly) -> bool:
        self.steps += 1
        if self.steps > MAX_STEPS:
            return False
        if poly.interval()[0] >= 0:
            return True
        for atom in sorted(poly.atoms(), key=lambda a: -self.order.get(a, -1)):
            parts = poly.split(atom)
            if parts is None:
                continue
            coefficient, rest = parts
            lo, hi = coefficient.interval()
            if lo >= 0:
                candidates = self._lower(atom)
            elif hi <= 0:
                candidates = self._upper(atom)
            else:
                continue
            if any(self._prove(coefficient * c + rest) for c in candidates):
                return True
        return False

    def _lower(self, atom: UOp) -> list[Poly]:
        found = list(self.facts.lower.get(atom, []))
        if atom.op is Ops.RANGE:
            found.append(Poly.const(0))
        elif atom.op is Ops.MAX and atom.dtype == dtypes.index:
            found += [to_poly(s) for s in atom.src]
        elif atom in self.facts.upper or atom in self.facts.lower:
            found += _expansion(atom)
        return found

    def _upper(self, atom: UOp) -> list[Poly]:
        found = list(self.facts.upper.get(atom, []))
        if atom.op is Ops.RANGE:
            found.append(to_poly(atom.src[0]) - Poly.const(1))
        elif atom.op is Ops.MIN and atom.dtype == dtypes.index:
            found += [to_poly(s) for s in atom.src]
        elif atom in self.facts.upper or atom in self.facts.lower:
            found += _expansion(atom)
        return found


def _expansion(atom: UOp) -> list[Poly]:
    """A guarded expression is also what it expands to (when it is more than an atom)."""
    expanded = to_poly(atom)
    return [] if expanded.terms == {(atom,): 1} else [expanded]


def index_in_bounds(index: UOp, size: UOp, guard: UOp | None, order: Mapping[UOp, int]) -> bool:
    """Whether ``0 <= index < size`` holds wherever ``guard`` does (everywhere when there is none), for
    every value of the variables and ranges. ``order`` ranks nodes so that derived atoms (a range whose
    end uses another range) are eliminated first."""
    facts = facts_from_guard(guard)
    prover = Prover(facts, order)
    poly = to_poly(index, facts.guarded)
    if not prover.nonnegative(poly):
        return False
    return prover.nonnegative(to_poly(size, facts.guarded) - Poly.const(1) - poly)


@dataclass(frozen=True)
class Separation:
    """How an index determines its parallel ranges: ``index = s_1*r_1 + (s_2*r_2 + (... + rest))``, with
    ``ranges`` the ``r_k`` and ``strides`` the ``s_k``, largest first, and ``sides`` where each step's rest,
    less an anchor, was proven to lie: ``1`` for ``[0, |s_k|)``, ``-1`` for ``(-|s_k|, 0]`` (both for a
    rest of 0). ``fixed`` is the sum of the index's terms that are the same for every work item and loop
    iteration (constants, variables)."""

    ranges: tuple[UOp, ...]
    strides: tuple[Poly, ...]
    sides: tuple[frozenset[int], ...]
    fixed: Poly

    def matches(self, other: Separation) -> bool:
        """Whether an element both indices reach is reached by the same values of the parallel ranges, for
        two separations against one anchor: the same ranges in the same order with the same strides, and
        each step's rests on a common side of the anchor, so that they differ by less than the stride."""
        return self.ranges == other.ranges and all(a & b for a, b in zip(self.sides, other.sides, strict=True)) \
            and all(not (a - b).terms for a, b in zip(self.strides, other.strides, strict=True))


def separate(index: UOp, ranges: list[UOp], facts: Facts, order: Mapping[UOp, int],
             anchor: Poly | None = None) -> Separation | None:
    """How ``index`` determines every one of ``ranges`` (largest stride first) when the element it reaches
    does: at each step the stride is the same for every work item and loop iteration, and the rest, less
    ``anchor``, spans less than it. The anchor defaults to the index's own fixed part (constants and
    variables, the same for every work item: they never make two items of one index collide); to compare
    two indices, both are separated against the same one. None when no such split is proven."""
    remainder = to_poly(index, facts.guarded)
    fixed = remainder - _varying(remainder)
    offset = Poly() if anchor is None else fixed - anchor
    prover = Prover(facts, order)
    strides, sides = [], []
    for r in ranges:
        parts = remainder.split(r)
        if parts is None:
            return None
        stride, remainder = parts
        if not stride.terms or any(_varies(a) for a in stride.atoms()):
            return None
        lo, hi = stride.interval()
        size = stride if lo >= 1 else stride.scale(-1) if hi <= -1 else None
        if size is None:
            return None
        offset = _less_whole_turns(offset, stride, r)
        rest = _varying(remainder) + offset
        found = frozenset(side for side in (1, -1) if prover.nonnegative(rest.scale(side))
                          and prover.nonnegative(size - Poly.const(1) - rest.scale(side)))
        if not found:
            return None
        strides.append(stride)
        sides.append(found)
    return Separation(tuple(ranges), tuple(strides), tuple(sides), fixed)


def _less_whole_turns(offset: Poly, stride: Poly, r: UOp) -> Poly:
    """A constant ``offset`` between two indices less whole turns of ``stride * r`` (``|stride| * (max r + 1)``
    at a time), toward 0. Two indices whose offset was cut never reach one element (``s*(r - r')`` and a
    difference of rests smaller than ``s`` cannot make up a turn), so what the later steps prove of them
    holds vacuously: ``scratch[i]`` and ``scratch[8 + i]`` for ``i < 8`` write apart."""
    if set(offset.terms) - {()} or set(stride.terms) != {()}:
        return offset
    c, turn = offset.terms.get((), 0), abs(stride.terms[()]) * max(int(r.vmax) + 1, 1)
    return Poly.const(c % turn if c >= 0 else -(-c % turn))


def _varying(poly: Poly) -> Poly:
    """The terms of ``poly`` that can differ between work items or loop iterations of one launch."""
    return Poly({m: c for m, c in poly.terms.items() if any(_varies(a) for a in m)})


def _varies(atom: UOp) -> bool:
    """Whether an atom can differ between work items or loop iterations of one launch."""
    return any(u.op in (Ops.RANGE, Ops.LOAD) for u in atom.toposort())
