"""Dependencies between the steps of a plan from the byte ranges they touch, in time linear in the steps.

::

    storage -> sorted disjoint segments [start, end) -> (last writer, readers since that write)

A step that reads bytes depends on their last writer; a step that writes them depends on their last writer
and on every reader since (read-after-write, write-after-write, write-after-read). Reads never order
against reads. Each step then becomes the last writer of what it writes, or one more reader of what it
reads. A step therefore lists the latest conflicting steps, not every earlier one: the steps it must wait
for are those and, through them, everything they wait for. The work per step is the segments its
accesses meet, so a plan whose steps touch whole buffers prepares in time linear in its length.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol, TypeVar


class Access(NamedTuple):
    """``[start, end)`` bytes of the storage ``storage`` (the id of a base buffer), read or written."""

    storage: int
    start: int
    end: int
    write: bool

    def conflicts(self, other: Access) -> bool:
        return (self.storage == other.storage and (self.write or other.write)
                and self.start < other.end and other.start < self.end)


class _Segment:
    __slots__ = ("end", "readers", "start", "writer")

    def __init__(self, start: int, end: int, writer: int | None, readers: list[int]) -> None:
        self.start = start
        self.end = end
        self.writer = writer
        self.readers = readers


class _Storage:
    """The segments of one storage, sorted by start; ``starts`` mirrors them for bisection."""

    __slots__ = ("segments", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.segments: list[_Segment] = []

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The positions ``[first, last)`` of the segments meeting ``[start, end)``."""
        first = bisect_right(self.starts, start) - 1
        if first < 0 or self.segments[first].end <= start:
            first += 1
        return first, bisect_left(self.starts, end, lo=first)

    def split(self, at: int) -> None:
        """Make ``at`` a segment boundary if a segment covers it."""
        position = bisect_right(self.starts, at) - 1
        if position < 0:
            return
        segment = self.segments[position]
        if segment.start < at < segment.end:
            self.segments.insert(position + 1, _Segment(at, segment.end, segment.writer, list(segment.readers)))
            self.starts.insert(position + 1, at)
            segment.end = at


class ByteRanges:
    """Who last wrote, and who has read since, every byte range of every storage touched so far."""

    def __init__(self) -> None:
        self._storages: dict[int, _Storage] = {}

    def add(self, step: int, accesses: Iterable[Access]) -> tuple[int, ...]:
        """Record step ``step`` (a number larger than every earlier one's) touching ``accesses``; the
        earlier steps it must wait for, ascending."""
        accesses = tuple(accesses)
        found: set[int] = set()
        for access in accesses:
            storage = self._storages.get(access.storage)
            if storage is None or access.start >= access.end:
                continue
            first, last = storage.span(access.start, access.end)
            for segment in storage.segments[first:last]:
                if segment.writer is not None:
                    found.add(segment.writer)
                if access.write:
                    found.update(segment.readers)
        for access in accesses:
            if access.start < access.end:
                self._record(step, access)
        found.discard(step)
        return tuple(sorted(found))

    def _record(self, step: int, access: Access) -> None:
        storage = self._storages.setdefault(access.storage, _Storage())
        start, end = access.start, access.end
        if len(storage.segments) == 1 and storage.starts[0] == start and storage.segments[0].end == end:
            whole = storage.segments[0]  # the common case: a whole buffer, touched whole before
            if access.write:
                whole.writer, whole.readers = step, []
            elif not whole.readers or whole.readers[-1] != step:
                whole.readers.append(step)
            return
        storage.split(start)
        storage.split(end)
        first, last = storage.span(start, end)
        if access.write:
            del storage.segments[first:last]
            del storage.starts[first:last]
            storage.segments.insert(first, _Segment(start, end, step, []))
            storage.starts.insert(first, start)
            return
        position, at = first, start
        while at < end:
            segment = storage.segments[position] if position < len(storage.segments) else None
            if segment is None or segment.start > at:  # a gap nobody has touched: a new segment of readers
                gap_end = end if segment is None else min(end, segment.start)
                storage.segments.insert(position, _Segment(at, gap_end, None, [step]))
                storage.starts.insert(position, at)
                at = gap_end
            else:
                if not segment.readers or segment.readers[-1] != step:
                    segment.readers.append(step)
                at = segment.end
            position += 1


def dependencies(steps: Sequence[Sequence[Access]]) -> list[tuple[int, ...]]:
    """For each step (by position), the earlier positions it must wait for."""
    ranges = ByteRanges()
    return [ranges.add(position, accesses) for position, accesses in enumerate(steps)]


def levels(dependencies_of: Sequence[Sequence[int]]) -> list[int]:
    """Each step's level: one more than the highest level among the steps it waits for (0 without any)."""
    found: list[int] = []
    for waits in dependencies_of:
        found.append(1 + max((found[d] for d in waits), default=-1))
    return found


class Scheduled(Protocol):
    """A step as the schedule sees it: the bytes it touches, and where the schedule puts it."""

    id: int
    accesses: tuple[Access, ...]
    dependencies: tuple[int, ...]
    level: int


S = TypeVar("S", bound=Scheduled)


def schedule(steps: Sequence[S]) -> list[list[S]]:
    """Each step's dependencies on the latest conflicting steps (``ByteRanges``), then the steps by level:
    one more than the highest level waited for."""
    ranges = ByteRanges()
    level_of: dict[int, int] = {}
    by_level: dict[int, list[S]] = {}
    for step in steps:
        step.dependencies = ranges.add(step.id, step.accesses)
        step.level = level_of[step.id] = 1 + max((level_of[d] for d in step.dependencies), default=-1)
        by_level.setdefault(step.level, []).append(step)
    return [by_level[k] for k in sorted(by_level)]
