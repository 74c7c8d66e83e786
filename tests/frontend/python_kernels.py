"""Random Python kernels, each run on a device and as plain Python (``svod.frontend.oracle``), the outcomes
compared. ``python -m tests.frontend.python_kernels COUNT [DEVICE ...] [--first SEED] [--exits] [--lanes]
[--cells]`` sweeps COUNT kernels and prints how each outcome class fared (the test runs a fixed set of them:
``test_oracle.py``).

A kernel is one ``svod.prange`` over the rows of ``out`` and ``x`` (same shape, dtypes drawn independently)
whose body is drawn statement by statement: locals assigned and updated, stores to the work item's row of
``out`` and of ``x`` (in place), loops over the columns (forward and reversed), over the rows up to the work
item's (triangular), over a constant count and over a count read from the index array (a loop's end read
from memory, perhaps under an ``if``; not in the ``lanes`` and ``cells`` forms below), carrying locals and reducing into
them, ``if``/``elif``/``else`` chains, atomic adds into a histogram, gathers through an index array, and reads
of what the body stored before. Expressions mix the arrays' values, locals, loop variables and weak constants
through ``+ - *``, ``//`` and ``%`` (by positive divisors, as Python's divide by zero raises), ``min``, ``max``,
``abs``, casts and conditional expressions. About one float element in seven is special (NaN, ±inf, -0.0, a
subnormal), so a ``min`` or ``max`` meets NaNs and signed zeros as Python's do. Some kernels race on purpose (a
store every work item makes, or one through the index array) or read past a row: svod must refuse the first and
raise ``IndexOutOfBoundsError`` for the second where Python raises ``IndexError``.

With ``exits`` (``--exits`` on the command line), loops are also ``while`` loops (a counter bounds each, plus a
drawn test), and loop bodies hold ``break`` and ``continue`` under drawn conditions. With ``lanes``
(``--lanes``), the arrays are transposed: a work item is a column, and neighbouring work items touch neighbouring
elements, as a CPU's vector lanes need (``svod.codegen.recurrences.carry_rows``): half the kernels take their
sizes as constants (``static_shapes``), so that accesses along the loops are proven, not checked, and none
draws an atomic add or a loop over the rows before its own (what keeps work items out of lanes).

With ``cells`` (``--cells``), the body runs once per column ``c`` of the row: in a sequential loop over the
columns (which svod makes parallel where its turns are independent) or in a triangular ``svod.prange(i + 1)``
(of square arrays): a turn stores only to its own cell of ``out`` and reads only that cell of it, so
that the turns are often independent. Loops in it also run below a column loop's variable (``range(c)``) or from
it to the row's end (``range(c, columns)``): loops whose turns count with another loop's variable, carrying locals
that each turn of the column loop sets anew. Before the column loop, the work item may reduce its row of ``x``
(its maximum, minimum or sum) into a local that the cells read.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import svod
from svod.device import Device
from svod.errors import IndexOutOfBoundsError, KernelSyntaxError, RaceError, SvodError
from svod.frontend.oracle import run_as_python

DTYPES = ["float32", "float64", "int32", "int64"]
"""Array dtypes. Not int8 or uint8: a local holds one dtype in a kernel (the unification of what it is
assigned, numba's rule), while in plain Python it holds the dtype of the branch that ran, and narrow integers
wrap where their unification would not (README: where a kernel differs from plain Python)."""
ROWS = [0, 1, 2, 5, 7, 13]
LANE_ROWS = [0, 1, 5, 37, 70, 131]
"""Row counts where a work item is a column (``lanes``): past a tile of 32 or 64 lanes too, and not a multiple."""
COLUMNS = [1, 3, 8, 17]
CELL_LOOPS = ["range(out.shape[1])", "svod.prange(i + 1)"]
"""The loops over a row's columns that hold the body with ``cells``."""
BINS = 4


@dataclass
class Kernel:
    """A generated kernel: its source, and whether it races on purpose."""

    source: str
    racy: bool
    out: str
    x: str
    rows: int
    columns: int
    lanes: bool = False
    """Whether the arrays are ``(columns, rows)``: ``x[c, i]`` where the text says row ``i``, column ``c``."""


@dataclass
class _Scope:
    locals: list[str] = field(default_factory=list)
    loop: str | None = None
    """The innermost loop's variable, and what it runs over: ``columns``, ``rows`` or ``count``."""
    over: str = ""
    sequential: bool = False
    """Whether the innermost loop is a sequential one (a ``break`` leaves it)."""


Typed = tuple[str, str]
"""An expression's source and its dtype: an array dtype's name, or ``int``/``float`` for a weak Python number."""


def _promoted(a: str, b: str) -> str:
    """NumPy 2's promotion (NEP 50), svod's too: a weak number takes the other's type, an integer meeting a
    weak float becomes float64."""
    weak = {"int", "float"}
    if a == b:
        return a
    if a in weak and b in weak:
        return "float"
    if a in weak or b in weak:
        number, typed = (a, b) if a in weak else (b, a)
        return typed if number == "int" or typed.startswith("float") else "float64"
    return str(np.promote_types(a, b))


def _concrete(dtype: str) -> str:
    return {"int": "int32", "float": "float32"}.get(dtype, dtype)


def _as(value: Typed, dtype: str) -> str:
    """``value``'s source converted to ``dtype`` where its own dtype differs."""
    return value[0] if value[1] == dtype else f"svod.{_concrete(dtype)}({value[0]})"


class _Writer:
    """Draws a kernel's statements. Each expression's dtype is tracked, and a value is converted explicitly
    wherever plain Python's dtype would differ from the kernel's: an assignment to a local of another dtype
    (a local has one dtype, the unification of what it is assigned: numba's rule, where Python keeps the
    dtype of the value assigned last), the two values of a ``min``, ``max`` or conditional expression
    (Python returns one of them, the kernel their promotion), a weak number a local starts from (Python
    keeps an unbounded int) and a store (NumPy refuses a NaN into an integer array). Plain Python then
    computes in the kernel's dtypes, wrapping and rounding as it does."""

    def __init__(self, rng: random.Random, racy: bool, exits: bool = False,
                 dtypes: tuple[str, str] = ("float64", "float64"), lanes: bool = False, cells: bool = False,
                 reads: random.Random | None = None) -> None:
        self.rng = rng
        self.reads = reads
        """Draws which loops over a constant count run over a count read from memory instead (None: none do): a
        stream of its own, so that a seed draws the kernel it drew before such loops, but for those loops."""
        self.racy = racy
        self.exits = exits
        self.lanes = lanes
        self.cells = cells
        self.columns = "out.shape[0]" if lanes else "out.shape[1]"
        """How many columns a row has, in the kernel's text."""
        self.dtypes = {"out": dtypes[0], "x": dtypes[1]}
        self.types: dict[str, str] = {}
        """The dtype of each local."""
        self.accesses: set[tuple[str, bool, bool]] = set()
        """(array, written, of another work item's row) of every access the body makes."""
        self.names = 0
        self.loops = 0
        self.lines: list[str] = []
        self.picks: random.Random | None = None
        """Draws where the cells read ``row`` (``row_value``'s stream), where the kernel has it."""

    def fresh(self) -> str:
        self.names += 1
        return f"v{self.names}"

    # ---- expressions ----------------------------------------------------------------------------------------

    def column(self, scope: _Scope) -> str:
        choices = [str(self.rng.randrange(0, 1))]  # column 0 exists in every shape drawn
        if scope.loop is not None and scope.over == "columns":
            choices += [scope.loop, scope.loop, f"{self.columns} - 1 - {scope.loop}"]
        return self.rng.choice(choices)

    def leaf(self, scope: _Scope) -> Typed:
        if self.picks is not None and self.picks.random() < 0.15:
            return "row", self.types["row"]
        r = self.rng.random()
        if scope.locals and r < 0.3:
            name = self.rng.choice(scope.locals)
            return name, self.types[name]
        if r < 0.55:
            return self.access("x", "i", self.column(scope)), self.dtypes["x"]
        if r < 0.62:
            return self.access("out", "i", "c" if self.cells else self.column(scope)), self.dtypes["out"]
        if r < 0.68:
            return self.access("x", "idx[i]", self.column(scope)), self.dtypes["x"]
        if r < 0.74 and scope.loop is not None and scope.over == "rows":
            return self.access("x", scope.loop, "0"), self.dtypes["x"]
        if r < 0.8:
            return self.rng.choice(["i", *([scope.loop] if scope.loop else [])]), "int64"  # int64, as numba's
        number = self.rng.choice(["2", "-3", "1", "0.5", "1.5", "-2.0", "7"])
        return number, "float" if "." in number else "int"

    def either(self, a: Typed, b: Typed) -> tuple[str, str, str]:
        """The sources of ``a`` and ``b`` as values of one dtype, and that dtype."""
        dtype = _promoted(a[1], b[1])
        if a[1] == b[1]:
            return a[0], b[0], dtype
        return _as(a, _concrete(dtype)), _as(b, _concrete(dtype)), _concrete(dtype)

    def expr(self, scope: _Scope, depth: int = 0) -> Typed:
        if depth >= 3 or self.rng.random() < 0.35:
            return self.leaf(scope)
        a, b = self.expr(scope, depth + 1), self.expr(scope, depth + 1)
        kind = self.rng.randrange(10)
        if kind < 4:
            return f"({a[0]} {self.rng.choice(['+', '-', '*'])} {b[0]})", _promoted(a[1], b[1])
        if kind == 4:
            left, right, dtype = self.either(a, b)
            return f"{self.rng.choice(['min', 'max'])}({left}, {right})", dtype
        if kind == 5:
            return f"({a[0]} {self.rng.choice(['//', '%'])} {self.rng.randrange(1, 6)})", a[1]
        if kind == 6:
            return f"({a[0]} // (abs({b[0]}) % 3 + 1))", _promoted(a[1], b[1])
        if kind == 7:
            return f"abs({a[0]})", a[1]
        if kind == 8:
            test = self.condition(scope, depth + 1)
            left, right, dtype = self.either(a, b)
            return f"({left} if {test} else {right})", dtype
        return f"-{a[0]}", a[1]

    def condition(self, scope: _Scope, depth: int = 0) -> str:
        a, b = self.expr(scope, depth + 1), self.expr(scope, depth + 1)
        test = f"{a[0]} {self.rng.choice(['<', '>=', '!=', '<='])} {b[0]}"
        if self.rng.random() < 0.2:
            return f"({test} and {self.expr(scope, 3)[0]} > 0)"
        return test

    def assign(self, indent: int, name: str, value: Typed) -> None:
        """``name = value``: a new local of ``value``'s dtype (a weak number's made 64-bit), or ``value``
        converted to the local's dtype."""
        if name not in self.types:
            self.types[name] = _concrete(value[1])
        self.emit(indent, f"{name} = {_as(value, self.types[name])}")

    def update(self, indent: int, name: str, op: str, value: Typed) -> None:
        """``name op= value``, or ``name = name op value`` converted back where that changes its dtype."""
        if _promoted(self.types[name], value[1]) == self.types[name]:
            self.emit(indent, f"{name} {op}= {value[0]}")
        else:
            self.assign(indent, name, (f"({name} {op} {value[0]})", _promoted(self.types[name], value[1])))

    def store(self, indent: int, array: str, row: str, column: str, value: Typed) -> None:
        if self.cells:  # each turn of the column loop writes its own cell, and reads only that cell of out
            array, column = "out", "c"
        self.emit(indent, f"{self.access(array, row, column, written=True)} = {_as(value, self.dtypes[array])}")

    def access(self, array: str, row: str, column: str, written: bool = False) -> str:
        self.accesses.add((array, written, row != "i"))
        return f"{array}[{column}, {row}]" if self.lanes else f"{array}[{row}, {column}]"

    def races(self) -> bool:
        """Whether two work items may touch one element, one of them writing it: a store to a row not the
        work item's own, or one to its own row of an array some work item reads in another's row."""
        return any(written and (other or (array, False, True) in self.accesses)
                   for array, written, other in self.accesses)

    # ---- statements ---------------------------------------------------------------------------------------

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def block(self, scope: _Scope, indent: int, count: int, depth: int) -> list[str]:
        """Statements of one block; the locals defined after it (those of ``scope`` and the ones it defined,
        when ``scope`` is the block's own)."""
        for _ in range(count):
            self.statement(scope, indent, depth)
        return scope.locals

    def statement(self, scope: _Scope, indent: int, depth: int) -> None:
        if self.exits and scope.sequential and self.rng.random() < 0.15:
            leave = self.rng.choice(["break", "continue"])
            if self.rng.random() < 0.2:
                self.emit(indent, leave)  # the rest of the block is never run
            else:
                self.emit(indent, f"if {self.condition(scope)}:")
                self.emit(indent + 1, leave)
            return
        r = self.rng.random()
        if r < 0.25 or not scope.locals:
            name = self.fresh() if not scope.locals or self.rng.random() < 0.6 else self.rng.choice(scope.locals)
            self.assign(indent, name, self.expr(scope))
            if name not in scope.locals:
                scope.locals.append(name)
        elif r < 0.35:
            target = self.rng.choice(scope.locals)
            self.update(indent, target, self.rng.choice(["+", "-", "*"]), self.expr(scope))
        elif r < 0.5:
            row = "i"
            if self.racy and self.rng.random() < 0.5:
                row = self.rng.choice(["0", "idx[i]"])
            value = self.expr(scope)
            self.store(indent, "out", row, self.column(scope), value)
        elif r < 0.58:
            value = self.expr(scope)
            self.store(indent, "x", "i", self.column(scope), value)
        elif r < 0.63 and not self.lanes:  # an atomic update keeps work items out of lanes
            self.emit(indent, f"svod.atomic_add(hist, (idx[i] + {self.rng.randrange(4)}) % {BINS}, "
                              f"svod.int32({self.expr(scope)[0]} % 100))")
        elif r < 0.82 and depth < 2:
            self.loop(scope, indent, depth)
        elif depth < 2:
            self.branch(scope, indent, depth)
        else:
            value = self.expr(scope)
            self.store(indent, "out", "i", self.column(scope), value)

    def loop(self, scope: _Scope, indent: int, depth: int) -> None:
        self.loops += 1
        var = f"j{self.loops}"
        kinds = ["columns", "reversed", "count"] if self.lanes else ["columns", "reversed", "rows", "count"]
        if self.cells and scope.over == "columns":  # turns that count with the column loop's variable
            kinds += ["below", "tail"]
        kind = self.rng.choice(kinds)
        if kind == "count" and self.reads is not None and self.reads.random() < 0.5:
            kind = "read"
        header = {"columns": f"range({self.columns})", "reversed": f"range({self.columns} - 1, -1, -1)",
                  "rows": "range(i + 1)", "count": "range(3)", "below": f"range({scope.loop})",
                  "tail": f"range({scope.loop}, {self.columns})", "read": f"range({self._read_count()})"}[kind]
        before = list(scope.locals)
        if not before:  # something to reduce into or carry
            name = self.fresh()
            start = self.rng.choice([("0", "int"), ("0.0", "float"), ("1", "int"), ("x[i, 0]", self.dtypes["x"])])
            self.assign(indent, name, start)
            before.append(name)
            scope.locals.append(name)
        if self.exits and self.rng.random() < 0.4:  # a while: a counter bounds it, a drawn test may end it sooner
            bounds = {"rows": "i + 1", "count": "3", "below": scope.loop, "read": self._read_count()}
            bound = bounds.get(kind, self.columns)
            test = f" and {self.condition(scope)}" if self.rng.random() < 0.6 else ""
            self.emit(indent, f"{var} = 0")
            self.emit(indent, f"while {var} < {bound}{test}:")
            self.emit(indent + 1, f"{var} += 1")
            inner = _Scope(list(before), scope.loop, scope.over, sequential=True)
        else:
            self.emit(indent, f"for {var} in {header}:")
            inner = _Scope(list(before), var, "rows" if kind == "rows" else "count" if kind == "count" else "columns",
                           sequential=True)
        target = self.rng.choice(before)
        style = self.rng.randrange(3)
        value = self.expr(inner)
        if style == 0:
            self.update(indent + 1, target, "+", value)
        elif style == 1:
            extreme = self.rng.choice(["max", "min"])
            self.emit(indent + 1, f"{target} = {extreme}({target}, {_as(value, self.types[target])})")
        else:  # carried, read in turn
            self.assign(indent + 1, target, (f"{target} // 2 + {value[0]}", _promoted(self.types[target], value[1])))
        self.block(inner, indent + 1, self.rng.randrange(0, 3), depth + 1)
        scope.locals = before  # a loop's own locals end with it

    def row_value(self, draws: random.Random) -> list[str]:
        """The lines before the cell loop that reduce the work item's row of ``x`` into a local, ``row``, which the
        cells read and never assign (a row's maximum, minimum or sum beside loops over its cells: PoCL's rows
        reduced per work item, a loop over the cells after them)."""
        self.picks = draws
        if draws.random() < 0.5:
            self.types["row"] = self.dtypes["x"]
            update = f"row = {draws.choice(['max', 'min'])}(row, {self.access('x', 'i', 'k')})"
            lines = [f"row = {self.access('x', 'i', '0')}", f"for k in range({self.columns}):", f"    {update}"]
        else:
            self.types["row"] = _promoted("float", self.dtypes["x"])
            lines = ["row = 0.0", f"for k in range({self.columns}):", f"    row += {self.access('x', 'i', 'k')}"]
        return ["        " + line for line in lines]

    def _read_count(self) -> str:
        """A loop's count read from memory: the work item's element of the index array (below the rows) modulo
        the columns and one, so from 0 to the fewer of the columns and the rows less one."""
        return f"idx[i] % ({self.columns} + 1)"

    def branch(self, scope: _Scope, indent: int, depth: int) -> None:
        before = list(scope.locals)
        arms = [f"if {self.condition(scope)}:"]
        arms += [f"elif {self.condition(scope)}:" for _ in range(self.rng.randrange(0, 2))]
        if self.rng.random() < 0.6:
            arms.append("else:")
        for arm in arms:
            self.emit(indent, arm)
            inner = _Scope(list(before), scope.loop, scope.over, scope.sequential)
            self.block(inner, indent + 1, self.rng.randrange(1, 3), depth + 1)
        scope.locals = before  # a local one branch assigns is not defined after


def generate(seed: int, exits: bool = False, lanes: bool = False, cells: bool = False) -> Kernel:
    rng = random.Random(seed)
    racy = rng.random() < 0.1
    out, x = rng.choice(DTYPES), rng.choice(DTYPES)
    reads = None if lanes or cells else random.Random(f"{seed} read counts")
    writer = _Writer(rng, racy, exits, (out, x), lanes, cells, reads)
    cell_loop = rng.choice(CELL_LOOPS) if cells else ""
    row_draws = random.Random(f"{seed} row reductions")  # of its own: the seeds' other kernels stay as drawn
    prologue = writer.row_value(row_draws) if cells and row_draws.random() < 0.4 else []
    scope = _Scope(loop="c", over="columns", sequential=cell_loop.startswith("range")) if cells else _Scope()
    indent = 3 if cells else 2
    writer.block(scope, indent, rng.randrange(2, 6), 0)
    own = "c" if cells else "0"
    if rng.random() < 0.08:  # past the row: i + 1 reaches rows
        writer.emit(indent, f"{writer.access('out', 'i', own, written=True)} = {writer.access('x', 'i + 1', '0')}")
    every = writer.access("out", "i", own, written=True)  # every kernel stores
    body = "\n".join(writer.lines)
    static = lanes and rng.random() < 0.5  # sizes constants: the column loops' accesses proven, not checked
    decorator = "@svod.kernel(static_shapes=True)" if static else "@svod.kernel"
    source = (f"import svod\n\n\n{decorator}\ndef generated_{seed}(out, x, idx, hist):\n"
              f"    for i in svod.prange(out.shape[{1 if lanes else 0}]):\n"
              + "".join(line + "\n" for line in prologue) +
              f"{f'        for c in {cell_loop}:{chr(10)}' if cells else ''}{body}\n"
              f"{'    ' * indent}{every} = {every}\n")
    rows, columns = rng.choice(LANE_ROWS if lanes else ROWS), rng.choice(COLUMNS)
    if cell_loop.startswith("svod.prange"):
        rows = columns = max(rows, 1)  # square: a size of each row's triangle tells the work items' cells apart
    return Kernel(source, writer.races(), out, x, rows, columns, lanes)


def arguments(kernel: Kernel, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)

    def values(dtype: str) -> np.ndarray:
        shape = (kernel.columns, kernel.rows) if kernel.lanes else (kernel.rows, kernel.columns)
        if dtype.startswith("float"):
            v = (rng.integers(-8, 9, shape) + rng.integers(0, 4, shape) * 0.25).astype(dtype)
            special = np.array([np.nan, np.inf, -np.inf, -0.0, np.finfo(dtype).smallest_subnormal], dtype)
            picked = rng.random(shape) < 0.15
            v[picked] = special[rng.integers(0, special.size, int(picked.sum()))]
            return v
        low = 0 if dtype == "uint8" else -50
        return rng.integers(low, 50, shape).astype(dtype)

    idx = rng.integers(0, max(kernel.rows, 1), kernel.rows).astype(np.int32)
    return [values(kernel.out), values(kernel.x), idx, np.zeros(BINS, np.int32)]


def load(kernel: Kernel, folder: Path, seed: int) -> Any:
    """The kernel object of ``kernel``'s source, written to a module file (``@svod.kernel`` reads source)."""
    path = folder / f"generated_{seed}.py"
    path.write_text(kernel.source)
    spec = importlib.util.spec_from_file_location(f"generated_{seed}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"generated_{seed}")


def outcome(kernel: Kernel, compiled: Any, device: Device, args: Sequence[np.ndarray]) -> str:
    """What ``device`` did with the kernel, against plain Python: ``agree``, ``refused: ...`` (a refusal that is
    right, or a limit svod states), ``race-free refused`` (a refusal of a kernel that does not race),
    ``float64 computed as float32`` (a device without float64: a difference the README states), ``loop
    variables computed as int32`` (a device of 32-bit indices: one docs/devices.md states), or
    ``WRONG: ...``."""
    try:
        want: list[Any] | None = run_as_python(compiled, *args)
        raised = None
    except OverflowError:
        return "Python overflows"  # NumPy refuses a Python int its dtype cannot hold; svod's wraps
    except Exception as err:  # Python's own IndexError (or an error the kernel's Python makes)
        want, raised = None, err
    got = [a.copy() for a in args]
    try:
        compiled(*got, device=device)
    except IndexOutOfBoundsError as err:
        return "refused: out of bounds" if raised is not None else f"WRONG: {err} where Python computed"
    except KernelSyntaxError:
        return "refused: construct"
    except RaceError:
        return "refused: race" if kernel.racy else "race-free refused"
    except SvodError as err:
        if "internal error" in err.detail or err.stage == "lower":
            return f"WRONG: {err}"
        return "refused: out of bounds" if raised is not None else "refused: device limit"
    if raised is not None:
        return f"WRONG: computed where Python raised {type(raised).__name__}"
    assert want is not None
    for expected, actual in zip(want, got, strict=True):
        if expected.dtype.kind == "f":
            tolerance = 1e-4 if expected.dtype == np.float32 else 1e-9
            same = np.isclose(actual, expected, rtol=tolerance, atol=tolerance, equal_nan=True)
        else:
            same = actual == expected
        if not np.all(same):
            if _narrows_float64(compiled, args, device):
                return "float64 computed as float32"  # the device has no float64 (README); Python's is exact
            if _narrows_indices(compiled, args, device):
                return "loop variables computed as int32"  # its indices' integer (docs/devices.md)
            k = int(np.flatnonzero(~same)[0])
            return f"WRONG: element {k} is {actual.reshape(-1)[k]!r}, Python {expected.reshape(-1)[k]!r}"
    return "agree"


def _narrows_float64(compiled: Any, args: Sequence[np.ndarray], device: Device) -> bool:
    """Whether ``device`` has no float64 and the kernel computes float64 values on a host that has: it
    computes them in float32 there, as the README says, and a floor or a maximum of such values may then
    differ from Python's by far more than rounding."""
    if svod.dtypes.float64 in device.caps.element_dtypes:
        return False
    return any(u.dtype == svod.dtypes.float64 for u in compiled.build(*args).toposort())


def _narrows_indices(compiled: Any, args: Sequence[np.ndarray], device: Device) -> bool:
    """Whether ``device``'s indices are 32 bits and the kernel computes int64 values from its loop variables or
    sizes on a host of 64-bit ones: the device computes those in int32, its indices' integer, as docs/devices.md
    says, where they may wrap. (An int64 the kernel asks for, ``svod.int64(x)``, is int64 on every device: the
    device computes it exactly or refuses it.)"""
    if device.caps.index_bits > 32:
        return False
    return _int64_values(compiled.bind(*args, device=device).ast) < _int64_values(compiled.build(*args))


def _int64_values(ast: Any) -> int:
    return sum(u.dtype == svod.dtypes.int64 for u in ast.toposort())


def sweep(count: int, devices: Sequence[Device], first: int = 0, exits: bool = False,
          lanes: bool = False, cells: bool = False) -> Counter[str]:
    """Outcomes of ``count`` kernels (seeds from ``first``; with ``while``, ``break`` and ``continue`` where
    ``exits``; work items along the arrays' last axis where ``lanes``; the body once per column of a row where
    ``cells``) on each of ``devices``, counted by class; every wrong answer is printed with its kernel."""
    tally: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(first, first + count):
            kernel = generate(seed, exits, lanes, cells)
            compiled = load(kernel, Path(folder), seed)
            args = arguments(kernel, seed)
            for device in devices:
                result = outcome(kernel, compiled, device, args)
                tally[result if not result.startswith("WRONG") else "WRONG"] += 1
                if result.startswith("WRONG"):
                    print(f"seed {seed} on {device.device}: {result}\n{textwrap.indent(kernel.source, '    ')}")
    return tally


def main(argv: Sequence[str]) -> None:
    """``COUNT [DEVICE ...] [--first SEED] [--exits] [--lanes] [--cells]``."""
    args = list(argv)
    exits, lanes, cells = "--exits" in args, "--lanes" in args, "--cells" in args
    args = [a for a in args if a not in ("--exits", "--lanes", "--cells")]
    first = 0
    if "--first" in args:
        at = args.index("--first")
        first = int(args[at + 1])
        del args[at:at + 2]
    count = int(args[0]) if args else 200
    names = args[1:] or ["CPU", "PYTHON", "CL:0", "WEBGPU:0"]
    devices = [svod.get_device(n) for n in names]
    tally = sweep(count, devices, first, exits, lanes, cells)
    for name, n in sorted(tally.items()):
        print(f"{name:28s} {n}")


if __name__ == "__main__":
    main(sys.argv[1:])
