"""No kernel touches memory outside its buffers, and no two work items race: every access is proven for
every value of every variable, gated by the condition that proves it, or checked at run time."""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, UOp, dtypes
from svod.codegen import indexing, pipeline, safety
from svod.codegen.access_meeting import meet_in_one_item
from svod.codegen.checks import CHECKED
from svod.codegen.indexing import MAX_STEPS, Facts, Poly, Prover, index_in_bounds, to_poly
from svod.codegen.safety import parallel_loops
from svod.device import DeviceCaps
from svod.errors import GraphError, IndexOutOfBoundsError, RaceError, SvodError
from svod.frontend.oracle import run_as_python
from svod.frontend.pykernel import Kernel
from svod.ir import Ops
from tests.frontend.test_held_values import agrees_with_python
from tests.helpers import open_device, refuses

PAD = 16
SENTINEL = -12345.0


def _guarded_views(device, sizes, dtype=np.float32):
    """Buffers that are views into one base, each with a band of sentinels before and after it."""
    base = np.full(sum(sizes) + PAD * (len(sizes) + 1), SENTINEL, dtype)
    whole = svod.Buffer.from_numpy(base, device)
    views, offset = [], PAD
    for size in sizes:
        views.append(whole.view(offset, size))
        offset += size + PAD
    return whole, views


def _sentinels_intact(whole, sizes) -> bool:
    data, offset = whole.numpy(), 0
    bands = []
    for size in sizes:
        bands.append(data[offset:offset + PAD])
        offset += PAD + size
    bands.append(data[offset:])
    return all((band == SENTINEL).all() for band in bands)


def _shrinking_index():
    """``out[i] = x[limit - n + i]``: the index grows as ``n`` shrinks (unsound with every var at max)."""
    k = KernelBuilder("shrinking")
    n, limit = k.var("n", 1, 32), k.var("limit", 0, 64)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, 32)
    i = k.range(n)
    k.store(out[i], x[limit - n + i])
    return k.build()


def _scaled_difference():
    """``x[c*(m - n) + i]`` grows with ``m`` and shrinks with ``n``."""
    k = KernelBuilder("scaled")
    n, m = k.var("n", 1, 8), k.var("m", 1, 8)
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(n)
    k.store(out[i], x[(m - n) * 3 + i])
    return k.build()


def _write_far():
    """A store whose index a variable moves far outside the buffer."""
    k = KernelBuilder("far_write")
    n, shift = k.var("n", 1, 16), k.var("shift", 0, 1 << 40)
    out, x = k.buffer(dtypes.float32, 16), k.buffer(dtypes.float32, 16)
    i = k.range(n)
    k.store(out[i + shift], x[i])
    return k.build()


@pytest.mark.parametrize(("build", "sizes", "good", "bad"), [
    (_shrinking_index, (32, 32), {"n": 32, "limit": 32}, {"n": 4, "limit": 60}),
    (_scaled_difference, (8, 8), {"n": 4, "m": 4}, {"n": 1, "m": 8}),
    (_write_far, (16, 16), {"n": 16, "shift": 0}, {"n": 16, "shift": 1 << 39}),
])
def test_indices_that_move_with_variables_are_checked_for_every_value(device, build, sizes, good, bad):
    if device.caps.index_bits == 32 and build is _write_far:
        with pytest.raises(GraphError, match="an index may reach 1099511627776 for some values of shift") as refused:
            svod.compile(build(), device)
        assert refused.value.kernel == "far_write"
        return  # an index variable that may pass 2**31 is refused where indices are 32 bits
    whole, views = _guarded_views(device, sizes)
    views[1].copyin(np.arange(sizes[1], dtype=np.float32))
    svod.run(build(), views, device=device, **good)  # in range: runs as written
    with pytest.raises(IndexOutOfBoundsError) as info:
        svod.run(build(), views, device=device, **bad)
    assert info.value.kernel == build().arg and info.value.slot in (0, 1)
    assert _sentinels_intact(whole, sizes)


def test_the_prover_sees_every_value_of_a_variable_not_just_the_largest():
    n, limit = UOp.define_var("n", 1, 32), UOp.define_var("limit", 0, 64)
    i = UOp.range(n, 0)
    assert not index_in_bounds(limit - n + i, UOp.index_const(32), None, {})
    assert index_in_bounds(i, n, None, {})
    rows, cols = UOp.define_var("rows", 1, 50), UOp.define_var("cols", 1, 60)
    r, c = UOp.range(rows, 0), UOp.range(cols, 1)
    assert index_in_bounds((rows - 1 - r) * cols + c, rows * cols, None, {r: 0, c: 1})
    assert not index_in_bounds((rows - r) * cols + c, rows * cols, None, {r: 0, c: 1})


def test_a_prover_remembers_what_it_settled_but_not_a_search_cut_short():
    """A claim proven, or refuted by a whole search, is answered again without a step; one whose search ran
    out of steps is searched again (the next search may have the steps it lacked)."""
    rows, cols = UOp.define_var("rows", 1, 50), UOp.define_var("cols", 1, 60)
    r, c = UOp.range(rows, 0), UOp.range(cols, 1)
    prover = Prover(Facts(), {r: 0, c: 1})
    for claim, holds in (((rows - 1 - r) * cols + c, True), ((rows - r) * cols + c - rows * cols, False)):
        assert prover.nonnegative(to_poly(claim)) is holds and 0 < prover.steps <= MAX_STEPS
        assert prover.nonnegative(to_poly(claim)) is holds and prover.steps == 0
    endless = Poly.const(-1)  # false, and each of the 2**10 sets of ranges taken to their ends is a claim
    for axis in range(10):
        endless = endless - Poly.atom(UOp.range(rows, 2 + axis))
    for _ in range(2):
        assert not prover.nonnegative(endless) and prover.steps > MAX_STEPS


def test_an_access_is_not_sent_to_the_prover_to_be_apart_from_itself(monkeypatch):
    """A store against itself in another work item: where the two items are one, the two indices are one
    value, so the comparison goes straight to matching ranges (a symbolic batched matmul spent seconds of
    its compile proving such claims false); the answer is still that they meet only in one item."""
    n = UOp.define_var("n", 1, 2**20)
    s, i = UOp.range(n, 0, AxisKind.GLOBAL), UOp.range(n, 1, AxisKind.GLOBAL)
    index = s * n * n + i * n + 3
    asked: list[Poly] = []
    real = Prover.nonnegative

    def recording(self: Prover, poly: Poly) -> bool:
        asked.append(poly)
        return real(self, poly)
    monkeypatch.setattr(indexing.Prover, "nonnegative", recording)
    order = {u: k for k, u in enumerate(index.toposort())}
    assert meet_in_one_item(index, None, index, None, [s, i], order)
    whole = to_poly(index)
    assert not any(set(whole.terms) <= set(p.terms) for p in asked)


def _clamped(a: UOp, n: UOp) -> UOp:
    """``max(min(a, n - 1), 0)`` in int64 over an index size, as a Python kernel's ``max(min(int(x), n - 1), 0)``
    is translated, read back as an index."""
    return a.minimum((n - 1).cast(dtypes.int64)).maximum(0).cast(dtypes.index)


def test_the_prover_sees_through_widening_casts_and_integer_clamps():
    """A clamp inside ``[0, n)`` for every ``n >= 1`` and not for ``n = 0``; a narrowing cast is no longer the same
    number, so nothing is proven through it."""
    a = UOp.define_var("a", -2**40, 2**40, dtypes.int64)
    n = UOp.define_var("n", 1, 2**31)
    assert index_in_bounds(_clamped(a, n), n, None, {})
    empty = UOp.define_var("n", 0, 2**31)
    assert not index_in_bounds(_clamped(a, empty), empty, None, {})
    narrowed = n.cast(dtypes.int64).cast(dtypes.int32).cast(dtypes.index)
    assert not index_in_bounds(narrowed - 1, n, None, {})


