"""Every WEBGPU adapter — WGSL on wgpu, here over Mesa's lavapipe (CI installs mesa-vulkan-drivers and the
extra) and, where Mesa's OpenGL driver is installed too, wgpu's OpenGL backend over llvmpipe (``WEBGPU:1``; it
is ``WEBGPU:0`` on a machine without a Vulkan driver)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, dtypes
from svod.device import Device
from svod.errors import GraphError, IndexOutOfBoundsError, LaunchError
from tests.helpers import open_device, refuses, webgpu_devices


@pytest.fixture(scope="module", params=webgpu_devices())
def gpu(request: pytest.FixtureRequest) -> Device:
    return open_device(request.param)


def _saxpy():
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 24)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    a = k.scalar(dtypes.float32, "a")
    i = k.range(n)
    k.store(out[i], x[i] * a + 1.0)
    return k.build()


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 65535 * 64 + 5])
def test_saxpy_at_edge_sizes_and_past_the_groups_of_one_dimension(gpu, n):
    """More than 65,535 groups of 64 spread over a second launch dimension."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    svod.run(_saxpy(), [out, x], device=gpu, n=n, a=-2.5)
    np.testing.assert_array_equal(out, x * np.float32(-2.5) + np.float32(1.0))


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 7), (17, 256)])
@pytest.mark.parametrize(("op", "ref"), [(Ops.ADD, np.sum), (Ops.MAX, np.max), (Ops.MIN, np.min)])
def test_row_reductions(gpu, rows, cols, op, ref):
    k = KernelBuilder("rows")
    out, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, (rows, cols))
    r, c = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r, c].reduce(c, op=op))
    x_np = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    out_np = np.zeros(rows, np.float32)
    svod.run(k.build(), [out_np, x_np], device=gpu)
    np.testing.assert_allclose(out_np, ref(x_np, axis=1), rtol=1e-5, atol=1e-5 * cols)


@pytest.mark.parametrize(("m", "n", "kk"), [(1, 1, 1), (17, 13, 19), (32, 64, 48)])
def test_matmul(gpu, m, n, kk):
    k = KernelBuilder("matmul")
    c, a, b = k.buffer(dtypes.float32, (m, n)), k.buffer(dtypes.float32, (m, kk)), k.buffer(dtypes.float32, (kk, n))
    i, j, r = k.range(m), k.range(n), k.range(kk, AxisKind.REDUCE)
    k.store(c[i, j], (a[i, r] * b[r, j]).reduce(r))
    rng = np.random.default_rng(2)
    a_np, b_np = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
    c_np = np.zeros((m, n), np.float32)
    svod.run(k.build(), [c_np, a_np, b_np], device=gpu)
    np.testing.assert_allclose(c_np, a_np @ b_np, rtol=1e-5, atol=1e-5 * kk)


