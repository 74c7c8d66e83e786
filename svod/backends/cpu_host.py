"""What svod reads of the host CPU: its LLVM target machine (for the code the process's JIT loads), its vector
registers and its L2 cache."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from svod.device.caps import ASSUMED_L2_BYTES


@functools.cache
def _initialize_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host_target_machine(opt: int = 3) -> Any:
    """An LLVM target machine for this CPU, with all of its features (AVX2, AVX-512 where present), for code the
    process's JIT loads: the large code model, whose references are 64-bit absolute addresses. The JIT's
    sections of one object come from separate mappings, which in a process that has loaded and unloaded
    thousands of kernels may lie more than 2 GB apart: a small model's 32-bit PC-relative reference (to a
    constant pool) then does not reach, and LLVM's loader aborted the process (``isInt<32>(RealOffset)``)."""
    _initialize_llvm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=opt, reloc="static", codemodel="large")


@functools.cache
def host_vector_registers() -> int:
    """This CPU's SIMD registers: 32 with AVX-512, else 16 (AVX2's count, and what svod assumes of other
    CPUs). Both CPU pairs compile for this CPU (LLVM for its features, C with ``-march=native``)."""
    return 32 if llvm.get_host_cpu_features().get("avx512f", False) else 16


CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
"""Where Linux describes the first core's caches: a directory per cache, each with its level, type and size."""


@functools.cache
def host_l2_bytes() -> int:
    """One core's L2 cache in bytes, as Linux describes it, or ``ASSUMED_L2_BYTES`` where it does not
    (another system, or a virtual machine that hides its caches). Zen 3 has 512 KiB, a quarter of the
    Xeon's: blocks sized for the Xeon would be read from its L3."""
    for cache in sorted(CACHES.glob("index*")):
        try:
            level, kind, size = ((cache / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        digits = size.rstrip("KM")
        if level == "2" and kind in ("Unified", "Data") and digits.isdigit() and int(digits) > 0:
            return int(digits) * scale
    return ASSUMED_L2_BYTES


__all__ = ["CACHES", "host_l2_bytes", "host_target_machine", "host_vector_registers"]
