"""The linearizer orders every valid kernel, the same way in every process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.codegen.pipeline import linearize
from tests.helpers import refuses
from tests.kernels import nested_corpus

REPO = Path(__file__).resolve().parents[2]
CORPUS = nested_corpus()


@pytest.mark.parametrize(("ast", "case"), CORPUS, ids=[ast.arg for ast, _ in CORPUS])
def test_reductions_nested_in_reductions_compute_the_right_answer(device, ast, case):
    inputs, expected = case(np.random.default_rng(0))
    out = np.zeros(expected.size, np.float32)
    svod.run(ast, [out, *(a.reshape(-1) for a in inputs)], device=device)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=2e-4, atol=2e-5)


def test_nested_reduction_loops_nest_inside_the_loop_that_needs_them():
    ast = CORPUS[0][0]  # (Q K^T) V
    depth, deepest = 0, 0
    for u in linearize(ast):
        depth += u.op is Ops.RANGE
        depth -= u.op is Ops.END
        deepest = max(deepest, depth)
    assert deepest == 4  # i, e, then j, then d inside j


_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    import svod
    from svod.device import DeviceCaps, WorkGroupLimits
    from svod.codegen.render.opencl import OpenCLRenderer
    from tests.kernels import nested_corpus

    renderers = [svod.compiler_pair("CPU", "llvm")[0], svod.compiler_pair("CPU", "clang")[0],
                 OpenCLRenderer("CL:0", DeviceCaps(host_memory=False, overlaps_on_host=False,
                                                   work_groups=WorkGroupLimits(256, (256, 256, 256))))]
    report = {}
    for ast, case in nested_corpus():
        sources = [r.render(part).src for r in renderers for part in r.parts(ast)]
        inputs, expected = case(np.random.default_rng(1))
        out = np.zeros(expected.size, np.float32)
        svod.run(ast, [out, *(a.reshape(-1) for a in inputs)], device="CPU")
        report[ast.arg] = [hashlib.sha256("".join(sources).encode()).hexdigest(), out.tobytes().hex()]
    json.dump(report, sys.stdout)
""")


def test_the_same_kernel_gives_the_same_source_and_result_under_every_hash_seed(tmp_path):
    reports = []
    for seed in ("0", "1", "2", "31337"):
        env = {"PYTHONHASHSEED": seed, "SVOD_CACHE_DIR": str(tmp_path / seed), "PATH": "/usr/bin:/bin",
               "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, cwd=REPO,
                              check=False)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout))
    assert all(r == reports[0] for r in reports[1:])
    assert len(reports[0]) == len(CORPUS)


def test_two_reductions_over_one_range_share_its_loop_and_a_third_that_needs_them_gets_its_own():
    k = KernelBuilder("mean_and_spread")
    out, x = k.buffer(dtypes.float32, 3), k.buffer(dtypes.float32, 3 * 8)
    i = k.range(3)
    c = k.range(8, AxisKind.REDUCE)
    mean = x[i * 8 + c].reduce(c) / 8.0
    k.store(out[i], ((x[i * 8 + c] - mean) * (x[i * 8 + c] - mean)).reduce(c) + x[i * 8 + c].reduce(c, op=Ops.MAX))
    loops = [u for u in linearize(k.build()) if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE]
    assert len(loops) == 2  # the sum and the max share one loop; the spread needs the mean first


def test_a_gate_opens_inside_the_loops_it_depends_on_and_around_the_others():
    """A row's gated store in a loop over its columns: the gate's IF stands around the column loop, so the
    row's reduction (placed inside the IF, where its gated loads are allowed) runs once per row, not once per
    column."""
    out, x = UOp.param(0, dtypes.float32, 64 * 30), UOp.param(1, dtypes.float32, 64 * 30)
    r, c, j = UOp.range(64, 0), UOp.range(30, 1, AxisKind.LOOP), UOp.range(30, 2, AxisKind.REDUCE)
    row = r < 17
    square = x.index(r * 30 + j, row).load()
    norm = (square * square).reduce(j)
    sink = UOp.sink(out.index(r * 30 + c, row).store(x.index(r * 30 + c, row).load() / norm), name="scaled")
    blocks = [(u.op, u.arg[1] if u.op is Ops.RANGE else None) for u in linearize(sink)
              if u.op in (Ops.RANGE, Ops.IF)]
    assert blocks == [(Ops.RANGE, AxisKind.GLOBAL), (Ops.IF, None), (Ops.RANGE, AxisKind.REDUCE),
                      (Ops.RANGE, AxisKind.LOOP)]


