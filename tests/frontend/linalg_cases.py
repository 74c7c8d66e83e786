"""What the tests of ``np.linalg`` in ``@svod.jit`` functions share: the dtypes and sizes each device is tried
at (every size on the CPU; fewer where each size compiles its own static kernels or is interpreted at a cost),
and the refusal of the Jacobi sweeps on a device that stops a work item's loops (WebGPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from svod.device import Device
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError

SMALL_SHAPES = ((0, 0), (0, 3), (3, 0), (1, 1), (1, 4), (4, 1), (7, 3), (3, 7))
"""Square, tall, wide and empty matrices every device tries."""


def dtypes_of(device: Device) -> tuple[str, ...]:
    """float32, and float64 where the device holds it."""
    return ("float32", "float64") if dtypes.float64 in device.caps.element_dtypes else ("float32",)


def complex_types_of(device: Device) -> tuple[str, ...]:
    """complex64, and complex128 where the device holds float64 (a complex array's parts)."""
    return ("complex64", "complex128") if dtypes.float64 in device.caps.element_dtypes else ("complex64",)


def sizes_of(device: Device) -> tuple[int, ...]:
    """The orders of the square matrices tried on ``device``."""
    if device.name == "CPU":
        return (0, 1, 2, 7, 31, 64)
    return (0, 1, 2, 7) if device.name == "PYTHON" else (0, 1, 2, 7, 31)


def shapes_of(device: Device) -> tuple[tuple[int, int], ...]:
    """The shapes of the matrices of any shape tried on ``device``."""
    if device.name == "PYTHON":
        return SMALL_SHAPES
    large = ((13, 13), (31, 5), (64, 64)) if device.name == "CPU" else ((13, 13), (31, 5), (5, 31))
    return (*SMALL_SHAPES, *large)


def jacobi_refused(device: Device, call: Callable[..., Any]) -> bool:
    """Whether ``device`` stops a work item's loops, and so refuses the Jacobi sweeps (of ``call``, a jitted
    function of one matrix that reaches them) at the line: checked here where it does."""
    if device.caps.max_loop_turns is None:
        return False
    with pytest.raises(KernelSyntaxError, match=r"Jacobi sweeps .* stops them after \d+ turns"):
        call(np.eye(3, dtype="float32"), device=device)
    return True
