"""The shape every backend module has: what the registry asks of it, and what it shares with it.

A backend module (``svod/backends/<name>.py``) provides three functions, the ``BackendModule`` protocol:

- ``compiler_pair(spec, compiler, host)``: a (renderer, compiler) pair by name, for a device or ahead of
  time (where the compiler needs no device, none needs to be present);
- ``open_device(spec, primary, host)``: one device: its capabilities, allocator, runtime factory (loading
  what its ``primary`` pair compiles) and description; ``DeviceError`` if it is not here;
- ``device_count()``: how many devices of its kind ``svod devices`` lists (1: device 0 stands for the kind).

The registry names each module once, with its kind's compiler pairs (primary first) and whether its devices
are numbered, and imports it when a device of the kind is first used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from svod.config import Settings
from svod.device import Allocator, DeviceCaps, HostAllocator, Pair, ReusePool, RuntimeFactory
from svod.dtype import DeviceSpec

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Opened:
    """What a backend provides for one device, besides its compiler pairs."""

    caps: DeviceCaps
    allocator: Allocator
    runtime: RuntimeFactory
    description: str
    synchronize: Callable[[], None] | None = None


class Host:
    """What a registry shares with its backends: its settings, the allocator of host memory, and objects
    built once per registry (an opened device, a compiler), whichever pair or device asks first."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.allocator: Allocator = ReusePool(HostAllocator())
        self._built: dict[object, object] = {}
        self._lock = threading.RLock()

    def once(self, key: object, build: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._built:
                self._built[key] = build()
            return self._built[key]  # type: ignore[return-value]


class BackendModule(Protocol):
    def compiler_pair(self, spec: DeviceSpec, compiler: str, host: Host) -> Pair: ...
    def open_device(self, spec: DeviceSpec, primary: str, host: Host) -> Opened: ...
    def device_count(self) -> int: ...


__all__ = ["BackendModule", "Host", "Opened", "Pair"]
