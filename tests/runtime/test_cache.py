"""The method cache and the disk cache: identity, exactly-once compiles, sharing between processes, and
recovery from every kind of damage."""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import KernelBuilder, dtypes
from svod.config import settings
from svod.device import ProgramSpec
from svod.errors import SvodError
from svod.runtime import CachedKernel, CacheWarning, DiskCache, KernelCache
from svod.runtime import cache as cache_module
from svod.runtime.disk import DATABASE_NAME
from tests.helpers import cpu_device, open_device, webgpu_devices

REPO = Path(__file__).resolve().parents[2]


def _kernel(scale: float, name: str = "scale"):
    k = KernelBuilder(name)
    n = k.var("n", 1, 1 << 16)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * scale)
    return k.build()


def _cache(directory: Path) -> KernelCache:
    return KernelCache(dataclasses.replace(settings, cache_dir=directory, disk_cache=True))


def _check(kernel: CachedKernel, scale: float) -> None:
    """Run ``kernel`` (``_kernel(scale)`` from a cache) and compare every element with numpy: a binary loaded
    for another kernel, or half loaded, gives other numbers."""
    x = np.linspace(-3.0, 4.0, 8, dtype=np.float32)
    out = svod.Buffer.from_numpy(np.full(8, np.nan, np.float32), kernel.device)
    kernel([out, svod.Buffer.from_numpy(x, kernel.device)], {"n": 8})
    np.testing.assert_array_equal(out.numpy(), x * np.float32(scale))


@pytest.mark.parametrize("name", ["llvm", "clang", "PYTHON", "CL:0", "CUDA:0", *webgpu_devices()])
def test_the_program_uop_carries_every_stage_and_reads_back(tmp_path, name):
    """Every backend svod has, not only those this machine happens to have: a missing one is a skip."""
    kernel = _cache(tmp_path).get(_kernel(3.0), open_device(name))
    _check(kernel, 3.0)
    program = kernel.program_uop
    assert [stage.op for stage in program.src] == [svod.Ops.SINK, svod.Ops.DEVICE, svod.Ops.LINEAR, svod.Ops.SOURCE,
                                                   svod.Ops.BINARY]
    assert program.src[3].arg == kernel.code
    jit = name == "PYTHON"  # the reference interprets; every other backend keeps compiled bytes
    assert (program.src[4].arg == b"") == jit
    spec = ProgramSpec.from_uop(program)
    assert spec.entry == kernel.entry_point and spec.name == "scale" and "n" in spec.var_names
    assert spec.globals == [0, 1] and spec.outs == [0] and spec.ins == [1]


def test_a_jit_backend_compiles_to_source_and_empty_bytes():
    device = svod.get_device("PYTHON")
    compiled = device.compiler.compile(device.renderer.render(_kernel(2.0)))
    assert compiled.bytes == b"" and compiled.src and compiled.entry.startswith("svod_scale_")


def test_memory_hit_returns_the_same_object(tmp_path):
    cache = _cache(tmp_path)
    first = cache.get(_kernel(2.0), svod.get_device("CPU"))
    assert cache.get(_kernel(2.0), svod.get_device("CPU")) is first
    assert cache.stats.compiles == 1 and cache.stats.hits == 1


def test_eight_threads_compile_once(tmp_path):
    cache = _cache(tmp_path)
    device = svod.get_device("CPU")
    barrier = threading.Barrier(8)
    results = []

    def ask() -> None:
        barrier.wait()
        results.append(cache.get(_kernel(3.0, "racy"), device))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert cache.stats.compiles == 1


def test_failed_compile_raises_in_every_waiter_and_is_not_cached(tmp_path):
    cache = _cache(tmp_path)
    p = svod.UOp.param(0, dtypes.int32, 64)
    gpu_only = svod.UOp.sink(p[svod.UOp.special(64, "gidx0")].store(svod.UOp.const(dtypes.int32, 1)), name="gpu")
    device = svod.get_device("CPU")
    barrier = threading.Barrier(4)
    errors = []

    def ask() -> None:
        barrier.wait()
        try:
            cache.get(gpu_only, device)
        except SvodError as err:
            errors.append(err)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all("gidx0" in str(e) for e in errors)
    assert len(cache) == 0
    with pytest.raises(SvodError):
        cache.get(gpu_only, device)


