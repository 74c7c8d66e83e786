"""How far LLVM unrolls a register tile's loop: the counts the LLVM renderer's loop metadata asks for, and
how many accumulators each tile loop updates, which they are divided by; and which long loops over a row
that a loop beside them also reads are kept from being unrolled whole."""

from __future__ import annotations

from collections.abc import Mapping

from svod.codegen.render.base import inside_loops
from svod.ir import Ops, UOp, substitute
from svod.ir.ops import ALU, MATH
from svod.ir.uop import is_unbounded, memory_of

__all__ = ["PLAIN_ROW_INTERLEAVE", "POLYNOMIAL_CHAIN", "ROW_INTERLEAVE", "ROW_TURNS", "ROW_UNROLL",
           "SYMBOLIC_UNROLL_LANES", "TILE_UNROLL", "TILE_UPDATES", "accumulators_per_loop", "shared_row_loops",
           "transcendental_loops"]


TILE_UNROLL = 8
"""How many steps of a reduction loop that updates several accumulators (a register tile, a split MAX)
LLVM unrolls into one iteration. Its own choice for a matmul's 8x16 tile is 2, which keeps only two rows
of ``b`` in flight: where they lie pages apart, each step waits for memory (the C pair's clang unrolls by 8
on its own)."""
TILE_UPDATES = TILE_UNROLL * 128
"""How many accumulator updates one unrolled iteration of a tile loop holds at most: AVX-512's 8x32 tile
is unrolled 4 times, not 8, which ran slower."""
SYMBOLIC_UNROLL_LANES = 64
"""The most accumulator lanes a tile's loop over a symbolic count updates and is still unrolled, half as far
as over a constant one: AVX2's 4x16 float32 tile, which unrolled runs almost as fast as the static kernel and
not unrolled does not. AVX-512's 8x32 tile is not (see ``llvmir._FunctionWriter._loop_hints``)."""


ROW_TURNS = 256
"""The fewest constant turns of a loop over a row that ``shared_row_loops`` considers: below it, LLVM's whole
unrolling of the row's loops keeps the row in a few registers."""
ROW_UNROLL = 4
"""How far LLVM unrolls a constant loop of ``shared_row_loops`` (after vectorising and interleaving it): far
enough that its branch costs nothing, short of the whole loop. ``llvm.loop.unroll.disable`` (or a count of 1)
would do too little: LLVM's vectoriser then interleaves the loop once, and a sum's one vector accumulator
waits on its own latency every step."""
ROW_INTERLEAVE = 4
"""How many vectors of a row one step of a symbolic loop of ``shared_row_loops`` works on. LLVM's own choice
for a softmax's loop of exponentials is one, as its constants and the values live across the row's loops
leave few registers by its count: each step then waits on the previous one's polynomial."""
PLAIN_ROW_INTERLEAVE = 2
"""How many vectors of a row one step of such a loop works on where the loop computes no transcendental
(``transcendental_loops``): a layer norm's loads, adds, multiplies and stores. Measured under load, best of 100,
on the suite's variable-size kernels: a layer norm's three plain passes took 1.02 ms interleaved twice, 1.25-1.41
four times, 1.20-1.33 eight times; a softmax, whose loop of exponentials waits on its polynomial, 1.78 ms with
every pass interleaved four times and 3.07 twice."""
POLYNOMIAL_CHAIN = 8
"""The fewest dependent operations in one turn of a loop that ``transcendental_loops`` takes for a
transcendental evaluated inline (``decompositions.CPU_MATH``'s polynomials: float32 ``exp``'s chain is 19
long, float64's 25); a layer norm's longest is 2."""
_CALLED_TRANSCENDENTALS = MATH - {Ops.SQRT, Ops.FLOOR, Ops.CEIL, Ops.TRUNC, Ops.RINT, Ops.FMOD}
"""The math a renderer calls for that is a series, not one instruction."""
_CONVERSIONS = frozenset({Ops.CAST, Ops.BITCAST})
"""What a chain of operations passes through without a step of its own (``exp``'s power of two)."""


