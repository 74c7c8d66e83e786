"""Index expressions as polynomials (``svod.codegen.indexing``): each node's is found once and kept as long as
the node lives."""

from __future__ import annotations

import gc
import weakref

from svod.codegen.indexing import to_poly
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
