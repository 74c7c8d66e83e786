"""Lengths of array axes that the host does not know when a jitted function's plan is prepared: ``C[i, :i + 1]``
under ``for i in range(n)``, ``r[:k]``, ``A_val[A_row[i]:A_row[i + 1]]`` inside a ``prange`` (the array
statements of ``svod.frontend.arrays``).

A length (or a view's start) is a ``Dim``: a Python int where the host knows it, else an ``Extent``, an integer
sum ``constant + c1 * a1 + c2 * a2 + ...`` of atoms. An atom is a loop's variable, an element read from memory,
or a ``min``, ``max``, floor division or clamp of other extents, each with the least and greatest
value it may take. The sum is kept in one normal form (its atoms ordered by their keys, like terms added), so
that two lengths written alike are one (``i + 1`` and ``1 + i``, ``(i + 3) - 2`` and ``i + 1``): two axes
broadcast together only where their lengths are provably equal. The bounds give each extent a static upper
bound (an array made at a turn's length is made at the greatest, and viewed at the turn's) and decide what
they can (``min(i + 1, n)`` is ``i + 1`` where ``i < n``).

``sliced`` is Python's meaning of a slice: negative bounds count from the end, bounds past an end are clamped,
on extents as on ints (where an extent's sign is not known, decided at run time).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from svod.frontend.nodes import call, constant, copied, load

TEMPORARY_LENGTH = (1 << 31) - 1
"""The longest axis of an array the rewriting makes at a length the host does not know before the run (at
the greatest the length may be): past it, the greatest is not known either."""


@dataclass(frozen=True, eq=False)
class Atom:
    """One value an extent is a sum of: ``node`` computes it; two atoms of one ``key`` are one value."""

    key: str
    node: ast.expr
    low: int
    high: int
    reads: frozenset[str] = field(default_factory=frozenset)
    """The arrays whose elements it reads (a bound read from memory), and the names of the loop variables it
    reads."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class Extent:
    """``constant + sum(coefficient * atom)``, its terms ordered by their atoms' keys, none of coefficient 0
    and at least one (an extent of none is a Python int: ``dim``)."""

    terms: tuple[tuple[Atom, int], ...]
    constant: int = 0

    @property
    def low(self) -> int:
        return self.constant + sum(c * (a.low if c > 0 else a.high) for a, c in self.terms)

    @property
    def high(self) -> int:
        return self.constant + sum(c * (a.high if c > 0 else a.low) for a, c in self.terms)

    @property
    def reads(self) -> frozenset[str]:
        return frozenset().union(*(a.reads for a, _ in self.terms))

    def node(self) -> ast.expr:
        """The extent as a Python expression (new nodes at each call)."""
        made: ast.expr | None = None
        for atom, coefficient in self.terms:
            part = copied(atom.node)
            magnitude = abs(coefficient)
            if magnitude != 1:
                part = ast.BinOp(constant(magnitude), ast.Mult(), part)
            if made is None:
                made = part if coefficient > 0 else ast.UnaryOp(ast.USub(), part)
            else:
                made = ast.BinOp(made, ast.Add() if coefficient > 0 else ast.Sub(), part)
        assert made is not None  # (an extent has a term)
        if self.constant:
            made = ast.BinOp(made, ast.Add() if self.constant > 0 else ast.Sub(), constant(abs(self.constant)))
        return made

    def __str__(self) -> str:
        return ast.unparse(self.node())


Dim = int | Extent
"""An axis's length or a view's start: an int the host knows, or an extent it does not."""


def dim(terms: dict[Atom, int], constant_part: int) -> Dim:
    """The normal form of a sum: an int where no term is left."""
    kept = tuple(sorted(((a, c) for a, c in terms.items() if c), key=lambda term: term[0].key))
    return Extent(kept, constant_part) if kept else constant_part


def atom(key: str, node: ast.expr, low: int, high: int, reads: frozenset[str] = frozenset()) -> Dim:
    """An extent of one atom (its value where its bounds are one)."""
    return low if low == high else dim({Atom(key, node, low, high, reads): 1}, 0)


def variable(name: str, key: str, low: int, high: int) -> Dim:
    """A loop's variable ``name`` taking values in ``low..high``; ``key`` tells this loop from others of the
    same variable's name."""
    return atom(key, load(name), low, high, frozenset({name}))


def _terms(value: Dim) -> tuple[dict[Atom, int], int]:
    if isinstance(value, int):
        return {}, value
    return dict(value.terms), value.constant


def add(a: Dim, b: Dim, scale: int = 1) -> Dim:
    """``a + scale * b``."""
    terms, constant_a = _terms(a)
    others, constant_b = _terms(b)
    for item, coefficient in others.items():
        terms[item] = terms.get(item, 0) + scale * coefficient
    return dim(terms, constant_a + scale * constant_b)


def sub(a: Dim, b: Dim) -> Dim:
    return add(a, b, -1)


def times(a: Dim, factor: int) -> Dim:
    return add(0, a, factor)


def low(value: Dim) -> int:
    return value if isinstance(value, int) else value.low


def high(value: Dim) -> int:
    return value if isinstance(value, int) else value.high


def at_most(a: Dim, b: Dim) -> bool:
    """Whether ``a <= b`` whatever values the atoms take."""
    return low(sub(b, a)) >= 0


def node_of(value: Dim) -> ast.expr:
    return constant(value) if isinstance(value, int) else value.node()


def reads(value: Dim) -> frozenset[str]:
    return frozenset() if isinstance(value, int) else value.reads


