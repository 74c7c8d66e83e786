"""``svod.vjp`` and ``svod.grad``: a function's gradients by a tape (``svod.frontend.tape``) that records its one
call, or the calls of a function of kernel calls. Each takes the tape's own buffers from the pool of the function
differentiated (``gradient_pool``, ``svod.frontend.buffers``), and gives the caller new arrays."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from svod.errors import GradientError
from svod.frontend.adjoint_gemm import adjoint_of
from svod.frontend.buffers import Pool
from svod.frontend.pykernel import Kernel
from svod.frontend.tape import Tape, key_of


def vjp(fn: Any, *args: Any, device: Any = None) -> tuple[tuple[np.ndarray, ...], Callable[..., tuple[Any, ...]]]:
    """Run ``fn`` (an ``@svod.kernel``, or an ``@svod.jit`` function: ``_jit_vjp``) on ``args``; return
    ``(result, pullback)``: ``result`` the arrays it wrote, in argument order, and ``pullback(cotangent)`` (one
    array per result: a tuple, a dict by argument name, or the array itself for one result; that of an integer
    result is not read) one gradient per argument, with respect to its value before the call (None for an
    integer array or a number). Threads may call one pullback at once: its backward passes run one at a time."""
    if getattr(fn, "svod_jit", False):
        return _jit_vjp(fn, args, device)
    if not isinstance(fn, Kernel):
        raise GradientError(f"svod.vjp takes an @svod.kernel or an @svod.jit function, not {type(fn).__name__}; "
                            "svod.grad takes a function of kernel calls", stage="gradient", value=type(fn).__name__)
    args = _apart(fn, args)
    tape = Tape(checkpoint=False)
    tape._watch = False
    tape._lend(fn.gradient_pool, args)
    with tape:
        fn(*args, device=device)
    written = tape._records[0].adjoint.written
    result = tuple(args[fn.parameters.index(name)] for name in written)
    lock = threading.Lock()  # (the tape holds one pass's gradients and buffers: threads pull one at a time)

    def pullback(cotangent: Any) -> tuple[Any, ...]:
        if isinstance(cotangent, Mapping):
            unknown = sorted(set(cotangent) - set(written))
            if unknown:
                raise GradientError(f"{fn.name} writes {', '.join(written)}, not {unknown[0]}", kernel=fn.name,
                                    stage="gradient", value=unknown[0])
            given = [(result[written.index(name)], value) for name, value in cotangent.items()]
        else:
            values = (cotangent,) if len(result) == 1 and not isinstance(cotangent, tuple) else tuple(cotangent)
            if len(values) != len(result):
                raise GradientError(f"{fn.name} writes {len(result)} arrays ({', '.join(written)}); the pullback "
                                    f"was given {len(values)} cotangents", kernel=fn.name, stage="gradient",
                                    value=len(values))
            given = list(zip(result, values, strict=True))
        with lock:
            tape.zero()
            tape.backward(grads=[(array, value) for array, value in given if array.dtype.kind == "f"])
            return tuple(tape.grad(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else None for a in args)

    return result, pullback


def _jit_vjp(fn: Any, args: tuple[Any, ...], device: Any) -> tuple[tuple[np.ndarray, ...],
                                                                    Callable[..., tuple[Any, ...]]]:
    """``vjp`` of an ``@svod.jit`` function, run on a tape: its results are the arguments its kernels wrote, in
    argument order, then the arrays it returns that are none of its arguments."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    for k, array in enumerate(arrays):
        if any(np.may_share_memory(array, other) for other in arrays[:k]):
            raise GradientError(f"two array arguments of {fn.name} share memory: a pullback gives one gradient per "
                                "argument; pass copies", kernel=fn.name, stage="gradient", value=array.shape)
    tape = Tape()
    tape._one_call = True
    tape._lend(fn.gradient_pool, args)
    tape._wanted = frozenset(key_of(a) for a in arrays if a.dtype.kind == "f")
    with tape:
        returned = fn(*args) if device is None else fn(*args, device=device)
    written = {record.keys[record.kernel.parameters.index(name)] for record in tape._records
               for name in record.adjoint.written}
    made = returned if isinstance(returned, tuple) else (returned,)
    result = tuple([a for a in arrays if key_of(a) in written] +
                   [r for r in made if isinstance(r, np.ndarray) and not any(r is a for a in arrays)])
    lock = threading.Lock()  # (the tape holds one pass's gradients and buffers: threads pull one at a time)

    def pullback(cotangent: Any) -> tuple[Any, ...]:
        values = (cotangent,) if len(result) == 1 and not isinstance(cotangent, tuple) else tuple(cotangent)
        if len(values) != len(result):
            raise GradientError(f"{fn.name} gives {len(result)} arrays; the pullback was given {len(values)} "
                                "cotangents", kernel=fn.name, stage="gradient", value=len(values))
        with lock:
            tape.zero()
            tape.backward(grads=[(array, value) for array, value in zip(result, values, strict=True)
                                 if array.dtype.kind == "f" and key_of(array) in written])
            return tuple(tape.grad(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else None for a in args)

    return result, pullback


def _apart(fn: Kernel, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with a copy in place of each array the kernel only reads that shares memory with another it only
    reads, before it: the tape keys gradients by memory, and a pullback gives one gradient per argument. (An array
    sharing memory with one the kernel writes stays, for the call to refuse.)"""
    floats = frozenset(name for name, value in zip(fn.parameters, args, strict=False)
                       if isinstance(value, np.ndarray) and value.dtype.kind == "f")
    written = adjoint_of(fn, floats, args).written
    read = [(name, value) for name, value in zip(fn.parameters, args, strict=False)
            if isinstance(value, np.ndarray) and name not in written]
    copied = {name for k, (name, value) in enumerate(read)
              if any(np.may_share_memory(value, other) for _, other in read[:k])}
    return tuple(value.copy() if name in copied else value
                 for name, value in zip(fn.parameters, args, strict=False))


def _refuse_shared_arguments(fn: Any, args: tuple[Any, ...], numbers: tuple[int, ...]) -> None:
    """The tape keeps one gradient per buffer, so an argument differentiated that shares memory with another
    array argument would be given the sum over both (the derivative along the buffer, not the argument's)."""
    for number in numbers:
        others = (a for k, a in enumerate(args) if k != number and isinstance(a, np.ndarray))
        if any(np.may_share_memory(args[number], other) for other in others):
            raise GradientError(f"argument {number} of {getattr(fn, '__name__', fn)} shares memory with another "
                                "array argument: svod.grad gives one gradient per argument; pass copies",
                                stage="gradient", value=number)


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """The function that returns the gradient of ``fn``'s result (a one-element array an ``@svod.kernel`` call
    wrote) with respect to its array arguments ``argnums`` (an int: one gradient; a tuple: a tuple of them),
    as ``jax.grad``. ``fn`` runs on a tape (``Tape``): it may call kernels in any order, in place too; it may
    be an ``@svod.jit`` function."""
    if isinstance(fn, Kernel):
        raise GradientError(f"svod.grad takes a function returning a one-element array; {fn.name} is a kernel, "
                            "which returns nothing: use svod.vjp", kernel=fn.name, stage="gradient", value=fn.name)
    many = not isinstance(argnums, int)
    numbers = tuple(argnums) if not isinstance(argnums, int) else (argnums,)
    pool = Pool()  # (a jit function's gradients take its own, shared by every svod.grad and svod.vjp of it)

    @functools.wraps(fn)
    def gradient(*args: Any, **keywords: Any) -> Any:
        for number in numbers:
            if number >= len(args) or not isinstance(args[number], np.ndarray) or args[number].dtype.kind != "f":
                raise GradientError(f"argument {number} of {getattr(fn, '__name__', fn)} is no float numpy array "
                                    "to take a gradient with respect to", stage="gradient", value=number)
        _refuse_shared_arguments(fn, args, numbers)
        tape = Tape()
        tape._sealed = bool(getattr(fn, "svod_jit", False))
        tape._lend(getattr(fn, "gradient_pool", pool), [args[number] for number in numbers])
        with tape:
            result = fn(*args, **keywords)
        tape._wanted = frozenset(key_of(args[number]) for number in numbers)
        tape.backward(result)
        for number in numbers:
            if key_of(args[number]) not in tape._arrays:
                raise GradientError(f"argument {number} of {getattr(fn, '__name__', fn)} was passed to no kernel "
                                    "call: svod.grad differentiates kernel calls, and NumPy's operations on it are "
                                    "not recorded; write them as a kernel", stage="gradient", value=number)
        found = tuple(tape.grad(args[number]) for number in numbers)
        tape.reset()  # (its copies back to the pool now, for the next call)
        return found if many else found[0]

    return gradient


__all__ = ["grad", "vjp"]
