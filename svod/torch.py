"""``@svod.kernel`` calls as torch operations: ``svod.torch.function(kernel)`` is a ``torch.autograd.Function``
whose forward runs the kernel on the tensors' own memory and whose backward runs its adjoint (``svod.vjp``).

::

    f = svod.torch.function(scaled)       a torch.autograd.Function subclass, called like the kernel
    (y,) = f(y, x, 2.0)                   forward: the kernel on numpy views of y's and x's memory (DLPack, no
                                          copy); returns the tensors it wrote, in argument order, as svod.vjp
    y.sum().backward()                    backward: the pullback svod.vjp gave, on the gradients torch passes;
                                          x.grad is the gradient with respect to x before the call

The tensors the kernel writes are changed in place, as torch's own in-place operations change them
(``ctx.mark_dirty``): while torch records gradients a leaf that requires grad is refused before the kernel
runs, as torch refuses it, and an earlier operation that saved a written tensor sees its version change. An
integer tensor takes no gradient, and a number none.

Torch is an optional dependency: ``import svod`` never imports it, and ``svod.torch.function`` imports it when
called, raising ``SvodError`` saying how to install it where it is missing. svod's gradients record kernel calls
on host memory, so the tensors are CPU tensors; a CUDA tensor is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from svod.errors import BufferMismatchError, GradientError, SvodError
from svod.frontend.adjoint import adjoint
from svod.frontend.gradients import vjp
from svod.frontend.pykernel import Kernel


def function(fn: Any, device: Any = None) -> Any:
    """``fn`` (an ``@svod.kernel``) as a ``torch.autograd.Function`` subclass: calling it (or its ``apply``) on
    the kernel's arguments, torch tensors and numbers, runs the kernel in place and returns the tuple of the
    tensors it writes, in argument order; their backward gives each float tensor's gradient with respect to its
    value before the call. ``device`` is the svod device the kernel and its adjoint run on: by default the CPU,
    on the tensors' memory; another copies the tensors to it and back, as a call on numpy arrays does."""
    torch = _torch()
    if not isinstance(fn, Kernel):
        raise GradientError(f"svod.torch.function takes an @svod.kernel, not {type(fn).__name__}: svod "
                            "differentiates one kernel call at a time (svod.vjp)", stage="gradient",
                            value=type(fn).__name__)

    def forward(ctx: Any, *args: Any) -> tuple[Any, ...]:
        return _forward(ctx, fn, args, device)

    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        return _backward(ctx, torch, grads)

    namespace = {"forward": staticmethod(forward), "backward": staticmethod(backward), "kernel": fn,
                 "__doc__": f"svod.torch.function of the kernel {fn.name}", "__module__": fn.fn.__module__,
                 "__qualname__": f"{fn.fn.__qualname__}_function"}
    base = _kernel_function(torch)
    return type(base)(f"{fn.name}_function", (base,), namespace)


def _torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise SvodError("svod.torch needs torch: python -m pip install torch", stage="gradient") from err
    return torch


@functools.cache
def _kernel_function(torch: Any) -> Any:
    """The base of the classes ``function`` makes: a ``torch.autograd.Function`` whose classes, called, are
    applied (``f(x)`` is ``f.apply(x)``), and whose ``apply`` checks the call before the kernel runs."""

    class CallableFunction(type(torch.autograd.Function)):  # type: ignore[misc]
        def __call__(cls, *args: Any) -> Any:
            return cls.apply(*args)

    class KernelFunction(torch.autograd.Function, metaclass=CallableFunction):
        kernel: Kernel

        @classmethod
        def apply(cls, *args: Any) -> Any:
            _check_call(cls.kernel, args, torch.is_grad_enabled())
            return super().apply(*args)

    return KernelFunction


