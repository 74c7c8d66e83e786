"""The device contract: specs that cross the pipeline's boundaries, the backend protocols, what a device
can do (``DeviceCaps``), launch sizes (``LaunchShape``), devices, allocators and buffers."""

from svod.device.allocator import Allocator, HostAllocator, ReusePool
from svod.device.buffer import Buffer
from svod.device.caps import CORE_ID, DeviceCaps, WorkGroupLimits, launch_index, parse_launch_index
from svod.device.device import Device, Pair, resolver
from svod.device.launch import ConcreteLaunchDims, LaunchShape
from svod.device.protocols import (
    BufferAddress,
    Compiler,
    CompilerBase,
    HostArguments,
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

__all__ = ["CORE_ID", "Allocator", "Buffer", "BufferAddress", "CompiledSpec", "DeviceCaps", "WorkGroupLimits",
           "launch_index", "parse_launch_index", "Compiler", "CompilerBase", "ConcreteLaunchDims", "Device",
           "HostAllocator", "HostArguments", "HostCondition", "KernelCall", "KernelMetadata", "Launch",
           "LaunchShape", "Pair", "PlanReplay", "PlanReplayer", "Program", "ProgramBase", "ProgramSpec",
           "Renderer", "ReplayBranch", "ReplayCopy", "ReplayHost", "ReplayItem", "ReplayKernel", "ReplayLoop",
           "ReplayWhile", "ReusePool", "RuntimeFactory", "Variable", "derive_metadata", "entry_symbol",
           "kernel_variables", "resolver"]
