"""``np.random`` in an ``@svod.jit`` function's own code (``svod.frontend.random_arrays``): arrays of draws, draws
of one number between phases, seeds, ``permutation`` and ``shuffle``, each the same bits as the function run as
plain Python with svod's generator as ``np.random``, on every device and thread count; the streams a call, a
loop around phases and a ``prange`` take; the distributions; and what is refused."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend.oracle import as_python, python_arguments
from svod.random.philox import PlainRandom, philox4x32, sort_key, uniform_double
from tests.frontend.test_arrays import line_of
from tests.helpers import cpu_device, ks_critical, ks_statistic

# ---- the functions -------------------------------------------------------------------------------------------


@svod.jit
def every_form(out, ints, seed):
    np.random.seed(seed)
    n = out.shape[1]
    out[0] = np.random.random(n)
    out[1] = np.random.uniform(-2.0, 3.0, n)
    out[2] = np.random.normal(1.0, 2.0, size=n)
    out[3] = np.random.standard_normal(n)
    out[4] = np.random.exponential(0.5, n)
    out[5] = np.random.rand(n)
    out[6] = np.random.randn(n)
    out[7] = np.random.standard_exponential(size=n)
    out[8] = 2.0 * np.random.random_sample(size=n) - 1.0
    ints[0] = np.random.randint(-3, 1000, n)
    ints[1] = np.random.randint(7, size=n)


@svod.jit
def shaped(seed, rows, cols):
    np.random.seed(seed)
    grid = np.random.random((rows, cols))
    same = np.random.rand(rows, cols)
    wide = np.random.normal(0.0, 1.0, (rows, 1)) + np.random.random(cols)  # broadcast: one draw per element
    return grid, same, wide


@svod.jit
def between_phases(x, p):
    u = np.random.random()
    if np.random.random() < p:  # a branch of the plan on a draw
        x[:] = np.random.random(x.shape[0]) + u
    else:
        x[:] = -np.random.random(x.shape[0])
    k = np.random.randint(0, 100) + np.random.randint(5)
    y = x * np.random.normal() + k  # one number for every element, as NumPy draws it
    return y, k


@svod.jit
def walk(pos, steps):
    for _t in range(steps):
        pos += np.random.random(pos.shape[0]) - 0.5  # new numbers at every turn
    return pos


@svod.jit
def interleaved(out, serial_out):
    serial_out[0] = np.random.random()
    a = np.random.random(out.shape[0])
    for i in svod.prange(out.shape[0]):  # a nest of the function's own: the next stream
        out[i] = np.random.random() + a[i]
    b = np.random.random(out.shape[0])
    serial_out[1] = np.random.random()
    return b


@svod.jit
def reseeded(out, seed):
    for t in range(out.shape[0]):
        np.random.seed(seed)  # every turn starts again: the same row
        out[t] = np.random.random(out.shape[1])


@svod.jit
def unseeded(out):
    out[:] = np.random.random(out.shape[0])


@svod.jit
def permuted(n, x, rows):
    p = np.random.permutation(n)
    q = np.random.permutation(x)
    np.random.shuffle(x)
    np.random.shuffle(rows)
    return p, q


@svod.jit
def reductions(n):
    mean = np.random.random(n).mean()
    inside = (np.random.random(n) ** 2 + np.random.random(n) ** 2 < 1.0).sum()
    return mean, inside


@svod.jit
def returned(n):
    return np.random.random(n), np.random.random()


@svod.jit
def serial_loop(x):
    for t in range(x.shape[0]):  # no phase inside: one kernel, its draws counted as Python counts them
        x[t] = np.random.random()
    return x


@svod.jit
def until_full(x, limit):
    total = 0.0
    while total < limit:
        x += np.random.random(x.shape[0])
        total = x.sum()
    return x


@svod.jit
def stops_early(x, p):
    for _t in range(100):
        x[:] = x + np.random.random(x.shape[0])
        u = np.random.random()
        if u < p:
            break
    return x


def normal_steps(n):
    return np.random.normal(0.0, 1.0, n)


@svod.jit
def helped(x):
    x[:] = normal_steps(x.shape[0]) + normal_steps(x.shape[0])  # a plain helper, compiled into the caller
    return x


@svod.jit
def updated(x):
    x += np.random.random()
    y = np.random.random(x.shape[0])
    y *= 2.0
    return y


@svod.jit
def shaped_as_a_temporary(n):
    t = np.zeros((n, 2))
    t[:] = np.random.random(t.shape) + np.random.randint(0, 3, len(t))[:, None]
    return t


@svod.jit
def unpacked_shape(a):
    rows, cols = a.shape
    a += np.random.random((rows, cols))
    return a


@svod.jit
def seeded_in_a_branch(x, s):
    if s > 0:
        np.random.seed(s)
        x[:] = np.random.random(x.shape[0])
    return np.random.random(x.shape[0])


# ---- helpers -------------------------------------------------------------------------------------------------

def _widths(device) -> tuple[bool, bool]:
    """Whether ``device`` computes float64, and whether its integers are 64-bit."""
    return dtypes.float64 in device.caps.element_dtypes, device.caps.index_bits > 32


def _real(device) -> type:
    return np.float64 if _widths(device)[0] else np.float32


def _integer(device) -> type:
    return np.int64 if _widths(device)[1] else np.int32


def _plain(fn, device, seed: int, launch: int, *args: Any) -> tuple[list[Any], Any]:
    """``fn`` run as plain Python with svod's generator for launch ``(seed, launch)`` in ``device``'s widths:
    its arguments after, and what it returns."""
    arguments = python_arguments(args)
    returned = as_python(fn, PlainRandom(seed, launch, *_widths(device)))(*arguments)
    return arguments, returned


def _run(fn, device, seed: int, *args: Any) -> tuple[list[Any], Any]:
    """``fn`` called on ``device`` after ``svod.random.seed(seed)`` (so its launch is (seed, 0))."""
    arguments = python_arguments(args)
    svod.random.seed(seed)
    return arguments, fn(*arguments, device=device)


def _values(result: Any) -> list[Any]:
    return [np.asarray(v).tolist() for v in (result if isinstance(result, tuple) else (result,))]


def _same_bits(fn, device, seed: int, *args: Any) -> tuple[list[Any], Any]:
    """``fn`` on ``device`` gives plain Python's arrays and values bit for bit (NaN-free draws: ``tolist``
    equality is bit equality up to the sign of zero, which no draw makes)."""
    got_args, got = _run(fn, device, seed, *args)
    want_args, want = _plain(fn, device, seed, 0, *args)
    for a, b in zip(got_args, want_args, strict=True):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert _values(got) == _values(want)
    return got_args, got


# ---- the numbers ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 13, 64])
def test_every_array_form_is_plain_pythons_on_every_device(device, n):
    """Each form bit for bit, on WebGPU too (its 32-bit forms: float32 and int32, as plain Python draws them
    there); each row a stream of its own."""
    got, _ = _same_bits(every_form, device, 4, np.zeros((9, n), _real(device)), np.zeros((2, n), _integer(device)), 99)
    again, _ = _run(every_form, device, 5, np.zeros((9, n), _real(device)), np.zeros((2, n), _integer(device)), 99)
    assert [a.tolist() for a in again[:2]] == [a.tolist() for a in got[:2]]  # the seed's, call after call
    out, ints = got[0], got[1]
    assert (out[0] >= 0).all() and (out[0] < 1).all() and (out[1] >= -2).all() and (out[1] < 3).all()
    assert (ints[0] >= -3).all() and (ints[0] < 1000).all() and (ints[1] >= 0).all() and (ints[1] < 7).all()
    if n > 1:
        assert len({tuple(row) for row in out.tolist()}) == 9


def test_shapes_broadcasts_and_dimensions(compiled_device):
    """An n-d draw's elements in C order; ``rand(r, c)`` is ``random((r, c))`` of the next stream; a draw
    broadcast into an expression is drawn once per element of its own shape."""
    if not _widths(compiled_device)[0]:  # the draws are float64, which the device holds none of: refused
        with pytest.raises(SvodError, match="float64"):
            _run(shaped, compiled_device, 3, 5, 4, 3)
        return
    _, (grid, same, wide) = _same_bits(shaped, compiled_device, 3, 5, 4, 3)
    assert grid.shape == same.shape == wide.shape == (4, 3) and not np.array_equal(grid, same)
    words = philox4x32((0, np.arange(12, dtype=np.uint64), 0, 1), (5, 0))
    assert grid.ravel().tolist() == uniform_double(words[0], words[1]).tolist()  # the documented layout


@pytest.mark.parametrize("p", [0.0, 1.0, 0.5])
def test_draws_of_one_number_between_phases(compiled_device, p):
    """Serial draws (stream 0) beside arrays of draws (their own streams), a branch of the plan on a draw, a
    number an array expression uses drawn once."""
    if _widths(compiled_device)[0]:
        _same_bits(between_phases, compiled_device, 8, np.zeros(5), p)
        return
    # float32 arithmetic of the same draws (WebGPU): plain Python's float64 values to float32's precision
    got_args, got = _run(between_phases, compiled_device, 8, np.zeros(5, np.float32), p)
    want_args, want = _plain(between_phases, compiled_device, 8, 0, np.zeros(5, np.float32), p)
    np.testing.assert_allclose(got_args[0], want_args[0], rtol=1e-6)
    for value, wanted in zip(_values(got), _values(want), strict=True):
        np.testing.assert_allclose(value, wanted, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 10])
def test_a_draw_in_a_loop_around_phases_takes_new_numbers_at_every_turn(device, n):
    got, _ = _same_bits(walk, device, 12, np.zeros(n, _real(device)), 4)
    one_turn, _ = _run(walk, device, 12, np.zeros(n, _real(device)), 1)
    assert not np.array_equal(got[0], 4 * one_turn[0])


@pytest.mark.parametrize(("fn", "args"), [
    (returned, (4,)), (serial_loop, (np.zeros(5),)), (until_full, (np.zeros(3), 5.0)),
    (stops_early, (np.zeros(3), 0.3)), (helped, (np.zeros(3),)), (updated, (np.zeros(3),)),
    (seeded_in_a_branch, (np.zeros(3), 5)), (seeded_in_a_branch, (np.zeros(3), 0)), (shaped_as_a_temporary, (3,)),
    (unpacked_shape, (np.zeros((3, 2)),))])
def test_draws_where_the_plan_returns_loops_breaks_branches_and_inlines(fn, args):
    _same_bits(fn, svod.get_device("CPU"), 10, *args)


def test_the_functions_prange_is_a_nest_of_the_launch_and_serial_draws_are_stream_0():
    _, b = _same_bits(interleaved, svod.get_device("CPU"), 6, np.zeros(5), np.zeros(2))
    words = philox4x32((0, np.arange(5, dtype=np.uint64), 0, 3), (6, 0))  # the third nest: a, the prange, b
    assert b.tolist() == uniform_double(words[0], words[1]).tolist()
    serial = [uniform_double(*philox4x32((k, 0, 0, 0), (6, 0))[:2]) for k in range(2)]
    got, _ = _run(interleaved, svod.get_device("CPU"), 6, np.zeros(5), np.zeros(2))
    assert got[1].tolist() == serial


def test_a_seed_gives_the_same_arrays_at_every_call_and_turn():
    out, again = np.zeros((3, 6)), np.zeros((3, 6))
    reseeded(out, 9)
    reseeded(again, 9)
    assert out.tolist() == again.tolist()
    assert out[0].tolist() == out[1].tolist() == out[2].tolist()
    assert out[0].tolist() == PlainRandom(9, 0).random(6).tolist()


def test_without_a_seed_each_call_takes_the_process_generators_next_launch(device):
    svod.random.seed(0xF00DF00D)
    first, second = np.zeros(20, _real(device)), np.zeros(20, _real(device))
    unseeded(first, device=device)
    unseeded(second, device=device)
    assert not np.array_equal(first, second)
    want, _ = _plain(unseeded, device, 0xF00DF00D, 1, np.zeros(20, _real(device)))
    assert second.tolist() == want[0].tolist()
    svod.random.seed(0xF00DF00D)
    unseeded(second, device=device)
    assert second.tolist() == first.tolist()


@pytest.mark.parametrize("n", [0, 1, 2, 7, 100])
def test_permutations_and_shuffles_are_plain_pythons(compiled_device, n):
    """A permutation is the stable order of its elements' 64-bit sort keys (one nest): of ``n``, of an
    array, of a 2-D array's rows (as NumPy shuffles along axis 0)."""
    if dtypes.uint64 not in compiled_device.caps.element_dtypes:
        with pytest.raises(KernelSyntaxError, match="holds no uint64 buffers, which a sort of uint64 keys needs"):
            permuted(n, np.arange(n, dtype=np.float32), np.zeros((n, 2), np.float32), device=compiled_device)
        return
    x, rows = np.arange(n) * 1.5, np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    (_, shuffled, shuffled_rows), (p, q) = _same_bits(permuted, compiled_device, 13, n, x, rows)
    assert sorted(p.tolist()) == list(range(n)) and p.dtype == np.int64
    assert sorted(q.tolist()) == sorted(x.tolist()) and sorted(shuffled.tolist()) == sorted(x.tolist())
    assert sorted(map(tuple, shuffled_rows.tolist())) == sorted(map(tuple, rows.tolist()))
    words = philox4x32((0, np.arange(n, dtype=np.uint64), 0, 1), (13, 0))
    assert p.tolist() == np.argsort(sort_key(words[0], words[1], True), kind="stable").tolist()


