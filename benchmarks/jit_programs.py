"""Whole numba programs under ``@svod.jit``: each program is ONE source text, written as a numba user writes it
for ``@njit(parallel=True)``; its svod version and its numba version are that text with only the library's
import, the ``prange`` import and the decorator swapped::

    import numpy as np                     import numpy as np
    import numba                           import svod
    from numba import prange               from svod import prange


    @numba.njit(parallel=True)             @svod.jit
    def jacobi2d(a, b, steps):             def jacobi2d(a, b, steps):
        ...                                    ...          (the same lines)

Where svod refuses a program as numba writes it (Floyd-Warshall reads row ``k`` while work item ``k`` writes
it), the program stays as numba writes it (its svod figure is missing, with svod's message as the reason)
and the smallest rewrite svod accepts is a program of its own (``floyd_warshall_rowcopy``), timed the same
way beside numba running the same rewritten text. ``mandelbrot_for`` is Mandelbrot's for/if form, which
runs every turn of every point: the carried locals' cost without an early exit.

Each program returns its answer, checked against numpy's spelling of the same algorithm (per step,
vectorised). Inputs come per size: ``full`` is the issue's (heat 3-D, which the issue does not size, is
PolyBench's LARGE grid with 50 of its 500 steps), ``quick`` is for ``svod bench --quick``, ``small`` for a
test. Importing this module needs neither numba nor a device: a version is made when asked for.
"""

from __future__ import annotations

import dataclasses
import functools
import linecache
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.algorithms import nussinov_numpy

HEADERS = {"numba": ("import numba", "from numba import prange", "@numba.njit(parallel=True)"),
           "svod": ("import svod", "from svod import prange", "@svod.jit")}
"""Per version, the lines that differ: the library's import, prange's import and the decorator."""


@dataclass(frozen=True)
class Program:
    """One program: its source (the function, undecorated), its inputs per size and numpy's answer."""

    name: str
    source: str
    make: Callable[..., tuple[Any, ...]]
    """The arguments for a size (fresh arrays each call)."""
    numpy: Callable[..., Any]
    """numpy's answer from the same arguments (it may work on them in place)."""
    full: tuple[int, ...]
    quick: tuple[int, ...]
    small: tuple[int, ...]
    """A size a test runs in well under a second, plain Python included."""
    size_text: str
    """How a size reads in the report (``str.format`` of the size's numbers)."""
    tolerance: float = 0.0
    """Relative and absolute tolerance of the comparison with numpy's answer; 0 compares exactly."""
    rewrite_of: str | None = None
    """For svod's rewrite of a program it refuses: that program's name."""
    statistic: Callable[[Any], Any] | None = None
    """What of an answer is compared, where not the answer itself: a program that draws random numbers gives
    other numbers under each generator (svod's Philox, numba's and NumPy's Mersenne Twisters), so a statistic
    of its draws is compared, within ``tolerance``."""

    def text(self, version: str) -> str:
        """The program's module text for ``"svod"`` or ``"numba"``."""
        library, prange, decorator = HEADERS[version]
        return f"import numpy as np\n{library}\n{prange}\n\n\n{decorator}\n{self.source}"

    def lines(self, version: str) -> int:
        """The version's non-blank lines (imports, decorator and function)."""
        return sum(1 for line in self.text(version).splitlines() if line.strip())

    def function(self, version: str) -> Any:
        """A fresh ``@svod.jit`` function of the program (nothing compiled yet), or this process's numba
        dispatcher of its text: numba compiles a dispatcher once per argument types, so the bench and the tests
        that run the same text share one compile rather than each taking seconds for it (a first call is timed
        in a fresh process, where nothing is shared)."""
        made = _numba_dispatcher if version == "numba" else _executed
        return made(self.name, self.text(version), version)

    def size(self, scale: str) -> tuple[int, ...]:
        return {"full": self.full, "quick": self.quick, "small": self.small}[scale]

    def describe(self, size: tuple[int, ...]) -> str:
        return self.size_text.format(*size)


def _executed(name: str, text: str, version: str) -> Any:
    """Program ``name``'s ``text`` executed as a module whose source ``inspect`` can read (svod translates from
    the source): its function."""
    filename = f"<jit program {name} ({version})>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    names: dict[str, Any] = {"__name__": f"jit_programs_{name}_{version}"}
    exec(compile(text, filename, "exec"), names)  # the program's own text
    return names[name]


