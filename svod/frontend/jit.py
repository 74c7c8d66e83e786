"""``@svod.jit``: a whole function, as numba's ``@njit(parallel=True)`` takes it, compiled into a prepared plan.

::

    @svod.jit                                  the function's top-level statements, in order:
    def jacobi(a, b, steps):                   for t in range(steps):        a plan loop over t
        for t in range(steps):                     for i in prange(...):     a phase: one kernel (its nested
            for i in svod.prange(1, n - 1):            ...                   prange loops are its grid)
                b[i] = (a[i-1] + a[i+1]) / 2       ...
            for i in svod.prange(1, n - 1):
                a[i] = b[i]                    tmp = np.zeros(n)             a plan buffer, zeroed where it
        return a                                                             is made (a phase of its own)
                                               n = a.shape[0]                a definition: read where used
                                               other statements              one work item's kernel (a phase)

Each phase is translated as an ``@svod.kernel`` of the names it uses (the function's arrays and scalars, the
temporaries, the loop variables), so everything svod proves of a kernel holds for it: races between its
work items are refused, accesses are proven or checked, and its errors name the function's file and line.
The phases run in the order written, each seeing what the ones before wrote (the plan derives their
dependencies from the bytes they touch). A call binds the caller's arrays to the plan's buffers (on the CPU,
without a copy); one plan is prepared per signature (each array's dtype and shape, each scalar's kind, and
the values a temporary's shape is computed from). Its phases are kernels of constant sizes
(``static_shapes``), and a plan loop's variable is bounded by the values the loop gives it: what lets svod
prove a phase free of races and in bounds (an anti-diagonal sweep's ``table[i, i + d]``), and tile and split
it as constant sizes allow; a new shape compiles the phases again (the disk cache keeps them).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from svod import random
from svod.device import Device
from svod.errors import KernelSyntaxError
from svod.frontend import api
from svod.frontend.arrays import lower_arrays
from svod.frontend.binding import constant_key, signature_of, type_key
from svod.frontend.buffers import Pool
from svod.frontend.chains import closed_chains
from svod.frontend.inline import inline_calls
from svod.frontend.jit_dispatch import MISS, Dispatcher, dispatcher
from svod.frontend.jit_plans import WIDENING_ROUNDS, Builder, Variant
from svod.frontend.jit_prepared import Prepared
from svod.frontend.jit_tape import TapedCall
from svod.frontend.names import loaded, renamed
from svod.frontend.nest_fusion import Limits
from svod.frontend.nodes import stands_for, walk
from svod.frontend.phases import Definition, Item, Reader, Structure, inner_items, resolve
from svod.frontend.pykernel import Kernel, refuse_complex_on_tape
from svod.frontend.source import Source, refusal
from svod.frontend.temporaries import Temporary
from svod.runtime.cache import LeastRecentlyUsed
from svod.runtime.plan import ExecutionPlan
from svod.runtime.taping import RECORDING, Recorder

CALLS_KEPT = 64
"""The signatures of calls a jitted function keeps plans at hand for (``Jit._calls``)."""
PLANS_KEPT = 64
"""The plans a jitted function keeps (``Jit._plans``), the least recently used dropped first: each holds its
temporaries' buffers, so a program that calls with ever new shapes holds these at most (and those ``_calls``
still runs)."""


# ---- the decorator -------------------------------------------------------------------------------------------

class Jit:
    """What ``@svod.jit`` makes of a function: call it as the function (on the device given), or ``plan`` /
    ``save`` the plan it runs for some arguments."""

    svod_jit = True

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.signature = signature_of(fn, self.name)
        self.parameters = list(self.signature.parameters)
        self._defaults = _trailing_defaults(self.signature)
        if "device" in self.parameters:
            raise KernelSyntaxError(f"{self.name}: parameter device has the name of svod's own keyword (a call's "
                                    "device= says where it runs); name the parameter otherwise", kernel=self.name,
                                    stage="parse", value="device")
        Source.of(fn)  # a function whose source cannot be read is refused where it is decorated
        self._source: Source | None = None
        self._structure: Structure | None = None
        self._plans: LeastRecentlyUsed[Prepared] = LeastRecentlyUsed(budget=0, most=PLANS_KEPT)  # counted, not weighed
        self._calls: dict[tuple[Any, ...], _Call] = {}
        """The plans of calls with every argument an array or a number, by ``_call_key``, each with its generated
        dispatcher (``svod.frontend.jit_dispatch``): a call like one before runs its plan without binding,
        checking and reading its arguments again."""
        self._typed: dict[tuple[Any, ...], _Call] = {}
        """The last of ``_calls`` made for each call key read with its numbers' types alone (``_typed_key``): a call
        of a number new to ``_calls`` tries its dispatcher, which checks the values its plan is made for."""
        self._last: Dispatcher | None = None
        """The dispatcher of the last call that took one, which a call tries first (its own key uncomputed)."""
        self._variants: dict[tuple[Any, ...], Variant] = {}
        self._valued: dict[tuple[Any, ...], tuple[str, ...]] = {}
        """Per kind of arguments (``_kind``): the scalars whose kind is only their type that the host reads in the
        variant made for them (a float a loop's turns or an allocation's length come from), and the ints its
        rewriting computed anything with (``_sampled_number``), whose values a variant is then made for too (its
        rewriting wrote their values into the array statements, or decided by them)."""
        self._folded: dict[tuple[Any, ...], frozenset[str]] = {}
        """Per kind of arguments: the ints the host reads that its variants read as constants of their values
        (``_read_variant``)."""
        self._ranges: dict[tuple[Any, ...], dict[str, list[tuple[int, int]]]] = {}
        """Per kind of arguments: the ints its variants read at run time as indices, each with the ranges of
        values the variants made so far hold it to (``Variant.ranged``): a variant is read for the range a
        value is in."""
        self._lock = threading.Lock()
        self._taped: dict[str, Kernel] = {}
        """The kernels of the phases of calls made inside a ``svod.Tape`` block, by their source."""
        self.translations: dict[tuple[Any, ...], Any] = {}
        """Each phase's kernel as translated for the arguments it was built for: a round that settles the
        dtypes of carried scalars, or another signature's plan, translates only what changed."""
        self.gradient_pool = Pool()
        """The host buffers its gradients' tapes take for their own work and give back (``svod.vjp``, ``svod.grad``)."""

    def __repr__(self) -> str:
        return f"<svod.jit {self.fn.__qualname__}>"

    def __call__(self, *args: Any, device: str | Device = "CPU", **keywords: Any) -> Any:
        """Run the function on ``args`` and ``keywords`` (bound as Python binds them, defaults too) on
        ``device``: numpy arrays are worked on in place, scalars passed by value; returns what the function
        returns (a temporary comes back as a new array)."""
        recorder = RECORDING.get()
        if recorder is not None:
            refuse_complex_on_tape(self.name, [*args, *keywords.values()])
            return self.taped(recorder, args, keywords, device)
        last = self._last
        if last is not None and not keywords:  # a call like the one before, the common case
            result = last(args, device)
            if result is not MISS:
                return result
        given, missing = args, len(self.parameters) - len(args)
        if 0 < missing <= len(self._defaults) and not keywords:  # as Python binds them: the defaults complete
            args = (*args, *self._defaults[len(self._defaults) - missing:])
        key = None if keywords or len(args) != len(self.parameters) else _call_key(args, device, len(given))
        found = self._calls.get(key) if key is not None else None
        if found is None and key is not None:
            found = self._typed.get(_typed_key(key))
        if found is not None:
            result = found.dispatch(given, device)
            if result is not MISS:
                self._last = found.dispatch
                return result
        arguments = self._arguments(given, keywords)  # checked and converted once a call
        defaulted = self._defaulted(given, keywords)
        resolved = api.get_device(device)
        prepared = self.prepared(arguments, resolved, defaulted)
        result = prepared.run(arguments)  # (which prepares the plan, its errors located in the source)
        if key is not None:
            if len(self._calls) >= CALLS_KEPT:
                self._calls.clear()
                self._typed.clear()
            call = _Call(prepared, dispatcher(prepared, args, len(given), device, self.parameters,
                                              self._free_numbers(arguments, defaulted, resolved)))
            self._calls[key] = self._typed[_typed_key(key)] = call
            self._last = call.dispatch
        return result

    def _free_numbers(self, arguments: Mapping[str, Any], defaulted: frozenset[str], device: Device
                      ) -> dict[int, tuple[int, int] | None]:
        """The positions of the numbers whose values neither the plan for ``arguments`` nor its variant is made
        for (a scalar of its kernels, ``_signature``'s "scalar", whose variant is its type's, ``_kind``; an int
        the rewriting computed nothing with, ``_sampled_number``): any value of the type runs that plan, so a
        dispatcher checks their types only (a loop that calls with a new step size or count each turn takes
        it); and of those any value of a range runs (``_signature``'s "ranged": an index read at run time), with
        the range, which a dispatcher checks. The plan's run checks each variable's value against its bounds, as
        a first call's does."""
        with self._lock:
            variant = self.variant(arguments, defaulted=defaulted, limits=Limits.of(device.caps))
            kinds = self._signature(arguments, variant)
        free: dict[int, tuple[int, int] | None] = {}
        for position, ((name, value), kind) in enumerate(zip(arguments.items(), kinds, strict=True)):
            if kind[0] == "scalar" and not _sampled_number(variant, name, value):
                free[position] = None
            elif kind[0] == "ranged":
                free[position] = (kind[2], kind[3])
        return free

    def taped(self, recorder: Recorder, args: Sequence[Any], keywords: Mapping[str, Any],
              device: str | Device) -> Any:
        """The call run inside a ``svod.Tape`` block: each ``prange`` phase a kernel call the tape records
        (``svod.frontend.jit_tape``), on the caller's arrays."""
        arguments = self._arguments(args, keywords)
        with self._lock:
            call = TapedCall(self.name, self.fn, self.variant(arguments, taped=True), arguments, self._taped)
        return call.run(recorder, api.get_device(device))

    def run(self, args: Sequence[Any], device: str | Device = "CPU", launch: random.Launch | None = None) -> Any:
        """The call ``fn(*args, device=device)`` whose draws take ``launch`` of svod's generator, not the
        process generator's next (``svod.check`` gives plain Python and each device one launch)."""
        arguments = self._arguments(args, {})
        return self.prepared(arguments, api.get_device(device), self._defaulted(args, {})).run(arguments, launch)

    def plan(self, *args: Any, device: str | Device = "CPU", **keywords: Any) -> ExecutionPlan:
        """The prepared plan the function runs as for arguments like ``args`` and ``keywords``."""
        return self.prepared(self._arguments(args, keywords), api.get_device(device),
                             self._defaulted(args, keywords)).plan

    def save(self, path: str | os.PathLike[str], *args: Any, device: str | Device = "CPU", **keywords: Any) -> None:
        """Save the plan for arguments like ``args`` and ``keywords`` as a plan bundle (``svod.load_plan``; its
        buffers are named as the function's array arguments and temporaries)."""
        self.plan(*args, device=device, **keywords).save(path)

    @property
    def source(self) -> Source:
        """The function as svod reads it: the calls it makes of functions svod compiles into it inlined
        (``svod.frontend.inline``), at the first call (a function svod cannot take still imports)."""
        if self._source is None:  # read now: the globals it calls may be defined after it
            inlined = inline_calls(Source.of(self.fn), self.name)
            self._source = closed_chains(inlined, lambda node: resolve(inlined.names, node))
        return self._source

    @property
    def reader(self) -> Reader:
        return Reader(self.source, self.name)

    @property
    def structure(self) -> Structure:
        """The function's phases, definitions, temporaries and loops, read at the first call (as numba
        compiles at the first call: a function svod cannot take still imports)."""
        if self._structure is None:
            self._structure = self.reader.structure()
        return self._structure

    def prepared(self, arguments: Mapping[str, Any], device: Device, defaulted: frozenset[str] = frozenset()
                 ) -> Prepared:
        """The plan for arguments like ``arguments`` (as ``_arguments`` made them), the numbers of ``defaulted``
        constants of it (``_defaulted``), for the device's compiler pair too: the CPU's ``llvm`` and ``clang``
        pairs share its name and order a sum's adds differently."""
        with self._lock:
            variant = self.variant(arguments, defaulted=defaulted, limits=Limits.of(device.caps))
            key = (device.name, device.renderer.cache_key, device.compiler.cache_key,
                   *self._signature(arguments, variant))
            found = self._plans.get(key)
            if found is None:
                found = self._build(variant, arguments, device)
                self._plans.put(key, found, 0)
        return found

    def variant(self, arguments: Mapping[str, Any], taped: bool = False, defaulted: frozenset[str] = frozenset(),
                limits: Limits | None = None) -> Variant:
        """The function as the plan for ``arguments`` reads it: the parameters bound to constants (and the
        numbers of ``defaulted``) read as globals of their values (``binding``), NumPy array statements
        rewritten for the arrays' shapes (``svod.frontend.arrays``); once per kind of arguments. ``taped``: as a
        tape records it, each reduction an array statement reads at more elements than it depends on made into
        an array of its own first (``lower_arrays``). ``limits``: the device's, which nests fused into one kernel
        keep to (``svod.frontend.nest_fusion``; None: no nests fused)."""
        kinds = (taped, limits, *(_kind(value) if name not in defaulted else ("default", type_key(value),
                                                                       _number_key(value))
                          for name, value in arguments.items()))
        found = self._variants.get(self._variant_key(kinds, arguments))
        if found is None:
            found = self._read_variant(kinds, arguments, taped, defaulted, limits)
            self._variants[self._variant_key(kinds, arguments)] = found
        return found

    def _read_variant(self, kinds: tuple[Any, ...], arguments: Mapping[str, Any], taped: bool,
                      defaulted: frozenset[str], limits: Limits | None) -> Variant:
        """``variant``'s variant, read: the parameters bound to constants and the numbers of ``defaulted`` read
        as globals of their values. An int argument the host reads (a temporary's length, a slice's bound: the
        plan is made for its value alone, ``_signature``'s "value") is read so too, where it may be
        (``_foldable_value``; ``_folded``, found at the first variant of its kind): the kernels see the number,
        so a loop's bounds and a temporary's shape are known alike and the proofs of their accesses need no
        check at run time (nussinov's ``N``)."""
        folded = self._folded.get(kinds)
        found = self._read(arguments, taped, defaulted, folded or frozenset(), limits)
        if folded is None:
            folded = self._folded[kinds] = frozenset(name for name, value in arguments.items()
                                                     if name in found.host and self._foldable_value(name, value))
            if folded:
                found = self._read(arguments, taped, defaulted, folded, limits)
        valued = folded | self._valued_of(found, kinds, arguments)
        self._valued[kinds] = tuple(name for name in arguments if name in valued)
        ranges = self._ranges.setdefault(kinds, {})
        for name, low, high in found.ranged:
            ranges.setdefault(name, []).append((low, high))
        return found

    def _read(self, arguments: Mapping[str, Any], taped: bool, defaulted: frozenset[str], folded: frozenset[str],
              limits: Limits | None) -> Variant:
        """The variant of ``arguments`` with the parameters bound to constants and the numbers of ``defaulted``
        and ``folded`` read as globals of their values (``_read_variant``). The rewriting of its array statements
        reads ``folded``'s values as the call's, as it reads the numbers the runs pass."""
        constants = {name: value for name, value in arguments.items()
                     if _constant(value) or name in defaulted or name in folded}
        runtime = {name: value for name, value in arguments.items() if name not in constants}
        source = _with_constants(self.source, constants, self.name) if constants else self.source
        copied = [name for name, value in runtime.items()
                  if not isinstance(value, np.ndarray) and name in self._assigned_numbers]
        source = _with_local_copies(source, copied) if copied else source
        sampled: set[str] = set()
        indices: dict[str, tuple[int, int]] = {}
        known = {**runtime, **{name: arguments[name] for name in folded}}
        lowered = lower_arrays(source, self.name, known, taped, sampled, indices, limits)
        if lowered is None and not constants and not copied:
            host = _read_on_host(self.structure)
            return Variant(self.source, self.reader, self.structure, host, tuple(runtime), frozenset(sampled),
                           ranged=_ranged(indices, host))
        source, read = lowered if lowered is not None else (source, set())
        reader = Reader(source, self.name)
        structure = reader.structure()
        host = _read_on_host(structure) | read
        return Variant(source, reader, structure, host, tuple(runtime), frozenset(sampled), frozenset(read),
                       _ranged(indices, host))

    @staticmethod
    def _valued_of(variant: Variant, kinds: tuple[Any, ...], arguments: Mapping[str, Any]) -> frozenset[str]:
        """The numbers of ``arguments`` whose kind is their type alone that ``variant`` is read for the values
        of (``_valued``): those the host reads, and those the rewriting decided something by."""
        return frozenset(name for (name, value), kind in zip(arguments.items(), kinds[2:], strict=True)
                         if isinstance(kind, str) and (name in variant.host or _sampled_number(variant, name, value)))

    def _foldable_value(self, name: str, value: Any) -> bool:
        """Whether an argument the variant is read for the value of may be a constant of its kernels
        (``_read_variant``): a Python int (weakly typed, as its literal is) that the function never assigns nor
        returns as it is (``_kept``, which holds every name ``_with_local_copies`` copies)."""
        return type(value) is int and name not in self._kept

    def _variant_key(self, kinds: tuple[Any, ...], arguments: Mapping[str, Any]) -> tuple[Any, ...]:
        """What ``variant`` keys a variant by: the kinds of the arguments, the values of the numbers its variants
        are read for (``_valued``), and the range each index read at run time is in (``_ranges``)."""
        return (kinds, tuple(arguments[name] for name in self._valued.get(kinds, ())),
                tuple(_range_of(arguments[name], seen) for name, seen in self._ranges.get(kinds, {}).items()))

    def _build(self, variant: Variant, values: Mapping[str, Any], device: Device) -> Prepared:
        """The plan for ``values``. Where phases carry scalars, they are first translated until the dtypes of
        their buffers are those the phases make of them: a round settles each as the phase that makes it is
        translated, and only a scalar a later phase of a loop widens takes another round."""
        builder = Builder(self, variant, values, device)
        for _ in range(WIDENING_ROUNDS if builder.carried else 0):
            builder.translate()
            settled = all(n in builder.cells and builder.cell_dtype(n) == d for n, d in builder.seen.items())
            builder = Builder(self, variant, values, device, {**builder.cell_dtypes, **builder.seen})
            if settled:
                break
        return builder.build()

    def _arguments(self, args: Sequence[Any], keywords: Mapping[str, Any]) -> dict[str, Any]:
        """Each parameter's argument, bound as Python binds them (by position, by keyword, else its default;
        an array default is the one array Python's function keeps, updated in place as Python updates it)."""
        try:
            bound = self.signature.bind(*args, **keywords)
        except TypeError as err:
            raise KernelSyntaxError(f"{self.name}{self.signature}: {err}", kernel=self.name, stage="bind",
                                    value=str(err)) from None
        bound.apply_defaults()
        arguments = {name: np.from_dlpack(a) if not isinstance(a, (np.ndarray, np.generic, int, float)) and
                     hasattr(a, "__dlpack__") else a for name, a in bound.arguments.items()}
        for parameter, value in arguments.items():
            number = isinstance(value, (np.ndarray, int, float, np.integer, np.floating, np.bool_))
            if type(value) not in _COMPLEX_NUMBERS and (_complex_number(value) or not (number or _constant(value))):
                raise self._refused_argument(parameter, value)
            if type(value) in _COMPLEX_NUMBERS and {f"{parameter}_real", f"{parameter}_imag"} & set(arguments):
                raise self._refused_argument(parameter, value, f"its parts are carried as {parameter}_real and "
                                                               f"{parameter}_imag, names of other parameters")
        return arguments

    @functools.cached_property
    def _assigned_numbers(self) -> frozenset[str]:
        """The parameters the function assigns that no function or lambda inside it takes as its own, and returns
        or assigns other than by a plain assignment of the function's body (augmented, in a branch or a loop):
        passed a number, each is read as a local of its own the function's first statement sets
        (``_with_local_copies``). A plain assignment of the body keeps the parameter's name, as a plan reads it
        right (a name the body defines twice is refused where a kernel's loop reads it)."""
        inner = {arg.arg for node in walk(self.source.node) if node is not self.source.node
                 and isinstance(node, (ast.FunctionDef, ast.Lambda)) for arg in walk(node.args)
                 if isinstance(arg, ast.arg)}
        node = self.source.node
        plain = {id(target) for statement in node.body if isinstance(statement, ast.Assign)
                 for target in statement.targets if isinstance(target, ast.Name)}
        stored_deeper = {inner.id for inner in walk(node) if isinstance(inner, ast.Name)
                         and isinstance(inner.ctx, (ast.Store, ast.Del)) and id(inner) not in plain}
        kept = {name for name in _stored(node) if name in _returned(node) or name in stored_deeper}
        return frozenset(name for name in self.parameters if name in kept and name not in inner)

    @functools.cached_property
    def _foldable(self) -> frozenset[str]:
        """The parameters whose defaults are numbers the function never assigns: a call that leaves one to its
        default runs a plan with the number a constant of its kernels, as numba compiles an omitted argument
        (folded, a constant a loop's arithmetic shortens: a CRC's ``crc ^ poly``). The default is the one the
        signature held when the function was decorated, so its value cannot change between calls; a call
        that passes the parameter runs a plan with it a scalar, whatever its value."""
        return frozenset(name for name, parameter in self.signature.parameters.items()
                         if _plain_number(parameter.default) and name not in self._kept)

    @functools.cached_property
    def _kept(self) -> frozenset[str]:
        """The names the function assigns, augments, deletes, loops over, or returns as they are: a parameter
        among them stays the run's, never a constant of its kernels (``_foldable``, ``_foldable_value``)."""
        return frozenset(_stored(self.source.node) | _returned(self.source.node))

    def _defaulted(self, args: Sequence[Any], keywords: Mapping[str, Any]) -> frozenset[str]:
        """The parameters of ``_foldable`` that a call of ``args`` and ``keywords`` leaves to their defaults."""
        if not self._foldable:
            return frozenset()
        return self._foldable - set(self.parameters[:len(args)]) - keywords.keys()

    def _refused_argument(self, parameter: str, value: Any, why: str | None = None) -> KernelSyntaxError:
        """The refusal of an argument the plan cannot take, located at the function's ``def``."""
        what = f"of {value.dtype}" if isinstance(value, np.ndarray) else value.dtype.name \
            if isinstance(value, np.complexfloating) else type(value).__name__
        if why is None:
            why = "svod computes on complex64 and complex128 only" if _complex_number(value) else (
                "a jitted function takes NumPy arrays (np.asarray(...)), ints, floats, complex numbers and bools, "
                "and as constants of its plan None, strings, dtypes and tuples of these and numbers")
        refused = KernelSyntaxError(f"{self.name}'s argument {parameter} is {what}; {why}", kernel=self.name,
                                    stage="bind", value=parameter)
        source = Source.of(self.fn)
        refused.locate(f"{source.file}:{source.node.lineno}, the argument {parameter}")
        return refused

    def _signature(self, arguments: Mapping[str, Any], variant: Variant) -> list[Any]:
        """What a plan is prepared for: each array's dtype and shape, each scalar's kind (a bool's value, a
        kernel constant), each constant's value (``binding``), and the values of the scalars the host reads to
        make temporaries and definitions, and to rewrite array statements."""
        host = variant.host
        ranged = {name: (low, high) for name, low, high in variant.ranged}
        found: list[Any] = []
        for name, value in arguments.items():
            if isinstance(value, np.ndarray):
                found.append(("array", value.dtype.str, value.shape))
            elif _constant(value):
                found.append(("constant", constant_key(value)))
            elif name not in variant.parameters:  # a number left to its default (``_foldable``)
                found.append(("default", type_key(value), _number_key(value)))
            elif isinstance(value, (bool, np.bool_)) or name in host:
                found.append(("value", type_key(value), _number_key(value)))
            elif name in ranged:
                found.append(("ranged", type_key(value), *ranged[name]))
            else:
                found.append(("scalar", type_key(value)))
        return found


