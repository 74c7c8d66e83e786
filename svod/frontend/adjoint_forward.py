"""The forward of a kernel's work item as the adjoint sees it (``svod.frontend.adjoint``): its statements read
one at a time into values, one per operation, load and store (``Value``), each sequential loop a block of its own
(``Loop``), and the statements that compute them again in the adjoint kernel (``Forward``).

Reading is where the adjoint refuses: a statement, a call or an access it cannot differentiate raises a
``GradientError`` naming the line and what to change, before any of the adjoint is written.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import math as pymath

import numpy as np

from svod.errors import GradientError
from svod.frontend import pylang
from svod.frontend.adjoint_text import (
    Carried,
    Forward,
    Loop,
    Renamer,
    Value,
    assigned_names,
    both,
    canonical,
    expression,
    integer,
    nested_call,
    one_turn,
    place,
    select_rule,
)
from svod.frontend.array_math import MATH_HELPERS
from svod.frontend.derivatives import BINARY, BUILTINS, FUNCTIONS, HELPERS, UNARY, Rule, float_cast
from svod.frontend.nodes import walk
from svod.frontend.pykernel import Kernel
from svod.frontend.values import NUMPY_MATH


class WorkItem:
    """Reads the work item of a kernel's ``svod.prange`` nest into its values (the module's docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.source = kernel.source
        self.parameters = kernel.parameters
        self.env: dict[str, str] = {}
        self.values: list[Value | Loop] = []
        """The values of the block being read (the work item's, or a sequential loop's turn)."""
        self.forward: Forward = []
        self.written: list[str] = []
        self.reads: set[str] = set()
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
        self.updated: set[str] = set()
        """The arrays the work item updates (``+=``, ``-=``, ``svod.atomic_add``)."""
        self.atomic = False
        """Whether the work item adds with ``svod.atomic_add``."""
        self.loaded: dict[tuple[str, str], tuple[str, str | None]] = {}
        """The block's reads so far, by array and index, each with its guard: a read of an element again is the
        first read's value where that one was made whenever this one is (``load``)."""

    def refuse(self, node: ast.AST, what: str, change: str) -> GradientError:
        line = getattr(node, "lineno", self.line)
        return GradientError(f"{self.source.file}:{line}: {what}: svod does not differentiate it; {change}",
                             kernel=self.kernel.name, stage="gradient", value=ast.unparse(node).split("\n")[0])

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
        outer = self.forward, self.values, self.loaded
        self.forward, self.values, self.loaded = loop.forward, loop.values, {}
        self.sequential.append(name)
        for inner in stmt.body:
            self.line = inner.lineno
            self.statement(inner)
        self.line = stmt.lineno
        self.sequential.pop()
        self.turn_ends(stmt, dict(zip(names, carried, strict=True)))
        self.forward, self.values, self.loaded = outer
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
        for node in (n for stmt in body for n in walk(stmt)):
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
        """A read of ``array[index]`` as the kernel found the array: the value of an earlier read of the element
        in this block (or this turn) made under no guard or under this one (the array is unwritten so far: a read
        after a write is the held value), so that its adjoint adds into the element once, where each read's
        would add (``x[i] * x[i]``)."""
        self.reads.add(array)
        earlier = self.loaded.get((array, index))
        if earlier is not None and earlier[1] in (None, guard):
            return earlier[0]
        result = self.local(f"{array}[{index}]", guard)
        self.values.append(Value(result, (), guard, self.line, array=array, index=index,
                                 own=place(node, self.loops), alone=place(node, self.spread)))
        self.loaded[(array, index)] = (result, guard)
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
        for name in walk(node):
            if isinstance(name, ast.Name):
                self.known(name)
        renamed = Renamer(self.env, self.held).visit(ast.parse(ast.unparse(node), mode="eval"))
        for read in walk(renamed):
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
                   for n in walk(node))


_INTEGERS = (int, bool, round, pylang.max_key, pylang.min_key)
"""Calls that make an integer of a value: no derivative (``round(x)``, and a float's order key, ``pylang.max_key``)."""
_ONE_SIDED = ""
"""What the forward's name of a local is where one side of an ``if`` assigned it and the other did not."""
_TURN_OWN = "!"
"""What it is where a loop's turns assigned it (or it is the loop's variable), after the loop, and in a turn before
the turn assigns it."""


__all__ = ["WorkItem"]
