"""Gradients of programs of ``@svod.kernel`` calls (``svod bench``'s ``grad.<name>_ms``), beside their forward and
torch autograd's eager spelling of the same computation.

Each program is a forward (its kernel calls, giving an output array) and a cotangent of that output: the gradient
is that of ``sum(output * cotangent)`` with respect to the program's ``wrt`` inputs, by ``svod.vjp`` or
``svod.grad``, which run the forward on a tape and then the pullback. A loop inside a ``svod.prange`` loop is not
differentiated, so the n-body energy and the logistic regression's product ``features @ weights`` are written as a
nest of two parallel loops whose work items add into their sums with ``svod.atomic_add``.

``grad.<name>_ms`` is the whole gradient (forward on the tape, then the pullback), ``grad.<name>.forward_ms`` the
forward alone and ``grad.<name>.ratio`` the one over the other. The peers' figures are beside them, each where its
package is installed (or why not): torch (``torch.autograd.grad`` after an eager forward, and the forward under
``torch.no_grad``), JAX (``jax.jit(jax.grad(...))`` of the weighed sum, and ``jax.jit`` of the forward, in
float64) and Warp (its kernels launched on a ``wp.Tape`` on the CPU device, then ``tape.backward``;
``benchmarks.warp_gradients``). Each peer's gradient is checked against svod's before it is timed.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Sequence
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


@svod.kernel
def jacobi_step(new, old):  # type: ignore[no-untyped-def]
    for i in svod.prange(1, old.shape[0] - 1):
        for j in svod.prange(1, old.shape[1] - 1):
            new[i, j] = 0.25 * (old[i - 1, j] + old[i + 1, j] + old[i, j - 1] + old[i, j + 1])


@dataclass(frozen=True)
class GradientProgram:
    """A differentiated program: ``forward(arrays)`` runs its kernels and returns their output; ``gradient(arrays)``
    gives the gradient of ``sum(output * cotangent)`` with respect to each of ``wrt``, in order; ``torch(torch,
    tensors)`` is the same forward in torch, and ``jax(jax, arrays)`` in JAX."""

    name: str
    note: str
    arrays: Arrays
    wrt: tuple[str, ...]
    cotangent: np.ndarray
    forward: Callable[[Arrays], np.ndarray]
    gradient: Callable[[Arrays], tuple[np.ndarray, ...]]
    torch: Callable[[Any, dict[str, Any]], Any]
    jax: Callable[[Any, dict[str, Any]], Any]
    norm_error: float | None = None
    """Where set (float32 programs), a peer's gradient agrees with svod's where their difference's 2-norm is
    under this share of the peer's, not element by element: a ReLU whose input is within float32 rounding of 0
    passes one sample's gradient or stops it as the two happen to round."""
    steps: int = 0
    """A time loop's steps, which a peer's spelling takes apart from the arrays (Warp's cloth)."""


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

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        jnp = jax.numpy
        root = jnp.sqrt(t["years"])
        d1 = (jnp.log(t["spot"] / t["strike"]) + (t["rate"] + 0.5 * t["vol"] * t["vol"]) * t["years"]) / (
            t["vol"] * root)
        up, down = (0.5 * (1.0 + jax.scipy.special.erf(d * 0.7071067811865476)) for d in (d1, d1 - t["vol"] * root))
        return t["spot"] * up - t["strike"] * jnp.exp(-t["rate"] * t["years"]) * down

    return GradientProgram("black_scholes", f"{options} float64 call prices by spot, rate and vol", arrays, wrt,
                           cotangent, _called(black_scholes, (options,)),
                           _pulled(black_scholes, (options,), wrt, cotangent), torch_forward, jax_forward)


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

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        jnp, pos = jax.numpy, t["pos"]
        d = pos[:, None, :] - pos[None, :, :]
        pairs = jnp.triu(jnp.ones((bodies, bodies), dtype=bool), k=1)
        return jnp.where(pairs, -1.0 / jnp.sqrt((d * d).sum(axis=2) + 0.01), 0.0).sum().reshape(1)

    return GradientProgram("nbody_energy", f"potential energy of {bodies} bodies by their float64 positions, "
                           "a 2-d prange nest over pairs", {"pos": rng.standard_normal((bodies, 3))}, ("pos",),
                           np.ones(1), lambda arrays: _energy(arrays["pos"]),
                           lambda arrays: (svod.grad(_energy)(arrays["pos"]),), torch_forward, jax_forward)


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

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        z = t["features"] @ t["weights"]
        return jax.numpy.log(1.0 + jax.numpy.exp(-t["labels"] * z)).sum().reshape(1)

    return GradientProgram("logistic_regression", f"loss over {samples}x{width} float64 by the weights (svod's tape "
                           "computes the features' gradient too); logits a 2-d prange nest", arrays, ("weights",),
                           np.ones(1), forward, gradient, torch_forward, jax_forward)


