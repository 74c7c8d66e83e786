"""Lowering passes: from a kernel AST to a graph of explicit loops that the linearizer can order.

Each pass is a named graph rewrite with one guarantee:

- ``simplify``: index arithmetic folded (``svod.ir.symbolic``).
- ``decompose``: no op the renderer lacks remains (the renderer's decompositor).
- ``pin_read_modify_write``: a load of the memory its store updates stays inside the store's loops.
- ``split_for_threads``: the outermost GLOBAL range of a CPU kernel is split into ``core_id`` chunks.
- ``lower_reduces``: no REDUCE remains; each is an accumulator register initialised with the op's
  identity, updated inside loops over its REDUCE ranges, and read after them.
- ``close_ranges``: every RANGE has exactly one END, whose sources are everything that runs in the loop;
  a STORE runs inside every range its index or value uses.

After these, the graph is loops and memory only: RANGE/END, DEFINE_REG, INDEX/LOAD/STORE, ALU ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, UPat, graph_rewrite, simplify
from svod.ir.ops import SCOPES

__all__ = ["close_ranges", "decompose", "live_ranges", "lower_reduces", "pin_read_modify_write", "simplify",
           "split_for_threads", "substitute"]


def substitute(root: UOp, replacements: Mapping[UOp, UOp]) -> UOp:
    """``root`` with each key of ``replacements`` replaced by its value, wherever it occurs."""
    if not replacements:
        return root
    done: dict[UOp, UOp] = dict(replacements)
    for node in root.toposort():
        if node in done:
            continue
        new_src = tuple(done.get(s, s) for s in node.src)
        done[node] = node if new_src == node.src else node.replace(src=new_src)
    return done[root]


def decompose(root: UOp, decompositor: PatternMatcher | None) -> UOp:
    return root if decompositor is None else graph_rewrite(root, decompositor, name="decompose")


def live_ranges(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node below ``root``, the scopes (RANGEs and IFs) it runs inside: those it depends on and
    that no END or REDUCE between them has closed."""
    live: dict[UOp, frozenset[UOp]] = {}
    for node in root.toposort():
        ranges = frozenset().union(*(live[s] for s in node.src)) if node.src else frozenset()
        if node.op in SCOPES:
            ranges |= {node}
        elif node.op is Ops.END:
            ranges -= {node.src[0]}
        elif node.op is Ops.REDUCE:
            ranges -= set(node.src[1:])
        live[node] = ranges
    return live


def _axis_order(scope: UOp) -> tuple[int, int]:
    """Nesting order of scopes: guards outermost, then ranges by axis, REDUCE ranges innermost."""
    if scope.op is Ops.IF:
        return (-1, 0)
    axis, kind = scope.arg
    return (int(kind is AxisKind.REDUCE), axis)


# ---- memory order -----------------------------------------------------------------------------------------

def pin_read_modify_write(sink: UOp) -> UOp:
    """A LOAD from the buffer its STORE writes reads the value of *this* iteration: it runs in every range
    of the store, never hoisted out of a loop that updates the same memory (``acc[i] += x[i, j]``)."""
    live = live_ranges(sink)
    replacements: dict[UOp, UOp] = {}
    for store in sink.src:
        if store.op is not Ops.STORE or store.src[0].op is not Ops.INDEX:
            continue
        target = store.src[0].src[0]
        for load in store.src[1].toposort():
            if load.op is Ops.LOAD and load.src[0].src[0] is target and live[load] != live[store]:
                missing = sorted(live[store] - live[load], key=_axis_order)
                index = load.src[0]
                pinned = index.replace(src=(target.after(*missing), index.src[1]))
                replacements[load] = load.replace(src=(pinned,))
    return substitute(sink, replacements)


# ---- CPU threads -----------------------------------------------------------------------------------------

THREAD_MIN_WORK = 1 << 14
"""Below this many innermost iterations (at the largest sizes the variables allow) a kernel stays on
one thread: waking workers would cost more than the work."""
THREAD_CHUNK_ALIGN = 16
"""Each thread's chunk of the split range starts on a multiple of this, so vector loops stay aligned."""


def split_for_threads(sink: UOp, threads: int) -> UOp:
    """Split the outermost GLOBAL range across ``threads`` workers named by ``core_id``.

    Worker ``c`` runs indices ``[c*chunk, min((c+1)*chunk, end))`` where ``chunk`` is ``end/threads``
    rounded up to ``THREAD_CHUNK_ALIGN``. Other GLOBAL ranges become sequential loops inside it.
    """
    ranges = [u for u in sink.toposort() if u.op is Ops.RANGE]
    global_ranges = sorted((r for r in ranges if r.arg[1] is AxisKind.GLOBAL), key=_axis_order)
    if threads <= 1 or not global_ranges:
        return sink
    work = 1
    for r in ranges:
        work *= max(int(r.src[0].vmax), 1)
    outer = global_ranges[0]
    end = outer.src[0]
    if work < THREAD_MIN_WORK or end.vmax < 2 * THREAD_CHUNK_ALIGN:
        return sink
    core_id = UOp.define_var("core_id", 0, threads - 1)
    per_thread = (end + (threads - 1)) // threads
    chunk = (per_thread + (THREAD_CHUNK_ALIGN - 1)) // THREAD_CHUNK_ALIGN * THREAD_CHUNK_ALIGN
    start = core_id * chunk
    count = (end - start).minimum(chunk)
    inner = UOp.range(count, outer.arg[0], AxisKind.LOOP)
    return substitute(sink, {outer: start + inner})


