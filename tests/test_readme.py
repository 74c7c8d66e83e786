"""The README's Python examples run as written."""

import linecache
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks
    namespace: dict[str, object] = {}
    source = "\n".join(blocks)
    name = f"{README}:python-blocks"  # where @svod.kernel reads its functions' source, as from a file
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    exec(compile(source, name, "exec"), namespace)
    out = namespace["out_np"]
    assert list(out[:3]) == [1.0, 3.0, 5.0]  # type: ignore[index]
    steps = namespace["steps"]
    assert steps and steps[0].name == "double"  # type: ignore[index,union-attr]
