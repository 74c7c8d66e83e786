"""svod: a kernel runtime. UOp graphs in, compiled kernels out, run on CPU threads and GPUs."""

from svod import distributed, errors, random
from svod.backends import default_registry
from svod.config import VERSION
from svod.device import Buffer
from svod.dtype import DeviceSpec, DType, dtypes
from svod.errors import BundleWarning
from svod.frontend import KernelBuilder, available_devices, check, compile, compiler_pair, get_device, kernel, run
from svod.frontend.jit import jit
from svod.frontend.pylang import CASTS as _CASTS
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
from svod.ir import AxisKind, Ops, UOp
from svod.runtime import ExecutionPlan, load_plan

default_registry()  # device names resolve from here on (svod.Buffer("CPU", ...))

bool, int8, int16, int32, int64 = (_CASTS[n] for n in ("bool", "int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (_CASTS[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float16, float32, float64 = (_CASTS[n] for n in ("float16", "float32", "float64"))
"""In a kernel, ``svod.float32(x)`` converts; in annotations, ``svod.float32`` names the dtype."""

__version__ = VERSION
__all__ = ["Array", "AxisKind", "Buffer", "BundleWarning", "Const", "DType", "DeviceSpec", "ExecutionPlan",
           "Int", "KernelBuilder", "Ops", "UOp", "atomic_add", "atomic_max", "atomic_min", "available_devices", "bool",
           "check", "compile", "compiler_pair", "distributed", "dtypes", "errors", "float16", "float32", "float64",
           "func", "get_device", "inf", "jit", "int8", "int16", "int32", "int64", "kernel", "load_plan", "math", "nan",
           "prange", "random", "run", "uint8", "uint16", "uint32", "uint64"]
