"""Every failure a user can cause is an ``SvodError`` that names the kernel, the stage and the value.

The fields are kept as attributes so callers can branch on them; the message is built from them so a
traceback alone says what went wrong, where, and with what.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

Stage = Literal["parse", "build", "lower", "render", "compile", "load", "plan", "bind", "launch", "execute",
                "buffer", "device", "check", "gradient"]
"""Where in a kernel's life an error arose: one of ``STAGES``, in the order a kernel meets them."""

STAGES: dict[Stage, str] = {
    "parse": "reading a Python kernel's or jit function's definition: its source, signature, annotations and "
             "decorator options",
    "build": "making a kernel's UOp graph (UOps, dtypes, constants, a KernelBuilder, the translation of a Python "
             "kernel's statements), and checking the graph made before it is lowered",
    "lower": "the lowering passes and linearizing, with the proofs made on the way (no two work items race)",
    "render": "writing the kernel in a device's language, within what the device can hold",
    "compile": "turning rendered source into code (clang, LLVM, nvrtc, ptxas, a GPU driver), and an internal "
               "error anywhere in svod's compilation",
    "load": "loading compiled code into the process: object code, a cache entry, a plan bundle",
    "plan": "making a plan (buffers, steps, loops, branches), preparing it, saving it, and sharding it "
            "(map_plan)",
    "bind": "the arguments of a kernel call or a plan run: arrays, buffers and scalars against what the kernel "
            "takes, variables' values against their bounds",
    "launch": "evaluating a launch's sizes and starting the kernel on its device",
    "execute": "what a running kernel or plan reports: an access out of bounds, a device's fault, a lost worker",
    "buffer": "allocating, viewing and copying buffers, and exchanging them through DLPack",
    "device": "naming, choosing and opening a device, the drivers and tools it needs, and svod's settings "
              "(environment variables, the random seed)",
    "check": "svod's tools that compare kernels with a reference (svod check, svod bench, the workloads): their "
             "inputs, and a result that disagrees",
    "gradient": "differentiating: making a kernel's adjoint (what svod differentiates and what it refuses), a "
                "tape's records, and the arrays they need unchanged until the backward pass",
}
"""Each stage and what it covers, in the order of ``Stage``."""

_UNSET: Any = object()


