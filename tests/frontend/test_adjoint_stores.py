"""An adjoint stores into a new adjoint array, rather than adding into its zeros, only where one plain add per
work item reaches each element (``Adjoint.storable``): the layer norm's x, a row's columns each read once, an
element read twice (its reads are one value). Reads of one element under two conditions, a read in a
sequential loop, a gather, an array the kernel writes, a pull into an adjoint holding values, and a second
call adding into the same gradient each keep the add; every gradient agrees with central differences of plain
Python (float64) on every device, and with the closed form. Where the stores reach every element of the array
(``Adjoint.covered``, for a call whose loops' extents are the array's shape: ``covers``), the tape takes the
gradient uninitialised: those gradients are whole where every new array holds NaN, and those of a call whose
loops fall short keep their zeros."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend.adjoint import adjoint
from tests.frontend.differences import agrees_with_differences, float_of


@svod.kernel
def normalised(y, x, mean, var, gamma, beta):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            y[i, j] = (x[i, j] - mean[i, 0]) / svod.math.sqrt(var[i, 0] + 1e-5) * gamma[j] + beta[j]


@svod.kernel
def read_twice(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * x[i] + x[i]


@svod.kernel
def row_product(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i, 0] * x[i, 1] + x[i, 0]


@svod.kernel
def either_branch(y, x):
    for i in svod.prange(x.shape[0]):
        if i % 2 == 0:
            y[i] = x[i] * 2.0
        else:
            y[i] = svod.math.sin(x[i])


@svod.kernel
def columns_in_turn(y, x):
    for i in svod.prange(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1]):
            s += x[i, k] * (k + 1.0)
        y[i] = s


@svod.kernel
def summed_in_turn(y, x):
    for i in svod.prange(x.shape[0]):
        s = 0.0
        for k in range(3):
            s += x[i] * k
        y[i] = s


@svod.kernel
def gathered(y, x, idx):
    for i in svod.prange(y.shape[0]):
        y[i] = x[idx[i]] * 2.0


@svod.kernel
def in_place(x):
    for i in svod.prange(x.shape[0]):
        x[i] = svod.math.sin(x[i])


@svod.kernel
def even_sines(y, x):
    for i in svod.prange(x.shape[0]):
        if i % 2 == 0:
            y[i] = svod.math.sin(x[i])
        else:
            y[i] = 0.0


def _floats(kernel) -> frozenset[str]:
    return frozenset(p for p in kernel.parameters if p != "idx")


def _adds(kernel, stored=frozenset()) -> str:
    made = adjoint(kernel, _floats(kernel), stored)
    return ast.unparse(made.kernel.source.node)


def test_the_layer_norms_x_is_stored_into_and_nothing_else():
    made = adjoint(normalised, _floats(normalised))
    assert made.storable == {"x"}
    assert "x_grad[i, j] += " in _adds(normalised)
    stored = _adds(normalised, frozenset({"x"}))
    assert "x_grad[i, j] = _svod_d" in stored and "x_grad[i, j] +=" not in stored
    assert adjoint(normalised, _floats(normalised), frozenset({"x", "gamma", "y"})).stored == {"x"}


@pytest.mark.parametrize("kernel", [either_branch, columns_in_turn, gathered, in_place])
def test_no_store_where_an_element_takes_more_than_one_add_or_its_array_is_written(kernel):
    assert adjoint(kernel, _floats(kernel)).storable == frozenset()


@pytest.mark.parametrize("kernel", [summed_in_turn, even_sines, read_twice, row_product])
def test_a_sum_of_turns_added_once_after_the_loop_a_guarded_read_and_reads_of_distinct_elements_are_stored(kernel):
    assert adjoint(kernel, _floats(kernel)).storable == {"x"}


def test_an_element_read_twice_is_one_read_whose_adjoint_is_added_once():
    assert _adds(read_twice).count("x_grad[i]") == 1


def _layer_norm_inputs(rows, cols, dtype):
    rng = np.random.default_rng(rows * 100 + cols)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    if x.size > 2:
        x.flat[1], x.flat[2] = -0.0, 0.0
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True) + 0.5  # (differences at var + 1e-5 near 0 are not its slope)
    return (np.zeros_like(x), x, mean, var, rng.uniform(0.5, 1.5, cols).astype(dtype),
            rng.standard_normal(cols).astype(dtype))


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 3), (7, 257)])
def test_the_stored_layer_norm_agrees_with_differences(device, rows, cols):
    agrees_with_differences(normalised, device, *_layer_norm_inputs(rows, cols, float_of(device)))


@pytest.mark.parametrize("n", [0, 1, 7, 13])
def test_each_kernels_adjoint_agrees_with_differences(device, n):
    f = float_of(device)
    x = np.random.default_rng(n).standard_normal(n).astype(f)
    if n > 2:
        x[1], x[2] = -0.0, 0.0
    for kernel, args in ((read_twice, (np.zeros(n, f), x)), (summed_in_turn, (np.zeros(n, f), x)),
                         (even_sines, (np.zeros(n, f), x)), (in_place, (x.copy(),)),
                         (either_branch, (np.zeros(n, f), x)),
                         (row_product, (np.zeros(n, f), np.stack([x, x[::-1]], axis=1))),
                         (columns_in_turn, (np.zeros(n, f), np.outer(x, np.arange(1.0, 4.0)).astype(f)))):
        agrees_with_differences(kernel, device, *args)
    if n:
        agrees_with_differences(gathered, device, np.zeros(n, f), x, ((np.arange(n) * 3) % n).astype(np.int32))


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 3), (7, 257)])
def test_a_pull_into_an_adjoint_holding_values_adds(device, rows, cols):
    """``fresh`` False: the adjoint adds into what x's adjoint held, as a later call's pull does."""
    f = float_of(device)
    y, x, _, var, gamma, _ = args = _layer_norm_inputs(rows, cols, f)
    seed = np.random.default_rng(3).standard_normal(y.shape).astype(f)
    made = adjoint(normalised, _floats(normalised))
    grads = {name: np.zeros_like(a) for name, a in zip(normalised.parameters, args, strict=True)}
    grads["y"] = seed.copy()
    held = np.linspace(-1.0, 1.0, x.size).reshape(x.shape).astype(f)
    grads["x"] = held.copy()
    made.pull(dict(zip(normalised.parameters, args, strict=True)), dict(grads),
              {name: name not in {"x", "y"} for name in grads}, device)
    want = seed * gamma / np.sqrt(var + 1e-5)
    tolerance = 1e-12 if f == np.float64 else 1e-5
    np.testing.assert_allclose(grads["x"], held + want, rtol=tolerance, atol=tolerance)
    fresh = {name: np.zeros_like(a) for name, a in grads.items()}
    fresh["y"] = seed.copy()
    made.pull(dict(zip(normalised.parameters, args, strict=True)), dict(fresh),
              {name: name != "y" for name in grads}, device)
    np.testing.assert_allclose(fresh["x"], want, rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(fresh["gamma"], grads["gamma"])


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 3), (7, 257)])
def test_two_calls_reading_x_add_both_their_adjoints(device, rows, cols):
    """The last call's adjoint finds x's gradient new and stores; the first's adds into what it stored."""
    f = float_of(device)
    y, x, mean, var, gamma, beta = _layer_norm_inputs(rows, cols, f)
    z = np.zeros_like(y)
    with svod.Tape() as tape:
        normalised(y, x, mean, var, gamma, beta, device=device)
        normalised(z, x, mean, var, beta, gamma, device=device)
    dy = np.random.default_rng(4).standard_normal(y.shape).astype(f)
    dz = np.random.default_rng(5).standard_normal(y.shape).astype(f)
    tape.backward(grads=[(y, dy), (z, dz)])
    want = (dy * gamma + dz * beta) / np.sqrt(var.astype(np.float64) + 1e-5)
    tolerance = 1e-12 if f == np.float64 else 1e-5
    np.testing.assert_allclose(tape.grad(x), want, rtol=tolerance, atol=tolerance)


