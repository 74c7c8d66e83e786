"""``CachedKernel``: a compiled, loaded kernel and everything a dispatch checks and needs.

The stage its errors call ``bind`` (``check_vars``, ``check_buffers``) is the trust boundary between a user and a
kernel: it checks buffers (count, dtype, device, size for the given variable values) and variables (missing,
unknown, out of bounds) and only then hands raw addresses to the program. Nothing runs when a check fails.
(``Program.bind``, and ``bind_host`` here, check nothing: they make a launch that replays on given addresses.)
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from svod.device import (
    Buffer,
    CallArray,
    Device,
    HostArguments,
    KernelMetadata,
    Launch,
    LaunchShape,
    Program,
    Variable,
    derive_metadata,
)
from svod.device.buffer import NOT_EXPORTED, address_of, exported, shared_address
from svod.device.launch import ConcreteLaunchDims, LaunchSize, evaluate, evaluator
from svod.dtype import DType
from svod.errors import BufferMismatchError, VariableError
from svod.ir import Ops, UOp
from svod.ir.uop import param_size, pointee
from svod.runtime.parts import PartsLaunch, PartsOnHost, PartsProgram


class Argument(NamedTuple):
    """What a kernel argument must be: derived once per kernel, checked on every call."""

    dtype: DType
    numpy_dtype: np.dtype
    static_size: int | None
    """The element count it needs when that is a constant; otherwise ``size`` is evaluated per call."""
    size: UOp
    written: bool
    read: bool


def kernel_name(ast: UOp, first: KernelMetadata) -> str:
    """A kernel's name, as errors show it: its SINK's, or the name its first part's PROGRAM has."""
    return ast.arg if isinstance(ast.arg, str) and ast.arg else first.name


