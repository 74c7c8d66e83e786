"""``@svod.jit``: a whole function, as numba's ``@njit(parallel=True)`` takes it, compiled into a prepared plan.

::

    @svod.jit                                  the function's top-level statements, in order:
    def jacobi(a, b, steps):                   for t in range(steps):        a plan loop over t
        for t in range(steps):                     for i in prange(...):     a phase: one kernel (its nested
            for i in svod.prange(1, n - 1):            ...                   prange loops are its grid)
                b[i] = (a[i-1] + a[i+1]) / 2       ...
            for i in svod.prange(1, n - 1):
                a[i] = b[i]                    tmp = np.zeros(n)             a plan buffer, zeroed where it
        return a                                                             is made (a phase of its own)
                                               n = a.shape[0]                a definition: read where used
                                               other statements              one work item's kernel (a phase)

Each phase is translated as an ``@svod.kernel`` of the names it uses (the function's arrays and scalars, the
temporaries, the loop variables), so everything svod proves of a kernel holds for it: races between its
work items are refused, accesses are proven or checked, and its errors name the function's file and line.
The phases run in the order written, each seeing what the ones before wrote (the plan derives their
dependencies from the bytes they touch). A call binds the caller's arrays to the plan's buffers (on the CPU,
without a copy); one plan is prepared per signature (each array's dtype and shape, each scalar's kind, and
the values a temporary's shape is computed from), and the kernels it compiles are shared by all of them.
"""

from __future__ import annotations

import ast
import copy
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.device import Buffer, Device
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend import api, pylang
from svod.frontend.pykernel import Kernel
from svod.frontend.source import Source
from svod.ir import UOp
from svod.runtime.plan import ExecutionPlan

ALLOCATIONS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like")
"""The NumPy calls that make a temporary array."""
_HOST_CALLS = (len, min, max, abs, int, float, round)
_DTYPE_ORDER = ("bool", "int32", "int64", "float32", "float64")
"""How far a carried scalar's dtype may widen: rounds of translation enough for any chain."""
"""What a definition (``n = a.shape[0] - 1``) may call: it is computed on the host as well as in kernels."""


# ---- the function's structure ------------------------------------------------------------------------------

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
class Temporary:
    """``name = np.zeros(...)`` (or another allocation): a plan buffer, filled where the statement stands."""

    name: str
    call: ast.Call
    statement: ast.Assign

    @property
    def fill(self) -> ast.expr | None:
        """The value every element takes where the statement stands, or None (``np.empty``, or ``np.full``
        without one, which NumPy refuses when the host makes the array)."""
        kind = _allocation(self.call)
        if kind in ("zeros", "zeros_like"):
            return ast.Constant(0)
        if kind in ("ones", "ones_like"):
            return ast.Constant(1)
        if kind in ("full", "full_like"):
            return self.call.args[1] if len(self.call.args) > 1 else _keyword(self.call, "fill_value")
        return None


@dataclass
class Loop:
    """``for var in range(...)`` around phases: a plan loop."""

    var: str
    bounds: list[ast.expr]
    body: list[Item]
    statement: ast.For


Item = Phase | Definition | Temporary | Loop


@dataclass
class Structure:
    """A jitted function's top level: its items in order and the names it returns."""

    items: list[Item]
    returns: list[str] = field(default_factory=list)
    returns_tuple: bool = False


