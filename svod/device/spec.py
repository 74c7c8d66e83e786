"""What crosses the renderer -> compiler -> runtime boundaries: ``ProgramSpec`` and ``CompiledSpec``.

::

    Renderer.render(ast) ──> ProgramSpec ──> Compiler.compile ──> CompiledSpec ──> runtime factory ──> Program

Both specs describe one kernel: its buffers (``globals``, and which are written ``outs`` and read
``ins``), its symbolic variables, and its launch sizes as UOp expressions that are evaluated per dispatch.
All of it is the PROGRAM's metadata (``KernelMetadata``, its arg), which svod's pipeline derives once
(``svod.codegen.pipeline.program``); both specs are views of a PROGRAM that read every field from there. A PROGRAM
made by hand is read with ``ProgramSpec.from_uop``: what its metadata does not say is derived from the kernel
SINK in one walk (``derive_metadata``).
"""

from __future__ import annotations

import builtins
import dataclasses
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from svod.device.caps import CORE_ID, parse_launch_index
from svod.device.launch import ONE, ONES, ConcreteLaunchDims, LaunchShape, LaunchSize
from svod.dtype import DeviceSpec, DType, dtypes
from svod.errors import GraphError, Stage, VariableError
from svod.ir import Ops, UOp
from svod.ir.ops import STAGES
from svod.ir.uop import check_var_value, memory_of

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

    def checked(self, value: object, *, kernel: str | None = None, stage: Stage | None = None) -> int:
        """The integer the kernel receives for ``value``, checked: a scalar's bits, or the value itself."""
        if self.scalar is not None:
            value = scalar_bits(self.name, value, self.scalar, kernel=kernel, stage=stage)
        return check_var_value(self.name, value, self.min, self.max, kernel=kernel, stage=stage)


_SIGNED_OF_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_PACKED = ((struct.Struct("=f").pack, struct.Struct("=i").unpack),
           (struct.Struct("=d").pack, struct.Struct("=q").unpack))
"""How a Python float becomes the bits of a float32 or float64 without numpy (a scalar argument's every call):
packed with the C cast numpy makes, and read back as the signed integer of its size."""


def scalar_bits(name: str, value: object, dtype: DType, *, kernel: str | None = None,
                stage: Stage | None = None) -> int:
    """The bits of ``value`` as a ``dtype``, read as a signed integer of its size: how a runtime scalar
    travels in a kernel's integer variables."""
    if type(value) is float and (dtype is dtypes.float32 or dtype is dtypes.float64):  # by identity: no hashing
        pack, unpack = _PACKED[dtype is dtypes.float64]
        try:
            return unpack(pack(value))[0]
        except OverflowError:  # past the dtype's largest finite value, where numpy's cast makes an infinity
            return _cast_bits(value, dtype)
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not number or (not dtype.is_float and not isinstance(value, (int, np.integer))):
        kind = "a number" if dtype.is_float else "an integer"
        raise VariableError(f"scalar {name} must be {kind} ({dtype.name})", kernel=kernel, stage=stage, value=value)
    if not dtype.is_float and not dtype.min <= int(value) <= dtype.max:  # type: ignore[call-overload]
        raise VariableError(f"scalar {name}={value} does not fit {dtype.name}", kernel=kernel, stage=stage,
                            value=value)
    return _cast_bits(value, dtype)


