"""What the adjoint refuses as it reads a kernel (its work item in ``svod.frontend.adjoint_forward``, the kernel's
shape around it in ``svod.frontend.adjoint``): each construct it cannot differentiate is a ``GradientError``
naming the kernel, the file and line and what to change, raised before the kernel runs; and what it reads a work
item into."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import svod
from svod.frontend.adjoint_forward import WorkItem


@svod.func
def _twice(v):
    return v * 2.0


@svod.kernel
def while_loop(y, x):
    for i in svod.prange(y.shape[0]):
        t = x[i]
        while t < 10.0:
            t = t * 2.0
        y[i] = t


@svod.kernel
def one_sided_local(y, x):
    for i in svod.prange(y.shape[0]):
        if x[i] > 0.0:
            t = x[i]
        y[i] = t


@svod.kernel
def scaled_in_place(y, x):
    for i in svod.prange(y.shape[0]):
        y[i] *= x[i]


@svod.kernel
def read_after_write(y, x):
    for i in svod.prange(y.shape[0]):
        if x[i] > 0.0:
            y[i] = x[i]
        x[i] = y[i] * 2.0


@svod.kernel
def read_outside(y, x):
    s = x[0]
    for i in svod.prange(y.shape[0]):
        y[i] = s


@svod.kernel
def two_loops(y, x):
    for i in svod.prange(y.shape[0]):
        y[i] = x[i]
    for i in svod.prange(y.shape[0]):
        x[i] = 1.0


@svod.kernel
def helper_call(y, x):
    for i in svod.prange(y.shape[0]):
        y[i] = _twice(x[i])


@svod.kernel
def tuple_assignment(y, x):
    for i in svod.prange(y.shape[0]):
        a, b = x[i], 1.0
        y[i] = a + b


@svod.kernel
def atomic_max(y, x):
    for i in svod.prange(x.shape[0]):
        svod.atomic_max(y, 0, x[i])


@svod.kernel
def max_of_three(y, x):
    for i in svod.prange(y.shape[0]):
        y[i] = max(x[i], 0.0, x[i] * 2.0)


@svod.kernel
def min_of_five(y, x):
    for i in svod.prange(y.shape[0]):
        y[i] = min(x[i], 1.0, 2.0, 3.0, 4.0)


REFUSED = [
    (while_loop, "while t", "a while loop inside svod.prange", "write it as a for loop over range(...)"),
    (one_sided_local, "y[i] = t", "a read of t, which one side of the if before assigns", "assign t before the if"),
    (scaled_in_place, "*=", "an update other than += and -=", "y[i] = y[i] * e"),
    (read_after_write, "x[i] = y[i]", "a read of y after the work item wrote it elsewhere, under a condition",
     "read back only the element the work item stored"),
    (read_outside, "s = x[0]", "a statement outside the kernel's svod.prange loop", "compute it inside the loop"),
    (two_loops, "x[i] = 1.0", "a kernel that is not one svod.prange loop", "one kernel per parallel loop"),
    (helper_call, "_twice", "a call of _twice", "svod.math functions"),
    (tuple_assignment, "a, b", "an assignment to a tuple", "a local name of its own"),
    (atomic_max, "svod.atomic_max", "a call other than svod.atomic_add as a statement", "svod.atomic_add"),
    (max_of_three, "max(", "max of 3 arguments", "max is differentiated with two arguments (where they tie, each "
     "takes half): nest them, max(max(a, b), c)"),
    (min_of_five, "min(", "min of 5 arguments", "nest them, min(min(min(min(a, b), c), d), ...)"),
]


@pytest.mark.parametrize("kernel, line_text, what, change", REFUSED, ids=[r[0].name for r in REFUSED])
def test_each_construct_outside_the_slice_is_refused_at_its_line(kernel, line_text, what, change):
    lines, first = inspect.getsourcelines(kernel.fn)
    line = first + next(k for k, text in enumerate(lines) if line_text in text)
    if kernel is two_loops:
        line -= 1  # the second loop's own line
    args = (np.zeros(4), np.ones(4), np.zeros(4, np.int32))[:len(kernel.parameters)]
    with pytest.raises(svod.errors.GradientError) as raised:
        svod.vjp(kernel, *args)
    error = raised.value
    assert error.kernel == kernel.name and error.stage == "gradient"
    assert f"{__file__}:{line}: {what}" in error.detail and change in error.detail
    assert np.array_equal(args[0], np.zeros(4)), "a refused kernel does not run"


@svod.kernel
def own_and_gathered(y, x, idx):
    for i in svod.prange(y.shape[0]):
        y[i] = x[i] * x[idx[i]]


def test_a_work_item_is_read_into_its_loads_operations_and_store_in_order():
    """A read whose index is the parallel loop's variable is the work item's own element (``own``); a gather's
    is not, and its index, read as it is, counts as a read of ``idx``."""
    item = WorkItem(own_and_gathered)
    nest = item.nest(own_and_gathered.source.node.body[0])
    for stmt in nest[-1].body:
        item.statement(stmt)
    assert [(v.array, v.index, v.own, v.stored, v.rule is None) for v in item.values] == [
        ("x", "i", (0,), None, True), ("x", "idx[i]", None, None, True), (None, "", None, None, False),
        ("y", "i", None, "=", True)]
    assert (item.loops, item.written, item.reads, item.atomic) == (["i"], ["y"], {"x", "idx"}, False)
