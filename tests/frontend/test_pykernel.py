"""``@svod.kernel`` as users call it: signatures and their cache (one compile for two sizes), arguments
(numpy, Buffers, DLPack, scalars, annotations), plans and ``svod.check``; and every refusal, each naming the
file and line of the construct, and later errors (races, bounds, dtypes) naming the statement behind them."""

from __future__ import annotations

import inspect
import math
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.errors import (
    BufferMismatchError,
    GraphError,
    IndexOutOfBoundsError,
    KernelSyntaxError,
    SvodError,
    VariableError,
)
from svod.frontend.oracle import run_as_python
from svod.ir import Ops, UOp
from svod.runtime import default_cache
from svod.workloads import PYTHON_KERNELS, written_in_python
from tests.frontend.test_held_values import agrees_with_python
from tests.kernels import SMALL_WORKLOADS

FILE = __file__


def _line(fn, marker: str = "# refused") -> str:
    """``file:line`` of the line of ``fn``'s source that carries ``marker``."""
    target = getattr(fn, "fn", fn)
    lines, first = inspect.getsourcelines(target)
    offset = next(k for k, line in enumerate(lines) if marker in line)
    return f"{FILE}:{first + offset}"


@svod.kernel
def double(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * 2.0


def test_one_compile_serves_every_size():
    cache = default_cache()
    before = cache.stats.compiles
    for n in (5, 17, 1):
        x = np.arange(n, dtype=np.float32)
        out = np.zeros_like(x)
        double(out, x)
        np.testing.assert_array_equal(out, x * 2)
    assert cache.stats.compiles - before <= 1  # 0 when an earlier test compiled it
    a, b = double.build(np.zeros(3, np.float32), np.zeros(3, np.float32)), double.build(np.zeros(9, np.float32),
                                                                                        np.zeros(9, np.float32))
    assert a is b
    assert double.build(np.zeros(3, np.float64), np.zeros(3, np.float64)) is not a  # another dtype: another kernel


def test_arrays_of_one_size_share_a_variable_and_other_sizes_make_another_signature():
    same = double.bind(np.zeros(4, np.float32), np.zeros(4, np.float32))
    assert same.var_vals == {"out_shape0": 4}
    longer = double.bind(np.zeros(9, np.float32), np.zeros(4, np.float32))  # out longer than x: fine
    assert longer.var_vals == {"out_shape0": 9, "x_shape0": 4}
    out = np.zeros(9, np.float32)
    double(out, np.ones(4, np.float32))
    np.testing.assert_array_equal(out, [2, 2, 2, 2, 0, 0, 0, 0, 0])


def test_a_zero_size_array_runs_its_loops_zero_times(device):
    out = np.zeros(0, np.float32)
    double(out, np.zeros(0, np.float32), device=device)
    assert out.shape == (0,)


def test_buffers_and_dlpack_arrays_are_arguments():
    x = np.arange(6, dtype=np.float32)
    out = svod.Buffer("CPU", dtypes.float32, 6)
    double(out, svod.Buffer.from_numpy(x))
    np.testing.assert_array_equal(out.numpy(), x * 2)
    target = np.zeros(6, np.float32)
    double(svod.Buffer.from_numpy(target, copy=False), np.from_dlpack(svod.Buffer.from_numpy(x)))
    np.testing.assert_array_equal(target, x * 2)


def test_kernels_run_in_place_on_numpy_arrays_without_copies():
    x = np.arange(5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    view = out[:]
    double(out, x)
    np.testing.assert_array_equal(view, x * 2)


@svod.kernel
def annotated(out: svod.Array[svod.float32, 1], x: svod.Array[svod.float32, 1], k: svod.int32):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] + k


def test_annotations_fix_the_signature():
    out = np.zeros(3, np.float32)
    annotated(out, np.ones(3, np.float32), 2)
    np.testing.assert_array_equal(out, [3, 3, 3])
    with pytest.raises(BufferMismatchError, match="argument x must be a 1-d array of float32") as caught:
        annotated(out, np.ones(3, np.float64), 2)
    assert caught.value.kernel == "annotated"
    with pytest.raises(BufferMismatchError, match="takes 3 arguments"):
        annotated(out, np.ones(3, np.float32))
    with pytest.raises(SvodError, match=r"k=1099511627776 does not fit its annotation svod\.int32"):
        annotated(out, np.ones(3, np.float32), 1 << 40)


def test_a_plan_takes_a_decorated_kernel_and_fixes_its_sizes():
    plan = svod.ExecutionPlan("CPU")
    src = plan.add_buffer(svod.Buffer.from_numpy(np.arange(7, dtype=np.float32)))
    dst = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 7))
    plan.add_kernel(double, [dst, src])
    plan.prepare()
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[dst].numpy(), np.arange(7) * 2)
    assert plan.prepared_kernels[0].fixedvars == {"out_shape0": 7}


