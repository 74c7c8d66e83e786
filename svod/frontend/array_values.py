"""The expressions of ``@svod.jit``'s array statements (``svod.frontend.arrays``), read into values: a lazy array
expression (``svod.frontend.array_exprs``) of NumPy's shape and dtype, or a scalar of the user's. Names, views,
indexing and gathers, elementwise operators and comparisons, NumPy's functions and methods (the further ones
in ``array_calls``, ``array_math``, ``array_shapes`` and ``array_stats``), reductions and products.

An expression's dtype is the one NumPy gives it, found by applying the same operation to one-element arrays of
the operands' dtypes (a Python number as itself: weak, as NEP 50 has it); where NumPy refuses the operands, so
does svod, at the user's line. Shapes broadcast as NumPy's do; lengths the host does not know before the run
broadcast where they are provably equal.
"""

from __future__ import annotations

import ast
import itertools
import operator
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from svod.frontend import array_norms, extents, linalg, random_arrays
from svod.frontend.array_calls import reads_masked, written_out
from svod.frontend.array_exprs import (
    SIZE_ATTRIBUTES,
    Elementwise,
    Emitter,
    Expr,
    Named,
    Product,
    Reduced,
    Scalar,
    Transposed,
    Value,
    Viewed,
    Whole,
    ambiguous_types,
    computes,
    numpy,
    type_name,
    typed,
    types_once,
)
from svod.frontend.array_shapes import JOINS, MADE
from svod.frontend.extents import Dim, node_of
from svod.frontend.nodes import call, constant, copied, load, walk
from svod.frontend.phases import SORTING
from svod.frontend.pykernel import COMPLEX_PARTS
from svod.frontend.slice_bounds import LoopTurns, SliceBounds

UFUNCS = ("exp", "exp2", "log", "log2", "sin", "cos", "tan", "tanh", "sqrt", "floor", "ceil", "trunc", "abs",
          "fabs", "absolute", "negative")
"""The one-argument NumPy functions an array expression may call elementwise (``np.exp(x)``)."""
COMPLEX_PARTS_OF = ("real", "imag", "conj", "conjugate", "angle")
"""NumPy's functions of a complex array's parts (of a real array: itself, zeros, itself, 0 or pi)."""
REDUCTIONS = ("sum", "prod", "max", "min", "mean", "amax", "amin", "argmax", "argmin", "any", "all")
"""The reductions an array expression may call, as a method or a NumPy function, over all axes or ``axis``."""
ORDERED = ("max", "min", "amax", "amin", "argmax", "argmin")
"""The reductions that order their operand's elements."""
_OPERATORS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
"""The operators an array expression may apply elementwise, and what each computes on the host."""
_COMPARE = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


