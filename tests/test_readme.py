"""The README's Python examples each run on their own, as written (imports included), in a fresh namespace and
an empty working directory: each ```python block. A ```py block (one that needs what a machine may lack) is not run
here; it compiles and names only what it defines or imports."""

import ast
import builtins
import linecache
import os
import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text()
BLOCKS = [(m.group(1), TEXT[:m.start()].count("\n") + 2, m.group(2))
          for m in re.finditer(r"```(python|py)\n(.*?)```", TEXT, re.S)]
RUN = [(line, code) for language, line, code in BLOCKS if language == "python"]


def _name(line: int) -> str:
    return f"{README}:{line}"


@pytest.mark.parametrize(("line", "code"), RUN, ids=[str(line) for line, _ in RUN])
def test_each_readme_example_runs_alone(tmp_path, line, code):
    name = _name(line)  # where @svod.kernel reads its functions' source, as from a file
    linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, name, "exec"), {"__name__": "__readme__"})
    finally:
        os.chdir(cwd)


def test_the_examples_that_do_not_run_here_name_only_what_they_define():
    for language, line, code in BLOCKS:
        if language == "python":
            continue
        tree = ast.parse(code)
        defined = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        defined |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert used <= defined | set(dir(builtins)), (line, used - defined)


def test_the_first_example_computes_what_it_says():
    namespace: dict[str, object] = {"__name__": "__readme__"}
    line, code = RUN[0]
    name = _name(line)
    linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
    exec(compile(code, name, "exec"), namespace)
    x, probabilities = namespace["x"], namespace["probabilities"]
    want = np.exp(x - x.max(axis=1, keepdims=True))  # type: ignore[attr-defined,operator]
    assert np.allclose(probabilities, want / want.sum(axis=1, keepdims=True), rtol=1e-5)


def test_the_readme_is_the_front_page_only():
    assert len(TEXT.splitlines()) <= 150, "the README is the front page: move the detail into docs/"
    for link in re.findall(r"\]\((docs/[^)#]+)", TEXT):
        assert (README.parent / link).is_file(), link


def test_ci_runs_the_readme_test_command_verbatim():
    commands = re.search(r"```sh\n(.*?)```", TEXT, re.S).group(1).splitlines()  # type: ignore[union-attr]
    test_command = commands[1].split("  #")[0].strip()
    ci = (README.parent / ".ci" / "run").read_text()
    assert test_command in ci.splitlines(), test_command
