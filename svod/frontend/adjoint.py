"""The adjoint of an ``@svod.kernel``: a second Python kernel, made from the first's source, that takes the
adjoints of the arrays the first wrote and gives those of the arrays it read (``svod.vjp``, ``svod.Tape``).

::

    @svod.kernel                                    def f_adjoint(y, x, y_grad, x_grad):
    def f(y, x):                                        for i in svod.prange(x.shape[0]):
        for i in svod.prange(x.shape[0]):                   _svod_a0 = x[i]                   the forward, each
            y[i] = svod.math.sin(x[i]) * 2.0   ──▶           _svod_a1 = _svod_math.sin(_svod_a0)  value a local
                                                            _svod_a2 = _svod_a1 * 2.0
                                                            _svod_b3 = y_grad[i]              y's adjoint read,
                                                            y_grad[i] = 0.0                   then what y held
                                                            _svod_d2 = _svod_b3               each value's adjoint,
                                                            _svod_d1 = _svod_d2 * 2.0         in reverse, by the
                                                            _svod_d0 = _svod_d1 * _svod_math.cos(_svod_a0)
                                                            x_grad[i] += _svod_d0             rules of derivatives

The adjoint is a kernel like any: svod translates, proves and compiles it on every device. A work item's
adjoint updates the adjoints of what it read and wrote in place, so the kernel maps the adjoints after the
forward to those before it: an overwritten element's adjoint becomes zero, one updated with ``+=`` keeps its
adjoint, and a read adds into its array's adjoint: with ``+=`` where every read of the array is the work item's
own element (its index holds each parallel loop's variable as a component, in one place), with
``svod.atomic_add`` elsewhere, as a gather's adjoint is a scatter-add. A read at a shifted index (a stencil's
``x[i - 1, j]``: each parallel loop's variable plus a constant) reaches one element per work item, so its
scatter-add is a plain ``+=`` in a kernel of its own that runs before the adjoint (``Adjoint.passes``): one pass
per index, so that two reads' additions into one element never meet in one kernel (the last index's adds in the
adjoint itself, where nothing else there touches that array's adjoint). A broadcast read, whose index holds some
parallel loops' variables and lacks the others (a layer norm's ``gamma[j]`` in rows ``i``, its ``mean[i, 0]`` in
columns ``j``), sums its adjoints over the loops it lacks in a pass of its own (``svod.frontend.adjoint_sums``), and
a read in a sequential loop whose element no turn changes sums its turns' adjoints in a local: one add per element,
in one order, where there was an atomic add per work item or turn.

What it differentiates: one ``svod.prange`` loop (or a nest of them) whose body holds loads, stores,
``+=``/``-=`` updates, ``svod.atomic_add``, ``if``/``else``, sequential ``for ... in range(...)`` loops,
arithmetic, the math functions, conditional expressions and ``min``/``max``/``abs``; statements before the loop
that read no array. A sequential loop's adjoint runs its turns last first (``backward_loop``): a local its turns
carry passes its adjoint from a turn's end to its start; a turn's forward values are computed again from the
loop's variable where they do not depend on a carried local (a sum), and otherwise by running the turns before it
again. A work item reads an
array before it writes it, or reads back the one element it stored (the value stored stands for the read), so
its reads see the array as the kernel found it: an array the kernel reads and writes is copied before the
forward runs (``Adjoint.saved``). Anything else is refused with a
``GradientError`` naming the line and what to change, never differentiated wrong.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import math as pymath
import weakref
from dataclasses import dataclass, field

import numpy as np

from svod.errors import GradientError
from svod.frontend import pylang
from svod.frontend.adjoint_sums import Element, Reduction, reduction_source, reductions, reorderable, turn_sums
from svod.frontend.adjoint_text import (
    Carried,
    Forward,
    Lines,
    Loop,
    Renamer,
    Value,
    assigned_names,
    both,
    canonical,
    expression,
    flat,
    indented,
    integer,
    names_in,
    nested_call,
    one_turn,
    passed_through,
    place,
    renamed,
    select_rule,
    shifted,
    total,
    zeroed_then_read,
)
from svod.frontend.array_math import MATH_HELPERS
from svod.frontend.derivatives import BINARY, BUILTINS, FUNCTIONS, HELPERS, MATH, UNARY, Rule, float_cast
from svod.frontend.pykernel import Kernel
from svod.frontend.source import Source
from svod.frontend.values import NUMPY_MATH

ATOMIC_ADD = "_svod_atomic_add"
"""What the adjoint kernel's source calls ``svod.atomic_add``."""


