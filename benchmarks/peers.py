"""The peers svod is measured beside: tinygrad, numba (the suite's ``@njit`` spellings in
``benchmarks.numba_kernels``) and numpy's BLAS threads. Each peer that is not installed or does not work
here says why, and the benchmark reports that instead of a figure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from benchmarks.timing import median_seconds
from svod.config import settings
from svod.workloads import Workload, agrees

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
