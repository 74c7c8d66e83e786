"""Loops whose end is read from memory indexed by an enclosing loop's variable (``range(counts[j])``): each
turn of the outer loop runs the inner one for the count it reads in that turn, on every device, as the same
function run as plain Python does. The bounds check of such a read fires where the read is made, before its
own loop."""

import numpy as np
import pytest

import svod
from svod.errors import GraphError, IndexOutOfBoundsError


def _count_into_one(y, counts):
    for j in range(counts.shape[0]):
        for _ in range(counts[j]):
            y[0] += 1.0


def _three_counts_into_one(y, counts):
    for j in range(3):
        for _ in range(counts[j]):
            y[0] += 1.0


def _count_into_rows(y, counts):
    for j in range(counts.shape[0]):
        for k in range(counts[j]):
            y[j] += k + 1.0


def _sum_between(y, lo, hi):
    for j in range(lo.shape[0]):
        for k in range(lo[j], hi[j]):
            y[0] += k * 2.0 + 1.0


def _count_in_each_item(y, counts):
    for i in svod.prange(y.shape[0]):
        for j in range(counts.shape[0]):
            for k in range(counts[j]):
                y[i] += i + k + 1.0


def _counts_of_counts(y, counts):
    for i in svod.prange(y.shape[0]):
        for j in range(counts[i]):
            for k in range(counts[j]):
                y[i] += k + 1.0


COUNTS = [[0, 0, 0], [1, 1, 1, 1], [7], [1, 2, 1], [5, 0, 3], [2, 0, 0, 11, 1], [3] * 7, []]
"""Zeros, ones, a prime count and a prime length, unequal counts, a zero in the middle, no outer turns."""

KERNELS = [_count_into_one, _count_into_rows, _count_in_each_item]


def _run(fn, device, y: np.ndarray, *bounds: np.ndarray) -> np.ndarray:
    """``fn`` on ``device``, and beside it as plain Python; returns what Python made after checking the two agree.
    A device that stops a work item's loops after some turns refuses a loop bounded by memory, saying so."""
    want = y.copy()
    fn(want, *bounds)
    try:
        svod.kernel(fn, static_shapes=True)(y, *bounds, device=device)
    except GraphError as refused:
        if device.caps.max_loop_turns is None or "bound is read from memory" not in str(refused):
            raise
        return want
    np.testing.assert_array_equal(y, want)
    return want


@pytest.mark.parametrize("counts", COUNTS, ids=str)
@pytest.mark.parametrize("fn", KERNELS, ids=lambda fn: fn.__name__)
def test_an_inner_loop_runs_the_count_its_outer_turn_reads(device, fn, counts):
    counts = np.array(counts, np.int32)
    want = _run(fn, device, np.zeros(max(len(counts), 3), np.float32), counts)
    assert want.sum() > 0 or counts.sum() == 0


def test_three_counts_summed_into_one_element(device):
    assert _run(_three_counts_into_one, device, np.zeros(1, np.float32), np.array([1, 2, 1], np.int32))[0] == 4


@pytest.mark.parametrize(("lo", "hi"), [([0, 1, 2], [2, 4, 3]), ([3, 0, 5], [1, 0, 12]), ([0] * 5, [0] * 5),
                                        ([2, -3, 7], [2, 4, 11]), ([], [])], ids=str)
def test_an_inner_loop_runs_between_bounds_its_outer_turn_reads(device, lo, hi):
    _run(_sum_between, device, np.zeros(1, np.float32), np.array(lo, np.int32), np.array(hi, np.int32))


@pytest.mark.parametrize("counts", [[1, 2, 1, 0], [3, 3, 0, 1], [0, 0, 0, 0], [2, 1, 3, 1]], ids=str)
def test_an_inner_loop_runs_the_count_an_outer_count_s_turn_reads(device, counts):
    """Three levels: a work item's own count bounds its middle loop, whose turns' counts bound the innermost."""
    _run(_counts_of_counts, device, np.zeros(4, np.float32), np.array(counts, np.int32))


def test_a_count_read_outside_its_buffer_is_reported(device):
    """``counts[2]`` of two counts is read before its loop starts: the read fails, whatever the loop would do; a
    device that stops a work item's loops after some turns refuses the kernel before it runs."""
    if device.caps.max_loop_turns is None:
        refused: tuple[type[Exception], str] = (IndexOutOfBoundsError, "counts has 2 elements")
    else:
        refused = (GraphError, "bound is read from memory")
    with pytest.raises(refused[0], match=refused[1]):
        svod.kernel(_three_counts_into_one, static_shapes=True)(np.zeros(1, np.float32), np.array([1, 2], np.int32),
                                                                device=device)
