"""``svod bench --busy``'s figures: the busy run beside the quiet one, and each contestant's slowdown."""

import pytest

import svod
from benchmarks.busy import busy_metrics
from benchmarks.harness import Bench
from benchmarks.peers import Tinygrad
from benchmarks.results import Metric
from benchmarks.rounds import SUITE_ROUNDS
from benchmarks.suite import row_kernels
from tests.benchmarks.test_harness import TINY


def _suite(svod: float, numpy: float, numba: float | None, static: float, torch: float) -> list[Metric]:
    return [Metric("kernel.softmax_ms", "ms", "lower", svod, numpy=numpy, numba=numba,
                   others={"svod static": static, "torch": torch}),
            Metric("thread_speedup", "x", "higher", 1.8)]


def test_each_contestant_slows_down_by_its_busy_over_its_quiet_time():
    quiet = _suite(svod=1.0, numpy=4.0, numba=2.0, static=0.5, torch=3.0)
    busy = _suite(svod=1.5, numpy=10.0, numba=5.0, static=0.6, torch=3.3)
    metrics = {m.name: m for m in busy_metrics(quiet, busy)}
    assert list(metrics) == ["kernel.softmax_ms", "thread_speedup", "vs_best_peer.softmax", "busy.kernel.softmax_ms",
                             "busy.thread_speedup", "busy.vs_best_peer.softmax", "busy_ratio.softmax",
                             "busy_kept.softmax"]
    assert metrics["busy.kernel.softmax_ms"].svod == 1.5 and metrics["busy.thread_speedup"].svod == 1.8
    ratio = metrics["busy_ratio.softmax"]
    assert (ratio.svod, ratio.numpy, ratio.numba, ratio.tinygrad) == (1.5, 2.5, 2.5, None)
    assert ratio.better == "lower" and ratio.ratio(ratio.numba) == 2.5 / 1.5  # svod slowed down less
    # the fastest peer when quiet is numba (2.0 ms; svod compiled another way is no peer)
    assert ratio.others == {"svod static": 0.6 / 0.5, "torch": 3.3 / 3.0, "best peer (numba)": 2.5}


def test_a_contestant_without_a_figure_in_either_run_has_no_ratio():
    quiet = _suite(svod=1.0, numpy=4.0, numba=None, static=0.5, torch=3.0)
    busy = _suite(svod=1.2, numpy=6.0, numba=2.0, static=0.5, torch=3.0)
    ratio = {m.name: m for m in busy_metrics(quiet, busy)}["busy_ratio.softmax"]
    assert ratio.numba is None and ratio.others["best peer (torch)"] == 1.0


def test_svods_speedup_over_the_fastest_peer_of_each_run_and_the_share_the_busy_run_kept():
    """Quiet, numba is the fastest peer (2.0 ms against svod's 1.0: 2x); busy, torch is (3.3 ms against 1.5:
    2.2x); svod compiled another way is no peer. The busy run kept 1.1 of the quiet speedup."""
    quiet = _suite(svod=1.0, numpy=4.0, numba=2.0, static=0.5, torch=3.0)
    busy = _suite(svod=1.5, numpy=10.0, numba=5.0, static=0.6, torch=3.3)
    metrics = {m.name: m for m in busy_metrics(quiet, busy)}
    assert metrics["vs_best_peer.softmax"].svod == 2.0 and "(numba)" in metrics["vs_best_peer.softmax"].note
    assert metrics["busy.vs_best_peer.softmax"].svod == 3.3 / 1.5
    assert "(torch)" in metrics["busy.vs_best_peer.softmax"].note
    kept = metrics["busy_kept.softmax"]
    assert kept.better == "higher" and kept.svod == (3.3 / 1.5) / 2.0


def test_a_kernel_without_an_svod_figure_or_any_peers_has_no_speedup_over_them():
    quiet = [Metric("kernel.a_ms", "ms", "lower", None, numpy=1.0), Metric("kernel.b_ms", "ms", "lower", 1.0,
                                                                         others={"svod static": 0.5})]
    metrics = {m.name for m in busy_metrics(quiet, quiet)}
    assert not any(name.startswith(("vs_best_peer.", "busy.vs_best_peer.", "busy_kept.")) for name in metrics)


def test_the_busy_suite_compiles_its_contestants_once_and_times_them_quiet_and_busy():
    """The quiet and the busy run time the same compiled contestants: compiling every peer's spelling of the
    suite twice had doubled the slowest part of ``svod bench --busy``."""
    steps: list[str] = []
    workload = row_kernels(quick=True, rows=3)["softmax"]
    bench = Bench(svod.get_device("CPU"), TINY, Tinygrad(), steps.append, [workload])
    metrics = {m.name: m for m in bench.busy_suite()}
    first, last = (f"kernel suite: round {n} of {SUITE_ROUNDS}" for n in (1, SUITE_ROUNDS))
    assert steps.count("kernel suite: compile and check") == 1 and steps.count(first) == 2
    assert steps.index("kernel suite beside a busy process") > steps.index(last)
    quiet, busy = metrics[f"kernel.{workload.name}_ms"], metrics[f"busy.kernel.{workload.name}_ms"]
    assert quiet.svod and busy.svod and quiet.numpy and busy.numpy
    assert metrics[f"busy_ratio.{workload.name}"].svod == pytest.approx(busy.svod / quiet.svod)
