import gc
import math
import pathlib
import pickle
import re
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

from svod.dtype import dtypes
from svod.errors import GraphError, VariableError
from svod.ir import AxisKind, Ops, UOp, simplify

REPO_ROOT = str(pathlib.Path(__file__).resolve().parents[2])


def saxpy_graph():
    n = UOp.define_var("n", 1, 1 << 20)
    out, x = UOp.param(0, dtypes.float32, n), UOp.param(1, dtypes.float32, n)
    i = UOp.range(n, 0)
    return UOp.sink(out[i].store(x[i] * 2.0 + 1.0), name="saxpy")


def test_hash_consing_gives_one_object():
    assert UOp.const(dtypes.int32, 3) is UOp.const(dtypes.int32, 3)
    assert saxpy_graph() is saxpy_graph()
    assert UOp.const(dtypes.int32, 3) is not UOp.const(dtypes.int64, 3)


def test_hash_consing_separates_what_equality_would_merge():
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    nan = float("nan")
    assert UOp.const(dtypes.float32, nan) is UOp.const(dtypes.float32, nan)
    assert UOp.const(dtypes.float32, 1) is UOp.const(dtypes.float32, 1.0)


def test_equality_is_identity_and_comparison_builds_graphs():
    a = UOp.const(dtypes.int32, 1)
    b = UOp.const(dtypes.int32, 2)
    assert a == a and a != b
    lt = a < b
    assert lt.op is Ops.CMPLT and lt.dtype == dtypes.bool
    assert a.lt(b) is lt and a.eq(b).op is Ops.CMPEQ and a.ne(b).op is Ops.CMPNE
    with pytest.raises(GraphError, match="truth value"):
        bool(lt)


def test_immutable():
    with pytest.raises(AttributeError):
        UOp.const(dtypes.int32, 1).arg = 2  # type: ignore[misc]


def test_entries_are_freed_when_unused():
    before = len(UOp._table)
    for v in range(1000):
        UOp.const(dtypes.int32, 10_000_000 + v)
    assert len(UOp._table) < before + 100


def test_a_node_built_again_after_it_was_freed_is_one_object_again():
    """The lock-free lookup meets a dead reference (or none) for a freed node: the node is built afresh, with
    its own fields, and later lookups find that one."""
    gone = weakref.ref(UOp.const(dtypes.int64, 987_654_321_123))
    gc.collect()
    assert gone() is None
    again = UOp.const(dtypes.int64, 987_654_321_123)
    assert again.op is Ops.CONST and again.dtype == dtypes.int64 and again.arg == 987_654_321_123
    assert UOp.const(dtypes.int64, 987_654_321_123) is again
    assert UOp.const(dtypes.int64, -987_654_321_123) is not again
    negative_zero = UOp.const(dtypes.float64, -0.0)
    assert math.copysign(1.0, negative_zero.arg) == -1.0 and UOp.const(dtypes.float64, 0.0) is not negative_zero


