"""``Device``: one device's capabilities, allocator, (renderer, compiler) pairs and runtime factory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from svod.device.caps import DeviceCaps
from svod.dtype import DeviceSpec
from svod.errors import DeviceError

if TYPE_CHECKING:  # named in annotations alone: ``import svod`` imports this module, and the protocols import the IR
    from svod.device.allocator import Allocator
    from svod.device.protocols import Compiler, Renderer, RuntimeFactory

Pair = tuple["Renderer", "Compiler"]
"""A compiler pair: the renderer that writes a kernel's source and the compiler that compiles it."""


class Device:
    """A device svod can run on. The first (renderer, compiler) pair is the primary one; the others are
    built when ``compilers`` is first read (an alternative may be costly to set up: a C compiler is run to
    learn its version)."""

    def __init__(self, device: DeviceSpec | str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
                 runtime: RuntimeFactory, *, caps: DeviceCaps | None = None,
                 alternatives: Sequence[Pair | Callable[[], Pair]] = (),
                 synchronize: Callable[[], None] | None = None, description: str = "") -> None:
        self.device = DeviceSpec.parse(device)
        self.caps = caps if caps is not None else DeviceCaps(host_memory=True, overlaps_on_host=False)
        self.allocator = allocator
        self.primary: Pair = (renderer, compiler)
        self._alternatives = list(alternatives)
        self.runtime = runtime
        self._synchronize = synchronize
        self.description = description
        """What the device is, for ``svod devices`` (the OpenCL device and driver, the CPU's threads)."""

    @property
    def compilers(self) -> list[Pair]:
        """Every (renderer, compiler) pair, primary first; alternatives that cannot be built here are left
        out."""
        pairs = [self.primary]
        for alternative in self._alternatives:
            try:
                pairs.append(alternative() if callable(alternative) else alternative)
            except DeviceError:
                continue
        return pairs

    def synchronize(self) -> None:
        """Wait until every launch issued so far has finished (immediate on host devices)."""
        if self._synchronize is not None:
            self._synchronize()

    def __repr__(self) -> str:
        return f"Device({self.device}, compiler={self.compiler.cache_key!r})"

    @property
    def name(self) -> str:
        return str(self.device)

    @property
    def renderer(self) -> Renderer:
        return self.primary[0]

    @property
    def compiler(self) -> Compiler:
        return self.primary[1]

    def base_device_key(self) -> str:
        """The device name without its id: compiled code is shared between ``CUDA:0`` and ``CUDA:1``."""
        return self.device.base_type


DeviceOpener = Callable[[str], Device]


class DeviceResolver:
    """Turns device names into ``Device``s for code below the backend layer (buffers, for one).

    The backend registry installs its lookup here when it is imported; the device layer never imports
    a backend.
    """

    def __init__(self) -> None:
        self._opener: DeviceOpener | None = None

    def install(self, opener: DeviceOpener | None) -> None:
        self._opener = opener

    def resolve(self, device: Device | str) -> Device:
        if isinstance(device, Device):
            return device
        if self._opener is None:
            raise DeviceError("no device registry is installed; import svod first", stage="device", value=device)
        return self._opener(device)


resolver = DeviceResolver()
