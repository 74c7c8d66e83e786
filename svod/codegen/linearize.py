"""The linearizer: orders a lowered kernel (a SINK of effects over RANGEs and REDUCEs) into the flat
instruction list a renderer walks, with RANGE/IF ... END blocks. It only orders: what a reduction, a
checked access or a barrier computes was said by passes before it (``svod.codegen.pipeline``), or is said
by passes after it (``accumulators.lower_accumulators``).

It builds a tree of blocks as it goes and flattens it at the end:

- Each effect (STORE, ATOMIC, BARRIER) runs inside a loop for every range it depends on, outermost first.
  Effects next to each other in the SINK share the loops they have in common, outermost first, as the
  Python loops ``for l: (A; B)`` do: within a work item, effects happen in the order the kernel states
  them, per turn of the loops they share. A BARRIER depends on the ranges it names and on no gate, so it
  stands outside every IF and every other loop, where all work items of a group reach it (lowering names
  only ranges whose ends are the same for every work item; ``barriers.check_barriers`` makes sure).
- A load comes after every effect stated before it: once an effect writes a buffer, later loads of it
  (and the values built on them) are emitted again; one that would be the same UOp as a load emitted
  before goes through the buffer ``AFTER`` the effect, so a renderer never reuses the value read before.
  After a BARRIER, loads of local memory are emitted again (other work items wrote it).
- An effect whose target is gated runs inside ``IF (gate)``: in the block it shares with earlier effects,
  or opened inside the loops the gate depends on and around the others it opens.
- An access that carries a record (``checks.check_accesses``: an INDEX whose last source is an IF of a
  condition, the access's gate, and effects) runs the record first: the effects inside ``IF (condition)``,
  placed where the record's sources can be computed; then the access, gated.
- A value is computed once per placement: in the innermost open loop among the ranges it depends on, so
  loop-invariant work is hoisted; never outside an enclosing IF; and a value that depends on a load of
  memory the kernel writes is never hoisted at all.
- A REDUCE is ordered where its result is needed: its register (``DEFINE_REG``) there, then loops of its
  own over its ranges holding its update (``REDUCE(register, body)``), then its result (``AFTER(register,
  update)``) after them; ``accumulators.lower_accumulators`` says what each computes. Reductions over the
  same ranges at the same place share one loop (a sum and a max of one row; a matmul's upcast outputs). A
  reduction nested in another's body opens its loops inside the outer loop, or before it when it does not
  depend on the outer range. A continued sum (``ADD(start, REDUCE)`` marked ``CONTINUED``) is its
  reduction's result, whose register starts from ``start``, computed before the register.

Every decision follows the order of the AST (its toposort and SINK order, range axes, structural keys):
no set or dict of UOps is iterated, so the same kernel gives the same instruction list in every process.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from svod.codegen.ranges import nested
from svod.dtype import dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, UOp
from svod.ir.ops import CONTINUED, EFFECTS, LEAVES, STATEMENTS
from svod.ir.uop import (
    is_state,
    is_unstated_read,
    memory_of,
    state_version,
    stated_reads,
    unknown_below,
)
from svod.ir.validate import kernel_label


@dataclass(eq=False)
class _Block:
    """A loop or guarded block being built. ``cursor`` is where new items go while a child is open (before
    it), so values hoisted into an outer block are computed before the loop that uses them."""

    scope: UOp | None
    key: UOp | None
    """The AST range (or gate) the block stands for."""
    depth: int
    items: list[_Block | UOp] = field(default_factory=list)
    cursor: int | None = None
    updates: list[UOp] = field(default_factory=list)

    def add(self, item: _Block | UOp) -> None:
        if self.cursor is None:
            self.items.append(item)
        else:
            self.items.insert(self.cursor, item)
            self.cursor += 1

    def open(self, child: _Block) -> None:
        if self.cursor is None:
            self.items.append(child)
            self.cursor = len(self.items) - 1
        else:
            self.items.insert(self.cursor, child)

    def close_child(self) -> None:
        assert self.cursor is not None
        self.cursor += 1
        if self.cursor >= len(self.items):
            self.cursor = None


class Scopes:
    """For every node, the ranges it depends on that no REDUCE between them has closed (``UOp.live_ranges``),
    in loop order: ordered once per set of ranges, which the nodes of one loop nest share."""

    def __init__(self) -> None:
        self._ordered: dict[frozenset[UOp], tuple[UOp, ...]] = {}

    def __getitem__(self, node: UOp) -> tuple[UOp, ...]:
        live = node.live_ranges
        ordered = self._ordered.get(live)
        if ordered is None:
            ordered = self._ordered[live] = nested(live)
        return ordered


class _Linearizer:
    def __init__(self, sink: UOp, status: UOp | None = None) -> None:
        self.sink = sink
        self.scopes = Scopes()
        self.effects = [e for e in sink.src if e.op in EFFECTS]
        self.statements = [e for e in sink.src if e.op in STATEMENTS]
        """The effects and the loops' early exits (``EXIT``), in order: what uses a held value."""
        self.positions = {e: i for i, e in reversed(list(enumerate(self.statements)))}
        """Each statement's position among the statements (a node stated twice: its first)."""
        self.written = {memory_of(e.src[0].src[0]) for e in self.effects}
        if status is not None:
            self.written.add(status)  # read by a loop's exit test (``checks.check_accesses``), written by records
        self.gates = {e: _gate(e) for e in self.effects}
        """Each effect's gate that an IF holds (``_gate``), found once: effects ask it of every later one."""
        topo = sink.toposort()
        loaded = [u.src[0].src[0] for u in topo if u.op is Ops.LOAD and not is_state(u.src[0].src[0])]
        self.read_and_written = self.written & {*loaded, *map(memory_of, loaded)}
        """The written memory the kernel also reads without a memory state: only its writes make remembered
        values stale."""
        self.stated: dict[UOp, dict[UOp, int]] = {}
        """For each node, the written memory it reads through memory states, each with the highest version."""
        self.held: dict[UOp, list[tuple[int, UOp]]] = {}
        """For each written memory, the loads and reductions that read it through a state (``held``), with
        that state's version, lowest first."""
        self.last_use: dict[UOp, int] = {}
        """The position of the last effect each of them is computed for."""
        self.find_held()
        runs = Counter(r for e in self.statements for r in self.scopes[e]
                       if r.arg[1] in (AxisKind.LOOP, AxisKind.GLOBAL))
        self.shared_loops = frozenset(r for r, count in runs.items() if count > 1)
        """The loops more than one effect runs in: sequential ones, and a CPU's loops over work items (an IF
        outside them would split them, and a work item's effects would no longer run one after another)."""
        self.root = _Block(None, None, 0)
        self.stack: list[_Block] = [self.root]
        self.bound: dict[UOp, list[_Block]] = {}
        self.memo: dict[tuple[UOp, _Block], UOp] = {}
        params = sorted((u for u in topo if u.op is Ops.PARAM), key=lambda u: u.arg)
        variables = sorted((u for u in topo if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])
        # every buffer and variable of the kernel is an argument, used or not, as its metadata says
        self.leaves: dict[UOp, None] = dict.fromkeys([*params, *variables])
        self.previous: tuple[UOp, ...] = ()
        """The loops of the effect emitted last: the next shares those they have in common, outermost first."""
        self.current: UOp | None = None
        """The effect being emitted, whose reductions (``reductions``) may be computed together."""
        self.emitted: dict[UOp, _Block] = {}
        """Where each emitted value was last placed; one still in scope is not emitted again."""
        self.states: dict[UOp, frozenset[UOp]] = {}
        """The written memory each value was read from (``state``)."""
        self.inner: dict[UOp, frozenset[UOp]] = {}
        self.below: dict[UOp, tuple[UOp, ...]] = {}
        self.early: dict[UOp, list[UOp]] = {}
        self.version: dict[UOp, UOp] = {}
        """The last effect emitted on each written buffer."""
        self.unemitted: dict[UOp, dict[int, None]] = {}
        """The versions of the effects on each memory, through memory states, of which no copy is emitted
        yet (lowering may state one twice: a tile's and the last tile's): a load through a later state
        cannot be emitted before them."""
        for e in self.effects:
            version = state_version(e.src[0])
            if version is not None:
                self.unemitted.setdefault(memory_of(e.src[0].src[0]), {})[version] = None
        self.loads: dict[UOp, list[UOp]] = {}
        """The loads of each memory the kernel reads and writes emitted since its last effect."""
        self.reading: dict[UOp, list[tuple[UOp, _Block]]] = {}
        """The memoised values read from each written memory since its last effect (``state``)."""
        self.stale: set[UOp] = set()
        """Loads emitted before the last effect on their buffer: the same load after it reads again, through
        the buffer ``AFTER`` that effect."""
        self.written_in: dict[UOp, dict[UOp, None]] = {}
        """For each loop, the memory the effects in its turns write."""
        for e in self.effects:
            if e.op is not Ops.BARRIER:
                for r in self.scopes[e]:
                    self.written_in.setdefault(r, {})[memory_of(e.src[0].src[0])] = None
        self.registers = 1 + max((u.arg for u in topo if u.op is Ops.DEFINE_REG), default=-1)
        """The slot of the next reduction's register: after the kernel's own (a carried local's)."""
        self.blocks = 0
        self.looped: set[UOp] = set()
        """The ranges a loop has been opened for."""
        self.starts = {u.src[1]: u.src[0] for u in topo if u.op is Ops.ADD and u.arg == CONTINUED}
        """The value each continued reduction's register starts from (``CONTINUED``)."""

    # ---- blocks ------------------------------------------------------------------------------------------

    def binding(self, r: UOp) -> _Block:
        for block in reversed(self.bound.get(r, [])):
            if block.depth < len(self.stack) and self.stack[block.depth] is block:
                return block
        raise GraphError(f"range on axis {r.arg[0]} is used where no loop over it is open", stage="lower",
                         value=r.arg)

    def open_block(self, scope: UOp, key: UOp | None) -> _Block:
        parent = self.stack[-1]
        block = _Block(scope, key, len(self.stack))
        parent.open(block)
        self.stack.append(block)
        if scope.op is Ops.RANGE and key is not None:
            self.bound.setdefault(key, []).append(block)
        return block

    def close_block(self) -> None:
        block = self.stack.pop()
        self.stack[-1].close_child()
        if block.key is not None and block in self.bound.get(block.key, []):
            self.bound[block.key].remove(block)

    def is_bound(self, r: UOp) -> bool:
        return any(b.depth < len(self.stack) and self.stack[b.depth] is b for b in self.bound.get(r, []))

    def open_loop(self, r: UOp) -> _Block:
        end = self.value(r.src[0])
        self.looped.add(r)
        self.blocks += 1
        return self.open_block(UOp(Ops.RANGE, dtypes.index, (end,), (r.arg[0], r.arg[1], self.blocks)), r)

    def open_if(self, condition: UOp, key: UOp | None) -> _Block:
        self.blocks += 1
        return self.open_block(UOp(Ops.IF, dtypes.void, (self.value(condition),), self.blocks), key)

    @contextmanager
    def at(self, block: _Block) -> Iterator[None]:
        """Emit into ``block`` (an open block), as if the blocks inside it were not open."""
        saved = self.stack
        self.stack = saved[:block.depth + 1]
        try:
            yield
        finally:
            self.stack = saved

    # ---- placement -------------------------------------------------------------------------------------

    def place(self, node: UOp) -> _Block:
        """The block ``node`` is computed in: the innermost among its ranges' loops, not outside an open IF;
        a load of memory this kernel writes goes in the innermost block."""
        if self.reads_written(node):
            return self.stack[-1]
        deepest = self.root
        for r in self.scopes[node]:
            block = self.binding(r)
            if block.depth > deepest.depth:
                deepest = block
        for block in reversed(self.stack):
            if block.depth <= deepest.depth:
                break
            if block.scope is not None and block.scope.op is Ops.IF:
                return block
        return deepest

    def reads_written(self, node: UOp) -> bool:
        """Whether ``node`` depends on a load of memory this kernel writes, read without a memory state: such
        values are computed where they are used (innermost), after the stores before them, never hoisted."""
        return bool(self.state(node))

    # ---- held values ----------------------------------------------------------------------------------

    def stated_reads(self, node: UOp) -> dict[UOp, int]:
        """The written memory ``node`` reads through memory states, each with the highest version read."""
        return stated_reads(node, self.stated, self.written)

    def own_reads(self, u: UOp) -> dict[UOp, int]:
        """The written memory held value ``u``'s own statement reads, each with its version there: a load's
        through its own state; a reduction's through the loads of its loops (those that depend on a range it,
        or one nested in it, folds). What ``u`` computes from reads of earlier statements (an index, a gate, a
        sum stated before) is held on its own, at its own statement's versions."""
        if u.op is Ops.LOAD:
            state = u.src[0].src[0]
            return {state.src[0]: state.arg} if is_state(state) and state.src[0] in self.written else {}
        found: dict[UOp, int] = {}
        outside = u.live_ranges
        for load in u.src[0].toposort():
            if load.op is Ops.LOAD and not load.live_ranges <= outside:
                for memory, version in self.own_reads(load).items():
                    found[memory] = max(version, found.get(memory, version))
        return found

    def is_held(self, u: UOp) -> bool:
        """Whether ``u`` is a load or reduction of written memory through a memory state: its value is the one
        its statement read, computed before any later effect on that memory and never read again."""
        return u.op in (Ops.LOAD, Ops.REDUCE) and bool(self.stated_reads(u))

    def find_held(self) -> None:
        """Every held value (``is_held``) each effect computes from, and the last effect that does."""
        for position, e in enumerate(self.statements):
            for u in e.toposort():
                if not self.is_held(u):
                    continue
                if u not in self.last_use:
                    for memory, version in self.own_reads(u).items():
                        self.held.setdefault(memory, []).append((version, u))
                self.last_use[u] = position
        for reads in self.held.values():
            reads.sort(key=lambda read: read[0])  # stable: effects' order breaks ties

    def hold(self, position: int, target: UOp) -> None:
        """Before the effect at ``position`` writes through ``target``: compute each held value read from its
        memory through a state this effect writes or an earlier one, that this effect or a later one uses, in
        the loops it depends on (outside any IF the effect opened: it is used outside too), so it keeps the
        value its statement read."""
        memory = memory_of(target.src[0])
        version = state_version(target)
        if version is None:
            if memory in self.held:
                raise GraphError(f"an effect writes buffer {memory.arg} without a memory state, which its reads have",
                                 stage="lower", value=memory.arg)
            return
        for read_version, u in self.held.get(memory, ()):
            if read_version > version:
                break
            if self.last_use[u] < position or not all(self.is_bound(r) for r in self.scopes[u]):
                continue
            self.compute_held(u)

    def compute_held(self, u: UOp) -> None:
        """Compute held value ``u`` in its loop's block, after every effect emitted so far on the memory it
        reads (through states, and without: an IF condition or index it computes from), unless it is."""
        block = self.loop_block(u)
        if self.computed(u, block) is None:
            self.after_effects(block, self.uncomputed_reads(u, block))
            with self.at(block):
                self.value(u)

    def uncomputed_reads(self, u: UOp, block: _Block) -> set[UOp]:
        """The written memory that the part of ``u`` not yet computed in ``block`` (or a block around it)
        reads: a held load gated by a condition computed from another buffer, which an IF inside ``block``
        holds a write to, need not close that IF to be computed before it."""
        memories: set[UOp] = set()
        seen: set[UOp] = set()
        todo = [u]
        while todo:
            node = todo.pop()
            if node in seen or self.computed(node, block) is not None:
                continue
            seen.add(node)
            if is_unstated_read(node, self.written):
                memories.add(memory_of(node.src[0].src[0]))
            elif node.op is Ops.LOAD:
                memories.update(self.own_reads(node))
            todo.extend(node.src)
        return memories

    def after_effects(self, block: _Block, memories: Collection[UOp]) -> None:
        """Make what is emitted into ``block`` come after every effect on ``memories`` emitted so far: close
        the IFs open inside it that hold such effects (a value emitted into ``block`` goes before its open
        child; effects on other memory may stay after it). A loop inside it that holds such effects cannot be
        closed (its turns would split): no held value lives outside such a loop and is read in it after the
        loop's first effects on its memory, where it would be stated after them."""
        inner = self.stack[block.depth + 1:]
        if not any(_holds_effects(b, memories) for b in inner):
            return
        if any(b.scope is not None and b.scope.op is Ops.RANGE and _holds_effects(b, memories) for b in inner):
            raise GraphError("a held value is read inside a loop it does not depend on, after the loop's effects",
                             stage="lower")
        while len(self.stack) > block.depth + 1:
            self.close_block()

    def loop_block(self, node: UOp) -> _Block:
        """The innermost open loop among the ranges ``node`` depends on (the root where it depends on none)."""
        deepest = self.root
        for r in self.scopes[node]:
            block = self.binding(r)
            if block.depth > deepest.depth:
                deepest = block
        return deepest

    def computed(self, u: UOp, block: _Block) -> UOp | None:
        """The value of ``u`` computed in ``block`` or an open block around it, if any."""
        for b in reversed(self.stack[:block.depth + 1]):
            if (u, b) in self.memo:
                return self.memo[(u, b)]
        return None

    def value(self, node: UOp) -> UOp:
        """The emitted form of AST value ``node`` in the current context, emitting what is missing. The open
        blocks are the same on every turn of the walk (what opens blocks closes them again before it returns),
        so each node is placed once."""
        placed: dict[UOp, _Block] = {}

        def place(u: UOp) -> _Block:
            block = placed.get(u)
            if block is None:
                block = placed[u] = self.place(u)
            return block

        memo = self.memo
        todo = [node]
        while todo:
            u = todo[-1]
            block = place(u)
            if (u, block) in memo:
                todo.pop()
                continue
            if u.op is Ops.RANGE:
                self.remember((u, block), self.binding(u).scope)  # type: ignore[arg-type]
                todo.pop()
                continue
            if u.op is Ops.REDUCE or self.is_held(u):
                # computed before an IF that encloses this use (``shared_across_gates``, ``hold``)
                earlier = self.computed(u, block)
                if earlier is not None:
                    self.remember((u, block), earlier)
                    todo.pop()
                    continue
            if u.op is Ops.REDUCE:
                self.reduce_group(u, block)
                todo.pop()
                continue
            if u.op is Ops.ADD and u.arg == CONTINUED:  # the reduction's register started from u.src[0]
                reduction = u.src[1]
                if (reduction, place(reduction)) not in self.memo:
                    todo.append(reduction)
                    continue
                todo.pop()
                self.remember((u, block), self.memo[(reduction, place(reduction))])
                continue
            sources = _computed(u)
            keys = [(s, place(s)) for s in sources]
            missing = [key[0] for key in keys if key not in memo]
            if missing:
                todo.extend(reversed(missing))
                continue
            todo.pop()
            self.remember((u, block), self.build(u, block, tuple(memo[key] for key in keys)))
        return self.memo[(node, place(node))]

    def build(self, u: UOp, block: _Block, src: tuple[UOp, ...]) -> UOp:
        """The emitted form of ``u`` in ``block`` over ``src``, the emitted forms of its sources."""
        if u.op is Ops.DEFINE_REG:  # a work item's register: declared once, before the body, whichever uses it
            self.leaves.setdefault(u, None)
            return u
        if u.op in LEAVES:
            if u not in self.leaves:
                self.leaves[u] = None
            return u
        if _record(u) is not None:
            return self.recorded_index(u, src, block)
        if u.op is Ops.LOAD and is_state(u.src[0].src[0]):
            self.check_stated_after(u.src[0].src[0])
        if u.op is Ops.LOAD and u.replace(src=src) in self.stale:
            src = (self.reread(src[0], self.version[u.src[0].src[0]], block),)
        elif u.op is Ops.LOAD and is_unstated_read(u, self.written):
            loop = self.carried_loop(u.replace(src=src), u.src[0].src[0])
            if loop is not None:
                src = (self.reread(src[0], loop, block),)
        return self.emit(block, u.replace(src=src))

    def check_stated_after(self, state: UOp) -> None:
        """Refuse to read through memory ``state`` before every effect stated before it is emitted: the
        value read would be the memory before them."""
        if any(version < state.arg for version in self.unemitted.get(state.src[0], ())):
            raise GraphError(f"a value read from buffer {memory_of(state).arg} after an effect on it would be "
                             "computed before that effect", stage="lower", value=state.arg)

    def carried_loop(self, load: UOp, memory: UOp) -> UOp | None:
        """The outermost loop open inside the block where ``load`` was emitted that writes ``memory`` in its
        turns: read again inside it, after the loop's effects of the turn before, not taken from before it."""
        earlier = self.emitted.get(load)
        if earlier is None or earlier.depth >= len(self.stack) or self.stack[earlier.depth] is not earlier:
            return None
        for b in self.stack[earlier.depth + 1:]:
            if b.scope is not None and b.scope.op is Ops.RANGE and b.key is not None and \
                    memory in self.written_in.get(b.key, {}):
                return b.scope
        return None

    def reread(self, index: UOp, effect: UOp, block: _Block) -> UOp:
        """``index`` on its buffer ``AFTER`` ``effect``: a load through it is a new value, where a load
        of the same element emitted before the effect would otherwise be taken for it."""
        after = self.emit(block, index.src[0].after(effect))
        return self.emit(block, index.replace(src=(after, *index.src[1:])))

    def emit(self, block: _Block, value: UOp) -> UOp:
        """Place ``value`` in ``block``, unless the same value is already computed in an open block (UOps
        are hash-consed: one value computed twice is one node)."""
        earlier = self.emitted.get(value)
        if earlier is not None and earlier.depth < len(self.stack) and self.stack[earlier.depth] is earlier:
            return value
        block.add(value)
        self.emitted[value] = block
        if value.op is Ops.LOAD and not is_state(value.src[0].src[0]) and \
                memory_of(value.src[0].src[0]) in self.read_and_written:
            self.loads.setdefault(memory_of(value.src[0].src[0]), []).append(value)
        return value

    def remember(self, key: tuple[UOp, _Block], value: UOp) -> None:
        """Memoise ``key``'s emitted value, noting the written memory it was read from (``state``)."""
        self.memo[key] = value
        for memory in self.state(key[0]):
            self.reading.setdefault(memory, []).append(key)

    # ---- accesses with a record ------------------------------------------------------------------------

    def recorded_index(self, u: UOp, src: tuple[UOp, ...], block: _Block) -> UOp:
        """``buf[idx]`` after its record (``checks.check_accesses``): the record's effects inside ``IF
        (condition)``, where the record is placed (a row test: outside the column loop), then the access
        gated by the record's gate."""
        record = _record(u)
        assert record is not None
        with self.at(self.place(record)):
            self.open_if(record.src[0], None)
            for effect in record.src[2:]:
                if effect.op in EFFECTS:
                    self.stack[-1].add(effect.replace(src=(self.value(effect.src[0]), self.value(effect.src[1]))))
            self.close_block()
            allowed = self.value(record.src[1])
            return self.emit(block, UOp(Ops.INDEX, u.dtype, (src[0], src[1], allowed)))

    # ---- reductions ------------------------------------------------------------------------------------

    def reduce_group(self, first: UOp, block: _Block) -> None:
        """Emit ``first`` and every pending reduction over the same ranges placed in the same block, with one
        loop nest; their results are read after it."""
        members, fed = [first], set(self.inner_reductions(first))
        for other in self.reductions(self.current) if self.current is not None else ():
            if other is first or other.src[1:] != first.src[1:] or (other, block) in self.memo:
                continue
            if not all(self.is_bound(r) for r in self.scopes[other]) or self.place(other) is not block:
                continue
            if other in fed or not self.inner_reductions(other).isdisjoint(members):  # one feeds another
                continue
            members.append(other)
            fed.update(self.inner_reductions(other))
        with self.at(block):
            starts = [() if m not in self.starts else (self.value(self.starts[m]),) for m in members]
            registers = []
            for m in members:
                reg = UOp(Ops.DEFINE_REG, m.dtype.ptr(1, local=True), (), self.registers)
                self.registers += 1
                block.add(reg)
                registers.append(reg)
            ranges = nested(frozenset(first.src[1:]))
            for r in ranges:
                self.open_loop(r)
            inner = self.stack[-1]
            updates = []
            for m, reg, start in zip(members, registers, starts, strict=True):
                update = UOp(Ops.REDUCE, m.dtype, (reg, self.value(m.src[0]), *start), m.arg)
                inner.add(update)
                inner.updates.append(update)
                updates.append(update)
            for _ in ranges:
                self.close_block()
            for m, reg, update in zip(members, registers, updates, strict=True):
                result = UOp(Ops.AFTER, m.dtype, (reg, update))
                block.add(result)
                self.remember((m, block), result)

    def inner_reductions(self, reduction: UOp) -> frozenset[UOp]:
        """The reductions ``reduction``'s body computes from (none, for a register tile's outputs)."""
        if reduction not in self.inner:  # a 128-output register tile asks of each whether it feeds another
            self.inner[reduction] = frozenset(self.reductions_below(reduction.src[0]))
        return self.inner[reduction]

    def shared_across_gates(self, e: UOp, gate: UOp) -> bool:
        """Whether reductions computed with ``e``'s serve a later effect under another gate (a GPU's masked
        tile, each column gated by its own test): the group is then computed before ``e``'s IF, not inside
        it, where the next IF would compute it all again. Its loads are safe there: a load that only the
        gate makes safe is gated itself (``guard_accesses``, and the lowering that adds the gate)."""
        for other in self.effects[self.effects.index(e) + 1:]:
            other_gate = self.gates[other]
            if other_gate is not None and other_gate is not gate and self.early_reductions(other):
                return True
        return False

    def reductions_below(self, node: UOp) -> tuple[UOp, ...]:
        """The reductions below ``node`` (itself included), in the order of its toposort: found node by node
        once for the kernel, where a toposort of each effect walks the index arithmetic they share again."""
        for u in unknown_below(node, self.below):
            found = dict.fromkeys(r for s in u.src for r in self.below[s])
            if u.op is Ops.REDUCE:
                found[u] = None
            self.below[u] = tuple(found)
        return self.below[node]

    # ---- effects ---------------------------------------------------------------------------------------

    def effect(self, e: UOp) -> None:
        """Run ``e`` in the loops it depends on (and its gate's IF), sharing those open before it."""
        target = None if e.op is Ops.BARRIER else e.src[0]
        gate = None if target is None else self.gates[e]
        conditions = _conjuncts(gate)
        held = conditions if target is None or len(target.src) < 3 else _conjuncts(target.src[2])
        loops = self.scopes[e]
        self.share(loops, held)
        if target is not None:  # what the blocks this effect shares compute (then what those it opens do)
            self.hold(self.positions[e], target)  # which may close an IF it shared: share again
        shared, kept = self.share(loops, held)
        if shared < len(_common_prefix(self.previous, loops)):
            raise GraphError("two effects next to each other in the kernel would run a loop they share apart",
                             stage="lower", value=e.op.name)
        self.previous = loops
        left = [c for c in conditions if c not in kept]
        written = None if target is None else memory_of(target.src[0])
        keys = _with_gates(loops[shared:], left, self.shared_loops, written)
        last_loop = max((i for i, key in enumerate(keys) if key not in left), default=-1)
        for position, key in enumerate(keys):
            if key in left:
                if position == last_loop + 1 and gate is not None and self.shared_across_gates(e, gate):
                    self.current = e
                    for reduction in self.reductions_below(e.src[1]):  # those nested in another: with it
                        if all(self.is_bound(r) for r in self.scopes[reduction]):
                            self.value(reduction)
                self.open_if(key, key)
            else:
                self.open_loop(key)
        if target is None:
            self.stack[-1].add(e.replace(src=()))
            self.reread_local()
            return
        self.hold(self.positions[e], target)
        if gate is not None:
            opened = [b.key for b in self.stack if b.scope is not None and b.scope.op is Ops.IF]
            if any(c not in opened for c in conditions):
                raise GraphError("an effect's gate is not open around it", stage="lower", value=e.op.name)
            target = target.replace(src=target.src[:2])
        self.current = e
        index = self.value(target)
        value = self.value(e.src[1])
        emitted = e.replace(src=(index, value))
        self.stack[-1].add(emitted)
        memory = memory_of(target.src[0])
        self.version[memory] = emitted
        version = state_version(target)
        if version is not None:
            self.unemitted[memory].pop(version, None)
        if memory in self.read_and_written:
            self.stale.update(self.loads.pop(memory, ()))
            for stale in self.reading.pop(memory, ()):
                self.memo.pop(stale, None)  # values read from the memory just written are computed again

    def exit(self, e: UOp) -> None:
        """The test that ends loop ``e.src[0]`` after a turn: the last instruction of the loop's block, which the
        loop's effects opened (or a block of its own where it has none), under no IF."""
        loop = e.src[0]
        if loop.op is not Ops.RANGE:  # a loop of one turn, folded to its one index: no turn follows to skip
            return
        loops = self.scopes[e]
        if not loops or loops[-1] is not loop:
            raise GraphError(f"the exit of the loop on axis {loop.arg[0]} is tested in a loop inside it",
                             stage="lower", value=loop.arg)
        if self.is_bound(loop):  # in the block its effects opened, after them (an IF around the loop stays)
            while self.stack[-1] is not self.binding(loop):
                self.close_block()
        elif loop in self.looped:
            raise GraphError(f"the exit of the loop on axis {loop.arg[0]} is stated apart from the loop's effects",
                             stage="lower", value=loop.arg)
        else:
            shared, _ = self.share(loops, [])
            for key in loops[shared:]:
                self.open_loop(key)
        self.previous = loops
        self.current = None
        condition = self.value(e.src[1])
        self.stack[-1].add(UOp(Ops.EXIT, dtypes.void, (self.binding(loop).scope, condition)))  # type: ignore[arg-type]

    def share(self, loops: tuple[UOp, ...], conditions: list[UOp]) -> tuple[int, list[UOp]]:
        """Close the open blocks an effect over ``loops``, made only where each of ``conditions`` holds, does
        not share (an open IF of one of them it shares: a checked or lane-gated effect too, whose own access
        keeps its gate); how many of its loops stay open, and the conditions whose IFs do."""
        shared, kept = 0, []
        keep = 1  # the root always stays; then every open block the effect can share, outermost first
        while keep < len(self.stack):
            key = self.stack[keep].key
            if shared < len(loops) and key is loops[shared]:
                shared += 1
            elif key in conditions and key not in kept:
                kept.append(key)
            else:
                break
            keep += 1
        while len(self.stack) > keep:
            self.close_block()
        return shared, kept

    def state(self, node: UOp) -> frozenset[UOp]:
        """The written memory whose contents ``node`` depends on: the buffers loaded below it."""
        known = self.states.get(node)
        if known is None:
            known = self.states[node] = node.unstated_memory & self.written
        return known

    def reductions(self, e: UOp) -> list[UOp]:
        """The reductions ``e`` needs, then those of later effects that may be computed early, in a loop shared
        with ``e``'s: those that read no memory this kernel writes (an upcast matmul's outputs), and, up to the
        next BARRIER, those of effects in ``e``'s loops that read none of the memory written from ``e`` on (a
        GPU matmul tile's outputs, each summing from the operands staged in local memory into its own slot)."""
        found = list(self.reductions_below(e))
        position = self.effects.index(e)
        written: set[UOp] = set()
        apart = False  # past a BARRIER, or past an effect in other loops
        for before, later in zip(self.effects[position:], self.effects[position + 1:], strict=False):
            apart = apart or before.op is Ops.BARRIER or later.op is Ops.BARRIER or \
                self.scopes[later] != self.scopes[e]
            if before.op is not Ops.BARRIER:
                written.add(memory_of(before.src[0].src[0]))
            found.extend(self.early_reductions(later))
            if not apart:
                found.extend(u for u in self.reductions_below(later)
                             if not self.stated_reads(u) and self.state(u).isdisjoint(written))
        return list(dict.fromkeys(found))

    def early_reductions(self, e: UOp) -> list[UOp]:
        """The reductions of effect ``e`` that read no memory this kernel writes."""
        if e not in self.early:
            self.early[e] = [u for u in self.reductions_below(e) if not self.state(u) and not self.stated_reads(u)]
        return self.early[e]

    def reread_local(self) -> None:
        """After a BARRIER, loads of local memory are emitted again: other work items of the group wrote it."""
        for stale in [k for k in self.memo if k[0].op is Ops.LOAD and k[0].src[0].src[0].op is Ops.DEFINE_LOCAL]:
            del self.memo[stale]
            self.emitted.pop(stale[0], None)

    def run(self) -> tuple[UOp, ...]:
        for e in self.sink.src:
            if e.op is Ops.EXIT:
                self.exit(e)
            elif e.op is Ops.BARRIER or e.op in EFFECTS:
                self.effect(e)
        while len(self.stack) > 1:
            self.close_block()
        body: list[UOp] = []
        _flatten(self.root, body)
        return (*self.leaves, *body)


