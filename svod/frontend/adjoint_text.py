"""The pieces an adjoint kernel's source is made of (``svod.frontend.adjoint``): the values a work item computes,
its sequential loops as blocks of their own, and the text of statements: lines, names, ranges.

A statement is a pair of its source and the line of the kernel's source it comes from; a statement of several
lines is indented relative to its first. A block's forward (``Forward``) is a list of statements and of the loops
among them, written out when the adjoint's source is put together.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from svod.frontend.derivatives import Rule
from svod.frontend.nodes import walk


@dataclass
class Value:
    """One value of the forward a work item computes, in the order it computes them: an operation's result
    (``rule``), a load (``array``), or a store (``stored``)."""

    result: str
    operands: tuple[str, ...]
    guard: str | None
    line: int
    rule: Rule | None = None
    array: str | None = None
    index: str = ""
    own: tuple[int, ...] | None = None
    """For a load: where in its index each parallel loop's variable stands as a component of its own, if each
    does (no two work items read one element through indices alike)."""
    alone: tuple[int, ...] | None = None
    """``own``, but of the parallel loops of more than one turn: how the read's adjoint adds (``+=`` where alike)."""
    stored: str | None = None
    """For a store: ``"="``, ``"+="`` or ``"-="``."""


@dataclass
class Carried:
    """A local a sequential loop's turns carry: assigned before the loop and in its body."""

    phi: str
    """The adjoint kernel's local that holds it at each turn's start, and after the loop."""
    start: str
    """Its value before the loop."""
    end: str = ""
    """Its value at a turn's end."""


@dataclass
class Loop:
    """A sequential ``for ... in range(...)`` loop of a work item: its turns' forward and values, as a block of
    their own (``svod.frontend.adjoint``)."""

    variable: str
    """The adjoint kernel's name for the loop's variable."""
    first: str
    stop: str
    step: int
    carried: list[Carried]
    forward: list[tuple[str, int] | Loop]
    values: list[Value | Loop]
    line: int

    def range(self) -> str:
        return f"range({self.first}, {self.stop}{'' if self.step == 1 else f', {self.step}'})"

    def reversed(self) -> tuple[str, str | None]:
        """The header of a loop over the turns, the last first (empty where ``range(a, b, s)`` is), and the line
        that sets the loop's variable at each turn, if the header's does not: a strided range's is clamped to
        the range's bounds, which a proof that the accesses stay in bounds and apart can read."""
        first, stop, step = self.first, self.stop, self.step
        if step == 1:
            return f"for {self.variable} in range({offset(stop, -1)}, {offset(first, -1)}, -1):", None
        if step == -1:
            return f"for {self.variable} in range({offset(stop, 1)}, {offset(first, 1)}):", None
        turn = f"_svod_w{self.variable.removeprefix('_svod_k')}"
        span = minus(stop, first) if step > 0 else minus(first, stop)
        last = f"({span} + {abs(step) - 1}) // {abs(step)} - 1"
        low, high = (first, offset(stop, -1)) if step > 0 else (offset(stop, 1), first)
        return (f"for {turn} in range({first} + ({last}) * {step}, {offset(first, -step)}, {-step}):",
                f"{self.variable} = min(max({turn}, {low}), {high})")


Forward = list[tuple[str, int] | Loop]
"""A block's forward: lines (each one statement) and the loops among them."""
Lines = list[tuple[str, int]]
"""Statements of the adjoint kernel's source, each with the line of the kernel's source it comes from; a statement
of several lines is indented relative to its first."""


def flat(values: list[Value | Loop]) -> list[Value]:
    """The values of a block and of the loops in it."""
    return [w for v in values for w in (flat(v.values) if isinstance(v, Loop) else [v])]


