"""Gradients of programs of ``@svod.kernel`` calls: ``svod.Tape``, ``svod.vjp`` and ``svod.grad``.

A tape records each kernel call of its ``with`` block (``Kernel.__call__`` hands it the call) and runs it; an
``@svod.jit`` call is recorded as the kernel calls of its ``prange`` phases (``svod.frontend.jit_tape``). The
backward pass runs the calls' adjoint kernels (``svod.frontend.adjoint``) from the last to the first, each
turning the adjoints of its arrays after the call into their adjoints before it, in place; what is left is
each array's adjoint as the block found it.

An adjoint reads the values its call read, so the tape keeps them as the call saw them:

- an array the call reads and writes is copied before the call runs;
- an array a later call of the block writes is copied before that call runs;
- any other it keeps a digest of, and ``backward`` refuses (``GradientError``) if the array changed since (numpy
  wrote it, or a call outside the block): the gradient would be taken at values the forward never saw.

Arrays are told apart by their memory (address, shape, strides, dtype): two views of one array's memory
that are not the same view are refused, as their adjoints could not be kept apart.
"""

from __future__ import annotations

import functools
import os
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.errors import GradientError
from svod.frontend.adjoint import Adjoint, adjoint
from svod.frontend.pykernel import Kernel
from svod.runtime.taping import RECORDING

Key = tuple[int, tuple[int, ...], tuple[int, ...], str]
"""An array's memory: its address, shape, strides and dtype."""

Grads = Mapping[Any, Any] | Sequence[tuple[Any, Any]]
"""The adjoints ``Tape.backward`` starts from: ``(array, adjoint)`` pairs."""

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def key_of(array: np.ndarray) -> Key:
    return (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)


def _digest(array: np.ndarray) -> int:
    """A checksum of the array's bytes (CRC-32: any change of up to 32 adjacent bits, or of an odd number of bits,
    changes it; another change leaves it as it was once in 2**32), at several times a cryptographic hash's speed:
    the tape takes one of each array it records at each call."""
    return zlib.crc32(np.ascontiguousarray(array).data)


def _caller() -> str:
    """``file:line`` of the user's code that made the call being recorded (the first frame outside svod)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


@dataclass
class _Record:
    """One recorded call: the kernel's adjoint, the arguments it takes (the caller's arrays, or copies of them as
    the call saw them) and where the call was made."""

    kernel: Kernel
    adjoint: Adjoint
    args: list[Any]
    keys: list[Key | None]
    device: Any
    where: str
    live: dict[int, int] = field(default_factory=dict)
    """The positions whose argument is still the caller's array, with its digest at the call."""

    def check(self, digests: dict[Key, int]) -> None:
        """Refuse if an array the adjoint reads is no longer as the call saw it. ``digests`` holds each array's
        digest now, taken once for all the records that read it."""
        changed = None
        for position, digest in self.live.items():
            key = self.keys[position]
            assert key is not None
            if key not in digests:
                digests[key] = _digest(self.args[position])
            if digests[key] != digest:
                changed = self.kernel.parameters[position]
                break
        if changed is not None:
            raise GradientError(f"{changed} changed after the tape recorded {self.kernel.name} at {self.where} "
                                f"and before backward (numpy wrote it, or a call outside the tape's block): its "
                                "gradient would be taken at values the forward never read; change a copy, or "
                                "record the change in the block as a kernel call", kernel=self.kernel.name,
                                stage="gradient", value=changed)

    def keep(self, written: Sequence[np.ndarray]) -> None:
        """Copy each array the record still shares with the caller that ``written`` (the next call's) may
        change: the adjoint needs it as this call saw it."""
        for position in list(self.live):
            array = self.args[position]
            if any(np.may_share_memory(array, w) for w in written):
                self.args[position] = array.copy()  # as the call saw it, or the tape refuses (Tape._outside)
                del self.live[position]


