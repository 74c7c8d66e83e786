"""``np.random`` in an ``@svod.jit`` function's own code (outside its ``prange`` loops): ``np.random.seed(s)``,
arrays of draws (``np.random.random(n)``, ``normal(mu, sigma, (n, m))``, ``rand(n, m)``, ...), draws of one
number between phases, ``np.random.permutation`` and ``np.random.shuffle``.

A call of a jitted function is one launch of svod's generator (``svod.random``), as if the function were one
kernel: its draws take the key and launch the plan is given at each run (the process generator's next), or
``(s, 0)`` after an ``np.random.seed(s)``; an array of draws is a ``prange`` nest of its own over its elements
(C order), each element the first draw of its work item; a ``prange`` of the function's own is a nest too;
a draw of one number is the function's serial code's. So the same function run as plain Python with
``svod.random.philox.PlainRandom`` as ``np.random`` (``svod.frontend.oracle``) draws the same numbers.

The plan carries the generator's state (key, launch, the nests opened so far, the serial draws made since the
last seed) in four scalars of its own (``STATE``), which the function's phases read and write as they do any
scalar they carry, so a draw in a loop around phases takes a new stream at every turn::

    x = np.random.random(n)              _svod_random_key, ... = _svod_random_state()      (at the top)
                                         _svod_rs0 = _svod_random_nests + 1                (a nest of its own)
                                         _svod_random_nests = _svod_rs0
                                         for _svod_a1 in prange(n):
                                             x[_svod_a1] = _svod_random_draw_random(key, launch, _svod_rs0, _svod_a1)
    r = np.random.normal(0.0, 1.0)       _svod_random_resume(key, launch, nests, ordinal)
                                         r = _svod_random_one_normal(0.0, 1.0)             (serial code)
                                         _svod_random_key, ... = _svod_random_state()
    for i in prange(n): ...              _svod_random_s1 = _svod_random_nests + 1             (its stream)
                                         _svod_random_nests = _svod_random_s1
                                         for i in prange(n):
                                             _svod_random_resume(key, launch, _svod_random_s1, 0)
                                             ...

Two passes do it, around ``svod.frontend.arrays``' rewriting (``lower_arrays``): ``Draws.prepared`` before it
names each call of ``np.random`` in the function's own code with a name of svod's (``_svod_random_one_normal``
for a draw of one number or a seed, ``_svod_random_array_normal`` for an array of draws, ``permutation``, and
``shuffle(x)`` as ``x[...] = permutation(x)``), drawing a number that an expression uses into a name of its own
first (an array statement's loops must not draw it at each element); ``array_value`` makes an array of
draws an array expression (``Drawn``), whose element is a draw at a place that names itself, so it fuses into
the statement that reads it as any expression does; ``Draws.placed`` after it writes the state's loads and
stores. Where a draw cannot be carried so, it is refused with the line: a draw of one number that an array
expression makes only on some paths (``x + (np.random.random() if c else 0)``), in the test of a ``while`` loop
around phases or in the bounds of a loop around phases, or in a statement that also leaves a loop.
"""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import Emitter, Expr, Named, Scalar, Value, numpy
from svod.frontend.draws import FUNCTIONS, Signature
from svod.frontend.extents import Dim
from svod.frontend.names import stored
from svod.frontend.nodes import assign, call, code, constant, copied, load, placed, stands_for, store, walk
from svod.frontend.phases import Reader
from svod.frontend.source import Source, refusal
from svod.frontend.values import RandomFunction

KEY, LAUNCH, NESTS, ORDINAL = "_svod_random_key", "_svod_random_launch", "_svod_random_nests", "_svod_random_ordinal"
STATE = (KEY, LAUNCH, NESTS, ORDINAL)
"""The plan's scalars that hold the generator's state between phases (``svod.frontend.randoms``' hidden
locals of the same meaning)."""
STATE_CALL, RESUME_CALL = "_svod_random_state", "_svod_random_resume"
ONE, ARRAY, DRAW = "_svod_random_one_", "_svod_random_array_", "_svod_random_draw_"
"""The prefixes of the names svod gives ``np.random``'s functions: as written (a draw of one number, a seed),
an array of draws (``ArrayDraw``), a draw at a place that names itself (in an array of draws' element)."""
KINDS = ("random", "uniform", "normal", "standard_normal", "exponential", "standard_exponential", "randint")
"""The kinds of draws an array holds (``svod.frontend.draws.draw``), besides a permutation's sort keys."""
ALIASES = {"random_sample": "random", "rand": "random", "randn": "standard_normal"}
DIMENSIONS = ("rand", "randn")
"""The functions that take an array's shape as their arguments (``rand(n, m)``), not as ``size``."""
KEYS_DTYPE = np.dtype(np.uint64)
"""The dtype of a permutation's sort keys (``svod.random.philox.sort_key``)."""