class ArrayValues(SliceBounds):
    """The expressions of this module, as the statements' ``ArrayRewriter`` reads them. ``histogram_part`` and
    ``bincount`` are ``Histograms``' (``svod.frontend.histograms``), a base of ``ArrayRewriter`` after this one: they
    are declared, not stubbed, so that no stub of this class hides them; so is ``masked_reduction``,
    ``Compactions``' (``svod.frontend.compactions``)."""

    described: dict[str, str]
    histogram_part: Callable[[ast.Subscript], Named | None]
    bincount: Callable[[ast.Call], Named]
    masked_reduction: Callable[[ast.Call, Expr, str, list[ast.keyword], list[ast.expr]], Value]

    @abstractmethod
    def stand_in(self, node: ast.expr) -> Any: ...

    @abstractmethod
    def operand(self, node: ast.AST, x: Expr) -> Expr: ...

    @abstractmethod
    def fresh_temporary(self, shape: tuple[Dim, ...], dtype: np.dtype, node: ast.AST) -> Expr: ...

    @abstractmethod
    def allocation(self, stmt: ast.stmt, made: Expr) -> list[ast.stmt]: ...

    @abstractmethod
    def loops(self, stmt: ast.stmt, stored: Expr, value: Value) -> list[ast.stmt]: ...

    def value(self, node: ast.expr) -> Value:
        method = _VALUES.get(type(node))
        if method is None:
            if self.reads_array(node):
                raise self.refuse(node, f"{type(node).__name__} of arrays is not an array expression svod has")
            return self.scalar(node)
        return method(self, node)

    def element_values(self, node: ast.expr) -> ast.expr:
        """A copy of scalar expression ``node`` with each element of a view it reads (``v[k]``), and each number
        it computes of one (``len(v)``, ``v.shape[0]``, ``v.size``), read from the view's array or written as its
        value: the kernel language has no views. ``node`` itself where it reads none."""
        if not self.viewing(node):
            return node
        rewriter = self

        class Elements(ast.NodeTransformer):
            def visit(self, inner: ast.AST) -> ast.AST:
                if isinstance(inner, (ast.Subscript, ast.Call, ast.Attribute)) and rewriter.viewing(inner):
                    value = rewriter.value(inner)
                    if isinstance(value, Scalar) and not any(isinstance(n, ast.Slice) for n in walk(value.node)) \
                            and ast.dump(value.node) != ast.dump(inner):  # (an element, of its base's name; a call
                        return ast.copy_location(value.node, inner)    # as written, range(len(v)), looked into)
                return self.generic_visit(inner)

        self.changed = True
        made = Elements().visit(copied(node))
        assert isinstance(made, ast.expr)  # (an expression's replacement is one)
        return made

    def viewing(self, node: ast.AST) -> bool:
        """Whether ``node`` reads a slice, a name of a view (of an array of another name, or of one made for
        each work item), or a number of an array expression (``(a * 2).shape[0]``), which the kernel language
        has not."""
        for inner in walk(node):
            if isinstance(inner, ast.Slice):
                return True
            if isinstance(inner, ast.Attribute) and not isinstance(inner.value, ast.Name) and \
                    self.reads_array(inner.value):
                return True
            if isinstance(inner, ast.Name) and inner.id in self.arrays:
                known = self.arrays[inner.id]
                if not (isinstance(known, Named) and known.name == inner.id):
                    return True
        return False

    def scalar(self, node: ast.expr) -> Scalar:
        """A scalar of the user's: its node, as written, and its value where the host knows it (recorded where a
        decision reads it, ``Scalar.sample``)."""
        try:
            sample = self.computed(node)
        except Exception:  # only the run knows it: a zero of each type it may have, which NumPy's promotion reads
            types = self.stand_in(node) or (0,)
            return Scalar(copied(node), types[0], types[1:], run_only=True)
        if isinstance(sample, np.ndarray):
            sample = sample.flat[0] if sample.size else sample.dtype.type(0)
        return Scalar(copied(node), sample)

    def span(self, node: ast.expr) -> tuple[int, int] | None:
        """The least and greatest value of ``node`` where it is a loop's variable whose range's bounds the host
        knows bounds of (``SliceBounds.turns``); else None."""
        if not isinstance(node, ast.Name) or node.id not in self.variables:
            return None
        known = self.variables[node.id]
        if isinstance(known, LoopTurns):
            outer, self.variables = self.variables, known.outer
            try:
                return self.turns(known.loop)
            finally:
                self.variables = outer
        return extents.low(known), extents.high(known)

    def literal(self, node: ast.Constant) -> Value:
        return Scalar(copied(node), node.value)

    def name_value(self, node: ast.Name) -> Value:
        if node.id in self.stale:
            raise self.refuse(node, self.stale[node.id])
        if node.id in self.arrays:
            return self.arrays[node.id]
        return self.scalar(node)

    def attribute(self, node: ast.Attribute) -> Value:
        owner = self.value(node.value) if self.reads_array(node.value) else None
        if isinstance(owner, Expr):
            if node.attr == "T":
                order = tuple(reversed(range(len(owner.shape))))
                return Transposed(tuple(owner.shape[a] for a in order), owner.dtype, owner, order)
            if node.attr in SIZE_ATTRIBUTES and reads_masked(owner):
                raise self.refuse(node, _MASKED_LENGTH.format(f"x[mask].{node.attr}"))
            if node.attr in SIZE_ATTRIBUTES:
                known = _attribute(owner, node.attr)
                if (node.attr == "shape" and not extents.is_static(known)) or isinstance(known, extents.Extent):
                    raise self.refuse(node, f"{ast.unparse(node)} is a length the host does not know before the run "
                                            f"(`{extents.shown(owner.shape)}`): write it from the slice's bounds")
                return Scalar(constant(known), known)
            if node.attr == "dtype":  # what astype and the allocations read on the host
                return Scalar(copied(node), owner.dtype)
            if node.attr in ("real", "imag"):
                return self.complex_part(node, owner, node.attr)
            raise self.refuse(node, f"the attribute {node.attr} of an array expression is not one svod has")
        return self.scalar(node)

    def subscript(self, node: ast.Subscript, element: bool = False) -> Value:
        """``base[items]``: a view, a gather, or one element (a scalar; with ``element``, as a view of no axes,
        which a statement stores into)."""
        part = self.histogram_part(node) or self.indices_part(node)
        if part is not None:
            return part
        base = self.value(node.value)
        if isinstance(base, Scalar) and isinstance(base.held, tuple) and not isinstance(node.slice, ast.Slice):
            known = _shape_number(base.held, self.scalar(node.slice))
            if known is not None:  # a number of a shape the host knows (b.shape[0] of a made b: 4)
                return Scalar(constant(known), known)
        if not isinstance(base, Expr):
            return self.scalar(node)
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        items = _without_ellipsis(items, len(base.shape))
        advanced = self.advanced(node, base, items)
        if advanced is not None:
            return advanced
        axes: list[tuple[int, Dim, int] | None] = []
        fixed: dict[int, ast.expr] = {}
        shape: list[Dim] = []
        axis = 0
        for item in items:
            if (isinstance(item, ast.Constant) and item.value is None) or \
                    (isinstance(item, ast.Attribute) and item.attr == "newaxis"):
                axes.append(None)
                shape.append(1)
                continue
            if axis >= len(base.shape):
                raise self.refuse(node, f"too many indices for an array of {len(base.shape)} dimension(s)")
            size = base.shape[axis]
            if isinstance(item, ast.Slice):
                step = 1 if item.step is None else self.host_int(item.step)
                if step == 0:
                    raise self.refuse(node, "a slice step cannot be zero")
                lower, upper = (None if part is None else self.bound(part) for part in (item.lower, item.upper))
                start, length = extents.sliced(lower, upper, step, size)  # type: ignore[arg-type]
                start, length = self.held(start), self.held(length)
                shape.append(length)
                axes.append((axis, start, step))  # type: ignore[arg-type]
            else:
                fixed[axis] = self.index(node, item, axis, size)
            axis += 1
        for rest in range(axis, len(base.shape)):
            axes.append((rest, 0, 1))
            shape.append(base.shape[rest])
        if not axes and len(fixed) == len(base.shape) and not computes(base) and not element:  # a scalar
            return Scalar(base.element([fixed[a] for a in range(len(base.shape))], Emitter(self.counter)),
                          base.dtype.type(1))
        return Viewed(tuple(shape), base.dtype, base, tuple(axes), fixed)

    def binop(self, node: ast.BinOp) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(node.op, ast.MatMult):
            return self.matmul(node, left, right)
        return self.binary(node, left, right, type(node.op))

    def binary(self, node: ast.AST, left: Value, right: Value, op: type[ast.operator], operator: bool = True
               ) -> Value:
        """``left op right``; ``operator``: written as Python's operator (``a ** b``), not as the ufunc
        (``np.power(a, b)``), whose power has none of the operator's shortcuts."""
        fn = _OPERATORS.get(op)
        if fn is None:
            raise self.refuse(node, "this operator is not one svod's array expressions have")
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            return _combined(ast.BinOp(left.node, op(), right.node), fn, left, right)
        dtype = _result_dtype(self, node, fn, left, right)
        if dtype == np.bool_:  # NumPy's add and multiply of bools are or and and (a kernel's are Python's)
            op = {ast.Add: ast.BitOr, ast.Mult: ast.BitAnd}.get(op, op)
        if op is ast.Pow and isinstance(left, Expr) and isinstance(right, Scalar):
            return self.power(node, left, right, dtype, operator)
        return self.elementwise(node, lambda c: ast.BinOp(c[0], op(), c[1]), dtype, left, right)

    def power(self, node: ast.AST, base: Expr, exponent: Scalar, dtype: np.dtype, operator: bool) -> Expr:
        """An array to a scalar power, as NumPy computes it. Its operator takes shortcuts by the exponent's value
        and type: of an inexact array, the Python int ``2`` is ``np.square``, ``-1`` ``np.reciprocal`` and the
        Python float ``0.5`` ``np.sqrt`` (each keeps signed zeros and infinities the power loop does not; ``2.0``
        and ``np.int64(2)`` take the loop); and its real power loop takes ``np.sqrt`` for a scalar exponent of
        0.5, of any float type. An exponent that
        is a name (``z ** p``) takes them by the value it holds: where the host knows it, the plan is made for
        it (a complex power loop wants it a constant); where only the run does, a real power chooses there."""
        value = _literal(exponent.node)
        if value is None and dtype.kind in "ciu":  # (a real power runs with any exponent: the run's, below)
            value = self.host_number(exponent.node)
        written: Any = value if type(value) in (int, float) else None  # Python's number: weak, as a literal is
        if dtype.kind == "c" and _whole(value):  # NumPy's complex loop powers by a whole exponent of any type alike
            written = int(value)
        known = ast.copy_location(constant(written), exponent.node) if written is not None else None
        sqrt = lambda c: call(numpy("sqrt"), _as(c[0], base, dtype))  # noqa: E731
        if dtype.kind == "c" and value is not None:
            if operator and type(value) is int and value == -1:
                return self.elementwise(node, lambda c: call(numpy("reciprocal"), c[0]), dtype, base)
            if operator and type(value) is int and value == 2:
                return self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Mult(), c[0]), dtype, base)
            if operator and type(value) is float and value == 0.5:
                return self.elementwise(node, sqrt, dtype, base)
        if dtype.kind == "c" and value is None and not self.typed_on_host(exponent.node):
            if operator:
                raise self.refuse(node, "a complex array's ** of a name only the run knows: NumPy's operator takes "
                                        "its shortcuts by the exponent's type (a Python int's -1 and 2, a Python "
                                        "float's 0.5, a NumPy scalar's none), which the host does not know here; "
                                        "np.power(z, p) takes none")
            if dtype == np.complex64:
                raise self.refuse(node, "np.power of a complex64 array and a name only the run knows: NumPy's "
                                        "result is complex128 for a NumPy float64 or int64 scalar and complex64 "
                                        "for a Python float, and the host does not know its type here (a complex128 "
                                        "array's power runs)")
        if dtype.kind == "c" and value is None and operator:
            return self.elementwise(node, _run_time_shortcuts(exponent.sample, sqrt), dtype, base, exponent)
        if dtype.kind == "f" and _inexact(exponent.sample):
            if value is not None and value == 0.5:
                return self.elementwise(node, sqrt, dtype, base)
            if value is None:  # NumPy's loop chooses by the value it runs with: so does the element
                return self.elementwise(node, lambda c: ast.IfExp(ast.Compare(c[1], [ast.Eq()], [constant(0.5)]),
                                                                  sqrt(c), ast.BinOp(c[0], ast.Pow(), c[1])),
                                        dtype, base, exponent)
        if known is not None:  # its value written, as a literal's: the power loop a kernel has, of the result's dtype
            return self.elementwise(node, lambda c: ast.BinOp(_as(c[0], base, dtype), ast.Pow(), known), dtype, base)
        return self.elementwise(node, lambda c: ast.BinOp(c[0], ast.Pow(), c[1]), dtype, base, exponent)

    def typed_on_host(self, node: ast.expr) -> bool:
        """Whether the host computes scalar ``node``, and so knows its type (``Scalar.sample``'s stand-in where
        it does not is an int, whatever the run's value is)."""
        try:
            self.computed(node)
        except Exception:
            return False
        return True

    def host_number(self, node: ast.expr) -> Any:
        """The number scalar ``node`` computes where the host knows it before the run (an argument of a value
        the plan is made for, a name it computes of those), the names it read recorded (``read``: the plan is
        made for their values); None where only the run knows it."""
        try:
            value = self.on_host(node)
        except Exception:
            return None
        if not isinstance(value, (int, float, np.integer, np.floating)):
            return None
        self.read |= {n.id for n in walk(node) if isinstance(n, ast.Name)} & (set(self.host) - set(self.arrays))
        return value

    def dtype_of(self, node: ast.AST, fn: Callable[..., object], *operands: Value) -> np.dtype:
        return _result_dtype(self, node, fn, *operands)

    def elementwise(self, node: ast.AST, combine: Callable[[list[ast.expr]], ast.expr], dtype: np.dtype,
                    *operands: Value) -> Expr:
        if np.dtype(dtype).kind == "c" and np.dtype(dtype) not in COMPLEX_PARTS:
            raise self.refuse(node, f"this is an array of {np.dtype(dtype)}, and svod computes on complex64 and "
                                    "complex128 only")
        shapes = [o.shape for o in operands if isinstance(o, Expr)]
        return Elementwise(broadcast_shape(self, node, shapes), np.dtype(dtype), combine, operands)

    def unary(self, node: ast.UnaryOp) -> Value:
        operand = self.value(node.operand)
        if isinstance(operand, Scalar):
            return self.scalar(node)
        op = type(node.op)
        if op is ast.Not:
            raise self.refuse(node, "`not` of an array is ambiguous (NumPy refuses it too); use ~ or ==")
        if op is ast.Invert and operand.dtype.kind not in "biu":
            raise self.refuse(node, f"~ of a {operand.dtype} array (NumPy's ~ takes bools and integers)")
        return self.elementwise(node, lambda c: ast.UnaryOp(op(), c[0]), operand.dtype, operand)

    def compare(self, node: ast.Compare) -> Value:
        if len(node.ops) != 1:
            raise self.refuse(node, "a chained comparison of arrays is ambiguous; compare twice and combine with &")
        left, right = self.value(node.left), self.value(node.comparators[0])
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            return self.scalar(node)
        op = type(node.ops[0])
        if op not in _COMPARE:
            raise self.refuse(node, "this comparison is not one svod's array expressions have")
        return self.elementwise(node, lambda c: ast.Compare(c[0], [op()], [c[1]]), np.dtype(bool), left, right)

    def choice(self, node: ast.IfExp) -> Value:
        """``a if c else b``. Where the host knows ``c`` before the run, the value is the operand it picks (only
        that one is read, as in Python). Otherwise a scalar choice stays a scalar; a choice between arrays
        is ``np.where(c, a, b)``'s elements, which are the picked array's where both have one shape and
        dtype (else the result's shape or dtype would depend on the run). A test that is an array of any
        shape but ``()`` is refused, as NumPy refuses its truth value."""
        test = self.value(node.test)
        if isinstance(test, Expr) and test.shape:
            raise self.refuse(node.test, f"the truth value of an array of shape {extents.shown(test.shape)} is "
                                         "ambiguous (as in NumPy); use np.where(c, a, b) for a choice per element")
        if isinstance(test, Scalar):
            known = self.host_truth(node.test)
            if known is not None and self.reads_array(node):
                return self.value(node.body if known else node.orelse)
        body, orelse = self.value(node.body), self.value(node.orelse)
        if isinstance(test, Scalar) and isinstance(body, Scalar) and isinstance(orelse, Scalar):
            chosen = ast.IfExp(test.node, body.node, orelse.node)
            if test.run_only:  # either, of its own type
                types = types_once((*body.samples, *orelse.samples))
                return Scalar(chosen, types[0], types[1:], run_only=True)
            return Scalar(chosen, body.held if test.held else orelse.held, run_only=body.run_only or orelse.run_only)
        if not (isinstance(body, Expr) and isinstance(orelse, Expr) and body.shape == orelse.shape
                and body.dtype == orelse.dtype):
            raise self.refuse(node, f"`a if c else b` with a test known only at run time picks {_described(body)} "
                                    f"or {_described(orelse)}: svod takes a choice between arrays of one shape and "
                                    "dtype (np.where(c, a, b) broadcasts and promotes)")
        if self.binds_view(node, body, orelse):
            raise self.refuse(node, "a name bound to `a if c else b` with a test known only at run time is one of "
                                    "the two arrays itself (writes through it change that array), which svod does "
                                    "not have; copy it (`np.where(c, a, b)`) or branch with an if statement")
        return self.elementwise(node, lambda c: ast.IfExp(c[0], c[1], c[2]), body.dtype, test, body, orelse)

    def host_truth(self, node: ast.expr) -> bool | None:
        """The truth of test ``node`` where the host computes it now (numbers, shapes, scalar arguments, which
        the plan is then made for), else None."""
        try:
            value = self.on_host(node)
        except Exception:
            return None
        if not isinstance(value, (bool, int, float, np.bool_, np.number)):
            return None
        self.read |= {n.id for n in walk(node) if isinstance(n, ast.Name)} & (set(self.host) - set(self.arrays))
        return bool(value)

    def reads_array(self, node: ast.expr) -> bool:
        """Whether ``node`` names an array anywhere in it."""
        return any(isinstance(n, ast.Name) and n.id in self.arrays for n in walk(node))

    def binds_view(self, node: ast.IfExp, *operands: Expr) -> bool:
        """Whether the statement binds a name to ``node`` itself while an operand is a view of memory: Python's
        name is then that array, not a copy."""
        stmt = self.at
        bound = isinstance(stmt, ast.Assign) and stmt.value is node and isinstance(stmt.targets[0], ast.Name)
        return bound and any(not computes(o) for o in operands)

    def either(self, node: ast.BoolOp) -> Value:
        """``a and b``, ``a or b``: of scalars, a scalar (Python's: one of the operands). Of an array, NumPy's truth
        value, which svod takes for arrays of no axes of one dtype only (the result is one of them)."""
        values = [self.value(v) for v in node.values]
        if all(isinstance(v, Scalar) for v in values):
            samples = [v.held for v in values if isinstance(v, Scalar)]
            sample = _apply(lambda *s: _python_bool(type(node.op), s), *samples)
            return Scalar(ast.BoolOp(type(node.op)(), [v.node for v in values if isinstance(v, Scalar)]), sample)
        spelled = "and" if isinstance(node.op, ast.And) else "or"
        arrays = [v for v in values if isinstance(v, Expr)]
        if any(a.shape for a in arrays):
            raise self.refuse(node, f"`{spelled}` of an array is ambiguous (as in NumPy); use "
                                    f"{'&' if spelled == 'and' else '|'} for an elementwise {spelled}")
        if len(arrays) != len(values) or len({a.dtype for a in arrays}) != 1:
            raise self.refuse(node, f"`{spelled}` with an array operand picks one of its operands, here of "
                                    "different kinds, by a test known only at run time; cast them to one dtype")
        op = type(node.op)
        return self.elementwise(node, lambda c: ast.BoolOp(op(), c), arrays[0].dtype, *arrays)

    def call_value(self, node: ast.Call) -> Value:
        func = node.func
        if isinstance(func, ast.Attribute) and not isinstance(self.reader.resolve(func.value), type(np)):
            owner = self.value(func.value)
            if isinstance(owner, Expr):
                return self.method(node, owner, func.attr)
        callee = self.reader.resolve(func)
        drawn = random_arrays.array_value(self, node, callee)
        if drawn is not None:
            return drawn
        if callee in JOINS and len(node.args) == 1:
            return self.joined(node, callee.__name__)
        if callee is np.linalg.norm:
            return array_norms.norm(self, node)
        args = [self.value(a) for a in node.args]
        if callee is len and len(args) == 1 and isinstance(args[0], Expr) and reads_masked(args[0]):
            raise self.refuse(node, _MASKED_LENGTH.format("len(x[mask])"))
        if callee is len and len(args) == 1 and isinstance(args[0], Expr) and args[0].shape:
            length = args[0].shape[0]
            return Scalar(node_of(length), length if isinstance(length, int) else 0)
        if callee in MADE:
            return self.made(node, callee.__name__)
        if callee in (np.array, np.asarray) and (written := written_out(node)) is not None:
            return written  # (numbers written out: np.array([0.25, 0.5, 0.25]) * x)
        if callee in (float, int) and len(args) == 1 and isinstance(x := args[0], Expr) and not x.shape and \
                x.dtype.kind != "c":  # ``float(x.sum())``: Python's number of the one value
            return self.elementwise(node, lambda c: typed(c[0], np.dtype(callee)), np.dtype(callee), x)
        if not any(isinstance(a, Expr) for a in args):
            return self.scalar(node)
        name = getattr(callee, "__name__", None)
        if callee is getattr(np, str(name), None) or callee is abs:
            return self.numpy_call(node, str(name), args)
        if any(callee is getattr(np.linalg, kind) for kind in (*linalg.FUNCTIONS, *linalg.COMPOSED)):
            raise self.refuse(node, f"{ast.unparse(func)} is a statement of its own in a jitted function (`x = "
                                    f"{ast.unparse(func)}(...)`, or `return` of it), not a part of an expression")
        if isinstance(ufunc := getattr(callee, "__self__", None), np.ufunc):  # np.add.reduce, np.maximum.accumulate
            return self.ufunc_method(node, ufunc, str(name), args)
        raise self.refuse(node, f"{ast.unparse(func)} of an array is not a function svod's array expressions have")

    def numpy_call(self, node: ast.Call, name: str, args: list[Value]) -> Value:
        if name in SORTING:
            raise self.refuse(node, f"np.{name} is a statement of its own in a jitted function (`y = np.{name}(x)`), "
                                    "not a part of an expression")
        if name in ("abs", "absolute", "fabs"):
            name = "abs"
        if name in (*UFUNCS, "maximum", "minimum", "fmax", "fmin", "where", "dot", "matmul", "outer"):
            self.bare(node, f"np.{name}")
        if name in COMPLEX_PARTS_OF and len(args) == 1 and isinstance(args[0], Expr):
            self.bare(node, f"np.{name}")
            return self.complex_part(node, args[0], name)
        if name in UFUNCS and len(args) == 1:
            (x,) = args
            fn = getattr(np, name)
            dtype = _result_dtype(self, node, fn, x)
            if name == "negative":
                return self.elementwise(node, lambda c: ast.UnaryOp(ast.USub(), c[0]), dtype, x)
            complex_abs = name == "abs" and isinstance(x, Expr) and x.dtype.kind == "c"  # a float of a complex
            cast = dtype if isinstance(x, Expr) and x.dtype != dtype and not complex_abs else None
            return self.elementwise(node, lambda c: call(load("abs") if name == "abs" else numpy(name),
                                                         typed(c[0], cast) if cast else c[0]), dtype, x)
        if name in ("maximum", "minimum", "fmax", "fmin") and len(args) == 2:
            dtype = _result_dtype(self, node, getattr(np, name), *args)
            return self.elementwise(node, lambda c: call(numpy(name), c[0], c[1]), dtype, *args)
        if name == "where" and len(args) == 3:
            dtype = _result_dtype(self, node, np.where, *args)
            return self.elementwise(node, lambda c: ast.IfExp(c[0], c[1], c[2]), dtype, *args)
        if name in REDUCTIONS and args and isinstance(args[0], Expr):
            return self.reduction(node, args[0], name, node.keywords, args[1:])
        if name in ("dot", "matmul") and len(args) == 2:
            return self.matmul(node, args[0], args[1])
        if name in ("cumsum", "cumprod") and args and isinstance(args[0], Expr):
            return self.scan(node, args[0], name)
        if name == "outer" and len(args) == 2 and all(isinstance(a, Expr) for a in args):
            a, b = (self.flat(node, a) for a in args)
            dtype = _result_dtype(self, node, np.multiply, a, b)
            return Product((a.shape[0], b.shape[0]), dtype, a, b, outer=True)
        found = self.extra_function(node, name, args)
        if found is not None:
            return found
        if name == "bincount":
            return self.bincount(node)
        if name == "unique":
            raise self.refuse(node, "np.unique makes an array of a length known only after the run: svod makes it as "
                                    "a statement of its own (`u = np.unique(x)`) and returns it")
        if name == "histogram":
            raise self.refuse(node, "np.histogram makes (counts, edges): assign both (`counts, edges = "
                                    "np.histogram(...)`) or take one (`np.histogram(...)[0]`)")
        raise self.refuse(node, f"np.{name} is not a function svod's array expressions have")

    def complex_part(self, node: ast.AST, operand: Expr, name: str) -> Value:
        """``np.real``, ``np.imag``, ``np.conj`` (``x.real``, ``x.conj()``) of an array, elementwise."""
        dtype = _result_dtype(self, node, getattr(np, name), operand)
        return self.elementwise(node, lambda c: call(numpy(name), c[0]), dtype, operand)

    def method(self, node: ast.Call, owner: Expr, name: str) -> Value:
        args = [self.value(a) for a in node.args]
        if name in REDUCTIONS:
            return self.reduction(node, owner, name, node.keywords, args)
        if name in ("astype", "clip", "copy"):
            self.bare(node, f"x.{name}")
        if name == "astype" and len(node.args) == 1:
            try:
                dtype = np.dtype(self.on_host(node.args[0]))
            except Exception as err:
                raise self.refuse(node, f"astype takes a dtype the host knows before the run ({err})") from err
            return self.elementwise(node, lambda c: typed(c[0], dtype), dtype, owner)
        if name == "clip" and len(args) == 2:
            found = self.extra_function(node, "clip", [owner, *args])
            assert found is not None
            return found
        if name == "copy" and not node.args:
            return self.elementwise(node, lambda c: c[0], owner.dtype, owner)
        if name in ("cumsum", "cumprod"):
            return self.scan(node, owner, name, node.func)
        if name in ("conj", "conjugate") and not args:
            self.bare(node, f"x.{name}")
            return self.complex_part(node, owner, name)
        found = self.extra_method(node, owner, name, args)
        if found is not None:
            return found
        raise self.refuse(node, f"the method {name} of an array is not one svod's array expressions have")

    def reduction(self, node: ast.Call, operand: Expr, name: str, keywords: list[ast.keyword],
                  args: list[Value]) -> Value:
        """``np.sum`` and the other ``REDUCTIONS`` (the method, where ``args`` holds every positional argument)
        with ``axis`` and ``keepdims``, and ``dtype`` where NumPy's function takes it (the elements cast to it
        one by one, and reduced in it, as NumPy's); any other argument refused, naming it."""
        method = len(args) == len(node.args)
        positional = node.args if method else node.args[1:]
        if operand.dtype.kind == "c" and name in ORDERED:
            raise self.refuse(node, f"{name} of a complex array: NumPy orders complex numbers by real part, then "
                                    "imaginary, and svod orders none (as Python); reduce np.abs(x), x.real or x.imag")
        if reads_masked(operand):
            return self.masked_reduction(node, operand, name, keywords, positional)
        takes = ("axis", "dtype", "keepdims") if name in ("sum", "prod", "mean") else ("axis", "keepdims")
        given = self.passed(node, getattr(np, name), takes, node.func if method else None)
        axis_node = given.get("axis")
        keepdims = bool(self.known(given["keepdims"], f"np.{name}'s keepdims")) if "keepdims" in given else False
        within = self.accumulated(node, given["dtype"], name) if "dtype" in given else None
        if within is not None:
            operand = self.elementwise(node, lambda c: typed(c[0], within), within, operand)
        ndim = len(operand.shape)
        if axis_node is None:
            axes = tuple(range(ndim))
        else:
            picked = self.on_host(axis_node)
            picked = picked if isinstance(picked, tuple) else (picked,)
            if any(not -ndim <= a < ndim for a in picked):
                raise self.refuse(node, f"axis {picked} is out of bounds for an array of {ndim} dimension(s)")
            axes = tuple(sorted(a % ndim for a in picked))
        if any(extents.low(operand.shape[a]) <= 0 for a in axes) and name in ORDERED:
            if all(isinstance(operand.shape[a], int) for a in axes):
                raise self.refuse(node, f"{name} of an empty axis has no identity (NumPy raises too)")
            raise self.refuse(node, f"{name} of an axis whose length (`{extents.shown(operand.shape)}`) may be 0 at "
                                    "run time, where it has no identity (NumPy raises)")
        if name in ("argmax", "argmin") and axis_node is not None and len(axes) != 1:
            raise self.refuse(node, f"{name} takes one axis, or none")
        sample = getattr(np, name)(np.ones([1] * ndim, operand.dtype), axis=axes if name[:3] != "arg" else None,
                                   **({"dtype": operand.dtype} if within is not None else {}))
        dtype = np.asarray(sample).dtype
        shape = tuple(1 if a in axes else s for a, s in enumerate(operand.shape) if keepdims or a not in axes)
        reduced = Reduced(shape, dtype, name, operand, axes, keepdims)
        if not shape and not keepdims:
            return Whole(reduced)
        return reduced

    def flat(self, node: ast.AST, value: Value) -> Expr:
        if not isinstance(value, Expr) or len(value.shape) != 1:
            raise self.refuse(node, "np.outer takes two 1-D arrays here")
        return value

    def matmul(self, node: ast.BinOp | ast.Call, a: Value, b: Value) -> Value:
        if not isinstance(a, Expr) or not isinstance(b, Expr) or not 1 <= len(a.shape) <= 3 or \
                not 1 <= len(b.shape) <= 3 or {len(a.shape), len(b.shape)} == {1, 3}:
            raise self.refuse(node, "@ takes arrays of 1 or 2 dimensions, or a batch of matrices (3)")
        inner_b = b.shape[0] if len(b.shape) == 1 else b.shape[-2]
        if a.shape[-1] != inner_b:
            hint = "" if isinstance(inner_b, int) and isinstance(a.shape[-1], int) else \
                " (svod multiplies along lengths known only at run time where it proves them equal)"
            raise self.refuse(node, f"@ of shapes {extents.shown(a.shape)} and {extents.shown(b.shape)}: "
                                    f"{a.shape[-1]} != {inner_b}{hint}")
        if len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] != b.shape[0]:
            raise self.refuse(node, f"@ of batches of {a.shape[0]} and {b.shape[0]} matrices")
        sides = [node.left, node.right] if isinstance(node, ast.BinOp) else node.args
        a, b = (self.operand(sides[0], a) if len(b.shape) > 1 else a), \
            (self.operand(sides[1], b) if len(a.shape) > 1 else b)
        batch = a.shape[:1] if len(a.shape) == 3 else b.shape[:1] if len(b.shape) == 3 else ()
        rows = a.shape[len(a.shape) - 2:-1]
        columns = b.shape[-1:] if len(b.shape) > 1 else ()
        shape = (*batch, *rows, *columns)
        dtype = _result_dtype(self, node, np.matmul, a, b)
        product = Product(tuple(shape), dtype, a, b)
        return Whole(product) if not shape else product


