"""Lowering for a GPU: GLOBAL ranges as launch dimensions of work groups (``to_gpu_indices``), a row's
reductions shared by a work group in local memory (``share_reductions``) or computed once by one work item
per row (``reduce_per_item``), and a matmul's operands staged in local memory (``tile_matmul``)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

from svod.codegen.lower import _gated, gate_effects, private_statements
from svod.codegen.nest_order import unit_stride
from svod.codegen.ranges import free_axis, live_ranges, range_order
from svod.codegen.upcast import _nested_reductions, split_reductions
from svod.device.caps import WorkGroupLimits, launch_index
from svod.dtype import dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, UOp, replacements_of, substitute
from svod.ir.ops import EFFECTS, STATEMENTS
from svod.ir.uop import memory_of, written_memory

__all__ = ["GROUP_SIZE", "MATMUL_TILES", "WorkGroupLimits", "reduce_per_item", "share_reductions", "tile_matmul",
           "to_gpu_indices"]


PREFERRED_GROUP_SIZE = (64, 4, 1)
"""Work-group shape to aim for, per launch dimension, before the device's limits and the sizes cut it."""
SQUARE_GROUP_SIZE = (16, 16, 1)
"""The shape for a kernel with an access that depends on both its first two launch dimensions and steps
one element at a time along the second (a transpose's store): each group then reads and writes runs of
16 neighbouring elements, instead of 64 neighbours one way and 4 the other."""


def _power_of_two_at_most(limit: int) -> int:
    return 1 << max(int(limit), 1).bit_length() - 1


def to_gpu_indices(sink: UOp, limits: WorkGroupLimits, direct_index: bool, exact_groups: bool = False) -> UOp:
    """Map the GLOBAL ranges to up to three launch dimensions, innermost first; others stay loops.

    Ranges that no statement runs in together (sibling loops) share a dimension as long as the longest of
    them (``_launch_dimensions``). With ``direct_index`` a single-range kernel without reductions uses
    ``idx0`` and leaves the work-group size to the runtime, which covers the range exactly. Otherwise each
    dimension gets ``gidxN * L + lidxN`` with a local size ``L`` that fits the limits and ``ceil(end / L)``
    groups; an effect runs only on the work items inside its own range (when the launch does not cover it
    exactly), and only on the first work item along a dimension it does not use.

    ``L`` is a power of two; with ``exact_groups`` (a CPU's driver), where that does not divide a constant
    end, the largest size below it that does (``_exact_local``): no group is ragged.
    """
    topo = sink.toposort()
    effects = [e for e in sink.src if e.op in STATEMENTS]  # a loop's exit ends its loop where effects do not run
    private = private_statements(sink)
    uses = {e: set(e.toposort()) for e in effects}
    dims = _launch_dimensions(topo, list(uses.values()))
    if not dims:
        return sink
    ends = [functools.reduce(UOp.maximum, dict.fromkeys(r.src[0] for r in dim)) for dim in dims]
    if direct_index and len(dims) == 1 and len(dims[0]) == 1 and ends[0].vmin >= 1 and \
            not any(u.op is Ops.REDUCE for u in topo):
        index = UOp.special(ends[0], launch_index("global", 0))
        first = {e: index.eq(0) for e in effects if dims[0][0] not in uses[e] and e not in private}
        return substitute(gate_effects(sink, first), {dims[0][0]: index})
    budget = limits.max_work_group_size
    accesses = [u.src[1] for u in topo if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM]
    shape = SQUARE_GROUP_SIZE if len(dims) > 1 and any(
        unit_stride(a, column) and any(r in a.toposort() for r in dims[0]) for a in accesses for column in dims[1]) \
        else PREFERRED_GROUP_SIZE
    indices: dict[UOp, UOp] = {}
    conditions: dict[UOp, list[UOp]] = {e: [] for e in effects}
    spare = len(dims)
    for d, (dim, end) in enumerate(zip(dims, ends, strict=True)):
        fixed = int(end.vmax) if end.vmin == end.vmax else None  # a constant end, by its bounds
        local = _power_of_two_at_most(min(shape[d], budget, limits.max_item_sizes[d], int(end.vmax)))
        if exact_groups and fixed is not None:
            local = _exact_local(fixed, local)
        budget //= local
        count = (end + (local - 1)) // local
        count = count if end.vmin >= 1 else count.maximum(1)  # >= 1 group
        most = None if limits.max_groups is None else limits.max_groups[d]
        if most is not None and count.vmax > most:
            group, spare = _groups_over_two_dimensions(count, d, spare, limits)
        else:
            group = UOp.special(count, launch_index("group", d))
        item = UOp.special(local, launch_index("local", d))
        index = group * local + item
        indices.update((r, index) for r in dim)
        # the number of work items along the dimension, where it is a constant
        launched = fixed if fixed is not None and fixed >= 1 and fixed % local == 0 and group.op is Ops.SPECIAL \
            else None
        for e in effects:
            used = next((r for r in dim if r in uses[e]), None)
            if used is None:
                if e not in private:
                    conditions[e].append(group.eq(0) & item.eq(0))
            elif launched is None or used.src[0].vmin != launched or used.src[0].vmax != launched:
                conditions[e].append(index.lt(used.src[0]))
    return substitute(gate_effects(sink, {e: _all(conds) for e, conds in conditions.items() if conds}), indices)


