"""What the translation of one kernel holds while it walks the source, and how it refuses what a kernel may
not say (``refuse``, ``unsupported``): the base of the translator's parts, each a module built on the one
before it (``arithmetic`` <- ``memory`` <- ``randoms`` <- ``expressions`` <- ``loops`` <- ``translate``'s
statements).

Only ``block``, the statements, comes from the top part: a loop's body and an inlined ``@svod.func`` are
statements again."""

from __future__ import annotations

import ast
import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from svod.errors import KernelSyntaxError
from svod.frontend import pylang
from svod.frontend.builder import KernelBuilder
from svod.frontend.nodes import code
from svod.frontend.promotion import HOST, Platform
from svod.frontend.source import Located, Source, size_names
from svod.frontend.values import ArrayValue
from svod.ir import AxisKind, UOp

REFUSED = {
    ast.Try: "try", ast.With: "with", ast.AsyncWith: "async with", ast.AsyncFor: "async for",
    ast.Lambda: "lambda", ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression", ast.List: "a list",
    ast.Dict: "a dict", ast.Set: "a set",
    ast.FunctionDef: "a nested function (use @svod.func at module level)", ast.AsyncFunctionDef: "an async function",
    ast.ClassDef: "a class", ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Delete: "del",
    ast.Raise: "raise", ast.Assert: "assert", ast.Import: "import", ast.ImportFrom: "import",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from",
    ast.NamedExpr: "':=' (an assignment expression)",
    ast.JoinedStr: "an f-string", ast.Starred: "'*' unpacking", ast.Slice: "a slice (index one element at a time)",
    ast.Match: "match",
}
"""Constructs a kernel may not use, by what the error calls them."""


def _construct(node: ast.AST) -> str:
    return REFUSED.get(type(node), type(node).__name__)


@dataclass
class KernelLoop:
    """A loop of the kernel being translated, open around the statements read now."""

    range: UOp
    kind: AxisKind


@dataclass
class Turn:
    """One turn of a sequential loop as it is translated: the gate its body starts under (the gate around the
    loop, and a ``while``'s test), and the gate of each ``break`` and ``continue`` stated in it so far (None
    for one the turn always reaches): the statements after one run only where it did not leave."""

    loop: KernelLoop
    base: UOp | None
    endless: bool = False
    """A ``while`` whose test is always true: only a ``break`` ends it."""
    leaves: list[UOp | None] = field(default_factory=list)
    breaks: list[UOp | None] = field(default_factory=list)


class TranslationContext(ABC):
    """What a translation holds as it goes: the source it walks (a ``@svod.func``'s while it is inlined),
    the builder, the locals (``env``), the loops and the gate around the statement being translated, the
    buffers' versions, the ranges and registers made so far, and where each part comes from (``located``)."""

    def __init__(self, source: Source, name: str, builder: KernelBuilder, arguments: dict[str, Any],
                 platform: Platform = HOST, numbers: frozenset[UOp] = frozenset()) -> None:
        self.source = source
        self.platform = platform
        self.numbers = numbers
        """What stands for a Python number in plain Python: the sizes, and the int and float arguments. What
        is computed from them and Python numbers alone is weak, as a Python number is (``Arithmetic.weak``)."""
        self._weak: dict[UOp, bool] = {}
        self.name = name
        self.k = builder
        self.env: dict[str, Any] = dict(arguments)
        self.loops: list[KernelLoop] = []
        self.turns: list[Turn] = []
        """The turns of the sequential loops around the statement being translated, innermost last."""
        self.gate: UOp | None = None
        self.ranges: list[UOp] = []
        """Every range made, in order: the final kernel numbers them again (``_renumbered``)."""
        self.located = Located(names={v.buffer.param.arg: v.name for v in arguments.values()
                                      if isinstance(v, ArrayValue)}, variables=size_names(arguments))
        self.inlining: list[pylang.Func] = []
        self.cell_of: dict[tuple[Any, ...], UOp] = {}
        """The register of each carried local (``cell``), by the loop's place in the source, its name and dtype."""
        self.versions: dict[UOp, int] = {}
        """How many effects the statements so far state on each buffer: the version of its memory state."""
        self.least_sizes: dict[UOp, list[tuple[int, str, int]]] = {}
        """Per size variable, the least size each constant index past an array's first dimension needs of it:
        ``(size, array, axis)`` (``dimension_checked``)."""
        self.stated: dict[UOp, dict[UOp, int]] = {}
        """The versions each effect's statement saw (``unstated`` compares them with its reads')."""
        self._placeholders = itertools.count()

    def where(self, node: ast.AST) -> str:
        return f"{self.source.file}:{getattr(node, 'lineno', self.source.node.lineno)}"

    def refuse(self, node: ast.AST, what: str) -> KernelSyntaxError:
        """``what`` is wrong with ``node``: the error names its line and shows its code (the error's value: the
        user's code that svod wrote it for, if svod wrote it, ``nodes.shown``; an operator node alone has none)."""
        written = code(node, 60)
        shown = what if not written or written in what else f"{what}: `{written}`"
        return KernelSyntaxError(f"{self.where(node)}: {shown}", kernel=self.name, stage="build", value=written)

    def unsupported(self, node: ast.AST, extra: str = "") -> KernelSyntaxError:
        return self.refuse(node, f"{_construct(node)} is not supported in a kernel{extra}")

    @abstractmethod
    def block(self, body: Sequence[ast.stmt], top: bool = False) -> None:
        """Translate the statements ``body`` in order: the top part's (``Translator.block``), which the parts
        below it call for a loop's body and an inlined function."""


__all__ = ["REFUSED", "KernelLoop", "TranslationContext", "Turn"]
