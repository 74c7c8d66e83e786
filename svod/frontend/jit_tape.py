"""An ``@svod.jit`` call inside a ``svod.Tape`` block: the function run as the kernel calls its phases are, each
recorded on the tape and so differentiated by its kernel's adjoint (``svod.frontend.adjoint``).

::

    @svod.jit                                      on a tape, one call of f(x, w, steps=2):
    def f(x, w, steps):
        y = np.zeros_like(x)                       y made by NumPy on the host (a constant to the tape)
        for t in range(steps):                     the loop run on the host, turn by turn:
            for i in svod.prange(x.shape[0]):          f_5(y, x, w, t)      a recorded kernel call
                y[i] += w[i] * x[i]
        loss = np.zeros(1)                         loss made on the host
        for i in svod.prange(y.shape[0]):          f_9(loss, y)             a recorded kernel call
            svod.atomic_add(loss, 0, y[i] * y[i])
        return loss                                the host's array, which f_9 wrote

A phase's kernel is the plan's (its statements and the definitions they read, as ``jit_plans.Builder`` makes
it), called on the caller's arrays; the values are those of the plan's run, but for the order in which a reduction
into a scalar adds (one work item's loop here, which the plan may split over threads). An array statement is the loops
svod rewrites it into to keep NumPy's meaning (``svod.frontend.arrays``), recorded as the phases they are:
``y = x * 2.0`` a ``prange`` over y's elements; ``s = np.sum(y)``, sequential code, the one work item of a
``svod.prange(1)``; ``z = np.exp(x) / np.sum(np.exp(x))`` that one work item's sum, then a ``prange`` over z's
elements that reads it (``jit_tape_hoist``), not a sum in each; ``x @ w`` a ``prange`` whose work items each sum
a row in a loop into an array of its own, a matmul whose adjoint is matmuls (``jit_tape_gemm``), then the rest.
A float max or min keeps the float that wins (``jit_tape_keys``). A scalar a phase
computes that another reads (or the function returns) passes between kernels in a one-element array of the
host's, which a phase reads into a local inside its loop and stores at its end; a returned scalar comes back as
that array, the loss ``svod.grad`` takes. What the host cannot run as such calls, or the adjoint would not see,
is refused with ``GradientError`` at the line before anything runs: an ``if``, ``while``, ``break`` or early
``return`` around phases (their outcome is the data's), a sort, and a returned prefix; what a phase's adjoint
does not take is refused by it, an array statement's in the user's words.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import heapq
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from svod.device import Device
from svod.dtype import dtypes
from svod.errors import GradientError, SvodError
from svod.frontend import pylang
from svod.frontend.binding import values_key
from svod.frontend.jit_plans import Variant
from svod.frontend.jit_tape_gemm import gemm_split
from svod.frontend.jit_tape_hoist import hoisted
from svod.frontend.jit_tape_keys import float_reductions
from svod.frontend.jit_tape_reuse import Reuse, changed_by, form, written_once
from svod.frontend.names import loaded, needs, renamed, stored
from svod.frontend.nodes import assign, code, constant, copied, for_loop, load, placed, subscript, walk
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
    carried,
    inner_items,
    scalar_type,
    stores_elements,
)
from svod.frontend.pykernel import Kernel
from svod.frontend.source import Source
from svod.frontend.temporaries import Temporary
from svod.runtime.taping import Recorder

_UNTAPED: dict[type, tuple[str, str]] = {
    Branch: ("an if around svod.prange loops (the loops it runs depend on the data)",
             "compute both sides into arrays in one svod.prange loop and choose element by element "
             "(a if c else b), or call the function's parts outside the jit function"),
    Repeat: ("a while loop around svod.prange loops (its number of turns depends on the data)",
             "a for loop over range(...) of integer arguments"),
    Ordering: ("a sort, a median or a quantile", "compute it outside the tape's block"),
    Factoring: ("a np.linalg factorisation", "compute it outside the tape's block"),
}
"""The items of a plan a tape does not record: what each is, and what to change."""


_OWN = re.compile(r"_svod_[a-z][0-9]")
"""The names svod's rewriting of array statements gives values of its own, as the adjoint names its own."""


