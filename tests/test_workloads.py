"""svod's kernel collection (shared by the demo, the tests and the benchmarks) computes what numpy computes,
at small and odd sizes, on every device."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import workloads
from svod.errors import SvodError
from tests.helpers import refuses
from tests.kernels import SMALL_WORKLOADS


@pytest.mark.parametrize("name", sorted(SMALL_WORKLOADS))
def test_collection_matches_numpy(device, name):
    """Or, for a kernel built for the host with float64 Python floats (``resize``, ``mandelbrot``), is refused
    by a device without float64, naming the dtype (the kernel built for such a device, in float32, is
    tested in tests/frontend/test_oracle.py)."""
    workload = SMALL_WORKLOADS[name]()
    held = {u.dtype for step in workload.steps for u in step.ast.toposort()}
    if svod.dtypes.float64 in held and refuses(device, svod.dtypes.float64):
        with pytest.raises(SvodError, match="cannot hold float64"):
            workloads.check(workload, device)
        return
    workloads.check(workload, device)


def test_loaded_workload_runs_its_steps_on_buffers():
    """``load`` compiles every step once; each call runs them all, in order, on the same Buffers."""
    workload = workloads.attention(13, 5)
    loaded = workloads.load(workload, "CPU")
    loaded()
    assert workloads.compare(workload, loaded.output())[0]
    assert [kernel.ast for kernel, _, _ in loaded.calls] == [step.ast for step in workload.steps]
    assert [args for _, args, _ in loaded.calls] == [[loaded.buffers[a] for a in step.args] for step in workload.steps]


def test_a_wrong_answer_is_an_error_that_says_by_how_much():
    workload = workloads.saxpy(8)
    with pytest.raises(SvodError, match="numba's result disagrees with numpy") as caught:
        workloads.agrees(workload, workload.numpy() + 0.5, "numba")
    assert caught.value.value == pytest.approx(0.5)


def test_difference_tolerances():
    assert workloads.difference(np.ones(3), np.ones(3), 1e-5) == (True, 0.0)
    ok, err = workloads.difference(np.ones(3), np.ones(3) + 0.1, 1e-5)
    assert not ok and abs(err - 0.1) < 1e-12
    assert not workloads.difference(np.ones(3), np.ones(4), 1)[0]
    assert not workloads.difference(np.array([1, 2]), np.array([1, 3]), 0)[0]  # 0: exactly the same values


def test_gather_clamped_by_hand_is_another_kernel_of_the_same_arguments():
    guarded, clamped = workloads.gather_kernel(9, 11), workloads.gather_kernel(9, 11, clamped=True)
    assert guarded is workloads.gather(9, 11).steps[0].ast and clamped is not guarded
    out, table, ids = np.zeros((9, 64), np.float32), np.ones((11, 64), np.float32), np.full(9, 40, np.int32)
    svod.run(clamped, [out, table, ids])  # id 40 is past the table: clamped to its last row
    assert (out == 1).all()
