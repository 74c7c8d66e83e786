"""Per-step timings of a plan run, cost estimates from the kernel, and Chrome trace export.

The cost of a kernel is estimated from its AST: FLOPs are the value (non-index) ALU ops times the
iterations of the loops each runs in; bytes are the sizes of its buffers, each counted once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from svod.codegen import live_ranges
from svod.device.launch import evaluate
from svod.dtype import dtypes
from svod.errors import SvodError
from svod.ir import Ops, UOp, simplify, substitute
from svod.ir.ops import ALU
from svod.ir.uop import param_size, pointee


@dataclass(frozen=True, slots=True)
class StepProfile:
    """One kernel or copy of one plan run: when it started (seconds from the run's start) and how long."""

    id: int
    name: str
    kind: str
    start: float
    seconds: float
    bytes: int
    flops: int
    thread: int

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else math.inf

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else math.inf


def _trips(end: UOp, var_vals: Mapping[str, int]) -> int:
    """A loop's trips for these variable values; for a loop whose end depends on an enclosing loop's variable
    (a triangle, ``range(i + 1, i + d)``), the most it makes."""
    try:
        return max(evaluate(end, var_vals), 0)
    except SvodError:
        values = {v: UOp.const(v.dtype, var_vals[v.arg[0]]) for v in end.toposort()
                  if v.op is Ops.DEFINE_VAR and v.arg[0] in var_vals}
        return max(int(simplify(substitute(end, values)).vmax), 0)


def estimate_cost(ast: UOp, var_vals: Mapping[str, int]) -> tuple[int, int]:
    """(FLOPs, bytes) of one run of ``ast`` for the given variable values."""
    live = live_ranges(ast)
    trip: dict[UOp, int] = {}

    def iterations(node: UOp) -> int:
        count = 1
        for r in live[node]:
            if r not in trip:
                trip[r] = _trips(r.src[0], var_vals)
            count *= trip[r]
        return count

    flops = sum(iterations(u) for u in ast.toposort()
                if u.op in ALU and u.dtype not in (dtypes.index, dtypes.bool) and u.op is not Ops.WHERE)
    nbytes = sum(evaluate(param_size(p), var_vals) * pointee(p).itemsize
                 for p in ast.toposort() if p.op is Ops.PARAM)
    return flops, nbytes


def write_chrome_trace(path: str | os.PathLike[str], steps: Sequence[StepProfile]) -> None:
    """A Chrome trace-event JSON file of ``steps``; chrome://tracing and Perfetto open it."""
    if not steps:
        raise SvodError("no profiled run to export; execute the plan with profile=True first", stage="plan")
    events = [{"name": s.name, "cat": s.kind, "ph": "X", "ts": s.start * 1e6, "dur": s.seconds * 1e6,
               "pid": os.getpid(), "tid": s.thread, "args": {k: v for k, v in asdict(s).items()
                                                            if k in ("id", "bytes", "flops")}}
              for s in steps]
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
