"""``check_barriers``: every work item of a group reaches every BARRIER of a linearized kernel.

A barrier waits until each work item of the group arrives; one that some work items skip (inside an IF)
or reach a different number of times (inside a loop whose trips depend on the work item) hangs the group
or lets it read local memory half written. Lowering decides where a barrier runs by the ranges it names
(``lower.share_reductions``: none; ``lower.tile_matmul``: the loop over blocks of ``k``, whose trips are
the same for every work item); the linearizer runs it, as every effect, in those loops and under no
gate. This check makes sure of the result on the instruction list a renderer receives.
"""

from __future__ import annotations

from svod.errors import GraphError
from svod.ir import Ops, UOp


def check_barriers(linear: tuple[UOp, ...]) -> None:
    """Refuse ``linear`` when a BARRIER stands inside an IF, or inside a loop whose end depends on the work
    item's local id (a ``SPECIAL`` named ``lidx``)."""
    if not any(u.op is Ops.BARRIER for u in linear):
        return
    blocks: list[UOp] = []
    for u in linear:
        if u.op in (Ops.RANGE, Ops.IF):
            blocks.append(u)
        elif u.op is Ops.END:
            blocks.pop()
        elif u.op is Ops.BARRIER:
            for block in blocks:
                if block.op is Ops.IF:
                    raise GraphError("a barrier stands inside an IF, which some work items of the group skip",
                                     stage="lower")
                if any(s.op is Ops.SPECIAL and str(s.arg).startswith("lidx") for s in block.src[0].toposort()):
                    raise GraphError("a barrier stands inside a loop whose trips differ between the work items "
                                     "of the group", stage="lower", value=block.arg)


__all__ = ["check_barriers"]
