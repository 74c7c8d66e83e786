"""Arrays a loop rebinds at each turn to their elements where a mask holds (``svod.frontend.shrinking``): the
escape-time loop NumPy users compact (npbench's ``mandelbrot2``), against the same function run as plain Python
on every device: no points, one, primes; every point escaping at the first turn, none escaping, the loop left by
``break`` once nothing is left; every other use of such an array refused at its line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import GraphError, KernelSyntaxError
from svod.frontend import shrinking
from svod.frontend.oracle import as_python
from tests.frontend.test_jit import agrees_with_python


@svod.jit
def escape(cr, ci, turns):
    """An escape-time loop compacting the points still running, its parts as separate real arrays."""
    n = np.zeros(cr.shape, np.int32)
    where = np.arange(cr.shape[0], dtype=np.int32)
    zr = np.zeros_like(cr)
    zi = np.zeros_like(cr)
    for i in range(turns):
        t = zr * zr - zi * zi + cr
        zi[:] = 2.0 * zr * zi + ci
        zr[:] = t
        out = zr * zr + zi * zi > 4.0
        for j in range(out.shape[0]):
            if out[j]:
                n[where[j]] = i + 1
        keep = ~out
        zr = zr[keep]
        zi, cr, ci, where = zi[keep], cr[keep], ci[keep], where[keep]
    return n


@svod.jit
def mandelbrot(xn, yn, itermax, horizon, left):
    """npbench's ``mandelbrot2`` (numba's version) as written there, but for the bounds of the plane: complex
    arrays, ufuncs into their ``out``, scatters through index arrays, ``break`` once no point is left."""
    Xi = np.empty((xn, yn), dtype=np.int64)
    Yi = np.empty((xn, yn), dtype=np.int64)
    for p in range(xn):  # (npbench's mgrid and linspace, functions of their own there)
        Xi[p, :] = p
    for q in range(yn):
        Yi[:, q] = q
    X = np.empty((xn,), dtype=np.float64)
    Y = np.empty((yn,), dtype=np.float64)
    for r in range(xn):
        X[r] = left + r * (0.5 - left) / max(xn - 1, 1)
    for s in range(yn):
        Y[s] = -1.25 + s * 2.5 / max(yn - 1, 1)
    C = np.reshape(X, (xn, 1)) + Y * 1j
    N_ = np.zeros(C.shape, dtype=np.int64)
    Z_ = np.zeros(C.shape, dtype=np.complex128)
    Xi = np.reshape(Xi, (xn * yn))
    Yi = np.reshape(Yi, (xn * yn))
    C = np.reshape(C, (xn * yn))
    Z = np.zeros(C.shape, np.complex128)
    for i in range(itermax):
        if not len(Z):
            break
        np.multiply(Z, Z, Z)
        np.add(Z, C, Z)
        I = np.absolute(Z) > horizon  # noqa: E741 (npbench's name)
        for j in range(I.shape[0]):
            if I[j]:
                N_[Xi[j], Yi[j]] = i + 1
        for j in range(I.shape[0]):
            if I[j]:
                Z_[Xi[j], Yi[j]] = Z[j]
        np.logical_not(I, I)
        Z = Z[I]
        Xi, Yi = Xi[I], Yi[I]
        C = C[I]
    return Z_.T, N_.T


@svod.jit
def halving(x, turns, limit):
    """How many elements are left at each turn, and their sum, where each turn halves them and drops those that
    were past ``limit``: ``len(y)`` and a reduction of an array of a length the run carries."""
    left = np.zeros(turns, np.int32)
    sums = np.zeros(turns, x.dtype)
    y = x * 1.0
    for t in range(turns):
        left[t] = len(y)
        sums[t] = y.sum()
        small = np.abs(y) <= limit
        y[:] = y * 0.5
        y = y[small]
    return left, sums


@svod.jit
def mask_read_once(x, turns):
    """A mask computed from the arrays the compactions shorten, one compaction a statement: each shortened by
    the mask as it stood before the first of them."""
    y = x * 1.0
    w = x * 2.0
    total = np.zeros(turns, x.dtype)
    for t in range(turns):
        keep = y + w < 9.0
        y = y[keep]
        w = w[keep]
        y[:] = y + 1.0
        total[t] = w.sum()
    return total


def refused_there(device: Device, fn: svod.frontend.jit.Jit, *args: object) -> bool:
    """Whether ``device`` cannot hold a bool array (a mask: WebGPU's cannot), and then refuses ``fn``, saying so."""
    if svod.dtypes.bool in device.caps.element_dtypes:
        return False
    with pytest.raises(GraphError, match=r"cannot hold (bool|int64|float64)"):
        fn(*args, device=device)
    return True


def plane(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of the plane: some escaping at once, some after a few turns, some never."""
    return np.linspace(-2.5, 0.75, n), np.where(np.arange(n) % 3 == 0, 0.0, np.linspace(-1.25, 1.25, n))


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13, 64])
def test_the_escape_loop_compacting_its_points_computes_what_python_computes(device, n):
    cr, ci = plane(n)
    if refused_there(device, escape, cr, ci, 20):
        return
    agrees_with_python(escape, device, cr, ci, 20)
    agrees_with_python(escape, device, cr, ci, 1)  # (one turn: the compactions run, nothing reads them after)
    agrees_with_python(escape, device, cr, ci, 0)  # (no turn at all)


def test_every_point_escaping_at_once_and_none_escaping(device):
    if refused_there(device, escape, np.zeros(3), np.zeros(3), 9):
        return
    for cr in (np.full(11, 3.0), np.full(11, -3.0), np.zeros(11), np.full(1, 0.25), np.full(1, 5.0)):
        agrees_with_python(escape, device, cr, np.zeros_like(cr), 9)
    cr, ci = plane(13)
    agrees_with_python(escape, device, np.where(np.arange(13) % 2 == 0, 9.0, cr), ci, 9)  # every other at once


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (7, 5), (13, 17)])
def test_npbench_mandelbrot2_as_numba_users_write_it(device, size):
    if refused_there(device, mandelbrot, *size, 12, 2.0, -2.0):
        return
    for left in (-2.0, 5.0, -0.1):  # some escape; all at the first turn (then the loop breaks); none escape
        agrees_with_python(mandelbrot, device, *size, 12, 2.0, left)


@pytest.mark.parametrize("n", [0, 1, 5, 31])
def test_a_length_and_a_sum_read_at_each_turn(device, n):
    x = np.linspace(-40.0, 40.0, n)
    if n > 2:
        x[1], x[2] = -0.0, np.inf
    if refused_there(device, halving, x, 6, 10.0):
        return
    agrees_with_python(halving, device, x, 6, 10.0)
    agrees_with_python(halving, device, x, 3, 100.0)  # (none dropped)
    agrees_with_python(halving, device, x, 3, -1.0)  # (all dropped at the first turn)


@pytest.mark.parametrize("n", [0, 1, 9])
def test_a_mask_read_only_by_the_compactions(device, n):
    x = np.linspace(-3.0, 5.0, n)
    if not refused_there(device, mask_read_once, x, 5):
        agrees_with_python(mask_read_once, device, x, 5)


def test_the_loop_breaks_once_nothing_is_left():
    """Every point escapes (at the first turn where ``left`` is alone): the turns after it see ``len(Z) == 0``
    and break, which an ``itermax`` too large to run through (in a test's time) shows."""
    for xn, escaped in ((3, None), (1, 1)):
        got = mandelbrot(xn, 4, 1 << 28, 2.0, 5.0)
        want = as_python(mandelbrot)(xn, 4, 1 << 28, 2.0, 5.0)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
        assert (want[1] > 0).all() and (escaped is None or (want[1] == escaped).all())



@svod.jit
def kept_in_blocks(x, tags, turns, limit):
    """Each turn records what is left of a float, an int and a complex array, then keeps the elements within
    ``limit`` (a NaN is: ``abs(NaN) > limit`` is false) and doubles the floats: run with the group compacted in
    blocks."""
    floats = np.zeros((turns, x.shape[0]), x.dtype)
    ints = np.zeros((turns, x.shape[0]), tags.dtype)
    pairs = np.zeros((turns, x.shape[0]), np.complex128)
    left = np.zeros(turns, np.int64)
    y = x * 1.0
    v = tags + 0
    w = x * (1.0 - 2.0j)
    for t in range(turns):
        left[t] = len(y)
        for j in range(len(y)):
            floats[t, j] = y[j]
            ints[t, j] = v[j]
            pairs[t, j] = w[j]
        keep = ~(np.abs(y) > limit)
        y, v = y[keep], v[keep]
        w = w[keep]
        y[:] = y * 2.0
    return left, floats, ints, pairs


def blocked_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` floats that leave at different turns (alternating near and far, then growing), with -0.0, ±inf and
    NaNs among them, and int64 tags at its extremes."""
    x = np.where(np.arange(n) % 2 == 0, np.linspace(0.0, 3.0, n), np.linspace(40.0, 90.0, n))
    tags = np.arange(n, dtype=np.int64) * 1_000_003
    for at, value in ((1, np.nan), (2, -0.0), (4, np.inf), (5, -np.inf), (n - 1, np.nan)):
        if 0 <= at < n:
            x[at] = value
    for at, value in ((0, np.iinfo(np.int64).max), (n - 1, np.iinfo(np.int64).min)):
        if 0 <= at < n:
            tags[at] = value
    return x, tags


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13, 64, 97])
@pytest.mark.parametrize("blocks", [3, 4])
def test_a_group_compacted_in_blocks_keeps_pythons_order(device, n, blocks, monkeypatch):
    """The group moved through a second array in blocks (``Shrinking.moved_in_blocks``), here at every size, in
    3 or 4 blocks (a count dividing none of the lengths but 0 and 64): all kept, none kept, every other one
    leaving, then more each turn as they double."""
    monkeypatch.setattr(shrinking, "SHRINK_BLOCKED_FROM", 0)
    monkeypatch.setattr(shrinking, "SHRINK_BLOCKS", blocks)
    x, tags = blocked_data(n)
    if refused_there(device, kept_in_blocks, x, tags, 6, 50.0):
        return
    for limit in (50.0, np.inf, -1.0):
        agrees_with_python(kept_in_blocks, device, x, tags, 6, limit)
    got = kept_in_blocks(x, tags, 6, 50.0, device=device)
    if n > 6:  # (the data shrinks, keeping its NaNs and its extremes in order)
        left = int(got[0][1])
        assert got[0][0] == n and 3 <= left < n and got[0][5] <= left and np.isnan(got[1][1, 1])
        assert got[2][1, 0] == np.iinfo(np.int64).max and got[2][1, left - 1] == np.iinfo(np.int64).min


def test_a_group_of_many_points_is_compacted_in_blocks(device):
    """npbench's ``mandelbrot2`` over more points than ``SHRINK_BLOCKED_FROM``, in its blocks as they are."""
    assert shrinking.SHRINK_BLOCKED_FROM <= 64 * 67
    if not refused_there(device, mandelbrot, 64, 67, 12, 2.0, -2.0):
        agrees_with_python(mandelbrot, device, 64, 67, 12, 2.0, -2.0)


# ---- what is refused ----------------------------------------------------------------------------------------

@svod.jit
def read_after(x, turns):
    y = x * 1.0
    for _ in range(turns):
        keep = y < 4.0
        y = y[keep]
    return y.sum()  # refused: read after the loop


@svod.jit
def element_at_a_constant(x, out, turns):
    y = x * 1.0
    for t in range(turns):
        keep = y < 4.0
        out[t] = y[0]  # refused: not at a loop's variable over its length
        y = y[keep]


@svod.jit
def iterated(x, out, turns):
    y = x * 1.0
    for t in range(turns):
        keep = y < 4.0
        for v in y:  # refused: iterating it
            out[t] += v
        y = y[keep]


@svod.jit
def made_before_read_after(x, out, turns):
    y = x * 1.0
    for t in range(turns):
        keep = y < 4.0
        y = y[keep]
        out[t] = keep.sum()  # refused: keep is of the length before y = y[keep]


@svod.jit
def apart(x, z, out, turns):
    y = x * 1.0
    w = z * 1.0
    for t in range(turns):
        keep = y < 4.0
        y = y[keep]
        out[t] = 1.0
        w = w[keep]  # refused: not with the first


@svod.jit
def in_a_branch(x, turns):
    y = x * 1.0
    if turns > 2:
        for _ in range(turns):
            keep = y < 4.0
            y = y[keep]  # refused: the loop is in an if
    return x


@svod.jit
def two_dimensional(x, turns):
    y = x * 1.0
    for _ in range(turns):
        keep = y < 4.0
        y = y[keep]  # refused: a 2-D array
    return x


@svod.jit
def shared(x, turns):
    y = x * 1.0
    z = y
    out = np.zeros(turns)
    for t in range(turns):
        keep = y < 3.0
        y = y[keep]  # refused: z keeps the array y held, unshortened, in Python
        y[:] = y + 1.0
        out[t] = y.sum() + z.sum()
    return out


@svod.jit
def viewed(x, turns):
    y = x * 1.0
    v = y[1:]
    out = np.zeros(turns)
    for t in range(turns):
        v[0] = 100.0 + t  # (y's element in Python at the first turn)
        keep = y < 300.0
        y = y[keep]  # refused: v views the array y holds before it
        out[t] = y.sum()
    return out


@svod.jit
def the_callers(x, turns):
    out = np.zeros(turns)
    for t in range(turns):
        x[:] = x + 1.0  # (the caller's array in Python at the first turn)
        keep = x < 4.0
        x = x[keep]  # refused: x is an argument
        out[t] = x.sum()
    return out


@pytest.mark.parametrize(("fn", "args", "where", "says"), [
    (read_after, (np.arange(5.0), 3), "return y.sum()", r"shortened at each turn of the loop at line \d+ "
                                                        r"\(by `keep`\), and svod reads it only inside the loop"),
    (element_at_a_constant, (np.arange(5.0), np.zeros(3), 3), "out[t] = y[0]",
     r"length changes each turn of the loop around it: svod reads its elements as x\[j\] in a loop `for j in "
     r"range\(len\(x\)\)`, not at `0`"),
    (iterated, (np.arange(5.0), np.zeros(3), 3), "for v in y", r"iterating \w+, whose length changes each turn"),
    (made_before_read_after, (np.arange(5.0), np.zeros(3), 3), "out[t] = keep.sum()",
     r"keep: it was made at the length the arrays had before line \d+ shortened them"),
    (apart, (np.arange(5.0), np.arange(5.0), np.zeros(3), 3), "w = w[keep]",
     r"keep: it was made at the length the arrays had before line \d+ shortened them"),
    (in_a_branch, (np.arange(5.0), 3), "y = y[keep]", r"y shrink at each turn of this loop: svod shrinks the arrays "
                                                      r"of a loop that stands in the function's own statements"),
    (two_dimensional, (np.ones((2, 3)), 3), "y = y[keep]", r"1-D arrays of one length the host knows"),
    (shared, (np.arange(5.0), 3), "y = y[keep]", r"y shrinks at each turn of this loop, and another name holds or "
                                                r"views its array"),
    (viewed, (np.arange(5.0), 3), "y = y[keep]", r"y shrinks at each turn of this loop, and another name holds or "
                                                r"views its array"),
    (the_callers, (np.arange(5.0), 3), "x = x[keep]", r"x is an argument this loop writes into and shrinks"),
])
def test_every_other_use_is_refused_at_its_line(fn, args, where, says):
    lines, first = inspect.getsourcelines(fn.fn)
    line = first + next(k for k, text in enumerate(lines) if where in text)
    with pytest.raises(KernelSyntaxError, match=rf"test_shrinking.py:{line}: .*{says}"):
        fn(*args)
