"""The CPU runtime: the kernel ABI, the thread team, the ``Program`` both CPU compilers load into and its
bound launch, and what svod reads of the host (its LLVM target machine, vector registers, L2 cache).

Every CPU kernel is ``void kernel(void **bufs, const int64_t *vars, int64_t core_id)``. A dispatch of
``global_size[0]`` workers runs the kernel once per ``core_id``, on svod's thread team
(``svod.backends.cpu_team``): a multi-threaded dispatch costs a few microseconds and the GIL is released
while kernels run. Where there is no team, workers run one after another on the calling thread: the results
are the same.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterator, MutableSequence, Sequence
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from svod.backends.cpu_team import thread_team
from svod.device import HostArguments, ProgramBase
from svod.device.caps import ASSUMED_L2_BYTES
from svod.errors import SvodError

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@functools.cache
def _initialize_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host_target_machine(opt: int = 3) -> Any:
    """An LLVM target machine for this CPU, with all of its features (AVX2, AVX-512 where present), for code the
    process's JIT loads: the large code model, whose references are 64-bit absolute addresses. The JIT's
    sections of one object come from separate mappings, which in a process that has loaded and unloaded
    thousands of kernels may lie more than 2 GB apart: a small model's 32-bit PC-relative reference (to a
    constant pool) then does not reach, and LLVM's loader aborted the process (``isInt<32>(RealOffset)``)."""
    _initialize_llvm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=opt, reloc="static", codemodel="large")


@functools.cache
def host_vector_registers() -> int:
    """This CPU's SIMD registers: 32 with AVX-512, else 16 (AVX2's count, and what svod assumes of other
    CPUs). Both CPU pairs compile for this CPU (LLVM for its features, C with ``-march=native``)."""
    return 32 if llvm.get_host_cpu_features().get("avx512f", False) else 16


CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
"""Where Linux describes the first core's caches: a directory per cache, each with its level, type and size."""


