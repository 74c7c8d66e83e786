"""What lowering and the runtime need to know about a device, in one place: ``DeviceCaps``, and the names
of the variables and indices a launch provides.

A CPU kernel that runs on several threads reads its worker number from the variable ``core_id``. A GPU
kernel reads its position from ``SPECIAL`` nodes named by kind and axis: ``gidxN`` (the work group),
``lidxN`` (the item within it) and ``idxN`` (the global item, when the runtime picks the group size).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from svod.dtype import DType, dtypes
from svod.errors import LaunchError

if TYPE_CHECKING:
    from svod.ir import UOp

CORE_ID = "core_id"
"""The variable that numbers the CPU worker running a kernel; the runtime sets it, a caller never does."""

LaunchIndexKind = Literal["group", "local", "global"]
_PREFIX: dict[LaunchIndexKind, str] = {"group": "gidx", "local": "lidx", "global": "idx"}
KDL_CPU, KDL_CUDA, KDL_OPENCL, KDL_WEBGPU = 1, 2, 4, 15
"""DLPack's device types (``DLDeviceType``) of the devices svod has (here, so that naming one imports no ctypes:
``svod.device.dlpack`` builds its capsules)."""
_LAUNCH_INDEX = re.compile(r"^(gidx|lidx|idx)([0-9]+)$")


def launch_index(kind: LaunchIndexKind, axis: int) -> str:
    """The SPECIAL name of a launch index: ``launch_index("group", 0)`` is ``gidx0``."""
    return f"{_PREFIX[kind]}{axis}"


def parse_launch_index(name: str) -> tuple[LaunchIndexKind, int] | None:
    """``("group", 0)`` for ``gidx0``, and so on; None for a name that is not a launch index."""
    found = _LAUNCH_INDEX.match(name)
    if found is None:
        return None
    kind = next(k for k, prefix in _PREFIX.items() if prefix == found.group(1))
    return kind, int(found.group(2))


@dataclass(frozen=True, slots=True)
class WorkGroupLimits:
    """What a device allows in one work group (OpenCL's CL_DEVICE_MAX_WORK_GROUP_SIZE and item sizes)."""

    max_work_group_size: int
    max_item_sizes: tuple[int, int, int]
    max_groups: tuple[int, int, int] | None = None
    """How many work groups a launch may have along each dimension, where that is limited (WebGPU's
    maxComputeWorkgroupsPerDimension)."""

    def may_exceed(self, counts: Sequence[UOp]) -> bool:
        """Whether a kernel's group counts (expressions of its variables) may pass the limit for some values:
        only such a kernel's launches check theirs (``check_groups``), off every other's dispatch path."""
        return self.max_groups is not None and any(c.vmax > most for c, most in zip(counts, self.max_groups,
                                                                                   strict=True))

    def check_groups(self, groups: tuple[int, int, int], kernel: str) -> None:
        """Refuse a launch of more work groups along a dimension than the device allows. Lowering spreads a
        dimension over a spare one where its bounds may pass the limit; where every dimension is in use it
        leaves the count to the launch, which knows the variables' values, checks it here and names it,
        rather than letting a driver refuse it with a code or run part of it."""
        if self.max_groups is None:
            return
        for axis, (count, most) in enumerate(zip(groups, self.max_groups, strict=True)):
            if count > most:
                raise LaunchError(f"the launch needs {count} work groups along dimension {axis}, and the device "
                                  f"allows {most}, with no spare dimension that could hold the rest",
                                  kernel=kernel, stage="launch", value=count)


ALL_DTYPES = frozenset(d for d in dtypes.all() if d != dtypes.index)
ASSUMED_L2_BYTES = 2 << 20
"""One core's L2 cache where the host does not say: the Xeon svod's blocks were measured on."""
CACHE_LINE = 64
"""The bytes of a CPU cache line, on every CPU svod runs on."""


@dataclass(frozen=True, slots=True)
class DeviceCaps:
    """One device's capabilities."""

    host_memory: bool
    """Buffers live in host memory (a kernel receives plain addresses)."""
    overlaps_on_host: bool
    """Programs may run on several host threads at once (a plan overlaps independent steps)."""
    threads: int = 1
    """CPU workers per kernel (``core_id`` runs over ``0 .. threads-1``)."""
    vector_registers: int = 16
    """The CPU's SIMD registers, which size its register tiles: 32 with AVX-512, 16 with AVX2 (and what
    svod assumes of other CPUs)."""
    l2_bytes: int = ASSUMED_L2_BYTES
    """One core's L2 cache, which sizes a CPU matmul's blocks of ``b`` (``block_matmul``: half of it)."""
    vector_lanes: bool = False
    """Whether the renderer computes a value of ``W`` lanes (``Ops.LANE``) as one vector: a CPU register
    tile's row is then one store, not ``W`` (LLVM IR's vector types; the C pair renders scalars)."""
    work_groups: WorkGroupLimits | None = None
    """Work-group limits, for devices that launch work items in groups."""
    local_memory: int = 0
    """Bytes of work-group local memory, where there is any."""
    dedicated_local_memory: bool = False
    """Whether local memory is storage of its own, faster than global memory (a GPU's shared memory, OpenCL's
    ``CL_LOCAL``), so that staging operands in it pays (``tile_matmul``). A CPU's OpenCL or Vulkan driver
    keeps it in ordinary memory and runs the barriers around it as loops over the work items."""
    element_dtypes: frozenset[DType] = field(default_factory=lambda: ALL_DTYPES)
    """The dtypes a buffer on this device may hold."""
    warp_size: int | None = None
    """The work items that run in lockstep and read each other's values without local memory (CUDA's warp
    of 32 and ``__shfl_down_sync``), where the language has that exchange (``Ops.SHUFFLE_DOWN``)."""
    native_float16: bool = True
    """Whether float16 arithmetic is native; if not, it is computed in float32 and rounded per op."""
    index_bits: int = 64
    """The width of index arithmetic in kernels."""
    ieee_floats: bool = True
    """Whether float arithmetic keeps IEEE 754's NaN, infinities, signed zeros and the order of operations
    the kernel spells (WGSL lets a shader compiler assume finite floats and reorder sums, so a WebGPU
    device does not promise it)."""
    max_buffers: int | None = None
    """How many buffers one kernel may take, where that is limited (WebGPU's storage bindings)."""
    dlpack_device_type: int = KDL_CPU
    """DLPack's type of the device's memory (``DLDeviceType``: 1 host, 2 CUDA, 4 OpenCL, 15 WebGPU): what a
    buffer's ``__dlpack_device__`` says."""
    native_integer_division: bool = True
    """Whether the device's own integer ``/`` and ``%`` already mean svod's for every operand (C's truncation,
    a zero divisor dividing by one, ``MIN / -1`` wrapping). wgpu's OpenGL backend does not keep WGSL's: naga
    writes them as GLSL's, which leaves division by zero undefined and ``%`` undefined for negative operands,
    and Mesa computes that ``%`` as an unsigned remainder of the bits. Where false, the renderer divides by
    divisors made safe and takes remainders from quotients (``TRUNCATING_DIVISION_BY_SAFE_DIVISORS``)."""
    unheld_reasons: tuple[tuple[DType, str], ...] = ()
    """Why the device cannot hold a dtype its backend otherwise holds, for each such dtype (a WebGPU adapter
    without the ``shader-f16`` feature holds no float16): errors and ``svod devices`` say it."""
    max_loop_turns: int | None = None
    """How many times, in all, the loops of one work item may come round before the device stops them
    without a word, where it does: Mesa's llvmpipe (lavapipe's Vulkan, its OpenGL) counts every loop's turns
    against 65535 per batch of work items. Lowering proves a kernel within it or has each launch check it
    (``KernelMetadata.loop_turns``)."""

    def groups_to_check(self, counts: Sequence[UOp]) -> WorkGroupLimits | None:
        """The limits a kernel's launches check their group counts against (``WorkGroupLimits.check_groups``):
        the device's, where the counts may pass them (``may_exceed``); else None, and they check nothing."""
        limits = self.work_groups
        return limits if limits is not None and limits.may_exceed(counts) else None


CUDA_CAPS = DeviceCaps(host_memory=False, overlaps_on_host=False,
                       work_groups=WorkGroupLimits(1024, (1024, 1024, 64), max_groups=((1 << 31) - 1, 65535, 65535)),
                       local_memory=48 << 10, dedicated_local_memory=True, warp_size=32, native_float16=False,
                       dlpack_device_type=KDL_CUDA)
"""What every CUDA architecture since sm_30 allows (grids of up to 2**31 - 1 blocks along x, 65535 along y and z;
float16 is not native here: the nvrtc wheel ships no cuda_fp16.h); what CUDA code is rendered for where no GPU
says more."""
