"""``svod.vjp`` of kernels on every device against central finite differences of the kernel's own function run
as plain Python (float64), on random directions: elementwise math, gathers, scatters, reductions by atomics,
``+=`` updates and a kernel that reads and writes one array; every adjoint pulled one way (``Adjoint.pull``),
leaving out the adjoints no gradient asked for needs."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend.adjoint import adjoint
from svod.frontend.adjoint_gemm import GemmAdjoint, adjoint_of
from svod.frontend.pykernel import Kernel
from tests.frontend.differences import agrees_with_differences, float_of


@svod.kernel
def elementwise(y, x, z):
    for i in svod.prange(y.shape[0]):
        a = svod.math.sin(x[i]) * z[i] + svod.math.exp(-x[i] * x[i])
        b = svod.math.tanh(a) / (1.0 + z[i] * z[i]) + svod.math.sqrt(z[i] * z[i] + 1.0) ** 1.5
        y[i] = (b if x[i] > 0.0 else -a) + max(x[i], z[i]) + abs(z[i]) + svod.math.log(1.0 + x[i] * x[i])


@svod.kernel
def branches(y, h, x, idx):
    for i in svod.prange(y.shape[0]):
        t = x[i] * 2.0
        if x[i] > 0.5:
            t = svod.math.log(x[i]) * t
            y[i] = t * x[idx[i]]
        elif i > 0:
            u = x[idx[i]] * 3.0
            t = t + u * x[idx[i]]
            if t < 0.0:
                svod.atomic_add(h, idx[i], t * u)
            y[i] = t
        else:
            y[i] = svod.math.sqrt(x[i] + 4.0)
        svod.atomic_add(h, idx[i], t * 0.5)


@svod.kernel
def guarded_neighbour(y, x):
    for i in svod.prange(y.shape[0]):
        t = x[i]
        if i > 0:
            t = x[i - 1] * x[i]
        y[i] = t * t


@svod.kernel
def read_back(y, z, x):
    for i in svod.prange(x.shape[0]):
        y[i] += x[i] * x[i]
        z[i] = y[i] * 2.0
        y[i] = svod.math.sin(y[i]) + z[i]
        y[i] -= x[i]
        z[i] += y[i] * y[i]


@svod.kernel
def gather(y, x, idx):
    for i in svod.prange(y.shape[0]):
        y[i] = x[idx[i]] * x[i] + (x[i - 1] * 0.5 if i > 0 else 0.0)


@svod.kernel
def scatter(y, x, idx):
    for i in svod.prange(x.shape[0]):
        svod.atomic_add(y, idx[i], x[i] * x[i])


@svod.kernel
def row_sums(total, x):
    for r in svod.prange(x.shape[0]):
        for c in svod.prange(x.shape[1]):
            svod.atomic_add(total, r, x[r, c] * svod.math.cos(x[r, c]))


@svod.kernel
def in_place(x, w):
    for i in svod.prange(x.shape[0]):
        x[i] = x[i] * w[i] + svod.math.sigmoid(x[i])


@svod.kernel
def updates(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] += x[i] * 3.0
        y[i] -= x[i] * x[i]


@pytest.mark.parametrize("n", [1, 37])
def test_elementwise_math_and_branches(device, n):
    rng = np.random.default_rng(n)
    f = float_of(device)
    agrees_with_differences(elementwise, device, np.zeros(n, f), rng.standard_normal(n).astype(f),
                            rng.standard_normal(n).astype(f))


def test_if_statements_take_the_adjoint_through_the_side_taken_only(device):
    """log and sqrt on a side not taken would make NaNs of what they never computed."""
    rng = np.random.default_rng(6)
    f = float_of(device)
    x = rng.standard_normal(40).astype(f) * 2
    agrees_with_differences(branches, device, rng.standard_normal(40).astype(f), rng.standard_normal(7).astype(f), x,
                            rng.integers(0, 7, 40).astype(np.int32))


def test_a_read_a_branch_not_taken_guards_is_made_by_no_adjoint(device):
    """x[i - 1] where i > 0 only: the adjoint reads and adds into x_grad[-1] nowhere."""
    f = float_of(device)
    x = np.random.default_rng(8).standard_normal(9).astype(f)
    agrees_with_differences(guarded_neighbour, device, np.zeros(9, f), x)


def test_a_gather_adds_into_every_element_it_read(device):
    rng = np.random.default_rng(1)
    f = float_of(device)
    idx = rng.integers(0, 40, 40).astype(np.int32)
    idx[:5] = 3  # one element read by several work items
    agrees_with_differences(gather, device, np.zeros(40, f), rng.standard_normal(40).astype(f), idx)


def test_a_scatter_add_reads_the_adjoint_of_each_element_it_added_into(device):
    rng = np.random.default_rng(2)
    f = float_of(device)
    agrees_with_differences(scatter, device, rng.standard_normal(5).astype(f), rng.standard_normal(50).astype(f),
                            rng.integers(0, 5, 50).astype(np.int32))


def test_a_reduction_by_atomics_over_a_nest_of_parallel_loops(device):
    rng = np.random.default_rng(3)
    f = float_of(device)
    agrees_with_differences(row_sums, device, np.zeros(6, f), rng.standard_normal((6, 9)).astype(f))


def test_a_kernel_that_reads_and_writes_one_array_differentiates_the_values_it_read(device):
    rng = np.random.default_rng(4)
    f = float_of(device)
    agrees_with_differences(in_place, device, rng.standard_normal(33).astype(f), rng.standard_normal(33).astype(f))


def test_reading_back_the_element_a_work_item_stored_reads_the_value_it_stored(device):
    rng = np.random.default_rng(9)
    f = float_of(device)
    agrees_with_differences(read_back, device, *(rng.standard_normal(17).astype(f) for _ in range(3)))


def test_updates_keep_the_adjoint_of_what_they_add_to(device):
    rng = np.random.default_rng(5)
    f = float_of(device)
    agrees_with_differences(updates, device, rng.standard_normal(20).astype(f), rng.standard_normal(20).astype(f))


def test_the_pullback_takes_cotangents_by_name_and_gives_none_for_integers():
    x = np.arange(4.0)
    (y,), pullback = svod.vjp(gather, np.zeros(4), x, np.array([3, 2, 1, 0], np.int32))
    assert np.array_equal(y, x[::-1] * x + np.r_[0.0, x[:-1] * 0.5])
    by_name = pullback({"y": np.ones(4)})
    by_tuple = pullback((np.ones(4),))
    alone = pullback(np.ones(4))
    for grads in (by_tuple, alone):
        assert all(np.array_equal(a, b) for a, b in zip(grads[:2], by_name[:2], strict=True))
    assert by_name[2] is None and np.array_equal(by_name[0], np.zeros(4))
    assert np.array_equal(by_name[1], x[::-1] + x[::-1] + np.r_[0.5, 0.5, 0.5, 0.0])
    with pytest.raises(svod.errors.GradientError, match="writes y, not z"):
        pullback({"z": np.ones(4)})
    with pytest.raises(svod.errors.GradientError, match="was given 2 cotangents"):
        pullback((np.ones(4), np.ones(4)))


@svod.kernel
def product(y, a, b):
    for i in svod.prange(y.shape[0]):
        y[i] = a[i] * b[i] + b[i]


def test_one_array_passed_twice_gets_one_gradient_per_argument_from_vjp_and_their_sum_from_a_tape():
    x = np.arange(1.0, 4.0)
    _, pullback = svod.vjp(product, np.zeros(3), x, x)
    _, da, db = pullback(np.ones(3))
    assert np.array_equal(da, x) and np.array_equal(db, x + 1.0)
    y = np.zeros(3)
    with svod.Tape() as tape:
        product(y, x, x)
    tape.backward(grads=[(y, np.ones(3))])
    assert np.array_equal(tape.grad(x), 2 * x + 1.0)


@svod.kernel
def read_back_in_a_condition(y, z, x, idx):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * 2.0
        idx[i] = idx[i] * 2
        z[i] = svod.math.exp(x[idx[i] // 2]) if y[i] > 1.0 else y[i] * y[i]


def test_a_condition_and_an_index_read_back_what_the_work_item_stored():
    rng = np.random.default_rng(10)
    agrees_with_differences(read_back_in_a_condition, svod.get_device("CPU"), np.zeros(12), np.zeros(12),
                            rng.standard_normal(12), rng.integers(0, 12, 12).astype(np.int32))


@svod.kernel
def matmul(c, a, b):
    for i in svod.prange(a.shape[0]):
        for j in svod.prange(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            c[i, j] = s


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (5, 7, 3)])
def test_a_product_s_two_adjoints_pull_alike_and_leave_out_an_adjoint_given_as_none(device, m, k, n):
    """The matrix products' adjoint and the general one, through one ``pull``: dA = dC @ B.T and dB = A.T @ dC,
    dC set to zero (C overwritten); A's adjoint given as None is left out, by the general adjoint as one made
    without it, whose source names no A adjoint."""
    f = float_of(device)
    rng = np.random.default_rng(m * k * n)
    a, b = rng.standard_normal((m, k)).astype(f), rng.standard_normal((k, n)).astype(f)
    args = {"c": np.zeros((m, n), f), "a": a, "b": b}
    floats = frozenset(args)
    kinds = [adjoint_of(matmul, floats, list(args.values())), adjoint(matmul, floats)]
    assert isinstance(kinds[0], GemmAdjoint) and not isinstance(kinds[1], GemmAdjoint)
    tolerance = 1e-12 if f == np.float64 else 1e-5
    for made in kinds:
        for wanted_a in (True, False):
            dc = rng.standard_normal((m, n)).astype(f)
            grads = {"c": dc.copy(), "a": np.zeros_like(a) if wanted_a else None, "b": np.zeros_like(b)}
            made.pull(dict(args), dict(grads), {"c": False, "a": True, "b": True}, device)
            np.testing.assert_allclose(grads["b"], a.T.astype(np.float64) @ dc, rtol=tolerance, atol=tolerance)
            if grads["a"] is not None:
                np.testing.assert_allclose(grads["a"], dc.astype(np.float64) @ b.T, rtol=tolerance, atol=tolerance)
            assert not grads["c"].any()
    without = adjoint(matmul, floats - {"a"})
    assert [name for name, _ in without.grads] == ["c", "b"] and without.kernel is not None
    assert "a_grad" not in ast.unparse(without.kernel.source.node)


@svod.kernel
def squash(z, x):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            z[i, j] = svod.math.tanh(x[i, j])


@svod.kernel
def labelled_loss(loss, z, onehot):
    for i in svod.prange(z.shape[0]):
        for j in svod.prange(z.shape[1]):
            svod.atomic_add(loss, 0, -onehot[i, j] * svod.math.log(svod.math.sigmoid(z[i, j])))


def network_loss(x, onehot):
    z = np.empty_like(x)
    loss = np.zeros(1, x.dtype)
    squash(z, x)
    labelled_loss(loss, z, onehot)
    return loss


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (13, 5)])
def test_svod_grad_leaves_out_the_adjoint_of_an_array_no_wanted_gradient_depends_on(monkeypatch, shape):
    """A one-hot array's adjoint in a loss: ``svod.grad`` with respect to ``x`` runs the loss's adjoint made
    without it (no store or atomic into it), and gives the gradient asked with respect to both: d/dx of
    ``-onehot * log(sigmoid(tanh(x)))`` is ``-onehot * (1 - sigmoid(tanh x)) * (1 - tanh(x)**2)``."""
    rng = np.random.default_rng(shape[0])
    x = rng.standard_normal(shape)
    onehot = np.eye(shape[1])[rng.integers(0, shape[1], shape[0])]
    called: list[Kernel] = []
    call = Kernel.__call__

    def spy(self, *args, **kwargs):
        called.append(self)
        return call(self, *args, **kwargs)
    monkeypatch.setattr(Kernel, "__call__", spy)
    dx = svod.grad(network_loss)(x, onehot)
    alone = [k for k in called if k.name == "labelled_loss_adjoint"]
    called.clear()
    both = svod.grad(network_loss, argnums=(0, 1))(x, onehot)
    monkeypatch.undo()
    full = [k for k in called if k.name == "labelled_loss_adjoint"]
    assert len(alone) == 1 and "onehot_grad" not in alone[0].parameters
    assert "onehot_grad" not in ast.unparse(alone[0].source.node)
    assert len(full) == 1 and "onehot_grad[i, j] = _svod_d" in ast.unparse(full[0].source.node)  # (new: stored)
    t = np.tanh(x)
    s = 1.0 / (1.0 + np.exp(-t))
    np.testing.assert_allclose(dx, -onehot * (1.0 - s) * (1.0 - t * t), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(both[0], dx)
    np.testing.assert_allclose(both[1], -np.log(s), rtol=1e-12)