def _trailing_defaults(signature: inspect.Signature) -> tuple[Any, ...]:
    """The defaults of the last parameters, which complete a call that passes the ones before by position; none
    where a parameter is keyword-only (a call by position cannot reach past it)."""
    parameters = list(signature.parameters.values())
    if any(p.kind is p.KEYWORD_ONLY for p in parameters):
        return ()
    found: list[Any] = []
    for parameter in reversed(parameters):
        if parameter.default is parameter.empty:
            break
        found.append(parameter.default)
    return tuple(reversed(found))


def _call_key(args: Sequence[Any], device: str | Device, given: int) -> tuple[Any, ...] | None:
    """What decides the plan of a call whose arguments are all given by position (the caller's first ``given``,
    the defaults the rest), each a numpy array or a number (Python's or a NumPy scalar, as ``np.float64(1.5)``):
    the device, how many the caller gave (a number left to its default is a constant of the plan), each
    array's dtype and shape, each number's type and value (a value a plan may be prepared for). None for other
    arguments, which bind and check as the first call of a kind does."""
    key: list[Any] = [device, given]
    for value in args:
        kind = type(value)
        if kind is np.ndarray:
            key.append((value.dtype, value.shape))
        elif kind is int or kind is float or kind is bool or kind in _NUMPY_NUMBERS or kind in _COMPLEX_NUMBERS:
            key.append((kind, _number_key(value)))
        else:
            return None
    return tuple(key)


