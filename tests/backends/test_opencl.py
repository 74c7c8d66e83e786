"""OpenCL on PoCL: launch sizes, guards for ragged sizes, binaries from the disk cache, build logs."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, UOp, dtypes
from svod.codegen.lower_gpu import WorkGroupLimits, to_gpu_indices
from svod.errors import CompileError
from svod.workloads import conv2d

pytestmark = pytest.mark.skipif("CL:0" not in svod.available_devices(),
                                reason="no OpenCL platform here (install pocl-opencl-icd)")
REPO = Path(__file__).resolve().parents[2]


def _grid(rows_max: int = 1000, cols_max: int = 1000):
    k = KernelBuilder("grid")
    rows, cols = k.var("rows", 1, rows_max), k.var("cols", 1, cols_max)
    out, x = k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows * cols)
    r, c = k.range(rows), k.range(cols)
    k.store(out[r * cols + c], x[r * cols + c] * 3.0 - 1.0)
    return k.build()


def test_two_dimensional_launch_sizes_follow_the_kernel():
    spec = svod.get_device("CL:0").renderer.render(_grid())
    assert spec.local_size is not None
    local = [int(s.arg) for s in spec.local_size]
    assert local[2] == 1 and local[0] * local[1] <= svod.get_device("CL:0").renderer.limits.max_work_group_size
    dims = spec.launch_dims({"rows": 17, "cols": 13})
    assert dims.local_size == tuple(local)
    assert dims.global_size[0] * local[0] >= 13 and (dims.global_size[0] - 1) * local[0] < 13
    assert dims.global_size[1] * local[1] >= 17 and (dims.global_size[1] - 1) * local[1] < 17
    assert "if (" in spec.src and "get_group_id(0)" in spec.src and "get_local_id(1)" in spec.src


def test_every_launch_has_one_work_group_size_whatever_the_global_size():
    """A work-group size left to the driver changes with the global size, and PoCL compiles each one it
    sees anew (50 ms per new size): svod fixes it, and guards the ragged end."""
    k = KernelBuilder("ew")
    n = k.var("n", 1, 1 << 20)
    out = k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], i.cast(dtypes.int32))
    spec = svod.get_device("CL:0").renderer.render(k.build())
    assert spec.local_size is not None and "get_local_id(0)" in spec.src
    sizes = {spec.launch_dims({"n": size}).local_size for size in (1, 7, 4099, 65537, 1 << 20)}
    assert len(sizes) == 1
    dims = spec.launch_dims({"n": 4099})
    assert dims.global_size[0] * dims.local_size[0] >= 4099


def test_local_sizes_respect_small_limits():
    limits = WorkGroupLimits(8, (4, 4, 1))
    lowered = to_gpu_indices(_grid(), limits, direct_index=False)
    locals_ = {u.arg: int(u.src[0].arg) for u in lowered.toposort() if u.op is svod.Ops.SPECIAL
               and u.arg.startswith("l")}
    assert locals_["lidx0"] <= 4 and locals_["lidx1"] <= 4 and locals_["lidx0"] * locals_["lidx1"] <= 8


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (17, 13), (64, 64), (3, 999)])
def test_ragged_symbolic_grids_are_covered_exactly(rows, cols):
    x = np.random.default_rng(rows).standard_normal(1000 * 1000).astype(np.float32)
    out = np.full(1000 * 1000, 7.0, np.float32)
    svod.run(_grid(), [out, x], device="CL:0", rows=rows, cols=cols)
    n = rows * cols
    np.testing.assert_array_equal(out[:n], x[:n] * np.float32(3) - np.float32(1))
    assert (out[n:] == 7.0).all()


def test_broken_source_reports_the_build_log():
    renderer, compiler = svod.compiler_pair("CL:0")
    spec = renderer.render(_grid())
    spec.src = spec.src.replace("*(data0+", "*(undefined_name+")
    with pytest.raises(CompileError, match="OpenCL build failed") as info:
        compiler.compile(spec)
    assert "undefined_name" in info.value.log


_CHILD = textwrap.dedent("""
    import dataclasses, sys
    from pathlib import Path
    import numpy as np
    import svod
    from svod.config import settings
    from svod.runtime import KernelCache
    from tests.backends.test_opencl import _grid
    cache = KernelCache(dataclasses.replace(settings, cache_dir=Path(sys.argv[1]), disk_cache=True))
    kernel = cache.get(_grid(), svod.get_device("CL:0"))
    out = svod.Buffer.from_numpy(np.zeros(6, np.float32), "CL:0")
    kernel([out, svod.Buffer.from_numpy(np.ones(6, np.float32), "CL:0")], {"rows": 2, "cols": 3})
    assert out.numpy().tolist() == [2.0] * 6
    print(cache.stats.compiles, cache.disk.stats.hits)
