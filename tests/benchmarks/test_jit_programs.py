"""The ``@svod.jit`` programs of ``svod bench`` (``benchmarks.jit_programs``): one source text each, whose svod
and numba versions differ only in the import and decorator lines; svod's version agrees with the same text
run as plain Python (or svod refuses it, naming the line); numpy's answer, which the bench checks against,
agrees with plain Python too. No test passes or fails on how fast anything ran."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any

import numpy as np
import pytest

import svod
from benchmarks import harness
from benchmarks.harness import Bench, first_call_ms
from benchmarks.jit_programs import ARRAY_PROGRAMS, HEADERS, PROGRAMS, agree, copies
from benchmarks.numpy_programs import NUMPY_PROGRAMS
from benchmarks.peers import Tinygrad
from benchmarks.programs import program
from svod.errors import SvodError
from svod.frontend.oracle import as_python
from tests.benchmarks.test_harness import TINY

SIZES: dict[str, list[tuple[int, ...]]] = {
    "jacobi2d": [(0, 2), (1, 2), (2, 2), (3, 3), (7, 3), (13, 2)],
    "heat3d": [(0, 1), (1, 1), (2, 1), (3, 2), (7, 2)],
    "floyd_warshall": [(0,), (1,), (2,), (7,), (13,)],
    "floyd_warshall_rowcopy": [(0,), (1,), (2,), (7,), (13,)],
    "nussinov": [(0,), (1,), (2,), (7,), (13,)],
    "gemver": [(0,), (1,), (2,), (7,), (13,)],
    "mandelbrot": [(0, 3, 5), (1, 1, 5), (3, 7, 20), (7, 13, 11)],
    "mandelbrot_for": [(0, 3, 5), (1, 1, 5), (3, 7, 20), (7, 13, 11)],
    "kmeans": [(0, 3, 2), (1, 2, 1), (7, 3, 2), (13, 2, 3)],
}
"""Small sizes per program: 0, 1 and primes where the program allows them."""
CASES = [(p.name, size) for p in PROGRAMS for size in SIZES[p.name]]


@functools.cache
def compiled(name: str, version: str) -> Any:
    """Program ``name``'s ``version`` made once for every size a test calls it at: numba compiles a dispatcher
    once per argument types, and a fresh one per size would compile the same code again each time."""
    return program(name).function(version)


def results(result: Any) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(r) for r in (result if isinstance(result, tuple) else (result,)))


def python(name: str, args: tuple[Any, ...]) -> tuple[np.ndarray, ...]:
    """The program's text run as plain Python (loop variables int64, as numba types them) on copies."""
    return results(as_python(program(name).function("svod"))(*copies(args)))


def same(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...], tolerance: float) -> None:
    assert len(got) == len(want)
    for actual, expected in zip(got, want, strict=True):
        assert actual.shape == expected.shape
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


def test_every_program_has_small_sizes_and_one_name():
    assert set(SIZES) == {p.name for p in PROGRAMS} and len(PROGRAMS) == len(SIZES)
    for p in PROGRAMS:
        assert p.rewrite_of is None or program(p.rewrite_of).rewrite_of is None, p.name
    with pytest.raises(KeyError, match="no jit program 'nope'"):
        program("nope")


@pytest.mark.parametrize("name", [p.name for p in PROGRAMS])
def test_the_svod_and_numba_texts_differ_only_in_imports_and_decorator(name):
    found = program(name)
    svod_lines, numba_lines = found.text("svod").splitlines(), found.text("numba").splitlines()
    changed = [line for line in difflib.ndiff(numba_lines, svod_lines) if line[:2] in ("- ", "+ ")]
    assert sorted(line[2:] for line in changed) == sorted([*HEADERS["numba"], *HEADERS["svod"]])
    assert found.lines("svod") == found.lines("numba") == sum(1 for line in svod_lines if line.strip())
    assert f"def {name}(" in found.source and "prange(" in found.source


@pytest.mark.parametrize(("name", "size"), CASES)
def test_numpys_answer_is_the_plain_python_one(name, size):
    found = program(name)
    args = found.make(*size)
    same(results(found.numpy(*copies(args))), python(name, args), max(found.tolerance, 1e-12))


@pytest.mark.parametrize(("name", "size"), CASES)
def test_svods_version_agrees_with_plain_python_or_is_refused_naming_its_line(name, size):
    found = program(name)
    args = found.make(*size)
    try:
        got = compiled(name, "svod")(*copies(args))
    except SvodError as err:
        assert found.rewrite_of is None, f"svod refuses its own rewrite {name}: {err}"
        assert f"<jit program {name} (svod)>:" in str(err)
        return
    same(results(got), python(name, args), max(found.tolerance, 1e-12))


def test_svod_accepts_each_rewrite_and_the_programs_it_rewrites_need_one():
    for rewrite in (p for p in PROGRAMS if p.rewrite_of):
        args = rewrite.make(*rewrite.small)
        assert agree(rewrite, rewrite.function("svod")(*copies(args)), rewrite.numpy(*copies(args)))
        with pytest.raises(SvodError):
            program(rewrite.rewrite_of).function("svod")(*copies(args))