def _typed_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A call key (``_call_key``) with each number but a bool read as its type alone."""
    return tuple((part[0],) if type(part) is tuple and isinstance(part[0], type) and part[0] is not bool and
                 part[0] is not np.bool_ else part for part in key)


@dataclass(frozen=True)
class _Call:
    """A call key's plan (``Jit._calls``) and the dispatcher generated for calls of that key."""

    prepared: Prepared
    dispatch: Dispatcher


def _plain_number(value: Any) -> bool:
    """Whether a default is a real number, Python's or NumPy's (``_foldable``)."""
    return isinstance(value, (int, float, np.integer, np.floating, np.bool_))


def _number_key(value: Any) -> Any:
    """A number as a key of plans and calls: itself, but a NaN as one key of its own (a NaN is never equal to
    itself, so each call's NaN, a new object, would miss and prepare a plan again, and the plans would grow)."""
    if isinstance(value, (complex, np.complexfloating)):  # each part as a float is
        return ("complex", _number_key(value.real), _number_key(value.imag))
    return _NAN if isinstance(value, (float, np.floating)) and math.isnan(value) else value


_NAN = ("nan",)
"""The key of every NaN (``_number_key``)."""

_NUMPY_NUMBERS = frozenset((np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                            np.float16, np.float32, np.float64))
"""The NumPy scalar types a call passes as numbers (``_arguments`` takes them as it takes Python's)."""


