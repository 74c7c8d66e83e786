"""The adjoint of a kernel that is one matrix product, as matrix products: ``T = A @ B`` gives ``dA = dT @ B.T``
and ``dB = A.T @ dT``, each a kernel of the same form as the forward, which svod lowers as it lowers any matmul
(register tiles, blocks of ``B`` that stay in cache, threads over rows).

::

    for i in svod.prange(M):                    dA[i, k] (+)= sum over j of dT[i, j] * B[k, j]
        for j in svod.prange(N):          ──▶   dB[k, j] (+)= sum over i of At[k, i] * dT[i, j]   (At: A transposed
            s = 0.0                                                                            first, by a kernel)
            for k in range(K):                  dT = 0                                        (T was overwritten)
                s += A[i, k] * B[k, j]
            T[i, j] = s

The general differentiator (``svod.frontend.adjoint``) would give each work item's ``K`` products to both
adjoints with ``svod.atomic_add``: ``2 * M * N * K`` atomic additions. Here each adjoint element is written by one
work item: with ``=`` where the tape's adjoint of the array is new (all zeros), else with ``+=``; an adjoint the
gradient asked for does not need is not computed at all (the input batch of a network). A vector factor (``A @ b``,
``a @ B``) makes the other's adjoint an outer product and its own a matrix-vector product. The form is
recognised in the kernel's source (``contraction``): a nest of one or two ``svod.prange`` loops whose body sums
the products of two arrays' elements over a ``range`` and stores the sum, each loop's variable indexing the result
and one factor, the sum's indexing both; the loops must cover the arrays whole (else the general adjoint is used).
``svod.frontend.jit_tape_gemm`` gives an ``@`` of an ``@svod.jit`` function a kernel of this form on a tape.
"""

from __future__ import annotations

import ast
import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod.errors import GradientError
from svod.frontend import pylang
from svod.frontend.adjoint import Adjoint, adjoint
from svod.frontend.adjoint_text import components
from svod.frontend.nodes import walk
from svod.frontend.pykernel import Kernel
from svod.frontend.source import Source


@dataclass(frozen=True)
class Factor:
    """An array read (or written) at an index of loop variables, one per dimension."""

    array: str
    index: tuple[str, ...]


@dataclass(frozen=True)
class Contraction:
    """``total = sum over `over` of left[...] * right[...]``, as a kernel's source spells it."""

    total: str
    over: str
    bound: ast.expr
    left: Factor
    right: Factor


def _factor(node: ast.expr, variables: set[str]) -> Factor | None:
    """``x[a, b]`` (``x[a]``) of distinct ``variables`` as a Factor; None for another read."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return None
    parts = components(node.slice)
    names = tuple(part.id for part in parts if isinstance(part, ast.Name))
    if len(names) != len(parts) or not 1 <= len(names) <= 2 or len(set(names)) != len(names) \
            or not set(names) <= variables:
        return None
    return Factor(node.value.id, names)


def _zero(node: ast.expr) -> bool:
    """Whether ``node`` is ``0``, ``0.0`` or a NumPy float's zero (``np.float32(0)``)."""
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float) and node.value == 0
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("float") \
        and len(node.args) == 1 and not node.keywords and _zero(node.args[0])


def contraction(start: ast.stmt, loop: ast.stmt, outer: Sequence[str]) -> Contraction | None:
    """The sum ``start`` (``s = 0``) and ``loop`` (``for k in range(K): s += a[...] * b[...]``) make inside
    parallel loops of variables ``outer``: each of those indexes one factor, ``k`` both; None for other code."""
    if not (isinstance(start, ast.Assign) and len(start.targets) == 1 and isinstance(start.targets[0], ast.Name)
            and _zero(start.value) and isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
            and not loop.orelse and len(loop.body) == 1 and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"
            and len(loop.iter.args) == 1 and not loop.iter.keywords):
        return None
    total, over, update = start.targets[0].id, loop.target.id, loop.body[0]
    if not (isinstance(update, ast.AugAssign) and isinstance(update.op, ast.Add)
            and isinstance(update.target, ast.Name) and update.target.id == total
            and isinstance(update.value, ast.BinOp) and isinstance(update.value.op, ast.Mult)):
        return None
    variables = {*outer, over}
    left, right = _factor(update.value.left, variables), _factor(update.value.right, variables)
    if left is None or right is None or left.array == right.array or over not in left.index \
            or over not in right.index or set(left.index) & set(right.index) != {over} \
            or set(left.index) | set(right.index) != variables or total in (left.array, right.array):
        return None
    bound = loop.iter.args[0]
    if {n.id for n in walk(bound) if isinstance(n, ast.Name)} & {total, *variables}:
        return None
    return Contraction(total, over, bound, left, right)


