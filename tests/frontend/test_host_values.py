"""A jitted function's scalar that the paths to a statement give values of different types (an if's branches, a
loop's first and later turns): NumPy's result there is Python's where every type gives one dtype, and the
statement is refused at its line where the dtype depends on the path taken. A Python int only the run knows,
meeting an integer array NumPy refuses it for when it does not fit, is refused: the host cannot check it."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

import svod
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError
from tests.helpers import refuses


def branch_strong(a, flag):
    if flag > 0:  # noqa: SIM108 (the statement is the point)
        s = a[0]
    else:
        s = np.float64(2.0)
    return a * s


def chosen_strong(a, flag):
    s = a[0] if flag > 0 else np.float64(2.0)  # (the plan is made for flag's value)
    return a * s


def chosen_by_an_element(a):
    s = a[0] if a[1] > 0 else np.float64(2.0)
    return a * s


def weak_then_strong(a, flag):
    s = 2.0
    if flag > 0:
        s = np.float64(3.0)
    return a * s


def summed_in_a_loop(a, x, n):
    s = 0.0
    for i in range(n):
        s += x[i]
    return a * s


def rebound_in_line(a, x):
    t = 0
    t = x[0]
    return a * t


def small_or_large(a, flag):
    k = 3
    if flag > 0:
        k = 300
    return a + k


def divided(a, flag):
    k = 3
    if flag > 0:
        k = 300
    return a / k


def same(got: Any, expected: Any) -> None:
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float64])
@pytest.mark.parametrize("flag", [0, 1])
def test_a_scalar_of_two_types_that_give_one_dtype_computes_what_python_does(device, dtype, flag):
    a = np.array([1, 2, 3, 5, 7], dtype)
    if refuses(device, dtypes.float64):  # (the result is float64 for every dtype)
        return
    same(svod.jit(weak_then_strong)(a, flag, device=device), weak_then_strong(a, flag))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_a_sum_a_loop_starts_from_a_python_float_computes_what_python_does_where_the_dtype_is_one(device, n):
    a, x = np.linspace(-1.0, 1.0, 5), np.arange(1.0, 8.0)
    if refuses(device, dtypes.float64):
        return
    same(svod.jit(summed_in_a_loop)(a, x, n, device=device), summed_in_a_loop(a, x, n))


@pytest.mark.parametrize("flag", [0, 1])
def test_a_choice_by_a_value_the_host_knows_is_the_hosts(device, flag):
    a = np.array([0.5, -1.5, 3.0], np.float32)
    if refuses(device, dtypes.float64):
        return
    jitted = svod.jit(chosen_strong)
    for turn in (flag, 1 - flag):  # (one plan per value: the second call's is its own)
        same(jitted(a, turn, device=device), chosen_strong(a, turn))


def test_a_name_bound_again_in_the_functions_body_has_its_last_type(device):
    a, x = np.ones(3, np.float32), np.array([2.5, 1.0])
    if refuses(device, dtypes.float64):
        return
    expected = rebound_in_line(a, x)
    assert expected.dtype == np.float64
    same(svod.jit(rebound_in_line)(a, x, device=device), expected)


@pytest.mark.parametrize(("function", "arguments", "types"), [
    (branch_strong, (np.ones(3, np.float32), 0), "a NumPy float32 or a NumPy float64"),
    (branch_strong, (np.ones(3, np.int8), 1), "a NumPy int8 or a NumPy float64"),
    (chosen_by_an_element, (np.ones(3, np.float32),), "a NumPy float32 or a NumPy float64"),
    (weak_then_strong, (np.ones(3, np.float32), 1), "a Python float or a NumPy float64"),
    (summed_in_a_loop, (np.ones(3, np.float32), np.ones(4), 2), "a Python float or a NumPy float64"),
])
def test_a_scalar_whose_type_decides_the_dtype_by_the_path_taken_is_refused_at_its_line(function, arguments, types):
    rows = inspect.getsource(function).splitlines()
    line = function.__code__.co_firstlineno + next(k for k, row in enumerate(rows) if "return" in row)
    with pytest.raises(KernelSyntaxError, match="on different paths to here") as err:
        svod.jit(function)(*arguments)
    assert f"`s` is {types}" in str(err.value)
    assert f"test_host_values.py:{line}:" in str(err.value)


def test_a_python_int_only_the_run_knows_meeting_int8_is_refused_as_numpy_may_raise():
    a = np.ones(3, np.int8)
    with pytest.raises(OverflowError):
        small_or_large(a, 1)
    with pytest.raises(KernelSyntaxError, match=r"`k` is a Python int only the run knows.*does not fit int8"):
        svod.jit(small_or_large)(a, 0)


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
@pytest.mark.parametrize("flag", [0, 1])
def test_a_python_int_only_the_run_knows_runs_where_numpy_takes_any_value(device, dtype, flag):
    a = np.array([1, -2, 127], dtype)
    if refuses(device, dtypes.float64) or refuses(device, dtypes.from_numpy(np.dtype(dtype))):
        return
    same(svod.jit(divided)(a, flag, device=device), divided(a, flag))
    if dtype == np.int64:
        same(svod.jit(small_or_large)(a, flag, device=device), small_or_large(a, flag))



def largest(a, n):
    return a + max(n[0], 2.5)  # Python's max returns an argument: the int64 where it is larger, else the float


def smallest(a, n):
    return a + min(n[0], 3)  # the int64, or the Python int 3 (weak: int8 stays int8)


def bounded(a, x):
    return a * max(x[0], 0.5) + min(x[1], 2.0)


@pytest.mark.parametrize(("function", "types"), [(largest, "a NumPy int64 or a Python float"),
                                                 (smallest, "a NumPy int64 or a Python int")])
def test_a_max_or_min_of_two_types_is_either_argument_s_type_as_python_returns_one(function, types):
    """``max(n[0], 2.5)`` is ``n[0]`` itself where it is larger: NumPy's result then is int64 (``[6 7 8]`` here),
    and float64 where 2.5 wins; svod took the types' promotion, float64, on both paths. Meeting int8, each type
    gives another dtype: refused at the line, as a choice by a value only the run knows is."""
    a = np.array([1, 2, 3], np.int8)
    assert {function(a, np.array([k])).dtype for k in (1, 5)} == {np.dtype(np.int64), np.dtype(np.float64)
                                                                  if function is largest else np.dtype(np.int8)}
    for k in (1, 5):
        with pytest.raises(KernelSyntaxError, match=f"is {types} on different paths to here"):
            svod.jit(function)(a, np.array([k]))


@pytest.mark.parametrize("x", [[0.25, 7.0], [3.0, -1.5], [np.nan, np.inf]])
def test_a_max_or_min_whose_arguments_give_one_dtype_computes_what_python_does(device, x):
    a = np.array([1.0, -2.0, 0.5])  # (of float32, a NumPy float64 and a Python float give two dtypes: refused)
    if refuses(device, dtypes.float64):
        return
    same(svod.jit(bounded)(a, np.array(x), device=device), bounded(a, np.array(x)))
