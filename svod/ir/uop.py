"""``UOp``: one immutable, hash-consed node of the IR.

Building the same structure twice gives the same object, so ``==`` is identity, graphs share every common
subexpression, and a node can key a dict in O(1). The table that makes this true holds nodes weakly: a
node lives as long as something uses it. It is guarded by a lock, so threads may build graphs at once.

Structure at a glance (the kernel AST of DESIGN.md)::

    SINK ── STORE ── INDEX ── PARAM(slot)            dtype: pointer to ``size`` elements
              │        └──── idx: RANGE(end, axis, kind) arithmetic, DEFINE_VAR, CONST
              └───── value: LOAD(INDEX(...)), ALU ops, CAST, WHERE, REDUCE(value, *ranges)
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import threading
import weakref
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypeAlias, cast

import numpy as np

from svod.dtype import DeviceSpec, DType, PtrDType, dtypes
from svod.errors import GraphError, Stage, VariableError
from svod.ir.alu import convert, round_float
from svod.ir.bounds import Bounds
from svod.ir.facts import bounds_of, fill, live_of, loads_of, ops_of, union_of
from svod.ir.ops import ALU, ATOMIC_OPS, BOOL_OPS, COMPARISON, FLOAT_ONLY, INT_ONLY, REDUCE_OPS, AxisKind, Ops

Number = bool | int | float
Operand: TypeAlias = "UOp | Number"


def _arg_identity(arg: Any) -> Any:
    """A dict key for ``arg`` that tells apart what ``==`` would merge (``0.0``/``-0.0``, NaN, True/1)."""
    kind = type(arg)
    if kind is float:
        return (float, arg.hex())
    if kind is tuple:
        return tuple(_arg_identity(a) for a in arg)
    if kind is bool:
        return (bool, arg)
    return arg


def _stable_repr(arg: Any) -> str:
    """A text form of ``arg`` that is the same in every process (no ids, no hash randomisation)."""
    if isinstance(arg, UOp):
        return "uop:" + arg.key
    if isinstance(arg, float):
        return "f" + arg.hex()
    if isinstance(arg, (bool, int, str)) or arg is None:
        return repr(arg)
    if isinstance(arg, bytes):
        return "b" + hashlib.sha256(arg).hexdigest()
    if isinstance(arg, Enum):
        return f"{type(arg).__name__}.{arg.name}"
    if isinstance(arg, (DType, DeviceSpec)):
        return repr(arg) if isinstance(arg, DType) else str(arg)
    if isinstance(arg, (tuple, list)):
        return "(" + ",".join(_stable_repr(a) for a in arg) + ")"
    if dataclasses.is_dataclass(arg) and not isinstance(arg, type):
        fields = ",".join(f"{f.name}={_stable_repr(getattr(arg, f.name))}" for f in dataclasses.fields(arg))
        return f"{type(arg).__name__}({fields})"
    raise GraphError(f"UOp arg of type {type(arg).__name__} has no stable form", stage="build", value=arg)



def check_var_value(name: str, value: object, lo: int, hi: int, *, kernel: str | None = None,
                    stage: Stage | None = None) -> int:
    """``value`` as an int, if it is an integer (a Python or numpy integer, not a bool) within ``[lo, hi]``.
    The one check every variable value passes, wherever it is given."""
    if type(value) is int and lo <= value <= hi:  # the common case, before the abstract checks (a call makes dozens)
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise VariableError(f"variable {name} must be integer", kernel=kernel, stage=stage, value=value)
    value = int(value)
    if not lo <= value <= hi:
        raise VariableError(f"variable {name}={value} is outside bounds [{lo}, {hi}]", kernel=kernel, stage=stage,
                            value=value)
    return value


_set = object.__setattr__
"""How a UOp's slots are set (its own ``__setattr__`` refuses)."""
_FACTS = ("_key", "_topo", "_bounds", "_loads", "_live", "_ops", "_unstated")
"""The slots that hold what is found about a node, once, when first asked (None until then)."""


