"""``svod.check`` and ``svod check``: every backend against the reference, differences located."""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import pytest

import svod
from svod import KernelBuilder, Ops, dtypes
from svod.backends import default_registry
from svod.cli import main
from svod.codegen.render.c import CRenderer
from svod.device import Device
from svod.errors import DeviceError, RaceError
from svod.ir import UOp
from tests.helpers import open_device, webgpu_devices


def _scaled(rows=3, cols=4):
    k = KernelBuilder("scaled")
    out, x = k.buffer(dtypes.float32, rows * cols), k.buffer(dtypes.float32, rows * cols)
    i, j = k.range(rows), k.range(cols)
    k.store(out[i * cols + j], x[i * cols + j] * 2.0 + 1.0)
    return k.build()


class _MiscompilingRenderer(CRenderer):
    """Renders every float ADD as a SUB: a real, wrongly compiled kernel for the check to catch. (Index
    arithmetic stays right: a miscompiled address would write outside the buffer, not just differ.)"""

    @property
    def cache_key(self) -> str:
        return "miscompiling-" + super().cache_key

    def alu(self, op, dtype, operand_dtype, args, divisor=None):
        return super().alu(Ops.SUB if op is Ops.ADD and dtype.is_float else op, dtype, operand_dtype, args, divisor)


def _miscompiling_device() -> Device:
    good = svod.get_device("CPU", "clang")
    return Device("CPU", good.allocator, _MiscompilingRenderer("CPU"), good.compiler, good.runtime)


class _RefusingRenderer(CRenderer):
    """Refuses every kernel with a ``RaceError`` of its own: the class the reference raises for a racy
    store, for another reason."""

    def program(self, ast: UOp, name: str | None = None) -> UOp:
        raise RaceError("this renderer refuses every kernel", stage="render")


def _refusing_device() -> Device:
    good = svod.get_device("CPU", "clang")
    return Device("CPU", good.allocator, _RefusingRenderer("CPU"), good.compiler, good.runtime)


