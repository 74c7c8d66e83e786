"""svod: a kernel runtime. UOp graphs in, compiled kernels out, run on CPU threads and GPUs."""

from svod import errors
from svod.device import Buffer
from svod.dtype import DeviceSpec, DType, dtypes
from svod.ir import AxisKind, Ops, UOp

__all__ = ["AxisKind", "Buffer", "DType", "DeviceSpec", "Ops", "UOp", "dtypes", "errors"]
