"""The benchmark harness: a tiny whole run reports every metric with a figure, suite figures are the medians
of their samples, ratios point the better way, and the JSON is what other tools read. No test passes or
fails on how fast anything ran."""

import json
import pickle
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

import benchmarks.gradient_costs
import svod
from benchmarks import harness, rounds, timing
from benchmarks.harness import Bench, Sizes
from benchmarks.jit_programs import ARRAY_PROGRAMS, PROGRAMS
from benchmarks.numpy_programs import NUMPY_PROGRAMS
from benchmarks.peers import Tinygrad
from benchmarks.results import Metric, report, to_json
from benchmarks.suite import suite
from svod import Ops, workloads
from svod.errors import SvodError

TINY = Sizes(elements=1 << 12, copy_bytes=1 << 20, repeats=2, big_matmul=64, compiles=1, quick=True,
             algorithms=(16, 32, 12, 2, 8), long_plans=(50,), jit_scale="small", jit_first_calls=False,
             spelling_rows=3, spelling_peers=False, fresh_processes=1, gradients=((3, 3, 5, 2, 4), (2, 3, 3, 2, 3)))
PLANS = {"plan.dp_sweep_ms", "plan.levinson_ms", "plan.jacobi2d_ms", "plan.floyd_warshall_ms"}
JIT = {f"jit.{program.name}_ms" for program in PROGRAMS} | {f"array.{p.name}_ms" for p in ARRAY_PROGRAMS} | \
      {f"numpy.{p.name}_ms" for p in NUMPY_PROGRAMS}
GRADIENTS = {*(f"grad.{name}{suffix}" for name in ("black_scholes", "nbody_energy", "logistic_regression", "softmax",
                                                     "jacobi", "layernorm", "mlp", "cloth")
               for suffix in ("_ms", ".forward_ms", ".ratio", ".first_call_ms", ".first_call_ratio")),
             "grad.jacobi.saved_states"}
SPELLINGS = {"spelling.transpose.by_input_ms", "spelling.transpose.by_output_ms", "spelling.transpose.numba_ms",
             *(f"spelling.{kernel}.{form}_ms" for kernel in ("softmax", "layernorm", "mlp")
               for form in ("kernel", "jit", "numba"))}
UNITS_BY_STEP = {
    "memory bandwidth": {"membw_copy_gbps": "GB/s"}, "cold compile": {"compile_cold_ms.llvm": "ms"},
    "cache hits": {"cache_hit_memory_us": "us", "cache_hit_disk_ms": "ms"},
    "call path": {"direct_call_us.buffers": "us", "direct_call_us.numpy": "us", "import_ms": "ms",
                  "first_kernel_ms": "ms"},
    "plan replay": {"replay_us_per_kernel.1": "us", "replay_us_per_kernel.32": "us"},
    "triad": {"triad_gbps": "GB/s"}, "sum": {"sum_gbps": "GB/s"},
    "gather": {"gather_gbps": "GB/s", "gather_guard_cost": "x"},
    "matmul": {"matmul256_gflops": "GFLOP/s", "matmul1024_gflops": "GFLOP/s"},
    "blas anchor": {"matmul_anchor.float32_gflops": "GFLOP/s", "matmul_anchor.float64_gflops": "GFLOP/s"},
    "threads": {"thread_speedup": "x"}, "host parallel": {"host_parallel_speedup": "x"},
    "plan prepare": {"plan_prepare_speedup": "x"},
    "long plans": {"prepare_ms.50": "ms", "replay_us_per_kernel.50": "us"}, "bundles": {"bundle_load_ms.32": "ms"},
    "distributed": {}, "spellings": dict.fromkeys(SPELLINGS, "ms"), "plan algorithms": dict.fromkeys(PLANS, "ms"),
    **{step: {name: "ms" for name in JIT if name.startswith(f"{prefix}.")}
       for step, prefix in (("jit programs", "jit"), ("array programs", "array"), ("numpy programs", "numpy"))},
    "gradients": {}, "kernel suite": {"kernel.softmax_ms": "ms", "kernel.histogram_ms": "ms",
                                      "kernel.matmul17_ms": "ms"}}
