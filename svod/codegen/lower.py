"""Lowering passes: from a kernel AST to a graph of explicit loops that the linearizer can order.

In pipeline order (``KernelRenderer.lower``), each pass with the one guarantee it gives:

- ``check_indices``: no access can leave its buffer (an error otherwise, before anything compiles).
- ``simplify``: index arithmetic folded (``svod.ir.symbolic``).
- ``decompose``: no op the renderer lacks remains (the renderer's decompositor).
- ``pin_read_modify_write``: a load of the memory its store updates stays inside the store's loops.
- ``upcast_reductions`` (CPU): a reduction computes several neighbouring outputs per pass.
- ``split_for_threads`` (CPU) or ``to_gpu_indices`` (GPU): GLOBAL ranges become ``core_id`` chunks, or
  launch dimensions with a guard.
- ``lower_reduces``: no REDUCE remains; each is an accumulator register initialised with the op's
  identity, updated inside loops over its REDUCE ranges, and read after them.
- ``close_ranges``: every RANGE has exactly one END, whose sources are everything that runs in the loop;
  a STORE runs inside every range its index or value uses.

Before all of them, ``split_reduction`` may turn a CPU kernel that is one large reduction into two
kernels (``KernelRenderer.stages``). After them, the graph is loops and memory only: RANGE/IF/END,
DEFINE_REG, INDEX/LOAD/STORE and ALU ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, graph_rewrite, simplify
from svod.ir.ops import SCOPES
from svod.ir.uop import param_size

__all__ = ["check_indices", "close_ranges", "decompose", "live_ranges", "lower_reduces", "pin_read_modify_write",
           "simplify", "split_for_threads", "split_reduction", "substitute", "upcast_reductions"]


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


# ---- memory safety ---------------------------------------------------------------------------------------

def check_indices(sink: UOp, kernel: str) -> None:
    """Every buffer access stays inside its buffer, with each variable at its largest value.

    Fixing the variables makes every range and size a constant, so value bounds decide the question
    without symbolic reasoning. A kernel that would read or write outside a buffer is an error before it
    is compiled; without this, a compiled kernel would corrupt memory or crash the process.
    """
    at_max = {u: UOp.const(u.dtype, u.arg[2]) for u in sink.toposort() if u.op is Ops.DEFINE_VAR}
    fixed = simplify(substitute(sink, at_max)) if at_max else sink
    for index in fixed.toposort():
        if index.op is not Ops.INDEX or index.src[0].op is not Ops.PARAM:
            continue
        param = index.src[0]
        size = param_size(param)
        if size.op is not Ops.CONST:
            continue
        lo, hi = index.src[1].bounds
        if lo < 0 or hi >= size.arg:
            raise GraphError(f"buffer {param.arg} has {size.arg} elements but is indexed over [{lo}, {hi}] "
                             "(variables at their largest values)", kernel=kernel, stage="lower", value=(lo, hi))


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
    if work < THREAD_MIN_WORK or outer.src[0].vmax < 2 * THREAD_CHUNK_ALIGN:
        return sink
    start, inner = _thread_chunk(outer, threads)
    return substitute(sink, {outer: start + inner})


def _thread_chunk(r: UOp, threads: int) -> tuple[UOp, UOp]:
    """Worker ``core_id``'s share of range ``r``: its first index, and a loop over its chunk."""
    end = r.src[0]
    core_id = UOp.define_var("core_id", 0, threads - 1)
    per_thread = (end + (threads - 1)) // threads
    chunk = (per_thread + (THREAD_CHUNK_ALIGN - 1)) // THREAD_CHUNK_ALIGN * THREAD_CHUNK_ALIGN
    start = core_id * chunk
    return start, UOp.range((end - start).minimum(chunk), r.arg[0], AxisKind.LOOP)


REDUCTION_PARTIALS = 256
"""How many partial results a split reduction computes: a constant, so the result is the same whatever
the thread count or device."""


