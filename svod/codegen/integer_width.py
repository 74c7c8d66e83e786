"""``narrow_integers``: a kernel's 64-bit integer values computed in 32 bits, on a device without 64-bit integers
(WGSL has none), wherever that gives what the 64-bit value gives; a kernel where it may not is refused.

A kernel computes in int64 what NumPy and numba do (``svod.int64(x)``, ``int32 + uint32``, an ``np.int64``
argument). Narrowed, a value keeps its low 32 bits, which is all that arithmetic a wrap commutes with needs of its
operands (``+``, ``-``, ``*``, negation, the bit operators, ``<<`` of it, a ``where``'s choice, a sum or product
over a range). Every other use (a comparison, ``//`` and ``%``, ``max``, a conversion, a store, a shift's amount)
needs the value itself, and gets it only where the value's bounds prove that it fits (``UOp.bounds``, with a
register read bounded by what is stored into it): ``(a * b) // 7`` runs where the product fits int32, though
``a * b`` of int32 ``a`` and ``b`` may not, and is refused where it may not, naming the value, rather than run
with a value that wrapped at 32 bits where NumPy's did not. Even a conversion to int32 (which wraps the same
either way) needs the value whole: a jitted function's scalar carried in an int32 cell on such a device is stored
through one, where NumPy's int64 would not wrap. An ``np.int64`` argument travels in 32 bits, its variable held
to int32's range, so a run with a value past it is refused when its variables are checked.
"""

from __future__ import annotations

import dataclasses

from svod.dtype import DType, PtrDType, dtypes
from svod.errors import GraphError
from svod.ir import Ops, UOp
from svod.ir.alu import wrap_int
from svod.ir.bounds import Bounds, compute_bounds
from svod.ir.uop import memory_of, pointee

NARROWED = {dtypes.int64: dtypes.int32, dtypes.uint64: dtypes.uint32}
"""Each 64-bit integer dtype and the 32-bit one it is computed in."""
_LOW_BITS_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.MULACC, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR, Ops.AFTER})
"""Ops whose result's low 32 bits depend on their operands' low 32 bits alone."""
_WIDENINGS = 6
"""The rounds a register's bounds may grow in (those still growing half way are tried at the narrow dtype's range)
before they are taken as its dtype's: a counter's grow in every round."""
_USES = {Ops.IDIV: "a division", Ops.MOD: "a remainder", Ops.CMPLT: "a comparison", Ops.CMPLE: "a comparison",
         Ops.CMPNE: "a comparison", Ops.CMPEQ: "a comparison", Ops.MAX: "a max", Ops.MIN: "a min",
         Ops.SHR: "a right shift", Ops.SHL: "a shift's amount", Ops.ABS: "an abs", Ops.INDEX: "an index"}


def narrow_integers(sink: UOp, kernel: str, device: str) -> UOp | None:
    """``sink`` with its 64-bit integer values and registers computed in 32 bits (the module docstring), or None
    where it is not ``narrowable``."""
    if not narrowable(sink):
        return None
    topo = sink.toposort()
    _check_exact(topo, kernel, device)
    narrowed: dict[UOp, UOp] = {}
    for u in topo:
        src = tuple(narrowed[s] for s in u.src)
        dtype = _narrowed_dtype(u.dtype)
        if u.op is Ops.CAST and src[0].dtype == dtype:
            narrowed[u] = src[0]
        elif u.op is Ops.CONST and _wide(u.dtype):
            narrowed[u] = UOp.const(dtype, wrap_int(int(u.arg), dtype))
        elif u.op is Ops.DEFINE_VAR and _wide(u.dtype):
            narrowed[u] = u.replace(dtype=dtype, arg=(u.arg[0], *_held(u)))
        else:
            narrowed[u] = u if src == u.src and dtype == u.dtype else u.replace(dtype=dtype, src=src)
    return narrowed[sink]


