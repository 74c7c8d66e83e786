"""The Python between an ``@svod.jit`` function's phases, as the plan runs it (``svod.frontend.phases``): its
``break``, ``continue`` and early ``return`` around phases as flags the plan tests (``Flow``), and the names a
read finds assigned on every path before it (``check_assigned``), with the loops that must make a turn for it.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from svod.errors import KernelSyntaxError
from svod.frontend.names import loaded, renamed, stored
from svod.frontend.nodes import copied, placed, stands_for, walk


@dataclass(frozen=True)
class Turn:
    """A ``for`` loop that must make a turn: ``name``, which only its body assigns, is read after it, at
    ``line``. ``nested``: a loop encloses it."""

    name: str
    line: int
    loop: ast.For
    nested: bool


class FlowReader(Protocol):
    """What the flow of a function reads of its reader (``svod.frontend.phases.Reader``)."""

    described: dict[str, str]

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError: ...

    def holds_phases(self, body: Sequence[ast.stmt]) -> bool: ...

    def is_range(self, node: ast.expr) -> bool: ...


@dataclass
class _Exits:
    """The flags of one loop around phases: set by a ``break`` (which ends it, ``PlanLoop.until``) and by a
    ``continue`` (which skips the rest of a turn)."""

    broken: str
    skipped: str
    breaks: bool = False
    continues: bool = False


class Flow:
    """``break``, ``continue`` and an early ``return`` around phases, as flags the plan tests: each sets a
    scalar, the statements after it in its block run under ``if not flag`` (a branch of the plan where they
    hold phases), a loop ends on its ``break`` flag (``PlanLoop.until``), and ``while test`` becomes a loop on a
    scalar its body computes again last. The result is Python's: what ran runs, what was skipped is."""

    RETURNED = "_svod_returned_flag"

    def __init__(self, reader: FlowReader, returns: list[str] | None) -> None:
        self.reader = reader
        self.returns = returns
        """The names the last statement returns (None: it is not a return)."""
        self.loops: list[_Exits] = []
        self.early = False
        self.following: Sequence[ast.stmt] = ()
        """The statements after the one being read, in its block."""
        self.variables: list[str] = []
        """The variables of the loops around phases that enclose the one being read."""
        self.enclosing: list[list[ast.stmt]] = []
        """Per block around the one being read (outermost first), what may run after it ends: the rest of its
        block, and of a loop's body its next turn (its variable bound anew first) before what follows the loop."""

    def function(self, body: list[ast.stmt]) -> list[ast.stmt]:
        made, _ = self.block(body)
        if self.early and body:
            made.insert(0, _assign(self.RETURNED, 0, body[0]))
        return made

    def block(self, stmts: Sequence[ast.stmt]) -> tuple[list[ast.stmt], set[str]]:
        """``stmts`` with their exits as flags, and the flags they may set that an enclosing block tests."""
        out: list[ast.stmt] = []
        raised: set[str] = set()
        for position, stmt in enumerate(stmts):
            self.following = stmts[position + 1:]
            made, flags = self.statement(stmt)
            out += made
            raised |= flags
            if isinstance(stmt, (ast.Break, ast.Continue, ast.Return)):
                break  # what follows in the block never runs
            rest = stmts[position + 1:]
            if flags and rest:
                guarded, more = self.block(rest)
                raised |= more
                if guarded:
                    test = _none_set(sorted(flags), stmt)
                    out.append(ast.fix_missing_locations(ast.copy_location(ast.If(test, guarded, []), rest[0])))
                break
        return out, raised

    def statement(self, stmt: ast.stmt) -> tuple[list[ast.stmt], set[str]]:
        if isinstance(stmt, ast.Break) and self.loops:
            self.loops[-1].breaks = True
            return [_assign(self.loops[-1].broken, 1, stmt)], {self.loops[-1].broken}
        if isinstance(stmt, ast.Continue) and self.loops:
            self.loops[-1].continues = True
            return [_assign(self.loops[-1].skipped, 1, stmt)], {self.loops[-1].skipped}
        if isinstance(stmt, ast.Return):
            return self.early_return(stmt)
        if isinstance(stmt, ast.If) and (_exits([stmt]) or self.reader.holds_phases([stmt])):
            self.enclosing.append(list(self.following))
            body, flags = self.block(stmt.body)
            orelse, other = self.block(stmt.orelse)
            self.enclosing.pop()
            branch = stands_for(ast.copy_location(ast.If(stmt.test, body or [ast.Pass()], orelse), stmt), stmt)
            return [ast.fix_missing_locations(branch)], flags | other
        planned = self.reader.holds_phases([stmt])
        if isinstance(stmt, ast.For) and planned and self.reader.is_range(stmt.iter):
            return self.loop(stmt)
        if isinstance(stmt, ast.While) and planned:
            return self.repeat(stmt)
        if isinstance(stmt, (ast.For, ast.While)) and any(isinstance(n, ast.Return) for n in walk(stmt)):
            return self.returning_loop(stmt)
        return [stmt], set()

    def returning_loop(self, stmt: ast.For | ast.While) -> tuple[list[ast.stmt], set[str]]:
        """A loop that runs as one kernel, with a ``return`` inside: the return sets its flags and leaves the
        loop (``break``), each loop around it inside the kernel leaves after it, and what follows the loop
        in the function runs under the flags."""
        flags: set[str] = set()

        def block(stmts: Sequence[ast.stmt]) -> list[ast.stmt]:
            made: list[ast.stmt] = []
            for inner in stmts:
                if isinstance(inner, ast.Return):
                    assigns, raised = self.early_return(inner)
                    flags.update(raised)
                    return [*made, *assigns, ast.copy_location(ast.Break(), inner)]
                if isinstance(inner, ast.If):
                    made.append(stands_for(ast.copy_location(ast.If(inner.test, block(inner.body) or [ast.Pass()],
                                                                    block(inner.orelse)), inner), inner))
                elif isinstance(inner, (ast.For, ast.While)) and any(isinstance(n, ast.Return)
                                                                      for n in walk(inner)):
                    made += [loop(inner), ast.copy_location(ast.If(ast.Name(self.RETURNED, ast.Load()),
                                                                   [ast.Break()], []), inner)]
                else:
                    made.append(inner)
            return made

        def loop(node: ast.For | ast.While) -> ast.stmt:
            made = stands_for(copy.copy(node), node)
            made.body = block(node.body) or [ast.Pass()]
            return made

        return [ast.fix_missing_locations(loop(stmt))], flags

    def later(self) -> list[ast.stmt]:
        """What may run after the statement being read, in order: the rest of its block, then of each block
        around it (``enclosing``)."""
        return [*self.following, *(stmt for after in reversed(self.enclosing) for stmt in after)]

    def own_variable(self, stmt: ast.For, name: str) -> ast.For:
        """An inner loop over the variable of a loop around it (``for _ in ...`` twice), over a name of its own:
        a plan loop has one variable. After it, the name holds its last value in Python: a read there is
        refused."""
        if _read_before_bound(name, self.later()):
            raise self.reader.refuse(stmt, f"this loop reuses the variable {name} of a loop around it, which is read "
                                           "after it; name it differently")
        own = f"_svod_{name}{stmt.lineno}_{stmt.col_offset}"
        self.reader.described[own] = f"{name} (of the loop at line {stmt.lineno})"
        return renamed(stmt, {name: own})

    def keeps_variable(self, stmt: ast.For, name: str) -> None:
        """Refuse an assignment to a loop around phases' variable inside its body (a kernel's own loop over the
        name, ``name = ...``): the plan gives each phase of the body the turn's value as a kernel argument, so a
        phase cannot see another value of the name there. A loop around phases inside it over the same name is
        its own (``own_variable``)."""
        for node in _binding_nodes(stmt.body, name, self.reader):
            raise self.reader.refuse(node, f"{name} is the variable of the loop around phases at line {stmt.lineno}, "
                                           "and is assigned again inside it, which svod does not support; use "
                                           "another name here")

    def early_return(self, stmt: ast.Return) -> tuple[list[ast.stmt], set[str]]:
        """The flags an early return sets, after the values it returns are given to the names the last return
        returns where those are the plan's own (the last return returns expressions: ``return i`` in a loop,
        ``return -1`` last)."""
        values = returned_values(stmt.value) if stmt.value else []
        names = [v.id for v in values if isinstance(v, ast.Name)]
        given: list[ast.stmt] = []
        if self.returns and len(values) == len(self.returns) and names != self.returns and \
                all(name.startswith("_svod_returned") for name in self.returns):
            stored: list[ast.expr] = [ast.Name(name, ast.Store()) for name in self.returns]
            target, value = (stored[0], values[0]) if len(values) == 1 else \
                (ast.Tuple(stored, ast.Store()), ast.Tuple(values, ast.Load()))  # (evaluated before any is given)
            given, names = placed([ast.Assign([target], value)], stmt), list(self.returns)
        simple = stmt.value is None or len(names) == len(values)
        if not simple or (self.returns is None and stmt.value is not None) or \
                (self.returns is not None and names != self.returns):
            wanted = "nothing" if self.returns is None else ", ".join(self.returns) or "nothing"
            if "_svod_" in wanted:  # (names of the plan's own: the last return's are expressions of arrays)
                raise self.reader.refuse(stmt, "an early return returns the names the last return does, and that one "
                                               "returns expressions here: name each value before both returns (`r = "
                                               "...`, then `return r`)")
            raise self.reader.refuse(stmt, f"an early return returns what the last statement does ({wanted}) in "
                                           "a jitted function; assign the result to those names and return")
        self.early = True
        self.reader.described[self.RETURNED] = "whether the function returned"
        flags = {self.RETURNED, *(loop.broken for loop in self.loops)}
        for loop in self.loops:
            loop.breaks = True
        return [*given, *(_assign(flag, 1, stmt) for flag in sorted(flags))], flags

    def loop(self, stmt: ast.For) -> tuple[list[ast.stmt], set[str]]:
        if isinstance(stmt.target, ast.Name) and (_read_before_bound(stmt.target.id, self.later()) or
                                                  stmt.target.id in (self.returns or ())):
            raise self.reader.refuse(stmt, f"the variable {stmt.target.id} of a loop around phases is read after "
                                           "the loop, which svod does not keep: count the turns in a name of your "
                                           f"own (`k = 0` before the loop, `k += 1` in it)")
        if isinstance(stmt.target, ast.Name) and stmt.target.id in self.variables:
            stmt = self.own_variable(stmt, stmt.target.id)
        if isinstance(stmt.target, ast.Name):
            self.keeps_variable(stmt, stmt.target.id)
        exits = self.enter(stmt)
        self.variables.append(stmt.target.id if isinstance(stmt.target, ast.Name) else "")
        rebound = ast.Assign([copied(stmt.target)], ast.Constant(0))  # the next turn's value
        self.enclosing.append([rebound, *stmt.body, *self.following])
        body, flags = self.block(stmt.body)
        self.enclosing.pop()
        self.variables.pop()
        self.loops.pop()
        loop = stands_for(ast.copy_location(ast.For(stmt.target, stmt.iter, self.turn(exits, body, stmt),
                                                    stmt.orelse), stmt), stmt)
        before = []
        if exits.breaks:
            before.append(_assign(exits.broken, 0, stmt))
            loop.svod_until = exits.broken  # type: ignore[attr-defined]
        return [*before, ast.fix_missing_locations(loop)], flags - {exits.broken, exits.skipped}

    def repeat(self, stmt: ast.While) -> tuple[list[ast.stmt], set[str]]:
        """``while test: body`` as ``go = test; while go: body; go = test`` (``go`` 0 once a break is taken)."""
        exits = self.enter(stmt)
        self.enclosing.append([ast.Expr(stmt.test), *stmt.body, *self.following])
        body, flags = self.block(stmt.body)
        self.enclosing.pop()
        self.loops.pop()
        go = f"_svod_while{stmt.lineno}_{stmt.col_offset}"
        self.reader.described[go] = f"the test of the while at line {stmt.lineno}"
        tested = tested_flag(go, stmt.test, stmt)
        again: ast.stmt = tested
        if exits.breaks:
            again = ast.If(_none_set([exits.broken], stmt), [tested], [_assign(go, 0, stmt)])
        turn = [*self.turn(exits, body, stmt), again]
        loop = stands_for(ast.copy_location(ast.While(ast.Name(go, ast.Load()), turn, stmt.orelse), stmt), stmt)
        before = [_assign(exits.broken, 0, stmt)] if exits.breaks else []
        made = [*before, ast.copy_location(copied(tested), stmt), loop]
        return [ast.fix_missing_locations(m) for m in made], flags - {exits.broken, exits.skipped}

    def enter(self, stmt: ast.For | ast.While) -> _Exits:
        place = f"{stmt.lineno}_{stmt.col_offset}"
        exits = _Exits(f"_svod_break{place}", f"_svod_continue{place}")
        self.reader.described[exits.broken] = f"whether the loop at line {stmt.lineno} broke"
        self.reader.described[exits.skipped] = f"whether the loop at line {stmt.lineno} continued"
        self.loops.append(exits)
        return exits

    @staticmethod
    def turn(exits: _Exits, body: list[ast.stmt], at: ast.stmt) -> list[ast.stmt]:
        """A turn's statements: its ``continue`` flag cleared first where one is taken."""
        return [_assign(exits.skipped, 0, at), *body] if exits.continues else body or [ast.Pass()]


