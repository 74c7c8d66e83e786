"""The lowering passes and the linearizer keep their guarantees."""

from __future__ import annotations

import pytest

from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.codegen.linearize import linearize
from svod.codegen.lower import close_ranges, live_ranges, lower_reduces, split_for_threads
from svod.codegen.render.c import CRenderer
from svod.errors import GraphError
from svod.ir import simplify
from svod.ir.alu import exec_alu


def _matmul(n=16):
    k = KernelBuilder("mm")
    c, a, b = (k.buffer(dtypes.float32, n * n) for _ in range(3))
    i, j = k.range(n), k.range(n)
    r = k.range(n, AxisKind.REDUCE)
    k.store(c[i * n + j], (a[i * n + r] * b[r * n + j]).reduce(r))
    return k.build()


def _lowered(ast, threads=1):
    return simplify(close_ranges(lower_reduces(split_for_threads(simplify(ast), threads))))


def test_lower_reduces_leaves_no_reduce():
    lowered = lower_reduces(_matmul())
    ops = {u.op for u in lowered.toposort()}
    assert Ops.REDUCE not in ops and Ops.DEFINE_REG in ops


def test_every_range_has_one_end_and_loops_nest():
    linear = linearize(_lowered(_matmul()))
    stack = []
    for u in linear:
        if u.op is Ops.RANGE:
            stack.append(u)
        elif u.op is Ops.END:
            assert stack.pop() is u.src[0]
    assert not stack
    assert [u.arg[0] for u in linear if u.op is Ops.RANGE] == [0, 1, 2]


def test_each_node_is_placed_inside_every_range_it_uses():
    lowered = _lowered(_matmul())
    live = live_ranges(lowered)
    open_loops: list[UOp] = []
    for u in linearize(lowered):
        if u.op is Ops.END:
            open_loops.pop()
            continue
        assert live[u] - {u} <= set(open_loops)
        if u.op is Ops.RANGE:
            open_loops.append(u)


def test_loop_invariant_values_are_hoisted():
    k = KernelBuilder("hoist")
    out, x, y = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i, j = k.range(8), k.range(8)
    k.store(out[i * 8 + j], x[j] * y[i].sqrt())
    linear = linearize(_lowered(k.build()))
    inner = next(u for u in linear if u.op is Ops.RANGE and u.arg[0] == 1)
    sqrt = next(u for u in linear if u.op is Ops.SQRT)
    assert linear.index(sqrt) < linear.index(inner)


def test_thread_split_covers_the_range_exactly():
    k = KernelBuilder("fill")
    n = k.var("n", 1, 1 << 20)
    out = k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], i.cast(dtypes.int32))
    split = split_for_threads(k.build(), 3)
    core = next(u for u in split.toposort() if u.op is Ops.DEFINE_VAR and u.arg[0] == "core_id")
    assert core.arg == ("core_id", 0, 2)
    loop = next(u for u in split.toposort() if u.op is Ops.RANGE)
    start = next(u for u in split.toposort() if u.op is Ops.MUL and u.src[0] is core)

    for size in (1, 2, 47, 48, 49, 1000, 1 << 20):
        covered = []
        for c in range(3):
            env = {"n": size, "core_id": c}
            first, count = _value(start, env), _value(loop.src[0], env)
            covered.extend(range(first, first + max(count, 0)))
        assert covered == list(range(size))


def _value(u: UOp, env: dict[str, int]) -> int:
    vals: dict[UOp, int] = {}
    for node in u.toposort():
        if node.op is Ops.CONST:
            vals[node] = node.arg
        elif node.op is Ops.DEFINE_VAR:
            vals[node] = env[node.arg[0]]
        else:
            vals[node] = exec_alu(node.op, node.dtype, [vals[s] for s in node.src])
    return vals[u]


def test_sibling_ranges_that_do_not_nest_are_an_error():
    a, b = UOp.range(4, 0), UOp.range(4, 1)
    p = UOp.param(0, dtypes.index, 16)
    inner_a = UOp(Ops.END, dtypes.void, (a, p[a].store(a)))
    bad = UOp.sink(UOp(Ops.END, dtypes.void, (b, p[b].store(b))), inner_a, p[a * 4 + b].store(a))
    with pytest.raises(GraphError):
        linearize(bad)


def test_c_source_reads_buffers_and_variables_by_position():
    k = KernelBuilder("args")
    n = k.var("n", 1, 10)
    out, x = k.buffer(dtypes.int32, n), k.buffer(dtypes.int32, n)
    i = k.range(n)
    k.store(out[i], x[i] + 1)
    src = CRenderer("CPU").render(k.build()).src
    assert "bufs[0]" in src and "bufs[1]" in src and "vars[0]" in src and "svod_args" in src