@dataclass(frozen=True)
class ArrayDraw:
    """``np.random.<name>`` where the function's own code calls it with a size (or ``permutation``): an array
    of draws, which ``array_value`` makes an array expression. ``known``: the function's names whose values
    the host knows before the run (``_known_before``), which its size may read."""

    name: str
    known: frozenset[str] = frozenset()


def names(known: frozenset[str]) -> dict[str, Any]:
    """What the names svod writes for ``np.random`` stand for in a rewritten function whose names ``known``
    the host knows before the run."""
    found: dict[str, Any] = {STATE_CALL: RandomFunction("state", plan=True),
                             RESUME_CALL: RandomFunction("resume", plan=True)}
    found |= {f"{ONE}{name}": RandomFunction(name) for name in FUNCTIONS}
    found |= {f"{ARRAY}{name}": ArrayDraw(name, known) for name in (*FUNCTIONS, "permutation") if name != "seed"}
    found |= {f"{DRAW}{kind}": RandomFunction(kind, plan=True) for kind in (*KINDS, "keys")}
    return found


def is_numpy_random(value: Any) -> bool:
    """Whether ``value`` is one of ``np.random``'s functions (``np.random.normal``, ``from numpy.random import
    normal``, ``np.random.seed``)."""
    name = getattr(value, "__name__", None)
    return isinstance(name, str) and callable(value) and getattr(np.random, name, None) is value


def _flagged(statement: ast.stmt) -> ast.stmt:
    """``statement``, a phase where it stands (``phases.Reader.item``), never a definition read where used."""
    statement.svod_flag = True  # type: ignore[attr-defined]
    return statement


def _state_read(at: ast.AST) -> ast.stmt:
    """``key, launch, nests, ordinal = state()``: the state as the code before left it, into the plan's
    scalars."""
    targets = ast.Tuple([store(name) for name in STATE], ast.Store())
    return placed([ast.Assign([targets], call(STATE_CALL))], at)[0]


def _resume(at: ast.AST, nests: ast.expr, ordinal: ast.expr) -> ast.stmt:
    """``resume(key, launch, nests, ordinal)``: the draws after it continue the state (in a work item,
    ``nests`` is its stream)."""
    return placed([ast.Expr(call(RESUME_CALL, load(KEY), load(LAUNCH), nests, ordinal))], at)[0]


def _next_nest(stream: str, at: ast.AST) -> list[ast.stmt]:
    """``stream = nests + 1; nests = stream``: a nest opens, whose work items draw in ``stream``."""
    opened = ast.BinOp(load(NESTS), ast.Add(), constant(1))
    return [_flagged(s) for s in placed([assign(stream, opened), assign(NESTS, load(stream))], at)]


# ---- before the array statements are rewritten ----------------------------------------------------------------

