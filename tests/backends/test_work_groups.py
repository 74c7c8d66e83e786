"""Work-group constructs on every backend: reductions a work group shares in local memory between barriers
(``share_reductions``), a matmul staged block by block in local memory (``tile_matmul``), and several
outputs per work item (``upcast_reductions`` on GPUs), against numpy at edge sizes. On the CPU pairs and
the reference the same kernels take the usual path: the results must agree everywhere."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import svod
import svod.backends.cpu
from svod import AxisKind, KernelBuilder, Ops, dtypes
from svod.codegen.render.cuda import CUDARenderer
from svod.codegen.render.opencl import OpenCLRenderer
from svod.codegen.render.wgsl import WGSLRenderer
from svod.device import Device, DeviceCaps, WorkGroupLimits
from svod.workloads import conv2d, dense_layer, layernorm, softmax
from tests.backends.test_corpus import half_row_reductions
from tests.backends.test_cuda import requires_nvrtc
from tests.frontend.test_extents import agrees_with_python, spmv
from tests.helpers import cpu_device, open_device, refuses, webgpu_devices

SHAPES = [(1, 1), (17, 255), (3, 1031), (1000, 17), (2, 1000), (5, 1024)]


def _with_dedicated_local_memory(monkeypatch: pytest.MonkeyPatch, device: Device) -> Device:
    """``device`` lowering kernels as for a GPU whose local memory is storage of its own: this machine's
    OpenCL and Vulkan drivers run on the CPU, so by default they neither share a row's reductions in local
    memory nor stage a matmul's operands there."""
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.caps, dedicated_local_memory=True))
    return device


@pytest.fixture(params=["llvm", "clang", "PYTHON", "CL:0", "CUDA:0", "WEBGPU:0", "CL:0 as a GPU",
                        "WEBGPU:0 as a GPU"])
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Device:
    """Every device, and OpenCL and WebGPU again lowering as a GPU with local memory of its own would: a
    row's reductions computed once per work item (``reduce_per_item``) there, and shared by the work group
    between barriers (``share_reductions``) here."""
    name, _, as_gpu = request.param.partition(" ")
    found = open_device(name)
    return _with_dedicated_local_memory(monkeypatch, found) if as_gpu else found


@pytest.mark.parametrize(("rows", "cols"), SHAPES)
@pytest.mark.parametrize("build", [softmax, layernorm], ids=["softmax", "layernorm"])
def test_row_normalisations_match_numpy(device, build, rows, cols):
    kernel = build(rows, cols)
    arrays = [a.copy() for a in kernel.arrays]
    svod.run(kernel.steps[0].ast, arrays, device=device)
    np.testing.assert_allclose(arrays[0], kernel.numpy(), rtol=2e-5, atol=2e-6)


def _symbolic_softmax():
    k = KernelBuilder("softmax_rows_n")
    rows, cols = k.var("rows", 0, 40), k.var("cols", 1, 300)
    out, x = k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows * cols)
    r, c = k.range(rows), k.range(cols)
    j1, j2 = k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    top = x[r * cols + j1].reduce(j1, op=Ops.MAX)
    total = (x[r * cols + j2] - top).exp().reduce(j2)
    k.store(out[r * cols + c], (x[r * cols + c] - top).exp() / total)
    return k.build()


@pytest.mark.parametrize(("rows", "cols"), [(0, 5), (1, 1), (7, 129), (40, 300), (3, 127)])
def test_symbolic_sizes_including_no_rows(device, rows, cols):
    x = np.random.default_rng(rows * 1000 + cols).standard_normal(40 * 300).astype(np.float32)
    out = np.full(40 * 300, 7.0, np.float32)
    svod.run(_symbolic_softmax(), [out, x], device=device, rows=rows, cols=cols)
    n = rows * cols
    e = np.exp(x[:n].reshape(rows, cols) - x[:n].reshape(rows, cols).max(axis=1, keepdims=True))
    np.testing.assert_allclose(out[:n].reshape(rows, cols), e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)
    assert (out[n:] == 7.0).all()


