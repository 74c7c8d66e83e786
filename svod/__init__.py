"""svod: a kernel runtime. UOp graphs in, compiled kernels out, run on CPU threads and GPUs.

``import svod`` loads only the dtypes and the errors; each other public name imports its module when it is
first used (``svod.kernel``, ``svod.jit``, ``svod.ExecutionPlan`` ...), so a script pays for the code
generator, the runtime and the distributed layer only once it touches them. The first name that may need a
device installs the backend registry, and a device named before that (``svod.device.Buffer("CPU", ...)``)
installs it too, as does a device name parsed before (``LLVMRenderer("CPU")``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from svod import errors
from svod.config import VERSION
from svod.device.device import resolver
from svod.dtype import DeviceSpec, DType, dtypes
from svod.errors import BundleWarning

if TYPE_CHECKING:
    from svod import distributed, random
    from svod import torch as torch  # not in __all__: a star import would shadow the caller's torch
    from svod.device import Buffer
    from svod.frontend import KernelBuilder, available_devices, compile, compiler_pair, get_device, kernel, run
    from svod.frontend.check import check
    from svod.frontend.gradients import grad, vjp
    from svod.frontend.jit import jit
    from svod.frontend.pylang import (
        Array,
        Const,
        Int,
        atomic_add,
        atomic_max,
        atomic_min,
        func,
        inf,
        math,
        nan,
        prange,
    )
    from svod.frontend.pylang import Cast as _Cast
    from svod.frontend.tape import Tape
    from svod.ir import AxisKind, Ops, UOp
    from svod.runtime import ExecutionPlan, load_plan

    bool: _Cast
    int8: _Cast
    int16: _Cast
    int32: _Cast
    int64: _Cast
    uint8: _Cast
    uint16: _Cast
    uint32: _Cast
    uint64: _Cast
    float16: _Cast
    float32: _Cast
    float64: _Cast

_HOMES = {
    "Buffer": "svod.device",
    **dict.fromkeys(("KernelBuilder", "available_devices", "check", "compile", "compiler_pair", "get_device",
                     "kernel", "run"), "svod.frontend"),
    "jit": "svod.frontend.jit",
    "Tape": "svod.frontend.tape",
    **dict.fromkeys(("grad", "vjp"), "svod.frontend.gradients"),
    **dict.fromkeys(("Array", "Const", "Int", "atomic_add", "atomic_max", "atomic_min", "func", "inf", "math", "nan",
                     "prange"), "svod.frontend.pylang"),
    **dict.fromkeys(("AxisKind", "Ops", "UOp"), "svod.ir"),
    **dict.fromkeys(("ExecutionPlan", "load_plan"), "svod.runtime"),
}
"""The module each lazily imported public name comes from."""
_CAST_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
               "float32", "float64")
"""In a kernel, ``svod.float32(x)`` converts; in annotations, ``svod.float32`` names the dtype."""


def _install_registry(device: Any) -> Any:
    """The device resolver's first lookup: install the backend registry (which replaces this lookup), then
    open ``device``."""
    from svod.backends import default_registry

    return default_registry().get(device)


def _register_kinds() -> None:
    """A device name's first parse before any device was opened (a renderer built first): install the backend
    registry, which registers every device kind."""
    from svod.backends import default_registry

    default_registry()


def __getattr__(name: str) -> Any:
    if name in ("distributed", "random", "torch"):
        value: Any = importlib.import_module(f"svod.{name}")
    elif name in _CAST_NAMES:
        value = importlib.import_module("svod.frontend.pylang").CASTS[name]
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module 'svod' has no attribute {name!r}")
    globals()[name] = value
    return value


resolver.install(_install_registry)
DeviceSpec.install_discovery(_register_kinds)

__version__ = VERSION
__all__ = ["Array", "AxisKind", "Buffer", "BundleWarning", "Const", "DType", "DeviceSpec", "ExecutionPlan",
           "Int", "KernelBuilder", "Ops", "Tape", "UOp", "atomic_add", "atomic_max", "atomic_min", "available_devices",
           "bool", "check", "compile", "compiler_pair", "distributed", "dtypes", "errors", "float16", "float32",
           "float64", "func", "get_device", "grad", "inf", "jit", "int8", "int16", "int32", "int64", "kernel",
           "load_plan", "math", "nan", "prange", "random", "run", "uint8", "uint16", "uint32", "uint64", "vjp"]