class Draws:
    """The passes around ``lower_arrays`` for one function: ``prepared`` before it, ``placed`` after."""

    def __init__(self, source: Source, name: str) -> None:
        self.source = source
        self.name = name
        self.reader = Reader(source, name)
        self.counter = itertools.count()
        self.described: dict[str, str] = {}
        """What an error calls each name the passes give a value of their own."""
        self.changed = False

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def prepared(self) -> Source:
        """The function with its own code's ``np.random`` calls named as svod names them (the module
        docstring), a number an expression draws drawn into a name of its own first; its names include
        what svod's names stand for."""
        node = stands_for(copy.copy(self.source.node), self.source.node)
        node.body = self.block(self.source.node.body)
        return Source(node, self.source.file, {**self.source.names, **names(_known_before(self.reader))},
                      {**self.source.described, **self.described})

    def block(self, statements: Sequence[ast.stmt]) -> list[ast.stmt]:
        """``statements``, ``h, w = a.shape`` one name at a time (as the function's reader takes it: the sizes
        an array of draws may read)."""
        out: list[ast.stmt] = []
        for stmt in statements:
            for single in self.reader.unpacked(stmt):
                out += self.statement(single)
        return out

    def statement(self, stmt: ast.stmt) -> list[ast.stmt]:
        if not any(isinstance(n, ast.Call) and is_numpy_random(self.reader.resolve(n.func)) for n in walk(stmt)):
            return [stmt]
        if self.reader.is_prange(stmt):
            return [self.kernel_code(stmt)]
        if isinstance(stmt, ast.For):  # (a loop around phases has bounds the host knows: ``placed`` says so)
            loop = stands_for(copy.copy(stmt), stmt)
            loop.iter, loop.body, loop.orelse = self.named(stmt.iter), self.block(stmt.body), self.block(stmt.orelse)
            return [loop]
        if isinstance(stmt, ast.If):
            before, test = self.hoisted(stmt.test, stmt)
            branch = stands_for(copy.copy(stmt), stmt)
            branch.test, branch.body, branch.orelse = test, self.block(stmt.body), self.block(stmt.orelse)
            return [*before, branch]
        if isinstance(stmt, ast.While):  # its test is computed again at each turn: named where it stands
            repeat = stands_for(copy.copy(stmt), stmt)
            repeat.test, repeat.body = self.named(stmt.test), self.block(stmt.body)
            repeat.orelse = self.block(stmt.orelse)
            if _makes_array(repeat.test):
                raise self.refuse(stmt.test, "an array of draws in the test of a while loop would be drawn once; draw "
                                             "it in the loop's body, into a name the test reads")
            return [repeat]
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                is_numpy_random(self.reader.resolve(stmt.value.func)):
            return self.called(stmt, stmt.value)
        return self.computed(stmt)

    def kernel_code(self, stmt: ast.stmt) -> ast.stmt:
        """A ``prange`` nest, whose draws are its work items' (``svod.random``): each call of a function a kernel
        draws with named ``ONE`` (the same draw to a kernel, and no function the host could call while it
        rewrites the nest's array statements: NumPy's generator is never drawn from); what a kernel does not
        have stays as written, for the kernel to refuse."""
        draws = self

        class Rename(ast.NodeTransformer):
            def visit_Call(self, call_node: ast.Call) -> ast.AST:
                self.generic_visit(call_node)
                callee = draws.reader.resolve(call_node.func)
                if not is_numpy_random(callee) or callee.__name__ not in FUNCTIONS:
                    return call_node
                draws.changed = True
                return stands_for(ast.copy_location(ast.Call(load(ONE + callee.__name__), call_node.args,
                                                             call_node.keywords), call_node), call_node)

        return stands_for(Rename().visit(copied(stmt)), stmt)

    def called(self, stmt: ast.Expr, node: ast.Call) -> list[ast.stmt]:
        """``np.random.<name>(...)`` as a statement: a seed; a shuffle, ``x[...] = permutation(x)``; a draw
        whose value is dropped, drawn into a name of its own (it takes its place in the stream)."""
        name = self._checked(node)
        if name == "seed":
            return [stands_for(ast.copy_location(ast.Expr(self.named(node)), stmt), stmt)]
        if name == "shuffle":
            if len(node.args) != 1 or node.keywords:
                raise self.refuse(node, "np.random.shuffle takes one array, x")
            operand = node.args[0]
            permuted = ast.Call(load(f"{ARRAY}permutation"), [copied(operand)], [])
            target = ast.Subscript(copied(operand), ast.Constant(...), ast.Store())
            before, target = self.hoisted(target, stmt)
            return [*before, *placed([ast.Assign([target], ast.copy_location(permuted, node))], stmt)]
        dropped = self.fresh("v", f"the value of `{code(node, 40)}`")
        return self.computed(placed([assign(dropped, node)], stmt)[0])

    def computed(self, stmt: ast.stmt) -> list[ast.stmt]:
        """Any other statement: each number it draws in Python's order of evaluation, into a name of its own
        before it, where the draw is sure to be made (not in one branch of ``a if c else b``, ``and``,
        ``or``, a comprehension or a lambda); every call of ``np.random`` named as svod names it."""
        made = stands_for(copy.copy(stmt), stmt)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name):  # x = np.random.normal(): a draw of its own already
            drawn, made.value = self.hoisted(stmt.value, stmt, whole=False)  # type: ignore[attr-defined]
            return [*drawn, made]
        before: list[ast.stmt] = []
        for field_name in _evaluation_order(stmt):
            value = getattr(stmt, field_name)
            if isinstance(value, list):
                parts = []
                for item in value:
                    hoisted, part = self.hoisted(item, stmt)
                    before += hoisted
                    parts.append(part)
                setattr(made, field_name, parts)
            elif isinstance(value, ast.expr):
                hoisted, part = self.hoisted(value, stmt)
                before += hoisted
                setattr(made, field_name, part)
        return [*before, made]

    def hoisted(self, node: ast.expr, at: ast.stmt, whole: bool = True) -> tuple[list[ast.stmt], Any]:
        """``node`` with its calls of ``np.random`` named as svod names them, and the statements that draw the
        numbers it draws where it is sure to (``computed``) into names of their own, in Python's order of
        evaluation; ``whole``: ``node`` itself too, if it is such a draw."""
        before: list[ast.stmt] = []
        draws = self
        root = copied(node)

        class Hoist(ast.NodeTransformer):
            def visit_Call(self, call_node: ast.Call) -> ast.AST:
                self.generic_visit(call_node)  # its arguments first, as Python evaluates them
                made = draws.renamed(call_node)
                if made is call_node or not _one_number(made) or (call_node is root and not whole):
                    return made
                name = draws.fresh("v", f"the number `{code(call_node, 40)}` draws")
                before.append(placed([assign(name, made)], at)[0])
                return ast.copy_location(load(name), call_node)

            def visit_IfExp(self, conditional: ast.IfExp) -> ast.AST:
                conditional.test = self.visit(conditional.test)
                conditional.body, conditional.orelse = draws.named(conditional.body), draws.named(conditional.orelse)
                return conditional

            def visit_BoolOp(self, boolean: ast.BoolOp) -> ast.AST:
                boolean.values = [self.visit(boolean.values[0]), *(draws.named(v) for v in boolean.values[1:])]
                return boolean

            def visit(self, inner: ast.AST) -> Any:
                if isinstance(inner, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                    return draws.named(inner)  # made when (and as often as) it is called
                return super().visit(inner)

        made = Hoist().visit(root)
        return before, made

    def named(self, node: Any) -> Any:
        """``node`` with its calls of ``np.random`` named as svod names them, none drawn before."""
        draws = self

        class Rename(ast.NodeTransformer):
            def visit_Call(self, call_node: ast.Call) -> ast.AST:
                self.generic_visit(call_node)
                return draws.renamed(call_node)

        return Rename().visit(copied(node))

    def renamed(self, node: ast.Call) -> ast.Call:
        """A call of ``np.random.<name>`` as svod names it (``ONE``, ``ARRAY``); any other call as it is."""
        if not is_numpy_random(self.reader.resolve(node.func)):
            return node
        name = self._checked(node)
        if name == "shuffle":
            raise self.refuse(node, "np.random.shuffle shuffles an array in place and returns None: call it as a "
                                    "statement of its own")
        prefix = ARRAY if name == "permutation" or _sized(name, node) else ONE
        self.changed = True
        return stands_for(ast.copy_location(ast.Call(load(prefix + name), node.args, node.keywords), node), node)

    def _checked(self, node: ast.Call) -> str:
        name = self.reader.resolve(node.func).__name__
        if name not in FUNCTIONS and name not in ("permutation", "shuffle"):
            known = ", ".join(sorted((*FUNCTIONS, "permutation", "shuffle")))
            raise self.refuse(node, f"np.random.{name} is not one svod's generator has in a jitted function; it "
                                    f"has {known}")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.refuse(node, f"np.random.{name} takes its arguments one by one (no * or **)")
        self.changed = True
        return name

    def fresh(self, stem: str, described: str) -> str:
        name = f"_svod_random_{stem}{next(self.counter)}"
        self.described[name] = described
        return name

    # ---- after the array statements are rewritten -------------------------------------------------------------

    def placed(self, lowered: Source) -> list[ast.stmt]:
        """The statements of ``lowered`` (the function after ``lower_arrays``) with the loads and stores of the
        generator's state (the module docstring), where the function draws."""
        body = list(lowered.node.body)
        reader = Reader(lowered, self.name)
        if not any(_draws(reader, stmt) for stmt in body):
            return body
        self.changed = True
        docstring = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            else []
        start = _state_read(lowered.node)
        for name in STATE:
            self.described.setdefault(name, "svod's random state")
        return [*docstring, start, *self.carried(reader, body[len(docstring):])]

    def carried(self, reader: Reader, statements: Sequence[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in statements:
            out += self.carried_statement(reader, stmt)
        return out

    def carried_statement(self, reader: Reader, stmt: ast.stmt) -> list[ast.stmt]:
        if _makes_array(stmt):
            found = next(n for n in walk(stmt) if _makes_array(n) and isinstance(n, ast.Call))
            raise self.refuse(found, "svod makes an array of draws in an array statement of the function's own "
                                     "code (`x = np.random.random(n)`, `y = 2.0 * np.random.random(n)`), not here")
        if isinstance(stmt, ast.For) and reader.is_prange(stmt):
            return self.nest(reader, stmt)
        holds = reader.holds_phases([stmt])
        if isinstance(stmt, ast.For) and holds:
            if _draws_one(stmt.iter):
                raise self.refuse(stmt, "a loop around phases has bounds the host knows; a draw is not one")
            loop = stands_for(copy.copy(stmt), stmt)
            loop.body = self.carried(reader, stmt.body)
            return [loop]
        if isinstance(stmt, ast.While) and holds:
            if _draws_one(stmt.test):
                raise self.refuse(stmt, "the test of a while loop around phases draws a number; draw it into a name "
                                        "before the loop and again at the end of its body (`go = np.random.random() "
                                        "< p`), and test the name")
            repeat = stands_for(copy.copy(stmt), stmt)
            repeat.body = self.carried(reader, stmt.body)
            return [repeat]
        if isinstance(stmt, ast.If) and holds:
            before: list[ast.stmt] = []
            branch = stands_for(copy.copy(stmt), stmt)
            if _draws_one(stmt.test):
                name = self.fresh("t", f"the test `{code(stmt.test, 40)}`")
                before = self.serial(placed([assign(name, stmt.test)], stmt)[0])
                branch.test = ast.copy_location(load(name), stmt.test)
            branch.body, branch.orelse = self.carried(reader, stmt.body), self.carried(reader, stmt.orelse)
            return [*before, branch]
        if not _draws_one(stmt):
            return [stmt]
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            name = self.fresh("v", "the returned value")
            returned = placed([ast.Return(load(name))], stmt)[0]
            return [*self.serial(placed([assign(name, stmt.value)], stmt)[0]), returned]
        return self.serial(stmt)

    def serial(self, stmt: ast.stmt) -> list[ast.stmt]:
        """Serial code that draws: the state resumed before it, read back after it."""
        if any(isinstance(node, (ast.Break, ast.Continue, ast.Return)) for node in walk(stmt)):
            raise self.refuse(stmt, "a statement that draws a number on some paths only and leaves a loop or the "
                                    "function is not one svod carries the generator's state through; draw the "
                                    "number into a name first (`u = np.random.random()`)")
        return [_resume(stmt, load(NESTS), load(ORDINAL)), stmt, _state_read(stmt)]

    def nest(self, reader: Reader, stmt: ast.For) -> list[ast.stmt]:
        """A ``prange`` nest: a nest of the launch's (the function's own, which plain Python counts; one
        ``lower_arrays`` wrote for an array statement draws nothing as it is written) whose work items
        resume the state, if it draws."""
        written = isinstance(stmt.iter, ast.Call) and isinstance(stmt.iter.func, ast.Name) and \
            stmt.iter.func.id == "_svod_prange"
        if written:
            found = next((n for n in walk(stmt) if _draws_one(n) and isinstance(n, ast.Call)), None)
            if found is not None:
                raise self.refuse(found, "an array expression draws this number on some paths only (in a branch "
                                         "of `a if c else b`, `and`, `or`); draw it into a name first "
                                         "(`u = np.random.random()`)")
            return [stmt]
        stream = self.fresh("s", "a prange nest's random stream")
        loop = stands_for(copy.copy(stmt), stmt)
        if _draws(reader, stmt):
            loop.body = [_resume(stmt, load(stream), constant(0)), *stmt.body]
        return [*_next_nest(stream, stmt), loop]


def _known_before(reader: Reader) -> frozenset[str]:
    """The function's parameters and the names every assignment of which computes a scalar from sizes and
    scalars alone (``Reader.pure``: no array element; ``h, w = a.shape`` one name at a time): what an array of
    draws' size may read (the rewriting computes it on the host, from the arguments of the call it is prepared
    for)."""
    function = reader.source.node
    parameters = {a.arg for a in (*function.args.posonlyargs, *function.args.args)}
    assigned: dict[str, bool] = {}
    for node in walk(function):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
            continue
        for single in reader.unpacked(node) if isinstance(node, ast.Assign) else [node]:
            targets = single.targets if isinstance(single, ast.Assign) else [single.target]  # type: ignore[attr-defined]
            simple = isinstance(single, ast.Assign) and len(targets) == 1 and isinstance(targets[0], ast.Name) and \
                reader.pure(single.value)
            for name in stored(targets):
                assigned[name] = assigned.get(name, True) and simple
    return frozenset(parameters - set(assigned)) | frozenset(name for name, pure in assigned.items() if pure)


def _evaluation_order(stmt: ast.stmt) -> list[str]:
    """The fields of ``stmt`` in the order Python evaluates them (an assignment's value before its targets)."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return ["value", "targets" if isinstance(stmt, ast.Assign) else "target"]
    return [f for f in stmt._fields if isinstance(getattr(stmt, f), (ast.expr, list))
            and not (isinstance(getattr(stmt, f), list) and getattr(stmt, f) and
                     isinstance(getattr(stmt, f)[0], ast.stmt))]


def _sized(name: str, node: ast.Call) -> bool:
    """Whether a call of ``np.random.<name>`` asks for an array: a ``size`` that is not None, or (``rand``,
    ``randn``) dimensions."""
    if name in DIMENSIONS:
        return bool(node.args or node.keywords)
    position = len(FUNCTIONS[name].parameters)
    given = node.args[position] if len(node.args) > position else \
        next((k.value for k in node.keywords if k.arg == "size"), None)
    return given is not None and not (isinstance(given, ast.Constant) and given.value is None)


def _one_number(node: ast.Call) -> bool:
    """Whether ``node`` is a draw of one number svod named (not a seed)."""
    return isinstance(node.func, ast.Name) and node.func.id.startswith(ONE) and node.func.id != f"{ONE}seed"


def _draws_one(node: ast.AST) -> bool:
    """Whether ``node`` draws a number or seeds as serial code (a call svod named ``ONE``)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith(ONE)
               for n in walk(node))


def _makes_array(node: ast.AST) -> bool:
    """Whether ``node`` holds an array of draws that no array statement made an expression (``ARRAY``)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith(ARRAY)
               for n in walk(node))


def _draws(reader: Reader, node: ast.AST) -> bool:
    """Whether ``node`` draws: a call svod named, or ``np.random``'s in a ``prange``."""
    return any(isinstance(n, ast.Call) and ((isinstance(n.func, ast.Name) and n.func.id.startswith("_svod_random_"))
                                            or is_numpy_random(reader.resolve(n.func))) for n in walk(node))


# ---- arrays of draws, as array expressions ---------------------------------------------------------------------

@dataclass(eq=False)
class Drawn(Expr):
    """An array of draws: each element the first draw of its work item (its index in C order) in a nest of
    its own, ``stream``, a pure function of where it is: an expression may read an element anywhere, as often
    as it likes."""

    kind: str = ""
    arguments: tuple[ast.expr, ...] = ()
    stream: str = ""

    def element(self, index: Sequence[ast.expr], out: Emitter) -> ast.expr:
        linear: ast.expr | None = None
        for at, size in zip(index, self.shape, strict=True):
            linear = at if linear is None else ast.BinOp(ast.BinOp(linear, ast.Mult(), constant(size)), ast.Add(), at)
        return call(f"{DRAW}{self.kind}", load(KEY), load(LAUNCH), load(self.stream), linear or constant(0),
                    *(copied(a) for a in self.arguments))


class Rewriter(Protocol):
    """``svod.frontend.arrays.ArrayRewriter``, as the arrays of draws use it."""

    reader: Reader
    outer: dict[str, Any]
    arrays: dict[str, Expr]
    pending: list[ast.stmt]
    read: set[str]
    sampled: set[str]
    host: dict[str, Any]
    described: dict[str, str]
    counter: itertools.count[int]
    at: ast.stmt
    changed: bool

    def origins_of(self, names: set[str]) -> set[str]: ...

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...
    def value(self, node: ast.expr) -> Value: ...
    def fresh_temporary(self, shape: tuple[Dim, ...], dtype: np.dtype, node: ast.AST) -> Expr: ...
    def allocation(self, stmt: ast.stmt, made: Expr) -> list[ast.stmt]: ...
    def loops(self, stmt: ast.stmt, stored: Expr, value: Value) -> list[ast.stmt]: ...


def array_value(rewriter: Rewriter, node: ast.Call, callee: Any) -> Value | None:
    """The array expression of a call of ``callee`` where it is an array of draws (``ArrayDraw``); None for
    another callee. Its nest opens where the statement stands."""
    if not isinstance(callee, ArrayDraw):
        return None
    if callee.name == "permutation":
        return _permutation(rewriter, node, callee)
    name = ALIASES.get(callee.name, callee.name)
    arguments, shape = _arguments(rewriter, node, callee)
    dtype = np.dtype(np.int64) if name == "randint" else np.dtype(np.float64)
    return Drawn(shape, dtype, name, arguments, _opened(rewriter))


def _opened(rewriter: Rewriter) -> str:
    """A nest opens where the statement stands: the name of its stream."""
    stream = f"_svod_rs{next(rewriter.counter)}"
    rewriter.described[stream] = f"the random stream of `{code(rewriter.at, 40)}`"
    rewriter.pending += _next_nest(stream, rewriter.at)
    rewriter.changed = True
    return stream


def _arguments(rewriter: Rewriter, node: ast.Call, callee: ArrayDraw) -> tuple[tuple[ast.expr, ...], tuple[int, ...]]:
    """A sized draw's arguments (numbers, NumPy's defaults filled in: ``randint(high)`` from 0) and shape."""
    name = callee.name
    if name in DIMENSIONS:
        if node.keywords:
            raise rewriter.refuse(node, f"np.random.{name} takes the array's dimensions, one by one")
        dimensions = ast.copy_location(ast.Tuple(list(node.args), ast.Load()), node)
        return (), _shape(rewriter, node, ast.fix_missing_locations(dimensions), callee)
    signature = FUNCTIONS[name]
    parameters = (*signature.names, "size")
    usage = Signature((*signature.parameters, ("size", None)), signature.required).describe(name)
    if len(node.args) > len(parameters):
        raise rewriter.refuse(node, f"{usage} takes {len(parameters)} arguments")
    given = dict(zip(parameters, node.args, strict=False))
    for keyword in node.keywords:
        if keyword.arg not in parameters or keyword.arg in given:
            raise rewriter.refuse(node, f"{usage} has no argument {keyword.arg} left to pass")
        given[str(keyword.arg)] = keyword.value
    missing = [p for p in parameters[:signature.required] if p not in given]
    if missing:
        raise rewriter.refuse(node, f"{usage}: {missing[0]} is missing")
    values: list[ast.expr] = []
    for parameter, default in signature.parameters:
        if parameter not in given:
            values.append(constant(default) if default is not None else constant(None))
            continue
        value = rewriter.value(given[parameter])
        if not isinstance(value, Scalar):
            raise rewriter.refuse(node, f"{usage} takes a number as {parameter} in a jitted function, not an array")
        values.append(copied(value.node))
    if name == "randint":  # randint(high): from 0
        low, high = values
        values = [constant(0), low] if isinstance(high, ast.Constant) and high.value is None else [low, high]
        bounds = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, int)]
        if len(bounds) == 2 and not 1 <= bounds[1] - bounds[0] <= 1 << 32:
            raise rewriter.refuse(node, f"np.random.randint({bounds[0]}, {bounds[1]}) draws from an empty range or one "
                                        "wider than svod draws from (2**32 integers)")
    return tuple(values), _shape(rewriter, node, given["size"], callee)


