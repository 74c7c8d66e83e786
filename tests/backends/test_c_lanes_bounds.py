"""The C pair's register tiles in GNU C vectors read and write only inside their buffers, and compute the LLVM
pair's values, under gcc and clang.

Each buffer is placed against a page the process may not touch (after its last byte, or before its first),
so a whole-vector load or store of a last, partial tile or of a padded window that reaches one element past
the buffer kills the run instead of reading a neighbour's bytes: an out-of-bounds check without a sanitizer.
"""

import ctypes
import mmap
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import svod
from svod.backends.clang import newest_versioned_clang
from svod.dtype import dtypes
from svod.frontend.builder import KernelBuilder
from svod.ir import AxisKind, Ops, UOp
from svod.workloads import conv2d
from tests.helpers import cpu_device

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_PAGE = mmap.PAGESIZE

Kernel = tuple[UOp, list[np.ndarray]]


def _guarded(array: np.ndarray, at_end: bool, keep: list[mmap.mmap]) -> np.ndarray:
    """A copy of ``array`` whose last byte ends a page followed by one without access (``at_end``), or whose
    first byte starts a page preceded by one."""
    pages = -(-max(array.nbytes, 1) // _PAGE) + 2
    memory = mmap.mmap(-1, pages * _PAGE)
    keep.append(memory)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    guard = base + (pages - 1) * _PAGE if at_end else base
    assert _LIBC.mprotect(guard, _PAGE, 0) == 0, os.strerror(ctypes.get_errno())
    start = (pages - 1) * _PAGE - array.nbytes if at_end else _PAGE
    placed: np.ndarray = np.frombuffer(memory, array.dtype, array.size, start).reshape(array.shape)
    placed[...] = array
    return placed


def _in_child(run: Callable[[], np.ndarray], like: np.ndarray, why: str) -> np.ndarray:
    """The array ``run`` returns (shaped as ``like``), run in a child process, so that an access outside a
    buffer (``why``) fails the test rather than the test run."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            os.write(writer, run().tobytes())
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as stream:
        data = stream.read()
    _, status = os.waitpid(pid, 0)
    assert not os.WIFSIGNALED(status), f"the run was killed by signal {os.WTERMSIG(status)}: {why}"
    assert os.WEXITSTATUS(status) == 0
    return np.frombuffer(data, like.dtype).reshape(like.shape)


def _run_guarded(ast: UOp, arrays: list[np.ndarray], compiler: str, at_end: bool) -> np.ndarray:
    """The first array after a run on the CPU pair ``compiler`` with every array against a guard page."""

    def run() -> np.ndarray:
        keep: list[mmap.mmap] = []
        placed = [_guarded(a, at_end, keep) for a in arrays]
        svod.run(ast, placed, device=cpu_device(1, compiler))
        return placed[0]

    return _in_child(run, arrays[0], "an access past a buffer")


def _program(name: str | None) -> str:
    path = shutil.which(name) if name else None
    if path is None:
        pytest.skip(f"no {name or 'versioned clang'} on this machine")
    return path


def _only(tmp_path: Path, compiler: str) -> str:
    """A PATH on which the C pair finds ``compiler`` (gcc, or clang as this machine names it) and nothing else."""
    name = "gcc" if compiler == "gcc" else ("clang" if shutil.which("clang") else newest_versioned_clang())
    folder = tmp_path / "bin"
    folder.mkdir()
    for link, target in {name or "clang": _program(name), "as": _program("as"), "ld": _program("ld")}.items():
        (folder / link).symlink_to(target)
    return str(folder)


def _sums(dtype: np.dtype, rows: int, depth: int, columns: int, epilogue: str) -> Kernel:
    """A tile of sums of products, ``epilogue`` applied to each: the widest values in lanes the C renderer
    splits in parts, the last columns of a size that is no multiple of a tile masked."""
    k = KernelBuilder(f"sums_{epilogue}")
    element = dtypes.from_numpy(dtype)
    out, a = k.buffer(element, (rows, columns)), k.buffer(element, (rows, depth))
    b, c = k.buffer(element, (depth, columns)), k.buffer(element, (rows, columns))
    i, j, r = k.range(rows), k.range(columns), k.range(depth, AxisKind.REDUCE)
    total = (a[i, r] * b[r, j]).reduce(r)
    value = {"sum": total, "max": total.maximum(c[i, j]), "min": total.minimum(c[i, j]),
             "where": (total < c[i, j]).where(total, c[i, j]), "shift": (a[i, r] * (j >= 1).where(
                 b[r, j - 1], 0)).reduce(r)}[epilogue]
    k.store(out[i, j], value)
    rng = np.random.default_rng(rows * 10_000 + depth * 100 + columns)
    return k.build(), [np.zeros((rows, columns), dtype), *(_draw(rng, dtype, shape) for shape in (
        (rows, depth), (depth, columns), (rows, columns)))]


def _draw(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, int]) -> np.ndarray:
    """Special floats (signed zeros, NaN, infinities), or integers over the whole range of ``dtype``."""
    if dtype.kind == "f":
        return rng.choice(np.array([0.0, -0.0, np.nan, 1.0, -1.5, np.inf, 2.0], dtype), shape)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype, endpoint=True)


def _column_extremum(dtype: np.dtype, rows: int, columns: int, op: Ops) -> Kernel:
    """A MAX or MIN down each column: a row of partial extrema in lanes."""
    k = KernelBuilder("column_extremum")
    element = dtypes.from_numpy(dtype)
    out, x = k.buffer(element, (columns,)), k.buffer(element, (rows, columns))
    j, r = k.range(columns), k.range(rows, AxisKind.REDUCE)
    k.store(out[j], x[r, j].reduce(r, op=op))
    rng = np.random.default_rng(rows * 100 + columns)
    values = rng.choice(np.array([0.0, -0.0, np.nan, 1.0, -1.0, -np.inf, 3.0], np.float64), (rows, columns))
    return k.build(), [np.zeros((columns,), dtype), values.astype(dtype) if dtype.kind == "f" else
                       rng.integers(-100, 100, (rows, columns)).astype(dtype)]


def _window(channels: int, size: int) -> Kernel:
    """The suite's padded 3x3 convolution: its window's tests compare lanes of offsets, a whole vector loaded
    where every lane is inside and each lane's element where some are not."""
    workload = conv2d(channels, size)
    return workload.steps[0].ast, [array.copy() for array in workload.arrays]


_SIZES = [(1, 1, 1), (5, 3, 33), (13, 17, 31), (3, 2, 65)]
_KERNELS: list[tuple[str, Callable[[], Kernel]]] = [
    *((f"{epilogue}-{np.dtype(t).name}-{'x'.join(map(str, size))}",
       lambda t=t, size=size, epilogue=epilogue: _sums(np.dtype(t), *size, epilogue))
      for t in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8) for size in _SIZES
      for epilogue in ("sum", "max") if (epilogue == "sum") == (t in (np.float32, np.float64)) or size[2] == 31),
    *((f"{epilogue}-float64-{size}", lambda epilogue=epilogue, size=size: _sums(np.dtype(np.float64), *size,
                                                                                 epilogue))
      for epilogue in ("min", "where", "shift") for size in ((3, 2, 33),)),
    *((f"column-{op.name}-{np.dtype(t).name}", lambda t=t, op=op: _column_extremum(np.dtype(t), 7, 37, op))
      for t, op in ((np.float32, Ops.MAX), (np.float64, Ops.MIN), (np.int8, Ops.MAX), (np.uint8, Ops.MIN))),
    *((f"window-{channels}x{size}", lambda channels=channels, size=size: _window(channels, size))
      for channels, size in ((1, 1), (2, 5), (3, 17), (2, 33))),
]


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize(("name", "make"), _KERNELS, ids=[name for name, _ in _KERNELS])
def test_tiles_in_vectors_stay_inside_their_buffers(tmp_path, monkeypatch, compiler, name, make):
    """Against a guard page after and before every buffer, the C pair's values are the LLVM pair's, bit for
    bit (NaNs by place, signed zeros by sign), at sizes of one, primes and one past a tile."""
    ast, arrays = make()
    want = _run_guarded(ast, arrays, "llvm", at_end=True)
    monkeypatch.setenv("PATH", _only(tmp_path, compiler))
    for at_end in (True, False):
        got = _run_guarded(ast, arrays, "clang", at_end)
        if want.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
        np.testing.assert_array_equal(got, want)


