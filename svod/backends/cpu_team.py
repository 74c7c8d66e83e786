"""The CPU thread team: the threads a multi-threaded CPU launch runs on.

A launch of ``n`` workers calls ``fn(job, id)`` once for each ``id < n``. The team is a few dozen lines of
LLVM IR, JIT-compiled once per process; its threads are started from Python and live in that native code
(the GIL released) for the life of the process. A launch publishes a ticket (its generation and ``n``), and
the launching thread and the team's threads claim its ids one at a time (a compare-and-swap on a word holding
the generation and the next id), each running the ids it claims, until none is left; the launch returns when
all ``n`` have run. An id runs once, and a launch never waits for a thread that has not claimed one: a
worker that has not got a core (another program's, or numpy's OpenBLAS threads spinning after a BLAS call)
does not hold it up, the launching thread runs that id itself, and ids past the team's threads too.

Between launches a thread waits for the next ticket, awake and then asleep on a futex: for
``TEAM_SPIN_SECONDS`` it checks and calls ``sched_yield``, which hands its core to any other thread that
wants it, and then sleeps (at once, where a yield gave the core away: ``TEAM_GIVEN_AWAY_SECONDS``). The
launching thread waits for the ids others run the same way. A sleeping worker costs a launch a wake, which on
a virtual machine whose idle cores halt costs many times an empty kernel's launch on awake workers. libgomp's
workers either spin without yielding (its default, for a while after every launch, which cost a kernel
launched after numpy's BLAS call its cores in turn) or sleep.

A launch the team made slower than its launching thread would have been alone (a worker that claimed a
chunk lost its core to another process, and the launch waited for that chunk) pauses the team: for
``TEAM_FIRST_PAUSE_SECONDS``, doubled by each such launch after a pause up to ``TEAM_MOST_PAUSE_SECONDS``,
launches run every id on the launching thread, and the workers, given no ticket, sleep and leave their cores to
whoever wants them. The launch after a pause tries the team again, and so does a launch still running alone
when the pause ends: its ids not yet run go to the team, so a pause falls between launches and never keeps a
long launch on one thread. So the team's size follows the cores that
are free: beside a process that keeps a core busy, launches stop waiting for a worker that lost its core, and
on a quiet machine a pause is rare and short. The launching thread judges by its own ids' time, per id, times
the launch's ids: a launch whose ids the team shared evenly is judged slower only where waking the team cost
more than the launching thread's whole share. A launch whose every id the launching thread ran itself is not
judged: no worker was waited for, only one asleep not yet awake (a launch of a few microseconds after an idle
moment), and a pause it started would leave the next launches, however long, on one thread.

Two launches at once (plans overlapping kernels on host threads, or a user's threads): one gets the team,
the other runs its ids one after another on its own thread, with the same results. A child made by ``fork``
starts threads of its own.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import string
import sys
import threading
from typing import Any

import llvmlite.binding as llvm

TEAM_SPIN_SECONDS = 200e-6
"""How long a thread of the team stays awake, yielding its core to anyone who wants it, after a launch
before it sleeps. Back-to-back launches (a plan's steps, a workload's kernels, a Python loop of calls) find
their workers awake; a team idle for longer costs nothing."""

TEAM_GIVEN_AWAY_SECONDS = 20e-6
"""A yield that returns this long after the one before gave the core to another thread (or the machine took it
away): the cores are busy, and a thread that waits sleeps at once rather than spin on a core someone wants. A
sleeper woken by the futex is run ahead of threads that have been running; a spinner that lost its core waits
for its turn (a small saxpy launched after numpy's matmul, whose OpenBLAS threads spin, waited several times
longer where the team spun on than where it slept)."""

TEAM_FIRST_PAUSE_SECONDS = 1e-3
"""How long launches run on the launching thread alone after a launch on the team that took longer than that
thread would have taken by itself (a worker that claimed a chunk lost its core to another process, and the
launch waited for it): long enough for a few launches to skip the team, short enough that a machine that
only looked busy costs little. Each such launch after a pause doubles it."""

TEAM_MOST_PAUSE_SECONDS = 64e-3
"""The longest pause: on a machine that stays busy, one launch in so long tries the team again, and one whose
team was not slower than its launching thread alone ends the pause."""

FUTEX_CALLS = {"x86_64": 202, "aarch64": 98}
"""Linux's ``futex`` system call number on each machine the team runs threads on."""

