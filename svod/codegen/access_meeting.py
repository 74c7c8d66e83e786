"""Whether two accesses can meet in one work item: the race check's question (``svod.codegen.safety``) of
a store and another access to the same buffer, answered by equating their indices over two copies of the
parallel ranges (``indexing``'s polynomials and prover) and showing the copies must be equal.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Mapping

from svod.codegen.indexing import Facts, Monomial, Poly, Prover, decided, facts_from_guard, impossible, to_poly
from svod.ir import Ops, UOp, substitute

MAX_EQUATION_STEPS = 24
"""Splits and matches allowed for one comparison of two accesses before it gives up (unproven)."""


def meet_in_one_item(first: UOp, first_guard: UOp | None, second: UOp, second_guard: UOp | None,
                     parallel: Iterable[UOp], order: dict[UOp, int]) -> bool:
    """Whether index ``first`` (reached where ``first_guard`` holds) in one work item and index ``second``
    (where ``second_guard`` holds) in another reach one element only when both items have the same value of
    every range in ``parallel`` — or never do.

    The second item's ranges are copies, so the claim is about two independent points: ``first(p) ==
    second(q)`` implies ``p == q``. The equation is taken apart while it stays equivalent: two sides that
    differ by at least 1 never meet (row ``k`` of an LU step and the block below it); ``c*r + x == c*r' + y``
    with ``|x - y| < |c|`` holds only if ``r == r'`` and ``x == y`` (rows of a row-major array, and any range
    whose stride exceeds what the rest spans, in both items at once); ``s*h + l == s*h' + l'`` with ``|l -
    l'| < s`` holds only if ``h == h'`` and ``l == l'`` (an element's row and column, when each side's row is
    a sum of several terms). Ranges matched in one part are the same in every other."""
    copies = _second_item([second, *_present(second_guard)], order)
    rank = ChainMap({copy: order[r] for r, copy in copies.items()}, order)
    equation = _AccessEquation(first, first_guard, substitute(second, copies), _renamed(second_guard, copies),
                               copies, rank)
    return equation.decide(set(parallel))


def _present(node: UOp | None) -> list[UOp]:
    return [] if node is None else [node]


def _renamed(node: UOp | None, mapping: Mapping[UOp, UOp]) -> UOp | None:
    return None if node is None else substitute(node, mapping)


def _second_item(roots: list[UOp], order: Mapping[UOp, int]) -> dict[UOp, UOp]:
    """A copy of every range below ``roots`` (its end a copy too, where the end uses other ranges), on axis
    ``-1 - axis``: no range of a kernel has a negative axis."""
    ranges = sorted({u for root in roots for u in root.toposort() if u.op is Ops.RANGE}, key=order.__getitem__)
    copies: dict[UOp, UOp] = {}
    for r in ranges:
        copies[r] = UOp(Ops.RANGE, r.dtype, (substitute(r.src[0], copies),), (-1 - r.arg[0], *r.arg[1:]))
    return copies


def _nonempty_ends(roots: list[UOp]) -> list[tuple[UOp, int]]:
    """``(v, 1 - c)`` for each range below ``roots`` whose end is ``v + c`` for one atom ``v`` that no range
    moves (a variable): an access is made only in an iteration of its ranges, so there ``v >= 1 - c``."""
    found: dict[tuple[UOp, int], None] = {}
    for root in roots:
        for r in root.toposort():
            if r.op is not Ops.RANGE:
                continue
            end = to_poly(r.src[0])
            varying = [(m, c) for m, c in end.terms.items() if m]
            if len(varying) == 1 and varying[0][1] == 1 and len(varying[0][0]) == 1 \
                    and not any(u.op is Ops.RANGE for u in varying[0][0][0].toposort()):
                found[(varying[0][0][0], 1 - end.terms.get((), 0))] = None
    return list(found)


class _AccessEquation:
    """The equation ``first == second`` of two accesses in two work items, as a list of equations that
    must all hold, and the ranges already shown equal in both."""

    def __init__(self, first: UOp, first_guard: UOp | None, second: UOp, second_guard: UOp | None,
                 copies: Mapping[UOp, UOp], rank: Mapping[UOp, int]) -> None:
        self.copies = copies
        self.rank = rank
        self.guards = [first_guard, second_guard]
        self.ends = _nonempty_ends([first, second, *_present(first_guard), *_present(second_guard)])
        self.matched: dict[UOp, UOp] = {}
        self.facts = self._facts({})
        self.prover = Prover(self.facts, rank)
        first = decided(first, facts_from_guard(first_guard), rank)
        second = decided(second, facts_from_guard(second_guard), rank)
        self.equations = [(to_poly(first, self.facts.guarded), to_poly(second, self.facts.guarded))]

    def decide(self, parallel: set[UOp]) -> bool:
        if impossible(self.facts, self.rank):
            return True  # one of the accesses is never made
        for _ in range(MAX_EQUATION_STEPS):
            if parallel <= self.matched.keys():
                return True
            if self.match():
                continue  # cheap where it applies; a failed ``apart`` runs its proofs to their step budget
            if any(self.apart(a, b) for a, b in self.equations):
                return True
            if not (self.split() or self.squeezed()):
                return self.combined_apart()
        return False

    def squeezed(self) -> bool:
        """Show one range the same in both items where one equation bounds it above by its copy and another
        below: ``r + a == r'`` and ``r == r' + b`` with ``a, b >= 0`` hold only if ``r == r'`` (a work item's
        column from the diagonal down and row from it rightwards, npbench's covariance, meet at its own
        diagonal element alone)."""
        for r in [r for r in self.copies if r not in self.matched]:
            below = above = False
            for a, b in self.equations:
                side = self._side(a - b, r)
                below, above = below or side == -1, above or side == 1
            if below and above:
                self._same(r)
                return True
        return False

    def _side(self, difference: Poly, r: UOp) -> int:
        """For ``difference == 0`` of the form ``c*(r - r') + rest`` with ``c`` a number: -1 where it proves
        ``r <= r'``, 1 where it proves ``r >= r'``, else 0."""
        parts = difference.split(r)
        rest = parts and parts[1].split(self.copies[r])
        if not parts or not rest or (parts[0] + rest[0]).terms or set(parts[0].terms) != {()}:
            return 0
        c = parts[0].terms[()]
        if self.prove(rest[1]):  # c*(r - r') == -rest <= 0
            return -1 if c > 0 else 1
        if self.prove(rest[1].scale(-1)):
            return 1 if c > 0 else -1
        return 0

    def combined_apart(self) -> bool:
        """Whether two of the equations, which must all hold, cannot hold together: their sum or difference has
        sides that never meet. Row ``i`` below the diagonal and column ``i`` right of it (``corr[i + 1 + a, i]``
        and ``corr[i', i' + 1 + b]``) meet only where ``i' - i >= 1`` and ``i - i' >= 1``."""
        for k, (a, b) in enumerate(self.equations):
            for c, d in self.equations[k + 1:]:
                if self.apart(a + c, b + d) or self.apart(a + d, b + c):
                    return True
        return False

    def prove(self, poly: Poly) -> bool:
        return self.prover.nonnegative(poly)

    def apart(self, a: Poly, b: Poly) -> bool:
        if self._mirrored(a, b):
            return False  # an item that makes the access meets itself: the two sides are one value there
        return self.prove(a - b - Poly.const(1)) or self.prove(b - a - Poly.const(1))

    def _mirrored(self, a: Poly, b: Poly) -> bool:
        """Whether ``b`` is ``a`` in the second item, where the first access is made in an item the second is
        made in it too, or the other way round (no guard, or the same), and its ranges may take a turn (one
        over 0 turns, a dimension of size 0, makes no access): then an item meets itself wherever its guard
        can hold. (A guard that never holds and that ``impossible`` does not see through is then not proven
        apart: refused, never wrongly accepted.)"""
        back = {copy: r for r, copy in self.copies.items()}
        first_guard, second_guard = self.guards
        return (None in self.guards or _renamed(second_guard, back) is first_guard) \
            and all(r.src[0].vmax >= 1 for r in self.copies) \
            and _poly_renamed(b, back, self.facts).terms == a.terms

    def within(self, difference: Poly, stride: Poly) -> bool:
        """``|difference| < |stride|`` for every value (which also proves ``stride != 0``)."""
        for size in (stride, stride.scale(-1)):
            if self.prove(size - Poly.const(1) - difference) and self.prove(size - Poly.const(1) + difference):
                return True
        return False

    def match(self) -> bool:
        """Show one range the same in both items: ``c*r + x == c*r' + y`` with ``|x - y| < |c|``."""
        for k, (a, b) in enumerate(self.equations):
            for r in self._by_stride(a, [r for r in self.copies if r not in self.matched]):
                parts_a, parts_b = a.split(r), b.split(self.copies[r])
                if parts_a is None or parts_b is None or not parts_a[0].terms \
                        or (parts_a[0] - parts_b[0]).terms:
                    continue
                if self.within(parts_a[1] - parts_b[1], parts_a[0]):
                    self.equations[k] = (parts_a[1], parts_b[1])
                    self._same(r)
                    return True
        return False

    def split(self) -> bool:
        """Take an equation apart at a stride ``s``: ``s*h + l == s*h' + l'`` with ``|l - l'| < s``."""
        for k, (a, b) in enumerate(self.equations):
            for stride in self._strides(a, b):
                high_a, low_a = _divided(a, stride)
                high_b, low_b = _divided(b, stride)
                if not (high_a.terms or high_b.terms) or not (low_a.terms or low_b.terms):
                    continue
                if self.within(low_a - low_b, stride):
                    self.equations[k:k + 1] = [(high_a, high_b), (low_a, low_b)]
                    return True
        return False

    def _same(self, r: UOp) -> None:
        """Range ``r`` is the same in both items from now on: its copy is replaced by it everywhere."""
        self.matched[r] = self.copies[r]
        back = {self.copies[m]: m for m in self.matched}
        self.facts = self._facts(back)
        self.prover = Prover(self.facts, self.rank)
        self.equations = [(_poly_renamed(a, back, self.facts), _poly_renamed(b, back, self.facts))
                          for a, b in self.equations]

    def _facts(self, back: Mapping[UOp, UOp]) -> Facts:
        """The facts of both guards (the second's ranges renamed ``back`` where matched), and that each
        range has an iteration."""
        facts = facts_from_guard(*(_renamed(g, back) for g in self.guards))
        for atom, least in self.ends:
            facts.add_lower(atom, Poly.const(least))
        return facts

    def _by_stride(self, poly: Poly, ranges: list[UOp]) -> list[UOp]:
        """``ranges`` with the largest stride in ``poly`` first (the outermost digit of an index)."""
        def size(r: UOp) -> tuple[float, int, str]:
            parts = poly.split(r)
            largest = 0.0 if parts is None or not parts[0].terms else max(abs(float(b)) for b in parts[0].interval())
            return (-largest, r.arg[0], r.key)
        return sorted(ranges, key=size)

    def _strides(self, a: Poly, b: Poly) -> list[Poly]:
        """Each single-term coefficient of a range or a variable in ``a`` or ``b``, as a positive stride, largest
        first (``3*i + j' == j`` of a plan loop's ``i``: row ``i`` and row 0 meet only where ``i`` is 0, and there
        in one column)."""
        found: dict[tuple[Monomial, int], None] = {}
        for poly in (a, b):
            for atom in poly.atoms():
                parts = poly.split(atom) if atom.op in (Ops.RANGE, Ops.DEFINE_VAR) else None
                if parts is not None and len(parts[0].terms) == 1:
                    ((monomial, c),) = parts[0].terms.items()
                    if abs(c) > 1 or monomial:
                        found[(monomial, abs(c))] = None
        strides = [Poly({m: c}) for m, c in found]
        return sorted(strides, key=lambda s: (-float(s.interval()[1]), repr(s)))


def _divided(poly: Poly, stride: Poly) -> tuple[Poly, Poly]:
    """``(h, l)`` with ``poly == stride*h + l``, for a one-term ``stride`` ``k*b``: each term that ``b``
    divides gives ``b`` the quotient of its coefficient by ``k`` toward zero, ``l`` the rest. So ``7*i`` at
    stride 6 is row ``i`` and column ``i`` (``T[i + 2 + r, i + d]`` in a 6-wide array, simplified)."""
    ((base, k),) = stride.terms.items()
    high: dict[Monomial, int] = {}
    low: dict[Monomial, int] = {}
    for m, c in poly.terms.items():
        quotient = _without(m, base)
        q = 0 if quotient is None else (c // k if c >= 0 else -(-c // k))
        if q:
            high[quotient] = q  # type: ignore[index]  # q is 0 when quotient is None
        if c - q * k:
            low[m] = c - q * k
    return Poly(high), Poly(low)


def _without(monomial: Monomial, factor: Monomial) -> Monomial | None:
    """``monomial / factor``, or None when ``factor`` does not divide it."""
    rest = list(monomial)
    for atom in factor:
        if atom not in rest:
            return None
        rest.remove(atom)
    return tuple(rest)


def _poly_renamed(poly: Poly, mapping: Mapping[UOp, UOp], facts: Facts) -> Poly:
    """``poly`` with the nodes of ``mapping`` replaced inside its atoms."""
    result = Poly()
    for m, c in poly.terms.items():
        term = Poly.const(c)
        for atom in m:
            term = term * to_poly(substitute(atom, mapping), facts.guarded)
        result = result + term
    return result