@svod.kernel
def row_scaled_plus_first(y, x, s):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            y[i, j] = x[i, j] * s[i] + x[i, 0]


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 3), (7, 257)])
def test_no_store_where_a_pass_adds_into_the_same_gradient(device, rows, cols):
    """x[i, 0]'s adjoints sum over the columns in a pass that adds into x's gradient before the adjoint kernel
    runs: the kernel's one add per element into it stays an add."""
    assert adjoint(row_scaled_plus_first, _floats(row_scaled_plus_first)).storable == frozenset()
    f = float_of(device)
    rng = np.random.default_rng(rows + cols)
    agrees_with_differences(row_scaled_plus_first, device, np.zeros((rows, cols), f),
                            rng.standard_normal((rows, cols)).astype(f), rng.standard_normal(rows).astype(f))


@svod.kernel
def all_but_last(y, x):
    for i in svod.prange(x.shape[0] - 1):
        y[i] = x[i] * x[i]


@svod.kernel
def first_n(y, x, n):
    for i in svod.prange(n):
        y[i] = svod.math.exp(x[i])


@svod.kernel
def transposed(y, x):
    rows = x.shape[0]
    for j in svod.prange(0, x.shape[1]):
        for i in svod.prange(rows):
            y[j, i] = x[i, j] * 3.0


@svod.kernel
def lower_triangle(y, x):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(i + 1):
            y[i, j] = x[i, j] * 2.0


