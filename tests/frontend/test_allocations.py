"""Arrays allocated in a ``prange``'s body (``svod.frontend.allocations``): each work item's own, as Python makes
a new one every turn, against the same function run as plain Python on every device: sizes 0, 1 and primes,
shapes of the work item's variable, two axes, a nest of two pranges, complex, special values; what svod cannot
make each work item's refused at its line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import KernelSyntaxError, SvodError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

SIZES = (0, 1, 7, 13)


@svod.jit
def filled_by_loops(a, m):
    n = a.shape[0]
    out = np.zeros(n)
    for i in svod.prange(n):
        t = np.zeros(m)
        for k in range(m):
            t[k] = a[i] * k
        s = 0.0
        for k in range(m):
            s += t[k]
        out[i] = s + t.sum()
    return out


@svod.jit
def sized_by_item(a):
    out = np.zeros(a.shape[0])
    for i in svod.prange(a.shape[0]):
        t = np.full(i + 1, a[i])
        t[0] = 2.0
        out[i] = t.sum() - t[i]
    return out


@svod.jit
def two_axes(a, m):
    out = np.zeros((a.shape[0], m))
    for i in svod.prange(a.shape[0]):
        t = np.ones((2, m), dtype=np.float32)
        t[0, :] = a[i]
        t[1, :] = t[0, :] * 2 + t[1, :]
        out[i, :] = t[1, :] - t[0, :]
    return out


@svod.jit
def in_a_nest(a, out):
    for i in svod.prange(a.shape[0]):
        for j in svod.prange(a.shape[1]):
            t = np.empty(3)
            t[0] = a[i, j]
            t[1] = t[0] * 2.0
            t[2] = -t[1]
            out[i, j] = t[0] + t[1] * t[2]


@svod.jit
def counts(a, m):
    out = np.zeros(a.shape[0], dtype=np.int64)
    for i in svod.prange(a.shape[0]):
        t = np.zeros(m, dtype=np.int64)
        for k in range(m):
            t[k] = a[i] + k
        out[i] = t.max() if m > 0 else 0
    return out


@svod.jit
def complex_sums(a, m):
    out = np.zeros(a.shape[0], dtype=np.complex128)
    for i in svod.prange(a.shape[0]):
        t = np.zeros(m, dtype=np.complex128)
        for k in range(m):
            t[k] = a[i] * (k + 1j)
        out[i] = t.sum()
    return out


def floats(device: Device, n: int, seed: int) -> np.ndarray:
    """``n`` floats, the first -0.0, inf, NaN and -inf on a device with IEEE floats (WGSL's may assume them
    finite)."""
    a = np.round(np.random.default_rng(seed).standard_normal(n) * 4, 1)
    special = [-0.0, np.inf, np.nan, -np.inf] if device.caps.ieee_floats else [0.5, -1.5, 2.0, -0.25]
    a[:min(n, 4)] = np.array(special)[:n]
    return a


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("m", [0, 1, 5])
def test_each_work_item_fills_and_reads_its_own_array(device: Device, n: int, m: int) -> None:
    if refuses(device, svod.dtypes.float64):  # out = np.zeros(n) is float64, which the device has not
        with pytest.raises(SvodError, match="float64"):
            filled_by_loops(floats(device, n, n).astype(np.float32), m, device=device)
        return
    agrees_with_python(filled_by_loops, device, floats(device, n, n + m), m, numpy_warns=True)
    agrees_with_python(two_axes, device, floats(device, n, n * m), m, numpy_warns=True)


@pytest.mark.parametrize("n", SIZES)
def test_an_array_whose_length_is_the_work_items_own(device: Device, n: int) -> None:
    if refuses(device, svod.dtypes.float64):  # out = np.zeros(n) is float64, which the device has not
        with pytest.raises(SvodError, match="float64"):
            sized_by_item(np.arange(n, dtype=np.float32), device=device)
        return
    agrees_with_python(sized_by_item, device, np.arange(n, dtype=np.float64) * 0.5 - 1.0)


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (3, 7), (5, 2)])
def test_an_array_of_each_work_item_of_a_nest(device: Device, shape: tuple[int, int]) -> None:
    a = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3.0
    if refuses(device, svod.dtypes.float64):  # t is np.empty(3): float64, which the device has not
        with pytest.raises(SvodError, match="float64"):
            in_a_nest(a.astype(np.float32), np.zeros(shape, np.float32), device=device)
        return
    agrees_with_python(in_a_nest, device, a, np.zeros(shape))


@pytest.mark.parametrize("n", SIZES)
def test_integer_arrays_keep_their_extremes(device: Device, n: int) -> None:
    a = np.arange(n, dtype=np.int64) - 3
    a[:min(n, 2)] = [np.iinfo(np.int64).max - 9, np.iinfo(np.int64).min][:n]
    if refuses(device, svod.dtypes.int64):
        with pytest.raises(SvodError):
            counts(a, 4, device=device)
        return
    agrees_with_python(counts, device, a, 4)


@pytest.mark.parametrize("n", [0, 1, 7])
def test_complex_arrays_of_each_work_item(device: Device, n: int) -> None:
    a = np.arange(n, dtype=np.float64) - 2.5
    if refuses(device, svod.dtypes.float64):  # complex128 is two float64s
        with pytest.raises(SvodError):
            complex_sums(a, 3, device=device)
        return
    agrees_with_python(complex_sums, device, a, 3)


@svod.jit
def read_after_the_loop(a):
    for i in svod.prange(a.shape[0]):
        t = np.zeros(3)
        t[0] = a[i]
    return t


@svod.jit
def bound_to_another_name(a, out):
    for i in svod.prange(a.shape[0]):
        t = np.zeros(3)
        u = t
        u[1] = a[i]
        out[i] = t[1]


@svod.jit
def negative_for_some_items(a, out):
    for i in svod.prange(a.shape[0]):
        t = np.zeros(i - 3)
        out[i] = t.sum()


@svod.jit
def sized_by_data(a, out):
    for i in svod.prange(a.shape[0]):
        t = np.zeros(int(a[i]))
        out[i] = t.sum()


@pytest.mark.parametrize(("fn", "line", "says"), [
    (read_after_the_loop, "return t", "read it inside the loop"),
    (bound_to_another_name, "t = np.zeros(3)", "another name is bound to it"),
    (negative_for_some_items, "t = np.zeros(i - 3)", "may be negative for some work item"),
    (sized_by_data, "t = np.zeros(int(a[i]))", "not of values the run computes"),
])
def test_what_cannot_be_each_work_items_is_refused_at_its_line(fn: svod.frontend.jit.Jit, line: str,
                                                                 says: str) -> None:
    a = np.arange(7, dtype=np.float64)
    args = (a,) if fn is read_after_the_loop else (a, np.zeros(7))
    with pytest.raises(KernelSyntaxError) as raised:
        fn(*args)
    text, first = inspect.getsourcelines(fn.fn)
    number = first + next(k for k, written in enumerate(text) if written.strip() == line)
    assert f"test_allocations.py:{number}:" in str(raised.value) and says in str(raised.value)
