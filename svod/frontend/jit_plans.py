"""One signature's plan of an ``@svod.jit`` function (``svod.frontend.jit``): ``Builder`` makes each phase a
kernel of the names it uses, each temporary a plan buffer, each loop, branch and sort around phases a step of
the plan, and each scalar the phases carry a one-element buffer of the dtype they make of it; the plan it makes
is a ``Prepared`` (``svod.frontend.jit_prepared``), which runs it on a call's arguments.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from svod.device import Buffer, Device
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError, SvodError, VariableError
from svod.frontend import linalg, linalg_steps, order_statistics, pylang, sorting
from svod.frontend.binding import type_key, values_key
from svod.frontend.complex_values import CarriedComplexError
from svod.frontend.flow import Turn
from svod.frontend.jit_prepared import COMPLEX_PART_NAMES, RANDOM_VARIABLES, Prepared, TurnCheck
from svod.frontend.names import loaded, needs, stored
from svod.frontend.nodes import assign, constant, load, placed, subscript, walk
from svod.frontend.phases import (
    Branch,
    Definition,
    Factoring,
    Item,
    Ordering,
    Phase,
    PlanLoop,
    Reader,
    Repeat,
    Structure,
    carried,
    refusal,
    stores_elements,
)
from svod.frontend.pykernel import COMPLEX_PARTS, Kernel, refuse_draws_in_plan
from svod.frontend.rebinding import HostShape, remade, viewed_names
from svod.frontend.source import Source
from svod.frontend.temporaries import Temporary
from svod.ir import UOp
from svod.runtime.plan import ExecutionPlan

TURN_BOUND = (1 << 31) - 1
"""The values a loop around phases gives its variable where its bounds are the run's integers: within 32 bits,
so that an index it makes with a row's length cannot wrap around 64 (``a[r, :]`` under ``range(n)`` is then
proven free of races); the plan checks each value it gives against it, and raises ``VariableError`` past it."""
WIDENING_ROUNDS = 5
"""Rounds of translation that settle the dtypes of carried scalars: each round that changes one widens it
(int64, float32, float64), so a few rounds reach the dtypes the phases make of them."""


class Jitted(Protocol):
    """What a ``Builder`` reads of the jitted function (``svod.frontend.jit.Jit``) it builds a plan of."""

    fn: Callable[..., Any]
    name: str
    translations: dict[tuple[Any, ...], Any]
    """Each phase's kernel as translated for the arguments it was built for (``Builder.translated``)."""

    @property
    def source(self) -> Source: ...


@dataclass(frozen=True)
class Variant:
    """The function as the plans of some arguments read it: its array statements rewritten as loops for their
    shapes (``svod.frontend.arrays``), or as written; and the names whose values the host reads before a run
    (temporaries' shapes, definitions, and what the rewriting read), which the plan is prepared for."""

    source: Source
    reader: Reader
    structure: Structure
    host: frozenset[str]
    parameters: tuple[str, ...]
    """The parameters each run passes: those bound to arrays and numbers (a constant of the plan, ``binding``,
    is a global of the source)."""
    sampled: frozenset[str] = frozenset()
    """The scalars any computation of the rewriting read (``ArrayRewriter.sampled``): an int among them reads
    this variant for its value alone; one not among them (nor in ``host``) is a run-time value of the plan."""
    written_for: frozenset[str] = frozenset()
    """The scalars whose values array statements were written for (``cov[i:M, i]`` for ``M == 1``: one store)."""
    ranged: tuple[tuple[str, int, int], ...] = ()
    """The ints read at run time as indices (``u[:, t]``), with the least and greatest value they are written for."""
    taped: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """What a tape's calls derive of this variant's syntax trees (``jit_tape``), once: each fact keyed by the
    rest of what it depends on, so that a call like one before does no rewriting again."""


