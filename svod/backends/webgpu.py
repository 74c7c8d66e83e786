"""The WebGPU device ``WEBGPU:N`` on wgpu-py (extra ``webgpu``): WGSL kernels as compute pipelines, on
whatever adapter wgpu-native finds — a GPU through Vulkan, Metal or D3D12, or Mesa's lavapipe on the CPU.

``N`` counts wgpu's adapters in its order. Each device has one ``GPUDevice`` with the adapter's own limits
(WebGPU's defaults are lower). A kernel's buffers are bound whole, with their view offsets and the
variables in one uniform buffer; every copy out waits for the queue.

What is compiled is the WGSL source, validated: the disk cache keeps it as the program's bytes, and a new
process builds the shader module and pipeline from it again (wgpu-native's pipeline cache is not portable
across drivers).

Thread safety: every call into wgpu-native runs on one thread of its own (``_wgpu_thread``), whichever thread
asks: the kernel cache's compiles, a plan's steps and the caller's copies alike. wgpu's OpenGL adapter makes
its EGL context current on the calling thread; calls from two threads at once aborted the process under load
(``egl.rs: ... BadAccess`` in ``wgpuDevicePoll``, a panic that cannot unwind). The adapters are enumerated once
per process, each enumeration of the OpenGL adapter making and dropping an EGL context of its own, and with a
runtime directory for Mesa's window-system probing where the environment names none (``XDG_RUNTIME_DIR``), which
otherwise prints an error per enumeration.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from svod.backends.base import Host, Opened, Pair
from svod.codegen.render.wgsl import WGSLRenderer
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
from svod.device.caps import KDL_WEBGPU
from svod.device.launch import most
from svod.dtype import DeviceSpec, dtypes
from svod.errors import CompileError, DeviceError, LaunchError

try:
    import wgpu
except ImportError:  # the extra is optional; the device reports why it is missing
    wgpu = None

_LIMITS = ("max-buffer-size", "max-storage-buffer-binding-size", "max-storage-buffers-per-shader-stage",
           "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
           "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z")
"""The adapter limits svod asks its device for (WebGPU gives the spec's lower defaults otherwise)."""


T = TypeVar("T")


class _WgpuThread:
    """The one thread that calls wgpu-native (see the module's notes on thread safety)."""

    def __init__(self) -> None:
        self._ident: int | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="svod-wgpu", initializer=self._own)

    def _own(self) -> None:
        self._ident = threading.get_ident()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the wgpu thread (at once, when called there), its result or its error."""
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        return self._pool.submit(fn, *args, **kwargs).result()


@functools.cache
def _wgpu_thread() -> _WgpuThread:
    return _WgpuThread()


def _on_wgpu_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, made to run on the wgpu thread."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        return _wgpu_thread().run(fn, *args, **kwargs)
    return run


@functools.cache
def _adapters() -> list[Any]:
    """wgpu's adapters, enumerated once per process (on the wgpu thread)."""
    if wgpu is None:
        raise DeviceError("wgpu is not installed (pip install 'svod[webgpu]')", stage="device")
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="svod-runtime-")  # private (0700), as Mesa wants
    adapters = _wgpu_thread().run(wgpu.gpu.enumerate_adapters_sync)
    if not adapters:
        raise DeviceError("wgpu finds no adapter (install a Vulkan driver, such as Debian's mesa-vulkan-drivers)",
                          stage="device")
    return list(adapters)


def adapter_count() -> int:
    """How many adapters wgpu finds here (``WEBGPU:0`` and on); 0 where it finds none or is not installed."""
    try:
        return len(_adapters())
    except DeviceError:
        return 0


_LLVMPIPE_LOOP_TURNS = 65535
"""Mesa's llvmpipe counts the turns of every loop of a shader against this, per batch of work items, and
ends the loops when it runs out (gallivm's loop limiter)."""


def _is_llvmpipe(info: Any) -> bool:
    """Mesa's CPU driver, under Vulkan (lavapipe) or OpenGL: its adapter names itself ``llvmpipe (...)``."""
    return str(info["device"]).startswith("llvmpipe")


