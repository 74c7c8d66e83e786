"""A kernel's buffers as its statements see them: every access goes through the buffer's memory state at its
statement (``UOp.state``: the effects stated on it so far), gated by the conditions around it, its indices
checked against their dimensions; every store and atomic names the loops it runs in. The locals a loop carries
from turn to turn live in registers of their own (``cell``). The states that change nothing are dropped at the end
(``unstated``)."""

from __future__ import annotations

import functools
from typing import Any

from svod.codegen.indexing import index_in_bounds
from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError
from svod.frontend.arithmetic import Arithmetic
from svod.frontend.values import ArrayValue
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, UPat, graph_rewrite, substitute
from svod.ir.ops import STATEMENTS
from svod.ir.uop import is_state, memory_of, pointee


class Memory(Arithmetic):
    """Reads and writes of array arguments and of the registers of carried locals."""

    def memory(self, param: UOp) -> UOp:
        """The memory state of buffer ``param`` at the statement being translated (``UOp.state``): the
        effects stated on it so far, in the current turn of the sequential loops around the statement. Every
        access goes through it, so a value read here is the value the statement read, whatever later
        statements store (states of buffers the kernel never writes are dropped at the end: ``unstated``)."""
        loops = [loop.range for loop in self.loops if loop.kind is not AxisKind.GLOBAL]
        return param.state(self.versions.get(param, 0), *loops)

    def wrote(self, param: UOp, effect: UOp) -> None:
        """``effect`` on ``param`` was stated: the statements after it see the next state."""
        self.stated[effect] = dict(self.versions)
        self.versions[param] = self.versions.get(param, 0) + 1

    def element(self, array: ArrayValue, index: tuple[Any, ...]) -> UOp:
        """``array[index]`` at this statement: through the array's memory state, gated by the conditions the
        statement runs under (a load may be computed ahead of its branch, a value being held from its
        statement on, and then reads nothing where the branch is not taken), each index checked against its
        own dimension as numpy and numba check it (``dimension_checked``)."""
        param = array.buffer.param
        checked, inside = self.dimension_checked(array, index)
        return array.buffer.index(checked, self.gate, self.memory(param), inside)

    def dimension_checked(self, array: ArrayValue, index: tuple[Any, ...]) -> tuple[tuple[Any, ...], UOp | None]:
        """``index`` with each index past the first that may leave its dimension (which the flat buffer
        would not show: ``x[i, 3]`` of an ``(n, 3)`` array is ``x[i + 1, 0]``) clamped to it, and the condition
        that none leaves: the access is then checked at run time (``IndexOutOfBoundsError``), and its flat
        index stays within the array (which a device of 32-bit indices must know). An index inside its
        dimension wherever that is not empty and the statement runs (the kernel's own clamp, ``max(min(x, w -
        1), 0)``) is not clamped again: its condition is ``0 < w``, the same for the whole launch. A constant
        index (or one whose range is constant) of a symbolic dimension instead sets the least size the
        dimension may take, which the call checks (and which lets the race check tell ``x[i, 1]`` from ``x[i +
        1, 0]``); one outside a constant dimension is refused now."""
        unproven: list[UOp] = []
        checked = list(index)
        for axis, (i, dim) in enumerate(zip(index, array.dims, strict=True)):
            at = UOp.index_const(i) if isinstance(i, int) else i.cast(dtypes.index)
            if axis == 0:  # the buffer's own bounds check the first, but for a clamp's test
                clamp = self._clamp_inside(at, dim)
                unproven.extend([] if clamp is None else [clamp])
                continue
            if isinstance(dim, int) and at.op is Ops.CONST and not 0 <= int(at.arg) < dim:
                raise KernelSyntaxError(f"index {at.arg} is outside dimension {axis} of {array.name}, of size {dim}",
                                        kernel=self.name, stage="build", value=int(at.arg))
            if isinstance(dim, UOp) and dim.op is Ops.DEFINE_VAR and at.vmin >= 0 and \
                    not any(u.op is Ops.DEFINE_VAR for u in at.toposort()):
                self.least_sizes.setdefault(dim, []).append((int(at.vmax) + 1, array.name, axis))
                continue
            size = dim if isinstance(dim, UOp) else UOp.index_const(dim)
            order = {u: k for k, u in enumerate((at < size).toposort())}
            if not index_in_bounds(at, size, self.gate, order):
                not_empty = self._not_empty_suffices(at, size, order)
                if not_empty is None:
                    unproven.append((at >= 0) & (at < size))
                    checked[axis] = at.maximum(0).minimum(size - 1)
                else:  # inside wherever the test holds: a clamp would change no index the access makes
                    unproven.append(not_empty)
        return tuple(checked), functools.reduce(lambda a, b: a & b, unproven) if unproven else None

    def _clamp_inside(self, at: UOp, dim: int | UOp) -> UOp | None:
        """``0 < dim`` for a first index that is inside its symbolic dimension wherever that is not empty (a
        clamp ``max(min(y, h - 1), 0)``) but not proven inside it; else None. The flat index's bounds check
        would test the whole index at every access (it cannot tell ``h >= 1`` from the buffer's size
        ``h * w``); the test of the dimension is the same for the whole launch."""
        if isinstance(dim, int) or at.op is Ops.CONST:
            return None
        order = {u: k for k, u in enumerate((at < dim).toposort())}
        return None if index_in_bounds(at, dim, self.gate, order) else self._not_empty_suffices(at, dim, order)

    def _not_empty_suffices(self, at: UOp, size: UOp, order: dict[UOp, int]) -> UOp | None:
        """``0 < size`` where index ``at`` is proven inside a symbolic dimension of ``size`` wherever it is not
        empty (a clamp ``max(min(i, n - 1), 0)``), a dimension of size 0 having no index; then the test is
        the same at every turn. None where it is not."""
        not_empty = UOp.index_const(0).lt(size)
        gate = not_empty if self.gate is None else self.gate & not_empty
        return not_empty if size.op is not Ops.CONST and index_in_bounds(at, size, gate, order) else None

    def running(self, *parts: UOp) -> list[UOp]:
        """The ranges of the loops around an effect that its ``parts`` do not use: it names them, so that it
        runs once per turn of each all the same. A memory state's loops do not count: the state may go
        (``unstated``)."""
        used: set[UOp] = set()
        stack = list(parts)
        while stack:
            u = stack.pop()
            if u not in used:
                used.add(u)
                stack.extend(u.src[:1] if is_state(u) else u.src)
        return [loop.range for loop in self.loops if loop.range not in used]

    def store(self, array: ArrayValue, index: tuple[Any, ...], value: Any) -> None:
        value = self.cast(self.fitting(self.settable(value, array.dtype), array.dtype), array.dtype)
        target = self.element(array, index)
        self.wrote(array.buffer.param, self.k.store(target, value, *self.running(target, value)))

    # ---- the registers of carried locals -----------------------------------------------------------------

    def cell(self, key: tuple[Any, ...], dtype: DType) -> UOp:
        """A carried local's register (``UOp.register``): one element that each work item of the enclosing
        parallel loops has a copy of, read
        and written at index 0 through its memory states as a buffer is. One per ``key`` (the loop's place in
        the source and the local's name): stating a loop again reuses it."""
        known = self.cell_of.get((*key, dtype))
        if known is None:
            items = [loop.range for loop in self.loops if loop.kind is AxisKind.GLOBAL]
            known = self.cell_of[(*key, dtype)] = UOp.register(len(self.cell_of), self.platform.storage(dtype), *items)
        return known

    def cell_store(self, register: UOp, value: Any) -> None:
        """Store a carried local's value of this turn into its register. Where the value is the register's
        own unless conditions hold (an ``if`` that assigns the local: ``where(c, new, held)``), the store is
        gated by them instead and stores ``new``: the turns that leave the local as it is then skip the
        work of computing it, and an escape test (Mandelbrot's) costs no more after the escape. Only a
        condition that reads no array moves into the gate: a gate's conditions are all computed where the
        store is, and a read in one may be safe only where an outer condition holds."""
        value = self.cast(value, pointee(register))
        held, gate = self.cell_load(register), self.gate
        while isinstance(value, UOp) and value.op is Ops.WHERE and held in value.src[1:] and \
                not any(u.op is Ops.PARAM for u in value.src[0].toposort()):
            kept = value.src[1] is held
            condition = value.src[0].ne(True) if kept else value.src[0]
            gate = condition if gate is None else gate & condition
            value = value.src[2] if kept else value.src[1]
        if value is held:
            return
        target = self.memory(register).index(UOp.index_const(0), gate)
        self.wrote(register, self.k.store(target, value, *self.running(target, value)))

    def cell_load(self, register: UOp) -> UOp:
        return self.memory(register).index(UOp.index_const(0)).load()


