"""Lowering passes every target runs, and what the CPU and GPU passes share: rewrites of a kernel AST for a
device, before the linearizer orders it. Each says the one guarantee it gives; the order they run in, per
target, is ``svod.codegen.pipeline``'s.

::

    lower       every target: anchor_ranges, fuse_products, decompose, speculate_gated_loads, split_reduction
                (the parts of one long reduction); gate_effects; describe (what lowering did); a CPU's
                share_reduction_loops (independent sums over one length in one loop)
      <- upcast     a reduction's loop doing more per turn: upcast_reductions (tiles of outputs),
                    split_reductions (independent partials)
    nest_order  a nest of parallel ranges ordered by what it accesses: parallel_nest, order_parallel_nest
        <- lower_cpu      a CPU: split_for_threads, privatize_atomics, tile_for_cpu, block_transposes
        <- matmul_blocks  a CPU matmul whose b outgrows L2: block_matmul
        <- lower_gpu      a GPU: to_gpu_indices, share_reductions, reduce_per_item, tile_matmul

Each module imports only from those above it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from svod.codegen.accumulators import reduce_identity
from svod.codegen.ranges import free_axis, live_ranges, range_order
from svod.device.caps import CORE_ID
from svod.dtype import PtrDType
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, UPat, graph_rewrite, kernel_label, substitute
from svod.ir.ops import EFFECTS, FUSED, REASSOCIABLE, STATEMENTS
from svod.ir.uop import FUSED_DTYPES, memory_of, written_memory

__all__ = ["CHUNK_ALIGNMENT", "THREAD_MIN_WORK", "anchor_ranges", "decompose", "describe", "drop_empty_ranges",
           "fuse_products", "gate_effects", "private_statements", "share_reduction_loops", "speculate_gated_loads",
           "split_reduction"]


def anchor_ranges(sink: UOp) -> UOp:
    """Each effect (and loop exit) keeps, as extra sources, the ranges it was written in (those its target and value
    depend on). Simplification may fold a dependency away (``min(j, -1)`` is ``-1`` for a LOOP range ``j``),
    but ``out[i] += min(j, -1)`` must still run once per ``j``: the ranges an effect runs over are decided
    by the kernel as written. Renderers read an effect's first two sources only."""
    live = live_ranges(sink)
    effects = [e.replace(src=(*e.src[:2], *sorted(live[e] - {e.src[0]} if e.op is Ops.EXIT else live[e],
                                                  key=range_order)))
               if (e.op in EFFECTS or e.op is Ops.EXIT) and live[e] else e for e in sink.src]
    return sink.replace(src=tuple(effects))


def drop_empty_ranges(sink: UOp) -> UOp | None:
    """A range whose end is 0 or less for every value of the variables (a constant, or ``d - 1`` with ``d``
    bounded by 1) makes no turns: an effect under it never happens and is dropped, and a reduction over it is
    its identity. Nothing after sees such a range, whose bounds have no value (simplification would take its
    one bound for its value, and hoist an access it guards)."""
    empty = [u for u in sink.toposort() if u.op is Ops.RANGE and u.src[0].vmax <= 0]
    if not empty:
        return None
    identities = {u: UOp.const(u.dtype, reduce_identity(u.arg, u.dtype)) for u in sink.toposort()
                  if u.op is Ops.REDUCE and any(r in empty for r in u.src[1:])}
    live = live_ranges(sink)
    kept = tuple(e for e in sink.src if not (e.op in EFFECTS and any(r in live[e] for r in empty)))
    return substitute(sink.replace(src=kept), identities)


def fuse_products(sink: UOp) -> UOp:
    """Each float32 or float64 sum of products (a REDUCE ADD whose value is a MUL) accumulates with one
    rounding per term, ``acc = fma(a, b, acc)``, as BLAS does: the MUL is marked ``FUSED``. It runs before
    any rewrite, so that what fuses is decided by the kernel as written, as the reference decides it."""
    def fused(node: UOp) -> UOp | None:
        value = node.src[0]
        if node.arg is not Ops.ADD or node.dtype not in FUSED_DTYPES or value.op is not Ops.MUL or value.arg == FUSED:
            return None
        return node.replace(src=(value.replace(arg=FUSED), *node.src[1:]))
    return graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="node"), fused)]), name="fuse_products")


