"""The BLAS anchor's parts: the OpenBLAS core numpy picks, the one of this host's widest vectors, numpy's
matmul in a process of its own with a core forced, torch's matmul."""

from __future__ import annotations

import importlib.util

import llvmlite.binding as llvm

from benchmarks.blas_anchor import openblas_core, openblas_gflops, torch_gflops, widest_core


def test_the_widest_core_follows_the_hosts_vectors():
    features = llvm.get_host_cpu_features()
    assert widest_core() == ("SkylakeX" if features.get("avx512f") else "Haswell" if features.get("avx2") else None)


def test_numpys_openblas_names_its_core_and_runs_with_one_forced():
    core = openblas_core()
    assert core is None or core.isidentifier()
    assert openblas_gflops(64, "float64", 1, widest_core(), repeats=2) > 0


def test_torch_gives_a_rate_or_says_why_not():
    got = torch_gflops(32, "float32", 1, repeats=2)
    if importlib.util.find_spec("torch") is None:
        assert isinstance(got, str) and "not installed" in got
    else:
        assert isinstance(got, float) and got > 0
