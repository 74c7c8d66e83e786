"""Host buffers a gradient's own work takes and gives back, so that the next gradient reuses them (``Pool``).

Each backward pass needs arrays as large as the program's: the tape's copies of what a call overwrites, the
adjoints of the arrays svod made for a jit call, the copy of a cotangent the pass writes into. Made new each call,
every one of them takes pages the system maps and zeroes as they are first written, which for a large program
costs more than the adjoint kernels do. A ``Pool`` keeps those buffers between gradients, by their bytes and
dtype (they are host memory, whatever device runs the kernels), and a ``Lease`` holds what one tape took::

    svod.vjp(f, x)           Tape ── Lease ──take──▶ Pool (free buffers by (nbytes, dtype))
    pullback(dy)                      │  copies, internal adjoints
    (pullback freed)                  └──give back all──▶ Pool ──▶ the next vjp(f, ...) takes them

Only buffers nothing outside svod can reach are leased: an array handed to the caller (a gradient ``tape.grad``
gives, what a jit function returns) is made new and is the caller's, as JAX and torch give theirs. A leased
buffer is uninitialised: ``Lease.zeros`` fills it where the adjoint adds into it.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

Shape = tuple[int, ...]
Order = Literal["C", "F"]
Slot = tuple[int, str]
"""A buffer's bytes and dtype."""


class Pool:
    """Free host buffers by their bytes and dtype, shared by the tapes of one function's gradients (thread-safe: a
    buffer is in one lease or free, never both). It keeps at most ``limit`` bytes free, the most one lease has
    held at once by default: a stream of gradients of many sizes keeps about one gradient's worth, the oldest
    size given up first."""

    def __init__(self, limit: int | None = None) -> None:
        self._free: OrderedDict[Slot, list[np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self._returned: deque[tuple[list[np.ndarray], int]] = deque()
        """Buffers given back by a freed tape's finalizer (``give_later``), kept on the next ``take`` or ``give``."""
        self._limit = limit
        self._largest = 0
        """The most bytes one lease has held at once."""
        self.free_bytes = 0
        self.made = 0
        """How many buffers the pool made (those it gave out again not counted)."""

    def take(self, count: int, dtype: np.dtype[Any]) -> np.ndarray:
        """A one-dimensional buffer of ``count`` elements of ``dtype``, a free one where the pool has one."""
        slot = (count * dtype.itemsize, dtype.str)
        with self._lock:
            self._keep_returned()
            free = self._free.get(slot)
            if free:
                self.free_bytes -= slot[0]
                self._free.move_to_end(slot)
                found = free.pop()
                if not free:
                    del self._free[slot]
                return found
            self.made += 1
        return np.empty(count, dtype)

    def give(self, buffers: Iterable[np.ndarray], held: int) -> None:
        """Keep ``buffers`` (taken from this pool, no longer used) for the next lease; ``held``: the most bytes
        their lease held at once."""
        with self._lock:
            self._keep_returned()
            self._keep(buffers, held)

    def give_later(self, buffers: list[np.ndarray], held: int) -> None:
        """``give`` without taking the lock, for a finalizer: the cycle collector may run it in a thread that holds
        the lock already (inside ``give``), where taking it again would wait forever."""
        self._returned.append((buffers, held))

    def _keep_returned(self) -> None:
        while self._returned:
            self._keep(*self._returned.popleft())

    def _keep(self, buffers: Iterable[np.ndarray], held: int) -> None:
        self._largest = max(self._largest, held)
        for buffer in buffers:
            slot = (buffer.nbytes, buffer.dtype.str)
            self._free.setdefault(slot, []).append(buffer)
            self._free.move_to_end(slot)
            self.free_bytes += buffer.nbytes
        limit = self._largest if self._limit is None else self._limit
        while self.free_bytes > limit and self._free:
            slot, free = next(iter(self._free.items()))
            free.pop(0)
            self.free_bytes -= slot[0]
            if not free:
                del self._free[slot]

    def clear(self) -> None:
        """Let every free buffer go."""
        with self._lock:
            self._free.clear()
            self.free_bytes = 0


class Lease:
    """The buffers one tape took from a pool, given back together (``release``: the tape reset, or freed)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._taken: list[tuple[int, np.ndarray]] = []
        """Each buffer taken, with its number in the order they were taken."""
        self._count = 0
        self._held = 0
        self._peak = 0

    def empty(self, shape: Shape, dtype: Any, order: Order = "C") -> np.ndarray:
        """An uninitialised array of ``shape``, C- or Fortran-ordered (``order``)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.empty(shape, dtype, order=order)  # (nothing to keep)
        buffer = self.pool.take(count, dtype)
        self._taken.append((self._count, buffer))
        self._count += 1
        self._held += buffer.nbytes
        self._peak = max(self._peak, self._held)
        return buffer.reshape(shape, order=order)

    def zeros(self, shape: Shape, dtype: Any, order: Order = "C") -> np.ndarray:
        """An array of zeros of ``shape``."""
        made = self.empty(shape, dtype, order)
        made.fill(0)
        return made

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A C-ordered copy of ``array`` (as ``array.copy()``)."""
        made = self.empty(array.shape, array.dtype)
        np.copyto(made, array)
        return made

    def give(self, array: np.ndarray) -> None:
        """Give back early an array ``empty`` made, which nothing uses any more; one it did not make stays as it
        is."""
        base = array if array.base is None else array.base
        for position in range(len(self._taken) - 1, -1, -1):  # (the last taken first: a copy given back at once)
            if self._taken[position][1] is base:
                del self._taken[position]
                self._held -= base.nbytes
                self.pool.give([base], self._peak)
                return

    def mark(self) -> int:
        """A mark for ``release``: the buffers taken after it."""
        return self._count

    def release(self, since: int = 0) -> None:
        """Give back to the pool every buffer taken since ``mark`` gave ``since`` (by default, every one)."""
        self.pool.give(self._untaken(since), self._peak)

    def _untaken(self, since: int) -> list[np.ndarray]:
        """The buffers taken since ``since``, no longer this lease's."""
        kept = [(number, buffer) for number, buffer in self._taken if number < since]
        given = [buffer for number, buffer in self._taken if number >= since]
        self._taken = kept
        self._held -= sum(buffer.nbytes for buffer in given)
        return given

    def _release_when_freed(self) -> None:
        self.pool.give_later(self._untaken(0), self._peak)

    def on_free(self, owner: object) -> None:
        """Give every buffer back when ``owner`` (the tape) is freed (``Pool.give_later``: a finalizer may run
        inside the pool's lock)."""
        weakref.finalize(owner, Lease._release_when_freed, self)


__all__ = ["Lease", "Order", "Pool"]
