"""The OpenCL device ``CL:N`` on pyopencl (extra ``opencl``): OpenCL C built by the driver, program
binaries kept in the disk cache, kernels launched on an in-order queue.

``N`` counts the devices of every platform in platform order. Each device has one context and one
queue; a direct launch and every copy are synchronous from the caller's point of view, while a plan's
bound launch (``OpenCLLaunch``) only enqueues, and the plan finishes the queue at its end.
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from svod.backends.base import Host, Opened, Pair
from svod.codegen.render.opencl import OpenCLRenderer
from svod.device import (
    Allocator,
    CompiledSpec,
    CompilerBase,
    DeviceCaps,
    ProgramBase,
    ProgramSpec,
    ReusePool,
    WorkGroupLimits,
)
from svod.device.caps import KDL_OPENCL
from svod.dtype import DeviceSpec
from svod.errors import CompileError, DeviceError, SvodError

try:
    import pyopencl as cl
except ImportError:  # the extra is optional; the device reports why it is missing
    cl = None

BUILD_OPTIONS = "-cl-fp32-correctly-rounded-divide-sqrt -w"

_BUILDING = threading.Lock()
"""Held while a program is built and its binary read: PoCL generates the binary's code when it is asked for it,
and two threads doing that at once crashed the process (a segfault in ``clGetProgramInfo``). A plan's kernels
then build one after another, as they would on one core."""
"""IEEE 754's division and square root; no warnings, which a driver's compiler (PoCL's clang) prints to the
process's stderr itself: what the kernel says (``x <= x``) is svod's to check, and svod's output stays clean."""


def _devices() -> list[Any]:
    if cl is None:
        raise DeviceError("pyopencl is not installed (pip install 'svod[opencl]')", stage="device")
    try:
        platforms = cl.get_platforms()
    except cl.Error as err:
        raise DeviceError(f"no OpenCL platform (install an ICD such as pocl-opencl-icd): {err}",
                          stage="device") from err
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        raise DeviceError("the OpenCL platforms have no devices", stage="device")
    return devices


class OpenCLDevice:
    """Context, queue and limits of one OpenCL device, and the pieces svod builds on them."""

    def __init__(self, spec: DeviceSpec) -> None:
        devices = _devices()
        if spec.device_id >= len(devices):
            raise DeviceError(f"{spec} does not exist: this machine has {len(devices)} OpenCL device(s)",
                              stage="device", value=str(spec))
        self.spec = spec
        self.device = devices[spec.device_id]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)
        d = self.device
        self.caps = DeviceCaps(host_memory=False, overlaps_on_host=False,
                               work_groups=WorkGroupLimits(d.max_work_group_size, tuple(d.max_work_item_sizes[:3])),
                               local_memory=int(d.local_mem_size),
                               dedicated_local_memory=d.local_mem_type == cl.device_local_mem_type.LOCAL,
                               native_float16="cl_khr_fp16" in d.extensions, dlpack_device_type=KDL_OPENCL,
                               vector_lanes=True)
        self.allocator = OpenCLAllocator(self)
        self.compiler = OpenCLCompiler(self)
        self.renderer = OpenCLRenderer(spec, self.caps)

    @property
    def description(self) -> str:
        return f"{self.device.name.strip()} ({self.device.platform.name.strip()} {self.device.driver_version})"

    def load(self, compiled: CompiledSpec) -> OpenCLProgram:
        return OpenCLProgram(self, compiled)


class OpenCLAllocator(Allocator):
    """``cl.Buffer``s; a kernel receives a (buffer, byte offset) pair, so views need no sub-buffers."""

    def __init__(self, device: OpenCLDevice) -> None:
        self.device = device

    def _alloc(self, nbytes: int) -> Any:
        try:
            return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))
        except cl.Error as err:
            raise MemoryError(str(err)) from err

    def _free(self, handle: Any, nbytes: int) -> None:
        handle.release()

    def _copyin(self, handle: Any, src: memoryview, offset: int) -> None:
        if len(src):
            cl.enqueue_copy(self.device.queue, handle, np.frombuffer(src, np.uint8), dst_offset=offset)

    def _copyout(self, dst: memoryview, handle: Any, offset: int) -> None:
        if len(dst):
            cl.enqueue_copy(self.device.queue, np.frombuffer(dst, np.uint8), handle, src_offset=offset)

    def _address(self, handle: Any, offset: int) -> tuple[Any, int]:
        return (handle, offset)


