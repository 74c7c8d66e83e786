from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, dtypes
from svod.codegen.decompositions import EXP_BY_POLYNOMIAL, FLOAT16_IN_FLOAT32
from svod.ir import UOp, graph_rewrite
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
    ordered = [np.where(a.view(np.int32) < 0, -(a.view(np.int32) & 0x7FFFFFFF), a.view(np.int32)).astype(np.int64)
               for a in (got, want)]
    return np.where(np.isnan(got) & np.isnan(want), 0, np.abs(ordered[0] - ordered[1]))


@pytest.mark.parametrize("pair", ["llvm", "clang"])
def test_exp_by_polynomial_is_within_two_ulps_everywhere(pair):
    """Every 97th float32 from -104 to 89 (exp's whole finite, non-zero range, subnormal results included),
    and the special values, against exp in float64 rounded once."""
    device = open_device(pair)
    start, stop = np.float32(-104.0).view(np.int32), np.float32(89.0).view(np.int32)
    sweep = np.concatenate([-np.arange(0, start & 0x7FFFFFFF, 997, dtype=np.int32).view(np.float32),
                            np.arange(0, stop, 997, dtype=np.int32).view(np.float32)])
    specials = np.array([0.0, -0.0, 88.72283, 88.72284, -103.97, -103.98, -1e-40, 1e-40, 1e30, -1e30, np.inf,
                         -np.inf, np.nan], np.float32)
    x = np.concatenate([sweep, specials])
    k = KernelBuilder("exp_sweep")
    out, values = k.buffer(dtypes.float32, len(x)), k.buffer(dtypes.float32, len(x))
    i = k.range(len(x))
    k.store(out[i], values[i].exp())
    got = np.zeros_like(x)
    svod.run(k.build(), [got, x], device=device)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert _ulps(got, want).max() <= 2
    assert np.array_equal(got[-13:], want[-13:], equal_nan=True)  # specials exactly


def test_exp_is_inline_arithmetic_on_the_cpu_pairs():
    x = UOp.define_var("a", 0, 9).cast(dtypes.float32)
    out = graph_rewrite(UOp.sink(x.exp()), EXP_BY_POLYNOMIAL)
    assert not any(u.op is Ops.EXP for u in out.toposort())
    assert graph_rewrite(UOp.sink(x.cast(dtypes.float64).exp()), EXP_BY_POLYNOMIAL).src[0].op is Ops.EXP
