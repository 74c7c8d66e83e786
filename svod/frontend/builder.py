"""``KernelBuilder``: build a kernel AST without assembling RANGE/INDEX/STORE nodes by hand.

::

    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 24)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    ast = k.build()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import overload

from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, UOp
from svod.ir.ops import EFFECTS
from svod.ir.uop import Operand


class ShapedBuffer:
    """A buffer argument seen as a row-major array: ``x[i, j]`` is element ``i * cols + j`` of the one flat
    buffer the kernel receives (its size is the product of the dims, which may be symbolic). As for any
    buffer, what svod guarantees is that no access leaves the buffer; an index past one dimension that stays
    inside the buffer reads the neighbouring row, as in C."""

    __slots__ = ("kernel", "param", "shape")

    def __init__(self, param: UOp, shape: tuple[int | UOp, ...], kernel: str | None = None) -> None:
        self.param = param
        self.shape = shape
        self.kernel = kernel

    def __repr__(self) -> str:
        return f"ShapedBuffer(slot={self.param.arg}, dtype={self.dtype!r}, shape={self.shape})"

    @property
    def dtype(self) -> DType:
        return self.param.dtype

    def __getitem__(self, idx: Operand | tuple[Operand, ...]) -> UOp:
        return self.index(idx)

    def index(self, idx: Operand | tuple[Operand, ...], gate: UOp | None = None, memory: UOp | None = None,
              inside: UOp | None = None) -> UOp:
        """The element at ``idx`` (one index per dimension), accessed where ``gate`` holds, through ``memory``
        (a memory state of the buffer, ``UOp.state``) or the buffer itself. Where ``inside`` (a bool: each
        index within its dimension) fails, the index is -1, outside every buffer: the access is checked and
        fails there (``IndexOutOfBoundsError``)."""
        indices = tuple(i.cast(dtypes.index) if isinstance(i, UOp) else i
                        for i in (idx if isinstance(idx, tuple) else (idx,)))
        if len(indices) != len(self.shape):
            raise GraphError(f"a buffer of shape {self.shape} takes {len(self.shape)} indices, got {len(indices)}",
                             kernel=self.kernel, stage="build", value=len(indices))
        flat: Operand = indices[0]
        for dim, i in zip(self.shape[1:], indices[1:], strict=True):
            flat = _times(flat, dim) + i
        if inside is not None:
            flat = inside.where(flat, -1)
        return (self.param if memory is None else memory).index(flat, gate)


def _times(a: Operand, b: int | UOp) -> UOp:
    """``a * b`` as an index expression, whichever of them is a UOp."""
    if isinstance(a, UOp):
        return a * b
    if isinstance(b, UOp):
        return b * a
    return UOp.index_const(int(a) * b)


class KernelBuilder:
    """Hands out buffer slots and range axes in call order and collects the stores."""

    def __init__(self, name: str = "kernel") -> None:
        self.name = name
        self._axes = 0
        self._stores: list[UOp] = []
        self._params: list[UOp] = []
        self._vars: dict[str, UOp] = {}

    def var(self, name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer bound at run time (``svod.run(..., name=value)``)."""
        var = UOp.define_var(name, min_val, max_val, dtype)
        if self._vars.setdefault(name, var) is not var:
            raise GraphError(f"variable {name} is already defined with other bounds", kernel=self.name,
                             stage="build", value=(min_val, max_val))
        return var

    @overload
    def buffer(self, dtype: DType, size: int | UOp) -> UOp: ...
    @overload
    def buffer(self, dtype: DType, size: tuple[int | UOp, ...]) -> ShapedBuffer: ...

    def buffer(self, dtype: DType, size: int | UOp | tuple[int | UOp, ...]) -> UOp | ShapedBuffer:
        """The next buffer argument: slots are 0, 1, 2 ... in call order. A tuple size makes a row-major
        array indexed ``x[i, j]`` (the kernel still receives one buffer of all its elements)."""
        if isinstance(size, tuple):
            if not size:
                raise GraphError("a buffer shape needs at least one dimension", kernel=self.name,
                                 stage="build", value=size)
            count: int | UOp = size[0]
            for dim in size[1:]:
                count = count * dim
            return ShapedBuffer(self.buffer(dtype, count), size, self.name)
        param = UOp.param(len(self._params), dtype, size)
        self._params.append(param)
        return param

    def scalar(self, dtype: DType, name: str) -> UOp:
        """A value passed per call — ``svod.run(ast, bufs, alpha=2.5)``, ``plan.execute(alpha=2.5)`` —
        without recompiling. It travels as a variable holding its bits (the device contract's ``vals``),
        reinterpreted in the kernel."""
        if dtype == dtypes.bool:
            raise GraphError("a bool scalar is not supported; pass an int8 scalar and compare it", kernel=self.name,
                             stage="build", value=name)
        bits = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[dtype.itemsize]
        var = self.var(name, int(bits.min), int(bits.max), bits)
        return var if dtype == bits else var.bitcast(dtype)

    def range(self, end: int | UOp | None, kind: AxisKind = AxisKind.GLOBAL) -> UOp:
        """An index running ``0 .. end-1``; axes are numbered in call order, which is the nesting order. A
        sequential range without an end (``k.range(None, AxisKind.LOOP)``) is a ``while`` loop: ``exit`` ends it."""
        with self._naming():
            r = UOp.range(end, self._axes, kind)
        self._axes += 1
        return r

    def exit(self, loop: UOp, condition: Operand, *ranges: UOp) -> UOp:
        """End the sequential loop over ``loop`` after a turn in which ``condition`` holds (``UOp.exit``). State
        it after the loop's effects: a turn always runs whole (gate what a ``break`` in its middle skips).
        ``ranges``: the loops around ``loop`` that ``condition`` does not use."""
        with self._naming():
            exit_ = loop.exit(condition, *ranges)
        self._stores.append(exit_)
        return exit_

    def store(self, target: UOp, value: Operand, *ranges: UOp) -> UOp:
        """``target = value``, run once per value of every range ``target`` and ``value`` depend on, and of
        each of ``ranges`` (loops the store runs in though it does not use them)."""
        if target.op is not Ops.INDEX:
            raise GraphError("store() needs an indexed buffer such as out[i]", kernel=self.name,
                             stage="build", value=target.op)
        with self._naming():
            store = target.store(value, *ranges)
        self._stores.append(store)
        return store

    def atomic_add(self, target: UOp, value: Operand, *ranges: UOp) -> UOp:
        """``target += value`` as one indivisible update: work items may add into one element at once
        (a histogram, a scatter-add). int32, uint32, int64, uint64, float32 and float64 elements."""
        return self._atomic(target, value, Ops.ADD, ranges)

    def atomic_max(self, target: UOp, value: Operand, *ranges: UOp) -> UOp:
        """``target = max(target, value)`` atomically (floats: maximumNumber, as ``maximum``)."""
        return self._atomic(target, value, Ops.MAX, ranges)

    def atomic_min(self, target: UOp, value: Operand, *ranges: UOp) -> UOp:
        """``target = min(target, value)`` atomically (floats: minimumNumber, as ``minimum``)."""
        return self._atomic(target, value, Ops.MIN, ranges)

    def require(self, failed: UOp, message: str, *ranges: UOp) -> UOp:
        """The run fails with ``message`` (``RequirementError``) where ``failed`` holds, stated here as an effect
        (``Ops.REQUIRE``): where NumPy raises at a call from data the kernel computes. ``ranges`` as for
        ``store``."""
        if failed.dtype != dtypes.bool:
            raise GraphError("a requirement's condition is a bool", kernel=self.name, stage="build",
                             value=failed.dtype)
        requirement = UOp(Ops.REQUIRE, dtypes.void, (failed, *dict.fromkeys(ranges)), message)
        self._stores.append(requirement)
        return requirement

    def _atomic(self, target: UOp, value: Operand, op: Ops, ranges: tuple[UOp, ...] = ()) -> UOp:
        if target.op is not Ops.INDEX:
            raise GraphError("an atomic update needs an indexed buffer such as counts[b]", kernel=self.name,
                             stage="build", value=target.op)
        with self._naming():
            update = target.atomic(value, op, *ranges)
        self._stores.append(update)
        return update

    @property
    def effects(self) -> tuple[UOp, ...]:
        """The stores, atomic updates and loop exits stated so far, in order."""
        return tuple(self._stores)

    def discard_effects(self, count: int) -> None:
        """Forget every effect stated after the first ``count`` (a frontend that states a loop's body again
        once it knows which of its locals are reductions)."""
        del self._stores[count:]

    @contextmanager
    def _naming(self) -> Iterator[None]:
        """Errors from building this kernel's graph carry its name."""
        try:
            yield
        except GraphError as err:
            if err.kernel is not None:
                raise
            raise GraphError(err.detail, kernel=self.name, stage=err.stage, value=err.value) from err

    def build(self) -> UOp:
        """The kernel's SINK. Buffers no store reaches are kept as sources too, so the kernel still takes
        every buffer in slot order."""
        if not any(e.op in EFFECTS for e in self._stores):
            raise GraphError("a kernel needs at least one store", kernel=self.name, stage="build")
        reached = {u for store in self._stores for u in store.toposort() if u.op is Ops.PARAM}
        unused = [p for p in self._params if p not in reached]
        return UOp.sink(*self._stores, *unused, name=self.name)