class UOp:
    """An immutable IR node: ``op``, ``dtype``, sources ``src`` and an op-specific ``arg``."""

    __slots__ = ("__weakref__", "_bounds", "_key", "_live", "_loads", "_ops", "_topo", "_unstated", "arg", "dtype",
                 "op", "src")

    _table: ClassVar[weakref.WeakValueDictionary[tuple[Any, ...], UOp]] = weakref.WeakValueDictionary()
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _refs: ClassVar[dict[tuple[Any, ...], weakref.ref[UOp]]] = _table.data  # type: ignore[attr-defined]
    """``_table``'s own dict of weak references (untyped in typeshed): a lookup there skips ``get``'s Python frame."""

    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    _key: str | None
    _topo: tuple[UOp, ...] | None
    _bounds: Bounds | None
    _loads: bool | None
    _live: frozenset[UOp] | None
    _ops: int | None
    _unstated: frozenset[UOp] | None

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        identity = (op, dtype, src, arg if arg is None else _arg_identity(arg))
        found = cls._refs.get(identity)  # most nodes asked for exist: found without the lock
        node = None if found is None else found()
        if node is not None:
            return node
        with cls._lock:
            node = cls._table.get(identity)
            if node is None:
                node = object.__new__(cls)
                _set(node, "op", op)
                _set(node, "dtype", dtype)
                _set(node, "src", src)
                _set(node, "arg", arg)
                for fact in _FACTS:
                    _set(node, fact, None)
                cls._table[identity] = node
        return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable; use replace() to make a changed copy (set {name})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (UOp, (self.op, self.dtype, self.src, self.arg))

    def __repr__(self) -> str:
        return f"UOp({self.op!r}, {self.dtype!r}, arg={self.arg!r}, src=<{len(self.src)}>)"

    def __bool__(self) -> bool:
        raise GraphError("a UOp has no truth value; build a comparison and use where()", stage="build", value=self)

    def __eq__(self, other: object) -> bool:
        """Identity (UOps are hash-consed: equal graphs are one object). Against a number that would silently
        be False, so it is refused: ``x.eq(1.0)`` builds the comparison."""
        if isinstance(other, (int, float, np.number)):
            raise TypeError(f"UOp == {other!r} compares identity, not values; use .eq({other!r}) to build a "
                            "comparison")
        return self is other

    def __ne__(self, other: object) -> bool:
        if isinstance(other, (int, float, np.number)):
            raise TypeError(f"UOp != {other!r} compares identity, not values; use .ne({other!r}) to build a "
                            "comparison")
        return self is not other

    __hash__ = object.__hash__

    def replace(self, *, op: Ops | None = None, dtype: DType | None = None, src: tuple[UOp, ...] | None = None,
                arg: Any = ...) -> UOp:
        return UOp(self.op if op is None else op, self.dtype if dtype is None else dtype,
                   self.src if src is None else src, self.arg if arg is ... else arg)

    # ---- structure --------------------------------------------------------------------------------------

    def toposort(self) -> tuple[UOp, ...]:
        """Every reachable node, each after all of its sources, ``self`` last. Iterative, cached."""
        topo = self._topo
        if topo is None:
            topo = _toposort(self)
            object.__setattr__(self, "_topo", topo)
        return topo

    @property
    def key(self) -> str:
        """A structural sha256 (hex) of the graph below this node, the same in every process."""
        if self._key is None:
            for node in self.toposort():
                if node._key is None:
                    text = "|".join((node.op.name, repr(node.dtype), _stable_repr(node.arg),
                                     *(str(s._key) for s in node.src)))
                    object.__setattr__(node, "_key", hashlib.sha256(text.encode()).hexdigest())
        return cast(str, self._key)  # set above: self is the last node of its own toposort

    @property
    def bounds(self) -> Bounds:
        """``(vmin, vmax)``: the range of values this node can take (see ``svod.ir.bounds``).

        Computed once per node from its sources' bounds; the walk stops at nodes that already know theirs,
        so building a graph node by node costs time linear in its size.
        """
        if self._bounds is None:
            fill(self, "_bounds", bounds_of)
        return cast(Bounds, self._bounds)

    @property
    def reads_memory(self) -> bool:
        """Whether a LOAD is below this node (cached per node, so asking along a deep graph is linear)."""
        if self._loads is None:
            fill(self, "_loads", loads_of)
        return bool(self._loads)

    @property
    def live_ranges(self) -> frozenset[UOp]:
        """The ranges this node depends on that no REDUCE between them has closed: a RANGE's own, and its
        sources' but the ranges a REDUCE folds. Cached per node like ``bounds``; nodes whose ranges are their
        sources' share one set."""
        if self._live is None:
            fill(self, "_live", live_of)
        return cast(frozenset[UOp], self._live)

    @property
    def unstated_memory(self) -> frozenset[UOp]:
        """The memory this node's value reads without a memory state: each LOAD's at or below it whose INDEX is
        not through a state (as the INDEX names it; ``is_unstated_read``). Cached per node like ``bounds``."""
        if self._unstated is None:
            fill(self, "_unstated", _unstated_of)
        return cast(frozenset[UOp], self._unstated)

    @property
    def ops_below(self) -> int:
        """The ops of this node and every node below it, one bit each (``OP_BITS``): a rewrite whose rules
        match none of them leaves the graph as it is. Cached per node like ``bounds``."""
        if self._ops is None:
            fill(self, "_ops", ops_of)
        return cast(int, self._ops)

    @property
    def vmin(self) -> int | float:
        return self.bounds[0]

    @property
    def vmax(self) -> int | float:
        return self.bounds[1]

    # ---- constructors -----------------------------------------------------------------------------------

    @staticmethod
    def const(dtype: DType, value: Number) -> UOp:
        """A constant of ``dtype``: a number the dtype holds (see ``_check_fits``), never a wrapped one."""
        if type(value) is bool and dtype.kind == "bool":  # a condition's negation (``c.ne(True)``): no checks
            return UOp(Ops.CONST, dtype, (), value)
        if isinstance(value, np.generic) and isinstance(value.item(), (bool, int, float)):
            value = value.item()
        if isinstance(value, UOp) or not isinstance(value, (bool, int, float)):
            raise GraphError(f"a {dtype!r} constant must be a Python number", stage="build", value=value)
        if isinstance(value, float) and not dtype.is_float and not value.is_integer():
            raise GraphError(f"float constant {value!r} given where {dtype!r} is needed", stage="build",
                             value=value)
        if dtype.kind == "void" or isinstance(dtype, PtrDType):
            raise GraphError(f"no constants of {dtype!r}", stage="build", value=value)
        _check_fits(value, dtype)
        return UOp(Ops.CONST, dtype, (), convert(value, dtype))

    @staticmethod
    def index_const(value: int) -> UOp:
        return UOp.const(dtypes.index, value)

    @staticmethod
    def define_var(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
        if not name.isidentifier():
            raise GraphError("a variable name must be an identifier", stage="build", value=name)
        if min_val > max_val:
            raise GraphError(f"variable {name} has min {min_val} > max {max_val}",
                             stage="build", value=(min_val, max_val))
        if min_val < dtype.min or max_val > dtype.max:
            raise GraphError(f"variable {name} bounds do not fit {dtype!r}", stage="build", value=(min_val, max_val))
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, int(min_val), int(max_val)))

    def bind(self, value: int) -> UOp:
        """Fix this variable's value; the value is checked against the variable's bounds now."""
        if self.op is not Ops.DEFINE_VAR:
            raise GraphError("only a DEFINE_VAR can be bound", stage="build", value=self.op)
        name, lo, hi = self.arg
        checked = check_var_value(name, value, lo, hi, stage="build")
        return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, checked)))

    @staticmethod
    def param(slot: int, dtype: DType, size: int | UOp) -> UOp:
        """Buffer argument ``slot``: a pointer to ``size`` elements (an int, or a UOp when symbolic)."""
        if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
            raise GraphError("a buffer slot is a non-negative integer", stage="build", value=slot)
        if isinstance(size, UOp):
            return UOp(Ops.PARAM, dtype.ptr(-1), (size,), slot)
        if size < 0:
            raise GraphError(f"buffer parameter {slot} has negative size", stage="build", value=size)
        return UOp(Ops.PARAM, dtype.ptr(size), (), slot)

    @staticmethod
    def register(slot: int, dtype: DType, *items: UOp) -> UOp:
        """Register ``slot``: one ``dtype`` element that each work item of the parallel ranges ``items`` has a
        copy of (a local that a loop carries from turn to turn). Accessed at index 0 through memory states, as
        a buffer is; no other work item sees it, and it lives in a machine register once the backend has
        promoted it. Its sources say whose it is: what reads it depends on them as on a work item's index."""
        if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
            raise GraphError("a register slot is a non-negative integer", stage="build", value=slot)
        if any(r.op is not Ops.RANGE or r.arg[1] is not AxisKind.GLOBAL for r in items):
            raise GraphError("a register is one per work item of GLOBAL ranges", stage="build", value=items)
        return UOp(Ops.DEFINE_REG, dtype.ptr(1, local=True), tuple(dict.fromkeys(items)), slot)

    @staticmethod
    def range(end: int | UOp | None, axis: int, kind: AxisKind = AxisKind.GLOBAL) -> UOp:
        """An index running ``0 .. end-1``. ``end`` None: a sequential loop without a bound (a ``while``), which
        runs until an ``EXIT`` ends it (its end is ``UNBOUNDED``)."""
        if end is None:
            if kind is not AxisKind.LOOP:
                raise GraphError("only a sequential (LOOP) range may go without a bound", stage="build", value=kind)
            end = UNBOUNDED
        return UOp(Ops.RANGE, dtypes.index, (_as_index(end),), (axis, kind))

    def exit(self, condition: Operand, *ranges: UOp) -> UOp:
        """An early exit of the sequential loop over this range (``Ops.EXIT``): after each turn, the loop ends
        if ``condition`` (a bool) holds. The kernel states it after the effects of the loop (a SINK source:
        ``KernelBuilder.exit``); a turn always runs whole, so what a ``break`` in its middle skips is gated by
        its author. ``ranges``, as for ``store``: the loops around this one that the condition does not use
        (the exit is tested in every turn of each)."""
        if self.op is not Ops.RANGE or self.arg[1] is not AxisKind.LOOP:
            raise GraphError("only a sequential loop (a LOOP range) exits early", stage="build", value=self.op)
        cond = _lift(condition, dtypes.bool)
        if cond.dtype != dtypes.bool:
            raise GraphError("a loop's exit condition is a bool", stage="build", value=cond.dtype)
        return UOp(Ops.EXIT, dtypes.void, (self, cond, *_effect_ranges(tuple(r for r in ranges if r is not self))))

    @staticmethod
    def special(end: int | UOp, name: str) -> UOp:
        return UOp(Ops.SPECIAL, dtypes.index, (_as_index(end),), name)

    @staticmethod
    def sink(*srcs: UOp, name: str | None = None) -> UOp:
        return UOp(Ops.SINK, dtypes.void, tuple(srcs), name)

    @staticmethod
    def device(spec: str | DeviceSpec) -> UOp:
        return UOp(Ops.DEVICE, dtypes.void, (), str(DeviceSpec.parse(spec)))

    @staticmethod
    def linear(*uops: UOp) -> UOp:
        return UOp(Ops.LINEAR, dtypes.void, tuple(uops))

    @staticmethod
    def source(code: str) -> UOp:
        return UOp(Ops.SOURCE, dtypes.void, (), code)

    @staticmethod
    def binary(data: bytes) -> UOp:
        return UOp(Ops.BINARY, dtypes.void, (), bytes(data))

    @staticmethod
    def program(sink: UOp, device: UOp, linear: UOp | None = None, source: UOp | None = None,
                binary: UOp | None = None, metadata: Any = None) -> UOp:
        """The compilation of one kernel, one stage per source; later stages need the earlier ones."""
        stages = [sink, device]
        later = (("LINEAR", linear), ("SOURCE", source), ("BINARY", binary))
        for position, (name, stage) in enumerate(later):
            if stage is None:
                given = [n for n, s in later[position + 1:] if s is not None]
                if given:
                    raise GraphError(f"PROGRAM stage {given[0]} needs its {name} stage first", stage="build")
                break
            stages.append(stage)
        return UOp(Ops.PROGRAM, dtypes.void, tuple(stages), metadata)

    # ---- memory ---------------------------------------------------------------------------------------

    def index(self, idx: Operand, gate: UOp | None = None) -> UOp:
        """Element ``idx`` of this buffer. With a ``gate`` (a bool), the access happens only where the gate
        holds: a load elsewhere yields 0 and a store is skipped."""
        if not isinstance(self.dtype, PtrDType):
            raise GraphError("only a buffer (pointer) can be indexed", stage="build", value=self.dtype)
        if gate is None:
            return UOp(Ops.INDEX, self.dtype, (self, _as_index(idx)))
        if gate.dtype != dtypes.bool:
            raise GraphError("an access gate must be a bool", stage="build", value=gate.dtype)
        return UOp(Ops.INDEX, self.dtype, (self, _as_index(idx), gate))

    def __getitem__(self, idx: Operand) -> UOp:
        return self.index(idx)

    def state(self, version: int, *loops: UOp) -> UOp:
        """This buffer's memory as one statement of a kernel sees it: a *memory state*, ``AFTER(buffer,
        *loops)`` whose arg is ``version``, the number of effects stated on the buffer before the statement.

        An access through a state happens at its statement, whatever the kernel states after it: a load
        reads the buffer after the effects on it numbered below ``version`` and before those numbered
        ``version`` and up (an effect through a state is the one numbered ``version``), so the value it
        reads is held, not read again after a later store. ``loops`` are the sequential loops around the
        statement: the state is the one of their current turn (after every effect of the turns before),
        so no access through it leaves them. A buffer without states is read where its value is used,
        after every effect stated before that use (the builder's rule)."""
        if self.op not in (Ops.PARAM, Ops.DEFINE_REG):
            raise GraphError("a memory state is of a buffer (PARAM) or a register (DEFINE_REG)", stage="build",
                             value=self.op)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise GraphError("a memory state's version is a count of effects", stage="build", value=version)
        for r in loops:
            if r.op is not Ops.RANGE or r.arg[1] is AxisKind.GLOBAL:
                raise GraphError("a memory state names the sequential loops around its statement", stage="build",
                                 value=r)
        return UOp(Ops.AFTER, self.dtype, (self, *dict.fromkeys(loops)), version)

    def load(self) -> UOp:
        if self.op is not Ops.INDEX or not isinstance(self.dtype, PtrDType):
            raise GraphError("load() needs an INDEX into a buffer", stage="build", value=self.op)
        return UOp(Ops.LOAD, self.dtype.base, (self,))

    def store(self, value: Operand, *ranges: UOp) -> UOp:
        """Store ``value`` at this INDEX. The store runs once per value of each range its index and value
        depend on, and of each of ``ranges`` too: a loop around a store that does not use its range
        (``for t in range(T): x[i] = x[i] * 2``) names it here, or the store would run once."""
        if self.op is not Ops.INDEX or not isinstance(self.dtype, PtrDType):
            raise GraphError("store() needs an INDEX into a buffer", stage="build", value=self.op)
        value = _lift(value, self.dtype.base)
        if value.dtype != self.dtype.base:
            raise GraphError(f"storing {value.dtype!r} into a buffer of {self.dtype.base!r}; cast first",
                             stage="build", value=value.dtype)
        return UOp(Ops.STORE, dtypes.void, (self, value, *_effect_ranges(ranges)))

    def atomic(self, value: Operand, op: Ops = Ops.ADD, *ranges: UOp) -> UOp:
        """Update the element this INDEX points at with ``op`` (ADD, MAX or MIN) as one indivisible step, so
        work items may update one element at once. ``ranges`` as for ``store``."""
        if self.op is not Ops.INDEX or not isinstance(self.dtype, PtrDType):
            raise GraphError("an atomic update needs an INDEX into a buffer", stage="build", value=self.op)
        if op not in ATOMIC_OPS:
            raise GraphError(f"atomic op must be one of {sorted(o.name for o in ATOMIC_OPS)}", stage="build", value=op)
        value = _lift(value, self.dtype.base)
        if value.dtype != self.dtype.base:
            raise GraphError(f"atomic update of a buffer of {self.dtype.base!r} with {value.dtype!r}; cast first",
                             stage="build", value=value.dtype)
        return UOp(Ops.ATOMIC, dtypes.void, (self, value, *_effect_ranges(ranges)), op)

    def reduce(self, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
        if op not in REDUCE_OPS:
            raise GraphError(f"reduce op must be one of {sorted(o.name for o in REDUCE_OPS)}", stage="build", value=op)
        if not ranges or any(r.op is not Ops.RANGE for r in ranges):
            raise GraphError("reduce() needs one or more RANGEs", stage="build", value=ranges)
        value = _value(self)
        return UOp(Ops.REDUCE, value.dtype, (value, *ranges), op)

    def after(self, *deps: UOp) -> UOp:
        """This value, ordered after ``deps`` have happened.

        In a kernel AST, an element or value ordered after effects (STORE, ATOMIC) is the element or value
        itself: a work item's effects happen in the order the kernel states them (its SINK), and each
        effect's value is computed after the effects before it, so ``t[i].after(st)`` used in an effect
        stated after ``st`` already sees it. Lowering orders memory with AFTER (an accumulator after its
        initial store), which stays a node."""
        if deps and all(d.op in (Ops.STORE, Ops.ATOMIC) for d in deps) and \
                self.op not in (Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL, Ops.AFTER):
            return self
        return UOp(Ops.AFTER, self.dtype, (self, *deps))

    # ---- values ---------------------------------------------------------------------------------------

    def cast(self, dtype: DType) -> UOp:
        value = _value(self)
        return value if value.dtype == dtype else UOp(Ops.CAST, dtype, (value,))

    def bitcast(self, dtype: DType) -> UOp:
        value = _value(self)
        if dtypes.bool in (value.dtype, dtype):
            raise GraphError("bitcast to or from bool is not defined; use cast()", stage="build", value=dtype)
        if value.dtype.itemsize != dtype.itemsize:
            raise GraphError(f"bitcast from {value.dtype!r} to {dtype!r} changes the size", stage="build", value=dtype)
        return UOp(Ops.BITCAST, dtype, (value,))

    def where(self, a: Operand, b: Operand, dtype: DType | None = None) -> UOp:
        """``a`` where this condition holds, else ``b``. Numbers take the dtype of the UOp beside them, or
        ``dtype``; two numbers alone default to int32, float32 or bool by their kind."""
        cond = _value(self)
        if cond.dtype != dtypes.bool:
            raise GraphError("where() needs a bool condition", stage="build", value=cond.dtype)
        av, bv = _pair(a, b, dtype)
        return alu(Ops.WHERE, cond, av, bv)

    def alu(self, op: Ops, *others: Operand) -> UOp:
        """``op`` applied to this value and ``others`` (numbers become constants of this dtype)."""
        me = _value(self)
        return alu(op, me, *[_lift(o, me.dtype) for o in others])

    def _reflected(self, op: Ops, other: Operand) -> UOp:
        """``other op self``, for Python's reflected operators."""
        return _lift(other, _value(self).dtype).alu(op, self)

    def __add__(self, other: Operand) -> UOp: return self.alu(Ops.ADD, other)
    def __radd__(self, other: Operand) -> UOp: return self._reflected(Ops.ADD, other)
    def __sub__(self, other: Operand) -> UOp: return self.alu(Ops.SUB, other)
    def __rsub__(self, other: Operand) -> UOp: return self._reflected(Ops.SUB, other)
    def __mul__(self, other: Operand) -> UOp: return self.alu(Ops.MUL, other)
    def __rmul__(self, other: Operand) -> UOp: return self._reflected(Ops.MUL, other)
    def __truediv__(self, other: Operand) -> UOp: return self.alu(Ops.FDIV, other)
    def __rtruediv__(self, other: Operand) -> UOp: return self._reflected(Ops.FDIV, other)
    def __floordiv__(self, other: Operand) -> UOp: return self.alu(Ops.IDIV, other)
    def __rfloordiv__(self, other: Operand) -> UOp: return self._reflected(Ops.IDIV, other)
    def __mod__(self, other: Operand) -> UOp: return self.alu(Ops.MOD, other)
    def __rmod__(self, other: Operand) -> UOp: return self._reflected(Ops.MOD, other)
    def __and__(self, other: Operand) -> UOp: return self.alu(Ops.AND, other)
    def __rand__(self, other: Operand) -> UOp: return self._reflected(Ops.AND, other)
    def __or__(self, other: Operand) -> UOp: return self.alu(Ops.OR, other)
    def __ror__(self, other: Operand) -> UOp: return self._reflected(Ops.OR, other)
    def __xor__(self, other: Operand) -> UOp: return self.alu(Ops.XOR, other)
    def __rxor__(self, other: Operand) -> UOp: return self._reflected(Ops.XOR, other)
    def __lshift__(self, other: Operand) -> UOp: return self.alu(Ops.SHL, other)
    def __rlshift__(self, other: Operand) -> UOp: return self._reflected(Ops.SHL, other)
    def __rshift__(self, other: Operand) -> UOp: return self.alu(Ops.SHR, other)
    def __rrshift__(self, other: Operand) -> UOp: return self._reflected(Ops.SHR, other)
    def __pow__(self, other: Operand) -> UOp: return self.alu(Ops.POW, other)
    def __rpow__(self, other: Operand) -> UOp: return self._reflected(Ops.POW, other)

    def __invert__(self) -> UOp:
        """Bitwise not of an integer (every bit flipped), logical not of a bool."""
        me = _value(self)
        if me.dtype.is_float:
            raise GraphError("~ needs an integer or bool operand", stage="build", value=me.dtype)
        ones = True if me.dtype == dtypes.bool else me.dtype.max if me.dtype.is_unsigned else -1
        return me.alu(Ops.XOR, ones)
    def __neg__(self) -> UOp: return self.alu(Ops.NEG)
    def __abs__(self) -> UOp: return self.alu(Ops.ABS)
    def __lt__(self, other: Operand) -> UOp: return self.alu(Ops.CMPLT, other)
    def __le__(self, other: Operand) -> UOp: return self.alu(Ops.CMPLE, other)
    def __gt__(self, other: Operand) -> UOp: return self._reflected(Ops.CMPLT, other)
    def __ge__(self, other: Operand) -> UOp: return self._reflected(Ops.CMPLE, other)

    def lt(self, other: Operand) -> UOp: return self.alu(Ops.CMPLT, other)
    def le(self, other: Operand) -> UOp: return self.alu(Ops.CMPLE, other)
    def gt(self, other: Operand) -> UOp: return self._reflected(Ops.CMPLT, other)
    def ge(self, other: Operand) -> UOp: return self._reflected(Ops.CMPLE, other)
    def eq(self, other: Operand) -> UOp: return self.alu(Ops.CMPEQ, other)
    def ne(self, other: Operand) -> UOp: return self.alu(Ops.CMPNE, other)
    def maximum(self, other: Operand) -> UOp: return self.alu(Ops.MAX, other)
    def minimum(self, other: Operand) -> UOp: return self.alu(Ops.MIN, other)
    def exp2(self) -> UOp: return self.alu(Ops.EXP2)
    def log2(self) -> UOp: return self.alu(Ops.LOG2)
    def sin(self) -> UOp: return self.alu(Ops.SIN)
    def sqrt(self) -> UOp: return self.alu(Ops.SQRT)
    def reciprocal(self) -> UOp: return self.alu(Ops.RECIPROCAL)
    def exp(self) -> UOp: return self.alu(Ops.EXP)
    def log(self) -> UOp: return self.alu(Ops.LOG)
    def cos(self) -> UOp: return self.alu(Ops.COS)
    def tan(self) -> UOp: return self.alu(Ops.TAN)
    def tanh(self) -> UOp: return self.alu(Ops.TANH)
    def erf(self) -> UOp: return self.alu(Ops.ERF)
    def floor(self) -> UOp: return self.alu(Ops.FLOOR)
    def ceil(self) -> UOp: return self.alu(Ops.CEIL)
    def trunc(self) -> UOp: return self.alu(Ops.TRUNC)
    def round(self) -> UOp:
        """To the nearest integer, ties to even (numpy's ``round``)."""
        return self.alu(Ops.RINT)
    def pow(self, other: Operand) -> UOp: return self.alu(Ops.POW, other)
    def fmod(self, other: Operand) -> UOp: return self.alu(Ops.FMOD, other)
    def sigmoid(self) -> UOp:
        """``1 / (1 + exp(-x))``, written so that ``exp`` never overflows: with ``e = exp(-|x|)``, ``1/(1+e)``
        for ``x >= 0`` and ``e/(1+e)`` below (a large negative ``x`` keeps its tiny result)."""
        me = _value(self)
        e = (-abs(me)).exp()
        r = (1.0 + e).reciprocal()
        return (me >= 0.0).where(r, e * r)
    def rsqrt(self) -> UOp: return self.sqrt().reciprocal()
    def clamp(self, lo: Operand, hi: Operand) -> UOp:
        """This value limited to ``[lo, hi]``; a NaN stays NaN, as in ``np.clip``."""
        me = _value(self)
        limited = me.maximum(lo).minimum(hi)
        return me.ne(me).where(me, limited) if me.dtype.is_float else limited


UNBOUNDED = int(dtypes.index.max)
"""The end of a loop without a bound (``UOp.range(None, ...)``, a ``while``): as many turns as an index counts,
2^63 - 1, more than any kernel runs (centuries). Its ``EXIT`` ends it; the analyses see its index within
``[0, 2^63 - 2]``, which holds whatever it is, and renderers spell it as a loop without a test."""


def is_unbounded(r: UOp) -> bool:
    """Whether ``r`` (an AST or LINEAR RANGE) is a loop without a bound."""
    end = r.src[0] if r.op is Ops.RANGE else None
    return end is not None and end.op is Ops.CONST and end.arg == UNBOUNDED


def exits(sink: UOp) -> dict[UOp, UOp]:
    """Each loop of ``sink`` that exits early, with its EXIT (a SINK source)."""
    return {e.src[0]: e for e in sink.src if e.op is Ops.EXIT}


def runs_as_written(sink: UOp) -> bool:
    """Whether a work item of kernel ``sink`` must run its statements one turn after another as stated: a loop
    of it exits early, or it carries a register from turn to turn. Lowering that computes several work items'
    statements as one (a tile, a private copy of an atomic's buffer, a reduction split into parts) leaves it
    alone."""
    return bool(exits(sink)) or any(u.op is Ops.DEFINE_REG for u in sink.toposort())


def kernel_label(sink: UOp) -> str:
    """The name a kernel goes by in errors and listings: the SINK's name, or ``kernel``."""
    return sink.arg if isinstance(sink.arg, str) and sink.arg else "kernel"


def pointee(node: UOp) -> DType:
    """The element dtype of a pointer-typed node (a PARAM, a DEFINE_REG, an INDEX)."""
    if not isinstance(node.dtype, PtrDType):
        raise GraphError(f"{node.op.name} is not a pointer", stage="build", value=node.dtype)
    return node.dtype.base


def memory_of(node: UOp) -> UOp:
    """The memory (PARAM, DEFINE_REG, DEFINE_LOCAL) behind a chain of AFTERs."""
    while node.op is Ops.AFTER:
        node = node.src[0]
    return node


def is_state(node: UOp) -> bool:
    """Whether ``node`` is a memory state (``UOp.state``): an AFTER of a buffer numbered by a version."""
    return node.op is Ops.AFTER and type(node.arg) is int


def state_version(index: UOp) -> int | None:
    """The version of the memory state an INDEX accesses its buffer through, or None for a bare buffer."""
    memory = index.src[0]
    return memory.arg if is_state(memory) else None


def stated_reads(root: UOp, known: dict[UOp, dict[UOp, int]], among: Container[UOp] | None = None) -> dict[UOp, int]:
    """The memory ``root`` reads through memory states (``UOp.state``), each with the highest version read:
    ``root`` can be computed only after that many effects on each. Only memory ``among`` counts, where given.
    ``known`` holds what is found, node by node, for the next call (with the same ``among``)."""
    for u in unknown_below(root, known):
        found: dict[UOp, int] = {}
        for s in u.src:
            for memory, version in known[s].items():
                found[memory] = max(version, found.get(memory, version))
        if u.op is Ops.INDEX and is_state(u.src[0]) and (among is None or u.src[0].src[0] in among):
            memory = u.src[0].src[0]
            found[memory] = max(u.src[0].arg, found.get(memory, u.src[0].arg))
        known[u] = found
    return known[root]


def is_unstated_read(u: UOp, written: Container[UOp]) -> bool:
    """Whether ``u`` loads memory in ``written`` without a memory state: the builder's rule, read where its
    value is used, after every effect stated before that use."""
    return u.op is Ops.LOAD and not is_state(u.src[0].src[0]) and u.src[0].src[0] in written


def reads_unstated(root: UOp, written: Container[UOp], known: dict[UOp, bool]) -> bool:
    """Whether ``root`` depends on a read of memory in ``written`` without a memory state (``is_unstated_read``):
    its value is the memory's where it is used. ``known`` holds what is found, node by node, for the next call."""
    found = known.get(root)
    if found is None:
        found = known[root] = any(memory in written for memory in root.unstated_memory)
    return found


def written_memory(nodes: Iterable[UOp]) -> set[UOp]:
    """The memory (see ``memory_of``) that the STOREs and ATOMICs among ``nodes`` write."""
    return {memory_of(u.src[0].src[0]) for u in nodes if u.op in (Ops.STORE, Ops.ATOMIC)}


def param_size(param: UOp) -> UOp:
    """The element count of a buffer PARAM or a register (or of the memory a state is of), as an index
    expression (a constant unless symbolic)."""
    param = memory_of(param) if is_state(param) else param
    if param.op not in (Ops.PARAM, Ops.DEFINE_REG) or not isinstance(param.dtype, PtrDType):
        raise GraphError("param_size() needs a PARAM or a DEFINE_REG", stage="build", value=param.op)
    return param.src[0] if param.src and param.op is Ops.PARAM else UOp.index_const(param.dtype.size)


def _check_fits(value: Number, dtype: DType) -> None:
    """Refuse a constant ``dtype`` cannot hold, which a C cast would silently wrap (300 as int8 is 44).

    Integers (and bool, which holds 0 and 1) must lie in the dtype's range. A float dtype holds every
    number up to rounding, and inf and nan are its values too; but a finite number that rounds to
    infinity (1e300 as float32, 65520 as float16) is refused: written into a kernel it is a mistake far
    more often than a spelling of inf. Numbers too small for the dtype round to 0, as rounding does."""
    if dtype.is_float:
        if isinstance(value, float) and not math.isfinite(value):
            return
        try:
            rounded = round_float(float(value), dtype)
        except OverflowError:  # an int beyond every float
            rounded = math.inf
        if math.isinf(rounded):
            raise GraphError(f"constant {value!r} overflows {dtype!r} (its largest finite value is "
                             f"{_largest_finite(dtype)!r}); use math.inf if infinity is meant", stage="build",
                             value=value)
    elif not dtype.min <= value <= dtype.max:
        raise GraphError(f"constant {value!r} does not fit {dtype.name}, which holds [{dtype.min}, {dtype.max}]",
                         stage="build", value=value)


def _largest_finite(dtype: DType) -> float:
    return float(np.finfo(dtype.numpy).max)


def _toposort(root: UOp) -> tuple[UOp, ...]:
    return tuple(unknown_below(root, ()))


def unknown_below(root: UOp, known: Container[UOp]) -> list[UOp]:
    """The nodes below ``root`` (``root`` included) not in ``known``, each after its sources: a walk that
    stops where ``known`` begins, so facts filled in node by node cost one visit per node in all (a
    toposort of each new node would cost the whole graph each time)."""
    if root in known:  # the common question, asked once per use of a node
        return []
    order: list[UOp] = []
    visited = {root}
    stack: list[tuple[UOp, Iterator[UOp]]] = [(root, iter(root.src))]
    while stack:
        node, sources = stack[-1]
        for s in sources:  # the next source not yet visited, depth first
            if s not in visited and s not in known:
                visited.add(s)
                stack.append((s, iter(s.src)))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def _unstated_of(node: UOp) -> frozenset[UOp]:
    """``node.unstated_memory`` from its sources' (known: they come first)."""
    memory = union_of(node, "_unstated")
    if node.op is Ops.LOAD and not is_state(node.src[0].src[0]) and node.src[0].src[0] not in memory:
        return memory | {node.src[0].src[0]}
    return memory


def _value(u: UOp) -> UOp:
    """A value operand: an INDEX used in arithmetic means the element it points at."""
    if isinstance(u.dtype, PtrDType) and u.op is Ops.INDEX and not u.dtype.local:
        return u.load()
    return u


def _effect_ranges(ranges: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """The extra sources of an effect: the GLOBAL or LOOP ranges it runs over, each once, in the order given."""
    for r in ranges:
        if not isinstance(r, UOp) or r.op is not Ops.RANGE or r.arg[1] is AxisKind.REDUCE:
            raise GraphError("an effect runs over GLOBAL or LOOP ranges only", stage="build", value=r)
    return tuple(dict.fromkeys(ranges))


def _lift(x: Operand, dtype: DType) -> UOp:
    if isinstance(x, UOp):
        return _value(x)
    return UOp.const(dtype, x)


def _pair(a: Operand, b: Operand, dtype: DType | None = None) -> tuple[UOp, UOp]:
    """Two operands of one dtype; a Python number takes ``dtype``, or the dtype of the UOp beside it, or
    the default dtype of its kind."""
    if dtype is not None:
        return _lift(a, dtype), _lift(b, dtype)
    if isinstance(a, UOp):
        av = _value(a)
        return av, _lift(b, av.dtype)
    if isinstance(b, UOp):
        bv = _value(b)
        return _lift(a, bv.dtype), bv
    kinds = {type(x) for x in (a, b)}
    default = dtypes.bool if kinds == {bool} else dtypes.float32 if float in kinds else dtypes.int32
    return UOp.const(default, a), UOp.const(default, b)


def _as_index(x: Operand) -> UOp:
    if isinstance(x, UOp):
        value = _value(x)
        if not value.dtype.is_int:
            raise GraphError("an index or size must be an integer", stage="build", value=value.dtype)
        return value if value.dtype == dtypes.index else value.cast(dtypes.index)
    if isinstance(x, bool) or not isinstance(x, int):
        raise GraphError("an index or size must be an integer", stage="build", value=x)
    return UOp.index_const(x)


FUSED_DTYPES = (dtypes.float32, dtypes.float64)
"""The types a MULACC (one rounding of ``a * b + c``) is defined on, and so the sums of products that fuse."""


@dataclass(frozen=True, slots=True)
class _Signature:
    """What an ALU op asks of its operands, and whether its result is a bool (``alu``)."""

    condition: bool
    """Its first source is a bool condition, not an operand (``WHERE``)."""
    floats: bool
    ints: bool
    bools: bool
    """Defined on bools."""
    fused: bool
    """Defined on ``FUSED_DTYPES`` only."""
    compares: bool


_SIGNATURES = {op: _Signature(op is Ops.WHERE, op in FLOAT_ONLY, op in INT_ONLY, op in BOOL_OPS, op is Ops.MULACC,
                              op in COMPARISON) for op in ALU}
"""Each ALU op's signature, looked up once per node built: ``alu`` runs for every operator applied to a UOp."""


def alu(op: Ops, *srcs: UOp) -> UOp:
    """Build an ALU node, checking that its operands fit the op."""
    signature = _SIGNATURES.get(op)
    if signature is None:
        raise GraphError("not an ALU op", stage="build", value=op)
    operands = srcs[1:] if signature.condition else srcs
    dtype = operands[0].dtype
    for s in operands:
        if s.dtype is not dtype and s.dtype != dtype:
            raise GraphError(f"{op.name} of mixed dtypes {', '.join(repr(s.dtype) for s in operands)}; cast first",
                             stage="build", value=tuple(s.dtype for s in operands))
    if signature.floats and not dtype.is_float:
        raise GraphError(f"{op.name} needs a float operand; use // for integer division", stage="build", value=dtype)
    if signature.ints and dtype.is_float:
        raise GraphError(f"{op.name} needs an integer operand", stage="build", value=dtype)
    if not signature.bools and dtype.kind == "bool":
        raise GraphError(f"{op.name} is not defined on bool; cast to an integer first", stage="build", value=dtype)
    if signature.condition and srcs[0].dtype != dtypes.bool:
        raise GraphError("WHERE needs a bool condition", stage="build", value=srcs[0].dtype)
    if signature.fused and dtype not in FUSED_DTYPES:
        raise GraphError("MULACC is defined on float32 and float64", stage="build", value=dtype)
    return UOp(op, dtypes.bool if signature.compares else dtype, srcs)

