"""Gradients of programs of ``@svod.kernel`` calls (``svod bench``'s ``grad.<name>_ms``), beside their forward and
torch autograd's eager spelling of the same computation.

Each program is a forward (its kernel calls, giving an output array) and a cotangent of that output: the gradient
is that of ``sum(output * cotangent)`` with respect to the program's ``wrt`` inputs, by ``svod.vjp`` or
``svod.grad``, which run the forward on a tape and then the pullback. A loop inside a ``svod.prange`` loop is not
differentiated, so the n-body energy and the logistic regression's product ``features @ weights`` are written as a
nest of two parallel loops whose work items add into their sums with ``svod.atomic_add``.

``grad.<name>_ms`` is the whole gradient (forward on the tape, then the pullback), ``grad.<name>.forward_ms`` the
forward alone and ``grad.<name>.ratio`` the one over the other; torch's figures (``torch.autograd.grad`` after an
eager forward, and the forward under ``torch.no_grad``) are beside them where torch is installed.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import svod
from benchmarks.results import Metric
from benchmarks.timing import sample_seconds
from svod.config import settings

Arrays = dict[str, np.ndarray]


@svod.kernel
def black_scholes(price, spot, strike, years, rate, vol):  # type: ignore[no-untyped-def]
    for i in svod.prange(price.shape[0]):
        root = svod.math.sqrt(years[i])
        d1 = (svod.math.log(spot[i] / strike[i]) + (rate[i] + 0.5 * vol[i] * vol[i]) * years[i]) / (vol[i] * root)
        d2 = d1 - vol[i] * root
        up = 0.5 * (1.0 + svod.math.erf(d1 * 0.7071067811865476))
        down = 0.5 * (1.0 + svod.math.erf(d2 * 0.7071067811865476))
        price[i] = spot[i] * up - strike[i] * svod.math.exp(-rate[i] * years[i]) * down


@svod.kernel
def nbody_energy(energy, pos):  # type: ignore[no-untyped-def]
    n = pos.shape[0]
    for i in svod.prange(n):
        for j in svod.prange(n):
            if j > i:
                dx = pos[i, 0] - pos[j, 0]
                dy = pos[i, 1] - pos[j, 1]
                dz = pos[i, 2] - pos[j, 2]
                svod.atomic_add(energy, 0, -1.0 / svod.math.sqrt(dx * dx + dy * dy + dz * dz + 0.01))


@svod.kernel
def logits(z, features, weights):  # type: ignore[no-untyped-def]
    for i in svod.prange(features.shape[0]):
        for k in svod.prange(features.shape[1]):
            svod.atomic_add(z, i, features[i, k] * weights[k])


@svod.kernel
def logistic_loss(loss, z, labels):  # type: ignore[no-untyped-def]
    for i in svod.prange(z.shape[0]):
        svod.atomic_add(loss, 0, svod.math.log(1.0 + svod.math.exp(-labels[i] * z[i])))


@svod.kernel
def softmax4(probs, scores):  # type: ignore[no-untyped-def]
    for i in svod.prange(scores.shape[0]):
        # nested: svod differentiates max of two arguments only
        top = max(max(scores[i, 0], scores[i, 1]), max(scores[i, 2], scores[i, 3]))  # noqa: PLW3301
        e0 = svod.math.exp(scores[i, 0] - top)
        e1 = svod.math.exp(scores[i, 1] - top)
        e2 = svod.math.exp(scores[i, 2] - top)
        e3 = svod.math.exp(scores[i, 3] - top)
        total = e0 + e1 + e2 + e3
        probs[i, 0] = e0 / total
        probs[i, 1] = e1 / total
        probs[i, 2] = e2 / total
        probs[i, 3] = e3 / total


@dataclass(frozen=True)
class GradientProgram:
    """A differentiated program: ``forward(arrays)`` runs its kernels and returns their output; ``gradient(arrays)``
    gives the gradient of ``sum(output * cotangent)`` with respect to each of ``wrt``, in order; ``torch(torch,
    tensors)`` is the same forward in torch."""

    name: str
    note: str
    arrays: Arrays
    wrt: tuple[str, ...]
    cotangent: np.ndarray
    forward: Callable[[Arrays], np.ndarray]
    gradient: Callable[[Arrays], tuple[np.ndarray, ...]]
    torch: Callable[[Any, dict[str, Any]], Any]


def _pulled(kernel: Any, output_shape: tuple[int, ...], wrt: tuple[str, ...],
            cotangent: np.ndarray) -> Callable[[Arrays], tuple[np.ndarray, ...]]:
    """The gradient of a one-kernel program whose first argument is its output, by ``svod.vjp``."""
    def gradient(arrays: Arrays) -> tuple[np.ndarray, ...]:
        _, pullback = svod.vjp(kernel, np.zeros(output_shape), *arrays.values())
        grads = dict(zip(kernel.parameters[1:], pullback(cotangent)[1:], strict=True))
        return tuple(grads[name] for name in wrt)
    return gradient


def _called(kernel: Any, output_shape: tuple[int, ...]) -> Callable[[Arrays], np.ndarray]:
    def forward(arrays: Arrays) -> np.ndarray:
        output = np.zeros(output_shape)
        kernel(output, *arrays.values())
        return output
    return forward


def black_scholes_program(options: int, rng: np.random.Generator) -> GradientProgram:
    arrays = {"spot": rng.uniform(50.0, 150.0, options), "strike": rng.uniform(50.0, 150.0, options),
              "years": rng.uniform(0.1, 2.0, options), "rate": rng.uniform(0.0, 0.1, options),
              "vol": rng.uniform(0.1, 0.5, options)}
    wrt, cotangent = ("spot", "rate", "vol"), rng.uniform(0.5, 1.5, options)

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        root = torch.sqrt(t["years"])
        d1 = (torch.log(t["spot"] / t["strike"]) + (t["rate"] + 0.5 * t["vol"] * t["vol"]) * t["years"]) / (
            t["vol"] * root)
        up, down = (0.5 * (1.0 + torch.erf(d * 0.7071067811865476)) for d in (d1, d1 - t["vol"] * root))
        return t["spot"] * up - t["strike"] * torch.exp(-t["rate"] * t["years"]) * down

    return GradientProgram("black_scholes", f"{options} float64 call prices by spot, rate and vol", arrays, wrt,
                           cotangent, _called(black_scholes, (options,)),
                           _pulled(black_scholes, (options,), wrt, cotangent), torch_forward)


def _energy(pos: np.ndarray) -> np.ndarray:
    energy = np.zeros(1)
    nbody_energy(energy, pos)
    return energy


def nbody_program(bodies: int, rng: np.random.Generator) -> GradientProgram:

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        pos = t["pos"]
        d = pos[:, None, :] - pos[None, :, :]
        pairs = torch.triu(torch.ones(bodies, bodies, dtype=torch.bool), diagonal=1)
        return (-1.0 / torch.sqrt((d * d).sum(dim=2) + 0.01))[pairs].sum().reshape(1)

    return GradientProgram("nbody_energy", f"potential energy of {bodies} bodies by their float64 positions, "
                           "a 2-d prange nest over pairs", {"pos": rng.standard_normal((bodies, 3))}, ("pos",),
                           np.ones(1), lambda arrays: _energy(arrays["pos"]),
                           lambda arrays: (svod.grad(_energy)(arrays["pos"]),), torch_forward)


def _logistic_regression(weights: np.ndarray, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
    z, loss = np.zeros(features.shape[0]), np.zeros(1)
    logits(z, features, weights)
    logistic_loss(loss, z, labels)
    return loss


def logistic_program(samples: int, rng: np.random.Generator) -> GradientProgram:
    width = 32
    arrays = {"weights": 0.1 * rng.standard_normal(width), "features": rng.standard_normal((samples, width)),
              "labels": np.sign(rng.standard_normal(samples))}

    def forward(arrays: Arrays) -> np.ndarray:
        return _logistic_regression(arrays["weights"], arrays["features"], arrays["labels"])

    def gradient(arrays: Arrays) -> tuple[np.ndarray, ...]:
        return (svod.grad(_logistic_regression)(arrays["weights"], arrays["features"], arrays["labels"]),)

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        z = t["features"] @ t["weights"]
        return torch.log(1.0 + torch.exp(-t["labels"] * z)).sum().reshape(1)

    return GradientProgram("logistic_regression", f"loss over {samples}x{width} float64 by the weights (svod's tape "
                           "computes the features' gradient too); logits a 2-d prange nest", arrays, ("weights",),
                           np.ones(1), forward, gradient, torch_forward)


def softmax_program(rows: int, rng: np.random.Generator) -> GradientProgram:
    arrays = {"scores": rng.standard_normal((rows, 4))}
    cotangent = rng.standard_normal((rows, 4))
    return GradientProgram("softmax", f"softmax of each of {rows} float64 rows of 4, written out", arrays,
                           ("scores",), cotangent, _called(softmax4, (rows, 4)),
                           _pulled(softmax4, (rows, 4), ("scores",), cotangent),
                           lambda torch, t: torch.softmax(t["scores"], dim=1))


Sizes = tuple[int, int, int, int]
"""The programs' sizes: Black-Scholes' options, the n-body's bodies, the logistic regression's samples and the
softmax's rows."""
FULL_SIZES: Sizes = (10**6, 2048, 10**6, 10**6)
QUICK_SIZES: Sizes = (1 << 16, 512, 1 << 16, 1 << 16)


