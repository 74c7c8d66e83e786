"""The CUDA device ``CUDA:N`` on NVIDIA's cuda-bindings (extra ``cuda``): CUDA C compiled by nvrtc to PTX
for a chosen architecture, loaded and launched with the driver API.

nvrtc needs no GPU, so ``compiler_pair("CUDA")`` renders and compiles anywhere the wheels are installed;
the device itself needs a driver and a GPU, and says which is missing. ``assemble_ptx`` runs NVIDIA's
assembler (``ptxas``, from the ``nvidia-cuda-nvcc`` wheel of the extra) on PTX, also without a GPU: what the
driver would refuse to load is found where the suite runs, not on the first GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from svod.backends.base import Host, Opened, Pair
from svod.backends.cuda_graph import GraphReplay, replayable
from svod.codegen.render.cuda import CUDARenderer
from svod.device import (
    Allocator,
    CompiledSpec,
    CompilerBase,
    PlanReplay,
    ProgramBase,
    ProgramSpec,
    ReplayItem,
    ReusePool,
)
from svod.device.caps import CUDA_CAPS
from svod.dtype import DeviceSpec
from svod.errors import CompileError, DeviceError, Stage, SvodError

try:
    from cuda.bindings import driver, nvrtc
except ImportError:  # the extra is optional; the device reports why it is missing
    driver = nvrtc = None

DEFAULT_ARCH = "sm_90"


def _check_nvrtc() -> None:
    if nvrtc is None:
        raise DeviceError("cuda-bindings is not installed (pip install 'svod[cuda]')", stage="device")


def _check_arch(arch: str) -> None:
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise DeviceError("a CUDA architecture looks like sm_90", stage="device", value=arch)


class NVRTCCompiler(CompilerBase):
    """CUDA C to PTX for ``arch`` (``sm_90`` by default); the PTX targets that architecture."""

    def __init__(self, arch: str = DEFAULT_ARCH) -> None:
        _check_nvrtc()
        _check_arch(arch)
        self.arch = arch
        self.options = [f"--gpu-architecture=compute_{arch[3:]}".encode(), b"--fmad=false", b"-default-device"]
        try:
            version = ".".join(map(str, _checked(nvrtc.nvrtcVersion(), "nvrtcVersion", "device")))
        except Exception as err:
            raise DeviceError(f"nvrtc is not usable here: {err}", stage="device") from err
        digest = hashlib.sha256(b" ".join(self.options)).hexdigest()[:12]
        self.cache_key = f"nvrtc-{version}-{arch}-{digest}"

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        program = _checked(nvrtc.nvrtcCreateProgram(spec.src.encode(), f"{spec.name}.cu".encode(), 0, [], []),
                           "nvrtcCreateProgram", "compile")[0]
        try:
            result = nvrtc.nvrtcCompileProgram(program, len(self.options), self.options)[0]
            if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                raise CompileError(f"nvrtc failed: {result.name}", source=spec.src, log=_program_log(program),
                                   kernel=spec.name)
            size = _checked(nvrtc.nvrtcGetPTXSize(program), "nvrtcGetPTXSize", "compile")[0]
            ptx = b" " * size
            _checked(nvrtc.nvrtcGetPTX(program, ptx), "nvrtcGetPTX", "compile")
        finally:
            nvrtc.nvrtcDestroyProgram(program)
        return CompiledSpec.from_spec(spec, data=ptx.rstrip(b"\0"))


def find_ptxas() -> str | None:
    """The path of NVIDIA's PTX assembler: the one the ``nvidia-cuda-nvcc`` wheel installs (extra ``cuda``;
    ``nvidia/cu13/bin/ptxas`` in CUDA 13's layout, ``nvidia/cuda_nvcc/bin/ptxas`` in CUDA 12's), else the
    first ``ptxas`` on PATH; None if there is neither."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for found in sorted(Path(root).glob("*/bin/ptxas")):
            if found.is_file():
                return str(found)
    return shutil.which("ptxas")


