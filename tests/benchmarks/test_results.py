"""How a benchmark run says where it is."""

import re

from benchmarks.results import progress_reporter


def test_progress_without_a_terminal_is_a_line_per_step_on_stderr(capsys):
    """Where stderr is no terminal (a file, a pipe: pytest's capture is one), rich would draw nothing: each step
    is a line with its count, of the total where known, and the seconds since the start."""
    with progress_reporter(3) as progress:
        progress("memory bandwidth")
        progress("cold compile")
    with progress_reporter(None) as progress:
        progress("kernel suite: round 1 of 5")
    out, err = capsys.readouterr()
    assert out == ""
    assert re.fullmatch(r"\[1/3, \d+ s\] memory bandwidth\n\[2/3, \d+ s\] cold compile\n"
                        r"\[1, \d+ s\] kernel suite: round 1 of 5\n", err)
