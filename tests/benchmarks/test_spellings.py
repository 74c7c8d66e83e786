"""The spellings ``svod bench`` times (``benchmarks.spellings``): the suite's row kernels in their ``@svod.kernel``
form, as NumPy inside ``@svod.jit`` and as numba writes them (run by svod) compute numpy's answer, at the suite's
widths and at edge numbers of rows, on rows holding NaN and infinities, on every device; each row names the
fastest peer. The bench's spellings step is in the tiny whole bench (``test_harness.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import svod
from benchmarks.busy import fastest_peer
from benchmarks.spellings import (
    ARRAY_FORMS,
    Peers,
    numba_form,
    numba_text,
    peer_runners,
    row_spellings,
    spelling_metrics,
    transpose_spellings,
)
from benchmarks.suite import row_kernels
from svod.device import Device
from svod.errors import GraphError, SvodError
from svod.workloads import Workload, check, layernorm, mlp, softmax


@pytest.mark.parametrize("rows", [1, 7])
def test_both_forms_of_each_row_kernel_agree_with_numpy(device: Device, rows: int) -> None:
    """The jit form on every device; the suite's kernel form (its sizes variables, which a WebGPU launch cannot
    spread over its work groups) on the CPU, where the bench times it. One row (every thread but one idle) and
    a prime number of rows (which no thread count or vector width divides); the rows of NaN below are five,
    the tiny whole bench's three."""
    spelled = row_spellings(row_kernels(quick=True, rows=rows))
    assert set(spelled) == set(ARRAY_FORMS) == {"softmax", "layernorm", "mlp"}
    for form in spelled.values():
        form.check_jit(device)
        if device.name == "CPU":
            check(form.workload, device)


def test_the_jit_forms_agree_with_numpy_on_rows_of_nan_and_infinities(device: Device) -> None:
    spelled = row_spellings(row_kernels(quick=True, rows=5))
    for name in ("softmax", "layernorm"):
        x = spelled[name].workload.inputs[0]
        x[1, 17], x[2, 0], x[3, -1], x[4] = np.nan, np.inf, -np.inf, -0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            want = spelled[name].workload.numpy()
        got = spelled[name].run_jit(device)()
        assert np.isnan(want[1]).all()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # NaN where numpy's are



@pytest.mark.parametrize("rows", [1, 7])
def test_numbas_spelling_run_by_svod_agrees_with_numpy(device: Device, rows: int) -> None:
    """numba's own text of each row kernel (``benchmarks/numba_kernels.py``) under ``@svod.jit`` writes numpy's
    answer (``numba_form`` compares it, raising where it differs); the output it writes starts as zeros, so a
    form that wrote nothing fails. Widths no vector divides, small enough for the PYTHON device."""
    for workload in (softmax(rows, 37), layernorm(rows, 37), mlp(rows, (37, 19, 11, 3))):
        numba_form(workload, device)()


def test_a_spelling_svod_refuses_has_the_refusal_as_the_reason_for_its_missing_figure() -> None:
    """WebGPU stops a work item's loops after 65535 turns; numba's mlp loops over every weight in one."""
    refused = GraphError("a work item's loops come round too often", stage="render")
    metrics = spelling_metrics("mlp", {"kernel": 3.0, "numba": None}, {"numpy": 2.0}, {}, {"kernel": "k", "numba": "n"},
                               refused={"numba": str(refused)})
    assert metrics[1].svod is None and metrics[1].why_missing == {"svod": str(refused)}
    assert metrics[0].why_missing == {} and metrics[0].svod == 3.0


@pytest.mark.parametrize("side", [1, 13])
def test_numbas_transpose_run_by_svod_is_numpys_exactly(device: Device, side: int) -> None:
    workload = transpose_spellings(side)["by_input"]
    numba_form(workload, device)
    out = np.zeros_like(workload.output)
    numba_text()["transpose"](out, *workload.inputs, device=device)
    np.testing.assert_array_equal(out, workload.inputs[0].T)


def test_a_numba_form_that_differs_from_numpy_is_an_error() -> None:
    workload = row_kernels(quick=True, rows=2)["softmax"]
    wrong = dataclasses.replace(workload, numpy=lambda: workload.numpy() + 1.0)
    with pytest.raises(SvodError, match="numba's softmax"):
        numba_form(wrong, svod.get_device("CPU"))


def test_each_form_names_the_fastest_peer_and_every_peers_figure() -> None:
    metrics = spelling_metrics("mlp", {"kernel": 3.0, "numba": 2.5}, {"numpy": 2.0, "torch": 1.5, "jax": 4.0},
                               {"tinygrad": "no spelling"}, {"kernel": "k", "numba": "n"})
    assert [m.name for m in metrics] == ["spelling.mlp.kernel_ms", "spelling.mlp.numba_ms"]
    kernel = metrics[0]
    assert (kernel.svod, kernel.numpy, kernel.numba, kernel.tinygrad) == (3.0, 2.0, None, None)
    assert kernel.others == {"torch": 1.5, "jax": 4.0, "best peer (torch)": 1.5}
    assert kernel.ratio(kernel.others["best peer (torch)"]) == pytest.approx(0.5)
    assert kernel.why_missing == {"tinygrad": "no spelling"} and kernel.note == "k"
    assert fastest_peer(kernel) == ("torch", 1.5)  # the repeated figure is not a peer of its own
    alone = spelling_metrics("softmax", {"jit": 1.0}, {}, {}, {"jit": "j"})[0]
    assert alone.others == {} and fastest_peer(alone) is None


class _Installed:
    """A peer that runs every workload with a runner that records its calls."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names, self.calls, self.error = names, [], None

    def runner(self, workload: Workload) -> object:
        return lambda: self.calls.append(workload.name)

    def runners(self, workload: Workload) -> dict[str, object]:
        return {name: self.runner(workload) for name in self.names}


class _Missing:
    error = "not installed"

    def runner(self, workload: Workload) -> None:
        return None


def test_peer_runners_gives_each_installed_peers_runner_and_why_the_others_have_none() -> None:
    frameworks, languages = _Installed(("torch", "jax")), _Installed(("warp",))
    languages.runners = lambda workload: {"warp": "differs from numpy by 1", "taichi": "not installed"}
    workload = row_kernels(quick=True, rows=2)["softmax"]
    runners, why = peer_runners(workload, Peers(_Missing(), frameworks, languages, _Missing()))  # type: ignore[arg-type]
    assert set(runners) == {"torch", "jax"}
    assert why == {"warp": "differs from numpy by 1", "taichi": "not installed", "numba": "not installed",
                   "tinygrad": "not installed"}
    runners["jax"]()
    assert frameworks.calls == [workload.name]
    numba = _Installed(())
    runners, why = peer_runners(workload, Peers(numba, frameworks, languages, _Missing()))  # type: ignore[arg-type]
    assert "numba" in runners and "numba" not in why