# ---- GPU work items ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WorkGroupLimits:
    """What a device allows in one work group (OpenCL's CL_DEVICE_MAX_WORK_GROUP_SIZE and item sizes)."""

    max_work_group_size: int
    max_item_sizes: tuple[int, int, int]


PREFERRED_GROUP_SIZE = (64, 4, 1)
"""Work-group shape to aim for, per launch dimension, before the device's limits and the sizes cut it."""


def _power_of_two_at_most(limit: int) -> int:
    return 1 << max(int(limit), 1).bit_length() - 1


def to_gpu_indices(sink: UOp, limits: WorkGroupLimits, direct_index: bool) -> UOp:
    """Map up to three GLOBAL ranges, innermost first, to launch dimensions; others stay loops.

    With ``direct_index`` a single-range kernel without reductions uses ``idx0`` and leaves the
    work-group size to the runtime, which covers the range exactly. Otherwise each dimension gets
    ``gidxN * L + lidxN`` with a local size ``L`` that fits the limits, ``ceil(end / L)`` groups, and one
    IF around the body that skips the work items past the end when an end is not a multiple of ``L``.
    """
    topo = sink.toposort()
    globals_ = sorted((u for u in topo if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL), key=_axis_order)
    dims = list(reversed(globals_[-3:]))
    if not dims:
        return sink
    if direct_index and len(dims) == 1 and not any(u.op is Ops.REDUCE for u in topo):
        return substitute(sink, {dims[0]: UOp.special(dims[0].src[0], "idx0")})
    budget = limits.max_work_group_size
    indices: dict[UOp, UOp] = {}
    in_range: list[UOp] = []
    for d, r in enumerate(dims):
        end = r.src[0]
        local = _power_of_two_at_most(min(PREFERRED_GROUP_SIZE[d], budget, limits.max_item_sizes[d], int(end.vmax)))
        budget //= local
        groups = UOp.special((end + (local - 1)) // local, f"gidx{d}")
        index = groups * local + UOp.special(local, f"lidx{d}")
        indices[r] = index
        if not (end.op is Ops.CONST and end.arg % local == 0):
            in_range.append(index.lt(end))
    if in_range:
        condition = in_range[0]
        for more in in_range[1:]:
            condition = condition & more
        guard = UOp(Ops.IF, dtypes.void, (condition,))
        indices = {r: index.after(guard) for r, index in indices.items()}
    return substitute(sink, indices)


# ---- reductions ------------------------------------------------------------------------------------------

def reduce_identity(op: Ops, dtype: DType) -> bool | int | float:
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    return dtype.min


@dataclass
class _ReduceContext:
    registers: int = 0
    live: dict[UOp, frozenset[UOp]] = field(default_factory=dict)


def _lower_reduce(ctx: _ReduceContext, red: UOp) -> UOp:
    value, *reduce_ranges = red.src
    outer = live_ranges(value)[value] - set(reduce_ranges)
    scope = tuple(sorted(outer, key=_axis_order))
    reg = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, local=True), scope, ctx.registers)
    ctx.registers += 1
    zero = UOp.index_const(0)
    init = reg.index(zero).store(UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)))
    accumulated = reg.after(init, *reduce_ranges).index(zero).load()  # read in the loop, after the init
    loop: UOp = reg.index(zero).store(accumulated.alu(red.arg, value))
    for r in reversed(reduce_ranges):
        loop = UOp(Ops.END, dtypes.void, (r, loop))
    return reg.after(loop).index(zero).load()


def lower_reduces(sink: UOp) -> UOp:
    return graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="red"), _lower_reduce)]),
                         ctx=_ReduceContext(), name="lower_reduces")


# ---- loops -----------------------------------------------------------------------------------------------

def close_ranges(sink: UOp) -> UOp:
    """Wrap the SINK's effects in ENDs, innermost range first, one END per range."""
    if sink.op is not Ops.SINK:
        raise GraphError("a kernel's root must be a SINK", stage="lower", value=sink.op)
    live = live_ranges(sink)
    effects: list[UOp] = list(sink.src)
    open_ranges = sorted({r for e in effects for r in live[e]}, key=_axis_order)
    for r in reversed(open_ranges):
        inside = [e for e in effects if r in live[e]]
        if inside:
            end = UOp(Ops.END, dtypes.void, (r, *inside))
            live.update(live_ranges(end))
            effects = [e for e in effects if e not in inside] + [end]
    return UOp.sink(*_in_order(effects, sink.src), name=sink.arg)


def _in_order(effects: Iterable[UOp], original: tuple[UOp, ...]) -> list[UOp]:
    """Keep effects in the order of the SINK's sources they stand for, so output is deterministic."""
    position = {e: i for i, e in enumerate(original)}

    def first_source(e: UOp) -> int:
        return min((position[n] for n in e.toposort() if n in position), default=len(original))

    return sorted(effects, key=first_source)