def test_a_deep_chain_lowers_compiles_and_runs(device):
    """About 15,000 nodes in one dependent chain: every pass is linear and none recurses per node."""
    k = KernelBuilder("chain")
    out, x = k.buffer(dtypes.float32, 5), k.buffer(dtypes.float32, 5)
    i = k.range(5)
    value = x[i]
    for step in range(6_000):
        value = value * 1.0 + 1.0 if step % 2 else value - 0.5
    k.store(out[i], value)
    got = np.zeros(5, np.float32)
    svod.run(k.build(), [got, np.arange(5, dtype=np.float32)], device=device)
    np.testing.assert_array_equal(got, np.arange(5) + 1500.0)


def test_an_effect_runs_in_every_loop_it_was_written_in_even_if_simplification_folds_the_use(device):
    if refuses(device, dtypes.int8):
        return
    """``out[i] += min(j, -1)`` over a LOOP ``j``: ``min(j, -1)`` folds to ``-1``, yet the update still runs
    once per ``j`` (found by the random-kernel property test)."""
    k = KernelBuilder("fold_keeps_loop")
    n = k.var("n", 1, 8)
    out = k.buffer(dtypes.int8, 3)
    i = k.range(3)
    j = k.range(n, AxisKind.LOOP)
    k.store(out[i], out[i] + j.cast(dtypes.int8).minimum(-1))
    got = np.array([10, 20, 30], np.int8)
    svod.run(k.build(), [got], device=device, n=5)
    np.testing.assert_array_equal(got, [5, 15, 25])


def test_a_value_placed_twice_is_named_by_its_inner_place_only_inside_its_block():
    """The linearizer may place one value in a block and later hoist it before an enclosing one (a masked
    tile's gate: in its sum's loads, then at its store). After the block closes the renderers name it by the
    hoisted place, which comes first and dominates (LLVM refused the IR of a 1031-column blocked matmul)."""
    from svod.codegen.render.base import ScopedNames

    value, other = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
    names = ScopedNames()
    names[value] = "%hoisted"
    names.open()
    names[value], names[other] = "%inner", "%first_inside"
    names.open()
    names[value] = "%innermost"
    names[value] = "%innermost.gated"  # renamed twice in one block: the name from before it comes back
    names.close()
    assert names[value] == "%inner"
    names[other] = "%first_inside.gated"
    names.close()
    assert (names[value], names[other]) == ("%hoisted", "%first_inside.gated")  # had none before the block
    device = svod.get_device("CPU", "llvm")
    k = KernelBuilder("mm_1031")
    out, a, b = (k.buffer(dtypes.float32, (1031, 1031)) for _ in range(3))  # edges of rows, columns and sum
    i, j, r = k.range(1031), k.range(1031), k.range(1031, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[r, j]).reduce(r))
    *_, blocked = device.renderer.parts(k.build())
    linear = device.renderer.program(blocked).src[2].src  # PROGRAM: SINK, DEVICE, LINEAR, SOURCE
    assert any(count > 1 for count in Counter(u for u in linear if u.op not in (Ops.CONST, Ops.END)).values())
    svod.compile(k.build(), device)  # LLVM verifies that every use is dominated


def test_a_value_read_after_an_effect_is_not_computed_before_it():
    """A store whose value reads its own buffer through the state after it (a kernel no frontend makes, and
    no pass may): the linearizer refuses it rather than read the buffer before the store."""
    k = KernelBuilder("read_too_early")
    out = k.buffer(dtypes.float32, 4)
    i = k.range(4)
    later = out.state(1).index(i).load()
    k.store(out.state(0).index(i), later + 1.0)
    with pytest.raises(svod.errors.GraphError, match="computed before that effect"):
        svod.compile(k.build(), "CPU")