class Builder:
    """Builds the plan of one jitted function for one signature: arrays and scalars as given, each phase a
    kernel of the names it uses."""

    def __init__(self, jit: Jitted, variant: Variant, arguments: Mapping[str, Any], device: Device,
                 cell_dtypes: dict[str, np.dtype] | None = None) -> None:
        self.jit = jit
        self.variant = variant
        self.source = variant.source
        self.device = device
        self.plan = ExecutionPlan(device)
        self.args = {name: arguments[name] for name in variant.parameters}
        self.host: dict[str, Any] = dict(self.args)
        """What the host knows before the run: the arguments, the definitions computed from them."""
        self.outer = self.source.outer_names()
        """The globals the host reads: those the function does not bind itself."""
        self.viewed = viewed_names(jit.source.node)
        """The names another name may hold the array of, in the user's function (``array_made``)."""
        self.arrays: dict[str, tuple[int, tuple[int, ...], Any]] = {}
        """Each array a phase may take (an argument or a temporary): its plan buffer, shape and dtype."""
        self.definitions: list[Definition] = []
        self.computed: dict[str, int] = {}
        """Names sequential phases assign, with the line: later phases cannot read them."""
        self.located: dict[str, Any] = {}
        self.carried = carried(variant.structure, variant.reader)
        self.cells: dict[str, int] = {}
        """The plan buffer of each carried scalar (``carried``)."""
        self.cell_dtypes = dict(cell_dtypes or {})
        """The dtype of each carried scalar's buffer: what the phases that compute it make of it, unified as
        numba unifies a local's types (``seen`` of the build before), or int64 at first, the narrowest a
        number unifies from."""
        self.seen: dict[str, np.dtype] = {}
        self.settling = False
        """Whether this is a round that settles carried dtypes: a phase that makes a scalar of another dtype
        than its buffer's is translated again at once, so that the phases after it read it as it is made."""
        self.turns: list[TurnCheck] = []
        self.complex_slots: set[int] = set()
        """The plan buffers of complex arrays (``add_array``)."""
        self.turned: set[tuple[int, int]] = set()
        """The loops of ``Structure.turns`` that are plan loops, whose trip counts the plan checks."""
        self.ranges: dict[str, tuple[int, int]] = {}
        """The values each loop around phases gives its variable: its kernels' bounds for it, which prove them."""
        self.valued = {name: (int(value), int(value)) for name, value in self.args.items()  # (NumPy int's too)
                       if name in variant.written_for and np.issubdtype(type(value), np.integer)}
        self.valued |= {name: (low, high) for name, low, high in variant.ranged}
        """Ints that bound its kernels: to the values array statements were written for, or to their ranges."""
        for name, value in self.args.items():
            if isinstance(value, np.ndarray):
                try:
                    slot = self.add_array(name, value.dtype, value.shape)
                except SvodError as err:  # a dtype svod has none of (complex128): at the argument's function
                    err.name_kernel(self.jit.name)
                    err.locate(f"{self.source.file}:{self.source.node.lineno}, the argument {name}")
                    raise
                self.arrays[name] = (slot, value.shape, value.dtype)

    def array_made(self, name: str, statement: ast.stmt, shape: tuple[int, ...], dtype: np.dtype) -> int:
        """The plan buffer of the new array of ``shape`` and ``dtype`` that ``statement`` binds ``name`` to: the
        one ``name`` holds where it is made again (``rebinding.remade``), else a new one (a dtype svod has none of
        refused at ``statement``); the host knows its shape (later temporaries' shapes read it)."""
        held = self.arrays.get(name)
        try:
            slot = remade(name, held, shape, dtype, held is not None and name in self.args, self.viewed)
        except ValueError as err:
            raise self.refuse(statement, str(err)) from None
        if slot is None:
            try:
                slot = self.add_array(name, dtype, shape)
            except SvodError as err:  # a dtype svod has none of: at the line that makes it
                err.name_kernel(self.jit.name)
                err.locate(f"{self.source.file}:{statement.lineno}")
                raise
        self.arrays[name], self.host[name] = (slot, shape, dtype), HostShape(shape, dtype)
        return slot

    def add_array(self, name: str | None, dtype: np.dtype, shape: tuple[int, ...]) -> int:
        """A plan buffer for an array of ``dtype`` and ``shape``: a complex one's is its float view's
        (``complex_view``), twice as long."""
        if np.dtype(dtype).kind == "c" and np.dtype(dtype) in COMPLEX_PARTS:
            parts = COMPLEX_PARTS[np.dtype(dtype)]
            slot = self.plan.add_buffer(Buffer(self.device, dtypes.from_numpy(parts), 2 * int(np.prod(shape))), name,
                                        (*shape, 2))
            self.complex_slots.add(slot)
            return slot
        size = int(np.prod(shape))
        return self.plan.add_buffer(Buffer(self.device, dtypes.from_numpy(dtype), size), name, shape)

    def translate(self) -> None:
        """Only translate the phases: a round that finds the dtypes of the scalars they carry (``seen``)."""
        self.settling = True
        self.items(self.variant.structure.items, [])

    def build(self) -> Prepared:
        """The plan, prepared."""
        structure = self.variant.structure
        self.items(structure.items, [])
        returns: list[tuple[str, int | None, tuple[int, ...], int | None]] = []
        for name in structure.returns:
            length = structure.lengths.get(name)
            if length is not None and (name not in self.arrays or not self.arrays[name][1]):
                raise KernelSyntaxError(f"{self.source.file}:{self.source.node.lineno}: {self.jit.name} returns "
                                        f"{name}[:...], and {name} is not an array", kernel=self.jit.name,
                                        stage="build", value=name)
            if name in self.cells:
                returns.append((name, self.cells[name], (), None))
                continue
            if name in self.args and name not in self.arrays:  # a scalar argument the function never assigns
                returns.append((name, None, (), None))
                continue
            if name not in self.arrays:
                raise KernelSyntaxError(f"{self.source.file}:{self.source.node.lineno}: {self.jit.name} returns "
                                        f"{name}, which is not an array or a scalar it computes",
                                        kernel=self.jit.name, stage="build", value=name)
            slot, shape, _ = self.arrays[name]
            if length is not None and self.cell_dtype(length).kind not in "iu":
                raise KernelSyntaxError(f"{self.source.file}:{self.source.node.lineno}: {self.jit.name} returns "
                                        f"{name}[:...] with a length of {self.cell_dtype(length)}, not an integer "
                                        "(NumPy's slice refuses a NumPy bool or a float); int(...) it",
                                        kernel=self.jit.name, stage="build", value=name)
            returns.append((name, None if name in self.args else slot, shape,
                            None if length is None else self.cell(length)))
        for place, turn in structure.turns.items():
            if place not in self.turned:  # a loop inside a kernel (its cell would keep what it held)
                self.must_turn(turn, self.kernel_loop_bounds(turn), [])
        try:
            self.plan.prepare()
        except SvodError as err:
            located = self.located.get(err.kernel or "")
            if located is not None:
                located.locate(err)
            raise
        slots = [self.arrays[name][0] if isinstance(value, np.ndarray) else None for name, value in self.args.items()]
        numbers = frozenset(name for name, value in self.args.items()
                            if isinstance(value, (complex, np.complexfloating)))
        return Prepared(self.plan, slots, self.plan.variables, returns, structure.returns_tuple, self.located,
                        list(self.args), self.turns, frozenset(self.complex_slots), numbers)

    def items(self, items: Sequence[Item], loops: list[str]) -> list[int]:
        ids: list[int] = []
        sequential: list[ast.stmt] = []  # statements of neighbouring items that run as one kernel
        for item in items:
            self.known_carried(item, loops)
            statements = self.sequential(item)
            if statements is not None:
                sequential += statements
                continue
            if sequential:
                ids += self.phase(sequential, loops)
                sequential = []
            if isinstance(item, Definition):
                self.define(item, loops)
            elif isinstance(item, Temporary):
                ids += self.temporary(item, loops)
            elif isinstance(item, PlanLoop):
                ids.append(self.loop(item, loops))
            elif isinstance(item, Branch):
                then, otherwise = self.items(item.then, loops), self.items(item.otherwise, loops)
                ids.append(self.plan.branch(self.cell(item.condition), then, otherwise))
            elif isinstance(item, Repeat):
                ids.append(self.plan.while_loop(self.cell(item.condition), self.items(item.body, loops)))
            elif isinstance(item, Ordering):
                ids += self.ordering(item)
            elif isinstance(item, Factoring):
                ids += self.factoring(item)
            else:
                ids += self.phase(item.statements, loops)
        if sequential:
            ids += self.phase(sequential, loops)
        return ids

    def sequential(self, item: Item) -> list[ast.stmt] | None:
        """The statements of an item that is sequential code: a phase without a parallel loop, or a definition
        of a carried scalar (it writes the scalar's buffer where it stands). Neighbouring ones run as one kernel,
        as the reader joins neighbouring phases: ``crc = 0xFFFF``, the loop that updates it and the lines that
        finish it are one launch, not one each. None for any other item."""
        if isinstance(item, Definition) and item.name in self.carried:
            return [item.statement]
        if isinstance(item, Phase) and not self.variant.reader.parallel(item):
            return list(item.statements)
        return None

    def known_carried(self, item: Item, loops: list[str]) -> None:
        """What the host knows of the carried scalars as ``item`` comes: a definition of one outside every loop
        that the host can compute is known to the items after it until one that may change it (anything but a
        temporary and a definition: a phase, a loop, a branch). A temporary's shape may read it: ``n`` a number
        argument the function assigns later, copied into a local of its own (``jit._with_local_copies``). One that
        reads the name it defines (``n = n + 1``, whose cell may wrap where Python's int grows) stays the run's."""
        if isinstance(item, Definition) and item.name in self.carried:
            self.host.pop(item.name, None)
            if not loops:
                self.learn(item)
        elif not isinstance(item, (Definition, Temporary)):
            for name in self.carried:
                self.host.pop(name, None)

    def define(self, item: Definition, loops: list[str]) -> None:
        self.definitions.append(item)
        if not set(loaded([item.statement.value])) & set(loops):
            self.learn(item)

    def learn(self, item: Definition) -> None:
        """The host's value of what ``item`` defines, computed now; forgotten where the host cannot compute it."""
        try:
            self.host[item.name] = self.evaluate(item.statement.value)
        except Exception:  # known only in kernels (it reads a scalar the host lacks)
            self.host.pop(item.name, None)

    def temporary(self, item: Temporary, loops: list[str]) -> list[int]:
        try:
            array = self.evaluate(item.call)
        except Exception as err:  # NumPy's own complaint, in the source's words
            raise item.unmade(self.source, self.jit.name, err) from err
        self.array_made(item.name, item.statement, array.shape, array.dtype)
        if item.fill is None:
            return []
        return self.phase(item.filling(array.ndim), loops)

    def ordering(self, item: Ordering) -> list[int]:
        """A sort of the plan (``svod.frontend.sorting``): into a new array (``np.sort``, ``np.argsort``), the
        array itself (``x.sort()``), or the carried scalar of a median or quantile."""
        call = ast.unparse(item.statement.value.func) if isinstance(item.statement, (ast.Assign, ast.Expr)) and \
            isinstance(item.statement.value, ast.Call) else item.kind
        if item.source not in self.arrays:
            raise self.refuse(item.statement, f"{call} sorts an array the function has (an argument, a temporary or "
                                              f"an array statement's result); {item.source} is none")
        slot, shape, dtype = self.arrays[item.source]
        reason = sorting.sortable(dtype, self.device)
        if reason is not None:
            raise self.refuse(item.statement, reason)
        values = item.kind in ("sort", "partition")
        in_place = values and item.target == item.source
        try:
            along = sorting.sorted_axis(call, item.axis, item.kth, shape, item.target == item.source)
        except ValueError as err:  # (NumPy's complaint)
            raise self.refuse(item.statement, str(err)) from None
        size = int(np.prod(shape))
        made: list[int]
        if in_place:
            made = self.sorted(slot, shape, along, values=slot)
        elif item.kind in ("sort", "argsort", "partition", "argpartition"):
            if item.target == item.source:
                raise self.refuse(item.statement, f"{item.target} is made twice; a sort's result is a new array, "
                                                  "made once")
            result = dtype if values else sorting.index_dtype(self.device)
            out = self.array_made(item.target, item.statement, (size,) if along is None else shape, result)
            made = self.sorted(slot, shape, along, **{"values" if values else "indices": out})
        else:
            if item.target in self.arrays or item.target in self.args:
                raise self.refuse(item.statement, f"{call} computes a scalar; {item.target} names an array or an "
                                                  "argument")
            if along is not None or (item.kind == "quantile" and size == 0):
                raise self.refuse(item.statement, f"{call} of an empty array (NumPy raises IndexError)" if along is
                                  None else f"{call} along an axis: svod takes axis=None (the whole array), as numba")
            whole = isinstance(item.q, int)
            result = dtype if whole else order_statistics.quantile_dtype(dtype, self.device)
            cell = self.result_cell(item.target, np.dtype(result))
            if item.kind == "median":
                made = order_statistics.add_median(self.plan, slot, cell)
            elif isinstance(item.q, int):
                made = order_statistics.add_quantile(self.plan, slot, cell, whole=item.q)
            else:
                made = order_statistics.add_quantile(self.plan, slot, cell, at=self.cell(str(item.q)))
        return made

    def factoring(self, item: Factoring) -> list[int]:
        """A factorisation of the plan (``svod.frontend.linalg``): into a new array (``solve``, ``inv``,
        ``cholesky``) or the carried scalars of ``det`` and ``slogdet``; what a failure raises is checked after
        each run (the plan's failure flag, which a plan taken out or saved keeps)."""
        for name in item.operands:
            if name not in self.arrays:
                raise self.refuse(item.statement, f"{item.call} takes arrays the function has (an argument, a "
                                                  f"temporary or an array statement's result); {name} is none")
        for name in item.targets if item.kind in ("det", "slogdet") else ():  # (arrays: ``array_made``)
            if name in self.arrays or name in self.args:
                raise self.refuse(item.statement, f"{item.call} computes a scalar; {name} names an array or an "
                                                  "argument")
        (slot, shape, dtype), *rest = (self.arrays[name] for name in item.operands)
        given = [dtype, *(d for _, _, d in rest)]
        reason = linalg.refusal(given, shape, self.device.caps, item.kind)
        if reason is not None:
            raise self.refuse(item.statement, f"{item.call}: {reason}")
        dtype = linalg.result_dtype(*given)
        factoring = linalg.Factoring(self.plan, slot, shape[0], dtype, self.complex_slots)
        if item.kind not in linalg.INFALLIBLE:
            where = f"{self.source.file}:{item.statement.lineno}"
            self.plan.add_failure_flag(factoring.failed, self.jit.name, linalg.failure_message(item.call, where))
        if item.kind in linalg_steps.KINDS:
            return linalg_steps.add(self, item, factoring, (shape[0], shape[1]))
        if item.kind in ("det", "slogdet"):
            cells = [self.result_cell(name, dtype) for name in item.targets]
            if item.kind == "det":
                return factoring.determinant(factoring.scratch(dtype, 1), factoring.scratch(dtype, 1), cells[0])
            return factoring.determinant(*cells)
        made_shape = rest[0][1] if rest else shape
        out = self.array_made(item.targets[0], item.statement, made_shape, dtype)
        if item.kind == "cholesky":
            return factoring.cholesky(out)
        columns = int(np.prod(made_shape[1:], dtype=np.int64))
        return factoring.solve(out, columns, rest[0][0] if rest else None)

    def sorted(self, slot: int, shape: tuple[int, ...], axis: int | None, values: int | None = None,
               indices: int | None = None) -> list[int]:
        """The steps of a sort of plan buffer ``slot``: of the whole (a 1-D array, or the flattened one), or
        along ``axis`` of an n-d one. (A partition is a sort: every rank is in its place.)"""
        if axis is None:
            return sorting.add_sort(self.plan, slot, values=values, indices=indices)
        return sorting.add_axis_sort(self.plan, slot, shape, axis, values=values, indices=indices)

    def result_cell(self, name: str, dtype: np.dtype) -> int:
        """The buffer of carried scalar ``name``, which a step makes of ``dtype``: joined to ``seen`` as a
        phase's scalars are (``translated``); a round that settles dtypes makes it so at once."""
        before = self.seen.get(name)
        self.seen[name] = dtype if before is None else np.promote_types(before, dtype)
        if self.settling and name in self.cells and self.cell_dtype(name) != self.seen[name]:
            self.cell_dtypes[name] = self.seen[name]
            del self.cells[name]
        elif name not in self.cells:
            self.cell_dtypes.setdefault(name, self.held(dtype))
        return self.cell(name)

    def loop(self, item: PlanLoop, loops: list[str]) -> int:
        if item.var in self.arrays or item.var in self.args:
            raise self.refuse(item.statement, f"the loop variable {item.var} names an argument or array")
        bounds = [self.bound(expr, loops, item.statement) for expr in item.bounds]
        start, stop, step = _range_bounds(bounds, item.statement, self)
        values = _values(start, stop, step)
        if values is not None:
            self.ranges[item.var] = values
        turn = self.variant.structure.turns.get((item.statement.lineno, item.statement.col_offset))
        if turn is not None:
            self.must_turn(turn, (start, stop, step), loops)
        never = values is None and _never_turns(start, stop, step)
        body = [] if never else self.items(item.body, [*loops, item.var])  # (no value to build its phases for)
        until = None if item.until is None else self.cell(item.until)
        return self.plan.loop(item.var, start, stop, step, body=body, until=until)

    def kernel_loop_bounds(self, turn: Turn) -> tuple[int | UOp, int | UOp, int | UOp]:
        """The bounds of a loop a kernel runs, where the host knows them before the run (a ``range`` of
        numbers, of shapes and of integer arguments, outside any loop of the kernel's)."""
        call = turn.loop.iter
        refused = self.refuse(turn.loop, f"{turn.name} is assigned only inside this loop, read after it (line "
                                         f"{turn.line}), and the loop's turns are not known before the run; assign "
                                         "it before the loop")
        if turn.nested or not isinstance(call, ast.Call) or not self.variant.reader.is_range(call) or call.keywords:
            raise refused
        try:
            return _range_bounds([self.bound(expr, [], turn.loop) for expr in call.args], turn.loop, self)
        except KernelSyntaxError as err:
            raise refused from err

    def must_turn(self, turn: Turn, bounds: tuple[int | UOp, int | UOp, int | UOp], loops: list[str]) -> None:
        """Check that ``turn``'s loop makes a turn: now where its bounds are numbers, before each run where the
        run's integer arguments set them; refused where they depend on loops around it."""
        place = (turn.loop.lineno, turn.loop.col_offset)
        self.turned.add(place)

        def error(stop: int) -> SvodError:
            return VariableError(f"{self.source.file}:{turn.line}: {turn.name} is read after the loop at line "
                                 f"{place[0]}, which makes no turn (its stop is {stop}; Python raises "
                                 "UnboundLocalError)", kernel=self.jit.name, stage="bind", value=stop)

        if all(isinstance(b, int) for b in bounds):
            start, stop, step = bounds
            if not range(start, stop, step):  # type: ignore[arg-type]
                raise error(stop)  # type: ignore[arg-type]
            return
        if loops:
            raise self.refuse(turn.loop, f"{turn.name} is assigned only inside this loop, read after it (line "
                                         f"{turn.line}), and the loop's turns depend on the loops around it; "
                                         "assign it before the loop")
        self.turns.append(TurnCheck(tuple(b if isinstance(b, UOp) else UOp.const(dtypes.index, b)  # type: ignore[arg-type]
                                          for b in bounds), error))

    def bound(self, expr: ast.expr, loops: list[str], statement: ast.stmt) -> int | UOp:
        """A loop bound: a number the host knows, or an expression of the loop variables and the integer
        arguments each run passes."""
        variables: dict[str, Any] = {name: UOp.define_var(name, *self.ranges.get(name, (-(1 << 63), (1 << 63) - 1)))
                                     for name in loops}
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
        return eval(code, self.outer, {**self.host, **(extra or {})})  # the user's code

    def phase(self, statements: list[ast.stmt], loops: list[str]) -> list[int]:
        """Add one phase's kernel to the plan: its id (none for sequential code that stores into no array
        and computes no scalar another part reads). A parallel loop that reduces scalars runs as a sequential
        loop nest, which svod's lowering splits over threads in a fixed order."""
        line = statements[0].lineno
        reader = self.variant.reader
        reduced = set().union(*(reader.reductions(stmt) for stmt in statements))
        if reduced:
            statements = [reader.sequential(stmt) if reader.is_prange(stmt) else stmt for stmt in statements]
        parallel = any(reader.is_prange(stmt) for stmt in statements)
        outgoing = sorted((reduced | (set() if parallel else stored(statements))) & self.carried)
        definitions = self.preamble(statements, loops)
        # what it may store on some paths keeps its value on the others; a loop's variable is its turn's (Flow)
        incoming = sorted(((needs([*definitions, *statements]) | set(outgoing)) & self.carried) - set(loops))
        for name in needs(statements):
            if name in self.computed:
                raise self.refuse(statements[0], f"{name} is computed by sequential code at line {self.computed[name]} "
                                  "and read by a later phase, which svod cannot carry there")
        if not parallel and not outgoing and not stores_elements(statements, reader):
            self.computed.update({n: line for n in stored(statements)})
            return []
        loads = placed([assign(name, subscript(f"_svod_{name}", [constant(0)])) for name in incoming], statements[0])
        stores = placed([assign(subscript(f"_svod_{name}", [constant(0)]), load(name)) for name in outgoing],
                        statements[-1])
        for name in (*incoming, *outgoing):
            self.cell(name)
        body = [*loads, *definitions, *statements, *stores]
        used = set(loaded(body)) - (stored(statements) - set(incoming))
        parameters = [name for name in self.args if name in used]
        parameters += [name for name in self.arrays if name in used and name not in parameters]
        parameters += [name for name in loops if name in used]
        name = f"{self.jit.name}_{line}"
        node = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in parameters],
                                                               kwonlyargs=[], kw_defaults=[], defaults=[]),
                               body=body, decorator_list=[], returns=None)
        ast.copy_location(node, statements[0])
        ast.fix_missing_locations(node)
        dump = ast.dump(node, include_attributes=True)
        own = {n.id: self.described(n.id) for n in walk(node) if isinstance(n, ast.Name) and _own(n.id)}
        bound = self.translated(node, dump, parameters, loops, outgoing, own)
        for _ in range(WIDENING_ROUNDS if self.settling else 0):
            changed = [n for n in outgoing if self.seen.get(n, self.cell_dtype(n)) != self.cell_dtype(n)]
            if not changed:
                break
            for carried_name in changed:  # the next phases read it as this one makes it
                self.cell_dtypes[carried_name] = self.seen[carried_name]
                del self.cells[carried_name]
                self.cell(carried_name)
            bound = self.translated(node, dump, parameters, loops, outgoing, own)
        runs = {p for p in parameters if p in loops or (p in self.args and not isinstance(self.args[p], np.ndarray))}
        runs |= {f"{p}_{part}" for p in runs & self.args.keys()  # a complex number's parts (``Prepared.parts``)
                 if isinstance(self.args[p], (complex, np.complexfloating)) for part in COMPLEX_PART_NAMES}
        runs |= RANDOM_VARIABLES  # each run's launch (Prepared.run)
        fixed = {key: int(value) for key, value in bound.var_vals.items() if key not in runs}
        slots = [self.arrays[p][0] for p in parameters if p in self.arrays]
        self.located[name] = dataclasses.replace(bound.located, names={
            slot: own.get(called, called) for slot, called in bound.located.names.items()}, variables={
            **bound.located.variables, **own})
        refuse_draws_in_plan(bound, name, f"{self.source.file}:{line}")
        return [self.plan.add_kernel(bound.ast, slots, fixed)]

    def translated(self, node: ast.FunctionDef, dump: str, parameters: list[str], loops: list[str],
                   outgoing: list[str], own: dict[str, str]) -> Any:
        """``translated_once``, again with each carried scalar the phase makes complex in a complex buffer, in a
        round that settles carried dtypes (a buffer starts as an integer's)."""
        for _ in outgoing:
            try:
                return self.translated_once(node, dump, parameters, loops, outgoing, own)
            except CarriedComplexError as err:
                if not self.settling or err.carried not in self.cells:
                    raise
                made = np.result_type(err.parts.numpy, np.complex64)
                before = self.seen.get(err.carried)
                self.seen[err.carried] = self.cell_dtypes[err.carried] = \
                    made if before is None else np.promote_types(before, made)
                del self.cells[err.carried]
                self.cell(err.carried)
        return self.translated_once(node, dump, parameters, loops, outgoing, own)

    def translated_once(self, node: ast.FunctionDef, dump: str, parameters: list[str], loops: list[str],
                        outgoing: list[str], own: dict[str, str]) -> Any:
        """The phase ``node`` bound to examples of its parameters, translated once per kind of examples (the
        same kernel recurs across signatures and the rounds that settle carried dtypes); what it makes of the
        scalars it carries out joins ``seen``. An error calls the names svod gave by ``own``."""
        examples = [self.example(p, loops) for p in parameters]
        bounds = {p: self.ranges[p] for p in parameters if p in self.ranges}
        bounds |= {p: self.valued[p] for p in parameters if p in self.valued}
        key = (dump, self.device.name, tuple(sorted(bounds.items())),
               tuple((e.dtype.str, e.shape) if isinstance(e, np.ndarray) else (type_key(e), e) for e in examples),
               values_key(self.source.names, loaded([node])))
        bound = self.jit.translations.get(key)
        if bound is None:
            names = {**self.source.names, "_svod_prange": pylang.prange}
            try:
                kernel = Kernel(self.jit.fn, name=node.name, source=Source(node, self.source.file, names),
                                parameters=parameters, bounds=bounds, static_shapes=True)
                bound = self.jit.translations[key] = kernel.bind(*examples, device=self.device)
            except SvodError as err:
                err.call_by({}, own)  # svod's own names in the user's words
                if not err.detail.startswith(f"{self.source.file}:"):  # no statement of the phase named its line
                    err.locate(f"{self.source.file}:{node.lineno}")
                raise
        for carried_name in outgoing:
            if carried_name in bound.locals:
                dtype = self.held(np.dtype(bound.locals[carried_name].numpy))
                before = self.seen.get(carried_name)
                self.seen[carried_name] = dtype if before is None else np.promote_types(before, dtype)
        return bound

    def cell_dtype(self, name: str) -> np.dtype:
        return self.arrays[f"_svod_{name}"][2]

    def described(self, name: str) -> str:
        """What an error calls ``name``, a name svod gave a value of its own (``_own``): the words the rewriting
        recorded, a carried scalar's buffer by the scalar's."""
        if name in self.variant.reader.described:
            return self.variant.reader.described[name]
        if name.startswith("_svod_") and name.removeprefix("_svod_") in self.cells:  # a carried scalar's buffer
            return self.described(name.removeprefix("_svod_"))
        return "a value svod computes" if _own(name) else name

    def held(self, dtype: np.dtype) -> np.dtype:
        """A carried scalar's dtype as the device holds it: a device without int64 carries an int in int32."""
        if dtype == np.int64 and dtypes.int64 not in self.device.caps.element_dtypes:
            return np.dtype(np.int32)
        return dtype

    def cell(self, name: str) -> int:
        """The one-element plan buffer of a carried scalar, as an array phases take (``_svod_<name>``)."""
        if name not in self.cells:
            dtype = self.cell_dtypes.get(name, self.held(np.dtype(np.int64)))
            self.cells[name] = self.add_array(None, dtype, (1,))
            self.arrays[f"_svod_{name}"] = (self.cells[name], (1,), dtype)
        return self.cells[name]

    def preamble(self, statements: list[ast.stmt], loops: list[str]) -> list[ast.stmt]:
        """The definitions a phase reads (and those they read), in the order they stand; none of a name a loop
        around the phase binds (a definition of it before the loop is not its value there)."""
        needed = set(loaded(statements)) - stored(statements) - set(loops)
        chosen: list[Definition] = []
        for definition in reversed(self.definitions):
            if definition.name in needed and all(d.name != definition.name for d in chosen):
                chosen.append(definition)
                needed |= set(loaded([definition.statement.value])) - set(loops)
        return [d.statement for d in reversed(chosen)]

    def example(self, name: str, loops: list[str]) -> Any:
        """An argument like the ones the phase's kernel is called with: an array of the shape and dtype, the
        scalar given, 0 for a loop variable."""
        if name in self.arrays:
            _, shape, dtype = self.arrays[name]
            return np.broadcast_to(np.zeros((), dtype), shape)
        if name in loops:
            return self.ranges.get(name, (0, 0))[0]
        return self.args[name]

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        return refusal(self.source, self.jit.name, node, what)