def test_per_row_results_are_stored_once_beside_the_row(device):
    """``mean[r]`` does not use the column range: one work item of the group stores it."""
    rows, cols = 13, 301
    k = KernelBuilder("centre")
    out, mean, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32,
                                                                                                   (rows, cols))
    r, c, j = k.range(rows), k.range(cols), k.range(cols, AxisKind.REDUCE)
    m = x[r, j].reduce(j) * (1.0 / cols)
    k.store(mean[r], m)
    k.store(out[r, c], x[r, c] - m)
    x_np = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    out_np, mean_np = np.zeros_like(x_np), np.zeros(rows, np.float32)
    svod.run(k.build(), [out_np, mean_np, x_np], device=device)
    want = x_np.astype(np.float64).mean(axis=1)
    np.testing.assert_allclose(mean_np, want, atol=1e-6)
    np.testing.assert_allclose(out_np, x_np - want[:, None], atol=1e-5)


def test_a_reduction_over_the_whole_input_is_shared_by_one_group(device):
    n = 4099
    k = KernelBuilder("normalise")
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i, j = k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(out[i], x[i] / x[j].reduce(j))
    x_np = np.random.default_rng(4).random(n).astype(np.float32) + 0.5
    out_np = np.zeros_like(x_np)
    svod.run(k.build(), [out_np, x_np], device=device)
    np.testing.assert_allclose(out_np, x_np / x_np.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("op", [Ops.MAX, Ops.MIN, Ops.ADD])
def test_integer_reductions_at_the_extremes(device, op):
    rows, cols = 5, 200
    k = KernelBuilder(f"row_{op.name.lower()}")
    out, x = k.buffer(dtypes.int32, (rows, cols)), k.buffer(dtypes.int32, (rows, cols))
    r, c, j = k.range(rows), k.range(cols), k.range(cols, AxisKind.REDUCE)
    k.store(out[r, c], x[r, j].reduce(j, op=op) + x[r, c] * 0)
    info = np.iinfo(np.int32)
    x_np = np.random.default_rng(5).integers(info.min, info.max, (rows, cols), dtype=np.int32)
    x_np[1, 17], x_np[2, 199], x_np[3, 0] = info.min, info.max, info.max
    out_np = np.zeros_like(x_np)
    svod.run(k.build(), [out_np, x_np], device=device)
    reduce = {Ops.MAX: np.max, Ops.MIN: np.min, Ops.ADD: np.sum}[op]
    want = reduce(x_np, axis=1, keepdims=True).astype(np.int32)  # numpy's int32 sum wraps as svod's does
    np.testing.assert_array_equal(out_np, np.broadcast_to(want, x_np.shape))


def _matmul_matches_numpy(device, m, n, kk):
    k = KernelBuilder("matmul")
    out, a = k.buffer(dtypes.float32, (m, n)), k.buffer(dtypes.float32, (m, kk))
    b = k.buffer(dtypes.float32, (kk, n))
    i, j, r = k.range(m), k.range(n), k.range(kk, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    rng = np.random.default_rng(m + n + kk)
    a_np, b_np = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
    out_np = np.zeros((m, n), np.float32)
    svod.run(k.build(), [out_np, a_np, b_np], device=device)
    np.testing.assert_allclose(out_np, a_np.astype(np.float64) @ b_np, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


@pytest.mark.parametrize("n", [1, 17, 255, 1000, 1031])
def test_matmul_at_odd_sizes(compiled_device, n):
    """Sizes the upcast width divides (1000) and does not (1, 17, 255, 1031)."""
    _matmul_matches_numpy(compiled_device, n, n, n)


@pytest.mark.parametrize(("length", "width"), [(1, 1), (17, 5), (64, 64), (67, 3)])
def test_sums_read_at_no_unit_stride_match_numpy(compiled_device, length, width):
    """Attention's scores, ``q @ k.T``: tiled on a GPU by the loads each output shares, masked past the end."""
    k = KernelBuilder("scores")
    out, q, key = (k.buffer(dtypes.float32, shape) for shape in ((length, length), (length, width), (length, width)))
    i, j, d = k.range(length), k.range(length), k.range(width, AxisKind.REDUCE)
    k.store(out[i, j], (q[i, d] * key[j, d]).reduce(d))
    rng = np.random.default_rng(length + width)
    q_np, k_np = (rng.standard_normal((length, width)).astype(np.float32) for _ in range(2))
    out_np = np.full((length, length), np.nan, np.float32)
    svod.run(k.build(), [out_np, q_np, k_np], device=compiled_device)
    np.testing.assert_allclose(out_np, q_np.astype(np.float64) @ k_np.T, rtol=1e-4, atol=1e-4 * np.sqrt(width))


@pytest.mark.parametrize("registers", [16, 32])
@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_cpu_register_tiles_for_avx2_and_avx512_compute_the_same(monkeypatch, compiler, registers):
    """Tiles of 4 rows (16 vector registers) and of 8 (32, AVX-512), whatever this host has: a matmul whose
    sizes the tiles divide and do not, and the suite's padded convolution with its gated loads."""
    if compiler == "clang":
        open_device("clang")  # skips without a C compiler
    monkeypatch.setattr(svod.backends.cpu, "host_vector_registers", lambda: registers)
    device = cpu_device(2, compiler)
    assert device.caps.vector_registers == registers
    for m, n, kk in [(24, 32, 7), (12, 48, 5), (40, 16, 33)]:
        _matmul_matches_numpy(device, m, n, kk)
    kernel = conv2d(16, 24)
    arrays = [a.copy() for a in kernel.arrays]
    svod.run(kernel.steps[0].ast, arrays, device=device)
    np.testing.assert_allclose(arrays[0], kernel.numpy(), rtol=1e-4, atol=1e-4)


def test_float64_rows_share_their_reductions_where_the_device_holds_them(device):
    if refuses(device, dtypes.float64):
        return
    rows, cols = 6, 333
    k = KernelBuilder("softmax64")
    out, x = k.buffer(dtypes.float64, (rows, cols)), k.buffer(dtypes.float64, (rows, cols))
    r, c, j1, j2 = k.range(rows), k.range(cols), k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    top = x[r, j1].reduce(j1, op=Ops.MAX)
    k.store(out[r, c], (x[r, c] - top).exp() / (x[r, j2] - top).exp().reduce(j2))
    x_np = np.random.default_rng(6).standard_normal((rows, cols))
    out_np = np.zeros_like(x_np)
    svod.run(k.build(), [out_np, x_np], device=device)
    e = np.exp(x_np - x_np.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out_np, e / e.sum(axis=1, keepdims=True), rtol=1e-12)


# ---- the source each GPU language gets -----------------------------------------------------------------

_CAPS = DeviceCaps(host_memory=False, overlaps_on_host=False, work_groups=WorkGroupLimits(256, (256, 256, 64)),
                   local_memory=32 << 10, dedicated_local_memory=True)


@pytest.mark.parametrize(("renderer", "declared", "barrier"), [
    (OpenCLRenderer("CL:0", _CAPS), "__local float shared0[128];", "barrier(CLK_LOCAL_MEM_FENCE);"),
    (CUDARenderer(), "__shared__ float shared0[128];", "__syncthreads();"),
    (WGSLRenderer("WEBGPU:0", _CAPS), "var<workgroup> shared0: array<f32, 128>;", "workgroupBarrier();"),
], ids=["opencl", "cuda", "wgsl"])
def test_each_language_declares_local_memory_and_barriers(renderer, declared, barrier):
    """softmax's two reductions, one after the other: each a barrier after its partials and 7 steps of a tree
    over 128 of them, a barrier each (CUDA's warp of 32 combines the last 64 in registers: 1 step and 1
    barrier for those 6); no loop over the partials."""
    src = renderer.render(softmax(64, 1024).steps[0].ast).src
    assert declared in src and src.count(barrier) == 2 * _tree_barriers(128, renderer.caps.warp_size)
    assert "< 128;" not in src.replace(" ", "")
    assert src.count("__shfl_down_sync") == (10 if renderer.caps.warp_size else 0)


def _tree_barriers(group: int, warp: int | None) -> int:
    """The barriers of one reduction over a group of ``group`` items: after the partials, and after each of the
    tree's ``log2(group)`` steps, the steps over the last ``2 * warp`` partials one step in a warp's registers."""
    steps = group.bit_length() - 1
    return 1 + (steps if warp is None or warp > group else max(steps - warp.bit_length(), 0) + 1)


@requires_nvrtc
def test_shared_reductions_compile_to_ptx_with_barriers():
    renderer, compiler = svod.compiler_pair("CUDA")
    ptx = compiler.compile(renderer.render(layernorm(8, 300).steps[0].ast)).bytes.decode()
    assert ".shared" in ptx and "bar.sync" in ptx


# ---- a work group's partials combined as a tree -------------------------------------------------------

@pytest.fixture(params=["CL:0", "CUDA:0", *webgpu_devices()])
def gpu_name(request: pytest.FixtureRequest) -> str:
    return request.param


def _as_gpu_of_group(monkeypatch: pytest.MonkeyPatch, name: str, limit: int) -> Device:
    """``name`` lowering as a GPU with local memory of its own whose work groups hold at most ``limit`` items:
    rows are shared by the largest power of two of items up to ``limit`` (and to ``GROUP_SIZE``)."""
    device = open_device(name)
    caps = device.caps
    assert caps.work_groups is not None
    limits = WorkGroupLimits(min(limit, caps.work_groups.max_work_group_size),
                             tuple(min(limit, n) for n in caps.work_groups.max_item_sizes), caps.work_groups.max_groups)
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(caps, dedicated_local_memory=True,
                                                                     work_groups=limits))
    return device


def _row_reductions_kernel(rows: int, cols: int, limit: int):
    """Per row: an int32 sum (wrapping), maximum and minimum, and a float32 sum, each stored once per row. The
    name holds the group's ``limit``: a compiled kernel is cached by its name and device, not the caps patched."""
    k = KernelBuilder(f"row_reductions_{rows}_{cols}_{limit}")
    total, top, bottom = (k.buffer(dtypes.int32, rows) for _ in range(3))
    fsum, xi, xf = k.buffer(dtypes.float32, rows), k.buffer(dtypes.int32, (rows, cols)), k.buffer(dtypes.float32,
                                                                                                    (rows, cols))
    r = k.range(rows)
    j1, j2, j3, j4 = (k.range(cols, AxisKind.REDUCE) for _ in range(4))
    k.store(total[r], xi[r, j1].reduce(j1))
    k.store(top[r], xi[r, j2].reduce(j2, op=Ops.MAX))
    k.store(bottom[r], xi[r, j3].reduce(j3, op=Ops.MIN))
    k.store(fsum[r], xf[r, j4].reduce(j4))
    return k.build()


def _barriers(device: Device, ast) -> int:
    code = svod.compile(ast, device).code
    return sum(code.count(b) for b in ("barrier(CLK_LOCAL_MEM_FENCE)", "__syncthreads()", "workgroupBarrier()"))


@pytest.mark.parametrize("limit", [2, 3, 4, 7, 100, 128, 256])
@pytest.mark.parametrize("cols", [1, 2, 7, 127, 129, 1031])
def test_rows_are_combined_in_log2_steps_at_every_group_size(monkeypatch, gpu_name, limit, cols):
    """Groups of 2 to 128 items (a limit that is no power of two takes the one below it), over rows shorter
    than the group, of a prime length and longer: integer sums, maxima and minima exact, at int32's extremes."""
    device = _as_gpu_of_group(monkeypatch, gpu_name, limit)
    rows = 5
    ast = _row_reductions_kernel(rows, cols, limit)
    group = 1 << (min(limit, 128).bit_length() - 1)
    assert _barriers(device, ast) == (_tree_barriers(group, device.caps.warp_size) if cols > 1 else 0)  # one
    # range of one turn folds
    rng = np.random.default_rng(cols * 1000 + limit)
    info = np.iinfo(np.int32)
    xi = rng.integers(info.min, info.max, (rows, cols), dtype=np.int32, endpoint=True)
    xi[1, -1], xi[2, 0], xi[3, cols // 2] = info.max, info.min, info.max
    xf = rng.standard_normal((rows, cols)).astype(np.float32)
    total, top, bottom = (np.full(rows, 7, np.int32) for _ in range(3))
    fsum = np.full(rows, np.nan, np.float32)
    svod.run(ast, [total, top, bottom, fsum, xi, xf], device=device)
    np.testing.assert_array_equal(total, xi.sum(axis=1, dtype=np.int32))  # wraps as svod's does
    np.testing.assert_array_equal(top, xi.max(axis=1))
    np.testing.assert_array_equal(bottom, xi.min(axis=1))
    np.testing.assert_allclose(fsum, xf.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5 * np.sqrt(cols))


def _tree_sum(row: np.ndarray, group: int) -> np.float32:
    """The float32 sum a group of ``group`` items makes of ``row``: item ``l`` adds ``l, l + group ...`` in
    order from -0.0, then slot ``l + half`` is added into slot ``l`` for each halving ``half``."""
    slots = [np.float32(-0.0)] * group
    for i, value in enumerate(row):
        slots[i % group] = np.float32(slots[i % group] + value)
    while group > 1:
        group //= 2
        slots = [np.float32(slots[i] + slots[i + group]) for i in range(group)]
    return slots[0]


def _row_sums_of_any_count(cols: int, limit: int):
    k = KernelBuilder(f"row_sums_n_{cols}_{limit}")
    rows = k.var("rows", 0, 9)
    out, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, rows * cols)
    r, j = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r * cols + j].reduce(j))
    return k.build()