def test_the_numbers_do_not_depend_on_threads_or_compiler():
    """10007 elements split over 1 and 2 threads, by either CPU compiler: the same bits (a sum of them, which
    svod may reassociate, to 1e-12)."""
    results = []
    for threads, compiler in [(1, "llvm"), (2, "llvm"), (2, "clang")]:
        device = cpu_device(threads, compiler)
        got, _ = _run(every_form, device, 1, np.zeros((9, 10007)), np.zeros((2, 10007), np.int64), 5)
        _, (p, _) = _run(permuted, device, 1, 10007, np.zeros(3), np.zeros((3, 1)))
        _, (mean, inside) = _run(reductions, device, 1, 10007)
        results.append((got[0], got[1], p, mean, inside))
    for out, ints, p, mean, inside in results[1:]:
        assert out.tobytes() == results[0][0].tobytes() and ints.tobytes() == results[0][1].tobytes()
        assert p.tolist() == results[0][2].tolist() and inside == results[0][4]
        assert math.isclose(mean, results[0][3], rel_tol=0, abs_tol=1e-12)


def test_check_compares_a_drawing_function_with_plain_python():
    for fn, args in [(every_form, [np.zeros((9, 5)), np.zeros((2, 5), np.int64), 3]), (walk, [np.zeros(4), 3]),
                     (permuted, [4, np.arange(3.0), np.zeros((2, 2))]), (unseeded, [np.zeros(6)])]:
        report = svod.check(fn, args, devices=["PYTHON", "CPU"], ulps=0)
        assert report.ok, str(report)


