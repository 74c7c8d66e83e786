"""A value read at a statement is that value, whatever the kernel writes afterwards:
each kernel here gave a wrong answer on some device, the reference included, before memory states. Every
device is compared with the kernel's own function run as plain Python (``svod.frontend.oracle``)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.device import Device
from svod.frontend.oracle import run_as_python
from svod.frontend.pykernel import Kernel
from tests.helpers import refuses


def agrees_with_python(kernel: Kernel, device: Device, *args: object, rtol: float = 1e-6) -> None:
    """Run ``kernel`` on ``device`` on copies of ``args``, and compare every array with plain Python's."""
    for a in args:
        if isinstance(a, np.ndarray) and refuses(device, svod.dtypes.from_numpy(a.dtype)):
            return
    want = run_as_python(kernel, *args)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel(*got, device=device)
    for expected, actual in zip(want, got, strict=True):
        if isinstance(expected, np.ndarray):
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0)


@svod.kernel
def normalise(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    for i in range(x.shape[0]):
        x[i] = x[i] / s  # s holds the sum of the values before this loop


@svod.kernel
def swap(x):
    a = x[0]
    b = x[1]
    x[0] = b
    x[1] = a


@svod.kernel
def normalise_rows(x):
    for r in svod.prange(x.shape[0]):
        s = 0.0
        for c in range(x.shape[1]):
            s += x[r, c]
        for c in range(x.shape[1]):
            x[r, c] = x[r, c] / s


@svod.kernel
def standardise_columns(x):
    """Each column's mean and deviation stored in its first two rows, the rest standardised by them."""
    n = x.shape[0]
    for j in svod.prange(x.shape[1]):
        s = 0.0
        for i in range(n):
            s += x[i, j]
        mean = s / n
        d = 0.0
        for i in range(n):
            d += (x[i, j] - mean) * (x[i, j] - mean)
        std = svod.math.sqrt(d / n)
        x[0, j] = mean
        x[1, j] = std
        for i in range(2, n):
            x[i, j] = (x[i, j] - mean) / std


@pytest.mark.parametrize("n", [1, 4, 13])
def test_a_sum_is_held_while_its_array_is_rewritten(device, n):
    agrees_with_python(normalise, device, np.arange(1, n + 1, dtype=np.float32))


def test_a_swap_through_two_locals(device):
    agrees_with_python(swap, device, np.array([1.0, 2.0], np.float32))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 33)])
def test_rows_normalised_in_place(device, shape):
    agrees_with_python(normalise_rows, device, np.random.default_rng(1).random(shape, dtype=np.float32) + 0.5)


@pytest.mark.parametrize("shape", [(3, 1), (7, 5), (9, 40)])
def test_columns_standardised_by_what_was_stored_before(device, shape):
    x = np.random.default_rng(2).random(shape, dtype=np.float32)
    agrees_with_python(standardise_columns, device, x, rtol=1e-4)


@svod.kernel
def running_sum_summed(out, y):
    for i in svod.prange(out.shape[0]):
        p = 0
        q = 0
        for k in range(y.shape[1]):
            p += y[i, k]
            q = q + p
        s = 0
        for _ in range(y.shape[1]):
            s += p
        out[i] = s + q


def test_a_carried_sum_summed_by_a_second_loop_on_every_thread(device):
    """On two CPU threads the second loop's vectorised form ran over every work item on core 0 before the
    other thread had carried its sums (7-29 of 300 runs wrong)."""
    y = (np.arange(121, dtype=np.int32).reshape(11, 11) % 5).astype(np.int32)
    for _ in range(20):
        agrees_with_python(running_sum_summed, device, np.zeros(11, np.int32), y)


@svod.kernel
def triangular_histogram(hist, y):
    for i in svod.prange(y.shape[0]):
        for j in range(i + 1):
            svod.atomic_add(hist, y[j], 1)


def test_atomic_adds_in_a_triangular_loop(device):
    """The reference made one update per turn where every work item of the turn makes one."""
    agrees_with_python(triangular_histogram, device, np.zeros(3, np.int32), np.array([0, 0, 1, 0, 2, 2], np.int32))