def _binding_nodes(body: Sequence[ast.stmt], name: str, reader: FlowReader) -> list[ast.AST]:
    """The statements of ``body`` (at any depth, outside a loop around phases over ``name`` itself and a
    comprehension's own variables) that assign ``name``."""
    found: list[ast.AST] = []

    def visit(node: ast.AST, at: ast.AST) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == name and \
                reader.is_range(node.iter) and reader.holds_phases(node.body):
            return  # its own variable (own_variable), its body checked when it is read
        if isinstance(node, ast.comprehension):
            for part in node.ifs:
                visit(part, at)
            visit(node.iter, at)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            found.append(at)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, child if isinstance(child, ast.stmt) else at)

    for stmt in body:
        visit(stmt, stmt)
    return found


def _read_before_bound(name: str, statements: Sequence[ast.stmt]) -> bool:
    """Whether ``statements`` read ``name`` before a statement binds it anew (a later ``for name in ...``,
    ``name = ...``)."""
    for stmt in statements:
        if isinstance(stmt, ast.For):
            if name in loaded([stmt.iter]):
                return True
            if name in stored([stmt.target]):
                return False
        if isinstance(stmt, ast.Assign):
            if name in loaded([stmt.value]):
                return True
            if name in stored(stmt.targets):
                return False
        if name in loaded([stmt]):
            return True
    return False