def share_reduction_loops(sink: UOp) -> UOp | None:
    """Sums over ranges of one length, each in a loop of its own, that run in the same loops and neither
    uses the other (a masked mean's sum and count, a dot product beside a norm), summed in one loop: memory
    both read (the mask) is read once a turn instead of once a loop. Each sum adds the same terms; a float sum
    is marked ``REASSOCIABLE``, as a loop's only sum may be reassociated (vectorised) by the backend, so
    sharing a loop costs it nothing. A sum the same across an outer range is not moved into that range's loop
    (it would be computed once a turn of it), nor one that uses the other (a variance's uses the mean). None
    where no two share."""
    reductions = [u for u in sink.toposort() if u.op is Ops.REDUCE]
    own = Counter(r for u in reductions for r in u.src[1:])
    loops: dict[tuple[UOp, frozenset[UOp]], list[UOp]] = {}
    for u in reductions:  # in toposort order: a later sum may use an earlier one, never the reverse
        r = u.src[-1]
        if u.arg is Ops.ADD and len(u.src) == 2 and r.op is Ops.RANGE and r.arg[1] is AxisKind.REDUCE and own[r] == 1 \
                and (u.dtype.is_float or u.dtype.is_int):
            loops.setdefault((r.src[0], u.live_ranges), []).append(u)
    renamed: dict[UOp, UOp] = {}
    for first, *others in loops.values():
        joined = [first]
        for u in others:
            below = frozenset(u.toposort())
            if not any(j in below for j in joined):
                joined.append(u)
        renamed |= {u.src[1]: first.src[1] for u in joined[1:]}
    if not renamed:
        return None
    shared = frozenset(renamed.values())

    def reassociable(node: UOp) -> UOp | None:
        if node.arg is not Ops.ADD or not node.dtype.is_float or node.src[-1] not in shared:
            return None
        return node.replace(arg=(Ops.ADD, REASSOCIABLE))
    return graph_rewrite(substitute(sink, renamed), PatternMatcher([(UPat(Ops.REDUCE, name="node"), reassociable)]),
                         name="share_reduction_loops")


def decompose(root: UOp, decompositor: PatternMatcher | None) -> UOp:
    return root if decompositor is None else graph_rewrite(root, decompositor, name="decompose")


def gate_effects(sink: UOp, conditions: Mapping[UOp, UOp]) -> UOp:
    """Each effect of ``sink`` that ``conditions`` names runs only where its condition holds: its target
    INDEX is gated (together with any gate it has), and so is every load it makes. (A work item past the
    end of a range must not load either: the accesses were proven safe for indices inside the range.) A loop's
    exit that ``conditions`` names ends its loop where the condition fails (``_gated_exit``)."""
    effects = []
    for e in sink.src:
        cond = conditions.get(e)
        effects.append(e if cond is None else _gated_exit(e, cond) if e.op is Ops.EXIT else _gated(e, cond))
    return sink.replace(src=tuple(effects))


def private_statements(sink: UOp) -> frozenset[UOp]:
    """The statements of ``sink`` that every work item (thread) runs for itself where a launch would give
    serial code to the first one only: stores into its own registers of values read from memory the kernel
    never writes, and loops' exits, where every loop they are in holds nothing else. Serial code that carries
    a local into a parallel loop after it (``n = 0; while n * n < m: n += 1`` then ``out[i] = n + i``) must
    run wherever that loop runs: each work item reads its own register."""
    statements = [e for e in sink.src if e.op in STATEMENTS]
    written = {m for m in written_memory(statements) if m.op is not Ops.DEFINE_REG}
    reads_written: dict[UOp, bool] = {}
    for u in sink.toposort():
        reads_written[u] = (u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written) or \
            any(reads_written[s] for s in u.src)
    live = live_ranges(sink)
    loops = {e: live[e] | ({e.src[0]} if e.op is Ops.EXIT else set()) for e in statements}
    private = {e for e in statements if not reads_written[e] and (e.op is Ops.EXIT or (
        e.op is Ops.STORE and memory_of(e.src[0].src[0]).op is Ops.DEFINE_REG))}
    while True:  # a loop runs on every work item or on the first alone: all its statements private, or none
        kept = {e for e in private if not any(s not in private and loops[e] & loops[s] for s in statements)}
        if kept == private:
            break
        private = kept
    return frozenset(private)


