"""A prepared call's checks and launch in native code (``CpuLaunch.array_call``): one function, compiled once per
process, reads each argument's numpy array as NumPy's C API does (its type, dtype, shape, flags and data pointer
are fields of the array object), checks them against the call's signature, and calls the kernel, the GIL released
while it runs. Python calls it as a builtin function, as it calls NumPy's own: a call of a tiny kernel then costs
about a microsecond; checked in Python, the same checks and launch took several times that. Its checks alone
(``array_addresses``) answer the arrays' addresses to a caller that runs them itself, a jitted function's plan.

::

    signature (int64 words):  count  kernel  vars  ndarray  pairs  pairs_at  arguments  nvars  numbers  numbers_at
                              then per array: position  descr  ndim  dims_at  flags  align_mask  nbytes  -
                              then the dims (dims_at), then the pairs (pairs_at: two array indices each)
                              then per number (numbers_at): position  how  slot  low  high  dtype_low
                                                            dtype_high  width

A number sets its variable in a copy of the variables' values (``vars``, ``nvars`` of them), each call its own: an
int of int64's range as its value (a runtime scalar of an int dtype: within the dtype's range, its bits of
``width``), a float as its float32's (not a NaN) or float64's bits, then within the variable's bounds, as
``Variable.checked`` reads it; any other is declined.

It answers True where it ran the kernel and False, having run nothing, where the arguments are not as the
signature says (another count of them; another type, dtype object, shape; not C-contiguous, aligned to its
element's size, or writeable where the kernel writes it; a written array overlapping another; a number another
type or out of its bounds): the caller's Python checks then take the call, as they would have without it. The
arrays' layout is read at fixed offsets from the object's start, the ones NumPy's headers give its
``PyArrayObject_fields``, and a tuple's, a float's and a ctypes array's as CPython's (an int through the C API);
they are checked against NumPy's and Python's own answers once, and where they differ no call is native.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from svod.backends.cpu_builtins import HEAD, METH_O, Builtins, api, memory_follows_header
from svod.backends.cpu_host import host_target_machine
from svod.device import CallArray, CallScalar
from svod.dtype import dtypes

C_CONTIGUOUS, WRITEABLE = 0x1, 0x400
"""NumPy's ``NPY_ARRAY_*`` flag bits (``ndarraytypes.h``)."""
HEADER = 10
"""Words of a signature before its arrays' records."""
RECORD = 8
"""Words of one array's record."""
NUMBER_RECORD = 8
"""Words of one number's record."""
INT, FLOAT32_BITS, FLOAT64_BITS = 0, 1, 2
"""How a number becomes its variable's value: an int's value (its dtype's bits, where a runtime scalar of an int
dtype takes it), a float's bits as a float32 (numpy's C cast; a NaN is declined, whose float32 CPython's packing
keeps signalling from 3.14 on where the cast quiets it) or as a float64."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The ints a native call reads: another (a uint64's past ``INT64_MAX``) is declined to the checks in Python."""
MOST_ARRAYS = 64
"""The most arrays a native call takes (its buffer table lives on the stack)."""

TYPE_AT = HEAD - ctypes.sizeof(ctypes.c_void_p)
"""Where an object's type pointer is: the header's last word, in CPython's builds with and without the GIL."""
DATA_AT, NDIM_AT, DIMS_AT, DESCR_AT, FLAGS_AT = HEAD, HEAD + 8, HEAD + 16, HEAD + 40, HEAD + 48
"""``PyArrayObject_fields``: data, nd (int), dimensions, strides, base, descr, flags (int)."""
ITEMS_AT = tuple.__basicsize__
"""Where a tuple's items start."""
LENGTH_AT = ITEMS_AT - 8
"""Where a tuple's length is (``PyVarObject``'s ``ob_size``, the word before its items)."""


def _word(record: str, k: int, name: str) -> str:
    """Word ``k`` of the words at ``%record``, as i64 ``%name``."""
    return f"  %{name}.p = getelementptr i64, ptr %{record}, i64 {k}\n  %{name} = load i64, ptr %{name}.p\n"


