"""A kernel's source and where its parts come from: ``Source`` is a function's parsed ``def`` with the names it
resolves in; ``Located`` remembers the statement that made each node, buffer access and dtype of a kernel, so
that an error raised while translating or later (races, bounds, a device's dtypes) names its line."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from svod.dtype import DType, dtypes
from svod.errors import IndexOutOfBoundsError, KernelSyntaxError, RaceError, SvodError, VariableError
from svod.frontend.names import stored
from svod.frontend.nodes import code, walk
from svod.frontend.values import ArrayValue
from svod.ir import Ops, UOp
from svod.ir.uop import memory_of

# ---- locations -------------------------------------------------------------------------------------------

@dataclass
class Located:
    """Where a kernel's parts come from in its source: each node's first statement, and per buffer slot and
    per dtype the statements that access or first make them. ``locate`` names the likeliest line in an error
    raised after building (a race names a buffer, a device a dtype it cannot hold)."""

    nodes: dict[UOp, str] = field(default_factory=dict)
    slots: dict[int, list[str]] = field(default_factory=dict)
    dtypes: dict[DType, str] = field(default_factory=dict)
    loops: list[str] = field(default_factory=list)
    """The sequential loops' lines: a device that limits a work item's loop turns names them."""
    endless: list[str] = field(default_factory=list)
    """The lines of the loops without a bound (``while``): a device that limits loop turns refuses them."""
    names: dict[int, str] = field(default_factory=dict)
    """Per buffer slot, what the source calls it: an array argument's name, a carried local's cell."""
    variables: dict[str, str] = field(default_factory=dict)
    """Per size variable, what the source calls it: ``x.shape[0]`` for ``x_shape0``."""
    held: dict[str, str] = field(default_factory=dict)
    """The int arguments held to a narrow integer dtype's range, with its name (``Arithmetic.held_by``): a run's
    value past it is refused in NumPy 2's words."""

    def record(self, where: str, roots: Sequence[UOp]) -> None:
        for root in roots:
            for u in root.toposort():
                if u in self.nodes:
                    continue
                self.nodes[u] = where
                self.dtypes.setdefault(u.dtype if u.op is not Ops.PARAM else u.dtype.base, where)  # type: ignore[attr-defined]
                if u.op in (Ops.STORE, Ops.ATOMIC, Ops.LOAD):
                    lines = self.slots.setdefault(int(memory_of(u.src[0].src[0]).arg), [])
                    if where not in lines:
                        lines.append(where)

    def where(self, err: SvodError) -> str | None:
        value = err.value
        if err.stage == "render" and "while loop" in err.detail and self.endless:
            return ", ".join(self.endless)
        if err.stage in ("render", "launch") and isinstance(value, int) and "loop" in err.detail:
            return ", ".join(self.loops) or None
        if isinstance(value, UOp):  # the node, or one alike (the kernel may be bound again for the device)
            return self.nodes.get(value) or next((where for u, where in self.nodes.items() if _alike(u, value)), None)
        if err.stage == "render" and "32 bits" in err.detail:  # the first index the source computes that may not fit
            return next((where for u, where in self.nodes.items()
                         if u.dtype == dtypes.index and not -(1 << 31) <= u.vmin <= u.vmax < 1 << 31), None)
        if isinstance(err, IndexOutOfBoundsError) or (isinstance(err, RaceError) and isinstance(value, int)):
            slot = err.slot if isinstance(err, IndexOutOfBoundsError) else int(value)  # type: ignore[arg-type]
            lines = self.slots.get(slot, [])
            return ", ".join(lines) if lines else None
        if isinstance(value, str):  # a dtype by name ("cannot hold float64")
            value = next((d for d in self.dtypes if d.name == value), None)
        if isinstance(value, DType):
            return self.dtypes.get(value)
        return None

    def locate(self, err: SvodError) -> None:
        """Say in ``err`` where in the source its cause is, calling the buffers it names as the source does."""
        held = next((name for name in self.held if err.detail.startswith(f"variable {name}=")), None)
        if isinstance(err, VariableError) and held is not None:
            err.restate(fitting_refusal(f"argument {held}", err.value, self.held[held]))
        err.call_by(self.names, self.variables)
        where = self.where(err)
        if where is not None:
            err.locate(where)