def _launch_dimensions(topo: Sequence[UOp], uses: Sequence[set[UOp]]) -> list[list[UOp]]:
    """The GLOBAL ranges of a kernel (``topo``) as launch dimensions, innermost first, at most three: each
    range, innermost first, joins the first dimension whose ranges no statement (``uses``: the nodes each
    depends on) runs in together with it, else starts one. Sibling loops (two ``prange`` one after the
    other) then share one dimension of work items, each item running each loop's turn at its index, rather
    than spanning a grid of every pair of their turns, whose items would almost all be idle (and whose
    group counts may exceed the device's)."""
    globals_ = sorted((u for u in topo if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL), key=range_order)
    dims: list[list[UOp]] = []
    for r in reversed(globals_):
        together = [u for u in uses if r in u]
        dim = next((dim for dim in dims if not any(o in u for o in dim for u in together)), None)
        if dim is not None:
            dim.append(r)
        else:
            dims.append([r])
    return dims[:3]


def _exact_local(end: int, local: int) -> int:
    """The largest local size up to ``local`` that divides ``end`` (1 divides every end). A CPU's OpenCL or Vulkan
    driver runs a group's work items as the turns of a loop it vectorises across them; an effect gated to the items
    inside a ragged end makes each of their accesses a gather (PoCL, a matmul in tiles of 4 rows by 16 columns
    over 1000 rows, 992 or 1063 columns: groups that divide the end, however small, ran a few times faster than
    larger ones with the last gated). A GPU runs a gated group as it runs any other: there, groups stay a power
    of two, whole warps."""
    return next(size for size in range(local, 0, -1) if end % size == 0)


GROUP_SIZE = 128
"""Work items that share one work group's reductions, where the device allows that many."""


