"""The cyclic garbage collector waits while a kernel compiles, and runs again after as it ran before."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from svod import KernelBuilder, dtypes
from svod.codegen import pipeline
from svod.codegen.collector import collector_paused
from svod.codegen.render.c import CRenderer
from svod.ir import UOp


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector on, whatever the test leaves it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_a_pause_turns_the_collector_off_and_on_again(collector):
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still under way
    assert gc.isenabled()


def test_a_pause_that_fails_turns_it_on_again(collector):
    with pytest.raises(ValueError, match="inside"), collector_paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off(collector):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_of_two_threads_turn_it_on_when_the_last_ends(collector):
    started, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            started.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert started.wait(10)
    assert not gc.isenabled()  # the other thread's pause outlives this one
    release.set()
    thread.join(10)
    assert gc.isenabled()


class _Watching(CRenderer):
    """A C writer that notes whether the collector ran while it wrote."""

    seen: list[bool]

    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        self.seen.append(gc.isenabled())
        return super().render_linear(symbol, linear)


def test_a_program_is_compiled_with_the_collector_paused(collector):
    k = KernelBuilder("double")
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(out[i], x[i] * 2.0)
    writer = _Watching("CPU")
    writer.seen = []
    program = pipeline.program(k.build(), writer.target)
    assert writer.seen == [False] and gc.isenabled()
    assert "(0x1.0000000000000p+1f)" in program.src[3].arg  # the source it wrote, 2.0f
