"""The ``np.linalg`` functions svod computes as statements of the others (``linalg.COMPOSED``, and ``norm``'s
orders of a matrix's singular values), each as NumPy's own is written, so that its dtype, its values at the
edges and its errors are NumPy's:

- ``matrix_power(a, n)``: the identity (``n == 0``), ``a`` itself (``n == 1``), else ``a`` (or ``inv(a)`` where
  ``n < 0``) raised by NumPy's sequence of products: ``a @ a``, ``(a @ a) @ a``, then repeated squaring by
  the bits of ``n``, each product an array statement of its own;
- ``matrix_rank(A, tol, hermitian, rtol=)``: the count of the singular values (of ``abs(eigvalsh(A))`` where
  ``hermitian``) above ``tol``, by default the largest times ``max(m, n)`` times the dtype's epsilon; of a
  vector, whether an element is not zero;
- ``cond(x, p)`` for ``p`` None, 2 and -2: the ratio of the largest singular value to the smallest (or its
  inverse), inf where that is NaN (a zero matrix's);
- ``norm(x, ord)`` for ``ord`` 2, -2 and ``'nuc'`` of a matrix: the largest, the smallest and the sum of its
  singular values (``svod.frontend.array_norms`` computes the other orders).

Each statement the rewriting writes is one of the array rewriting's (``rewriter.statement``): a ``svd`` or an
``inv`` a plan step, whose failures raise ``LinAlgError`` as NumPy's do. What NumPy refuses at call time
(shapes, an exponent that is not an integer, a ``cond`` of an empty matrix) is refused at the line.
"""

from __future__ import annotations

import ast
import copy
import inspect
import operator
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError
from svod.frontend import extents
from svod.frontend.array_exprs import Expr, Named
from svod.frontend.array_norms import SINGULAR_ORDERS, axes_of
from svod.frontend.linalg import result_dtype
from svod.frontend.nodes import call, constant, load, placed, stands_for, walk


def _numpy(*path: str) -> ast.expr:
    """``_svod_np.<path>``: NumPy's, under the name svod gives it in the functions it rewrites."""
    node: ast.expr = load("_svod_np")
    for attr in path:
        node = ast.Attribute(node, attr, ast.Load())
    return node


def _linalg(kind: str, *args: ast.expr, **keywords: object) -> ast.Call:
    return ast.Call(_numpy("linalg", kind), list(args), [ast.keyword(k, constant(v)) for k, v in keywords.items()])