def _shape_number(shape: tuple[Any, ...], at: Scalar) -> int | None:
    """``shape[at]``, where ``shape`` is numbers and ``at`` an index into it that the host knows; else None."""
    if at.run_only or not all(type(d) is int for d in shape) or not isinstance(at.held, (int, np.integer)) or \
            not -len(shape) <= at.held < len(shape):
        return None
    return int(shape[at.held])


def _without_ellipsis(items: list[ast.expr], ndim: int) -> list[ast.expr]:
    """``items`` with an ``...`` spelled as the full slices it stands for."""
    spots = [k for k, item in enumerate(items) if isinstance(item, ast.Constant) and item.value is Ellipsis]
    if not spots:
        return items
    named = sum(1 for item in items if not (isinstance(item, ast.Constant) and item.value in (None, Ellipsis)))
    full = [ast.Slice() for _ in range(max(ndim - named, 0))]
    return [*items[:spots[0]], *full, *items[spots[0] + 1:]]


_MASKED_LENGTH = ("{} is of the mask's count, a number NumPy gives as a Python int, which svod knows only after "
                  "the run: count the mask into an array of a dtype of yours (`n[0] = np.count_nonzero(m)`)")
"""Why the length of an ``x[mask]`` is refused (``svod.frontend.compactions``)."""


