"""Loops inside plans and arrays bound per run, checked against numpy and against a Python loop of single
kernels: stencils, Floyd-Warshall, nested and triangular loops, a loop variable in launch sizes, empty
loops, bounds checks inside loops, and every way a bound array can be wrong."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import ExecutionPlan, KernelBuilder, dtypes
from svod.errors import BufferMismatchError, IndexOutOfBoundsError, RaceError, SvodError, VariableError
from tests.helpers import cpu_device, open_device

DEVICES = ["llvm", "clang", "PYTHON", "CL:0", "CUDA:0", "WEBGPU:0"]


def _jacobi_kernels(n: int):
    """b[i] = (a[i-1] + a[i] + a[i+1]) / 3 inside, then a[i] = (b[i-1] + b[i] + b[i+1]) / 3 inside."""
    asts = []
    for name in ("jacobi_ab", "jacobi_ba"):
        k = KernelBuilder(name)
        dst, src = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
        i = k.range(n - 2)
        k.store(dst[i + 1], (src[i] + src[i + 1] + src[i + 2]) * (1.0 / 3.0))
        asts.append(k.build())
    return asts


def _jacobi_numpy(a: np.ndarray, b: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = a.copy(), b.copy()
    third = np.float32(1.0 / 3.0)
    for _ in range(steps):
        b[1:-1] = (a[:-2] + a[1:-1] + a[2:]) * third
        a[1:-1] = (b[:-2] + b[1:-1] + b[2:]) * third
    return a, b


@pytest.mark.parametrize("steps", [0, 1, 7])
def test_a_jacobi_stencil_runs_as_one_execute(steps):
    n = 67
    rng = np.random.default_rng(1)
    a0, b0 = rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)
    plan = ExecutionPlan("CPU")
    a, b = plan.add_buffer(svod.Buffer.from_numpy(a0), "a"), plan.add_buffer(svod.Buffer.from_numpy(b0), "b")
    ab, ba = _jacobi_kernels(n)
    plan.loop("t", 0, "T", [plan.add_kernel(ab, [b, a]), plan.add_kernel(ba, [a, b])])
    plan.execute(T=steps)
    want_a, want_b = _jacobi_numpy(a0, b0, steps)
    np.testing.assert_allclose(plan.buffers[a].numpy(), want_a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(plan.buffers[b].numpy(), want_b, rtol=1e-6, atol=1e-6)
    body = plan._steps[0].body
    assert [s.dependencies for s in body] == [(), (body[0].id,)]


def _jacobi2d_kernel(n: int):
    k = KernelBuilder("jacobi2d")
    dst, src = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    i, j = k.range(n - 2), k.range(n - 2)
    total = src[i + 1, j + 1] + src[i, j + 1] + src[i + 2, j + 1] + src[i + 1, j] + src[i + 1, j + 2]
    k.store(dst[i + 1, j + 1], total * 0.2)
    return k.build()


def test_jacobi2d_with_a_step_of_two_and_a_copy_in_the_body():
    n, turns = 33, 5
    rng = np.random.default_rng(2)
    a0 = rng.standard_normal((n, n)).astype(np.float32)
    plan = ExecutionPlan("CPU")
    a = plan.add_buffer(svod.Buffer.from_numpy(a0))
    b = plan.add_buffer(svod.Buffer.from_numpy(a0))
    plan.loop("t", 10, 10 + 2 * turns, 2, [plan.add_kernel(_jacobi2d_kernel(n), [b, a]), plan.add_copy(a, b)])
    plan.execute()
    want = a0.copy()
    for _ in range(turns):
        nxt = want.copy()
        nxt[1:-1, 1:-1] = (want[1:-1, 1:-1] + want[:-2, 1:-1] + want[2:, 1:-1] + want[1:-1, :-2]
                           + want[1:-1, 2:]) * np.float32(0.2)
        want = nxt
    np.testing.assert_allclose(plan.buffers[a].numpy().reshape(n, n), want, rtol=1e-5, atol=1e-6)


def _floyd_warshall_kernel(n: int):
    k = KernelBuilder("floyd_warshall")
    pivot = k.var("k", 0, n - 1)
    out, d = k.buffer(dtypes.float32, (n, n)), k.buffer(dtypes.float32, (n, n))
    i, j = k.range(n), k.range(n)
    k.store(out[i, j], d[i, j].minimum(d[i, pivot] + d[pivot, j]))
    return k.build()


@pytest.mark.parametrize("device", DEVICES)
def test_floyd_warshall_over_k_matches_numpy_and_single_kernels(device):
    dev = open_device(device)
    n = 24
    rng = np.random.default_rng(3)
    dist = rng.uniform(1, 10, (n, n)).astype(np.float32)
    dist[rng.random((n, n)) < 0.6] = np.float32(1e6)
    np.fill_diagonal(dist, 0)
    ast = _floyd_warshall_kernel(n)
    plan = ExecutionPlan(dev)
    d = plan.add_buffer(svod.Buffer.from_numpy(dist, dev), "d")
    tmp = plan.add_buffer(svod.Buffer(dev, dtypes.float32, n * n))
    plan.loop("k", 0, n, [plan.add_kernel(ast, [tmp, d]), plan.add_copy(d, tmp)])
    plan.execute()
    want = dist.copy()
    for pivot in range(n):
        want = np.minimum(want, want[:, pivot:pivot + 1] + want[pivot:pivot + 1, :])
    np.testing.assert_array_equal(plan.buffers[d].numpy().reshape(n, n), want)
    bound = dist.copy()  # the same plan on an array of the caller's: the copy step's source moves with it
    plan.execute(buffers={"d": bound})
    np.testing.assert_array_equal(bound, want)
    single = svod.compile(ast, dev)
    by_hand_d, by_hand_tmp = svod.Buffer.from_numpy(dist, dev), svod.Buffer(dev, dtypes.float32, n * n)
    for pivot in range(n):
        single([by_hand_tmp, by_hand_d], {"k": pivot})
        by_hand_d.copyin(by_hand_tmp.numpy())
    np.testing.assert_array_equal(plan.buffers[d].numpy(), by_hand_d.numpy())


def _wavefront_kernel(limit: int):
    """out[i] += i + d for i < d: a width that is the loop's variable (a launch size on a GPU)."""
    k = KernelBuilder("wavefront")
    d = k.var("d", 1, limit)
    out = k.buffer(dtypes.int32, limit)
    i = k.range(d)
    k.store(out[i], out[i] + (i + d).cast(dtypes.int32))
    return k.build()


