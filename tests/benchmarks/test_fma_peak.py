"""The FMA peak's loop: compiled for this host, it really computes its chains of multiply-adds."""

from __future__ import annotations

import ctypes
import platform

import llvmlite.binding as llvm
import numpy as np
import pytest

from benchmarks.fma_peak import CHAINS, _compiled, _ir, fma_peak_gflops, vector_bits
from svod.backends.cpu_host import host_target_machine


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


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_the_loop_keeps_its_chains_in_vector_registers():
    """No accumulator is moved to the stack and back each turn: a spilled loop measures the spills (half the
    peak on AVX2 with 16 chains)."""
    assembly = host_target_machine(2).emit_assembly(llvm.parse_assembly(_ir("float", vector_bits() // 32)))
    loop = assembly.split(".LBB0_1:", 1)[1].split("\tj", 1)[0]
    assert loop.count("vfmadd") == CHAINS and "rsp" not in loop, loop
