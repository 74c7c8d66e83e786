"""Sorting as plan steps: ``np.sort``, ``np.argsort``, ``np.partition`` and ``np.argpartition`` of an
``@svod.jit`` function (``svod.frontend.jit``), each a few Python kernels of a parallel LSD radix sort added to
an ``ExecutionPlan``; its keys are also those of the order statistics' selection (``svod.frontend.order_statistics``).

::

    source (float64 bits, viewed as uint64)
        │ encode      keys that order as NumPy orders (floats: negatives' bits flipped, positives' sign set,
        ▼             every NaN above +inf), per block the AND and OR of its keys; argsort: indices 0..n-1
    keys K0 ──┐ runs         per block, do its keys never fall, or always fall?
              │ presorted    are the keys in order already (no pass runs), or each below the one before (one
              │              reversal from K0 into K1 sorts them, and no pass runs)?
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
from svod.frontend.pylang import CASTS, Const, func, prange
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
"""The fewest keys a sort compiles its kernels for (``SortKernel``): a new size compiles again (as a jitted
function's phases do), which larger sorts repay; smaller ones share kernels of variable sizes."""
MAX_ELEMENTS = (1 << 31) - 1
"""The most elements a sort takes: its counters and indices are 32-bit."""

UNSIGNED, SIGNED, FLOAT, FLOAT_ZEROS_EQUAL = 0, 1, 2, 3
"""How keys are made of a number's bits: as they are, the sign bit flipped, a float's order (-0.0 before 0.0),
a float's order with -0.0 and 0.0 one key (what ``argsort``'s stability needs)."""

uint32 = CASTS["uint32"]
_BITS = {4: (dtypes.uint32, 0x7F800000), 8: (dtypes.uint64, 0x7FF0000000000000)}
"""Per itemsize: the unsigned type of the keys, and the bits of a float's infinity."""


# ---- the kernels ---------------------------------------------------------------------------------------------

@func
def key_of(bits, kind, width):  # type: ignore[no-untyped-def]
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
def bits_of(key, kind, width):  # type: ignore[no-untyped-def]
    """The bits of the number ``key_of`` made ``key`` of (a NaN's as a positive NaN of the same payload)."""
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
        first = key_of(bits[start], kind, width)
        ands = first
        ors = first
        for j in range(min(per, n - start)):
            i = start + j
            key = key_of(bits[i], kind, width)
            keys[i] = key
            ands = ands & key
            ors = ors | key
        low[b] = ands
        high[b] = ors


def _encode_indexed(keys, indices, low, high, bits, per, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    n = bits.shape[0]
    for b in prange(low.shape[0]):
        start = b * per
        first = key_of(bits[start], kind, width)
        ands = first
        ors = first
        for j in range(min(per, n - start)):
            i = start + j
            key = key_of(bits[i], kind, width)
            keys[i] = key
            indices[i] = i
            ands = ands & key
            ors = ors | key
        low[b] = ands
        high[b] = ors


def _runs(runs, bits, per, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    """Per block, 1 where its keys never fall, plus 2 where they always fall (what ``_presorted`` joins). Each
    scan stops at the first key that says otherwise: in keys in no order, after two or three keys (a test
    in the encode's loop would keep it from being vectorised)."""
    n = bits.shape[0]
    for b in prange(runs.shape[0]):
        start = b * per
        count = min(per, n - start)
        rising = 1
        for j in range(1, count):
            if key_of(bits[start + j], kind, width) < key_of(bits[start + j - 1], kind, width):
                rising = 0
                break
        falling = 1
        for j in range(1, count):
            if key_of(bits[start + j], kind, width) >= key_of(bits[start + j - 1], kind, width):
                falling = 0
                break
        runs[b] = rising + 2 * falling


def _presorted(done, reverse, parity, runs, keys, per):  # type: ignore[no-untyped-def]
    """Whether the keys need no pass: they never fall (``done``), or they always fall (``done`` and
    ``reverse``: one reversal sorts them, stably, as no two are equal). ``parity`` starts where the keys
    are after it: in K1 when reversed."""
    rising = 1
    falling = 1
    for b in range(runs.shape[0]):
        shape = runs[b]
        if shape % 2 == 0:
            rising = 0
        if shape < 2:
            falling = 0
        if b > 0:
            after = keys[b * per]
            before = keys[b * per - 1]
            if after < before:
                rising = 0
            if after >= before:
                falling = 0
    flipped = falling * (1 - rising)
    done[0] = rising + flipped
    reverse[0] = flipped
    parity[0] = flipped


def _reverse(target, keys):  # type: ignore[no-untyped-def]
    n = keys.shape[0]
    for i in prange(n):
        target[i] = keys[n - 1 - i]


def _reverse_indexed(target, target_indices, keys, indices):  # type: ignore[no-untyped-def]
    n = keys.shape[0]
    for i in prange(n):
        target[i] = keys[n - 1 - i]
        target_indices[i] = indices[n - 1 - i]


def _decide(go_up, go_down, parity, low, high, done, digit):  # type: ignore[no-untyped-def]
    """Whether the pass of ``digit`` runs (its digit differs between some keys, which are not in order
    already: ``done``), and which way: from K0 into K1 (``go_up``) or back (``go_down``); ``parity`` says
    where the keys are after it."""
    ands = low[0]
    ors = high[0]
    for b in range(1, low.shape[0]):
        ands = ands & low[b]
        ors = ors | high[b]
    varying = ((ands ^ ors) >> uint32(digit * DIGIT_BITS)) & MASK
    if done[0] != 0:
        varying = 0
    flipped = parity[0]
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
        out[i] = bits_of(keys[i], kind, width)


def _copy(out, values):  # type: ignore[no-untyped-def]
    for i in prange(values.shape[0]):
        out[i] = values[i]


# ---- sorts along an axis: each row by a sequential radix sort of its own ----------------------------------

def _row_encode(keys, low, high, bits, kind, width: Const[int]):  # type: ignore[no-untyped-def]
    """Each row's keys (a row: the numbers along the sorted axis, ``bits`` shaped (outer, n, inner)), and the
    AND and OR of its keys."""
    inner = bits.shape[2]
    for o in prange(bits.shape[0]):
        for w in prange(inner):
            r = o * inner + w
            first = key_of(bits[o, 0, w], kind, width)
            ands = first
            ors = first
            for c in range(bits.shape[1]):
                key = key_of(bits[o, c, w], kind, width)
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
            first = key_of(bits[o, 0, w], kind, width)
            ands = first
            ors = first
            for c in range(bits.shape[1]):
                key = key_of(bits[o, c, w], kind, width)
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
                out[o, c, w] = bits_of(keys[o * inner + w, c], kind, width)


def _row_indices(out, order):  # type: ignore[no-untyped-def]
    """Each row's sorting positions along the axis: ``np.argsort``'s."""
    inner = out.shape[2]
    for o in prange(out.shape[0]):
        for w in prange(inner):
            for c in range(out.shape[1]):
                out[o, c, w] = order[o * inner + w, c]


@dataclass(frozen=True)
class SortKernel:
    """A kernel of the sort, as each device and size takes it: with sizes as variables (one compile serves
    every size), or with constant sizes and keys per block (``static``), which prove its accesses in bounds
    (their checks gone, a pass is faster on the CPU) and, where indices are 32-bit (WebGPU), its
    indices within 32 bits and each block's counters its own."""

    fn: Callable[..., None]
    name: str

    def on(self, device: Device, n: int, per: int, kind: int = UNSIGNED) -> Kernel:
        if device.caps.index_bits >= 64 and n < STATIC_FROM:
            return _variable(self)
        return _static(self, per, kind)


@functools.cache
def _variable(kernel: SortKernel) -> Kernel:
    return Kernel(kernel.fn, name=kernel.name, bounds=_bounds(kernel, {}))


@functools.cache
def _static(kernel: SortKernel, per: int, kind: int) -> Kernel:
    """``kernel`` of constant sizes, keys per block and key kind (a variable bounded to one value)."""
    return Kernel(kernel.fn, name=kernel.name, static_shapes=True,
                  bounds=_bounds(kernel, {"per": (per, per), "kind": (kind, kind)}))


def _bounds(kernel: SortKernel, given: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The bounds of ``kernel``'s int arguments: ``given``, and a pass's digit's (the plan loop's values)."""
    parameters = positional_parameters(kernel.fn, kernel.name)
    found = {name: bound for name, bound in given.items() if name in parameters}
    for name in ("digit", "step"):
        if name in parameters:
            found[name] = (0, -(-64 // DIGIT_BITS) - 1)
    return found


ENCODE = SortKernel(_encode, "sort_encode")
ENCODE_INDEXED = SortKernel(_encode_indexed, "sort_encode_indexed")
RUNS = SortKernel(_runs, "sort_runs")
PRESORTED = SortKernel(_presorted, "sort_presorted")
REVERSE = SortKernel(_reverse, "sort_reverse")
REVERSE_INDEXED = SortKernel(_reverse_indexed, "sort_reverse_indexed")
DECIDE = SortKernel(_decide, "sort_decide")
CLEAR = SortKernel(_clear, "sort_clear")
HISTOGRAM = SortKernel(_histogram, "sort_histogram")
SCAN = SortKernel(_scan, "sort_scan")
GROUPS = SortKernel(_groups, "sort_groups")
PLACE = SortKernel(_place, "sort_place")
SCATTER = SortKernel(_scatter, "sort_scatter")
SCATTER_INDEXED = SortKernel(_scatter_indexed, "sort_scatter_indexed")
DECODE = SortKernel(_decode, "sort_decode")
COPY = SortKernel(_copy, "sort_copy")
ROW_ENCODE = SortKernel(_row_encode, "sort_rows_encode")
ROW_ENCODE_INDEXED = SortKernel(_row_encode_indexed, "sort_rows_encode_indexed")
ROW_SORT = SortKernel(_row_sort, "sort_rows")
ROW_SORT_INDEXED = SortKernel(_row_sort_indexed, "sort_rows_indexed")
ROW_DECODE = SortKernel(_row_decode, "sort_rows_decode")
ROW_INDICES = SortKernel(_row_indices, "sort_rows_indices")


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
        go_up, go_down, parity, done, reverse = (self.scratch(dtypes.int32, 1) for _ in range(5))
        runs = self.scratch(dtypes.int32, blocks)
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
        steps.append(plan.add_kernel(self.kernel(RUNS), [runs, bits], **per, **coding))
        steps.append(plan.add_kernel(self.kernel(PRESORTED), [done, reverse, parity, runs, keys[0]], **per))
        steps.append(plan.branch(reverse, [self.reversal(keys, order)]))
        digit: dict[str, Any] = {"digit": DIGIT_VARIABLE}
        body = [plan.add_kernel(self.kernel(DECIDE), [go_up, go_down, parity, low, high, done], **digit)]
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

    def reversal(self, keys: list[int], order: list[int]) -> int:
        """The step that sorts keys which always fall: K0 reversed into K1 (and their indices)."""
        if self.indices is None:
            return self.plan.add_kernel(self.kernel(REVERSE), [keys[1], keys[0]])
        return self.plan.add_kernel(self.kernel(REVERSE_INDEXED), [keys[1], order[1], keys[0], order[0]])

    def kernel(self, kernel: SortKernel, *shapes: tuple[int, ...]) -> Kernel | Shaped:
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
    def kernel(kernel: SortKernel, sort: RadixSort, *shapes: tuple[int, ...]) -> Shaped:
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


def sorted_axis(call: str, axis: int | None, kth: tuple[int, ...], shape: tuple[int, ...], itself: bool) -> int | None:
    """The axis ``call`` sorts an array of ``shape`` along (None: the flattened array, as a 1-D array's one axis
    is), after NumPy's checks of it and of a partition's ``kth`` (ValueError, saying what NumPy raises);
    ``itself``: the call sorts the array in place."""
    if axis is not None and not -max(len(shape), 1) <= axis < max(len(shape), 1):
        raise ValueError(f"{call}'s axis {axis} is out of bounds for an array of dimension {len(shape)} (NumPy "
                         "raises AxisError)")
    if axis is None and itself:
        raise ValueError(f"{call} sorts the array itself along an axis, not axis=None")
    length = int(np.prod(shape)) if axis is None or not shape else shape[axis]
    for k in kth:
        if not -length <= k < length:
            raise ValueError(f"{call}: kth(={k}) out of bounds ({length}) (NumPy raises ValueError)")
    return None if len(shape) <= 1 else axis
