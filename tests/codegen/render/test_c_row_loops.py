"""The C pair's hint on a loop over a row that the loops beside it read too (``c._ROW_LOOP``): clang is told
not to unroll it whole (it did, and spilled the row across the passes), gcc nothing."""

from __future__ import annotations

import re

import pytest

import svod
from svod.codegen.render.c import CRenderer
from svod.codegen.render.llvm_unroll import ROW_TURNS
from svod.workloads import layernorm, softmax
from tests.codegen.render.row_loops import check_loops_cut_short, check_row_kernels, two_passes
from tests.helpers import open_device


def _hinted(ast: svod.UOp) -> list[bool]:
    """For each loop of ``ast``'s C source, in order, whether the row hint stands right before it (after any
    reduction pragma)."""
    lines = CRenderer("CPU").render(ast).src.splitlines()
    return [k > 0 and lines[k - 1].strip() == "svod_row_loop" for k, line in enumerate(lines)
            if re.match(r"\s*for \(", line)]


def test_the_passes_over_a_shared_row_are_hinted_and_no_other_loop():
    """A layer norm's three passes and a softmax's three over the row it wrote, past the row loop (and the
    softmax's split max, a tile's loop); nothing for one pass over each row, another buffer's, or a short row."""
    assert _hinted(layernorm(3, 1024).steps[0].ast) == [False, True, True, True]
    assert _hinted(softmax(2, 1024).steps[0].ast).count(True) == 3
    assert _hinted(two_passes(1024, shift=False, other=False)) == [False, True, True]
    assert not any(_hinted(two_passes(1024, shift=True, other=False)))
    assert not any(_hinted(two_passes(1024, shift=False, other=True)))
    assert not any(_hinted(layernorm(3, ROW_TURNS - 1).steps[0].ast))
    source = CRenderer("CPU").render(layernorm(3, 1024).steps[0].ast).src
    assert '#define svod_row_loop _Pragma("clang loop unroll(disable) interleave_count(4)")' in source
    assert "#define svod_row_loop\n" in source  # gcc: nothing
    assert "svod_row_loop" not in CRenderer("CPU").render(two_passes(1024, True, False)).src


@pytest.mark.parametrize("cols", [ROW_TURNS, ROW_TURNS + 1, 1024, 1031])
@pytest.mark.parametrize("rows", [1, 3])
def test_hinted_row_kernels_compute_numpys_answer_on_the_c_pair(rows, cols):
    check_row_kernels(open_device("clang"), rows, cols)


@pytest.mark.parametrize("cols", [1, 7, ROW_TURNS + 1])
def test_hinted_loops_cut_short_or_ended_by_memory_compute_their_answer_on_the_c_pair(cols):
    check_loops_cut_short(open_device("clang"), cols)
