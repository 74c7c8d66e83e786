"""``svod check FILE.py:FUNC``: run a kernel or a plan on every backend (or ``--devices``) and on the reference,
and report differences (``svod.frontend.check``).

``FUNC`` takes no arguments and returns ``(target, arguments)`` or ``(target, arguments, {variable: value})``:
a kernel AST and its arrays, an ``@svod.kernel`` or an ``@svod.jit`` function and its arguments (checked against
its function run as plain Python), or a plan and its arrays by buffer name. ``FILE.py`` is imported with its
folder on ``sys.path``, so it may import the modules beside it. The exit code is 0 when every backend agrees
with the reference, 1 when one differs.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
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
    folder = str(file.resolve().parent)
    sys.path.insert(0, folder)  # its own imports find the modules beside it, as when it runs as a script
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    if not hasattr(module, name):
        raise SvodError(f"{file} has no {name}", stage="check", value=name)
    return getattr(module, name)


def run_check(target: str, ulps: int, devices: Sequence[str] | None = None) -> int:
    produced = load_function(target)()  # type: ignore[operator]
    if not isinstance(produced, tuple) or len(produced) not in (2, 3):
        raise SvodError(f"{target} must return (target, arguments) or (target, arguments, variables): a kernel AST, "
                        "an @svod.kernel, an @svod.jit function or a plan", stage="check",
                        value=type(produced).__name__)
    checked, arrays, *rest = produced
    report = check(checked, arrays, devices=devices, ulps=ulps, **(rest[0] if rest else {}))
    print(report)
    return 0 if report.ok else 1
