"""``np.linalg.norm(x, ord, axis, keepdims)`` in ``@svod.jit`` functions against NumPy on every device: every
order NumPy takes for vectors and for matrices, over one axis or two of 1-D, 2-D and 3-D arrays of lengths 0,
1, 2, 5 and 17, ``keepdims``, float32, float64 and integers (float64), NaN, infinities and -0.0; and what NumPy
raises for, refused at the line."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import KernelSyntaxError
from tests.frontend.linalg_cases import dtypes_of


@svod.jit
def normed(x, order, axis, keepdims):
    return np.linalg.norm(x, order, axis, keepdims)


@svod.jit
def plain(x):
    return np.linalg.norm(x) * 1.0


@svod.jit
def keyword_norm(x, order):
    y = x * 2
    return np.linalg.norm(y, ord=order, axis=-1) + 1


@svod.jit
def vector_norms(x):
    return (np.linalg.norm(x, None, 0), np.linalg.norm(x, 0, 0), np.linalg.norm(x, 1, 0), np.linalg.norm(x, 2, 0),
            np.linalg.norm(x, 3, 0), np.linalg.norm(x, 0.5, 0), np.linalg.norm(x, -1, 0), np.linalg.norm(x, -2.5, 0),
            np.linalg.norm(x, np.inf, 0), np.linalg.norm(x, -np.inf, -1, True), np.linalg.norm(x, 3, -1, True))


@svod.jit
def matrix_norms(x):
    return (np.linalg.norm(x, "fro"), np.linalg.norm(x, "f", (1, 0)), np.linalg.norm(x, 1),
            np.linalg.norm(x, np.inf, (0, 1), True), np.linalg.norm(x, 1, (1, 0)), np.linalg.norm(x, np.inf, (-1, -2)),
            np.linalg.norm(x, -1, keepdims=True), np.linalg.norm(x, -np.inf, (1, 0)), np.linalg.norm(x, None, (0, 1)))


VECTOR_ORDERS = (None, 0, 1, 2, 3, 0.5, -1, -2.5, np.inf)
"""The orders of ``vector_norms`` over axis 0, then -inf and 3 over the last axis, kept."""
MATRIX_ORDERS = (("fro", None, False), ("f", (1, 0), False), (1, None, False), (np.inf, (0, 1), True),
                 (1, (1, 0), False), (np.inf, (-1, -2), False), (-1, None, True), (-np.inf, (1, 0), False),
                 (None, (0, 1), False))
"""The order, axis and keepdims of each of ``matrix_norms``."""


def numpy_norm(*args: object, **keywords: object) -> np.ndarray:
    """NumPy's norm, its warnings (a negative order's division by zero) silenced: the values are what count."""
    with np.errstate(all="ignore"):
        return np.asarray(np.linalg.norm(*args, **keywords))


def values(shape: tuple[int, ...], dtype: str, seed: int, zeros: bool = True) -> np.ndarray:
    """Random elements with a zero and a -0.0 among them (where there is room, and ``zeros``)."""
    x = np.random.default_rng(seed).standard_normal(shape)
    flat = x.reshape(-1)
    if flat.size > 2 and zeros:
        flat[1], flat[2] = 0.0, -0.0
    return x.astype(dtype)


def agrees(got: object, want: object, dtype: np.dtype, count: int) -> None:
    """Within the rounding of a sum of ``count`` magnitudes (and of a power and its root), shape and dtype
    NumPy's (a jitted function returns one number as a Python float), NaN where NumPy's is."""
    got_array, want_array = np.asarray(got), np.asarray(want)
    assert got_array.shape == want_array.shape and want_array.dtype == np.dtype(dtype)
    assert got_array.dtype == want_array.dtype if want_array.ndim else isinstance(got, float)
    rtol = 20 * float(np.finfo(dtype).eps) * max(count, 4)
    np.testing.assert_allclose(got_array, want_array, rtol=rtol, atol=0)


def check_vector_norms(x: np.ndarray, device) -> None:
    got = vector_norms(x, device=device)
    wanted = [numpy_norm(x, order, 0) for order in VECTOR_ORDERS]
    wanted += [numpy_norm(x, -np.inf, -1, True), numpy_norm(x, 3, -1, True)]
    for g, want in zip(got, wanted, strict=True):
        agrees(g, want, want.dtype, x.shape[0])


def check_matrix_norms(x: np.ndarray, device) -> None:
    got = matrix_norms(x, device=device)
    for g, (order, axis, keepdims) in zip(got, MATRIX_ORDERS, strict=True):
        want = numpy_norm(x, order, axis, keepdims)
        agrees(g, want, want.dtype, max(x.shape))


def test_vector_norms_agree_with_numpy(device):
    """Every order of a vector, and over the first axis of a matrix (its columns' norms)."""
    for dtype in dtypes_of(device):
        for shape in ((1,), (2,), (5,), (17,), (3, 4), (17, 2)) if device.name == "CPU" else ((2,), (5,), (3, 4)):
            # (a negative order's power of 0 is inf: WebGPU's compilers may take floats as finite, docs/numpy.md)
            check_vector_norms(values(shape, dtype, shape[0], not device.name.startswith("WEBGPU")), device)
    x = values((3, 5), dtypes_of(device)[-1], 4)
    got = keyword_norm(x, 3, device=device)
    agrees(got, numpy_norm(x * 2, ord=3, axis=-1) + 1, got.dtype, 5)
    with pytest.raises(KernelSyntaxError, match="smallest of no elements"):
        vector_norms(np.ones(0, np.float32), device=device)
    empty = np.ones(0, np.float32)
    agrees(normed(empty, np.inf, None, False, device=device), numpy_norm(empty, np.inf), np.dtype(np.float32), 1)
    agrees(normed(empty, 3, None, True, device=device), numpy_norm(empty, 3, None, True), np.dtype(np.float32), 1)


def test_matrix_norms_agree_with_numpy(device):
    for dtype in dtypes_of(device):
        for shape in ((1, 1), (2, 5), (5, 2), (17, 17)) if device.name == "CPU" else ((2, 5), (5, 2)):
            check_matrix_norms(values(shape, dtype, sum(shape)), device)
    for shape in ((0, 3), (3, 0)):  # the largest sum of no elements is 0; the smallest is refused
        x = np.ones(shape, np.float32)
        for order, axis in ((1, None), (np.inf, (1, 0)), ("fro", None)):
            agrees(normed(x, order, axis, True, device=device), numpy_norm(x, order, axis, True),
                   np.dtype(np.float32), 1)


def test_norms_over_two_axes_of_a_stack(device):
    dtype = dtypes_of(device)[-1]
    x = values((3, 4, 5), dtype, 3)
    for order, axis, keepdims in (("fro", (0, 2), True), (1, (2, 1), False), (-np.inf, (1, 0), True)):
        want = numpy_norm(x, order, axis, keepdims)
        agrees(normed(x, order, axis, keepdims, device=device), want, want.dtype, 5)
    want = numpy_norm(x)
    agrees(plain(x, device=device), want, want.dtype, x.size)


def test_special_values_and_integers(device):
    """NaN wherever NumPy's is NaN (a largest magnitude of a NaN too), inf of an infinity, -0.0 a zero; an
    integer array computed in float64 (where the device holds it). WebGPU's compilers may take floats as
    finite (docs/numpy.md): there, -0.0 alone."""
    dtype = dtypes_of(device)[-1]
    specials = (-0.0,) if device.name.startswith("WEBGPU") else (np.nan, np.inf, -np.inf, -0.0)
    for special in specials:
        x = np.array([[1.0, special, -2.0], [0.5, 3.0, -0.0]], dtype)
        if not device.name.startswith("WEBGPU"):  # (its negative orders' powers of 0 are inf)
            check_vector_norms(x, device)
        check_matrix_norms(x, device)
    if dtype == "float64":
        big = np.iinfo(np.int32).max
        ints = np.array([[big, -big - 1, 0], [1, -1, 7]], np.int32)
        check_vector_norms(ints, device)
        check_matrix_norms(ints, device)
        agrees(plain(np.array([True, False, True]), device=device), np.sqrt(2.0), np.dtype(np.float64), 3)


def test_what_numpy_raises_for_is_refused():
    vector, matrix, cube = np.ones(3), np.ones((2, 3)), np.ones((2, 2, 2))
    for args, said in (((vector, "fro", None, False), r"Invalid norm order 'fro' for vectors"),
                       ((vector, "nuc", 0, False), r"Invalid norm order 'nuc' for vectors"),
                       ((matrix, 3, None, False), r"Invalid norm order 3 for matrices"),
                       ((matrix, "bad", (0, 1), False), r"Invalid norm order 'bad' for matrices"),
                       ((cube, 1, None, False), r"Improper number of dimensions"),
                       ((cube, None, (0, 1, 2), False), r"Improper number of dimensions"),
                       ((matrix, 1, (1, 1), False), r"Duplicate axes"),
                       ((matrix, 1, (0, -2), False), r"Duplicate axes"),
                       ((matrix, None, 2, False), r"axis 2 is out of bounds"),
                       ((matrix, None, "one", False), r"axis must be None, an integer or a tuple"),
                       ((np.ones((0, 3)), -np.inf, 0, False), r"smallest of no elements"),
                       ((np.ones((3, 0)), -1, None, False), r"smallest of no elements"),
                       ((cube, 2, (0, 1), False), r"a stack of matrices"),
                       ((cube, "nuc", (1, 2), False), r"a stack of matrices")):
        with pytest.raises(KernelSyntaxError, match=r"test_array_norms.py:\d+: .*" + said):
            normed(*args)
        try:
            np.linalg.norm(*args)
        except (ValueError, TypeError):
            continue
        assert said == "a stack of matrices"  # NumPy's norm of a stack by its singular values: svod's of one matrix
