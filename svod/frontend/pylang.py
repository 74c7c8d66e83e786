"""The names a Python kernel (``@svod.kernel``) uses: ``prange``, the dtype casts (``svod.float32(x)``),
``svod.math``, ``svod.inf``/``svod.nan``, the atomics, the annotations ``Array`` and ``Const``, and
``@svod.func`` helpers.

They are markers: the translator (``svod.frontend.translate``) recognises them in a kernel's source and
builds UOps for them; nothing here runs inside a kernel. Outside one, ``prange`` is ``range`` and a cast
converts a number, so a helper stays callable from plain Python; the rest say they belong in kernels.
"""

from __future__ import annotations

import functools
import math as _pymath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from svod.dtype import DType, dtypes
from svod.errors import KernelSyntaxError

inf = _pymath.inf
nan = _pymath.nan


def prange(*bounds: int) -> range:
    """``for i in svod.prange(n)`` (or ``prange(start, stop)``): a parallel loop, one work item per turn."""
    return range(*bounds)


@dataclass(frozen=True)
class Cast:
    """``svod.float32(x)``: ``x`` converted to a dtype (in a kernel, a CAST; outside, numpy's conversion). Also
    names the dtype in annotations (``a: svod.float32``, ``svod.Array[svod.float32, 2]``)."""

    dtype: DType

    def __call__(self, value: Any) -> Any:
        return self.dtype.numpy.type(value)

    def __repr__(self) -> str:
        return f"svod.{self.dtype.name}"


CASTS = {dt.name: Cast(dt) for dt in (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                                       dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float16,
                                       dtypes.float32, dtypes.float64)}


def _only_in_kernels(name: str) -> Callable[..., Any]:
    def marker(*args: Any, **kwargs: Any) -> Any:
        raise KernelSyntaxError(f"svod.{name} is only meaningful inside an @svod.kernel function", stage="call",
                                value=name)
    marker.__name__ = name
    marker.__qualname__ = name
    return marker


atomic_add = _only_in_kernels("atomic_add")
"""``svod.atomic_add(a, index, value)``: ``a[index] += value`` as one indivisible update (``index`` an int
or a tuple), so work items may add into one element at once."""
atomic_max = _only_in_kernels("atomic_max")
"""``svod.atomic_max(a, index, value)``: ``a[index] = max(a[index], value)`` atomically."""
atomic_min = _only_in_kernels("atomic_min")
"""``svod.atomic_min(a, index, value)``: ``a[index] = min(a[index], value)`` atomically."""

MATH_FUNCTIONS: dict[str, tuple[str, int]] = {
    "exp": ("exp", 1), "exp2": ("exp2", 1), "log": ("log", 1), "log2": ("log2", 1), "sin": ("sin", 1),
    "cos": ("cos", 1), "tan": ("tan", 1), "tanh": ("tanh", 1), "erf": ("erf", 1), "sqrt": ("sqrt", 1),
    "rsqrt": ("rsqrt", 1), "sigmoid": ("sigmoid", 1), "floor": ("floor", 1), "ceil": ("ceil", 1),
    "trunc": ("trunc", 1), "round": ("round", 1), "fabs": ("__abs__", 1), "abs": ("__abs__", 1),
    "pow": ("pow", 2), "maximum": ("maximum", 2), "minimum": ("minimum", 2), "clamp": ("clamp", 3),
}
"""Math a kernel may call, as ``svod.math.<name>`` (and ``math.<name>``, ``np.<name>`` where those exist):
the UOp method each becomes and how many arguments it takes."""


class _Math:
    """``svod.math``: the math functions of kernels (``MATH_FUNCTIONS``) and the constants ``pi``, ``e``,
    ``inf``, ``nan``."""

    pi = _pymath.pi
    e = _pymath.e
    inf = _pymath.inf
    nan = _pymath.nan

    def __getattr__(self, name: str) -> Any:
        if name in MATH_FUNCTIONS:
            return _only_in_kernels(f"math.{name}")
        raise AttributeError(f"svod.math has no {name}; it has {sorted(MATH_FUNCTIONS)}")

    def __dir__(self) -> list[str]:
        return [*sorted(MATH_FUNCTIONS), "e", "inf", "nan", "pi"]


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
                                    stage="annotation", value=item)
        dtype, ndim = item
        if isinstance(dtype, Cast):
            dtype = dtype.dtype
        if not isinstance(dtype, DType) or isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 1:
            raise KernelSyntaxError("svod.Array takes a dtype and a number of dimensions: svod.Array[svod.float32, 2]",
                                    stage="annotation", value=item)
        return ArrayType(dtype, ndim)


@dataclass(frozen=True)
class ConstType:
    """``svod.Const[int]``: an argument that is a constant of the compiled kernel (one compile per value)."""

    kind: type


class Const(Generic[T]):
    """Annotation of a compile-time constant argument, like Triton's ``constexpr``: ``n: svod.Const[int]``."""

    def __class_getitem__(cls, item: Any) -> Any:
        if item not in (int, float, bool):
            raise KernelSyntaxError("svod.Const takes int, float or bool", stage="annotation", value=item)
        return ConstType(item)


class Func:
    """A ``@svod.func`` helper: inlined where a kernel calls it. Called from plain Python, it runs as Python."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.source: Any = None
        """Its parsed source, once a kernel has inlined it (``svod.frontend.translate.Source``)."""
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
