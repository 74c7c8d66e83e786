import gc
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svod.device import ConcreteLaunchDims, ProgramSpec, launch
from svod.device.launch import INT64_MAX, INT64_MIN, LaunchShape, evaluate
from svod.dtype import dtypes
from svod.errors import LaunchError, SvodError, VariableError
from svod.ir import Ops, UOp

N = UOp.define_var("n", 1, 4)
ONE = UOp.index_const(1)


def test_constants_and_variables():
    assert evaluate(UOp.index_const(7), {}) == 7
    assert evaluate(N * 3 + 1, {"n": 4}) == 13
    assert evaluate(N.bind(2) * 5, {}) == 10


def test_variable_errors():
    with pytest.raises(VariableError, match="missing runtime value for launch-size variable n"):
        evaluate(N + 1, {})
    with pytest.raises(VariableError, match=r"variable n=5 is outside bounds \[1, 4\]"):
        evaluate(N + 1, {"n": 5})
    with pytest.raises(VariableError, match="must be integer"):
        evaluate(N + 1, {"n": 2.0})


def test_a_launch_shape_keeps_the_sizes_it_evaluated_and_checks_every_new_value(monkeypatch):
    """A dispatch with values seen before reads its sizes from what the shape kept; one out of bounds, or
    not an integer, is an error every time."""
    shape = LaunchShape((N * 8 + (N - 1) // 2, ONE, ONE), None)
    evaluated = []
    real = launch.evaluate_dims
    monkeypatch.setattr(launch, "evaluate_dims", lambda sizes, values: evaluated.append(1) or real(sizes, values))
    assert shape.dims({"n": 3}).global_size == (25, 1, 1) and shape.dims({"n": 3, "m": 7}).global_size == (25, 1, 1)
    assert shape.dims({"n": 4}).global_size == (33, 1, 1) and len(evaluated) == 2
    for _ in range(2):
        with pytest.raises(VariableError, match=r"variable n=5 is outside bounds \[1, 4\]"):
            shape.dims({"n": 5})
        with pytest.raises(VariableError, match="must be integer"):
            shape.dims({"n": 3.0})


def test_an_expression_is_compiled_once_and_not_kept_alive_by_it():
    """``evaluate`` runs an expression's program, made on its first evaluation; the program holds the nodes'
    arguments, not the nodes, so the expression still goes when nothing else holds it."""
    m = UOp.define_var("m", 0, 1 << 40)
    expr = ((m * 7 + 3) // 2).maximum(m % 5) - 1
    assert [evaluate(expr, {"m": v}) for v in (0, 1, 10, 1 << 40)] == [
        max((v * 7 + 3) // 2, v % 5) - 1 for v in (0, 1, 10, 1 << 40)]
    program = launch._program(expr)
    assert launch._program(expr) is program
    alive = weakref.ref(expr)
    del expr, program
    gc.collect()
    assert alive() is None


def test_float_constant_is_rejected():
    f = UOp(Ops.CONST, dtypes.float32, (), 2.0)
    with pytest.raises(LaunchError, match="must be integer"):
        evaluate(f, {})


def test_unsupported_op():
    with pytest.raises(LaunchError, match="unsupported"):
        evaluate(UOp.index_const(3).alu(Ops.XOR, 1), {})


def test_division_by_zero_and_overflow():
    zero_div = UOp.index_const(4) // (N - N)
    with pytest.raises(LaunchError, match="invalid launch-size arithmetic"):
        evaluate(zero_div, {"n": 2})
    big = UOp.index_const(INT64_MAX)
    with pytest.raises(LaunchError, match="invalid launch-size arithmetic"):
        evaluate(big + N, {"n": 1})
    with pytest.raises(LaunchError, match="invalid launch-size arithmetic"):
        evaluate(UOp.index_const(INT64_MIN) // -1, {})


def test_pass_through_ops():
    assert evaluate(N.cast(dtypes.int32).cast(dtypes.index), {"n": 3}) == 3
    assert evaluate(N.after(UOp.index_const(0)), {"n": 3}) == 3
    assert evaluate(-(N - 10), {"n": 3}) == 7
    assert evaluate(abs(N - 10), {"n": 3}) == 7


def test_dims_must_be_positive():
    with pytest.raises(LaunchError, match="launch dimension 0 evaluated to non-positive value 0"):
        ProgramSpec.resolve_launch_dims((N - 1, ONE, ONE), None, {"n": 1})
    with pytest.raises(LaunchError, match="launch dimension 2 evaluated to non-positive value -1"):
        ProgramSpec.resolve_launch_dims((ONE, ONE, N - 2), None, {"n": 1})
    dims = ProgramSpec.resolve_launch_dims((N * 8, ONE, ONE), (N, ONE, ONE), {"n": 2})
    assert dims == ConcreteLaunchDims((16, 1, 1), (2, 1, 1))


_OPS = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX]
_leaf = st.sampled_from(["a", "b"]) | st.integers(-(2**40), 2**40) | st.sampled_from([INT64_MAX, INT64_MIN, 0])
_trees = st.recursive(_leaf, lambda kids: st.tuples(st.sampled_from(_OPS), kids, kids) | st.tuples(
    st.sampled_from([Ops.NEG, Ops.ABS]), kids), max_leaves=10)


class _UndefinedError(Exception):
    pass


def _reference(tree, env) -> int:
    """Python integers, with the C rules: division truncates, results must fit in int64."""
    if isinstance(tree, str):
        return env[tree]
    if isinstance(tree, int):
        return tree
    op, *kids = tree
    args = [_reference(k, env) for k in kids]
    if op is Ops.NEG:
        r = -args[0]
    elif op is Ops.ABS:
        r = abs(args[0])
    elif op is Ops.ADD:
        r = args[0] + args[1]
    elif op is Ops.SUB:
        r = args[0] - args[1]
    elif op is Ops.MUL:
        r = args[0] * args[1]
    elif op is Ops.MAX:
        r = max(args)
    else:
        a, b = args
        if b == 0:
            raise _UndefinedError
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        if not INT64_MIN <= q <= INT64_MAX:
            raise _UndefinedError
        r = q if op is Ops.IDIV else a - b * q
    if not INT64_MIN <= r <= INT64_MAX:
        raise _UndefinedError
    return r


def _build(tree):
    if isinstance(tree, str):
        return UOp.define_var(tree, INT64_MIN, INT64_MAX)
    if isinstance(tree, int):
        return UOp.index_const(tree)
    op, *kids = tree
    built = [_build(k) for k in kids]
    return built[0].alu(op, *built[1:])


@settings(max_examples=400, deadline=None)
@given(_trees, st.integers(-(2**62), 2**62), st.integers(-1000, 1000))
def test_evaluation_matches_python_integers_and_never_wraps(tree, a, b):
    env = {"a": a, "b": b}
    expr = _build(tree)
    try:
        expected = _reference(tree, env)
    except _UndefinedError:
        with pytest.raises(SvodError, match="invalid launch-size arithmetic"):
            evaluate(expr, env)
    else:
        assert evaluate(expr, env) == expected