def assigned_names(body: list[ast.stmt]) -> list[str]:
    """The names statements assign, loops' variables too, in the order they come."""
    names = [n.id for stmt in body for n in walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return list(dict.fromkeys(names))


def names_in(lines: Lines) -> tuple[set[str], set[str]]:
    """The names statements read, and those they assign."""
    tree = ast.parse("\n".join(text for text, _ in indented(lines, 0)))
    found = [n for n in walk(tree) if isinstance(n, ast.Name)]
    return {n.id for n in found if isinstance(n.ctx, ast.Load)}, {n.id for n in found if isinstance(n.ctx, ast.Store)}


def indented(lines: Lines, depth: int) -> Lines:
    """Statements as lines of source, each indented ``depth`` levels more."""
    return [("    " * depth + part, line) for text, line in lines for part in text.split("\n")]


def integer(node: ast.expr) -> int | None:
    """The integer a constant such as ``3`` or ``-1`` is, if ``node`` is one."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return sign * node.value
    return None


def minus(a: str, b: str) -> str:
    """The source of ``a - b``, ``b`` a name or an integer."""
    value = integer(ast.parse(b, mode="eval").body)
    return a if value == 0 else f"{a} + {-value}" if value is not None and value < 0 else f"{a} - {b}"


def offset(a: str, k: int) -> str:
    """The source of ``a + k``, ``a`` a name or an integer."""
    value = integer(ast.parse(a, mode="eval").body)
    return repr(value + k) if value is not None else a if k == 0 else f"{a} + {k}" if k > 0 else f"{a} - {-k}"


def renamed(lines: Lines, name: str, new: str) -> Lines:
    """``lines`` with the name ``name`` (one of svod's own) spelled ``new``."""
    found = re.compile(rf"\b{re.escape(name)}\b")
    return [(found.sub(new, text), line) for text, line in lines]


def components(index: ast.expr) -> list[ast.expr]:
    """An index's components: a tuple's elements, or the one expression it is."""
    return index.elts if isinstance(index, ast.Tuple) else [index]


def shifted(index: str, loops: list[str]) -> bool:
    """Whether ``index`` holds each parallel loop's variable plus an integer constant (``i - 1``) as a component of
    its own, and its other components are constants or sequential loops' variables: then no two work items reach
    one element through it, whatever the sizes (``svod.codegen.safety`` proves the pass that adds through it)."""
    parts = components(ast.parse(index, mode="eval").body)
    found = [_variable(part) for part in parts]
    if sorted(v for v in found if v is not None) != sorted(loops):
        return False
    return all(v is not None or integer(part) is not None
               or (isinstance(part, ast.Name) and part.id.startswith("_svod_k"))
               for part, v in zip(parts, found, strict=True))


def _variable(part: ast.expr) -> str | None:
    """The variable ``part`` is, or adds or subtracts an integer constant to, if it is one such."""
    found = _affine(part)
    return found[0] if found is not None and not found[0].startswith("_svod_") else None


def _affine(part: ast.expr) -> tuple[str, int] | None:
    """The name and the integer constant ``part`` adds to it (``i``, ``i - 1``, ``1 + i``), if it is one such."""
    if isinstance(part, ast.Name):
        return part.id, 0
    if isinstance(part, ast.BinOp) and isinstance(part.op, (ast.Add, ast.Sub)):
        right, left = integer(part.right), integer(part.left)
        if right is not None and isinstance(part.left, ast.Name):
            return part.left.id, right if isinstance(part.op, ast.Add) else -right
        if isinstance(part.op, ast.Add) and left is not None and isinstance(part.right, ast.Name):
            return part.right.id, left
    return None


def canonical(index: str) -> str:
    """``index`` with each component that adds an integer constant to a name spelled one way (``1 + i`` and
    ``i - -1`` as ``i + 1``, ``i + 0`` as ``i``): reads of one element then have one index's text, so that their
    adjoints share a pass (``shifted``) and a read back of a stored element is recognised however it is spelled."""
    node = ast.parse(index, mode="eval").body
    spelled = []
    for part in components(node):
        found = _affine(part)
        spelled.append(ast.parse(offset(*found), mode="eval").body if found is not None else part)
    return ast.unparse(ast.Tuple(spelled, ast.Load()) if isinstance(node, ast.Tuple) else spelled[0])


def total(shares: list[str]) -> str:
    return " + ".join(shares) or "0.0"


def place(index: ast.expr, loops: list[str]) -> tuple[int, ...] | None:
    """Where in ``index`` each of ``loops`` stands as a component of its own (``x[i, 0]``: ``(0,)``), or None
    if one does not: reads whose parallel loops' variables stand alike are each work item's own."""
    parts = components(index)
    names = [p.id if isinstance(p, ast.Name) else None for p in parts]
    if any(names.count(loop) != 1 for loop in loops):
        return None
    return tuple(names.index(loop) for loop in loops)


def one_turn(loop: ast.For) -> bool:
    """Whether ``loop`` is a ``svod.prange(1)``: its one work item's elements are no other's."""
    call = loop.iter
    return isinstance(call, ast.Call) and [ast.dump(a) for a in call.args] == [ast.dump(ast.Constant(1))]


def zeroed_then_read(values: list[Value | Loop], grads: set[str]) -> bool:
    """Whether the backward reads an element's adjoint after it set one of that array's to zero: a store with
    ``=`` that comes after another store into its array, or one that a sequential loop repeats. A pass writes
    no array's adjoint but the one it adds into, so it would read such an element's adjoint as it was before the
    zero; its reads' adjoints then add atomically in the adjoint kernel, which sets and reads the zeros."""
    stored: set[str] = set()
    for v in values:
        if isinstance(v, Loop):
            if any(w.stored == "=" and w.array in grads for w in flat(v.values)):
                return True
            stored |= {w.array for w in flat(v.values) if w.stored is not None and w.array is not None}
        elif v.stored is not None and v.array is not None:
            if v.stored == "=" and v.array in stored and v.array in grads:
                return True
            stored.add(v.array)
    return False


def passed_through(body: Lines, exit: str, start: str) -> bool:
    """Whether a turn's adjoint hands a carried local's adjoint from its end (``exit``) to its start (``start``)
    unchanged, through copies the turn makes unconditionally (a sum's ``s = s + t``): then the adjoint is the same
    in every turn, and setting it at the turn's end, which would carry it from turn to turn, is left out."""
    copies = dict(text.split(" = ") for text, _ in body if re.fullmatch(r"\w+ = \w+", text))
    seen = {start}
    while start in copies and copies[start] not in seen:
        start = copies[start]
        seen.add(start)
    return start == exit


class Renamer(ast.NodeTransformer):
    """Replaces each local's name with the forward's name for its value, and a read of the element a work item
    stored with what it stored (``WorkItem.held``, ``svod.frontend.adjoint_forward``)."""

    def __init__(self, env: dict[str, str], held: dict[str, tuple[str, str | None] | None]) -> None:
        self.env = env
        self.held = held

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if isinstance(node.ctx, ast.Load) and node.id in self.env:
            return ast.parse(self.env[node.id], mode="eval").body
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        self.generic_visit(node)
        held = self.held.get(node.value.id) if isinstance(node.value, ast.Name) else None
        if held is not None and held[1] is not None and held[0] == canonical(ast.unparse(node.slice)):
            return ast.parse(held[1], mode="eval").body
        return node


def nested_call(name: str, count: int) -> str:
    """``max(max(a, b), c)``: ``count`` arguments (at least two) as nested calls of two."""
    letters = [chr(ord("a") + k) for k in range(min(count, 4))] + (["..."] if count > 4 else [])
    text = f"{name}({letters[0]}, {letters[1]})"
    for letter in letters[2:]:
        text = f"{name}({text}, {letter})"
    return text if count >= 2 else f"{name}(a, b)"


def select_rule(test: str) -> Rule:
    """The rule of ``a if test else b``: the branch taken takes the adjoint."""
    return lambda o, r, g: (f"({g} if {test} else 0.0)", f"(0.0 if {test} else {g})")


def both(guard: str | None, test: str) -> str:
    return test if guard is None else f"({guard}) and ({test})"


def expression(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


__all__ = ["Carried", "Forward", "Lines", "Loop", "Renamer", "Value", "assigned_names", "both", "canonical",
           "expression", "flat", "indented", "integer", "minus", "names_in", "nested_call", "offset", "one_turn",
           "passed_through", "place", "renamed", "select_rule", "shifted", "total", "zeroed_then_read"]
