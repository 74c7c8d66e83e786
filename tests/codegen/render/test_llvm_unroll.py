"""How far the LLVM renderer asks LLVM to unroll a loop over a row that the loops beside it read too."""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.codegen.render.llvm_unroll import PLAIN_ROW_INTERLEAVE, ROW_INTERLEAVE, ROW_TURNS, ROW_UNROLL
from svod.codegen.render.llvmir import LLVMRenderer
from svod.workloads import layernorm, softmax
from tests.codegen.render.row_loops import (
    SYMBOLIC,
    check_loops_cut_short,
    check_row_kernels,
    layernorm_of,
    rows,
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
    """Over a variable row LLVM never unrolls whole; the loops that share it are interleaved (plain sums:
    ``PLAIN_ROW_INTERLEAVE`` times), a loop over another row is left to LLVM."""
    k = KernelBuilder("centre_of_n")
    n = k.var("n", 1, 4096)
    out, x, y = k.buffer(dtypes.float32, (4, n)), k.buffer(dtypes.float32, (4, n)), k.buffer(dtypes.float32, (4, n))
    r, c, j1, j2 = k.range(4), k.range(n), k.range(n, AxisKind.REDUCE), k.range(n, AxisKind.REDUCE)
    k.store(out[r, c], x[r, c] - x[r, j1].reduce(j1) + y[r, j2].reduce(j2))
    src = _render(k.build())
    assert _loop_hints(src) == [] and _loop_hints(src, "interleave.count") == [PLAIN_ROW_INTERLEAVE] * 2


def _symbolic_row_kernel(name: str, dtype: type = np.float32) -> svod.UOp:
    """The AST of the suite's ``name`` kernel with its sizes variables."""
    bound = SYMBOLIC[name].bind(np.zeros((3, 300), dtype), np.zeros((3, 300), dtype))
    assert bound.var_vals  # its sizes are variables
    return bound.ast


@pytest.mark.parametrize("cols", [1, 7, 33])
def test_only_a_symbolic_rows_loop_of_exponentials_is_interleaved_four_times(cols):
    """A softmax's loop that stores the exponentials keeps ``ROW_INTERLEAVE``; its sum and its division, and
    a layer norm's three passes (loads, adds, multiplies, stores), get ``PLAIN_ROW_INTERLEAVE``; both compute
    numpy's answer at sizes below, at and past one interleaved step."""
    for dtype in (np.float32, np.float64):
        softmax_hints = _loop_hints(_render(_symbolic_row_kernel("softmax", dtype)), "interleave.count")
        assert softmax_hints == [ROW_INTERLEAVE, PLAIN_ROW_INTERLEAVE, PLAIN_ROW_INTERLEAVE]
        layernorm_hints = _loop_hints(_render(_symbolic_row_kernel("layernorm", dtype)), "interleave.count")
        assert layernorm_hints == [PLAIN_ROW_INTERLEAVE] * 3
    data = rows(3, cols)
    for name, reference in (("softmax", softmax_of), ("layernorm", layernorm_of)):
        out = np.full_like(data, np.nan)
        SYMBOLIC[name](out, data, device=svod.get_device("CPU", "llvm"))
        with np.errstate(invalid="ignore"):  # a row of one -inf: a softmax of NaN
            same_rows(out, reference(data))


def _centred_by(function: str) -> svod.UOp:
    """``out[r, c] = f(x[r, c] - sum(x[r, :]))`` over a variable row: two loops that share it, the second
    computing ``function`` (a call, or ``square``: no call)."""
    k = KernelBuilder("centred_by")
    n = k.var("n", 1, 4096)
    out, x = k.buffer(dtypes.float32, (4, n)), k.buffer(dtypes.float32, (4, n))
    r, c, j = k.range(4), k.range(n), k.range(n, AxisKind.REDUCE)
    centred = x[r, c] - x[r, j].reduce(j)
    k.store(out[r, c], centred * centred if function == "square" else getattr(centred, function)())
    return k.build()


@pytest.mark.parametrize(("function", "second"), [("square", PLAIN_ROW_INTERLEAVE), ("sin", ROW_INTERLEAVE),
                                                  ("exp2", ROW_INTERLEAVE), ("log", ROW_INTERLEAVE),
                                                  ("sqrt", PLAIN_ROW_INTERLEAVE)])
@pytest.mark.parametrize("cols", [1, 7, 33])
def test_a_row_loop_calling_a_transcendental_keeps_its_interleave_and_its_values(function, second, cols):
    """A called transcendental (``sin``, ``exp2``) or one computed inline (``log``) keeps ``ROW_INTERLEAVE``;
    ``sqrt`` is one instruction. The sum's loop is plain either way."""
    ast = _centred_by(function)
    assert _loop_hints(_render(ast), "interleave.count") == [PLAIN_ROW_INTERLEAVE, second]
    data = np.random.default_rng(cols).standard_normal((4, cols)).astype(np.float32)
    data[0, 0] = -0.0
    out = np.full_like(data, np.nan)
    svod.run(ast, [out, data], device=svod.get_device("CPU", "llvm"), n=cols)
    centred = data - data.sum(axis=1, keepdims=True, dtype=np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = centred * centred if function == "square" else getattr(np, function)(centred)
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)


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
    assert _loop_hints(_render(rows_to_first_large_of_n()), "interleave.count") == [PLAIN_ROW_INTERLEAVE] * 2
    assert _loop_hints(_render(sums_to_length(cols)), "interleave.count") == [PLAIN_ROW_INTERLEAVE] * 2
    if cols >= ROW_TURNS:
        assert _loop_hints(_render(rows_to_first_large(cols))) == [ROW_UNROLL] * 2
    check_loops_cut_short(svod.get_device("CPU", "llvm"), cols)
