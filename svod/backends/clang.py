"""The C pair: C rendered for the host, compiled by clang (a versioned ``clang-N`` where only that is
installed, or gcc where clang is missing) into a shared object whose bytes are the compiled kernel, and
loaded with ctypes. Register tiles are GNU C vectors (``svod.codegen.render.c``), which both compilers take.

``-fwrapv`` gives signed integers the wraparound svod defines; ``-ffp-contract=off`` keeps ``a*b+c`` two
roundings, as the reference computes it (a sum of products fuses through the ``fma`` calls the renderer
writes); ``-fopenmp-simd`` honours the renderer's reduction pragmas, which let a plain reduction
reassociate (and vectorise) without relaxing any other float math. clang
before 17 vectorises a group of strided accesses past a store it depends on (llvm-project#63602, a
wrong answer on a loop that stores into a row it reads); for those the grouping is turned off.

gcc gets ``GCC_FLAGS`` on top: at -O2 its vectoriser takes only loops that need no scalar remainder, and
under its default ``-ftrapping-math`` it will not if-convert float arithmetic that a select guards (the
renderer's expansions of exp, log and erf are such selects), so those loops stay scalar. ``-O3`` and
``-fno-trapping-math`` lift both; the second is what clang and LLVM assume anyway (floating-point
exceptions unobserved), and neither changes a value: no reassociation, signed zeros and NaNs as before.

The compiler makes an object file and the toolchain's own linker (``-print-prog-name=ld``) makes it a shared
object: the driver's link step starts a second driver, which for a small kernel cost clang as much as the
compile itself. The object needs only libm, libc and the compiler's runtime (``libgcc.a``: half-precision
and 128-bit helpers), the three it is linked with; it has no constructors, so no start files.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import weakref

from svod.backends.cpu_host import host_vector_registers
from svod.backends.cpu_replay import NativeReplayer
from svod.backends.cpu_runtime import CpuProgram
from svod.backends.elf import ET_DYN, read_elf
from svod.codegen.render.c import CRenderer
from svod.device import CompiledSpec, CompilerBase, DeviceCaps, ProgramSpec
from svod.errors import CompileError, DeviceError, SvodError

FLAGS = ("-O2", "-march=native", "-fPIC", "-c", "-fwrapv", "-ffp-contract=off", "-fno-math-errno", "-fopenmp-simd")
GCC_FLAGS = ("-O3", "-fno-trapping-math", "-fexcess-precision=standard")
"""What gcc takes besides ``FLAGS`` (its ``-O3`` overrides the ``-O2`` before it)."""
LINK_FLAGS = ("-shared", "-z", "noseparate-code", "-z", "norelro")
"""A kernel's shared object in two segments, its code and its data: the dynamic loader maps each segment, and a
process holds at most ``vm.max_map_count`` mappings (65530 by default), which a few thousand kernels of the
linker's default layout (four segments and a read-only part of the data: five mappings) used up."""


def find_c_compiler() -> str:
    """clang when present, else the newest versioned clang (``clang-15``: Debian installs only those), else gcc
    or cc; a ``DeviceError`` that says so when there is none."""
    for candidate in ("clang", newest_versioned_clang(), "gcc", "cc"):
        path = shutil.which(candidate) if candidate else None
        if path:
            return path
    raise DeviceError("no C compiler found (looked for clang, clang-N, gcc, cc); install clang or gcc",
                      stage="device")


def newest_versioned_clang() -> str | None:
    """The name of the ``clang-N`` on ``PATH`` of the highest ``N``, if any."""
    versions: set[int] = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        versions.update(int(name[6:]) for name in names if re.fullmatch(r"clang-\d+", name)
                        and os.access(os.path.join(folder or ".", name), os.X_OK))
    return f"clang-{max(versions)}" if versions else None


def _compiler_identity(path: str) -> str:
    result = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines()[0] if result.stdout else os.path.basename(path)


def _flags(identity: str, avx512: bool) -> list[str]:
    """``FLAGS`` as this compiler (by its ``--version`` line) takes them; on a CPU with AVX-512, 512-bit
    vectors preferred (both compilers default to 256 bits there), as the LLVM pair does: a register tile's
    rows are two such registers wide (``tile_row_bytes``)."""
    wide = ["-mprefer-vector-width=512"] if avx512 else []
    clang = re.search(r"clang version (\d+)", identity)
    if clang is None:
        return [*FLAGS, *GCC_FLAGS, *wide]
    flags = [*FLAGS, *wide]
    if int(clang.group(1)) < 17:
        flags += ["-mllvm", "-enable-interleaved-mem-accesses=0"]
    return flags