_numba_dispatcher = functools.cache(_executed)


def _program(name: str, source: str, **fields: Any) -> Program:
    return Program(name, textwrap.dedent(source).lstrip("\n"), **fields)


def agree(program: Program, got: Any, want: Any) -> bool:
    """Whether ``got`` (a program's result: an array or a tuple of them) is numpy's ``want`` (their
    ``statistic`` where the program has one)."""
    if program.statistic is not None:
        got, want = program.statistic(got), program.statistic(want)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    if len(got) != len(want):
        return False
    for result, answer in zip(got, want, strict=True):
        actual, expected = np.asarray(result), np.asarray(answer)
        if actual.shape != expected.shape:
            return False
        if program.tolerance == 0:
            if not np.array_equal(actual, expected):
                return False
        elif not np.allclose(actual, expected, rtol=program.tolerance, atol=program.tolerance):
            return False
    return True


def copies(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


# ---- Jacobi 2-D ----------------------------------------------------------------------------------------------

JACOBI2D = """
def jacobi2d(a, b, steps):
    n = a.shape[0]
    for _t in range(steps):
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                b[i, j] = 0.2 * (a[i, j] + a[i, j - 1] + a[i, j + 1] + a[i + 1, j] + a[i - 1, j])
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                a[i, j] = 0.2 * (b[i, j] + b[i, j - 1] + b[i, j + 1] + b[i + 1, j] + b[i - 1, j])
    return a
"""


def jacobi2d_inputs(n: int, steps: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(8)
    return rng.random((n, n)), rng.random((n, n)), steps


def jacobi2d_numpy(a: np.ndarray, b: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])
        a[1:-1, 1:-1] = 0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:] + b[2:, 1:-1] + b[:-2, 1:-1])
    return a


# ---- heat 3-D --------------------------------------------------------------------------------------------------

HEAT3D = """
def heat3d(a, b, steps):
    n = a.shape[0]
    for _t in range(steps):
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                for k in range(1, n - 1):
                    b[i, j, k] = (0.125 * (a[i + 1, j, k] - 2.0 * a[i, j, k] + a[i - 1, j, k])
                                  + 0.125 * (a[i, j + 1, k] - 2.0 * a[i, j, k] + a[i, j - 1, k])
                                  + 0.125 * (a[i, j, k + 1] - 2.0 * a[i, j, k] + a[i, j, k - 1])
                                  + a[i, j, k])
        for i in prange(1, n - 1):
            for j in range(1, n - 1):
                for k in range(1, n - 1):
                    a[i, j, k] = (0.125 * (b[i + 1, j, k] - 2.0 * b[i, j, k] + b[i - 1, j, k])
                                  + 0.125 * (b[i, j + 1, k] - 2.0 * b[i, j, k] + b[i, j - 1, k])
                                  + 0.125 * (b[i, j, k + 1] - 2.0 * b[i, j, k] + b[i, j, k - 1])
                                  + b[i, j, k])
    return a
"""


def heat3d_inputs(n: int, steps: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(11)
    a = rng.random((n, n, n))
    return a, a.copy(), steps


def _heat_step(dst: np.ndarray, src: np.ndarray) -> None:
    c = src[1:-1, 1:-1, 1:-1]
    dst[1:-1, 1:-1, 1:-1] = (0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * c + src[:-2, 1:-1, 1:-1])
                             + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * c + src[1:-1, :-2, 1:-1])
                             + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * c + src[1:-1, 1:-1, :-2])
                             + c)


