"""Linear algebra as plan steps: ``np.linalg.solve``, ``inv``, ``det``, ``slogdet`` and ``cholesky`` of an
``@svod.jit`` function (``svod.frontend.jit``), each a few Python kernels added to an ``ExecutionPlan``.

::

    a (n x n) ──copy──▶ lu ──┐ plan loop over the panels of ``panel_columns`` columns:
                             │   panel    one work item: for each column k of the panel, the row of the
                             │            largest |lu[i, k]|, i >= k, swapped with row k (its number kept in
                             │            ``pivots``), the column below the pivot divided by it (a zero pivot
                             │            sets ``info``: k + 1, the first), the panel's columns right of k
                             │            updated in the rows below; then the panel's rows right of it
                             │   right    a work item per row below the panel: its columns right of the panel
                             │            updated by the panel's columns
                             ▼
    lu (L below the diagonal, unit diagonal; U on and above), pivots, info
        │ solve / inv   a work item per right-hand column: its rows swapped as ``pivots`` say, then the
        │               forward and back substitutions          (b, or the identity for ``inv``)
        │ det / slogdet one work item: the sign of the swaps and of U's diagonal, the sum of the logs of
        ▼               its magnitudes (NumPy's det is sign * exp(logdet) too; 0.0 where a pivot is zero)

    a ──lower triangle──▶ l ── plan loop over the panels: ``cholesky_rows`` (the panel's rows left of it,
                               transposed), ``cholesky_products`` (what the columns left of the panel take from
                               it: a matmul into a buffer of its own), ``cholesky_panel`` (one work item: the
                               diagonal block, column by column; ``info`` = j + 1 where l[j, j]**2 is not
                               positive), ``cholesky_below`` (a work item per row below the block). With panels
                               of one column: ``cholesky_diagonal`` and ``cholesky_column``, a column each.

LAPACK's getrf and potrf (what NumPy calls) factor so, panel by panel and column by column, and report the first
zero pivot or the first leading minor that is not positive the same way: ``info``, which the run's caller reads
after the run and raises ``LinAlgError`` for (a matrix that is only nearly singular gives NumPy's large numbers,
as LAPACK's do). Everything is a kernel of the plan: no step reads a value back to the host, so a factorisation
inside a plan loop runs as the plan's other steps do, on every device.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.device import Buffer
from svod.device.caps import DeviceCaps
from svod.dtype import dtypes
from svod.frontend.pykernel import COMPLEX_PARTS, Kernel
from svod.frontend.pylang import CASTS, Const, func, inf, prange
from svod.runtime.plan import ExecutionPlan

COLUMN_VARIABLE = "_svod_column"
"""The plan loop variable that numbers a factorisation's columns."""
float32 = CASTS["float32"]
BLOCK_COLUMNS = 4
"""How many right-hand columns a work item of the substitutions solves together, a constant its loops are
unrolled by: 200 x 200 systems of 400 columns solved fastest at 4 (real 1.6 ms, complex 6.1; 8: 2.8 and 6.1 to
10; one column each: 8.5 and 35)."""
PANEL_COLUMNS = 32
"""The columns of a panel of the LU factorisation, on a device that lets a work item's loops run their course
(``panel_columns``)."""
FUNCTIONS = ("solve", "inv", "det", "slogdet", "cholesky", "qr", "eigh", "eigvalsh", "svd", "pinv", "eig", "eigvals")
"""The ``np.linalg`` functions svod computes (the steps of ``qr``, of ``eigh`` and ``eigvalsh``, of ``svd`` and
``pinv``, and of ``eig`` and ``eigvals`` are ``svod.frontend.linalg_qr``'s, ``linalg_eigen``'s, ``linalg_svd``'s
and ``linalg_general``'s)."""
COMPOSED = ("matrix_power", "matrix_rank", "cond", "lstsq")
"""The ``np.linalg`` functions svod computes as statements of the others and of array expressions
(``svod.frontend.linalg_compose``), rewritten before the plan is built."""
COMPLEX = ("solve", "inv")
"""The functions svod computes of complex matrices too (the LU factorisation's kernels compute on complex
elements as on real ones: ``svod.frontend.complex_values``)."""
RECTANGULAR = ("qr", "svd", "pinv")
"""The functions of a matrix of any shape (the others' is square)."""
INFALLIBLE = ("det", "slogdet", "qr")
"""The functions whose factorisation never fails (a singular matrix's determinant is 0; every matrix has a QR
factorisation): no failure flag."""
JACOBI = ("eigh", "eigvalsh", "svd", "pinv")
"""The functions computed by Jacobi sweeps (refused where a device stops a work item's loops)."""
SCHUR = ("eig", "eigvals")
"""The functions computed by QR steps in one work item (``svod.frontend.linalg_general``; refused where a device
stops a work item's loops)."""
UNPACKED = {"slogdet": ("sign", "logdet"), "qr": ("q", "r"), "eigh": ("w", "v"), "eig": ("w", "v"),
            "svd": ("u", "s", "vh")}
