"""The linear stage: the linearizer only orders; checked accesses, accumulators and barriers are passes of their
own, each keeping the guarantee its docstring states."""

from __future__ import annotations

import math

import pytest

from svod import AxisKind, KernelBuilder, Ops, UOp, dtypes
from svod.codegen import pipeline
from svod.codegen.accumulators import lower_accumulators
from svod.codegen.barriers import check_barriers
from svod.codegen.checks import CHECKED, check_accesses
from svod.codegen.linearize import linearize as order
from svod.codegen.safety import guard_accesses
from svod.errors import GraphError


def _gather(gated: bool) -> UOp:
    """``out[r, c] = table[ids[r], c]``: an index read from memory, which no proof covers."""
    k = KernelBuilder("gather_gated" if gated else "gather")
    out, ids, table = k.buffer(dtypes.float32, 6 * 8), k.buffer(dtypes.int32, 6), k.buffer(dtypes.float32, 5 * 8)
    r, c = k.range(6), k.range(8)
    row = ids[r].cast(dtypes.index)
    value = table.index(row * 8 + c, r < 4).load() if gated else table[row * 8 + c]
    k.store(out[r * 8 + c], value)
    return k.build()


def _guarded(ast: UOp) -> tuple[UOp, UOp | None]:
    return guard_accesses(ast, ast.arg)


@pytest.mark.parametrize("gated", [False, True], ids=["ungated", "gated"])
def test_check_accesses_leaves_no_checked_access_and_records_where_the_test_fails(gated):
    sink, status = _guarded(_gather(gated))
    assert status is not None and any(u.op is Ops.INDEX and u.arg == CHECKED for u in sink.toposort())
    checked = check_accesses(sink, status)
    assert checked is not None
    topo = checked.toposort()
    assert not any(u.op is Ops.INDEX and u.arg == CHECKED for u in topo)
    records = [u for u in topo if u.op is Ops.IF]
    assert len(records) == 1
    failed, allowed, *rest = records[0].src
    stores = [s for s in rest if s.op is Ops.STORE]
    assert [s.src[0].src[0] for s in stores] == [status, status]  # the flag and the offending index
    assert [s.src[0].src[1].arg for s in stores] == [2 * 2, 2 * 2 + 1]  # slots of buffer 2 (table)
    assert failed.dtype == allowed.dtype == dtypes.bool
    assert len(rest) == 2  # the columns' loop always turns: the row's test may run outside it


def _gathered_sums(columns: str | int, gated: bool) -> UOp:
    """``out[r] = sum(table[ids[r], c] for c < columns)`` (a variable in [0, 8] where ``columns`` names one),
    gated by ``0 < columns`` where asked."""
    k = KernelBuilder("gathered_sums")
    out, ids, table = k.buffer(dtypes.float32, 6), k.buffer(dtypes.int32, 6), k.buffer(dtypes.float32, 5 * 8)
    r = k.range(6)
    c = k.range(k.var(columns, 0, 8) if isinstance(columns, str) else columns, AxisKind.REDUCE)
    row = ids[r].cast(dtypes.index)
    index = row * 8 + c
    value = table.index(index, UOp.index_const(0).lt(c.src[0])).load() if gated else table[index]
    k.store(out[r], value.reduce(c))
    return k.build()


@pytest.mark.parametrize("columns, gated, hoisted", [(8, False, True), ("n", False, False), ("n", True, True)],
                         ids=["columns", "columns_may_be_none", "gated_by_some_column"])
def test_a_row_test_runs_outside_the_loop_over_columns_only_where_that_loop_turns(columns, gated, hoisted):
    """A record outside the loop over a row's columns fires whenever the loop is reached; where the loop may not
    turn (no column), only a gate that says it does lets it out, else the record runs beside the access."""
    sink, status = _guarded(_gathered_sums(columns, gated))
    checked = check_accesses(sink, status)
    assert checked is not None
    (record,) = [u for u in checked.toposort() if u.op is Ops.IF]
    c = next(u for u in checked.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisKind.REDUCE)
    assert c not in record.src[0].toposort()  # the test is the row's
    assert (c not in record.toposort()) is hoisted


def test_check_accesses_does_not_apply_where_every_access_is_proven():
    k = KernelBuilder("copy")
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(out[i], x[i])
    sink, status = _guarded(k.build())
    assert status is None and check_accesses(sink, status) is None


def test_a_checked_access_without_a_status_buffer_is_refused():
    sink, _ = _guarded(_gather(False))
    with pytest.raises(GraphError, match="status buffer"):
        check_accesses(sink, None)