_COMPLEX_NUMBERS = frozenset((complex, np.complex64, np.complex128))
"""The complex numbers a call passes: each a pair of plan variables, its parts (``Prepared.parts``)."""


def _complex_number(value: Any) -> bool:
    """Whether an argument is a complex number (one of ``_COMPLEX_NUMBERS``, or complex256, which svod refuses)."""
    return isinstance(value, (complex, np.complexfloating))


def _constant(value: Any) -> bool:
    """Whether an argument is a constant of the plan (``binding``): neither an array nor a number."""
    return not isinstance(value, np.ndarray) and constant_key(value) is not None


def _kind(value: Any) -> Any:
    """What a variant is read for, of one argument: an array's dtype and shape, a Python bool's value, a
    constant's value, another number's type (a variant is then read for the values of the numbers the host
    reads, ``Jit._valued``)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape)
    if isinstance(value, bool):
        return (type_key(value), value)
    if _constant(value):
        return ("constant", constant_key(value))
    return type_key(value)


def _ranged(indices: Mapping[str, tuple[int, int]], host: frozenset[str]) -> tuple[tuple[str, int, int], ...]:
    """``Variant.ranged`` of the indices the rewriting read at run time, but those the host reads anyway."""
    return tuple((name, *indices[name]) for name in sorted(indices) if name not in host)


def _range_of(value: Any, ranges: Sequence[tuple[int, int]]) -> Any:
    """The first of ``ranges`` that holds ``value`` (an int the variants read at run time as an index), else the
    value itself: a key no variant has yet."""
    return next(((low, high) for low, high in ranges if low <= value <= high), ("outside", value))


def _sampled_number(variant: Variant, name: str, value: Any) -> bool:
    """Whether ``name`` is a number whose value the rewriting of ``variant`` decided something by
    (``Variant.sampled``): a slice's bound, an operand NumPy refuses by its value (``a_i8 + n`` past int8's
    range), an int computed from a float (``a_i8 + int(f)``). Such a number reads a variant of its value, and
    its calls are not a dispatcher's whatever their value (``Jit._free_numbers``)."""
    return isinstance(value, (int, float, complex, np.number, np.bool_)) and name in variant.sampled


