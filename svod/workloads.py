"""The workloads svod's demo, its tests and its benchmarks share: kernels each built once, the natural way,
with ``KernelBuilder``. They are users of svod, not part of its front end, so this module sits above
``svod.frontend`` (and below ``svod.cli``, whose demo runs them) in the import layers.

A ``Workload`` is one computation: the svod kernels that compute it (its steps), the arrays they run on,
and numpy's answer that checks it. ``check`` runs one through ``svod.run`` and compares; ``load`` compiles
its steps and puts its arrays in Buffers on a device, ready to call again and again (for timing). Kernels
that are only ever built, never checked against numpy (a tiny kernel for call overhead, a compute-bound one
for thread scaling), are plain functions returning the kernel's AST. The benchmark suite's kernels are
also written here as ``@svod.kernel`` functions (``PYTHON_KERNELS``, ``written_in_python``): they build
the same kernels as the builder's, and the benchmark times those.

The benchmark's peers (numba, tinygrad) are not here: they live beside the package, in ``benchmarks/``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from svod.device import Buffer, Device
from svod.dtype import dtypes
from svod.errors import SvodError
from svod.frontend import api
from svod.frontend.builder import KernelBuilder
from svod.frontend.pykernel import Kernel
from svod.frontend.pykernel import kernel as python_function
from svod.frontend.pylang import atomic_add, inf, math, prange
from svod.ir import AxisKind, Ops, UOp, kernel_label, substitute
from svod.runtime.kernel import CachedKernel


@dataclass(frozen=True)
class WorkloadStep:
    """One svod kernel of a workload, run on ``Workload.arrays`` at the positions ``args``."""

    ast: UOp
    args: tuple[int, ...]


@dataclass
class Workload:
    name: str
    steps: list[WorkloadStep]
    output: np.ndarray
    inputs: list[np.ndarray]
    numpy: Callable[[], np.ndarray]
    """numpy's answer, computed when asked (a benchmark times it)."""
    scratch: list[np.ndarray] = field(default_factory=list)
    tolerance: float = 1e-4
    """Relative and absolute; 0 asks for the exact same values."""
    var_vals: dict[str, int] = field(default_factory=dict)
    family: str = ""
    """The kernel the workload's steps spell, whatever its size or types (``matmul1024`` and ``matmul_f64``
    are ``matmul``s): the key of its Python kernels and of the benchmark peers' spellings. By default the
    name without a trailing size."""

    def __post_init__(self) -> None:
        self.family = self.family or self.name.rstrip("0123456789")

    def step_vars(self, step: WorkloadStep) -> dict[str, int]:
        """The values of the variables ``step``'s kernel has (``var_vals`` holds every step's)."""
        names = {u.arg[0] for u in step.ast.toposort() if u.op is Ops.DEFINE_VAR}
        return {name: value for name, value in self.var_vals.items() if name in names}

    @property
    def arrays(self) -> list[np.ndarray]:
        """What the steps index: the output, the inputs, then scratch arrays between steps."""
        return [self.output, *self.inputs, *self.scratch]


def single(name: str, ast: UOp, output: np.ndarray, inputs: list[np.ndarray], numpy: Callable[[], np.ndarray],
           tolerance: float = 1e-4, var_vals: dict[str, int] | None = None, family: str = "") -> Workload:
    """A workload computed by one svod kernel over every array in order."""
    return Workload(name, [WorkloadStep(ast, tuple(range(1 + len(inputs))))], output, inputs, numpy,
                    tolerance=tolerance, var_vals=var_vals or {}, family=family)


def _rng() -> np.random.Generator:
    return np.random.default_rng(14)


# ---- workloads: kernels with their arrays and numpy's answer -------------------------------------------------

def saxpy(n: int) -> Workload:
    """``2.5 * x + y`` over a symbolic ``n``: the bandwidth-bound kernel (the benchmark's triad)."""
    k = KernelBuilder("saxpy")
    size = k.var("n", 1, 1 << 28)
    out, x, y = (k.buffer(dtypes.float32, size) for _ in range(3))
    i = k.range(size)
    k.store(out[i], x[i] * 2.5 + y[i])
    rng = _rng()
    x_np, y_np = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    return single("saxpy", k.build(), np.zeros(n, np.float32), [x_np, y_np], lambda: x_np * np.float32(2.5) + y_np,
                  tolerance=1e-5, var_vals={"n": n})


