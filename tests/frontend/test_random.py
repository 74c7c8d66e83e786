"""``np.random`` in ``@svod.kernel`` functions (``svod.random``): the same numbers as the function run as plain
Python with svod's generator, on every device and thread count; the documented stream layout; seeding and
launches; ordinals through loops, branches and helpers; the distributions; and what is refused."""

from __future__ import annotations

import math

import numpy as np
import numpy.random as npr
import pytest
from numpy.random import normal as imported_normal

import svod
from svod import dtypes
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend.oracle import run_as_python
from svod.frontend.promotion import Platform
from svod.ir import Ops
from svod.random import Launch
from svod.random.philox import philox4x32, uniform_double
from tests.helpers import cpu_device, ks_critical, ks_statistic

# ---- kernels -----------------------------------------------------------------------------------------------


@svod.kernel
def every_draw(out, seed):
    np.random.seed(seed)
    for i in svod.prange(out.shape[0]):
        out[i, 0] = np.random.random()
        out[i, 1] = np.random.uniform(-2.0, 3.0)
        out[i, 2] = np.random.randint(-3, 1000)
        out[i, 3] = np.random.normal(1.0, scale=2.0)
        out[i, 4] = np.random.exponential(0.5)
        out[i, 5] = np.random.standard_normal()
        out[i, 6] = np.random.randint(7)
        out[i, 7] = np.random.uniform(high=out[i, 0] + 1.0, low=out[i, 0])


@svod.kernel
def unseeded(out):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.random()


@svod.kernel
def seeded(out, seed):
    np.random.seed(seed)
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.random()


@svod.kernel
def grid(out, serial_out):
    serial_out[0] = np.random.random()
    for i in svod.prange(out.shape[0]):
        for j in svod.prange(out.shape[1]):
            out[i, j] = np.random.random()
    serial_out[1] = np.random.random()


@svod.kernel
def walks(out):
    for i in svod.prange(out.shape[0]):
        x = 0.0
        for t in range(out.shape[1] - 1):
            x += np.random.normal()
            out[i, t + 1] = np.random.random()
        out[i, 0] = x


@svod.kernel
def uniform_walks(out, steps):
    for i in svod.prange(out.shape[0]):
        x = 0.0
        for _t in range(steps):
            for _u in range(3):
                x += np.random.random()
        out[i] = x + np.random.random()


@svod.kernel
def rejection(out, flag):
    for i in svod.prange(out.shape[0]):
        u = np.random.random()
        tries = 0
        while np.random.random() < 0.8 and tries < 40:  # a test that fails has drawn all the same
            tries += 1
        v = np.random.random() if u < 0.5 else np.random.randint(10) + np.random.random()
        w = u < 0.3 or np.random.random() < 0.5  # the right side draws only where u >= 0.3
        c = 0.2 < u < np.random.random()  # the second comparison draws only where the first holds
        for _k in range(4):
            if np.random.random() < 0.5:
                v += np.random.random()
        if flag:
            np.random.seed(i)
        out[i, 0] = u + tries
        out[i, 1] = v + w + c
        out[i, 2] = np.random.random()


@svod.func
def two_draws(scale):
    return np.random.random() + imported_normal(scale=scale)


@svod.kernel
def helpers(out):
    for i in svod.prange(out.shape[0]):
        a = two_draws(2.0)
        out[i, 0] = a
        out[i, 1] = npr.random()


@svod.kernel
def serial(out):
    for t in range(out.shape[0]):
        out[t] = np.random.random()


@svod.kernel
def serial_while_then_nest(out, counts):
    n = 0
    while np.random.random() < 0.9:  # carries the serial ordinal in a register of the serial code's own
        n += 1
    counts[0] = n
    for i in svod.prange(out.shape[0]):
        k = 0
        while np.random.randint(0, 6) != 5 and k < 100:
            k += 1
        out[i] = k
    counts[1] = np.random.randint(1000)


@svod.kernel
def skipped(out):
    for i in svod.prange(out.shape[0]):
        np.random.random()  # a draw whose number is skipped
        out[i] = np.random.random()


@svod.kernel
def float32_draws(out):
    for i in svod.prange(out.shape[0]):
        out[i, 0] = np.random.random()
        out[i, 1] = np.random.randint(-50, 50)
        out[i, 2] = np.random.normal()


