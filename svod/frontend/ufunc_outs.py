"""A NumPy ufunc called for its effect on its ``out`` array in an ``@svod.jit`` function: ``np.multiply(z, z, z)``,
``np.add(z, c, out=z)``, ``np.logical_not(m, m)`` (numba users write them to compute in place).

NumPy computes the ufunc of the inputs as if into a new array, then stores it into ``out``, the inputs broadcast
to ``out``'s shape, the result cast to ``out``'s dtype where the ``same_kind`` rule allows it. That is the array
statement ``out[...] = np.ufunc(inputs)`` (``svod.frontend.arrays``: a temporary where the inputs read ``out``
at other elements), once the cast is checked here: one NumPy refuses is refused at the line, as NumPy raises.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from svod.frontend.array_exprs import Expr

_WEAKLY_TAKEN = {bool: "biufc", int: "iufc", float: "fc", complex: "c"}
"""The kinds of dtype NumPy 2 stores a Python number's ufunc result of each type into under ``same_kind``."""


def ufunc_out(rewriter: Any, stmt: ast.Expr, call: ast.Call) -> tuple[ast.expr, ast.expr] | None:
    """``(out[...], np.ufunc(inputs))`` of a ufunc's call with one ``out`` (the positional after its inputs, or
    ``out=``, an array or a one-array tuple) made for its effect, by ``rewriter`` (an ``arrays.ArrayRewriter``);
    None for any other call, or one with other options (which the array expressions refuse)."""
    ufunc = rewriter.reader.resolve(call.func)
    if not isinstance(ufunc, np.ufunc) or ufunc.nout != 1 or any(k.arg != "out" for k in call.keywords):
        return None
    given = [k.value for k in call.keywords]
    if len(call.args) == ufunc.nin + 1 and not given:
        given = [call.args[-1]]
    if len(given) != 1 or len(call.args) - (0 if call.keywords else 1) != ufunc.nin:
        return None
    out = given[0]
    if isinstance(out, ast.Tuple) and len(out.elts) == 1:
        out = out.elts[0]
    if isinstance(out, ast.Constant) and out.value is None:
        return None  # no out: a value unused, which the function's reader refuses
    stored = rewriter.target(out)
    if not isinstance(stored, Expr) and not isinstance(out, (ast.Name, ast.Subscript)):
        raise rewriter.refuse(stmt, f"np.{ufunc.__name__}'s out is stored into only where it is an array's name or "
                                    "a slice of one (such as b[1:], not b.T)")  # NumPy accepts any array there
    if not isinstance(stored, Expr):
        raise rewriter.refuse(stmt, f"np.{ufunc.__name__}'s out is an array (NumPy raises TypeError)")
    value = ast.copy_location(ast.Call(call.func, call.args[:ufunc.nin], []), call)
    computed = rewriter.value(value)
    sample = None if isinstance(computed, Expr) else computed.sample
    dtype = computed.dtype if isinstance(computed, Expr) else np.asarray(sample).dtype
    weak = type(sample) in (bool, int, float, complex)  # a Python number takes the out's dtype of its kind
    if not (np.can_cast(dtype, stored.dtype, casting="same_kind") or
            (weak and stored.dtype.kind in _WEAKLY_TAKEN[type(sample)])):
        raise rewriter.refuse(stmt, f"Cannot cast ufunc '{ufunc.__name__}' output from dtype('{dtype}') to "
                                    f"dtype('{stored.dtype}') with casting rule 'same_kind' (NumPy raises "
                                    "UFuncTypeError)")
    everything = ast.copy_location(ast.Subscript(out, ast.Constant(...), ast.Store()), stmt)
    return everything, value


def writes_out(reader: Any, stmt: ast.Expr) -> bool:
    """Whether ``stmt`` is a call made for its effect on an array that the array rewriting writes as a store:
    ``x.fill(v)``, or a ufunc's (its out: ``ufunc_out``); a loop around it is then rewritten too."""
    if not isinstance(stmt.value, ast.Call):
        return False
    func = stmt.value.func
    return (isinstance(func, ast.Attribute) and func.attr == "fill") or isinstance(reader.resolve(func), np.ufunc)
