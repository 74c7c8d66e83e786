"""The differentiated programs of ``benchmarks.gradients`` as a user of NVIDIA Warp writes them for its CPU
device: a ``@wp.kernel`` per program, one thread per element (or pair), differentiated by ``wp.Tape``. Importing
this module needs warp-lang; a kernel and its adjoint compile on the first launch, which the benchmark's warm-up
absorbs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import warp as wp

wp.config.log_level = wp.LOG_WARNING  # not a banner and a line per module load on stdout
wp.init()

F1 = wp.array(dtype=wp.float64)
F2 = wp.array2d(dtype=wp.float64)


@wp.kernel
def black_scholes(price: F1, spot: F1, strike: F1, years: F1, rate: F1, vol: F1):
    i = wp.tid()
    root = wp.sqrt(years[i])
    d1 = (wp.log(spot[i] / strike[i]) + (rate[i] + wp.float64(0.5) * vol[i] * vol[i]) * years[i]) / (vol[i] * root)
    d2 = d1 - vol[i] * root
    up = wp.float64(0.5) * (wp.float64(1.0) + wp.erf(d1 * wp.float64(0.7071067811865476)))
    down = wp.float64(0.5) * (wp.float64(1.0) + wp.erf(d2 * wp.float64(0.7071067811865476)))
    price[i] = spot[i] * up - strike[i] * wp.exp(-rate[i] * years[i]) * down


@wp.kernel
def nbody_energy(energy: F1, pos: F2):
    i, j = wp.tid()
    if j > i:
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        wp.atomic_add(energy, 0, wp.float64(-1.0) / wp.sqrt(dx * dx + dy * dy + dz * dz + wp.float64(0.01)))


@wp.kernel
def logits(z: F1, features: F2, weights: F1):
    i = wp.tid()
    total = wp.float64(0.0)
    for k in range(features.shape[1]):
        total += features[i, k] * weights[k]
    z[i] = total


@wp.kernel
def logistic_loss(loss: F1, z: F1, labels: F1):
    i = wp.tid()
    wp.atomic_add(loss, 0, wp.log(wp.float64(1.0) + wp.exp(-labels[i] * z[i])))


@wp.kernel
def softmax4(probs: F2, scores: F2):
    i = wp.tid()
    top = wp.max(wp.max(scores[i, 0], scores[i, 1]), wp.max(scores[i, 2], scores[i, 3]))
    e0 = wp.exp(scores[i, 0] - top)
    e1 = wp.exp(scores[i, 1] - top)
    e2 = wp.exp(scores[i, 2] - top)
    e3 = wp.exp(scores[i, 3] - top)
    total = e0 + e1 + e2 + e3
    probs[i, 0] = e0 / total
    probs[i, 1] = e1 / total
    probs[i, 2] = e2 / total
    probs[i, 3] = e3 / total


@wp.kernel
def jacobi_step(out: F2, old: F2):  # not "new": Warp names the C++ arguments so
    i, j = wp.tid()
    if i == 0 or j == 0 or i == old.shape[0] - 1 or j == old.shape[1] - 1:
        out[i, j] = old[i, j]
    else:
        out[i, j] = wp.float64(0.25) * (old[i - 1, j] + old[i + 1, j] + old[i, j - 1] + old[i, j + 1])


@wp.kernel
def spring_forces(force: F1, x: F2, springs: wp.array2d(dtype=wp.int32), rest: F1, stiffness: wp.float64):
    s = wp.tid()
    a = springs[s, 0]
    b = springs[s, 1]
    dx = x[b, 0] - x[a, 0]
    dy = x[b, 1] - x[a, 1]
    dz = x[b, 2] - x[a, 2]
    length = wp.sqrt(dx * dx + dy * dy + dz * dz)
    pull = stiffness * (length - rest[s]) / length
    wp.atomic_add(force, 3 * a, pull * dx)
    wp.atomic_add(force, 3 * a + 1, pull * dy)
    wp.atomic_add(force, 3 * a + 2, pull * dz)
    wp.atomic_add(force, 3 * b, -pull * dx)
    wp.atomic_add(force, 3 * b + 1, -pull * dy)
    wp.atomic_add(force, 3 * b + 2, -pull * dz)


@wp.kernel
def integrate(x_out: F2, v_out: F2, x: F2, v: F2, force: F1, damping: wp.float64, dt: wp.float64):
    i = wp.tid()
    vx = damping * v[i, 0] + dt * force[3 * i]
    vy = damping * v[i, 1] + dt * (force[3 * i + 1] - wp.float64(9.8))
    vz = damping * v[i, 2] + dt * force[3 * i + 2]
    v_out[i, 0] = vx
    v_out[i, 1] = vy
    v_out[i, 2] = vz
    x_out[i, 0] = x[i, 0] + dt * vx
    x_out[i, 1] = x[i, 1] + dt * vy
    x_out[i, 2] = x[i, 2] + dt * vz


JACOBI_STEPS = 200
"""As ``benchmarks.gradients.JACOBI_STEPS``."""


Launches = Callable[[dict[str, Any], Any], None]
"""A program's launches: on the Warp arrays of its inputs (by name), into its output array."""