# ---- the final kernel -----------------------------------------------------------------------------------

def unstated(sink: UOp, stated: dict[UOp, dict[UOp, int]]) -> UOp:
    """``sink`` without the memory states that change nothing, and without the gates of the loads that lose
    them. A state holds a read at its statement; the builder's rule reads where the value is used, after the
    effects before that. The two read the same wherever no effect on the buffer comes between a read and
    the statements that use it, which is so of every buffer the kernel reads but never writes, or writes
    but never reads, and most that it updates in place (``x[i] = x[i] * 2``; a scan's ``out[r, c - 1]``):
    their kernels are the builder's, and lower as its do. A gate keeps a held read (perhaps computed ahead
    of its branch) from reading where the branch is not taken; a read where its value is used needs none."""
    changed = {memory_of(u.src[0].src[0]) for e in sink.src if e.op in STATEMENTS for u in e.toposort()
               if u.op is Ops.LOAD and is_state(u.src[0].src[0]) and _between(e, u.src[0].src[0], stated[e])}
    changed |= _read_through_two_states(sink)
    sink = substitute(sink, {u: u.src[0] for u in sink.toposort() if is_state(u) and u.src[0] not in changed})
    return graph_rewrite(sink, _UNGATED, name="ungated reads")


_UNGATED = PatternMatcher([
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(UPat(Ops.PARAM, name="buffer"), UPat(name="at"), UPat()),
                              name="index"),), name="load"),
     lambda load, index, buffer, at: load.replace(src=(index.replace(src=(buffer, at)),)))])
