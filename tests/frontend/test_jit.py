"""``@svod.jit``: whole functions as plans. Every device is compared with the same function run as
plain Python (``svod.prange`` as ``range``): its arguments after the run, and what it returns."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import svod
from svod import prange
from svod.device import Device
from svod.errors import SvodError
from svod.frontend.oracle import as_python, python_arguments
from tests.helpers import numpy_quietly, refuses

SIZES = (0, 1, 2, 3, 7, 13)


def agrees_with_python(fn: svod.frontend.jit.Jit, device: Device, *args: object, rtol: float = 1e-6,
                       atol: float = 1e-12, keywords: dict[str, object] | None = None, typed: bool = False,
                       numpy_warns: bool = False) -> None:
    """Run ``fn`` on ``device`` on copies of ``args`` (and ``keywords``, passed by keyword) and compare its arrays
    and what it returns with plain Python's; where ``typed``, each returned array is also of NumPy's dtype and, on
    a device with IEEE floats (WGSL's may lose a -0.0), each zero of NumPy's sign. Where ``numpy_warns``, the
    function is meant to overflow, divide by zero or make NaNs, and plain Python runs it with NumPy's warnings of
    those off (the device's run keeps them)."""
    narrower = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32}
    if any(isinstance(a, np.ndarray) and refuses(device, svod.dtypes.from_numpy(a.dtype)) for a in args):
        args = tuple(a.astype(narrower.get(a.dtype, a.dtype)) if isinstance(a, np.ndarray) else a for a in args)
        rtol = max(rtol, 1e-5)  # a device without 64-bit types: the same function on 32-bit arrays
        atol = max(atol, 1e-5)  # (of values near 1: a sum that cancels keeps float32's absolute error)
    want_args = python_arguments(args)
    keywords = keywords or {}
    with numpy_quietly() if numpy_warns else contextlib.nullcontext():
        want = as_python(fn)(*want_args, **dict(zip(keywords, python_arguments(list(keywords.values())), strict=True)))
    got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got = fn(*got_args, device=device, **dict(zip(keywords, python_arguments(list(keywords.values())), strict=True)))
    for expected, actual in zip(want_args, got_args, strict=True):
        if isinstance(expected, np.ndarray):
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    wanted = want if isinstance(want, tuple) else (want,)
    results = got if isinstance(got, tuple) else (got,)
    assert len(wanted) == len(results)
    for expected, actual in zip(wanted, results, strict=True):
        if expected is None:
            assert actual is None
        elif np.ndim(expected) == 0:  # a scalar comes back as a Python number
            assert isinstance(actual, (int, float)) and not isinstance(actual, bool)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
        else:
            assert isinstance(actual, np.ndarray) and actual.shape == np.shape(expected)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
            if typed:
                assert actual.dtype == expected.dtype
                zeros = np.asarray(expected == 0) if expected.dtype.kind == "f" and device.caps.ieee_floats else \
                    np.zeros(expected.shape, bool)
                np.testing.assert_array_equal(np.signbit(actual[zeros]), np.signbit(expected[zeros]))


@svod.jit
def jacobi(a, b, steps):
    n = a.shape[0]
    for _t in range(steps):
        for i in prange(1, n - 1):
            b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3.0
        for i in prange(1, n - 1):
            a[i] = b[i]
    return a


@pytest.mark.parametrize("n", SIZES)
def test_a_time_loop_around_phases_runs_them_in_order(device, n):
    rng = np.random.default_rng(n)
    agrees_with_python(jacobi, device, rng.random(n), np.zeros(n), 4)


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_the_time_loop_takes_its_count_per_call_without_a_new_plan(steps):
    a, b = np.linspace(0, 1, 9), np.zeros(9)
    want_a, want_b = a.copy(), b.copy()
    as_python(jacobi)(want_a, want_b, steps)
    jacobi(a, b, steps)
    np.testing.assert_allclose(a, want_a)
    assert jacobi.plan(a, b, steps) is jacobi.plan(a, b, steps + 1)  # the count is the plan loop's variable


@svod.jit
def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    n = A.shape[0]
    for i in prange(n):
        for j in range(n):
            A[i, j] = A[i, j] + u1[i] * v1[j] + u2[i] * v2[j]
    for i in prange(n):
        for j in range(n):
            x[i] = x[i] + beta * A[j, i] * y[j]
    for i in prange(n):
        x[i] = x[i] + z[i]
    for i in prange(n):
        for j in range(n):
            w[i] = w[i] + alpha * A[i, j] * x[j]


@pytest.mark.parametrize("n", [1, 2, 7])
def test_several_phases_see_what_the_ones_before_wrote(device, n):
    rng = np.random.default_rng(7)
    vectors = [rng.random(n) for _ in range(8)]
    agrees_with_python(gemver, device, 1.5, 1.2, rng.random((n, n)), *vectors, rtol=1e-5)


@svod.jit
def scaled_copy(x, factor):
    out = np.zeros_like(x)
    ones = np.ones((x.shape[0], 2), dtype=x.dtype)
    filled = np.full(x.shape[0], factor, x.dtype)
    for i in prange(x.shape[0]):
        out[i] = x[i] * factor + ones[i, 1] + filled[i]
    return out, ones


@pytest.mark.parametrize("n", SIZES)
def test_temporaries_are_filled_where_they_are_made_and_come_back_shaped(device, n):
    agrees_with_python(scaled_copy, device, np.arange(n, dtype=np.float64), 0.5)


def test_a_temporary_a_device_cannot_hold_is_refused_naming_its_line():
    @svod.jit
    def wide(x):
        out = np.zeros(x.shape[0])  # float64, as NumPy makes it
        for i in prange(x.shape[0]):
            out[i] = x[i]
        return out

    gpu = next((d for d in ("WEBGPU:0", "WEBGPU:1") if d in svod.available_devices()), None)
    if gpu is None:
        pytest.skip("no WebGPU adapter here (the device without float64)")
    with pytest.raises(SvodError, match=r"cannot hold float64, the dtype of out.*test_jit.py:\d+"):
        wide(np.ones(3, np.float32), device=gpu)


def test_a_returned_temporary_is_the_callers_own():
    first, _ = scaled_copy(np.arange(3.0), 2.0)
    second, _ = scaled_copy(np.arange(3.0) + 1, 2.0)
    assert not np.shares_memory(first, second) and first[0] == 3.0 and second[0] == 5.0


@svod.jit
def triangular(a):
    n = a.shape[0]
    for k in range(n):
        for i in prange(k + 1, n):
            a[i] = a[i] + a[k]


@pytest.mark.parametrize("n", SIZES)
def test_a_phase_reads_the_variable_of_the_loop_around_it(device, n):
    agrees_with_python(triangular, device, np.arange(n, dtype=np.int64) + 1)


@svod.jit
def seeded(x):
    x[0] = 1.0
    for i in range(1, x.shape[0]):
        x[i] = x[i - 1] * 2.0
    for i in prange(x.shape[0]):
        x[i] = x[i] + 1.0


@pytest.mark.parametrize("n", [1, 2, 13])
def test_sequential_code_between_phases_runs_as_one_work_item(device, n):
    agrees_with_python(seeded, device, np.zeros(n))


@svod.jit
def doubled_in_place(x):
    x[:] = x * 2
    return x


def test_an_argument_of_a_dtype_svod_has_none_of_is_refused_naming_it_and_its_function():
    with pytest.raises(SvodError, match=r"\[kernel 'doubled_in_place', stage build\] numpy dtype timedelta64\[s\] "
                                        r"has no svod dtype \(at .*test_jit.py:\d+, the argument x\)"):
        doubled_in_place(np.ones(3, "timedelta64[s]"))
    with pytest.raises(SvodError, match=r"\[kernel 'doubled_in_place', stage build\] .*test_jit.py:\d+: this is an "
                                        r"array of complex256, and svod computes on complex64 and complex128 only"):
        doubled_in_place(np.ones(3, np.clongdouble))


def test_a_phase_that_races_is_refused_naming_its_line():
    @svod.jit
    def racy(x):
        for i in prange(x.shape[0]):
            x[0] = x[i]

    with pytest.raises(SvodError, match=r"test_jit.py:\d+"):
        racy(np.ones(4))


@svod.jit
def centred(x):
    total = 0.0
    for i in prange(x.shape[0]):
        total += x[i]
    mean = total / max(x.shape[0], 1)
    for i in prange(x.shape[0]):
        x[i] = x[i] - mean
    return total


@pytest.mark.parametrize("n", SIZES)
def test_a_parallel_reduction_is_carried_to_the_phases_after_it(device, n):
    agrees_with_python(centred, device, np.arange(n, dtype=np.float64) * 1.5, rtol=1e-5)


@svod.jit
def extremes(x, out):
    low = x[0]
    high = x[0]
    count = 0
    for i in prange(x.shape[0]):
        low = min(low, x[i])
        high = max(high, x[i])
        count += 1
    out[0] = high - low
    out[1] = count
    return count


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_max_min_and_counts_reduce_across_work_items(device, n):
    rng = np.random.default_rng(n)
    agrees_with_python(extremes, device, rng.standard_normal(n), np.zeros(2))


@svod.jit
def power_iteration(a, v, w, steps):
    n = a.shape[0]
    for _t in range(steps):
        for i in prange(n):
            acc = 0.0
            for j in range(n):
                acc += a[i, j] * v[j]
            w[i] = acc
        norm = 0.0
        for i in prange(n):
            norm += w[i] * w[i]
        for i in prange(n):
            v[i] = w[i] / norm ** 0.5
    return norm


@pytest.mark.parametrize("n", [1, 3, 7])
def test_a_scalar_reduced_in_a_time_loop_is_fresh_each_turn(device, n):
    rng = np.random.default_rng(3)
    agrees_with_python(power_iteration, device, rng.random((n, n)) + 0.1, np.ones(n), np.zeros(n), 4, rtol=1e-5)


@svod.jit
def carried_between(x):
    s = x[0] * 2.0
    k = 3
    for i in prange(x.shape[0]):
        x[i] = s + k


@pytest.mark.parametrize("n", [1, 5])
def test_a_scalar_computed_by_sequential_code_is_carried_to_later_phases(device, n):
    agrees_with_python(carried_between, device, np.arange(n, dtype=np.float64) + 1)


def test_an_array_made_inside_an_expression_is_its_numbers():
    """``np.zeros(3)[0]`` inside a prange's body: NumPy's 0.0 (once refused as a temporary made inside a
    statement; now an array of one number, ``array_exprs.Filled``)."""
    @svod.jit
    def inner(x):
        for i in prange(x.shape[0]):
            x[i] = np.zeros(3)[0] + np.full(2, 1.5)[1] * x[i]
        return x

    np.testing.assert_array_equal(inner(np.arange(1.0, 4.0)), inner.fn(np.arange(1.0, 4.0)))


def test_a_saved_jit_plan_loads_and_runs_as_the_function(tmp_path):
    a, b = np.linspace(0, 1, 11), np.zeros(11)
    path = tmp_path / "jacobi.svodplan"
    jacobi.save(path, a, b, 3)
    plan = svod.load_plan(path)
    want = a.copy()
    as_python(jacobi)(want, b.copy(), 3)
    plan.execute(buffers={"a": a, "b": b}, steps=3)
    np.testing.assert_allclose(a, want)


@svod.jit
def doubled_grid(x):
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        for j in prange(x.shape[1]):
            out[i, j] = 2.0 * x[i, j]
    return out


def test_a_saved_jit_plan_keeps_its_arrays_shapes(tmp_path):
    x = np.arange(6.0).reshape(2, 3)
    path = tmp_path / "grid.svodplan"
    doubled_grid.save(path, x)
    plan = svod.load_plan(path)
    assert plan.buffer_shapes[plan.buffer_names["x"]] == (2, 3)
    assert plan.buffer_shapes[plan.buffer_names["out"]] == (2, 3) and plan.written_names() == ["out"]
    out = np.zeros((2, 3))
    plan.execute(buffers={"x": x, "out": out})
    np.testing.assert_array_equal(out, 2.0 * x)


def test_a_buffer_shape_must_hold_its_size():
    plan = svod.ExecutionPlan("CPU")
    with pytest.raises(svod.errors.BufferMismatchError, match="cannot have shape"):
        plan.add_buffer(svod.Buffer("CPU", svod.dtypes.float32, 6), "x", shape=(4, 2))


@svod.jit
def indexed_sum(out):
    h, w = out.shape
    a, b = 2, 3
    for y in prange(h):
        for x in range(w):
            out[y, x] = a * y + b * x


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (7, 2)])
def test_a_shape_unpacked_into_names_defines_each(device, shape):
    agrees_with_python(indexed_sum, device, np.zeros(shape))