@dataclass(frozen=True, eq=False)
class CachedKernel:
    """One entry of the method cache: the kernel's AST, the compiled PROGRAM of each part it runs as, and the
    loaded ``Program`` that runs them. What a dispatch checks and needs is read from the PROGRAMs' metadata
    (derived once, when the pipeline made them) the first time it is asked for."""

    ast: UOp
    device: Device
    program_uops: tuple[UOp, ...]
    """PROGRAM(SINK, DEVICE, LINEAR, SOURCE, BINARY) of every part the kernel runs as, in order, each with
    its metadata: SINK is the part's kernel, lowered; BINARY holds the compiled bytes, empty for a backend that
    compiles the source when it loads it. What a plan bundle stores to load the kernel without compiling."""
    program: Program
    """What runs them, loaded: the one part's program on the user's buffers, or a ``PartsProgram`` (not a PROGRAM
    UOp: those are ``program_uops``)."""

    @functools.cached_property
    def _metadata(self) -> tuple[KernelMetadata, ...]:
        return tuple(p.arg for p in self.program_uops)

    @property
    def program_uop(self) -> UOp:
        """The PROGRAM of the last part, the one that writes the kernel's outputs."""
        return self.program_uops[-1]

    @functools.cached_property
    def name(self) -> str:
        """The kernel's name, as errors show it."""
        return kernel_name(self.ast, self._metadata[0])

    @functools.cached_property
    def entry_point(self) -> str:
        """The symbol the kernel (its first part) is compiled to: its name, made unique by the kernel's key."""
        return self._metadata[0].entry

    @functools.cached_property
    def code(self) -> str:
        return "\n".join(p.src[3].arg for p in self.program_uops)

    @functools.cached_property
    def code_bytes(self) -> int:
        """The size of the compiled code, which the method cache counts against its memory budget: the bytes,
        or the source of a backend that loads source."""
        return sum(len(p.src[4].arg) or len(p.src[3].arg) for p in self.program_uops)

    @property
    def host_parallel_safe(self) -> bool:
        return self.device.caps.overlaps_on_host

    @functools.cached_property
    def params(self) -> tuple[UOp, ...]:
        """The PARAM of each argument, in argument order."""
        return tuple(sorted((u for u in self.ast.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg))

    @functools.cached_property
    def fixed(self) -> Mapping[str, int]:
        """Variables the kernel fixes itself (``BIND``), with their values: a caller never passes them."""
        return {name: value for meta in self._metadata for name, value in meta.fixed}

    @functools.cached_property
    def variables(self) -> tuple[Variable, ...]:
        """The variables a caller supplies: those the kernel declares (one lowering folded away is still one)
        and those its parts take, less the ones it fixes."""
        bound = {u.src[0].arg[0] for u in self.ast.toposort() if u.op is Ops.BIND}
        declared = (v for v in derive_metadata(self.ast).vars if v.name not in bound)
        found = {v.name: v for v in (*declared, *(v for meta in self._metadata for v in meta.vars))
                 if v.name not in self.fixed}
        return tuple(found[name] for name in sorted(found))

    @functools.cached_property
    def variable_names(self) -> frozenset[str]:
        """The names of ``variables``: what a call passes, exactly, on the short way of ``check_vars``."""
        return frozenset(v.name for v in self.variables)

    @functools.cached_property
    def var_names(self) -> tuple[str, ...]:
        """The order of the program's ``vals``: the one part's, or those of a ``PartsProgram``."""
        return self.program.var_names if isinstance(self.program, PartsProgram) else self._metadata[0].var_names

    @functools.cached_property
    def launch(self) -> LaunchShape:
        """The launch sizes of a dispatch, from the variable values (sizes no variable changes: evaluated once);
        none for a ``PartsProgram``, whose parts have their own."""
        return LaunchShape() if isinstance(self.program, PartsProgram) else self._metadata[0].launch

    def _user_slots(self, field: str) -> tuple[int, ...]:
        user = {p.arg for p in self.params}
        return tuple(sorted({slot for meta in self._metadata for slot in getattr(meta, field) if slot in user}))

    @functools.cached_property
    def globals(self) -> tuple[int, ...]:
        return tuple(p.arg for p in self.params)

    @functools.cached_property
    def outs(self) -> tuple[int, ...]:
        """The arguments some part writes."""
        return self._user_slots("outs")

    @functools.cached_property
    def ins(self) -> tuple[int, ...]:
        """The arguments some part reads."""
        return self._user_slots("ins")

    @property
    def global_size(self) -> LaunchSize:
        return self.launch.global_size

    @property
    def local_size(self) -> LaunchSize | None:
        return self.launch.local_size

    def check_vars(self, var_vals: Mapping[str, int], fixed: frozenset[str] = frozenset()) -> dict[str, int]:
        """Every variable present, known and within bounds; returns the values by name."""
        if not var_vals and not self.variables:
            return {}
        known = self.variable_names
        if var_vals.keys() == known:  # neither fixed, unknown nor missing: each checked
            return {var.name: var.checked(var_vals[var.name], kernel=self.name, stage="bind")
                    for var in self.variables}
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

    @functools.cached_property
    def layout(self) -> tuple[Argument, ...]:
        """Per argument, derived once: what a call checks it against."""
        return tuple(Argument(pointee(p), pointee(p).numpy, int(size.arg) if (size := param_size(p)).op is Ops.CONST
                              else None, size, p.arg in self.outs, p.arg in self.ins) for p in self.params)

    @functools.cached_property
    def sizes(self) -> tuple[int | Callable[[Mapping[str, int]], int], ...]:
        """Per argument, the element count it needs: a number, or a function of the variable values."""
        return tuple(layout.static_size if layout.static_size is not None else evaluator(layout.size)
                     for layout in self.layout)

    def check_buffers(self, buffers: Sequence[Buffer], var_vals: Mapping[str, int]) -> list[Any]:
        """Check every argument for these variable values; what the program receives for each."""
        if len(buffers) != len(self.params):
            raise BufferMismatchError(f"kernel takes {len(self.params)} buffers, got {len(buffers)}",
                                      kernel=self.name, stage="bind", value=len(buffers))
        needed = [self._check_buffer(position, buf, layout, var_vals)
                  for position, (buf, layout) in enumerate(zip(buffers, self.layout, strict=True))]
        addresses = [buf.address for buf in buffers]
        if self.written_positions and len(buffers) > 1:
            self._check_unshared(buffers, needed, addresses)
        return addresses

    def _check_unshared(self, buffers: Sequence[Buffer], needed: Sequence[int], addresses: Sequence[Any]) -> None:
        """A buffer the kernel writes shares no memory with another argument: lowering proves the kernel free
        of races buffer by buffer, and the CPU renderers tell the compiler so (LLVM alias scopes, C
        ``restrict``). Host memory compares addresses (two buffers may wrap one numpy array), other memory
        offsets into one allocation."""
        host = self.device.caps.host_memory
        shared = _written_overlap(addresses if host else [buf.byte_offset for buf in buffers], needed,
                                  self.itemsizes, self.written_positions,
                                  None if host else [buf.base for buf in buffers])
        if shared is not None:
            raise BufferMismatchError(f"argument {shared[0]} is written and shares memory with argument {shared[1]}; "
                                      "pass one buffer, or disjoint ones", kernel=self.name, stage="bind", value=shared,
                                      buffers=shared)

    @functools.cached_property
    def itemsizes(self) -> tuple[int, ...]:
        return tuple(layout.dtype.itemsize for layout in self.layout)

    @functools.cached_property
    def written_positions(self) -> tuple[int, ...]:
        return tuple(position for position, layout in enumerate(self.layout) if layout.written)

    def _check_buffer(self, position: int, buf: Buffer, layout: Argument, var_vals: Mapping[str, int]) -> int:
        """Check one argument; the elements the kernel may touch in it."""
        if not isinstance(buf, Buffer):
            raise BufferMismatchError(f"argument {position} is not a svod.Buffer", kernel=self.name, stage="bind",
                                      value=type(buf).__name__, buffers=(position,))
        want, _, static_size, size, written, _ = layout
        if buf.dtype != want:
            raise BufferMismatchError(f"argument {position} is {buf.dtype.name}, the kernel needs {want.name}",
                                      kernel=self.name, stage="bind", value=buf.dtype.name,
                                      buffers=(position,))
        if not _same_memory(buf.device_object, self.device):
            raise BufferMismatchError(f"argument {position} lives on {buf.device}, the kernel runs on "
                                      f"{self.device.name}", kernel=self.name, stage="bind", value=buf.device,
                                      buffers=(position,))
        if buf.readonly and written:
            raise BufferMismatchError(f"argument {position} shares a read-only array's memory, and the kernel "
                                      "writes it", kernel=self.name, stage="bind", buffers=(position,))
        needed = static_size if static_size is not None else evaluate(size, var_vals)
        if buf.size < needed:
            raise BufferMismatchError(f"argument {position} has {buf.size} elements, the kernel needs {needed}",
                                      kernel=self.name, stage="bind", value=buf.size,
                                      buffers=(position,))
        return needed

    def vals(self, var_vals: Mapping[str, int]) -> list[int]:
        """Variable values in program order, fixed variables with their values."""
        return [self.fixed[name] if name in self.fixed else var_vals[name] for name in self.var_names]

    def launch_dims(self, var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        return self.launch.dims(var_vals)

    def run_on_arrays(self, arrays: Sequence[Any], var_vals: Mapping[str, int]) -> bool:
        """Run on numpy arrays in place (host-memory devices) when that is plainly right: each array of the
        argument's dtype, C-contiguous, aligned, large enough, writeable if written, and no written one
        overlapping another. Otherwise do nothing and return False: the caller takes the general path,
        which copies what cannot be shared and reports what is wrong."""
        layout = self.layout
        if len(arrays) != len(layout):
            return False
        reused = self._reused
        if reused is not None and reused.native is not None and not var_vals and reused.native(tuple(arrays)):
            return True
        dispatch = self._dispatch_values(var_vals)
        needed = dispatch.needed
        exportable = self._exportable
        starts, ends = [], []
        for position, (numpy_dtype, itemsize, written) in enumerate(self._array_checks):  # not zip(strict=True):
            array = arrays[position]  # the lengths are equal, and a strict zip costs more than the rest of the loop
            if type(array) is not np.ndarray or (array.dtype is not numpy_dtype and array.dtype != numpy_dtype) \
                    or array.size < needed[position]:
                return False
            start = None
            if exportable[position]:  # one call that checks the flags too, where the last array there passed
                try:
                    start = address_of(exported(array))
                except NOT_EXPORTED:
                    exportable[position] = False
            if start is None:
                start = shared_address(array, itemsize, written)
                if start is None:
                    return False
                exportable[position] = bool(array.flags.writeable and array.size)
            elif start % itemsize:
                return False
            starts.append(start)
            ends.append(start + array.nbytes)
        for first, second in self._apart:
            if starts[first] < ends[second] and starts[second] < ends[first] and starts[first] < ends[first] \
                    and starts[second] < ends[second]:
                return False
        self.launch_at(starts, dispatch)
        if reused is not None and not reused.tried and not var_vals:
            reused.tried = True
            if isinstance(reused.host, HostArguments):
                reused.native = reused.host.array_call(dispatch.vals, dispatch.dims.global_size, len(arrays),
                                                       self.call_arrays(list(enumerate(arrays))), self._apart)
        return True

    def call_arrays(self, arrays: Sequence[tuple[int, np.ndarray]]) -> list[CallArray]:
        """What a native call (``HostArguments.array_call``) checks of arrays like ``arrays`` (each by its position
        among a call's arguments), this kernel's arguments in order: their dtypes, shapes, and which it writes."""
        return [CallArray(position, array.dtype, array.shape, layout.written)
                for (position, array), layout in zip(arrays, self.layout, strict=True)]

    @functools.cached_property
    def _array_checks(self) -> tuple[tuple[np.dtype, int, bool], ...]:
        """Per argument, what ``run_on_arrays`` checks an array against: its numpy dtype, itemsize, and whether
        the kernel writes it."""
        return tuple((layout.numpy_dtype, layout.dtype.itemsize, layout.written) for layout in self.layout)

    @functools.cached_property
    def _exportable(self) -> list[bool]:
        """Per argument: whether the last array ``run_on_arrays`` had there was writeable and not empty, as the
        next most likely is (``exported`` takes it, and refuses another only by raising, which costs more)."""
        return [True] * len(self.layout)

    @functools.cached_property
    def _apart(self) -> tuple[tuple[int, int], ...]:
        """The arguments that must share no memory: each pair of which one is written."""
        written, count = self.written_positions, len(self.layout)
        return tuple((first, second) for first in range(count) for second in range(first + 1, count)
                     if first in written or second in written)

    def _dispatch_values(self, var_vals: Mapping[str, int]) -> _Dispatch:
        """For the variable values ``var_vals``: the element count each argument needs, the program's values and
        the launch sizes; checked and computed, or those of the call before where it passed the same ints (a
        repeated call: an int equal to an int is the same value, where a float or a bool equal to it is not)."""
        last = self._last_dispatch.last
        if last is not None and last[0] == var_vals:
            for value in var_vals.values():
                if type(value) is not int:
                    break
            else:
                return last[1]
        values = self.check_vars(var_vals)
        sizes = {**values, **self.fixed} if self.fixed else values
        found = _Dispatch(tuple(size if isinstance(size, int) else size(sizes) for size in self.sizes),
                          self.vals(values), self.launch_dims(values))
        self._last_dispatch.last = (dict(var_vals), found)
        return found

    @functools.cached_property
    def _last_dispatch(self) -> _LastDispatch:
        return _LastDispatch()

    @functools.cached_property
    def _reused(self) -> _Reused | None:
        bound = self.bind_host()
        return None if bound is None else _Reused(bound[1])

    def launch_at(self, addresses: list[int], dispatch: _Dispatch) -> None:
        """Run on the buffers at host ``addresses`` (one per argument) with what ``dispatch`` computed: through a
        launch bound once, whose argument arrays one call at a time fills, its values set once for the
        dispatch it ran last (another thread's call meanwhile, as a program without such a launch, launches
        with arrays of its own)."""
        reused = self._reused
        if reused is not None and reused.lock.acquire(False):  # (False: not blocking; a keyword costs a call)
            try:
                if reused.last != addresses:
                    reused.addresses[:len(addresses)] = addresses
                    reused.last = addresses
                ran = reused.ran
                if ran is None or ran[0] is not dispatch:
                    ran = reused.ran = (dispatch, reused.host.with_values(dispatch.vals, dispatch.dims.global_size,
                                                                          dispatch.dims.local_size))
                ran[1]()
            finally:
                reused.lock.release()
        else:
            dims = dispatch.dims
            self.program.execute(addresses, dispatch.vals, dims.global_size, dims.local_size)

    def array_launch(self, var_vals: Mapping[str, int], varying: Mapping[str, int]) -> ArrayLaunch | None:
        """What this kernel's launches on calls like one that ran with ``var_vals`` share (host-memory arrays of the
        same dtypes and sizes), where variables that change call to call each come from the call's argument at
        the position ``varying`` gives. None where a buffer's size or a launch size reads a varying variable, or
        the device's memory is not the host's (the general path checks and computes them then)."""
        if not self.device.caps.host_memory:
            return None
        values = self.check_vars(var_vals)
        changing = [v for v in self.variables if v.name in varying]
        names = {v.name for v in changing}
        if any(layout.static_size is None and _reads(layout.size, names) for layout in self.layout) or \
                names & set(self.launch.reads):
            return None
        order = self.var_names
        if any(v.name not in order for v in changing):  # bounded to one value, folded into the program
            return None
        return ArrayLaunch(self.vals(values), self.launch_dims(values),
                           tuple((order.index(v.name), v, varying[v.name]) for v in changing))

    def bind_host(self) -> tuple[Launch, HostArguments | PartsOnHost] | None:
        """A launch of this kernel bound once, twice: as a launch, and as the host arguments whose addresses
        point it at its buffers (``svod.device.HostArguments``, or a parts program's ``PartsOnHost``); None where
        its program has no such launch."""
        bound = self.program.bind([0] * len(self.params))
        host = bound.on_host() if isinstance(bound, PartsLaunch) else bound
        return (host, host) if isinstance(host, HostArguments | PartsOnHost) else None

    def __call__(self, buffers: Sequence[Buffer], var_vals: Mapping[str, int] | None = None) -> None:
        """Check everything, then run once."""
        values = self.check_vars(var_vals or {})
        addresses = self.check_buffers(buffers, {**values, **self.fixed} if self.fixed else values)
        dims = self.launch_dims(values)
        self.program.execute(addresses, self.vals(values), dims.global_size, dims.local_size)


class _Dispatch(NamedTuple):
    """What a dispatch computes from its variable values (``CachedKernel._dispatch_values``)."""

    needed: tuple[int, ...]
    """The element count each argument needs."""
    vals: list[int]
    dims: ConcreteLaunchDims


class _LastDispatch:
    """The variable values of the last dispatch ``CachedKernel._dispatch_values`` computed, with what it computed
    (replaced whole: a thread reads one pair or the other)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[dict[str, Any], _Dispatch] | None = None


class ArrayLaunch(NamedTuple):
    """What a kernel's launches share on calls of one signature (``CachedKernel.array_launch``)."""

    vals: list[int]
    """The variables' values in program order, the varying ones as when prepared."""
    dims: ConcreteLaunchDims
    varying: tuple[tuple[int, Variable, int], ...]
    """Each variable that changes call to call: its slot in ``vals``, itself, the argument that gives it."""


class _Reused:
    """A kernel's program bound once (``CachedKernel.launch_at``): its host arguments, their buffer
    addresses (``svod.device.HostArguments``), the lock of the call that fills them, what it filled them with
    last, and the dispatch whose values it set last with the call that runs with them."""

    __slots__ = ("addresses", "host", "last", "lock", "native", "ran", "tried")

    def __init__(self, host: HostArguments | PartsOnHost) -> None:
        self.host = host
        self.addresses = host.buffer_addresses
        self.lock = threading.Lock()
        self.last: Sequence[int] = ()
        self.ran: tuple[_Dispatch, Callable[[], None]] | None = None
        self.native: Callable[[tuple[Any, ...]], bool] | None = None
        """The native call of the arrays of the first call in place with no variable values given, where the
        device has one (``CachedKernel.run_on_arrays``)."""
        self.tried = False
        """Whether that call was asked for."""


def _reads(size: UOp, names: set[str]) -> bool:
    """Whether launch or buffer size ``size`` reads one of the variables ``names``."""
    return bool(names) and any(u.op is Ops.DEFINE_VAR and u.arg[0] in names for u in size.toposort())


def _written_overlap(starts: Sequence[int], counts: Sequence[int], itemsizes: Sequence[int],
                     written: Sequence[int], memories: Sequence[object] | None = None) -> tuple[int, int] | None:
    """The first (written argument, other argument) whose bytes ``[start, start + count * itemsize)`` meet
    (in the same one of ``memories``, when given); an empty range meets nothing."""
    for position in written:
        start = starts[position]
        end = start + counts[position] * itemsizes[position]
        for other, other_start in enumerate(starts):
            if other != position and other_start < end and start < other_start + counts[other] * itemsizes[other] \
                    and start < end and counts[other] and (memories is None or memories[position] is memories[other]):
                return position, other
    return None


def _same_memory(a: Device, b: Device) -> bool:
    return a is b or a.device == b.device or (a.caps.host_memory and b.caps.host_memory)