def test_integer_division_shifts_and_casts_keep_svods_definitions(gpu):
    a = np.array([7, -7, 7, -7, -2**31, -2**31, 5, 0, 1, -1], np.int32)
    b = np.array([2, 2, -2, 0, -1, 0, 33, -5, 31, 40], np.int32)
    f = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 3e9, -3e9, -2.7, 2.5, 1e-40], np.float32)
    k = KernelBuilder("intops")
    outs = [k.buffer(dtypes.int32, 10) for _ in range(5)]
    ab, bb, fb = k.buffer(dtypes.int32, 10), k.buffer(dtypes.int32, 10), k.buffer(dtypes.float32, 10)
    i = k.range(10)
    values = (ab[i] // bb[i], ab[i] % bb[i], ab[i] << bb[i], ab[i] >> bb[i], fb[i].cast(dtypes.int32))
    for out, value in zip(outs, values, strict=True):
        k.store(out[i], value)
    results = [np.zeros(10, np.int32) for _ in range(5)]
    svod.run(k.build(), [*results, a, b, f], device=gpu)
    expected = [np.zeros(10, np.int32) for _ in range(5)]
    svod.run(k.build(), [*expected, a, b, f], device="PYTHON")
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_array_equal(got, want)


_INT32_EDGES = np.array([-2**31, -2**31 + 1, -1000, -7, -3, -1, 0, 1, 3, 7, 1000, 2**31 - 2, 2**31 - 1], np.int64)


def _truncated(a: np.ndarray, b: np.ndarray, bits: int, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """svod's ``a // b`` and ``a % b`` from numpy's int64: C's truncation toward zero, ``x // 0 == x`` and
    ``x % 0 == 0``, results wrapped to ``bits`` (``MIN // -1`` is MIN)."""
    divisor = np.where(b == 0, 1, b)
    quotient = np.sign(a) * np.sign(divisor) * (np.abs(a) // np.abs(divisor))
    half = 1 << (bits - 1) if signed else 0
    return tuple((x + half) % (1 << bits) - half for x in (quotient, a - quotient * divisor))  # type: ignore[return-value]


def _divmod_kernel(dtype, n: int):
    k = KernelBuilder(f"divmod_{dtype.name}")
    q, r, a, b = (k.buffer(dtype, n) for _ in range(4))
    i = k.range(n)
    k.store(q[i], a[i] // b[i])
    k.store(r[i], a[i] % b[i])
    return k.build()


def test_int32_division_and_remainder_truncate_for_every_sign_and_edge(gpu):
    """Every pair of signs, zero divisors, MIN // -1 and the extremes: wgpu's OpenGL backend writes WGSL's
    ``%`` as GLSL's, which Mesa computes as an unsigned remainder (7 % -3 gave 7), and its ``/`` by zero gave
    0. svod divides there only by divisors made safe and takes remainders from quotients."""
    a, b = (x.ravel() for x in np.meshgrid(_INT32_EDGES, _INT32_EDGES))
    want_q, want_r = _truncated(a, b, 32, signed=True)
    got = [np.zeros(a.size, np.int32), np.zeros(a.size, np.int32)]
    svod.run(_divmod_kernel(dtypes.int32, a.size), [*got, a.astype(np.int32), b.astype(np.int32)], device=gpu)
    reference = [np.zeros(a.size, np.int32), np.zeros(a.size, np.int32)]
    svod.run(_divmod_kernel(dtypes.int32, a.size), [*reference, a.astype(np.int32), b.astype(np.int32)],
             device="PYTHON")
    np.testing.assert_array_equal(reference[0], want_q)
    np.testing.assert_array_equal(reference[1], want_r)
    np.testing.assert_array_equal(got[0], want_q)
    np.testing.assert_array_equal(got[1], want_r)


def test_uint32_division_by_zero_divides_by_one(gpu):
    """Under wgpu's OpenGL backend an unsigned ``x / 0`` and ``x % 0`` gave 0xffffffff."""
    values = np.array([0, 1, 7, 1000, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1], np.int64)
    a, b = (x.ravel() for x in np.meshgrid(values, values))
    want_q, want_r = _truncated(a, b, 32, signed=False)
    got = [np.zeros(a.size, np.uint32), np.zeros(a.size, np.uint32)]
    svod.run(_divmod_kernel(dtypes.uint32, a.size), [*got, a.astype(np.uint32), b.astype(np.uint32)], device=gpu)
    np.testing.assert_array_equal(got[0], want_q)
    np.testing.assert_array_equal(got[1], want_r)


def test_division_by_constants_and_by_a_variable_keeps_svods_definitions(gpu):
    """A constant divisor that is safe (3) still needs the remainder of a negative dividend taken from the
    quotient; -1 and 0 as constants, and a variable that may be either, need the safe divisor."""
    x = np.array([-2**31, -7, -3, -1, 0, 1, 5, 2**31 - 1], np.int32)
    k = KernelBuilder("by_constants")
    n = k.var("n", -4, 4, dtypes.int32)
    outs = [k.buffer(dtypes.int32, x.size) for _ in range(8)]
    xb = k.buffer(dtypes.int32, x.size)
    i = k.range(x.size)
    values = (xb[i] // 3, xb[i] % 3, xb[i] // -1, xb[i] % -1, xb[i] // 0, xb[i] % 0, xb[i] // n, xb[i] % n)
    for out, value in zip(outs, values, strict=True):
        k.store(out[i], value)
    for divisor in (-1, 0, 3):
        got = [np.zeros(x.size, np.int32) for _ in outs]
        svod.run(k.build(), [*got, x], device=gpu, n=divisor)
        want = [w for d in (3, -1, 0, divisor) for w in _truncated(x.astype(np.int64), np.full(x.size, d), 32, True)]
        for position, (g, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_array_equal(g, w, err_msg=f"output {position}, n={divisor}")


def test_float16_is_computed_or_refused_saying_why(gpu):
    """An adapter without WebGPU's shader-f16 (wgpu's OpenGL one) holds no float16: a half kernel is refused
    naming the missing feature, and ``svod devices`` says so; one with it sums halves exactly."""
    k = KernelBuilder("half_sum")
    out, x = k.buffer(dtypes.float16, 5), k.buffer(dtypes.float16, (5, 67))
    r, c = k.range(5), k.range(67, AxisKind.REDUCE)
    k.store(out[r], x[r, c].reduce(c))
    x_np = np.random.default_rng(3).integers(-8, 9, (5, 67)).astype(np.float16)
    out_np = np.zeros(5, np.float16)
    if dtypes.float16 in gpu.caps.element_dtypes:
        svod.run(k.build(), [out_np, x_np], device=gpu)
        np.testing.assert_array_equal(out_np, x_np.sum(axis=1))
        return
    refusal = re.escape("cannot hold float16, the dtype of buffer 0 (the adapter lacks WebGPU's shader-f16 feature)")
    with pytest.raises(GraphError, match=refusal) as raised:
        svod.run(k.build(), [out_np, x_np], device=gpu)
    assert (raised.value.kernel, raised.value.stage, raised.value.value) == ("half_sum", "render", "float16")
    assert "no float16: the adapter lacks WebGPU's shader-f16 feature" in gpu.description


def test_nan_is_seen_through_a_compiler_that_assumes_finite_floats(gpu):
    """lavapipe folds ``x != x`` to false; svod tests a NaN on its bits, so comparisons and MAX/MIN keep
    their definitions."""
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.5], np.float32)
    y = np.array([np.nan, 0.0, 1.0, np.nan, 2.0, -0.0], np.float32)
    k = KernelBuilder("nan")
    is_nan, bigger, smaller = k.buffer(dtypes.int32, 6), k.buffer(dtypes.float32, 6), k.buffer(dtypes.float32, 6)
    xb, yb = k.buffer(dtypes.float32, 6), k.buffer(dtypes.float32, 6)
    i = k.range(6)
    k.store(is_nan[i], xb[i].ne(xb[i]).where(1, 0, dtype=dtypes.int32))
    k.store(bigger[i], xb[i].maximum(yb[i]))
    k.store(smaller[i], xb[i].minimum(yb[i]))
    got = [np.zeros(6, np.int32), np.zeros(6, np.float32), np.zeros(6, np.float32)]
    svod.run(k.build(), [*got, x, y], device=gpu)
    np.testing.assert_array_equal(got[0], np.isnan(x).astype(np.int32))
    np.testing.assert_array_equal(got[1], np.fmax(x, y))
    np.testing.assert_array_equal(got[2], np.fmin(x, y))
    assert np.signbit(got[1][1]) == np.signbit(np.float32(0.0)) and np.signbit(got[2][5])


def test_atomic_histogram_and_float_scatter_add(gpu):
    n, bins = 100_000, 16
    values = np.random.default_rng(4).integers(0, bins, n).astype(np.int32)
    k = KernelBuilder("histogram")
    counts, vb = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.atomic_add(counts[vb[i]], 1)
    counts_np = np.zeros(bins, np.int32)
    svod.run(k.build(), [counts_np, values], device=gpu)
    np.testing.assert_array_equal(counts_np, np.bincount(values, minlength=bins))

    k = KernelBuilder("scatter")
    sums, ib, xb = k.buffer(dtypes.float32, bins), k.buffer(dtypes.int32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.atomic_add(sums[ib[i]], xb[i])
    ones = np.ones(n, np.float32)  # integers: every order of the float adds gives the same sums
    sums_np = np.zeros(bins, np.float32)
    svod.run(k.build(), [sums_np, values, ones], device=gpu)
    np.testing.assert_array_equal(sums_np, np.bincount(values, minlength=bins).astype(np.float32))


def test_a_gather_index_out_of_range_raises(gpu):
    k = KernelBuilder("gather")
    out, table, idx = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 10), k.buffer(dtypes.int32, 4)
    i = k.range(4)
    k.store(out[i], table[idx[i]])
    table_np = np.arange(10, dtype=np.float32)
    out_np = np.zeros(4, np.float32)
    svod.run(k.build(), [out_np, table_np, np.array([3, 0, 9, 1], np.int32)], device=gpu)
    np.testing.assert_array_equal(out_np, [3, 0, 9, 1])
    with pytest.raises(IndexOutOfBoundsError) as raised:
        svod.run(k.build(), [out_np, table_np, np.array([3, 0, 10, 1], np.int32)], device=gpu)
    assert raised.value.index == 10


@pytest.mark.parametrize("index_dtype", [dtypes.int32, dtypes.uint32])
def test_a_row_gather_whose_id_times_width_passes_32_bits_is_checked_not_wrapped(gpu, index_dtype):
    """``table[ids[r], c]`` computes ``ids[r] * 64 + c``: an id near 2**31 would wrap in 32 bits, so the id
    is clamped to where the index still lands outside the table, and the access is reported, not wrapped."""
    k = KernelBuilder("rows")
    out, table, ids = k.buffer(dtypes.float32, (3, 64)), k.buffer(dtypes.float32, (5, 64)), k.buffer(index_dtype, 3)
    r, c = k.range(3), k.range(64)
    k.store(out[r, c], table[ids[r], c])
    table_np = np.arange(5 * 64, dtype=np.float32).reshape(5, 64)
    out_np = np.zeros((3, 64), np.float32)
    svod.run(k.build(), [out_np, table_np, np.array([4, 0, 2], index_dtype.numpy)], device=gpu)
    np.testing.assert_array_equal(out_np, table_np[[4, 0, 2]])
    wrapping = (1 << 26) if index_dtype == dtypes.int32 else (1 << 32) - 1  # * 64 is 2**32, or -64 in int32
    out_np[:] = 0
    with pytest.raises(IndexOutOfBoundsError) as raised:
        svod.run(k.build(), [out_np, table_np, np.array([1, wrapping, 3], index_dtype.numpy)], device=gpu)
    assert raised.value.slot == 1 and not 0 <= raised.value.index < 5 * 64
    np.testing.assert_array_equal(out_np[[0, 2]], table_np[[1, 3]])
    assert (out_np[1] == 0).all()


def test_unsigned_negation_wraps(gpu):
    k = KernelBuilder("negate")
    out, x = k.buffer(dtypes.uint32, 4), k.buffer(dtypes.uint32, 4)
    i = k.range(4)
    k.store(out[i], -x[i])
    x_np, out_np = np.array([0, 1, 7, 1 << 31], np.uint32), np.zeros(4, np.uint32)
    svod.run(k.build(), [out_np, x_np], device=gpu)
    np.testing.assert_array_equal(out_np, (0 - x_np.astype(np.int64)) % (1 << 32))


def test_a_uint32_variable_takes_every_value_of_its_32_bits(gpu):
    """The variables travel as int32 words; a uint32's above 2**31 keeps its bits (the shader reads them as u32)."""
    k = KernelBuilder("unsigned_variable")
    v, w = k.var("v", 0, (1 << 32) - 1, dtypes.uint32), k.var("w", -(1 << 31), (1 << 31) - 1, dtypes.int32)
    out, signed = k.buffer(dtypes.uint32, 1), k.buffer(dtypes.int32, 1)
    k.store(out[0], v + 1)
    k.store(signed[0], w - 1)
    for value in (0, 5, (1 << 31) - 1, 1 << 31, 0xFFFFFFF0):
        out_np, signed_np = np.zeros(1, np.uint32), np.zeros(1, np.int32)
        svod.run(k.build(), [out_np, signed_np], device=gpu, v=value, w=-(1 << 31) + 1)
        assert int(out_np[0]) == (value + 1) % (1 << 32) and int(signed_np[0]) == -(1 << 31)


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.int64, dtypes.int8, dtypes.uint16, dtypes.bool])
def test_buffers_wgsl_cannot_hold_are_refused_by_name(gpu, dtype):
    assert refuses(gpu, dtype)


def test_indices_that_may_pass_32_bits_are_refused(gpu):
    k = KernelBuilder("far")
    n, start = k.var("n", 1, 1 << 20), k.var("start", 0, 1 << 40)
    out = k.buffer(dtypes.float32, n + start)
    i = k.range(n)
    k.store(out[i + start], 1.0)
    with pytest.raises(GraphError, match="32 bits") as raised:
        svod.compile(k.build(), device=gpu)
    assert raised.value.kernel == "far"


def test_launches_that_need_too_many_groups_are_refused_by_name(gpu):
    """Three launch dimensions in use leave none to spread up to 2**26 groups over: the kernel compiles, a run
    within the limit computes, and one past it is refused at its launch, by the kernel's name and the count
    (lowering once refused the kernel, for sizes no run had asked for)."""
    k = KernelBuilder("wide")
    planes = k.var("planes", 1, 1 << 26)
    out = k.buffer(dtypes.float32, (planes, 4))
    p, r, c = k.range(planes), k.range(2), k.range(2)
    k.store(out[p, r * 2 + c], p.cast(dtypes.float32))
    ast = k.build()
    for count in (3, 65_535):
        got = np.full((count, 4), -1.0, np.float32)
        svod.run(ast, [got], device=gpu, planes=count)
        np.testing.assert_array_equal(got, np.repeat(np.arange(count, dtype=np.float32)[:, None], 4, axis=1))
    with pytest.raises(LaunchError, match="needs 65536 work groups along dimension 2") as raised:
        svod.run(ast, [np.zeros((65_536, 4), np.float32)], device=gpu, planes=65_536)
    assert raised.value.kernel == "wide"


def test_the_source_is_wgsl_with_one_binding_per_buffer(gpu):
    source = svod.compile(_saxpy(), device=gpu).program_uop.src[3].arg
    assert "@group(0) @binding(0) var<storage, read_write> data0: array<f32>;" in source
    assert "var<uniform> svod_args" in source and "@compute @workgroup_size(64, 1, 1)" in source


def test_negative_literals_after_a_minus_are_parenthesised(gpu):
    """`x - -1.5` spelled `x--1.5` is a WGSL parse error (`--` is a decrement token). The sign of a zero is
    the device compiler's on WebGPU (lavapipe folds `x - -0.0` to `x`), so zeros compare by value."""
    k = KernelBuilder("minus_negative")
    n = 5
    out, x = k.buffer(dtypes.float32, (2, n)), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[0, i], x[i] - (-1.5))
    k.store(out[1, i], (x[i] - (-0.0)) * -2.0)
    x_np = np.array([0.0, -0.0, 1.0, -3.25, 1e-40], np.float32)
    out_np = np.zeros((2, n), np.float32)
    svod.run(k.build(), [out_np, x_np], device=gpu)
    np.testing.assert_array_equal(out_np[0], x_np + np.float32(1.5))
    np.testing.assert_array_equal(out_np[1], (x_np - np.float32(-0.0)) * np.float32(-2.0))


def test_llvmpipe_refuses_loops_it_would_cut_short(gpu):
    """A product of a row by each column of a sequential loop, each column adding the one before (so the
    loop stays sequential): 300 columns of 301 terms in one work item, 300 x 302 turns, which llvmpipe used
    to stop at its limit, leaving the last columns 0 or wrong (301 terms is no multiple of the 8 partials a
    split needs). A device without the limit computes it."""
    k = KernelBuilder("heavy")
    out, x, w = (k.buffer(dtypes.float32, shape) for shape in ((17, 300), (17, 301), (301, 300)))
    r, c, j = k.range(17), k.range(300, AxisKind.LOOP), k.range(301, AxisKind.REDUCE)
    k.store(out[r, c], (x[r, j] * w[j, c]).reduce(j) + (c < 1).where(0.0, out[r, c - 1]))
    rng = np.random.default_rng(3)
    x_np, w_np = rng.random((17, 301)).astype(np.float32), rng.random((301, 300)).astype(np.float32)
    got = np.zeros((17, 300), np.float32)
    if gpu.caps.max_loop_turns is None:
        svod.run(k.build(), [got, x_np, w_np], device=gpu)
        np.testing.assert_allclose(got, np.cumsum(x_np @ w_np, axis=1), rtol=1e-4)
        return
    with pytest.raises(GraphError, match=f"stops them after {gpu.caps.max_loop_turns}") as raised:
        svod.run(k.build(), [got, x_np, w_np], device=gpu)
    assert raised.value.kernel == "heavy" and raised.value.value > gpu.caps.max_loop_turns
    assert not got.any()


def test_a_rows_reduction_stays_outside_the_loop_over_its_columns(gpu):
    """17 rows on a launch of 16-item groups put a gate on each row; the row's sum of squares is computed
    once inside it, before the loop over the row's 300 columns, not once per column (300 x 301 turns, past
    llvmpipe's limit, and 300 times the work on every device)."""
    k = KernelBuilder("scaled")
    out, x = k.buffer(dtypes.float32, (17, 300)), k.buffer(dtypes.float32, (17, 300))
    r, c, j = k.range(17), k.range(300, AxisKind.LOOP), k.range(300, AxisKind.REDUCE)
    k.store(out[r, c], x[r, c] / (x[r, j] * x[r, j]).reduce(j))
    values = np.random.default_rng(3).random((17, 300)).astype(np.float32) + 0.5
    got = np.zeros((17, 300), np.float32)
    svod.run(k.build(), [got, values], device=gpu)
    np.testing.assert_allclose(got, values / (values * values).sum(axis=1, keepdims=True), rtol=1e-4)


def test_llvmpipe_checks_symbolic_loops_at_each_launch(gpu):
    """A row's running sums over ``n`` in one work item (a sequential loop no group can share): run where the
    loop fits, refused before it runs where it would not (on llvmpipe, past 65535 turns); a device without the
    limit runs every length."""
    limit = gpu.caps.max_loop_turns or 65535
    k = KernelBuilder("prefix_sums")
    n = k.var("n", 1, 1 << 17)
    out, x = k.buffer(dtypes.float32, (3, n)), k.buffer(dtypes.float32, (3, n))
    r, j = k.range(3), k.range(n, AxisKind.LOOP)
    k.store(out[r, j], (j > 0).where(out[r, (j - 1).maximum(0)], 0.0) + x[r, j])
    ast = k.build()
    for length in (1, limit - 1):
        values = np.random.default_rng(length).standard_normal((3, length)).astype(np.float32)
        got = np.zeros((3, length), np.float32)
        svod.run(ast, [got, values], device=gpu, n=length)
        np.testing.assert_allclose(got, values.cumsum(axis=1), rtol=1e-4, atol=1e-3)
    plan = svod.ExecutionPlan(device=gpu)
    ins = plan.add_buffer(svod.Buffer.from_numpy(np.ones(3 << 17, np.float32), device=gpu))
    outs = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(3 << 17, np.float32), device=gpu))
    plan.add_kernel(ast, [outs, ins])
    plan.execute(n=10)
    np.testing.assert_array_equal(plan.buffers[outs].numpy()[:30], np.tile(np.arange(1, 11, dtype=np.float32), 3))
    untouched = np.full((3, limit), -7.0, np.float32)
    if gpu.caps.max_loop_turns is None:
        svod.run(ast, [untouched, np.ones((3, limit), np.float32)], device=gpu, n=limit)
        np.testing.assert_array_equal(untouched[:, -1], np.full(3, float(limit), np.float32))
        return
    with pytest.raises(LaunchError, match=f"come round up to {limit + 1} times") as raised:
        svod.run(ast, [untouched, np.ones((3, limit), np.float32)], device=gpu, n=limit)
    assert (raised.value.kernel, raised.value.value) == ("prefix_sums", limit + 1)
    np.testing.assert_array_equal(untouched, np.full((3, limit), -7.0, np.float32))
    with pytest.raises(LaunchError, match=f"come round up to {limit + 1} times"):
        plan.execute(n=limit)


def test_llvmpipe_splits_long_rows_to_fit_its_loops(gpu):
    """Rows of 100,000 (a loop of 100,000 turns per work item; on llvmpipe 8 partials sharing a loop of
    12,500), right on any adapter."""
    k = KernelBuilder("long_rows")
    out, x = k.buffer(dtypes.float32, 3), k.buffer(dtypes.float32, (3, 100000))
    r, j = k.range(3), k.range(100000, AxisKind.REDUCE)
    k.store(out[r], x[r, j].reduce(j, op=Ops.MAX))
    values = np.random.default_rng(5).standard_normal((3, 100000)).astype(np.float32)
    values[1, 99999] = 50.0
    got = np.zeros(3, np.float32)
    svod.run(k.build(), [got, values], device=gpu)
    np.testing.assert_array_equal(got, values.max(axis=1))