def _attribute(owner: Expr, attr: str) -> Any:
    return {"shape": owner.shape, "size": extents.elements(owner.shape), "ndim": len(owner.shape)}[attr]


def _literal(node: ast.expr) -> Any:
    """The number a literal exponent is (``2``, ``-1``, ``0.5``, ``-True``: the int -1, as Python negates a
    bool), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
            isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)):
        return -node.operand.value if isinstance(node.op, ast.USub) else +node.operand.value
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    return None


def _run_time_shortcuts(sample: Any, sqrt: Callable[[list[ast.expr]], ast.expr]
                        ) -> Callable[[list[ast.expr]], ast.expr]:
    """A complex array's ``** p`` where only the run knows ``p``: the operator's shortcuts chosen by the value the
    element computes with, for the type whose value takes each (a Python int's -1 and 2, a Python float's 0.5),
    else the power loop."""
    shortcuts: list[tuple[Any, Callable[[list[ast.expr]], ast.expr]]] = []
    if type(sample) is int:
        shortcuts = [(-1, lambda c: call(numpy("reciprocal"), c[0])), (2, lambda c: ast.BinOp(c[0], ast.Mult(), c[0]))]
    elif type(sample) is float:
        shortcuts = [(0.5, sqrt)]

    def combine(c: list[ast.expr]) -> ast.expr:
        chosen: ast.expr = ast.BinOp(c[0], ast.Pow(), c[1])
        for held, shortcut in shortcuts:
            chosen = ast.IfExp(ast.Compare(c[1], [ast.Eq()], [constant(held)]), shortcut(c), chosen)
        return chosen
    return combine


def _whole(value: Any) -> bool:
    """Whether an exponent is a whole number (not a bool) that a complex power loop takes as a constant."""
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
        return False
    return bool(np.isfinite(value)) and float(value).is_integer() and abs(float(value)) < 2.0 ** 62


def _inexact(sample: Any) -> bool:
    """Whether an exponent is a float (Python's or NumPy's): NumPy's real power loop takes its shortcut for one."""
    return isinstance(sample, (float, np.floating))


