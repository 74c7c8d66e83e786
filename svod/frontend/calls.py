"""Calls of an ``@svod.kernel`` on numpy arrays and numbers, prepared once per signature, so that a call like one
before runs without binding, translating, looking up or checking again what its signature fixes::

    kernel(out, x) ──▶ the last call's PreparedCall (Calls.last), else the one of call_key(args) (Calls.run)
                              │ none, or an argument it may not use as it is
                              ▼
                       the general path (Kernel.bind, svod.run), which prepares one for the calls after it

A ``PreparedCall`` checks, of each argument, what the signature fixes (an array's type, dtype and shape, a
number's type; a bool's and a ``svod.Const``'s value) and what an array of that signature may still change from
call to call: C-contiguous, aligned, writeable where the kernel writes it, and no written one sharing memory
with another argument (checked again only where an address changed since the last call). It then launches
through a launch bound once, whose argument arrays it rewrites only where an address changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from svod.device import Launch, Variable
from svod.device.buffer import NOT_EXPORTED, InPlace, address_of, array_address, exported
from svod.device.launch import ConcreteLaunchDims
from svod.errors import SvodError
from svod.frontend.source import Located
from svod.runtime.kernel import CachedKernel

CALLS_KEPT = 64
"""The signatures a kernel keeps prepared calls for: enough for the shapes a program cycles through, few enough
that one calling with ever new shapes holds little."""
ANY_VALUE = object()
"""What a number's guard holds where any value of its type will do (an ``int`` or ``float`` argument)."""


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
    """A kernel's launch for calls of one signature (``call_key``): the checks a call makes, the variables' values
    (those a scalar argument gives, checked per call), the launch sizes, and a launch bound once."""

    __slots__ = ("_addresses", "_exports", "_fixed", "_launch", "_lock", "_pointed_at", "arrays", "count", "device",
                 "dims", "kernel", "located", "nbytes", "numbers", "pairs", "vals", "varying")

    def __init__(self, kernel: CachedKernel, located: Located, device: Any, args: Sequence[Any],
                 constants: frozenset[int], vals: list[int], dims: ConcreteLaunchDims,
                 varying: Sequence[tuple[int, Variable, int]]) -> None:
        """For calls like ``args`` on ``device`` (as asked for), whose arrays are the kernel's arguments in order;
        ``varying``: each variable a scalar argument gives (its slot in ``vals``, itself, the argument's
        position)."""
        self.kernel = kernel
        self.located = located
        self.device = device
        self.count = len(args)
        arrays = [(position, value) for position, value in enumerate(args) if type(value) is np.ndarray]
        layout = kernel.layout
        self.arrays = tuple((slot, position, value.dtype, value.shape, argument.dtype.itemsize, argument.written)
                            for slot, ((position, value), argument) in enumerate(zip(arrays, layout, strict=True)))
        self._exports = [value.size > 0 for _, value in arrays]
        """Per array: whether the last one there was ``exported`` (writeable, C-contiguous, not empty), as the next
        most likely is: a call tries that first, and reads the flags of one that is not."""
        self.numbers = tuple((position, type(value), value if position in constants or type(value) is bool
                              else ANY_VALUE) for position, value in enumerate(args) if type(value) is not np.ndarray)
        in_place = InPlace.of([(position, argument.dtype.itemsize, value.size, argument.written)
                               for (position, value), argument in zip(arrays, layout, strict=True)])
        self.nbytes = in_place.nbytes
        self.pairs = in_place.pairs
        self.varying = tuple(varying)
        self.vals = vals
        self.dims = dims
        bound = kernel.bind_host()
        self._launch: Launch | None = None
        self._addresses: Any = None
        self._fixed: Callable[[], None] | None = None
        """Where no variable varies: the launch with its values set once."""
        if bound is not None:
            self._launch, host = bound
            self._addresses = host.buffer_addresses
            if not varying:
                self._fixed = host.with_values(vals, dims.global_size, dims.local_size)
        self._pointed_at: list[int] = []
        """The addresses the bound launch points at, checked apart when they were written."""
        self._lock = threading.Lock()

    def run(self, args: tuple[Any, ...], device: Any) -> bool:
        """Run on a call's ``args``, or return False, having run nothing, where they are not of this signature or
        one may not be used as it is: the general path then copies what cannot be shared, or says what is
        wrong. (One method with its loops written out: each call of a function is a part of a small call.)"""
        if len(args) != self.count or (device is not self.device and device != self.device):
            return False
        if self.numbers and not self._numbers_match(args):
            return False
        found = []
        exports = self._exports
        for slot, position, dtype, shape, itemsize, written in self.arrays:  # shared_address's, written out
            array = args[position]
            if type(array) is not np.ndarray or array.shape != shape or (array.dtype is not dtype
                                                                         and array.dtype != dtype):
                return False
            if exports[slot]:
                try:
                    address: int | None = address_of(exported(array))  # writeable and C-contiguous, or it raises
                except NOT_EXPORTED:
                    exports[slot] = False
                    address = self._flagged_address(slot, array, written)
            else:
                address = self._flagged_address(slot, array, written)
            if address is None or address % itemsize:
                return False
            found.append(address)
        vals: list[int] | None = self.vals if not self.varying else self._values(args)
        if vals is None:
            return False
        try:
            if self._launch is not None and self._lock.acquire(False):
                try:  # a call from another thread meanwhile launches with arrays of its own (below)
                    if found != self._pointed_at:  # apart as they were, unless an address changed
                        if self._meets(found):
                            return False
                        self._addresses[:len(found)] = found
                        self._pointed_at = found
                    if self._fixed is not None:
                        self._fixed()
                    else:
                        self._launch(vals, self.dims.global_size, self.dims.local_size)
                finally:
                    self._lock.release()
                return True
            if self._meets(found):
                return False
            self.kernel.program.execute(found, vals, self.dims.global_size, self.dims.local_size)
            return True
        except SvodError as err:
            err.name_kernel(self.kernel.name)
            self.located.locate(err)
            raise

    def _numbers_match(self, args: tuple[Any, ...]) -> bool:
        """Whether each number argument is of its type, and of its value where the signature fixes that."""
        for position, kind, value in self.numbers:
            number = args[position]
            if type(number) is not kind or (value is not ANY_VALUE and number != value):
                return False
        return True

    def _flagged_address(self, slot: int, array: np.ndarray, written: bool) -> int | None:
        """The address of an array that ``exported`` may refuse, its flags checked (C-contiguous, writeable where
        written); None where it may not be used as it is. Notes for the next call whether ctypes takes it."""
        flags = array.flags
        writeable = flags.writeable
        if not flags.c_contiguous or (written and not writeable):
            return None
        self._exports[slot] = writeable and array.size > 0
        return array_address(array, writeable)

    def _values(self, args: tuple[Any, ...]) -> list[int] | None:
        """The variables' values, those the scalar arguments give checked; None where one is out of its bounds
        (the general path says so, in the source's words)."""
        vals = list(self.vals)
        try:
            for slot, variable, position in self.varying:
                vals[slot] = variable.checked(args[position])
        except SvodError:
            return None
        return vals

    def _meets(self, found: list[int]) -> bool:
        """Whether a written array shares memory with another argument (neither empty)."""
        nbytes = self.nbytes
        for first, second in self.pairs:
            if found[first] < found[second] + nbytes[second] and found[second] < found[first] + nbytes[first]:
                return True
        return False


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
