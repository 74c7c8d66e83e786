"""``import svod`` and ``import svod.torch`` import no torch; ``svod.torch.function`` without torch says how to
install it. (Nothing here needs torch: CI runs it without.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


_IMPORTED = "import sys; print(' '.join(sorted(m for m, v in sys.modules.items() if v is not None)))"


def test_import_svod_and_svod_torch_import_no_torch() -> None:
    assert "torch" not in _run(f"import svod; {_IMPORTED}").split()
    loaded = _run(f"import svod, svod.torch; svod.torch.function; {_IMPORTED}").split()
    assert "svod.torch" in loaded and "torch" not in loaded


_WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed: importing it raises ImportError
import svod
from svod.errors import SvodError

@svod.kernel
def doubled(y, x):
    for i in svod.prange(x.shape[0]):
        y[i] = x[i] * 2.0

try:
    svod.torch.function(doubled)
except SvodError as err:
    print(type(err).__name__, err.stage, err)
"""


def test_svod_torch_function_without_torch_says_how_to_install_it() -> None:
    shown = _run(_WITHOUT_TORCH)
    assert shown.startswith("SvodError gradient") and "svod.torch needs torch" in shown and "pip install" in shown
