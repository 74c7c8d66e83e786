"""The parts of an ``@svod.jit`` function (``svod.frontend.jit``): its top-level statements read as phases
(a ``prange`` nest, or sequential code: one kernel each), definitions of sizes and scalars, temporaries and
loops around phases (their ``break``, ``continue`` and early ``return`` made flags first: ``svod.frontend.flow``);
and which scalars its phases carry to one another (``carried``).
"""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import math
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.codegen.lower_cpu import PRIVATE_BYTES
from svod.errors import KernelSyntaxError
from svod.frontend import pylang
from svod.frontend.array_exprs import Expr
from svod.frontend.flow import Flow, Turn, check_assigned, returned_values, tested_flag
from svod.frontend.linalg import COMPOSED, FUNCTIONS, KEYWORDS, unpacked
from svod.frontend.names import loaded, needs, stored
from svod.frontend.nodes import call, code, copied, placed, stands_for, statements_in, walk
from svod.frontend.source import Source, refusal
from svod.frontend.temporaries import Temporary, allocation_kind
from svod.frontend.values import RandomFunction

_HOST_CALLS = (len, min, max, abs, int, float, round)
"""What a definition (``n = a.shape[0] - 1``) may call: it is computed on the host as well as in kernels."""


@dataclass
class Phase:
    """Statements one kernel runs: a top-level ``prange`` loop nest, or sequential code (one work item)."""

    statements: list[ast.stmt]

    @property
    def line(self) -> int:
        return self.statements[0].lineno


@dataclass
class Definition:
    """``name = expression`` of sizes and scalars: computed where it is used (in a kernel, or on the host)."""

    name: str
    statement: ast.Assign


@dataclass
class PlanLoop:
    """``for var in range(...)`` around phases: a plan loop; ``until`` names the scalar a ``break`` (or an
    early ``return``) sets to end it."""

    var: str
    bounds: list[ast.expr]
    body: list[Item]
    statement: ast.For
    until: str | None = None


@dataclass
class Branch:
    """``if``/``else`` around phases: a plan branch on the scalar ``condition`` (0 or 1, which a phase just
    before computed)."""

    condition: str
    then: list[Item]
    otherwise: list[Item]
    statement: ast.If


@dataclass
class Repeat:
    """``while`` around phases: a plan loop that runs while the scalar ``condition`` is 1 (its body's last
    phase computes it again)."""

    condition: str
    body: list[Item]
    statement: ast.While


@dataclass
class Ordering:
    """``y = np.sort(x)``, ``x.sort()``, ``i = np.argsort(x)``, ``y = np.partition(x, k)``, ``x.partition(k)``,
    ``i = np.argpartition(x, k)``, ``m = np.median(x)``, ``m = np.percentile(x, q)`` or ``np.quantile(x, q)``: a
    sort of the plan (``svod.frontend.sorting``) of array ``source``. ``kind`` is 'sort', 'argsort', 'partition',
    'argpartition', 'median' or 'quantile'; ``target`` the array it makes (``source`` itself for ``x.sort()``
    and ``x.partition(k)``) or the scalar it computes; ``axis`` NumPy's (None: the flattened array); ``q`` a
    quantile's fraction: the scalar a phase just before computes, or the int 0 or 1 (NumPy takes that value
    as it is)."""

    kind: str
    target: str
    source: str
    axis: int | None
    statement: ast.stmt
    q: str | int | None = None
    kth: tuple[int, ...] = ()
    """A partition's ``kth`` (a full sort puts every rank in its place)."""


@dataclass
class Factoring:
    """``x = np.linalg.solve(a, b)``, ``np.linalg.inv(a)``, ``np.linalg.cholesky(a)``, ``d = np.linalg.det(a)``
    or ``sign, logdet = np.linalg.slogdet(a)``: a factorisation of the plan (``svod.frontend.linalg``) of
    array ``operands[0]`` (and the right-hand sides ``operands[1]``), into the new array or the scalars
    ``targets``."""

    kind: str
    targets: tuple[str, ...]
    operands: tuple[str, ...]
    statement: ast.Assign

    @property
    def call(self) -> str:
        return f"np.linalg.{self.kind}"


Item = Phase | Definition | Temporary | PlanLoop | Branch | Repeat | Ordering | Factoring


@dataclass
class Structure:
    """A jitted function's top level: its items in order and the names it returns."""

    items: list[Item]
    returns: list[str] = field(default_factory=list)
    returns_tuple: bool = False
    lengths: dict[str, str] = field(default_factory=dict)
    """Per array returned as its first elements (``return y[:k]``), the scalar that says how many: a length
    known only after the run (a compaction's count)."""
    turns: dict[tuple[int, int], Turn] = field(default_factory=dict)
    """The ``for`` loops that must make a turn, by (line, column)."""