def softmax_program(rows: int, rng: np.random.Generator) -> GradientProgram:
    arrays = {"scores": rng.standard_normal((rows, 4))}
    cotangent = rng.standard_normal((rows, 4))
    return GradientProgram("softmax", f"softmax of each of {rows} float64 rows of 4, written out", arrays,
                           ("scores",), cotangent, _called(softmax4, (rows, 4)),
                           _pulled(softmax4, (rows, 4), ("scores",), cotangent),
                           lambda torch, t: torch.softmax(t["scores"], dim=1),
                           lambda jax, t: jax.nn.softmax(t["scores"], axis=1))


JACOBI_STEPS = 200
"""The Jacobi relaxation's steps."""


def _jacobi(u0: np.ndarray) -> tuple[np.ndarray, svod.Tape, np.ndarray, np.ndarray]:
    """``JACOBI_STEPS`` steps from ``u0``, between two arrays in turn (both ``u0`` at first, their borders never
    written), on a tape: the last, the tape, and the two arrays, whose gradients add up to ``u0``'s."""
    a, b = u0.copy(), u0.copy()
    first, second = a, b
    with svod.Tape() as tape:
        for _ in range(JACOBI_STEPS):
            jacobi_step(b, a)
            a, b = b, a
    return a, tape, first, second


def jacobi_program(side: int, rng: np.random.Generator) -> GradientProgram:
    arrays = {"u0": rng.standard_normal((side, side))}
    cotangent = rng.standard_normal((side, side))

    def forward(arrays: Arrays) -> np.ndarray:
        a, b = arrays["u0"].copy(), arrays["u0"].copy()
        for _ in range(JACOBI_STEPS):
            jacobi_step(b, a)
            a, b = b, a
        return a

    def gradient(arrays: Arrays) -> tuple[np.ndarray, ...]:
        last, tape, first, second = _jacobi(arrays["u0"])
        tape.backward(grads=[(last, cotangent)])
        return (tape.grad(first) + tape.grad(second),)

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        u = t["u0"]
        for _ in range(JACOBI_STEPS):
            inner = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
            u = u.clone()
            u[1:-1, 1:-1] = inner
        return u

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        def step(_: Any, u: Any) -> Any:
            return u.at[1:-1, 1:-1].set(0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]))
        return jax.lax.fori_loop(0, JACOBI_STEPS, step, t["u0"])

    return GradientProgram("jacobi", f"{JACOBI_STEPS} Jacobi steps on a {side}x{side} float64 grid by its start, "
                           "two arrays in turn (the tape checkpoints)", arrays, ("u0",), cotangent, forward,
                           gradient, torch_forward, jax_forward)


Sizes = tuple[int, int, int, int, int]
"""The programs' sizes: Black-Scholes' options, the n-body's bodies, the logistic regression's samples, the
softmax's rows and the Jacobi grid's side."""
FULL_SIZES: Sizes = (10**6, 2048, 10**6, 10**6, 512)
QUICK_SIZES: Sizes = (1 << 16, 512, 1 << 16, 1 << 16, 128)


def programs(sizes: Sizes) -> list[GradientProgram]:
    """The differentiated programs at ``sizes``, on random data (the same each run)."""
    rng = np.random.default_rng(7)
    options, bodies, samples, rows, side = sizes
    return [black_scholes_program(options, rng), nbody_program(bodies, rng), logistic_program(samples, rng),
            softmax_program(rows, rng), jacobi_program(side, rng)]


MOST_REPEATS = 5
"""The most samples of a figure: each sample of the full run's logistic regression runs over 256 MB of features."""


def gradient_step(quick: bool, repeats: int, progress: Callable[[str], None]) -> list[Metric]:
    """``svod bench``'s gradients step: ``gradient_metrics`` at the full run's sizes or --quick's."""
    return gradient_metrics(programs(QUICK_SIZES if quick else FULL_SIZES), min(repeats, MOST_REPEATS), progress)


Runners = tuple[Callable[[], Any], Callable[[], Sequence[Any]]]
"""A peer's forward of a program and its gradient (one array per name of ``wrt``)."""


def torch_runners(torch: Any, program: GradientProgram) -> Runners:
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


