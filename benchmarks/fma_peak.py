"""The host's FMA peak: how many float32 or float64 multiply-adds its cores complete per second when nothing
but independent fused multiply-adds in vector registers runs, measured rather than taken from a datasheet
(a VM does not say its clock, and turbo moves it). The bar a matmul's GFLOP/s is read against.

The loop is LLVM IR JIT-compiled by llvmlite for this host: ``CHAINS`` independent accumulators of the widest
vector the host has, each turn one FMA on each, enough of them to cover the FMA latency on every pipe. One
copy runs on each of ``threads`` Python threads at once (a ctypes call releases the GIL).
"""

from __future__ import annotations

import ctypes
import threading
import time
from functools import cache

import llvmlite.binding as llvm

from benchmarks.timing import settle
from svod.backends.cpu_host import host_target_machine

CHAINS = 12
"""Independent accumulators per loop: latency 4-5 cycles times two FMA pipes, with room to spare, and with
the loop's two constants within AVX2's 16 vector registers. 16 chains did not fit: each turn moved and
spilled accumulators, and the "peak" fell far below what 12 chains reach, and below what OpenBLAS reached."""
TURNS = 20_000_000
"""Turns of the loop per thread: CHAINS FMAs each, tens of milliseconds on any host."""

_ENTRY = "svod_fma_chains"


def vector_bits() -> int:
    """The widest vector register this host's LLVM target has: 512 with AVX-512, 256 with AVX, else 128."""
    features = llvm.get_host_cpu_features()
    return 512 if features.get("avx512f") else 256 if features.get("avx") else 128


def _ir(element: str, lanes: int) -> str:
    """The loop as LLVM IR text: ``turns`` turns of one FMA on each of CHAINS accumulators, whose sum it stores."""
    vector = f"<{lanes} x {element}>"

    def splat(value: str) -> str:
        return f"<{', '.join(f'{element} {value}' for _ in range(lanes))}>"

    fma = f"@llvm.fma.v{lanes}{'f32' if element == 'float' else 'f64'}"
    lines = [f"declare {vector} {fma}({vector}, {vector}, {vector})",
             f"define void @{_ENTRY}(i64 %turns, ptr %out) {{", "entry:", "  br label %loop", "loop:",
             "  %t = phi i64 [0, %entry], [%next, %loop]"]
    lines += [f"  %a{c} = phi {vector} [{splat('1.0')}, %entry], [%b{c}, %loop]" for c in range(CHAINS)]
    lines += [f"  %b{c} = call {vector} {fma}({vector} %a{c}, {vector} {splat('0.5')}, {vector} {splat('0.25')})"
              for c in range(CHAINS)]
    lines += ["  %next = add i64 %t, 1", "  %more = icmp ult i64 %next, %turns",
              "  br i1 %more, label %loop, label %done", "done:", f"  %s0 = fadd {vector} %b0, %b1"]
    lines += [f"  %s{c - 1} = fadd {vector} %s{c - 2}, %b{c}" for c in range(2, CHAINS)]
    lines += [f"  store {vector} %s{CHAINS - 2}, ptr %out, align 1", "  ret void", "}"]
    return "\n".join(lines)


@cache
def _compiled(element: str, lanes: int) -> tuple[object, int]:
    """The loop compiled for this CPU and linked by an LLJIT of its own: the library (kept alive with it) and
    the loop's address."""
    machine = host_target_machine(2)
    module = llvm.parse_assembly(_ir(element, lanes))
    module.verify()
    jit = llvm.create_lljit_compiler(machine)
    library = llvm.JITLibraryBuilder().add_object_img(machine.emit_object(module)).export_symbol(_ENTRY) \
        .link(jit, f"svod-fma-peak-{element}")
    return (jit, library), library[_ENTRY]


def fma_peak_gflops(dtype: str = "float32", threads: int = 1, tries: int = 3) -> float:
    """The FMA peak of ``threads`` cores in GFLOP/s (an FMA is two FLOPs) for ``dtype`` float32 or float64:
    the best of ``tries``, each after the cores settle (another library's threads may still spin)."""
    element, size = {"float32": ("float", 4), "float64": ("double", 8)}[dtype]
    lanes = vector_bits() // (8 * size)
    _, address = _compiled(element, lanes)
    loop = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(address)
    outs = [ctypes.create_string_buffer(lanes * size) for _ in range(threads)]
    best = float("inf")
    for _ in range(tries):
        settle()
        loop(TURNS // 100, ctypes.addressof(outs[0]))  # warm the clock up
        workers = [threading.Thread(target=loop, args=(TURNS, ctypes.addressof(out))) for out in outs]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        best = min(best, time.perf_counter() - start)
    return threads * TURNS * CHAINS * lanes * 2 / best / 1e9
