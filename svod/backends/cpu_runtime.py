"""The CPU runtime: the kernel ABI, the thread team, the ``Program`` both CPU compilers load into and its
bound launch, and what svod reads of the host (its LLVM target machine, vector registers, L2 cache).

Every CPU kernel is ``void kernel(void **bufs, const int64_t *vars, int64_t core_id)``. A dispatch of
``global_size[0]`` workers runs the kernel once per ``core_id``. Workers come from libgomp's persistent
team (``GOMP_parallel``), entered through a tiny JIT-compiled trampoline, so a multi-threaded dispatch
costs a few microseconds and the GIL is released while kernels run. Where libgomp is missing, workers
run one after another on the calling thread: the results are the same. Between launches the team's
workers sleep rather than spin (``TEAM_SPIN_COUNT``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Iterator, MutableSequence, Sequence
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from svod.device import HostArguments, ProgramBase
from svod.device.caps import ASSUMED_L2_BYTES
from svod.errors import SvodError

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

_TRAMPOLINE_IR = """
define void @svod_team_entry(ptr %job) nounwind {
  %kernel = load ptr, ptr %job
  %bufs.slot = getelementptr ptr, ptr %job, i64 1
  %bufs = load ptr, ptr %bufs.slot
  %vars.slot = getelementptr ptr, ptr %job, i64 2
  %vars = load ptr, ptr %vars.slot
  %thread_num.slot = getelementptr ptr, ptr %job, i64 3
  %thread_num = load ptr, ptr %thread_num.slot
  %tid = call i32 %thread_num()
  %core_id = sext i32 %tid to i64
  call void %kernel(ptr %bufs, ptr %vars, i64 %core_id)
  ret void
}
"""


@functools.cache
def _initialize_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host_target_machine(opt: int = 3) -> Any:
    """An LLVM target machine for this CPU, with all of its features (AVX2, AVX-512 where present)."""
    _initialize_llvm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=opt, reloc="pic", codemodel="default")


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


TEAM_SPIN_COUNT = 0
"""How many turns libgomp's workers (and the launching thread, at the end of a launch) spin waiting before
they sleep (``GOMP_SPINCOUNT``), where neither ``OMP_WAIT_POLICY`` nor ``GOMP_SPINCOUNT`` is set when svod
loads libgomp: none, they sleep at once. libgomp's default, 300,000 turns, kept a worker spinning for about
5 ms of CPU after every launch, and on cores something else needs that spin is what runs instead of the work.
Measured on a 2-core EPYC VM with another process busy on about one core (medians; ``GOMP_SPINCOUNT`` 0 /
3,000 / 30,000 / 300,000): a 65,536-float saxpy right after numpy's 512x512 matmul (whose OpenBLAS workers
spin too) 0.24-0.31 / 0.36-0.48 / 1.1-1.9 / 4.7-12 ms; the same launch back to back 32-55 / 20-216 /
18-1660 / 18 us (a spin that ends before the work comes back cost about the whole spin, as if the launching
thread spun on the core its worker was woken onto); the DP sweep (nussinov, N = 500) 13.4 / - / - / 13.8 ms, its
slowest run 14 against 318 ms; Jacobi 2-D (1000x1000, 20 steps) 21 against 33-320 ms. Spinning pays back
only the wake of a sleeping worker (tens of microseconds here) on cores nothing else wants; a user whose cores
are svod's alone may set ``OMP_WAIT_POLICY=active``."""


def _load_gomp(path: str) -> ctypes.CDLL:
    """libgomp, made to read ``GOMP_SPINCOUNT=TEAM_SPIN_COUNT`` from the environment when it starts unless the
    user chose a wait policy; the environment is left as it was. (Where something loaded libgomp before svod
    did, it keeps the policy it started with.)"""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return ctypes.CDLL(path)
    os.environ["GOMP_SPINCOUNT"] = str(TEAM_SPIN_COUNT)
    try:
        return ctypes.CDLL(path)
    finally:
        del os.environ["GOMP_SPINCOUNT"]


class ThreadTeam:
    """Runs a CPU kernel on ``n`` workers at once, through libgomp's thread pool."""

    def __init__(self) -> None:
        self.error: str | None = None
        self._parallel: Any = None
        self._entry = 0
        self._thread_num = 0
        self._engine: Any = None
        path = ctypes.util.find_library("gomp") or "libgomp.so.1"
        try:
            gomp = _load_gomp(path)
        except OSError as err:
            self.error = f"libgomp not found ({err}); CPU kernels run their workers one after another"
            return
        self._parallel = gomp.GOMP_parallel
        self._parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self._parallel.restype = None
        self._thread_num = ctypes.cast(gomp.omp_get_thread_num, ctypes.c_void_p).value or 0
        module = llvm.parse_assembly(_TRAMPOLINE_IR)
        self._engine = llvm.create_mcjit_compiler(module, host_target_machine())
        self._engine.finalize_object()
        self._entry = self._engine.get_function_address("svod_team_entry")

    @property
    def parallel(self) -> bool:
        return self._parallel is not None

    def job(self, kernel: int, bufs: ctypes.Array[Any], vals: ctypes.Array[Any]) -> ctypes.Array[Any]:
        """The argument block the team's entry reads: kernel, buffers, variables, ``omp_get_thread_num``."""
        return (ctypes.c_void_p * 4)(kernel, ctypes.addressof(bufs), ctypes.addressof(vals), self._thread_num)

    def run(self, job: ctypes.Array[Any], workers: int) -> None:
        self._parallel(self._entry, ctypes.addressof(job), workers, 0)

    def addresses(self) -> tuple[int, int]:
        """``GOMP_parallel`` and the team's entry, for native code that starts the team itself (zeros
        without a team)."""
        if self._parallel is None:
            return 0, 0
        return ctypes.cast(self._parallel, ctypes.c_void_p).value or 0, self._entry


@functools.cache
def thread_team() -> ThreadTeam:
    """The process's team, made on first use (libgomp starts its threads lazily too)."""
    return ThreadTeam()


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

    __slots__ = ("bufs", "bufs_address", "job", "program", "variables", "vars_address")

    def __init__(self, program: CpuProgram, buffers: Sequence[Any]) -> None:
        self.program = program
        self.bufs = (ctypes.c_void_p * max(len(buffers), 1))(*buffers)
        self.variables = (ctypes.c_int64 * 16)()
        self.bufs_address = ctypes.addressof(self.bufs)
        self.vars_address = ctypes.addressof(self.variables)
        self.job: ctypes.Array[Any] | None = None

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None:
        if len(vals) > len(self.variables):
            self._hold(len(vals))
        variables = self.variables
        for i, value in enumerate(vals):
            variables[i] = value
        workers = global_size[0]
        if workers == 1:
            self.program.function(self.bufs_address, self.vars_address, 0)
            return
        if self.job is None:
            self.job = self.program.team_job(self.bufs, variables)
        self.program.run_job(self.job, self.bufs, variables, workers)

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
