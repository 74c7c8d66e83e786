"""``names.written``: the one reader of the arrays a piece of code may write, which the tape's reuse and
hoisting and a prange's slice bounds share. It must name every way Python code may change an array's contents,
so that none of them mistakes a written array for one left as it is; it names an element or a shape a call reads
no more, so that a hoisted sum still reads its array."""

from __future__ import annotations

import ast

import pytest

from svod.frontend.names import written


def _written(source: str) -> set[str]:
    return written([ast.parse(source)])


@pytest.mark.parametrize(("source", "names"), [
    ("a[i] = v", {"a"}),
    ("a[i][j] = v", {"a"}),
    ("a[i, j] += v", {"a"}),
    ("a.real[i] = v", {"a"}),
    ("a.T[i, :] = v", {"a"}),
    ("del a[0]", {"a"}),
    ("np.add(b, c, out=a)", {"np", "b", "c", "a"}),
    ("np.add(b, c, out=a[1:])", {"np", "b", "c", "a"}),
    ("np.add(b, c, out=(a,))", {"np", "b", "c", "a"}),
    ("np.concatenate([a, b[1:]], out=c)", {"np", "a", "b", "c"}),
    ("np.multiply(b[:, 0], 2.0, a[i, :])", {"np", "b", "a"}),
    ("np.add(r, 1.0, out=a[i])", {"np", "r", "a"}),
    ("np.negative(a.T, b.real)", {"np", "a", "b"}),
    ("svod.atomic_add(t, 0, v)", {"svod", "t", "v"}),
    ("f(*arrays, **options)", {"arrays", "options"}),
    ("a.fill(0.0)", {"a"}),
    ("a.T.sort()", {"a"}),
    ("a[1:].fill(v)", {"a", "v"}),
    ("for k in range(n):\n    b[k] = 1.0\n    c.sort()", {"b", "c", "n"}),
])
def test_every_way_code_may_change_an_array_is_named(source: str, names: set[str]) -> None:
    assert _written(source) == names


@pytest.mark.parametrize("source", [
    "y = x",
    "r += x[k]",
    "r = max(r, x[k] * w[k, j])",
    "y[i] = svod.math.exp(x[i] - m) / s",
    "for k in range(x.shape[0]):\n    r += x[k]",
    "n = len(x.shape)",
])
def test_elements_shapes_and_rebinding_are_not_writes_of_what_they_read(source: str) -> None:
    assert not _written(source) & {"x", "w", "m"}
