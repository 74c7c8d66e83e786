"""Every ```python block of the documentation (docs/**/*.md) runs, on its own, as written.

The conventions (docs/contributing.md says them to writers):

- Each ```python block is a whole program: its own imports, a fresh namespace, an empty working directory.
- A ```text block that follows a ```python block with nothing but blank lines between them is what the
  program prints: its stdout must equal the block, line for line (trailing spaces ignored).
- An HTML comment on the line just above a block (invisible on the site) says what it needs:
  `<!-- test: needs CUDA -->` (any device name, `svod.available_devices()` decides), `<!-- test: needs ray -->`
  (a module that must import). Where that is missing the block is a skip that says why.
  `<!-- test: skip REASON -->` never runs a block (a fragment, a shell session); use it sparingly.
- Other fences (```sh, ```text on their own, ```yaml) are not run.

Blocks run in the pytest process, so the kernels they compile share the suite's disk cache.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import linecache
import os
import pathlib
import re
from dataclasses import dataclass

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_DIRECTIVE = re.compile(r"<!--\s*test:\s*(needs|skip)\s+(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # the line of the block's first line of code, counted from 1
    code: str
    expected: str | None  # what it prints, from the ```text block after it
    directive: tuple[str, str] | None  # ("needs", "CUDA"), ("skip", "why")

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(DOCS.parent)}:{self.line}"


def blocks(path: pathlib.Path) -> list[Block]:
    """The ```python blocks of one page, each with the output it shows and what it needs."""
    text = path.read_text()
    fences = list(_FENCE.finditer(text))
    found = []
    for index, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        before = text[:fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directive = _DIRECTIVE.search(before)
        expected = None
        if index + 1 < len(fences) and fences[index + 1].group(1) == "text":
            between = text[fence.end():fences[index + 1].start()]
            if not between.strip():
                expected = fences[index + 1].group(2)
        found.append(Block(path, text[:fence.start()].count("\n") + 2, fence.group(2), expected,
                           (directive.group(1), directive.group(2)) if directive else None))
    return found


PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [block for page in PAGES for block in blocks(page)]


def _missing(directive: tuple[str, str] | None) -> str | None:
    """Why a block cannot run here, or None."""
    if directive is None:
        return None
    kind, what = directive
    if kind == "skip":
        return what
    if what.islower():
        if importlib.util.find_spec(what) is not None:
            return None
        return f"the block needs the module {what}, which is not installed"
    import svod

    if what in svod.available_devices() or f"{what}:0" in svod.available_devices():
        return None
    return f"the block needs the device {what}, which is not available here"


def test_the_docs_have_examples():
    assert PAGES and len(BLOCKS) >= 20


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_each_docs_example_runs_alone_and_prints_what_it_shows(tmp_path, block):
    why = _missing(block.directive)
    if why:
        pytest.skip(why)
    name = str(DOCS.parent / block.name)  # where @svod.kernel reads its functions' source, as from a file
    linecache.cache[name] = (len(block.code), None, block.code.splitlines(keepends=True), name)
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, name, "exec"), {"__name__": "__docs__"})
    finally:
        os.chdir(cwd)
    if block.expected is not None:
        got = [line.rstrip() for line in out.getvalue().rstrip("\n").split("\n")]
        want = [line.rstrip() for line in block.expected.rstrip("\n").split("\n")]
        assert got == want, f"{block.name} printed:\n{out.getvalue()}"
