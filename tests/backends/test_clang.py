"""The C pair's flags follow the compiler it found."""

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import svod
from svod.backends.clang import FLAGS, GCC_FLAGS, ClangCompiler, _flags, find_c_compiler, newest_versioned_clang
from svod.dtype import dtypes
from svod.errors import DeviceError
from svod.frontend.builder import KernelBuilder
from svod.ir import AxisKind, UOp
from svod.workloads import conv2d, matmul
from tests.helpers import cpu_device


def test_gcc_takes_its_own_flags_last():
    """gcc's -O3 comes after -O2 (the last -O wins), with -fno-trapping-math for the selects to vectorise."""
    assert _flags("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", avx512=False) == [*FLAGS, *GCC_FLAGS]


def test_avx512_prefers_512_bit_vectors():
    """Both compilers default to 256-bit vectors on most AVX-512 CPUs; the register tile's rows are two
    512-bit registers there."""
    wide = _flags("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", avx512=True)
    assert wide == [*FLAGS, *GCC_FLAGS, "-mprefer-vector-width=512"]
    assert "-mprefer-vector-width=512" in _flags("Debian clang version 14.0.6", avx512=True)


def test_clang_before_17_groups_no_strided_accesses():
    """clang 14 vectorised a group of strided loads past a store they depend on (llvm-project#63602):
    tests/backends/test_program_order.py seed 9 gave a wrong answer with Debian 12's clang."""
    flags = _flags("Debian clang version 14.0.6", avx512=False)
    assert not set(GCC_FLAGS) & set(flags)
    assert flags[-2:] == ["-mllvm", "-enable-interleaved-mem-accesses=0"]
    assert "-enable-interleaved-mem-accesses=0" not in _flags("clang version 18.1.8", avx512=False)


PT_LOAD, PT_GNU_RELRO = 1, 0x6474E552
"""The program header types of a segment the dynamic loader maps, and of a part of one it maps again read-only."""


def _segment_types(elf: bytes) -> list[int]:
    """The type of each program header of a 64-bit little-endian ELF file, read here from its header."""
    offset, = struct.unpack_from("<Q", elf, 0x20)
    size, count = struct.unpack_from("<HH", elf, 0x36)
    return [struct.unpack_from("<I", elf, offset + k * size)[0] for k in range(count)]


def test_a_kernels_shared_object_is_mapped_in_two_segments(tmp_path):
    """A process holds at most ``vm.max_map_count`` mappings (65530 by default), and the dynamic loader maps each
    segment of each kernel's shared object: linked as the linker lays out by default (four segments and a
    read-only part of the data), a few thousand kernels of one process used them up, and the next failed to load
    ("failed to map segment from shared object"). Its code and its data: two."""
    compiler = ClangCompiler()
    source, obj, shared = tmp_path / "k.c", tmp_path / "k.o", tmp_path / "k.so"
    source.write_text("double twice(const double *a) { return a[0] * 2.0; }\n")
    subprocess.run([compiler.path, *compiler.flags, str(source), "-o", str(obj)], check=True)
    linker, *libraries = compiler.link_command
    subprocess.run([linker, str(obj), "-o", str(shared), *libraries], check=True)
    types = _segment_types(shared.read_bytes())
    assert types.count(PT_LOAD) == 2 and PT_GNU_RELRO not in types


def _real(name: str | None) -> str:
    """The path of a real program on this machine's PATH, or a skip naming the one it lacks."""
    path = shutil.which(name) if name else None
    if path is None:
        pytest.skip(f"no {name or 'versioned clang'} on this machine")
    return path


def _real_clang() -> str:
    """clang, or the newest versioned clang, as the C pair finds it on this machine's PATH."""
    return _real("clang" if shutil.which("clang") else newest_versioned_clang())


def _path_of(folder: Path, links: dict[str, str]) -> str:
    """A PATH of one folder holding ``links`` (name: the real program), the assembler and linker among them."""
    folder.mkdir()
    for name, target in {**links, "as": _real("as"), "ld": _real("ld")}.items():
        (folder / name).symlink_to(target)
    return str(folder)


def test_the_newest_versioned_clang_is_found_before_gcc(tmp_path, monkeypatch):
    """Debian installs clang as ``clang-15`` only: the highest version by number (15 above 9) is taken, before
    gcc; a plain ``clang`` before them all, and without any clang, gcc. The search reads names only, so each
    name is a link to whichever real C compiler this machine has (a machine with gcc alone tests it too)."""
    clang = gcc = find_c_compiler()
    monkeypatch.setenv("PATH", _path_of(tmp_path / "versioned", {"clang-9": clang, "clang-15": clang, "gcc": gcc}))
    assert find_c_compiler() == str(tmp_path / "versioned" / "clang-15")
    monkeypatch.setenv("PATH", _path_of(tmp_path / "plain", {"clang-15": clang, "clang": clang, "gcc": gcc}))
    assert find_c_compiler() == str(tmp_path / "plain" / "clang")
    monkeypatch.setenv("PATH", _path_of(tmp_path / "gcc", {"gcc": gcc}))
    assert find_c_compiler() == str(tmp_path / "gcc" / "gcc")
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(DeviceError, match="no C compiler found"):
        find_c_compiler()


