"""The arrays an ``@svod.jit`` function makes (``svod.frontend.phases``' temporaries): ``np.zeros(...)`` and the
other allocations, and arrays of numbers written out (``np.array([0.25, 0.5, 0.25])``), each a plan buffer the
host makes before the run and a kernel fills where the statement stands.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from svod.errors import KernelSyntaxError
from svod.frontend.names import stored
from svod.frontend.nodes import assign, call, constant, copied, for_loop, load, placed, subscript
from svod.frontend.source import Source, refusal

ALLOCATIONS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like")
"""The NumPy calls that make a temporary array."""
LITERALS = ("array", "asarray")
"""The NumPy calls that make a temporary array of numbers written out (``np.array([0.25, 0.5, 0.25])``)."""
LITERAL_LIMIT = 4096
"""The most numbers such an array holds: each is a statement of the kernel that fills it."""


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
        kind = allocation_kind(self.call)
        if kind in ("zeros", "zeros_like"):
            return ast.Constant(0)
        if kind in ("ones", "ones_like"):
            return ast.Constant(1)
        if kind in ("full", "full_like"):
            return self.call.args[1] if len(self.call.args) > 1 else _keyword(self.call, "fill_value")
        if kind in LITERALS:
            return self.call.args[0]  # (the numbers written out, each stored where it stands: ``filling``)
        return None

    def filling(self, ndim: int) -> list[ast.stmt]:
        """The statements that fill the array where the statement stands (``fill``, which must be set): ``name[i0,
        ...] = fill`` in a ``prange`` nest over its ``ndim`` axes, placed at the statement, so that a fill a kernel
        cannot compute is refused at the user's line, and one it can is computed as the kernel computes it."""
        fill = self.fill
        assert fill is not None
        if allocation_kind(self.call) in LITERALS:
            return placed([assign(subscript(self.name, [constant(k) for k in at] or [constant(0)]),
                                  copied(number)) for at, number in literal_numbers(fill)], self.statement)
        indices = [f"_svod_i{axis}" for axis in range(ndim)]
        target = subscript(self.name, [load(index) for index in indices] or [constant(0)])
        nest: list[ast.stmt] = [assign(target, copied(fill))]
        for axis, index in reversed(list(enumerate(indices))):  # for _svod_i0 in prange(name.shape[0]): ...
            size = ast.Subscript(ast.Attribute(load(self.name), "shape", ast.Load()), constant(axis), ast.Load())
            nest = [for_loop(index, call("_svod_prange", size), nest)]
        return placed(nest, self.statement)

    def unmade(self, source: Source, name: str, err: Exception) -> KernelSyntaxError:
        """The refusal of the array where the host cannot make it (``err``, NumPy's own complaint, or a name
        only kernels know), the same with a tape and without one."""
        missing = err.name if isinstance(err, NameError) else None
        if missing is not None and (missing in source.described or missing in stored([source.node])):
            shown = source.described.get(missing, missing)  # (a name svod gave a value of the user's)
            err = NameError(f"`{shown}` is a value the run computes, which the host knows only after it")
        return refusal(source, name, self.statement, f"the host cannot make this temporary before the run ({err}); "
                       "its shape must follow from the arguments' shapes and values")


def allocation_kind(call: ast.Call) -> str | None:
    """Which of ``ALLOCATIONS`` or ``LITERALS`` ``call`` is, by the name it calls (None: neither)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name in LITERALS and call.args:  # (not numbers written out: np.array((a, b)) of arrays, strings)
        return name if written_numbers(call.args[0]) is not None else None
    return name if name in ALLOCATIONS else None


def written_numbers(node: ast.expr, kinds: tuple[type, ...] = (bool, int, float)) -> list[Any] | None:
    """The numbers of a list or tuple (or a nest of them) written out, in C order, where each is of the Python
    ``kinds``; None for another node."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return None
    try:
        numbers = [ast.literal_eval(number) for _, number in literal_numbers(node)]
    except (ValueError, TypeError, SyntaxError):
        return None
    return numbers if all(type(n) in kinds for n in numbers) else None


def literal_numbers(node: ast.expr, at: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], ast.expr]]:
    """The numbers of a nest of lists or tuples written out, each with its index, in C order."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [found for k, part in enumerate(node.elts) for found in literal_numbers(part, (*at, k))]
    return [(at, node)]


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


__all__ = ["ALLOCATIONS", "LITERALS", "LITERAL_LIMIT", "Temporary", "allocation_kind", "literal_numbers",
           "written_numbers"]
