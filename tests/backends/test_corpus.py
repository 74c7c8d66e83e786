"""The kernel corpus: each kernel on every device, compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, dtypes
from tests.helpers import refuses


def test_elementwise_symbolic_size_leaves_the_tail(device):
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 20)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    ast = k.build()
    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 1000, 4099):
        x_np = rng.standard_normal(5000).astype(np.float32)
        out_np = np.full(5000, -7.0, dtype=np.float32)
        svod.run(ast, [out_np, x_np], device=device, n=size)
        np.testing.assert_array_equal(out_np[:size], x_np[:size] * np.float32(2) + np.float32(1))
        assert (out_np[size:] == -7.0).all()


def _row_reduce(op: Ops, rows: int, cols: int):
    k = KernelBuilder(f"row_{op.name.lower()}")
    out, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, rows * cols)
    r = k.range(rows)
    c = k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r * cols + c].reduce(c, op=op))
    return k.build()


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 7), (17, 256), (64, 1000)])
@pytest.mark.parametrize(("op", "ref"), [(Ops.ADD, np.sum), (Ops.MAX, np.max)])
def test_row_reductions(device, rows, cols, op, ref):
    x = np.random.default_rng(1).standard_normal(rows * cols).astype(np.float32)
    out = np.zeros(rows, dtype=np.float32)
    svod.run(_row_reduce(op, rows, cols), [out, x], device=device)
    np.testing.assert_allclose(out, ref(x.reshape(rows, cols), axis=1), rtol=1e-5, atol=1e-6 * cols)


def _matmul(m: int, n: int, kk: int):
    b = KernelBuilder(f"matmul_{m}x{n}x{kk}")
    c, a, bm = b.buffer(dtypes.float32, m * n), b.buffer(dtypes.float32, m * kk), b.buffer(dtypes.float32, kk * n)
    i, j = b.range(m), b.range(n)
    r = b.range(kk, AxisKind.REDUCE)
    b.store(c[i * n + j], (a[i * kk + r] * bm[r * n + j]).reduce(r))
    return b.build()


@pytest.mark.parametrize(("m", "n", "kk"), [(1, 1, 1), (17, 13, 19), (32, 64, 48)])
def test_matmul(device, m, n, kk):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
    c = np.zeros(m * n, dtype=np.float32)
    svod.run(_matmul(m, n, kk), [c, a.reshape(-1), b.reshape(-1)], device=device)
    np.testing.assert_allclose(c.reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)


def test_where_and_compare(device):
    if refuses(device, dtypes.bool):
        return
    k = KernelBuilder("clip_neg")
    out, x, y = (k.buffer(dtypes.float32, 37) for _ in range(3))
    flag = k.buffer(dtypes.bool, 37)
    i = k.range(37)
    k.store(out[i], (x[i] < y[i]).where(x[i], y[i] * -1.0))
    k.store(flag[i], x[i].ne(y[i]))
    rng = np.random.default_rng(3)
    x_np, y_np = rng.standard_normal(37).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    y_np[5] = x_np[5]
    out_np, flag_np = np.zeros(37, np.float32), np.zeros(37, np.bool_)
    svod.run(k.build(), [out_np, x_np, y_np, flag_np], device=device)
    np.testing.assert_array_equal(out_np, np.where(x_np < y_np, x_np, -y_np))
    np.testing.assert_array_equal(flag_np, x_np != y_np)


def test_int32_division_truncates_toward_zero(device):
    k = KernelBuilder("divmod")
    q, r, a, b = (k.buffer(dtypes.int32, 64) for _ in range(4))
    i = k.range(64)
    k.store(q[i], a[i] // b[i])
    k.store(r[i], a[i] % b[i])
    a_np = np.random.default_rng(4).integers(-1000, 1000, 64).astype(np.int32)
    b_np = np.random.default_rng(5).integers(1, 30, 64).astype(np.int32) * np.where(np.arange(64) % 2, 1, -1)
    b_np = b_np.astype(np.int32)
    q_np, r_np = np.zeros(64, np.int32), np.zeros(64, np.int32)
    svod.run(k.build(), [q_np, r_np, a_np, b_np], device=device)
    np.testing.assert_array_equal(q_np, np.trunc(a_np / b_np).astype(np.int32))
    np.testing.assert_array_equal(r_np, np.fmod(a_np, b_np))


def test_integer_division_edge_cases_never_trap(device):
    k = KernelBuilder("divzero")
    q, r, a, b = (k.buffer(dtypes.int32, 4) for _ in range(4))
    i = k.range(4)
    k.store(q[i], a[i] // b[i])
    k.store(r[i], a[i] % b[i])
    imin = np.iinfo(np.int32).min
    a_np, b_np = np.array([7, imin, -9, 5], np.int32), np.array([0, -1, 0, 2], np.int32)
    q_np, r_np = np.zeros(4, np.int32), np.zeros(4, np.int32)
    svod.run(k.build(), [q_np, r_np, a_np, b_np], device=device)
    np.testing.assert_array_equal(q_np, [7, imin, -9, 2])
    np.testing.assert_array_equal(r_np, [0, 0, 0, 1])


def test_casts_and_uint8_wraparound(device):
    if refuses(device, dtypes.uint8):
        return
    k = KernelBuilder("casts")
    as_int, x = k.buffer(dtypes.int32, 9), k.buffer(dtypes.float32, 9)
    wrapped, small = k.buffer(dtypes.uint8, 9), k.buffer(dtypes.uint8, 9)
    i = k.range(9)
    k.store(as_int[i], x[i].cast(dtypes.int32))
    k.store(wrapped[i], small[i] + 200)
    x_np = np.array([-2.7, -1.5, -0.2, 0.0, 0.4, 1.5, 2.9, 1000.99, -77.5], np.float32)
    small_np = np.array([0, 1, 55, 56, 57, 100, 200, 255, 128], np.uint8)
    as_int_np, wrapped_np = np.zeros(9, np.int32), np.zeros(9, np.uint8)
    svod.run(k.build(), [as_int_np, x_np, wrapped_np, small_np], device=device)
    np.testing.assert_array_equal(as_int_np, np.trunc(x_np).astype(np.int32))
    np.testing.assert_array_equal(wrapped_np, (small_np.astype(np.int32) + 200) % 256)


@pytest.mark.parametrize(("name", "build", "ref", "domain"), [
    ("exp2", lambda v: v.exp2(), np.exp2, (-20, 20)),
    ("log2", lambda v: v.log2(), np.log2, (1e-3, 1e4)),
    ("sin", lambda v: v.sin(), np.sin, (-30, 30)),
    ("sqrt", lambda v: v.sqrt(), np.sqrt, (0, 1e6)),
    ("reciprocal", lambda v: v.reciprocal(), np.reciprocal, (0.5, 1e3)),
])
def test_transcendentals_float32_within_ulps(device, name, build, ref, domain):
    k = KernelBuilder(name)
    out, x = k.buffer(dtypes.float32, 257), k.buffer(dtypes.float32, 257)
    i = k.range(257)
    k.store(out[i], build(x[i]))
    x_np = np.random.default_rng(6).uniform(*domain, 257).astype(np.float32)
    out_np = np.zeros(257, np.float32)
    svod.run(k.build(), [out_np, x_np], device=device)
    expected = ref(x_np.astype(np.float64)).astype(np.float32)
    ulps = np.abs(out_np.view(np.int32).astype(np.int64) - expected.view(np.int32).astype(np.int64))
    assert ulps.max() <= 4, f"{name}: {ulps.max()} ulps"


def test_float64(device):
    if refuses(device, dtypes.float64):
        return
    k = KernelBuilder("f64")
    out, x, y = (k.buffer(dtypes.float64, 100) for _ in range(3))
    i = k.range(100)
    k.store(out[i], x[i] * y[i] + (x[i] / 3.0).sqrt())
    rng = np.random.default_rng(7)
    x_np, y_np = rng.uniform(0, 10, 100), rng.standard_normal(100)
    out_np = np.zeros(100)
    svod.run(k.build(), [out_np, x_np, y_np], device=device)
    np.testing.assert_allclose(out_np, x_np * y_np + np.sqrt(x_np / 3.0), rtol=1e-15)


def test_loop_range_accumulates_through_memory(device):
    k = KernelBuilder("prefix_into")
    acc, x = k.buffer(dtypes.int32, 5), k.buffer(dtypes.int32, 5 * 11)
    i = k.range(5)
    j = k.range(11, AxisKind.LOOP)
    k.store(acc[i], acc[i] + x[i * 11 + j])
    x_np = np.arange(55, dtype=np.int32)
    acc_np = np.full(5, 100, np.int32)
    svod.run(k.build(), [acc_np, x_np], device=device)
    np.testing.assert_array_equal(acc_np, 100 + x_np.reshape(5, 11).sum(axis=1))


def test_kernels_write_through_views(device):
    k = KernelBuilder("fill")
    n = k.var("n", 1, 100)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] + 0.5)
    base = svod.Buffer.from_numpy(np.zeros(20, np.float32), device)
    src = svod.Buffer.from_numpy(np.arange(20, dtype=np.float32), device)
    svod.run(k.build(), [base.view(5, 10), src.view(10, 10)], device=device, n=10)
    expected = np.zeros(20, np.float32)
    expected[5:15] = np.arange(10, 20) + 0.5
    np.testing.assert_array_equal(base.numpy(), expected)


def test_float16_elementwise(device):
    """Native half arithmetic where the device has it; elsewhere (a C compiler without ``_Float16``, OpenCL
    without cl_khr_fp16, CUDA without cuda_fp16.h) halves stored as bits, computed in float32 and rounded
    back per op: the same results."""
    if refuses(device, dtypes.float16):  # a WebGPU adapter without shader-f16
        return
    k = KernelBuilder("half")
    out, x = k.buffer(dtypes.float16, 33), k.buffer(dtypes.float16, 33)
    i = k.range(33)
    k.store(out[i], x[i] * x[i] + 0.5)
    x_np = np.random.default_rng(8).uniform(-4, 4, 33).astype(np.float16)
    out_np = np.zeros(33, np.float16)
    svod.run(k.build(), [out_np, x_np], device=device)
    np.testing.assert_array_equal(out_np, x_np * x_np + np.float16(0.5))


def half_row_reductions(name: str, op: Ops, rows: int, cols: int) -> svod.UOp:
    """``out[r] = op over c of x[r, c]``, both float16, as a kernel called ``name``."""
    k = KernelBuilder(name)
    out, x = k.buffer(dtypes.float16, rows), k.buffer(dtypes.float16, (rows, cols))
    r, c = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r, c].reduce(c, op=op))
    return k.build()


@pytest.mark.parametrize(("op", "ref"), [(Ops.ADD, np.sum), (Ops.MAX, np.max), (Ops.MIN, np.min)])
def test_float16_reductions(device, op, ref):
    """A half accumulator is updated like any half op (in float32 where the device emulates halves).
    Small integers keep every partial sum exact, so any summation order gives numpy's answer."""
    if refuses(device, dtypes.float16):
        return
    rows, cols = 5, 67
    x_np = np.random.default_rng(3).integers(-8, 9, (rows, cols)).astype(np.float16)
    x_np[0, 3] = -0.0 if op is Ops.MAX else x_np[0, 3]
    out_np = np.zeros(rows, np.float16)
    svod.run(half_row_reductions(f"half_{op.name.lower()}", op, rows, cols), [out_np, x_np], device=device)
    np.testing.assert_array_equal(out_np, ref(x_np, axis=1))


