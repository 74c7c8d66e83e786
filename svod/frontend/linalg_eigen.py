"""``np.linalg.eigh`` and ``eigvalsh`` of a symmetric matrix as plan steps: the cyclic Jacobi method, its
rotations ordered as a round-robin tournament so that each round's are of disjoint pairs of rows and columns,
and so computed at once by a few Python kernels of the plan.

::

    a ──lower triangle, mirrored──▶ s, v = I ──┐ plan loop over sweeps, until ``done``:
                                               │   plan loop over the rounds t of a sweep (N - 1 of them, N
                                               │   the order rounded up to even), each index x paired with
                                               │   ``partner(x)``: N - 1 where x = t, else (2t - x) mod (N - 1)
                                               │     rotation   a work item per index: the Jacobi rotation of
                                               │                its pair (both of a pair compute the same one)
                                               │     rows       s' = J^T s, a work item per row of s'
                                               │     columns    s = s' J (the pair's element set to 0), and
                                               │     vectors    v = v J (into a second buffer, copied back)
                                               │   settled    one work item: ``done`` where every element off
                                               ▼              the diagonal is 0, or one is not finite
    s (the eigenvalues on its diagonal), v ── rank, order: each eigenvalue's place, ascending (NaN last, ties
                                              in the order of the diagonal) ── w = the diagonal in that order,
                                              and (``eigh``) its eigenvectors, v's columns in that order

Each work item writes its own element (the rows and columns of a round read ``s`` and write a second buffer),
so that svod proves every step free of races. A rotation is skipped (the pair's element set to 0) where that
element is negligible beside both diagonal elements, as in the classic Jacobi codes, so that a sweep that
rotates nothing leaves the off-diagonal part exactly 0. The eigenvalues are ascending, as LAPACK's (what
NumPy calls) are; an eigenvector's sign is a choice (LAPACK's differ between its versions): svod makes the
element of largest magnitude of each (the first such) positive. Where the matrix holds a NaN or an infinity the
sweeps stop and the results are what the arithmetic gave (NaN), as NumPy's are; ``failed`` records a matrix
whose sweeps did not settle (``LinAlgError``: NumPy's "Eigenvalues did not converge").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from svod.frontend.linalg import COLUMN_VARIABLE, Factoring, float32, kernel_of
from svod.frontend.pylang import Const, func, inf, prange

SWEEP_VARIABLE = "_svod_sweep"
"""The plan loop variable that numbers the sweeps."""
SWEEPS = 60
"""The most sweeps a matrix takes before its factorisation fails (the Jacobi method converges quadratically:
a dozen suffice for any matrix of finite elements)."""


@func
def partner(x, k, last):  # type: ignore[no-untyped-def]
    """Index ``x``'s partner in round ``k`` of a tournament of ``last + 1`` indices (``last`` odd): ``last`` for
    ``k``'s, ``k`` for ``last``'s, else the one whose sum with ``x`` is ``2k`` modulo ``last``."""
    y = last if x == k else (2 * k - x + last) % last
    if x == last:
        y = k
    return y


def _start(s, v, done, a):  # type: ignore[no-untyped-def]
    """``s``: ``a``'s lower triangle mirrored (what LAPACK's syevd reads of it), ``v`` the identity."""
    done[0] = 0
    for i in prange(s.shape[0]):
        for j in range(s.shape[1]):
            s[i, j] = a[i, j] if j <= i else a[j, i]
            v[i, j] = 1 if i == j else 0


def _rotation(rotations, s, _svod_k, last, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """The rotation of index ``x``'s pair (p, q) in round ``k``: ``rotations[x]`` = (c, s, the new diagonal
    element of x). Identity where the partner is the padding index, or the pair's element is 0 or negligible
    beside both diagonal elements (``a_pq`` set to 0 by the columns step all the same)."""
    n = s.shape[0]
    for x in prange(n):
        y = partner(x, _svod_k, last)
        p = min(x, y)
        q = max(x, y)
        c = float32(1) if narrow else 1.0
        sine = float32(0) if narrow else 0.0
        diagonal = s[x, x]
        if q < n:
            app = s[p, p]
            aqq = s[q, q]
            apq = s[p, q]
            negligible = abs(app) + 100 * abs(apq) == abs(app) and abs(aqq) + 100 * abs(apq) == abs(aqq)
            if apq != 0 and not negligible:
                theta = (aqq - app) / (2 * apq)
                size = abs(theta)
                if size > 1:
                    t = 1 / (size * (1 + math.sqrt(1 + (1 / theta) * (1 / theta))))
                else:
                    t = 1 / (size + math.sqrt(1 + theta * theta))
                if theta < 0:
                    t = -t
                c = 1 / math.sqrt(1 + t * t)
                sine = t * c
                diagonal = app - t * apq if x == p else aqq + t * apq
        rotations[x, 0] = c
        rotations[x, 1] = sine
        rotations[x, 2] = diagonal


def _rows(out, s, rotations, _svod_k, last):  # type: ignore[no-untyped-def]
    """``out`` = J^T ``s``, a work item per row: row p of a pair becomes c row_p - s row_q, row q
    s row_p + c row_q."""
    n = s.shape[0]
    for x in prange(n):
        y = partner(x, _svod_k, last)
        c = rotations[x, 0]
        sine = rotations[x, 1]
        for j in range(n):
            if y >= n:
                out[x, j] = s[x, j]
            elif x < y:
                out[x, j] = c * s[x, j] - sine * s[y, j]
            else:
                out[x, j] = sine * s[y, j] + c * s[x, j]


def _columns(s, rows, rotations, _svod_k, last):  # type: ignore[no-untyped-def]
    """``s`` = ``rows`` J, a work item per column; a pair's element 0 and its diagonal elements the
    rotation's."""
    n = s.shape[0]
    for x in prange(n):
        y = partner(x, _svod_k, last)
        c = rotations[x, 0]
        sine = rotations[x, 1]
        for i in range(n):
            if y >= n:
                s[i, x] = rows[i, x]
            elif i == y:
                s[i, x] = 0
            elif i == x:
                s[i, x] = rotations[x, 2]
            elif x < y:
                s[i, x] = c * rows[i, x] - sine * rows[i, y]
            else:
                s[i, x] = sine * rows[i, y] + c * rows[i, x]


