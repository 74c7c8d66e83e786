"""Fused multiply-add on every backend: MULACC rounds ``a * b + c`` once, and a float32 or float64 sum of
products accumulates each product with one rounding, in the plain loop, the register tile and the GPU's
work items alike. The oracle is the C library's ``fma``/``fmaf`` (correctly rounded in glibc)."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, UOp, dtypes
from svod.dtype import DType
from svod.errors import GraphError
from svod.ir.alu import fused_multiply_add
from svod.ir.uop import alu
from tests.helpers import ieee_inputs, refuses

_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_LIBM.fmaf.restype, _LIBM.fmaf.argtypes = ctypes.c_float, [ctypes.c_float] * 3
_LIBM.fma.restype, _LIBM.fma.argtypes = ctypes.c_double, [ctypes.c_double] * 3
EPSILON = {dtypes.float32: 2.0 ** -23, dtypes.float64: 2.0 ** -52}


def _libm_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    fn = _LIBM.fmaf if a.dtype == np.float32 else _LIBM.fma
    return np.array([fn(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True)], a.dtype)


def _operands(dtype: DType, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random bit patterns, specials, and addends that cancel the product's rounded value (where the fused
    result is the product's rounding error)."""
    rng = np.random.default_rng(seed)
    bits = np.dtype(f"uint{dtype.bits}")
    a, b, c = (rng.integers(0, np.iinfo(bits).max, count, bits, endpoint=True).view(dtype.numpy) for _ in range(3))
    specials = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, np.finfo(dtype.numpy).max,
                         np.finfo(dtype.numpy).smallest_subnormal, 1 + EPSILON[dtype], 1 - EPSILON[dtype]], dtype.numpy)
    grid = np.array(np.meshgrid(specials, specials, specials)).reshape(3, -1)
    a, b, c = (np.concatenate([v, g]) for v, g in zip((a, b, c), grid, strict=True))
    with np.errstate(all="ignore"):
        cancelling = -(a[:count] * b[:count])
    return np.concatenate([a, a[:count]]), np.concatenate([b, b[:count]]), np.concatenate([c, cancelling])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(got, want, equal_nan=True)
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_folding_rounds_once_as_the_c_library_does(dtype):
    a, b, c = _operands(dtype, 3000, seed=1)
    got = np.array([fused_multiply_add(x, y, z, dtype) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(),
                                                                         strict=True)], dtype.numpy)
    _same(got, _libm_fma(a, b, c))


def _mulacc_kernel(dtype: DType, size: int) -> UOp:
    k = KernelBuilder(f"mulacc_{dtype.name}")
    out, a, b, c = (k.buffer(dtype, size) for _ in range(4))
    i = k.range(size)
    k.store(out[i], a[i].alu(Ops.MULACC, b[i], c[i]))
    return k.build()


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_mulacc_rounds_once_on_every_device(device, dtype):
    if refuses(device, dtype):
        return
    a, b, c = _operands(dtype, 500, seed=2)
    out = np.zeros_like(a)
    svod.run(_mulacc_kernel(dtype, len(a)), [out, a, b, c], device=device)
    fused = _libm_fma(a, b, c)
    if device.caps.ieee_floats:
        _same(out, fused)
        return
    with np.errstate(all="ignore"):  # WGSL's fma may round twice (Vulkan allows it, and lavapipe does)
        twice = a * b + c
    compared = ieee_inputs(device, a) & ieee_inputs(device, b) & ieee_inputs(device, c) \
        & ieee_inputs(device, fused) & ieee_inputs(device, twice)
    assert compared.sum() > 400
    assert ((out == fused) | (out == twice))[compared].all()


def test_mulacc_is_float32_or_float64():
    x = UOp.param(0, dtypes.float16, 4)[0].load()
    with pytest.raises(GraphError, match="float32 and float64"):
        alu(Ops.MULACC, x, x, x)


@svod.kernel
def _row_dots(out, x, y):
    for r in svod.prange(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1]):
            s += x[r, k] * y[r, k]
        out[r] = s


@svod.kernel
def _matmul(out, a, b):
    for i in svod.prange(a.shape[0]):
        for j in svod.prange(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            out[i, j] = s


def _cancelling(dtype: DType, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[-1, 1 + e]`` and ``[1, 1 - e]``: the sum of their products is ``-e**2`` when each product is
    added with one rounding, and 0 when ``(1 + e)(1 - e)`` is rounded to 1 first."""
    e = EPSILON[dtype]
    return (np.tile(np.array([-1.0, 1 + e], dtype.numpy), (rows, 1)),
            np.tile(np.array([[1.0], [1 - e]], dtype.numpy), (1, cols)))


LANE_SPAN = 64
"""Terms apart in a row: a multiple of every split of a vectorised sum into lanes (and unrolled accumulators),
so the later of two terms this far apart is added to the earlier one's lane, or, in the loop's scalar tail, to
the lanes' total: to the earlier term and zeros either way, as in the sequential sum. (A compiler may vectorise
a dot product of two terms, as gcc does in two lanes: those two were added only as the lanes' totals.)"""


def _spaced(rows: np.ndarray, span: int) -> np.ndarray:
    """``rows``' two columns ``span`` terms apart, zeros between them (whose products add nothing)."""
    spaced = np.zeros((rows.shape[0], span + 1), rows.dtype)
    spaced[:, 0], spaced[:, span] = rows[:, 0], rows[:, 1]
    return spaced


def _expected_sum(device, dtype: DType, out: np.ndarray) -> np.ndarray:
    """``-e**2`` where each product is added with one rounding; on a device whose ``fma`` may round twice
    (WGSL's: Vulkan allows it, and lavapipe does), 0 is its other answer, the same in every output."""
    fused = np.full(out.shape, -EPSILON[dtype] ** 2, dtype.numpy)
    if device.caps.ieee_floats or out.flat[0] == fused.flat[0]:
        return fused
    return np.zeros_like(fused)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_a_sum_of_products_rounds_each_product_with_its_addition(device, dtype, rows):
    if refuses(device, dtype):
        return
    x, y = _cancelling(dtype, rows, 1)
    x, y = _spaced(x, LANE_SPAN), _spaced(np.tile(y.T, (rows, 1)), LANE_SPAN)
    out = np.ones(rows, dtype.numpy)
    _row_dots(out, x, y, device=device)
    assert (out == _expected_sum(device, dtype, out)).all(), out


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
@pytest.mark.parametrize(("m", "n"), [(1, 1), (7, 31), (8, 32), (9, 33), (64, 65)])
def test_a_matmul_rounds_each_product_with_its_addition_in_every_tile(device, dtype, m, n):
    if refuses(device, dtype):
        return
    a, b = _cancelling(dtype, m, n)
    out = np.ones((m, n), dtype.numpy)
    _matmul(out, a, b, device=device)
    assert (out == _expected_sum(device, dtype, out)).all(), out
