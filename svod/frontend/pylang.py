"""The names a Python kernel (``@svod.kernel``) uses: ``prange``, the dtype casts (``svod.float32(x)``),
``svod.math``, ``svod.inf``/``svod.nan``, the atomics, the annotations ``Array`` and ``Const``, and
``@svod.func`` helpers.

The translator (``svod.frontend.translate``) recognises them in a kernel's source and builds UOps for them;
nothing here runs inside a kernel. Outside one each does in plain Python what the kernel does — ``prange`` is
``range``, a cast converts a number, math computes in the operand's float type, an atomic updates the
element — so a kernel's function run as plain Python is the specification its kernel is checked against
(``svod.frontend.oracle``), and a helper stays callable from plain Python.
"""

from __future__ import annotations

import functools
import math as _pymath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError
from svod.ir.alu import convert

inf = _pymath.inf
nan = _pymath.nan


def prange(*bounds: int) -> range:
    """``for i in svod.prange(n)`` (or ``prange(start, stop)``): a parallel loop, one work item per turn."""
    return range(*bounds)


@dataclass(frozen=True)
class Cast:
    """``svod.float32(x)``: ``x`` converted to a dtype (in a kernel, a CAST; outside, the same conversion as a
    numpy scalar: a float into an integer type truncates and saturates, NaN becoming 0, and an integer wraps,
    where numpy's own conversion leaves those undefined). Also names the dtype in annotations (``a:
    svod.float32``, ``svod.Array[svod.float32, 2]``)."""

    dtype: DType

    def __call__(self, value: Any) -> Any:
        if self.dtype.is_int and isinstance(value, (int, float, np.integer, np.floating)):
            number = float(value) if isinstance(value, (float, np.floating)) else int(value)
            return self.dtype.numpy.type(convert(number, self.dtype))
        return self.dtype.numpy.type(value)

    def __repr__(self) -> str:
        return f"svod.{self.dtype.name}"


CASTS = {dt.name: Cast(dt) for dt in (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                                       dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float16,
                                       dtypes.float32, dtypes.float64)}


def _update(name: str, combine: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], None]:
    def update(array: Any, index: Any, value: Any) -> None:
        array[index] = combine(array[index], value)
    update.__name__ = update.__qualname__ = name
    return update


atomic_add = _update("atomic_add", lambda old, value: old + value)
"""``svod.atomic_add(a, index, value)``: ``a[index] += value`` as one indivisible update (``index`` an int
or a tuple), so work items may add into one element at once. In plain Python, the update itself."""
atomic_max = _update("atomic_max", np.fmax)
"""``svod.atomic_max(a, index, value)``: ``a[index] = max(a[index], value)`` atomically (a NaN loses)."""
atomic_min = _update("atomic_min", np.fmin)
"""``svod.atomic_min(a, index, value)``: ``a[index] = min(a[index], value)`` atomically (a NaN loses)."""

_KEY_BITS: dict[np.dtype[Any], np.dtype[Any]] = {np.dtype(np.float32): np.dtype(np.int32),
                                                  np.dtype(np.float64): np.dtype(np.int64)}
"""The float dtypes an order key (``max_key``) is made for, and the signed integer of each one's width."""


def _order_key(x: Any, nan_key: int) -> Any:
    value = np.asarray(x)
    bits = value.view(_KEY_BITS[value.dtype])
    mask = np.iinfo(bits.dtype).max
    return np.where(np.isnan(value), bits.dtype.type(nan_key), np.where(bits < 0, bits ^ mask, bits))[()]


def max_key(x: Any) -> Any:
    """The signed integer of a float32 or float64's width whose order is the float's (-0.0 below +0.0), a NaN
    above every number: an integer maximum of keys is NumPy's max of the floats, a NaN winning, in one
    reduction (``from_key`` gives the float back)."""
    return _order_key(x, np.iinfo(_KEY_BITS[np.asarray(x).dtype]).max)


def min_key(x: Any) -> Any:
    """``max_key``, a NaN below every number: an integer minimum of keys is NumPy's min of the floats."""
    return _order_key(x, np.iinfo(_KEY_BITS[np.asarray(x).dtype]).min)


def from_key(key: Any) -> Any:
    """The float whose ``max_key`` or ``min_key`` ``key`` is (a NaN's key gives a NaN)."""
    bits = np.asarray(key)
    mask = np.iinfo(bits.dtype).max
    floats = {bits_dtype: float_dtype for float_dtype, bits_dtype in _KEY_BITS.items()}
    return np.where(bits < 0, bits ^ mask, bits).view(floats[bits.dtype])[()]


MATH_FUNCTIONS: dict[str, tuple[str, int]] = {
    "exp": ("exp", 1), "exp2": ("exp2", 1), "log": ("log", 1), "log2": ("log2", 1), "sin": ("sin", 1),
    "cos": ("cos", 1), "tan": ("tan", 1), "tanh": ("tanh", 1), "erf": ("erf", 1), "sqrt": ("sqrt", 1),
    "rsqrt": ("rsqrt", 1), "sigmoid": ("sigmoid", 1), "floor": ("floor", 1), "ceil": ("ceil", 1),
    "trunc": ("trunc", 1), "round": ("round", 1), "fabs": ("__abs__", 1), "abs": ("__abs__", 1),
    "pow": ("pow", 2), "fmod": ("fmod", 2), "maximum": ("maximum", 2), "minimum": ("minimum", 2),
    "clamp": ("clamp", 3),
}
"""Math a kernel may call, as ``svod.math.<name>`` (and ``math.<name>``, ``np.<name>`` where those exist):
the UOp method each becomes and how many arguments it takes."""


