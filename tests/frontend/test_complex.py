"""Complex numbers, which svod has none of: wherever one enters a ``@svod.jit`` function or a kernel (an argument,
an allocation's ``dtype=complex``, a ``1j`` literal, a complex global, a cast), the call is refused with a
``SvodError`` that names the line and says why, never a wrong answer or NumPy's or LLVM's own exception."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import SvodError
from tests.frontend.test_arrays import line_of

COMPLEX_GLOBAL = 2j


@svod.jit
def doubled(x):
    return x * 2


@svod.jit
def made_complex(x):
    y = np.empty(x.shape[0], dtype=complex)
    y[:] = x
    return y


@svod.jit
def zeros_of(x, dtype):
    return np.zeros(x.shape[0], dtype)


@svod.jit
def times_i(x):
    return x * 1j


@svod.jit
def times_i_in_a_loop(x):
    for i in svod.prange(x.shape[0]):
        x[i] = x[i] + (1j * 0).real
    return x


@svod.jit
def times_a_complex_global(x, out):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * COMPLEX_GLOBAL
    return out


@svod.jit
def cast_to_complex(x):
    return x.astype(np.complex64)


@svod.jit
def scaled(x, c):
    return x * c


X = np.arange(3.0)


@pytest.mark.parametrize(("fn", "args", "at", "says"), [
    (doubled, (X + 1j,), "def doubled", "argument x is of complex128; svod has no complex numbers"),
    (doubled, (np.zeros(0, np.complex64),), "def doubled", "argument x is of complex64; svod has no complex"),
    (scaled, (X, 1 + 2j), "def scaled", "argument c is complex; svod has no complex numbers"),
    (scaled, (X, np.complex64(1)), "def scaled", "argument c is complex64; svod has no complex numbers"),
    (made_complex, (X,), "np.empty(x.shape[0], dtype=complex)", "complex128 has no svod dtype .svod has no complex"),
    (zeros_of, (X, np.complex64), "np.zeros(x.shape[0], dtype)", "complex64 has no svod dtype .svod has no complex"),
    (times_i, (X,), "x * 1j", "an array of complex128, and svod has no complex numbers"),
    (times_i_in_a_loop, (X,), "(1j * 0)", "the constant 1j is not a number: svod has no complex numbers"),
    (times_a_complex_global, (X, np.zeros(3)), "COMPLEX_GLOBAL", "COMPLEX_GLOBAL is complex 2j, which a kernel"),
    (cast_to_complex, (X,), "astype", "an array of complex64, and svod has no complex numbers"),
])
def test_a_complex_number_is_refused_where_it_enters(fn, args, at, says):
    for _ in range(2):  # a second call refuses as the first did
        with pytest.raises(SvodError, match=says) as err:
            fn(*args)
        assert f"{__file__}:{line_of(fn, at)}" in str(err.value)


def copied(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i]


@pytest.mark.parametrize(("args", "says"), [
    ((np.zeros(3, complex), X), "argument out is a 1-d numpy array of complex128: svod has no complex numbers"),
    ((np.zeros(3), X + 1j), "argument x is a 1-d numpy array of complex128: svod has no complex numbers"),
    ((np.zeros(3), 1j), "argument x is complex: svod has no complex numbers"),
    ((np.zeros(3), np.complex128(1)), "argument x is complex128: svod has no complex numbers"),
])
def test_a_kernel_refuses_a_complex_argument_by_its_name(args, says):
    with pytest.raises(SvodError, match=f"kernel 'copied', stage bind\\] {says}"):
        svod.kernel(copied)(*args)