def _as(element: ast.expr, operand: Value, dtype: np.dtype) -> ast.expr:
    """An operand's element as ``dtype`` (a conversion only where it is of another)."""
    return element if isinstance(operand, Expr) and operand.dtype == dtype else typed(element, dtype)


def _result_dtype(lowering: ArrayValues, node: ast.AST, fn: Callable[..., Any], *operands: Value) -> np.dtype:
    """The dtype NumPy gives ``fn`` of the operands: ``fn`` applied to one-element arrays of their dtypes (a
    Python number as itself: weak, as NEP 50 has it); where NumPy refuses them, a refusal at ``node``."""
    found: dict[np.dtype, tuple[Any, ...]] = {}
    for samples in itertools.product(*(o.samples if isinstance(o, Scalar) else (o.sample,) for o in operands)):
        with np.errstate(all="ignore"):
            try:
                found.setdefault(np.asarray(fn(*samples)).dtype, samples)
            except Exception as err:  # NumPy's own complaint, at the user's line
                raise lowering.refuse(node, f"NumPy refuses this for operands of {_kinds(operands, samples)} "
                                            f"({err})") from err
    if len(found) > 1:
        raise lowering.refuse(node, _of_types(operands, found))
    unknown = _value_decides(lowering, fn, operands)
    if unknown is not None:
        dtypes = " and ".join(sorted({str(o.dtype) for o in operands if isinstance(o, Expr)}))
        raise lowering.refuse(node, f"`{ast.unparse(unknown.node)}` is a Python int only the run knows, and NumPy "
                                    f"raises OverflowError here for a value that does not fit {dtypes}, which the "
                                    f"host cannot check; make it a NumPy integer of the dtype you mean "
                                    f"(np.int64(...)) or compute it from the call's arguments")
    return next(iter(found))


