import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, dtypes
from svod.errors import GraphError


def test_builder_assigns_slots_and_axes_in_call_order():
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 24)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i, j = k.range(n), k.range(4, AxisKind.LOOP)
    assert (out.arg, x.arg) == (0, 1)
    assert i.arg == (0, AxisKind.GLOBAL) and j.arg == (1, AxisKind.LOOP)
    k.store(out[i], x[i] * 2.0 + 1.0)
    ast = k.build()
    assert ast.op is Ops.SINK and ast.arg == "saxpy"


def test_unused_buffers_stay_arguments():
    k = KernelBuilder("ignores_one")
    out, _unused, x = (k.buffer(dtypes.int32, 4) for _ in range(3))
    i = k.range(4)
    k.store(out[i], x[i] * 0)
    data = [np.zeros(4, np.int32), np.ones(4, np.int32), np.ones(4, np.int32)]
    svod.run(k.build(), data, device="CPU")
    assert (data[0] == 0).all()


def test_builder_errors():
    k = KernelBuilder("bad")
    k.var("n", 1, 4)
    with pytest.raises(GraphError, match="already defined"):
        k.var("n", 1, 5)
    buf = k.buffer(dtypes.int32, 4)
    with pytest.raises(GraphError, match="indexed buffer"):
        k.store(buf, 1)


def test_compile_returns_the_same_object():
    k = KernelBuilder("same")
    out = k.buffer(dtypes.int32, 8)
    i = k.range(8)
    k.store(out[i], i.cast(dtypes.int32) * 3)
    first = svod.compile(k.build())
    assert svod.compile(k.build()) is first
    assert first.outs == (0,) and first.ins == () and first.host_parallel_safe
    assert svod.compile(k.build(), "PYTHON") is not first


def test_run_copies_back_only_written_arrays():
    k = KernelBuilder("copy")
    out, x = k.buffer(dtypes.float32, 3), k.buffer(dtypes.float32, 3)
    i = k.range(3)
    k.store(out[i], x[i])
    out_np, x_np = np.zeros(3, np.float32), np.array([1, 2, 3], np.float32)
    x_before = x_np.copy()
    svod.run(k.build(), [out_np, x_np])
    np.testing.assert_array_equal(out_np, x_before)
    np.testing.assert_array_equal(x_np, x_before)


def test_devices_are_listed_and_compiler_pairs_work_without_a_device():
    assert "CPU" in svod.available_devices() and "PYTHON" in svod.available_devices()
    renderer, compiler = svod.compiler_pair("CPU", "llvm")
    k = KernelBuilder("aot")
    out = k.buffer(dtypes.int32, 8)
    i = k.range(8)
    k.store(out[i], i.cast(dtypes.int32))
    compiled = compiler.compile(renderer.render(k.build()))
    assert compiled.bytes and compiled.bytes[:4] == b"\x7fELF"


def test_a_stored_constant_that_does_not_fit_names_the_kernel_stage_and_value():
    k = KernelBuilder("clip")
    out = k.buffer(dtypes.int8, 4)
    with pytest.raises(GraphError, match="300") as info:
        k.store(out[k.range(4)], 300)
    assert (info.value.kernel, info.value.stage, info.value.value) == ("clip", "build", 300)


def test_a_store_runs_over_the_ranges_it_names(device):
    """``for t in range(5): x[i] = x[i] * 2`` uses no ``t``: naming ``t`` makes the store run five times (without
    it, an effect runs over the ranges it uses only, once here)."""
    k = KernelBuilder("repeat")
    x, counts = k.buffer(dtypes.float32, 7), k.buffer(dtypes.int32, 1)
    i, t = k.range(7), k.range(5, AxisKind.LOOP)
    k.store(x[i], x[i] * 2.0, t)
    k.atomic_add(counts[0], 1, i, t)
    data, got = np.arange(7, dtype=np.float32), np.zeros(1, np.int32)
    svod.run(k.build(), [data, got], device=device)
    np.testing.assert_array_equal(data, np.arange(7, dtype=np.float32) * 32)
    assert got[0] == 35


def test_an_effect_names_no_reduce_range():
    k = KernelBuilder("bad")
    x = k.buffer(dtypes.float32, 4)
    r = k.range(4, AxisKind.REDUCE)
    with pytest.raises(GraphError, match="GLOBAL or LOOP"):
        k.store(x[0], 1.0, r)
