"""Small Python functions generated once per signature of a call (a jitted function's, a plan's bound run), so
that a call runs the checks its signature needs, in order, as straight-line code: no loop over a description
of the signature, no tuple of flags read back, no call per check.

A function's source names only its structure; every value it checks against (a dtype, a shape, a number, the
plan it runs) is a name of the namespace it is made in. Sources alike compile once (``function``), so a call
with another shape or number costs an ``exec`` of the code already compiled, not a compile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any

CODES_KEPT = 256
"""The compiled sources kept (``function``): a program's signatures need a few; one that makes ever new ones
compiles again past this many rather than holding them all."""

_codes: dict[str, CodeType] = {}
_lock = threading.Lock()


def function(name: str, parameters: Sequence[str], body: Sequence[str], namespace: Mapping[str, Any]
             ) -> Callable[..., Any]:
    """The function ``def name(*parameters): body`` whose free names are those of ``namespace`` (each line of
    ``body`` indented as a statement of the function already)."""
    source = f"def {name}({', '.join(parameters)}):\n" + "".join(f"    {line}\n" for line in body)
    with _lock:
        code = _codes.get(source)
        if code is None:
            if len(_codes) >= CODES_KEPT:
                _codes.clear()
            code = _codes[source] = compile(source, f"<svod generated {name}>", "exec")
    scope = dict(namespace)
    exec(code, scope)
    made: Callable[..., Any] = scope[name]
    return made


__all__ = ["CODES_KEPT", "function"]
