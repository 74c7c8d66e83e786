"""The UOps of a draw (``svod.frontend.draws``) on every device, against Python's exact integers and the plain-
Python reference (``svod.random.philox``), which shares no code with them."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import dtypes
from svod.frontend.draws import Place, draw, mul_hi_lo, philox
from svod.ir import UOp
from svod.random.philox import PlainRandom, bounded, box_muller, exponential, philox4x32, sort_key, uniforms
from tests.random.test_philox import KNOWN_ANSWERS

EDGES = [(0, 0), (0, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 1), (1, 0xFFFFFFFF), (0x10000, 0x10000),
         (0xFFFF, 0xFFFF), (0x8000_0000, 2), (0xD2511F53, 0xCD9E8D57), (0x1_0001, 0xFFFF_0001)]


def _widths(device):
    """The ways a device multiplies words: through uint64 where it has 64-bit integers, in 16-bit halves
    everywhere."""
    return [False, True] if dtypes.uint64 in device.caps.element_dtypes else [False]


def test_mul_hi_lo_is_the_exact_product_on_every_device(device):
    rng = np.random.default_rng(4)
    pairs = np.array([*EDGES, *rng.integers(0, 1 << 32, (500, 2), dtype=np.uint64).tolist()], np.uint64)
    a, b = pairs[:, 0].astype(np.uint32), pairs[:, 1].astype(np.uint32)
    exact = [int(x) * int(y) for x, y in zip(a, b, strict=True)]
    for wide in _widths(device):
        k = svod.KernelBuilder(f"mul_hi_lo_{wide}")
        high, low, x, y = (k.buffer(dtypes.uint32, len(a)) for _ in range(4))
        i = k.range(len(a))
        h, lo = mul_hi_lo(x[i], y[i], wide)
        k.store(high[i], h)
        k.store(low[i], lo)
        got_high, got_low = np.zeros_like(a), np.zeros_like(a)
        svod.run(k.build(), [got_high, got_low, a, b], device=device)
        assert got_high.tolist() == [p >> 32 for p in exact], f"wide={wide}"
        assert got_low.tolist() == [p & 0xFFFFFFFF for p in exact], f"wide={wide}"


def test_philox_gives_random123s_known_answers_on_every_device(device):
    counters = np.array([c for c, _, _ in KNOWN_ANSWERS], np.uint32)
    keys = np.array([k for _, k, _ in KNOWN_ANSWERS], np.uint32)
    for wide in _widths(device):
        k = svod.KernelBuilder(f"philox_{wide}")
        out, counter, key = (k.buffer(dtypes.uint32, (3, n)) for n in (4, 4, 2))
        i = k.range(3)
        words = philox([counter[i, c] for c in range(4)], [key[i, c] for c in range(2)], wide)
        for c, w in enumerate(words):
            k.store(out[i, c], w)
        got = np.zeros((3, 4), np.uint32)
        svod.run(k.build(), [got, counters, keys], device=device)
        assert [tuple(row) for row in got.tolist()] == [w for _, _, w in KNOWN_ANSWERS], f"wide={wide}"


def _expected(name: str, words: tuple[np.ndarray, ...], double: bool, args: tuple[float, ...]) -> np.ndarray:
    """What the plain-Python reference makes of each block of ``words``."""
    real = np.float64 if double else np.float32
    values = []
    for block in zip(*(w.tolist() for w in words), strict=True):
        u = uniforms(block, double)
        if name == "random":
            values.append(u[0])
        elif name == "normal":
            values.append(real(real(args[0]) + real(args[1]) * box_muller(*u)))
        elif name == "exponential":
            values.append(real(real(args[0]) * exponential(u[0])))
        else:
            values.append(int(args[0]) + bounded(block, int(args[1]) - int(args[0])))
    return np.array(values)


@pytest.mark.parametrize(("name", "args"), [("random", ()), ("normal", (1.5, 2.0)), ("exponential", (0.5,)),
                                            ("randint", (-5, 1000))])
def test_a_draw_is_the_references_value_of_its_block_on_every_device(device, name, args):
    """The block of each place (key, launch, ordinal, element, stream), made into a value, bit for bit on every
    device that rounds as IEEE 754 does (the log and cosine are written out in ``+ - * /``); on WebGPU, whose
    float arithmetic WGSL lets the compiler approximate, integers and uniforms bit for bit, the rest close."""
    double = dtypes.float64 in device.caps.element_dtypes
    wide = dtypes.int64 in device.caps.element_dtypes
    real, integer = (dtypes.float64 if double else dtypes.float32), (dtypes.int64 if wide else dtypes.int32)
    n = 400
    k = svod.KernelBuilder(f"draw_{name}")
    result = integer if name == "randint" else real
    out = k.buffer(result, n)
    i = k.range(n)
    key, launch = UOp.const(dtypes.uint32, 0xDEADBEEF), UOp.const(dtypes.uint32, 17)
    place = Place(key, launch, (i % 3).cast(dtypes.uint32), i * 1000003, UOp.const(dtypes.uint32, 5))
    arguments = [UOp.const(result, a) for a in args]
    k.store(out[i], draw(name, place, arguments, real, integer, wide))
    got = np.zeros(n, result.numpy)
    svod.run(k.build(), [got], device=device)
    element = np.arange(n, dtype=np.uint64) * 1000003
    words = philox4x32((np.arange(n, dtype=np.uint64) % 3, element & 0xFFFFFFFF, element >> 32,
                        np.full(n, 5, np.uint64)), (0xDEADBEEF, 17))
    expected = _expected(name, words, double, args).astype(result.numpy)
    if name in ("random", "randint") or device.caps.ieee_floats:
        assert got.tolist() == expected.tolist()
    else:  # within WGSL's arithmetic: a few units of the float's precision, on the scale of the values
        tolerance = 1e-5 if result == dtypes.float32 else 1e-13
        assert (np.abs(got - expected) <= tolerance * (1 + np.abs(expected))).all()


def test_a_sort_key_is_the_references_on_every_device(device):
    """A permutation's key (``svod.random.philox.sort_key``): w0 above w1 where the device has 64-bit integers,
    w0 where it has not."""
    wide = dtypes.int64 in device.caps.element_dtypes
    n = 300
    k = svod.KernelBuilder("sort_keys")
    out = k.buffer(dtypes.uint64 if wide else dtypes.uint32, n)
    i = k.range(n)
    place = Place(UOp.const(dtypes.uint32, 77), UOp.const(dtypes.uint32, 3), UOp.const(dtypes.uint32, 0), i,
                  UOp.const(dtypes.uint32, 2))
    k.store(out[i], draw("keys", place, [], dtypes.float32, dtypes.int32, wide))
    got = np.zeros(n, np.uint64 if wide else np.uint32)
    svod.run(k.build(), [got], device=device)
    words = philox4x32((0, np.arange(n, dtype=np.uint64), 0, 2), (77, 3))
    assert got.tolist() == sort_key(words[0], words[1], wide).tolist()


def test_plain_random_and_a_place_agree_on_a_draws_block():
    """``PlainRandom``'s first draw in work item 4 of the launch's first nest is the block of place (key,
    launch, ordinal 0, element 4, stream 1)."""
    generator = PlainRandom(3, 9)
    drawn = [generator.random() for i in generator.prange(6) if i == 4]
    words = philox4x32((0, 4, 0, 1), (3, 9))
    assert drawn == [uniforms(words, True)[0]]
