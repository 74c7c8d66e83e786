"""A kernel's ``for`` loops: ``svod.prange`` is a GLOBAL range, ``range`` a LOOP range, and ``for v in x`` over a 1-D
array a LOOP range over its indices whose turn starts ``v = x[i]``. A local the body changes is
stated again with a placeholder in its place: what the body makes of the placeholder says whether it is a
reduction (``s op= e``, ``s = max(s, e)``, also under ``if``: a REDUCE over a range of its own) or is carried
from turn to turn in a register (``svod.frontend.memory``)."""

from __future__ import annotations

import ast
import copy
import functools
import math as pymath
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from svod.codegen import reduce_identity
from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError
from svod.frontend import pylang
from svod.frontend.arithmetic import builtin_extreme
from svod.frontend.complex_values import with_parts
from svod.frontend.context import KernelLoop, Turn
from svod.frontend.expressions import Expressions
from svod.frontend.nodes import placed, stands_for, walk
from svod.frontend.randoms import ORDINAL
from svod.frontend.values import BUILTINS, COMPLEX_LOCAL, ArrayValue, Undefined, describe, is_number
from svod.ir import AxisKind, Ops, UOp, simplify, substitute
from svod.ir.uop import memory_of, written_memory


@dataclass(frozen=True)
class Statement:
    """Where the translation stood before a statement: the effects stated so far, the buffers' versions."""

    effects: int
    versions: dict[UOp, int]


