"""Values a sequential loop carries: a store read back on the next turn kept in a register
(``forward_stored``), and several work items' chains run side by side on a CPU (``carry_rows``). Which
kernels each takes, and that every kernel computes what it computes as plain Python, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.codegen import pipeline
from svod.codegen.recurrences import carried_rows
from svod.codegen.render.llvmir import LLVMRenderer
from svod.frontend.oracle import run_as_python
from svod.ir import Ops
from tests.helpers import cpu_device, open_device


@svod.kernel
def read_back_sums(out, x):
    """A running sum through memory, as the kernel suite spells it: each turn reads the element before."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = (out[r, max(c - 1, 0)] if c > 0 else 0.0) + x[r, c]


@svod.kernel
def clamped_sums(out, x):
    """The first turn reads the element it is about to store, as the caller left it."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = out[r, max(c - 1, 0)] * 0.75 + x[r, c]


@svod.kernel
def read_back_filter(out, x):
    """A first-order filter whose first turn reads nothing (``c - 1`` is past the row's start there)."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = x[r, c] + 0.5 * out[r, c - 1] if c > 0 else x[r, c]


@svod.kernel
def local_sums(out, totals, x):
    """numba's spelling: the sum carried in a local, and stored once more after the loop."""
    for r in prange(x.shape[0]):
        running = 0.0
        for c in range(x.shape[1]):
            running += x[r, c]
            out[r, c] = running
        totals[r] = running


@svod.kernel
def two_terms(out, x):
    """The element before kept in a register, the one before it read from memory (as stored two turns
    before), and the element itself as the caller left it."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = out[r, max(c - 1, 0)] + 0.5 * out[r, max(c - 2, 0)] - 0.25 * out[r, c] + x[r, c]


@svod.kernel
def two_back(out, x):
    """Each turn reads the element two before: one register holds only the last."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = (out[r, max(c - 2, 0)] if c > 1 else 0.0) + x[r, c]


@svod.kernel
def gated_sums(out, x):
    """The store runs on some turns only: the element before may not be the last one stored."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            if c % 3 != 1:
                out[r, c] = out[r, max(c - 1, 0)] + x[r, c]


@svod.kernel
def escape_steps(out, x):
    """A chain per column whose neighbours are stored next to each other: vector lanes, not chains."""
    for i in prange(x.shape[0]):
        z = 0.0
        for _ in range(x.shape[1]):
            z = z * 0.5 + x[i, 0]
        out[i] = z


@svod.kernel
def passes_over_rows(out, marks, x):
    """A running sum redone on each pass of an outer loop, a statement before it reading what the pass before
    stored: the passes keep their order, each statement in its own."""
    for r in prange(out.shape[0]):
        for t in range(marks.shape[1]):
            marks[r, t] = out[r, out.shape[1] - 1] * 2.0
            for c in range(out.shape[1]):
                out[r, c] = out[r, max(c - 1, 0)] + x[r, c]


CASES = {"read_back_sums": read_back_sums, "clamped_sums": clamped_sums, "read_back_filter": read_back_filter,
         "two_terms": two_terms, "two_back": two_back,
         "gated_sums": gated_sums}


def _gated_read_beside():
    """A builder's kernel: the element before read back, and the element itself read only on even turns (a
    gated load gives 0 elsewhere): the gate stays on it."""
    k = svod.KernelBuilder("gated_read_beside")
    out, x = k.buffer(svod.dtypes.float32, (6, 5)), k.buffer(svod.dtypes.float32, (6, 5))
    i, j = k.range(6), k.range(5, svod.AxisKind.LOOP)
    k.store(out[i, j], out[i, (j - 1).maximum(0)] * 0.5 + out.index((i, j), (j % 2).eq(0)).load() + x[i, j])
    return k.build()


def test_a_gated_read_of_the_stored_buffer_keeps_its_gate(device):
    """Forwarded, the kernel computes what the reference computes from the AST as written: 0 for the gated
    read on odd turns, not the element."""
    ast = _gated_read_beside()
    assert _registers(ast) == 1
    x = np.arange(30, dtype=np.float32).reshape(6, 5)
    out = np.full_like(x, 100.0)
    svod.run(ast, [out, x], device=device)
    want = np.full_like(x, 100.0)
    svod.run(ast, [want, x], device=svod.get_device("PYTHON"))
    np.testing.assert_array_equal(out, want)
    assert want[0].tolist() == [150.0, 76.0, 140.0, 73.0, 140.5]


def _static(kernel):
    return svod.kernel(kernel.fn, static_shapes=True)


CPU = LLVMRenderer("CPU").target
ROWS = carried_rows(1, CPU.caps.vector_registers)
"""How many work items' chains of one register run side by side on this CPU."""