@svod.jit
def diagonal_sums(t, x, d):
    n = x.shape[0]
    for i in prange(n - d):
        s = 0
        for k in range(i + 1, i + d):
            s = s + t[i, k] + t[k + 1, i + d]
        x[i] = s


@pytest.mark.parametrize("n", [4, 7])
def test_a_loop_whose_bounds_follow_the_work_item_is_costed_for_the_plan(n):
    """A plan estimates each kernel's work from its loops' trips; ``range(i + 1, i + d)`` has no trip count
    apart from ``i`` (it once made prepare fail: 'op RANGE is unsupported in a launch size')."""
    rng = np.random.default_rng(n)
    agrees_with_python(diagonal_sums, svod.get_device("CPU"), rng.integers(0, 9, (n, n)), np.zeros(n, np.int64), 2)


@svod.jit
def sweep(table):
    n = table.shape[0]
    for d in range(1, n):
        for i in prange(n - d):
            j = i + d
            best = table[i, j]
            for k in range(i, j):
                best = max(best, table[i, k] + table[k + 1, j])
            table[i, j] = best + 1


@pytest.mark.parametrize("n", [1, 2, 6, 13])
def test_an_anti_diagonal_sweep_is_proven_with_its_loops_bounds(device, n):
    """``table[i, i + d]`` under ``for d in range(1, n)`` is in bounds and each work item's own only for the
    values the loop gives ``d``: the plan loop bounds the phase's variable (numba's nussinov as written)."""
    agrees_with_python(sweep, device, np.zeros((n, n)))


def test_each_compiler_pair_of_a_device_gets_its_own_plan():
    """The CPU's llvm and clang pairs share the device's name; a plan built for one is not the other's."""

    @svod.jit
    def doubled_total(x):
        return np.sum(x * 2.0)

    x = np.arange(5.0)
    llvm, c = svod.get_device("CPU"), svod.get_device("CPU", "clang")
    by_llvm, by_c = doubled_total.plan(x, device=llvm), doubled_total.plan(x, device=c)
    assert by_c.device.compiler.cache_key == c.compiler.cache_key != llvm.compiler.cache_key
    assert by_llvm.device.compiler.cache_key == llvm.compiler.cache_key
    assert doubled_total(x, device=c) == doubled_total(x) == 20.0