class Reader:
    """Reads a function's body into phases, definitions, temporaries and loops."""

    def __init__(self, source: Source, name: str) -> None:
        self.source = source
        self.name = name

    def structure(self) -> Structure:
        body = list(self.source.node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        found = Structure([])
        last = body[-1] if body else None
        if isinstance(last, ast.Return):
            found.returns, found.returns_tuple = self.returned(last)
            body.pop()
        found.items = self.items(body)
        return found

    def returned(self, stmt: ast.Return) -> tuple[list[str], bool]:
        value = stmt.value
        if value is None:
            return [], False
        values = value.elts if isinstance(value, ast.Tuple) else [value]
        if not all(isinstance(v, ast.Name) for v in values):
            raise self.refuse(stmt, "a jitted function returns arrays by name (`return out` or `return a, b`)")
        return [v.id for v in values if isinstance(v, ast.Name)], isinstance(value, ast.Tuple)

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.name, node, what)

    def items(self, body: Iterable[ast.stmt]) -> list[Item]:
        found: list[Item] = []
        for stmt in body:
            item = self.item(stmt)
            if isinstance(item, Phase) and found and isinstance(found[-1], Phase) and not self.parallel(found[-1]) \
                    and not self.parallel(item):
                found[-1].statements += item.statements  # sequential code runs as one kernel
            else:
                found.append(item)
        return found

    def item(self, stmt: ast.stmt) -> Item:
        if isinstance(stmt, ast.Return):
            raise self.refuse(stmt, "a jitted function returns at its end only")
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if isinstance(stmt.value, ast.Call) and self.allocation(stmt.value) is not None:
                return Temporary(name, stmt.value, stmt)
            if self.pure(stmt.value):
                return Definition(name, stmt)
        if isinstance(stmt, ast.For) and self.is_range(stmt.iter) and isinstance(stmt.target, ast.Name) \
                and self.holds_phases(stmt.body):
            if stmt.orelse:
                raise self.refuse(stmt, "a loop's else is not supported in a jitted function")
            return Loop(stmt.target.id, list(stmt.iter.args), self.items(stmt.body), stmt)  # type: ignore[attr-defined]
        if any(isinstance(node, ast.Call) and self.allocation(node) is not None for node in ast.walk(stmt)):
            raise self.refuse(stmt, "a temporary array is made by a statement of its own at the top of a jitted "
                          "function or of a loop around phases (`tmp = np.zeros(n)`)")
        return Phase([stmt])

    def reductions(self, stmt: ast.stmt) -> set[str]:
        """The locals a parallel loop reduces across its work items, as numba reads it: ``s += e``, ``s *= e``,
        ``s = max(s, e)``, ``s = min(s, e)`` on a name the loop's body does not otherwise assign."""
        if not self.is_prange(stmt):
            return set()
        reduced: set[str] = set()
        assigned: set[str] = set()
        for inner in ast.walk(stmt):
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
        splits over threads in a fixed order)."""
        reader = self

        class Sequential(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.AST:
                self.generic_visit(node)
                if reader.resolve(node.func) is pylang.prange:
                    return ast.copy_location(ast.Call(ast.Name("range", ast.Load()), node.args, node.keywords), node)
                return node

        return ast.fix_missing_locations(Sequential().visit(_copy(stmt)))

    def parallel(self, phase: Phase) -> bool:
        return any(self.is_prange(s) for s in phase.statements)

    def holds_phases(self, body: Sequence[ast.stmt]) -> bool:
        """Whether a loop's body holds a parallel loop or a temporary at its top level (or in a loop there
        that does): then the loop is the plan's, else it is sequential code of one kernel."""
        for stmt in body:
            if self.is_prange(stmt):
                return True
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and self.allocation(stmt.value):
                return True
            if isinstance(stmt, ast.For) and self.is_range(stmt.iter) and self.holds_phases(stmt.body):
                return True
        return False

    def is_prange(self, stmt: ast.stmt) -> bool:
        return isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Call) and \
            self.resolve(stmt.iter.func) is pylang.prange

    def is_range(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.resolve(node.func) is range and not node.keywords

    def allocation(self, call: ast.Call) -> str | None:
        kind = _allocation(call)
        return kind if kind is not None and self.resolve(call.func) is getattr(np, kind) else None

    def pure(self, node: ast.expr) -> bool:
        """Whether ``node`` computes a scalar from sizes and scalars alone (no array element, no call but
        ``len``, ``min``, ``max``, ``abs``, ``int``, ``float``, ``round``)."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Subscript) and not (isinstance(inner.value, ast.Attribute)
                                                         and inner.value.attr == "shape"):
                return False
            if isinstance(inner, ast.Call) and self.resolve(inner.func) not in _HOST_CALLS:
                return False
            if isinstance(inner, (ast.Lambda, ast.NamedExpr, ast.ListComp, ast.GeneratorExp, ast.Await)):
                return False
        return True

    def resolve(self, node: ast.expr) -> Any:
        """What a callee names in the function's globals (None where it is not a global or an attribute of
        one)."""
        if isinstance(node, ast.Name):
            return self.source.names.get(node.id, getattr(__builtins__, node.id, None) if not isinstance(
                __builtins__, dict) else __builtins__.get(node.id))
        if isinstance(node, ast.Attribute):
            owner = self.resolve(node.value)
            return getattr(owner, node.attr, None) if owner is not None else None
        return None


def _copy(node: ast.stmt) -> ast.stmt:
    return copy.deepcopy(node)


def _allocation(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name if name in ALLOCATIONS else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def refusal(source: Source, name: str, node: ast.AST, what: str) -> KernelSyntaxError:
    """``what`` is wrong with ``node`` of a jitted function: the error names its file and line and shows the
    code."""
    code = " ".join(ast.unparse(node).split())
    shown = code if len(code) <= 80 else code[:77] + "..."
    return KernelSyntaxError(f"{source.file}:{getattr(node, 'lineno', source.node.lineno)}: {what}: `{shown}`",
                             kernel=name, stage="translate", value=shown)


def _loaded(nodes: Iterable[ast.AST]) -> list[str]:
    """The names ``nodes`` read, in order of first use."""
    found: dict[str, None] = {}
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                found.setdefault(inner.id, None)
    return list(found)


def _statement(code: str, at: ast.AST) -> ast.stmt:
    """One statement svod adds to a phase, placed (for errors) at ``at``."""
    statement = ast.parse(code).body[0]
    for inner in ast.walk(statement):
        ast.copy_location(inner, at)
    return statement


def _augmented(nodes: Iterable[ast.AST]) -> set[str]:
    return {inner.target.id for node in nodes for inner in ast.walk(node)
            if isinstance(inner, ast.AugAssign) and isinstance(inner.target, ast.Name)}


def needs(nodes: Sequence[ast.AST]) -> set[str]:
    """The names ``nodes`` read before they assign them, in the order Python evaluates them (a value before
    its targets; an assignment anywhere counts from where it stands)."""
    assigned: set[str] = set()
    found: set[str] = set()

    class Reads(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Load) and node.id not in assigned:
                found.add(node.id)
            elif isinstance(node.ctx, ast.Store):
                assigned.add(node.id)

        def visit_Assign(self, node: ast.Assign) -> None:
            self.visit(node.value)
            for target in node.targets:
                self.visit(target)

        def visit_AugAssign(self, node: ast.AugAssign) -> None:
            self.visit(node.value)
            if isinstance(node.target, ast.Name) and node.target.id not in assigned:
                found.add(node.target.id)
            self.visit(node.target)

        def visit_For(self, node: ast.For) -> None:
            self.visit(node.iter)
            self.visit(node.target)
            for stmt in [*node.body, *node.orelse]:
                self.visit(stmt)

    for node in nodes:
        Reads().visit(node)
    return found


def _nodes(item: Item) -> list[ast.AST]:
    if isinstance(item, Phase):
        return list(item.statements)
    if isinstance(item, Definition):
        return [item.statement]
    if isinstance(item, Temporary):
        return [item.call]
    return list(item.bounds)


def _flat(items: Sequence[Item]) -> list[Item]:
    return [inner for item in items for inner in ([item, *_flat(item.body)] if isinstance(item, Loop) else [item])]


def carried(structure: Structure, reader: Reader) -> set[str]:
    """The scalars a phase computes (sequential code's locals, a parallel loop's reductions) that another
    part of the function reads or returns: each lives in a one-element plan buffer between phases."""
    items = _flat(structure.items)
    made: dict[int, set[str]] = {}
    for position, item in enumerate(items):
        if isinstance(item, Phase):
            parallel = [st for st in item.statements if reader.is_prange(st)]
            made[position] = set().union(*(reader.reductions(st) for st in parallel)) if parallel \
                else _stored(item.statements)
        elif isinstance(item, Definition):
            made[position] = {item.name}
    found: set[str] = set()
    for position, names in made.items():
        others = set(structure.returns).union(*(needs(_nodes(item)) for other, item in enumerate(items)
                                                if other != position and not isinstance(item, Loop)))
        found |= names & others
    phases_make = set().union(*(names for position, names in made.items() if isinstance(items[position], Phase)))
    return found & phases_make


def _stores_elements(nodes: Iterable[ast.AST], reader: Reader) -> bool:
    """Whether ``nodes`` store into an array's element (or call an atomic on one)."""
    atomics = (pylang.atomic_add, pylang.atomic_max, pylang.atomic_min)
    return any((isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Store))
               or (isinstance(inner, ast.Call) and reader.resolve(inner.func) in atomics)
               for node in nodes for inner in ast.walk(node))