def _before_the_run(rewriter: Rewriter, node: ast.Call, value: ast.expr, callee: ArrayDraw, what: str) -> None:
    """Refuse ``value`` (an array of draws' size, a permutation's count) where the host cannot know it before
    the run: it reads an array's element, or a name the function computes as it runs (from an element, a loop's
    variable)."""
    bound = stored([rewriter.reader.source.node]) | {a.arg for a in rewriter.reader.source.node.args.args}
    unknown = sorted(n.id for n in walk(value) if isinstance(n, ast.Name) and n.id in bound
                     and n.id not in callee.known and n.id not in rewriter.arrays)  # (an array's shape is known)
    if unknown or not rewriter.reader.pure(value):
        why = f"{unknown[0]} is computed as the function runs" if unknown else "it reads an array's element"
        raise rewriter.refuse(node, f"{what} is a number the host knows before the run (of the arguments' shapes "
                                    f"and scalars); {why}")


def _on_host(rewriter: Rewriter, node: ast.expr) -> Any:
    """``node`` computed on the host as the rewriting computes a size, every array the function has standing
    for itself with its shape (a temporary's too)."""
    arrays = {name: np.broadcast_to(np.zeros((), e.dtype), extents.numbers(e.shape))
              for name, e in rewriter.arrays.items() if extents.is_static(e.shape)}
    expression = ast.fix_missing_locations(ast.Expression(copied(node)))
    rewriter.sampled |= rewriter.origins_of({n.id for n in walk(node) if isinstance(n, ast.Name)})
    return eval(compile(expression, rewriter.reader.source.file, "eval"), rewriter.outer,  # the user's code
                {**arrays, **rewriter.host})


