"""Sorting and order statistics as plan steps: ``np.sort``, ``np.argsort``, ``np.median``, ``np.percentile`` and
``np.quantile`` of an ``@svod.jit`` function (``svod.frontend.jit``), each a few Python kernels of a parallel
LSD radix sort added to an ``ExecutionPlan``.

::

    source (float64 bits, viewed as uint64)
        │ encode      keys that order as NumPy orders (floats: negatives' bits flipped, positives' sign set,
        ▼             every NaN above +inf), per block the AND and OR of its keys; argsort: indices 0..n-1
    keys K0 ──┐
              │ plan loop over the digits (8 bits each, least significant first):
              │   decide     is the digit the same in every key (AND and OR agree)? then the pass is skipped;
              │              else it runs from K0 into K1, or from K1 into K0 (the parity a cell keeps)
              │   histogram  per block (a prange over blocks, each a sequential loop over its slice), the
              │              count of each digit in its own row of ``hist`` (cleared first)
              │   scan       per digit (a prange), the exclusive sum over the blocks, and the digit's total;
              │   groups,    then each digit's first place (the totals before it, summed in groups of 16)
              │   place      added to its column: each block's first place for each digit
              │   scatter    per block, in order: each key to the next place of its digit (a stable pass)
    keys K0 or K1 (the parity says which)
        │ decode      the values (floats' bits as they were, a NaN as a positive NaN of its payload) or the
        ▼             indices, into the output
    values / indices

Order statistics sort nothing (``RadixSelect``): a median or quantile needs the numbers of two ranks, which a
plan loop over the digits, most significant first, narrows down: each pass counts the digit among the keys
(made from the numbers again) whose higher digits are those found so far, for both ranks at once, and one
work item picks the digit the rank falls in; once few keys have the digits found (``KEEP_FROM``), a pass keeps
them and the passes after read those alone; the last kernel computes NumPy's mean or ``_lerp`` of the two.

Everything is a kernel of the plan: no pass reads a value back to the host, so a sort inside a plan loop runs
as the plan's other steps do, on every device (a WebGPU device holds no 64-bit buffers: it sorts 32-bit
numbers). Keys of equal value keep their input order (radix passes are stable), so ``np.argsort`` is
``kind="stable"`` whatever kind is asked for; for it -0.0 and 0.0 are one key, as NumPy compares them, while
``np.sort`` keeps the two apart (-0.0 first, an order NumPy also gives).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.device import Buffer, Device
from svod.dtype import DType, dtypes
from svod.errors import SvodError
from svod.frontend.pykernel import Kernel, Shaped, positional_parameters
from svod.frontend.pylang import CASTS, Const, func, nan, prange
from svod.runtime.plan import ExecutionPlan

DIGIT_BITS = 8
"""The bits of one radix pass: 256 counters a block, which stay in the L1 cache, and 256 streams a block's
scatter writes, which the CPU's write buffers keep up with (11 bits make 6 passes of 64-bit keys instead of
8, each slower by more than that saves on this CPU: measured)."""
RADIX = 1 << DIGIT_BITS
MASK = RADIX - 1
GROUP = 16
"""Digits a group of the scan of the digits' totals sums (``_place``)."""
BLOCKS_PER_THREAD = 4
"""Blocks a CPU thread sorts in each pass."""
PARALLEL_FROM = 1 << 12
"""The fewest keys a CPU sorts on several threads: fewer take less time than waking them (and one block
makes the kernels' arrays of one size each, which compiles once for all such sizes)."""
INTERPRETED_BLOCK = 16
"""Keys a block of the reference interpreter sorts in each pass."""
GPU_BLOCK = 2048
"""Elements a work item of another device sorts in each pass: its sequential loops stay well under the
65535 turns llvmpipe allows a work item (``DeviceCaps.max_loop_turns``)."""
DIGIT_VARIABLE = "_svod_digit"
"""The plan loop variable that numbers a sort's passes."""
STATIC_FROM = 1 << 16
"""The fewest keys a sort compiles its kernels for (``_Kernel``): a new size compiles again (as a jitted
function's phases do), which larger sorts repay; smaller ones share kernels of variable sizes."""
MAX_ELEMENTS = (1 << 31) - 1
"""The most elements a sort takes: its counters and indices are 32-bit."""
KEEP_FROM = 8
"""A selection keeps the keys that have its selected keys' digits found so far once at most ``1 / KEEP_FROM``
of the keys have them: the passes after read those alone, where each read every number (10^7 uniform
float64: 3 of the 8 passes read the numbers, the 5 after about 3% of them)."""