def _translates_to_glsl(info: Any) -> bool:
    """wgpu's OpenGL backend (chosen where there is no Vulkan driver, and listed beside one): naga translates
    the WGSL to GLSL, whose integer ``/`` and ``%`` do not keep WGSL's definitions."""
    return str(info["backend_type"]) == "OpenGL"


_NO_SHADER_F16 = "the adapter lacks WebGPU's shader-f16 feature"
"""Why an adapter holds no float16."""


class WebGPUDevice:
    """Adapter, device and limits of one WebGPU adapter, and the pieces svod builds on them."""

    @_on_wgpu_thread
    def __init__(self, spec: DeviceSpec) -> None:
        adapters = _adapters()
        if spec.device_id >= len(adapters):
            raise DeviceError(f"{spec} does not exist: wgpu finds {len(adapters)} adapter(s)",
                              stage="device", value=str(spec))
        self.spec = spec
        self.adapter = adapters[spec.device_id]
        limits = self.adapter.limits
        features = ["shader-f16"] if "shader-f16" in self.adapter.features else []
        self.device = self.adapter.request_device_sync(required_features=features,
                                                       required_limits={k: limits[k] for k in _LIMITS})
        groups = limits["max-compute-workgroups-per-dimension"]
        sizes = (limits["max-compute-workgroup-size-x"], limits["max-compute-workgroup-size-y"],
                 limits["max-compute-workgroup-size-z"])
        held = {dtypes.int32, dtypes.uint32, dtypes.float32} | ({dtypes.float16} if features else set())
        unheld = () if features else ((dtypes.float16, _NO_SHADER_F16),)
        self.caps = DeviceCaps(host_memory=False, overlaps_on_host=False,
                               work_groups=WorkGroupLimits(limits["max-compute-invocations-per-workgroup"], sizes,
                                                           (groups, groups, groups)),
                               local_memory=limits["max-compute-workgroup-storage-size"],
                               dedicated_local_memory=self.adapter.info["adapter_type"] != "CPU",
                               element_dtypes=frozenset(held), index_bits=32, ieee_floats=False,
                               max_buffers=limits["max-storage-buffers-per-shader-stage"],
                               native_integer_division=not _translates_to_glsl(self.adapter.info),
                               unheld_reasons=unheld,
                               max_loop_turns=_LLVMPIPE_LOOP_TURNS if _is_llvmpipe(self.adapter.info) else None,
                               dlpack_device_type=KDL_WEBGPU)
        self.allocator = WebGPUAllocator(self)
        self.compiler = WGSLCompiler(self)
        self.renderer = WGSLRenderer(spec, self.caps)
        self.fence = self.device.create_buffer(size=4, usage=_storage_usage())

    @property
    def description(self) -> str:
        info = self.adapter.info
        emulated = ", a CPU emulation" if info["adapter_type"] == "CPU" else ""
        lacks = "".join(f"; no {dtype.name}: {why}" for dtype, why in self.caps.unheld_reasons)
        return f"{info['device']} ({info['backend_type']}, {info['description']}{emulated}){lacks}"

    def load(self, compiled: CompiledSpec) -> WebGPUProgram:
        return WebGPUProgram(self, compiled)

    @_on_wgpu_thread
    def synchronize(self) -> None:
        """Wait for the queue: a read of one word waits for all work submitted before it (wgpu 0.32's
        ``on_submitted_work_done_sync`` fails on its own callback type)."""
        self.device.queue.read_buffer(self.fence, 0, 4)


def _storage_usage() -> int:
    usage = wgpu.BufferUsage
    return int(usage.STORAGE | usage.COPY_SRC | usage.COPY_DST)


def _aligned(start: int, end: int) -> tuple[int, int]:
    """The smallest span of whole 4-byte words around ``start .. end`` (WebGPU copies words)."""
    return start & ~3, (end + 3) & ~3