def _refused(folder, source_line: str):
    """A kernel whose prange body is ``source_line`` (line 7 of a file of its own in ``folder``: svod reads a
    kernel's source from its file)."""
    namespace: dict = {}
    code = ("import numpy as np\nimport svod\n\n@svod.kernel\ndef refused(out):\n"
            "    for i in svod.prange(out.shape[0]):\n"
            f"        {source_line}\n")
    path = folder / "refused.py"
    path.write_text(code)
    exec(compile(code, str(path), "exec"), namespace)
    return namespace["refused"], path


@svod.kernel
def two_levels(out):
    for i in svod.prange(out.shape[0]):
        a = np.random.random()
        for j in svod.prange(out.shape[1]):
            out[i, j] = a + np.random.random()


@svod.kernel
def triangle(out):
    for i in svod.prange(out.shape[0]):
        for j in svod.prange(i + 1):
            out[i, j] = np.random.random()


# ---- helpers -----------------------------------------------------------------------------------------------

def _platform(device) -> Platform:
    return Platform(device.caps.index_bits, dtypes.float64 in device.caps.element_dtypes)


def _real(device) -> type:
    return np.float64 if dtypes.float64 in device.caps.element_dtypes else np.float32


def _exact_columns(device) -> list[int]:
    """The columns of ``every_draw`` that are plain Python's bit for bit: all of them on a device that rounds as
    IEEE 754 does; on WebGPU (WGSL lets its compiler fuse and approximate float arithmetic) the uniforms and the
    integers."""
    return list(range(8)) if device.caps.ieee_floats else [0, 2, 6]


def _agree(got: np.ndarray, expected: np.ndarray, exact: list[int], device) -> None:
    for column in range(got.shape[1]):
        if column in exact:
            assert got[:, column].tolist() == expected[:, column].tolist(), f"column {column}"
        else:  # WGSL's arithmetic
            tolerance = 1e-5 if got.dtype == np.float32 else 1e-13
            assert (np.abs(got[:, column] - expected[:, column]) <= tolerance * (1 + np.abs(expected[:, column]))).all()


# ---- the numbers ---------------------------------------------------------------------------------------------

def test_every_draw_is_plain_pythons_on_every_device(device):
    """Every draw bit for bit on every IEEE 754 device, uniforms and integers on WebGPU too (a device without
    float64 draws float32: plain Python then does too)."""
    real = _real(device)
    out = np.zeros((300, 8), real)
    every_draw(out, 12345, device=device)
    expected = run_as_python(every_draw, np.zeros((300, 8), real), 12345, platform=_platform(device))[0]
    _agree(out, expected, _exact_columns(device), device)
    assert len(set(out[:, 0].tolist())) == 300


def test_a_device_without_float64_draws_the_float64_numbers_cut_to_float32(device):
    """Without float64 a uniform is the float64 draw cut to 24 bits; with it, the float64 draw stored into a
    float32 array (rounded, as plain Python stores it). Integers are the same words either way."""
    out = np.zeros((200, 3), np.float32)
    float32_draws(out, device=device)
    svod.random.seed(3)
    float32_draws(out, device=device)
    wide = run_as_python(float32_draws, np.zeros((200, 3)), launch=Launch(3, 0))[0]
    if dtypes.float64 in device.caps.element_dtypes:
        assert out[:, 0].tolist() == wide[:, 0].astype(np.float32).tolist()
    else:
        assert (out[:, 0] == np.floor(wide[:, 0] * 2 ** 24) / 2 ** 24).all()
    assert out[:, 1].tolist() == wide[:, 1].tolist()  # the same integers: the same words


def test_the_numbers_do_not_depend_on_threads_tiles_or_compiler():
    """The draws are the same bits on 1 and 2 threads and from either CPU compiler (a sum of them, which
    svod may reassociate, is the same bits for one compiler)."""
    results = []
    for threads, compiler in [(1, "llvm"), (2, "llvm"), (2, "clang")]:
        device = cpu_device(threads, compiler)
        out = np.zeros((2000, 8))
        every_draw(out, 99, device=device)
        paths = np.zeros((64, 17))
        svod.random.seed(5)  # each call the first launch from seed 5
        walks(paths, device=device)
        results.append((out, paths))
    for out, paths in results[1:]:
        assert out.tobytes() == results[0][0].tobytes()
        assert paths[:, 1:].tobytes() == results[0][1][:, 1:].tobytes()  # the draws
        assert np.allclose(paths[:, 0], results[0][1][:, 0], rtol=0, atol=1e-12)  # their sums: reassociated
    assert results[1][1].tobytes() == results[0][1].tobytes()  # one compiler's sums, on 1 thread and 2