HALF_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -6e-8, 1e-5, 65504, -65504, 65519, 65520,
                          2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -24 * 1.5, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 0.1, 7.0])


def test_float16_conversions_round_to_nearest_even(device):
    """float32 and float64 to float16 and back, at ties, subnormals, the overflow edge and specials."""
    k = KernelBuilder("half_round_trip")
    n = len(HALF_SPECIALS)
    narrow32, narrow64, wide, sums = (k.buffer(d, n) for d in (dtypes.float16, dtypes.float16, dtypes.float32,
                                                                 dtypes.float16))
    x32, x64, h = k.buffer(dtypes.float32, n), k.buffer(dtypes.float64, n), k.buffer(dtypes.float16, n)
    i = k.range(n)
    k.store(narrow32[i], x32[i].cast(dtypes.float16))
    k.store(narrow64[i], x64[i].cast(dtypes.float16))
    k.store(wide[i], h[i].cast(dtypes.float32))
    k.store(sums[i], h[i] + h[i])
    if refuses(device, dtypes.float64):
        return
    results = [np.zeros(n, np.float16), np.zeros(n, np.float16), np.zeros(n, np.float32), np.zeros(n, np.float16)]
    with np.errstate(over="ignore"):
        values32, values64 = HALF_SPECIALS.astype(np.float32), HALF_SPECIALS.astype(np.float64)
        halves = HALF_SPECIALS.astype(np.float16)
        svod.run(k.build(), [*results, values32, values64, halves], device=device)
        expected = [values32.astype(np.float16), values64.astype(np.float16), halves.astype(np.float32),
                    halves + halves]
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_empty_sizes_run_nothing(device):
    k = KernelBuilder("maybe_empty")
    n = k.var("n", 0, 100)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    total = k.buffer(dtypes.float32, 1)
    i = k.range(n)
    r = k.range(n, AxisKind.REDUCE)
    k.store(out[i], x[i] + 1.0)
    k.store(total[0], x[r].reduce(r))
    empty_out, empty_x, total_np = np.zeros(0, np.float32), np.zeros(0, np.float32), np.full(1, 5.0, np.float32)
    svod.run(k.build(), [empty_out, empty_x, total_np], device=device, n=0)
    assert total_np[0] == 0.0
    some = np.arange(4, dtype=np.float32)
    out_np = np.zeros(4, np.float32)
    svod.run(k.build(), [out_np, some, total_np], device=device, n=4)
    np.testing.assert_array_equal(out_np, some + 1)
    assert total_np[0] == 6.0


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_compiler_errors_carry_the_log_and_the_source(compiler):
    renderer, backend = svod.compiler_pair("CPU", compiler)
    k = KernelBuilder("broken")
    out = k.buffer(dtypes.int32, 4)
    i = k.range(4)
    k.store(out[i], i.cast(dtypes.int32))
    spec = renderer.render(k.build())
    spec.src = spec.src.replace("data0", "data_missing", 1)
    with pytest.raises(svod.errors.CompileError) as info:
        backend.compile(spec)
    assert info.value.kernel == "broken" and info.value.stage == "compile"
    assert "data_missing" in info.value.source and info.value.log.strip()
    assert "--- source ---" in str(info.value)