def test_compiling_and_running_leave_numpys_generator_alone():
    np.random.seed(1)
    state = np.random.get_state()
    between_phases(np.zeros(3), 0.5)
    permuted(3, np.arange(3.0), np.zeros((3, 1)))
    with pytest.raises(KernelSyntaxError):  # its array statement rewritten in the prange: nothing drawn on the host
        sized_in_a_prange(np.zeros(2))
    as_python(between_phases, PlainRandom(1, 0))(np.zeros(3), 0.5)
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(state, np.random.get_state(), strict=True))


# ---- distributions -------------------------------------------------------------------------------------------

N = 1_000_000
KS_CRITICAL = ks_critical(N)


@svod.jit
def samples(n, seed):
    np.random.seed(seed)
    return (np.random.random(n), np.random.standard_normal(n), np.random.exponential(2.0, n),
            np.random.randint(0, 10, n))



@pytest.fixture(scope="module")
def drawn() -> tuple[np.ndarray, ...]:
    return samples(N, 20240601)


def test_uniforms_are_uniform(drawn):
    u = drawn[0]
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 4 * math.sqrt(1 / 180 / N)
    assert ks_statistic(u, lambda x: x) < KS_CRITICAL


def test_normals_are_normal(drawn):
    z = drawn[1]
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 4 / math.sqrt(N)
    assert abs(z.var() - 1.0) < 4 * math.sqrt(2 / N)
    erf = np.frompyfunc(math.erf, 1, 1)
    assert ks_statistic(z, lambda x: 0.5 * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))) < KS_CRITICAL


