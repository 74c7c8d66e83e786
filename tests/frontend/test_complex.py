"""Complex numbers in ``@svod.kernel`` bodies and ``@svod.jit`` functions, computed as pairs of floats
(``svod.frontend.complex_values``): every operation against NumPy's on the same values, on every device (complex128
where the device holds float64, refused where it does not), over edge sizes and special values; and what svod
does not compute on complex numbers refused at the user's line."""

from __future__ import annotations

import cmath
import itertools

import numpy as np
import pytest

import svod
from svod.dtype import dtypes
from svod.errors import SvodError
from tests.frontend.test_arrays import line_of

SPECIALS = [0.0, -0.0, 1.0, -2.5, 0.3, 1e-300, -1e300, 1.5e308, np.inf, -np.inf, np.nan]
"""Parts of the special values: zeros of both signs, tiny and huge magnitudes, infinities, NaN."""
SPECIALS32 = [0.0, -0.0, 1.0, -2.5, 0.3, 1e-37, -1e38, 3e38, np.inf, -np.inf, np.nan]
MODERATE = [0.0, -0.0, 1.0, -2.5, 0.3, 1e-3, -40.0]
"""Parts on WebGPU, whose compilers may assume floats finite and normal (its real arithmetic keeps no inf, NaN or
subnormal either: ``inf * 0.0`` is 0 there) and whose ``sin`` of a huge argument is not reduced."""
SIZES = [0, 1, 7, 13, 31]


def grid(dtype: type, device: svod.device.Device | None = None, parts: list[float] | None = None) -> np.ndarray:
    """Every pair of special parts (``parts``, else those ``device`` keeps), as complex numbers of ``dtype``."""
    if parts is None:
        webgpu = device is not None and device.device.base_type == "WEBGPU"
        parts = MODERATE if webgpu else SPECIALS if dtype is np.complex128 else SPECIALS32
    return np.array([complex(a, b) for a, b in itertools.product(parts, parts)], dtype=dtype)


def holds(device: svod.device.Device, dtype: type) -> bool:
    """Whether ``device`` holds the parts of ``dtype`` (a device without float64 refuses complex128)."""
    return dtype is np.complex64 or dtypes.float64 in device.caps.element_dtypes


def assert_parts_close(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    """Each part NaN where NumPy's is, equal where NumPy's is infinite or zero, else within ``rtol``."""
    for g, w in ((np.real(got), np.real(want)), (np.imag(got), np.imag(want))):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert np.array_equal(np.isnan(g), np.isnan(w)), (got, want)
        exact = np.isinf(w) | (w == 0)
        assert np.array_equal(g[exact], w[exact]), (got[exact], want[exact])
        near = ~np.isnan(w) & ~exact
        np.testing.assert_allclose(g[near], w[near], rtol=rtol, atol=0)


def run_or_refused(kernel, device, dtype, *args):
    """Run ``kernel`` on ``args`` on ``device``; where the device lacks the parts' float, assert it refuses."""
    if holds(device, dtype):
        kernel(*args, device=device)
        return True
    with pytest.raises(SvodError, match="float64"):
        kernel(*args, device=device)
    return False


# ---- arithmetic in a kernel ----------------------------------------------------------------------------------

@svod.kernel
def arithmetic(total, difference, product, quotient, a, b):
    for i in svod.prange(a.shape[0]):
        total[i] = a[i] + b[i]
        difference[i] = a[i] - b[i]
        product[i] = a[i] * b[i]
        quotient[i] = a[i] / b[i]


ARITHMETIC = {np.complex128: [0.0, -0.0, 1.0, -2.5, 0.3, 1e-100, -1e100, np.inf, -np.inf, np.nan],
              np.complex64: [0.0, -0.0, 1.0, -2.5, 0.3, 1e-15, -1e15, np.inf, -np.inf, np.nan]}
"""Parts whose products stay within the float's range: where one overflows on the way, NumPy's loop (a fused
multiply-add on this machine) may give inf where the two roundings give NaN."""


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_arithmetic_is_numpys_on_special_values(device, dtype):
    values = grid(dtype, device, None if device.device.base_type == "WEBGPU" else ARITHMETIC[dtype])
    a, b = np.repeat(values, len(values)), np.tile(values, len(values))
    outs = [np.zeros_like(a) for _ in range(4)]
    if not run_or_refused(arithmetic, device, dtype, *outs, a, b):
        return
    with np.errstate(all="ignore"):
        want = [a + b, a - b, a * b, a / b]
    np.testing.assert_array_equal(outs[0], want[0])
    np.testing.assert_array_equal(outs[1], want[1])
    eps = float(np.finfo(np.float32 if dtype is np.complex64 else np.float64).eps)
    with np.errstate(all="ignore"):
        bounds = (np.abs(a) * np.abs(b), np.abs(a) / np.abs(b))  # a product's error scales with |a||b|
        for got, expected, bound in zip(outs[2:], want[2:], bounds, strict=True):
            for g, w in ((got.real, expected.real), (got.imag, expected.imag)):
                assert np.array_equal(np.isnan(g), np.isnan(w))
                finite = np.isfinite(w) & np.isfinite(bound)
                assert np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)])
                assert np.all(np.abs(g[finite] - w[finite]) <= 4 * eps * bound[finite])


def test_division_by_zero_gives_numpys_inf_and_nan(device):
    a = np.array([1 + 1j, -2 + 0j, 0j, complex(np.nan, 1)])
    b = np.zeros(4, complex)
    outs = [np.zeros_like(a) for _ in range(4)]
    if not run_or_refused(arithmetic, device, np.complex128, *outs, a, b):
        return
    with np.errstate(all="ignore"):
        want = a / b
    np.testing.assert_array_equal(outs[3], want)


