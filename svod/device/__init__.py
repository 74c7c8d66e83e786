"""The device contract: specs that cross the pipeline's boundaries, the backend protocols, what a device
can do (``DeviceCaps``), launch sizes (``LaunchShape``), devices, allocators and buffers.

Each name imports its module when it is first used: ``import svod`` needs the device resolver alone, and the
protocols and launch sizes import the IR.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from svod.device.allocator import Allocator, HostAllocator, ReusePool
    from svod.device.buffer import Buffer
    from svod.device.caps import CORE_ID, DeviceCaps, WorkGroupLimits, launch_index, parse_launch_index
    from svod.device.device import Device, Pair, resolver
    from svod.device.launch import ConcreteLaunchDims, LaunchShape
    from svod.device.protocols import (
        BufferAddress,
        CallArray,
        CallScalar,
        Compiler,
        CompilerBase,
        HostArguments,
        HostArrayChecks,
        HostCondition,
        KernelCall,
        Launch,
        PlanReplay,
        PlanReplayer,
        Program,
        ProgramBase,
        Renderer,
        ReplayBranch,
        ReplayCopy,
        ReplayHost,
        ReplayItem,
        ReplayKernel,
        ReplayLoop,
        ReplayWhile,
        RuntimeFactory,
    )
    from svod.device.spec import (
        CompiledSpec,
        KernelMetadata,
        ProgramSpec,
        Variable,
        derive_metadata,
        entry_symbol,
        kernel_variables,
    )


_HOMES = {
    **dict.fromkeys(("Allocator", "HostAllocator", "ReusePool"), "allocator"),
    "Buffer": "buffer",
    **dict.fromkeys(("CORE_ID", "DeviceCaps", "WorkGroupLimits", "launch_index", "parse_launch_index"), "caps"),
    **dict.fromkeys(("Device", "Pair", "resolver"), "device"),
    **dict.fromkeys(("ConcreteLaunchDims", "LaunchShape"), "launch"),
    **dict.fromkeys(("BufferAddress", "CallArray", "CallScalar", "Compiler", "CompilerBase", "HostArguments",
                     "HostArrayChecks", "HostCondition", "KernelCall", "Launch", "PlanReplay", "PlanReplayer",
                     "Program", "ProgramBase", "Renderer", "ReplayBranch", "ReplayCopy", "ReplayHost", "ReplayItem",
                     "ReplayKernel", "ReplayLoop", "ReplayWhile", "RuntimeFactory"), "protocols"),
    **dict.fromkeys(("CompiledSpec", "KernelMetadata", "ProgramSpec", "Variable", "derive_metadata", "entry_symbol",
                     "kernel_variables"), "spec"),
}
"""The module of this package each public name comes from."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'svod.device' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"svod.device.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = ["CORE_ID", "Allocator", "Buffer", "BufferAddress", "CallArray", "CallScalar", "CompiledSpec", "DeviceCaps",
           "WorkGroupLimits", "launch_index", "parse_launch_index", "Compiler", "CompilerBase", "ConcreteLaunchDims",
           "Device", "HostAllocator", "HostArguments", "HostArrayChecks", "HostCondition", "KernelCall",
           "KernelMetadata", "Launch", "LaunchShape", "Pair", "PlanReplay", "PlanReplayer", "Program", "ProgramBase",
           "ProgramSpec", "Renderer", "ReplayBranch", "ReplayCopy", "ReplayHost", "ReplayItem", "ReplayKernel",
           "ReplayLoop", "ReplayWhile", "ReusePool", "RuntimeFactory", "Variable", "derive_metadata", "entry_symbol",
           "kernel_variables", "resolver"]
