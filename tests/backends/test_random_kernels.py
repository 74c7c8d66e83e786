"""Random kernels, every backend against the reference (``svod.check``), bit for bit.

A kernel is one of four shapes over rows ``i`` and a symbolic number of columns ``n``: elementwise, a
reduction per row (possibly with a reduction nested in its body, which may depend on the outer one), a
LOOP that carries a running value (or, per its turn, a LOOP of a count read from the index buffer), or an
atomic scatter-add; or a fifth over 9 rows of 64 columns, a sum
per output of ``x[i, j]`` times an expression over the sum's range, which CPUs and GPUs compute in
register tiles (in lanes where the renderer spells vectors). Values come from expressions over the
columns, reversed and padded neighbours, gathers through an index buffer (sometimes out of range),
casts, bitcasts, shifts by any amount, rounding of halves, and nested reductions. Float data are small
integers, so sums are exact in any order and every backend must give the reference's bits exactly (a sum
of products of bitcast values is not, and it rounds each product with its addition everywhere).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import svod
from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.dtype import DType

DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.float32, dtypes.float64]
BINARY = {"int": [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN, Ops.AND, Ops.XOR, Ops.OR, Ops.SHL,
                  Ops.SHR],
          "float": [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.MIN]}
REDUCE = [Ops.ADD, Ops.MAX, Ops.MIN]
ROWS, MAX_COLS = 3, 7
TILE_ROWS, TILE_COLS = 9, 64
"""The tile kernel's size: rows one more than AVX-512's 8-row tile, columns that GPU tiles divide."""
LEAVES = ["x", "y", "reversed", "padded", "gathered", "column", "outer", "const"]
SAME_SIZE = {1: [dtypes.int8, dtypes.uint8], 4: [dtypes.int32, dtypes.uint32, dtypes.float32],
             8: [dtypes.int64, dtypes.float64]}


def _expressions() -> st.SearchStrategy:
    leaf = st.sampled_from(LEAVES) | st.integers(-3, 5).map(lambda v: ("const", v))

    def extend(kids: st.SearchStrategy) -> st.SearchStrategy:
        return (st.tuples(st.just("binary"), st.integers(0, 11), kids, kids)
                | st.tuples(st.just("neg"), kids)
                | st.tuples(st.just("round"), st.integers(0, 3), kids)
                | st.tuples(st.just("where"), kids, kids, kids)
                | st.tuples(st.just("cast"), st.sampled_from(DTYPES), kids)
                | st.tuples(st.just("bitcast"), kids)
                | st.tuples(st.just("reduce"), st.sampled_from(REDUCE), kids))

    return st.recursive(leaf, extend, max_leaves=8)


class _Kernel:
    """Builds one random kernel; ``column`` is the current column range, ``outer`` the enclosing one."""

    def __init__(self, kind: str, dtype: DType) -> None:
        self.kind, self.dtype = kind, dtype
        self.k = KernelBuilder(f"random_{kind}")
        rows = TILE_ROWS if kind == "tile" else ROWS
        self.n: UOp | int = TILE_COLS if kind == "tile" else self.k.var("n", 1, MAX_COLS)
        self.out = self.k.buffer(dtype, rows * self.n)
        self.x = self.k.buffer(dtype, rows * self.n)
        self.y = self.k.buffer(dtype, self.n)
        self.idx = self.k.buffer(dtypes.int32, rows * self.n)
        self.i = self.k.range(rows)

    def value(self, tree, column: UOp, outer: UOp) -> UOp:
        dt, i, n = self.dtype, self.i, self.n
        if isinstance(tree, tuple) and tree[0] == "const":
            return UOp.const(dt, float(tree[1]) if dt.is_float else tree[1] % 100)
        if tree == "x":
            return self.x[i * n + column]
        if tree == "y":
            return self.y[column]
        if tree == "reversed":
            return self.x[i * n + (n - 1 - column)]
        if tree == "padded":
            return (column + 1 < n).where(self.x[i * n + column + 1], UOp.const(dt, 0))
        if tree == "gathered":
            return self.y[self.idx[i * n + column]]
        if tree in ("column", "outer"):
            return (column if tree == "column" else outer).cast(dt)
        if tree == "const":
            return UOp.const(dt, 2.0 if dt.is_float else 2)
        head, *rest = tree
        if head == "binary":
            ops = BINARY["float" if dt.is_float else "int"]
            return self.value(rest[1], column, outer).alu(ops[rest[0] % len(ops)], self.value(rest[2], column, outer))
        if head == "round":  # floor, ceil, trunc or round-to-even of a half (ties and -0.0 included)
            inner = self.value(rest[1], column, outer)
            if not dt.is_float:
                return inner
            return getattr(inner * 0.5, ("floor", "ceil", "trunc", "round")[rest[0]])()
        if head == "neg":
            return -self.value(rest[0], column, outer) if dt.kind != "uint" else self.value(rest[0], column, outer)
        if head == "where":
            a, b = self.value(rest[0], column, outer), self.value(rest[1], column, outer)
            return (a < b).where(b, self.value(rest[2], column, outer))
        if head == "cast":
            through = rest[0]
            inner = self.value(rest[1], column, outer)
            return inner if through.is_float != dt.is_float else inner.cast(through).cast(dt)
        if head == "bitcast":
            inner = self.value(rest[0], column, outer)
            other = next(d for d in SAME_SIZE[dt.itemsize] if d != dt)
            return inner if dt.is_float or other.is_float else inner.bitcast(other).bitcast(dt)
        r = self.k.range(n, AxisKind.REDUCE)  # a nested reduction over its own columns
        return self.value(rest[1], r, column).reduce(r, op=rest[0])

    def build(self, tree, reduce_op: Ops) -> UOp:
        k, i, n = self.k, self.i, self.n
        if self.kind == "elementwise":
            j = k.range(n)
            k.store(self.out[i * n + j], self.value(tree, j, j))
        elif self.kind == "reduce":
            r = k.range(n, AxisKind.REDUCE)
            k.store(self.out[i * n], self.value(tree, r, r).reduce(r, op=reduce_op))
        elif self.kind == "tile":
            j, r = k.range(n), k.range(n, AxisKind.REDUCE)
            k.store(self.out[i * n + j], (self.x[i * n + j] * self.value(tree, r, j)).reduce(r, op=reduce_op))
        elif self.kind == "loop":
            j = k.range(n, AxisKind.LOOP)
            k.store(self.out[i * n], self.out[i * n] + self.value(tree, j, j))
        elif self.kind == "counted":  # per turn j, a loop of a count read through the index the turn reads,
            j = k.range(n, AxisKind.LOOP)  # checked at run time (the column: that loop's)
            c = k.range(self.idx[i * n + self.idx[i * n + j].cast(dtypes.index)].cast(dtypes.index), AxisKind.LOOP)
            k.store(self.out[i * n], self.out[i * n] + self.value(tree, c, j))
        else:
            j = k.range(n)
            atomic_dtype = self.dtype if self.dtype.itemsize >= 4 else None
            target = self.out[self.idx[i * n + j]]
            if atomic_dtype is None:
                k.store(self.out[i * n + j], self.value(tree, j, j))
            else:
                k.atomic_add(target, self.value(tree, j, j))
        return k.build()


def _inputs(dtype: DType, n: int, seed: int, out_of_range: bool, rows: int = ROWS, cols: int = MAX_COLS
            ) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    size = rows * cols
    x, y = (rng.integers(-8, 9, s).astype(dtype.numpy) for s in (size, cols))
    idx = rng.integers(0, n, size).astype(np.int32)
    if out_of_range:
        idx[rng.integers(0, rows * n)] = rng.choice([-1, n, 1000])
    out = rng.integers(-8, 9, size).astype(dtype.numpy)
    return [out, x, y, idx]


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["elementwise", "reduce", "loop", "counted", "scatter"]), st.sampled_from(DTYPES),
       _expressions(), st.sampled_from(REDUCE), st.integers(1, MAX_COLS), st.integers(0, 2**16), st.booleans())
def test_random_kernels_agree_with_the_reference_bit_for_bit(kind, dtype, tree, reduce_op, n, seed, out_of_range):
    ast = _Kernel(kind, dtype).build(tree, reduce_op)
    report = svod.check(ast, _inputs(dtype, n, seed, out_of_range), ulps=0, n=n)
    assert report.ok, f"{report}\n{kind} {dtype!r} {tree}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DTYPES), _expressions(), st.sampled_from(REDUCE), st.integers(0, 2**16), st.booleans())
@example(dtypes.int8, ("where", ("reduce", Ops.ADD, "x"), ("const", -1), "gathered"), Ops.ADD, 0, True)  # a row's
# sum chose the branch without the gather: its out-of-range index was reported (the guard lost the condition)
@example(dtypes.int64, ("binary", 11, ("const", 1), "column"), Ops.ADD, 0, False)  # C's 1 >> 40: an int's shift
def test_random_tiles_agree_with_the_reference_bit_for_bit(dtype, tree, reduce_op, seed, out_of_range):
    """Register tiles, in lanes on the LLVM pair and OpenCL, of every op the expressions reach (those no
    vector spells keep scalar copies), against the reference."""
    ast = _Kernel("tile", dtype).build(tree, reduce_op)
    report = svod.check(ast, _inputs(dtype, TILE_COLS, seed, out_of_range, TILE_ROWS, TILE_COLS), ulps=0)
    assert report.ok, f"{report}\n{dtype!r} {tree}"
