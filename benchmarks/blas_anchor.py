"""The honest bar for svod's matmul: the BLAS libraries a user would call instead, at their best on this host.

numpy's OpenBLAS picks its kernels by the CPU it recognises, and on a CPU it does not know it falls back to
older ones (Haswell's AVX2 kernels on an AVX-512 host). ``OPENBLAS_CORETYPE`` makes it use the kernels of a
named core; OpenBLAS reads it once, when it loads, so that figure comes from a process of its own. torch's
matmul is the other library users reach for (oneDNN or MKL on the CPU). Beside both, the host's FMA peak
(``benchmarks.fma_peak``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import llvmlite.binding as llvm
import numpy as np

from benchmarks.peers import NOT_INSTALLED
from benchmarks.timing import median_seconds

_TIMED = """
import sys, time
import numpy as np
n, dtype = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
a @ b
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter(); a @ b; times.append(time.perf_counter() - start)
print(sorted(times)[len(times) // 2])
"""


def _environment(threads: int, core: str | None) -> dict[str, str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OPENBLAS_VERBOSE": "2"}
    env.pop("OPENBLAS_CORETYPE", None)
    return env if core is None else {**env, "OPENBLAS_CORETYPE": core}


def openblas_core() -> str | None:
    """The core whose kernels numpy's OpenBLAS picks on this host by itself (it says so with
    ``OPENBLAS_VERBOSE=2``), or None where numpy's BLAS is not an OpenBLAS that says."""
    done = subprocess.run([sys.executable, "-c", "import numpy; numpy.ones((2, 2)) @ numpy.ones((2, 2))"],
                          env=_environment(1, None), capture_output=True, text=True, check=False)
    found = re.search(r"Core: (\S+)", done.stdout + done.stderr)
    return found.group(1) if found else None


def widest_core() -> str | None:
    """The OpenBLAS core whose kernels use this host's widest vectors: SkylakeX's (AVX-512) or Haswell's
    (AVX2 and FMA), or None for a host with neither."""
    features = llvm.get_host_cpu_features()
    return "SkylakeX" if features.get("avx512f") else "Haswell" if features.get("avx2") else None


def openblas_gflops(n: int, dtype: str, threads: int, core: str | None, repeats: int) -> float:
    """numpy's ``a @ b`` for two ``n`` x ``n`` matrices of ``dtype`` in a fresh process whose OpenBLAS uses
    ``core``'s kernels (its own choice where None), on ``threads`` threads: GFLOP/s of the median run."""
    done = subprocess.run([sys.executable, "-c", _TIMED, str(n), dtype, str(repeats)],
                          env=_environment(threads, core), capture_output=True, text=True, check=True)
    return 2 * n ** 3 / float(done.stdout.split()[-1]) / 1e9


def torch_gflops(n: int, dtype: str, threads: int, repeats: int) -> float | str:
    """torch's matmul of two ``n`` x ``n`` matrices of ``dtype`` on ``threads`` threads (GFLOP/s of the
    median run), or why there is no figure."""
    try:
        import torch
    except ImportError:
        return f"torch is {NOT_INSTALLED}"

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a, b = (torch.from_numpy(rng.standard_normal((n, n)).astype(dtype)) for _ in range(2))
    return 2 * n ** 3 / median_seconds(lambda: torch.matmul(a, b), repeats) / 1e9