@pytest.mark.parametrize("device", DEVICES)
def test_a_loop_variable_in_launch_sizes_on_every_device(device):
    dev = open_device(device)
    limit = 40
    plan = ExecutionPlan(dev)
    out = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(limit, np.int32), dev))
    plan.loop("d", 1, "stop", 3, [plan.add_kernel(_wavefront_kernel(limit), [out])])
    for stop in (1, 2, 38, limit + 1):
        plan.buffers[out].copyin(np.zeros(limit, np.int32))
        plan.execute(stop=stop)
        want = np.zeros(limit, np.int64)
        for d in range(1, stop, 3):
            want[:d] += np.arange(d) + d
        np.testing.assert_array_equal(plan.buffers[out].numpy(), want.astype(np.int32))


def _triangle_kernel():
    """a[i] = a[i] * 2 + t, one element, i and t variables."""
    k = KernelBuilder("triangle")
    t, i = k.var("t", 0, 63), k.var("i", 0, 63)
    a = k.buffer(dtypes.int64, 64)
    one = k.range(1)
    k.store(a[i + one], a[i + one] * 2 + t.cast(dtypes.int64))
    return k.build()


def test_nested_triangular_loops_match_a_python_loop():
    n = 12
    plan = ExecutionPlan("CPU")
    a = plan.add_buffer(svod.Buffer.from_numpy(np.arange(64, dtype=np.int64)))
    t_var = _index_var("t")
    inner = plan.loop("i", t_var + 1, "n", [plan.add_kernel(_triangle_kernel(), [a])])
    outer = plan.loop("t", 0, "n", [inner])
    plan.execute(n=n)
    want = np.arange(64, dtype=np.int64)
    for t in range(n):
        for i in range(t + 1, n):
            want[i] = want[i] * 2 + t
    np.testing.assert_array_equal(plan.buffers[a].numpy(), want)
    assert [s.id for s in plan._steps] == [outer]
    with pytest.raises(VariableError, match=r"loop variable [ti] may take \[0, 64\]"):
        plan.execute(n=65)


