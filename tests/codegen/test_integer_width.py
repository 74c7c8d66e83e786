"""``narrow_integers``: int64 values on a device without 64-bit integers are computed in 32 bits where that gives
NumPy's value, and refused, at the user's line, where it may not (the CPU with int64 taken away, and WebGPU)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import GraphError
from tests.frontend.test_scalar_arguments import _line, _narrow_devices
from tests.helpers import open_device


@svod.kernel
def thirds(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = svod.int32(svod.int64(x[i]) * 3 // 2)


@svod.kernel
def masked_thirds(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = svod.int32(svod.int64(x[i] & 0xFFFF) * 3 // 2)


@svod.kernel
def low_halves(out, x):
    """A product that may not fit 32 bits, masked to a value that does: computed from the product's low bits."""
    for i in svod.prange(x.shape[0]):
        out[i] = svod.int32(((svod.int64(x[i]) * 65536) & 0x7FFF0000) // 65536)


@svod.kernel
def first_above(out, limits, x):
    """A carried int64 local, bounded by what is stored into it (-1 or a position)."""
    for i in svod.prange(x.shape[0]):
        found = svod.int64(-1)
        for k in range(limits.shape[0]):
            if found < 0 and x[i] < limits[k]:
                found = svod.int64(k)
        out[i] = svod.int32(found)


def _device(device: Device | str) -> Device:
    return device if isinstance(device, Device) else open_device(device)


X = np.array([0, 1, -1, 7, -8, 65535, 65536, 2**31 - 1, -(2**31), 123456789], np.int32)


@pytest.mark.parametrize("device", _narrow_devices(), ids=lambda d: str(getattr(d, "device", d)))
def test_a_value_that_may_not_fit_32_bits_is_refused_where_it_is_needed_whole(device):
    with pytest.raises(GraphError, match=r"computes int64 values in 32 bits, and a conversion to int32 needs this "
                                         r"one whole, which may reach -3221225473 \.\. 3221225470") as raised:
        thirds(np.zeros(X.size, np.int32), X, device=_device(device))
    assert f"test_integer_width.py:{_line(thirds, '* 3 // 2')}" in str(raised.value)


@pytest.mark.parametrize("device", _narrow_devices(), ids=lambda d: str(getattr(d, "device", d)))
def test_values_proven_to_fit_and_wrapping_products_whose_result_fits_compute_numpys(device):
    device = _device(device)
    for kernel, want in ((masked_thirds, (X.astype(np.int64) & 0xFFFF) * 3 // 2), (low_halves, X & 0x7FFF)):
        out = np.zeros(X.size, np.int32)
        kernel(out, X, device=device)
        np.testing.assert_array_equal(out, want.astype(np.int32))


@pytest.mark.parametrize("device", _narrow_devices(), ids=lambda d: str(getattr(d, "device", d)))
@pytest.mark.parametrize("n", [0, 1, 5, 13])
def test_a_carried_int64_local_bounded_by_its_stores_runs(device, n):
    limits = np.linspace(0.0, 1.0, n, dtype=np.float32)
    x = np.random.default_rng(n).random(11, dtype=np.float32)
    out = np.zeros(11, np.int32)
    first_above(out, limits, x, device=_device(device))
    want = np.array([next((k for k in range(n) if v < limits[k]), -1) for v in x], np.int32)
    np.testing.assert_array_equal(out, want)
