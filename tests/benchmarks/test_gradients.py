"""The differentiated programs of ``svod bench`` (``benchmarks.gradients``): each gradient agrees with central
finite differences in float64, and the step reports its figures with each peer's (torch, JAX, Warp) beside them,
or says why not. No test passes or fails on how fast anything ran."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import gradients
from benchmarks.gradients import GradientProgram, Sizes, gradient_metrics, programs

SMALL: list[Sizes] = [(1, 2, 1, 1, 2), (7, 5, 11, 3, 5), (13, 3, 2, 7, 3)]
"""Sizes a test differentiates every element of: ones, primes."""
NAMES = ("black_scholes", "nbody_energy", "logistic_regression", "softmax", "jacobi")


def objective(program: GradientProgram, arrays: dict[str, np.ndarray]) -> float:
    """The scalar the program's gradient is of: its output weighed by its cotangent."""
    return float(np.sum(program.forward(arrays) * program.cotangent))


def finite_differences(program: GradientProgram, name: str) -> np.ndarray:
    """The central difference of ``objective`` by each element of the input ``name``."""
    estimate = np.zeros_like(program.arrays[name])
    for index in np.ndindex(estimate.shape):
        step = 1e-6 * max(1.0, abs(float(program.arrays[name][index])))
        shifted = []
        for sign in (1.0, -1.0):
            arrays = {key: value.copy() for key, value in program.arrays.items()}
            arrays[name][index] += sign * step
            shifted.append(objective(program, arrays))
        estimate[index] = (shifted[0] - shifted[1]) / (2 * step)
    return estimate


@pytest.mark.parametrize("sizes", SMALL)
@pytest.mark.parametrize("which", range(len(NAMES)), ids=NAMES)
def test_each_gradient_agrees_with_central_differences(sizes: Sizes, which: int) -> None:
    program = programs(sizes)[which]
    before = {name: value.copy() for name, value in program.arrays.items()}
    found = program.gradient(program.arrays)
    assert len(found) == len(program.wrt)
    for name, gradient in zip(program.wrt, found, strict=True):
        expected = finite_differences(program, name)
        assert gradient.shape == expected.shape
        scale = float(np.abs(expected).max(initial=0.0))
        np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-4 * max(scale, 1e-8), err_msg=name)
    for name, value in before.items():
        np.testing.assert_array_equal(program.arrays[name], value)  # the gradient leaves its inputs as they were


def test_a_wrong_gradient_is_caught() -> None:
    program = programs(SMALL[1])[0]
    spot = program.wrt.index("spot")
    wrong = program.gradient(program.arrays)[spot] * (1 + 1e-3)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(wrong, finite_differences(program, "spot"), rtol=1e-4)


def test_the_step_reports_each_program_beside_each_installed_peer():
    pytest.importorskip("torch", reason="torch is a gradient peer of the bench extra, not installed here")
    installed, _ = gradients.peers()
    metrics = {m.name: m for m in gradient_metrics(programs(SMALL[1]), repeats=1)}
    expected = {f"grad.{name}{suffix}" for name in NAMES for suffix in ("_ms", ".forward_ms", ".ratio")}
    assert set(metrics) == expected
    for name in NAMES:
        gradient, forward, ratio = (metrics[f"grad.{name}{s}"] for s in ("_ms", ".forward_ms", ".ratio"))
        assert gradient.svod is not None and forward.svod is not None and forward.svod > 0
        assert ratio.svod == pytest.approx(gradient.svod / forward.svod)
        assert set(gradient.others) == set(installed) >= {"torch"}, name
        assert gradient.why_missing == dict.fromkeys(sorted({"torch", "jax", "warp"} - set(installed)), "not installed")
        for peer in installed:
            assert ratio.others[peer] == pytest.approx(gradient.others[peer] / forward.others[peer])


def test_without_the_peers_the_step_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("_torch", "_jax", "_warp"):
        monkeypatch.setattr(gradients, module, lambda: None)
    metrics = gradient_metrics(programs(SMALL[0])[:1], repeats=1)
    assert [m.name for m in metrics] == ["grad.black_scholes_ms", "grad.black_scholes.forward_ms",
                                         "grad.black_scholes.ratio"]
    assert all(m.others == {} and m.why_missing == dict.fromkeys(("torch", "jax", "warp"), "not installed")
               for m in metrics)


def test_a_peer_that_cannot_run_a_program_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(module: object, program: GradientProgram) -> gradients.Runners:
        raise ValueError(f"no {program.name} here")

    monkeypatch.setattr(gradients, "_torch", lambda: None)
    monkeypatch.setattr(gradients, "_warp", lambda: None)
    monkeypatch.setattr(gradients, "_jax", lambda: "jax")
    monkeypatch.setattr(gradients, "jax_runners", refused)
    (metric, *_) = gradient_metrics(programs(SMALL[0])[3:], repeats=1)
    assert metric.others == {} and metric.why_missing["jax"] == "ValueError: no softmax here"


def test_a_gradient_that_differs_from_torchs_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="torch is a gradient peer of the bench extra, not installed here")
    program = programs(SMALL[1])[3]
    halved = GradientProgram(program.name, program.note, program.arrays, program.wrt, program.cotangent,
                             program.forward, lambda arrays: tuple(g / 2 for g in program.gradient(arrays)),
                             program.torch, program.jax)
    with pytest.raises(RuntimeError, match="softmax by scores differs from torch's"):
        gradient_metrics([halved], repeats=1)
