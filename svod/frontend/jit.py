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
the values a temporary's shape is computed from). Its phases are kernels of constant sizes
(``static_shapes``), and a plan loop's variable is bounded by the values the loop gives it: what lets svod
prove a phase free of races and in bounds (an anti-diagonal sweep's ``table[i, i + d]``), and tile and split
it as constant sizes allow; a new shape compiles the phases again (the disk cache keeps them).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod import random
from svod.device import Buffer, Device
from svod.device.launch import evaluate
from svod.dtype import dtypes
from svod.errors import KernelSyntaxError, SvodError, VariableError
from svod.frontend import api, order_statistics, pylang, sorting
from svod.frontend.arrays import lower_arrays
from svod.frontend.binding import constant_key, signature_of
from svod.frontend.flow import Turn
from svod.frontend.inline import inline_calls
from svod.frontend.names import loaded, needs, stored
from svod.frontend.nodes import assign, call, constant, for_loop, load, placed, stands_for, subscript
from svod.frontend.phases import (
    Branch,
    Definition,
    Item,
    Loop,
    Ordering,
    Reader,
    Repeat,
    Structure,
    Temporary,
    carried,
    inner_items,
    refusal,
    stores_elements,
)
from svod.frontend.pykernel import Kernel, refuse_draws_in_plan
from svod.frontend.rebinding import HostShape
from svod.frontend.source import Source
from svod.ir import UOp
from svod.runtime.plan import ExecutionPlan

ALLOCATIONS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like")
"""The NumPy calls that make a temporary array."""
_HOST_CALLS = (len, min, max, abs, int, float, round)
"""What a definition (``n = a.shape[0] - 1``) may call: it is computed on the host as well as in kernels."""
RANDOM_VARIABLES = frozenset({random.KEY_VARIABLE, random.LAUNCH_VARIABLE})
"""The plan variables that take each call's launch of svod's generator (``svod.frontend.random_arrays``)."""
TURN_BOUND = (1 << 31) - 1
"""The values a loop around phases gives its variable where its bounds are the run's integers: within 32 bits,
so that an index it makes with a row's length cannot wrap around 64 (``a[r, :]`` under ``range(n)`` is then
proven free of races); the plan checks each value it gives against it, and raises ``VariableError`` past it."""
WIDENING_ROUNDS = 5
"""Rounds of translation that settle the dtypes of carried scalars: each round that changes one widens it
(int64, float32, float64), so a few rounds reach the dtypes the phases make of them."""
CALLS_KEPT = 64
"""The signatures of calls a jitted function keeps plans at hand for (``Jit._calls``)."""


# ---- one signature's plan ------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """A jitted function's plan for one signature: the plan buffer of each array argument (None for a
    scalar), the scalars each run passes, what the function returns, and where each phase comes from."""

    plan: ExecutionPlan
    slots: list[int | None]
    variables: tuple[str, ...]
    returns: list[tuple[str, int | None, tuple[int, ...], int | None]]
    """Per returned name: the name, its temporary's plan buffer (None for an argument), its shape (none for a
    scalar, which comes back as a Python number), and the plan buffer of the scalar that holds its length
    where it is returned as its first elements only (``return y[:k]``; else None)."""
    returns_tuple: bool
    located: dict[str, Any]
    parameters: list[str]
    """The parameters each run passes (``Variant.parameters``), in order."""
    turns: list[TurnCheck]

    def run(self, arguments: Mapping[str, Any], launch: random.Launch | None = None) -> Any:
        """Run the plan on a call's ``arguments`` (every parameter's, by name): its draws take ``launch`` (the
        process generator's next, by default), where it draws."""
        args = [arguments[name] for name in self.parameters]
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
        scalars = {name: args[self.parameters.index(name)] for name in self.variables if name not in RANDOM_VARIABLES}
        if RANDOM_VARIABLES & set(self.variables):  # each call is a launch of its own (svod.random)
            scalars |= (launch or random.generator.next_launch()).variables()
        for turn in self.turns:
            turn.check(scalars)
        try:
            self.plan.execute(buffers=bound, **scalars)
        except SvodError as err:
            self.locate(err)
            raise
        for original, contiguous in written_back:
            original[...] = contiguous
        results = [self.result(args, name, slot, shape, length) for name, slot, shape, length in self.returns]
        if self.returns_tuple:
            return tuple(results)
        return results[0] if results else None

    def result(self, args: Sequence[Any], name: str, slot: int | None, shape: tuple[int, ...],
               length: int | None) -> Any:
        """A returned argument itself; a temporary's copy, shaped; a carried scalar's value; of an array
        returned as its first elements, those (a view of an argument, as NumPy's slice is)."""
        if slot is None:
            found = args[self.parameters.index(name)]
        else:
            values = self.plan.buffers[slot].numpy()
            found = values.reshape(shape) if shape else values[0].item()
        if length is None:
            return found
        return found[:int(self.plan.buffers[length].numpy()[0])]

    def locate(self, err: SvodError) -> None:
        located = self.located.get(err.kernel or "")
        if located is not None:
            located.locate(err)


@dataclass(frozen=True)
class TurnCheck:
    """A loop around phases whose bounds the run's integer arguments set and that must make a turn: a name
    only its body assigns is read after it (Python raises ``UnboundLocalError`` where it makes none)."""

    bounds: tuple[UOp, UOp, UOp]
    error: Callable[[int], SvodError]

    def check(self, values: dict[str, Any]) -> None:
        start, stop, step = (evaluate(bound, values) for bound in self.bounds)
        if not range(start, stop, step):
            raise self.error(stop)


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


class Builder:
    """Builds the plan of one jitted function for one signature: arrays and scalars as given, each phase a
    kernel of the names it uses."""

    def __init__(self, jit: Jit, variant: Variant, arguments: Mapping[str, Any], device: Device,
                 cell_dtypes: dict[str, np.dtype] | None = None) -> None:
        self.jit = jit
        self.variant = variant
        self.source = variant.source
        self.device = device
        self.plan = ExecutionPlan(device)
        self.args = {name: arguments[name] for name in variant.parameters}
        self.host: dict[str, Any] = dict(self.args)
        self.outer = self.source.outer_names()
        """The globals the host reads: those the function does not bind itself."""
        """What the host knows before the run: the arguments, the definitions computed from them."""
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
        self.turned: set[tuple[int, int]] = set()
        """The loops of ``Structure.turns`` that are plan loops, whose trip counts the plan checks."""
        self.ranges: dict[str, tuple[int, int]] = {}
        """The values each loop around phases gives its variable, where bounds say (its kernels' bounds for it:
        what lets svod prove a phase free of races and in bounds for every turn)."""
        for name, value in self.args.items():
            if isinstance(value, np.ndarray):
                self.arrays[name] = (self.add_array(name, value.dtype, value.shape), value.shape, value.dtype)

    def add_array(self, name: str | None, dtype: np.dtype, shape: tuple[int, ...]) -> int:
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
                                        stage="translate", value=name)
            if name in self.cells:
                returns.append((name, self.cells[name], (), None))
                continue
            if name in self.args and name not in self.arrays:  # a scalar argument the function never assigns
                returns.append((name, None, (), None))
                continue
            if name not in self.arrays:
                raise KernelSyntaxError(f"{self.source.file}:{self.source.node.lineno}: {self.jit.name} returns "
                                        f"{name}, which is not an array or a scalar it computes",
                                        kernel=self.jit.name, stage="translate", value=name)
            slot, shape, _ = self.arrays[name]
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
        return Prepared(self.plan, slots, self.plan.variables, returns, structure.returns_tuple, self.located,
                        list(self.args), self.turns)

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
            elif isinstance(item, Branch):
                then, otherwise = self.items(item.then, loops), self.items(item.otherwise, loops)
                ids.append(self.plan.branch(self.cell(item.condition), then, otherwise))
            elif isinstance(item, Repeat):
                ids.append(self.plan.while_loop(self.cell(item.condition), self.items(item.body, loops)))
            elif isinstance(item, Ordering):
                ids += self.ordering(item)
            else:
                ids += self.phase(item.statements, loops)
        return ids

    def define(self, item: Definition, loops: list[str]) -> None:
        self.definitions.append(item)
        if not set(loaded([item.statement.value])) & set(loops):
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
        try:
            slot = self.add_array(item.name, array.dtype, array.shape)
        except SvodError as err:  # a dtype svod has none of: at the line that makes it
            err.name_kernel(self.jit.name)
            err.locate(f"{self.source.file}:{item.statement.lineno}")
            raise
        self.arrays[item.name] = (slot, array.shape, array.dtype)
        self.host[item.name] = HostShape(array.shape, array.dtype)  # the shapes of later temporaries read it
        fill = item.fill
        if fill is None:
            return []
        indices = [f"_svod_i{axis}" for axis in range(array.ndim)]
        target = subscript(item.name, [load(index) for index in indices] or [constant(0)])
        nest: list[ast.stmt] = [assign(target, copy.deepcopy(fill))]
        for axis, index in reversed(list(enumerate(indices))):  # for _svod_i0 in prange(name.shape[0]): ...
            size = ast.Subscript(ast.Attribute(load(item.name), "shape", ast.Load()), constant(axis), ast.Load())
            nest = [for_loop(index, call("_svod_prange", size), nest)]
        return self.phase(placed(nest, item.statement), loops)

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
        along = self.sorted_axis(item, call, shape)
        size = int(np.prod(shape))
        made: list[int]
        if in_place:
            made = self.sorted(slot, shape, along, values=slot)
        elif item.kind in ("sort", "argsort", "partition", "argpartition"):
            if item.target in self.arrays or item.target in self.args:
                raise self.refuse(item.statement, f"{item.target} is made twice; a sort's result is a new array, "
                                                  "made once")
            result = dtype if values else sorting.index_dtype(self.device)
            made_shape = (size,) if along is None else shape
            out = self.add_array(item.target, result, made_shape)
            self.arrays[item.target] = (out, made_shape, result)
            made = self.sorted(slot, shape, along, **{"values" if values else "indices": out})
            self.host[item.target] = HostShape(made_shape, result)
        else:
            if item.target in self.arrays or item.target in self.args:
                raise self.refuse(item.statement, f"{call} computes a scalar; {item.target} names an array or an "
                                                  "argument")
            if item.kind == "quantile" and size == 0:
                raise self.refuse(item.statement, f"{call} of an empty array (NumPy raises IndexError)")
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

    def sorted_axis(self, item: Ordering, call: str, shape: tuple[int, ...]) -> int | None:
        """The axis a sort runs along (None: the flattened array, as a 1-D array's one axis is), after NumPy's
        checks of it and of a partition's ``kth``."""
        along = item.axis
        if along is not None and not -max(len(shape), 1) <= along < max(len(shape), 1):
            raise self.refuse(item.statement, f"{call}'s axis {along} is out of bounds for an array of dimension "
                                              f"{len(shape)} (NumPy raises AxisError)")
        if along is None and item.target == item.source:
            raise self.refuse(item.statement, f"{call} sorts the array itself along an axis, not axis=None")
        length = int(np.prod(shape)) if along is None or not shape else shape[along]
        for k in item.kth:
            if not -length <= k < length:
                raise self.refuse(item.statement, f"{call}: kth(={k}) out of bounds ({length}) (NumPy raises "
                                                  "ValueError)")
        return None if len(shape) <= 1 else along

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

    def loop(self, item: Loop, loops: list[str]) -> int:
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
        definitions = self.preamble(statements)
        # what it may store on some paths only keeps its value on the others
        incoming = sorted((needs([*definitions, *statements]) | set(outgoing)) & self.carried)
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
        own = {n.id: self.described(n.id) for n in ast.walk(node) if isinstance(n, ast.Name) and _own(n.id)}
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
        """The phase ``node`` bound to examples of its parameters, translated once per kind of examples (the
        same kernel recurs across signatures and the rounds that settle carried dtypes); what it makes of the
        scalars it carries out joins ``seen``. An error calls the names svod gave by ``own``."""
        examples = [self.example(p, loops) for p in parameters]
        bounds = {p: self.ranges[p] for p in parameters if p in self.ranges}
        key = (dump, self.device.name, tuple(sorted(bounds.items())),
               tuple((e.dtype.str, e.shape) if isinstance(e, np.ndarray) else (type(e).__name__, e) for e in examples))
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

    def preamble(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        """The definitions a phase reads (and those they read), in the order they stand."""
        needed = set(loaded(statements)) - stored(statements)
        chosen: list[Definition] = []
        for definition in reversed(self.definitions):
            if definition.name in needed and all(d.name != definition.name for d in chosen):
                chosen.append(definition)
                needed |= set(loaded([definition.statement.value]))
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
        self.signature = signature_of(fn, self.name)
        self.parameters = list(self.signature.parameters)
        if "device" in self.parameters:
            raise KernelSyntaxError(f"{self.name}: parameter device has the name of svod's own keyword (a call's "
                                    "device= says where it runs); name the parameter otherwise", kernel=self.name,
                                    stage="parse", value="device")
        Source.of(fn)  # a function whose source cannot be read is refused where it is decorated
        self._source: Source | None = None
        self._structure: Structure | None = None
        self._plans: dict[tuple[Any, ...], Prepared] = {}
        self._calls: dict[tuple[Any, ...], Prepared] = {}
        """The plans of calls with every argument an array or a number, by ``_call_key``: a call like one before
        runs its plan without binding, checking and reading its arguments again."""
        self._variants: dict[tuple[Any, ...], Variant] = {}
        self._lock = threading.Lock()
        self.translations: dict[tuple[Any, ...], Any] = {}
        """Each phase's kernel as translated for the arguments it was built for: a round that settles the
        dtypes of carried scalars, or another signature's plan, translates only what changed."""

    def __repr__(self) -> str:
        return f"<svod.jit {self.fn.__qualname__}>"

    def __call__(self, *args: Any, device: str | Device = "CPU", **keywords: Any) -> Any:
        """Run the function on ``args`` and ``keywords`` (bound as Python binds them, defaults too) on
        ``device``: numpy arrays are worked on in place, scalars passed by value; returns what the function
        returns (a temporary comes back as a new array)."""
        key = None if keywords or len(args) != len(self.parameters) else _call_key(args, device)
        found = self._calls.get(key) if key is not None else None
        if found is not None:
            return found.run(dict(zip(self.parameters, args, strict=True)))
        arguments = self._arguments(args, keywords)  # checked and converted once a call
        prepared = self.prepared(arguments, api.get_device(device))
        if key is not None:
            if len(self._calls) >= CALLS_KEPT:
                self._calls.clear()
            self._calls[key] = prepared
        return prepared.run(arguments)

    def run(self, args: Sequence[Any], device: str | Device = "CPU", launch: random.Launch | None = None) -> Any:
        """The call ``fn(*args, device=device)`` whose draws take ``launch`` of svod's generator, not the
        process generator's next (``svod.check`` gives plain Python and each device one launch)."""
        arguments = self._arguments(args, {})
        return self.prepared(arguments, api.get_device(device)).run(arguments, launch)

    def plan(self, *args: Any, device: str | Device = "CPU", **keywords: Any) -> ExecutionPlan:
        """The prepared plan the function runs as for arguments like ``args`` and ``keywords``."""
        return self.prepared(self._arguments(args, keywords), api.get_device(device)).plan

    def save(self, path: str | os.PathLike[str], *args: Any, device: str | Device = "CPU", **keywords: Any) -> None:
        """Save the plan for arguments like ``args`` and ``keywords`` as a plan bundle (``svod.load_plan``; its
        buffers are named as the function's array arguments and temporaries)."""
        self.plan(*args, device=device, **keywords).save(path)

    @property
    def source(self) -> Source:
        """The function as svod reads it: the calls it makes of functions svod compiles into it inlined
        (``svod.frontend.inline``), at the first call (a function svod cannot take still imports)."""
        if self._source is None:  # read now: the globals it calls may be defined after it
            self._source = inline_calls(Source.of(self.fn), self.name)
        return self._source

    @property
    def reader(self) -> Reader:
        return Reader(self.source, self.name)

    @property
    def structure(self) -> Structure:
        """The function's phases, definitions, temporaries and loops, read at the first call (as numba
        compiles at the first call: a function svod cannot take still imports)."""
        if self._structure is None:
            self._structure = self.reader.structure()
        return self._structure

    def prepared(self, arguments: Mapping[str, Any], device: Device) -> Prepared:
        """The plan for arguments like ``arguments`` (as ``_arguments`` made them)."""
        with self._lock:
            variant = self.variant(arguments)
            key = (device.name, *self._signature(arguments, variant))
            found = self._plans.get(key)
            if found is None:
                found = self._plans[key] = self._build(variant, arguments, device)
        return found

    def variant(self, arguments: Mapping[str, Any]) -> Variant:
        """The function as the plan for ``arguments`` reads it: the parameters bound to constants read as
        globals of their values (``binding``), NumPy array statements rewritten for the arrays' shapes
        (``svod.frontend.arrays``); once per kind of arguments."""
        key = tuple(_kind(value) for value in arguments.values())
        found = self._variants.get(key)
        if found is None:
            constants = {name: value for name, value in arguments.items() if _constant(value)}
            runtime = {name: value for name, value in arguments.items() if name not in constants}
            source = _with_constants(self.source, constants, self.name) if constants else self.source
            lowered = lower_arrays(source, self.name, runtime)
            if lowered is None and not constants:
                found = Variant(self.source, self.reader, self.structure, _read_on_host(self.structure),
                                tuple(runtime))
            else:
                source, read = lowered if lowered is not None else (source, set())
                reader = Reader(source, self.name)
                structure = reader.structure()
                found = Variant(source, reader, structure, _read_on_host(structure) | read, tuple(runtime))
            self._variants[key] = found
        return found

    def _build(self, variant: Variant, values: Mapping[str, Any], device: Device) -> Prepared:
        """The plan for ``values``. Where phases carry scalars, they are first translated until the dtypes of
        their buffers are those the phases make of them: a round settles each as the phase that makes it is
        translated, and only a scalar a later phase of a loop widens takes another round."""
        builder = Builder(self, variant, values, device)
        for _ in range(WIDENING_ROUNDS if builder.carried else 0):
            builder.translate()
            settled = all(n in builder.cells and builder.cell_dtype(n) == d for n, d in builder.seen.items())
            builder = Builder(self, variant, values, device, {**builder.cell_dtypes, **builder.seen})
            if settled:
                break
        return builder.build()

    def _arguments(self, args: Sequence[Any], keywords: Mapping[str, Any]) -> dict[str, Any]:
        """Each parameter's argument, bound as Python binds them (by position, by keyword, else its default;
        an array default is the one array Python's function keeps, updated in place as Python updates it)."""
        try:
            bound = self.signature.bind(*args, **keywords)
        except TypeError as err:
            raise KernelSyntaxError(f"{self.name}{self.signature}: {err}", kernel=self.name, stage="bind",
                                    value=str(err)) from None
        bound.apply_defaults()
        arguments = {name: np.from_dlpack(a) if not isinstance(a, (np.ndarray, np.generic, int, float)) and
                     hasattr(a, "__dlpack__") else a for name, a in bound.arguments.items()}
        for parameter, value in arguments.items():
            if not isinstance(value, (np.ndarray, int, float, np.integer, np.floating, np.bool_)) and \
                    not _constant(value):
                raise KernelSyntaxError(f"{self.name}'s argument {parameter} is {type(value).__name__}; a jitted "
                                        "function takes NumPy arrays (np.asarray(...)), ints, floats and bools, and "
                                        "as constants of its plan None, strings, dtypes and tuples of these and "
                                        "numbers", kernel=self.name, stage="bind", value=parameter)
        return arguments

    def _signature(self, arguments: Mapping[str, Any], variant: Variant) -> list[Any]:
        """What a plan is prepared for: each array's dtype and shape, each scalar's kind (a bool's value, a
        kernel constant), each constant's value (``binding``), and the values of the scalars the host reads to
        make temporaries and definitions, and to rewrite array statements."""
        host = variant.host
        found: list[Any] = []
        for name, value in arguments.items():
            if isinstance(value, np.ndarray):
                found.append(("array", value.dtype.str, value.shape))
            elif _constant(value):
                found.append(("constant", constant_key(value)))
            elif isinstance(value, (bool, np.bool_)) or name in host:
                found.append(("value", type(value).__name__, value))
            else:
                found.append(("scalar", type(value).__name__))
        return found



def _call_key(args: Sequence[Any], device: str | Device) -> tuple[Any, ...] | None:
    """What decides the plan of a call whose arguments are all given by position, each a numpy array or a Python
    number: the device, each array's dtype and shape, each number's type and value (a value a plan may be
    prepared for). None for other arguments, which bind and check as the first call of a kind does."""
    key: list[Any] = [device]
    for value in args:
        kind = type(value)
        if kind is np.ndarray:
            key.append((value.dtype, value.shape))
        elif kind is int or kind is float or kind is bool:
            key.append((kind, value))
        else:
            return None
    return tuple(key)


def _constant(value: Any) -> bool:
    """Whether an argument is a constant of the plan (``binding``): neither an array nor a number."""
    return not isinstance(value, np.ndarray) and constant_key(value) is not None


def _kind(value: Any) -> Any:
    """What a variant is read for, of one argument: an array's dtype and shape, an int's value (a slice's
    bound), a constant's value, another scalar's type."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape)
    if isinstance(value, (int, np.integer)):
        return (type(value).__name__, value)
    if _constant(value):
        return ("constant", constant_key(value))
    return type(value).__name__


def _with_constants(source: Source, constants: Mapping[str, Any], name: str) -> Source:
    """``source`` with each parameter bound to a constant of the plan read as a global of its value: the
    function's other parameters are its parameters. One the function assigns is refused (its name would then
    be a local the plan cannot hold)."""
    for node in ast.walk(source.node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in constants:
            raise refusal(source, name, node, f"{node.id} is {constants[node.id]!r}, a constant of the plan (a "
                                              "value neither an array nor a number), and the function assigns it; "
                                              "assign another name")
    node = stands_for(copy.copy(source.node), source.node)
    kept = [a for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs) if a.arg not in constants]
    node.args = ast.arguments(posonlyargs=[], args=kept, vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                              defaults=[])
    return Source(node, source.file, {**source.names, **constants}, source.described)


def _read_on_host(structure: Structure) -> frozenset[str]:
    """The names the host reads before a run: those of temporaries' calls and definitions."""
    found: set[str] = set()

    def walk(items: Sequence[Item]) -> None:
        for item in items:
            if isinstance(item, Temporary):
                found.update(loaded([item.call]))
            elif isinstance(item, Definition):
                found.update(loaded([item.statement.value]))
            else:
                walk(inner_items(item))

    walk(structure.items)
    return frozenset(found)


