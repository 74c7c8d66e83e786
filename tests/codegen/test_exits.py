"""Loops that exit early (``Ops.EXIT``) and loops without a bound (``UOp.range(None, ...)``), built with the
builder: what the IR accepts, what each stage makes of them, and the same results on every device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.codegen.lower_gpu import WorkGroupLimits
from svod.codegen.pipeline import linear_listing
from svod.codegen.render.wgsl import WGSLRenderer
from svod.device import DeviceCaps
from svod.errors import GraphError, IndexOutOfBoundsError
from svod.ir.uop import UNBOUNDED, is_unbounded
from svod.ir.validate import validate
from tests.backends.test_cuda import requires_nvrtc
from tests.helpers import open_device


def collatz(bounded: bool = False) -> UOp:
    """Per item, the steps of the Collatz sequence from ``x[i]`` down to 1: a loop without a bound (or of at
    most 200 turns) whose exit tests the value a cell carries from turn to turn."""
    k = KernelBuilder("collatz")
    n = k.var("n", 1, 1000)
    out, x, cell = k.buffer(dtypes.int32, n), k.buffer(dtypes.int32, n), k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(cell[i], x[i])
    k.store(out[i], 0)
    t = k.range(200 if bounded else None, AxisKind.LOOP)
    v = cell[i].load()
    going = v.ne(1)
    k.store(out.index(i, going), out[i].load() + 1, t)
    k.store(cell.index(i, going), (v % 2).eq(0).where(v // 2, v * 3 + 1), t)
    k.exit(t, going.ne(True))
    return k.build()


def _steps(x: np.ndarray, most: int | None = None) -> np.ndarray:
    out = []
    for v in x.tolist():
        steps = 0
        while v != 1 and (most is None or steps < most):
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            steps += 1
        out.append(steps)
    return np.array(out, np.int32)


X = np.array([1, 2, 3, 6, 7, 27, 97, 871, 5], np.int32)


def test_a_loop_without_a_bound_ends_by_its_exit(device):
    out, cell = np.zeros(len(X), np.int32), np.zeros(len(X), np.int32)
    if device.caps.max_loop_turns is not None:
        with pytest.raises(GraphError, match="a while loop has no bound on its turns") as raised:
            svod.run(collatz(), [out, X, cell], device=device, n=len(X))
        assert raised.value.kernel == "collatz" and raised.value.stage == "render"
        return
    svod.run(collatz(), [out, X, cell], device=device, n=len(X))
    np.testing.assert_array_equal(out, _steps(X))


def test_a_bounded_loop_exits_early_or_at_its_bound(device):
    out, cell = np.zeros(len(X), np.int32), np.zeros(len(X), np.int32)
    svod.run(collatz(bounded=True), [out, X, cell], device=device, n=len(X))
    np.testing.assert_array_equal(out, _steps(X, 200))  # 871 takes 178 steps, 97 118: all within the bound
    capped = np.array([27, 97], np.int32)
    out, cell = np.zeros(2, np.int32), np.zeros(2, np.int32)
    k = KernelBuilder("capped")
    o, x, c = k.buffer(dtypes.int32, 2), k.buffer(dtypes.int32, 2), k.buffer(dtypes.int32, 2)
    i = k.range(2)
    k.store(c[i], x[i])
    k.store(o[i], 0)
    t = k.range(50, AxisKind.LOOP)
    v = c[i].load()
    going = v.ne(1)
    k.store(o.index(i, going), o[i].load() + 1, t)
    k.store(c.index(i, going), (v % 2).eq(0).where(v // 2, v * 3 + 1), t)
    k.exit(t, going.ne(True))
    svod.run(k.build(), [out, capped, cell], device=device)
    np.testing.assert_array_equal(out, [50, 50])  # the bound ends them first


def test_a_turn_runs_whole_before_the_exit():
    """Effects stated before the exit in the SINK all happen in the turn that exits."""
    k = KernelBuilder("whole")
    out = k.buffer(dtypes.int32, 3)
    t = k.range(10, AxisKind.LOOP)
    k.store(out[0], out[0].load() + 1, t)
    k.store(out[1], t.cast(dtypes.int32), t)
    k.exit(t, t.eq(3))
    got = np.zeros(3, np.int32)
    for device in ("PYTHON", "CPU"):
        got[:] = 0
        svod.run(k.build(), [got], device=device)
        np.testing.assert_array_equal(got, [4, 3, 0])


# ---- what the IR accepts -------------------------------------------------------------------------------------

def _loop_kernel():
    k = KernelBuilder("bad")
    out = k.buffer(dtypes.int32, 4)
    t = k.range(None, AxisKind.LOOP)
    return k, out, t


def test_an_exit_is_stated_after_every_effect_of_its_loop():
    k, out, t = _loop_kernel()
    k.exit(t, out[0].load() > 3)
    k.store(out[0], out[0].load() + 1, t)
    with pytest.raises(GraphError, match="stated after the loop's EXIT"):
        validate(k.build())


def test_a_loop_exits_once():
    k, out, t = _loop_kernel()
    k.store(out[0], out[0].load() + 1, t)
    k.exit(t, out[0].load() > 3)
    k.exit(t, out[0].load() < 0)
    with pytest.raises(GraphError, match="two EXITs"):
        validate(k.build())


def test_a_loop_without_a_bound_needs_an_exit():
    k, out, t = _loop_kernel()
    k.store(out[0], out[0].load() + 1, t)
    with pytest.raises(GraphError, match="no bound and no EXIT"):
        validate(k.build())


def test_an_exit_tests_its_own_turn():
    k, out, t = _loop_kernel()
    inner = k.range(4, AxisKind.LOOP)
    k.store(out[inner], out[inner].load() + 1, t)
    k.exit(t, out[inner].load() > 3)
    with pytest.raises(GraphError, match="inside it"):
        validate(k.build())


def test_only_a_sequential_loop_exits_or_goes_without_a_bound():
    with pytest.raises(GraphError, match="only a sequential loop"):
        UOp.range(4, 0, AxisKind.GLOBAL).exit(True)
    with pytest.raises(GraphError, match="without a bound"):
        UOp.range(None, 0, AxisKind.GLOBAL)
    with pytest.raises(GraphError, match="is a bool"):
        UOp.range(4, 0, AxisKind.LOOP).exit(UOp.index_const(1))
    r = UOp.range(None, 0, AxisKind.LOOP)
    assert is_unbounded(r) and r.src[0].arg == UNBOUNDED and r.vmax == UNBOUNDED - 1


# ---- what each stage makes of them ---------------------------------------------------------------------------

def _linear(renderer, ast):
    return renderer.program(ast).src[2].src


@pytest.mark.parametrize(("device", "compiler"), [("CPU", "llvm"), ("CPU", "clang"), ("CL:0", None), ("CUDA", None)])
def test_the_exit_is_the_last_instruction_of_its_loop(device, compiler):
    if device == "CL:0":
        open_device(device)  # OpenCL C is rendered for a platform's device: a skip where there is none
    renderer, _ = svod.compiler_pair(device, compiler)
    linear = _linear(renderer, collatz())
    exit_ = next(k for k, u in enumerate(linear) if u.op is Ops.EXIT)
    loop = linear[exit_].src[0]
    assert is_unbounded(loop) and loop.arg[1] is AxisKind.LOOP
    assert linear[exit_ + 1].op is Ops.END and linear[exit_ + 1].src[0] is loop, linear_listing(linear)


def test_each_language_spells_a_loop_without_a_test_and_its_exit():
    c = svod.compiler_pair("CPU", "clang")[0].render(collatz()).src
    assert ";; ridx" in c and ") break;" in c
    llvm = svod.compiler_pair("CPU", "llvm")[0].render(collatz()).src
    assert ".exit, label %loop" in llvm and "9223372036854775807" not in llvm
    if "CL:0" in svod.available_devices():  # OpenCL C is rendered for a platform's device
        opencl = svod.compiler_pair("CL:0")[0].render(collatz()).src
        assert ") break;" in opencl
    cuda = svod.compiler_pair("CUDA")[0].render(collatz()).src
    assert ") break;" in cuda and ";; ridx" in cuda
    wgsl = _unlimited_wgsl().render(collatz()).src
    assert ": i32 = 0;; ridx" in wgsl and ") { break; }" in wgsl and "9223372036854775807" not in wgsl


def _unlimited_wgsl() -> WGSLRenderer:
    """WGSL for an adapter whose loops have no turn limit (a real GPU's): there a while loop runs."""
    return WGSLRenderer("WEBGPU:0", DeviceCaps(host_memory=False, overlaps_on_host=False,
                                               work_groups=WorkGroupLimits(256, (256, 256, 64))))


def test_wgsl_of_a_loop_without_a_bound_validates():
    try:
        device = svod.get_device("WEBGPU:0")
    except svod.errors.DeviceError as err:
        pytest.skip(f"no WebGPU here: {err.detail}")
    renderer = WGSLRenderer("WEBGPU:0", dataclasses.replace(device.caps, max_loop_turns=None))
    device.compiler.compile(renderer.render(collatz()))


@requires_nvrtc
@pytest.mark.parametrize("bounded", [False, True])
def test_cuda_compiles_loops_that_exit_to_ptx(bounded):
    renderer, compiler = svod.compiler_pair("CUDA")
    ptx = compiler.compile(renderer.render(collatz(bounded))).bytes.decode()
    assert ".entry" in ptx


def test_a_device_that_limits_loop_turns_refuses_a_loop_without_a_bound_only():
    limited = WGSLRenderer("WEBGPU:0", DeviceCaps(host_memory=False, overlaps_on_host=False,
                                                  work_groups=WorkGroupLimits(256, (256, 256, 64)),
                                                  max_loop_turns=65535))
    with pytest.raises(GraphError, match="a while loop has no bound on its turns, and WEBGPU:0 stops"):
        limited.render(collatz())
    assert "break" in limited.render(collatz(bounded=True)).src  # counted at its bound: 200 turns


# ---- a failed access ends a loop without a bound -------------------------------------------------------------

def test_a_loop_without_a_bound_ends_once_an_access_fails(device):
    """``while x[j] == 0: j += 1`` over zeros reads past the end; the read gives 0, which would keep the loop
    going for ever: the kernel ends it, and raises."""
    if device.caps.max_loop_turns is not None:
        return
    k = KernelBuilder("skip_zeros")
    out, x, cell = k.buffer(dtypes.int32, 1), k.buffer(dtypes.int32, 6), k.buffer(dtypes.int32, 1)
    k.store(cell[0], 0)
    t = k.range(None, AxisKind.LOOP)
    j = cell[0].load()
    zero = x[j.cast(dtypes.index)].load().eq(0)
    k.store(cell.index(0, zero), j + 1, t)
    k.exit(t, zero.ne(True))
    k.store(out[0], cell[0].load())
    with pytest.raises(IndexOutOfBoundsError, match="has 6 elements"):
        svod.run(k.build(), [np.zeros(1, np.int32), np.zeros(6, np.int32), np.zeros(1, np.int32)], device=device)
