"""What a new user meets first, measured: ``import svod``, a call of a tiny ``@svod.kernel`` and ``@svod.jit``
function on numpy arrays, of one given an int that changes every call, and of npbench's crc16 on 16 bytes
(numba's dispatch of the same functions beside them), ``svod.run`` of a tiny builder kernel, the cold compile
of the suite's kernels and of deep ``where`` chains.

``python -m benchmarks.first_contact [--json OUT.json] [--depths 1000,4000,10000]``

A call is timed as the best over many short batches (``best_call_seconds``): on a machine other processes
share, the quickest batch is the one no other process interrupted, which is what the call costs. An import is
timed in fresh processes, best of several. A compile is this process's CPU time (``time.process_time``), which
other processes' load slows less than the clock; each compile has a cache of its own and no disk cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

import svod
from benchmarks.suite import suite
from svod import KernelBuilder, dtypes
from svod.config import settings
from svod.ir import UOp
from svod.runtime import KernelCache
from svod.workloads import tiny

IMPORT = ("import time; start, cpu = time.perf_counter(), time.process_time(); import {module}; "
          "print(time.perf_counter() - start, time.process_time() - cpu)")
"""A fresh process's import of one module, timed inside it (the interpreter's own start left out): the clock's
time and the process's CPU time, which a loaded host's other processes distort less."""
SIZE = 16
"""The elements of a tiny call's arrays: a kernel whose cost is the call around it."""


def import_seconds(module: str, processes: int = 9) -> dict[str, float]:
    """The quickest of ``processes`` fresh imports of ``module``: by the clock (``wall``) and in CPU time."""
    times = []
    for _ in range(processes):
        result = subprocess.run([sys.executable, "-c", IMPORT.format(module=module)], capture_output=True, text=True,
                                check=True)
        wall, cpu = map(float, result.stdout.split())
        times.append((wall, cpu))
    return {"wall": min(t[0] for t in times), "cpu": min(t[1] for t in times)}


def best_call_seconds(call: Callable[[], object], batch: int = 200, batches: int = 300) -> float:
    """One call's cost: the quickest of ``batches`` batches of ``batch`` calls, per call, after a warm-up."""
    for _ in range(batch):
        call()
    return min(timeit.repeat(call, number=batch, repeat=batches)) / batch


def _add_one(out, x):  # type: ignore[no-untyped-def]
    """The tiny function each of svod's decorators takes as it is (numba's takes ``range``)."""
    for i in svod.prange(out.shape[0]):
        out[i] = x[i] + 1.0


def _add_count(out, x, n):  # type: ignore[no-untyped-def]
    """The tiny function given an int that changes every call (a step count, an offset), which its kernel reads
    as a run-time value."""
    for i in svod.prange(out.shape[0]):
        out[i] = x[i] + n


def _crc16(data, poly=0x8408):  # type: ignore[no-untyped-def]
    """npbench's crc16 as its numba version is written (a loop over bytes of scalar work, a number left to its
    default, a scalar returned): each decorator takes it as it is."""
    crc = 0xFFFF
    for b in data:
        cur_byte = 0xFF & b
        for _ in range(0, 8):
            if (crc & 0x0001) ^ (cur_byte & 0x0001):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            cur_byte >>= 1
    crc = ~crc & 0xFFFF
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF


def _add_one_numba() -> Any:
    import numba

    @numba.njit
    def add_one(out, x):  # type: ignore[no-untyped-def]
        for i in range(out.shape[0]):
            out[i] = x[i] + 1.0

    return add_one


def _add_count_numba() -> Any:
    import numba

    @numba.njit
    def add_count(out, x, n):  # type: ignore[no-untyped-def]
        for i in range(out.shape[0]):
            out[i] = x[i] + n

    return add_count