@pytest.mark.parametrize("limit", [2, 8, 128])
def test_a_float_sum_has_the_same_bits_at_every_launch(monkeypatch, gpu_name, limit):
    """A float sum's order is fixed by the group's size alone: a row's sum is the same bits whichever row of
    a launch of 1 or 9 rows it is, on every run, and is the tree's order, exactly."""
    device = _as_gpu_of_group(monkeypatch, gpu_name, limit)
    cols = 1031
    rng = np.random.default_rng(limit)
    row = (rng.standard_normal(cols) * 10.0 ** rng.integers(-3, 4, cols)).astype(np.float32)
    results = []
    for rows, at in ((1, 0), (9, 5), (9, 5)):
        x = rng.standard_normal((9, cols)).astype(np.float32)
        x[at] = row
        out = np.zeros(9, np.float32)
        svod.run(_row_sums_of_any_count(cols, limit), [out, x.reshape(-1)], device=device, rows=rows)
        results.append(out[at])
    want = _tree_sum(row, 1 << (min(limit, 128).bit_length() - 1))
    assert np.array(results, np.float32).view(np.uint32).tolist() == [int(want.view(np.uint32))] * 3


@pytest.mark.parametrize("limit", [2, 128])
def test_special_values_reach_the_row_as_the_serial_sum_gives_them(monkeypatch, gpu_name, limit):
    """A row of -0.0 sums to -0.0 (every partial starts from -0.0), inf stays inf, inf and -inf or a NaN make
    NaN, wherever in the row and whichever item's partial they are in."""
    device = _as_gpu_of_group(monkeypatch, gpu_name, limit)
    if not device.caps.ieee_floats:
        return  # WGSL may assume finite floats
    rows, cols = 6, 131
    xf = np.ones((rows, cols), np.float32)
    xf[0] = -0.0
    xf[1, 130] = np.inf
    xf[2, 3], xf[2, 100] = np.inf, -np.inf
    xf[3, 64] = np.nan
    xf[4, :] = 0.0
    xf[4, 0] = -0.0
    fsum = np.full(rows, 7.0, np.float32)
    svod.run(_row_reductions_kernel(rows, cols, limit), [*(np.zeros(rows, np.int32) for _ in range(3)), fsum,
                                                  np.zeros((rows, cols), np.int32), xf], device=device)
    assert fsum[0] == 0 and np.signbit(fsum[0])
    assert fsum[1] == np.inf and np.isnan(fsum[2]) and np.isnan(fsum[3])
    assert fsum[4] == 0 and not np.signbit(fsum[4]) and fsum[5] == cols


