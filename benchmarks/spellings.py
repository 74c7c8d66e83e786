"""One kernel written each way a user may write it (``svod bench``'s ``spelling.<kernel>.<form>_ms``): svod
lowers a nest of parallel loops by what it reads and writes, so each spelling should run as fast as the best.

A transpose, ``@svod.kernel`` with its sizes variables, as its loops run over the input (``by_input``:
``out[c, r] = x[r, c]``) or over the output (``by_output``: ``out[i, j] = x[j, i]``).

The suite's softmax, layernorm and mlp (``benchmarks.suite.row_kernels``) as the suite writes them
(``kernel``: ``@svod.kernel`` loops, ``workloads.written_in_python``) and as NumPy inside ``@svod.jit``
(``jit``: the spelling numba users bring), the same computation on the same arrays.

Each kernel also as numba's own spelling (``numba``: ``benchmarks.numba_kernels``' ``prange`` loops, that file's
text under ``@svod.jit``), and beside every form the peers of the kernel suite (``peer_runners``: numba running
that same text, torch, ``torch.compile``, JAX, Warp, Taichi, tinygrad), each row with the fastest of them
(``spelling_metrics``).
"""

from __future__ import annotations

import ast
import functools
import linecache
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import svod
from benchmarks.busy import fastest_peer
from benchmarks.framework_peers import FrameworkPeers
from benchmarks.peers import KernelLanguages, Numba, Tinygrad
from benchmarks.results import Metric
from benchmarks.suite import tinygrad_spelling
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


NUMBA_KERNELS = Path(__file__).with_name("numba_kernels.py")
"""numba's spelling of each suite kernel, which numba runs as a peer and svod as the ``numba`` form."""
NUMBA_WRITTEN = "numba's prange loops (benchmarks/numba_kernels.py) under @svod.jit"
"""How the ``numba`` form is written, for its metric's note."""


@functools.cache
def numba_text() -> dict[str, Jit]:
    """Each function of ``NUMBA_KERNELS`` as its own text under ``@svod.jit`` (numba's ``prange`` is svod's),
    by name: the file is read, not imported, so the form needs no numba, and numba's dispatchers (``_dense``,
    which the mlp calls) are svod's jit functions too. The text is registered with ``linecache`` under its
    own name, since svod translates a function from its source."""
    source = NUMBA_KERNELS.read_text()
    functions = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
    lines = ["from typing import Any", "import math", "import numpy as np", "import svod", "from svod import prange"]
    for node in functions:
        lines += ["", "", "@svod.jit", str(ast.get_source_segment(source, node))]
    text = "\n".join(lines) + "\n"
    filename = f"<{NUMBA_KERNELS.name} under svod>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    names: dict[str, Any] = {"__name__": "numba_kernels_under_svod"}
    exec(compile(text, filename, "exec"), names)  # numba's spellings, as that file writes them
    return {node.name: names[node.name] for node in functions}


def numba_form(workload: Workload, device: Device) -> Callable[[], object]:
    """A call of numba's spelling of ``workload``'s family (``numba_text``) on ``device``, writing a fresh
    output as numba's does, checked against numpy first (a wrong answer is an error)."""
    function = numba_text()[workload.family]
    output = np.zeros_like(workload.output)
    function(output, *workload.inputs, device=device)
    agrees(workload, output, f"svod's run of numba's {workload.family}")
    return lambda: function(output, *workload.inputs, device=device)


@dataclass(frozen=True)
class Peers:
    """The kernel suite's peers, as installed here (``benchmarks.peers``, ``benchmarks.framework_peers``)."""

    numba: Numba
    frameworks: FrameworkPeers
    languages: KernelLanguages
    tinygrad: Tinygrad


def peer_runners(workload: Workload, peers: Peers) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """Each peer's runner of ``workload`` as the kernel suite spells it, checked against numpy, by name, and
    why each other peer has none."""
    found: dict[str, Callable[[], object] | str] = {**peers.frameworks.runners(workload),
                                                    **peers.languages.runners(workload)}
    found["numba"] = peers.numba.runner(workload) or peers.numba.error or "not installed"
    spelling = tinygrad_spelling(workload)
    if peers.tinygrad.error or isinstance(spelling, str):
        found["tinygrad"] = peers.tinygrad.error or str(spelling)
    else:
        found["tinygrad"] = peers.tinygrad.suite_runner(workload, spelling)
    runners = {name: run for name, run in found.items() if callable(run)}
    return runners, {name: why for name, why in found.items() if isinstance(why, str)}


COLUMNS = ("numpy", "numba", "tinygrad")
"""The peers a metric has a column for; the others go in its ``others``."""


def spelling_metrics(kernel: str, forms: dict[str, float | None], peers: dict[str, float], why: dict[str, str],
                     notes: dict[str, str], refused: dict[str, str] | None = None) -> list[Metric]:
    """One ``spelling.<kernel>.<form>_ms`` per form of svod's (milliseconds), beside every peer's figure and
    why a peer has none; each with the fastest peer's figure again as ``best peer (<name>)``, so every row
    gives svod's ratio to it. A form svod refused (``refused``: form to svod's message) has no figure, and
    the refusal as why."""
    metrics = []
    for form, milliseconds in forms.items():
        reasons = {**why, "svod": (refused or {})[form]} if form in (refused or {}) else dict(why)
        metric = Metric(f"spelling.{kernel}.{form}_ms", "ms", "lower", milliseconds, note=notes[form],
                        why_missing=reasons, others={p: v for p, v in peers.items() if p not in COLUMNS},
                        **{p: peers.get(p) for p in COLUMNS})
        best = fastest_peer(metric)
        if best is not None:
            metric.others[f"best peer ({best[0]})"] = best[1]
        metrics.append(metric)
    return metrics