def shared_row_loops(linear: tuple[UOp, ...]) -> frozenset[UOp]:
    """The loops over a row (a symbolic count, or at least ``ROW_TURNS`` constant turns) that access an
    element of a buffer which a loop beside them (inside the same loops, as many turns) accesses at the same
    turn: a layer norm's three passes over its row, a softmax's over the row it wrote. Over a constant row,
    LLVM unrolls such loops whole, then keeps the row's values from one loop to the next in registers (64 of
    512 bits for 1024 float32), which do not hold them: it spills them to the stack and reloads them, slower
    than reading the row again. Over a symbolic one, it interleaves them less than it could."""
    elements: dict[UOp, dict[tuple[UOp, UOp], None]] = {}
    turns: dict[UOp, UOp] = {}
    siblings: dict[tuple[tuple[UOp, ...], UOp], list[UOp]] = {}
    for u, open_loops in inside_loops(linear):
        if u.op is Ops.RANGE and _row_count(u):
            elements[u], turns[u] = {}, UOp.define_var("turn", 0, max(0, int(u.vmax)), u.dtype)
            siblings.setdefault((tuple(open_loops), u.src[0]), []).append(u)
        elif u.op is Ops.INDEX and open_loops and open_loops[-1] in elements and memory_of(u.src[0]).op is Ops.PARAM:
            loop = open_loops[-1]
            element = substitute(u.src[1], {loop: turns[loop]})
            if element is not u.src[1]:  # an element that moves with the loop's turn
                elements[loop][(memory_of(u.src[0]), element)] = None
    shared: dict[UOp, None] = {}
    for loops in siblings.values():
        for k, loop in enumerate(loops):
            if any(elements[loop].keys() & elements[other].keys() for other in loops[:k] + loops[k + 1:]):
                shared[loop] = None
    return frozenset(shared)


def transcendental_loops(linear: tuple[UOp, ...], loops: frozenset[UOp]) -> frozenset[UOp]:
    """The loops of ``loops`` whose turn computes a transcendental: calls one (``exp2``, ``sin`` ...) or
    evaluates one inline, a chain of at least ``POLYNOMIAL_CHAIN`` dependent operations (a CPU's ``exp``,
    ``log`` and ``erf`` are polynomials by the time a renderer sees them)."""
    chain: dict[UOp, int] = {}
    found: dict[UOp, None] = {}
    for u, open_loops in inside_loops(linear):
        inside = [loop for loop in open_loops if loop in loops]
        if not inside or u.op not in ALU | _CONVERSIONS:
            continue
        chain[u] = (u.op in ALU) + max((chain.get(s, 0) for s in u.src), default=0)
        if u.op in _CALLED_TRANSCENDENTALS or chain[u] >= POLYNOMIAL_CHAIN:
            found.update(dict.fromkeys(inside))
    return frozenset(found)


def _row_count(loop: UOp) -> bool:
    """Whether ``loop`` runs over a row by its count: a symbolic one, or at least ``ROW_TURNS``."""
    end = loop.src[0]
    return not is_unbounded(loop) and (end.op is not Ops.CONST or end.arg >= ROW_TURNS)


def accumulators_per_loop(linear: tuple[UOp, ...], tile_loops: set[UOp],
                          register_lanes: Mapping[UOp, int]) -> dict[UOp, int]:
    """Per register tile's loop, the accumulators (register lanes) its body updates: what its unroll count
    divides ``TILE_UPDATES`` by. Those of the loops beside it do not count (a symbolic matmul's edge tiles,
    counted with its 8x32 tile, left that tile's loop unrolled once, and much slower)."""
    updated: dict[UOp, dict[UOp, None]] = {}
    for u, open_loops in inside_loops(linear):
        if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and memory_of(u.src[0].src[0]).op is Ops.DEFINE_REG:
            for loop in open_loops:
                if loop in tile_loops:
                    updated.setdefault(loop, {})[memory_of(u.src[0].src[0])] = None
    return {loop: sum(register_lanes.get(r, 1) for r in registers) for loop, registers in updated.items()}
