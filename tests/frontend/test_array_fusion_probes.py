"""Adversarial probes of a reduction made into an array of its own before the statement that reads it
(``Emitter.separated``): in place, after a write of an earlier statement, inside ``np.where``, of a
reduction, over axes of 0, 1, 8 and 9 terms (either side of ``CHEAP_TERMS``), on small integers, and under
``svod.grad``; each compared with the same function run as plain NumPy (or float64 finite differences)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.frontend.oracle import as_python
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

RNG = np.random.default_rng(89)
ROWS = [0, 1, 2, 8, 9, 13]


@svod.jit
def centred_in_place(x):
    x -= x.mean(axis=0)
    return x


@svod.jit
def less_the_rows_above(a):
    a[1:] = a[1:] - a[:-1].sum(axis=0)
    return a


@svod.jit
def centred_where_positive(x):
    return np.where(x > 0, x - x.sum(axis=0), x)


@svod.jit
def less_a_sum_of_sums(x):
    return x - x.sum(axis=0).sum() - x.sum(axis=0)


@svod.jit
def centred_twice(x):
    x -= x.mean(axis=0)
    x -= 0.5 * np.abs(x).sum(axis=0)
    return x


@svod.jit
def centred_integers(x):
    return x - x.sum(axis=0)


@svod.jit
def plus_its_own_product(a, b):
    a += a @ b
    return a


def specials(rows: int, cols: int) -> np.ndarray:
    """Normal values with a NaN, +inf and -0.0 where there are rows for them."""
    x = RNG.normal(size=(rows, cols))
    for row, value in ((1, np.nan), (2, np.inf), (3, -0.0)):
        if row < rows:
            x[row, cols // 2] = value
    return x


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", [1, 3])
def test_a_reduction_of_what_the_statement_writes(device, rows, cols):
    """The reduction reads the array the statement stores into, in place: it is read as before the statement
    whether it is made first (9 rows or more) or added again at each element (8 or fewer)."""
    x = specials(rows, cols)
    for fn in (centred_in_place, less_the_rows_above, centred_where_positive, less_a_sum_of_sums, centred_twice):
        agrees_with_python(fn, device, x, rtol=1e-9, numpy_warns=True)


@pytest.mark.parametrize("rows", ROWS)
def test_a_product_of_the_array_written(device, rows):
    agrees_with_python(plus_its_own_product, device, RNG.normal(size=(rows, rows)),
                       RNG.normal(size=(rows, rows)), rtol=1e-9)


@pytest.mark.parametrize("rows", [8, 9, 300])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8])
def test_a_sum_of_small_integers_is_promoted_as_numpy(device, rows, dtype):
    """NumPy sums small integers as its default integer and the difference takes that dtype: the column's
    sum made first keeps it, wrapping only where NumPy's does."""
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=(rows, 2), endpoint=True).astype(dtype)
    x[0] = info.max
    wide = np.result_type(x.sum(axis=0), x)
    if refuses(device, svod.dtypes.from_numpy(wide)):
        with pytest.raises(svod.errors.SvodError, match=str(wide)):
            centred_integers(x, device=device)
        return
    agrees_with_python(centred_integers, device, x, typed=True)


@pytest.mark.parametrize("rows", [8, 9])
def test_a_float32_mean_made_first_stays_float32(device, rows):
    x = specials(rows, 4).astype(np.float32)
    agrees_with_python(centred_in_place, device, x, rtol=1e-5, atol=1e-6, typed=True, numpy_warns=True)


def finite_difference(fn, args: list[np.ndarray], number: int, eps: float = 1e-6) -> np.ndarray:
    found = np.zeros_like(args[number])
    for at in np.ndindex(args[number].shape):
        up, down = [a.copy() for a in args], [a.copy() for a in args]
        up[number][at] += eps
        down[number][at] -= eps
        found[at] = (fn(*up) - fn(*down)) / (2 * eps)
    return found


@svod.jit
def weighted_spread(x, w):
    x -= x.mean(axis=0)
    return np.sum(np.where(x > 0, x * w, w - (w @ x.T).sum()))


@pytest.mark.parametrize("rows", [1, 2, 8, 9, 13])
def test_a_gradient_through_a_reduction_made_first(rows):
    """On a tape each argnums subset (the one not asked for is left out of the adjoints) gives the float64
    finite difference of plain NumPy's function."""
    args = [RNG.normal(size=(rows, 3)), RNG.normal(size=(rows, 3))]
    plain = as_python(weighted_spread)
    for numbers in (0, 1, (0, 1), (1, 0)):
        got = svod.grad(weighted_spread, argnums=numbers)(*[a.copy() for a in args])
        wanted = numbers if isinstance(numbers, tuple) else (numbers,)
        found = got if isinstance(got, tuple) else (got,)
        for gradient, number in zip(found, wanted, strict=True):
            expected = finite_difference(lambda *a: float(plain(*a)), args, number)
            np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-6)