class Tape:
    """``with svod.Tape() as tape:`` records the ``@svod.kernel`` calls of its block (on numpy arrays, in this
    thread); ``tape.backward(loss)`` (a one-element array a recorded call wrote) or
    ``tape.backward(grads=[(y, dy)])`` computes the gradients, which ``tape.grad(x)`` gives, shaped as ``x``, with
    respect to ``x`` as the block found it. A second ``backward`` adds to them; ``zero`` clears them and
    ``reset`` the records too."""

    def __init__(self) -> None:
        self._records: list[_Record] = []
        self._arrays: dict[Key, np.ndarray] = {}
        self._grads: dict[Key, np.ndarray] = {}
        self._states: dict[Key, int] = {}
        """Each array's digest as the last recorded call left it: a call finding it otherwise finds a change the
        tape did not record."""
        self._outside: str | None = None
        """The first array a call found changed since the call before it, if any: ``backward`` refuses."""
        self._token: Any = None

    def __enter__(self) -> Tape:
        if RECORDING.get() is not None:
            raise GradientError("a svod.Tape block inside another's: record in one tape", stage="gradient")
        self._token = RECORDING.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        RECORDING.reset(self._token)

    # ---- recording --------------------------------------------------------------------------------------

    def record(self, kernel: Kernel, args: tuple[Any, ...], device: Any) -> None:
        """Run ``kernel(*args, device=device)``, keeping what its gradient needs."""
        for name, value in zip(kernel.parameters, args, strict=False):
            if not isinstance(value, (np.ndarray, int, float, np.generic)):
                raise GradientError(f"{kernel.name}'s argument {name} is a {type(value).__name__}: a tape records "
                                    "calls on numpy arrays and numbers", kernel=kernel.name, stage="gradient",
                                    value=name)
        floats = frozenset(name for name, value in zip(kernel.parameters, args, strict=False)
                           if isinstance(value, np.ndarray) and value.dtype.kind == "f")
        made = adjoint(kernel, floats)
        written = [args[kernel.parameters.index(name)] for name in made.written]
        for earlier in self._records:
            earlier.keep(written)
        record = _Record(kernel, made, list(args), [None] * len(args), device, _caller())
        for position, (name, value) in enumerate(zip(kernel.parameters, args, strict=False)):
            if not isinstance(value, np.ndarray):
                continue
            key = record.keys[position] = self._key(value, kernel)
            if key not in self._states and name in made.written and name not in made.reads:
                continue  # an output no earlier call took: its state is taken after the call, its values unread
            state = _digest(value)
            if self._states.setdefault(key, state) != state and self._outside is None:
                self._outside = f"{name}, an argument of {kernel.name} at {record.where},"
            if name in made.saved:
                record.args[position] = value.copy()
            elif name in made.reads:
                record.live[position] = state
        token = RECORDING.set(None)
        try:
            kernel(*args, device=device)
        finally:
            RECORDING.reset(token)
        self._records.append(record)
        for name in made.written:
            value = args[kernel.parameters.index(name)]
            self._states[key_of(value)] = _digest(value)

    def _key(self, array: np.ndarray, kernel: Kernel) -> Key:
        key = key_of(array)
        if key not in self._arrays:
            if any(np.may_share_memory(array, other) for other in self._arrays.values()):
                raise GradientError(f"an argument of {kernel.name} may share memory with another array the tape "
                                    "recorded, as a different view of it: pass the same view, or a copy",
                                    kernel=kernel.name, stage="gradient", value=array.shape)
            self._arrays[key] = array
        return key

    # ---- the backward pass ------------------------------------------------------------------------------

    def backward(self, loss: Any = None, *, grads: Grads | None = None) -> None:
        """Add to each array's gradient that of ``loss`` (a one-element array a recorded call wrote; its
        adjoint is 1), or of ``sum(y * dy)`` for ``grads=[(y, dy)]`` (pairs, as a numpy array is no dict key;
        a mapping of arrays that hash is taken too)."""
        seeds = self._seeds(loss, grads)
        if self._outside is not None:
            raise GradientError(f"{self._outside} changed since the call before it that the tape recorded (numpy "
                                "wrote it, or a call outside the block): the tape cannot differentiate that change; "
                                "make it a kernel call in the block, or change a copy", stage="gradient",
                                value=self._outside.split(",")[0])
        digests: dict[Key, int] = {}
        for record in self._records:
            record.check(digests)
        running = {key: value.copy() for key, value in seeds.items()}
        token = RECORDING.set(None)
        try:
            for record in reversed(self._records):
                self._pull(record, running)
        finally:
            RECORDING.reset(token)
        for key, value in running.items():
            if key in self._grads:
                self._grads[key] += value
            else:
                self._grads[key] = value

    def _seeds(self, loss: Any, grads: Grads | None) -> dict[Key, np.ndarray]:
        if (loss is None) == (grads is None):
            raise GradientError("backward takes a loss or grads={array: adjoint}, one of them", stage="gradient")
        if grads is None:
            if not isinstance(loss, np.ndarray) or loss.size != 1:
                raise GradientError(f"the loss is a {type(loss).__name__}{'' if np.ndim(loss) == 0 else ' of shape '}"
                                    f"{'' if np.ndim(loss) == 0 else np.shape(loss)}: backward takes a one-element "
                                    "array a recorded kernel wrote (return loss, not loss[0] or float(loss))",
                                    stage="gradient", value=type(loss).__name__)
            pairs = [(loss, np.ones_like(loss))]
        else:
            pairs = list(grads.items()) if isinstance(grads, Mapping) else list(grads)
        seeds: dict[Key, np.ndarray] = {}
        for array, adjoint_value in pairs:
            if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
                raise GradientError("backward's arrays are float numpy arrays a recorded call wrote",
                                    stage="gradient", value=type(array).__name__)
            key = key_of(array)
            if not any(record.keys[record.kernel.parameters.index(name)] == key
                       for record in self._records for name in record.adjoint.written):
                raise GradientError(f"backward was given an array of shape {array.shape} that no call the tape "
                                    "recorded wrote: pass the array the kernel wrote (the same view)",
                                    stage="gradient", value=array.shape)
            seed = np.asarray(adjoint_value, dtype=array.dtype)
            if seed.shape != array.shape:
                raise GradientError(f"the adjoint given for an array of shape {array.shape} has shape {seed.shape}",
                                    stage="gradient", value=seed.shape)
            seeds[key] = seeds[key] + seed if key in seeds else seed
        return seeds

    def _pull(self, record: _Record, running: dict[Key, np.ndarray]) -> None:
        """Run one record's adjoint on the running adjoints (an array passed twice takes its second adjoint in
        an array of its own, added after)."""
        parameters = record.kernel.parameters
        adjoints: list[np.ndarray] = []
        repeated: list[tuple[Key, np.ndarray]] = []
        for name, _ in record.adjoint.grads:
            key = record.keys[parameters.index(name)]
            assert key is not None
            if key not in running:
                running[key] = np.zeros_like(self._arrays[key])
            if any(running[key] is given for given in adjoints):
                repeated.append((key, np.zeros_like(running[key])))
                adjoints.append(repeated[-1][1])
            else:
                adjoints.append(running[key])
        if record.adjoint.kernel is not None:
            record.adjoint.kernel(*record.args, *adjoints, device=record.device)
        for key, value in repeated:
            running[key] += value

    # ---- gradients --------------------------------------------------------------------------------------

    def grad(self, array: np.ndarray) -> np.ndarray:
        """The gradient with respect to ``array`` as the block found it (zeros for one no recorded call read)."""
        if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
            raise GradientError(f"a gradient is taken with respect to a float numpy array, not a "
                                f"{getattr(array, 'dtype', type(array).__name__)}", stage="gradient",
                                value=type(array).__name__)
        found = self._grads.get(key_of(array))
        return np.zeros_like(array) if found is None else found

    def zero(self) -> None:
        """Clear the gradients (the records stay)."""
        self._grads.clear()

    def reset(self) -> None:
        """Clear the records and the gradients: the tape as new."""
        self._records.clear()
        self._arrays.clear()
        self._grads.clear()
        self._states.clear()
        self._outside = None


