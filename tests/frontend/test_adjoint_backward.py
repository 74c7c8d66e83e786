"""How a work item's backward adds each read's adjoint into its array's (``svod.frontend.adjoint_backward``): a
read of the work item's own element with ``+=``, a gather's with ``svod.atomic_add``, a stored element's adjoint
read then set to zero, an updated one's kept; the values against the derivative written out, and the store into
an array that other work items' reads reach refused."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

import svod
from svod.frontend.adjoint import adjoint


@svod.kernel
def gathered_store(y, z, w, x, idx):
    for i in svod.prange(y.shape[0]):
        y[i] = w[i] * x[idx[i]]
        z[i] += w[i] * w[i]


@pytest.mark.parametrize("n", [1, 2, 13])
def test_own_reads_add_plainly_a_gather_atomically_a_store_zeroes_an_update_keeps(n):
    made = adjoint(gathered_store, frozenset({"y", "z", "w", "x"}))
    assert made.kernel is not None and not made.passes
    source = ast.unparse(made.kernel.source.node)
    assert "w_grad[i] +=" in source and "_svod_atomic_add(x_grad, idx[i]," in source
    assert "y_grad[i] = 0.0" in source and "z_grad[i] = 0.0" not in source
    rng = np.random.default_rng(n)
    w, x, idx = rng.standard_normal(n), rng.standard_normal(n), rng.integers(0, n, n).astype(np.int32)
    dy, dz = rng.standard_normal(n), rng.standard_normal(n)
    _, pullback = svod.vjp(gathered_store, np.zeros(n), np.zeros(n), w, x, idx)
    gy, gz, gw, gx, gidx = pullback((dy, dz))
    np.testing.assert_allclose(gw, dy * x[idx] + 2.0 * dz * w, rtol=1e-12, atol=1e-15)
    expected = np.zeros(n)
    np.add.at(expected, idx, dy * w)
    np.testing.assert_allclose(gx, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(gy, np.zeros(n))
    np.testing.assert_array_equal(gz, dz)
    assert gidx is None


@svod.kernel
def gather_and_store(y, x, idx):
    for i in svod.prange(y.shape[0]):
        y[i] = x[idx[i]]
        x[i] = 0.0


def test_a_store_into_an_array_other_work_items_read_is_refused_at_the_read():
    lines, first = inspect.getsourcelines(gather_and_store.fn)
    line = first + next(k for k, text in enumerate(lines) if "y[i] = x[idx[i]]" in text)
    x = np.ones(4)
    with pytest.raises(svod.errors.GradientError) as raised:
        svod.vjp(gather_and_store, np.zeros(4), x, np.zeros(4, np.int32))
    error = raised.value
    assert (error.kernel, error.stage) == ("gather_and_store", "gradient")
    assert f"{__file__}:{line}: a read of x at elements of other work items, and a store into x" in error.detail
    assert "write x's new values into another array" in error.detail
    assert np.array_equal(x, np.ones(4)), "a refused kernel does not run"