@svod.kernel
def functions(magnitude, exp, log, sqrt, angle, conjugate, z):
    for i in svod.prange(z.shape[0]):
        magnitude[i] = abs(z[i])
        exp[i] = np.exp(z[i])
        log[i] = np.log(z[i])
        sqrt[i] = np.sqrt(z[i])
        angle[i] = np.angle(z[i])
        conjugate[i] = z[i].conjugate() + np.conj(z[i]).real + z[i].imag * 1j + z[i].conj() * 0


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_functions_are_numpys_on_special_values(device, dtype):
    z = grid(dtype, device)
    real = np.float32 if dtype is np.complex64 else np.float64
    outs = [np.zeros(z.shape, real), np.zeros_like(z), np.zeros_like(z), np.zeros_like(z), np.zeros(z.shape, real),
            np.zeros_like(z)]
    if not run_or_refused(functions, device, dtype, *outs, z):
        return
    rtol = 2e-6 if dtype is np.complex64 else 1e-14
    with np.errstate(all="ignore"):
        assert_parts_close(outs[0], np.abs(z), rtol)
        assert_parts_close(outs[3], np.sqrt(z), rtol)
        assert_parts_close(outs[4], np.angle(z), rtol)
        assert_parts_close(outs[2].imag, np.log(z).imag, rtol)
        log_real = np.log(z).real  # exact to the spacing at 1 near |z| = 1, else relative
        assert np.array_equal(np.isnan(outs[2].real), np.isnan(log_real))
        assert np.array_equal(outs[2].real[np.isinf(log_real)], log_real[np.isinf(log_real)])
        finite = np.isfinite(log_real)
        error = np.abs(outs[2].real[finite] - log_real[finite])
        assert np.all(error <= 4 * rtol * np.maximum(np.abs(log_real[finite]), 1))
        assert_parts_close(outs[1], np.exp(z), rtol)
    with np.errstate(all="ignore"):
        assert_parts_close(outs[5], z.conjugate() + np.conj(z).real + z.imag * 1j + z.conj() * 0, rtol)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_angle_and_log_are_within_a_few_ulps_over_every_quadrant(dtype):
    rng = np.random.default_rng(3)
    z = (rng.standard_normal(4001) * 10.0 ** rng.integers(-30, 30, 4001)
         + 1j * rng.standard_normal(4001) * 10.0 ** rng.integers(-30, 30, 4001)).astype(dtype)
    real = np.float32 if dtype is np.complex64 else np.float64
    outs = [np.zeros(z.shape, real), *(np.zeros_like(z) for _ in range(3)), np.zeros(z.shape, real), np.zeros_like(z)]
    functions(*outs, z)
    ulp = float(np.finfo(real).eps)
    np.testing.assert_allclose(outs[4], np.angle(z), rtol=4 * ulp, atol=0)
    np.testing.assert_allclose(outs[2].imag, np.log(z).imag, rtol=4 * ulp, atol=0)
    np.testing.assert_allclose(outs[2].real, np.log(z).real, rtol=4 * ulp, atol=4 * ulp)
    np.testing.assert_allclose(outs[0], np.abs(z), rtol=4 * ulp, atol=0)



@svod.kernel
def logarithms(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = np.log(z[i])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_log_near_the_unit_circle_keeps_its_real_parts_precision_at_every_angle(device, dtype):
    """``log|z|`` of ``|z|`` within a millionth of 1 is that small itself: NumPy's ``clog`` computes ``x² + y² - 1``
    exactly enough that it keeps its relative precision. Near an axis svod's ``(big - 1)(big + 1) + small²`` did;
    at angles away from them ``big² - 1`` and ``small²`` cancel and kept only the float's spacing at 1 (up to 1e9
    ulp of the real part at 45 degrees). Within 64 ulp on the CPU devices; a WebGPU compiler may fuse or reorder
    the exact products, so there within the spacing at 1 as before."""
    rng = np.random.default_rng(5)
    angles = np.concatenate([rng.uniform(-np.pi, np.pi, 2000), np.pi / 4 * np.arange(-3, 5)])
    z = ((1 + rng.normal(0, 1e-6, angles.size)) * np.exp(1j * angles)).astype(dtype)
    out = np.zeros_like(z)
    if not run_or_refused(logarithms, device, dtype, out, z):
        return
    want = np.log(z)
    eps = float(np.finfo(out.real.dtype).eps)
    np.testing.assert_allclose(out.imag, want.imag, rtol=4 * eps, atol=0)
    if device.device.base_type == "WEBGPU":
        np.testing.assert_allclose(out.real, want.real, rtol=0, atol=4 * eps)
        return
    np.testing.assert_allclose(out.real, want.real, rtol=64 * eps, atol=0)

def test_abs_does_not_overflow_or_underflow():
    z = np.array([1e300 + 1e300j, 3e-300 - 4e-300j, complex(np.inf, np.nan), complex(np.nan, -np.inf),
                  complex(np.nan, 1.0), -0.0 - 0.0j, 1.7e308 + 1.7e308j])
    out = np.zeros(z.shape)

    @svod.kernel
    def magnitudes(out, z):
        for i in svod.prange(z.shape[0]):
            out[i] = abs(z[i])

    magnitudes(out, z)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out, np.abs(z), rtol=1e-15)


# ---- values, locals, loops ---------------------------------------------------------------------------------

@svod.kernel
def escape_counts(counts, last, c, maxiter):
    for i in svod.prange(c.shape[0]):
        for j in svod.prange(c.shape[1]):
            z = 0j
            n = 0
            while n < maxiter and abs(z) <= 2.0:
                z = z * z + c[i, j]
                n += 1
            counts[i, j] = n
            last[i, j] = z


def escape_counts_in_python(c: np.ndarray, maxiter: int) -> tuple[np.ndarray, np.ndarray]:
    counts, last = np.zeros(c.shape, np.int64), np.zeros(c.shape, c.dtype)
    for (i, j), point in np.ndenumerate(c):
        z, n = 0j, 0
        while n < maxiter and abs(z) <= 2.0:
            z, n = z * z + complex(point), n + 1
        counts[i, j], last[i, j] = n, z
    return counts, last


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (7, 13)])
def test_mandelbrot_kernel_carries_a_complex_local_as_plain_python_does(device, shape):
    x, y = np.linspace(-2.0, 0.5, shape[1]), np.linspace(-1.2, 1.2, shape[0])
    c = x[None, :] + 1j * y[:, None]
    counts, last = np.zeros(shape, np.int64), np.zeros(shape, complex)
    if not run_or_refused(escape_counts, device, np.complex128, counts, last, c, 40):
        return
    want_counts, want_last = escape_counts_in_python(c, 40)
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(last, want_last, rtol=1e-12)


@svod.kernel
def folded(out, z, w):
    total = 0j
    for i in range(z.shape[0]):
        total += z[i] * w
        if z[i] == w or z[i] != z[i]:  # equal to w, or NaN
            total -= 1
    out[0] = total


@pytest.mark.parametrize("n", SIZES)
def test_a_complex_sum_with_a_scalar_argument_and_equality(device, n):
    z = (np.arange(n) - 2.5j * np.arange(n) ** 0.5).astype(np.complex128)
    if n > 3:
        z[3] = complex(np.nan, 0)
    for w in (1 - 2j, np.complex128(0.5 + 1j), 0j):
        out = np.zeros(1, complex)
        if not run_or_refused(folded, device, np.complex128, out, z, w):
            return
        want = sum(complex(v) * complex(w) for v in z) - sum(1 for v in z if v == w or v != v)
        assert cmath.isclose(out[0], want, rel_tol=1e-12) or (cmath.isnan(out[0]) and cmath.isnan(want))


