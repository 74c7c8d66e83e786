"""The three roles a backend fills: a ``Renderer`` makes source, a ``Compiler`` compiles it, and a runtime
factory turns the result into a ``Program`` that runs."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from svod.device.spec import CompiledSpec, ProgramSpec
from svod.dtype import DeviceSpec
from svod.ir import PatternMatcher, UOp


class Launch(Protocol):
    """A program bound to its buffers once, for replay: each call passes only what changes per run, and
    may return before the device finishes (``Device.synchronize`` waits)."""

    def __call__(self, vals: Sequence[int], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None) -> None: ...


@runtime_checkable
class Program(Protocol):
    """A loaded kernel. Stateless and reentrant: one program may run on several host threads at once.

    ``buffers`` are raw addresses or backend handles in kernel argument order; ``vals`` are variable
    values in ``var_names`` order; launch sizes are the evaluated ones of this dispatch. ``execute``
    returns when the kernel has finished; ``bind`` prepares a ``Launch`` for replays.
    """

    name: str

    def execute(self, buffers: Sequence[Any], vals: Sequence[int],
                global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None: ...

    def bind(self, buffers: Sequence[Any]) -> Launch: ...


class ProgramBase(ABC):
    """What every program shares: ``bind`` that replays through ``execute``. Backends whose launches can
    be prepared (argument arrays, kernel arguments) override it."""

    @abstractmethod
    def execute(self, buffers: Sequence[Any], vals: Sequence[int],
                global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None: ...

    def bind(self, buffers: Sequence[Any]) -> Launch:
        bound = list(buffers)

        def launch(vals: Sequence[int], global_size: tuple[int, int, int],
                   local_size: tuple[int, int, int] | None) -> None:
            self.execute(bound, vals, global_size, local_size)

        return launch


@runtime_checkable
class Compiler(Protocol):
    """Turns a rendered ``ProgramSpec`` into a ``CompiledSpec``.

    ``cache_key`` names everything that changes the output (toolchain, version, target, flags): compiled
    code is cached under it, so two compilers with one key must produce interchangeable code.
    """

    cache_key: str

    def compile(self, spec: ProgramSpec) -> CompiledSpec: ...

    def compile_many(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        """Compile several kernels at once, in order (a plan's kernels, for one)."""
        ...


class CompilerBase(ABC):
    """``compile_many`` for compilers that run outside the GIL (a C compiler process, an OpenCL
    driver, nvrtc): one thread per kernel, up to the number of cores."""

    cache_key: str

    @abstractmethod
    def compile(self, spec: ProgramSpec) -> CompiledSpec: ...

    def compile_many(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        if len(specs) <= 1:
            return [self.compile(spec) for spec in specs]
        with ThreadPoolExecutor(max_workers=min(len(specs), os.cpu_count() or 1)) as pool:
            return list(pool.map(self.compile, specs))


@runtime_checkable
class Renderer(Protocol):
    """Lowers a kernel AST for ``device`` and renders it to source, as a ``ProgramSpec``."""

    device: DeviceSpec

    @property
    def cache_key(self) -> str:
        """Names every setting that changes the rendered code (with the compiler's, it keys compiled code)."""

    def render(self, ast: UOp, name: str | None = None) -> ProgramSpec: ...

    def decompositor(self) -> PatternMatcher | None: ...

    def stages(self, ast: UOp) -> tuple[UOp, ...]:
        """The kernels ``ast`` runs as, in order (itself, unless the device splits it)."""
        ...

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        """The PROGRAM of one of those kernels: SINK, DEVICE, LINEAR, SOURCE, with its metadata whole
        (``ProgramSpec.of`` reads it; ``render`` is that spec)."""
        ...


RuntimeFactory = Callable[[CompiledSpec], Program]
"""Loads a compiled kernel into a runnable ``Program``."""