def test_an_adjoint_stored_once_by_every_work_item_names_the_extents_that_cover_its_array():
    """``covered``: the one unconditional add at the element the loops' variables index, with each loop's
    extent by the array's dimension; none under an if, at two elements a work item, or at a shifted place."""
    assert adjoint(normalised, _floats(normalised)).covered == (("x", ("x.shape[0]", "x.shape[1]")),)
    assert adjoint(read_twice, _floats(read_twice)).covered == (("x", ("x.shape[0]",)),)
    assert adjoint(transposed, _floats(transposed)).covered == (("x", ("rows", "x.shape[1]")),)
    assert adjoint(transposed, _floats(transposed)).prologue == (("rows", "x.shape[0]"),)
    for kernel in (row_product, even_sines, either_branch, columns_in_turn, gathered, in_place, lower_triangle):
        assert adjoint(kernel, _floats(kernel)).covered == ()  # (a triangle: an extent that is a loop's variable)


@pytest.mark.parametrize("n", [0, 1, 6, 7])
def test_an_adjoint_covers_its_array_only_where_the_calls_extents_are_its_shape(n):
    x, y = np.ones(7), np.zeros(7)
    assert adjoint(first_n, _floats(first_n)).covers("x", {"y": y, "x": x, "n": n}) == (n == 7)
    assert not adjoint(all_but_last, _floats(all_but_last)).covers("x", {"y": y, "x": x})
    made = adjoint(transposed, _floats(transposed))
    assert made.covers("x", {"y": np.zeros((3, 2)), "x": np.ones((2, 3))})
    assert not made.covers("x", {"y": np.zeros((3, 2)), "x": np.ones((2,))})  # (a shape the extents cannot read)
    huge = np.lib.stride_tricks.as_strided(x[:1], (1 << 31,), (0,))  # (a view of one element: no memory)
    assert not adjoint(first_n, _floats(first_n)).covers("x", {"y": huge, "x": huge, "n": 1 << 31})  # (past 32 bits)


@pytest.fixture
def poisoned_new_arrays(monkeypatch):
    """Every uninitialised array a tape takes holds all-ones bytes (NaN in a float), as reused memory may: an
    adjoint taken so that its kernel does not store into every element shows NaN there."""
    from svod.frontend import buffers

    numpy_empty, lease_empty = np.empty, buffers.Lease.empty

    def empty(*args, **kwargs):
        made = numpy_empty(*args, **kwargs)
        made.view(np.uint8)[...] = 0xFF
        return made

    def lease(self, *args, **kwargs):
        made = lease_empty(self, *args, **kwargs)
        made.view(np.uint8)[...] = 0xFF
        return made

    monkeypatch.setattr(np, "empty", empty)
    monkeypatch.setattr(buffers.Lease, "empty", lease)


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_gradients_taken_uninitialised_are_whole_and_those_not_covered_keep_their_zeros(device, n,
                                                                                          poisoned_new_arrays):
    f = float_of(device)
    x = np.random.default_rng(n).standard_normal(n).astype(f)
    for kernel, args in ((read_twice, (np.zeros(n, f), x)), (all_but_last, (np.zeros(n, f), x)),
                         (first_n, (np.zeros(n, f), x, n)), (first_n, (np.zeros(n, f), x, n - 1)),
                         (transposed, (np.zeros((3, n), f), np.outer(x, np.arange(1.0, 4.0)).astype(f))),
                         (lower_triangle, (np.zeros((n, n), f), np.outer(x, x).astype(f)))):
        agrees_with_differences(kernel, device, *args)
    _, pullback = svod.vjp(all_but_last, np.zeros(n, f), x, device=device)
    assert pullback(np.ones(n, f))[1][-1] == 0.0
    with svod.Tape() as tape:  # (an adjoint the tape keeps for itself: the lease's)
        y = np.zeros(n, f)
        z = np.zeros(n, f)
        read_twice(y, x, device=device)
        read_twice(z, y, device=device)
    tape.backward(grads=[(z, np.ones(n, f))])
    want = (2 * (x * x + x) + 1) * (2 * x + 1)
    np.testing.assert_allclose(tape.grad(x), want, rtol=1e-5 if f == np.float32 else 1e-12)


def test_an_adjoint_taken_uninitialised_that_the_pull_adds_into_is_zeroed_first(device):
    """``unset`` names an adjoint the adjoint made adds into (here: not new, so not stored): ``pull`` zeroes it
    rather than add into what the memory held."""
    f = float_of(device)
    x = np.linspace(-1.0, 1.0, 9).astype(f)
    seed = np.linspace(0.5, 1.5, 9).astype(f)
    adjoints = {"y": seed.copy(), "x": np.full(9, np.nan, f)}
    adjoint(read_twice, _floats(read_twice)).pull({"y": np.zeros(9, f), "x": x}, adjoints,
                                                  {"y": False, "x": False}, device, unset=frozenset({"x"}))
    np.testing.assert_allclose(adjoints["x"], seed * (2 * x + 1), rtol=1e-6)
