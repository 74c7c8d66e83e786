"""The CPU's native replay of a plan (``svod.device.PlanReplayer``): the plan's work dispatched from compiled
code, not a Python loop over steps.

::

    prepare:  steps, loops, launch sizes ──► words (an int64 array)  + a value table (int64 per slot)
    execute:  Python writes this run's variables into their slots, then one call of the dispatcher
              (compiled once per process from the LLVM IR below) walks the words:

    CALL  kernel bufs vars job workers n (index slot)*n   copy n values into the kernel's variables, call it
                                                          (on the thread team when workers > 1)
    LOOP  var start stop step exit                        enter a loop (or jump past it when it is empty)
    NEXT  var stop step body                              next turn, or fall through when done
    EVAL  dst n (kind arg)*n                              checked 64-bit arithmetic of a launch size or bound
    COPY  dst src nbytes                                  memmove
    TEST  address size mask target                        jump to target when the element of ``size`` bytes at
                                                          ``address`` has no bit of ``mask`` set (a condition
                                                          that does not hold)
    JUMP  target
    PY    callback arg                                    back into Python (steps run at once on host threads,
                                                          a step with no native form)
    END

Control flow on a value a kernel wrote is TEST and JUMP around the pieces' words, with no Python in between:

    branch        TEST ─► else, then's words, JUMP ─► end, else: otherwise's words, end:
    while         top: TEST ─► end, body's words, JUMP ─► top, end:
    loop, until   LOOP …, body's words, TEST ─► next, JUMP ─► past, next: NEXT …, past:

A TEST reads memory the words before it wrote: a CALL returns when its kernel has finished (on the thread team
too, whose launch returns when every worker's part is done), and a PY when its Python work has. Its address is
one of the words' addresses, repointed when an array is bound to its buffer for a run.

Slots hold constants, the run's variables, loop variables and evaluated expressions. Everything a step
needs is decided at prepare: the kernel's address, its argument arrays (its ``CpuLaunch``'s, so either
path may run it), its job block for the team, and which slots fill which of its variables. A dispatch
costs a few loads and an indirect call. Errors the words can meet (a launch size that is not positive or
overflows) stop the run and return the word's position, which Python turns into the error.

``NativeReplayer`` builds the words from a plan's work (``svod.device.ReplayItem``); the CPU's runtime
factories are replayers.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.binding as llvm

from svod.backends.cpu_builtins import HEAD, METH_NOARGS, Builtins, api, memory_follows_header
from svod.backends.cpu_calls import array_addresses
from svod.backends.cpu_host import host_target_machine
from svod.backends.cpu_runtime import CpuLaunch
from svod.backends.cpu_team import thread_team
from svod.device import (
    CallArray,
    HostCondition,
    KernelCall,
    PlanReplay,
    ReplayBranch,
    ReplayCopy,
    ReplayItem,
    ReplayKernel,
    ReplayLoop,
    ReplayWhile,
)
from svod.device.protocols import Runner, Site
from svod.errors import LaunchError, SvodError
from svod.ir import Ops, UOp, substitute

END, CALL, LOOP, NEXT, EVAL, COPY, PY, TEST, JUMP = range(9)
CONST, SLOT, ADD, SUB, MUL, IDIV, MOD, MAX, MIN, NEG, ABS = range(11)
_TOKENS = {Ops.ADD: ADD, Ops.SUB: SUB, Ops.MUL: MUL, Ops.IDIV: IDIV, Ops.MOD: MOD, Ops.MAX: MAX, Ops.MIN: MIN,
           Ops.NEG: NEG, Ops.ABS: ABS}
_PASS_THROUGH = (Ops.CAST, Ops.BITCAST, Ops.AFTER)
TESTED_SIZES = (1, 2, 4, 8)
"""The sizes in bytes of the elements a TEST reads (every scalar dtype's)."""
STACK = 32
"""The deepest expression the dispatcher evaluates (a launch size or loop bound is a few nodes)."""

DISPATCHER_OPT = 0
"""LLVM's code generation level for the dispatcher, compiled once per process when the first CPU plan is
prepared: level 0 compiles in a fraction of level 3's time and dispatches a plan of tiny kernels about as
fast as level 2."""

BAD_OP, NON_POSITIVE, ARITHMETIC, CALLBACK = 1, 2, 3, 4
CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
RUN_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)


def _word(ip: str, k: int, name: str) -> str:
    return f"  %{name}.p = getelementptr i64, ptr %{ip}, i64 {k}\n  %{name} = load i64, ptr %{name}.p\n"


def _slot_load(slot: str, name: str) -> str:
    return f"  %{name}.p = getelementptr i64, ptr %vals, i64 %{slot}\n  %{name} = load i64, ptr %{name}.p\n"


