"""``np.linalg.qr`` (its default ``mode="reduced"``) as plan steps: Householder reflections, each column's a few
Python kernels of the plan, as LAPACK's geqrf and orgqr (what NumPy calls) compute them.

::

    a (m x n) ──copy──▶ f ──┐ plan loop over the columns k < min(m, n):
                            │   householder  one work item: the reflection H_k = I - tau[k] v v^T that zeroes
                            │                column k below the diagonal (v below the diagonal of f, its first
                            │                element 1 and not stored; f[k, k] = beta, R's diagonal)
                            │   reflect      a work item per column right of k: H_k applied to it
                            ▼
    f (R on and above the diagonal), tau
        │ upper       r = f's first min(m, n) rows, zeros below the diagonal
        │ unit        q = the identity's first min(m, n) columns, then a plan loop over k downwards:
        ▼ accumulate  a work item per column of q at or right of k: H_k applied to it (q = H_0 H_1 ... q)

The reflections follow LAPACK's dlarfg, so R's diagonal has LAPACK's signs, NumPy's: ``beta`` is
``-sign(alpha) * norm`` of the column's part at and below the diagonal (``alpha`` its diagonal element), and a
column already zero below the diagonal is left as it is (``tau`` 0, its diagonal element of either sign). The
norms are scaled by their largest element, as LAPACK's dnrm2 does, so that squares neither overflow nor vanish;
a NaN or an infinity makes the column's results NaN, as the arithmetic gives. Nothing fails: a rank-deficient
matrix has a QR factorisation too (a zero diagonal element of R).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from svod.frontend.linalg import COLUMN_VARIABLE, Factoring, float32, kernel_of
from svod.frontend.pylang import Const, prange


def _copy(f, a):  # type: ignore[no-untyped-def]
    for i in prange(f.shape[0]):
        for j in range(f.shape[1]):
            f[i, j] = a[i, j]


def _householder(f, tau, _svod_k, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """The reflection of column ``k`` (dlarfg): ``tau[k]``, ``v`` into the column below the diagonal and
    ``beta`` onto it. The largest magnitude of the part below the diagonal is NaN where one is, so that a NaN
    is not passed over as a zero column."""
    m = f.shape[0]
    alpha = f[_svod_k, _svod_k]
    below = float32(0) if narrow else 0.0
    for i in range(_svod_k + 1, m):
        size = abs(f[i, _svod_k])
        if size > below or math.isnan(size):
            below = size
    if below == 0:
        tau[_svod_k] = float32(0) if narrow else 0.0
    else:
        largest = below if not abs(alpha) > below else abs(alpha)
        total = (alpha / largest) * (alpha / largest)
        for i in range(_svod_k + 1, m):
            part = f[i, _svod_k] / largest
            total = total + part * part
        norm = largest * math.sqrt(total)
        beta = -norm if alpha >= 0 else norm
        tau[_svod_k] = (beta - alpha) / beta
        scale = 1 / (alpha - beta)
        for i in range(_svod_k + 1, m):
            f[i, _svod_k] = f[i, _svod_k] * scale
        f[_svod_k, _svod_k] = beta


def _reflect(f, tau, _svod_k):  # type: ignore[no-untyped-def]
    """``H_k`` applied to the columns of ``f`` right of ``k``, a work item per column (dlarf: none where
    ``tau`` is 0, so that an infinity there is not multiplied by it)."""
    m = f.shape[0]
    t = tau[_svod_k]
    for r in prange(f.shape[1] - 1 - _svod_k):
        j = _svod_k + 1 + r
        if t != 0:
            w = f[_svod_k, j]
            for i in range(_svod_k + 1, m):
                w = w + f[i, _svod_k] * f[i, j]
            w = w * t
            f[_svod_k, j] = f[_svod_k, j] - w
            for i in range(_svod_k + 1, m):
                f[i, j] = f[i, j] - f[i, _svod_k] * w


def _upper(r, f):  # type: ignore[no-untyped-def]
    """R: the first rows of the factored ``f``, zeros below the diagonal."""
    for i in prange(r.shape[0]):
        for j in range(r.shape[1]):
            r[i, j] = f[i, j] if j >= i else 0


def _unit(q):  # type: ignore[no-untyped-def]
    """The identity's first columns: what orgqr applies the reflections to."""
    for i in prange(q.shape[0]):
        for j in range(q.shape[1]):
            q[i, j] = 1 if i == j else 0


def _accumulate(q, f, tau, _svod_k):  # type: ignore[no-untyped-def]
    """``H_k`` applied to the columns of ``q`` at and right of ``k`` (those left of it are still the identity's,
    zero in the rows ``H_k`` changes), a work item per column."""
    m = q.shape[0]
    t = tau[_svod_k]
    for r in prange(q.shape[1] - _svod_k):
        j = _svod_k + r
        if t != 0:
            w = q[_svod_k, j]
            for i in range(_svod_k + 1, m):
                w = w + f[i, _svod_k] * q[i, j]
            w = w * t
            q[_svod_k, j] = q[_svod_k, j] - w
            for i in range(_svod_k + 1, m):
                q[i, j] = q[i, j] - f[i, _svod_k] * w


def qr_shapes(shape: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The shapes of NumPy's reduced Q and R of an ``m`` x ``n`` matrix: ``m`` x ``k`` and ``k`` x ``n``,
    ``k = min(m, n)``."""
    m, n = shape
    k = min(m, n)
    return (m, k), (k, n)


def add_qr(factoring: Factoring, shape: tuple[int, int], q: int, r: int) -> list[int]:
    """The steps that write plan buffers ``q`` and ``r`` (``qr_shapes``) with the reduced QR factorisation of
    the ``m`` x ``n`` matrix in ``factoring.source``."""
    m, n = shape
    k = min(m, n)
    if k == 0:
        return []  # (Q of m x 0 and R of 0 x n hold no element)
    plan, narrow = factoring.plan, factoring.dtype == np.float32
    f, tau = factoring.scratch(factoring.dtype, m * n), factoring.scratch(factoring.dtype, k)

    def add(name: str, shapes: list[tuple[int, ...]], slots: list[int], **scalars: Any) -> int:
        kernel = kernel_of(globals()[f"_{name}"], f"linalg_qr_{name}", k - 1)
        return plan.add_kernel(kernel.shaped(*shapes), slots, **scalars)

    steps = [add("copy", [shape, shape], [f, factoring.source])]
    columns: dict[str, Any] = {"shapes": [shape, (k,)], "slots": [f, tau]}
    last = k - 1  # (its reflection has columns to its right only where the matrix is wide)
    if last > 0:
        body = [add("householder", **columns, _svod_k=COLUMN_VARIABLE, narrow=narrow),
                add("reflect", **columns, _svod_k=COLUMN_VARIABLE)]
        steps.append(plan.loop(COLUMN_VARIABLE, 0, last, body=body))
    steps.append(add("householder", **columns, _svod_k=last, narrow=narrow))
    if n > k:
        steps.append(add("reflect", **columns, _svod_k=last))
    q_shape, r_shape = qr_shapes(shape)
    steps += [add("upper", [r_shape, shape], [r, f]), add("unit", [q_shape], [q])]
    body = [add("accumulate", [q_shape, shape, (k,)], [q, f, tau], _svod_k=COLUMN_VARIABLE)]
    steps.append(plan.loop(COLUMN_VARIABLE, last, -1, step=-1, body=body))
    return steps