def refusal(source: Source, name: str, node: ast.AST, what: str, change: str) -> GradientError:
    """``GradientError`` for ``node`` of jit function ``name``: its file and line, the construct, what to change."""
    line = getattr(node, "lineno", source.node.lineno)
    return GradientError(f"{source.file}:{line}: {what} in the @svod.jit function {name}: a tape records a jit "
                         f"function's svod.prange loops as kernel calls and differentiates nothing else; {change}",
                         kernel=name, stage="gradient", value=code(node, 80))


class TapedCall:
    """One call of a jit function run on a tape: the host runs its definitions, temporaries and loops over
    ``range``; the tape records each ``prange`` phase as the call of its kernel (kept across calls in
    ``kernels``, so that its adjoint is made once)."""

    def __init__(self, name: str, fn: Any, variant: Variant, arguments: Mapping[str, Any],
                 kernels: dict[str, Kernel]) -> None:
        self.name = name
        self.fn = fn
        self.memo = variant.taped
        """What calls of this variant derive once (``Variant.taped``): each fact keyed by the rest of what it
        depends on; the syntax trees it holds are the variant's own or made for it, so their identities stay."""
        taped: tuple[Variant, dict[str, np.dtype], frozenset[str]] | None = self.memo.get("variant")
        if taped is None:
            taped = self.taped(variant)
        self.variant, self.declared, scalars = taped
        self.source = self.variant.source
        self.kernels = kernels
        self.args = {parameter: arguments[parameter] for parameter in variant.parameters}
        self.host: dict[str, Any] = dict(self.args)
        """What the host knows: the arguments, the temporaries, the definitions and the loops' variables."""
        self.arrays: dict[str, np.ndarray] = {n: a for n, a in self.args.items() if isinstance(a, np.ndarray)}
        self.outer = dict(self.derived(("outer",), self.source.outer_names))  # (a copy: eval adds to it)
        self.definitions: list[Definition] = []
        """The definitions run so far, in order (a loop's turn runs its own again)."""
        self.defined: dict[str, list[int]] = {}
        """Each name's positions in ``definitions``."""
        self.ranges: dict[str, tuple[int, int]] = {}
        """The values each enclosing loop gives its variable (its phases' bounds for it, as the plan's)."""
        self.wide = True
        """Whether the device holds float64 (``run``)."""
        self.scalars = set(scalars)
        """The scalars phases compute that other parts read or the function returns (``phases.carried``), and
        those one line of sequential code computes for another (``_crossing``): each lives in a one-element
        array of the host's between kernels, ``_svod_<name>`` (``cell``)."""
        self.reuse = Reuse(self.derived(("once",), lambda: written_once(self.variant.structure.items)))
        """The phases of this call whose arrays a later phase of the same form and inputs reads instead."""

    def taped(self, variant: Variant) -> tuple[Variant, dict[str, np.dtype], frozenset[str]]:
        """``variant`` as a tape records it (its float max and min as the adjoint sees them: ``jit_tape_keys``),
        the scalars svod's rewriting declares, and those carried between kernels; kept in ``memo`` once the
        checks pass (a refused function is refused again at each call)."""
        rewritten = float_reductions(variant.source.node)
        if rewritten is not None:
            source = dataclasses.replace(variant.source, node=rewritten)
            reader = Reader(source, self.name)
            variant = dataclasses.replace(variant, source=source, reader=reader, structure=reader.structure())
        self.source = variant.source
        lengths = variant.structure.lengths
        if lengths:
            raise self.refuse(self.source.node.body[-1], f"a return of {next(iter(lengths))}[:k]",
                              "return the whole array, and its length as an array a kernel writes")
        self.check(variant.structure.items)
        turn = next(iter(variant.structure.turns.values()), None)
        if turn is not None:
            raise self.refuse(turn.loop, f"{turn.name}, assigned only inside a loop and read after it (line "
                              f"{turn.line})", "assign it before the loop")
        scalars = carried(variant.structure, variant.reader) | _crossing(variant.structure.items, variant.reader)
        taped = self.memo["variant"] = (variant, _declared(variant.source.node), frozenset(scalars))
        return taped

    # ---- what a tape records ----------------------------------------------------------------------------

    def refuse(self, node: ast.AST, what: str, change: str) -> GradientError:
        return refusal(self.source, self.name, node, what, change)

    def check(self, items: Sequence[Item]) -> None:
        """Refuse, before anything runs, what the tape would not record: the control flow whose course is the
        data's (the phases that compute its tests and flags would be refused in other words)."""
        for item in _flat(items):
            if isinstance(item, (Branch, Repeat, Ordering, Factoring)):
                raise self.refuse(item.statement, *_UNTAPED[type(item)])
            if isinstance(item, PlanLoop) and item.until is not None:
                raise self.refuse(item.statement, "a break or return inside a loop around svod.prange loops (its "
                                  "number of turns depends on the data)", "a loop of a number of turns the "
                                  "arguments give")

    # ---- running ----------------------------------------------------------------------------------------

    def run(self, recorder: Recorder, device: Device) -> Any:
        """Record the call's phases, one jit call's (``Recorder.begin``); return what the function returns."""
        self.wide = dtypes.float64 in device.caps.element_dtypes
        structure = self.variant.structure
        results: list[Any] = []
        recorder.begin(not self.derived(("user code",), lambda: _user_code(structure.items,
                                                                          self.variant.reader.resolve)))
        try:
            self.items(structure.items, [], recorder, device)
            results = [self.cell(name, recorder) if name in self.scalars else self.arrays[name]
                       if name in self.arrays else self.host[name] for name in structure.returns]
        finally:
            recorder.end(tuple(results))
        if structure.returns_tuple:
            return tuple(results)
        return results[0] if results else None

    def items(self, items: Iterable[Item], loops: list[str], recorder: Recorder, device: Any) -> None:
        for item in items:
            if isinstance(item, Definition):
                try:
                    self.host[item.name] = self.evaluate(item.statement.value)
                except Exception:  # known only in kernels (it reads an element): its kernels compute it
                    self.host.pop(item.name, None)
                if item.name in self.scalars:  # its cell: written by a kernel, as what it reads may carry derivatives
                    self.phase([item.statement], loops, recorder, device)
                    continue
                self.defined.setdefault(item.name, []).append(len(self.definitions))
                self.definitions.append(item)
            elif isinstance(item, Temporary):
                self.temporary(item, loops, recorder, device)
            elif isinstance(item, PlanLoop):
                self.loop(item, loops, recorder, device)
            elif isinstance(item, Phase):
                self.phase(item.statements, loops, recorder, device)

    def temporary(self, item: Temporary, loops: list[str], recorder: Recorder, device: Any) -> None:
        """Make the array ``item`` makes, the tape's own (``Recorder.made``), one value throughout as it is made:
        of ``np.empty``, zeros; of ``np.zeros``, ``np.ones`` and ``np.full`` of a number, that number. Any other
        fill is computed where the statement stands by a kernel (``Temporary.filling``) as the plan without a
        tape computes it: a fill that build refuses is refused here at the same line, and one it computes
        (reading an element, a scalar the kernels compute) is recorded, its derivative taken."""
        try:
            made = self.evaluate(item.call)
        except Exception as err:  # as the plan without a tape refuses it: an SvodError at the line
            raise item.unmade(self.source, self.name, err) from err
        self.arrays[item.name] = self.host[item.name] = made
        if not isinstance(made, np.ndarray):
            return
        fill = item.fill
        if not isinstance(fill, ast.Constant):
            made = np.zeros(made.shape, made.dtype, order="F" if _fortran(made) else "C")
            self.arrays[item.name] = self.host[item.name] = made
        recorder.made(made, True)
        self.reuse.made(item.name, made, fill is None or isinstance(fill, ast.Constant))
        if fill is not None and not isinstance(fill, ast.Constant):
            self.phase(item.filling(made.ndim), loops, recorder, device, filling=True)

    def loop(self, item: PlanLoop, loops: list[str], recorder: Recorder, device: Any) -> None:
        try:
            bounds = [self.evaluate(bound) for bound in item.bounds]
        except Exception as err:
            raise self.refuse(item.statement, f"a loop whose bounds the host cannot compute ({err})",
                              "bound it by integer arguments and shapes") from err
        if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in bounds):
            raise self.refuse(item.statement, "a loop whose bounds are not integers", "bound it by integers")
        turns = range(*(int(b) for b in bounds))
        if turns:
            self.ranges[item.var] = (min(turns[0], turns[-1]), max(turns[0], turns[-1]))
        for value in turns:
            self.host[item.var] = value
            self.items(item.body, [*loops, item.var], recorder, device)

    def phase(self, statements: list[ast.stmt], loops: list[str], recorder: Recorder, device: Any,
              filling: bool = False) -> None:
        """Record the call of the phase's kernel (as ``jit_plans.Builder.phase`` makes it) on the host's arrays.
        The scalars it reads and computes pass in one-element arrays (``cell``), read into locals inside its
        loop, so that the adjoint sees them. Sequential code, and a ``prange`` that reduces into a scalar (a
        sequential loop, as the plan runs it), is the one work item of a ``svod.prange(1)``. ``filling``: the
        phase fills a temporary (``temporary``); where its kernel cannot be made at all, it is refused as the
        plan refuses it, not as a derivative svod does not take."""
        split = self.derived(("hoisted", *statements), lambda: hoisted(statements, self.variant.reader, self.declared))
        if split is not None:  # a reduction to one value inside an array statement: computed once (jit_tape_hoist)
            run, rest, results = split
            self.scalars |= results
            self.phase(run, loops, recorder, device)
            self.phase(rest, loops, recorder, device)
            return
        if self.product(statements, loops, recorder, device):
            return
        scalars = frozenset(self.scalars)
        statements, parallel, lines, outgoing, writes = self.derived(("shape", scalars, *statements),
                                                                     lambda: self.shape(statements, scalars))
        if not parallel and len(lines) > 1:  # one kernel a line: its adjoint reads what earlier lines stored
            for line in lines:
                self.phase(line, loops, recorder, device)
            return
        if not parallel and not outgoing and not writes:
            for name in stored(statements):  # (computed for none of the function's other parts)
                self.host.pop(name, None)
            return
        definitions = self.preamble(statements, loops)
        key = ("kernel", scalars, tuple(definitions), tuple(self.args), tuple(self.arrays), tuple(loops),
               tuple(sorted(self.ranges.items())), *statements)
        kernel, parameters, incoming, own, body = self.derived(
            key, lambda: self.made(statements, definitions, outgoing, parallel, loops))
        values = {**self.arrays, **{f"_svod_{name}": self.cell(name, recorder) for name in incoming}}
        arguments = tuple(self.host[name] if name in loops else values.get(name, self.args.get(name))
                          for name in parameters)
        changes = self.derived(("written", *key), lambda: changed_by(body, parameters))
        reused = self.reuse.key(self.derived(("form", *key), lambda: form(body)), parameters, arguments, changes)
        found = self.reuse.found(reused, parameters, arguments)
        if found is not None:  # computed by an earlier phase on the same arrays: read its arrays
            self.arrays.update(found)
            self.host.update(found)
            return
        try:
            recorder.record(kernel, arguments, device)
        except SvodError as err:
            if filling:  # the plan's refusal, in its words, where it refuses the fill too
                if isinstance(err, GradientError):
                    kernel.build(*arguments)
                raise
            if own:  # an array statement's loops
                self.explain(err, own, body)
            raise
        self.reuse.wrote(reused, parameters, arguments, changes)
        for name in outgoing:
            self.host[name] = self.cell(name, recorder)[0]

    def product(self, statements: list[ast.stmt], loops: list[str], recorder: Recorder, device: Any) -> bool:
        """Record the phase's first matrix product as a phase of its own, into a new temporary array, then the
        rest (``jit_tape_gemm``); whether it has one whose lengths the host knows."""
        split = self.derived(("gemm", *statements), lambda: gemm_split(statements, self.variant.reader.is_prange))
        if split is None:
            return False
        try:
            shape = tuple(int(self.evaluate(extent)) for extent in split.extents)
        except Exception:  # lengths known only in kernels: the phase stays whole
            return False
        dtype = np.dtype(split.dtype)
        made = np.zeros(shape, np.float32 if dtype == np.float64 and not self.wide else dtype)
        recorder.made(made, True)
        self.reuse.made(split.temporary, made, True)
        self.arrays[split.temporary] = self.host[split.temporary] = made
        self.phase(split.product, loops, recorder, device)
        self.phase(split.rest, loops, recorder, device)
        return True

    def derived(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """``make()``, once for this variant and ``key`` (``memo``): the key holds every input ``make`` reads
        besides the variant (syntax trees compare by identity)."""
        try:
            return self.memo[key]
        except KeyError:
            found = self.memo[key] = make()
            return found

    def shape(self, statements: list[ast.stmt], scalars: frozenset[str]) -> tuple[
            list[ast.stmt], bool, list[list[ast.stmt]], list[str], bool]:
        """The phase's statements as its kernel runs them (a ``prange`` that reduces into a scalar a sequential
        loop, as the plan runs it), whether it is parallel, its lines, the carried ``scalars`` it computes, and
        whether it stores elements."""
        reader = self.variant.reader
        reduced = set().union(*(reader.reductions(stmt) for stmt in statements))
        if reduced:
            statements = [reader.sequential(stmt) if reader.is_prange(stmt) else stmt for stmt in statements]
        parallel = any(reader.is_prange(stmt) for stmt in statements)
        outgoing = sorted((reduced | (set() if parallel else stored(statements))) & scalars)
        return statements, parallel, _by_line(statements), outgoing, stores_elements(statements, reader)

    def made(self, statements: list[ast.stmt], definitions: list[ast.stmt], outgoing: list[str], parallel: bool,
             loops: list[str]) -> tuple[Kernel, list[str], list[str], dict[str, str], list[ast.stmt]]:
        """The phase's kernel, the names of the values it is called on, the carried scalars it reads, the names
        svod's rewriting gave as the kernel calls them, and the kernel's body (for ``explain``)."""
        incoming = sorted(((needs([*definitions, *statements]) | set(outgoing)) & self.scalars) - set(loops))
        body = self.body(statements, definitions, incoming, outgoing, parallel)
        used = set(loaded(body)) - stored(body)
        parameters = [name for name in self.args if name in used]
        parameters += [name for name in self.arrays if name in used and name not in parameters]
        parameters += [f"_svod_{name}" for name in incoming if f"_svod_{name}" not in parameters]
        parameters += [name for name in loops if name in used]
        own = {n: f"_svod_t_{n.removeprefix('_svod_')}" for n in [*loaded(body), *stored(body), *parameters]
               if _OWN.match(n)}
        kernel = self.kernel([renamed(stmt, own) for stmt in body], [own.get(p, p) for p in parameters],
                             statements[0])
        return kernel, parameters, incoming, own, body

    def body(self, statements: list[ast.stmt], definitions: list[ast.stmt], incoming: list[str],
             outgoing: list[str], parallel: bool) -> list[ast.stmt]:
        """The phase's kernel's body: the definitions it reads, then its loop, which reads the scalars
        ``incoming`` from their cells first (and the definitions that read them after), and stores those
        ``outgoing`` last; sequential code the body of a ``svod.prange(1)``, whose one work item reads and stores
        a cell's element as its own."""
        inside = _reading(definitions, set(incoming))
        before = [d for d in definitions if d not in inside]
        single = not (parallel and len(statements) == 1 and isinstance(statements[0], ast.For))
        at = load("_svod_one") if single else constant(0)
        loads = placed([assign(name, subscript(f"_svod_{name}", [at])) for name in incoming], statements[0])
        if not single:
            return [*before, _within(cast(ast.For, statements[0]), [*loads, *inside], self.variant.reader)]
        stores = placed([assign(subscript(f"_svod_{name}", [at], ast.Store()), load(name)) for name in outgoing],
                        statements[-1])
        one = for_loop("_svod_one", ast.Call(load("_svod_prange"), [constant(1)], []),
                       [*loads, *inside, *statements, *stores])
        return [*before, *placed([one], statements[0])]

    def explain(self, err: SvodError, own: Mapping[str, str], body: list[ast.stmt]) -> None:
        """``err``, raised by an array statement's loops, in the user's words (``own``: the names svod's rewriting
        gave, as the kernel calls them), and what to change."""
        helpers = {n: f"np.{n.removeprefix('_svod_m_')}" for n in loaded(body) if n.startswith("_svod_m_")}
        err.call_by({}, {**helpers, **{new: self.source.described.get(old, "a value svod computes")
                                       for old, new in own.items()}})
        err.advise("the line is an array statement, which svod rewrote as loops that a tape differentiates as a "
                   "kernel: write it as svod.prange loops of such statements, or compute it outside the tape's block")

    def cell(self, name: str, recorder: Recorder) -> np.ndarray:
        """The one-element array a carried scalar lives in between kernels: of the dtype svod's rewriting
        declares it (``s = _svod_np.float32(0)``), else of the value the host knows of it (its definition's),
        else float64; a float64 as float32 on a device without float64, as the plan holds a Python float."""
        found = self.arrays.get(f"_svod_{name}")
        if found is None:
            known = np.asarray(self.host.get(name, 0.0))
            dtype = self.declared.get(name, known.dtype if known.dtype.kind in "biuf" else np.dtype(np.float64))
            if dtype == np.float64 and not self.wide:
                dtype = np.dtype(np.float32)
            found = self.arrays[f"_svod_{name}"] = np.zeros(1, dtype)
            if name in self.host:
                found[0] = known
            recorder.made(found, True)
        return found

    def kernel(self, body: list[ast.stmt], parameters: list[str], first: ast.stmt) -> Kernel:
        name = f"{self.name}_{first.lineno}"
        node = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in parameters],
                                                               kwonlyargs=[], kw_defaults=[], defaults=[]),
                               body=body, decorator_list=[], returns=None)
        ast.copy_location(node, first)
        ast.fix_missing_locations(node)
        bounds = {p: self.ranges[p] for p in parameters if p in self.ranges}
        key = repr((ast.dump(node, include_attributes=True), sorted(bounds.items()),
                    values_key(self.source.names, loaded([node]))))
        found = self.kernels.get(key)
        if found is None:
            names = {**self.source.names, "_svod_prange": pylang.prange}
            found = self.kernels[key] = Kernel(self.fn, name=name, source=Source(node, self.source.file, names),
                                               parameters=parameters, bounds=bounds, static_shapes=True)
        return found

    def preamble(self, statements: list[ast.stmt], loops: list[str]) -> list[ast.stmt]:
        """The definitions a phase reads (and those they read), in the order they stand: of each name, the last
        run before the latest definition chosen that reads it. The reads are taken latest first, each looked up
        among its name's positions, so that a loop's many turns cost no scan of every definition they ran."""
        first = self.derived(("reads", *statements), lambda: sorted(set(loaded(statements)) - stored(statements)))
        reads = [(-len(self.definitions), name) for name in first if name not in loops]  # (the turn's value)
        heapq.heapify(reads)
        chosen: dict[str, int] = {}
        while reads:
            bound, name = heapq.heappop(reads)
            if name in chosen:
                continue
            positions = self.defined.get(name, [])
            last = bisect.bisect_left(positions, -bound) - 1
            chosen[name] = positions[last] if last >= 0 else -1  # (-1: no definition; the name is another's)
            if last >= 0:
                value = self.definitions[positions[last]].statement.value
                for read in self.derived(("loaded", value), functools.partial(loaded, [value])):
                    if read not in loops:
                        heapq.heappush(reads, (-positions[last], read))
        return [self.definitions[position].statement for position in sorted(chosen.values()) if position >= 0]

    def evaluate(self, node: ast.expr) -> Any:
        compiled = self.derived(("compiled", node), lambda: compile(ast.fix_missing_locations(ast.Expression(node)),
                                                                     self.source.file, "eval"))
        return eval(compiled, self.outer, dict(self.host))  # the user's code


