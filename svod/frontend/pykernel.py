"""``@svod.kernel``: a Python function as a kernel, compiled once per signature and called on arrays.

::

    @svod.kernel                                kernel(out, x)            kernel.build(out, x)
    def scale(out, x):                                │                         │
        for i in svod.prange(x.shape[0]):      signature: per array its dtype and ndim (and which dims are
            out[i] = x[i] * 2.0                equal), per scalar its kind; annotations fix it ahead
                                                      │
                                               cached translation (``translate.Translator``) ─▶ kernel SINK
                                                      │                                        + size variables
                                               svod.run(ast, arrays, **sizes)  (zero copy on the CPU)

Array sizes are variables of the kernel (``x_shape0``), so a call with new sizes reuses the compiled code;
dims of equal size at the first call share one variable (which lets svod prove ``out[i]`` in bounds when
``i`` runs over ``x.shape[0]``), and a call whose equal dims differ is another signature.
``static_shapes=True`` makes every size a constant of the kernel instead (one compile per shape): what
the CPU lowering needs today to give a reduction a register tile or split a MAX over partials.

Errors raised after translation (races, bounds, a device that cannot hold a dtype) name the statement
that built what they are about (``source.Located``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod import random
from svod.device import Buffer, Device, dlpack
from svod.dtype import DType, PtrDType, dtypes
from svod.errors import BufferMismatchError, GradientError, KernelSyntaxError, SvodError, VariableError
from svod.frontend import api, pylang
from svod.frontend.arithmetic import NarrowedIntError
from svod.frontend.buffers import Pool
from svod.frontend.builder import KernelBuilder
from svod.frontend.calls import Calls, PreparedCall
from svod.frontend.promotion import HOST, Platform
from svod.frontend.source import Located, Source, fitting_refusal
from svod.frontend.translate import Translator
from svod.frontend.values import ArrayValue, ComplexArray, ComplexValue
from svod.ir import Ops, UOp
from svod.ir.uop import memory_of
from svod.runtime.kernel import CachedKernel
from svod.runtime.taping import RECORDING

INT_LIMIT = (1 << 31) - 1
"""An ``int`` argument is a variable in ``[-INT_LIMIT, INT_LIMIT]`` (on a device of 32-bit indices, within the
sizes' limit, ``_size_limit``)."""


@dataclass(frozen=True)
class Built:
    """One signature's kernel: its SINK, the locations of its parts, and where each variable's value comes
    from (``(argument position, axis)`` for a size, the position for a scalar)."""

    ast: UOp
    located: Located
    sizes: tuple[tuple[str, int, int], ...]
    scalars: tuple[tuple[str, int], ...]
    variables: frozenset[str]
    """The variables the kernel kept (one a branch or loop it does not take used is gone)."""
    least: tuple[tuple[str, int, str, int], ...] = ()
    """The sizes a constant index needs: ``(variable, least size, array, axis)``, checked at each call."""
    bounds: tuple[tuple[str, int, int], ...] = ()
    """Each variable the kernel kept with its bounds: ``(name, lo, hi)``, checked at each call."""
    written: frozenset[int] = frozenset()
    """The slots of the arrays the kernel writes."""
    locals: tuple[tuple[str, DType], ...] = ()
    """Each scalar local the function holds at its end, with its dtype (an ``@svod.jit`` phase carries such a
    local to the phases after it)."""
    draws: bool = False
    """Whether the kernel draws from svod's process generator (``svod.random``): each launch then takes its
    key and the next launch number."""
    parts: tuple[tuple[str, int, str], ...] = ()
    """The variables of complex scalar arguments' parts: ``(name, argument position, "real" or "imag")``."""
    held: Mapping[str, str] = field(default_factory=dict)
    """The int arguments held to a narrow integer dtype's range, with its name (``Kernel._translate``): a value
    past it is refused in NumPy 2's words."""


@dataclass(frozen=True)
class BoundCall:
    """One call of a Python kernel, bound to its arguments (``Kernel.bind``) and ready to run: its SINK, the
    arrays (kernel argument order) and the value of each variable."""

    ast: UOp
    arrays: list[Any]
    var_vals: dict[str, Any]
    located: Located
    locals: dict[str, DType]
    """Each scalar local at the function's end, with its dtype (``Built.locals``)."""
    draws: bool = False
    """Whether each launch takes the process generator's next values (``Built.draws``): ``var_vals`` lacks them
    (``launch`` adds them)."""
    platform: Platform = HOST
    """What the kernel was translated for: its integers' and floats' widths."""
    arguments: tuple[Any, ...] = ()
    """The call's arguments, as the kernel sees them (``Kernel._argument``)."""
    varying: Mapping[str, int] = field(default_factory=dict)
    """Each variable a scalar argument gives, with that argument's position."""

    def launch(self) -> dict[str, Any]:
        """The variables of one launch: ``var_vals``, and for a kernel that draws from the process generator the
        key and the next launch number (``svod.random``)."""
        return {**self.var_vals, **random.generator.next_launch().variables()} if self.draws else self.var_vals


class Kernel:
    """What ``@svod.kernel`` makes of a function: call it on arrays, or ``build`` its kernel SINK."""

    svod_kernel = True

    def __init__(self, fn: Callable[..., Any], *, static_shapes: bool = False, name: str | None = None,
                 source: Source | None = None, parameters: list[str] | None = None,
                 bounds: Mapping[str, tuple[int, int]] | None = None) -> None:
        """``source`` and ``parameters``, where given, are a part of ``fn`` as a function of its own (a phase of
        an ``@svod.jit`` function): its statements and the names they take; ``bounds`` give ``int`` arguments
        bounds as ``svod.Int`` annotations do (the values a plan loop gives its variable)."""
        self.fn = fn
        self.name = name or fn.__name__
        self.static_shapes = static_shapes
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.parameters = positional_parameters(fn, self.name) if parameters is None else parameters
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
        except Exception as err:
            raise KernelSyntaxError(f"{self.name}: cannot read its annotations: {err}", kernel=self.name,
                                    stage="parse", value=str(err)) from err
        self.annotations = {name: _annotation(self.name, name, hint) for name, hint in hints.items()
                            if name in self.parameters}
        self.annotations |= {name: pylang.IntType(lo, hi) for name, (lo, hi) in (bounds or {}).items()}
        self._hinted_python = frozenset(name for name, hint in hints.items() if hint in (int, float))
        """Arguments hinted ``int`` or ``float``: a hint Python ignores, so a Python number there stays weak."""
        self._source: Source | None = source
        self._built: dict[tuple[Any, ...], Built] = {}
        self._calls = Calls(frozenset(position for position, name in enumerate(self.parameters)
                                      if isinstance(self.annotations.get(name), pylang.ConstType)))
        """The calls on numpy arrays and numbers prepared so far: a call like one before runs without
        translating, looking up or checking again what its signature fixes."""
        self._lock = threading.Lock()
        self.gradient_pool = Pool()
        """The host buffers the tapes of its ``svod.vjp`` take for their own work and give back."""

    def __repr__(self) -> str:
        return f"<svod.kernel {self.fn.__qualname__}>"

    @property
    def source(self) -> Source:
        """The statements the kernel runs: its function's, or the part of one given (a jit function's phase)."""
        if self._source is None:
            self._source = Source.of(self.fn)
        return self._source

    # ---- public -------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, device: str | Device | None = None) -> None:
        """Run once on ``args`` on ``device``: numpy arrays are worked on in place (on the CPU without a copy),
        svod Buffers and DLPack arrays too (a torch or cupy CUDA tensor in its own memory); scalars are passed by
        value. The device is by default the first argument's that lives on one (a Buffer, a CUDA tensor), else
        the CPU. Inside a ``svod.Tape`` block the tape runs the call, keeping what its gradient needs."""
        recorder = RECORDING.get()
        if recorder is not None:
            refuse_complex_on_tape(self.name, [*args])
            recorder.record(self, args, device)
            return
        calls = self._calls
        prepared = calls.last
        if (prepared is not None and prepared.run(args, device)) or calls.run(args, device):
            return
        key = calls.key(args, device)
        opened = api.get_device(_device_of(args) if device is None else device)
        bound = self.bind(*args, device=opened)
        try:
            kernel = api.compile(bound.ast, opened)
            api.run_compiled(kernel, bound.arrays, bound.launch())
        except SvodError as err:
            bound.located.locate(err)
            raise
        if key is not None and not bound.draws and not any(_is_complex(a) for a in args):
            self._prepare_call(key, args, device, kernel, bound)

    def _prepare_call(self, key: tuple[Any, ...], args: tuple[Any, ...], device: str | Device | None,
                      kernel: CachedKernel, bound: BoundCall) -> None:
        """Keep the launch of a call that just ran for the calls of the same ``key`` after it."""
        shared = kernel.array_launch(bound.var_vals, bound.varying)
        if shared is not None:
            self._calls.keep(key, PreparedCall(kernel, bound.located, device, args, self._calls.constants, *shared))

    def build(self, *args: Any) -> UOp:
        """The kernel SINK for arguments like ``args`` (their dtypes, ndims and kinds; not their values,
        except a ``svod.Const``'s)."""
        return self.bind(*args).ast

    def bind(self, *args: Any, device: Device | None = None, index_bits: int | None = None) -> BoundCall:
        """The kernel for ``args`` with the value of each of its variables, and the arrays to pass in kernel
        argument order. A ``device`` whose indices are 32-bit (WebGPU), or ``index_bits=32``, gets size
        variables bounded so that indices fit; a device without float64 gets float32 scalars where a float's
        are float64."""
        bits = index_bits if index_bits is not None else device.caps.index_bits if device is not None else 64
        platform = Platform(bits, device is None or dtypes.float64 in device.caps.element_dtypes)
        if len(args) != len(self.parameters):
            raise BufferMismatchError(f"{self.name} takes {len(self.parameters)} arguments "
                                      f"({', '.join(self.parameters)}), got {len(args)}", kernel=self.name,
                                      stage="bind", value=len(args))
        viewed: set[int] = set()
        values = [self._argument(position, a, viewed) for position, a in enumerate(args)]
        complexes = frozenset(viewed)
        key = (*self._signature(values, platform), complexes)
        with self._lock:
            built = self._built.get(key)
            if built is None:
                built = self._built[key] = self._translate(values, platform, complexes)
        self._check_apart(values, built)
        var_vals: dict[str, Any] = {name: _dims(values[position])[axis] for name, position, axis in built.sizes
                                    if name in built.variables}
        for name, least, array, axis in built.least:
            if var_vals.get(name, least) < least:
                raise BufferMismatchError(f"{array}.shape[{axis}] is {var_vals[name]}, and {self.name} indexes "
                                          f"dimension {axis} of {array} up to {least - 1}", kernel=self.name,
                                          stage="bind", value=var_vals[name])
        var_vals.update({name: values[position] for name, position in built.scalars if name in built.variables})
        var_vals.update({name: getattr(values[position], part) for name, position, part in built.parts
                         if name in built.variables})
        if not built.draws:  # the generator's variables, held by a loop that seeds and never drawn from
            var_vals.update({name: 0 for name in (random.KEY_VARIABLE, random.LAUNCH_VARIABLE)
                             if name in built.variables})
        self._check_bounds(built, var_vals, bits)
        arrays = [v for v in values if _is_array(v)]
        varying = {name: position for name, position in built.scalars if name in built.variables}
        return BoundCall(built.ast, arrays, var_vals, built.located, dict(built.locals), built.draws, platform,
                         tuple(values), varying)

    def plan_kernel(self, buffers: Sequence[Buffer],
                    scalars: Mapping[str, int | float | str] | None = None) -> tuple[UOp, dict[str, int | float]]:
        """For ``ExecutionPlan.add_kernel``: the kernel over ``buffers`` (each a one-dimensional array of
        its size, its array arguments in order) and ``scalars`` (its other arguments, by name), and the
        values the plan fixes: its sizes', and its numeric scalars'. ``shaped`` gives the buffers shapes."""
        return self.shaped(*[(b.size,) for b in buffers]).plan_kernel(buffers, scalars)

    def shaped(self, *shapes: tuple[int, ...], complexes: frozenset[int] = frozenset()) -> Shaped:
        """This kernel over plan buffers seen as arrays of ``shapes`` (one per argument, in order):
        ``plan.add_kernel(softmax.shaped((rows, cols), (rows, cols)), [dst, src])``. The arrays at positions
        ``complexes`` are complex, each plan buffer its float view's (``complex_view``: twice as long)."""
        return Shaped(self, tuple(tuple(int(d) for d in shape) for shape in shapes), complexes)

    def _check_apart(self, values: list[Any], built: Built) -> None:
        """Refuse a written array that shares memory with another argument. Plain Python reads each element as
        the writes before left it, which a kernel's work items, reading and writing at once, do not."""
        arrays = [(name, v) for name, v in zip(self.parameters, values, strict=True) if _is_array(v)]
        for slot, (name, value) in enumerate(arrays):
            for other, (other_name, other_value) in enumerate(arrays):
                if other != slot and slot in built.written and _overlap(value, other_value):
                    raise BufferMismatchError(f"{name} and {other_name} share memory, and {self.name} writes "
                                              f"{name}: pass one argument, or arrays apart", kernel=self.name,
                                              stage="bind", value=name)

    def _check_bounds(self, built: Built, var_vals: dict[str, Any], index_bits: int) -> None:
        """Refuse, in the words of the source, a size or ``int`` argument outside the bounds its variable has
        in the kernel (what svod proved the kernel's accesses and indices safe for)."""
        device = " on a device of 32-bit indices" if index_bits <= 32 else ""
        for name, lo, hi in built.bounds:
            value = var_vals.get(name)
            if value is None or lo <= value <= hi:
                continue
            size = next(((self.parameters[p], axis) for n, p, axis in built.sizes if n == name), None)
            if name in built.located.held:
                what = fitting_refusal(f"{size[0]}.shape[{size[1]}]" if size else f"argument {name}", value,
                                       built.located.held[name])
            elif size is not None:
                what = (f"{size[0]}.shape[{size[1]}] is {value}, more than the {hi} a dimension of the kernel's "
                        f"arrays may have{device} (their flat indices must fit)")
            elif isinstance(annotation := self.annotations.get(name), pylang.IntType):
                what = f"argument {name}={value} is outside its annotation {annotation}"
            elif isinstance(annotation, DType):
                what = f"argument {name}={value} does not fit its annotation svod.{annotation.name}, [{lo}, {hi}]"
            else:
                what = (f"argument {name}={value} is outside [{lo}, {hi}], the values an int argument takes{device}; "
                        f"an annotation gives it others: {name}: svod.Int[lo, hi]")
            raise VariableError(what, kernel=self.name, stage="bind", value=value)

    # ---- signatures ---------------------------------------------------------------------------------------

    def _argument(self, position: int, value: Any, viewed: set[int]) -> Any:
        """An argument as the kernel sees it: a numpy array, a svod Buffer, or a scalar; a complex array's float
        view (``complex_view``), its position added to ``viewed``."""
        name = self.parameters[position]
        annotation = self.annotations.get(name)
        if isinstance(annotation, pylang.ConstType):
            if not isinstance(value, annotation.kind) and not (annotation.kind is float and isinstance(value, int)):
                raise BufferMismatchError(f"argument {name} is a svod.Const[{annotation.kind.__name__}], got "
                                          f"{type(value).__name__}", kernel=self.name, stage="bind", value=value)
            return annotation.kind(value)
        if not isinstance(value, (np.ndarray, Buffer, np.generic, int, float)) and hasattr(value, "__dlpack__"):
            value = _from_dlpack(value, name, self.name)
        if isinstance(value, np.ndarray) and value.dtype.kind == "c" and annotation is None:
            viewed.add(position)
            return complex_view(value)
        if isinstance(value, (complex, np.complexfloating)) and annotation is None:
            return value
        if isinstance(value, (complex, np.complexfloating)) or (_is_array(value) and _kind(value) == "c"):
            raise BufferMismatchError(f"argument {name} is {_show(value)}, and its annotation says it is not complex",
                                      kernel=self.name, stage="bind", value=_show(value))
        if isinstance(annotation, pylang.ArrayType):
            if not _is_array(value) or _dtype(value) != annotation.dtype or len(_dims(value)) != annotation.ndim:
                raise BufferMismatchError(f"argument {name} must be a {annotation.ndim}-d array of "
                                          f"{annotation.dtype.name}, got {_show(value)}", kernel=self.name,
                                          stage="bind", value=_show(value))
        elif isinstance(annotation, pylang.IntType) and (isinstance(value, (bool, np.bool_))
                                                         or not isinstance(value, (int, np.integer))):
            raise BufferMismatchError(f"argument {name} is a {annotation}, got {_show(value)}", kernel=self.name,
                                      stage="bind", value=_show(value))
        elif isinstance(annotation, DType) and not isinstance(value, (int, float, np.number)):
            raise BufferMismatchError(f"argument {name} must be a {annotation.name} scalar, got {_show(value)}",
                                      kernel=self.name, stage="bind", value=_show(value))
        if not (_is_array(value) or isinstance(value, (int, float, complex, np.number, np.bool_))):
            raise BufferMismatchError(f"argument {name} must be an array (numpy, svod.Buffer, DLPack) or a number, "
                                      f"got {_show(value)}", kernel=self.name, stage="bind", value=_show(value))
        return value

    def _signature(self, values: list[Any], platform: Platform) -> tuple[Any, ...]:
        kinds: list[Any] = []
        for name, value in zip(self.parameters, values, strict=True):
            annotation = self.annotations.get(name)
            if isinstance(annotation, pylang.ConstType):
                kinds.append(("const", value))
            elif _is_array(value):
                kinds.append(("array", _dtype(value), len(_dims(value))))
            elif isinstance(value, (complex, np.complexfloating)):
                kinds.append(("complex", complex_part_dtype(value, platform), self._weak(name, value)))
            elif self._scalar_dtype(name, value, platform) == dtypes.bool:  # a bool is a constant of the kernel,
                kinds.append(("const", bool(value), isinstance(value, np.bool_)))  # NumPy's typed, Python's weak
            else:
                kinds.append(("scalar", self._scalar_dtype(name, value, platform), self._weak(name, value)))
        return (tuple(kinds), self._size_classes(values), platform)

    def _weak(self, name: str, value: Any) -> bool:
        """Whether scalar argument ``name`` is a Python number (weak in the kernel, as NEP 50 has it), not a
        numpy scalar or one annotated with a svod dtype (typed): ``1.5`` and ``np.float64(1.5)`` are one dtype
        and two kernels. A hint of ``float`` or ``int`` changes nothing, as in Python."""
        return isinstance(value, (int, float, complex)) and not isinstance(value, np.generic) \
            and (name in self._hinted_python or not isinstance(self.annotations.get(name), DType))

    def _scalar_dtype(self, name: str, value: Any, platform: Platform = HOST) -> DType:
        annotation = self.annotations.get(name)
        if isinstance(annotation, DType):
            return annotation
        if isinstance(annotation, pylang.IntType):
            return dtypes.index
        if isinstance(value, (bool, np.bool_)):
            return dtypes.bool
        if isinstance(value, np.number):
            return dtypes.from_numpy(value.dtype)
        return dtypes.index if isinstance(value, int) else platform.real

    def _size_classes(self, values: list[Any]) -> tuple[Any, ...]:
        """For each array dim, which dims before it have its size (one variable for them all), or with
        ``static_shapes`` the size itself."""
        sizes = [d for v in values if _is_array(v) for d in _dims(v)]
        if self.static_shapes:
            return tuple(sizes)
        first: dict[int, int] = {}
        return tuple(first.setdefault(size, k) for k, size in enumerate(sizes))

    # ---- translation --------------------------------------------------------------------------------------

    def _translate(self, values: list[Any], platform: Platform, complexes: frozenset[int] = frozenset()) -> Built:
        """The kernel for arguments like ``values``; ``complexes``: the positions of complex arrays (``values``
        holds their float views, ``complex_view``). An int argument that meets a narrow integer dtype
        (``NarrowedIntError``) is held to that dtype's range, and the kernel translated again: each round holds one
        more, so there are at most as many rounds as arguments."""
        held: dict[str, tuple[DType, int, int]] = {}
        while True:
            try:
                return self._translated(values, platform, complexes, held)
            except NarrowedIntError as err:
                lo, hi = err.bounds
                if err.variable in held:
                    _, was_lo, was_hi = held[err.variable]
                    if was_lo <= lo and hi <= was_hi:
                        raise  # (its bounds already are these: the value given is past them, ``_held``)
                    lo, hi = max(lo, was_lo), min(hi, was_hi)
                held[err.variable] = (err.dtype, lo, hi)

    def _translated(self, values: list[Any], platform: Platform, complexes: frozenset[int],
                    held: Mapping[str, tuple[DType, int, int]]) -> Built:
        """``_translate``'s round, the int arguments of ``held`` bounded to their dtypes' ranges."""
        index_bits = platform.index_bits
        source = self.source
        k = KernelBuilder(self.name)
        ndim = max((len(_dims(v)) for v in values if _is_array(v)), default=1) or 1  # a 0-d array: one element
        limit = _size_limit(ndim, index_bits)
        classes: dict[int, int | UOp] = {}
        sizes: list[tuple[str, int, int]] = []
        scalars: list[tuple[str, int]] = []
        parts: list[tuple[str, int, str]] = []  # a complex scalar's: (variable, position, "real" or "imag")
        floats: set[str] = set()  # float and uint64 arguments: variables holding their bits, any value theirs
        numbers: list[UOp] = []  # what stands for a Python number: sizes, int and float arguments
        env: dict[str, Any] = {}
        flat = 0
        for position, (name, value) in enumerate(zip(self.parameters, values, strict=True)):
            annotation = self.annotations.get(name)
            if isinstance(annotation, pylang.ConstType):
                env[name] = value
            elif _is_array(value):
                dims: list[int | UOp] = []
                for axis, size in enumerate(_dims(value)):
                    if self.static_shapes:
                        dims.append(size)
                    else:
                        same = next((classes[j] for j in classes if _flat_size(values, j) == size), None)
                        if same is None:  # bounded so that the flat index of every array it is a dim of fits
                            var_name = f"{name}_shape{axis}"
                            widest = max(len(_dims(v)) for v in values if _is_array(v) and size in _dims(v))
                            limit_of = _size_limit(widest, index_bits)
                            same = k.var(var_name, *_held(self.name, var_name, 0, limit_of, held))
                            sizes.append((var_name, position, axis))
                            numbers.append(same)
                        classes[flat] = same
                        dims.append(same)
                    flat += 1
                env[name] = ArrayValue(name, k.buffer(_dtype(value), tuple(dims)), tuple(dims))
                if position in complexes:
                    env[name] = ComplexArray(name, env[name], tuple(dims[:-1]))
            elif isinstance(value, (complex, np.complexfloating)):
                dtype = complex_part_dtype(value, platform)
                env[name] = ComplexValue(*(k.scalar(dtype, f"{name}_{part}") for part in ("real", "imag")))
                parts.extend((f"{name}_{part}", position, part) for part in ("real", "imag"))
                floats.update(f"{name}_{part}" for part in ("real", "imag"))
                if self._weak(name, value):
                    numbers.extend((env[name].re, env[name].im))
            else:
                dtype = self._scalar_dtype(name, value, platform)
                if dtype == dtypes.bool:
                    env[name] = _bool_constant(value)
                    continue
                annotation = self.annotations.get(name)
                if isinstance(annotation, pylang.IntType):
                    env[name] = k.var(name, *_held(self.name, name, annotation.lo, annotation.hi, held))
                elif dtype == dtypes.index:
                    bound = INT_LIMIT if index_bits > 32 else limit  # a 32-bit index has room for sums of them
                    env[name] = k.var(name, *_held(self.name, name, -bound, bound, held))
                elif dtype.is_float or dtype == dtypes.uint64:  # (a uint64's values run past a variable's int64)
                    env[name] = k.scalar(dtype, name)
                    floats.add(name)
                else:
                    env[name] = k.var(name, *_held(self.name, name, int(dtype.min), int(dtype.max), held), dtype)
                scalars.append((name, position))
                if self._weak(name, value):
                    numbers.append(env[name])
        translator = Translator(source, self.name, k, env, platform, frozenset(numbers))
        ast = translator.translate()
        kept = frozenset(u.arg[0] for u in ast.toposort() if u.op is Ops.DEFINE_VAR)
        translator.located.held = {name: dtype.name for name, (dtype, _, _) in held.items() if name in kept}
        least = tuple((var.arg[0], size, array, axis) for var, needs in translator.least_sizes.items()
                      for size, array, axis in needs)
        topo = ast.toposort()
        bounds = tuple(u.arg for u in topo if u.op is Ops.DEFINE_VAR and u.arg[0] not in floats)  # a float's: its bits
        written = frozenset(int(memory_of(u.src[0].src[0]).arg) for u in topo if u.op in (Ops.STORE, Ops.ATOMIC))
        return Built(ast, translator.located, tuple(sizes), tuple(scalars), kept, least, bounds, written,
                     _local_dtypes(translator.env, platform),
                     draws=translator.process_draws and bool({random.KEY_VARIABLE, random.LAUNCH_VARIABLE} & kept),
                     parts=tuple(parts))


@dataclass(frozen=True)
class Shaped:
    """A kernel with the shapes of the plan buffers it will run on (``Kernel.shaped``)."""

    kernel: Kernel
    shapes: tuple[tuple[int, ...], ...]
    complexes: frozenset[int] = frozenset()

    def plan_kernel(self, buffers: Sequence[Buffer],
                    scalars: Mapping[str, int | float | str] | None = None) -> tuple[UOp, dict[str, int | float]]:
        """The kernel over ``buffers`` (its array arguments, in order) and ``scalars`` (its other arguments by
        name: a number, or the name of the plan variable it is, which the plan renames it to), and the values
        the plan fixes. A scalar given by name is an integer (a loop's variable, or one a run passes)."""
        name = self.kernel.name
        scalars = dict(scalars or {})
        unknown = sorted(set(scalars) - set(self.kernel.parameters))
        if unknown:
            raise BufferMismatchError(f"{name} has no argument {unknown[0]}; its arguments are "
                                      f"{', '.join(self.kernel.parameters)}", kernel=name, stage="bind",
                                      value=unknown[0])
        arrays = [p for p in self.kernel.parameters if p not in scalars]
        if len(buffers) != len(arrays) or len(self.shapes) != len(buffers):
            raise BufferMismatchError(f"{name} takes {len(arrays)} arrays ({', '.join(arrays)}) besides the scalars "
                                      f"given; the plan gives {len(buffers)} buffers and {len(self.shapes)} shapes",
                                      kernel=name, stage="bind", value=len(buffers))
        examples = iter(self._examples(buffers))
        args = [(0 if isinstance(scalars[p], str) else scalars[p]) if p in scalars else next(examples)
                for p in self.kernel.parameters]
        bound = self.kernel.bind(*args, device=buffers[0].device_object if buffers else None)
        refuse_draws_in_plan(bound, name)
        named = {p for p, value in scalars.items() if isinstance(value, str)}
        return bound.ast, {k: v if isinstance(v, float) else int(v) for k, v in bound.var_vals.items()
                           if k not in named}

    def _examples(self, buffers: Sequence[Buffer]) -> list[np.ndarray]:
        """Arrays of the buffers' dtypes (the complex type of a complex one's parts) and the given shapes (their
        values never read)."""
        examples = []
        for position, (buffer, shape) in enumerate(zip(buffers, self.shapes, strict=True)):
            parts = 2 if position in self.complexes else 1
            if int(np.prod(shape)) * parts != buffer.size:
                raise BufferMismatchError(f"argument {position} of {self.kernel.name} has shape {shape}, and plan "
                                          f"buffer of {buffer.size} elements", kernel=self.kernel.name, stage="bind",
                                          value=shape)
            dtype = np.result_type(buffer.dtype.numpy, np.complex64) if parts == 2 else buffer.dtype.numpy
            examples.append(np.broadcast_to(np.zeros((), dtype), shape))
        return examples


def refuse_draws_in_plan(bound: BoundCall, name: str, where: str | None = None) -> None:
    """A plan replays a kernel with the values it fixed, natively and in loops: one that draws from the process
    generator would draw the same numbers at every run, so it is refused (``svod.random``). ``where``: the
    file and line to name (a phase of an ``@svod.jit`` function)."""
    if bound.draws:
        error = KernelSyntaxError if where is not None else SvodError
        raise error(f"{where + ': ' if where else ''}{name} draws random numbers from svod's process generator "
                    "(np.random without np.random.seed before), and a plan replays its kernels with the values "
                    "it fixed, so every run would draw the same numbers; seed in the kernel (np.random.seed(s), "
                    "s an argument), or call the kernel itself", kernel=name, stage="plan", value=name)


def positional_parameters(fn: Callable[..., Any], name: str) -> list[str]:
    """The names of ``fn``'s parameters, each a plain positional one (a kernel's arguments are its arrays and
    scalars, in order)."""
    found = list(inspect.signature(fn).parameters.values())
    for p in found:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            raise KernelSyntaxError(f"{name}: parameter {p.name} must be a plain positional parameter (no defaults, "
                                    "*args or keywords)", kernel=name, stage="parse", value=p.name)
    return [p.name for p in found]


COMPLEX_PARTS: dict[np.dtype[Any], np.dtype[Any]] = {np.dtype(np.complex64): np.dtype(np.float32),
                                                     np.dtype(np.complex128): np.dtype(np.float64)}
"""The complex dtypes svod computes on, each with its parts' dtype."""


def refuse_complex_on_tape(name: str, args: Sequence[Any]) -> None:
    """A tape takes real gradients: a call on complex numbers is refused there rather than differentiated as if
    its parts were independent reals."""
    if any(_is_complex(a) for a in args):
        raise GradientError(f"{name} is called on complex numbers inside a svod.Tape, and svod takes no gradients "
                            "through complex numbers; call it outside the tape", kernel=name, stage="gradient",
                            value="complex")


def complex_view(array: np.ndarray) -> np.ndarray:
    """A complex array's float view, without a copy: one more dimension, of size 2, the real part at index 0 and
    the imaginary part at 1 (NumPy's interleaved layout)."""
    return array[..., np.newaxis].view(array.real.dtype)


def complex_part_dtype(value: Any, platform: Platform) -> DType:
    """The dtype of a complex scalar's parts: a NumPy complex's own, a Python complex's the platform's float."""
    if isinstance(value, np.complexfloating):
        return dtypes.from_numpy(value.real.dtype)
    return platform.real


def _is_complex(value: Any) -> bool:
    return isinstance(value, (complex, np.complexfloating)) or \
        (isinstance(value, np.ndarray) and value.dtype.kind == "c")


def _bool_constant(value: bool | np.bool_) -> bool | UOp:
    """A bool argument as the kernel reads it: Python's a Python number (``True + True`` is 2, as in Python),
    NumPy's a typed bool, which promotes and computes as a bool array's element does (``np.True_ + np.True_`` is
    ``True``, ``np.True_ * 2.5`` float64, ``np.True_ - np.True_`` refused as NumPy refuses it)."""
    return UOp.const(dtypes.bool, bool(value)) if isinstance(value, np.bool_) else bool(value)


def _local_dtypes(env: dict[str, Any], platform: Platform) -> tuple[tuple[str, DType], ...]:
    """The dtype of each scalar local in ``env``: a value's own (an index is stored as int64), a Python
    number's as numba types it (a float the platform's real, an int int64)."""
    found = []
    for name, value in env.items():
        if not name.isidentifier():  # the draws' place (svod.frontend.randoms): no local of the function
            continue
        if isinstance(value, UOp) and not isinstance(value.dtype, PtrDType) and value.dtype.count == 1:
            found.append((name, dtypes.int64 if value.dtype == dtypes.index else value.dtype))
        elif isinstance(value, (bool, np.bool_)):
            found.append((name, dtypes.bool))
        elif isinstance(value, (int, np.integer)):
            found.append((name, dtypes.int64))
        elif isinstance(value, (float, np.floating)):
            found.append((name, platform.real))
    return tuple(found)


def _size_limit(ndim: int, index_bits: int) -> int:
    """The largest size a dim variable may take: the product of ``ndim`` of them fits the device's index
    arithmetic (``index_bits``) with room to spare for a GPU's launch rounding (a range padded to whole work
    groups) and for an offset loop (``range(i + 1, n)`` adds two sizes): a quarter of the positive range of
    32-bit indices, 2**62 of 64-bit ones, and never past ``INT_LIMIT``."""
    room = (1 << 29) if index_bits <= 32 else (1 << 62)
    limit = round(room ** (1 / ndim))
    while limit ** ndim > room:
        limit -= 1
    return min(INT_LIMIT, limit)


def _overlap(a: Any, b: Any) -> bool:
    """Whether two arrays (numpy or svod Buffers) may share memory."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    if isinstance(a, Buffer) and isinstance(b, Buffer):
        return a.base is b.base and a.offset < b.offset + b.size and b.offset < a.offset + a.size
    return False


def _flat_size(values: list[Any], flat: int) -> int:
    return [d for v in values if _is_array(v) for d in _dims(v)][flat]


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, Buffer))


def _dims(value: Any) -> tuple[int, ...]:
    return tuple(value.shape)


def _from_dlpack(value: Any, name: str, kernel: str) -> np.ndarray | Buffer:
    """A DLPack argument without a copy: a numpy view of host memory, a Buffer over a device's."""
    if dlpack.in_device_memory(value):
        return Buffer.from_dlpack(value)
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        raise BufferMismatchError(f"argument {name} cannot be read through DLPack: {err}", kernel=kernel,
                                  stage="bind", value=type(value).__name__) from err


def _device_of(args: Sequence[Any]) -> str:
    """The device of the first argument that lives on one, else the CPU."""
    for value in args:
        if isinstance(value, Buffer):
            return value.device
        if dlpack.in_device_memory(value):
            return dlpack.device_name(*dlpack.producer_device(value))
    return "CPU"


def _kind(value: Any) -> str:
    """A numpy array's dtype's kind (``"c"`` complex), or a Buffer's (one of svod's, never complex)."""
    return value.dtype.kind if isinstance(value, np.ndarray) else "b" if value.dtype == dtypes.bool else \
        "f" if value.dtype.is_float else "i"


def _dtype(value: Any) -> DType:
    if isinstance(value, Buffer):
        return value.dtype
    try:
        return dtypes.from_numpy(value.dtype)
    except SvodError as err:
        raise BufferMismatchError(f"svod has no dtype for numpy's {value.dtype}", stage="bind",
                                  value=str(value.dtype)) from err


def _show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.ndim}-d numpy array of {value.dtype}"
    if isinstance(value, Buffer):
        return f"a Buffer of {value.dtype.name}"
    return type(value).__name__


