"""A term a store computes again after summing it, kept in the output the first time (``store_terms_first``),
and numba's spelling of it (the term stored, summed, and the row rescaled in place): which kernels it takes,
and that they compute what they computed without it, and what Python computes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import svod
from svod import KernelBuilder, dtypes
from svod.codegen import lower_cpu, pipeline
from svod.codegen.render.llvmir import LLVMRenderer
from svod.frontend.oracle import run_as_python
from svod.ir.uop import is_state
from svod.workloads import layernorm_py, softmax, softmax_py
from tests.helpers import cpu_device, open_device

LOG2_E = "0x3FF7154760000000"
"""log2(e) in float32, as LLVM IR spells it: one per inline ``exp`` a kernel computes."""


def _exps(ast) -> int:
    return LLVMRenderer("CPU").render(ast).src.count(LOG2_E)


def _kept(ast) -> bool:
    """Whether the CPU's lowering of ``ast`` reads the output after a statement wrote it."""
    lowered = pipeline.lower(ast, LLVMRenderer("CPU").target).sink
    return any(is_state(u) and u.arg > 0 for u in lowered.toposort())


def _softmax_of_half_terms():
    """softmax of float16 logits summed in float32: its stored term would be rounded to float16."""
    k = KernelBuilder("half_softmax")
    out, x = k.buffer(dtypes.float16, (4, 16)), k.buffer(dtypes.float32, (4, 16))
    r, c = k.range(4), k.range(16)
    j = k.range(16, svod.AxisKind.REDUCE)
    total = (x[r, j] * 0.5).exp().reduce(j)
    k.store(out[r, c], ((x[r, c] * 0.5).exp() / total).cast(dtypes.float16))
    return k.build()


@svod.kernel
def scaled_exps(out, x):
    """The sum's term and the store's are not the same: nothing is kept."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            total += math.exp(x[r, c])
        for c in svod.prange(x.shape[1]):
            out[r, c] = math.exp(x[r, c] * 2.0) / total


@svod.kernel
def transposed_softmax(out, x):
    """The row's terms are stored a column apart: the output's column is not the sum's."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            total += math.exp(x[r, c])
        for c in svod.prange(x.shape[1]):
            out[c, r] = math.exp(x[r, c]) / total


@svod.kernel
def read_back(out, x):
    """The store's value reads the output: a stored term would change what it reads."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            total += math.exp(x[r, c])
        for c in svod.prange(x.shape[1]):
            out[r, c] = math.exp(x[r, c]) / total + out[r, c]


@svod.kernel
def stored_softmax(out, x):
    """numba's softmax: each term stored as it is summed, then the row divided in place."""
    for r in svod.prange(x.shape[0]):
        top = -math.inf
        for c in range(x.shape[1]):
            top = max(top, x[r, c])
        total = 0.0
        for c in range(x.shape[1]):
            e = math.exp(x[r, c] - top)
            out[r, c] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c] /= total


@svod.kernel
def looped_softmax(out, x):
    """The suite's softmax with its last loop sequential: the column is a loop of the work item."""
    for r in svod.prange(x.shape[0]):
        top = -math.inf
        for c in range(x.shape[1]):
            top = max(top, x[r, c])
        total = 0.0
        for c in range(x.shape[1]):
            total += math.exp(x[r, c] - top)
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c] - top) / total


@svod.kernel
def stored_other_element(out, x):
    """The rescale reads an element the first store wrote at another turn: not its own."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            e = math.exp(x[r, c])
            out[r, c] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c] = out[r, c] / total + out[r, 0]


@svod.kernel
def stored_some(out, x):
    """The first store writes every other element: the rest are read back as they were."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            e = math.exp(x[r, c])
            if c % 2 == 0:
                out[r, c] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c] /= total


@svod.kernel
def stored_other_sum(out, x):
    """The sum is of another term than the one stored."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c])
            total += math.exp(x[r, c] * 2.0)
        for c in range(x.shape[1]):
            out[r, c] /= total


@svod.kernel
def stored_half(out, x):
    """The term is stored in float16: read back, it is not the float summed."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            e = math.exp(x[r, c])
            out[r, c] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c] = out[r, c] / total


@svod.kernel
def stored_twice(out, x):
    """Turns 1 and 2 store the same element (``c + (c == 1)``): a read back is not each turn's own term."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            e = math.exp(x[r, c])
            out[r, c + (c == 1)] = e
            total += e
        for c in range(x.shape[1]):
            out[r, c + (c == 1)] /= total


@svod.kernel
def looped_twice(out, x):
    """The suite's softmax with a sequential last loop whose turns 1 and 2 store the same element."""
    for r in svod.prange(x.shape[0]):
        total = 0.0
        for c in range(x.shape[1]):
            total += math.exp(x[r, c])
        for c in range(x.shape[1]):
            out[r, c + (c == 1)] = math.exp(x[r, c]) / total


def test_softmax_computes_each_exp_once():
    """The builder's softmax and the Python kernel's, constant and symbolic sizes: one inline ``exp``."""
    x = np.zeros((5, 7), np.float32)
    for ast in (softmax(16, 64).steps[0].ast, softmax_py.bind(np.zeros_like(x), x).ast,
                svod.kernel(softmax_py.fn).bind(np.zeros_like(x), x).ast):
        assert _exps(ast) == 1 and _kept(ast)