UNSIGNED, SIGNED, FLOAT, FLOAT_ZEROS_EQUAL = 0, 1, 2, 3
"""How keys are made of a number's bits: as they are, the sign bit flipped, a float's order (-0.0 before 0.0),
a float's order with -0.0 and 0.0 one key (what ``argsort``'s stability needs)."""

uint32 = CASTS["uint32"]
uint64 = CASTS["uint64"]
float32 = CASTS["float32"]
_BITS = {4: (dtypes.uint32, 0x7F800000), 8: (dtypes.uint64, 0x7FF0000000000000)}
"""Per itemsize: the unsigned type of the keys, and the bits of a float's infinity."""


# ---- the kernels ---------------------------------------------------------------------------------------------

@func
def _key(bits, kind, width):  # type: ignore[no-untyped-def]
    """The key of a number's ``bits``: keys compare as unsigned integers in the order NumPy sorts numbers."""
    sign = 1 << (width - 1)
    infinity = 0x7FF0000000000000 if width == 64 else 0x7F800000
    key = bits
    if kind == SIGNED:
        key = bits ^ sign
    if kind >= FLOAT:
        magnitude = bits & (sign - 1)
        key = bits | sign  # a positive number, or a NaN of either sign: above +inf, its payload kept
        if bits >= sign and magnitude <= infinity:
            key = ~bits
        if kind == FLOAT_ZEROS_EQUAL and magnitude == 0:
            key = bits | sign
    return key


@func
def _bits(key, kind, width):  # type: ignore[no-untyped-def]
    """The bits of the number ``_key`` made ``key`` of (a NaN's as a positive NaN of the same payload)."""
    sign = 1 << (width - 1)
    bits = key
    if kind == SIGNED:
        bits = key ^ sign
    if kind >= FLOAT:
        bits = key ^ sign
        if key < sign:
            bits = ~key
    return bits


