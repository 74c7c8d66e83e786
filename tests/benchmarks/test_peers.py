"""The benchmark's peers compute what svod's kernels compute (they are checked again when a bench runs)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.peers import Tinygrad
from benchmarks.suite import TINYGRAD, suite
from svod import workloads
from tests.kernels import SMALL_WORKLOADS

SMALL = {name: SMALL_WORKLOADS[name] for name in TINYGRAD}
"""Each suite kernel at a small size."""


def test_every_suite_kernel_has_a_spelling_for_each_peer():
    assert {workload.family for workload in suite(quick=True)} == set(SMALL) == set(TINYGRAD)
    assert workloads.matmul(3).family == workloads.matmul(3, dtype=np.float64, name="matmul_f64").family == "matmul"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_numba_spellings_match_numpy(name):
    pytest.importorskip("numba", reason="numba is a benchmark peer (extra bench), not installed")
    from benchmarks import numba_kernels

    workload = SMALL[name]()
    output = np.zeros_like(workload.output)
    getattr(numba_kernels, name)(output, *workload.inputs)
    ok, error = workloads.compare(workload, output)
    assert ok, f"numba's {name} is off numpy's by {error}"


@pytest.mark.parametrize("name", sorted(name for name, spelling in TINYGRAD.items() if not isinstance(spelling, str)))
def test_tinygrad_spellings_match_numpy(name):
    pytest.importorskip("tinygrad", reason="tinygrad is a benchmark peer (extra bench), not installed")
    tinygrad = Tinygrad()
    if tinygrad.error:
        pytest.skip(f"tinygrad is installed but cannot run here: {tinygrad.error}")
    workload, spelling = SMALL[name](), TINYGRAD[name]
    assert callable(spelling)
    result = spelling(*(tinygrad.tensor(array) for array in workload.inputs)).numpy()
    ok, error = workloads.compare(workload, result)
    assert ok, f"tinygrad's {name} is off numpy's by {error}"
    tinygrad.suite_runner(workload, spelling)()  # the TinyJit the bench times: checked too, then replayed
