"""A kernel that runs as several programs in turn (a reduction split across threads, for one).

The stages share the kernel's buffers and one scratch buffer appended after them, which a launch
allocates from the device for itself, so the composite stays stateless and reentrant like any program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from svod.device import Allocator, Program, ProgramBase, ProgramSpec
from svod.device.launch import ConcreteLaunchDims
from svod.device.spec import LaunchSize


@dataclass(frozen=True, slots=True)
class Stage:
    program: Program
    var_names: tuple[str, ...]
    global_size: LaunchSize
    local_size: LaunchSize | None

    def dims(self, values: dict[str, int]) -> ConcreteLaunchDims:
        return ProgramSpec.resolve_launch_dims(self.global_size, self.local_size, values)


class StagedProgram(ProgramBase):
    """Runs ``stages`` one after another; ``vals`` follow ``var_names``."""

    def __init__(self, name: str, stages: Sequence[Stage], var_names: Sequence[str], scratch_bytes: int,
                 allocator: Allocator) -> None:
        self.name = name
        self.stages = tuple(stages)
        self.var_names = tuple(var_names)
        self.scratch_bytes = scratch_bytes
        self.allocator = allocator

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        values = dict(zip(self.var_names, vals, strict=True))
        scratch = self.allocator.allocate(self.scratch_bytes)
        try:
            arguments = [*buffers, self.allocator.address(scratch)]
            for stage in self.stages:
                dims = stage.dims(values)
                stage.program.execute(arguments, [values[name] for name in stage.var_names], dims.global_size,
                                      dims.local_size)
        finally:
            self.allocator.free(scratch, self.scratch_bytes)