class ClangCompiler(CompilerBase):
    vector_lanes = True
    """A register tile's row is a GNU C vector (``svod.codegen.render.c``): gcc vectorises no tile of scalar
    copies."""

    def __init__(self) -> None:
        self.path = find_c_compiler()
        self.identity = _compiler_identity(self.path)
        """The compiler's own ``--version`` line."""
        self.flags = _flags(self.identity, avx512=host_vector_registers() >= 32)
        digest = hashlib.sha256(f"{self.identity}|{' '.join((*self.flags, *LINK_FLAGS))}".encode()).hexdigest()[:12]
        self.cache_key = f"c-{os.path.basename(self.path)}-{digest}"

    def renderer(self, caps: DeviceCaps) -> CRenderer:
        return CRenderer("CPU", caps)

    @staticmethod
    def loader() -> SharedObjectLoader:
        """The runtime factory for what this compiler produces: shared objects."""
        return SharedObjectLoader()

    @functools.cached_property
    def native_float16(self) -> bool:
        """Whether this C compiler has ``_Float16`` arithmetic (gcc 12 has; Debian 12's clang 14 does not on
        x86): found by compiling a one-line function, once, when a kernel first asks."""
        with tempfile.TemporaryDirectory(prefix="svod-cc-") as work:
            probe = os.path.join(work, "probe.c")
            with open(probe, "w") as f:
                f.write("_Float16 f(_Float16 a, _Float16 b) { return a * b + a; }\n")
            result = subprocess.run([self.path, "-c", "-O0", probe, "-o", os.path.join(work, "probe.o")],
                                    capture_output=True, text=True, check=False)
        return result.returncode == 0

    @functools.cached_property
    def link_command(self) -> list[str]:
        """The linker and the libraries every kernel's shared object is linked with, asked of the compiler
        once: the ``ld`` and ``libgcc.a`` its own driver would use."""
        linker, runtime = (self._ask(flag) for flag in ("-print-prog-name=ld", "-print-libgcc-file-name"))
        found = shutil.which(linker)
        if found is None:  # (a bare name is the compiler's answer where it has none of its own)
            raise DeviceError(f"{os.path.basename(self.path)} links with {linker}, which is not on PATH: install "
                              "the linker (binutils) it was built with", stage="device")
        return [found, *LINK_FLAGS, "-lm", "-lc", runtime]

    def _ask(self, flag: str) -> str:
        result = subprocess.run([self.path, flag], capture_output=True, text=True, check=False)
        if result.returncode != 0 or not result.stdout.strip():
            raise DeviceError(f"{os.path.basename(self.path)} {flag} answered nothing (exit code "
                              f"{result.returncode}): {result.stderr.strip()}", stage="device")
        return result.stdout.strip()

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        with tempfile.TemporaryDirectory(prefix="svod-cc-") as work:
            source, obj, output = (os.path.join(work, f"{spec.name}.{ext}") for ext in ("c", "o", "so"))
            with open(source, "w") as f:
                f.write(spec.src)
            self._run([self.path, *self.flags, source, "-o", obj], spec)
            linker, *libraries = self.link_command
            self._run([linker, obj, "-o", output, *libraries], spec)
            with open(output, "rb") as f:
                return CompiledSpec.from_spec(spec, data=f.read())

    @staticmethod
    def _run(command: list[str], spec: ProgramSpec) -> None:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise CompileError(f"{os.path.basename(command[0])} failed with exit code {result.returncode}",
                               source=spec.src, log=result.stderr, kernel=spec.name)


class SharedObject:
    """A loaded shared object, closed (``dlclose``) when the last program that uses it is gone."""

    def __init__(self, path: str) -> None:
        self.library = ctypes.CDLL(path)
        closing = weakref.finalize(self, _ctypes.dlclose, self.library._handle)
        closing.atexit = False  # at exit there is nothing to gain, and modules are half torn down

    def address(self, symbol: str) -> int:
        return ctypes.cast(getattr(self.library, symbol), ctypes.c_void_p).value or 0


class SharedObjectLoader(NativeReplayer):
    """Loads shared objects with the dynamic loader (and replays plans of them natively, as
    ``NativeReplayer`` does)."""

    def __call__(self, compiled: CompiledSpec) -> CpuProgram:
        """Load the shared object in ``compiled.bytes`` through a uniquely named file that is removed at once
        (the dynamic loader caches libraries by path, so a reused path would return an old kernel). The
        bytes are checked (format, machine, the kernel's symbol) before the dynamic loader sees them."""
        if not compiled.bytes:
            raise SvodError("the C runtime loads a shared object, and this kernel has none", kernel=compiled.name,
                            stage="load")
        symbol = compiled.entry
        if symbol not in read_elf(compiled.bytes, ET_DYN, kernel=compiled.name).symbols:
            raise SvodError("the shared object has no entry point of that name", kernel=compiled.name, stage="load",
                            value=symbol)
        with tempfile.NamedTemporaryFile(prefix=f"svod-{compiled.name}-", suffix=".so") as file:
            file.write(compiled.bytes)
            file.flush()
            try:
                library = SharedObject(file.name)
            except OSError as err:
                raise SvodError(f"cannot load the compiled shared object: {err}", kernel=compiled.name,
                                stage="load") from err
        return CpuProgram(compiled.name, library.address(symbol), library)
