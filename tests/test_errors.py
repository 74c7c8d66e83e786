"""Every error svod raises names its stage, and errors that reach the user through a kernel name the kernel."""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
import typing

import numpy as np
import pytest

import svod.errors
from svod import KernelBuilder, UOp, dtypes
from svod.config import Settings
from svod.device.launch import evaluate
from svod.dtype import DeviceSpec
from svod.errors import STAGES, Stage, SvodError

PACKAGE = pathlib.Path(svod.errors.__file__).resolve().parent
DOCS = PACKAGE.parent / "docs"


def _defaults_stage(name: str) -> bool:
    """Whether the error class ``name`` fills in a stage itself (``CompileError``: compile)."""
    parameter = inspect.signature(getattr(svod.errors, name)).parameters.get("stage")
    return parameter is not None and isinstance(parameter.default, str)


ERROR_CLASSES = {name for name, value in vars(svod.errors).items()
                 if isinstance(value, type) and issubclass(value, SvodError)}


def _raises_without_stage(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name) \
                and node.exc.func.id in ERROR_CLASSES and not _defaults_stage(node.exc.func.id) \
                and not any(keyword.arg == "stage" for keyword in node.exc.keywords):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_every_svod_error_raised_in_the_package_names_its_stage():
    missing = [where for path in sorted(PACKAGE.rglob("*.py")) for where in _raises_without_stage(path)]
    assert not missing, missing


def _shape_mismatch() -> None:
    k = KernelBuilder("rows")
    k.buffer(dtypes.float32, (4, 4))[1]


@pytest.mark.parametrize(("fail", "kernel", "stage", "value"), [
    (lambda: UOp.range(2.5, 0), None, "build", 2.5),
    (lambda: UOp.param(0, dtypes.float32, 8)[UOp.const(dtypes.float32, 1.0)], None, "build", dtypes.float32),
    (_shape_mismatch, "rows", "build", 1),
    (lambda: KernelBuilder("empty").build(), "empty", "build", None),
    (lambda: DeviceSpec.parse("TPU"), None, "device", "TPU"),
    (lambda: dtypes.from_numpy(np.dtype(object)), None, "build", "object"),
    (lambda: evaluate(UOp.define_var("n", 1, 4) + 1, {}), None, "launch", "n"),
    (lambda: evaluate(UOp.define_var("n", 1, 4) + 1, {"n": 9}), None, "launch", 9),
    (lambda: Settings.from_env({"SVOD_THREADS": "many"}), None, "device", "many"),
])
def test_user_errors_name_stage_and_value(fail, kernel, stage, value):
    with pytest.raises(SvodError) as info:
        fail()
    assert (info.value.kernel, info.value.stage, info.value.value) == (kernel, stage, value)
    assert stage in STAGES and f"stage {stage}" in str(info.value)
    if value is not None:  # the message shows the value, once: in its words, or in a "(got ...)" tail
        shown = re.search(rf"(?<![\w.]){re.escape(str(value))}(?![\w.])", str(info.value))
        assert shown or repr(value) in str(info.value)
        assert str(info.value).count(f"(got {value!r})") <= 1


def test_naming_a_kernel_keeps_the_error_and_names_it_once():
    err = svod.errors.BufferMismatchError("too small", stage="bind", value=3)
    err.name_kernel("first")
    err.name_kernel("second")
    assert str(err) == "[kernel 'first', stage bind] too small (got 3)" and err.kernel == "first"


def test_the_stages_are_one_set_the_errors_take_and_the_docs_list_with_their_meanings():
    """``Stage`` (the type a checker holds every ``stage=`` to) and ``STAGES`` name the same stages in one order;
    each error class that takes a stage takes a ``Stage``; the table of docs/kernels.md gives each stage the
    meaning ``STAGES`` does."""
    assert typing.get_args(Stage) == tuple(STAGES)
    assert len(STAGES) == 14 and "build" in STAGES and "races" not in STAGES
    for name in sorted(ERROR_CLASSES):
        hint = typing.get_type_hints(getattr(svod.errors, name).__init__).get("stage")
        assert hint in (Stage, Stage | None), (name, hint)
    documented = re.findall(r"^\| `(\w+)` \| (.+) \|$", (DOCS / "kernels.md").read_text(), re.M)
    assert documented == list(STAGES.items())
