"""Calls of a jitted function like one before, through the dispatcher generated for their signature
(``svod.frontend.jit_dispatch``): each computes what plain Python and NumPy compute, and each check a first call
makes still refuses on the calls after it — an int past its parameter's range, a uint64 past int64's, a failure
flag a run raises. (Arrays laid out otherwise after a call of their signature — strided, read-only, misaligned,
aliased — are ``test_jit_calls.py``'s ``test_a_call_like_one_before_takes_an_array_as_a_first_call_does``; an
index out of bounds is its ``test_an_index_out_of_bounds_in_a_call_like_one_before_is_refused_each_time``.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import GraphError, LinAlgError, VariableError
from svod.frontend import jit as jit_module

SIZES = (0, 1, 2, 7, 13)


@svod.jit
def offset(out, x, k):
    for i in prange(x.shape[0]):
        out[i] = x[i] + k


@svod.jit
def total(x):
    s = 0.0
    for v in x:
        s += v
    return s


@svod.jit
def first_ones(x, n, scale):
    out = np.zeros(n, x.dtype)
    for i in prange(n):
        out[i] = x[i] * scale
    return out


@svod.jit
def solved(a, b):
    return np.linalg.solve(a, b)


def values(n: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    """``n`` values of both signs, with a NaN, -0.0 and an infinity among the first ones."""
    found = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    found[:3] = [np.nan, -0.0, np.inf][:min(n, 3)]
    return found


def in_place(fn: svod.frontend.jit.Jit) -> bool:
    """Whether each plan of ``fn``'s calls so far runs on the caller's arrays in place (the device's memory is
    the host's and its steps keep their addresses; the PYTHON reference's do not): its calls then skip the
    general binding."""
    return all(call.prepared.binder is not None for call in fn._calls.values())


@pytest.mark.parametrize("n", SIZES)
def test_calls_like_the_first_run_through_their_dispatcher_as_python_computes(device, n, general_runs):
    """After the first call of a signature, calls of it, on new arrays each time, run without the general
    binding where the device's memory is the host's, and compute what plain Python computes: an array written
    in place, a scalar returned."""
    fn, summed = svod.jit(offset.fn), svod.jit(total.fn)
    wide = np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32
    for seed in range(4):
        x, out, want = values(n, seed=seed), np.full(n, -1.0, np.float32), np.full(n, -1.0, np.float32)
        fn(out, x, 2.5, device=device)
        offset.fn(want, x, 2.5)
        np.testing.assert_array_equal(out, want)
        finite = x[3:].astype(wide)
        np.testing.assert_array_equal(summed(finite, device=device), total.fn(finite))
    assert len(fn._calls) == 1 and fn._last is not None
    if in_place(fn) and in_place(summed):
        assert len(general_runs) == 2  # each function's first call only


def test_another_dtype_shape_or_device_after_dispatched_calls_takes_a_plan_of_its_own(device):
    """A call whose array has another dtype or shape, or that asks for another device, is not one of the last
    dispatcher's signature: it runs a plan of its own, computing NumPy's answer (a float64 array read as the
    float32 plan's would not)."""
    fn = svod.jit(offset.fn)
    for dtype, n, on in ((np.float32, 7, device), (np.float32, 7, device), (np.float64, 7, device),
                         (np.float32, 13, device), (np.float32, 7, device.name), (np.float64, 7, device)):
        if dtype is np.float64 and np.dtype(dtype) not in {np.dtype(d.numpy) for d in device.caps.element_dtypes}:
            continue
        x, out = values(n, dtype, seed=n), np.zeros(n, dtype)
        fn(out, x, 0.25, device=on)
        np.testing.assert_array_equal(out, x + dtype(0.25))


@pytest.mark.parametrize("n", SIZES)
def test_a_uint64_past_int64s_range_on_dispatched_calls_computes_as_numpy(device, n):
    """A ``np.uint64`` scalar of 2**63 or more, on its first call and on the dispatched calls after it; refused
    on each call where the device holds no uint64 or float64."""
    holds = {svod.dtypes.uint64, svod.dtypes.float64} <= device.caps.element_dtypes
    fn = svod.jit(offset.fn)
    x = np.arange(n, dtype=np.float64) - 2.0
    for k in (5, 2**63 + 7, 2**63 + 7, 2**64 - 1, 2**64 - 1, 0, 0):
        out = np.full(n, -1.0)
        if not holds:
            with pytest.raises(GraphError, match="cannot hold"):
                fn(out, x, np.uint64(k), device=device)
            continue
        fn(out, x, np.uint64(k), device=device)
        np.testing.assert_array_equal(out, x + np.uint64(k))


def test_an_int_past_its_parameters_range_is_refused_on_each_call_between_dispatched_ones(device):
    """An int outside the values its parameter takes is refused before anything runs, on each call, between
    calls in range that run through their dispatcher (one the plan passes to its kernels alone, whatever its
    value), each computing Python's answer."""
    fn = svod.jit(offset.fn)
    x = values(5)
    for big in (2**63 + 7, 2**31, -(2**31), 2**63 + 7):
        out = np.full(5, -1.0, np.float32)
        with pytest.raises(VariableError, match=f"k={big} is outside") as raised:
            fn(out, x, big, device=device)
        np.testing.assert_array_equal(out, np.full(5, -1.0, np.float32))  # refused before anything ran
        assert raised.value.stage == "bind"
        for _ in range(2):  # the second through the first's dispatcher
            fn(out, x, -3, device=device)
            np.testing.assert_array_equal(out, x - 3)


def test_a_failure_flag_a_dispatched_run_raises_is_raised_each_time_and_cleared(device):
    """A singular solve raises NumPy's ``LinAlgError`` on each call of its signature, and a sound matrix
    between them is solved as NumPy solves it: the flag was read and cleared, not left to fail it."""
    dtype = np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], dtype)
    sound = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], dtype)
    b = np.array([1.0, -2.0, 0.5], dtype)
    for _ in range(3):
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix") as raised:
            solved(singular, b, device=device)
        assert isinstance(raised.value, LinAlgError) and raised.value.stage == "execute"
        np.testing.assert_allclose(solved(sound, b, device=device), np.linalg.solve(sound, b),
                                   rtol=100 * np.finfo(dtype).eps)


