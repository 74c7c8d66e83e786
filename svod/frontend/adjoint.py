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
that read no array. A sequential loop's adjoint runs its turns last first (``svod.frontend.adjoint_backward``): a
local its turns carry passes its adjoint from a turn's end to its start; a turn's forward values are computed
again from the loop's variable where they do not depend on a carried local (a sum), and otherwise by running the
turns before it again. A work item reads an array before it writes it, or reads back the one element it stored
(the value stored stands for the read), so its reads see the array as the kernel found it: an array the kernel
reads and writes is copied before the forward runs (``Adjoint.saved``). Anything else is refused with a
``GradientError`` naming the line and what to change (``svod.frontend.adjoint_forward``), never differentiated wrong.
"""

from __future__ import annotations

import ast
import functools
import operator
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.errors import GradientError
from svod.frontend import pylang
from svod.frontend.adjoint_backward import ATOMIC_ADD, Backward
from svod.frontend.adjoint_sums import Reduction, reduction_source, reorderable
from svod.frontend.adjoint_text import Forward, Lines, Loop, indented, names_in
from svod.frontend.derivatives import MATH
from svod.frontend.nodes import walk
from svod.frontend.pykernel import Kernel
from svod.frontend.source import Source


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
    floats: frozenset[str] = frozenset()
    """The float array arguments it was made for."""
    storable: frozenset[str] = frozenset()
    """The arrays whose adjoints ``kernel`` adds into with one plain add per element, where a store gives the
    same where the adjoint is new: ``pull`` runs the adjoint made to store into those ``fresh`` says are, which
    writes them without reading them (``Backward.storable``)."""
    stored: frozenset[str] = frozenset()
    """Of ``storable``, those this adjoint stores into: its ``pull`` takes them new (all zeros)."""
    spent: frozenset[str] = frozenset()
    """Of ``written``, those whose adjoints this adjoint reads and leaves as they were: nothing reads them
    after it (``pull``)."""
    forward: weakref.ref[Kernel] | None = field(default=None, compare=False, repr=False)
    """The kernel differentiated, for an adjoint that leaves some arrays' adjoints out (``pull``); weak, as the
    kernel keys the adjoints kept of it."""
    covered: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Of ``storable``, the arrays whose adjoint the kernel adds into at every element its parallel loops
    reach, each with those loops' extents by the array's dimension (``Backward.covered``): where a call's
    extents are the array's shape, ``covers``."""
    prologue: tuple[tuple[str, str], ...] = ()
    """The locals the kernel sets before its loop, with their expressions: what an extent may name."""

    @property
    def needs(self) -> frozenset[str]:
        """The arrays whose values the adjoint reads."""
        return self.reads if self.needed is None else self.needed

    def covers(self, name: str, args: Mapping[str, Any]) -> bool:
        """Whether, for a call on ``args`` (by name), the adjoint stores into every element of ``name``'s adjoint
        where that is new: its parallel loops' extents, worked out from the arguments, are the array's shape. Such
        an adjoint may be taken uninitialised, not zeroed (``pull``'s ``unset``)."""
        extents = dict(self.covered).get(name)
        array = args.get(name)
        if extents is None or not isinstance(array, np.ndarray) or array.ndim != len(extents):
            return False
        values = dict(args)
        for local, text in self.prologue:
            values[local] = _worked_out(_parsed(text), values)
        return all(_worked_out(_parsed(text), values) == size for text, size in zip(extents, array.shape, strict=True))

    def pull(self, args: dict[str, Any], adjoints: dict[str, np.ndarray | None], fresh: dict[str, bool],
             device: Any, spent: frozenset[str] = frozenset(), unset: frozenset[str] = frozenset()) -> None:
        """Run the adjoint on the call's arguments ``args`` (by name, in the kernel's order, as the call found
        them): add into ``adjoints`` (by the name of each of ``grads``' arrays) those of what the call read, and
        set those of what it overwrote to theirs before the call. An adjoint given as None is no gradient's asked
        for: the adjoint of the kernel made without that array stores and adds nothing into it. ``fresh`` says
        which adjoints hold zeros only: one the adjoint adds into once per element (``storable``) it stores
        into, unread. Of the arrays the call wrote, the adjoints of those ``spent`` names nothing reads after:
        they are read, and left as they were where the call overwrote them. The adjoints ``unset`` names were
        taken uninitialised where the adjoint ``covers`` them; one the adjoint made does not store into is
        zeroed first."""
        made = self.made(adjoints, fresh, spent)
        for name in sorted(unset - made.stored):
            given = adjoints[name]
            if given is not None:
                given.fill(0)
        for kernel in (*made.passes, made.kernel):
            if kernel is not None:
                kernel(*args.values(), *(adjoints[name] for name, _ in made.grads), device=device)

    def made(self, adjoints: dict[str, np.ndarray | None], fresh: dict[str, bool],
             spent: frozenset[str]) -> Adjoint:
        """The adjoint ``pull`` runs for those arguments."""
        unwanted = frozenset(name for name, given in adjoints.items() if given is None)
        spent &= frozenset(self.written)
        base = self if not unwanted and not self.stored and spent == self.spent else \
            adjoint(self.differentiated(), self.floats - unwanted, spent=spent)
        stored = frozenset(name for name in base.storable if fresh.get(name) and adjoints.get(name) is not None)
        return adjoint(self.differentiated(), base.floats, stored, spent) if stored else base

    def writes(self, adjoints: dict[str, np.ndarray | None], fresh: dict[str, bool],
               spent: frozenset[str]) -> frozenset[str]:
        """The arrays whose adjoints ``pull`` on those arguments writes into."""
        return self.made(adjoints, fresh, spent).stores

    @functools.cached_property
    def stores(self) -> frozenset[str]:
        """The arrays whose adjoints its kernels write into."""
        arrays = {grad: array for array, grad in self.grads}
        return frozenset(arrays[name] for kernel in (*self.passes, self.kernel) if kernel is not None
                         for name in _stored(kernel.source.node) if name in arrays)

    def differentiated(self) -> Kernel:
        """The kernel this adjoint is of: a tape's record holds it while it pulls; a caller that let it go
        is told so."""
        kernel = self.forward() if self.forward is not None else None
        if kernel is None:
            raise GradientError("an adjoint was pulled after the kernel it was made of was freed: keep the kernel "
                                "(a tape keeps those it recorded) while pulling its adjoint", stage="gradient")
        return kernel


