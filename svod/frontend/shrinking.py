"""Arrays a loop around phases rebinds, each turn, to the elements of themselves where a mask holds: the escape-time
loop NumPy users compact (npbench's ``mandelbrot2``), in ``@svod.jit``'s array statements
(``svod.frontend.arrays``)::

    for i in range(turns):                 _svod_Z1 = np.empty(n); _svod_Z1[...] = Z     each a buffer of its
        Z = Z * Z + C                      _svod_C2 = np.empty(n); _svod_C2[...] = C     own, at the length it
        out = np.abs(Z) > 2                _svod_len3 = n                                has before the loop
        ...                                for i in range(turns):
        keep = ~out                            ...                                       every length in the
        Z = Z[keep]                            _svod_count4 = 0                          turn: _svod_len3
        C = C[keep]                            for a in range(n):
                                                   if a < _svod_len3 and keep[a]:
                                                       _svod_Z1[_svod_count4] = _svod_Z1[a]; _svod_count4 += 1
                                               ... (C the same)
                                               _svod_len3 = _svod_count5

Each array of the group (the names the loop's body rebinds to ``x[mask]`` of themselves, by one mask, in
statements that stand together) is copied before the loop into a buffer of the length it has there (so no
other name's array is written: in Python each ``Z[keep]`` is a new array), and is compacted in place, which a
single work item may do in order (each element moves to a place at or before its own). A group of
``SHRINK_BLOCKED_FROM`` elements or more is compacted in ``SHRINK_BLOCKS`` blocks of its length, in parallel:
the blocks' counts of kept elements (once a turn, for every array of the group), each block's first place (their
sum before it, in order), then each array's kept elements moved from there into a second buffer and copied
back. Moved in place, a block's elements could land where an earlier block has not yet read its own.

The length all of them have is one scalar the run carries (``_svod_len3``): the length of each of them and of
each array made at that length, which the phases read as their bound (a ``prange`` over the longest with an
``if`` inside: a launch's size is known before its kernel runs), and which ``len(Z)``, ``Z.shape[0]`` and
``Z.size`` read.

The code written by hand reads an element of such an array as ``Z[j]`` in a loop ``for j in range(len(Z))`` (or
of another array of that length): any other index, which NumPy would check against the length or count from
its end, is refused, as is iterating it (``for z in Z``) and any read of one after the loop, or of an array made
at the length before the mask shortened it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import Emitter, Expr, Fused, Named, Value, Viewed, base_name, computes
from svod.frontend.array_loops import RUN_LENGTH, carries_length
from svod.frontend.extents import Dim, node_of
from svod.frontend.nodes import assign, call, constant, copied, for_loop, load, placed, subscript, walk
from svod.frontend.rebinding import Bindings


class Shrinking:
    """The array rewriter's loops whose arrays shrink (``ArrayRewriter``, which this is a part of)."""

    arrays: dict[str, Expr]
    bases: dict[str, Named]
    arguments: set[str]
    stale: dict[str, str]
    described: dict[str, str]
    bindings: Bindings
    counter: Any
    changed: bool
    level: int
    work: list[ast.For]

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...  # type: ignore[empty-body]

    def value(self, node: ast.expr) -> Value: ...  # type: ignore[empty-body]

    def allocation(self, stmt: ast.stmt, made: Expr) -> list[ast.stmt]: ...  # type: ignore[empty-body]

    def loops(self, stmt: ast.stmt, stored: Expr, value: Value) -> list[ast.stmt]: ...  # type: ignore[empty-body]

    def make(self, fused: Fused) -> None: ...

    def shrinking_state(self) -> None:
        self.shrinks: dict[str, tuple[list[str], list[str], set[tuple[int, int]]]] = {}
        """Per length the run carries, of the loops being rewritten whose arrays shrink: the arrays of the group,
        those its compactions are still to shorten in the turn (as the rewriting has come), and where the
        statements that shorten them stand."""
        self.run_lengths: set[str] = set()
        """The lengths the run carries, made so far."""
        self.counting_loops: dict[str, str] = {}
        """Each loop variable of a loop ``for j in range(<a length the run carries>)``: that length's name."""
        self.blocks: dict[str, Blocks] = {}
        """Per length the run carries, of a group compacted in blocks (``moved_in_blocks``): its buffers."""

    # ---- the loop -----------------------------------------------------------------------------------------

    @contextmanager
    def shrinking(self, loop: ast.For | ast.While) -> Iterator[list[ast.stmt]]:
        """Rewrite ``loop``'s body with the arrays it shrinks (the module docstring) in buffers of their own and
        of a length the run carries; the statements that make them, before the loop, are what it yields."""
        group, mask, run = _group(loop.body)
        made: list[ast.stmt] = []
        at = run[0] if run else None
        if not group or at is None:
            yield made
            return
        if self.level != 1 or self.work:
            raise self.refuse(at, f"{', '.join(group)} shrink at each turn of this loop: svod shrinks the arrays of a "
                                  "loop that stands in the function's own statements, not in another loop or an if")
        self.unshared(loop.body, at, group)
        arrays = [self.arrays.get(name) for name in group]
        shapes = {a.shape for a in arrays if isinstance(a, Expr)}
        shape = next(iter(shapes), ())
        if None in arrays or len(shapes) != 1 or len(shape) != 1 or not isinstance(shape[0], int):
            raise self.refuse(at, f"{', '.join(group)} shrink to their elements where {mask} holds at each turn: svod "
                                  "does so for 1-D arrays of one length the host knows where the loop starts")
        size = shape[0]
        length = f"_svod_len{next(self.counter)}"
        self.described[length] = f"the length of {', '.join(group)}, which `{mask}` shortens each turn"
        turn_length = extents.dim({extents.Atom(RUN_LENGTH + length, load(length), 0, size, frozenset({length})): 1}, 0)
        fresh: list[str] = []
        for name, array in zip(group, arrays, strict=True):
            assert isinstance(array, Expr)  # (checked)
            own = f"_svod_{name.removeprefix('_svod_')}{next(self.counter)}"
            self.described[own] = self.described.get(name, name)
            base = Named((size,), array.dtype, own)
            made += [*self.allocation(loop, base), *self.loops(loop, base, array)]
            self.bases[own] = base
            self.arrays[own] = Viewed((turn_length,), array.dtype, base, ((0, 0, 1),), {})
            for user, latest in [(name, name), *self.bindings.renames.items()]:
                if latest == name:
                    self.bindings.renames[user] = own
            fresh.append(own)
        if size >= SHRINK_BLOCKED_FROM:
            made += self.block_buffers(loop, length, size, fresh)
        made += placed([assign(length, constant(size))], loop)
        self.run_lengths.add(length)
        self.shrinks[length] = (fresh, list(fresh), {(s.lineno, s.col_offset) for s in run})
        self.changed = True
        try:
            yield made
        finally:
            for own in fresh:
                self.stale[own] = f"{self.described[own]} is shortened at each turn of the loop at line " \
                                  f"{loop.lineno} (by `{mask}`), and svod reads it only inside the loop"
            self.shortened(length, f"its length is one of a turn of the loop at line {loop.lineno} (`{mask}` "
                                   f"shortens {', '.join(group)}): svod reads it only inside the loop")
            del self.shrinks[length]
            self.blocks.pop(length, None)

    def unshared(self, body: list[ast.stmt], at: ast.stmt, group: list[str]) -> None:
        """Refuse a group whose array is an argument the loop's ``body`` may write before its compactions (``at``),
        or one another name holds or views (``z = y``, ``v = y[1:]``): in Python the caller or that name keeps the
        array and shares it with ``y`` until the first compaction, while svod's ``y`` is a copy of its own from the
        loop's start, which they neither see nor write."""
        for name in group:
            if name in self.arguments and _written_before(body, at, name):
                raise self.refuse(at, f"{name} is an argument this loop writes into and shrinks: in Python the first "
                                      "turn writes the caller's array, before it is shortened, and svod shrinks a "
                                      f"copy of its own: shrink a copy (`{name}_left = {name}.copy()` before the loop)")
            held = [user for user, latest in self.bindings.renames.items() if latest == name and user != name]
            views = [other for other, array in self.arrays.items() if other != name and base_name(array) == name]
            if views or len(held) > 1 or (held and not name.startswith("_svod_")):
                raise self.refuse(at, f"{self.described.get(name, name)} shrinks at each turn of this loop, and "
                                      "another name holds or views its array (`z = y`, `v = y[1:]`), which shares "
                                      "its elements in Python until it is shortened: svod shrinks a copy of its "
                                      "own; bind a copy to the other name (`z = y.copy()`)")

    def shortened(self, length: str, why: str) -> None:
        """Every array whose shape reads the run's ``length``, or that views an array of the loop's group, is stale:
        of a turn gone, or moved by a compaction (``why``)."""
        group = self.shrinks[length][0] if length in self.shrinks else []
        for name, array in self.arrays.items():
            reads = any(isinstance(d, extents.Extent) and any(a.key == RUN_LENGTH + length for a, _ in d.terms)
                        for d in array.shape)
            if reads or (base_name(array) in group and name not in group):
                self.stale.setdefault(name, f"{self.described.get(name, name)}: {why}")

    def compacted_in_place(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        """``Z = Z[keep]`` (``Z, C = Z[keep], C[keep]``) of arrays a loop shrinks: each compacted in place, the
        loop's length the count of the last of the group. None for any other statement."""
        pairs = _compactions(stmt)
        length = _length_of(self.arrays.get(pairs[0][0])) if pairs else None
        if pairs is None or length not in self.shrinks:
            return None
        assert length is not None  # (a key)
        group, waiting, places = self.shrinks[length]
        if (stmt.lineno, stmt.col_offset) not in places:
            raise self.refuse(stmt, f"{ast.unparse(stmt)} shortens an array the loop shrinks, which svod does only in "
                                    f"the statements at line {min(places)[0]} that shorten them all together")
        out: list[ast.stmt] = []
        count = ""
        for name, mask in pairs:
            array, kept = self.arrays.get(name), self.value(load(mask))
            if isinstance(kept, Fused):  # (a fused mask's elements would be computed from what a compaction moved)
                self.make(kept)
                kept = self.value(load(mask))
            made = isinstance(kept, (Named, Viewed)) and not computes(kept)
            if name not in waiting or not made or not isinstance(kept, Expr) or kept.dtype != np.bool_ or \
                    not isinstance(array, Expr) or kept.shape != array.shape:
                raise self.refuse(stmt, f"{self.described.get(name, name)} = ...[{mask}] shortens an array the loop "
                                        "shrinks: svod shortens each of them once a turn, in statements that stand "
                                        "together, by one boolean mask of their length")
            waiting.remove(name)
            if length in self.blocks:
                counted, count = self.block_offsets(stmt, kept, length)
                out += counted
                self.blocks[length].pending.append(name)
                self.blocks[length].mask = kept
            else:
                count = f"_svod_count{next(self.counter)}"
                out += self.in_place(stmt, name, kept, count, length)
        if not waiting:
            if length in self.blocks:
                out += self.moved_in_blocks(stmt, length)
            out += placed([assign(length, load(count))], stmt)
            self.shortened(length, f"it was made at the length the arrays had before line {stmt.lineno} shortened "
                                   "them, and svod reads it only before")
            for name in group:
                self.stale.pop(name, None)  # (of the new length)
        self.changed = True
        return out

    def in_place(self, stmt: ast.stmt, name: str, mask: Expr, count: str, length: str) -> list[ast.stmt]:
        """The elements of ``name`` where ``mask`` holds, in order, at its front, and their ``count``: one work
        item's loop over the longest the array may be, which stops being one at ``length``."""
        at = f"_svod_a{next(self.counter)}"
        out = Emitter(self.counter)
        kept = mask.element([load(at)], out)
        size = self.bases[name].shape[0]
        moved = assign(subscript(name, [load(count)]), subscript(name, [load(at)]))
        counted = ast.AugAssign(ast.Name(count, ast.Store()), ast.Add(), constant(1))
        body: list[ast.stmt] = [ast.If(ast.Compare(load(at), [ast.Lt()], [load(length)]),
                                       [*out.statements, ast.If(kept, [moved, counted], [])], [])]
        return placed([assign(count, constant(0)), for_loop(at, call("range", constant(size)), body)], stmt)

    def block_buffers(self, loop: ast.stmt, length: str, size: int, group: list[str]) -> list[ast.stmt]:
        """The buffers, made once before ``loop``, that a ``group`` of ``size`` elements at most is compacted
        through in blocks: each block's count (then its first place), and an array for each of the group's
        that its kept elements are moved into before they are copied back (one each: the stores of one
        statement into one array from two loops of work items would be a race to svod). A complex array's
        parts are moved into two float arrays: its two stores of an element at a place the data decides would
        be one to svod, which cannot tell two work items' places apart."""
        per = max(-(-size // SHRINK_BLOCKS), 1)
        found = Blocks(f"_svod_counts{next(self.counter)}", per, max(-(-size // per), 1), {})
        held = np.dtype(np.int32 if size <= np.iinfo(np.int32).max else np.intp)
        self.described[found.counts] = f"the counts of the blocks of {self.described.get(length, length)}"
        made = self.allocation(loop, Named((found.count,), held, found.counts))
        for name in group:
            dtype = self.bases[name].dtype
            parts = [dtype] if dtype.kind != "c" else [np.dtype(f"f{dtype.itemsize // 2}")] * 2
            found.moved[name] = tuple(f"_svod_moved{next(self.counter)}" for _ in parts)
            for moved, part in zip(found.moved[name], parts, strict=True):
                self.described[moved] = f"the kept elements of {self.described[name]}"
                made += self.allocation(loop, Named((size,), part, moved))
        self.blocks[length] = found
        return made

    def block_offsets(self, stmt: ast.stmt, mask: Expr, length: str) -> tuple[list[ast.stmt], str]:
        """The statements that count the elements where ``mask`` holds in each block of the first ``length``
        (in parallel), then make each count the block's first place (in order), and the total's name: none and
        the same name again for the group's next array, which the same mask shortens."""
        blocks = self.blocks[length]
        if blocks.offsets is not None:
            return [], blocks.offsets[1]
        per, count, first, block = (f"_svod_{stem}{next(self.counter)}" for stem in ("per", "count", "first", "block"))
        blocks.offsets = (per, count)
        at = ast.Subscript(load(blocks.counts), load(block), ast.Load())
        counting = self.in_blocks(mask, length, f"_svod_first{next(self.counter)}", None)
        summed = for_loop(block, call("range", constant(blocks.count)), [
            assign(first, at), assign(at, load(count)), ast.AugAssign(ast.Name(count, ast.Store()), ast.Add(),
                                                                      load(first))])
        spread = ast.BinOp(ast.BinOp(load(length), ast.Add(), constant(blocks.count - 1)), ast.FloorDiv(),
                           constant(blocks.count))
        return placed([assign(per, spread), counting, assign(count, constant(0)), summed], stmt), count

    def moved_in_blocks(self, stmt: ast.stmt, length: str) -> list[ast.stmt]:
        """The group's arrays (``Blocks.pending``, which the statements before this one and it shortened by
        ``Blocks.mask``) moved together: each one's elements where ``mask`` holds, each block from its first place, into
        the group's array of its dtype, then copied back to its front, both in parallel, one pass over the mask
        for all of them (moved in place, a block's elements would land where an earlier block may not have read
        its own yet). The moves wait for the group's last statement: nothing between reads what they move."""
        blocks = self.blocks[length]
        assert blocks.offsets is not None  # (``block_offsets`` came first)
        count, names, mask = blocks.offsets[1], blocks.pending, blocks.mask
        assert mask is not None  # (with the first of them)
        moves = [(name, blocks.moved[name]) for name in names]
        filling = self.in_blocks(mask, length, f"_svod_first{next(self.counter)}", moves)
        at = f"_svod_a{next(self.counter)}"
        backs: list[ast.stmt] = []
        for name, moved in moves:
            parts = [subscript(part, [load(at)]) for part in moved]
            backs.append(assign(subscript(name, [load(at)]), parts[0] if len(parts) == 1 else call("complex", *parts)))
        size = self.bases[names[0]].shape[0]  # (the group's length: one)
        copied = for_loop(at, call("_svod_prange", constant(size)),
                          [ast.If(ast.Compare(load(at), [ast.Lt()], [load(count)]), backs, [])])
        blocks.offsets, blocks.pending, blocks.mask = None, [], None  # (the next turn's mask is another)
        return placed([filling, copied], stmt)

    def in_blocks(self, mask: Expr, length: str, first: str, moves: list[tuple[str, tuple[str, ...]]] | None
                  ) -> ast.stmt:
        """A ``prange`` of the blocks that each walk their elements of the first ``length`` in order: with
        ``moves`` (each from, to: one array, or a complex one's parts), putting each element where ``mask`` holds
        at ``to[first]`` from the block's first place; without, counting them into the block's count. A block's
        turns are bounded by the most it may have and by the run's share of them, whichever is fewer, so no
        element past ``length`` is read and no turn is spent past it."""
        blocks = self.blocks[length]
        assert blocks.offsets is not None
        block, turn, at = (f"_svod_{stem}{next(self.counter)}" for stem in ("block", "k", "a"))
        per = blocks.offsets[0]
        out = Emitter(self.counter)
        kept = mask.element([load(at)], out)
        counted = ast.AugAssign(ast.Name(first, ast.Store()), ast.Add(), constant(1))
        placed_at = ast.Subscript(load(blocks.counts), load(block), ast.Load())
        taken: list[ast.stmt] = [counted]
        if moves is not None:
            stores = []
            for source, targets in moves:
                element = subscript(source, [load(at)])
                values = [element] if len(targets) == 1 else \
                    [ast.Attribute(element, part, ast.Load()) for part in ("real", "imag")]
                stores += [assign(subscript(to, [load(first)]), v) for to, v in zip(targets, values, strict=True)]
            taken = [*stores, counted]
        start = ast.BinOp(load(block), ast.Mult(), load(per))
        turns = call("min", constant(blocks.per), call("min", load(per), ast.BinOp(load(length), ast.Sub(), start)))
        sweep = for_loop(turn, call("range", turns), [
            assign(at, ast.BinOp(start, ast.Add(), load(turn))), *out.statements, ast.If(kept, taken, [])])
        begun = assign(first, placed_at if moves is not None else constant(0))
        end = [] if moves is not None else [assign(placed_at, load(first))]
        return for_loop(block, call("_svod_prange", constant(blocks.count)), [begun, sweep, *end])

    # ---- what the code written by hand reads ---------------------------------------------------------------

    def lengths_read(self, stmt: ast.stmt) -> ast.stmt:
        """``stmt`` with ``len(Z)``, ``Z.shape[0]``, ``Z.size`` and ``Z.shape`` of a 1-D array whose length reads
        one the run carries read as that length; an element of one read only at the variable of a loop over
        its length."""
        if not self.run_lengths:
            return stmt
        rewriter = self

        class Lengths(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.AST:
                if isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1:
                    found = rewriter.carried(node.args[0])
                    if found is not None:
                        return ast.copy_location(node_of(found), node)
                return self.generic_visit(node)

            def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
                if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" and \
                        isinstance(node.slice, ast.Constant) and node.slice.value in (0, -1):
                    found = rewriter.carried(node.value.value)
                    if found is not None:
                        return ast.copy_location(node_of(found), node)
                return self.generic_visit(node)

            def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
                found = rewriter.carried(node.value) if node.attr in ("size", "shape") else None
                if found is not None:
                    made = node_of(found) if node.attr == "size" else ast.Tuple([node_of(found)], ast.Load())
                    return ast.copy_location(made, node)
                return self.generic_visit(node)

        made = Lengths().visit(copied(stmt))
        assert isinstance(made, ast.stmt)  # (a statement's replacement is one)
        made = ast.fix_missing_locations(made)
        self.elements_checked(made, dict(self.counting_loops))
        return made

    def carried(self, node: ast.expr) -> Dim | None:
        """The length of 1-D array ``node`` (a name) where it reads a length the run carries; such an array stale
        (``stale``) is refused."""
        array = self.arrays.get(node.id) if isinstance(node, ast.Name) else None
        if not isinstance(array, Expr) or not any(carries_length(d) for d in array.shape):
            return None
        assert isinstance(node, ast.Name)  # (an array's name)
        if node.id in self.stale:
            raise self.refuse(node, self.stale[node.id])
        return array.shape[0] if len(array.shape) == 1 else None

    def elements_checked(self, node: ast.AST, counted: dict[str, str]) -> None:
        """Refuse an element of an array whose length reads one the run carries, read at other than a variable of
        a loop over that length (``counted``, with the loops inside ``node``), and iterating such an array."""
        if isinstance(node, ast.For):
            if self.carried(node.iter) is not None:
                raise self.refuse(node.iter, f"iterating {ast.unparse(node.iter)}, whose length changes each turn, is "
                                             "not one svod has: loop over range(len(...)) and read its elements")
            bound = _counting(node)
            if bound is not None:
                counted = {**counted, node.target.id: bound}  # type: ignore[attr-defined]  # (_counting: a Name)
        for child in ast.iter_child_nodes(node):
            self.elements_checked(child, counted)
        if not isinstance(node, ast.Subscript) or not isinstance(node.value, ast.Name):
            return
        name = node.value.id
        array = self.arrays.get(name)
        if not isinstance(array, Expr) or not any(carries_length(d) for d in array.shape):
            return
        if name in self.stale:
            raise self.refuse(node, self.stale[name])
        if isinstance(node.slice, ast.Slice) or self.array_index(node.slice):
            return
        length = _length_of(array)
        if not (length is not None and isinstance(node.slice, ast.Name) and counted.get(node.slice.id) == length):
            raise self.refuse(node, f"{self.described.get(name, name)}'s length changes each turn of the loop around "
                                    f"it: svod reads its elements as x[j] in a loop `for j in range(len(x))`, not "
                                    f"at `{ast.unparse(node.slice)}`")

    def array_index(self, index: ast.expr) -> bool:
        """Whether ``index`` is an array (a mask or indices), not one element's place."""
        try:
            value = self.value(index)
        except KernelSyntaxError:
            return False
        return isinstance(value, Expr) and bool(value.shape)

    @contextmanager
    def counting(self, loop: ast.For) -> Iterator[None]:
        """Rewrite ``loop``'s body knowing its variable counts up to a length the run carries, if it does."""
        bound = _counting(loop) if self.shrinks else None
        if bound is None:
            yield
            return
        variable = loop.target.id  # type: ignore[attr-defined]  # (_counting: a Name)
        before = self.counting_loops.get(variable)
        self.counting_loops[variable] = bound
        try:
            yield
        finally:
            self.counting_loops.pop(variable)
            if before is not None:
                self.counting_loops[variable] = before


@dataclass
class Blocks:
    """The buffers a group of arrays a loop shrinks is compacted through in blocks (``Shrinking.in_blocks``)."""

    counts: str
    """Each block's count of kept elements, then its first place."""
    per: int
    """The most elements a block walks."""
    count: int
    """How many blocks there are."""
    moved: dict[str, tuple[str, ...]]
    """Per array of the group, the array its kept elements are moved into (a complex one's: two, its parts')."""
    offsets: tuple[str, str] | None = None
    """Where the blocks of this turn are counted: the scalars of a block's share of the length and of the
    total count."""
    pending: list[str] = field(default_factory=list)
    """The arrays of the group this turn's statements shortened so far, moved together after the last."""
    mask: Expr | None = None
    """The mask they were shortened by (one for the group)."""


SHRINK_BLOCKED_FROM = 1 << 12
"""The fewest elements (before the loop) of a group the loop compacts in blocks, in parallel; a smaller group is
compacted in place by one work item, in order."""
SHRINK_BLOCKS = 64
"""The blocks a group is compacted in: enough for the threads of a CPU to share."""


def _length_of(array: Expr | None) -> str | None:
    """The name of the length the run carries that 1-D ``array`` has, if it is one (its only term)."""
    if array is None or len(array.shape) != 1 or not isinstance(array.shape[0], extents.Extent):
        return None
    terms = array.shape[0].terms
    if array.shape[0].constant or len(terms) != 1 or terms[0][1] != 1 or not terms[0][0].key.startswith(RUN_LENGTH):
        return None
    return terms[0][0].key.removeprefix(RUN_LENGTH)


def _counting(loop: ast.For) -> str | None:
    """The length the run carries that ``loop`` (``for j in range(<its name>)``) counts up to, where its body
    leaves its variable as the loop gives it."""
    it, target = loop.iter, loop.target
    if not (isinstance(target, ast.Name) and isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and
            it.func.id in ("range", "prange") and len(it.args) == 1 and isinstance(it.args[0], ast.Name) and
            it.args[0].id.startswith("_svod_len") and not it.keywords):
        return None
    if any(isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Store)
           for stmt in loop.body for n in walk(stmt)):
        return None
    return it.args[0].id


def _compactions(stmt: ast.stmt) -> list[tuple[str, str]] | None:
    """``[(Z, keep), ...]`` of ``Z = Z[keep]`` or ``Z, C = Z[keep], C[keep]``; None for any other statement."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target, value = stmt.targets[0], stmt.value
    targets = target.elts if isinstance(target, ast.Tuple) else [target]
    values = value.elts if isinstance(value, ast.Tuple) and isinstance(target, ast.Tuple) else [value]
    if len(targets) != len(values):
        return None
    pairs: list[tuple[str, str]] = []
    for t, v in zip(targets, values, strict=True):
        if not (isinstance(t, ast.Name) and isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and
                v.value.id == t.id and isinstance(v.slice, ast.Name) and v.slice.id != t.id):
            return None
        pairs.append((t.id, v.slice.id))
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names) or {mask for _, mask in pairs} & set(names):
        return None
    return pairs


_READERS = frozenset({"sum", "prod", "mean", "max", "min", "argmax", "argmin", "any", "all", "copy", "astype",
                      "conj", "conjugate", "dot", "std", "var"})
"""The methods of an array that read it only."""


def _written_before(body: Sequence[ast.stmt], at: ast.stmt, name: str) -> bool:
    """Whether the statements of ``body`` before ``at`` may write into ``name``'s array: a store into it, a call
    made for its effect that reads it, it as a call's output (a positional argument after the first, ``out=``),
    a method of it but those that read it only. Conservative: a call reading it there may be refused too."""
    for stmt in body[:body.index(at)]:
        for node in walk(stmt):
            if isinstance(node, ast.Expr) and any(isinstance(n, ast.Name) and n.id == name for n in walk(node)):
                return True
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
                return True
            if isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store) and \
                    _base(node) == name:
                return True
            if isinstance(node, ast.Call) and (any(_base(a) == name for a in node.args[1:]) or any(
                    k.arg == "out" and name in {_base(v) for v in walk(k.value)} for k in node.keywords) or
                    (isinstance(node.func, ast.Attribute) and _base(node.func.value) == name and
                     node.func.attr not in _READERS)):
                return True
    return False


def _base(node: ast.AST) -> str | None:
    """The name ``node`` (``x``, ``x[1:]``, ``x.real``) reads an array through, if any."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _group(body: Sequence[ast.stmt]) -> tuple[list[str], str, list[ast.stmt]]:
    """The arrays ``body`` (a loop's) shrinks, by the first run of statements that stand together, each of them
    ``Z = Z[keep]`` of one mask; that mask; those statements."""
    group: list[str] = []
    mask, run = "", []
    for stmt in body:
        pairs = _compactions(stmt)
        if pairs is None or (mask and {m for _, m in pairs} != {mask}) or len({m for _, m in pairs}) != 1:
            if group:
                break
            continue
        mask = pairs[0][1]
        run.append(stmt)
        group += [name for name, _ in pairs if name not in group]
    return group, mask, run