def test_exponentials_and_integers(drawn):
    e, k = drawn[2], drawn[3]
    assert e.min() >= 0.0 and abs(e.mean() - 2.0) < 4 * 2.0 / math.sqrt(N)
    assert ks_statistic(e, lambda x: 1.0 - np.exp(-x / 2.0)) < KS_CRITICAL
    counts = np.bincount(k, minlength=10)
    assert len(counts) == 10 and float(((counts - N / 10) ** 2 / (N / 10)).sum()) < 27.88  # 9 dof, 0.1% level


def test_a_permutation_is_uniform_over_the_orders():
    """Each of the 6 orders of 3 elements, from 6000 unseeded calls (each its own launch)."""
    svod.random.seed(77)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(6000):
        p, _q = permuted(3, np.zeros(1), np.zeros((1, 1)))
        counts[tuple(p.tolist())] = counts.get(tuple(p.tolist()), 0) + 1
    assert len(counts) == 6
    assert float(sum((c - 1000) ** 2 / 1000 for c in counts.values())) < 20.52  # 5 dof, 0.1% level


# ---- refusals ------------------------------------------------------------------------------------------------

@svod.jit
def unknown_function(n):
    return np.random.gamma(2.0, size=n)


@svod.jit
def conditional_scalar(x, c):
    y = x + (np.random.random() if c > 0 else 0.0)
    return y


