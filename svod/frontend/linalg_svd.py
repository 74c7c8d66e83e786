"""``np.linalg.svd`` as plan steps: the one-sided Jacobi method (Hestenes'), which rotates pairs of columns of
the matrix until every two are orthogonal; its rounds are the round-robin tournament of
``svod.frontend.linalg_eigen`` (disjoint pairs, a work item per column).

::

    a (m x n) ──largest──▶ big (failed where an element is NaN or infinite) ──start──▶
                        g = a / big (or a^T where m < n: g has M >= N rows), v = I (N x N)
        plan loop over sweeps, until ``done``:
            plan loop over the rounds: turn      a work item per column: the rotation that makes its pair
                                                 orthogonal (``moved`` where one turned)
                                       columns   g = g J and v = v J (linalg_eigen's ``vectors``)
            settled   one work item: ``done`` where no column moved in the sweep
        norms (each column's length), places (descending) and order, then
        s = the lengths in that order times big;  with ``compute_uv``: the columns of g divided by their
        lengths (U) and of v (V), a column of U whose length is 0 (and, with ``full_matrices``, each column
        past N) made a unit vector orthogonal to those before it (``complete``); u and vh from them
        (transposed back where m < n)

Scaling by the largest magnitude keeps the columns' squared lengths within range. A pair turns while its
product exceeds m times the precision's epsilon times the product of its lengths (the rounding of m-term sums:
a smaller threshold may never be met), so a sweep without a turn leaves
every column orthogonal to the others to working precision, and the singular values accurate relative to the
largest (as LAPACK's gesdd, which NumPy calls). A column whose squared length falls below the smallest normal
number counts as 0 and turns no more: the rounding left of a column the others span shrinks each sweep but
is never orthogonal to them. The sign of a pair of singular vectors is a choice: svod makes
the element of largest magnitude (the first such) of each column of ``v`` positive (a right singular vector, or
a left one where m < n). A NaN or an infinity in the matrix fails the run, as NumPy's "SVD did not converge"
does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from svod.frontend import linalg_eigen, linalg_qr
from svod.frontend.linalg import COLUMN_VARIABLE, Factoring, float32, kernel_of
from svod.frontend.linalg_eigen import leading, partner, sweeping
from svod.frontend.pylang import Const, inf, prange


def _largest(big, failed, a):  # type: ignore[no-untyped-def]
    """``big``: the largest magnitude of ``a`` (1 where that is 0); ``failed`` where an element is NaN or
    infinite (NumPy's gesdd does not converge)."""
    largest = abs(a[0, 0])
    broken = 0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            size = abs(a[i, j])
            largest = max(largest, size)
            if math.isnan(size) or size == inf:
                broken = 1
    big[0] = largest if largest > 0 and largest < inf else 1
    if broken == 1 and failed[0] == 0:
        failed[0] = 1


def _start(g, a, big, transposed: Const[bool]):  # type: ignore[no-untyped-def]
    """``g``: ``a`` (or its transpose) divided by its largest magnitude."""
    for i in prange(g.shape[0]):
        for j in range(g.shape[1]):
            g[i, j] = (a[j, i] if transposed else a[i, j]) / big[0]


def _begin(v, moved, done):  # type: ignore[no-untyped-def]
    done[0] = 0  # (done[1]: the previous sweep was calm, ``_settled``)
    done[1] = 0
    for i in prange(v.shape[0]):
        moved[i] = 0
        for j in range(v.shape[1]):
            v[i, j] = 1 if i == j else 0


def _turn(rotations, moved, g, _svod_k, last, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """The rotation of column ``x``'s pair (p, q) in round ``k`` (both columns of a pair compute the same
    one): ``rotations[x]`` = (c, s); ``moved[x]`` 2 where it turns by more than the rounding floor's
    32 times, else 1 where it turns. A column whose squared length is below the smallest normal number
    (``_norms`` makes its length 0) turns with no other: where the columns span fewer dimensions than they
    number (a wide matrix's repeated or zero columns), the rounding left of the one that is not needed lies
    in the others' span, never orthogonal to them, and shrinks by the precision's epsilon each sweep."""
    n = g.shape[1]
    eps = float32(1.1920929e-07) if narrow else 2.220446049250313e-16
    tiny = float32(1.1754944e-38) if narrow else 2.2250738585072014e-308
    for x in prange(n):
        y = partner(x, _svod_k, last)
        c = float32(1) if narrow else 1.0
        sine = float32(0) if narrow else 0.0
        p = min(x, y)
        q = min(max(x, y), n - 1)  # (the padding index's partner reads nothing: within bounds all the same)
        if y < n:
            alpha = float32(0) if narrow else 0.0
            beta = float32(0) if narrow else 0.0
            gamma = float32(0) if narrow else 0.0
            for i in range(g.shape[0]):
                alpha = alpha + g[i, p] * g[i, p]
                beta = beta + g[i, q] * g[i, q]
                gamma = gamma + g[i, p] * g[i, q]
            measured = alpha >= tiny and beta >= tiny
            if measured and abs(gamma) > eps * g.shape[0] * math.sqrt(alpha * beta):  # (the sums' rounding: m eps)
                zeta = (beta - alpha) / (2 * gamma)
                size = abs(zeta)
                if size > 1:
                    t = 1 / (size * (1 + math.sqrt(1 + (1 / zeta) * (1 / zeta))))
                else:
                    t = 1 / (size + math.sqrt(1 + zeta * zeta))
                if zeta < 0:
                    t = -t
                c = 1 / math.sqrt(1 + t * t)
                sine = t * c
                if abs(gamma) > 32 * eps * g.shape[0] * math.sqrt(alpha * beta):
                    moved[x] = 2
                elif moved[x] == 0:
                    moved[x] = 1
        rotations[x, 0] = c
        rotations[x, 1] = sine


def _settled(done, moved):  # type: ignore[no-untyped-def]
    """``done`` where no column turned in the sweep, or where two sweeps running turned none by more than
    32 times the rounding floor: a pair's product, recomputed from columns rounded as they turn, may stay
    just above the threshold sweep after sweep, and the second calm sweep's rotations leave every pair at
    that floor. The marks cleared for the next sweep."""
    turned = 0
    for x in range(moved.shape[0]):
        turned = max(turned, moved[x])
        moved[x] = 0
    if turned == 0 or (turned == 1 and done[1] == 1):
        done[0] = 1
    done[1] = 1 if turned == 1 else 0


def _norms(norms, g, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """Each column's length; 0 where its squared length is below the smallest normal number, a column
    ``_turn`` leaves unturned (so not orthogonal to the others: ``_complete`` makes U's column)."""
    tiny = float32(1.1754944e-38) if narrow else 2.2250738585072014e-308
    for x in prange(g.shape[1]):
        total = g[0, x] * g[0, x]
        for i in range(1, g.shape[0]):
            total = total + g[i, x] * g[i, x]
        norms[x] = math.sqrt(total) if total >= tiny else 0 * total


def _places(places, norms):  # type: ignore[no-untyped-def]
    """Each column's place, its length descending (ties in column order); ``linalg_eigen``'s ``order`` then
    finds the column of each place."""
    n = norms.shape[0]
    for i in prange(n):
        place = 0
        for j in range(n):
            if norms[j] > norms[i] or (norms[j] == norms[i] and j < i):
                place += 1
        places[i] = place


def _values(s, norms, big, order):  # type: ignore[no-untyped-def]
    for r in prange(s.shape[0]):
        s[r] = norms[order[r]] * big[0]


def _left(u, g, norms, v, order):  # type: ignore[no-untyped-def]
    """U's columns: ``g``'s in the singular values' order divided by their lengths, signed as ``v``'s
    (``linalg_eigen.leading``); 0 where the length is 0 and past ``g``'s columns (``_complete`` makes those)."""
    n = g.shape[1]
    for r in prange(u.shape[1]):
        column = order[r] if r < n else 0
        sign = leading(v, column)
        length = norms[column]
        for i in range(u.shape[0]):
            value = g[i, column] / length if length != 0 else 0 * length
            if r >= n:
                value = 0 * length
            u[i, r] = -value if sign < 0 else value


def _complete(u, norms, order, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """Each column of ``u`` of length 0 (a zero singular value's, or one past the matrix's columns) made a unit
    vector orthogonal to the columns before it: the unit vector e_j that those leave the most of, less its
    projections on them (twice, as Gram-Schmidt needs to keep its orthogonality), normalised."""
    m = u.shape[0]
    n = norms.shape[0]
    for r in range(u.shape[1]):
        empty = r >= n
        if r < n:
            empty = norms[order[r]] == 0
        if empty:
            best = 0
            most = float32(-1) if narrow else -1.0
            for j in range(m):
                left = float32(1) if narrow else 1.0
                for c in range(r):
                    left = left - u[j, c] * u[j, c]
                if left > most:
                    most = left
                    best = j
            for i in range(m):
                u[i, r] = 1 if i == best else 0
            for _ in range(2):
                for c in range(r):
                    dot = u[0, c] * u[0, r]
                    for i in range(1, m):
                        dot = dot + u[i, c] * u[i, r]
                    for i in range(m):
                        u[i, r] = u[i, r] - dot * u[i, c]
            total = u[0, r] * u[0, r]
            for i in range(1, m):
                total = total + u[i, r] * u[i, r]
            length = math.sqrt(total)
            for i in range(m):
                u[i, r] = u[i, r] / length


def _transposed(out, x):  # type: ignore[no-untyped-def]
    for i in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x[j, i]


def _pseudo_inverse(out, u, s, vh, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """``np.linalg.pinv``: vh^T diag(1 / s) u^T, a work item per row, over the singular values above NumPy's
    cutoff (1e-15 times the largest: ``rcond``'s default, whatever the dtype)."""
    cutoff = (float32(1e-15) if narrow else 1e-15) * s[0]
    for i in prange(out.shape[0]):
        for j in range(out.shape[1]):
            total = float32(0) if narrow else 0.0
            for k in range(s.shape[0]):
                if s[k] > cutoff:
                    total = total + vh[k, i] / s[k] * u[j, k]
            out[i, j] = total


def add_pinv(factoring: Factoring, shape: tuple[int, int], out: int) -> list[int]:
    """The steps that write ``np.linalg.pinv`` of the matrix in ``factoring.source`` (``shape``, m x n) into
    plan buffer ``out`` (n x m): its reduced SVD, then ``_pseudo_inverse``."""
    m, n = shape
    if min(m, n) == 0:
        return []
    u_shape, s_shape, vh_shape = svd_shapes(shape, False)
    dtype = factoring.dtype
    u, s, vh = (factoring.scratch(dtype, int(np.prod(part))) for part in (u_shape, s_shape, vh_shape))
    steps = add_svd(factoring, shape, s, (u, vh), False)
    kernel = kernel_of(_pseudo_inverse, "linalg_pinv", 0).shaped((n, m), u_shape, s_shape, vh_shape)
    steps.append(factoring.plan.add_kernel(kernel, [out, u, s, vh], narrow=dtype == np.float32))
    return steps


def svd_shapes(shape: tuple[int, int], full_matrices: bool) -> tuple[tuple[int, ...], ...]:
    """The shapes of NumPy's u, s and vh of an ``m`` x ``n`` matrix."""
    m, n = shape
    k = min(m, n)
    return ((m, m), (k,), (n, n)) if full_matrices else ((m, k), (k,), (k, n))


def add_svd(factoring: Factoring, shape: tuple[int, int], s: int, uv: tuple[int, int] | None,
            full_matrices: bool) -> list[int]:
    """The steps that write the singular values of the matrix in ``factoring.source`` (``shape``) into plan
    buffer ``s``, descending, and, where ``uv`` is given, u and vh into its two buffers (``svd_shapes``)."""
    m, n = shape
    rows, columns = max(m, n), min(m, n)
    if columns == 0:  # (NumPy's full u and vh of an empty matrix are identities, where they have elements)
        units = [(out, size) for out, size in zip(uv or (), (m, n), strict=False) if full_matrices and size]
        return [factoring.plan.add_kernel(kernel_of(linalg_qr._unit, "linalg_svd_unit", 0).shaped((size, size)),
                                          [out]) for out, size in units]
    plan, dtype, narrow = factoring.plan, factoring.dtype, factoring.dtype == np.float32
    players = columns + columns % 2
    tall, square = (rows, columns), (columns, columns)
    g, turned = factoring.scratch(dtype, rows * columns), factoring.scratch(dtype, rows * columns)
    v, moved_v = factoring.scratch(dtype, columns * columns), factoring.scratch(dtype, columns * columns)
    rotations, big = factoring.scratch(dtype, 3 * columns), factoring.scratch(dtype, 1)
    norms = factoring.scratch(dtype, columns)
    moved, done, places, order = (factoring.scratch(np.dtype(np.int32), size)
                                  for size in (columns, 2, columns, columns))

    def add(name: str, shapes: list[tuple[int, ...]], slots: list[int], **scalars: Any) -> int:
        shared = ("vectors", "verdict", "order", "sorted_vectors")
        fn = getattr(linalg_eigen, f"_{name}") if name in shared else globals()[f"_{name}"]
        kernel = kernel_of(fn, f"linalg_svd_{name}", players - 2)
        return plan.add_kernel(kernel.shaped(*shapes), slots, **scalars)

    steps = [add("largest", [(1,), (1,), shape], [big, factoring.failed, factoring.source]),
             add("start", [tall, shape, (1,)], [g, factoring.source, big], transposed=m < n),
             add("begin", [square, (columns,), (2,)], [v, moved, done])]
    turn = {"_svod_k": COLUMN_VARIABLE, "last": players - 1}
    round_steps = [add("turn", [(columns, 3), (columns,), tall], [rotations, moved, g], **turn, narrow=narrow),
                   add("vectors", [tall, tall, (columns, 3)], [turned, g, rotations], **turn), plan.add_copy(g, turned)]
    if uv is not None:
        round_steps += [add("vectors", [square, square, (columns, 3)], [moved_v, v, rotations], **turn),
                        plan.add_copy(v, moved_v)]
    steps += [sweeping(plan, players, round_steps, lambda: add("settled", [(2,), (columns,)], [done, moved]), done),
              add("verdict", [(1,), (2,)], [factoring.failed, done]),
              add("norms", [(columns,), tall], [norms, g], narrow=narrow),
              add("places", [(columns,), (columns,)], [places, norms]),
              add("order", [(columns,), (columns,)], [order, places]),
              add("values", [(columns,), (columns,), (1,), (columns,)], [s, norms, big, order])]
    if uv is None:
        return steps
    left_shape = (rows, rows if full_matrices else columns)
    if m >= n:  # u is the left basis, vh the right one transposed
        left, right, vh_of, vh_from = uv[0], moved_v, square, moved_v
    else:  # of the transpose: u is its right basis, vh its left one transposed
        left = turned if not full_matrices else factoring.scratch(dtype, rows * rows)
        right, vh_of, vh_from = uv[0], left_shape, left
    steps += [add("left", [left_shape, tall, (columns,), square, (columns,)], [left, g, norms, v, order]),
              add("complete", [left_shape, (columns,), (columns,)], [left, norms, order], narrow=narrow),
              add("sorted_vectors", [square, square, (columns,)], [right, v, order]),
              add("transposed", [svd_shapes(shape, full_matrices)[2], vh_of], [uv[1], vh_from])]
    return steps