def prange_nest(stmt: ast.stmt, is_prange: Callable[[ast.stmt], bool]) -> list[ast.For]:
    """The ``svod.prange`` loops of a nest of one or two (each the only statement of the one around it);
    empty where ``stmt`` is none."""
    nest: list[ast.For] = []
    while isinstance(stmt, ast.For) and is_prange(stmt) and isinstance(stmt.target, ast.Name) and not stmt.orelse:
        nest.append(stmt)
        if len(stmt.body) != 1:
            break
        stmt = stmt.body[0]
    return nest if 1 <= len(nest) <= 2 else []


@dataclass(frozen=True)
class Product:
    """A kernel that is one matrix product: ``result[...] = sum(left * right)`` over its loops."""

    result: Factor
    sum: Contraction
    bounds: tuple[tuple[str, ast.expr], ...]
    """Each loop's variable and the length it runs over, as the source spells it."""

    @staticmethod
    def of(kernel: Kernel) -> Product | None:
        body = kernel.source.node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        if len(body) != 1:
            return None
        nest = prange_nest(body[0], lambda s: _resolves(kernel, s))
        inner = nest[-1].body if nest else []
        if len(inner) != 3:
            return None
        outer = [cast_name(loop.target) for loop in nest]
        found = contraction(inner[0], inner[1], outer)
        store = inner[2]
        if found is None or not (isinstance(store, ast.Assign) and len(store.targets) == 1
                                 and isinstance(store.value, ast.Name) and store.value.id == found.total):
            return None
        result = _factor(store.targets[0], set(outer))
        if result is None or set(result.index) != set(outer) or result.array in (found.left.array,
                                                                                  found.right.array):
            return None
        arrays = {result.array, found.left.array, found.right.array}
        bounds = tuple((name, loop.iter.args[0]) for name, loop in zip(outer, nest, strict=True)
                       if isinstance(loop.iter, ast.Call) and len(loop.iter.args) == 1)
        if len(bounds) != len(nest) or not arrays <= set(kernel.parameters):
            return None
        return Product(result, found, (*bounds, (found.over, found.bound)))

    def covers(self, arrays: dict[str, Any]) -> bool:
        """Whether each loop variable runs over the whole of every dimension it indexes (each loop's bound is a
        number or an array's length, equal to those), the arrays being numpy arrays of as many dimensions as
        indices."""
        factors = (self.result, self.sum.left, self.sum.right)
        if not all(isinstance(arrays.get(f.array), np.ndarray) and arrays[f.array].ndim == len(f.index)
                   for f in factors):
            return False
        lengths: dict[str, set[int]] = {}
        for f in factors:
            for variable, length in zip(f.index, arrays[f.array].shape, strict=True):
                lengths.setdefault(variable, set()).add(length)
        return all(len(found) == 1 for found in lengths.values()) and all(
            _length(bound, arrays) in lengths[variable] for variable, bound in self.bounds)


def _length(node: ast.expr, arrays: dict[str, Any]) -> int | None:
    """The value of a loop's bound that is a number or an array argument's length (``a.shape[0]``); None for
    another."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
            and isinstance(node.value.value, ast.Name) and isinstance(node.slice, ast.Constant) \
            and type(node.slice.value) is int and isinstance(arrays.get(node.value.value.id), np.ndarray):
        shape = arrays[node.value.value.id].shape
        return shape[node.slice.value] if -len(shape) <= node.slice.value < len(shape) else None
    return None


def cast_name(node: ast.expr) -> str:
    assert isinstance(node, ast.Name)
    return node.id


def _resolves(kernel: Kernel, stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is a loop over ``svod.prange``, as the kernel's names resolve it."""
    if not (isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Call)):
        return False
    func = stmt.iter.func
    names = kernel.source.names
    if isinstance(func, ast.Name):
        return names.get(func.id) is pylang.prange
    return isinstance(func, ast.Attribute) and func.attr == "prange" and isinstance(func.value, ast.Name) \
        and getattr(names.get(func.value.id), "prange", None) is pylang.prange


