"""Python's cyclic garbage collector, paused while a kernel compiles.

Lowering builds and drops hundreds of thousands of small objects (UOps, tuples, dicts of facts), which
trigger collections; a full collection walks every object alive, and the UOp graphs a process holds keep
growing as a kernel does, so a large kernel's compile time grew faster than the kernel. What a compile
drops is freed by reference counting, or (a node that keeps its toposort, which holds the node itself) by
the first collection after it.

Pauses nest and may overlap across threads: the collector runs again when the last one ends, and only if
it ran before the first began (a program that turned it off keeps it off).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pauses:
    """How many pauses are under way, and whether the collector ran before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.resume = False


_PAUSES = _Pauses()
"""One for the process, as the collector is."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic garbage collector off (reference counting still frees)."""
    with _PAUSES.lock:
        if _PAUSES.count == 0:
            _PAUSES.resume = gc.isenabled()
            gc.disable()
        _PAUSES.count += 1
    try:
        yield
    finally:
        with _PAUSES.lock:
            _PAUSES.count -= 1
            if _PAUSES.count == 0 and _PAUSES.resume:
                gc.enable()


__all__ = ["collector_paused"]
