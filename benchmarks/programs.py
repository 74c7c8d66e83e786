"""Every ``@svod.jit`` program the benchmark times, by name: ``benchmarks.jit_programs``' loops and array
expressions and ``benchmarks.numpy_programs``' NumPy code (which builds on the former, so the look-up over both
lives above them)."""

from __future__ import annotations

from benchmarks.jit_programs import ARRAY_PROGRAMS, PROGRAMS, Program
from benchmarks.numpy_programs import NUMPY_PROGRAMS


def program(name: str) -> Program:
    found = next((p for p in [*PROGRAMS, *ARRAY_PROGRAMS, *NUMPY_PROGRAMS] if p.name == name), None)
    if found is None:
        raise KeyError(f"no jit program {name!r}; there are {', '.join(p.name for p in PROGRAMS)}")
    return found