class SvodError(Exception):
    """Base of all svod errors.

    ``kernel`` is the kernel's name, ``stage`` where in the kernel's life the error arose (one of ``STAGES``)
    and ``value`` the offending value; each is optional and shown in the message when set.
    ``buffers`` are the argument slots of the buffers the message names (as ``buffer N`` or ``argument N``),
    which a Python kernel calls by its parameters' names (``call_by``).
    """

    def __init__(self, message: str, *, kernel: str | None = None, stage: Stage | None = None,
                 value: Any = _UNSET, buffers: tuple[int, ...] = ()) -> None:
        self.detail = message
        self.kernel = kernel
        self.stage = stage
        self.value = None if value is _UNSET else value
        self.buffers = buffers
        self._shows_value = value is not _UNSET
        super().__init__(self._text())

    def _text(self) -> str:
        where = ", ".join(part for part in (
            f"kernel {self.kernel!r}" if self.kernel else "",
            f"stage {self.stage}" if self.stage else "",
        ) if part)
        text = f"[{where}] {self.detail}" if where else self.detail
        if self._shows_value and not _mentions(self.detail, self.value):
            text += f" (got {self.value!r})"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its fields, whatever its constructor takes: an error crosses processes whole (a Ray
        worker's error reaches the driver as raised)."""
        return (_restore, (type(self), self.args, dict(self.__dict__)))

    def name_kernel(self, kernel: str) -> None:
        """Name ``kernel`` in this error if it names none: for an error raised below any kernel (allocating a
        buffer, evaluating a launch size) that reaches the user through a call on one."""
        if self.kernel is None:
            self.kernel = kernel
            self.args = (self._text(), *self.args[1:])

    def locate(self, where: str) -> None:
        """Say where in a Python kernel's source the cause is (``file.py:12``): for an error raised while
        building or lowering a kernel written with ``@svod.kernel``. Only the first location is kept."""
        if self.location is None:
            self.location = where
            self.detail = f"{self.detail} (at {where})"
            self.args = (self._text(), *self.args[1:])

    def call_by(self, buffers: Mapping[int, str], variables: Mapping[str, str]) -> None:
        """Call the buffers this error names (``buffer 1``, ``argument 1``: the slots in ``self.buffers``) and
        the variables it names as ``buffers`` and ``variables`` say: a Python kernel's as its source does
        (``x``, ``x.shape[0]``)."""
        named = [slot for slot in self.buffers if slot in buffers]
        detail = self.detail
        for slot in named:
            detail = _replaced(rf"\b(buffer|argument) {slot}\b", buffers[slot], detail)
        for variable, called in variables.items():
            detail = _replaced(rf"(?<![\w.]){re.escape(variable)}(?![\w.])", called, detail)
        if detail == self.detail:
            return
        self.detail = detail
        if self.value in (self.buffers, *named):  # the slots were the value: the names say it
            self._shows_value = False
        self.args = (self._text(), *self.args[1:])

    def restate(self, detail: str) -> None:
        """Say the error's cause in ``detail``'s words: a layer that knows why a check was made (a variable's
        bounds that are a narrow dtype's) says what the user wrote, where the check said what it compared."""
        self.detail = detail
        self.args = (self._text(), *self.args[1:])

    def advise(self, advice: str) -> None:
        """Add ``advice`` to the error's words: what to change, where a caller knows more of the cause than the
        layer that raised it."""
        self.detail = f"{self.detail}; {advice}"
        self.args = (self._text(), *self.args[1:])

    def in_shard(self, index: int) -> None:
        """Say which shard of a distributed run (``svod.distributed.map_plan``) raised this error."""
        if self.shard is None:
            self.shard = index
            self.detail = f"shard {index}: {self.detail}"
            self.args = (self._text(), *self.args[1:])

    shard: int | None = None
    """The index of the shard of ``map_plan`` whose run raised the error, if any."""

    location: str | None = None
    """``file:line`` of the Python kernel statement that built the offending node, when known."""


def _mentions(detail: str, value: Any) -> bool:
    """Whether ``detail`` already shows ``value`` (as a word of its own): the message then needs no tail."""
    return any(re.search(rf"(?<![\w.]){re.escape(shown)}(?![\w.])", detail) for shown in {str(value), repr(value)})


def _replaced(pattern: str, replacement: str, text: str) -> str:
    """``text`` with each match of ``pattern`` replaced by ``replacement``, taken as it is (no group escapes)."""
    return re.sub(pattern, lambda _: replacement, text)


def _restore(cls: type[SvodError], args: tuple[Any, ...], state: dict[str, Any]) -> SvodError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class BundleError(SvodError):
    """A plan bundle that cannot be read: not a bundle, damaged, or written by a newer format. The message
    names the file and what is wrong with it."""


class BundleWarning(UserWarning):
    """A plan bundle's compiled code does not fit this machine (another device, compiler, CPU or svod
    version): its kernels are compiled again from the ASTs it stores."""


class KernelSyntaxError(SvodError):
    """A construct an ``@svod.kernel`` function may not use (``while``, ``try``, a list, a call of a function
    that is neither svod's nor ``@svod.func`` ...), or a name or value it cannot translate. The message names
    the file, the line and the construct."""


class GradientError(SvodError):
    """A gradient svod will not compute rather than compute wrong: a construct whose derivative svod does not
    take, or an array a tape recorded that changed before ``backward``. The message names the kernel, the
    line or array, and what to change."""


class DeviceError(SvodError):
    """A device name that svod does not know, or a device that is not present here."""


class GraphError(SvodError):
    """A malformed UOp graph: wrong sources, dtypes that do not fit, a stage missing from a PROGRAM."""


class RaceError(GraphError):
    """A kernel refused because two of its work items may write one element, or one may read an element
    another writes. ``value`` is the buffer's argument slot."""


class VariableError(SvodError):
    """A symbolic variable that is missing, out of its bounds, or fixed and passed again."""


class LaunchError(SvodError):
    """A launch size that cannot be evaluated: bad arithmetic, a float, a non-positive dimension."""


class BufferMismatchError(SvodError):
    """A buffer of the wrong count, dtype, size or device for the kernel it is given to."""


class IndexOutOfBoundsError(SvodError):
    """A bounds-checked access of a kernel left its buffer. The access did not happen (a load gave 0, a
    store was skipped); ``slot`` is the buffer's argument slot, ``size`` its element count and ``index``
    one offending index."""

    def __init__(self, *, kernel: str, slot: int, size: int, index: int, stage: Stage = "execute") -> None:
        self.slot = slot
        self.size = size
        self.index = index
        super().__init__(f"buffer {slot} has {size} elements but was accessed at index {index}; the access was "
                         "skipped", kernel=kernel, stage=stage, value=index, buffers=(slot,))


class LinAlgError(SvodError, np.linalg.LinAlgError):
    """A matrix a jitted function's ``np.linalg`` call cannot factor: singular (a zero pivot), or not positive
    definite (``cholesky``), found when the plan ran. NumPy's ``LinAlgError`` as well, so code that catches
    NumPy's catches it; ``value`` is LAPACK's info: the column of the zero pivot, or the order of the leading
    minor that is not positive, from 1."""


class RequirementError(SvodError, ValueError):
    """A value a running kernel computed where NumPy raises ``ValueError`` at the call (``np.random.randint`` of
    bounds that span no integer: ``low >= high``), or one wider than svod computes for (a randint range of more
    than 2**32 integers), found when the kernel ran. ``ValueError`` as well, so code that catches NumPy's
    catches it; the message names the call's line and code."""


class CompileError(SvodError):
    """The backend's compiler rejected the rendered source. Carries the source and the compiler's log."""

    def __init__(self, message: str, *, source: str, log: str, kernel: str | None = None,
                 stage: Stage = "compile") -> None:
        self.source = source
        self.log = log
        numbered = "\n".join(f"{i + 1:4d} | {line}" for i, line in enumerate(source.splitlines()))
        super().__init__(f"{message}\n--- compiler output ---\n{log.strip()}\n--- source ---\n{numbered}",
                         kernel=kernel, stage=stage)
