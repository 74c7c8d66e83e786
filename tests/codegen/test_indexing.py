"""Index expressions as polynomials (``svod.codegen.indexing``): each node's is found once and kept as long as
the node lives; a polynomial's interval and its split at an atom are what their definitions say."""

from __future__ import annotations

import gc
import itertools
import math
import random
import weakref

from svod.codegen.indexing import Poly, to_poly
from svod.dtype import dtypes
from svod.ir import UOp


def test_an_index_is_a_polynomial_over_its_atoms():
    i, j = UOp.range(4, 0), UOp.range(8, 1)
    n = UOp.define_var("n", 1, 9)
    poly = to_poly((i * 8 + j) * 2 - j + n * i)
    assert poly.terms == {(i,): 16, (j,): 1, tuple(sorted((i, n), key=lambda a: a.key)): 1}
    assert to_poly(j // 2).terms == {(j // 2,): 1}  # a division is an atom


def test_a_nodes_polynomial_is_found_once_and_kept_whole_atoms_aside():
    i, j = UOp.range(4, 0), UOp.range(8, 1)
    index = i * 8 + j
    assert to_poly(index) is to_poly(index)
    assert to_poly(index + 1).terms == {(i,): 8, (j,): 1, (): 1}
    assert to_poly(index, [j * 3]) is to_poly(index)  # an atom the index does not hold changes nothing
    kept = to_poly(index * 2, [index])
    assert kept.terms == {(index,): 2} and to_poly(index * 2).terms == {(i,): 16, (j,): 2}


def test_a_kept_polynomial_does_not_keep_its_node_alive():
    m = UOp.define_var("m", 0, 7)
    atom, expanded = m // 3, m * 5 + 2  # an atom's polynomial holds the atom
    assert to_poly(atom).terms == {(atom,): 1} and to_poly(expanded).terms == {(m,): 5, (): 2}
    gone = [weakref.ref(atom), weakref.ref(expanded)]
    del atom, expanded
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


def _atoms_with_bounds() -> list[UOp]:
    """Atoms over every sign of bound: ranges from 0, variables below 0, across it and far from it, and a float
    constant (bounds that are not integers, which take the corners one atom at a time)."""
    return [UOp.range(5, 0), UOp.range(1, 1), UOp.define_var("a", -7, -2), UOp.define_var("b", -3, 4),
            UOp.define_var("c", 0, 0), UOp.define_var("d", 1 << 40, (1 << 40) + 9),
            UOp.define_var("e", -(1 << 41), 3), UOp.const(dtypes.float32, 2.5)]


def _corner_interval(poly: Poly) -> tuple[float, float]:
    """The interval of ``poly`` by brute force: each term's least and largest over every corner of its atoms."""
    lo: float = 0
    hi: float = 0
    for monomial, c in poly.terms.items():
        products = [c * math.prod(corner) for corner in itertools.product(*(a.bounds for a in monomial))]
        lo, hi = lo + min(products), hi + max(products)
    return lo, hi


def test_an_interval_from_each_monomials_bounds_is_the_corners_one():
    """A prover keeps each monomial's bounds and scales them by the coefficient: the same interval as the
    corners of every term, for every sign of coefficient and bound, and squared atoms."""
    atoms = _atoms_with_bounds()
    draw = random.Random(7)
    products: dict = {}
    for _ in range(300):
        poly = Poly.const(draw.randint(-5, 5))
        for _ in range(draw.randint(1, 4)):
            term = Poly.const(draw.choice([-1 << 33, -9, -1, 1, 2, 7, 1 << 35]))
            for atom in draw.sample(atoms, draw.randint(1, 3)) + draw.sample(atoms, draw.randint(0, 1)):
                term = term * Poly.atom(atom)
            poly = poly + term
        fresh = Poly(poly.terms)
        got, want = poly.interval(products), _corner_interval(poly)
        assert got == fresh.interval()  # the same numbers as the corners one atom at a time
        if all(isinstance(b, int) for b in want):
            assert got == want
        else:  # a float bound: the corners in another order may round otherwise
            assert all(math.isclose(g, w, rel_tol=1e-12) for g, w in zip(got, want, strict=True))


def test_split_takes_out_one_atom_told_apart_by_identity():
    i, j = UOp.range(4, 0), UOp.range(8, 1)
    n = UOp.define_var("n", 1, 9)
    poly = to_poly(i * n * 3 + j * 2 - n + 5)
    coefficient, rest = poly.split(n)
    assert coefficient.terms == {(i,): 3, (): -1} and rest.terms == {(j,): 2, (): 5}
    assert (coefficient * Poly.atom(n) + rest).terms == poly.terms
    assert poly.split(UOp.range(4, 2)) is not None and poly.split(UOp.range(4, 2))[0].terms == {}
    assert to_poly(n * n + i).split(n) is None  # squared: no linear split
    assert (poly - poly).terms == {} and (poly + poly.scale(-1)).interval() == (0, 0)
