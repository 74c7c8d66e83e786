"""``np.random`` in a kernel: each call a draw of svod's counter-based generator (``svod.random``), made where
the call stands.

Where a draw is made (its ``Place``: key, launch, ordinal, stream, element) is held in five hidden locals
(``HIDDEN``), named so that no Python name can be one, which the translation treats as it treats any local:
an ``if`` makes each a ``where`` of its branches' values, a sequential loop that changes one carries it (or,
for the ordinal, computes it from the turn's index where every turn draws as often: ``Loops.carry``), a
``svod.prange`` turn starts each work item's own, and an ``@svod.func`` call passes them in and out. So the
ordinal of a draw is the number of draws before it in its work item, as plain Python counts them.

- key, launch: the process generator's (the kernel variables ``svod.random.KEY_VARIABLE`` and
  ``LAUNCH_VARIABLE``, which each call sets), until ``np.random.seed(s)`` makes them ``s`` and 0;
- ordinal: 0 at the start of the launch and of each work item, and after a seed; each draw adds one;
- nests: the nests the launch has opened (0 again after a seed in serial code), counted where each opens;
- stream: 0 in serial code; in a nest's work items, the count of nests with it (1 for the first).

The nest count is kept apart from the serial ordinal because a nest's work items read it: a local that serial
code carries through a loop (as a ``while`` that draws carries the ordinal) is a register of the one work item
that runs the serial code, which the lowering does not share with the nest's other work items (threads),
while nests never open inside a loop, so their count is never carried.

The element is no local: it is the linear index of the ``svod.prange`` ranges around the draw.
"""

from __future__ import annotations

import ast
from typing import Any

from svod.dtype import dtypes
from svod.frontend.builder import KernelBuilder
from svod.frontend.complex_values import Complexes
from svod.frontend.draws import FUNCTIONS, Place, draw
from svod.frontend.nodes import code
from svod.frontend.promotion import HOST, Platform
from svod.frontend.source import Source
from svod.frontend.values import RandomFunction, describe, is_number
from svod.ir import AxisKind, Ops, UOp
from svod.random import KEY_VARIABLE, LAUNCH_VARIABLE, LIMIT

KEY, LAUNCH, ORDINAL, STREAM = "np.random key", "np.random launch", "np.random ordinal", "np.random stream"
NESTS = "np.random nests"
HIDDEN = (KEY, LAUNCH, ORDINAL, STREAM, NESTS)
"""The hidden locals of the generator's place (not identifiers: no name of the source is one of them)."""


