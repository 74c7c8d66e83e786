"""The benchmark modules import one another one way: an import inside a function (for a peer that may be
missing, numba's or warp's spelling) never hides a circle, a module it reaches importing the module back."""

from __future__ import annotations

import ast
import pathlib

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def _imported(node: ast.AST) -> set[str]:
    """The benchmark modules one import statement names (``benchmarks.x`` or ``from benchmarks import x``)."""
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("benchmarks.")}
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
        if node.module == "benchmarks":
            return {alias.name for alias in node.names if (BENCHMARKS / f"{alias.name}.py").exists()}
        if node.module.startswith("benchmarks."):
            return {node.module.split(".")[1]}
    return set()


def _graph() -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Each module's imports at its top level, and each import made inside a function (importer, imported)."""
    top: dict[str, set[str]] = {}
    inside: list[tuple[str, str]] = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        top[path.stem] = set().union(*(_imported(node) for node in tree.body))
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [(path.stem, module) for node in ast.walk(function) for module in sorted(_imported(node))]
    return top, inside


def _reaches(top: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module == goal:
            return True
        if module not in seen:
            seen.add(module)
            todo += sorted(top.get(module, ()))
    return False


def test_no_import_inside_a_function_closes_a_circle():
    top, inside = _graph()
    assert inside, "the peers' spellings are imported where a peer is present"
    assert [(a, b) for a, b in inside if _reaches(top, b, a)] == []


def test_the_top_level_imports_have_no_circle():
    top, _ = _graph()
    assert [m for m in sorted(top) if any(_reaches(top, b, m) for b in top[m])] == []


def test_the_check_finds_a_circle_through_a_function():
    top = {"a": {"b"}, "b": set()}
    assert _reaches(top, "b", "a") is False and _reaches({**top, "b": {"a"}}, "b", "a") is True
