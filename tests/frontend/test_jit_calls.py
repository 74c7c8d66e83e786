"""Calls as Python makes them in ``@svod.jit`` functions: arguments bound by position, by keyword and by default
(``svod.frontend.binding``), in the jitted function and in the functions it calls; a called function's early
returns (``svod.frontend.returns``), in host code, in a ``prange`` loop's body and in a kernel's ``@svod.func``;
a call like one before with arrays laid out otherwise (its generated dispatcher, ``svod.frontend.jit_dispatch``).
Each is compared with the same function run as plain Python, on every device; a refusal is asserted with its
message and line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod import prange
from svod.errors import KernelSyntaxError, RaceError, SvodError
from svod.frontend.oracle import run_as_python
from tests.frontend.test_arrays import kernels_of, line_of
from tests.frontend.test_jit import agrees_with_python
from tests.helpers import refuses

SIZES = (0, 1, 2, 7, 13)


def data(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 values of both signs, with a NaN, -0.0 and an infinity among the first ones."""
    values = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    values[:3] = [np.nan, -0.0, np.inf][:min(n, 3)]
    return values


def line_in(fn: object, text: str) -> int:
    """The line of plain function ``fn``'s file that holds ``text``."""
    lines, first = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return first + next(k for k, line in enumerate(lines) if text in line)


# ---- a jitted function's defaults and keywords --------------------------------------------------------------

@svod.jit
def affine(x, scale=2.0, shift=0, *, out_dtype=np.float32, pad=(1,)):
    out = np.zeros(x.shape[0] + pad[0], out_dtype)
    for i in prange(x.shape[0]):
        out[i] = x[i] * scale + shift
    return out


@pytest.mark.parametrize("n", SIZES)
def test_arguments_bind_by_position_keyword_and_default(device, n):
    x = data(n)
    agrees_with_python(affine, device, x)
    agrees_with_python(affine, device, x, 0.5, keywords={"shift": 3, "pad": (2,)})
    agrees_with_python(affine, device, x, keywords={"scale": -1.5, "out_dtype": np.float32, "shift": -7})