def _attention_in_one_kernel() -> svod.UOp:
    """Attention with three reductions over the keys inside a loop over the output's columns, sizes symbolic,
    built by hand in one kernel: CL:0 and WebGPU refused it (a reduction nested in another, computed before the
    masked tile's gates, outside the loop it depends on)."""
    k = KernelBuilder("attention_one_kernel")
    rows, keys, width = k.var("L", 1, 1024), k.var("S", 1, 1024), k.var("D", 1, 256)
    out, q = k.buffer(dtypes.float32, (rows, width)), k.buffer(dtypes.float32, (rows, width))
    key, value = k.buffer(dtypes.float32, (keys, width)), k.buffer(dtypes.float32, (keys, width))
    i, d = k.range(rows), k.range(width, AxisKind.LOOP)

    def score() -> tuple[svod.UOp, svod.UOp]:
        s, e = k.range(keys, AxisKind.REDUCE), k.range(width, AxisKind.REDUCE)
        return s, (q[i, e] * key[s, e]).reduce(e)

    s1, first = score()
    top = first.reduce(s1, op=Ops.MAX)
    s2, second = score()
    total = (second - top).exp().reduce(s2)
    s3, third = score()
    k.store(out[i, d], ((third - top).exp() * value[s3, d]).reduce(s3) / total)
    return k.build()