def test_a_compiler_without_its_linker_is_refused_saying_so(tmp_path, monkeypatch):
    """The C pair links with the linker its compiler names (``-print-prog-name=ld``); where that is nowhere on
    PATH (gcc answers a bare ``ld`` then), a compile says so, as a ``DeviceError``, not as an internal error
    about a missing file."""
    folder = tmp_path / "nold"
    folder.mkdir()
    for name, target in {"gcc": _real("gcc"), "as": _real("as")}.items():
        (folder / name).symlink_to(target)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("SVOD_CACHE", "0")
    k = KernelBuilder("doubled")
    out, a = k.buffer(dtypes.float32, (5,)), k.buffer(dtypes.float32, (5,))
    i = k.range(5)
    k.store(out[i], a[i] * 2.0)
    with pytest.raises(DeviceError, match=r"gcc links with ld, which is not on PATH"):
        svod.run(k.build(), [np.zeros(5, np.float32), np.ones(5, np.float32)], device=cpu_device(1, "clang"))


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("make", [lambda: matmul(37, 5, 67), lambda: matmul(64), lambda: conv2d(3, 17),
                                  lambda: matmul(9, 3, 40, dtype=np.float64, name="matmul_f64")])
def test_tiles_in_vectors_compute_what_llvm_does(tmp_path, monkeypatch, compiler, make):
    """Register tiles in GNU C vectors, in parts of one register each, their masked last columns and a
    padded window loaded whole or lane by lane: bit for bit the LLVM pair's values, under gcc and clang."""
    real = _real("gcc") if compiler == "gcc" else _real_clang()
    workload = make()
    want = [a.copy() for a in workload.arrays]
    svod.run(workload.steps[0].ast, want, device=cpu_device(1, "llvm"))
    monkeypatch.setenv("PATH", _path_of(tmp_path / "bin", {compiler: real}))
    got = [a.copy() for a in workload.arrays]
    svod.run(workload.steps[0].ast, got, device=cpu_device(1, "clang"))
    np.testing.assert_array_equal(got[0], want[0])


def _capped_matmul(op: str, rows: int, depth: int, columns: int) -> tuple[UOp, list[np.ndarray]]:
    """``maximum`` (or ``minimum``) of a matmul tile's sums and a buffer of signed zeros and NaNs: the tile's
    extrema in lanes, whose ties of zeros and NaNs are the ones maximumNumber decides."""
    k = KernelBuilder(f"capped_{op}")
    out, a = k.buffer(dtypes.float32, (rows, columns)), k.buffer(dtypes.float32, (rows, depth))
    b, c = k.buffer(dtypes.float32, (depth, columns)), k.buffer(dtypes.float32, (rows, columns))
    i, j, r = k.range(rows), k.range(columns), k.range(depth, AxisKind.REDUCE)
    k.store(out[i, j], getattr((a[i, r] * b[r, j]).reduce(r), op)(c[i, j]))
    rng = np.random.default_rng(rows)
    x = rng.choice(np.array([0.0, -0.0, 1.5, -2.0], np.float32), (rows, depth))
    y = rng.choice(np.array([1.0, -1.0, 0.0, np.nan], np.float32), (depth, columns))
    z = rng.choice(np.array([0.0, -0.0, np.nan, 1.0, -1.0], np.float32), (rows, columns))
    return k.build(), [np.zeros((rows, columns), np.float32), x, y, z]


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_extrema_in_vectors_keep_the_sign_of_zero_and_pass_nan_over(tmp_path, monkeypatch, compiler, op):
    """maximumNumber and minimumNumber of lanes: the bits of the LLVM pair's values, signed zeros included."""
    real = _real("gcc") if compiler == "gcc" else _real_clang()
    ast, arrays = _capped_matmul(op, 11, 3, 45)
    want = [a.copy() for a in arrays]
    svod.run(ast, want, device=cpu_device(1, "llvm"))
    monkeypatch.setenv("PATH", _path_of(tmp_path / "bin", {compiler: real}))
    got = [a.copy() for a in arrays]
    svod.run(ast, got, device=cpu_device(1, "clang"))
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.int64])
def test_conversions_in_vectors_saturate(tmp_path, monkeypatch, compiler, dtype):
    """A tile's sums converted to integers in lanes: out of range saturates, NaN gives 0, as one value's
    conversion does (the LLVM pair's values)."""
    real = _real("gcc") if compiler == "gcc" else _real_clang()
    k = KernelBuilder("converted")
    out, a = k.buffer(dtype, (5, 37)), k.buffer(dtypes.float32, (5, 2))
    b = k.buffer(dtypes.float32, (2, 37))
    i, j, r = k.range(5), k.range(37), k.range(2, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r).cast(dtype))
    rng = np.random.default_rng(dtype.itemsize)
    x = rng.choice(np.array([3e10, -3e10, np.nan, np.inf, 3.7, -2.5, 255.5, 0.0], np.float32), (5, 2))
    y = rng.choice(np.array([1.0, -1.0, 0.5, 1e-3], np.float32), (2, 37))
    want = [np.zeros((5, 37), dtype.numpy), x, y]
    got = [w.copy() for w in want]
    svod.run(k.build(), want, device=cpu_device(1, "llvm"))
    monkeypatch.setenv("PATH", _path_of(tmp_path / "bin", {compiler: real}))
    svod.run(k.build(), got, device=cpu_device(1, "clang"))
    np.testing.assert_array_equal(got[0], want[0])
