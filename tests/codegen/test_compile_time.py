"""Compile time grows with a kernel about as the kernel does: a deep chain of ``where`` and a kernel of twenty
thousand nodes compile well within a bound that time growing with the square of their size would break. A
guard against that, not a benchmark: the bound is generous, for a loaded machine."""

from __future__ import annotations

import time

import numpy as np

import svod
from benchmarks.first_contact import where_chain
from svod import KernelBuilder, dtypes
from svod.ir import UOp
from tests.helpers import open_device

BOUND_S = 20.0
"""Seconds of this process's time one compile may take (not the clock's, which other processes slow); a pass
whose work grows with the square of a kernel's size takes minutes on these kernels."""


def _run_compiled_within_the_bound(ast: UOp, arrays: list[np.ndarray]) -> None:
    """Compile ``ast`` for the CPU within ``BOUND_S``, then run it on ``arrays`` (the kernel compiled, cached)."""
    device = open_device("llvm")
    start = time.process_time()
    svod.compile(ast, device)
    elapsed = time.process_time() - start
    assert elapsed < BOUND_S, f"compiling {len(ast.toposort())} nodes took {elapsed:.1f} s"
    svod.run(ast, arrays, device=device)


def test_a_deep_chain_of_wheres_compiles_in_time_and_computes_what_numpy_does():
    depth = 2_000
    got, data = np.zeros((4, 8), np.float32), np.arange(32, dtype=np.float32).reshape(4, 8)
    _run_compiled_within_the_bound(where_chain(depth), [got, data])
    rows, cols = np.meshgrid(np.arange(4), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(got, data + depth * (rows < cols % 5))


def test_a_kernel_of_twenty_thousand_nodes_compiles_in_time_and_computes_what_numpy_does():
    """A sum of three thousand gathers, each at an index of its own that the bounds proofs take apart."""
    count = 3_000
    k = KernelBuilder("gathers")
    out, x = k.buffer(dtypes.float32, 64), k.buffer(dtypes.float32, 64)
    i = k.range(64)
    total = x[i]
    for c in range(1, count):
        total = total + x[(i * c + c) % 64]
    k.store(out[i], total)
    ast = k.build()
    assert len(ast.toposort()) > 20_000
    got, data = np.zeros(64, np.float32), np.arange(64, dtype=np.float32)
    _run_compiled_within_the_bound(ast, [got, data])
    rows = np.arange(64)
    want = data + sum(data[(rows * c + c) % 64] for c in range(1, count))  # integers a float32 holds: exact
    np.testing.assert_array_equal(got, want)
