"""Dependencies from byte ranges: the latest conflicting steps, whose closure is every conflicting pair."""

from __future__ import annotations

import random

import pytest

from svod.runtime.schedule import Access, dependencies, levels


def _random_steps(seed: int, count: int) -> list[list[Access]]:
    rng = random.Random(seed)
    steps = []
    for _ in range(count):
        accesses = []
        for _ in range(rng.randint(1, 3)):
            start = rng.randrange(0, 64)
            accesses.append(Access(rng.randrange(3), start, start + rng.randint(0, 24), rng.random() < 0.5))
        steps.append(accesses)
    return steps


@pytest.mark.parametrize("seed", range(20))
def test_closure_of_the_latest_conflicts_is_every_conflict(seed):
    steps = _random_steps(seed, 60)
    found = dependencies(steps)
    for j, waits in enumerate(found):
        for i in waits:
            assert i < j and any(a.conflicts(b) for a in steps[j] for b in steps[i])
    reach: list[set[int]] = []
    for waits in found:
        closure = set(waits)
        for i in waits:
            closure |= reach[i]
        reach.append(closure)
    for j in range(len(steps)):
        for i in range(j):
            if any(a.conflicts(b) and a.start < a.end and b.start < b.end for a in steps[j] for b in steps[i]):
                assert i in reach[j], (i, j)
    level = levels(found)
    assert all(level[j] > level[i] for j, waits in enumerate(found) for i in waits)


def test_a_chain_waits_for_its_predecessor_only_and_readers_gather():
    whole = [Access(0, 0, 100, True)]
    assert dependencies([whole] * 4) == [(), (0,), (1,), (2,)]
    read = [Access(0, 0, 100, False)]
    assert dependencies([whole, read, read, whole]) == [(), (0,), (0,), (0, 1, 2)]
    # a write of the middle splits the first writer's range; a read of everything meets both
    middle = [Access(0, 40, 60, True)]
    assert dependencies([whole, middle, read, [Access(0, 0, 10, True)]]) == [(), (0,), (0, 1), (0, 2)]