def _one(kernel: Any, dim: Callable[[dict[str, Any]], Any], names: tuple[str, ...]) -> Launches:
    return lambda arrays, output: wp.launch(kernel, dim=dim(arrays), inputs=[output, *(arrays[n] for n in names)],
                                            device="cpu")


def _logistic(arrays: dict[str, Any], output: Any) -> None:
    z = wp.zeros(arrays["features"].shape[0], dtype=wp.float64, device="cpu", requires_grad=True)
    wp.launch(logits, dim=z.shape[0], inputs=[z, arrays["features"], arrays["weights"]], device="cpu")
    wp.launch(logistic_loss, dim=z.shape[0], inputs=[output, z, arrays["labels"]], device="cpu")


def _jacobi(arrays: dict[str, Any], output: Any) -> None:
    """A new array for each step but the last's (``output``): Warp's tape differentiates no array overwritten
    after a launch read it."""
    u = arrays["u0"]
    for step in range(JACOBI_STEPS):
        new = output if step == JACOBI_STEPS - 1 else wp.empty_like(u, requires_grad=True)
        wp.launch(jacobi_step, dim=u.shape, inputs=[new, u], device="cpu")
        u = new


CLOTH = {"stiffness": 50.0, "damping": 0.99, "dt": 0.01}
"""As ``benchmarks.gradient_programs.CLOTH``."""


def _cloth(arrays: dict[str, Any], output: Any, steps: int) -> None:
    """``steps`` steps, new arrays for each (the last's positions ``output``): Warp's tape differentiates no
    array overwritten after a launch read it."""
    x, v = arrays["x0"], arrays["v0"]
    count = x.shape[0]
    for step in range(steps):
        force = wp.zeros(3 * count, dtype=wp.float64, device="cpu", requires_grad=True)
        wp.launch(spring_forces, dim=arrays["springs"].shape[0],
                  inputs=[force, x, arrays["springs"], arrays["rest"], wp.float64(CLOTH["stiffness"])], device="cpu")
        x_out = output if step == steps - 1 else wp.empty_like(x, requires_grad=True)
        v_out = wp.empty_like(v, requires_grad=True)
        wp.launch(integrate, dim=count, inputs=[x_out, v_out, x, v, force, wp.float64(CLOTH["damping"]),
                                                wp.float64(CLOTH["dt"])], device="cpu")
        x, v = x_out, v_out


LAUNCHES: dict[str, Launches] = {
    "black_scholes": _one(black_scholes, lambda a: a["spot"].shape[0], ("spot", "strike", "years", "rate", "vol")),
    "nbody_energy": _one(nbody_energy, lambda a: (a["pos"].shape[0], a["pos"].shape[0]), ("pos",)),
    "logistic_regression": _logistic,
    "softmax": _one(softmax4, lambda a: a["scores"].shape[0], ("scores",)),
    "jacobi": _jacobi,
}
"""Each program's launches, by its name."""


def runners(name: str, arrays: dict[str, np.ndarray], wrt: tuple[str, ...], cotangent: np.ndarray,
            output_shape: tuple[int, ...],
            steps: int = 0) -> tuple[Callable[[], Any], Callable[[], list[np.ndarray]]]:
    """Warp's forward (the launches) and gradient (the launches on a ``wp.Tape``, then its backward from
    ``cotangent``; the gradients zeroed first), of the program ``name`` on ``arrays`` (float64; the cloth's
    ``steps``)."""
    if name not in (*LAUNCHES, "cloth"):
        raise NotImplementedError(f"no Warp spelling of {name} is written here")
    launches = functools.partial(_cloth, steps=steps) if name == "cloth" else LAUNCHES[name]
    inputs = {key: wp.array(value, dtype=wp.int32 if value.dtype.kind == "i" else wp.float64, device="cpu",
                            requires_grad=key in wrt) for key, value in arrays.items()}
    seed = wp.array(cotangent, dtype=wp.float64, device="cpu")

    def forward() -> Any:
        output = wp.zeros(output_shape, dtype=wp.float64, device="cpu")
        launches(inputs, output)
        wp.synchronize_device("cpu")
        return output

    def gradient() -> list[np.ndarray]:
        output = wp.zeros(output_shape, dtype=wp.float64, device="cpu", requires_grad=True)
        for key in wrt:
            inputs[key].grad.zero_()
        tape = wp.Tape()
        with tape:
            launches(inputs, output)
        tape.backward(grads={output: seed})
        wp.synchronize_device("cpu")
        return [inputs[key].grad.numpy() for key in wrt]

    return forward, gradient
