"""The run-time bounds test of an access no proof covers (``svod.codegen.checks``): it fails exactly where the
access is made, and only there."""

import numpy as np
import pytest

import svod
from svod.errors import IndexOutOfBoundsError


@svod.kernel
def _last_gathers(x, n):
    for i in range(n):
        x[n - 1] += x[i]


@svod.kernel
def _rows_of_one_element(out, x, m):
    for r in svod.prange(out.shape[0]):
        s = 0.0
        for _ in range(m):
            s += x[m - 1]
        out[r] = s


def _last_gathers_in_python(x: np.ndarray, n: int) -> None:
    for i in range(n):
        x[n - 1] += x[i]


@pytest.mark.parametrize("n", [0, 1, 3, 5])
def test_an_access_outside_its_loop_is_tested_only_where_the_loop_turns(device, n):
    """``x[n - 1]`` names no loop variable, so its test is made once, outside the loop; with ``n == 0`` the
    loop never turns and Python never makes the access (its index, -1, would be out of range)."""
    x, want = np.arange(5, dtype=np.float32), np.arange(5, dtype=np.float32)
    _last_gathers(x, n, device=device)
    _last_gathers_in_python(want, n)
    np.testing.assert_array_equal(x, want)


def test_an_access_outside_its_loop_still_fails_where_the_loop_turns(device):
    with pytest.raises(IndexOutOfBoundsError, match="5 elements"):
        _last_gathers(np.arange(5, dtype=np.float32), 7, device=device)


@pytest.mark.parametrize("m", [0, 2, 5])
def test_a_sums_term_outside_its_loop_is_tested_only_where_the_loop_turns(device, m):
    out, x = np.full(3, 7.0, np.float32), np.arange(5, dtype=np.float32)
    _rows_of_one_element(out, x, m, device=device)
    np.testing.assert_array_equal(np.abs(out), np.full(3, m * (m - 1) if m else 0.0, np.float32))
    with pytest.raises(IndexOutOfBoundsError):
        _rows_of_one_element(out, x, 6, device=device)
