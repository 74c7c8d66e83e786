"""Timing: each figure is a median over repeated calls after untimed warm-up calls, and every contestant
starts on settled cores (``settle``)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import svod
from svod.errors import SvodError

SETTLE_WINDOW_SECONDS = 0.005
"""How long ``settle`` watches this process's CPU time at a time while its own thread sleeps."""
SETTLE_QUIET_SHARE = 0.25
"""A window is quiet when the process burnt less than this share of one core in it: no thread spinning."""
SETTLE_MOST_SECONDS = 0.25
"""The longest ``settle`` waits: past OpenBLAS's spin after a call (its workers busy-wait for more work up
to 2**28 cycles, about 0.1 s) and svod's team's (``cpu_team.TEAM_SPIN_SECONDS``)."""


def settle(window: float = SETTLE_WINDOW_SECONDS, most: float = SETTLE_MOST_SECONDS,
           quiet: float = SETTLE_QUIET_SHARE) -> float:
    """Wait until no other thread of this process burns a core, or ``most`` seconds; return the seconds
    waited.

    A library's worker threads keep spinning for a while after its call returns, waiting for more work: numpy's
    OpenBLAS threads after a BLAS call took both cores of a 2-core machine from the next contestant, whose
    kernel ran many times slower than after a pause. Every contestant is timed after this wait (``sample_seconds``
    starts with it), so none pays for the one before. Only this process's threads are watched (its CPU time):
    other processes' load is not the harness's to wait out."""
    waited = 0.0
    while waited < most:
        start = time.process_time()
        time.sleep(window)
        waited += window
        if time.process_time() - start < quiet * window:
            break
    return waited


def sample_seconds(fn: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    """How long each of ``repeats`` calls of ``fn`` took, after the cores settle (``settle``) and ``warmup``
    untimed calls."""
    settle()
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


def fresh_process_ms(script: str, arguments: list[str], what: str) -> float:
    """The milliseconds ``script`` prints last, run in a fresh process with ``arguments`` and an empty svod disk
    cache, this checkout and svod importable: a first call's cost, compiles included. ``what`` names the call
    in the error a failed run raises."""
    roots = [str(Path(__file__).resolve().parents[1]), str(Path(svod.__file__).resolve().parents[1])]
    path = os.pathsep.join([*dict.fromkeys(roots), *filter(None, [os.environ.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as directory:
        result = subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True,
                                check=False, env={**os.environ, "SVOD_CACHE_DIR": directory, "PYTHONPATH": path})
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SvodError(f"{what} failed: {last[-400:]}", stage="check", value=what)
    return float(result.stdout.split()[-1])
