"""The metadata LLVM IR kernels carry: which buffers alias which (alias scopes), and which values depend on
data read from memory (a select on one is ``!unpredictable``)."""

from __future__ import annotations

from svod.ir import Ops, UOp
from svod.ir.uop import written_memory


def loaded_values(linear: tuple[UOp, ...]) -> frozenset[UOp]:
    """The values of ``linear`` computed from a LOAD (of a buffer or of an accumulator): what depends on data,
    not on indices and variables alone."""
    loaded: set[UOp] = set()
    for u in linear:
        if u.op is Ops.LOAD or any(s in loaded for s in u.src):
            loaded.add(u)
    return frozenset(loaded)


def alias_scopes(linear: tuple[UOp, ...]) -> tuple[dict[UOp, str], list[str]]:
    """Per buffer, the metadata its loads and stores carry, and the metadata lines that define it: each buffer
    is its own alias scope, and its accesses alias no buffer where one of the two is written. The runtime
    guarantees that (``CachedKernel.check_buffers`` refuses a written buffer sharing memory with another
    argument); knowing it, LLVM vectorises a copy from one buffer into another without checking overlap."""
    params = sorted((u for u in linear if u.op is Ops.PARAM), key=lambda u: u.arg)
    written = written_memory(linear)
    lines = ['!0 = distinct !{!0, !"svod buffers"}']
    lines += [f"!{1 + k} = distinct !{{!{1 + k}, !0}}" for k in range(len(params))]
    suffixes: dict[UOp, str] = {}
    for k, p in enumerate(params):
        lines.append(f"!{len(lines)} = !{{!{1 + k}}}")
        suffixes[p] = f", !alias.scope !{len(lines) - 1}"
        apart = [f"!{1 + j}" for j, q in enumerate(params) if q is not p and (p in written or q in written)]
        if apart:
            lines.append(f"!{len(lines)} = !{{{', '.join(apart)}}}")
            suffixes[p] += f", !noalias !{len(lines) - 1}"
    return suffixes, lines