def split_reduction(sink: UOp, partials: int = REDUCTION_PARTIALS) -> tuple[UOp, UOp] | None:
    """A kernel that is one large reduction (no GLOBAL range to share out) as two kernels that share
    every buffer and one more, a scratch buffer of partial results:

    - ``partial``: a GLOBAL range over ``partials`` chunks of the reduction, each reduced into
      ``scratch``; the device spreads that range as it spreads any (CPU threads, GPU work items);
    - ``combine``: one pass reduces the partials in order and finishes the stores.

    Chunks and combine order are fixed, so results do not depend on timing, threads or device. None
    when the kernel is not a reduction of that shape: several reductions must share one range, dtype
    and scope.
    """
    topo = sink.toposort()
    reduces = [u for u in topo if u.op is Ops.REDUCE]
    if not reduces or any(u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL for u in topo):
        return None
    r = reduces[0].src[1]
    nested = any(inner.op is Ops.REDUCE for red in reduces for inner in red.src[0].toposort())
    if nested or any(red.src[1:] != (r,) or red.dtype != reduces[0].dtype for red in reduces) \
            or r.src[0].vmax < THREAD_MIN_WORK or any(live_ranges(red)[red] for red in reduces):
        return None
    params = tuple(sorted((u for u in topo if u.op is Ops.PARAM), key=lambda u: u.arg))
    scratch = UOp.param(params[-1].arg + 1, reduces[0].dtype, len(reduces) * partials)
    end = r.src[0]
    worker = UOp.range(partials, 1 + max(u.arg[0] for u in topo if u.op is Ops.RANGE), AxisKind.GLOBAL)
    chunk = (end + (partials - 1)) // partials
    start = worker * chunk
    inner = UOp.range((end - start).minimum(chunk), r.arg[0], AxisKind.REDUCE)
    chunked = {r: start + inner}
    stores = [scratch[k * partials + worker].store(substitute(red.src[0], chunked).reduce(inner, op=red.arg))
              for k, red in enumerate(reduces)]
    each = UOp.range(partials, r.arg[0], AxisKind.REDUCE)
    combined = {red: scratch[k * partials + each].reduce(each, op=red.arg) for k, red in enumerate(reduces)}
    name = sink.arg if isinstance(sink.arg, str) else "kernel"
    partial = UOp.sink(*stores, *params, name=f"{name}_partial")
    combine = UOp.sink(*substitute(sink, combined).src, *params, scratch, name=f"{name}_combine")
    return partial, combine


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
    if direct_index and len(dims) == 1 and dims[0].src[0].vmin >= 1 and not any(u.op is Ops.REDUCE for u in topo):
        return substitute(sink, {dims[0]: UOp.special(dims[0].src[0], "idx0")})
    budget = limits.max_work_group_size
    indices: dict[UOp, UOp] = {}
    in_range: list[UOp] = []
    for d, r in enumerate(dims):
        end = r.src[0]
        local = _power_of_two_at_most(min(PREFERRED_GROUP_SIZE[d], budget, limits.max_item_sizes[d], int(end.vmax)))
        budget //= local
        count = (end + (local - 1)) // local
        groups = UOp.special(count if end.vmin >= 1 else count.maximum(1), f"gidx{d}")  # launches need a group
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


def lower_reduces(sink: UOp) -> UOp:
    """Replace every REDUCE by an accumulator loop, innermost reductions first.

    Reductions over the same ranges in the same scope share one loop, each with its own accumulator
    (a matmul's neighbouring outputs, or a sum and a max of one row). A reduction whose ranges already
    have a loop, because it needs that loop's result, gets a loop of its own over copies of them.
    """
    registers = 0
    while True:
        topo = sink.toposort()
        reduces = [u for u in topo if u.op is Ops.REDUCE]
        if not reduces:
            return sink
        looped = {u.src[0] for u in topo if u.op is Ops.END}
        groups: dict[tuple[tuple[UOp, ...], frozenset[UOp]], list[UOp]] = {}
        for red in reduces:
            if not any(u.op is Ops.REDUCE for u in red.src[0].toposort()):
                scope = live_ranges(red)[red]
                groups.setdefault((red.src[1:], scope), []).append(red)
        replacements: dict[UOp, UOp] = {}
        for (ranges, scope), members in groups.items():
            loop_ranges = ranges
            if any(r in looped for r in ranges):
                loop_ranges = _fresh_ranges(sink, ranges)
            looped.update(loop_ranges)
            results = _lower_group(members, ranges, loop_ranges, scope, registers)
            registers += len(members)
            replacements.update(zip(members, results, strict=True))
        sink = substitute(sink, replacements)


def _fresh_ranges(sink: UOp, ranges: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """Copies of ``ranges`` on axes no range of the kernel uses."""
    next_axis = 1 + max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE)
    return tuple(UOp.range(r.src[0], next_axis + k, r.arg[1]) for k, r in enumerate(ranges))