def _stored(nodes: Iterable[ast.AST]) -> set[str]:
    return {inner.id for node in nodes for inner in ast.walk(node)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}


# ---- one signature's plan ------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """A jitted function's plan for one signature: the plan buffer of each array argument (None for a
    scalar), the scalars each run passes, what the function returns, and where each phase comes from."""

    plan: ExecutionPlan
    slots: list[int | None]
    variables: tuple[str, ...]
    returns: list[tuple[str, int | None, tuple[int, ...]]]
    """Per returned name: the name, its temporary's plan buffer (None for an argument), and its shape (none
    for a scalar, which comes back as a Python number)."""
    returns_tuple: bool
    located: dict[str, Any]
    parameters: list[str]

    def run(self, args: Sequence[Any]) -> Any:
        bound: dict[int | str, Any] = {}
        written_back: list[tuple[np.ndarray, np.ndarray]] = []
        for value, slot in zip(args, self.slots, strict=True):
            if slot is None:
                continue
            if value.flags.c_contiguous:
                bound[slot] = value
            else:  # the plan's kernels use a bound array's memory as it is
                bound[slot] = np.ascontiguousarray(value)
                written_back.append((value, bound[slot]))
        scalars = {name: args[self.parameters.index(name)] for name in self.variables}
        try:
            self.plan.execute(buffers=bound, **scalars)
        except SvodError as err:
            self.locate(err)
            raise
        for original, contiguous in written_back:
            original[...] = contiguous
        results = [self.result(args, name, slot, shape) for name, slot, shape in self.returns]
        if self.returns_tuple:
            return tuple(results)
        return results[0] if results else None

    def result(self, args: Sequence[Any], name: str, slot: int | None, shape: tuple[int, ...]) -> Any:
        """A returned argument itself; a temporary's copy, shaped; a carried scalar's value."""
        if slot is None:
            return args[self.parameters.index(name)]
        values = self.plan.buffers[slot].numpy()
        return values.reshape(shape) if shape else values[0].item()

    def locate(self, err: SvodError) -> None:
        located = self.located.get(err.kernel or "")
        if located is not None:
            located.locate(err)


class Builder:
    """Builds the plan of one jitted function for one signature: arrays and scalars as given, each phase a
    kernel of the names it uses."""

    def __init__(self, jit: Jit, args: Sequence[Any], device: Device,
                 cell_dtypes: dict[str, np.dtype] | None = None) -> None:
        self.jit = jit
        self.source = jit.source
        self.device = device
        self.plan = ExecutionPlan(device)
        self.args = dict(zip(jit.parameters, args, strict=True))
        self.host: dict[str, Any] = dict(self.args)
        """What the host knows before the run: the arguments, the definitions computed from them."""
        self.arrays: dict[str, tuple[int, tuple[int, ...], Any]] = {}
        """Each array a phase may take (an argument or a temporary): its plan buffer, shape and dtype."""
        self.definitions: list[Definition] = []
        self.computed: dict[str, int] = {}
        """Names sequential phases assign, with the line: later phases cannot read them."""
        self.located: dict[str, Any] = {}
        self.carried = carried(jit.structure, jit.reader)
        self.cells: dict[str, int] = {}
        """The plan buffer of each carried scalar (``carried``)."""
        self.cell_dtypes = dict(cell_dtypes or {})
        """The dtype of each carried scalar's buffer: what the phases that compute it make of it, unified as
        numba unifies a local's types (``seen`` of the build before), or int64 at first, the narrowest a
        number unifies from."""
        self.seen: dict[str, np.dtype] = {}
        for name, value in self.args.items():
            if isinstance(value, np.ndarray):
                self.arrays[name] = (self.add_array(name, value.dtype, value.size), value.shape, value.dtype)

    def add_array(self, name: str | None, dtype: np.dtype, size: int) -> int:
        return self.plan.add_buffer(Buffer(self.device, dtypes.from_numpy(dtype), size), name)

    def translate(self) -> None:
        """Only translate the phases: a round that finds the dtypes of the scalars they carry (``seen``)."""
        self.items(self.jit.structure.items, [])

    def build(self) -> Prepared:
        """The plan, prepared."""
        structure = self.jit.structure
        self.items(structure.items, [])
        returns: list[tuple[str, int | None, tuple[int, ...]]] = []
        for name in structure.returns:
            if name in self.cells:
                returns.append((name, self.cells[name], ()))
                continue
            if name not in self.arrays:
                raise KernelSyntaxError(f"{self.source.file}:{self.source.node.lineno}: {self.jit.name} returns "
                                        f"{name}, which is not an array; a jitted function returns arrays",
                                        kernel=self.jit.name, stage="translate", value=name)
            slot, shape, _ = self.arrays[name]
            returns.append((name, None if name in self.args else slot, shape))
        try:
            self.plan.prepare()
        except SvodError as err:
            located = self.located.get(err.kernel or "")
            if located is not None:
                located.locate(err)
            raise
        slots = [self.arrays[name][0] if isinstance(value, np.ndarray) else None for name, value in self.args.items()]
        return Prepared(self.plan, slots, self.plan.variables, returns, structure.returns_tuple, self.located,
                        self.jit.parameters)

    def items(self, items: Sequence[Item], loops: list[str]) -> list[int]:
        ids: list[int] = []
        for item in items:
            if isinstance(item, Definition) and item.name in self.carried:
                ids += self.phase([item.statement], loops)  # it writes the scalar's buffer where it stands
            elif isinstance(item, Definition):
                self.define(item, loops)
            elif isinstance(item, Temporary):
                ids += self.temporary(item, loops)
            elif isinstance(item, Loop):
                ids.append(self.loop(item, loops))
            else:
                ids += self.phase(item.statements, loops)
        return ids

    def define(self, item: Definition, loops: list[str]) -> None:
        self.definitions.append(item)
        if not set(_loaded([item.statement.value])) & set(loops):
            try:
                self.host[item.name] = self.evaluate(item.statement.value)
            except Exception:  # known only in kernels (it reads a scalar the host lacks)
                self.host.pop(item.name, None)

    def temporary(self, item: Temporary, loops: list[str]) -> list[int]:
        if item.name in self.arrays:
            raise self.refuse(item.statement, f"{item.name} is made twice; a temporary is made once")
        try:
            array = self.evaluate(item.call)
        except Exception as err:  # NumPy's own complaint, in the source's words
            raise self.refuse(item.statement, f"the host cannot make this temporary before the run ({err}); its "
                              "shape must follow from the arguments' shapes and values") from err
        self.arrays[item.name] = (self.add_array(item.name, array.dtype, array.size), array.shape, array.dtype)
        fill = item.fill
        if fill is None:
            return []
        indices = [f"_svod_i{axis}" for axis in range(max(array.ndim, 1))]
        target = f"{item.name}[{', '.join(indices)}]" if array.ndim else f"{item.name}[0]"
        code = "".join(f"{'    ' * axis}for {index} in _svod_prange({item.name}.shape[{axis}]):\n"
                       for axis, index in enumerate(indices[:array.ndim]))
        code += f"{'    ' * array.ndim}{target} = {ast.unparse(fill)}\n"
        statements = ast.parse(code).body
        for node in statements:
            for inner in ast.walk(node):
                ast.copy_location(inner, item.statement)
        return self.phase(statements, loops)

    def loop(self, item: Loop, loops: list[str]) -> int:
        if item.var in self.arrays or item.var in self.args:
            raise self.refuse(item.statement, f"the loop variable {item.var} names an argument or array")
        body = self.items(item.body, [*loops, item.var])
        bounds = [self.bound(expr, [*loops, item.var], item.statement) for expr in item.bounds]
        if not 1 <= len(bounds) <= 3:
            raise self.refuse(item.statement, "range takes (stop), (start, stop) or (start, stop, step)")
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        return self.plan.loop(item.var, start, stop, step, body=body)

    def bound(self, expr: ast.expr, loops: list[str], statement: ast.stmt) -> int | UOp:
        """A loop bound: a number the host knows, or an expression of the loop variables and the integer
        arguments each run passes."""
        variables: dict[str, Any] = {name: UOp.define_var(name, -(1 << 63), (1 << 63) - 1) for name in loops}
        variables |= {name: UOp.define_var(name, -(1 << 63), (1 << 63) - 1) for name, value in self.args.items()
                      if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))}
        try:
            value = self.evaluate(expr, variables)
        except Exception as err:  # shown in the source's words
            raise self.refuse(statement, f"a loop around phases has bounds the plan computes from integer arguments "
                              f"and enclosing loops' variables ({err})") from err
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, UOp) and value.dtype == dtypes.index:
            return value
        raise self.refuse(statement, "a loop's bounds are integers")

    def evaluate(self, node: ast.expr, extra: dict[str, Any] | None = None) -> Any:
        """``node`` computed on the host: the function's globals, the arguments and the definitions so far."""
        code = compile(ast.fix_missing_locations(ast.Expression(node)), self.source.file, "eval")
        return eval(code, dict(self.source.names), {**self.host, **(extra or {})})  # the user's code

    def phase(self, statements: list[ast.stmt], loops: list[str]) -> list[int]:
        """Add one phase's kernel to the plan: its id (none for sequential code that stores into no array
        and computes no scalar another part reads). A parallel loop that reduces scalars runs as a sequential
        loop nest, which svod's lowering splits over threads in a fixed order."""
        line = statements[0].lineno
        reader = self.jit.reader
        reduced = set().union(*(reader.reductions(stmt) for stmt in statements))
        if reduced:
            statements = [reader.sequential(stmt) if reader.is_prange(stmt) else stmt for stmt in statements]
        parallel = any(reader.is_prange(stmt) for stmt in statements)
        outgoing = sorted((reduced | (set() if parallel else _stored(statements))) & self.carried)
        definitions = self.preamble(statements)
        incoming = sorted(needs([*definitions, *statements]) & self.carried)
        for name in needs(statements):
            if name in self.computed:
                raise self.refuse(statements[0], f"{name} is computed by sequential code at line {self.computed[name]} "
                                  "and read by a later phase, which svod cannot carry there")
        if not parallel and not outgoing and not _stores_elements(statements, reader):
            self.computed.update({n: line for n in _stored(statements)})
            return []
        loads = [_statement(f"{name} = _svod_{name}[0]", statements[0]) for name in incoming]
        stores = [_statement(f"_svod_{name}[0] = {name}", statements[-1]) for name in outgoing]
        for name in (*incoming, *outgoing):
            self.cell(name)
        body = [*loads, *definitions, *statements, *stores]
        used = set(_loaded(body)) - (_stored(statements) - set(incoming))
        parameters = [name for name in self.jit.parameters if name in used]
        parameters += [name for name in self.arrays if name in used and name not in parameters]
        parameters += [name for name in loops if name in used]
        name = f"{self.jit.name}_{line}"
        node = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in parameters],
                                                               kwonlyargs=[], kw_defaults=[], defaults=[]),
                               body=body, decorator_list=[], returns=None)
        ast.copy_location(node, statements[0])
        ast.fix_missing_locations(node)
        kernel = Kernel(self.jit.fn, name=name, source=Source(node, self.source.file,
                                                               {**self.source.names, "_svod_prange": pylang.prange}),
                        parameters=parameters)
        examples = [self.example(p, loops) for p in parameters]
        bound = kernel.bind(*examples, device=self.device)
        for carried_name in outgoing:
            if carried_name in bound.locals:
                dtype = self.held(np.dtype(bound.locals[carried_name].numpy))
                before = self.seen.get(carried_name)
                self.seen[carried_name] = dtype if before is None else np.promote_types(before, dtype)
        runs = {p for p in parameters if p in loops or (p in self.args and not isinstance(self.args[p], np.ndarray))}
        fixed = {key: int(value) for key, value in bound.var_vals.items() if key not in runs}
        slots = [self.arrays[p][0] for p in parameters if p in self.arrays]
        slots += [self.add_array(None, cell.dtype, cell.size) for cell in bound.arrays[len(slots):]]
        self.located[name] = bound.located
        return [self.plan.add_kernel(bound.ast, slots, fixed)]

    def held(self, dtype: np.dtype) -> np.dtype:
        """A carried scalar's dtype as the device holds it: a device without int64 carries an int in int32."""
        if dtype == np.int64 and dtypes.int64 not in self.device.caps.element_dtypes:
            return np.dtype(np.int32)
        return dtype

    def cell(self, name: str) -> None:
        """The one-element plan buffer of a carried scalar, as an array phases take (``_svod_<name>``)."""
        if name not in self.cells:
            dtype = self.cell_dtypes.get(name, self.held(np.dtype(np.int64)))
            self.cells[name] = self.add_array(None, dtype, 1)
            self.arrays[f"_svod_{name}"] = (self.cells[name], (1,), dtype)

    def preamble(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        """The definitions a phase reads (and those they read), in the order they stand."""
        needed = set(_loaded(statements)) - _stored(statements)
        chosen: list[Definition] = []
        for definition in reversed(self.definitions):
            if definition.name in needed and all(d.name != definition.name for d in chosen):
                chosen.append(definition)
                needed |= set(_loaded([definition.statement.value]))
        return [d.statement for d in reversed(chosen)]

    def example(self, name: str, loops: list[str]) -> Any:
        """An argument like the ones the phase's kernel is called with: an array of the shape and dtype, the
        scalar given, 0 for a loop variable."""
        if name in self.arrays:
            _, shape, dtype = self.arrays[name]
            return np.broadcast_to(np.zeros((), dtype), shape)
        if name in loops:
            return 0
        return self.args[name]

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.jit.name, node, what)