def test_the_stream_layout_is_the_documented_one():
    """Key (seed, launch), counter (ordinal, element low, element high, stream): the serial draws before and
    after the nest are ordinals 0 and 1 of stream 0; the launch's first nest is stream 1; work item (i, j) is
    element i * cols + j."""
    svod.random.seed(4242)
    out, serial_out = np.zeros((7, 9)), np.zeros(2)
    grid(out, serial_out)
    i, j = np.meshgrid(np.arange(7, dtype=np.uint64), np.arange(9, dtype=np.uint64), indexing="ij")
    element = i * 9 + j
    words = philox4x32((0, element, 0, 1), (4242, 0))
    assert out.tolist() == uniform_double(words[0], words[1]).tolist()
    assert serial_out[0] == uniform_double(*philox4x32((0, 0, 0, 0), (4242, 0))[:2])
    assert serial_out[1] == uniform_double(*philox4x32((1, 0, 0, 0), (4242, 0))[:2])


def test_a_seed_in_the_kernel_is_the_process_generators_first_launch_from_that_seed():
    out, again = np.zeros(50), np.zeros(50)
    seeded(out, 31)
    svod.random.seed(31)
    unseeded(again)
    assert out.tolist() == again.tolist()


# ---- seeds and launches ----------------------------------------------------------------------------------------

def test_calls_without_a_seed_take_new_launches_and_a_host_seed_repeats_them(device):
    """(A key above 2**31: WebGPU's variables are 32-bit words, which must carry a uint32's bits.)"""
    real = _real(device)
    svod.random.seed(0xF00DF00D)
    first, second = np.zeros(100, real), np.zeros(100, real)
    unseeded(first, device=device)
    unseeded(second, device=device)
    assert not np.array_equal(first, second)
    svod.random.seed(0xF00DF00D)
    replay = np.zeros(100, real)
    unseeded(replay, device=device)
    assert replay.tolist() == first.tolist()
    expected = run_as_python(unseeded, np.zeros(100, real), launch=Launch(0xF00DF00D, 1), platform=_platform(device))[0]
    assert second.tolist() == expected.tolist()


def test_a_seed_in_the_kernel_gives_the_same_numbers_at_every_call():
    a, b, c = np.zeros(64), np.zeros(64), np.zeros(64)
    seeded(a, 5)
    seeded(b, 5)
    seeded(c, 6)
    assert a.tolist() == b.tolist()
    assert not np.array_equal(a, c)


# ---- ordinals ----------------------------------------------------------------------------------------------------

def test_draws_in_a_sequential_loop_differ_per_turn():
    svod.random.seed(8)
    paths = np.zeros((40, 33))
    walks(paths)
    assert all(len(set(row[1:].tolist())) == 32 for row in paths)
    expected = run_as_python(walks, np.zeros((40, 33)), launch=Launch(8, 0))[0]
    assert paths[:, 1:].tolist() == expected[:, 1:].tolist()
    assert np.allclose(paths[:, 0], expected[:, 0], rtol=0, atol=1e-12)  # a sum of normals, reassociated


def test_a_loop_whose_turns_draw_alike_computes_the_ordinal_from_the_turn():
    """Every turn draws three times: the ordinal is the turn's index times three, nothing is carried, and the
    sum of the draws is a reduction; where turns draw differently, the ordinal is carried in a register."""
    ast = uniform_walks.build(np.zeros(8), 5)
    assert not any(u.op is Ops.DEFINE_REG for u in ast.toposort())
    assert any(u.op is Ops.REDUCE for u in ast.toposort())
    assert any(u.op is Ops.DEFINE_REG for u in rejection.build(np.zeros((8, 3)), True).toposort())
    svod.random.seed(10)
    out = np.zeros(30)
    uniform_walks(out, 5)
    expected = run_as_python(uniform_walks, np.zeros(30), 5, launch=Launch(10, 0))[0]
    assert np.allclose(out, expected, rtol=1e-15, atol=0)


@pytest.mark.parametrize("flag", [True, False])
def test_ordinals_count_what_python_draws_through_branches_loops_and_tests(flag):
    """A while test that fails has drawn, the right side of ``or`` and a chained comparison draw only where
    Python evaluates them, a branch draws only where taken, a seed inside a work item restarts its stream."""
    report = svod.check(rejection, [np.zeros((200, 3)), flag], devices=["PYTHON", "CPU"], ulps=0)
    assert report.ok, str(report)


def test_helpers_draw_in_their_callers_stream_and_numpy_random_imported_by_name():
    report = svod.check(helpers, [np.zeros((100, 2))], devices=["PYTHON", "CPU"])
    assert report.ok, str(report)
    report = svod.check(serial, [np.zeros(20)], devices=["PYTHON", "CPU"], ulps=0)
    assert report.ok, str(report)
    report = svod.check(skipped, [np.zeros(20)], devices=["PYTHON", "CPU"], ulps=0)
    assert report.ok, str(report)