@dataclass(frozen=True)
class GemmAdjoint(Adjoint):
    """A matrix product's adjoint (the module's docstring): ``pull`` runs it, not ``kernel``."""

    product: Product | None = None

    def pull(self, args: dict[str, Any], adjoints: dict[str, np.ndarray | None], fresh: dict[str, bool],
             device: Any, spent: frozenset[str] = frozenset(), unset: frozenset[str] = frozenset()) -> None:
        """Add to the adjoints ``adjoints`` gives (None: not wanted) of the factors those of the product, and
        zero the product's, but where ``spent`` names it (nothing reads it after): ``fresh`` says which
        adjoints hold zeros only, to store into rather than add. (``unset`` is empty: this adjoint ``covers``
        nothing.)"""
        assert self.product is not None
        result, total = self.product.result, self.product.sum
        given = adjoints.get(result.array)
        if given is None:
            return
        if not fresh[result.array]:
            for factor, other in ((total.left, total.right), (total.right, total.left)):
                target = adjoints.get(factor.array)
                if target is not None:
                    self.contract(Factor(factor.array, factor.index), target, not fresh[factor.array],
                                  (Factor(result.array, result.index), given), (other, args[other.array]), device)
        if result.array not in spent:
            given.fill(0)

    def writes(self, adjoints: dict[str, np.ndarray | None], fresh: dict[str, bool],
               spent: frozenset[str]) -> frozenset[str]:
        assert self.product is not None
        result, total = self.product.result.array, self.product.sum
        if adjoints.get(result) is None:
            return frozenset()
        factors = {total.left.array, total.right.array} if not fresh[result] else set()
        return frozenset({name for name in factors if adjoints.get(name) is not None}
                         | ({result} if result not in spent else set()))

    def contract(self, out: Factor, target: np.ndarray, add: bool, first: tuple[Factor, np.ndarray],
                 second: tuple[Factor, np.ndarray], device: Any) -> None:
        """``target[out.index] (+)= sum of first * second`` over the variables ``out`` lacks: the factor holding
        ``out``'s first variable the left, transposed first where it is a matrix indexed summed-variable first
        (its rows then run along the sum, as a matmul's left operand reads them)."""
        left, right = (first, second) if out.index[0] in first[0].index else (second, first)
        summed = [v for v in (*left[0].index, *right[0].index) if v not in out.index]
        if len(left[0].index) == 2 and summed and left[0].index[0] == summed[0]:
            flipped = np.empty(left[1].shape[::-1], left[1].dtype)
            _kernel(("transpose",))(flipped, left[1], device=device)
            left = (Factor(left[0].array, left[0].index[::-1]), flipped)
        dtype = np.result_type(left[1].dtype, right[1].dtype)
        named = {v: f"v{n}" for n, v in enumerate(dict.fromkeys((*out.index, *left[0].index, *right[0].index)))}
        form = ("contract", "+=" if add else "=", *(",".join(named[v] for v in f.index)
                                                     for f in (out, left[0], right[0])), dtype.str)
        _kernel(form)(target, left[1], right[1], device=device)


