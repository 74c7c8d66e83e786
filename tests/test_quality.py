"""The linters are part of the test suite, so a red lint is a red build. Each runs through this
interpreter, so the venv's tools and packages are the ones checked, whatever is on the PATH."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "ruff", "check", "svod", "tests"],
    [sys.executable, "-m", "mypy"],
    [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())"],
], ids=["ruff", "mypy", "import-layers"])
def test_linter_is_clean(command):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
