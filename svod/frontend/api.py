"""The convenience calls of ``import svod``: devices by name, compile through the cache, run once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from svod.backends.registry import default_registry
from svod.device import Buffer, Compiler, Device, Renderer
from svod.errors import BufferMismatchError, IndexOutOfBoundsError
from svod.ir import UOp
from svod.runtime.cache import default_cache
from svod.runtime.kernel import CachedKernel

DeviceLike = str | Device


def get_device(name: DeviceLike, compiler: str | None = None) -> Device:
    """The device called ``name`` (``"CPU"``, ``"CL:0"``), optionally with ``compiler`` as its primary pair."""
    return default_registry().get(name, compiler)


def compiler_pair(name: str, compiler: str | None = None) -> tuple[Renderer, Compiler]:
    """A (renderer, compiler) pair to render and compile ahead of time, with no device present."""
    return default_registry().compiler_pair(name, compiler)


def available_devices() -> list[str]:
    """Canonical names of the devices that work here."""
    return default_registry().available()


def compile(ast: UOp, device: DeviceLike = "CPU") -> CachedKernel:
    """The compiled kernel of ``ast`` on ``device``: the same object for the same kernel and compiler."""
    return default_cache().get(ast, get_device(device))


def run(ast: UOp, buffers: Sequence[Buffer | np.ndarray], device: DeviceLike = "CPU", **var_vals: int) -> None:
    """Compile through the kernel cache and run once.

    Numpy arrays are copied in; every array the kernel writes is copied back in place afterwards.
    """
    kernel = compile(ast, device)
    target = get_device(device)
    for position, array in enumerate(buffers):
        if isinstance(array, np.ndarray) and not array.flags.writeable and position < len(kernel.params) \
                and kernel.params[position].arg in kernel.outs:
            raise BufferMismatchError(f"argument {position} is a read-only array, and the kernel writes it",
                                      kernel=kernel.name, stage="bind", value=position)
    wrapped = [_as_buffer(b, target, position) for position, b in enumerate(buffers)]
    try:
        kernel(wrapped, var_vals)
    except IndexOutOfBoundsError:
        _copy_back(kernel, buffers, wrapped)  # the kernel ran, with the bad access skipped
        raise
    _copy_back(kernel, buffers, wrapped)


def _copy_back(kernel: CachedKernel, arrays: Sequence[Buffer | np.ndarray], wrapped: Sequence[Buffer]) -> None:
    for position, original in enumerate(arrays):
        if isinstance(original, np.ndarray) and position < len(kernel.params) and \
                kernel.params[position].arg in kernel.outs:
            np.copyto(original, wrapped[position].numpy().reshape(original.shape))


def _as_buffer(value: Buffer | np.ndarray, device: Device, position: int) -> Buffer:
    if isinstance(value, Buffer):
        return value
    if isinstance(value, np.ndarray):
        return Buffer.from_numpy(value, device)
    raise BufferMismatchError(f"argument {position} must be a svod.Buffer or a numpy array", stage="bind",
                              value=type(value).__name__)
