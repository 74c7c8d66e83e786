"""Monte-Carlo pi with random numbers drawn inside the kernels: svod's ``@svod.kernel`` (Philox4x32-10,
``svod.random``) beside numba's ``@njit(parallel=True)`` with its own ``np.random`` (a Mersenne Twister per
thread), written the same way::

    python -m benchmarks.monte_carlo_pi [--points 50000000] [--repeats 5]

Two forms, each timed as a median of calls after warm-up (``benchmarks.timing``): ``per_point`` writes each
point's hit into an int8 array (one work item per point), ``blocked`` counts hits over blocks of points (a work
item per block, a sequential loop of draws in it; numba's form is its parallel reduction ``hits += 1``). Each
point is two draws. Figures are ms and numba / svod (above 1: svod is faster).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import svod
from benchmarks.timing import median_seconds

BLOCK = 4096
"""Points per work item of the blocked form."""


@svod.kernel
def pi_per_point(hits):  # type: ignore[no-untyped-def]
    for i in svod.prange(hits.shape[0]):
        x = np.random.random()
        y = np.random.random()
        hits[i] = 1 if x * x + y * y < 1.0 else 0


@svod.kernel
def pi_blocked(counts, per_block):  # type: ignore[no-untyped-def]
    for b in svod.prange(counts.shape[0]):
        hits = 0
        for _ in range(per_block):
            x = np.random.random()
            y = np.random.random()
            if x * x + y * y < 1.0:
                hits += 1
        counts[b] = hits


def _numba() -> tuple[Any, Any] | None:
    """numba's two forms, or None where numba is not installed."""
    try:
        from numba import njit, prange
    except ImportError:
        return None

    @njit(parallel=True, cache=False)
    def per_point(hits: Any) -> None:
        for i in prange(hits.shape[0]):
            x = np.random.random()
            y = np.random.random()
            hits[i] = 1 if x * x + y * y < 1.0 else 0

    @njit(parallel=True, cache=False)
    def blocked(points: int) -> int:
        hits = 0
        for _ in prange(points):
            x = np.random.random()
            y = np.random.random()
            if x * x + y * y < 1.0:
                hits += 1
        return hits

    return per_point, blocked


def run(points: int, repeats: int) -> list[tuple[str, float, float | None]]:
    """Per form: its name, svod's ms and numba's (None without numba)."""
    blocks = -(-points // BLOCK)
    hits, counts = np.zeros(points, np.int8), np.zeros(blocks, np.int64)
    rows: list[tuple[str, float, float | None]] = []
    peers = _numba()
    svod_point = median_seconds(lambda: pi_per_point(hits), repeats)
    estimate = 4.0 * hits.mean()
    svod_block = median_seconds(lambda: pi_blocked(counts, BLOCK), repeats)
    blocked_estimate = 4.0 * counts.sum() / (blocks * BLOCK)
    if abs(estimate - np.pi) > 0.01 or abs(blocked_estimate - np.pi) > 0.01:
        raise AssertionError(f"svod's estimates of pi are {estimate} and {blocked_estimate}")
    numba_point = numba_block = None
    if peers is not None:
        per_point, blocked = peers
        numba_point = median_seconds(lambda: per_point(hits), repeats)
        numba_block = median_seconds(lambda: blocked(blocks * BLOCK), repeats)
    rows.append(("per_point", svod_point * 1e3, None if numba_point is None else numba_point * 1e3))
    rows.append(("blocked", svod_block * 1e3, None if numba_block is None else numba_block * 1e3))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--points", type=int, default=50_000_000, help="points (two draws each)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"Monte-Carlo pi, {args.points} points ({2 * args.points} draws), CPU, "
          f"{svod.get_device('CPU').caps.threads} threads")
    print(f"{'form':<10} {'svod ms':>10} {'numba ms':>10} {'numba/svod':>11}")
    for name, ours, theirs in run(args.points, args.repeats):
        ratio = "" if theirs is None else f"{theirs / ours:11.2f}"
        shown = "-" if theirs is None else f"{theirs:10.1f}"
        print(f"{name:<10} {ours:10.1f} {shown:>10} {ratio}")


if __name__ == "__main__":
    main()