def _index_var(name: str):
    return svod.UOp.define_var(name, 0, 1 << 20)


def test_a_sub_plan_as_the_body_and_a_descending_loop():
    n = 16
    plan = ExecutionPlan("CPU")
    x = svod.Buffer.from_numpy(np.zeros(n, np.int64))
    plan.add_buffer(x, "x")
    body = ExecutionPlan("CPU")
    k = KernelBuilder("shift_add")
    v = k.var("v", -100, 100)
    buf = k.buffer(dtypes.int64, n)
    i = k.range(n)
    k.store(buf[i], buf[i] * 3 + v.cast(dtypes.int64))
    body.add_kernel(k.build(), [body.add_buffer(x)])
    plan.loop(v, 5, -4, -2, body)
    plan.execute()
    want = np.zeros(n, np.int64)
    for value in range(5, -4, -2):
        want = want * 3 + value
    np.testing.assert_array_equal(plan.buffers[0].numpy(), want)
    assert len(plan.buffers) == 1


def test_empty_loops_run_nothing_and_check_nothing():
    plan = ExecutionPlan("CPU")
    out = plan.add_buffer(svod.Buffer.from_numpy(np.full(40, 7, np.int32)))
    plan.loop("d", "lo", "hi", [plan.add_kernel(_wavefront_kernel(40), [out])])
    plan.execute(lo=100, hi=100)
    plan.execute(lo=100, hi=3)  # d would be out of the kernel's bounds, but never takes a value
    np.testing.assert_array_equal(plan.buffers[out].numpy(), np.full(40, 7, np.int32))
    with pytest.raises(VariableError, match=r"loop variable d may take \[0, 2\], outside bounds \[1, 40\]"):
        plan.execute(lo=0, hi=3)
    np.testing.assert_array_equal(plan.buffers[out].numpy(), np.full(40, 7, np.int32))


def test_loop_errors_at_build_and_prepare():
    plan = ExecutionPlan("CPU")
    out = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(40, np.int32)))
    first = plan.add_kernel(_wavefront_kernel(40), [out])
    plan.add_kernel(_wavefront_kernel(40), [out])
    with pytest.raises(SvodError, match="steps added last"):
        plan.loop("d", 1, 3, [first])
    with pytest.raises(SvodError, match="step 0"):
        plan.loop("d", 1, 3, 0, [first])
    with pytest.raises(SvodError, match="name or a kernel variable"):
        plan.loop(3, 1, 3, [first])
    outside = ExecutionPlan("CPU")
    o = outside.add_buffer(svod.Buffer.from_numpy(np.zeros(40, np.int32)))
    outside.add_kernel(_wavefront_kernel(40), [o])
    outside.loop("d", 1, 3, [outside.add_kernel(_wavefront_kernel(40), [o])])
    with pytest.raises(VariableError, match="bound by a loop and also needed outside it"):
        outside.prepare()


def test_a_variable_step_that_may_be_zero_is_refused_before_running():
    plan = ExecutionPlan("CPU")
    out = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(40, np.int32)))
    plan.loop("d", 1, 30, "s", [plan.add_kernel(_wavefront_kernel(40), [out])])
    with pytest.raises(VariableError, match="step of the loop over d"):
        plan.execute(s=0)
    plan.execute(s=10)
    want = np.zeros(40, np.int64)
    for d in range(1, 30, 10):
        want[:d] += np.arange(d) + d
    np.testing.assert_array_equal(plan.buffers[out].numpy(), want)


