"""Scalar, vector and pointer dtypes, and ``DeviceSpec``: what a value is and where it lives."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from svod.errors import DeviceError, SvodError

Kind = Literal["void", "bool", "int", "uint", "float"]


@dataclass(frozen=True, slots=True)
class DType:
    """A scalar type, or a vector of ``count`` scalars. Compared by value, so dtypes are plain data."""

    name: str
    itemsize: int
    kind: Kind
    count: int = 1

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"

    @property
    def scalar(self) -> DType:
        return self if self.count == 1 else DType(self.name, self.itemsize // self.count, self.kind)

    def vec(self, count: int) -> DType:
        if self.count != 1 or count < 1:
            raise SvodError(f"cannot make a vector of {count} x {self!r}", stage="build", value=count)
        return self if count == 1 else DType(self.name, self.itemsize * count, self.kind, count)

    def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
        """A pointer to ``size`` elements of this dtype (-1 when the size is symbolic)."""
        return PtrDType(self.name, 8, self.kind, 1, self, size, local)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """Integer in the arithmetic sense: signed, unsigned and ``index``; not bool."""
        return self.kind in ("int", "uint")

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "uint"

    @property
    def bits(self) -> int:
        return 8 * self.scalar.itemsize

    @property
    def numpy(self) -> np.dtype:
        if self.kind == "void" or self.count != 1:
            raise SvodError(f"{self!r} has no numpy equivalent", stage="build")
        return np.dtype(_NUMPY_NAMES.get(self.name, self.name))

    @property
    def min(self) -> int | float:
        """The smallest value of the type (``-inf`` for floats)."""
        if self.kind == "float":
            return -math.inf
        if self.kind in ("bool", "uint"):
            return 0
        return -(1 << (self.bits - 1))

    @property
    def max(self) -> int | float:
        if self.kind == "float":
            return math.inf
        if self.kind == "bool":
            return 1
        return (1 << (self.bits - (self.kind == "int"))) - 1


@dataclass(frozen=True, slots=True)
class PtrDType(DType):
    """A pointer to ``size`` elements of ``base``; ``local`` marks registers and work-group memory."""

    base: DType = DType("void", 0, "void")
    size: int = -1
    local: bool = False

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size}{', local=True' if self.local else ''})"

    @property
    def numpy(self) -> np.dtype:
        raise SvodError(f"pointer dtype {self!r} has no numpy equivalent", stage="build")


_NUMPY_NAMES = {"index": "int64"}


class dtypes:  # noqa: N801 - the public spelling of API.md
    """The dtype namespace: ``dtypes.float32``, ``dtypes.from_numpy(...)``."""

    void: ClassVar[DType] = DType("void", 0, "void")
    bool: ClassVar[DType] = DType("bool", 1, "bool")
    int8: ClassVar[DType] = DType("int8", 1, "int")
    int16: ClassVar[DType] = DType("int16", 2, "int")
    int32: ClassVar[DType] = DType("int32", 4, "int")
    int64: ClassVar[DType] = DType("int64", 8, "int")
    uint8: ClassVar[DType] = DType("uint8", 1, "uint")
    uint16: ClassVar[DType] = DType("uint16", 2, "uint")
    uint32: ClassVar[DType] = DType("uint32", 4, "uint")
    uint64: ClassVar[DType] = DType("uint64", 8, "uint")
    float16: ClassVar[DType] = DType("float16", 2, "float")
    float32: ClassVar[DType] = DType("float32", 4, "float")
    float64: ClassVar[DType] = DType("float64", 8, "float")
    index: ClassVar[DType] = DType("index", 8, "int")
    """The integer type of indices and launch sizes: 64-bit signed semantics."""

    @staticmethod
    def all() -> tuple[DType, ...]:
        return _SCALARS

    @staticmethod
    def from_numpy(np_dtype: np.dtype | type | str) -> DType:
        if isinstance(np_dtype, np.dtype) and (known := _BY_NUMPY_DTYPE.get(np_dtype)) is not None:
            return known  # the hot path of a call on numpy arrays
        name = np.dtype(np_dtype).name
        found = _BY_NUMPY_NAME.get(name)
        if found is None:
            kind = np.dtype(np_dtype)
            why = (" (svod computes on complex64 and complex128 in the machine's byte order, as pairs of floats; this "
                   f"is {kind.str}: x.astype(np.complex128) it)") if kind.kind == "c" else ""
            raise SvodError(f"numpy dtype {name} has no svod dtype{why}", stage="build", value=name)
        return found

    @staticmethod
    def from_name(name: str) -> DType:
        found = _BY_NAME.get(name)
        if found is None:
            raise SvodError(f"unknown dtype name {name!r}", stage="build", value=name)
        return found


_SCALARS: tuple[DType, ...] = (
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
    dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.index,
)
_BY_NAME = {dt.name: dt for dt in (*_SCALARS, dtypes.void)}
_BY_NUMPY_NAME = {dt.name: dt for dt in _SCALARS if dt is not dtypes.index}
_BY_NUMPY_DTYPE = {dt.numpy: dt for dt in _SCALARS if dt is not dtypes.index}


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A device name in canonical form: ``CPU``, ``PYTHON``, ``CL:0``, ``CUDA:1``.

    Devices that exist once have no id in their canonical name; numbered ones do, and a bare name means id
    0. Which kinds exist, and which are numbered, the backend registry says (``register_kind``).
    """

    base_type: str
    device_id: int = 0

    _kinds: ClassVar[dict[str, bool]] = {}
    """Each device kind the backend registry knows, and whether it is numbered (takes a device id)."""
    _discover: ClassVar[Callable[[], None] | None] = None
    """Registers the kinds (``install_discovery``): the registry is installed lazily, and a name parsed before
    (a renderer built first thing in a process) must still find its kind."""
    _discovering: ClassVar[threading.RLock] = threading.RLock()
    """Held while the kinds are registered (reentrant: the registry may parse a name as it registers)."""

    @classmethod
    def register_kind(cls, base_type: str, numbered: bool) -> None:
        """Make ``base_type`` a device name (the backend registry does this for each backend)."""
        cls._kinds[base_type.upper()] = numbered

    @classmethod
    def install_discovery(cls, discover: Callable[[], None]) -> None:
        """Have ``parse`` call ``discover`` (which registers every kind) on a name of no kind registered yet."""
        cls._discover = discover

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        cls._discovered()
        return tuple(cls._kinds)

    @classmethod
    def _discovered(cls) -> None:
        """Register every kind (the registry is built once, then this costs a cached call). Where any kind is
        known another thread may be registering the rest just now: the lock waits for it rather than taking
        a name of those for unknown."""
        if cls._discover is not None:
            with cls._discovering:
                cls._discover()

    @classmethod
    def parse(cls, name: str | DeviceSpec) -> DeviceSpec:
        if isinstance(name, DeviceSpec):
            return name
        if not isinstance(name, str):
            raise DeviceError("a device name must be a string", stage="device", value=name)
        base, sep, ident = name.strip().upper().partition(":")
        if base not in cls._kinds:
            cls._discovered()
        if base not in cls._kinds:
            raise DeviceError(f"unknown device {name!r}; known: {', '.join(cls._kinds)}", stage="device", value=name)
        if not sep:
            return cls(base)
        if not ident.isdigit():
            raise DeviceError(f"device id in {name!r} must be a non-negative integer", stage="device", value=name)
        if not cls._kinds[base] and int(ident) != 0:
            raise DeviceError(f"device {base} has a single instance; {name!r} names another",
                              stage="device", value=name)
        return cls(base, int(ident))

    def __str__(self) -> str:
        return f"{self.base_type}:{self.device_id}" if self._kinds.get(self.base_type) else self.base_type