class Loops(Expressions):
    """Loops, their ranges and the locals they change (reduced or carried)."""

    def loop(self, stmt: ast.For) -> None:
        if stmt.orelse:
            self.block(self.without_else(stmt))
            return
        if not isinstance(stmt.target, ast.Name):
            raise self.refuse(stmt.target, "a loop variable is one name")
        call = stmt.iter
        callee = self.expr(call.func) if isinstance(call, ast.Call) else None
        if callee is pylang.prange:
            kind = AxisKind.GLOBAL
        elif callee is BUILTINS["range"]:
            kind = AxisKind.LOOP
        elif isinstance(call, ast.Name) and isinstance(iterated := self.lookup(call.id, call), ArrayValue):
            self.elements(stmt, iterated)
            return
        else:
            raise self.refuse(stmt.iter, "a kernel loops over range(...) (sequential), svod.prange(...) (parallel) "
                                         "or the elements of a 1-D array (for v in x)")
        assert isinstance(call, ast.Call)
        if call.keywords or not 1 <= len(call.args) <= (2 if kind is AxisKind.GLOBAL else 3):
            raise self.refuse(call, "svod.prange takes (stop) or (start, stop)" if kind is AxisKind.GLOBAL
                              else "range takes (stop), (start, stop) or (start, stop, step)")
        bounds = [self.python_int(b) for b in map(self.expr, call.args)]
        start, stop = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        step = bounds[2] if len(bounds) == 3 else 1
        if not isinstance(step, int) or step == 0:
            raise self.refuse(call, "a range's step is a nonzero integer constant")
        for b, arg in zip(bounds[:2], call.args, strict=False):  # each bound given: range(n)'s is its stop
            if isinstance(b, UOp) and b.dtype == dtypes.bool:
                raise self.refuse(arg, "a loop bound is an integer, not a bool value (Python's range refuses a NumPy "
                                       "bool: 'numpy.bool' object cannot be interpreted as an integer); int(...) it")
            if not isinstance(b, int) and not (isinstance(b, UOp) and b.dtype.is_int):
                raise self.refuse(arg, f"a loop bound is an integer, not {describe(b)}")
        read = next((arg for b, arg in zip(bounds[:2], call.args, strict=False) if kind is AxisKind.GLOBAL and
                     isinstance(b, UOp) and any(u.op is Ops.LOAD for u in b.toposort())), None)
        if read is not None:  # a launch size: known before the kernel runs
            raise self.refuse(read, "svod.prange's bounds are numbers known before its kernel runs (sizes, scalar "
                                    "arguments, enclosing pranges' variables), not values read from memory or "
                                    "computed by the run: use range, or a prange over the greatest length with an "
                                    "if inside")
        if kind is AxisKind.GLOBAL and any(loop.kind is AxisKind.LOOP for loop in self.loops):
            raise self.refuse(stmt, "svod.prange inside a sequential loop: every turn of the loop would need the "
                                    "whole grid of the turn before; run one kernel per turn in an ExecutionPlan")
        self.ranged(stmt, kind, start, stop, step)

    def without_else(self, stmt: ast.For | ast.While) -> list[ast.stmt]:
        """A sequential loop's ``else`` as Python runs it, after the loop unless a ``break`` of the loop ended it:
        a flag set before the loop, cleared by each of its own breaks, tested after it. (A ``svod.prange``'s turns
        are work items, which have no after.)"""
        if isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Call) and \
                self.expr(stmt.iter.func) is pylang.prange:
            raise self.refuse(stmt, "a svod.prange's else is not supported: its turns are work items, and none "
                                    "runs after the others")
        flag = f"_svod_unbroken{next(self._placeholders)}"
        loop = stands_for(copy.copy(stmt), stmt)
        loop.body, loop.orelse = _flagging_breaks(stmt.body, flag), []
        after = ast.If(ast.Name(flag, ast.Load()), stmt.orelse, [])
        return [*placed([ast.Assign([ast.Name(flag, ast.Store())], ast.Constant(True))], stmt), loop,
                *placed([after], stmt.orelse[0])]

    def python_int(self, bound: Any) -> Any:
        """``bound`` as Python's ``range`` reads it: Python's bool is an int (``range(True)`` is ``range(1)``),
        and so is a comparison of Python numbers, sizes and int arguments (``range(n > 0)``), a bool in plain
        Python; a typed bool (``np.True_``, a comparison of elements) stays one, for the refusal."""
        if isinstance(bound, bool):
            return int(bound)
        if isinstance(bound, UOp) and bound.dtype == dtypes.bool and self.weak(bound):
            return bound.cast(dtypes.index)
        return bound

    def elements(self, stmt: ast.For, array: ArrayValue) -> None:
        """``for v in x`` over a 1-D array, as Python iterates it: a sequential loop over ``x``'s indices whose
        turn starts ``v = x[i]`` (the element as it stands then: the turns before may have written it). The
        array is the one ``x`` names at the loop (its name is bound apart from ``x``, which the body may
        rebind)."""
        if len(array.dims) != 1:
            raise self.refuse(stmt.iter, f"for ... in {array.name} iterates the rows of a {len(array.dims)}-D array, "
                                         "views a kernel does not have; loop over its indices instead (for i in "
                                         f"range({array.name}.shape[0]), reading {array.name}[i, j])")
        number = next(self._placeholders)  # (names of their own: a loop nested in it may iterate another array)
        iterated, index = f"_svod_iterated{number}", f"_svod_index{number}"
        self.env[iterated] = array
        element = ast.Subscript(ast.Name(iterated, ast.Load()), ast.Name(index, ast.Load()), ast.Load())
        made = stands_for(copy.copy(stmt), stmt)
        made.target = ast.copy_location(ast.Name(index, ast.Store()), stmt.target)
        made.body = [*placed([ast.Assign([stmt.target], element)], stmt), *stmt.body]
        self.ranged(made, AxisKind.LOOP, 0, array.dims[0], 1)

    def ranged(self, stmt: ast.For, kind: AxisKind, start: Any, stop: Any, step: int) -> None:
        """Loop ``stmt`` over the range from ``start`` to ``stop`` by ``step``, parallel or sequential (``kind``)."""
        count = turns = self.count(start, stop, step)
        saved_gate = self.gate
        if kind is AxisKind.GLOBAL:
            count, guard = self.rectangle(count)
            r = self.loop_range(count, kind)
            if guard is not None:
                self.gate = (r < guard) if self.gate is None else self.gate & (r < guard)
                self.rectangles.add(r)
            if not any(loop.kind is AxisKind.GLOBAL for loop in self.loops):
                self.open_nest()
        else:
            r = self.loop_range(count, kind)
            if self.where(stmt) not in self.located.loops:
                self.located.loops.append(self.where(stmt))
        self.ranges.append(r)
        variable: Any = r if _is_zero(start) and step == 1 else self.binary("+", _index(start), r * step)
        name = stmt.target.id if isinstance(stmt.target, ast.Name) else None
        held = self.env.get(name) if name is not None else None
        try:
            self.loop_body(stmt, r, kind, variable)
        finally:
            self.gate = saved_gate
        if name is not None:
            self.env[name] = self.after_loop(stmt, name, held, _last(start, turns, step), turns)

    def after_loop(self, stmt: ast.For, name: str, held: Any, last: Any, turns: Any) -> Any:
        """What the loop variable ``name`` holds after its loop, as in Python: the last turn's value where the
        loop turned (``last``, of ``turns`` turns), what it ``held`` before elsewhere. A loop that may break, or
        whose body assigns the variable, leaves a value no bound tells, and one that may turn no time leaves a
        variable unbound before it unbound: the code after it does not read those."""
        if _breaks(stmt.body) or name in _assigned(stmt.body):
            return Undefined(name, f"it is the variable of the loop at line {stmt.lineno}, which breaks or assigns "
                                   "it, and svod does not keep its last value; assign it to another name inside "
                                   "the loop")
        if is_number(turns):
            return last if turns > 0 else held
        if held is None or isinstance(held, Undefined):
            return Undefined(name, f"it is the variable of the loop at line {stmt.lineno}, which may turn no time "
                                   "and leave it unbound (Python raises UnboundLocalError); assign it before the "
                                   "loop")
        return self.select(turns > 0, last, held, stmt)

    def loop_range(self, count: Any, kind: AxisKind) -> UOp:
        """A range of ``count`` turns, its end simplified: a later ``simplify`` of an expression of its index
        (the turns of ``range(j, n)`` inside it) then keeps the range itself. One whose end the simplifier
        would spell anew (``max(1, n)`` as ``max(n, 1)``) became a second range on the same axis there, which
        the lowering merged again but the reference, running the kernel as built, ran as a loop of its own."""
        return self.k.range(simplify(count) if isinstance(count, UOp) else count, kind)

    def count(self, start: Any, stop: Any, step: int) -> Any:
        """How many turns ``range(start, stop, step)`` takes, simplified (``range(n - 1, -1, -1)`` takes ``n``:
        the proofs of bounds and races then see that ``n - 1 - r`` stays within ``n``)."""
        if is_number(start) and is_number(stop):
            return len(range(start, stop, step))
        start, stop = _index(start), _index(stop)
        if step == 1:
            return stop if _is_zero(start) else simplify(stop - start)
        if step > 0:
            return simplify((stop - start + (step - 1)) // step)
        return simplify((start - stop + (-step - 1)) // -step)

    def rectangle(self, count: Any) -> tuple[Any, UOp | None]:
        """A parallel range's end that depends on enclosing parallel ranges (``prange(i + 1)``) becomes its
        largest value, at either end of each (a bound linear in them), and a guard ``r < count``."""
        if not isinstance(count, UOp):
            return count, None
        outer = [loop.range for loop in self.loops if loop.kind is AxisKind.GLOBAL and loop.range in count.toposort()]
        if not outer:
            return count, None
        largest = count
        for g in outer:
            low, high = (simplify(substitute(largest, {g: at})) for at in (UOp.index_const(0), g.src[0] - 1))
            largest = high if high.vmin >= low.vmax else low if low.vmin >= high.vmax else low.maximum(high)
        return largest, count

    def while_loop(self, stmt: ast.While) -> None:
        """``while test: body``: a sequential loop without a bound (``UOp.range(None, ...)``) whose turn runs the
        body where the test holds, and whose exit (``Ops.EXIT``) ends it after the first turn where the test
        fails (or a ``break`` is taken). A test that fails before the first turn states nothing."""
        if stmt.orelse:
            self.block(self.without_else(stmt))
            return
        mark, versions, env = len(self.k.effects), dict(self.versions), dict(self.env)
        test = self.expr(stmt.test)
        self.k.discard_effects(mark)  # what the test states (in an inlined @svod.func) is stated in each turn
        self.versions, self.env = versions, env  # and what it draws is drawn in each turn
        if is_number(test) and not test:
            return  # never runs
        r = self.k.range(None, AxisKind.LOOP)
        for lines in (self.located.loops, self.located.endless):
            if self.where(stmt) not in lines:
                lines.append(self.where(stmt))
        self.ranges.append(r)
        self.loop_body(stmt, r, AxisKind.LOOP, None)

    def leave(self, stmt: ast.Break | ast.Continue) -> None:
        """``break`` or ``continue``: the rest of the turn runs only where it is not taken (``Translator.block``
        gates it), and a ``break`` ends the loop after the turn (its exit)."""
        what = "break" if isinstance(stmt, ast.Break) else "continue"
        if not self.loops or not self.turns:
            raise self.refuse(stmt, f"{what} outside a loop")
        if self.loops[-1].kind is AxisKind.GLOBAL:
            raise self.refuse(stmt, f"{what} in a svod.prange loop: its turns are work items that all run, at once "
                                    "and in no order; test a condition around the work instead (if ...:), or loop "
                                    "with range(...) inside it")
        turn = self.turns[-1]
        gate = None if self.gate is turn.base else self.gate
        turn.leaves.append(gate)
        if isinstance(stmt, ast.Break):
            turn.breaks.append(gate)

    def loop_body(self, stmt: ast.For | ast.While, r: UOp, kind: AxisKind, variable: Any) -> None:
        name = stmt.target.id if isinstance(stmt, ast.For) else None  # type: ignore[attr-defined]
        before = dict(self.env)
        start = Statement(len(self.k.effects), dict(self.versions))
        self.loops.append(KernelLoop(r, kind))
        assigned = with_parts(_assigned(stmt.body))  # a complex local changes as its parts do
        changed = [n for n in before if n != name and n in assigned and not isinstance(before[n], Undefined)
                   and before[n] is not COMPLEX_LOCAL]
        exits = isinstance(stmt, ast.While) or _breaks(stmt.body)
        try:
            if kind is AxisKind.GLOBAL:  # a local a parallel loop assigns is each work item's own
                self.env.update({n: Undefined(n, f"the svod.prange at line {stmt.lineno} assigns it, so each of its "
                                                 "work items has its own, read here before it is assigned; work "
                                                 "items share no local (combine into an array with "
                                                 "svod.atomic_add)") for n in changed})
                changed = []
            if name is not None:
                self.env[name] = variable
            if kind is AxisKind.GLOBAL:
                self.open_work_item(outermost=sum(loop.kind is AxisKind.GLOBAL for loop in self.loops) == 1)
            turn = self.turn(stmt)
            if kind is not AxisKind.GLOBAL:  # the loop draws: it changes where the next draw is made
                changed = changed + self.random_changed(before, changed)
            if changed:
                results = self.carry(stmt, r, variable, before, start, changed, exits)
                drawing = self.random_changed(before, changed)
                while drawing:  # a turn stated with the locals it changes draws where the first did not
                    changed = changed + drawing
                    results = self.carry(stmt, r, variable, before, start, changed, exits)
                    drawing = self.random_changed(before, changed)
            else:
                results = {}
                if exits:
                    self.exit_loop(stmt, r, turn)
        finally:
            self.loops.pop()
        inside = [n for n in self.env if n not in before or (kind is AxisKind.GLOBAL and n in assigned)]
        self.env = {**before, **results}
        for n in inside:
            self.env[n] = Undefined(n, f"it is assigned inside the loop at line {stmt.lineno}, and a loop's "
                                       "locals end with it")

    # ---- the locals a loop changes ----------------------------------------------------------------------

    def turn(self, stmt: ast.For | ast.While) -> Turn:
        """State one turn of loop ``stmt``'s body (a ``while``'s where its test holds, as under an ``if``), with
        its ``break`` and ``continue`` statements (``leave``); the turn, for the loop's exit."""
        saved_gate, before = self.gate, dict(self.env)
        test: Any = True
        base = self.gate
        if isinstance(stmt, ast.While):
            test = self.expr(stmt.test)
            before.update(self.hidden_locals())  # a test that fails has drawn what it draws all the same
            if not is_number(test):
                cond = self.truth(test, stmt.test)
                base = cond if base is None else base & cond
        turn = Turn(self.loops[-1], base, endless=isinstance(stmt, ast.While) and is_number(test))
        self.turns.append(turn)
        self.gate = base
        try:
            self.block(stmt.body)
        finally:
            self.turns.pop()
            self.gate = saved_gate
        if base is not saved_gate:  # the body ran where the test held: elsewhere the locals keep their values
            assert base is not None
            ran = self.env
            self.env = self.merged(lazy(base), ran, before, stmt,
                                   f"it is assigned in the while loop at line {stmt.lineno}")
        return turn

    def exit_loop(self, stmt: ast.For | ast.While, r: UOp, turn: Turn) -> None:
        """The exit of loop ``r``, stated after the effects of its turn: it ends after a turn that took a
        ``break``, or whose ``while`` test (or the gate around the loop) failed."""
        if turn.endless and not turn.breaks:
            raise self.refuse(stmt, "this while loop never ends: its test is always true and no break leaves it")
        conditions = [None if b is None else lazy(b) for b in turn.breaks]
        if turn.base is not None:
            conditions.append(lazy(turn.base).ne(True))
        if not conditions:
            return  # a range loop whose breaks are never reached (under a constant test): it runs to its end
        cond: Any = True if any(c is None for c in conditions) else functools.reduce(
            lambda a, b: a | b, [c for c in conditions if c is not None])
        value = UOp.const(dtypes.bool, True) if cond is True else cond
        exit_ = self.k.exit(r, value, *self.running(value))
        self.stated[exit_] = dict(self.versions)

    def merged(self, cond: UOp, taken: dict[str, Any], other: dict[str, Any], node: ast.AST,
               one_side: str) -> dict[str, Any]:
        """The locals after a choice between two ways through the code (``taken`` where ``cond`` holds,
        ``other`` elsewhere): each a ``where`` of its two values; one defined one way only is undefined
        (``one_side`` says why)."""
        merged: dict[str, Any] = {}
        for name in dict.fromkeys([*taken, *other]):
            a, b = taken.get(name), other.get(name)
            if name not in taken or name not in other:
                merged[name] = Undefined(name, one_side)
            elif a is b:
                merged[name] = a
            elif isinstance(a, Undefined) or isinstance(b, Undefined):
                merged[name] = a if isinstance(a, Undefined) else b
            else:
                merged[name] = self.select(cond, a, b, node)
        return merged

    def carry(self, stmt: ast.For | ast.While, r: UOp, variable: Any, before: dict[str, Any], start: Statement,
              changed: list[str], exits: bool = False) -> dict[str, Any]:
        """The values after the loop of the locals it ``changed``. The body is stated again with a placeholder
        for each: one whose turn makes ``p op term`` of it, and that the loop reads nowhere else, is a
        reduction over the loop's range; the others are carried from turn to turn in a register of their own
        (``cell``): stored before the loop and at the end of each turn, loaded at the start of each turn (held,
        as every read is, until the turn ends) and after the loop. Whatever a carried local's register makes of
        another local carries that one too, so the body is stated until no more locals join them. A
        loop that ``exits`` early (a ``while``, a ``break``) carries every local it changes: a reduction folds
        every turn of its range. The ordinal of the draws (``svod.frontend.randoms``), where every turn adds the
        same to it, is neither: it is computed from the turn's index (``step``), so the draws' turns stay
        independent."""
        name = stmt.target.id if isinstance(stmt, ast.For) else None  # type: ignore[attr-defined]
        first = dict(self.env)
        placeholders = {n: self.placeholder(n, self.holding(n, before[n], first[n])) for n in changed}
        cells: dict[str, UOp] = {}
        steps: dict[str, UOp] = {}
        """Locals that grow by the same step every turn (the ordinal of draws): computed from the turn's index."""
        while True:
            self.k.discard_effects(start.effects)
            self.versions = dict(start.versions)
            self.env = dict(before)
            with self.outside_loop():  # each cell starts before the loop
                for n, register in cells.items():
                    self.cell_store(register, before[n])
            self.env.update({n: p for n, p in placeholders.items() if n not in cells})
            self.env.update({n: self.cell_load(register) for n, register in cells.items()})
            self.env.update({n: before[n] + r.cast(step.dtype) * step for n, step in steps.items()})
            if name is not None:
                self.env[name] = variable
            turn = self.turn(stmt)
            for n, register in cells.items():  # each turn ends storing what it made of the carried locals
                self.cell_store(register, self.env[n])
            grown = {n: self.holding(n, p, self.env[n]) for n, p in placeholders.items()}
            grown = {n: dtype for n, dtype in grown.items() if dtype != placeholders[n].dtype}
            if grown:  # a turn makes a value of a wider dtype: the local holds that from the start
                placeholders.update({n: self.placeholder(n, dtype) for n, dtype in grown.items()})
                cells = {n: cell for n, cell in cells.items() if n not in grown}
                continue
            stepping = {n: step for n, p in placeholders.items() if n not in cells and n not in steps and not exits
                        and (step := self.step(n, p, placeholders, r)) is not None}
            if stepping:  # state the body again with those locals computed from the turn's index
                steps.update(stepping)
                continue
            splits = {n: None if exits else self.reduction(n, p, placeholders, start.effects)
                      for n, p in placeholders.items() if n not in cells and n not in steps}
            joining = [n for n, split in splits.items() if split is None]
            if not joining:
                if exits:
                    self.exit_loop(stmt, r, turn)
                break
            for n in joining:
                cells[n] = self.cell((self.source.file, stmt.lineno, stmt.col_offset, n), placeholders[n].dtype)
        with self.outside_loop():
            results: dict[str, Any] = {n: self.cell_load(register) for n, register in cells.items()}
        results.update({n: before[n] + r.src[0].cast(step.dtype) * step for n, step in steps.items()})
        for n, fold in splits.items():
            assert fold is not None
            if fold.op is None:
                results[n] = before[n]
                continue
            red = UOp.range(r.src[0], r.arg[0], AxisKind.REDUCE)  # the loop's axis: nested loops keep their order
            self.ranges.append(red)
            results[n] = self.initial(before[n], _merged_reduce(substitute(fold.term, {r: red}), red, fold.op), fold)
        return results

    @contextmanager
    def outside_loop(self) -> Iterator[None]:
        """State what follows as if just before (or after) the innermost loop: a carried local's first store,
        its value after the loop."""
        current = self.loops.pop()
        try:
            yield
        finally:
            self.loops.append(current)

    def reduction(self, name: str, p: UOp, placeholders: dict[str, UOp], mark: int) -> Fold | None:
        """How the loop just stated folds local ``name`` (``p`` at the start of a turn) when that is a
        reduction; None when it must be carried instead: the loop reads it elsewhere, or its term reads memory
        the loop writes (a reduction is folded in a loop of its own, which would read that memory at other
        times than the statement does)."""
        value = self.env[name]
        others = [v for m, v in self.env.items() if m != name and m in placeholders and isinstance(v, UOp)]
        effects = self.k.effects[mark:]
        if any(p in e.toposort() for e in effects) or any(p in v.toposort() for v in others):
            return None
        fold = _accumulation(value, p)
        if fold is None or any(q in fold.term.toposort() for q in placeholders.values()):
            return None
        written = written_memory(effects)
        if any(u.op is Ops.LOAD and memory_of(u.src[0].src[0]) in written for u in fold.term.toposort()):
            return None
        return fold

    def step(self, name: str, p: UOp, placeholders: dict[str, UOp], r: UOp) -> UOp | None:
        """What every turn of the loop over ``r`` just stated adds to the draws' ordinal (hidden local ``name``,
        ``p`` at the start of a turn), where that is the same in every turn: a value of no placeholder, no
        memory and no range but those of the loops around this one. Then the ordinal at the start of turn ``r``
        is its value before the loop plus ``r`` steps (modulo 2**32, as it counts), and nothing is carried.
        None for anything else."""
        if name != ORDINAL or not isinstance(self.env[name], UOp):
            return None
        term = _growth(self.env[name], p)
        if term is None:
            return None
        outer = {loop.range for loop in self.loops[:-1]}
        for u in term.toposort():
            if u in placeholders.values() or u.op in (Ops.LOAD, Ops.REDUCE) or (u.op is Ops.RANGE and u not in outer):
                return None
        return simplify(term)

    def placeholder(self, name: str, dtype: DType) -> UOp:
        """A stand-in for local ``name`` of ``dtype`` at the start of a turn: a node nothing else is (a
        DEFINE_VAR that never reaches a kernel)."""
        return UOp(Ops.DEFINE_VAR, dtype, (), (f"turn_{name}_{next(self._placeholders)}", 0, 0))

    def holding(self, name: str, *values: Any) -> DType:
        """The dtype of local ``name`` that holds each of ``values`` in turn (``Platform.unify``; a Python
        number, or a value computed from Python numbers alone, is weak, as in arithmetic): an earlier typed
        value is never narrowed."""
        for v in values:
            if not (isinstance(v, UOp) or is_number(v)):
                raise KernelSyntaxError(f"local {name} changes in a loop and holds {describe(v)}",
                                        kernel=self.name, stage="build", value=name)
        typed = [v.dtype for v in values if isinstance(v, UOp) and not self.weak(v)]
        if not typed:
            numbers = [v.dtype if isinstance(v, UOp) else self.platform.alone(v) for v in values]
            return functools.reduce(self.platform.unify, numbers)
        dtype = functools.reduce(self.platform.unify, typed)
        for v in values:
            if is_number(v) or self.weak(v):
                dtype = self.platform.unify(dtype, self.meets(v, dtype))
        return dtype

    def initial(self, init: Any, reduced: UOp, fold: Fold) -> Any:
        """``init`` folded with ``reduced`` as the loop's turns fold each term, or ``reduced`` alone where
        ``init`` is the op's identity: 0 for a sum, 1 for a product, NaN for a float maximumNumber, the type's
        limit for an integer max or min. A float sum reduces from -0.0, the one exact identity of an addition
        (which lets it be vectorised and a matmul take its own lowering), so one of no terms, or of -0.0s only,
        is -0.0; where Python starts it from +0 (``s = 0``, ``s = 0.0``), where it is +0.0, ``+ 0.0`` once after
        the reduction gives that (it changes no other value: NaN stays NaN). Python's ``max`` of floats has no
        identity: a NaN start stays NaN, and -inf stays where no term is above it."""
        assert fold.op is not None
        start = self.cast(init, reduced.dtype)
        if fold.python_extreme:
            return builtin_extreme(fold.op, start, reduced)
        if is_number(init) and _same_number(init, reduce_identity(fold.op, reduced.dtype)):
            if fold.op is Ops.ADD and reduced.dtype.is_float and pymath.copysign(1.0, init) > 0:
                return reduced + 0.0
            return reduced
        return _combine(fold.op, start, reduced)


# ---- helpers --------------------------------------------------------------------------------------------

def lazy(gate: UOp) -> UOp:
    """``gate``, the conjunction of the conditions around a statement (``a & b & c``, outermost first), as a
    value that computes each condition only where those before it hold (``where(a, where(b, c, False), False)``):
    a condition's reads are made only where Python would test it. (An effect's gate is tested so already:
    condition by condition.)"""
    parts: list[UOp] = []
    stack = [gate]
    while stack:
        u = stack.pop()
        if u.op is Ops.AND and u.dtype == dtypes.bool:
            stack.extend(reversed(u.src))
        else:
            parts.append(u)
    value = parts[-1]
    for condition in reversed(parts[:-1]):
        value = condition.where(value, False)
    return value


def _breaks(body: Sequence[ast.stmt]) -> bool:
    """Whether ``body`` (a loop's) holds a ``break`` of that loop: one outside the loops nested in it."""
    stack = list(body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.Break):
            return True
        if isinstance(stmt, ast.If):
            stack.extend([*stmt.body, *stmt.orelse])
    return False


def _assigned(body: Sequence[ast.stmt]) -> set[str]:
    """The names statements assign anywhere in ``body`` (a loop's body: those it may change from turn to turn;
    a value compared with the one before would miss ``b = a + b`` that happens to equal it once)."""
    names: set[str] = set()
    for stmt in body:
        for node in walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
                targets = [node.target]
            for target in targets:
                names.update(n.id for n in walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _is_zero(value: Any) -> bool:
    return is_number(value) and value == 0


def _index(value: Any) -> Any:
    return value.cast(dtypes.index) if isinstance(value, UOp) else value


def _last(start: Any, turns: Any, step: int) -> Any:
    """The value of the last of ``turns`` turns of a loop from ``start`` by ``step``."""
    if is_number(start) and is_number(turns):
        return start + (turns - 1) * step
    return simplify(_index(start) + (_index(turns) - 1) * step)


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return a.alu(op, b)


@dataclass(frozen=True)
class Fold:
    """How a turn of a loop changes a local: ``local = local op term`` (``op`` None: the turn leaves it).
    ``python_extreme``: the op is Python's ``max`` or ``min`` of floats (``builtin_extreme``), whose fold from a
    start that is not NaN is the op's maximumNumber reduction of the terms, the start kept where none is
    beyond it."""

    op: Ops | None
    term: UOp
    python_extreme: bool = False


def _accumulation(value: Any, p: UOp) -> Fold | None:
    """How a turn changes local ``p``: ``value`` is ``p op term`` (under ``where``s, ``p`` kept as is where a
    branch leaves it: the term is then the op's identity), or ``p`` itself; None for anything else."""
    if value is p:
        return Fold(None, p)
    if not isinstance(value, UOp):
        return None
    if value.op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN) and len(value.src) == 2:
        a, b = value.src
        if a is p and p not in b.toposort():
            return Fold(value.op, b)
        if b is p and p not in a.toposort():
            return Fold(value.op, a)
    if value.op is Ops.SUB and value.src[0] is p and p not in value.src[1].toposort():
        return Fold(Ops.ADD, -value.src[1])
    extreme = _python_extreme(value, p)
    if extreme is not None:
        return extreme
    if value.op is Ops.WHERE and p not in value.src[0].toposort():
        sides = [_accumulation(s, p) for s in value.src[1:]]
        if any(s is None for s in sides):
            return None
        changing = [s for s in sides if s is not None and s.op is not None]
        if not changing:
            return Fold(None, p)
        op, python_extreme = changing[0].op, changing[0].python_extreme
        if any(s.op is not op or s.python_extreme != python_extreme for s in changing):
            return None
        assert op is not None
        identity = UOp.const(p.dtype, reduce_identity(op, p.dtype))
        terms = [s.term if s is not None and s.op is not None else identity for s in sides]
        return Fold(op, value.src[0].where(terms[0], terms[1]), python_extreme)
    return None


def _growth(value: Any, p: UOp) -> UOp | None:
    """What ``value`` adds to ``p``, where it is ``p`` plus terms (sums of them, under ``where``s whose
    conditions do not read ``p``); None for anything else."""
    if value is p:
        return UOp.const(p.dtype, 0)
    if not isinstance(value, UOp):
        return None
    if value.op is Ops.ADD:
        for grown, added in (value.src, value.src[::-1]):
            if p not in added.toposort():
                term = _growth(grown, p)
                if term is not None:
                    return term + added
        return None
    if value.op is Ops.WHERE and p not in value.src[0].toposort():
        taken, other = _growth(value.src[1], p), _growth(value.src[2], p)
        return None if taken is None or other is None else value.src[0].where(taken, other)
    return None


def _python_extreme(value: UOp, p: UOp) -> Fold | None:
    """``p = max(p, term)`` or ``p = min(p, term)`` on floats, as ``builtin_extreme`` builds them (``where(p <
    term, term, p)``; ``if term > p: p = term`` is the same). ``max(term, p)`` is not a fold: a NaN term
    there replaces ``p`` and the next term replaces the NaN."""
    if value.op is not Ops.WHERE or value.src[0].op is not Ops.CMPLT or not value.dtype.is_float:
        return None
    (a, b), picked, kept = value.src[0].src, value.src[1], value.src[2]
    if kept is not p or picked is p or p in picked.toposort():
        return None
    if (a, b) == (p, picked):
        return Fold(Ops.MAX, picked, python_extreme=True)
    if (a, b) == (picked, p):
        return Fold(Ops.MIN, picked, python_extreme=True)
    return None


def _same_number(a: Any, b: Any) -> bool:
    return bool(a == b) or (pymath.isnan(a) and pymath.isnan(b))


def _merged_reduce(term: UOp, r: UOp, op: Ops) -> UOp:
    """``term`` reduced over ``r`` by ``op``: one REDUCE over ``r`` and the ranges of a same-op REDUCE that
    ``term`` is (nested loops of one sum are one sum over their ranges, outermost first)."""
    if term.op is Ops.REDUCE and term.arg is op:
        return term.src[0].reduce(r, *term.src[1:], op=op)
    return term.reduce(r, op=op)


def _flagging_breaks(body: list[ast.stmt], flag: str) -> list[ast.stmt]:
    """``body`` with each ``break`` of its loop (not of a loop inside it) clearing ``flag`` first."""
    made: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.Break):
            made += [*placed([ast.Assign([ast.Name(flag, ast.Store())], ast.Constant(False))], stmt), stmt]
        elif isinstance(stmt, ast.If):
            made.append(stands_for(ast.copy_location(ast.If(stmt.test, _flagging_breaks(stmt.body, flag),
                                                            _flagging_breaks(stmt.orelse, flag)), stmt), stmt))
        else:  # (a loop's own breaks are its own; a with or try a kernel refuses)
            made.append(stmt)
    return made


__all__ = ["Loops", "Statement"]