def _field(obj: str, offset: int, kind: str, name: str) -> str:
    """The field of ``kind`` (i64, or i32 sign-extended) at byte ``offset`` of the object at ``%obj``, as i64
    ``%name``."""
    load = f"  %{name}.p = getelementptr i8, ptr %{obj}, i64 {offset}\n"
    if kind == "i32":
        return load + f"  %{name}.n = load i32, ptr %{name}.p\n  %{name} = sext i32 %{name}.n to i64\n"
    return load + f"  %{name} = load i64, ptr %{name}.p\n"


def _checked(name: str, parameters: str, buffers: str, run: str) -> str:
    """The IR of a function ``name(parameters)`` that checks a call's arguments against a signature, the data
    pointer of each of its arrays stored at ``%bufs`` (made by the lines ``buffers``), and ends in ``run``'s
    lines where every check holds; else it answers 0."""
    return (
        f"""
define i64 @{name}({parameters}) {{
entry:
"""
    + _word("sig", 0, "count") + _word("sig", 1, "fn") + _word("sig", 2, "vars") + _word("sig", 3, "ndarray")
    + _word("sig", 4, "npairs") + _word("sig", 5, "pairs") + _word("sig", 6, "arguments") + _word("sig", 7, "nvars")
    + _word("sig", 8, "nscalars") + _word("sig", 9, "scalars") + _field("args", LENGTH_AT, "i64", "length") + buffers
    + """  %length.ok = icmp eq i64 %length, %arguments
  br i1 %length.ok, label %array, label %decline

array:
  %i = phi i64 [0, %entry], [%i.next, %array.ok]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %array.body, label %pair

array.body:
  %r.k = mul i64 %i, """ + str(RECORD) + """
  %r.at = add i64 %r.k, """ + str(HEADER) + """
  %r = getelementptr i64, ptr %sig, i64 %r.at
"""
    + _word("r", 0, "position") + _word("r", 1, "descr") + _word("r", 2, "ndim") + _word("r", 3, "dims.at")
    + _word("r", 4, "flags") + _word("r", 5, "mask")
    + f"""  %item.k = mul i64 %position, 8
  %item.at = add i64 %item.k, {ITEMS_AT}
  %item.p = getelementptr i8, ptr %args, i64 %item.at
  %a = load ptr, ptr %item.p
"""
    + _field("a", TYPE_AT, "i64", "a.type") + """  %type.ok = icmp eq i64 %a.type, %ndarray
  br i1 %type.ok, label %array.fields, label %decline

array.fields:
"""
    + _field("a", DESCR_AT, "i64", "a.descr") + _field("a", NDIM_AT, "i32", "a.ndim")
    + _field("a", FLAGS_AT, "i32", "a.flags") + _field("a", DATA_AT, "i64", "a.data")
    + f"""  %a.dims.p = getelementptr i8, ptr %a, i64 {DIMS_AT}
  %a.dims = load ptr, ptr %a.dims.p
  %descr.ok = icmp eq i64 %a.descr, %descr
  %ndim.ok = icmp eq i64 %a.ndim, %ndim
  %a.set = and i64 %a.flags, %flags
  %flags.ok = icmp eq i64 %a.set, %flags
  %a.off = and i64 %a.data, %mask
  %align.ok = icmp eq i64 %a.off, 0
  %ok.1 = and i1 %descr.ok, %ndim.ok
  %ok.2 = and i1 %flags.ok, %align.ok
  %ok = and i1 %ok.1, %ok.2
  br i1 %ok, label %dim, label %decline

dim:
  %d = phi i64 [0, %array.fields], [%d.next, %dim.ok]
  %d.more = icmp slt i64 %d, %ndim
  br i1 %d.more, label %dim.body, label %array.ok

dim.body:
  %d.have.p = getelementptr i64, ptr %a.dims, i64 %d
  %d.have = load i64, ptr %d.have.p
  %d.at = add i64 %dims.at, %d
  %d.want.p = getelementptr i64, ptr %sig, i64 %d.at
  %d.want = load i64, ptr %d.want.p
  %d.same = icmp eq i64 %d.have, %d.want
  br i1 %d.same, label %dim.ok, label %decline

dim.ok:
  %d.next = add i64 %d, 1
  br label %dim

array.ok:
  %buf.p = getelementptr i64, ptr %bufs, i64 %i
  store i64 %a.data, ptr %buf.p
  %i.next = add i64 %i, 1
  br label %array

pair:
  %p = phi i64 [0, %array], [%p.next, %pair.apart]
  %p.more = icmp slt i64 %p, %npairs
  br i1 %p.more, label %pair.body, label %run

pair.body:
  %p.k = shl i64 %p, 1
  %p.at = add i64 %pairs, %p.k
  %p.first.p = getelementptr i64, ptr %sig, i64 %p.at
  %p.first = load i64, ptr %p.first.p
  %p.at2 = add i64 %p.at, 1
  %p.second.p = getelementptr i64, ptr %sig, i64 %p.at2
  %p.second = load i64, ptr %p.second.p
  %s1.p = getelementptr i64, ptr %bufs, i64 %p.first
  %s1 = load i64, ptr %s1.p
  %s2.p = getelementptr i64, ptr %bufs, i64 %p.second
  %s2 = load i64, ptr %s2.p
  %n1.k = mul i64 %p.first, {RECORD}
  %n1.at = add i64 %n1.k, {HEADER + 6}
  %n1.p = getelementptr i64, ptr %sig, i64 %n1.at
  %n1 = load i64, ptr %n1.p
  %n2.k = mul i64 %p.second, {RECORD}
  %n2.at = add i64 %n2.k, {HEADER + 6}
  %n2.p = getelementptr i64, ptr %sig, i64 %n2.at
  %n2 = load i64, ptr %n2.p
  %e1 = add i64 %s1, %n1
  %e2 = add i64 %s2, %n2
  %before = icmp ult i64 %s1, %e2
  %after = icmp ult i64 %s2, %e1
  %meet = and i1 %before, %after
  br i1 %meet, label %decline, label %pair.apart

pair.apart:
  %p.next = add i64 %p, 1
  br label %pair

run:
""" + run + """
decline:
  ret i64 0
}
""")