"""Each step of the bench and the unit of each metric it must report (besides those not named here)."""
UNITS = {name: unit for units in UNITS_BY_STEP.values() for name, unit in units.items()}
PARTS = {"machine and kernel suite": ("memory bandwidth", "cold compile", "cache hits", "call path", "plan replay",
                                      "triad", "sum", "gather", "matmul", "blas anchor", "threads", "host parallel",
                                      "plan prepare", "long plans", "bundles", "distributed", "kernel suite"),
         "gradients": ("gradients",), "jit programs": ("plan algorithms", "jit programs"),
         "array programs": ("spellings", "array programs"), "numpy programs": ("numpy programs",)}
"""The tiny whole bench's steps in parts of about equal work, each a test of its own that xdist's workers can
take side by side (numba compiling its versions of the jit, array and NumPy programs is most of the work)."""
NUMPY_TOO = {"triad_gbps", "sum_gbps", "matmul256_gflops", "matmul1024_gflops", "membw_copy_gbps", "gather_gbps",
             "matmul_anchor.float32_gflops", "matmul_anchor.float64_gflops",
             "kernel.softmax_ms", "kernel.histogram_ms", "kernel.matmul17_ms", *PLANS, *SPELLINGS}


def _tiny_suite() -> list[workloads.Workload]:
    return [workloads.softmax(5, 7), workloads.histogram(100, 7), workloads.matmul(17)]


def _first_call_here(name: str, part: str) -> float:
    """``gradient_costs.first_call_ms`` without its fresh process (whose own test runs one): program ``name``'s
    ``part`` at the tiny bench's sizes, run here."""
    program = next(p for p in benchmarks.gradient_costs.all_programs(*TINY.gradients) if p.name == name)
    start = time.perf_counter()
    (program.forward if part == "forward" else program.gradient)(program.arrays)
    return (time.perf_counter() - start) * 1e3


def test_the_parts_of_the_tiny_whole_bench_are_its_steps_each_once():
    """A step added to the bench is in a part (so the tiny whole bench runs it) and has its units listed."""
    steps = [title for title, _ in Bench(svod.get_device("CPU"), TINY, Tinygrad(), lambda title: None).steps()]
    assert sorted(title for part in PARTS.values() for title in part) == sorted(steps) == sorted(UNITS_BY_STEP)


