"""Timing: each figure is a median over repeated calls after untimed warm-up calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def sample_seconds(fn: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    """How long each of ``repeats`` calls of ``fn`` took, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    return statistics.median(sample_seconds(fn, repeats, warmup))
