"""svod and ``svod.distributed`` import and work without Ray; a ``Cluster`` says how to install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import sys
sys.modules["ray"] = None  # as if Ray were not installed: importing it raises ImportError
import svod, svod.distributed
from svod.errors import SvodError
assert "ray" not in {name for name, module in sys.modules.items() if module is not None}
try:
    svod.distributed.Cluster(num_cpus=1)
except SvodError as err:
    print(err)
"""


def test_svod_distributed_without_ray() -> None:
    done = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "svod.distributed needs Ray" in done.stdout and "pip install" in done.stdout
