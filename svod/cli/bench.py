"""``svod bench``: runs the benchmark harness in ``benchmarks/`` beside the ``svod/`` package of a repository
checkout.

The harness, the peers it measures svod beside (numpy, numba, tinygrad) and the kernel suite's sizes are
not part of the installed package: nothing under ``svod/`` imports them. A checkout installed with
``python -m pip install -e ".[bench]"`` has them; an installed wheel has not, and ``svod bench`` says how to
get them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from svod.errors import SvodError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
"""Where a repository checkout keeps the benchmarks: beside the ``svod`` package this module is part of."""


def load_benchmarks(directory: Path) -> ModuleType:
    """The ``benchmarks`` package in ``directory``, imported under that name (its modules import each other
    as ``benchmarks.<module>``). Located by path, not looked up on ``sys.path``, where an unrelated package
    of that common name may come first."""
    init = directory / "__init__.py"
    if not init.is_file():
        raise SvodError("svod bench runs the benchmarks/ directory of a svod repository checkout, and this svod "
                        f"(imported from {directory.parent}) has none: clone the repository and run "
                        "`python -m pip install -e \".[bench]\"` there", stage="check", value=str(directory))
    loaded = sys.modules.get("benchmarks")
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        if origin is None or Path(origin).resolve() != init.resolve():
            raise SvodError(f"another module named benchmarks is already imported (from {origin})", stage="check",
                            value=str(directory))
        return loaded
    spec = importlib.util.spec_from_file_location("benchmarks", init, submodule_search_locations=[str(directory)])
    if spec is None or spec.loader is None:
        raise SvodError(f"cannot import {init}", stage="check", value=str(directory))
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["benchmarks"]
        raise
    return module


def run_bench(device_name: str = "CPU", quick: bool = False, json_path: str | None = None,
              plot_path: str | None = None, suite: str | None = None, busy: bool = False) -> int:
    result: int = load_benchmarks(BENCHMARKS).run_bench(device_name, quick, json_path, plot_path, suite, busy)
    return result
