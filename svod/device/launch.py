"""Launch sizes: symbolic UOp expressions evaluated per dispatch in checked 64-bit signed arithmetic.

Nothing here wraps: an overflow, a division by zero, a float, an unsupported op or a non-positive
dimension is a ``LaunchError`` that says which, and a variable outside its bounds a ``VariableError``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from svod.errors import LaunchError, VariableError
from svod.ir import Ops, UOp
from svod.ir.alu import trunc_quotient
from svod.ir.bounds import Bounds, compute_bounds
from svod.ir.uop import check_var_value

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
LaunchSize = tuple[UOp, UOp, UOp]


@dataclass(frozen=True, slots=True)
class ConcreteLaunchDims:
    """Launch sizes of one dispatch; ``local_size`` is None when the backend picks work-group sizes."""

    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int] | None


def _checked(value: int, what: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise LaunchError(f"invalid launch-size arithmetic: {what} overflows 64-bit signed",
                          stage="launch", value=value)
    return value


def _divide(a: int, b: int, op: Ops) -> int:
    if b == 0:
        raise LaunchError(f"invalid launch-size arithmetic: {op.name} by zero", stage="launch", value=a)
    quotient = _checked(trunc_quotient(a, b), op.name)
    return quotient if op is Ops.IDIV else a - b * quotient


_PASS_THROUGH = (Ops.CAST, Ops.BITCAST, Ops.AFTER)


def evaluate(expr: UOp, var_vals: Mapping[str, int]) -> int:
    """The integer value of launch-size expression ``expr`` for the given variable values.

    A variable is looked up where it is used, so one under a BIND needs no runtime value.
    """
    return _program(expr)(var_vals)


def evaluator(expr: UOp) -> Callable[[Mapping[str, int]], int]:
    """``evaluate`` of ``expr`` as a function of the variable values, for a caller that keeps it."""
    return _program(expr)


_PROGRAMS: weakref.WeakKeyDictionary[UOp, Callable[[Mapping[str, int]], int]] = weakref.WeakKeyDictionary()


def _program(expr: UOp) -> Callable[[Mapping[str, int]], int]:
    """``expr`` as a Python function of the variable values, made once per expression: a statement per node,
    in ``toposort`` order, each the check and arithmetic an interpreter of the graph would do, with the same
    errors in the same order. A call's launch sizes, buffer sizes and own buffers are evaluated on every
    call: walking the graph each time took a large part of a matmul's one-off call."""
    found = _PROGRAMS.get(expr)
    if found is None:
        found = _PROGRAMS[expr] = _compile(expr)
    return found


def _compile(expr: UOp) -> Callable[[Mapping[str, int]], int]:
    """The function ``_program`` keeps: it holds the nodes' arguments, not the nodes, so that it does not keep
    its expression alive."""
    nodes = expr.toposort()
    index = {node: i for i, node in enumerate(nodes)}
    args = [node.src[0].arg if node.op is Ops.BIND else node.arg for node in nodes]

    def ref(node: UOp) -> str:
        return f"_variable(args[{index[node]}], var_vals)" if node.op is Ops.DEFINE_VAR else f"v{index[node]}"

    lines = ["def run(var_vals):"]
    for i, node in enumerate(nodes):
        if node.op is not Ops.DEFINE_VAR:
            lines.append(f"    v{i} = {_statement(node, i, [ref(s) for s in node.src])}")
    lines.append(f"    return {ref(expr)}")
    scope: dict[str, object] = {"args": args, "_variable": _variable, "_checked": _checked, "_divide": _divide,
                                "_bind": _bind, "_refuse": _refuse, "Ops": Ops}
    exec("\n".join(lines), scope)  # the source is made above from the expression's own nodes
    return scope["run"]  # type: ignore[return-value]


def _statement(node: UOp, i: int, src: list[str]) -> str:
    """The Python expression that computes ``node`` (the ``i``-th in its expression) from its sources'."""
    op = node.op
    if op is Ops.CONST and not isinstance(node.arg, float) and INT64_MIN <= int(node.arg) <= INT64_MAX:
        return str(int(node.arg))
    if op is Ops.BIND:
        return f"_bind(args[{i}], {src[1]})"
    if op in (Ops.ADD, Ops.SUB, Ops.MUL):
        return f"_checked({src[0]} {_INFIX[op]} {src[1]}, {op.name!r})"
    if op in (Ops.IDIV, Ops.MOD):
        return f"_divide({src[0]}, {src[1]}, Ops.{op.name})"
    if op in (Ops.MAX, Ops.MIN):
        return f"{op.name.lower()}({src[0]}, {src[1]})"
    if op is Ops.NEG:
        return f"_checked(-{src[0]}, 'NEG')"
    if op is Ops.ABS:
        return f"_checked(abs({src[0]}), 'ABS')"
    if op in _PASS_THROUGH:
        return src[0]
    return f"_refuse(Ops.{op.name}, args[{i}])"