def _cpu_and_opencl() -> list[str]:
    """The CPU, and OpenCL where a platform is here (its C is rendered for a platform's device)."""
    return [device for device in ("CPU", "CL:0") if device in svod.available_devices()]


def test_svod_check_takes_a_decorated_kernel():
    report = svod.check(double, [np.zeros(11, np.float32), np.arange(11, dtype=np.float32)],
                        devices=_cpu_and_opencl())
    assert report.ok, str(report)
    assert report.kernel == "double"


def test_svod_check_on_the_command_line(tmp_path):
    script = tmp_path / "k.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import svod

        @svod.kernel
        def triple(out, x):
            for i in svod.prange(x.shape[0]):
                out[i] = x[i] * 3

        def case():
            return triple, [np.zeros(5, np.int32), np.arange(5, dtype=np.int32)]
    """))
    done = subprocess.run([sys.executable, "-m", "svod", "check", f"{script}:case"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equal" in done.stdout


# ---- the suite ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PYTHON_KERNELS))
def test_suite_kernels_written_in_python_build_the_builder_kernels(name):
    """Each suite kernel spelled with @svod.kernel builds the builder's very kernel, so it renders to the same
    source on every device (compared here on the CPU and OpenCL) and runs as fast."""
    workload = SMALL_WORKLOADS[name]()
    python = written_in_python(workload)
    for built, written in zip(workload.steps, python.steps, strict=True):
        written_sum, built_sum = _without_positive_zero_starts(written.ast), _without_positive_zero_starts(built.ast)
        assert written_sum is built_sum
        for device in _cpu_and_opencl():
            assert svod.compile(written_sum, device).code == svod.compile(built_sum, device).code


def _without_positive_zero_starts(root: UOp) -> UOp:
    """``root`` without the ``+ 0.0`` after each float sum a Python spelling starts from ``0.0`` (its sum over
    -0.0s is +0.0, as Python's; the builder's reduction is the bare sum, -0.0 there)."""
    made: dict[UOp, UOp] = {}
    for u in root.toposort():
        src = tuple(made[s] for s in u.src)
        zero = len(src) == 2 and src[1].op is Ops.CONST and src[1].arg == 0.0 and math.copysign(1.0, src[1].arg) > 0
        made[u] = src[0] if u.op is Ops.ADD and src[0].op is Ops.REDUCE and zero else \
            u if src == u.src else u.replace(src=src)
    return made[root]


def _numba_lines() -> dict[str, int]:
    """Lines of each numba spelling, decorators and the module's functions it calls included."""
    import ast
    import pathlib

    tree = ast.parse((pathlib.Path(__file__).parents[2] / "benchmarks" / "numba_kernels.py").read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def own(n: ast.FunctionDef) -> int:
        return n.end_lineno - min([d.lineno for d in n.decorator_list] + [n.lineno]) + 1  # type: ignore[operator]

    def called(n: ast.FunctionDef) -> set[str]:
        return {c.func.id for c in ast.walk(n) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                and c.func.id in functions and c.func.id != n.name}

    return {name: own(n) + sum(own(functions[c]) for c in called(n)) for name, n in functions.items()}


@pytest.mark.parametrize("name", sorted(PYTHON_KERNELS))
def test_suite_kernels_written_in_python_take_no_more_lines_than_numba(name):
    """Decorator line included, each kernel once (an MLP's hidden layers share one); attention's softmax step is
    the suite's softmax kernel, reused as the builder's attention reuses it."""
    kernels = [k for k in dict.fromkeys(PYTHON_KERNELS[name]) if not (name == "attention" and k.name == "softmax_py")]
    ours = sum(len(inspect.getsourcelines(k.fn)[0]) for k in kernels)
    assert ours <= _numba_lines()[name]


# ---- refusals ----------------------------------------------------------------------------------------------

@svod.kernel
def breaks_a_prange(out):
    for i in svod.prange(out.shape[0]):
        if i > 1:
            break  # refused
        out[i, 0] = 1


@svod.kernel
def continues_a_prange(out):
    for i in svod.prange(out.shape[0]):
        if i > 1:
            continue  # refused
        out[i, 0] = 1


@svod.kernel
def uses_prange_else(out):
    for i in svod.prange(out.shape[0]):  # refused
        out[i, 0] = 1
    else:  # noqa: PLW0120 - the construct refused
        out[0, 1] = 2


@svod.kernel
def never_ends(out):
    i = 0
    while True:  # refused
        i += 1
    out[0, 0] = i


@svod.kernel
def prange_inside_while(out):
    t = 0
    while t < 3:
        for i in svod.prange(out.shape[0]):  # refused
            out[i, 0] = t
        t += 1


@svod.kernel
def uses_try(out):
    try:  # refused  # noqa: SIM105
        out[0, 0] = 1
    except ValueError:
        pass


@svod.kernel
def uses_with(out):
    with open("x"):  # refused
        pass


@svod.kernel
def uses_lambda(out):
    f = lambda v: v  # refused  # noqa: E731
    out[0, 0] = f(1)


@svod.kernel
def uses_comprehension(out):
    out[0, 0] = [i for i in range(3)][0]  # refused  # noqa: RUF015


@svod.kernel
def uses_list(out):
    values = [1, 2]  # refused
    out[0, 0] = values[0]


@svod.kernel
def uses_dict(out):
    values = {"a": 1}  # refused
    out[0, 0] = values["a"]


@svod.kernel
def returns_a_value(out):
    out[0, 0] = 1
    return 3  # refused


def plain_helper(v):
    return v


@svod.kernel
def calls_a_plain_function(out):
    out[0, 0] = plain_helper(1)  # refused


@svod.func
def recursive(v):
    return recursive(v)  # refused


@svod.kernel
def calls_recursion(out):
    out[0] = recursive(1)


@svod.kernel
def prange_inside_range(out):
    for t in range(3):
        for i in svod.prange(out.shape[0]):  # refused
            out[i, 0] = t


@svod.kernel
def shares_a_local_across_work_items(out):
    total = 0
    for _ in svod.prange(out.shape[0]):
        total += 1  # refused
    out[0, 0] = total


@svod.kernel
def loops_over_rows(out, x):
    for v in x:  # refused
        out[0, 0] = v


@svod.kernel
def slices(out, x):
    out[0, 0] = x[1:3]  # refused


@svod.kernel
def uses_a_loop_local_after_it(out):
    for i in range(3):
        last = i
    out[0, 0] = last  # refused


@svod.kernel
def stores_nothing(out):
    x = 1  # noqa: F841


REFUSALS = {
    breaks_a_prange: "break in a svod.prange loop", continues_a_prange: "continue in a svod.prange loop",
    uses_prange_else: "svod.prange's else", never_ends: "never ends",
    prange_inside_while: "prange inside a sequential loop",
    uses_try: "try", uses_with: "with", uses_lambda: "lambda",
    uses_comprehension: "a list comprehension", uses_list: "a list", uses_dict: "a dict",
    returns_a_value: "returning a value", calls_a_plain_function: "neither svod's nor",
prange_inside_range: "prange inside a sequential loop",
    shares_a_local_across_work_items: "work items share no local", loops_over_rows: "iterates the rows of a 2-D array",
    slices: "a slice", uses_a_loop_local_after_it: "last is not defined here",
}


@pytest.mark.parametrize("kernel", list(REFUSALS), ids=lambda k: k.name)
def test_refusals_name_the_file_line_and_construct(kernel):
    arrays = [np.zeros((3, 3), np.float32) for _ in kernel.parameters]
    with pytest.raises(KernelSyntaxError) as caught:
        kernel.build(*arrays)
    assert REFUSALS[kernel] in str(caught.value)
    assert _line(kernel) in str(caught.value)
    assert caught.value.kernel == kernel.name


def test_recursion_is_refused_at_the_recursive_call():
    with pytest.raises(KernelSyntaxError, match="calls itself") as caught:
        calls_recursion.build(np.zeros(1, np.int32))
    assert _line(recursive) in str(caught.value)


def test_a_kernel_that_stores_nothing_is_refused():
    with pytest.raises(KernelSyntaxError, match="stores nothing"):
        stores_nothing.build(np.zeros(1, np.int32))


def test_kernel_parameters_are_plain():
    with pytest.raises(KernelSyntaxError, match="plain positional parameter"):
        svod.kernel(lambda out, *rest: None)


def test_names_outside_kernels_do_in_plain_python_what_kernels_do():
    counts = np.zeros(3, np.int32)
    svod.atomic_add(counts, 1, 5)
    svod.atomic_max(counts, 2, -4)
    np.testing.assert_array_equal(counts, [0, 5, 0])
    assert list(svod.prange(2, 5)) == [2, 3, 4]
    assert svod.float32(1.5) == np.float32(1.5)
    assert type(svod.math.exp(np.float32(1))) is np.float32 and svod.math.exp(np.float32(1)) == np.exp(np.float32(1))
    assert type(svod.math.sqrt(4)) is np.float64
    assert svod.math.maximum(np.float32(1), svod.nan) == 1  # a NaN loses, as in a kernel


# ---- errors after translation name their statement ----------------------------------------------------------

@svod.kernel
def racy(out, x):
    for i in svod.prange(x.shape[0]):
        out[0] = x[i]  # refused


@svod.kernel
def reads_out_of_bounds(out, x, ids):
    for i in svod.prange(ids.shape[0]):
        out[i] = x[ids[i]]  # refused


@svod.kernel
def mixes_dtypes(out, x):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        out[i] = v << 1.5  # refused


def test_a_race_names_the_statement_and_the_array_in_the_sources_words():
    with pytest.raises(GraphError, match="the store to out takes its value") as caught:
        racy(np.zeros(1, np.float32), np.ones(4, np.float32))
    assert _line(racy) in str(caught.value)
    assert not any(word in str(caught.value) for word in ("buffer 0", "axis", "LOOP", "REDUCE", "(got"))


def test_an_out_of_bounds_access_names_the_statement_and_the_array():
    out = np.zeros(3, np.float32)
    with pytest.raises(IndexOutOfBoundsError, match=r"\] x has 4 elements but was accessed at index 9") as caught:
        reads_out_of_bounds(out, np.ones(4, np.float32), np.array([0, 9, 1], np.int32))
    assert _line(reads_out_of_bounds) in str(caught.value) and caught.value.slot == 1


def test_a_refused_construct_shows_its_code_not_its_syntax_class():
    with pytest.raises(KernelSyntaxError, match=r"takes as many indices, got 1: `out\[i\]`$") as caught:
        double(np.zeros((2, 2), np.float32), np.zeros(2, np.float32))
    assert caught.value.value == "out[i]" and "Subscript" not in str(caught.value)


@svod.kernel
def shift_left(out, x):
    for i in svod.prange(x.shape[0]):
        out[i] = x[(i + 1) % x.shape[0]]


@pytest.mark.parametrize("size", [1, 2, 7])
def test_a_remainder_by_a_size_runs_on_every_device(device, size):
    """``% x.shape[0]`` by a size that may be 0 is bounded all the same: WebGPU took it for an index that may
    leave 32 bits and refused the kernel."""
    agrees_with_python(shift_left, device, np.zeros(size, np.float32), np.arange(size, dtype=np.float32))


def test_a_written_array_passed_twice_is_refused_where_python_would_read_its_own_writes():
    """Plain Python reads ``x[0]`` after the loop wrote it; the kernel's work items read and write at once."""
    a = np.arange(5, dtype=np.float32)
    with pytest.raises(BufferMismatchError, match=r"out and x share memory, and shift_left writes out"):
        shift_left(a, a)
    with pytest.raises(BufferMismatchError, match="share memory"):
        shift_left(a[1:], a[:4])
    np.testing.assert_array_equal(a, np.arange(5))  # refused before anything ran
    out = np.zeros(5, np.float32)
    shift_left(out, a)  # apart: fine
    np.testing.assert_array_equal(out, np.roll(a, -1))


@svod.kernel
def strided(out, x, n):
    for i in svod.prange(out.shape[0]):
        out[i] = x[(i * n) % x.shape[0]]  # refused


@svod.kernel
def strided_within(out, x, n: svod.Int[0, 100]):
    for i in svod.prange(out.shape[0]):
        out[i] = x[(i * n) % x.shape[0]]


def test_an_int_argument_outside_its_bounds_says_how_to_give_others():
    out, x = np.zeros(4, np.float32), np.arange(7, dtype=np.float32)
    with pytest.raises(VariableError, match=r"argument n=4294967296 is outside \[-2147483647, 2147483647\], the "
                                            r"values an int argument takes; an annotation gives it others: "
                                            r"n: svod.Int\[lo, hi\]"):
        strided(out, x, 1 << 32)
    with pytest.raises(VariableError, match=r"argument n=101 is outside its annotation svod.Int\[0, 100\]"):
        strided_within(out, x, 101)
    with pytest.raises(BufferMismatchError, match=r"argument n is a svod.Int\[0, 100\], got float"):
        strided_within(out, x, 3.0)
    strided_within(out, x, 100)
    np.testing.assert_array_equal(out, x[np.arange(4) * 100 % 7])


@pytest.mark.parametrize("bounds", [(1, 0), (0, 1 << 63), (0.5, 2), (0,)])
def test_int_bounds_are_two_ints_in_order(bounds):
    with pytest.raises(KernelSyntaxError, match=r"svod\.Int takes two ints"):
        svod.Int[bounds]


def test_a_32_bit_index_that_may_overflow_names_the_line_the_variables_and_the_remedy():
    if "WEBGPU:0" not in svod.available_devices():
        pytest.skip("no WebGPU adapter here")
    with pytest.raises(GraphError, match=r"an index may reach \d+ for some values of n, out.shape\[0\]; .*"
                                         r"n: svod.Int\[lo, hi\]") as caught:
        strided(np.zeros(4, np.float32), np.ones(4, np.float32), 3, device="WEBGPU:0")
    assert _line(strided) in str(caught.value) and "MUL" not in str(caught.value)


def test_a_graph_error_while_building_names_the_statement():
    with pytest.raises(SvodError) as caught:
        mixes_dtypes.build(np.zeros(2, np.int32), np.zeros(2, np.int32))
    assert _line(mixes_dtypes) in str(caught.value)


def test_a_dtype_a_device_cannot_hold_names_where_it_was_made():
    if "WEBGPU:0" not in svod.available_devices():
        pytest.skip("no WebGPU adapter here")
    with pytest.raises(GraphError, match="float64") as caught:
        double(np.zeros(2, np.float64), np.zeros(2, np.float64), device="WEBGPU:0")
    assert _line(double, "out[i] = x[i] * 2.0") in str(caught.value)


@svod.kernel
def too_big(out):
    for i in svod.prange(out.shape[0]):
        out[i] = out[i] + 3_000_000_000  # refused


def test_an_error_without_a_construct_names_its_statement_too():
    with pytest.raises(SvodError, match=r"Python integer 3000000000 out of bounds for int32") as caught:
        too_big.build(np.zeros(2, np.int32))
    assert _line(too_big) in str(caught.value)


@svod.kernel
def row_scale(out, x):
    rows, cols = x.shape
    for r in svod.prange(rows):
        top = -svod.inf
        for c in range(cols):
            top = max(top, x[r, c])
        for c in svod.prange(cols):
            out[r, c] = x[r, c] / top


def test_a_plan_takes_a_shaped_decorated_kernel():
    data = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    plan = svod.ExecutionPlan("CPU")
    src = plan.add_buffer(svod.Buffer.from_numpy(data))
    dst = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 12))
    plan.add_kernel(row_scale.shaped((3, 4), (3, 4)), [dst, src])
    plan.prepare()
    plan.execute()
    np.testing.assert_array_equal(plan.buffers[dst].numpy().reshape(3, 4), data / data.max(axis=1, keepdims=True))
    other = svod.ExecutionPlan("CPU")
    indices = [other.add_buffer(svod.Buffer("CPU", dtypes.float32, 12)) for _ in range(2)]
    with pytest.raises(BufferMismatchError, match=r"has shape \(3, 5\), and plan buffer of 12 elements"):
        other.add_kernel(row_scale.shaped((3, 5), (3, 4)), indices)