"""The functions whose result is a tuple, which a statement unpacks into names (and what they hold)."""
KEYWORDS: dict[str, dict[str, tuple[object, ...]]] = {
    "qr": {"mode": ("reduced",)}, "eigh": {"UPLO": ("L",)}, "eigvalsh": {"UPLO": ("L",)},
    "svd": {"full_matrices": (True, False), "compute_uv": (True, False), "hermitian": (False,)}}
"""The keywords a function takes in a jitted function, and the values (written out) svod computes."""


def keywords(call: ast.Call) -> dict[str, object]:
    """The keywords of a ``np.linalg`` call, each a constant written out (``KEYWORDS``; others are refused)."""
    return {k.arg: k.value.value for k in call.keywords if k.arg is not None and isinstance(k.value, ast.Constant)}


def unpacked(kind: str, call: ast.Call) -> tuple[str, ...] | None:
    """What the result of ``call`` (of function ``kind``) unpacks into, or None where it is one value (``svd``'s
    with ``compute_uv=False``: the singular values)."""
    if kind == "svd" and keywords(call).get("compute_uv", True) is False:
        return None
    return UNPACKED.get(kind)

# ---- the kernels ---------------------------------------------------------------------------------------------

def _start(lu, rows, a):  # type: ignore[no-untyped-def]
    """The factors' first state: ``a`` as it is, its rows in their order."""
    for i in prange(lu.shape[0]):
        rows[i] = i
        for j in range(lu.shape[1]):
            lu[i, j] = a[i, j]


def _permuted(out, b, rows):  # type: ignore[no-untyped-def]
    """``b``'s rows in the order the pivoting left ``a``'s (row ``i`` of ``out`` is row ``rows[i]`` of ``b``)."""
    for i in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = b[rows[i], j]


def _lower(out, a):  # type: ignore[no-untyped-def]
    """``a``'s lower triangle (what LAPACK's potrf reads of it), zeros above."""
    for i in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = a[i, j] if j <= i else 0


def _identity(out, rows):  # type: ignore[no-untyped-def]
    """The identity's rows in the order the pivoting left ``a``'s."""
    for i in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = 1 if rows[i] == j else 0


def _clear(info):  # type: ignore[no-untyped-def]
    info[0] = 0


def _panel(lu, pivots, rows, info, failed, _svod_k, width: Const[int]):  # type: ignore[no-untyped-def]
    """Panel ``k`` (columns ``k * width`` to ``(k + 1) * width``, or to the last) factored in one work item:
    each column's ``_pivoted`` and the panel's columns right of it updated in the rows below; then the panel's
    rows right of it (U's), each column by the panel's in their order. The rows below are ``_right``'s."""
    n = lu.shape[0]
    first = _svod_k * width
    last = min(first + width, n)
    for k in range(first, last):
        _pivoted(lu, pivots, rows, info, failed, k)
        for i in range(k + 1, n):
            factor = lu[i, k]
            for j in range(k + 1, last):
                lu[i, j] = lu[i, j] - factor * lu[k, j]
    for k in range(first, last):
        for i in range(k + 1, last):
            factor = lu[i, k]
            for j in range(last, n):
                lu[i, j] = lu[i, j] - factor * lu[k, j]


