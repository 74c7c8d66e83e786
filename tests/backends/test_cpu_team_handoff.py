"""A launch that holds the paused team and outlasts the pause hands its ids left to the team: the pause ending
at every id of the launch (the first, the last but one, the last), launches of fewer ids than threads and of
more, every id runs exactly once with its own launch's argument; several Python threads launching at once
over pauses that end mid-launch; and kernels' values against numpy when the pause ends mid-launch."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import svod
from svod import KernelBuilder, dtypes, workloads
from svod.backends.cpu_team import RUN_TYPE, SOLO_UNTIL, ThreadTeam, thread_team
from svod.errors import IndexOutOfBoundsError
from svod.ir import UOp
from tests.backends.test_cpu_team import ENTRY, SAXPY, _end_pause, _finishes
from tests.helpers import cpu_device

pytestmark = pytest.mark.skipif(not thread_team().parallel, reason=f"no thread team here: {thread_team().error}")

MS = 1_000_000


class _Counter:
    """An entry counting each (argument, id) it runs; on the launching thread, id ``late`` waits until the
    pause set for the launch is over, so that the launch hands the ids after it to the team."""

    def __init__(self, team: ThreadTeam) -> None:
        self.counts: dict[tuple[int, int], int] = {}
        self.lock = threading.Lock()
        self.late: dict[int, tuple[int, int]] = {}  # argument: (id, the pause's end)
        self.entry = ENTRY(self._call)
        self.run = RUN_TYPE(team.addresses()[0])

    def _call(self, data: int | None, ident: int) -> None:
        tag = data or 0
        late = self.late.get(tag)
        if late is not None and late[0] == ident:
            while time.monotonic_ns() <= late[1]:
                time.sleep(0.001)
        with self.lock:
            self.counts[tag, ident] = self.counts.get((tag, ident), 0) + 1


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_pause_ending_at_each_id_runs_every_id_once(threads):
    """For launches of 1 to 9 ids on a team of ``threads``, the pause ends while the launching thread runs
    each id in turn (the last included: nothing is left to hand over): every id runs once."""
    team = thread_team()
    team.grow(threads)
    counter = _Counter(team)
    expected: dict[tuple[int, int], int] = {}

    def launches() -> None:
        tag = 0
        for workers in range(1, 10):
            for late in range(workers):
                tag += 1
                until = time.monotonic_ns() + 5 * MS
                counter.late[tag] = (late, until)
                team._state[SOLO_UNTIL] = until
                try:
                    counter.run(ctypes.cast(counter.entry, ctypes.c_void_p), tag, workers)
                finally:
                    _end_pause(team)
                expected.update({(tag, i): 1 for i in range(workers)})

    _finishes(launches)
    assert counter.counts == expected


def test_launches_from_several_threads_over_pauses_that_end_mid_launch_run_every_id_once():
    """Four Python threads launching at once while pauses end mid-launch: one holds the team (and may hand over
    its ids left), the others run theirs alone; every id of every launch runs once."""
    team = thread_team()
    team.grow(3)
    counter = _Counter(team)
    expected: dict[tuple[int, int], int] = {}
    lock = threading.Lock()

    def launcher(base: int) -> None:
        for k in range(40):
            tag, workers = base + k, (1, 2, 5, 17)[k % 4]
            until = time.monotonic_ns() + 2 * MS
            counter.late[tag] = (k % workers, until)
            team._state[SOLO_UNTIL] = until
            counter.run(ctypes.cast(counter.entry, ctypes.c_void_p), tag, workers)
            with lock:
                expected.update({(tag, i): 1 for i in range(workers)})

    def all_launchers() -> None:
        runners = [threading.Thread(target=launcher, args=(1000 * (t + 1),)) for t in range(4)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()

    try:
        _finishes(all_launchers)
    finally:
        _end_pause(team)
    assert counter.counts == expected


@pytest.mark.parametrize("threads", [2, 3])
def test_kernels_whose_pause_ends_mid_launch_give_numpys_values(threads):
    """saxpy and a sum (its partials per worker, combined after) over sizes 1, primes and 2**20 + 3, with the
    pause ending a little after each launch starts, repeated: numpy's values every time."""
    team = thread_team()
    device = cpu_device(threads, "llvm")
    rng = np.random.default_rng(threads)

    def repeats() -> None:
        for repeat in range(12):
            for size in (1, 2, 3, 97, 4099, 65537, (1 << 20) + 3):
                x = rng.standard_normal(size).astype(np.float32)
                out, summed = np.zeros_like(x), np.zeros(1, np.float32)
                team._state[SOLO_UNTIL] = time.monotonic_ns() + (repeat % 4) * 50_000
                try:
                    svod.run(SAXPY, [out, x, x], device=device, n=size)
                    team._state[SOLO_UNTIL] = time.monotonic_ns() + (repeat % 3) * 30_000
                    svod.run(workloads.total(size), [summed, x], device=device)
                finally:
                    _end_pause(team)
                np.testing.assert_array_equal(out, x * np.float32(2.5) + x)
                np.testing.assert_allclose(summed[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)

    _finishes(repeats, 300.0)


def _histogram(bins: int, n: int) -> UOp:
    k = KernelBuilder(f"histogram_{bins}")
    counts, values = k.buffer(dtypes.int32, bins), k.buffer(dtypes.int32, n)
    k.atomic_add(counts[values[k.range(n)]], 1)
    return k.build()


@pytest.mark.parametrize("compiler", ["llvm", "clang"])
@pytest.mark.parametrize("threads", [2, 3])
def test_counts_kept_per_worker_add_up_when_the_pause_ends_mid_launch(threads, compiler):
    """A histogram whose workers count into private copies, combined at the end, over sizes 1, primes and
    2**20 + 3, its launches' pauses ending a little after they start: numpy's counts every time, and a count
    outside the buffer refused with its index whoever ran it."""
    team = thread_team()
    device = cpu_device(threads, compiler)

    def repeats() -> None:
        for repeat in range(6):
            for n, bins in ((1, 1), (7, 7), (1009, 7), (100_003, 251), ((1 << 20) + 3, 16)):
                values = np.random.default_rng(n + repeat).integers(0, bins, n).astype(np.int32)
                counts = np.full(bins, 3, np.int32)
                team._state[SOLO_UNTIL] = time.monotonic_ns() + (repeat % 3) * 40_000
                try:
                    svod.run(_histogram(bins, n), [counts, values], device=device)
                finally:
                    _end_pause(team)
                np.testing.assert_array_equal(counts, 3 + np.bincount(values, minlength=bins))
            values = np.zeros(5000, np.int32)
            values[4321 - repeat] = 16
            team._state[SOLO_UNTIL] = time.monotonic_ns() + repeat * 20_000
            try:
                with pytest.raises(IndexOutOfBoundsError) as info:
                    svod.run(_histogram(16, 5000), [np.zeros(16, np.int32), values], device=device)
            finally:
                _end_pause(team)
            assert info.value.slot == 0 and info.value.index == 16

    _finishes(repeats, 300.0)