def _with_constants(source: Source, constants: Mapping[str, Any], name: str) -> Source:
    """``source`` with each parameter bound to a constant of the plan read as a global of its value: the
    function's other parameters are its parameters. One the function assigns is refused (its name would then
    be a local the plan cannot hold)."""
    for node in walk(source.node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in constants:
            raise refusal(source, name, node, f"{node.id} is {constants[node.id]!r}, a constant of the plan (a "
                                              "value neither an array nor a number), and the function assigns it; "
                                              "assign another name")
    node = stands_for(copy.copy(source.node), source.node)
    kept = [a for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs) if a.arg not in constants]
    node.args = ast.arguments(posonlyargs=[], args=kept, vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                              defaults=[])
    return Source(node, source.file, {**source.names, **constants}, source.described)


def _stored(node: ast.AST) -> set[str]:
    """The names ``node`` assigns, augments, deletes or loops over."""
    return {inner.id for inner in walk(node)
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del))}


def _returned(node: ast.AST) -> set[str]:
    """The names a ``return`` of ``node`` returns as they are, alone or in a tuple: a plan returns what it
    computes or the argument passed, so a number left to its default that the function returns stays the run's
    (``Jit._foldable``)."""
    found: set[str] = set()
    for inner in walk(node):
        if isinstance(inner, ast.Return) and inner.value is not None:
            values = inner.value.elts if isinstance(inner.value, ast.Tuple) else [inner.value]
            found |= {value.id for value in values if isinstance(value, ast.Name)}
    return found


