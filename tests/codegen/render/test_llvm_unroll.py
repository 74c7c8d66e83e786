"""How far the LLVM renderer asks LLVM to unroll a loop over a row that the loops beside it read too."""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.codegen.render.llvm_unroll import ROW_INTERLEAVE, ROW_TURNS, ROW_UNROLL
from svod.codegen.render.llvmir import LLVMRenderer
from svod.frontend.pykernel import Kernel
from svod.workloads import layernorm, layernorm_py, softmax, softmax_py

_SYMBOLIC = {"softmax": Kernel(softmax_py.fn, name="softmax"), "layernorm": Kernel(layernorm_py.fn, name="layernorm")}
"""The suite's row kernels as ``@svod.kernel`` makes them by default: their sizes variables."""


def _loop_hints(src: str, kind: str = "unroll.count") -> list[int]:
    """The ``llvm.loop.<kind>`` each loop of ``src`` asks for, in the order the loops end (none: not listed)."""
    hints = dict(re.findall(r"^(!\d+) = distinct !\{!\d+, (!\d+)\}$", src, re.M))
    counts = dict(re.findall(rf'^(!\d+) = !\{{!"llvm.loop.{re.escape(kind)}", i32 (\d+)\}}$', src, re.M))
    return [int(counts[hints[loop]]) for loop in re.findall(r"br label %loop\d+.head, !llvm.loop (!\d+)", src)
            if hints[loop] in counts]


def _render(ast: svod.UOp) -> str:
    return LLVMRenderer("CPU").render(ast).src


def test_a_layer_norms_three_passes_over_a_long_row_are_unrolled_a_little_not_whole():
    """Its mean's, its variance's and its output's loops read one row: each asks for ``ROW_UNROLL``."""
    assert _loop_hints(_render(layernorm(3, 1024).steps[0].ast)) == [ROW_UNROLL] * 3
    assert _loop_hints(_render(layernorm(3, ROW_TURNS).steps[0].ast)) == [ROW_UNROLL] * 3
    assert _loop_hints(_render(layernorm(3, ROW_TURNS - 1).steps[0].ast)) == []  # LLVM's own choice


def test_a_softmax_keeps_its_split_maxs_count_and_unrolls_the_passes_over_the_row_it_wrote_a_little():
    """The split MAX is a register tile's loop (its own count, ``llvm_unroll.TILE_UNROLL``); the exponentials
    it stores, their sum and the division read and write one row of ``out``."""
    counts = _loop_hints(_render(softmax(2, 1024).steps[0].ast))
    assert len(counts) == 4 and counts[1:] == [ROW_UNROLL] * 3 and counts[0] != ROW_UNROLL


def _two_passes(cols: int, shift: bool, other: bool) -> svod.UOp:
    """``out[r] = sum(x[r, :]) + sum(x'[r, :] * 2)``, the second pass over ``x``'s row, over the next element of
    it (``shift``) or over another buffer's (``other``)."""
    k = KernelBuilder("two_passes")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, cols + 1))
    y = k.buffer(dtypes.float32, (4, cols))
    r, j1, j2 = k.range(4), k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    second = (y[r, j2] if other else x[r, j2 + 1] if shift else x[r, j2]) * 2.0
    k.store(out[r], x[r, j1].reduce(j1) + second.reduce(j2))
    return k.build()


def test_only_loops_that_share_an_element_of_a_row_are_held_back():
    assert _loop_hints(_render(_two_passes(1024, shift=False, other=False))) == [ROW_UNROLL] * 2
    assert _loop_hints(_render(_two_passes(1024, shift=True, other=False))) == []
    assert _loop_hints(_render(_two_passes(1024, shift=False, other=True))) == []
    k = KernelBuilder("sums")  # one pass over each row: nothing beside it
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, 1024))
    i, j = k.range(4), k.range(1024, AxisKind.REDUCE)
    k.store(out[i], x[i, j].reduce(j))
    assert _loop_hints(_render(k.build())) == []
    assert _loop_hints(_render(_two_passes(1024, shift=False, other=False)), "interleave.count") == []