def row_sum(rows: int, cols: int) -> Workload:
    k = KernelBuilder("row_sum")
    out, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, (rows, cols))
    r, c = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[r], x[r, c].reduce(c))
    data = _rng().standard_normal((rows, cols)).astype(np.float32)
    return single("row_sum", k.build(), np.zeros(rows, np.float32), [data], lambda: data.sum(axis=1), tolerance=1e-3)


def softmax(rows: int, cols: int) -> Workload:
    k = KernelBuilder("softmax")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, c = k.range(rows), k.range(cols)
    j1, j2 = k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    top = x[r, j1].reduce(j1, op=Ops.MAX)
    top = (UOp.const(dtypes.float32, -inf) < top).where(top, -inf)  # Python's max(-inf, top): NaN-free
    total = (x[r, j2] - top).exp().reduce(j2)
    k.store(out[r, c], (x[r, c] - top).exp() / total)
    data = _rng().standard_normal((rows, cols)).astype(np.float32)

    def reference() -> np.ndarray:
        e = np.exp(data - data.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return single("softmax", k.build(), np.zeros_like(data), [data], reference)


def layernorm(rows: int, cols: int) -> Workload:
    k = KernelBuilder("layernorm")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, c = k.range(rows), k.range(cols)
    j1, j2 = k.range(cols, AxisKind.REDUCE), k.range(cols, AxisKind.REDUCE)
    mean = x[r, j1].reduce(j1) * (1.0 / cols)
    centered = x[r, j2] - mean
    var = (centered * centered).reduce(j2) * (1.0 / cols)
    k.store(out[r, c], (x[r, c] - mean) * (var + 1e-5).rsqrt())
    data = _rng().standard_normal((rows, cols)).astype(np.float32)

    def reference() -> np.ndarray:
        m = data.mean(axis=1, keepdims=True)
        return (data - m) / np.sqrt(data.var(axis=1, keepdims=True) + 1e-5)

    return single("layernorm", k.build(), np.zeros_like(data), [data], reference)


def conv2d(channels: int, size: int) -> Workload:
    k = KernelBuilder("conv2d")
    out = k.buffer(dtypes.float32, (channels, size, size))
    x, w = k.buffer(dtypes.float32, (channels, size, size)), k.buffer(dtypes.float32, (channels, channels, 3, 3))
    o, y, xx = k.range(channels), k.range(size), k.range(size)
    ci, ky, kx = k.range(channels, AxisKind.REDUCE), k.range(3, AxisKind.REDUCE), k.range(3, AxisKind.REDUCE)
    iy, ix = y + ky - 1, xx + kx - 1
    inside = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
    k.store(out[o, y, xx], (inside.where(x[ci, iy, ix], 0.0) * w[o, ci, ky, kx]).reduce(ci, ky, kx))
    rng = _rng()
    data = rng.standard_normal((channels, size, size)).astype(np.float32)
    weight = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32)

    def reference() -> np.ndarray:
        padded = np.pad(data, ((0, 0), (1, 1), (1, 1)))
        columns = np.stack([padded[:, dy:dy + size, dx:dx + size] for dy in range(3) for dx in range(3)], axis=1)
        return (weight.reshape(channels, -1) @ columns.reshape(-1, size * size)).reshape(channels, size, size)

    return single("conv2d", k.build(), np.zeros_like(data), [data, weight], reference, tolerance=1e-3)


def gather_kernel(rows: int, table_rows: int, clamped: bool = False) -> UOp:
    """``out[r, :] = table[ids[r], :]``, 64 columns: the ids come from memory, so svod checks each row at
    run time; ``clamped`` clamps the id by hand instead (nothing left to check)."""
    k = KernelBuilder("gather_clamped" if clamped else "gather")
    out, table = k.buffer(dtypes.float32, (rows, 64)), k.buffer(dtypes.float32, (table_rows, 64))
    ids = k.buffer(dtypes.int32, rows)
    r, c = k.range(rows), k.range(64)
    row = ids[r].maximum(0).minimum(table_rows - 1) if clamped else ids[r]
    k.store(out[r, c], table[row, c])
    return k.build()


def gather(rows: int, table_rows: int) -> Workload:
    rng = _rng()
    data = rng.standard_normal((table_rows, 64)).astype(np.float32)
    index = rng.integers(0, table_rows, rows).astype(np.int32)
    return single("gather", gather_kernel(rows, table_rows), np.zeros((rows, 64), np.float32), [data, index],
                  lambda: data[index])


