"""Order statistics as plan steps: ``np.median``, ``np.percentile`` and ``np.quantile`` of an ``@svod.jit``
function (``svod.frontend.jit``), each a few Python kernels of a radix selection added to an ``ExecutionPlan``,
on the keys of ``svod.frontend.sorting``.

Order statistics sort nothing (``RadixSelect``): a median or quantile needs the numbers of two ranks, which a
plan loop over the digits, most significant first, narrows down: each pass counts the digit among the keys
(made from the numbers again) whose higher digits are those found so far, for both ranks at once, and one
work item picks the digit the rank falls in; once few keys have the digits found (``KEEP_FROM``), a pass keeps
them and the passes after read those alone; the last kernel computes NumPy's mean or ``_lerp`` of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.device import Device
from svod.dtype import dtypes
from svod.errors import SvodError
from svod.frontend.pylang import CASTS, Const, func, nan, prange
from svod.frontend.sorting import (
    CLEAR,
    DIGIT_BITS,
    DIGIT_VARIABLE,
    FLOAT,
    GROUP,
    MASK,
    RADIX,
    RadixSort,
    SortKernel,
    bits_of,
    key_of,
    uint32,
)
from svod.runtime.plan import ExecutionPlan

KEEP_FROM = 8
"""A selection keeps the keys that have its selected keys' digits found so far once at most ``1 / KEEP_FROM``
of the keys have them: the passes after read those alone, where each read every number (10^7 uniform
float64: 3 of the 8 passes read the numbers, the 5 after about 3% of them)."""

uint64 = CASTS["uint64"]
float32 = CASTS["float32"]


# ---- the kernels: a radix selection of the middle keys ------------------------------------------------------

def _select_start(prefix, rank, nans, keeping, from_kept, at):  # type: ignore[no-untyped-def]
    """The selection of the keys of ranks ``at`` and ``at + 1``: no digit of them known yet, no NaN seen, the
    keys made from the numbers."""
    for s in range(2):
        prefix[s] = prefix[s] ^ prefix[s]
        rank[s] = at + s
    for b in range(nans.shape[0]):
        nans[b] = 0
    keeping[0] = 0
    from_kept[0] = 0


def _select_start_at(prefix, rank, nans, keeping, from_kept, q, n):  # type: ignore[no-untyped-def]
    """The selection of the two keys a quantile at ``q`` interpolates: ranks ``(n - 1) * q``, floored (past
    the last rank, the last; for a ``q`` outside [0, 1] the first, the result NaN), and the next."""
    fraction = float(q[0])
    virtual = (n - 1) * fraction
    at = n - 1
    if virtual < n - 1:
        at = int(virtual)
    if not (fraction >= 0.0 and fraction <= 1.0):
        at = 0
    for s in range(2):
        prefix[s] = prefix[s] ^ prefix[s]
        rank[s] = at + s
    for b in range(nans.shape[0]):
        nans[b] = 0
    keeping[0] = 0
    from_kept[0] = 0


@func
def _from_the_top(step, width):  # type: ignore[no-untyped-def]
    """The digit a selection's pass ``step`` counts: the most significant first."""
    return width // DIGIT_BITS - 1 - step


@func
def _infinity_key(width):  # type: ignore[no-untyped-def]
    """The key of +inf (``key_of``): a NaN's is greater."""
    return (0x7FF0000000000000 if width == 64 else 0x7F800000) | (1 << (width - 1))