def narrowable(sink: UOp) -> bool:
    """Whether ``sink`` has 64-bit integer values and neither a 64-bit integer buffer nor a 64-bit integer's bits (a
    uint64 scalar travels as an int64's), which a device without them refuses."""
    topo = sink.toposort()
    return any(_wide(u.dtype) for u in topo) and not any(_held_whole(u) for u in topo)


def _held_whole(u: UOp) -> bool:
    """Whether ``u`` is a 64-bit integer buffer, or a bit cast from or to a 64-bit integer."""
    return (u.op is Ops.PARAM and _wide(u.dtype)) or (u.op is Ops.BITCAST and (_wide(u.dtype) or _wide(u.src[0].dtype)))


def _wide(dtype: DType) -> bool:
    return (dtype.base if isinstance(dtype, PtrDType) else dtype) in NARROWED


def _narrowed_dtype(dtype: DType) -> DType:
    if isinstance(dtype, PtrDType):
        return dataclasses.replace(dtype, base=NARROWED[dtype.base]) if dtype.base in NARROWED else dtype
    return NARROWED.get(dtype, dtype)


def _narrow_range(dtype: DType) -> Bounds:
    """The values of the 32-bit dtype a 64-bit one is computed in."""
    return NARROWED[dtype].min, NARROWED[dtype].max


def _fits(bounds: Bounds, dtype: DType) -> bool:
    return _inside(bounds, _narrow_range(dtype))


def _held(var: UOp) -> Bounds:
    """A 64-bit variable's bounds where it travels in 32 bits: those of the narrow dtype, so that a run with a value
    past them is refused when its variables are checked."""
    least, most = _narrow_range(var.dtype)
    return max(var.arg[1], least), min(var.arg[2], most)


def _bounds(topo: tuple[UOp, ...]) -> dict[UOp, Bounds]:
    """Each node's bounds (``UOp.bounds``'s rules) where a read of a register is bounded by what is stored into it:
    the hull of its stores, grown from the stores that read no register until the stores fall inside it
    (``found = -1``, then ``found = k`` in a loop over ``k``), else its dtype's range after ``_WIDENINGS``
    rounds (a counter's grows in each). A hull is kept only where every store into the register, with every
    read bounded so, stores inside it: then every read reads inside it."""
    registers: dict[UOp, UOp] = {}
    for u in topo:
        if u.op is Ops.STORE and (register := _register(u)) is not None:
            registers[u] = register
    held: dict[UOp, Bounds] = {}
    for turn in range(_WIDENINGS):
        known = _evaluated(topo, held)
        grown = dict(held)
        for store, register in registers.items():
            value = known.get(store.src[1])
            if value is not None:
                old = grown.get(register, value)
                grown[register] = (min(old[0], value[0]), max(old[1], value[1]))
        if grown == held:
            break
        if turn >= _WIDENINGS // 2:  # still growing: try the narrow dtype's whole range, which holds if any does
            grown = {r: _widened(b, held.get(r), pointee(r)) for r, b in grown.items()}
        held = grown
    else:
        held = {}
    while True:  # a store that read a register left out above must fall inside its hull too, or the hull goes
        whole = {r: (pointee(r).min, pointee(r).max) for r in registers.values()}
        known = _evaluated(topo, whole | held)
        outside = [r for store, r in registers.items() if r in held and not _inside(known[store.src[1]], held[r])]
        if not outside:
            return known
        held = {r: b for r, b in held.items() if r not in outside}


def _inside(inner: Bounds, outer: Bounds) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def _widened(grown: Bounds, before: Bounds | None, dtype: DType) -> Bounds:
    """A register's bounds that grew in a round made the narrow dtype's range, where they fit it."""
    if grown == before or dtype not in NARROWED or not _fits(grown, dtype):
        return grown
    return _narrow_range(dtype)