def histogram(count: int, bins: int) -> Workload:
    k = KernelBuilder("histogram")
    counts, values = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, count)
    i = k.range(count)
    k.atomic_add(counts[values[i]], 1)
    data = _rng().integers(0, bins, count).astype(np.int32)
    return single("histogram", k.build(), np.zeros(bins, np.int32), [data],
                  lambda: np.bincount(data, minlength=bins).astype(np.int32), tolerance=0)


def cumsum(rows: int, cols: int) -> Workload:
    k = KernelBuilder("cumsum")
    out, x = k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, (rows, cols))
    r, j = k.range(rows), k.range(cols, AxisKind.LOOP)
    k.store(out[r, j], (j > 0).where(out[r, (j - 1).maximum(0)], 0.0) + x[r, j])
    data = _rng().standard_normal((rows, cols)).astype(np.float32)
    return single("cumsum", k.build(), np.zeros_like(data), [data], lambda: np.cumsum(data, axis=1), tolerance=1e-3)


def transpose(n: int) -> Workload:
    k = KernelBuilder("transpose")
    out, x = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    r, c = k.range(n), k.range(n)
    k.store(out[c, r], x[r, c])
    data = _rng().standard_normal((n, n)).astype(np.float32)
    return single("transpose", k.build(), np.zeros_like(data), [data], lambda: np.ascontiguousarray(data.T),
                  tolerance=0)