_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}


def _bind(var: tuple[str, int, int], value: int) -> int:
    name, lo, hi = var
    return check_var_value(name, value, lo, hi, stage="launch")


def _refuse(op: Ops, arg: object) -> int:
    """The error of a node no launch size may hold: a float or out-of-range constant, an unsupported op."""
    if op is Ops.CONST:
        if isinstance(arg, float):
            raise LaunchError("launch size must be integer, not a float constant", stage="launch", value=arg)
        return _checked(int(arg), "constant")  # type: ignore[call-overload]
    raise LaunchError(f"op {op.name} is unsupported in a launch size", stage="launch", value=op)


def most(expr: UOp, var_vals: Mapping[str, int]) -> int:
    """The largest value integer expression ``expr`` may take for these variable values, over every value
    of whatever else it reads (a work item's position): its bounds (``svod.ir.bounds``) with each variable
    fixed to its value."""
    bounds: dict[UOp, Bounds] = {}
    for node in expr.toposort():
        if node.op is Ops.DEFINE_VAR:
            value = _variable(node.arg, var_vals)
            bounds[node] = (value, value)
        else:
            bounds[node] = compute_bounds(node, bounds.__getitem__)
    return int(bounds[expr][1])


def _variable(var: tuple[str, int, int], var_vals: Mapping[str, int]) -> int:
    name, lo, hi = var
    if name not in var_vals:
        raise VariableError(f"missing runtime value for launch-size variable {name}", stage="launch", value=name)
    return check_var_value(name, var_vals[name], lo, hi, stage="launch")


def evaluate_dims(sizes: tuple[UOp, ...], var_vals: Mapping[str, int]) -> tuple[int, int, int]:
    """Three launch dimensions, each evaluated and checked to be positive."""
    x, y, z = (evaluate(size, var_vals) for size in sizes)
    for axis, dim in enumerate((x, y, z)):
        if dim <= 0:
            raise LaunchError(f"launch dimension {axis} evaluated to non-positive value {dim}",
                              stage="launch", value=dim)
    return (x, y, z)


LAUNCHES_KEPT = 256
"""How many sets of variable values a ``LaunchShape`` keeps the launch sizes of."""

ONE = UOp.index_const(1)
ONES: LaunchSize = (ONE, ONE, ONE)


@dataclass(frozen=True)
class LaunchShape:
    """A kernel's launch sizes as expressions of its variables, with the values of the variables it fixes
    itself (``BIND``): the one object that turns variable values into the dims of a dispatch, for a direct
    call, a plan's step and a kernel's part alike. Sizes no free variable changes are evaluated once."""

    global_size: LaunchSize = ONES
    local_size: LaunchSize | None = ONES
    fixed: tuple[tuple[str, int], ...] = ()

    def dims(self, var_vals: Mapping[str, int]) -> ConcreteLaunchDims:
        """The launch sizes of a dispatch with these variable values. Sizes that variables change are
        evaluated once per set of values they read, and kept (``LAUNCHES_KEPT`` sets at most): a CPU kernel's
        worker count reads its sizes, and evaluating it took as long as the rest of a small launch."""
        static = self.static
        if static is not None:
            return static
        key = tuple(var_vals.get(name) for name in self.reads)
        kept = self._kept if all(type(value) is int for value in key) else None  # 2.0 is not 2: checked anew
        found = None if kept is None else kept.get(key)
        if found is not None:
            return found
        values = {**var_vals, **dict(self.fixed)} if self.fixed else var_vals
        dims = ConcreteLaunchDims(evaluate_dims(self.global_size, values),
                                  None if self.local_size is None else evaluate_dims(self.local_size, values))
        if kept is not None:
            if len(kept) >= LAUNCHES_KEPT:
                kept.clear()
            kept[key] = dims
        return dims

    @functools.cached_property
    def reads(self) -> tuple[str, ...]:
        """The variables the sizes read that the caller passes (not fixed here), by name."""
        fixed = {name for name, _ in self.fixed}
        sizes = (*self.global_size, *(self.local_size or ()))
        return tuple(sorted({u.arg[0] for size in sizes for u in size.toposort()
                             if u.op is Ops.DEFINE_VAR and u.arg[0] not in fixed}))

    @functools.cached_property
    def _kept(self) -> dict[tuple[int | None, ...], ConcreteLaunchDims]:
        return {}

    @functools.cached_property
    def static(self) -> ConcreteLaunchDims | None:
        """The dims when no variable the caller passes changes them, evaluated at first use."""
        fixed = {name for name, _ in self.fixed}
        sizes = (*self.global_size, *(self.local_size or ()))
        if any(u.op is Ops.DEFINE_VAR and u.arg[0] not in fixed for size in sizes for u in size.toposort()):
            return None
        values = dict(self.fixed)
        return ConcreteLaunchDims(evaluate_dims(self.global_size, values),
                                  None if self.local_size is None else evaluate_dims(self.local_size, values))