@pytest.mark.parametrize("part", PARTS)
def test_a_tiny_whole_bench_reports_every_metric_with_a_figure(monkeypatch, part):
    """Every step on the CPU at tiny sizes, a part of the steps per test (``PARTS``). Two parts run where their
    own tests start what they need: the gradients' first calls (two fresh processes per program;
    ``test_gradient_programs`` runs one program's) run in this process, and the distributed step's figure is
    taken on the Ray cluster of ``tests/test_distributed.py`` (starting Ray here would cost more than all the
    other steps)."""
    monkeypatch.setattr(benchmarks.gradient_costs, "first_call_ms", _first_call_here)
    distributed: list[str] = []
    monkeypatch.setattr(harness, "shard_overhead", lambda device: distributed.append(device) or [])
    tinygrad = Tinygrad()
    bench = Bench(svod.get_device("CPU"), TINY, tinygrad, lambda title: None, _tiny_suite())
    by_step: dict[str, list[str]] = {}

    def recorded(title: str, step: Callable[[], list[Metric]]) -> Callable[[], list[Metric]]:
        def run() -> list[Metric]:
            metrics = step()
            by_step[title] = [metric.name for metric in metrics]
            return metrics
        return run

    steps = [(title, recorded(title, step)) for title, step in bench.steps() if title in PARTS[part]]
    assert [title for title, _ in steps] == list(PARTS[part])
    monkeypatch.setattr(bench, "steps", lambda: steps)
    metrics = bench.run()
    assert bench.failed == {} and distributed == (["CPU"] if "distributed" in PARTS[part] else [])
    document = json.loads(json.dumps(to_json(metrics, bench.failed)))
    assert set(document) == {"machine", "metrics", "failed_steps"} and document["machine"]["svod"] == svod.__version__
    assert document["failed_steps"] == {}
    for title in PARTS[part]:
        assert {name: document["metrics"][name]["unit"] for name in by_step[title] if name in UNITS} == \
            UNITS_BY_STEP[title], title
    for name, metric in document["metrics"].items():
        assert set(metric) == {"unit", "better", "svod", "numpy", "numba", "tinygrad", "why_missing", "others"}, name
        assert metric["better"] == ("lower" if metric["unit"] in ("ms", "us") or name == "gather_guard_cost"
                                    or name.startswith("grad.") else "higher"), name
        # the yardstick is numpy's alone; a jit program svod refuses says why
        assert (metric["svod"] is None) == (name == "membw_copy_gbps" or "svod" in metric["why_missing"]), name
        assert (metric["numpy"] is not None) == (name in NUMPY_TOO | JIT), name
        for peer in ("svod", "numpy", "numba", "tinygrad"):
            assert metric[peer] is None or (isinstance(metric[peer], float) and metric[peer] > 0), (name, peer)
        if name.startswith(("kernel.", "plan.", "jit.", "array.", "numpy.")):  # each peer: a figure, or why none
            for peer in ("numpy", "numba", "tinygrad"):
                assert (metric[peer] is None) == (peer in metric["why_missing"]), (name, peer)
    assert {name for name in document["metrics"] if name.startswith("grad.")} == \
        (GRADIENTS if "gradients" in PARTS[part] else set())
    assert [name for name in document["metrics"] if name.startswith("spelling.")] == \
        (["spelling.transpose.by_input_ms", "spelling.transpose.by_output_ms", "spelling.transpose.numba_ms",
          *(f"spelling.{kernel}.{form}_ms" for kernel in ("softmax", "layernorm", "mlp")
            for form in ("kernel", "jit", "numba"))]
         if "spellings" in PARTS[part] else [])
    assert all("3x" in metric.note for metric in metrics if metric.name.startswith("spelling.") and
               "transpose" not in metric.name)  # the row kernels' spellings at the sizes' rows
    if "kernel suite" in PARTS[part]:
        histogram = document["metrics"]["kernel.histogram_ms"]["why_missing"]["tinygrad"]
        assert histogram == (tinygrad.error or "tinygrad has no scatter-add; a one-hot sum is a different algorithm")


def test_a_step_that_fails_says_why_and_the_steps_after_it_still_report(capsys):
    """A Ray worker that could not import ``benchmarks`` lost every figure of ``svod bench``: now only the
    failing step's."""
    bench = Bench(svod.get_device("CPU"), TINY, Tinygrad(), lambda title: None, [])

    def distributed() -> list[Metric]:
        raise RuntimeError("The actor died because of an error raised in its creation task\n"
                           "\x1b[36mray::Echo.__init__()\x1b[39m (pid=6430)\n"
                           "ModuleNotFoundError: No module named 'benchmarks'\n")

    bench.steps = lambda: [("bundles", lambda: [Metric("a_ms", "ms", "lower", 1.0)]), ("distributed", distributed),
                           ("plan algorithms", lambda: [Metric("b_ms", "ms", "lower", 2.0)])]
    metrics = bench.run()
    assert [m.name for m in metrics] == ["a_ms", "b_ms"]
    why = "RuntimeError: ModuleNotFoundError: No module named 'benchmarks'"
    assert bench.failed == {"distributed": why}
    assert f"step 'distributed' did not run, so its figures are missing: {why}" in report(metrics, None, bench.failed)
    assert json.loads(json.dumps(to_json(metrics, bench.failed)))["failed_steps"] == {"distributed": why}
    err = capsys.readouterr().err
    assert "the distributed step failed" in err and "Traceback" in err


