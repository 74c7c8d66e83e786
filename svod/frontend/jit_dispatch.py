"""A jitted function's calls like one before, each signature's as a function generated once
(``svod.runtime.generated``): the checks that signature needs, in order, then the plan's run::

    f(out, x) ──▶ Jit._last (the last signature's dispatcher), else the one of the call key (Jit._calls),
                  else the last one of the key's number types (Jit._typed)
                     │ MISS: not its signature              │ an array the plan may not use as it is
                     ▼                                      ▼
                  the next dispatcher, else the first      Prepared.run: the general binding, which copies
                  call's path (which makes one)            or refuses it as at a first call

A dispatcher checks, in order: the count of arguments and the device asked for; each array's type, shape and
dtype; each number's type, and its value where the plan or its variant is prepared for it (a bool's, one the
host reads: a temporary's length; an int the rewriting decides by, ``Jit._free_numbers``); then, of each array the
plan uses in place, what an array of its signature may still change: C-contiguous, writeable where the plan
writes it, aligned, sharing no memory with another argument or with the plan's own storages where one is
written (``Binder``). Where the plan's device checks arrays in native code (``svod.device.HostArrayChecks``,
the CPU's), one call of it makes the arrays' checks up to the plan's own storages and answers their addresses;
a call it declines takes these checks in Python. The plan's bound run checks the variables the scalars give
against their bounds, its loops, and after the run its failure flags and checked steps
(``ExecutionPlan.bound_run``).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from svod.device import CallArray, HostArrayChecks
from svod.device.buffer import NOT_EXPORTED, address_of, exported, shared_address
from svod.errors import SvodError
from svod.runtime import generated

if TYPE_CHECKING:
    from svod.frontend.jit_prepared import Prepared
    from svod.runtime.binding import Binder

OTHERS_WRITTEN_OUT = 4
"""The most storages of a plan's own an array's check compares it with one by one; past them, a search."""
MISS = object()
"""What a dispatcher returns for a call not of its signature (it ran nothing)."""
Dispatcher = Callable[[tuple[Any, ...], Any], Any]


def dispatcher(prepared: Prepared, args: Sequence[Any], given: int, device: Any, parameters: Sequence[str],
               free: Mapping[int, tuple[int, int] | None] | None = None) -> Dispatcher:
    """The dispatcher of calls like ``f(*args[:given], device=device)``: ``args`` every parameter's argument by
    position (the defaults complete what the caller gave), ``parameters`` the function's; ``free``: the
    positions of numbers whose values the plan is not prepared for, whose types alone are checked, or with
    their types the range of values the plan runs (an index it reads at run time)."""
    namespace: dict[str, Any] = {"MISS": MISS, "ndarray": np.ndarray, "DEVICE": device, "PREPARED": prepared}
    body = [f"if len(args) != {given} or (device is not DEVICE and device != DEVICE):", "    return MISS"]
    positions = [parameters.index(name) for name in prepared.parameters]
    guards = _guards(args, given, positions, free or {}, namespace)
    passed = [f"a{position}" for position in positions]
    namespace["PARAMETERS"] = prepared.parameters
    general = f"return PREPARED.run(dict(zip(PARAMETERS, {_tuple(passed)})))"
    binder = prepared.binder if not prepared.complex_slots else None  # a complex array binds as its float view
    if binder is None:
        return generated.function("dispatch", ("args", "device"), [*body, *guards, general], namespace)
    made = [f"m{k}" for k in range(len(prepared.returned_in_place))]
    for k, (_, shape, dtype) in enumerate(prepared.returned_in_place):
        namespace[f"MADE{k}"] = (shape, dtype)
    bound = [*passed, *made]
    names = [bound[position] for position, _, _ in binder.arrays.checks]
    python = [*guards, *(f"{name} = empty(*MADE{k})" for k, name in enumerate(made)),
              *_addresses(binder, names, [args[positions[p]] if p < len(passed) else None
                                          for p, _, _ in binder.arrays.checks], general, namespace)]
    native = _native_addresses(prepared, binder, args, given,
                               [positions[p] for p, _, _ in binder.arrays.checks if p < len(passed)])
    if native is None:
        body += python
    else:
        namespace["CHECK"] = native
        body += ["found = CHECK(args)", "if found is not None:",
                 *(f"    {line}" for line in _guards(args, given, positions, free or {}, namespace, arrays=False)),
                 f"    {', '.join(f'p{index}' for index in range(len(names)))}, = found",
                 "else:", *(f"    {line}" for line in python)]
    for index, (_, _, written) in enumerate(binder.arrays.checks):
        body += _apart(index, binder.arrays.nbytes[index], binder.others[0 if written else 1], general, namespace)
    body += _bound_run(prepared, binder, passed, made, namespace)
    return generated.function("dispatch", ("args", "device"), body, namespace)


def _native_addresses(prepared: Prepared, binder: Binder, args: Sequence[Any], given: int, checked: Sequence[int]
                      ) -> Callable[[tuple[Any, ...]], list[int] | None] | None:
    """The native check of the arrays the plan uses in place, where the plan's device has one
    (``svod.device.HostArrayChecks``) and it takes the call's arrays: every array given is one of them,
    ``checked`` their positions (none a temporary or a default), as ``binder`` checks them. It sees a call's
    arrays as the arguments' guards and ``_addresses`` do, in one native call for them all."""
    runtime = prepared.plan.device.runtime
    if not isinstance(runtime, HostArrayChecks):
        return None
    arrays = [position for position in range(given) if type(args[position]) is np.ndarray]
    if len(checked) != len(binder.arrays.checks) or sorted(checked) != arrays:
        return None
    taken = [CallArray(position, args[position].dtype, args[position].shape, written)
             for position, (_, _, written) in zip(checked, binder.arrays.checks, strict=True)]
    if any(args[position].nbytes != nbytes for position, nbytes in zip(checked, binder.arrays.nbytes, strict=True)):
        return None
    return runtime.array_addresses(given, taken, binder.arrays.pairs)