class WebGPUAllocator(Allocator):
    """Storage buffers rounded up to whole words; a kernel receives a (buffer, byte offset) pair, so views
    bind their base buffer."""

    def __init__(self, device: WebGPUDevice) -> None:
        self.device = device

    @_on_wgpu_thread
    def _alloc(self, nbytes: int) -> Any:
        try:
            return self.device.device.create_buffer(size=max(4, _aligned(0, nbytes)[1]), usage=_storage_usage())
        except Exception as err:  # wgpu reports an allocation it refuses as a generic GPUError
            raise MemoryError(f"WebGPU cannot allocate {nbytes} bytes: {err}") from err

    @_on_wgpu_thread
    def _free(self, handle: Any, nbytes: int) -> None:
        handle.destroy()

    @_on_wgpu_thread
    def _copyin(self, handle: Any, src: memoryview, offset: int) -> None:
        if not len(src):
            return
        start, end = _aligned(offset, offset + len(src))
        if (start, end) == (offset, offset + len(src)):
            self.device.device.queue.write_buffer(handle, offset, src)
            return
        words = bytearray(self.device.device.queue.read_buffer(handle, start, end - start))
        words[offset - start:offset - start + len(src)] = src
        self.device.device.queue.write_buffer(handle, start, words)

    @_on_wgpu_thread
    def _copyout(self, dst: memoryview, handle: Any, offset: int) -> None:
        if not len(dst):
            return
        start, end = _aligned(offset, offset + len(dst))
        words = self.device.device.queue.read_buffer(handle, start, end - start)
        dst[:] = memoryview(words)[offset - start:offset - start + len(dst)]

    def _address(self, handle: Any, offset: int) -> tuple[Any, int]:
        return (handle, offset)


class WGSLCompiler(CompilerBase):
    """Checks the WGSL by building its shader module. The validated source is the binary: the disk cache
    keeps it, and a second process loads it without validating again."""

    def __init__(self, device: WebGPUDevice) -> None:
        self.device = device
        info = device.adapter.info
        identity = f"{info['vendor']}|{info['device']}|{info['description']}|{info['backend_type']}|{wgpu.__version__}"
        self.cache_key = f"wgsl-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"

    @_on_wgpu_thread
    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        try:
            self.device.device.create_shader_module(code=spec.src)
        except Exception as err:  # wgpu's GPUValidationError carries naga's diagnostic
            raise CompileError("the WGSL did not validate", source=spec.src, log=str(err), kernel=spec.name) from err
        return CompiledSpec.from_spec(spec, data=spec.src.encode())


class WebGPUProgram(ProgramBase):
    """A compute pipeline with an explicit layout: binding ``k`` is buffer ``k``, the last the uniform of
    offsets and variables."""

    @_on_wgpu_thread
    def __init__(self, device: WebGPUDevice, compiled: CompiledSpec) -> None:
        self.name = compiled.name
        self.device = device
        gpu = device.device
        self.metadata = compiled.metadata
        """The PROGRAM's: its buffers, its variables in ``vals`` order, the turns of its loops."""
        self.group_limits = device.caps.groups_to_check(compiled.metadata.global_size)
        stage = wgpu.ShaderStage.COMPUTE
        count = compiled.buf_count
        entries = [{"binding": k, "visibility": stage, "buffer": {"type": "storage"}} for k in range(count)]
        entries.append({"binding": count, "visibility": stage, "buffer": {"type": "uniform"}})
        try:
            self.layout = gpu.create_bind_group_layout(entries=entries)
            module = gpu.create_shader_module(code=compiled.bytes.decode())
            self.pipeline = gpu.create_compute_pipeline(layout=gpu.create_pipeline_layout(
                bind_group_layouts=[self.layout]), compute={"module": module, "entry_point": compiled.entry})
        except Exception as err:
            raise CompileError("WebGPU cannot build the pipeline", source=compiled.bytes.decode(), log=str(err),
                               kernel=compiled.name) from err

    def bind(self, buffers: Sequence[Any]) -> WebGPULaunch:
        return WebGPULaunch(self, buffers)

    def check_loop_turns(self, vals: Sequence[int]) -> None:
        """Refuse a launch whose work items' loops may come round more often than the device lets them
        (``DeviceCaps.max_loop_turns``), which would cut them short and leave wrong values."""
        limit = self.device.caps.max_loop_turns
        loop_turns = self.metadata.loop_turns
        if loop_turns is None or limit is None:
            return
        turns = most(loop_turns, dict(zip(self.metadata.var_names, vals, strict=True)))
        if turns > limit:
            raise LaunchError(f"for these sizes a work item's loops come round up to {turns} times, and "
                              f"{self.device.spec} stops them after {limit} without a word; run it on another "
                              "device, or give each work item less to loop over", kernel=self.name, stage="launch",
                              value=turns)

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        WebGPULaunch(self, buffers)(vals, global_size or (1, 1, 1), local_size)
        self.device.synchronize()


