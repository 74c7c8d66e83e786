"""The caller's arrays without copies: zero-copy buffers, in-place svod.run, DLPack both ways."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import svod
from svod import KernelBuilder, dtypes
from svod.device import caps, dlpack
from svod.errors import BufferMismatchError, SvodError
from tests.helpers import open_device


def _scale(n: int = 6, dtype=dtypes.float32):
    k = KernelBuilder("scale")
    out, x = k.buffer(dtype, n), k.buffer(dtype, n)
    i = k.range(n)
    k.store(out[i], x[i] * 3)
    return k.build()


def _shift():
    """``out[i + 1] = x[i]``: in one memory, each element would read the one just written."""
    k = KernelBuilder("shift")
    out, x = k.buffer(dtypes.int32, 8), k.buffer(dtypes.int32, 8)
    i = k.range(7)
    k.store(out[i + 1], x[i])
    return k.build()


def test_a_zero_copy_buffer_is_the_array():
    a = np.arange(6, dtype=np.float32)
    buf = svod.Buffer.from_numpy(a, copy=False)
    assert np.shares_memory(buf.host_view(), a)
    svod.run(_scale(), [buf, svod.Buffer.from_numpy(np.ones(6, np.float32))])
    np.testing.assert_array_equal(a, np.full(6, 3.0, np.float32))
    copied = svod.Buffer.from_numpy(a)
    assert not np.shares_memory(copied.host_view(), a)


def test_run_works_on_the_callers_arrays_in_place():
    out, x = np.zeros(6, np.float32), np.arange(6, dtype=np.float32)
    kernel = svod.compile(_scale(), "CPU")
    seen = []
    original = type(kernel).launch_at

    def spy(self, addresses, *args, **kwargs):  # where the kernel is launched on
        seen.extend(addresses)
        return original(self, addresses, *args, **kwargs)

    type(kernel).launch_at = spy
    try:
        svod.run(_scale(), [out, x])
    finally:
        type(kernel).launch_at = original
    assert seen[:2] == [out.ctypes.data, x.ctypes.data]
    np.testing.assert_array_equal(out, x * 3)


def test_the_array_stays_alive_with_its_buffer():
    buf = svod.Buffer.from_numpy(np.arange(1000, dtype=np.int64), copy=False)
    gc.collect()
    _ = [np.full(1000, -1, np.int64) for _ in range(50)]
    np.testing.assert_array_equal(buf.numpy(), np.arange(1000))


def test_read_only_arrays_are_read_but_never_written():
    frozen = np.arange(6, dtype=np.float32)
    frozen.flags.writeable = False
    out = np.zeros(6, np.float32)
    svod.run(_scale(), [out, frozen])
    np.testing.assert_array_equal(out, frozen * 3)
    with pytest.raises(BufferMismatchError, match="read-only"):
        svod.run(_scale(), [frozen, out])
    with pytest.raises(BufferMismatchError, match="read-only"):
        svod.compile(_scale(), "CPU")([svod.Buffer.from_numpy(frozen, copy=False), svod.Buffer.from_numpy(out)])
    np.testing.assert_array_equal(frozen, np.arange(6))


def test_strided_and_misaligned_arrays_go_through_a_copy():
    wide = np.zeros(12, np.float32)
    strided_out = wide[::2]
    raw = np.zeros(6 * 4 + 1, np.uint8)
    misaligned = np.frombuffer(raw.data, dtype=np.float32, count=6, offset=1)
    misaligned[:] = np.arange(6)
    svod.run(_scale(), [strided_out, misaligned])
    np.testing.assert_array_equal(wide[::2], np.arange(6) * 3)
    assert (wide[1::2] == 0).all()
    with pytest.raises(BufferMismatchError, match="C-contiguous"):
        svod.Buffer.from_numpy(wide[::2], copy=False)
    with pytest.raises(BufferMismatchError, match="aligned"):
        svod.Buffer.from_numpy(misaligned, copy=False)


def test_overlapping_arguments_behave_as_copies():
    values = np.arange(8, dtype=np.int32)
    svod.run(_shift(), [values, values])
    np.testing.assert_array_equal(values, [0, 0, 1, 2, 3, 4, 5, 6])


def test_a_device_with_its_own_memory_refuses_zero_copy():
    if "CL:0" not in svod.available_devices():
        pytest.skip("no OpenCL platform here (install pocl-opencl-icd)")
    with pytest.raises(BufferMismatchError, match="copy=True"):
        svod.Buffer.from_numpy(np.zeros(4, np.float32), "CL:0", copy=False)
    with pytest.raises(SvodError, match="DLPack"):
        svod.Buffer.from_numpy(np.zeros(4, np.float32), "CL:0").__dlpack__()


@pytest.mark.parametrize(("name", "kind"), [("CL:0", caps.KDL_OPENCL), ("WEBGPU:0", caps.KDL_WEBGPU)])
def test_a_device_buffer_names_its_dlpack_device_type(name, kind):
    device = open_device(name)
    assert svod.Buffer(device, dtypes.float32, 4).__dlpack_device__() == (kind, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint64, np.float16, np.bool_])
def test_dlpack_round_trips_share_memory(dtype):
    source = (np.arange(10) % 3).astype(dtype)
    buf = svod.Buffer.from_dlpack(source)
    assert buf.dtype == dtypes.from_numpy(np.dtype(dtype)) and buf.size == 10
    assert buf.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(buf)
    assert back.dtype == source.dtype and np.shares_memory(back, source)
    np.testing.assert_array_equal(back, source)


def test_dlpack_of_a_strided_producer_copies_only_when_asked():
    strided = np.arange(10, dtype=np.float64)[::3]
    with pytest.raises(BufferMismatchError, match="C-contiguous"):
        svod.Buffer.from_dlpack(strided)
    np.testing.assert_array_equal(svod.Buffer.from_dlpack(strided, copy=True).numpy(), [0, 3, 6, 9])


def test_dlpack_with_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed here (it is not a dependency)")
    tensor = torch.arange(6, dtype=torch.float32)
    buf = svod.Buffer.from_dlpack(tensor)
    svod.run(_scale(), [buf, svod.Buffer.from_numpy(np.ones(6, np.float32))])
    assert tensor.tolist() == [3.0] * 6
    assert torch.from_dlpack(buf).data_ptr() == tensor.data_ptr()


class _Exporter:
    """What a DLPack producer looks like to numpy: the capsule svod builds for device memory."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return dlpack.capsule(self.array.ctypes.data, dlpack.KDL_CPU, 0, dtypes.from_numpy(self.array.dtype),
                              self.array.size, keepalive=self.array)

    def __dlpack_device__(self):
        return (dlpack.KDL_CPU, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint64, np.bool_])