def matmul(n: int, depth: int | None = None, columns: int | None = None, dtype: type = np.float32,
           name: str | None = None) -> Workload:
    """``a @ b`` for an ``n`` x ``depth`` ``a`` and a ``depth`` x ``columns`` ``b`` (square by default)."""
    depth, columns = depth or n, columns or n
    k = KernelBuilder(name or f"matmul{n}")
    element = dtypes.from_numpy(np.dtype(dtype))
    out, a, b = k.buffer(element, (n, columns)), k.buffer(element, (n, depth)), k.buffer(element, (depth, columns))
    i, j, r = k.range(n), k.range(columns), k.range(depth, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    rng = _rng()
    x: np.ndarray = rng.standard_normal((n, depth)).astype(dtype)
    y: np.ndarray = rng.standard_normal((depth, columns)).astype(dtype)
    return single(name or f"matmul{n}", k.build(), np.zeros((n, columns), dtype), [x, y], lambda: x @ y,
                  tolerance=1e-3, family="matmul")


def batched_matmul(batch: int, n: int) -> Workload:
    """``a @ b`` for a stack of ``batch`` ``n`` x ``n`` matrices each."""
    k = KernelBuilder("batched_matmul")
    out, a, b = (k.buffer(dtypes.float32, (batch, n, n)) for _ in range(3))
    s, i, j, r = k.range(batch), k.range(n), k.range(n), k.range(n, AxisKind.REDUCE)
    k.store(out[s, i, j], (a[s, i, r] * b[s, r, j]).reduce(r))
    rng = _rng()
    x, y = (rng.standard_normal((batch, n, n)).astype(np.float32) for _ in range(2))
    return single("batched_matmul", k.build(), np.zeros_like(x), [x, y], lambda: x @ y, tolerance=1e-3)


def matvec(rows: int, cols: int) -> Workload:
    """``a @ x``: one pass over the matrix, bound by memory."""
    k = KernelBuilder("matvec")
    out, a, x = k.buffer(dtypes.float32, rows), k.buffer(dtypes.float32, (rows, cols)), k.buffer(dtypes.float32, cols)
    i, j = k.range(rows), k.range(cols, AxisKind.REDUCE)
    k.store(out[i], (a[i, j] * x[j]).reduce(j))
    rng = _rng()
    matrix, vector = rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    return single("matvec", k.build(), np.zeros(rows, np.float32), [matrix, vector], lambda: matrix @ vector,
                  tolerance=1e-3)


def dense_layer(batch: int, inputs: int, outputs: int, relu: bool) -> UOp:
    """``x @ w + bias``, through a ReLU when ``relu``: one layer of a multilayer perceptron."""
    k = KernelBuilder("dense_relu" if relu else "dense")
    out, x = k.buffer(dtypes.float32, (batch, outputs)), k.buffer(dtypes.float32, (batch, inputs))
    w, bias = k.buffer(dtypes.float32, (inputs, outputs)), k.buffer(dtypes.float32, outputs)
    i, j, r = k.range(batch), k.range(outputs), k.range(inputs, AxisKind.REDUCE)
    value = (x[i, r] * w[r, j]).reduce(r) + bias[j]
    k.store(out[i, j], (value < 0.0).where(0.0, value) if relu else value)  # Python's max(value, 0.0)
    return k.build()


def mlp(batch: int, widths: tuple[int, ...]) -> Workload:
    """A multilayer perceptron's forward pass: a ``dense_layer`` per pair of neighbouring ``widths``, each
    through a ReLU but the last. The arrays: the output, the input, each layer's weights and bias, then a
    scratch array per hidden layer."""
    rng = _rng()
    layers = list(itertools.pairwise(widths))
    x = rng.standard_normal((batch, widths[0])).astype(np.float32)
    parameters = [array for fan_in, fan_out in layers for array in (
        (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32),
        rng.standard_normal(fan_out).astype(np.float32))]
    hidden = [np.zeros((batch, width), np.float32) for width in widths[1:-1]]
    first_scratch = 2 + len(parameters)
    sources = [1, *range(first_scratch, first_scratch + len(hidden))]
    targets = [*range(first_scratch, first_scratch + len(hidden)), 0]
    steps = [WorkloadStep(dense_layer(batch, fan_in, fan_out, relu=layer < len(layers) - 1),
                  (targets[layer], sources[layer], 2 + 2 * layer, 3 + 2 * layer))
             for layer, (fan_in, fan_out) in enumerate(layers)]

    def reference() -> np.ndarray:
        h = x
        for layer in range(len(layers)):
            h = h @ parameters[2 * layer] + parameters[2 * layer + 1]
            h = np.maximum(h, 0) if layer < len(layers) - 1 else h
        return h

    return Workload("mlp", steps, np.zeros((batch, widths[-1]), np.float32), [x, *parameters], reference,
                    scratch=hidden, tolerance=1e-3)


def attention(length: int, width: int) -> Workload:
    """One head, ``softmax(q @ k.T / sqrt(width)) @ v``, as the three kernels it is made of: the scores, the
    softmax of each row, and the probabilities times ``v``."""
    k = KernelBuilder("attention_scores")
    scores = k.buffer(dtypes.float32, (length, length))
    q, key = k.buffer(dtypes.float32, (length, width)), k.buffer(dtypes.float32, (length, width))
    i, j, d = k.range(length), k.range(length), k.range(width, AxisKind.REDUCE)
    k.store(scores[i, j], (q[i, d] * key[j, d]).reduce(d) * (1.0 / np.sqrt(width)))
    scores_ast = k.build()

    probabilities_ast = softmax(length, length).steps[0].ast

    k = KernelBuilder("attention_values")
    out, p = k.buffer(dtypes.float32, (length, width)), k.buffer(dtypes.float32, (length, length))
    v = k.buffer(dtypes.float32, (length, width))
    i, e, j = k.range(length), k.range(width), k.range(length, AxisKind.REDUCE)
    k.store(out[i, e], (p[i, j] * v[j, e]).reduce(j))
    values_ast = k.build()

    rng = _rng()
    qx, kx, vx = (rng.standard_normal((length, width)).astype(np.float32) for _ in range(3))

    def reference() -> np.ndarray:
        logits = qx @ kx.T / np.float32(np.sqrt(width))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True)) @ vx

    steps = [WorkloadStep(scores_ast, (4, 1, 2)), WorkloadStep(probabilities_ast, (5, 4)),
             WorkloadStep(values_ast, (0, 5, 3))]
    return Workload("attention", steps, np.zeros_like(qx), [qx, kx, vx], reference,
                    scratch=[np.zeros((length, length), np.float32) for _ in range(2)], tolerance=1e-3)


# ---- kernels only built: no arrays, no numpy answer here -----------------------------------------------------

def affine(scale: float = 2.0, limit: int = 1 << 28) -> UOp:
    """``y = scale * x + 1`` over a symbolic ``n`` up to ``limit``; each ``scale`` is another kernel to
    compile."""
    k = KernelBuilder("affine")
    n = k.var("n", 1, limit)
    y, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(y[i], x[i] * scale + 1.0)
    return k.build()


def sum_of_squares(limit: int) -> UOp:
    """``total = sum(y * y)`` over a symbolic ``n`` up to ``limit``."""
    k = KernelBuilder("sum_of_squares")
    n = k.var("n", 1, limit)
    total, y = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, n)
    r = k.range(n, AxisKind.REDUCE)
    k.store(total[0], (y[r] * y[r]).reduce(r))
    return k.build()