def _range_bounds(bounds: list[int | UOp], loop: ast.stmt, builder: Builder) -> tuple[int | UOp, int | UOp, int | UOp]:
    """``range``'s (start, stop, step) from its one to three arguments."""
    if not 1 <= len(bounds) <= 3:
        raise builder.refuse(loop, "range takes (stop), (start, stop) or (start, stop, step)")
    start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
    return start, stop, step


def _own(name: str) -> bool:
    """Whether svod gave ``name`` (to a temporary, a loop's variable, a carried scalar's buffer)."""
    return name.startswith("_svod_")


def _values(start: int | UOp, stop: int | UOp, step: int | UOp) -> tuple[int, int] | None:
    """The least and greatest value ``range(start, stop, step)`` may take, from its bounds' bounds; None where
    the step is not a constant, or the loop may never run for some values of the variables its bounds read."""
    if not isinstance(step, int) or step == 0:
        return None
    lo_start, hi_start = (start, start) if isinstance(start, int) else (int(start.vmin), int(start.vmax))
    lo_stop, hi_stop = (stop, stop) if isinstance(stop, int) else (int(stop.vmin), int(stop.vmax))
    lo, hi = (lo_start, hi_stop - 1) if step > 0 else (lo_stop + 1, hi_start)
    lo, hi = max(lo, -TURN_BOUND), min(hi, TURN_BOUND)  # the plan checks the values it gives
    if lo > hi and isinstance(start, int) and isinstance(stop, int):
        return (start, start)  # a loop that never runs: its phases are built, and never see a value
    return (lo, hi) if lo <= hi else None


def _never_turns(start: int | UOp, stop: int | UOp, step: int | UOp) -> bool:
    """Whether ``range(start, stop, step)`` is empty whatever values the variables its bounds read take
    (``range(k + 1, n)`` inside ``for k in range(n)`` at ``n = 1``)."""
    if not isinstance(step, int) or step == 0:
        return False
    least_start = start if isinstance(start, int) else int(start.vmin)
    most_start = start if isinstance(start, int) else int(start.vmax)
    least_stop = stop if isinstance(stop, int) else int(stop.vmin)
    most_stop = stop if isinstance(stop, int) else int(stop.vmax)
    return least_start >= most_stop if step > 0 else most_start <= least_stop
