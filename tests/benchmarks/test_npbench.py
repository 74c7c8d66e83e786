"""The npbench harness's rewrite of a numba program into svod's, its validation rule, and a sweep of a checkout of
two benchmarks of its own (no npbench needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.npbench import benchmarks, call, decorates, inputs, load, main, svod_text, valid

NUMBA_PROGRAM = """\
import numpy as np
import numba as nb


@nb.jit(nopython=True, parallel=True, fastmath=True)
def helper(a):
    return a.sum()


@nb.njit
def step(x, y):
    for i in nb.prange(x.shape[0]):
        y[i] = x[i] * 2.0 + helper(x)
    my_prange = x.prange  # neither is numba's prange
    return my_prange
"""


def test_only_the_decorators_prange_and_the_import_change():
    text = svod_text(NUMBA_PROGRAM)
    before, after = NUMBA_PROGRAM.splitlines(), text.splitlines()
    assert len(before) == len(after)  # every line keeps its number
    changed = {n: line for n, (old, line) in enumerate(zip(before, after, strict=True), 1) if old != line}
    assert changed == {
        2: "import numba as nb; import svod",
        5: "@svod.jit",
        10: "@svod.jit",
        12: "    for i in svod.prange(x.shape[0]):",
        14: "    my_prange = x.prange  # neither is numba's svod.prange",
    }


def test_bare_names_from_numba_become_svods():
    text = svod_text("from numba import njit, prange\n\n@njit(parallel=True)\ndef f(a):\n"
                     "    for i in prange(3):\n        a[i] = 0\n")
    assert text.splitlines() == ["from numba import njit, prange; import svod", "", "@svod.jit", "def f(a):",
                                 "    for i in svod.prange(3):", "        a[i] = 0"]


def test_a_jit_call_on_a_line_of_its_own_decorates_nothing():
    assert decorates(NUMBA_PROGRAM, "step") and decorates(NUMBA_PROGRAM, "helper")
    assert not decorates("import numba as nb\nnb.jit(nopython=True)\n\n\ndef kernel(A):\n    pass\n", "kernel")
    assert not decorates(NUMBA_PROGRAM, "kernel")


def test_validation_is_npbenchs_rule_with_counts_and_shapes():
    want = [np.arange(1.0, 5.0)]
    assert valid(want, [np.arange(1.0, 5.0) * (1 + 1e-6)], {})  # allclose at rtol 1e-5
    assert not valid(want, [np.arange(1.0, 5.0) * (1 + 1e-3)], {})
    assert valid(want, [np.arange(1.0, 5.0) * (1 + 1e-3)], {"norm_error": 1e-2})  # the relative error passes
    assert not valid(want, [np.arange(1.0, 5.0)[:, None]], {})  # broadcasts, but not numpy's shape
    assert not valid(want, [], {})
    assert valid([3.0, np.float64(2.0)], [np.float64(3.0), 2.0], {})
    named = {"output_args": ["u"]}
    assert valid([np.ones(3), np.arange(3.0)], [np.arange(3.0)], named)  # numpy returns u too; numba does not
    assert not valid([np.ones(3), np.arange(3.0)], [np.ones(3)], named)
    assert not valid([np.ones(3), np.arange(3.0)], [np.arange(3.0)], {})


def _write(root: Path, name: str, files: dict[str, str], function: str = "scale") -> None:
    info = {"short_name": name, "relative_path": name, "module_name": name, "func_name": function,
            "parameters": {"S": {"N": 8}}, "init": {"func_name": "initialize", "input_args": ["N"],
                                                   "output_args": ["x"]},
            "input_args": ["x"], "array_args": ["x"], "output_args": ["x"]}
    (root / "bench_info").mkdir(exist_ok=True)
    (root / "bench_info" / f"{name}.json").write_text(json.dumps({"benchmark": info}))
    folder = root / "npbench" / "benchmarks" / name
    folder.mkdir(parents=True)
    files = {"": "import numpy as np\n\ndef initialize(N):\n    return np.arange(N, dtype=np.float64)\n", **files}
    for suffix, text in files.items():
        (folder / f"{name}{suffix}.py").write_text(text)


def test_a_sweep_of_a_checkout_measures_each_version_and_survives_a_crash(tmp_path, capsys):
    pytest.importorskip("numba", reason="numba is a benchmark peer of the bench extra, not installed here")
    numba_scale = "import numba as nb\n\n\n@nb.njit(parallel=True)\ndef scale(x):\n" \
                  "    for i in nb.prange(x.shape[0]):\n        x[i] *= 2.0\n"
    _write(tmp_path, "scale", {"_numpy": "def scale(x):\n    x *= 2.0\n", "_numba_np": numba_scale})
    segfault = "import os, signal\n\ndef scale(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    _write(tmp_path, "crash", {"_numpy": segfault, "_numba_n": numba_scale})
    out = tmp_path / "out.json"
    assert main(["--npbench", str(tmp_path), "--preset", "S", "--repeat", "1", "--json", str(out)]) == 0
    crash, scale = json.loads(out.read_text())
    assert (scale["variant"], scale["svod"]["status"], scale["numba"]["status"]) == ("numba_np", "valid", "valid")
    assert scale["svod"]["runs"] == 1 and scale["svod"]["ms"] > 0 and scale["svod"]["first_s"] > 0
    assert crash["numpy"]["status"] == "crashed" and "SIGSEGV" in crash["numpy"]["message"]
    assert crash["svod"]["status"] == crash["numba"]["status"] == "not run"
    assert "scale      numba_np  valid" in capsys.readouterr().out


def test_one_slow_call_is_never_a_versions_only_figure():
    from benchmarks.npbench import FEWEST_RUNS, Benchmark, measure
    bench = Benchmark("double", {"input_args": ["x"], "array_args": ["x"]}, Path("."), "n")
    calls = []

    def double(x):
        calls.append(len(calls))
        return x * 2.0

    record, outputs = measure(double, bench, {"x": np.arange(5.0)}, [np.arange(5.0) * 2.0], repeat=10, budget=0.0)
    assert (record["status"], record["runs"], len(calls)) == ("valid", FEWEST_RUNS, FEWEST_RUNS + 1)
    np.testing.assert_array_equal(outputs[0], np.arange(5.0) * 2.0)
    record, _ = measure(double, bench, {"x": np.arange(5.0)}, [np.arange(5.0) * 2.0], repeat=1, budget=0.0)
    assert record["runs"] == 1  # --repeat is never exceeded


def test_validation_compares_complex_outputs_part_by_part():
    want = [np.arange(4.0) + 1j * np.arange(4.0)]
    assert valid(want, [want[0] * (1 + 1e-7)], {})
    assert not valid(want, [want[0].real + 0j], {})  # a lost imaginary part fails
    assert not valid(want, [np.conj(want[0])], {"norm_error": 1e-3})


@pytest.fixture
def npbench() -> Path:
    """The npbench checkout ``SVOD_NPBENCH`` names (its programs are not part of svod)."""
    root = os.environ.get("SVOD_NPBENCH")
    if not root or not Path(root, "bench_info").is_dir():
        pytest.skip("no npbench checkout: set SVOD_NPBENCH to one")
    return Path(root)


@pytest.mark.parametrize("name", ["mandel1"])
def test_npbenchs_complex_programs_validate_under_svod(name, npbench, tmp_path):
    bench = next(b for b in benchmarks(npbench) if b.name == name)
    data = inputs(bench, "S")
    reference, _ = call(getattr(load(bench.path("numpy"), f"{name}_numpy"), bench.info["func_name"]), bench, data)
    rewritten = tmp_path / f"{name}_svod.py"
    rewritten.write_text(svod_text(bench.path(f"numba_{bench.variant}").read_text()))
    outputs, _ = call(getattr(load(rewritten, f"{name}_svod"), bench.info["func_name"]), bench, data)
    assert any(np.iscomplexobj(r) for r in reference)
    assert valid(reference, outputs, bench.info)


@pytest.mark.parametrize("variant", ["npr", "n"])
def test_npbenchs_contour_integral_validates_under_svod(variant, npbench, tmp_path):
    """contour_integral's complex ``np.linalg.inv``/``solve``: its ``prange`` variant's loop holds them, so its
    turns run in order (``phases.in_order``), as its serial variant's host loop does; ``if NR == NM`` is decided
    on the host, so only the taken branch's factorisation is built."""
    bench = next(b for b in benchmarks(npbench) if b.name == "coninteg")
    data = inputs(bench, "S")
    reference, _ = call(getattr(load(bench.path("numpy"), "contour_integral_numpy"), bench.info["func_name"]), bench,
                        data)
    rewritten = tmp_path / f"contour_integral_{variant}_svod.py"
    rewritten.write_text(svod_text(bench.path(f"numba_{variant}").read_text()))
    outputs, _ = call(getattr(load(rewritten, rewritten.stem), bench.info["func_name"]), bench, data)
    assert valid(reference, outputs, bench.info)
