"""A prepared plan on a CUDA device replayed as CUDA graphs (``PlanReplayer``): the plan's launches are
captured from svod's stream once per set of the run's variable values, its loops unrolled with them, and each
run relaunches the instantiated graph, where the driver submits every kernel for about a microsecond instead
of a Python call's worth of launch work.

Work a graph cannot hold (Python steps, copies through the host, a branch or a loop's end decided on a value a
kernel wrote) leaves the plan on its own run order: the replayer declines it. A graph that the driver will not
capture or instantiate is run as plain launches.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from svod.device.launch import evaluate
from svod.device.protocols import ReplayItem, ReplayKernel, ReplayLoop, Site
from svod.errors import SvodError

GRAPHS_KEPT = 8
"""Instantiated graphs a plan keeps, one per set of its run's variable values. Runs with values past the
first ``GRAPHS_KEPT`` sets launch plainly: a value that changes every run (a time step) would otherwise pay a
capture and an instantiation each time for a graph used once."""
LAUNCHES_CAPTURED = 1 << 16
"""The most launches one graph holds: a run that unrolls to more runs as plain launches."""


@dataclass(frozen=True)
class Graph:
    """One captured run: the instantiated graph, or None where it runs as plain launches, and the variables'
    values as the run left them (loop variables included)."""

    executable: Any
    values: dict[str, int]


class GraphReplay:
    """A plan's ``work`` (only kernels and loops of kernels) on ``device`` (a ``CUDADevice``), as CUDA graphs
    keyed by the values of ``inputs``."""

    def __init__(self, device: Any, work: Sequence[ReplayItem], inputs: Sequence[str]) -> None:
        self.device = device
        self.work = tuple(work)
        self.inputs = tuple(inputs)
        self._graphs: dict[tuple[int, ...], Graph] = {}
        self._values: dict[str, int] = {}

    @property
    def sites(self) -> Mapping[int, Sequence[Site]]:
        """None: a CUDA plan's bound arrays are copied into its own buffers, whose addresses never change."""
        return {}

    def values(self) -> dict[str, int]:
        return dict(self._values)

    def run(self, values: Mapping[str, int]) -> None:
        key = tuple(values[name] for name in self.inputs)
        graph = self._graphs.get(key)
        if graph is None and len(self._graphs) < GRAPHS_KEPT:
            graph = self._graphs[key] = self._capture(dict(values))
        if graph is None or graph.executable is None:
            self._values = dict(values)
            _launch(self.work, self._values)
        else:
            self.device.launch_graph(graph.executable)
            self._values = graph.values  # never changed after its capture: ``values()`` hands out copies
        self.device.synchronize()

    def _capture(self, values: dict[str, int]) -> Graph:
        """Capture one run's launches (a launch's own error, a size that is not positive, stops the capture
        and is raised); a graph the driver refuses, or one past ``LAUNCHES_CAPTURED``, runs as launches."""
        if _launches(self.work, dict(values)) > LAUNCHES_CAPTURED:
            return Graph(None, values)
        self.device.begin_capture()
        try:
            _launch(self.work, values)
        except BaseException:
            self.device.abandon_capture()
            raise
        try:
            return Graph(self.device.end_capture(), values)
        except SvodError:
            return Graph(None, values)


def replayable(work: Sequence[ReplayItem]) -> bool:
    """Whether a graph holds all of ``work``: kernels, and loops of them that run every turn (the graph unrolls
    them)."""
    return all(isinstance(item, ReplayKernel) or
               (isinstance(item, ReplayLoop) and item.until is None and replayable(item.body)) for item in work)


def _turns(loop: ReplayLoop, values: Mapping[str, int]) -> range:
    return range(evaluate(loop.start, values), evaluate(loop.stop, values), evaluate(loop.step, values))


def _launch(work: Sequence[ReplayItem], values: MutableMapping[str, int]) -> None:
    """Launch ``work`` in order on svod's stream, the loops unrolled with the run's ``values``."""
    for item in work:
        if isinstance(item, ReplayKernel):
            item.run(values)
        elif isinstance(item, ReplayLoop):
            for turn in _turns(item, values):
                values[item.var] = turn
                _launch(item.body, values)


def _launches(work: Sequence[ReplayItem], values: MutableMapping[str, int]) -> int:
    """How many launches ``work`` makes with these ``values``, counting up to ``LAUNCHES_CAPTURED`` + 1."""
    total = 0
    for item in work:
        if isinstance(item, ReplayKernel):
            total += len(item.calls)
        elif isinstance(item, ReplayLoop):
            for turn in _turns(item, values):
                values[item.var] = turn
                total += _launches(item.body, values)
                if total > LAUNCHES_CAPTURED:
                    return total
    return total