_ADJOINTS: weakref.WeakKeyDictionary[Kernel, dict[tuple[frozenset[str], frozenset[str], frozenset[str]], Adjoint]] \
    = weakref.WeakKeyDictionary()


_OPERATIONS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


@functools.cache
def _parsed(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _worked_out(node: ast.expr, values: Mapping[str, Any]) -> int | None:
    """The integer a loop's extent comes to for a call on ``values`` (its arguments and the locals before its
    loop, by name): an integer, an int argument, an array's ``.shape[k]``, and ``+``, ``-``, ``*`` and ``//`` of
    those; None for anything else, or for a value past 32 bits on the way (which a kernel's narrower integers
    could wrap, where these do not)."""
    found: int | None = None
    if isinstance(node, ast.Constant):
        found = node.value if type(node.value) is int else None
    elif isinstance(node, ast.Name):
        value = values.get(node.id)
        found = int(value) if isinstance(value, int | np.integer) and not isinstance(value, bool) else None
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
            and isinstance(node.value.value, ast.Name) and isinstance(node.slice, ast.Constant):
        array, axis = values.get(node.value.value.id), node.slice.value
        shape = array.shape if isinstance(array, np.ndarray) else ()
        found = shape[axis] if type(axis) is int and -len(shape) <= axis < len(shape) else None
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.FloorDiv):
        left, right = _worked_out(node.left, values), _worked_out(node.right, values)
        if left is not None and right is not None and not (isinstance(node.op, ast.FloorDiv) and right == 0):
            found = _OPERATIONS[type(node.op)](left, right)
    return found if found is not None and -(1 << 31) <= found < 1 << 31 else None


def adjoint(kernel: Kernel, floats: frozenset[str], stored: frozenset[str] = frozenset(),
            spent: frozenset[str] = frozenset()) -> Adjoint:
    """The adjoint of ``kernel`` for a call whose float array arguments are ``floats`` (made once, then kept);
    ``stored`` of its ``storable`` arrays taken new, stored into; the adjoints of the arrays ``spent`` names,
    which nothing reads after it, left as they were."""
    made = _ADJOINTS.setdefault(kernel, {})
    if stored:  # (a store where an add would be needed would lose what the adjoint held: only ``storable``)
        stored &= adjoint(kernel, floats).storable
    if (floats, stored, spent) not in made:
        made[(floats, stored, spent)] = _Differentiator(kernel, floats, stored, spent).adjoint()
    return made[(floats, stored, spent)]


@dataclass
class _Lines:
    """Source lines of the adjoint kernel, each with the line of the kernel's source it comes from."""

    text: list[str] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)

    def add(self, text: str, line: int, depth: int) -> None:
        for part in text.split("\n"):
            self.text.append("    " * depth + part)
            self.origin.append(line)


