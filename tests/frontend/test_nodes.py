"""The frontend's own tree helpers (``svod.frontend.nodes``) against ``ast``'s: ``walk`` and ``statements_in`` in
``ast.walk``'s order, ``copied`` as ``copy.deepcopy`` copies, ``placed``'s locations and copies; each over the
frontend's own source, where every kind of statement and expression svod reads stands."""

from __future__ import annotations

import ast
import copy
import inspect
from pathlib import Path

import pytest

import svod.frontend
from svod.frontend.nodes import SHOWN, assign, copied, load, placed, shown, statements_in, walk

SOURCES = sorted(Path(inspect.getfile(svod.frontend)).parent.glob("*.py"))

ODD_STATEMENTS = """
try:
    a[0] = 1
except ValueError as e:
    b[1] += 2
else:
    with f() as g:
        c[2]: int = 3
finally:
    for i in range(3):
        while i:
            pass
try:
    pass
except* KeyError:
    class Inner:
        e[4] = 5
match q:
    case [x, *rest] if x:
        d[3] = (y := 4)
    case {"k": v}:
        def inner(p=lambda z: z):
            return [w for w in p]
async def later():
    async with h() as j:
        async for k in j:
            await k
"""


TREES = [ast.parse(path.read_text()) for path in SOURCES] + [ast.parse(ODD_STATEMENTS)]


def test_walk_visits_what_ast_walk_does_in_its_order():
    for tree in TREES:
        assert all(a is b for a, b in zip(walk(tree), ast.walk(tree), strict=True))


def test_statements_in_are_ast_walks_statements_in_its_order():
    for tree in TREES:
        for stmt in tree.body:
            expected = [node for node in ast.walk(stmt) if isinstance(node, ast.stmt)]
            found = list(statements_in(stmt))
            assert [id(node) for node in found] == [id(node) for node in expected]


def test_a_copy_is_deepcopys_with_no_node_of_the_original():
    for tree in TREES[:8] + TREES[-1:]:
        made = copied(tree)
        assert ast.dump(made, include_attributes=True) == ast.dump(copy.deepcopy(tree), include_attributes=True)
        originals = {id(node) for node in ast.walk(tree)}
        assert not any(id(node) in originals for node in ast.walk(made))


def test_a_copy_keeps_a_part_that_stands_twice_shared_and_the_user_node_it_shows():
    user = ast.parse("x[i] = y + 1").body[0]
    part = ast.BinOp(load("y"), ast.Add(), ast.Constant(1))
    made = assign(ast.Subscript(load("x"), ast.Tuple([part, part], ast.Load()), ast.Load()), part)
    setattr(made, SHOWN, user)
    twin = copied(made)
    pair = twin.targets[0].slice.elts
    assert pair[0] is pair[1] is twin.value and pair[0] is not part
    assert shown(twin) is user  # the user's node itself, not a copy of it


def test_a_copy_keeps_a_list_that_stands_twice_shared():
    """``copy.copy`` of a statement shares its lists with it: a copy of both keeps them one list, as a deep copy
    does, so that a rewriting of one in place is the other's too."""
    loop = ast.parse("while c:\n    a[0] = 1\nelse:\n    b[0] = 2").body[0]
    twin = copied(ast.Module([loop, copy.copy(loop)], []))
    assert twin.body[0].orelse is twin.body[1].orelse and twin.body[0].body is twin.body[1].body
    assert twin.body[0].orelse is not loop.orelse


@pytest.mark.parametrize("column", [0, 4])
def test_placed_puts_svods_nodes_at_the_users_statement_and_copies_a_node_standing_twice(column):
    user = ast.parse("z = w * 2" if column == 0 else f"if c:\n{' ' * column}z = w * 2").body[-1]
    at = user if column == 0 else user.body[0]
    part = ast.BinOp(load("w"), ast.Mult(), ast.Constant(2))
    kept = ast.parse("v").body[0].value  # a user's node: it keeps its own place
    made = placed([assign("a", ast.Tuple([part, part, kept], ast.Load()))], at)[0]
    first, second, third = made.value.elts
    assert first is part and second is not part and ast.dump(second) == ast.dump(part)
    assert third is kept and (third.lineno, third.col_offset) == (1, 0)
    for node in (made, made.targets[0], made.value, first, second, first.left, second.right):
        assert (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset) == \
            (at.lineno, at.col_offset, at.end_lineno, at.end_col_offset)
        assert shown(node) is at
    assert not hasattr(third, SHOWN)
