"""What users touch first: the kernel builder and the convenience calls."""

from svod.frontend.api import available_devices, compile, compiler_pair, get_device, run
from svod.frontend.builder import KernelBuilder
from svod.frontend.check import CheckReport, check

__all__ = ["CheckReport", "KernelBuilder", "available_devices", "check", "compile", "compiler_pair", "get_device",
           "run"]