def test_a_guard_that_a_size_is_positive_proves_a_clamped_row_and_column():
    """``row * n + col < n * n`` needs ``n * n - n >= 0``, which the interval shows only from ``n``'s least value:
    a guard ``0 < n`` gives it."""
    a, b = UOp.define_var("a", -2**40, 2**40, dtypes.int64), UOp.define_var("b", -2**40, 2**40, dtypes.int64)
    n = UOp.define_var("n", 0, 2**31 - 1)  # a size variable's bounds
    flat = _clamped(a, n) * n + _clamped(b, n)
    order = {u: k for k, u in enumerate((flat < n * n).toposort())}  # derived atoms first, as lowering ranks them
    assert index_in_bounds(flat, n * n, UOp.index_const(0).lt(n), order)
    assert not index_in_bounds(flat, n * n, None, order)


def _padded_conv(channels=3, height=7, width=9):
    """A 3x3 convolution with zero padding, guarded the natural way: ``valid.where(x[iy, ix], 0)``."""
    k = KernelBuilder("conv_padded")
    out = k.buffer(dtypes.float32, channels * height * width)
    x = k.buffer(dtypes.float32, channels * height * width)
    w = k.buffer(dtypes.float32, channels * 9)
    c, oy, ox = k.range(channels), k.range(height), k.range(width)
    ky, kx = k.range(3, AxisKind.REDUCE), k.range(3, AxisKind.REDUCE)
    iy, ix = oy + ky - 1, ox + kx - 1
    valid = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
    tap = valid.where(x[(c * height + iy) * width + ix], 0.0) * w[c * 9 + ky * 3 + kx]
    k.store(out[(c * height + oy) * width + ox], tap.reduce(ky, kx))
    return k.build()


def test_a_guarded_padded_convolution_is_proven_and_needs_no_run_time_check(device):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 7, 9)).astype(np.float32), rng.standard_normal((3, 3, 3)).astype(np.float32)
    out = np.zeros(3 * 7 * 9, np.float32)
    kernel = svod.compile(_padded_conv(), device)
    assert type(kernel.program).__name__ != "PartsProgram"  # no status buffer: every access was proven
    svod.run(_padded_conv(), [out, x.reshape(-1), w.reshape(-1)], device=device)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    expected = sum(padded[:, dy:dy + 7, dx:dx + 9] * w[:, dy, dx][:, None, None] for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(out.reshape(3, 7, 9), expected, rtol=1e-5, atol=1e-5)


def _gather(index_dtype, guarded: bool):
    k = KernelBuilder("gather")
    out, table, idx = k.buffer(dtypes.float32, 12), k.buffer(dtypes.float32, 5), k.buffer(index_dtype, 12)
    i = k.range(12)
    g = idx[i]
    value = ((g >= 0) & (g < 5)).where(table[g], -1.0) if guarded else table[g]
    k.store(out[i], value)
    return k.build()


@pytest.mark.parametrize("index_dtype", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint32])
def test_gathers_check_indices_read_from_memory(device, index_dtype):
    if refuses(device, index_dtype):
        return
    table = np.arange(5, dtype=np.float32) * 10
    good = np.array([0, 4, 2, 2, 1, 3, 0, 0, 4, 4, 1, 2], index_dtype.numpy)
    out = np.zeros(12, np.float32)
    svod.run(_gather(index_dtype, False), [out, table, good], device=device)
    np.testing.assert_array_equal(out, table[good])
    bad = good.copy()
    bad[5] = 7
    with pytest.raises(IndexOutOfBoundsError) as info:
        svod.run(_gather(index_dtype, False), [out, table, bad], device=device)
    assert (info.value.slot, info.value.size, info.value.index) == (1, 5, 7)
    assert out[5] == 0.0 and (np.delete(out, 5) == np.delete(table[bad.clip(0, 4)], 5)).all()


def test_a_guarded_gather_is_gated_not_checked(device):
    idx = np.array([0, -3, 4, 5, 100, 1, 2, 3, 0, -1, 4, 2], np.int32)
    out = np.zeros(12, np.float32)
    assert type(svod.compile(_gather(dtypes.int32, True), device).program).__name__ != "PartsProgram"
    svod.run(_gather(dtypes.int32, True), [out, np.arange(5, dtype=np.float32), idx], device=device)
    np.testing.assert_array_equal(out, np.where((idx >= 0) & (idx < 5), idx.clip(0, 4), -1).astype(np.float32))


def test_a_scatter_outside_its_buffer_writes_nothing_there(device):
    k = KernelBuilder("scatter")
    out, x, idx = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8), k.buffer(dtypes.int32, 8)
    i = k.range(8)
    k.store(out[idx[i]], x[i])
    whole, (out_view, x_view) = _guarded_views(device, (8, 8))
    x_view.copyin(np.arange(8, dtype=np.float32) + 1)
    indices = svod.Buffer.from_numpy(np.array([7, 6, 5, -20, 3, 2, 1, 9], np.int32), device)
    with pytest.raises(IndexOutOfBoundsError) as info:
        svod.run(k.build(), [out_view, x_view, indices], device=device)
    assert info.value.slot == 0 and info.value.index in (-20, 9)
    assert _sentinels_intact(whole, (8, 8))
    np.testing.assert_array_equal(out_view.numpy(), [SENTINEL, 7, 6, 5, SENTINEL, 3, 2, 1])


# ---- races ----------------------------------------------------------------------------------------------

