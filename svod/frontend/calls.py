"""Calls of an ``@svod.kernel`` on numpy arrays and numbers, prepared once per signature, so that a call like one
before runs without binding, translating, looking up or checking again what its signature fixes::

    kernel(out, x) ──▶ the last call's PreparedCall (Calls.last), else the one of call_key(args) (Calls.run)
                              │ none, or an argument it may not use as it is
                              ▼
                       the general path (Kernel.bind, svod.run), which prepares one for the calls after it

A ``PreparedCall``'s ``run`` is a function generated for its signature (``svod.runtime.generated``), which
checks in order, as straight-line code, of each argument what the signature fixes (an array's type, dtype and
shape, a number's type; a bool's and a ``svod.Const``'s value) and what an array of that signature may still
change from call to call: C-contiguous, aligned, writeable where the kernel writes it, and no written one
sharing memory with another argument (checked again only where an address changed since the last call); then
each scalar's variable against its bounds. It then launches through a launch bound once, whose argument
arrays it rewrites only where an address changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from svod.device import CallScalar, HostArguments, Launch, Variable
from svod.device.buffer import NOT_EXPORTED, InPlace, address_of, exported, shared_address
from svod.device.launch import ConcreteLaunchDims
from svod.errors import SvodError
from svod.frontend.source import Located
from svod.runtime import generated
from svod.runtime.kernel import CachedKernel
from svod.runtime.parts import PartsOnHost

CALLS_KEPT = 64
"""The signatures a kernel keeps prepared calls for: enough for the shapes a program cycles through, few enough
that one calling with ever new shapes holds little."""


def call_key(args: Sequence[Any], device: Any, constants: frozenset[int]) -> tuple[Hashable, ...] | None:
    """What decides a call's kernel and checks when its arguments are numpy arrays and Python numbers: the device
    asked for, each array's dtype and shape, each number's type (a bool's value, and the value of an argument at
    one of the positions ``constants``, a ``svod.Const``). None for other arguments, which the general path takes
    every time."""
    key: list[Any] = [device]
    for position, value in enumerate(args):
        kind = type(value)
        if kind is np.ndarray:
            key.append((value.dtype, value.shape))
        elif position in constants:
            key.append((kind, value))
        elif kind is float or kind is int:
            key.append(kind)
        elif kind is bool:
            key.append(value)
        else:
            return None
    return tuple(key)


class PreparedCall:
    """A kernel's launch for calls of one signature (``call_key``): ``run``, generated for it once
    (``svod.runtime.generated``), makes the checks a call of that signature needs, in order, then launches."""

    __slots__ = ("kernel", "located", "run")

    def __init__(self, kernel: CachedKernel, located: Located, device: Any, args: Sequence[Any],
                 constants: frozenset[int], vals: list[int], dims: ConcreteLaunchDims,
                 varying: Sequence[tuple[int, Variable, int]]) -> None:
        """For calls like ``args`` on ``device`` (as asked for), whose arrays are the kernel's arguments in order;
        ``varying``: each variable a scalar argument gives (its slot in ``vals``, itself, the argument's
        position)."""
        self.kernel = kernel
        self.located = located
        namespace: dict[str, Any] = {"DEVICE": device, "ndarray": np.ndarray, "VALS": vals,
                                     "GLOBAL": dims.global_size, "LOCAL": dims.local_size, "SvodError": SvodError,
                                     "NAME": kernel.name, "LOCATE": located.locate,
                                     "EXECUTE": kernel.program.execute}
        body = [f"if len(args) != {len(args)} or (device is not DEVICE and device != DEVICE):", "    return False"]
        body += _number_guards(args, constants, namespace)
        arrays = [(position, value) for position, value in enumerate(args) if type(value) is np.ndarray]
        bound = kernel.bind_host()
        pairs = InPlace.of([(position, argument.dtype.itemsize, value.size, argument.written)
                            for (position, value), argument in zip(arrays, kernel.layout, strict=True)]).pairs
        if bound is not None:
            scalars = [CallScalar(position, slot, type(args[position]), variable)
                       for slot, variable, position in varying]
            body += _native(bound[1], len(args), arrays, scalars, kernel, vals, dims, pairs, namespace)
        body += _array_guards(arrays, kernel, namespace)
        body += _values(varying, vals, namespace)
        launch = _launch(kernel, bound, arrays, pairs, vals, dims, varying, namespace)
        body += ["try:", *(f"    {line}" for line in launch),
                 "except SvodError as err:", "    err.name_kernel(NAME)", "    LOCATE(err)", "    raise"]
        self.run: Callable[[tuple[Any, ...], Any], bool] = generated.function("run", ("args", "device"), body,
                                                                                namespace)
        """Run on a call's ``args``, or return False, having run nothing, where they are not of this signature
        or one may not be used as it is: the general path then copies what cannot be shared, or says what is
        wrong."""


def _number_guards(args: Sequence[Any], constants: frozenset[int], namespace: dict[str, Any]) -> list[str]:
    """Each number argument's check: of its type, and of its value where the signature fixes that (a bool's, a
    ``svod.Const``'s)."""
    body: list[str] = []
    for position, value in enumerate(args):
        if type(value) is np.ndarray:
            continue
        namespace[f"K{position}"], namespace[f"V{position}"] = type(value), value
        fixed = position in constants or type(value) is bool
        body += [f"a{position} = args[{position}]",
                 f"if type(a{position}) is not K{position}" + (f" or a{position} != V{position}:" if fixed else ":"),
                 "    return False"]
    return body