def _encode(keys, low, high, bits, per, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    n = bits.shape[0]
    for b in prange(low.shape[0]):
        start = b * per
        first = _key(bits[start], kind, width)
        ands = first
        ors = first
        for j in range(min(per, n - start)):
            i = start + j
            key = _key(bits[i], kind, width)
            keys[i] = key
            ands = ands & key
            ors = ors | key
        low[b] = ands
        high[b] = ors


def _encode_indexed(keys, indices, low, high, bits, per, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    n = bits.shape[0]
    for b in prange(low.shape[0]):
        start = b * per
        first = _key(bits[start], kind, width)
        ands = first
        ors = first
        for j in range(min(per, n - start)):
            i = start + j
            key = _key(bits[i], kind, width)
            keys[i] = key
            indices[i] = i
            ands = ands & key
            ors = ors | key
        low[b] = ands
        high[b] = ors


def _decide(go_up, go_down, parity, low, high, digit):  # type: ignore[no-untyped-def]
    """Whether the pass of ``digit`` runs (its digit differs between some keys), and which way: from K0 into
    K1 (``go_up``) or back (``go_down``); ``parity`` says where the keys are after it."""
    ands = low[0]
    ors = high[0]
    for b in range(1, low.shape[0]):
        ands = ands & low[b]
        ors = ors | high[b]
    varying = ((ands ^ ors) >> uint32(digit * DIGIT_BITS)) & MASK
    flipped = parity[0]
    if digit == 0:
        flipped = 0
    go_up[0] = 0
    go_down[0] = 0
    if varying != 0:
        if flipped == 0:
            go_up[0] = 1
        else:
            go_down[0] = 1
        flipped = 1 - flipped
    parity[0] = flipped


def _histogram(hist, keys, per, digit):  # type: ignore[no-untyped-def]
    """Per block (a row of ``hist``, cleared before), the count of each value of the digit among its keys.
    (The test of the digit against the row's length always holds: it is what proves each block's counts its
    own.)"""
    n = keys.shape[0]
    shift = uint32(digit * DIGIT_BITS)
    for b in prange(hist.shape[0]):
        for i in range(b * per, min(b * per + per, n)):
            at = int((keys[i] >> shift) & MASK)
            if at < hist.shape[1]:
                hist[b, at] += 1


def _clear(hist):  # type: ignore[no-untyped-def]
    for b in prange(hist.shape[0]):
        for d in prange(hist.shape[1]):
            hist[b, d] = 0


def _scan(totals, hist):  # type: ignore[no-untyped-def]
    """Each block's first place for each digit among that digit's keys, and each digit's total."""
    for d in prange(hist.shape[1]):
        run = 0
        for b in range(hist.shape[0]):
            count = hist[b, d]
            hist[b, d] = run
            run += count
        totals[d] = run


def _groups(sums, totals):  # type: ignore[no-untyped-def]
    """The totals of each group of ``GROUP`` digits."""
    for g in prange(sums.shape[0]):
        total = 0
        for e in range(GROUP):
            total += totals[g * GROUP + e]
        sums[g] = total


def _place(hist, totals, sums):  # type: ignore[no-untyped-def]
    """Each block's first place for each digit: its place among the digit's keys (``_scan``) after the
    digit's first place, the totals of the groups before the digit's and of the digits before it in its
    group (a scan in two steps of ``GROUP`` turns, not one of ``RADIX``)."""
    for d in prange(hist.shape[1]):
        base = 0
        for g in range(d // GROUP):
            base += sums[g]
        for e in range(d - d % GROUP, d):
            base += totals[e]
        for b in range(hist.shape[0]):
            hist[b, d] += base


def _scatter(target, hist, keys, per, digit):  # type: ignore[no-untyped-def]
    """Each block's keys, in order, each to the next place of its digit (``_place``)."""
    n = keys.shape[0]
    shift = uint32(digit * DIGIT_BITS)
    for b in prange(hist.shape[0]):
        for i in range(b * per, min(b * per + per, n)):
            key = keys[i]
            at = int((key >> shift) & MASK)
            if at < hist.shape[1]:
                place = hist[b, at]
                hist[b, at] = place + 1
                target[place] = key


def _scatter_indexed(target, target_indices, hist, keys, indices, per, digit):  # type: ignore[no-untyped-def]
    n = keys.shape[0]
    shift = uint32(digit * DIGIT_BITS)
    for b in prange(hist.shape[0]):
        for i in range(b * per, min(b * per + per, n)):
            key = keys[i]
            at = int((key >> shift) & MASK)
            if at < hist.shape[1]:
                place = hist[b, at]
                hist[b, at] = place + 1
                target[place] = key
                target_indices[place] = indices[i]


def _decode(out, keys, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    for i in prange(keys.shape[0]):
        out[i] = _bits(keys[i], kind, width)


def _copy(out, values):  # type: ignore[no-untyped-def]
    for i in prange(values.shape[0]):
        out[i] = values[i]


# ---- order statistics: a radix selection of the middle keys --------------------------------------------------

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
    """The key of +inf (``_key``): a NaN's is greater."""
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
            key = _key(bits[i], kind, width)
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
    pair[0] = _bits(prefix[0], kind, width)
    pair[1] = _bits(prefix[1], kind, width)
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



# ---- sorts along an axis: each row by a sequential radix sort of its own ----------------------------------

def _row_encode(keys, low, high, bits, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    """Each row's keys (a row: the numbers along the sorted axis, ``bits`` shaped (outer, n, inner)), and the
    AND and OR of its keys."""
    inner = bits.shape[2]
    for o in prange(bits.shape[0]):
        for w in prange(inner):
            r = o * inner + w
            first = _key(bits[o, 0, w], kind, width)
            ands = first
            ors = first
            for c in range(bits.shape[1]):
                key = _key(bits[o, c, w], kind, width)
                keys[r, c] = key
                ands = ands & key
                ors = ors | key
            low[r] = ands
            high[r] = ors


def _row_encode_indexed(keys, order, low, high, bits, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    inner = bits.shape[2]
    for o in prange(bits.shape[0]):
        for w in prange(inner):
            r = o * inner + w
            first = _key(bits[o, 0, w], kind, width)
            ands = first
            ors = first
            for c in range(bits.shape[1]):
                key = _key(bits[o, c, w], kind, width)
                keys[r, c] = key
                order[r, c] = c
                ands = ands & key
                ors = ors | key
            low[r] = ands
            high[r] = ors


@func
def _row_places(keys, counts, r, width):  # type: ignore[no-untyped-def]
    """Row ``r``'s first place for each value of each digit: the count of each, in one read of its keys, then
    per digit their exclusive sum."""
    for v in range(counts.shape[1]):
        counts[r, v] = 0
    for c in range(keys.shape[1]):
        key = keys[r, c]
        for d in range(width // DIGIT_BITS):
            at = int((key >> uint32(d * DIGIT_BITS)) & MASK)
            counts[r, d * RADIX + at] += 1
    for d in range(width // DIGIT_BITS):
        run = 0
        for v in range(RADIX):
            count = counts[r, d * RADIX + v]
            counts[r, d * RADIX + v] = run
            run += count


@func
def _row_pass(source, target, counts, r, varying, digit):  # type: ignore[no-untyped-def]
    """Row ``r``'s keys from ``source`` into ``target``, stably by ``digit``, or as they are where the digit
    is the same in all of them (``varying``: the bits that differ). A place is within the row (the clamp,
    which never changes it, is what proves each row's keys its own)."""
    n = source.shape[1]
    shift = uint32(digit * DIGIT_BITS)
    if ((varying >> shift) & MASK) == 0:
        for c in range(n):
            target[r, c] = source[r, c]
    else:
        for c in range(n):
            key = source[r, c]
            at = digit * RADIX + int((key >> shift) & MASK)
            place = counts[r, at]
            counts[r, at] = place + 1
            target[r, min(max(place, 0), n - 1)] = key


@func
def _row_pass_indexed(source, target, order, order_target, counts, r, varying, digit):  # type: ignore[no-untyped-def]
    n = source.shape[1]
    shift = uint32(digit * DIGIT_BITS)
    if ((varying >> shift) & MASK) == 0:
        for c in range(n):
            target[r, c] = source[r, c]
            order_target[r, c] = order[r, c]
    else:
        for c in range(n):
            key = source[r, c]
            at = digit * RADIX + int((key >> shift) & MASK)
            place = counts[r, at]
            counts[r, at] = place + 1
            kept = min(max(place, 0), n - 1)
            target[r, kept] = key
            order_target[r, kept] = order[r, c]


@func
def _pairs(width):  # type: ignore[no-untyped-def]
    """The pairs of passes of a row's sort: there and back."""
    return width // (2 * DIGIT_BITS)


def _row_sort(keys, spare, counts, low, high, width: Const[int]):  # type: ignore[no-untyped-def]
    """Each row sorted by its digits, least significant first, from ``keys`` into ``spare`` and back (the
    passes are even in number: the keys end in ``keys``)."""
    for r in prange(keys.shape[0]):
        varying = low[r] ^ high[r]
        _row_places(keys, counts, r, width)
        for half in range(_pairs(width)):
            _row_pass(keys, spare, counts, r, varying, 2 * half)
            _row_pass(spare, keys, counts, r, varying, 2 * half + 1)


def _row_sort_indexed(keys, spare, order, spare_order, counts, low, high, width: Const[int]):  # type: ignore[no-untyped-def]
    for r in prange(keys.shape[0]):
        varying = low[r] ^ high[r]
        _row_places(keys, counts, r, width)
        for half in range(_pairs(width)):
            _row_pass_indexed(keys, spare, order, spare_order, counts, r, varying, 2 * half)
            _row_pass_indexed(spare, keys, spare_order, order, counts, r, varying, 2 * half + 1)


def _row_decode(out, keys, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    """Each row's numbers back along the axis (``out`` shaped as ``_row_encode``'s ``bits``)."""
    inner = out.shape[2]
    for o in prange(out.shape[0]):
        for w in prange(inner):
            for c in range(out.shape[1]):
                out[o, c, w] = _bits(keys[o * inner + w, c], kind, width)


def _row_indices(out, order):  # type: ignore[no-untyped-def]
    """Each row's sorting positions along the axis: ``np.argsort``'s."""
    inner = out.shape[2]
    for o in prange(out.shape[0]):
        for w in prange(inner):
            for c in range(out.shape[1]):
                out[o, c, w] = order[o * inner + w, c]


@dataclass(frozen=True)
class _Kernel:
    """A kernel of the sort, as each device and size takes it: with sizes as variables (one compile serves
    every size), or with constant sizes and keys per block (``static``), which prove its accesses in bounds
    (their checks gone, a pass is about twice as fast on the CPU) and, where indices are 32-bit (WebGPU), its
    indices within 32 bits and each block's counters its own."""

    fn: Callable[..., None]
    name: str

    def on(self, device: Device, n: int, per: int, kind: int = UNSIGNED) -> Kernel:
        if device.caps.index_bits >= 64 and n < STATIC_FROM:
            return _variable(self)
        return _static(self, per, kind)


@functools.cache
def _variable(kernel: _Kernel) -> Kernel:
    return Kernel(kernel.fn, name=kernel.name, bounds=_bounds(kernel, {}))


@functools.cache
def _static(kernel: _Kernel, per: int, kind: int) -> Kernel:
    """``kernel`` of constant sizes, keys per block and key kind (a variable bounded to one value)."""
    return Kernel(kernel.fn, name=kernel.name, static_shapes=True,
                  bounds=_bounds(kernel, {"per": (per, per), "kind": (kind, kind)}))


def _bounds(kernel: _Kernel, given: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The bounds of ``kernel``'s int arguments: ``given``, and a pass's digit's (the plan loop's values)."""
    parameters = positional_parameters(kernel.fn, kernel.name)
    found = {name: bound for name, bound in given.items() if name in parameters}
    for name in ("digit", "step"):
        if name in parameters:
            found[name] = (0, -(-64 // DIGIT_BITS) - 1)
    return found


ENCODE = _Kernel(_encode, "sort_encode")
ENCODE_INDEXED = _Kernel(_encode_indexed, "sort_encode_indexed")
DECIDE = _Kernel(_decide, "sort_decide")
CLEAR = _Kernel(_clear, "sort_clear")
HISTOGRAM = _Kernel(_histogram, "sort_histogram")
SCAN = _Kernel(_scan, "sort_scan")
GROUPS = _Kernel(_groups, "sort_groups")
PLACE = _Kernel(_place, "sort_place")
SCATTER = _Kernel(_scatter, "sort_scatter")
SCATTER_INDEXED = _Kernel(_scatter_indexed, "sort_scatter_indexed")
DECODE = _Kernel(_decode, "sort_decode")
COPY = _Kernel(_copy, "sort_copy")
SELECT_START = _Kernel(_select_start, "select_start")
SELECT_START_AT = _Kernel(_select_start_at, "select_start_at")
SELECT_HISTOGRAM = _Kernel(_select_histogram, "select_histogram")
SELECT_KEPT_HISTOGRAM = _Kernel(_select_kept_histogram, "select_kept_histogram")
SELECT_TOTALS = _Kernel(_select_totals, "select_totals")
SELECT_GROUPS = _Kernel(_select_groups, "select_groups")
SELECT_PICK = _Kernel(_select_pick, "select_pick")
SELECT_VALUES = _Kernel(_select_values, "select_values")
MEDIAN = _Kernel(_median, "median")
QUANTILE = _Kernel(_quantile, "quantile")
PICK = _Kernel(_pick, "quantile_pick")
NAN = _Kernel(_nan, "median_of_nothing")
ROW_ENCODE = _Kernel(_row_encode, "sort_rows_encode")
ROW_ENCODE_INDEXED = _Kernel(_row_encode_indexed, "sort_rows_encode_indexed")
ROW_SORT = _Kernel(_row_sort, "sort_rows")
ROW_SORT_INDEXED = _Kernel(_row_sort_indexed, "sort_rows_indexed")
ROW_DECODE = _Kernel(_row_decode, "sort_rows_decode")
ROW_INDICES = _Kernel(_row_indices, "sort_rows_indices")


# ---- plan steps ------------------------------------------------------------------------------------------------

def sortable(dtype: np.dtype, device: Device) -> str | None:
    """Why ``device`` cannot sort numbers of ``dtype``, or None where it can."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf" or dtype.itemsize not in _BITS:
        return (f"svod sorts 32- and 64-bit integers and floats, not {dtype.name} (astype one first, as NumPy "
                "would compare them)")
    unsigned, _ = _BITS[dtype.itemsize]
    if unsigned not in device.caps.element_dtypes:
        return f"{device.name} holds no {unsigned.name} buffers, which a sort of {dtype.name} keys needs"
    return None


def index_dtype(device: Device) -> np.dtype:
    """The dtype of ``np.argsort``'s result on ``device``: NumPy's intp (int64), or int32 where the device
    holds no int64."""
    return np.dtype(np.int64) if dtypes.int64 in device.caps.element_dtypes else np.dtype(np.int32)


def quantile_dtype(dtype: np.dtype, device: Device) -> np.dtype:
    """The dtype of ``np.median``/``np.quantile`` of ``dtype`` values: float32 for float32, else float64
    (float32 where the device holds no float64)."""
    if np.dtype(dtype) == np.float32 or dtypes.float64 not in device.caps.element_dtypes:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def blocks(device: Device, n: int) -> tuple[int, int]:
    """How many blocks a pass splits ``n`` keys into, and the keys of each (the last may hold fewer): a few
    per thread of a CPU (one below ``PARALLEL_FROM`` keys); on the reference interpreter, which runs every
    work item at once and each loop a turn at a time, about as many blocks as keys in each (at least
    ``INTERPRETED_BLOCK``); on a GPU, blocks of ``GPU_BLOCK`` keys."""
    caps = device.caps
    if caps.overlaps_on_host:
        count = caps.threads * BLOCKS_PER_THREAD if n >= PARALLEL_FROM else 1
    elif caps.host_memory:  # a block's loops and the scan's over the blocks take turns alike
        count = -(-n // max(INTERPRETED_BLOCK, math.isqrt(n)))
    else:
        count = -(-n // GPU_BLOCK)
    count = max(1, min(count, n))
    per = max(1, -(-n // count))
    return max(1, -(-n // per)), per


@dataclass
class RadixSort:
    """The steps of one sort of plan buffer ``source`` (its whole memory, as one dimension) into ``values``
    (sorted numbers, of its dtype; ``source`` itself sorts in place) and/or ``indices`` (the stable
    argsort), with the scratch buffers it adds to ``plan``. ``add`` returns the ids of the steps, in order,
    for the loop or branch around them."""

    plan: ExecutionPlan
    source: int
    values: int | None = None
    indices: int | None = None

    def __post_init__(self) -> None:
        self.device: Device = self.plan.device
        buf = self.plan.buffers[self.source]
        self.dtype = np.dtype(buf.dtype.numpy)
        self.n = buf.size
        reason = sortable(self.dtype, self.device)
        if reason is not None:
            raise SvodError(reason, stage="plan", value=self.dtype.name)
        if self.n > MAX_ELEMENTS:
            raise SvodError(f"a sort takes at most {MAX_ELEMENTS} elements, not {self.n}", stage="plan",
                            value=self.n)
        if self.values is None and self.indices is None:
            raise SvodError("a sort writes values, indices or both", stage="plan")
        for slot, what in ((self.values, "values"), (self.indices, "indices")):
            if slot is not None and self.plan.buffers[slot].size != self.n:
                raise SvodError(f"the sort's {what} buffer has {self.plan.buffers[slot].size} elements, its source "
                                f"{self.n}", stage="plan", value=slot)
        self.unsigned, _ = _BITS[self.dtype.itemsize]
        self.width = self.dtype.itemsize * 8
        self.passes = -(-self.width // DIGIT_BITS)
        kind = {"u": UNSIGNED, "i": SIGNED, "f": FLOAT}[self.dtype.kind]
        self.kind = FLOAT_ZEROS_EQUAL if kind == FLOAT and self.values is None else kind
        self.blocks, self.per = blocks(self.device, self.n)

    def add(self) -> list[int]:
        if self.n == 0:
            return []
        plan, n, blocks = self.plan, self.n, self.blocks
        keys = [self.scratch(self.unsigned, n), self.scratch(self.unsigned, n)]
        low, high = self.scratch(self.unsigned, blocks), self.scratch(self.unsigned, blocks)
        hist = self.scratch(dtypes.int32, blocks * RADIX)
        totals = self.scratch(dtypes.int32, RADIX)
        sums = self.scratch(dtypes.int32, RADIX // GROUP)
        go_up, go_down, parity = (self.scratch(dtypes.int32, 1) for _ in range(3))
        coding: dict[str, Any] = {"kind": self.kind, "width": self.width}
        per: dict[str, Any] = {"per": self.per}
        bits = self.view(self.source, self.unsigned)
        table, row, line = (blocks, RADIX), (RADIX,), (n,)
        steps: list[int] = []
        if self.indices is None:
            steps.append(plan.add_kernel(self.kernel(ENCODE), [keys[0], low, high, bits], **per, **coding))
            order: list[int] = []
        else:
            order = [self.scratch(dtypes.int32, n), self.scratch(dtypes.int32, n)]
            steps.append(plan.add_kernel(self.kernel(ENCODE_INDEXED), [keys[0], order[0], low, high, bits], **per,
                                         **coding))
        digit: dict[str, Any] = {"digit": DIGIT_VARIABLE}
        body = [plan.add_kernel(self.kernel(DECIDE), [go_up, go_down, parity, low, high], **digit)]
        for flag, (here, there) in ((go_up, (0, 1)), (go_down, (1, 0))):
            run = [plan.add_kernel(self.kernel(CLEAR, table), [hist]),
                   plan.add_kernel(self.kernel(HISTOGRAM, table, line), [hist, keys[here]], **per, **digit),
                   plan.add_kernel(self.kernel(SCAN, row, table), [totals, hist]),
                   plan.add_kernel(self.kernel(GROUPS, (RADIX // GROUP,), row), [sums, totals]),
                   plan.add_kernel(self.kernel(PLACE, table, row, (RADIX // GROUP,)), [hist, totals, sums])]
            if self.indices is None:
                scatter = self.kernel(SCATTER, line, table, line)
                run.append(plan.add_kernel(scatter, [keys[there], hist, keys[here]], **per, **digit))
            else:
                scatter = self.kernel(SCATTER_INDEXED, line, line, table, line, line)
                run.append(plan.add_kernel(scatter, [keys[there], order[there], hist, keys[here], order[here]],
                                           **per, **digit))
            body.append(plan.branch(flag, run))
        steps.append(plan.loop(DIGIT_VARIABLE, 0, self.passes, body=body))
        finals = []
        for at in (1, 0):  # the keys are in K1 where the parity is 1, else in K0
            made = []
            if self.values is not None:
                made.append(plan.add_kernel(self.kernel(DECODE), [self.view(self.values, self.unsigned), keys[at]],
                                            **coding))
            if self.indices is not None:
                made.append(plan.add_kernel(self.kernel(COPY), [self.indices, order[at]]))
            finals.append(made)
        steps.append(plan.branch(parity, finals[0], finals[1]))
        return steps

    def kernel(self, kernel: _Kernel, *shapes: tuple[int, ...]) -> Kernel | Shaped:
        """``kernel`` for this device, over plan buffers of ``shapes`` where given (else one dimension each)."""
        made = kernel.on(self.device, self.n, self.per, self.kind)
        return made.shaped(*shapes) if shapes else made

    def scratch(self, dtype: DType, size: int) -> int:
        return self.plan.add_buffer(Buffer(self.device, dtype, max(size, 1)))

    def view(self, slot: int, dtype: DType) -> int:
        """Plan buffer ``slot``'s memory as ``dtype`` numbers of the same size (a float's bits)."""
        buf = self.plan.buffers[slot]
        if buf.dtype == dtype:
            return slot
        return self.plan.add_buffer(Buffer(self.device, dtype, buf.size, base=buf.base, offset=buf.offset))


@dataclass
class AxisSort:
    """The steps of a sort of plan buffer ``source`` of ``shape`` along ``axis``: each row (the numbers along
    the axis, at one place of the other axes) sorted on its own, into ``values`` (``source`` itself sorts it
    in place) and/or ``indices`` (the stable argsort along the axis). A row is one work item's sequential LSD
    radix sort, its keys and counters its own: the rows run in parallel, and a row stays in the cache through
    its passes (a pass whose digit is the same in every key of the row copies it instead)."""

    plan: ExecutionPlan
    source: int
    shape: tuple[int, ...]
    axis: int
    values: int | None = None
    indices: int | None = None

    def add(self) -> list[int]:
        sort = RadixSort(self.plan, self.source, self.values, self.indices)  # its checks and coding
        axis = self.axis % len(self.shape)
        length = self.shape[axis]
        outer = int(np.prod(self.shape[:axis], dtype=np.int64))
        inner = int(np.prod(self.shape[axis + 1:], dtype=np.int64))
        rows = outer * inner
        if sort.n == 0:
            return []
        plan = self.plan
        line, table, rows_shape = (outer, length, inner), (rows, length), (rows,)
        keys, spare = sort.scratch(sort.unsigned, sort.n), sort.scratch(sort.unsigned, sort.n)
        low, high = sort.scratch(sort.unsigned, rows), sort.scratch(sort.unsigned, rows)
        counts = sort.scratch(dtypes.int32, rows * sort.passes * RADIX)
        coding: dict[str, Any] = {"kind": sort.kind, "width": sort.width}
        bits = sort.view(self.source, sort.unsigned)
        counted = (rows, sort.passes * RADIX)
        if self.indices is None:
            return [plan.add_kernel(self.kernel(ROW_ENCODE, sort, table, rows_shape, rows_shape, line),
                                    [keys, low, high, bits], **coding),
                    plan.add_kernel(self.kernel(ROW_SORT, sort, table, table, counted, rows_shape, rows_shape),
                                    [keys, spare, counts, low, high], width=sort.width),
                    *self.decoded(sort, keys, line, table, coding)]
        order, spare_order = sort.scratch(dtypes.int32, sort.n), sort.scratch(dtypes.int32, sort.n)
        steps = [plan.add_kernel(self.kernel(ROW_ENCODE_INDEXED, sort, table, table, rows_shape, rows_shape, line),
                                 [keys, order, low, high, bits], **coding),
                 plan.add_kernel(self.kernel(ROW_SORT_INDEXED, sort, table, table, table, table, counted, rows_shape,
                                             rows_shape), [keys, spare, order, spare_order, counts, low, high],
                                 width=sort.width),
                 plan.add_kernel(self.kernel(ROW_INDICES, sort, line, table), [self.indices, order])]
        return [*steps, *self.decoded(sort, keys, line, table, coding)]

    def decoded(self, sort: RadixSort, keys: int, line: tuple[int, ...], table: tuple[int, ...],
                coding: dict[str, Any]) -> list[int]:
        if self.values is None:
            return []
        out = sort.view(self.values, sort.unsigned)
        return [self.plan.add_kernel(self.kernel(ROW_DECODE, sort, line, table), [out, keys], **coding)]

    @staticmethod
    def kernel(kernel: _Kernel, sort: RadixSort, *shapes: tuple[int, ...]) -> Shaped:
        """``kernel`` of constant sizes (what proves each row's places its own), over buffers of ``shapes``."""
        return _static(kernel, sort.per, sort.kind).shaped(*shapes)


def add_sort(plan: ExecutionPlan, source: int, values: int | None = None, indices: int | None = None) -> list[int]:
    """Add to ``plan`` the steps that sort plan buffer ``source`` into plan buffer ``values`` (the same dtype
    and size; ``source`` itself sorts it in place) and/or write its stable argsort into ``indices`` (int64
    or int32, its size); returns the ids of the steps added, in order."""
    return RadixSort(plan, source, values, indices).add()


def add_axis_sort(plan: ExecutionPlan, source: int, shape: tuple[int, ...], axis: int, values: int | None = None,
                  indices: int | None = None) -> list[int]:
    """Add to ``plan`` the steps that sort plan buffer ``source``, of ``shape``, along ``axis`` into plan buffer
    ``values`` (its dtype and shape; ``source`` itself sorts it in place) and/or write its stable argsort along
    the axis into ``indices`` (int64 or int32, its shape); returns the ids of the steps added, in order."""
    return AxisSort(plan, source, shape, axis, values, indices).add()


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
