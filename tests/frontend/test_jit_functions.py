"""Random ``@svod.jit`` functions against themselves run as plain Python, on every device (``jit_functions``:
hypothesis draws their seeds; CI draws the same ones every run, and ``python -m tests.frontend.jit_functions
COUNT`` sweeps more). A refusal is an outcome, a wrong answer or a crash never is."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.frontend.jit_functions import arguments, generate, load, outcome

_FOLDER = Path(tempfile.mkdtemp(prefix="svod-jit-generated-"))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1 << 30))
@example(seed=11)  # a continue flag set in one branch, read by the branch after it
@example(seed=53)  # two nested loops over one variable
def test_random_jit_functions_compute_what_python_does_or_are_refused(device, seed):
    function = generate(seed)
    result = outcome(load(function, _FOLDER), device, arguments(function, seed))
    assert not result.startswith("WRONG"), f"{result}\n{function.source}"