def test_loops_over_a_symbolic_row_they_share_are_interleaved():
    """Over a variable row LLVM never unrolls whole; the loops that share it are interleaved
    ``ROW_INTERLEAVE`` times, a loop over another row is left to LLVM."""
    k = KernelBuilder("centre_of_n")
    n = k.var("n", 1, 4096)
    out, x, y = k.buffer(dtypes.float32, (4, n)), k.buffer(dtypes.float32, (4, n)), k.buffer(dtypes.float32, (4, n))
    r, c, j1, j2 = k.range(4), k.range(n), k.range(n, AxisKind.REDUCE), k.range(n, AxisKind.REDUCE)
    k.store(out[r, c], x[r, c] - x[r, j1].reduce(j1) + y[r, j2].reduce(j2))
    src = _render(k.build())
    assert _loop_hints(src) == [] and _loop_hints(src, "interleave.count") == [ROW_INTERLEAVE] * 2
    softmax_of_n = _SYMBOLIC["softmax"].bind(np.zeros((3, 300), np.float32), np.zeros((3, 300), np.float32))
    assert softmax_of_n.var_vals  # its sizes are variables
    src = _render(softmax_of_n.ast)  # the exponentials it stores, their sum, the division
    assert _loop_hints(src, "interleave.count") == [ROW_INTERLEAVE] * 3


def _rows(rows: int, cols: int) -> np.ndarray:
    """Normal values with a signed zero, an infinity and a large value in some rows."""
    data = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float32)
    data[0, cols // 2] = -0.0
    if rows > 1:
        data[1, cols - 1] = -np.inf
        data[-1, 0] = 3e4
    return data


def _same_rows(got: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("cols", [ROW_TURNS, ROW_TURNS + 1, 1024, 1031])
@pytest.mark.parametrize("rows", [1, 3])
def test_row_kernels_with_held_back_loops_compute_numpys_answer(rows, cols):
    """Each size leaves LLVM's unrolled or interleaved loop a remainder or none; the row kernels' answers, their
    sizes constants or variables, are numpy's (a row with -inf: a softmax with a 0 there, a layer norm of
    NaNs)."""
    device = svod.get_device("CPU", "llvm")
    for workload in (softmax(rows, cols), layernorm(rows, cols)):
        data = _rows(rows, cols)
        out = np.zeros_like(data)
        svod.run(workload.steps[0].ast, [out, data], device=device)
        symbolic = np.zeros_like(data)
        _SYMBOLIC[workload.name](symbolic, data, device=device)
        with np.errstate(invalid="ignore"):  # a row with -inf: a layer norm of NaNs
            if workload.name == "softmax":
                e = np.exp(data - data.max(axis=1, keepdims=True))
                expected = e / e.sum(axis=1, keepdims=True)
            else:
                mean = data.mean(axis=1, keepdims=True, dtype=np.float64)
                expected = (data - mean) / np.sqrt(data.var(axis=1, keepdims=True, dtype=np.float64) + 1e-5)
        _same_rows(out, expected)
        _same_rows(symbolic, expected)


@svod.jit
def _layernorm(x):  # type: ignore[no-untyped-def]
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    return centred / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + 1e-5)


@svod.jit
def _softmax(x):  # type: ignore[no-untyped-def]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("cols", [ROW_TURNS, ROW_TURNS + 1, 1031])
def test_row_functions_in_jit_compute_numpys_answer(cols):
    data = np.random.default_rng(cols).standard_normal((3, cols)).astype(np.float32)
    data[0, 7] = -0.0
    device = svod.get_device("CPU", "llvm")
    mean = data.mean(axis=1, keepdims=True, dtype=np.float64)
    expected = (data - mean) / np.sqrt(data.var(axis=1, keepdims=True, dtype=np.float64) + 1e-5)
    _same_rows(np.asarray(_layernorm(data, device=device)), expected)
    e = np.exp(data - data.max(axis=1, keepdims=True))
    _same_rows(np.asarray(_softmax(data, device=device)), e / e.sum(axis=1, keepdims=True))


def _rows_to_first_large(cols: svod.UOp | int) -> svod.UOp:
    """``out[r, j] = 2 * x[r, j]`` up to and including the row's first element over 100 (a loop with an early
    exit), then ``out[r, j] += x[r, j]`` over the whole row: two loops over one row, one of them cut short."""
    k = KernelBuilder("to_first_large")
    out, x = k.buffer(dtypes.float32, (4, cols)), k.buffer(dtypes.float32, (4, cols))
    r, j1, j2 = k.range(4), k.range(cols, AxisKind.LOOP), k.range(cols, AxisKind.LOOP)
    k.store(out[r, j1], x[r, j1] * 2)
    k.exit(j1, x[r, j1] > 100.0)
    k.store(out[r, j2], out[r, j2] + x[r, j2])
    return k.build()


def _sums_to_length(width: int) -> svod.UOp:
    """``out[r] = sum(x[r, :lengths[r]]) + sum(x[r, :lengths[r]] * 2)``: two loops over a row whose end is read
    from memory."""
    k = KernelBuilder("sums_to_length")
    out, x, lengths = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, width)), k.buffer(dtypes.int32, 4)
    r = k.range(4)
    end = lengths[r].maximum(0).minimum(width)
    j1, j2 = k.range(end, AxisKind.REDUCE), k.range(end, AxisKind.REDUCE)
    k.store(out[r], x[r, j1].reduce(j1) + (x[r, j2] * 2.0).reduce(j2))
    return k.build()


