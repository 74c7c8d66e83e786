"""``svod bench --busy``: the kernel suite and the thread speedup on a quiet machine, then again while another
process keeps a core busy (``competing_process``), and how much each contestant slows down.

A launch's chunks are claimed by whichever thread is free (``svod.backends.cpu_team``), so a thread that the
other process takes the core from delays only the chunk it holds; a contestant that splits its work into one
piece a thread waits for the descheduled one. The report has the busy run's figures (``busy.<metric>``) beside
the quiet run's, and for each suite kernel the busy/quiet ratio (``busy_ratio.<kernel>``) of svod, of each
peer, and of the peer fastest on the quiet machine; and svod's speedup over the fastest peer in each run
(``vs_best_peer.<kernel>``, ``busy.vs_best_peer.<kernel>``) with the share of it the busy run kept
(``busy_kept.<kernel>``), which says whether the busy core cost svod more than the best peer.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks.results import Metric

BUSY_LOOP = "while True: pass"
"""What the competing process runs: a CPU-bound loop on one core, pinned nowhere (the scheduler places it)."""

PEERS = ("numpy", "numba", "tinygrad")
"""The peers with a column of their own in a ``Metric``; the others are in its ``others``."""


@contextmanager
def competing_process() -> Iterator[subprocess.Popen[bytes]]:
    """A Python process spinning on one core for as long as the block runs; killed (and reaped) when it ends,
    however it ends."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def busy_metrics(quiet: list[Metric], busy: list[Metric]) -> list[Metric]:
    """The quiet run's figures, the busy run's (each renamed ``busy.<name>``), and for each suite kernel
    (``kernel.<name>_ms``) in both runs the busy/quiet ratio of every contestant (``busy_ratio.<name>``); and for
    each kernel svod's speedup over the fastest peer in each run (``vs_best_peer.<name>``, and ``busy.`` so) and
    how much of it the busy run kept (``busy_kept.<name>``: busy over quiet speedup, 1.0 when the busy core
    cost svod no more than the best peer)."""
    quiet = [*quiet, *best_peer_metrics(quiet)]
    busy = [*busy, *best_peer_metrics(busy)]
    quiet_by_name = {m.name: m for m in quiet}
    renamed = [dataclasses.replace(m, name=f"busy.{m.name}", note=f"{m.note}, another process busy".lstrip(", "))
               for m in busy]
    ratios = [_slowdown(quiet_by_name[m.name], m) for m in busy
              if m.name.startswith("kernel.") and m.name in quiet_by_name]
    kept = [_kept(quiet_by_name[m.name], m) for m in busy
            if m.name.startswith("vs_best_peer.") and m.name in quiet_by_name]
    return [*quiet, *renamed, *ratios, *kept]


def best_peer_metrics(run: list[Metric]) -> list[Metric]:
    """For each suite kernel of one run, svod's speedup over the peer fastest in that run (its time over
    svod's; > 1 when svod is faster), named in the note. svod compiled another way (``svod static``) is no
    peer."""
    speedups = []
    for metric in run:
        if not metric.name.startswith("kernel.") or metric.svod is None or metric.svod <= 0:
            continue
        best = fastest_peer(metric)
        if best is not None:
            kernel = metric.name.removeprefix("kernel.").removesuffix("_ms")
            speedups.append(Metric(f"vs_best_peer.{kernel}", "x", "higher", best[1] / metric.svod,
                                   note=f"{kernel}: svod's speedup over the fastest peer ({best[0]})"))
    return speedups


def fastest_peer(metric: Metric) -> tuple[str, float] | None:
    """The peer with the least figure in a metric of time, and that figure; None where no peer has one. svod
    compiled another way (``svod static``) is no peer, nor a figure repeated as the best peer's."""
    timed = {name: figure for name, figure in _figures(metric).items()
             if figure is not None and figure > 0 and not name.startswith(("svod", "best peer"))}
    if not timed:
        return None
    best = min(timed, key=lambda name: timed[name])
    return best, timed[best]


def _figures(metric: Metric) -> dict[str, float | None]:
    """Every contestant's figure in a metric, by name, svod's aside."""
    return {**{peer: getattr(metric, peer) for peer in PEERS}, **metric.others}


def _kept(quiet: Metric, busy: Metric) -> Metric:
    """How much of its quiet speedup over the best peer svod kept beside a busy process."""
    kernel = quiet.name.removeprefix("vs_best_peer.")
    return Metric(f"busy_kept.{kernel}", "x", "higher", _ratio(quiet.svod, busy.svod),
                  note=f"{kernel}: svod vs best peer, busy / quiet")


def _slowdown(quiet: Metric, busy: Metric) -> Metric:
    """Each contestant's busy time over its quiet time for one suite kernel (lower is better: 1.0 means the
    busy core did not slow it down), and the same for the peer fastest on the quiet machine."""
    kernel = quiet.name.removeprefix("kernel.").removesuffix("_ms")
    busy_figures = _figures(busy)
    peers = {name: (figure, busy_figures.get(name)) for name, figure in _figures(quiet).items()}
    ratios = {peer: _ratio(before, after) for peer, (before, after) in peers.items()}
    others = {name: ratios[name] for name in quiet.others}
    timed = {peer: before for peer, (before, _) in peers.items() if before is not None and not peer.startswith("svod")}
    if timed:
        best = min(timed, key=lambda peer: timed[peer])
        others[f"best peer ({best})"] = ratios[best]
    return Metric(f"busy_ratio.{kernel}", "x", "lower", _ratio(quiet.svod, busy.svod),
                  numpy=ratios["numpy"], numba=ratios["numba"], tinygrad=ratios["tinygrad"],
                  note=f"{kernel}: busy / quiet time", others=others)


def _ratio(quiet: float | None, busy: float | None) -> float | None:
    if quiet is None or busy is None or quiet <= 0:
        return None
    return busy / quiet