@svod.kernel
def in_single(out, z, w):
    for i in svod.prange(z.shape[0]):
        out[i] = z[i] * w + 1j * z[i] - np.complex64(2) + complex(1.0, 0.5)


def test_promotion_of_complex64_follows_numpys_rules(device):
    z = (np.arange(5) + 0.25j).astype(np.complex64)
    out = np.zeros(5, np.complex64)
    in_single(out, z, np.complex64(0.5 - 1j), device=device)
    want = z * np.complex64(0.5 - 1j) + 1j * z - np.complex64(2) + complex(1.0, 0.5)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_a_complex_array_is_worked_on_in_place_without_a_copy():
    z = np.arange(6, dtype=np.complex128) * (1 + 1j)

    @svod.kernel
    def doubled(z):
        for i in svod.prange(z.shape[0]):
            z[i] = z[i] * 2

    original = z
    doubled(z)
    assert z is original
    np.testing.assert_array_equal(z, np.arange(6) * (2 + 2j))
    every_other = np.zeros(8, complex)
    doubled_view = every_other[::2]
    doubled_view[:] = 1 + 1j
    doubled(doubled_view)
    np.testing.assert_array_equal(every_other, [2 + 2j, 0, 2 + 2j, 0, 2 + 2j, 0, 2 + 2j, 0])


# ---- @svod.jit -----------------------------------------------------------------------------------------------

@svod.jit
def expressions(x, y, z):
    c = x + y * 1j
    w = c * z + np.exp(c) - np.abs(z) / c
    return w, np.abs(w), w.real, np.imag(w), w.conj(), np.sqrt(w), np.log(w + 1)


@pytest.mark.parametrize("n", SIZES)
def test_jit_array_expressions_are_numpys(n):
    x, y = np.linspace(-1, 1, n), np.linspace(0.5, 2, n)
    z = (np.arange(n) - 3.5j).astype(np.complex128)
    got = expressions(x, y, z)
    c = x + y * 1j
    w = c * z + np.exp(c) - np.abs(z) / c
    want = (w, np.abs(w), w.real, np.imag(w), w.conj(), np.sqrt(w), np.log(w + 1))
    for g, expected in zip(got, want, strict=True):
        assert g.dtype == expected.dtype and g.shape == expected.shape
        np.testing.assert_allclose(g, expected, rtol=1e-13)


@svod.jit
def reductions(a, b, x):
    s = np.sum(a)
    return a @ b, a @ x, np.sum(a, axis=1), np.mean(a, axis=0), s, np.mean(a), x @ a[0], (a * 2).astype(np.complex64)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (7, 13)])
def test_jit_sums_means_and_products_of_complex_arrays(shape):
    rng = np.random.default_rng(7)
    a = rng.random(shape) + 1j * rng.random(shape)
    b = rng.random((shape[1], 4)) - 2j * rng.random((shape[1], 4))
    x = rng.random(shape[1])
    got = reductions(a, b, x)
    want = (a @ b, a @ x, np.sum(a, axis=1), np.mean(a, axis=0), np.sum(a), np.mean(a), x @ a[0],
            (a * 2).astype(np.complex64))
    for g, expected in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.asarray(expected).dtype
        np.testing.assert_allclose(g, expected, rtol=1e-6 if np.asarray(g).dtype == np.complex64 else 1e-12)


@svod.jit
def escape(c, maxiter):
    counts = np.zeros(c.shape, dtype=np.int64)
    last = np.zeros(c.shape, dtype=np.complex128)
    for i in svod.prange(c.shape[0]):
        for j in svod.prange(c.shape[1]):
            z = 0j
            n = 0
            while n < maxiter and abs(z) <= 2.0:
                z = z * z + c[i, j]
                n += 1
            counts[i, j] = n
            last[i, j] = z
    return counts, last


def test_jit_mandelbrot_returns_a_complex_temporary(device):
    x, y = np.linspace(-2.0, 0.5, 11), np.linspace(-1.2, 1.2, 5)
    c = x[None, :] + 1j * y[:, None]
    want_counts, want_last = escape_counts_in_python(c, 30)
    if not holds(device, np.complex128):
        with pytest.raises(SvodError, match=r"cannot hold (int64|float64)"):
            escape(c, 30, device=device)
        return
    counts, last = escape(c, 30, device=device)
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(last, want_last, rtol=1e-12)


@svod.jit
def single(z):
    return z * np.conj(z) + 1j


def test_jit_complex64_runs_where_float64_is_missing(device):
    z = (np.arange(7) + 0.5j).astype(np.complex64)
    got = single(z, device=device)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, z * np.conj(z) + 1j, rtol=1e-6)


# ---- refusals ------------------------------------------------------------------------------------------------