class OpenCLCompiler(CompilerBase):
    def __init__(self, device: OpenCLDevice) -> None:
        self.device = device
        d = device.device
        identity = f"{d.platform.name}|{d.platform.version}|{d.name}|{d.driver_version}|{BUILD_OPTIONS}"
        self.cache_key = f"opencl-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        with _BUILDING:
            program = cl.Program(self.device.context, spec.src)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", cl.CompilerWarning)  # a driver's warnings about user kernels
                    program.build(options=BUILD_OPTIONS, devices=[self.device.device])
            except cl.Error as err:
                log = program.get_build_info(self.device.device, cl.program_build_info.LOG)
                raise CompileError(f"the OpenCL build failed: {str(err).splitlines()[0]}", source=spec.src,
                                   log=log, kernel=spec.name) from err
            binary = program.binaries[0]
        return CompiledSpec.from_spec(spec, data=binary)


class OpenCLProgram(ProgramBase):
    """A built kernel. Setting arguments and enqueueing happen under a lock, so threads may share it."""

    def __init__(self, device: OpenCLDevice, compiled: CompiledSpec) -> None:
        if not compiled.bytes:
            raise SvodError("an OpenCL kernel loads from a program binary, and this one has none",
                            kernel=compiled.name, stage="load")
        self.name = compiled.name
        self.device = device
        try:
            with _BUILDING, warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                program = cl.Program(device.context, [device.device], [compiled.bytes]).build()
            self.kernel = cl.Kernel(program, compiled.entry)
        except cl.Error as err:
            raise SvodError(f"cannot load the OpenCL binary: {err}", kernel=compiled.name, stage="load") from err
        self._lock = threading.Lock()

    def bind(self, buffers: Sequence[Any]) -> OpenCLLaunch:
        return OpenCLLaunch(self, buffers)

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        groups = global_size or (1, 1, 1)
        items = groups if local_size is None else tuple(g * n for g, n in zip(groups, local_size, strict=True))
        args: list[Any] = []
        for handle, offset in buffers:
            args += [handle, np.int64(offset)]
        args += [np.int64(v) for v in vals]
        with self._lock:
            self.kernel.set_args(*args)
            cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, items, local_size)
            self.device.queue.finish()


class OpenCLLaunch:
    """A kernel object of its own with the buffer arguments set once; a replay sets the variables and
    enqueues without waiting (the plan synchronizes the queue at its end)."""

    def __init__(self, program: OpenCLProgram, buffers: Sequence[Any]) -> None:
        self.program = program
        self.kernel = program.kernel.clone()
        self.first_var = 2 * len(buffers)
        for position, (handle, offset) in enumerate(buffers):
            self.kernel.set_arg(2 * position, handle)
            self.kernel.set_arg(2 * position + 1, np.int64(offset))

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        for position, value in enumerate(vals):
            self.kernel.set_arg(self.first_var + position, np.int64(value))
        items = global_size if local_size is None else tuple(g * n for g, n in zip(global_size, local_size,
                                                                                   strict=True))
        cl.enqueue_nd_range_kernel(self.program.device.queue, self.kernel, items, local_size)


# ---- the backend (svod.backends.base) ---------------------------------------------------------------------

def _device(spec: DeviceSpec, host: Host) -> OpenCLDevice:
    """The OpenCL device ``spec``, opened once and shared by its pair and its Device."""
    return host.once(spec, lambda: OpenCLDevice(spec))


def compiler_pair(spec: DeviceSpec, compiler: str, host: Host) -> Pair:
    device = _device(spec, host)
    return device.renderer, device.compiler


def open_device(spec: DeviceSpec, primary: str, host: Host) -> Opened:
    device = _device(spec, host)
    return Opened(device.caps, ReusePool(device.allocator), device.load, device.description, device.queue.finish)


def device_count() -> int:
    return 1