def _value_decides(lowering: ArrayValues, fn: Callable[..., Any], operands: Sequence[Value]) -> Scalar | None:
    """A Python int among ``operands`` that only the run knows, where NumPy's ``fn`` of them refuses some of its
    values (one out of the range of an integer array's dtype: ``a_i8 + k``), which the host cannot check: one it
    may hold (any, or a loop variable's, where the host knows their bounds: ``SliceBounds.turns``, which makes
    the plan for the values of the scalars they read)."""
    samples = [o.samples[0] if isinstance(o, Scalar) else o.sample for o in operands]
    for position, operand in enumerate(operands):
        if not (isinstance(operand, Scalar) and operand.run_only and type(operand.held) is int):
            continue
        if any(_overflows(fn, samples, position, value) for value in _OUT_OF_EVERY_RANGE):
            span = lowering.span(operand.node)
            if span is None or any(_overflows(fn, samples, position, value) for value in span):
                return operand
    return None


def _overflows(fn: Callable[..., Any], samples: Sequence[Any], position: int, value: int) -> bool:
    """Whether NumPy's ``fn`` of ``samples``, ``value`` in place of the one at ``position``, raises
    ``OverflowError`` (an int out of an array dtype's range). Any other complaint is not the value's:
    ``_result_dtype`` has already refused what NumPy refuses for the types."""
    with np.errstate(all="ignore"):
        try:
            fn(*samples[:position], value, *samples[position + 1:])
        except OverflowError:
            return True
        except Exception:  # (reported by _result_dtype, for the operands' types)
            return False
    return False