@svod.kernel
def nearest(labels, points, centres):
    """k-means' assignment: locals changed under an if inside a loop that holds an inner sum."""
    for i in svod.prange(points.shape[0]):
        best = 0
        best_d = svod.inf
        for c in range(centres.shape[0]):
            d = 0.0
            for k in range(points.shape[1]):
                diff = points[i, k] - centres[c, k]
                d += diff * diff
            if d < best_d:
                best_d = d
                best = c
        labels[i] = best


def test_nearest_centres(device):
    rng = np.random.default_rng(3)
    agrees_with_python(nearest, device, np.zeros(500, np.int32), rng.random((500, 3), dtype=np.float32),
                       rng.random((7, 3), dtype=np.float32))


@svod.kernel
def gated_minimum_then_two_stores(out, x):
    for i in svod.prange(x.shape[0]):
        for j in svod.prange(x.shape[0]):
            s = 0.0
            for k in range(x.shape[1]):
                if x[i, k] <= x[j, k]:
                    s = min(s, x[j, k])
            out[i, j] = 7.0
            out[i, j] = s + 100.0


def test_the_last_of_two_stores_after_a_gated_minimum_stays(device):
    """On CL:0 the tiled store of the sum and the untiled first store ran on other work items, in no order."""
    x = np.random.default_rng(4).random((5, 4), dtype=np.float32) - 0.5
    agrees_with_python(gated_minimum_then_two_stores, device, np.zeros((5, 5), np.float32), x)


@svod.kernel
def doitgen(a, c4, tmp):
    for r in svod.prange(a.shape[0]):
        for q in svod.prange(a.shape[1]):
            for p in range(a.shape[2]):
                s = 0.0
                for k in range(a.shape[2]):
                    s += a[r, q, k] * c4[k, p]
                tmp[r, q, p] = s
            for p in range(a.shape[2]):
                a[r, q, p] = tmp[r, q, p]


@pytest.mark.parametrize("size", [4, 20])
def test_one_kernel_doitgen(device, size):
    rng = np.random.default_rng(5)
    a, c4 = rng.random((size, size, 16), dtype=np.float32), rng.random((16, 16), dtype=np.float32)
    agrees_with_python(doitgen, device, a, c4, np.zeros_like(a), rtol=1e-5)


# ---- kernels once refused that hold no race: each runs and agrees with Python -----------------------------

@svod.kernel
def accelerations(acc, pos):
    """n-body: each row of ``acc`` written column by column, which the race check took for ``acc[i + 1, 0]``
    when the column count was symbolic."""
    for i in svod.prange(pos.shape[0]):
        ax = 0.0
        ay = 0.0
        az = 0.0
        for j in range(pos.shape[0]):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r2 = dx * dx + dy * dy + dz * dz + 0.01
            inv = 1.0 / (r2 * svod.math.sqrt(r2))
            ax += dx * inv
            ay += dy * inv
            az += dz * inv
        acc[i, 0] = ax
        acc[i, 1] = ay
        acc[i, 2] = az


@svod.kernel
def swap_columns(x):
    for i in svod.prange(x.shape[0]):
        a = x[i, 0]
        x[i, 0] = x[i, 1]
        x[i, 1] = a


@pytest.mark.parametrize("n", [1, 2, 31])
def test_rows_written_column_by_column(device, n):
    pos = np.random.default_rng(6).random((n, 3), dtype=np.float32)
    agrees_with_python(accelerations, device, np.zeros_like(pos), pos, rtol=1e-4)
    agrees_with_python(swap_columns, device, np.random.default_rng(7).random((n, 2), dtype=np.float32))


def test_a_dimension_smaller_than_a_constant_index_is_refused_at_the_call():
    with pytest.raises(svod.errors.BufferMismatchError, match=r"x\.shape\[1\] is 1, and swap_columns indexes "
                                                             r"dimension 1 of x up to 1"):
        swap_columns(np.zeros((4, 1), np.float32))


@svod.kernel
def next_column(out, x):
    for i in svod.prange(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j + 1]  # past the row at the last column: numpy raises, so does svod


