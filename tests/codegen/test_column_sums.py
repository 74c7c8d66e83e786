"""A sum over the outer index of a row-major array (a column sum, ``v @ A``), of sizes the kernel reads from its
arrays: ``block_matmul`` streams it in passes of ``STREAM_DEPTH`` rows, each along every column, where a tile of
columns walked down the rows a page apart waited on memory at every row. Every device computes NumPy's answer
over empty, single, prime and off-vector sizes, and NaN, infinities and -0.0 reach the columns they are in."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import Ops, prange
from svod.codegen.matmul_blocks import STREAM_DEPTH, block_matmul
from svod.codegen.safety import check_races
from svod.ir import kernel_label
from svod.ir.ops import CONTINUED

SIZES = [(0, 5), (5, 0), (1, 1), (1, 37), (37, 1), (7, 13), (13, 7), (31, 33), (8, 64), (9, 65), (1031, 3),
         (17, 1029)]
"""Rows and columns: none, one, primes, a multiple of the pass depth and of a vector and one past each, and
more rows than a pass reads (the passes continue the sums the pass before stored)."""


@svod.kernel
def column_sums(out, x):
    for c in prange(x.shape[1]):
        acc = 0.0
        for r in range(x.shape[0]):
            acc += x[r, c]
        out[c] = acc


@svod.kernel
def weighted_column_sums(out, x, w):
    for c in prange(x.shape[1]):
        acc = 0.0
        for r in range(x.shape[0]):
            acc += w[r] * x[r, c]
        out[c] = acc * 0.5


@svod.kernel
def accumulated_column_sums(out, x):
    for c in prange(x.shape[1]):
        acc = 0.0
        for r in range(x.shape[0]):
            acc += x[r, c]
        out[c] += acc


@svod.kernel
def int_column_sums(out, x):
    for c in prange(x.shape[1]):
        acc = 0
        for r in range(x.shape[0]):
            acc += x[r, c]
        out[c] = acc


def _data(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def test_a_column_sum_is_streamed_in_passes_of_rows_and_passes_the_race_check():
    """The rewrite follows what the kernel computes: a sum over the range that strides its loads by the row
    length, into outputs along the unit-stride one, takes passes of ``STREAM_DEPTH`` turns that each continue
    the stored sum, whether the sum is plain, weighted and scaled, or added to what the output holds (summed
    first into a buffer of its own)."""
    out, x, w = np.zeros(3, np.float32), np.zeros((2, 3), np.float32), np.zeros(2, np.float32)
    for ast in (column_sums.build(out, x), weighted_column_sums.build(out, x, w),
                accumulated_column_sums.build(out, x)):
        parts = block_matmul(ast)
        assert parts is not None
        for part in parts:
            check_races(part, kernel_label(part))
        nodes = [u for part in parts for u in part.toposort()]
        assert any(u.op is Ops.ADD and u.arg == CONTINUED for u in nodes)
        reduces = [u for u in nodes if u.op is Ops.REDUCE]
        assert reduces and all(r.src[1].src[0].vmax <= STREAM_DEPTH for r in reduces)


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_column_sums_match_numpy(device, sizes):
    rows, cols = sizes
    x = _data(rows, cols)
    w = np.random.default_rng(1).standard_normal(rows).astype(np.float32)
    got = np.full(cols, np.nan, np.float32)
    column_sums(got, x, device=device)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    weighted = np.full(cols, np.nan, np.float32)
    weighted_column_sums(weighted, x, w, device=device)
    np.testing.assert_allclose(weighted, (w.astype(np.float64) @ x) * 0.5, rtol=1e-5, atol=1e-4)
    accumulated = np.arange(cols, dtype=np.float32)
    accumulated_column_sums(accumulated, x, device=device)
    np.testing.assert_allclose(accumulated, np.arange(cols) + x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("sizes", [(0, 3), (1, 1), (9, 65), (1031, 3)], ids=lambda s: "x".join(map(str, s)))
def test_int_column_sums_are_exact(device, sizes):
    """Integer extremes that cancel within a column give the exact sum."""
    rows, cols = sizes
    x = np.random.default_rng(2).integers(-1000, 1000, (rows, cols), dtype=np.int32)
    if rows >= 2:
        x[0, 0], x[rows - 1, 0] = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    got = np.full(cols, -7, np.int32)
    int_column_sums(got, x, device=device)
    np.testing.assert_array_equal(got, x.astype(np.int64).sum(0))


def test_special_values_reach_their_columns(device):
    """NaN, inf and -inf in one pass or another give NaN or infinities in their own columns only; a column of
    -0.0 sums to zero, and the other columns stay finite."""
    x = _data(21, 11, seed=3)
    x[2, 1], x[12, 3], x[20, 3], x[5, 4], x[17, 6] = np.nan, np.inf, -np.inf, np.inf, -np.inf
    x[:, 9] = -0.0
    got = np.full(11, np.nan, np.float32)
    column_sums(got, x, device=device)
    with np.errstate(invalid="ignore"):
        want = x.astype(np.float64).sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)
    assert np.isnan(got[[1, 3]]).all() and got[4] == np.inf and got[6] == -np.inf and got[9] == 0.0
    assert np.isfinite(np.delete(got, [1, 3, 4, 6])).all()


@pytest.mark.parametrize("sizes", [(9, 5), (17, 13), (1031, 3)], ids=lambda s: "x".join(map(str, s)))
def test_streamed_passes_keep_each_columns_row_order(device, sizes):
    """The passes continue the stored sum, so every column adds its rows in the kernel's order: the bits are
    those of a float32 sum taken row by row, over magnitudes far enough apart that another order rounds
    differently."""
    rows, cols = sizes
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((rows, cols)) * 10.0 ** rng.uniform(-4, 4, (rows, cols))).astype(np.float32)
    want = np.zeros(cols, np.float32)
    for row in x:
        want = want + row
    got = np.full(cols, np.nan, np.float32)
    column_sums(got, x, device=device)
    assert got.tobytes() == want.tobytes()
