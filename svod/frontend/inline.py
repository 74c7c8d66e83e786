"""Calls of other functions inside an ``@svod.jit`` function, compiled into the caller as numba compiles a call
of another ``@njit`` function: the callee's body is placed where the call stands.

::

    def relu(x):                            @svod.jit
        return np.maximum(x, 0.0)           def mlp(x, w, out):
                                                h = x @ w                 h = x @ w
    @svod.jit                                   out[:] = relu(h)    ->    _svod_relu0_x = h
    def layer(...): ...                                                   out[:] = np.maximum(_svod_relu0_x, 0.0)

A callee is another ``@svod.jit`` function or a plain Python function (not NumPy's, not svod's, not an
``@svod.func``, which kernels call themselves), called from the function's host code or from a ``prange`` loop's
body. Its arguments bind as Python binds them (``svod.frontend.binding``: by position, by keyword, else the
parameter's default): an array argument is the caller's array (the callee's in-place updates are the caller's),
a name the callee never assigns is the caller's name itself, anything else is computed once into a name of the
callee's own; its locals are renamed apart from the caller's, and the globals it reads resolve in its own module.
A call inside an expression is made first, into a name of its own (not in a loop's bounds or test); ``f(...)[k]``
of a function whose every return is a tuple written out (``return a, b``) is made into as many names, and reads
the ``k``-th. Its returns,
early ones too, assign the call's result in structured control flow (``svod.frontend.returns``); where its
only return is its last statement and returns a local, ``name = f(...)`` makes that local under ``name`` itself
(unless the call or the function reads ``name``), so that an array it makes in a loop is the one ``name`` holds.
"""

from __future__ import annotations

import ast
import copy
import itertools
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend.binding import literal, signature_of
from svod.frontend.names import renamed, stored
from svod.frontend.nodes import code, copied, stands_for, walk
from svod.frontend.phases import resolve
from svod.frontend.returns import returns_of, without_returns
from svod.frontend.source import Source, refusal

MAX_DEPTH = 16
"""Calls inside inlined calls, at most this deep (a recursive function is refused)."""


def inline_calls(source: Source, name: str) -> Source:
    """``source`` with every call of a function svod compiles into it replaced by that function's body."""
    inliner = _Inliner(source, name)
    node = stands_for(copy.copy(source.node), source.node)
    node.body = inliner.block(source.node.body, [])
    return source if not inliner.changed else Source(node, source.file, inliner.names, inliner.described)