@svod.jit
def drawing_while_test(x):
    while np.random.random() < 0.5:
        x[:] = x + 1.0
    return x


@svod.jit
def array_in_while_test(x):
    while np.random.random(3).sum() < 1.0:
        x += 1.0
    return x


@svod.jit
def array_parameters(x):
    y = np.random.uniform(x, 1.0, x.shape[0])
    return y


@svod.jit
def negative_size(n):
    y = np.random.random(-n)
    return y


@svod.jit
def seed_out_of_range(x):
    np.random.seed(-1)
    x[:] = np.random.random(x.shape[0])


@svod.jit
def shuffle_in_an_expression(x):
    y = np.random.shuffle(x)
    return y


@svod.jit
def permutation_of_a_negative(n):
    return np.random.permutation(-n)


@svod.jit
def size_of_an_element(x):
    n = int(x[0])  # the host does not know it before the run
    return np.random.random(n)


@svod.jit
def permutation_of_an_element(x):
    return np.random.permutation(x[0])


@svod.jit
def empty_range(n):
    return np.random.randint(5, 5, n)


@svod.jit
def drawn_bounds(x):
    for _t in range(np.random.randint(1, 3)):
        x += np.random.random(x.shape[0])
    return x


@svod.jit
def sized_in_a_prange(out):
    for i in svod.prange(out.shape[0]):
        out[i] = np.random.random(3).sum()


@svod.jit
def permutation_of_a_turns_prefix(x, out):
    for i in range(1, x.shape[0]):
        out[i] = np.random.permutation(x[:i]).sum()


@svod.jit
def size_of_a_loops_variable(out):
    for i in range(1, 4):
        out[:i] = np.random.random(i)


@pytest.mark.parametrize(("fn", "args", "statement", "says"), [
    (sized_in_a_prange, (np.zeros(3),), "out[i] = np.random.random(3)", "the size of an array of draws is not "
                                                                      "supported here"),
    (permutation_of_a_turns_prefix, (np.ones(3), np.zeros(3)), "np.random.permutation(x[:i])",
     "whose length is known only as the function runs"),
    (size_of_a_loops_variable, (np.zeros(3),), "np.random.random(i)", "i is computed as the function runs"),
    (size_of_an_element, (np.ones(3),), "np.random.random(n)", "n is computed as the function runs"),
    (permutation_of_an_element, (np.ones(3),), "np.random.permutation(x[0])", "it reads an array's element"),
    (empty_range, (3,), "np.random.randint(5, 5, n)", r"np.random.randint\(5, 5\) draws from an empty range"),
    (drawn_bounds, (np.zeros(3),), "for _t in range", "a loop around phases has bounds the host knows; a draw"),
    (unknown_function, (3,), "np.random.gamma", "np.random.gamma is not one svod's generator has in a jitted "
                                                 "function; it has exponential"),
    (conditional_scalar, (np.zeros(3), 1), "y = x + (", "an array expression draws this number on some paths only"),
    (drawing_while_test, (np.zeros(3),), "while np.random.random()", "the test of a while loop around phases draws"),
    (array_in_while_test, (np.zeros(3),), "while np.random.random(3)", "an array of draws in the test of a while"),
    (array_parameters, (np.zeros(3),), "np.random.uniform(x", r"takes a number as low in a jitted function, not an"),
    (negative_size, (2,), "np.random.random(-n)", "an array of draws has a shape of non-negative ints"),
    (seed_out_of_range, (np.zeros(3),), "np.random.seed(-1)", r"np.random.seed takes an int in \[0, 2\*\*32\)"),
    (shuffle_in_an_expression, (np.zeros(3),), "y = np.random.shuffle", "call it as a statement of its own"),
    (permutation_of_a_negative, (2,), "np.random.permutation(-n)", "of a negative number"),
])
def test_what_svod_cannot_carry_is_refused_at_its_line(fn, args, statement, says):
    with pytest.raises(KernelSyntaxError, match=says) as raised:
        fn(*args)
    assert f"test_random_arrays.py:{line_of(fn, statement)}:" in str(raised.value)
