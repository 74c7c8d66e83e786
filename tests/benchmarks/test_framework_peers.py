"""torch (eager and ``torch.compile``) and JAX spell every suite kernel with the framework's own ops, and each
answer is checked against numpy before it is timed; a framework that is not installed says so."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks.framework_peers import FrameworkPeers, jax_spellings, torch_spellings
from benchmarks.peers import NOT_INSTALLED
from svod.workloads import PYTHON_KERNELS
from tests.kernels import SMALL_WORKLOADS


def test_every_suite_family_has_a_torch_and_a_jax_spelling():
    families = set(PYTHON_KERNELS)
    assert families <= set(torch_spellings(SimpleNamespace(nn=SimpleNamespace(functional=None))))
    assert families <= set(jax_spellings(SimpleNamespace(numpy=None)))


_CHECK = """
import json
from benchmarks.framework_peers import FrameworkPeers
from svod.workloads import PYTHON_KERNELS
from tests.kernels import SMALL_WORKLOADS
peers = FrameworkPeers()
found = {family: peers.runners(SMALL_WORKLOADS[family]()) for family in sorted(PYTHON_KERNELS)}
print(json.dumps({family: {name: "runs" if callable(run) else run for name, run in runs.items()}
                  for family, runs in found.items()}))
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("jax") is None,
                    reason="torch and jax are in the bench extra, not installed here")
def test_each_framework_computes_what_numpy_does():
    """At small, odd sizes, each peer runs (it agreed with numpy) or, for torch.compile, is a family it is not
    timed on. In a process of its own: the triton that torch.compile loads crashes a process where Mesa's
    LLVM (WebGPU's lavapipe, which the device fixtures open) is loaded."""
    done = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    for family, runs in found.items():
        assert runs["torch"] == runs["jax"] == "runs", (family, runs)
        assert runs["torch.compile"] == "runs" or runs["torch.compile"].startswith(("timed only where", "Inductor")), \
            family


def test_torch_compile_is_not_run_beside_a_shared_llvm(monkeypatch):
    """Mesa's lavapipe maps a shared libLLVM; the triton that Inductor imports then crashes the process."""
    pytest.importorskip("torch", reason="torch is in the bench extra, not installed here")
    monkeypatch.setattr("benchmarks.framework_peers.shared_llvm", lambda: "/usr/lib/libLLVM-15.so.1")
    peers = FrameworkPeers()
    assert "libLLVM-15" in peers.runners(SMALL_WORKLOADS["softmax"]())["torch.compile"]


def test_a_framework_that_is_not_installed_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "jax", None)
    found = FrameworkPeers().runners(SMALL_WORKLOADS["softmax"]())
    assert found == {"torch": NOT_INSTALLED, "torch.compile": NOT_INSTALLED, "jax": NOT_INSTALLED}
