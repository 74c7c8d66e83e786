"""``CachedKernel``: a compiled, loaded kernel and everything a dispatch checks and needs.

``bind`` is the trust boundary between a user and a kernel: it checks buffers (count, dtype, device, size
for the given variable values) and variables (missing, unknown, out of bounds) and only then hands raw
addresses to the program. Nothing runs when a check fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from svod.device import CORE_ID, Buffer, Device, Program, Variable
from svod.device.launch import ConcreteLaunchDims, evaluate
from svod.device.spec import LaunchSize, ProgramSpec
from svod.errors import BufferMismatchError, VariableError
from svod.ir import UOp
from svod.ir.uop import param_size, pointee


@dataclass(frozen=True, eq=False)
class CachedKernel:
    """One entry of the method cache. ``var_names`` is the order of the program's ``vals``."""

    program: Program
    device: Device
    code: str
    entry_point: str
    """The symbol the kernel is compiled to (its name, made unique by the kernel's key)."""
    var_names: tuple[str, ...]
    globals: tuple[int, ...]
    outs: tuple[int, ...]
    ins: tuple[int, ...]
    host_parallel_safe: bool
    global_size: LaunchSize
    local_size: LaunchSize | None
    ast: UOp
    params: tuple[UOp, ...]
    """The PARAM of each argument, in argument order."""
    variables: tuple[Variable, ...]
    """The variables a caller supplies (launch variables such as ``core_id`` excluded)."""
    name: str = ""
    """The kernel's name, as errors show it."""
    static_dims: ConcreteLaunchDims | None = field(default=None)
    """Launch sizes evaluated once, when they depend on no variable."""
    fixed: Mapping[str, int] = field(default_factory=dict)
    """Variables the kernel fixes itself (``BIND``), with their values: a caller never passes them."""
    code_bytes: int = 0
    """The size of the compiled code, which the method cache counts against its memory budget."""
    program_uop: UOp | None = None
    """The compiled artifact: PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY) with the kernel's metadata
    (``ProgramSpec.from_uop`` reads it back). SINK is the lowered kernel; BINARY holds the compiled bytes,
    empty for a backend that compiles the source when it loads it. A kernel run in stages (a split
    reduction) carries its last stage, the one that writes the kernel's outputs."""

    def check_vars(self, var_vals: Mapping[str, int], fixed: frozenset[str] = frozenset()) -> dict[str, int]:
        """Every variable present, known and within bounds; returns the values by name."""
        known = {v.name for v in self.variables}
        bound = sorted(name for name in var_vals if name in self.fixed)
        if bound:
            raise VariableError(f"variable {bound[0]} is fixed in this kernel (BIND) and cannot be passed",
                                kernel=self.name, stage="bind", value=bound[0])
        unknown = sorted(set(var_vals) - known - fixed)
        if unknown:
            raise VariableError(f"unknown variable {unknown[0]}; this kernel has {sorted(known) or 'none'}",
                                kernel=self.name, stage="bind", value=unknown[0])
        values = {}
        for var in self.variables:
            if var.name not in var_vals:
                raise VariableError(f"missing runtime value for variable {var.name}", kernel=self.name,
                                    stage="bind", value=var.name)
            values[var.name] = var.checked(var_vals[var.name], kernel=self.name, stage="bind")
        return values

    def check_buffers(self, buffers: Sequence[Buffer], var_vals: Mapping[str, int]) -> None:
        if len(buffers) != len(self.params):
            raise BufferMismatchError(f"kernel takes {len(self.params)} buffers, got {len(buffers)}",
                                      kernel=self.name, stage="bind", value=len(buffers))
        for position, (buf, param) in enumerate(zip(buffers, self.params, strict=True)):
            self._check_buffer(position, buf, param, var_vals)

    def _check_buffer(self, position: int, buf: Buffer, param: UOp, var_vals: Mapping[str, int]) -> None:
        if not isinstance(buf, Buffer):
            raise BufferMismatchError(f"argument {position} is not a svod.Buffer", kernel=self.name, stage="bind",
                                      value=type(buf).__name__)
        want = pointee(param)
        if buf.dtype != want:
            raise BufferMismatchError(f"argument {position} is {buf.dtype.name}, the kernel needs {want.name}",
                                      kernel=self.name, stage="bind", value=buf.dtype.name)
        if not _same_memory(buf.device_object, self.device):
            raise BufferMismatchError(f"argument {position} lives on {buf.device}, the kernel runs on "
                                      f"{self.device.name}", kernel=self.name, stage="bind", value=buf.device)
        if buf.readonly and param.arg in self.outs:
            raise BufferMismatchError(f"argument {position} shares a read-only array's memory, and the kernel "
                                      "writes it", kernel=self.name, stage="bind", value=position)
        needed = evaluate(param_size(param), var_vals)
        if buf.size < needed:
            raise BufferMismatchError(f"argument {position} has {buf.size} elements, the kernel needs {needed}",
                                      kernel=self.name, stage="bind", value=buf.size)

    def vals(self, var_vals: Mapping[str, int]) -> list[int]:
        """Variable values in program order; launch variables get a placeholder the program overrides, and
        fixed variables their values."""
        return [0 if name == CORE_ID else self.fixed[name] if name in self.fixed else var_vals[name]
                for name in self.var_names]

    def launch_dims(self, var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        if self.static_dims is not None:
            return self.static_dims
        return ProgramSpec.resolve_launch_dims(self.global_size, self.local_size, {**var_vals, **self.fixed})

    def __call__(self, buffers: Sequence[Buffer], var_vals: Mapping[str, int] | None = None) -> None:
        """Check everything, then run once."""
        values = self.check_vars(var_vals or {})
        self.check_buffers(buffers, {**values, **self.fixed})
        dims = self.launch_dims(values)
        addresses: list[Any] = [b.address for b in buffers]
        self.program.execute(addresses, self.vals(values), dims.global_size, dims.local_size)


def _same_memory(a: Device, b: Device) -> bool:
    return a is b or a.device == b.device or (a.caps.host_memory and b.caps.host_memory)
