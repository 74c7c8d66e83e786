"""The arrays an ``@svod.jit`` function makes (``svod.frontend.temporaries``): arrays of numbers written out
(``np.array([0.25, 0.5, 0.25])``, once refused as a call kernels lack), compared on every device with the
function run as plain NumPy, and what svod refuses of them."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import svod
from svod.errors import GraphError, KernelSyntaxError
from svod.frontend.temporaries import LITERAL_LIMIT
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses


@svod.jit
def weighted(x):
    w = np.array([0.25, 0.5, 0.25])
    table = np.asarray([[1, -2, 3], [4, 5, -6]], dtype=np.int32)
    keep = np.array([True, False, True])
    picks = np.array((2, 0, 1, 1))
    return x[:3] * w + table[1] * keep, x[picks], table.sum(axis=0)


@pytest.mark.parametrize("n", [3, 7, 13])
def test_arrays_of_numbers_written_out_are_numpys(device, n):
    """Each number where NumPy puts it, of NumPy's dtype (float64 of floats, int64 of ints, the dtype given);
    the array read as any other: whole, gathered through, reduced."""
    x = np.cos(np.arange(float(n))) * 3.0
    if refuses(device, svod.dtypes.float64):
        with pytest.raises(GraphError, match=r"float64|int64"):
            weighted(x.astype(np.float32), device=device)
        return
    agrees_with_python(weighted, device, x, typed=True)


@svod.jit
def smoothed(x):
    w = np.array([0.25, 0.5, 0.25])
    return (x[:-2] * w[0] + x[1:-1] * w[1] + x[2:] * w[2]).sum()


def test_the_gradient_through_numbers_written_out():
    """The numbers are constants of the function: the gradient of a weighted sum is the weights' sums."""
    x = np.linspace(-1.0, 1.0, 9)
    got = svod.grad(smoothed)(x)
    want = np.zeros(9)
    for k, weight in enumerate([0.25, 0.5, 0.25]):
        want[k:k + 7] += weight
    np.testing.assert_allclose(got, want, rtol=1e-15)


@svod.jit
def per_work_item(x, out):
    for i in svod.prange(x.shape[0]):
        w = np.array([1.0, 2.0])
        out[i] = x[i] * w[i % 2]
    return out


def test_an_array_made_per_work_item_is_refused_at_its_line():
    with pytest.raises(KernelSyntaxError, match=r"test_temporaries.py:\d+: an array of numbers written out in a "
                                                r"prange's body"):
        per_work_item(np.ones(4), np.zeros(4))


def test_more_numbers_written_out_than_svod_fills_are_refused(tmp_path, monkeypatch):
    """Each number is a statement of the kernel that fills the array: past ``LITERAL_LIMIT`` the array is an
    argument's to make (the function written to a module of its own: svod reads a function's source file)."""
    numbers = ", ".join(str(k * 0.5) for k in range(LITERAL_LIMIT + 1))
    (tmp_path / "long_literal.py").write_text(
        f"import numpy as np\nimport svod\n\n\n@svod.jit\ndef long(x):\n    big = np.array([{numbers}])\n"
        "    return x + big[0]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("long_literal")
    with pytest.raises(KernelSyntaxError, match=rf"long_literal.py:7: an array of {LITERAL_LIMIT + 1} numbers "
                                                rf"written out: svod fills one of at most {LITERAL_LIMIT}"):
        module.long(np.ones(2))