@pytest.mark.parametrize(("op", "ref"), [(Ops.ADD, np.sum), (Ops.MAX, np.max), (Ops.MIN, np.min)])
@pytest.mark.parametrize("gpu_name", ["CL:0", "CUDA:0"])  # (WGSL's halves are its own f16, or none)
def test_a_half_rows_tree_computes_in_float32_where_halves_are_emulated(monkeypatch, gpu_name, op, ref):
    """A device without half arithmetic (CUDA's svod stores a half as its 16 bits) combines a group's float16
    partials in float32 as it updates them: the tree's steps are made after the kernel's ops were decomposed,
    and once added the halves' bits as integers (a sum of -35 gave 0.0068) and called a float16 maximum no
    helper defines (nvrtc refused). Small integers keep every order exact; -0.0 against 0.0 picks MAX's +0."""
    device = _as_gpu_of_group(monkeypatch, gpu_name, 128)
    if refuses(device, dtypes.float16):
        return
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, native_float16=False))
    rows, cols = 5, 67
    x_np = np.random.default_rng(3).integers(-8, 9, (rows, cols)).astype(np.float16)
    x_np[0] = np.where(np.arange(cols) % 2 == 0, -0.0, 0.0) if op is Ops.MAX else x_np[0]
    out_np = np.full(rows, np.nan, np.float16)
    svod.run(half_row_reductions(f"emulated_half_{op.name.lower()}_rows", op, rows, cols), [out_np, x_np],
             device=device)
    np.testing.assert_array_equal(out_np, ref(x_np, axis=1))
    if op is Ops.MAX:
        assert not np.signbit(out_np[0])


