import pytest

from svod.dtype import dtypes
from svod.errors import GraphError
from svod.ir import AxisKind, Ops, PatternMatcher, UOp, UPat, graph_rewrite, replacements_of, substitute


def test_upat_binds_and_checks_repeated_names():
    x = UOp.define_var("x", 0, 9)
    pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
    bindings: dict[str, UOp] = {}
    assert pat.match(x + x, bindings) and bindings["a"] is x
    assert not pat.match(x + 1, {})


def test_commutative_ops_match_either_order():
    x = UOp.define_var("x", 0, 9)
    pat = UPat(Ops.MUL, src=(UPat.cvar("c"), UPat.var("y")))
    bindings: dict[str, UOp] = {}
    assert pat.match(x * 3, bindings) and bindings["c"].arg == 3 and bindings["y"] is x
    assert not UPat(Ops.SUB, src=(UPat.cvar("c"), UPat.var("y"))).match(x - 3, {})


def test_dtype_and_arg_filters():
    assert UPat(Ops.CONST, dtype=dtypes.int32, arg=3).match(UOp.const(dtypes.int32, 3), {})
    assert not UPat(Ops.CONST, dtype=dtypes.int32, arg=3).match(UOp.const(dtypes.int64, 3), {})
    assert not UPat.const(1).match(UOp.const(dtypes.bool, True), {})


def test_graph_rewrite_reaches_fixed_point_through_new_nodes():
    # rewrite x*2 -> x+x and x+x -> x<<1 spelled as MUL by 2 again would loop; use a two-step chain instead
    pm = PatternMatcher([
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(4))), lambda x: (x * 2) * 2),
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(2))), lambda x: x + x),
    ])
    x = UOp.define_var("x", 0, 9)
    out = graph_rewrite((x * 4) + 1, pm)
    assert out is ((x + x) + (x + x)) + 1


def test_ctx_is_passed_when_declared():
    seen = []
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: seen.append((ctx, v.arg[0])))])
    graph_rewrite(UOp.define_var("q", 0, 1) + 1, pm, ctx="here")
    assert seen == [("here", "q")]


def test_rules_that_undo_each_other_fail_loudly():
    pm = PatternMatcher([
        (UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(1))), lambda x: x + 2 - 1),
        (UPat(Ops.SUB, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(2))), UPat.const(1))),
         lambda x: x + 1),
    ])
    with pytest.raises(GraphError, match="fixed point"):
        graph_rewrite(UOp.define_var("x", 0, 3) + 1, pm, name="loopy", max_steps=10_000)


def _chain(length: int) -> UOp:
    node = UOp.define_var("x", 0, 9)
    for step in range(length):
        node = node * 3 + step
    return node


def test_a_graph_without_an_op_a_rule_matches_is_left_without_a_walk():
    """``max_steps`` counts the nodes visited: a walk of the chain would take thousands."""
    pm = PatternMatcher([(UPat(Ops.EXP2, name="e"), lambda e: e.src[0])])
    chain = _chain(1_000)
    assert graph_rewrite(chain, pm, max_steps=2) is chain
    as_float = chain.cast(dtypes.float32)
    assert graph_rewrite(as_float.exp2() + 1.0, pm, max_steps=10) is as_float + 1.0  # the chain is not walked
    x = UOp.define_var("x", 0, 9).cast(dtypes.float32)
    over_exp, over_x = x.exp2(), x
    for _ in range(1_000):
        over_exp, over_x = over_exp * 3.0, over_x * 3.0
    assert graph_rewrite(over_exp, pm) is over_x
    with pytest.raises(GraphError, match="fixed point"):
        graph_rewrite(over_exp, pm, max_steps=100)  # an EXP2 at the bottom: the chain above it is walked


def test_nothing_below_a_fixed_point_is_walked_again():
    pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(1))), lambda x: x)])
    chain = _chain(1_000)
    fixed: set[UOp] = set()
    assert graph_rewrite(chain * 1, pm, fixed_points=fixed) is chain
    assert chain in fixed and graph_rewrite(chain, pm, max_steps=2, fixed_points=fixed) is chain
    assert graph_rewrite(chain + 1, pm, max_steps=5, fixed_points=fixed) is chain + 1


def test_replacements_are_built_over_the_replacements_below_them():
    """A loop whose end counts with another loop (``range(c + 1)``), each loop's end clamped: the inner loop's new
    end holds the outer loop's new form, so the graph substituted has one loop per axis. A map built from the
    nodes as they were kept the old outer loop inside the inner one's end."""
    outer = UOp.range(UOp.index_const(8), 0, AxisKind.LOOP)
    inner = UOp.range(outer + 1, 1, AxisKind.LOOP)
    root = outer * 10 + inner
    made = replacements_of(root, lambda u: UOp.range(u.src[0].minimum(5), *u.arg) if u.op is Ops.RANGE else None)
    assert list(made) == [outer, inner]
    assert outer not in made[inner].toposort() and made[outer] in made[inner].toposort()
    ranges = [u for u in substitute(root, made).toposort() if u.op is Ops.RANGE]
    assert sorted(r.arg[0] for r in ranges) == [0, 1]
    stale = {u: UOp.range(u.src[0].minimum(5), *u.arg) for u in root.toposort() if u.op is Ops.RANGE}
    assert sorted(r.arg[0] for r in substitute(root, stale).toposort() if r.op is Ops.RANGE) == [0, 0, 1]