def _fail(label: str, kind: int, detail: str = "0") -> str:
    return (f"{label}:\n  store i64 {kind}, ptr %err.kind\n  store i64 {detail}, ptr %err.detail\n"
            f"  %{label}.r = add i64 %pc, 1\n  ret i64 %{label}.r\n")


def _binary(label: str, body: str) -> str:
    return f"{label}:\n{body}  br label %eval.push\n"


def _test_load(size: int) -> str:
    """A TEST's load of an element of ``size`` bytes, as ``%t.v<size>``: 64 bits, zero-extended."""
    if size == 8:
        return "test.8:\n  %t.v8 = load i64, ptr %t.p, align 1\n  br label %test.have\n"
    bits = 8 * size
    return (f"test.{size}:\n  %t.b{size} = load i{bits}, ptr %t.p, align 1\n"
            f"  %t.v{size} = zext i{bits} %t.b{size} to i64\n  br label %test.have\n")


_IR = (
    """
declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)
declare {i64, i1} @llvm.sadd.with.overflow.i64(i64, i64)
declare {i64, i1} @llvm.ssub.with.overflow.i64(i64, i64)
declare {i64, i1} @llvm.smul.with.overflow.i64(i64, i64)

define i64 @svod_plan_run(ptr %frame) {
entry:
  %code = load ptr, ptr %frame
  %vals.p = getelementptr i64, ptr %frame, i64 1
  %vals = load ptr, ptr %vals.p
  %stack = alloca [32 x i64]
  %pcp = alloca i64
  %spp = alloca i64
  %kp = alloca i64
  %resp = alloca i64
  %e.ovp = alloca i1
  store i64 0, ptr %pcp
  %team.run.p = getelementptr i64, ptr %frame, i64 2
  %team.run = load ptr, ptr %team.run.p
  %team.entry.p = getelementptr i64, ptr %frame, i64 3
  %team.entry = load ptr, ptr %team.entry.p
  %err.kind = getelementptr i64, ptr %frame, i64 4
  %err.detail = getelementptr i64, ptr %frame, i64 5
  br label %dispatch

dispatch:
  %pc = load i64, ptr %pcp
  %ip = getelementptr i64, ptr %code, i64 %pc
  %op = load i64, ptr %ip
  switch i64 %op, label %bad [ i64 0, label %end
                               i64 1, label %call
                               i64 2, label %loop
                               i64 3, label %next
                               i64 4, label %eval
                               i64 5, label %copy
                               i64 6, label %py
                               i64 7, label %test
                               i64 8, label %jump ]

end:
  ret i64 0
"""
    + _fail("bad", BAD_OP)
    + """
call:
"""
    + _word("ip", 1, "c.fn") + _word("ip", 2, "c.bufs") + _word("ip", 3, "c.vars") + _word("ip", 4, "c.job")
    + _word("ip", 5, "c.wslot") + _word("ip", 6, "c.n")
    + """  %c.fnp = inttoptr i64 %c.fn to ptr
  %c.bufsp = inttoptr i64 %c.bufs to ptr
  %c.varsp = inttoptr i64 %c.vars to ptr
  br label %call.set

call.set:
  %c.i = phi i64 [0, %call], [%c.i.next, %call.set.body]
  %c.more = icmp slt i64 %c.i, %c.n
  br i1 %c.more, label %call.set.body, label %call.go

call.set.body:
  %c.twice = shl i64 %c.i, 1
  %c.di = add i64 %c.twice, 7
  %c.dst.p = getelementptr i64, ptr %ip, i64 %c.di
  %c.dst = load i64, ptr %c.dst.p
  %c.si = add i64 %c.twice, 8
  %c.src.p = getelementptr i64, ptr %ip, i64 %c.si
  %c.src = load i64, ptr %c.src.p
  %c.v.p = getelementptr i64, ptr %vals, i64 %c.src
  %c.v = load i64, ptr %c.v.p
  %c.t.p = getelementptr i64, ptr %c.varsp, i64 %c.dst
  store i64 %c.v, ptr %c.t.p
  %c.i.next = add i64 %c.i, 1
  br label %call.set

call.go:
"""
    + _slot_load("c.wslot", "c.w")
    + """  %c.wbad = icmp slt i64 %c.w, 1
  br i1 %c.wbad, label %call.bad, label %call.w
"""
    + _fail("call.bad", NON_POSITIVE, "%c.w")
    + """
call.w:
  %c.one = icmp eq i64 %c.w, 1
  br i1 %c.one, label %call.single, label %call.team

call.single:
  call void %c.fnp(ptr %c.bufsp, ptr %c.varsp, i64 0)
  br label %call.done

call.team:
  %c.hasjob = icmp ne i64 %c.job, 0
  br i1 %c.hasjob, label %call.parallel, label %call.serial

call.parallel:
  %c.jobp = inttoptr i64 %c.job to ptr
  %c.w32 = trunc i64 %c.w to i32
  call void %team.run(ptr %team.entry, ptr %c.jobp, i32 %c.w32)
  br label %call.done

call.serial:
  %c.core = phi i64 [0, %call.team], [%c.core.next, %call.serial]
  call void %c.fnp(ptr %c.bufsp, ptr %c.varsp, i64 %c.core)
  %c.core.next = add i64 %c.core, 1
  %c.again = icmp slt i64 %c.core.next, %c.w
  br i1 %c.again, label %call.serial, label %call.done

call.done:
  %c.pairs = shl i64 %c.n, 1
  %c.len = add i64 %c.pairs, 7
  %c.pc = add i64 %pc, %c.len
  store i64 %c.pc, ptr %pcp
  br label %dispatch

loop:
"""
    + _word("ip", 1, "l.var") + _word("ip", 2, "l.start") + _word("ip", 3, "l.stop") + _word("ip", 4, "l.step")
    + _word("ip", 5, "l.exit")
    + _slot_load("l.start", "l.s") + _slot_load("l.stop", "l.e") + _slot_load("l.step", "l.st")
    + """  %l.pos = icmp sgt i64 %l.st, 0
  %l.lt = icmp slt i64 %l.s, %l.e
  %l.gt = icmp sgt i64 %l.s, %l.e
  %l.go = select i1 %l.pos, i1 %l.lt, i1 %l.gt
  br i1 %l.go, label %loop.enter, label %loop.skip

loop.enter:
  %l.slot.p = getelementptr i64, ptr %vals, i64 %l.var
  store i64 %l.s, ptr %l.slot.p
  %l.pc = add i64 %pc, 6
  store i64 %l.pc, ptr %pcp
  br label %dispatch

loop.skip:
  store i64 %l.exit, ptr %pcp
  br label %dispatch

next:
"""
    + _word("ip", 1, "n.var") + _word("ip", 2, "n.stop") + _word("ip", 3, "n.step") + _word("ip", 4, "n.body")
    + _slot_load("n.var", "n.v") + _slot_load("n.stop", "n.e") + _slot_load("n.step", "n.st")
    + """  %n.sum = call {i64, i1} @llvm.sadd.with.overflow.i64(i64 %n.v, i64 %n.st)
  %n.nv = extractvalue {i64, i1} %n.sum, 0
  %n.ov = extractvalue {i64, i1} %n.sum, 1
  %n.pos = icmp sgt i64 %n.st, 0
  %n.lt = icmp slt i64 %n.nv, %n.e
  %n.gt = icmp sgt i64 %n.nv, %n.e
  %n.in = select i1 %n.pos, i1 %n.lt, i1 %n.gt
  %n.fine = xor i1 %n.ov, true
  %n.go = and i1 %n.in, %n.fine
  br i1 %n.go, label %next.again, label %next.done

next.again:
  store i64 %n.nv, ptr %n.v.p
  store i64 %n.body, ptr %pcp
  br label %dispatch

next.done:
  %n.pc = add i64 %pc, 5
  store i64 %n.pc, ptr %pcp
  br label %dispatch

eval:
"""
    + _word("ip", 1, "e.dst") + _word("ip", 2, "e.n")
    + """  store i64 0, ptr %spp
  store i64 0, ptr %kp
  br label %eval.head

eval.head:
  %e.k = load i64, ptr %kp
  %e.more = icmp slt i64 %e.k, %e.n
  br i1 %e.more, label %eval.token, label %eval.done

eval.token:
  %e.twice = shl i64 %e.k, 1
  %e.ki = add i64 %e.twice, 3
  %e.kind.p = getelementptr i64, ptr %ip, i64 %e.ki
  %e.kind = load i64, ptr %e.kind.p
  %e.ai = add i64 %e.twice, 4
  %e.arg.p = getelementptr i64, ptr %ip, i64 %e.ai
  %e.arg = load i64, ptr %e.arg.p
  %e.sp = load i64, ptr %spp
  %e.sp1 = sub i64 %e.sp, 1
  %e.sp2 = sub i64 %e.sp, 2
  %e.top.p = getelementptr [32 x i64], ptr %stack, i64 0, i64 %e.sp1
  %e.under.p = getelementptr [32 x i64], ptr %stack, i64 0, i64 %e.sp2
  %e.unary = icmp uge i64 %e.kind, 9
  %e.leaf = icmp ult i64 %e.kind, 2
  br i1 %e.leaf, label %eval.leaf, label %eval.op

eval.leaf:
  %e.isconst = icmp eq i64 %e.kind, 0
  %e.slot.p = getelementptr i64, ptr %vals, i64 %e.arg
  br i1 %e.isconst, label %eval.leaf.push, label %eval.leaf.load

eval.leaf.load:
  %e.loaded = load i64, ptr %e.slot.p
  br label %eval.leaf.push

eval.leaf.push:
  %e.leafv = phi i64 [%e.arg, %eval.leaf], [%e.loaded, %eval.leaf.load]
  %e.new.p = getelementptr [32 x i64], ptr %stack, i64 0, i64 %e.sp
  store i64 %e.leafv, ptr %e.new.p
  %e.sp.up = add i64 %e.sp, 1
  store i64 %e.sp.up, ptr %spp
  br label %eval.tail

eval.op:
  %e.b = load i64, ptr %e.top.p
  br i1 %e.unary, label %eval.unary, label %eval.binary

eval.unary:
  %e.ismin = icmp eq i64 %e.b, -9223372036854775808
  br i1 %e.ismin, label %eval.bad, label %eval.unary.ok

eval.unary.ok:
  %e.neg = sub i64 0, %e.b
  %e.isneg = icmp eq i64 %e.kind, 9
  %e.bneg = icmp slt i64 %e.b, 0
  %e.absv = select i1 %e.bneg, i64 %e.neg, i64 %e.b
  %e.unv = select i1 %e.isneg, i64 %e.neg, i64 %e.absv
  store i64 %e.unv, ptr %e.top.p
  br label %eval.tail

eval.binary:
  %e.a = load i64, ptr %e.under.p
  switch i64 %e.kind, label %eval.bad [ i64 2, label %eval.add
                                        i64 3, label %eval.sub
                                        i64 4, label %eval.mul
                                        i64 5, label %eval.div
                                        i64 6, label %eval.div
                                        i64 7, label %eval.max
                                        i64 8, label %eval.min ]
"""
    + _binary("eval.add", "  %e.add = call {i64, i1} @llvm.sadd.with.overflow.i64(i64 %e.a, i64 %e.b)\n"
              "  %e.addv = extractvalue {i64, i1} %e.add, 0\n  %e.addo = extractvalue {i64, i1} %e.add, 1\n"
              "  store i64 %e.addv, ptr %resp\n  store i1 %e.addo, ptr %e.ovp\n")
    + _binary("eval.sub", "  %e.sub = call {i64, i1} @llvm.ssub.with.overflow.i64(i64 %e.a, i64 %e.b)\n"
              "  %e.subv = extractvalue {i64, i1} %e.sub, 0\n  %e.subo = extractvalue {i64, i1} %e.sub, 1\n"
              "  store i64 %e.subv, ptr %resp\n  store i1 %e.subo, ptr %e.ovp\n")
    + _binary("eval.mul", "  %e.mul = call {i64, i1} @llvm.smul.with.overflow.i64(i64 %e.a, i64 %e.b)\n"
              "  %e.mulv = extractvalue {i64, i1} %e.mul, 0\n  %e.mulo = extractvalue {i64, i1} %e.mul, 1\n"
              "  store i64 %e.mulv, ptr %resp\n  store i1 %e.mulo, ptr %e.ovp\n")
    + _binary("eval.max", "  %e.gtr = icmp sgt i64 %e.a, %e.b\n  %e.maxv = select i1 %e.gtr, i64 %e.a, i64 %e.b\n"
              "  store i64 %e.maxv, ptr %resp\n  store i1 false, ptr %e.ovp\n")
    + _binary("eval.min", "  %e.ltr = icmp slt i64 %e.a, %e.b\n  %e.minv = select i1 %e.ltr, i64 %e.a, i64 %e.b\n"
              "  store i64 %e.minv, ptr %resp\n  store i1 false, ptr %e.ovp\n")
    + """
eval.div:
  %e.zero = icmp eq i64 %e.b, 0
  %e.amin = icmp eq i64 %e.a, -9223372036854775808
  %e.bm1 = icmp eq i64 %e.b, -1
  %e.wrap = and i1 %e.amin, %e.bm1
  %e.divbad = or i1 %e.zero, %e.wrap
  br i1 %e.divbad, label %eval.bad, label %eval.div.ok

eval.div.ok:
  %e.isdiv = icmp eq i64 %e.kind, 5
  br i1 %e.isdiv, label %eval.quot, label %eval.rem

eval.quot:
  %e.q = sdiv i64 %e.a, %e.b
  store i64 %e.q, ptr %resp
  store i1 false, ptr %e.ovp
  br label %eval.push

eval.rem:
  %e.r = srem i64 %e.a, %e.b
  store i64 %e.r, ptr %resp
  store i1 false, ptr %e.ovp
  br label %eval.push

eval.push:
  %e.ov = load i1, ptr %e.ovp
  br i1 %e.ov, label %eval.bad, label %eval.push.ok

eval.push.ok:
  %e.res = load i64, ptr %resp
  store i64 %e.res, ptr %e.under.p
  store i64 %e.sp1, ptr %spp
  br label %eval.tail

eval.tail:
  %e.k.next = add i64 %e.k, 1
  store i64 %e.k.next, ptr %kp
  br label %eval.head
"""
    + _fail("eval.bad", ARITHMETIC)
    + """
eval.done:
  %e.result = load i64, ptr %stack
  %e.out.p = getelementptr i64, ptr %vals, i64 %e.dst
  store i64 %e.result, ptr %e.out.p
  %e.pairs = shl i64 %e.n, 1
  %e.len = add i64 %e.pairs, 3
  %e.pc = add i64 %pc, %e.len
  store i64 %e.pc, ptr %pcp
  br label %dispatch

copy:
"""
    + _word("ip", 1, "m.dst") + _word("ip", 2, "m.src") + _word("ip", 3, "m.n")
    + """  %m.dstp = inttoptr i64 %m.dst to ptr
  %m.srcp = inttoptr i64 %m.src to ptr
  call void @llvm.memmove.p0.p0.i64(ptr %m.dstp, ptr %m.srcp, i64 %m.n, i1 false)
  %m.pc = add i64 %pc, 4
  store i64 %m.pc, ptr %pcp
  br label %dispatch

test:
"""
    + _word("ip", 1, "t.addr") + _word("ip", 2, "t.size") + _word("ip", 3, "t.mask") + _word("ip", 4, "t.target")
    + """  %t.p = inttoptr i64 %t.addr to ptr
  switch i64 %t.size, label %bad [ """
    + "\n                                   ".join(f"i64 {size}, label %test.{size}" for size in TESTED_SIZES)
    + " ]\n"
    + "".join(_test_load(size) for size in TESTED_SIZES)
    + """test.have:
  %t.v = phi i64 """
    + ", ".join(f"[%t.v{size}, %test.{size}]" for size in TESTED_SIZES)
    + """
  %t.held = and i64 %t.v, %t.mask
  %t.false = icmp eq i64 %t.held, 0
  %t.on = add i64 %pc, 5
  %t.pc = select i1 %t.false, i64 %t.target, i64 %t.on
  store i64 %t.pc, ptr %pcp
  br label %dispatch

jump:
"""
    + _word("ip", 1, "j.target")
    + """  store i64 %j.target, ptr %pcp
  br label %dispatch

py:
"""
    + _word("ip", 1, "p.fn") + _word("ip", 2, "p.arg")
    + """  %p.fnp = inttoptr i64 %p.fn to ptr
  %p.r = call i64 %p.fnp(i64 %p.arg)
  %p.bad = icmp ne i64 %p.r, 0
  br i1 %p.bad, label %py.bad, label %py.ok

py.ok:
  %p.pc = add i64 %pc, 3
  store i64 %p.pc, ptr %pcp
  br label %dispatch
"""
    + _fail("py.bad", CALLBACK)
    + "}\n"
)


