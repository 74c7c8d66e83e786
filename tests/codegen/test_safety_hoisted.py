"""A load the same in every turn of a loop, read under a condition on the loop's variable, is computed once
outside the loop: the guard that makes it safe (or checks it) is the condition holding in some turn
(``indexing.in_some_turn``), never dropped. Dropped, the load was checked wherever the loop turned, and a
call Python computes raised ``IndexOutOfBoundsError``."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, UOp, dtypes
from svod.codegen.indexing import in_some_turn
from svod.frontend.oracle import run_as_python
from svod.frontend.pykernel import Kernel
from tests.helpers import evaluate_expression, open_device


# m and e are bounded: WGSL's 32-bit indices refuse a kernel whose index may pass them otherwise
@svod.kernel
def first_of_a_shifted_loop(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(3, m + e):
            out[i] = x[i * 3 + m] if j < m else out[i] + 1.0


@svod.kernel
def last_turn_decides(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = x[i + m] if j > m else out[i] - 1.0


@svod.kernel
def summed_under_the_loop_variable(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        s = 0.0
        for j in range(e):
            s += x[m + i] if m < j + 2 else 0.5
        out[i] = s


@svod.kernel
def either_end(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(2, e):
            out[i] = x[m] if (j < m - 10 or not j <= m) else out[i] * 2.0


@svod.kernel
def one_turn_equals(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = x[m + 1] if j == m else out[i] + 3.0


@svod.kernel
def some_turn_differs(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(e):
            out[i] = out[i] + 1.0 if j != m - 2 else x[m]


@svod.kernel
def stored_under_an_if(out, x, m: svod.Int[0, 64], e: svod.Int[0, 16]):
    for i in svod.prange(out.shape[0]):
        for j in range(3, m + e):
            if j < m:
                out[i] = x[i * 3 + m] + j


@svod.kernel
def nested_triangle(out, x, m: svod.Int[0, 64]):
    for i in svod.prange(out.shape[0]):
        for j in range(i):
            for k in range(j, m):
                out[i] = x[m - 2] if k + j < m - 3 else out[i] + 0.25


KERNELS = [first_of_a_shifted_loop, last_turn_decides, summed_under_the_loop_variable, either_end, one_turn_equals,
           some_turn_differs, stored_under_an_if]


def _outcome(kernel: Kernel, device: str | None, args: list[object]) -> np.ndarray | str:
    """The output array after the call, or the name of the error it raised (plain Python's ``IndexError`` is
    svod's ``IndexOutOfBoundsError``)."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        if device is None:
            return np.asarray(run_as_python(kernel, *copies)[0])
        kernel(*copies, device=svod.get_device("CPU", device) if device in ("llvm", "clang") else device)
    except (IndexError, svod.errors.IndexOutOfBoundsError):
        return "out of bounds"
    return copies[0]  # type: ignore[return-value]


def _agrees(kernel: Kernel, device: str, args: list[object]) -> None:
    want, got = _outcome(kernel, None, args), _outcome(kernel, device, args)
    if isinstance(want, str) or isinstance(got, str):
        assert isinstance(want, str) and isinstance(got, str) and got == want, (args[2:], want, got)
    else:
        np.testing.assert_array_equal(got, want, err_msg=str(args[2:]))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_a_hoisted_load_is_made_and_reported_where_python_reads_it(kernel_device, kernel):
    """Every ``m`` and loop end around the point where the condition first holds in some turn, over sizes
    0, 1 and a prime: the outputs (or the out-of-bounds error) are plain Python's."""
    for n in (0, 1, 7):
        x = np.arange(1.0, 3 * n + 2, dtype=np.float32)  # float32: WebGPU has no float64
        for m in (0, 1, 2, 3, 4, 5, 3 * n + 1, 3 * n + 2, 3 * n + 6):
            for e in (0, 1, 2, 3, 5):
                _agrees(kernel, kernel_device, [np.full(n, -0.0, np.float32), x, m, e])


def test_a_load_under_a_triangular_nest_is_guarded_by_both_loops(kernel_device):
    """A load outside two loops, the inner's start the outer's variable: the condition is taken over the
    inner loop's turns (its last), then the outer's."""
    for n in (0, 1, 2, 5):
        for m in range(0, 12):
            _agrees(nested_triangle, kernel_device, [np.zeros(n, np.float32), np.arange(5.0, dtype=np.float32), m])


@pytest.fixture(params=["llvm", "clang", "PYTHON", "CL:0", "WEBGPU:0"])
def kernel_device(request: pytest.FixtureRequest) -> str:
    """The devices of the standards (CPU's two compiler pairs, the reference, PoCL, lavapipe), by name; one
    missing here is a skip naming it."""
    open_device(request.param)
    return request.param


def _brute_force(condition: UOp, r: UOp, env: dict[str, int], end: int) -> bool:
    return any(evaluate_expression(condition, {**env, "r": turn}) for turn in range(end))


@pytest.mark.parametrize("spelling", ["lt", "le", "gt", "eq", "ne", "or", "not"])
@pytest.mark.parametrize("coefficient", [-2, -1, 0, 1, 3])
def test_a_condition_in_some_turn_holds_wherever_a_turn_satisfies_it(spelling, coefficient):
    """``in_some_turn`` over every value of a variable and of the loop's end: it holds wherever some turn
    satisfies the condition, and, but for ``==`` with a step past 1 and ``!=`` (weaker, sound), only there."""
    m, n = UOp.define_var("m", -6, 6), UOp.define_var("n", -1, 5)
    r = UOp.range(n, 0)
    turn_var = UOp.define_var("r", -2, 6)
    side = r * coefficient + 1
    made = {"lt": side < m, "le": side <= m, "gt": side.gt(m), "eq": side.eq(m), "ne": side.ne(m),
            "or": (side < m - 3) | side.gt(m + 2), "not": (side <= m).ne(True)}[spelling]
    found = in_some_turn(made, r)
    assert found is not None and r not in found.toposort()
    as_variable = svod.ir.substitute(made, {r: turn_var})
    exact = not (spelling == "eq" and abs(coefficient) > 1) and spelling != "ne"
    for mv in range(-6, 7):
        for nv in range(-1, 6):
            some = _brute_force(as_variable, r, {"m": mv, "n": nv}, nv)
            held = bool(evaluate_expression(found, {"m": mv, "n": nv}))
            assert held or not some, (mv, nv)
            if exact:
                assert held == some, (mv, nv)


def test_a_condition_no_turn_decides_is_not_taken_over_the_loop():
    """A load on the loop's variable in the condition, a square of it, or a division of it: no condition."""
    r = UOp.range(UOp.define_var("n", 0, 9), 0)
    m = UOp.define_var("m", 0, 9)
    assert in_some_turn((r * r) < m, r) is None
    assert in_some_turn((r // 2) < m, r) is None
    assert in_some_turn(UOp.const(dtypes.bool, True) & ((r // 2) < m), r) is None


def _builder_form(n: int) -> UOp:
    """``out[i] = (j < m).where(x[i*3 + m], out[i] + 1.0)`` for ``j`` in ``range(3, 3 + e)``, built as IR."""
    k = KernelBuilder("shifted_where")
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, 3 * n + 1)
    m, e = k.var("m", 0, 3 * n + 8), k.var("e", 0, 8)
    i, r = k.range(n), k.range(e, AxisKind.LOOP)
    j = r + 3
    k.store(out[i], (j < m).where(x[i * 3 + m], out[i] + 1.0))
    return k.build()


def _run_built(ast: UOp, device: str, n: int, m: int, e: int) -> np.ndarray | str:
    out, x = np.full(n, -0.0, np.float32), np.arange(1.0, 3 * n + 2, dtype=np.float32)
    try:
        svod.run(ast, [out, x], svod.get_device("CPU", device) if device in ("llvm", "clang") else device, m=m, e=e)
    except svod.errors.IndexOutOfBoundsError:
        return "out of bounds"
    return out


def test_the_builders_where_on_the_loop_variable_is_the_references(kernel_device):
    """The IR's ``where`` makes its branch's access only where its condition holds: each device does what the
    PYTHON reference does, for ``m`` below, at and past the first turn's ``j`` and past the buffer."""
    for n in (1, 2, 5):
        ast = _builder_form(n)
        for m in (0, 1, 3, 4, 3 * n, 3 * n + 1, 3 * n + 4):
            for e in (0, 1, 2, 6):
                want, got = _run_built(ast, "PYTHON", n, m, e), _run_built(ast, kernel_device, n, m, e)
                if isinstance(want, str) or isinstance(got, str):
                    assert isinstance(want, str) and isinstance(got, str) and got == want, (n, m, e, want, got)
                else:
                    np.testing.assert_array_equal(got, want, err_msg=str((n, m, e)))
