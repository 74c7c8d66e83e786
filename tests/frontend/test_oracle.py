"""Python kernels against themselves run as plain Python (``svod.frontend.oracle``), on every device: random
kernels (``python_kernels``: hypothesis draws their seeds; CI draws the same ones every run, and
``python -m tests.frontend.python_kernels COUNT`` sweeps more), and the suite's kernels written in Python."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import svod
from svod import dtypes
from svod.device import Device
from svod.frontend.oracle import run_as_python
from svod.workloads import PYTHON_KERNELS
from tests.frontend.python_kernels import arguments, generate, load, outcome
from tests.frontend.test_held_values import agrees_with_python
from tests.helpers import refuses
from tests.kernels import SMALL_WORKLOADS

_FOLDER = Path(tempfile.mkdtemp(prefix="svod-generated-"))
_LANES_FOLDER = Path(tempfile.mkdtemp(prefix="svod-generated-lanes-"))
_CELLS_FOLDER = Path(tempfile.mkdtemp(prefix="svod-generated-cells-"))
"""Kernels a seed draws in ``lanes`` or ``cells`` form: a file of their own, not the other form's of that seed."""


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1 << 30))
@example(seed=67485)  # a register's stores in a loop beside an array's: every work item's, or the first's only
def test_random_python_kernels_compute_what_python_does_or_are_refused(device, seed):
    """Every outcome but a wrong answer is fine: the same values as plain Python, or a refusal that is right (a
    race, an access Python also refuses, a dtype or limit the device states)."""
    kernel = generate(seed)
    result = outcome(kernel, load(kernel, _FOLDER, seed), device, arguments(kernel, seed))
    assert not result.startswith("WRONG"), f"{result}\n{kernel.source}"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1 << 30))
def test_random_kernels_with_while_break_and_continue_compute_what_python_does(device, seed):
    """The same, with ``while`` loops, ``break`` and ``continue`` drawn too (a device that limits loop turns
    refuses a ``while``, which is a limit it states)."""
    kernel = generate(seed, exits=True)
    result = outcome(kernel, load(kernel, _FOLDER, seed), device, arguments(kernel, seed))
    assert not result.startswith("WRONG"), f"{result}\n{kernel.source}"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1 << 30))
@example(seed=196)  # three reads of one element through three memory states, made one (``memory.unstated``)
def test_random_kernels_over_neighbouring_work_items_compute_what_python_does(device, seed):
    """The same, with a work item per column (``python_kernels``' ``lanes``): neighbouring work items touch
    neighbouring elements, and a CPU runs those that carry locals through a loop in vector lanes."""
    kernel = generate(seed, lanes=True)
    result = outcome(kernel, load(kernel, _LANES_FOLDER, seed), device, arguments(kernel, seed))
    assert not result.startswith("WRONG"), f"{result}\n{kernel.source}"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1 << 30))
@example(seed=0)  # a sum from a triangular prange's column to the row's end: one range for the column
@example(seed=246)  # a local carried through range(c), in a column loop made parallel
def test_random_kernels_over_a_row_s_cells_compute_what_python_does(device, seed):
    """The same, with the body run once per cell of the row (``python_kernels``' ``cells``): in a column loop
    svod makes parallel where it can, or in a triangular ``svod.prange(i + 1)``, with loops counting from or up
    to the column."""
    kernel = generate(seed, cells=True)
    result = outcome(kernel, load(kernel, _CELLS_FOLDER, seed), device, arguments(kernel, seed))
    assert not result.startswith("WRONG"), f"{result}\n{kernel.source}"


@pytest.mark.parametrize("static_shapes", [True, False], ids=["static_shapes", "symbolic_sizes"])
@pytest.mark.parametrize("name", sorted(PYTHON_KERNELS))
def test_the_suites_python_kernels_compute_what_python_does(device, name, static_shapes):
    """As the benchmark compiles them (sizes constants of each kernel), and as the README's decorator does
    (sizes variables: the row test of a gather, split maxima with their tails, cut-short transpose blocks)."""
    workload = SMALL_WORKLOADS[name]()
    for step, static in zip(workload.steps, PYTHON_KERNELS[name], strict=True):
        kernel = static if static_shapes else svod.kernel(static.fn)
        args = [workload.arrays[a] for a in step.args]
        if any(refuses(device, dtypes.from_numpy(a.dtype)) for a in args):
            return
        want = run_as_python(kernel, *args)
        got = [a.copy() for a in args]
        kernel(*got, device=device)
        for expected, actual in zip(want, got, strict=True):
            np.testing.assert_allclose(actual, expected, rtol=2e-4, atol=1e-5)


@svod.kernel
def int8_plus_index(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] + i * 100


def test_loop_variables_are_int64_in_plain_python_as_in_numba(device: Device) -> None:
    """``x_int8[i] + i * 100`` computes in int64 in the kernel (a loop variable is numba's intp), not in int8
    as NumPy would for a Python int: the oracle makes ``range`` yield int64 values."""
    agrees_with_python(int8_plus_index, device, np.zeros(3, np.int64), np.array([120, 127, -128], np.int8))
