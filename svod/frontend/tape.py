"""Gradients of programs of ``@svod.kernel`` calls: ``svod.Tape``, which ``svod.vjp`` and ``svod.grad`` run
(``svod.frontend.gradients``).

A tape records each kernel call of its ``with`` block (``Kernel.__call__`` hands it the call) and runs it; an
``@svod.jit`` call is recorded as the kernel calls of its ``prange`` phases (``svod.frontend.jit_tape``). The
backward pass runs the calls' adjoint kernels (``svod.frontend.adjoint``) from the last to the first, each
turning the adjoints of its arrays after the call into their adjoints before it, in place; what is left is
each array's adjoint as the block found it.

An adjoint reads the values its call read. Without checkpoints (``Tape(checkpoint=False)``, and ``svod.vjp``'s
one call) the tape keeps them as the call saw them: before a call overwrites an array, it copies the values if
the adjoint of a call since the array was last written reads them (the call's own, where it reads and writes
the array).

With checkpoints (the default), a loop of ``n`` calls keeps no copy per call: call ``k * s`` is a checkpoint
(``s`` a power of two, doubled while ``s * s < n``, the copies no checkpoint left needs dropped), and before a
call overwrites an array it copies the values if they are those the array held at a checkpoint since. Of an array
the call only stores into (with ``=``, reading it nowhere) and that no call took between the checkpoint and this
one, the copy keeps only the elements the call left as they were: running the call again gives the others. The
backward pass takes the checkpoints last first, runs the calls after each again from the values kept there (on
copies; each more than a few calls is checkpointed in turn the same way), and runs their adjoints, last first.

Either way, the tape keeps a copy of each array as a call found it (as the last call that wrote it left it, or as
the first call to take it found it), and refuses (``GradientError``) an array that is not so, bit for bit: at the
next call that takes it (numpy wrote it in the block: the tape cannot differentiate that change), and at
``backward`` for an array the backward pass takes from the caller (no call wrote it since a call read it: numpy
wrote it after the block, and the gradient would be taken at values the forward never saw). A copy and a
comparison each read the array once, at memory speed, and are exact, for one copy of each array the tape took
(``checked_bytes``). Of an array of ``DIGESTED_BYTES`` or more the tape keeps a digest instead
(``svod.frontend.digests``), which reading the array once computes, on the CPU's threads, where the copy and
the comparison move it three times between them and the copy doubles its memory; a change escapes a digest about
once in 2**64. ``vjp``'s tape, which records one call, keeps copies of only the arrays its adjoint reads.

An ``@svod.jit`` call's kernel calls run one after another, no code of the caller's between them: the tape copies
what they wrote once, at the call's end, and compares an array they read at the first that reads it. The arrays
svod makes for the call (its temporaries, which only its calls write: ``Tape.made``) it neither copies nor
compares, but those the call returns, which are the caller's after it; and their values before the first call that
writes them are one value throughout, kept as that value.

Arrays are told apart by their memory (address, shape, strides, dtype): two views of one array's memory
that are not the same view are refused, as their adjoints could not be kept apart.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod.errors import GradientError
from svod.frontend.adjoint import Adjoint, stored_once
from svod.frontend.adjoint_gemm import adjoint_of
from svod.frontend.buffers import Lease, Order, Pool
from svod.frontend.digests import Digest, digest
from svod.frontend.pykernel import Kernel
from svod.runtime.taping import RECORDING, unrecorded

Key = tuple[int, tuple[int, ...], tuple[int, ...], str]
"""An array's memory: its address, shape, strides and dtype."""

Grads = Mapping[Any, Any] | Sequence[tuple[Any, Any]]
"""The adjoints ``Tape.backward`` starts from: ``(array, adjoint)`` pairs."""

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def key_of(array: np.ndarray) -> Key:
    return (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)


def _extent(array: np.ndarray) -> tuple[int, int]:
    """The bytes an array's elements span, from its first to one past its last (empty for an empty array): two
    arrays may share memory where their extents meet (``np.may_share_memory``'s test)."""
    start = end = array.__array_interface__["data"][0]
    if array.size == 0:
        return start, end
    for size, stride in zip(array.shape, array.strides, strict=True):
        if stride < 0:
            start += stride * (size - 1)
        else:
            end += stride * (size - 1)
    return start, end + array.dtype.itemsize