def _far_bias(rows: int, depth: int, columns: int, far: int, backwards: bool) -> Kernel:
    """A tile of sums plus a bias read ``far`` elements into its buffer (``backwards``: from its end down):
    the bias's lanes are a line whose scalar is a constant near ``far``, some lanes past ``2**31 - 1``."""
    k = KernelBuilder("far_bias")
    out, a = k.buffer(dtypes.float32, (rows, columns)), k.buffer(dtypes.float32, (rows, depth))
    b, c = k.buffer(dtypes.float32, (depth, columns)), k.buffer(dtypes.float32, (far + columns,))
    i, j, r = k.range(rows), k.range(columns), k.range(depth, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r) + (c[far + columns - 1 - j] if backwards else c[j + far]))
    rng = np.random.default_rng(far)
    bias = np.zeros(far + columns, np.float32)  # untouched pages stay unallocated: only the last ones are written
    bias[far:] = np.arange(1, columns + 1, dtype=np.float32) * 1000
    return k.build(), [np.zeros((rows, columns), np.float32), rng.standard_normal((rows, depth)).astype(np.float32),
                       rng.standard_normal((depth, columns)).astype(np.float32), bias]


def _run_in_child(ast: UOp, arrays: list[np.ndarray]) -> np.ndarray:
    """The first array after a run on the C pair."""

    def run() -> np.ndarray:
        svod.run(ast, arrays, device=cpu_device(1, "clang"))
        return arrays[0]

    return _in_child(run, arrays[0], "a wrong offset")


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("far", [(1 << 31) - 8, (1 << 31) - 33, (1 << 31) + 5])
def test_lanes_whose_offsets_pass_two_to_the_31_read_their_own_elements(tmp_path, monkeypatch, compiler, far,
                                                                         backwards):
    """Index lanes spelled as a line (a scalar plus a constant times the lane) are 64-bit sums: a bias read
    just below, across and above ``2**31`` elements into its buffer, forwards or backwards, gives numpy's
    values, under gcc and clang."""
    ast, arrays = _far_bias(13, 31, 33, far, backwards)
    monkeypatch.setenv("PATH", _only(tmp_path, compiler))
    got = _run_in_child(ast, arrays)
    want = arrays[1] @ arrays[2] + arrays[3][far:][::-1 if backwards else 1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
