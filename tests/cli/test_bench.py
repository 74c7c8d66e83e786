import json

import pytest

from svod.cli import main
from svod.cli.bench import Metric, report, run_bench, sample_seconds, to_json
from svod.errors import SvodError

REQUIRED = ["compile_cold_ms.llvm", "cache_hit_memory_us", "cache_hit_disk_ms", "replay_us_per_kernel.1",
            "replay_us_per_kernel.32", "triad_gbps", "sum_gbps", "matmul256_gflops", "matmul1024_gflops",
            "thread_speedup", "host_parallel_speedup", "membw_copy_gbps", "gather_gbps", "gather_guard_cost",
            "direct_call_us.buffers", "direct_call_us.numpy", "import_ms", "first_kernel_ms",
            *(f"kernel.{name}_ms" for name in ("softmax", "layernorm", "conv2d", "gather", "histogram", "cumsum",
                                                "transpose", "attention", "matmul1024"))]


def _validate(document: dict) -> None:
    assert set(document) == {"machine", "metrics"}
    assert isinstance(document["machine"], dict) and document["machine"]["cores"] >= 1
    for name, metric in document["metrics"].items():
        assert set(metric) == {"unit", "better", "svod", "numpy", "numba", "tinygrad", "why_missing"}, name
        assert isinstance(metric["unit"], str) and metric["better"] in ("higher", "lower")
        for peer in ("svod", "numpy", "numba", "tinygrad"):
            assert metric[peer] is None or (isinstance(metric[peer], float) and metric[peer] > 0), (name, peer)
        if name.startswith("kernel."):  # every peer of the suite has a figure, or the reason it has none
            for peer in ("numpy", "numba", "tinygrad"):
                assert (metric[peer] is None) == (peer in metric["why_missing"]), (name, peer)
    for name in REQUIRED:
        assert name in document["metrics"], name


def test_quick_bench_writes_schema_valid_json(tmp_path, capsys):
    path = tmp_path / "out.json"
    assert main(["bench", "--quick", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    _validate(document)
    metrics = document["metrics"]
    assert metrics["triad_gbps"]["svod"] is not None and metrics["triad_gbps"]["numpy"] is not None
    assert metrics["membw_copy_gbps"]["numpy"] is not None
    assert "triad_gbps" in capsys.readouterr().out


def test_ratios_follow_the_direction_that_is_better():
    faster = Metric("x_gbps", "GB/s", "higher", 20.0, numpy=10.0)
    quicker = Metric("y_ms", "ms", "lower", 5.0, tinygrad=10.0)
    assert faster.ratio(faster.numpy) == 2.0 and quicker.ratio(quicker.tinygrad) == 2.0
    assert faster.ratio(None) is None
    text = report([faster, quicker], "not installed")
    assert "2.00x" in text and "tinygrad: not installed" in text
    _ = to_json([faster])


def test_bench_refuses_the_reference_device():
    with pytest.raises(SvodError, match="too slow"):
        run_bench("PYTHON", quick=True)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the bench extra, not installed here")
    from svod.cli.bench import plot

    path = tmp_path / "ratios.png"
    plot([Metric("x_gbps", "GB/s", "higher", 20.0, numpy=10.0, tinygrad=5.0)], str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sample_seconds_times_each_call_after_the_warmup():
    calls = []
    times = sample_seconds(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6 and len(times) == 4 and all(t >= 0 for t in times)