def _row_sums() -> UOp:
    k = KernelBuilder("row_sums")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 4 * 8)
    i, j = k.range(4), k.range(8, AxisKind.REDUCE)
    k.store(out[i], x[i * 8 + j].reduce(j) + x[i * 8 + j].reduce(j, op=Ops.MAX))
    return k.build()


def test_the_linearizer_orders_a_reduction_and_lower_accumulators_computes_it():
    """The ordered list marks a reduction's register, its update in its loop and its result after the loop;
    the pass turns the three into an accumulator: initialised to the op's identity, updated in the loop (the
    END of which lists the updates), read after it."""
    ordered = order(_row_sums())
    updates = [u for u in ordered if u.op is Ops.REDUCE]
    assert [u.arg for u in updates] == [Ops.ADD, Ops.MAX]  # one loop for both: they share their range
    assert [u.op for u in ordered].count(Ops.DEFINE_REG) == 2
    linear = lower_accumulators(ordered, None)
    assert not any(u.op is Ops.REDUCE for u in linear)
    inits = [u for u in linear if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_REG
             and u.src[1].op is Ops.CONST]
    add, biggest = (init.src[1].arg for init in inits)
    assert add == 0 and math.copysign(1.0, add) == -1.0 and math.isnan(biggest)  # -0.0 + x is x; fmax ignores NaN
    end = next(u for u in linear if u.op is Ops.END and len(u.src) > 1)
    assert all(s.op is Ops.STORE and s.src[0].src[0].op is Ops.DEFINE_REG for s in end.src[1:])
    assert len(end.src) == 3
    position = {u: i for i, u in enumerate(linear)}
    for u in linear:  # every instruction's sources come before it
        assert all(position[s] < position[u] for s in u.src if s in position)
    plain = order(_gather(False))
    assert lower_accumulators(plain, None) is plain  # nothing to do where nothing is reduced


def test_a_barrier_inside_an_if_is_refused():
    cond = UOp(Ops.IF, dtypes.void, (UOp.const(dtypes.bool, True),), 1)
    with pytest.raises(GraphError, match="barrier"):
        check_barriers((cond, UOp(Ops.BARRIER), UOp(Ops.END, dtypes.void, (cond,))))
    check_barriers((cond, UOp(Ops.END, dtypes.void, (cond,)), UOp(Ops.BARRIER)))


def test_the_linear_stage_is_listed_in_order():
    assert [step.name for step in pipeline.LINEAR] == ["check_accesses", "linearize", "lower_accumulators",
                                                         "check_barriers"]


def _clamped_upsample(rows: str | int) -> UOp:
    """``out[r, c] = image[clamp(r // 2), clamp(c // 2)]`` over an ``n x n`` image, as a Python kernel spells it:
    each clamped index inside ``[0, n)`` wherever ``n > 0``, the flat index ``where(0 < n, row * n + col, -1)``;
    ``rows`` rows of output (a variable in [0, 8] where it names one), 8 columns, the access gated by ``0 < 8``."""
    k = KernelBuilder("clamped_upsample")
    n = k.var("n", 0, 64)
    out_rows = k.var(rows, 0, 8) if isinstance(rows, str) else rows
    out, image = k.buffer(dtypes.float32, out_rows * 8), k.buffer(dtypes.float32, n * n)
    r, c = k.range(out_rows), k.range(8)

    def clamp(i: UOp) -> UOp:
        return (i // 2).cast(dtypes.int64).minimum((n - 1).cast(dtypes.int64)).maximum(0).cast(dtypes.index)

    inside = UOp.index_const(0).lt(n)
    k.store(out[r * 8 + c], image[inside.where(clamp(r) * n + clamp(c), UOp.index_const(-1))])
    return k.build()


@pytest.mark.parametrize("rows, kept", [(8, False), ("m", True)], ids=["rows", "rows_may_be_none"])
def test_a_clamped_access_is_tested_once_where_its_dimension_is_not_empty(rows, kept):
    """The test of a clamped ``image[y0, x0]`` is ``0 < n`` alone, made outside the loops that always turn; a loop
    that may not turn (no rows) keeps the record, which would otherwise fire for an access never made."""
    sink, status = _guarded(_clamped_upsample(rows))
    checked = check_accesses(sink, status)
    assert checked is not None
    (record,) = [u for u in checked.toposort() if u.op is Ops.IF]
    r, c = sorted((u for u in checked.toposort() if u.op is Ops.RANGE), key=lambda u: u.arg[0])
    assert not any(u.op is Ops.RANGE for u in record.src[0].toposort())  # the test is 0 < n
    assert c not in record.toposort()
    assert (r in record.toposort()) is kept