RUN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)
WORKER_TYPE = ctypes.CFUNCTYPE(None)

STATE_WORDS = 72
"""The team's state, in 64-bit words, each field that threads contend for on a cache line of its own:"""
TICKET, GENERATION, CLAIM, DONE, JOB, SLEEPERS, BUSY, SPIN, SOLO_UNTIL, PAUSE = 0, 8, 16, 24, 32, 40, 48, 56, 64, 65
"""``TICKET``: the last launch's generation (low 32 bits) and its worker count (high 32); ``GENERATION``:
its generation again, the futex word threads sleep on, stored after the ticket; ``CLAIM``: the generation
(high 32 bits) and the next id no one has claimed (low 32); ``DONE``: how many ids have run (the futex word
the launcher sleeps on); ``JOB``: the entry and its argument; ``SLEEPERS``: how many threads sleep on the
generation (low 32 bits) and whether the launcher sleeps on ``DONE`` (high); ``BUSY``: whether a launch holds
the team; ``SPIN``: ``TEAM_SPIN_SECONDS`` in nanoseconds; ``SOLO_UNTIL``: until when (``CLOCK_MONOTONIC``
nanoseconds) launches run on the launching thread alone, and ``PAUSE``: that pause's length (both only read
and written by the launch that holds the team)."""

_WAIT_IR = """
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
declare i32 @clock_gettime(i32, ptr)

define internal i64 @now() {
  %ts = alloca [2 x i64]
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %ns.p = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %ns.p
  %s.ns = mul i64 %s, 1000000000
  %t = add i64 %s.ns, %ns
  ret i64 %t
}

define internal void @wake(ptr %word, i64 %count) {
  %r = call i64 (i64, ...) @syscall(i64 $FUTEX, ptr %word, i64 129, i64 %count)
  ret void
}

; Return once the 32-bit %word is no longer %value: awake (yielding) for %spin ns, or until a yield gave the
; core away (returned more than $GIVEN_AWAY ns after the one before), then asleep on the futex, counted in
; %sleepers while it may sleep (the thread that changes %word wakes it if the count is not 0).
define internal void @wait_while(ptr %word, i32 %value, i64 %spin, ptr %sleepers) {
entry:
  %start = call i64 @now()
  br label %awake
awake:
  %last = phi i64 [ %start, %entry ], [ %t, %yield ]
  %v = load atomic i32, ptr %word acquire, align 4
  %same = icmp eq i32 %v, %value
  br i1 %same, label %clock, label %done
clock:
  %t = call i64 @now()
  %spent = sub i64 %t, %start
  %more = icmp slt i64 %spent, %spin
  %gap = sub i64 %t, %last
  %alone = icmp slt i64 %gap, $GIVEN_AWAY
  %keep = and i1 %more, %alone
  br i1 %keep, label %yield, label %asleep
yield:
  %y = call i32 @sched_yield()
  br label %awake
asleep:
  %a = atomicrmw add ptr %sleepers, i32 1 seq_cst
  %v2 = load atomic i32, ptr %word seq_cst, align 4
  %still = icmp eq i32 %v2, %value
  br i1 %still, label %sleep, label %woken
sleep:
  %v64 = zext i32 %value to i64
  %r = call i64 (i64, ...) @syscall(i64 $FUTEX, ptr %word, i64 128, i64 %v64, ptr null)
  br label %woken
woken:
  %b = atomicrmw sub ptr %sleepers, i32 1 seq_cst
  %v3 = load atomic i32, ptr %word acquire, align 4
  %again = icmp eq i32 %v3, %value
  br i1 %again, label %asleep, label %done
done:
  ret void
}
"""

