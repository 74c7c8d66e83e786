"""svod's CPU thread team: every id of a launch runs once, whoever claims it; launches from several threads at
once, more workers than threads, a child made by fork, a team whose threads never start, a team paused after a
launch that was slower on it than on the launching thread alone; and an idle team sleeps."""

from __future__ import annotations

import ctypes
import multiprocessing
import platform
import threading
import time

import llvmlite.binding as llvm
import numpy as np
import pytest

import svod
from svod import workloads
from svod.backends.cpu_team import (
    FUTEX_CALLS,
    PAUSE,
    RUN_TYPE,
    SOLO_UNTIL,
    STATE_WORDS,
    TEAM_FIRST_PAUSE_SECONDS,
    TEAM_MOST_PAUSE_SECONDS,
    ThreadTeam,
    _target_machine,
    _team_ir,
    thread_team,
)
from svod.errors import VariableError
from tests.helpers import cpu_device

ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)

pytestmark = pytest.mark.skipif(not thread_team().parallel, reason=f"no thread team here: {thread_team().error}")


class _Recorder:
    """An entry written in Python: each call records (the launch's argument, the id) and, for ``slow`` ids,
    sleeps a little so that other threads claim ids meanwhile."""

    def __init__(self, slow: frozenset[int] = frozenset(), team: ThreadTeam | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()
        self._slow = slow
        self.entry = ENTRY(self._call)
        self.run = RUN_TYPE((team or thread_team()).addresses()[0])

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
    _end_pause(thread_team())
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


def _end_pause(team: ThreadTeam) -> None:
    """Let the next launch run on the team whatever the launches before it found."""
    team._state[SOLO_UNTIL] = 0
    team._state[PAUSE] = 0


def test_a_team_whose_threads_never_start_runs_every_id_on_the_launching_thread():
    """A team of its own that starts no thread: a launch does not wait for one, and its launching thread runs
    every id, once."""
    team = ThreadTeam()
    recorder = _Recorder(team=team)
    for tag, workers in ((1, 8), (2, 3), (3, 1)):
        recorder.launch(tag, workers)
    assert sorted(recorder.calls) == [(tag, i) for tag, workers in ((1, 8), (2, 3), (3, 1)) for i in range(workers)]
    assert recorder.threads == {threading.current_thread().name}


def test_a_launch_whose_every_id_the_launching_thread_ran_pauses_nothing():
    """No worker took an id (here none has started; on a quiet machine one asleep wakes too late for a launch
    of a few microseconds): the launch waited for no one, so it is not judged, and the next launch, however
    long, gets the team. A pause it started made every launch in it run on one thread."""
    team = ThreadTeam()
    recorder = _Recorder(slow=frozenset({1}), team=team)
    for tag in range(1, 6):
        recorder.launch(tag, 4)
    assert (team._state[PAUSE], team._state[SOLO_UNTIL]) == (0, 0)
    assert len(recorder.calls) == 20


def test_a_paused_team_leaves_every_id_to_the_launching_thread():
    """While the team is paused its threads claim nothing: the launching thread runs every id, once, and so
    does a kernel launched on three threads, with the one-thread result; once the pause ends they take part
    again."""
    team = thread_team()
    team.grow(2)
    team._state[SOLO_UNTIL] = 1 << 62
    try:
        recorder = _Recorder(slow=frozenset({0}))
        for tag in range(1, 11):
            recorder.launch(tag, 8)
        assert sorted(recorder.calls) == [(tag, i) for tag in range(1, 11) for i in range(8)]
        assert recorder.threads == {threading.current_thread().name}
        x = np.random.default_rng(2).standard_normal((1 << 20) + 3).astype(np.float32)
        out = np.zeros_like(x)
        svod.run(SAXPY, [out, x, x], device=cpu_device(3, "llvm"), n=x.size)
        np.testing.assert_array_equal(out, x * np.float32(2.5) + x)
    finally:
        _end_pause(team)
    helped = threading.Event()
    launcher = threading.current_thread().name

    def wait_for_help(_: int | None, ident: int) -> None:
        """The launching thread's ids wait (a minute at most) until a team thread has run one."""
        if threading.current_thread().name == launcher:
            helped.wait(timeout=60)
        else:
            helped.set()

    entry = ENTRY(wait_for_help)
    RUN_TYPE(team.addresses()[0])(ctypes.cast(entry, ctypes.c_void_p), 0, 8)
    assert helped.is_set()


VERDICT_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
MS = 1_000_000


def test_a_launch_slower_on_the_team_than_alone_pauses_it_for_longer_each_time():
    """The team's verdict on a launch, given its times (a state of its own, no clock): slower on the team than
    on the launching thread alone, and launches skip the team for a pause that doubles with each such
    launch, to a most; one not slower halves the pause the next slow launch starts from, and a short one ends
    it."""
    module = llvm.parse_assembly(_team_ir(FUTEX_CALLS[platform.machine().lower()]))
    engine = llvm.create_mcjit_compiler(module, _target_machine())
    engine.finalize_object()
    verdict = VERDICT_TYPE(engine.get_function_address("svod_team_verdict"))
    state = (ctypes.c_int64 * STATE_WORDS)()
    first, most = round(TEAM_FIRST_PAUSE_SECONDS * 1e9), round(TEAM_MOST_PAUSE_SECONDS * 1e9)
    pauses = []
    for now in range(100 * MS, 100 * MS + 12, 1):  # each launch twice as long on the team as alone
        verdict(ctypes.addressof(state), now, 2 * MS, MS)
        pauses.append(state[PAUSE])
        assert state[SOLO_UNTIL] == now + state[PAUSE]
    assert pauses[:3] == [first, 2 * first, 4 * first] and pauses[-1] == most and max(pauses) == most
    until = state[SOLO_UNTIL]
    verdict(ctypes.addressof(state), 200 * MS, MS, MS)  # as fast as alone: not slower
    assert (state[PAUSE], state[SOLO_UNTIL]) == (most // 2, until)
    verdict(ctypes.addressof(state), 300 * MS, 3 * MS, 2 * MS)
    assert (state[PAUSE], state[SOLO_UNTIL]) == (most, 300 * MS + most)
    while state[PAUSE]:
        verdict(ctypes.addressof(state), 400 * MS, MS, 5 * MS)
    verdict(ctypes.addressof(state), 500 * MS, 2, 1)
    assert (state[PAUSE], state[SOLO_UNTIL]) == (first, 500 * MS + first)
    verdict(ctypes.addressof(state), 600 * MS, 1, 2)
    assert state[PAUSE] == 0


def _finishes(work, seconds: float = 120.0) -> None:
    """Run ``work`` on a thread of its own and fail, rather than hang, if it has not returned in ``seconds``."""
    failed: list[BaseException] = []

    def body() -> None:
        try:
            work()
        except BaseException as err:  # the test's own assertion, raised again on the test's thread
            failed.append(err)

    runner = threading.Thread(target=body, daemon=True)
    runner.start()
    runner.join(timeout=seconds)
    assert not runner.is_alive(), f"still running after {seconds} s: hung"
    if failed:
        raise failed[0]


def test_a_launch_that_outlasts_the_pause_shares_its_ids_left_with_the_team():
    """A launch that starts while the team is paused runs alone until the pause ends, then the team takes part
    in the ids left: the launching thread's first id returns only once the pause is over, and its later ids
    wait (a minute at most) until a team thread has run one. Every id runs once."""
    team = thread_team()
    team.grow(2)
    helped = threading.Event()
    ran: list[tuple[str, int]] = []
    lock = threading.Lock()

    def launch() -> None:
        launcher = threading.current_thread().name
        until = time.monotonic_ns() + 20 * MS

        def entry(_: int | None, ident: int) -> None:
            if threading.current_thread().name != launcher:
                helped.set()
            elif ident == 0:
                while time.monotonic_ns() <= until:  # CLOCK_MONOTONIC, the team's clock
                    time.sleep(0.005)
            else:
                helped.wait(timeout=60)
            with lock:
                ran.append((threading.current_thread().name, ident))

        callback = ENTRY(entry)
        team._state[SOLO_UNTIL] = until
        try:
            RUN_TYPE(team.addresses()[0])(ctypes.cast(callback, ctypes.c_void_p), 0, 16)
        finally:
            _end_pause(team)

    _finishes(launch)
    assert sorted(ident for _, ident in ran) == list(range(16))
    assert helped.is_set() and ran[0][1] == 0


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_kernels_on_the_team_give_numpys_values_paused_or_not(threads):
    """saxpy and a sum on 1, 2 and 3 threads, over sizes whose chunks do not divide evenly (1, primes, a
    million and three), give numpy's values: on a team awake, on one paused past the launch, and on one whose
    pause ends at once (a launch that may start alone and share its ids left). None hangs; no elements at all
    is refused at the bind."""
    team = thread_team()
    device = cpu_device(threads, "llvm")
    rng = np.random.default_rng(threads)

    def run_all() -> None:
        for pause_ns in (0, 1 << 62, 1):
            for size in (1, 2, 3, 97, 4099, (1 << 20) + 3):
                x = rng.standard_normal(size).astype(np.float32)
                out, summed = np.zeros_like(x), np.zeros(1, np.float32)
                team._state[SOLO_UNTIL] = time.monotonic_ns() + pause_ns if pause_ns else 0
                try:
                    svod.run(SAXPY, [out, x, x], device=device, n=size)
                    svod.run(workloads.total(size), [summed, x], device=device)
                finally:
                    _end_pause(team)
                np.testing.assert_array_equal(out, x * np.float32(2.5) + x)
                np.testing.assert_allclose(summed[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)

    _finishes(run_all)
    empty = np.zeros(0, np.float32)
    with pytest.raises(VariableError, match="n=0"):
        svod.run(SAXPY, [empty, empty, empty], device=device, n=0)


def test_launches_while_pauses_come_and_go_run_every_id_once():
    """Launches of changing sizes while another thread keeps starting short pauses: a launch may start on the
    team, start alone and hand its ids left to the team when the pause ends, or run alone throughout; in each
    every id runs once, with its own argument, and none hangs."""
    team = thread_team()
    team.grow(3)
    recorder = _Recorder(slow=frozenset({1}))
    sizes = [(tag, (2, 9, 3, 64, 1, 17)[tag % 6]) for tag in range(1, 121)]
    stop = threading.Event()

    def pauses() -> None:
        while not stop.is_set():
            team._state[SOLO_UNTIL] = time.monotonic_ns() + MS
            time.sleep(0.0015)

    def launches() -> None:
        pauser = threading.Thread(target=pauses, daemon=True)
        pauser.start()
        try:
            for tag, workers in sizes:
                recorder.launch(tag, workers)
        finally:
            stop.set()
            pauser.join(timeout=60)
            _end_pause(team)

    _finishes(launches)
    assert sorted(recorder.calls) == [(tag, i) for tag, workers in sizes for i in range(workers)]
