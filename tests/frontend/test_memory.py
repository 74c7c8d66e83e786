"""An index a Python kernel clamps into its dimension (``max(min(i, n - 1), 0)``) is inside wherever the dimension
is not empty: its run-time check is that one test, made before the loops, and the kernel still raises where
Python raises (an empty image read by a non-empty output) and runs where Python runs (nothing read)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import IndexOutOfBoundsError
from tests.frontend.test_held_values import agrees_with_python


@svod.kernel
def upsample(out, image):  # type: ignore[no-untyped-def]
    height, width = image.shape
    for y in prange(out.shape[0]):
        for x in prange(out.shape[1]):
            y0 = max(min(y // 2, height - 1), 0)
            x0 = max(min(int(x * 0.5), width - 1), 0)
            out[y, x] = image[y0, x0] + image[min(y0 + 1, height - 1), x0]


@pytest.mark.parametrize("image, out", [((1, 1), (3, 3)), ((4, 5), (8, 10)), ((3, 1), (2, 7)), ((2, 2), (0, 5))])
def test_clamped_reads_agree_with_python(device, image, out):
    rng = np.random.default_rng(0)
    agrees_with_python(upsample, device, np.zeros(out, np.float32), rng.random(image, dtype=np.float32))


def test_a_clamped_read_of_an_empty_image_raises_where_python_does(device):
    with pytest.raises(IndexError):
        upsample.fn(np.zeros((2, 2), np.float32), np.zeros((0, 0), np.float32))
    with pytest.raises(IndexOutOfBoundsError):
        upsample(np.zeros((2, 2), np.float32), np.zeros((0, 0), np.float32), device=device)
    upsample(np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32), device=device)  # nothing read
