"""``svod bench`` runs the benchmarks beside the package, and where there are none says how to get them."""

import contextlib
import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest

import benchmarks.harness
import svod
from benchmarks.busy import competing_process
from benchmarks.results import Metric
from svod import workloads
from svod.cli import bench, main
from svod.errors import SvodError


def test_bench_runs_the_benchmarks_beside_the_package():
    assert Path(svod.__file__).resolve().parents[1] / "benchmarks" == bench.BENCHMARKS
    assert bench.load_benchmarks(bench.BENCHMARKS) is benchmarks  # the one the tests import, not a second copy


def test_the_command_reaches_the_harness(capsys):
    assert main(["bench", "--device", "PYTHON"]) == 2  # the harness refuses the reference device
    assert "too slow to benchmark" in capsys.readouterr().err


def test_the_command_writes_the_json_other_tools_read(tmp_path, monkeypatch, capsys):
    """End to end, on a suite of two small kernels: the table on stdout, and the JSON file."""
    monkeypatch.setattr(benchmarks.harness, "suite",
                        lambda quick, static_shapes=False: [workloads.softmax(5, 7), workloads.histogram(100, 7)])
    path = tmp_path / "out.json"
    assert main(["bench", "--quick", "--suite", "kernels", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert set(document["metrics"]) == {"kernel.softmax_ms", "kernel.histogram_ms"}
    assert document["machine"]["svod"] == svod.__version__
    out = capsys.readouterr().out
    assert "svod bench on CPU (" in out and "kernel.histogram_ms" in out


def test_suite_spellings_runs_the_spellings_step_alone(tmp_path, monkeypatch, capsys):
    """``--suite spellings`` on a small transpose and row kernels of 3 rows, without the peers (their path is
    ``tests/benchmarks/test_spellings.py``'s): each spelling's figure, no other."""
    transposes, rows = benchmarks.harness.transpose_spellings, benchmarks.harness.row_kernels
    monkeypatch.setattr(benchmarks.harness, "QUICK", dataclasses.replace(benchmarks.harness.QUICK,
                                                                         spelling_peers=False))
    monkeypatch.setattr(benchmarks.harness, "transpose_spellings", lambda side: transposes(17))
    monkeypatch.setattr(benchmarks.harness, "row_kernels", lambda quick, spelled=None: rows(quick, 3))
    path = tmp_path / "out.json"
    assert main(["bench", "--quick", "--suite", "spellings", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert set(document["metrics"]) == {"spelling.transpose.by_input_ms", "spelling.transpose.by_output_ms",
                                        "spelling.transpose.numba_ms",
                                        *(f"spelling.{kernel}.{form}_ms" for kernel in ("softmax", "layernorm", "mlp")
                                          for form in ("kernel", "jit", "numba"))}
    assert all(metric["svod"] > 0 for metric in document["metrics"].values())
    assert "--suite spellings" in capsys.readouterr().out


def test_busy_runs_the_suite_quiet_and_beside_a_busy_process(tmp_path, monkeypatch, capsys):
    """``--busy`` on a suite of two small kernels: each kernel's figures and the thread speedup quiet and busy,
    and each contestant's busy/quiet ratio, svod's speedup over the best peer in each run and the share the busy
    run kept, all positive; the competing process is gone after the run."""
    monkeypatch.setattr(benchmarks.harness, "suite",
                        lambda quick, static_shapes=False: [workloads.softmax(5, 7), workloads.histogram(100, 7)])
    children = []

    @contextlib.contextmanager
    def recorded():
        with competing_process() as child:
            assert child.poll() is None  # spinning while the suite runs
            children.append(child)
            yield child

    monkeypatch.setattr(benchmarks.harness, "competing_process", recorded)
    path = tmp_path / "out.json"
    assert main(["bench", "--quick", "--busy", "--json", str(path)]) == 0
    assert len(children) == 1 and children[0].poll() is not None
    metrics = json.loads(path.read_text())["metrics"]
    for kernel in ("softmax", "histogram"):
        for name in (f"kernel.{kernel}_ms", f"busy.kernel.{kernel}_ms", f"busy_ratio.{kernel}"):
            assert metrics[name]["svod"] > 0 and metrics[name]["numpy"] > 0, name
        (best,) = [name for name in metrics[f"busy_ratio.{kernel}"]["others"] if name.startswith("best peer (")]
        assert metrics[f"busy_ratio.{kernel}"]["others"][best] > 0
        for name in (f"vs_best_peer.{kernel}", f"busy.vs_best_peer.{kernel}", f"busy_kept.{kernel}"):
            assert metrics[name]["svod"] > 0, name
    assert metrics["thread_speedup"]["svod"] > 0 and metrics["busy.thread_speedup"]["svod"] > 0
    out = capsys.readouterr().out
    assert "--busy" in out and "busy_ratio.histogram" in out


def test_the_competing_process_is_killed_when_the_block_raises():
    with pytest.raises(RuntimeError), competing_process() as child:
        assert child.poll() is None
        raise RuntimeError("a step failed")
    assert child.poll() is not None


def test_a_step_that_fails_leaves_the_others_in_the_report_and_the_json(tmp_path, monkeypatch, capsys):
    def steps(self: benchmarks.harness.Bench) -> list[tuple[str, object]]:
        def broken() -> list[Metric]:
            raise ModuleNotFoundError("No module named 'benchmarks'")

        return [("distributed", broken), ("cache hits", lambda: [Metric("cache_hit_memory_us", "us", "lower", 3.0)])]

    monkeypatch.setattr(benchmarks.harness.Bench, "steps", steps)
    path = tmp_path / "out.json"
    assert main(["bench", "--quick", "--json", str(path)]) == 1  # figures, but not all of them
    document = json.loads(path.read_text())
    assert set(document["metrics"]) == {"cache_hit_memory_us"}
    assert document["failed_steps"] == {"distributed": "ModuleNotFoundError: No module named 'benchmarks'"}
    out = capsys.readouterr().out
    assert "cache_hit_memory_us" in out and "step 'distributed' did not run" in out


def test_without_benchmarks_the_command_says_how_to_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "BENCHMARKS", tmp_path / "benchmarks")
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "benchmarks/ directory of a svod repository checkout" in err and 'pip install -e ".[bench]"' in err
    assert "Traceback" not in err


def test_an_unrelated_benchmarks_module_is_not_taken_for_svods(monkeypatch):
    monkeypatch.setitem(sys.modules, "benchmarks", types.ModuleType("benchmarks"))
    with pytest.raises(SvodError, match="another module named benchmarks"):
        bench.load_benchmarks(bench.BENCHMARKS)


def test_a_checkout_elsewhere_is_imported_as_the_benchmarks_package(tmp_path, monkeypatch):
    """The package's modules import each other as ``benchmarks.<module>``: it is imported under that name."""
    package = tmp_path / "benchmarks"
    package.mkdir()
    (package / "__init__.py").write_text("from benchmarks.harness import run_bench\n")
    (package / "harness.py").write_text("def run_bench(*args):\n    return len(args)\n")
    monkeypatch.delitem(sys.modules, "benchmarks")
    monkeypatch.delitem(sys.modules, "benchmarks.harness", raising=False)
    monkeypatch.setattr(bench, "BENCHMARKS", package)
    assert bench.run_bench("CPU", True) == 6
    assert sys.modules["benchmarks.harness"].__file__ == str(package / "harness.py")
