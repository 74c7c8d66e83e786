"""NumPy's keywords in ``@svod.jit`` array statements: ``dtype=`` of ``sum``, ``prod``, ``mean``, ``cumsum`` and
``cumprod`` (functions and methods, by keyword and by position) computed as NumPy computes it, each element cast
to the dtype and accumulated in it, compared with the same function run as plain NumPy over empty, one-element
and prime sizes; every other keyword, or a positional argument past NumPy's, refused at the user's line, naming
the function and the keyword."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError
from tests.frontend.test_array_math import agrees_or_refused
from tests.helpers import refuses

SIZES = [0, 1, 7]


def float32_data(n: int) -> np.ndarray:
    """float32 values whose float32 sum and product lose digits that a float64 accumulator keeps."""
    return (np.cos(np.arange(n) * 0.37) * 1e4 + 0.3).astype(np.float32)


@svod.jit
def in_float64(x, m):
    return (x.sum(dtype=np.float64), np.sum(x, dtype=np.float64), np.sum(x, 0, np.float64), x.mean(dtype=np.float64),
            np.prod(x[:3] * 1e-2, dtype=np.float64), np.cumsum(x, dtype=np.float64), x.cumprod(0, np.float64),
            np.sum(m, axis=1, dtype=np.float64, keepdims=True), m.mean(axis=0, dtype=np.float64),
            np.cumsum(m, axis=1, dtype=np.float64))


@pytest.mark.parametrize("n", SIZES)
def test_dtype_float64_accumulates_float32_in_float64(device, n):
    """A float32 sum in float32 is off by about 1e-7 of its size, and of dtype float32: both checked."""
    x = float32_data(n)
    agrees_or_refused(in_float64, device, x, x.reshape(1, n) + np.float32(1), needs=svod.dtypes.float64, rtol=1e-12)


@svod.jit
def in_int32(x):
    return np.sum(x, dtype=np.int32), x.cumsum(dtype=np.int32), np.prod(x[:2], dtype=np.int32), \
        (x > 0).sum(dtype=np.int32), np.mean(x, dtype=np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_dtype_int32_truncates_each_element_before_summing(device, n):
    """NumPy casts each float to the integer dtype (dropping its fraction) and sums the integers."""
    x = np.linspace(-3.7, 5.2, n).astype(np.float32)
    agrees_or_refused(in_int32, device, x, rtol=1e-6)


@svod.jit
def in_float32(x):
    return x.sum(dtype=np.float32), np.cumsum(x, dtype=np.float32), x.mean(dtype=np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_dtype_float32_of_float64_narrows_each_element(device, n):
    if refuses(device, svod.dtypes.float64):
        return
    agrees_or_refused(in_float32, device, np.cos(np.arange(n) * 0.37) * 3.0 + 1e-9, rtol=1e-5)


@svod.jit
def sum_out(x):
    return x.sum(out=x)


@svod.jit
def sum_where(x):
    return np.sum(x, where=x > 0)


@svod.jit
def max_initial(x):
    return np.max(x, initial=0.0)


@svod.jit
def sum_initial_by_position(x):
    return np.sum(x, 0, None, None, False, 5.0)


@svod.jit
def mean_in_int64(x):
    return np.mean(x, dtype=np.int64)


@svod.jit
def any_where(x):
    return x.any(where=x > 1)


@svod.jit
def argmax_out(x):
    return np.argmax(x, out=x)


@svod.jit
def std_in_float32(x):
    return np.std(x, dtype=np.float32)


@svod.jit
def cumsum_out(x):
    return np.cumsum(x, out=x)


@svod.jit
def exp_out(x):
    return np.exp(x, out=x)


@svod.jit
def maximum_in_float32(x):
    return np.maximum(x, 1.0, dtype=np.float32)


@svod.jit
def where_unknown(x):
    return np.where(x > 0, x, 0.0, fill=1)


@svod.jit
def clip_out(x):
    return np.clip(x, 0.0, 1.0, out=x)


@svod.jit
def isnan_where(x):
    return np.isnan(x, where=x > 0)


@svod.jit
def diff_prepended(x):
    return np.diff(x, prepend=0.0)


@svod.jit
def concatenate_in_float32(x):
    return np.concatenate((x, x), dtype=np.float32)


@svod.jit
def astype_casting(x):
    return x.astype(np.float32, casting="same_kind")


@svod.jit
def copy_order(x):
    return x.copy(order="F")


@svod.jit
def dot_out(x):
    return np.dot(x, x, out=None)


@svod.jit
def sum_unknown(x):
    return x.sum(bogus=1)


@svod.jit
def sum_past_its_arguments(x):
    return x.sum(0, np.float64, None, True, 0, True, 9)


@pytest.mark.parametrize(("fn", "says"), [
    (sum_out, "np.sum's out= is not one svod takes"), (sum_where, "np.sum's where= is not one svod takes"),
    (max_initial, "np.max's initial= is not one svod takes"),
    (sum_initial_by_position, "np.sum's initial= is not one svod takes"),
    (mean_in_int64, "np.mean's dtype=int64 is not one svod takes"), (any_where, "np.any's where= is not one"),
    (argmax_out, "np.argmax's out= is not one svod takes"), (std_in_float32, "np.std's dtype= is not one"),
    (cumsum_out, "np.cumsum's out= is not one svod takes"), (exp_out, "np.exp's out= is not one svod takes"),
    (maximum_in_float32, "np.maximum's dtype= is not one"), (where_unknown, "np.where's fill= is not one"),
    (clip_out, "np.clip's out= is not one"), (isnan_where, "np.isnan's where= is not one"),
    (diff_prepended, "np.diff's prepend= is not one"), (concatenate_in_float32, "np.concatenate's dtype= is not one"),
    (astype_casting, "x.astype's casting= is not one"), (copy_order, "x.copy's order= is not one"),
    (dot_out, "np.dot's out= is not one"), (sum_unknown, "np.sum: got an unexpected keyword argument 'bogus'"),
    (sum_past_its_arguments, "np.sum: too many positional arguments")])
def test_a_keyword_svod_does_not_take_is_refused_at_its_line(fn, says):
    line = inspect.getsourcelines(fn.fn)[1] + 2  # the `return` under `@svod.jit` and the `def`
    with pytest.raises(KernelSyntaxError, match=f"test_array_keywords.py:{line}: {says}"):
        fn(np.linspace(-1.0, 2.0, 6))


@svod.jit
def in_given(x, d):
    return np.sum(x, dtype=d), x.prod(dtype=d), np.cumsum(x, dtype=d), np.mean(x, dtype=d)


@pytest.mark.parametrize("n", SIZES)
def test_a_dtype_argument_of_none_is_numpys_own(device, n):
    """``dtype=d`` with d None accumulates as without it (an int64 sum, not ``np.dtype(None)``'s float64, which
    loses the digits of 2**53 + 1)."""
    x = np.arange(n, dtype=np.int64) + 2**53
    agrees_or_refused(in_given, device, x, None, needs=svod.dtypes.int64)
