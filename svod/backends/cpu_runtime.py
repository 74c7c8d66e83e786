"""The CPU runtime: the kernel ABI, the thread team, and the ``Program`` both CPU compilers load into and its
bound launch (what svod reads of the host CPU is ``svod.backends.cpu_host``'s).

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
from typing import Any

from svod.backends.cpu_calls import array_call
from svod.backends.cpu_team import thread_team
from svod.device import CallArray, CallScalar, HostArguments, ProgramBase
from svod.errors import SvodError

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


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

    def array_call(self, vals: Sequence[int], global_size: tuple[int, int, int], arguments: int,
                   arrays: Sequence[CallArray], apart: Sequence[tuple[int, int]], scalars: Sequence[CallScalar] = ()
                   ) -> Callable[[tuple[Any, ...]], bool] | None:
        """A one-worker launch's native call (``svod.backends.cpu_calls``): a launch on the team is not one a tiny
        call makes, and its job block is this launch's alone."""
        if global_size[0] != 1:
            return None
        return array_call(self.program.address, vals, arguments, arrays, apart, scalars)

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
