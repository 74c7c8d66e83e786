"""What a benchmark run reports: one ``Metric`` per figure, as a table of svod/peer ratios, as JSON (whose
names and fields are stable: runs are compared across machines and days), and as a chart.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import numpy as np

import svod
from svod.cli.table import format_table
from svod.config import settings
from svod.errors import SvodError


@dataclass
class Metric:
    name: str
    unit: str
    better: str
    svod: float | None
    numpy: float | None = None
    tinygrad: float | None = None
    note: str = ""
    numba: float | None = None
    why_missing: dict[str, str] = dataclasses.field(default_factory=dict)
    """For a peer without a figure, why it has none."""
    others: dict[str, float | None] = dataclasses.field(default_factory=dict)
    """Figures of contestants beside the columns above, by name: svod compiled another way (``svod static``:
    a kernel suite's sizes as constants)."""

    def ratio(self, peer: float | None) -> float | None:
        """svod relative to a peer, > 1 when svod is better."""
        if self.svod is None or peer is None or self.svod <= 0 or peer <= 0:
            return None
        return self.svod / peer if self.better == "higher" else peer / self.svod


def machine_info() -> dict[str, Any]:
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": llvm.get_host_cpu_name(),
            "cores": os.cpu_count(), "threads": settings.threads, "numpy": np.__version__,
            "svod": svod.__version__}


def to_json(metrics: list[Metric], failed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The run as JSON; ``failed_steps`` names each step that could not run (its figures are missing) and
    why."""
    return {"machine": machine_info(),
            "metrics": {m.name: {"unit": m.unit, "better": m.better, "svod": m.svod, "numpy": m.numpy,
                                 "numba": m.numba, "tinygrad": m.tinygrad, "why_missing": m.why_missing,
                                 "others": m.others}
                         for m in metrics},
            "failed_steps": dict(failed or {})}


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def report(metrics: list[Metric], tinygrad_error: str | None, failed: Mapping[str, str] | None = None) -> str:
    """The table of figures and ratios, why each peer without a figure has none, and why each step that
    failed (``failed``: step title to reason) has no figures."""
    rows = [(m.name, m.unit, m.better, _value(m.svod), _value(m.numpy), _value(m.numba), _value(m.tinygrad),
             _ratio(m.ratio(m.numpy)), _ratio(m.ratio(m.numba)), _ratio(m.ratio(m.tinygrad)), m.note)
            for m in metrics]
    table = format_table(("metric", "unit", "better", "svod", "numpy", "numba", "tinygrad", "vs numpy", "vs numba",
                          "vs tinygrad", "what"), rows)
    others = [(m.name, other, _value(value), _ratio(m.ratio(value)))
              for m in metrics for other, value in m.others.items()]
    if others:
        table += "\n\n" + format_table(("metric", "beside svod", "figure", "svod vs it"), others)
    lines = ["ratios: > 1.00x means svod is better in the metric's direction"]
    if tinygrad_error:
        lines.append(f"tinygrad: {tinygrad_error}")
    reasons = sorted({(peer, why) for m in metrics for peer, why in m.why_missing.items()})
    lines += [f"{peer}: {why} ({', '.join(m.name for m in metrics if m.why_missing.get(peer) == why)})"
              for peer, why in reasons if why != tinygrad_error]
    lines += [f"step {title!r} did not run, so its figures are missing: {why}" for title, why in (failed or {}).items()]
    return "\n".join([table, *lines])


def plot(metrics: list[Metric], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SvodError("--plot needs matplotlib (pip install 'svod[bench]')", stage="check") from err
    peers = [p for p in _PLOTTED if any(_figure(m, p) is not None for m in metrics)]
    named = [(m.name, [m.ratio(_figure(m, p)) for p in peers]) for m in metrics]
    named = [(name, ratios) for name, ratios in named if any(r is not None for r in ratios)]
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(named) * max(len(peers), 1) + 1.5))
    positions = np.arange(len(named))
    height = 0.8 / max(len(peers), 1)
    for k, peer in enumerate(peers):
        ax.barh(positions + (k - (len(peers) - 1) / 2) * height, [ratios[k] or 0 for _, ratios in named],
                height=height, label=f"svod / {peer}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(positions, [name for name, _ in named])
    ax.set_xscale("log")
    ax.set_xlabel("ratio (> 1: svod better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


_PLOTTED = ("numpy", "numba", "tinygrad", "torch", "torch.compile", "jax", "warp", "taichi")
"""The peers a chart shows, each where the run has its figures."""


def _figure(metric: Metric, peer: str) -> float | None:
    column = getattr(metric, peer, None) if peer in ("numpy", "numba", "tinygrad") else metric.others.get(peer)
    return column if isinstance(column, float | int) else None


@contextmanager
def progress_reporter() -> Iterator[Callable[[str], None]]:
    """Where a run is, on stderr: a spinner with the step's title (rich, when installed and stderr is a terminal),
    else one line per step with the seconds since the start (rich draws nothing into a file or a pipe, and a
    long run must still say where it is). Steps name their own parts (a suite's rounds), so no count of them
    is a total."""
    if sys.stderr.isatty() and importlib.util.find_spec("rich") is not None:
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("bench", total=None)
            yield lambda title: bar.update(task, description=title)
        return
    start = time.perf_counter()
    yield lambda title: print(f"[{time.perf_counter() - start:6.0f} s] {title}", file=sys.stderr, flush=True)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def failure(err: BaseException) -> str:
    """Why a step failed, in one line: the exception's type and the last line of its message (where a Ray
    error names the worker's own exception), without terminal colours."""
    lines = [" ".join(line.split()) for line in ANSI_ESCAPE.sub("", str(err)).splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    return f"{type(err).__name__}: {last}"[:400] if last else type(err).__name__