@pytest.mark.parametrize("limit", [4, 128])
def test_more_accumulators_than_items_share_each_step(monkeypatch, gpu_name, limit):
    """40 sums per row, each in local memory of its own, over a group of 4 items or 128: one barrier per step
    serves them all."""
    device = _as_gpu_of_group(monkeypatch, gpu_name, limit)
    rows, cols, sums = 3, 37, 40
    k = KernelBuilder(f"forty_sums_{limit}")
    out, x = k.buffer(dtypes.float32, (rows, sums)), k.buffer(dtypes.float32, (rows, cols))
    r = k.range(rows)
    for m in range(sums):
        j = k.range(cols, AxisKind.REDUCE)
        k.store(out[r, m], (x[r, j] * float(m + 1) + float(m)).reduce(j))
    ast = k.build()
    group = 1 << (min(limit, 128).bit_length() - 1)
    assert _barriers(device, ast) == _tree_barriers(group, device.caps.warp_size)
    x_np = np.random.default_rng(limit).standard_normal((rows, cols)).astype(np.float32)
    out_np = np.full((rows, sums), np.nan, np.float32)
    svod.run(ast, [out_np, x_np], device=device)
    scale = np.arange(1, sums + 1, dtype=np.float64)
    want = x_np.astype(np.float64).sum(axis=1)[:, None] * scale + cols * (scale - 1)
    np.testing.assert_allclose(out_np, want, rtol=1e-5, atol=1e-4)


