"""Fixtures shared by the suite: the devices every kernel test runs on."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ["SVOD_CACHE_DIR"] = tempfile.mkdtemp(prefix="svod-test-cache-")  # before svod reads its settings

import pytest
from hypothesis import settings

import svod
from svod.device import Device

CPU_PAIRS = ["llvm", "clang"]

# CI explores the same examples on every run, so a landing never depends on the draw; locally each run
# draws new ones and keeps failures in .hypothesis/.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def _device(name: str) -> Device:
    if name == "clang" and not any(shutil.which(c) for c in ("clang", "gcc", "cc")):
        pytest.skip("no C compiler on this machine (clang, gcc or cc)")
    if name in CPU_PAIRS:
        return svod.get_device("CPU", name)
    try:
        return svod.get_device(name)
    except svod.errors.DeviceError as err:
        pytest.skip(f"{name} is not available here: {err.detail}")


@pytest.fixture(params=[*CPU_PAIRS, "PYTHON", "CL:0", "WEBGPU:0"])
def device(request: pytest.FixtureRequest) -> Device:
    """Every device that runs kernels here: each CPU compiler pair, the PYTHON reference, OpenCL, WebGPU."""
    return _device(request.param)


@pytest.fixture(params=[*CPU_PAIRS, "CL:0", "WEBGPU:0"])
def compiled_device(request: pytest.FixtureRequest) -> Device:
    """Every device with a real compiler (the kernels the reference is compared against)."""
    return _device(request.param)