def vjp(fn: Any, *args: Any, device: Any = None) -> tuple[tuple[np.ndarray, ...], Callable[..., tuple[Any, ...]]]:
    """Run ``fn`` (an ``@svod.kernel``, or an ``@svod.jit`` function: ``_jit_vjp``) on ``args``; return
    ``(result, pullback)``: ``result`` the arrays it wrote, in argument order, and ``pullback(cotangent)`` (one
    array per result: a tuple, a dict by argument name, or the array itself for one result; that of an integer
    result is not read) one gradient per argument, with respect to its value before the call (None for an
    integer array or a number)."""
    if getattr(fn, "svod_jit", False):
        return _jit_vjp(fn, args, device)
    if not isinstance(fn, Kernel):
        raise GradientError(f"svod.vjp takes an @svod.kernel or an @svod.jit function, not {type(fn).__name__}; "
                            "svod.grad takes a function of kernel calls", stage="gradient", value=type(fn).__name__)
    args = _apart(fn, args)
    tape = Tape()
    with tape:
        fn(*args, device=device)
    written = tape._records[0].adjoint.written
    result = tuple(args[fn.parameters.index(name)] for name in written)

    def pullback(cotangent: Any) -> tuple[Any, ...]:
        if isinstance(cotangent, Mapping):
            unknown = sorted(set(cotangent) - set(written))
            if unknown:
                raise GradientError(f"{fn.name} writes {', '.join(written)}, not {unknown[0]}", kernel=fn.name,
                                    stage="gradient", value=unknown[0])
            given = [(result[written.index(name)], value) for name, value in cotangent.items()]
        else:
            values = (cotangent,) if len(result) == 1 and not isinstance(cotangent, tuple) else tuple(cotangent)
            if len(values) != len(result):
                raise GradientError(f"{fn.name} writes {len(result)} arrays ({', '.join(written)}); the pullback "
                                    f"was given {len(values)} cotangents", kernel=fn.name, stage="gradient",
                                    value=len(values))
            given = list(zip(result, values, strict=True))
        tape.zero()
        tape.backward(grads=[(array, value) for array, value in given if array.dtype.kind == "f"])
        return tuple(tape.grad(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else None for a in args)

    return result, pullback


def _jit_vjp(fn: Any, args: tuple[Any, ...], device: Any) -> tuple[tuple[np.ndarray, ...],
                                                                    Callable[..., tuple[Any, ...]]]:
    """``vjp`` of an ``@svod.jit`` function, run on a tape: its results are the arguments its kernels wrote, in
    argument order, then the arrays it returns that are none of its arguments."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    for k, array in enumerate(arrays):
        if any(np.may_share_memory(array, other) for other in arrays[:k]):
            raise GradientError(f"two array arguments of {fn.name} share memory: a pullback gives one gradient per "
                                "argument; pass copies", kernel=fn.name, stage="gradient", value=array.shape)
    tape = Tape()
    with tape:
        returned = fn(*args) if device is None else fn(*args, device=device)
    written = {record.keys[record.kernel.parameters.index(name)] for record in tape._records
               for name in record.adjoint.written}
    made = returned if isinstance(returned, tuple) else (returned,)
    result = tuple([a for a in arrays if key_of(a) in written] +
                   [r for r in made if isinstance(r, np.ndarray) and not any(r is a for a in arrays)])

    def pullback(cotangent: Any) -> tuple[Any, ...]:
        values = (cotangent,) if len(result) == 1 and not isinstance(cotangent, tuple) else tuple(cotangent)
        if len(values) != len(result):
            raise GradientError(f"{fn.name} gives {len(result)} arrays; the pullback was given {len(values)} "
                                "cotangents", kernel=fn.name, stage="gradient", value=len(values))
        tape.zero()
        tape.backward(grads=[(array, value) for array, value in zip(result, values, strict=True)
                             if array.dtype.kind == "f" and key_of(array) in written])
        return tuple(tape.grad(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else None for a in args)

    return result, pullback


def _apart(fn: Kernel, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with a copy in place of each array the kernel only reads that shares memory with another it only
    reads, before it: the tape keys gradients by memory, and a pullback gives one gradient per argument. (An array
    sharing memory with one the kernel writes stays, for the call to refuse.)"""
    floats = frozenset(name for name, value in zip(fn.parameters, args, strict=False)
                       if isinstance(value, np.ndarray) and value.dtype.kind == "f")
    written = adjoint(fn, floats).written
    read = [(name, value) for name, value in zip(fn.parameters, args, strict=False)
            if isinstance(value, np.ndarray) and name not in written]
    copied = {name for k, (name, value) in enumerate(read)
              if any(np.may_share_memory(value, other) for _, other in read[:k])}
    return tuple(value.copy() if name in copied else value
                 for name, value in zip(fn.parameters, args, strict=False))


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """The function that returns the gradient of ``fn``'s result (a one-element array an ``@svod.kernel`` call
    wrote) with respect to its array arguments ``argnums`` (an int: one gradient; a tuple: a tuple of them),
    as ``jax.grad``. ``fn`` runs on a tape (``Tape``): it may call kernels in any order, in place too; it may
    be an ``@svod.jit`` function."""
    if isinstance(fn, Kernel):
        raise GradientError(f"svod.grad takes a function returning a one-element array; {fn.name} is a kernel, "
                            "which returns nothing: use svod.vjp", kernel=fn.name, stage="gradient", value=fn.name)
    many = not isinstance(argnums, int)
    numbers = tuple(argnums) if not isinstance(argnums, int) else (argnums,)

    @functools.wraps(fn)
    def gradient(*args: Any, **keywords: Any) -> Any:
        for number in numbers:
            if number >= len(args) or not isinstance(args[number], np.ndarray) or args[number].dtype.kind != "f":
                raise GradientError(f"argument {number} of {getattr(fn, '__name__', fn)} is no float numpy array "
                                    "to take a gradient with respect to", stage="gradient", value=number)
        tape = Tape()
        with tape:
            result = fn(*args, **keywords)
        tape.backward(result)
        for number in numbers:
            if key_of(args[number]) not in tape._arrays:
                raise GradientError(f"argument {number} of {getattr(fn, '__name__', fn)} was passed to no kernel "
                                    "call: svod.grad differentiates kernel calls, and NumPy's operations on it are "
                                    "not recorded; write them as a kernel", stage="gradient", value=number)
        found = tuple(tape.grad(args[number]) for number in numbers)
        return found if many else found[0]

    return gradient


__all__ = ["Tape", "grad", "vjp"]