def programs(sizes: Sizes) -> list[GradientProgram]:
    """The differentiated programs at ``sizes``, on random data (the same each run)."""
    rng = np.random.default_rng(7)
    options, bodies, samples, rows = sizes
    return [black_scholes_program(options, rng), nbody_program(bodies, rng), logistic_program(samples, rng),
            softmax_program(rows, rng)]


MOST_REPEATS = 5
"""The most samples of a figure: each sample of the full run's logistic regression runs over 256 MB of features."""


def gradient_step(quick: bool, repeats: int, progress: Callable[[str], None]) -> list[Metric]:
    """``svod bench``'s gradients step: ``gradient_metrics`` at the full run's sizes or --quick's."""
    return gradient_metrics(programs(QUICK_SIZES if quick else FULL_SIZES), min(repeats, MOST_REPEATS), progress)


def torch_runners(torch: Any, program: GradientProgram) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """torch's forward (under ``no_grad``) and gradient (an eager forward, then ``torch.autograd.grad``)."""
    tensors = {name: torch.from_numpy(array).requires_grad_(name in program.wrt)
               for name, array in program.arrays.items()}
    leaves = [tensors[name] for name in program.wrt]
    cotangent = torch.from_numpy(program.cotangent)

    def forward() -> Any:
        with torch.no_grad():
            return program.torch(torch, tensors)

    def gradient() -> Any:
        return torch.autograd.grad(program.torch(torch, tensors), leaves, grad_outputs=cotangent)

    return forward, gradient