@svod.kernel
def running_sums(out, x):
    for r in svod.prange(x.shape[0]):
        running = 0.0
        for c in range(x.shape[1]):
            running += x[r, c]
            out[r, c] = running


def test_a_plan_holds_a_kernel_that_carries_a_local_from_turn_to_turn(device):
    """A carried local is a register of each work item, not memory the call allocates: a plan holds it."""
    x = np.arange(35, dtype=np.float32).reshape(5, 7) - 11.5
    plan = svod.ExecutionPlan(device)
    out = plan.add_buffer(svod.Buffer(device, dtypes.float32, 35))
    src = plan.add_buffer(svod.Buffer.from_numpy(x.ravel(), device))
    plan.add_kernel(running_sums.shaped((5, 7), (5, 7)), [out, src])
    plan.prepare()
    plan.execute()
    want = run_as_python(running_sums, np.zeros_like(x), x)[0]
    np.testing.assert_allclose(plan.buffers[out].numpy().reshape(5, 7), want, rtol=1e-6)


@svod.kernel
def scans_elements(x, last):
    v = -1.0
    k = 0
    for v in x:  # each turn reads its element as the turn before left it: a running sum in place
        if k + 1 < x.shape[0]:
            x[k + 1] += v
            k += 1
    last[0] = v  # the last element, or what v held before a loop of no turns