def _alike(a: UOp, b: UOp) -> bool:
    """Whether ``a`` and ``b`` are the same op on sources of the same ops and dtypes."""
    return (a.op, a.dtype, a.arg, len(a.src)) == (b.op, b.dtype, b.arg, len(b.src)) and \
        all((s.op, s.dtype) == (t.op, t.dtype) for s, t in zip(a.src, b.src, strict=True))


def fitting_refusal(name: str, value: Any, dtype: str) -> str:
    """The words a refusal of int argument (or size) ``name`` past a narrow ``dtype`` it meets takes: NumPy 2's."""
    return (f"{name}: Python integer {value} out of bounds for {dtype} (it meets {dtype} values, and "
            "NumPy 2 raises OverflowError rather than wrap it)")


def size_names(arguments: Mapping[str, Any]) -> dict[str, str]:
    """Each size variable of the array arguments, as the first array it is a dimension of calls it."""
    found: dict[str, str] = {}
    for value in arguments.values():
        if isinstance(value, ArrayValue):
            for axis, dim in enumerate(value.dims):
                if isinstance(dim, UOp) and dim.op is Ops.DEFINE_VAR:
                    found.setdefault(dim.arg[0], f"{value.name}.shape[{axis}]")
    return found


# ---- the source -----------------------------------------------------------------------------------------

@dataclass
class Source:
    """A function's parsed source: its ``def`` node, file, and the globals and closure its names resolve in."""

    node: ast.FunctionDef
    file: str
    names: dict[str, Any]
    described: dict[str, str] = field(default_factory=dict)
    """For each name svod gave a value of its own making (``_svod_t0``), what an error calls it in the user's
    words (``the temporary array of `a[:-1] + 1.0```)."""

    @staticmethod
    def of(fn: Callable[..., Any]) -> Source:
        try:
            lines, first = inspect.getsourcelines(fn)
            file = inspect.getsourcefile(fn) or "<unknown>"
        except (OSError, TypeError) as err:
            raise KernelSyntaxError(f"cannot read the source of {getattr(fn, '__qualname__', fn)!r}: a kernel is "
                                    "translated from its source file", stage="parse", value=str(err)) from err
        tree = ast.parse(textwrap.dedent("".join(lines)))
        ast.increment_lineno(tree, first - 1)
        node = tree.body[0]
        if not isinstance(node, ast.FunctionDef):
            raise KernelSyntaxError(f"{file}:{first}: a kernel must be a plain function", stage="parse",
                                    value=type(node).__name__)
        names = dict(fn.__globals__)
        if fn.__closure__:
            names.update({name: cell.cell_contents for name, cell in
                          zip(fn.__code__.co_freevars, fn.__closure__, strict=True)})
        return Source(node, file, names)

    def outer_names(self) -> dict[str, Any]:
        """The globals and closure a name the function computes on the host may read: those the function does
        not bind itself (a module's ``k = 0`` is not the function's loop variable ``k``)."""
        bound = {a.arg for a in walk(self.node.args) if isinstance(a, ast.arg)}
        bound |= stored([self.node])
        return {name: value for name, value in self.names.items() if name not in bound}


def refusal(source: Source, name: str, node: ast.AST, what: str) -> KernelSyntaxError:
    """``what`` is wrong with ``node`` of a jitted function: the error names its file and line and shows the
    code (the user's that svod wrote it for, if svod wrote it: ``nodes.shown``)."""
    cut = code(node, 80)
    return KernelSyntaxError(f"{source.file}:{getattr(node, 'lineno', source.node.lineno)}: {what}: `{cut}`",
                             kernel=name, stage="build", value=cut)


__all__ = ["Located", "Source", "fitting_refusal", "refusal", "size_names"]
