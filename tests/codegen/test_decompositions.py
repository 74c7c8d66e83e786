from __future__ import annotations

from svod import Ops, dtypes
from svod.codegen.decompositions import FLOAT16_IN_FLOAT32
from svod.ir import UOp, graph_rewrite
from svod.ir.ops import ALU


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