_OUT_OF_EVERY_RANGE = (2**62, -1)
"""Python ints that an integer array of every dtype but int64 refuses one of (the first no dtype narrower than 64
bits holds, the second no unsigned one): a Python int the run holds is an int64, which int64 takes whole."""


def _combined(node: ast.expr, fn: Callable[..., Any], *operands: Scalar) -> Scalar:
    """The scalar ``fn`` of scalars ``operands`` computes: its value where the host knows theirs, and a value of
    each type it may have."""
    held = _apply(fn, *(o.held for o in operands))
    run_only = any(o.run_only for o in operands)
    if not any(o.alternatives for o in operands):
        return Scalar(node, held, run_only=run_only)
    types = types_once(tuple(_apply(fn, *chosen) for chosen in itertools.product(*(o.samples for o in operands))))
    return Scalar(node, types[0], types[1:], run_only=run_only)


def _of_types(operands: Sequence[Value], found: dict[np.dtype, tuple[Any, ...]]) -> str:
    """Why the dtype of a result is not one the host knows: a scalar of several types (``Scalar.alternatives``)."""
    several = next(o for o in operands if isinstance(o, Scalar) and o.alternatives)
    results = "; ".join(f"{dtype} where it is {type_name(samples[operands.index(several)])}"
                        for dtype, samples in found.items())
    return (f"`{ast.unparse(several.node)}` is {ambiguous_types(several)} on different paths to here, and NumPy's "
            f"result is of another dtype for each ({results}); give it one type on every path (np.float64(0.0) "
            f"where a Python 0.0 starts what becomes a NumPy float64)")


