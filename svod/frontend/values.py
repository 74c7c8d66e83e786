"""What a name in a kernel can stand for while it is translated (``svod.frontend.translate``): a Python number
(a constant of the kernel), a UOp (a value the kernel computes), an array argument (``ArrayValue``), a builtin or
a math function, one of svod's names (``svod.frontend.pylang``), or a local a branch or loop left ``Undefined``;
and how an error describes each (``describe``)."""

from __future__ import annotations

import math as pymath
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.dtype import DType, dtypes
from svod.frontend import pylang
from svod.frontend.builder import ShapedBuffer
from svod.ir import UOp
from svod.ir.uop import pointee

Number = bool | int | float


@dataclass(frozen=True)
class ArrayValue:
    """An array argument inside a kernel: a row-major buffer with its dims (ints or size variables)."""

    name: str
    buffer: ShapedBuffer
    dims: tuple[int | UOp, ...]

    @property
    def dtype(self) -> DType:
        """The element dtype."""
        return pointee(self.buffer.param)


@dataclass(frozen=True)
class ComplexArray:
    """A complex array argument inside a kernel: its float view (NumPy's interleaved layout, the real part of
    element ``i`` at ``2i`` and the imaginary part at ``2i + 1``) as an array of one more dimension, of size 2,
    and its own dims. svod's IR has no complex dtype: the front end works on the parts
    (``svod.frontend.complex_values``)."""

    name: str
    parts: ArrayValue
    dims: tuple[int | UOp, ...]

    @property
    def dtype(self) -> DType:
        """The dtype of each part (float32 of a complex64, float64 of a complex128)."""
        return self.parts.dtype


@dataclass(frozen=True)
class ComplexValue:
    """A complex number in a kernel: its real and imaginary parts, both Python floats (a Python complex, weak as
    a Python float is) or both UOps of one float dtype."""

    re: Any
    im: Any


class ComplexLocal:
    """What a complex local's name holds in a kernel's locals: its parts are locals of their own
    (``complex_values.part_names``), so that loops carry and branches merge them as they do any float."""

    def __repr__(self) -> str:
        return "a complex local"


COMPLEX_LOCAL = ComplexLocal()


@dataclass(frozen=True)
class ComplexMethod:
    """``z.conjugate`` before its call."""

    value: ComplexValue
    name: str


@dataclass(frozen=True)
class MathFunction:
    """A math function met in a kernel (``svod.math.exp``, ``math.exp``, ``np.exp``)."""

    name: str


@dataclass(frozen=True)
class Builtin:
    name: str


@dataclass(frozen=True)
class RandomFunction:
    """An ``np.random`` function met in a kernel (``np.random.normal``, ``from numpy.random import normal``):
    a draw of svod's generator (``svod.random``), or ``seed``. ``plan``: one of the calls svod writes into a
    jitted function's phases instead (``svod.frontend.random_arrays``): the generator's state a plan carries
    between its phases (``resume``, ``state``), or a draw at a place that names itself (``name`` the draw's
    kind)."""

    name: str
    plan: bool = False


BUILTINS = {name: Builtin(name) for name in ("abs", "min", "max", "int", "float", "bool", "len", "range", "complex",
                                             "round")}
NUMPY_PREDICATES = ("isnan", "isinf", "isfinite", "signbit")
"""NumPy's tests of a number's class and sign, each a bool (of an integer: not NaN, not infinite, finite, and
its sign)."""
NUMPY_LOGICAL = {"logical_and": 2, "logical_or": 2, "logical_xor": 2, "logical_not": 1}
"""NumPy's logical functions, with their arities: each takes its operands' truth, as ``bool()`` does."""
NUMPY_COMPLEX = ("real", "imag", "conj", "conjugate", "angle", "reciprocal", "complex64", "complex128")
"""NumPy's functions of a complex number's parts (``svod.frontend.complex_values``)."""
NUMPY_BUILTINS = {name: Builtin(f"np.{name}") for name in ("maximum", "minimum", *NUMPY_PREDICATES, *NUMPY_LOGICAL,
                                                          *NUMPY_COMPLEX)}
"""NumPy functions whose meaning is not one of svod's math functions: ``np.maximum`` lets a NaN win, where
svod's ``maximum`` (``np.fmax``) ignores it; the predicates and logical functions make bools."""
NUMPY_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sin": "sin", "cos": "cos", "tan": "tan",
              "tanh": "tanh", "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "round",
              "fabs": "fabs", "absolute": "abs", "abs": "abs", "power": "pow", "fmod": "fmod", "fmax": "maximum",
              "fmin": "minimum"}
"""numpy's names for the math functions a kernel has (``np.exp(x)`` in ported numba code)."""


def is_number(value: object) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, UOp)


class Undefined:
    """A name a branch or a loop defined that the code after it may not use."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why


def is_atomic(value: Any) -> bool:
    return any(value is f for f in (pylang.atomic_add, pylang.atomic_max, pylang.atomic_min))


def math_function(value: Any) -> MathFunction | Builtin | None:
    """``math.exp`` or ``np.exp`` imported by name (``from math import exp``)."""
    own = pylang.math.name_of(value)
    if own is not None:
        return MathFunction(own)
    name = getattr(value, "__name__", None)
    if not isinstance(name, str):
        return None
    if getattr(pymath, name, None) is value and name in pylang.MATH_FUNCTIONS:
        return MathFunction(name)
    if getattr(pymath, name, None) is value and name in NUMPY_PREDICATES:
        return NUMPY_BUILTINS[name]
    if not isinstance(value, np.ufunc) or getattr(np, name, None) is not value:
        return None
    return MathFunction(NUMPY_MATH[name]) if name in NUMPY_MATH else NUMPY_BUILTINS.get(name)


def describe(value: Any) -> str:
    if isinstance(value, ComplexValue):
        return "a Python complex" if is_number(value.re) else f"a complex value of {value.re.dtype.name} parts"
    if isinstance(value, ComplexArray):
        return f"complex array {value.name}"
    if isinstance(value, UOp):  # an int of loop variables, sizes and int arguments is numba's intp: int64
        return f"an {dtypes.int64.name} value" if value.dtype == dtypes.index else f"a {value.dtype.name} value"
    if isinstance(value, ArrayValue):
        return f"array {value.name}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, (Builtin, MathFunction)):
        return f"function {value.name}"
    if isinstance(value, RandomFunction):
        return f"function np.random.{value.name}"
    if callable(value):
        return f"function {getattr(value, '__qualname__', value)!r}"
    return f"{type(value).__name__} {value!r}"


__all__ = ["ArrayValue", "BUILTINS", "Builtin", "COMPLEX_LOCAL", "ComplexArray", "ComplexLocal", "ComplexMethod",
           "ComplexValue", "MathFunction", "NUMPY_BUILTINS", "NUMPY_COMPLEX", "NUMPY_LOGICAL", "NUMPY_MATH",
           "NUMPY_PREDICATES", "Number", "RandomFunction", "Undefined", "describe", "is_atomic", "is_number",
           "math_function"]