@svod.kernel
def weighs_elements(x, sums):
    for i in svod.prange(sums.shape[0]):
        s = 0.0
        for v in x:
            s += v * i
        sums[i] = s


@pytest.mark.parametrize("n", [0, 1, 7, 13])
def test_a_loop_over_an_array_s_elements_reads_each_as_python_does(device, n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    agrees_with_python(scans_elements, device, x, np.full(1, 5.0, np.float32), rtol=1e-5)
    agrees_with_python(weighs_elements, device, x, np.zeros(5, np.float32), rtol=1e-5)


@svod.kernel
def clamp_negatives(out, x):
    for i in svod.prange(x.shape[0]):
        if x[i] < 0.0:
            out[i] = 0.0
        else:
            pass


def test_a_pass_statement_builds_nothing():
    x = np.array([-1.5, 2.0, -0.0, 3.0])
    out = np.full(4, 7.0)
    clamp_negatives(out, x)
    np.testing.assert_array_equal(out, [0.0, 7.0, 7.0, 7.0])


@svod.kernel
def fills_a_scalar_array(a):
    a[()] = 3.0


def test_a_zero_dimensional_array_is_refused_with_an_svod_error_not_a_crash():
    with pytest.raises(svod.errors.GraphError, match="a buffer shape needs at least one dimension"):
        fills_a_scalar_array(np.zeros(()))  # ZeroDivisionError in the size bounds before


# ---- a call like one before: the kept launch checks what its arrays' dtypes and shapes do not fix ----------

@svod.kernel
def scaled(out, x, factor, steps: svod.Int[0, 8]):
    for i in svod.prange(x.shape[0]):
        v = x[i]
        for _ in range(steps):
            v = v * factor
        out[i] = v


def test_a_repeated_call_takes_each_calls_numbers_and_arrays():
    x, out = np.arange(7, dtype=np.float64), np.zeros(7)
    for factor, steps in ((2.0, 1), (-0.5, 3), (np.inf, 2), (3.0, 0)):
        with np.errstate(invalid="ignore"):
            want = x * factor ** steps if steps else x.copy()
        scaled(out, x, factor, steps)
        np.testing.assert_array_equal(out, want)
    other = np.linspace(-1.0, 1.0, 7)
    scaled(out, other, 2.0, 1)  # other arrays of the same shape
    np.testing.assert_array_equal(out, other * 2.0)


def test_a_repeated_call_checks_what_changes():
    x, out = np.ones(5), np.zeros(5)
    scaled(out, x, 2.0, 1)
    with pytest.raises(VariableError, match="steps=9 is outside its annotation"):
        scaled(out, x, 2.0, 9)
    with pytest.raises(BufferMismatchError, match="share memory"):
        scaled(x, x, 2.0, 1)
    frozen = np.zeros(5)
    frozen.flags.writeable = False
    with pytest.raises(BufferMismatchError, match="read-only"):
        scaled(frozen, x, 2.0, 1)
    strided = np.zeros(10)[::2]  # not contiguous: copied in and back, as the first call of a kind is
    scaled(strided, np.arange(5.0), 3.0, 1)
    np.testing.assert_array_equal(strided, np.arange(5.0) * 3.0)
    scaled(out, x, 1, 1)  # an int where a float was: another signature
    np.testing.assert_array_equal(out, x)


@svod.kernel
def times(out, x, factor):
    for i in svod.prange(x.shape[0]):
        out[i] = x[i] * factor


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _misaligned(values: np.ndarray) -> np.ndarray:
    shifted = np.zeros(values.nbytes + 1, np.uint8)[1:].view(values.dtype)
    shifted[...] = values
    return shifted


def _overlapping() -> tuple[np.ndarray, np.ndarray]:
    both = np.arange(7.0)
    return both[:5], both[2:]


def _twice(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return array, array


REPEATED_LAYOUTS = {  # (out, x) of five elements each, made afresh
    "strided input": lambda: (np.zeros(5), np.arange(10.0)[::2]),
    "strided output": lambda: (np.zeros(10)[::2], np.arange(5.0)),
    "read-only input": lambda: (np.zeros(5), _frozen(np.arange(5.0))),
    "read-only output": lambda: (_frozen(np.zeros(5)), np.arange(5.0)),
    "misaligned input": lambda: (np.zeros(5), _misaligned(np.arange(5.0))),
    "misaligned output": lambda: (_misaligned(np.zeros(5)), np.arange(5.0)),
    "overlapping": _overlapping,
    "one array": lambda: _twice(np.arange(5.0)),
}


def _outcome(kernel: svod.frontend.pykernel.Kernel, args: tuple[object, ...]) -> tuple[object, ...] | None:
    """None where the call ran; the error it raised, as what tells one from another."""
    try:
        kernel(*args)
    except svod.errors.SvodError as err:
        return type(err), str(err), err.stage, err.kernel, err.value
    return None


@pytest.mark.parametrize("layout", list(REPEATED_LAYOUTS))
def test_a_repeated_call_takes_an_array_as_a_first_call_does(layout):
    """An array of a kept launch's dtype and shape that is not contiguous, aligned, writeable where written or apart
    from a written one is copied, or refused with the words of a first call with it."""
    warmed = svod.kernel(times.fn)
    for start in (1.0, 2.0):  # the second is a call like the first
        out, x = np.zeros(5), np.arange(start, start + 5)
        warmed(out, x, 2.0)
        np.testing.assert_array_equal(out, x * 2.0)
    args = REPEATED_LAYOUTS[layout]()
    before = [np.copy(a) for a in args]
    got = _outcome(warmed, (*args, 2.0))
    assert len(warmed._calls) == 1  # the first calls' key: the call took their launch
    first_args = args if got is not None else REPEATED_LAYOUTS[layout]()
    assert got == _outcome(svod.kernel(times.fn), (*first_args, 2.0))
    if got is None:  # both ran, as NumPy computes it
        for out, _ in (args, first_args):
            np.testing.assert_array_equal(out, before[1] * 2.0)
    else:  # refused before anything ran
        for value, was in zip(args, before, strict=True):
            np.testing.assert_array_equal(value, was)
    out, x = np.zeros(5), np.arange(3.0, 8.0)
    warmed(out, x, 2.0)  # and a call like the first ones after it
    np.testing.assert_array_equal(out, x * 2.0)


def test_repeated_calls_from_threads_at_once_each_take_their_own_arrays():
    """A kept launch fills argument arrays of its own for one call at a time; a call from another thread meanwhile
    (the kernel runs without the GIL) launches with arrays of its own."""
    failures: list[str] = []

    def calls(factor: float) -> None:
        x, out = np.arange(50_000, dtype=np.float64), np.zeros(50_000)
        for turn in range(400):
            x[0] = turn
            times(out, x, factor)
            if not np.array_equal(out, x * factor):
                failures.append(f"factor {factor}, turn {turn}")

    threads = [threading.Thread(target=calls, args=(factor,)) for factor in (2.0, 3.0, -1.0, 0.5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_repeated_call_out_of_bounds_names_the_statement():
    out, x, idx = np.zeros(3, np.float32), np.ones(4, np.float32), np.array([0, 1, 2], np.int32)
    reads_out_of_bounds(out, x, idx)
    with pytest.raises(IndexOutOfBoundsError, match=r"\] x has 4 elements but was accessed at index 9") as caught:
        reads_out_of_bounds(out, x, np.array([0, 9, 1], np.int32))
    assert _line(reads_out_of_bounds) in str(caught.value) and caught.value.slot == 1