def heat3d_numpy(a: np.ndarray, b: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        _heat_step(b, a)
        _heat_step(a, b)
    return a


# ---- Floyd-Warshall --------------------------------------------------------------------------------------------

FLOYD_WARSHALL = """
def floyd_warshall(d):
    n = d.shape[0]
    for k in range(n):
        for i in prange(n):
            through = d[i, k]
            for j in range(n):
                d[i, j] = min(d[i, j], through + d[k, j])
    return d
"""

FLOYD_WARSHALL_ROWCOPY = """
def floyd_warshall_rowcopy(d):
    n = d.shape[0]
    row = np.empty(n, d.dtype)
    column = np.empty(n, d.dtype)
    for k in range(n):
        for j in prange(n):
            row[j] = d[k, j]
            column[j] = d[j, k]
        for i in prange(n):
            for j in range(n):
                d[i, j] = min(d[i, j], column[i] + row[j])
    return d
"""
"""Work item ``k`` of numba's loop writes row ``k`` while the others read it (harmless there: a pivot's own
row does not change when the diagonal is 0), which svod's race check refuses. Here row and column ``k`` are
copied first, so a work item reads only its own elements and the copies."""


def floyd_warshall_inputs(n: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(7)
    dist = rng.uniform(1, 100, (n, n))
    dist[rng.random((n, n)) < 0.5] = 1e9
    np.fill_diagonal(dist, 0)
    return (dist,)


def floyd_warshall_numpy(d: np.ndarray) -> np.ndarray:
    for k in range(d.shape[0]):
        np.minimum(d, d[:, k:k + 1] + d[k:k + 1, :], out=d)
    return d


# ---- a nussinov sweep (anti-diagonals) ---------------------------------------------------------------------

NUSSINOV = """
def nussinov(seq, table):
    n = seq.shape[0]
    for d in range(1, n):
        for i in prange(n - d):
            j = i + d
            best = max(table[i, j - 1], table[i + 1, j])
            pair = 1 if d > 1 and seq[i] + seq[j] == 3 else 0
            best = max(best, table[i + 1, j - 1] + pair)
            for k in range(i + 1, j):
                best = max(best, table[i, k] + table[k + 1, j])
            table[i, j] = best
    return table
"""

def nussinov_inputs(n: int) -> tuple[Any, ...]:
    seq = np.random.default_rng(9).integers(0, 4, n).astype(np.int32)
    return seq, np.zeros((n, n), np.int32)


# ---- gemver ----------------------------------------------------------------------------------------------

GEMVER = """
def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    n = A.shape[0]
    for i in prange(n):
        for j in range(n):
            A[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    for i in prange(n):
        for j in range(n):
            x[i] = x[i] + beta * A[j, i] * y[j]
    for i in prange(n):
        x[i] = x[i] + z[i]
    for i in prange(n):
        for j in range(n):
            w[i] = w[i] + alpha * A[i, j] * x[j]
    return x, w
"""


def gemver_inputs(n: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(12)
    return (1.5, 1.2, rng.random((n, n)), *(rng.random(n) for _ in range(8)))


def gemver_numpy(alpha: float, beta: float, a: np.ndarray, u1: np.ndarray, v1: np.ndarray, u2: np.ndarray,
                 v2: np.ndarray, w: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> Any:
    a += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * (a.T @ y)
    x += z
    w += alpha * (a @ x)
    return x, w


# ---- Mandelbrot ------------------------------------------------------------------------------------------

MANDELBROT = """
def mandelbrot(out, max_iter):
    h = out.shape[0]
    w = out.shape[1]
    for y in prange(h):
        for x in range(w):
            cr = -2.0 + 3.0 * x / w
            ci = -1.5 + 3.0 * y / h
            zr = 0.0
            zi = 0.0
            k = 0
            while k < max_iter and zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                k += 1
            out[y, x] = k
    return out
"""

MANDELBROT_FOR = """
def mandelbrot_for(out, max_iter):
    h = out.shape[0]
    w = out.shape[1]
    for y in prange(h):
        for x in range(w):
            cr = -2.0 + 3.0 * x / w
            ci = -1.5 + 3.0 * y / h
            zr = 0.0
            zi = 0.0
            k = 0
            for _ in range(max_iter):
                if zr * zr + zi * zi <= 4.0:
                    zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                    k += 1
            out[y, x] = k
    return out
"""
"""The escape test as an ``if`` in a counted loop, which runs every one of the ``max_iter`` turns of every
point (the form users wrote before ``while``; its locals are carried from turn to turn)."""


def mandelbrot_inputs(h: int, w: int, max_iter: int) -> tuple[Any, ...]:
    return np.zeros((h, w), np.int64), max_iter


def mandelbrot_numpy(out: np.ndarray, max_iter: int) -> np.ndarray:
    h, w = out.shape
    cr = np.broadcast_to(-2.0 + 3.0 * np.arange(w) / w, (h, w))
    ci = np.broadcast_to((-1.5 + 3.0 * np.arange(h) / h)[:, None], (h, w))
    zr, zi = np.zeros((h, w)), np.zeros((h, w))
    count = np.zeros((h, w), np.int64)
    for _ in range(max_iter):
        inside = zr * zr + zi * zi <= 4.0
        zr, zi = np.where(inside, zr * zr - zi * zi + cr, zr), np.where(inside, 2.0 * zr * zi + ci, zi)
        count += inside
    out[...] = count
    return out


# ---- k-means ------------------------------------------------------------------------------------------------

KMEANS = """
def kmeans(points, centroids, labels, out):
    n = points.shape[0]
    dims = points.shape[1]
    clusters = centroids.shape[0]
    for i in prange(n):
        best = 0
        best_dist = np.inf
        for c in range(clusters):
            dist = 0.0
            for t in range(dims):
                diff = points[i, t] - centroids[c, t]
                dist += diff * diff
            if dist < best_dist:
                best_dist = dist
                best = c
        labels[i] = best
    for c in range(clusters):
        count = 0
        for i in prange(n):
            if labels[i] == c:
                count += 1
        for t in range(dims):
            total = 0.0
            for i in prange(n):
                if labels[i] == c:
                    total += points[i, t]
            out[c, t] = total / count if count > 0 else centroids[c, t]
    return labels, out
"""
"""One Lloyd iteration: each point's nearest centroid (an argmin over the clusters), then each centroid the
mean of its points (parallel reductions, a count and a sum per dimension; an empty cluster keeps its
centroid)."""


def kmeans_inputs(n: int, dims: int, clusters: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(13)
    points = rng.random((n, dims))
    centroids = rng.random((clusters, dims))
    return points, centroids, np.zeros(n, np.int64), np.zeros((clusters, dims))


def kmeans_numpy(points: np.ndarray, centroids: np.ndarray, labels: np.ndarray, out: np.ndarray) -> Any:
    clusters, dims = centroids.shape
    if points.shape[0]:
        diff = points[:, None, :] - centroids[None, :, :]
        labels[...] = np.argmin((diff * diff).sum(axis=2), axis=1)
    counts = np.bincount(labels, minlength=clusters)
    for t in range(dims):
        sums = np.bincount(labels, weights=points[:, t], minlength=clusters)
        out[:, t] = np.where(counts > 0, sums / np.maximum(counts, 1), centroids[:, t])
    return labels, out


# ---- the programs ----------------------------------------------------------------------------------------------

def _rewrite(original: Program, name: str, source: str) -> Program:
    """svod's rewrite of ``original``: the same inputs, sizes and answer."""
    return dataclasses.replace(original, name=name, source=textwrap.dedent(source).lstrip("\n"),
                               rewrite_of=original.name)


_FLOYD_WARSHALL = _program("floyd_warshall", FLOYD_WARSHALL, make=floyd_warshall_inputs, numpy=floyd_warshall_numpy,
                           full=(500,), quick=(150,), small=(7,), size_text="N={0}")
_NUSSINOV = _program("nussinov", NUSSINOV, make=nussinov_inputs, numpy=lambda seq, table: nussinov_numpy(seq),
                     full=(500,), quick=(150,), small=(7,), size_text="N={0}")
_MANDELBROT = _program("mandelbrot", MANDELBROT, make=mandelbrot_inputs, numpy=mandelbrot_numpy,
                       full=(1000, 1000, 100), quick=(200, 200, 50), small=(5, 7, 20),
                       size_text="{0}x{1}, {2} iterations")

PROGRAMS = [
    _program("jacobi2d", JACOBI2D, make=jacobi2d_inputs, numpy=jacobi2d_numpy, full=(1000, 100), quick=(300, 20),
             small=(7, 3), size_text="{0}x{0}, {1} steps", tolerance=1e-12),
    _program("heat3d", HEAT3D, make=heat3d_inputs, numpy=heat3d_numpy, full=(120, 50), quick=(40, 10), small=(5, 2),
             size_text="{0}^3, {1} steps", tolerance=1e-12),
    _FLOYD_WARSHALL,
    _rewrite(_FLOYD_WARSHALL, "floyd_warshall_rowcopy", FLOYD_WARSHALL_ROWCOPY),
    _NUSSINOV,
    _program("gemver", GEMVER, make=gemver_inputs, numpy=gemver_numpy, full=(2000,), quick=(500,), small=(7,),
             size_text="N={0}", tolerance=1e-9),
    _MANDELBROT,
    dataclasses.replace(_rewrite(_MANDELBROT, "mandelbrot_for", MANDELBROT_FOR), rewrite_of=None),
    _program("kmeans", KMEANS, make=kmeans_inputs, numpy=kmeans_numpy, full=(1_000_000, 3, 8), quick=(100_000, 3, 8),
             small=(13, 3, 4), size_text="{0} points, {1} dims, {2} clusters", tolerance=1e-9),
]
"""The issue's programs as numba writes them, each followed by svod's rewrite where svod refuses it."""


# ---- NumPy array programs ----------------------------------------------------------------------------------

JACOBI_SLICES = """
def jacobi_slices(a, b, steps):
    for _ in range(steps):
        b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])
        a[1:-1, 1:-1] = 0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:] + b[2:, 1:-1] + b[:-2, 1:-1])
    return a
"""

GEMVER_NUMPY = """
def gemver_numpy(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    A += np.outer(u1, v1) + np.outer(u2, v2)
    x += beta * y @ A + z
    w += alpha * A @ x
    return A, x, w
"""

K2MM = """
def k2mm(alpha, beta, A, B, C, D):
    tmp = alpha * A @ B
    D[:] = tmp @ C + beta * D
    return D
"""

SOFTMAX = """
def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
"""

LAYERNORM = """
def layernorm(x, gamma, beta):
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=1, keepdims=True)
    return centred / np.sqrt(var + 1e-5) * gamma + beta
"""

MLP = """
def mlp(x, w1, w2, w3):
    h = np.maximum(x @ w1, 0.0)
    h2 = np.maximum(h @ w2, 0.0)
    return h2 @ w3
"""


def _random(seed: int, *shapes: tuple[int, ...], dtype: Any = np.float64) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.random(shape).astype(dtype) for shape in shapes)


def array_program(name: str, source: str, make: Callable[..., tuple[Any, ...]], **fields: Any) -> Program:
    """A program of NumPy array code: numpy's answer is the function itself, run as plain Python."""
    text = textwrap.dedent(source).lstrip("\n")
    names: dict[str, Any] = {"np": np}
    exec(compile(text, f"<array program {name} (numpy)>", "exec"), names)  # the program's own text
    return Program(name, text, make=make, numpy=names[name], **fields)


ARRAY_PROGRAMS = [
    array_program("jacobi_slices", JACOBI_SLICES, lambda n, steps: (*_random(1, (n, n)), np.zeros((n, n)), steps),
                   full=(1000, 100), quick=(300, 20), small=(7, 3), size_text="{0}x{0}, {1} steps", tolerance=1e-12),
    array_program("gemver_numpy", GEMVER_NUMPY, lambda n: (1.5, 1.2, *_random(2, (n, n), *[(n,)] * 8)),
                   full=(2000,), quick=(500,), small=(7,), size_text="N={0}", tolerance=1e-9),
    array_program("k2mm", K2MM, lambda i, j, k, m: (1.5, 1.2, *_random(3, (i, k), (k, j), (j, m), (i, m))),
                   full=(800, 900, 1100, 1200), quick=(200, 220, 240, 260), small=(5, 6, 7, 8),
                   size_text="{0}x{1}x{2}x{3}", tolerance=1e-9),
    array_program("softmax", SOFTMAX, lambda r, c: _random(4, (r, c), dtype=np.float32),
                   full=(4096, 1024), quick=(1024, 512), small=(5, 17), size_text="{0}x{1} float32", tolerance=1e-5),
    array_program("layernorm", LAYERNORM,
                   lambda r, c: _random(5, (r, c), (c,), (c,), dtype=np.float32),
                   full=(4096, 1024), quick=(1024, 512), small=(5, 17), size_text="{0}x{1} float32", tolerance=1e-4),
    array_program("mlp", MLP, lambda b, i, h, o: _random(6, (b, i), (i, h), (h, h), (h, o), dtype=np.float32),
                   full=(1024, 784, 512, 10), quick=(256, 256, 128, 10), small=(5, 8, 16, 3),
                   size_text="batch {0}, {1}-{2}-{2}-{3} float32", tolerance=1e-3),
]
"""NumPy code as numba users write it inside ``@njit``, under ``@svod.jit`` (``array.<name>_ms``)."""