def _select_histogram(low, high, nans, kept, held, keeping, bits, prefix, per, kind, width: Const[int],  # type: ignore[no-untyped-def]
                      step):
    """Per block, the count of each value of the digit (the most significant first: pass ``step``) among the
    keys whose higher digits are those of the lower selected key found so far (``low``), and of the higher
    (``high``); whether the block holds a NaN. Where ``keeping`` says so, the keys of the selected keys'
    higher digits are kept too, in order, at the start of the block's part of ``kept`` (``held`` of them):
    the passes after read those alone (``_select_kept_histogram``)."""
    n = bits.shape[0]
    digit = _from_the_top(step, width)
    shift = uint32(digit * DIGIT_BITS)
    higher = uint32(digit * DIGIT_BITS + DIGIT_BITS)
    lower_wanted = prefix[0] >> higher
    upper_wanted = prefix[1] >> higher
    keep = keeping[0]
    for b in prange(low.shape[0]):
        start = b * per
        count = 0
        for i in range(start, min(start + per, n)):
            key = key_of(bits[i], kind, width)
            if kind >= FLOAT and key > _infinity_key(width):
                nans[b] = 1
            _count(low, high, b, key, shift, higher, lower_wanted, upper_wanted)
            if keep != 0 and (key >> higher == lower_wanted or key >> higher == upper_wanted):
                kept[start + min(count, per - 1)] = key  # count < per: the min proves it
                count += 1
        held[b] = count


def _select_kept_histogram(low, high, kept, held, prefix, per, width: Const[int], step):  # type: ignore[no-untyped-def]
    """``_select_histogram`` of the keys a pass before kept (``held`` of each block's part of ``kept``)."""
    digit = _from_the_top(step, width)
    shift = uint32(digit * DIGIT_BITS)
    higher = uint32(digit * DIGIT_BITS + DIGIT_BITS)
    lower_wanted = prefix[0] >> higher
    upper_wanted = prefix[1] >> higher
    for b in prange(low.shape[0]):
        start = b * per
        for i in range(start, start + min(held[b], per)):
            _count(low, high, b, kept[i], shift, higher, lower_wanted, upper_wanted)


@func
def _count(low, high, b, key, shift, higher, lower_wanted, upper_wanted):  # type: ignore[no-untyped-def]
    """Count ``key``'s digit (at ``shift``) in block ``b``'s row of ``low`` where its higher digits are those
    of the lower selected key, else of ``high`` where they are the higher's: one count a key, where the two
    share the digits found so far (``_select_totals`` adds the lower's to the higher's)."""
    at = int((key >> shift) & MASK)
    if at < low.shape[1]:
        if key >> higher == lower_wanted:
            low[b, at] += 1
        elif key >> higher == upper_wanted:
            high[b, at] += 1


def _select_totals(low_totals, high_totals, low, high, prefix, width: Const[int], step):  # type: ignore[no-untyped-def]
    """Each digit's count over the blocks, for both selected keys: the higher's its own keys' (``_count``),
    and the lower's too where they share the digits found so far."""
    higher = uint32(_from_the_top(step, width) * DIGIT_BITS + DIGIT_BITS)
    shared = prefix[0] >> higher == prefix[1] >> higher
    for d in prange(low.shape[1]):
        low_total = 0
        high_total = 0
        for b in range(low.shape[0]):
            low_total += low[b, d]
            high_total += high[b, d]
        low_totals[d] = low_total
        high_totals[d] = high_total + low_total * shared


def _select_groups(low_groups, high_groups, low_totals, high_totals):  # type: ignore[no-untyped-def]
    """The counts of each group of ``GROUP`` digits, for both selected keys."""
    for g in prange(low_groups.shape[0]):
        low_sum = 0
        high_sum = 0
        for e in range(GROUP):
            low_sum += low_totals[g * GROUP + e]
            high_sum += high_totals[g * GROUP + e]
        low_groups[g] = low_sum
        high_groups[g] = high_sum


@func
def _pick_digit(prefix, rank, s, totals, groups, shift, width):  # type: ignore[no-untyped-def]
    """Selected key ``s``'s digit: its group's (the one whose counts, summed in order, pass its rank), then
    the digit's among the group's, and its rank among the keys of that digit; returns how many keys have
    the digits found so far."""
    wanted = rank[s]
    known = prefix[s]
    run = 0
    group = 0
    before = 0
    for g in range(groups.shape[0]):
        total = groups[g]
        hit = run <= wanted < run + total
        group += g * hit
        before += run * hit
        run += total
    having = 0
    for e in range(GROUP):
        d = group * GROUP + e
        total = totals[d]
        if before <= wanted < before + total:
            prefix[s] = known | (uint64(d) if width == 64 else uint32(d)) << shift
            rank[s] = wanted - before
            having = total
        before += total
    return having