def test_an_index_past_its_dimension_is_checked_at_run_time(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(svod.errors.IndexOutOfBoundsError):
        next_column(np.zeros_like(x), x, device=device)


@svod.kernel
def reversed_column_sums(out, x):
    n = out.shape[0]
    for i in svod.prange(n):
        s = 0.0
        for j in range(x.shape[0]):
            s += x[j, i]
        out[n - 1 - i] = s


@pytest.mark.parametrize("shape", [(7, 3), (37, 64), (5, 100)])
def test_sums_stored_to_a_reversed_index(device, shape):
    """The LLVM pair stored a row of sums in lanes to descending elements, which it spells only ascending."""
    agrees_with_python(reversed_column_sums, device, np.zeros(shape[1], np.float32),
                       np.random.default_rng(8).random(shape, dtype=np.float32), rtol=1e-5)


@svod.kernel
def first_index_below(out, limits, x):
    """A carried local holding a loop index (an int64 one on CL:0 was an internal dtype, ``index``)."""
    for i in svod.prange(x.shape[0]):
        found = -1
        for k in range(limits.shape[0]):
            if found < 0 and x[i] < limits[k]:
                found = k
        out[i] = found


def test_a_carried_loop_index(device):
    agrees_with_python(first_index_below, device, np.zeros(9, np.int32), np.linspace(0, 1, 5).astype(np.float32),
                       np.random.default_rng(9).random(9, dtype=np.float32))


@svod.kernel
def scaled_with_a_table(out, values, table):
    for i in svod.prange(values.shape[0]):
        out[i] = values[i] * 2.0 + table[1, 1]


def test_a_long_one_dimensional_array_beside_a_two_dimensional_one(device):
    """WebGPU capped every size at 23,170 (so a 2-d array's flat index fits 32 bits), a 1-d array's too."""
    values = np.random.default_rng(10).random(200_000, dtype=np.float32)
    agrees_with_python(scaled_with_a_table, device, np.zeros_like(values), values, np.ones((3, 3), np.float32))


@svod.kernel
def csr_times_vector(y, indptr, indices, data, x):
    for r in svod.prange(y.shape[0]):
        s = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            s += data[k] * x[indices[k]]
        y[r] = s


def test_a_loop_bounded_by_memory_on_a_device_that_limits_loops_says_what_can_be_done(device):
    indptr, indices = np.array([0, 2, 3], np.int32), np.array([0, 1, 1], np.int32)
    data, x = np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 10.0], np.float32)
    if device.caps.max_loop_turns is None:
        agrees_with_python(csr_times_vector, device, np.zeros(2, np.float32), indptr, indices, data, x)
        return
    with pytest.raises(svod.errors.GraphError, match=r"bound is read from memory.*run the kernel on another device") \
            as caught:
        csr_times_vector(np.zeros(2, np.float32), indptr, indices, data, x, device=device)
    assert "test_held_values.py" in str(caught.value)  # the loop's line


