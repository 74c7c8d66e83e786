"""``record_requirements``: a kernel's requirements (``Ops.REQUIRE``) made records in a buffer of its own.

A requirement is what the data must satisfy where NumPy raises as the program runs (``np.random.randint(low,
high)`` of bounds the kernel computes that span no integer: ``ValueError: low >= high``). The frontend states
it in the SINK where the call stands, as an effect::

    REQUIRE(failed, *ranges)   arg: the message

and lowering, before any other pass, makes requirement ``j`` an atomic update of a new last buffer::

    ATOMIC(MAX, INDEX(requirements, j, failed), 1, *ranges)

so every later pass lowers it as any atomic update (one that work items may make at once), and a work item
that does not reach the call (a branch not taken, a loop that does not turn) records nothing. The buffer
(int32, one element a requirement) is the kernel's own, zeroed before each launch; svod reads it after the
kernel and raises ``RequirementError`` with the first set requirement's message
(``svod.runtime.parts``). It is apart from the status buffer that bounds checks record in, whose plain stores
could not share a buffer with atomic updates in WGSL.
"""

from __future__ import annotations

from dataclasses import dataclass

from svod.dtype import dtypes
from svod.ir import Ops, UOp


@dataclass(frozen=True)
class Requirements:
    """A kernel's requirements as lowering recorded them: the buffer (a PARAM) and each one's message, in
    the order of its element."""

    buffer: UOp
    messages: tuple[str, ...]


def stated(ast: UOp) -> bool:
    """Whether the kernel ``ast`` states a requirement."""
    return any(s.op is Ops.REQUIRE for s in ast.src)


def record_requirements(ast: UOp) -> tuple[UOp, Requirements | None]:
    """``ast`` with each requirement an atomic update of the requirements buffer (the module docstring), and
    what it recorded; ``ast`` itself and None where it states none."""
    if not stated(ast):
        return ast, None
    count = sum(s.op is Ops.REQUIRE for s in ast.src)
    slots = [int(u.arg) for u in ast.toposort() if u.op is Ops.PARAM]
    buffer = UOp.param(max(slots, default=-1) + 1, dtypes.int32, count)
    sources: list[UOp] = []
    messages: list[str] = []
    for s in ast.src:
        if s.op is not Ops.REQUIRE:
            sources.append(s)
            continue
        target = buffer.index(UOp.index_const(len(messages)), s.src[0])
        sources.append(target.atomic(UOp.const(dtypes.int32, 1), Ops.MAX, *s.src[1:]))
        messages.append(str(s.arg))
    return ast.replace(src=tuple(sources)), Requirements(buffer, tuple(messages))


__all__ = ["Requirements", "record_requirements", "stated"]
