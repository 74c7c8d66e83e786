import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svod.dtype import dtypes
from svod.ir import Ops
from svod.ir.alu import bitcast, convert, exec_alu, round_float, wrap_int


def test_wraparound():
    assert wrap_int(256, dtypes.uint8) == 0
    assert wrap_int(128, dtypes.int8) == -128
    assert wrap_int(-1, dtypes.uint32) == 0xFFFFFFFF
    assert exec_alu(Ops.ADD, dtypes.int32, [2**31 - 1, 1]) == -(2**31)


@pytest.mark.parametrize(("a", "b"), [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (-1, 5)])
def test_division_truncates_like_c(a, b):
    q = exec_alu(Ops.IDIV, dtypes.int32, [a, b])
    r = exec_alu(Ops.MOD, dtypes.int32, [a, b])
    assert q == int(a / b)
    assert q * b + r == a
    assert np.fmod(np.int32(a), np.int32(b)) == r


def test_defined_division_edge_cases():
    imin = -(2**31)
    assert exec_alu(Ops.IDIV, dtypes.int32, [5, 0]) == 5
    assert exec_alu(Ops.MOD, dtypes.int32, [5, 0]) == 0
    assert exec_alu(Ops.IDIV, dtypes.int32, [imin, -1]) == imin
    assert exec_alu(Ops.MOD, dtypes.int32, [imin, -1]) == 0


@given(st.floats(width=32, allow_nan=False), st.floats(width=32, allow_nan=False))
def test_float32_ops_round_like_numpy(a, b):
    with np.errstate(all="ignore"):
        for op, ref in [(Ops.ADD, np.add), (Ops.MUL, np.multiply), (Ops.SUB, np.subtract)]:
            assert exec_alu(op, dtypes.float32, [a, b]) == pytest.approx(float(ref(np.float32(a), np.float32(b))),
                                                                      nan_ok=True, rel=0, abs=0)


def test_float_specials():
    assert math.isnan(exec_alu(Ops.LOG2, dtypes.float32, [-1.0]))
    assert exec_alu(Ops.LOG2, dtypes.float32, [0.0]) == -math.inf
    assert exec_alu(Ops.EXP2, dtypes.float32, [1000.0]) == math.inf
    assert exec_alu(Ops.FDIV, dtypes.float32, [1.0, -0.0]) == -math.inf
    assert exec_alu(Ops.MAX, dtypes.float32, [math.nan, 2.0]) == 2.0
    assert math.copysign(1, exec_alu(Ops.MAX, dtypes.float32, [-0.0, 0.0])) == 1
    assert math.copysign(1, exec_alu(Ops.MAX, dtypes.float32, [0.0, -0.0])) == 1
    assert math.copysign(1, exec_alu(Ops.MIN, dtypes.float32, [0.0, -0.0])) == -1
    assert round_float(1e39, dtypes.float32) == math.inf
    assert round_float(0.1, dtypes.float32) == float(np.float32(0.1))


def test_conversions():
    assert convert(3.9, dtypes.int32) == 3
    assert convert(-3.9, dtypes.int32) == -3
    assert convert(300, dtypes.uint8) == 44
    assert convert(math.nan, dtypes.int32) == 0  # float to int saturates, NaN is 0 (svod's definition)
    assert convert(1e10, dtypes.int32) == 2**31 - 1 and convert(-math.inf, dtypes.int32) == -(2**31)
    assert convert(-1.5, dtypes.uint8) == 0 and convert(300.0, dtypes.uint8) == 255
    assert convert(2, dtypes.bool) is True
    assert bitcast(1.0, dtypes.float32, dtypes.int32) == 0x3F800000
    assert bitcast(-1, dtypes.int32, dtypes.uint32) == 0xFFFFFFFF