def _numbers() -> str:
    """The lines of ``svod_array_call`` past its arrays' checks: the variables' values copied to ``%vals``, each
    number's record (position, how, slot, low, high, dtype's low, dtype's high, width) read into its slot, checked
    as ``Variable.checked`` checks it (else nothing runs); then the kernel's run, the GIL released."""
    return f"""\
  %fn.f = inttoptr i64 %fn to ptr
  %vars.f = inttoptr i64 %vars to ptr
  %vals.bytes = mul i64 %nvars, 8
  call void @llvm.memcpy.p0.p0.i64(ptr %vals, ptr %vars.f, i64 %vals.bytes, i1 false)
{api(("int", "float", "PyLong_AsLongLongAndOverflow", "PyEval_SaveThread", "PyEval_RestoreThread"))}\
  br label %number

number:
  %n = phi i64 [0, %run], [%n.next, %number.checked]
  %n.more = icmp slt i64 %n, %nscalars
  br i1 %n.more, label %number.body, label %launch

number.body:
  %q.k = mul i64 %n, {NUMBER_RECORD}
  %q.at = add i64 %scalars, %q.k
  %q = getelementptr i64, ptr %sig, i64 %q.at
""" + _word("q", 0, "q.position") + _word("q", 1, "q.how") + _word("q", 2, "q.slot") + _word("q", 3, "q.low") \
        + _word("q", 4, "q.high") + _word("q", 5, "q.dlow") + _word("q", 6, "q.dhigh") + _word("q", 7, "q.width") \
        + f"""  %o.k = mul i64 %q.position, 8
  %o.at = add i64 %o.k, {ITEMS_AT}
  %o.p = getelementptr i8, ptr %args, i64 %o.at
  %o = load ptr, ptr %o.p
  %o.type.p = getelementptr i8, ptr %o, i64 {TYPE_AT}
  %o.type = load ptr, ptr %o.type.p
  %q.int = icmp eq i64 %q.how, {INT}
  br i1 %q.int, label %number.int, label %number.float

number.int:
  %is.int = icmp eq ptr %o.type, %int
  br i1 %is.int, label %number.int.read, label %decline

number.int.read:
  %v = call i64 %PyLong_AsLongLongAndOverflow(ptr %o, ptr %overflow)
  %v.over = load i32, ptr %overflow
  %v.fits = icmp eq i32 %v.over, 0
  %v.low = icmp sge i64 %v, %q.dlow
  %v.high = icmp sle i64 %v, %q.dhigh
  %v.in = and i1 %v.low, %v.high
  %v.ok = and i1 %v.fits, %v.in
  %v.shift = sub i64 64, %q.width
  %v.up = shl i64 %v, %v.shift
  %v.bits = ashr i64 %v.up, %v.shift
  br i1 %v.ok, label %number.check, label %decline

number.float:
  %is.float = icmp eq ptr %o.type, %float
  br i1 %is.float, label %number.float.read, label %decline

number.float.read:
  %x.p = getelementptr i8, ptr %o, i64 {HEAD}
  %x = load double, ptr %x.p
  %x.wide = bitcast double %x to i64
  %f = fptrunc double %x to float
  %f.i = bitcast float %f to i32
  %f.bits = sext i32 %f.i to i64
  %q.f32 = icmp eq i64 %q.how, {FLOAT32_BITS}
  %x.bits = select i1 %q.f32, i64 %f.bits, i64 %x.wide
  %x.nan = fcmp uno double %x, %x
  %x.declined = and i1 %q.f32, %x.nan
  br i1 %x.declined, label %decline, label %number.check

number.check:
  %bits = phi i64 [%v.bits, %number.int.read], [%x.bits, %number.float.read]
  %b.low = icmp sge i64 %bits, %q.low
  %b.high = icmp sle i64 %bits, %q.high
  %b.in = and i1 %b.low, %b.high
  br i1 %b.in, label %number.checked, label %decline

number.checked:
  %slot.p = getelementptr i64, ptr %vals, i64 %q.slot
  store i64 %bits, ptr %slot.p
  %n.next = add i64 %n, 1
  br label %number

launch:
  %state = call ptr %PyEval_SaveThread()
  call void %fn.f(ptr %bufs, ptr %vals, i64 0)
  call void %PyEval_RestoreThread(ptr %state)
  ret i64 1
"""


