"""``svod.vjp`` over the random Python kernels of ``python_kernels`` (float32 made float64, so that central
differences in float64 are the oracle): each kernel's gradient agrees with the differences of its function run as
plain Python, or svod refuses it with a ``GradientError``; none is wrong. ``python -m
tests.frontend.test_random_gradients COUNT`` sweeps COUNT kernels and prints the outcomes."""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

import svod
from svod.errors import GradientError, SvodError
from tests.frontend.python_kernels import generate, load

_FOLDER = Path(tempfile.mkdtemp(prefix="svod-random-gradients-"))


def gradient_outcome(seed: int) -> str:
    """``agree``, ``refused: <what>``, ``no float array``, ``forward refused``, ``adjoint refused: <error>`` or
    ``wrong: <values>``."""
    drawn = generate(seed)
    kernel = replace(drawn, source=drawn.source.replace("float32", "float64"),
                     out=drawn.out.replace("float32", "float64"), x=drawn.x.replace("float32", "float64"))
    if "float64" not in (kernel.out, kernel.x):
        return "no float array"
    compiled = load(kernel, _FOLDER, seed)
    rng = np.random.default_rng(seed)
    shape = (kernel.rows, kernel.columns)

    def values(dtype: str) -> np.ndarray:  # away from the kinks of //, % and casts, and from ties
        return rng.standard_normal(shape) * 3.0 if dtype == "float64" else rng.integers(-50, 50, shape).astype(dtype)
    args = [values(kernel.out), values(kernel.x), rng.integers(0, max(kernel.rows, 1), kernel.rows).astype(np.int32),
            np.zeros(4, np.int32)]
    call = [a.copy() for a in args]
    try:
        result, pullback = svod.vjp(compiled, *call, device="CPU")
    except GradientError as err:
        return f"refused: {err.detail.split(': ')[1]}"
    except SvodError:
        return "forward refused"
    written = [p for p, a in enumerate(call) if any(a is r for r in result)]
    weights = {p: rng.standard_normal(shape) for p in written}
    try:
        grads = pullback(tuple(weights[p] for p in written))
    except SvodError as err:  # the adjoint kernel refused by svod itself: a refusal the adjoint should have said
        return f"adjoint refused: {type(err).__name__}: {err.detail[:80]}"
    floats = [p for p, a in enumerate(args) if a.dtype.kind == "f"]
    directions = {p: rng.standard_normal(args[p].shape) for p in floats}

    def loss(sign: float) -> float:
        moved = [a + sign * 1e-6 * directions[p] if p in floats else a.copy() for p, a in enumerate(args)]
        with np.errstate(all="ignore"):
            compiled.fn(*moved)
        return sum(float(np.sum(moved[p] * weights[p])) for p in written if p in floats)
    expected = (loss(1.0) - loss(-1.0)) / 2e-6
    got = sum(float(np.sum(grads[p] * directions[p])) for p in floats)
    return "agree" if abs(got - expected) <= 1e-4 * abs(expected) + 1e-6 else f"wrong: {got} != {expected}"


def test_random_kernels_differentiate_right_or_are_refused():
    outcomes = {seed: gradient_outcome(seed) for seed in range(60)}
    assert not [(seed, o) for seed, o in outcomes.items() if o.startswith(("wrong", "adjoint refused"))]
    counted = Counter(o for o in outcomes.values())
    assert counted["agree"] >= 5, counted
    assert sum(n for o, n in counted.items() if o.startswith("refused")) >= 5, counted


if __name__ == "__main__":
    found = Counter(gradient_outcome(seed).split(" != ")[0] for seed in range(int(sys.argv[1])))
    for outcome, count in found.most_common():
        print(f"{count:6d}  {outcome}")