class _Composer:
    """The statements that compute one ``np.linalg`` statement ``stmt`` of the array rewriting ``rewriter``
    (an ``arrays.ArrayRewriter``), rewritten one by one as they are written."""

    def __init__(self, rewriter: Any, stmt: ast.Assign, looped: bool) -> None:
        self.rewriter, self.stmt, self.looped = rewriter, stmt, looped
        self.made: list[ast.stmt] = []
        rewriter.changed = True
        for names in (rewriter.reader.source.names, rewriter.outer):  # (copies of the function's globals)
            names.setdefault("_svod_np", np)

    def refuse(self, what: str) -> KernelSyntaxError:
        return self.rewriter.refuse(self.stmt, what)

    def bound(self, fn: Any) -> dict[str, ast.expr]:
        """The call's argument nodes by NumPy's parameter names."""
        call_node = self.stmt.value
        assert isinstance(call_node, ast.Call)
        if any(isinstance(a, ast.Starred) for a in call_node.args) or any(k.arg is None for k in call_node.keywords):
            raise self.refuse(f"np.linalg.{fn.__name__} takes its arguments written out (no * or **)")
        try:
            bound = inspect.signature(fn).bind(*call_node.args, **{str(k.arg): k.value for k in call_node.keywords})
        except TypeError as err:
            raise self.refuse(f"np.linalg.{fn.__name__}: {err}") from None
        return dict(bound.arguments)

    def known(self, node: ast.expr | None, what: str, default: object = None) -> Any:
        if node is None or (isinstance(node, ast.Constant) and node.value is None):
            return default
        value = self.rewriter.known(node, what)
        return default if value is None else value  # (an argument of None: NumPy's default all the same)

    def optional(self, node: ast.expr | None) -> ast.expr | None:
        """An optional argument's node, or None where it is not given or is None (written out, or a value the
        host knows: an argument's, each value its own plan); a value only the run knows is given."""
        try:
            return None if self.known(node, "an optional argument") is None else node
        except KernelSyntaxError:
            return node

    def operand(self, node: ast.expr, what: str) -> tuple[ast.expr, Expr]:
        """The array ``node`` as a name: its own where it is an array of its name, else a new array made of it."""
        value = self.rewriter.value(node)
        if not isinstance(value, Expr):
            raise self.refuse(f"{what} takes an array")
        if isinstance(node, ast.Name) and isinstance(value, Named) and value.name == node.id:
            return load(node.id), value
        name = f"_svod_c{next(self.rewriter.counter)}"
        self.made += self.rewriter.new_array(self.stmt, name, value, self.looped)
        return load(name), self.rewriter.arrays[name]

    def temporary(self, value: ast.expr) -> ast.expr:
        """A new name assigned ``value``, rewritten."""
        return self.temporaries(value, 1)[0]

    def temporaries(self, value: ast.expr, count: int) -> list[ast.expr]:
        """New names, ``count`` of them (a tuple where more than one), assigned ``value``, rewritten."""
        names = [f"_svod_c{next(self.rewriter.counter)}" for _ in range(count)]
        target: ast.expr = ast.Name(names[0], ast.Store()) if count == 1 else \
            ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        self.assign(target, value)
        return [load(name) for name in names]

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        assigned = placed([ast.Assign([target], value)], self.stmt)[0]
        self.made += self.rewriter.statement(assigned, self.looped)

    def finish(self, value: ast.expr) -> list[ast.stmt]:
        """The user's statement, assigning ``value``, after the statements it reads."""
        final = stands_for(copy.copy(self.stmt), self.stmt)
        final.value = placed([value], self.stmt)[0]
        return [*self.made, *self.rewriter.statement(final, self.looped)]

    def matrix(self, kind: str, shape: tuple[int, ...], square: bool) -> None:
        """Refuse what NumPy raises for: fewer than two dimensions, a matrix that is not square (``square``);
        and a stack of matrices, which svod's factorisations do not take."""
        if len(shape) < 2:
            raise self.refuse(f"np.linalg.{kind}: {len(shape)}-dimensional array given. Array must be at least "
                              "two-dimensional (NumPy raises LinAlgError)")
        if square and shape[-1] != shape[-2]:
            raise self.refuse(f"np.linalg.{kind}: Last 2 dimensions of the array must be square, not "
                              f"{shape[-2]}x{shape[-1]} (NumPy raises LinAlgError)")
        if len(shape) > 2:
            raise self.refuse(f"np.linalg.{kind} of a stack of matrices (shape {shape}) is not one svod has; a "
                              "statement per matrix")

    def singular_values(self, a: ast.expr) -> ast.expr:
        """A new name of the singular values of the matrix ``a`` (``svd``'s, descending)."""
        return self.temporary(_linalg("svd", a, compute_uv=False))


def composed(rewriter: Any, stmt: ast.Assign, kind: str, looped: bool) -> list[ast.stmt]:
    """The statements of ``stmt``, a ``np.linalg`` statement of a function of ``linalg.COMPOSED``."""
    return {"matrix_power": _matrix_power, "matrix_rank": _matrix_rank, "cond": _cond, "lstsq": _lstsq}[kind](
        _Composer(rewriter, stmt, looped))


def _matrix_power(c: _Composer) -> list[ast.stmt]:
    given = c.bound(np.linalg.matrix_power)
    a, value = c.operand(given["a"], "np.linalg.matrix_power")
    shape = extents.numbers(value.shape) if extents.is_static(value.shape) else None
    if shape is None:
        raise c.refuse(f"np.linalg.matrix_power of an array of shape {extents.shown(value.shape)}, a length of "
                       "which is known only at run time")
    if len(shape) < 2 or shape[-1] != shape[-2]:
        c.matrix("matrix_power", shape, True)
    exponent = c.known(given["n"], "np.linalg.matrix_power's n")
    try:
        n = operator.index(exponent)
    except TypeError:
        raise c.refuse(f"np.linalg.matrix_power: exponent must be an integer, not {exponent!r} (NumPy raises "
                       "TypeError)") from None
    if n == 0:
        eye = ast.Call(_numpy("eye"), [constant(shape[-1])], [ast.keyword("dtype", _numpy(value.dtype.name))])
        return c.finish(eye if len(shape) == 2 else ast.BinOp(call(_numpy("zeros_like"), a), ast.Add(), eye))
    if n < 0:
        a = c.temporary(_linalg("inv", a))
        n = -n
    target = c.stmt.targets[0]
    if n == 1 and isinstance(target, ast.Name) and target.id.startswith("_svod_"):  # returned: a copy, made
        c.made += c.rewriter.new_array(c.stmt, target.id, c.rewriter.value(a), c.looped)
        return c.made
    if n <= 3:  # NumPy's a (itself: the user's name is another of its names), a @ a and (a @ a) @ a
        return c.finish(a if n == 1 else ast.BinOp(a if n == 2 else c.temporary(ast.BinOp(a, ast.MatMult(), a)),
                                                    ast.MatMult(), a))
    power: ast.expr | None = None
    result: ast.expr | None = None
    while n > 0:
        power = a if power is None else c.temporary(ast.BinOp(power, ast.MatMult(), power))
        n, bit = divmod(n, 2)
        if bit:
            result = power if result is None else \
                (ast.BinOp(result, ast.MatMult(), power) if n == 0 else c.temporary(
                    ast.BinOp(result, ast.MatMult(), power)))
    assert result is not None
    return c.finish(result)


