"""The method cache: one ``CachedKernel`` per (kernel, renderer, compiler, device), compiled once.

::

    svod.compile(ast, device)
        │ key = (ast.key, renderer.cache_key, compiler.cache_key, device)
        ├─ hit in memory ──────────────────────────────────────────────> CachedKernel
        └─ miss ─┬─ compiled for this base device type? ───────────────┐
                 └─ PROGRAM ─┬─ on disk (compiler key, source hash)? ─┤─> load ─> CachedKernel (kept)
                             └─ compile (and store on disk) ──────────┘

Compiled code is shared by the devices of one base type (``CUDA:0`` and ``CUDA:1``); only loading is
per device. Thread safety: concurrent requests for one key compile once and the others wait for that
result; a failed compile is not cached and raises in every waiter.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from svod.codegen import describe
from svod.config import Settings, settings
from svod.device import CompiledSpec, Device, DeviceCaps, KernelMetadata, Pair, Program, ProgramSpec
from svod.dtype import dtypes
from svod.errors import SvodError
from svod.ir import Ops, UOp, kernel_label, simplify
from svod.ir.uop import param_size, pointee
from svod.runtime.disk import DiskCache
from svod.runtime.kernel import CachedKernel, kernel_name
from svod.runtime.parts import OwnBuffers, Part, PartsProgram

CacheKey = tuple[str, str, str, str]
KERNELS_LOADED = 2048
"""The most kernels the memory cache keeps loaded, whatever their bytes: a loaded kernel holds a few of the
process's memory mappings (its shared object's segments, PoCL's for an OpenCL program, JIT-compiled code's), of
which a process holds at most ``vm.max_map_count`` (65530 by default), and a long session of small kernels
(the test suite's) reached that first, the next kernel failing to load. A kernel a plan holds stays loaded."""


@dataclass
class CacheStats:
    """Counters a caller can read to see what the cache did (tests count compiles with them)."""

    hits: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0


V = TypeVar("V")
Compiled = tuple[CompiledSpec, ...]
"""A kernel's parts compiled, each with its PROGRAM (``CompiledSpec.program``): what every device of one
base type loads."""


class LeastRecentlyUsed(Generic[V]):
    """Entries with a size in bytes; adding past ``budget`` bytes, or past ``most`` entries, drops the least
    recently used ones. What an entry held (loaded code, through its programs) is released once nothing else
    uses it."""

    def __init__(self, budget: int, most: int | None = None) -> None:
        self.budget = budget
        self.most = most
        self.held = 0
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        """The entry, marked as just used. Safe without a lock: each step is one atomic dict operation."""
        found = self._entries.get(key)
        if found is None:
            return None
        try:  # not contextlib.suppress: a context manager per look-up cost as much as the rest of it
            self._entries.move_to_end(key)
        except KeyError:  # dropped by another thread meanwhile: still a valid entry
            return found[0]
        return found[0]

    def put(self, key: Hashable, value: V, nbytes: int) -> None:
        old = self._entries.pop(key, None)
        self.held += nbytes - (0 if old is None else old[1])
        self._entries[key] = (value, nbytes)
        while (self.held > self.budget or (self.most is not None and len(self._entries) > self.most)) and \
                len(self._entries) > 1:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.held -= dropped

    def clear(self) -> None:
        self._entries.clear()
        self.held = 0


class KernelCache:
    """Kernels by (AST, renderer, compiler, device), and compiled code by base device type, each bounded
    by ``settings.cache_memory`` bytes of compiled code (the kernels also by ``KERNELS_LOADED``) and dropped
    least recently used first."""

    def __init__(self, config: Settings = settings, disk: DiskCache | None = None) -> None:
        self.settings = config
        self.disk = disk if disk is not None else (DiskCache(config.cache_dir) if config.disk_cache else None)
        self._kernels: LeastRecentlyUsed[CachedKernel] = LeastRecentlyUsed(config.cache_memory, KERNELS_LOADED)
        self._compiled: LeastRecentlyUsed[Compiled] = LeastRecentlyUsed(config.cache_memory)
        self._pending: dict[CacheKey, Future[CachedKernel]] = {}
        self._lock = threading.Lock()
        self.stats = CacheStats()
        self._device_keys: dict[Device, tuple[Pair, DeviceCaps | None, str, str]] = {}
        """Per device: its primary pair and its renderer's caps, with the renderer's key (built from those caps,
        so a look-up builds it once) and the device's name. A device whose pair or renderer's caps were replaced
        (tests lower a device's kernels as for a GPU so) has its key built again; the compiler's key is an
        attribute, read at each look-up."""

    def __len__(self) -> int:
        return len(self._kernels)

    @property
    def bytes_held(self) -> int:
        """Compiled code held in memory (loaded kernels, and code shared by the devices of one type)."""
        return self._kernels.held + self._compiled.held

    def clear(self) -> None:
        """Forget every kernel held in memory (the disk cache keeps its entries); their code, and their devices,
        are released once nothing else (a plan, a caller) holds them."""
        with self._lock:
            self._kernels.clear()
            self._compiled.clear()
            self._device_keys.clear()  # each device's key parts hold the device, as its kernels did

    def get(self, ast: UOp, device: Device) -> CachedKernel:
        """The kernel of ``ast`` on ``device``, compiling it on first use."""
        kernel = self._kernels.get(self._key(ast, device))  # the hot path: no lock, no lists
        if kernel is not None:
            self.stats.hits += 1
            return kernel
        return self.get_many([ast], device)[0]

    def get_many(self, asts: Sequence[UOp], device: Device) -> list[CachedKernel]:
        """The kernels of ``asts`` on ``device``; those not yet compiled are compiled together (the
        compiler decides how: one LLVM module, or several compilers at once)."""
        keys = {ast: self._key(ast, device) for ast in asts}
        found: dict[UOp, CachedKernel] = {}
        waiting: dict[UOp, Future[CachedKernel]] = {}
        owned: dict[UOp, Future[CachedKernel]] = {}
        with self._lock:
            for ast, key in keys.items():
                kernel = self._kernels.get(key)
                if kernel is not None:
                    found[ast] = kernel
                    self.stats.hits += 1
                elif key in self._pending:
                    waiting[ast] = self._pending[key]
                else:
                    owned[ast] = self._pending[key] = Future()
        if owned:
            try:
                built = self._build(list(owned), device)
            except BaseException as err:
                built = dict.fromkeys(owned, err)
            with self._lock:
                for ast, outcome in built.items():
                    del self._pending[keys[ast]]
                    if isinstance(outcome, CachedKernel):
                        self._kernels.put(keys[ast], outcome, len(outcome.code) + outcome.code_bytes)
            for ast, outcome in built.items():
                if isinstance(outcome, CachedKernel):
                    owned[ast].set_result(outcome)
                else:
                    owned[ast].set_exception(outcome)
        futures = {**waiting, **owned}
        return [found[ast] if ast in found else futures[ast].result() for ast in asts]

    def adopt(self, ast: UOp, device: Device, programs: Sequence[UOp]) -> CachedKernel:
        """The kernel of ``ast`` on ``device`` from the PROGRAMs of its parts compiled elsewhere (a plan
        bundle's, each with its BINARY; empty for a backend that loads source), loaded without compiling and
        kept as if compiled here. A kernel already held is returned as it is. (A bundle's PROGRAM is read with
        ``from_uop``: one saved by an earlier svod carries only the metadata its SINK does not say.)"""
        key = self._key(ast, device)
        held = self._kernels.get(key)
        if held is not None:
            return held
        compiled = tuple(CompiledSpec.from_spec(ProgramSpec.from_uop(part), data=_binary_of(part)) for part in programs)
        kernel = make_kernel(ast, [c.program for c in compiled], [device.runtime(c) for c in compiled], device)
        with self._lock:
            self._compiled.put((*key[:3], device.base_device_key()), compiled, sum(map(_code_size, compiled)))
            self._kernels.put(key, kernel, len(kernel.code) + kernel.code_bytes)
        return kernel

    def _key(self, ast: UOp, device: Device) -> CacheKey:
        if not isinstance(ast, UOp) or ast.op is not Ops.SINK:
            raise SvodError("a kernel AST must be a SINK", stage="build", value=getattr(ast, "op", ast))
        primary = device.primary
        caps = getattr(primary[0], "caps", None)  # a renderer's settings, where it has them (the Python one has none)
        named = self._device_keys.get(device)
        if named is None or named[0] is not primary or named[1] is not caps:
            named = self._device_keys[device] = (primary, caps, primary[0].cache_key, device.name)
        return (ast.key, named[2], primary[1].cache_key, named[3])

    def _build(self, asts: list[UOp], device: Device) -> dict[UOp, CachedKernel | BaseException]:
        """Compile ``asts`` together; if that fails, one by one, so each error reaches its own kernel."""
        try:
            return dict(zip(asts, self._build_together(asts, device), strict=True))
        except SvodError as err:
            if len(asts) == 1:
                return {asts[0]: err}
        outcomes: dict[UOp, CachedKernel | BaseException] = {}
        for ast in asts:
            try:
                outcomes[ast] = self._build_together([ast], device)[0]
            except SvodError as err:
                outcomes[ast] = err
        return outcomes

    def _build_together(self, asts: list[UOp], device: Device) -> list[CachedKernel]:
        """Compile ``asts``; anything but a ``SvodError`` from the pipeline is a bug in svod, reported as a
        ``SvodError`` that names the kernel (the tests exist to keep this from ever happening)."""
        try:
            return self._compile_together(asts, device)
        except SvodError:
            raise
        except Exception as err:
            names = ", ".join(kernel_label(a) for a in asts)
            raise SvodError(f"internal error in svod ({type(err).__name__}: {err}); please report it with the "
                            "kernel", kernel=names, stage="compile") from err

    def _compile_together(self, asts: list[UOp], device: Device) -> list[CachedKernel]:
        start = time.perf_counter()
        shared_keys = {ast: (*self._key(ast, device)[:3], device.base_device_key()) for ast in asts}
        shared: dict[UOp, Compiled | None] = {ast: self._compiled.get(shared_keys[ast]) for ast in asts}
        renderer = device.renderer
        rendered = {ast: tuple(ProgramSpec.of(renderer.program(part)) for part in renderer.parts(ast))
                    for ast in asts if shared[ast] is None}
        fresh = self._compile([spec for specs in rendered.values() for spec in specs], device)
        kernels = []
        for ast in asts:
            compiled = shared[ast]
            if compiled is None:
                compiled = tuple(fresh.pop(0) for _ in rendered[ast])
                with self._lock:
                    self._compiled.put(shared_keys[ast], compiled, sum(map(_code_size, compiled)))
            loaded = [self._load(c, device) for c in compiled]
            kernels.append(make_kernel(ast, [c.program for c in compiled], loaded, device))
        if self.settings.debug:
            sources = "\n".join(f"svod: {spec.name} on {device.name}: {describe(spec.ast)}\n{spec.src}"
                                for specs in rendered.values() for spec in specs)
            print(f"svod: {len(asts)} kernel(s) ready on {device.name} in {(time.perf_counter() - start) * 1e3:.2f} "
                  f"ms\n{sources}", file=sys.stderr)
        return kernels

    def _compile(self, specs: list[ProgramSpec], device: Device) -> list[CompiledSpec]:
        """Compiled code for ``specs``: from disk where it is there, from the compiler for the rest."""
        compiler, disk = device.compiler, self.disk
        stored = [disk.get(compiler.cache_key, spec.src) if disk is not None else None for spec in specs]
        missing = [spec for spec, data in zip(specs, stored, strict=True) if data is None]
        built: list[CompiledSpec] = []
        if missing:
            start = time.perf_counter()
            built = compiler.compile_many(missing)
            self.stats.compiles += len(missing)
            self.stats.compile_seconds += time.perf_counter() - start
            if disk is not None:
                for spec, compiled in zip(missing, built, strict=True):
                    if compiled.bytes:
                        disk.put(compiler.cache_key, spec.src, compiled.bytes)
        fresh = iter(built)
        return [next(fresh) if data is None else CompiledSpec.from_spec(spec, data=data)
                for spec, data in zip(specs, stored, strict=True)]

    def _load(self, compiled: CompiledSpec, device: Device) -> Program:
        try:
            return device.runtime(compiled)
        except SvodError:
            if self.disk is None:
                raise
            spec = ProgramSpec.of(compiled.program)
            self.disk.discard(device.compiler.cache_key, spec.src)  # intact bytes that no longer load: rebuild
            rebuilt = device.compiler.compile(spec)
            self.stats.compiles += 1
            if rebuilt.bytes:
                self.disk.put(device.compiler.cache_key, spec.src, rebuilt.bytes)
            return device.runtime(rebuilt)


def _binary_of(program: UOp) -> bytes:
    return bytes(program.src[4].arg) if len(program.src) > 4 else b""


def _code_size(compiled: CompiledSpec) -> int:
    return len(compiled.bytes) + len(compiled.src or "")


def make_kernel(ast: UOp, programs: Sequence[UOp], loaded: Sequence[Program], device: Device) -> CachedKernel:
    """The cache entry of ``ast``, compiled as ``programs`` (each with its BINARY) and loaded as ``loaded``: the
    one program on the user's buffers, or a ``PartsProgram`` when it runs as several parts or needs buffers
    of its own (scratch, status)."""
    user = {u.arg: u for u in ast.toposort() if u.op is Ops.PARAM}
    metadata: list[KernelMetadata] = [program.arg for program in programs]
    own_slots = {slot for meta in metadata for slot in meta.globals if slot not in user}
    if len(programs) == 1 and not own_slots:
        return CachedKernel(ast, device, tuple(programs), loaded[0])
    own = {p.arg: p for program in programs for p in program.src[0].toposort()
           if p.op is Ops.PARAM and p.arg in own_slots}
    status = next((meta.status_slot for meta in metadata if meta.status_slot is not None), None)
    parts = [Part(program, meta.var_names, meta.launch, meta.globals) for meta, program in zip(metadata, loaded,
                                                                                               strict=True)]
    var_names = tuple(sorted({name for meta in metadata for name in meta.var_names}))
    sizes = {slot: simplify(param_size(p) * pointee(p).itemsize) for slot, p in sorted(own.items())}
    required = next((meta for meta in metadata if meta.requirement_slot is not None), None)
    buffers = OwnBuffers(sizes, status, dtypes.int64 if status is None else pointee(own[status]),
                         None if required is None else required.requirement_slot,
                         () if required is None else required.requirements)
    composite = PartsProgram(kernel_name(ast, metadata[0]), parts, var_names, tuple(sorted(user)), buffers,
                             device.allocator, {slot: param_size(p) for slot, p in user.items()})
    return CachedKernel(ast, device, tuple(programs), composite)


_default_cache = KernelCache()


def default_cache() -> KernelCache:
    return _default_cache
