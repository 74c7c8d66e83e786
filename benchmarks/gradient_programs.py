"""The differentiated programs of ``benchmarks.gradients`` that a model's training step or a simulation's
optimisation is made of: a layer norm and a small classifier written as NumPy in ``@svod.jit`` (their gradients
by ``svod.vjp`` and ``svod.grad``), and a mass-spring cloth stepped through time by ``@svod.kernel`` calls on a
``svod.Tape``, differentiated with respect to its starting velocities. Each comes with its torch and JAX
spellings; the cloth with Warp's too (``benchmarks.warp_gradients``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import svod
from benchmarks.gradients import Arrays, GradientProgram


@svod.jit
def layernorm(x, gamma, beta):  # type: ignore[no-untyped-def]
    mean = np.mean(x, axis=1, keepdims=True)
    centred = x - mean
    variance = np.mean(centred * centred, axis=1, keepdims=True)
    return centred / np.sqrt(variance + 1e-5) * gamma + beta


@svod.jit
def mlp_loss(w1, b1, w2, b2, w3, b3, x, onehot):  # type: ignore[no-untyped-def]
    hidden = np.maximum(x @ w1 + b1, 0.0)
    hidden2 = np.maximum(hidden @ w2 + b2, 0.0)
    logits = hidden2 @ w3 + b3
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_total = np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.sum(onehot * (shifted - log_total)) / x.shape[0]


def layernorm_program(rows: int, cols: int, dtype: type, rng: np.random.Generator) -> GradientProgram:
    arrays: Arrays = {"x": rng.standard_normal((rows, cols)).astype(dtype),
                      "gamma": rng.uniform(0.5, 1.5, cols).astype(dtype),
                      "beta": rng.standard_normal(cols).astype(dtype)}
    cotangent: np.ndarray = rng.standard_normal((rows, cols)).astype(dtype)

    def gradient(arrays: Arrays) -> tuple[np.ndarray, ...]:
        _, pullback = svod.vjp(layernorm, arrays["x"], arrays["gamma"], arrays["beta"])
        return tuple(pullback(cotangent))

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        return torch.nn.functional.layer_norm(t["x"], (cols,), t["gamma"], t["beta"], eps=1e-5)

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        jnp = jax.numpy
        centred = t["x"] - jnp.mean(t["x"], axis=1, keepdims=True)
        variance = jnp.mean(centred * centred, axis=1, keepdims=True)
        return centred / jnp.sqrt(variance + 1e-5) * t["gamma"] + t["beta"]

    return GradientProgram("layernorm", f"layer norm of {rows}x{cols} {np.dtype(dtype).name} by x, gamma and beta, "
                           "NumPy in @svod.jit (svod.vjp)", arrays, ("x", "gamma", "beta"), cotangent,
                           lambda a: layernorm(a["x"], a["gamma"], a["beta"]), gradient, torch_forward, jax_forward,
                           norm_error=_norm_error(dtype))


MLP_WEIGHTS = ("w1", "b1", "w2", "b2", "w3", "b3")


def mlp_program(batch: int, widths: tuple[int, int, int, int], dtype: type,
                rng: np.random.Generator) -> GradientProgram:
    """A ``widths`` perceptron (two ReLU layers) and its mean cross-entropy over ``batch`` one-hot labels."""
    arrays: Arrays = {}
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        arrays[f"w{layer + 1}"] = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(dtype)
        arrays[f"b{layer + 1}"] = (0.1 * rng.standard_normal(fan_out)).astype(dtype)
    arrays["x"] = rng.standard_normal((batch, widths[0])).astype(dtype)
    arrays["onehot"] = np.eye(widths[-1], dtype=dtype)[rng.integers(0, widths[-1], batch)]
    order = (*MLP_WEIGHTS, "x", "onehot")

    def forward(a: Arrays) -> np.ndarray:
        return np.asarray(mlp_loss(*(a[name] for name in order))).reshape(1)

    def gradient(a: Arrays) -> tuple[np.ndarray, ...]:
        return tuple(svod.grad(mlp_loss, argnums=tuple(range(len(MLP_WEIGHTS))))(*(a[name] for name in order)))

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        hidden = torch.relu(t["x"] @ t["w1"] + t["b1"])
        logits = torch.relu(hidden @ t["w2"] + t["b2"]) @ t["w3"] + t["b3"]
        return (-(t["onehot"] * torch.log_softmax(logits, dim=1)).sum() / batch).reshape(1)

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        hidden = jax.nn.relu(t["x"] @ t["w1"] + t["b1"])
        logits = jax.nn.relu(hidden @ t["w2"] + t["b2"]) @ t["w3"] + t["b3"]
        return (-(t["onehot"] * jax.nn.log_softmax(logits, axis=1)).sum() / batch).reshape(1)

    shape = "-".join(map(str, widths))
    return GradientProgram("mlp", f"mean cross-entropy of a {shape} {np.dtype(dtype).name} ReLU perceptron over "
                           f"{batch} samples by its weights, NumPy in @svod.jit (svod.grad)", arrays, MLP_WEIGHTS,
                           np.ones(1, dtype), forward, gradient, torch_forward, jax_forward,
                           norm_error=_norm_error(dtype))


def _norm_error(dtype: type) -> float | None:
    """How near a peer's float32 gradient is to agree with svod's (``GradientProgram.norm_error``)."""
    return None if np.dtype(dtype) == np.float64 else 1e-3


@svod.kernel
def spring_forces(force, x, springs, rest, stiffness):  # type: ignore[no-untyped-def]
    for s in svod.prange(springs.shape[0]):
        a = springs[s, 0]
        b = springs[s, 1]
        dx = x[b, 0] - x[a, 0]
        dy = x[b, 1] - x[a, 1]
        dz = x[b, 2] - x[a, 2]
        length = svod.math.sqrt(dx * dx + dy * dy + dz * dz)
        pull = stiffness * (length - rest[s]) / length
        svod.atomic_add(force, 3 * a, pull * dx)
        svod.atomic_add(force, 3 * a + 1, pull * dy)
        svod.atomic_add(force, 3 * a + 2, pull * dz)
        svod.atomic_add(force, 3 * b, -pull * dx)
        svod.atomic_add(force, 3 * b + 1, -pull * dy)
        svod.atomic_add(force, 3 * b + 2, -pull * dz)


@svod.kernel
def integrate(x_out, v_out, x, v, force, damping, dt):  # type: ignore[no-untyped-def]
    for i in svod.prange(x.shape[0]):
        vx = damping * v[i, 0] + dt * force[3 * i]
        vy = damping * v[i, 1] + dt * (force[3 * i + 1] - 9.8)
        vz = damping * v[i, 2] + dt * force[3 * i + 2]
        v_out[i, 0] = vx
        v_out[i, 1] = vy
        v_out[i, 2] = vz
        x_out[i, 0] = x[i, 0] + dt * vx
        x_out[i, 1] = x[i, 1] + dt * vy
        x_out[i, 2] = x[i, 2] + dt * vz


CLOTH = {"stiffness": 50.0, "damping": 0.99, "dt": 0.01}
"""The cloth's spring stiffness (per unit mass), the velocity kept each step and the step (semi-implicit Euler,
stable for these springs)."""


def cloth_springs(side: int) -> np.ndarray:
    """The springs of a ``side`` by ``side`` grid of particles (numbered by row): each to its right and lower
    neighbours, and the two diagonals of each square."""
    index = np.arange(side * side, dtype=np.int32).reshape(side, side)
    pairs = [(index[:, :-1], index[:, 1:]), (index[:-1, :], index[1:, :]), (index[:-1, :-1], index[1:, 1:]),
             (index[:-1, 1:], index[1:, :-1])]
    return np.concatenate([np.stack([a.ravel(), b.ravel()], axis=1) for a, b in pairs]).astype(np.int32)


def cloth_run(x0: np.ndarray, v0: np.ndarray, springs: np.ndarray, rest: np.ndarray,
              steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` steps of the cloth from ``x0`` and ``v0`` (left as they were): the last positions and
    velocities. Two pairs of arrays in turn; each step's forces a new array."""
    pairs = [(np.empty_like(x0), np.empty_like(v0)), (np.empty_like(x0), np.empty_like(v0))]
    x, v = x0, v0
    for step in range(steps):
        force = np.zeros(x0.size)
        spring_forces(force, x, springs, rest, CLOTH["stiffness"])
        x_out, v_out = pairs[step % 2]
        integrate(x_out, v_out, x, v, force, CLOTH["damping"], CLOTH["dt"])
        x, v = x_out, v_out
    return x, v