def _replay_ir() -> str:
    """``svod_replay``, a plan's replay as a builtin without arguments (``cpu_builtins``) whose ``self`` is its
    frame: the dispatcher run with the GIL released, its status as an int."""
    return f"""
define ptr @svod_replay(ptr %self, ptr %unused) {{
entry:
  %frame.p = getelementptr i8, ptr %self, i64 {HEAD}
  %frame = load ptr, ptr %frame.p
{api(("PyEval_SaveThread", "PyEval_RestoreThread", "PyLong_FromSsize_t"))}\
  %state = call ptr %PyEval_SaveThread()
  %status = call i64 @svod_plan_run(ptr %frame)
  call void %PyEval_RestoreThread(ptr %state)
  %answer = call ptr %PyLong_FromSsize_t(i64 %status)
  ret ptr %answer
}}
"""


class _Dispatcher:
    """The dispatcher, compiled once per process, and its replay as a builtin (else a ctypes call of it, where
    a ctypes object's memory is not where the builtin reads it)."""

    def __init__(self) -> None:
        module = llvm.parse_assembly(_IR + _replay_ir())
        module.verify()
        engine = llvm.create_mcjit_compiler(module, host_target_machine(DISPATCHER_OPT))
        engine.finalize_object()
        self.run = RUN_TYPE(engine.get_function_address("svod_plan_run"))
        self.replay = Builtins(engine, {"svod_replay": METH_NOARGS}) if memory_follows_header() else None
        self.team = thread_team().addresses()