_CHILD = textwrap.dedent("""
    import dataclasses, sys
    from pathlib import Path
    import numpy as np
    import svod
    from svod import KernelBuilder, dtypes
    from svod.config import settings
    from svod.runtime import KernelCache
    cache = KernelCache(dataclasses.replace(settings, cache_dir=Path(sys.argv[1]), disk_cache=True))
    scales = [float(s) for s in sys.argv[2:]]
    for scale in scales:
        k = KernelBuilder("scale")
        n = k.var("n", 1, 1 << 16)
        out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
        i = k.range(n)
        k.store(out[i], x[i] * scale)
        kernel = cache.get(k.build(), svod.get_device("CPU"))
        o = svod.Buffer.from_numpy(np.zeros(4, np.float32))
        kernel([o, svod.Buffer.from_numpy(np.ones(4, np.float32))], {"n": 4})
        assert o.numpy().tolist() == [scale] * 4, o.numpy()
    print(cache.stats.compiles, cache.disk.stats.hits)
""")


def _child(directory: Path, *scales: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(directory), *map(str, scales)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str]) -> tuple[int, int]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    compiles, hits = out.split()
    return int(compiles), int(hits)


def test_a_new_process_loads_from_disk_without_compiling(tmp_path):
    assert _finish(_child(tmp_path, 5.0, 6.0)) == (2, 0)
    assert _finish(_child(tmp_path, 5.0, 6.0)) == (0, 2)


def test_six_processes_share_one_cache(tmp_path):
    processes = [_child(tmp_path, 7.0, 8.0 + p % 3) for p in range(6)]
    results = [_finish(p) for p in processes]
    assert all(compiles + hits == 2 for compiles, hits in results)
    assert len(DiskCache(tmp_path)) == 4


def _populate(tmp_path: Path) -> None:
    """One kernel on disk, with the connection closed so nothing writes the file behind the test's back."""
    cache = _cache(tmp_path)
    _check(cache.get(_kernel(4.0), svod.get_device("CPU")), 4.0)
    assert cache.stats.compiles == 1 and cache.disk is not None
    cache.disk.close()


def test_scribbled_database_is_replaced(tmp_path):
    _populate(tmp_path)
    (tmp_path / DATABASE_NAME).write_bytes(b"scribble " * 1000)
    for suffix in ("-wal", "-shm"):
        (tmp_path / (DATABASE_NAME + suffix)).unlink(missing_ok=True)
    fresh = _cache(tmp_path)
    with pytest.warns(CacheWarning, match="was damaged"):
        _check(fresh.get(_kernel(4.0), svod.get_device("CPU")), 4.0)
    assert fresh.stats.compiles == 1 and fresh.disk is not None and fresh.disk.enabled
    assert len(fresh.disk) == 1


def test_truncated_database_is_replaced(tmp_path):
    _populate(tmp_path)
    db = tmp_path / DATABASE_NAME
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.write_bytes(db.read_bytes()[:1500])
    fresh = _cache(tmp_path)
    with pytest.warns(CacheWarning, match="was damaged"):
        _check(fresh.get(_kernel(4.0), svod.get_device("CPU")), 4.0)
    assert fresh.stats.compiles == 1


@pytest.mark.parametrize("damage", [
    "UPDATE entries SET data = substr(data, 1, 100)",
    "UPDATE entries SET data = randomblob(size)",
    "UPDATE entries SET schema = 99",
    "UPDATE entries SET checksum = 'foreign'",
])
def test_damaged_entries_are_rebuilt_never_loaded(tmp_path, damage):
    _populate(tmp_path)
    with sqlite3.connect(tmp_path / DATABASE_NAME) as conn:
        conn.execute(damage)
    fresh = _cache(tmp_path)
    _check(fresh.get(_kernel(4.0), svod.get_device("CPU")), 4.0)
    assert fresh.stats.compiles == 1 and fresh.disk is not None and fresh.disk.stats.discarded == 1
    again = _cache(tmp_path)
    again.get(_kernel(4.0), svod.get_device("CPU"))
    assert again.stats.compiles == 0


