"""One kernel written each way a user may write it (``svod bench``'s ``spelling.<kernel>.<form>_ms``): svod
lowers a nest of parallel loops by what it reads and writes, so each spelling should run as fast as the best.

A transpose, ``@svod.kernel`` with its sizes variables, as its loops run over the input (``by_input``:
``out[c, r] = x[r, c]``) or over the output (``by_output``: ``out[i, j] = x[j, i]``).
"""

from __future__ import annotations

import numpy as np

import svod
from svod.frontend.pykernel import Kernel
from svod.workloads import Workload, single


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