@functools.cache
def dispatcher() -> _Dispatcher:
    return _Dispatcher()


class NativeReplay:
    """Words for the dispatcher, built step by step at prepare; ``finish`` fixes them for replays."""

    def __init__(self) -> None:
        self.words: list[int] = []
        self.slots: dict[tuple[str, object], int] = {}
        self.initial: list[int] = []
        self.inputs: dict[str, int] = {}
        """Slot of each variable a run supplies."""
        self.errors: dict[int, str] = {}
        """Position of a word -> the step it belongs to, for error messages."""
        self.callbacks: list[Any] = []
        self.held: list[Any] = []
        """What the words' addresses point into (each launch's argument arrays, job block and code): alive as long
        as the words are, whatever the plan or a launch later drops or replaces."""
        self.code_sites: list[tuple[int, int, int]] = []
        """(word position, storage, byte offset) of every address in the words."""
        self.sites: dict[int, list[Site]] = {}
        """Per storage, where the finished words keep its addresses."""
        self.code: Any = None
        self.table: Any = None
        self.failure: BaseException | None = None

    def _slot(self, key: tuple[str, object], initial: int = 0) -> int:
        if key not in self.slots:
            self.slots[key] = len(self.initial)
            self.initial.append(initial)
        return self.slots[key]

    def constant(self, value: int) -> int:
        return self._slot(("const", value), value)

    def variable(self, name: str) -> int:
        """The slot of a variable (a run's, or a loop's)."""
        return self._slot(("var", name))

    def input(self, name: str) -> int:
        self.inputs[name] = self.variable(name)
        return self.inputs[name]

    def temporary(self) -> int:
        return self._slot(("temp", len(self.initial)))

    def value(self, expr: UOp, owner: str) -> int:
        """A slot holding ``expr``'s value when the next words run: a constant's, a variable's, or one an
        EVAL fills. Raises ``SvodError`` for what the dispatcher does not evaluate."""
        if expr.op is Ops.CONST and not isinstance(expr.arg, float):
            return self.constant(int(expr.arg))
        if expr.op is Ops.DEFINE_VAR:
            return self.variable(expr.arg[0])
        tokens: list[int] = []
        depth = self._tokens(expr, tokens, 0)
        if depth > STACK:
            raise SvodError("expression too deep for native replay", kernel=owner, stage="plan", value=depth)
        dst = self.temporary()
        self.errors[len(self.words)] = owner
        self.words += [EVAL, dst, len(tokens) // 2, *tokens]
        return dst

    def _tokens(self, expr: UOp, out: list[int], depth: int) -> int:
        """Append ``expr`` in postfix; the stack depth it needs."""
        while expr.op in _PASS_THROUGH:
            expr = expr.src[0]
        if expr.op is Ops.BIND:
            expr = expr.src[1]
        if expr.op is Ops.CONST and not isinstance(expr.arg, float):
            out += [CONST, int(expr.arg)]
            return depth + 1
        if expr.op is Ops.DEFINE_VAR:
            out += [SLOT, self.variable(expr.arg[0])]
            return depth + 1
        if expr.op not in _TOKENS:
            raise SvodError(f"op {expr.op.name} in a launch size or loop bound has no native form", stage="plan",
                            value=expr.op)
        deepest = depth
        for position, src in enumerate(expr.src):
            deepest = max(deepest, self._tokens(src, out, depth + position))
        out += [_TOKENS[expr.op], 0]
        return deepest

    def call(self, address: int, bufs: int, variables: int, job: int, workers: int,
             pairs: list[tuple[int, int]], owner: str) -> None:
        self.errors[len(self.words)] = owner
        self.words += [CALL, address, bufs, variables, job, workers, len(pairs)]
        for index, slot in pairs:
            self.words += [index, slot]

    def copy(self, dst: tuple[int, int, int], src: tuple[int, int, int], nbytes: int) -> None:
        """(address, storage, byte offset) of each side."""
        position = len(self.words)
        self.words += [COPY, dst[0], src[0], nbytes]
        self.code_sites += [(position + 1, dst[1], dst[2]), (position + 2, src[1], src[2])]

    def test(self, address: tuple[int, int, int], size: int, mask: int, owner: str) -> int:
        """A TEST of the element at ``address`` ((address, storage, byte offset)): on to the next word where it
        has a bit of ``mask`` set, else a jump. Returns the position of the jump's target, for ``land``."""
        position = len(self.words)
        self.errors[position] = owner
        self.words += [TEST, address[0], size, mask, -1]
        self.code_sites.append((position + 1, address[1], address[2]))
        return position + 4

    def jump(self, target: int = -1) -> int:
        """A JUMP to ``target`` (one ``land`` sets later where it is not known yet); the position of its
        target."""
        self.words += [JUMP, target]
        return len(self.words) - 1

    def land(self, target: int) -> None:
        """Point the jump whose target is at position ``target`` at the next word."""
        self.words[target] = len(self.words)

    def python(self, run: Callable[[], None], owner: str) -> None:
        """A step run by Python: its exception is re-raised after the dispatcher stops."""
        def callback(arg: int) -> int:
            try:
                run()
            except BaseException as err:  # carried across the native frame, re-raised by run()
                self.failure = err
                return 1
            return 0

        native = CALLBACK_TYPE(callback)
        self.callbacks.append(native)
        self.errors[len(self.words)] = owner
        self.words += [PY, ctypes.cast(native, ctypes.c_void_p).value or 0, 0]

    def loop_begin(self, var: int, start: int, stop: int, step: int) -> int:
        position = len(self.words)
        self.words += [LOOP, var, start, stop, step, -1]
        return position

    def loop_end(self, begin: int, var: int, stop: int, step: int) -> None:
        self.words += [NEXT, var, stop, step, begin + 6]
        self.words[begin + 5] = len(self.words)

    def finish(self) -> None:
        self.words.append(END)
        self.code = (ctypes.c_int64 * len(self.words))(*self.words)
        self.table = (ctypes.c_int64 * max(len(self.initial), 1))(*self.initial)
        self.input_slots = tuple(self.inputs.items())
        for position, storage, offset in self.code_sites:
            self.sites.setdefault(storage, []).append((self.code, position, offset))
        native = dispatcher()
        self.frame = (ctypes.c_int64 * 6)(ctypes.addressof(self.code), ctypes.addressof(self.table), *native.team)
        self._call: Callable[[], int] = (native.replay("svod_replay", self.frame) if native.replay is not None
                                         else functools.partial(native.run, ctypes.addressof(self.frame)))

    def values(self) -> dict[str, int]:
        """Every variable's current value, by name."""
        return {str(key[1]): self.table[slot] for key, slot in self.slots.items() if key[0] == "var"}

    def run(self, values: Mapping[str, int]) -> None:
        table = self.table
        for name, slot in self.input_slots:
            table[slot] = values[name]
        status = self._call()
        if status:
            self._raise(status - 1, self.frame[4], self.frame[5])

    def _raise(self, position: int, kind: int, detail: int) -> None:
        owner = self.errors.get(position)
        if kind == CALLBACK and self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if kind == NON_POSITIVE:
            raise LaunchError(f"launch dimension 0 evaluated to non-positive value {detail}", kernel=owner,
                              stage="launch", value=detail)
        if kind == ARITHMETIC:
            raise LaunchError("invalid launch-size arithmetic: overflow or division by zero in 64-bit signed",
                              kernel=owner, stage="launch")
        raise SvodError(f"native replay stopped at word {position} (kind {kind})", kernel=owner, stage="execute")


class NativeReplayer:
    """Replays plans of CPU programs through the dispatcher, and checks a call's arrays in native code
    (``svod.device.HostArrayChecks``): what the CPU's runtime factories share."""

    def array_addresses(self, arguments: int, arrays: Sequence[CallArray], apart: Sequence[tuple[int, int]]
                        ) -> Callable[[tuple[Any, ...]], list[int] | None] | None:
        return array_addresses(arguments, arrays, apart)

    def replay(self, work: Sequence[ReplayItem], inputs: Sequence[str]) -> PlanReplay | None:
        """The words of ``work``, whose runs supply ``inputs``; None where a launch size or loop bound has
        no native form."""
        program = NativeReplay()
        for name in inputs:
            program.input(name)
        try:
            _emit(program, work)
        except SvodError:
            return None
        program.finish()
        return program


def _emit(program: NativeReplay, work: Sequence[ReplayItem]) -> None:
    for item in work:
        if isinstance(item, ReplayLoop):
            _emit_loop(program, item)
        elif isinstance(item, ReplayBranch):
            _emit_branch(program, item)
        elif isinstance(item, ReplayWhile):
            _emit_while(program, item)
        elif isinstance(item, ReplayCopy):
            program.copy((item.dst.value, item.dst.storage, item.dst.offset),
                         (item.src.value, item.src.storage, item.src.offset), item.nbytes)
        elif isinstance(item, ReplayKernel):
            _emit_kernel(program, item)
        else:
            _emit_python(program, item.run, item.owner)


def _emit_python(program: NativeReplay, run: Runner, owner: str) -> None:
    """A call back into Python that runs ``run`` with the variables' values at that point."""
    program.python(functools.partial(_run_with_values, run, program), owner)


def _run_with_values(run: Runner, program: NativeReplay) -> None:
    run(program.values())


def _emit_loop(program: NativeReplay, loop: ReplayLoop) -> None:
    """LOOP, the body and NEXT; with ``until``, a TEST after the body that leaves the loop where it holds."""
    if loop.until is not None and loop.until.size not in TESTED_SIZES:
        _emit_python(program, loop.run, loop.owner)
        return
    start, stop, step = (program.value(e, loop.owner) for e in (loop.start, loop.stop, loop.step))
    var = program.variable(loop.var)
    begin = program.loop_begin(var, start, stop, step)
    _emit(program, loop.body)
    if loop.until is None:
        program.loop_end(begin, var, stop, step)
        return
    stay = _emit_test(program, loop.until, loop.owner)
    leave = program.jump()
    program.land(stay)
    program.loop_end(begin, var, stop, step)
    program.land(leave)


def _emit_branch(program: NativeReplay, branch: ReplayBranch) -> None:
    """A TEST that jumps past ``then`` to ``otherwise`` where the condition does not hold."""
    if branch.condition.size not in TESTED_SIZES:
        _emit_python(program, branch.run, branch.owner)
        return
    otherwise = _emit_test(program, branch.condition, branch.owner)
    _emit(program, branch.then)
    if not branch.otherwise:
        program.land(otherwise)
        return
    past = program.jump()
    program.land(otherwise)
    _emit(program, branch.otherwise)
    program.land(past)


def _emit_while(program: NativeReplay, loop: ReplayWhile) -> None:
    """A TEST that leaves the loop where the condition does not hold, the body, and a JUMP back to it."""
    if loop.condition.size not in TESTED_SIZES:
        _emit_python(program, loop.run, loop.owner)
        return
    top = len(program.words)
    leave = _emit_test(program, loop.condition, loop.owner)
    _emit(program, loop.body)
    program.jump(top)
    program.land(leave)


def _emit_test(program: NativeReplay, condition: HostCondition, owner: str) -> int:
    """A TEST of ``condition``: the bits that make it hold are all of an integer's or a bool's, and all but a
    float's sign (zero of either sign is false, NaN true, as Python's ``bool`` says)."""
    mask = (1 << (8 * condition.size - 1)) - 1 if condition.floating else -1
    address = condition.address
    return program.test((address.value, address.storage, address.offset), condition.size, mask, owner)


def _native_calls(kernel: ReplayKernel) -> list[tuple[CpuLaunch, tuple[str, ...], UOp | int]] | None:
    """Each launch of a kernel step with its worker count (the values of the variables fixed for the step put
    in); None where the step runs from Python: a launch of another device, or a step without launches of its
    own to make (``svod.runtime.steps``: parts that may allocate)."""
    if not kernel.calls:
        return None
    calls = []
    for call in kernel.calls:
        if not isinstance(call.launch, CpuLaunch):
            return None
        workers = _workers(call)
        if isinstance(workers, UOp):
            fixed = {n: UOp.const(n.dtype, int(kernel.fixed[n.arg[0]])) for n in workers.toposort()
                     if n.op is Ops.DEFINE_VAR and n.arg[0] in kernel.fixed}
            workers = substitute(workers, fixed) if fixed else workers
        calls.append((call.launch, call.var_names, workers))
    return calls


def _workers(call: KernelCall) -> UOp | int:
    """A launch's worker count (its first launch dimension): a number where it is one."""
    static = call.shape.static
    if static is not None:
        return static.global_size[0]
    workers = call.shape.global_size[0]
    return int(workers.arg) if workers.op is Ops.CONST else workers


def _emit_kernel(program: NativeReplay, kernel: ReplayKernel) -> None:
    """A CALL per launch, with its argument arrays, the slots that fill its variables (the fixed ones are
    written into its array once, here) and its worker count; a call back into Python where the step has no
    native form."""
    calls = _native_calls(kernel)
    if calls is None:
        _emit_python(program, kernel.run, kernel.owner)
        return
    for launch, names, workers in calls:
        team = not isinstance(workers, int) or workers > 1
        address, bufs, variables, job = launch.native(max(len(names), 1), team=team)
        program.held.append((launch, launch.bufs, launch.variables, launch.job))
        pairs = []
        for index, name in enumerate(names):
            if name in kernel.fixed:
                launch.variables[index] = kernel.fixed[name]
            else:
                pairs.append((index, program.variable(name)))
        count = program.constant(workers) if isinstance(workers, int) else program.value(workers, kernel.owner)
        program.call(address, bufs, variables, job, count, pairs, kernel.owner)