def test_unwritable_directory_warns_once_and_keeps_working(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = _cache(blocker / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(cache.get(_kernel(9.0), svod.get_device("CPU")), 9.0)
        _check(cache.get(_kernel(10.0), svod.get_device("CPU")), 10.0)
    assert [w.category for w in caught] == [CacheWarning]
    assert cache.stats.compiles == 2 and cache.disk is not None and not cache.disk.enabled


def test_disk_cache_can_be_turned_off(tmp_path):
    cache = KernelCache(dataclasses.replace(settings, cache_dir=tmp_path, disk_cache=False))
    assert cache.disk is None
    _check(cache.get(_kernel(11.0), svod.get_device("CPU")), 11.0)
    assert not (tmp_path / DATABASE_NAME).exists()


@pytest.mark.parametrize("trial", range(6))
def test_random_bytes_over_the_database_cost_only_a_recompile(tmp_path, trial):
    _populate(tmp_path)
    db = tmp_path / DATABASE_NAME
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    rng = np.random.default_rng(trial)
    at = 0 if trial % 2 == 0 else int(rng.integers(0, max(1, len(data) - 4096)))
    data[at:at + 4096] = rng.integers(0, 256, min(4096, len(data) - at), dtype=np.uint8).tobytes()
    db.write_bytes(bytes(data))
    fresh = _cache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for scale in (4.0, 5.0, 6.0):
            _check(fresh.get(_kernel(scale), svod.get_device("CPU")), scale)
    assert len([w for w in caught if w.category is CacheWarning]) <= 1
    assert fresh.disk is not None and fresh.disk.enabled
    if caught:  # the damage was seen: the file was set aside (kept, renamed) and a new one built
        assert "set aside" in str(caught[0].message)
        assert list(tmp_path.glob(f"{DATABASE_NAME}.damaged-*"))
    again = _cache(tmp_path)
    for scale in (4.0, 5.0, 6.0):
        _check(again.get(_kernel(scale), svod.get_device("CPU")), scale)
    assert again.stats.compiles == 0  # the rebuilt file serves a new process


def test_a_foreign_database_is_left_alone(tmp_path):
    db = tmp_path / DATABASE_NAME
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('not svod')")
        conn.execute("PRAGMA user_version = 42")
    before = db.read_bytes()
    cache = _cache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(cache.get(_kernel(7.0), svod.get_device("CPU")), 7.0)
    assert not caught and db.read_bytes() == before
    assert cache.disk is not None and cache.disk.path.name == "kernels-svod.sqlite" and len(cache.disk) == 1
    again = _cache(tmp_path)
    _check(again.get(_kernel(7.0), svod.get_device("CPU")), 7.0)
    assert again.stats.compiles == 0


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("garbage", [b"\x7fELF" + bytes(200), b"not an object at all", b""])
def test_an_entry_that_checksums_but_does_not_load_is_rebuilt(tmp_path, compiler, garbage):
    device = svod.get_device("CPU", compiler)
    ast = _kernel(8.0, f"garbage_{compiler}")
    spec = device.renderer.render(ast)
    disk = DiskCache(tmp_path)
    disk.put(device.compiler.cache_key, spec.src, garbage)  # another writer's bytes, with a valid checksum
    disk.close()
    cache = _cache(tmp_path)
    _check(cache.get(ast, device), 8.0)
    assert cache.stats.compiles == 1 and cache.disk is not None and cache.disk.stats.discarded >= 1


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
def test_clear_releases_the_compiled_code(tmp_path, compiler):
    import gc
    import weakref

    cache = KernelCache(dataclasses.replace(settings, cache_dir=tmp_path, disk_cache=False))
    kernel = cache.get(_kernel(12.0, f"released_{compiler}"), svod.get_device("CPU", compiler))
    _check(kernel, 12.0)
    code = weakref.ref(kernel.program._keepalive)  # the JIT library or the shared object
    assert cache.bytes_held > 0
    del kernel
    cache.clear()
    gc.collect()
    assert code() is None and cache.bytes_held == 0 and len(cache) == 0


def test_clear_releases_a_device_the_cache_has_keyed():
    import gc
    import weakref

    cache = KernelCache(dataclasses.replace(settings, disk_cache=False))
    device = cpu_device(1, "llvm")  # a device of its own, which no registry of the session holds
    kernel = cache.get(_kernel(6.0, "device_released"), device)
    _check(kernel, 6.0)
    device_ref = weakref.ref(device)
    del kernel, device
    cache.clear()
    gc.collect()
    assert device_ref() is None


def test_the_memory_cache_keeps_its_budget_and_drops_the_least_recently_used(tmp_path):
    device = svod.get_device("CPU")
    probe = KernelCache(dataclasses.replace(settings, cache_dir=tmp_path, disk_cache=False))
    probed = probe.get(_kernel(100.0, "budget"), device)
    one_kernel = len(probed.code) + probed.code_bytes  # what the cache counts: the source and the loaded code
    cache = KernelCache(dataclasses.replace(settings, cache_dir=tmp_path, disk_cache=False,
                                            cache_memory=int(3.5 * one_kernel)))
    first, second, _ = (cache.get(_kernel(scale, "budget"), device) for scale in (1.0, 2.0, 3.0))
    cache.get(_kernel(1.0, "budget"), device)  # used again: now the most recent
    cache.get(_kernel(4.0, "budget"), device)  # over budget: the least recently used (2.0) goes
    assert len(cache) == 3 and cache._kernels.held <= cache.settings.cache_memory
    assert cache.get(_kernel(1.0, "budget"), device) is first
    assert cache.get(_kernel(2.0, "budget"), device) is not second  # it was dropped, and is loaded again


def test_the_memory_cache_keeps_so_many_kernels_loaded_whatever_their_bytes(tmp_path, monkeypatch):
    """Each loaded kernel holds some of the process's memory mappings, of which it has a bounded number: past
    ``KERNELS_LOADED`` the least recently used kernel goes, however few bytes they hold."""
    monkeypatch.setattr(cache_module, "KERNELS_LOADED", 2)
    device = svod.get_device("CPU")
    cache = KernelCache(dataclasses.replace(settings, cache_dir=tmp_path, disk_cache=False))
    first, second = (cache.get(_kernel(scale, "counted"), device) for scale in (1.0, 2.0))
    cache.get(_kernel(1.0, "counted"), device)  # used again: now the most recent
    cache.get(_kernel(3.0, "counted"), device)  # one too many: the least recently used (2.0) goes
    assert len(cache) == 2 and cache.bytes_held < cache.settings.cache_memory
    assert cache.get(_kernel(1.0, "counted"), device) is first
    assert cache.get(_kernel(2.0, "counted"), device) is not second
    _check(cache.get(_kernel(2.0, "counted"), device), 2.0)


def test_a_renderer_given_other_caps_keys_its_kernels_anew(tmp_path, monkeypatch):
    """A kernel is keyed by what its renderer's caps are at the look-up, as the work-group tests rely on when
    they lower a device's kernels as for a GPU: one thread's kernel is not the two threads' kernel, on disk
    either, and the caps put back find the kernel of those caps again."""
    device = cpu_device(2, "llvm")
    cache = _cache(tmp_path)
    split = cache.get(_kernel(5.0, "recapped"), device)
    assert split.launch_dims({"n": 1 << 16}).global_size[0] == 2
    monkeypatch.setattr(device.renderer, "caps", dataclasses.replace(device.renderer.caps, threads=1))
    single = cache.get(_kernel(5.0, "recapped"), device)
    assert single.launch_dims({"n": 1 << 16}).global_size[0] == 1
    assert cache.stats.compiles == 2 and cache.stats.hits == 0
    _check(single, 5.0)
    fresh = _cache(tmp_path)  # another process's memory: the disk holds the one-thread kernel under its own key
    assert fresh.get(_kernel(5.0, "recapped"), device).launch_dims({"n": 1 << 16}).global_size[0] == 1
    monkeypatch.undo()
    assert cache.get(_kernel(5.0, "recapped"), device) is split
