"""A loop's reduction from each start Python may give it, in a kernel and in ``@svod.jit``, against the same
function run as plain Python, zeros compared by their sign: a float sum reduces from -0.0 (an addition's
identity), and a start of +0 (``s = 0``, ``s = 0.0``) still gives Python's +0.0 over no terms or -0.0s only."""

from __future__ import annotations

import math

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.frontend.oracle import as_python, run_as_python
from tests.helpers import refuses

COLUMNS = (0, 1, 2, 7, 67)


@svod.kernel
def starts(out, x):
    for r in svod.prange(x.shape[0]):
        whole, point, negative, minus, gated, product, high, low = 0, 0.0, -0.0, 0.0, 0.0, 1, 0.0, -0.0
        for c in range(x.shape[1]):
            whole += x[r, c]
            point += x[r, c]
            negative += x[r, c]
            minus -= x[r, c]
            if x[r, c] != 5.0:
                gated += x[r, c]
            product *= x[r, c]
            high = max(high, x[r, c])
            low = min(low, x[r, c])
        out[r, 0], out[r, 1], out[r, 2], out[r, 3] = whole, point, negative, minus
        out[r, 4], out[r, 5], out[r, 6], out[r, 7] = gated, product, high, low


def _rows(columns: int, dtype: type) -> np.ndarray:
    """Rows of -0.0s only, +0.0s only, both, a number among -0.0s, and numbers that cancel to +0.0."""
    x = np.zeros((5, columns), dtype)
    x[0] = -0.0
    x[2, ::2] = -0.0
    x[3] = -0.0
    x[3, columns // 2:columns // 2 + 1] = 2.5
    x[4, : columns - columns % 2] = np.tile([1.5, -1.5], columns // 2)
    return x


def _same_bits(actual: np.ndarray, expected: np.ndarray, device: Device) -> None:
    """Equal values, and on a device with IEEE floats (WGSL's may lose a -0.0) zeros of the same sign."""
    np.testing.assert_array_equal(actual, expected)
    if device.caps.ieee_floats:
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("columns", COLUMNS)
def test_a_sum_from_zero_is_pythons_over_negative_zeros_and_no_terms(device, columns, dtype):
    """``s = 0`` or ``s = 0.0`` then ``s += x`` (or ``s -= x``, or under an ``if``) is +0.0 over no terms and
    over -0.0s only, as ``0 + -0.0`` is in Python; ``s = -0.0`` stays -0.0 there; a product from 1 and
    Python's ``max``/``min`` from a zero keep the signs Python's do."""
    if refuses(device, svod.dtypes.from_numpy(np.dtype(dtype))):
        return
    x = _rows(columns, dtype)
    out = np.full((5, 8), 7.0, dtype)
    want = run_as_python(starts, out, x)[0]
    starts(out, x, device=device)
    _same_bits(out, want, device)
    assert not np.signbit(want[[0, 2], :2]).any() and np.signbit(want[0, 2])


@svod.jit
def jit_sums(x, n: int):
    whole, point, negative = 0, 0.0, -0.0
    for i in range(n):
        whole += x[i]
        point += x[i]
        negative += x[i]
    return whole, point, negative


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_a_jit_sum_from_zero_is_pythons_over_negative_zeros_and_no_terms(n):
    """The same sums in ``@svod.jit``: each returned as plain Python returns it, the sign of a zero too."""
    x = np.full(max(n, 1), -0.0)
    want = as_python(jit_sums)(x.copy(), n)
    got = jit_sums(x.copy(), n)
    assert [float(v) for v in got] == [float(v) for v in want]
    assert [math.copysign(1.0, v) for v in got] == [math.copysign(1.0, v) for v in want] == [1.0, 1.0, -1.0]