def _lower_group(members: list[UOp], ranges: tuple[UOp, ...], loop_ranges: tuple[UOp, ...], scope: frozenset[UOp],
                 first_register: int) -> list[UOp]:
    renamed = {r: fresh for r, fresh in zip(ranges, loop_ranges, strict=True) if r is not fresh}
    # loops that already ran over the original ranges stay as they are: only the open uses are renamed
    finished = {u: u for red in members for u in red.src[0].toposort() if u.op is Ops.END and u.src[0] in renamed}
    zero = UOp.index_const(0)
    ordered_scope = tuple(sorted(scope, key=_axis_order))
    registers, updates = [], []
    for k, red in enumerate(members):
        reg = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, local=True), ordered_scope, first_register + k)
        init = reg.index(zero).store(UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)))
        accumulated = reg.after(init, *loop_ranges).index(zero).load()  # read in the loop, after the init
        value = substitute(red.src[0], {**renamed, **finished})
        updates.append(reg.index(zero).store(accumulated.alu(red.arg, value)))
        registers.append(reg)
    loop = UOp(Ops.END, dtypes.void, (loop_ranges[-1], *updates))
    for r in reversed(loop_ranges[:-1]):
        loop = UOp(Ops.END, dtypes.void, (r, loop))
    return [reg.after(loop).index(zero).load() for reg in registers]


# ---- upcasting -------------------------------------------------------------------------------------------

UPCAST_WIDTHS = (16, 8, 4)
"""How many neighbouring outputs of a reduction one pass over its REDUCE range computes, widest first."""


def upcast_reductions(sink: UOp) -> UOp:
    """Compute ``W`` neighbouring outputs of a reduction in one pass over its REDUCE range.

    When a store's reduction reads memory at unit stride along an output range ``j`` with a constant
    end divisible by ``W``, ``j`` becomes ``jo*W + c`` for ``c`` in ``0..W-1``: ``W`` stores whose
    reductions share one loop and whose loads are contiguous in ``c``, which the backend turns into
    vector code (a matmul's inner loop becomes a vector multiply-add over ``W`` columns).
    """
    live = live_ranges(sink)
    effects = []
    for effect in sink.src:
        target = _upcast_range(effect, live) if effect.op is Ops.STORE else None
        if target is None:
            effects.append(effect)
            continue
        copies = _unrolled(effect, *target)
        rows = _row_range(effect, live, exclude=target[0])
        effects.extend(c for copy in copies for c in (_unrolled(copy, rows, ROW_WIDTH) if rows is not None else [copy]))
    return sink.replace(src=tuple(effects))


ROW_WIDTH = 4
"""After the unit-stride range, how many neighbours of one more output range share the same loads."""


def _unrolled(effect: UOp, r: UOp, width: int) -> list[UOp]:
    outer = UOp.range(int(r.src[0].arg) // width, r.arg[0], r.arg[1])
    return [substitute(effect, {r: outer * width + c}) for c in range(width)]


def _reduction_loads(store: UOp) -> list[UOp]:
    return [u for red in store.src[1].toposort() if red.op is Ops.REDUCE for u in red.src[0].toposort()
            if u.op is Ops.LOAD]


def _upcastable(store: UOp, live: dict[UOp, frozenset[UOp]], exclude: UOp | None = None) -> list[UOp]:
    """Output ranges of ``store`` with a constant end, innermost first."""
    return sorted((r for r in live[store] if r.arg[1] is AxisKind.GLOBAL and r.src[0].op is Ops.CONST
                   and r is not exclude), key=_axis_order, reverse=True)


def _upcast_range(store: UOp, live: dict[UOp, frozenset[UOp]]) -> tuple[UOp, int] | None:
    loads = _reduction_loads(store)
    for j in _upcastable(store, live) if loads else []:
        width = next((w for w in UPCAST_WIDTHS if int(j.src[0].arg) % w == 0 and int(j.src[0].arg) > w), None)
        if width is not None and any(_unit_stride(load.src[0].src[1], j) for load in loads):
            return j, width
    return None


def _row_range(store: UOp, live: dict[UOp, frozenset[UOp]], exclude: UOp) -> UOp | None:
    """Another output range that the reduction's loads depend on, whose end ``ROW_WIDTH`` divides."""
    loads = _reduction_loads(store)
    for r in _upcastable(store, live, exclude):
        end = int(r.src[0].arg)
        if end % ROW_WIDTH == 0 and end > ROW_WIDTH and any(r in load.toposort() for load in loads):
            return r
    return None


def _unit_stride(index: UOp, r: UOp) -> bool:
    """``index`` is ``r`` plus terms without ``r``: neighbouring ``r`` read neighbouring elements."""
    if index is r:
        return True
    return index.op is Ops.ADD and any(a is r and r not in b.toposort() for a, b in (index.src, index.src[::-1]))


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
