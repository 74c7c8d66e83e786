"""``svod check FILE.py:FUNC``: run a kernel on every backend and on the reference, and report differences.

``FUNC`` takes no arguments and returns ``(ast, arrays)`` or ``(ast, arrays, {variable: value})``. The exit
code is 0 when every backend agrees with the reference, 1 when one differs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from svod.errors import SvodError
from svod.frontend.check import check


def load_function(target: str) -> object:
    """The object ``FUNC`` of the file in ``FILE.py:FUNC``."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise SvodError("svod check takes FILE.py:FUNC", stage="check", value=target)
    file = Path(path)
    if not file.is_file():
        raise SvodError(f"no file {file}", stage="check", value=path)
    spec = importlib.util.spec_from_file_location(f"svod_check_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise SvodError(f"cannot import {file}", stage="check", value=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise SvodError(f"{file} has no {name}", stage="check", value=name)
    return getattr(module, name)


def run_check(target: str, ulps: int) -> int:
    produced = load_function(target)()  # type: ignore[operator]
    if not isinstance(produced, tuple) or len(produced) not in (2, 3):
        raise SvodError(f"{target} must return (ast or kernel, arrays) or (ast or kernel, arrays, variables)",
                        stage="check",
                        value=type(produced).__name__)
    ast, arrays, *rest = produced
    report = check(ast, arrays, ulps=ulps, **(rest[0] if rest else {}))
    print(report)
    return 0 if report.ok else 1
