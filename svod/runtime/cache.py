"""The method cache: one ``CachedKernel`` per (kernel, renderer, compiler, device), compiled once.

::

    svod.compile(ast, device)
        │ key = (ast.key, renderer.cache_key, compiler.cache_key, device)
        ├─ hit in memory ─────────────────────────────────────────> CachedKernel
        └─ miss: render ─┬─ compiled for this base device type? ─┐
                         ├─ on disk (compiler key, source hash)? ─┤─> load ─> CachedKernel (kept)
                         └─ compile (and store on disk) ──────────┘

Compiled code is shared by the devices of one base type (``CUDA:0`` and ``CUDA:1``); only loading is
per device. Thread safety: concurrent requests for one key compile once and the others wait for that
result; a failed compile is not cached and raises in every waiter.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from svod.codegen.render.base import entry_symbol
from svod.config import Settings, settings
from svod.device import CompiledSpec, Device, Program, ProgramSpec, derive_metadata
from svod.device.launch import ConcreteLaunchDims
from svod.device.spec import ONES
from svod.errors import SvodError
from svod.ir import Ops, UOp
from svod.ir.uop import param_size, pointee
from svod.runtime.disk import DiskCache
from svod.runtime.kernel import LAUNCH_VARIABLES, CachedKernel
from svod.runtime.staged import Stage, StagedProgram

CacheKey = tuple[str, str, str, str]


@dataclass
class CacheStats:
    """Counters a caller can read to see what the cache did (tests count compiles with them)."""

    hits: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0


class KernelCache:
    def __init__(self, config: Settings = settings, disk: DiskCache | None = None) -> None:
        self.settings = config
        self.disk = disk if disk is not None else (DiskCache(config.cache_dir) if config.disk_cache else None)
        self._kernels: dict[CacheKey, CachedKernel] = {}
        self._compiled: dict[CacheKey, tuple[tuple[ProgramSpec, ...], tuple[CompiledSpec, ...]]] = {}
        self._pending: dict[CacheKey, Future[CachedKernel]] = {}
        self._lock = threading.Lock()
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._kernels)

    def clear(self) -> None:
        """Forget every kernel held in memory (the disk cache keeps its entries)."""
        with self._lock:
            self._kernels.clear()
            self._compiled.clear()

    def get(self, ast: UOp, device: Device) -> CachedKernel:
        """The kernel of ``ast`` on ``device``, compiling it on first use."""
        if not isinstance(ast, UOp) or ast.op is not Ops.SINK:
            raise SvodError("a kernel AST must be a SINK", stage="compile", value=getattr(ast, "op", ast))
        key = (ast.key, device.renderer.cache_key, device.compiler.cache_key, device.name)
        kernel = self._kernels.get(key)
        if kernel is not None:
            self.stats.hits += 1
            return kernel
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                self.stats.hits += 1
                return kernel
            pending = self._pending.get(key)
            owner = pending is None
            if pending is None:
                pending = self._pending[key] = Future()
        if not owner:
            return pending.result()
        try:
            kernel = self._load(ast, device, (*key[:3], device.base_device_key()))
        except BaseException as err:
            with self._lock:
                del self._pending[key]
            pending.set_exception(err)
            raise
        with self._lock:
            self._kernels[key] = kernel
            del self._pending[key]
        pending.set_result(kernel)
        return kernel

    def _load(self, ast: UOp, device: Device, shared_key: CacheKey) -> CachedKernel:
        start = time.perf_counter()
        found = self._compiled.get(shared_key)
        if found is None:
            specs = tuple(device.renderer.render(stage) for stage in device.renderer.stages(ast))
            loaded = [self._compile_or_read_disk(spec, device) for spec in specs]
            programs = [program for program, _ in loaded]
            with self._lock:
                self._compiled[shared_key] = (specs, tuple(compiled for _, compiled in loaded))
        else:
            specs, compiled = found
            programs = [device.runtime(c) for c in compiled]
        if self.settings.debug:
            sources = "\n".join(spec.src for spec in specs)
            print(f"svod: {specs[0].name} ready on {device.name} in {(time.perf_counter() - start) * 1e3:.2f} ms\n"
                  f"{sources}", file=sys.stderr)
        if len(specs) == 1:
            return make_cached_kernel(specs[0], programs[0], device)
        return make_staged_kernel(ast, specs, programs, device)

    def _compile_or_read_disk(self, spec: ProgramSpec, device: Device) -> tuple[Program, CompiledSpec]:
        compiler, disk = device.compiler, self.disk
        data = disk.get(compiler.cache_key, spec.src) if disk is not None else None
        if disk is not None and data is not None:
            compiled = CompiledSpec.from_spec(spec, data=data)
            try:
                return device.runtime(compiled), compiled
            except SvodError:
                disk.discard(compiler.cache_key, spec.src)  # intact bytes that no longer load: rebuild
        start = time.perf_counter()
        compiled = compiler.compile(spec)
        self.stats.compiles += 1
        self.stats.compile_seconds += time.perf_counter() - start
        program = device.runtime(compiled)
        if disk is not None and compiled.bytes is not None:
            disk.put(compiler.cache_key, spec.src, compiled.bytes)
        return program, compiled


def make_cached_kernel(spec: ProgramSpec, program: Program, device: Device) -> CachedKernel:
    params = sorted((u for u in spec.ast.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    return CachedKernel(
        program=program, device=device, code=spec.src, entry_point=entry_symbol(spec.name, spec.ast),
        name=spec.name, var_names=tuple(spec.var_names),
        globals=tuple(spec.globals), outs=tuple(spec.outs), ins=tuple(spec.ins),
        host_parallel_safe=device.device.base_type == "CPU",
        global_size=spec.global_size, local_size=spec.local_size, ast=spec.ast, params=tuple(params),
        variables=tuple(v for v in spec.vars if v.name not in LAUNCH_VARIABLES),
        static_dims=_static_dims(spec),
    )


def make_staged_kernel(ast: UOp, specs: Sequence[ProgramSpec], programs: Sequence[Program],
                       device: Device) -> CachedKernel:
    """The cache entry of a kernel that runs as several stages: its buffers and variables are the
    original kernel's, its program runs the stages with a scratch buffer of its own."""
    meta = derive_metadata(ast)
    params = sorted((u for u in ast.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    scratch = next(u for u in specs[0].ast.toposort() if u.op is Ops.PARAM and u.arg == params[-1].arg + 1)
    var_names = tuple(sorted({name for spec in specs for name in spec.var_names}))
    stages = [Stage(program, tuple(spec.var_names), spec.global_size, spec.local_size)
              for spec, program in zip(specs, programs, strict=True)]
    scratch_bytes = int(param_size(scratch).arg) * pointee(scratch).itemsize
    return CachedKernel(
        program=StagedProgram(specs[0].name, stages, var_names, scratch_bytes), device=device,
        code="\n".join(spec.src for spec in specs), entry_point=entry_symbol(specs[0].name, specs[0].ast),
        name=meta.name or specs[0].name, var_names=var_names, globals=meta.globals, outs=meta.outs, ins=meta.ins,
        host_parallel_safe=device.device.base_type == "CPU", global_size=ONES, local_size=ONES, ast=ast,
        params=tuple(params), variables=tuple(v for v in meta.vars if v.name not in LAUNCH_VARIABLES),
        static_dims=ConcreteLaunchDims((1, 1, 1), (1, 1, 1)),
    )


def _static_dims(spec: ProgramSpec) -> ConcreteLaunchDims | None:
    """Launch sizes that no variable changes, evaluated now instead of at every dispatch."""
    sizes = (*spec.global_size, *(spec.local_size or ()))
    if any(u.op is Ops.DEFINE_VAR for size in sizes for u in size.toposort()):
        return None
    return spec.launch_dims({})


_default_cache = KernelCache()


def default_cache() -> KernelCache:
    return _default_cache