def _bits(array: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned integers of their size (its bytes, for another size): two arrays of
    equal bits are equal so, a NaN's payload and the sign of a zero told apart."""
    if array.dtype.itemsize in (1, 2, 4, 8):
        return array.view(f"u{array.dtype.itemsize}")
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _words(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array's bytes as one row of 8-byte words (of bytes, where their count is no multiple of 8)."""
    flat = array.reshape(-1).view(np.uint8)
    return flat.view(np.uint64) if flat.size % 8 == 0 else flat


DIGESTED_BYTES = 1 << 22
"""The size from which the tape keeps an array's digest to compare, not a copy: below it, a copy and a comparison
in the cache take less time than computing the digest twice."""


def _same(kept: np.ndarray | Digest, array: np.ndarray) -> bool:
    """Whether ``array`` holds the values ``kept`` holds: a copy of it, bit for bit, or its digest. A copy is
    smaller than ``DIGESTED_BYTES``, so one comparison of all its words keeps its flags in the cache (at 2 MB, 110 us
    where eight comparisons of a chunk each took 179)."""
    if isinstance(kept, Digest):
        return digest(array) == kept
    if kept.dtype == array.dtype and kept.shape == array.shape and kept.flags.c_contiguous \
            and array.flags.c_contiguous:
        return bool(np.array_equal(_words(kept), _words(array)))
    return bool(np.array_equal(_bits(kept), _bits(array)))


def _caller() -> str:
    """``file:line`` of the user's code that made the call being recorded (the first frame outside svod)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


@dataclass
class _Record:
    """One recorded call: the kernel's adjoint, the caller's arguments and where the call was made."""

    kernel: Kernel
    adjoint: Adjoint
    args: list[Any]
    keys: list[Key | None]
    device: Any
    where: str
    read: list[int] = field(default_factory=list)
    """The positions of the arrays the call read (all but the outputs no earlier call took): where the backward
    pass takes one from the caller's array, that must hold still what the tape kept of it."""
    dead: frozenset[Key] = frozenset()
    """The arrays whose adjoints before the call no gradient asked for depends on (``Tape._dead``): the adjoint
    is pulled without them (``Adjoint.pull``), and stores and adds nothing into theirs."""
    spent: frozenset[Key] = frozenset()
    """The arrays the call wrote whose adjoints before the call nothing reads (``Tape._dead``): the adjoint
    reads theirs and leaves them as they were (``Adjoint.pull``)."""

    @property
    def needs(self) -> frozenset[str]:
        """The arguments whose values the adjoint reads, as the call saw them."""
        return self.adjoint.needs

    def written(self) -> set[Key]:
        parameters = self.kernel.parameters
        return {key for position, key in enumerate(self.keys)
                if key is not None and parameters[position] in self.adjoint.written}


@dataclass
class _Copy:
    """An array's values before a call overwrote them, which call ``before`` wrote (-1: the block found them so).
    Of an array the call only stores into with ``=``, only the elements the call left as they were are kept
    (``kept``, a mask of them packed in bits): the call gives the others again."""

    before: int
    values: np.ndarray
    shape: tuple[int, ...]
    kept: np.ndarray | None = None
    uniform: bool = False
    """Whether every element held one value, ``values`` (0-d): an array svod made (``Tape.made``), which a
    call writes first."""

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + (0 if self.kept is None else self.kept.nbytes)

    def thin(self, after: np.ndarray) -> None:
        """Keep only the elements ``after`` (the array as the call left it) holds as they were, bit for bit."""
        bits = np.dtype(f"u{self.values.itemsize}") if self.values.itemsize in (1, 2, 4, 8) else None
        if bits is None or self.values.ndim == 0 or self.uniform:
            return
        same = self.values.view(bits) == np.ascontiguousarray(after).view(bits)
        self.kept = np.packbits(same, axis=None)
        self.values = self.values[same]

    def array(self, lease: Lease) -> tuple[np.ndarray, bool]:
        """The values, and whether the array is a new one (the caller's to write, of ``lease``)."""
        if self.uniform:
            full = lease.empty(self.shape, self.values.dtype)
            full.fill(self.values)
            return full, True
        if self.kept is None:
            return self.values, False
        full = lease.zeros(self.shape, self.values.dtype)
        full[np.unpackbits(self.kept, count=full.size).reshape(self.shape).view(bool)] = self.values
        return full, True


Found = Callable[[Key], tuple[np.ndarray, bool]]
"""An array's values at a call, and whether the array is a new one (the caller's to write)."""

_FEW = 4
"""The most calls the backward pass runs again keeping the values of each; more, it checkpoints in turn."""


@dataclass
class _Replay:
    """Calls run again in the backward pass, on the arrays' values before the first (``found``): ``state``
    holds each array's values as the calls so far left them."""

    found: Found
    lease: Lease
    """Where its copies come from (given back at the backward pass's end)."""
    state: dict[Key, np.ndarray] = field(default_factory=dict)
    own: set[Key] = field(default_factory=set)
    """The arrays of ``state`` the replay made that nothing else holds: a call may write them in place."""
    made: int = 0
    """The bytes of the arrays the replay made."""

    @staticmethod
    def within(values: dict[Key, np.ndarray], found: Found) -> Found:
        """``values`` (kept at a call), or ``found`` for an array no call before it took."""
        return lambda key: (values[key], False) if key in values else found(key)

    def args(self, record: _Record) -> list[Any]:
        """``record``'s arguments as its call finds them."""
        for key in record.keys:
            if key is not None and key not in self.state:
                self.state[key], new = self.found(key)
                if new:
                    self.own.add(key)
                    self.made += self.state[key].nbytes
        return [arg if key is None else self.state[key] for arg, key in zip(record.args, record.keys, strict=True)]

    def run(self, record: _Record) -> None:
        """Run ``record``'s call again, on copies of the arrays it writes that something else holds."""
        self.args(record)
        for key in record.written() - self.own:
            self.state[key] = self.lease.copy(self.state[key])
            self.own.add(key)
            self.made += self.state[key].nbytes
        record.kernel(*self.args(record), device=record.device)


class Tape:
    """``with svod.Tape() as tape:`` records the ``@svod.kernel`` calls of its block (on numpy arrays, in this
    thread); ``tape.backward(loss)`` (a one-element array a recorded call wrote) or
    ``tape.backward(grads=[(y, dy)])`` computes the gradients, which ``tape.grad(x)`` gives, shaped as ``x``, with
    respect to ``x`` as the block found it. A second ``backward`` adds to them; ``zero`` clears them and
    ``reset`` the records too.

    ``checkpoint=True`` keeps the arrays' values at one call in about every ``sqrt(n)`` of ``n`` and runs the calls
    between again in the backward pass; ``checkpoint=False`` keeps every value an adjoint reads, and runs no call
    again. ``saved_bytes`` and ``peak_saved_bytes`` say what the kept values take."""

    def __init__(self, *, checkpoint: bool = True) -> None:
        self._checkpoint = checkpoint
        self._records: list[_Record] = []
        self._takers: dict[Key, list[int]] = {}
        """The recorded calls that took each array, in order."""
        self._arrays: dict[Key, np.ndarray] = {}
        self._grads: dict[Key, np.ndarray] = {}
        self._states: dict[Key, np.ndarray | Digest] = {}
        """A copy of each array (its digest, from ``DIGESTED_BYTES``) as the last recorded call that wrote it left it,
        or as the first call since found it: a call finding it otherwise finds a change the tape did not record."""
        self._outside: str | None = None
        """The first array a call found changed since the call before it, if any: ``backward`` refuses."""
        self._token: Any = None
        self._writes: dict[Key, list[int]] = {}
        """The calls that wrote each array, in order."""
        self._saved: dict[tuple[Key, int], _Copy] = {}
        """An array's values before a call that overwrote them, by ``(array, call)``."""
        self._saved_bytes = 0
        """What ``_saved``'s copies take (``saved_bytes``), counted as they come and go."""
        self._extents: list[tuple[int, int]] = []
        """The memory of the arrays the calls took (``_arrays``; an empty one's meets none), apart from each
        other (``_key`` refuses another view of one), sorted: where a new array would meet one."""
        self._spacing = 1
        """The calls from one checkpoint to the next: a power of two whose square is at least the number of calls."""
        self._peak = 0
        self._watch = True
        """Whether to keep a copy of what each call wrote, for the next call to find it unchanged, and of each
        array a call read (``vjp``'s tape, which records one call, keeps copies of only what its adjoint reads)."""
        self._wanted: frozenset[Key] | None = None
        """The arrays whose gradients ``backward`` is to give (None: every array's): ``svod.grad``'s arguments."""
        self._given: frozenset[Key] | None = None
        """The arrays whose gradients ``grad`` may give the caller (None: any but svod's own, ``_own``): made new,
        the caller's; the other adjoints, and the tape's copies, are the lease's (``svod.frontend.buffers``)."""
        self._lease = Lease(Pool())
        self._lease.on_free(self)
        self._own: dict[Key, np.ndarray] = {}
        """The arrays svod made for a jit call (``made``) that it has not handed to the caller: only recorded
        calls write them, so the tape keeps no copy of them to compare."""
        self._uniform: dict[Key, np.ndarray] = {}
        """Of ``_own``, those no recorded call wrote yet, with the one value each element holds (0-d): the copy
        of their values before the first call writes them is that value."""
        self._batch: dict[Key, bool] | None = None
        """Inside a jit call (``begin``): the arrays its calls took that the tape checked or that they wrote
        (True), which it copies at ``end``: no code of the caller's runs between its calls to change them."""
        self._one_call = False
        """Whether the tape records one jit call and no more (``vjp``'s): of what the call returns it keeps a
        copy to compare only where ``backward`` compares it."""
        self._borrowed: set[Key] = set()
        """The running adjoints that are still the cotangents given ``backward``, uncopied: copied before the
        first adjoint that writes into them (``_pull``)."""
        self._sealed = False
        """Whether the backward runs right after one jit call, as ``svod.grad`` of a jit function runs it: no
        code of the caller's runs from the call's start to the backward's end, so no array can change outside
        the recorded calls, and the tape keeps no copy of one to compare."""

    def __enter__(self) -> Tape:
        if RECORDING.get() is not None:
            raise GradientError("a svod.Tape block inside another's: record in one tape", stage="gradient")
        self._token = RECORDING.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        RECORDING.reset(self._token)

    @property
    def saved_bytes(self) -> int:
        """The bytes of the copies of arrays the tape holds now for its backward pass."""
        return self._saved_bytes

    @property
    def checked_bytes(self) -> int:
        """The bytes of the copies the tape holds of the arrays its calls took, as they took them, to refuse one
        changed outside the calls (one per array smaller than ``DIGESTED_BYTES``, apart from ``saved_bytes``)."""
        return sum(state.nbytes for state in self._states.values() if isinstance(state, np.ndarray))

    @property
    def peak_saved_bytes(self) -> int:
        """The most bytes of copies the tape held at once since it was made or reset: while recording, and in
        the backward pass with the copies it makes to run calls again."""
        return self._peak

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
        made = adjoint_of(kernel, floats, args)
        record = _Record(kernel, made, list(args), [None] * len(args), device, _caller())
        for position, (name, value) in enumerate(zip(kernel.parameters, args, strict=False)):
            if not isinstance(value, np.ndarray):
                continue
            key, first = self._key(value, kernel)
            record.keys[position] = key
            if first and name in made.written and name not in made.reads:
                continue  # an output no earlier call took: its state is kept after the call, its values unread
            record.read.append(position)
            self._find(key, value, name, record)
        index = len(self._records)
        copies: dict[Key, _Copy] = {}
        for key in sorted(record.written()):
            before = self._writes[key][-1] if key in self._writes else -1
            if self._keeps(key, before, record):
                copies[key] = self._before(key, before)
        self._peak = max(self._peak, self.saved_bytes + sum(copy.nbytes for copy in copies.values()))
        with unrecorded():
            kernel(*args, device=device)
        self._records.append(record)
        for key in dict.fromkeys(k for k in record.keys if k is not None):
            self._takers.setdefault(key, []).append(index)
        for key in sorted(record.written()):
            self._writes.setdefault(key, []).append(index)
            self._uniform.pop(key, None)
            if self._batch is not None:
                self._batch[key] = True
            elif self._watch and not self._sealed and key not in self._own:
                self._keep(key, self._arrays[key])
            if key in copies:
                self._saved[(key, index)] = copies[key]
                if self._stored(key, record):
                    whole = copies[key].values
                    copies[key].thin(self._arrays[key])
                    if copies[key].values is not whole:
                        self._lease.give(whole)
                self._saved_bytes += copies[key].nbytes
        if self._checkpoint:
            self._thin()

    def _find(self, key: Key, value: np.ndarray, name: str, record: _Record) -> None:
        """Keep a copy of an array as the first call to take it finds it; refuse one a call finds otherwise than
        as the last call that wrote it left it (``backward`` does). Inside a jit call, an array its calls took
        before needs neither (nothing else ran since), and one svod made for it neither."""
        if self._sealed or key in self._own or (self._batch is not None and key in self._batch):
            return
        if self._batch is not None:
            self._batch[key] = False
        if key not in self._states:
            if self._watch or name in record.needs:
                self._keep(key, value)
        elif self._outside is None and not _same(self._states[key], value):
            self._outside = f"{name}, an argument of {record.kernel.name} at {record.where},"

    def _before(self, key: Key, before: int) -> _Copy:
        """A copy of the array's values before the call about to write it, which call ``before`` wrote."""
        array = self._arrays[key]
        if key in self._uniform:
            return _Copy(before, self._uniform[key], array.shape, uniform=True)
        return _Copy(before, self._lease.copy(array), array.shape)

    def _keep(self, key: Key, array: np.ndarray) -> None:
        """Keep a copy of ``array`` as ``key``'s state (``_states``; its digest, from ``DIGESTED_BYTES``), the copy
        it replaces given back."""
        old = self._states.get(key)
        self._states[key] = digest(array) if array.nbytes >= DIGESTED_BYTES else self._lease.copy(array)
        if isinstance(old, np.ndarray):
            self._lease.give(old)

    def made(self, array: np.ndarray, uniform: bool) -> None:
        """``array`` is new, made by svod for a jit call's calls, every element one value where ``uniform``
        (``Recorder.made``)."""
        key = key_of(array)
        self._own[key] = array
        if uniform:
            self._uniform[key] = np.array(array[(0,) * array.ndim]) if array.size else np.zeros((), array.dtype)

    def begin(self, pure: bool = True) -> None:
        """The calls recorded until ``end`` are one jit call's (``Recorder.begin``); one that may run the
        caller's code between them is compared as any at the backward, even by ``svod.grad``."""
        self._batch = {}
        self._sealed &= pure

    def end(self, returned: tuple[Any, ...]) -> None:
        """Copy the arrays the jit call's calls wrote, for the next call to find them unchanged, and those svod
        made that it returns, now the caller's (``Recorder.end``)."""
        batch, self._batch = self._batch or {}, None
        given = [key_of(array) for array in returned if isinstance(array, np.ndarray)]
        for key in given:
            self._uniform.pop(key, None)
            if self._own.pop(key, None) is not None and key in self._arrays:
                batch[key] = True
        if not self._watch or self._sealed:
            return
        checked = self._checked() if self._one_call else None
        for key, written in batch.items():
            if written and key not in self._own and (checked is None or key in checked):
                self._keep(key, self._arrays[key])

    def _keeps(self, key: Key, before: int, record: _Record) -> bool:
        """Whether the values ``record``'s call is about to overwrite, which call ``before`` wrote, are to be
        copied: with checkpoints, where they are those of a checkpoint since (the calls after it run again from
        them); without, where an adjoint of a call since reads them."""
        index = len(self._records)
        if self._checkpoint:
            return self._crosses(before, index)
        return any(earlier.keys[position] == key and name in earlier.needs
                   for earlier in [*self._records[before + 1:], record]
                   for position, name in enumerate(earlier.kernel.parameters[:len(earlier.keys)]))

    def _stored(self, key: Key, record: _Record) -> bool:
        """Whether the values the copy before ``record``'s call keeps serve that call only, which stores into the
        array with ``=`` and reads it nowhere: no recorded call since the first checkpoint after the call that wrote
        them took the array (there, the calls run again start)."""
        made = record.adjoint
        if any(key == record.keys[position] and name in made.reads | made.updated
               for position, name in enumerate(record.kernel.parameters[:len(record.keys)])):
            return False
        before = self._saved[(key, len(self._records) - 1)].before
        first = (before // self._spacing + 1) * self._spacing if self._checkpoint else before + 1
        takers = self._takers[key]
        at = bisect.bisect_left(takers, first)
        return at == len(takers) or takers[at] == len(self._records) - 1  # (the call itself took it: the last)

    def _crosses(self, before: int, index: int) -> bool:
        """Whether a checkpoint falls after call ``before`` and at or before call ``index``."""
        return index // self._spacing * self._spacing > before

    def _thin(self) -> None:
        """Double the spacing of the checkpoints while its square is short of the number of calls, dropping the
        copies no checkpoint left needs: at most about ``sqrt(n)`` checkpoints, and as many calls between two."""
        count = len(self._records)
        if count <= self._spacing ** 2:
            return
        while count > self._spacing ** 2:
            self._spacing *= 2
        for at, kept in list(self._saved.items()):
            if not self._crosses(kept.before, at[1]):
                del self._saved[at]
                self._saved_bytes -= kept.nbytes
                self._lease.give(kept.values)

    def _key(self, array: np.ndarray, kernel: Kernel) -> tuple[Key, bool]:
        """The array's key, and whether no earlier call took it."""
        key = key_of(array)
        if key in self._arrays:
            return key, False
        start, end = _extent(array)
        at = bisect.bisect_left(self._extents, (end,))
        if start < end and at and self._extents[at - 1][1] > start:
            raise GradientError(f"an argument of {kernel.name} may share memory with another array the tape "
                                "recorded, as a different view of it: pass the same view, or a copy",
                                kernel=kernel.name, stage="gradient", value=array.shape)
        if start < end:
            self._extents.insert(at, (start, end))
        self._arrays[key] = array
        return key, True

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
        if not self._sealed:
            self._check()
        self._dead()
        mark = self._lease.mark()
        self._borrowed = self._borrowable(seeds)
        try:
            with unrecorded():
                running = {key: value if key in self._borrowed else self._copy(value, self._gives(key))
                           for key, value in seeds.items()}
                for start in reversed(range(0, len(self._records), self._spacing)):
                    self._reverse(start, min(start + self._spacing, len(self._records)), running,
                                  functools.partial(self._at, index=start), self.saved_bytes)
        finally:
            self._lease.release(mark)  # (what the pass took: its adjoints that are not given, its replays' copies)
        for key, value in running.items():
            if not self._gives(key):
                continue
            if key in self._grads:
                self._grads[key] += value
            else:
                self._grads[key] = value.copy() if key in self._borrowed else value
        self._borrowed = set()

    def _borrowable(self, seeds: dict[Key, np.ndarray]) -> set[Key]:
        """The cotangents the pass may read where the caller gave them: laid out as the adjoints the tape makes,
        sharing memory with no other, and with no gradient the tape holds, which the pass adds into at its end
        (a second pass given one of the first's gradients reads it as the first left it)."""
        held = list(self._grads.values())
        return {key for key, value in seeds.items() if (value.flags.c_contiguous or value.flags.f_contiguous)
                and value.flags.aligned and value.flags.writeable
                and not any(np.may_share_memory(value, other) for other in
                            [*(seeds[k] for k in seeds if k != key), *held])}

    def _lend(self, pool: Pool, given: Sequence[Any]) -> None:
        """Take the tape's buffers from ``pool`` (before it records), and give the caller the gradients of the
        arrays of ``given`` alone (``_given``)."""
        self._lease.pool = pool
        self._given = frozenset(key_of(array) for array in given if isinstance(array, np.ndarray))

    def _gives(self, key: Key) -> bool:
        """Whether ``grad`` may give the caller ``key``'s gradient (``_given``)."""
        return key not in self._own if self._given is None else key in self._given

    def _dead(self) -> None:
        """Mark in each record the arrays it only reads whose values at its call depend on none of the arrays whose
        gradients are wanted (``_wanted``): a call that reads one makes every array it writes depend on them. And
        those it writes that no earlier call took and no gradient asked for is (``spent``): the backward pass
        reads their adjoints before the call nowhere."""
        wanted = self._wanted
        live = None if wanted is None else set(wanted)
        taken: set[Key] = set()
        for record in self._records:
            if live is None or wanted is None:
                record.dead = record.spent = frozenset()
                continue
            written = record.written()
            record.dead = frozenset(key for key in record.keys if key is not None and key not in live | written)
            record.spent = frozenset(key for key in written if key not in taken and key not in wanted)
            taken |= {key for key in record.keys if key is not None}
            if any(record.keys[position] in live for position in record.read):
                live |= written

    def _check(self) -> None:
        """Refuse if an array the backward pass takes from the caller (one no call wrote since a call read it) is
        no longer as that call saw it: as the tape's copy of it (each call that took it since the last write found
        it so, or ``backward`` refused before this)."""
        for key, (record, name) in self._checked().items():
            if not _same(self._states[key], self._arrays[key]):
                raise GradientError(f"{name} changed after the tape recorded {record.kernel.name} at "
                                    f"{record.where} and before backward (numpy wrote it, or a call outside the "
                                    "tape's block): its gradient would be taken at values the forward never "
                                    "read; change a copy, or record the change in the block as a kernel call",
                                    kernel=record.kernel.name, stage="gradient", value=name)

    def _checked(self) -> dict[Key, tuple[_Record, str]]:
        """The arrays ``_check`` compares (those the backward pass takes from the caller whose values a call read,
        but those svod made for a jit call), each with the first call that read it since it was last written."""
        found: dict[Key, tuple[_Record, str]] = {}
        for index, record in enumerate(self._records):
            for position in record.read:
                key = record.keys[position]
                name = record.kernel.parameters[position]
                assert key is not None
                if key in found or key in self._own or self._writes.get(key, [-1])[-1] >= index:
                    continue
                if self._checkpoint or name in record.needs:
                    found[key] = (record, name)
        return found

    def _at(self, key: Key, index: int) -> tuple[np.ndarray, bool]:
        """The array's values as call ``index`` found them (the copy taken before the first call since that
        wrote it, or the caller's array where none did, or where no adjoint reads the values), and whether it is
        a new array, the caller's to write."""
        writes = self._writes.get(key, [])
        after = bisect.bisect_left(writes, index)
        if after < len(writes) and (key, writes[after]) in self._saved:
            return self._saved[(key, writes[after])].array(self._lease)
        return self._arrays[key], False

    def _direct(self, index: int) -> list[Any] | None:
        """The arguments of call ``index`` as it found them where the tape holds them, no call run again: the
        caller's arrays no call wrote since, and whole copies (and any array for one the adjoint does not read);
        None where it does not."""
        record = self._records[index]
        args = list(record.args)
        for position, key in enumerate(record.keys):
            if key is None:
                continue
            writes = self._writes.get(key, [])
            after = bisect.bisect_left(writes, index)
            copy = self._saved.get((key, writes[after])) if after < len(writes) else None
            needed = record.kernel.parameters[position] in record.needs
            if copy is not None and copy.kept is None and (needed or not copy.uniform):
                args[position] = copy.array(self._lease)[0]
            elif after < len(writes) and needed:
                return None
            else:
                args[position] = self._arrays[key]
        return args

    def _reverse(self, start: int, end: int, running: dict[Key, np.ndarray], found: Found, held: int) -> None:
        """Run the adjoints of calls ``start`` to ``end - 1``, the last first, from the arrays' values before call
        ``start`` (``found``) while ``held`` bytes of copies are held: a few calls run again, keeping the values
        each adjoint reads; more, run again once to keep the values at about every ``sqrt`` of them, and each
        stretch between so in turn."""
        direct = [self._direct(index) for index in range(start, end)]
        if all(args is not None for args in direct):
            for index in reversed(range(start, end)):
                self._pull(self._records[index], direct[index - start] or [], running)
            return
        replay = _Replay(found, self._lease)
        if end - start > _FEW:
            step = math.isqrt(end - start - 1) + 1
            starts = range(start, end, step)
            states: dict[int, dict[Key, np.ndarray]] = {}
            for index in range(start, starts[-1] + 1):
                if index in starts:
                    states[index] = dict(replay.state)
                    replay.own.clear()
                if index < starts[-1]:
                    replay.run(self._records[index])
            for begin in reversed(starts):
                self._reverse(begin, min(begin + step, end), running, _Replay.within(states[begin], found),
                              held + replay.made)
            return
        pulls: list[tuple[_Record, list[Any]]] = []
        for index in range(start, end):
            record = self._records[index]
            pulls.append((record, replay.args(record)))
            replay.own -= {key for position, key in enumerate(record.keys)
                           if record.kernel.parameters[position] in record.needs}
            if index < end - 1:
                replay.run(record)
        self._peak = max(self._peak, held + replay.made)
        for record, args in reversed(pulls):
            self._pull(record, args, running)

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

    def _pull(self, record: _Record, args: list[Any], running: dict[Key, np.ndarray]) -> None:
        """Run one record's adjoint on ``args`` (its arguments as the call saw them) and the running adjoints (an
        array passed twice takes its second adjoint in an array of its own, added after)."""
        parameters = record.kernel.parameters
        names = [name for name, _ in record.adjoint.grads]
        keys = [record.keys[parameters.index(name)] for name in names]
        spent = frozenset(name for name, key in zip(names, keys, strict=True)
                          if key in record.spent) & stored_once(record.kernel)
        named = dict(zip(parameters, args, strict=False))
        adjoints, fresh, repeated, unset = self._adjoints(record, names, keys, running, named)
        given = dict(zip(names, adjoints, strict=True))
        news = dict(zip(names, fresh, strict=True))
        writes = record.adjoint.writes(given, news, spent)
        copied = {key for name, key in zip(names, keys, strict=True) if key in self._borrowed
                  and given[name] is not None and name in writes} | ({k for k, _ in repeated} & self._borrowed)
        for key in sorted(copied):
            borrowed, running[key] = running[key], self._copy(running[key], self._gives(key))
            self._borrowed.discard(key)
            given = {name: running[key] if value is borrowed else value for name, value in given.items()}
        record.adjoint.pull(named, given, news, record.device, spent, unset)
        for key, value in repeated:
            running[key] += value

    def _adjoints(self, record: _Record, names: list[str], keys: list[Key | None], running: dict[Key, np.ndarray],
                  args: dict[str, Any]) -> tuple[list[np.ndarray | None], list[bool], list[tuple[Key, np.ndarray]],
                                                 frozenset[str]]:
        """Per array of the record's adjoint (``names``, ``keys``): its running adjoint (None where dead; new zeros
        for one not taken yet, uninitialised where the adjoint stores every element of it for a call on ``args``:
        ``Adjoint.covers``), whether that holds zeros only (or is new), the arrays of the second adjoints of arrays
        passed twice, and the names of the adjoints taken uninitialised."""
        adjoints: list[np.ndarray | None] = []
        fresh: list[bool] = []
        repeated: list[tuple[Key, np.ndarray]] = []
        unset: set[str] = set()
        for name, key in zip(names, keys, strict=True):
            assert key is not None
            if key in record.dead:
                adjoints.append(None)
                fresh.append(True)
                continue
            fresh.append(key not in running)
            if key not in running:
                whole = record.adjoint.covers(name, args)
                running[key] = self._new(self._arrays[key], self._gives(key), zeroed=not whole)
                if whole:
                    unset.add(name)
            if any(running[key] is given for given in adjoints):
                repeated.append((key, self._new(running[key], False)))
                adjoints.append(repeated[-1][1])
                fresh[-1] = True
            else:
                adjoints.append(running[key])
        return adjoints, fresh, repeated, frozenset(unset)

    def _new(self, like: np.ndarray, given: bool, zeroed: bool = True) -> np.ndarray:
        """A new adjoint for ``like``, laid out as it is, of zeros where ``zeroed`` (else uninitialised: the
        adjoint stores every element): the caller's where ``given``, else the lease's. (A large ``np.zeros`` is
        no free page the system zeroes: memory a freed array gave back is set to zero element by element.)"""
        order: Order = "F" if like.flags.f_contiguous and not like.flags.c_contiguous else "C"
        if given:
            return (np.zeros if zeroed else np.empty)(like.shape, like.dtype, order=order)
        return (self._lease.zeros if zeroed else self._lease.empty)(like.shape, like.dtype, order)

    def _copy(self, array: np.ndarray, given: bool) -> np.ndarray:
        """A copy of ``array``: the caller's where ``given``, else the lease's."""
        return array.copy() if given else self._lease.copy(array)

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
        self._takers.clear()
        self._arrays.clear()
        self._grads.clear()
        self._states.clear()
        self._outside = None
        self._writes.clear()
        self._saved.clear()
        self._saved_bytes = 0
        self._extents.clear()
        self._spacing = 1
        self._peak = 0
        self._own.clear()
        self._uniform.clear()
        self._batch = None
        self._lease.release()


__all__ = ["Tape", "key_of"]
