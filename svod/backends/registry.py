"""The device registry: the one place that knows every backend, builds ``Device``s, and says why a device
is not available here.

Each device kind is a ``Backend``: whether it is numbered (``CL:0``), its compiler pairs by name (primary
first), and how to open one device of that kind (its capabilities, allocator, runtime factory). Backend
modules are imported when a device of their kind is first used, so ``import svod`` does not load
llvmlite, pyopencl or cuda-bindings; a device's alternative compiler pairs are built only when asked for.
A registry is an object with its own settings; ``default_registry()`` is the process's, and tests build
fresh ones.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from svod.config import Settings, settings
from svod.device import (
    Allocator,
    Compiler,
    Device,
    DeviceCaps,
    HostAllocator,
    Renderer,
    ReusePool,
    RuntimeFactory,
    resolver,
)
from svod.dtype import DeviceSpec
from svod.errors import DeviceError, SvodError

Pair = tuple[Renderer, Compiler]


@dataclass(frozen=True, slots=True)
class Opened:
    """What a backend provides for one device, besides its compiler pairs."""

    caps: DeviceCaps
    allocator: Allocator
    runtime: RuntimeFactory
    description: str
    synchronize: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class Backend:
    numbered: bool
    """Whether the kind has numbered devices (``CL:0``, ``CL:1``) or one (``CPU``)."""
    pairs: dict[str, Callable[[DeviceSpec], Pair]]
    """Compiler pairs by name; the first is the default primary."""
    open: Callable[[DeviceSpec, str], Opened]
    """Opens one device, given the name of its primary pair; raises ``DeviceError`` if it is not here."""
    count: Callable[[], int] | None = None
    """How many devices of the kind are here, where svod lists each of them (``svod devices``); without it,
    device 0 stands for the kind."""


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
        self._opened: dict[DeviceSpec, Any] = {}
        self._compilers: dict[str, Any] = {}
        self._lock = threading.RLock()
        self.backends: dict[str, Backend] = {
            "CPU": Backend(False, {"llvm": self._llvm_pair, "clang": self._c_pair}, self._open_cpu),
            "PYTHON": Backend(False, {"python": self._python_pair}, self._open_python),
            "CL": Backend(True, {"opencl": self._opencl_pair}, self._open_opencl),
            "CUDA": Backend(True, {"nvrtc": self._cuda_pair}, self._open_cuda),
            "WEBGPU": Backend(True, {"wgsl": self._webgpu_pair}, self._open_webgpu, self._count_webgpu),
        }
        for kind, backend in self.backends.items():
            DeviceSpec.register_kind(kind, backend.numbered)

    # ---- lookups -----------------------------------------------------------------------------------------

    def backend(self, spec: DeviceSpec) -> Backend:
        found = self.backends.get(spec.base_type)
        if found is None:
            raise DeviceError(f"svod has no backend for {spec.base_type}", stage="device", value=str(spec))
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
            raise DeviceError(f"{spec} has no compiler {compiler!r}; it has {', '.join(names)}",
                              stage="device", value=compiler)
        with self._lock:
            return self.backend(spec).pairs[chosen](spec)

    def get(self, name: str | DeviceSpec | Device, compiler: str | None = None) -> Device:
        """The device called ``name`` (with ``compiler`` as its primary pair), built once and reused."""
        if isinstance(name, Device):
            return name
        if compiler is None and (known := self._devices.get((name, None))) is not None:  # type: ignore[arg-type]
            return known  # a canonical name seen before: no parsing on the call path
        spec = DeviceSpec.parse(name)
        key = (str(spec), None if compiler is None else compiler.lower())
        device = self._devices.get(key)  # the common case: no lock
        if device is None:
            with self._lock:
                device = self._devices.get(key)
                if device is None:
                    device = self._devices[key] = self._build(spec, key[1])
        return device

    def available(self) -> list[str]:
        return [s.name for s in self.status() if s.available]

    def names(self, kind: str) -> list[str]:
        """The devices of ``kind`` svod lists: the kind's first device, and each further one where its
        backend counts them (every WebGPU adapter, such as wgpu's OpenGL one beside its Vulkan one)."""
        spec = DeviceSpec.parse(kind)
        count = self.backend(spec).count
        found = 1 if count is None else max(1, count())
        return [str(spec)] + [f"{spec.base_type}:{n}" for n in range(1, found)]

    def status(self) -> list[DeviceStatus]:
        """Every device svod lists (``names``), whether it works here, and if not, why."""
        out = []
        for kind in self.backends:
            for name in self.names(kind):
                spec = DeviceSpec.parse(name)
                pairs = tuple(self.compiler_names(spec))
                try:
                    out.append(DeviceStatus(str(spec), pairs, True, self.get(spec).description))
                except SvodError as err:
                    out.append(DeviceStatus(str(spec), pairs, False, err.detail))
        return out

    # ---- building ----------------------------------------------------------------------------------------

    def _build(self, spec: DeviceSpec, compiler: str | None) -> Device:
        backend = self.backend(spec)
        names = self.compiler_names(spec)
        primary = names[0] if compiler is None else compiler
        if primary not in names:
            raise DeviceError(f"{spec} has no compiler {compiler!r}; it has {', '.join(names)}",
                              stage="device", value=compiler)
        opened = backend.open(spec, primary)
        renderer, compiler_ = self.compiler_pair(spec, primary)
        alternatives = [functools.partial(self.compiler_pair, spec, other) for other in names if other != primary]
        return Device(spec, opened.allocator, renderer, compiler_, opened.runtime, caps=opened.caps,
                      alternatives=alternatives, synchronize=opened.synchronize, description=opened.description)

    def _compiler(self, name: str, build: Callable[[], Any]) -> Any:
        """One compiler object per kind of compiler, built on first use."""
        with self._lock:
            if name not in self._compilers:
                self._compilers[name] = build()
            return self._compilers[name]

    # ---- CPU (imports llvmlite, or runs the C compiler, only when a pair is used) ---------------------------

    def _cpu_caps(self, native_float16: bool = True) -> DeviceCaps:
        from svod.backends.cpu import host_vector_registers
        return DeviceCaps(host_memory=True, overlaps_on_host=True, threads=self.settings.threads,
                          vector_registers=host_vector_registers(), native_float16=native_float16)

    def _llvm_pair(self, spec: DeviceSpec) -> Pair:
        from svod.backends.llvm import LLVMCompiler  # backends load on first use: import svod stays light
        compiler = self._compiler("llvm", LLVMCompiler)
        return compiler.renderer(self._cpu_caps()), compiler

    def _c_pair(self, spec: DeviceSpec) -> Pair:
        from svod.backends.clang import ClangCompiler
        compiler = self._compiler("c", ClangCompiler)
        return compiler.renderer(self._cpu_caps(compiler.native_float16)), compiler

    def _open_cpu(self, spec: DeviceSpec, primary: str) -> Opened:
        """A CPU device loads what its primary pair compiles: LLVM objects into the JIT, or C shared objects
        with the dynamic loader."""
        from svod.backends.cpu import thread_team
        team = thread_team()
        threads = f"{self.settings.threads} threads" if team.parallel else f"1 thread ({team.error})"
        renderer, compiler = self.compiler_pair(spec, primary)
        return Opened(renderer.caps, self.host_allocator, compiler.loader(), f"host, {threads}")  # type: ignore[attr-defined]

    # ---- the reference ------------------------------------------------------------------------------------

    def _python_pair(self, spec: DeviceSpec) -> Pair:
        from svod.backends.python import PythonCompiler, PythonRenderer
        return PythonRenderer(), PythonCompiler()

    def _open_python(self, spec: DeviceSpec, primary: str) -> Opened:
        from svod.backends.python import PythonProgram
        caps = DeviceCaps(host_memory=True, overlaps_on_host=False)
        return Opened(caps, self.host_allocator, PythonProgram, "reference interpreter of kernel ASTs")

    def _open_once(self, spec: DeviceSpec, opener: Callable[[DeviceSpec], Any]) -> Any:
        """The backend's device object for ``spec``, opened once and shared by its pairs and its Device."""
        with self._lock:
            if spec not in self._opened:
                self._opened[spec] = opener(spec)
            return self._opened[spec]

    # ---- OpenCL ---------------------------------------------------------------------------------------------

    def _opencl(self, spec: DeviceSpec) -> Any:
        from svod.backends.opencl import OpenCLDevice
        return self._open_once(spec, OpenCLDevice)

    def _opencl_pair(self, spec: DeviceSpec) -> Pair:
        device = self._opencl(spec)
        return device.renderer, device.compiler

    def _open_opencl(self, spec: DeviceSpec, primary: str) -> Opened:
        device = self._opencl(spec)
        return Opened(device.caps, ReusePool(device.allocator), device.load, device.description, device.queue.finish)

    # ---- CUDA -----------------------------------------------------------------------------------------------

    def _cuda(self, spec: DeviceSpec) -> Any:
        from svod.backends.cuda import CUDADevice
        return self._open_once(spec, CUDADevice)

    def _cuda_pair(self, spec: DeviceSpec) -> Pair:
        """The device's own architecture when a GPU is present; ``SVOD_CUDA_ARCH`` (sm_90) ahead of time."""
        from svod.backends.cuda import NVRTCCompiler
        from svod.codegen.render.cuda import CUDARenderer
        try:
            device = self._cuda(spec)
        except DeviceError:
            return CUDARenderer(spec), self._compiler(f"nvrtc-{self.settings.cuda_arch}",
                                                      lambda: NVRTCCompiler(self.settings.cuda_arch))
        return device.renderer, device.compiler

    def _open_cuda(self, spec: DeviceSpec, primary: str) -> Opened:
        device = self._cuda(spec)
        return Opened(device.caps, ReusePool(device.allocator), device.load, device.name)

    # ---- WebGPU ---------------------------------------------------------------------------------------------

    def _webgpu(self, spec: DeviceSpec) -> Any:
        from svod.backends.webgpu import WebGPUDevice
        return self._open_once(spec, WebGPUDevice)

    def _count_webgpu(self) -> int:
        from svod.backends.webgpu import adapter_count
        return adapter_count()

    def _webgpu_pair(self, spec: DeviceSpec) -> Pair:
        device = self._webgpu(spec)
        return device.renderer, device.compiler

    def _open_webgpu(self, spec: DeviceSpec, primary: str) -> Opened:
        device = self._webgpu(spec)
        return Opened(device.caps, ReusePool(device.allocator), device.load, device.description, device.synchronize)


@functools.cache
def default_registry() -> DeviceRegistry:
    registry = DeviceRegistry()
    resolver.install(registry.get)
    return registry
