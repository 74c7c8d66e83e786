"""Adversarial probes of arrays made in a prange's body, ufuncs into an ``out`` and views' element stores in
loops, each against the same function run as plain Python on every device, or asserting svod's refusal at the
user's line where NumPy raises or svod cannot store: lengths varying with the work item, allocations in a nest
of pranges and in a branch, outs overlapping their inputs by a shift, a reversal or a stride."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend.oracle import as_python
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

SIZES = (1, 2, 7, 13)


@svod.jit
def shrinking(a):
    n = a.shape[0]
    out = np.zeros(n)
    for i in svod.prange(n):
        t = np.zeros(n - i)
        t[:] = a[i]
        out[i] = t.sum()
    return out


@svod.jit
def nested(a):
    n = a.shape[0]
    out = np.zeros((n, n))
    for i in svod.prange(n):
        for j in svod.prange(n):
            t = np.full(j + 1, a[i])
            out[i, j] = t.sum()
    return out


@svod.jit
def in_a_branch(a):
    n = a.shape[0]
    out = np.zeros(n)
    for i in svod.prange(n):
        if a[i] > 0:
            t = np.full(i + 1, a[i])
            out[i] = t.sum()
        else:
            out[i] = -1.0
    return out


@svod.jit
def partly_written(a):
    n = a.shape[0]
    out = np.zeros(n)
    for i in svod.prange(n):
        t = np.zeros(n)
        t[:i] = a[i]
        np.multiply(t, t, t)
        out[i] = t.sum()
    return out


@svod.jit
def overlaps(a):
    np.add(a[1:], a[:-1], out=a[1:])
    np.add(a, a[::-1], out=a)
    np.add(a[:-1:2], a[1::2], out=a[1::2])
    return a


@svod.jit
def negative_length(a, m):
    out = np.zeros(a.shape[0])
    for i in svod.prange(a.shape[0]):
        t = np.zeros(m - 5)
        out[i] = t.sum() + a[i]
    return out


@svod.jit
def into_a_transpose(a, b):
    np.add(a, 1.0, out=b.T)
    return b


@svod.jit
def into_an_int(a, b):
    np.add(a, 1.5, out=b)
    return b


@svod.jit
def view_length_in_a_loop(a):
    v = a[1:]
    for k in range(v.shape[0]):
        v[k] += k
    return a


@pytest.mark.parametrize("n", SIZES)
def test_per_item_arrays_and_overlapping_outs(device: Device, n: int) -> None:
    a = np.linspace(-1.5, 2.0, n)
    agrees_with_python(overlaps, device, a, rtol=1e-5)
    for fn in (shrinking, nested, in_a_branch, partly_written):
        if refuses(device, svod.dtypes.float64):  # np.zeros makes float64, which this device cannot hold
            with pytest.raises(SvodError, match="float64"):
                fn(a.astype(np.float32), device=device)
        else:
            agrees_with_python(fn, device, a, rtol=1e-5)


def test_what_numpy_raises_or_svod_cannot_store_is_refused_at_the_line() -> None:
    with pytest.raises(ValueError, match="negative"):
        as_python(negative_length)(np.ones(3), 2)
    with pytest.raises(KernelSyntaxError, match=r"test_allocation_probes.py:\d+: .*may be negative"):
        negative_length(np.ones(3), 2)
    np.testing.assert_array_equal(negative_length(np.ones(3), 6), np.ones(3))
    with pytest.raises(KernelSyntaxError, match=r"only where it is an array's name or a slice"):
        into_a_transpose(np.ones((2, 3)), np.zeros((3, 2)))
    with pytest.raises(KernelSyntaxError, match="same_kind"):
        into_an_int(np.ones(3), np.zeros(3, np.int64))
    for n in (1, 4):  # a view's length in a loop's range: a wrong answer once, then refused, now Python's
        np.testing.assert_array_equal(view_length_in_a_loop(np.ones(n)), as_python(view_length_in_a_loop)(np.ones(n)))