@svod.kernel
def doubled(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * 2


def test_zero_size_arrays_run_their_loops_zero_times(device):
    agrees_with_python(doubled, device, np.zeros(0, np.int32), np.zeros(0, np.int32))
    agrees_with_python(normalise, device, np.zeros(0, np.float32))


@svod.kernel
def gate_reads_a_carried_local(out, x, hist):
    for i in svod.prange(out.shape[0]):
        v = -4.0
        for _ in range(3):
            v -= v // (x[i, 0] % 3 + 1)
        if v != -max(out[i, 0], v):
            for j in range(out.shape[1]):
                v += x[i, j]
        elif out[i, 0] % 5 >= -2:
            out[i, 0] = v
            svod.atomic_add(hist, i % 4, 1)


def test_a_held_value_computed_early_comes_after_the_stores_its_gate_reads(device: Device) -> None:
    """The ``elif``'s read of ``out[i, 0]`` is held from its statement, and its gate reads ``v`` after the
    loop, from the memory that carries ``v`` across turns: held and computed before the store to ``out``, it
    was placed ahead of the loop's stores to that memory (CL:0 read ``v`` before the loop ran; found by the
    plain-Python sweep, seed 2265)."""
    rng = np.random.default_rng(1)
    agrees_with_python(gate_reads_a_carried_local, device, rng.integers(-50, 50, (7, 8)),
                       rng.integers(-50, 50, (7, 8)).astype(np.int32), np.zeros(4, np.int32))


@svod.kernel
def reads_what_the_turn_before_stored(out, x):
    for i in svod.prange(out.shape[0]):
        v = x[i, 0]
        for _ in range(i + 1):
            v += x[i, 0]  # in the second turn, what the first stored
            for c in range(out.shape[1]):
                v += 1
                out[i, c] = v
            x[i, 0] = i


@pytest.mark.parametrize("columns", [1, 3])
def test_a_read_in_a_loop_that_stores_to_it_is_not_the_read_before_the_loop(device, columns):
    """``x[i, 0]`` read before the loop and in it is one value to the builder's rule (read where used, the
    state of an array read only where nothing stores between dropped): the linearizer took the read before
    the loop for the one in it, whose later turns must see ``x[i, 0] = i`` (CPU and CL:0; seeds 3043, 3125
    and 3127 of the plain-Python sweep)."""
    agrees_with_python(reads_what_the_turn_before_stored, device, np.zeros((5, columns)),
                       np.array([[1.0], [-1.0], [-5.75], [-0.75], [4.25]]).repeat(columns, 1))


@svod.kernel
def gated_by_a_gather_before_a_loop(out, x, idx):
    for i in svod.prange(out.shape[0]):
        v = i
        if x[i, 0] != 2 + v - x[i, 0]:
            v += ((v * v) if x[idx[i], 0] > 0 else abs(v)) % 3
        if v > 0:
            for _ in range(3):
                v = v // 2 + abs(x[i, 0])
                out[i, 0] = v if abs(x[i, 0]) <= 0.5 else x[i, 0] * v * x[i, 0]


def test_a_load_before_a_loop_is_not_guarded_by_conditions_the_loop_computes(device):
    """``x[idx[i], 0]`` is read before the loop, and the loop's reads of ``x[i, 0]`` (gated by ``v > 0``) are
    made under the loop's own ``if``: the gather took those conditions, computed in the loop, for its guard,
    which put the store that starts ``v``'s carried memory inside the loop (CPU and CL:0; seed 822 of the
    plain-Python sweep)."""
    x = np.array([6, 7.25, -5, 3.75, -3, -4, 7.75, 6.5, -0.5, 2, 0.75, 0.5, 2.25]).reshape(13, 1)
    idx = np.array([9, 6, 7, 3, 7, 10, 7, 7, 9, 5, 0, 7, 4], np.int32)
    agrees_with_python(gated_by_a_gather_before_a_loop, device, np.zeros((13, 1), np.int64), x, idx)


@svod.kernel
def doubled_after_a_guarded_loop(out, m):
    for i in svod.prange(out.shape[0]):
        if m > 0:
            for j in range(3):
                out[i] = out[i] + j
        out[i] = out[i] * 2


@pytest.mark.parametrize("m", [1, 0])
def test_a_condition_of_no_loop_does_not_split_the_work_items_loop(device, m):
    """``m > 0`` depends on no loop: its IF went outside the CPU's loop over work items, and the store after
    it was refused ("would run a loop they share apart"); so was a gate the lowering proves always true
    (``7 != -i``; seed 786 of the plain-Python sweep)."""
    agrees_with_python(doubled_after_a_guarded_loop, device, np.arange(5.0), m)


@svod.kernel
def read_under_nested_ifs(out, x, limit):
    for i in svod.prange(out.shape[0]):
        for j in range(out.shape[1]):
            if j < limit:  # noqa: SIM102
                if x[j] > 0:  # read only where j < limit, as Python reads it
                    out[i, j] = x[j]


def test_a_condition_is_read_only_where_the_conditions_around_it_hold(device):
    """The store's gate is ``j < limit & x[j] > 0``: its reads are made condition by condition, as the compiled
    code's nested IFs make them; the reference read ``x[j]`` for every ``j`` and raised IndexOutOfBoundsError
    where Python reads nothing past ``x``."""
    agrees_with_python(read_under_nested_ifs, device, np.zeros((3, 8), np.int32), np.arange(-2, 2, dtype=np.int32), 4)


@svod.kernel
def counted_before_overwrite(out, hist):
    for i in svod.prange(out.shape[0]):
        v = out[i]
        out[i] = 7
        svod.atomic_add(hist, i % hist.shape[0], v)
        out[i] = out[i] + v


@pytest.mark.parametrize(("n", "bins"), [(1, 1), (10, 3), (1009, 7)])
def test_an_add_into_a_buffer_of_symbolic_size_reads_what_its_statement_read(device, n, bins):
    """The CPU adds into per-thread copies of a histogram of symbolic bin count only in a kernel that does
    nothing else: the adds into the histogram itself (where its counts do not fit a copy) run in loops of their
    own, which once split this kernel's loop around them, and ``v`` was read again after the store (14, not 8)
    or the kernel refused by the linearizer."""
    agrees_with_python(counted_before_overwrite, device, np.arange(1, n + 1, dtype=np.int32),
                       np.zeros(bins, np.int32))


@svod.kernel
def gated_by_a_later_read(out, x, idx, hist):
    for i in svod.prange(out.shape[0]):
        v = x[idx[i]] - (svod.int32(out[i]) if x[i] < 3 else 2)
        out[i] = svod.float32(v if i == 0 else 1)
        svod.atomic_add(hist, 0, (v + svod.int32(out[i] % 2)) % 100)


@pytest.mark.parametrize("n", [1, 2, 7, 1009])
def test_a_read_is_not_gated_by_a_condition_a_later_statement_reads(device, n):
    """``x[idx[i]]`` is checked at run time, and made only where some use of it needs it: the store's, and the
    add's, whose ``% 100`` chooses by conditions that read ``out[i]`` after the store. Those conditions once
    gated the read at its statement, before the store, which read ``out[i]`` there and kept that value for
    the add: a wrong sum on every device (557 for 560 at n=7), the reference included."""
    agrees_with_python(gated_by_a_later_read, device, np.arange(n, dtype=np.float32) * 3,
                       np.arange(n, dtype=np.int32) % 5, np.arange(n, dtype=np.int32) * 7 % n,
                       np.zeros(1, np.int32))


@svod.kernel
def elif_then_loop_overwriting_its_condition(out, x, hist):
    for i in svod.prange(out.shape[0]):
        v = out[i, 0]
        if i < v:
            out[i, 1] = 1.0
        elif x[i, 0] < v:
            if v >= -3:
                out[i, 0] = v
            elif x[i, 1] < 2:
                v *= 2
        else:
            for j in range(out.shape[1]):
                svod.atomic_add(hist, 0, svod.int32(v % 100))
                x[i, j] = -3.0  # x[i, 0], which the branch's condition read, too


@pytest.mark.parametrize("rows", [0, 1, 7, 33])
def test_a_loop_overwriting_what_its_branch_condition_read_stays_in_the_branch(device, rows):
    """The condition read before the loop is held there, inside the branches taken so far: computing it
    outside them closed their IFs and split the loop the atomic add and the store share (a refusal at
    linearize)."""
    rng = np.random.default_rng(rows)
    out, x = (rng.integers(-5, 5, (rows, 5)).astype(np.float32) for _ in range(2))
    agrees_with_python(elif_then_loop_overwriting_its_condition, device, out, x, np.zeros(4, np.int32))


@svod.kernel
def held_then_updated(out, x):
    """``out[0, i]`` read before a loop (into ``x``), then read and stored by each turn of the loop, and stored
    again after it: three reads of one element through three memory states (found by the random kernels)."""
    for i in svod.prange(out.shape[1]):
        v = x[0, i]
        x[0, i] = abs(float(out[0, i]) if out[0, i] <= v else v) * (x[0, i] - i + v * i)
        if -(v + x[0, i]) < i + 2:
            for j in range(out.shape[0]):
                v = v // 2 + (out[out.shape[0] - 1 - j, i] + 3.0) % 2
        for _ in range(3):
            out[0, i] = svod.float32(out[0, i] + 9 - x[0, i])
        out[0, i] = out[0, i]


@pytest.mark.parametrize("columns", [1, 5, 33])
def test_a_read_held_before_a_loop_is_not_the_read_of_its_turns(device, columns):
    """Each turn adds to what the turn before stored: with the element's memory states dropped, the read before
    the loop and the turns' read were one node, computed once before the loop (12 where Python has 42)."""
    out = (np.arange(8 * columns, dtype=np.float32).reshape(8, columns) % 7) - 3
    x = np.linspace(-2, 3, 8 * columns).reshape(8, columns)
    agrees_with_python(held_then_updated, device, out, x)
    want = run_as_python(held_then_updated, out, x)[0]
    assert want[0, 0] == 42.0
