"""CUDA: every corpus kernel renders and compiles to PTX with nvrtc (no GPU needed); running needs one."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.backends.cuda import NVRTCCompiler
from svod.codegen.render.cuda import CUDARenderer
from svod.device import entry_symbol
from svod.errors import CompileError, DeviceError

nvrtc_missing = None
try:
    NVRTCCompiler()
except DeviceError as err:
    nvrtc_missing = err.detail
requires_nvrtc = pytest.mark.skipif(nvrtc_missing is not None, reason=f"nvrtc unavailable: {nvrtc_missing}")


def _corpus():
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 20)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    yield k.build()
    k = KernelBuilder("matmul")
    c, a, b = (k.buffer(dtypes.float32, 17 * 19) for _ in range(3))
    i, j = k.range(17), k.range(19)
    r = k.range(13, AxisKind.REDUCE)
    k.store(c[i * 19 + j], (a[i * 13 + r] * b[r * 19 + j]).reduce(r, op=svod.Ops.MAX))
    yield k.build()
    k = KernelBuilder("ints")
    q, x64, y8 = k.buffer(dtypes.int32, 64), k.buffer(dtypes.int64, 64), k.buffer(dtypes.uint8, 64)
    f = k.buffer(dtypes.float64, 64)
    i = k.range(64)
    k.store(q[i], (x64[i] // (x64[i] % 7 + 1)).cast(dtypes.int32) * 3 - 1)
    k.store(y8[i], y8[i] + 200)
    k.store(f[i], (f[i] < 0.0).where(-f[i], f[i].sqrt()).maximum(f[i].bitcast(dtypes.int64).cast(dtypes.float64)))
    yield k.build()


@requires_nvrtc
@pytest.mark.parametrize("ast", list(_corpus()), ids=lambda a: a.arg)
def test_corpus_compiles_to_ptx(ast):
    renderer, compiler = svod.compiler_pair("CUDA")
    spec = renderer.render(ast)
    compiled = compiler.compile(spec)
    ptx = compiled.bytes.decode()
    assert f".entry {entry_symbol(ast.arg, spec.ast)}(" in ptx
    assert ".target sm_90" in ptx
    assert spec.local_size is not None
    assert "threadIdx" in spec.src


@requires_nvrtc
def test_the_architecture_is_settable():
    renderer = CUDARenderer()
    compiled = NVRTCCompiler("sm_80").compile(renderer.render(next(_corpus())))
    assert ".target sm_80" in compiled.bytes.decode()
    with pytest.raises(DeviceError, match="sm_90"):
        NVRTCCompiler("hopper")


@requires_nvrtc
def test_nvrtc_errors_carry_the_log():
    renderer, compiler = svod.compiler_pair("CUDA")
    spec = renderer.render(next(_corpus()))
    spec.src = spec.src.replace("const long long n", "const long long n = ;")
    with pytest.raises(CompileError, match="nvrtc failed") as info:
        compiler.compile(spec)
    assert "error" in info.value.log and info.value.source == spec.src


@requires_nvrtc
def test_float16_compiles_as_bits_computed_in_float32():
    """The nvrtc wheel ships no cuda_fp16.h: halves are stored as their bits and computed in float32."""
    k = KernelBuilder("half")
    out, x = k.buffer(dtypes.float16, 4), k.buffer(dtypes.float64, 4)
    i = k.range(4)
    k.store(out[i], out[i] * 3.0 + x[i].cast(dtypes.float16))
    spec = CUDARenderer().render(k.build())
    assert "svod_f32_to_f16" in spec.src and "svod_f64_to_f16" in spec.src and "_Float16" not in spec.src
    assert b".entry" in NVRTCCompiler().compile(spec).bytes


def test_device_says_why_it_is_missing():
    if "CUDA:0" in svod.available_devices():
        pytest.skip("a CUDA GPU is present; the missing-driver path cannot be seen here")
    with pytest.raises(DeviceError) as info:
        svod.get_device("CUDA")
    assert "driver" in info.value.detail or "not installed" in info.value.detail
    assert "CUDA:0" not in svod.available_devices()


@pytest.mark.skipif("CUDA:0" not in svod.available_devices(), reason="no CUDA GPU and driver on this machine")
def test_saxpy_runs_on_the_gpu():
    ast = next(_corpus())
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    svod.run(ast, [out, x], device="CUDA", n=999)
    np.testing.assert_array_equal(out[:999], x[:999] * 2 + 1)


def _new_constructs():
    from tests.kernels import nested_corpus
    yield from (ast for ast, _ in nested_corpus())
    for dtype in (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64):
        for update in ("atomic_add", "atomic_max", "atomic_min"):
            k = KernelBuilder(f"{update}_{dtype.name}")
            out, x, idx = k.buffer(dtype, 16), k.buffer(dtype, 100), k.buffer(dtypes.int32, 100)
            i = k.range(100)
            getattr(k, update)(out[idx[i]], x[i])  # a data-dependent index: bounds-checked at run time
            yield k.build()
    k = KernelBuilder("guarded_and_converted")
    out, x = k.buffer(dtypes.float32, 10), k.buffer(dtypes.float32, 10)
    i = k.range(10)
    padded = (i + 1 < 10).where(x[i + 1], 0.0)
    k.store(out[i], padded.maximum(x[i]).minimum(2.0) + x[i].cast(dtypes.int8).cast(dtypes.float32))
    yield k.build()


@requires_nvrtc
@pytest.mark.parametrize("ast", list(_new_constructs()), ids=lambda a: a.arg)
def test_nested_reductions_atomics_gates_and_checks_compile_to_ptx(ast):
    renderer, compiler = svod.compiler_pair("CUDA")
    spec = renderer.render(ast)
    ptx = compiler.compile(spec).bytes.decode()
    assert f".entry {entry_symbol(ast.arg, spec.ast)}(" in ptx
    if ast.arg.startswith("atomic"):
        assert "atom." in ptx


@requires_nvrtc
def test_math_vocabulary_and_shifts_compile_to_ptx():
    k = KernelBuilder("vocabulary")
    out, x, bits = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8), k.buffer(dtypes.int32, 8)
    i = k.range(8)
    v = x[i]
    total = v.exp() + v.log() + v.cos() + v.tan() + v.tanh() + v.erf() + v.floor() + v.ceil() + v.trunc()
    k.store(out[i], total + v.round() + v ** 1.5 + v.sigmoid() + v.rsqrt() + v.clamp(0.0, 1.0))
    k.store(bits[i], (bits[i] << 3) ^ (bits[i] >> 2) ^ ~bits[i])
    spec = CUDARenderer().render(k.build())
    assert "erff(" in spec.src and "powf(" in spec.src and "rintf(" in spec.src
    assert b".entry" in NVRTCCompiler().compile(spec).bytes


@requires_nvrtc
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_a_sum_of_products_compiles_to_fused_multiply_adds(dtype):
    """nvrtc runs with ``--fmad=false``: the only fused multiply-adds are those the kernel means."""
    k = KernelBuilder(f"matmul_{dtype.name}")
    c, a, b = (k.buffer(dtype, 17 * 19) for _ in range(3))
    i, j, r = k.range(17), k.range(19), k.range(13, AxisKind.REDUCE)
    k.store(c[i * 19 + j], (a[i * 13 + r] * b[r * 19 + j]).reduce(r))
    renderer, compiler = svod.compiler_pair("CUDA")
    ptx = compiler.compile(renderer.render(k.build())).bytes.decode()
    assert f"fma.rn.f{dtype.bits}" in ptx
