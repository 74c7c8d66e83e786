"""The translator's use of ``svod.frontend.accumulations``: which rewriting of a block's statements the names'
values allow. The syntax qualifies a region; here no other name the region uses may reach the memory of an
array it holds an element of or writes (a view made before the region: ``v = out[i]``), an ``if`` on a
Python constant keeps its branch (as ``Translator.branch`` would), and a call in fused loops must be one that
draws nothing."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from svod.errors import SvodError
from svod.frontend import pylang
from svod.frontend.accumulations import (
    fused,
    held,
    in_range_loop,
    interchanged,
    mentions,
    names,
    rebinds_only,
    stored_arrays,
)
from svod.frontend.loops import Loops
from svod.frontend.names import stored
from svod.frontend.values import BUILTINS, ArrayValue, ComplexArray, MathFunction, Undefined, is_number
from svod.ir import UOp
from svod.ir.uop import memory_of

PURE_BUILTINS = ("abs", "min", "max", "float", "int", "bool", "range")
"""The builtins fused loops may call: each computes a value from its arguments alone (``range``: a nested
loop's)."""


class Accumulating(Loops):
    """Regions of a block rewritten so that a sum into an element of an array is a local's reduction."""

    def held_elements(self, body: Sequence[ast.stmt]) -> list[ast.stmt]:
        """``body`` with each array element it uses in a ``range`` loop, at one index it does not change, held
        in a local for the whole block (``accumulations.held``): a block of statements around a sum then
        stores the element once."""
        statements = list(body)
        if not self._first_effects():
            return statements
        for name in stored_arrays(statements):
            if in_range_loop(statements, name):
                statements = self._held(statements, name) or statements
        return statements

    def rewritten(self, body: Sequence[ast.stmt], position: int) -> tuple[list[ast.stmt], int] | None:
        """The statements that run for ``body[position:]``'s first few, and how many they stand for: loops over
        one range fused (after their nests are interchanged, and ``if``s on constants resolved), then each
        element that the loop holds held in a local; None where nothing is rewritten."""
        if not self._first_effects():
            return None
        loop = self._interchanged(body, position, position + 1)
        consumed = 1
        while position + consumed < len(body):
            following = self._constant_branch(body[position + consumed], body[position:position + consumed])
            if following == []:
                consumed += 1  # an if on a false constant: nothing runs
                continue
            if following is None or len(following) != 1:
                break
            end = position + consumed + 1
            second = self._interchanged(body, position, end, following[0])
            joined = fused(loop, second, self._pure)
            if joined is None or not self._apart([joined], stored_arrays([joined])):
                break
            assert isinstance(loop, ast.For) and isinstance(second, ast.For) and isinstance(second.target, ast.Name)
            if second.target != loop.target and not self._unread_after({second.target.id}, body, position, end):
                break  # fused, the second loop's variable would not keep its last turn's value
            loop, consumed = joined, consumed + 1
        if isinstance(loop, ast.For):
            for name in stored_arrays([loop]):
                loop_held = self._held([loop], name)
                if loop_held is not None:
                    return loop_held, consumed
        return ([loop], consumed) if loop is not body[position] else None

    def _first_effects(self) -> bool:
        """Whether a region here may be rewritten: ``range`` names the builtin (the rewritings read ``for ... in
        range(...)`` by its syntax), and the region states the kernel's first effects. A sum held in a local
        after other stores of the kernel (``out[i, c] = bias[c]`` in a loop of its own first) is lowered far
        slower than the loop it replaces, as ``acc`` spelled so is: such a kernel is left as written."""
        return not self.k.effects and "range" not in self.env and "range" not in self.source.names

    def _held(self, region: list[ast.stmt], name: str) -> list[ast.stmt] | None:
        array = self.env.get(name)
        if not isinstance(array, ArrayValue) or not self._apart(region, [name]):
            return None
        return held(region, name, array.dtype, len(array.dims))

    def _interchanged(self, body: Sequence[ast.stmt], start: int, end: int, stmt: ast.stmt | None = None) -> ast.stmt:
        """``stmt`` (by default ``body[start]``, the last of ``body[start:end]``) as ``interchanged`` swaps it, where
        nothing reads the values the nest leaves in its variables and locals: with no turns of one loop, the
        swap leaves them otherwise (``r`` is the last row's in Python even with no columns)."""
        stmt = body[start] if stmt is None else stmt
        swapped = interchanged(stmt)
        if swapped is None or not self._apart([swapped], stored_arrays([swapped])) \
                or not self._unread_after(stored([stmt]), body, start, end):
            return stmt
        return swapped

    def _unread_after(self, variables: set[str], body: Sequence[ast.stmt], start: int, end: int) -> bool:
        """Whether no statement reads a value ``body[start:end]`` leaves in one of ``variables``: none held one
        before, none is named in the function outside ``body[start:]``, and after ``end`` each is named only in
        loops that rebind it (``rebinds_only``)."""
        for name in sorted(variables):
            if not isinstance(self.env.get(name, Undefined(name, "")), Undefined):
                return False
            if mentions(name, self.source.node) != mentions(name, *body[start:]):
                return False
            if not all(rebinds_only(stmt, name) for stmt in body[end:] if name in names(stmt)):
                return False
        return True

    def _apart(self, region: Sequence[ast.stmt], written: Sequence[str]) -> bool:
        """Whether no name ``region`` uses, other than each of the ``written`` arrays itself, reaches its memory."""
        memories = [self._memory(self.env.get(name)) for name in written]
        if any(m is None for m in memories):
            return False
        for other in sorted(names(*region)):
            if other not in written and self._memory(self.env.get(other)) in memories:
                return False
        return True

    @staticmethod
    def _memory(value: object) -> UOp | None:
        if isinstance(value, ComplexArray):
            value = value.parts
        return memory_of(value.buffer.param) if isinstance(value, ArrayValue) else None

    def _constant_branch(self, stmt: ast.stmt, before: Sequence[ast.stmt]) -> list[ast.stmt] | None:
        """The branch an ``if`` on a name holding a Python constant runs (which ``before`` does not assign);
        ``[stmt]`` for any other statement, None for another ``if``."""
        if not isinstance(stmt, ast.If):
            return [stmt]
        test = stmt.test
        if not isinstance(test, ast.Name) or test.id in names(*before):
            return None
        value = self.env.get(test.id)
        return (list(stmt.body) if value else list(stmt.orelse)) if is_number(value) else None

    def _pure(self, call: ast.Call) -> bool:
        """Whether ``call`` computes a value from its arguments alone: a math function, a conversion, a
        builtin of ``PURE_BUILTINS``; not a draw, nor a function of the user's (which may write an array)."""
        if not isinstance(call.func, (ast.Name, ast.Attribute)):
            return False
        try:
            callee = self.expr(call.func)
        except SvodError:
            return False
        return isinstance(callee, (MathFunction, pylang.Cast)) or \
            any(callee is BUILTINS[name] for name in PURE_BUILTINS)