def _key(value: Dim) -> str:
    if isinstance(value, int):
        return str(value)
    return "+".join(f"{c}*{a.key}" for a, c in value.terms) + f"+{value.constant}"


def minimum(a: Dim, b: Dim) -> Dim:
    return _extreme(a, b, "min")


def maximum(a: Dim, b: Dim) -> Dim:
    return _extreme(a, b, "max")


def _extreme(a: Dim, b: Dim, name: str) -> Dim:
    """``min(a, b)`` or ``max(a, b)``: one of them where the bounds show which, else an atom of both, in an order
    of their own (``min(a, b)`` and ``min(b, a)`` are one extent)."""
    smaller = name == "min"
    if at_most(a, b) if smaller else at_most(b, a):
        return a
    if at_most(b, a) if smaller else at_most(a, b):
        return b
    pick = min if smaller else max
    first, second = sorted((a, b), key=_key)
    return atom(f"{name}({_key(first)},{_key(second)})", call(name, node_of(first), node_of(second)),
                pick(low(a), low(b)), pick(high(a), high(b)), reads(a) | reads(b))


def floor_div(a: Dim, divisor: int) -> Dim:
    """``a // divisor`` for a positive ``divisor``."""
    if isinstance(a, int):
        return a // divisor
    if a.constant % divisor == 0 and all(c % divisor == 0 for _, c in a.terms):
        return dim({item: c // divisor for item, c in a.terms}, a.constant // divisor)
    return atom(f"({_key(a)})//{divisor}", ast.BinOp(a.node(), ast.FloorDiv(), constant(divisor)),
                a.low // divisor, a.high // divisor, a.reads)


def sliced(lower: Dim | None, upper: Dim | None, step: int, size: Dim) -> tuple[Dim, Dim]:
    """The first index and the length of ``[lower:upper:step]`` on an axis of ``size`` elements, as Python's
    ``slice.indices`` has them (``step`` a nonzero int)."""
    if step > 0:
        start = 0 if lower is None else _clamped(lower, size, 0, size)
        stop = size if upper is None else _clamped(upper, size, 0, size)
        span = sub(stop, start)
    else:
        last = sub(size, 1)
        start = last if lower is None else _clamped(lower, size, -1, last)
        stop = -1 if upper is None else _clamped(upper, size, -1, last)
        span = sub(start, stop)
    turns = abs(step)
    return start, maximum(floor_div(add(span, turns - 1), turns), 0)


def _clamped(bound: Dim, size: Dim, least: Dim, most: Dim) -> Dim:
    """A slice bound as Python takes it: a negative one counted from the end, then kept in ``least..most``
    (decided now where the bound's sign is known; else ``min(max(bound + size * (bound < 0), least), most)``, the
    same without a branch)."""
    if high(bound) < 0:
        return maximum(add(bound, size), least)
    if low(bound) >= 0:
        return minimum(bound, most)
    negative = ast.Compare(node_of(bound), [ast.Lt()], [constant(0)])
    counted = ast.BinOp(node_of(bound), ast.Add(), ast.BinOp(node_of(size), ast.Mult(), negative))
    made = call("min", call("max", counted, node_of(least)), node_of(most))
    return atom(f"clamp({_key(bound)},{_key(size)},{_key(least)},{_key(most)})", made,
                min(low(least), low(most)), high(most), reads(bound) | reads(size))


def broadcast(shapes: Sequence[tuple[Dim, ...]]) -> tuple[Dim, ...] | None:
    """NumPy's broadcast of ``shapes``, where their lengths are provably equal or 1; None where not."""
    ndim = max((len(s) for s in shapes), default=0)
    result: list[Dim] = []
    for axis in range(ndim):
        found: Dim = 1
        for shape in shapes:
            offset = axis - (ndim - len(shape))
            if offset < 0:
                continue
            length = shape[offset]
            if length == 1 and isinstance(length, int):
                continue
            if found == 1 and isinstance(found, int):
                found = length
            elif found != length:
                return None
        result.append(found)
    return tuple(result)


def is_static(shape: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in shape)


def numbers(shape: Sequence[Dim]) -> tuple[int, ...]:
    """A shape the host knows (the caller refused one it does not: ``ArrayRewriter.static``)."""
    found = tuple(d for d in shape if isinstance(d, int))
    if len(found) != len(shape):
        raise ValueError(f"internal: the shape {shown(shape)} has a length known only at run time")
    return found


def greatest(shape: Sequence[Dim]) -> tuple[int, ...]:
    """The greatest length each axis may have (never below 0)."""
    return tuple(max(high(d), 0) for d in shape)


def elements(shape: Sequence[Dim]) -> Dim:
    """How many elements an array of ``shape`` has."""
    total: Dim = 1
    for length in shape:
        if isinstance(length, int) and isinstance(total, int):
            total *= length
        elif isinstance(length, int):
            total = times(total, length)
        elif isinstance(total, int):
            total = times(length, total)
        else:
            product = ast.BinOp(node_of(total), ast.Mult(), node_of(length))
            bounds = [high(total) * high(length), low(total) * low(length), high(total) * low(length),
                      low(total) * high(length)]
            total = atom(f"({_key(total)})*({_key(length)})", product, min(bounds), max(bounds),
                         reads(total) | reads(length))
    return total


def shown(shape: Sequence[Dim]) -> str:
    """A shape as an error shows it: ``(3, i + 1)``."""
    parts = [str(d) for d in shape]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