@pytest.mark.parametrize(("name", "size"), CASES)
def test_numbas_version_agrees_with_plain_python(name, size):
    pytest.importorskip("numba", reason="numba is a benchmark peer (extra bench), not installed")
    found = program(name)
    args = found.make(*size)
    same(results(compiled(name, "numba")(*copies(args))), python(name, args), max(found.tolerance, 1e-12))


def test_a_first_call_is_timed_in_a_fresh_process():
    found = program("floyd_warshall_rowcopy")
    assert first_call_ms(found, "svod", found.small) > 0
    with pytest.raises(SvodError, match=r"first call of svod's floyd_warshall failed: .*RaceError: .*stage lower"):
        first_call_ms(program("floyd_warshall"), "svod", found.small)


def test_the_bench_step_times_each_program_beside_numba_and_numpy(monkeypatch):
    monkeypatch.setattr(harness, "PROGRAMS", [program("floyd_warshall"), program("floyd_warshall_rowcopy")])
    monkeypatch.setattr(harness, "first_call_ms", lambda p, version, size, device: 1.5)
    bench = Bench(svod.get_device("CPU"), dataclasses.replace(TINY, jit_first_calls=True), Tinygrad(),
                  lambda title: None)
    refused, _, rewrite, rewrite_first = bench.jit_programs()
    assert refused.name == "jit.floyd_warshall_ms" and refused.svod is None and refused.numpy is not None
    assert "stage lower] d is read at an element another work item may write" in refused.why_missing["svod"]
    assert "floyd_warshall (svod)>:" in refused.why_missing["svod"]
    assert rewrite.svod is not None and rewrite.svod > 0 and "rewrite of floyd_warshall" in rewrite.note
    assert "16 lines (numba's: 16)" in rewrite.note
    assert rewrite_first.name == "jit_first_call.floyd_warshall_rowcopy_ms" and rewrite_first.svod == 1.5
    for metric in (refused, rewrite):
        assert (metric.numba is None) == ("numba" in metric.why_missing)


def test_a_program_that_disagrees_with_numpy_fails_the_bench(monkeypatch):
    wrong = dataclasses.replace(program("jacobi2d"), numpy=lambda a, b, steps: a + 1)
    monkeypatch.setattr(harness, "PROGRAMS", [wrong])
    bench = Bench(svod.get_device("CPU"), TINY, Tinygrad(), lambda title: None)
    with pytest.raises(SvodError, match="svod's jacobi2d disagrees with numpy"):
        bench.jit_programs()


@pytest.mark.parametrize("name", [p.name for p in [*ARRAY_PROGRAMS, *NUMPY_PROGRAMS]])
def test_an_array_program_is_numpy_code_that_svod_runs_as_numpy_does(name):
    """The NumPy array programs: the svod text is the numba text but for imports and decorator, loops
    nothing by hand, and gives numpy's answer (its own function run as plain Python) at its small size."""
    found = program(name)
    changed = [line for line in difflib.ndiff(found.text("numba").splitlines(), found.text("svod").splitlines())
               if line[:2] in ("- ", "+ ")]
    assert sorted(line[2:] for line in changed) == sorted([*HEADERS["numba"], *HEADERS["svod"]])
    assert "prange(" not in found.source
    args = found.make(*found.small)
    want = found.numpy(*copies(args))
    assert agree(found, found.function("svod")(*copies(args)), want)


def _floyd_warshall_steps(d: np.ndarray, rows: list[int]) -> np.ndarray:
    """``floyd_warshall`` as numba writes it, its ``prange``'s work items run one after another in ``rows``'
    order (any order is one a parallel run may take)."""
    for k in range(d.shape[0]):
        for i in rows:
            through = d[i, k]
            for j in range(d.shape[0]):
                d[i, j] = min(d[i, j], through + d[k, j])
    return d


def test_floyd_warshalls_prange_races_so_svod_refuses_it():
    """Work item ``k`` writes row ``k`` while the others read it: harmless only while ``d[k, k] + x >= x``. A
    negative diagonal (a negative cycle) changes row ``k`` during step ``k``, and the answer depends on the
    order of the work items, so the refusal is right for some values and no proof from the text accepts it."""
    d = np.array([[-1.0, 5.0, 9.0], [3.0, 0.0, 1e9], [2.0, 4.0, 0.0]])
    forward, backward = _floyd_warshall_steps(d.copy(), [0, 1, 2]), _floyd_warshall_steps(d.copy(), [2, 1, 0])
    assert not np.array_equal(forward, backward)
    with pytest.raises(SvodError, match="d is read at an element another work item may write"):
        program("floyd_warshall").function("svod")(d.copy())


@pytest.mark.parametrize("diagonal", [-1.0, -0.0, np.inf, np.nan], ids=["negative", "-0.0", "inf", "nan"])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_floyd_warshall_rowcopy_agrees_with_plain_python_on_special_values(diagonal, n):
    """svod's rewrite copies row and column ``k`` before step ``k``: every order of its work items gives the
    plain-Python answer, even where the diagonal changes them (negative, NaN) or distances are infinite."""
    (d,) = program("floyd_warshall_rowcopy").make(n)
    d[np.arange(n), np.arange(n)] = diagonal
    d[0, n - 1] = np.inf
    got = results(program("floyd_warshall_rowcopy").function("svod")(d.copy()))
    same(got, python("floyd_warshall_rowcopy", (d,)), 0.0)
