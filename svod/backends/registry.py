"""The device registry: the one place that knows every backend, builds ``Device``s, and says why a device
is not available here.

Each base device type is a ``Backend``: its compiler pairs by name (primary first), and how to get the
allocator and the runtime factory of one device of that type. A registry is an object with its own
settings; ``default_registry()`` is the process's, and tests build fresh ones.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from svod.backends.clang import ClangCompiler, load_shared_object
from svod.backends.cpu import CpuProgram, thread_team
from svod.backends.cuda import CUDADevice, NVRTCCompiler
from svod.backends.llvm import LLVMCompiler, LLVMRuntime
from svod.backends.opencl import OpenCLDevice
from svod.backends.python import PythonCompiler, PythonProgram, PythonRenderer
from svod.codegen.render.cuda import CUDARenderer
from svod.config import Settings, settings
from svod.device import (
    Allocator,
    CompiledSpec,
    Compiler,
    Device,
    HostAllocator,
    Renderer,
    ReusePool,
    RuntimeFactory,
    resolver,
)
from svod.dtype import DeviceSpec
from svod.errors import DeviceError, SvodError

Pair = tuple[Renderer, Compiler]

_ELF_SHARED_OBJECT = 3


@dataclass(frozen=True, slots=True)
class Backend:
    pairs: dict[str, Callable[[DeviceSpec], Pair]]
    allocator: Callable[[DeviceSpec], Allocator]
    runtime: Callable[[DeviceSpec], RuntimeFactory]
    describe: Callable[[DeviceSpec], str]
    synchronize: Callable[[DeviceSpec], Callable[[], None] | None] = lambda spec: None


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """What ``svod devices`` shows for one device kind."""

    name: str
    compilers: tuple[str, ...]
    available: bool
    detail: str


class DeviceRegistry:
    def __init__(self, config: Settings = settings) -> None:
        self.settings = config
        self.host_allocator: Allocator = ReusePool(HostAllocator())
        self._devices: dict[tuple[str, str | None], Device] = {}
        self._opencl: dict[DeviceSpec, OpenCLDevice] = {}
        self._cuda_devices: dict[DeviceSpec, CUDADevice] = {}
        self._lock = threading.RLock()
        self.backends: dict[str, Backend] = {
            "CPU": Backend({"llvm": lambda spec: self._llvm_pair(), "clang": lambda spec: self._clang_pair()},
                           lambda spec: self.host_allocator, lambda spec: load_cpu_program, self._describe_cpu),
            "PYTHON": Backend({"python": lambda spec: (PythonRenderer(), PythonCompiler())},
                              lambda spec: self.host_allocator, lambda spec: PythonProgram,
                              lambda spec: "reference interpreter"),
            "CUDA": Backend({"nvrtc": self._cuda_pair}, lambda spec: ReusePool(self._cuda(spec).allocator),
                            lambda spec: self._cuda(spec).load, lambda spec: self._cuda(spec).name),
            "CL": Backend({"opencl": lambda spec: (self._cl(spec).renderer, self._cl(spec).compiler)},
                          lambda spec: ReusePool(self._cl(spec).allocator), lambda spec: self._cl(spec).load,
                          lambda spec: self._cl(spec).description, lambda spec: self._cl(spec).queue.finish),
        }

    # ---- lookups -----------------------------------------------------------------------------------------

    def backend(self, spec: DeviceSpec) -> Backend:
        found = self.backends.get(spec.base_type)
        if found is None:
            raise DeviceError(f"svod has no backend for {spec.base_type} yet", value=str(spec))
        return found

    def compiler_names(self, name: str | DeviceSpec) -> list[str]:
        """The compiler pairs of a device kind, primary first."""
        spec = DeviceSpec.parse(name)
        names = list(self.backend(spec).pairs)
        if spec.base_type == "CPU" and self.settings.cpu_compiler in names:
            names.remove(self.settings.cpu_compiler)
            names.insert(0, self.settings.cpu_compiler)
        return names

    def compiler_pair(self, name: str | DeviceSpec, compiler: str | None = None) -> Pair:
        """A (renderer, compiler) pair for ahead-of-time use; where the compiler needs no device, none
        needs to be present."""
        spec = DeviceSpec.parse(name)
        names = self.compiler_names(spec)
        chosen = names[0] if compiler is None else compiler.lower()
        if chosen not in names:
            raise DeviceError(f"{spec} has no compiler {compiler!r}; it has {', '.join(names)}", value=compiler)
        with self._lock:
            return self.backend(spec).pairs[chosen](spec)

    def get(self, name: str | DeviceSpec | Device, compiler: str | None = None) -> Device:
        """The device called ``name`` (with ``compiler`` as its primary pair), built once and reused."""
        if isinstance(name, Device):
            return name
        spec = DeviceSpec.parse(name)
        key = (str(spec), None if compiler is None else compiler.lower())
        with self._lock:
            device = self._devices.get(key)
            if device is None:
                device = self._build(spec, key[1])
                self._devices[key] = device
            return device

    def available(self) -> list[str]:
        return [s.name for s in self.status() if s.available]

    def status(self) -> list[DeviceStatus]:
        """Every device kind svod knows, whether it works here, and if not, why."""
        out = []
        for base in DeviceSpec.KNOWN:
            spec = DeviceSpec.parse(base)
            pairs = tuple(self.compiler_names(spec)) if base in self.backends else ()
            try:
                self.get(spec)
                out.append(DeviceStatus(str(spec), pairs, True, self.backend(spec).describe(spec)))
            except SvodError as err:
                out.append(DeviceStatus(str(spec), pairs, False, err.detail))
        return out

    # ---- building ----------------------------------------------------------------------------------------

    def _build(self, spec: DeviceSpec, compiler: str | None) -> Device:
        backend = self.backend(spec)
        names = self.compiler_names(spec)
        primary = names[0] if compiler is None else compiler
        pairs = [self.compiler_pair(spec, primary)]
        for other in names:
            if other != primary:
                try:
                    pairs.append(self.compiler_pair(spec, other))
                except DeviceError:
                    continue
        return Device(spec, backend.allocator(spec), *pairs[0], backend.runtime(spec), alternatives=pairs[1:],
                      synchronize=backend.synchronize(spec))

    @functools.cached_property
    def _llvm_compiler(self) -> LLVMCompiler:
        return LLVMCompiler()

    @functools.cached_property
    def _c_compiler(self) -> ClangCompiler:
        return ClangCompiler()

    def _llvm_pair(self) -> Pair:
        return self._llvm_compiler.renderer(self.settings.threads), self._llvm_compiler

    def _clang_pair(self) -> Pair:
        return self._c_compiler.renderer(self.settings.threads), self._c_compiler

    def _cl(self, spec: DeviceSpec) -> OpenCLDevice:
        with self._lock:
            if spec not in self._opencl:
                self._opencl[spec] = OpenCLDevice(spec)
            return self._opencl[spec]

    def _cuda(self, spec: DeviceSpec) -> CUDADevice:
        with self._lock:
            if spec not in self._cuda_devices:
                self._cuda_devices[spec] = CUDADevice(spec)
            return self._cuda_devices[spec]

    def _cuda_pair(self, spec: DeviceSpec) -> Pair:
        """The device's own architecture when a GPU is present; ``SVOD_CUDA_ARCH`` (sm_90) ahead of time."""
        try:
            device = self._cuda(spec)
        except DeviceError:
            return CUDARenderer(spec), NVRTCCompiler(self.settings.cuda_arch)
        return device.renderer, device.compiler

    def _describe_cpu(self, spec: DeviceSpec) -> str:
        team = thread_team()
        threads = f"{self.settings.threads} threads" if team.parallel else f"1 thread ({team.error})"
        return f"host, {threads}"


@functools.cache
def _llvm_runtime() -> LLVMRuntime:
    return LLVMRuntime()


def load_cpu_program(compiled: CompiledSpec) -> CpuProgram:
    """CPU code comes as an LLVM object or a C shared object; the ELF header says which."""
    data = compiled.bytes or b""
    if data[:4] == b"\x7fELF" and int.from_bytes(data[16:18], "little") == _ELF_SHARED_OBJECT:
        return load_shared_object(compiled)
    return _llvm_runtime()(compiled)


@functools.cache
def default_registry() -> DeviceRegistry:
    registry = DeviceRegistry()
    resolver.install(registry.get)
    return registry