# ---- the decorator -------------------------------------------------------------------------------------------

class Jit:
    """What ``@svod.jit`` makes of a function: call it as the function (on the device given), or ``plan`` /
    ``save`` the plan it runs for some arguments."""

    svod_jit = True

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        parameters = list(inspect.signature(fn).parameters.values())
        for p in parameters:
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
                raise KernelSyntaxError(f"{self.name}: parameter {p.name} must be a plain positional parameter "
                                        "(no defaults, *args or keywords)", kernel=self.name, stage="parse",
                                        value=p.name)
        self.parameters = [p.name for p in parameters]
        self.source = Source.of(fn)
        self.reader = Reader(self.source, self.name)
        self._structure: Structure | None = None
        self._plans: dict[tuple[Any, ...], Prepared] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<svod.jit {self.fn.__qualname__}>"

    def __call__(self, *args: Any, device: str | Device = "CPU") -> Any:
        """Run the function on ``args`` on ``device``: numpy arrays are worked on in place, scalars passed by
        value; returns what the function returns (a temporary comes back as a new array)."""
        return self.prepared(args, api.get_device(device)).run(self._arguments(args))

    def plan(self, *args: Any, device: str | Device = "CPU") -> ExecutionPlan:
        """The prepared plan the function runs as for arguments like ``args``."""
        return self.prepared(args, api.get_device(device)).plan

    def save(self, path: str | os.PathLike[str], *args: Any, device: str | Device = "CPU") -> None:
        """Save the plan for arguments like ``args`` as a plan bundle (``svod.load_plan``; its buffers are
        named as the function's array arguments and temporaries)."""
        self.plan(*args, device=device).save(path)

    @property
    def structure(self) -> Structure:
        """The function's phases, definitions, temporaries and loops, read at the first call (as numba
        compiles at the first call: a function svod cannot take still imports)."""
        if self._structure is None:
            self._structure = self.reader.structure()
        return self._structure

    def prepared(self, args: Sequence[Any], device: Device) -> Prepared:
        values = self._arguments(args)
        with self._lock:
            key = (device.name, *self._signature(values))
            found = self._plans.get(key)
            if found is None:
                found = self._plans[key] = self._build(values, device)
        return found

    def _build(self, values: Sequence[Any], device: Device) -> Prepared:
        """The plan for ``values``. Where phases carry scalars, it is translated until the dtypes of their
        buffers are those the phases make of them (each round can only widen one, so a few rounds do)."""
        builder = Builder(self, values, device)
        for _ in range(len(_DTYPE_ORDER)):
            if not builder.carried:
                break
            builder.translate()
            if all(n in builder.cell_dtypes and builder.cell_dtypes[n] == d for n, d in builder.seen.items()):
                break  # (np.dtype(None) is float64: a missing one must not compare equal)
            builder = Builder(self, values, device, {**builder.cell_dtypes, **builder.seen})
        return Builder(self, values, device, builder.cell_dtypes).build() if builder.carried else builder.build()

    def _arguments(self, args: Sequence[Any]) -> list[Any]:
        if len(args) != len(self.parameters):
            raise KernelSyntaxError(f"{self.name} takes {len(self.parameters)} arguments "
                                    f"({', '.join(self.parameters)}), got {len(args)}", kernel=self.name,
                                    stage="bind", value=len(args))
        return [np.from_dlpack(a) if not isinstance(a, (np.ndarray, np.generic, int, float)) and
                hasattr(a, "__dlpack__") else a for a in args]

    def _signature(self, values: Sequence[Any]) -> list[Any]:
        """What a plan is prepared for: each array's dtype and shape, each scalar's kind (a bool's value, a
        kernel constant), and the values of the scalars the host reads to make temporaries and definitions."""
        host = self._read_on_host()
        found: list[Any] = []
        for name, value in zip(self.parameters, values, strict=True):
            if isinstance(value, np.ndarray):
                found.append(("array", value.dtype.str, value.shape))
            elif isinstance(value, (bool, np.bool_)) or name in host:
                found.append(("value", type(value).__name__, value))
            else:
                found.append(("scalar", type(value).__name__))
        return found

    def _read_on_host(self) -> set[str]:
        """The names the host reads before a run: those of temporaries' calls and definitions."""
        found: set[str] = set()

        def walk(items: Sequence[Item]) -> None:
            for item in items:
                if isinstance(item, Temporary):
                    found.update(_loaded([item.call]))
                elif isinstance(item, Definition):
                    found.update(_loaded([item.statement.value]))
                elif isinstance(item, Loop):
                    walk(item.body)

        walk(self.structure.items)
        return found


def jit(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """``@svod.jit``: the whole function as a prepared plan of kernels (``svod.frontend.jit``)."""
    if fn is None:
        return lambda f: Jit(f, name=name)
    return Jit(fn, name=name)


__all__ = ["Jit", "jit"]