def _user_code(items: Iterable[Item], resolve: Callable[[ast.expr], Any]) -> bool:
    """Whether the host may run code of the caller's as it runs the call: a temporary's shape or fill, or a
    loop's bounds, calling anything but the few functions a definition may call and NumPy's scalar types; or
    an item holding others that this does not read."""
    for item in items:
        if isinstance(item, PlanLoop):
            nodes: list[ast.expr] = list(item.bounds)
            if _user_code(item.body, resolve):
                return True
        elif isinstance(item, Temporary):
            nodes = [*item.call.args, *(keyword.value for keyword in item.call.keywords)]
        elif isinstance(item, (Phase, Definition)):  # (a definition calls those functions only: phases.pure)
            continue
        else:
            return True
        for node in nodes:
            for inner in walk(node):
                if isinstance(inner, ast.Call) and not _host_call(resolve(inner.func)):
                    return True
    return False


def _host_call(function: Any) -> bool:
    return function in (len, min, max, abs, int, float, round, np.dtype) or scalar_type(function)


def _fortran(array: np.ndarray) -> bool:
    """Whether ``array`` is laid out column first (and not also row first)."""
    return bool(array.flags.f_contiguous and not array.flags.c_contiguous)


def _declared(function: ast.FunctionDef) -> dict[str, np.dtype]:
    """The scalars svod's rewriting of array statements starts as a NumPy scalar (``s = _svod_np.float32(0)``),
    with its dtype: the first such start of each."""
    found: dict[str, np.dtype] = {}
    for node in walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
                and isinstance(node.value.func.value, ast.Name) and node.value.func.value.id == "_svod_np" \
                and isinstance(getattr(np, node.value.func.attr, None), type) \
                and issubclass(getattr(np, node.value.func.attr), np.number | np.bool_):
            found.setdefault(node.targets[0].id, np.dtype(getattr(np, node.value.func.attr)))
    return found


