"""The benchmark's kernel suite computes what numpy computes, at small and odd sizes, on every device."""

from __future__ import annotations

import numpy as np
import pytest

from svod.cli import suite

SMALL = {
    "softmax": lambda: suite.softmax(5, 7), "layernorm": lambda: suite.layernorm(3, 33),
    "conv2d": lambda: suite.conv2d(2, 5), "gather": lambda: suite.gather(9, 11),
    "histogram": lambda: suite.histogram(100, 7), "cumsum": lambda: suite.cumsum(3, 17),
    "transpose": lambda: suite.transpose(13), "matmul": lambda: suite.matmul(17),
    "attention": lambda: suite.attention(13, 5),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_suite_kernels_match_numpy(device, name):
    suite.check(SMALL[name](), device)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_numba_spellings_match_numpy(name):
    """The benchmark's numba peers compute the same thing (they are checked again when the benchmark runs)."""
    pytest.importorskip("numba", reason="numba is a benchmark peer (extra bench), not installed")
    from svod.cli import suite_numba

    kernel = SMALL[name]()
    output = np.zeros_like(kernel.output)
    getattr(suite_numba, name)(output, *kernel.inputs)
    suite.agrees(kernel, output, "numba")