_TEAM_IR = """
@svod_team_state = global [$WORDS x i64] zeroinitializer, align 64

define void @svod_team_entry(ptr %job, i64 %id) nounwind {
  %kernel = load ptr, ptr %job
  %bufs.p = getelementptr ptr, ptr %job, i64 1
  %bufs = load ptr, ptr %bufs.p
  %vars.p = getelementptr ptr, ptr %job, i64 2
  %vars = load ptr, ptr %vars.p
  call void %kernel(ptr %bufs, ptr %vars, i64 %id)
  ret void
}

; Claim ids of launch %gen, run each, count it done; return when no id of %gen is left to claim, with how many
; this thread ran. The last to finish wakes the launcher if it sleeps.
define internal i32 @take_ids(ptr %state, i32 %gen, i32 %workers) {
entry:
  %claim.p = getelementptr i64, ptr %state, i64 $CLAIM
  %done.p = getelementptr i64, ptr %state, i64 $DONE
  %fn.p = getelementptr i64, ptr %state, i64 $JOB
  %data.p = getelementptr i64, ptr %state, i64 $JOB_DATA
  %sleepers.p = getelementptr i64, ptr %state, i64 $SLEEPERS
  %launcher.p = getelementptr i32, ptr %sleepers.p, i64 1
  %first = load atomic i64, ptr %claim.p acquire, align 8
  br label %claim
claim:
  %word = phi i64 [ %first, %entry ], [ %seen, %lost ], [ %again, %finished ]
  %ran = phi i32 [ 0, %entry ], [ %ran, %lost ], [ %ran.next, %finished ]
  %word.gen.64 = lshr i64 %word, 32
  %word.gen = trunc i64 %word.gen.64 to i32
  %ours = icmp eq i32 %word.gen, %gen
  %id.32 = trunc i64 %word to i32
  %left = icmp ult i32 %id.32, %workers
  %open = and i1 %ours, %left
  br i1 %open, label %take, label %done
take:
  %next = add i64 %word, 1
  %swap = cmpxchg ptr %claim.p, i64 %word, i64 %next acq_rel acquire
  %seen = extractvalue { i64, i1 } %swap, 0
  %won = extractvalue { i64, i1 } %swap, 1
  br i1 %won, label %run, label %lost
lost:
  br label %claim
run:
  %fn = load ptr, ptr %fn.p, align 8
  %data = load ptr, ptr %data.p, align 8
  %id = zext i32 %id.32 to i64
  call void %fn(ptr %data, i64 %id)
  %before = atomicrmw add ptr %done.p, i32 1 seq_cst
  %count = add i32 %before, 1
  %all = icmp eq i32 %count, %workers
  br i1 %all, label %tell, label %finished
tell:
  %waiting = load atomic i32, ptr %launcher.p seq_cst, align 4
  %asleep = icmp ne i32 %waiting, 0
  br i1 %asleep, label %wake, label %finished
wake:
  call void @wake(ptr %done.p, i64 1)
  br label %finished
finished:
  %ran.next = add i32 %ran, 1
  %again = load atomic i64, ptr %claim.p acquire, align 8
  br label %claim
done:
  ret i32 %ran
}

define void @svod_team_worker() {
entry:
  %state = getelementptr i64, ptr @svod_team_state, i64 0
  %ticket.p = getelementptr i64, ptr %state, i64 $TICKET
  %gen.p = getelementptr i64, ptr %state, i64 $GENERATION
  %sleepers.p = getelementptr i64, ptr %state, i64 $SLEEPERS
  %spin.p = getelementptr i64, ptr %state, i64 $SPIN
  %first = load atomic i64, ptr %ticket.p acquire, align 8
  %first.gen = trunc i64 %first to i32
  br label %wait
wait:
  %seen = phi i32 [ %first.gen, %entry ], [ %seen, %read ], [ %gen, %got ]
  %spin = load atomic i64, ptr %spin.p monotonic, align 8
  call void @wait_while(ptr %gen.p, i32 %seen, i64 %spin, ptr %sleepers.p)
  br label %read
read:
  %ticket = load atomic i64, ptr %ticket.p acquire, align 8
  %gen = trunc i64 %ticket to i32
  %new = icmp ne i32 %gen, %seen
  br i1 %new, label %got, label %wait
got:
  %workers.64 = lshr i64 %ticket, 32
  %workers = trunc i64 %workers.64 to i32
  call i32 @take_ids(ptr %state, i32 %gen, i32 %workers)
  br label %wait
}

; After a launch on the team that took %took ns where the launching thread alone would have taken %alone (its
; own ids' time, per id, times the ids the team shared): slower, and the next launches run on the launching thread alone
; for twice the last such pause (at least $FIRST_PAUSE ns, at most $MOST_PAUSE); not slower, and the pause a
; next slow launch starts from halves.
define void @svod_team_verdict(ptr %state, i64 %now, i64 %took, i64 %alone) {
entry:
  %until.p = getelementptr i64, ptr %state, i64 $SOLO_UNTIL
  %pause.p = getelementptr i64, ptr %state, i64 $PAUSE
  %pause = load i64, ptr %pause.p, align 8
  %slower = icmp sgt i64 %took, %alone
  br i1 %slower, label %slow, label %fast
slow:
  %twice = shl i64 %pause, 1
  %short = icmp slt i64 %twice, $FIRST_PAUSE
  %least = select i1 %short, i64 $FIRST_PAUSE, i64 %twice
  %long = icmp sgt i64 %least, $MOST_PAUSE
  %next = select i1 %long, i64 $MOST_PAUSE, i64 %least
  store i64 %next, ptr %pause.p, align 8
  %until = add i64 %now, %next
  store i64 %until, ptr %until.p, align 8
  ret void
fast:
  %half = lshr i64 %pause, 1
  %small = icmp slt i64 %half, $FIRST_PAUSE
  %kept = select i1 %small, i64 0, i64 %half
  store i64 %kept, ptr %pause.p, align 8
  ret void
}

; Run ids 0 to %workers - 1 of %fn: on the team, or on this thread alone where another launch holds the team or
; the team is paused; a launch that holds the paused team and outlasts the pause shares its ids left with the team.
define void @svod_team_run(ptr %fn, ptr %data, i32 %workers) {
entry:
  %state = getelementptr i64, ptr @svod_team_state, i64 0
  %ticket.p = getelementptr i64, ptr %state, i64 $TICKET
  %gen.p = getelementptr i64, ptr %state, i64 $GENERATION
  %claim.p = getelementptr i64, ptr %state, i64 $CLAIM
  %done.p = getelementptr i64, ptr %state, i64 $DONE
  %fn.p = getelementptr i64, ptr %state, i64 $JOB
  %data.p = getelementptr i64, ptr %state, i64 $JOB_DATA
  %sleepers.p = getelementptr i64, ptr %state, i64 $SLEEPERS
  %launcher.p = getelementptr i32, ptr %sleepers.p, i64 1
  %busy.p = getelementptr i64, ptr %state, i64 $BUSY
  %spin.p = getelementptr i64, ptr %state, i64 $SPIN
  %until.p = getelementptr i64, ptr %state, i64 $SOLO_UNTIL
  %held = cmpxchg ptr %busy.p, i64 0, i64 1 acquire monotonic
  %won = extractvalue { i64, i1 } %held, 1
  br i1 %won, label %gate, label %alone
gate:
  %start = call i64 @now()
  %until = load i64, ptr %until.p, align 8
  %paused = icmp slt i64 %start, %until
  br i1 %paused, label %alone, label %publish
alone:
  %id = phi i64 [ 0, %entry ], [ 0, %gate ], [ %id.next, %alone.more ], [ %id.next, %alone.clock ]
  %holding = phi i1 [ false, %entry ], [ true, %gate ], [ %holding, %alone.more ], [ %holding, %alone.clock ]
  %limit = phi i64 [ 0, %entry ], [ %until, %gate ], [ %limit, %alone.more ], [ %limit, %alone.clock ]
  call void %fn(ptr %data, i64 %id)
  %id.next = add i64 %id, 1
  %all = zext i32 %workers to i64
  %more = icmp ult i64 %id.next, %all
  br i1 %more, label %alone.more, label %alone.end
alone.more:
  br i1 %holding, label %alone.clock, label %alone
alone.clock:
  %now = call i64 @now()
  %late = icmp sge i64 %now, %limit
  br i1 %late, label %publish, label %alone
alone.end:
  br i1 %holding, label %release, label %done
publish:
  %begin = phi i64 [ %start, %gate ], [ %now, %alone.clock ]
  %from = phi i64 [ 0, %gate ], [ %id.next, %alone.clock ]
  %from.32 = trunc i64 %from to i32
  store ptr %fn, ptr %fn.p, align 8
  store ptr %data, ptr %data.p, align 8
  store atomic i32 %from.32, ptr %done.p monotonic, align 4
  %old = load atomic i64, ptr %ticket.p monotonic, align 8
  %old.gen = trunc i64 %old to i32
  %gen = add i32 %old.gen, 1
  %gen.64 = zext i32 %gen to i64
  %claim.gen = shl i64 %gen.64, 32
  %claim = or i64 %claim.gen, %from
  store atomic i64 %claim, ptr %claim.p release, align 8
  %workers.64 = zext i32 %workers to i64
  %high = shl i64 %workers.64, 32
  %ticket = or i64 %high, %gen.64
  store atomic i64 %ticket, ptr %ticket.p release, align 8
  store atomic i32 %gen, ptr %gen.p seq_cst, align 4
  %sleeping = load atomic i32, ptr %sleepers.p seq_cst, align 4
  %asleep = icmp ne i32 %sleeping, 0
  br i1 %asleep, label %wake, label %own
wake:
  %others = sub i64 %workers.64, 1
  call void @wake(ptr %gen.p, i64 %others)
  br label %own
own:
  %own.start = call i64 @now()
  %ran = call i32 @take_ids(ptr %state, i32 %gen, i32 %workers)
  %own.end = call i64 @now()
  br label %join
join:
  %finished = load atomic i32, ptr %done.p acquire, align 4
  %over = icmp eq i32 %finished, %workers
  br i1 %over, label %judge, label %join.wait
join.wait:
  %spin = load atomic i64, ptr %spin.p monotonic, align 8
  call void @wait_while(ptr %done.p, i32 %finished, i64 %spin, ptr %launcher.p)
  br label %join
judge:
  %end = call i64 @now()
  %took = sub i64 %end, %begin
  %own.ns = sub i64 %own.end, %own.start
  %ran.64 = zext i32 %ran to i64
  %none = icmp eq i32 %ran, 0
  %per.by = select i1 %none, i64 1, i64 %ran.64
  %per = udiv i64 %own.ns, %per.by
  %shared = sub i64 %workers.64, %from
  %estimate = mul i64 %per, %shared
  %alone.ns = select i1 %none, i64 9223372036854775807, i64 %estimate
  %all.mine = icmp eq i64 %ran.64, %shared
  br i1 %all.mine, label %release, label %verdict
verdict:
  call void @svod_team_verdict(ptr %state, i64 %end, i64 %took, i64 %alone.ns)
  br label %release
release:
  store atomic i64 0, ptr %busy.p release, align 8
  br label %done
done:
  ret void
}
"""


