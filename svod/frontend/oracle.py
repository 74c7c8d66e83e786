"""Plain Python as the specification of ``@svod.kernel``: the kernel's own function, run as Python.

The PYTHON device interprets the UOps the translator built, so it shares any mistake the translator makes;
only the function itself says what its author meant. ``run_as_python`` calls it on copies of the arguments
with nothing translated: ``svod.prange`` is ``range``, ``svod.math`` computes with numpy in the operand's
float type, an atomic updates its element, and array elements are numpy scalars of the array's dtype, so
float32 rounds per operation and fixed-width integers wrap as the kernel's do.

Where Python leaves a choice to a compiler, the run makes numba's (DESIGN.md): a loop variable is a 64-bit
integer (numpy's ``int64``), not an arbitrary-precision one, so ``x_int8[i] + i`` computes in int64 as the
kernel does. ``np.random`` is svod's generator (``svod.random.philox.PlainRandom``, for the launch the kernel
ran with), not NumPy's: the function sees a ``numpy`` whose ``random`` is that generator (and its functions
where it imported them by name), and ``svod.prange`` tells the generator which work item runs; a plain Python
function it calls (one ``@svod.jit`` compiles into its caller) sees the same. NumPy's own generator is neither
used nor changed.

What svod computes differently from plain Python (docs/semantics.md) is what
this oracle cannot check: a sum's order of association, a float32 value meeting an integer.
"""

from __future__ import annotations

import operator
import types
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from svod import random
from svod.device import Buffer
from svod.frontend import pylang
from svod.frontend.jit import Jit
from svod.frontend.promotion import HOST, Platform
from svod.frontend.pykernel import Kernel
from svod.random.philox import PlainRandom


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


def _loop(*bounds: Any) -> Iterator[np.int64]:
    """``range`` whose values are int64, as numba types a loop variable. Its bounds are Python's (``__index__``):
    a NumPy bool or a float is a TypeError, as in ``range``."""
    return (np.int64(v) for v in range(*(operator.index(b) for b in bounds)))


class _Module(types.ModuleType):
    """A module as a kernel's function sees it in plain Python: the real one's names, with some replaced."""

    def __init__(self, real: types.ModuleType, **replaced: Any) -> None:
        super().__init__(real.__name__)
        self._real = real
        for name, value in replaced.items():
            setattr(self, name, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # a module's own protocol (copying, pickling): not the module's
            raise AttributeError(name)
        return getattr(self.__dict__["_real"], name)


def as_python(kernel: Kernel | Jit, generator: PlainRandom | None = None) -> types.FunctionType:
    """``kernel``'s function (an ``@svod.kernel``'s or an ``@svod.jit``'s) with numba's loop variables: ``range``
    and ``svod.prange`` (however the function and the ``@svod.func`` helpers it calls name them) yield int64
    values; and with svod's generator as ``np.random``: ``generator``, or one for the process generator's next
    launch."""
    if generator is None:
        launch = random.generator.next_launch()
        generator = PlainRandom(launch.key, launch.launch)
    return _in_plain_python(kernel.fn, {}, generator)


def _in_plain_python(fn: Any, modules: dict[int, dict[str, Any]], generator: PlainRandom) -> types.FunctionType:
    """``fn`` over a copy of its module's names in which the loops yield int64 and ``np.random`` is
    ``generator`` (one copy per module, shared by the functions of that module it reaches: helpers that call
    one another, or themselves)."""
    names = modules.get(id(fn.__globals__))
    if names is None:
        names = modules[id(fn.__globals__)] = dict(fn.__globals__)
        for name, value in fn.__globals__.items():
            if value is pylang.prange:
                names[name] = generator.prange
            elif isinstance(value, types.ModuleType) and getattr(value, "prange", None) is pylang.prange:
                names[name] = _Module(value, prange=generator.prange)
            elif value is np:
                names[name] = _Module(np, random=generator)
            elif value is np.random:
                names[name] = generator
            elif getattr(value, "__self__", None) is np.random.mtrand._rand:  # from numpy.random import normal
                names[name] = getattr(generator, value.__name__, value)
        names["range"] = _loop
        for name, value in fn.__globals__.items():
            if isinstance(value, (pylang.Func, Jit)):  # a helper, or a jitted function called as plain Python
                names[name] = _in_plain_python(value.fn, modules, generator)
            elif _compiled_into_callers(value):  # a jitted function's plain helper: its draws are svod's too
                names[name] = _in_plain_python(value, modules, generator)
    made = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)
    made.__kwdefaults__ = fn.__kwdefaults__  # (keyword-only parameters' defaults are not the constructor's)
    return made


def _compiled_into_callers(value: Any) -> bool:
    """Whether ``value`` is a plain Python function a jitted function compiles into itself when it calls it
    (``svod.frontend.inline``: not NumPy's or svod's)."""
    return isinstance(value, types.FunctionType) and (value.__module__ or "").split(".")[0] not in ("numpy", "svod")


def run_as_python(kernel: Kernel, *args: Any, launch: random.Launch | None = None,
                  platform: Platform = HOST) -> list[Any]:
    """The arguments after ``kernel``'s function ran on copies of them as plain Python (arrays are updated in
    place, as the kernel updates them). Integer overflow wraps silently, as in the kernel. Its draws are those
    of ``launch`` (by default the process generator's next), in the widths of ``platform``."""
    arguments = python_arguments(args)
    launch = launch if launch is not None else random.generator.next_launch()
    generator = PlainRandom(launch.key, launch.launch, platform.float64, platform.index_bits > 32)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy scalars warn of what wraps
        as_python(kernel, generator)(*arguments)
    return arguments


__all__ = ["as_python", "python_arguments", "run_as_python"]