def _in_float(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` on numbers as a kernel computes it: in the widest float type among its operands (a Python
    number takes the others' type; with no float operand, float64), as a numpy scalar of that type."""
    def apply(*args: Any) -> Any:
        floats = [np.asarray(a).dtype for a in args if isinstance(a, np.generic) and np.asarray(a).dtype.kind == "f"]
        dtype = np.result_type(*floats) if floats else np.dtype(np.float64)
        with np.errstate(all="ignore"):
            return dtype.type(fn(*(np.asarray(a).astype(dtype) for a in args)))
    return apply


def _erf(x: Any) -> Any:
    return np.vectorize(_pymath.erf, otypes=[np.float64])(x)


def _sigmoid(x: Any) -> Any:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _clamp(x: Any, lo: Any, hi: Any) -> Any:
    return np.where(np.isnan(x), x, np.fmin(np.fmax(x, lo), hi))


_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "tanh": np.tanh, "erf": _erf, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": _sigmoid,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint, "fabs": np.abs, "abs": np.abs,
    "pow": np.power, "fmod": np.fmod, "maximum": np.fmax, "minimum": np.fmin, "clamp": _clamp,
}
"""Each math function in plain Python, on numpy's functions: a float32 operand computes in float32, as the
kernel does (maximum and minimum ignore a NaN, as the kernel's do)."""


class _Math:
    """``svod.math``: the math functions of kernels (``MATH_FUNCTIONS``) and the constants ``pi``, ``e``,
    ``inf``, ``nan``. Called outside a kernel, each computes as the kernel does (numpy scalars keep their
    float type), so the kernel's function runs as plain Python too."""

    pi = _pymath.pi
    e = _pymath.e
    inf = _pymath.inf
    nan = _pymath.nan

    def __init__(self) -> None:
        self._functions = {name: _named(name, _in_float(fn)) for name, fn in _IMPLEMENTATIONS.items()}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._functions:
            return self._functions[name]
        raise AttributeError(f"svod.math has no {name}; it has {sorted(MATH_FUNCTIONS)}")

    def __dir__(self) -> list[str]:
        return [*sorted(MATH_FUNCTIONS), "e", "inf", "nan", "pi"]

    def name_of(self, fn: Any) -> str | None:
        """The name of one of these functions (``fn`` itself, taken from ``svod.math``), or None."""
        return next((name for name, known in self._functions.items() if known is fn), None)


def _named(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    return fn


math = _Math()

T = TypeVar("T")


@dataclass(frozen=True)
class ArrayType:
    """``svod.Array[svod.float32, 2]``: an array argument of this dtype and number of dimensions."""

    dtype: DType
    ndim: int


class Array:
    """Annotation of an array argument: ``x: svod.Array[svod.float32, 2]``."""

    def __class_getitem__(cls, item: tuple[Any, int]) -> ArrayType:
        if not isinstance(item, tuple) or len(item) != 2:
            raise KernelSyntaxError("svod.Array takes a dtype and a number of dimensions: svod.Array[svod.float32, 2]",
                                    stage="parse", value=item)
        dtype, ndim = item
        if isinstance(dtype, Cast):
            dtype = dtype.dtype
        if not isinstance(dtype, DType) or isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 1:
            raise KernelSyntaxError("svod.Array takes a dtype and a number of dimensions: svod.Array[svod.float32, 2]",
                                    stage="parse", value=item)
        return ArrayType(dtype, ndim)


@dataclass(frozen=True)
class ConstType:
    """``svod.Const[int]``: an argument that is a constant of the compiled kernel (one compile per value)."""

    kind: type


class Const(Generic[T]):
    """Annotation of a compile-time constant argument, like Triton's ``constexpr``: ``n: svod.Const[int]``."""

    def __class_getitem__(cls, item: Any) -> Any:
        if item not in (int, float, bool):
            raise KernelSyntaxError("svod.Const takes int, float or bool", stage="parse", value=item)
        return ConstType(item)


@dataclass(frozen=True)
class IntType:
    """``svod.Int[0, 4096]``: an ``int`` argument that takes values in ``[lo, hi]`` only."""

    lo: int
    hi: int

    def __str__(self) -> str:
        return f"svod.Int[{self.lo}, {self.hi}]"


INT_BOUND = 1 << 62
"""The widest bounds ``svod.Int`` takes: sums and products of a kernel's sizes and ints stay in 64 bits."""


class Int:
    """Annotation of an ``int`` argument with its bounds, ``n: svod.Int[1, 4096]``: svod proves accesses and
    a GPU's 32-bit indices within them, where an ``int`` alone may take any 32-bit value; a call with a
    value outside them raises."""

    def __class_getitem__(cls, item: tuple[int, int]) -> IntType:
        if (not isinstance(item, tuple) or len(item) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in item)
                or not -INT_BOUND <= item[0] <= item[1] <= INT_BOUND):
            raise KernelSyntaxError("svod.Int takes two ints lo <= hi within +-2**62: svod.Int[0, 4096]",
                                    stage="parse", value=item)
        return IntType(*item)


class Func:
    """A ``@svod.func`` helper: inlined where a kernel calls it. Called from plain Python, it runs as Python."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.source: Any = None
        """Its parsed source, once a kernel has inlined it (``svod.frontend.source.Source``)."""
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<svod.func {self.fn.__qualname__}>"


def func(fn: Callable[..., Any]) -> Func:
    """``@svod.func``: a helper a kernel may call; its body is inlined at each call."""
    return Func(fn)


__all__ = ["CASTS", "MATH_FUNCTIONS", "Array", "ArrayType", "Cast", "Const", "ConstType", "Func", "atomic_add",
           "atomic_max", "atomic_min", "func", "inf", "math", "nan", "prange"]
