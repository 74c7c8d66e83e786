"""One kernel written each way a user may write it (``svod bench``'s ``spelling.<kernel>.<form>_ms``): svod
lowers a nest of parallel loops by what it reads and writes, so each spelling should run as fast as the best.

A transpose, ``@svod.kernel`` with its sizes variables, as its loops run over the input (``by_input``:
``out[c, r] = x[r, c]``) or over the output (``by_output``: ``out[i, j] = x[j, i]``).

The suite's softmax, layernorm and mlp (``benchmarks.suite.row_kernels``) as the suite writes them
(``kernel``: ``@svod.kernel`` loops, ``workloads.written_in_python``) and as NumPy inside ``@svod.jit``
(``jit``: the spelling numba users bring), the same computation on the same arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import svod
from svod.device import Device
from svod.frontend.jit import Jit
from svod.frontend.pykernel import Kernel
from svod.workloads import Workload, agrees, single, written_in_python


@svod.kernel
def transpose_by_input(out, x):  # type: ignore[no-untyped-def]
    rows, cols = x.shape
    for r in svod.prange(rows):
        for c in svod.prange(cols):
            out[c, r] = x[r, c]


@svod.kernel
def transpose_by_output(out, x):  # type: ignore[no-untyped-def]
    m, n = out.shape
    for i in svod.prange(m):
        for j in svod.prange(n):
            out[i, j] = x[j, i]


TRANSPOSES: dict[str, Kernel] = {"by_input": transpose_by_input, "by_output": transpose_by_output}
"""Each spelling of the transpose, by the name of its form."""
WRITTEN = {"by_input": "for r, c over x's shape: out[c, r] = x[r, c]",
           "by_output": "for i, j over out's shape: out[i, j] = x[j, i]"}
"""How each form is written, for its metric's note."""


def transpose_spellings(side: int) -> dict[str, Workload]:
    """Each spelling of a ``side`` x ``side`` float32 transpose as a workload, by form; numpy's answer is
    ``np.ascontiguousarray(x.T)``, which must match exactly."""
    data = np.random.default_rng(5).standard_normal((side, side)).astype(np.float32)
    spelled = {}
    for form, kernel in TRANSPOSES.items():
        out = np.zeros_like(data)
        bound = kernel.bind(out, data)
        spelled[form] = single(f"transpose_{form}", bound.ast, out, [data], lambda: np.ascontiguousarray(data.T),
                               tolerance=0, var_vals={name: int(v) for name, v in bound.var_vals.items()},
                               family="transpose")
    return spelled


@svod.jit
def softmax_jit(x):  # type: ignore[no-untyped-def]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@svod.jit
def layernorm_jit(x):  # type: ignore[no-untyped-def]
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=1, keepdims=True)
    return centred / np.sqrt(var + 1e-5)


@svod.jit
def mlp_jit(x, w1, b1, w2, b2, w3, b3):  # type: ignore[no-untyped-def]
    h = np.maximum(x @ w1 + b1, 0.0)
    h2 = np.maximum(h @ w2 + b2, 0.0)
    return h2 @ w3 + b3


ARRAY_FORMS: dict[str, Jit] = {"softmax": softmax_jit, "layernorm": layernorm_jit, "mlp": mlp_jit}
"""Each row kernel's NumPy spelling inside ``@svod.jit``, by the suite's name of the kernel; each takes the
suite workload's inputs in order."""
ARRAY_WRITTEN = {"kernel": "the suite's @svod.kernel loops", "jit": "NumPy inside @svod.jit"}
"""How each form of a row kernel is written, for its metric's note."""


@dataclass(frozen=True)
class RowSpelling:
    """One of the suite's row kernels: its workload in the suite's ``@svod.kernel`` form, and the same
    computation as NumPy in ``@svod.jit``."""

    workload: Workload
    jit: Jit

    def run_jit(self, device: Device) -> Callable[[], Any]:
        """A call of the ``jit`` form on the workload's inputs on ``device``, which returns its answer."""
        inputs = self.workload.inputs
        return lambda: self.jit(*inputs, device=device)

    def check_jit(self, device: Device) -> None:
        """Compare the ``jit`` form's answer with numpy's (the workload's tolerance); a wrong one is an error."""
        agrees(self.workload, np.asarray(self.run_jit(device)()), f"svod's {self.jit.name}")


def row_spellings(workloads: dict[str, Workload]) -> dict[str, RowSpelling]:
    """Each of ``workloads`` (``benchmarks.suite.row_kernels``) in its two forms, by name: the kernels as the
    suite builds them (``@svod.kernel``, sizes variables) and ``ARRAY_FORMS``."""
    return {name: RowSpelling(written_in_python(workload, static_shapes=False), ARRAY_FORMS[name])
            for name, workload in workloads.items()}
