"""Fixtures the front end's tests share."""

from __future__ import annotations

import pytest

from svod.frontend.jit_prepared import Prepared


@pytest.fixture
def general_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each run of a plan through the general binding (``Prepared.run``), which a dispatched call skips."""
    runs: list[int] = []
    general = Prepared.run

    def counted(self, *args, **keywords):  # type: ignore[no-untyped-def]
        runs.append(1)
        return general(self, *args, **keywords)

    monkeypatch.setattr(Prepared, "run", counted)
    return runs
