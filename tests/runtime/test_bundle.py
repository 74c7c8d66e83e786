"""Plan bundles: ``plan.save`` / ``svod.load_plan`` round trips on every device, zero compiles in a new
process, recompiling (with one warning) where the code does not fit, and damaged or foreign files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.config import settings
from svod.device import Buffer, Device
from svod.errors import BundleError, BundleWarning, SvodError
from svod.runtime import KernelCache
from tests.helpers import from_another_cpu, rewrite

REPO = Path(__file__).resolve().parents[2]
N = 64


def fresh_cache(tmp_path: Path) -> KernelCache:
    return KernelCache(dataclasses.replace(settings, cache_dir=tmp_path / "cache", disk_cache=False))


def affine(name: str, scale: float, shift: float) -> svod.UOp:
    k = svod.KernelBuilder(name)
    n = k.var("n", 1, N)
    out = k.buffer(dtypes.float32, n)
    x = k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * scale + shift)
    return k.build()


def accumulate() -> svod.UOp:
    """acc[i] += x[i] * t, with t the loop's variable."""
    k = svod.KernelBuilder("accumulate")
    t = k.var("t", 0, 100)
    acc = k.buffer(dtypes.float32, N)
    x = k.buffer(dtypes.float32, N)
    i = k.range(N)
    k.store(acc[i], acc[i] + x[i] * t.cast(dtypes.float32))
    return k.build()


def build_plan(device: Device | str, cache: KernelCache) -> svod.ExecutionPlan:
    """Two kernels, a copy, a loop, a view and a runtime variable, over named buffers."""
    plan = svod.ExecutionPlan(device, cache=cache)
    x = plan.add_buffer(Buffer(plan.device, dtypes.float32, N), name="x")
    y = plan.add_buffer(Buffer(plan.device, dtypes.float32, N), name="y")
    acc = plan.add_buffer(Buffer(plan.device, dtypes.float32, N), name="acc")
    both = Buffer(plan.device, dtypes.float32, 2 * N)
    low = plan.add_buffer(both.view(0, N))
    high = plan.add_buffer(both.view(N, N), name="high")
    plan.add_kernel(affine("double", 2.0, 1.0), [y, x], fixedvars={"n": N})
    plan.add_copy(low, y)
    plan.add_kernel(affine("half", 0.5, 0.0), [high, low])
    body = plan.add_kernel(accumulate(), [acc, x])
    plan.loop("t", 0, "turns", [body])
    return plan


def expected(x: np.ndarray, turns: int) -> dict[str, np.ndarray]:
    y = x * np.float32(2.0) + np.float32(1.0)
    acc = np.zeros_like(x)
    for t in range(turns):
        acc = acc + x * np.float32(t)
    return {"y": y, "high": y * np.float32(0.5), "acc": acc}


def run(plan: svod.ExecutionPlan, turns: int = 3) -> dict[str, np.ndarray]:
    x = np.linspace(-1, 1, N, dtype=np.float32)
    arrays = {"x": x, "y": np.zeros(N, np.float32), "acc": np.zeros(N, np.float32)}
    plan.execute(buffers=arrays, n=N, turns=turns)
    arrays["high"] = plan.buffers[plan.buffer_names["high"]].numpy()  # a view: read, not bound
    return arrays


def check(arrays: dict[str, np.ndarray], turns: int = 3) -> None:
    for name, want in expected(arrays["x"], turns).items():
        np.testing.assert_allclose(arrays[name], want, rtol=1e-6, atol=1e-6, err_msg=name)


# ---- round trips -------------------------------------------------------------------------------------------------

def test_round_trip_on_every_device(device: Device, tmp_path: Path) -> None:
    plan = build_plan(device, fresh_cache(tmp_path))
    check(run(plan))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    cache = fresh_cache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BundleWarning)
        loaded = svod.load_plan(path, device=device, cache=cache)
    assert cache.stats.compiles == 0
    assert loaded.buffer_names == plan.buffer_names
    check(run(loaded))
    check(run(loaded, turns=5), turns=5)
    assert cache.stats.compiles == 0