def test_a_nest_after_serial_code_that_draws_in_a_while_loop_has_its_own_stream():
    """The nest's stream is the count of nests, never the serial ordinal a ``while`` carries: a register of the
    work item that runs the serial code, which the nest's other work items (threads) do not see."""
    report = svod.check(serial_while_then_nest, [np.zeros(100, np.int32), np.zeros(2, np.int32)], ulps=0)
    assert report.ok, str(report)


def test_check_compares_a_drawing_kernel_with_plain_python_on_every_device():
    report = svod.check(every_draw, [np.zeros((40, 8)), 7])
    assert report.ok, str(report)
    report = svod.check(unseeded, [np.zeros(40)], ulps=0)
    assert report.ok, str(report)


def test_plain_python_leaves_numpys_generator_alone():
    np.random.seed(1)
    state = np.random.get_state()
    run_as_python(every_draw, np.zeros((10, 8)), 3)
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(state, np.random.get_state(), strict=True))


# ---- distributions -------------------------------------------------------------------------------------------

@svod.kernel
def samples(out, seed):
    np.random.seed(seed)
    for i in svod.prange(out.shape[0]):
        out[i, 0] = np.random.random()
        out[i, 1] = np.random.normal()
        out[i, 2] = np.random.exponential(2.0)
        out[i, 3] = np.random.randint(0, 10)


N = 400_000
KS_CRITICAL = ks_critical(N)



@pytest.fixture(scope="module")
def drawn() -> np.ndarray:
    out = np.zeros((N, 4))
    samples(out, 20240601)
    return out


def test_uniforms_are_uniform(drawn):
    u = drawn[:, 0]
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 0.002
    assert ks_statistic(u, lambda x: x) < KS_CRITICAL


def test_normals_are_normal(drawn):
    z = drawn[:, 1]
    assert abs(z.mean()) < 4 / math.sqrt(N)
    assert abs(z.var() - 1.0) < 0.01
    erf = np.frompyfunc(math.erf, 1, 1)
    assert ks_statistic(z, lambda x: 0.5 * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))) < KS_CRITICAL
    assert np.isfinite(z).all()


def test_exponentials_are_exponential(drawn):
    e = drawn[:, 2]
    assert e.min() >= 0.0 and np.isfinite(e).all()
    assert abs(e.mean() - 2.0) < 4 * 2.0 / math.sqrt(N)
    assert ks_statistic(e, lambda x: 1.0 - np.exp(-x / 2.0)) < KS_CRITICAL


def test_integers_cover_their_range_uniformly(drawn):
    counts = np.bincount(drawn[:, 3].astype(np.int64), minlength=10)
    assert len(counts) == 10 and counts.min() > 0
    expected = N / 10
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 27.88  # 9 degrees of freedom, 0.1% level


# ---- refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "message"), [
    ("out[i] = np.random.normal(1, 2, 3)", r"np.random.normal\(loc=0.0, scale=1.0\) draws one number in a kernel: "
                                          "the size of an array of draws is not supported"),
    ("out[i] = np.random.random(size=3)", "the size of an array of draws is not supported"),
    ("out[i] = np.random.uniform(0.0, 1.0, low=2.0)", "has no argument low left to pass"),
    ("out[i] = np.random.randint()", "low is missing"),
    ("out[i] = np.random.gamma(2.0)", "np.random.gamma is not supported in a kernel; it has exponential, normal"),
    ("out[i] = np.random.default_rng(1)", "np.random.default_rng is not supported in a kernel"),
    ("out[i] = np.random.randint(5, 5)", r"np.random.randint\(5, 5\) draws from an empty range"),
    ("out[i] = np.random.randint(0, 2 ** 33)", "one wider than a kernel draws from"),
    ("out[i] = np.random.randint(0.5, 3)", "np.random.randint takes integers"),
    ("out[i] = np.random.normal(out)", "np.random.normal takes numbers, not array out"),
    ("np.random.seed(-1)", r"np.random.seed takes an int in \[0, 2\*\*32\)"),
    ("np.random.seed(0.5)", r"np.random.seed takes an int in \[0, 2\*\*32\)"),
    ("out[i] = np.random.seed(1)", "np.random.seed has no value"),
])
def test_a_wrong_call_is_refused_at_its_line(tmp_path, line, message):
    kernel, path = _refused(tmp_path, line)
    with pytest.raises(KernelSyntaxError, match=message) as raised:
        kernel(np.zeros(4))
    assert f"{path}:7" in str(raised.value)