def check_assigned(reader: FlowReader, body: Sequence[ast.stmt], assigned: set[str], returns: Sequence[str],
                    returned_at: ast.AST) -> dict[tuple[int, int], Turn]:
    """Refuse a read of a name that only some paths before it assign (Python raises ``NameError`` or
    ``UnboundLocalError`` on the others; a cell between phases would hold whatever it held): one branch of an
    ``if``, the body of a ``while``, a loop's body after a ``break`` or ``continue`` may have left it. A branch
    that leaves its block (``return``, ``break``, ``continue``) does not count. A name a ``for`` loop's body
    always assigns is assigned after the loop if it makes a turn: the loops whose turns a later read needs are
    returned, by (line, column) (the plan checks their trip counts)."""
    partly: dict[str, str] = {}
    """Each name assigned on some paths only -> where."""
    turned: dict[str, tuple[ast.For, bool]] = {}
    """Each name only a for loop's body assigns -> the loop, and whether a loop encloses it."""
    needed: dict[tuple[int, int], Turn] = {}
    depth = 0
    """How many loops enclose the statement being read."""
    leaving: list[list[set[str]]] = []
    """Per enclosing loop, the names assigned where a ``break`` or ``continue`` leaves a turn."""

    def reads(node: ast.AST, at: ast.AST) -> None:
        for inner in walk(node):
            if not isinstance(inner, ast.Name) or not isinstance(inner.ctx, ast.Load):
                continue
            if inner.id in partly:
                raise reader.refuse(at, f"{inner.id} is {partly[inner.id]}, and read after it (Python raises "
                                        "UnboundLocalError on a path that does not assign it); assign it before")
            if inner.id in turned:
                loop, nested = turned[inner.id]
                turn = Turn(inner.id, getattr(at, "lineno", 0), loop, nested)
                needed.setdefault((loop.lineno, loop.col_offset), turn)

    def assign(names: Iterable[str]) -> None:
        for name in names:
            partly.pop(name, None)
            turned.pop(name, None)

    def block(stmts: Sequence[ast.stmt], names: set[str]) -> tuple[set[str], bool]:
        """The names assigned after ``stmts``, and whether they fall through to what follows."""
        for stmt in stmts:
            if isinstance(stmt, (ast.Return, ast.Break, ast.Continue)):
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    reads(stmt.value, stmt)
                if not isinstance(stmt, ast.Return) and leaving:
                    leaving[-1].append(set(names))
                return names, False
            if isinstance(stmt, ast.If):
                reads(stmt.test, stmt)
                then, through_then = block(stmt.body, set(names))
                other, through_other = block(stmt.orelse, set(names))
                ends = [found for found, through in ((then, through_then), (other, through_other)) if through]
                if not ends:
                    return names, False
                both = set.intersection(*ends)
                for name in sorted(set.union(*ends) - both - names):
                    partly.setdefault(name, f"assigned in one branch only of the if at line {stmt.lineno}")
                assign(both - names)
                names = both
                continue
            if isinstance(stmt, (ast.For, ast.While)):
                names = loop(stmt, names)
                continue
            reads(stmt, stmt)
            if isinstance(stmt, ast.AugAssign):  # x += 1 reads x
                reads(ast.Name(stmt.target.id, ast.Load()) if isinstance(stmt.target, ast.Name) else stmt.target, stmt)
            assign(stored([stmt]))
            names = names | stored([stmt])
        return names, True

    def loop(stmt: ast.For | ast.While, names: set[str]) -> set[str]:
        """The names assigned after a loop; those only its body assigns are assigned if it turns."""
        nonlocal depth
        reads(stmt.iter if isinstance(stmt, ast.For) else stmt.test, stmt)
        own = stored([stmt.target]) if isinstance(stmt, ast.For) else set()
        assign(own)  # the loop assigns its variable before its body reads it
        depth += 1
        leaving.append([])
        inner, through = block([*stmt.body, *stmt.orelse], names | own)
        ends = [*leaving.pop(), *([inner] if through else [])]
        depth -= 1
        if not ends:  # every turn returns
            return names
        surely = set.intersection(*ends)
        for name in sorted(set.union(*ends) - names):
            if isinstance(stmt, ast.While):
                partly[name] = f"assigned only in the body of the while loop at line {stmt.lineno}, which may " \
                               "make no turn"
            elif name not in surely:
                partly[name] = f"assigned in the loop at line {stmt.lineno} only on some paths through a turn " \
                               "(a break or continue may come first)"
            else:
                turned[name] = (stmt, depth > 0)
        return names | set.union(*ends)

    block(body, set(assigned))
    for name in returns:
        reads(ast.Name(name, ast.Load()), returned_at)
    return needed


