import collections
import gc
import threading

import numpy as np
import pytest

import svod
from svod.device import Buffer, HostAllocator, ReusePool
from svod.device import buffer as buffer_module
from svod.dtype import dtypes
from svod.errors import BufferMismatchError, SvodError


def test_host_memory_is_64_byte_aligned():
    alloc = HostAllocator()
    for nbytes in (0, 1, 3, 64, 1000, 4099):
        handle = alloc.allocate(nbytes)
        assert alloc.address(handle) % 64 == 0


def test_allocator_validates_sizes():
    with pytest.raises(SvodError, match="non-negative"):
        HostAllocator().allocate(-1)


def test_reuse_pool_hands_back_freed_blocks():
    pool = ReusePool(HostAllocator())
    first = pool.allocate(256)
    pool.free(first, 256)
    assert pool.cached_bytes == 256
    assert pool.allocate(256) is first
    assert pool.cached_bytes == 0
    other = pool.allocate(128)
    assert other is not first


def test_reuse_pool_is_bounded_and_clearable():
    pool = ReusePool(HostAllocator(), max_cached=300)
    a, b = pool.allocate(200), pool.allocate(200)
    pool.free(a, 200)
    pool.free(b, 200)
    assert pool.cached_bytes == 200
    pool.clear()
    assert pool.cached_bytes == 0


def test_a_free_inside_the_pools_own_lock_does_not_deadlock():
    """The garbage collector may run a dropped Buffer's finalizer (a free) at any allocation, also while the
    pool holds its lock to hand out a block: the pool then frees into itself (a hypothesis run hung so)."""
    pool = ReusePool(HostAllocator())
    dropped = pool.allocate(64)

    class CollectingOnLookup(collections.defaultdict):  # a collection at the pool's lookup of its blocks
        def get(self, key, default=None):
            pool.free(dropped, 64)
            return super().get(key, default)

    pool._free_blocks = CollectingOnLookup(list)
    allocated = []
    worker = threading.Thread(target=lambda: allocated.append(pool.allocate(64)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the pool deadlocked on its own lock"
    assert allocated == [dropped] and pool.cached_bytes == 0


def test_buffer_allocates_lazily_and_round_trips():
    buf = svod.Buffer("CPU", dtypes.float32, 5)
    assert not buf.is_allocated and buf.nbytes == 20 and buf.device == "CPU"
    buf.copyin(np.arange(5, dtype=np.float32))
    assert buf.is_allocated
    np.testing.assert_array_equal(buf.numpy(), np.arange(5, dtype=np.float32))


def test_numpy_returns_a_copy():
    buf = Buffer.from_numpy(np.arange(4, dtype=np.int32))
    copy = buf.numpy()
    copy[0] = 99
    assert buf.numpy()[0] == 0


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint16, np.int64, np.float16, np.float64])
def test_from_numpy_keeps_dtype_and_values(dtype):
    data = (np.arange(7) % 3).astype(dtype)
    buf = Buffer.from_numpy(data, "CPU")
    assert buf.dtype == dtypes.from_numpy(dtype) and buf.size == 7
    np.testing.assert_array_equal(buf.numpy(), data)


def test_views_share_memory_and_compose():
    base = Buffer.from_numpy(np.arange(10, dtype=np.int32))
    view = base.view(2, 6)
    inner = view.view(1, 3)
    assert inner.base is base and inner.offset == 3 and inner.is_view
    np.testing.assert_array_equal(inner.numpy(), [3, 4, 5])
    inner.copyin(np.array([-1, -2, -3], dtype=np.int32))
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, -1, -2, -3, 6, 7, 8, 9])
    assert view.address - base.address == 8


@pytest.mark.parametrize(("offset", "size"), [(-1, 2), (8, 3), (0, 11), (2, -1)])
def test_views_must_fit(offset, size):
    with pytest.raises(SvodError, match="does not fit"):
        Buffer.from_numpy(np.arange(10, dtype=np.int32)).view(offset, size)


def test_copyin_checks_dtype_and_size():
    buf = svod.Buffer("CPU", dtypes.float32, 4)
    with pytest.raises(BufferMismatchError, match="float64"):
        buf.copyin(np.zeros(4, dtype=np.float64))
    with pytest.raises(BufferMismatchError, match="5 elements"):
        buf.copyin(np.zeros(5, dtype=np.float32))
    assert not buf.is_allocated


