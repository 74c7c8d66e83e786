"""The layer norm, perceptron and cloth of ``svod bench``'s gradients (``benchmarks.gradient_programs``) agree
with central finite differences in float64, and in float32 with their float64 gradients; the first calls and the
Jacobi tape's saved states (``benchmarks.gradient_costs``) are reported, and ``svod bench --suite gradients``
runs the step alone. No test passes or fails on how fast anything ran."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import benchmarks.gradient_costs
from benchmarks import gradients
from benchmarks.gradient_costs import first_call_metrics, jacobi_saved_states
from benchmarks.gradient_programs import MoreSizes, cloth_program, cloth_springs, more_programs
from benchmarks.gradients import gradient_metrics
from svod.cli import main
from svod.errors import SvodError
from tests.benchmarks.test_gradients import finite_differences

SMALL: list[tuple[MoreSizes, tuple[int, int, int, int]]] = [
    ((1, 1, 1, 1, 1), (1, 1, 1, 1)), ((3, 5, 2, 2, 3), (5, 4, 3, 2)), ((7, 2, 5, 3, 7), (3, 7, 2, 5))]
"""Sizes (and the perceptron's widths) a test differentiates every element of: ones, primes; the one-particle
cloth has no springs."""
NAMES = ("layernorm", "mlp", "cloth")


@pytest.mark.parametrize("sizes", SMALL, ids=["ones", "small", "primes"])
@pytest.mark.parametrize("which", range(len(NAMES)), ids=NAMES)
def test_each_gradient_agrees_with_central_differences(sizes, which):
    program = more_programs(sizes[0], np.float64, sizes[1])[which]
    before = {name: value.copy() for name, value in program.arrays.items()}
    found = program.gradient(program.arrays)
    assert len(found) == len(program.wrt)
    for name, gradient in zip(program.wrt, found, strict=True):
        expected = finite_differences(program, name)
        assert gradient.shape == expected.shape and gradient.dtype == np.float64
        scale = float(np.abs(expected).max(initial=0.0))
        np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-4 * max(scale, 1e-8), err_msg=name)
    for name, value in before.items():
        np.testing.assert_array_equal(program.arrays[name], value)


@pytest.mark.parametrize("which", range(2), ids=NAMES[:2])
def test_the_float32_programs_give_their_float64_gradients_in_float32(which):
    sizes, widths = (9, 13, 6, 1, 1), (11, 8, 6, 3)
    single, double = more_programs(sizes, np.float32, widths)[which], more_programs(sizes, np.float64, widths)[which]
    for got, want in zip(single.gradient(single.arrays), double.gradient(double.arrays), strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4 * float(np.abs(want).max()))


def test_the_cloths_springs_join_neighbours_and_diagonals():
    assert cloth_springs(1).shape == (0, 2)
    assert sorted(map(tuple, cloth_springs(2))) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert cloth_springs(5).shape == (20 + 20 + 16 + 16, 2)  # across, down, and each square's two diagonals
    program = cloth_program(3, 0, np.random.default_rng(0))
    np.testing.assert_array_equal(program.forward(program.arrays), program.arrays["x0"])  # no steps: no motion


def test_the_jacobi_tape_keeps_at_most_twice_the_root_of_its_steps():
    for side, steps in ((3, 1), (6, 50), (17, 64)):
        metric = jacobi_saved_states(side, steps)
        assert metric.svod <= 2 * math.sqrt(steps), (side, steps)
        assert metric.svod > 0 or steps == 1  # one step overwrites nothing a later one reads


def test_the_first_calls_run_each_in_a_fresh_process():
    forward_ms, ratio = first_call_metrics(["softmax"])
    assert (forward_ms.name, ratio.name) == ("grad.softmax.first_call_ms", "grad.softmax.first_call_ratio")
    assert forward_ms.svod > 0 and ratio.svod > 0
    with pytest.raises(SvodError, match="the first forward of no_such_program failed"):
        first_call_metrics(["no_such_program"])


def test_suite_gradients_runs_the_gradients_step_alone(tmp_path, monkeypatch, capsys):
    """``--suite gradients`` on two of the programs at small sizes, once each: each one's figures and the Jacobi
    tape's, no other step's (the peers, and the first calls, each two fresh processes, tested apart)."""
    small = [program for program in benchmarks.gradient_costs.all_programs((3, 3, 5, 2, 4), (2, 3, 3, 2, 3))
             if program.name in ("softmax", "cloth")]
    monkeypatch.setattr(benchmarks.gradient_costs, "all_programs", lambda *sizes: small)
    monkeypatch.setattr(benchmarks.gradient_costs, "first_call_metrics", lambda names: [])
    monkeypatch.setattr(benchmarks.gradient_costs, "jacobi_saved_states", lambda side: jacobi_saved_states(4, 9))
    monkeypatch.setattr(benchmarks.gradient_costs, "MOST_REPEATS", 1)
    for peer in ("_torch", "_jax", "_warp"):
        monkeypatch.setattr(gradients, peer, lambda: None)
    path = tmp_path / "out.json"
    assert main(["bench", "--quick", "--suite", "gradients", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert set(document["metrics"]) == {*(f"grad.{name}{suffix}" for name in ("softmax", "cloth")
                                          for suffix in ("_ms", ".forward_ms", ".ratio")), "grad.jacobi.saved_states"}
    assert all(metric["svod"] > 0 for metric in document["metrics"].values())
    assert "--suite gradients" in capsys.readouterr().out


def test_a_float32_gradient_off_by_a_share_of_its_norm_is_not_timed():
    """A float32 program's peers agree with svod's gradient in the 2-norm, not element by element (a ReLU
    input within rounding of 0 flips one sample's share), and one off by 0.2% of its norm is still refused."""
    pytest.importorskip("torch")
    program = more_programs((3, 5, 2, 2, 3), np.float32, (5, 4, 3, 2))[0]
    off = dataclasses.replace(program, gradient=lambda arrays: tuple(g * 1.002 for g in program.gradient(arrays)))
    assert gradient_metrics([program], repeats=1)
    with pytest.raises(RuntimeError, match="layernorm by x differs from"):
        gradient_metrics([off], repeats=1)