def _annotation(kernel: str, name: str, hint: Any) -> Any:
    if isinstance(hint, pylang.Cast):
        return hint.dtype
    if isinstance(hint, (pylang.ArrayType, pylang.ConstType, pylang.IntType, DType)):
        return hint
    if hint in (int, float):
        return dtypes.index if hint is int else dtypes.float64
    return None  # another annotation (np.ndarray, Any): the argument decides


def kernel(fn: Callable[..., Any] | None = None, *, static_shapes: bool = False,
           name: str | None = None) -> Any:
    """``@svod.kernel`` (or ``@svod.kernel(static_shapes=True)``): the function, read from its source, as a
    kernel compiled once per signature. See ``svod.frontend.pykernel``."""
    if fn is None:
        return lambda f: Kernel(f, static_shapes=static_shapes, name=name)
    return Kernel(fn, static_shapes=static_shapes, name=name)


def _held(kernel: str, name: str, lo: int, hi: int, held: Mapping[str, tuple[DType, int, int]]) -> tuple[int, int]:
    """The bounds ``lo``, ``hi`` of int argument or size ``name``, within those that keep what it makes within the
    narrow dtype it meets where it is ``held``. Where none are left (a plan's value known before the run, past
    them), it is refused as NumPy 2 refuses it."""
    if name not in held:
        return lo, hi
    dtype, least, most = held[name]
    narrowed = max(lo, least), min(hi, most)
    if narrowed[0] > narrowed[1]:
        value = lo if lo == hi else f"in [{lo}, {hi}]"
        raise KernelSyntaxError(fitting_refusal(f"argument {name}", value, dtype.name), kernel=kernel, stage="build",
                                value=lo)
    return narrowed


__all__ = ["COMPLEX_PARTS", "BoundCall", "Kernel", "complex_view", "kernel", "refuse_complex_on_tape"]