def test_a_failed_bounds_check_inside_a_loop_names_the_kernel_after_the_run():
    k = KernelBuilder("gather_in_loop")
    t = k.var("t", 0, 10)
    out, table, ids = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 8), k.buffer(dtypes.int32, 11)
    i = k.range(4)
    k.store(out[i], out[i] + table[ids[t]])
    plan = ExecutionPlan("CPU")
    o = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(4, np.float32)))
    tb = plan.add_buffer(svod.Buffer.from_numpy(np.arange(8, dtype=np.float32)))
    ids_np = np.array([1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3], np.int32)
    ix = plan.add_buffer(svod.Buffer.from_numpy(ids_np))
    plan.loop("t", 0, 11, [plan.add_kernel(k.build(), [o, tb, ix])])
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[o].numpy(), np.full(4, float(np.arange(8)[ids_np].sum()), np.float32))
    bad = ids_np.copy()
    bad[5] = 99
    with pytest.raises(IndexOutOfBoundsError, match="gather_in_loop") as err:
        plan.execute(buffers={ix: bad})
    assert err.value.index == 99
    plan.buffers[o].copyin(np.zeros(4, np.float32))
    plan.execute()  # the failure was reported once; the next run is clean
    np.testing.assert_array_equal(plan.buffers[o].numpy(), np.full(4, float(np.arange(8)[ids_np].sum()), np.float32))


# ---- arrays bound per run -------------------------------------------------------------------------------------

def _scale_plan(device="CPU", n=32):
    k = KernelBuilder("scale")
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    plan = ExecutionPlan(device)
    x_index = plan.add_buffer(svod.Buffer(device, dtypes.float32, n), name="x")
    out_index = plan.add_buffer(svod.Buffer(device, dtypes.float32, n), name="out")
    plan.add_kernel(k.build(), [out_index, x_index])
    return plan, x_index, out_index


@pytest.mark.parametrize("device", DEVICES)
def test_arrays_bound_per_run_on_every_device(device):
    dev = open_device(device)
    plan, _, out_index = _scale_plan(dev)
    plan.buffers[out_index].copyin(np.full(32, -5, np.float32))
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(32).astype(np.float32)
        out = np.zeros(32, np.float32)
        plan.execute(buffers={"x": x, out_index: out})
        np.testing.assert_array_equal(out, x * 2 + 1)
    if device in ("llvm", "clang"):  # zero copy: the plan's own buffer is untouched (elsewhere it stages)
        np.testing.assert_array_equal(plan.buffers[out_index].numpy(), np.full(32, -5, np.float32))


def test_binding_on_the_cpu_uses_the_array_s_memory():
    plan, _, _ = _scale_plan()
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros((4, 8), np.float32)
    plan.execute(buffers={"x": x, "out": out})
    np.testing.assert_array_equal(out, x * 2 + 1)
    readonly = np.arange(32, dtype=np.float32)
    readonly.flags.writeable = False
    shared = svod.Buffer.from_numpy(out, copy=False)
    plan.execute(buffers={"x": readonly, "out": shared})  # a read-only array may be read; a host Buffer works
    np.testing.assert_array_equal(out.reshape(-1), readonly * 2 + 1)