def _vectors(out, v, rotations, _svod_k, last):  # type: ignore[no-untyped-def]
    """``out`` = ``v`` J, a work item per column: the eigenvectors so far (and the columns of a one-sided
    Jacobi SVD, ``svod.frontend.linalg_svd``, which has as many rows or more)."""
    n = v.shape[1]
    for x in prange(n):
        y = partner(x, _svod_k, last)
        c = rotations[x, 0]
        sine = rotations[x, 1]
        for i in range(v.shape[0]):
            if y >= n:
                out[i, x] = v[i, x]
            elif x < y:
                out[i, x] = c * v[i, x] - sine * v[i, y]
            else:
                out[i, x] = sine * v[i, y] + c * v[i, x]


def _settled(done, s):  # type: ignore[no-untyped-def]
    """``done`` where every element off the diagonal is 0, or an element is NaN or infinite (whose rotations
    give NaN however many sweeps run)."""
    n = s.shape[0]
    moving = 0
    broken = 0
    for i in range(n):
        for j in range(n):
            if i != j and s[i, j] != 0:
                moving = 1
            if math.isnan(s[i, j]) or abs(s[i, j]) == inf:
                broken = 1
    if moving == 0 or broken == 1:
        done[0] = 1


def _verdict(failed, done):  # type: ignore[no-untyped-def]
    if done[0] == 0 and failed[0] == 0:
        failed[0] = 1


def _rank(rank, s):  # type: ignore[no-untyped-def]
    """Each eigenvalue's place, ascending: how many come before it (NaN after numbers, ties in index order)."""
    n = s.shape[0]
    for i in prange(n):
        x = s[i, i]
        count = 0
        for j in range(n):
            y = s[j, j]
            tied = y == x or (math.isnan(x) and math.isnan(y))
            if y < x or (math.isnan(x) and not math.isnan(y)) or (tied and j < i):
                count += 1
        rank[i] = count


def _order(order, rank):  # type: ignore[no-untyped-def]
    """``order[r]``: the index of rank ``r`` (the ranks are a permutation: each is found once)."""
    n = rank.shape[0]
    for r in prange(n):
        found = 0
        for i in range(n):
            if rank[i] == r:
                found = i
        order[r] = found


