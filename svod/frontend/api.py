"""The convenience calls of ``import svod``: devices by name, compile through the cache, run once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from svod.backends.registry import default_registry
from svod.device import Buffer, Compiler, Device, Renderer, dlpack
from svod.device.allocator import serves_host_memory
from svod.errors import BufferMismatchError, IndexOutOfBoundsError, SvodError
from svod.ir import UOp
from svod.runtime.cache import default_cache
from svod.runtime.kernel import CachedKernel
from svod.runtime.taping import refuse_on_tape

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

    On a host-memory device (CPU, PYTHON) the kernel works on the numpy arrays themselves, without a
    copy; an array that is not C-contiguous and aligned, or that a written argument overlaps, goes
    through a copy, which is written back in place afterwards. Elsewhere every array is copied in and
    the written ones copied back.
    """
    run_compiled(compile(ast, device), buffers, var_vals)


def run_compiled(kernel: CachedKernel, buffers: Sequence[Buffer | np.ndarray], var_vals: dict[str, Any]) -> None:
    """``run`` of a kernel compiled already."""
    refuse_on_tape("kernel {!r} (svod.run)", kernel.name)
    try:
        _run(kernel, [_device_array(b) for b in buffers], var_vals)
    except SvodError as err:
        err.name_kernel(kernel.name)  # an allocation or a launch size fails below the kernel, unnamed
        raise


def _device_array(array: Any) -> Any:
    """A DLPack producer in a device's memory (a torch or cupy CUDA tensor) as a Buffer sharing it; anything
    else as it is."""
    if type(array) is np.ndarray:
        return array
    return Buffer.from_dlpack(array) if not isinstance(array, Buffer) and dlpack.in_device_memory(array) else array


def _run(kernel: CachedKernel, buffers: Sequence[Buffer | np.ndarray], var_vals: dict[str, int]) -> None:
    target = kernel.device
    if target.caps.host_memory and kernel.run_on_arrays(buffers, var_vals):
        return
    _check_arguments(kernel, buffers)
    written = [argument.written for argument in kernel.layout]
    for position, array in enumerate(buffers):
        if isinstance(array, np.ndarray) and not array.flags.writeable and written[position]:
            raise BufferMismatchError(f"argument {position} is a read-only array, and the kernel writes it",
                                      kernel=kernel.name, stage="bind", buffers=(position,))
    in_place = [target.caps.host_memory and serves_host_memory(target.allocator)
                and _shares_freely(buffers, position, written) for position in range(len(buffers))]
    wrapped = [b if isinstance(b, Buffer) else Buffer.from_numpy(b, target, copy=not in_place[position])
               for position, b in enumerate(buffers)]
    try:
        kernel(wrapped, var_vals)
    except IndexOutOfBoundsError:
        _copy_back(kernel, buffers, wrapped, in_place)  # the kernel ran, with the bad access skipped
        raise
    _copy_back(kernel, buffers, wrapped, in_place)


def _copy_back(kernel: CachedKernel, arrays: Sequence[Buffer | np.ndarray], wrapped: Sequence[Buffer],
               in_place: Sequence[bool]) -> None:
    for position, original in enumerate(arrays):
        if isinstance(original, np.ndarray) and not in_place[position] and kernel.layout[position].written:
            np.copyto(original, wrapped[position].numpy().reshape(original.shape))


def _shares_freely(arrays: Sequence[Buffer | np.ndarray], position: int, written: Sequence[bool]) -> bool:
    """Whether argument ``position`` may be used in place: a numpy array that no other argument overlaps
    where one of the two is written (a kernel reads its inputs as they were, as with copies)."""
    array = arrays[position]
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous \
            or array.ctypes.data % max(array.dtype.itemsize, 1):
        return False
    return not any(other is not array and (written[position] or written[k]) and isinstance(other, np.ndarray)
                   and np.may_share_memory(array, other) for k, other in enumerate(arrays) if k != position) \
        and not (written[position] and sum(other is array for other in arrays) > 1)


def _check_arguments(kernel: CachedKernel, arguments: Sequence[object]) -> None:
    """As many arguments as the kernel takes, each a Buffer or a numpy array of its argument's dtype: checked
    before any array is wrapped or copied, so what is wrong is told in the kernel's terms (a Buffer's dtype,
    device and size are checked with the buffer, in ``CachedKernel.check_buffers``)."""
    if len(arguments) != len(kernel.layout):
        raise BufferMismatchError(f"kernel takes {len(kernel.layout)} buffers, got {len(arguments)}",
                                  kernel=kernel.name, stage="bind", value=len(arguments))
    for position, (argument, layout) in enumerate(zip(arguments, kernel.layout, strict=True)):
        if isinstance(argument, np.ndarray):
            if argument.dtype != layout.numpy_dtype:
                raise BufferMismatchError(f"argument {position} is a numpy array of {argument.dtype}, the kernel "
                                          f"needs {layout.dtype.name}", kernel=kernel.name, stage="bind",
                                          value=str(argument.dtype), buffers=(position,))
        elif not isinstance(argument, Buffer):
            raise BufferMismatchError(f"argument {position} must be a svod.Buffer or a numpy array",
                                      kernel=kernel.name, stage="bind", value=type(argument).__name__,
                                      buffers=(position,))