class _DLPackOnly:
    """Something that speaks only DLPack (as a CPU torch tensor does)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_binding_a_dlpack_producer():
    plan, _, _ = _scale_plan()
    x, out = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    plan.execute(buffers={"x": _DLPackOnly(x), "out": _DLPackOnly(out)})
    np.testing.assert_array_equal(out, x * 2 + 1)


@pytest.mark.parametrize(("bound", "message"), [
    ({"out": np.zeros(31, np.float32)}, "has 32 elements; the array bound to it has 31"),
    ({"out": np.zeros(32, np.float64)}, "holds float32; the array bound to it is float64"),
    ({"out": np.zeros(64, np.float32)[::2]}, "not C-contiguous"),
    ({"out": np.frombuffer(bytes(132), np.float32, 32, 2)}, "read-only"),
    ({"out": np.zeros(33, np.float32).view(np.uint8)[2:130].view(np.float32)}, "not aligned"),
    ({"nope": np.zeros(32, np.float32)}, "no plan buffer named nope"),
    ({7: np.zeros(32, np.float32)}, "no plan buffer 7"),
    ({"x": [1.0] * 32}, "numpy array, a DLPack producer"),
])
def test_wrong_bound_arrays_are_refused_before_anything_runs(bound, message):
    plan, _, out_index = _scale_plan()
    plan.buffers[out_index].copyin(np.full(32, 3, np.float32))
    with pytest.raises(BufferMismatchError, match=message) as err:
        plan.execute(buffers=bound)
    assert err.value.stage == "bind"
    assert err.value.kernel == "scale" or "no plan buffer" in message
    np.testing.assert_array_equal(plan.buffers[out_index].numpy(), np.full(32, 3, np.float32))


def test_a_bound_array_may_not_share_memory_with_a_written_one():
    plan, _, _ = _scale_plan()
    both = np.zeros(48, np.float32)
    with pytest.raises(BufferMismatchError, match="shares memory"):
        plan.execute(buffers={"x": both[:32], "out": both[16:]})
    base = svod.Buffer.from_numpy(np.zeros(64, np.float32))
    viewing = ExecutionPlan("CPU")
    viewing.add_buffer(base)
    view = viewing.add_buffer(base.view(8, 32))
    other = viewing.add_buffer(svod.Buffer("CPU", dtypes.float32, 32))
    viewing.add_kernel(_scale_plan()[0]._requests[0].ast, [other, view])
    with pytest.raises(BufferMismatchError, match="is a view"):
        viewing.execute(buffers={view: np.zeros(32, np.float32)})


def test_a_binder_checks_what_its_arrays_may_change_and_leaves_no_array_bound_to_other_runs():
    plan, x_index, out_index = _scale_plan()
    binder = plan.binder([("x", 1), (out_index, 0)])
    assert binder is not None
    x, out, other = np.arange(32, dtype=np.float32), np.zeros(32, np.float32), np.zeros(32, np.float32)
    for source, target in ((x, out), (x + 1, out), (x, other)):  # the same arrays, or others: repointed
        assert plan.execute_bound(binder, [target, source], {})
        np.testing.assert_array_equal(target, source * 2 + 1)
    readonly = np.arange(32, dtype=np.float32)
    readonly.flags.writeable = False
    assert plan.execute_bound(binder, [out, readonly], {})  # a read-only array may be read
    np.testing.assert_array_equal(out, readonly * 2 + 1)
    both = np.zeros(48, np.float32)
    for target, source in ((np.zeros(64, np.float32)[::2], x), (readonly, x), (both[16:], both[:32]),
                           (np.zeros(33, np.float32).view(np.uint8)[2:130].view(np.float32), x), (x, x)):
        before = target.copy()
        assert not plan.execute_bound(binder, [target, source], {})  # nothing ran: execute(buffers=) says why
        np.testing.assert_array_equal(target, before)
    own = plan.binder([("out", 0)])  # an array over the plan's own buffer x, which the kernel reads
    assert own is not None and not plan.execute_bound(own, [plan.buffers[x_index].host_view()], {})
    plan.buffers[x_index].copyin(np.full(32, 4, np.float32))
    out[:] = -1
    plan.execute()  # binds nothing: the plan's own buffers, not the arrays the last run left bound
    np.testing.assert_array_equal(plan.buffers[out_index].numpy(), np.full(32, 9, np.float32))
    np.testing.assert_array_equal(out, np.full(32, -1, np.float32))
    assert plan.execute_bound(binder, [out, x], {})
    plan.execute(buffers={"out": other})  # binds out only: x is the plan's own again
    np.testing.assert_array_equal(other, np.full(32, 9, np.float32))
    np.testing.assert_array_equal(out, x * 2 + 1)


def test_a_binder_is_for_buffers_bound_in_place_once_each():
    plan, x_index, _ = _scale_plan()
    assert plan.binder([("x", 0), (x_index, 1)]) is None  # one buffer twice: execute(buffers=) refuses it
    python, _, _ = _scale_plan("PYTHON")
    assert python.binder([("x", 0)]) is None  # copied in and out
    with pytest.raises(BufferMismatchError, match="no plan buffer named nope"):
        plan.binder([("nope", 0)])


def test_binding_inside_loops_and_views_follow_their_base():
    n = 16
    k = KernelBuilder("inc_half")
    dst, src = k.buffer(dtypes.float32, n // 2), k.buffer(dtypes.float32, n // 2)
    i = k.range(n // 2)
    k.store(dst[i], src[i] + 1.0)
    plan = ExecutionPlan("CPU")
    base = svod.Buffer("CPU", dtypes.float32, n)
    whole = plan.add_buffer(base, "state")
    low, high = plan.add_buffer(base.view(0, n // 2)), plan.add_buffer(base.view(n // 2, n // 2))
    plan.loop("t", 0, 3, [plan.add_kernel(k.build(), [high, low]), plan.add_kernel(k.build(), [low, high])])
    state = np.zeros(n, np.float32)
    plan.execute(buffers={whole: state})
    np.testing.assert_array_equal(state, np.concatenate([np.full(8, 6.0), np.full(8, 5.0)]).astype(np.float32))


def test_a_fixed_stride_checks_only_the_values_it_reaches():
    plan = ExecutionPlan("CPU")
    out = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(40, np.int32)))
    plan.loop("d", 1, 41, 2, [plan.add_kernel(_wavefront_kernel(39), [out])])  # 1, 3, ..., 39: never 40
    plan.execute()
    want = np.zeros(40, np.int64)
    for d in range(1, 41, 2):
        want[:d] += np.arange(d) + d
    np.testing.assert_array_equal(plan.buffers[out].numpy(), want)
    down = ExecutionPlan("CPU")
    o = down.add_buffer(svod.Buffer.from_numpy(np.zeros(40, np.int32)))
    down.loop("d", 39, 0, -2, [down.add_kernel(_wavefront_kernel(39), [o])])  # 39, 37, ..., 1: never 0
    down.execute()
    np.testing.assert_array_equal(down.buffers[o].numpy(), want)


def test_a_reduction_split_across_threads_inside_a_loop_on_bound_arrays():
    """A kernel in parts (partial sums on each thread, then their total) replays natively, turn after turn,
    on an array bound per run: each of its parts is repointed."""
    device = cpu_device(3, "llvm")
    k = KernelBuilder("partial_total")
    n = k.var("n", 1, 1 << 20)
    x, total = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, 1)
    r = k.range(n, svod.AxisKind.REDUCE)
    k.store(total[0], x[r].reduce(r))
    add = KernelBuilder("accumulate_total")
    acc, part = add.buffer(dtypes.float32, 1), add.buffer(dtypes.float32, 1)
    one = add.range(1)
    add.store(acc[one], acc[one] + part[one])
    plan = ExecutionPlan(device)
    xi = plan.add_buffer(svod.Buffer(device, dtypes.float32, 1 << 20), name="x")
    ti = plan.add_buffer(svod.Buffer(device, dtypes.float32, 1))
    ai = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(1, np.float32), device), name="acc")
    plan.loop("t", 0, 3, [plan.add_kernel(k.build(), [xi, ti]), plan.add_kernel(add.build(), [ai, ti])])
    plan.prepare()
    assert plan._native is not None and len(plan.prepared_kernels[0].launch.launches) > 1
    for fill in (1.0, 0.5):
        x = np.full(1 << 20, fill, np.float32)
        acc = np.zeros(1, np.float32)
        plan.execute(n=1 << 20, buffers={"x": x, "acc": acc})
        assert acc[0] == 3 * fill * (1 << 20)


@svod.kernel
def _shifted_add(u, v, t, alpha):
    for i in svod.prange(u.shape[0]):
        u[i] = u[i] + alpha * v[(i + t) % v.shape[0]]


@pytest.mark.parametrize("name", ["CPU", "PYTHON", "CL:0", "CUDA:0"])
def test_a_python_kernels_scalars_are_bound_by_name_a_loop_variable_among_them(name):
    """``add_kernel(kernel, buffers, t="t", alpha=0.5)``: a number fixes a scalar argument, a name makes it the
    plan's variable (here the loop's), so a Python kernel takes a turn's number as a plan of ops does."""
    device = open_device(name)
    n = 7
    u0, v = np.zeros(n), np.arange(n, dtype=np.float64)
    plan = svod.ExecutionPlan(device)
    u_id, v_id = plan.add_buffer(svod.Buffer.from_numpy(u0, device=device)), plan.add_buffer(
        svod.Buffer.from_numpy(v, device=device))
    step = plan.add_kernel(_shifted_add, [u_id, v_id], t="t", alpha=0.5)
    plan.loop("t", 0, "turns", body=[step])
    plan.execute(turns=5)
    want = u0.copy()
    for t in range(5):
        want += 0.5 * v[(np.arange(n) + t) % n]
    np.testing.assert_allclose(plan.buffers[u_id].numpy(), want)
    assert plan.variables == ("turns",)


