"""A scalar of ``@svod.jit``'s host code whose value only the run knows (an array's element, ``n[0]``, a
reduction): NumPy's promotion reads its type, a NumPy scalar being strong under NEP 50 and a Python number
(``float(n[0])``) weak; each compared on every device with the function run as plain Python, dtype and values."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError, SvodError
from tests.frontend.test_jit import agrees_with_python as compared

SPECIAL = [0.1, -0.0, np.nan, np.inf, -np.inf, 1e300]
"""Elements of a float64 array: one that float32 rounds, a signed zero, NaN, infinities, one float32 overflows."""


def agrees_with_python(fn, device, *args, **options):
    """``fn`` agrees with plain Python on ``device``, or, where the device cannot hold a dtype it computes (WGSL's
    8-, 16- and 64-bit types), is refused naming the dtype."""
    with np.errstate(all="ignore"):
        dtypes = {a.dtype for a in args} | {np.asarray(fn.fn(*[a.copy() for a in args])).dtype}
    held = device.caps.element_dtypes
    if any(svod.dtypes.from_numpy(d) not in held for d in dtypes):
        with pytest.raises(SvodError, match="cannot hold"):
            fn(*args, device=device)
        return
    compared(fn, device, *args, **options)


@svod.jit
def plus_an_element(x, n):
    p = n[0]
    return x + p


@svod.jit
def plus_a_float_of_an_element(x, n):
    p = float(n[0])
    return x + p


@svod.jit
def plus_an_int_of_an_element(x, n):
    p = int(n[0])
    return x + p


@svod.jit
def times_a_sum(x, n):
    p = n.sum()
    return x * p


@pytest.mark.parametrize("value", SPECIAL)
@pytest.mark.parametrize("size", [0, 1, 7])
def test_a_float64_element_is_strong_against_a_float32_array(device, value, size):
    """``x32 + n[0]`` with ``n`` float64 is float64 (NumPy 2), not float32: the element's value kept whole."""
    x = np.arange(size, dtype=np.float32) - 3
    agrees_with_python(plus_an_element, device, x, np.array([value]), typed=True, numpy_warns=True)
    agrees_with_python(times_a_sum, device, x, np.array([value, 1.0]), typed=True, numpy_warns=True)


@pytest.mark.parametrize("value", [np.iinfo(np.int64).max - 5, np.iinfo(np.int64).min, 1000, -129, 0])
def test_an_int64_element_is_strong_against_an_int8_array(device, value):
    """``x8 + n[0]`` with ``n`` int64 is int64, not int8 wrapping the sum."""
    x = np.array([0, 1, -128, 127, 5], np.int8)
    agrees_with_python(plus_an_element, device, x, np.array([value], np.int64), typed=True, numpy_warns=True)


@pytest.mark.parametrize("value", [0.1, -0.0, np.nan, np.inf])
def test_a_float32_element_against_a_float64_array(device, value):
    """``x64 + n32[0]`` is float64, of the element's float32 value."""
    agrees_with_python(plus_an_element, device, np.array([1.5, -2.25, 0.0]), np.array([value], np.float32),
                       typed=True)


@pytest.mark.parametrize("value", [0.1, 2.5, -0.0, np.inf])
def test_a_python_float_of_an_element_is_weak(device, value):
    """``float(n[0])`` is a Python float, weak: ``x32 + float(n[0])`` stays float32, an int8 array's sum with it
    float64 (a Python float against an int array)."""
    agrees_with_python(plus_a_float_of_an_element, device, np.array([1.5, -3.0], np.float32), np.array([value]),
                       typed=True)
    agrees_with_python(plus_a_float_of_an_element, device, np.array([1, -3], np.int8), np.array([value]), typed=True)


@pytest.mark.parametrize("value", [3.0, -7.0, 100.0])
def test_a_python_int_of_an_element_is_weak(device, value):
    """``int(n[0])`` is a Python int, weak: ``x64 + int(n[0])`` is int64, ``x32f + int(n[0])`` float32. Against
    an int8 array NumPy raises OverflowError for a value past int8's range, which only the run knows: refused."""
    agrees_with_python(plus_an_int_of_an_element, device, np.array([1, -3, 20], np.int64), np.array([value]),
                       typed=True)
    agrees_with_python(plus_an_int_of_an_element, device, np.array([1.5, -3.0], np.float32), np.array([value]),
                       typed=True)
    with pytest.raises(OverflowError):
        plus_an_int_of_an_element.__wrapped__(np.array([1], np.int8), np.array([300.0]))
    with pytest.raises(KernelSyntaxError, match=r"`p` is a Python int only the run knows.*does not fit int8"):
        plus_an_int_of_an_element(np.array([1, -3, 20], np.int8), np.array([value]), device=device)


@pytest.mark.parametrize("kind", [np.bool_, np.uint8, np.int16])
def test_an_element_of_another_dtype(device, kind):
    """A bool, unsigned or small int element promotes a float32 array as NumPy's scalar of its dtype."""
    agrees_with_python(plus_an_element, device, np.array([1.5, -3.0], np.float32), np.array([1], kind), typed=True)