def _gated_exit(exit_: UOp, cond: UOp) -> UOp:
    """A loop's exit in a work item that runs its loop's effects only where ``cond`` holds: where it fails,
    the loop ends after its first turn, which does nothing there, and its test loads nothing."""
    tested = _gated(exit_.src[1], cond, target=False)
    return exit_.replace(src=(exit_.src[0], cond.ne(True) | tested, *exit_.src[2:]))


def _gated(effect: UOp, cond: UOp, target: bool = True, depending_on: UOp | None = None,
           ahead: frozenset[UOp] = frozenset()) -> UOp:
    """``effect`` with ``cond`` added to the gate of each load below it (of those whose index depends on
    ``depending_on``, if given), and of its target unless ``target`` is False (then ``effect`` may be any
    value). Nodes ``ahead`` are computed before ``cond`` can be (a loop's end, which ``cond`` reads through
    the loop's index) and stay as they are."""
    def gate(index: UOp) -> UOp:
        return index.replace(src=(*index.src[:2], cond if len(index.src) == 2 else index.src[2] & cond))

    rebuilt: dict[UOp, UOp] = {}
    depends: dict[UOp, bool] = {}
    for u in effect.toposort():
        src = tuple(rebuilt[s] for s in u.src)
        node = u if src == u.src else u.replace(src=src)
        depends[u] = depending_on is None or u is depending_on or any(depends[s] for s in u.src)
        if u not in ahead and ((u.op is Ops.LOAD and depends[u.src[0]]) or (target and u is effect)):
            node = node.replace(src=(gate(node.src[0]), *node.src[1:]))
        rebuilt[u] = node
    return rebuilt[effect]


def speculate_gated_loads(sink: UOp) -> UOp:
    """Gated loads from a buffer the kernel only reads, of a constant size of at least one element, as
    loads at ``gate.where(index, 0)`` whose value counts only where the gate holds.

    Such a load always reads inside the buffer (binding checks it holds the constant size), and without a
    branch per access, a CPU vectorises the lanes of a register tile: a padded convolution's edge test
    becomes a masked gather instead of sixteen branches. On a GPU, a masked tile's loads no longer diverge
    (and PoCL vectorises the work items of a group again). Where the gate fails, the value read (element 0,
    which another kernel may be writing) is discarded; LLVM gives a racing plain load an undefined value,
    not undefined behaviour. A checked access (``CHECKED``) keeps its run-time test.
    """
    return graph_rewrite(sink, SPECULATED_LOADS, written_memory(sink.toposort()), name="speculate_gated_loads")


def _speculated(ctx: set[UOp], load: UOp) -> UOp | None:
    """``load`` at ``gate.where(index, 0)``, counted only where the gate holds, where it is ``_speculable``;
    made bottom up from its sources' rewrites (a load in another's gate or index, as a range clamped to a
    loaded bound, is the rewritten one in every node that uses it)."""
    if not _speculable(load, ctx):
        return None
    buffer, position, gate = load.src[0].src
    always = load.src[0].replace(src=(buffer, gate.where(position, 0)))
    return gate.where(load.replace(src=(always, *load.src[1:])), UOp.const(load.dtype, 0))


def _speculable(u: UOp, written: set[UOp]) -> bool:
    """Whether ``u`` is a gated, unchecked load from a buffer the kernel only reads, of a constant size of at
    least one element (``speculate_gated_loads``)."""
    if u.op is not Ops.LOAD or len(u.src[0].src) != 3 or u.src[0].arg is not None:
        return False
    memory = memory_of(u.src[0].src[0])
    return memory.op is Ops.PARAM and memory not in written and isinstance(memory.dtype, PtrDType) \
        and memory.dtype.size >= 1