def test_a_scalar_the_plan_is_given_for_no_argument_is_refused():
    plan = svod.ExecutionPlan("CPU")
    u, v = (plan.add_buffer(svod.Buffer("CPU", svod.dtypes.float64, 4)) for _ in range(2))
    with pytest.raises(svod.errors.BufferMismatchError, match="_shifted_add has no argument beta"):
        plan.add_kernel(_shifted_add, [u, v], t="t", beta=1.0)
    with pytest.raises(svod.errors.BufferMismatchError, match=r"takes 2 arrays \(u, v\) besides the scalars"):
        plan.add_kernel(_shifted_add, [u], t="t", alpha=1.0)


def _racing_kernel(n: int):
    """Every work item stores into one element: refused (``RaceError``) wherever it is lowered."""
    k = KernelBuilder("racing")
    dst, src = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    k.store(dst[0], src[k.range(n)])
    return k.build()


def _doubling_kernel(n: int):
    k = KernelBuilder("doubling")
    dst, src = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(dst[i], src[i] * 2.0)
    return k.build()


@pytest.mark.parametrize("bounds", [(0, 0, 1), (5, 3, 1), (3, 5, -1)])
@pytest.mark.parametrize("device", DEVICES)
def test_a_loop_whose_numbers_never_turn_is_neither_compiled_nor_run(device, bounds, tmp_path):
    """Its body runs for no value, as Python's ``for`` over an empty range: a kernel there that no device could
    lower is not an error, and the plan and its bundle hold only the kernels a run reaches."""
    device = open_device(device)
    n = 7
    x = np.arange(n, dtype=np.float32)
    plan = ExecutionPlan(device)
    src, dst, out = (plan.add_buffer(svod.Buffer.from_numpy(start, device=device), name) for start, name in
                     ((x, "src"), (np.full(n, -1, np.float32), "dst"), (np.zeros(n, np.float32), "out")))
    plan.loop("t", *bounds, [plan.add_kernel(_racing_kernel(n), [dst, src])])
    plan.add_kernel(_doubling_kernel(n), [out, src])
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[out].numpy(), 2 * x)
    np.testing.assert_array_equal(plan.buffers[dst].numpy(), np.full(n, -1, np.float32))
    assert [p.kernel.name for p in plan.prepared_kernels] == ["doubling"]
    plan.save(tmp_path / "plan.svod")
    loaded = svod.load_plan(tmp_path / "plan.svod", device=device)
    arrays = {"src": x, "dst": np.full(n, -1, np.float32), "out": np.zeros(n, np.float32)}
    loaded.execute(buffers=arrays)
    np.testing.assert_array_equal(arrays["out"], 2 * x)
    np.testing.assert_array_equal(arrays["dst"], np.full(n, -1, np.float32))


def test_the_same_loop_turning_once_refuses_the_kernel():
    """The contrast: the kernel of the test above is refused where a run reaches it."""
    plan = ExecutionPlan("CPU")
    a, b = (plan.add_buffer(svod.Buffer.from_numpy(np.zeros(7, np.float32))) for _ in range(2))
    plan.loop("t", 0, 1, [plan.add_kernel(_racing_kernel(7), [a, b])])
    with pytest.raises(RaceError):
        plan.execute()