@pytest.mark.parametrize(("rows", "keys", "width"), [(1, 1, 1), (64, 48, 16), (37, 5, 3)])
def test_attention_in_one_kernel_with_symbolic_sizes(device, rows, keys, width):
    rng = np.random.default_rng(11)
    q, key, value = (rng.random((n, width), dtype=np.float32) for n in (rows, keys, keys))
    scores = q @ key.T
    p = np.exp(scores - scores.max(1, keepdims=True))
    out = np.zeros((rows, width), np.float32)
    svod.run(_attention_in_one_kernel(), [out, q, key, value], device=device, L=rows, S=keys, D=width)
    np.testing.assert_allclose(out, (p / p.sum(1, keepdims=True)) @ value, rtol=1e-4, atol=1e-6)


def test_a_minimum_of_sums_with_symbolic_sizes(device):
    k = KernelBuilder("min_of_sums")
    n, m = k.var("n", 1, 512), k.var("m", 1, 512)
    out, x, y = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, (n, m)), k.buffer(dtypes.float32, (n, m))
    i = k.range(n)
    s, e = k.range(n, AxisKind.REDUCE), k.range(m, AxisKind.REDUCE)
    k.store(out[i], (x[i, e] * y[s, e]).reduce(e).reduce(s, op=Ops.MIN))
    rng = np.random.default_rng(12)
    xs, ys = rng.random((40, 9), dtype=np.float32), rng.random((40, 9), dtype=np.float32)
    got = np.zeros(40, np.float32)
    svod.run(k.build(), [got, xs, ys], device=device, n=40, m=9)
    np.testing.assert_allclose(got, (xs @ ys.T).min(1), rtol=1e-5)
