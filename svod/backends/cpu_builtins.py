"""Native code that Python calls as a builtin function, as it calls NumPy's own: the CPU's tiny calls (a prepared
kernel call's checks and launch, a jitted function's array checks, a plan's replay) are functions of LLVM IR compiled
once per process, and a builtin's call of one costs about 0.1 us where a ctypes call cost 0.3-1.2 us converting
its arguments.

A builtin is CPython's ``PyCFunction``: a ``PyMethodDef`` (the C function, how it takes arguments) and its
``self``, an object the function reads its data from (here a ctypes array of words, or a tuple that starts with
one and holds what the words point into, alive as long as the builtin). The function returns a new reference,
or NULL with an exception set. The IR takes the C API's functions and objects it uses as constants of this
process (``api``).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterable
from typing import Any

from svod.errors import SvodError

HEAD = object.__basicsize__
"""Bytes of an object's header (``PyObject_HEAD``): a ctypes object's memory pointer follows it."""
METH_NOARGS, METH_O = 0x0004, 0x0008
"""``PyMethodDef.ml_flags``: the C function takes no argument, or one, beside ``self``."""


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``."""

    _fields_ = (("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p))


_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.argtypes = (ctypes.c_void_p, ctypes.py_object, ctypes.py_object)
_new_builtin.restype = ctypes.py_object


def api_address(name: str) -> int:
    """The address of the function ``name`` of Python's C API."""
    address = ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
    if not address:
        raise SvodError(f"the Python API has no {name}", stage="load", value=name)
    return address


def api(names: Iterable[str]) -> str:
    """IR lines that name, as ``%name``, each of ``names``: the C API's function of that name, or ``True``,
    ``False``, ``None``, ``tuple``, ``int`` or ``float``, Python's objects."""
    objects = {"True": id(True), "False": id(False), "None": id(None), "tuple": id(tuple), "int": id(int),
               "float": id(float)}
    return "".join(f"  %{name} = inttoptr i64 {objects.get(name) or api_address(name)} to ptr\n" for name in names)


@functools.cache
def memory_follows_header() -> bool:
    """Whether a ctypes object's memory address is the word after its header, where the IR reads it."""
    words = (ctypes.c_int64 * 2)()
    return ctypes.c_void_p.from_address(id(words) + HEAD).value == ctypes.addressof(words)


_KEPT: list[Builtins] = []
"""Every ``Builtins`` made, alive as long as the process: a builtin holds a pointer to its ``PyMethodDef``, not a
reference, and calls code its module's engine owns (two threads' first calls may each compile a module where one
was wanted; the one a cache drops must not be freed under the builtins made from it)."""


class Builtins:
    """Builtins of the functions of one compiled module (``engine``), each with its ``ml_flags``."""

    def __init__(self, engine: Any, functions: dict[str, int]) -> None:
        self.engine = engine
        self._methods = {name: _MethodDef(name.encode(), engine.get_function_address(name), flags)
                         for name, flags in functions.items()}
        _KEPT.append(self)

    def __call__(self, name: str, held: object) -> Callable[..., Any]:
        """The builtin of function ``name`` whose ``self`` is ``held``."""
        made: Callable[..., Any] = _new_builtin(ctypes.byref(self._methods[name]), held, None)
        return made


__all__ = ["HEAD", "METH_NOARGS", "METH_O", "Builtins", "api", "api_address", "memory_follows_header"]