def cloth_program(side: int, steps: int, rng: np.random.Generator) -> GradientProgram:
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), axis=-1).reshape(-1, 2) * 0.1
    x0 = np.column_stack([grid[:, 0], np.zeros(side * side), grid[:, 1]]) + 0.01 * rng.standard_normal(
        (side * side, 3))
    springs = cloth_springs(side)
    rest = np.linalg.norm(x0[springs[:, 1]] - x0[springs[:, 0]], axis=1) * 0.95
    arrays = {"x0": x0, "v0": 0.1 * rng.standard_normal((side * side, 3)), "springs": springs, "rest": rest}
    cotangent = rng.standard_normal((side * side, 3))

    def forward(a: Arrays) -> np.ndarray:
        return cloth_run(a["x0"], a["v0"], a["springs"], a["rest"], steps)[0]

    def gradient(a: Arrays) -> tuple[np.ndarray, ...]:
        with svod.Tape() as tape:
            last, _ = cloth_run(a["x0"], a["v0"], a["springs"], a["rest"], steps)
        tape.backward(grads=[(last, cotangent)])
        return (tape.grad(a["v0"]),)

    def torch_forward(torch: Any, t: dict[str, Any]) -> Any:
        a, b = t["springs"][:, 0].long(), t["springs"][:, 1].long()
        x, v = t["x0"], t["v0"]
        gravity = torch.tensor([0.0, -9.8, 0.0], dtype=x.dtype)
        for _ in range(steps):
            d = x[b] - x[a]
            length = torch.sqrt((d * d).sum(dim=1, keepdim=True))
            pull = CLOTH["stiffness"] * (length - t["rest"][:, None]) / length * d
            force = torch.zeros_like(x).index_add(0, a, pull).index_add(0, b, -pull)
            v = CLOTH["damping"] * v + CLOTH["dt"] * (force + gravity)
            x = x + CLOTH["dt"] * v
        return x

    def jax_forward(jax: Any, t: dict[str, Any]) -> Any:
        jnp = jax.numpy
        a, b = t["springs"][:, 0], t["springs"][:, 1]
        gravity = jnp.array([0.0, -9.8, 0.0], dtype=t["x0"].dtype)

        def step(_: Any, state: Any) -> Any:
            x, v = state
            d = x[b] - x[a]
            length = jnp.sqrt((d * d).sum(axis=1, keepdims=True))
            pull = CLOTH["stiffness"] * (length - t["rest"][:, None]) / length * d
            force = jnp.zeros_like(x).at[a].add(pull).at[b].add(-pull)
            v = CLOTH["damping"] * v + CLOTH["dt"] * (force + gravity)
            return x + CLOTH["dt"] * v, v

        return jax.lax.fori_loop(0, steps, step, (t["x0"], t["v0"]))[0]

    return GradientProgram("cloth", f"{steps} steps of a {side}x{side} float64 mass-spring cloth "
                           f"({springs.shape[0]} springs, scattered by svod.atomic_add) by its starting velocities, "
                           "kernel calls on a svod.Tape", arrays, ("v0",), cotangent, forward, gradient,
                           torch_forward, jax_forward, steps=steps)


MoreSizes = tuple[int, int, int, int, int]
"""The sizes of this module's programs: the layer norm's rows and columns, the perceptron's batch, and the
cloth's side and steps."""
MORE_FULL: MoreSizes = (4096, 1024, 1024, 64, 100)
MORE_QUICK: MoreSizes = (1024, 1024, 256, 32, 100)
MLP_WIDTHS = (784, 512, 512, 10)


def more_programs(sizes: MoreSizes, dtype: type = np.float32,
                  widths: tuple[int, int, int, int] = MLP_WIDTHS) -> list[GradientProgram]:
    """This module's programs at ``sizes``, the layer norm and the perceptron in ``dtype``, on random data (the
    same each run)."""
    rng = np.random.default_rng(11)
    rows, cols, batch, side, steps = sizes
    return [layernorm_program(rows, cols, dtype, rng), mlp_program(batch, widths, dtype, rng),
            cloth_program(side, steps, rng)]
