"""The spellings ``svod bench`` times (``benchmarks.spellings``): the suite's row kernels in their ``@svod.kernel``
form and as NumPy inside ``@svod.jit`` compute numpy's answer, at the suite's widths and at edge numbers of rows,
on rows holding NaN and infinities, on every device."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from benchmarks.harness import Bench, Sizes
from benchmarks.peers import Tinygrad
from benchmarks.spellings import ARRAY_FORMS, row_spellings
from benchmarks.suite import row_kernels
from svod.device import Device
from svod.workloads import check


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_both_forms_of_each_row_kernel_agree_with_numpy(device: Device, rows: int) -> None:
    """The jit form on every device; the suite's kernel form (its sizes variables, which a WebGPU launch cannot
    spread over its work groups) on the CPU, where the bench times it."""
    spelled = row_spellings(row_kernels(quick=True, rows=rows))
    assert set(spelled) == set(ARRAY_FORMS) == {"softmax", "layernorm", "mlp"}
    for form in spelled.values():
        form.check_jit(device)
        if device.name == "CPU":
            check(form.workload, device)


def test_the_jit_forms_agree_with_numpy_on_rows_of_nan_and_infinities(device: Device) -> None:
    spelled = row_spellings(row_kernels(quick=True, rows=5))
    for name in ("softmax", "layernorm"):
        x = spelled[name].workload.inputs[0]
        x[1, 17], x[2, 0], x[3, -1], x[4] = np.nan, np.inf, -np.inf, -0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            want = spelled[name].workload.numpy()
        got = spelled[name].run_jit(device)()
        assert np.isnan(want[1]).all()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # NaN where numpy's are


def test_the_bench_reports_each_form_of_each_row_kernel_beside_numpy() -> None:
    sizes = Sizes(elements=1 << 10, copy_bytes=1 << 20, repeats=2, big_matmul=64, compiles=1, quick=True,
                  spelling_rows=3)
    metrics = Bench(svod.get_device("CPU"), sizes, Tinygrad(), lambda title: None, []).row_spellings()
    assert [m.name for m in metrics] == [f"spelling.{kernel}.{form}_ms" for kernel in ("softmax", "layernorm", "mlp")
                                         for form in ("kernel", "jit")]
    for metric in metrics:
        assert metric.unit == "ms" and metric.better == "lower"
        assert metric.svod is not None and metric.svod > 0 and metric.numpy is not None and metric.numpy > 0
        assert "3x" in metric.note
