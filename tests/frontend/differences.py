"""Gradients against central finite differences of a kernel's own function run as plain Python (float64), in a
random direction of every float array argument: what the tests of ``svod.vjp`` check each kernel with."""

from __future__ import annotations

import numpy as np

import svod
from svod.dtype import dtypes
from svod.frontend.adjoint import Adjoint


def float_of(device) -> type:
    """float64 where the device computes it, float32 where it does not."""
    return np.float64 if dtypes.float64 in device.caps.element_dtypes else np.float32


def _loss(kernel, args, weights) -> float:
    """sum(w * y) over the arrays ``kernel`` writes, its function run as plain Python on float64 copies."""
    copies = [(a.astype(np.float64) if a.dtype.kind == "f" else a.copy()) if isinstance(a, np.ndarray) else a
              for a in args]
    with np.errstate(all="ignore"):  # an overflow is a value of plain Python's, as the kernel's
        kernel.fn(*copies)
    return sum(float(np.sum(copies[position] * w)) for position, w in weights.items())


def agrees_with_differences(kernel, device, *args):
    """The pullback of ``kernel`` on ``device`` against central differences of plain Python, in a random
    direction of every float array argument."""
    rng = np.random.default_rng(7)
    call = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    result, pullback = svod.vjp(kernel, *call, device=device)
    written = [p for p, a in enumerate(call) if any(a is r for r in result)]
    weights = {p: rng.standard_normal(args[p].shape).astype(args[p].dtype) for p in written}
    grads = pullback(tuple(weights[p] for p in written))
    floats = [p for p, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    assert [p for p, g in enumerate(grads) if g is not None] == floats
    directions = {p: rng.standard_normal(args[p].shape) for p in floats}
    h = 1e-6

    def moved(sign: float) -> list:
        return [a.astype(np.float64) + sign * h * directions[p] if p in floats else a for p, a in enumerate(args)]
    expected = (_loss(kernel, moved(1.0), weights) - _loss(kernel, moved(-1.0), weights)) / (2 * h)
    got = sum(float(np.sum(grads[p].astype(np.float64) * directions[p])) for p in floats)
    scale = sum(float(np.linalg.norm(grads[p]) * np.linalg.norm(directions[p])) for p in floats)
    tolerance = 1e-4 * abs(expected) + 1e-9 if args[floats[0]].dtype == np.float64 else 2e-3 * scale
    assert abs(got - expected) <= tolerance, (kernel.name, got, expected)
    for p in floats:
        assert grads[p].shape == args[p].shape and grads[p].dtype == args[p].dtype


def pulled(made: Adjoint, kernel, args: list[np.ndarray], cotangents: dict[str, np.ndarray],
           device) -> list[np.ndarray]:
    """The adjoints of ``kernel``'s ``args`` (as the forward found them) from those of its results
    ``cotangents``, by ``made.pull`` on copies."""
    grads = {name: cotangents[name].copy() if name in cotangents else np.zeros_like(args[kernel.parameters.index(name)])
             for name, _ in made.grads}
    made.pull(dict(zip(kernel.parameters, [a.copy() for a in args], strict=True)), dict(grads),
              dict.fromkeys(grads, False), device)
    return list(grads.values())