def _array_guards(arrays: Sequence[tuple[int, np.ndarray]], kernel: CachedKernel, namespace: dict[str, Any]
                  ) -> list[str]:
    """Each array's check (its type, shape and dtype), then its address ``pK`` where it may be used in place:
    C-contiguous, writeable where the kernel writes it, aligned; the way of reading it tried first is the one
    the array of the call it is made for took (``exported`` for a writeable one)."""
    body: list[str] = []
    namespace.update({"address_of": address_of, "exported": exported, "NOT_EXPORTED": NOT_EXPORTED,
                      "SHARED": shared_address})
    for slot, ((position, value), argument) in enumerate(zip(arrays, kernel.layout, strict=True)):
        name, itemsize = f"a{position}", argument.dtype.itemsize
        namespace[f"S{position}"], namespace[f"T{position}"] = value.shape, value.dtype
        body += [f"{name} = args[{position}]",
                 f"if type({name}) is not ndarray or {name}.shape != S{position} or "
                 f"({name}.dtype is not T{position} and {name}.dtype != T{position}):", "    return False"]
        flagged = [f"p{slot} = SHARED({name}, {itemsize}, {argument.written})", f"if p{slot} is None:",
                   "    return False"]
        if value.size and value.flags.writeable and value.flags.c_contiguous:
            body += ["try:", f"    p{slot} = address_of(exported({name}))", "except NOT_EXPORTED:",
                     *(f"    {line}" for line in flagged)]
            if itemsize > 1:
                body += [f"if p{slot} % {itemsize}:", "    return False"]
        else:  # read-only or empty, as the last one there was: its flags read, not an exception raised
            body += flagged
    return body


def _values(varying: Sequence[tuple[int, Variable, int]], vals: list[int], namespace: dict[str, Any]) -> list[str]:
    """The variables' values ``vals``, those the scalar arguments give checked; the general path (which says
    why, in the source's words) where one is out of its bounds."""
    if not varying:
        return ["vals = VALS"]
    body = ["vals = list(VALS)", "try:"]
    for slot, variable, position in varying:
        namespace[f"VARIABLE{slot}"] = variable.checked
        body.append(f"    vals[{slot}] = VARIABLE{slot}(a{position})")
    return [*body, "except SvodError:", "    return False"]


def _native(host: HostArguments | PartsOnHost, arguments: int, arrays: Sequence[tuple[int, np.ndarray]],
            scalars: Sequence[CallScalar], kernel: CachedKernel, vals: list[int], dims: ConcreteLaunchDims,
            pairs: Sequence[tuple[int, int]], namespace: dict[str, Any]) -> list[str]:
    """The call in native code, where the device has one (``HostArguments.array_call``) and the arrays of the call
    it is made for are all it would take (so that one like them is not checked twice), with the numbers that set
    variables (``scalars``): the checks in Python then see only the calls it declines."""
    usable = all(value.flags.c_contiguous and (value.flags.writeable or not argument.written)
                 for (_, value), argument in zip(arrays, kernel.layout, strict=True))
    if not usable or not isinstance(host, HostArguments):
        return []
    native = host.array_call(vals, dims.global_size, arguments, kernel.call_arrays(arrays), pairs, scalars)
    if native is None:
        return []
    namespace["NATIVE"] = native
    return ["if NATIVE(args):", "    return True"]