class WebGPULaunch:
    """A bind group of the buffers and a uniform of their offsets, built once; a call writes the
    variables and submits (a plan synchronizes the queue at its end)."""

    @_on_wgpu_thread
    def __init__(self, program: WebGPUProgram, buffers: Sequence[Any]) -> None:
        self.program = program
        gpu = program.device.device
        offsets = [offset for _, offset in buffers]
        if any(offset % 2 for offset in offsets):
            raise LaunchError("a WebGPU buffer view must start at an even byte", kernel=program.name, stage="launch",
                              value=offsets)
        self.words = np.zeros(4 * max(1, -(-(len(buffers) + len(program.metadata.vars)) // 4)), np.int32)
        self.words[:len(buffers)] = offsets
        self.uniform = gpu.create_buffer(size=self.words.nbytes,
                                         usage=int(wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST))
        entries = [{"binding": k, "resource": {"buffer": handle, "offset": 0, "size": handle.size}}
                   for k, (handle, _) in enumerate(buffers)]
        entries.append({"binding": len(buffers), "resource": {"buffer": self.uniform, "offset": 0,
                                                               "size": self.words.nbytes}})
        try:
            self.group = gpu.create_bind_group(layout=program.layout, entries=entries)
        except Exception as err:
            raise LaunchError(f"WebGPU cannot bind the buffers: {err}", kernel=program.name, stage="launch") from err
        self.first_var = len(buffers)

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        self.program.check_loop_turns(vals)
        if self.program.group_limits is not None:
            self.program.group_limits.check_groups(global_size, self.program.name)
        _wgpu_thread().run(self._submit, vals, global_size)

    def _submit(self, vals: Sequence[int], global_size: tuple[int, int, int]) -> None:
        gpu = self.program.device.device
        # each value's 32 bits (a uint32 variable's above 2**31 too: the shader reinterprets the word as u32)
        bits = np.array(vals, np.int64).astype(np.uint32).view(np.int32)
        self.words[self.first_var:self.first_var + len(vals)] = bits
        gpu.queue.write_buffer(self.uniform, 0, self.words)
        encoder = gpu.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(self.program.pipeline)
        compute.set_bind_group(0, self.group)
        compute.dispatch_workgroups(*global_size)
        compute.end()
        gpu.queue.submit([encoder.finish()])


# ---- the backend (svod.backends.base) ---------------------------------------------------------------------

def _device(spec: DeviceSpec, host: Host) -> WebGPUDevice:
    """The WebGPU adapter ``spec``, opened once and shared by its pair and its Device."""
    return host.once(spec, lambda: WebGPUDevice(spec))


def compiler_pair(spec: DeviceSpec, compiler: str, host: Host) -> Pair:
    device = _device(spec, host)
    return device.renderer, device.compiler


def open_device(spec: DeviceSpec, primary: str, host: Host) -> Opened:
    device = _device(spec, host)
    return Opened(device.caps, ReusePool(device.allocator), device.load, device.description, device.synchronize)


def device_count() -> int:
    return adapter_count()
