"""Failure flags: the one-element int32 buffers a plan's steps set where the data makes the run fail (a singular
matrix's zero pivot found by ``np.linalg.solve`` of a jitted function, ``svod.frontend.linalg``). The plan reads
each after every run, its own and a bundle's (``svod.load_plan``) alike, clears what is set, and raises
``LinAlgError``: a plan taken out of its function, replayed, raises as the function's call does, not returning
the inf and NaN the factors hold. A run an exception stops clears them too, raising its own exception. One
read of four bytes a flag a run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.device import Buffer
from svod.errors import BundleError, LinAlgError

_CLEAR = np.zeros(1, np.int32)


@dataclass(frozen=True)
class FailureFlag:
    """Plan buffer ``buffer`` (int32, one element): 0, or the number a failure of kernel ``kernel`` (the
    function's name) recorded; ``message`` says what failed, ``{value}`` standing for that number."""

    buffer: int
    kernel: str
    message: str

    def manifest(self) -> dict[str, Any]:
        return {"buffer": self.buffer, "kernel": self.kernel, "message": self.message}

    @staticmethod
    def from_manifest(entry: Any, buffers: int, source: str) -> FailureFlag:
        """The flag of a bundle's manifest entry, checked: a plan of ``buffers`` buffers."""
        ok = (isinstance(entry, dict) and isinstance(entry.get("buffer"), int) and 0 <= entry["buffer"] < buffers
              and isinstance(entry.get("kernel"), str) and isinstance(entry.get("message"), str))
        if not ok:
            raise BundleError(f"plan bundle {source} has a malformed failure flag {entry!r}", stage="load",
                              value=source)
        return FailureFlag(entry["buffer"], entry["kernel"], entry["message"])


def failure(buffers: Sequence[Buffer], flags: Sequence[FailureFlag]) -> LinAlgError | None:
    """Read every flag of a run and clear those set (a flag left standing would fail the next run): the first
    set one's ``LinAlgError``, or None. Read before the run's other checks raise, so none is left standing."""
    failed: list[tuple[FailureFlag, int]] = []
    for flag in flags:
        value = int(buffers[flag.buffer].numpy()[0])
        if value:
            buffers[flag.buffer].copyin(_CLEAR)
            failed.append((flag, value))
    if not failed:
        return None
    flag, value = failed[0]
    return LinAlgError(flag.message.format(value=value), kernel=flag.kernel, stage="execute", value=value)
