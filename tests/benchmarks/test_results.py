"""How a benchmark run says where it is."""

import re

from benchmarks.results import progress_reporter


def test_progress_without_a_terminal_is_a_line_per_step_on_stderr(capsys):
    """Where stderr is no terminal (a file, a pipe: pytest's capture is one), rich would draw nothing: each step
    is a line with the seconds since the start."""
    with progress_reporter() as progress:
        progress("memory bandwidth")
        progress("kernel suite: round 1 of 5")
    out, err = capsys.readouterr()
    assert out == ""
    assert re.fullmatch(r"\[ +\d+ s\] memory bandwidth\n\[ +\d+ s\] kernel suite: round 1 of 5\n", err), err
