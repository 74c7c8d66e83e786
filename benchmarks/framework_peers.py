"""The suite's kernels as the frameworks users also pick spell them: torch (eager, and ``torch.compile``'s
Inductor) and JAX (``jax.jit``), each with the framework's own op where it has one (``torch.softmax``,
``jax.nn.softmax``). A peer's answer is checked against numpy before it is timed; one that is not installed,
cannot run a kernel or differs says why. ``benchmarks.gpu_peers`` times the torch spellings on a GPU; this
module's runners are the CPU's."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.peers import NOT_INSTALLED
from svod.config import settings
from svod.workloads import Workload, difference

Runner = Callable[[], object]


def torch_spellings(torch: Any) -> dict[str, Callable[..., Any]]:
    """torch's spelling of each suite family over the workload's inputs (a histogram's values as int64)."""
    functional = torch.nn.functional

    def nbody(pos: Any, mass: Any) -> Any:
        d = pos[None, :, :] - pos[:, None, :]
        inv = torch.rsqrt((d * d).sum(dim=2) + 1e-3)
        return (d * (mass * inv ** 3)[:, :, None]).sum(dim=1)

    def black_scholes(price: Any, strike: Any, years: Any) -> Any:
        root = 0.3 * years.sqrt()
        d1 = ((price / strike).log() + (0.02 + 0.5 * 0.3 * 0.3) * years) / root
        up, down = (0.5 * (1.0 + torch.erf(d * 0.7071067811865476)) for d in (d1, d1 - root))
        return price * up - strike * torch.exp(-0.02 * years) * down

    return {
        "softmax": lambda x: torch.softmax(x, dim=1),
        "layernorm": lambda x: functional.layer_norm(x, x.shape[1:], eps=1e-5),
        "conv2d": lambda x, w: functional.conv2d(x[None], w, padding=1)[0],
        "gather": lambda table, ids: table[ids],
        "histogram": lambda values, bins: torch.bincount(values, minlength=bins).to(torch.int32),
        "cumsum": lambda x: x.cumsum(dim=1),
        "transpose": lambda x: x.T.contiguous(),
        "matmul": lambda a, b: a @ b,
        "attention": lambda q, k, v: torch.softmax(q @ k.T / float(np.sqrt(q.shape[1])), dim=1) @ v,
        "batched_matmul": lambda a, b: a @ b,
        "matvec": lambda a, x: a @ x,
        "mlp": lambda x, w1, b1, w2, b2, w3, b3: (((x @ w1 + b1).relu() @ w2 + b2).relu() @ w3 + b3),
        "nbody": nbody,
        "resize": lambda image: functional.interpolate(image[None, None], scale_factor=2, mode="bilinear",
                                                       align_corners=False)[0, 0],
        "black_scholes": black_scholes,
        "mandelbrot": lambda height, width: _mandelbrot(torch, torch.float64, height, width),
    }


def jax_spellings(jax: Any) -> dict[str, Callable[..., Any]]:
    """JAX's spelling of each suite family (``jax.numpy`` and ``jax.nn``), to be ``jax.jit``-ed."""
    jnp = jax.numpy

    def layernorm(x: Any) -> Any:
        mean = x.mean(axis=1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(x.var(axis=1, keepdims=True) + 1e-5)

    def conv2d(x: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(x[None], w, (1, 1), ((1, 1), (1, 1)))[0]

    def nbody(pos: Any, mass: Any) -> Any:
        d = pos[None, :, :] - pos[:, None, :]
        inv = jax.lax.rsqrt((d * d).sum(axis=2) + 1e-3)
        return (d * (mass * inv ** 3)[:, :, None]).sum(axis=1)

    def black_scholes(price: Any, strike: Any, years: Any) -> Any:
        root = 0.3 * jnp.sqrt(years)
        d1 = (jnp.log(price / strike) + (0.02 + 0.5 * 0.3 * 0.3) * years) / root
        up, down = (0.5 * (1.0 + jax.scipy.special.erf(d * 0.7071067811865476)) for d in (d1, d1 - root))
        return price * up - strike * jnp.exp(-0.02 * years) * down

    return {
        "softmax": lambda x: jax.nn.softmax(x, axis=1),
        "layernorm": layernorm,
        "conv2d": conv2d,
        "gather": lambda table, ids: table[ids],
        "histogram": lambda values, bins: jnp.bincount(values, length=bins).astype(jnp.int32),
        "cumsum": lambda x: jnp.cumsum(x, axis=1),
        "transpose": lambda x: x.T,
        "matmul": lambda a, b: a @ b,
        "attention": lambda q, k, v: jax.nn.softmax(q @ k.T / np.sqrt(q.shape[1]).astype(np.float32), axis=1) @ v,
        "batched_matmul": lambda a, b: a @ b,
        "matvec": lambda a, x: a @ x,
        "mlp": lambda x, w1, b1, w2, b2, w3, b3: jax.nn.relu(jax.nn.relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3,
        "nbody": nbody,
        "resize": lambda image: jax.image.resize(image, (2 * image.shape[0], 2 * image.shape[1]), "linear"),
        "black_scholes": black_scholes,
        "mandelbrot": lambda height, width: _mandelbrot(jnp, jnp.float32, height, width),  # float64 needs x64
    }


def _mandelbrot(xp: Any, real: Any, height: int, width: int) -> Any:
    """Mandelbrot's for/if form over whole arrays of ``real`` numbers, as a framework's user writes it: 100
    masked steps."""
    cr = (-2.0 + 3.0 * xp.arange(width, dtype=real) / width)[None, :] + xp.zeros((height, 1), dtype=real)
    ci = (-1.5 + 3.0 * xp.arange(height, dtype=real) / height)[:, None] + xp.zeros((1, width), dtype=real)
    zr, zi = cr * 0, ci * 0
    counts = xp.zeros((height, width), dtype=xp.int32)
    for _ in range(100):
        inside = zr * zr + zi * zi <= 4.0
        zr, zi = xp.where(inside, zr * zr - zi * zi + cr, zr), xp.where(inside, 2.0 * zr * zi + ci, zi)
        counts = counts + inside
    return counts


COMPILED_FAMILIES = ("softmax", "layernorm", "cumsum", "transpose", "attention", "mlp", "nbody", "resize",
                     "black_scholes")
"""The families timed through ``torch.compile`` too: where Inductor fuses or writes its own loops (a BLAS call
or a convolution it hands to the same library torch eager calls), each compile taking it seconds."""
NOT_COMPILED = {"mandelbrot": "Inductor traces the 100 turns into one graph, which it compiled for over 10 minutes "
                              "on 2 cores"}
"""Why a family Inductor would write loops for is not timed through ``torch.compile``."""


def shared_llvm() -> str | None:
    """A shared LLVM library this process has mapped (``libLLVM-15.so`` that Mesa's lavapipe and llvmpipe load),
    or None (a process without ``/proc`` has none that can be seen)."""
    try:
        with open("/proc/self/maps") as maps:
            return next((line.split()[-1] for line in maps if "/libLLVM" in line), None)
    except OSError:
        return None


class FrameworkPeers:
    """torch eager, ``torch.compile`` and ``jax.jit`` on the CPU, on ``settings.threads`` threads, each as
    installed here or with why not."""

    NAMES = ("torch", "torch.compile", "jax")

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}
        self.torch: Any = None
        self.jax: Any = None
        try:
            import torch

            torch.set_num_threads(settings.threads)
            self.torch = torch
        except ImportError:
            self.errors["torch"] = self.errors["torch.compile"] = NOT_INSTALLED
        try:
            import jax

            self.jax = jax
        except ImportError:
            self.errors["jax"] = NOT_INSTALLED
        shared = shared_llvm()
        if self.torch is not None and shared is not None:
            self.errors["torch.compile"] = (f"not run in a process that has loaded {shared} (Mesa's, for WebGPU): the "
                                            "triton Inductor imports crashes beside it")

    def runners(self, workload: Workload) -> dict[str, Runner | str]:
        """Each peer's runner of ``workload``, checked against numpy, or why it has none."""
        found: dict[str, Runner | str] = dict(self.errors)
        candidates: dict[str, Callable[[], Any]] = {}
        if self.torch is not None:
            torch = self.torch
            spelling = torch_spellings(torch)[workload.family]
            inputs = self._arguments(workload, torch.from_numpy, lambda a: torch.from_numpy(a).long())
            candidates["torch"] = functools.partial(spelling, *inputs)
            if workload.family not in COMPILED_FAMILIES:
                found.setdefault("torch.compile", NOT_COMPILED.get(workload.family, "timed only where Inductor writes "
                                 "its own loops (BLAS and convolutions it calls as torch eager does)"))
            elif "torch.compile" not in self.errors:
                candidates["torch.compile"] = functools.partial(torch.compile(spelling, dynamic=False), *inputs)
        if self.jax is not None and any(a.dtype == np.float64 for a in workload.inputs) \
                and not self.jax.config.jax_enable_x64:
            found["jax"] = "computes float64 inputs in float32 (jax_enable_x64 is off): not the same work"
        elif self.jax is not None:
            jax = self.jax
            device = jax.devices("cpu")[0]
            inputs = self._arguments(workload, lambda a: jax.device_put(a, device), lambda a: jax.device_put(a, device))
            compiled = jax.jit(jax_spellings(jax)[workload.family], static_argnums=self._static(workload))
            candidates["jax"] = lambda: compiled(*inputs).block_until_ready()
        want = workload.numpy()
        for name, run in candidates.items():
            try:
                ok, err = difference(np.asarray(run()).astype(want.dtype), want, workload.tolerance)
                found[name] = run if ok else f"differs from numpy by {err:.3g}"
            except Exception as err:  # a peer that cannot run this kernel says why
                found[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
        return found

    @staticmethod
    def _arguments(workload: Workload, array: Callable[[np.ndarray], Any],
                   values: Callable[[np.ndarray], Any]) -> list[Any]:
        """The workload's inputs as the framework's arrays; a histogram's values (int64 for torch's bincount)
        and its bin count."""
        if workload.family == "histogram":
            return [values(workload.inputs[0].astype(np.int64)), workload.output.shape[0]]
        if workload.family == "mandelbrot":
            return list(workload.output.shape)
        return [array(a) for a in workload.inputs]

    @staticmethod
    def _static(workload: Workload) -> tuple[int, ...]:
        """The arguments ``jax.jit`` takes as constants: a histogram's bin count, Mandelbrot's sizes."""
        return {"histogram": (1,), "mandelbrot": (0, 1)}.get(workload.family, ())