def _shape(rewriter: Rewriter, node: ast.Call, size: ast.expr, callee: ArrayDraw) -> tuple[int, ...]:
    """An array's shape as NumPy takes ``size``: an int or a tuple of ints, which the host knows before the
    run."""
    _before_the_run(rewriter, node, size, callee, "the size of an array of draws")
    try:
        value = _on_host(rewriter, size)
    except Exception as err:
        raise rewriter.refuse(node, f"the size of an array of draws is known before the run ({err})") from err
    shape = value if isinstance(value, tuple) else (value,)
    if any(isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise rewriter.refuse(node, f"an array of draws has a shape of non-negative ints, not {value!r}")
    rewriter.read |= {n.id for n in walk(size) if isinstance(n, ast.Name)} & set(rewriter.host)
    return tuple(int(d) for d in shape)


def _permutation(rewriter: Rewriter, node: ast.Call, callee: ArrayDraw) -> Value:
    """``np.random.permutation(n)``: the stable order of ``n`` sort keys drawn as an array of draws (one nest),
    which a sort of the plan finds; ``permutation(x)``: ``x``'s elements (rows) in that order."""
    if len(node.args) != 1 or node.keywords:
        raise rewriter.refuse(node, "np.random.permutation takes one argument, x (an int or an array)")
    operand = node.args[0]
    value = rewriter.value(operand)
    if isinstance(value, Expr):
        if not value.shape:
            raise rewriter.refuse(node, "np.random.permutation takes an integer or an array of at least one "
                                        "dimension (NumPy raises IndexError)")
        if not isinstance(value.shape[0], int):
            raise rewriter.refuse(node, f"np.random.permutation of an array of shape {extents.shown(value.shape)}, "
                                        "whose length is known only as the function runs, is not one svod has")
        count = value.shape[0]
    else:
        _before_the_run(rewriter, node, operand, callee, "np.random.permutation's n")
        try:
            known = _on_host(rewriter, operand)
        except Exception as err:
            raise rewriter.refuse(node, f"np.random.permutation's n is known before the run ({err})") from err
        if isinstance(known, (bool, np.bool_)) or not isinstance(known, (int, np.integer)):
            raise rewriter.refuse(node, f"np.random.permutation takes an int or an array, not {known!r}")
        if known < 0:
            raise rewriter.refuse(node, "np.random.permutation of a negative number (NumPy raises ValueError)")
        count = int(known)
    keys = Drawn((count,), KEYS_DTYPE, "keys", (), _opened(rewriter))
    made = rewriter.fresh_temporary((count,), KEYS_DTYPE, node)
    assert isinstance(made, Named)  # (of a length the host knows)
    rewriter.described[made.name] = f"the sort keys of `{code(node, 40)}`"
    order = f"_svod_ro{next(rewriter.counter)}"
    rewriter.described[order] = f"the order `{code(node, 40)}` draws"
    rewriter.pending += [*rewriter.allocation(rewriter.at, made), *rewriter.loops(rewriter.at, made, keys),
                         *placed([assign(order, call(numpy("argsort"), load(made.name)))], rewriter.at)]
    rewriter.arrays[order] = Named((count,), np.dtype(np.intp), order)
    if not isinstance(value, Expr):
        return rewriter.arrays[order]
    return rewriter.value(ast.copy_location(ast.Subscript(copied(operand), load(order), ast.Load()), node))


__all__ = ["ARRAY", "ArrayDraw", "DRAW", "Drawn", "Draws", "ONE", "STATE", "array_value", "is_numpy_random", "names"]
