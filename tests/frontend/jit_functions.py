"""Random ``@svod.jit`` functions, each run on a device and as plain Python (``svod.frontend.oracle``), the
outcomes compared. ``python -m tests.frontend.jit_functions COUNT [DEVICE ...] [--first SEED]`` sweeps COUNT
functions and prints how each outcome class fared (the test runs a fixed set: ``test_jit_functions.py``).

A function takes two vectors ``x`` and ``y`` of one size (0, 1, 2 or a prime), a matrix ``a`` of that size
squared, and a scalar ``c``; its body is drawn statement by statement between phases: in-place array
statements (whole arrays, slices, broadcasting scalars, ``@``), temporaries made once or in each turn of a
loop, scalars reduced from arrays (``sum``, ``np.dot``, ``max``) and counted (``k += 1``), ``prange`` loops,
``if``/``else`` on scalars the host cannot know before the run, ``for`` and ``while`` loops around phases
with ``break`` and ``continue`` under drawn conditions, early returns, and calls of plain helpers (below) that
update an array in place or return a value. It returns an array, a scalar or a tuple of both. Values stay
bounded (each update scales by at most 1.5 and adds at most a few units), so plain Python's float64 and
svod's agree to rounding.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import svod
from svod.device import Device
from svod.errors import KernelSyntaxError, SvodError
from svod.frontend.oracle import as_python, python_arguments

SIZES = [0, 1, 2, 3, 7, 13]
HELPERS = '''
def damp(v, by):
    v *= by


def energy(v):
    return np.dot(v, v) * 0.5
'''
"""Plain functions the generated ones call (compiled into them)."""


@dataclass
class Function:
    source: str
    name: str
    size: int
    reduces_extremes: bool
    """Whether it takes a max of an array (NumPy raises on an empty one, as svod must)."""


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.scalars = ["c"]
        """Scalars assigned so far, each a float."""
        self.counter = False
        self.temporaries: list[str] = []
        self.extremes = False
        self.fresh = 0
        self.returns: str | None = None

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def array(self) -> str:
        return self.rng.choice(["x", "y", *self.temporaries])

    def scalar(self) -> str:
        """A scalar expression of the scalars so far."""
        name = self.rng.choice(self.scalars)
        return self.rng.choice([name, f"0.5 * {name}", f"({name} + 1.0)", "1.25"])

    def reduction(self) -> str:
        kind = self.rng.randrange(4)
        v = self.array()
        if kind == 0:
            return f"{v}.sum()"
        if kind == 1:
            return f"np.dot({v}, {self.array()})"
        if kind == 2:
            self.extremes = True
            return f"{v}.max()"
        return f"energy({v})"

    def bounded(self, expr: str) -> str:
        """``expr`` kept within [-4, 4]: what every array update stores."""
        return f"np.tanh({expr})" if self.rng.random() < 0.5 else f"np.minimum(np.maximum({expr}, -4.0), 4.0)"

    def condition(self) -> str:
        kind = self.rng.randrange(3)
        if kind == 0:
            return f"{self.reduction()} > {self.scalar()}"
        if kind == 1 and self.counter:
            return f"k % 2 == {self.rng.randrange(2)}"
        return f"{self.rng.choice(self.scalars)} < {self.rng.choice(['0.0', '1.5', 'c'])}"

    def statement(self, indent: int, depth: int, looped: bool) -> None:
        rng = self.rng
        kind = rng.randrange(11 if depth < 2 else 7)
        if kind == 0:
            target = self.array()
            self.emit(indent, f"{target}[:] = {self.bounded(f'{self.array()} * 0.5 + {self.scalar()}')}")
        elif kind == 1:
            target = self.array()
            self.emit(indent, f"{target} *= {rng.choice(['0.5', '1.5', '-1.0'])}")
        elif kind == 2:
            target = self.array()
            self.emit(indent, f"{target}[1:] = {self.bounded(f'{target}[:-1] + {self.array()}[1:]')}")
        elif kind == 3:
            name = f"s{self.fresh}"
            self.fresh += 1
            self.emit(indent, f"{name} = {self.reduction()}")
            if depth == 0:  # defined on every path from here on
                self.scalars.append(name)
        elif kind == 4:
            self.emit(indent, "for i in prange(x.shape[0]):")
            self.emit(indent + 1, f"y[i] = {self.bounded(f'x[i] * 0.5 + y[i] * 0.25 + {self.scalar()}')}")
        elif kind == 5:
            self.emit(indent, f"y[:] = {self.bounded(f'a @ {self.array()} * 0.125')}")
        elif kind == 6:
            self.emit(indent, f"damp({self.array()}, {rng.choice(['0.5', '0.75'])})")
        elif kind == 7:
            self.emit(indent, f"if {self.condition()}:")
            self.block(indent + 1, depth + 1, looped)
            if rng.random() < 0.5:
                self.emit(indent, "else:")
                self.block(indent + 1, depth + 1, looped)
        elif kind == 8:
            self.emit(indent, f"for t in range({rng.randrange(0, 5)}):")
            self.loop_body(indent + 1, depth)
        elif kind == 9:
            self.counter = True  # (k = 0 opens the function)
            self.emit(indent, f"while k < {rng.randrange(1, 6)}:")
            self.emit(indent + 1, "k += 1")
            self.loop_body(indent + 1, depth)
        else:
            name = f"t{self.fresh}"
            self.fresh += 1
            self.emit(indent, f"{name} = {self.bounded(f'{self.array()} + {self.scalar()}')}")
            if depth == 0:
                self.temporaries.append(name)

    def loop_body(self, indent: int, depth: int) -> None:
        self.block(indent, depth + 1, True)
        if self.rng.random() < 0.5:
            self.emit(indent, f"if {self.condition()}:")
            self.emit(indent + 1, self.rng.choice(["break", "continue"]))
            self.block(indent, depth + 1, True)
        if self.rng.random() < 0.15 and self.returns is not None:
            self.emit(indent, f"if {self.condition()}:")
            self.emit(indent + 1, f"return {self.returns}")

    def block(self, indent: int, depth: int, looped: bool) -> None:
        for _ in range(self.rng.randrange(1, 4)):
            self.statement(indent, depth, looped)


def generate(seed: int) -> Function:
    rng = random.Random(seed)
    writer = _Writer(rng)
    writer.returns = rng.choice(["x", "y", "x, y", "y, c"])
    writer.block(1, 0, False)
    returned = writer.returns
    early = any(line.strip().startswith("return ") for line in writer.lines)
    if not early and len(writer.scalars) > 1 and rng.random() < 0.5:  # a scalar the function computed
        returned = f"{returned}, {writer.scalars[-1]}"
    name = f"generated_{seed}"
    body = "\n".join(writer.lines)
    if writer.counter:
        body = "    k = 0\n" + body
    source = (f"import numpy as np\nimport svod\nfrom svod import prange\n{HELPERS}\n\n"
              f"@svod.jit\ndef {name}(x, y, a, c):\n{body}\n    return {returned}\n")
    sizes = [s for s in SIZES if s > 0] if writer.extremes else SIZES
    return Function(source, name, rng.choice(sizes), writer.extremes)


def arguments(function: Function, seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    n = function.size
    return [rng.uniform(-2, 2, n), rng.uniform(-2, 2, n), rng.uniform(-1, 1, (n, n)), float(rng.uniform(-1, 2))]


def load(function: Function, folder: Path) -> Any:
    path = folder / f"{function.name}.py"
    path.write_text(function.source)
    spec = importlib.util.spec_from_file_location(function.name, path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[function.name] = module
    spec.loader.exec_module(module)
    return getattr(module, function.name)


def outcome(fn: Any, device: Device, args: Sequence[Any]) -> str:
    """``agree``, ``refused: <why>`` (a construct or a dtype the device states), or ``WRONG: ...``. A device
    without float64 runs the function on float32 arrays, as plain Python does then (within float32's
    rounding)."""
    narrow = svod.dtypes.float64 not in device.caps.element_dtypes
    if narrow:
        args = [a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args]
    tolerance = 1e-3 if narrow else 1e-6
    arguments = python_arguments(args)
    try:
        with np.errstate(all="ignore"):
            want = as_python(fn)(*arguments)
        raised = None
    except Exception as err:
        want, raised = None, err
    got_args = python_arguments(args)
    try:
        got = fn(*got_args, device=device)
    except KernelSyntaxError as err:
        return f"refused: {err.detail.split(': `')[0].split(': ', 1)[-1][:70]}"
    except SvodError as err:
        if raised is not None:
            return "agree"  # both refuse the run (an empty array's max)
        if "cannot hold" in err.detail or "float64" in err.detail:
            return "refused: device dtype"
        if "a while loop has no bound on its turns" in err.detail:  # WebGPU's, documented (README)
            return "refused: device loop bound"
        return f"WRONG: raised {err}"
    except Exception as err:  # anything but svod's own error is a crash
        return f"WRONG: crashed with {type(err).__name__}: {err}"
    if raised is not None:
        return f"WRONG: computed where Python raised {type(raised).__name__}: {raised}"
    wanted = want if isinstance(want, tuple) else (want,)
    results = got if isinstance(got, tuple) else (got,)
    if len(wanted) != len(results):
        return f"WRONG: returned {len(results)} values, Python {len(wanted)}"
    for position, (expected, actual) in enumerate(zip([*arguments, *wanted], [*got_args, *results], strict=True)):
        if not np.allclose(np.asarray(actual, float), np.asarray(expected, float), rtol=tolerance,
                           atol=tolerance * 1e-3 if not narrow else tolerance, equal_nan=True):
            return f"WRONG: value {position} is {actual!r}, Python {expected!r}"
    return "agree"


def sweep(count: int, devices: Sequence[Device], first: int = 0) -> Counter[str]:
    tally: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(first, first + count):
            function = generate(seed)
            fn = load(function, Path(folder))
            args = arguments(function, seed)
            for device in devices:
                result = outcome(fn, device, args)
                tally[result if not result.startswith("WRONG") else "WRONG"] += 1
                if result.startswith("WRONG"):
                    print(f"seed {seed} (n={function.size}) on {device.device}: {result}\n"
                          f"{textwrap.indent(function.source, '    ')}")
    return tally


def main(argv: Sequence[str]) -> None:
    args = list(argv)
    first = 0
    if "--first" in args:
        at = args.index("--first")
        first = int(args[at + 1])
        del args[at:at + 2]
    count = int(args[0]) if args else 200
    devices = [svod.get_device(n) for n in (args[1:] or ["CPU", "PYTHON", "CL:0"])]
    for name, n in sorted(sweep(count, devices, first).items()):
        print(f"{name:60s} {n}")


if __name__ == "__main__":
    main(sys.argv[1:])
