"""The CPU backend: the CPU device assembled from its compiler pairs (LLVM in process, or C through clang or
gcc) and the CPU runtime (``svod.backends.cpu_runtime``) that loads and runs what they compile."""

from __future__ import annotations

from typing import Protocol

from svod.backends.base import Host, Opened, Pair
from svod.backends.clang import ClangCompiler
from svod.backends.cpu_host import host_l2_bytes, host_vector_registers
from svod.backends.cpu_team import thread_team
from svod.backends.llvm import LLVMCompiler
from svod.codegen.render.base import KernelRenderer
from svod.device import Compiler, DeviceCaps, RuntimeFactory
from svod.dtype import DeviceSpec


class HostCompiler(Compiler, Protocol):
    """A CPU compiler: it also says how its code is rendered and loaded, and whether it computes float16."""

    @property
    def native_float16(self) -> bool: ...
    @property
    def vector_lanes(self) -> bool: ...

    def renderer(self, caps: DeviceCaps) -> KernelRenderer: ...
    def loader(self) -> RuntimeFactory: ...


def _compiler(name: str, host: Host) -> HostCompiler:
    if name == "llvm":
        return host.once("llvm", LLVMCompiler)
    return host.once("c", ClangCompiler)


def _caps(compiler: HostCompiler, host: Host) -> DeviceCaps:
    return DeviceCaps(host_memory=True, overlaps_on_host=True, threads=host.settings.threads,
                      vector_registers=host_vector_registers(), l2_bytes=host_l2_bytes(),
                      native_float16=compiler.native_float16, vector_lanes=compiler.vector_lanes)


def compiler_pair(spec: DeviceSpec, compiler: str, host: Host) -> Pair:
    built = _compiler(compiler, host)
    return built.renderer(_caps(built, host)), built


def open_device(spec: DeviceSpec, primary: str, host: Host) -> Opened:
    """The CPU loads what its primary pair compiles: LLVM objects into the JIT, or C shared objects with the
    dynamic loader."""
    team = thread_team()
    team.grow(host.settings.threads - 1)
    threads = f"{host.settings.threads} threads" if team.parallel else f"1 thread ({team.error})"
    compiler = _compiler(primary, host)
    return Opened(_caps(compiler, host), host.allocator, compiler.loader(), f"host, {threads}")


def device_count() -> int:
    return 1