def _evaluated(topo: tuple[UOp, ...], held: dict[UOp, Bounds]) -> dict[UOp, Bounds]:
    """Bounds of every node where each register in ``held`` is read inside its bounds; a value that reads a
    register not in ``held`` is left out."""
    known: dict[UOp, Bounds] = {}
    for u in topo:
        register = _register(u) if u.op is Ops.LOAD else None
        if register is not None:
            if register in held:
                known[u] = held[register]
        elif u.op is Ops.DEFINE_VAR and _wide(u.dtype):
            known[u] = _held(u)
        elif all(s in known for s in u.src):
            known[u] = compute_bounds(u, known.__getitem__)
    return known


def _check_exact(topo: tuple[UOp, ...], kernel: str, device: str) -> None:
    """Refuse the kernel where a use needs a 64-bit value itself and its bounds do not prove it fits 32 bits.
    Users come before their sources in the walk; a register needs its values whole where one of its reads
    does, which a read in a loop may only show after the stores it feeds were seen: the walk repeats until the
    registers it found in need stop growing."""
    users: dict[UOp, list[UOp]] = {}
    for u in topo:
        for s in u.src:
            users.setdefault(s, []).append(u)
    whole: set[UOp] = set()
    bounds = _bounds(topo)
    while True:
        needed = _needing_whole(topo, bounds, users, whole, kernel, device)
        if needed <= whole:
            return
        whole |= needed


def _needing_whole(topo: tuple[UOp, ...], bounds: dict[UOp, Bounds], users: dict[UOp, list[UOp]],
                   whole: set[UOp], kernel: str, device: str) -> set[UOp]:
    """One walk from users to sources: the registers some read of which needs its value whole, refusing a value
    needed whole that may not fit."""
    registers: set[UOp] = set()
    for u in reversed(topo):
        if not _wide(u.dtype) or isinstance(u.dtype, PtrDType):
            continue
        need = any(_needs_whole(u, user, whole) for user in users.get(u, ()))
        if need and u.op is Ops.LOAD and (register := _register(u)) is not None:
            registers.add(register)
        if (need or (u.op is Ops.CAST and not u.src[0].dtype.is_int)) and not _fits(bounds[u], u.dtype):
            lo, hi = bounds[u]
            raise GraphError(f"{device} computes {u.dtype.name} values in 32 bits, and {_use(u, users, whole)} needs "
                             f"this one whole, which may reach {lo} .. {hi}; bound the variables it depends on, or "
                             "convert it to int32 (which wraps) first", kernel=kernel, stage="render", value=u)
    return registers


def _needs_whole(value: UOp, user: UOp, whole: set[UOp]) -> bool:
    """Whether ``user`` needs ``value`` whole, not its low 32 bits."""
    if user.op is Ops.STORE and user.src[1] is value:
        register = _register(user)
        return register is None or register in whole
    low_bits = user.op in _LOW_BITS_OPS or (user.op is Ops.WHERE and user.src[0] is not value) or \
        (user.op is Ops.SHL and user.src[0] is value) or (user.op is Ops.REDUCE and user.arg in (Ops.ADD, Ops.MUL))
    return not low_bits  # a user of its low bits that is needed whole was refused or proven to fit before


def _register(access: UOp) -> UOp | None:
    """The register a LOAD or STORE accesses, if it accesses one."""
    memory = memory_of(access.src[0].src[0])
    return memory if memory.op is Ops.DEFINE_REG else None


def _use(value: UOp, users: dict[UOp, list[UOp]], whole: set[UOp]) -> str:
    """What needs ``value`` whole, in words."""
    user = next((user for user in users.get(value, ()) if _needs_whole(value, user, whole)), None)
    if user is None:
        return "its conversion from a float"
    if user.op is Ops.STORE:
        return "a local that a later use needs whole"
    if user.op is Ops.CAST:
        return f"a conversion to {user.dtype.name}"
    return _USES.get(user.op, f"a {user.op.name.lower()}")


__all__ = ["NARROWED", "narrow_integers", "narrowable"]
