"""A float max or min of an array statement as a tape records it: the same values, with a derivative.

svod's rewriting of an array statement (``svod.frontend.array_exprs``) reduces a float max as the integer
maximum of order keys (``pylang.max_key``), a NaN's beyond every number's, and takes the float of the winning
key back (``pylang.from_key``): no float passes from an element to the result, so the adjoint would see none.
On a tape the same reduction keeps the float that wins, chosen by the same keys::

    m_key = _svod_np.int64(-9223372036854775808)           m_key = _svod_np.float64(-_svod_np.inf)
    for k in range(n):                               ──▶   for k in range(n):
        m_key = max(m_key, _svod_max_key(x[k]))                m_key = (x[k] if _svod_max_key(x[k]) >
    m = _svod_from_key(m_key)                                          _svod_max_key(m_key) else m_key)
                                                           m = m_key

The comparison of keys is the plan's order (a NaN wins, 0.0 beats -0.0), so the value is the plan's; the
adjoint's rule for the conditional expression gives the element that won (the first of equal ones) the
result's adjoint, a subgradient where several are equal.
"""

from __future__ import annotations

import ast
import copy

from svod.frontend.nodes import call, load

_FLOATS = {"int64": "float64", "int32": "float32"}
"""The float of each order key's integer (``array_exprs.KEYED``)."""


class _Keys(ast.NodeTransformer):
    """Rewrites the keyed reductions of a function (the module's docstring)."""

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys
        """Each key's name, with the reduction it makes (``max``, ``min``)."""

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        target = node.targets[0] if len(node.targets) == 1 else None
        kind = self.keys.get(target.id) if isinstance(target, ast.Name) else None
        value = node.value
        if kind is None or not isinstance(target, ast.Name) or not isinstance(value, ast.Call):
            return node
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _FLOATS:  # the start: no element yet
            infinity: ast.expr = ast.Attribute(load("_svod_np"), "inf", ast.Load())
            start = ast.UnaryOp(ast.USub(), infinity) if kind == "max" else infinity
            node.value = call(ast.Attribute(load("_svod_np"), _FLOATS[func.attr], ast.Load()), start)
        elif isinstance(func, ast.Name) and func.id == kind and len(value.args) == 2:
            item = value.args[1].args[0] if isinstance(value.args[1], ast.Call) else value.args[1]
            test = ast.Compare(call(f"_svod_{kind}_key", copy.deepcopy(item)),
                               [ast.Gt() if kind == "max" else ast.Lt()], [call(f"_svod_{kind}_key", load(target.id))])
            node.value = ast.IfExp(test, item, load(target.id))
        return ast.copy_location(node, node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "_svod_from_key" and len(node.args) == 1 \
                and isinstance(node.args[0], ast.Name) and node.args[0].id in self.keys:
            return node.args[0]
        return node


def keyed_reductions(node: ast.FunctionDef) -> dict[str, str]:
    """The keys of ``node``'s keyed reductions (``key = max(key, _svod_max_key(item))``), with their kind."""
    found: dict[str, str] = {}
    for inner in ast.walk(node):
        if isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name) \
                and isinstance(inner.value, ast.Call) and isinstance(inner.value.func, ast.Name) \
                and inner.value.func.id in ("max", "min") and len(inner.value.args) == 2:
            key, item = inner.value.args
            kind = inner.value.func.id
            if isinstance(key, ast.Name) and key.id == inner.targets[0].id and isinstance(item, ast.Call) \
                    and isinstance(item.func, ast.Name) and item.func.id == f"_svod_{kind}_key":
                found[key.id] = kind
    return found


def float_reductions(node: ast.FunctionDef) -> ast.FunctionDef | None:
    """``node`` with its keyed reductions of floats kept as floats (the module's docstring), or None where it
    makes none."""
    keys = keyed_reductions(node)
    if not keys:
        return None
    rewritten = _Keys(keys).visit(copy.deepcopy(node))
    assert isinstance(rewritten, ast.FunctionDef)
    return ast.fix_missing_locations(rewritten)


__all__ = ["float_reductions", "keyed_reductions"]
