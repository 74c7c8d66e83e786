"""The tape that records kernel calls for a gradient (``svod.Tape``), as the layers below the front end see it:
which one is recording, and the refusal of a run a tape cannot record (a plan, ``svod.run``; an ``@svod.jit``
call it records as its phases' kernel calls)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from svod.errors import GradientError


class Recorder(Protocol):
    """A tape recording: it runs each ``@svod.kernel`` call of its block itself (an ``@svod.jit`` call's phases
    too), keeping what the backward pass needs."""

    def record(self, kernel: Any, args: tuple[Any, ...], device: Any) -> None: ...

    def made(self, array: Any, uniform: bool) -> None:
        """``array`` is new, made by svod for the calls it is about to record (a jit function's temporary), every
        element one value where ``uniform``: nothing outside svod holds it, or writes it, until ``end`` hands it
        back."""

    def begin(self, pure: bool = True) -> None:
        """The calls recorded until ``end`` are one jit function's: no code of the caller's runs between them
        where ``pure`` (else a temporary's fill or a loop's bounds may call the caller's functions)."""

    def end(self, returned: tuple[Any, ...]) -> None:
        """The jit function's calls are over; ``returned`` (what it returns) is the caller's now."""


RECORDING: ContextVar[Recorder | None] = ContextVar("svod_recording", default=None)
"""The tape whose ``with`` block this thread is in, if any."""


@contextmanager
def unrecorded() -> Iterator[None]:
    """A block whose kernel calls no tape records: the tape's own runs (a recorded call, the backward pass, an
    array's digest)."""
    token = RECORDING.set(None)
    try:
        yield
    finally:
        RECORDING.reset(token)


def refuse_on_tape(what: str, *names: str) -> None:
    """Refuse to run ``what`` (a plan, a kernel AST; a format string of ``names``) inside a tape's
    block: the tape cannot record it, and a gradient that missed it would be wrong. (The words are put together
    only for the refusal: every call of a jit function and of ``svod.run`` asks.)"""
    if RECORDING.get() is not None:
        called = what.format(*names)
        raise GradientError(f"{called} runs inside a svod.Tape block, and a tape records @svod.kernel and "
                            "@svod.jit calls only; call it outside the block, or write the step as either",
                            stage="gradient", value=called)
