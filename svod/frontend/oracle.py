"""Plain Python as the specification of ``@svod.kernel``: the kernel's own function, run as Python.

The PYTHON device interprets the UOps the translator built, so it shares any mistake the translator makes;
only the function itself says what its author meant. ``run_as_python`` calls it on copies of the arguments
with nothing translated: ``svod.prange`` is ``range``, ``svod.math`` computes with numpy in the operand's
float type, an atomic updates its element, and array elements are numpy scalars of the array's dtype, so
float32 rounds per operation and fixed-width integers wrap as the kernel's do. What svod computes
differently from plain Python (README, "Where a kernel differs from plain Python") is what this oracle
cannot check: a sum's order of association, a loop variable's 64 bits.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from svod.device import Buffer
from svod.frontend.pykernel import Kernel


def python_arguments(args: Sequence[Any]) -> list[Any]:
    """Fresh copies of ``args`` as plain Python sees them: arrays as numpy arrays (a svod Buffer's contents),
    scalars as they are."""
    copied: list[Any] = []
    for a in args:
        if isinstance(a, Buffer):
            copied.append(a.numpy())
        elif isinstance(a, np.ndarray):
            copied.append(a.copy())
        elif hasattr(a, "__dlpack__") and not isinstance(a, np.generic):
            copied.append(np.from_dlpack(a).copy())
        else:
            copied.append(a)
    return copied


def run_as_python(kernel: Kernel, *args: Any) -> list[Any]:
    """The arguments after ``kernel``'s function ran on copies of them as plain Python (arrays are updated in
    place, as the kernel updates them). Integer overflow wraps silently, as in the kernel."""
    arguments = python_arguments(args)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy scalars warn of what wraps
        kernel.fn(*arguments)
    return arguments


__all__ = ["python_arguments", "run_as_python"]
