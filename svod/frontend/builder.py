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

from svod.dtype import DType, dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, UOp
from svod.ir.uop import Operand


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
                             value=(min_val, max_val))
        return var

    def buffer(self, dtype: DType, size: int | UOp) -> UOp:
        """The next buffer argument: slots are 0, 1, 2 ... in call order."""
        param = UOp.param(len(self._params), dtype, size)
        self._params.append(param)
        return param

    def range(self, end: int | UOp, kind: AxisKind = AxisKind.GLOBAL) -> UOp:
        """An index running ``0 .. end-1``; axes are numbered in call order, which is the nesting order."""
        r = UOp.range(end, self._axes, kind)
        self._axes += 1
        return r

    def store(self, target: UOp, value: Operand) -> UOp:
        if target.op is not Ops.INDEX:
            raise GraphError("store() needs an indexed buffer such as out[i]", kernel=self.name, value=target.op)
        store = target.store(value)
        self._stores.append(store)
        return store

    def atomic_add(self, target: UOp, value: Operand) -> UOp:
        """``target += value`` as one indivisible update: work items may add into one element at once
        (a histogram, a scatter-add). int32, uint32, int64, uint64, float32 and float64 elements."""
        return self._atomic(target, value, Ops.ADD)

    def atomic_max(self, target: UOp, value: Operand) -> UOp:
        """``target = max(target, value)`` atomically (floats: maximumNumber, as ``maximum``)."""
        return self._atomic(target, value, Ops.MAX)

    def atomic_min(self, target: UOp, value: Operand) -> UOp:
        """``target = min(target, value)`` atomically (floats: minimumNumber, as ``minimum``)."""
        return self._atomic(target, value, Ops.MIN)

    def _atomic(self, target: UOp, value: Operand, op: Ops) -> UOp:
        if target.op is not Ops.INDEX:
            raise GraphError("an atomic update needs an indexed buffer such as counts[b]", kernel=self.name,
                             value=target.op)
        update = target.atomic(value, op)
        self._stores.append(update)
        return update

    def build(self) -> UOp:
        """The kernel's SINK. Buffers no store reaches are kept as sources too, so the kernel still takes
        every buffer in slot order."""
        if not self._stores:
            raise GraphError("a kernel needs at least one store", kernel=self.name)
        reached = {u for store in self._stores for u in store.toposort() if u.op is Ops.PARAM}
        unused = [p for p in self._params if p not in reached]
        return UOp.sink(*self._stores, *unused, name=self.name)
