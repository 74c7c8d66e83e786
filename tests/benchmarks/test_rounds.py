"""Contestants timed turn about, and the kernel suite's figures from their samples."""

import pytest

from benchmarks.results import report, to_json
from benchmarks.rounds import contestant_order, suite_metrics


def test_each_contestant_of_a_kernel_goes_first_once_in_as_many_turns_as_there_are_contestants():
    names = ["svod", "svod static", "numpy", "numba"]
    orders = [contestant_order(names, turn) for turn in range(7)]
    assert all(sorted(order) == sorted(names) for order in orders)
    assert [order[0] for order in orders[:4]] == names
    assert orders[4] == orders[0] and orders[1] == ["svod static", "numpy", "numba", "svod"]


def test_suite_figures_are_the_medians_of_their_samples_in_milliseconds():
    samples = {"svod": [[0.001, 0.003, 0.002], [0.010]], "numpy": [[0.004], [0.005]], "numba": [[], []],
               "tinygrad": [[0.008, 0.008], []]}
    why = [{"numba": "not installed"}, {"numba": "not installed", "tinygrad": "no spelling"}]
    softmax, matmul = suite_metrics(["softmax", "matmul1024"], samples, why)
    assert (softmax.name, softmax.unit, softmax.better) == ("kernel.softmax_ms", "ms", "lower")
    assert (softmax.svod, softmax.numpy, softmax.numba, softmax.tinygrad) == pytest.approx((2.0, 4.0, None, 8.0))
    assert softmax.ratio(softmax.numpy) == pytest.approx(2.0) and softmax.ratio(softmax.tinygrad) == pytest.approx(4)
    assert matmul.ratio(matmul.numpy) == pytest.approx(0.5) and matmul.tinygrad is None
    text = report([softmax, matmul], None)
    assert "2.00x" in text and "4.00x" in text and "0.50x" in text
    assert "numba: not installed (kernel.softmax_ms, kernel.matmul1024_ms)" in text
    assert "tinygrad: no spelling (kernel.matmul1024_ms)" in text


def test_svod_static_stands_beside_the_default_decorator_in_the_suite():
    """The suite's svod column is the decorator's default (sizes variables); ``svod static`` is another
    contestant, with its own ratio."""
    samples = {"svod": [[0.002]], "svod static": [[0.001]], "numpy": [[0.004]], "numba": [[]], "tinygrad": [[]]}
    (softmax,) = suite_metrics(["softmax"], samples, [{}])
    assert softmax.svod == pytest.approx(2.0) and softmax.others == {"svod static": pytest.approx(1.0)}
    text = report([softmax], None)
    assert "svod static" in text and "0.50x" in text
    assert to_json([softmax])["metrics"]["kernel.softmax_ms"]["others"] == {"svod static": pytest.approx(1.0)}