def test_numbas_softmax_and_a_sequential_last_loop_compute_each_exp_once():
    """The row stored, summed and divided in place, and the suite's softmax with a sequential column, are
    lowered as the suite's softmax is: one inline ``exp``, the row read back."""
    x = np.zeros((5, 7), np.float32)
    for kernel in (stored_softmax, looped_softmax):
        ast = kernel.bind(np.zeros_like(x), x).ast
        assert _exps(ast) == 1 and _kept(ast), kernel.name


def test_terms_not_kept():
    """A sum of other terms, a term stored in another dtype, a term stored across rows, a cheap term
    (layernorm's differences) and a kernel that reads its output keep their kernel as it is."""
    x = np.zeros((5, 7), np.float32)
    for ast in (scaled_exps.bind(np.zeros_like(x), x).ast, _softmax_of_half_terms(),
                transposed_softmax.bind(np.zeros((7, 5), np.float32), x).ast):
        assert _exps(ast) == 2 and not _kept(ast)
    assert not _kept(layernorm_py.bind(np.zeros_like(x), x).ast)
    assert not _kept(read_back.bind(np.zeros_like(x), x).ast)


@pytest.mark.parametrize("kernel", [stored_other_element, stored_some, stored_other_sum, stored_half, stored_twice,
                                    looped_twice], ids=lambda k: k.name)
def test_a_stored_row_rescaled_otherwise_is_lowered_as_written_and_computes_what_python_does(kernel):
    """A rescale that reads another element, a row stored in part, a sum of another term, a term stored in
    float16, and a column whose turns 1 and 2 store one element keep their stores as written (each ``exp``
    computed where it is written), and compute Python's values."""
    x = _logits(7, 13, 5)
    x[4] = 0.5  # finite: the other element's term is a number
    if kernel is stored_half:  # terms float16 holds: svod sums in float32 where Python's sum is a float
        x = np.random.default_rng(5).standard_normal(x.shape).astype(np.float32)
    columns = x.shape[1] + (kernel in (stored_twice, looped_twice))
    out = np.full((x.shape[0], columns), 7.0, np.float16 if kernel is stored_half else np.float32)
    assert not _kept(kernel.bind(out, x).ast)
    want, _ = run_as_python(kernel, out.copy(), x)
    kernel(out, x)
    np.testing.assert_allclose(out, want, rtol=2e-3 if kernel is stored_half else 2e-6, atol=1e-37)


def _logits(rows: int, cols: int, seed: int) -> np.ndarray:
    """Rows of random logits, and rows of special values: -0.0, NaN, +-inf, subnormals, a row all -inf."""
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32) * 30
    specials = [-0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-40, 88.0, -104.0]
    for r in range(1, rows if cols else 0, 3):
        x[r, r % cols] = specials[r % len(specials)]
    if rows > 4:
        x[4] = -np.inf
    return x


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("threads", [1, 3])
def test_kept_terms_compute_what_they_computed_and_what_python_does(compiler, threads, monkeypatch):
    """softmax at edge sizes (no rows, no columns, one, primes, past a vector and a thread's share), the
    symbolic kernel and the constant one: the values of the kernel compiled without the pass (the last bits of
    a row's sum are the backend's, which may reassociate it, as the README says), and Python's (svod's ``exp``
    is within 2 ulps of the C library's); NaN, inf and zeros where they are (up to those 2 ulps where a quotient
    is the least subnormal)."""
    open_device(compiler)
    device = cpu_device(threads, compiler)
    kernels = {"symbolic": svod.kernel(softmax_py.fn), "static": softmax_py, "numba": stored_softmax,
               "looped": looped_softmax}
    for rows, cols in [(0, 5), (3, 0), (1, 1), (2, 17), (7, 3), (13, 64), (29, 1031)]:
        x = _logits(rows, cols, rows * 31 + cols)
        for name, kernel in kernels.items():
            kept = np.full_like(x, 7.0)
            kernel(kept, x, device=device)
            want, _ = run_as_python(kernel, np.full_like(x, 7.0), x)
            np.testing.assert_allclose(kept, want, rtol=2e-6, atol=1e-37, err_msg=f"{name} {rows}x{cols}")
            with monkeypatch.context() as patch:  # the same kernel, named apart so the cache compiles it again
                patch.setattr(lower_cpu, "store_terms_first", lambda sink: sink)
                plain = np.full_like(x, 7.0)
                bound = kernel.bind(plain, x)
                svod.run(bound.ast.replace(arg=f"plain_{name}_{threads}"), bound.arrays, device=device,
                         **bound.var_vals)
            np.testing.assert_allclose(kept, plain, rtol=1e-6, atol=1e-37, err_msg=f"{name} {rows}x{cols}")
            np.testing.assert_array_equal(np.isnan(kept), np.isnan(want))
            tiny = 2 * np.finfo(np.float32).smallest_subnormal  # exp's 2 ulps, where the quotient is subnormal
            assert np.all(np.abs(kept[want == 0]) <= tiny) and np.all(np.abs(want[kept == 0]) <= tiny)