@functools.cache
def _kernel(form: tuple[str, ...]) -> Kernel:
    """The kernel of ``form`` (made once: a kernel compiles once per signature): a transpose (``out[j, i] =
    x[i, j]``), or a contraction of two factors into ``out`` whose index variables the form names, summing over
    the one it lacks."""
    if form[0] == "transpose":
        lines = ["def _svod_transpose(out, x):", "    for j in _svod_prange(x.shape[1]):",
                 "        for i in _svod_prange(x.shape[0]):", "            out[j, i] = x[i, j]"]
        return _made(lines, ["out", "x"])
    _, how, out, left, right, dtype = form
    outs, lefts, rights = out.split(","), left.split(","), right.split(",")
    extent = {v: f"out.shape[{k}]" for k, v in enumerate(outs)}
    extent |= {v: f"left.shape[{k}]" for k, v in enumerate(lefts) if v not in extent}
    extent |= {v: f"right.shape[{k}]" for k, v in enumerate(rights) if v not in extent}
    lines = ["def _svod_contract(out, left, right):"]
    for depth, variable in enumerate(outs):
        lines.append("    " * (depth + 1) + f"for {variable} in _svod_prange({extent[variable]}):")
    inner = "    " * (len(outs) + 1)
    product = f"left[{', '.join(lefts)}] * right[{', '.join(rights)}]"
    summed = [v for v in extent if v not in outs]
    if summed:
        lines += [f"{inner}acc = _svod_np.{np.dtype(dtype).name}(0)",
                  f"{inner}for {summed[0]} in range({extent[summed[0]]}):", f"{inner}    acc += {product}"]
        product = "acc"
    lines.append(f"{inner}out[{', '.join(outs)}] {'+=' if how == '+=' else '='} {product}")
    return _made(lines, ["out", "left", "right"])


def _made(lines: list[str], parameters: list[str]) -> Kernel:
    node = ast.parse("\n".join(lines)).body[0]
    assert isinstance(node, ast.FunctionDef)
    ast.increment_lineno(node, _LINE - 1)
    names = {"_svod_prange": pylang.prange, "_svod_np": np}
    return Kernel(_made, name=node.name, source=Source(node, __file__, names), parameters=parameters,
                  static_shapes=False)


_LINE = _made.__code__.co_firstlineno
"""Where errors in the kernels this module makes point: its function that makes them."""

_PRODUCTS: weakref.WeakKeyDictionary[Kernel, dict[frozenset[str], Adjoint]] = weakref.WeakKeyDictionary()


def adjoint_of(kernel: Kernel, floats: frozenset[str], args: Sequence[Any]) -> Adjoint:
    """The adjoint of a call of ``kernel`` on ``args`` (its float arrays ``floats``): as matrix products where
    the kernel is one that covers its arrays (the module's docstring), else the general one; refused for a
    float16 array (``_refuse_float16``)."""
    _refuse_float16(kernel, args)
    made = _PRODUCTS.setdefault(kernel, {})
    if floats not in made:
        product = Product.of(kernel)
        made[floats] = adjoint(kernel, floats) if product is None else _gemm(product, floats)
    found = made[floats]
    if isinstance(found, GemmAdjoint) and not (found.product is not None and found.product.covers(
            dict(zip(kernel.parameters, args, strict=False)))):
        return adjoint(kernel, floats)
    return found


def _refuse_float16(kernel: Kernel, args: Sequence[Any]) -> None:
    """Refuse a call on a float16 array, whichever adjoint its kernel would get. The general adjoint adds a
    gather's or a reduction's adjoints with atomic adds, which no device has for float16, and the matrix
    products' adjoint sums a whole dimension in float16, about three digits: a kernel must not be
    differentiated at one shape and refused at another (a product falls back to the general adjoint where its
    loops do not cover its arrays), nor give gradients rounded so far off."""
    for name, value in zip(kernel.parameters, args, strict=False):
        if isinstance(value, np.ndarray) and value.dtype == np.float16:
            raise GradientError(f"{kernel.name}'s argument {name} is a float16 array: svod does not differentiate "
                                "float16 (its adjoint's sums and atomic adds would be float16); pass "
                                f"{name}.astype(np.float32) and cast the result back", kernel=kernel.name,
                                stage="gradient", value="float16")


def _gemm(product: Product, floats: frozenset[str]) -> GemmAdjoint:
    result, total = product.result, product.sum
    names = (total.left.array, total.right.array, result.array)
    grads = tuple((name, f"{name}_grad") for name in names if name in floats)
    needed = frozenset(other.array for factor, other in ((total.left, total.right), (total.right, total.left))
                       if factor.array in floats)
    return GemmAdjoint(None, grads, (result.array,), frozenset(names[:2]), frozenset(), frozenset(), needed,
                       product=product)


__all__ = ["Contraction", "Factor", "GemmAdjoint", "Product", "adjoint_of", "contraction", "prange_nest"]
