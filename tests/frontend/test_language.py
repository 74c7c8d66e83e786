"""What kernel writers write, on every backend: gathers and scatters through index buffers, guarded
padded convolutions, shaped buffers, runtime scalars."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.errors import GraphError, IndexOutOfBoundsError, VariableError
from svod.runtime import KernelCache
from tests.helpers import refuses

INDEX_DTYPES = [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint32]


def _gather(index_dtype):
    k = KernelBuilder("embedding")
    rows = k.var("rows", 1, 1000)
    out, table, idx = k.buffer(dtypes.float32, (rows, 4)), k.buffer(dtypes.float32, (7, 4)), k.buffer(index_dtype, rows)
    r, c = k.range(rows), k.range(4)
    k.store(out[r, c], table[idx[r], c])
    return k.build()


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: d.name)
def test_gather_through_an_index_buffer(device, index_dtype):
    if refuses(device, index_dtype):
        return
    table = np.arange(28, dtype=np.float32).reshape(7, 4)
    idx = np.array([6, 0, 3, 3, 1], index_dtype.numpy)
    out = np.zeros((5, 4), np.float32)
    svod.run(_gather(index_dtype), [out, table, idx], device=device, rows=5)
    np.testing.assert_array_equal(out, table[idx])


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: d.name)
def test_scatter_add_through_an_index_buffer(device, index_dtype):
    if refuses(device, index_dtype):
        return
    k = KernelBuilder("scatter")
    counts, bins, weights = k.buffer(dtypes.int32, 6), k.buffer(index_dtype, 9), k.buffer(dtypes.int32, 9)
    i = k.range(9)
    k.atomic_add(counts[bins[i]], weights[i])
    bins_np = np.array([0, 5, 5, 2, 0, 5, 1, 3, 2], index_dtype.numpy)
    weights_np = np.arange(1, 10, dtype=np.int32)
    got = np.zeros(6, np.int32)
    svod.run(k.build(), [got, bins_np, weights_np], device=device)
    np.testing.assert_array_equal(got, np.bincount(bins_np.astype(np.int64), weights_np, minlength=6).astype(np.int32))


@pytest.mark.parametrize("bad", [-1, 7, 100])
def test_an_index_out_of_range_raises_and_writes_nothing_outside(device, bad):
    """Canaries: the gather's output and table are views inside bands that must stay untouched."""
    base_out = svod.Buffer.from_numpy(np.full(5 * 4 + 16, -7.0, np.float32), device)
    base_table = svod.Buffer.from_numpy(np.concatenate([np.full(8, 99.0, np.float32),
                                                        np.arange(28, dtype=np.float32),
                                                        np.full(8, 99.0, np.float32)]), device)
    idx = np.array([1, bad, 2, 0, 6], np.int32)
    with pytest.raises(IndexOutOfBoundsError) as raised:
        svod.run(_gather(dtypes.int32), [base_out.view(8, 20), base_table.view(8, 28), idx], device=device, rows=5)
    assert "embedding" in str(raised.value) and "28" in str(raised.value)
    result = base_out.numpy()
    assert (result[:8] == -7.0).all() and (result[28:] == -7.0).all()
    table = np.arange(28, dtype=np.float32).reshape(7, 4)
    np.testing.assert_array_equal(result[8:28].reshape(5, 4)[[0, 2, 3, 4]], table[[1, 2, 0, 6]])


def test_a_guarded_padded_conv2d_matches_numpy(device):
    n, c_in, c_out, h, w = 1, 3, 2, 7, 9
    k = KernelBuilder("conv2d")
    out = k.buffer(dtypes.float32, (n, c_out, h, w))
    x = k.buffer(dtypes.float32, (n, c_in, h, w))
    weight = k.buffer(dtypes.float32, (c_out, c_in, 3, 3))
    b, o, y, xx = k.range(n), k.range(c_out), k.range(h), k.range(w)
    ci, ky, kx = (k.range(s, AxisKind.REDUCE) for s in (c_in, 3, 3))
    iy, ix = y + ky - 1, xx + kx - 1
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    tap = inside.where(x[b, ci, iy, ix], 0.0) * weight[o, ci, ky, kx]
    k.store(out[b, o, y, xx], tap.reduce(ci, ky, kx))
    rng = np.random.default_rng(5)
    x_np = rng.standard_normal((n, c_in, h, w)).astype(np.float32)
    w_np = rng.standard_normal((c_out, c_in, 3, 3)).astype(np.float32)
    got = np.zeros((n, c_out, h, w), np.float32)
    svod.run(k.build(), [got, x_np, w_np], device=device)
    padded = np.pad(x_np.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((n, c_out, h, w))
    for dy in range(3):
        for dx in range(3):
            want += np.einsum("bchw,oc->bohw", padded[:, :, dy:dy + h, dx:dx + w], w_np[:, :, dy, dx])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_shaped_buffers_with_symbolic_dims(device):
    k = KernelBuilder("transpose")
    rows, cols = k.var("rows", 1, 64), k.var("cols", 1, 64)
    out, x = k.buffer(dtypes.int32, (cols, rows)), k.buffer(dtypes.int32, (rows, cols))
    assert x.shape == (rows, cols) and out.dtype == dtypes.int32.ptr(-1)
    r, c = k.range(rows), k.range(cols)
    k.store(out[c, r], x[r, c] * 2)
    for shape in [(1, 1), (3, 5), (17, 2)]:
        x_np = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
        got = np.zeros(shape[::-1], np.int32)
        svod.run(k.build(), [got, x_np], device=device, rows=shape[0], cols=shape[1])
        np.testing.assert_array_equal(got, x_np.T * 2)
    with pytest.raises(GraphError, match="takes 2 indices"):
        x[r]


def test_a_runtime_scalar_changes_without_recompiling(device, tmp_path):
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 16)
    out, x, y = (k.buffer(dtypes.float32, n) for _ in range(3))
    alpha = k.scalar(dtypes.float32, "alpha")
    i = k.range(n)
    k.store(out[i], alpha * x[i] + y[i])
    ast = k.build()
    cache = KernelCache()
    kernel = cache.get(ast, svod.get_device(device))
    x_np, y_np = np.linspace(-2, 2, 11, dtype=np.float32), np.ones(11, np.float32)
    for value in [2.5, -1.0, 0.0, 1e-3, np.float32(3.25)]:
        result = svod.Buffer.from_numpy(np.zeros(11, np.float32), device)
        kernel([result, svod.Buffer.from_numpy(x_np, device), svod.Buffer.from_numpy(y_np, device)],
               {"n": 11, "alpha": value})
        np.testing.assert_array_equal(result.numpy(), np.float32(value) * x_np + y_np)
        cache.get(ast, svod.get_device(device))
    assert cache.stats.compiles == 1