def test_zero_size_buffers():
    buf = svod.Buffer("CPU", dtypes.int32, 0)
    buf.copyin(np.zeros(0, dtype=np.int32))
    assert buf.numpy().shape == (0,)


def test_bad_buffers_are_rejected():
    with pytest.raises(SvodError, match="non-negative"):
        svod.Buffer("CPU", dtypes.int32, -3)
    with pytest.raises(svod.errors.DeviceError, match="unknown device"):
        svod.Buffer("TPU", dtypes.int32, 3)


def test_memory_returns_to_the_pool_when_the_buffer_dies():
    buf = svod.Buffer("CPU", dtypes.uint8, 12345)
    handle = buf.handle
    del buf
    gc.collect()
    again = svod.Buffer("CPU", dtypes.uint8, 12345)
    assert again.handle is handle


@pytest.mark.parametrize(("dtype", "size"), [(dtypes.float32, 1 << 62), (dtypes.float32, 1 << 61),
                                             (dtypes.float64, 1 << 60), (dtypes.uint8, 1 << 64)])
def test_a_size_whose_byte_count_overflows_is_refused_naming_size_and_device(device, dtype, size):
    with pytest.raises(SvodError, match=f"{size} x {dtype.name} on {device.name}") as info:
        svod.Buffer(device, dtype, size)
    assert info.value.stage == "buffer" and info.value.value == size


@pytest.mark.parametrize(("dtype", "size"), [(dtypes.uint8, (1 << 63) - 1), (dtypes.float32, 1 << 60)])
def test_a_size_no_memory_holds_fails_at_allocation_naming_size_and_device(device, dtype, size):
    buf = svod.Buffer(device, dtype, size)
    with pytest.raises(SvodError, match=f"{size} x {dtype.name} on {device.name}.*{size * dtype.itemsize}") as info:
        _ = buf.handle
    assert info.value.stage == "buffer" and info.value.value == size * dtype.itemsize


@pytest.mark.parametrize("size", [-1, 2.5, 8.0, True, np.bool_(True), "8", None, np.float64(8)])
def test_a_size_that_is_not_a_non_negative_integer_is_refused(size):
    with pytest.raises(SvodError, match="on CPU must be a non-negative integer") as info:
        svod.Buffer("CPU", dtypes.int32, size)
    assert info.value.stage == "buffer" and info.value.value is size


def test_a_numpy_integer_is_a_size():
    buf = svod.Buffer("CPU", dtypes.int32, np.int64(8))
    assert buf.size == 8 and type(buf.size) is int and buf.numpy().shape == (8,)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


IN_PLACE_ARRAYS = {  # (array, written), and whether a kernel may use it where it is
    "contiguous": (np.arange(8.0), True, True),
    "strided": (np.arange(16.0)[::2], False, False),
    "transposed": (np.arange(8.0).reshape(2, 4).T, False, False),
    "offset": (np.arange(9.0)[1:], True, True),
    "misaligned": (np.zeros(8 * 8 + 1, np.uint8)[1:].view(np.float64), False, False),
    "read-only, read": (_frozen(np.arange(8.0)), False, True),
    "read-only, written": (_frozen(np.arange(8.0)), True, False),
}


@pytest.mark.parametrize("name", list(IN_PLACE_ARRAYS))
def test_arrays_used_in_place_are_checked_as_numpy_says(name):
    array, written, usable = IN_PLACE_ARRAYS[name]
    in_place = buffer_module.InPlace.of([(1, 8, array.size, written)])
    want = [array.__array_interface__["data"][0]] if usable else None
    assert in_place.addresses(["other", array]) == want
    assert (buffer_module.shared_address(array, 8, written) is not None) == usable


def test_arrays_used_in_place_share_memory_only_where_neither_is_written():
    both = np.arange(12.0)
    reads = buffer_module.InPlace.of([(0, 8, 8, False), (1, 8, 8, False)])
    assert reads.addresses([both[:8], both[4:]]) is not None
    writes = buffer_module.InPlace.of([(0, 8, 8, True), (1, 8, 8, False)])
    assert writes.addresses([both[:8], both[4:]]) is None
    assert writes.addresses([both[:8], np.arange(8.0)]) is not None
    assert writes.addresses([both[4:], both[:4].repeat(2)]) is not None  # apart
    empty = buffer_module.InPlace.of([(0, 8, 0, True), (1, 8, 0, False)])
    assert empty.addresses([both[:0], both[:0]]) is not None  # an empty array meets nothing
