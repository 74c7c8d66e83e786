"""The benchmark's peers compute what svod's kernels compute (they are checked again when a bench runs)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from benchmarks import peers
from benchmarks.peers import NOT_INSTALLED, KernelLanguages, Tinygrad
from benchmarks.suite import TINYGRAD, suite
from svod import workloads
from tests.kernels import SMALL_WORKLOADS

SMALL = {name: SMALL_WORKLOADS[name] for name in TINYGRAD}
"""Each suite kernel at a small size."""


def test_every_suite_kernel_has_a_spelling_for_each_peer():
    assert {workload.family for workload in suite(quick=True)} == set(SMALL) == set(TINYGRAD)
    assert workloads.matmul(3).family == workloads.matmul(3, dtype=np.float64, name="matmul_f64").family == "matmul"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_numba_spellings_match_numpy(name):
    pytest.importorskip("numba", reason="numba is a benchmark peer (extra bench), not installed")
    from benchmarks import numba_kernels

    workload = SMALL[name]()
    output = np.zeros_like(workload.output)
    getattr(numba_kernels, name)(output, *workload.inputs)
    ok, error = workloads.compare(workload, output)
    assert ok, f"numba's {name} is off numpy's by {error}"


@pytest.mark.parametrize("name", sorted(name for name, spelling in TINYGRAD.items() if not isinstance(spelling, str)))
def test_tinygrad_spellings_match_numpy(name):
    pytest.importorskip("tinygrad", reason="tinygrad is a benchmark peer (extra bench), not installed")
    tinygrad = Tinygrad()
    if tinygrad.error:
        pytest.skip(f"tinygrad is installed but cannot run here: {tinygrad.error}")
    workload, spelling = SMALL[name](), TINYGRAD[name]
    assert callable(spelling)
    result = spelling(*(tinygrad.tensor(array) for array in workload.inputs)).numpy()
    ok, error = workloads.compare(workload, result)
    assert ok, f"tinygrad's {name} is off numpy's by {error}"
    tinygrad.suite_runner(workload, spelling)()  # the TinyJit the bench times: checked too, then replayed


@pytest.mark.parametrize("language", KernelLanguages.NAMES)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_warp_and_taichi_spellings_match_numpy_or_say_why_not(language, name):
    pytest.importorskip({"warp": "warp", "taichi": "taichi"}[language],
                        reason=f"{language} is a benchmark peer (extra bench), not installed")
    workload = SMALL[name]()
    languages = KernelLanguages()
    found, module = languages.runners(workload)[language], languages.modules[language]
    if name in getattr(module, "MISSING", {}):
        assert found == module.MISSING[name]
        return
    assert callable(found), found
    output = np.zeros_like(workload.output)
    module.launcher(name, output, workload.inputs)()
    ok, error = workloads.compare(workload, output)
    assert ok, f"{language}'s {name} is off numpy's by {error}"


def test_a_kernel_language_that_is_not_installed_says_so(monkeypatch):
    monkeypatch.setattr(KernelLanguages, "MODULES", {"warp": "benchmarks.no_such_module"})
    assert KernelLanguages().runners(SMALL["softmax"]()) == {"warp": NOT_INSTALLED}


class _StandIn:
    """A kernel language whose every call takes twice what the bench times on ``clock``, or gives 7s."""

    MISSING: ClassVar[dict[str, str]] = {"cumsum": "cannot spell a cumsum"}

    def __init__(self, clock: list[float], wrong: bool = False) -> None:
        self.clock, self.wrong = clock, wrong

    def launcher(self, family, output, inputs):
        def run():
            output[...] = 7 if self.wrong else SMALL[family]().numpy()
            self.clock[0] += 2 * peers.SLOWEST_CALL_SECONDS
        return run


def test_a_kernel_language_too_slow_or_wrong_or_unable_says_why(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(peers.time, "perf_counter", lambda: clock[0])
    slow, wrong = _StandIn(clock), _StandIn(clock, wrong=True)
    assert KernelLanguages._runner(slow, SMALL["softmax"]()) == "not timed: one call took 2.0 s"
    assert KernelLanguages._runner(wrong, SMALL["softmax"]()).startswith("differs from numpy by")
    assert KernelLanguages._runner(slow, SMALL["cumsum"]()) == "cannot spell a cumsum"


def test_taichi_leaves_this_process_computing_subnormals():
    """Loading Taichi sets flush-to-zero (its runtime is built for fast math); the bench's process keeps its own
    floating-point environment, or numpy and every svod kernel after it would compute subnormals as 0."""
    pytest.importorskip("taichi", reason="taichi is a benchmark peer (extra bench), not installed")
    from benchmarks import taichi_kernels  # noqa: F401 -- imported for what loading it does

    tiny = np.array([1e-40], np.float32)
    assert (tiny * np.float32(1.0))[0] == np.float32(1e-40)