class Randoms(Complexes):
    """The draws of ``np.random`` calls, and the hidden locals that say where each is made."""

    def __init__(self, source: Source, name: str, builder: KernelBuilder, arguments: dict[str, Any],
                 platform: Platform = HOST, numbers: frozenset[UOp] = frozenset()) -> None:
        super().__init__(source, name, builder, arguments, platform, numbers)
        self.env[KEY] = builder.var(KEY_VARIABLE, 0, LIMIT - 1, dtypes.uint32)
        self.env[LAUNCH] = builder.var(LAUNCH_VARIABLE, 0, LIMIT - 1, dtypes.uint32)
        self.env[ORDINAL] = self.env[STREAM] = self.env[NESTS] = UOp.const(dtypes.uint32, 0)
        self.rectangles: set[UOp] = set()
        """The parallel ranges whose bound depends on an enclosing one (``Loops.rectangle``)."""
        self.drawing_levels: dict[UOp, UOp] = {}
        """Per nest (its outermost parallel range), the innermost parallel range its draws are made under."""
        self.process_draws = False
        """Whether a draw may take the process generator's key or launch: each launch then takes its own. (A
        kernel may hold those variables without drawing from them: a loop that seeds carries the key it
        overwrites.)"""
        self.resumed = False
        """Whether a jitted function's phase resumed the state its plan carries (``plan_call``): its draws then
        take the key and launch the plan gives each run, not each launch's."""

    def hidden_locals(self) -> dict[str, Any]:
        return {name: self.env[name] for name in HIDDEN if name in self.env}

    # ---- names ------------------------------------------------------------------------------------------

    def random_function(self, node: ast.AST, name: str) -> RandomFunction:
        """``np.random.<name>``, where a kernel has it."""
        if name not in FUNCTIONS:
            raise self.refuse(node, f"np.random.{name} is not supported in a kernel; it has "
                                    f"{', '.join(sorted(FUNCTIONS))} (one number per call)")
        return RandomFunction(name)

    # ---- calls ------------------------------------------------------------------------------------------

    def random_call(self, node: ast.Call, callee: RandomFunction, args: list[Any], keywords: dict[str, Any]) -> Any:
        """The value of a call of ``np.random.<name>`` with these arguments (None for ``seed``)."""
        name = callee.name
        if callee.plan:
            return self.plan_call(node, name, args)
        values = self._bound(node, name, args, keywords)
        if name == "seed":
            self._seed(node, values[0])
            return None
        arguments = self._arguments(node, name, values)
        place = self.place(node)
        if not self.resumed:
            self.process_draws |= any(u.op is Ops.LOAD or (u.op is Ops.DEFINE_VAR and u.arg[0] in (
                KEY_VARIABLE, LAUNCH_VARIABLE)) for u in (*place.key.toposort(), *place.launch.toposort()))
        value = draw(name, place, arguments, self.platform.real, self.platform.integer,
                     self.platform.index_bits > 32)
        self.env[ORDINAL] = place.ordinal + 1
        return value

    def _arguments(self, node: ast.AST, name: str, values: list[Any]) -> list[UOp]:
        """A draw's arguments (``FUNCTIONS``' order, defaults filled in) as ``draw`` takes them: of the
        kernel's integer or float dtype; ``randint(high)`` from 0, a constant span checked."""
        if name != "randint":
            return [self._real(node, name, v) for v in values]
        low, high = (0, values[0]) if values[1] is None else values
        arguments = [self._integer(node, name, v) for v in (low, high)]
        if is_number(low) and is_number(high):
            if not 1 <= high - low <= self._widest():
                raise self.refuse(node, f"np.random.randint({low}, {high}) draws from an empty range or one wider "
                                        "than a kernel draws from (2**32 integers; 2**31 - 1 with 32-bit integers)")
        else:
            self._require_span(node, *arguments)
        return arguments

    def _widest(self) -> int:
        """The most integers a draw spans: 2**32, or 2**31 - 1 where integers are 32 bits, whose ``high - low``
        would wrap at 2**31 and draw ``low`` every time."""
        return LIMIT if self.platform.index_bits > 32 else (LIMIT >> 1) - 1

    def _require_span(self, node: ast.AST, low: UOp, high: UOp) -> None:
        """Make the run fail where bounds the kernel computes span no integer, as NumPy raises ``ValueError: low >=
        high``, or more than a kernel draws from (``draws.bounded`` would give ``low``): requirements
        (``KernelBuilder.require``) that hold where the call is made. Both tests are free of overflow."""
        widest = self._widest()
        call = f"{self.where(node)}: `{code(node, 60)}`"
        tests = ((high <= low, f"{call} draws from an empty range: low >= high (NumPy raises ValueError)"),
                 ((low <= low.dtype.max - widest) & (high > low + widest),
                  f"{call} draws from more than {widest} integers, more than a kernel draws from"))
        for failed, message in tests:
            if failed.op is Ops.CONST and not failed.arg:
                continue
            reached = failed if self.gate is None else self.gate & failed
            self.k.require(reached, message, *self.running(reached))

    # ---- the calls a jitted function's phases make ----------------------------------------------------------

    def plan_call(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        """A call svod wrote into a phase of a jitted function (``svod.frontend.random_arrays``):

        - ``state()``: the generator's state where it stands, (key, launch, nests, ordinal), which the plan
          keeps in its scalars between phases;
        - ``resume(key, launch, nests, ordinal)``: that state again, at the start of a phase's serial code
          (``nests`` the nests opened so far) or of a ``prange`` nest's work item (``nests`` its stream);
        - ``<kind>(key, launch, stream, element, *arguments)``: the draw ``np.random.<kind>(*arguments)`` of
          an array draw's element ``element``: the first draw of that work item of the nest ``stream``."""
        if name == "state":
            return tuple(self.env[hidden] for hidden in (KEY, LAUNCH, NESTS, ORDINAL))
        if name == "resume":
            key, launch, nests, ordinal = (self._word(v) for v in args)
            self.env[KEY], self.env[LAUNCH], self.env[ORDINAL] = key, launch, ordinal
            self.env[STREAM if any(loop.kind is AxisKind.GLOBAL for loop in self.loops) else NESTS] = nests
            self.resumed = True
            return 0
        key, launch, stream = (self._word(v) for v in args[:3])
        element = args[3] if isinstance(args[3], UOp) else UOp.index_const(args[3])
        place = Place(key, launch, UOp.const(dtypes.uint32, 0), element, stream)
        arguments = [] if name == "keys" else self._arguments(node, name, list(args[4:]))
        return draw(name, place, arguments, self.platform.real, self.platform.integer,
                    self.platform.index_bits > 32)

    def _word(self, value: Any) -> UOp:
        """A value of the generator's state as the uint32 it is (its low 32 bits)."""
        if is_number(value):
            return UOp.const(dtypes.uint32, int(value) & (LIMIT - 1))
        return self.cast(value, dtypes.uint32)

    def _bound(self, node: ast.Call, name: str, args: list[Any], keywords: dict[str, Any]) -> list[Any]:
        """The arguments in ``FUNCTIONS``' order, defaults filled in."""
        signature = FUNCTIONS[name]
        names = signature.names
        usage = f"{signature.describe(name)} draws one number in a kernel"
        if "size" in keywords or len(args) > len(names):
            raise self.refuse(node, f"{usage}: the size of an array of draws is not supported here (draw one "
                                    "number per call, in a loop)")
        given = dict(zip(names, args, strict=False))
        for key, value in keywords.items():
            if key not in names or key in given:
                raise self.refuse(node, f"{usage}: it has no argument {key} left to pass")
            given[key] = value
        missing = [p for p in names[:signature.required] if p not in given]
        if missing:
            raise self.refuse(node, f"{usage}: {missing[0]} is missing")
        return [given.get(p, default) for p, default in signature.parameters]

    def _real(self, node: ast.AST, name: str, value: Any) -> UOp:
        if not (is_number(value) or (isinstance(value, UOp) and value.dtype.count == 1)) \
                or isinstance(value, bool) or (isinstance(value, UOp) and value.dtype == dtypes.bool):
            raise self.refuse(node, f"np.random.{name} takes numbers, not {describe(value)}")
        return self.cast(value, self.platform.real)

    def _integer(self, node: ast.AST, name: str, value: Any) -> UOp:
        if isinstance(value, bool) or not ((is_number(value) and isinstance(value, int))
                                           or (isinstance(value, UOp) and value.dtype.is_int)):
            raise self.refuse(node, f"np.random.{name} takes integers, not {describe(value)}")
        return self.cast(value, self.platform.integer)

    def _seed(self, node: ast.AST, value: Any) -> None:
        """``np.random.seed(s)``: the key is ``s`` (a run-time value: its low 32 bits), the launch 0, and the
        stream of the draws that follow starts again (in serial code, the count of nests too)."""
        if is_number(value):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < LIMIT:
                raise self.refuse(node, "np.random.seed takes an int in [0, 2**32)")
            key = UOp.const(dtypes.uint32, value)
        elif isinstance(value, UOp) and value.dtype.is_int:
            key = value.cast(dtypes.uint32)
        else:
            raise self.refuse(node, f"np.random.seed takes an int, not {describe(value)}")
        zero = UOp.const(dtypes.uint32, 0)
        self.env[KEY], self.env[LAUNCH], self.env[ORDINAL] = key, zero, zero
        if not any(loop.kind is AxisKind.GLOBAL for loop in self.loops):
            self.env[NESTS] = zero

    # ---- where a draw is made -----------------------------------------------------------------------------

    def place(self, node: ast.AST) -> Place:
        """The place of a draw made here: the hidden locals, and the work item's linear index in its nest."""
        items = [loop.range for loop in self.loops if loop.kind is AxisKind.GLOBAL]
        element = UOp.index_const(0)
        if items:
            if any(r in self.rectangles for r in items):
                raise self.refuse(node, "a draw inside a svod.prange whose bound depends on an enclosing svod.prange "
                                        "is not supported: its work items have no linear index in a grid; loop over "
                                        "the whole grid and test the bound inside (if j <= i:)")
            level = self.drawing_levels.setdefault(items[0], items[-1])
            if level is not items[-1]:
                raise self.refuse(node, "draws in one svod.prange nest are made under one of its svod.prange loops "
                                        "(one level of work items): here another draws, whose work items' streams "
                                        "would meet these; draw in one svod.prange of the nest only")
            element = items[0]
            for r in items[1:]:
                element = element * r.src[0] + r
        return Place(self.env[KEY], self.env[LAUNCH], self.env[ORDINAL], element, self.env[STREAM])

    def open_nest(self) -> None:
        """A nest opens in serial code: one more nest, whose count is its work items' stream."""
        self.env[NESTS] = self.env[NESTS] + 1

    def open_work_item(self, outermost: bool) -> None:
        """A ``svod.prange`` turn starts: a work item, whose stream is the nest's and whose ordinal starts at 0."""
        if outermost:
            self.env[STREAM] = self.env[NESTS]
        self.env[ORDINAL] = UOp.const(dtypes.uint32, 0)

    def drew_where(self, cond: UOp, before: dict[str, Any], node: ast.AST) -> None:
        """Where ``cond`` holds, the hidden locals are what an expression computed since ``before`` made them;
        elsewhere, ``before`` (Python evaluated that expression only where ``cond`` holds). A draw's value is a
        pure function of its place, so computing it everywhere is harmless: only the ordinal must not count it
        where Python did not draw."""
        for name, value in before.items():
            if self.env[name] is not value:
                self.env[name] = self.select(cond, self.env[name], value, node)

    def random_changed(self, before: dict[str, Any], known: list[str]) -> list[str]:
        """The hidden locals, not among ``known``, whose values differ from ``before``'s."""
        return [n for n in HIDDEN if n not in known and self.env.get(n) is not before.get(n)]


__all__ = ["HIDDEN", "KEY", "LAUNCH", "NESTS", "ORDINAL", "STREAM", "Randoms"]