def test_runtime_scalars_in_plans_and_of_integer_dtypes():
    k = KernelBuilder("shift_scale")
    out, x = k.buffer(dtypes.float64, 4), k.buffer(dtypes.float64, 4)
    scale, offset = k.scalar(dtypes.float64, "scale"), k.scalar(dtypes.uint32, "offset")
    i = k.range(4)
    k.store(out[i], x[i] * scale + offset.cast(dtypes.float64))
    result, source = svod.Buffer("CPU", dtypes.float64, 4), svod.Buffer.from_numpy(np.arange(4, dtype=np.float64))
    plan = svod.ExecutionPlan("CPU")
    plan.add_kernel(k.build(), [plan.add_buffer(result), plan.add_buffer(source)])
    plan.execute(scale=0.5, offset=4_000_000_000)
    np.testing.assert_array_equal(result.numpy(), np.arange(4) * 0.5 + 4e9)
    with pytest.raises(VariableError, match="does not fit uint32"):
        plan.execute(scale=1.0, offset=-1)
    with pytest.raises(VariableError, match="must be a number"):
        plan.execute(scale="fast", offset=1)
    with pytest.raises(GraphError, match="bool scalar"):
        KernelBuilder("flag").scalar(dtypes.bool, "flag")


def test_errors_while_building_name_the_kernel():
    k = KernelBuilder("mixed")
    out, x = k.buffer(dtypes.int32, 4), k.buffer(dtypes.float32, (2, 2))
    i = k.range(4)
    with pytest.raises(GraphError, match=r"kernel 'mixed'.*cast first"):
        k.store(out[i], x[i // 2, i % 2])
    with pytest.raises(GraphError, match=r"kernel 'mixed'.*takes 2 indices"):
        x[i]
    with pytest.raises(GraphError, match=r"kernel 'mixed'.*a kernel needs at least one store"):
        k.build()


GLOBAL_TABLE = np.arange(3.0)


@svod.kernel
def reads_a_global_array(out):
    for i in svod.prange(out.shape[0]):
        out[i] = GLOBAL_TABLE[i]


def test_a_global_array_is_refused_by_name_and_line():
    """A global that is neither a number nor svod's is refused as such, whatever its ``==`` returns (an array's
    is elementwise)."""
    out = np.zeros(3)
    with pytest.raises(svod.errors.KernelSyntaxError, match=r"test_language.py:\d+: GLOBAL_TABLE is ndarray"):
        reads_a_global_array(out)
    assert np.array_equal(out, np.zeros(3))


SCALE = np.float32(100.0)
WIDE = np.int64(2**40)


@svod.kernel
def scales_by_a_numpy_global(x, out):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * SCALE / SCALE


@svod.kernel
def offsets_by_a_numpy_global(x, out):
    for i in svod.prange(x.shape[0]):
        out[i] = (x[i] + WIDE) // 2**20


def test_a_numpy_global_computes_in_its_own_dtype(device):
    """A NumPy scalar global is typed as NumPy types it, not read as a weak Python number: float16 times a
    float32 scalar is float32 (1000 * 100 overflows float16 but not float32), int32 plus an int64 scalar int64."""
    x = np.array([1000.0, -0.0, 65504.0], dtype=np.float16)
    if refuses(device, svod.dtypes.float16):
        return
    out = np.zeros(3, np.float16)
    scales_by_a_numpy_global(x, out, device=device)
    want = np.array([v * SCALE / SCALE for v in x], dtype=np.float16)
    assert np.array_equal(out, want) and np.array_equal(np.signbit(out), np.signbit(want))
    ints = np.array([0, -1, 2**31 - 1, -2**31], dtype=np.int32)
    wide_out = np.zeros(4, np.int64)
    if refuses(device, svod.dtypes.int64):
        with pytest.raises(svod.errors.SvodError, match="int64"):
            offsets_by_a_numpy_global(ints, wide_out, device=device)
        return
    offsets_by_a_numpy_global(ints, wide_out, device=device)
    assert np.array_equal(wide_out, np.array([(int(v) + 2**40) // 2**20 for v in ints]))
