"""How far LLVM unrolls a register tile's loop: the counts the LLVM renderer's loop metadata asks for, and
how many accumulators each tile loop updates, which they are divided by."""

from __future__ import annotations

from collections.abc import Mapping

from svod.codegen.render.base import inside_loops
from svod.ir import Ops, UOp
from svod.ir.uop import memory_of

__all__ = ["SYMBOLIC_UNROLL_LANES", "TILE_UNROLL", "TILE_UPDATES", "accumulators_per_loop"]


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
