from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, dtypes
from svod.codegen.decompositions import CPU_MATH, FLOAT16_IN_FLOAT32, TRUNCATING_DIVISION_BY_SAFE_DIVISORS
from svod.codegen.render.wgsl import WGSLRenderer
from svod.device import DeviceCaps, WorkGroupLimits
from svod.ir import UOp, graph_rewrite
from svod.ir.alu import exec_alu, wrap_int
from svod.ir.ops import ALU
from tests.helpers import open_device


def _half_alus(root: UOp) -> list[UOp]:
    return [u for u in root.toposort() if u.op in ALU and u.op is not Ops.WHERE
            and dtypes.float16 in (u.dtype, *(s.dtype for s in u.src))]


def test_float16_ops_compute_in_float32_and_round_back():
    a, b = UOp.define_var("a", 0, 9).cast(dtypes.float16), UOp.define_var("b", 0, 9).cast(dtypes.float16)
    root = UOp.sink((a * b + a).sqrt() < b, (a < b).where(a - b, b))
    out = graph_rewrite(root, FLOAT16_IN_FLOAT32)
    assert _half_alus(root) and not _half_alus(out)
    wheres = [u for u in out.toposort() if u.op is Ops.WHERE]
    assert [w.dtype for w in wheres] == [dtypes.float16]
    products = [u for u in out.toposort() if u.op is Ops.MUL]
    assert [p.dtype for p in products] == [dtypes.float32]
    assert all(s.op is Ops.CAST and s.src[0].dtype == dtypes.float16 for s in products[0].src)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """How many floats of ``got``'s dtype lie between each pair (0 for two NaNs)."""
    bits = np.dtype(f"int{8 * got.itemsize}")
    sign = np.array(-1, bits) ^ np.iinfo(bits).max  # the sign bit alone
    a, b = (np.where(v.view(bits) < 0, -(v.view(bits) & ~sign), v.view(bits)).astype(np.int64) for v in (got, want))
    apart = np.where((a < 0) == (b < 0), np.abs(a - b), np.abs(a.astype(np.float64)) + np.abs(b.astype(np.float64)))
    return np.where(np.isnan(got) & np.isnan(want), 0, apart)


def _float32_sweep(start: float, stop: float) -> np.ndarray:
    """Every 997th float32 from ``start`` to ``stop``, by their bits."""
    low, high = np.float32(start).view(np.int32), np.float32(stop).view(np.int32)
    return np.concatenate([-np.arange(0, low & 0x7FFFFFFF, 997, dtype=np.int32).view(np.float32) if start < 0 else
                           np.zeros(0, np.float32), np.arange(0, high, 997, dtype=np.int32).view(np.float32)])


