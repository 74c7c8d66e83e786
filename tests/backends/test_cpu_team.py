"""svod's CPU thread team: every id of a launch runs once, whoever claims it; launches from several threads at
once, more workers than threads, a child made by fork; and an idle team sleeps."""

from __future__ import annotations

import ctypes
import multiprocessing
import threading
import time

import numpy as np
import pytest

import svod
from svod import workloads
from svod.backends.cpu_team import RUN_TYPE, thread_team
from tests.helpers import cpu_device

ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)

pytestmark = pytest.mark.skipif(not thread_team().parallel, reason=f"no thread team here: {thread_team().error}")


class _Recorder:
    """An entry written in Python: each call records (the launch's argument, the id) and, for ``slow`` ids,
    sleeps a little so that other threads claim ids meanwhile."""

    def __init__(self, slow: frozenset[int] = frozenset()) -> None:
        self.calls: list[tuple[int, int]] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()
        self._slow = slow
        self.entry = ENTRY(self._call)
        self.run = RUN_TYPE(thread_team().addresses()[0])

    def _call(self, data: int | None, ident: int) -> None:
        if ident in self._slow:
            time.sleep(0.002)
        with self._lock:
            self.calls.append((data or 0, ident))
            self.threads.add(threading.current_thread().name)

    def launch(self, tag: int, workers: int) -> None:
        self.run(ctypes.cast(self.entry, ctypes.c_void_p), tag, workers)


def test_every_id_of_a_launch_runs_once():
    """Ids 0 to n - 1 each run once, with the launch's argument, whether the team has fewer threads than the
    launch has workers (7 and 64 here) or more, in launches of changing sizes (a thread late to one launch
    must not claim ids of the next past that one's size); slow ids keep their thread busy, so others claim the
    rest."""
    thread_team().grow(3)
    recorder = _Recorder(slow=frozenset({0, 1}))
    sizes = [(tag, (2, 7, 3, 64, 2, 5)[tag % 6]) for tag in range(1, 61)]
    for tag, workers in sizes:
        recorder.launch(tag, workers)
    assert sorted(recorder.calls) == [(tag, i) for tag, workers in sizes for i in range(workers)]
    assert len(recorder.threads) > 1  # the team's threads took part, not only the launching thread


def test_launches_from_several_threads_at_once_each_run_every_id_once():
    """Four threads launching at once: one holds the team, the others run their ids in turn; every launch's
    ids run once, with its own argument."""
    thread_team().grow(2)
    recorder = _Recorder(slow=frozenset({2}))

    def launches(first: int) -> None:
        for tag in range(first, first + 25):
            recorder.launch(tag, 3)

    launchers = [threading.Thread(target=launches, args=(100 * k + 1,)) for k in range(4)]
    for launcher in launchers:
        launcher.start()
    for launcher in launchers:
        launcher.join(timeout=60)
    assert not any(launcher.is_alive() for launcher in launchers)
    tags = [100 * k + t for k in range(4) for t in range(1, 26)]
    assert sorted(recorder.calls) == sorted((tag, i) for tag in tags for i in range(3))


SAXPY = workloads.saxpy(1).steps[0].ast
"""``2.5 * x + y`` over a variable ``n``: a kernel spread over the team's workers."""


def _run_in_child(x: np.ndarray, results) -> None:
    out = np.zeros_like(x)
    svod.run(SAXPY, [out, x, x], device=cpu_device(3, "llvm"), n=x.size)
    results.put((out, sorted(t.name for t in threading.enumerate() if t.name.startswith("svod-team"))))


def test_a_child_made_by_fork_runs_threaded_kernels():
    """The parent's threads do not exist in a forked child: it starts threads of its own, and its launches
    give the parent's results."""
    x = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    parent = np.zeros_like(x)
    svod.run(SAXPY, [parent, x, x], device=cpu_device(3, "llvm"), n=x.size)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_run_in_child, args=(x, results))
    child.start()
    try:
        out, threads = results.get(timeout=60)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    np.testing.assert_allclose(parent, x * np.float32(2.5) + x, rtol=1e-6)
    np.testing.assert_array_equal(out, parent)
    assert threads == ["svod-team-1", "svod-team-2"]


def test_an_idle_team_sleeps():
    """After a launch the team stays awake a moment, then sleeps: half a second idle costs next to no CPU."""
    thread_team().grow(2)
    _Recorder().launch(1, 3)
    time.sleep(0.05)
    start = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - start < 0.05