def _with_gates(loops: tuple[UOp, ...], conditions: list[UOp], shared: frozenset[UOp],
                written: UOp | None = None) -> list[UOp]:
    """The blocks an effect opens, outermost first: its ``loops``, with an IF for each of ``conditions`` (its
    gate's conjuncts no IF open holds) right inside the last loop the condition depends on. A row's gate
    stands outside the loop over the row's columns, and with it the row's reductions, which are placed inside
    the IF. An IF stays inside the sequential loops in ``shared`` (other effects run in them too), so that
    those effects can share their turns. A condition that reads the memory the effect writes (``written``:
    ``v = min(v, -v)``, a local stored where ``-v < v``) is tested inside all its loops: each turn's store
    changes what the next turn's test reads (tested once before the loop, it stored ``-v`` at every turn)."""
    places = [len(loops) if written is not None and _reads(c, written) else
              max((i + 1 for i, r in enumerate(loops) if r in c.live_ranges or r in shared), default=0)
              for c in conditions]
    keys: list[UOp] = []
    for position in range(len(loops) + 1):
        keys += [c for c, at in zip(conditions, places, strict=True) if at == position]
        keys += list(loops[position:position + 1])
    return keys


def _reads(condition: UOp, memory: UOp) -> bool:
    """Whether ``condition`` loads from ``memory``."""
    return any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) is memory for u in condition.toposort())


