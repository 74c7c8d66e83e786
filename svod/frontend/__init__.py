"""What users touch first: Python kernels (``@svod.kernel``), the kernel builder beneath them, the
convenience calls, and ``svod.check`` (every backend against the reference)."""

from svod.frontend.api import available_devices, compile, compiler_pair, get_device, run
from svod.frontend.builder import KernelBuilder
from svod.frontend.check import CheckReport, check
from svod.frontend.pykernel import Kernel, kernel

__all__ = ["CheckReport", "Kernel", "KernelBuilder", "available_devices", "check", "compile", "compiler_pair",
           "get_device", "kernel", "run"]
