"""Small references the tests share."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import KernelBuilder
from svod.backends import DeviceRegistry, default_registry
from svod.backends.clang import find_c_compiler
from svod.backends.cpu_replay import NativeReplay
from svod.config import settings
from svod.device import Device, ReplayBranch, ReplayHost, ReplayItem, ReplayLoop, ReplayWhile
from svod.dtype import DType
from svod.errors import GraphError
from svod.ir import Ops, UOp
from svod.ir.alu import exec_alu


def evaluate_expression(expr: UOp, env: dict[str, int]) -> int:
    """The value of an ALU expression over constants and variables, in C semantics (``svod.ir.alu``)."""
    values: dict[UOp, int] = {}
    for node in expr.toposort():
        if node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.DEFINE_VAR:
            values[node] = env[node.arg[0]]
        else:
            values[node] = exec_alu(node.op, node.dtype, [values[s] for s in node.src])
    return values[expr]


def cpu_device(threads: int, compiler: str) -> Device:
    """The CPU device with ``compiler`` (``llvm`` or ``clang``) splitting kernels over ``threads`` workers."""
    return DeviceRegistry(dataclasses.replace(settings, threads=threads)).get("CPU", compiler)


def has_c_compiler() -> bool:
    """Whether the CPU's C pair finds a compiler here (``find_c_compiler``: clang, clang-N, gcc or cc)."""
    try:
        find_c_compiler()
    except svod.errors.DeviceError:
        return False
    return True


def open_device(name: str) -> Device:
    """A device by name (a CPU compiler pair as ``llvm`` or ``clang``), or a skip naming what this machine
    lacks for it."""
    if name == "clang" and not has_c_compiler():
        pytest.skip("no C compiler on this machine (clang, gcc or cc)")
    if name in ("llvm", "clang"):
        return svod.get_device("CPU", name)
    try:
        return svod.get_device(name)
    except svod.errors.DeviceError as err:
        pytest.skip(f"{name} is not available here: {err.detail}")


def kernel_devices() -> tuple[str, ...]:
    """Every device a kernel test runs on, as ``open_device`` names them: the PYTHON reference and each device
    of ``compiled_devices``. One that is missing here is a skip that says why (``CUDA:0`` without a driver)."""
    return ("llvm", "clang", "PYTHON", "CL:0", "CUDA:0", *webgpu_devices())


def compiled_devices() -> tuple[str, ...]:
    """Every device with a real compiler, as ``open_device`` names them: each CPU compiler pair, OpenCL, CUDA
    and each WebGPU adapter."""
    return ("llvm", "clang", "CL:0", "CUDA:0", *webgpu_devices())


@functools.cache
def devices_here() -> tuple[str, ...]:
    """The devices of ``kernel_devices`` this machine has, as ``open_device`` names them."""
    available = svod.available_devices()
    return tuple(name for name in kernel_devices()
                 if name == "llvm" or (name == "clang" and has_c_compiler()) or name in available)


@functools.cache
def webgpu_devices() -> tuple[str, ...]:
    """Every WebGPU adapter svod lists here (``WEBGPU:0``, and ``WEBGPU:1`` for wgpu's OpenGL adapter beside a
    Vulkan one): each must compute svod's definitions or refuse what it cannot."""
    return tuple(default_registry().names("WEBGPU"))


FLOAT_DIVIDENDS = [7.5, -7.5, 0.0, -0.0, 1.0, 0.1, -0.3, 1e20, -3e38, 7.1e109, -1e300, 1e308, 12345678901234567.0,
                   1e-40, -1e-300, -1e-310, 5e-324, np.inf, -np.inf, np.nan]
FLOAT_DIVISORS = [2.0, -2.0, 3.0, -3.0, 7.0, 100.0, 0.1, -0.7, 1e-30, -1e-40, 5e-324, 3e38, np.inf, -np.inf, 0.0, -0.0,
                  np.nan]
"""Operands of float ``%``, ``//`` and ``fmod`` (as float64; narrower dtypes round or overflow them): quotients
past the float's precision, zeros of both signs, subnormals, infinities and NaN."""


