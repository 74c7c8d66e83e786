"""The backward of a kernel's work item (``svod.frontend.adjoint``): from the values ``svod.frontend.adjoint_forward``
read, each value's adjoint in reverse by the rules of derivatives (``svod.frontend.derivatives``), each sequential
loop's turns last first, and each read's adjoint added into its array's: with ``+=`` where the read is the work
item's own element, in a pass of its own for a shifted or a broadcast read, with ``svod.atomic_add`` elsewhere.
"""

from __future__ import annotations

import ast
import itertools
import re

from svod.frontend.adjoint_forward import WorkItem
from svod.frontend.adjoint_sums import Element, Reduction, reductions, turn_sums
from svod.frontend.adjoint_text import (
    Forward,
    Lines,
    Loop,
    Value,
    components,
    flat,
    indented,
    integer,
    names_in,
    passed_through,
    place,
    renamed,
    shifted,
    total,
    zeroed_then_read,
)
from svod.frontend.nodes import walk
from svod.frontend.pykernel import Kernel

ATOMIC_ADD = "_svod_atomic_add"
"""What the adjoint kernel's source calls ``svod.atomic_add``."""


class Backward(WorkItem):
    """Writes the backward of a work item read by ``WorkItem`` (the module's docstring)."""

    def __init__(self, kernel: Kernel, floats: frozenset[str], stored: frozenset[str] = frozenset(),
                 spent: frozenset[str] = frozenset()) -> None:
        super().__init__(kernel)
        self.floats = floats
        self.stored = stored
        """The arrays whose adjoints are new (zeros) and take one plain add per element: stored, not added
        (``storable``)."""
        self.spent = spent
        """The arrays the kernel writes whose adjoints before the call nothing reads after the adjoint: their
        adjoints are read, not set to zero where the kernel overwrote them (a store nothing would read)."""
        self.writes = False
        """Whether the backward writes an adjoint: one that does not is no kernel (it would store nothing)."""
        self.grads: dict[str, str] = {}
        """Each float array's adjoint's parameter (``grad_names``), for the backward."""
        self.plain: set[str] = set()
        """The arrays every read of which is the work item's own element: their adjoints add with ``+=``."""
        self.shifted: list[tuple[str, str]] = []
        """The arrays and indices of the reads whose adjoints add in a pass of their own (``Adjoint.passes``)."""
        self.folded: tuple[str, str] | None = None
        """The array and index of the shifted read whose adjoint the adjoint kernel adds itself, with no pass: the
        last one, where the kernel touches that array's adjoint nowhere else (it writes no element of the array,
        and reads it at no other index)."""
        self.reduced: list[Reduction] = []
        """The passes that sum broadcast reads' adjoints (``svod.frontend.adjoint_sums``); none where the kernel adds
        with ``svod.atomic_add`` (``atomic``): its forward's sums take an order the threads decide, and a pass per
        group would run its body again (a pair loop's two took three times its privatised atomic adds)."""
        self.turns: dict[Element, str] = {}
        """The reads of the sequential loop being written whose adjoints its turns sum in a local (``turn_sums``)."""
        self.scatter: tuple[str, str] | Reduction | None = None
        """The array and index the pass being written adds into, or the broadcast reads it sums; None: the adjoint
        kernel's own backward."""

    def grad_names(self) -> tuple[tuple[str, str], ...]:
        taken = set(self.parameters) | {n.id for n in walk(self.source.node) if isinstance(n, ast.Name)}
        grads = []
        for array in self.parameters:
            if array in self.floats and (array in self.reads or array in self.written):
                name = f"{array}_grad"
                while name in taken:
                    name += "_"
                taken.add(name)
                grads.append((array, name))
        return tuple(grads)

    def backward(self, grads: dict[str, str], reorderable: bool) -> None:
        """How the work item's adjoint adds into each array's: with ``+=`` where every read of the array is the
        work item's own element (``plain``), in a pass of its own for a read at a shifted index (``shifted``) and
        for a group of broadcast reads (``reduced``, where the parallel loops may be ``reorderable``), atomically
        elsewhere."""
        every = list(flat(self.values))
        places: dict[str, set[tuple[int, ...] | None]] = {}
        for v in every:
            if v.array is not None and v.stored is None:
                places.setdefault(v.array, set()).add(v.own)
        plain = {array for array, found in places.items() if len(found) == 1 and None not in found}
        for v in every:
            if v.stored == "=" and v.array in places and v.array not in plain and v.array in grads:
                self.line = next(r.line for r in every if r.array == v.array and r.stored is None)
                raise self.refuse(ast.Name(v.array), f"a read of {v.array} at elements of other work items, and a "
                                  f"store into {v.array}: its adjoint would add into what another work item's sets "
                                  f"to zero", f"write {v.array}'s new values into another array")
        passes = not zeroed_then_read(self.values, set(grads))
        loaded = list(dict.fromkeys((v.array, v.index) for v in every if v.array in grads and v.stored is None))
        self.reduced = reductions(loaded, self.spread, self.loops, self.counter) \
            if passes and reorderable and not self.atomic else []
        summed = {(array, index) for reduction in self.reduced for array, index, _ in reduction.sums}
        alone: dict[str, set[tuple[int, ...] | None]] = {}
        for v in every:
            if v.array is not None and v.stored is None and (v.array, v.index) not in summed:
                alone.setdefault(v.array, set()).add(v.alone)
        self.grads, self.plain = grads, {array for array, found in alone.items()
                                             if len(found) == 1 and None not in found}
        reads = [(v.array, v.index) for v in every if passes and v.array is not None and v.stored is None
                 and v.array in grads and v.array not in self.plain and shifted(v.index, self.loops)]
        self.shifted = list(dict.fromkeys(reads))
        last = self.shifted[-1][0] if self.shifted else None
        if last is not None and last not in self.written and all(
                (v.array, v.index) in self.shifted for v in every if v.array == last and v.stored is None):
            self.folded = self.shifted.pop()

    def adds(self, array: str, index: str) -> bool | str | None:
        """How the pass being written adds the adjoint of a read of ``array[index]``: with ``+=`` (True), with
        ``svod.atomic_add`` (False), into a local of a broadcast read's sum (its name), or not at all (None: another
        pass adds it)."""
        if isinstance(self.scatter, Reduction):
            return self.scatter.local(array, index)
        if any(reduction.local(array, index) is not None for reduction in self.reduced):
            return None
        if (array, index) == self.folded:
            return True if self.scatter is None else None
        if (array, index) in self.shifted:
            return True if self.scatter == (array, index) else None
        return None if self.scatter is not None else array in self.plain

    def backward_block(self, values: list[Value | Loop], shares: dict[str, list[str]]) -> Lines:
        """The adjoint of a block's values, from the last to the first; ``shares`` holds, per value, the shares of
        its adjoint its users gave."""
        grads = self.grads
        lines: Lines = []
        for v in reversed(values):
            if isinstance(v, Loop):
                lines += self.backward_loop(v, shares)
                continue
            if v.stored is not None:
                if v.array not in grads:
                    continue
                held = f"_svod_b{next(self.counter)}"
                element = f"{grads[v.array]}[{v.index}]"
                read = element if v.guard is None else f"({element} if {v.guard} else 0.0)"
                lines.append((f"{held} = {read}", v.line))
                if v.stored == "=" and self.scatter is None and v.array not in self.spent:
                    lines.append((f"{element} = 0.0" if v.guard is None else f"if {v.guard}:\n    {element} = 0.0",
                                  v.line))
                    self.writes = True
                shares.setdefault(v.operands[0], []).append(f"-{held}" if v.stored == "-=" else held)
                continue
            found = shares.get(v.result)
            plain = self.adds(v.array, v.index) if v.array is not None else None
            if not found or (v.array is not None and (v.array not in grads or plain is None)):
                continue
            adjoint = v.result.replace("_svod_a", "_svod_d")
            lines.append((f"{adjoint} = {' + '.join(found)}", v.line))
            if v.array is not None:
                local = self.turns.get((v.array, v.index, v.guard))
                add = f"{local} += {adjoint}" if local is not None else \
                    self.add(v.array, v.index, adjoint, plain or False)
                lines.append((add if v.guard is None else f"if {v.guard}:\n    {add}", v.line))
                self.writes = True
                continue
            assert v.rule is not None
            for operand, share in zip(v.operands, v.rule(v.operands, v.result, adjoint), strict=True):
                if share is not None and operand.startswith("_svod_a"):
                    shares.setdefault(operand, []).append(share if v.guard is None
                                                          else f"({share} if {v.guard} else 0.0)")
        return lines

    def add(self, array: str, index: str, adjoint: str, how: bool | str) -> str:
        """The statement that adds ``adjoint`` into ``array[index]``'s adjoint ``how`` ``adds`` says."""
        if isinstance(how, str):
            return f"{how} += {adjoint}"
        target = self.grads[array]
        if not how:
            return f"{ATOMIC_ADD}({target}, {index}, {adjoint})"
        return f"{target}[{index}] {'=' if array in self.stored else '+='} {adjoint}"

    def backward_loop(self, loop: Loop, shares: dict[str, list[str]]) -> Lines:
        """A sequential loop's adjoint: its turns' adjoints, the last turn's first. A carried local's adjoint
        passes from a turn's end to its start (``_svod_c``), where a value after the loop, or a carried local
        that does, depends on it; a value from before the loop adds the shares each turn gives it into a sum of
        its own (``_svod_e``). A turn's adjoint needs its forward values: those that do not depend on the carried
        locals are computed again from the loop's variable alone (a sum's turns need no more); where the adjoint
        needs one that does, the forward's turns before it run again first, to the carried locals' values at its
        start."""
        live = {c.phi for c in loop.carried if shares.get(c.phi)}
        changed = names_in(self.render(loop.forward))[1] | {loop.variable} | {c.phi for c in loop.carried}
        outside, self.turns = self.turns, turn_sums(loop, changed, lambda v: v.array in self.grads and v.array not in
                                                    self.written and self.adds(v.array, v.index) is not None,
                                                    self.counter)
        sums_of_turns = self.turns
        while True:  # a carried local whose adjoint is zero takes no part: 0 * inf would make NaNs of nothing
            carried = [c for c in loop.carried if c.phi in live]
            exits = [f"_svod_c{next(self.counter)}" for _ in carried]
            inner: dict[str, list[str]] = {}
            for c, e in zip(carried, exits, strict=True):
                inner.setdefault(c.end, []).append(e)
            body = self.backward_block(loop.values, inner)
            grown = {c.phi for c in loop.carried if inner.get(c.phi)} - live
            if not grown:
                break
            live |= grown
        self.turns = outside
        lines: Lines = [(f"{e} = {total(shares.pop(c.phi, []))}", loop.line)
                        for c, e in zip(carried, exits, strict=True)]
        if not body and not carried:
            return lines
        phis = {c.phi for c in loop.carried}
        tainted, kept = set(phis), []
        assigned: set[str] = set()
        for entry in loop.forward:
            loads, stores = names_in(self.render([entry]))
            assigned |= stores
            if loads & tainted:
                tainted |= stores
            else:
                kept.append(entry)
        before = [n for n in inner if n.startswith("_svod_a") and n not in assigned and n not in phis]
        sums = {n: f"_svod_e{next(self.counter)}" for n in before}
        tail = [(f"{e} = {total(inner.get(c.phi, []))}", loop.line) for c, e in zip(carried, exits, strict=True)
                if not passed_through(body, e, total(inner.get(c.phi, [])))]
        tail += [(f"{sums[n]} += {' + '.join(inner[n])}", loop.line) for n in before]
        rerun = bool(names_in([*body, *tail])[0] & tainted)
        alike = all(passed_through(body, e, total(inner.get(c.phi, []))) for c, e in zip(carried, exits, strict=True))
        header, clamp = loop.reversed() if rerun or not alike or any(v.stored for v in flat(loop.values)) \
            else (f"for {loop.variable} in {loop.range()}:", None)
        inside: Lines = [] if clamp is None else [(clamp, loop.line)]
        if rerun:
            earlier = f"_svod_u{loop.variable.removeprefix('_svod_k')}"
            inside += [(f"{c.phi} = {c.start}", loop.line) for c in loop.carried]
            inside.append((f"for {earlier} in range({loop.first}, {loop.variable}, {loop.step}):", loop.line))
            inside += renamed(indented(self.turn(loop, loop.forward, carry=True), 1), loop.variable, earlier)
            kept = loop.forward
        inside += [*self.render(kept), *body, *tail]
        used = set().union(*names_in(body)) if body else set()
        summed = {element: local for element, local in sums_of_turns.items() if local in used}
        lines += [(f"{local} = 0.0", loop.line) for local in [*(sums[n] for n in before), *summed.values()]]
        lines.append((header, loop.line))
        lines += indented(inside, 1)
        for (array, index, guard), local in summed.items():
            add = self.add(array, index, local, self.adds(array, index) or False)
            lines.append((add if guard is None else f"if {guard}:\n    {add}", loop.line))
        for c, e in zip(carried, exits, strict=True):
            shares.setdefault(c.start, []).append(e)
        for n in before:
            shares.setdefault(n, []).append(sums[n])
        return lines

    def storable(self, kernel: Lines, passes: list[Lines]) -> frozenset[str]:
        """The arrays whose adjoint a store could set where it is new (all zeros) for the same result: the
        kernel only reads the array, its passes name the adjoint nowhere, and the adjoint kernel names it in
        plain adds only, each run at most once per work item (under conditions, in no sequential loop) into the
        work item's own elements (``plain``), which no other work item's reaches, no two into one element
        (``_apart``: a row's columns, ``x[i, 0]`` and ``x[i, 1]``)."""
        found = []
        texts = _statements(kernel)
        for array, grad in self.grads.items():
            if array in self.written or array in self.updated or array not in self.plain \
                    or any(_naming(_statements(lines), grad) for lines in passes):
                continue
            places = _naming(texts, grad)
            adds = [texts[k].lstrip() for k in places]
            if places and all(text.startswith(f"{grad}[") and "] += " in text for text in adds) \
                    and all(_conditional(texts, k) for k in places) \
                    and _apart([_added_at(text, grad) for text in adds]):
                found.append(array)
        return frozenset(found)

    def covered(self, kernel: Lines, storable: frozenset[str], nest: list[ast.For]
                ) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Of ``storable``, the arrays whose adjoint the adjoint kernel adds into once, in every work item, under
        no condition, at the element its parallel loops' variables index (each a component of its own, and
        nothing else): where the loops' extents are the array's shape, its store sets every element. Each with
        those extents' expressions, by the array's dimension (``Adjoint.covers`` works them out for a call)."""
        stops = [_stop(loop) for loop in nest]
        if any(stop is None or names_in([(stop, 0)])[0] & set(self.loops) for stop in stops):
            return ()  # (an extent that is a loop's variable varies: a triangle's inner loop reaches no square)
        texts = _statements(kernel)
        found = []
        for array in sorted(storable):
            grad = self.grads[array]
            places = _naming(texts, grad)
            if len(places) != 1 or not texts[places[0]].startswith(f"{grad}["):  # (indented: under an if)
                continue
            index = ast.parse(_added_at(texts[places[0]], grad), mode="eval").body
            where = place(index, self.loops)
            if where is None or len(components(index)) != len(nest):
                continue
            extents = [""] * len(nest)
            for component, stop in zip(where, stops, strict=True):
                extents[component] = str(stop)
            found.append((array, tuple(extents)))
        return tuple(found)

    def render(self, forward: Forward) -> Lines:
        """A block's forward as the adjoint kernel's statements, its loops written out."""
        lines: Lines = []
        for entry in forward:
            if isinstance(entry, Loop):
                lines += [(f"{c.phi} = {c.start}", entry.line) for c in entry.carried]
                lines.append((f"for {entry.variable} in {entry.range()}:", entry.line))
                lines += indented(self.turn(entry, entry.forward, carry=True), 1)
            else:
                lines.append(entry)
        return lines

    def turn(self, loop: Loop, forward: Forward, carry: bool) -> Lines:
        """``forward`` of one of ``loop``'s turns (what of it is needed), and where ``carry`` says, the carried
        locals set to the turn's end."""
        lines = self.render(forward)
        if carry:
            lines += [(f"{c.phi} = {c.end}", loop.line) for c in loop.carried]
        return lines or [("pass", loop.line)]