def _select_pick(prefix, rank, keeping, from_kept, low_totals, high_totals, low_groups, high_groups, n,  # type: ignore[no-untyped-def]
                 width: Const[int], step):
    """Each selected key's digit and its rank among the keys of that digit (``_pick_digit``); and where the
    next pass reads its keys: from those this one kept, or, once few keys have the selected keys' digits,
    from the numbers, keeping those (``KEEP_FROM``): ``keeping`` and ``from_kept``."""
    shift = uint32(_from_the_top(step, width) * DIGIT_BITS)
    lower = _pick_digit(prefix, rank, 0, low_totals, low_groups, shift, width)
    upper = _pick_digit(prefix, rank, 1, high_totals, high_groups, shift, width)
    having = lower
    if prefix[0] != prefix[1]:
        having = lower + upper
    if keeping[0] != 0:
        from_kept[0] = 1
        keeping[0] = 0
    elif from_kept[0] == 0 and having <= n // KEEP_FROM:
        keeping[0] = 1


def _select_values(pair, flag, prefix, nans, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    """The numbers of the two selected ranks (``pair``, as their bits), and whether a NaN is among the keys
    (``flag``)."""
    pair[0] = bits_of(prefix[0], kind, width)
    pair[1] = bits_of(prefix[1], kind, width)
    flag[0] = 0
    for b in range(nans.shape[0]):
        if nans[b] != 0:
            flag[0] = 1


def _median(result, pair, flag, n, integral: Const[bool]):  # type: ignore[no-untyped-def]
    """``np.median`` of the middle one or two values (``pair``): their mean (ints as float64 first, as
    ``np.mean`` sums them), NaN where the values hold one."""
    if integral:
        if n % 2 == 1:
            result[0] = float(pair[0])
        else:
            result[0] = (float(pair[0]) + float(pair[1])) / 2
    else:
        middle = pair[0]
        if n % 2 == 0:
            middle = (pair[0] + pair[1]) / 2
        if flag[0] != 0:
            middle = nan
        result[0] = middle


def _quantile(result, pair, flag, q, n, narrow: Const[bool], integral: Const[bool]):  # type: ignore[no-untyped-def]
    """``np.quantile`` by NumPy's 'linear' method, computed as NumPy computes it: the virtual index ``(n -
    1) * q``, its floor and fraction (past the last index, the last value with NumPy's fraction ``v + 1``),
    and ``_lerp`` in the values' dtype (float32 with a float32 fraction; integers' difference wrapping in
    their dtype, then float64) of the values at the floor and the next (``pair``). A ``q`` outside [0, 1]
    (NumPy raises) or NaN gives NaN, and so do values holding a NaN."""
    fraction = float(q[0])
    virtual = (n - 1) * fraction
    below = pair[0]
    above = pair[0]
    gamma = virtual + 1.0
    if virtual < n - 1:
        above = pair[1]
        gamma = virtual - int(virtual)
    weight = float32(gamma) if narrow else gamma
    rest = float32(1.0 - gamma) if narrow else 1.0 - gamma
    difference = above - below
    value = below + difference * weight
    if gamma >= 0.5:
        value = above - difference * rest
    if not (fraction >= 0.0 and fraction <= 1.0):
        value = nan
    if not integral and flag[0] != 0:
        value = nan
    result[0] = value


def _pick(result, pair, flag, floating: Const[bool]):  # type: ignore[no-untyped-def]
    """``np.quantile(x, 0)`` or ``(x, 1)`` of an int ``q``: the value itself (NumPy takes it, no
    interpolation), NaN where the values hold one."""
    value = pair[0]
    if floating and flag[0] != 0:
        value = nan
    result[0] = value


def _nan(result):  # type: ignore[no-untyped-def]
    result[0] = nan


SELECT_START = SortKernel(_select_start, "select_start")
SELECT_START_AT = SortKernel(_select_start_at, "select_start_at")
SELECT_HISTOGRAM = SortKernel(_select_histogram, "select_histogram")
SELECT_KEPT_HISTOGRAM = SortKernel(_select_kept_histogram, "select_kept_histogram")
SELECT_TOTALS = SortKernel(_select_totals, "select_totals")
SELECT_GROUPS = SortKernel(_select_groups, "select_groups")
SELECT_PICK = SortKernel(_select_pick, "select_pick")
SELECT_VALUES = SortKernel(_select_values, "select_values")
MEDIAN = SortKernel(_median, "median")
QUANTILE = SortKernel(_quantile, "quantile")
PICK = SortKernel(_pick, "quantile_pick")
NAN = SortKernel(_nan, "median_of_nothing")


# ---- plan steps ------------------------------------------------------------------------------------------------

def quantile_dtype(dtype: np.dtype, device: Device) -> np.dtype:
    """The dtype of ``np.median``/``np.quantile`` of ``dtype`` values: float32 for float32, else float64
    (float32 where the device holds no float64)."""
    if np.dtype(dtype) == np.float32 or dtypes.float64 not in device.caps.element_dtypes:
        return np.dtype(np.float32)
    return np.dtype(np.float64)

@dataclass
class RadixSelect:
    """The steps that find the number of one rank of plan buffer ``source``, the next rank's, and whether a
    NaN is among them, without sorting: a plan loop over the digits, most significant first, each pass
    counting the digit among the keys whose higher digits are those found so far (the keys are made from the
    numbers again in each pass: nothing is written but the counts). The rank is ``at``, or the floor of a
    quantile's at the float in plan buffer ``q``. ``add`` returns the steps and the plan buffers of the two
    numbers (of ``source``'s dtype) and of the NaN flag."""

    plan: ExecutionPlan
    source: int
    at: int | None = None
    q: int | None = None

    def add(self) -> tuple[list[int], int, int]:
        sort, plan = RadixSort(self.plan, self.source, values=self.source), self.plan  # its checks and blocks
        prefix, rank = sort.scratch(sort.unsigned, 2), sort.scratch(dtypes.int32, 2)
        low, high = (sort.scratch(dtypes.int32, sort.blocks * RADIX) for _ in range(2))
        low_totals, high_totals = sort.scratch(dtypes.int32, RADIX), sort.scratch(dtypes.int32, RADIX)
        low_groups, high_groups = (sort.scratch(dtypes.int32, RADIX // GROUP) for _ in range(2))
        nans = sort.scratch(dtypes.int32, sort.blocks)
        kept, held = sort.scratch(sort.unsigned, sort.blocks * sort.per), sort.scratch(dtypes.int32, sort.blocks)
        keeping, from_kept = sort.scratch(dtypes.int32, 1), sort.scratch(dtypes.int32, 1)
        pair, flag = sort.scratch(sort.unsigned, 2), sort.scratch(dtypes.int32, 1)
        bits = sort.view(self.source, sort.unsigned)
        table, row, blocks = (sort.blocks, RADIX), (RADIX,), (sort.blocks,)
        step: dict[str, Any] = {"step": DIGIT_VARIABLE}
        coding: dict[str, Any] = {"kind": sort.kind, "width": sort.width}
        started = [prefix, rank, nans, keeping, from_kept]
        if self.q is not None:
            steps = [plan.add_kernel(sort.kernel(SELECT_START_AT), [*started, self.q], n=sort.n)]
        elif self.at is not None and 0 <= self.at < sort.n:
            steps = [plan.add_kernel(sort.kernel(SELECT_START), started, at=self.at)]
        else:
            raise SvodError(f"a selection is of a rank in [0, {sort.n}) or at a quantile, not {self.at}",
                            stage="plan", value=self.at)
        histogram = sort.kernel(SELECT_HISTOGRAM, table, table, blocks, (sort.blocks * sort.per,), blocks, (1,),
                                (sort.n,), (2,))
        kept_histogram = sort.kernel(SELECT_KEPT_HISTOGRAM, table, table, (sort.blocks * sort.per,), blocks, (2,))
        cleared = [plan.add_kernel(sort.kernel(CLEAR, table), [half]) for half in (low, high)]
        reading_kept = plan.add_kernel(kept_histogram, [low, high, kept, held, prefix], per=sort.per,
                                       width=sort.width, **step)
        reading_numbers = plan.add_kernel(histogram, [low, high, nans, kept, held, keeping, bits, prefix],
                                          per=sort.per, **coding, **step)
        body = [*cleared, plan.branch(from_kept, [reading_kept], [reading_numbers]),
                plan.add_kernel(sort.kernel(SELECT_TOTALS, row, row, table, table, (2,)),
                                [low_totals, high_totals, low, high, prefix], width=sort.width, **step),
                plan.add_kernel(sort.kernel(SELECT_GROUPS), [low_groups, high_groups, low_totals, high_totals]),
                plan.add_kernel(sort.kernel(SELECT_PICK), [prefix, rank, keeping, from_kept, low_totals, high_totals,
                                                           low_groups, high_groups], n=sort.n, width=sort.width,
                                **step)]
        steps.append(plan.loop(DIGIT_VARIABLE, 0, sort.passes, body=body))
        steps.append(plan.add_kernel(sort.kernel(SELECT_VALUES), [pair, flag, prefix, nans], **coding))
        return steps, sort.view(pair, plan.buffers[self.source].dtype), flag


def add_median(plan: ExecutionPlan, source: int, result: int) -> list[int]:
    """Add the steps that write ``np.median`` of plan buffer ``source`` (all its elements) into the first
    element of plan buffer ``result`` (``quantile_dtype``): a selection of the middle rank (and the next)."""
    buf = plan.buffers[source]
    if buf.size == 0:
        return [plan.add_kernel(NAN.on(plan.device, 1, 1), [result])]
    steps, pair, flag = RadixSelect(plan, source, at=(buf.size - 1) // 2).add()
    integral = np.dtype(buf.dtype.numpy).kind != "f"
    median = MEDIAN.on(plan.device, buf.size, 1)
    return [*steps, plan.add_kernel(median, [result, pair, flag], n=buf.size, integral=integral)]


def add_quantile(plan: ExecutionPlan, source: int, result: int, *, at: int | None = None,
                 whole: int | None = None) -> list[int]:
    """Add the steps that write ``np.quantile`` of plan buffer ``source`` into the first element of plan
    buffer ``result``: at the float in the first element of plan buffer ``at`` (NumPy's 'linear' method; the
    result ``quantile_dtype``), or at the int ``whole``, 0 or 1, whose value NumPy takes as it is (the result
    of the values' dtype)."""
    buf = plan.buffers[source]
    if buf.size == 0:
        raise SvodError("the quantile of an empty array is undefined (NumPy raises IndexError)", stage="plan",
                        value=0)
    floating = np.dtype(buf.dtype.numpy).kind == "f"
    if whole is not None and at is None and whole in (0, 1):
        steps, pair, flag = RadixSelect(plan, source, at=whole * (buf.size - 1)).add()
        pick = PICK.on(plan.device, buf.size, 1)
        return [*steps, plan.add_kernel(pick, [result, pair, flag], floating=floating)]
    if at is None or whole is not None:
        raise SvodError("a quantile is at a plan buffer's float (at=) or at the int 0 or 1 (whole=)", stage="plan",
                        value=whole)
    steps, pair, flag = RadixSelect(plan, source, q=at).add()
    narrow = np.dtype(buf.dtype.numpy) == np.float32
    quantile = QUANTILE.on(plan.device, buf.size, 1)
    return [*steps, plan.add_kernel(quantile, [result, pair, flag, at], n=buf.size, narrow=narrow,
                                    integral=not floating)]
