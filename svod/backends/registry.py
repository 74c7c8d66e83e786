"""The device registry: the one place that knows every backend, builds ``Device``s, and says why a device
is not available here.

Each device kind is a ``Backend`` line: whether it is numbered (``CL:0``), its compiler pairs by name
(primary first), and its backend module, which opens its devices and builds its pairs (the shape of
``svod.backends.base``). Backend modules are imported when a device of their kind is first used, so
``import svod`` does not load llvmlite, pyopencl or cuda-bindings; a device's alternative compiler pairs
are built only when asked for.
A registry is an object with its own settings; ``default_registry()`` is the process's, and tests build
fresh ones.
"""

from __future__ import annotations

import functools
import importlib
import threading
from dataclasses import dataclass
from typing import cast

from svod.backends.base import BackendModule, Host, Pair
from svod.config import Settings, settings
from svod.device import Device, resolver
from svod.dtype import DeviceSpec
from svod.errors import DeviceError, SvodError


@dataclass(frozen=True, slots=True)
class Backend:
    numbered: bool
    """Whether the kind has numbered devices (``CL:0``, ``CL:1``) or one (``CPU``)."""
    compilers: tuple[str, ...]
    """Its compiler pairs by name; the first is the default primary."""
    module: str
    """The backend module (``svod.backends.base.BackendModule``), imported when a device of the kind is first
    used."""


BACKENDS: dict[str, Backend] = {
    "CPU": Backend(False, ("llvm", "clang"), "svod.backends.cpu"),
    "PYTHON": Backend(False, ("python",), "svod.backends.python"),
    "CL": Backend(True, ("opencl",), "svod.backends.opencl"),
    "CUDA": Backend(True, ("nvrtc",), "svod.backends.cuda"),
    "WEBGPU": Backend(True, ("wgsl",), "svod.backends.webgpu"),
}
"""Every device kind svod has, one line each."""


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
        self.host = Host(config)
        self._devices: dict[tuple[str, str | None], Device] = {}
        self._lock = threading.RLock()
        self.backends = BACKENDS
        for kind, backend in self.backends.items():
            DeviceSpec.register_kind(kind, backend.numbered)

    # ---- lookups -----------------------------------------------------------------------------------------

    def backend(self, spec: DeviceSpec) -> Backend:
        found = self.backends.get(spec.base_type)
        if found is None:
            raise DeviceError(f"svod has no backend for {spec.base_type}", stage="device", value=str(spec))
        return found

    def module(self, spec: DeviceSpec) -> BackendModule:
        return cast(BackendModule, importlib.import_module(self.backend(spec).module))

    def compiler_names(self, name: str | DeviceSpec) -> list[str]:
        """The compiler pairs of a device kind, primary first."""
        spec = DeviceSpec.parse(name)
        names = list(self.backend(spec).compilers)
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
        return self.module(spec).compiler_pair(spec, chosen, self.host)

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
        found = max(1, self.module(spec).device_count()) if self.backend(spec).numbered else 1
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
        names = self.compiler_names(spec)
        primary = names[0] if compiler is None else compiler
        if primary not in names:
            raise DeviceError(f"{spec} has no compiler {compiler!r}; it has {', '.join(names)}",
                              stage="device", value=compiler)
        opened = self.module(spec).open_device(spec, primary, self.host)
        renderer, compiler_ = self.compiler_pair(spec, primary)
        alternatives = [functools.partial(self.compiler_pair, spec, other) for other in names if other != primary]
        return Device(spec, opened.allocator, renderer, compiler_, opened.runtime, caps=opened.caps,
                      alternatives=alternatives, synchronize=opened.synchronize, description=opened.description)


@functools.cache
def default_registry() -> DeviceRegistry:
    registry = DeviceRegistry()
    resolver.install(registry.get)
    return registry