@func
def _pivoted(lu, pivots, rows, info, failed, k):  # type: ignore[no-untyped-def]
    """Column ``k``'s pivot: the first row of the largest ``_magnitude`` at or below ``k`` (as LAPACK's idamax
    and izamax), swapped into row ``k`` (the whole row), and the column below it divided by it. A zero pivot
    (the column is zero there) is recorded in ``info`` (and in ``failed``) if none was before; the column
    stays as it is, as getrf leaves it."""
    n = lu.shape[0]
    p = k
    best = _magnitude(lu[k, k])
    for i in range(k + 1, n):
        size = _magnitude(lu[i, k])
        if size > best:
            best = size
            p = i
    pivots[k] = p
    if p != k:
        row = rows[k]
        rows[k] = rows[p]
        rows[p] = row
        for j in range(n):
            held = lu[k, j]
            lu[k, j] = lu[p, j]
            lu[p, j] = held
    pivot = lu[k, k]
    if pivot == 0 and info[0] == 0:
        info[0] = k + 1
    if pivot == 0 and failed[0] == 0:
        failed[0] = k + 1
    if pivot != 0:
        for i in range(k + 1, n):
            lu[i, k] = lu[i, k] / pivot


@func
def _magnitude(z):  # type: ignore[no-untyped-def]
    """What LAPACK's pivot search compares: |z| of a real number, |re| + |im| of a complex one (izamax's)."""
    return abs(np.real(z)) + abs(np.imag(z))


def _right(lu, _svod_k, width: Const[int]):  # type: ignore[no-untyped-def]
    """The rows below panel ``k``, right of it, updated by the panel's columns in their order, a work item per
    row."""
    n = lu.shape[0]
    first = _svod_k * width
    last = min(first + width, n)
    for r in prange(n - last):
        i = last + r
        for k in range(first, last):
            factor = lu[i, k]
            for j in range(last, n):
                lu[i, j] = lu[i, j] - factor * lu[k, j]