@dataclass(frozen=True)
class Adjoint:
    """A kernel's adjoint for one set of float array arguments.

    The adjoint kernel takes the kernel's arguments, then one adjoint array per name of ``grads`` (in order).
    """

    kernel: Kernel | None
    """None where the adjoint changes no adjoint (no float value reaches a float array)."""
    grads: tuple[tuple[str, str], ...]
    """Each float array argument the kernel reads or writes, with the name of its adjoint's parameter."""
    written: tuple[str, ...]
    """The array arguments the kernel writes, in argument order: a call's results."""
    reads: frozenset[str]
    """The array arguments whose values the kernel reads."""
    saved: frozenset[str]
    """The arrays the kernel reads and writes: copied before the forward, and the copy passed to the adjoint."""
    updated: frozenset[str] = frozenset()
    """The arrays the kernel updates (``+=``, ``-=``, ``svod.atomic_add``): what it leaves in them depends on what
    they held, as it does in an array it reads; in another array it writes, only where it stores nothing."""
    needed: frozenset[str] | None = None
    """The arrays whose values the adjoint reads (None: ``reads``): a tape keeps them as the call saw them. A
    linear kernel's adjoint (a stencil's, a sum's) reads none, so a tape keeps no copy for it and runs no call
    again."""
    passes: tuple[Kernel, ...] = ()
    """Kernels to run, in order, before ``kernel``: each adds the adjoints of the reads at one shifted index
    (``x[i - 1, j]``, each parallel loop's variable plus a constant) with a plain ``+=``, where ``kernel`` would
    add them atomically. No two work items of one pass add into one element, and the passes run one after
    another, so no two of their additions race; ``kernel`` reads the adjoints they read before it sets them to
    zero."""

    @property
    def needs(self) -> frozenset[str]:
        """The arrays whose values the adjoint reads."""
        return self.reads if self.needed is None else self.needed


_ADJOINTS: weakref.WeakKeyDictionary[Kernel, dict[frozenset[str], Adjoint]] = weakref.WeakKeyDictionary()


def adjoint(kernel: Kernel, floats: frozenset[str]) -> Adjoint:
    """The adjoint of ``kernel`` for a call whose float array arguments are ``floats`` (made once, then kept)."""
    made = _ADJOINTS.setdefault(kernel, {})
    if floats not in made:
        made[floats] = _Differentiator(kernel, floats).adjoint()
    return made[floats]


@dataclass
class _Lines:
    """Source lines of the adjoint kernel, each with the line of the kernel's source it comes from."""

    text: list[str] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)

    def add(self, text: str, line: int, depth: int) -> None:
        for part in text.split("\n"):
            self.text.append("    " * depth + part)
            self.origin.append(line)


