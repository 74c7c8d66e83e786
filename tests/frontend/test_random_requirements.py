"""``np.random.randint`` of bounds a kernel computes: where they span no integer the call raises as NumPy does
(``ValueError: low >= high``, here ``svod.errors.RequirementError``), after the kernel, on every device; where
they span some, the draws are plain Python's and nothing is raised."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.errors import RequirementError
from svod.frontend.oracle import run_as_python
from svod.frontend.promotion import Platform
from svod.random import Launch


@svod.kernel
def bounded_by(out, low, high):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.randint(low, high)


@svod.kernel
def bounded_by_data(out, lows, highs):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.randint(lows[i], highs[i])


@svod.kernel
def drawn_where_reached(out, lows, highs):
    for i in svod.prange(out.shape[0]):
        if lows[i] < highs[i]:
            out[i] = np.random.randint(lows[i], highs[i])
        else:
            out[i] = -1
        out[i] += np.random.randint(highs[i] + 1) if highs[i] >= 0 else 0


@svod.kernel
def serial(out, n):
    out[0] = np.random.randint(n)


@svod.jit
def jitted(n, low, high):
    out = np.zeros(n, np.int64)
    for i in svod.prange(n):
        out[i] = np.random.randint(low, high)
    return out


def _ints(device) -> type:
    return np.int64 if device.caps.index_bits > 32 else np.int32


def _plain(kernel, out, *args, device) -> np.ndarray:
    """What plain Python draws for the kernel's last launch (``svod.random.seed(7)``, the first launch)."""
    platform = Platform(device.caps.index_bits, svod.dtypes.float64 in device.caps.element_dtypes)
    return run_as_python(kernel, out, *args, platform=platform, launch=Launch(7, 0))[0]


@pytest.mark.parametrize(("low", "high"), [(5, 5), (5, 4), (0, 0), (0, -1), (-3, -7), (2**29, -(2**29))])
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_scalar_bounds_that_span_no_integer_raise_numpys_value_error(device, low, high, n):
    out = np.full(n, 3, _ints(device))
    with pytest.raises(RequirementError, match=r"low >= high") as raised:
        bounded_by(out, low, high, device=device)
    assert isinstance(raised.value, ValueError)
    assert raised.value.stage == "execute" and raised.value.kernel == "bounded_by"
    assert "test_random_requirements.py:20" in str(raised.value)
    assert "np.random.randint(low, high)" in str(raised.value)


@pytest.mark.parametrize(("low", "high"), [(5, 6), (-1, 0), (-7, 13), (-(2**29), 2**29)])
@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_scalar_bounds_that_span_integers_draw_plain_pythons_numbers(device, low, high, n):
    """A failure is not left standing either: the kernel's calls after a failed one draw as plain Python."""
    with pytest.raises(RequirementError):
        bounded_by(np.zeros(max(n, 1), _ints(device)), 3, 3, device=device)
    out = np.zeros(n, _ints(device))
    svod.random.seed(7)
    bounded_by(out, low, high, device=device)
    expected = _plain(bounded_by, np.zeros(n, _ints(device)), low, high, device=device)
    assert out.tolist() == expected.tolist()
    assert ((low <= out) & (out < high)).all()


def test_a_range_wider_than_a_kernel_draws_from_raises_rather_than_draw_low(device):
    """2**32 + 1 integers (2**31 with 32-bit integers, whose span would wrap): the largest ranges pass."""
    ints = _ints(device)
    widest = 2**32 if device.caps.index_bits > 32 else 2**31 - 1
    lows = np.array([0, -(2**30), -5], ints)
    highs = lows + np.array([widest, widest, 3], ints)
    out = np.zeros(3, ints)
    bounded_by_data(out, lows, highs, device=device)
    assert ((lows <= out) & (out < highs)).all()
    highs[1] += 1
    with pytest.raises(RequirementError, match="more than a kernel draws from"):
        bounded_by_data(out, lows, highs, device=device)


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_bounds_read_from_arrays_raise_where_one_work_item_has_an_empty_range(device, n):
    ints = _ints(device)
    lows, highs = np.arange(n, dtype=ints), np.arange(n, dtype=ints) + 3
    out = np.zeros(n, ints)
    svod.random.seed(7)
    bounded_by_data(out, lows, highs, device=device)
    assert out.tolist() == _plain(bounded_by_data, np.zeros(n, ints), lows, highs, device=device).tolist()
    highs[n // 2] = lows[n // 2]
    with pytest.raises(RequirementError, match="low >= high"):
        bounded_by_data(out, lows, highs, device=device)


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_a_draw_the_work_item_does_not_reach_requires_nothing(device, n):
    """Empty ranges under a branch not taken, or on the side of a conditional expression not taken, fail
    nothing: Python never makes those calls."""
    ints = _ints(device)
    lows = np.arange(n, dtype=ints) % 5
    highs = (np.arange(n, dtype=ints) * 7) % 5 - 1  # some empty, some negative
    out = np.zeros(n, ints)
    svod.random.seed(7)
    drawn_where_reached(out, lows, highs, device=device)
    expected = _plain(drawn_where_reached, np.zeros(n, ints), lows, highs, device=device)
    assert out.tolist() == expected.tolist()


def test_serial_code_raises_too(device):
    with pytest.raises(RequirementError, match="low >= high"):
        serial(np.zeros(1, _ints(device)), 0, device=device)
    with pytest.raises(RequirementError, match="low >= high"):
        serial(np.zeros(1, _ints(device)), -4, device=device)


def test_a_jitted_function_raises_at_its_call_and_runs_again_after():
    with pytest.raises(RequirementError, match="low >= high") as raised:
        jitted(5, 4, 4)
    assert isinstance(raised.value, ValueError)
    assert "test_random_requirements.py:48" in str(raised.value)
    with pytest.raises(ValueError, match="low >= high"):
        jitted(5, 9, 2)
    drawn = jitted(1000, -2, 3)
    assert set(drawn.tolist()) == {-2, -1, 0, 1, 2}


def test_check_finds_the_kernel_failing_where_plain_python_raises(device):
    """``svod.check`` runs plain Python as the reference: its ``ValueError`` is the kernel's failure."""
    report = svod.check(bounded_by, [np.zeros(4, _ints(device)), 6, 2], devices=[device])
    assert report.ok, report


def test_plain_python_raises_as_numpy():
    with pytest.raises(ValueError, match="low >= high"):
        run_as_python(serial, np.zeros(1, np.int64), 0, launch=Launch(7, 0))


@svod.kernel
def widest_constant(out):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.randint(-(2**31), 0)


@svod.kernel
def widest_constant_of_32_bits(out):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.randint(-(2**31) + 1, 0)


def test_constant_bounds_wider_than_32_bit_integers_draw_from_are_refused(device):
    """2**31 integers wrap a 32-bit span to its minimum, which drew ``low`` every time: refused there, as
    computed bounds are; 2**31 - 1 draw across the range; 64-bit integers draw from both."""
    ints = _ints(device)
    out = np.zeros(1000, ints)
    widest_constant_of_32_bits(out, device=device)
    assert ((out > -(2**31)) & (out < 0)).all() and len(set(out.tolist())) > 990
    if device.caps.index_bits > 32:
        widest_constant(out, device=device)
        assert ((out >= -(2**31)) & (out < 0)).all() and len(set(out.tolist())) > 990
    else:
        with pytest.raises(svod.errors.KernelSyntaxError, match=r"randint\(-2147483648, 0\) draws from"):
            widest_constant(out, device=device)