@contextlib.contextmanager
def numpy_quietly() -> Iterator[None]:
    """Around an oracle's NumPy arithmetic that is meant to overflow, divide by zero or make NaNs (as the kernel
    does): NumPy's warnings of those off (``np.errstate``), and its own ``RuntimeWarning``s of the same (a median
    of nothing, a ``ddof`` past the count) ignored."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def ieee_inputs(device: Device, values: np.ndarray) -> np.ndarray:
    """A mask of the ``values`` whose results a test may compare on ``device``: all of them on an IEEE 754
    device; on one that follows WGSL's float rules (``DeviceCaps.ieee_floats`` false: its compiler may
    assume floats are finite and flush subnormals, as the WGSL spec allows) the finite, normal, non-negative-
    zero ones."""
    if device.caps.ieee_floats:
        return np.ones(values.shape, bool)
    with np.errstate(all="ignore"):
        normal = np.isfinite(values) & ((values == 0) | (np.abs(values) >= np.finfo(values.dtype).tiny))
    return normal & ~((values == 0) & np.signbit(values))


def refuses(device: Device, dtype: DType) -> bool:
    """Whether ``device`` cannot hold ``dtype``; if it cannot, check that it refuses such a kernel by kernel
    name and dtype before compiling (a test then has nothing more to run there)."""
    if dtype in device.caps.element_dtypes:
        return False
    k = KernelBuilder(f"copy_{dtype.name}")
    out, x = k.buffer(dtype, 4), k.buffer(dtype, 4)
    i = k.range(4)
    k.store(out[i], x[i])
    with pytest.raises(GraphError, match=f"cannot hold {dtype.name}, the dtype of buffer 0") as raised:
        svod.compile(k.build(), device=device)
    assert raised.value.kernel == f"copy_{dtype.name}"
    return True


# ---- plan bundles ------------------------------------------------------------------------------------------------

def rewrite(path: Path, target: Path, change: dict[str, object] | None = None, *, drop: str | None = None,
            replace: dict[str, bytes] | None = None) -> Path:
    """A copy of the bundle at ``path`` with manifest fields changed, an entry dropped or replaced."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w") as out:
        for name in source.namelist():
            if name == drop:
                continue
            data = source.read(name)
            if name == "manifest.json" and change:
                data = json.dumps({**json.loads(data), **change}).encode()
            if replace and name in replace:
                data = replace[name]
            out.writestr(name, data)
    return target


def from_another_cpu(path: Path, target: Path) -> Path:
    """A copy of the bundle at ``path`` as if built on another CPU: its compiler key and target are not this
    machine's, so its binaries do not fit here."""
    with zipfile.ZipFile(path) as source:
        compiler = json.loads(source.read("manifest.json"))["compiler"]
    return rewrite(path, target, {"compiler": compiler.replace("llvm-", "llvm-other-cpu-"),
                                  "target": {"cpu": "other", "features": "+made-up"}})


def replay_pieces(work: Sequence[ReplayItem]) -> Iterator[ReplayItem]:
    """Every piece of a plan's native replay work, those inside loops and branches included."""
    for item in work:
        yield item
        if isinstance(item, (ReplayLoop, ReplayWhile)):
            yield from replay_pieces(item.body)
        elif isinstance(item, ReplayBranch):
            yield from replay_pieces((*item.then, *item.otherwise))


def assert_replayed_natively(plan: svod.ExecutionPlan, kinds: set[type]) -> None:
    """The prepared CPU plan's work holds pieces of ``kinds`` and no Python piece, and the dispatcher's words
    call back into Python for nothing."""
    work = list(replay_pieces(plan._replay_work(plan._levels)))
    assert kinds <= {type(item) for item in work} and not any(isinstance(item, ReplayHost) for item in work)
    assert isinstance(plan._native, NativeReplay) and plan._native.callbacks == []


def ks_statistic(values: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """The Kolmogorov-Smirnov statistic of ``values`` against the exact ``cdf`` (numpy only)."""
    x = np.sort(values)
    f = cdf(x)
    n = len(x)
    return float(max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max()))


def ks_critical(n: int) -> float:
    """The Kolmogorov-Smirnov statistic's critical value at a 0.1% level, for ``n`` samples."""
    return 1.95 / math.sqrt(n)
