"""A float max or min of an array statement as a tape records it: the same value, with a derivative.

svod's rewriting of an array statement (``svod.frontend.array_exprs``) reduces a float max as the integer
maximum of order keys (``pylang.max_key``), a NaN's beyond every number's, and takes the float of the winning
key back (``pylang.from_key``): no float passes from an element to the result, so the adjoint would see none.
On a tape the reduction also keeps where the winner stands, and a second pass over the elements takes the
float there::

    m_key = _svod_np.int64(-9223372036854775808)        m_key = _svod_np.int64(-9223372036854775808)
    for k in range(n):                            ──▶   m_key_0 = -1
        m_key = max(m_key, _svod_max_key(x[k]))         for k in range(n):
    m = _svod_from_key(m_key)                               m_key_0 = (k if _svod_max_key(x[k]) > m_key else m_key_0)
                                                            m_key = max(m_key, _svod_max_key(x[k]))
                                                        m = _svod_np.float64(0)
                                                        for k in range(n):
                                                            m = (x[k] if k == m_key_0 else m)

The winner is the plan's (the first of equal keys), so the value is the plan's, bit for bit. The second pass's
choice reads no value its turns carry, so its adjoint passes the result's adjoint to the winner turn by turn,
without running the turns before each again (as a choice by ``x[k] > m`` would need): linear in the elements.
"""

from __future__ import annotations

import ast

from svod.frontend.nodes import assign, call, constant, copied, load

_FLOATS = {"int64": "float64", "int32": "float32"}
"""The float of each order key's integer (``array_exprs.KEYED``)."""


def float_reductions(node: ast.FunctionDef) -> ast.FunctionDef | None:
    """``node`` with its keyed reductions of floats taken as the module's docstring says, or None where it makes
    none."""
    rewritten = copied(node)
    if not _block(rewritten.body):
        return None
    return ast.fix_missing_locations(rewritten)


def _block(body: list[ast.stmt]) -> bool:
    """Rewrite the keyed reductions of ``body`` (and of the blocks its statements hold) in place; whether any."""
    changed = False
    position = 0
    while position < len(body):
        found = _reduction(body[position:position + 3])
        if found is not None:
            body[position:position + 3] = found
            position += len(found)
            changed = True
            continue
        for inner in (getattr(body[position], "body", None), getattr(body[position], "orelse", None)):
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                changed = _block(inner) or changed
        position += 1
    return changed


def _reduction(statements: list[ast.stmt]) -> list[ast.stmt] | None:
    """The statements of one keyed reduction (its key's start, its loop nest, its result) rewritten, or None
    where ``statements`` are not one."""
    if len(statements) != 3:
        return None
    start, nest, result = statements
    if not (isinstance(start, ast.Assign) and isinstance(start.targets[0], ast.Name)
            and isinstance(start.value, ast.Call) and isinstance(start.value.func, ast.Attribute)
            and start.value.func.attr in _FLOATS and isinstance(nest, ast.For)
            and isinstance(result, ast.Assign) and isinstance(result.targets[0], ast.Name)
            and isinstance(result.value, ast.Call) and isinstance(result.value.func, ast.Name)
            and result.value.func.id == "_svod_from_key"):
        return None
    key = start.targets[0].id
    loops, innermost = _loops(nest)
    update = innermost.body[-1] if innermost.body else None
    kind = _kind(update, key)
    if kind is None or not all(isinstance(loop.target, ast.Name) for loop in loops) or \
            not (isinstance(result.value.args[0], ast.Name) and result.value.args[0].id == key):
        return None
    assert isinstance(update, ast.Assign) and isinstance(update.value, ast.Call)
    item = update.value.args[1].args[0]  # type: ignore[attr-defined]
    variables = [loop.target.id for loop in loops]  # type: ignore[attr-defined]
    places = [f"{key}_{k}" for k in range(len(variables))]
    second = copied(nest)
    better = ast.Compare(call(f"_svod_{kind}_key", copied(item)), [ast.Gt() if kind == "max" else ast.Lt()],
                         [load(key)])
    innermost.body[-1:] = [*(assign(place, ast.IfExp(copied(better), load(variable), load(place)))
                             for place, variable in zip(places, variables, strict=True)), update]
    _, last = _loops(second)
    name = result.targets[0].id
    at = ast.BoolOp(ast.And(), [ast.Compare(load(v), [ast.Eq()], [load(p)]) for v, p in zip(variables, places,
                                                                                           strict=True)]) \
        if len(places) > 1 else ast.Compare(load(variables[0]), [ast.Eq()], [load(places[0])])
    last.body[-1:] = [assign(name, ast.IfExp(at, copied(item), load(name)))]
    dtype = _FLOATS[start.value.func.attr]
    found = [start, *(assign(place, constant(-1)) for place in places), nest,
             assign(name, call(ast.Attribute(load("_svod_np"), dtype, ast.Load()), constant(0))), second]
    return [ast.copy_location(stmt, result) if stmt is not start and stmt is not nest else stmt for stmt in found]


def _loops(nest: ast.For) -> tuple[list[ast.For], ast.For]:
    """The loops of a nest whose every body but the innermost is the next loop, and the innermost."""
    loops = [nest]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], ast.For):
        loops.append(loops[-1].body[0])
    return loops, loops[-1]


def _kind(update: ast.stmt | None, key: str) -> str | None:
    """``max`` or ``min`` where ``update`` is ``key = max(key, _svod_max_key(item))`` (or min's), else None."""
    if not (isinstance(update, ast.Assign) and len(update.targets) == 1 and isinstance(update.targets[0], ast.Name)
            and update.targets[0].id == key and isinstance(update.value, ast.Call)
            and isinstance(update.value.func, ast.Name) and update.value.func.id in ("max", "min")
            and len(update.value.args) == 2):
        return None
    kind = update.value.func.id
    first, second = update.value.args
    keyed = isinstance(second, ast.Call) and isinstance(second.func, ast.Name) and \
        second.func.id == f"_svod_{kind}_key" and len(second.args) == 1
    return kind if isinstance(first, ast.Name) and first.id == key and keyed else None


__all__ = ["float_reductions"]
