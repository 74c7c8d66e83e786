"""svod: a kernel runtime. UOp graphs in, compiled kernels out, run on CPU threads and GPUs."""

from svod import errors
from svod.backends import default_registry
from svod.device import Buffer
from svod.dtype import DeviceSpec, DType, dtypes
from svod.frontend import KernelBuilder, available_devices, check, compile, compiler_pair, get_device, run
from svod.ir import AxisKind, Ops, UOp
from svod.runtime import ExecutionPlan

default_registry()  # device names resolve from here on (svod.Buffer("CPU", ...))

__version__ = "0.1.0"
__all__ = ["AxisKind", "Buffer", "DType", "DeviceSpec", "ExecutionPlan", "KernelBuilder", "Ops", "UOp",
           "available_devices", "check", "compile", "compiler_pair", "dtypes", "errors", "get_device", "run"]
