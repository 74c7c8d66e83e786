"""A ufunc called for its effect on its ``out`` (``svod.frontend.ufunc_outs``) and ``x.fill(v)``, at the function's
level and inside loops of sequential code (where such a call's loop stored no element and was dropped, returning
the arrays unchanged), against the same function run as plain Python on every device: sizes 0, 1 and primes,
complex values, an out that overlaps its inputs, special values; NumPy's same_kind refusal at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.errors import KernelSyntaxError, SvodError
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

SIZES = (0, 1, 7, 13)


@svod.jit
def iterated(c, steps):
    z = np.zeros(c.shape, np.complex128)
    for _turn in range(steps):
        np.multiply(z, z, z)
        np.add(z, c, out=z)
    return z


@svod.jit
def real_steps(x, c, steps):
    for i in range(steps):
        if i > 0:
            np.add(x, c, x)
        np.maximum(x, -4.0, out=(x,))
    np.subtract(x[1:], x[:-1], x[:-1])  # an out that overlaps its inputs: NumPy computes as if into a new array
    return x


@svod.jit
def negated(m, steps):
    for _turn in range(steps):
        np.logical_not(m, m)
    return m


@svod.jit
def filled(x, steps):
    for i in range(steps):
        x.fill(i * 0.5)
    return x


@svod.jit
def unsafe_cast(x, counts):
    np.add(x, 1.5, counts)


def floats(device: Device, n: int) -> np.ndarray:
    """``n`` floats, the first -0.0, NaN and inf on a device with IEEE floats (WGSL's may assume them finite)."""
    x = np.linspace(-3.0, 2.0, n)
    special = [-0.0, np.nan, np.inf] if device.caps.ieee_floats else [0.5, 1.0, 1.5]
    x[:min(n, 3)] = np.array(special)[:n]
    return x


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("steps", [0, 1, 4])
def test_ufuncs_into_their_out_in_a_loop(device: Device, n: int, steps: int) -> None:
    agrees_with_python(real_steps, device, floats(device, n), floats(device, n)[::-1].copy(), steps, numpy_warns=True)
    if refuses(device, svod.dtypes.bool):
        with pytest.raises(SvodError, match="bool"):
            negated(np.arange(n) % 3 == 0, steps, device=device)
    else:
        agrees_with_python(negated, device, np.arange(n) % 3 == 0, steps)
    agrees_with_python(filled, device, floats(device, n), steps)


@pytest.mark.parametrize("n", SIZES)
def test_a_complex_iteration_in_place(device: Device, n: int) -> None:
    c = np.linspace(-2.0, 0.5, n) + 1j * np.linspace(1.0, -1.0, n)
    if refuses(device, svod.dtypes.float64):  # complex128 is two float64s
        with pytest.raises(SvodError):
            iterated(c, 3, device=device)
        return
    want = iterated.__wrapped__(c.copy(), 3)
    np.testing.assert_allclose(iterated(c.copy(), 3, device=device), want, rtol=1e-12, atol=0)


def test_a_cast_numpy_refuses_is_refused_at_the_line() -> None:
    says = r"test_ufunc_outs\.py:\d+: Cannot cast ufunc 'add' output from dtype\('float64'\) to dtype\('int64'\)"
    with pytest.raises(KernelSyntaxError, match=says + " with casting rule 'same_kind'"):
        unsafe_cast(np.zeros(3), np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="same_kind"):  # as NumPy
        unsafe_cast.__wrapped__(np.zeros(3), np.zeros(3, np.int64))


@svod.jit
def norm_unused(x, steps):
    for _turn in range(steps):
        np.linalg.norm(x)
    return x


def test_a_call_in_sequential_code_that_svod_cannot_make_is_refused_not_dropped() -> None:
    with pytest.raises(KernelSyntaxError, match=r"test_ufunc_outs.py:\d+: .*np.linalg"):
        norm_unused(np.ones(3), 2)