"""A read of a buffer without its gate, rewritten from its sources up: a gated read whose index holds another
(the end of a loop read under an ``if`` and the reads in its turns) is rebuilt over that one's ungated form."""


def _read_through_two_states(sink: UOp) -> set[UOp]:
    """The buffers ``sink`` reads at one element through two states. Without their states the two reads would
    be one node, which a backend computes once, for every statement that uses it, though an effect on the
    buffer comes between them (``out[0, i]`` read before a loop whose turns update it, and in those turns:
    every turn read the value from before the loop). A register's reads are each computed where its statement
    runs (the linearizer orders them by the register's stores), as a local's are."""
    first: dict[tuple[UOp, ...], UOp] = {}
    twice: set[UOp] = set()
    for u in sink.toposort():
        if u.op is Ops.LOAD and is_state(state := u.src[0].src[0]) and state.src[0].op is Ops.PARAM \
                and first.setdefault((state.src[0], u.src[0].src[1], *u.src[1:]), state) is not state:
            twice.add(state.src[0])
    return twice


def _between(effect: UOp, state: UOp, stated: dict[UOp, int]) -> bool:
    """Whether an effect on the buffer of memory ``state`` may come between a read through it and ``effect``,
    which uses the read: one stated in between, or one in a loop around ``effect`` that the read is outside
    of (read where it is used, in every turn, it would see the turns before)."""
    loops = {u for u in effect.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.LOOP}
    return stated.get(state.src[0], 0) != state.arg or not loops <= set(state.src[1:])


__all__ = ["Memory", "unstated"]
