"""How far the LLVM renderer asks LLVM to unroll a loop over a row that the loops beside it read too."""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.codegen.render.llvm_unroll import ROW_INTERLEAVE, ROW_TURNS, ROW_UNROLL
from svod.codegen.render.llvmir import LLVMRenderer
from svod.workloads import layernorm, softmax
from tests.codegen.render.row_loops import (
    SYMBOLIC,
    check_loops_cut_short,
    check_row_kernels,
    layernorm_of,
    rows_to_first_large,
    rows_to_first_large_of_n,
    same_rows,
    softmax_of,
    sums_to_length,
    two_passes,
)


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


def test_only_loops_that_share_an_element_of_a_row_are_held_back():
    assert _loop_hints(_render(two_passes(1024, shift=False, other=False))) == [ROW_UNROLL] * 2
    assert _loop_hints(_render(two_passes(1024, shift=True, other=False))) == []
    assert _loop_hints(_render(two_passes(1024, shift=False, other=True))) == []
    k = KernelBuilder("sums")  # one pass over each row: nothing beside it
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, 1024))
    i, j = k.range(4), k.range(1024, AxisKind.REDUCE)
    k.store(out[i], x[i, j].reduce(j))
    assert _loop_hints(_render(k.build())) == []
    assert _loop_hints(_render(two_passes(1024, shift=False, other=False)), "interleave.count") == []


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
    softmax_of_n = SYMBOLIC["softmax"].bind(np.zeros((3, 300), np.float32), np.zeros((3, 300), np.float32))
    assert softmax_of_n.var_vals  # its sizes are variables
    src = _render(softmax_of_n.ast)  # the exponentials it stores, their sum, the division
    assert _loop_hints(src, "interleave.count") == [ROW_INTERLEAVE] * 3


@pytest.mark.parametrize("cols", [ROW_TURNS, ROW_TURNS + 1, 1024, 1031])
@pytest.mark.parametrize("rows", [1, 3])
def test_row_kernels_with_held_back_loops_compute_numpys_answer(rows, cols):
    """Each size leaves LLVM's unrolled or interleaved loop a remainder or none (``row_loops``' shared check)."""
    check_row_kernels(svod.get_device("CPU", "llvm"), rows, cols)


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
    same_rows(np.asarray(_layernorm(data, device=device)), layernorm_of(data))
    same_rows(np.asarray(_softmax(data, device=device)), softmax_of(data))


@pytest.mark.parametrize("cols", [1, 7, ROW_TURNS + 1])
def test_loops_over_a_row_cut_short_or_ended_by_memory_compute_their_answer(cols):
    """Loop hints on loops with an early exit (a constant or a symbolic row), or with an end read from memory,
    are asked for, and leave the answer as the loops define it (``row_loops``' shared check)."""
    assert _loop_hints(_render(rows_to_first_large_of_n()), "interleave.count") == [ROW_INTERLEAVE] * 2
    assert _loop_hints(_render(sums_to_length(cols)), "interleave.count") == [ROW_INTERLEAVE] * 2
    if cols >= ROW_TURNS:
        assert _loop_hints(_render(rows_to_first_large(cols))) == [ROW_UNROLL] * 2
    check_loops_cut_short(svod.get_device("CPU", "llvm"), cols)