@pytest.mark.parametrize("cols", [1, 7, ROW_TURNS + 1])
def test_loops_over_a_row_cut_short_or_ended_by_memory_compute_their_answer(cols):
    """Loop hints on loops with an early exit (a constant or a symbolic row), or with an end read from memory
    (zero turns too), leave the answer as the loops define it."""
    device = svod.get_device("CPU", "llvm")
    data = np.random.default_rng(cols).standard_normal((4, cols)).astype(np.float32) * 80
    expected = data + np.where(np.arange(cols) <= _first_over(data, 100.0)[:, None], 2 * data, -1.0)
    of_n = _rows_to_first_large(KernelBuilder("of_n").var("n", 1, 4096))
    assert _loop_hints(_render(of_n), "interleave.count") == [ROW_INTERLEAVE] * 2
    assert _loop_hints(_render(_sums_to_length(cols)), "interleave.count") == [ROW_INTERLEAVE] * 2
    if cols >= ROW_TURNS:
        assert _loop_hints(_render(_rows_to_first_large(cols))) == [ROW_UNROLL] * 2
    for ast, sizes in ((_rows_to_first_large(cols), {}), (of_n, {"n": cols})):
        out = np.full_like(data, -1.0)
        svod.run(ast, [out, data], device=device, **sizes)
        np.testing.assert_array_equal(out, expected)
    lengths = np.array([0, 1, cols, -5], np.int32)
    sums = np.full(4, np.nan, np.float32)
    svod.run(_sums_to_length(cols), [sums, data, lengths], device=device)
    kept = np.clip(lengths, 0, cols)
    np.testing.assert_allclose(sums, [data[r, :kept[r]].sum() * 3 for r in range(4)], rtol=1e-5, atol=1e-3)


def _first_over(data: np.ndarray, limit: float) -> np.ndarray:
    """Per row, the index of its first element over ``limit``, or its last index where none is."""
    over = data > limit
    return np.where(over.any(axis=1), over.argmax(axis=1), data.shape[1] - 1)
