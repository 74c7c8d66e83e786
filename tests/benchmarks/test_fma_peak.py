"""The FMA peak's loop: compiled for this host, it really computes its chains of multiply-adds."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from benchmarks.fma_peak import CHAINS, _compiled, fma_peak_gflops, vector_bits


@pytest.mark.parametrize(("dtype", "element"), [(np.float32, "float"), (np.float64, "double")])
def test_the_loop_computes_its_chains(dtype, element):
    """Each chain runs a -> a / 2 + 1/4 from 1 (0.5 + 2^-(t+1) after t turns); the loop stores their sum."""
    lanes = vector_bits() // (8 * np.dtype(dtype).itemsize)
    _, address = _compiled(element, lanes)
    loop = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(address)
    for turns, chain in [(1, 0.75), (3, 0.5625), (200, 0.5)]:
        out = np.zeros(lanes + 1, dtype)
        loop(turns, out[1:].ctypes.data)  # an address that no vector alignment divides
        np.testing.assert_array_equal(out, [0.0] + [CHAINS * chain] * lanes)


def test_the_peak_is_a_positive_rate_for_each_dtype():
    assert fma_peak_gflops("float32", 1, tries=1) > 0 and fma_peak_gflops("float64", 2, tries=1) > 0
