"""``svod.check`` and ``svod check``: every backend against the reference, differences located."""

from __future__ import annotations

import textwrap

import numpy as np

import svod
from svod import KernelBuilder, Ops, dtypes
from svod.cli import main
from svod.codegen.render.c import CRenderer
from svod.device import Device


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


def test_every_backend_here_agrees_on_a_correct_kernel():
    x = np.random.default_rng(0).standard_normal(12).astype(np.float32)
    report = svod.check(_scaled(), [np.zeros(12, np.float32), x])
    assert report.ok and report.results
    assert {r.device for r in report.results} >= {"CPU (llvm)", "CPU (clang)"}
    assert all("equal" in str(r) for r in report.results)


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
