"""What crosses the renderer -> compiler -> runtime boundaries: ``ProgramSpec`` and ``CompiledSpec``.

::

    Renderer.render(ast) ──> ProgramSpec ──> Compiler.compile ──> CompiledSpec ──> runtime factory ──> Program

Both specs describe one kernel: its buffers (``globals``, and which are written ``outs`` and read
``ins``), its symbolic variables, and its launch sizes as UOp expressions that are evaluated per dispatch.
All of it is derived from the kernel SINK in one walk (``derive_metadata``); a PROGRAM UOp may carry
``KernelMetadata`` that overrides what was derived.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from svod.device.caps import CORE_ID, parse_launch_index
from svod.device.launch import ONE, ONES, ConcreteLaunchDims, LaunchShape, LaunchSize
from svod.dtype import DeviceSpec, DType
from svod.errors import GraphError, VariableError
from svod.ir import Ops, UOp
from svod.ir.ops import STAGES
from svod.ir.uop import check_var_value, memory_of

T = TypeVar("T")
__all__ = ["ONE", "ONES", "CompiledSpec", "KernelMetadata", "LaunchSize", "ProgramSpec", "Variable", "derive_metadata",
           "entry_symbol", "kernel_variables", "scalar_bits"]


@dataclass(frozen=True, slots=True)
class Variable:
    """A symbolic integer of a kernel and its inclusive bounds. A runtime scalar (``KernelBuilder.scalar``)
    is a variable holding the bits of a value of ``scalar`` dtype: callers pass the value."""

    name: str
    min: int
    max: int
    scalar: DType | None = None

    def checked(self, value: object, *, kernel: str | None = None, stage: str | None = None) -> int:
        """The integer the kernel receives for ``value``, checked: a scalar's bits, or the value itself."""
        if self.scalar is not None:
            value = scalar_bits(self.name, value, self.scalar, kernel=kernel, stage=stage)
        return check_var_value(self.name, value, self.min, self.max, kernel=kernel, stage=stage)


_SIGNED_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def scalar_bits(name: str, value: object, dtype: DType, *, kernel: str | None = None,
                stage: str | None = None) -> int:
    """The bits of ``value`` as a ``dtype``, read as a signed integer of its size: how a runtime scalar
    travels in a kernel's integer variables."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not number or (not dtype.is_float and not isinstance(value, (int, np.integer))):
        kind = "a number" if dtype.is_float else "an integer"
        raise VariableError(f"scalar {name} must be {kind} ({dtype.name})", kernel=kernel, stage=stage, value=value)
    if not dtype.is_float and not dtype.min <= int(value) <= dtype.max:  # type: ignore[call-overload]
        raise VariableError(f"scalar {name}={value} does not fit {dtype.name}", kernel=kernel, stage=stage,
                            value=value)
    with np.errstate(over="ignore"):
        typed = np.array(value, dtype=dtype.numpy)
    return int(typed.view(_SIGNED_OF_SIZE[dtype.itemsize]))


def entry_symbol(name: str, kernel: UOp) -> str:
    """The symbol a kernel's function is compiled to: prefixed, so a kernel called ``sqrt`` never collides
    with a C library function, and suffixed with the lowered kernel's key, so kernels of one name can
    share a code object (one JIT engine holds every LLVM kernel). Derived once, when a spec is made; loaders
    read it from the compiled spec."""
    return f"svod_{name}_{kernel.key[:12]}"


@dataclass(frozen=True, slots=True)
class KernelMetadata:
    """Buffers, variables and launch sizes of a kernel. Empty fields and all-ones sizes mean "not set"."""

    name: str = ""
    vars: tuple[Variable, ...] = ()
    globals: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    ins: tuple[int, ...] = ()
    global_size: LaunchSize = ONES
    local_size: LaunchSize | None = ONES
    status_slot: int | None = None
    """The buffer slot of the status buffer bounds-checked accesses report to, if the kernel has one."""
    fixed: tuple[tuple[str, int], ...] = ()
    """Variables the kernel fixes (``BIND``), with their values."""
    entry: str = ""
    """The symbol the kernel's function is compiled to."""
    loop_turns: UOp | None = None
    """Where the device stops a work item's loops after ``DeviceCaps.max_loop_turns`` and no bound proves
    the kernel within it: how many times its loops may come round in one work item, which each launch
    checks for its variable values (``svod.device.launch.most``)."""

    @property
    def var_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.vars)

    @property
    def has_launch_dims(self) -> bool:
        return self.global_size != ONES or self.local_size != ONES