def _with_local_copies(source: Source, names: Sequence[str]) -> Source:
    """``source`` with each of ``names``, number parameters the function assigns, read as a local of its own
    that the function's first statement sets to the argument: the plan carries the local as it carries any
    (the parameter itself, carried, read a buffer no run had set, and returned, the argument passed)."""
    local = {name: f"_svod_local_{name}" for name in names}
    node = renamed(source.node, local)
    first = 1 if node.body and isinstance(node.body[0], ast.Expr) and \
        isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str) else 0
    copies = [ast.copy_location(ast.Assign(targets=[ast.Name(local[name], ast.Store())],
                                           value=ast.Name(name, ast.Load())), node) for name in names]
    node.body = [*node.body[:first], *copies, *node.body[first:]]
    ast.fix_missing_locations(node)
    return Source(node, source.file, source.names, {**source.described, **{local[n]: n for n in names}})


def _read_on_host(structure: Structure) -> frozenset[str]:
    """The names the host reads before a run: those of temporaries' calls and definitions."""
    found: set[str] = set()

    def gather(items: Sequence[Item]) -> None:
        for item in items:
            if isinstance(item, Temporary):
                found.update(loaded([item.call]))
            elif isinstance(item, Definition):
                found.update(loaded([item.statement.value]))
            else:
                gather(inner_items(item))

    gather(structure.items)
    return frozenset(found)