def share_reductions(sink: UOp, limits: WorkGroupLimits, local_memory: int, warp: int | None = None) -> UOp | None:
    """A kernel whose reductions do not depend on its innermost GLOBAL range (a softmax's row maximum and
    sum, a layernorm's mean and variance), launched so that each reduction is computed once per work group,
    by all its work items together, instead of once per work item.

    The innermost GLOBAL range ``c`` becomes the group's ``G`` work items (``lidx0``): item ``l`` handles
    ``c = l, l + G, l + 2G ...``. Each outer GLOBAL range (at most two) becomes a group index. Each such
    reduction over ``j`` becomes, in order:

    - every item reduces ``j = l, l + G ...`` and stores the partial result to local memory slot ``l``;
    - ``BARRIER``; the ``G`` partials combined as a tree (``_combine_in_tree``), ``log2(G)`` steps of a
      ``BARRIER`` each (on a device with warps, those over the last ``2 * warp`` partials one step in the first
      warp's registers);
    - the kernel reads slot 0 where it read the reduction.

    A reduction that uses another (a sum of ``exp(x - max)``) comes after it; independent ones share the
    barriers. A kernel of one sum per output (a matrix-vector product) is all rows: the group's items share
    each row's sum, and item 0 stores it. None when the kernel has no such reduction, or has a shape this does
    not cover (sequential loops around effects, reductions over several ranges, more than three GLOBAL ranges,
    sums nested in one per output), or the device's local memory or group counts are too small:
    ``to_gpu_indices`` then launches it as usual.
    """
    found = _row_reductions(sink)
    if found is None:
        return None
    column, rows, shared = found
    if column is None and _nested_reductions(sink):  # its inner sums are vectors of an upcast's lanes
        return None
    live = live_ranges(sink)
    effects = [e for e in sink.src if e.op in EFFECTS]
    size = _power_of_two_at_most(min(GROUP_SIZE, limits.max_work_group_size, limits.max_item_sizes[0]))
    while size > 1 and sum(size * u.dtype.itemsize for u in shared) > local_memory:
        size //= 2
    most = limits.max_groups
    if size < 2 or (most is not None and any(r.src[0].vmax > most[len(rows) - d] for d, r in enumerate(rows))):
        return None
    item = UOp.special(size, launch_index("local", 0))
    groups = {r: UOp.special(r.src[0] if r.src[0].vmin >= 1 else r.src[0].maximum(1),
                             launch_index("group", len(rows) - d)) for d, r in enumerate(rows)}
    inside = {r: r.lt(r.src[0]) for r in rows if r.src[0].vmin < 1}
    axes = iter(range(free_axis(sink), 1 << 30))

    def strided(end: UOp, kind: AxisKind) -> tuple[UOp, UOp, list[UOp]]:
        """A range ``k``, the values ``item + G*k`` below ``end`` that work item ``item`` takes, and, when
        the loop runs once at most, the test that the value is below ``end``: ``k`` then folds to 0, and
        what used it no longer depends on the loop and may be hoisted out of it."""
        k = UOp.range((end - item + (size - 1)) // size, next(axes), kind)
        return k, item + k * size, [(item + k * size).lt(end)] if k.src[0].vmax <= 1 else []

    def gated(node: UOp, conditions: list[UOp], target: bool = True, ahead: frozenset[UOp] = frozenset()) -> UOp:
        return _gated(node, _all(conditions), target, ahead=ahead) if conditions else node

    replaced: dict[UOp, UOp] = {}
    levels: dict[UOp, int] = {}
    staged: list[UOp] = []
    for u in shared:  # in toposort order: a reduction comes after those it uses
        levels[u] = 1 + max((levels[v] for v in u.src[0].toposort() if v in levels), default=-1)
    for level in range(max(levels.values()) + 1):
        partials, temps = [], []
        for u in (u for u in shared if levels[u] == level):
            temp = UOp(Ops.DEFINE_LOCAL, u.dtype.ptr(size, local=True), (), shared.index(u))
            k, j, below = strided(u.src[1].src[0], AxisKind.REDUCE)
            body = gated(substitute(substitute(u.src[0], replaced), {u.src[1]: j}), below, target=False,
                         ahead=frozenset(k.src[0].toposort()))  # (the loads counting the turns: the test reads them)
            partials.append(gated(temp.index(item).store(body.reduce(k, op=u.arg)),
                                  [inside[r] for r in rows if r in live[u] and r in inside]))
            temps.append((temp, u.arg))
            replaced[u] = temp.index(0).load()
        staged += [*partials, UOp(Ops.BARRIER), *_combine_in_tree(temps, item, size, warp)]
    for e in effects:
        conditions = [*(inside[r] for r in rows if r in live[e] and r in inside),
                      *(groups[r].eq(0) for r in rows if r not in live[e])]
        body = substitute(e, replaced)
        if column is not None and column in live[e]:
            _, columns, below = strided(column.src[0], AxisKind.LOOP)
            staged.append(gated(substitute(body, {column: columns}), [*conditions, *below]))
        else:
            staged.append(gated(body, [*conditions, item.eq(0)]))
    rest = [u for u in sink.src if u.op not in EFFECTS]
    return substitute(sink.replace(src=(*staged, *rest)), groups)


def _combine_in_tree(temps: Sequence[tuple[UOp, Ops]], item: UOp, size: int, warp: int | None) -> list[UOp]:
    """Each array of ``temps`` (local memory of ``size`` partials, a power of two, and the op that combines
    them) reduced into its slot 0: at each step, with ``half`` the slots still live halved, work item
    ``l < half`` combines slot ``l + half`` into slot ``l``; a ``BARRIER`` follows each step, one for all
    the arrays. ``log2(size)`` steps of one statement per array, where one work item combining the partials
    in order took ``size`` dependent steps, and as many unrolled statements per array in a GPU's compiler.

    Each partial enters once, in an order fixed by ``size`` alone: the same bits on every run and launch. A
    float sum's rounding differs from the one in order (MAX and MIN, on NaN as on -0.0, do not: they are
    maximumNumber and minimumNumber, which the order does not change; integer sums wrap alike).

    On a device with warps (``warp``, a power of two up to ``size``), once at most ``2 * warp`` partials are
    left the first warp combines them in registers: item ``l`` takes slot ``l`` (combined with slot
    ``l + warp`` where that holds one) and, for each halving ``half``, combines the value ``half`` items along
    (``Ops.SHUFFLE_DOWN``): the same pairs in the same order as the tree's. Its item 0 then holds the result,
    which it stores to slot 0 (its neighbours store theirs, which nothing reads). One barrier where the tree
    had ``log2(2 * warp)``; the whole warp runs the step, the gate being the warp's."""
    steps: list[UOp] = []
    lanes = warp if warp is not None and warp <= size else 0  # the warp that ends the tree in registers
    half = size // 2
    while half >= 1 and half > lanes:
        live = item.lt(half)
        for temp, op in temps:
            mine = temp.index(item, gate=live)
            steps.append(mine.store(mine.load().alu(op, temp.index(item + half, gate=live).load())))
        steps.append(UOp(Ops.BARRIER))
        half //= 2
    if lanes:
        in_warp = item.lt(lanes)
        for temp, op in temps:
            mine = temp.index(item, gate=in_warp)
            value, distance = mine.load(), lanes // 2
            if half == lanes:  # the tree's step of this half, in registers too
                value = value.alu(op, temp.index(item + half, gate=in_warp).load())
            while distance >= 1:
                value = value.alu(op, UOp(Ops.SHUFFLE_DOWN, value.dtype, (value,), distance))
                distance //= 2
            steps.append(mine.store(value))
        steps.append(UOp(Ops.BARRIER))
    return steps


def _row_reductions(sink: UOp) -> tuple[UOp | None, list[UOp], list[UOp]] | None:
    """The innermost GLOBAL range of ``sink``, its outer GLOBAL ranges (at most two), and the reductions,
    each over one range, that depend on none but those outer ones (a softmax's row maximum and sum); None
    when there is no such reduction, an effect also depends on a sequential loop or does not run in every
    row (a loop beside the rows': each row's group would run all its turns, where ``to_gpu_indices`` gives
    them work items of their own), or a reduction reads memory the kernel writes (computed ahead of the
    effects, it would not see their stores). A kernel of one GLOBAL range whose effects and reductions are
    all one per row is all rows and no column (a matrix-vector product: one sum per output); where one is not
    (a sum over all rows), that range is the column, and such a sum is computed once, before the loop over
    it."""
    topo = sink.toposort()
    globals_ = sorted((u for u in topo if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL), key=range_order)
    if not globals_ or len(globals_) > 3:
        return None
    live = live_ranges(sink)
    per_row = len(globals_) == 1 and all(globals_[0] in live[u] for u in topo if u.op in EFFECTS or u.op is Ops.REDUCE)
    column, rows = (None, globals_) if per_row else (globals_[-1], globals_[:-1])
    shared = [u for u in topo if u.op is Ops.REDUCE and live[u] <= set(rows)]
    written = written_memory(sink.src)
    effects = [e for e in sink.src if e.op in EFFECTS]
    if not shared or any(len(u.src) != 2 for u in shared) or any(not live[e] <= set(globals_) for e in effects) or \
            any(not set(rows) <= live[e] for e in effects) or any(
            v.op is Ops.LOAD and memory_of(v.src[0].src[0]) in written for u in shared for v in u.toposort()):
        return None
    return column, rows, shared


def reduce_per_item(sink: UOp, limits: WorkGroupLimits) -> UOp | None:
    """The kernels ``share_reductions`` covers, for a device that runs a work group on one core as a loop
    over its items (local memory in ordinary memory: PoCL, lavapipe), where cooperating on a row costs a
    pass over the group per barrier: a work group of one item per row (per outer GLOBAL index), which
    computes the row's reductions once and then loops over the innermost GLOBAL range, as a CPU thread
    does. The reductions are split into independent partials (``split_reductions``) that the device's
    compiler vectorises.

    Where a row count may be 0 (one group is still launched), that group's loops are empty and its loads
    gated, so nothing it would compute before them touches memory: an IF around the row's effects would
    keep the reductions inside the loop. None when the kernel has no such reduction, nests reductions in
    reductions (a fused attention: ``share_reductions`` keeps those apart), or has more rows than the
    device has groups."""
    found = _row_reductions(sink)
    if found is None or _nested_reductions(sink):
        return None
    column, rows, _ = found
    most = limits.max_groups
    if most is not None and any(r.src[0].vmax > most[len(rows) - 1 - d] for d, r in enumerate(rows)):
        return None
    groups = {r: UOp.special(r.src[0] if r.src[0].vmin >= 1 else r.src[0].maximum(1),
                             launch_index("group", len(rows) - 1 - d)) for d, r in enumerate(rows)}
    if column is not None:
        sink = substitute(sink, {column: UOp.range(column.src[0], column.arg[0], AxisKind.LOOP)})
    outside = [groups[r].lt(r.src[0]) for r in rows if r.src[0].vmin < 1]
    if outside:  # a group past the last row: its loops run no step, its loads and row-only effects are gated
        inside, live = _all(outside), live_ranges(sink)
        sink = sink.replace(src=tuple(_gated(e, inside, target=live[e] <= set(rows)) if e.op in EFFECTS else e
                                      for e in sink.src))
        sink = substitute(sink, replacements_of(sink, lambda u: UOp.range(inside.where(u.src[0], 0), *u.arg)
                                                if u.op is Ops.RANGE and u not in groups else None))
    return split_reductions(substitute(sink, groups), (Ops.ADD, Ops.MAX, Ops.MIN))


MATMUL_TILES = ((16, 4), (32, 1), (16, 1))
"""The work groups ``tile_matmul`` tries, best first: (items, outputs) is a group of ``items`` x ``items``
work items, each computing ``outputs`` x ``outputs`` elements of out, with the operands staged in blocks of
``items`` steps of the reduction. An item's 16 products per pair of staged reads in the first outrun the one
per read of the others, which local memory's bandwidth bounds."""


def tile_matmul(sink: UOp, limits: WorkGroupLimits, local_memory: int) -> UOp | None:
    """A matmul-shaped kernel, ``out[i, j] = sum(f(a(i, k), b(k, j)), k)`` over GLOBAL ``i`` and ``j``,
    as the classic GPU kernel with its operands staged in local memory.

    A work group of ``T`` x ``T`` items (``lidx1`` rows, ``lidx0`` columns) computes an ``S`` x ``S`` tile of
    ``out``, ``S = T R``: each item the ``R`` x ``R`` elements at rows ``row + T r`` and columns
    ``column + T c`` of it. For each block ``kt`` of ``T`` steps of ``k``, in a loop every item runs the same
    number of times: each item loads ``R`` elements of ``a``'s ``S`` x ``T`` block and ``R`` of ``b``'s
    ``T`` x ``S`` block into local memory (0 outside the operands); ``BARRIER``; each item adds ``T`` products
    read from local memory to each of its elements' running sums, kept in local memory (the first block starts
    them; steps past ``k``'s end add nothing); ``BARRIER``. After the last block each item stores its sums to
    ``out``. Every element of ``a`` and ``b`` is read from global memory ``S`` times fewer than by one item per
    output, and each pair of reads from local memory feeds ``R`` products.

    None unless the kernel is one such store, its value a sum over one REDUCE range whose only loads are
    one of ``a`` (ranges ``i``, ``k``) and one of ``b`` (``k``, ``j``), neither bounds-checked at run time, or
    made of such a sum and of loads at ``i`` and ``j`` of memory the kernel does not write (a dense layer's
    bias and ReLU: computed once per output, after the last block),
    and the device takes the work group and its local memory (``_matmul_tile``).
    """
    stores = [e for e in sink.src if e.op in EFFECTS]
    if len(stores) != 1 or stores[0].op is not Ops.STORE or stores[0].arg is not None:
        return None
    store = stores[0]
    target, value = store.src[0], store.src[1]
    live = live_ranges(sink)
    globals_ = sorted(live[store], key=range_order)
    sums = [u for u in value.toposort() if u.op is Ops.REDUCE]
    if len(target.src) != 2 or len(sums) != 1 or sums[0].arg is not Ops.ADD or len(sums[0].src) != 2 \
            or len(globals_) != 2 or any(r.arg[1] is not AxisKind.GLOBAL for r in globals_) \
            or any(u.op is Ops.LOAD for u in target.src[1].toposort()):
        return None
    (i, j), (total, k) = globals_, (sums[0], sums[0].src[1])
    summed = set(total.toposort())
    after = [u for u in value.toposort() if u.op is Ops.LOAD and u not in summed]  # a bias, read once
    if any(u.src[0].arg is not None or not live[u] <= {i, j} or memory_of(u.src[0].src[0]) in written_memory(stores)
           for u in after):
        return None
    loads = [u for u in total.src[0].toposort() if u.op is Ops.LOAD]
    a = next((u for u in loads if live[u] == {i, k}), None)
    b = next((u for u in loads if live[u] == {k, j}), None)
    if a is None or b is None or len(loads) != 2 or any(u.src[0].arg is not None for u in loads):
        return None
    tile = _matmul_tile(limits, local_memory, max(a.dtype.itemsize, b.dtype.itemsize, total.dtype.itemsize))
    if tile is None:
        return None
    items, outputs = tile
    side = items * outputs  # of the group's tile of out, and of the operands' blocks along i and j
    groups = [(r.src[0] + (side - 1)) // side for r in (j, i)]
    groups = [g if g.vmin >= 1 else g.maximum(1) for g in groups]
    if limits.max_groups is not None and any(g.vmax > most for g, most in zip(groups, limits.max_groups, strict=False)):
        return None
    column, row = (UOp.special(items, launch_index("local", d)) for d in (0, 1))
    tile_j, tile_i = (UOp.special(g, launch_index("group", d)) for d, g in enumerate(groups))
    first = free_axis(sink)
    blocks = (k.src[0] + (items - 1)) // items
    kt = UOp.range(blocks if blocks.vmin >= 1 else blocks.maximum(1), first, AxisKind.LOOP)
    kk = UOp.range(items, first + 1, AxisKind.REDUCE)
    rows = [tile_i * side + r * items + row for r in range(outputs)]  # this item's rows of out, and columns
    columns = [tile_j * side + c * items + column for c in range(outputs)]
    staged_a = UOp(Ops.DEFINE_LOCAL, a.dtype.ptr(side * items, local=True), (), 0)  # side rows x items steps
    staged_b = UOp(Ops.DEFINE_LOCAL, b.dtype.ptr(items * side, local=True), (), 1)  # items steps x side columns
    running = UOp(Ops.DEFINE_LOCAL, total.dtype.ptr(side * side, local=True), (), 2)
    step_a, step_b = kt * items + column, kt * items + row  # the k of the element this item stages of each
    stage = []
    for s in range(outputs):
        stage += [_gated_unless_true(staged_a.index((s * items + row) * items + column).store(
                      substitute(a, {i: rows[s], k: step_a})), [rows[s].lt(i.src[0]), step_a.lt(k.src[0])],
                      target=False),
                  _gated_unless_true(staged_b.index(row * side + s * items + column).store(
                      substitute(b, {j: columns[s], k: step_b})), [columns[s].lt(j.src[0]), step_b.lt(k.src[0])],
                      target=False)]
    zero = -0.0 if total.dtype.is_float else 0
    inside = (kt * items + kk).lt(k.src[0])
    accumulates, results = [], []
    for r, c in itertools.product(range(outputs), range(outputs)):
        at = {i: rows[r], j: columns[c]}
        body = substitute(substitute(total.src[0], {a: staged_a.index((r * items + row) * items + kk).load(),
                                                    b: staged_b.index(kk * side + c * items + column).load()}), at)
        part = (body if inside.vmin else inside.where(body, zero)).reduce(kk)
        slot = running.index((r * items + row) * side + c * items + column)
        update = slot.store(kt.lt(1).where(zero, slot.load()).alu(Ops.ADD, part))  # -0.0 + x is x for every x
        accumulates.append(update.replace(src=(*update.src, kt)))
        result = substitute(substitute(value, {total: slot.load()}), at)  # the sum, or what is made of it
        results.append(_gated_unless_true(substitute(target, at).store(result),
                                          [rows[r].lt(i.src[0]), columns[c].lt(j.src[0])]))
    barrier = UOp(Ops.BARRIER, dtypes.void, (kt,))
    rest = [u for u in sink.src if u.op not in EFFECTS]
    in_turn = [e.replace(src=(*e.src, kt)) for e in stage]  # a block past an operand's end stores zeros, each turn
    return sink.replace(src=(*in_turn, barrier, *accumulates, barrier, *results, *rest))


def _matmul_tile(limits: WorkGroupLimits, local_memory: int, itemsize: int) -> tuple[int, int] | None:
    """``tile_matmul``'s work group: the first of ``MATMUL_TILES`` the device takes with its local memory (the
    operands' blocks and the running sums); None if none fits."""
    for items, outputs in MATMUL_TILES:
        side = items * outputs
        if items * items <= limits.max_work_group_size and min(limits.max_item_sizes[:2]) >= items \
                and (2 * side * items + side * side) * itemsize <= local_memory:
            return items, outputs
    return None


def _gated_unless_true(effect: UOp, conditions: list[UOp], target: bool = True) -> UOp:
    """``_gated`` by the conditions that may fail."""
    uncertain = [c for c in conditions if not c.vmin]
    return _gated(effect, _all(uncertain), target) if uncertain else effect


def _all(conditions: list[UOp]) -> UOp:
    gate = conditions[0]
    for more in conditions[1:]:
        gate = gate & more
    return gate


def _groups_over_two_dimensions(count: UOp, d: int, spare: int, limits: WorkGroupLimits) -> tuple[UOp, int]:
    """A group number along dimension ``d`` that may exceed the device's groups per dimension, spread over
    ``d`` and the unused dimension ``spare``: ``row * limit + column``, with as many columns as there are
    groups up to the limit; the next spare dimension. (Constant strides keep the bounds of the group
    number tight, which a device with 32-bit indices needs.) Where no dimension is spare, or the spare one
    too would overflow, the count stays ``d``'s own and the launch checks it for the variables' values
    (``WorkGroupLimits.check_groups``): a 3-D kernel's bounds may allow more than any run asks for."""
    assert limits.max_groups is not None
    most = limits.max_groups[d]
    if spare > 2 or math.ceil(count.vmax / most) > limits.max_groups[spare]:
        if count.vmin <= most:
            return UOp.special(count, launch_index("group", d)), spare
        raise GraphError(f"the launch needs up to {int(count.vmax)} work groups along dimension {d}, and the "
                         f"device allows {most}, with no dimension left to spread them over", stage="lower",
                         value=int(count.vmax))
    rows = (count + (most - 1)) // most
    group = UOp.special(rows, launch_index("group", spare)) * most + UOp.special(count.minimum(most),
                                                                                  launch_index("group", d))
    return group, spare + 1