def _float64_sample(start: float, stop: float, count: int = 200_003) -> np.ndarray:
    """``count`` float64s from ``start`` to ``stop``, spread evenly over their bits on each side of 0 (every
    binade of a wide range is sampled) and evenly over the values (the binades near the ends are too)."""
    def by_bits(a: float, b: float, n: int) -> np.ndarray:
        low, high = np.float64(a).view(np.int64), np.float64(b).view(np.int64)
        return np.linspace(low, high, n).astype(np.int64).view(np.float64)
    halves = [by_bits(0.0, stop, count // 4) if stop > 0 else np.zeros(0),
              -by_bits(0.0, -start, count // 4) if start < 0 else np.zeros(0)]
    return np.concatenate([*halves, np.linspace(start / 2, stop / 2, count // 2) * 2])


def _computed_on(pair: str, x: np.ndarray, function) -> np.ndarray:
    k = KernelBuilder("math_sweep")
    dtype = dtypes.float64 if x.dtype == np.float64 else dtypes.float32
    out, values = k.buffer(dtype, len(x)), k.buffer(dtype, len(x))
    i = k.range(len(x))
    k.store(out[i], function(values[i]))
    got = np.zeros_like(x)
    svod.run(k.build(), [got, x], device=open_device(pair))
    return got


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_exp_by_polynomial_is_within_two_ulps_everywhere(pair):
    """Every 997th float32 from -104 to 89 (exp's whole finite, non-zero range, subnormal results included),
    and the special values, against exp in float64 rounded once."""
    specials = np.array([0.0, -0.0, 88.72283, 88.72284, -103.97, -103.98, -1e-40, 1e-40, 1e30, -1e30, np.inf,
                         -np.inf, np.nan], np.float32)
    x = np.concatenate([_float32_sweep(-104.0, 89.0), specials])
    got = _computed_on(pair, x, UOp.exp)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert _ulps(got, want).max() <= 2
    assert np.array_equal(got[-13:], want[-13:], equal_nan=True)  # specials exactly


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_log_by_polynomial_is_within_two_ulps_everywhere(pair):
    """Every 997th float32 of either sign (subnormals and the largest included), against log in float64
    rounded once; zeros, infinities, negatives and NaN exactly as the C library has them."""
    specials = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, 1e-40, 3.4e38, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([_float32_sweep(-3.4e38, 3.4e38), specials])
    got = _computed_on(pair, x, UOp.log)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x.astype(np.float64)).astype(np.float32)
    assert _ulps(got, want).max() <= 2
    assert np.array_equal(got[-10:], want[-10:], equal_nan=True)


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_erf_by_polynomials_is_within_three_ulps_everywhere(pair):
    """Every 997th float32 from -5 to 5 (erf is +-1 in float32 beyond), and the special values."""
    specials = np.array([0.0, -0.0, 1e-45, -1e-40, 10.0, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([_float32_sweep(-5.0, 5.0), np.float32([0.5, -0.5]), specials])
    got = _computed_on(pair, x, UOp.erf)
    want = np.array([math.erf(v) if not np.isnan(v) else v for v in x.astype(np.float64)]).astype(np.float32)
    assert _ulps(got, want).max() <= 3
    assert np.array_equal(got[-8:], want[-8:], equal_nan=True)


_FLOAT64_SPECIALS = np.array([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-310,
                              1.7976931348623157e308, -1.7976931348623157e308, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_float64_exp_by_polynomial_is_within_one_ulp(pair):
    """float64s over exp's whole range (subnormal results, the edges of overflow and underflow) and the
    special values, against the C library's exp (numpy's)."""
    edges = np.array([709.782712893384, 709.7827128933841, -708.3964185322641, -745.1332191019411,
                      -745.1332191019412, -1e-300, 1e-300, 1e-17])
    x = np.concatenate([_float64_sample(-750.0, 712.0), edges, _FLOAT64_SPECIALS])
    got = _computed_on(pair, x, UOp.exp)
    with np.errstate(over="ignore"):
        want = np.exp(x)
    assert _ulps(got, want).max() <= 1
    assert np.array_equal(got[-len(_FLOAT64_SPECIALS):], want[-len(_FLOAT64_SPECIALS):], equal_nan=True)


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_float64_log_by_polynomial_is_within_two_ulps(pair):
    """float64s of either sign over every binade (subnormals and the largest included), and numbers near 1,
    against the C library's log; zeros, infinities, negatives and NaN exactly as it has them."""
    x = np.concatenate([_float64_sample(-1.7e308, 1.7e308), np.linspace(0.5, 2.0, 100_001), [-1.0, 1.0],
                        _FLOAT64_SPECIALS])
    got = _computed_on(pair, x, UOp.log)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x)
    assert _ulps(got, want).max() <= 2
    assert np.array_equal(got[-15:], want[-15:], equal_nan=True)


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_float64_erf_by_polynomials_is_within_two_ulps(pair):
    """float64s from -7 to 7 (erf is +-1 beyond 6), both sides of where the series hands over to the tail,
    and the special values, against Python's ``math.erf``."""
    x = np.concatenate([_float64_sample(-7.0, 7.0), np.linspace(0.74, 0.76, 2001), [0.75, -0.75, 6.0, 30.0],
                        _FLOAT64_SPECIALS])
    got = _computed_on(pair, x, UOp.erf)
    want = np.array([math.erf(v) if not np.isnan(v) else v for v in x])
    assert _ulps(got, want).max() <= 2
    assert np.array_equal(got[-len(_FLOAT64_SPECIALS):], want[-len(_FLOAT64_SPECIALS):], equal_nan=True)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_exp_log_and_erf_are_inline_arithmetic_on_the_cpu_pairs(dtype):
    """float32 and float64 math becomes arithmetic a vectoriser widens, not the C library's scalar calls."""
    x = UOp.define_var("a", 0, 9).cast(dtype)
    for function in (UOp.exp, UOp.log, UOp.erf):
        out = graph_rewrite(UOp.sink(function(x)), CPU_MATH)
        assert not any(u.op in (Ops.EXP, Ops.LOG, Ops.ERF) for u in out.toposort())


_EDGES = (-2**31, -2**31 + 1, -1000, -7, -3, -1, 0, 1, 3, 7, 1000, 2**31 - 2, 2**31 - 1)


def _as_glsl_on_llvmpipe(root: UOp, env: dict[str, int]) -> int:
    """``root`` evaluated as wgpu's OpenGL adapter computes it: a division by 0 (or MIN / -1) has no defined
    result, so it fails here, and ``%`` is the unsigned remainder of the bits (llvmpipe's 7 % -3 == 7)."""
    values: dict[UOp, int] = {}
    for node in root.toposort():
        args = [values[s] for s in node.src]
        if node.op is Ops.IDIV:
            assert args[1] != 0 and (args[0], args[1]) != (-2**31, -1), "a division GLSL leaves undefined"
        if node.op is Ops.MOD:
            values[node] = wrap_int((args[0] % 2**32) % (args[1] % 2**32), node.dtype)
        elif node.op in (Ops.CONST, Ops.DEFINE_VAR):
            values[node] = node.arg if node.op is Ops.CONST else env[node.arg[0]]
        else:
            values[node] = exec_alu(node.op, node.dtype, args)
    return values[root]


@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
def test_integer_division_by_safe_divisors_keeps_svods_definitions_where_glsl_does_not(op):
    a, b = UOp.define_var("a", -2**31, 2**31 - 1, dtypes.int32), UOp.define_var("b", -2**31, 2**31 - 1, dtypes.int32)
    native = UOp(op, dtypes.int32, (a, b))
    safe = graph_rewrite(native, TRUNCATING_DIVISION_BY_SAFE_DIVISORS)
    assert Ops.MOD not in {u.op for u in safe.toposort()}
    wrong = 0
    for x, y in itertools.product(_EDGES, _EDGES):
        want = exec_alu(op, dtypes.int32, [x, y])
        assert _as_glsl_on_llvmpipe(safe, {"a": x, "b": y}) == want, (x, y)
        if y != 0 and (x, y) != (-2**31, -1):
            wrong += _as_glsl_on_llvmpipe(native, {"a": x, "b": y}) != want
    assert wrong > 0 if op is Ops.MOD else wrong == 0  # the model: GLSL's / truncates, its % does not


def test_a_division_proven_safe_is_left_to_the_device():
    """A non-negative dividend over a positive divisor (index arithmetic) keeps the device's ``/`` and ``%``;
    a negative one keeps its ``/`` but takes the remainder from the quotient."""
    i, n = UOp.define_var("i", 0, 99, dtypes.int32), UOp.define_var("n", 1, 8, dtypes.int32)
    root = UOp.sink(i // n, i % n, i // 3, i % 3)
    assert graph_rewrite(root, TRUNCATING_DIVISION_BY_SAFE_DIVISORS) is root
    signed = UOp.define_var("s", -99, 99, dtypes.int32)
    rewritten = graph_rewrite(signed % 3, TRUNCATING_DIVISION_BY_SAFE_DIVISORS)
    assert rewritten.op is Ops.SUB and [u.op for u in rewritten.toposort()].count(Ops.IDIV) == 1
    assert not any(u.op is Ops.WHERE for u in rewritten.toposort())


def _wgsl(native_integer_division: bool) -> WGSLRenderer:
    return WGSLRenderer("WEBGPU:0", DeviceCaps(host_memory=False, overlaps_on_host=False,
                                               work_groups=WorkGroupLimits(256, (256, 256, 64)),
                                               native_integer_division=native_integer_division))


def test_the_wgsl_for_an_opengl_adapter_has_no_remainder_and_a_cache_key_of_its_own():
    k = KernelBuilder("divmod")
    q, r, a, b = (k.buffer(dtypes.int32, 64) for _ in range(4))
    i = k.range(64)
    k.store(q[i], a[i] // b[i])
    k.store(r[i], a[i] % b[i])
    native, guarded = (_wgsl(flag).render(k.build()).src for flag in (True, False))
    assert "%" in native and "%" not in guarded
    assert "select(" in guarded and guarded.count("/") == native.count("/")  # one quotient serves both
    assert _wgsl(True).cache_key != _wgsl(False).cache_key