SPECULATED_LOADS = PatternMatcher([(UPat(Ops.LOAD, name="load"), _speculated)])


THREAD_MIN_WORK = 1 << 15
"""The fewest innermost iterations worth a CPU worker of its own: a kernel with no more (at the largest sizes
its variables allow) stays on one thread, a reduction no longer is not split, and a launch wakes only as
many workers as have this much work each (``lower_cpu.thread_split``). It trades the wake of a sleeping
worker of the thread team (svod's own, ``cpu_team``, stays awake a moment after each launch, but a worker
that slept must be woken) against the work it takes over: this many iterations of a cheap body (a vectorised
saxpy element, a fraction of a ``sin``'s cost) take about as long as one wake, so a kernel with half as many
ran faster on one thread, and one with twice as many on two."""


def most_iterations(sink: UOp) -> int:
    """The most innermost iterations ``sink`` may make, the work ``THREAD_MIN_WORK`` is weighed against: the
    product of its ranges' largest ends."""
    found = 1
    for u in sink.toposort():
        if u.op is Ops.RANGE:
            found *= max(int(u.src[0].vmax), 1)
    return found


REDUCTION_PARTIALS = 256
"""How many partial results a split reduction computes: a constant, so the result is the same whatever
the thread count or device."""


def split_reduction(sink: UOp, partials: int = REDUCTION_PARTIALS) -> tuple[UOp, UOp] | None:
    """A kernel that is large reductions (no GLOBAL range to share out) as two kernels that share every
    buffer and one more per reduction, a scratch buffer of its partial results:

    - ``partial``: a GLOBAL range over ``partials`` chunks of each reduction's range, each reduced into its
      scratch; the device spreads that range as it spreads any (CPU threads, GPU work items);
    - ``combine``: one pass reduces the partials in order and finishes the stores.

    The reductions may run over ranges of their own and be of different dtypes (``x.min()`` and ``x.max()``
    of one statement; a histogram's least, greatest and count of NaNs). Chunks and combine order are fixed, so
    results do not depend on timing, threads or device. None when the kernel is not a reduction of that
    shape: no reduction inside another or inside a range the store runs over, none of memory the kernel
    writes (its stores would all come after every partial), and one range at least long enough to share.
    """
    topo = sink.toposort()
    reduces = [u for u in topo if u.op is Ops.REDUCE]
    if not reduces or any(u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL for u in topo) \
            or any(u.op is Ops.ATOMIC for u in sink.src):
        return None
    written = written_memory(sink.src)
    if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written for red in reduces
           for u in red.src[0].toposort()):
        return None  # the partials would all be summed before the kernel's first store, not after those before
    nested = any(inner.op is Ops.REDUCE for red in reduces for inner in red.src[0].toposort())
    live = live_ranges(sink)
    if nested or any(len(red.src) != 2 or live[red] for red in reduces):
        return None
    ranges = list(dict.fromkeys(red.src[1] for red in reduces))
    if max(int(r.src[0].vmax) for r in ranges) < THREAD_MIN_WORK:
        return None
    params = _params(sink)
    scratches = [UOp.param(params[-1].arg + 1 + k, red.dtype, partials) for k, red in enumerate(reduces)]
    worker = UOp.range(partials, free_axis(sink), AxisKind.GLOBAL)
    chunks = {r: _chunk(r, worker, partials) for r in ranges}
    stores = [scratch[worker].store(substitute(red.src[0], {red.src[1]: start + inner}).reduce(inner, op=red.arg))
              for scratch, red in zip(scratches, reduces, strict=True) for start, inner in [chunks[red.src[1]]]]
    each = UOp.range(partials, ranges[0].arg[0], AxisKind.REDUCE)
    combined = {red: scratch[each].reduce(each, op=red.arg) for scratch, red in zip(scratches, reduces, strict=True)}
    name = kernel_label(sink)
    partial = UOp.sink(*stores, *params, name=f"{name}_partial")
    combine = UOp.sink(*substitute(sink, combined).src, *params, *scratches, name=f"{name}_combine")
    return partial, combine