class _Inliner:
    def __init__(self, source: Source, name: str) -> None:
        self.source = source
        self.name = name
        self.names = dict(source.names)
        """The caller's names, and those its callees' bodies read under new names."""
        self.counter = itertools.count()
        self.changed = False
        self.described = dict(source.described)
        """What an error calls each name the inlining gives (``Source.described``): a callee's local by its name."""

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def block(self, stmts: Sequence[ast.stmt], stack: list[Any]) -> list[ast.stmt]:
        return [made for stmt in stmts for made in self.statement(stmt, stack)]

    def statement(self, stmt: ast.stmt, stack: list[Any]) -> list[ast.stmt]:
        if isinstance(stmt, (ast.For, ast.While, ast.If)):
            made = copy.copy(stmt)
            before: list[ast.stmt] = []
            if isinstance(made, ast.If):
                before, made.test = self.hoisted(stmt, made.test, stack)
            elif self.calls_in(made.test if isinstance(made, ast.While) else made.iter):
                raise self.refuse(stmt, "a loop's bounds or test call a function; call it before the loop (and at "
                                        "the end of each turn)")
            made.body, made.orelse = self.block(stmt.body, stack), self.block(stmt.orelse, stack)
            return [*before, made]
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            fn = self.callee(stmt.value)
            if fn is not None:
                return self.inlined(stmt, fn, stmt.value, None, stack)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call) and \
                _names(stmt.targets[0]):
            fn = self.callee(stmt.value)
            if fn is not None:
                return self.inlined(stmt, fn, stmt.value, stmt.targets[0], stack)
        if self.calls_in(stmt):
            hoisting = _Hoisting(self)
            rest = stands_for(hoisting.visit(copied(stmt)), stmt)
            return [*self.block(hoisting.assignments, stack), rest]
        return [stmt]

    def calls_in(self, node: ast.AST) -> bool:
        return any(isinstance(inner, ast.Call) and self.callee(inner) is not None for inner in walk(node))

    def hoisted(self, stmt: ast.stmt, expr: ast.expr, stack: list[Any]) -> tuple[list[ast.stmt], ast.expr]:
        """``expr`` with each call svod compiles in computed first, into a name of its own: the statements
        that do it, and the expression left."""
        if not self.calls_in(expr):
            return [], expr
        hoisting = _Hoisting(self)
        made = stands_for(hoisting.visit(copied(expr)), expr)
        return self.block(hoisting.assignments, stack), made

    def resolve(self, node: ast.expr) -> Any:
        return resolve(self.names, node)

    def callee(self, call: ast.Call) -> types.FunctionType | None:
        """The function a call runs, where svod compiles it into the caller."""
        found = self.resolve(call.func)
        if getattr(found, "svod_jit", False):
            found = found.fn
        if not isinstance(found, types.FunctionType):
            return None  # (an @svod.func or an @svod.kernel is an object of svod's, not a function)
        module = found.__module__ or ""
        return None if module.split(".")[0] in ("numpy", "svod") else found

    def inlined(self, stmt: ast.stmt, fn: types.FunctionType, call: ast.Call, target: ast.expr | None,
                stack: list[Any]) -> list[ast.stmt]:
        if fn in stack:
            raise self.refuse(stmt, f"{fn.__name__} calls itself: recursion is not supported in a jitted function, "
                                    "whose calls are compiled into it")
        if len(stack) >= MAX_DEPTH:
            raise self.refuse(stmt, f"{fn.__name__} is called {MAX_DEPTH} calls deep, deeper than svod compiles "
                                    "calls into a jitted function")
        callee = Source.of(fn)
        number = next(self.counter)
        arguments = self.bound(stmt, call, fn, number)
        body = list(callee.node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        if target is not None:
            returned = returns_of(body)
            if returned.nothing:
                raise self.refuse(stmt, f"{fn.__name__} returns nothing, and its result is assigned")
            if not returned.always:
                raise self.refuse(stmt, f"{fn.__name__} returns a value on some ways through it only (on others "
                                        "None), and its result is assigned")
        prefix = f"_svod_{fn.__name__}{number}_"
        assigned = stored(body)
        renames: dict[str, str] = {}
        binds: list[ast.stmt] = []
        for parameter, argument in arguments.items():
            if isinstance(argument, ast.Name) and parameter not in assigned:
                renames[parameter] = argument.id  # the caller's array or scalar itself
            else:
                renames[parameter] = prefix + parameter
                binds.append(stands_for(ast.Assign([ast.Name(prefix + parameter, ast.Store())], argument), stmt))
        renames.update({local: prefix + local for local in assigned if local not in arguments})
        into = _returned_into(body, target, call, set(arguments))
        if into is not None:  # the returned local is the caller's name itself, its return the body's end
            renames[into[0]] = into[1]
            body, target = body[:-1], None
        renames.update(self.globals_of(callee, body, renames, prefix))
        self.described.update({new: f"{old} (of {fn.__name__})" for old, new in renames.items()
                               if new.startswith(prefix)})
        flag = f"_svod_returned{number}"
        self.described[flag] = f"whether {fn.__name__} returned"
        body = [renamed(s, renames) for s in body]  # (its globals as the caller names them: calls_in reads them)
        if target is None and any(isinstance(n, ast.Return) and n.value is not None and self.calls_in(n.value)
                                  for s in body for n in walk(s)):
            target = ast.Name(f"_svod_unused{number}", ast.Store())  # the value is dropped, its calls made
            self.described[target.id] = f"the value {fn.__name__} returns"
        made = without_returns(body, None if target is None else _located(target, stmt), flag)
        if callee.file != self.source.file:  # errors name the call's line: the caller's file is the one shown
            for node in (n for s in [*binds, *made] for n in walk(s)):
                ast.copy_location(node, stmt)
        for node in binds:
            ast.copy_location(node, stmt)
        self.changed = True
        placed = [ast.fix_missing_locations(s) for s in [*binds, *made]]
        return self.block(placed, [*stack, fn])

    def bound(self, stmt: ast.stmt, call: ast.Call, fn: types.FunctionType, number: int) -> dict[str, ast.expr]:
        """The argument expression of each parameter, bound as Python binds them: by position, by keyword, else
        the parameter's default (a literal, or a global of the caller's that holds it: a dtype)."""
        callee = fn.__name__
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise self.refuse(stmt, f"a call of {callee} passes its arguments one by one (no *args or **kwargs)")
        try:
            signature = signature_of(fn, callee)
        except KernelSyntaxError as err:
            raise self.refuse(stmt, err.detail) from None
        try:
            given = signature.bind(*call.args, **{str(k.arg): k.value for k in call.keywords}).arguments
        except TypeError as err:
            raise self.refuse(stmt, f"{callee}{signature}: {err}") from None
        bound: dict[str, ast.expr] = {}
        for name, parameter in signature.parameters.items():
            bound[name] = given[name] if name in given else self.default(stmt, callee, name, parameter.default, number)
        return bound

    def default(self, stmt: ast.stmt, callee: str, parameter: str, value: Any, number: int) -> ast.expr:
        """The expression of a parameter's default: a literal where one writes it, else a global of its own."""
        if isinstance(value, np.ndarray):
            raise self.refuse(stmt, f"{callee}'s parameter {parameter} defaults to an array, one array Python's "
                                    "function keeps from call to call, which a call compiled into a jitted function "
                                    "has not; pass the array")
        made = literal(value)
        if made is not None:
            return ast.copy_location(made, stmt)
        name = f"_svod_{callee}{number}_{parameter}_default"
        self.names[name] = value
        self.described[name] = f"the default of {parameter} (of {callee})"
        return ast.copy_location(ast.Name(name, ast.Load()), stmt)

    def globals_of(self, callee: Source, body: list[ast.stmt], renames: dict[str, str],
                   prefix: str) -> dict[str, str]:
        """The callee's globals that the caller names otherwise (or not at all), under names of their own."""
        found: dict[str, str] = {}
        for node in (n for s in body for n in walk(s)):
            if not isinstance(node, ast.Name) or node.id in renames or node.id in found:
                continue
            if node.id not in callee.names:
                continue  # a builtin
            value = callee.names[node.id]
            if node.id in self.names and self.names[node.id] is value:
                continue
            found[node.id] = prefix + node.id
            self.names[prefix + node.id] = value
        return found


class _Hoisting(ast.NodeTransformer):
    """Replaces each call the inliner compiles in (outermost first) by a fresh name, collecting ``name =
    call`` statements in the order Python makes the calls."""

    def __init__(self, inliner: _Inliner) -> None:
        self.inliner = inliner
        self.assignments: list[ast.stmt] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if self.inliner.callee(node) is None:
            return self.generic_visit(node)
        name = f"_svod_result{next(self.inliner.counter)}"
        self.inliner.described[name] = f"the result of `{code(node, 40)}`"
        return self.made(node, ast.Name(name, ast.Store()), name)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        """``f(...)[k]`` of a function that returns a tuple of ``n`` (``return a, b`` on every way): the call
        unpacked into ``n`` names of its own, as Python makes every element, and its ``k``-th read."""
        call = node.value if isinstance(node.value, ast.Call) else None
        fn = None if call is None else self.inliner.callee(call)
        k = _integer(node.slice)
        n = None if fn is None else _tuple_length(fn)
        if call is None or fn is None or k is None or n is None:
            return self.generic_visit(node)
        if not -n <= k < n:
            raise self.inliner.refuse(node, f"{fn.__name__} returns a tuple of {n}, which has no element {k}")
        number = next(self.inliner.counter)
        names = [f"_svod_result{number}_{j}" for j in range(n)]
        for j, name in enumerate(names):
            self.inliner.described[name] = f"element {j} of the result of `{code(node.value, 40)}`"
        target = ast.Tuple([ast.Name(name, ast.Store()) for name in names], ast.Store())
        return self.made(call, target, names[k])

    def made(self, call: ast.Call, target: ast.expr, read: str) -> ast.expr:
        """``call`` assigned to ``target`` first (the inliner then compiles it in, and the calls in its arguments),
        and the name ``read`` in its place."""
        assign = stands_for(ast.Assign([target], call), call)
        self.assignments.append(ast.fix_missing_locations(ast.copy_location(assign, call)))
        return stands_for(ast.copy_location(ast.Name(read, ast.Load()), call), call)

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node  # (a lambda's calls run when it is called: svod refuses lambdas where it meets them)


def _integer(node: ast.expr) -> int | None:
    """The integer an index written as a constant stands for (``0``, ``-1``), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _integer(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _tuple_length(fn: types.FunctionType) -> int | None:
    """How many values ``fn`` returns where each of its returns is a tuple of as many written out (``return
    a, b``), else None."""
    returns = [n for s in Source.of(fn).node.body for n in walk(s) if isinstance(n, ast.Return)]
    lengths = {len(r.value.elts) if isinstance(r.value, ast.Tuple) and
               not any(isinstance(e, ast.Starred) for e in r.value.elts) else None for r in returns}
    return next(iter(lengths)) if len(lengths) == 1 else None


def _returned_into(body: list[ast.stmt], target: ast.expr | None, call: ast.Call,
                   parameters: set[str]) -> tuple[str, str] | None:
    """The callee's local that ``name = f(...)`` may make under the caller's ``name`` itself, and that name: the
    one its only ``return`` (its last statement) returns, where neither the call's arguments nor the callee read
    ``name``.
    Made so, an array the callee makes at each turn of the caller's loop is the one the caller's name holds, as a
    binding written in the loop is (``svod.frontend.rebinding``), not a second name of a new array each turn."""
    if not isinstance(target, ast.Name) or not body or not isinstance(body[-1], ast.Return):
        return None
    value = body[-1].value
    if not isinstance(value, ast.Name) or value.id in parameters:
        return None
    bound = stored(body)
    read = {n.id for node in [call, *body] for n in walk(node) if isinstance(n, ast.Name)}
    returns = sum(isinstance(n, ast.Return) for s in body for n in walk(s))
    return (value.id, target.id) if value.id in bound and target.id not in read and returns == 1 else None


def _located(target: ast.expr, stmt: ast.stmt) -> ast.expr:
    """The caller's assignment target, each of its nodes at the call's statement."""
    made = copied(target)
    for node in walk(made):
        if isinstance(node, ast.expr):
            ast.copy_location(node, stmt)
    return made


def _names(target: ast.expr) -> bool:
    """Whether an assignment's target is a name or a tuple of names."""
    return isinstance(target, ast.Name) or (isinstance(target, ast.Tuple) and
                                            all(isinstance(t, ast.Name) for t in target.elts))


__all__ = ["inline_calls"]
