"""A jitted function's plan for one signature, as a call runs it (``Prepared``, made by
``svod.frontend.jit_plans.Builder``): the arguments bound to the plan's buffers and variables, each run's draws
and loop checks, what the function returns read back, an error located in the function's source.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from svod import random
from svod.device.allocator import serves_host_memory
from svod.device.launch import evaluate
from svod.errors import LinAlgError, SvodError
from svod.frontend.pykernel import complex_view
from svod.ir import UOp
from svod.runtime.binding import Binder
from svod.runtime.plan import ExecutionPlan

COMPLEX_PART_NAMES = ("real", "imag")
"""The parts of a complex number, as the names of its plan variables end (``Prepared.parts``)."""
RANDOM_VARIABLES = frozenset({random.KEY_VARIABLE, random.LAUNCH_VARIABLE})
"""The plan variables that take each call's launch of svod's generator (``svod.frontend.random_arrays``)."""


@dataclass
class Prepared:
    """A jitted function's plan for one signature: the plan buffer of each array argument (None for a
    scalar), the scalars each run passes, what the function returns, and where each phase comes from."""

    plan: ExecutionPlan
    slots: list[int | None]
    variables: tuple[str, ...]
    returns: list[tuple[str, int | None, tuple[int, ...], int | None]]
    """Per returned name: the name, its temporary's plan buffer (None for an argument), its shape (none for a
    scalar, which comes back as a Python number), and the plan buffer of the scalar that holds its length
    where it is returned as its first elements only (``return y[:k]``; else None)."""
    returns_tuple: bool
    located: dict[str, Any]
    parameters: list[str]
    """The parameters each run passes (``Variant.parameters``), in order."""
    turns: list[TurnCheck]
    complex_slots: frozenset[int] = frozenset()
    """The plan buffers of complex arrays, each its float view's (``Builder.add_array``)."""
    complex_numbers: frozenset[str] = frozenset()
    """The parameters passed complex numbers: each is two plan variables, ``<name>_real`` and ``<name>_imag``, as
    a kernel takes one (``svod.frontend.pykernel``)."""
    arrays: dict[int, int] = field(init=False)
    """The plan buffer of each array argument, by its position among ``parameters``."""
    scalars: tuple[tuple[str, int], ...] = field(init=False)
    """The plan variables the run's arguments give, with each argument's position among ``parameters``."""
    parts: tuple[tuple[str, int, str], ...] = field(init=False)
    """The plan variables of the parts of complex numbers: ``(variable, argument position, "real" or "imag")``."""
    draws: bool = field(init=False)
    """Whether the plan draws: each run takes a launch of svod's generator (``svod.random``)."""

    def __post_init__(self) -> None:
        self.arrays = {position: slot for position, slot in enumerate(self.slots) if slot is not None}
        parts = {f"{name}_{part}": (self.parameters.index(name), part) for name in self.complex_numbers
                 for part in COMPLEX_PART_NAMES}
        self.scalars = tuple((name, self.parameters.index(name)) for name in self.variables
                             if name not in RANDOM_VARIABLES and name not in parts)
        self.parts = tuple((name, *parts[name]) for name in self.variables if name in parts)
        self.draws = bool(RANDOM_VARIABLES & set(self.variables))

    @functools.cached_property
    def returned_in_place(self) -> tuple[tuple[int, tuple[int, ...], np.dtype], ...]:
        """The plan buffer, shape and dtype of each temporary returned whole (its buffer exactly its shape), once
        each: a run that binds arrays (a call's dispatcher, ``svod.frontend.jit_dispatch``) computes it into a new
        array of its own, which it returns, as NumPy's function returns the array it made, where a copy of the
        plan's buffer would read it all again."""
        found: dict[int, tuple[int, tuple[int, ...], np.dtype]] = {}
        for _, slot, shape, length in self.returns:
            if slot is None or not shape or length is not None:
                continue
            buffer = self.plan.buffers[slot]
            if buffer.size == int(np.prod(shape)) > 0:  # (an empty buffer binds no array)
                found.setdefault(slot, (slot, shape, buffer.dtype.numpy))
        return tuple(found.values())

    @functools.cached_property
    def scalar_views(self) -> dict[int, np.ndarray]:
        """The memory of each plan buffer of a returned scalar, by plan buffer, where it is host memory: a run
        reads its value there rather than through a copy of the buffer (a small call's result costs as much to
        copy out as its kernel takes to run)."""
        found: dict[int, np.ndarray] = {}
        for _, slot, shape, _ in self.returns:
            if slot is None or shape:
                continue
            buffer = self.plan.buffers[slot]
            if buffer.size and buffer.device_object.caps.host_memory and \
                    serves_host_memory(buffer.device_object.allocator):
                found[slot] = buffer.host_view()
        return found

    @functools.cached_property
    def binder(self) -> Binder | None:
        """The plan's runs on arrays like those of the signature it was prepared for (a call's generated dispatcher,
        ``svod.frontend.jit_dispatch``): the arguments',
        then a new array for each temporary returned whole (``returned_in_place``)."""
        bound: list[tuple[int | str, int]] = [(slot, position) for position, slot in self.arrays.items()]
        bound += [(slot, len(self.parameters) + k) for k, (slot, _, _) in enumerate(self.returned_in_place)]
        return self.plan.binder(bound)

    def run(self, arguments: Mapping[str, Any], launch: random.Launch | None = None) -> Any:
        """Run the plan on a call's ``arguments`` (every parameter's, by name): its draws take ``launch`` (the
        process generator's next, by default), where it draws."""
        args = [arguments[name] for name in self.parameters]
        bound: dict[int | str, Any] = {}
        written_back: list[tuple[np.ndarray, np.ndarray]] = []
        for position, slot in self.arrays.items():
            value = complex_view(args[position]) if slot in self.complex_slots else args[position]
            if value.flags.c_contiguous:
                bound[slot] = value
            else:  # the plan's kernels use a bound array's memory as it is
                bound[slot] = np.ascontiguousarray(value)
                written_back.append((value, bound[slot]))
        scalars = self.variables_of(args, launch)
        with self.plan.executing:  # the results read in the plan's memory are this run's, not another thread's
            try:
                self.plan.execute(buffers=bound, **scalars)
            except LinAlgError:  # the run finished (as NumPy raises at its call, after the writes before it)
                for original, contiguous in written_back:
                    original[...] = contiguous
                raise
            except SvodError as err:
                self.locate(err)
                raise
            for original, contiguous in written_back:
                original[...] = contiguous
            return self.results(args)

    def variables_of(self, args: Sequence[Any], launch: random.Launch | None) -> dict[str, Any]:
        """The plan variables a run on ``args`` passes, its draws taking ``launch`` (the process generator's next,
        by default) where it draws; each loop that must make a turn checked."""
        if not self.scalars and not self.parts and not self.draws and not self.turns:
            return {}
        scalars = {name: args[position] for name, position in self.scalars}
        scalars |= {name: getattr(args[position], part) for name, position, part in self.parts}
        if self.draws:  # each call is a launch of its own (svod.random)
            scalars |= (launch or random.generator.next_launch()).variables()
        for turn in self.turns:
            turn.check(scalars)
        return scalars

    def results(self, args: Sequence[Any], made: Mapping[int, np.ndarray] | None = None) -> Any:
        """What the function returns, after a run on ``args`` that computed the temporaries of ``made`` (by plan
        buffer) into its arrays."""
        if not self.returns and not self.returns_tuple:
            return None
        if len(self.returns) == 1 and not self.returns_tuple:  # the common case, without a list
            return self.result(args, *self.returns[0], made or {})
        results = [self.result(args, name, slot, shape, length, made or {})
                   for name, slot, shape, length in self.returns]
        if self.returns_tuple:
            return tuple(results)
        return results[0] if results else None

    def result(self, args: Sequence[Any], name: str, slot: int | None, shape: tuple[int, ...],
               length: int | None, made: Mapping[int, np.ndarray]) -> Any:
        """A returned argument itself; a temporary's array the run computed it into (``made``), else its copy,
        shaped; a carried scalar's value; of an array returned as its first elements, those (a view of an
        argument, as NumPy's slice is)."""
        if slot is None:
            found = args[self.parameters.index(name)]
        elif slot in made:
            found = made[slot]
        elif not shape and slot in self.scalar_views and slot not in self.complex_slots:
            found = self.scalar_views[slot].item(0)
        else:
            values = self.plan.buffers[slot].numpy()
            if slot in self.complex_slots:
                values = values.view(np.result_type(values.dtype, np.complex64))
            found = values.reshape(shape) if shape else values[0].item()
        if length is None:
            return found
        return found[:int(self.plan.buffers[length].numpy()[0])]

    def locate(self, err: SvodError) -> None:
        located = self.located.get(err.kernel or "")
        if located is not None:
            located.locate(err)


@dataclass(frozen=True)
class TurnCheck:
    """A loop around phases whose bounds the run's integer arguments set and that must make a turn: a name
    only its body assigns is read after it (Python raises ``UnboundLocalError`` where it makes none)."""

    bounds: tuple[UOp, UOp, UOp]
    error: Callable[[int], SvodError]

    def check(self, values: dict[str, Any]) -> None:
        start, stop, step = (evaluate(bound, values) for bound in self.bounds)
        if not range(start, stop, step):
            raise self.error(stop)


__all__ = ["COMPLEX_PART_NAMES", "RANDOM_VARIABLES", "Prepared", "TurnCheck"]
