"""One module per backend, and the registry that builds devices from them."""

from svod.backends.registry import DeviceRegistry, DeviceStatus, default_registry

__all__ = ["DeviceRegistry", "DeviceStatus", "default_registry"]