def _cast_bits(value: object, dtype: DType) -> int:
    """The bits of numpy's C cast of a number ``scalar_bits`` checked, read as a signed integer."""
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
    requirement_slot: int | None = None
    """The buffer slot of the buffer the kernel's requirements are recorded in, if it states any
    (``svod.codegen.requirements``): int32, one element a requirement, set where it fails."""
    requirements: tuple[str, ...] = ()
    """The message of each requirement, in the order of its element."""
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

    @property
    def launch(self) -> LaunchShape:
        """The launch sizes, with the values of the variables the kernel fixes."""
        return LaunchShape(self.global_size, self.local_size, self.fixed)


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
    """A rendered kernel: a view of its PROGRAM (SINK, DEVICE, LINEAR, SOURCE), whose metadata (``KernelMetadata``,
    the PROGRAM's arg) is the one place its name, buffers, variables, launch sizes and entry symbol are kept.
    Every field is read from there. A spec made by hand (``ProgramSpec(name, src, device, ast)``) starts with a
    PROGRAM of its own, with one work item and no buffers or variables; its setters replace that PROGRAM's
    metadata."""

    def __init__(self, name: str, src: str, device: DeviceSpec | str, ast: UOp) -> None:
        self.program = UOp.program(ast, UOp.device(device), UOp.linear(), UOp.source(src),
                                   metadata=KernelMetadata(name=name, entry=entry_symbol(name, ast)))
        """The PROGRAM this spec reads (``of``, ``from_uop``), or the one it was made with."""

    @classmethod
    def _reading(cls, program: UOp) -> ProgramSpec:
        """The spec of ``program``, whose stages and metadata are checked."""
        spec = cls.__new__(cls)
        spec.program = program
        return spec

    def __repr__(self) -> str:
        return (f"ProgramSpec({self.name!r}, device={self.device}, globals={self.globals}, outs={self.outs}, "
                f"vars={self.var_names})")

    @property
    def metadata(self) -> KernelMetadata:
        """The PROGRAM's metadata: everything below is read from it."""
        meta: KernelMetadata = self.program.arg
        return meta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def src(self) -> str:
        source: str = self.program.src[3].arg
        return source

    @src.setter
    def src(self, source: str) -> None:
        """Another source for the same kernel (edited by hand): the PROGRAM's SOURCE stage, and no BINARY."""
        self.program = self.program.replace(src=(*self.program.src[:3], UOp.source(source)))

    @property
    def device(self) -> DeviceSpec:
        return DeviceSpec.parse(self.program.src[1].arg)

    @property
    def ast(self) -> UOp:
        return self.program.src[0]

    @property
    def global_size(self) -> LaunchSize:
        return self.metadata.global_size

    @property
    def local_size(self) -> LaunchSize | None:
        return self.metadata.local_size

    @property
    def vars(self) -> list[Variable]:
        return list(self.metadata.vars)

    @property
    def var_names(self) -> list[str]:
        """The order of the kernel's ``vals``."""
        return list(self.metadata.var_names)

    @property
    def globals(self) -> list[int]:
        return list(self.metadata.globals)

    @property
    def outs(self) -> list[int]:
        return list(self.metadata.outs)

    @property
    def ins(self) -> list[int]:
        return list(self.metadata.ins)

    @property
    def buf_count(self) -> int:
        return len(self.metadata.globals)

    @property
    def status_slot(self) -> int | None:
        return self.metadata.status_slot

    @property
    def loop_turns(self) -> UOp | None:
        return self.metadata.loop_turns

    @property
    def fixed_vars(self) -> dict[str, int]:
        return dict(self.metadata.fixed)

    @property
    def entry(self) -> str:
        return self.metadata.entry

    def _set(self, meta: KernelMetadata) -> None:
        self.program = self.program.replace(arg=meta)

    def add_var(self, var: Variable) -> None:
        if all(v.name != var.name for v in self.metadata.vars):
            self._set(dataclasses.replace(self.metadata, vars=tuple(sorted((*self.metadata.vars, var),
                                                                           key=lambda v: v.name))))

    def set_var_names(self, names: Iterable[str]) -> None:
        """The kernel's ``vals`` are these of its variables, in this order."""
        known = {v.name: v for v in self.metadata.vars}
        chosen = list(names)
        unknown = [name for name in chosen if name not in known]
        if unknown:
            raise VariableError(f"variable {unknown[0]} is not one of this kernel's ({sorted(known) or 'none'})",
                                kernel=self.name, stage="render", value=unknown[0])
        self._set(dataclasses.replace(self.metadata, vars=tuple(known[name] for name in chosen)))

    def set_work_sizes(self, global_size: Sequence[int], local_size: Sequence[int] | None) -> None:
        self.set_launch_dims(_as_size(global_size), None if local_size is None else _as_size(local_size))

    def set_launch_dims(self, global_size: Sequence[UOp | int], local_size: Sequence[UOp | int] | None) -> None:
        self._set(dataclasses.replace(self.metadata, global_size=_as_size(global_size),
                                      local_size=None if local_size is None else _as_size(local_size)))

    def set_buffer_metadata(self, globals_: Iterable[int], outs: Iterable[int], ins: Iterable[int]) -> None:
        self._set(dataclasses.replace(self.metadata, globals=tuple(sorted(set(globals_))),
                                      outs=tuple(sorted(set(outs))), ins=tuple(sorted(set(ins)))))

    def apply_derived_metadata_from_ast(self) -> None:
        """Buffers, variables and launch sizes as the SINK says them (``derive_metadata``); the name and the
        entry symbol stay."""
        self._set(dataclasses.replace(derive_metadata(self.ast), name=self.name, entry=self.entry))

    @property
    def launch(self) -> LaunchShape:
        """The launch sizes, with the values of the variables the kernel fixes."""
        return self.metadata.launch

    def launch_dims(self, var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        return self.launch.dims(var_vals)

    @staticmethod
    def resolve_launch_dims(global_size: Sequence[UOp], local_size: Sequence[UOp] | None,
                            var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        return LaunchShape(_as_size(global_size), None if local_size is None else _as_size(local_size)).dims(var_vals)

    @staticmethod
    def from_uop(program: UOp) -> ProgramSpec:
        """The spec of a PROGRAM made by hand, whose metadata (if any) says only what its SINK does not: the
        stages checked, the metadata derived from the SINK, the PROGRAM's own on top (``_merged``)."""
        sink, _, _ = _stages_of(program)
        given = KernelMetadata() if program.arg is None else _metadata_of(program)
        return ProgramSpec._reading(program.replace(arg=_merged(derive_metadata(sink), given, sink)))

    @staticmethod
    def of(program: UOp) -> ProgramSpec:
        """The spec of a PROGRAM whose metadata is whole, as svod's pipeline derives it once
        (``svod.codegen.pipeline.program``): read from it, nothing derived again. (``from_uop`` takes a PROGRAM
        made by hand, whose metadata says only what the SINK does not.)"""
        _stages_of(program)
        _metadata_of(program)
        return ProgramSpec._reading(program)


def _merged(derived: KernelMetadata, given: KernelMetadata, sink: UOp) -> KernelMetadata:
    """``given`` over ``derived``, field by field where ``given`` says something: a non-empty field, launch sizes
    that are not all ones. The name falls back to ``kernel``, the entry symbol to the one of that name."""
    name = given.name or derived.name or "kernel"
    sizes = given if given.has_launch_dims else derived
    return KernelMetadata(name=name, vars=given.vars or derived.vars, globals=given.globals or derived.globals,
                          outs=given.outs or derived.outs, ins=given.ins or derived.ins,
                          global_size=sizes.global_size, local_size=sizes.local_size, status_slot=given.status_slot,
                          requirement_slot=given.requirement_slot, requirements=given.requirements,
                          fixed=given.fixed, entry=given.entry or entry_symbol(name, sink), loop_turns=given.loop_turns)


def _stages_of(program: UOp) -> tuple[UOp, UOp, UOp]:
    """A PROGRAM's SINK, DEVICE and SOURCE, once its stages are checked."""
    if not isinstance(program, UOp) or program.op is not Ops.PROGRAM:
        raise GraphError("expected PROGRAM", stage="build", value=program.op if isinstance(program, UOp) else program)
    stages = program.src
    for position, (want, required) in enumerate(zip(STAGES, (True, True, True, True, False), strict=True)):
        if position >= len(stages):
            if required:
                raise GraphError(f"PROGRAM is missing its {want.name} stage", stage="build")
            continue
        if stages[position].op is not want:
            raise GraphError(f"PROGRAM stage {position} must be {want.name}", stage="build",
                             value=stages[position].op)
    if len(stages) > len(STAGES):
        raise GraphError("PROGRAM has more stages than SINK, DEVICE, LINEAR, SOURCE, BINARY", stage="build",
                         value=len(stages))
    return stages[0], stages[1], stages[3]


def _metadata_of(program: UOp) -> KernelMetadata:
    if not isinstance(program.arg, KernelMetadata):
        raise GraphError("PROGRAM metadata must be KernelMetadata", stage="build", value=program.arg)
    return program.arg


@dataclass(frozen=True, slots=True)
class CompiledSpec:
    """A compiled kernel: its PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY), which BINARY's ``bytes`` for an
    ahead-of-time backend or SOURCE's ``src`` for a JIT one (BINARY empty) make loadable, and whose metadata
    is what a launch needs, the entry symbol among it. Every field is read from that PROGRAM."""

    program: UOp

    def __post_init__(self) -> None:
        _stages_of(self.program)
        _metadata_of(self.program)
        if len(self.program.src) < len(STAGES):
            raise GraphError("a compiled PROGRAM has its BINARY stage", stage="build", value=len(self.program.src))

    @staticmethod
    def from_source(name: str, src: str, ast: UOp, buf_count: int) -> CompiledSpec:
        """A JIT kernel with no launch sizes (one work item until the caller gives some): sizes that depend on
        variables belong to the program's metadata (``from_spec``), sizes known now to
        ``from_source_with_sizes``."""
        return CompiledSpec(_by_hand(name, src, b"", ast, ONES, ONES, buf_count))

    @staticmethod
    def from_bytes(name: str, data: builtins.bytes, ast: UOp) -> CompiledSpec:
        """An ahead-of-time kernel, with no launch sizes (as ``from_source``)."""
        return CompiledSpec(_by_hand(name, "", data, ast, ONES, ONES, None))

    @staticmethod
    def from_source_with_sizes(name: str, src: str, ast: UOp, global_size: Sequence[UOp | int],
                               local_size: Sequence[UOp | int] | None, buf_count: int) -> CompiledSpec:
        return CompiledSpec(_by_hand(name, src, b"", ast, _as_size(global_size),
                                     None if local_size is None else _as_size(local_size), buf_count))

    @staticmethod
    def from_spec(spec: ProgramSpec, *, data: builtins.bytes = b"") -> CompiledSpec:
        """What a compiler returns for ``spec``: its PROGRAM with the BINARY stage added, holding ``data`` (empty
        for a JIT backend, which loads the source)."""
        return CompiledSpec(spec.program.replace(src=(*spec.program.src[:4], UOp.binary(data))))

    @property
    def metadata(self) -> KernelMetadata:
        meta: KernelMetadata = self.program.arg
        return meta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def bytes(self) -> builtins.bytes:
        data: builtins.bytes = self.program.src[4].arg
        return data

    @property
    def src(self) -> str | None:
        """The source a JIT backend loads; None where the kernel is compiled ahead of time (``bytes``)."""
        source: str = self.program.src[3].arg
        return None if self.bytes else source

    @property
    def ast(self) -> UOp:
        return self.program.src[0]

    @property
    def var_names(self) -> tuple[str, ...]:
        return self.metadata.var_names

    @property
    def global_size(self) -> LaunchSize:
        return self.metadata.global_size

    @property
    def local_size(self) -> LaunchSize | None:
        return self.metadata.local_size

    @property
    def buf_count(self) -> int:
        return len(self.metadata.globals)

    @property
    def entry(self) -> str:
        return self.metadata.entry

    @property
    def loop_turns(self) -> UOp | None:
        """The turns of a work item's loops each launch checks against the device's limit (``KernelMetadata``)."""
        return self.metadata.loop_turns

    @property
    def launch(self) -> LaunchShape:
        return self.metadata.launch


def _by_hand(name: str, src: str, data: builtins.bytes, ast: UOp, global_size: LaunchSize,
             local_size: LaunchSize | None, buf_count: int | None) -> UOp:
    """The PROGRAM of a kernel compiled by hand: its metadata derived from ``ast``, with these launch sizes, and a
    DEVICE stage that names no device (a runtime factory loads it for its own). A buffer count that is not
    the number of ``ast``'s buffers is refused."""
    meta = derive_metadata(ast)
    if buf_count is not None and buf_count != len(meta.globals):
        raise GraphError(f"kernel {name} takes {len(meta.globals)} buffers, not {buf_count}", kernel=name,
                         stage="build", value=buf_count)
    meta = dataclasses.replace(meta, name=name, entry=entry_symbol(name, ast), global_size=global_size,
                               local_size=local_size)
    return UOp.program(ast, UOp(Ops.DEVICE, dtypes.void, (), ""), UOp.linear(), UOp.source(src), UOp.binary(data),
                       metadata=meta)