NUMBA_OPTIONS = frozenset({"nopython", "nogil", "parallel", "cache", "fastmath", "boundscheck", "error_model",
                           "inline", "forceobj", "looplift"})
"""numba's ``@njit`` options, accepted so that a port changes only the decorator's name: svod's functions are
always compiled whole, in parallel where ``prange`` says, cached on disk, with IEEE arithmetic (which
``fastmath`` permits) and checked bounds; ``forceobj``/``looplift`` (object mode) it has not."""


def jit(fn: Callable[..., Any] | str | Sequence[Any] | None = None, *, name: str | None = None,
        **numba_options: Any) -> Any:
    """``@svod.jit``: the whole function as a prepared plan of kernels (``svod.frontend.jit``). As numba's
    ``@njit``, it takes a signature (``@svod.jit("f8(f8[:])")``: svod specialises on each call's arguments
    anyway) and numba's options (``NUMBA_OPTIONS``)."""
    unknown = sorted(set(numba_options) - NUMBA_OPTIONS)
    if unknown or numba_options.get("forceobj") or numba_options.get("looplift"):
        raise KernelSyntaxError(f"svod.jit takes name= and numba's options {', '.join(sorted(NUMBA_OPTIONS))} "
                                f"(object mode aside), not {', '.join(unknown) or 'object mode'}", stage="translate",
                                value=", ".join(unknown))
    if fn is None or not callable(fn):  # @svod.jit(...) or @svod.jit("signature")
        return lambda f: Jit(f, name=name)
    return Jit(fn, name=name)


__all__ = ["Jit", "jit"]
