"""The GPU peers' table has a torch spelling for each suite kernel (checked against numpy on the GPU, where
the device check runs it) or says why not; without a GPU, asking for the CUDA suite is a clear refusal."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from benchmarks.framework_peers import torch_spellings
from benchmarks.gpu_peers import gpu_seconds
from benchmarks.suite import suite


def test_every_suite_kernel_has_a_torch_spelling():
    fake = SimpleNamespace(nn=SimpleNamespace(functional=None))
    families = {w.family for w in suite(quick=True)}
    assert families <= set(torch_spellings(fake))


def test_gpu_seconds_waits_for_the_device_after_each_call():
    calls: list[str] = []
    gpu_seconds(lambda: calls.append("run"), lambda: calls.append("sync"), repeats=3, warmup=1)
    assert calls == ["run", "sync", "run", "sync", "run", "sync", "run", "sync"]


def test_the_cuda_suite_on_a_device_this_machine_lacks_says_so():
    """CUDA:7 is missing here whether or not there is a GPU (the device check's machine has one): the
    command fails naming it, before any figure."""
    done = subprocess.run([sys.executable, "-m", "svod", "bench", "--suite", "kernels", "--device", "CUDA:7"],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode != 0 and "CUDA:7" in done.stderr + done.stdout
