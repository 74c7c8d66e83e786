"""A kernel's expressions to values: names (locals, then the globals and closure the source resolves in, then
builtins), attributes (an array's shape, dtype, size; math and numpy names), subscripts (an array's element,
a shape's entry), operators, comparisons, ``and``/``or`` and ``x if c else y`` (their right sides gated), and
calls: casts, builtins, math functions, ``np.random`` draws (``svod.frontend.randoms``), and ``@svod.func``
helpers, inlined."""

from __future__ import annotations

import ast
import builtins
import inspect
import math as pymath
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from svod.dtype import DType, dtypes
from svod.frontend import pylang
from svod.frontend.arithmetic import BINARY, COMPARE, builtin_extreme, ufunc_extreme
from svod.frontend.randoms import Randoms
from svod.frontend.returns import returns_of, without_returns
from svod.frontend.source import Source
from svod.frontend.values import (
    BUILTINS,
    COMPLEX_LOCAL,
    NUMPY_BUILTINS,
    NUMPY_COMPLEX,
    NUMPY_LOGICAL,
    NUMPY_MATH,
    NUMPY_PREDICATES,
    ArrayValue,
    Builtin,
    ComplexArray,
    ComplexMethod,
    ComplexValue,
    MathFunction,
    RandomFunction,
    Undefined,
    describe,
    is_atomic,
    is_number,
    math_function,
)
from svod.ir import Ops, UOp


