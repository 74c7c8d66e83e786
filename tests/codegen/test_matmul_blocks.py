"""``block_matmul`` on a matmul whose left operand is read transposed (``a.T @ b``: ``a[k, i]``, read at
``k * m + i`` as ``b`` is at ``k * n + j``): the operand blocked and packed is the one read along the output's
columns, and every part it makes passes the race check and computes numpy's answer on every device."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, dtypes, prange
from svod.codegen.matmul_blocks import block_matmul
from svod.codegen.safety import check_races
from svod.ir import kernel_label

SMALL = [(3, 5, 7), (1, 1, 1), (2, 3, 5), (13, 1, 17), (17, 13, 1), (1, 31, 29), (37, 16, 8), (0, 3, 5)]
"""Sums of depth, rows and columns ``(k, m, n)``: 1, primes, none (an empty sum), and sizes off the tiles."""
LARGE = (1024, 784, 512)
"""A ``b`` (2 MiB of float32) past its share of L2 read by enough rows: the launch takes the packed form."""


@svod.kernel
def mm_tn(a, b, out):
    for i in prange(out.shape[0]):
        for j in prange(out.shape[1]):
            s = 0.0
            for k in range(a.shape[0]):
                s += a[k, i] * b[k, j]
            out[i, j] = s


def _transposed_left(sizes: tuple[int, int, int] | None):
    """``out[i, j] = sum_r a[r, i] * b[r, j]`` in float32, of constant sizes, or symbolic ones where None."""
    k = KernelBuilder("mm_tn")
    depth, m, n = sizes or (k.var("k", 0, 4096), k.var("m", 1, 4096), k.var("n", 1, 4096))
    out, a, b = (k.buffer(dtypes.float32, shape) for shape in ((m, n), (depth, m), (depth, n)))
    i, j, r = k.range(m), k.range(n), k.range(depth, AxisKind.REDUCE)
    k.store(out[i, j], (a[r, i] * b[r, j]).reduce(r))
    return k.build()


def _operands(depth: int, m: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((depth, m)).astype(np.float32), rng.standard_normal((depth, n)).astype(np.float32))


def _want(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("sizes", [None, (3, 5, 7), LARGE], ids=["symbolic", "3x5x7", "1024x784x512"])
def test_the_parts_block_b_over_the_output_columns_and_pass_the_race_check(sizes):
    """``a`` read at ``k * m + i`` looks like ``b`` with the rows as its columns; blocked so, the rows past
    the last block were a store the race check did not prove race-free (of the sizes ``@svod.kernel`` gives,
    up to ``2**31 - 1``). Blocked over ``b``, each part is race-free and the check proves it."""
    if sizes is None:
        ast = mm_tn.build(*(np.zeros(s, np.float32) for s in ((3, 5), (3, 7), (5, 7))))
    parts = block_matmul(ast if sizes is None else _transposed_left(sizes))
    b_slot = 1 if sizes is None else 2  # mm_tn's (a, b, out), the builder's (out, a, b)
    if sizes is not None and sizes[0] * sizes[2] * 4 <= 512 * 1024:
        assert parts is None  # b stays in L2: no blocks
        return
    assert parts is not None
    for part in parts:
        check_races(part, kernel_label(part))
    packs = [p for p in parts if kernel_label(p).endswith("_pack")]
    read = {u.src[0].src[0].arg for p in packs for u in p.toposort() if u.op is Ops.LOAD}
    assert packs and read == {b_slot}  # the copy is of b


@pytest.mark.parametrize("sizes", [*SMALL, LARGE], ids=lambda s: "x".join(map(str, s)))
def test_a_transposed_left_matmul_matches_numpy(device, sizes):
    """The kernel as a user writes it (sizes from the arrays: symbolic) and of constant sizes: the large one
    on the CPU pairs, where its packed form is taken (an interpreter takes minutes over it)."""
    if sizes == LARGE and device.name.split(":")[0] != "CPU":
        sizes = (61, 47, 53)
    depth, m, n = sizes
    a, b = _operands(depth, m, n)
    got = np.full((m, n), np.nan, np.float32)
    mm_tn(a, b, got, device=device)
    np.testing.assert_allclose(got, _want(a, b), rtol=1e-4, atol=1e-3)
    constant = np.full((m, n), np.nan, np.float32)
    svod.run(_transposed_left(sizes), [constant, a, b], device=device)
    np.testing.assert_allclose(constant, _want(a, b), rtol=1e-4, atol=1e-3)


def test_special_values_reach_the_outputs_they_are_summed_into(device):
    """NaN, inf and -inf in ``a`` and ``b`` give NaN or infinities where numpy's product does (``inf * 0``
    is NaN), and finite values elsewhere, through every part."""
    a, b = _operands(7, 11, 13, seed=1)
    a[2, 3], a[4, 5], b[1, 6], b[5, 9] = np.nan, np.inf, -np.inf, 0.0
    a[5, 7] = 0.0
    b[5, 1] = np.inf
    got = np.zeros((11, 13), np.float32)
    with np.errstate(invalid="ignore"):
        want = _want(a, b)
    mm_tn(a, b, got, device=device)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, equal_nan=True)
    assert np.isnan(got[3]).all() and np.isnan(got[7, 1])
