from hypothesis import given, settings
from hypothesis import strategies as st

from svod.dtype import dtypes
from svod.ir import AxisKind, Ops, UOp, simplify
from svod.ir.alu import exec_alu
from tests.helpers import evaluate_expression


def test_constant_folding_uses_c_semantics():
    c = UOp.const(dtypes.int32, -7)
    assert simplify(c // 2).arg == -3
    assert simplify(c % 2).arg == -1
    assert simplify(UOp.const(dtypes.uint8, 250) + 10).arg == 4
    assert simplify(UOp.const(dtypes.float32, 0.1) + 0.2).arg == exec_alu(Ops.ADD, dtypes.float32, [0.1, 0.2])


def test_identities():
    x = UOp.define_var("x", -5, 5)
    assert simplify(x + 0) is x
    assert simplify(0 + x) is x
    assert simplify(x * 1) is x
    assert simplify(x * 0).arg == 0
    assert simplify(x // 1) is x
    assert simplify(x.alu(Ops.NEG).alu(Ops.NEG)) is x
    assert simplify(x - x).arg == 0


def test_float_identities_keep_ieee():
    f = UOp.param(0, dtypes.float32, 4)[0].load()
    assert simplify(f * 0.0).op is Ops.MUL
    assert simplify(f * 1.0) is f


def test_bounds_of_ranges_and_variables():
    n = UOp.define_var("n", 1, 100)
    r = UOp.range(n, 0)
    assert (r.vmin, r.vmax) == (0, 99)
    assert ((r * 4 + 3).vmin, (r * 4 + 3).vmax) == (3, 399)
    assert ((r % 8).vmin, (r % 8).vmax) == (0, 7)
    assert ((r - 50).vmin, (r - 50).vmax) == (-50, 49)


def test_a_divisor_that_may_be_zero_keeps_bounds():
    """A size may be 0 (an empty array): svod divides by zero as by one and takes the remainder 0, so ``i % n``
    and ``i // n`` stay bounded (a 32-bit device refused ``x[(i + 1) % x.shape[0]]`` as unbounded)."""
    n = UOp.define_var("n", 0, 100)
    i = UOp.range(UOp.define_var("m", 1, 1000), 0)
    assert ((i % n).vmin, (i % n).vmax) == (0, 99)
    assert (((i - 500) % n).vmin, ((i - 500) % n).vmax) == (-99, 99)
    assert ((i // n).vmin, (i // n).vmax) == (0, 999)
    zero = UOp.define_var("z", 0, 0)
    assert ((i % zero).vmin, (i % zero).vmax) == (0, 0) and ((i // zero).vmin, (i // zero).vmax) == (0, 999)


def test_an_access_gate_that_always_holds_is_dropped():
    """``-i != 7`` for ``i >= 0`` folds to True; an access gated by it is not gated (the linearizer opened an IF
    for the constant, outside the CPU's loop over work items, and split it)."""
    buf = UOp.param(0, dtypes.float32, 8)
    i = UOp.range(8, 0)
    gated = simplify(buf.index(i, (-i).ne(7)))
    assert gated.op is Ops.INDEX and len(gated.src) == 2


def test_comparisons_decided_by_bounds_fold():
    r = UOp.range(16, 0)
    assert simplify(r < 16).arg is True
    assert simplify(r < 0).arg is False
    assert simplify(r.ne(20)).arg is True
    assert simplify(r < 8).op is Ops.CMPLT
    assert simplify(r // 16).arg == 0
    assert simplify(r % 16) is r


def test_division_of_multiples():
    r = UOp.range(10, 0, AxisKind.LOOP)
    assert simplify((r * 4 + 3) // 4) is r
    assert simplify((r * 4 + 3) % 4).arg == 3
    assert simplify((r * 4) // 4) is r


def test_an_index_split_into_digits_is_joined_again():
    """A store through ``a.reshape(-1, 4)`` of an (n, 3, 4) array indexes it at ``(r // 3, r % 3, j)``, and a
    flat view at ``(r // 12, (r // 4) % 3, r % 4)``: the race check must see the one index, ``4 * r + j``."""
    r = UOp.range(60, 0)
    assert simplify((r // 3) * 3 + r % 3) is r
    assert simplify(((r // 12) * 3 + (r // 4) % 3) * 4 + r % 4) is r
    x = UOp.define_var("x", -10, 10, dtypes.int32)
    joined = (x // 5) * 5 + x % 5
    assert simplify(joined) is x  # C's quotient and remainder join for negative numbers too
    assert all(evaluate_expression(joined, {"x": v}) == v for v in range(-10, 11))
    assert simplify((r // 3) * 4 + r % 3).op is Ops.ADD
    assert simplify((r // 12) * 3 + (r // 5) % 3).op is Ops.ADD


def test_bounds_widen_to_the_dtype_on_possible_overflow():
    x = UOp.define_var("x", 0, 2**31 - 1, dtypes.int32)
    assert (x + 1).vmax == 2**31 - 1 and (x + 1).vmin == -(2**31)


_leaf = st.sampled_from(["x", "y"]) | st.integers(-20, 20)
_ops = st.sampled_from([Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX])
_trees = st.recursive(_leaf, lambda kids: st.tuples(_ops, kids, kids), max_leaves=12)


def _build(tree, xs):
    if isinstance(tree, str):
        return xs[tree]
    if isinstance(tree, int):
        return UOp.const(dtypes.int32, tree)
    op, a, b = tree
    return _build(a, xs).alu(op, _build(b, xs))


@settings(max_examples=300, deadline=None)
@given(_trees, st.integers(-10, 10), st.integers(0, 15))
def test_simplify_preserves_value_and_bounds_hold(tree, xv, yv):
    xs = {"x": UOp.define_var("x", -10, 10, dtypes.int32), "y": UOp.define_var("y", 0, 15, dtypes.int32)}
    expr = _build(tree, xs)
    env = {"x": xv, "y": yv}
    value = evaluate_expression(expr, env)
    assert evaluate_expression(simplify(expr), env) == value
    assert expr.vmin <= value <= expr.vmax
