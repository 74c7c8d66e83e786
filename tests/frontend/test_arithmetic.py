"""A Python int meeting an integer array's element that its dtype does not hold: NumPy 2 raises ``OverflowError:
Python integer 300 out of bounds for int8`` storing it or computing with it, so a kernel is refused at the line
(never a wrapped value); a comparison with it is answered exactly, as NumPy 2 answers it."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.errors import KernelSyntaxError
from svod.frontend.oracle import run_as_python
from tests.helpers import refuses

_FILE = "test_arithmetic.py"


def _kernel(folder, body: str, name: str):
    """A kernel over ``a`` (and ``out``) whose prange body is ``body``, line 6 of a file of its own."""
    code = ("import numpy as np\nimport svod\n\n@svod.kernel\ndef k(a, out):\n"
            "    for i in svod.prange(a.shape[0]):\n"
            f"        {body}\n")
    path = folder / f"{name}.py"
    path.write_text(code)
    namespace: dict = {}
    exec(compile(code, str(path), "exec"), namespace)
    return namespace["k"], f"{name}.py:7"


_BODIES = [
    ("store", "a[i] = {v}"), ("augmented", "a[i] += {v}"), ("add", "a[i] = a[i] + {v}"),
    ("added_to", "a[i] = {v} + a[i]"), ("sub", "a[i] = a[i] - {v}"), ("mul", "a[i] = a[i] * {v}"),
    ("floordiv", "a[i] = a[i] // {v}"), ("mod", "a[i] = a[i] % {v}"), ("and", "a[i] = a[i] & {v}"),
    ("or", "a[i] = a[i] | {v}"), ("xor", "a[i] = a[i] ^ {v}"), ("maximum", "a[i] = np.maximum(a[i], {v})"),
    ("conversion", "a[i] = np.{dtype}({v})"), ("svod_conversion", "a[i] = svod.{dtype}({v})"),
    ("annotated", "t: svod.{dtype} = {v}\n        a[i] = t"), ("atomic", "svod.atomic_add(a, i, {v})"),
]
_BEYOND = [(np.int8, 300), (np.int8, -129), (np.int8, 128), (np.uint8, -1), (np.uint8, 256), (np.int16, 2**15),
           (np.uint16, -1), (np.int32, 2**31), (np.int32, -(2**31) - 1), (np.uint32, 2**32), (np.uint32, -1)]


@pytest.mark.parametrize(("dtype", "value"), _BEYOND)
@pytest.mark.parametrize(("what", "body"), _BODIES)
def test_a_python_int_the_arrays_dtype_does_not_hold_is_refused_at_its_line(tmp_path, what, body, dtype, value):
    """NumPy 2 raises for each of these (the refusal says its words); svod refuses before anything runs."""
    name = np.dtype(dtype).name
    source = body.format(v=value, dtype=name)
    kernel, where = _kernel(tmp_path, source, f"beyond_{what}")
    a = np.zeros(3, dtype)
    with pytest.raises(KernelSyntaxError, match=rf"Python integer {value} out of bounds for {name}") as raised:
        kernel(a, np.zeros(3, np.int64))
    assert where in str(raised.value)
    assert a.tolist() == [0, 0, 0]
    if what in ("store", "add", "added_to", "mul", "maximum", "conversion"):  # what NumPy 2 itself refuses
        with pytest.raises(OverflowError, match=f"Python integer {value} out of bounds for {name}"):
            exec(source.replace("svod.", "np.").replace("[i]", "[0]"), {"np": np, "a": np.zeros(3, dtype)})


@pytest.mark.parametrize(("dtype", "value"), [(np.int8, 127), (np.int8, -128), (np.uint8, 255), (np.uint8, 0),
                                              (np.int32, 2**31 - 1), (np.uint32, 2**32 - 1)])
def test_the_dtypes_own_extremes_are_stored_and_combined_as_numpy_does(tmp_path, device, dtype, value):
    if refuses(device, dtypes.from_numpy(np.dtype(dtype))):
        return
    kernel, _ = _kernel(tmp_path, f"a[i] = a[i] + {value}\n        out[i] = np.{np.dtype(dtype).name}({value})",
                        f"extreme_{np.dtype(dtype).name}_{value}")
    info = np.iinfo(dtype)
    a = np.array([0, 1, info.max, info.min, 7], dtype)
    out = np.zeros(5, dtype)
    want = a.copy()
    with np.errstate(over="ignore"):
        want += value  # NumPy wraps a sum of values its dtype holds
    kernel(a, out, device=device)
    assert a.tolist() == want.tolist()
    assert out.tolist() == [value] * 5


@svod.kernel
def compared(a, out):
    for i in svod.prange(a.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = a[i] < 300, a[i] >= -300, a[i] == 300
        out[i, 3], out[i, 4], out[i, 5] = 300 > a[i], a[i] != -129, -1 < a[i]  # noqa: SIM300 (the number first)
        out[i, 6], out[i, 7] = a[i] <= 2**40, a[i] > -(2**70)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32])
@pytest.mark.parametrize("n", [1, 5, 131])
def test_comparisons_with_numbers_beyond_the_dtype_are_numpys(device, dtype, n):
    """``a_i8 < 300`` is all True in NumPy 2 (not a wrapped 44): the same on every device, at every size."""
    if refuses(device, dtypes.from_numpy(np.dtype(dtype))):
        return
    info = np.iinfo(dtype)
    a = np.resize(np.array([info.min, info.max, 0, 1, info.max - 1], dtype), n)
    out = np.zeros((n, 8), np.int32)
    compared(a, out, device=device)
    want = np.stack([a < 300, a >= -300, a == 300, 300 > a, a != -129, -1 < a, a <= 2**40, a > -(2**70)],  # noqa: SIM300
                    axis=1)
    assert out.tolist() == want.astype(np.int32).tolist()
    assert out.tolist() == run_as_python(compared, a, np.zeros((n, 8), np.int32))[1].tolist()


@svod.jit
def added_to_int8(a):
    return a + 300


@svod.jit
def stored_into_int8(a):
    a[:] = 300
    return a


@pytest.mark.parametrize("function", [added_to_int8, stored_into_int8])
def test_a_jitted_array_statement_is_refused_at_its_line(function):
    a = np.zeros(4, np.int8)
    with pytest.raises(svod.errors.SvodError, match="Python integer 300 out of bounds for int8") as raised:
        function(a)
    line = inspect.getsourcelines(function.__wrapped__)[1] + 2  # the decorator's line, then the body's first
    assert f"{_FILE}:{line}" in str(raised.value)
    with pytest.raises(OverflowError):
        function.__wrapped__(a.copy())


@svod.kernel
def extremes(a, out):
    for i in svod.prange(a.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = max(a[i], 300), min(a[i], 300), max(-300, a[i])
        out[i, 3], out[i, 4], out[i, 5] = min(-300, a[i]), max(a[i], -1, 2**40), min(a[i], 2**40, -(2**40))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("n", [1, 5, 131])
def test_max_and_min_with_numbers_beyond_the_dtype_are_pythons(device, dtype, n):
    """Python's ``max(a_i8, 300)`` compares exactly and gives 300, a number NumPy 2 never converts to int8:
    neither a refusal nor a wrapped 44."""
    if refuses(device, dtypes.int64):
        return
    info = np.iinfo(dtype)
    a = np.resize(np.array([info.min, info.max, 0, 1, info.max - 1], dtype), n)
    out = np.zeros((n, 6), np.int64)
    extremes(a, out, device=device)
    want = [[max(v, 300), min(v, 300), max(-300, v), min(-300, v), max(v, -1, 2**40), min(v, 2**40, -(2**40))]
            for v in a.tolist()]
    assert out.tolist() == want
    assert out.tolist() == run_as_python(extremes, a, np.zeros((n, 6), np.int64))[1].tolist()
