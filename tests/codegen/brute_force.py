"""An independent reference for the race and bounds analysis: at small sizes, run every work item and every
loop iteration of a kernel AST with plain Python integers and list what each one reads and writes.

It shares no code with ``svod.codegen.indexing``, ``svod.codegen.safety`` or ``svod.backends.python``: it
walks the UOp graph (``svod.ir``'s data structure) with its own evaluator of the ops indices and guards use.
Values read from memory are taken as 0 (the generated kernels never index with them), so what it decides
is exact for kernels whose indices and guards depend on ranges and variables only.

A work item is the values of the GLOBAL ranges an effect runs over (the non-REDUCE ranges its graph
uses); ranges of one iteration tell no items apart. Two effects' instances are the same work item only
when they run over the same such ranges with the same values, so an effect that runs over fewer ranges
than another never counts as the other's item (the strict reading: it is not known which item runs it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from svod.ir import AxisKind, Ops, UOp

Scalar = int | float | bool
"""A value the evaluator computes: an index, a flag, or a stand-in for a number read from memory."""
Item = tuple[tuple[int, int], ...]
"""A work item: ``(axis, value)`` of each GLOBAL range of more than one iteration, by axis."""


@dataclass
class Accesses:
    """Which work items wrote and read each ``(buffer slot, element)``, and the accesses outside buffers."""

    writes: dict[tuple[int, int], set[Item]] = field(default_factory=dict)
    reads: dict[tuple[int, int], set[Item]] = field(default_factory=dict)
    outside: set[tuple[int, int]] = field(default_factory=set)

    def race(self) -> bool:
        """Two items write one element, or one reads an element another writes."""
        for element, writers in self.writes.items():
            if len(writers) > 1 or self.reads.get(element, set()) - writers:
                return True
        return False


def accesses(sink: UOp, sizes: dict[int, int], variables: dict[str, int]) -> Accesses:
    """Every access of every effect of ``sink`` for one assignment of the variables; ``sizes`` gives each
    buffer slot's element count."""
    found = Accesses()
    for effect in sink.src:
        if effect.op is not Ops.STORE:
            continue
        ranges = sorted({u for u in effect.toposort() if u.op is Ops.RANGE and u.arg[1] is not AxisKind.REDUCE},
                        key=lambda r: r.arg[0])
        for env in _assignments(ranges, dict(variables)):
            item = tuple((r.arg[0], env[r]) for r in ranges
                         if r.arg[1] is AxisKind.GLOBAL and _extent(r, env) > 1)
            _Instance(env, item, sizes, found).effect(effect)
    return found


def _extent(r: UOp, env: dict) -> int:
    return int(_Instance(env, (), {}, Accesses()).value(r.src[0]))


def _assignments(ranges: list[UOp], env: dict) -> Iterator[dict]:
    """Every combination of the ranges' values (a range's end may use the variables and earlier ranges)."""
    if not ranges:
        yield dict(env)
        return
    first, rest = ranges[0], ranges[1:]
    for v in range(max(_extent(first, env), 0)):
        yield from _assignments(rest, {**env, first: v})


class _Instance:
    """One work item at one loop iteration: evaluates an effect, recording the accesses it makes."""

    def __init__(self, env: dict, item: Item, sizes: dict[int, int], found: Accesses) -> None:
        self.env, self.item, self.sizes, self.found = env, item, sizes, found

    def record(self, kind: dict[tuple[int, int], set[Item]], index: UOp) -> None:
        """Record an access through ``index`` unless its gate is false."""
        if len(index.src) == 3 and not self.value(index.src[2]):
            return
        slot, position = index.src[0].arg, int(self.value(index.src[1]))
        kind.setdefault((slot, position), set()).add(self.item)
        if not 0 <= position < self.sizes[slot]:
            self.found.outside.add((slot, position))

    def effect(self, effect: UOp) -> None:
        if len(effect.src[0].src) == 3 and not self.value(effect.src[0].src[2]):
            return
        self.value(effect.src[1])
        self.record(self.found.writes, effect.src[0])

    def value(self, node: UOp) -> Scalar:
        op = node.op
        if op is Ops.CONST:
            return node.arg
        if op is Ops.DEFINE_VAR:
            return self.env[node.arg[0]]
        if op is Ops.BIND:
            return node.src[1].arg
        if op is Ops.RANGE:
            return self.env[node]
        if op is Ops.WHERE:
            return self.value(node.src[1] if self.value(node.src[0]) else node.src[2])
        if op is Ops.LOAD:
            self.record(self.found.reads, node.src[0])
            return 0
        if op is Ops.REDUCE:
            total = 0
            for env in _assignments(sorted(node.src[1:], key=lambda r: r.arg[0]), self.env):
                total += _Instance(env, self.item, self.sizes, self.found).value(node.src[0]) or 0
            return total
        args = [self.value(s) for s in node.src]
        return _alu(op, node, args)


def _alu(op: Ops, node: UOp, args: list[Scalar]) -> Scalar:
    if op is Ops.CAST:
        target = node.dtype
        return float(args[0]) if target.is_float else bool(args[0]) if target.name == "bool" else int(args[0])
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.MIN, Ops.NEG, Ops.FDIV):
        return {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
                Ops.MAX: max, Ops.MIN: min, Ops.NEG: lambda a: -a,
                Ops.FDIV: lambda a, b: a / b if b else 0.0}[op](*args)
    if op is Ops.IDIV:  # C: toward zero
        q = abs(args[0]) // abs(args[1])
        return q if (args[0] >= 0) == (args[1] > 0) else -q
    if op is Ops.MOD:  # C: the sign of the dividend
        r = abs(args[0]) % abs(args[1])
        return r if args[0] >= 0 else -r
    comparisons = {Ops.CMPLT: lambda a, b: a < b, Ops.CMPLE: lambda a, b: a <= b, Ops.CMPEQ: lambda a, b: a == b,
                   Ops.CMPNE: lambda a, b: a != b}
    if op in comparisons:
        return comparisons[op](*args)
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        a, b = args
        return {Ops.AND: a & b, Ops.OR: a | b, Ops.XOR: a ^ b}[op]
    raise NotImplementedError(f"brute force: no evaluation of {op.name}")


def variable_values(sink: UOp) -> Iterator[dict[str, int]]:
    """Every assignment of the kernel's variables (each over its whole, small, range)."""
    found = sorted({u.arg for u in sink.toposort() if u.op is Ops.DEFINE_VAR})
    for values in itertools.product(*(range(lo, hi + 1) for _, lo, hi in found)):
        yield {name: v for (name, _, _), v in zip(found, values, strict=True)}
