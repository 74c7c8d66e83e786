"""``svod bench``'s gradients step (``--suite gradients`` alone): every differentiated program's figures
(``benchmarks.gradients``, ``benchmarks.gradient_programs``), each program's first gradient in a fresh process
beside its first forward, and what the Jacobi relaxation's tape keeps.

``grad.<name>.first_call_ms`` is a program's first gradient in a fresh process with an empty svod disk cache
(``SVOD_CACHE_DIR`` a new directory): its forward kernels' compile, the adjoints' making and compile, and one
run, at ``FIRST_CALL`` sizes, where compiling is most of it; ``grad.<name>.first_call_ratio`` is that over the
first forward, measured the same way in another fresh process. ``grad.jacobi.saved_states`` is the most the
tape held at once of the copies it keeps for the backward pass, in grid states, beside the ``2·sqrt(T)`` its
checkpoints promise for ``T`` steps.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable

import numpy as np

import svod
from benchmarks.gradient_programs import MORE_FULL, MORE_QUICK, MoreSizes, more_programs
from benchmarks.gradients import (
    FULL_SIZES,
    JACOBI_STEPS,
    MOST_REPEATS,
    QUICK_SIZES,
    GradientProgram,
    Sizes,
    gradient_metrics,
    jacobi_step,
    programs,
)
from benchmarks.results import Metric
from benchmarks.timing import fresh_process_ms

FIRST_CALL: tuple[Sizes, MoreSizes] = ((1000, 64, 1000, 1000, 32), (64, 1024, 64, 8, 100))
"""The programs' sizes for their first calls: small, so that compiling is most of the time."""


def all_programs(sizes: Sizes, more: MoreSizes) -> list[GradientProgram]:
    """Every differentiated program, at ``sizes`` (``benchmarks.gradients``) and ``more``
    (``benchmarks.gradient_programs``, the layer norm and the perceptron in float32)."""
    return [*programs(sizes), *more_programs(more)]


def gradient_step(quick: bool, repeats: int, progress: Callable[[str], None],
                  sizes: tuple[Sizes, MoreSizes] | None = None) -> list[Metric]:
    """Each program's figures at ``sizes`` (by default the full run's or --quick's), then the first calls and
    the Jacobi relaxation's saved states on a grid of the Jacobi program's side."""
    sizes = sizes or ((QUICK_SIZES, MORE_QUICK) if quick else (FULL_SIZES, MORE_FULL))
    chosen = all_programs(*sizes)
    metrics = gradient_metrics(chosen, min(repeats, MOST_REPEATS), progress)
    progress("gradients: first calls")
    metrics += first_call_metrics([program.name for program in chosen])
    return [*metrics, jacobi_saved_states(sizes[0][4])]


FIRST_CALL_SCRIPT = textwrap.dedent("""
    import sys, time
    from benchmarks.gradient_costs import FIRST_CALL, all_programs
    name, part = sys.argv[1:3]
    program = next(p for p in all_programs(*FIRST_CALL) if p.name == name)
    run = program.forward if part == "forward" else program.gradient
    start = time.perf_counter()
    run(program.arrays)
    print((time.perf_counter() - start) * 1e3)
""")


def first_call_ms(name: str, part: str) -> float:
    """The first call of program ``name``'s ``part`` ("forward" or "gradient") in a fresh process with an empty
    svod disk cache, its data made and svod imported before the clock starts."""
    return fresh_process_ms(FIRST_CALL_SCRIPT, [name, part], f"the first {part} of {name}")


def first_call_metrics(names: list[str]) -> list[Metric]:
    """``grad.<name>.first_call_ms`` and ``grad.<name>.first_call_ratio`` of each program named."""
    metrics = []
    for name in names:
        forward, gradient = first_call_ms(name, "forward"), first_call_ms(name, "gradient")
        note = "first gradient in a fresh process, empty disk cache (compiles and one run, small sizes)"
        metrics += [Metric(f"grad.{name}.first_call_ms", "ms", "lower", gradient, note=note),
                    Metric(f"grad.{name}.first_call_ratio", "x", "lower", gradient / forward,
                           note=f"first gradient / first forward ({forward:.0f} ms), each in a fresh process")]
    return metrics


def jacobi_saved_states(side: int, steps: int = JACOBI_STEPS) -> Metric:
    """The most grid states the Jacobi relaxation's tape held at once for its backward pass (recording, then
    the backward pass, which runs steps again from its checkpoints)."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((side, side))
    b = a.copy()
    with svod.Tape() as tape:
        for _ in range(steps):
            jacobi_step(b, a)
            a, b = b, a
    tape.backward(grads=[(a, np.ones_like(a))])
    states = tape.peak_saved_bytes / a.nbytes
    return Metric("grad.jacobi.saved_states", "states", "lower", states,
                  note=f"peak copies the tape kept over {steps} steps of a {side}x{side} grid, in grids (checkpoints "
                       f"promise at most 2*sqrt(T) = {2 * math.sqrt(steps):.1f}; {tape.checked_bytes / a.nbytes:.0f} "
                       "more held to check the arrays)")