def test_manifest_describes_the_plan(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        blobs = [n for n in archive.namelist() if n.startswith("blobs/")]
    assert manifest["format"] == "svod-plan-bundle" and manifest["version"] == 1
    assert manifest["device"] == "CPU" and manifest["compiler"] == plan.device.compiler.cache_key
    assert [s["kind"] for s in manifest["steps"]] == ["kernel", "copy", "kernel", "kernel", "loop"]
    named = {b["name"]: b for b in manifest["buffers"] if b["name"]}
    assert named["x"]["read"] and not named["x"]["written"] and named["y"]["written"]
    assert named["high"]["view"] and named["high"]["offset"] == N
    assert manifest["steps"][0]["fixed"] == {"n": N}
    assert {k["name"] for k in manifest["kernels"]} == {"double", "half", "accumulate"}
    assert blobs  # compiled objects, once per content
    assert manifest["target"]["cpu"]


def test_buffers_keep_their_contents_between_runs_by_index(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    loaded = svod.load_plan(path, cache=fresh_cache(tmp_path))
    x = np.arange(N, dtype=np.float32)
    loaded.buffers[0].copyin(x)
    loaded.execute(n=N, turns=2)
    np.testing.assert_allclose(loaded.buffers[1].numpy(), x * 2 + 1)
    out = np.zeros(N, np.float32)
    loaded.execute(buffers={1: out}, n=N, turns=2)
    np.testing.assert_allclose(out, x * 2 + 1)


_CHILD = """
import sys, numpy as np, svod, warnings
from svod.runtime import default_cache
warnings.simplefilter("error")
plan = svod.load_plan(sys.argv[1])
x = np.linspace(-1, 1, 64, dtype=np.float32)
y = np.zeros(64, np.float32)
plan.execute(buffers={"x": x, "y": y, "acc": np.zeros(64, np.float32)}, n=64, turns=3)
assert np.allclose(y, x * 2 + 1), y
print(default_cache().stats.compiles)
"""


def test_a_new_process_runs_a_loaded_plan_with_zero_compiles(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    env = {"SVOD_CACHE_DIR": str(tmp_path / "empty-cache"), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


# ---- code that does not fit ----------------------------------------------------------------------------------------

def test_other_cpu_features_recompile_with_one_warning(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    other = from_another_cpu(path, tmp_path / "other.svodplan")
    cache = fresh_cache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = svod.load_plan(other, cache=cache)
    bundle_warnings = [w for w in caught if issubclass(w.category, BundleWarning)]
    assert len(bundle_warnings) == 1
    assert "compiler" in str(bundle_warnings[0].message) and str(other) in str(bundle_warnings[0].message)
    assert cache.stats.compiles > 0
    check(run(loaded))


def test_another_svod_version_recompiles(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    other = rewrite(path, tmp_path / "old.svodplan", {"svod": "0.0.1"})
    with pytest.warns(BundleWarning, match="svod 0.0.1"):
        loaded = svod.load_plan(other, cache=fresh_cache(tmp_path))
    check(run(loaded))


def test_a_cpu_bundle_loads_on_the_python_reference(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    path = tmp_path / "plan.svodplan"
    plan.save(path)
    with pytest.warns(BundleWarning, match="device CPU"):
        loaded = svod.load_plan(path, device="PYTHON", cache=fresh_cache(tmp_path))
    check(run(loaded))


# ---- damaged and foreign files -------------------------------------------------------------------------------------

@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "plan.svodplan"
    build_plan("CPU", fresh_cache(tmp_path)).save(path)
    return path


def load_error(path: Path, tmp_path: Path) -> str:
    with pytest.raises(BundleError) as caught:
        svod.load_plan(path, cache=fresh_cache(tmp_path))
    assert isinstance(caught.value, SvodError)
    assert str(path) in str(caught.value)
    return str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    assert "no plan bundle" in load_error(tmp_path / "nothing.svodplan", tmp_path)


def test_a_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a bundle")
    assert "not a svod plan bundle" in load_error(path, tmp_path)
    other_zip = tmp_path / "other.zip"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("hello.txt", "hi")
    assert "no manifest.json" in load_error(other_zip, tmp_path)


def test_another_format_or_a_newer_version(saved: Path, tmp_path: Path) -> None:
    assert "format 'other'" in load_error(rewrite(saved, tmp_path / "a.zip", {"format": "other"}), tmp_path)
    assert "version 99" in load_error(rewrite(saved, tmp_path / "b.zip", {"version": 99}), tmp_path)


def test_a_truncated_file(saved: Path, tmp_path: Path) -> None:
    data = saved.read_bytes()
    for cut in (len(data) // 2, len(data) - 10):
        short = tmp_path / f"short{cut}.svodplan"
        short.write_bytes(data[:cut])
        load_error(short, tmp_path)


def test_scribbled_bytes(saved: Path, tmp_path: Path) -> None:
    """Every byte flipped somewhere in the file: an error naming the file, never a crash or a wrong run."""
    data = bytearray(saved.read_bytes())
    for position in range(0, len(data), max(1, len(data) // 40)):
        scribbled = bytearray(data)
        scribbled[position] ^= 0x5A
        path = tmp_path / "scribbled.svodplan"
        path.write_bytes(bytes(scribbled))
        try:
            plan = svod.load_plan(path, cache=fresh_cache(tmp_path))
        except BundleError as err:
            assert str(path) in str(err)
            continue
        check(run(plan))  # a flip in a part nothing reads (a zip header's timestamp)


def test_a_blob_that_does_not_match_its_hash(saved: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(saved) as archive:
        blob = next(n for n in archive.namelist() if n.startswith("blobs/"))
    bad = rewrite(saved, tmp_path / "bad.svodplan", replace={blob: b"\x7fELF" + b"\0" * 60})
    assert "sha256" in load_error(bad, tmp_path)
    missing = rewrite(saved, tmp_path / "missing.svodplan", drop=blob)
    assert "missing" in load_error(missing, tmp_path)


def test_a_graph_that_is_not_the_saved_one(saved: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(saved) as archive:
        graph = json.loads(archive.read("graph.json"))
        manifest = json.loads(archive.read("manifest.json"))
    for node in graph["nodes"]:  # change a constant of a kernel
        if node[0] == "CONST" and isinstance(node[3], dict) and node[3]["t"] == "float":
            node[3]["v"] = float.hex(123.0)
            break
    text = json.dumps(graph).encode()
    import hashlib
    bad = rewrite(saved, tmp_path / "bad.svodplan", {"graph_sha256": hashlib.sha256(text).hexdigest()},
                  replace={"graph.json": text})
    assert "key it was saved with" in load_error(bad, tmp_path)
    unknown = json.loads(json.dumps(graph))
    unknown["nodes"][0][3] = {"t": "os.system", "v": "echo hi"}
    text = json.dumps(unknown).encode()
    bad = rewrite(saved, tmp_path / "bad2.svodplan", {"graph_sha256": hashlib.sha256(text).hexdigest()},
                  replace={"graph.json": text})
    assert "unknown kind" in load_error(bad, tmp_path)
    del manifest


def test_a_manifest_with_steps_out_of_range(saved: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(saved) as archive:
        manifest = json.loads(archive.read("manifest.json"))
    steps = manifest["steps"]
    steps[0]["buffers"] = [0, 99]
    assert "buffers" in load_error(rewrite(saved, tmp_path / "a.zip", {"steps": steps}), tmp_path)
    assert "placed once" in load_error(rewrite(saved, tmp_path / "b.zip", {"top": [0]}), tmp_path)


def test_a_loop_with_a_step_of_zero(saved: Path, tmp_path: Path) -> None:
    """Refused where the bundle is read, as ``plan.loop`` refuses it (a run would raise Python's ValueError)."""
    with zipfile.ZipFile(saved) as archive:
        graph = json.loads(archive.read("graph.json"))
        manifest = json.loads(archive.read("manifest.json"))
    loop = next(step for step in manifest["steps"] if step["kind"] == "loop")
    graph["nodes"][loop["step"]][3] = 0
    text = json.dumps(graph).encode()
    bad = rewrite(saved, tmp_path / "zero.svodplan", {"graph_sha256": hashlib.sha256(text).hexdigest()},
                  replace={"graph.json": text})
    assert "a step of 0" in load_error(bad, tmp_path)


def test_saving_to_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    plan = build_plan("CPU", fresh_cache(tmp_path))
    with pytest.raises(SvodError, match="cannot write plan bundle"):
        plan.save(tmp_path / "no" / "such" / "plan.svodplan")


def test_the_same_plan_saves_to_the_same_bytes(tmp_path: Path) -> None:
    build_plan("CPU", fresh_cache(tmp_path)).save(tmp_path / "a.svodplan")
    build_plan("CPU", fresh_cache(tmp_path)).save(tmp_path / "b.svodplan")
    assert (tmp_path / "a.svodplan").read_bytes() == (tmp_path / "b.svodplan").read_bytes()


def test_a_reduction_in_parts_and_a_runtime_scalar_round_trip(tmp_path: Path) -> None:
    """A sum large enough to run in parts (buffers of its own), and a float scalar passed per run."""
    size = 1 << 20
    k = svod.KernelBuilder("scaled_sum")
    out, x = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, size)
    scale = k.scalar(dtypes.float32, "scale")
    r = k.range(size, svod.AxisKind.REDUCE)
    k.store(out[0], x[r].reduce(r) * scale)
    plan = svod.ExecutionPlan("CPU", cache=fresh_cache(tmp_path))
    o = plan.add_buffer(Buffer("CPU", dtypes.float32, 1), name="out")
    i = plan.add_buffer(Buffer("CPU", dtypes.float32, size), name="x")
    plan.add_kernel(k.build(), [o, i])
    plan.prepare()
    assert len(plan.prepared_kernels[0].kernel.program_uops) == 2  # a partial sum per worker, then their total
    data = np.random.default_rng(1).standard_normal(size).astype(np.float32)
    first = np.zeros(1, np.float32)
    plan.execute(buffers={"x": data, "out": first}, scale=0.5)
    path = tmp_path / "sum.svodplan"
    plan.save(path)
    cache = fresh_cache(tmp_path)
    loaded = svod.load_plan(path, cache=cache)
    again = np.zeros(1, np.float32)
    loaded.execute(buffers={"x": data, "out": again}, scale=0.5)
    assert cache.stats.compiles == 0
    assert again[0] == first[0]
    np.testing.assert_allclose(again[0], data.astype(np.float64).sum() * 0.5, rtol=1e-3)
