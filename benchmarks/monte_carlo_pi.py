"""Monte-Carlo pi and random walks with random numbers drawn on the device: svod (Philox4x32-10,
``svod.random``) beside numba's ``@njit(parallel=True)`` with its own ``np.random`` (a Mersenne Twister per
thread), written the same way::

    python -m benchmarks.monte_carlo_pi [--points 50000000] [--walkers 1000000] [--steps 100] [--repeats 5]

Kernel forms, each timed as a median of calls after warm-up (``benchmarks.timing``): ``per_point`` writes each
point's hit into an int8 array (one work item per point), ``blocked`` counts hits over blocks of points (a work
item per block, a sequential loop of draws in it; numba's form is its parallel reduction ``hits += 1``). Each
point is two draws.

``@svod.jit`` forms, NumPy's array code in both (``np.random.random(n)`` and the rest; svod fuses each array of
draws into the statement that reads it, numba makes it an array first), each the best of ``repeats`` calls in
this process after one untimed call: ``jit_pi`` is ``(random(n)**2 + random(n)**2 < 1).sum()``, two draws a
point; ``walk_steps`` moves ``walkers`` walkers ``steps`` times by -1 or +1 (``np.where(random(w) < 0.5, -1,
1)``), ``walk_normal`` by ``standard_normal(w)``: one draw a walker a step, a loop around phases in svod.
Figures are ms and numba / svod (above 1: svod is faster).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

import svod
from benchmarks.timing import median_seconds, sample_seconds

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


@svod.jit
def jit_pi(points):  # type: ignore[no-untyped-def]
    inside = (np.random.random(points) ** 2 + np.random.random(points) ** 2 < 1.0).sum()
    return 4.0 * inside / points


@svod.jit
def walk_steps(positions, steps):  # type: ignore[no-untyped-def]
    for _ in range(steps):
        positions += np.where(np.random.random(positions.shape[0]) < 0.5, -1.0, 1.0)
    return positions


@svod.jit
def walk_normal(positions, steps):  # type: ignore[no-untyped-def]
    for _ in range(steps):
        positions += np.random.standard_normal(positions.shape[0])
    return positions


def _numba_jit() -> dict[str, Any] | None:
    """numba's spellings of the ``@svod.jit`` forms (the same code), or None where numba is not installed."""
    try:
        from numba import njit
    except ImportError:
        return None
    return {fn.name: njit(parallel=True, cache=False)(fn.fn) for fn in (jit_pi, walk_steps, walk_normal)}


def run_jit(points: int, walkers: int, steps: int, repeats: int) -> list[tuple[str, float, float | None]]:
    """Per ``@svod.jit`` form: its name, svod's ms and numba's (None without numba), each the best of
    ``repeats`` calls."""
    peers = _numba_jit()
    rows: list[tuple[str, float, float | None]] = []
    cases: list[tuple[Any, Callable[[], tuple[Any, ...]]]] = [
        (jit_pi, lambda: (points,)), (walk_steps, lambda: (np.zeros(walkers), steps)),
        (walk_normal, lambda: (np.zeros(walkers), steps))]
    for fn, arguments in cases:
        ours = _best(fn, arguments, repeats)
        theirs = None if peers is None else _best(peers[fn.name], arguments, repeats)
        rows.append((fn.name, ours * 1e3, None if theirs is None else theirs * 1e3))
    estimate = jit_pi(points)
    walked = walk_steps(np.zeros(walkers), steps)
    if abs(estimate - np.pi) > 0.01 or abs(walked.var() - steps) > 0.05 * steps:
        raise AssertionError(f"svod's estimate of pi is {estimate}, its walkers' variance {walked.var()}")
    return rows


def _best(fn: Callable[..., object], arguments: Callable[[], tuple[Any, ...]], repeats: int) -> float:
    """The least seconds ``fn`` took in ``repeats`` calls (each on fresh ``arguments()``: a walk starts from
    zeros) after one untimed call, which compiles. The arguments are made outside the timing."""
    made = [arguments() for _ in range(repeats + 1)]
    calls = iter(made)
    return min(sample_seconds(lambda: fn(*next(calls)), repeats, warmup=1))


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
    parser.add_argument("--walkers", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100, help="steps of each walker (one draw each)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"Monte-Carlo pi, {args.points} points ({2 * args.points} draws); {args.walkers} walkers, {args.steps} "
          f"steps; CPU, {svod.get_device('CPU').caps.threads} threads")
    print(f"{'form':<12} {'svod ms':>10} {'numba ms':>10} {'numba/svod':>11}")
    rows = run(args.points, args.repeats) + run_jit(args.points, args.walkers, args.steps, args.repeats)
    for name, ours, theirs in rows:
        ratio = "" if theirs is None else f"{theirs / ours:11.2f}"
        shown = "-" if theirs is None else f"{theirs:10.1f}"
        print(f"{name:<12} {ours:10.1f} {shown:>10} {ratio}")


if __name__ == "__main__":
    main()
