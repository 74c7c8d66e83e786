"""A broadcast read (``gamma[j]`` inside rows ``i`` and columns ``j``, ``mean[i, 0]`` inside ``j``) sums its
adjoints over the parallel loops its index lacks in a pass of its own, with no atomic add; a read in a sequential
loop whose element no turn changes sums its turns' adjoints in a local. Gradients against central differences
of plain Python (float64), against the adjoint that adds every read atomically, and bit for bit across runs and
thread counts."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import svod
from svod.frontend import adjoint_backward
from svod.frontend.adjoint import Adjoint, _Differentiator, adjoint
from svod.frontend.adjoint_sums import pattern
from tests.frontend.differences import agrees_with_differences, float_of, pulled
from tests.frontend.test_jit_gradient_repeats import layernorm, softmax
from tests.helpers import cpu_device


@svod.kernel
def normed(y, x, mean, rstd, gamma, beta):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            y[i, j] = (x[i, j] - mean[i, 0]) * rstd[i, 0] * gamma[j] + beta[j]


@svod.kernel
def biased(y, x, b):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            y[i, j] = svod.math.tanh(x[i, j] + b[j])


@svod.kernel
def row_scaled(y, x, s):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[1]):
            y[i, j] = x[i, j] * s[i] * s[i] + x[i, 0]


@svod.kernel
def pairs(energy, pos):
    for i in svod.prange(pos.shape[0]):
        for j in svod.prange(pos.shape[0]):
            if j > i:
                dx = pos[i, 0] - pos[j, 0]
                dy = pos[i, 1] - pos[j, 1]
                svod.atomic_add(energy, 0, -1.0 / svod.math.sqrt(dx * dx + dy * dy + 0.01))


@svod.kernel
def crossed(y, t):
    for i in svod.prange(t.shape[0]):
        for j in svod.prange(t.shape[1]):
            y[i, j] = t[i, j] * t[j, i] + t[i, 0] * t[0, i]


@svod.kernel
def row_sums(y, x, w):
    for i in svod.prange(x.shape[0]):
        total = 0.0
        for k in range(x.shape[1]):
            total += x[i, k] * w[i]
        y[i] = total


def _source(kernel: svod.Kernel) -> str:
    return ast.unparse(kernel.source.node)


def _atomic(kernel: svod.Kernel, floats: frozenset[str], monkeypatch: pytest.MonkeyPatch) -> Adjoint:
    """The adjoint that adds every broadcast read's adjoint atomically, as svod made it before."""
    with monkeypatch.context() as patch:
        patch.setattr(adjoint_backward, "reductions", lambda reads, spread, loops, names: [])
        patch.setattr(adjoint_backward, "turn_sums", lambda loop, assigned, summed, names: {})
        return _Differentiator(kernel, floats).adjoint()


def _same_as_atomic(kernel, device, monkeypatch, *args: np.ndarray) -> Adjoint:
    floats = frozenset(p for p, a in zip(kernel.parameters, args, strict=True) if a.dtype.kind == "f")
    made, atomic = adjoint(kernel, floats), _atomic(kernel, floats, monkeypatch)
    rng = np.random.default_rng(5)
    cotangents = {name: rng.standard_normal(args[kernel.parameters.index(name)].shape).astype(args[0].dtype)
                  for name in made.written}
    got = pulled(made, kernel, list(args), cotangents, device)
    expected = pulled(atomic, kernel, list(args), cotangents, device)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10 if g.dtype == np.float64 else 2e-4,
                                   atol=1e-10 if g.dtype == np.float64 else 1e-4)
    return made


def _normed_args(rows: int, cols: int, f: type) -> list[np.ndarray]:
    rng = np.random.default_rng(rows * 100 + cols)
    return [np.zeros((rows, cols), f), rng.standard_normal((rows, cols)).astype(f),
            rng.standard_normal((rows, 1)).astype(f), rng.uniform(0.5, 1.5, (rows, 1)).astype(f),
            rng.uniform(0.5, 1.5, cols).astype(f), rng.standard_normal(cols).astype(f)]


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 1), (13, 37), (33, 17)])
def test_a_normalisations_row_and_column_reads_sum_in_a_pass_each(device, monkeypatch, shape):
    args = _normed_args(*shape, float_of(device))
    agrees_with_differences(normed, device, *args)
    made = _same_as_atomic(normed, device, monkeypatch, *args)
    if shape[0] > 1 and shape[1] > 1:
        assert len(made.passes) == 2  # mean and rstd over the columns, gamma and beta over the rows
        assert "atomic" not in "".join(_source(k) for k in (*made.passes, made.kernel) if k is not None)
        assert "for j in range(x.shape[1])" in _source(made.passes[0])
        assert "for i in range(x.shape[0])" in _source(made.passes[1])


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (11, 40)])
def test_a_bias_adds_over_the_rows(device, monkeypatch, shape):
    f = float_of(device)
    rng = np.random.default_rng(shape[1])
    args = [np.zeros(shape, f), rng.standard_normal(shape).astype(f), rng.standard_normal(shape[1]).astype(f)]
    agrees_with_differences(biased, device, *args)
    made = _same_as_atomic(biased, device, monkeypatch, *args)
    assert made.kernel is not None and "atomic" not in _source(made.kernel)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 9)])