def _values(w, s, order):  # type: ignore[no-untyped-def]
    for r in prange(w.shape[0]):
        w[r] = s[order[r], order[r]]


@func
def leading(v, column):  # type: ignore[no-untyped-def]
    """The element of largest magnitude (the first such) of ``v``'s column ``column``: its sign is the one
    svod gives an eigenvector or a singular vector (LAPACK's signs are a choice, which its versions differ
    in), so both factorisations sign their vectors by this one rule."""
    largest = abs(v[0, column])
    found = v[0, column]
    for i in range(1, v.shape[0]):
        if abs(v[i, column]) > largest:
            largest = abs(v[i, column])
            found = v[i, column]
    return found


def _sorted_vectors(out, v, order):  # type: ignore[no-untyped-def]
    """``v``'s columns in the order ``order`` gives (the eigenvalues', or the singular values' for
    ``svod.frontend.linalg_svd``), each signed so that its element of largest magnitude is positive
    (``leading``)."""
    for r in prange(v.shape[1]):
        column = order[r]
        sign = leading(v, column)
        for i in range(v.shape[0]):
            out[i, r] = -v[i, column] if sign < 0 else v[i, column]


def sweeping(plan: Any, players: int, rounds: list[int], settled: Callable[[], int], done: int) -> int:
    """The plan loop of the Jacobi sweeps (of ``eigh`` and of ``svd``): each the rounds of a tournament of
    ``players`` (``rounds``, a plan loop over ``COLUMN_VARIABLE``), then the step ``settled`` adds (after that
    loop: a plan loop's body is the steps added last); at most ``SWEEPS`` of them, until ``done``."""
    sweep = [plan.loop(COLUMN_VARIABLE, 0, players - 1, body=rounds)]
    sweep.append(settled())
    return int(plan.loop(SWEEP_VARIABLE, 0, SWEEPS, body=sweep, until=done))


def add_eigh(factoring: Factoring, w: int, v: int | None) -> list[int]:
    """The steps that write the eigenvalues of the symmetric matrix in ``factoring.source`` into plan buffer
    ``w`` (ascending) and, where given, its eigenvectors into the columns of ``v``."""
    n = factoring.n
    if n == 0:
        return []
    plan, dtype, narrow = factoring.plan, factoring.dtype, factoring.dtype == np.float32
    players = n + n % 2
    square = (n, n)
    s, rows, vectors, moved = (factoring.scratch(dtype, n * n) for _ in range(4))
    rotations, done = factoring.scratch(dtype, 3 * n), factoring.scratch(np.dtype(np.int32), 1)

    def add(name: str, shapes: list[tuple[int, ...]], slots: list[int], **scalars: Any) -> int:
        kernel = kernel_of(globals()[f"_{name}"], f"linalg_eigh_{name}", players - 2)
        return plan.add_kernel(kernel.shaped(*shapes), slots, **scalars)

    steps = [add("start", [square, square, (1,), square], [s, vectors, done, factoring.source])]
    turn = {"_svod_k": COLUMN_VARIABLE, "last": players - 1}
    round_steps = [add("rotation", [(n, 3), square], [rotations, s], **turn, narrow=narrow),
                   add("rows", [square, square, (n, 3)], [rows, s, rotations], **turn),
                   add("columns", [square, square, (n, 3)], [s, rows, rotations], **turn)]
    if v is not None:
        round_steps += [add("vectors", [square, square, (n, 3)], [moved, vectors, rotations], **turn),
                        plan.add_copy(vectors, moved)]
    steps.append(sweeping(plan, players, round_steps, lambda: add("settled", [(1,), square], [done, s]), done))
    steps.append(add("verdict", [(1,), (1,)], [factoring.failed, done]))
    rank, order = factoring.scratch(np.dtype(np.int32), n), factoring.scratch(np.dtype(np.int32), n)
    steps += [add("rank", [(n,), square], [rank, s]), add("order", [(n,), (n,)], [order, rank]),
              add("values", [(n,), square, (n,)], [w, s, order])]
    if v is not None:
        steps.append(add("sorted_vectors", [square, square, (n,)], [v, vectors, order]))
    return steps