class Expressions(Randoms):
    """Expressions to values (``expr``), through the draws, memory and arithmetic below."""

    def expr(self, node: ast.expr) -> Any:
        method = _EXPRESSIONS.get(type(node))
        if method is None:
            raise self.unsupported(node)
        return getattr(self, method)(node)

    def _constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, (bool, int, float)):
            return node.value
        if isinstance(node.value, complex):
            return ComplexValue(node.value.real, node.value.imag)
        raise self.refuse(node, f"the constant {node.value!r} is not a number")

    # ---- names ------------------------------------------------------------------------------------------

    def _name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, Undefined):
                raise self.refuse(node, f"{name} is not defined here: {value.why}")
            return self.complex_local(name, node) if value is COMPLEX_LOCAL else value
        if name in self.source.names:
            return self.static(self.source.names[name], name, node)
        if name in BUILTINS:
            return BUILTINS[name]
        raise self.refuse(node, f"name {name} is not defined")

    def static(self, value: Any, name: str, node: ast.AST) -> Any:
        """A global the kernel names: a number (a constant of the kernel, read when it is translated; a NumPy
        scalar keeps its dtype, a Python number is weak), svod or one of its names, a math module, numpy,
        a ``@svod.func``."""
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            return UOp.const(dtypes.from_numpy(value.dtype), value.item())  # typed, as NumPy computes with it
        if is_number(value):
            return value
        if isinstance(value, complex):  # a Python complex: weak; a NumPy one's parts are typed
            return ComplexValue(value.real, value.imag)
        if isinstance(value, np.complexfloating) and value.dtype in COMPLEX_PART_DTYPES:
            part = COMPLEX_PART_DTYPES[value.dtype]
            return ComplexValue(*(UOp.const(part, p) for p in (float(value.real), float(value.imag))))
        if isinstance(value, (types.ModuleType, pylang.Cast, pylang.Func)) or value is pylang.math or \
                value is pylang.prange or is_atomic(value) or any(value is key for key in ORDER_KEYS):
            return value
        if isinstance(value, type) and issubclass(value, np.generic) and value is not np.generic:
            return pylang.Cast(dtypes.from_numpy(value))
        if getattr(value, "__self__", None) is np.random.mtrand._rand:  # from numpy.random import normal
            return self.random_function(node, value.__name__)
        if isinstance(value, RandomFunction):  # svod's own, in a jitted function's phase
            return value
        function = math_function(value)
        if function is not None:
            return function
        name_of = getattr(value, "__name__", None)
        if isinstance(name_of, str) and name_of in BUILTINS and value is getattr(builtins, name_of, None):
            return BUILTINS[name_of]
        if hasattr(value, "svod_kernel"):
            raise self.refuse(node, f"{name} is an @svod.kernel: a kernel cannot call another; make the helper "
                                    "@svod.func")
        if callable(value):
            raise self.refuse(node, f"{name} is {describe(value)}, neither svod's nor an @svod.func: a kernel calls "
                                    "svod's names, math functions and @svod.func helpers")
        raise self.refuse(node, f"{name} is {describe(value)}, which a kernel cannot use (numbers, svod's names, "
                                "math, numpy's math and @svod.func helpers it can)")

    def static_dtype(self, node: ast.expr) -> DType:
        value = self.expr(node)
        if isinstance(value, pylang.Cast):
            return value.dtype
        raise self.refuse(node, "a local's annotation is a svod dtype (svod.float32)")

    def _attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, ComplexValue):
            value = self.complex_attribute(node, base, attr)
            return ComplexMethod(base, attr) if isinstance(value, ComplexValue) else value
        if isinstance(base, ComplexArray):
            if attr in ("shape", "ndim", "size"):
                return self._attribute_of_dims(base.dims, attr)
            raise self.refuse(node, f"a complex array has shape, ndim and size in a kernel, not {attr}")
        if isinstance(base, ArrayValue):
            if attr in ("shape", "ndim", "size"):
                return self._attribute_of_dims(base.dims, attr)
            if attr == "dtype":
                return pylang.Cast(base.dtype)
            raise self.refuse(node, f"an array has shape, ndim, dtype and size, not {attr}")
        if base is np and attr == "random":
            return np.random
        if base is np.random:
            return self.random_function(node, attr)
        if base is pylang.math or base is pymath or base is np:
            if attr in ("pi", "e", "inf", "nan"):
                return float(getattr(pymath, attr))
            if (base is np and attr in NUMPY_BUILTINS) or \
                    (base is pymath and attr in NUMPY_PREDICATES and hasattr(base, attr)):
                return NUMPY_BUILTINS[attr]  # math.isnan is np.isnan of a number
            name = attr if base is not np else NUMPY_MATH.get(attr)
            if name is not None and name in pylang.MATH_FUNCTIONS and (base is pylang.math or hasattr(base, attr)):
                return MathFunction(name)
            if base is np and isinstance(getattr(np, attr, None), np.generic):
                return self.static(getattr(np, attr), f"numpy.{attr}", node)  # np.True_: a NumPy bool constant
            if base is np and hasattr(np, attr) and isinstance(getattr(np, attr), type) and \
                    issubclass(getattr(np, attr), np.generic):
                return pylang.Cast(dtypes.from_numpy(getattr(np, attr)))
            if base is np and attr == "linalg":
                raise self.refuse(node, "np.linalg inside a kernel or a work item is not supported: a jitted "
                                        "function's np.linalg is a statement of its own, on whole arrays (a prange "
                                        "loop holding one runs its turns in order)")
            raise self.refuse(node, f"{'svod.math' if base is pylang.math else base.__name__}.{attr} is not a math "
                                    f"function a kernel has ({', '.join(sorted(pylang.MATH_FUNCTIONS))})")
        if isinstance(base, types.ModuleType):
            if not hasattr(base, attr):
                raise self.refuse(node, f"{base.__name__} has no {attr}")
            return self.static(getattr(base, attr), f"{base.__name__}.{attr}", node)
        raise self.refuse(node, f"attribute {attr} of {describe(base)}")

    def _attribute_of_dims(self, dims: tuple[Any, ...], attr: str) -> Any:
        """An array's ``shape``, ``ndim`` or ``size``, from its dims."""
        if attr == "shape":
            return dims
        if attr == "ndim":
            return len(dims)
        total: Any = 1
        for d in dims:
            total = self.binary("*", total, d)
        return total

    # ---- subscripts and tuples --------------------------------------------------------------------------

    def _subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        if isinstance(base, tuple):
            index = self.expr(node.slice)
            if isinstance(index, UOp) and index.op is Ops.CONST and index.dtype == dtypes.bool:
                raise self.refuse(node.slice, "a tuple (a shape) is indexed by an integer constant (Python refuses "
                                              "a NumPy bool: tuple indices must be integers or slices, not "
                                              "numpy.bool); int(...) it")
            if not isinstance(index, int):  # (a bool is the int it is: shape[True] is shape[1])
                raise self.refuse(node.slice, "a tuple (a shape) is indexed by an integer constant")
            try:
                return base[index]
            except IndexError:
                raise self.refuse(node, f"index {index} is outside a tuple of {len(base)}") from None
        array, index = self.subscript(node)
        if isinstance(array, ComplexArray):
            return self.complex_load(array, index)
        return self.element(array, index).load()

    def subscript(self, node: ast.Subscript) -> tuple[Any, tuple[Any, ...]]:
        """An array's subscript: the array (an ``ArrayValue`` or a ``ComplexArray``) and its indices."""
        array = self.expr(node.value)
        if not isinstance(array, (ArrayValue, ComplexArray)):
            raise self.refuse(node.value, f"only array arguments are indexed, not {describe(array)}")
        raw = node.slice
        values = [self.expr(e) for e in raw.elts] if isinstance(raw, ast.Tuple) else [self.expr(raw)]
        flat: list[Any] = []
        for v in values:
            flat.extend(v if isinstance(v, tuple) else (v,))
        return array, self.indices(node, array, tuple(flat))

    def indices(self, node: ast.AST, array: ArrayValue | ComplexArray, index: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(index) != len(array.dims):
            raise self.refuse(node, f"{array.name} has {len(array.dims)} dimension(s) and takes as many indices, "
                                    f"got {len(index)}")
        out = []
        for i, dim in zip(index, array.dims, strict=True):
            if isinstance(i, bool) or (isinstance(i, UOp) and i.dtype == dtypes.bool):
                raise self.refuse(node, f"an index is an integer, not {describe(i)}: NumPy reads a bool index as a "
                                        "0-d mask (x[True] is x with a new axis of 1, x[False] an empty one), "
                                        "which an element of a kernel is not; int(...) it for an element")
            if not (isinstance(i, int) or (isinstance(i, UOp) and i.dtype.is_int)):
                raise self.refuse(node, f"an index is an integer, not {describe(i)}")
            if isinstance(i, int) and i < 0:  # a[-1]: from the end
                out.append(self.binary("+", dim, i))
            elif isinstance(i, UOp) and i.vmin < 0 and not any(u.op is Ops.RANGE for u in i.toposort()):
                out.append(_from_the_end(i, dim))
            else:
                out.append(i)
        return tuple(out)

    def _tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return tuple(self.expr(e) for e in node.elts)

    # ---- operators and conditions -----------------------------------------------------------------------

    def _bin_op(self, node: ast.BinOp) -> Any:
        op = BINARY.get(type(node.op))
        if op is None:
            raise self.unsupported(node.op)
        return self.binary(op, self.expr(node.left), self.expr(node.right))

    def _unary_op(self, node: ast.UnaryOp) -> Any:
        value = self.expr(node.operand)
        if isinstance(value, ComplexValue):
            return self.complex_unary(node.op, value, node)
        if is_number(value):
            ops: dict[type, Callable[[Any], Any]] = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v,
                                                     ast.Not: lambda v: not v, ast.Invert: lambda v: ~v}
            return ops[type(node.op)](value)
        if not isinstance(value, UOp):
            raise self.refuse(node, f"{describe(value)} in arithmetic")
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.Not):
            return self.truth(value, node).ne(True)
        return ~value

    def _bool_op(self, node: ast.BoolOp) -> Any:
        result = self.expr(node.values[0])
        for operand in node.values[1:]:
            if is_number(result):  # Python's short circuit on a constant
                if (not result) if isinstance(node.op, ast.And) else bool(result):
                    return result
                result = self.expr(operand)
                continue
            left = self.truth(result, node)
            drawn = self.hidden_locals()
            with self.under(left if isinstance(node.op, ast.And) else left.ne(True)):
                right = self.expr(operand)
            self.drew_where(left if isinstance(node.op, ast.And) else left.ne(True), drawn, node)
            right = right if is_number(right) else self.truth(right, operand)
            if is_number(right):
                result = left if bool(right) == isinstance(node.op, ast.And) else bool(right)
            elif isinstance(node.op, ast.And):  # a right side that reads memory only where the left holds
                result = left.where(right, False) if right.reads_memory else left & right
            else:
                result = left.where(True, right) if right.reads_memory else left | right
        return result

    def _compare(self, node: ast.Compare) -> Any:
        result: Any = True
        left = self.expr(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            drawn = self.hidden_locals()
            right = self.expr(comparator)
            if isinstance(result, UOp):  # Python computes it only where the comparisons before it hold
                self.drew_where(result, drawn, node)
            elif not result:
                self.env.update(drawn)
            name = COMPARE.get(type(op))
            if name is None:
                raise self.unsupported(op)
            test = self.compare(name, left, right, node)
            result = test if result is True else (result and test) if is_number(result) and is_number(test) \
                else self.logical_and(result, test)
            left = right
        return result


    def _if_exp(self, node: ast.IfExp) -> Any:
        condition = self.expr(node.test)
        if is_number(condition):
            return self.expr(node.body if condition else node.orelse)
        cond = self.truth(condition, node.test)
        drawn = self.hidden_locals()
        with self.under(cond):
            chosen = self.expr(node.body)
        taken = self.hidden_locals()
        self.env.update(drawn)
        with self.under(cond.ne(True)):
            other = self.expr(node.orelse)
        self.drew_where(cond.ne(True), taken, node)
        return self.select(cond, chosen, other, node)

    @contextmanager
    def under(self, cond: UOp) -> Iterator[None]:
        """Translate what follows where ``cond`` holds too (a branch, the right side of ``and``): its loads
        read nothing elsewhere."""
        saved = self.gate
        self.gate = cond if saved is None else saved & cond
        try:
            yield
        finally:
            self.gate = saved

    # ---- calls ------------------------------------------------------------------------------------------

    def _call(self, node: ast.Call) -> Any:
        callee = self.expr(node.func)
        if isinstance(callee, pylang.Func):
            return self.call(node)
        if isinstance(callee, RandomFunction):
            value = self.random_draw(node, callee)
            if value is None:
                raise self.refuse(node, "np.random.seed has no value: call it as a statement of its own")
            return value
        if node.keywords:
            raise self.refuse(node, "keyword arguments are for @svod.func helpers only")
        args = [self.expr(a) for a in node.args]
        if isinstance(callee, ComplexMethod):
            if args:
                raise self.refuse(node, f"{callee.name}() takes no arguments")
            return self.complex_attribute(node, callee.value, callee.name)
        if isinstance(callee, pylang.Cast):
            if len(args) != 1:
                raise self.refuse(node, f"{callee!r} converts one value")
            return self.typed(self.cast(self.fitting(args[0], callee.dtype), callee.dtype))
        if any(callee is key for key in ORDER_KEYS):
            return from_key(args[0]) if callee is pylang.from_key else order_key(args[0], callee is pylang.max_key)
        if isinstance(callee, MathFunction):
            return self.math(node, callee.name, args)
        if isinstance(callee, Builtin):
            return self.builtin(node, callee.name, args)
        if callee is pylang.prange:
            raise self.refuse(node, "svod.prange is a loop: 'for i in svod.prange(n)'")
        if is_atomic(callee):
            raise self.refuse(node, f"svod.{callee.__name__} is a statement of its own and has no value")
        raise self.refuse(node, f"{describe(callee)} is neither svod's nor an @svod.func: a kernel calls svod's "
                                "names, math functions and @svod.func helpers")

    def random_draw(self, node: ast.Call, callee: RandomFunction) -> Any:
        """A call of ``np.random.<name>``: its arguments, then the draw (None for ``seed``)."""
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.refuse(node, f"np.random.{callee.name} takes its arguments one by one (no * or **)")
        args = [self.expr(a) for a in node.args]
        keywords = {str(k.arg): self.expr(k.value) for k in node.keywords}
        return self.random_call(node, callee, args, keywords)

    def builtin(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        if name == "range":
            raise self.refuse(node, "range is a loop: 'for i in range(n)'")
        if name == "complex" or name[3:] in NUMPY_COMPLEX:
            return self.complex_builtin(node, name, args)
        if name in ("min", "max") and len(args) >= 2:
            result = args[0]
            for a in args[1:]:
                if is_number(result) and is_number(a):
                    result = min(result, a) if name == "min" else max(result, a)
                elif (decided := _beyond_dtype(name, result, a)) is not None:
                    result = decided
                else:
                    result = builtin_extreme(_EXTREME_OPS[name], *self.operands(result, a, node))
            return result
        if name in ("np.maximum", "np.minimum"):
            if len(args) != 2:
                raise self.refuse(node, f"{name} takes two values in a kernel")
            if all(is_number(a) for a in args):
                return getattr(np, name[3:])(*args).item()
            return ufunc_extreme(_EXTREME_OPS[name[3:]], *self.operands(args[0], args[1], node))
        if name[3:] in NUMPY_PREDICATES or name[3:] in NUMPY_LOGICAL:
            return self.numpy_boolean(node, name[3:], args)
        if name in ("min", "max"):
            raise self.refuse(node, f"{name} takes two or more values in a kernel (a sequence, or one value, it "
                                    "cannot take)")
        if name == "round" and len(args) != 1:
            raise self.refuse(node, "round(x, ndigits) is not supported in a kernel (Python rounds the decimal the "
                                    "float is); round(x) and svod.math.round(x * 100.0) / 100.0 are")
        if len(args) != 1:
            raise self.refuse(node, f"{name} takes one argument here")
        value = args[0]
        if name == "round":  # Python's: to the nearest int, a half to the even one (a float's, as int() casts it)
            whole = value.round() if isinstance(value, UOp) and value.dtype.is_float else value
            return round(value) if is_number(value) else self.cast(whole, self.platform.integer)
        if name == "len":
            if isinstance(value, (ArrayValue, ComplexArray)):
                return value.dims[0]
            if isinstance(value, tuple):
                return len(value)
            raise self.refuse(node, f"len of {describe(value)}")
        if name == "abs":
            if isinstance(value, ComplexValue):
                return self.complex_math(node, "abs", args)
            return abs(value) if is_number(value) or isinstance(value, UOp) else self._bad(node, value)
        if name == "bool":
            return bool(value) if is_number(value) else self.truth(value, node)
        dtype = self.platform.integer if name == "int" else self.platform.real
        return self.cast(value, dtype)  # typed, as numba's int() and float(); of a weak value, weak (float(n))

    def numpy_boolean(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        """``np.isnan(x)`` and the other predicates, ``np.logical_and(a, b)`` and the other logical functions:
        a bool, computed now of numbers."""
        arity = NUMPY_LOGICAL.get(name, 1)
        if len(args) != arity:
            raise self.refuse(node, f"np.{name} takes {arity} value(s) in a kernel")
        if all(is_number(a) for a in args):
            return bool(getattr(np, name)(*args))
        if name in NUMPY_PREDICATES:
            value = args[0]
            if not isinstance(value, UOp):
                return self._bad(node, value)
            if not value.dtype.is_float:
                return value.lt(0) if name == "signbit" else name == "isfinite"
            return _float_class(value, name)
        left, right = (UOp.const(dtypes.bool, bool(a)) if is_number(a) else self.truth(a, node)
                       for a in (*args, True)[:2])
        if name == "logical_not":
            return left.ne(True)
        return {"logical_and": left & right, "logical_or": left | right, "logical_xor": left.ne(right)}[name]

    def _bad(self, node: ast.AST, value: Any) -> Any:
        raise self.refuse(node, f"{describe(value)} in arithmetic")

    def math(self, node: ast.Call, name: str, args: list[Any]) -> Any:
        method, arity = pylang.MATH_FUNCTIONS[name]
        if any(isinstance(a, ComplexValue) for a in args):
            return self.complex_math(node, name, args)
        if len(args) != arity:
            raise self.refuse(node, f"{name} takes {arity} argument(s)")
        if all(is_number(a) for a in args) and hasattr(pymath, name) and name not in ("floor", "ceil", "trunc"):
            return float(getattr(pymath, name)(*args))  # a constant: computed now, in float64
        first = args[0]
        if is_number(first) or (isinstance(first, UOp) and not first.dtype.is_float):
            others = [a for a in args[1:] if isinstance(a, UOp) and a.dtype.is_float]
            first = self.cast(first, others[0].dtype if others else self.platform.real)
        if not isinstance(first, UOp):
            return self._bad(node, first)
        rest = [self.cast(a, first.dtype) for a in args[1:]]
        return getattr(first, method)(*rest)

    def call(self, node: ast.Call, used: bool = True) -> Any:
        """A ``@svod.func`` call, inlined: its parameters bound to the arguments' values, its body stated in a
        scope of its own, its returns (early ones too: ``svod.frontend.returns``) assigning the call's value;
        ``used``: whether the caller reads the value."""
        helper = self.expr(node.func)
        assert isinstance(helper, pylang.Func)
        if helper in self.inlining:
            raise self.refuse(node, f"{helper.fn.__qualname__} calls itself: recursion is not supported in a kernel")
        if helper.source is None:
            helper.source = Source.of(helper.fn)
        source = helper.source
        try:
            bound = inspect.signature(helper.fn).bind(*[self.expr(a) for a in node.args],
                                                       **{k.arg: self.expr(k.value) for k in node.keywords if k.arg})
        except TypeError as err:
            raise self.refuse(node, f"{helper.fn.__qualname__}: {err}") from None
        bound.apply_defaults()
        saved = (self.env, self.source)
        self.env, self.source = {**self.hidden_locals(), **bound.arguments}, source
        self.inlining.append(helper)
        try:
            body = list(source.node.body)
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            returned = returns_of(body)
            if used and not returned.always and not returned.nothing:
                raise self.refuse(node, f"{helper.fn.__qualname__} returns a value on some ways through it only (on "
                                        "others None), and its value is used")
            result = ast.Name(RESULT, ast.Store())
            self.block(without_returns(body, None if returned.nothing else result, RETURNED))
            return self.lookup(RESULT, node) if returned.always else None
        finally:
            self.inlining.pop()
            hidden = self.hidden_locals()  # the helper's draws count in the caller's stream
            self.env, self.source = saved
            self.env.update(hidden)



# ---- helpers --------------------------------------------------------------------------------------------

RESULT = "_svod_result"
"""The local of an inlined ``@svod.func`` that its returns assign (in the helper's own scope)."""
RETURNED = "_svod_returned"
"""The local of an inlined ``@svod.func`` that says whether it returned, where a return is inside a loop."""

COMPLEX_PART_DTYPES = {np.dtype(np.complex64): dtypes.float32, np.dtype(np.complex128): dtypes.float64}
"""The dtype of a NumPy complex constant's parts."""
_EXTREME_OPS = {"max": Ops.MAX, "min": Ops.MIN, "maximum": Ops.MAX, "minimum": Ops.MIN}
"""The op of Python's ``max``/``min`` and of NumPy's ``maximum``/``minimum``."""


def _from_the_end(index: UOp, dim: int | UOp) -> UOp:
    """A run-time scalar index that may be negative (``x[n]``, ``n = -2``) as Python reads it: from the end,
    once; the access checks the index it makes (one still outside, ``n = -6`` of 5 elements, is refused at run
    time). An index a loop makes (``x[i - 1]``) is checked as it is: a loop's index past the start is a stencil's
    mistake more often than a read from the end, and wrapping it would hide the store's pattern from the race
    check."""
    at = index.cast(dtypes.index)
    size = dim if isinstance(dim, UOp) else UOp.index_const(dim)
    return (at < 0).where(at.minimum(-1) + size, at)  # (the same where it is taken, its bounds below ``size``)

def _beyond_dtype(name: str, first: Any, second: Any) -> Any:
    """Python's ``max``/``min`` of an integer value and a Python int its dtype does not hold (``max(a_i8[i],
    300)``), which compares them exactly: the int where it wins, else the value; None for any other pair. The
    int is never converted to the dtype, which NumPy 2 refuses (``Arithmetic.fitting``)."""
    for value, number in ((first, second), (second, first)):
        if isinstance(value, UOp) and isinstance(number, int) and not isinstance(number, bool) and \
                value.dtype.is_int and value.dtype != dtypes.index and not value.dtype.min <= number <= value.dtype.max:
            return number if (number > value.dtype.max) == (name == "max") else value
    return None


_FLOAT_BITS = {dtypes.float32: (dtypes.uint32, 0x7F800000), dtypes.float64: (dtypes.uint64, 0x7FF0000000000000)}
"""Each float dtype's unsigned integer of its width and the bits of its exponent."""


def _float_class(value: UOp, name: str) -> UOp:
    """``np.isnan``/``isinf``/``isfinite``/``signbit`` of a float, from its bits (magnitude past, at or below
    the exponent's all-ones pattern; the bits past the largest positive pattern): right where a compiler may
    assume floats are finite (WGSL), and for -0.0 and a NaN's sign. A float16 is widened first (exactly, its
    class and sign kept): not every device holds a uint16."""
    if value.dtype not in _FLOAT_BITS:
        value = value.cast(dtypes.float32)
    unsigned, exponent = _FLOAT_BITS[value.dtype]
    positive = UOp.const(unsigned, (1 << (unsigned.itemsize * 8 - 1)) - 1)
    if name == "signbit":
        return positive.lt(value.bitcast(unsigned))
    magnitude = value.bitcast(unsigned) & positive
    infinity = UOp.const(unsigned, exponent)
    if name == "isnan":
        return infinity.lt(magnitude)
    return magnitude.eq(infinity) if name == "isinf" else magnitude.lt(infinity)

ORDER_KEYS = (pylang.max_key, pylang.min_key, pylang.from_key)
"""The order keys' functions, which the loops a jitted function's array statements become call
(``svod.frontend.array_exprs``)."""
KEY_DTYPES = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}
"""The floats an order key is made for (``pylang.max_key``), and the signed integer of each one's width."""


def order_key(value: UOp, nan_high: bool) -> UOp:
    """``pylang.max_key`` (``nan_high``) or ``min_key`` of a float: its bits, those of a negative one with all
    but the sign flipped, so that the integers' order is the floats'; a NaN's the key past every number's."""
    signed = KEY_DTYPES[value.dtype]
    bits = value.bitcast(signed)
    key = bits.lt(0).where(bits ^ int(signed.max), bits)
    return _float_class(value, "isnan").where(UOp.const(signed, signed.max if nan_high else signed.min), key)


def from_key(key: UOp) -> UOp:
    """``pylang.from_key``: the float of an order key (flipping a negative one's bits back is the same xor); a
    NaN's key, ``signed.max`` or ``signed.min``, flips to the bits of a NaN."""
    floats = {signed: f for f, signed in KEY_DTYPES.items()}
    return key.lt(0).where(key ^ int(key.dtype.max), key).bitcast(floats[key.dtype])


_EXPRESSIONS: dict[type, str] = {ast.Constant: "_constant", ast.Name: "_name", ast.Attribute: "_attribute",
    ast.Subscript: "_subscript", ast.Tuple: "_tuple", ast.BinOp: "_bin_op", ast.UnaryOp: "_unary_op",
    ast.BoolOp: "_bool_op", ast.Compare: "_compare", ast.IfExp: "_if_exp", ast.Call: "_call"}
"""The method that translates each kind of expression a kernel may use."""


__all__ = ["Expressions"]