""")


def test_a_second_process_loads_the_binary_without_building(tmp_path):
    results = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], cwd=REPO, capture_output=True,
                              text=True, check=False, timeout=300)
        assert done.returncode == 0, done.stderr
        results.append(tuple(map(int, done.stdout.split())))
    assert results == [(1, 0), (0, 1)]


def test_reductions_and_views_on_opencl():
    k = KernelBuilder("colmax")
    out, x = k.buffer(dtypes.float32, 33), k.buffer(dtypes.float32, 33 * 7)
    c = k.range(33)
    r = k.range(7, AxisKind.REDUCE)
    k.store(out[c], x[r * 33 + c].reduce(r, op=svod.Ops.MAX))
    data = np.random.default_rng(3).standard_normal(33 * 7 + 5).astype(np.float32)
    base = svod.Buffer.from_numpy(data, "CL:0")
    result = svod.Buffer("CL:0", dtypes.float32, 40)
    svod.run(k.build(), [result.view(7, 33), base.view(5, 33 * 7)], device="CL:0")
    np.testing.assert_array_equal(result.numpy()[7:], data[5:].reshape(7, 33).max(axis=0))


def test_work_items_past_a_ragged_end_load_nothing():
    """The items that pad a launch to whole work groups must not load either: here they would read the
    index buffer past its end (a view, followed by huge indices) and report a scatter out of bounds."""
    k = KernelBuilder("weighted_histogram")
    counts, bins, weights = (k.buffer(dtypes.int32, 5) for _ in range(3))
    i = k.range(5)
    k.atomic_add(counts[bins[i]], weights[bins[i]])
    indices = np.full(64, 1 << 30, np.int32)
    indices[:5] = [4, 0, 4, 1, 2]
    result = np.zeros(5, np.int32)
    svod.run(k.build(), [result, svod.Buffer.from_numpy(indices, "CL:0").view(0, 5), np.arange(1, 6, dtype=np.int32)],
             device="CL:0")
    np.testing.assert_array_equal(result, [1, 2, 3, 0, 10])


def test_a_large_reduction_runs_in_two_parts_on_opencl():
    k = KernelBuilder("total")
    n = k.var("n", 1, 1 << 20)
    out, x = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, n)
    r = k.range(n, AxisKind.REDUCE)
    k.store(out[0], x[r].reduce(r))
    kernel = svod.compile(k.build(), "CL:0")
    assert type(kernel.program).__name__ == "PartsProgram"
    data = np.random.default_rng(4).standard_normal(1 << 20).astype(np.float32)
    for n_value in (1, 1000, 1 << 20):
        total = np.zeros(1, np.float32)
        svod.run(k.build(), [total, data], device="CL:0", n=n_value)
        np.testing.assert_allclose(total[0], data[:n_value].astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


def _wide_matmul(columns: int) -> UOp:
    k = KernelBuilder(f"wide_mm_{columns}")
    out, a, b = (k.buffer(dtypes.float32, shape) for shape in ((16, columns), (16, 8), (8, columns)))
    i, j, r = k.range(16), k.range(columns), k.range(8, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    return k.build()


@pytest.mark.parametrize("columns", [5, 33, 999])
def test_a_masked_tile_is_one_vector_where_every_lane_passes(columns):
    """A work item's tile row past the columns' end is still one vector: a store of all lanes where every
    lane passes, else of each passing lane's element; ``b`` read the same way, the test made once before
    the sum's loop. The output ends where sentinels begin, which no lane may touch; the values are the
    reference's bits."""
    ast = _wide_matmul(columns)
    src = svod.get_device("CL:0").renderer.render(ast).src
    assert re.search(r"if \(all\(v\d+\)\) \{ vstore\d+\(", src) and re.search(r"\(all\(v\d+\)\?vload\d+\(", src)
    rng = np.random.default_rng(columns)
    a, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, columns)).astype(np.float32)
    memory = svod.Buffer.from_numpy(np.full(16 * columns + 64, 7.0, np.float32), "CL:0")
    svod.run(ast, [memory.view(0, 16 * columns), a, b], device="CL:0")
    want = np.zeros((16, columns), np.float32)
    svod.run(ast, [want, a, b], device="PYTHON")
    got = memory.numpy()
    np.testing.assert_array_equal(got[:16 * columns].view(np.int32), want.reshape(-1).view(np.int32))
    assert (got[16 * columns:] == 7.0).all()


def test_a_gate_that_changes_every_turn_reads_each_lane():
    """A padded convolution's window tests its lanes anew at every turn of the sum: each lane's element is
    read, not a branch between a vector and them at every turn (PoCL stops vectorising across work items
    there)."""
    src = svod.get_device("CL:0").renderer.render(conv2d(4, 32).steps[0].ast).src
    assert "vload" not in src and "all(" not in src