class _Differentiator(Backward):
    """Puts the adjoint kernel and its passes together from a kernel's forward and backward (the module's
    docstring)."""

    def __init__(self, kernel: Kernel, floats: frozenset[str], stored: frozenset[str] = frozenset(),
                 spent: frozenset[str] = frozenset()) -> None:
        super().__init__(kernel, floats, stored, spent)
        self.needed: set[str] = set()
        self.prologue: list[tuple[str, str]] = []

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
            self.prologue.append((stmt.targets[0].id, ast.unparse(stmt.value)))
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
        works: list[Lines] = []
        for scatter in [*self.shifted, *self.reduced, None]:
            self.scatter, self.writes = scatter, False
            backward = self.backward_block(self.values, {})
            work = [*indented(self.render(self.live(backward)), 0), *backward] or [("pass", nest[-1].lineno)]
            item = work
            source = _Lines(list(lines.text), list(lines.origin))
            if isinstance(scatter, Reduction):
                work = reduction_source(nest, scatter, self.grads, work)
            else:
                work = [*[("    " * depth + f"for {ast.unparse(loop.target)} in {ast.unparse(loop.iter)}:",
                           loop.lineno) for depth, loop in enumerate(nest)], *indented(work, len(nest))]
            works.append(item if scatter is None else work)  # (a pass whole: its sums' loads and stores too)
            for text, line in work:
                source.add(text, line, 1)
            kernels.append(self.kernel_of(source, len(kernels) if scatter is not None else None))
        storable = self.stored or self.storable(works[-1], works[:-1])
        covered = () if self.stored else self.covered(works[-1], storable, nest)
        return self.result(grads, kernels[-1], tuple(k for k in kernels[:-1] if k is not None), storable, covered)

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

    def kernel_of(self, lines: _Lines, scatter: int | None) -> Kernel | None:
        """The adjoint kernel (``scatter`` None) or its pass of that number, from its source lines; None where it
        writes no adjoint."""
        name = f"{self.kernel.name}_adjoint" + ("" if scatter is None else f"_pass{scatter}")
        parameters = [*self.parameters, *self.grads.values()]
        text = "\n".join([f"def {name}({', '.join(parameters)}):", *lines.text])
        origin = [self.source.node.lineno, *lines.origin]
        node = ast.parse(text).body[0]
        for part in walk(node):
            if isinstance(part, (ast.stmt, ast.expr)):
                part.lineno = origin[part.lineno - 1]
                part.end_lineno = part.lineno
        assert isinstance(node, ast.FunctionDef)
        names = {**self.source.names, MATH: pylang.math, ATOMIC_ADD: pylang.atomic_add}
        bounds = {p: (a.lo, a.hi) for p, a in self.kernel.annotations.items() if isinstance(a, pylang.IntType)}
        return Kernel(self.kernel.fn, name=name, source=Source(node, self.source.file, names),
                      parameters=parameters, static_shapes=self.kernel.static_shapes,
                      bounds=bounds) if self.writes else None  # (the forward's ints' bounds: its proofs)

    def result(self, grads: tuple[tuple[str, str], ...], kernel: Kernel | None, passes: tuple[Kernel, ...],
               storable: frozenset[str], covered: tuple[tuple[str, tuple[str, ...]], ...]) -> Adjoint:
        written = tuple(p for p in self.parameters if p in self.written)
        return Adjoint(kernel, grads, written, frozenset(self.reads), frozenset(self.reads) & set(written),
                       frozenset(self.updated), frozenset(self.needed), passes, self.floats, storable, self.stored,
                       self.spent, weakref.ref(self.kernel), covered, tuple(self.prologue))


_ONCE: weakref.WeakKeyDictionary[Kernel, frozenset[str]] = weakref.WeakKeyDictionary()


def stored_once(kernel: Kernel) -> frozenset[str]:
    """The arrays ``kernel`` overwrites (``=``) in one statement outside every sequential loop: each element at
    most once per call. Only such an array's adjoint may be left unzeroed where it is stored (``spent``): a
    second store of an element would take the adjoint the later one read again."""
    if kernel not in _ONCE:
        counts: dict[str, int] = {}
        _count_stores(kernel.source.node, counts, False)
        _ONCE[kernel] = frozenset(name for name, count in counts.items() if count == 1)
    return _ONCE[kernel]


def _count_stores(node: ast.AST, counts: dict[str, int], repeated: bool) -> None:
    """Count into ``counts`` the statements storing into each array (twice for one a sequential loop or a
    ``while`` repeats)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            for target in targets:
                for part in walk(target):
                    if isinstance(part, ast.Subscript) and isinstance(part.value, ast.Name):
                        counts[part.value.id] = counts.get(part.value.id, 0) + (2 if repeated else 1)
        _count_stores(child, counts, repeated or isinstance(child, ast.While)
                      or (isinstance(child, ast.For) and not _parallel(child)))


def _parallel(loop: ast.For) -> bool:
    """Whether the loop is a ``prange`` one, whose turns store elements apart."""
    call = loop.iter
    func = call.func if isinstance(call, ast.Call) else None
    return (isinstance(func, ast.Attribute) and func.attr == "prange") or (
        isinstance(func, ast.Name) and func.id in ("prange", "_svod_prange"))  # (a jit function's kernels')


def _stored(node: ast.AST) -> set[str]:
    """The arrays a kernel's source stores or adds into (atomically too)."""
    found = set()
    for part in walk(node):
        target = part.value if isinstance(part, ast.Subscript) and isinstance(part.ctx, ast.Store) else \
            part.args[0] if isinstance(part, ast.Call) and isinstance(part.func, ast.Name) \
            and part.func.id == ATOMIC_ADD and part.args else None
        if isinstance(target, ast.Name):
            found.add(target.id)
    return found


__all__ = ["Adjoint", "adjoint", "stored_once"]