def test_svods_own_dlpack_capsules_are_read_by_numpy(dtype):
    """The capsule a CUDA buffer exports (checked here on host memory, with no GPU): numpy reads the
    tensor in place, and calls its deleter when done."""
    source = (np.arange(7) % 2).astype(dtype)
    before = len(dlpack._alive)
    view = np.from_dlpack(_Exporter(source))
    assert np.shares_memory(view, source) and view.dtype == source.dtype
    np.testing.assert_array_equal(view, source)
    del view
    gc.collect()
    assert len(dlpack._alive) == before


@pytest.mark.parametrize("others_prototypes", [False, True], ids=["alone", "after_a_library_retyped_pythonapi"])
def test_an_unconsumed_capsule_releases_its_tensor(others_prototypes, monkeypatch):
    """Also after another library (Warp does so on import) set argtypes on ctypes.pythonapi's shared
    capsule functions: svod's capsules do not go through them."""
    if others_prototypes:
        for name in ("PyCapsule_IsValid", "PyCapsule_GetPointer", "PyCapsule_New"):
            function = getattr(ctypes.pythonapi, name)
            monkeypatch.setattr(function, "argtypes", [ctypes.py_object, ctypes.c_char_p])
            monkeypatch.setattr(function, "restype", ctypes.c_int)
    before = len(dlpack._alive)
    capsule = dlpack.capsule(0xDEAD000, dlpack.KDL_CUDA, 1, dtypes.float32, 4, keepalive=None)
    assert type(capsule).__name__ == "PyCapsule" and len(dlpack._alive) == before + 1
    del capsule
    gc.collect()
    assert len(dlpack._alive) == before