def _bound_run(prepared: Prepared, binder: Binder, passed: Sequence[str], made: Sequence[str],
               namespace: dict[str, Any]) -> list[str]:
    """The plan's run on arrays of the signature used in place (``binder``'s), their addresses ``pI``
    checked: the scalars' variables, the run (whose errors are located in the function's source), what the
    function returns. ``passed``: the names of the arguments the run passes; ``made``: of each temporary
    returned whole, its new array."""
    valued = bool(prepared.scalars or prepared.parts or prepared.draws or prepared.turns)
    if prepared.draws or prepared.turns or prepared.parts:
        body = [f"scalars = VARIABLES_OF({_tuple(passed)}, None)"]
    else:  # ``variables_of``'s common case, written out
        entries = []
        for k, (name, position) in enumerate(prepared.scalars):
            namespace[f"SCALAR{k}"] = name
            entries.append(f"SCALAR{k}: {passed[position]}")
        body = [f"scalars = {{{', '.join(entries)}}}"]
    addresses = ", ".join(f"p{index}" for index in range(len(binder.arrays.checks)))
    run = ["try:", f"    RUN([{addresses}], scalars)", "except SvodError as err:", "    LOCATE(err)", "    raise",
           returned := _returned(prepared, passed, made, namespace)]
    if "VIEW" in returned or "RESULTS" in returned:  # read in the plan's memory: no other run may come between
        run = ["with EXECUTING:", *(f"    {line}" for line in run)]
    namespace.update({"VARIABLES_OF": prepared.variables_of, "empty": np.empty, "SvodError": SvodError,
                      "LOCATE": prepared.locate, "RUN": prepared.plan.bound_run(binder, valued),
                      "EXECUTING": prepared.plan.executing})
    return [*body, *run]


def _guards(args: Sequence[Any], given: int, passed: Sequence[int], free: Mapping[int, tuple[int, int] | None],
            namespace: dict[str, Any], arrays: bool = True) -> list[str]:
    """Each given argument's check against the call key's (its type, an array's shape and dtype, a number's
    value unless it is ``free``, or its range where ``free`` gives one), then the name of each default the run
    passes (``aK`` for the argument at position K, of those ``passed``). An array's is left out where not
    ``arrays`` (a native check has made it)."""
    body: list[str] = []
    for position, value in enumerate(args[:given]):
        name = f"a{position}"
        body.append(f"{name} = args[{position}]")
        if type(value) is np.ndarray and not arrays:
            continue
        if type(value) is np.ndarray:
            namespace[f"S{position}"], namespace[f"T{position}"] = value.shape, value.dtype
            body.append(f"if type({name}) is not ndarray or {name}.shape != S{position} or "
                        f"({name}.dtype is not T{position} and {name}.dtype != T{position}):")
        else:
            namespace[f"K{position}"], namespace[f"V{position}"] = type(value), value
            nan = isinstance(value, (float, np.floating)) and math.isnan(value)
            valued = f" or {name} != V{position}"
            if position in free:
                span = free[position]
                valued = "" if span is None else f" or not {span[0]} <= {name} <= {span[1]}"
            elif nan:
                valued = f" or {name} == {name}"
            body.append(f"if type({name}) is not K{position}{valued}:")
        body.append("    return MISS")
    for position in (p for p in passed if p >= given):
        namespace[f"D{position}"] = args[position]
        body.append(f"a{position} = D{position}")
    return body