@pytest.mark.parametrize("k", (np.nan, -0.0, 0.0, True, 1))
def test_a_numbers_value_and_type_choose_the_dispatcher(device, k):
    """A number's value and type are part of a call's signature, as of its call key: a NaN takes one
    dispatcher call after call, a bool and an int of one value each their own, -0.0 keeps its sign; a float the
    plan only passes to its kernels runs through the last call's dispatcher whatever its value."""
    fn = svod.jit(offset.fn)
    x = values(7)
    for by in (k, k, 2.0, k):
        out = np.zeros(7, np.float32)
        fn(out, x, by, device=device)
        want = np.zeros(7, np.float32)
        offset.fn(want, x, by)
        np.testing.assert_array_equal(out, want)
    assert len(fn._calls) == (1 if type(k) is float else 2)


def test_a_scalars_new_value_takes_the_dispatcher_and_a_value_the_host_reads_a_plan_of_its_own(device,
                                                                                              general_runs):
    """A number the plan passes to its kernels runs the same plan whatever its value: calls with a new one each
    time run through the last call's dispatcher. A number the host reads (a temporary's length) makes a plan
    for its value: a call with another is not the dispatcher's, and returns an array of its own length."""
    fn = svod.jit(offset.fn)
    x = values(13)
    for k in (0.5, -0.0, np.inf, np.nan, 1e30, -7.25):
        out, want = np.zeros(13, np.float32), np.zeros(13, np.float32)
        fn(out, x, k, device=device)
        offset.fn(want, x, k)
        np.testing.assert_array_equal(out, want)
    if in_place(fn):
        assert len(general_runs) == 1
    made = svod.jit(first_ones.fn)
    for n, scale in ((3, 2.0), (3, -1.5), (5, 2.0), (0, 2.0), (5, 0.25), (13, 2.0)):
        got = made(x, n, scale, device=device)
        np.testing.assert_array_equal(got, first_ones.fn(x, n, scale))
        assert got.shape == (n,)


class _Interleaved:
    """Stands for a plan memory a call reads its result from (a scalar's view): before the read, another
    thread's call of the same function runs, given half a second, as a thread switch there would run it."""

    def __init__(self, view: np.ndarray, other: Callable[[], object]) -> None:
        self.view, self.other = view, other

    def item(self, index: int) -> object:
        thread = threading.Thread(target=self.other)
        thread.start()
        thread.join(0.5)  # blocked where the first call still holds the plan, as it must
        return self.view.item(index)


def _interleaved_totals(device: svod.device.Device, through_dispatcher: bool) -> tuple[float, float]:
    """The sums two calls of ``total`` return when the second, of another array of the same signature, runs
    between the first's run and its read of its result: through the generated dispatcher's read, or the general
    binding's (``Prepared.results``)."""
    fn = svod.jit(total.fn)
    wide = np.float64 if svod.dtypes.float64 in device.caps.element_dtypes else np.float32
    first, second = np.full(1000, 1.0, wide), np.full(1000, 2.0, wide)
    got: list[float] = []
    fn(first, device=device)
    (call,) = fn._calls.values()
    if through_dispatcher:
        scope = call.dispatch.__globals__
        if "VIEW" not in scope:  # the result is not read in the plan's memory: no read to interleave
            return fn(first, device=device), fn(second, device=device)
        scope["VIEW"] = _Interleaved(scope["VIEW"], lambda: got.append(fn(second, device=device)))
        mine = fn(first, device=device)
    else:
        results = call.prepared.results
        once: list[int] = []

        def interleaved(args, made=None):  # type: ignore[no-untyped-def]
            if not once:
                once.append(1)
                thread = threading.Thread(target=lambda: got.append(call.prepared.run({"x": second})))
                thread.start()
                thread.join(0.5)
            return results(args, made)

        call.prepared.results = interleaved  # type: ignore[method-assign]
        mine = call.prepared.run({"x": first})
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    return mine, got[0]


@pytest.mark.parametrize("through_dispatcher", (True, False))
def test_a_call_reads_its_own_result_while_another_thread_runs_the_same_plan(device, through_dispatcher):
    """Two threads calling one function of one signature take turns at its plan: a call's scalar result, read in
    the plan's memory after its run, is its own, not that of another thread's call that ran in between."""
    mine, other = _interleaved_totals(device, through_dispatcher)
    assert (mine, other) == (1000.0, 2000.0)


def test_a_function_called_with_ever_new_shapes_keeps_so_many_plans_and_computes_each_again(monkeypatch):
    """A plan holds its temporaries' buffers: a function called with a new shape each time keeps ``PLANS_KEPT``
    plans at most, and a shape whose plan was dropped gets a new one that computes what Python does."""
    monkeypatch.setattr(jit_module, "PLANS_KEPT", 3)
    fresh = svod.jit(total.fn)
    arrays = [np.arange(n, dtype=np.float64) for n in (1, 2, 3, 5, 8, 13)]
    for x in [*arrays, *arrays[:2]]:
        assert fresh(x) == sum(x.tolist())
        assert len(fresh._plans) <= 3
    assert len(fresh._plans) == 3
