"""The dtypes of a Python kernel's values: NumPy 2's promotion (NEP 50), as plain Python computes on numpy
scalars and numba types a function, with the platform's integer for loop variables and sizes.

- **Two typed values** (read from arrays, cast, or computed) meet in NumPy's ``promote_types``: two
  integers in one that holds both (``int32`` and ``uint32`` in ``int64``), two floats in the wider, an
  integer and a float in a float that holds both (``x_f32[i] * i`` computes in float64, as NumPy and numba
  do; ``x_f32[i] * 2`` in float32, the number being weak). A local that holds values of either takes the
  same dtype (``unify``).
- **Loop variables and sizes** are ``dtypes.index``, which promotes as the platform's integer (``int64``;
  ``int32`` where a device indexes in 32 bits and has no 64-bit integers, where int64 and float64 results are
  their 32-bit kin). Index arithmetic stays ``index``; with another integer it is a value of the platform's
  integer (``ids[r] + r``), and a local that holds an index is stored as one.
- **Python numbers** are weak: one takes the dtype of the typed value it meets, except that a float meeting
  an integer is the platform's float (``float64``; ``float32`` on a device without it) and an int meeting a
  bool the platform's integer. Two Python numbers compute in Python; alone, a number defaults to the
  platform's integer or float.
- **What plain Python holds as a Python number** is weak as one where it meets a float, though the kernel
  computes it: a size (a Python int in Python, a constant with ``static_shapes``, a variable without), an int
  or float argument, and what arithmetic makes of them and of numbers (``1.0 / x.shape[1]``).
  ``x_f32[i] * (1.0 / n)`` and ``x_f32[i] * alpha`` are float32 products with either kind of size. Meeting a
  typed integer it unifies as an ``index`` does (``ids_u8[r] + n`` is int64, never a wrapped uint8: NumPy
  would raise where the size does not fit). A loop variable is numba's int64 (typed); a numpy scalar
  argument, one annotated with a svod dtype, and a conversion the kernel writes (``np.float64(alpha)``,
  ``svod.float32(n)``) are typed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from svod.dtype import DType, dtypes

Number = bool | int | float


@dataclass(frozen=True)
class Platform:
    """What a kernel's dtypes depend on of the device it is for: the width of its indices, and whether it
    computes float64."""

    index_bits: int = 64
    float64: bool = True

    @property
    def integer(self) -> DType:
        """The platform's integer: what a loop variable is, what an int defaults to."""
        return dtypes.int64 if self.index_bits > 32 else dtypes.int32

    @property
    def real(self) -> DType:
        """The platform's float: what a float defaults to, and what ``/`` of integers gives."""
        return dtypes.float64 if self.float64 else dtypes.float32

    def storage(self, dtype: DType) -> DType:
        """The dtype memory holds a value of ``dtype`` in: an index as the platform's integer."""
        return self.integer if dtype == dtypes.index else dtype

    def _numpy(self, dtype: DType) -> np.dtype:
        return self.storage(dtype).numpy

    def _svod(self, dtype: np.dtype) -> DType:
        """A numpy dtype as the platform computes it: float64 as float32 where the device has no float64. A
        64-bit integer stays one (``svod.int64(x)``, ``int32 + uint32``): a device without them computes it in
        32 bits only where that gives the same value (``narrow_integers``)."""
        found = dtypes.from_numpy(dtype)
        return dtypes.float32 if found == dtypes.float64 and not self.float64 else found

    def unify(self, a: DType, b: DType) -> DType:
        """The dtype arithmetic between values of ``a`` and ``b`` computes in, and a local takes that holds
        either: NumPy's ``promote_types``, an index counting as the platform's integer (a value, which wraps,
        not an index, which must be proven to fit: ``ids[r] + r`` is an int64, or an int32 on WebGPU)."""
        if a == b:
            return a
        if dtypes.bool in (a, b):
            return b if a == dtypes.bool else a
        return self._svod(np.promote_types(self._numpy(a), self._numpy(b)))

    def weak(self, value: Number, other: DType) -> DType:
        """The dtype a Python number takes meeting a value of ``other``."""
        if isinstance(value, float) and not isinstance(value, bool) and not other.is_float:
            return self.real
        if isinstance(value, int) and not isinstance(value, bool) and other == dtypes.bool:
            return self.integer
        return other

    def alone(self, value: Number) -> DType:
        """The dtype a Python number takes meeting nothing typed."""
        if isinstance(value, bool):
            return dtypes.bool
        return self.real if isinstance(value, float) else self.integer


HOST = Platform()
"""The platform of a 64-bit host: 64-bit indices and float64."""

__all__ = ["HOST", "Number", "Platform"]
