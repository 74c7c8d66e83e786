"""The linters are part of the test suite, so a red lint is a red build. Each runs through this
interpreter, so the venv's tools and packages are the ones checked, whatever is on the PATH."""

import ast
import io
import pathlib
import re
import subprocess
import sys
import tokenize

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


def _loaded_after(code: str) -> set[str]:
    """The svod modules a fresh interpreter holds after running ``code``."""
    shown = f"{code}; import sys; print(' '.join(m for m in sys.modules if m.startswith('svod')))"
    return set(subprocess.run([sys.executable, "-c", shown], check=True, capture_output=True, text=True,
                              cwd=ROOT).stdout.split())


def test_import_svod_loads_no_code_generator_runtime_or_frontend_until_a_name_is_used():
    """``import svod`` costs little more than NumPy's import: the layers below load when first touched."""
    heavy = ("svod.codegen", "svod.runtime", "svod.frontend", "svod.backends", "svod.distributed", "svod.ir",
             "svod.device.protocols", "svod.device.launch", "svod.device.spec", "svod.device.buffer",
             "svod.device.allocator", "svod.device.dlpack")
    loaded = _loaded_after("import svod")
    assert not {m for m in loaded if m.startswith(heavy)}
    assert "svod.device.device" in loaded  # the resolver, which the backend registry is installed in
    assert {"svod.frontend.pykernel", "svod.backends.registry"} <= _loaded_after(
        "import svod, numpy as np; svod.kernel(lambda x: None); svod.Buffer('CPU', svod.dtypes.float32, 4)")
    assert "svod.backends.registry" in _loaded_after(
        "import svod, svod.device; svod.device.Buffer('CPU', svod.dtypes.float32, 4)")


ISSUE_NUMBER = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.IGNORECASE)
"""An issue named by its number (the word and a number, or a hash and a number in brackets): a reader of the code
has no tracker to look it up in."""


def _prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings (every string standing as a statement) of a module, with their lines."""
    found = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    return found + [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)]


def test_no_docstring_or_comment_names_an_issue_number():
    """The why of the code is said in words where it is, not by an issue number: in the package, in its tests
    and in the benchmarks beside it."""
    sample = '"""Fixes issue 12."""\nx = 1  # see (#3); llvm-project#63602 is upstream\ny = "issue 4"\n'
    assert [match.group(0) for _, text in _prose(sample) for match in ISSUE_NUMBER.finditer(text)] == [
        "(#3)", "issue 12"]
    paths = sorted(path for folder in ("svod", "tests", "benchmarks") for path in (ROOT / folder).rglob("*.py"))
    assert ROOT / "tests" / "test_quality.py" in paths and ROOT / "benchmarks" / "harness.py" in paths
    named = [f"{path.relative_to(ROOT)}:{line}: {match.group(0)}"
             for path in paths for line, text in _prose(path.read_text()) for match in ISSUE_NUMBER.finditer(text)]
    assert named == []


MAX_LINES = 850
"""The most lines a module of the package has: one past it holds more than one concept, to split along a seam."""


def test_no_module_of_the_package_is_over_the_most_lines():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
               for path in sorted((ROOT / "svod").rglob("*.py"))}
    over = {path: count for path, count in lengths.items() if count > MAX_LINES}
    assert over == {}


SLOW_TREE_CALLS = {("ast", "walk"): "svod.frontend.nodes.walk", ("copy", "deepcopy"): "svod.frontend.nodes.copied"}
"""The calls the front end makes through its own helpers: each reads or copies a tree in a fraction of the time,
which is most of what the front end does (the helpers' module is the one place that names the originals)."""


def _slow_tree_calls(source: str) -> list[str]:
    return [f"{node.lineno}: {node.func.value.id}.{node.func.attr}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in SLOW_TREE_CALLS]


def test_the_front_end_walks_and_copies_trees_with_its_own_helpers():
    assert _slow_tree_calls("import ast, copy\nast.walk(t)\nx = copy.deepcopy(ast.parse(''))\nast.dump(t)\n") == [
        "2: ast.walk", "3: copy.deepcopy"]
    helpers = ROOT / "svod" / "frontend" / "nodes.py"
    paths = sorted(path for path in (ROOT / "svod" / "frontend").rglob("*.py") if path != helpers)
    assert len(paths) > 50
    found = [f"{path.relative_to(ROOT)}:{call}" for path in paths for call in _slow_tree_calls(path.read_text())]
    assert found == []