def _racy():
    """Two work items store to one element: the reference and every backend refuse it, alike."""
    k = KernelBuilder("racy")
    out, x = k.buffer(dtypes.float32, 4), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(out[i // 2], x[i])
    return k.build(), [np.zeros(4, np.float32), np.ones(8, np.float32)]


def _square(dtype=dtypes.int32):
    k = KernelBuilder(f"square_{dtype.name}")
    out, x = k.buffer(dtype, 8), k.buffer(dtype, 8)
    i = k.range(8)
    k.store(out[i], x[i] * x[i])
    return k.build(), [np.zeros(8, dtype.numpy), np.arange(-3, 5).astype(dtype.numpy)]


def _devices(report) -> set[str]:
    return {r.device.split(" (")[0] for r in report.results}


def test_every_backend_here_agrees_on_a_correct_kernel():
    x = np.random.default_rng(0).standard_normal(12).astype(np.float32)
    report = svod.check(_scaled(), [np.zeros(12, np.float32), x])
    assert report.ok and report.results
    assert {r.device for r in report.results} >= {"CPU (llvm)", "CPU (clang)"}
    assert _devices(report) == set(svod.available_devices()) - {"PYTHON"}
    for result in report.results:  # floats are compared wherever the device keeps IEEE 754's
        ieee = svod.get_device(result.device.split(" (")[0]).caps.ieee_floats
        assert str(result) == f"{result.device}: equal" if ieee else "caps.ieee_floats" in str(result)


def test_every_device_here_is_compared_on_an_integer_kernel():
    """None is left out: WebGPU too, whose floats alone the comparison cannot take bit for bit."""
    report = svod.check(*_square())
    assert _devices(report) == set(svod.available_devices()) - {"PYTHON"}
    assert report.ok and all(str(r) == f"{r.device}: equal" for r in report.results)


@pytest.mark.parametrize("name", webgpu_devices())
def test_a_float_kernel_is_not_compared_on_a_device_without_ieee_floats(name):
    device = open_device(name)
    x = np.arange(12, dtype=np.float32)
    result = next(r for r in svod.check(_scaled(), [np.zeros(12, np.float32), x]).results
                  if r.device.startswith(f"{name} "))
    assert not device.caps.ieee_floats and result.ok and result.skipped is not None
    assert "caps.ieee_floats" in str(result)
    named = svod.check(_scaled(), [np.zeros(12, np.float32), x], devices=[name])  # named: compared
    assert named.ok and named.results[0].skipped is None


def test_a_device_that_cannot_hold_a_dtype_is_skipped_and_says_which():
    """A refusal the device states before compiling is no difference; the report names it."""
    good = svod.get_device("CPU", "clang")
    caps = dataclasses.replace(good.caps, element_dtypes=good.caps.element_dtypes - {dtypes.int64})
    narrow = Device("CPU", good.allocator, good.renderer, good.compiler, good.runtime, caps=caps)
    report = svod.check(*_square(dtypes.int64), devices=[narrow, good])
    assert [r.ok for r in report.results] == [True, True]
    assert report.results[0].skipped is not None
    assert "cannot hold int64, the dtype of buffer 0" in str(report.results[0])
    assert report.results[1].skipped is None and str(report.results[1]).endswith(": equal")


def test_a_backend_that_raises_where_the_reference_computes_differs():
    x = np.arange(12, dtype=np.float32)
    report = svod.check(_scaled(), [np.zeros(12, np.float32), x], devices=[_refusing_device()])
    assert not report.ok
    assert "refuses every kernel where the reference computed" in str(report)


def test_a_refusal_the_reference_makes_agrees_only_for_the_same_reason():
    report = svod.check(*_racy())
    assert report.reference_error is not None and "two work items" in report.reference_error
    assert report.ok
    assert all(str(r) == f"{r.device}: equal" for r in report.results if r.skipped is None)
    other = svod.check(*_racy(), devices=[_refusing_device()])  # a RaceError too, for another reason
    assert not other.ok
    assert "refuses every kernel where the reference raised RaceError: the store to buffer 0" in str(other)


def test_a_miscompiled_backend_is_reported_at_its_first_difference():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    report = svod.check(_scaled(), [np.zeros((3, 4), np.float32), x], devices=[_miscompiling_device()])
    assert not report.ok
    difference = report.results[0].difference
    assert difference is not None and difference.argument == 0 and difference.flat_index == 0
    assert difference.index == (0, 0) and difference.expected == 1.0 and difference.got == -1.0
    assert difference.ulps is not None and difference.ulps > 1000
    assert "argument 0[0, 0]" in str(report)


def test_a_kernel_that_leaves_its_buffer_raises_alike_everywhere():
    k = KernelBuilder("overrun")
    out, x = k.buffer(dtypes.float32, 8), k.buffer(dtypes.float32, 8)
    i = k.range(8)
    k.store(out[i], x[i + 1])
    report = svod.check(k.build(), [np.zeros(8, np.float32), np.ones(8, np.float32)])
    assert report.reference_error is not None and "index 8" in report.reference_error
    assert report.ok


def test_the_command_exits_zero_when_backends_agree(tmp_path, capsys):
    kernel_file = tmp_path / "kernels.py"
    kernel_file.write_text(textwrap.dedent("""
        import numpy as np
        from svod import KernelBuilder, dtypes

        def square():
            k = KernelBuilder("square")
            n = k.var("n", 1, 100)
            out, x = k.buffer(dtypes.int32, n), k.buffer(dtypes.int32, n)
            i = k.range(n)
            k.store(out[i], x[i] * x[i])
            return k.build(), [np.zeros(10, np.int32), np.arange(10, dtype=np.int32)], {"n": 10}
    """))
    assert main(["check", f"{kernel_file}:square"]) == 0
    out = capsys.readouterr().out
    assert "svod check square" in out and "CPU (llvm): equal" in out
    assert main(["check", f"{kernel_file}:missing"]) == 2
    assert main(["check", "no_such_file.py:f"]) == 2


def test_a_compiler_pair_that_cannot_be_opened_is_listed_with_the_reason(monkeypatch):
    registry = default_registry()
    opened = registry.get

    def get(name, compiler=None):
        if compiler == "clang":
            raise DeviceError("no C compiler on this machine", stage="device")
        return opened(name, compiler)

    monkeypatch.setattr(registry, "get", get)
    result = next(r for r in svod.check(*_square()).results if r.device == "CPU (clang)")
    assert result.ok and str(result) == "CPU (clang): skipped, cannot be opened: no C compiler on this machine"


def _plan(device: str | Device = "CPU") -> svod.ExecutionPlan:
    """x -> y = x * 2 + 1 -> y = y * 2 + 1 -> ..., over a symbolic n: ``x`` bound by name per run."""
    k = KernelBuilder("double_plus_one")
    n = k.var("n", 1, 64)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    plan = svod.ExecutionPlan(device)
    x_slot = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(64, np.float32)), name="x")
    y_slot = plan.add_buffer(svod.Buffer.from_numpy(np.zeros(64, np.float32)), name="y")
    plan.add_kernel(k.build(), [y_slot, x_slot])
    plan.add_kernel(k.build(), [x_slot, y_slot])
    return plan


