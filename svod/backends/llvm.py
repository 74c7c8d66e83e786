"""The LLVM pair: LLVM IR rendered for the host CPU, optimised and compiled to an object in process by
llvmlite, and loaded into an MCJIT engine.

The compiled bytes are a relocatable object file, so the disk cache can store them and a new process
loads a kernel without running the optimiser again.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from svod.backends.cpu import CpuProgram, host_target_machine
from svod.codegen.render.base import entry_symbol
from svod.codegen.render.llvmir import LLVMRenderer
from svod.device import CompiledSpec, CompilerBase, ProgramSpec
from svod.errors import CompileError, SvodError

OPT_LEVEL = 3
BATCH = 8
"""How many kernels ``compile_many`` puts in one LLVM module."""


class LLVMCompiler(CompilerBase):
    """Optimises at O3 with loop and SLP vectorisation for this CPU's name and features.

    Compiles run in parallel: each thread has its own LLVM context and target machine, and llvmlite
    releases the GIL while LLVM works.
    """

    def __init__(self) -> None:
        self.cpu = llvm.get_host_cpu_name()
        self.features = llvm.get_host_cpu_features().flatten()
        self._local = threading.local()
        target = hashlib.sha256(f"{self.cpu}|{self.features}".encode()).hexdigest()[:12]
        version = ".".join(map(str, llvm.llvm_version_info))
        self.cache_key = f"llvm-{version}-llvmlite{llvmlite.__version__}-{self.cpu}-{target}-O{OPT_LEVEL}"

    def renderer(self, threads: int) -> LLVMRenderer:
        return LLVMRenderer("CPU", threads, cpu=self.cpu, features=self.features)

    def _thread_state(self) -> tuple[Any, Any]:
        """This thread's LLVM context and target machine: LLVM contexts must not be shared by threads."""
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = (llvm.create_context(), host_target_machine(OPT_LEVEL))
        return state

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        return self.compile_many([spec])[0]

    def compile_many(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        """Kernels in groups of ``BATCH``, each group one module optimised and emitted once, so the fixed
        cost of LLVM's pipelines is shared. (llvmlite serialises every LLVM call behind one process-wide
        lock, so threads could not overlap the work.) Each kernel of a group gets the group's object,
        which the disk cache stores once per kernel: the group size bounds that duplication."""
        return [compiled for start in range(0, len(specs), BATCH)
                for compiled in self._compile_group(specs[start:start + BATCH])]

    def _compile_group(self, specs: Sequence[ProgramSpec]) -> list[CompiledSpec]:
        context, machine = self._thread_state()
        module = self._parse(specs[0], context)
        for spec in specs[1:]:
            module.link_in(self._parse(spec, context))
        tuning = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        tuning.loop_vectorization = True
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


class LLVMRuntime:
    """Loads compiled objects into one MCJIT engine that lives as long as the runtime.

    Entry symbols carry the kernel's key, so objects never clash; adding an object to a live engine
    costs far less than building an engine (and its target machine) per kernel.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Any = None
        self._objects: set[str] = set()

    def __call__(self, compiled: CompiledSpec) -> CpuProgram:
        if compiled.bytes is None:
            raise SvodError("the LLVM runtime loads object code, and this kernel has none", kernel=compiled.name,
                            stage="load")
        symbol = entry_symbol(compiled.name, compiled.ast)
        with self._lock:
            if self._engine is None:
                self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine(OPT_LEVEL))
            digest = hashlib.sha256(compiled.bytes).hexdigest()
            if digest not in self._objects:  # an object compiled for several kernels is added once
                try:
                    self._engine.add_object_file(llvm.ObjectFileRef.from_data(compiled.bytes))
                    self._engine.finalize_object()
                except RuntimeError as err:
                    raise SvodError(f"cannot load the object code: {err}", kernel=compiled.name,
                                    stage="load") from err
                self._objects.add(digest)
            address = self._engine.get_function_address(symbol)
        return CpuProgram(compiled.name, address, self._engine)
