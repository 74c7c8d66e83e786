"""Inputs that once escaped as something other than a SvodError, or failed late: each is a SvodError naming
the kernel, the stage and the value, before anything runs or allocates."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, UOp, dtypes
from svod.errors import BufferMismatchError, GraphError, SvodError
from tests.helpers import refuses


def _double():
    k = KernelBuilder("double")
    n = k.var("n", 1, 64)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0)
    return k.build()


def test_a_read_only_output_array_is_refused_before_anything_runs(device):
    out = np.full(8, 5.0, np.float32)
    out.flags.writeable = False
    with pytest.raises(BufferMismatchError, match="read-only") as info:
        svod.run(_double(), [out, np.ones(8, np.float32)], device=device, n=8)
    assert info.value.kernel == "double" and info.value.stage == "bind"
    assert (out == 5.0).all()
    source = np.ones(8, np.float32)
    source.flags.writeable = False  # a read-only input is fine
    result = np.zeros(8, np.float32)
    svod.run(_double(), [result, source], device=device, n=8)
    assert (result == 2.0).all()


def test_a_buffer_the_machine_cannot_hold_is_a_svod_error_naming_its_size():
    huge = svod.Buffer("CPU", dtypes.float32, 1 << 40)
    with pytest.raises(SvodError, match=str(4 << 40)):
        huge.numpy()
    with pytest.raises(SvodError, match=str(4 << 40)) as info:
        svod.run(_double(), [huge, huge], n=8)
    assert (info.value.kernel, info.value.stage) == ("double", "buffer")
    assert str(info.value).startswith("[kernel 'double', stage buffer]")


@pytest.mark.parametrize(("arguments", "message", "value"), [
    (lambda: [[0.0] * 8, np.zeros(8, np.float32)], "argument 0 must be a svod.Buffer or a numpy array", "list"),
    (lambda: [np.zeros(8, object), np.zeros(8, np.float32)], "argument 0 is a numpy array of object", "object"),
    (lambda: [np.zeros(8, np.float32), np.zeros(8, np.int32)],
     "argument 1 is a numpy array of int32, the kernel needs float32", "int32"),
    (lambda: [np.zeros(8, np.float32)], "kernel takes 2 buffers, got 1", 1),
    (lambda: [np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(8, object)],
     "kernel takes 2 buffers, got 3", 3),
])
def test_arguments_of_the_wrong_kind_or_dtype_name_the_kernel(device, arguments, message, value):
    with pytest.raises(BufferMismatchError, match=message) as info:
        svod.run(_double(), arguments(), device=device, n=8)
    assert (info.value.kernel, info.value.stage, info.value.value) == ("double", "bind", value)
    assert "kernel 'double'" in str(info.value) and str(value) in str(info.value)


@pytest.mark.parametrize("value", [np.int64(7), np.int32(7), np.uint8(7)])
def test_numpy_integers_are_variable_values(device, value):
    out = np.zeros(8, np.float32)
    svod.run(_double(), [out, np.arange(8, dtype=np.float32)], device=device, n=value)
    np.testing.assert_array_equal(out, [0, 2, 4, 6, 8, 10, 12, 0])


@pytest.mark.parametrize("value", [np.float64(7.0), True, np.bool_(True), "7"])
def test_values_that_are_not_integers_are_refused(value):
    with pytest.raises(svod.errors.VariableError, match="must be integer"):
        svod.run(_double(), [np.zeros(8, np.float32), np.zeros(8, np.float32)], n=value)


def _raw_kernel(*effects: UOp) -> UOp:
    return UOp.sink(*effects, name="raw")


@pytest.mark.parametrize(("build", "message"), [
    (lambda p: _raw_kernel(UOp(Ops.STORE, dtypes.void, (p.index(3), UOp.const(dtypes.int64, 1)))),
     "stored into a buffer of dtypes.float32"),
    (lambda p: _raw_kernel(p.index(0).store(1.0), UOp.const(dtypes.float32, 1.0)), "SINK holds"),
    (lambda p: _raw_kernel(p.index(0).store(UOp(Ops.ADD, dtypes.float32, (UOp.const(dtypes.float32, 1.0),
                                                                         UOp.const(dtypes.int32, 1))))),
     "operands of one dtype"),
    (lambda p: _raw_kernel(p.index(0).store(UOp(Ops.BITCAST, dtypes.float32, (UOp.const(dtypes.int64, 1),)))),
     "keeps the size"),
    (lambda p: _raw_kernel(UOp(Ops.STORE, dtypes.void, (p.index(0), UOp.const(dtypes.float32, 1.0))),
                           UOp.param(0, dtypes.int32, 4).index(0).store(1)), "declared twice"),
])
def test_malformed_graphs_are_graph_errors_naming_the_node(device, build, message):
    with pytest.raises(GraphError, match=message) as info:
        svod.compile(build(UOp.param(0, dtypes.float32, 4)), device)
    assert info.value.kernel == "raw" and info.value.stage == "build"


@pytest.mark.parametrize(("size", "elements"), [(lambda n: n - n + 8, 8), (lambda n: n * 8 * 8, 64)])
def test_buffer_sizes_that_simplify_still_compile(device, size, elements):
    k = KernelBuilder("sized")
    n = k.var("n", 1, 64)
    out = k.buffer(dtypes.float32, size(n))
    i = k.range(size(n))
    k.store(out[i], 1.0)
    got = np.zeros(64, np.float32)
    svod.run(k.build(), [got], device=device, n=1)
    assert got.sum() == elements


def test_constant_casts_bitcasts_and_empty_ranges_compile(device):
    if refuses(device, dtypes.int8):
        return
    k = KernelBuilder("constants")
    ints, small, empty = k.buffer(dtypes.int32, 2), k.buffer(dtypes.int8, 2), k.buffer(dtypes.int32, 4)
    k.store(ints[0], UOp.const(dtypes.float32, 3.7).cast(dtypes.int32))
    k.store(ints[1], UOp.const(dtypes.float32, -1e20).cast(dtypes.int32))
    k.store(small[0], UOp.const(dtypes.uint8, 200).bitcast(dtypes.int8))
    k.store(small[1], UOp.const(dtypes.int64, -2).cast(dtypes.int8))
    i = k.range(0)
    k.store(empty[i], 1)
    ints_np, small_np, empty_np = np.zeros(2, np.int32), np.zeros(2, np.int8), np.zeros(4, np.int32)
    svod.run(k.build(), [ints_np, small_np, empty_np], device=device)
    np.testing.assert_array_equal(ints_np, [3, -(2**31)])
    np.testing.assert_array_equal(small_np, [-56, -2])
    assert (empty_np == 0).all()
