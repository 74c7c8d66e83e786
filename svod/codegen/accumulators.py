"""``lower_accumulators``: each ordered reduction of a linearized kernel becomes an accumulator register.

The linearizer decides where a reduction runs: where its register is set up, which loops its updates run
in (reductions over the same ranges at the same place share them) and where its result is read. It marks
those three places in the instruction list, and this pass says what happens there:

::

    DEFINE_REG r                      ─> DEFINE_REG r; INDEX(r, 0); STORE(r[0], identity or start)
    REDUCE(r, body[, start]) op (loop) ─> AFTER(r, init); INDEX; LOAD; <r[0] op body>; STORE(r[0], total)
    AFTER(r, update)     (after it)    ─> AFTER(r, STORE); INDEX; LOAD

A continued sum (``svod.ir.ops.CONTINUED``) names the value its register starts from, computed before it.
The update is computed as the device computes every other op of the kernel: through the renderer's
decompositor. The END of the loop the updates run in lists them, so a renderer sees which loop carries
which register. Every later instruction that used a reduction's result reads the register's LOAD.

It is a pass over the instruction list rather than the graph because the three places are decided by the
order (a register is initialised where its result is first needed); the pass adds no placement of its own.
"""

from __future__ import annotations

import math
from collections import Counter

from svod.dtype import DType
from svod.ir import Ops, PatternMatcher, UOp
from svod.ir.ops import FUSED, LEAVES, REASSOCIABLE


def lower_accumulators(linear: tuple[UOp, ...], decompositor: PatternMatcher | None) -> tuple[UOp, ...]:
    """``linear`` with each ordered reduction an accumulator register (the module docstring). Afterwards
    no REDUCE is left, and no instruction uses a value AFTER a register."""
    updates = {u.src[0]: u for u in linear if u.op is Ops.REDUCE}
    if not updates:
        return linear
    zero = UOp.index_const(0)
    consts: list[UOp] = []
    body: list[UOp] = []
    made: dict[UOp, UOp] = {}
    inits: dict[UOp, UOp] = {}
    folded: list[UOp] = []
    for u in linear:
        if u.op is Ops.DEFINE_REG and u in updates:
            update = updates[u]
            if len(update.src) == 3:  # a continued sum (``CONTINUED``): from the value computed before
                start = made.get(update.src[2], update.src[2])
                consts.append(zero)
            else:
                start = UOp.const(update.dtype, reduce_identity(_reduce_op(update), update.dtype))
                consts += [zero, start]
            slot = u.index(zero)
            inits[u] = slot.store(start)
            body += [u, slot, inits[u]]
        elif u.op is Ops.REDUCE:
            init = inits[u.src[0]]
            running = u.src[0].after(init).index(init.src[0].src[1])
            body += [running.src[0], running, running.load()]
            value = made.get(u.src[1], u.src[1])
            op = _reduce_op(u)
            fused = _fused(value, running.load()) if op is Ops.ADD else None
            if fused is None:
                update, computed = running.load().alu(op, value), [running.load(), value]
            else:
                update, replaced = fused
                folded += replaced
                computed = [running.load(), *(s for r in replaced for s in r.src)]
            if u.arg != op and update.op in (Ops.ADD, Ops.MULACC):  # marked REASSOCIABLE: so is its update
                update = update.replace(arg=REASSOCIABLE)
            total = _combine(update, computed, decompositor, body)
            made[u] = init.src[0].store(total)
            body.append(made[u])
        elif u.op is Ops.AFTER and u.src[0] in updates and len(u.src) == 2 and u.src[1].op is Ops.REDUCE:
            update = made[u.src[1]]
            final = u.src[0].after(update).index(update.src[0].src[1])
            body += [final.src[0], final, final.load()]
            made[u] = final.load()
        else:
            src = tuple(made.get(s, s) for s in u.src)
            if src != u.src:
                made[u] = u.replace(src=src)
            body.append(made.get(u, u))
    return _with_leaves(_without_unused(body, folded), consts)


def _reduce_op(update: UOp) -> Ops:
    """The op of a reduction: its arg, or the arg's first element where lowering marked it (``REASSOCIABLE``)."""
    return update.arg[0] if isinstance(update.arg, tuple) else update.arg


def _fused(value: UOp, running: UOp) -> tuple[UOp, list[UOp]] | None:
    """The update ``running + value`` as one rounding, where ``value`` is a ``FUSED`` product, or one that a
    guard chooses over -0.0 (a staged matmul's last block): ``fma(a, b, running)``; and the instructions it
    takes over (the guard first, then the product), whose sources are computed already."""
    if value.op is Ops.MUL and value.arg == FUSED:
        return UOp(Ops.MULACC, value.dtype, (*value.src, running)), [value]
    if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].arg == 0.0 \
            and math.copysign(1.0, value.src[2].arg) < 0:
        inner = _fused(value.src[1], running)
        if inner is not None:
            product, replaced = inner
            return value.replace(src=(value.src[0], product, running)), [value, *replaced]
    return None


def _without_unused(body: list[UOp], folded: list[UOp]) -> list[UOp]:
    """``body`` less the products (and their guards) a MULACC took over, where nothing else uses them."""
    uses = Counter(s for u in body for s in u.src)
    unused: set[UOp] = set()
    for product in folded:  # a guard comes before its product
        if not uses[product] and product not in unused:
            unused.add(product)
            uses.subtract(product.src)
    return [u for u in body if u not in unused] if unused else body


def _combine(update: UOp, computed: list[UOp], decompositor: PatternMatcher | None, out: list[UOp]) -> UOp:
    """``update``, the new value of an accumulator from the instructions ``computed`` already, appended to
    ``out`` as the device computes it: through the renderer's decompositor, like every other op of the
    kernel."""
    placed = {u: u for u in computed}

    def place(node: UOp) -> UOp:
        if node not in placed:
            built = node.replace(src=tuple(place(s) for s in node.src))
            rewritten = None if decompositor is None else decompositor.rewrite(built)
            if rewritten is None:
                out.append(built)
            placed[node] = built if rewritten is None else place(rewritten)
        return placed[node]

    return place(update)


def _with_leaves(body: list[UOp], consts: list[UOp]) -> tuple[UOp, ...]:
    """``body`` with the constants the registers use among the leaves it starts with, each once."""
    start = next((i for i, u in enumerate(body) if u.op not in LEAVES), len(body))
    leaves = dict.fromkeys(body[:start])
    for c in consts:
        if c not in leaves:
            leaves[c] = None
    return (*leaves, *body[start:])


def reduce_identity(op: Ops, dtype: DType) -> int | float:
    """The value a reduction starts from, an exact identity of the op: a float sum starts from -0.0
    (``-0.0 + x`` is ``x`` for every ``x``, where ``0.0 + -0.0`` is ``+0.0``), and a float MAX or MIN from
    NaN, which maximumNumber and minimumNumber ignore: a reduction of NaNs only is NaN, as numpy's
    ``fmax.reduce`` gives."""
    if op is Ops.ADD:
        return -0.0 if dtype.is_float else 0
    if op is Ops.MUL:
        return 1.0 if dtype.is_float else 1
    if dtype.is_float:
        return math.nan
    return dtype.min if op is Ops.MAX else dtype.max


__all__ = ["lower_accumulators", "reduce_identity"]