def _substitute(x, lu):  # type: ignore[no-untyped-def]
    """``x``'s columns (permuted: ``_permuted``) solved for ``lu`` (getrs), a work item per block of
    ``BLOCK_COLUMNS`` (the columns after the last whole block: ``_substitute_rest``)."""
    for block in prange(x.shape[1] // BLOCK_COLUMNS):
        _solved(x, lu, block * BLOCK_COLUMNS, BLOCK_COLUMNS)


def _substitute_rest(x, lu):  # type: ignore[no-untyped-def]
    """The columns of ``x`` after its last whole block of ``BLOCK_COLUMNS``, a work item each."""
    whole = x.shape[1] - x.shape[1] % BLOCK_COLUMNS
    for c in prange(x.shape[1] - whole):
        _solved(x, lu, whole + c, 1)


@func
def _solved(x, lu, first, width):  # type: ignore[no-untyped-def]
    """Columns ``first`` to ``first + width`` of ``x`` solved for ``lu``, ``width`` a constant their loops unroll
    by: each element of ``lu`` read once for them all, and their part of a row updated by it in one pass along
    the row (a work item per column read ``lu`` whole for each, down a column of ``x``). Each element's
    operations are a column's, in its order."""
    n = lu.shape[0]
    for i in range(n):
        for j in range(i):
            factor = lu[i, j]
            for c in range(width):
                x[i, first + c] = x[i, first + c] - factor * x[j, first + c]
    for t in range(n):
        i = n - 1 - t
        for j in range(i + 1, n):
            factor = lu[i, j]
            for c in range(width):
                x[i, first + c] = x[i, first + c] - factor * x[j, first + c]
        pivot = lu[i, i]
        for c in range(width):
            x[i, first + c] = x[i, first + c] / pivot


def _logdet(sign, logdet, lu, pivots, info, _svod_n, narrow: Const[bool]):  # type: ignore[no-untyped-def]
    """``np.linalg.slogdet`` of the factors of an ``n`` x ``n`` matrix (a 0 x 0 one's, in buffers of one
    element, are 1 and 0), in the matrix's float type: the sign of the swaps and of U's diagonal, and the sum
    of the logs of its magnitudes; sign 0 and logdet -inf where a pivot was zero."""
    s = float32(1) if narrow else 1.0
    total = float32(0) if narrow else 0.0
    for i in range(_svod_n):
        u = lu[i, i]
        if pivots[i] != i:
            s = -s
        if u < 0:
            s = -s
        total = total + math.log(abs(u))
    if _svod_n == 0:  # (the loop's sum of no terms is -0.0 as the reduction begins it: NumPy's is 0.0)
        total = float32(0) if narrow else 0.0
    if info[0] != 0:
        s = float32(0) if narrow else 0.0
        total = float32(-inf) if narrow else -inf
    sign[0] = s
    logdet[0] = total


def _det(det, sign, logdet):  # type: ignore[no-untyped-def]
    """``np.linalg.det`` as NumPy computes it: sign * exp(logdet) (0.0 of a zero pivot's sign 0)."""
    det[0] = sign[0] * math.exp(logdet[0])


def _cholesky_diagonal(l, failed, _svod_j):  # type: ignore[no-untyped-def]  # noqa: E741
    """``l[j, j]``: the square root of what is left of the diagonal; where that is not positive (or NaN: potrf
    tests ``not > 0``), ``failed`` records the leading minor's order if none was before."""
    total = l[_svod_j, _svod_j]
    for k in range(_svod_j):
        total = total - l[_svod_j, k] * l[_svod_j, k]
    if not total > 0 and failed[0] == 0:
        failed[0] = _svod_j + 1
    l[_svod_j, _svod_j] = math.sqrt(total)


def _cholesky_column(l, _svod_j):  # type: ignore[no-untyped-def]  # noqa: E741
    """Column ``j`` below the diagonal, a work item per row."""
    n = l.shape[0]
    for r in prange(n - 1 - _svod_j):
        i = _svod_j + 1 + r
        total = l[i, _svod_j]
        for k in range(_svod_j):
            total = total - l[i, k] * l[_svod_j, k]
        l[i, _svod_j] = total / l[_svod_j, _svod_j]


def _cholesky_rows(rows, l, _svod_j, width: Const[int]):  # type: ignore[no-untyped-def]  # noqa: E741
    """The rows of panel ``j`` left of it, transposed: ``rows[k, c] = l[j * width + c, k]`` (0 past the last
    row), so that ``_cholesky_products`` reads them along ``c``, as a matmul reads its right operand."""
    n = l.shape[0]
    first = _svod_j * width
    for k in prange(first):
        for c in range(rows.shape[1]):
            rows[k, c] = l[first + c, k] if first + c < n else 0.0


def _cholesky_products(products, l, rows, _svod_j, width: Const[int]):  # type: ignore[no-untyped-def]  # noqa: E741
    """What the columns left of panel ``j`` take from its columns, in the rows from its first down:
    ``products[r, c]`` = the sum over ``k`` left of the panel of ``l[first + r, k] * l[first + c, k]``, a
    matmul's tiles (it writes a buffer of its own: the sums read ``l``)."""
    n = l.shape[0]
    first = _svod_j * width
    for r in prange(n - first):
        for c in range(products.shape[1]):
            total = 0.0
            for k in range(first):
                total += l[first + r, k] * rows[k, c]
            products[r, c] = total


def _cholesky_panel(l, products, failed, _svod_j, width: Const[int]):  # type: ignore[no-untyped-def]  # noqa: E741
    """Panel ``j``'s diagonal block in one work item, column by column: each diagonal element the square root of
    what is left of it (where that is not positive, or NaN: potrf tests ``not > 0``, ``failed`` records the
    leading minor's order if none was before), the block's rows below it divided by it."""
    n = l.shape[0]
    first = _svod_j * width
    last = min(first + width, n)
    for j in range(first, last):
        total = _left(l, products, j, j, first)
        if not total > 0 and failed[0] == 0:
            failed[0] = j + 1
        pivot = math.sqrt(total)
        l[j, j] = pivot
        for i in range(j + 1, last):
            l[i, j] = _left(l, products, i, j, first) / pivot


def _cholesky_below(l, products, _svod_j, width: Const[int]):  # type: ignore[no-untyped-def]  # noqa: E741
    """The rows below panel ``j``'s diagonal block, in its columns, a work item per row."""
    n = l.shape[0]
    first = _svod_j * width
    last = min(first + width, n)
    for r in prange(n - last):
        i = last + r
        for j in range(first, last):
            l[i, j] = _left(l, products, i, j, first) / l[j, j]


@func
def _left(l, products, i, j, first):  # type: ignore[no-untyped-def]  # noqa: E741
    """What is left of ``l[i, j]`` (``j`` a column of the panel from ``first``) once the columns left of the
    panel (``products``) and the panel's columns left of ``j`` have taken theirs."""
    part = l[i, j] - products[i - first, j - first]
    for k in range(first, j):
        part = part - l[i, k] * l[j, k]
    return part


@functools.cache
def kernel_of(fn: Callable[..., None], name: str, last: int) -> Kernel:
    """The kernel of ``fn`` for matrices of the sizes its ``shaped`` copies give: its sizes constant (each size
    compiles once, and its accesses are proven in bounds, within 32-bit indices where a device has no
    others), its column variable bounded by the plan loop's values, 0 to ``last`` (and a tournament's ``last``
    index by 1 to ``last + 1``). Its scalars are named
    ``_svod_...``: a plan binds a kernel's variables by name, so a ``k`` would be the user's loop ``for k in
    ...`` around the call."""
    parameters = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    bounds: dict[str, tuple[int, int]] = {v: (0, max(last, 0)) for v in ("_svod_k", "_svod_j") if v in parameters}
    if "last" in parameters:  # a tournament's last index (linalg_eigen's ``partner``), one past the rounds
        bounds["last"] = (1, max(last, 0) + 1)
    return Kernel(fn, name=name, static_shapes=True, bounds=bounds)


def _kernel(fn_name: str, n: int, width: int = 1) -> Kernel:
    """The kernel of function ``fn_name`` of this module for ``n`` x ``n`` matrices (``kernel_of``), its column
    variable numbering panels of ``width`` columns (so that ``width`` times it is a column: the proofs of its
    accesses need the bound)."""
    return kernel_of(globals()[f"_{fn_name}"], f"linalg_{fn_name}", (n - 1) // width)


# ---- plan steps ------------------------------------------------------------------------------------------------

def panel_columns(caps: DeviceCaps) -> int:
    """How many columns a panel of the LU factorisation has (``_panel``, one work item, factors them; then
    ``_right`` updates the columns right of them): each panel is two launches, so on a CPU 32 columns take a
    200 x 200 matrix's 400 launches down to 14 (PoCL's included). A GPU (its local memory dedicated) takes one
    column a panel: its launches cost little, and one of its threads would be slow at a panel's serial work;
    so does a device that stops a work item's loops, so that the one work item's turns stay a column's."""
    return 1 if caps.max_loop_turns is not None or caps.dedicated_local_memory else PANEL_COLUMNS


def result_dtype(*operands: np.dtype) -> np.dtype:
    """The dtype NumPy's ``np.linalg`` functions compute operands of ``operands``' dtypes in: single precision
    where all are float32 or complex64, else double (integers and booleans become float64); complex where one
    is."""
    single = all(np.dtype(d) in (np.float32, np.complex64) for d in operands)
    if any(np.dtype(d).kind == "c" for d in operands):
        return np.dtype(np.complex64 if single else np.complex128)
    return np.dtype(np.float32 if single else np.float64)


def refusal(operands: list[np.dtype], shape: tuple[int, ...], caps: DeviceCaps, kind: str = "") -> str | None:
    """Why svod computes no ``np.linalg`` function ``kind`` of operands of ``operands``' dtypes, the first of
    ``shape`` (which must be square but for ``RECTANGULAR``'s), on a device of ``caps``, or None where it
    does. The Jacobi sweeps' kernels read indices from memory and loop over whole columns in one work item:
    a device that stops a work item's loops (WebGPU's, which also index in 32 bits) refuses them."""
    if kind in JACOBI and caps.max_loop_turns is not None:
        return (f"svod's Jacobi sweeps (eigh, eigvalsh, svd, pinv) need a device that lets a work item's loops "
                f"run their course, and this one stops them after {caps.max_loop_turns} turns")
    square = kind not in RECTANGULAR
    if kind in SCHUR and caps.max_loop_turns is not None:
        return (f"svod's QR steps (eig, eigvals) run in one work item and need a device that lets its loops run "
                f"their course, and this one stops them after {caps.max_loop_turns} turns")
    for dtype in map(np.dtype, operands):
        if dtype.kind == "c" and kind not in COMPLEX:
            eigensystems = " (their real eigensystems)" if kind in SCHUR else ""
            return f"svod computes {kind or 'np.linalg'} of real matrices only{eigensystems}, not of {dtype.name} ones"
        if dtype.kind not in "biufc" or dtype == np.float16:
            return f"array type {dtype.name} is unsupported in linalg (NumPy raises TypeError)"
    dtype = result_dtype(*operands)
    if len(shape) != 2:
        return (f"svod computes it of one matrix (2-D), not of a {len(shape)}-D array"
                + (" (a stack of matrices: a call per matrix)" if len(shape) > 2 else ""))
    if square and shape[0] != shape[1]:
        return f"Last 2 dimensions of the array must be square, not {shape[0]}x{shape[1]} (NumPy raises LinAlgError)"
    if dtype in (np.float64, np.complex128) and dtypes.float64 not in caps.element_dtypes:
        return "the device holds no float64, which NumPy computes these operands in (astype(np.float32) first)"
    return None


@dataclass
class Factoring:
    """The steps of one ``np.linalg`` function of the square matrix in plan buffer ``source`` (``n`` x ``n``).
    Its ``info`` buffer (int32, one element) holds LAPACK's info of the factorisation's last run: the column
    of its first zero pivot, counted from 1, or 0 (the determinants read it); ``failed`` the first such
    number of a run (the plan's failure flag: read and cleared after each run, so a failure at any turn of a
    loop around the factorisation raises), or the order of the first leading minor of a Cholesky
    factorisation that is not positive."""

    plan: ExecutionPlan
    source: int
    n: int
    dtype: np.dtype
    """The float or complex type it computes in (``result_dtype``)."""
    complexes: set[int] = field(default_factory=set)
    """The plan's buffers of complex arrays (each its float view's, twice as long); its own are added."""

    def __post_init__(self) -> None:
        self.info = self.scratch(np.dtype(np.int32), 1)
        self.failed = self.scratch(np.dtype(np.int32), 1)
        self.rows = self.scratch(np.dtype(np.int32), self.n)
        """Where the pivoting moves each row: row ``i`` of the factors is row ``rows[i]`` of the matrix."""

    def scratch(self, dtype: np.dtype, size: int) -> int:
        """A new plan buffer of ``size`` elements of ``dtype`` (a complex type's: of its parts, twice as many)."""
        element = COMPLEX_PARTS.get(np.dtype(dtype), np.dtype(dtype))
        parts = 1 if element == dtype else 2
        slot = self.plan.add_buffer(Buffer(self.plan.device, dtypes.from_numpy(element), max(size, 1) * parts))
        if parts == 2:
            self.complexes.add(slot)
        return slot

    def add(self, kernel: str, shapes: list[tuple[int, ...]], slots: list[int], **scalars: Any) -> int:
        """Add kernel ``kernel`` over plan buffers ``slots`` of ``shapes``, its scalars ``scalars``."""
        complexes = frozenset(p for p, slot in enumerate(slots) if slot in self.complexes)
        made = _kernel(kernel, self.n, scalars.get("width", 1))
        return self.plan.add_kernel(made.shaped(*shapes, complexes=complexes), slots, **scalars)

    def lu(self) -> tuple[list[int], int, int]:
        """The LU factorisation: its steps, and the plan buffers of the factors and of the pivots."""
        n, square = self.n, (self.n, self.n)
        lu, pivots = self.scratch(self.dtype, n * n), self.scratch(np.dtype(np.int32), n)
        steps = [self.add("clear", [(1,)], [self.info])]
        if n == 0:
            return steps, lu, pivots
        steps.append(self.add("start", [square, (n,), square], [lu, self.rows, self.source]))
        width = panel_columns(self.plan.device.caps)
        last = (n - 1) // width
        panel: list[Any] = ["panel", [square, (n,), (n,), (1,), (1,)], [lu, pivots, self.rows, self.info, self.failed]]
        if last > 0:
            body = [self.add(*panel, _svod_k=COLUMN_VARIABLE, width=width),
                    self.add("right", [square], [lu], _svod_k=COLUMN_VARIABLE, width=width)]
            steps.append(self.plan.loop(COLUMN_VARIABLE, 0, last, body=body))
        steps.append(self.add(*panel, _svod_k=last, width=width))
        return steps, lu, pivots

    def solve(self, out: int, columns: int, b: int | None) -> list[int]:
        """``out`` (``n`` x ``columns``) = the solution for the right-hand sides ``b`` (of its size), or for the
        identity where ``b`` is None (``inv``)."""
        steps, lu, _ = self.lu()
        if self.n == 0 or columns == 0:
            return steps
        shape, square = (self.n, columns), (self.n, self.n)
        if b is None:
            steps.append(self.add("identity", [shape, (self.n,)], [out, self.rows]))
        else:
            steps.append(self.add("permuted", [shape, shape, (self.n,)], [out, b, self.rows]))
        if columns >= BLOCK_COLUMNS:
            steps.append(self.add("substitute", [shape, square], [out, lu]))
        if columns % BLOCK_COLUMNS:
            steps.append(self.add("substitute_rest", [shape, square], [out, lu]))
        return steps

    def determinant(self, sign: int, logdet: int, det: int | None = None) -> list[int]:
        """The steps that write ``sign`` and ``logdet`` (``np.linalg.slogdet``), and from them ``det``
        (``np.linalg.det``) where given; each a one-element buffer of the matrix's float type."""
        steps, lu, pivots = self.lu()
        n = max(self.n, 1)
        narrow = self.dtype == np.float32
        steps.append(self.add("logdet", [(1,), (1,), (n, n), (n,), (1,)], [sign, logdet, lu, pivots, self.info],
                              _svod_n=self.n, narrow=narrow))
        if det is not None:
            steps.append(self.add("det", [(1,), (1,), (1,)], [det, sign, logdet]))
        return steps

    def cholesky(self, out: int) -> list[int]:
        """``out`` = the lower Cholesky factor (zeros above the diagonal): column by column on a device that
        takes panels of one column (``panel_columns``), else panel by panel, what the columns left of a panel
        take from it a matmul (``_cholesky_products``)."""
        n, square = self.n, (self.n, self.n)
        if n == 0:
            return []
        steps = [self.add("lower", [square, square], [out, self.source])]
        width = min(panel_columns(self.plan.device.caps), n)
        if width == 1:
            diagonal: list[Any] = ["cholesky_diagonal", [square, (1,)], [out, self.failed]]
            if n > 1:
                body = [self.add(*diagonal, _svod_j=COLUMN_VARIABLE),
                        self.add("cholesky_column", [square], [out], _svod_j=COLUMN_VARIABLE)]
                steps.append(self.plan.loop(COLUMN_VARIABLE, 0, n - 1, body=body))
            steps.append(self.add(*diagonal, _svod_j=n - 1))
            return steps
        panel, each = (n, width), {"_svod_j": COLUMN_VARIABLE, "width": width}
        rows, products = self.scratch(self.dtype, n * width), self.scratch(self.dtype, n * width)
        body = [self.add("cholesky_rows", [panel, square], [rows, out], **each),
                self.add("cholesky_products", [panel, square, panel], [products, out, rows], **each),
                self.add("cholesky_panel", [square, panel, (1,)], [out, products, self.failed], **each),
                self.add("cholesky_below", [square, panel], [out, products], **each)]
        steps.append(self.plan.loop(COLUMN_VARIABLE, 0, (n - 1) // width + 1, body=body))
        return steps


_GENERAL = ("Array must not contain infs or NaNs (1), complex eigenvalues (2: svod computes real eigensystems "
            "only, where NumPy returns complex arrays) or Eigenvalues did not converge (3)")
_GENERAL_WHY = "failure {value}"
_FAILED = {"np.linalg.cholesky": ("Matrix is not positive definite", "the leading minor {value}, counted from 1"),
           "np.linalg.eigh": ("Eigenvalues did not converge", "the Jacobi sweeps did not settle"),
           "np.linalg.eigvalsh": ("Eigenvalues did not converge", "the Jacobi sweeps did not settle"),
           "np.linalg.svd": ("SVD did not converge", "an element is NaN or infinite, or the sweeps did not settle"),
           "np.linalg.pinv": ("SVD did not converge", "an element is NaN or infinite, or the sweeps did not settle"),
           "np.linalg.eig": (_GENERAL, _GENERAL_WHY), "np.linalg.eigvals": (_GENERAL, _GENERAL_WHY)}
"""What NumPy says of a failed factorisation, where it is not ``Singular matrix``, and what failed."""


def failure_message(call: str, where: str) -> str:
    """What a run raises ``LinAlgError`` with where ``call``'s factorisation at ``where`` (``file:line``) fails:
    the plan's failure flag's message (``ExecutionPlan.add_failure_flag``; ``{value}``: LAPACK's info)."""
    said, what = _FAILED.get(call, ("Singular matrix", "the zero pivot in column {value}, counted from 1"))
    return f"{where}: {call}: {said} ({what})"
