"""``svod.run`` on numpy arrays after runs that used them in place (``CachedKernel.run_on_arrays``): an array that
may not be used as it is (another dtype, too short, read-only where written, not C-contiguous, misaligned,
overlapping a written one) is taken by the general path as on a first run, copied or refused in the same words,
and the arrays after it run in place again."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import svod
from svod.config import settings
from svod.errors import SvodError
from svod.frontend.api import run_compiled
from svod.runtime.cache import KernelCache
from svod.runtime.kernel import CachedKernel


def triple_fn(out, x):
    for i in svod.prange(out.shape[0]):
        out[i] = x[i] * 3.0


TRIPLE = svod.kernel(triple_fn)


def _ast(n: int = 5) -> svod.UOp:
    return TRIPLE.build(np.zeros(n, np.float32), np.zeros(n, np.float32))


def _fresh() -> CachedKernel:
    """The kernel compiled anew, as no run has left it."""
    cache = KernelCache(dataclasses.replace(settings, disk_cache=False))
    return cache.get(_ast(), svod.get_device("CPU"))


@pytest.fixture
def in_place(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The addresses of each run that used the caller's arrays in place."""
    seen: list[list[int]] = []
    launch_at = CachedKernel.launch_at

    def spy(self: CachedKernel, addresses: list[int], *args: object) -> None:
        seen.append(list(addresses))
        launch_at(self, addresses, *args)

    monkeypatch.setattr(CachedKernel, "launch_at", spy)
    return seen


def _outcome(kernel: CachedKernel, out: np.ndarray, x: np.ndarray, n: int) -> tuple[object, ...] | None:
    """None where the run ran; the error it raised, as what tells one from another."""
    try:
        run_compiled(kernel, [out, x], {"out_shape0": n})
    except SvodError as err:
        return type(err), str(err), err.stage, err.value
    return None


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _misaligned(n: int) -> np.ndarray:
    raw = np.zeros(n * 4 + 1, np.uint8)
    return np.frombuffer(raw.data, dtype=np.float32, count=n, offset=1)


ODD_OUTPUTS = {
    "float64": lambda n: np.zeros(n, np.float64),
    "too short": lambda n: np.zeros(n - 1, np.float32),
    "read-only": lambda n: _read_only(np.zeros(n, np.float32)),
    "strided": lambda n: np.zeros(2 * n, np.float32)[::2],
    "misaligned": _misaligned,
    "two-d": lambda n: np.zeros((1, n), np.float32),
}

COPIED = ("misaligned", "strided", "two-d")
"""The odd outputs the general path copies in and out (a two-d array is a buffer of its elements)."""
REFUSED = {"float64": "float64", "read-only": "read-only", "too short": "elements"}
"""The words of each refusal."""


@pytest.mark.parametrize("n", [1, 7])
@pytest.mark.parametrize("odd", sorted(ODD_OUTPUTS))
def test_an_odd_output_after_runs_in_place_is_taken_as_a_first_run_takes_it(odd, n, in_place):
    x = np.arange(n, dtype=np.float32) - 2.5
    expected_error = _outcome(_fresh(), ODD_OUTPUTS[odd](n), x, n)
    assert (expected_error is None) == (odd in COPIED), expected_error
    assert expected_error is None or REFUSED[odd] in expected_error[1]
    kernel = _fresh()
    out = np.full(n, np.nan, np.float32)
    for _ in range(3):
        run_compiled(kernel, [out, x], {"out_shape0": n})
    np.testing.assert_array_equal(out, x * 3)
    odd_out = ODD_OUTPUTS[odd](n)
    before = odd_out.copy()
    assert _outcome(kernel, odd_out, x, n) == expected_error
    if expected_error is None:
        np.testing.assert_array_equal(odd_out.reshape(-1)[:n], x * 3)
    else:
        np.testing.assert_array_equal(odd_out, before)
    fresh = np.zeros(n, np.float32)
    runs = len(in_place)
    run_compiled(kernel, [fresh, x], {"out_shape0": n})
    np.testing.assert_array_equal(fresh, x * 3)
    assert in_place[runs:] == [[fresh.ctypes.data, x.ctypes.data]]


@pytest.mark.parametrize("n", [1, 2, 13])
def test_read_only_and_writeable_inputs_in_turn_run_in_place(n, in_place):
    out, x = np.zeros(n, np.float32), np.arange(n, dtype=np.float32)
    frozen = _read_only(x * 2 - 1)
    for source in (x, frozen, frozen, x, frozen, np.arange(2 * n, dtype=np.float32)[::2], x):
        out[:] = np.nan
        runs = len(in_place)
        svod.run(_ast(), [out, source], out_shape0=n)
        np.testing.assert_array_equal(out, source * 3)
        assert len(in_place) == runs + (n == 1 or source.flags.c_contiguous)


def test_an_output_that_is_the_input_runs_as_on_copies_after_arrays_apart():
    values = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    svod.run(_ast(), [out, values], out_shape0=6)
    svod.run(_ast(), [values, values], out_shape0=6)
    np.testing.assert_array_equal(values, np.arange(6) * 3)
    overlapping = np.arange(8, dtype=np.float32)
    svod.run(_ast(), [overlapping[2:], overlapping[:6]], out_shape0=6)
    np.testing.assert_array_equal(overlapping, [0, 1, 0, 3, 6, 9, 12, 15])


def test_empty_arrays_after_others_run_nothing():
    out, x = np.zeros(3, np.float32), np.arange(3, dtype=np.float32)
    svod.run(_ast(), [out, x], out_shape0=3)
    empty_out, empty_x = np.zeros(0, np.float32), np.zeros(0, np.float32)
    svod.run(_ast(), [empty_out, empty_x], out_shape0=0)
    svod.run(_ast(), [out, x * 2], out_shape0=3)
    np.testing.assert_array_equal(out, x * 6)