def _crossing(items: Sequence[Item], reader: Reader) -> set[str]:
    """The scalars a line of sequential code computes that a later line of the same phase reads: a tape records
    one kernel a line (``TapedCall.phase``), so they pass between kernels."""
    found: set[str] = set()
    for item in _flat(items):
        if isinstance(item, Phase) and not reader.parallel(item):
            lines = _by_line(item.statements)
            for k, line in enumerate(lines):
                found |= stored(line) & needs([stmt for later in lines[k + 1:] for stmt in later])
    return found


def _by_line(statements: list[ast.stmt]) -> list[list[ast.stmt]]:
    """``statements`` in runs of one line each: an array statement's loops stand at its line."""
    runs: list[list[ast.stmt]] = []
    for stmt in statements:
        if runs and runs[-1][0].lineno == stmt.lineno:
            runs[-1].append(stmt)
        else:
            runs.append([stmt])
    return runs


def _reading(definitions: list[ast.stmt], names: set[str]) -> list[ast.stmt]:
    """The definitions that read ``names``, or a definition before them that does: computed after the names are
    read from their cells."""
    found, reached = [], set(names)
    for definition in definitions:
        if needs([definition]) & reached:
            found.append(definition)
            reached |= stored([definition])
    return found


def _within(nest: ast.For, statements: list[ast.stmt], reader: Reader) -> ast.For:
    """``nest`` (a ``prange`` loop, or a nest of them) with ``statements`` first in its innermost body."""
    made = copied(nest)
    inner = made
    while len(inner.body) == 1 and reader.is_prange(inner.body[0]):
        inner = cast(ast.For, inner.body[0])
    inner.body = [*statements, *inner.body]
    return made


def _flat(items: Iterable[Item]) -> list[Item]:
    """``items`` and those their loops and branches hold, in the order they stand."""
    found: list[Item] = []
    for item in items:
        found.append(item)
        found += _flat(inner_items(item))
    return found


def _body(stmt: ast.stmt) -> list[ast.stmt]:
    return [*getattr(stmt, "body", []), *getattr(stmt, "orelse", [])] if isinstance(
        stmt, (ast.For, ast.While, ast.If, ast.With)) else []


def _statements(body: Iterable[ast.stmt]) -> list[ast.stmt]:
    """Every statement of ``body``, nested ones after the statement holding them."""
    found: list[ast.stmt] = []
    for stmt in body:
        found.append(stmt)
        found += _statements(_body(stmt))
    return found


__all__ = ["TapedCall", "refusal"]