def test_draws_at_two_levels_of_a_nest_or_in_a_triangle_are_refused():
    with pytest.raises(KernelSyntaxError, match=r"draws in one svod.prange nest are made under one of its"):
        two_levels(np.zeros((3, 3)))
    with pytest.raises(KernelSyntaxError, match=r"a draw inside a svod.prange whose bound depends on an enclosing"):
        triangle(np.zeros((3, 3)))


# ---- plans ---------------------------------------------------------------------------------------------------------

@svod.jit
def jitted(out):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.random()


@svod.jit
def jitted_reduction(out, seed):
    total = 0.0
    for _i in svod.prange(out.shape[0]):
        np.random.seed(seed)
        total += np.random.random()
    return total


@svod.kernel
def seeding_loop(out):
    for t in range(out.shape[0]):
        np.random.seed(t)
        out[t] = np.random.random()


@svod.jit
def jitted_seeded(out, seed):
    for i in svod.prange(out.shape[0]):
        np.random.seed(seed)
        out[i] = np.random.random()


def test_a_plan_refuses_a_kernel_that_draws_from_the_process_generator():
    plan = svod.ExecutionPlan("CPU")
    slot = plan.add_buffer(svod.Buffer("CPU", dtypes.float64, 16))
    with pytest.raises(SvodError, match="draws random numbers from svod's process generator") as raised:
        plan.add_kernel(unseeded, [slot])
    assert "a plan replays its kernels with the values it fixed" in str(raised.value)
    with pytest.raises(KernelSyntaxError, match=r"a svod.prange that reduces a scalar runs as a sequential loop"):
        jitted_reduction(np.zeros(8), 1)


def test_a_jitted_function_gives_each_call_a_launch_of_the_process_generator():
    """Its plan takes the launch as a run's argument (svod.frontend.random_arrays): a prange that draws without
    a seed draws new numbers at every call, those of plain Python's run for the same launch."""
    svod.random.seed(21)
    first, second = np.zeros(8), np.zeros(8)
    jitted(first)
    jitted(second)
    assert not np.array_equal(first, second)
    expected = run_as_python(jitted, np.zeros(8), launch=Launch(21, 1))[0]
    assert second.tolist() == expected.tolist()


def test_a_kernel_that_seeds_runs_in_a_plan_with_the_same_numbers_every_run():
    plan = svod.ExecutionPlan("CPU")
    slot = plan.add_buffer(svod.Buffer("CPU", dtypes.float64, 16))
    plan.add_kernel(seeded, [slot], seed=77)
    plan.prepare()
    plan.execute()
    first = plan.buffers[slot].numpy()
    plan.execute()
    called = np.zeros(16)
    seeded(called, 77)
    assert plan.buffers[slot].numpy().tolist() == first.tolist() == called.tolist()
    out = np.zeros(8)
    jitted_seeded(out, 3)
    assert len(set(out.tolist())) == 8
    report = svod.check(jitted_seeded, [np.zeros(8), 3], devices=["PYTHON", "CPU"], ulps=0)
    assert report.ok, str(report)


def test_a_loop_that_seeds_before_each_draw_does_not_draw_from_the_process_generator():
    """It carries the generator's key from turn to turn (overwritten before each draw): the call passes the
    variables without taking a launch, and a plan holds it."""
    assert not seeding_loop.bind(np.zeros(4)).draws
    plan = svod.ExecutionPlan("CPU")
    slot = plan.add_buffer(svod.Buffer("CPU", dtypes.float64, 4))
    plan.add_kernel(seeding_loop, [slot])
    plan.prepare()
    plan.execute()
    called = np.zeros(4)
    seeding_loop(called)
    assert plan.buffers[slot].numpy().tolist() == called.tolist()
    assert called[0] == uniform_double(*philox4x32((0, 0, 0, 0), (0, 0))[:2])
    assert svod.check(seeding_loop, [np.zeros(6)], devices=["PYTHON", "CPU"], ulps=0).ok


def test_a_users_svod_named_int_is_held_as_numpy_holds_it() -> None:
    """A user's ``svod_n`` is the user's: 300 meeting int8 is refused as NumPy refuses it, not wrapped."""
    def add(a, svod_n):
        for i in range(a.shape[0]):
            a[i] = a[i] + svod_n
    a = np.zeros(3, np.int8)
    with pytest.raises(SvodError, match="svod_n"):
        svod.jit(add)(a, 300)
    assert (a == 0).all()