def _matrix_rank(c: _Composer) -> list[ast.stmt]:
    given = c.bound(np.linalg.matrix_rank)
    a, value = c.operand(given["A"], "np.linalg.matrix_rank")
    c.rewriter.static(c.stmt, value, "np.linalg.matrix_rank")
    shape = extents.numbers(value.shape)
    if len(shape) == 0:
        raise c.refuse("np.linalg.matrix_rank of a 0-d array (NumPy raises TypeError: iteration over a 0-d array)")
    if len(shape) == 1:  # NumPy's: whether an element is not zero
        return c.finish(call(_numpy("minimum"), call(_numpy("count_nonzero"), a), constant(1)))
    hermitian = c.known(given.get("hermitian"), "np.linalg.matrix_rank's hermitian", False)
    if not isinstance(hermitian, (bool, np.bool_)):
        raise c.refuse("np.linalg.matrix_rank's hermitian is True or False, written out")
    c.matrix("matrix_rank", shape, bool(hermitian))
    if min(shape) == 0:
        return c.finish(constant(0))
    values = c.temporary(call(_numpy("abs"), _linalg("eigvalsh", a))) if hermitian else c.singular_values(a)
    largest = call(_numpy("max"), values)
    tol, rtol = c.optional(given.get("tol")), c.optional(given.get("rtol"))
    if tol is not None:
        bound = tol
    elif rtol is not None:
        bound = ast.BinOp(largest, ast.Mult(), rtol)
    else:  # NumPy's default: max(m, n) times the epsilon of the singular values' dtype
        dtype = result_dtype(value.dtype)
        bound = ast.BinOp(largest, ast.Mult(), constant(max(shape) * np.finfo(dtype).eps))
    return c.finish(call(_numpy("count_nonzero"), ast.Compare(values, [ast.Gt()], [c.temporary(bound)])))


def _cond(c: _Composer) -> list[ast.stmt]:
    given = c.bound(np.linalg.cond)
    x, value = c.operand(given["x"], "np.linalg.cond")
    c.rewriter.static(c.stmt, value, "np.linalg.cond")
    shape = extents.numbers(value.shape)
    p = c.known(given.get("p"), "np.linalg.cond's p")
    if not (p is None or (not isinstance(p, str) and p in (2, -2))):
        raise c.refuse(f"np.linalg.cond(x, {p!r}): svod computes the condition number of p None, 2 or -2 (of "
                       "the singular values); of another p, np.linalg.norm(x, p) * np.linalg.norm(np.linalg.inv(x), "
                       "p), which raises on a singular matrix where NumPy's cond gives inf")
    c.matrix("cond", shape, False)
    if 0 in shape:
        raise c.refuse("np.linalg.cond is not defined on empty arrays (NumPy raises LinAlgError)")
    values = c.singular_values(x)
    largest, smallest = (ast.Subscript(values, constant(i), ast.Load()) for i in (0, min(shape) - 1))
    ratio = c.temporary(ast.BinOp(smallest, ast.Div(), largest) if p == -2 else
                        ast.BinOp(largest, ast.Div(), smallest))
    infinity = call(_numpy(result_dtype(value.dtype).name), _numpy("inf"))
    return c.finish(ast.IfExp(ast.Compare(ratio, [ast.Eq()], [ratio]), ratio, infinity))