def _team_ir(futex: int) -> str:
    """The team's code and state, calling ``futex`` by its number."""
    return string.Template(_WAIT_IR + _TEAM_IR).substitute(
        TICKET=TICKET, GENERATION=GENERATION, CLAIM=CLAIM, DONE=DONE, JOB=JOB, JOB_DATA=JOB + 1,
        SLEEPERS=SLEEPERS, BUSY=BUSY, SPIN=SPIN, WORDS=STATE_WORDS, FUTEX=futex,
        SOLO_UNTIL=SOLO_UNTIL, PAUSE=PAUSE, GIVEN_AWAY=round(TEAM_GIVEN_AWAY_SECONDS * 1e9),
        FIRST_PAUSE=round(TEAM_FIRST_PAUSE_SECONDS * 1e9), MOST_PAUSE=round(TEAM_MOST_PAUSE_SECONDS * 1e9))


def _target_machine() -> Any:
    """This machine's LLVM target, without the host's vector features: the team's code needs none."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_default_triple().create_target_machine(opt=2, reloc="pic", codemodel="default")


class ThreadTeam:
    """Runs a CPU kernel on ``n`` workers at once: the calling thread and ``n - 1`` of the team's threads,
    started the first time a launch needs them."""

    def __init__(self) -> None:
        self.error: str | None = None
        self._run: Any = None
        self._entry = 0
        self._threads = 0
        self._lock = threading.Lock()
        futex = FUTEX_CALLS.get(platform.machine().lower()) if sys.platform.startswith("linux") else None
        if futex is None:
            self.error = f"no thread team on {sys.platform} {platform.machine()}; CPU kernels run their workers " \
                         "one after another"
            return
        module = llvm.parse_assembly(_team_ir(futex))
        module.verify()
        engine = llvm.create_mcjit_compiler(module, _target_machine())
        engine.finalize_object()
        self._run = RUN_TYPE(engine.get_function_address("svod_team_run"))
        self._worker = WORKER_TYPE(engine.get_function_address("svod_team_worker"))
        self._entry = engine.get_function_address("svod_team_entry")
        self._state = (ctypes.c_int64 * STATE_WORDS).from_address(engine.get_global_value_address("svod_team_state"))
        self._state[SPIN] = round(TEAM_SPIN_SECONDS * 1e9)
        engine.detach()  # the code and its state live as long as the threads that use them: the process
        os.register_at_fork(after_in_child=self._forget_threads)

    @property
    def parallel(self) -> bool:
        return self._run is not None

    @property
    def threads(self) -> int:
        """How many threads the team has started (besides the launching thread)."""
        return self._threads

    def job(self, kernel: int, bufs: ctypes.Array[Any], vals: ctypes.Array[Any]) -> ctypes.Array[Any]:
        """The argument block the team's entry reads: the kernel, its buffers and its variables."""
        return (ctypes.c_void_p * 3)(kernel, ctypes.addressof(bufs), ctypes.addressof(vals))

    def run(self, job: ctypes.Array[Any], workers: int) -> None:
        """Run the ``workers`` ids of ``job`` on the team as it is: a launch has several ids (chunks) for each
        thread (``grow``, as the device's thread count says), and more ids do not start more threads."""
        self._run(self._entry, ctypes.addressof(job), workers)

    def addresses(self) -> tuple[int, int]:
        """``svod_team_run`` (entry, job, workers) and the team's entry, for native code that starts the team
        itself (zeros without a team). Ids past the team's threads run on the launching thread."""
        if self._run is None:
            return 0, 0
        return ctypes.cast(self._run, ctypes.c_void_p).value or 0, self._entry

    def grow(self, count: int) -> None:
        """Start threads until the team has ``count``. (A launch runs every id whatever the team's size: ids
        no thread claims, the launching thread runs.)"""
        if self._run is None:
            return
        with self._lock:
            while self._threads < count:
                self._threads += 1
                threading.Thread(target=self._worker, daemon=True, name=f"svod-team-{self._threads}").start()

    def _forget_threads(self) -> None:
        """In a child made by ``fork``: the parent's threads are not here, nor any launch it was running."""
        self._lock = threading.Lock()
        self._threads = 0
        for word in (BUSY, SLEEPERS, SOLO_UNTIL, PAUSE):
            self._state[word] = 0


@functools.cache
def thread_team() -> ThreadTeam:
    """The process's team, made on first use; its threads start with the first launch that needs them."""
    return ThreadTeam()