class _NoBenchmarks:
    """An import finder that finds no ``benchmarks``: the ``sys.path`` of a worker started outside the checkout."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "benchmarks" or name.startswith("benchmarks."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_the_echo_actor_reaches_a_worker_that_cannot_import_benchmarks(monkeypatch):
    """Ray sends an actor's class to its workers pickled: the distributed step's echo actor goes as the class
    itself, not as a name in ``benchmarks`` for the worker to import."""
    pytest.importorskip("ray", reason="the distributed step needs the ray extra")
    from ray import cloudpickle

    from benchmarks.distributed import echo_class

    pickled = cloudpickle.dumps(echo_class())
    for name in [name for name in sys.modules if name == "benchmarks" or name.startswith("benchmarks.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoBenchmarks(), *sys.meta_path])
    with pytest.raises(ModuleNotFoundError):
        import benchmarks.distributed  # noqa: F401
    shard = {"x": np.arange(3.0)}
    assert pickle.loads(pickled)().run(0, shard) is shard


def test_a_suite_kernel_that_disagrees_with_numpy_fails_the_bench():
    wrong = workloads.saxpy(64)
    answer = wrong.numpy
    wrong.numpy = lambda: answer() + 1
    bench = Bench(svod.get_device("CPU"), TINY, Tinygrad(), lambda title: None, [wrong])
    with pytest.raises(SvodError, match="svod's result disagrees with numpy"):
        bench.kernel_suite()


def test_the_suites_default_kernels_have_variables_and_the_static_ones_none():
    for default, static in zip(suite(quick=True), suite(quick=True, static_shapes=True), strict=True):
        assert default.name == static.name and default.var_vals and not static.var_vals
        for step in default.steps:
            assert {u.arg[0] for u in step.ast.toposort() if u.op is Ops.DEFINE_VAR} == set(default.step_vars(step))


def test_ratios_follow_the_direction_that_is_better():
    faster = Metric("x_gbps", "GB/s", "higher", 20.0, numpy=10.0)
    quicker = Metric("y_ms", "ms", "lower", 5.0, tinygrad=10.0)
    assert faster.ratio(faster.numpy) == 2.0 and quicker.ratio(quicker.tinygrad) == 2.0
    assert faster.ratio(None) is None and Metric("z_ms", "ms", "lower", None, numpy=1.0).ratio(1.0) is None
    text = report([faster, quicker], "not installed")
    assert "2.00x" in text and "tinygrad: not installed" in text


def test_json_holds_each_figure_and_why_a_peer_has_none():
    metric = Metric("x_gbps", "GB/s", "higher", 20.0, numpy=10.0, why_missing={"tinygrad": "not installed"})
    document = json.loads(json.dumps(to_json([metric])))
    assert document["metrics"] == {"x_gbps": {"unit": "GB/s", "better": "higher", "svod": 20.0, "numpy": 10.0,
                                              "numba": None, "tinygrad": None,
                                              "why_missing": {"tinygrad": "not installed"}, "others": {}}}
    assert set(document["machine"]) == {"platform", "python", "cpu", "cores", "threads", "numpy", "svod"}
    assert document["machine"]["numpy"] == np.__version__


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the bench extra, not installed here")
    from benchmarks.results import plot

    path = tmp_path / "ratios.png"
    plot([Metric("x_gbps", "GB/s", "higher", 20.0, numpy=10.0, tinygrad=5.0),
          Metric("y_ms", "ms", "lower", 2.0, numba=3.0, others={"torch": 4.0, "svod static": 1.0})], str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_chart_shows_each_peer_with_figures():
    from benchmarks.results import _PLOTTED, _figure

    metric = Metric("y_ms", "ms", "lower", 2.0, numba=3.0, others={"torch": 4.0, "svod static": 1.0})
    assert [(peer, metric.ratio(_figure(metric, peer))) for peer in _PLOTTED if _figure(metric, peer)] == \
        [("numba", 1.5), ("torch", 2.0)]


def test_sample_seconds_times_each_call_after_the_warmup(monkeypatch):
    clock = iter([10.0, 11.0, 20.0, 23.0, 30.0, 32.0])  # start and end of each timed call
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    calls = []
    assert timing.sample_seconds(lambda: calls.append(1), repeats=3, warmup=2) == [1.0, 3.0, 2.0]
    assert len(calls) == 5
    clock = iter([0.0, 4.0, 0.0, 1.0, 0.0, 2.0])
    assert timing.median_seconds(lambda: None, repeats=3, warmup=1) == 2.0


class _SpinningThreads:
    """A fake process clock: while the caller sleeps, ``spinners[k]`` other threads burn a core each in its
    k-th sleep (none after the list ends)."""

    def __init__(self, spinners: list[int]) -> None:
        self.cpu = 0.0
        self.sleeps: list[float] = []
        self.spinners = spinners

    def process_time(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        spinning = self.spinners[len(self.sleeps)] if len(self.sleeps) < len(self.spinners) else 0
        self.sleeps.append(seconds)
        self.cpu += spinning * seconds


def test_settle_waits_until_no_other_thread_burns_a_core(monkeypatch):
    clock = _SpinningThreads([2, 2, 1])  # BLAS workers spinning on both cores, then one, then none
    monkeypatch.setattr(timing.time, "process_time", clock.process_time)
    monkeypatch.setattr(timing.time, "sleep", clock.sleep)
    assert timing.settle(window=0.01, most=1.0) == pytest.approx(0.04)
    assert clock.sleeps == [0.01] * 4
    quiet = _SpinningThreads([])
    monkeypatch.setattr(timing.time, "process_time", quiet.process_time)
    monkeypatch.setattr(timing.time, "sleep", quiet.sleep)
    assert timing.settle(window=0.01, most=1.0) == pytest.approx(0.01)  # one look when nothing spins


def test_settle_gives_up_after_its_longest_wait(monkeypatch):
    clock = _SpinningThreads([1] * 100)
    monkeypatch.setattr(timing.time, "process_time", clock.process_time)
    monkeypatch.setattr(timing.time, "sleep", clock.sleep)
    assert timing.settle(window=0.01, most=0.05) == pytest.approx(0.05)
    assert len(clock.sleeps) == 5


def test_every_contestant_is_timed_on_settled_cores(monkeypatch):
    """``sample_seconds`` is where every figure is timed: it settles the cores before the contestant's warm-up."""
    events = []
    monkeypatch.setattr(timing, "settle", lambda: events.append("settle"))
    timing.sample_seconds(lambda: events.append("call"), repeats=2, warmup=1)
    timing.median_seconds(lambda: events.append("other"), repeats=1, warmup=0)
    assert events == ["settle", "call", "call", "call", "settle", "other"]