def test_hash_consing_is_thread_safe():
    results: list[list[UOp]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def build(slot: int) -> None:
        barrier.wait()
        for k in range(300):
            v = UOp.define_var("t", 0, 1000)
            results[slot].append(((v + k) * 3 // 2).maximum(v))

    threads = [threading.Thread(target=build, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for other in results[1:]:
        assert all(a is b for a, b in zip(results[0], other, strict=True))


def test_python_numbers_take_the_other_dtype():
    x = UOp.define_var("x", 0, 10, dtypes.int32)
    assert (x + 1).src[1].dtype == dtypes.int32
    assert (1 - x).src[0].dtype == dtypes.int32
    f = UOp.const(dtypes.float32, 1.5)
    assert (2 * f).src[0].arg == 2.0 and (2 * f).dtype == dtypes.float32


def test_dtype_errors_are_clear():
    x = UOp.define_var("x", 0, 10, dtypes.int32)
    f = UOp.const(dtypes.float32, 1.5)
    with pytest.raises(GraphError, match="mixed dtypes"):
        _ = x + f
    with pytest.raises(GraphError, match="float constant"):
        _ = x + 1.5
    with pytest.raises(GraphError, match="FDIV needs a float"):
        _ = x / 2
    with pytest.raises(GraphError, match="MOD needs an integer"):
        _ = f % 2.0


def test_indexing_in_arithmetic_loads():
    buf = UOp.param(0, dtypes.float32, 8)
    v = buf[3] + 1.0
    assert v.src[0].op is Ops.LOAD and v.src[0].src[0].op is Ops.INDEX
    st = buf[2].store(buf[1])
    assert st.op is Ops.STORE and st.src[1].op is Ops.LOAD


def test_store_checks_dtype():
    buf = UOp.param(0, dtypes.float32, 8)
    with pytest.raises(GraphError, match="cast first"):
        buf[0].store(UOp.const(dtypes.int32, 1))


def test_bind_checks_bounds():
    n = UOp.define_var("n", 1, 4)
    assert n.bind(3).op is Ops.BIND
    with pytest.raises(VariableError, match=r"variable n=5 is outside bounds \[1, 4\]"):
        n.bind(5)


def test_reduce_and_ranges():
    buf = UOp.param(0, dtypes.float32, 64)
    r = UOp.range(8, 1, AxisKind.REDUCE)
    red = buf[r].reduce(r, op=Ops.MAX)
    assert red.op is Ops.REDUCE and red.arg is Ops.MAX and red.dtype == dtypes.float32
    with pytest.raises(GraphError):
        buf[r].reduce(op=Ops.ADD)
    with pytest.raises(GraphError):
        buf[r].reduce(r, op=Ops.SUB)


def test_live_ranges_are_a_nodes_ranges_less_those_a_reduce_folds():
    buf = UOp.param(0, dtypes.float32, 64)
    i, j = UOp.range(8, 0), UOp.range(8, 1, AxisKind.REDUCE)
    element = buf[i * 8 + j].load()
    row = element.reduce(j)
    assert i.live_ranges == {i} and element.live_ranges == {i, j}
    assert row.live_ranges == {i} and (row + 1.0).live_ranges == {i}
    assert buf.live_ranges == frozenset() and UOp.range(i + 1, 2).live_ranges == {i, UOp.range(i + 1, 2)}
    assert (element * 2.0).live_ranges is element.live_ranges  # nothing new: one set, shared


def test_live_ranges_of_a_deep_chain_are_found_without_recursion():
    i = UOp.range(4, 0)
    node = i
    for _ in range(10_000):
        node = node * 3 + i
    assert node.live_ranges == {i}


def test_toposort_orders_sources_first():
    sink = saxpy_graph()
    order = sink.toposort()
    assert order[-1] is sink
    seen: set[UOp] = set()
    for node in order:
        assert all(s in seen for s in node.src)
        seen.add(node)
    assert len(order) == len(set(order))


def test_toposort_walks_sources_depth_first_in_order():
    """The order every pass and the linearizer follow: each source's nodes before the next source's."""
    x, y = UOp.define_var("x", 0, 9), UOp.define_var("y", 0, 9)
    a = x + 1
    b = a * y
    c = b - a
    assert c.toposort() == (x, UOp.const(dtypes.index, 1), a, y, b, c)
    assert (y * a).toposort() == (y, x, UOp.const(dtypes.index, 1), a, y * a)


def test_deep_chain_is_iterative_and_fast():
    x = UOp.define_var("x", 0, 10)
    node = x
    for _ in range(100_000):
        node = node + 0
    start = time.process_time()  # the CPU this process spent: a busy machine does not count
    assert len(node.toposort()) == 100_002
    assert simplify(node) is x
    _ = node.key
    assert time.process_time() - start < 10


def test_pickle_round_trip_keeps_identity():
    sink = saxpy_graph()
    assert pickle.loads(pickle.dumps(sink)) is sink


def test_key_is_structural_and_stable_across_processes():
    key = saxpy_graph().key
    assert len(key) == 64 and key != UOp.sink(name="other").key
    code = "from tests.ir.test_uop import saxpy_graph; print(saxpy_graph().key)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=REPO_ROOT)
    assert out.stdout.strip() == key


def test_program_stages():
    sink = saxpy_graph()
    prog = UOp.program(sink, UOp.device("cpu"), UOp.linear(), UOp.source("code"))
    assert [s.op for s in prog.src] == [Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE]
    assert prog.src[1].arg == "CPU"
    with pytest.raises(GraphError, match="SOURCE needs its LINEAR"):
        UOp.program(sink, UOp.device("cpu"), source=UOp.source("x"))


@pytest.mark.parametrize(("dtype", "value"), [
    (dtypes.int8, 300), (dtypes.int8, 128), (dtypes.int8, -129), (dtypes.uint8, 256), (dtypes.uint8, -1),
    (dtypes.int16, 1 << 15), (dtypes.uint16, 1 << 16), (dtypes.int32, 1 << 31), (dtypes.uint32, -1),
    (dtypes.int64, 1 << 63), (dtypes.int64, -(1 << 63) - 1), (dtypes.uint64, 1 << 64), (dtypes.uint64, -1),
    (dtypes.index, 1 << 63), (dtypes.bool, 2), (dtypes.bool, -1), (dtypes.int32, 1e10),
    (dtypes.float32, 1e300), (dtypes.float32, -1e39), (dtypes.float16, 65520.0), (dtypes.float16, 1 << 20),
    (dtypes.float64, 10**400),
])
def test_a_constant_its_dtype_cannot_hold_is_refused(dtype, value):
    with pytest.raises(GraphError, match=f"{re.escape(repr(value))}.*{re.escape(dtype.name)}") as info:
        UOp.const(dtype, value)
    assert info.value.stage == "build" and info.value.value == value


@pytest.mark.parametrize("dtype", [d for d in dtypes.all() if not d.is_float])
def test_every_integer_dtype_holds_its_own_extremes(dtype):
    assert UOp.const(dtype, dtype.min).arg == dtype.min and UOp.const(dtype, dtype.max).arg == dtype.max


@pytest.mark.parametrize(("dtype", "value"), [
    (dtypes.float32, float("inf")), (dtypes.float16, float("-inf")), (dtypes.float32, float("nan")),
    (dtypes.float16, 65504.0), (dtypes.float32, 3.4028234663852886e38), (dtypes.float32, 1e-50),
    (dtypes.float64, 1e300), (dtypes.bool, 1), (dtypes.bool, False), (dtypes.uint8, 255.0),
])
def test_infinities_nan_and_values_that_only_round_are_constants(dtype, value):
    const = UOp.const(dtype, value)
    rounded = np.array(value).astype(dtype.numpy).item()  # the value as numpy stores it in that dtype
    assert const.op is Ops.CONST and const.dtype == dtype and type(const.arg) is type(rounded)
    assert const.arg == rounded or (math.isnan(rounded) and math.isnan(const.arg))



def test_unstated_memory_is_the_buffers_a_value_loads_without_a_memory_state():
    out, x, y = (UOp.param(slot, dtypes.float32, 8) for slot in range(3))
    i = UOp.range(8, 0)
    plain, held = x[i].load(), y.state(1)[i].load()
    assert plain.unstated_memory == {x} and held.unstated_memory == frozenset()
    assert (plain + held * 2.0).unstated_memory is plain.unstated_memory
    assert (plain + out[i].load()).unstated_memory == {x, out}


def test_ops_below_holds_a_bit_for_each_op_at_or_below_a_node():
    from svod.ir.facts import OP_BITS
    x = UOp.define_var("x", 0, 9)
    node = (x * 2).cast(dtypes.float32).exp2()
    assert node.ops_below == OP_BITS[Ops.EXP2] | OP_BITS[Ops.CAST] | OP_BITS[Ops.MUL] | OP_BITS[Ops.DEFINE_VAR] | \
        OP_BITS[Ops.CONST]
    assert not x.ops_below & OP_BITS[Ops.MUL]


def test_every_fact_slot_starts_unknown():
    from svod.ir.uop import _FACTS
    assert set(UOp.__slots__) == {"__weakref__", "op", "dtype", "src", "arg", *_FACTS}
    fresh = UOp.define_var("fresh_fact_slots", 0, 3) * 7
    assert all(getattr(fresh, fact) is None for fact in _FACTS)