def test_a_plan_runs_whole_on_every_backend_and_agrees():
    x = np.linspace(-3, 3, 64).astype(np.float32)
    report = svod.check(_plan(), {"x": x}, n=37)
    assert report.ok, str(report)
    assert "CPU" in _devices(report) and report.kernel == "plan"
    assert "CPU (llvm): equal" in str(report)


def test_a_plan_on_a_miscompiled_backend_differs_at_its_first_element():
    x = np.arange(64, dtype=np.float32)
    report = svod.check(_plan(), {"x": x}, devices=[_miscompiling_device()], n=5)
    assert not report.ok
    (result,) = report.results
    # x[0] = 0 -> y = 0 * 2 + 1 = 1 -> x = 3, miscompiled: y = -1 -> x = -3
    assert result.difference is not None and (result.difference.expected, result.difference.got) == (3.0, -3.0)


def test_a_plan_whose_variable_is_out_of_bounds_raises_alike_everywhere():
    report = svod.check(_plan(), {"x": np.zeros(64, np.float32)}, n=65)
    assert report.reference_error is not None and "65" in report.reference_error
    assert report.ok, str(report)


def test_the_command_checks_a_plan_on_named_devices_importing_beside_its_file(tmp_path, capsys):
    (tmp_path / "helpers_beside.py").write_text("SIZE = 12\n")
    kernel_file = tmp_path / "plans.py"
    kernel_file.write_text(textwrap.dedent("""
        import numpy as np
        from helpers_beside import SIZE
        from tests.frontend.test_check import _plan

        def doubled():
            return _plan(), {"x": np.arange(64, dtype=np.float32)}, {"n": SIZE}
    """))
    assert main(["check", f"{kernel_file}:doubled", "--devices", "CPU", "PYTHON"]) == 0
    out = capsys.readouterr().out
    assert "svod check plan" in out and "CPU: equal" in out and "PYTHON: equal" in out
    assert "CL:0" not in out


# ---- jitted functions, against themselves run as plain Python ------------------------------------------------

@svod.jit
def _halving(x, limit):
    turns = 0
    while x.sum() > limit:
        x *= 0.5
        turns += 1
    return x, turns


def test_a_jit_function_agrees_with_its_python_on_every_device_here():
    report = svod.check(_halving, [np.full(7, 3.0), 1.0])
    assert report.ok, str(report)
    assert report.reference == "plain Python" and "PYTHON: equal" in str(report)
    assert any(r.device.startswith("CPU") and r.skipped is None for r in report.results)


@svod.jit
def _largest(x):
    top = x.max()
    return top


def test_a_jit_functions_float32_scalar_is_compared_in_float32():
    """Plain Python returns a float32; the function, a Python float of the float32 it computed."""
    report = svod.check(_largest, [np.array([1.5, -2.0, 3.25], np.float32)], devices=["CPU", "PYTHON"])
    assert report.ok, str(report)


def test_a_jit_function_that_returns_another_value_differs(monkeypatch):
    real = svod.frontend.jit.Jit.run

    def off_by_one(self, args, device="CPU", launch=None):
        x, turns = real(self, args, device, launch)
        return x, turns + 1

    monkeypatch.setattr(svod.frontend.jit.Jit, "run", off_by_one)
    report = svod.check(_halving, [np.full(3, 3.0), 1.0], devices=["PYTHON"])
    assert not report.ok and "argument 2[] (flat 0): reference 4, got 5" in str(report), str(report)


def test_the_command_checks_a_jit_function(tmp_path, capsys):
    source = tmp_path / "functions.py"
    source.write_text(textwrap.dedent("""
        import numpy as np
        import svod

        @svod.jit
        def clipped(x):
            for t in range(10):
                x += 1.0
                if x.max() > 4.0:
                    break
            return x

        def example():
            return clipped, [np.arange(3.0)]
    """))
    assert main(["check", f"{source}:example", "--devices", "CPU", "PYTHON"]) == 0
    assert "svod check clipped: reference plain Python" in capsys.readouterr().out
