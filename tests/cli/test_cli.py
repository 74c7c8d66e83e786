import dataclasses
import subprocess
import sys

from svod.cli import main
from svod.cli.demo import DemoCase, matmul_case, row_sum_case, run_case, run_demo, saxpy_case
from svod.frontend import get_device


def test_devices_lists_every_kind(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for name in ("CPU", "PYTHON", "CL:0", "CUDA:0"):
        assert name in out
    assert "llvm" in out


def test_demo_on_small_cases_passes(capsys):
    small = (lambda: saxpy_case(1001), lambda: row_sum_case(7, 33), lambda: matmul_case(7))
    assert run_demo("CPU", cases=small, plan_sizes=(5, 97)) == 0
    assert run_demo("PYTHON", cases=small, plan_sizes=(3,)) == 0
    out = capsys.readouterr().out
    assert out.count(" ok ") >= 9 and "WRONG" not in out and "plan n=97" in out


def test_check_fails_for_a_wrong_kernel(capsys):
    good = saxpy_case(64)
    answer = good.workload.numpy
    wrong = DemoCase(dataclasses.replace(good.workload, name="saxpy_wrong", numpy=lambda: answer() * 2),
                     good.bytes_moved, good.flops)
    assert not run_case(wrong, get_device("CPU")).ok
    assert run_demo("CPU", cases=(lambda: wrong,), plan_sizes=()) == 1
    assert "WRONG" in capsys.readouterr().out


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "svod", "devices"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "PYTHON" in result.stdout