def singular_norm(rewriter: Any, stmt: ast.stmt) -> bool:
    """Whether ``stmt`` assigns a name ``np.linalg.norm`` of an order of the singular values (``2``, ``-2``,
    ``'nuc'``, written so the host knows it)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)):
        return False
    return is_singular_norm(rewriter, stmt.value)


def is_singular_norm(rewriter: Any, node: ast.Call) -> bool:
    """Whether ``node`` is ``np.linalg.norm`` of an order of the singular values."""
    if rewriter.reader.resolve(node.func) is not np.linalg.norm:
        return False
    order = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "ord"), None)
    if order is None:
        return False
    try:
        known = rewriter.known(order, "np.linalg.norm's ord")
    except KernelSyntaxError:
        return False
    return any(known == o and isinstance(known, str) == isinstance(o, str) for o in SINGULAR_ORDERS)


def norm(rewriter: Any, stmt: ast.Assign, looped: bool) -> list[ast.stmt]:
    """``n = np.linalg.norm(x, ord)`` of ``ord`` 2, -2 or ``'nuc'``: of a matrix, the largest, the smallest or
    the sum of its singular values (0 of an empty matrix's but for the smallest, which NumPy raises for); of a
    vector, the array expression (``svod.frontend.array_norms``)."""
    c = _Composer(rewriter, stmt, looped)
    given = c.bound(np.linalg.norm)
    axis = c.known(given.get("axis"), "np.linalg.norm's axis")
    ndim = len(getattr(rewriter.value(given["x"]), "shape", ()))
    if not (len(axis) == 2 if isinstance(axis, tuple) else axis is None and ndim == 2):
        return rewriter.assign(stmt, stmt.targets[0], stmt.value, None, looped)  # a vector's: an expression
    assert isinstance(stmt.value, ast.Call)
    axes_of(rewriter, stmt.value, axis, ndim)  # (refused as NumPy raises: an axis twice, or out of bounds)
    x, value = c.operand(given["x"], "np.linalg.norm")
    c.rewriter.static(stmt, value, "np.linalg.norm")
    shape = extents.numbers(value.shape)
    c.matrix("norm", shape, False)
    order = c.known(given.get("ord"), "np.linalg.norm's ord")
    keepdims = bool(c.known(given.get("keepdims"), "np.linalg.norm's keepdims", False))
    op = "sum" if order == "nuc" else "max" if order == 2 else "min"
    if 0 in shape and op == "min":
        raise c.refuse("np.linalg.norm(x, -2) of an empty matrix: the smallest of no singular values (NumPy "
                       "raises ValueError)")
    dtype = result_dtype(value.dtype)
    if 0 in shape:
        result: ast.expr = call(_numpy(dtype.name), constant(0))
        return c.finish(ast.Call(_numpy("full"), [constant((1, 1)), result], []) if keepdims else result)
    values = c.singular_values(x)
    if not keepdims:
        return c.finish(call(_numpy(op), values))
    kept = ast.Call(_numpy(op), [values], [ast.keyword("keepdims", constant(True))])
    return c.finish(ast.Call(ast.Attribute(kept, "reshape", ast.Load()), [constant(1), constant(1)], []))


def _lstsq(c: _Composer) -> list[ast.stmt]:
    """``x, residuals, rank, s = np.linalg.lstsq(a, b, rcond)``, computed in float64 as NumPy's is (its
    gufunc's only real loop is double's; ``rcond``'s default that dtype's epsilon times ``max(m, n)``): the
    reduced SVD of ``a``, ``x = vh.T @ (w * (u.T @ b))`` of the weights ``w = 1 / s`` where ``s`` is above
    ``rcond`` times the largest and 0 elsewhere (gelsd's minimum-norm solution), ``rank`` the count of those
    (int32, as NumPy's), ``x`` and ``s`` in the operands' dtype. ``residuals`` is empty but where ``m > n``
    and the rank is ``n`` (which only the run knows): then the squared lengths of ``b - a @ x``'s columns, a
    returned array of a length the data decides (or a name no statement reads)."""
    given = c.bound(np.linalg.lstsq)
    targets = c.stmt.targets[0]
    if not (isinstance(targets, ast.Tuple) and len(targets.elts) == 4 and
            all(isinstance(t, ast.Name) for t in targets.elts)):
        raise c.refuse("np.linalg.lstsq's result is assigned to four names (`x, residuals, rank, s = ...`)")
    names = [t.id for t in targets.elts if isinstance(t, ast.Name)]
    a, a_value = c.operand(given["a"], "np.linalg.lstsq")
    b, b_value = c.operand(given["b"], "np.linalg.lstsq")
    for value in (a_value, b_value):
        c.rewriter.static(c.stmt, value, "np.linalg.lstsq")
    shape, rhs = extents.numbers(a_value.shape), extents.numbers(b_value.shape)
    c.matrix("lstsq", shape, False)
    if len(rhs) not in (1, 2):
        raise c.refuse(f"np.linalg.lstsq: {len(rhs)}-dimensional array given. Array must be two-dimensional "
                       "(NumPy raises LinAlgError)")
    (m, n), columns = shape, (rhs[1] if len(rhs) == 2 else 1)
    if rhs[0] != m:
        raise c.refuse(f"np.linalg.lstsq: Incompatible dimensions ({m} rows and {rhs[0]}) (NumPy raises LinAlgError)")
    dtype, wide = result_dtype(a_value.dtype, b_value.dtype), np.dtype(np.float64)
    rcond = c.known(given.get("rcond"), "np.linalg.lstsq's rcond", float(np.finfo(wide).eps) * max(m, n))
    if rcond < 0:  # gelsd's: the unit roundoff
        rcond = float(np.finfo(wide).eps) / 2
    a, b = (operand if value.dtype == wide else c.temporary(call(ast.Attribute(operand, "astype", ast.Load()),
                                                                 _numpy("float64")))
            for operand, value in ((a, a_value), (b, b_value)))
    u, values, vh = c.temporaries(_linalg("svd", a, full_matrices=False), 3)
    along = c.temporary(ast.BinOp(ast.Attribute(u, "T", ast.Load()), ast.MatMult(), b))
    kept = ast.Compare(values, [ast.Gt()], [constant(0)])  # (of no singular values: x is 0 and the rank 0)
    if min(m, n):
        cut = c.temporary(ast.BinOp(call(_numpy("max"), values), ast.Mult(), constant(rcond)))
        kept = ast.Compare(values, [ast.Gt()], [cut])
        weights = c.temporary(call(_numpy("where"), kept, ast.BinOp(constant(1.0), ast.Div(), values), constant(0.0)))
        if len(rhs) == 2:
            weights = call(ast.Attribute(weights, "reshape", ast.Load()), constant(min(m, n)), constant(1))
        along = c.temporary(ast.BinOp(along, ast.Mult(), weights))
    rank = c.temporary(ast.Call(_numpy("sum"), [kept], [ast.keyword("dtype", _numpy("int32"))]))
    solution = c.temporary(ast.BinOp(ast.Attribute(vh, "T", ast.Load()), ast.MatMult(), along))
    x, values = (value if dtype == wide else call(ast.Attribute(value, "astype", ast.Load()), _numpy(dtype.name))
                 for value in (solution, values))
    c.assign(ast.Name(names[0], ast.Store()), x)
    c.assign(ast.Name(names[2], ast.Store()), rank)
    c.assign(ast.Name(names[3], ast.Store()), values)
    _residuals(c, names[1], (a, b, solution), dtype, (m, n, len(rhs), columns), load(names[2]))
    return c.made


def _residuals(c: _Composer, name: str, system: tuple[ast.expr, ...], dtype: np.dtype, sizes: tuple[int, ...],
               rank: ast.expr) -> None:
    """``lstsq``'s residuals, into ``name``: of ``m <= n``, empty; else, where a statement reads them, the
    squared lengths of the columns of ``b - a @ x`` in float64 (NumPy's gufunc computes them in double from
    its double solution, ``x`` here before its cast to ``dtype``; the user's name of ``x``, read here, would
    be made before the statements that compute it), then in ``dtype``, an array returned at the length the run
    decides: ``columns`` where ``rank`` is ``n``, else 0."""
    a, b, x = system
    m, n, dimensions, columns = sizes
    if m <= n:
        c.assign(ast.Name(name, ast.Store()), call(_numpy("zeros"), constant((0,)), _numpy(dtype.name)))
        return
    if not any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
               for node in walk(c.rewriter.source.node)):
        return  # (never read: never made)
    c.rewriter.only_returned(c.stmt, name, "np.linalg.lstsq's residuals (empty where the rank is below n)")
    misses = c.temporary(ast.BinOp(b, ast.Sub(), ast.BinOp(a, ast.MatMult(), x)))
    squares: ast.expr = ast.Call(_numpy("sum"), [ast.BinOp(misses, ast.Mult(), misses)],
                                 [ast.keyword("axis", constant(0)), ast.keyword("keepdims", constant(dimensions == 1))])
    if dtype != np.float64:
        squares = call(ast.Attribute(squares, "astype", ast.Load()), _numpy(dtype.name))
    total = c.rewriter.value(placed([squares], c.stmt)[0])
    made = c.rewriter.made_array(name, total.shape, total.dtype, c.stmt)  # (an array of its own: never fused)
    c.made += [*c.rewriter.allocation(c.stmt, made), *c.rewriter.loops(c.stmt, made, total)]
    count = c.rewriter.fresh_count(name, "the length of np.linalg.lstsq's residuals")
    c.assign(ast.Name(count, ast.Store()),
             ast.IfExp(ast.Compare(rank, [ast.Eq()], [constant(n)]), constant(columns), constant(0)))
