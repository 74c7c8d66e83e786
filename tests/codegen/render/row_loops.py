"""Kernels with several loops over one row, and the check of their values, shared by the tests of the row-loop
hints of both CPU pairs (``test_llvm_unroll``, ``test_c_row_loops``): a hint that reached a loop it must not
change shows as a wrong value on the pair that wrote it."""

from __future__ import annotations

import numpy as np

import svod
from svod import AxisKind, KernelBuilder, dtypes
from svod.device import Device
from svod.frontend.pykernel import Kernel
from svod.workloads import layernorm, layernorm_py, softmax, softmax_py

SYMBOLIC = {"softmax": Kernel(softmax_py.fn, name="softmax"), "layernorm": Kernel(layernorm_py.fn, name="layernorm")}
"""The suite's row kernels as ``@svod.kernel`` makes them by default: their sizes variables."""


def two_passes(cols: int, shift: bool, other: bool) -> svod.UOp:
    """``s = sum(x[r, :])``, ``out[r] = s + sum((x'[r, :] - s) * 2)``, the second pass over ``x``'s row, over the
    next element of it (``shift``) or over another buffer's (``other``). It uses the first pass's sum, so the two
    stay two loops (sums that do not share one: ``svod.codegen.lower.share_reduction_loops``)."""
    k = KernelBuilder("two_passes")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, cols + 1))
    y = k.buffer(dtypes.float32, (4, cols))
    r, j1, j2 = k.range(4), k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    first = x[r, j1].reduce(j1)
    second = ((y[r, j2] if other else x[r, j2 + 1] if shift else x[r, j2]) - first) * 2.0
    k.store(out[r], first + second.reduce(j2))
    return k.build()


def rows_to_first_large(cols: svod.UOp | int) -> svod.UOp:
    """``out[r, j] = 2 * x[r, j]`` up to and including the row's first element over 100 (a loop with an early
    exit), then ``out[r, j] += x[r, j]`` over the whole row: two loops over one row, one of them cut short."""
    k = KernelBuilder("to_first_large")
    out, x = k.buffer(dtypes.float32, (4, cols)), k.buffer(dtypes.float32, (4, cols))
    r, j1, j2 = k.range(4), k.range(cols, AxisKind.LOOP), k.range(cols, AxisKind.LOOP)
    k.store(out[r, j1], x[r, j1] * 2)
    k.exit(j1, x[r, j1] > 100.0)
    k.store(out[r, j2], out[r, j2] + x[r, j2])
    return k.build()


def rows_to_first_large_of_n() -> svod.UOp:
    """``rows_to_first_large`` over a variable row ``n``."""
    return rows_to_first_large(KernelBuilder("of_n").var("n", 1, 4096))


def sums_to_length(width: int) -> svod.UOp:
    """``s = sum(x[r, :lengths[r]])``, ``out[r] = s + sum(x[r, :lengths[r]] * s)``: two loops over a row whose end
    is read from memory (the second uses the first's sum, so they stay two)."""
    k = KernelBuilder("sums_to_length")
    out, x, lengths = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, (4, width)), k.buffer(dtypes.int32, 4)
    r = k.range(4)
    end = lengths[r].maximum(0).minimum(width)
    j1, j2 = k.range(end, AxisKind.REDUCE), k.range(end, AxisKind.REDUCE)
    first = x[r, j1].reduce(j1)
    k.store(out[r], first + (x[r, j2] * first).reduce(j2))
    return k.build()


def rows(count: int, cols: int) -> np.ndarray:
    """Normal values with a signed zero, an infinity and a large value in some rows."""
    data = np.random.default_rng(cols).standard_normal((count, cols)).astype(np.float32)
    data[0, cols // 2] = -0.0
    if count > 1:
        data[1, cols - 1] = -np.inf
        data[-1, 0] = 3e4
    return data


def same_rows(got: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


def softmax_of(data: np.ndarray) -> np.ndarray:
    e = np.exp(data - data.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm_of(data: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a row with -inf: a layer norm of NaNs
        mean = data.mean(axis=1, keepdims=True, dtype=np.float64)
        return (data - mean) / np.sqrt(data.var(axis=1, keepdims=True, dtype=np.float64) + 1e-5)


def check_row_kernels(device: Device, count: int, cols: int) -> None:
    """The suite's softmax and layer norm over ``count`` rows of ``cols``, their sizes constants and variables,
    compute numpy's answer on ``device`` (a row with -inf: a softmax with a 0 there, a layer norm of NaNs)."""
    for workload, reference in ((softmax(count, cols), softmax_of), (layernorm(count, cols), layernorm_of)):
        data = rows(count, cols)
        out, symbolic = np.zeros_like(data), np.zeros_like(data)
        svod.run(workload.steps[0].ast, [out, data], device=device)
        SYMBOLIC[workload.name](symbolic, data, device=device)
        expected = reference(data)
        same_rows(out, expected)
        same_rows(symbolic, expected)


def first_over(data: np.ndarray, limit: float) -> np.ndarray:
    """Per row, the index of its first element over ``limit``, or its last index where none is."""
    over = data > limit
    return np.where(over.any(axis=1), over.argmax(axis=1), data.shape[1] - 1)


def check_loops_cut_short(device: Device, cols: int) -> None:
    """Loops over a row with an early exit (a constant or a variable row) or with an end read from memory (zero
    turns too) compute the answer the loops define on ``device``."""
    data = np.random.default_rng(cols).standard_normal((4, cols)).astype(np.float32) * 80
    expected = data + np.where(np.arange(cols) <= first_over(data, 100.0)[:, None], 2 * data, -1.0)
    for ast, sizes in ((rows_to_first_large(cols), {}), (rows_to_first_large_of_n(), {"n": cols})):
        out = np.full_like(data, -1.0)
        svod.run(ast, [out, data], device=device, **sizes)
        np.testing.assert_array_equal(out, expected)
    lengths = np.array([0, 1, cols, -5], np.int32)
    sums = np.full(4, np.nan, np.float32)
    svod.run(sums_to_length(cols), [sums, data, lengths], device=device)
    kept = np.clip(lengths, 0, cols)
    totals = [data[r, :kept[r]].astype(np.float64).sum() for r in range(4)]
    np.testing.assert_allclose(sums, [s + s * s for s in totals], rtol=1e-4, atol=1e-2)