def total(size: int) -> UOp:
    """The sum of ``size`` float32 into one element."""
    k = KernelBuilder("sum")
    out, x = k.buffer(dtypes.float32, 1), k.buffer(dtypes.float32, size)
    r = k.range(size, AxisKind.REDUCE)
    k.store(out[0], x[r].reduce(r))
    return k.build()


def compute_bound(name: str, size: int, rounds: int = 8) -> UOp:
    """``rounds`` sines of an affine map per element: many instructions per byte moved."""
    k = KernelBuilder(name)
    out, x = k.buffer(dtypes.float32, size), k.buffer(dtypes.float32, size)
    i = k.range(size)
    v = x[i]
    for _ in range(rounds):
        v = (v * 1.0001 + 0.5).sin()
    k.store(out[i], v)
    return k.build()


def tiny(index: int) -> UOp:
    """16 elements plus ``index``: a kernel whose cost is the call around it."""
    k = KernelBuilder(f"tiny{index}")
    out, x = k.buffer(dtypes.float32, 16), k.buffer(dtypes.float32, 16)
    i = k.range(16)
    k.store(out[i], x[i] + float(index))
    return k.build()


# ---- running and checking ------------------------------------------------------------------------------------

def difference(result: np.ndarray, want: np.ndarray, tolerance: float) -> tuple[bool, float]:
    """Whether ``result`` matches ``want`` within ``tolerance`` (relative and absolute; 0: exactly), and the
    largest absolute difference."""
    if result.shape != want.shape:
        return False, float("inf")
    error = float(np.max(np.abs(result.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    if tolerance == 0:
        return bool(np.array_equal(result, want)), error
    return bool(np.allclose(result, want, rtol=tolerance, atol=tolerance)), error


def compare(workload: Workload, result: np.ndarray) -> tuple[bool, float]:
    """``difference`` from numpy's answer, within the workload's tolerance."""
    return difference(result, workload.numpy(), workload.tolerance)


def agrees(workload: Workload, result: np.ndarray, who: str) -> None:
    """``result`` matches numpy within the workload's tolerance, or a SvodError says by how much."""
    ok, error = compare(workload, result)
    if not ok:
        raise SvodError(f"{who}'s result disagrees with numpy", kernel=workload.name, stage="check", value=error)


def check(workload: Workload, device: Device | str) -> None:
    """Run once on ``device`` (copies of the arrays) and compare with numpy; a wrong result is an error."""
    arrays = [a.copy() for a in workload.arrays]
    for step in workload.steps:
        api.run(step.ast, [arrays[a] for a in step.args], device=device, **workload.step_vars(step))
    agrees(workload, arrays[0], "svod")


@dataclass(frozen=True)
class Loaded:
    """A workload compiled for a device, its arrays copied into Buffers there: calling it runs every step."""

    buffers: list[Buffer]
    calls: list[tuple[CachedKernel, list[Buffer], dict[str, int]]]
    """Each step's kernel, its buffers and the values of its variables."""
    shape: tuple[int, ...]
    """The output's shape (a Buffer is flat)."""

    def __call__(self) -> None:
        for kernel, args, var_vals in self.calls:
            kernel(args, var_vals)

    def output(self) -> np.ndarray:
        """A copy of the output, in the workload's shape."""
        return self.buffers[0].numpy().reshape(self.shape)


def load(workload: Workload, device: Device | str) -> Loaded:
    buffers = [Buffer.from_numpy(a, device) for a in workload.arrays]
    calls = [(api.compile(step.ast, device), [buffers[a] for a in step.args], workload.step_vars(step))
             for step in workload.steps]
    return Loaded(buffers, calls, workload.output.shape)


# ---- the same kernels as Python functions (``@svod.kernel``) ---------------------------------------------------
# Written as a numba user writes them, with svod.prange where the builder's ranges are parallel. The sizes are
# constants of each kernel (static_shapes), as in the builder versions above, so both render to the same source.

python_kernel = functools.partial(python_function, static_shapes=True)


@python_kernel
def softmax_py(out, x):  # type: ignore[no-untyped-def]
    rows, cols = x.shape
    for r in prange(rows):
        top = -inf
        for c in range(cols):
            top = max(top, x[r, c])
        total = 0.0
        for c in range(cols):
            total += math.exp(x[r, c] - top)
        for c in prange(cols):
            out[r, c] = math.exp(x[r, c] - top) / total


@python_kernel
def layernorm_py(out, x):  # type: ignore[no-untyped-def]
    rows, cols = x.shape
    for r in prange(rows):
        mean = 0.0
        for c in range(cols):
            mean += x[r, c]
        mean *= 1.0 / cols
        var = 0.0
        for c in range(cols):
            var += (x[r, c] - mean) * (x[r, c] - mean)
        var *= 1.0 / cols
        for c in prange(cols):
            out[r, c] = (x[r, c] - mean) * math.rsqrt(var + 1e-5)


@python_kernel
def conv2d_py(out, x, w):  # type: ignore[no-untyped-def]
    channels, size, _ = x.shape
    for o in prange(channels):
        for y in prange(size):
            for xx in prange(size):
                acc = 0.0
                for ci in range(channels):
                    for ky in range(3):
                        for kx in range(3):
                            iy, ix = y + ky - 1, xx + kx - 1
                            inside = iy >= 0 and iy < size and ix >= 0 and ix < size
                            acc += (x[ci, iy, ix] if inside else 0.0) * w[o, ci, ky, kx]
                out[o, y, xx] = acc


@python_kernel
def gather_py(out, table, ids):  # type: ignore[no-untyped-def]
    for r in prange(ids.shape[0]):
        for c in prange(table.shape[1]):
            out[r, c] = table[ids[r], c]


@python_kernel
def histogram_py(counts, values):  # type: ignore[no-untyped-def]
    for i in prange(values.shape[0]):
        atomic_add(counts, values[i], 1)


@python_kernel
def cumsum_py(out, x):  # type: ignore[no-untyped-def]
    rows, cols = x.shape
    for r in prange(rows):
        for c in range(cols):
            out[r, c] = (out[r, max(c - 1, 0)] if c > 0 else 0.0) + x[r, c]


@python_kernel
def transpose_py(out, x):  # type: ignore[no-untyped-def]
    rows, cols = x.shape
    for r in prange(rows):
        for c in prange(cols):
            out[c, r] = x[r, c]


@python_kernel
def matmul_py(out, a, b):  # type: ignore[no-untyped-def]
    n, depth = a.shape
    for i in prange(n):
        for j in prange(b.shape[1]):
            acc = 0.0
            for r in range(depth):
                acc += a[i, r] * b[r, j]
            out[i, j] = acc


@python_kernel
def batched_matmul_py(out, a, b):  # type: ignore[no-untyped-def]
    batch, n, depth = a.shape
    for s in prange(batch):
        for i in prange(n):
            for j in prange(b.shape[2]):
                acc = 0.0
                for r in range(depth):
                    acc += a[s, i, r] * b[s, r, j]
                out[s, i, j] = acc


@python_kernel
def matvec_py(out, a, x):  # type: ignore[no-untyped-def]
    rows, cols = a.shape
    for i in prange(rows):
        acc = 0.0
        for j in range(cols):
            acc += a[i, j] * x[j]
        out[i] = acc


@python_kernel
def dense_relu_py(out, x, w, bias):  # type: ignore[no-untyped-def]
    batch, inputs = x.shape
    for i in prange(batch):
        for j in prange(w.shape[1]):
            acc = 0.0
            for r in range(inputs):
                acc += x[i, r] * w[r, j]
            out[i, j] = max(acc + bias[j], 0.0)


@python_kernel
def dense_py(out, x, w, bias):  # type: ignore[no-untyped-def]
    batch, inputs = x.shape
    for i in prange(batch):
        for j in prange(w.shape[1]):
            acc = 0.0
            for r in range(inputs):
                acc += x[i, r] * w[r, j]
            out[i, j] = acc + bias[j]


@python_kernel
def attention_scores_py(scores, q, k):  # type: ignore[no-untyped-def]
    length, width = q.shape
    for i in prange(length):
        for j in prange(length):
            s = 0.0
            for d in range(width):
                s += q[i, d] * k[j, d]
            scores[i, j] = s * (1.0 / math.sqrt(width))


@python_kernel
def attention_values_py(out, p, v):  # type: ignore[no-untyped-def]
    length, width = v.shape
    for i in prange(length):
        for e in prange(width):
            acc = 0.0
            for j in range(length):
                acc += p[i, j] * v[j, e]
            out[i, e] = acc


# ---- programs of the suite written as Python kernels only (their builder form would be the same kernel) ---------

@python_kernel
def nbody_py(acc, pos, mass):  # type: ignore[no-untyped-def]
    n = pos.shape[0]
    for i in prange(n):
        ax = 0.0
        ay = 0.0
        az = 0.0
        for j in range(n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            inv = math.rsqrt(dx * dx + dy * dy + dz * dz + 1e-3)
            strength = mass[j] * inv * inv * inv
            ax += dx * strength
            ay += dy * strength
            az += dz * strength
        acc[i, 0] = ax
        acc[i, 1] = ay
        acc[i, 2] = az


@python_kernel
def resize_py(out, image):  # type: ignore[no-untyped-def]
    height, width = image.shape
    for y in prange(out.shape[0]):
        for x in prange(out.shape[1]):
            sy = max((y + 0.5) * height / out.shape[0] - 0.5, 0.0)
            sx = max((x + 0.5) * width / out.shape[1] - 0.5, 0.0)
            y0 = max(min(int(sy), height - 1), 0)
            x0 = max(min(int(sx), width - 1), 0)
            y1 = min(y0 + 1, height - 1)
            x1 = min(x0 + 1, width - 1)
            fy = sy - y0
            fx = sx - x0
            top = image[y0, x0] * (1.0 - fx) + image[y0, x1] * fx
            bottom = image[y1, x0] * (1.0 - fx) + image[y1, x1] * fx
            out[y, x] = top * (1.0 - fy) + bottom * fy


@python_kernel
def black_scholes_py(call, price, strike, years):  # type: ignore[no-untyped-def]
    for i in prange(price.shape[0]):
        root = 0.3 * math.sqrt(years[i])
        d1 = (math.log(price[i] / strike[i]) + (0.02 + 0.5 * 0.3 * 0.3) * years[i]) / root
        d2 = d1 - root
        up = 0.5 * (1.0 + math.erf(d1 * 0.7071067811865476))
        down = 0.5 * (1.0 + math.erf(d2 * 0.7071067811865476))
        call[i] = price[i] * up - strike[i] * math.exp(-0.02 * years[i]) * down


@python_kernel
def mandelbrot_py(counts):  # type: ignore[no-untyped-def]
    height, width = counts.shape
    for y in prange(height):
        for x in prange(width):
            cr = -2.0 + 3.0 * x / width
            ci = -1.5 + 3.0 * y / height
            zr = 0.0
            zi = 0.0
            k = 0
            for _ in range(100):
                if zr * zr + zi * zi <= 4.0:
                    zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                    k += 1
            counts[y, x] = k


def nbody(n: int) -> Workload:
    """One step of an n-body simulation: each body's acceleration from every other's mass (softened)."""
    rng = _rng()
    pos, mass = rng.standard_normal((n, 3)).astype(np.float32), rng.uniform(0.5, 1.5, n).astype(np.float32)

    def reference() -> np.ndarray:
        acc = np.zeros((n, 3))
        for start in range(0, n, 256):  # in blocks of bodies: the whole (n, n, 3) would not fit
            d = pos[None, :, :].astype(np.float64) - pos[start:start + 256, None, :]
            inv = 1 / np.sqrt((d * d).sum(axis=2) + 1e-3)
            acc[start:start + 256] = (d * (mass * inv ** 3)[:, :, None]).sum(axis=1)
        return acc.astype(np.float32)

    return _of_python("nbody", nbody_py, np.zeros((n, 3), np.float32), [pos, mass], reference, 1e-3)


def resize(size: int, scale: int = 2) -> Workload:
    """A bilinear resize of a ``size`` square image to ``scale`` times its side (half-pixel centres, edges
    clamped: torch's ``interpolate(mode="bilinear", align_corners=False)``)."""
    image = _rng().standard_normal((size, size)).astype(np.float32)
    side = size * scale

    def reference() -> np.ndarray:
        centres = np.maximum((np.arange(side) + 0.5) * size / side - 0.5, 0.0)
        low = np.minimum(centres.astype(np.int64), size - 1)
        high = np.minimum(low + 1, size - 1)
        frac = centres - low
        rows = image[low] * (1 - frac)[:, None] + image[high] * frac[:, None]
        return (rows[:, low] * (1 - frac) + rows[:, high] * frac).astype(np.float32)

    return _of_python("resize", resize_py, np.zeros((side, side), np.float32), [image], reference, 1e-4)


def black_scholes(n: int) -> Workload:
    """European call prices of ``n`` options (a rate of 2%, a volatility of 30%)."""
    rng = _rng()
    price, strike = rng.uniform(10, 100, n).astype(np.float32), rng.uniform(10, 100, n).astype(np.float32)
    years = rng.uniform(0.1, 2.0, n).astype(np.float32)

    def reference() -> np.ndarray:
        from math import erf
        s, k, t = (a.astype(np.float64) for a in (price, strike, years))
        root = 0.3 * np.sqrt(t)
        d1 = (np.log(s / k) + (0.02 + 0.5 * 0.3 * 0.3) * t) / root
        normal = np.vectorize(lambda v: 0.5 * (1 + erf(v / np.sqrt(2))))
        return (s * normal(d1) - k * np.exp(-0.02 * t) * normal(d1 - root)).astype(np.float32)

    return _of_python("black_scholes", black_scholes_py, np.zeros(n, np.float32), [price, strike, years],
                      reference, 1e-3)


def mandelbrot(height: int, width: int) -> Workload:
    """How many of 100 turns each point of a ``height`` x ``width`` grid over [-2, 1] x [-1.5, 1.5] stays
    within radius 2, in the for/if form (every point runs every turn)."""
    def reference() -> np.ndarray:
        c = (-2.0 + 3.0 * np.arange(width) / width)[None, :] + 1j * (-1.5 + 3.0 * np.arange(height) / height)[:, None]
        z = np.zeros_like(c)
        counts = np.zeros(c.shape, np.int32)
        for _ in range(100):
            inside = z.real * z.real + z.imag * z.imag <= 4.0
            z = np.where(inside, z * z + c, z)
            counts += inside
        return counts

    return _of_python("mandelbrot", mandelbrot_py, np.zeros((height, width), np.int32), [], reference, 0)


def _of_python(name: str, kernel: Kernel, output: np.ndarray, inputs: list[np.ndarray],
               numpy: Callable[[], np.ndarray], tolerance: float) -> Workload:
    """A workload of one step, the Python kernel built on its arrays with sizes as constants."""
    return single(name, kernel.build(output, *inputs), output, inputs, numpy, tolerance=tolerance, family=name)


PYTHON_KERNELS: dict[str, list[Kernel]] = {
    "softmax": [softmax_py], "layernorm": [layernorm_py], "conv2d": [conv2d_py], "gather": [gather_py],
    "histogram": [histogram_py], "cumsum": [cumsum_py], "transpose": [transpose_py], "matmul": [matmul_py],
    "attention": [attention_scores_py, softmax_py, attention_values_py], "batched_matmul": [batched_matmul_py],
    "matvec": [matvec_py], "mlp": [dense_relu_py, dense_relu_py, dense_py], "nbody": [nbody_py],
    "resize": [resize_py], "black_scholes": [black_scholes_py], "mandelbrot": [mandelbrot_py]}
"""Per workload family (``Workload.family``), the Python kernel of each of its steps."""


def written_in_python(workload: Workload, static_shapes: bool = True) -> Workload:
    """``workload`` with every step built from its Python kernel (``PYTHON_KERNELS``) on the workload's arrays,
    named as the builder's step is: its sizes constants of each kernel, or with ``static_shapes=False`` the
    variables ``@svod.kernel`` makes them by default, bound in the workload's ``var_vals`` (a step's variable
    whose name an earlier step binds to another value is renamed, ``name_<step>``)."""
    kernels = PYTHON_KERNELS[workload.family]
    arrays = workload.arrays
    steps = []
    var_vals: dict[str, int] = dict(workload.var_vals)
    for number, (step, python) in enumerate(zip(workload.steps, kernels, strict=True)):
        kernel = python if static_shapes else Kernel(python.fn, name=python.name)
        bound = kernel.bind(*[arrays[a] for a in step.args])
        renamed = {}
        for var in (u for u in bound.ast.toposort() if u.op is Ops.DEFINE_VAR):
            name, value = var.arg[0], int(bound.var_vals[var.arg[0]])
            if var_vals.setdefault(name, value) != value:
                renamed[var] = UOp.define_var(f"{name}_{number}", var.arg[1], var.arg[2], var.dtype)
                var_vals[renamed[var].arg[0]] = value
        ast = substitute(bound.ast, renamed) if renamed else bound.ast
        steps.append(WorkloadStep(UOp.sink(*ast.src, name=kernel_label(step.ast)), step.args))
    return dataclasses.replace(workload, steps=steps, var_vals=var_vals)