CHUNK_ALIGNMENT = 64
"""A split reduction's chunks are a multiple of this many turns: each starts a cache line whatever the
dtype, and holds whole vectors of independent partials (``upcast.split_reductions``), which a chunk of an
odd length did not (4e6 float64 in 256 chunks of 15625: one chain of dependent compares each)."""


def _chunk(r: UOp, worker: UOp, partials: int) -> tuple[UOp, UOp]:
    """The start of ``worker``'s chunk of ``r``'s turns, of ``partials`` chunks, and a range over it (the same
    axis as ``r``'s; the last chunks shorter or empty)."""
    end = r.src[0]
    chunk = ((end + (partials - 1)) // partials + (CHUNK_ALIGNMENT - 1)) // CHUNK_ALIGNMENT * CHUNK_ALIGNMENT
    start = worker * chunk
    return start, UOp.range((end - start).minimum(chunk), r.arg[0], AxisKind.REDUCE)


def _params(sink: UOp) -> tuple[UOp, ...]:
    """The buffers of ``sink`` by slot: every part a pass makes of a kernel takes all of them, and a buffer
    of the kernel's own takes the next slot."""
    return tuple(sorted((u for u in sink.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg))


# ---- what lowering did -----------------------------------------------------------------------------------

def describe(sink: UOp) -> str:
    """One line on how a lowered kernel uses the device (``SVOD_DEBUG``): the chunks CPU threads share or the
    launch shape, buffers of atomic adds each chunk keeps a private copy of, reductions a work group shares in local
    memory, and how many reductions share one loop (the output
    tile of an upcast reduction, or the partials of a split MAX/MIN)."""
    topo = sink.toposort()
    parts = []
    cores = next((u.arg[2] + 1 for u in topo if u.op is Ops.DEFINE_VAR and u.arg[0] == CORE_ID), None)
    specials = {u.arg: u.src[0] for u in topo if u.op is Ops.SPECIAL}
    if cores is not None:
        parts.append(f"{cores} chunks of the outermost parallel range, which the threads share")
    elif specials:
        def size(end: UOp) -> str:
            return str(end.arg) if end.op is Ops.CONST else f"up to {int(end.vmax)}"

        parts.append("launch " + ", ".join(f"{name} < {size(end)}" for name, end in sorted(specials.items())))
    else:
        parts.append("one thread")
    locals_ = sorted((u for u in topo if u.op is Ops.DEFINE_LOCAL), key=lambda u: u.arg)
    copies = [u.dtype for u in locals_ if u.src and isinstance(u.dtype, PtrDType)]
    temps = [u.dtype for u in locals_ if not u.src and isinstance(u.dtype, PtrDType)]
    if copies:
        parts.append(f"atomic adds into a private copy per chunk of {len(copies)} buffer(s) "
                     f"({' + '.join(f'{t.size} {t.base.name}' for t in copies)})")
    barriers = [u for u in sink.src if u.op is Ops.BARRIER]
    sizes = ' + '.join(f'{t.size} {t.base.name}' for t in temps)
    if temps and any(b.src for b in barriers):  # barriers inside a loop: tile_matmul
        parts.append(f"operands staged block by block in local memory ({sizes}), {len(barriers)} barriers a block")
    elif temps:
        parts.append(f"{len(temps)} reduction(s) shared by each work group in local memory ({sizes}), "
                     f"{len(barriers)} barriers")
    loops: dict[tuple[UOp, ...], int] = {}
    for u in topo:
        if u.op is Ops.REDUCE:  # a reduction in lanes is one accumulator per lane
            lanes = max((int(n.arg) for n in u.src[0].toposort() if n.op is Ops.LANE), default=1)
            loops[u.src[1:]] = loops.get(u.src[1:], 0) + lanes
    if loops:
        parts.append(f"{len(loops)} reduction loop(s), the widest updating {max(loops.values())} accumulator(s)")
    return "; ".join(parts)