def call_seconds() -> dict[str, float | None]:
    """A call of a 16-element ``out = x + 1``: as an ``@svod.kernel``, an ``@svod.jit`` function, through
    ``svod.run`` (a builder kernel), and numba's ``njit`` of the same loop; of ``out = x + n`` with ``n`` new
    at each call (1 to 999 in turn) as an ``@svod.kernel``, an ``@svod.jit`` function and numba's; of crc16 on
    16 bytes as an ``@svod.jit`` function and numba's (numba's None without numba). Each is checked against
    numpy or plain Python first."""
    out, x = np.zeros(SIZE, np.float32), np.arange(SIZE, dtype=np.float32)
    calls: dict[str, Callable[[], object] | None] = {}
    kernel, function = svod.kernel(_add_one), svod.jit(_add_one)
    calls["kernel"] = lambda: kernel(out, x)
    calls["jit"] = lambda: function(out, x)
    ast = tiny(1)
    calls["run"] = lambda: svod.run(ast, [out, x])
    data = np.random.default_rng(42).integers(0, 256, SIZE, dtype=np.uint8)
    crc16 = svod.jit(_crc16)
    calls["crc16"] = lambda: crc16(data)
    counts = itertools.cycle(range(1, 1000))
    counted: dict[str, Callable[..., object]] = {"kernel int": svod.kernel(_add_count), "jit int": svod.jit(_add_count)}
    calls["kernel int"] = lambda: counted["kernel int"](out, x, next(counts))
    calls["jit int"] = lambda: counted["jit int"](out, x, next(counts))
    try:
        import numba

        numba_fn, numba_crc16 = _add_one_numba(), numba.njit(_crc16)
        counted["numba int"] = _add_count_numba()
        calls["numba"] = lambda: numba_fn(out, x)
        calls["numba crc16"] = lambda: numba_crc16(data)
        calls["numba int"] = lambda: counted["numba int"](out, x, next(counts))
    except ImportError:
        calls["numba"] = calls["numba crc16"] = calls["numba int"] = None
    seconds: dict[str, float | None] = {}
    for name, call in calls.items():
        if call is None:
            seconds[name] = None
            continue
        out[:] = 0
        if "crc16" in name:
            assert call() == _crc16(data)
        elif name in counted:
            for n in (3, -2, 0):
                counted[name](out, x, n)
                np.testing.assert_array_equal(out, x + n)
        else:
            call()
            np.testing.assert_array_equal(out, x + 1)
        seconds[name] = best_call_seconds(call)
    return seconds


def where_chain(depth: int) -> UOp:
    """A 4x8 kernel whose value goes through ``depth`` ``where``s, each a choice of it plus one or it."""
    k = KernelBuilder("where_chain")
    out, x = k.buffer(dtypes.float32, (4, 8)), k.buffer(dtypes.float32, (4, 8))
    i, j = k.range(4), k.range(8)
    value = x[i, j]
    for _ in range(depth):
        value = (i < j % 5).where(value + 1.0, value)
    k.store(out[i, j], value)
    return k.build()


def cold_compile_seconds(ast: UOp, device: svod.device.Device) -> float:
    """This process's CPU time to compile ``ast`` for ``device`` into a cache of its own, no disk cache."""
    cache = KernelCache(dataclasses.replace(settings, disk_cache=False))
    start = time.process_time()
    cache.get(ast, device)
    return time.process_time() - start


def where_chain_seconds(depths: list[int]) -> dict[int, float]:
    """The cold compile of a ``where`` chain of each depth, after a shallow one has loaded the compiler."""
    device = svod.get_device("CPU")
    cold_compile_seconds(where_chain(10), device)
    return {depth: cold_compile_seconds(where_chain(depth), device) for depth in depths}


def suite_compile_seconds() -> dict[str, float]:
    """The cold compile of each kernel of the suite (quick sizes, as ``@svod.kernel`` builds them), the sum over
    its steps; after one kernel has loaded the compiler."""
    device = svod.get_device("CPU")
    cold_compile_seconds(tiny(2), device)
    return {w.name: sum(cold_compile_seconds(step.ast, device) for step in w.steps) for w in suite(quick=True)}


def measure(depths: list[int]) -> dict[str, Any]:
    return {"import_s": {"svod": import_seconds("svod"), "numpy": import_seconds("numpy")},
            "call_s": call_seconds(), "where_chain_s": where_chain_seconds(depths),
            "suite_compile_s": suite_compile_seconds()}


def report(figures: dict[str, Any]) -> str:
    calls = figures["call_s"]
    imports = figures["import_s"]
    lines = [f"import svod           {imports['svod']['wall'] * 1e3:8.1f} ms   ({imports['svod']['cpu'] * 1e3:.1f} ms "
             f"CPU; numpy alone {imports['numpy']['wall'] * 1e3:.1f} ms, {imports['numpy']['cpu'] * 1e3:.1f} ms CPU)"]
    for name, label in (("kernel", "@svod.kernel call"), ("jit", "@svod.jit call"), ("run", "svod.run"),
                        ("crc16", "@svod.jit crc16"), ("kernel int", "@svod.kernel, new int"),
                        ("jit int", "@svod.jit, new int"), ("numba", "numba njit call"), ("numba crc16", "numba crc16"),
                        ("numba int", "numba, new int")):
        value = calls[name]
        lines.append(f"{label:21s} {'   n/a' if value is None else f'{value * 1e6:8.2f} us'}")
    for depth, seconds in figures["where_chain_s"].items():
        lines.append(f"where chain {depth:>6}    {seconds:8.3f} s (CPU time)")
    for name, seconds in sorted(figures["suite_compile_s"].items(), key=lambda item: item[1]):
        lines.append(f"cold compile {name:16s} {seconds * 1e3:8.1f} ms (CPU time)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_contact", description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--depths", default="1000,4000,10000", help="where-chain depths, comma separated")
    args = parser.parse_args(argv)
    figures = measure([int(d) for d in args.depths.split(",") if d])
    print(report(figures))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
