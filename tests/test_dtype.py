import subprocess
import sys

import numpy as np
import pytest

from svod.dtype import DeviceSpec, PtrDType, dtypes
from svod.errors import DeviceError, SvodError


@pytest.mark.parametrize("dt", [d for d in dtypes.all() if d is not dtypes.index])
def test_numpy_round_trip(dt):
    assert dtypes.from_numpy(dt.numpy) is dt
    assert dt.numpy.itemsize == dt.itemsize


def test_index_is_64_bit_signed():
    assert dtypes.index.numpy == np.int64
    assert (dtypes.index.min, dtypes.index.max) == (-(1 << 63), (1 << 63) - 1)
    assert dtypes.index != dtypes.int64


def test_integer_limits():
    assert (dtypes.int8.min, dtypes.int8.max) == (-128, 127)
    assert (dtypes.uint16.min, dtypes.uint16.max) == (0, 65535)
    assert (dtypes.bool.min, dtypes.bool.max) == (0, 1)


def test_pointer_dtype():
    p = dtypes.float32.ptr(10)
    assert isinstance(p, PtrDType) and p.base is dtypes.float32 and p.size == 10
    assert p == dtypes.float32.ptr(10) and p != dtypes.float32.ptr(11)
    with pytest.raises(SvodError):
        _ = p.numpy


def test_vectors():
    v = dtypes.float32.vec(4)
    assert v.itemsize == 16 and v.count == 4 and v.scalar == dtypes.float32


def test_unknown_numpy_dtype():
    with pytest.raises(SvodError, match="complex64"):
        dtypes.from_numpy(np.complex64)


@pytest.mark.parametrize(("name", "canonical", "base", "ident"), [
    ("cpu", "CPU", "CPU", 0), ("Python", "PYTHON", "PYTHON", 0), ("cl:0", "CL:0", "CL", 0),
    ("CUDA", "CUDA:0", "CUDA", 0), ("cuda:1", "CUDA:1", "CUDA", 1), ("CPU:0", "CPU", "CPU", 0),
])
def test_device_spec_parse(name, canonical, base, ident):
    spec = DeviceSpec.parse(name)
    assert (str(spec), spec.base_type, spec.device_id) == (canonical, base, ident)
    assert DeviceSpec.parse(str(spec)) == spec


@pytest.mark.parametrize("name", ["TPU", "cuda:x", "cpu:1", "", "CL:-1"])
def test_device_spec_rejects(name):
    with pytest.raises(DeviceError, match="device"):
        DeviceSpec.parse(name)


FIRST_PARSE = """
import numpy as np
from svod.codegen.render.llvmir import LLVMRenderer
from svod.dtype import DeviceSpec
from svod.errors import DeviceError

assert "svod.backends.registry" not in __import__("sys").modules
renderer = LLVMRenderer("cpu")
print(renderer.device, DeviceSpec.parse("cl:1"), DeviceSpec.parse("webgpu"))
try:
    DeviceSpec.parse("TPU")
except DeviceError as err:
    print(err)
"""


def test_a_device_named_before_any_is_opened_finds_its_kind():
    """A fresh process's first device name (a renderer built before any device is opened) registers the kinds
    the registry knows, rather than refusing every name as unknown; an unknown one is still refused, naming the
    known ones."""
    result = subprocess.run([sys.executable, "-c", FIRST_PARSE], capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert lines[0] == "CPU CL:1 WEBGPU:0"
    assert lines[1] == "[stage device] unknown device 'TPU'; known: CPU, PYTHON, CL, CUDA, WEBGPU"


TWO_THREADS = """
import threading

import svod
from svod.dtype import DeviceSpec

register = DeviceSpec.register_kind.__func__
midway, parsed = threading.Event(), threading.Event()


def held(cls, base_type, numbered):
    register(cls, base_type, numbered)
    if threading.current_thread().name == "first" and not midway.is_set():
        midway.set()  # one kind registered: the other thread names another now
        parsed.wait(1)


DeviceSpec.register_kind = classmethod(held)
found = {}


def name(device, later):
    if later:
        midway.wait(10)
    try:
        found[device] = str(DeviceSpec.parse(device))
    except svod.errors.SvodError as err:
        found[device] = str(err)
    finally:
        parsed.set()


threads = [threading.Thread(target=name, args=("CPU", False), name="first"),
           threading.Thread(target=name, args=("WEBGPU", True), name="second")]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(found["CPU"], found["WEBGPU"])
"""


def test_a_device_named_while_another_thread_registers_the_kinds_finds_its_kind():
    """Two threads name their first devices at once: the second, finding some kinds registered but not its own,
    waits for the registration under way rather than refusing its device as unknown."""
    result = subprocess.run([sys.executable, "-c", TWO_THREADS], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["CPU", "WEBGPU:0"]