def _addresses(binder: Binder, names: Sequence[str], firsts: Sequence[Any], general: str,
               namespace: dict[str, Any]) -> list[str]:
    """The address ``pI`` of each array the plan uses in place (``Binder``'s checks, written out), the general
    binding taken where one may not be: ``names`` the arrays' names in the generated code, ``firsts`` the
    arrays of the call the dispatcher is made for (None for a temporary the call makes), whose flags say which
    way of reading an address to try first."""
    body: list[str] = []
    namespace.update({"address_of": address_of, "exported": exported, "NOT_EXPORTED": NOT_EXPORTED,
                      "SHARED": shared_address})
    for index, ((_, itemsize, written), name, first) in enumerate(zip(binder.arrays.checks, names, firsts,
                                                                      strict=True)):
        address = f"p{index}"
        flagged = [f"{address} = SHARED({name}, {itemsize}, {written})", f"if {address} is None:", f"    {general}"]
        if first is None or (first.flags.writeable and first.flags.c_contiguous):
            body += ["try:", f"    {address} = address_of(exported({name}))", "except NOT_EXPORTED:",
                     *(f"    {line}" for line in flagged)]
            if itemsize > 1:
                body += [f"if {address} % {itemsize}:", f"    {general}"]
        else:  # a read-only array, as the last one there was: its flags read, not an exception raised
            body += flagged
    nbytes = binder.arrays.nbytes
    for first, second in binder.arrays.pairs:
        body += [f"if p{first} < p{second} + {nbytes[second]} and p{second} < p{first} + {nbytes[first]}:",
                 f"    {general}"]
    return body


def _apart(index: int, nbytes: int, others: tuple[tuple[int, ...], tuple[int, ...]], general: str,
           namespace: dict[str, Any]) -> list[str]:
    """The check that the array at ``pI`` meets none of the plan's own storages ``others`` (sorted disjoint
    ranges, as ``Binder.meets_others`` reads them): a comparison each where they are few, else a search."""
    starts, ends = others
    if not starts:
        return []
    if len(starts) > OTHERS_WRITTEN_OUT:
        namespace.update({"bisect_right": bisect_right, f"STARTS{index}": starts, f"ENDS{index}": ends})
        return [f"at = bisect_right(ENDS{index}, p{index})",
                f"if at < {len(starts)} and STARTS{index}[at] < p{index} + {nbytes}:", f"    {general}"]
    body = []
    for k, (start, end) in enumerate(zip(starts, ends, strict=True)):
        namespace[f"START{index}_{k}"], namespace[f"END{index}_{k}"] = start, end
        body += [f"if p{index} < END{index}_{k} and START{index}_{k} < p{index} + {nbytes}:", f"    {general}"]
    return body


def _returned(prepared: Prepared, passed: Sequence[str], made: Sequence[str], namespace: dict[str, Any]) -> str:
    """The statement that returns what the function returns (``Prepared.results``, its common cases written
    out: nothing, an argument, a temporary computed into a new array, a scalar read in host memory)."""
    made_slots = {slot: name for (slot, _, _), name in zip(prepared.returned_in_place, made, strict=True)}
    if not prepared.returns and not prepared.returns_tuple:
        return "return None"
    if len(prepared.returns) == 1 and not prepared.returns_tuple:
        name, slot, shape, length = prepared.returns[0]
        if length is None and slot is None:
            return f"return {passed[prepared.parameters.index(name)]}"
        if length is None and slot in made_slots:
            return f"return {made_slots[slot]}"
        if length is None and not shape and slot in prepared.scalar_views and slot not in prepared.complex_slots:
            namespace["VIEW"] = prepared.scalar_views[slot]
            return "return VIEW.item(0)"
    namespace["RESULTS"] = prepared.results
    return (f"return RESULTS({_tuple(passed)}, "
            f"{{{', '.join(f'{slot}: {name}' for slot, name in made_slots.items())}}})")


def _tuple(names: Sequence[str]) -> str:
    """The source of a tuple of ``names``."""
    return f"({', '.join(names)},)" if names else "()"


__all__ = ["MISS", "Dispatcher", "dispatcher"]