def ordered(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = z[i] < 1j


def floored(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = z[i] // 2


def to_real(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = z[i]


def inverted(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = np.linalg.norm(z)


def taken_max(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = max(z[i], 1.0)


def tangent(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = np.tan(z[i])


Z = np.ones(3, complex)


@pytest.mark.parametrize(("fn", "out", "at", "says"), [
    (ordered, np.zeros(3, bool), "z[i] < 1j", "complex numbers have no order"),
    (floored, np.zeros(3, complex), "z[i] // 2", "// of complex numbers"),
    (to_real, np.zeros(3), "out[i] = z[i]", "discard its imaginary part"),
    (inverted, np.zeros(3, complex), "np.linalg.norm(z)", "np.linalg inside a kernel or a work item"),
    (taken_max, np.zeros(3, complex), "max(z[i], 1.0)", "takes real numbers only"),
    (tangent, np.zeros(3, complex), "np.tan(z[i])", "tan of a complex value is not supported"),
])
def test_what_a_kernel_does_not_compute_on_complex_numbers_is_refused_at_its_line(fn, out, at, says):
    with pytest.raises(SvodError, match=says) as err:
        svod.kernel(fn)(out, Z)
    assert f"{__file__}:{line_of(svod.jit(fn), at)}" in str(err.value)


@svod.jit
def scaled(x, c):
    return x * c


@svod.jit
def scaled_into(out, x, c):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * c + c.conjugate()
    return out


@svod.jit
def accumulated(x, c):
    s = c
    for i in range(x.shape[0]):
        s += x[i] * c
    return s


@svod.jit
def kept(c, z):
    return c, np.full(3, z), abs(c) + z.real


COMPLEX_ARGUMENTS = [1 + 2j, np.complex128(0.5 - 1j), np.complex64(2 + 0.25j), complex(-0.0, -0.0), 3 - 1j]
"""Complex numbers a call passes: Python's and NumPy's of both widths, a zero of negative parts."""


def _complex_arguments(device: svod.device.Device) -> list[complex]:
    """``COMPLEX_ARGUMENTS``, with infinite and NaN parts but on WebGPU (``MODERATE``)."""
    special = [] if device.device.base_type == "WEBGPU" else [complex(np.inf, 1.0), complex(np.nan, -0.0)]
    return [*COMPLEX_ARGUMENTS, *special]


def agrees_with_python(fn: svod.frontend.jit.Jit, device: svod.device.Device, *args: object) -> None:
    """Run ``fn`` on ``device`` and as plain Python on copies of ``args``; compare the arrays and what it returns,
    part for part (``assert_parts_close``), each zero of Python's sign but on WebGPU (``MODERATE``)."""
    want_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(all="ignore"):
        want = fn.fn(*want_args)
    got = fn(*got_args, device=device)
    wanted, results = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    eps = 64 * float(np.finfo(np.float32).eps)
    for g, w in zip([*got_args, *results], [*want_args, *wanted], strict=True):
        assert np.ndim(g) == np.ndim(w) and np.iscomplexobj(g) == np.iscomplexobj(w), (g, w)
        g, w = np.atleast_1d(np.asarray(g, np.complex128)), np.atleast_1d(np.asarray(w, np.complex128))
        assert_parts_close(g, w, rtol=eps)
        if device.device.base_type != "WEBGPU":
            for gp, wp in ((g.real, w.real), (g.imag, w.imag)):
                assert np.array_equal(np.signbit(gp[wp == 0]), np.signbit(wp[wp == 0])), (g, w)


@pytest.mark.parametrize("n", [0, 1, 7])
def test_a_jit_function_takes_complex_numbers_as_plain_python_does(device, n):
    """A complex number passed to ``@svod.jit`` (Python's, ``np.complex128``, ``np.complex64``) is two plan
    variables, its parts: in an array expression, a ``prange`` body, a sum carried in one phase, returned, a
    fill. It was refused ("a jitted function takes complex arrays, not complex numbers yet")."""
    x = np.linspace(-1.0, 2.0, n)
    for c in _complex_arguments(device):
        if not holds(device, np.complex128) and not isinstance(c, np.complex64):
            x = x.astype(np.float32)
            if type(c) is not complex:
                with pytest.raises(SvodError, match="float64"):
                    scaled(x, c, device=device)
                continue
        agrees_with_python(scaled, device, x, c)
        agrees_with_python(scaled_into, device, np.zeros(n, np.result_type(x, c)), x, c)
        agrees_with_python(accumulated, device, x, c)
        if holds(device, np.complex128) or isinstance(c, np.complex64):
            agrees_with_python(kept, device, c, np.complex64(c) if isinstance(c, np.complex64) else c * 2)
        else:  # np.full of a Python complex is complex128
            with pytest.raises(SvodError, match="float64"):
                kept(c, c * 2, device=device)


def test_a_complex_argument_is_keyed_by_its_type_as_a_float_is():
    """Calls that pass other complex numbers of one type run the plan made for the first (its parts are plan
    variables); another type (np.complex64) takes a plan of its own; a NaN part makes no plan per call."""
    x = np.arange(5.0)
    fresh = svod.jit(scaled.fn)  # (no other test's calls)
    for c in (1 + 2j, -3.5 + 0.25j, complex(np.inf, -0.0), complex(np.nan, 1.0), 0j):
        with np.errstate(all="ignore"):
            assert_parts_close(fresh(x, c), x * c, rtol=0)
    assert len(fresh._plans) == 1
    for _ in range(3):
        fresh(x, complex(np.nan, np.nan))
    assert len(fresh._plans) == 1 and len(fresh._calls) == 1  # one dispatcher, checking the type alone
    got = fresh(x, np.complex64(1 - 1j))
    assert got.dtype == np.complex128 and len(fresh._plans) == 2
    np.testing.assert_array_equal(got, x * np.complex64(1 - 1j))


@svod.jit
def clashing(c, c_real):
    return c * c_real


def test_a_jit_function_refuses_complex256_and_a_complex_number_whose_parts_name_other_parameters():
    with pytest.raises(SvodError, match="complex256, and svod computes on complex64 and complex128 only"):
        scaled(np.ones(3, np.clongdouble), 2.0)
    with pytest.raises(SvodError, match="argument c is complex256; svod computes on complex64 and complex128") as err:
        scaled(np.ones(3), np.clongdouble(1 + 2j))
    assert f"{__file__}:{line_of(scaled, 'def scaled')}" in str(err.value)
    with pytest.raises(SvodError, match="its parts are carried as c_real and c_imag, names of other parameters"):
        clashing(1j, 2.0)


@svod.jit
def weighted(x, z):
    return np.sum(x * np.abs(z))


def test_a_gradient_through_complex_numbers_is_refused_not_taken_as_of_two_reals():
    x, z = np.array([1.0, 2.0]), np.array([1 + 2j, 3 - 1j])
    with pytest.raises(SvodError, match="svod takes no gradients through complex numbers"):
        svod.grad(weighted)(x, z)
    assert weighted(x, z) == pytest.approx(np.sum(x * np.abs(z)), rel=1e-15)


ROTATION = 1j
TYPED_ROTATION = np.complex64(0.5 - 0.5j)


@svod.kernel
def rotated(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = z[i] * ROTATION + TYPED_ROTATION


def test_module_level_complex_constants_keep_python_and_numpy_promotion(device):
    z = (np.arange(4) + 2j).astype(np.complex64)
    out = np.zeros_like(z)
    rotated(out, z, device=device)
    np.testing.assert_allclose(out, z * ROTATION + TYPED_ROTATION, rtol=1e-6)
    assert (z * ROTATION + TYPED_ROTATION).dtype == np.complex64


@svod.jit
def largest(z):
    return np.max(z)


@svod.jit
def smallest_by_column(z):
    return z.min(axis=0)


@svod.jit
def where_largest(z):
    return np.argmax(z)


@pytest.mark.parametrize(("fn", "at"), [(largest, "np.max(z)"), (smallest_by_column, "z.min(axis=0)"),
                                        (where_largest, "np.argmax(z)")])
def test_ordering_reductions_of_complex_arrays_are_refused_at_their_line(fn, at):
    """NumPy orders complex numbers lexicographically and svod orders none: a refusal, not a crash in the
    reduction's identity; the same reduction of the real part still computes NumPy's value."""
    z = np.array([[1 + 5j, 2 - 1j], [2 + 0j, -3 + 9j], [np.nan, 1j]])
    with pytest.raises(SvodError, match="of a complex array: NumPy orders complex numbers") as err:
        fn(z)
    assert f"{__file__}:{line_of(fn, at)}" in str(err.value)
    assert largest(z.real[:2].copy()) == np.max(z.real[:2])


@svod.jit
def angle_in_degrees(z):
    return np.angle(z, deg=True)


@svod.jit
def conjugated_into(z, out):
    return z.conj(out=out)


def test_a_keyword_of_a_complex_part_function_is_refused_not_dropped():
    """``np.angle(z, deg=True)`` once gave radians: a keyword svod does not act on is refused at its line."""
    z = np.array([1j, -1 + 0j, 1 + 1j])
    with pytest.raises(SvodError, match=r"np\.angle's deg= is not one svod takes") as err:
        angle_in_degrees(z)
    assert f"{__file__}:{line_of(angle_in_degrees, 'deg=True')}" in str(err.value)
    with pytest.raises(SvodError, match=r"x\.conj's out= is not one svod takes"):
        conjugated_into(z, np.zeros(3, complex))


@svod.jit
def real_parts_set(z, v):
    for i in range(z.shape[0]):
        z[i].real = v[i]
    return z


@svod.jit
def first_imaginary_part_set(z):
    z[0].imag = 5.0


@pytest.mark.parametrize(("fn", "args", "at"), [
    (real_parts_set, (np.arange(4.0),), "z[i].real = v[i]"),
    (first_imaginary_part_set, (), "z[0].imag = 5.0")])
def test_assigning_an_elements_part_is_refused_not_dropped(fn, args, at):
    """NumPy raises on ``a[i].real = v`` (a scalar's parts are read-only); svod dropped the statement, which
    stores no element and no name, and returned the array unchanged."""
    z = np.array([1 + 2j, -0.0 + 0j, complex(np.inf, np.nan), 3 - 4j])
    with pytest.raises(SvodError, match=r"assigning to an attribute \((real|imag)\)") as err:
        fn(z, *args)
    assert f"{__file__}:{line_of(fn, at)}" in str(err.value)


@svod.jit
def real_part_bound_and_written(z):
    parts = z.real
    parts[0] = 7.0
    return z


@svod.jit
def imaginary_part_bound_and_added_to(z, v):
    parts = np.imag(z)
    for i in range(z.shape[0]):
        parts[i] += v[i]
    return z


@svod.jit
def real_part_copied_and_written(z):
    parts = z.real.copy()
    parts[0] = 7.0
    return parts, z


@pytest.mark.parametrize(("fn", "args", "at"), [
    (real_part_bound_and_written, (), "parts = z.real"),
    (imaginary_part_bound_and_added_to, (np.ones(4),), "parts = np.imag(z)")])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float64])
def test_a_part_bound_to_a_name_and_written_is_refused_not_copied(fn, args, at, dtype):
    """NumPy's ``z.real`` is a view: a write into a name bound to it changes ``z``. svod made it a new array
    and returned ``z`` unchanged; it refuses at the binding."""
    z = np.array([1 + 2j, -0.0 + 0j, complex(np.inf, np.nan), 3 - 4j]).astype(dtype) if dtype != np.float64 else \
        np.array([1.0, -0.0, np.nan, 3.0])
    with pytest.raises(SvodError, match=r"binds an array's .real or .imag, which NumPy gives as a view") as err:
        fn(z, *args)
    assert f"{__file__}:{line_of(fn, at)}" in str(err.value)


def test_a_copy_of_a_part_written_leaves_the_array_as_numpy_does():
    z = np.array([1 + 2j, -0.0 + 0j, complex(np.inf, np.nan), 3 - 4j, 5j])
    parts, same = real_part_copied_and_written(z.copy())
    want = z.real.copy()
    want[0] = 7.0
    np.testing.assert_array_equal(parts, want)
    np.testing.assert_array_equal(same, z)


@svod.jit
def shifted(z):
    return z + 1


@svod.kernel
def copied(z, out):
    for i in range(z.shape[0]):
        out[i] = z[i]


def test_a_byte_swapped_complex_array_is_refused_saying_what_svod_takes():
    """The refusal once said svod had no complex numbers; it names the byte order and the conversion."""
    swapped = np.array([1 + 2j, complex(np.nan, -0.0)]).astype(">c16")
    with pytest.raises(SvodError, match=r"complex64 and complex128 in the machine's byte order.*this is >c16"):
        shifted(swapped)
    with pytest.raises(SvodError, match=">f8"):
        copied(swapped, np.zeros(2, complex))
    np.testing.assert_array_equal(shifted(swapped.astype(np.complex128)), swapped.astype(np.complex128) + 1)


EXPONENTS = (-3, -2, -1, 0, 1, 2, 3, 4, 5, 7)


@svod.kernel
def powers(out, z):
    for i in svod.prange(z.shape[0]):
        out[0, i] = z[i] ** -3
        out[1, i] = z[i] ** -2
        out[2, i] = z[i] ** -1
        out[3, i] = z[i] ** 0
        out[4, i] = z[i] ** 1
        out[5, i] = z[i] ** 2
        out[6, i] = z[i] ** 3
        out[7, i] = z[i] ** 4
        out[8, i] = z[i] ** 5
        out[9, i] = z[i] ** 7


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_an_elements_integer_power_is_numpys_on_special_values(device, dtype):
    """NumPy's power loop: a zero of either sign is ``0+0j`` to a positive power and NaN parts to a negative
    one, powers past 3 start from ``1+0j`` (an infinite part makes its neighbour NaN), and a negative power is
    one over them. svod gave ``inf+nanj`` for ``0j ** -1`` and kept ``-0.0`` signs NumPy does not."""
    z = grid(dtype, device, None if device.device.base_type == "WEBGPU" else ARITHMETIC[dtype])
    if device.device.base_type == "WEBGPU":
        z = z[z != 0]  # its compilers may fold the NaN a zero's negative power is
    out = np.zeros((len(EXPONENTS), len(z)), dtype)
    if not run_or_refused(powers, device, dtype, out, z):
        return
    eps = float(np.finfo(np.float32 if dtype is np.complex64 else np.float64).eps)
    with np.errstate(all="ignore"):
        for row, n in zip(out, EXPONENTS, strict=True):
            want = np.array([x ** n for x in z], dtype)
            assert_parts_close(row, want, rtol=64 * eps)
            if device.device.base_type == "WEBGPU":
                continue  # its compilers may not keep a zero's sign (MODERATE)
            for g, w in ((row.real, want.real), (row.imag, want.imag)):
                zero = w == 0
                assert np.array_equal(np.signbit(g[zero]), np.signbit(w[zero])), (n, z[zero], row[zero], want[zero])


@svod.jit
def squared_and_fourth(z):
    return z ** 2, z ** 4


def test_an_arrays_square_is_numpys_operator_shortcut_and_other_powers_its_loop():
    """NumPy's ``array ** 2`` is ``np.square`` (a zero keeps its signs), its ``** 4`` the power loop. Parts whose
    products are exact: NumPy's loops may fuse a multiply and an add where svod rounds twice."""
    z = grid(np.complex128, parts=[0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan])
    square, fourth = squared_and_fourth(z)
    with np.errstate(all="ignore"):
        for got, want in ((square, z ** 2), (fourth, z ** 4)):
            assert_parts_close(got, want, rtol=0)
            for g, w in ((got.real, want.real), (got.imag, want.imag)):
                assert np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


@svod.kernel
def reciprocals(out, z):
    for i in svod.prange(z.shape[0]):
        out[i] = np.reciprocal(z[i])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_an_elements_reciprocal_is_numpys_loop_on_special_values(device, dtype):
    """``np.reciprocal``: by the ratio of the smaller part to the larger, keeping the signed zeros and infinities
    the power loop makes NaN (``1/(inf+0j)`` is ``0-0j``)."""
    z = grid(dtype, device)
    out = np.zeros_like(z)
    if not run_or_refused(reciprocals, device, dtype, out, z):
        return
    with np.errstate(all="ignore"):
        want = np.reciprocal(z)
    assert_parts_close(out, want, rtol=4 * float(np.finfo(np.float32 if dtype is np.complex64 else np.float64).eps))
    if device.device.base_type != "WEBGPU":  # its compilers may not keep a zero's sign (MODERATE)
        for g, w in ((out.real, want.real), (out.imag, want.imag)):
            assert np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


@svod.jit
def inverted(z):
    return z ** -1, np.reciprocal(z), z ** -2


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_an_arrays_inverse_is_numpys_operator_shortcut_bit_for_bit(dtype):
    """NumPy's ``array ** -1`` is ``np.reciprocal`` (its scalar's ``** -1`` the power loop, which differs at
    infinite and zero parts); ``** -2`` is the power loop for both."""
    z = grid(dtype)
    with np.errstate(all="ignore"):
        wants = (z ** -1, np.reciprocal(z), z ** -2)
        scalar = np.array([x ** -1 for x in z], dtype)
    assert not np.array_equal(wants[0], scalar, equal_nan=True)  # NumPy's two paths differ: svod's array is the array's
    for got, want in zip(inverted(z), wants, strict=True):
        assert got.dtype == want.dtype
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            assert np.array_equal(g, w, equal_nan=True) and np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


@svod.jit
def inverted_by_float(z):
    return z ** -1.0, z ** -(1.0), z ** -True  # the last is the int -1: the shortcut


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_an_arrays_power_of_minus_one_as_a_float_is_numpys_loop_not_its_shortcut(dtype):
    """NumPy takes the reciprocal's shortcut for the Python int -1 alone (``-True`` is one): ``** -1.0`` is its
    power loop, NaN parts where the reciprocal keeps zeros and infinities."""
    z = grid(dtype)
    with np.errstate(all="ignore"):
        wants = (z ** -1.0, z ** -(1.0), z ** -True)
        assert not np.array_equal(wants[0], np.reciprocal(z), equal_nan=True)
    for got, want in zip(inverted_by_float(z), wants, strict=True):
        assert got.dtype == want.dtype
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            assert np.array_equal(g, w, equal_nan=True) and np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


@svod.jit
def raised_to_a_name(z, p):
    q = p
    return z ** p, z ** q, np.power(z, p)


@svod.jit
def raised_in_place(z, p):
    z **= p
    return z


def assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal part for part, NaN where NumPy's is, each zero of NumPy's sign."""
    assert got.dtype == want.dtype
    for g, w in ((np.real(got), np.real(want)), (np.imag(got), np.imag(want))):
        assert np.array_equal(g, w, equal_nan=True), (got, want)
        assert np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0])), (got, want)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float32, np.float64])
def test_an_arrays_power_of_a_name_holding_a_small_int_is_numpys(device, dtype):
    """``z ** p`` with ``p`` an argument or a name holding -2..3 or a fraction (``0.5`` the operator's
    ``np.sqrt``, others the power loop; a complex one was refused): NumPy's operator takes its shortcuts by the
    value and type (``** -1`` of a complex array is ``np.reciprocal``, ``** 2`` ``np.square``, of Python ints
    only: ``** 2.0`` is the power loop, whose ``(0-0j) ** 2`` is ``0+0j``), ``np.power`` its loop;
    svod took the power loop for a name holding -1 (``(inf+0j) ** p`` gave NaN parts where NumPy gives
    ``0-0j``), and refused a complex array's power of an argument."""
    complex_ = np.dtype(dtype).kind == "c"
    webgpu = device.device.base_type == "WEBGPU"
    if complex_:  # parts whose products are exact: NumPy's loops may fuse a multiply and an add
        z = grid(dtype, device, [0.0, 1.0, -2.5, 0.5] if webgpu else
                 [0.0, -0.0, 1.0, -2.5, 0.5, np.inf, -np.inf, np.nan])
    else:
        z = np.array(MODERATE if webgpu else SPECIALS if dtype is np.float64 else SPECIALS32, dtype)
    if webgpu:
        z = z[z != 0]  # its compilers may fold the NaN or inf a zero's negative power is
    strong = [] if webgpu else [np.int64(2), np.int64(-1)]  # (an int64 widens the array: 64-bit parts)
    for p in [*range(-2, 4), 2.0, -1.0, 0.5, 0.7, -1.5, *strong]:  # (those of other types take the loop)
        with np.errstate(all="ignore"):
            wants = (z ** p, z ** p, np.power(z, p))
            in_place = z.copy()
            in_place **= p
        if not holds(device, np.complex128) and dtype in (np.complex128, np.float64):
            with pytest.raises(SvodError, match="float64"):
                raised_to_a_name(z, p, device=device)
            return
        gots = (*raised_to_a_name(z, p, device=device), raised_in_place(z.copy(), p, device=device))
        for got, want in zip(gots, (*wants, in_place), strict=True):
            assert got.dtype == want.dtype
            assert_parts_close(got, want, rtol=64 * float(np.finfo(got.real.dtype).eps))
            # C leaves the zeros' signs of cexp(-inf + NaN i) unspecified, which is exp(p log z) of an infinite z
            # (log z times a real p makes 0 * inf): x86's NaN of 0 * inf is negative, a GPU's positive
            signed = np.ones(z.shape, bool) if float(p) == int(p) else ~np.isinf(z)
            if not webgpu:  # its compilers may not keep a zero's sign (MODERATE)
                for g, w in ((np.real(got), np.real(want)), (np.imag(got), np.imag(want))):
                    kept = signed & (w == 0)
                    assert np.array_equal(np.signbit(g[kept]), np.signbit(w[kept])), (p, z, got, want)


@svod.jit
def halves(x, h):
    return x ** 0.5, np.power(x, 0.5), x ** h, x ** x[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_real_arrays_power_of_one_half_is_numpys_square_root(device, dtype):
    """NumPy's real power loop takes ``np.sqrt`` for a scalar exponent of 0.5 (a literal, an argument of any
    float type, an element read at run time): ``(-0.0) ** 0.5`` is -0.0 and ``(-inf) ** 0.5`` NaN there, where
    the power function gives 0.0 and inf. svod gave the power function's."""
    if not holds(device, np.complex128) and dtype is np.float64:
        with pytest.raises(SvodError, match="float64"):
            halves(np.zeros(3), 0.5, device=device)
        return
    x = np.array([0.5, -0.0, 0.0, -np.inf, np.inf, np.nan, -1.0, 2.0, 1e-30], dtype)
    webgpu = device.device.base_type == "WEBGPU"
    if webgpu:
        x = x[np.isfinite(x)]
    for h in (0.5, dtype(0.5), 0.25, *(() if webgpu else (np.nan,))):  # (its NaN arithmetic is its own)
        got = halves(x, h, device=device)
        with np.errstate(all="ignore"):
            wants = (x ** 0.5, np.power(x, 0.5), x ** h, x ** x[0])
        for g, w in zip(got, wants, strict=True):
            if webgpu:
                np.testing.assert_allclose(g, w, rtol=1e-6)
            else:
                assert_bits(g, w)


@svod.jit
def complex_square_root(z):
    return z ** 0.5


@svod.jit
def raised_to_a_power_read_at_run_time(z, n):
    p = int(n[0])
    return z ** p


def test_a_complex_arrays_power_of_one_half_is_its_square_root():
    """The operator's ``** 0.5`` of a complex array is ``np.sqrt`` (``(-0.0+0j) ** 0.5`` keeps its signed zero)."""
    z = grid(np.complex128)
    with np.errstate(all="ignore"):
        want = z ** 0.5
    got = complex_square_root(z)
    assert_parts_close(got, want, rtol=4 * float(np.finfo(np.float64).eps))
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        assert np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


@svod.jit
def raised_to_an_element_read_at_run_time(z, n):
    p = n[0]
    return z ** p


@svod.jit
def raised_to_a_float_read_at_run_time(z, n):
    p = float(n[0])
    return z ** p


@pytest.mark.parametrize("jitted", [raised_to_an_element_read_at_run_time, raised_to_a_float_read_at_run_time,
                                    raised_to_a_power_read_at_run_time])
@pytest.mark.parametrize("value", [-1.0, 0.5, 2.0])
def test_a_complex_arrays_power_of_a_name_of_a_type_only_the_run_knows_is_refused(jitted, value):
    """NumPy's operator takes its shortcuts by the exponent's Python type as well as its value: ``z ** n[0]`` (a
    NumPy scalar) takes none, ``z ** float(n[0])`` only ``0.5``'s square root, ``z ** int(n[0])`` ``-1``'s
    reciprocal and ``2``'s square. Where the host does not know the name's value it does not know its type either;
    svod took the Python int's shortcuts for all three (``(inf+0j) ** np.float64(-1)`` gave ``0-0j`` for NumPy's
    NaN parts, ``(1j*inf) ** 0.5`` ``inf+nanj`` for ``inf+infj``): refused at the line, naming ``np.power``."""
    z = np.array([1 - 2.5j, complex(np.inf, 0.0), complex(0.0, np.inf), 1j], complex)
    with pytest.raises(SvodError, match="only the run knows") as err:
        jitted(z, np.array([value]))
    assert "np.power" in str(err.value)
    assert f"{__file__}:{line_of(jitted, 'return z ** p')}" in str(err.value)


@svod.jit
def raised_by_np_power_to_an_element_read_at_run_time(z, n):
    p = n[0]
    return np.power(z, p)


def test_np_power_of_a_complex64_array_and_an_element_read_at_run_time_is_of_numpys_dtype():
    """``np.power(z64, p)`` is complex128 where ``p`` is a NumPy float64 or int64 scalar (``n[0]``), the host stands
    in for the element by a zero of its dtype, which NumPy's promotion reads (svod gave complex64 for a float64
    element once, its parts rounded to float32). Where the result stays complex64 (a float32 element) it is still
    refused at the line: the check reads whether the host computes the name, not its stand-in's type."""
    z = np.array([1 - 2.5j, 0.5 + 3j, complex(np.inf, 0.0)], np.complex64)
    for n in (np.array([0.3]), np.array([-1.0]), np.array([-1]), np.array([0.5])):
        for base in (z, z.astype(np.complex128)):
            with np.errstate(all="ignore"):
                want = np.power(base, n[0])
            got = raised_by_np_power_to_an_element_read_at_run_time(base, n)
            assert got.dtype == want.dtype
            wide = base.astype(want.dtype)
            assert_power_close(wide, np.full(len(wide), n[0], want.dtype), got, want, ulps=8)
    with pytest.raises(SvodError, match="only the run knows") as err:
        raised_by_np_power_to_an_element_read_at_run_time(z, np.array([0.5], np.float32))
    line = line_of(raised_by_np_power_to_an_element_read_at_run_time, "np.power(z, p)")
    assert f"{__file__}:{line}" in str(err.value)


@svod.kernel
def raised_to_elements(out, z, p):
    for i in svod.prange(z.shape[0]):
        out[i] = np.power(z[i], p[i])


RUN_TIME_EXPONENTS = [0.0, -0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 4.0, 7.0, -5.0, 99.0, -99.0, 100.0, 0.5, -0.5,
                      1.5, 2.7, -3.3, 1e-300, np.nan, np.inf, -np.inf, 1j, 0.5 + 0.5j, -1j, complex(0.0, np.nan),
                      complex(np.inf, 1.0)]
"""Exponents NumPy's power loop treats each its own way: zero (of either sign), whole below 100 in magnitude
(1, 2 and 3 unrolled, others a binary power, a negative one over it), whole at 100, fractions, complex, and
the special values."""


def exact_exponent(p: np.ndarray) -> np.ndarray:
    """Where NumPy's power loop multiplies (a real whole exponent below 100 in magnitude) or gives a constant
    (a zero exponent): there svod's parts equal NumPy's bit for bit."""
    with np.errstate(invalid="ignore"):
        return (p.imag == 0) & (np.abs(p.real) < 100) & (np.trunc(p.real) == p.real)


def assert_power_close(z: np.ndarray, p: np.ndarray, got: np.ndarray, want: np.ndarray, ulps: float) -> None:
    """Where NumPy multiplies, equal bits; elsewhere (``exp(p log z)``) NaN, infinite and zero parts where NumPy
    has them, and the rest within ``ulps`` of ``|want|`` times ``1 + |p log z|``: an exponent's product with the
    logarithm rounds to the float's spacing at that product, which the exponential turns into a relative error
    of that size, in NumPy's ``cpow`` as in svod's."""
    exact = exact_exponent(p)
    assert_bits(got[exact], want[exact])
    got, want, z, p = got[~exact], want[~exact], z[~exact], p[~exact]
    for g, w in ((np.real(got), np.real(want)), (np.imag(got), np.imag(want))):
        assert np.array_equal(np.isnan(g), np.isnan(w)), (z, p, got, want)
        special = np.isinf(w) | (w == 0)
        assert np.array_equal(g[special], w[special]), (z[special], p[special], got[special], want[special])
    finite = np.isfinite(want) & (want != 0)
    eps = float(np.finfo(got.real.dtype).eps)
    with np.errstate(all="ignore"):
        scale = 1 + np.abs(p[finite].astype(np.complex128) * np.log(z[finite].astype(np.complex128)))
        error = np.abs(got[finite].astype(np.complex128) - want[finite]) / np.abs(want[finite])
    assert np.all(error <= ulps * eps * scale), (z[finite], p[finite], got[finite], want[finite], error / eps)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_an_elements_power_of_a_run_time_exponent_is_numpys(device, dtype):
    """``np.power(z, p)`` with ``p`` an element only the run holds, over every pair of special bases and the
    exponents NumPy's ``npy_cpow`` chooses among (``RUN_TIME_EXPONENTS``): ``0 ** 0`` is ``1+0j``, a zero base to
    a power of negative (or zero) real part NaN parts, whole powers NumPy's products bit for bit, the rest
    ``exp(p log z)`` with C's product (infinite parts where a plain product gives NaN ones). It was refused."""
    webgpu = device.device.base_type == "WEBGPU"
    bases = grid(dtype, device, None if webgpu else ARITHMETIC[dtype])
    exponents = [p for p in RUN_TIME_EXPONENTS if (not webgpu or (np.isfinite(p) and abs(p) < 10))
                 and (dtype is np.complex128 or p != 100)]  # (complex64's (-2.5-1e15j) ** 100: its angle is 50 pi
    # within float32's rounding, so its infinite imaginary part may take either sign)
    if webgpu:
        bases = bases[bases != 0]  # its compilers may fold the NaN a zero's negative power is
    z, p = (a.ravel() for a in np.meshgrid(bases, np.array(exponents, dtype)))
    out = np.zeros_like(z)
    if not run_or_refused(raised_to_elements, device, dtype, out, z, p):
        return
    with np.errstate(all="ignore"):
        want = np.power(z, p)
    if webgpu:  # its compilers may not keep a zero's sign nor NumPy's order of products, nor log's precision
        assert np.array_equal(np.isnan(out), np.isnan(want))  # (MODERATE's bases: finite results)
        error = np.abs(out.astype(np.complex128) - want) / np.abs(want)
        assert np.all(error < 1024 * float(np.finfo(np.float32).eps)), (z, p, out, want)
        return
    assert_power_close(z, p, out, want, ulps=8)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_a_power_of_random_values_is_within_numpys_rounding(dtype):
    """Random bases over six decades and exponents (real, complex, small, whole): NumPy's bits where it
    multiplies, within 8 ulp times ``1 + |p log z|`` of it elsewhere."""
    rng = np.random.default_rng(7)
    n = 20011
    z = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)
         + 1j * rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(dtype)
    kinds = [rng.standard_normal(n) * 3, rng.standard_normal(n) + 1j * rng.standard_normal(n),
             rng.uniform(-0.5, 0.5, n), rng.integers(-99, 100, n).astype(np.float64)]
    for exponent in kinds:
        p = exponent.astype(dtype)
        out = np.zeros_like(z)
        raised_to_elements(out, z, p)
        with np.errstate(all="ignore"):
            want = np.power(z, p)
        assert_power_close(z, p, out, want, ulps=8)


@svod.kernel
def raised_to_constants(out, z, p, q):
    for i in svod.prange(z.shape[0]):
        out[0, i] = z[i] ** 0.5
        out[1, i] = z[i] ** p
        out[2, i] = np.power(z[i], q)
        out[3, i] = z[i] ** 150
        out[4, i] = z[i] ** (1 + 2j)


def test_an_elements_power_of_a_fraction_a_scalar_argument_or_a_large_whole_number_is_numpys():
    """Constants NumPy's loop does not multiply for (``0.5``, ``150``, ``1+2j``) and scalar arguments, float and
    complex (each once refused): as NumPy's scalar power of each element."""
    z = grid(np.complex128, parts=ARITHMETIC[np.complex128])
    out = np.zeros((5, len(z)), np.complex128)
    p, q = 2.7, -0.5 + 1.5j
    raised_to_constants(out, z, p, q)
    for row, exponent in zip(out, (0.5, p, q, 150, 1 + 2j), strict=True):
        with np.errstate(all="ignore"):
            want = np.array([np.power(x, np.complex128(exponent)) for x in z])
        assert_power_close(z, np.full(len(z), exponent, np.complex128), row, want, ulps=8)


@svod.jit
def contour_powers(int_pts, slab_per_bc):
    out = np.zeros((len(int_pts), slab_per_bc + 1), dtype=np.complex128)
    for i in svod.prange(len(int_pts)):
        z = int_pts[i]
        for n in range(slab_per_bc + 1):
            out[i, n] = np.power(z, slab_per_bc / 2 - n)
    return out


@pytest.mark.parametrize("slab", [0, 1, 2, 5])
def test_a_jitted_prange_raises_its_elements_to_exponents_it_computes(device, slab):
    """npbench contour_integral's powers: ``np.power(z, slab_per_bc / 2 - n)`` with ``n`` a loop's variable, whole
    and half exponents by the value of ``slab_per_bc``, every device that holds complex128."""
    pts = grid(np.complex128, device, ARITHMETIC[np.complex128])
    if device.device.base_type == "WEBGPU" or not holds(device, np.complex128):
        with pytest.raises(SvodError, match="float64"):
            contour_powers(pts, slab, device=device)
        return
    got = contour_powers(pts, slab, device=device)
    exponents = np.array([slab / 2 - n for n in range(slab + 1)], np.complex128)
    with np.errstate(all="ignore"):
        want = np.power(pts[:, None], exponents[None, :])
    z, p = np.broadcast_arrays(pts[:, None], exponents[None, :])
    assert_power_close(z.ravel(), p.ravel(), got.ravel(), want.ravel(), ulps=8)