@functools.cache
def host_l2_bytes() -> int:
    """One core's L2 cache in bytes, as Linux describes it, or ``ASSUMED_L2_BYTES`` where it does not
    (another system, or a virtual machine that hides its caches). Zen 3 has 512 KiB, a quarter of the
    Xeon's: blocks sized for the Xeon would be read from its L3."""
    for cache in sorted(CACHES.glob("index*")):
        try:
            level, kind, size = ((cache / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        digits = size.rstrip("KM")
        if level == "2" and kind in ("Unified", "Data") and digits.isdigit() and int(digits) > 0:
            return int(digits) * scale
    return ASSUMED_L2_BYTES


class CpuProgram(ProgramBase):
    """A loaded CPU kernel. ``keepalive`` holds whatever owns the code (an LLVM engine, a shared object)."""

    def __init__(self, name: str, address: int, keepalive: Any) -> None:
        if not address:
            raise SvodError("compiled code has no entry point", kernel=name, stage="load")
        self.name = name
        self.address = address
        self.function = KERNEL_TYPE(address)
        self._keepalive = keepalive
        self._team = thread_team()

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        bufs = (ctypes.c_void_p * max(len(buffers), 1))(*buffers)
        variables = (ctypes.c_int64 * max(len(vals), 1))(*vals)
        self.launch(bufs, variables, 1 if global_size is None else global_size[0])

    def launch(self, bufs: ctypes.Array[Any], variables: ctypes.Array[Any], workers: int) -> None:
        """Run with argument arrays built by the caller."""
        if workers == 1:
            self.function(ctypes.addressof(bufs), ctypes.addressof(variables), 0)
        else:
            self.run_job(self.team_job(bufs, variables), bufs, variables, workers)

    def bind(self, buffers: Sequence[Any]) -> CpuLaunch:
        return CpuLaunch(self, buffers)

    def team_job(self, bufs: ctypes.Array[Any], variables: ctypes.Array[Any]) -> ctypes.Array[Any] | None:
        """The argument block of a multi-worker launch (None without a thread team); build it once to replay."""
        return self._team.job(self.address, bufs, variables) if self._team.parallel else None

    def run_job(self, job: ctypes.Array[Any] | None, bufs: ctypes.Array[Any], variables: ctypes.Array[Any],
                workers: int) -> None:
        if job is not None:
            self._team.run(job, workers)
            return
        for core_id in range(workers):
            self.function(ctypes.addressof(bufs), ctypes.addressof(variables), core_id)


class CpuLaunch(HostArguments):
    """A CPU kernel bound to its buffers: it owns the argument arrays, so the addresses handed to the
    kernel stay valid as long as it lives, and a replay only writes this run's variables and calls."""

    __slots__ = ("arguments", "bufs", "bufs_address", "function", "job", "program", "variables", "vars_address")

    def __init__(self, program: CpuProgram, buffers: Sequence[Any]) -> None:
        self.program = program
        self.function = program.function
        self.bufs = (ctypes.c_void_p * max(len(buffers), 1))(*buffers)
        self.variables = (ctypes.c_int64 * 16)()
        self.bufs_address = ctypes.addressof(self.bufs)
        self.vars_address = ctypes.addressof(self.variables)
        self.arguments = _one_worker(self.bufs_address, self.vars_address)
        self.job: ctypes.Array[Any] | None = None

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        variables = self.variables
        if vals:  # a kernel of no variables writes none
            count = len(vals)
            if count > len(variables):
                self._hold(count)
                variables = self.variables
            variables[:count] = vals  # type: ignore[call-overload]  # one call for them all; any sequence of ints
        workers = global_size[0]
        if workers == 1:
            self.function(*self.arguments)
            return
        if self.job is None:
            self.job = self.program.team_job(self.bufs, variables)
        self.program.run_job(self.job, self.bufs, variables, workers)

    def with_values(self, vals: Sequence[int], global_size: tuple[int, int, int],
                    local_size: tuple[int, int, int] | None) -> Callable[[], None]:
        self.variable_values(vals)
        if global_size[0] == 1:
            return functools.partial(self.function, *self.arguments)
        return functools.partial(self, list(vals), global_size, local_size)

    @property
    def buffer_addresses(self) -> ctypes.Array[Any]:
        """The buffers' addresses in argument order (``svod.device.HostArguments``): writing one points this
        launch, and a native replay's calls of it, at other memory."""
        return self.bufs

    def variable_values(self, initial: Sequence[int]) -> MutableSequence[int]:
        """The variable array (grown to hold them) set to ``initial``, as a sequence of their length: what
        the last run, native or not, used, and what the next one uses for variables no caller sets."""
        self._hold(len(initial))
        variables = self.variables
        for i, value in enumerate(initial):
            variables[i] = value
        return _ArgumentValues(variables, len(initial))

    def _hold(self, count: int) -> None:
        """Room for ``count`` variable values: a new array (and job block) where the current one is short."""
        if count > len(self.variables):
            self.variables = (ctypes.c_int64 * count)()
            self.vars_address, self.job = ctypes.addressof(self.variables), None
            self.arguments = _one_worker(self.bufs_address, self.vars_address)

    def native(self, var_count: int, team: bool = True) -> tuple[int, int, int, int]:
        """What native code needs to call this launch itself: the kernel's address, the addresses of the
        buffer and variable arrays (the latter with room for ``var_count`` values) and, if ``team``, of the
        team's job block (0 without a team). The arrays stay this launch's: its replays and native calls
        share them."""
        self._hold(var_count)
        if self.job is None and team:
            self.job = self.program.team_job(self.bufs, self.variables)
        job = ctypes.addressof(self.job) if self.job is not None else 0
        return self.program.address, self.bufs_address, self.vars_address, job


def _one_worker(bufs: int, variables: int) -> tuple[ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]:
    """The arguments of a one-worker call at the argument arrays ``bufs`` and ``variables``, as ctypes objects made
    once, so that a call converts none of them."""
    return ctypes.c_void_p(bufs), ctypes.c_void_p(variables), ctypes.c_int64(0)


class _ArgumentValues(MutableSequence[int]):
    """A launch's variable array seen as the kernel's ``vals``: what the last run, native or not, used."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, array: Any, length: int) -> None:
        self._array = array
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._array[i] for i in range(self._length)][index]
        if not -self._length <= index < self._length:
            raise IndexError(index)
        return self._array[index % self._length]

    def __setitem__(self, index: Any, value: Any) -> None:
        if not -self._length <= index < self._length:
            raise IndexError(index)
        self._array[index % self._length] = value

    def __delitem__(self, index: Any) -> None:
        raise TypeError("a kernel's variable values have a fixed length")

    def insert(self, index: int, value: int) -> None:
        raise TypeError("a kernel's variable values have a fixed length")

    def __iter__(self) -> Iterator[int]:
        return (self._array[i] for i in range(self._length))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(list(self))