class _Differentiator:
    """Reads a kernel's source and writes its adjoint's (the module's docstring)."""

    def __init__(self, kernel: Kernel, floats: frozenset[str]) -> None:
        self.kernel = kernel
        self.source = kernel.source
        self.floats = floats
        self.parameters = kernel.parameters
        self.env: dict[str, str] = {}
        self.values: list[Value | Loop] = []
        """The values of the block being read (the work item's, or a sequential loop's turn)."""
        self.forward: Forward = []
        self.written: list[str] = []
        self.reads: set[str] = set()
        self.needed: set[str] = set()
        self.loops: list[str] = []
        self.spread: list[str] = []
        """``loops`` but those of a ``svod.prange(1)``, whose one turn tells no two work items apart."""
        self.sequential: list[str] = []
        """The variables of the sequential loops around the statement being read."""
        self.counter = itertools.count()
        self.line = self.source.node.lineno
        self.held: dict[str, tuple[str, str | None] | None] = {}
        """Per array the work item stored to: the index of the one element it stored and what that holds now
        (None: what the kernel found there, before a ``+=``), or None where a read of the array is refused."""
        self.guard: str | None = None
        """What must hold for the statement being read to run (the conditions of the ifs around it)."""
        self.writes = False
        self.updated: set[str] = set()
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
        self.atomic = False
        self.turns: dict[Element, str] = {}
        """The reads of the sequential loop being written whose adjoints its turns sum in a local (``turn_sums``)."""
        self.scatter: tuple[str, str] | Reduction | None = None
        """The array and index the pass being written adds into, or the broadcast reads it sums; None: the adjoint
        kernel's own backward."""

    # ---- refusing ---------------------------------------------------------------------------------------

    def refuse(self, node: ast.AST, what: str, change: str) -> GradientError:
        line = getattr(node, "lineno", self.line)
        return GradientError(f"{self.source.file}:{line}: {what}: svod does not differentiate it; {change}",
                             kernel=self.kernel.name, stage="gradient", value=ast.unparse(node).split("\n")[0])

    # ---- the kernel's shape -----------------------------------------------------------------------------

    def adjoint(self) -> Adjoint:
        lines = _Lines()
        body = self.source.node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        loops = [stmt for stmt in body if isinstance(stmt, ast.For)]
        for stmt in body:
            if isinstance(stmt, ast.For):
                continue
            if (loops and stmt.lineno > loops[0].lineno) or not (
                    isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and not self.array_reads(stmt.value)):
                raise self.refuse(stmt, "a statement outside the kernel's svod.prange loop",
                                  "compute it inside the loop, or in a kernel of its own")
            lines.add(ast.unparse(stmt), stmt.lineno, 1)
        if len(loops) != 1 or not self.is_prange(loops[0]):
            raise self.refuse(loops[1] if len(loops) > 1 else self.source.node,
                              "a kernel that is not one svod.prange loop (or nest of them)",
                              "write one kernel per parallel loop")
        nest = self.nest(loops[0])
        for stmt in nest[-1].body:
            self.line = stmt.lineno
            self.statement(stmt)
        grads = self.grad_names()
        self.backward(dict(grads), reorderable(nest))
        kernels: list[Kernel | None] = []
        for scatter in [*self.shifted, *self.reduced, None]:
            self.scatter, self.writes = scatter, False
            backward = self.backward_block(self.values, {})
            work = [*indented(self.render(self.live(backward)), 0), *backward] or [("pass", nest[-1].lineno)]
            source = _Lines(list(lines.text), list(lines.origin))
            if isinstance(scatter, Reduction):
                work = reduction_source(nest, scatter, self.grads, work)
            else:
                work = [*[("    " * depth + f"for {ast.unparse(loop.target)} in {ast.unparse(loop.iter)}:",
                           loop.lineno) for depth, loop in enumerate(nest)], *indented(work, len(nest))]
            for text, line in work:
                source.add(text, line, 1)
            kernels.append(self.kernel_of(source, len(kernels) if scatter is not None else None))
        return self.result(grads, kernels[-1], tuple(k for k in kernels[:-1] if k is not None))

    def live(self, backward: Lines) -> Forward:
        """The forward's statements the backward's need, directly or through others (each sequential loop
        whole); ``needed`` (over every pass) the arrays they read. A value only the forward used (a linear
        kernel's) is left out, and with it a read of the array's values that the tape would otherwise keep for the
        adjoint."""
        wanted = names_in(backward)[0]
        kept: Forward = []
        for entry in reversed(self.forward):
            loads, stores = names_in(self.render([entry]))
            if isinstance(entry, Loop) or stores & wanted:
                kept.append(entry)
                wanted |= loads
        self.needed |= self.reads & wanted
        return kept[::-1]

    def is_prange(self, loop: ast.For) -> bool:
        return isinstance(loop.iter, ast.Call) and self.resolve(loop.iter.func) is pylang.prange

    def nest(self, loop: ast.For) -> list[ast.For]:
        """The parallel loops around the body, outermost first."""
        nest = [loop]
        while True:
            current = nest[-1]
            if not isinstance(current.target, ast.Name) or current.orelse:
                raise self.refuse(current, "a parallel loop over a tuple of variables, or with an else",
                                  "write for i in svod.prange(n) with one variable")
            self.loops.append(current.target.id)
            if not one_turn(current):
                self.spread.append(current.target.id)
            inner = current.body
            if len(inner) == 1 and isinstance(inner[0], ast.For) and self.is_prange(inner[0]):
                nest.append(inner[0])
                continue
            return nest

    def resolve(self, node: ast.expr) -> object:
        """The object a name or attribute of the source names, if the function's globals say."""
        if isinstance(node, ast.Name):
            return self.source.names.get(node.id, vars(builtins).get(node.id))
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return getattr(base, node.attr, None) if base is not None else None
        return None

    # ---- the forward, one statement at a time -----------------------------------------------------------

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            self.assign(stmt.targets[0], stmt.value, stmt)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            self.assign(stmt.target, ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value), stmt)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Subscript):
            if not isinstance(stmt.op, (ast.Add, ast.Sub)):
                raise self.refuse(stmt, "an update other than += and -= of an array element",
                                  "write y[i] = y[i] * e, which reads y[i] before writing it")
            self.store(stmt.target, stmt.value, "+=" if isinstance(stmt.op, ast.Add) else "-=", stmt)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                and self.resolve(stmt.value.func) is pylang.atomic_add and len(stmt.value.args) == 3:
            array, index, value = stmt.value.args
            self.store(ast.Subscript(array, index, ast.Store()), value, "+=", stmt, atomic=True)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, ast.While):
            raise self.refuse(stmt, "a while loop inside svod.prange (its number of turns is known only by running "
                              "it)", "write it as a for loop over range(...), or make each turn a kernel call")
        elif isinstance(stmt, ast.If):
            self.branch(stmt)
        else:
            what = "a call other than svod.atomic_add as a statement" if isinstance(stmt, ast.Expr) \
                else f"the statement {type(stmt).__name__}"
            raise self.refuse(stmt, what,
                              "write the work item as assignments, stores, += updates and svod.atomic_add")

    def branch(self, stmt: ast.If) -> None:
        """Both sides of an ``if``, each under its condition (a side not taken reads and stores nothing); a local
        either side assigns is a select after it."""
        outer, before = self.guard, dict(self.env)
        test = self.local(self.opaque(stmt.test), outer)
        sides = []
        for body, holds in ((stmt.body, test), (stmt.orelse, f"not {test}")):
            self.env, self.guard = dict(before), both(outer, holds)
            for inner in body:
                self.line = inner.lineno
                self.statement(inner)
            sides.append(self.env)
        self.env, self.guard = dict(before), outer
        for name in dict.fromkeys([*sides[0], *sides[1]]):
            taken, other = sides[0].get(name), sides[1].get(name)
            if taken == other:
                self.env[name] = taken or _ONE_SIDED
            elif taken in (None, _ONE_SIDED, _TURN_OWN) or other in (None, _ONE_SIDED, _TURN_OWN):
                self.env[name] = _ONE_SIDED  # refused where read after the if (``known``)
            else:
                self.env[name] = self.operation(f"({taken} if {test} else {other})", select_rule(test), (taken, other),
                                                outer)

    def loop(self, stmt: ast.For) -> None:
        """A sequential loop: its body read once as a turn's, in a block of its own. A local assigned before the
        loop and in its body is carried from turn to turn (``Carried``); one only its body assigns, and its
        variable, hold no value after it. An array the body writes is written for every read in the body (a turn
        would read what an earlier turn stored), so such reads are refused."""
        bounds = self.range_of(stmt)
        name = stmt.target.id if isinstance(stmt.target, ast.Name) else ""
        if name in self.parameters or name in self.loops or name in self.sequential:
            raise self.refuse(stmt, f"a loop whose variable {name} is an argument or another loop's variable",
                              "give the loop a variable of its own")
        first, stop, step = bounds
        for array in self.arrays_stored(stmt.body):
            self.held[array] = None
            if array not in self.written:
                self.written.append(array)
        assigned = assigned_names(stmt.body)
        before = dict(self.env)
        carried = [Carried(f"_svod_a{next(self.counter)}", before[n]) for n in assigned
                   if before.get(n, _TURN_OWN) not in (_TURN_OWN, _ONE_SIDED)]
        names = [n for n in assigned if before.get(n, _TURN_OWN) not in (_TURN_OWN, _ONE_SIDED)]
        loop = Loop(f"_svod_k{next(self.counter)}", first, stop, step, carried, [], [], stmt.lineno)
        self.env.update({n: _TURN_OWN for n in assigned})
        self.env.update({n: c.phi for n, c in zip(names, carried, strict=True)})
        self.env[name] = loop.variable
        outer = self.forward, self.values
        self.forward, self.values = loop.forward, loop.values
        self.sequential.append(name)
        for inner in stmt.body:
            self.line = inner.lineno
            self.statement(inner)
        self.line = stmt.lineno
        self.sequential.pop()
        self.turn_ends(stmt, dict(zip(names, carried, strict=True)))
        self.forward, self.values = outer
        self.forward.append(loop)
        self.values.append(loop)
        self.env = before
        self.env.update({n: _TURN_OWN for n in [*assigned, name]})
        self.env.update({n: c.phi for n, c in zip(names, carried, strict=True)})

    def turn_ends(self, stmt: ast.For, carried: dict[str, Carried]) -> None:
        """Set each carried local's value at a turn's end: a copy where it is another carried local's value at the
        turn's start, so that setting them one after another reads each turn's end, not the next turn's."""
        phis = {c.phi for c in carried.values()}
        for name, c in carried.items():
            end = self.env[name]
            if end in (_TURN_OWN, _ONE_SIDED):
                raise self.refuse(stmt, f"a loop whose turn leaves {name} without a value of its own",
                                  f"give {name} a value at each turn's end, or a loop variable of another name")
            c.end = self.operation(end, UNARY[ast.UAdd], (end,), self.guard) if end in phis and end != c.phi else end

    def range_of(self, stmt: ast.For) -> tuple[str, str, int]:
        """The start, the stop and the step of a sequential loop's ``range``, the first two as the adjoint's
        locals or constants."""
        call = stmt.iter
        if not (isinstance(call, ast.Call) and self.resolve(call.func) is range and not call.keywords
                and 1 <= len(call.args) <= 3):
            what = "a svod.prange loop that is not the body of the one around it" \
                if isinstance(stmt.iter, ast.Call) and self.is_prange(stmt) else "a loop over what is not range(...)"
            raise self.refuse(stmt, f"{what} inside svod.prange",
                              "loop over range(start, stop, step), or make the loop a kernel of its own")
        if not isinstance(stmt.target, ast.Name) or stmt.orelse:
            raise self.refuse(stmt, "a loop over a tuple of variables, or with an else",
                              "write for j in range(...) with one variable")
        args = call.args
        step = 1 if len(args) < 3 else integer(args[2])
        if not step:
            raise self.refuse(stmt, "a range whose step is not an integer constant other than 0",
                              "write the step as a number, such as range(n - 1, -1, -1)")
        first = "0" if len(args) == 1 else self.bound(args[0])
        return first, self.bound(args[1] if len(args) > 1 else args[0]), step

    def bound(self, node: ast.expr) -> str:
        value = integer(node)
        return repr(value) if value is not None else self.local(self.opaque(node), self.guard)

    def arrays_stored(self, body: list[ast.stmt]) -> list[str]:
        """The arrays statements store into, atomically too."""
        arrays: list[str] = []
        for node in (n for stmt in body for n in ast.walk(stmt)):
            target = node.value if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) else \
                node.args[0] if isinstance(node, ast.Call) and node.args and self.resolve(node.func) is \
                pylang.atomic_add else None
            if isinstance(target, ast.Name) and target.id in self.parameters and target.id not in arrays:
                arrays.append(target.id)
        return arrays

    def assign(self, target: ast.expr, value: ast.expr, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Subscript):
            self.store(target, value, "=", stmt)
            return
        if not isinstance(target, ast.Name) or target.id in self.parameters or target.id in self.loops \
                or target.id in self.sequential:
            raise self.refuse(stmt, "an assignment to a tuple, an argument or a loop variable",
                              "assign each value to a local name of its own")
        self.env[target.id] = self.value(value, self.guard)

    def store(self, target: ast.Subscript, value: ast.expr, how: str, stmt: ast.stmt, atomic: bool = False) -> None:
        if not (isinstance(target.value, ast.Name) and target.value.id in self.parameters):
            raise self.refuse(stmt, "a store into what is not an array argument", "store into an argument")
        stored = self.value(value, self.guard)
        array = target.value.id
        index = canonical(self.opaque(target.slice))
        self.hold(array, index, target.slice, stored, how, plain=self.guard is None and not atomic)
        self.values.append(Value("", (stored,), self.guard, stmt.lineno, array=array, index=index, stored=how))
        if array not in self.written:
            self.written.append(array)
        if how != "=" or atomic:
            self.updated.add(array)
        self.atomic |= atomic

    def hold(self, array: str, index: str, node: ast.expr, stored: str, how: str, plain: bool) -> None:
        """Keep what the element ``array[index]`` holds after a store, for a read of it after (``held``): a store
        under a condition, an atomic one, or one to another index makes the array's reads refused."""
        before = self.held.get(array, (index, None))
        if before is None or before[0] != index or not plain:
            self.held[array] = None
        elif how == "=":
            self.held[array] = (index, stored)
        else:
            current = before[1] if before[1] is not None else self.load(array, index, node, None)
            rule = BINARY[ast.Add] if how == "+=" else BINARY[ast.Sub]
            self.held[array] = (index, self.operation(f"{current} {how[0]} {stored}", rule, (current, stored), None))

    def value(self, node: ast.expr, guard: str | None) -> str:
        """``node`` computed as the forward computes it, one local per operation: the local's name, or the
        constant or name ``node`` is."""
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            return repr(node.value)
        if isinstance(node, ast.Name):
            self.known(node)
            return self.env.get(node.id, node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            operands = (self.value(node.left, guard), self.value(node.right, guard))
            text = ast.unparse(ast.BinOp(expression(operands[0]), node.op, expression(operands[1])))
            return self.operation(text, BINARY[type(node.op)], operands, guard)
        if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            operand = self.value(node.operand, guard)
            return self.operation(ast.unparse(ast.UnaryOp(node.op, expression(operand))), UNARY[type(node.op)],
                                  (operand,), guard)
        if isinstance(node, ast.Call):
            return self.call(node, guard)
        if isinstance(node, ast.IfExp):
            test = self.local(self.opaque(node.test), guard)
            body = self.value(node.body, both(guard, test))
            other = self.value(node.orelse, both(guard, f"not {test}"))
            return self.operation(f"({body} if {test} else {other})", select_rule(test), (body, other), guard)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in self.parameters:
            array = node.value.id
            index = canonical(self.opaque(node.slice))
            if array in self.written:
                held = self.held.get(array)
                if held is None or held[0] != index or held[1] is None:
                    raise self.refuse(node, f"a read of {array} after the work item wrote it elsewhere, under a "
                                      "condition or atomically", "read every array before writing it, or read "
                                      "back only the element the work item stored, with the same index")
                return held[1]
            return self.load(array, index, node.slice, guard)
        if isinstance(node, (ast.Compare, ast.BoolOp, ast.Attribute, ast.Subscript)) or \
                (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert))):
            return self.local(self.opaque(node), guard)  # no derivative: a condition, a size, an integer
        raise self.refuse(node, f"the expression {ast.unparse(node)}",
                          "write it with arithmetic, svod.math functions, min, max, abs and conditional expressions")

    def load(self, array: str, index: str, node: ast.expr, guard: str | None) -> str:
        """A read of ``array[index]`` as the kernel found the array."""
        self.reads.add(array)
        result = self.local(f"{array}[{index}]", guard)
        self.values.append(Value(result, (), guard, self.line, array=array, index=index,
                                 own=place(node, self.loops), alone=place(node, self.spread)))
        return result

    def call(self, node: ast.Call, guard: str | None) -> str:
        callee = self.resolve(node.func)
        name = self.mathexpression(node.func)
        if node.keywords:
            raise self.refuse(node, "a call with keywords", "pass its arguments by position")
        if (isinstance(callee, pylang.Cast) and not callee.dtype.is_float) or callee in _INTEGERS or (
                isinstance(callee, type) and issubclass(callee, (np.integer, np.bool_))):
            return self.local(self.opaque(node), guard)
        operands = tuple(self.value(a, guard) for a in node.args)
        text = f"{ast.unparse(node.func)}({', '.join(operands)})"
        rule: Rule
        if isinstance(callee, pylang.Cast) or callee is float or (isinstance(callee, type)
                                                                   and issubclass(callee, np.floating)):
            rule = float_cast  # (np.float64(x): the NumPy scalars svod's rewriting of array statements writes)
        elif name is not None and name in FUNCTIONS and (len(operands) == 2 or name not in ("maximum", "minimum")):
            rule = FUNCTIONS[name]
        elif isinstance(callee, pylang.Func) and callee.fn.__name__ in HELPERS and \
                MATH_HELPERS.get(f"_svod_m_{callee.fn.__name__}") is callee:
            rule = HELPERS[callee.fn.__name__]
        elif isinstance(node.func, ast.Name) and node.func.id in BUILTINS and callee in (abs, min, max):
            if len(operands) != (1 if callee is abs else 2):
                raise self.refuse(node, f"{node.func.id} of {len(operands)} argument{'s' * (len(operands) != 1)}",
                                  "abs takes one argument" if callee is abs else
                                  f"{node.func.id} is differentiated with two arguments (where they tie, each takes "
                                  f"half): nest them, {nested_call(node.func.id, len(operands))}")
            rule = FUNCTIONS[BUILTINS[node.func.id]]
        else:
            raise self.refuse(node, f"a call of {ast.unparse(node.func)}",
                              "call svod.math functions, min, max, abs or float casts, or write the helper's "
                              "arithmetic in the kernel")
        return self.operation(text, rule, operands, guard)

    def mathexpression(self, func: ast.expr) -> str | None:
        """The name of the math function ``func`` is (``svod.math.exp``, ``math.exp``, ``np.exp``), if it is one."""
        if not isinstance(func, ast.Attribute):
            return None
        base = self.resolve(func.value)
        if base is np:
            return func.attr if func.attr in ("maximum", "minimum") else NUMPY_MATH.get(func.attr)
        return func.attr if base in (pylang.math, pymath) and func.attr in pylang.MATH_FUNCTIONS else None

    def operation(self, text: str, rule: Rule, operands: tuple[str, ...], guard: str | None) -> str:
        result = self.local(text, guard)
        self.values.append(Value(result, operands, guard, self.line, rule=rule))
        return result

    def local(self, text: str, guard: str | None) -> str:
        """A new local of the forward holding ``text``'s value (0 where ``guard`` does not hold: a branch not
        taken reads nothing)."""
        name = f"_svod_a{next(self.counter)}"
        self.forward.append((f"{name} = {text}" if guard is None else f"{name} = ({text} if {guard} else 0)",
                             self.line))
        return name

    def opaque(self, node: ast.expr) -> str:
        """``node``'s source with the locals it names replaced by the forward's names for them: an index, a
        condition or another value without a derivative. Its reads count as the array's reads."""
        for name in ast.walk(node):
            if isinstance(name, ast.Name):
                self.known(name)
        renamed = Renamer(self.env, self.held).visit(ast.parse(ast.unparse(node), mode="eval"))
        for read in ast.walk(renamed):
            if isinstance(read, ast.Subscript) and isinstance(read.value, ast.Name) \
                    and read.value.id in self.parameters:
                if read.value.id in self.written:
                    raise self.refuse(node, f"a read of {read.value.id} after the work item wrote it elsewhere, under "
                                      "a condition or atomically", "read every array before writing it, or read "
                                      "back only the element the work item stored, with the same index")
                self.reads.add(read.value.id)
        return ast.unparse(renamed.body)

    def known(self, name: ast.Name) -> None:
        """Refuse a local one side of an ``if`` assigned, read after it, and one a loop's turn assigns (or its
        variable), read after the loop or before the turn assigns it."""
        if self.env.get(name.id) == _ONE_SIDED:
            raise self.refuse(name, f"a read of {name.id}, which one side of the if before assigns and the other "
                              "does not", f"assign {name.id} before the if")
        if self.env.get(name.id) == _TURN_OWN:
            raise self.refuse(name, f"a read of {name.id} where it holds no value of its own: a loop's variable, "
                              "or a local its turns assign, read after the loop or before the turn assigns it",
                              f"assign {name.id} before the loop")

    def array_reads(self, node: ast.expr) -> bool:
        return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.parameters
                   for n in ast.walk(node))

    # ---- the backward -----------------------------------------------------------------------------------

    def grad_names(self) -> tuple[tuple[str, str], ...]:
        taken = set(self.parameters) | {n.id for n in ast.walk(self.source.node) if isinstance(n, ast.Name)}
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
                if v.stored == "=" and self.scatter is None:
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
        return f"{target}[{index}] += {adjoint}" if how else f"{ATOMIC_ADD}({target}, {index}, {adjoint})"

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
        header, clamp = loop.reversed()
        inside: Lines = [] if clamp is None else [(clamp, loop.line)]
        if names_in([*body, *tail])[0] & tainted:
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

    # ---- the forward's source ---------------------------------------------------------------------------

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

    def kernel_of(self, lines: _Lines, scatter: int | None) -> Kernel | None:
        """The adjoint kernel (``scatter`` None) or its pass of that number, from its source lines; None where it
        writes no adjoint."""
        name = f"{self.kernel.name}_adjoint" + ("" if scatter is None else f"_pass{scatter}")
        parameters = [*self.parameters, *self.grads.values()]
        text = "\n".join([f"def {name}({', '.join(parameters)}):", *lines.text])
        origin = [self.source.node.lineno, *lines.origin]
        node = ast.parse(text).body[0]
        for part in ast.walk(node):
            if isinstance(part, (ast.stmt, ast.expr)):
                part.lineno = origin[part.lineno - 1]
                part.end_lineno = part.lineno
        assert isinstance(node, ast.FunctionDef)
        names = {**self.source.names, MATH: pylang.math, ATOMIC_ADD: pylang.atomic_add}
        bounds = {p: (a.lo, a.hi) for p, a in self.kernel.annotations.items() if isinstance(a, pylang.IntType)}
        return Kernel(self.kernel.fn, name=name, source=Source(node, self.source.file, names),
                      parameters=parameters, static_shapes=self.kernel.static_shapes,
                      bounds=bounds) if self.writes else None  # (the forward's ints' bounds: its proofs)

    def result(self, grads: tuple[tuple[str, str], ...], kernel: Kernel | None, passes: tuple[Kernel, ...]) -> Adjoint:
        written = tuple(p for p in self.parameters if p in self.written)
        return Adjoint(kernel, grads, written, frozenset(self.reads), frozenset(self.reads) & set(written),
                       frozenset(self.updated), frozenset(self.needed), passes)


_INTEGERS = (int, bool, pylang.max_key, pylang.min_key)
"""Calls that make an integer of a value: no derivative (a float's order key, ``pylang.max_key``, too)."""
_ONE_SIDED = ""
"""What the forward's name of a local is where one side of an ``if`` assigned it and the other did not."""
_TURN_OWN = "!"
"""What it is where a loop's turns assigned it (or it is the loop's variable), after the loop, and in a turn before
the turn assigns it."""


__all__ = ["Adjoint", "adjoint"]