def _param_slot(index: UOp) -> int | None:
    """The PARAM slot a LOAD or STORE goes through (looking under a CAST and through AFTER), or None for
    other memory."""
    if index.op is Ops.CAST:
        index = index.src[0]
    if index.op is not Ops.INDEX:
        return None
    buffer = memory_of(index.src[0])
    return int(buffer.arg) if buffer.op is Ops.PARAM else None


def kernel_variables(nodes: Iterable[UOp]) -> list[UOp]:
    """The variables among ``nodes`` a kernel receives in its ``vals``, in slot order: by name. A CPU worker's
    number (``core_id``) is not one of them: the CPU ABI passes it as an argument of its own."""
    return sorted((u for u in nodes if u.op is Ops.DEFINE_VAR and u.arg[0] != CORE_ID), key=lambda u: u.arg[0])


def derive_metadata(ast: UOp) -> KernelMetadata:
    """Everything a spec needs to know about ``ast``, from one walk of its toposort."""
    variables: dict[str, Variable] = {}
    params: set[int] = set()
    outs: set[int] = set()
    ins: set[int] = set()
    global_size = list(ONES)
    local_size: list[UOp] | None = list(ONES)
    for node in ast.toposort():
        if node.op is Ops.DEFINE_VAR and node.arg[0] == CORE_ID:
            global_size[0] = UOp.index_const(node.arg[2] + 1)
        elif node.op is Ops.DEFINE_VAR:
            var = Variable(*node.arg)
            if variables.setdefault(var.name, var) != var:
                raise GraphError(f"variable {var.name} is defined with two different bounds", stage="render",
                                 value=(variables[var.name], var))
        elif node.op is Ops.BITCAST and node.src[0].op is Ops.DEFINE_VAR:  # a runtime scalar's value
            variables[node.src[0].arg[0]] = dataclasses.replace(variables[node.src[0].arg[0]], scalar=node.dtype)
        elif node.op is Ops.PARAM:
            params.add(int(node.arg))
        elif node.op in (Ops.STORE, Ops.ATOMIC) and (slot := _param_slot(node.src[0])) is not None:
            outs.add(slot)
        elif node.op is Ops.LOAD and (slot := _param_slot(node.src[0])) is not None:
            ins.add(slot)
        elif node.op is Ops.SPECIAL:
            local_size = _apply_special(node, global_size, local_size)
    return KernelMetadata(
        name=ast.arg if ast.op is Ops.SINK and isinstance(ast.arg, str) else "",
        vars=tuple(variables[name] for name in sorted(variables)),
        globals=tuple(sorted(params)), outs=tuple(sorted(outs)), ins=tuple(sorted(ins)),
        global_size=_as_size(global_size),
        local_size=None if local_size is None else _as_size(local_size),
    )


def _apply_special(node: UOp, global_size: list[UOp], local_size: list[UOp] | None) -> list[UOp] | None:
    """A group index sets global N, a local index local N, a global index global N with no local size;
    other names, and axes past 2, set nothing."""
    parsed = parse_launch_index(node.arg) if isinstance(node.arg, str) else None
    if parsed is None or parsed[1] >= 3:
        return local_size
    kind, axis = parsed
    if kind == "group":
        global_size[axis] = node.src[0]
    elif kind == "local":
        if local_size is not None:
            local_size[axis] = node.src[0]
    else:
        global_size[axis] = node.src[0]
        return None
    return local_size


def _as_size(dims: Sequence[UOp | int]) -> LaunchSize:
    if len(dims) != 3:
        raise GraphError("a launch size has exactly three dimensions", stage="launch", value=tuple(dims))
    x, y, z = (d if isinstance(d, UOp) else UOp.index_const(d) for d in dims)
    return (x, y, z)