def _torch() -> Any:
    """torch on ``settings.threads`` threads, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(settings.threads)
    return torch


def gradient_metrics(chosen: list[GradientProgram], repeats: int,
                     progress: Callable[[str], None] = lambda _: None) -> list[Metric]:
    """``grad.<name>_ms``, ``grad.<name>.forward_ms`` and ``grad.<name>.ratio`` for each program, each a median of
    ``repeats`` calls after one untimed; torch's beside them, its gradients checked against svod's first."""
    torch = _torch()
    metrics = []
    for program in chosen:
        progress(f"gradients: {program.name}")
        torch_forward_ms = torch_ms = None
        missing = {"torch": "not installed"} if torch is None else {}
        if torch is not None:
            torch_forward, torch_gradient = torch_runners(torch, program)
            _agree(program, [g.numpy() for g in torch_gradient()])
            torch_forward_ms, torch_ms = _median_ms(torch_forward, repeats), _median_ms(torch_gradient, repeats)
        forward_ms = _median_ms(functools.partial(program.forward, program.arrays), repeats)
        gradient_ms = _median_ms(functools.partial(program.gradient, program.arrays), repeats)
        torch_ratio = None if torch_ms is None or torch_forward_ms is None else torch_ms / torch_forward_ms
        name = f"grad.{program.name}"
        metrics += [
            Metric(f"{name}_ms", "ms", "lower", gradient_ms, note=f"{program.note}: forward on a tape, then the "
                   "pullback", others=_beside(torch_ms), why_missing=missing),
            Metric(f"{name}.forward_ms", "ms", "lower", forward_ms, note=program.note,
                   others=_beside(torch_forward_ms), why_missing=missing),
            Metric(f"{name}.ratio", "x", "lower", gradient_ms / forward_ms, note="gradient / forward",
                   others=_beside(torch_ratio), why_missing=missing)]
    return metrics


def _beside(torch_figure: float | None) -> dict[str, float | None]:
    return {} if torch_figure is None else {"torch": torch_figure}


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(sample_seconds(fn, repeats, warmup=1)) * 1e3


def _agree(program: GradientProgram, expected: list[np.ndarray]) -> None:
    """Refuse to time a program whose svod gradient differs from torch's."""
    for name, got, want in zip(program.wrt, program.gradient(program.arrays), expected, strict=True):
        if not np.allclose(got, want, rtol=1e-6, atol=1e-9 * max(1.0, float(np.abs(want).max(initial=0.0)))):
            raise RuntimeError(f"svod's gradient of {program.name} by {name} differs from torch's "
                               f"(largest difference {np.abs(got - want).max()})")