def test_a_plan_is_prepared_for_each_constant_not_for_each_number():
    x = np.ones(3, np.float32)
    first = affine.plan(x)  # scale and shift left to their defaults: constants of the plan
    assert affine.plan(x, 2.0) is not first  # the default spelled out is the run's number
    assert affine.plan(x, scale=5.0, shift=9) is affine.plan(x, 2.0, 0)  # numbers passed are the run's
    assert affine.plan(x, -1.0) is affine.plan(x, scale=3.5)
    assert affine.plan(x, pad=(2,)) is not first  # a constant is the plan's
    assert affine.plan(x, out_dtype=np.float64) is not affine.plan(x, out_dtype=np.float32)
    assert affine(x, out_dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(affine(x, pad=(3,)), [2, 2, 2, 0, 0, 0])


@svod.jit
def crc16(data, poly=0x8408):
    """npbench's CRC (its numba version, as written): ``poly`` left to its default is folded into the loop."""
    crc = 0xFFFF
    for b in data:
        cur_byte = 0xFF & b
        for _ in range(0, 8):
            if (crc & 0x0001) ^ (cur_byte & 0x0001):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            cur_byte >>= 1
    crc = (~crc & 0xFFFF)
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF


@pytest.mark.parametrize("n", (*SIZES, 1000))
def test_a_number_left_to_its_default_is_a_constant_and_one_passed_is_the_runs(device, n):
    """An omitted number is folded into the kernels, as numba compiles an omitted argument; the same parameter
    passed (the default's value or another) is the run's scalar: each call gets its own value's answer."""
    byte = np.int32 if refuses(device, svod.dtypes.uint8) else np.uint8  # WebGPU's narrowest integer
    n = min(n, 101) if device.name == "PYTHON" else n  # the reference interprets every byte's 8 turns
    data = np.random.default_rng(n).integers(0, 256, n).astype(byte)
    for poly in ((), (0x8408,), (0xA001,), (0,), (0xFFFF,)):
        agrees_with_python(crc16, device, data, *poly)
    agrees_with_python(crc16, device, data)  # the folded plan again, after the run's
    assert "poly" not in crc16.plan(data, device=device).variables
    assert "poly" in crc16.plan(data, 0x8408, device=device).variables
    assert crc16(data, device=device) == crc16(data, poly=0x8408, device=device)


@svod.jit
def upper_products(n, x):
    """nussinov's shape: a table of the size the host reads, filled by loops whose bounds are that size."""
    table = np.zeros((n, n), x.dtype)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            table[i, j] = max(table[i, j - 1], x[i] * x[j])
            for k in range(i + 1, j):
                table[i, j] = max(table[i, j], table[i, k] + table[k + 1, j])
    return table


@svod.jit
def grown(n, x):
    """The same size, assigned: the run's, never a constant."""
    head = np.zeros(n, x.dtype)
    n = n + 1
    tail = np.full(n, x[0])
    for i in prange(head.shape[0]):
        head[i] = x[i] * n
    return head, tail


@pytest.mark.parametrize("n", SIZES)
def test_an_int_the_host_reads_is_a_constant_of_the_kernels(device, n):
    """The plan is made for the value of a number that sizes a temporary, so its kernels see that value: their
    loops' bounds and the table's shape are then one number, which proves the accesses inside the table. Another value
    is another plan; a number the function assigns stays the run's."""
    x = np.random.default_rng(n).uniform(-1, 1, 13).astype(np.float32)
    for m in (n, 13, n):
        agrees_with_python(upper_products, device, m, x)
        agrees_with_python(grown, device, m, x)
    plan = upper_products.plan(n, x, device=device)
    assert "n" not in plan.variables
    assert upper_products.plan(n + 1, x, device=device) is not plan
    assert "n" in grown.plan(n, x, device=device).variables


INT64_TOP, INT8_BOTTOM, FLOAT32_TENTH = np.iinfo(np.int64).max, np.int8(-128), np.float32(0.1)


@svod.jit
def edge_defaults(x, zero=-0.0, top=INT64_TOP, low=INT8_BOTTOM, nan=np.nan, flag=True, tenth=FLOAT32_TENTH,
                  huge=2**64):
    out = np.zeros((7, x.shape[0]))
    for i in prange(x.shape[0]):
        out[0, i] = zero * x[i]
        out[1, i] = top // 2**40 + x[i]
        out[2, i] = low + x[i]
        out[3, i] = nan + x[i]
        out[4, i] = x[i] if flag else -x[i]
        out[5, i] = tenth * x[i]
        out[6, i] = huge + x[i]
    return out


@pytest.mark.parametrize("n", SIZES)
def test_defaults_at_the_edges_fold_to_their_exact_values(device, n):
    """-0.0 keeps its sign, int64's top and int8's bottom their widths, a NaN stays one (and one plan: a NaN
    default keys as itself), a float32 default its dtype, an int past 64 bits the float Python makes of it."""
    x = data(n).astype(np.float64)
    x[np.isnan(x)] = 1.5
    if refuses(device, svod.dtypes.float64):  # WebGPU: the float64 array the function makes is refused
        with pytest.raises(SvodError, match="cannot hold float64, the dtype of out"):
            edge_defaults(x.astype(np.float32), device=device)
        return
    agrees_with_python(edge_defaults, device, x, typed=True, numpy_warns=True)
    agrees_with_python(edge_defaults, device, x, keywords={"zero": 0.0, "flag": False}, typed=True,
                       numpy_warns=True)
    assert edge_defaults.plan(x, device=device) is edge_defaults.plan(x, device=device)


@svod.jit
def assigns_a_defaulted_number(x, steps=3):
    steps = steps * 2
    total = 0.0
    for _ in range(steps):
        for i in range(x.shape[0]):
            total += x[i]
    return total


def test_a_defaulted_number_the_function_assigns_stays_the_runs(device):
    """A parameter the function assigns is a local of the plan, never folded: left to its default it runs as a
    passed one does."""
    x = data(7)[3:]
    agrees_with_python(assigns_a_defaulted_number, device, x)
    agrees_with_python(assigns_a_defaulted_number, device, x, 5)
    assert "steps" in assigns_a_defaulted_number.plan(x, device=device).variables


SEEN = np.zeros(3, np.float32)


@svod.jit
def tally(x, seen=SEEN):
    for i in prange(seen.shape[0]):
        seen[i] += x[i]
    return seen


def test_an_array_default_is_the_one_array_python_keeps(device):
    """Python's default is one array, updated in place from call to call: so is svod's."""
    SEEN[:] = 0
    tally(np.ones(3, np.float32), device=device)
    returned = tally(np.full(3, 2.0, np.float32), device=device)
    assert returned is SEEN
    np.testing.assert_array_equal(SEEN, [3, 3, 3])


def star_parameters(x, *rest):
    return x


def star_keywords(x, **options):
    return x


def named_device(x, device):
    return x


@svod.jit
def assigns_its_constant(x, dtype=None):
    dtype = x.dtype
    out = np.zeros(x.shape[0], dtype)
    return out


def test_what_a_jitted_function_cannot_take_is_refused():
    with pytest.raises(KernelSyntaxError, match=r"parameter \*rest takes any number of arguments, which svod does "
                                                r"not \(no \*args or \*\*kwargs\)"):
        svod.jit(star_parameters)
    with pytest.raises(KernelSyntaxError, match=r"parameter \*\*options takes any number of arguments"):
        svod.jit(star_keywords)
    with pytest.raises(KernelSyntaxError, match="parameter device has the name of svod's own keyword"):
        svod.jit(named_device)
    with pytest.raises(KernelSyntaxError) as raised:
        assigns_its_constant(np.zeros(2))
    assert f"test_jit_calls.py:{line_of(assigns_its_constant, 'dtype = x.dtype')}: dtype is None, a constant of " \
           "the plan" in str(raised.value)


@pytest.mark.parametrize(("args", "keywords", "words"), [
    ((), {}, "missing a required argument: 'x'"),
    ((np.zeros(2), 1.0, 2, 3), {}, "too many positional arguments"),
    ((np.zeros(2),), {"scal": 1.0}, "got an unexpected keyword argument 'scal'"),
    ((np.zeros(2), 1.0), {"scale": 1.0}, "multiple values for argument 'scale'"),
    ((np.zeros(2),), {"scale": [1.0]}, "argument scale is list"),
])
def test_a_call_python_refuses_is_refused_in_pythons_words(args, keywords, words):
    with pytest.raises(KernelSyntaxError, match=words):
        affine(*args, **keywords)


# ---- the defaults and keywords of a function it calls -------------------------------------------------------

def shifted(v, by=1.0, *, times=2):
    return (v + by) * times


def padded(x, pad=(1, 1), dtype=np.float32):
    out = np.zeros(x.shape[0] + pad[0] + pad[1], dtype)
    for i in prange(x.shape[0]):
        out[i + pad[0]] = x[i]
    return out


@svod.jit
def calls_with_defaults(x):
    a = padded(x)
    b = padded(x, (2, 0))
    c = padded(pad=(0, 3), x=x, dtype=np.float32)
    for i in prange(x.shape[0]):
        x[i] = shifted(x[i]) + shifted(x[i], times=3) + shifted(x[i], 0.5, times=1)
    return a, b, c


@pytest.mark.parametrize("n", SIZES)
def test_a_called_function_binds_keywords_and_defaults_in_host_code_and_in_a_prange(device, n):
    agrees_with_python(calls_with_defaults, device, data(n), rtol=1e-6)


def accumulate(x, into=SEEN):
    into += x


@svod.jit
def calls_with_an_array_default(x):
    accumulate(x)


def spread(*values):
    return values[0]


@svod.jit
def calls_with_star_parameters(x):
    y = spread(x)
    return y


@svod.jit
def calls_with_a_wrong_keyword(x):
    for i in prange(x.shape[0]):
        x[i] = shifted(x[i], bye=1)


@pytest.mark.parametrize(("fn", "call", "words"), [
    (calls_with_an_array_default, "accumulate(x)", "accumulate's parameter into defaults to an array"),
    (calls_with_star_parameters, "y = spread(x)", r"spread: parameter \*values takes any number of arguments"),
    (calls_with_a_wrong_keyword, "shifted(x[i], bye=1)", "got an unexpected keyword argument 'bye'"),
])
def test_a_call_svod_cannot_bind_is_refused_at_its_line(fn, call, words):
    with pytest.raises(KernelSyntaxError, match=words) as raised:
        fn(np.zeros(3, np.float32))
    assert f"test_jit_calls.py:{line_of(fn, call)}:" in str(raised.value)


# ---- early returns ------------------------------------------------------------------------------------------

def match(b1, b2):
    if b1 + b2 == 3:
        return 1
    else:
        return 0


def first_index(x, v):
    for i in range(x.shape[0]):
        if x[i] == v:
            return i
    return -1


def clamp(v, low, high):
    if v < low:
        return low
    if v > high:
        return high
    return v


@svod.jit
def pairs(seq, out):
    n = seq.shape[0]
    total = 0
    for i in range(n):  # sequential code: one kernel
        for j in range(i + 1, n):
            total += match(seq[i], seq[j])
    for i in prange(n):
        out[i] = first_index(seq, 3 - seq[i]) + clamp(seq[i] * 2, 1, 4) * 10
    return total


@pytest.mark.parametrize("n", SIZES)
def test_early_returns_of_a_called_function_in_sequential_code_and_in_a_prange(device, n):
    seq = np.random.default_rng(n).integers(0, 4, n)
    agrees_with_python(pairs, device, seq, np.zeros(n, np.int64))


def halved_or_not(x, c):
    if c > 0:
        for i in prange(x.shape[0]):
            x[i] += 1.0
        return 0.5
    for i in prange(x.shape[0]):
        x[i] -= 1.0
    return 2.0


@svod.jit
def scales_by_what_it_returns(x, c):
    r = halved_or_not(x, c)
    for i in prange(x.shape[0]):
        x[i] = x[i] * r
    return r


@pytest.mark.parametrize("c", [1, -1])
def test_an_early_return_between_phases_returns_the_branch_taken(device, c):
    """Each branch holds a phase (the plan's branch) and returns its own scalar: the value read after is the
    branch's that ran."""
    agrees_with_python(scales_by_what_it_returns, device, data(5), c)


def bump(x):
    x += 1.0
    return 0


def bumps(x, twice):
    if twice:
        bump(x)
        return bump(x) + 1
    return bump(x)


@svod.jit
def drops_what_bumps_returns(x, twice):
    bumps(x, twice)
    return x


@pytest.mark.parametrize("twice", [True, False])
def test_a_value_the_caller_drops_still_makes_its_calls(device, twice):
    agrees_with_python(drops_what_bumps_returns, device, data(3), twice)


def factorial(n):
    if n <= 1:
        return 1
    return n * factorial(n - 1)


@svod.jit
def recursive(x, n):
    for i in prange(x.shape[0]):
        x[i] = factorial(n)


def maybe(v):
    if v > 0:
        return v


@svod.jit
def uses_what_may_be_none(x):
    for i in prange(x.shape[0]):
        x[i] = maybe(x[i])


def test_recursion_and_a_value_returned_on_some_ways_only_are_refused_at_their_lines():
    with pytest.raises(KernelSyntaxError, match="factorial calls itself: recursion is not supported") as raised:
        recursive(np.zeros(2), 3)
    assert f"test_jit_calls.py:{line_in(factorial, 'return n * factorial')}:" in str(raised.value)
    with pytest.raises(KernelSyntaxError, match="maybe returns a value on some ways through it only") as raised:
        uses_what_may_be_none(np.zeros(2))
    assert f"test_jit_calls.py:{line_of(uses_what_may_be_none, 'x[i] = maybe(x[i])')}:" in str(raised.value)


@svod.func
def sign_of(v):
    if v > 0:
        return 1.0
    if v < 0:
        return -1.0
    return 0.0


@svod.func
def position(keys, v):
    for i in range(keys.shape[0]):
        if keys[i] == v:
            return i
    return -1


@svod.kernel
def classify(out, x, keys):
    for i in prange(x.shape[0]):
        out[i] = sign_of(x[i]) + position(keys, x[i]) * 10.0


@pytest.mark.parametrize("n", SIZES)
def test_a_kernels_helper_returns_early(device, n):
    x, keys = data(n), np.array([np.inf, -0.0, 1.5, np.nan], np.float32)
    if n > 3:
        x[3] = 1.5
    want = run_as_python(classify, np.zeros(n, np.float32), x, keys)[0]
    got = np.zeros(n, np.float32)
    classify(got, x, keys, device=device)
    np.testing.assert_array_equal(got, want)


# ---- an element of the tuple a called function returns ------------------------------------------------------

def bin_of(v, edges):
    """The bin of ``v`` among equal bins, the last one closed on the right: its edge returns early."""
    n = edges.shape[0] - 1
    if v == edges[-1]:
        return n - 1
    return int(n * (v - edges[0]) / (edges[-1] - edges[0]))


def binned(a, edges):
    which = np.zeros(a.shape[0], np.int32)
    counts = np.zeros(edges.shape[0] - 1, np.int32)
    for i in prange(a.shape[0]):
        which[i] = bin_of(a[i], edges)
    for i in range(a.shape[0]):
        counts[which[i]] += 1
    return counts, which


@svod.jit
def counts_then_bins(a, edges):
    counts = binned(a, edges)[0]
    return counts, binned(a, edges)[-1] * 2


@svod.jit
def takes_a_third_of_two(a, edges):
    third = binned(a, edges)[2]
    return third


@pytest.mark.parametrize("n", [0, 1, 7, 13])
def test_an_element_of_a_returned_tuple_makes_the_whole_call(device, n):
    """``f(...)[0]`` and ``f(...)[-1]`` of a function that returns two arrays (each element made, as Python makes
    them), whose helper returns early at the last edge."""
    a = np.random.default_rng(n).uniform(0.0, 1.0, n)
    a[:2] = [1.0, 0.0][:n]
    agrees_with_python(counts_then_bins, device, a, np.linspace(0.0, 1.0, 5))


def test_an_element_past_a_returned_tuple_is_refused_at_its_line():
    with pytest.raises(KernelSyntaxError, match="binned returns a tuple of 2, which has no element 2") as raised:
        takes_a_third_of_two(np.zeros(3), np.linspace(0.0, 1.0, 5))
    assert f"test_jit_calls.py:{line_of(takes_a_third_of_two, 'third = binned')}:" in str(raised.value)


# ---- an array a called function makes in a loop --------------------------------------------------------------

def pulls(pos):
    d = pos[:, None] - pos[None, :]
    pulled = d.sum(axis=1)
    return pulled


@svod.jit
def drifts_through_a_new_array(pos, steps):
    acc = pulls(pos)
    for _t in range(steps):
        pos += acc * 0.01
        acc = pulls(pos)
    return pos


def pulls_into(pos, out):
    d = pos[:, None] - pos[None, :]
    out[:] = d.sum(axis=1)


@svod.jit
def drifts_in_place(pos, steps):
    acc = np.empty_like(pos)
    pulls_into(pos, acc)
    for _t in range(steps):
        pos += acc * 0.01
        pulls_into(pos, acc)
    return pos


def damped(pos, before):
    d = pos[:, None] - pos[None, :]
    pulled = d.sum(axis=1) + 0.5 * before
    return pulled


@svod.jit
def drifts_through_a_damped_array(pos, steps):
    acc = np.zeros_like(pos)
    for _t in range(steps):
        acc = damped(pos, acc)
        pos += acc * 0.01
    return pos


@pytest.mark.parametrize("n", SIZES)
def test_a_called_functions_new_array_bound_in_a_loop_is_the_callers_name_itself(device, n):
    """``acc = pulls(pos)`` in a loop: the array ``pulls`` returns is made under the caller's name, as the binding
    ``acc = d.sum(axis=1)`` written in the loop would be; the same before the loop."""
    agrees_with_python(drifts_through_a_new_array, device, data(n, 3), 4, numpy_warns=True)


def test_a_called_functions_new_array_in_a_loop_that_reads_the_callers_name_is_refused_there():
    """Where the call reads the name it assigns (``acc = damped(pos, acc)``), the function's array is a new one
    each turn while the caller's name holds the last: the refusal names the caller's name at the call's line and
    the function's array in the user's words, never svod's own name for it."""
    with pytest.raises(KernelSyntaxError, match=r"acc is bound to pulled \(of damped\), which is a new array \(made "
                                                r"at line \d+\) in every turn of a loop around phases") as raised:
        drifts_through_a_damped_array(np.arange(5.0), 3)
    assert f"test_jit_calls.py:{line_of(drifts_through_a_damped_array, '        acc = damped(pos, acc)')}:" in \
        str(raised.value)
    assert "_svod_" not in str(raised.value)


@pytest.mark.parametrize("n", SIZES)
def test_a_called_function_that_stores_into_the_callers_array_runs_in_a_loop(device, n):
    """What the refusal above says to write: the caller's array, made once, passed to the function."""
    agrees_with_python(drifts_in_place, device, data(n, 3), 4, numpy_warns=True)


# ---- a race in a called function ----------------------------------------------------------------------------

def softmax(x):
    tmp_max = np.empty((x.shape[0], 1), dtype=x.dtype)
    for i in prange(x.shape[1]):
        tmp_max[:, 0] = np.max(x[:, i])
    out = np.exp(x - tmp_max)
    return out / np.reshape(np.sum(out, axis=-1), (x.shape[0], 1))


@svod.jit
def classifies(x):
    return softmax(x * 2.0)


def test_work_items_that_each_write_a_whole_column_are_refused_at_the_store():
    """npbench's softmax (its mlp): every work item writes all of ``tmp_max[:, 0]``, each its own column's
    maximum, where Python leaves the last column's; in parallel, whichever item writes last wins (numba's result
    changes from run to run). Refused, naming the array as the function calls it and the store's line."""
    with pytest.raises(svod.errors.GraphError, match=r"the store to tmp_max \(of softmax\) takes its value from "
                                                     "work items of a parallel loop") as raised:
        classifies(np.random.default_rng(0).standard_normal((3, 5)))
    assert isinstance(raised.value, RaceError) and raised.value.stage == "lower"
    assert f"test_jit_calls.py:{line_in(softmax, 'tmp_max[:, 0] = np.max')})" in str(raised.value)


# ---- a call like one before: arrays of the same dtypes and shapes, laid out otherwise -----------------------

def blend(out, a, b, w):
    tmp = np.zeros(a.shape[0], a.dtype)
    for i in prange(a.shape[0]):
        tmp[i] = a[i] * w
    for i in prange(a.shape[0]):
        out[i] = tmp[i] + b[i]


N = 6


def _zeros(n: int = N) -> np.ndarray:
    return np.zeros(n, np.float32)


def _values(array: np.ndarray, start: float = 0.0) -> np.ndarray:
    array[...] = np.arange(start, start + array.size)
    return array


def _row(start: float = 0.0) -> np.ndarray:
    return _values(_zeros(), start)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _overlapping() -> tuple[np.ndarray, np.ndarray]:
    both = _values(_zeros(N + 3))
    return both[:N], both[3:]


def _twice(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return array, array


LAYOUTS = {  # each call's arguments (out, a, b, w), made afresh (w as before: a number's value is in the call key)
    "strided input": lambda: (_zeros(), _values(_zeros(2 * N))[::2], _row(5.0), 2.0),
    "strided output": lambda: (_zeros(2 * N)[::2], _row(), _row(5.0), 2.0),
    "read-only input": lambda: (_zeros(), _frozen(_row()), _row(5.0), 2.0),
    "read-only output": lambda: (_frozen(_zeros()), _row(), _row(5.0), 2.0),
    "misaligned input": lambda: (_zeros(), _values(np.zeros(N * 4 + 1, np.uint8)[1:].view(np.float32)), _row(), 2.0),
    "one array read twice": lambda: (_zeros(), *_twice(_row(1.0)), 2.0),
    "output overlapping an input": lambda: (*_overlapping(), _row(), 2.0),
    "output that is an input": lambda: (*_twice(_row()), _row(), 2.0),
}


def _outcome(fn: svod.frontend.jit.Jit, args: tuple[object, ...], device: object) -> tuple[object, ...] | None:
    """None where the call ran; the error it raised, as what tells one from another."""
    try:
        fn(*args, device=device)
    except svod.errors.SvodError as err:
        return type(err), str(err), err.stage, err.kernel, err.value
    return None


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_call_like_one_before_takes_an_array_as_a_first_call_does(device, layout):
    """A call whose arrays have the dtypes and shapes of one before binds through what that call prepared, which
    checks only what such arrays may change: an array that is not contiguous, aligned, writeable where written
    or apart from a written one is still copied, or refused with the words of a first call with it."""
    warmed = svod.jit(blend)
    for start in (1.0, 2.0):  # the second is a call like the first
        out, a, b = _zeros(), _row(start), _row(-start)
        warmed(out, a, b, 2.0, device=device)
        np.testing.assert_array_equal(out, a * 2.0 + b)
    if device.name == "CPU":  # there, arrays are used in place: the call key keeps a binder
        assert [call.prepared.binder is not None for call in warmed._calls.values()] == [True]
    args = LAYOUTS[layout]()
    before = [np.copy(a) for a in args if isinstance(a, np.ndarray)]
    got = _outcome(warmed, args, device)
    assert len(warmed._calls) == 1  # the first calls' key: the call took what they prepared
    first_args = args if got is not None else LAYOUTS[layout]()
    assert got == _outcome(svod.jit(blend), first_args, device)
    if got is None:  # both ran, as plain Python does
        python_args = LAYOUTS[layout]()
        blend(*python_args)
        for arrays in (args, first_args):
            for value, want in zip(arrays, python_args, strict=True):
                np.testing.assert_array_equal(value, want)
    else:  # refused before anything ran
        for value, was in zip([a for a in args if isinstance(a, np.ndarray)], before, strict=True):
            np.testing.assert_array_equal(value, was)
    out, a, b = _zeros(), _row(3.0), _row()
    warmed(out, a, b, 2.0, device=device)  # and a call like the first ones after it
    np.testing.assert_array_equal(out, a * 2.0 + b)


SHARED_IN_PLACE = {"read-only input", "one array read twice"}
"""The layouts above that a call like one before takes in place: a read-only array, or one both reads, that no run
writes."""


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_call_like_one_before_has_its_arrays_checked_natively_and_other_layouts_declined(layout):
    """On the CPU, one native call (``svod.backends.cpu_calls.array_addresses``) reads the arrays of a call like
    one before — type, dtype, shape, flags, alignment, overlap — and answers their addresses; it declines every
    layout the checks in Python must take (above) and answers arrays like the first ones."""
    warmed = svod.jit(blend)
    for start in (1.0, 2.0):
        warmed(_zeros(), _row(start), _row(-start), 2.0)
    namespace = warmed._last.__globals__
    check = namespace["CHECK"]
    answers: list[list[int] | None] = []
    namespace["CHECK"] = lambda args: answers.append(check(args)) or answers[-1]
    args = LAYOUTS[layout]()
    got = _outcome(warmed, args, "CPU")
    assert got == _outcome(svod.jit(blend), args if got is not None else LAYOUTS[layout](), "CPU")
    out, a, b = _zeros(), _row(3.0), _row()
    warmed(out, a, b, 2.0)
    np.testing.assert_array_equal(out, a * 2.0 + b)
    laid_out = sorted(array.ctypes.data for array in args if isinstance(array, np.ndarray))
    assert len(answers) == 2
    assert (sorted(answers[0]) if answers[0] is not None else None) == (
        laid_out if layout in SHARED_IN_PLACE else None)
    assert sorted(answers[1]) == sorted(array.ctypes.data for array in (out, a, b))


# ---- calls like one before: defaults and NumPy scalars -------------------------------------------------------

@svod.jit
def checksum(data, poly=0x8408, start=0xFFFF):
    crc = start
    for b in data:
        byte = 0xFF & b
        for _ in range(0, 8):
            if (crc & 0x0001) ^ (byte & 0x0001):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            byte >>= 1
    crc = ~crc & 0xFFFF
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF


@pytest.mark.parametrize("n", (0, 1, 2, 7, 13))
def test_calls_that_leave_defaults_out_run_as_python_binds_them(device, n):
    """A call that passes the first parameters by position and leaves the others to their defaults takes a
    call key (the defaults complete it): each run, the first and those like it, returns Python's value."""
    data = np.random.default_rng(n).integers(0, 256, n).astype(np.int32)
    for args in ((data,), (data,), (data, 0xA001), (data, 0xA001), (data, 0xA001, 0), (data,)):
        assert checksum(*args, device=device) == checksum.fn(*args)
    assert len(checksum._calls) >= 3  # the calls that left defaults out took keys


def test_sequential_code_and_the_scalars_it_starts_and_finishes_are_one_kernel():
    """``crc = start``, the loop that updates it and the lines that finish it are one launch (``poly`` and
    ``start`` left to their defaults: constants of the plan, which takes no scalars)."""
    data = np.arange(5, dtype=np.int32)
    assert kernels_of(checksum, data) == 1


@svod.jit
def finishes_a_sum(x, out):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
    t = s * 2
    u = t + 1
    for i in range(x.shape[0]):
        out[i] = u + i
        u = u - out[i] / 2
    return u, t


@pytest.mark.parametrize("n", SIZES)
def test_scalars_a_parallel_sum_leaves_and_sequential_code_finishes_agree_with_python(device, n):
    """The parallel sum is a kernel of its own; the scalars made from it and the loop after, one kernel."""
    agrees_with_python(finishes_a_sum, device, data(n, seed=n), np.zeros(n, np.float32), rtol=1e-5)


@svod.jit
def scaled(x, out, alpha, shift):
    for i in prange(x.shape[0]):
        out[i] = x[i] * alpha + shift


@pytest.mark.parametrize("n", SIZES)
def test_calls_with_numpy_scalars_take_the_call_key_and_the_scalars_value(device, n):
    """NumPy scalars (as npbench's ``np.float64(1.5)``) key a call as Python's numbers do, each with its type and
    value: a call like one before runs with its own values, one of new values its kernels alone read runs the
    dispatcher of their types, and one of another type prepares its own."""
    x = data(n)
    calls = [(np.float32(1.5), np.int32(3)), (np.float32(1.5), np.int32(3)), (np.float32(-2.0), np.int32(0)),
             (np.float32(-2.0), np.uint32(7)), (np.float32(1.5), np.int32(3)), (2.5, np.int32(-5))]
    jitted = svod.jit(scaled.fn)
    for alpha, shift in calls:
        out, want = np.zeros_like(x), np.zeros_like(x)
        jitted(x, out, alpha, shift, device=device)
        scaled.fn(x, want, alpha, shift)
        np.testing.assert_array_equal(out, want)
    assert len(jitted._calls) == 3  # one key for each types: the new values ran the first one's dispatcher


@svod.jit
def offset_by_keyword(x, out, *, shift=1.0):
    for i in prange(x.shape[0]):
        out[i] = x[i] + shift


def test_a_keyword_only_default_is_bound_by_python_each_call(device):
    x = data(7)
    for _ in range(2):
        out = np.zeros_like(x)
        offset_by_keyword(x, out, device=device)
        np.testing.assert_array_equal(out, x + 1.0)
    assert not offset_by_keyword._calls  # no key reaches past a keyword-only parameter


@svod.jit
def filled(x, value):
    made = np.full(x.shape[0], value, np.float32)  # (a temporary the host makes: its fill keys the plan)
    return made


def test_calls_with_nan_take_one_plan_and_zeros_keep_their_sign():
    """A NaN is never equal to itself, so keyed by its value each call's NaN (a new object) would prepare a plan
    of its own; a NaN of each type keys one. A zero's sign is the run's: ``-0.0`` fills ``-0.0``. (The keys are
    the host's, the same for every device.)"""
    jitted = svod.jit(filled.fn)
    x = data(5)
    for value in (float("nan"), float("nan"), np.float64("nan"), np.float64("nan"), np.float32("nan"),
                  0.0, -0.0, np.float64(0.0), np.float64(-0.0), np.float32(-0.0)):
        got, want = jitted(x, value), filled.fn(x, value)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
    assert len(jitted._plans) == 6 and len(jitted._calls) == 6  # a NaN and a zero of each of three types


@svod.jit
def shifted_by_product(x, a, b):
    return x + a * b


def test_a_numpy_bool_never_takes_the_plan_of_a_python_bool():
    """NumPy promotes ``np.True_ * 2.5`` to float64 where Python's ``True * 2.5`` stays a weak float (float32
    with a float32 array), and both types are named ``bool`` in NumPy 2 (and ``np.True_ == True`` hashes alike):
    a plan, variant or phase keyed by the type's name alone gave one the other's dtypes. Each keeps its own, in
    either order of calls."""
    for order in ((True, np.True_), (np.True_, True)):
        jitted = svod.jit(shifted_by_product.fn)
        x = data(5)
        for flag in (*order, *order):
            got, want = jitted(x, flag, 2.5), shifted_by_product.fn(x, flag, 2.5)
            assert got.dtype == want.dtype == (np.float64 if isinstance(flag, np.bool_) else np.float32)
            np.testing.assert_array_equal(got, want)
        assert len(jitted._plans) == 2 and len(jitted._calls) == 2


@svod.jit
def added(a, b):
    return a + b


@svod.jit
def multiplied(a, b):
    return a * b


@svod.jit
def inverted(a):
    return ~a


@svod.jit
def nudged(x, a, b):
    for i in prange(x.shape[0]):
        if a and not b:
            x[i] = (x[i] + a * 1e-8) - x[i] + (a ^ True)
        else:
            x[i] = x[i] * (a * 3) + b
    return x


@svod.jit
def masked_by(x, a):
    n = 3 if a else 2
    t = np.zeros(n, x.dtype)
    t[:] = x[:n] * a
    return t, np.where(a, x, -x)


NUMPY_BOOLS = (np.True_, np.False_, True, False)


@pytest.mark.parametrize("a", NUMPY_BOOLS, ids=repr)
@pytest.mark.parametrize("b", (*NUMPY_BOOLS, 2, 2.5, np.float32(1.5), np.int8(3)), ids=repr)
def test_a_numpy_bool_computes_as_numpy_computes_it(a, b):
    """A NumPy bool argument is typed, as NumPy's scalars are: ``np.True_ * 2`` an int64, ``np.True_ * 2.5`` a
    float64, ``np.True_ + np.float32(1.5)`` a float32, ``~np.True_`` ``False``; two Python bools compute as Python
    (``True + True`` is 2). Every pair gives plain Python's value (a jitted scalar comes back as a Python number),
    but ``+`` and ``*`` of two bools one of which is NumPy's, which NumPy computes as ``or`` and ``and``, and a
    kernel, which cannot tell them from Python's bools there, refuses at the line."""
    for fn, op in ((added, "ADD"), (multiplied, "MUL")):
        if isinstance(b, (bool, np.bool_)) and np.bool_ in (type(a), type(b)):
            with pytest.raises(svod.errors.SvodError, match=f"{op} is not defined on bool") as err:
                fn(a, b)
            assert f"{__file__}:{line_of(fn, 'return a ')}" in str(err.value)
            continue
        got, want = fn(a, b), fn.fn(a, b)
        assert got == want and type(got) is type(want.item() if isinstance(want, np.generic) else want)
    if isinstance(a, np.bool_):
        assert inverted(a) is (not a) is inverted.fn(a).item()


@pytest.mark.parametrize("a", NUMPY_BOOLS, ids=repr)
@pytest.mark.parametrize("b", (np.True_, np.False_, 2.5, np.float32(2.5)), ids=repr)
@pytest.mark.parametrize("n", (0, 1, 3, 7))
def test_a_numpy_bool_in_phases_and_on_the_host(device, a, b, n):
    """In a ``prange`` a NumPy bool times a Python float is a float64 (``x_f32[i] + np.True_ * 1e-8`` keeps the
    1e-8 that float32 arithmetic loses), in a test, an ``and``, a ``^``; on the host it sizes a temporary and
    picks a ``where``'s side as plain Python does."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) + np.float32(1.1)
    if svod.dtypes.float64 not in device.caps.element_dtypes:  # float32 arithmetic, whose `(x + c) - x` WGSL
        x[:] = 0.0  # may fold to c: what is left to compare is the branches' and bools' arithmetic
    agrees_with_python(nudged, device, x, a, b, typed=True)
    if n >= 3:
        agrees_with_python(masked_by, device, np.arange(n, dtype=np.float32), a, typed=True)


@svod.jit
def either_and_both(x, y):
    return (((x > 0.5) + (y > 0.5)).astype(np.int32), ((x > 0.5) * (y > 0.5)).astype(np.int32),
            (((x > 0.5) + True) * (y > 0.5)).astype(np.int32), np.add(x > 0.5, y > 0.5).astype(np.int32))


@pytest.mark.parametrize("n", (0, 1, 7))
def test_add_and_multiply_of_bool_arrays_are_or_and_and(device, n):
    """NumPy adds bool arrays as ``or`` and multiplies them as ``and``, into bools (never 2)."""
    rng = np.random.default_rng(n)
    agrees_with_python(either_and_both, device, rng.random(n).astype(np.float32),
                       rng.random(n).astype(np.float32), typed=True)


def test_a_numpy_bool_where_numpy_refuses_is_refused_at_its_line():
    """NumPy refuses ``np.True_ - np.True_`` (TypeError); svod refuses it where it is written."""
    with pytest.raises(svod.errors.SvodError, match="SUB is not defined on bool") as err:
        subtracted(np.True_, np.False_)
    assert f"{__file__}:{line_of(subtracted, 'a - b')}" in str(err.value)


@svod.jit
def subtracted(a, b):
    return a - b


@svod.jit
def gathered_sum(x, idx):
    out = np.zeros(idx.shape[0], x.dtype)
    for i in prange(idx.shape[0]):
        out[i] = x[idx[i]] + 1.0
    return out


@pytest.mark.parametrize("n", (1, 7, 13))
def test_an_index_out_of_bounds_in_a_call_like_one_before_is_refused_each_time(n):
    """A call of the signature of one before (its dispatcher, ``svod.frontend.jit_dispatch``) still reads the run's
    record of accesses: an index past ``x`` is refused on each such call, and a call in bounds after it computes
    NumPy's answer (the record read and cleared, not left to fail it)."""
    x = data(n)
    inside = (np.arange(n, dtype=np.int64) * 5) % n
    np.testing.assert_array_equal(gathered_sum(x, inside), x[inside] + 1.0)
    outside = inside.copy()
    outside[-1] = n
    for _ in range(3):
        with pytest.raises(svod.errors.IndexOutOfBoundsError, match=f"accessed at index {n}"):
            gathered_sum(x, outside)
        np.testing.assert_array_equal(gathered_sum(x, inside), x[inside] + 1.0)