def _check_call(fn: Kernel, args: tuple[Any, ...], recording: bool) -> None:
    """Refuse, before the kernel runs, a call of the wrong arity, and while torch records gradients
    (``recording``) a written tensor torch would refuse to see changed in place after the kernel changed it: a
    leaf that requires grad, or a view of one."""
    if len(args) != len(fn.parameters):
        raise BufferMismatchError(f"{fn.name} takes {len(fn.parameters)} arguments ({', '.join(fn.parameters)}), "
                                  f"got {len(args)}", kernel=fn.name, stage="bind", value=len(args))
    if not recording:
        return
    floats = frozenset(name for name, value in zip(fn.parameters, args, strict=True)
                       if hasattr(value, "is_floating_point") and value.is_floating_point())
    for name in adjoint(fn, floats).written:
        tensor = args[fn.parameters.index(name)]
        base = getattr(tensor, "_base", None)
        if getattr(tensor, "requires_grad", False) and (tensor.is_leaf or (base is not None and base.is_leaf)):
            raise GradientError(f"{fn.name} writes {name}, a leaf tensor that requires grad (or a view of one), "
                                "which torch does not let an operation change in place while it records "
                                f"gradients: pass {name}.clone(), or call under torch.no_grad()", kernel=fn.name,
                                stage="gradient", value=name)


def _forward(ctx: Any, fn: Kernel, args: tuple[Any, ...], device: Any) -> tuple[Any, ...]:
    """Run ``fn`` on host views of ``args``' tensors through ``svod.vjp``, keeping its pullback on ``ctx``."""
    views = [_host_view(fn, name, value) for name, value in zip(fn.parameters, args, strict=True)]
    result, pullback = vjp(fn, *views, device=device)
    written = [args[position] for position, view in enumerate(views)
               if any(view is array for array in result)]
    ctx.mark_dirty(*written)
    ctx.mark_non_differentiable(*(tensor for tensor in written if not tensor.is_floating_point()))
    ctx.pullback = pullback
    ctx.integer_results = [not tensor.is_floating_point() for tensor in written]
    return tuple(written)


def _host_view(fn: Kernel, name: str, value: Any) -> Any:
    """A tensor argument as a numpy array over its memory (DLPack, no copy); a number as it is."""
    if isinstance(value, (bool, int, float, np.number)):
        return value
    if not hasattr(value, "is_floating_point") or not hasattr(value, "__dlpack__"):
        raise BufferMismatchError(f"argument {name} of svod.torch.function({fn.name}) is a {type(value).__name__}: "
                                  "it takes torch tensors and numbers", kernel=fn.name, stage="bind",
                                  value=type(value).__name__)
    if value.dim() == 0:
        raise BufferMismatchError(f"argument {name} is a 0-d tensor: a kernel takes arrays of one dimension or more, "
                                  f"and numbers, which take no gradient; for {name}'s gradient pass "
                                  f"{name}.reshape(1) and read {name}[0] in the kernel", kernel=fn.name,
                                  stage="bind", value=name)
    if value.device.type != "cpu":
        raise GradientError(f"argument {name} is a tensor on {value.device}: svod.torch.function runs on CPU "
                            "tensors (svod's gradients record kernel calls on host memory); move it with .cpu()",
                            kernel=fn.name, stage="gradient", value=str(value.device))
    try:
        return np.from_dlpack(value.detach())
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        raise BufferMismatchError(f"argument {name}, a tensor of {value.dtype}, cannot be read through DLPack: "
                                  f"{err}", kernel=fn.name, stage="bind", value=str(value.dtype)) from err


def _backward(ctx: Any, torch: Any, grads: Sequence[Any]) -> tuple[Any, ...]:
    """The pullback on torch's gradients of the written tensors: one gradient per argument (None where torch
    asks for none, and for an integer tensor or a number). An integer result's gradient is not read."""
    cotangents = tuple(np.zeros(0) if integer else grad.detach().numpy()
                       for grad, integer in zip(grads, ctx.integer_results, strict=True))
    gradients = ctx.pullback(cotangents)
    return tuple(torch.from_numpy(gradient) if gradient is not None and needed else None
                 for gradient, needed in zip(gradients, ctx.needs_input_grad, strict=True))


__all__ = ["function"]
