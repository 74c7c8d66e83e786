"""Rewrite rules a renderer's ``decompositor()`` is built from: each turns an op a device lacks into ops it
has, keeping svod's meaning of the op exactly.

They run twice in a kernel's life, with the same matcher: on the lowered kernel (``lower.decompose``), and
on the accumulator updates the linearizer creates for REDUCEs (``linearize(decompositor=...)``).
"""

from __future__ import annotations

from svod.dtype import dtypes
from svod.ir import Ops, PatternMatcher, UOp, UPat
from svod.ir.ops import ALU


def _half_in_float32(node: UOp) -> UOp | None:
    """An ALU op on float16 operands computed in float32, its float16 result rounded back. For ``+ - * /``
    and ``sqrt`` that is the correctly rounded half (float32 carries more than twice a half's precision,
    so rounding twice is rounding once); math functions are as exact as their float32 versions."""
    if node.op is Ops.WHERE or dtypes.float16 not in (node.dtype, *(s.dtype for s in node.src)):
        return None
    wide = tuple(s.cast(dtypes.float32) if s.dtype == dtypes.float16 else s for s in node.src)
    result_dtype = dtypes.float32 if node.dtype == dtypes.float16 else node.dtype
    result = UOp(node.op, result_dtype, wide, node.arg)
    return result.cast(dtypes.float16) if node.dtype == dtypes.float16 else result


FLOAT16_IN_FLOAT32 = PatternMatcher([(UPat(ALU, name="node"), _half_in_float32)])
"""float16 arithmetic for a device that stores halves but has no half arithmetic: every ALU op (but
``where``, which only chooses) reads its halves as float32 and rounds its float16 result back."""


__all__ = ["FLOAT16_IN_FLOAT32"]