def _described(value: Value) -> str:
    if isinstance(value, Expr):
        return f"an array of shape {extents.shown(value.shape)} and dtype {value.dtype}"
    return f"a scalar ({type(value.sample).__name__})"


def _python_bool(op: type[ast.boolop], samples: Sequence[Any]) -> Any:
    """What Python's ``and`` (``or``) of ``samples`` gives: the first false (true) operand, else the last."""
    for sample in samples[:-1]:
        if bool(sample) is (op is ast.Or):
            return sample
    return samples[-1]


def _kinds(operands: Sequence[Value], samples: Sequence[Any] | None = None) -> str:
    if samples is None:
        samples = [o.samples[0] if isinstance(o, Scalar) else o.sample for o in operands]
    return " and ".join(str(o.dtype) if isinstance(o, Expr) else type(sample).__name__
                        for o, sample in zip(operands, samples, strict=True))


def _apply(fn: Callable[..., Any], *samples: Any) -> Any:
    with np.errstate(all="ignore"):
        try:
            return fn(*samples)
        except Exception:
            return 0


def broadcast_shape(lowering: ArrayValues, node: ast.AST, shapes: Sequence[tuple[Dim, ...]],
                     to: tuple[Dim, ...] | None = None) -> tuple[Dim, ...]:
    """NumPy's broadcast of ``shapes``; lengths the host does not know before the run broadcast where they
    are provably equal (``extents.broadcast``)."""
    shape = extents.broadcast(shapes)
    if shape is None:
        static = all(extents.is_static(s) for s in shapes)
        raise lowering.refuse(node, f"shapes {' and '.join(map(extents.shown, shapes))} do not broadcast" + (
            "" if static else " (svod broadcasts lengths known only at run time where it proves them equal)"))
    if to is not None and shape != to:
        raise lowering.refuse(node, f"a value of shape {extents.shown(shapes[1])} cannot be stored into an array view "
                                    f"of shape {extents.shown(to)}")
    return shape


_VALUES: dict[type, Callable[[ArrayValues, Any], Value]] = {
    ast.Constant: ArrayValues.literal, ast.Name: ArrayValues.name_value, ast.Attribute: ArrayValues.attribute,
    ast.Subscript: ArrayValues.subscript, ast.BinOp: ArrayValues.binop, ast.UnaryOp: ArrayValues.unary,
    ast.Compare: ArrayValues.compare, ast.Call: ArrayValues.call_value, ast.Tuple: ArrayValues.numbers_value,
    ast.IfExp: ArrayValues.choice, ast.BoolOp: ArrayValues.either,
}
"""The array expression each kind of AST node makes (``ArrayValues.value``)."""
