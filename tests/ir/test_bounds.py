"""``UOp.bounds`` of the bit operators and right shifts, against every value the operands' ranges hold."""

from __future__ import annotations

import itertools

import pytest

from svod import dtypes
from svod.ir import Ops, UOp
from svod.ir.alu import exec_alu

RANGES = [(0, 0), (0, 5), (3, 9), (-1, -1), (-8, -1), (-5, 6), (-9, 17), (1000, 1030), (-300, 3)]
AMOUNTS = [(0, 0), (0, 3), (2, 5), (30, 40), (0, 70)]


def _variable(name: str, lo: int, hi: int) -> UOp:
    return UOp.define_var(name, lo, hi, dtypes.int32)


@pytest.mark.parametrize("op", [Ops.OR, Ops.XOR])
@pytest.mark.parametrize(("a", "b"), list(itertools.product(RANGES, RANGES)))
def test_or_and_xor_stay_within_their_bounds(op, a, b):
    node = UOp(op, dtypes.int32, (_variable("a", *a), _variable("b", *b)))
    lo, hi = node.bounds
    values = [exec_alu(op, dtypes.int32, (x, y)) for x in range(a[0], a[1] + 1) for y in range(b[0], b[1] + 1)]
    assert lo <= min(values) and max(values) <= hi
    assert (lo, hi) != (dtypes.int32.min, dtypes.int32.max)  # a bound, not the dtype's whole range


@pytest.mark.parametrize(("a", "amount"), list(itertools.product(RANGES, AMOUNTS)))
def test_a_right_shift_stays_within_its_bounds(a, amount):
    node = UOp(Ops.SHR, dtypes.int32, (_variable("a", *a), _variable("s", *amount)))
    lo, hi = node.bounds
    values = [exec_alu(Ops.SHR, dtypes.int32, (x, s)) for x in range(a[0], a[1] + 1)
              for s in range(amount[0], amount[1] + 1)]
    assert lo <= min(values) and max(values) <= hi
    assert (lo, hi) == (min(values), max(values)) or amount[1] >= 32  # tight, but for shifts past the width