def _checks_ir() -> str:
    """``svod_array_call`` and ``svod_array_addresses``: the checks, then the kernel's run or the addresses."""
    return ("declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
            + _checked("svod_array_call", "ptr %sig, ptr %args",
                       "  %bufs = alloca i64, i64 %count\n  %vals = alloca i64, i64 %nvars\n"
                       "  %overflow = alloca i32\n", _numbers())
            + _checked("svod_array_addresses", "ptr %sig, ptr %args, ptr %bufs", "", "  ret i64 1\n"))


def _builtins_ir() -> str:
    """The two functions Python calls, as builtins taking one argument (``METH_O``) with the tuple of a call's
    signature and what it points into as ``self``: ``svod_call`` answers True where it ran the kernel, else False;
    ``svod_addresses`` a new list of the arrays' addresses, or None."""
    signature = f"""  %sig.o.p = getelementptr i8, ptr %self, i64 {ITEMS_AT}
  %sig.o = load ptr, ptr %sig.o.p
  %sig.p = getelementptr i8, ptr %sig.o, i64 {HEAD}
  %sig = load ptr, ptr %sig.p
"""
    tupled = f"""  %args.type.p = getelementptr i8, ptr %args, i64 {TYPE_AT}
  %args.type = load ptr, ptr %args.type.p
  %tupled = icmp eq ptr %args.type, %tuple
"""  # the arguments a tuple, as every caller passes them: any other object's words are not read as one's
    return f"""
define ptr @svod_call(ptr %self, ptr %args) {{
entry:
{signature}{api(("True", "False", "Py_IncRef", "tuple"))}{tupled}  br i1 %tupled, label %call, label %answered

call:
  %ran = call i64 @svod_array_call(ptr %sig, ptr %args)
  %ran.any = icmp ne i64 %ran, 0
  br label %answered

answered:
  %yes = phi i1 [false, %entry], [%ran.any, %call]
  %answer = select i1 %yes, ptr %True, ptr %False
  call void %Py_IncRef(ptr %answer)
  ret ptr %answer
}}

define ptr @svod_addresses(ptr %self, ptr %args) {{
entry:
{signature}  %count = load i64, ptr %sig
  %bufs = alloca i64, i64 %count
{api(("None", "Py_IncRef", "Py_DecRef", "PyList_New", "PyLong_FromSsize_t", "PyList_SetItem", "tuple"))}\
{tupled}  br i1 %tupled, label %check, label %none

check:
  %found = call i64 @svod_array_addresses(ptr %sig, ptr %args, ptr %bufs)
  %yes = icmp ne i64 %found, 0
  br i1 %yes, label %list, label %none

none:
  call void %Py_IncRef(ptr %None)
  ret ptr %None

list:
  %made = call ptr %PyList_New(i64 %count)
  %no.list = icmp eq ptr %made, null
  br i1 %no.list, label %failed, label %item

item:
  %i = phi i64 [0, %list], [%i.next, %set]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %item.body, label %done

item.body:
  %at.p = getelementptr i64, ptr %bufs, i64 %i
  %at = load i64, ptr %at.p
  %number = call ptr %PyLong_FromSsize_t(i64 %at)
  %no.number = icmp eq ptr %number, null
  br i1 %no.number, label %dropped, label %set

set:
  %stolen = call i32 %PyList_SetItem(ptr %made, i64 %i, ptr %number)
  %i.next = add i64 %i, 1
  br label %item

done:
  ret ptr %made

dropped:
  call void %Py_DecRef(ptr %made)
  br label %failed

failed:
  ret ptr null
}}
"""