def _conjuncts(gate: UOp | None) -> list[UOp]:
    """The conditions whose conjunction ``gate`` is (ANDs of bools taken apart, each once), in the gate's order:
    an effect gated by ``c & bound`` shares the IF of ``bound`` another effect opened, in the loops it shares
    with it (a loop split between IFs of different gates would run its turns twice over, out of order)."""
    if gate is None:
        return []
    found: dict[UOp, None] = {}
    stack = [gate]
    while stack:
        u = stack.pop()
        if u.op is Ops.AND and u.dtype == dtypes.bool:
            stack.extend(reversed(u.src))
        else:
            found.setdefault(u, None)
    return list(found)


def _common_prefix(a: tuple[UOp, ...], b: tuple[UOp, ...]) -> tuple[UOp, ...]:
    n = 0
    while n < min(len(a), len(b)) and a[n] is b[n]:
        n += 1
    return a[:n]


def _holds_effects(block: _Block, memories: Collection[UOp]) -> bool:
    """Whether ``block`` holds an effect on one of ``memories`` (or a barrier)."""
    return any(_holds_effects(item, memories) if isinstance(item, _Block) else item.op is Ops.BARRIER or
               (item.op in EFFECTS and memory_of(item.src[0].src[0]) in memories) for item in block.items)


