"""The LLVM pair: LLVM IR rendered for the host CPU, optimised and compiled to an object in process by
llvmlite, and loaded into LLVM's ORC JIT (LLJIT).

The compiled bytes are a relocatable object file, so the disk cache can store them and a new process
loads a kernel without running the optimiser again.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from svod.backends.cpu_host import host_target_machine
from svod.backends.cpu_replay import NativeReplayer
from svod.backends.cpu_runtime import CpuProgram
from svod.backends.elf import ET_REL, read_elf
from svod.codegen.render.llvmir import LLVMRenderer
from svod.device import CompiledSpec, CompilerBase, DeviceCaps, ProgramSpec
from svod.errors import CompileError, SvodError

OPT_LEVEL = 3
BATCH = 8
"""How many kernels ``compile_many`` puts in one LLVM module."""
LARGE_KERNEL_LINES = 3000
"""A kernel whose IR is longer than this is compiled on its own without loop vectorisation: LLVM 22's
loop vectorizer takes time quadratic in the length of a long dependent chain (seconds already at this length),
and such a kernel is compute-bound per element anyway."""
HUGE_KERNEL_LINES = 30000
"""Past this, machine code is generated at O0 (fast instruction selection and register allocation): on a
block this long the optimising backend takes many times as long as O0. The IR is still optimised at O3."""


class LLVMCompiler(CompilerBase):
    """Optimises at O3 with loop and SLP vectorisation for this CPU's name and features.

    Each group of kernels is parsed into a context of its own, which is freed with it (a context interns
    every constant and type it ever sees); each thread has its own target machine.
    """

    native_float16 = True
    """LLVM lowers half arithmetic for every CPU it targets."""
    vector_lanes = True
    """The renderer spells a register tile's row as LLVM vectors (``Ops.LANE``)."""

    def __init__(self) -> None:
        self.cpu = llvm.get_host_cpu_name()
        self.features = llvm.get_host_cpu_features().flatten()
        self._local = threading.local()
        self._runtime: LLVMRuntime | None = None
        target = hashlib.sha256(f"{self.cpu}|{self.features}".encode()).hexdigest()[:12]
        version = ".".join(map(str, llvm.llvm_version_info))
        self.cache_key = f"llvm-{version}-llvmlite{llvmlite.__version__}-{self.cpu}-{target}-O{OPT_LEVEL}-large"

    def renderer(self, caps: DeviceCaps) -> LLVMRenderer:
        return LLVMRenderer("CPU", caps, cpu=self.cpu, features=self.features)

    def loader(self) -> LLVMRuntime:
        """The runtime factory for what this compiler produces (one JIT for every device that uses it)."""
        if self._runtime is None:
            self._runtime = LLVMRuntime()
        return self._runtime

    def _target_machine(self, level: int) -> Any:
        """This thread's target machine generating code at ``level`` (LLVM objects must not be shared by
        threads)."""
        machines = getattr(self._local, "machines", None)
        if machines is None:
            machines = self._local.machines = {}
        if level not in machines:
            machines[level] = host_target_machine(level)
        return machines[level]

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        return self.compile_many([spec])[0]

    def compile_many(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        """Kernels in groups of ``BATCH``, each group one module optimised and emitted once, so the fixed
        cost of LLVM's pipelines is shared. (llvmlite serialises every LLVM call behind one process-wide
        lock, so threads could not overlap the work.) Each kernel of a group gets the group's object,
        which the disk cache stores once per kernel: the group size bounds that duplication. A large
        kernel is a group of its own (``LARGE_KERNEL_LINES``)."""
        compiled: dict[int, CompiledSpec] = {}
        lines = [spec.src.count("\n") for spec in specs]
        large = [k for k in range(len(specs)) if lines[k] > LARGE_KERNEL_LINES]
        small = [k for k in range(len(specs)) if k not in large]
        groups = [small[start:start + BATCH] for start in range(0, len(small), BATCH)] + [[k] for k in large]
        for group in groups:
            size = max(lines[k] for k in group)
            results = self._compile_group([specs[k] for k in group], vectorize_loops=size <= LARGE_KERNEL_LINES,
                                          codegen_level=0 if size > HUGE_KERNEL_LINES else OPT_LEVEL)
            compiled.update(zip(group, results, strict=True))
        return [compiled[k] for k in range(len(specs))]

    def _compile_group(self, specs: Sequence[ProgramSpec], vectorize_loops: bool,
                       codegen_level: int) -> list[CompiledSpec]:
        context, machine = llvm.create_context(), self._target_machine(codegen_level)  # a context interns for life
        module = self._parse(specs[0], context)
        for spec in specs[1:]:
            module.link_in(self._parse(spec, context))
        tuning = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        tuning.loop_vectorization = vectorize_loops
        tuning.slp_vectorization = True
        tuning.loop_unrolling = True
        passes = llvm.create_pass_builder(machine, tuning)
        passes.getModulePassManager().run(module, passes)
        data = bytes(machine.emit_object(module))
        return [CompiledSpec.from_spec(spec, data=data) for spec in specs]

    @staticmethod
    def _parse(spec: ProgramSpec, context: Any) -> Any:
        try:
            module = llvm.parse_assembly(spec.src, context=context)
            module.verify()
        except RuntimeError as err:
            raise CompileError("LLVM rejected the IR", source=spec.src, log=str(err), kernel=spec.name) from err
        return module


class LLVMRuntime(NativeReplayer):
    """Loads compiled objects into LLVM's ORC JIT, one JIT library per distinct object (and replays plans of
    them natively, as ``NativeReplayer`` does).

    A library lives as long as a program uses it: each program holds the library's resource tracker, and
    when the last one is gone (its kernel evicted from the cache, its plan dropped) LLVM unloads the code.
    An object compiled for several kernels (a plan's batch) is linked once and shared by their programs.
    The object is checked (format, machine, the kernel's symbol) before LLVM sees it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jit: Any = None
        self._libraries: dict[str, weakref.ref[Any]] = {}
        self._linked = 0

    def __call__(self, compiled: CompiledSpec) -> CpuProgram:
        if not compiled.bytes:
            raise SvodError("the LLVM runtime loads object code, and this kernel has none", kernel=compiled.name,
                            stage="load")
        symbol = compiled.entry
        elf = read_elf(compiled.bytes, ET_REL, kernel=compiled.name)
        if symbol not in elf.symbols:
            raise SvodError("the object code has no entry point of that name", kernel=compiled.name, stage="load",
                            value=symbol)
        digest = hashlib.sha256(compiled.bytes).hexdigest()
        with self._lock:
            found = self._libraries.get(digest)
            library = found() if found is not None else None
            if library is None:
                library = self._link(compiled, elf.symbols, digest)
            address = library[symbol]
        return CpuProgram(compiled.name, address, library)

    def _link(self, compiled: CompiledSpec, symbols: frozenset[str], digest: str) -> Any:
        if self._jit is None:
            self._jit = llvm.create_lljit_compiler(host_target_machine(OPT_LEVEL))
        builder = llvm.JITLibraryBuilder().add_object_img(compiled.bytes).add_current_process()
        for name in sorted(s for s in symbols if s.startswith("svod_")):
            builder.export_symbol(name)
        self._linked += 1
        try:
            library = builder.link(self._jit, f"svod-{digest[:16]}-{self._linked}")
        except RuntimeError as err:
            raise SvodError(f"cannot load the object code: {err}", kernel=compiled.name, stage="load") from err
        self._libraries = {d: ref for d, ref in self._libraries.items() if ref() is not None}
        self._libraries[digest] = weakref.ref(library)
        return library
