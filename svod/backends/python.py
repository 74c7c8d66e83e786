"""The PYTHON reference device: interprets the kernel AST itself, before any lowering.

It is the definition of what a kernel means, and shares no lowering pass, no op implementation and no rule
for which loops a value runs in with the backends it checks: every op is spelled here again, with numpy, in
C semantics as svod defines them, and the ranges each node depends on are found here again (not with
``svod.codegen.ranges``). What it shares are the checks every kernel meets before lowering (``validate``,
``check_races``, on the kernel normalised as the backends check it: ``_as_checked``), so it refuses what every
backend refuses, and ``unbind``, for the fixed values it reports.

- A kernel's work items are the combinations of its GLOBAL ranges. They are independent (the race checks
  make sure of it), so the interpreter runs all of them at once: a value is a numpy array over the
  parallel ranges it depends on. A register (``DEFINE_REG``) is an element per work item.
- Within a work item, effects (STORE, ATOMIC) happen in SINK order, each over the LOOP ranges it depends
  on, in order, one iteration at a time. Effects next to each other in the SINK share the outer loops
  they have in common, as in the Python loops ``for l: (A; B)``: each turn runs A, then B. A value read
  without a memory state is computed after the effects stated before its use (and after those of earlier
  turns). A load through a memory state (``UOp.state``), and a reduction of such loads, is held: it is
  computed at the latest before the first effect on its buffer numbered at least its version, and that
  value is the one every later use sees. A REDUCE folds its
  ranges in order, from the op's identity; a float32 or float64 sum whose value is a product adds each
  product with one rounding (a fused multiply-add).
- A sequential loop with an early exit (``EXIT``, stated after the loop's effects) runs turn after turn for the
  work items still in it: after each turn, those for which the exit's condition holds leave it. A loop without
  a bound (a ``while``) also ends, after the turn, once any access of the kernel has failed its bounds (the
  kernel raises then; a condition on the value a failed read gave could hold for ever).
- ``where`` evaluates each branch only where it is chosen, so an access in an unchosen branch does not
  happen. An access's gate is tested condition by condition (an AND of them, outermost first), each where
  those before it hold, and its index only where the gate holds: ``if j < n: if x[j] > 0: ...`` reads ``x[j]``
  only where ``j < n``, as the statement's code does. An access outside its buffer does not happen either: a
  load gives 0, a store is skipped, and the kernel raises ``IndexOutOfBoundsError`` when it ends.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.backends.base import Host, Opened, Pair
from svod.codegen.lower import anchor_ranges, drop_empty_ranges
from svod.codegen.requirements import record_requirements
from svod.codegen.safety import check_races, unbind
from svod.device import CompiledSpec, CompilerBase, DeviceCaps, ProgramBase, ProgramSpec, derive_metadata, entry_symbol
from svod.dtype import DeviceSpec, DType, PtrDType, dtypes
from svod.errors import GraphError, IndexOutOfBoundsError
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, simplify
from svod.ir.ops import STATEMENTS
from svod.ir.uop import is_unbounded, memory_of, pointee
from svod.ir.validate import kernel_label, validate

Array = np.ndarray


def _as_checked(ast: UOp) -> UOp:
    """``ast`` with the steps of ``svod.codegen.pipeline.FRONT`` before the race check that change what it
    reads: without effects in ranges that never turn, each effect anchored to the ranges it was written in,
    simplified (not split into parts, no loop made parallel: there the reference may still refuse more, never
    less). As written, the check could not tell that a running sum's ``out[r, max(c - 1, 0)]`` over a row of
    variable length is the work item's own element, and the reference refused a kernel every backend ran.
    The interpreter runs ``ast`` itself."""
    dropped = drop_empty_ranges(ast)
    return simplify(anchor_ranges(ast if dropped is None else dropped))


class PythonRenderer:
    """The "source" of a PYTHON kernel is a listing of its AST; nothing is lowered."""

    cache_key = "python-reference-ast-1"

    def __init__(self) -> None:
        self.device = DeviceSpec.parse("PYTHON")

    def decompositor(self) -> PatternMatcher | None:
        return None

    def parts(self, ast: UOp) -> tuple[UOp, ...]:
        return (ast,)

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        label = kernel_label(ast)
        ast, requirements = record_requirements(ast)  # the interpreter runs their atomic updates
        validate(ast)
        check_races(_as_checked(ast), label)
        fixed = unbind(ast, label)[1]
        topo = ast.toposort()
        position = {u: i for i, u in enumerate(topo)}
        listing = [f"# kernel {label}"] + [
            f"%{i} = {u.op.name} {u.dtype!r} [{', '.join(f'%{position[s]}' for s in u.src)}] {u.arg!r}"
            for i, u in enumerate(topo)]
        name = name or label
        metadata = dataclasses.replace(derive_metadata(ast), name=name, fixed=tuple(sorted(fixed.items())),
                                       entry=entry_symbol(name, ast))
        if requirements is not None:
            metadata = dataclasses.replace(metadata, requirement_slot=int(requirements.buffer.arg),
                                           requirements=requirements.messages)
        return UOp.program(ast, UOp.device("PYTHON"), UOp.linear(), UOp.source("\n".join(listing) + "\n"),
                           metadata=metadata)

    def render(self, ast: UOp, name: str | None = None) -> ProgramSpec:
        return ProgramSpec.of(self.program(ast, name))


class PythonCompiler(CompilerBase):
    cache_key = "python-reference-ast-1"

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        return CompiledSpec.from_spec(spec)


class PythonProgram(ProgramBase):
    """Runs the kernel AST ``compiled.ast`` on raw host addresses, its variables in the order of the PROGRAM's
    metadata."""

    def __init__(self, compiled: CompiledSpec) -> None:
        self.name = compiled.name
        self.compiled = compiled

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        variables = dict(zip(self.compiled.var_names, vals, strict=True))
        _Run(self.compiled.ast, self.name, buffers, variables).run()


class _Frame:
    """Values of the ranges bound by one loop iteration, the work items it runs for (its mask), and the
    values computed in it."""

    __slots__ = ("cache", "homes", "mask", "parent", "values")

    def __init__(self, parent: _Frame | None, values: dict[UOp, Array], mask: int) -> None:
        self.parent = parent
        self.values = values
        self.mask = mask
        self.cache: dict[tuple[UOp, int, tuple[int, ...]], Array] = {}
        self.homes: dict[UOp, _Frame] = {}
        """``_Run.home`` of each node asked from this frame."""


class _Run:
    def __init__(self, ast: UOp, name: str, addresses: Sequence[Any], variables: dict[str, int]) -> None:
        self.ast = ast
        self.name = name
        self.variables = variables
        self.topo = ast.toposort()
        self.deps = _range_dependencies(self.topo)
        self.reads = _buffers_read(self.topo)
        self.writes = {_slot(u): 0 for u in self.topo if u.op in (Ops.PARAM, Ops.DEFINE_REG)}
        """How many effects have written each buffer: a value read from memory without a state is cached
        with these counts."""
        self.ends: dict[UOp, int] = {}
        """The end of each GLOBAL range: an effect happens once per work item of those it depends on (an
        atomic update whose index and value are the same in all of them is made by each)."""
        self.held = _held_reads(self.topo, self.deps)
        self.held_nodes = {node for reads in self.held.values() for _, node in reads}
        """Per buffer slot, the loads and reductions that read it through a memory state, with the state's
        version, lowest first."""
        effects = [e for e in ast.src if e.op in STATEMENTS]
        self.position = {e: i for i, e in enumerate(effects)}
        self.last_use = {u: i for i, e in enumerate(effects) for u in e.toposort() if u in self.held_nodes}
        """For each held value, the position of the last effect that uses it."""
        self.failures: list[tuple[int, int, int]] = []
        self.leaving: dict[UOp, Array] = {}
        """Per loop with an exit, the work items that leave it after the current turn."""
        self.masks: dict[int, Array] = {}
        self.mask_ids: dict[tuple[tuple[int, ...], bytes], int] = {}
        self.memory = {u.arg: self._memory(u, addresses) for u in self.topo if u.op is Ops.PARAM}
        self.item: Array = np.zeros((), np.int64)
        """Each work item's number, in the order of its parallel ranges: its element of a register's memory
        (``run`` sets it)."""

    # ---- memory ----------------------------------------------------------------------------------------

    def _memory(self, param: UOp, addresses: Sequence[Any]) -> Array:
        assert isinstance(param.dtype, PtrDType)
        dtype = _numpy(param.dtype.base)
        size = int(self.scalar(param.src[0])) if param.src else param.dtype.size
        if size <= 0:
            return np.empty(0, dtype)
        raw = (ctypes.c_char * (size * dtype.itemsize)).from_address(addresses[param.arg])
        return np.frombuffer(memoryview(raw), dtype=dtype)

    def scalar(self, expr: UOp) -> int:
        """A value of variables only (a size, a GLOBAL range's end)."""
        everyone = self.mask_id(np.asarray(True))
        return int(self.evaluate(expr, _Frame(None, {}, everyone), everyone))

    # ---- driving ---------------------------------------------------------------------------------------

    def run(self) -> None:
        parallel = sorted((u for u in self.topo if u.op is Ops.RANGE and u.arg[1] is AxisKind.GLOBAL),
                          key=lambda r: (r.arg[0], r.key))
        ends = [max(self.scalar(r.src[0]), 0) for r in parallel]
        shape = [1] * len(parallel)
        values = {}
        self.ends = dict(zip(parallel, ends, strict=True))
        for k, (r, end) in enumerate(zip(parallel, ends, strict=True)):
            axis_shape = list(shape)
            axis_shape[k] = end
            values[r] = np.arange(end, dtype=np.int64).reshape(axis_shape)
        for r, end in zip(parallel, ends, strict=True):
            self.item = self.item * end + values[r]
        registers = [u for u in self.topo if u.op is Ops.DEFINE_REG]
        self.memory.update({_slot(u): np.zeros(math.prod(ends), _numpy(pointee(u))) for u in registers})
        empty = {r for r, end in zip(parallel, ends, strict=True) if end == 0}
        effects = [e for e in self.ast.src if e.op in STATEMENTS and not empty & self.deps[e]]
        everyone = self.mask_id(np.asarray(True))
        with np.errstate(all="ignore"):
            self.block(_program(effects, self.deps), _Frame(None, values, everyone), everyone)
        if self.failures:
            slot, size, index = min(self.failures)
            raise IndexOutOfBoundsError(kernel=self.name, slot=slot, size=size, index=index)

    def block(self, items: list[_Loop | UOp], frame: _Frame, mask: int) -> None:
        """Run ``items`` (effects and loops around effects) in order."""
        for item in items:
            if isinstance(item, UOp) and item.op is Ops.EXIT:
                self.exit(item, frame, mask)
            elif isinstance(item, UOp):
                self.effect(item, frame, mask)
            else:
                self.loop(item, frame, mask)

    def loop(self, loop: _Loop, frame: _Frame, mask: int) -> None:
        """The turns of ``loop``, each for the work items still in it: inside the range's end, and not left
        through its exit after an earlier turn."""
        r = loop.range
        end = self.evaluate(r.src[0], frame, mask)
        running, turns, k = mask, int(np.max(end, initial=0)), 0
        while k < turns:
            within = self.narrowed(running, k < end)
            if not self.masks[within].any():
                break
            self.block(loop.body, _Frame(frame, {r: np.asarray(k, np.int64)}, within), within)
            leaving = self.leaving.pop(r, None)
            if leaving is not None and np.any(leaving):
                running = self.mask_id(self.masks[running] & ~leaving)
            k += 1

    def exit(self, exit_: UOp, frame: _Frame, mask: int) -> None:
        """After this turn, the work items of ``mask`` where the exit's condition holds leave its loop; from a
        loop without a bound, all of them once an access has failed."""
        r = exit_.src[0]
        if is_unbounded(r) and self.failures:
            self.leaving[r] = self.masks[mask]
            return
        self.leaving[r] = self.masks[mask] & self.evaluate(exit_.src[1], frame, mask)

    def mask_id(self, mask: Array) -> int:
        """The id of the work items ``mask`` selects: one id per distinct selection, so a value computed
        under equal masks is computed once (a chain of ``where``s that test one condition over and over
        selects the same items at every depth, and stays linear)."""
        selected = np.asarray(mask, dtype=bool)
        content = (selected.shape, selected.tobytes())
        key = self.mask_ids.get(content)
        if key is None:
            key = self.mask_ids[content] = len(self.masks)
            self.masks[key] = selected
        return key

    def narrowed(self, mask: int, condition: Array) -> int:
        """``mask`` where ``condition`` also holds; the same mask (so cached values stay valid) when it
        holds everywhere."""
        return mask if np.all(condition) else self.mask_id(self.masks[mask] & condition)

    # ---- effects ---------------------------------------------------------------------------------------

    def effect(self, effect: UOp, frame: _Frame, mask: int) -> None:
        target = effect.src[0]
        slot = _slot(memory_of(target.src[0]))
        buffer = self.memory[slot]
        self.hold(effect, slot, target.src[0].arg if target.src[0].op is Ops.AFTER else None, frame)
        active = self.gated(target, frame, mask)
        index = self.element(target, frame, self.mask_id(active))
        value = self.evaluate(effect.src[1], frame, self.mask_id(active))
        named = [self.evaluate(r, frame, mask) for r in effect.src[2:]]  # ranges it runs over, used or not
        items = np.zeros([self.ends[r] if r in self.deps[effect] else 1 for r in self.ends], dtype=bool)
        index, value, active = (np.ravel(a) for a in np.broadcast_arrays(index, value, active, items, *named)[:3])
        positions = self.checked(slot, buffer, index, active)
        if effect.op is Ops.STORE:
            buffer[index[positions]] = value[positions]
        else:
            _atomic(effect.arg, buffer, index[positions], value[positions])
        self.writes[slot] += 1

    def gated(self, index: UOp, frame: _Frame, mask: int) -> Array:
        """The work items of ``mask`` where access ``index`` happens: where its gate holds, a conjunction
        tested condition by condition (the ifs around a statement, outermost first), each only where those
        before it hold, as the statement's own code tests them."""
        active = self.masks[mask]
        if len(index.src) == 3:
            for condition in _conjuncts(index.src[2]):
                active = active & self.evaluate(condition, frame, self.mask_id(active))
        return active

    def element(self, index: UOp, frame: _Frame, mask: int) -> Array:
        """The element ``index`` accesses in its memory: a buffer's at its offset, a register's the work
        item's own."""
        offset = self.evaluate(index.src[1], frame, mask)
        return self.item + offset if memory_of(index.src[0]).op is Ops.DEFINE_REG else offset

    def hold(self, effect: UOp, slot: int, version: int | None, frame: _Frame) -> None:
        """Before ``effect`` writes buffer ``slot`` as its state ``version``: read every held value of that
        buffer (a load or reduction through a state of a version up to this one) that this or a later effect
        uses and this frame can compute, so that later uses see what the statement read."""
        if version is None:
            return
        for read_version, node in self.held.get(slot, ()):
            if read_version <= version and self.last_use.get(node, -1) >= self.position[effect] and \
                    all(self.bound(r, frame) for r in self.deps[node]):
                self.evaluate(node, frame, frame.mask)

    def bound(self, r: UOp, frame: _Frame | None) -> bool:
        while frame is not None:
            if r in frame.values:
                return True
            frame = frame.parent
        return False

    def checked(self, slot: int, buffer: Array, index: Array, active: Array) -> Array:
        """Where ``active`` and inside ``buffer``; the active ones outside are recorded as failures."""
        inside = (index >= 0) & (index < len(buffer))
        outside = active & ~inside
        if outside.any():
            self.failures.append((slot, len(buffer), int(index[outside][0])))
        return active & inside

    # ---- values ----------------------------------------------------------------------------------------

    def evaluate(self, node: UOp, frame: _Frame, mask: int) -> Array:
        """The value of ``node`` for every work item and the current loop iterations, where ``mask``.

        Sources are computed first, without recursion, so a long chain of ops (of ``where``s too) is no
        deeper than one op; only a reduction evaluates what is below it in loops of its own.
        """
        home, key = self.home(node, frame), self.key(node, mask)
        found = home.cache.get(key)
        if found is not None:  # (a value computed already: most reads of a source)
            return found
        pending = [(node, mask)]
        while pending:
            u, m = pending[-1]
            at = self.home(u, frame)
            if u in self.last_use:  # held: read for every work item of its frame, whichever branch asks first
                m = at.mask
            computed = self.key(u, m)  # (no write happens while a value is computed: the key stays)
            if computed in at.cache:
                pending.pop()
                continue
            missing = [(s, sm) for s, sm in self.sources(u, frame, m)
                       if self.key(s, sm) not in self.home(s, frame).cache]
            if missing:
                pending.extend(missing)
                continue
            pending.pop()
            at.cache[computed] = self.compute(u, frame, m)
        return home.cache[key]

    def sources(self, node: UOp, frame: _Frame, mask: int) -> list[tuple[UOp, int]]:
        """What ``compute`` reads of ``node``'s sources, each with the mask it is read under: a ``where``'s
        condition first, then each branch where it is chosen; a load's index and gate (not the buffer); a
        reduction's nothing (it folds its body itself)."""
        if node.op in (Ops.REDUCE, Ops.RANGE):
            return []
        if node.op is Ops.LOAD:
            return []  # its gate, then its index where the gate holds (``load``)
        if node.op is Ops.WHERE:
            condition = self.home(node.src[0], frame).cache.get(self.key(node.src[0], mask))
            if condition is None:
                return [(node.src[0], mask)]
            chosen, other = self.branches(mask, condition)
            return [(node.src[1], chosen), (node.src[2], other)]
        return [(s, mask) for s in node.src]

    def branches(self, mask: int, condition: Array) -> tuple[int, int]:
        """The masks of a ``where``'s two branches: each is evaluated only where it is chosen."""
        return self.mask_id(self.masks[mask] & condition), self.mask_id(self.masks[mask] & ~condition)

    def key(self, node: UOp, mask: int) -> tuple[UOp, int, tuple[int, ...]]:
        """What a computed value is cached under: a value read from memory without a state is computed again
        once an effect has written that memory; a held value once per frame, for all its work items."""
        if node in self.last_use:
            return node, -1, ()
        reads = self.reads[node]
        return node, mask, tuple(map(self.writes.__getitem__, reads)) if reads else ()

    def home(self, node: UOp, frame: _Frame) -> _Frame:
        """The innermost frame among those binding the ranges ``node`` depends on (its value is the same in
        every inner iteration)."""
        home = frame.homes.get(node)
        if home is None:
            home = frame
            deps = self.deps[node]
            while home.parent is not None and deps.isdisjoint(home.values):
                home = home.parent
            frame.homes[node] = home
        return home

    def compute(self, node: UOp, frame: _Frame, mask: int) -> Array:
        op = node.op
        if op is Ops.CONST:
            return np.asarray(node.arg, dtype=_numpy(node.dtype))
        if op is Ops.DEFINE_VAR:
            return np.asarray(self.variables[node.arg[0]], dtype=_numpy(node.dtype))
        if op is Ops.BIND:
            return np.asarray(node.src[1].arg, dtype=_numpy(node.dtype))
        if op is Ops.RANGE:
            f: _Frame | None = frame
            while f is not None:
                if node in f.values:
                    return f.values[node]
                f = f.parent
            raise GraphError(f"range on axis {node.arg[0]} is used outside its loop", kernel=self.name,
                             stage="execute", value=node.arg)
        if op is Ops.WHERE:
            cond = self.evaluate(node.src[0], frame, mask)
            chosen, other = self.branches(mask, cond)
            return np.where(cond, self.evaluate(node.src[1], frame, chosen), self.evaluate(node.src[2], frame, other))
        if op is Ops.LOAD:
            return self.load(node.src[0], frame, mask)
        if op is Ops.REDUCE:
            return self.reduce(node, frame, mask)
        args = [self.evaluate(s, frame, mask) for s in node.src]
        if op is Ops.CAST:
            return _cast(args[0], node.src[0].dtype, node.dtype)
        if op is Ops.BITCAST:
            return np.asarray(args[0]).view(_numpy(node.dtype))
        return _alu(op, node.dtype, node.src[-1].dtype, args)

    def load(self, index: UOp, frame: _Frame, mask: int) -> Array:
        slot = _slot(memory_of(index.src[0]))
        buffer = self.memory[slot]
        active = self.gated(index, frame, mask)
        position = self.element(index, frame, self.mask_id(active))
        position, active = np.broadcast_arrays(position, active)
        ok = self.checked(slot, buffer, np.ravel(position), np.ravel(active)).reshape(position.shape)
        safe = np.where(ok, position, 0)
        values = buffer[safe] if len(buffer) else np.zeros(safe.shape, buffer.dtype)
        return np.where(ok, values, np.zeros((), buffer.dtype))

    def reduce(self, node: UOp, frame: _Frame, mask: int) -> Array:
        value, ranges, op = node.src[0], _loop_order(frozenset(node.src[1:])), node.arg
        acc = np.asarray(_identity(op, node.dtype), dtype=_numpy(node.dtype))

        fused = op is Ops.ADD and node.dtype in (dtypes.float32, dtypes.float64) and value.op is Ops.MUL

        def fold(inner: _Frame, depth: int, active: int) -> None:
            nonlocal acc
            if depth == len(ranges) and fused:
                a, b = (self.evaluate(s, inner, active) for s in value.src)
                acc = np.where(self.masks[active], _alu(Ops.MULACC, node.dtype, node.dtype, [a, b, acc]), acc)
                return
            if depth == len(ranges):
                term = self.evaluate(value, inner, active)
                acc = np.where(self.masks[active], _alu(op, node.dtype, node.dtype, [acc, term]), acc)
                return
            r = ranges[depth]
            end = self.evaluate(r.src[0], inner, active)
            for k in range(int(np.max(end, initial=0))):
                within = self.narrowed(active, k < end)
                fold(_Frame(inner, {r: np.asarray(k, np.int64)}, within), depth + 1, within)

        fold(frame, 0, mask)
        return acc


# ---- op semantics, on numpy arrays --------------------------------------------------------------------------

def _numpy(dtype: DType) -> np.dtype:
    return np.dtype(np.int64) if dtype == dtypes.index else dtype.numpy


def _identity(op: Ops, dtype: DType) -> float | int:
    if op is Ops.ADD:
        return -0.0 if dtype.is_float else 0  # exact: -0.0 + x is x
    if op is Ops.MUL:
        return 1
    if dtype.is_float:
        return float("nan")  # maximumNumber and minimumNumber ignore it
    return int(dtype.min) if op is Ops.MAX else int(dtype.max)


def _conjuncts(gate: UOp) -> list[UOp]:
    """The conditions whose conjunction ``gate`` is (its ANDs of bools taken apart), left to right."""
    if gate.op is Ops.AND and gate.dtype == dtypes.bool:
        return [c for s in gate.src for c in _conjuncts(s)]
    return [gate]


def _range_dependencies(topo: Sequence[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For every node, the ranges it depends on that no REDUCE between them has closed: which loops and work
    items each effect and value runs over. It means what ``svod.codegen.ranges.live_ranges`` means, and is
    deliberately not shared with it: the linearizer places loops by ``live_ranges``, and a reference that
    used it would agree with a wrong placement instead of catching it."""
    deps: dict[UOp, frozenset[UOp]] = {}
    for node in topo:
        found = frozenset().union(*(deps[s] for s in node.src)) if node.src else frozenset()
        if node.op is Ops.RANGE:
            found |= {node}
        elif node.op is Ops.REDUCE:
            found -= set(node.src[1:])
        deps[node] = found
    return deps


def _slot(memory: UOp) -> int:
    """The key of a buffer's (PARAM's) memory, its slot; or of a register's, a negative number of its own."""
    return memory.arg if memory.op is Ops.PARAM else -1 - memory.arg


def _buffers_read(topo: Sequence[UOp]) -> dict[UOp, tuple[int, ...]]:
    """For every node, the slots of the buffers loaded below it without a memory state, in slot order."""
    reads: dict[UOp, tuple[int, ...]] = {}
    for node in topo:
        slots = {slot for s in node.src for slot in reads[s]}
        if node.op is Ops.LOAD and node.src[0].src[0].op in (Ops.PARAM, Ops.DEFINE_REG):
            slots.add(_slot(node.src[0].src[0]))
        reads[node] = tuple(sorted(slots))
    return reads


def _held_reads(topo: Sequence[UOp], deps: Mapping[UOp, frozenset[UOp]]) -> dict[int, list[tuple[int, UOp]]]:
    """Per buffer slot, the loads and reductions whose own statement reads it through a memory state (an AFTER
    whose arg is its version), each with that version, lowest first: a load's own state, a reduction's loads
    that depend on a range it folds. (What either computes from reads of earlier statements, an index, a gate,
    is held on its own.)"""
    held: dict[int, list[tuple[int, UOp]]] = {}
    for node in topo:
        own: dict[int, int] = {}
        if node.op is Ops.LOAD and node.src[0].src[0].op is Ops.AFTER:
            state = node.src[0].src[0]
            own[_slot(state.src[0])] = state.arg
        elif node.op is Ops.REDUCE:
            for load in node.src[0].toposort():
                if load.op is Ops.LOAD and load.src[0].src[0].op is Ops.AFTER and not deps[load] <= deps[node]:
                    state = load.src[0].src[0]
                    own[_slot(state.src[0])] = max(state.arg, own.get(_slot(state.src[0]), state.arg))
        for slot, version in own.items():
            held.setdefault(slot, []).append((version, node))
    for reads in held.values():
        reads.sort(key=lambda read: read[0])
    return held


@dataclass
class _Loop:
    """A sequential loop of a work item's program: ``body`` runs once per value of ``range``, in order."""

    range: UOp
    body: list[_Loop | UOp] = field(default_factory=list)


def _program(effects: Sequence[UOp], deps: Mapping[UOp, frozenset[UOp]]) -> list[_Loop | UOp]:
    """A work item's program: ``effects`` in order, each inside loops over the LOOP ranges it depends on,
    outermost first. An effect shares the loops still open from the effect before it as far as both
    loop over the same ranges in the same order; the others close and new ones open."""
    program: list[_Loop | UOp] = []
    open_loops: list[_Loop] = []
    for effect in effects:
        ranges = [r for r in _loop_order(deps[effect]) if r.arg[1] is not AxisKind.GLOBAL]
        shared = 0
        while shared < min(len(ranges), len(open_loops)) and open_loops[shared].range is ranges[shared]:
            shared += 1
        del open_loops[shared:]
        for r in ranges[shared:]:
            loop = _Loop(r)
            (open_loops[-1].body if open_loops else program).append(loop)
            open_loops.append(loop)
        (open_loops[-1].body if open_loops else program).append(effect)
    return program


def _loop_order(ranges: frozenset[UOp]) -> list[UOp]:
    """Ranges in nesting order: by axis, REDUCE inside, and a range whose end uses another inside it.
    Deliberately not ``svod.codegen.ranges.nested``, which the linearizer nests loops by: the reference keeps
    its own, so the two check each other."""
    pending = sorted(ranges, key=lambda r: (r.arg[1] is AxisKind.REDUCE, r.arg[0], r.key))
    placed: list[UOp] = []
    while pending:
        ready = next(r for r in pending if not any(o in r.src[0].toposort() for o in pending if o is not r))
        placed.append(ready)
        pending.remove(ready)
    return placed


def _wrap_negate(a: Array) -> Array:
    return np.negative(a) if a.dtype.kind in "iu" else -a


def _trunc_divide(a: Array, b: Array, dtype: np.dtype) -> tuple[Array, Array]:
    """C's ``a / b`` and ``a % b`` on integers, with svod's rules: a zero divisor divides by one (remainder
    0) and ``MIN / -1`` wraps."""
    zero, minus_one = b == 0, (b == -1) if dtype.kind == "i" else np.zeros_like(b, dtype=bool)
    divisor = np.where(zero | minus_one, np.ones((), dtype), b)
    floor = a // divisor
    remainder = a - floor * divisor
    adjust = (remainder != 0) & ((a < 0) != (divisor < 0))
    quotient = np.where(adjust, floor + np.ones((), dtype), floor).astype(dtype)
    quotient = np.where(minus_one, _wrap_negate(np.asarray(a)), quotient).astype(dtype)
    modulo = np.where(zero | minus_one, np.zeros((), dtype), a - quotient * divisor).astype(dtype)
    return quotient, modulo


def _maximum_number(a: Array, b: Array, biggest: bool) -> Array:
    picked = np.fmax(a, b) if biggest else np.fmin(a, b)
    both_zero = (a == 0) & (b == 0)
    signs = (np.signbit(a) & np.signbit(b)) if biggest else (np.signbit(a) | np.signbit(b))
    zero = np.where(signs, -np.zeros((), picked.dtype), np.zeros((), picked.dtype))
    return np.where(both_zero, zero, picked)


def _in_float64(fn: Callable[[Array], Array]) -> Callable[[Array, np.dtype], Array]:
    def apply(a: Array, dtype: np.dtype) -> Array:
        return fn(np.asarray(a, dtype=np.float64)).astype(dtype) if dtype != np.float64 else fn(a)
    return apply


def _exp2(a: Array) -> Array:
    return np.exp2(a)


def _log2(a: Array) -> Array:
    return np.log2(a)


def _sin(a: Array) -> Array:
    return np.sin(a)


_erf = np.vectorize(math.erf, otypes=[np.float64])
"""numpy has no erf; the Python library's, element by element (the reference favours plainness)."""

_MATH: dict[Ops, Callable[[Array, np.dtype], Array]] = {
    Ops.EXP2: _in_float64(_exp2), Ops.LOG2: _in_float64(_log2), Ops.SIN: _in_float64(_sin),
    Ops.SQRT: _in_float64(np.sqrt), Ops.EXP: _in_float64(np.exp), Ops.LOG: _in_float64(np.log),
    Ops.COS: _in_float64(np.cos), Ops.TAN: _in_float64(np.tan), Ops.TANH: _in_float64(np.tanh),
    Ops.ERF: _in_float64(_erf), Ops.FLOOR: _in_float64(np.floor), Ops.CEIL: _in_float64(np.ceil),
    Ops.TRUNC: _in_float64(np.trunc), Ops.RINT: _in_float64(np.rint),
}
_COMPARE: dict[Ops, Callable[[Array, Array], Array]] = {
    Ops.CMPLT: np.less, Ops.CMPLE: np.less_equal, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
}
_ARITHMETIC: dict[Ops, Callable[[Array, Array], Array]] = {
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or,
    Ops.XOR: np.bitwise_xor,
}


def _alu(op: Ops, dtype: DType, operand: DType, args: list[Array]) -> Array:
    out = _numpy(dtype)
    if op in _COMPARE:
        return _COMPARE[op](args[0], args[1])
    a = np.asarray(args[0], dtype=_numpy(operand))
    if op in _MATH:
        return _MATH[op](a, out)
    if op is Ops.RECIPROCAL:
        return (np.ones((), out) / a).astype(out)
    if op is Ops.NEG:
        return _wrap_negate(a).astype(out)
    if op is Ops.ABS:
        return np.abs(a).astype(out)
    b = np.asarray(args[1], dtype=_numpy(operand))
    if op is Ops.MULACC:
        c = np.asarray(args[2], dtype=_numpy(operand))
        if out == np.float32:
            return _fma_float32(a, b, c)
        return np.asarray(np.frompyfunc(_fma_float64, 3, 1)(a, b, c)).astype(out)
    if op in _ARITHMETIC:
        return _ARITHMETIC[op](a, b).astype(out)
    if op is Ops.POW:
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(out)
    if op is Ops.FMOD:  # exact in float64, so exact in any narrower float once rounded back
        return np.fmod(a.astype(np.float64), b.astype(np.float64)).astype(out)
    if op in (Ops.SHL, Ops.SHR):
        return _shift(op, a, b, out)
    if op is Ops.FDIV:
        return (a / b).astype(out)
    if op in (Ops.IDIV, Ops.MOD):
        quotient, modulo = _trunc_divide(a, b, out)
        return quotient if op is Ops.IDIV else modulo
    if op in (Ops.MAX, Ops.MIN):
        if dtype.is_float:
            return _maximum_number(a, b, op is Ops.MAX).astype(out)
        return (np.maximum(a, b) if op is Ops.MAX else np.minimum(a, b)).astype(out)
    raise GraphError(f"the reference has no {op.name} on {dtype!r}", stage="execute", value=op)


def _fma_float32(a: Array, b: Array, c: Array) -> Array:
    """``a * b + c`` rounded once, on float32: the product is exact in float64, and so is the error of adding
    ``c`` to it (Knuth's TwoSum). An inexact sum is rounded to odd in float64 (its last bit set), which makes
    the rounding to float32 that follows correct: float64 carries more than twice float32's bits."""
    with np.errstate(all="ignore"):
        product, addend = a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64)
        total = np.asarray(product + addend)
        virtual = total - product
        error = (product - (total - virtual)) + (addend - virtual)
        to_odd = np.isfinite(total) & (error != 0) & ((total.view(np.int64) & 1) == 0)
        total = np.where(to_odd, np.nextafter(total, np.where(error > 0, np.inf, -np.inf)), total)
        return total.astype(np.float32)


def _fma_float64(a: float, b: float, c: float) -> float:
    """``a * b + c`` rounded once, on float64: the exact value as a ratio of integers (each float's
    denominator a power of two), which Python's integer division rounds correctly."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a * b + c
    if not math.isfinite(c):
        return c
    (an, ad), (bn, bd), (cn, cd) = a.as_integer_ratio(), b.as_integer_ratio(), c.as_integer_ratio()
    numerator = an * bn * cd + cn * ad * bd
    if numerator == 0:
        return a * b + c  # a zero's sign as IEEE gives it: the product is exact here
    try:
        return numerator / (ad * bd * cd)
    except OverflowError:
        return math.inf if numerator > 0 else -math.inf


def _shift(op: Ops, a: Array, amount: Array, out: np.dtype) -> Array:
    """numpy's shifts, with an amount outside the bits shifting everything out (numpy leaves that to C)."""
    bits = out.itemsize * 8
    inside = (amount >= 0) & (amount < bits)
    safe = np.where(inside, amount, 0).astype(out)
    if op is Ops.SHL:
        return np.where(inside, np.left_shift(a, safe), np.zeros((), out)).astype(out)
    spilled = np.where(a < 0, np.asarray(-1).astype(out), np.zeros((), out)) if out.kind == "i" else np.zeros((), out)
    return np.where(inside, np.right_shift(a, safe), spilled).astype(out)


def _cast(a: Array, src: DType, dst: DType) -> Array:
    out = _numpy(dst)
    a = np.asarray(a)
    if dst.kind == "bool":
        return a != 0
    if not (src.is_float and dst.is_int):
        return a.astype(out)
    wide = np.trunc(a.astype(np.float64))
    signed = dst.kind == "int"
    big = wide >= 2.0 ** (dst.bits - signed)
    small = wide < (-(2.0 ** (dst.bits - 1)) if signed else 0.0)
    nan = np.isnan(wide)
    safe = np.where(big | small | nan, 0.0, wide).astype(out)
    return np.where(big, np.asarray(int(dst.max), out), np.where(small, np.asarray(int(dst.min), out), safe))


def _atomic(op: Ops, buffer: Array, index: Array, value: Array) -> None:
    """Apply the updates one after another, in work-item order."""
    if op is Ops.ADD:
        np.add.at(buffer, index, value.astype(buffer.dtype))
        return
    biggest = op is Ops.MAX
    for k, v in zip(index.tolist(), value, strict=True):
        current = buffer[k]
        if buffer.dtype.kind == "f":
            buffer[k] = _maximum_number(np.asarray(current), np.asarray(v), biggest)
        else:
            buffer[k] = max(current, v) if biggest else min(current, v)


# ---- the backend (svod.backends.base) ---------------------------------------------------------------------

def compiler_pair(spec: DeviceSpec, compiler: str, host: Host) -> Pair:
    return PythonRenderer(), PythonCompiler()


def open_device(spec: DeviceSpec, primary: str, host: Host) -> Opened:
    caps = DeviceCaps(host_memory=True, overlaps_on_host=False)
    return Opened(caps, host.allocator, PythonProgram, "reference interpreter of kernel ASTs")


def device_count() -> int:
    return 1
