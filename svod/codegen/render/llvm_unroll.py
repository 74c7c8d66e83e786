"""How far LLVM unrolls a register tile's loop: the counts the LLVM renderer's loop metadata asks for, and
how many accumulators each tile loop updates, which they are divided by."""

from __future__ import annotations

from collections.abc import Mapping

from svod.ir import Ops, UOp
from svod.ir.uop import memory_of

__all__ = ["SYMBOLIC_UNROLL_LANES", "TILE_UNROLL", "TILE_UPDATES", "accumulators_per_loop"]


TILE_UNROLL = 8
"""How many steps of a reduction loop that updates several accumulators (a register tile, a split MAX)
LLVM unrolls into one iteration. Its own choice for a matmul's 8x16 tile is 2, which keeps two rows of
``b`` in flight: a 2048 matmul, whose rows of ``b`` are 8 KiB apart, took 1.7x the time of 8 (the C
pair's clang unrolls by 8 on its own)."""
TILE_UPDATES = TILE_UNROLL * 128
"""How many accumulator updates one unrolled iteration of a tile loop holds at most: AVX-512's 8x32 tile
is unrolled 4 times, not 8 (matmul1024: 83 GFLOP/s unrolled 8 times, 121 unrolled 4)."""
SYMBOLIC_UNROLL_LANES = 64
"""The most accumulator lanes a tile's loop over a symbolic count updates and is still unrolled, half as far
as over a constant one: AVX2's 4x16 float32 tile (matmul 1024 over a packed ``b``, this 2-core znver3:
24 ms once, 19.6 twice, 18.8 four times, 18.3 static; 2048: 217, 179, 179). AVX-512's 8x32 tile is not
(see ``llvmir._FunctionWriter._loop_hints``)."""


def accumulators_per_loop(linear: tuple[UOp, ...], tile_loops: set[UOp],
                          register_lanes: Mapping[UOp, int]) -> dict[UOp, int]:
    """Per register tile's loop, the accumulators (register lanes) its body updates: what its unroll count
    divides ``TILE_UPDATES`` by. Those of the loops beside it do not count (a symbolic matmul's edge tiles,
    counted with its 8x32 tile, left that tile's loop unrolled once: 97 GFLOP/s against 165 at 256^2)."""
    updated: dict[UOp, dict[UOp, None]] = {}
    open_loops: list[UOp] = []
    for u in linear:
        if u.op is Ops.RANGE:
            open_loops.append(u)
        elif u.op is Ops.END and open_loops and u.src[0] is open_loops[-1]:
            open_loops.pop()
        elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and memory_of(u.src[0].src[0]).op is Ops.DEFINE_REG:
            for loop in open_loops:
                if loop in tile_loops:
                    updated.setdefault(loop, {})[memory_of(u.src[0].src[0])] = None
    return {loop: sum(register_lanes.get(r, 1) for r in registers) for loop, registers in updated.items()}