def assemble_ptx(ptx: bytes | str, arch: str, *, kernel: str | None = None, ptxas: str | None = None) -> bytes:
    """The cubin ``ptxas`` assembles from ``ptx`` for ``arch`` (``sm_90``, ``sm_80``): a check, without a GPU,
    that a driver for that architecture would load what nvrtc produced. The PTX must target ``arch`` or an
    older one (compile it with ``NVRTCCompiler(arch)``). A refusal is a ``CompileError`` at stage ``compile``
    that names ``kernel`` and carries ptxas's message; no ptxas here is a ``DeviceError``."""
    _check_arch(arch)
    tool = ptxas or find_ptxas()
    if tool is None:
        raise DeviceError("ptxas is not installed: the nvidia-cuda-nvcc wheel ships it (pip install 'svod[cuda]')",
                          kernel=kernel, stage="device")
    text = ptx.decode(errors="replace") if isinstance(ptx, bytes) else ptx
    with tempfile.TemporaryDirectory(prefix="svod-ptxas-") as folder:
        source, cubin = Path(folder, "kernel.ptx"), Path(folder, "kernel.cubin")
        source.write_text(text.rstrip("\0"))
        try:
            done = subprocess.run([tool, f"-arch={arch}", "-o", str(cubin), str(source)], capture_output=True,
                                  text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CompileError(f"ptxas could not run for {arch}: {err}", source=text, log="", kernel=kernel) from err
        if done.returncode != 0 or not cubin.is_file():
            log = (done.stderr + done.stdout).replace(str(source), f"{kernel or 'kernel'}.ptx")  # lines of the PTX
            raise CompileError(f"ptxas refused the PTX for {arch} (exit {done.returncode})", source=text,
                               log=log, kernel=kernel)
        return cubin.read_bytes()


def _checked(result: tuple[Any, ...], call: str, stage: Stage) -> tuple[Any, ...]:
    """The values of a cuda-bindings call after its status, or an ``SvodError`` at ``stage`` naming the call."""
    status, *values = result
    if int(status) != 0:
        raise SvodError(f"{call} failed: {getattr(status, 'name', status)}", stage=stage, value=int(status))
    return tuple(values)


def _program_log(program: Any) -> str:
    size = _checked(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize", "compile")[0]
    log = b" " * size
    _checked(nvrtc.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog", "compile")
    return log.rstrip(b"\0").decode(errors="replace")


class CUDADevice:
    """A GPU through the driver API: its primary context, allocator and kernel loader."""

    def __init__(self, spec: DeviceSpec) -> None:
        _check_nvrtc()
        try:
            _checked(driver.cuInit(0), "cuInit", "device")
        except SvodError as err:
            raise DeviceError(f"the CUDA driver could not start: {err.detail}",
                              stage="device", value=str(spec)) from err
        except Exception as err:
            raise DeviceError(f"no NVIDIA driver on this machine ({type(err).__name__})",
                              stage="device", value=str(spec)) from err
        count = _checked(driver.cuDeviceGetCount(), "cuDeviceGetCount", "device")[0]
        if spec.device_id >= count:
            raise DeviceError(f"{spec} does not exist: this machine has {count} CUDA device(s)",
                              stage="device", value=str(spec))
        self.spec = spec
        self.device = _checked(driver.cuDeviceGet(spec.device_id), "cuDeviceGet", "device")[0]
        self.context = _checked(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain",
                                "device")[0]
        major = _checked(driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device), "attribute",
            "device")[0]
        minor = _checked(driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device), "attribute",
            "device")[0]
        self.compiler = NVRTCCompiler(f"sm_{major}{minor}")
        self.caps = CUDA_CAPS
        self.renderer = CUDARenderer(spec, self.caps)
        self.allocator = CUDAAllocator(self)
        name = _checked(driver.cuDeviceGetName(64, self.device), "cuDeviceGetName", "device")[0]
        self.name = name.split(b"\0")[0].decode()
        self.activate()
        self.stream: Any = _checked(driver.cuStreamCreate(0), "cuStreamCreate", "device")[0]
        """svod's launches go here in order. It is a blocking stream: the driver's synchronous copies (the
        legacy default stream's) wait for what it holds, so a copy out sees every launch before it."""

    def activate(self) -> None:
        _checked(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent", "device")

    def synchronize(self) -> None:
        """Wait for every launch on svod's stream (a fault in one is reported here, naming the call)."""
        self.activate()
        _checked(driver.cuStreamSynchronize(self.stream), "cuStreamSynchronize", "execute")

    def begin_capture(self) -> None:
        """Record what svod's stream is given from now on into a graph, instead of running it."""
        self.activate()
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _checked(driver.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture", "plan")

    def end_capture(self) -> Any:
        """The instantiated graph of what was captured since ``begin_capture``."""
        graph = _checked(driver.cuStreamEndCapture(self.stream), "cuStreamEndCapture", "plan")[0]
        try:
            return _checked(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate", "plan")[0]
        finally:
            driver.cuGraphDestroy(graph)

    def abandon_capture(self) -> None:
        """End the capture since ``begin_capture`` and drop what it recorded (a launch in it failed)."""
        status, graph = driver.cuStreamEndCapture(self.stream)
        if int(status) == 0:
            driver.cuGraphDestroy(graph)

    def launch_graph(self, executable: Any) -> None:
        _checked(driver.cuGraphLaunch(executable, self.stream), "cuGraphLaunch", "launch")


class CUDARuntime:
    """The device's runtime factory: loads programs, and replays plans of them as CUDA graphs."""

    def __init__(self, device: CUDADevice) -> None:
        self.device = device

    def __call__(self, compiled: CompiledSpec) -> CUDAProgram:
        return CUDAProgram(self.device, compiled)

    def replay(self, work: Sequence[ReplayItem], inputs: Sequence[str]) -> PlanReplay | None:
        return GraphReplay(self.device, work, inputs) if replayable(work) else None


class CUDAAllocator(Allocator):
    """Device memory; a kernel receives the device address of a view (base plus offset)."""

    def __init__(self, device: CUDADevice) -> None:
        self.device = device

    def _alloc(self, nbytes: int) -> Any:
        self.device.activate()
        status, handle = driver.cuMemAlloc(max(nbytes, 1))
        if status == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise MemoryError(f"cuMemAlloc: {status.name}")  # the allocator's refusal naming the byte count
        return _checked((status, handle), "cuMemAlloc", "buffer")[0]

    def _free(self, handle: Any, nbytes: int) -> None:
        self.device.activate()
        driver.cuMemFree(handle)

    def _copyin(self, handle: Any, src: memoryview, offset: int) -> None:
        if len(src):
            self.device.activate()
            _checked(driver.cuMemcpyHtoD(int(handle) + offset, src, len(src)), "cuMemcpyHtoD", "buffer")

    def _copyout(self, dst: memoryview, handle: Any, offset: int) -> None:
        if len(dst):
            self.device.activate()
            _checked(driver.cuMemcpyDtoH(dst, int(handle) + offset, len(dst)), "cuMemcpyDtoH", "buffer")

    def _address(self, handle: Any, offset: int) -> int:
        return int(handle) + offset


class CUDAProgram(ProgramBase):
    def __init__(self, device: CUDADevice, compiled: CompiledSpec) -> None:
        if not compiled.bytes:
            raise SvodError("a CUDA kernel loads from PTX, and this one has none", kernel=compiled.name, stage="load")
        self.name = compiled.name
        self.device = device
        self.group_limits = device.caps.groups_to_check(compiled.metadata.global_size)
        device.activate()
        self.module = _checked(driver.cuModuleLoadData(compiled.bytes + b"\0"), "cuModuleLoadData", "load")[0]
        symbol = compiled.entry.encode()
        self.function = _checked(driver.cuModuleGetFunction(self.module, symbol), "cuModuleGetFunction", "load")[0]

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        """One launch, returning when it has finished."""
        self.bind(buffers)(vals, global_size or (1, 1, 1), local_size)
        self.device.synchronize()

    def bind(self, buffers: Sequence[Any]) -> CUDALaunch:
        return CUDALaunch(self, buffers)


class CUDALaunch:
    """A program bound to its buffers: the kernel's parameter array is built once, and a call writes the
    variables into it and launches on the device's stream without waiting (a plan synchronizes at its end; a
    CUDA graph captures such launches)."""

    def __init__(self, program: CUDAProgram, buffers: Sequence[Any]) -> None:
        self.program = program
        self.addresses = (ctypes.c_uint64 * len(buffers))(*buffers)
        self._parameters(0)

    def _parameters(self, count: int) -> None:
        """The array of pointers the driver reads: one per buffer address, then one per variable (the program
        says how many variables it has at its first call)."""
        self.values = (ctypes.c_int64 * count)()
        pointers = [ctypes.addressof(self.addresses) + 8 * k for k in range(len(self.addresses))]
        pointers += [ctypes.addressof(self.values) + 8 * k for k in range(count)]
        self.parameters = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        if len(vals) != len(self.values):
            self._parameters(len(vals))
        for position, value in enumerate(vals):
            self.values[position] = value
        block = local_size or (1, 1, 1)
        program = self.program
        if program.group_limits is not None:
            program.group_limits.check_groups(global_size, program.name)
        _checked(driver.cuLaunchKernel(program.function, *global_size, *block, 0, program.device.stream,
                                       ctypes.addressof(self.parameters), 0), "cuLaunchKernel", "launch")


# ---- the backend (svod.backends.base) ---------------------------------------------------------------------

def _device(spec: DeviceSpec, host: Host) -> CUDADevice:
    """The CUDA device ``spec``, opened once and shared by its pair and its Device."""
    return host.once(spec, lambda: CUDADevice(spec))


def compiler_pair(spec: DeviceSpec, compiler: str, host: Host) -> Pair:
    """The device's own architecture when a GPU is present; ``SVOD_CUDA_ARCH`` (sm_90) ahead of time."""
    try:
        device = _device(spec, host)
    except DeviceError:
        arch = host.settings.cuda_arch
        return CUDARenderer(spec), host.once(f"nvrtc-{arch}", lambda: NVRTCCompiler(arch))
    return device.renderer, device.compiler


def open_device(spec: DeviceSpec, primary: str, host: Host) -> Opened:
    device = _device(spec, host)
    return Opened(device.caps, ReusePool(device.allocator), CUDARuntime(device), device.name, device.synchronize)


def device_count() -> int:
    return 1