def _racy(kind: str):
    k = KernelBuilder(kind)
    out, x = k.buffer(dtypes.int32, 64), k.buffer(dtypes.int32, 64)
    i, j = k.range(8), k.range(8)
    if kind == "read_modify_write_through_data":
        k.store(out[x[i * 8 + j]], out[x[i * 8 + j]] + 1)
    elif kind == "accumulate_into_one":
        k.store(out[0], out[0] + x[i * 8 + j])
    elif kind == "index_misses_a_range":
        k.store(out[i], x[i * 8 + j])
    elif kind == "diagonal_collision":
        k.store(out[i + j], x[i * 8 + j])
    elif kind == "read_a_neighbour":
        k.store(out[i * 8 + j], out[(i * 8 + j + 1) % 64] + x[i])
    elif kind == "halving":
        k.store(out[(i * 8 + j) // 2], x[i * 8 + j])
    elif kind == "read_the_next":  # item (i, j) reads what item (i, j + 1) writes
        k.store(out[i * 8 + j], (j < 7).where(out[i * 8 + j + 1], 0) * 2)
    elif kind == "read_transposed":  # item (i, j) reads what item (j, i) writes
        k.store(out[i * 8 + j], out[j * 8 + i] + 1)
    elif kind == "write_the_next":
        k.store(out[i * 8 + j], x[i * 8 + j])
        k.store(out[i * 8 + j + 1], x[i * 8 + j])
    elif kind == "stride_of_a_loop":  # item 1 at l = 1 and item 2 at l = 0 both write element 2
        loop = k.range(8, AxisKind.LOOP)
        k.store(out[i * (loop + 1)], x[i])
    elif kind == "column_down_and_row":  # item i's row left of the diagonal is other items' columns
        down, across = k.range(8 - i, AxisKind.LOOP), k.range(8, AxisKind.LOOP)
        k.store(out[(i + down) * 8 + i], x[i])
        k.store(out[i * 8 + across], x[i])
    elif kind == "row_and_column":  # item i writes row i and column i: item 2's row meets item 0's column
        loop = k.range(8, AxisKind.LOOP)
        k.store(out[i * 8 + loop], x[i])
        k.store(out[loop * 8 + i], x[i])
    return k.build()


@pytest.mark.parametrize("kind", ["read_modify_write_through_data", "accumulate_into_one", "index_misses_a_range",
                                  "diagonal_collision", "read_a_neighbour", "halving", "read_the_next",
                                  "read_transposed", "write_the_next", "stride_of_a_loop", "row_and_column",
                                  "column_down_and_row"])
def test_kernels_whose_work_items_may_race_are_refused(device, kind):
    with pytest.raises(RaceError, match="work item") as info:
        svod.compile(_racy(kind), device)
    assert info.value.kernel == kind and info.value.stage == "lower"


def _read_elsewhere(kind: str) -> UOp:
    """A kernel whose racy read is in another statement than the write it meets, or in a part of a statement
    other than its value: work item ``i`` reads what item ``i + 1`` (or any item) writes or updates."""
    k = KernelBuilder(kind)
    out, y, x = k.buffer(dtypes.float32, 9), k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    counts, idx = k.buffer(dtypes.int32, 8), k.buffer(dtypes.int32, 8)
    i = k.range(8)
    if kind == "after_the_store":
        k.store(out[i], x[i])
        k.store(y[i], out[i + 1])
    elif kind == "before_the_store":
        k.store(y[i], out[i + 1])
        k.store(out[i], x[i])
    elif kind == "of_an_atomic_update":
        k.atomic_add(counts[i], 1)
        k.store(y[i], counts[(i + 1) % 8].cast(dtypes.float32))
    elif kind == "in_a_gate_of_an_atomic_update":
        k.atomic_add(counts[i], 1)
        k.store(y.index(i, gate=counts[(i + 3) % 8] > 0), 1.0)
    elif kind == "in_a_position":
        k.store(out[i], x[i])
        k.store(y[out[(i + 1) % 8].cast(dtypes.int32) % 8], 1.0)
    elif kind == "in_a_gate":
        k.store(out[i], x[i])
        k.store(y.index(i, gate=out[(i + 1) % 8] > 0), 1.0)
    elif kind == "in_a_gathers_index":
        k.store(idx[i], i.cast(dtypes.int32))
        k.store(y[i], x[idx[(i + 1) % 8] % 8])
    elif kind == "in_a_loop_s_exit_test":
        loop = k.range(None, AxisKind.LOOP)
        k.store(out[i], out[i] + 1.0)
        k.exit(loop, out[(i + 1) % 8] > 5.0)
    return k.build()


@pytest.mark.parametrize("kind", ["after_the_store", "before_the_store", "of_an_atomic_update",
                                  "in_a_gate_of_an_atomic_update", "in_a_position", "in_a_gate",
                                  "in_a_gathers_index", "in_a_loop_s_exit_test"])
def test_a_read_that_meets_another_statement_s_write_is_refused(device, kind):
    """The race check reads the guards only of statements that read memory the kernel writes or updates:
    each of these reads one, in its value, position, gate or a loop's exit test, and is refused."""
    with pytest.raises(RaceError, match="read") as info:
        svod.compile(_read_elsewhere(kind), device)
    assert info.value.kernel == kind and info.value.stage == "lower"


@pytest.mark.parametrize("n", [1, 2, 7])
@pytest.mark.parametrize("diagonal", [False, True], ids=["correlation", "covariance"])
def test_a_work_item_s_column_down_and_row_across_never_meet_another_s(device, n, diagonal):
    """npbench's correlation: item ``i`` writes ``out[i + 1 + a, i]`` and ``out[i, i + 1 + a]``. The rows and
    columns alone do not tell items apart (``i + 1 + a == i'`` and ``i == i' + 1 + b`` each may hold); both at
    once would need ``i' - i >= 1`` and ``i - i' >= 1``. Its covariance starts both at the diagonal, which the
    item writes twice: ``i' >= i`` and ``i >= i'`` there, so only an item meets itself."""
    start = 0 if diagonal else 1
    k = KernelBuilder("triangles")
    out, x = k.buffer(dtypes.float32, n * n), k.buffer(dtypes.float32, n)
    i = k.range(n - start) if n > start else k.range(1)
    a = k.range((n - start - i) if n > start else 0, AxisKind.LOOP)
    k.store(out[(i + start + a) * n + i], x[i])
    k.store(out[i * n + i + start + a], x[i] * 2)
    values = np.arange(1, n + 1, dtype=np.float32)
    got = np.full(n * n, -1, np.float32)
    svod.run(k.build(), [got, values], device=device)
    rows, columns = np.indices((n, n))
    want = np.where(rows > columns, values[columns], np.where(rows < columns, values[rows] * 2, -1))
    if diagonal:
        np.fill_diagonal(want, values * 2)
    np.testing.assert_array_equal(got.reshape(n, n), want)


def test_race_free_patterns_are_accepted(device):
    k = KernelBuilder("in_place")
    out = k.buffer(dtypes.int32, 64)
    i, j = k.range(8), k.range(8)
    k.store(out[i * 8 + j], out[i * 8 + j] * 2 + 1)  # each work item reads the element it writes
    data = np.arange(64, dtype=np.int32)
    svod.run(k.build(), [data], device=device)
    np.testing.assert_array_equal(data, np.arange(64) * 2 + 1)
    k = KernelBuilder("row_scan")
    out, x = k.buffer(dtypes.float32, 32), k.buffer(dtypes.float32, 32)
    i = k.range(4)
    j = k.range(8, AxisKind.LOOP)
    k.store(out[i * 8 + j], (j >= 1).where(out[i * 8 + j - 1], 0.0) + x[i * 8 + j])  # a LOOP carries the sum
    x_np = np.random.default_rng(1).standard_normal(32).astype(np.float32)
    got = np.zeros(32, np.float32)
    svod.run(k.build(), [got, x_np], device=device)
    np.testing.assert_allclose(got.reshape(4, 8), np.cumsum(x_np.reshape(4, 8), axis=1), rtol=1e-6, atol=1e-6)
    k = KernelBuilder("halves")
    out, x = k.buffer(dtypes.int32, 16), k.buffer(dtypes.int32, 8)
    i = k.range(8)
    k.store(out[i], x[i])  # two stores a whole turn of i apart never meet
    k.store(out[i + 8], out[i] * 3)  # and the second reads what its own item stored
    got = np.full(16, -1, np.int32)
    svod.run(k.build(), [got, np.arange(8, dtype=np.int32) - 4], device=device)
    np.testing.assert_array_equal(got, np.concatenate([np.arange(8) - 4, (np.arange(8) - 4) * 3]))
    k = KernelBuilder("odd_from_even")
    out = k.buffer(dtypes.int32, 16)
    i = k.range(8)
    k.store(out[2 * i + 1], out[2 * i] + 1)  # the even element is the same item's, one before its odd one
    got = np.arange(16, dtype=np.int32) * 10
    svod.run(k.build(), [got], device=device)
    np.testing.assert_array_equal(got[1::2], np.arange(8) * 20 + 1)
    k = KernelBuilder("flip")
    out, x = k.buffer(dtypes.int32, 64), k.buffer(dtypes.int32, 64)
    i, j = k.range(8), k.range(8)
    k.store(out[63 - (i * 8 + j)], x[i * 8 + j])  # negative strides, the larger in magnitude first
    got = np.zeros(64, np.int32)
    svod.run(k.build(), [got, np.arange(64, dtype=np.int32)], device=device)
    np.testing.assert_array_equal(got, np.arange(64)[::-1])


def test_a_load_shared_by_two_guarded_uses_is_gated_by_either_guard(device):
    """``x[i - 1]`` used under ``i >= 1`` and under ``i >= 2``: proven under each, so gated by their
    disjunction, neither checked nor reported out of bounds at ``i = 0`` where no use reads it."""
    k = KernelBuilder("shared_guarded")
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    before = x[i - 1]
    k.store(out[i], (i >= 1).where(before, 0.0) + (i >= 2).where(before * 2.0, 0.0))
    assert type(svod.compile(k.build(), device).program).__name__ != "PartsProgram"
    got, data = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    svod.run(k.build(), [got, data], device=device)
    np.testing.assert_array_equal(got, [0, 0, 3, 6, 9, 12, 15, 18])


def _laplacian(p, ap):
    n = p.shape[0]
    for i in svod.prange(n):
        for j in range(n):
            v = 4.0 * p[i, j]
            if i > 0:
                v -= p[i - 1, j]
            if i < n - 1:
                v -= p[i + 1, j]
            if j > 0:
                v -= p[i, j - 1]
            if j < n - 1:
                v -= p[i, j + 1]
            ap[i, j] = v


def _laplacian_1d(p, ap):
    n = p.shape[0]
    for i in svod.prange(n):
        v = 2.0 * p[i]
        if i > 0:
            v -= p[i - 1]
        if i < n - 1:
            v -= p[i + 1]
        ap[i] = v


def _next_added_five_times(p, out):
    n = p.shape[0]
    for i in svod.prange(n):
        v = p[i]
        if i < n - 1:
            v += p[i + 1]
        if i + 1 < n:
            v *= p[i + 1]
        if i < n - 1:
            v -= p[i + 1]
        if i + 2 <= n:
            v += p[i + 1]
        if i <= n - 2:
            v += p[i + 1]
        out[i] = v


@pytest.mark.parametrize("static_shapes", [True, False], ids=["static_shapes", "symbolic_sizes"])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("fn", [_laplacian, _laplacian_1d, _next_added_five_times], ids=lambda f: f.__name__)
def test_a_load_every_use_of_which_discards_is_neither_made_nor_reported(device, fn, n, static_shapes):
    """One load read under more than ``MAX_GUARDS`` different conditions is gated by their disjunction: where
    none holds it is not made. ``p[i + 1]`` under five ``if``s, each false at ``i = n - 1``; and a 1x1
    Laplacian's sizes as constants, where ``p[i + 1, j]`` and ``p[i, j + 1]`` are one load at index 1, read
    under conditions all folded to False. Merged into the outer part they share (none), a check reported
    index ``n`` out of bounds. The 1-D Laplacian reads each neighbour under one condition: no merge."""
    kernel = Kernel(fn, static_shapes=static_shapes)
    shape = (n, n) if fn is _laplacian else (n,)
    agrees_with_python(kernel, device, np.arange(1.0, n ** len(shape) + 1).reshape(shape), np.zeros(shape))
def test_a_value_used_in_a_wheres_condition_and_branch_is_guarded_by_the_condition_alone():
    """``max(s, v)`` of a reduction is ``where(s < R, R, s)``: ``R``'s gathers are reached where the condition is
    computed, and, in its branch, where it holds too. That guard only adds to the first (either one holds
    wherever the first does); kept, it held an unchecked copy of ``R``, whose gathers read before the buffer
    where an index was out of range, and which every later pass copied beside the checked one."""
    from tests.codegen.test_upcast import _arguments, gathered_maximum

    target = pipeline.Target(svod.DeviceSpec.parse("CPU"), DeviceCaps(host_memory=True, overlaps_on_host=True), None)
    ast = gathered_maximum.build(*_arguments(7, 5))
    state = pipeline.Lowering(ast, "gathered_maximum", ast)
    for step in pipeline.FRONT:
        state = pipeline._run(step, state, target, None) or state
    topo = state.sink.toposort()
    assert sum(u.op is Ops.REDUCE for u in topo) == 1
    gathers = [u for u in topo if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and u.src[0].arg in (1, 2)
               and any(v.op is Ops.LOAD for v in u.src[1].toposort())]
    assert gathers and all(u.arg == CHECKED for u in gathers)


@pytest.mark.parametrize("compiler", ["llvm", "clang", "PYTHON", "CUDA:0", "WEBGPU:0"])
def test_a_deep_chain_of_wheres_sharing_one_value_is_checked_in_linear_time(compiler):
    """``v = c.where(v + 1, v)`` 10,000 times: ``v`` is read under both branches of every ``where``, so a
    walk of every path's guards would take 2**10000 steps (33 s at depth 20 before); each node's guard is
    what all its uses share, and the linearizer and the PYTHON reference (which evaluates each branch under
    its own mask, one per distinct selection) stay linear too. PoCL's own compiler does not finish such a
    chain (it crashes past a few thousand), so CL:0 is not among the devices. clang 14 and 15, as the C pair's
    compiler, crash on it after a minute or more of work (a compiler's failure is a CompileError naming the
    kernel: ``test_corpus.py::test_compiler_errors_carry_the_log_and_the_source``), so with them svod's part,
    the chain checked and rendered as C, is what runs."""
    device = open_device(compiler)
    crashing = re.search(r"clang version 1[45]\.", getattr(device.compiler, "identity", ""))
    k = KernelBuilder("deep_where_chain")
    out, x = k.buffer(dtypes.float32, (4, 8)), k.buffer(dtypes.float32, (4, 8))
    i, j = k.range(4), k.range(8)
    value = x[i, j]
    for _ in range(10_000):
        value = (i < j % 5).where(value + 1.0, value)
    k.store(out[i, j], value)
    got, data = np.zeros(32, np.float32), np.arange(32, dtype=np.float32)
    if crashing:
        source = device.renderer.render(k.build()).src
        assert len(re.findall(r"\(v\d+\?v\d+:v\d+\)", source)) == 10_000  # one select per where, each once
        return
    svod.run(k.build(), [got, data], device=device)
    rows, cols = np.meshgrid(np.arange(4), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(got.reshape(4, 8), data.reshape(4, 8) + 10_000 * (rows < cols % 5))


@svod.kernel
def _binned_atomically(c, e, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        if np.float64(v) >= -1.0 and np.float64(v) <= 2.5:
            b = np.int64(np.float64(np.float64(v) + 1.0) / 3.5 * 7)
            if b == 7:
                b = 6
            if np.float64(v) < e[b]:
                b = b - 1
            if np.float64(v) >= e[b + 1] and b != 6:
                b = b + 1
            svod.atomic_add(c, b, np.int64(1))


@svod.kernel
def _binned_in_turn(c, e, x):
    for i in range(x.shape[0]):
        v = x[i]
        if np.float64(v) >= -1.0 and np.float64(v) <= 2.5:
            b = np.int64(np.float64(np.float64(v) + 1.0) / 3.5 * 7)
            if b == 7:
                b = 6
            if np.float64(v) < e[b]:
                b = b - 1
            if np.float64(v) >= e[b + 1] and b != 6:
                b = b + 1
            c[b] += 1


@svod.kernel
def _scattered_through_a_table(out, table, x):
    for i in svod.prange(x.shape[0]):
        out[table[x[i]]] = 1


@svod.kernel
def _gathered_where_a_table_says(out, e, f, x):
    for i in svod.prange(x.shape[0]):
        out[i] = f[x[i]] if e[x[i]] > 0 else 0


BIN_EDGE_VALUES = np.array([0, -2147483648, 1, 2147483647, -1, 2, 3, -2, 2147483646, -2147483647, 0], np.int32)
"""A histogram's inputs: inside its range (-1, 0, 1, 2) and far outside it, where ``b`` is far outside ``e``."""


def _front(ast: UOp, name: str) -> UOp:
    """``ast`` after the passes every target runs, ``guard_accesses`` the last of them."""
    target = pipeline.Target(svod.DeviceSpec.parse("CPU"), DeviceCaps(host_memory=True, overlaps_on_host=True), None)
    state = pipeline.Lowering(ast, name, ast)
    for step in pipeline.FRONT:
        state = pipeline._run(step, state, target, None) or state
    return state.sink


@pytest.mark.parametrize("kernel", [_binned_atomically, _binned_in_turn])
def test_every_read_of_a_histogram_s_edges_is_checked_and_gated_by_its_if(kernel):
    """``e[b]`` and ``e[b + 1]``, read only where ``-1 <= v <= 2.5``, are read where that holds and checked
    (``e``'s length is the caller's): ``b`` is far outside ``e`` elsewhere. Read in the target's position of
    the ``c`` update, they were neither, and a CPU kernel read ``e[-2**31 / 2]``."""
    c, e = np.zeros(7, np.int64), np.linspace(-1, 2.5, 8)
    sink = _front(kernel.build(c, e, BIN_EDGE_VALUES), "binned")
    inside = [u for u in sink.toposort() if u.op is Ops.CMPLE and u.src[0].op is Ops.CONST and u.src[0].arg == -1.0]
    reads = [u.src[0] for u in sink.toposort() if u.op is Ops.LOAD and u.src[0].src[0].arg == 1]
    assert len(inside) == 1 and reads
    assert all(index.arg == CHECKED and inside[0] in index.src[2].toposort() for index in reads)


@pytest.mark.parametrize("kernel", [_binned_atomically, _binned_in_turn])
def test_a_histogram_binned_under_nested_ifs_computes_python_s_counts(device, kernel):
    for x in (BIN_EDGE_VALUES, BIN_EDGE_VALUES[:1], BIN_EDGE_VALUES[1:2], np.tile(BIN_EDGE_VALUES, 7)[:73]):
        agrees_with_python(kernel, device, np.zeros(7, np.int64), np.linspace(-1, 2.5, 8), x)


def test_a_read_in_a_store_s_position_is_checked(device):
    """``out[table[x[i]]]``: ``table[x[i]]`` is checked as a read in a value is; ``x[1]`` is past ``table``."""
    out, table, x = np.zeros(7, np.int64), np.arange(8, dtype=np.int64) % 7, np.array([0, 10 ** 8, 1], np.int64)
    if refuses(device, dtypes.int64):
        return
    with pytest.raises(IndexOutOfBoundsError) as info:
        _scattered_through_a_table(out, table, x, device=device)
    assert (info.value.slot, info.value.size, info.value.index) == (1, 8, 10 ** 8)
    agrees_with_python(_scattered_through_a_table, device, out, table, np.array([0, 7, 1, 6], np.int64))


def test_a_gate_that_reads_memory_reads_it_checked(device):
    """``f[x[i]]`` is read where ``e[x[i]] > 0``: that gate's own read of ``e`` is the checked one, not a copy
    that reads past ``e`` where ``x[i]`` is out of range."""
    out, e, f = np.zeros(3, np.int64), np.arange(8, dtype=np.int64) - 3, np.arange(8, dtype=np.int64) * 10
    if refuses(device, dtypes.int64):
        return
    with pytest.raises(IndexOutOfBoundsError) as info:
        _gathered_where_a_table_says(out, e, f, np.array([5, 10 ** 8, 1], np.int64), device=device)
    assert (info.value.slot, info.value.size, info.value.index) == (1, 8, 10 ** 8)
    agrees_with_python(_gathered_where_a_table_says, device, out, e, f, np.array([5, 7, 1], np.int64))


# ---- race-free kernels the prover must accept ---------------------------------------------------------

LU = 6
"""The side of the matrices of the LU and wavefront kernels."""


def _maybe_empty_width():
    """An elementwise kernel whose width may be 0: an empty range writes nothing, so stride ``C`` between
    rows needs no ``C >= 1``."""
    k = KernelBuilder("maybe_empty_width")
    cols = k.var("C", 0, 100)
    out, x = k.buffer(dtypes.float32, (4, cols)), k.buffer(dtypes.float32, (4, cols))
    r, c = k.range(4), k.range(cols)
    k.store(out[r, c], x[r, c] * 2.0)
    return k.build()


def _blocked_scan():
    """A scan per block of 8: the clamp ``max(g - 1, 0)`` is ``g - 1`` under ``t > 0``, inside the block."""
    k = KernelBuilder("blocked_scan")
    y, x = k.buffer(dtypes.float32, 32), k.buffer(dtypes.float32, 32)
    blk, t = k.range(4), k.range(8, AxisKind.LOOP)
    g = blk * 8 + t
    k.store(y[g], (t > 0).where(y[(g - 1).maximum(0)], 0.0) + x[g])
    return k.build()


def _carried_unless_first():
    """A row scan whose carried read is guarded by ``m != 0`` spelled ``~m.eq(0)``."""
    k = KernelBuilder("carried_unless_first")
    c, x = k.buffer(dtypes.float32, (4, 8)), k.buffer(dtypes.float32, (4, 8))
    i, m = k.range(4), k.range(8, AxisKind.LOOP)
    k.store(c[i, m], (~m.eq(0)).where(c[i, m - 1], 0.0) + x[i, m])
    return k.build()


def _carried_unguarded():
    """``D[i, m + 1] = D[i, m] + x[i, m]``: every read is in the row its item writes."""
    k = KernelBuilder("carried_unguarded")
    d, x = k.buffer(dtypes.float32, (4, 9)), k.buffer(dtypes.float32, (4, 8))
    i, m = k.range(4), k.range(8, AxisKind.LOOP)
    k.store(d[i, m + 1], d[i, m] + x[i, m])
    return k.build()


def _reversed_loop():
    """``D[i, j, 4 - m]``: the loop runs backwards through each item's five elements."""
    k = KernelBuilder("reversed_loop")
    d = k.buffer(dtypes.float32, (2, 3, 5))
    i, j, m = k.range(2), k.range(3), k.range(5, AxisKind.LOOP)
    k.store(d[i, j, 4 - m], m.cast(dtypes.float32) + 1.0)
    return k.build()


def _lu_scale():
    """LU step ``k``'s column scale: ``a[i, k] /= a[k, k]`` below the pivot; row ``k`` is read, never written."""
    k = KernelBuilder("lu_scale")
    step = k.var("k", 0, LU - 1)
    a = k.buffer(dtypes.float32, (LU, LU))
    i = step + 1 + k.range(LU - 1 - step)
    k.store(a[i, step], a[i, step] / a[step, step])
    return k.build()


def _lu_update():
    """LU step ``k``'s update of the block below and right of row and column ``k``, which it reads."""
    k = KernelBuilder("lu_update")
    step = k.var("k", 0, LU - 1)
    a = k.buffer(dtypes.float32, (LU, LU))
    i, j = step + 1 + k.range(LU - 1 - step), step + 1 + k.range(LU - 1 - step)
    k.store(a[i, j], a[i, j] - a[i, step] * a[step, j])
    return k.build()


def _wavefront():
    """A dynamic program over anti-diagonals: diagonal ``d`` (``T[i, i + d]``) from lower diagonals only."""
    k = KernelBuilder("wavefront")
    d = k.var("d", 1, LU - 1)
    t = k.buffer(dtypes.float32, (LU, LU))
    i = k.range(LU - d)
    r = k.range(d - 1, AxisKind.REDUCE)
    j = i + d
    inner = (t[i, i + 1 + r] * t[i + 2 + r, j]).reduce(r)
    k.store(t[i, j], t[i, j - 1].maximum(t[i + 1, j]) * 0.5 + inner * 0.25)
    return k.build()


def _blocked_store():
    """A store blocked by a LOOP ``jb`` whose stride is the whole extent of the parallel ``jj``."""
    k = KernelBuilder("blocked_store")
    out, x = k.buffer(dtypes.float32, (4, 12)), k.buffer(dtypes.float32, (4, 12))
    i, jb, jj = k.range(4), k.range(3, AxisKind.LOOP), k.range(4)
    k.store(out[i, jb * 4 + jj], x[i, jb * 4 + jj] * 2.0)
    return k.build()


def _symbolic_halves():
    """``out[i]`` and ``out[i + n]`` over ``i < n``: the two halves never meet, whatever ``n``."""
    k = KernelBuilder("symbolic_halves")
    n = k.var("n", 1, 16)
    out, x = k.buffer(dtypes.float32, 2 * n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i])
    k.store(out[i + n], out[i] * 3.0)
    return k.build()


def _lu(device, a):
    for step in range(LU):
        svod.run(_lu_scale(), [a], device=device, k=step)
        svod.run(_lu_update(), [a], device=device, k=step)


def _lu_reference(a):
    a = a.copy()
    for step in range(LU):
        a[step + 1:, step] /= a[step, step]
        a[step + 1:, step + 1:] -= np.outer(a[step + 1:, step], a[step, step + 1:])
    return a


def _wavefronts(device, t):
    for d in range(1, LU):
        svod.run(_wavefront(), [t], device=device, d=d)


def _wavefront_reference(t):
    t = t.copy()
    for d in range(1, LU):
        for i in range(LU - d):
            j = i + d
            inner = sum(t[i, i + 1 + r] * t[i + 2 + r, j] for r in range(d - 1))
            t[i, j] = max(t[i, j - 1], t[i + 1, j]) * 0.5 + inner * 0.25
    return t


def _checks():
    """Each race-free kernel: how to run it on a device, and what numpy says it computes."""
    rng = np.random.default_rng(28)
    x48, x32 = rng.standard_normal(48).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    square = (rng.standard_normal((LU, LU)) + LU * np.eye(LU)).astype(np.float32)
    start = np.concatenate([rng.standard_normal((4, 1)), np.zeros((4, 8))], axis=1).astype(np.float32)
    return {
        "maybe_empty_width": (lambda dev, out: [svod.run(_maybe_empty_width(), [out, x32[:20].copy()], device=dev, C=5),
                                                svod.run(_maybe_empty_width(), [out[20:], x32], device=dev, C=0)],
                              np.zeros(32, np.float32), np.concatenate([x32[:20] * 2, np.zeros(12, np.float32)])),
        "blocked_scan": (lambda dev, y: svod.run(_blocked_scan(), [y, x32], device=dev), np.zeros(32, np.float32),
                         np.cumsum(x32.reshape(4, 8), axis=1).reshape(-1)),
        "carried_unless_first": (lambda dev, c: svod.run(_carried_unless_first(), [c, x32], device=dev),
                                 np.zeros(32, np.float32), np.cumsum(x32.reshape(4, 8), axis=1).reshape(-1)),
        "carried_unguarded": (lambda dev, d: svod.run(_carried_unguarded(), [d, x32], device=dev),
                              start.reshape(-1).copy(),
                              np.concatenate([start[:, :1], start[:, :1] + np.cumsum(x32.reshape(4, 8), axis=1)],
                                             axis=1).reshape(-1)),
        "reversed_loop": (lambda dev, d: svod.run(_reversed_loop(), [d], device=dev), np.zeros(30, np.float32),
                          np.tile(np.arange(5, 0, -1, dtype=np.float32), 6)),
        "lu": (_lu, square.reshape(-1).copy(), _lu_reference(square).reshape(-1)),
        "wavefront": (_wavefronts, square.reshape(-1) / LU, _wavefront_reference(square / LU).reshape(-1)),
        "blocked_store": (lambda dev, out: svod.run(_blocked_store(), [out, x48], device=dev),
                          np.zeros(48, np.float32), x48 * 2),
        "symbolic_halves": (lambda dev, out: svod.run(_symbolic_halves(), [out, x32[:8]], device=dev, n=5),
                            np.full(16, -1, np.float32),
                            np.concatenate([x32[:5], x32[:5] * 3, np.full(6, -1, np.float32)])),
    }


@pytest.mark.parametrize("case", list(_checks()))
def test_kernels_whose_reads_and_writes_provably_never_meet_are_accepted(device, case):
    """Each kernel was once refused as a race though no two work items meet; each computes what
    numpy does, on every device."""
    run, data, expected = _checks()[case]
    run(device, data)
    np.testing.assert_allclose(data, expected, rtol=1e-5, atol=1e-5)


def test_an_access_under_a_guard_that_never_holds_meets_nothing(device):
    """``(r < 0).where(a[r + 1], 0)``: simplification folds the guard to false, and the read it guards is
    never made, so it neither races nor needs a bounds check."""
    k = KernelBuilder("dead_guard")
    a = k.buffer(dtypes.float32, 4)
    r = k.range(4)
    k.store(a[r], (r < 0).where(a[r + 1], 1.0) + (r < 0).where(a[r + 1], 0.0))
    got = np.zeros(4, np.float32)
    svod.run(k.build(), [got], device=device)
    np.testing.assert_array_equal(got, np.ones(4))


def test_a_load_outside_every_loop_of_an_effect_that_runs_zero_times_is_not_made(device):
    """``out[r + 1] = x[w - 1]`` over ``r < w``: at ``w = 0`` nothing runs, though the load, which uses no
    range, may be placed before the loop; it is gated by ``w > 0`` and not reported out of bounds."""
    k = KernelBuilder("empty_invariant")
    w = k.var("w", 0, 3)
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    k.store(out[k.range(w) + 1], x[w - 1])
    for width, expected in ((0, [0] * 8), (3, [0, 2, 2, 2, 0, 0, 0, 0])):
        got = np.zeros(8, np.float32)
        svod.run(k.build(), [got, np.arange(8, dtype=np.float32)], device=device, w=width)
        np.testing.assert_array_equal(got, expected)


def test_a_stride_that_is_a_range_s_own_variable_end_and_an_exact_division_tell_items_apart(device):
    """``out[r*w]`` over ``r < w``, ``w`` in [0, 4] (the first column of a ``w`` by ``w`` matrix): stride
    ``w`` is at least 1 wherever an item runs. ``out[(2 + 2*i) // 2]`` is ``out[1 + i]``."""
    k = KernelBuilder("variable_stride")
    w = k.var("w", 0, 4)
    out, x = k.buffer(dtypes.float32, 16), k.buffer(dtypes.float32, 4)
    r = k.range(w)
    k.store(out[r * w], x[r] + 1.0)
    got = np.zeros(16, np.float32)
    svod.run(k.build(), [got, np.arange(4, dtype=np.float32)], device=device, w=4)
    np.testing.assert_array_equal(got.reshape(4, 4)[:, 0], np.arange(4) + 1)
    k = KernelBuilder("exact_division")
    out = k.buffer(dtypes.float32, 8)
    i = k.range(4)
    k.store(out[(2 + i * 2) // 2], i.cast(dtypes.float32))
    got = np.zeros(8, np.float32)
    svod.run(k.build(), [got], device=device)
    np.testing.assert_array_equal(got, [0, 0, 1, 2, 3, 0, 0, 0])


def test_a_range_whose_end_a_proof_decides_is_still_the_same_range_in_both_items(device):
    """``min(n, n * (1 - chosen))`` is ``n * (1 - chosen)`` for every value: deciding it inside the range's end
    made another range, which the race proof then could not match with its copy in the second item (a
    launch that takes one of two variants of a kernel gates its rows this way)."""
    k = KernelBuilder("gated_rows")
    n = k.var("n", 0, 64)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    chosen = (n - 7).maximum(0).minimum(1)  # 1 where n >= 8
    i = k.range(n.minimum(n * (1 - chosen)))
    k.store(out[i], x[i] + 1.0)
    for size in (0, 5, 7, 8, 13):
        got = np.zeros(size, np.float32)
        svod.run(k.build(), [got, np.arange(size, dtype=np.float32)], device=device, n=size)
        np.testing.assert_array_equal(got, np.arange(size) + 1.0 if size < 8 else np.zeros(size))


# ---- sequential loops made parallel ------------------------------------------------------------------------

@svod.kernel
def _rows_times_columns(out, a, b):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):  # numba's spelling: only the outer loop is prange
            acc = 0.0
            for k in range(a.shape[1]):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc


@svod.kernel
def _doubled_without_prange(out, a):
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = a[i, j] * 2.0


@svod.kernel
def _running_sum_in_place(out, a):
    for i in svod.prange(out.shape[0]):
        for j in range(1, out.shape[1]):
            out[i, j] = out[i, j - 1] + a[i, j]


@svod.kernel
def _row_started_before_its_loop(out, a):
    for i in svod.prange(out.shape[0]):
        out[i, 0] = -1.0
        for j in range(1, out.shape[1]):
            out[i, j] = out[i, 0] + a[i, j]


@svod.kernel
def _carried_through_the_row(out, a):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for j in range(out.shape[1]):
            s = s * 0.5 + a[i, j]
            out[i, j] = s


@svod.kernel
def _last_turn_wins(out, a):
    for i in svod.prange(out.shape[0]):
        for j in range(a.shape[1]):
            out[i, 0] = a[i, j]


@svod.kernel
def _reversed_rows(out, a):
    for i in range(out.shape[0]):
        for j in range(out.shape[1] - 1, -1, -1):
            out[i, out.shape[1] - 1 - j] = a[i, j]


@svod.kernel
def _scaled_by_the_rows_sum(out, a):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k]
            out[i, j] = a[i, j] / total


@svod.kernel
def _row_sums_without_prange(out, a):
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * (j + 1)
            out[i, j] = total


@svod.kernel
def _escape_times(out, a):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            z = 0.0
            k = 0
            while k < 20 and z < 4.0:
                z = z * z + a[i, j]
                k += 1
            out[i, j] = k


@svod.kernel
def _escape_counts_along_rows(out, a):
    """numba's Mandelbrot: the points of a row a ``range``, each turn setting its locals before its loop carries
    them: the turns are independent, each register one per turn."""
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            z = 0.0
            k = 0
            for _ in range(20):
                if z < 4.0:
                    z = z * z + a[i, j]
                    k += 1
            out[i, j] = k


@svod.kernel
def _stops_at_the_first_negative(out, a):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            if a[i, j] < 0.0:
                break
            out[i, j] = a[i, j]


@svod.kernel
def _swapped_along_a_triangle(out, a):
    """Locals each turn sets, then swaps in a loop of as many turns as the turn's number: the turns are
    independent, and the inner loop counts with the index the parallel range takes over."""
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            p, q = a[i, j], 1.0
            for _ in range(j):
                p, q = q, p + 1.0
            out[i, j] = p


_PARALLEL_OR_NOT = [(_rows_times_columns, True), (_doubled_without_prange, True), (_reversed_rows, True),
                    (_running_sum_in_place, False), (_row_started_before_its_loop, False),
                    (_carried_through_the_row, False), (_last_turn_wins, False), (_stops_at_the_first_negative, False),
                    (_escape_times, False), (_row_sums_without_prange, False),
                    (_scaled_by_the_rows_sum, False)]


def _loop_arrays(kernel, rows: int = 5, columns: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    if kernel is _rows_times_columns:
        return [np.zeros((rows, columns)), rng.standard_normal((rows, 3)), rng.standard_normal((3, columns))]
    return [np.zeros((rows, 1 if kernel is _last_turn_wins else columns)), rng.standard_normal((rows, columns))]


@pytest.mark.parametrize(("kernel", "parallel"), _PARALLEL_OR_NOT, ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_sequential_loop_is_parallel_exactly_where_its_turns_are_independent(kernel, parallel):
    """``for j in range(m)`` becomes a GLOBAL range where no turn reads or writes what another writes and
    every statement runs inside it; a recurrence, a statement before the loop in the same work item, a
    register carried from turn to turn, a store every turn makes to one element, a ``break`` or ``while``
    in the kernel, a sum the turns share (computed once before the loop, not once per work item), or a
    kernel of one work item with sums (each split over the threads instead) keep it sequential."""
    ast = kernel.bind(*_loop_arrays(kernel)).ast
    made = parallel_loops(ast)
    loops = [u for u in (ast if made is None else made).toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP]
    assert (made is not None and not loops) if parallel else (made is None or loops)


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (3, 1), (1, 17), (0, 4), (4, 0)])
@pytest.mark.parametrize(("kernel", "parallel"), _PARALLEL_OR_NOT, ids=lambda v: getattr(v, "__name__", str(v)))
def test_sequential_loops_compute_what_python_does_whether_made_parallel_or_not(device, kernel, parallel, shape):
    arrays = _loop_arrays(kernel, *shape)
    try:
        run_as_python(kernel, *arrays)
    except IndexError:  # a row's column 0 of an empty row: svod refuses the arguments
        with pytest.raises(SvodError):
            kernel(*arrays, device=device)
        return
    agrees_with_python(kernel, device, *arrays)


def test_locals_a_turn_sets_first_are_one_per_turn_of_a_parallel_loop(device):
    """numba's Mandelbrot: the row's points become parallel, each register one per point (the CPU then runs
    them in lanes), and the counts are Python's, edge sizes and special values included."""
    arrays = _loop_arrays(_escape_counts_along_rows)
    made = parallel_loops(_escape_counts_along_rows.bind(*arrays).ast)
    assert made is not None
    rows, points = (next(u for u in made.toposort() if u.op is Ops.RANGE and u.arg[0] == axis) for axis in (0, 1))
    assert points.arg[1] is AxisKind.GLOBAL
    assert all(g.src == (rows, points) for g in made.toposort() if g.op is Ops.DEFINE_REG)
    for shape in [(1, 1), (3, 37), (2, 130), (0, 4), (4, 0)]:
        a = np.random.default_rng(shape[1]).uniform(-2.5, 0.5, shape)
        for k, special in zip(range(0, a.size, 11), [np.nan, -np.inf, np.inf, -0.0, 5e-324], strict=False):
            a.reshape(-1)[k] = special
        agrees_with_python(_escape_counts_along_rows, device, np.zeros(shape), a)


def test_a_loop_counting_with_a_parallel_loop_s_index_counts_with_the_parallel_range(device):
    """The rows and points become parallel; the swaps stay a loop, whose end is the point's GLOBAL range (a
    register's state that still named the sequential one brought it back around every statement, and each
    work item ran all its turns), and the values are Python's."""
    arrays = _loop_arrays(_swapped_along_a_triangle)
    made = parallel_loops(_swapped_along_a_triangle.bind(*arrays).ast)
    assert made is not None
    ranges = [u for u in made.toposort() if u.op is Ops.RANGE]
    points = next(r for r in ranges if r.arg[0] == 1 and r.arg[1] is AxisKind.GLOBAL)
    assert [r.src[0] for r in ranges if r.arg[1] is AxisKind.LOOP] == [points]
    for shape in [(1, 1), (3, 9), (2, 1), (1, 17), (0, 4), (4, 0)]:
        agrees_with_python(_swapped_along_a_triangle, device, *_loop_arrays(_swapped_along_a_triangle, *shape))


@svod.kernel
def _first_ones_counted_in_memory(out, count):
    for j in range(min(count[0], out.shape[0])):
        out[j] = 1.0


def test_a_loop_whose_end_reads_memory_stays_sequential(device):
    """Its turns are independent, but a parallel range's end is a launch size, which memory is not (a
    selection's pass over the keys it kept, one block of them on a GPU, failed validation)."""
    out, count = np.zeros(9, np.float32), np.array([4], np.int32)
    assert parallel_loops(_first_ones_counted_in_memory.bind(out, count).ast) is None
    _first_ones_counted_in_memory(out, count, device=device)
    np.testing.assert_array_equal(out, [1.0] * 4 + [0.0] * 5)


@svod.kernel
def _scattered_in_order(out, index, values):
    for i in range(index.shape[0]):
        out[index[i]] = values[i]


def test_a_loop_that_scatters_keeps_its_order(device):
    """A store through indices read from memory may hit one element from several turns, and Python keeps the
    last turn's value; made parallel, the turns raced and any one of them won (a jit function's ``a[idx] = v``,
    on WebGPU's one-item work groups, now and then)."""
    n = 4099
    index = np.tile(np.array([1, 3, 1, 0], np.int32), n)[:n]
    values = np.arange(1, n + 1, dtype=np.float32)
    out = np.zeros(4, np.float32)
    assert parallel_loops(_scattered_in_order.bind(out, index, values).ast) is None
    _scattered_in_order(out, index, values, device=device)
    want = np.zeros(4, np.float32)
    for i, k in enumerate(index):
        want[k] = values[i]
    np.testing.assert_array_equal(out, want)


def _register_across_turns() -> UOp:
    """A running sum along each row in a register that turn ``j`` sets only at ``j == 0`` and otherwise adds
    to: every statement runs inside the loop, and no race check sees a register, but each turn reads what the
    turn before left in it."""
    k = KernelBuilder("register_across_turns")
    m, n = k.var("m", 0, 64), k.var("n", 0, 64)
    out, x = k.buffer(dtypes.float32, m * n), k.buffer(dtypes.float32, m * n)
    i, j = k.range(m), k.range(n, AxisKind.LOOP)
    r, zero = UOp.register(0, dtypes.float32, i), UOp.index_const(0)
    k.store(r.state(0, j).index(zero, j.eq(0)), x[i * n + j], j)
    k.store(r.state(1, j).index(zero, j.ne(0)), r.state(1, j).index(zero).load() + x[i * n + j], j)
    k.store(out[i * n + j], r.state(2, j).index(zero).load(), j)
    return k.build()


def test_a_register_a_turn_reads_before_it_sets_keeps_the_loop_sequential(device):
    """Made parallel, the turns of a work item would share one register in any order (and each turn in lanes
    its own): the loop stays a loop, and the sums are numpy's."""
    ast = _register_across_turns()
    made = parallel_loops(ast)
    assert made is None or any(u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP for u in made.toposort())
    m, n = 5, 37
    x = np.arange(m * n, dtype=np.float32) % 7 - 3
    out = np.zeros(m * n, np.float32)
    svod.run(ast, [out, x], device=device, m=m, n=n)
    np.testing.assert_array_equal(out.reshape(m, n), np.cumsum(x.reshape(m, n), axis=1, dtype=np.float32))


def _row_blocks(blocks_of: str) -> UOp:
    """``out[i, block * 4 + c] = i`` over ``m`` rows of ``n`` columns, ``block`` a sequential loop over the whole
    blocks of 4 columns (``n // 4``) or over every block, the last one passing the row (``(n + 3) // 4``)."""
    k = KernelBuilder(f"row_blocks_{blocks_of}")
    m, n = k.var("m", 1, 64), k.var("n", 1, 64)
    out = k.buffer(dtypes.int32, m * n)
    i, c = k.range(m), k.range(4)
    block = k.range(n // 4 if blocks_of == "whole" else (n + 3) // 4, AxisKind.LOOP)
    k.store(out[i * n + block * 4 + c], i.cast(dtypes.int32), block)
    return k.build()


def test_whole_blocks_of_a_row_are_told_apart_from_the_next_row():
    """``4 * (n // 4) <= n``: the race check sees that the whole blocks stay in their row (a matmul of variable
    sizes in blocks of columns), and refuses blocks that pass it, which would write the next row's elements."""
    m, n = 3, 10
    out = np.full(m * n, -1, np.int32)
    svod.run(_row_blocks("whole"), [out], m=m, n=n)
    want = np.repeat(np.arange(m, dtype=np.int32)[:, None], n, axis=1)
    want[:, 8:] = -1  # the columns past the whole blocks
    np.testing.assert_array_equal(out.reshape(m, n), want)
    with pytest.raises(GraphError, match="two work items"):
        svod.compile(_row_blocks("every"), "CPU")


def _plane_rows(kind: str):
    """``a[r, q, :] = a[r, q, :] * 2 + x`` of a ``(3, 4, 5)`` array for variables ``r`` and ``q`` of any size, ``q``
    checked against its axis as a translator does: ``where(q < 4, (4*r + min(max(q, 0), 3))*5 + p, -1)``, the
    ``-1`` an index no access is made at. ``"halves"`` writes column ``p // 2``: two work items write each one."""
    k = KernelBuilder(f"plane_rows_{kind}")
    a, x = k.buffer(dtypes.float32, 60), k.buffer(dtypes.float32, 5)
    r, q = k.var("r", 0, (1 << 31) - 1), k.var("q", 0, (1 << 31) - 1)
    p = k.range(5)
    row = (r * 4 + q.maximum(0).minimum(3)) * 5
    position = (q < 4).where(row + (p if kind == "rows" else p // 2), -1)
    k.store(a[position], a[position] * 2.0 + x[p])
    return k.build()


@pytest.mark.parametrize(("r", "q"), [(0, 0), (1, 2), (2, 3)])
def test_a_position_checked_against_its_axis_names_an_element_only_where_the_check_holds(device, r, q):
    """Where the check fails the access is at -1, an index of no element, never made: two work items that both
    take it write nothing, so they do not race, and the kernel computes NumPy's row (an ``r`` or ``q`` past the
    array is an index error). The choice does not hide two items that write one element where it holds."""
    a, x = np.arange(60, dtype=np.float32), np.arange(5, dtype=np.float32) - 2.0
    if device.caps.index_bits == 32:  # a variable of up to 2**31 values times a plane: refused
        with pytest.raises(GraphError, match="computes indices in 32 bits"):
            svod.run(_plane_rows("rows"), [a, x], device=device, r=r, q=q)
        return
    got = a.copy()
    svod.run(_plane_rows("rows"), [got, x], device=device, r=r, q=q)
    want = a.reshape(3, 4, 5).copy()
    want[r, q, :] = want[r, q, :] * 2.0 + x
    np.testing.assert_array_equal(got, want.ravel())
    for past in ({"r": 3, "q": 0}, {"r": 0, "q": 4}):
        with pytest.raises(IndexOutOfBoundsError):
            svod.run(_plane_rows("rows"), [a.copy(), x], device=device, **past)
    with pytest.raises(GraphError, match="two work items"):
        svod.compile(_plane_rows("halves"), device)


def _read_in_two_statements(shift: int) -> UOp:
    """``out[i] = x[i]``, then two statements that each read ``out[i + shift]``: the same question of the race
    check twice."""
    k = KernelBuilder(f"read_twice_{shift}")
    out, x, y, z = (k.buffer(dtypes.float32, 9) for _ in range(4))
    i = k.range(9)
    k.store(out[i], x[i])
    k.store(y[i], out[(i + shift) % 9] * 2.0)
    k.store(z[i], out[(i + shift) % 9] + 1.0)
    return k.build()


def test_a_race_question_two_statements_ask_is_proven_once_and_answered_alike(monkeypatch):
    """Both reads of the item's own element are accepted (and compute numpy's values), both of the next
    item's are refused; each race check proves a question once."""
    asked: list[tuple] = []
    real = safety.meet_in_one_item

    def recording(first, first_guard, second, second_guard, parallel, order):
        asked.append((first, first_guard, second, second_guard, tuple(parallel)))
        return real(first, first_guard, second, second_guard, parallel, order)
    monkeypatch.setattr(safety, "meet_in_one_item", recording)
    device = open_device("llvm")
    x = np.arange(9, dtype=np.float32) - 4.5
    out, y, z = (np.zeros(9, np.float32) for _ in range(3))
    svod.run(_read_in_two_statements(0), [out, x, y, z], device=device)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(y, x * 2)
    np.testing.assert_array_equal(z, x + 1)
    assert asked and len(set(asked)) == len(asked)
    with pytest.raises(RaceError, match="read") as info:
        svod.compile(_read_in_two_statements(1), device)
    assert info.value.kernel == "read_twice_1"


@svod.jit
def _kept_under_a_bound(x, keep, length, out):
    """Each kept element of the first ``length`` moved to the front of ``out``, by one work item, the turns past
    ``length`` (``x`` and ``keep`` have that length) stopped by an ``if`` around the ``if`` of the mask: the
    compaction in blocks of ``svod.frontend.shrinking`` as first written."""
    for _ in svod.prange(1):
        placed = 0
        for k in range(8):
            if k < length:  # noqa: SIM102 (the two ifs are the case)
                if keep[k] != 0:
                    out[placed] = x[k]
                    placed += 1


@pytest.mark.parametrize("n", [0, 1, 7, 8])
def test_a_load_under_nested_ifs_is_checked_only_where_both_hold(device, n):
    """``keep[k]`` is read where ``k < length`` holds: it is used by the inner ``if``'s store (gated by both
    tests, ``&``) and by the count it updates (a ``where`` under the outer test). Its run-time check fired for
    ``k >= length`` on compiled devices: the ``&`` of the store's gate did not carry the outer test to it."""
    x = np.linspace(-1.0, 1.0, n).astype(np.float32)
    x[:min(n, 2)] = np.array([-0.0, np.nan], np.float32)[:min(n, 2)]
    keep = (np.arange(n) % 3 != 1).astype(np.int32)
    out = np.full(8, 7.0, np.float32)
    _kept_under_a_bound(x, keep, n, out, device=device)
    want = np.full(8, 7.0, np.float32)
    want[:int(keep.sum())] = x[keep != 0]
    np.testing.assert_array_equal(out, want)