def _flatten(block: _Block, out: list[UOp]) -> None:
    for item in block.items:
        if isinstance(item, _Block):
            assert item.scope is not None
            out.append(item.scope)
            _flatten(item, out)
            out.append(UOp(Ops.END, dtypes.void, (item.scope, *item.updates)))
        else:
            out.append(item)


def _gate(effect: UOp) -> UOp | None:
    """The gate of an effect's target, if it has one (and carries no record), and it is the same for every
    lane: a gate that differs by lane stays on the target, whose store it masks (no IF can)."""
    target = effect.src[0]
    if len(target.src) != 3 or _record(target) is not None:
        return None
    return None if any(u.op is Ops.LANE for u in target.src[2].toposort()) else target.src[2]


def _record(u: UOp) -> UOp | None:
    """The record an access runs first (``checks.check_accesses``), if it carries one."""
    return u.src[-1] if u.op is Ops.INDEX and u.src and u.src[-1].op is Ops.IF else None


def _computed(u: UOp) -> tuple[UOp, ...]:
    """The sources of ``u`` computed before it: all but a record, which is run as ``u`` is built."""
    return u.src[:-1] if _record(u) is not None else u.src


def linearize(sink: UOp, status: UOp | None = None) -> tuple[UOp, ...]:
    """The instructions of ``sink`` in execution order (see the module docstring). ``status``: the buffer its
    checked accesses record failures in, which the exit test of a loop without a bound reads."""
    if sink.op is not Ops.SINK:
        raise GraphError("a kernel's root must be a SINK", stage="lower", value=sink.op)
    try:
        return _Linearizer(sink, status).run()
    except RecursionError as err:
        raise GraphError("the kernel nests too deeply to linearize", kernel=kernel_label(sink),
                         stage="lower") from err
    except GraphError as err:
        if err.kernel is not None:
            raise
        raise GraphError(err.detail, kernel=kernel_label(sink), stage=err.stage or "lower",
                         value=err.value) from err
