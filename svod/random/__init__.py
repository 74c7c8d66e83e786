"""Random numbers in kernels: ``np.random.*`` inside ``@svod.kernel`` functions, as numba users write them.

::

    @svod.kernel
    def estimate_pi(hits):
        for i in svod.prange(hits.shape[0]):
            x = np.random.random()
            y = np.random.random()
            hits[i] = 1 if x * x + y * y < 1.0 else 0

A kernel may call ``np.random.seed(s)``, ``random()`` (also ``random_sample()``, ``rand()``), ``uniform(low,
high)``, ``normal(loc, scale)``, ``standard_normal()`` (``randn()``), ``exponential(scale)``,
``standard_exponential()`` and ``randint(low, high)`` (or ``randint(high)``), with positional or keyword
arguments as NumPy names them, one number per call. Each draw is one block of Philox4x32-10 (the counter-based
generator of cuRAND and JAX: ``svod.random.philox``), a pure function of where the draw is made, so the
numbers do not depend on the device, the thread count, the tiling or the vector width.

**The stream layout.** A draw's block is Philox4x32-10 of::

    key     = (seed, launch)
    counter = (ordinal, element mod 2**32, element >> 32, stream)

- ``seed``, ``launch``: the process generator's key and the number of the launch (below), or the ``s`` of an
  ``np.random.seed(s)`` the launch made before the draw (its low 32 bits) and 0;
- ``stream``: 0 for the launch's serial code (statements outside any ``svod.prange``); ``k`` for the draws
  of the ``k``-th ``prange`` nest the launch opens (a ``prange`` outside any other, and the ``prange``s inside
  it), counted from 1 again after an ``np.random.seed`` in serial code;
- ``element``: 0 in serial code; in a nest, the work item: the linear index of the draw's ``prange`` turns in
  the nest's grid (``i * m + j`` for ``prange(n)`` around ``prange(m)``). A nest draws at one of its levels
  (draws under two ``prange``s of one nest, or under a ``prange`` whose bound depends on an enclosing one, are
  refused: their elements would meet);
- ``ordinal``: the draws made before this one by the same work item (by the serial code), counted through
  the sequential loops, branches and ``@svod.func`` calls it runs, as plain Python counts them. It restarts
  at 0 in each work item and at each ``np.random.seed``. (Inside a sequential loop whose every turn draws the
  same number of times, the kernel computes it from the turn's index, so the loop stays a loop without
  carried state; elsewhere it is a local the loop carries.)

All arithmetic of the layout is modulo 2**32.

**Seeding.** ``np.random.seed(s)`` in a kernel sets the key for the draws that follow it in that launch (in
its work item, where it is inside one) and starts their stream again: calling the kernel twice gives the same
numbers, as numba's seed does. A kernel that draws without such a seed draws from svod's process generator:
``svod.random.seed(s)`` on the host sets its key (by default one from the operating system's entropy, as
NumPy's) and its launch counter to 0, and every launch of a kernel that draws from it takes the next launch
number, so two calls give different numbers (as NumPy and numba do). The launch number wraps at 2**32.

**Plans.** A plan (``ExecutionPlan``) replays its kernels with the values it fixed when it was prepared,
natively and in loops, so a kernel of a plan could not take a new launch number per run: a kernel that draws
from the process generator is refused in a plan (``SvodError``). One that seeds before it draws runs there,
and gives the same numbers at every run, as it does when called.

**Jitted functions.** A call of an ``@svod.jit`` function is one launch, as if the function were one kernel
(``svod.frontend.random_arrays``): its plan takes the key and launch number as arguments of each run, the
process generator's next at each call (so each call draws new numbers, as numba's ``np.random`` does), and
carries the generator's state from phase to phase in scalars of its own (the key and launch, the nests opened,
the serial draws). In its own code (outside its ``prange`` loops) ``np.random.seed(s)`` sets the key as in a
kernel's serial code; a draw of one number is serial code's (stream 0, the next ordinal); an array of draws
(``np.random.random(n)``, ``normal(loc, scale, (n, m))``, ``rand(n, m)``, ...) is a nest of its own, as a
``prange`` over its elements in C order, each element the first draw of its work item (ordinal 0); and each
``prange`` of the function's own is a nest. A nest in a loop around phases is a new nest, with a new stream,
at every turn. ``np.random.permutation(n)`` draws one nest of sort keys (``sort_key`` of each element's
block: ``w0`` above ``w1``, 64 bits) and is their stable order; ``permutation(x)`` is ``x`` (its rows) in that
order, and ``shuffle(x)`` is ``x[...] = permutation(x)``. (A jitted function's ``prange`` that reduces a
scalar runs as a sequential loop, whose draws would be serial code's: draws in it are refused.)

**What a draw is.** From the block's words w0..w3:

- ``random()``: float64 ``((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53`` in [0, 1), 53 random bits; on a device
  without float64 (WebGPU) float32 ``(w0 >> 8) * 2**-24``, which is the float64 draw cut (not rounded) to a
  multiple of 2**-24;
- ``uniform(low, high)``: ``low + (high - low) * u``, u as ``random()``;
- ``standard_normal()``: Box-Muller, ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)`` with u1 from (w0, w1) and u2
  from (w2, w3) (float32: from w0 and w1); ``normal(loc, scale)``: ``loc + scale * z``;
- ``exponential(scale)``: ``scale * -log(1 - u)`` (1 - u is in (0, 1]: never log(0));
- the log and the cosine are svod's own, from ``+ - * /`` (``svod.random.philox.log`` and ``cos_two_pi``: a
  series after an exact reduction, within a few ulps of the true functions), and the square root IEEE 754's;
- ``randint(low, high)``: ``low + (w * span) >> 32`` with span = high - low, by Lemire's multiply-shift on the
  first of w0..w3 whose low product is at least ``2**32 mod span`` (unbiased), else on w3: biased with a
  probability below ``(span / 2**32) ** 4``. A span must be in 1 .. 2**32 (2**31 - 1 with 32-bit integers):
  constants outside are refused; bounds the kernel computes are tested where the call is made, and the run
  fails after the kernel with ``svod.errors.RequirementError`` (a ``ValueError``, as NumPy's ``low >= high``)
  where they span no integer or more than that. int64 (int32 on a device without 64-bit integers).

So every draw is the same bits on every device that rounds ``+ - * /`` and ``sqrt`` as IEEE 754 does (the
CPU, the PYTHON reference, OpenCL, CUDA), whatever its threads, tiles and vector width; a device without
float64 has the float32 forms. On WebGPU, whose WGSL lets the shader compiler fuse and approximate float
arithmetic, the words, ``random()`` and ``randint`` are the same bits and the rest may differ in the last
bits.

**Plain Python.** ``svod.check`` runs a kernel's function (a jitted function) as plain Python with
``np.random`` replaced by ``svod.random.philox.PlainRandom`` (this layout, written apart from the kernel's
UOps, with NumPy's array forms: ``size``, ``permutation``, ``shuffle``), for the launch the kernels ran with,
so a drawing kernel is compared with its function bit for bit. NumPy's own generator is never touched.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

from svod.errors import SvodError

KEY_VARIABLE = "svod_random_key"
"""The kernel variable that takes the process generator's key (a uint32)."""
LAUNCH_VARIABLE = "svod_random_launch"
"""The kernel variable that takes the launch's number (a uint32)."""
LIMIT = 1 << 32


