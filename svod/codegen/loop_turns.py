"""How many times a work item's loops come round, for devices that stop a work item's loops after a number of
turns (``DeviceCaps.max_loop_turns``, WebGPU on llvmpipe): lowering keeps a kernel within that limit where it
can (``pipeline.loops_fit``), and what no bound proves within it each launch checks for its variable values. A
loop without a bound (a ``while``) cannot be counted: such a device refuses it. A loop with an early exit is
counted at its bound, the most it may come round.
"""

from __future__ import annotations

from collections.abc import Callable

from svod.device.launch import most
from svod.dtype import DeviceSpec
from svod.errors import GraphError
from svod.ir import Ops, UOp, simplify
from svod.ir.uop import is_unbounded

HiddenTurns = Callable[[UOp], int]
"""How many times a loop the rendered code runs for one instruction alone (a compare-exchange) may come
round."""


def loop_turns(linear: tuple[UOp, ...], hidden: HiddenTurns) -> UOp:
    """How many times the loops of one work item come round, at most: each loop's trips and the test that
    ends it, times the trips of the loops around it, and the hidden loops of single instructions."""
    total = UOp.index_const(0)
    around = [UOp.index_const(1)]
    for u in linear:
        if u.op is Ops.RANGE:
            trips = u.src[0].maximum(0)
            total = total + around[-1] * (trips + 1)
            around.append(around[-1] * trips)
        elif u.op is Ops.END and u.src[0].op is Ops.RANGE:
            around.pop()
        elif turns := hidden(u):
            total = total + around[-1] * turns
    return simplify(total)


def unproven_loop_turns(linear: tuple[UOp, ...], limit: int | None, hidden: HiddenTurns,
                        device: DeviceSpec | str = "the device", kernel: str | None = None) -> UOp | None:
    """A work item's loop turns where the device stops its loops after ``limit`` and no bound keeps them
    within it; else None. A loop without a bound (a ``while``) is refused there: nothing counts its turns."""
    if limit is None:
        return None
    endless = next((u for u in linear if u.op is Ops.RANGE and is_unbounded(u)), None)
    if endless is not None:
        raise GraphError(f"a while loop has no bound on its turns, and {device} stops a work item's loops after "
                         f"{limit} turns without a word, so it could end the loop early: run the kernel on another "
                         "device, or bound the loop, for _ in range(bound): ... break", kernel=kernel,
                         stage="render", value=limit)
    turns = loop_turns(linear, hidden)
    return None if turns.vmax <= limit else turns


def checked_loop_turns(linear: tuple[UOp, ...], limit: int | None, hidden: HiddenTurns, device: DeviceSpec,
                       kernel: str) -> UOp | None:
    """The loop turns each launch must check (``unproven_loop_turns``). A kernel that exceeds the limit even
    at the variables' smallest values is refused."""
    turns = unproven_loop_turns(linear, limit, hidden, device, kernel)
    if turns is None or limit is None:
        return None
    least = most(turns, {v.arg[0]: v.arg[1] for v in turns.toposort() if v.op is Ops.DEFINE_VAR})
    if least <= limit:
        return turns
    if any(u.op is Ops.LOAD for u in turns.toposort()):
        raise GraphError(f"a loop's bound is read from memory, so nothing keeps its turns within the {limit} after "
                         f"which {device} stops a work item's loops without a word: run the kernel on another "
                         "device, or bound the loop by a size and skip the turns past the one read (for k in "
                         "range(width): if k < count: ...)", kernel=kernel, stage="render", value=limit)
    raise GraphError(f"a work item's loops come round up to {least} times, and {device} stops them after {limit} "
                     "without a word: give the kernel more work items, each with less to do", kernel=kernel,
                     stage="render", value=least)
