import dataclasses
import re
import subprocess
import sys

import pytest

import svod
from svod.backends import default_registry
from svod.backends.registry import BACKENDS
from svod.cli import main
from svod.cli.demo import DemoCase, matmul_case, row_sum_case, run_case, run_demo, saxpy_case
from svod.dtype import DeviceSpec
from svod.errors import SvodError
from svod.frontend import get_device


def devices_table(out: str) -> dict[str, tuple[str, str, str]]:
    """``svod devices``'s rows by device: (compilers, works here, detail), cut at the columns its dashes mark."""
    header, dashes, *rows = out.rstrip("\n").split("\n")
    assert header.split() == ["device", "compilers", "works", "here", "detail"]
    starts = [match.start() for match in re.finditer("-+", dashes)]
    cells = [[row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)] for row in rows]
    return {name: (compilers, works, detail) for name, compilers, works, detail in cells}


def test_devices_lists_every_kind(capsys):
    assert main(["devices"]) == 0
    shown = devices_table(capsys.readouterr().out)
    registry = default_registry()
    assert list(shown) == [name for kind in BACKENDS for name in registry.names(kind)]
    assert {DeviceSpec.parse(name).base_type for name in shown} == set(BACKENDS)  # every kind, working or not
    assert [name for name, (_, works, _) in shown.items() if works == "yes"] == svod.available_devices()
    for name, (compilers, works, detail) in shown.items():
        assert compilers == ", ".join(registry.compiler_names(name))
        assert works in ("yes", "no")
        if works == "yes":  # it opens, and the table describes it as it describes itself
            assert svod.get_device(name).description == detail
        else:  # it does not open, and the table gives the reason opening it gives
            with pytest.raises(SvodError) as why:
                svod.get_device(name)
            assert why.value.detail == detail


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
