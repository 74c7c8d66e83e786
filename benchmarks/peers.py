"""The peers svod is measured beside: tinygrad, numba (the suite's ``@njit`` spellings in
``benchmarks.numba_kernels``), Warp and Taichi on the CPU (``benchmarks.warp_kernels``,
``benchmarks.taichi_kernels``) and numpy's BLAS threads. Each peer that is not installed or does not work
here says why, and the benchmark reports that instead of a figure.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np

from benchmarks.timing import median_seconds
from svod.config import settings
from svod.workloads import Workload, agrees, difference

NOT_INSTALLED = "not installed (pip install 'svod[bench]')"


class Tinygrad:
    """tinygrad on the device kind svod is measured on (its CPU or CL device), when it is installed and
    works here."""

    def __init__(self, device: str = "CPU") -> None:
        self.device = device
        self.error: str | None = None
        self.tg: Any = None
        os.environ.setdefault("CACHELEVEL", "0")  # cold compiles must really compile
        os.environ.setdefault("NUM_CPU_THREADS", str(settings.threads))  # as many threads as svod's
        try:
            import tinygrad

            tensor = tinygrad.Tensor.ones(4, device=device).realize()
            if tensor.numpy().sum() != 4:
                raise RuntimeError("tinygrad computed a wrong sum of ones")
            self.tg = tinygrad
        except ImportError:
            self.error = NOT_INSTALLED
        except Exception as err:
            self.error = f"unavailable: {type(err).__name__}: {err}"[:160]

    def sync(self) -> None:
        self.tg.Device[self.device].synchronize()

    def tensor(self, array: np.ndarray) -> Any:
        return self.tg.Tensor(array, device=self.device).realize()

    def timed(self, fn: Callable[[], Any], repeats: int) -> float:
        return median_seconds(self.synced(fn), repeats)

    def synced(self, fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            fn()
            self.sync()

        return run

    def suite_runner(self, workload: Workload, spelling: Callable[..., Any]) -> Callable[[], None]:
        """A suite workload under TinyJit, checked against numpy like svod's, captured and ready to replay."""
        tensors = [self.tensor(a) for a in workload.inputs]
        jit = self.tg.TinyJit(lambda *t: spelling(*t).realize())
        agrees(workload, jit(*tensors).numpy(), "tinygrad")
        jit(*tensors)  # the second call captures the kernels; later ones replay them
        return self.synced(lambda: jit(*tensors))


class Numba:
    """The suite's numba spellings (``benchmarks.numba_kernels``) on ``threads`` threads, when numba is
    installed."""

    def __init__(self, threads: int) -> None:
        self.error: str | None = None
        self.module: Any = None
        self.algorithms: Any = None
        """``benchmarks.numba_algorithms``, when numba is installed."""
        try:
            import numba

            from benchmarks import numba_algorithms, numba_kernels

            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            self.module = numba_kernels
            self.algorithms = numba_algorithms
        except ImportError:
            self.error = NOT_INSTALLED

    def runner(self, workload: Workload) -> Callable[[], None] | None:
        """``workload``'s numba spelling, compiled and checked against numpy."""
        if self.module is None:
            return None
        function = getattr(self.module, workload.family)
        output = np.zeros_like(workload.output)
        function(output, *workload.inputs)  # compiles; its time is not measured
        agrees(workload, output, "numba")
        return lambda: function(output, *workload.inputs)


SLOWEST_CALL_SECONDS = 1.0
"""A kernel language's call slower than this once (compiled) is not timed: Warp's single-threaded CPU matmul
of 1024^2 takes seconds a call, and the suite times every contestant over many calls."""


class KernelLanguages:
    """Warp's CPU device and Taichi's CPU backend, each running the suite as its users write kernels in its
    language, when installed; a family one cannot spell, one whose answer differs from numpy's and one too
    slow to time say why."""

    NAMES = ("warp", "taichi")
    MODULES: ClassVar[dict[str, str]] = {"warp": "benchmarks.warp_kernels", "taichi": "benchmarks.taichi_kernels"}

    def __init__(self) -> None:
        self.modules: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        for name, module in self.MODULES.items():
            try:
                self.modules[name] = importlib.import_module(module)
            except ImportError:
                self.errors[name] = NOT_INSTALLED

    def runners(self, workload: Workload) -> dict[str, Callable[[], None] | str]:
        """Each language's runner of ``workload``, compiled and checked against numpy, or why it has none."""
        found: dict[str, Callable[[], None] | str] = dict(self.errors)
        for name, module in self.modules.items():
            found[name] = self._runner(module, workload)
        return found

    @staticmethod
    def _runner(module: Any, workload: Workload) -> Callable[[], None] | str:
        missing = getattr(module, "MISSING", {}).get(workload.family)
        if missing is not None:
            return missing
        output = np.zeros_like(workload.output)
        try:
            run = module.launcher(workload.family, output, workload.inputs)
            run()  # compiles; its time is not measured
            start = time.perf_counter()
            run()
            took = time.perf_counter() - start
        except Exception as err:  # a peer that cannot run this kernel says why
            return f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
        ok, gap = difference(output, workload.numpy(), workload.tolerance)
        if not ok:
            return f"differs from numpy by {gap:.3g}"
        if took > SLOWEST_CALL_SECONDS:
            return f"not timed: one call took {took:.1f} s"
        return run


@contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """numpy's BLAS on ``threads`` threads, as many as svod and numba get (threadpoolctl, extra ``bench``)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        yield
