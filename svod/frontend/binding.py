"""How a call of an ``@svod.jit`` function, or of a function it calls, binds its arguments: as Python binds them
(``inspect.Signature.bind``), by position and by keyword, each parameter not given taking its default,
keyword-only parameters too. ``*args`` and ``**kwargs`` parameters are refused where the function is read.

A value that is neither an array nor a number (None, a string, a dtype or scalar type, a tuple of these and of
numbers: ``dtype=np.float64``, ``shape=(3, 4)``) is a *constant* of the plan: the plan is prepared for its value
(``constant_key``), and the function reads it as it reads a global.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from svod.errors import KernelSyntaxError

_LITERALS = (type(None), bool, int, float, str)
"""The types whose values a Python literal writes exactly (``literal``)."""


def signature_of(fn: Callable[..., Any], name: str) -> inspect.Signature:
    """``fn``'s signature, whose parameters each take one argument (no ``*args`` or ``**kwargs``)."""
    signature = inspect.signature(fn)
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            star = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise KernelSyntaxError(f"{name}: parameter {star}{parameter.name} takes any number of arguments, which "
                                    "svod does not (no *args or **kwargs): name each parameter", kernel=name,
                                    stage="parse", value=parameter.name)
    return signature


def constant_key(value: Any) -> Hashable | None:
    """What a plan is prepared for where an argument or a default is ``value``, a constant of the plan (None, a
    string, a dtype or scalar type, a tuple of these and of numbers); None where ``value`` is none of those.
    Each part is keyed with its type: ``(1, 2)`` and ``(1.0, 2.0)`` are different constants."""
    if value is None or isinstance(value, (str, np.dtype)):
        return (type(value).__name__, value)
    if isinstance(value, type) and issubclass(value, (np.generic, bool, int, float, complex)):
        return ("type", value)
    if isinstance(value, tuple):
        parts = [constant_key(item) if not _number(item) else (type_key(item), item) for item in value]
        return None if any(part is None for part in parts) else ("tuple", tuple(parts))
    return None


def values_key(names: Mapping[str, Any], read: Iterable[str]) -> tuple[tuple[str, Hashable], ...]:
    """The values of the names in ``read`` that ``names`` binds to constants or numbers, each keyed by its type:
    a kernel's source reads a parameter bound to a constant of the plan as a global (``dt(x[i])``), so kernels
    of one source translated for other constants differ, and a cache of them keys these values too."""
    found: list[tuple[str, Hashable]] = []
    for name in sorted(set(read) & names.keys()):
        value = names[name]
        key = (type_key(value), value) if _number(value) else constant_key(value)
        if key is not None:
            found.append((name, key))
    return tuple(found)


def type_key(value: Any) -> str:
    """A number's type as a key of plans, kernels and calls: with its module, since NumPy 2 names ``np.bool_``
    ``bool`` too, and NumPy's bool is typed where Python's is weak (``np.True_ + np.True_`` is ``True``,
    ``True + True`` is 2), and ``np.True_ == True`` hashes alike."""
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def literal(value: Any) -> ast.expr | None:
    """A Python literal that is ``value`` exactly (None, a bool, an int, a float, a string, a tuple of these), or
    None where no literal is (a dtype, a NumPy scalar: its type would be lost)."""
    if type(value) in _LITERALS:
        return ast.Constant(value)
    if type(value) is tuple:
        items = [literal(item) for item in value]
        return None if any(item is None for item in items) else ast.Tuple(items, ast.Load())  # type: ignore[arg-type]
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating, np.bool_))


__all__ = ["constant_key", "literal", "signature_of", "type_key", "values_key"]