def test_a_per_row_scale_read_twice_sums_into_one_local(device, monkeypatch, shape):
    f = float_of(device)
    rng = np.random.default_rng(shape[0])
    args = [np.zeros(shape, f), rng.standard_normal(shape).astype(f), rng.standard_normal(shape[0]).astype(f)]
    agrees_with_differences(row_scaled, device, *args)
    made = _same_as_atomic(row_scaled, device, monkeypatch, *args)
    if shape[1] > 1:
        sums = [k for k in made.passes if "s_grad[i] =" in _source(k)]
        assert len(sums) == 1 and _source(sums[0]).count("= s_grad[i]") == 1  # s[i] twice: one local
        assert "x_grad[i, 0] = " in "".join(_source(k) for k in made.passes)  # x[i, 0] too, in that pass


@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_kernel_that_adds_atomically_keeps_the_atomic_adds_of_its_broadcast_reads(device, monkeypatch, n):
    f = float_of(device)
    pos = np.random.default_rng(n).standard_normal((n, 2)).astype(f)
    agrees_with_differences(pairs, device, np.zeros(1, f), pos)
    made = _same_as_atomic(pairs, device, monkeypatch, np.zeros(1, f), pos)
    assert not made.passes and made.kernel is not None and "_svod_atomic_add(pos_grad, (i, 0)" in _source(made.kernel)


@pytest.mark.parametrize("n", [1, 3, 6])
def test_reads_of_one_array_in_two_arrangements_keep_their_atomics(device, monkeypatch, n):
    f = float_of(device)
    t = np.random.default_rng(n).standard_normal((n, n)).astype(f)
    agrees_with_differences(crossed, device, np.zeros((n, n), f), t)
    made = _same_as_atomic(crossed, device, monkeypatch, np.zeros((n, n), f), t)
    assert made.kernel is not None  # t[i, j] and t[j, i] in passes of shifted reads; t[i, 0] and t[0, i] atomic
    assert "_svod_atomic_add(t_grad, (i, 0)" in _source(made.kernel)
    assert "_svod_atomic_add(t_grad, (0, i)" in _source(made.kernel)


@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (9, 31)])
def test_a_read_no_turn_changes_sums_the_turns_in_a_local(device, monkeypatch, shape):
    f = float_of(device)
    rng = np.random.default_rng(shape[1])
    args = [np.zeros(shape[0], f), rng.standard_normal(shape).astype(f), rng.standard_normal(shape[0]).astype(f)]
    agrees_with_differences(row_sums, device, *args)
    made = _same_as_atomic(row_sums, device, monkeypatch, *args)
    assert made.kernel is not None
    source = _source(made.kernel)
    assert "w_grad[i] += _svod_e" in source and source.index("w_grad[i] +=") > source.index("for ")


def test_a_broadcast_reads_pattern():
    spread = ["i", "j"]
    assert pattern("(i, 0)", spread, spread) == ("i", None)
    assert pattern("j", spread, spread) is not None
    assert pattern("(i, j)", spread, spread) is None  # the work item's own element
    assert pattern("(i, i)", spread, spread) is None
    assert pattern("(i + 1, 0)", spread, spread) is None
    assert pattern("0", spread, spread) is None  # no loop's variable: every work item's element


def _jit_grads(fn, device, args: tuple) -> tuple:
    """The gradients of jit function ``fn``'s scalar with respect to each float array of ``args``."""
    _, pullback = svod.vjp(fn, *args, device=device)
    return tuple(g for g in pullback(np.ones(1, args[0].dtype)) if g is not None)


def _jit_arguments(fn, shape: tuple[int, int], f: type) -> tuple:
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    rows = (rng.standard_normal(shape[1]), rng.uniform(0.5, 1.5, shape[1])) if fn is layernorm else ()
    return tuple(a.astype(f) for a in (rng.standard_normal(shape), *rows, rng.standard_normal(shape)))


@pytest.mark.parametrize("fn", [layernorm, softmax], ids=["layernorm", "softmax"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (13, 33)])
def test_a_jit_functions_gradient_agrees_with_differences(device, fn, shape):
    f = float_of(device)
    args = _jit_arguments(fn, shape, f)
    grads = _jit_grads(fn, device, args)
    wide = [a.astype(np.float64) for a in args]
    rng = np.random.default_rng(1)
    h = 1e-6
    for position, g in enumerate(grads):
        assert g.shape == args[position].shape and g.dtype == f
        direction = rng.standard_normal(g.shape)

        def moved(sign: float, position: int = position, direction: np.ndarray = direction) -> float:
            return float(np.sum(fn.fn(*(a + sign * h * direction if k == position else a
                                        for k, a in enumerate(wide)))))
        expected = (moved(1.0) - moved(-1.0)) / (2 * h)
        got = float(np.sum(g.astype(np.float64) * direction))
        scale = float(np.linalg.norm(g) * np.linalg.norm(direction)) + 1e-12
        tolerance = 1e-6 * scale if f == np.float64 else 2e-3 * scale
        assert abs(got - expected) <= tolerance, (position, got, expected)


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_the_gradients_are_the_same_bits_at_every_thread_count(compiler):
    runs = []
    for threads in (1, 2, 2, 1):
        device = cpu_device(threads, compiler)
        run = []
        for fn in (layernorm, softmax):
            run += _jit_grads(fn, device, _jit_arguments(fn, (67, 131), np.float32))
        args = _normed_args(61, 129, np.float32)
        _, pullback = svod.vjp(normed, *args, device=device)
        run += [g for g in pullback(np.random.default_rng(0).standard_normal((61, 129)).astype(np.float32))
                if g is not None]
        runs.append(run)
    for run in runs[1:]:
        for got, first in zip(run, runs[0], strict=True):
            assert np.array_equal(got.view(np.uint32), first.view(np.uint32))