def test_svods_run_of_numbas_spelling_is_timed_apart_from_numba(monkeypatch) -> None:
    """svod's ``numba`` form and the numba peer share a name; each is timed and each figure is its own, not
    one contestant's time given to both. Each runner returns who it is; a sample is that contestant's time."""
    from benchmarks.spellings import Peers

    seconds = {"svod's numba": 0.003, "numba": 0.005, "kernel": 0.001}

    class Numba:
        error = None

        def runner(self, workload):  # type: ignore[no-untyped-def]
            return lambda: "numba"

    class Nothing:
        error = "not here"

        def runners(self, workload):  # type: ignore[no-untyped-def]
            return {}

    def sample(run, count, warmup):  # type: ignore[no-untyped-def]
        who = run()
        return [seconds[who] if isinstance(who, str) else 0.002]

    monkeypatch.setattr(harness, "numba_form", lambda workload, device: lambda: "svod's numba")
    monkeypatch.setattr(rounds, "sample_seconds", sample)
    bench = Bench(svod.get_device("CPU"), TINY, Tinygrad(), lambda title: None)
    metrics = bench._spelled("softmax", workloads.softmax(2, 37), {"kernel": lambda: "kernel"},
                             {"kernel": "k", "numba": "n"}, Peers(Numba(), Nothing(), Nothing(), Nothing()))  # type: ignore[arg-type]
    figures = {metric.name: (metric.svod, metric.numba, metric.numpy) for metric in metrics}
    assert figures == {"spelling.softmax.kernel_ms": (pytest.approx(1.0), pytest.approx(5.0), pytest.approx(2.0)),
                       "spelling.softmax.numba_ms": (pytest.approx(3.0), pytest.approx(5.0), pytest.approx(2.0))}