class Reader:
    """Reads a function's body into phases, definitions, temporaries and loops."""

    def __init__(self, source: Source, name: str) -> None:
        self.source = source
        self.name = name
        self.described = dict(source.described)
        """What an error calls each name svod gives a value of its own (``Source.described``)."""

    def structure(self) -> Structure:
        body = list(self.source.node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        found = Structure([])
        last = body[-1] if body else None
        if isinstance(last, ast.Return):
            body.pop()
            if last.value is not None:
                last, lengths = self.prefixes(last)
                body += lengths.values()
                found.lengths = {array: f"_svod_length_{array}" for array in lengths}
            if last.value is not None and not all(isinstance(v, ast.Name) for v in returned_values(last.value)):
                last, named = self.named(last)
                body += named
            found.returns, found.returns_tuple = self.returned(last)
        found.turns = check_assigned(self, body, set(_parameters(self.source.node)),
                                      [*found.returns, *found.lengths.values()],
                                      last if isinstance(last, ast.Return) else self.source.node)
        flow = Flow(self, found.returns if isinstance(last, ast.Return) else None)
        found.items = self.items(flow.function(body))
        return found

    def prefixes(self, stmt: ast.Return) -> tuple[ast.Return, dict[str, ast.Assign]]:
        """``return y[:k]`` (alone or in a tuple) as ``return y``, and per such array the assignment of its
        length ``k`` to a name of its own (``Structure.lengths``), which the plan computes where the return
        stands: a prefix of an array whose length the host knows only after the run. Other returns as they
        are."""
        assert stmt.value is not None
        lengths: dict[str, ast.Assign] = {}
        kept: list[ast.expr] = []
        for value in returned_values(stmt.value):
            if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and
                    isinstance(value.slice, ast.Slice) and value.slice.lower is None and value.slice.step is None
                    and value.slice.upper is not None):
                kept.append(value)
                continue
            array = value.value.id
            if array in lengths:
                raise self.refuse(stmt, f"{array} is returned twice; return it once")
            name = f"_svod_length_{array}"
            self.described[name] = f"the length of the returned `{code(value, 40)}`"
            lengths[array] = placed([ast.Assign([ast.Name(name, ast.Store())], value.slice.upper)], stmt)[0]
            kept.append(ast.copy_location(ast.Name(array, ast.Load()), value))
        if not lengths:
            return stmt, {}
        returned = ast.Tuple(kept, ast.Load()) if isinstance(stmt.value, ast.Tuple) else kept[0]
        return placed([ast.Return(returned)], stmt)[0], lengths

    def named(self, stmt: ast.Return) -> tuple[ast.Return, list[ast.stmt]]:
        """A return of expressions as a return of names, each assigned its expression where the return stands
        (in order, as Python evaluates a tuple): an expression alone, each one of a tuple (``return s * 2.0,
        t``), and the tuple of ``np.linalg.slogdet``, ``qr``, ``eigh`` or ``svd``, returned as the tuple of its
        values."""
        assert stmt.value is not None
        value = stmt.value
        kind = next((k for k in FUNCTIONS if self.resolve(value.func) is getattr(np.linalg, k)), None) \
            if isinstance(value, ast.Call) else None
        parts = unpacked(kind, value) if kind is not None and isinstance(value, ast.Call) else None
        if parts is not None:
            names = [f"_svod_returned_{position}" for position in range(len(parts))]
            self.described.update({name: f"the returned {part}" for name, part in zip(names, parts, strict=True)})
            stored = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
            returned = ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load())
            return placed([ast.Return(returned)], stmt)[0], [*placed([ast.Assign([stored], value)], stmt)]
        if not isinstance(value, ast.Tuple):
            self.described["_svod_returned"] = "the returned value"
            assigned: list[ast.stmt] = [*placed([ast.Assign([ast.Name("_svod_returned", ast.Store())], value)], stmt)]
            return placed([ast.Return(ast.Name("_svod_returned", ast.Load()))], stmt)[0], assigned
        kept: list[ast.expr] = []
        made: list[ast.stmt] = []
        for position, element in enumerate(value.elts):
            if isinstance(element, ast.Name):
                kept.append(element)
                continue
            name = f"_svod_returned_{position}"
            self.described[name] = f"the returned `{code(element, 40)}`"
            made += placed([ast.Assign([ast.Name(name, ast.Store())], element)], stmt)
            kept.append(ast.Name(name, ast.Load()))
        return placed([ast.Return(ast.Tuple(kept, ast.Load()))], stmt)[0], made

    def returned(self, stmt: ast.Return) -> tuple[list[str], bool]:
        value = stmt.value
        if value is None:
            return [], False
        return [v.id for v in returned_values(value) if isinstance(v, ast.Name)], isinstance(value, ast.Tuple)

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def unpacked(self, stmt: ast.stmt) -> list[ast.stmt]:
        """``h, w = a.shape`` (or ``a, b = 1, n``) as one assignment per name, so each is a definition;
        ``x: float = v`` as ``x = v`` (an annotation alone does nothing)."""
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is None:
                return []
            return self.unpacked(ast.copy_location(ast.Assign([stmt.target], stmt.value), stmt))
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
                and all(isinstance(t, ast.Name) for t in stmt.targets[0].elts)):
            return [stmt]
        names = [t.id for t in stmt.targets[0].elts if isinstance(t, ast.Name)]
        value = stmt.value
        if isinstance(value, ast.Tuple) and len(value.elts) == len(names):
            if any(set(loaded([v])) & set(names) for v in value.elts):  # a, b = b, a: one statement
                return [stmt]
            parts = list(value.elts)
        elif isinstance(value, ast.Attribute) and value.attr == "shape":
            parts = [ast.Subscript(value, ast.Constant(axis), ast.Load()) for axis in range(len(names))]
        else:
            return [stmt]
        return [ast.fix_missing_locations(ast.copy_location(ast.Assign([ast.Name(n, ast.Store())], part), stmt))
                for n, part in zip(names, parts, strict=True)]

    def items(self, body: Iterable[ast.stmt]) -> list[Item]:
        found: list[Item] = []
        for stmt in (single for statement in body for single in self.unpacked(statement)):
            for item in self.item(stmt):
                if isinstance(item, Phase) and found and isinstance(found[-1], Phase) and \
                        not self.parallel(found[-1]) and not self.parallel(item):
                    found[-1].statements += item.statements  # sequential code runs as one kernel
                else:
                    found.append(item)
        return found

    def item(self, stmt: ast.stmt) -> list[Item]:
        """What one statement between phases is: every kind of statement is taken with Python's meaning or
        refused here (``HOST_STATEMENTS``)."""
        refused = _REFUSED.get(type(stmt))
        if refused is not None:
            raise self.refuse(stmt, refused)
        attribute = next((n for n in walk(stmt) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)),
                         None)
        if attribute is not None:  # its phase would store no element and no name, and be dropped
            raise self.refuse(attribute, f"assigning to an attribute ({attribute.attr}) is not supported in a jitted "
                                         "function: an array element's .real and .imag are read-only in NumPy; "
                                         "store a whole value (a[i] = complex(v, a[i].imag))")
        if isinstance(stmt, (ast.Pass, ast.Break, ast.Continue)):
            return []  # (break and continue around phases are flags by now: Flow)
        ordering = self.ordering(stmt)
        if ordering is not None:
            return ordering
        factoring = self.factoring(stmt)
        if factoring is not None:
            return [factoring]
        if isinstance(stmt, ast.Expr):
            return self.expression_statement(stmt)
        if isinstance(stmt, ast.Return):  # (Flow made every return before the end a flag)
            raise self.refuse(stmt, "internal: a return the reader did not expect")
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if isinstance(stmt.value, ast.Call) and self.allocation(stmt.value) is not None:
                return [Temporary(name, stmt.value, stmt)]
            if self.pure(stmt.value) and not getattr(stmt, "svod_flag", False):
                return [Definition(name, stmt)]
        if isinstance(stmt, ast.For) and self.is_range(stmt.iter) and isinstance(stmt.target, ast.Name) \
                and self.holds_phases(stmt.body):
            if stmt.orelse:
                raise self.refuse(stmt, "a loop's else is not supported in a jitted function")
            until = getattr(stmt, "svod_until", None)
            return [PlanLoop(stmt.target.id, list(stmt.iter.args), self.items(stmt.body), stmt, until)]  # type: ignore[attr-defined]
        if isinstance(stmt, ast.If) and self.holds_phases([stmt]):
            condition, decided = self.decided(stmt, stmt.test)
            return [decided, Branch(condition, self.items(stmt.body), self.items(stmt.orelse), stmt)]
        if isinstance(stmt, ast.While) and self.holds_phases([stmt]):
            if stmt.orelse:
                raise self.refuse(stmt, "a loop's else is not supported in a jitted function")
            if not isinstance(stmt.test, ast.Name):
                raise self.refuse(stmt, "internal: a while loop around phases tests a flag")  # Flow makes it one
            return [Repeat(stmt.test.id, self.items(stmt.body), stmt)]
        if any(isinstance(node, ast.Call) and self.allocation(node) is not None for node in walk(stmt)):
            raise self.refuse(stmt, "a temporary array is made by a statement of its own at the top of a jitted "
                          "function or of a loop around phases (`tmp = np.zeros(n)`)")
        return [Phase([stmt])]

    def ordering(self, stmt: ast.stmt) -> list[Item] | None:
        """The items of a sorting statement (``Ordering``), or None where ``stmt`` is none: its call's
        arguments checked against NumPy's signature (constants, as svod takes them), and a quantile's ``q``
        computed where the statement stands by a phase of its own (a constant int 0 or 1 kept as it is)."""
        found = sorting_call(self, stmt)
        if found is None:
            return None
        kind, call, source = found
        function = getattr(np.ndarray if source is not None else np, kind)
        try:
            bound = inspect.signature(function).bind(*([ast.Name("self", ast.Load())] if source else []), *call.args,
                                                     **{k.arg: k.value for k in call.keywords if k.arg})
        except TypeError as err:
            raise self.refuse(stmt, f"{ast.unparse(call.func)}: {err}") from None
        if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            raise self.refuse(stmt, f"{ast.unparse(call.func)} takes its arguments written out (no * or **)")
        arguments = dict(bound.arguments)
        operand = source if source is not None else arguments.pop("a")
        arguments.pop("self", None)
        if not isinstance(operand, ast.Name):
            raise self.refuse(stmt, f"{ast.unparse(call.func)} sorts an array of a name (`y = x * 2` first)")
        q = arguments.pop("q", None)
        kth = self.kth(stmt, call, arguments.pop("kth", None))
        options: dict[str, Any] = {}
        for name, node in arguments.items():
            try:
                options[name] = _literal(node)
            except ValueError:
                raise self.refuse(stmt, f"{ast.unparse(call.func)}'s {name} is a constant in a jitted function") \
                    from None
        for name, value in options.items():
            allowed = _SORT_OPTIONS.get(name)
            if allowed is not None and value not in allowed:
                raise self.refuse(stmt, f"{ast.unparse(call.func)} takes {name}={value!r}: svod takes "
                                        f"{' or '.join(map(repr, allowed))}")
        default_axis = -1 if kind in _ALONG_AXIS else None
        axis = options.get("axis", default_axis)
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
            raise self.refuse(stmt, f"{ast.unparse(call.func)} takes an int axis, or None")
        name = "quantile" if kind == "percentile" else kind
        assigned = stmt.targets[0] if isinstance(stmt, ast.Assign) else operand  # x.sort() sorts x
        target = assigned.id if isinstance(assigned, ast.Name) else operand.id  # (sorting_call: a name)
        if isinstance(stmt, ast.Assign) and target == operand.id:
            raise self.refuse(stmt, f"{target} = {ast.unparse(call.func)}({target}) makes a new array of the name "
                                    f"{target}; sort it in place (`{target}.sort()`) or use a new name")
        if isinstance(q, (ast.List, ast.Tuple, ast.Set)):
            raise self.refuse(stmt, f"{ast.unparse(call.func)} takes one q in a jitted function (a number): a "
                                    "statement per quantile")
        if q is None:
            return [Ordering(name, target, operand.id, axis, stmt, kth=kth)]
        return [*self.fraction(stmt, kind, q), Ordering(name, target, operand.id, axis, stmt,
                                                        self._fraction_of(stmt, kind, q))]

    def factoring(self, stmt: ast.stmt) -> Factoring | None:
        """The factorisation of a ``np.linalg`` statement (``linalg_call``), or None where ``stmt`` is none: its
        operands names of arrays, its result one name (a name per part of a tuple, ``linalg.unpacked``, as
        NumPy's unpacks)."""
        kind = linalg_call(self, stmt)
        if kind is None or not isinstance(stmt, ast.Assign):
            return None
        call = stmt.value
        allowed = KEYWORDS.get(kind, {})
        if isinstance(call, ast.Call) and allowed and any(
                k.arg not in allowed or not isinstance(k.value, ast.Constant)
                or not any(k.value.value is v or (k.value.value == v and type(v) is str) for v in allowed[k.arg])
                for k in call.keywords):
            taken = ", ".join(f"{k}={' or '.join(map(repr, values))}" for k, values in allowed.items())
            raise self.refuse(stmt, f"np.linalg.{kind} takes {taken} in a jitted function, written out; no other "
                                    "value and no other keyword")
        if not isinstance(call, ast.Call) or (call.keywords and not allowed) or \
                len(call.args) != (2 if kind == "solve" else 1) or not all(isinstance(a, ast.Name) for a in call.args):
            raise self.refuse(stmt, f"np.linalg.{kind} takes {'a and b' if kind == 'solve' else 'a'} written out, "
                                    "names of arrays (`y = x * 2` first), in a jitted function")
        target = stmt.targets[0]
        names = [t.id for t in target.elts if isinstance(t, ast.Name)] if isinstance(target, ast.Tuple) \
            else [target.id] if isinstance(target, ast.Name) else []
        parts = unpacked(kind, call)
        if len(names) != (1 if parts is None else len(parts)) or (isinstance(target, ast.Tuple) and parts is None):
            count = "a name" if parts is None else f"{('two', 'three')[len(parts) - 2]} names"
            raise self.refuse(stmt, f"np.linalg.{kind}'s result is assigned to {count}" +
                              ("" if parts is None else f" (`{', '.join(parts)} = ...`)"))
        operands = tuple(a.id for a in call.args if isinstance(a, ast.Name))
        if set(names) & set(operands):
            raise self.refuse(stmt, f"np.linalg.{kind} makes a new value of a name it reads; use a new name")
        return Factoring(kind, tuple(names), operands, stmt)

    def kth(self, stmt: ast.stmt, call: ast.Call, given: ast.expr | None) -> tuple[int, ...]:
        """A partition's ``kth``: an int, or a tuple or list of ints, written out."""
        if given is None:
            return ()
        try:
            written = _literal(given)
        except ValueError:
            written = None
        values = list(written) if isinstance(written, (tuple, list)) else [written]
        if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise self.refuse(stmt, f"{ast.unparse(call.func)}'s kth is an int or a tuple of ints written out in a "
                                    "jitted function")
        return tuple(v for v in values if isinstance(v, int))

    def fraction(self, stmt: ast.stmt, kind: str, q: ast.expr) -> list[Item]:
        """The phase that computes a quantile's fraction where the statement stands (a percentile's ``q /
        100``, as NumPy divides it), unless ``q`` is a constant int 0 or 1 of ``np.quantile``; a constant
        outside NumPy's range is refused as NumPy refuses it."""
        if isinstance(q, ast.Constant):
            value = q.value
            top = 100 if kind == "percentile" else 1
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
                raise self.refuse(stmt, f"{'Percentiles' if top == 100 else 'Quantiles'} must be in the range "
                                        f"[0, {top}] (NumPy raises ValueError)")
            if kind == "quantile" and isinstance(value, int):
                return []
        value_node: ast.expr = ast.BinOp(q, ast.Div(), ast.Constant(100)) if kind == "percentile" else \
            ast.BinOp(q, ast.Mult(), ast.Constant(1.0))
        made = ast.Assign([ast.Name(self._fraction_name(stmt), ast.Store())], value_node)
        made.svod_flag = True  # type: ignore[attr-defined]  # a phase where it stands (Reader.item)
        return [Phase([ast.fix_missing_locations(ast.copy_location(made, stmt))])]

    def _fraction_of(self, stmt: ast.stmt, kind: str, q: ast.expr) -> str | int:
        if kind == "quantile" and isinstance(q, ast.Constant) and isinstance(q.value, int):
            return q.value
        return self._fraction_name(stmt)

    @staticmethod
    def _fraction_name(stmt: ast.stmt) -> str:
        return f"_svod_q{stmt.lineno}_{stmt.col_offset}"

    def decided(self, stmt: ast.If, test: ast.expr) -> tuple[str, Phase]:
        """The scalar a branch around phases tests, and the phase that computes it (1 or 0) where it stands."""
        name = f"_svod_if{stmt.lineno}_{stmt.col_offset}"
        self.described[name] = f"the test of the if at line {stmt.lineno}"
        return name, Phase([tested_flag(name, test, stmt)])

    def expression_statement(self, stmt: ast.Expr) -> list[Item]:
        """An expression evaluated for its effect: a constant or a name has none; an atomic update is kernel
        code; any other call is refused, never dropped."""
        value = stmt.value
        if isinstance(value, (ast.Constant, ast.Name)):
            return []
        if isinstance(value, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise self.refuse(stmt, "a jitted function is not a generator: yield is not supported; return arrays")
        if not isinstance(value, ast.Call):
            raise self.refuse(stmt, "an expression whose value is not used does nothing; assign it or remove it")
        callee = self.resolve(value.func)
        if callee in (pylang.atomic_add, pylang.atomic_max, pylang.atomic_min) or isinstance(callee, RandomFunction):
            return [Phase([stmt])]  # (svod's random calls: svod.frontend.random_arrays)
        what = ast.unparse(value.func)
        if callable(callee):
            raise self.refuse(stmt, f"{what} is not a function a jitted function runs for its effect (it runs "
                                    "other jitted and plain Python functions, x.fill and atomics)")
        raise self.refuse(stmt, f"{what} is not a function svod knows; a call's effect would be lost")

    def reductions(self, stmt: ast.stmt) -> set[str]:
        """The locals a parallel loop reduces across its work items, as numba reads it: ``s += e``, ``s *= e``,
        ``s = max(s, e)``, ``s = min(s, e)`` on a name the loop's body does not otherwise assign."""
        if not self.is_prange(stmt):
            return set()
        reduced: set[str] = set()
        assigned: set[str] = set()
        for inner in walk(stmt):
            if isinstance(inner, ast.AugAssign) and isinstance(inner.target, ast.Name) \
                    and isinstance(inner.op, (ast.Add, ast.Sub, ast.Mult)):
                reduced.add(inner.target.id)
            elif isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name):
                name = inner.targets[0].id
                value = inner.value
                if isinstance(value, ast.Call) and self.resolve(value.func) in (max, min) and \
                        any(isinstance(a, ast.Name) and a.id == name for a in value.args):
                    reduced.add(name)
                else:
                    assigned.add(name)
        return reduced - assigned

    def sequential(self, stmt: ast.stmt) -> ast.stmt:
        """A prange nest as a sequential loop nest (a reduction across its work items, which svod's lowering
        splits over threads in a fixed order). One that draws random numbers is refused: its draws would be the
        serial code's, not its work items' (``svod.random``), and differ from plain Python's."""
        reader = self
        for node in walk(stmt):
            if isinstance(node, ast.Call) and _random(self.resolve(node.func)):
                raise self.refuse(node, "a svod.prange that reduces a scalar runs as a sequential loop in a jitted "
                                        "function, and draws made in it would not be its work items' (svod.random): "
                                        "draw into an array in one prange, and reduce it in another")

        class Sequential(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.AST:
                self.generic_visit(node)
                if reader.resolve(node.func) is pylang.prange:
                    return ast.copy_location(ast.Call(ast.Name("range", ast.Load()), node.args, node.keywords), node)
                return node

        return ast.fix_missing_locations(Sequential().visit(copied(stmt)))

    def parallel(self, phase: Phase) -> bool:
        return any(self.is_prange(s) for s in phase.statements)

    def holds_phases(self, body: Sequence[ast.stmt]) -> bool:
        """Whether statements hold a parallel loop or a temporary at their top level (or in a loop or an
        ``if`` there that does): then a loop or ``if`` around them is the plan's, else it is sequential code
        of one kernel."""
        for stmt in body:
            if self.is_prange(stmt):
                return True
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and self.allocation(stmt.value):
                return True
            if sorting_call(self, stmt) is not None or linalg_call(self, stmt) is not None:
                return True
            if isinstance(stmt, ast.For) and self.is_range(stmt.iter) and self.holds_phases(stmt.body):
                return True
            if isinstance(stmt, ast.While) and self.holds_phases(stmt.body):
                return True
            if isinstance(stmt, ast.If) and self.holds_phases([*stmt.body, *stmt.orelse]):
                return True
        return False

    def is_prange(self, stmt: ast.stmt) -> bool:
        return isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Call) and \
            self.resolve(stmt.iter.func) is pylang.prange

    def is_range(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.resolve(node.func) is range and not node.keywords

    def allocation(self, call: ast.Call) -> str | None:
        kind = allocation_kind(call)
        return kind if kind is not None and self.resolve(call.func) is getattr(np, kind) else None

    def pure(self, node: ast.expr) -> bool:
        """Whether ``node`` computes a scalar from sizes and scalars alone (no array element, no call but
        ``len``, ``min``, ``max``, ``abs``, ``int``, ``float``, ``round``)."""
        for inner in walk(node):
            if isinstance(inner, ast.Subscript) and not (isinstance(inner.value, ast.Attribute)
                                                         and inner.value.attr == "shape"):
                return False
            if isinstance(inner, ast.Call) and self.resolve(inner.func) not in _HOST_CALLS:
                return False
            if isinstance(inner, (ast.Lambda, ast.NamedExpr, ast.ListComp, ast.GeneratorExp, ast.Await)):
                return False
        return True

    def resolve(self, node: ast.expr) -> Any:
        return resolve(self.source.names, node)

SORTING = ("sort", "argsort", "partition", "argpartition", "median", "percentile", "quantile")
"""The NumPy functions a jitted function's statement may call as a sort of the plan (``Ordering``)."""
_ALONG_AXIS = ("sort", "argsort", "partition", "argpartition")
"""The sorts whose ``axis`` is the last by default (a median's is None: the flattened array)."""
_IN_PLACE = ("sort", "partition")
"""The array methods that sort the array itself, returning None."""
_SORT_OPTIONS: dict[str, tuple[Any, ...]] = {
    "kind": (None, "quicksort", "mergesort", "heapsort", "stable", "introselect"), "order": (None,),
    "stable": (None, True, False), "out": (None,), "overwrite_input": (False, True), "keepdims": (False,),
    "method": ("linear",), "weights": (None,)}
"""The values a sorting call's options may take (a radix sort is stable whatever kind is asked for)."""


def sorting_call(reader: Reader, stmt: ast.stmt) -> tuple[str, ast.Call, ast.Name | None] | None:
    """``(kind, call, owner)`` of a sorting statement: ``y = np.sort(x)`` and ``np.argsort``, ``np.partition``,
    ``np.argpartition``, ``np.median``, ``np.percentile``, ``np.quantile`` assigned to a name, ``y =
    x.argsort()`` or ``x.argpartition(k)``, or ``x.sort()`` and ``x.partition(k)`` (owner ``x``); None for any
    other statement."""
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.attr in _ALONG_AXIS \
            and not isinstance(reader.resolve(func.value), types.ModuleType):  # an array's method, not np.sort
        owner: ast.Name | None = func.value
        kind = func.attr
    else:
        callee = reader.resolve(func)
        kind = next((k for k in SORTING if callee is getattr(np, k)), "")
        owner = None
        if not kind:
            return None
    assigned = isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    if (kind in _IN_PLACE and owner is not None) != isinstance(stmt, ast.Expr) or \
            (isinstance(stmt, ast.Assign) and not assigned):
        return None  # x.sort() and x.partition(k) return None; the others' values are assigned to a name
    return kind, value, owner


def linalg_call(reader: Reader, stmt: ast.stmt) -> str | None:
    """The ``np.linalg`` function (``linalg.FUNCTIONS``, or one of ``linalg.COMPOSED``) a statement assigns the
    value of, or None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    callee = reader.resolve(stmt.value.func)
    return next((kind for kind in (*FUNCTIONS, *COMPOSED) if callee is getattr(np.linalg, kind)), None)


def runs_in_order(reader: Reader, stmt: ast.For, arrays: Mapping[str, Expr]) -> bool:
    """Whether ``stmt`` is a ``prange`` loop that runs as the ``range`` loop Python runs it as (``in_range``),
    where numba runs its turns at once and reduces an array ``+=`` across them: one that holds a plan step no work
    item runs (``linalg_call``, ``sorting_call``), or a reduction into a large array (``_sums_into_large``)."""
    if not reader.is_prange(stmt):
        return False
    if any(linalg_call(reader, s) or sorting_call(reader, s) for s in statements_in(stmt)):
        return True
    return _sums_into_large(reader, stmt, arrays)


def _sums_into_large(reader: Reader, stmt: ast.For, arrays: Mapping[str, Expr]) -> bool:
    """Whether the turns of ``prange`` loop ``stmt`` add into a whole array (of ``arrays``: ``acc += x[i]``,
    numba's array reduction) larger than a CPU thread's private copies of a kernel's sums hold
    (``PRIVATE_BYTES``), and do nothing else but compute the turn's own names: in one kernel, a work item a
    turn, each add into that array would be a locked one (a compare-and-swap loop for a float), in the order
    the threads take; in order, each turn's statement runs over every thread and the sum's order is fixed. A
    body that stores elsewhere, reads the sum, draws random numbers, calls a function of its own or leaves
    the loop early stays a ``prange``, whose checks refuse what would race."""
    summed = [s.target.id for s in stmt.body if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name)
              and isinstance(s.op, (ast.Add, ast.Sub)) and s.target.id in arrays]
    turn = [s for s in stmt.body if isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets)]
    if not summed or stmt.orelse or len(summed) + len(turn) != len(stmt.body):
        return False
    made = stored(t for s in turn for t in s.targets)
    calls = [c for s in stmt.body for c in walk(s) if isinstance(c, ast.Call)]
    if set(arrays) & made or set(summed) & set(loaded(stmt.body)) or \
            not all(_numpy_function(reader.resolve(c.func)) for c in calls):
        return False
    return any(_bytes(arrays[name]) > PRIVATE_BYTES for name in summed)


def _numpy_function(value: Any) -> bool:
    """Whether ``value`` is a function of NumPy's (not of ``np.random``), or a number's builtin: a call of one
    has no effect but its value."""
    return (isinstance(value, np.ufunc) or getattr(value, "__module__", None) in ("numpy", "math")
            or any(value is f for f in (abs, min, max, float, int, complex))) and not _random(value)


def _bytes(array: Expr) -> int:
    """The bytes of ``array``, or 0 where a length is one the host does not know before the run."""
    sizes = [d for d in array.shape if isinstance(d, int)]
    return math.prod(sizes) * array.dtype.itemsize if len(sizes) == len(array.shape) else 0


def in_range(stmt: ast.For) -> ast.For:
    """``prange`` loop ``stmt`` as the ``range`` loop Python runs it as (``runs_in_order``): its turns in order,
    each statement of a turn over every thread."""
    turns = stmt.iter
    assert isinstance(turns, ast.Call)  # (a prange's)
    ranged = stands_for(copy.copy(stmt), stmt)
    ranged.iter = ast.copy_location(call("range", *turns.args), turns)
    return ranged


def _literal(node: ast.expr) -> Any:
    """The value of a literal written out (``-1``, ``(0, 2)``, ``"stable"``); ValueError for anything else."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as err:
        raise ValueError(ast.dump(node)) from err


def _random(value: Any) -> bool:
    """Whether ``value`` is one of ``np.random``'s functions (or a draw svod named: ``random_arrays.ONE``)."""
    return getattr(value, "__self__", None) is np.random.mtrand._rand or \
        (isinstance(value, RandomFunction) and not value.plan)


def resolve(names: Mapping[str, Any], node: ast.expr) -> Any:
    """What ``node`` names among ``names`` (a function's globals) or the builtins, following attributes; None
    where it is neither."""
    if isinstance(node, ast.Name):
        return names.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = resolve(names, node.value)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def scalar_type(value: Any) -> bool:
    """Whether ``value`` is one of NumPy's scalar types (``np.float64``: a conversion, and a dtype)."""
    return isinstance(value, type) and issubclass(value, np.generic)

_REFUSED: dict[type, str] = {
    kind: what for kind, what in (
        (ast.FunctionDef, "a function defined inside a jitted function is not supported; define it at module level"),
        (ast.AsyncFunctionDef, "async functions are not supported in a jitted function"),
        (ast.ClassDef, "a class defined inside a jitted function is not supported"),
        (ast.Delete, "del is not supported in a jitted function"),
        (ast.AsyncFor, "async for is not supported in a jitted function"),
        (ast.With, "a with block is not supported in a jitted function (svod raises no floating-point warnings: "
                   "remove np.errstate); write its body without it"),
        (ast.AsyncWith, "async with is not supported in a jitted function"),
        (ast.Match, "match is not supported in a jitted function; use if/elif"),
        (ast.Raise, "raise is not supported in a jitted function; check before the call"),
        (ast.Try, "try is not supported in a jitted function"),
        (getattr(ast, "TryStar", ast.Try), "try is not supported in a jitted function"),
        (ast.Assert, "assert is not supported in a jitted function; check before the call"),
        (ast.Import, "import inside a jitted function is not supported; import at module level"),
        (ast.ImportFrom, "import inside a jitted function is not supported; import at module level"),
        (ast.Global, "global is not supported in a jitted function: it changes no array"),
        (ast.Nonlocal, "nonlocal is not supported in a jitted function"),
        (getattr(ast, "TypeAlias", ast.Delete), "del is not supported in a jitted function"),
    )}
"""The statements a jitted function refuses between its phases, with what to write instead."""

HOST_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Expr, ast.Return,
                   ast.Pass, ast.Break, ast.Continue, *_REFUSED)
"""Every kind of statement the reader of a jitted function takes or refuses (tests hold it to ``ast.stmt``'s
subclasses)."""


def _parameters(function: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]


def _nodes(item: Item) -> list[ast.AST]:
    if isinstance(item, Phase):
        return list(item.statements)
    if isinstance(item, Definition):
        return [item.statement]
    if isinstance(item, Temporary):
        return [item.call]
    if isinstance(item, (Branch, Repeat)):
        return [ast.Name(item.condition, ast.Load())]
    if isinstance(item, Ordering):
        return [ast.Name(n, ast.Load()) for n in (item.source, item.q) if isinstance(n, str)]
    if isinstance(item, Factoring):
        return [ast.Name(n, ast.Load()) for n in item.operands]
    return [*item.bounds, *([ast.Name(item.until, ast.Load())] if item.until else [])]


def inner_items(item: Item) -> list[Item]:
    """The items a loop or a branch holds."""
    if isinstance(item, (PlanLoop, Repeat)):
        return item.body
    if isinstance(item, Branch):
        return [*item.then, *item.otherwise]
    return []


def _flat(items: Sequence[Item]) -> list[Item]:
    return [inner for item in items for inner in [item, *_flat(inner_items(item))]]


def _branch_definitions(items: Sequence[Item], inside: bool = False) -> set[str]:
    """The names a definition inside a branch of the plan assigns (at any depth)."""
    found: set[str] = set()
    for item in items:
        if isinstance(item, Definition) and inside:
            found.add(item.name)
        elif isinstance(item, Branch):
            found |= _branch_definitions([*item.then, *item.otherwise], True)
        else:
            found |= _branch_definitions(inner_items(item), inside)
    return found


def _turn_carried_definitions(items: Sequence[Item]) -> set[str]:
    """The names a definition inside a plan loop assigns that the loop's body reads at or before the definition
    (at any depth), and the definitions that read them so: such a read finds the last turn's value, where
    computed where it is read it would be this turn's."""
    found: set[str] = set()
    for item in items:
        if isinstance(item, PlanLoop):
            body = _flat(item.body)
            for position, inner in enumerate(body):
                if not isinstance(inner, Definition):
                    continue
                readers = [other for other in body[:position + 1] if inner.name in needs(_nodes(other))]
                if readers:  # the name, and each definition that reads it (else computed later, at its reads)
                    found |= {inner.name, *(other.name for other in readers if isinstance(other, Definition))}
        found |= _turn_carried_definitions(inner_items(item))
    return found


def carried(structure: Structure, reader: Reader) -> set[str]:
    """The scalars a phase computes (sequential code's locals, a parallel loop's reductions) that another
    part of the function reads or returns: each lives in a one-element plan buffer between phases. So does a
    scalar a definition inside a branch of the plan assigns: computed where it is read, it would be the value
    of whichever definition of it came last, not of the branch the run took; and one that a loop's turn reads
    before the definition assigns it again (``_turn_carried_definitions``)."""
    items = _flat(structure.items)
    made: dict[int, set[str]] = {}
    for position, item in enumerate(items):
        if isinstance(item, Phase):
            parallel = [st for st in item.statements if reader.is_prange(st)]
            made[position] = set().union(*(reader.reductions(st) for st in parallel)) if parallel \
                else stored(item.statements)
        elif isinstance(item, Definition):
            made[position] = {item.name}
        elif isinstance(item, Ordering) and item.kind in ("median", "quantile"):
            made[position] = {item.target}
        elif isinstance(item, Factoring) and item.kind in ("det", "slogdet"):
            made[position] = set(item.targets)
    found: set[str] = set()
    returned = set(structure.returns) | set(structure.lengths.values())
    read = [needs(_nodes(item)) for item in items]
    for position, names in made.items():
        others = returned.union(*(reads for other, reads in enumerate(read) if other != position))
        found |= names & others
    phases_make = set().union(*(names for position, names in made.items()
                                if isinstance(items[position], (Phase, Ordering, Factoring))))
    phases_make |= _branch_definitions(structure.items) | _turn_carried_definitions(structure.items)
    defined = set().union(*(names for position, names in made.items() if isinstance(items[position], Definition)))
    return (found & phases_make) | (returned & defined)  # a returned scalar comes from its cell


def stores_elements(nodes: Iterable[ast.AST], reader: Reader) -> bool:
    """Whether ``nodes`` store into an array's element (or call an atomic on one), or make a call for its effect
    (a statement of a call alone): their kernel runs then, and its translation refuses a call it cannot make,
    which would otherwise be dropped unread with the code that stores nothing."""
    atomics = (pylang.atomic_add, pylang.atomic_max, pylang.atomic_min)
    return any((isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Store))
               or (isinstance(inner, ast.Call) and reader.resolve(inner.func) in atomics)
               or (isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Call))
               for node in nodes for inner in walk(node))