class ProgramSpec:
    """A rendered kernel: source plus the metadata a compiler and a runtime need to run it."""

    def __init__(self, name: str, src: str, device: DeviceSpec | str, ast: UOp) -> None:
        self.name = name
        self.src = src
        self.device = DeviceSpec.parse(device)
        self.ast = ast
        self.global_size: LaunchSize = ONES
        self.local_size: LaunchSize | None = ONES
        self.vars: list[Variable] = []
        self.var_names: list[str] = []
        self.globals: list[int] = []
        self.outs: list[int] = []
        self.ins: list[int] = []
        self.buf_count = 0
        self.status_slot: int | None = None
        self.loop_turns: UOp | None = None
        self.fixed_vars: dict[str, int] = {}
        self.entry = entry_symbol(name, ast)
        self.program: UOp | None = None
        """The PROGRAM UOp this spec was read from (``from_uop``), if any."""

    def __repr__(self) -> str:
        return (f"ProgramSpec({self.name!r}, device={self.device}, globals={self.globals}, outs={self.outs}, "
                f"vars={self.var_names})")

    def add_var(self, var: Variable) -> None:
        if all(v.name != var.name for v in self.vars):
            self.vars = sorted([*self.vars, var], key=lambda v: v.name)
            self.var_names = [v.name for v in self.vars]

    def set_var_names(self, names: Iterable[str]) -> None:
        self.var_names = list(names)

    def set_work_sizes(self, global_size: Sequence[int], local_size: Sequence[int] | None) -> None:
        self.set_launch_dims(_as_size(global_size), None if local_size is None else _as_size(local_size))

    def set_launch_dims(self, global_size: Sequence[UOp | int], local_size: Sequence[UOp | int] | None) -> None:
        self.global_size = _as_size(global_size)
        self.local_size = None if local_size is None else _as_size(local_size)

    def set_buffer_metadata(self, globals_: Iterable[int], outs: Iterable[int], ins: Iterable[int]) -> None:
        self.globals, self.outs, self.ins = sorted(set(globals_)), sorted(set(outs)), sorted(set(ins))
        self.buf_count = len(self.globals)

    def apply_metadata(self, meta: KernelMetadata, *, only_set: bool = False) -> None:
        """Take ``meta``'s fields; with ``only_set``, only the non-empty ones (metadata precedence)."""
        def take(given: tuple[T, ...], current: Sequence[T]) -> Sequence[T]:
            return given if given or not only_set else current

        self.vars = list(take(meta.vars, self.vars))
        self.var_names = [v.name for v in self.vars]
        self.set_buffer_metadata(take(meta.globals, self.globals), take(meta.outs, self.outs),
                                 take(meta.ins, self.ins))
        if meta.has_launch_dims or not only_set:
            self.set_launch_dims(meta.global_size, meta.local_size)
        if meta.status_slot is not None or not only_set:
            self.status_slot = meta.status_slot
        if meta.loop_turns is not None or not only_set:
            self.loop_turns = meta.loop_turns
        self.fixed_vars = dict(take(meta.fixed, tuple(self.fixed_vars.items())))
        self.entry = meta.entry or self.entry

    def apply_derived_metadata_from_ast(self) -> None:
        self.apply_metadata(derive_metadata(self.ast))

    @property
    def launch(self) -> LaunchShape:
        """The launch sizes, with the values of the variables the kernel fixes."""
        return LaunchShape(self.global_size, self.local_size, tuple(self.fixed_vars.items()))

    def launch_dims(self, var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        return self.launch.dims(var_vals)

    @staticmethod
    def resolve_launch_dims(global_size: Sequence[UOp], local_size: Sequence[UOp] | None,
                            var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        return LaunchShape(_as_size(global_size), None if local_size is None else _as_size(local_size)).dims(var_vals)

    @property
    def metadata(self) -> KernelMetadata:
        """The spec's fields as a PROGRAM carries them."""
        return KernelMetadata(name=self.name, vars=tuple(self.vars), globals=tuple(self.globals), outs=tuple(self.outs),
                              ins=tuple(self.ins), global_size=self.global_size, local_size=self.local_size,
                              status_slot=self.status_slot, fixed=tuple(self.fixed_vars.items()), entry=self.entry,
                              loop_turns=self.loop_turns)

    @staticmethod
    def from_uop(program: UOp) -> ProgramSpec:
        """The spec of a PROGRAM UOp: stages checked, metadata derived, attached metadata applied on top."""
        sink, device, source = _stages_of(program)
        derived = derive_metadata(sink)
        spec = ProgramSpec(derived.name or "kernel", source.arg, device.arg, sink)
        spec.apply_metadata(derived)
        if program.arg is not None:
            spec.apply_metadata(_metadata_of(program), only_set=True)
            spec.name = program.arg.name or spec.name
        spec.program = program
        return spec

    @staticmethod
    def of(program: UOp) -> ProgramSpec:
        """The spec of a PROGRAM whose metadata is whole, as svod's pipeline derives it once
        (``svod.codegen.pipeline.program``): read from it, nothing derived again. (``from_uop`` takes a PROGRAM
        made by hand, whose metadata says only what the SINK does not.)"""
        sink, device, source = _stages_of(program)
        meta = _metadata_of(program)
        spec = ProgramSpec(meta.name, source.arg, device.arg, sink)
        spec.apply_metadata(meta)
        spec.program = program
        return spec


def _stages_of(program: UOp) -> tuple[UOp, UOp, UOp]:
    """A PROGRAM's SINK, DEVICE and SOURCE, once its stages are checked."""
    if not isinstance(program, UOp) or program.op is not Ops.PROGRAM:
        raise GraphError("expected PROGRAM", stage="PROGRAM", value=program.op if isinstance(program, UOp) else program)
    stages = program.src
    for position, (want, required) in enumerate(zip(STAGES, (True, True, True, True, False), strict=True)):
        if position >= len(stages):
            if required:
                raise GraphError(f"PROGRAM is missing its {want.name} stage", stage=want.name)
            continue
        if stages[position].op is not want:
            raise GraphError(f"PROGRAM stage {position} must be {want.name}", stage=want.name,
                             value=stages[position].op)
    if len(stages) > len(STAGES):
        raise GraphError("PROGRAM has more stages than SINK, DEVICE, LINEAR, SOURCE, BINARY", stage="BINARY",
                         value=len(stages))
    return stages[0], stages[1], stages[3]


def _metadata_of(program: UOp) -> KernelMetadata:
    if not isinstance(program.arg, KernelMetadata):
        raise GraphError("PROGRAM metadata must be KernelMetadata", stage="PROGRAM", value=program.arg)
    return program.arg


@dataclass(frozen=True, slots=True)
class CompiledSpec:
    """A compiled kernel: ``src`` for JIT backends (``bytes`` empty) or ``bytes`` for AOT ones, plus what a
    launch needs, the entry symbol among it."""

    name: str
    src: str | None
    bytes: builtins.bytes
    ast: UOp
    var_names: tuple[str, ...]
    global_size: LaunchSize
    local_size: LaunchSize | None
    buf_count: int
    entry: str = ""
    loop_turns: UOp | None = None
    """The turns of a work item's loops each launch checks against the device's limit (``KernelMetadata``)."""
    program: UOp | None = None
    """The compiled artifact, PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY) with the kernel's metadata, where
    the spec was compiled from a rendered program (``from_spec``). BINARY holds ``bytes``."""

    @staticmethod
    def from_source(name: str, src: str, ast: UOp, buf_count: int) -> CompiledSpec:
        """A JIT kernel with no launch sizes (one work item until the caller gives some): sizes that depend on
        variables belong to the program's metadata (``from_spec``), sizes known now to
        ``from_source_with_sizes``."""
        return CompiledSpec(name, src, b"", ast, derive_metadata(ast).var_names, ONES, ONES, buf_count,
                            entry_symbol(name, ast))

    @staticmethod
    def from_bytes(name: str, data: builtins.bytes, ast: UOp) -> CompiledSpec:
        """An ahead-of-time kernel, with no launch sizes (as ``from_source``)."""
        meta = derive_metadata(ast)
        return CompiledSpec(name, None, bytes(data), ast, meta.var_names, ONES, ONES, len(meta.globals),
                            entry_symbol(name, ast))

    @staticmethod
    def from_source_with_sizes(name: str, src: str, ast: UOp, global_size: Sequence[UOp | int],
                               local_size: Sequence[UOp | int] | None, buf_count: int) -> CompiledSpec:
        meta = derive_metadata(ast)
        return CompiledSpec(name, src, b"", ast, meta.var_names, _as_size(global_size),
                            None if local_size is None else _as_size(local_size), buf_count, entry_symbol(name, ast))

    @staticmethod
    def from_spec(spec: ProgramSpec, *, src: str | None = None, data: builtins.bytes = b"") -> CompiledSpec:
        """What a compiler returns for ``spec``: its metadata, with the compiled source or bytes, and its
        PROGRAM with the BINARY stage added."""
        return CompiledSpec(spec.name, src, data, spec.ast, tuple(spec.var_names), spec.global_size,
                            spec.local_size, spec.buf_count, spec.entry, spec.loop_turns, _with_binary(spec, data))

    @property
    def launch(self) -> LaunchShape:
        return LaunchShape(self.global_size, self.local_size)


def _with_binary(spec: ProgramSpec, data: builtins.bytes) -> UOp:
    """The spec's PROGRAM with its BINARY stage and the spec's metadata, whole. (A spec built by hand, with no
    PROGRAM, gets one made of its fields, with no instruction list.)"""
    rendered = spec.program
    if rendered is None:
        return UOp.program(spec.ast, UOp.device(spec.device), UOp.linear(), UOp.source(spec.src), UOp.binary(data),
                           metadata=spec.metadata)
    sink, device, linear, source = rendered.src[:4]
    return UOp.program(sink, device, linear, source, UOp.binary(data), metadata=spec.metadata)