def _launch(kernel: CachedKernel, bound: tuple[Launch, HostArguments | PartsOnHost] | None,
            arrays: Sequence[tuple[int, np.ndarray]], pairs: Sequence[tuple[int, int]], vals: list[int],
            dims: ConcreteLaunchDims, varying: Sequence[tuple[int, Variable, int]], namespace: dict[str, Any]
            ) -> list[str]:
    """The launch: through the launch bound once where the kernel has one and no other thread is using it (its
    argument array rewritten only where an address changed, and then checked apart), else the program's own
    ``execute``; false, having run nothing, where a written array shares memory with another."""
    found = f"[{', '.join(f'p{slot}' for slot in range(len(arrays)))}]"
    nbytes = [argument.dtype.itemsize * value.size for (_, value), argument in zip(arrays, kernel.layout,
                                                                                    strict=True)]
    meets = [f"if p{a} < p{b} + {nbytes[b]} and p{b} < p{a} + {nbytes[a]}:" for a, b in pairs]
    general = [*(line for check in meets for line in (check, "    return False")),
               f"EXECUTE({found}, vals, GLOBAL, LOCAL)", "return True"]
    if bound is None:
        return general
    launch, host = bound
    namespace.update({"LOCK": threading.Lock(), "ADDRESSES": host.buffer_addresses, "POINTED": [[]],
                      "LAUNCH": launch})
    run = "LAUNCH(vals, GLOBAL, LOCAL)"
    if not varying:
        namespace["FIXED"] = host.with_values(vals, dims.global_size, dims.local_size)
        run = "FIXED()"
    return ["if LOCK.acquire(False):",  # a call from another thread meanwhile launches with arrays of its own
            "    try:",
            f"        found = {found}",
            "        if found != POINTED[0]:",  # apart as they were, unless an address changed
            *(f"            {line}" for check in meets for line in (check, "    return False")),
            f"            ADDRESSES[:{len(arrays)}] = found",
            "            POINTED[0] = found",
            f"        {run}",
            "    finally:",
            "        LOCK.release()",
            "    return True",
            *general]


class Calls:
    """A kernel's prepared calls, by ``call_key``, and the last one that ran (a call like the one before it, the
    common case, is checked against it without computing its key)::

        prepared = calls.last
        if (prepared is not None and prepared.run(args, device)) or calls.run(args, device):
            return  # ran
    """

    def __init__(self, constants: frozenset[int]) -> None:
        """``constants``: the positions of the ``svod.Const`` arguments, whose values are part of a key."""
        self.constants = constants
        self._by_key: dict[tuple[Hashable, ...], PreparedCall] = {}
        self.last: PreparedCall | None = None
        """The prepared call that ran last: a call like the one before it, the common case, tries it first."""

    def __len__(self) -> int:
        return len(self._by_key)

    def run(self, args: tuple[Any, ...], device: Any) -> bool:
        """Run a call prepared for calls like this one, other than ``last`` (which the caller tried first); False,
        having run nothing, where none may run it."""
        key = call_key(args, device, self.constants)
        found = self._by_key.get(key) if key is not None else None
        if found is None or found is self.last or not found.run(args, device):
            return False
        self.last = found
        return True

    def key(self, args: Sequence[Any], device: Any) -> tuple[Hashable, ...] | None:
        """The ``call_key`` of a call of this kernel."""
        return call_key(args, device, self.constants)

    def keep(self, key: tuple[Hashable, ...], prepared: PreparedCall) -> None:
        """Keep ``prepared`` for the calls of ``key`` after it."""
        if len(self._by_key) >= CALLS_KEPT:
            self._by_key.clear()
        self._by_key[key] = self.last = prepared


__all__ = ["CALLS_KEPT", "Calls", "PreparedCall", "call_key"]
