"""The spellings ``svod bench`` times (``benchmarks.spellings``): the suite's row kernels in their ``@svod.kernel``
form and as NumPy inside ``@svod.jit`` compute numpy's answer, at the suite's widths and at edge numbers of rows,
on rows holding NaN and infinities, on every device. The bench's spellings step is in the tiny whole bench
(``test_harness.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.spellings import ARRAY_FORMS, row_spellings
from benchmarks.suite import row_kernels
from svod.device import Device
from svod.workloads import check


@pytest.mark.parametrize("rows", [1, 7])
def test_both_forms_of_each_row_kernel_agree_with_numpy(device: Device, rows: int) -> None:
    """The jit form on every device; the suite's kernel form (its sizes variables, which a WebGPU launch cannot
    spread over its work groups) on the CPU, where the bench times it. One row (every thread but one idle) and
    a prime number of rows (which no thread count or vector width divides); the rows of NaN below are five,
    the tiny whole bench's three."""
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

