"""Values a sequential loop carries: a store read back on the next turn kept in a register
(``forward_stored``), and several work items' chains run side by side on a CPU (``carry_rows``), as copies
or in vector lanes. Which kernels each takes, and that every kernel computes what it computes as plain
Python, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.codegen import pipeline
from svod.codegen.recurrences import LANE_SPANS, carried_rows
from svod.codegen.render.llvmir import LLVMRenderer
from svod.device import DeviceCaps
from svod.errors import GraphError
from svod.frontend.oracle import run_as_python
from svod.ir import Ops, UOp
from tests.helpers import cpu_device, open_device, refuses


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


@svod.kernel
def escape_counts(counts, c):
    """Mandelbrot's for/if form over points given as rows of (re, im): every turn runs, the test that a
    point is still inside gating the updates of its carried locals (two floats, one integer)."""
    for i in prange(c.shape[0]):
        zr = 0.0
        zi = 0.0
        k = 0
        for _ in range(20):
            if zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + c[i, 0], 2.0 * zr * zi + c[i, 1]
                k += 1
        counts[i] = k


@svod.kernel
def capped_sums(out, x):
    """A sum of squares along a row that stops growing once it passes 4: the gated load reads a row of its
    own (not neighbours), and what is stored mixes the float and the integer carried."""
    for i in prange(x.shape[0]):
        s = 0.0
        n = 0
        for t in range(x.shape[1]):
            if s < 4.0:
                s += x[i, t] * x[i, t]
                n += 1
        out[i] = s + n


@svod.kernel
def flagged(out, x):
    """A bool carried from turn to turn: no vector of bools is spelled, so its work items stay scalar."""
    for i in prange(x.shape[0]):
        seen = False
        for t in range(x.shape[1]):
            seen = seen or x[i, t] > 1.0
        out[i] = 1.0 if seen else 0.0


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


def _cpu(vector_registers: int) -> pipeline.Target:
    """A CPU target that spells lanes: AVX-512's 32 vector registers of 64 bytes, or AVX2's 16 of 32."""
    caps = DeviceCaps(host_memory=True, overlaps_on_host=True, threads=1, vector_registers=vector_registers,
                      vector_lanes=True)
    return pipeline.Target(svod.DeviceSpec.parse("CPU"), caps, None)


AVX512, AVX2 = _cpu(32), _cpu(16)


def _lanes(ast: UOp, target: pipeline.Target = AVX512) -> tuple[int, ...]:
    """The widths of the LANEs of ``ast`` lowered for ``target``, and after them its registers' count."""
    lowered = pipeline.lower(ast, target).sink
    widths = sorted({int(u.arg) for u in lowered.toposort() if u.op is Ops.LANE}, reverse=True)
    return (*widths, sum(1 for u in lowered.toposort() if u.op is Ops.DEFINE_REG))


def test_work_items_that_store_neighbours_run_in_vector_lanes():
    """Mandelbrot's form takes lanes: its three registers (float64, the widest) spanning the widest of
    ``LANE_SPANS`` that keeps them in half the vector registers (AVX-512: four of 64 bytes each, 32 lanes;
    AVX2: two of 32 bytes, 8 lanes), and where the count is a variable, one more tile masked past the end with
    registers of its own. Each register holds one value a lane (a LANE among its sources). What stores
    non-neighbours keeps its copies, and a bool register its kernel; a CPU target that spells no lanes
    keeps the kernel as written."""
    def counts(n: int, static: bool = False) -> UOp:
        return (_static(escape_counts) if static else escape_counts).bind(np.zeros(n, np.int64), np.zeros((n, 2))).ast

    assert LANE_SPANS == (4, 2, 1)
    assert _lanes(counts(64, static=True)) == (32, 3)
    assert _lanes(counts(64)) == (32, 6)
    assert _lanes(counts(67, static=True)) == (32, 4, 6)  # the 3 left: a tile of 4 lanes
    assert _lanes(counts(64), AVX2) == (8, 6)
    x = np.zeros((64, 5))
    assert _lanes(capped_sums.bind(np.zeros(64), x).ast) == (32, 4)
    assert _lanes(flagged.bind(np.zeros(64), x).ast) == (1,)
    assert _lanes(local_sums.bind(np.zeros_like(x), np.zeros(64), x).ast) == (ROWS + 1,)
    assert _lanes(counts(64), CPU) == (3,)
    lowered = pipeline.lower(counts(64), AVX512).sink
    assert all(any(s.op is Ops.LANE for s in g.src) for g in lowered.toposort() if g.op is Ops.DEFINE_REG)


def _points(count: int, seed: int) -> np.ndarray:
    """Points around the Mandelbrot set, with special values among them."""
    c = np.random.default_rng(seed).uniform(-2.0, 1.0, (count, 2))
    specials = [-0.0, np.nan, np.inf, -np.inf, 5e-324, -1e-310, 1e308, 0.25]
    for i in range(1, count, 5):
        c[i, i % 2] = specials[i % len(specials)]
    return c


