"""Bad input never runs a kernel: every check fires before any code does, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder, dtypes
from svod.errors import BufferMismatchError, SvodError, VariableError


def _saxpy():
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 64)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0)
    return k.build()


def _arrays(size=64):
    return np.full(size, 3.0, np.float32), np.arange(size, dtype=np.float32)


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), [
    (lambda o, x: [o], {"n": 4}, BufferMismatchError, "takes 2 buffers, got 1"),
    (lambda o, x: [o, x, x], {"n": 4}, BufferMismatchError, "takes 2 buffers, got 3"),
    (lambda o, x: [o, x.astype(np.float64)], {"n": 4}, BufferMismatchError, "float64"),
    (lambda o, x: [o, x.astype(np.int32)], {"n": 4}, BufferMismatchError, "int32"),
    (lambda o, x: [o, x[:10]], {"n": 11}, BufferMismatchError, "has 10 elements, the kernel needs 11"),
    (lambda o, x: [o, x], {}, VariableError, "missing runtime value for variable n"),
    (lambda o, x: [o, x], {"n": 65}, VariableError, r"n=65 is outside bounds \[1, 64\]"),
    (lambda o, x: [o, x], {"n": 0}, VariableError, r"n=0 is outside bounds \[1, 64\]"),
    (lambda o, x: [o, x], {"n": 4, "m": 2}, VariableError, "unknown variable m"),
    (lambda o, x: [o, x], {"n": 2.5}, VariableError, "must be integer"),
])
def test_bad_input_raises_before_anything_runs(device, args, kwargs, error, message):
    out, x = _arrays()
    with pytest.raises(error, match=message) as info:
        svod.run(_saxpy(), args(out, x), device=device, **kwargs)
    assert info.value.kernel == "saxpy" and info.value.stage == "bind"
    assert (out == 3.0).all()


def test_buffers_are_untouched_by_a_failed_check(device):
    out = svod.Buffer.from_numpy(np.full(64, 3.0, np.float32), device)
    x = svod.Buffer.from_numpy(np.arange(64, dtype=np.float32), device)
    with pytest.raises(VariableError):
        svod.run(_saxpy(), [out, x], device=device, n=100)
    assert (out.numpy() == 3.0).all()


def test_raw_arrays_are_not_buffers():
    kernel = svod.compile(_saxpy(), "CPU")
    assert kernel.device.name == "CPU"
    with pytest.raises(SvodError, match=r"not a svod\.Buffer"):
        kernel([np.zeros(4, np.float32), np.zeros(4, np.float32)], {"n": 4})  # type: ignore[list-item]


def test_malformed_asts_are_reported():
    with pytest.raises(SvodError, match="SINK"):
        svod.compile(svod.UOp.const(dtypes.int32, 1))
    with pytest.raises(SvodError, match="needs at least one store"):
        KernelBuilder("empty").build()


def test_unknown_compiler_and_device():
    with pytest.raises(svod.errors.DeviceError, match="no compiler 'nvcc'"):
        svod.get_device("CPU", "nvcc")
    with pytest.raises(svod.errors.DeviceError, match="unknown device"):
        svod.get_device("TPU")


@pytest.mark.parametrize(("shift", "bad_index"), [(1, 64), (-1, -1)])
def test_an_access_that_leaves_its_buffer_is_skipped_and_reported(device, shift, bad_index):
    k = KernelBuilder("shifted")
    n = k.var("n", 1, 64)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i + shift])
    out_np, x_np = _arrays()
    with pytest.raises(svod.errors.IndexOutOfBoundsError) as info:
        svod.run(k.build(), [out_np, x_np], device=device, n=64)
    error = info.value
    assert (error.kernel, error.slot, error.size, error.index) == ("shifted", 1, 64, bad_index)
    assert isinstance(error, SvodError) and f"accessed at index {bad_index}" in str(error)
    expected = np.roll(x_np, -shift)
    expected[63 if shift == 1 else 0] = 0.0  # the skipped load gave 0
    np.testing.assert_array_equal(out_np, expected)


def test_symbolic_two_dimensional_indexing_is_accepted():
    k = KernelBuilder("rows")
    rows, cols = k.var("rows", 1, 50), k.var("cols", 1, 60)
    out, x = k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows * cols)
    r, c = k.range(rows), k.range(cols)
    k.store(out[r * cols + c], x[(rows - 1 - r) * cols + c])
    data = np.arange(12, dtype=np.float32)
    got = np.zeros(12, np.float32)
    svod.run(k.build(), [got, data], rows=3, cols=4)
    np.testing.assert_array_equal(got, data.reshape(3, 4)[::-1].reshape(-1))


def _shift():
    """``out[i] = x[i + 1]``: run on one buffer as both, its result depends on the order work items run in."""
    k = KernelBuilder("shift")
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 9)
    i = k.range(8)
    k.store(out[i], x[i + 1])
    return k.build()


@pytest.mark.parametrize(("views", "refused"), [
    (lambda b: (b.view(0, 8), b.view(0, 9)), (0, 1)),
    (lambda b: (b.view(4, 8), b.view(0, 9)), (0, 1)),
    (lambda b: (b.view(0, 8), b.view(7, 9)), (0, 1)),
    (lambda b: (b.view(0, 8), b.view(8, 9)), None),
    (lambda b: (b.view(9, 8), b.view(0, 9)), None),
])
def test_a_written_buffer_sharing_memory_with_another_argument_is_refused(device, views, refused):
    """Lowering proves races absent buffer by buffer, and the CPU code tells the compiler buffers are apart."""
    whole = svod.Buffer.from_numpy(np.arange(17, dtype=np.float32), device)
    out, x = views(whole)
    kernel = svod.compile(_shift(), device)
    if refused is None:
        kernel([out, x])
        np.testing.assert_array_equal(out.numpy(), x.numpy()[1:])
        return
    with pytest.raises(BufferMismatchError, match="argument 0 is written and shares memory with argument 1") as info:
        kernel([out, x])
    assert info.value.kernel == "shift" and info.value.stage == "bind" and info.value.value == refused
    np.testing.assert_array_equal(whole.numpy(), np.arange(17, dtype=np.float32))


def test_buffers_wrapping_one_array_share_its_memory():
    data = np.arange(17, dtype=np.float32)
    out, x = svod.Buffer.from_numpy(data[:8], copy=False), svod.Buffer.from_numpy(data[3:12], copy=False)
    with pytest.raises(BufferMismatchError, match="shares memory"):
        svod.compile(_shift())([out, x])
    svod.run(_shift(), [data[:8], data[3:12]])  # arrays: the overlapping one goes through a copy
    np.testing.assert_array_equal(data[:8], np.arange(4, 12, dtype=np.float32))


def test_one_buffer_read_twice_is_fine(device):
    k = KernelBuilder("twice")
    out, a, b = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(out[i], a[i] * b[i])
    x = svod.Buffer.from_numpy(np.arange(8, dtype=np.float32), device)
    out_buffer = svod.Buffer(device, dtypes.float32, 8)
    svod.compile(k.build(), device)([out_buffer, x, x])
    np.testing.assert_array_equal(out_buffer.numpy(), np.arange(8, dtype=np.float32) ** 2)


def test_a_plan_refuses_a_kernel_over_overlapping_buffers(device):
    plan = svod.ExecutionPlan(device)
    whole = svod.Buffer(device, dtypes.float32, 17)
    out, x = plan.add_buffer(whole.view(0, 8)), plan.add_buffer(whole.view(4, 9))
    plan.add_kernel(_shift(), [out, x])
    with pytest.raises(BufferMismatchError, match="shares memory"):
        plan.prepare()


def test_a_variable_that_lowering_folds_away_is_still_the_kernels(device):
    """``n * 0`` folds to 0, so no compiled code reads ``n``; the kernel declared it all the same, so every
    device takes it, checks its bounds and wants it, as the reference does (the CPU said "unknown variable
    n")."""
    k = KernelBuilder("folded_variable")
    n = k.var("n", 1, 8)
    out = k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(out[i], (n * 0).cast(dtypes.float32) + 1.0)
    got = np.zeros(8, np.float32)
    svod.run(k.build(), [got], device=device, n=3)
    np.testing.assert_array_equal(got, np.ones(8, np.float32))
    with pytest.raises(VariableError, match="outside bounds"):
        svod.run(k.build(), [got], device=device, n=9)
    with pytest.raises(VariableError, match="missing runtime value for variable n"):
        svod.run(k.build(), [got], device=device)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"n": 8.0}, VariableError, "must be integer"),
    ({"n": 99}, VariableError, r"n=99 is outside bounds \[1, 64\]"),
    ({"n": 8, "m": 2}, VariableError, "unknown variable m"),
    ({}, VariableError, "missing runtime value for variable n"),
    ({"n": 16}, BufferMismatchError, "has 8 elements, the kernel needs 16"),
])
def test_a_run_after_runs_with_other_values_checks_its_own(device, kwargs, error, message):
    """A run repeated with the same variable values reuses what they gave; one whose values differ, or are equal
    but not ints, is checked and computed as a first run is, and refused before anything runs."""
    ast = _saxpy()
    out, x = _arrays(8)
    for n in (8, 8, 3, 8):
        out[:] = -1.0
        svod.run(ast, [out, x], device=device, n=n)
        np.testing.assert_array_equal(out[:n], x[:n] * 2.0)
        np.testing.assert_array_equal(out[n:], -1.0)
    out[:] = -1.0
    with pytest.raises(error, match=message):
        svod.run(ast, [out, x], device=device, **kwargs)
    np.testing.assert_array_equal(out, -1.0)
    svod.run(ast, [out, x], device=device, n=8)  # and the first values again
    np.testing.assert_array_equal(out, x * 2.0)
