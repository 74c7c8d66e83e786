"""Contestants timed turn about: ``SUITE_ROUNDS`` rounds, each timing every contestant of a kernel in another
order, a figure the median of its samples from all rounds; and the kernel suite's figures so made."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from benchmarks.peers import blas_threads
from benchmarks.results import Metric
from benchmarks.timing import sample_seconds
from svod.config import settings

SUITE_ROUNDS = 5
"""How many rounds of the kernel suite time every contestant in turn (``repeats`` samples in all, spread
over the rounds)."""


def contestant_order(names: list[str], turn: int) -> list[str]:
    """``names`` rotated by ``turn``: each round of the suite starts a kernel's contestants with another one, so
    none is always timed first (right after the last kernel's contestants) or last."""
    start = turn % len(names)
    return names[start:] + names[:start]


def suite_metrics(names: list[str], samples: dict[str, list[list[float]]],
                  why_missing: list[dict[str, str]]) -> list[Metric]:
    """One ``kernel.<name>_ms`` metric per suite kernel: the median of each contestant's samples (seconds)
    in milliseconds, None for a contestant without samples, and why each peer without a figure has none;
    contestants beside svod and its three peers (``svod static``) among its ``others``."""
    def milliseconds(contestant: str, k: int) -> float | None:
        kept = samples[contestant][k]
        return statistics.median(kept) * 1e3 if kept else None

    others = [name for name in samples if name not in ("svod", "numpy", "numba", "tinygrad")]
    return [Metric(f"kernel.{name}_ms", "ms", "lower", milliseconds("svod", k), note=name,
                   numpy=milliseconds("numpy", k), numba=milliseconds("numba", k),
                   tinygrad=milliseconds("tinygrad", k), why_missing=why_missing[k],
                   others={other: milliseconds(other, k) for other in others if samples[other][k]})
            for k, name in enumerate(names)]


@dataclass(frozen=True)
class SuiteContestants:
    """The kernel suite's contestants, compiled and checked: ``runners[contestant][k]`` runs kernel ``k`` (None
    where the contestant has none, ``why_missing[k]`` says why)."""

    names: list[str]
    runners: dict[str, list[Callable[[], object] | None]]
    why_missing: list[dict[str, str]]
    repeats: int

    def timed(self, progress: Callable[[str], None]) -> list[Metric]:
        """Each of ``SUITE_ROUNDS`` rounds times, kernel by kernel, every contestant of that kernel in turn
        (``contestant_order``), and a figure is the median of its samples from all rounds. The contestants of
        one kernel are so timed seconds apart, in an order that changes each round: a drift of this machine's
        speed (other tenants of the host) falls on them alike, where a phase per contestant had set one
        contestant's minute against another's. No contestant's threads still spin while the next is timed
        (``timing.settle``, before each kernel's samples)."""
        samples: dict[str, list[list[float]]] = {name: [[] for _ in self.names] for name in self.runners}
        per_round = (self.repeats + SUITE_ROUNDS - 1) // SUITE_ROUNDS
        for number in range(SUITE_ROUNDS):
            progress(f"kernel suite: round {number + 1} of {SUITE_ROUNDS}")
            for index in range(len(self.names)):
                for name in contestant_order(list(self.runners), number + index):
                    if (run := self.runners[name][index]) is not None:
                        with blas_threads(settings.threads) if name == "numpy" else nullcontext():
                            samples[name][index].extend(sample_seconds(run, per_round, warmup=1))
        return suite_metrics(self.names, samples, self.why_missing)


def rounds_ms(runners: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each runner's median time in milliseconds, ``repeats`` samples timed in ``SUITE_ROUNDS`` rounds, each round
    in another order (``contestant_order``)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    per_round = (repeats + SUITE_ROUNDS - 1) // SUITE_ROUNDS
    for number in range(SUITE_ROUNDS):
        for name in contestant_order(list(runners), number):
            samples[name].extend(sample_seconds(runners[name], per_round, warmup=1))
    return {name: statistics.median(kept) * 1e3 for name, kept in samples.items()}