class _NativeCalls:
    """The native call and its checks alone, compiled once per process, as builtins (``cpu_builtins``)."""

    def __init__(self) -> None:
        module = llvm.parse_assembly(_checks_ir() + _builtins_ir())
        module.verify()
        engine = llvm.create_mcjit_compiler(module, host_target_machine(2))
        engine.finalize_object()
        self.builtin = Builtins(engine, {"svod_call": METH_O, "svod_addresses": METH_O})
        self.ndarray = id(np.ndarray)


@functools.cache
def native_calls() -> _NativeCalls | None:
    """The native call, or None where NumPy's arrays are not laid out as it reads them."""
    return _NativeCalls() if _layout_holds() and memory_follows_header() else None


def _layout_holds() -> bool:
    """Whether a few arrays', a tuple's and a float's fields, read where the native call reads them, are what
    NumPy and Python say of them."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    frozen = np.zeros(5, np.int16)
    frozen.flags.writeable = False
    for array in (np.zeros(3), base, base[:, 1:4], frozen, np.zeros((2, 0, 3), np.complex128), np.zeros((), np.uint8)):
        at = id(array)
        ndim = ctypes.c_int.from_address(at + NDIM_AT).value
        dims = ctypes.c_void_p.from_address(at + DIMS_AT).value
        shape = tuple((ctypes.c_int64 * ndim).from_address(dims)) if ndim and dims else ()
        if (ctypes.c_void_p.from_address(at + TYPE_AT).value != id(np.ndarray)
                or ctypes.c_void_p.from_address(at + DATA_AT).value != array.__array_interface__["data"][0]
                or ndim != array.ndim or shape != array.shape
                or ctypes.c_void_p.from_address(at + DESCR_AT).value != id(array.dtype)
                or ctypes.c_int.from_address(at + FLAGS_AT).value != array.flags.num):
            return False
    held = (frozen, base)
    number = float(np.pi)  # a float's value is the field after its header
    return (tuple.__itemsize__ == 8 and ctypes.c_int64.from_address(id(held) + LENGTH_AT).value == len(held)
            and ctypes.c_void_p.from_address(id(held) + ITEMS_AT + 8).value == id(base)
            and ctypes.c_double.from_address(id(number) + HEAD).value == number)


def array_call(function: int, vals: Sequence[int], arguments: int, arrays: Sequence[CallArray],
               apart: Sequence[tuple[int, int]], scalars: Sequence[CallScalar] = ()
               ) -> Callable[[tuple[Any, ...]], bool] | None:
    """A native call of the one-worker kernel at ``function`` with ``vals`` on a call's ``arguments`` arguments, of
    which ``arrays`` (each by its position) are numpy arrays, no two of ``apart`` (indices into ``arrays``) sharing
    memory, and ``scalars`` numbers that set variables of ``vals``: called with the call's arguments (a tuple), it
    answers True where it ran the kernel, False where it did not. None where no call is native (see
    ``native_calls``), or for more than ``MOST_ARRAYS`` arrays, an empty one (its data pointer is not one a kernel
    reads) or a number it cannot read (``_number``)."""
    calls = native_calls()
    numbers = _numbers_of(scalars)
    if calls is None or not _takes(arrays) or numbers is None:
        return None
    variables = (ctypes.c_int64 * max(len(vals), 1))(*vals)
    signature = _signature(calls, function, (ctypes.addressof(variables), len(variables)), arguments, arrays, apart,
                           numbers)
    return calls.builtin("svod_call", (signature, variables, *(a.dtype for a in arrays)))


def _numbers_of(scalars: Sequence[CallScalar]) -> list[int] | None:
    """The records of ``scalars``, one after another; None where one has none."""
    words: list[int] = []
    for scalar in scalars:
        record = _number(scalar)
        if record is None:
            return None
        words += record
    return words


def _number(scalar: CallScalar) -> list[int] | None:
    """The record of a number the native call reads (module docstring), as ``Variable.checked`` reads it: an int
    for an int variable or a runtime scalar of an int dtype (of 1 to 8 bytes), a float for a float32 or float64
    scalar; None for any other (the checks in Python take it)."""
    variable, dtype = scalar.variable, scalar.variable.scalar
    head = [scalar.position, INT, scalar.slot, variable.min, variable.max]
    if dtype is None:
        return [*head, variable.min, variable.max, 64] if scalar.kind is int else None
    if scalar.kind is float and dtype in (dtypes.float32, dtypes.float64):
        return [scalar.position, FLOAT32_BITS if dtype == dtypes.float32 else FLOAT64_BITS, *head[2:], 0, 0, 0]
    if scalar.kind is int and dtype.is_int and dtype.itemsize in (1, 2, 4, 8):
        return [*head, max(int(dtype.min), INT64_MIN), min(int(dtype.max), INT64_MAX), 8 * dtype.itemsize]
    return None


def array_addresses(arguments: int, arrays: Sequence[CallArray], apart: Sequence[tuple[int, int]]
                    ) -> Callable[[tuple[Any, ...]], list[int] | None] | None:
    """``array_call``'s checks alone, for a caller that runs the arrays itself (a jitted function's plan):
    called with the call's arguments (a tuple), it answers a new list of the arrays' addresses, or None where
    the arguments are not as the signature says. None where ``array_call`` would be."""
    calls = native_calls()
    if calls is None or not _takes(arrays):
        return None
    signature = _signature(calls, 0, (0, 0), arguments, arrays, apart, [])
    return calls.builtin("svod_addresses", (signature, *(a.dtype for a in arrays)))


def _takes(arrays: Sequence[CallArray]) -> bool:
    """Whether a native call takes ``arrays``: at least one, at most ``MOST_ARRAYS``, none empty, each of an
    itemsize that is a power of two (whose alignment a mask tests)."""
    return 0 < len(arrays) <= MOST_ARRAYS and all(0 not in a.shape and a.dtype.itemsize & (a.dtype.itemsize - 1) == 0
                                                  for a in arrays)


def _signature(calls: _NativeCalls, function: int, variables: tuple[int, int], arguments: int,
               arrays: Sequence[CallArray], apart: Sequence[tuple[int, int]], numbers: Sequence[int]
               ) -> ctypes.Array[ctypes.c_int64]:
    """The words of a native call's signature (the module's docstring lays them out): ``variables`` the address
    and count of the variables' values, ``numbers`` the numbers' records."""
    dims_at = HEADER + RECORD * len(arrays)
    pairs_at = dims_at + sum(len(a.shape) for a in arrays)
    numbers_at = pairs_at + 2 * len(apart)
    words = [len(arrays), function, variables[0], calls.ndarray, len(apart), pairs_at,
             arguments, variables[1], len(numbers) // NUMBER_RECORD, numbers_at]
    dims: list[int] = []
    for array in arrays:
        flags = C_CONTIGUOUS | (WRITEABLE if array.written else 0)
        words += [array.position, id(array.dtype), len(array.shape), dims_at + len(dims), flags,
                  array.dtype.itemsize - 1, array.dtype.itemsize * math.prod(array.shape), 0]
        dims += array.shape
    words += dims + [index for pair in apart for index in pair] + list(numbers)
    return (ctypes.c_int64 * len(words))(*words)


__all__ = ["array_addresses", "array_call", "native_calls"]
