"""The linters are part of the test suite, so a red lint is a red build. Each runs through this
interpreter, so the venv's tools and packages are the ones checked, whatever is on the PATH."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "ruff", "check", "svod", "tests", "benchmarks"],
    [sys.executable, "-m", "mypy"],
    [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())"],
], ids=["ruff", "mypy", "import-layers"])
def test_linter_is_clean(command):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


BENCHMARK_ONLY = {"benchmarks", "numba", "tinygrad", "threadpoolctl", "matplotlib", "rich"}
"""What the benchmarks beside the package use, and the installed package must not import."""


def test_the_package_imports_nothing_of_the_benchmarks():
    imported = set()
    for path in (ROOT / "svod").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported |= {(path.name, alias.name.split(".")[0]) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add((path.name, node.module.split(".")[0]))
    assert {(name, module) for name, module in imported if module in BENCHMARK_ONLY} == set()
