"""Random elementwise kernels: every compiled backend must agree with the PYTHON reference."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod import KernelBuilder, Ops, UOp, dtypes
from svod.dtype import DType
from tests.helpers import ieee_inputs, refuses


def _compiled_devices() -> list[svod.device.Device]:
    """Every compiled device that works here (each CPU pair, OpenCL where a platform exists, CUDA where a GPU
    and its driver do, WebGPU where an adapter does)."""
    found = []
    for name, compiler in (("CPU", "llvm"), ("CPU", "clang"), ("CL:0", None), ("CUDA:0", None),
                           ("WEBGPU:0", None)):
        try:
            found.append(svod.get_device(name, compiler))
        except svod.errors.DeviceError:
            continue
    return found


COMPILED_DEVICES = _compiled_devices()
INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64]
FLOAT_DTYPES = [dtypes.float32, dtypes.float64]
INT_BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR]
FLOAT_BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.FMOD]


def _trees(dtype: DType) -> st.SearchStrategy:
    binary = FLOAT_BINARY if dtype.is_float else INT_BINARY
    unary = ["neg", "abs"] + (["sqrt_abs"] if dtype.is_float else [])
    leaf = st.sampled_from(["a", "b", "c"]) | st.integers(-9, 9).map(lambda v: ("const", v))

    def extend(kids: st.SearchStrategy) -> st.SearchStrategy:
        return (st.tuples(st.sampled_from(binary), kids, kids)
                | st.tuples(st.sampled_from(unary), kids)
                | st.tuples(st.just("where"), st.sampled_from([Ops.CMPLT, Ops.CMPNE]), kids, kids, kids, kids))

    return st.recursive(leaf, extend, max_leaves=10)


def _build(tree, leaves: dict[str, UOp], dtype: DType) -> UOp:
    if isinstance(tree, str):
        return leaves[tree]
    head, *rest = tree
    if head == "const":
        value = rest[0] if dtype.kind == "int" else abs(rest[0]) if dtype.is_unsigned else rest[0]
        return UOp.const(dtype, float(value) if dtype.is_float else value)
    if head == "neg":
        return -_build(rest[0], leaves, dtype)
    if head == "abs":
        return abs(_build(rest[0], leaves, dtype))
    if head == "sqrt_abs":
        return abs(_build(rest[0], leaves, dtype)).sqrt()
    if head == "where":
        cmp, x, y, t, f = rest
        cond = _build(x, leaves, dtype).alu(cmp, _build(y, leaves, dtype))
        return cond.where(_build(t, leaves, dtype), _build(f, leaves, dtype))
    return _build(rest[0], leaves, dtype).alu(head, _build(rest[1], leaves, dtype))


def _inputs(dtype: DType, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype.is_float:
        return [rng.uniform(-100, 100, size).astype(dtype.numpy) for _ in range(3)]
    info = np.iinfo(dtype.numpy)
    low, high = max(info.min, -1000), min(info.max, 1000)
    return [rng.integers(low, high, size, endpoint=True).astype(dtype.numpy) for _ in range(3)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(INT_DTYPES + FLOAT_DTYPES).flatmap(lambda dt: st.tuples(st.just(dt), _trees(dt))),
       st.integers(1, 70), st.integers(0, 2**16))
def test_random_elementwise_kernels_agree_with_python(case, size, seed):
    dtype, tree = case
    k = KernelBuilder("prop")
    out = k.buffer(dtype, size)
    a, b, c = (k.buffer(dtype, size) for _ in range(3))
    i = k.range(size)
    k.store(out[i], _build(tree, {"a": a[i], "b": b[i], "c": c[i]}, dtype))
    ast = k.build()
    inputs = _inputs(dtype, size, seed)
    expected = np.zeros(size, dtype.numpy)
    svod.run(ast, [expected, *inputs], device="PYTHON")
    for device in COMPILED_DEVICES:
        if refuses(device, dtype):
            continue
        got = np.zeros(size, dtype.numpy)
        svod.run(ast, [got, *inputs], device=device)
        compared = ieee_inputs(device, expected) if dtype.is_float else np.ones(size, bool)
        if device.caps.ieee_floats or not dtype.is_float:
            np.testing.assert_array_equal(got[compared], expected[compared], err_msg=f"{device} {dtype!r} {tree}")
        else:  # its compiler may reorder float arithmetic: a few roundings of the inputs' size apart
            np.testing.assert_allclose(got[compared], expected[compared], rtol=1e-5, atol=1e-4,
                                       err_msg=f"{device} {dtype!r} {tree}")


def _contraction(m: int, n: int, kk: int, op: Ops, transpose_b: bool):
    """out[i, j] = op-reduce over r of a[i, r] * b[r, j] (or b[j, r]), the shape upcasting rewrites."""
    k = KernelBuilder("contraction")
    out, a, b = k.buffer(dtypes.float32, m * n), k.buffer(dtypes.float32, m * kk), k.buffer(dtypes.float32, kk * n)
    i, j = k.range(m), k.range(n)
    r = k.range(kk, svod.AxisKind.REDUCE)
    b_index = j * kk + r if transpose_b else r * n + j
    k.store(out[i * n + j], (a[i * kk + r] * b[b_index]).reduce(r, op=op))
    return k.build()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 3, 4, 8, 12, 16, 20]), st.sampled_from([1, 5, 16, 17, 32, 48]),
       st.sampled_from([1, 2, 7, 16]), st.sampled_from([Ops.ADD, Ops.MAX]), st.booleans())
def test_random_contractions_agree_with_numpy(m, n, kk, op, transpose_b):
    rng = np.random.default_rng(m * 1000 + n * 10 + kk)
    a = rng.standard_normal((m, kk)).astype(np.float32)
    b = rng.standard_normal((n, kk) if transpose_b else (kk, n)).astype(np.float32)
    products = a[:, None, :] * (b[None, :, :] if transpose_b else b.T[None, :, :])
    expected = products.sum(axis=2) if op is Ops.ADD else products.max(axis=2)
    ast = _contraction(m, n, kk, op, transpose_b)
    for device in COMPILED_DEVICES:
        got = np.zeros(m * n, np.float32)
        svod.run(ast, [got, a.reshape(-1), b.reshape(-1)], device=device)
        np.testing.assert_allclose(got.reshape(m, n), expected, rtol=1e-5, atol=1e-5, err_msg=str(device))
