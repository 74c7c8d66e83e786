"""Every kind of Python expression inside an ``@svod.jit`` function computes what plain Python does or is
refused with a ``KernelSyntaxError`` at its line, on every device: one small function per ``ast.expr`` class,
written to a module of its own (svod reads a function's source)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from svod.errors import KernelSyntaxError
from tests.frontend.test_jit import agrees_with_python

SNIPPETS = {
    "BoolOp": "x[0] = 1.0 if (c > 0 and c < 5) else 2.0",
    "NamedExpr": "x[0] = (y := c + 1.0) * y",
    "BinOp": "x[0] = c * 2.0",
    "UnaryOp": "x[0] = -c",
    "Lambda": "f = lambda v: v + 1.0\n    x[0] = f(c)",
    "IfExp": "x[0] = 1.0 if c > 0 else 2.0",
    "Dict": "d = {'a': c}\n    x[0] = d['a']",
    "Set": "s = {c}\n    x[0] = len(s)",
    "ListComp": "x[0] = sum([c for _ in range(3)])",
    "SetComp": "x[0] = len({c for _ in range(3)})",
    "DictComp": "x[0] = len({i: c for i in range(3)})",
    "GeneratorExp": "x[0] = sum(c for _ in range(3))",
    "Yield": "yield c",
    "YieldFrom": "yield from range(3)",
    "Compare": "x[0] = 1.0 if c < 2.0 < 3.0 else 0.0",
    "Call": "x[0] = abs(c)",
    "FormattedValue": "s = f'{c}'\n    x[0] = len(s)",
    "JoinedStr": "s = f'a{c}'\n    x[0] = len(s)",
    "Constant": "x[0] = 3.0",
    "Attribute": "x[0] = x.shape[0]",
    "Subscript": "x[0] = x[1]",
    "Starred": "a, *b = (c, c, c)\n    x[0] = a",
    "Name": "x[0] = c",
    "List": "l = [c, c]\n    x[0] = l[1]",
    "Tuple": "t = (c, 1.0)\n    x[0] = t[0]",
    "Slice": "x[1:3] = c",
}
"""A statement using each kind of expression (``Await`` cannot stand in a plain ``def``: an ``async def`` is
refused whole, below)."""
_DEPRECATED = {"Num", "Str", "Bytes", "NameConstant", "Ellipsis"}


def _module(folder: Path) -> object:
    source = "import numpy as np\nimport svod\n\n"
    for kind, code in SNIPPETS.items():
        source += f"\n@svod.jit\ndef uses_{kind}(x, c):\n    {code}\n    return x\n\n"
    source += "\n@svod.jit\nasync def uses_Await(x, c):\n    await c\n    return x\n"
    path = folder / "jit_expressions.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("jit_expressions", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["jit_expressions"] = module
    try:
        spec.loader.exec_module(module)
    except KernelSyntaxError as err:  # the async def, refused where it is decorated
        assert "plain function" in str(err), str(err)
        module.__dict__.pop("uses_Await", None)
    return module


@pytest.fixture(scope="module")
def functions(tmp_path_factory):
    return _module(tmp_path_factory.mktemp("jit-expressions"))


def test_every_expression_kind_has_a_case():
    kinds = {k.__name__ for k in ast.expr.__subclasses__() if not k.__name__.startswith("_")}
    assert kinds - _DEPRECATED - set(SNIPPETS) - {"Await"} == set()


@pytest.mark.parametrize("kind", sorted(SNIPPETS))
def test_each_expression_computes_what_python_does_or_is_refused_at_its_line(device, functions, kind):
    fn = getattr(functions, f"uses_{kind}")
    try:
        agrees_with_python(fn, device, np.arange(4.0), 1.5)
    except KernelSyntaxError as err:
        assert "jit_expressions.py:" in str(err), str(err)


def test_an_async_function_is_refused_where_it_is_decorated(functions):
    assert not hasattr(functions, "uses_Await")