NUMBA_OPTIONS = frozenset({"nopython", "nogil", "parallel", "cache", "fastmath", "boundscheck", "error_model",
                           "inline", "forceobj", "looplift"})
"""numba's ``@njit`` options, accepted so that a port changes only the decorator's name: svod's functions are
always compiled whole, in parallel where ``prange`` says, cached on disk, with IEEE arithmetic (which
``fastmath`` permits) and checked bounds; ``forceobj``/``looplift`` (object mode) it has not."""


def jit(fn: Callable[..., Any] | str | Sequence[Any] | None = None, *, name: str | None = None,
        **numba_options: Any) -> Any:
    """``@svod.jit``: the whole function as a prepared plan of kernels (``svod.frontend.jit``). As numba's
    ``@njit``, it takes a signature (``@svod.jit("f8(f8[:])")``: svod specialises on each call's arguments
    anyway) and numba's options (``NUMBA_OPTIONS``)."""
    unknown = sorted(set(numba_options) - NUMBA_OPTIONS)
    if unknown or numba_options.get("forceobj") or numba_options.get("looplift"):
        raise KernelSyntaxError(f"svod.jit takes name= and numba's options {', '.join(sorted(NUMBA_OPTIONS))} "
                                f"(object mode aside), not {', '.join(unknown) or 'object mode'}", stage="parse",
                                value=", ".join(unknown))
    if fn is None or not callable(fn):  # @svod.jit(...) or @svod.jit("signature")
        return lambda f: Jit(f, name=name)
    return Jit(fn, name=name)


__all__ = ["Jit", "jit"]