# ---- a matmul staged in local memory ------------------------------------------------------------------

def _staged_matmul(m: int, n: int, depth: int, dtype=dtypes.float32):
    k = KernelBuilder(f"staged_matmul_{m}_{n}_{depth}_{dtype.name}")
    out, a, b = k.buffer(dtype, (m, n)), k.buffer(dtype, (m, depth)), k.buffer(dtype, (depth, n))
    i, j, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    return k.build()


@pytest.mark.parametrize("name", ["CL:0", "CUDA:0", "WEBGPU:0"])
@pytest.mark.parametrize(("m", "n", "depth"), [(1, 1, 1), (17, 17, 17), (255, 255, 255), (33, 1031, 20),
                                               (16, 32, 48), (5, 3, 1000), (64, 96, 128), (97, 65, 33)])
def test_matmul_staged_in_local_memory_matches_numpy(monkeypatch, name, m, n, depth):
    """With dedicated local memory assumed, a matmul's operands are staged, and agree with numpy at sizes
    the tile (32x32 where the device takes it, else 16x16) divides and does not, with steps of the reduction
    past its end."""
    device = _with_dedicated_local_memory(monkeypatch, open_device(name))
    ast = _staged_matmul(m, n, depth)
    staged = "shared1" in svod.compile(ast, device).code  # the operands' blocks in local memory
    assert staged == (min(m, n, depth) > 1)  # ranges of one step fold away: a 1x1x1 "matmul" is one product
    rng = np.random.default_rng(m * n + depth)
    a_np, b_np = rng.standard_normal((m, depth)).astype(np.float32), rng.standard_normal((depth, n)).astype(np.float32)
    out_np = np.full((m, n), np.nan, np.float32)
    svod.run(ast, [out_np, a_np, b_np], device=device)
    np.testing.assert_allclose(out_np, a_np.astype(np.float64) @ b_np, rtol=1e-4, atol=1e-4 * np.sqrt(depth))


