"""The linearizer: orders a lowered kernel into the flat instruction list a renderer walks.

Every RANGE opens a loop, and every IF a guarded block, whose body is a contiguous run ending at its
END. A node is placed in the innermost scope among those it runs inside (``live_ranges``), so values
that do not depend on a loop are computed outside it. The nesting of scopes comes from the ENDs: the
scopes still open at a scope's END are the ones that contain it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from svod.codegen.lower import live_ranges
from svod.errors import GraphError
from svod.ir import Ops, UOp
from svod.ir.ops import SCOPES


def linearize(sink: UOp) -> tuple[UOp, ...]:
    """The nodes of ``sink`` (without the SINK) in execution order, with RANGE/IF ... END blocks."""
    order = sink.toposort()
    live = live_ranges(sink)
    end_of: dict[UOp, UOp] = {}
    for node in order:
        if node.op is Ops.END:
            if node.src[0] in end_of:
                raise GraphError(f"a {node.src[0].op.name} has two ENDs", stage="linearize", value=node.src[0].arg)
            end_of[node.src[0]] = node
    enclosing = {r: live[end] for r, end in end_of.items()}
    depth = {r: len(outer) for r, outer in enclosing.items()}
    for node in order:
        if node.op in SCOPES and node not in end_of:
            raise GraphError(f"a {node.op.name} has no END; lower the kernel first", stage="linearize",
                             value=node.arg)

    def block_of(node: UOp) -> UOp | None:
        ranges = live[node]
        if not ranges:
            return None
        deepest = max(ranges, key=depth.__getitem__)
        if not ranges <= enclosing[deepest] | {deepest}:
            raise GraphError("loops do not nest: a node needs ranges from two sibling loops",
                             stage="linearize", value=sorted(r.arg for r in ranges))
        return deepest

    blocks: defaultdict[UOp | None, list[UOp]] = defaultdict(list)
    for node in order:
        if node.op not in SCOPES and node.op is not Ops.SINK:
            blocks[block_of(node)].append(node)
    emitted: list[UOp] = []
    # each frame: the rest of a block's body, and the END that closes it (None for the kernel's top level)
    stack: list[tuple[Iterator[UOp], UOp | None]] = [(iter(blocks[None]), None)]
    while stack:
        body, closing = stack[-1]
        item = next(body, None)
        if item is None:
            stack.pop()
            if closing is not None:
                emitted.append(closing)
        elif item.op is Ops.END:
            emitted.append(item.src[0])
            stack.append((iter(blocks[item.src[0]]), item))
        else:
            emitted.append(item)
    return tuple(emitted)
