"""Pattern matching on UOps and the graph rewrite engine every pass is built from.

A ``PatternMatcher`` is a list of (``UPat``, callback) rules. ``graph_rewrite`` rewrites a graph bottom up:
each node is rebuilt over its rewritten sources, then rules are applied to it until none matches, and the
result is rewritten in turn, so the output contains no node any rule would still change.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, MutableSet
from typing import Any

from svod.dtype import DType
from svod.errors import GraphError
from svod.ir.facts import ALL_OPS, OP_BITS
from svod.ir.ops import COMMUTATIVE, Ops
from svod.ir.uop import UOp

_ANY: Any = object()

Rewrite = Callable[..., UOp | None]


class UPat:
    """A pattern over UOps. ``None`` / unset fields match anything; ``name`` binds the matched node."""

    __slots__ = ("arg", "dtypes", "name", "ops", "src")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: tuple[UPat, ...] | None = None, arg: Any = _ANY, name: str | None = None) -> None:
        self.ops = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
        self.dtypes = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        self.src = src
        self.arg = arg
        self.name = name

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(value: Any, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    def match(self, u: UOp, bindings: dict[str, UOp]) -> bool:
        if self.ops is not None and u.op not in self.ops:
            return False
        if self.dtypes is not None and u.dtype not in self.dtypes:
            return False
        if self.arg is not _ANY and not (type(u.arg) is type(self.arg) and u.arg == self.arg):
            return False
        if self.name is not None:
            bound = bindings.get(self.name)
            if bound is not None and bound is not u:
                return False
            bindings[self.name] = u
        if self.src is None:
            return True
        if len(self.src) != len(u.src):
            return False
        if self._match_srcs(self.src, u.src, bindings):
            return True
        if len(u.src) == 2 and self.ops is not None and self.ops <= COMMUTATIVE:
            return self._match_srcs(self.src, (u.src[1], u.src[0]), bindings)
        return False

    @staticmethod
    def _match_srcs(pats: tuple[UPat, ...], srcs: tuple[UOp, ...], bindings: dict[str, UOp]) -> bool:
        trial = dict(bindings)
        if all(p.match(s, trial) for p, s in zip(pats, srcs, strict=True)):
            bindings.update(trial)
            return True
        return False


class PatternMatcher:
    """Rules tried in order; the first whose pattern matches and whose callback returns a UOp wins.

    A callback receives the bound names as keyword arguments, and ``ctx`` too when it declares it.
    """

    def __init__(self, rules: Iterable[tuple[UPat, Rewrite]]) -> None:
        self.rules = list(rules)
        self._by_op: dict[Ops, list[tuple[UPat, Rewrite, bool]]] = {op: [] for op in Ops}
        for pat, fn in self.rules:
            wants_ctx = "ctx" in inspect.signature(fn).parameters
            for op in pat.ops if pat.ops is not None else Ops:
                self._by_op[op].append((pat, fn, wants_ctx))
        self.ops = 0
        """The ops some rule matches, one bit each (``OP_BITS``): a graph with none of them is left as it is."""
        for op, found in self._by_op.items():
            if found:
                self.ops |= OP_BITS[op]

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        for pat, fn, wants_ctx in self._by_op[u.op]:
            bindings: dict[str, UOp] = {}
            if pat.match(u, bindings):
                result = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
                if result is not None and result is not u:
                    return result
        return None


def substitute(root: UOp, replacements: Mapping[UOp, UOp]) -> UOp:
    """``root`` with each key of ``replacements`` replaced by its value, wherever it occurs. A value goes in as it
    is, not rewritten: one built from a node that is itself a key keeps that node, and with it the old graph
    (two loops on one axis, a read made after the store it was to precede). ``replacements_of`` builds values
    that hold none."""
    if not replacements:
        return root
    done: dict[UOp, UOp] = dict(replacements)
    for node in root.toposort():
        if node in done:
            continue
        new_src = tuple(done.get(s, s) for s in node.src)
        done[node] = node if new_src == node.src else node.replace(src=new_src)
    return done[root]


def replacements_of(root: UOp, change: Callable[[UOp], UOp | None]) -> dict[UOp, UOp]:
    """The nodes below ``root`` (itself included) that ``change`` changes, each mapped to what ``change`` makes of
    it rebuilt over the changes below it: sources first, so a value holds none of the nodes the map replaces (a
    loop's end that counts with another loop, a read whose index reads the same buffer). ``change`` returns None
    for a node it leaves as it is."""
    done: dict[UOp, UOp] = {}
    changed: dict[UOp, UOp] = {}
    for node in root.toposort():
        src = tuple(done[s] for s in node.src)
        rebuilt = node if src == node.src else node.replace(src=src)
        made = change(rebuilt)
        done[node] = rebuilt if made is None else made
        if made is not None:
            changed[node] = made
    return changed


def rename_variables(root: UOp, names: Mapping[str, str]) -> UOp:
    """``root`` with each variable named a key of ``names`` named its value instead (same bounds and dtype):
    a kernel's scalar argument bound to a plan's loop variable, or to a variable each run passes."""
    found = {u: UOp.define_var(names[u.arg[0]], u.arg[1], u.arg[2], u.dtype) for u in root.toposort()
             if u.op is Ops.DEFINE_VAR and names.get(u.arg[0], u.arg[0]) != u.arg[0]}
    return substitute(root, found)


def graph_rewrite(root: UOp, matcher: PatternMatcher, ctx: Any = None, *, name: str = "rewrite",
                  max_steps: int = 1_000_000, fixed_points: MutableSet[UOp] | None = None) -> UOp:
    """Rewrite ``root`` bottom up to a fixed point of ``matcher``. Iterative: deep graphs do not recurse.

    A PARAM is left as it is: its size is part of what the kernel declares, not an expression to rewrite;
    so is a node with no op below it that a rule matches (``UOp.ops_below``), without a walk.
    ``max_steps`` bounds the work so that rules that undo each other fail loudly instead of hanging.
    ``fixed_points``, for a matcher without ``ctx``, holds nodes no rule changes: they are not matched
    again, nor is anything below them (each is a rewrite's result, rewritten from its sources up), and every
    node this rewrite leaves in place is added.
    """
    done: dict[UOp, UOp] = {}
    partial = matcher.ops != ALL_OPS  # some op no rule matches: a subgraph of such ops is left unwalked
    # frames: (node, state, target); state 0 = visit, 1 = sources done, 2 = take the result of ``target``
    stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
    steps = 0
    while stack:
        steps += 1
        if steps > max_steps:
            raise GraphError(f"pass {name} did not reach a fixed point in {max_steps} steps", stage="lower")
        node, state, target = stack.pop()
        if state == 2:
            done[node] = done[target]
            continue
        if node in done:
            continue
        if node.op is Ops.PARAM:
            done[node] = node
            continue
        if state == 0:
            if (partial and not node.ops_below & matcher.ops) or (fixed_points is not None and node in fixed_points):
                done[node] = node
                continue
            stack.append((node, 1, node))
            stack.extend((s, 0, s) for s in reversed(node.src) if s not in done)
            continue
        new_src = tuple(done[s] for s in node.src)
        rebuilt = node if new_src == node.src else node.replace(src=new_src)
        result = None if fixed_points is not None and rebuilt in fixed_points else matcher.rewrite(rebuilt, ctx)
        if result is None:
            done[node] = rebuilt
            if fixed_points is not None:
                fixed_points.add(rebuilt)
            if rebuilt is not node:
                done.setdefault(rebuilt, rebuilt)
        else:
            stack.append((node, 2, result))
            stack.append((result, 0, result))
    return done[root]
