"""``np.linalg.eig`` and ``eigvals`` of a general (non-symmetric) real matrix as plan steps: a Householder
reduction to Hessenberg form, Francis double-shift QR steps to the real Schur form T = Z^T A Z, and (``eig``) the
eigenvectors of T by back-substitution, taken back by Z.

::

    a ──copy──▶ h, z = I ── finite     one work item: ``broken`` where an element is NaN or infinite
                            scale      one work item: h times the power of two that brings its largest
                                       magnitude near 1 (the eigenvalues are divided by it)
                            balance    one work item: h = D^-1 h D, z = D, D diagonal powers of two
                            hessenberg one work item: h = P^T h P for the reflections P of columns 0..n-3,
                                       z = z P (the reductions' rows and columns are serial steps)
                            schur      one work item: double-shift QR steps on h's unreduced block, the
                                       reflections applied to all of h (T, not only its diagonal) and to z,
                                       until the block splits; a 2 x 2 block of real eigenvalues rotated
                                       to triangular; one of complex eigenvalues sets ``complex``
    h = T (upper triangular), z ── values      w = T's diagonal, in its order (as LAPACK's geev, what
                                               NumPy calls, returns them; NumPy's order is not promised)
                                   backsolve   a work item per eigenvalue k: x_k solving (T - t_kk) x_k = 0
                                               with x_k[k] = 1, back-substituted from row k - 1 up
                                   vectors     a work item per eigenvalue: v_k = Z x_k / ||Z x_k||_2
    w, v (real) ── complexed   (NumPy >= 2.5) a work item per element: the complex result, real part as
                               computed (its sign kept), imaginary part +0.0

The results' dtype is NumPy's (``result_dtype``, decided once from the running NumPy's version): before NumPy 2.5,
the matrix's float type, as NumPy's is where every eigenvalue is real (NumPy's is complex where any eigenvalue
is, a dtype that depends on the values, which a plan, built before it runs, cannot know); from NumPy 2.5, which
always returns complex arrays, the complex type of the matrix's float type (complex64 of float32, complex128 of
float64), each imaginary part +0.0 as NumPy's (and numba's) are. Either way svod computes real eigensystems
only, and a run whose matrix has complex eigenvalues raises ``LinAlgError`` (as numba's ``eig`` of a real matrix
raises), never a real array in place of NumPy's complex values. A non-finite
element raises as NumPy's does ("Array must not contain infs or NaNs"); steps that do not settle raise
"Eigenvalues did not converge". Where T's diagonal repeats (a defective matrix), a zero divisor of the
back-substitution is taken as eps times the matrix's norm and a growing vector is scaled down, as LAPACK's
trevc does, so the vectors are nearly parallel, finite, and of unit norm, as NumPy's are. A vector's sign is
its back-substitution's (x_k[k] = 1), a choice as LAPACK's is.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from svod.frontend.linalg import Factoring, float32, kernel_of
from svod.frontend.pylang import Const, inf, prange

STEPS = 30
"""The most QR steps an eigenvalue (a split of the active block) takes before the factorisation fails (LAPACK's
and EISPACK's limit; a shift out of a cycle is taken at the 10th and 20th)."""
COMPLEX_RESULTS = np.linalg.eigvals(np.eye(1)).dtype.kind == "c"
"""Whether ``eig``'s and ``eigvals``' results are complex: NumPy 2.5's always are (imaginary parts +0.0 where the
eigenvalues are real, as numba's), NumPy 2.4's are real where every eigenvalue is. Decided once, here, by what
the running NumPy does (a version number would misread its release candidates)."""
BROKEN, COMPLEX, UNSETTLED = 1, 2, 3
"""What ``failed`` of an ``eig`` holds: an element is NaN or infinite; an eigenvalue is complex; the QR steps did
not settle (the first that happens)."""


def result_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of ``eig``'s and ``eigvals``' results of a matrix computed in float type ``dtype``: NumPy's,
    the complex type of ``dtype``'s parts where ``COMPLEX_RESULTS``, else ``dtype``."""
    return np.result_type(dtype, np.complex64) if COMPLEX_RESULTS else np.dtype(dtype)


def _start(h, z, a):  # type: ignore[no-untyped-def]
    """``h`` = ``a``, ``z`` the identity, a work item per row."""
    for i in prange(h.shape[0]):
        for j in range(h.shape[1]):
            h[i, j] = a[i, j]
            z[i, j] = 1 if i == j else 0


def _finite(failed, h):  # type: ignore[no-untyped-def]
    """``failed`` = ``BROKEN`` where an element of ``h`` is NaN or infinite (the steps after do nothing)."""
    n = h.shape[0]
    broken = 0
    for i in range(n):
        for j in range(n):
            if math.isnan(h[i, j]) or abs(h[i, j]) == inf:
                broken = 1
    if broken == 1:
        failed[0] = BROKEN


def _scale(factor, h, failed, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """``h`` times ``factor``, the power of two that brings its largest magnitude to between 1 and 2: the QR
    steps square elements, which near the overflow threshold overflow and near the smallest normal vanish
    (LAPACK's geev scales too). A power of two changes no digit, and the eigenvalues are divided by it; it stops
    at 2^126 (2^1022), finite, so a subnormal matrix is brought up as far as its eigenvalues can come back."""
    n = h.shape[0]
    top = float32(8.507059e37) if narrow else 4.49423283715579e307
    largest = abs(h[0, 0]) * 0
    for i in range(n):
        for j in range(n):
            largest = max(largest, abs(h[i, j]))
    scale = largest * 0 + 1
    if failed[0] == 0 and largest != 0:
        while largest * scale >= 2:
            scale = scale * 0.5
        while largest * scale < 1 and scale < top:
            scale = scale * 2
        for i in range(n):
            for j in range(n):
                h[i, j] = h[i, j] * scale
    factor[0] = scale


def _balance(h, z, failed, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """``h`` = D^-1 ``h`` D and ``z`` = D, D diagonal of powers of two that bring each row's and column's sums of
    off-diagonal magnitudes within a factor of two of each other (LAPACK gebal's scaling, which NumPy's geev
    does): the QR steps err by eps times the matrix's norm, which a graded matrix's grading makes large where
    its eigenvalues are not. Powers of two change no digit; an eigenvector of ``h`` taken back by D is
    ``a``'s. A factor stops within 2 / eps of the smallest normal number (gebal's bounds)."""
    n = h.shape[0]
    low = float32(1.9721523e-31) if narrow else 2.004168360008973e-292
    again = 1 if failed[0] == 0 else 0
    while again == 1:
        again = 0
        for i in range(n):
            c = abs(h[0, 0]) * 0
            r = c
            for j in range(n):
                if j != i:
                    c += abs(h[j, i])
                    r += abs(h[i, j])
            if c != 0 and r != 0:
                total = c + r
                f = c * 0 + 1
                while c < r / 2 and f < 1 / low and r / 2 > low:
                    f, c, r = f * 2, c * 2, r / 2
                while c / 2 >= r and f > low and c / 2 > low:
                    f, c, r = f / 2, c / 2, r * 2
                if c + r < 0.95 * total:
                    again = 1
                    z[i, i] = z[i, i] * f
                    for j in range(n):
                        h[i, j] = h[i, j] / f
                        h[j, i] = h[j, i] * f


def _hessenberg(h, z, u, failed):  # type: ignore[no-untyped-def]
    """``h`` = P^T ``h`` P in upper Hessenberg form and ``z`` = ``z`` P, P the product of the Householder
    reflections I - u u^T / c that zero column k below row k + 1 (``u`` their vector, scaled by the column's
    sum of magnitudes so that its squares neither overflow nor underflow)."""
    n = h.shape[0]
    if failed[0] == 0:
        for k in range(n - 2):
            scale = abs(h[k + 1, k]) * 0
            for i in range(k + 1, n):
                scale += abs(h[i, k])
            if scale != 0:
                sigma = scale * 0
                for i in range(k + 1, n):
                    u[i] = h[i, k] / scale
                    sigma += u[i] * u[i]
                g = math.sqrt(sigma)
                if u[k + 1] > 0:
                    g = -g
                c = sigma - u[k + 1] * g
                u[k + 1] = u[k + 1] - g
                for j in range(k, n):
                    f = h[k + 1, j] * 0
                    for i in range(k + 1, n):
                        f += u[i] * h[i, j]
                    f = f / c
                    for i in range(k + 1, n):
                        h[i, j] = h[i, j] - f * u[i]
                for i in range(n):
                    f = h[i, k + 1] * 0
                    e = f
                    for j in range(k + 1, n):
                        f += h[i, j] * u[j]
                        e += z[i, j] * u[j]
                    f = f / c
                    e = e / c
                    for j in range(k + 1, n):
                        h[i, j] = h[i, j] - f * u[j]
                        z[i, j] = z[i, j] - e * u[j]
                h[k + 1, k] = scale * g
                for i in range(k + 2, n):
                    h[i, k] = 0


def _schur(h, z, failed, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """``h`` = T, the real Schur form, upper triangular (its 2 x 2 blocks of real eigenvalues rotated), ``z``
    = ``z`` Q; ``failed`` = ``COMPLEX`` at a block of complex eigenvalues, ``UNSETTLED`` after ``STEPS`` steps
    without a split. The active block is rows and columns ``low``..``high``; an element below the diagonal is
    negligible beside its two diagonal neighbours (eps of their sum) and, weighed against the element above the
    diagonal and the diagonal's difference, beside its block (LAPACK lahqr's test: a subdiagonal under eps of the
    diagonal may still make a complex pair of a repeated eigenvalue)."""
    n = h.shape[0]
    eps = float32(1.1920929e-07) if narrow else 2.220446049250313e-16
    tiny = float32(1.1754944e-38) if narrow else 2.2250738585072014e-308
    norm = abs(h[0, 0]) * 0
    for i in range(n):
        for j in range(n):
            norm += abs(h[i, j])
    high = n - 1
    steps = 0
    while high >= 0 and failed[0] == 0:
        low = high
        while low > 0:
            s = abs(h[low - 1, low - 1]) + abs(h[low, low])
            if s == 0:
                s = norm
            if abs(h[low, low - 1]) <= eps * s:  # and small beside its 2 x 2 block's other parts (lahqr's test)
                ab = max(abs(h[low, low - 1]), abs(h[low - 1, low]))
                ba = min(abs(h[low, low - 1]), abs(h[low - 1, low]))
                aa = max(abs(h[low, low]), abs(h[low - 1, low - 1] - h[low, low]))
                bb = min(abs(h[low, low]), abs(h[low - 1, low - 1] - h[low, low]))
                if ab == 0 or ba * (ab / (aa + ab)) <= max(tiny, eps * (bb * (aa / (aa + ab)))):
                    h[low, low - 1] = 0
                    break
            low -= 1
        if low == high:
            high -= 1
            steps = 0
        elif low == high - 1:
            p = high - 1
            half = (h[p, p] - h[high, high]) / 2
            discriminant = half * half + h[p, high] * h[high, p]
            if discriminant < 0:
                failed[0] = COMPLEX
            else:
                root = math.sqrt(discriminant)
                if half < 0:
                    root = -root
                x = half + root  # the rotation that zeroes h[high, p]: (x, h[high, p]) normalised
                y = h[high, p]
                r = math.sqrt(x * x + y * y)
                c = x / r if r != 0 else x * 0 + 1
                s = y / r if r != 0 else y * 0
                for j in range(p, n):
                    top = h[p, j]
                    h[p, j] = c * top + s * h[high, j]
                    h[high, j] = c * h[high, j] - s * top
                for i in range(high + 1):
                    left = h[i, p]
                    h[i, p] = c * left + s * h[i, high]
                    h[i, high] = c * h[i, high] - s * left
                for i in range(n):
                    left = z[i, p]
                    z[i, p] = c * left + s * z[i, high]
                    z[i, high] = c * z[i, high] - s * left
                h[high, p] = 0
                high -= 2
                steps = 0
        elif steps == STEPS:
            failed[0] = UNSETTLED
        else:
            steps += 1
            x = h[high, high]
            y = h[high - 1, high - 1]
            w = h[high, high - 1] * h[high - 1, high]
            if steps % 10 == 0:  # (the 10th and 20th) a shift out of a cycle (EISPACK's exceptional shift)
                e = abs(h[high, high - 1]) + abs(h[high - 1, high - 2])
                x = 0.75 * e + h[high, high]
                y = x
                w = -0.4375 * e * e
            trace = x + y
            det = x * y - w
            a0 = h[low, low] * h[low, low] + h[low, low + 1] * h[low + 1, low] - trace * h[low, low] + det
            a1 = h[low + 1, low] * (h[low, low] + h[low + 1, low + 1] - trace)
            a2 = h[low + 1, low] * h[low + 2, low + 1]
            for k in range(low, high):
                if k > low:
                    a0 = h[k, k - 1]
                    a1 = h[k + 1, k - 1]
                    a2 = h[k + 2, k - 1] if k + 2 <= high else a2 * 0
                three = k + 2 <= high
                size = abs(a0) + abs(a1) + abs(a2)
                if size != 0:
                    a0 = a0 / size
                    a1 = a1 / size
                    a2 = a2 / size
                    alpha = math.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
                    if a0 > 0:
                        alpha = -alpha
                    v0 = a0 - alpha
                    beta = 1 / (alpha * v0) * -1  # 2 / (v . v), v . v = 2 alpha (alpha - a0)
                    start = k - 1 if k > low else k
                    for j in range(start, n):
                        f = h[k, j] * v0 + h[k + 1, j] * a1
                        if three:
                            f += h[k + 2, j] * a2
                        f = f * beta
                        h[k, j] = h[k, j] - f * v0
                        h[k + 1, j] = h[k + 1, j] - f * a1
                        if three:
                            h[k + 2, j] = h[k + 2, j] - f * a2
                    if k > low:
                        h[k, k - 1] = alpha * size
                        h[k + 1, k - 1] = 0
                        if three:
                            h[k + 2, k - 1] = 0
                    last = min(k + 3, high)
                    for i in range(last + 1):
                        f = h[i, k] * v0 + h[i, k + 1] * a1
                        if three:
                            f += h[i, k + 2] * a2
                        f = f * beta
                        h[i, k] = h[i, k] - f * v0
                        h[i, k + 1] = h[i, k + 1] - f * a1
                        if three:
                            h[i, k + 2] = h[i, k + 2] - f * a2
                    for i in range(n):
                        f = z[i, k] * v0 + z[i, k + 1] * a1
                        if three:
                            f += z[i, k + 2] * a2
                        f = f * beta
                        z[i, k] = z[i, k] - f * v0
                        z[i, k + 1] = z[i, k + 1] - f * a1
                        if three:
                            z[i, k + 2] = z[i, k + 2] - f * a2


def _values(w, h, factor):  # type: ignore[no-untyped-def]
    """``w`` = T's diagonal, the scaling of ``_scale`` undone."""
    for k in prange(w.shape[0]):
        w[k] = h[k, k] / factor[0]


def _backsolve(x, h, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """Column k of ``x``: T's eigenvector of t_kk (x[k, k] = 1, zeros below), back-substituted; a zero
    divisor (a repeated eigenvalue) is eps times T's norm, and the column is scaled down where an element
    passes ``1 / (n eps)`` so that none overflows."""
    n = h.shape[0]
    eps = float32(1.1920929e-07) if narrow else 2.220446049250313e-16
    norm = abs(h[0, 0]) * 0
    for i in range(n):
        for j in range(i, n):
            norm += abs(h[i, j])
    smallest = eps * norm if norm != 0 else eps
    for k in prange(n):
        for i in range(n):
            x[i, k] = 1 if i == k else 0
        for step in range(k):
            i = k - 1 - step
            total = h[i, i + 1] * x[i + 1, k]
            for j in range(i + 2, k + 1):
                total += h[i, j] * x[j, k]
            divisor = h[i, i] - h[k, k]
            if abs(divisor) < smallest:
                divisor = smallest
            x[i, k] = -total / divisor
            if abs(x[i, k]) > 1 / (n * eps):
                scale = abs(x[i, k])
                for j in range(i, k + 1):
                    x[j, k] = x[j, k] / scale


def _vectors(v, z, x):  # type: ignore[no-untyped-def]
    """Column k of ``v``: ``z`` times column k of ``x``, of unit 2-norm (scaled by its largest magnitude
    first, so that the squares neither overflow nor underflow)."""
    n = v.shape[0]
    for k in prange(n):
        largest = abs(z[0, 0]) * 0
        for i in range(n):
            total = z[i, 0] * x[0, k]
            for j in range(1, k + 1):
                total += z[i, j] * x[j, k]
            v[i, k] = total
            largest = max(largest, abs(total))
        squares = largest * 0
        for i in range(n):
            squares += (v[i, k] / largest) * (v[i, k] / largest)
        length = largest * math.sqrt(squares)
        for i in range(n):
            v[i, k] = v[i, k] / length


def _complexed(out, real):  # type: ignore[no-untyped-def]
    """``out``, a complex array's float view (a plan holds it so: ``jit_plans.Builder.add_array``), = ``real``
    made complex as NumPy casts it: each real part as computed, its sign kept, the imaginary part +0.0."""
    for i in prange(real.shape[0]):
        out[i, 0] = real[i]
        out[i, 1] = 0


def add_eig(factoring: Factoring, w: int, v: int | None) -> list[int]:
    """The steps that write the eigenvalues of the general real matrix in ``factoring.source`` into plan buffer
    ``w`` and, where given, its eigenvectors into the columns of ``v`` (both of ``result_dtype``: where it is
    complex, the real results are computed into scratch buffers and converted last)."""
    n = factoring.n
    if n == 0:
        return []
    if not COMPLEX_RESULTS:
        return _add_real(factoring, w, v)
    real_w = factoring.scratch(factoring.dtype, n)
    real_v = None if v is None else factoring.scratch(factoring.dtype, n * n)
    steps = _add_real(factoring, real_w, real_v)
    complexed = kernel_of(_complexed, "linalg_eig_complexed", n - 1)
    for out, real, size in ((w, real_w, n), (v, real_v, n * n)):
        if out is not None and real is not None:
            steps.append(factoring.plan.add_kernel(complexed.shaped((size, 2), (size,)), [out, real]))
    return steps


def _add_real(factoring: Factoring, w: int, v: int | None) -> list[int]:
    """The steps of ``add_eig`` of a non-empty matrix, into ``w`` and ``v`` of the matrix's float type."""
    n = factoring.n
    plan, dtype, narrow = factoring.plan, factoring.dtype, factoring.dtype == np.float32
    square = (n, n)
    h, z, u = factoring.scratch(dtype, n * n), factoring.scratch(dtype, n * n), factoring.scratch(dtype, n)
    factor = factoring.scratch(dtype, 1)
    failed = factoring.failed

    def add(name: str, shapes: list[tuple[int, ...]], slots: list[int], **scalars: Any) -> int:
        kernel = kernel_of(globals()[f"_{name}"], f"linalg_eig_{name}", n - 1)
        return plan.add_kernel(kernel.shaped(*shapes), slots, **scalars)

    steps = [add("start", [square, square, square], [h, z, factoring.source]),
             add("finite", [(1,), square], [failed, h]),
             add("scale", [(1,), square, (1,)], [factor, h, failed], narrow=narrow),
             add("balance", [square, square, (1,)], [h, z, failed], narrow=narrow),
             add("hessenberg", [square, square, (n,), (1,)], [h, z, u, failed]),
             add("schur", [square, square, (1,)], [h, z, failed], narrow=narrow),
             add("values", [(n,), square, (1,)], [w, h, factor])]
    if v is not None:
        x = factoring.scratch(dtype, n * n)
        steps += [add("backsolve", [square, square], [x, h], narrow=narrow),
                  add("vectors", [square, square, square], [v, z, x])]
    return steps
