"""Settings read once from the ``SVOD_*`` environment variables.

``Settings.from_env()`` is the only place that reads them; the default instance is built at import, and
tests or embedders build their own and pass it where it is needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from svod.errors import SvodError

CPU_COMPILERS = ("llvm", "clang")
VERSION = "0.1.0"
"""svod's version (``svod.__version__``): plan bundles record it, and recompile what another version built."""


@dataclass(frozen=True, slots=True)
class Settings:
    cache_dir: Path
    """Where the disk cache lives (``SVOD_CACHE_DIR``; default ``$XDG_CACHE_HOME/svod`` or ``~/.cache/svod``)."""
    disk_cache: bool
    """``SVOD_CACHE=0`` turns the disk cache off."""
    threads: int
    """CPU worker threads for one kernel (``SVOD_THREADS``; default: every core this process may use)."""
    cpu_compiler: str
    """The CPU device's primary compiler (``SVOD_CPU_COMPILER``): ``llvm`` (default) or ``clang``."""
    debug: bool
    """``SVOD_DEBUG=1`` (any value but 0) prints rendered source and timings."""
    debug_passes: bool
    """``SVOD_DEBUG=passes`` also prints each lowering pass and the kernel after it."""
    cuda_arch: str
    """The architecture CUDA code is compiled for when no GPU says which (``SVOD_CUDA_ARCH``, sm_90)."""
    cache_memory: int = 512 << 20
    """Bytes of compiled code the in-memory kernel cache keeps before dropping the least recently used
    (``SVOD_CACHE_MEMORY_MB``; default 512)."""

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        cache_home = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cpu_compiler = env.get("SVOD_CPU_COMPILER", "llvm").strip().lower()
        if cpu_compiler not in CPU_COMPILERS:
            raise SvodError(f"SVOD_CPU_COMPILER must be one of {', '.join(CPU_COMPILERS)}",
                            stage="device", value=cpu_compiler)
        return Settings(
            cache_dir=Path(env.get("SVOD_CACHE_DIR") or cache_home / "svod"),
            disk_cache=env.get("SVOD_CACHE", "1").strip() != "0",
            threads=_threads(env.get("SVOD_THREADS")),
            cpu_compiler=cpu_compiler,
            debug=env.get("SVOD_DEBUG", "0").strip() not in ("", "0"),
            debug_passes=env.get("SVOD_DEBUG", "").strip().lower() == "passes",
            cuda_arch=env.get("SVOD_CUDA_ARCH", "sm_90").strip().lower(),
            cache_memory=_megabytes(env.get("SVOD_CACHE_MEMORY_MB")),
        )


def _megabytes(value: str | None) -> int:
    if value is None or not value.strip():
        return 512 << 20
    if not value.strip().isdigit() or int(value) < 1:
        raise SvodError("SVOD_CACHE_MEMORY_MB must be a positive integer", stage="device", value=value)
    return int(value) << 20


def _threads(value: str | None) -> int:
    if value is None or not value.strip():
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not value.strip().isdigit() or int(value) < 1:
        raise SvodError("SVOD_THREADS must be a positive integer", stage="device", value=value)
    return int(value)


settings = Settings.from_env()