LANE_SIZES = [0, 1, 3, 7, 31, 32, 33, 64, 67, 131]


@pytest.mark.parametrize("kernel", [escape_counts, capped_sums, flagged])
def test_work_items_in_lanes_compute_what_python_does(device, kernel):
    """Every device, symbolic and constant counts (none, one, primes, one past and short of a tile of lanes):
    bit for bit what the function computes as plain Python, special values included (NaN fails every test
    of being inside; infinities escape at once). A device without float64 (Python's float) refuses them."""
    if refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match="cannot hold float64"):
            kernel(np.zeros(3, np.int64 if kernel is escape_counts else np.float64), np.zeros((3, 2)), device=device)
        return
    for count in LANE_SIZES:
        x = _points(count, count) if kernel is escape_counts else _data(count, 9, count).astype(np.float64)
        for compiled in (kernel, _static(kernel)):
            out = np.full(count, 7, np.int64 if kernel is escape_counts else np.float64)
            compiled(out, x, device=device)
            (want, _) = run_as_python(compiled, np.full_like(out, 7), x)
            np.testing.assert_array_equal(out, want, err_msg=f"{kernel.fn.__name__} {count}")


@svod.kernel
def halved_sums(out, x):
    """A column's element stored, read in a loop that carries a register, then stored again from its own value:
    the columns past the tiles of lanes run after all of them, reading what their own first store wrote (the
    oracle's seed 15101 was refused: "a held value is read inside a loop it does not depend on")."""
    for i in prange(out.shape[0]):
        for c in range(out.shape[1]):
            v = x[i, c]
            out[i, c] = x[i, 0]
            for _ in range(out.shape[1]):
                v = v // 2 + out[i, c]
            out[i, c] = out[i, c] + v * 3


@pytest.mark.parametrize("cols", [1, 3, 32, 33, 40, 67])
def test_the_edge_of_lanes_reads_its_own_stores(device, cols):
    x = ((np.arange(5 * cols).reshape(5, cols) * 7919) % 1000 - 500).astype(np.int32)
    for compiled in (halved_sums, _static(halved_sums)):
        out = np.zeros_like(x)
        compiled(out, x, device=device)
        (want, _) = run_as_python(compiled, np.zeros_like(x), x)
        np.testing.assert_array_equal(out, want, err_msg=f"{cols}")


@pytest.mark.parametrize("threads", [1, 3])
def test_lanes_split_over_threads_compute_what_python_does(threads):
    """Tiles of lanes shared by three workers, and the masked tile after them: Python's counts."""
    device = cpu_device(threads, "llvm")
    for count in [5, 100, 1000, 1037]:
        c = _points(count, count + threads)
        for compiled in (escape_counts, _static(escape_counts)):
            counts = np.zeros(count, np.int64)
            compiled(counts, c, device=device)
            (want, _) = run_as_python(compiled, np.zeros(count, np.int64), c)
            np.testing.assert_array_equal(counts, want, err_msg=f"{count}")


def test_a_register_store_masked_by_lane_keeps_the_lanes_it_fails():
    """The LLVM spelling of a register's store under a test that differs by lane: what the register held in
    the lanes the test fails is loaded and kept (a select), never the new value."""
    source = svod.compile(escape_counts.bind(np.zeros(64, np.int64), np.zeros((64, 2))).ast, "CPU").code
    assert ".merged = select <" in source and ".kept = load <" in source
    assert "br i1 %" not in [line.split(",")[0] for line in source.splitlines() if "x i1>" in line]


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


@svod.kernel
def read_back_beside_a_read_it_indexes(out, x):
    """The element before read back, and beside it an element at an index read from the one about to be
    stored: both reads are of the memory before this turn's store."""
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = out[r, max(c - 1, 0)] * 0.5 + out[r, int(min(out[r, c], 1000.0)) % x.shape[1]] + x[r, c]


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 17), (5, 3), (13, 64)])
def test_a_read_whose_index_reads_the_stored_element_is_made_before_the_store(device, rows, cols):
    """Kept in a register, the value stored is the one computed from the reads before the store: the read
    inside another read's index was left reading memory, made again after the store, and the register kept
    another value than the one stored (the turns after it then went wrong)."""
    rng = np.random.default_rng(rows * cols)
    x = (rng.integers(0, 9, (rows, cols)) + rng.integers(0, 4, (rows, cols)) * 0.25).astype(np.float32)
    start = (rng.integers(0, 9, (rows, cols)) * 0.5).astype(np.float32)
    out = start.copy()
    read_back_beside_a_read_it_indexes(out, x, device=device)
    (want, _) = run_as_python(read_back_beside_a_read_it_indexes, start.copy(), x)
    np.testing.assert_array_equal(out, want)
    assert _registers(read_back_beside_a_read_it_indexes.build(start, x)) > 0  # the store is kept in a register


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