@dataclass(frozen=True, slots=True)
class Launch:
    """The process generator's values for one launch of a kernel that draws from it."""

    key: int
    launch: int

    def variables(self) -> dict[str, int]:
        """The kernel variables that carry them."""
        return {KEY_VARIABLE: self.key, LAUNCH_VARIABLE: self.launch}


class ProcessGenerator:
    """svod's generator on the host: a 32-bit key and a count of the launches that drew from it. Thread-safe:
    each launch takes a number of its own."""

    def __init__(self, key: int | None = None) -> None:
        self._lock = threading.Lock()
        self.key = 0
        self.launches = 0
        self.seed(key)

    def seed(self, key: int | None = None) -> None:
        """Start again from ``key`` (an int in [0, 2**32), as NumPy's ``seed`` takes; None: from the operating
        system's entropy), at launch 0."""
        if key is None:
            key = secrets.randbits(32)
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < LIMIT:
            raise SvodError("a random seed is an int in [0, 2**32)", stage="device", value=key)
        with self._lock:
            self.key, self.launches = key, 0

    def next_launch(self) -> Launch:
        """The values of the next launch, which advance the count."""
        with self._lock:
            launch = Launch(self.key, self.launches)
            self.launches = (self.launches + 1) % LIMIT
        return launch


generator = ProcessGenerator()
"""The process generator kernels draw from (``seed`` sets it)."""


def seed(key: int | None = None) -> None:
    """``svod.random.seed(s)``: the launches that follow draw from key ``s`` (in [0, 2**32)), from launch 0 on,
    so a program that seeds once gives the same numbers at every run. None: a key from the operating
    system's entropy."""
    generator.seed(key)


__all__ = ["KEY_VARIABLE", "LAUNCH_VARIABLE", "Launch", "ProcessGenerator", "generator", "seed"]