def _statements(kernel: Lines) -> list[str]:
    """A kernel's source lines, each holding one statement (or its header)."""
    return [part for text, _ in kernel for part in text.split("\n")]


def _naming(texts: list[str], grad: str) -> list[int]:
    """The lines of ``texts`` that name the adjoint ``grad``."""
    named = re.compile(rf"\b{re.escape(grad)}\b")
    return [k for k, text in enumerate(texts) if named.search(text)]


def _added_at(add: str, grad: str) -> str:
    """The index of ``grad[index] += ...`` (``add`` stripped of its indent)."""
    return add[len(grad) + 1:add.index("] += ")]


def _stop(loop: ast.For) -> str | None:
    """The extent of a ``svod.prange`` that counts from 0 (``prange(n)``, ``prange(0, n)``), as its source spells
    it; None for another."""
    call = loop.iter
    if not isinstance(call, ast.Call) or call.keywords or len(call.args) not in (1, 2) \
            or any(isinstance(arg, ast.Starred) for arg in call.args):
        return None
    if len(call.args) == 2 and integer(call.args[0]) != 0:
        return None
    return ast.unparse(call.args[-1])


def _apart(indices: list[str]) -> bool:
    """Whether the indices reach one element each: every two differ in a component that is an integer constant
    in both."""
    parts = [[integer(p) for p in components(ast.parse(index, mode="eval").body)] for index in indices]
    return all(len(a) == len(b) and any(x is not None and y is not None and x != y for x, y in zip(a, b, strict=True))
               for a, b in itertools.combinations(parts, 2))


def _conditional(texts: list[str], place: int) -> bool:
    """Whether every statement around line ``place`` of ``texts`` (each line holding one) is an ``if``, an
    ``elif`` or an ``else``: the line runs at most once."""
    depth = len(texts[place]) - len(texts[place].lstrip())
    for text in reversed(texts[:place]):
        indent = len(text) - len(text.lstrip())
        if indent < depth:
            if not text.lstrip().startswith(("if ", "elif ", "else:")):
                return False
            depth = indent
    return True


__all__ = ["ATOMIC_ADD", "Backward"]