@pytest.mark.parametrize("name", ["CL:0", "CUDA:0", "WEBGPU:0"])
@pytest.mark.parametrize(("batch", "inputs", "outputs"), [(1, 1, 1), (5, 70, 3), (67, 33, 130)])
@pytest.mark.parametrize("relu", [False, True])
def test_a_dense_layer_is_staged_with_its_bias_and_relu_after_the_sum(monkeypatch, name, batch, inputs, outputs,
                                                                      relu):
    """``max(x @ w + bias, 0)``: the sum staged as a matmul's, the bias added and the ReLU taken once per
    output after the last block."""
    device = _with_dedicated_local_memory(monkeypatch, open_device(name))
    ast = dense_layer(batch, inputs, outputs, relu)
    assert ("shared2" in svod.compile(ast, device).code) == (min(batch, inputs, outputs) > 1)
    rng = np.random.default_rng(batch + inputs + outputs)
    x, w = rng.standard_normal((batch, inputs)).astype(np.float32), rng.standard_normal((inputs, outputs)).astype(
        np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    out = np.full((batch, outputs), np.nan, np.float32)
    svod.run(ast, [out, x, w, bias], device=device)
    want = x.astype(np.float64) @ w + bias
    np.testing.assert_allclose(out, np.maximum(want, 0) if relu else want, rtol=1e-4, atol=1e-4 * np.sqrt(inputs))


@pytest.mark.parametrize("name", ["CL:0", "CUDA:0", "WEBGPU:0"])
def test_staged_integer_matmul_is_exact_and_keeps_special_floats(monkeypatch, name):
    """int32 sums are exact (the steps past the reduction's end add 0); a float product with inf or NaN
    in it stays inf or NaN, and a row of -0.0 products sums to -0.0 (nothing past the end is added)."""
    device = _with_dedicated_local_memory(monkeypatch, open_device(name))
    rng = np.random.default_rng(3)
    a_i, b_i = rng.integers(-1000, 1000, (19, 37), np.int32), rng.integers(-1000, 1000, (37, 21), np.int32)
    out_i = np.zeros((19, 21), np.int32)
    svod.run(_staged_matmul(19, 21, 37, dtypes.int32), [out_i, a_i, b_i], device=device)
    np.testing.assert_array_equal(out_i, a_i @ b_i)
    if not device.caps.ieee_floats:
        return  # WGSL may assume finite floats
    a_f, b_f = np.ones((3, 5), np.float32), np.ones((5, 3), np.float32)
    a_f[0, 2], a_f[1, :], b_f[:, 2] = np.inf, -0.0, 0.0
    b_f[4, 1] = np.nan
    out_f = np.zeros((3, 3), np.float32)
    svod.run(_staged_matmul(3, 3, 5), [out_f, a_f, b_f], device=device)
    want = np.array([[np.inf, np.nan, np.nan], [-0.0, np.nan, -0.0], [5.0, np.nan, 0.0]], np.float32)
    np.testing.assert_array_equal(out_f, want)
    assert np.signbit(out_f[1, 0]) and np.signbit(out_f[1, 2])


@requires_nvrtc
def test_staged_matmul_compiles_to_ptx_with_shared_memory():
    renderer, compiler = svod.compiler_pair("CUDA")
    src = renderer.render(_staged_matmul(100, 70, 33)).src
    # 16x16 items each computing 4x4 outputs: a 64x16 block of a, a 16x64 block of b and the 64x64 running sums
    assert src.count("__syncthreads();") == 2 and "__shared__ float shared1[1024];" in src
    assert "__shared__ float shared2[4096];" in src and src.count("for (") == 2  # the 16 sums share one loop
    ptx = compiler.compile(renderer.render(_staged_matmul(100, 70, 33))).bytes.decode()
    assert ".shared" in ptx and "bar.sync" in ptx


# ---- a launch's work groups past the device's limit ---------------------------------------------------

def _numbered(out):
    a, b, c = out.shape
    for i in svod.prange(a):
        for j in svod.prange(b):
            for k in svod.prange(c):
                out[i, j, k] = i * 1000000 + j * 10 + k


def test_three_dimensions_launch_what_a_run_asks_for_or_refuse_it_named(device):
    """A kernel of three launch dimensions has no spare one to spread a long dimension over: a GPU's limit on
    work groups per dimension (65535 along CUDA's y and z, and WebGPU's each) is checked for the sizes of each
    run. Sizes of any bound (CUDA refused the kernel at lowering, for sizes no run had asked for) run; a run
    that needs more groups than the device allows is refused with the count, never run in part (CUDA: 75000
    groups of 4 along y)."""
    kernel = svod.kernel(_numbered)
    limits = device.caps.work_groups
    for rows in (1, 7, 300_000):
        out = np.full((2, rows, 3), -1, np.int32)
        want = np.arange(2)[:, None, None] * 1000000 + np.arange(rows)[None, :, None] * 10 + np.arange(3)
        if rows > 70_000 and limits is not None and limits.max_groups is not None:
            # (a device of 32-bit indices refuses the shape first: its flat indices would not fit)
            with pytest.raises((svod.errors.LaunchError, svod.errors.VariableError),
                               match=r"work groups along dimension 1, and the device allows|32-bit indices"):
                kernel(out, device=device)
            continue
        kernel(out, device=device)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("rows_pointers", [[0, 2, 2, 5, 6], [3, 1, -2, 7, -9, 6]])
def test_a_row_sum_over_a_slice_each_row_reads_shares_its_group(monkeypatch, gpu_name, rows_pointers):
    """npbench's spmv on a GPU whose groups share a row's sum: the loop over a row's slice counts its turns from
    two loads of the row's bounds, which the test that a work item's one turn is inside the slice must not gate
    (gated, they read the loop they count: lowering refused the kernel on CUDA, "range on axis 2 is used where
    no loop over it is open")."""
    device = _as_gpu_of_group(monkeypatch, gpu_name, 128)
    values, columns = np.arange(1.0, 7.0), np.array([0, 3, 1, -1, 2, 4])
    x = np.array([0.5, -2.0, 4.0, 8.0, -16.0])
    agrees_with_python(spmv, device, np.array(rows_pointers), columns, values, x)