def jax_runners(jax: Any, program: GradientProgram) -> Runners:
    """JAX's forward (``jax.jit``) and gradient (``jax.jit(jax.grad(...))`` of the output weighed by the
    cotangent), on its CPU device in float64 (``jax.enable_x64`` around each call, leaving the process's
    setting as it was)."""
    device = jax.devices("cpu")[0]
    with jax.enable_x64(True):
        arrays = {name: jax.device_put(array, device) for name, array in program.arrays.items()}
        cotangent = jax.device_put(program.cotangent, device)

    def objective(leaves: tuple[Any, ...], others: dict[str, Any], weights: Any) -> Any:
        return (program.jax(jax, {**others, **dict(zip(program.wrt, leaves, strict=True))}) * weights).sum()

    forward_jit = jax.jit(functools.partial(program.jax, jax))
    gradient_jit = jax.jit(jax.grad(objective))
    leaves = tuple(arrays[name] for name in program.wrt)
    others = {name: array for name, array in arrays.items() if name not in program.wrt}

    def forward() -> Any:
        with jax.enable_x64(True):
            return forward_jit(arrays).block_until_ready()

    def gradient() -> Any:
        with jax.enable_x64(True):
            return jax.block_until_ready(gradient_jit(leaves, others, cotangent))

    return forward, gradient


def warp_runners(warp_gradients: Any, program: GradientProgram) -> Runners:
    """Warp's forward and gradient (``wp.Tape``) on its CPU device (``benchmarks.warp_gradients``)."""
    return warp_gradients.runners(program.name, program.arrays, program.wrt, program.cotangent,
                                  program.cotangent.shape, program.steps)


def _torch() -> Any:
    """torch on ``settings.threads`` threads, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(settings.threads)
    return torch


def _jax() -> Any:
    try:
        import jax
    except ImportError:
        return None
    return jax


def _warp() -> Any:
    try:
        from benchmarks import warp_gradients
    except ImportError:
        return None
    return warp_gradients


def peers() -> tuple[dict[str, Callable[[GradientProgram], Runners]], dict[str, str]]:
    """Each installed peer's runners of a program, and why each other peer has none."""
    found: dict[str, Callable[[GradientProgram], Runners]] = {}
    missing: dict[str, str] = {}
    for name, module, runners in (("torch", _torch(), torch_runners), ("jax", _jax(), jax_runners),
                                  ("warp", _warp(), warp_runners)):
        if module is None:
            missing[name] = "not installed"
        else:
            found[name] = functools.partial(runners, module)
    return found, missing


def gradient_metrics(chosen: list[GradientProgram], repeats: int,
                     progress: Callable[[str], None] = lambda _: None) -> list[Metric]:
    """``grad.<name>_ms``, ``grad.<name>.forward_ms`` and ``grad.<name>.ratio`` for each program, each a median of
    ``repeats`` calls after one untimed; each peer's beside them, its gradients checked against svod's first (a
    peer that cannot run a program says why)."""
    installed, not_installed = peers()
    metrics = []
    for program in chosen:
        progress(f"gradients: {program.name}")
        missing = dict(not_installed)
        forward_ms: dict[str, float] = {}
        gradient_ms: dict[str, float] = {}
        for name, make in installed.items():
            try:
                forward, gradient = make(program)
                expected = [np.asarray(g) for g in gradient()]
            except Exception as err:  # a peer that cannot run this program says why
                missing[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
                continue
            _agree(program, name, expected)
            forward_ms[name], gradient_ms[name] = _median_ms(forward, repeats), _median_ms(gradient, repeats)
        svod_forward_ms = _median_ms(functools.partial(program.forward, program.arrays), repeats)
        svod_gradient_ms = _median_ms(functools.partial(program.gradient, program.arrays), repeats)
        ratios = {name: ms / forward_ms[name] for name, ms in gradient_ms.items()}
        name = f"grad.{program.name}"
        metrics += [
            Metric(f"{name}_ms", "ms", "lower", svod_gradient_ms, note=f"{program.note}: forward on a tape, then "
                   "the pullback", others={**gradient_ms}, why_missing=missing),
            Metric(f"{name}.forward_ms", "ms", "lower", svod_forward_ms, note=program.note, others={**forward_ms},
                   why_missing=missing),
            Metric(f"{name}.ratio", "x", "lower", svod_gradient_ms / svod_forward_ms, note="gradient / forward",
                   others={**ratios}, why_missing=missing)]
    return metrics


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(sample_seconds(fn, repeats, warmup=1)) * 1e3


def _agree(program: GradientProgram, peer: str, expected: list[np.ndarray]) -> None:
    """Refuse to time a program whose svod gradient differs from a peer's."""
    for name, got, want in zip(program.wrt, program.gradient(program.arrays), expected, strict=True):
        if program.norm_error is not None:
            agrees = bool(np.linalg.norm(got - want) <= program.norm_error * np.linalg.norm(want))
        else:
            agrees = np.allclose(got, want, rtol=1e-6, atol=1e-9 * max(1.0, float(np.abs(want).max(initial=0.0))))
        if not agrees:
            raise RuntimeError(f"svod's gradient of {program.name} by {name} differs from {peer}'s "
                               f"(largest difference {np.abs(got - want).max()})")
