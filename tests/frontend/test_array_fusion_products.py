"""A product of a fused array read at more than one element (``Emitter.check_product``), past the shapes
``test_array_fusion`` covers: read in three statements, in a loop's body, and against its transpose where the
product is a row or a column (``y + y.T`` broadcasts to a square). Each is made once and computes NumPy's
values."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from tests.frontend.test_array_fusion import _products_written, data
from tests.frontend.test_jit import agrees_with_python


@svod.jit
def plus_its_transpose(a, b):
    y = a @ b
    return y + y.T


@svod.jit
def read_in_three_statements(a, b):
    y = a @ b
    doubled = y * 2.0
    turned = y.T + 1.0
    grown = np.exp(y)
    return doubled + grown, turned


@svod.jit
def shifted_and_summed(a, b):
    y = a @ b
    shifted = y - np.max(y, axis=1, keepdims=True)
    both = shifted + y * 2.0
    return both + np.sum(y, axis=0, keepdims=True)


@svod.jit
def times_its_transpose(a, b):
    y = a @ b
    return y * y.T + y


@svod.jit
def made_in_a_loop(a, b, steps):
    c = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
    for _ in range(steps):
        y = a @ b
        c = c + y - np.max(y, axis=1, keepdims=True)
    return c


SHAPES = [(1, 4, 5), (5, 4, 1), (1, 7, 1), (3, 2, 3)]
"""(rows, inner, columns) of ``a @ b``: a row, a column, one element and a square."""


@pytest.mark.parametrize("taped", [False, True], ids=["plan", "tape"])
@pytest.mark.parametrize(("fn", "shape"), [(plus_its_transpose, (1, 4, 5)), (plus_its_transpose, (5, 4, 1)),
                                           (read_in_three_statements, (4, 6, 3)), (shifted_and_summed, (4, 6, 3)),
                                           (times_its_transpose, (5, 3, 5))], ids=str)
def test_a_product_read_at_several_elements_is_made_once(fn, shape, taped):
    """One sum over ``b``'s rows in the rewritten function: the product is made once, however many read it."""
    rows, inner, columns = shape
    assert _products_written(fn, {"a": data(rows, inner), "b": data(inner, columns)}, taped, "b") == 1


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_product_against_its_transpose_computes_what_numpy_does(device, shape):
    rows, inner, columns = shape
    a, b = data(rows, inner), data(inner, columns)
    a[0, 0] = -0.0
    agrees_with_python(plus_its_transpose, device, a, b, rtol=1e-9)
    agrees_with_python(times_its_transpose, device, data(columns, inner), data(inner, columns), rtol=1e-9)


@pytest.mark.parametrize("shape", [(4, 6, 3), (1, 2, 1), (7, 3, 2)], ids=str)
def test_a_product_read_in_several_statements_computes_what_numpy_does(device, shape):
    rows, inner, columns = shape
    a, b = data(rows, inner), data(inner, columns)
    b[0, 0] = np.inf if rows == 1 else b[0, 0]
    agrees_with_python(read_in_three_statements, device, a, b, rtol=1e-9)
    agrees_with_python(shifted_and_summed, device, data(rows, inner), data(inner, columns), rtol=1e-9)


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_product_made_in_a_loop_computes_what_numpy_does(device, steps):
    agrees_with_python(made_in_a_loop, device, data(3, 4), data(4, 3), steps, rtol=1e-9)