def _exits(stmts: Sequence[ast.stmt]) -> bool:
    """Whether ``stmts`` may leave their block: a ``break`` or ``continue`` outside any loop of theirs, or a
    ``return`` anywhere."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Break, ast.Continue, ast.Return)):
            return True
        if isinstance(stmt, ast.If) and _exits([*stmt.body, *stmt.orelse]):
            return True
        if isinstance(stmt, (ast.For, ast.While)) and any(isinstance(n, ast.Return) for n in walk(stmt)):
            return True
    return False


def _assign(name: str, value: int, at: ast.AST) -> ast.stmt:
    """``name = value`` for a flag: a phase where it stands (``phases.Reader.item``), never a definition read
    where used."""
    made = ast.Assign([ast.Name(name, ast.Store())], ast.Constant(value))
    made.svod_flag = True  # type: ignore[attr-defined]
    return placed([made], at)[0]


def tested_flag(name: str, test: ast.expr, at: ast.AST) -> ast.stmt:
    """``if test: name = 1 else: name = 0``: a condition as a flag a plan step reads."""
    return placed([ast.If(test, [_assign(name, 1, at)], [_assign(name, 0, at)])], at)[0]


def _none_set(flags: Sequence[str], at: ast.AST) -> ast.expr:
    """``not f1 and not f2 ...``."""
    tests: list[ast.expr] = [ast.UnaryOp(ast.Not(), ast.Name(flag, ast.Load())) for flag in flags]
    return placed([tests[0] if len(tests) == 1 else ast.BoolOp(ast.And(), tests)], at)[0]


def returned_values(value: ast.expr) -> list[ast.expr]:
    return list(value.elts) if isinstance(value, ast.Tuple) else [value]