def _registers(ast) -> int:
    """How many registers the CPU's lowering of ``ast`` keeps."""
    lowered = pipeline.lower(ast, CPU).sink
    return sum(1 for u in lowered.toposort() if u.op is Ops.DEFINE_REG)


def test_what_is_carried_in_registers():
    """A store read back on the next turn is one register per work item, run ``ROWS`` work items a
    pass (and one more for the rows the passes leave, where the row count is a variable); a local is the
    same; what reads further back, stores on some turns only, or stores neighbours along its work items
    keeps its kernel."""
    x = np.zeros((2 * ROWS, 5), np.float32)
    for kernel in (read_back_sums, clamped_sums, read_back_filter, two_terms):
        assert _registers(_static(kernel).bind(np.zeros_like(x), x).ast) == ROWS
        assert _registers(kernel.bind(np.zeros_like(x), x).ast) == ROWS + 1
    assert _registers(_static(local_sums).bind(np.zeros_like(x), np.zeros(2 * ROWS, np.float32), x).ast) == ROWS
    assert _registers(_static(passes_over_rows).bind(np.zeros_like(x), np.zeros((2 * ROWS, 3), np.float32), x).ast) \
        == ROWS
    for kernel in (two_back, gated_sums):
        assert _registers(kernel.bind(np.zeros_like(x), x).ast) == 0
    assert _registers(escape_steps.bind(np.zeros(2 * ROWS, np.float32), x).ast) == 1


def _data(rows: int, cols: int, seed: int) -> np.ndarray:
    """Random values with special ones among them: -0.0, NaN, +-inf, subnormals, large and tiny."""
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    specials = [-0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-40, 3e38, -2.5e-38]
    for r in range(rows if cols else 0):
        if r % 3 == 1:
            x[r, (r * 7) % cols] = specials[r % len(specials)]
    return x


SIZES = [(0, 5), (3, 0), (1, 1), (2, 17), (5, 3), (13, 64), (29, 1031)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_read_back_chains_compute_what_python_does(device, name):
    """Every device (the reference too, which refused the symbolic kernels: its race check read them as
    written), symbolic and constant sizes, edge sizes (no rows, no columns, one, primes, rows the
    passes leave): bit for bit what the function computes as plain Python, NaN where it has NaN."""
    for rows, cols in SIZES:
        x = _data(rows, cols, rows * 31 + cols)
        for kernel in (CASES[name], _static(CASES[name])):
            out = np.full_like(x, 7.0)
            kernel(out, x, device=device)
            (want, _) = run_as_python(kernel, np.full_like(x, 7.0), x)
            np.testing.assert_array_equal(out, want, err_msg=f"{name} {rows}x{cols}")


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("threads", [1, 3])
def test_chains_side_by_side_compute_what_python_does(compiler, threads):
    """Chains run ``ROWS`` a pass on one thread and three, each CPU compiler pair: the local's sums
    and the totals stored after the loop, bit for bit Python's."""
    open_device(compiler)
    device = cpu_device(threads, compiler)
    for rows, cols in SIZES:
        x = _data(rows, cols, rows * 17 + cols)
        for kernel in (local_sums, _static(local_sums)):
            out, totals = np.full_like(x, 7.0), np.full(rows, 7.0, np.float32)
            kernel(out, totals, x, device=device)
            want_out, want_totals, _ = run_as_python(kernel, np.full_like(x, 7.0), np.full(rows, 7.0, np.float32), x)
            np.testing.assert_array_equal(out, want_out, err_msg=f"{rows}x{cols}")
            np.testing.assert_array_equal(totals, want_totals, err_msg=f"{rows}x{cols}")


def test_passes_of_an_outer_loop_keep_their_order(compiled_device):
    """Three passes of a carried sum inside an outer loop, after a statement of each pass: Python's values.
    (Sizes are constants: with a variable row length, the race check cannot tell the element the statement
    reads is its own work item's.)"""
    for rows, cols in [(1, 1), (2, 17), (5, 3), (13, 64)]:
        x = _data(rows, cols, rows + cols)
        for kernel in (_static(passes_over_rows),):
            out, marks = np.full_like(x, 7.0), np.zeros((rows, 3), np.float32)
            kernel(out, marks, x, device=compiled_device)
            want_out, want_marks, _ = run_as_python(kernel, np.full_like(x, 7.0), np.zeros((rows, 3), np.float32), x)
            np.testing.assert_array_equal(out, want_out, err_msg=f"{rows}x{cols}")
            np.testing.assert_array_equal(marks, want_marks, err_msg=f"{rows}x{cols}")
