"""Triton's spellings of the suite's softmax, layernorm and matmul, as its users write them: one program per
row for the row kernels, a blocked ``tl.dot`` over the shared dimension for the matmul. Imported only where
Triton and a CUDA GPU are present (``benchmarks.gpu_peers``)."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(out, x, cols, block: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0)
    offsets = tl.arange(0, block)
    inside = offsets < cols
    values = tl.load(x + row * cols + offsets, mask=inside, other=-float("inf"))
    shifted = tl.exp(values - tl.max(values, axis=0))
    tl.store(out + row * cols + offsets, shifted / tl.sum(shifted, axis=0), mask=inside)


@triton.jit
def _layernorm_rows(out, x, cols, eps, block: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0)
    offsets = tl.arange(0, block)
    inside = offsets < cols
    values = tl.load(x + row * cols + offsets, mask=inside, other=0.0)
    mean = tl.sum(values, axis=0) / cols
    centered = tl.where(inside, values - mean, 0.0)
    variance = tl.sum(centered * centered, axis=0) / cols
    tl.store(out + row * cols + offsets, centered * tl.rsqrt(variance + eps), mask=inside)


@triton.jit
def _matmul_tiles(c, a, b, m, n, k, bm: tl.constexpr, bn: tl.constexpr, bk: tl.constexpr,  # type: ignore[no-untyped-def]
                  precision: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * bm + tl.arange(0, bm)
    columns = pid_n * bn + tl.arange(0, bn)
    depth = tl.arange(0, bk)
    acc = tl.zeros((bm, bn), dtype=tl.float32)
    for start in range(0, k, bk):
        inner = start + depth
        left = tl.load(a + rows[:, None] * k + inner[None, :], mask=(rows[:, None] < m) & (inner[None, :] < k),
                       other=0.0)
        right = tl.load(b + inner[:, None] * n + columns[None, :], mask=(inner[:, None] < k) & (columns[None, :] < n),
                        other=0.0)
        acc = tl.dot(left, right, acc, input_precision=precision)
    tl.store(c + rows[:, None] * n + columns[None, :], acc.to(c.dtype.element_ty),
             mask=(rows[:, None] < m) & (columns[None, :] < n))


def _row_warps(block: int) -> int:
    return 4 if block <= 2048 else 8 if block <= 8192 else 16


def softmax(x: Any) -> Any:
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    _softmax_rows[(rows,)](out, x, cols, block=block, num_warps=_row_warps(block))
    return out


def layernorm(x: Any) -> Any:
    rows, cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    _layernorm_rows[(rows,)](out, x, cols, 1e-5, block=block, num_warps=_row_warps(block))
    return out


def matmul(a: Any, b: Any) -> Any:
    """fp32 operands multiply in IEEE fp32 (as svod and torch's default do); fp16 ones on the tensor cores."""
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    half = a.dtype in (torch.float16, torch.bfloat16)
    bm, bn, bk = (128, 128, 64) if half else (64, 64, 32)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _matmul_tiles[grid](c, a, b, m, n, k, bm=bm, bn=bn, bk=bk, precision="tf32" if half else "ieee",
                        num_warps=8 if half else 4, num_stages=3)
    return c
