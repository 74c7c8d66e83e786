"""An index a Python kernel clamps into its dimension (``max(min(i, n - 1), 0)``) is inside wherever the dimension
is not empty: its run-time check is that one test, made before the loops, and the kernel still raises where
Python raises (an empty image read by a non-empty output) and runs where Python runs (nothing read). A read
under an ``if`` that ends a loop, and the reads in that loop's turns, keep one loop when their gates go."""

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


@svod.kernel
def sums_of_prefixes_where_positive(out, x, ends):  # type: ignore[no-untyped-def]
    for i in prange(out.shape[0]):
        if x[i] > 0:
            s = 0.0
            for j in range(ends[i]):
                s += x[j]
            out[i] = s


@svod.kernel
def sums_of_prefixes_carried_past_the_if(out, x, ends):  # type: ignore[no-untyped-def]
    for i in prange(out.shape[0]):
        s = -1.0
        if x[i] > 0:
            s = 0.0
            for j in range(ends[i]):
                s += x[j] * x[j]
        out[i] = s


@pytest.mark.parametrize("kernel", [sums_of_prefixes_where_positive, sums_of_prefixes_carried_past_the_if])
@pytest.mark.parametrize("n", [1, 2, 7, 67])
def test_a_sum_over_a_loop_whose_end_is_read_under_an_if_agrees_with_python(device, kernel, n):
    """The loop's end ``ends[i]`` and its terms ``x[j]`` are read under the ``if``: the reads lose their gates
    together, and the sum is over the one loop (a second loop of the same axis, over the ungated end, was
    refused as a reduction's range used outside it). Ends of 0, negative ones (no turn) and the whole array;
    values whose sums are exact in float32 in any order (a device may add a row's terms in another)."""
    rng = np.random.default_rng(n)
    x = (rng.integers(-8, 9, n) + rng.integers(0, 4, n) * 0.25).astype(np.float32)
    x[0] = abs(x[0]) + 0.25
    ends = rng.integers(-2, n + 1, n).astype(np.int32)
    ends[-1], ends[0] = 0, n
    if device.caps.max_loop_turns is None:
        agrees_with_python(kernel, device, np.full(n, 9.0, np.float32), x, ends, rtol=0)
        return
    with pytest.raises(svod.errors.GraphError, match=r"bound is read from memory"):  # nothing bounds its turns
        kernel(np.full(n, 9.0, np.float32), x, ends, device=device)
