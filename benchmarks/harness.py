"""``svod bench``: svod measured beside numpy, numba and tinygrad on the same work, in the same process.

Every metric is a median over repeated runs after a warm-up. Where a peer can do the same work, it runs
too and the report gives svod/peer ratios, saying which direction is better. Metric names are stable
(the README lists them) because ``--json`` output is compared across runs and machines.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import svod
from benchmarks.algorithms import FULL_SIZES, QUICK_SIZES, agree, algorithms, numba_runner
from benchmarks.blas_anchor import openblas_core, openblas_gflops, torch_gflops, widest_core
from benchmarks.busy import busy_metrics, competing_process
from benchmarks.distributed import shard_overhead
from benchmarks.fma_peak import fma_peak_gflops
from benchmarks.framework_peers import FrameworkPeers
from benchmarks.gradient_costs import gradient_step
from benchmarks.gradient_programs import MoreSizes
from benchmarks.gradients import Sizes as GradientSizes
from benchmarks.jit_programs import ARRAY_PROGRAMS, PROGRAMS, Program, copies
from benchmarks.jit_programs import agree as jit_agree
from benchmarks.numpy_programs import NUMPY_PROGRAMS
from benchmarks.peers import KernelLanguages, Numba, Tinygrad, blas_threads
from benchmarks.results import Metric, failure, plot, progress_reporter, report, to_json
from benchmarks.rounds import SuiteContestants, rounds_ms
from benchmarks.spellings import (
    ARRAY_WRITTEN,
    NUMBA_WRITTEN,
    WRITTEN,
    Peers,
    numba_form,
    peer_runners,
    row_spellings,
    spelling_metrics,
    transpose_spellings,
)
from benchmarks.suite import row_kernels, suite, tinygrad_spelling
from benchmarks.timing import fresh_process_ms, median_seconds, sample_seconds
from svod import ExecutionPlan, dtypes
from svod.backends import DeviceRegistry, default_registry
from svod.config import settings
from svod.device import Device
from svod.errors import SvodError
from svod.ir import UOp
from svod.runtime import KernelCache
from svod.workloads import (
    Workload,
    affine,
    check,
    compute_bound,
    gather,
    gather_kernel,
    load,
    matmul,
    saxpy,
    tiny,
    total,
)


@dataclass(frozen=True)
class Sizes:
    elements: int
    copy_bytes: int
    repeats: int
    big_matmul: int
    compiles: int
    quick: bool
    """Whether the suite runs at its --quick sizes."""
    algorithms: tuple[int, int, int, int, int] | None = None
    """The plan algorithms' sizes (``benchmarks.algorithms``); by default the issue's, or quick ones."""
    long_plans: tuple[int, ...] = (1000, 4000)
    """Plan lengths whose prepare time and replay cost are measured beside the short plans'."""
    jit_scale: str | None = None
    """The ``@svod.jit`` programs' sizes (``benchmarks.jit_programs``: ``full``, ``quick`` or ``small``); by
    default the issue's, or quick ones."""
    jit_first_calls: bool = True
    """Whether each jit program's first call is measured (two fresh processes per program)."""
    spelling_rows: int | None = None
    """The rows (the mlp's batch) of the row kernels' spellings (``Bench.row_spellings``); by default the
    suite's."""
    spelling_peers: bool = True
    """Whether the spellings are timed beside the suite's peers too (``torch.compile`` compiles each kernel for
    seconds), or beside numpy alone."""
    fresh_processes: int = 3
    """How many fresh processes the figures taken in one (a cold start, a bundle's load) are the median of."""
    gradients: tuple[GradientSizes, MoreSizes] | None = None
    """The differentiated programs' sizes (``benchmarks.gradient_costs.all_programs``); by default the issue's,
    or quick ones."""


QUICK = Sizes(elements=1 << 22, copy_bytes=64 << 20, repeats=5, big_matmul=512, compiles=3, quick=True)
FULL = Sizes(elements=1 << 24, copy_bytes=256 << 20, repeats=15, big_matmul=1024, compiles=8, quick=False)

class Bench:
    def __init__(self, device: Device, sizes: Sizes, tinygrad: Tinygrad, progress: Callable[[str], None],
                 workloads: list[Workload] | None = None) -> None:
        self.device = device
        self.sizes = sizes
        self.tg = tinygrad
        self.progress = progress
        self.workloads = workloads
        """The kernel suite's workloads; by default ``benchmarks.suite`` at the sizes' scale."""
        self.rng = np.random.default_rng(0)
        self.failed: dict[str, str] = {}
        """The steps of ``run`` that raised, each with why (``failure``): their figures are missing."""

    def kernel_suite(self) -> list[Metric]:
        """The suite of user kernels (the bench's ``workloads``), checked against numpy and timed beside
        numpy, numba, tinygrad and the framework and kernel-language peers (``SuiteContestants``)."""
        return self.suite_contestants().timed(self.progress)

    def suite_contestants(self) -> SuiteContestants:
        """Every contestant of every suite kernel, compiled and checked (against numpy), ready to time."""
        kernels = suite(self.sizes.quick) if self.workloads is None else self.workloads
        static = suite(self.sizes.quick, static_shapes=True) if self.workloads is None else []
        self.progress("kernel suite: compile and check")
        for kernel in [*kernels, *static]:
            check(kernel, self.device)
        numba = Numba(settings.threads)
        spellings = [tinygrad_spelling(kernel) for kernel in kernels]
        runners: dict[str, list[Callable[[], object] | None]] = {
            "svod": [load(kernel, self.device) for kernel in kernels],
            "svod static": [load(kernel, self.device) for kernel in static] or [None] * len(kernels),
            "numpy": [kernel.numpy for kernel in kernels],
            "numba": [numba.runner(kernel) for kernel in kernels],
            "tinygrad": [None if self.tg.error or isinstance(spelling, str) else self.tg.suite_runner(kernel, spelling)
                         for kernel, spelling in zip(kernels, spellings, strict=True)]}
        frameworks, languages = FrameworkPeers(), KernelLanguages()
        found = [{**frameworks.runners(kernel), **languages.runners(kernel)} for kernel in kernels]
        for name in (*FrameworkPeers.NAMES, *KernelLanguages.NAMES):
            runners[name] = [peer if callable(peer := peers[name]) else None for peers in found]
        why_missing = [{"numba": numba.error} if numba.error else {} for _ in kernels]
        for missing, peers in zip(why_missing, found, strict=True):
            missing.update({name: why for name, why in peers.items() if isinstance(why, str)})
        for missing, spelling in zip(why_missing, spellings, strict=True):
            if self.tg.error or isinstance(spelling, str):
                missing["tinygrad"] = self.tg.error or str(spelling)
        return SuiteContestants([kernel.name for kernel in kernels], runners, why_missing, self.sizes.repeats)

    def busy_suite(self) -> list[Metric]:
        """The kernel suite and the thread speedup on the machine as it is, then again while another process
        spins on a core, and how much each contestant slowed down (``benchmarks.busy``). The contestants are
        compiled once, before both: the two runs time the same code."""
        contestants = self.suite_contestants()
        quiet = [*contestants.timed(self.progress), *self.thread_scaling()]
        self.progress("kernel suite beside a busy process")
        with competing_process():
            busy = [*contestants.timed(self.progress), *self.thread_scaling()]
        return busy_metrics(quiet, busy)

    def steps(self) -> list[tuple[str, Callable[[], list[Metric]]]]:
        return [("memory bandwidth", self.membw), ("cold compile", self.compile_cold),
                ("cache hits", self.cache_hits), ("call path", self.call_path), ("plan replay", self.replay),
                ("triad", self.triad), ("sum", self.sum), ("gather", self.gather), ("matmul", self.matmul),
                ("blas anchor", self.blas_anchor),
                ("threads", self.thread_scaling), ("host parallel", self.host_parallel),
                ("plan prepare", self.plan_prepare), ("long plans", self.long_plans), ("bundles", self.bundles),
                ("distributed", lambda: shard_overhead(self.device.name)),
                ("spellings", self.spellings), ("plan algorithms", self.plan_algorithms),
                ("jit programs", self.jit_programs),
                ("array programs", self.array_programs), ("numpy programs", self.numpy_programs),
                ("gradients", self.gradients),
                ("kernel suite", self.kernel_suite)]

    def run(self) -> list[Metric]:
        """Every step's figures. A step that raises loses its own figures only: why is kept in ``failed``
        (and its traceback goes to stderr), and the steps after it run."""
        metrics: list[Metric] = []
        for title, step in self.steps():
            self.progress(title)
            try:
                metrics += step()
            except Exception as err:
                self.failed[title] = failure(err)
                print(f"svod bench: the {title} step failed; its figures are missing", file=sys.stderr)
                traceback.print_exc()
        return metrics

    def _buffers(self, *arrays: np.ndarray) -> list[svod.Buffer]:
        return [svod.Buffer.from_numpy(a, self.device) for a in arrays]

    def _time_kernel(self, ast: UOp, buffers: list[svod.Buffer], var_vals: dict[str, int]) -> float:
        kernel = svod.compile(ast, self.device)
        return median_seconds(lambda: kernel(buffers, var_vals), self.sizes.repeats)

    def membw(self) -> list[Metric]:
        count = self.sizes.copy_bytes // 4
        src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
        workers = settings.threads
        chunks = np.array_split(np.arange(count), workers)
        bounds = [(int(c[0]), int(c[-1]) + 1) for c in chunks if len(c)]
        with ThreadPoolExecutor(workers) as pool:
            def copy() -> None:
                list(pool.map(lambda b: np.copyto(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))

            seconds = median_seconds(copy, self.sizes.repeats)
        rate = 2 * src.nbytes / seconds / 1e9
        return [Metric("membw_copy_gbps", "GB/s", "higher", None, numpy=rate,
                       note=f"numpy copy of {self.sizes.copy_bytes >> 20} MiB on {workers} threads")]

    def compile_cold(self) -> list[Metric]:
        metrics = []
        registry = default_registry()
        off = dataclasses.replace(settings, disk_cache=False)
        names = registry.compiler_names(self.device.device)
        for name in names:
            device = registry.get(self.device.name, name)
            times = []
            for attempt in range(self.sizes.compiles + 1):
                cache = KernelCache(off)
                ast = affine(1.0 + attempt + time.time_ns() % 1000 / 1e4)
                start = time.perf_counter()
                cache.get(ast, device)
                times.append(time.perf_counter() - start)
            metrics.append(Metric(f"compile_cold_ms.{name}", "ms", "lower", statistics.median(times[1:]) * 1e3,
                                  tinygrad=self._tinygrad_cold_compile() if name == names[0] else None,
                                  note="AST to callable, disk cache off"))
        return metrics

    def _tinygrad_cold_compile(self) -> float | None:
        if self.tg.error:
            return None
        x = self.tg.tensor(np.ones(1024, np.float32))
        times = []
        for attempt in range(self.sizes.compiles):
            scale = 1.0 + attempt + time.time_ns() % 1000 / 1e4
            start = time.perf_counter()
            (x * scale + 1.0).realize()
            self.tg.sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    def cache_hits(self) -> list[Metric]:
        ast = affine(3.25)
        svod.compile(ast, self.device)
        seconds = median_seconds(lambda: svod.compile(ast, self.device), 2000, warmup=10)
        return [Metric("cache_hit_memory_us", "us", "lower", seconds * 1e6),
                Metric("cache_hit_disk_ms", "ms", "lower", self._disk_hit_ms(),
                       note="per kernel, in a new process with a warm disk cache")]

    def call_path(self) -> list[Metric]:
        """What one call of a tiny kernel costs a user: on Buffers, and through svod.run on numpy arrays."""
        ast = tiny(7)
        kernel = svod.compile(ast, self.device)
        arrays = [np.zeros(16, np.float32), np.ones(16, np.float32)]
        buffers = self._buffers(*arrays)
        loops = 2000

        def on_buffers() -> None:
            for _ in range(loops):
                kernel(buffers)

        def on_arrays() -> None:
            for _ in range(loops):
                svod.run(ast, arrays, device=self.device)

        metrics = [Metric("direct_call_us.buffers", "us", "lower", median_seconds(on_buffers, self.sizes.repeats)
                          / loops * 1e6, note="CachedKernel(...) of a 16-element kernel on svod.Buffers"),
                   Metric("direct_call_us.numpy", "us", "lower", median_seconds(on_arrays, self.sizes.repeats)
                          / loops * 1e6, note="svod.run of the same kernel on numpy arrays")]
        import_ms, first_ms = self._cold_start_ms()
        return [*metrics, Metric("import_ms", "ms", "lower", import_ms, note="import svod, fresh process"),
                Metric("first_kernel_ms", "ms", "lower", first_ms,
                       note="import svod + build, compile (cold disk cache) and run a first kernel")]

    def _cold_start_ms(self) -> tuple[float, float]:
        """Medians over ``fresh_processes`` fresh processes, each with an empty disk cache."""
        script = textwrap.dedent(f"""
            import time
            start = time.perf_counter()
            import numpy as np, svod
            imported = time.perf_counter()
            from svod.workloads import tiny
            svod.run(tiny(3), [np.zeros(16, np.float32), np.ones(16, np.float32)], device={self.device.name!r})
            print((imported - start) * 1e3, (time.perf_counter() - start) * 1e3)
        """)
        samples = []
        for _ in range(self.sizes.fresh_processes):
            with tempfile.TemporaryDirectory() as directory:
                result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                                        env={**os.environ, "SVOD_CACHE_DIR": directory})
            if result.returncode != 0:
                raise SvodError(f"cold start benchmark failed: {result.stderr.strip()[-400:]}", stage="check")
            samples.append(tuple(map(float, result.stdout.split())))
        return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)

    def _disk_hit_ms(self) -> float:
        script = textwrap.dedent(f"""
            import dataclasses, statistics, sys, time
            from pathlib import Path
            import svod
            from svod.workloads import affine
            from svod.config import settings
            from svod.runtime import KernelCache
            cache = KernelCache(dataclasses.replace(settings, cache_dir=Path(sys.argv[1]), disk_cache=True))
            device = svod.get_device({self.device.name!r})
            cache.get(affine(0.5), device)
            times = []
            for k in range(8):
                start = time.perf_counter()
                cache.get(affine(1.5 + k), device)
                times.append(time.perf_counter() - start)
            print(cache.stats.compiles, statistics.median(times) * 1e3)
        """)
        with tempfile.TemporaryDirectory() as directory:
            for _ in range(2):
                result = subprocess.run([sys.executable, "-c", script, directory], capture_output=True, text=True,
                                        check=False)
                if result.returncode != 0:
                    raise SvodError(f"disk cache benchmark failed: {result.stderr.strip()[-400:]}", stage="check")
            compiles, ms = result.stdout.split()
        if int(compiles) != 0:
            raise SvodError("the second process compiled instead of loading from disk", stage="check", value=compiles)
        return float(ms)

    def replay(self) -> list[Metric]:
        return [self._replay(count) for count in (1, 32)]

    def _replay(self, count: int) -> Metric:
        plan = ExecutionPlan(self.device)
        indices = [plan.add_buffer(svod.Buffer.from_numpy(np.zeros(16, np.float32), self.device))
                   for _ in range(count + 1)]
        for k in range(count):
            plan.add_kernel(tiny(k), [indices[k + 1], indices[k]])
        plan.prepare()
        loops = 200

        def replays() -> None:
            for _ in range(loops):
                plan.execute()

        seconds = median_seconds(replays, self.sizes.repeats)
        return Metric(f"replay_us_per_kernel.{count}", "us", "lower", seconds / loops / count * 1e6,
                      note=f"plan of {count} tiny kernels")

    def bundles(self) -> list[Metric]:
        """Load and first run of a saved plan of 32 distinct kernels in a fresh process (svod imported before
        the clock starts, empty disk cache; the median of ``fresh_processes``): the cost a service's new worker
        pays instead of compiling."""
        plan = ExecutionPlan(self.device)
        indices = [plan.add_buffer(svod.Buffer.from_numpy(np.zeros(16, np.float32), self.device), name=f"b{k}")
                   for k in range(33)]
        for k in range(32):
            plan.add_kernel(tiny(k), [indices[k + 1], indices[k]])
        script = textwrap.dedent("""
            import sys, time
            import numpy as np, svod
            from svod.runtime import default_cache
            start = time.perf_counter()
            plan = svod.load_plan(sys.argv[1])
            plan.execute(buffers={"b0": np.ones(16, np.float32)})
            print((time.perf_counter() - start) * 1e3, default_cache().stats.compiles)
        """)
        samples = []
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "plan.svodplan"
            plan.save(path)
            for k in range(self.sizes.fresh_processes):
                result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                                        check=False, env={**os.environ, "SVOD_CACHE_DIR": f"{directory}/cache{k}"})
                if result.returncode != 0:
                    raise SvodError(f"bundle benchmark failed: {result.stderr.strip()[-400:]}", stage="check")
                ms, compiles = result.stdout.split()
                if int(compiles) != 0:
                    raise SvodError("a loaded bundle compiled", stage="check", value=compiles)
                samples.append(float(ms))
        return [Metric("bundle_load_ms.32", "ms", "lower", statistics.median(samples),
                       note="svod.load_plan + first run of 32 kernels, fresh process, 0 compiles")]

    def long_plans(self) -> list[Metric]:
        """Prepare time and replay cost per kernel of chains of tiny kernels (four distinct ones, compiled
        before the clock starts): both should grow linearly with the length."""
        metrics = []
        for count in self.sizes.long_plans:
            for k in range(4):
                svod.compile(tiny(k), self.device)
            prepares, plan = [], None
            for _ in range(3):
                plan = ExecutionPlan(self.device)
                indices = [plan.add_buffer(svod.Buffer.from_numpy(np.zeros(16, np.float32), self.device))
                           for _ in range(count + 1)]
                for k in range(count):
                    plan.add_kernel(tiny(k % 4), [indices[k + 1], indices[k]])
                start = time.perf_counter()
                plan.prepare()
                prepares.append(time.perf_counter() - start)
            assert plan is not None
            loops = max(1, 20_000 // count)

            def replays(ready: ExecutionPlan = plan, turns: int = loops) -> None:
                for _ in range(turns):
                    ready.execute()

            seconds = median_seconds(replays, self.sizes.repeats)
            metrics += [Metric(f"prepare_ms.{count}", "ms", "lower", statistics.median(prepares) * 1e3,
                               note=f"prepare of a plan of {count} tiny kernels (4 distinct, compiled)"),
                        Metric(f"replay_us_per_kernel.{count}", "us", "lower", seconds / loops / count * 1e6,
                               note=f"plan of {count} tiny kernels")]
        return metrics

    def plan_algorithms(self) -> list[Metric]:
        """Whole algorithms as one ``plan.execute()`` each (``benchmarks.algorithms``), checked against numpy,
        beside numba's loops and numpy's per-step spelling, each from fresh copies of the inputs."""
        sizes = self.sizes.algorithms or (QUICK_SIZES if self.sizes.quick else FULL_SIZES)
        numba = Numba(settings.threads)
        metrics = []
        for algorithm in algorithms(sizes, self.device):
            want = algorithm.numpy()
            if not agree(algorithm, algorithm.svod(), want):
                raise SvodError(f"svod's {algorithm.name} disagrees with numpy", stage="check", value=algorithm.size)
            repeats = max(3, self.sizes.repeats // 3)
            svod_s = median_seconds(algorithm.svod, repeats, warmup=1)
            numpy_s = median_seconds(algorithm.numpy, max(1, repeats // 3), warmup=0)
            numba_s, why = None, {}
            if numba.algorithms is None:
                why = {"numba": numba.error or "numba is not installed"}
            else:
                run, result = numba_runner(algorithm, numba.algorithms)
                run()
                if not agree(algorithm, result(), want):
                    raise SvodError(f"numba's {algorithm.name} disagrees with numpy", stage="check")
                numba_s = median_seconds(run, repeats, warmup=1)
            why["tinygrad"] = "not measured: the algorithms have no tinygrad spelling"
            metrics.append(Metric(f"plan.{algorithm.name}_ms", "ms", "lower", svod_s * 1e3, numpy=numpy_s * 1e3,
                                  numba=None if numba_s is None else numba_s * 1e3, why_missing=why,
                                  note=f"{algorithm.name} {algorithm.size}, one plan.execute()"))
            algorithm.plan.close()
        return metrics

    def jit_programs(self) -> list[Metric]:
        return self._programs(PROGRAMS, "jit")

    def array_programs(self) -> list[Metric]:
        """NumPy array code inside ``@svod.jit`` (``benchmarks.jit_programs.ARRAY_PROGRAMS``), as
        ``jit_programs`` times whole programs: ``array.<name>_ms``. numba runs the same text where it takes it
        (it refuses ``keepdims``, and says so as the reason its figure is missing)."""
        return self._programs(ARRAY_PROGRAMS, "array")

    def gradients(self) -> list[Metric]:
        """The differentiated programs' figures (``benchmarks.gradient_costs``): ``grad.<name>_ms`` and more."""
        return gradient_step(self.sizes.quick, self.sizes.repeats, self.progress, self.sizes.gradients)

    def numpy_programs(self) -> list[Metric]:
        """Random numbers, gathers, masks and sorts in NumPy code inside ``@svod.jit``
        (``benchmarks.numpy_programs``), as ``jit_programs`` times whole programs: ``numpy.<name>_ms``."""
        return self._programs(NUMPY_PROGRAMS, "numpy")

    def _programs(self, programs: Sequence[Program], prefix: str) -> list[Metric]:
        """Whole numba programs (``benchmarks.jit_programs``), one source text each, under ``@svod.jit`` beside
        the same text under ``@numba.njit(parallel=True)`` and numpy's spelling: ``<prefix>.<name>_ms``, and
        with ``jit_first_calls`` each version's first call in a fresh process at the program's small size,
        which is its compile (``<prefix>_first_call.<name>_ms``).
        Every version that runs is checked against numpy's answer twice (its first call, then a call on other
        arrays) before it is timed; a program svod refuses has the refusal as the reason its figure is
        missing. svod and numba are timed in turns, one run each, each on settled cores (``timing.settle``:
        numpy's answer may leave BLAS threads spinning); each run works on the arrays the one before left (no
        program's work depends on their values). numpy's spelling is timed after them, fewer times."""
        scale = self.sizes.jit_scale or ("quick" if self.sizes.quick else "full")
        numba = Numba(settings.threads)
        repeats = max(5, self.sizes.repeats // 2)
        metrics = []
        for program in programs:
            size = program.size(scale)
            args = program.make(*size)
            want = program.numpy(*copies(args))
            why = {"tinygrad": "not measured: the jit programs have no tinygrad spelling"}
            if numba.error:
                why["numba"] = numba.error
            runs: dict[str, Callable[[], object]] = {}
            for version in ("svod", "numba"):
                if version not in why:
                    run = self._jit_version(program, version, size, args, want)
                    if isinstance(run, str):
                        why[version] = run
                    else:
                        runs[version] = run
            samples: dict[str, list[float]] = {version: [] for version in runs}
            for _ in range(repeats):  # in turns: a drift of this machine's speed falls on both alike
                for version, run in runs.items():
                    samples[version] += sample_seconds(run, 1, warmup=0)
            seconds = {version: statistics.median(samples[version]) if version in samples else None
                       for version in ("svod", "numba")}
            with blas_threads(settings.threads):
                numpy_s = median_seconds(functools.partial(program.numpy, *copies(args)), max(1, repeats // 4),
                                         warmup=0)
            note = f"{program.describe(size)}; {program.lines('svod')} lines (numba's: {program.lines('numba')})"
            if program.rewrite_of:
                note += f"; svod's rewrite of {program.rewrite_of}"
            metrics.append(Metric(f"{prefix}.{program.name}_ms", "ms", "lower", _ms(seconds["svod"]),
                                  numpy=numpy_s * 1e3, numba=_ms(seconds["numba"]), why_missing=why, note=note))
            if self.sizes.jit_first_calls:
                firsts = {version: None if version in why else
                          first_call_ms(program, version, program.small, self.device.name) for version in seconds}
                metrics.append(Metric(f"{prefix}_first_call.{program.name}_ms", "ms", "lower", firsts["svod"],
                                      numba=firsts["numba"], why_missing={**why, "numpy": "nothing to compile"},
                                      note=f"first call at {program.describe(program.small)} (the compile, and a "
                                           "run of next to nothing) in a fresh process, empty svod disk cache"))
        return metrics

    def _jit_version(self, program: Program, version: str, size: tuple[int, ...], args: tuple[object, ...],
                     want: object) -> Callable[[], object] | str:
        """A run of ``program``'s ``version`` on arrays of its own, checked against numpy's answer on its first
        call and on a second call with those arrays; or svod's refusal of the program."""
        made = program.function(version)
        function = made if version == "numba" else (lambda *a: made(*a, device=self.device))
        try:
            first = function(*copies(args))
        except SvodError as err:
            if version != "svod":
                raise
            return " ".join(str(err).split())
        except Exception as err:  # numba's refusal of a program (a TypingError), in its first line
            if version != "numba":
                raise
            plain = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(err)).split())  # numba colours its messages
            return f"numba refuses it: {type(err).__name__}: {plain[:200]}"
        work = copies(args)
        for result in (first, function(*work)):
            if not jit_agree(program, result, want):
                raise SvodError(f"{version}'s {program.name} disagrees with numpy", stage="check",
                                value=program.describe(size))
        return lambda: function(*work)

    def spellings(self) -> list[Metric]:
        """Each spelling of a transpose, then of the suite's row kernels (``benchmarks.spellings``), with
        numba's spelling of each run by svod, beside numpy and (``Sizes.spelling_peers``) the suite's peers:
        ``spelling.<kernel>.<form>_ms``."""
        peers = Peers(Numba(settings.threads), FrameworkPeers(), KernelLanguages(), self.tg) \
            if self.sizes.spelling_peers else None
        return self.transpose_spellings(peers) + self.row_spellings(peers)

    def transpose_spellings(self, peers: Peers | None) -> list[Metric]:
        """Each spelling of a transpose as large as the triad's arrays, checked against numpy, then timed
        (``_spelled``) beside numpy's copy of ``x.T``."""
        side = math.isqrt(self.sizes.elements)
        spelled = transpose_spellings(side)
        for workload in spelled.values():
            check(workload, self.device)
        forms: dict[str, Callable[[], object]] = {form: load(w, self.device) for form, w in spelled.items()}
        notes = {form: f"{side}x{side} float32, {WRITTEN.get(form, NUMBA_WRITTEN)}" for form in [*forms, "numba"]}
        return self._spelled("transpose", spelled["by_input"], forms, notes, peers)

    def row_spellings(self, peers: Peers | None) -> list[Metric]:
        """The suite's softmax, layernorm and mlp at its sizes (``Sizes.spelling_rows`` rows where set) in the
        suite's ``@svod.kernel`` form and as NumPy in ``@svod.jit``, each checked against numpy, then timed
        (``_spelled``): ``spelling.<kernel>.kernel_ms``, ``.jit_ms`` and ``.numba_ms``. The jit form returns a
        new array each call, as NumPy's function does; the kernel form writes the workload's."""
        metrics = []
        for name, spelled in row_spellings(row_kernels(self.sizes.quick, self.sizes.spelling_rows)).items():
            check(spelled.workload, self.device)
            spelled.check_jit(self.device)
            forms: dict[str, Callable[[], object]] = {"kernel": load(spelled.workload, self.device),
                                                       "jit": spelled.run_jit(self.device)}
            rows, cols = spelled.workload.inputs[0].shape
            notes = {form: f"{name}, {rows}x{cols} float32 input, {ARRAY_WRITTEN.get(form, NUMBA_WRITTEN)}"
                     for form in [*forms, "numba"]}
            metrics += self._spelled(name, spelled.workload, forms, notes, peers)
        return metrics

    def _spelled(self, kernel: str, workload: Workload, forms: dict[str, Callable[[], object]],
                 notes: dict[str, str], peers: Peers | None) -> list[Metric]:
        """svod's ``forms`` of ``kernel`` and numba's spelling run by svod (``spellings.numba_form``), timed in
        rounds (``rounds_ms``) beside numpy's ``workload`` and each peer's, every one checked against numpy
        first; one metric per form (``spellings.spelling_metrics``)."""
        refused = {}
        try:
            forms = {**forms, "numba": numba_form(workload, self.device)}
        except SvodError as err:  # a refusal (WebGPU's limit on a work item's loops) is the figure's reason
            refused["numba"] = str(err)
        runners, why = peer_runners(workload, peers) if peers is not None else ({}, {})
        # svod's numba form and the numba peer share a name: svod's forms are timed as "svod <form>"
        milliseconds = rounds_ms({**{f"svod {form}": run for form, run in forms.items()},
                                  "numpy": workload.numpy, **runners}, self.sizes.repeats)
        return spelling_metrics(kernel, {form: milliseconds.get(f"svod {form}") for form in [*forms, *refused]},
                                {peer: milliseconds[peer] for peer in ["numpy", *runners]}, why, notes, refused)

    def triad(self) -> list[Metric]:
        n = self.sizes.elements
        workload = saxpy(n)
        x, y = workload.inputs
        svod_s = median_seconds(load(workload, self.device), self.sizes.repeats)
        numpy_s = median_seconds(workload.numpy, self.sizes.repeats)
        tg = None
        if not self.tg.error:
            tx, ty = self.tg.tensor(x), self.tg.tensor(y)
            jit = self.tg.tg.TinyJit(lambda a, b: (a * 2.5 + b).realize())
            tg = 12 * n / self.tg.timed(lambda: jit(tx, ty), self.sizes.repeats) / 1e9
        return [Metric("triad_gbps", "GB/s", "higher", 12 * n / svod_s / 1e9, 12 * n / numpy_s / 1e9, tg,
                       note=f"2.5*x + y, {n} float32")]

    def sum(self) -> list[Metric]:
        n = self.sizes.elements
        x = self.rng.standard_normal(n).astype(np.float32)
        svod_s = self._time_kernel(total(n), self._buffers(np.zeros(1, np.float32), x), {})
        numpy_s = median_seconds(x.sum, self.sizes.repeats)
        tg = None
        if not self.tg.error:
            tx = self.tg.tensor(x)
            jit = self.tg.tg.TinyJit(lambda t: t.sum().realize())
            tg = 4 * n / self.tg.timed(lambda: jit(tx), self.sizes.repeats) / 1e9
        return [Metric("sum_gbps", "GB/s", "higher", 4 * n / svod_s / 1e9, 4 * n / numpy_s / 1e9, tg,
                       note=f"float32 sum of {n}")]

    def gather(self) -> list[Metric]:
        """An embedding lookup whose ids come from memory: svod checks each row at run time; the cost of
        that check is the ratio to the same kernel with the id clamped by hand (unchecked)."""
        rows, table_rows = self.sizes.elements // 16, 50_000
        workload = gather(rows, table_rows)
        loaded = load(workload, self.device)
        guarded = median_seconds(loaded, self.sizes.repeats)
        clamped = self._time_kernel(gather_kernel(rows, table_rows, clamped=True), loaded.buffers, {})
        numpy_s = median_seconds(workload.numpy, self.sizes.repeats)
        moved = rows * 64 * 4 * 2 + rows * 4
        return [Metric("gather_gbps", "GB/s", "higher", moved / guarded / 1e9, moved / numpy_s / 1e9,
                       note=f"{rows} rows x 64 float32 from a {table_rows}-row table, ids checked"),
                Metric("gather_guard_cost", "x", "lower", guarded / clamped,
                       note="time with svod's run-time check / time with the id clamped by hand")]

    def matmul(self) -> list[Metric]:
        return [self._matmul(256, "matmul256_gflops"), self._matmul(self.sizes.big_matmul, "matmul1024_gflops")]

    def blas_anchor(self) -> list[Metric]:
        """svod's matmul against the BLAS at its best here (``benchmarks.blas_anchor``): numpy's OpenBLAS as
        it loads, OpenBLAS made to use the kernels of this host's widest vectors, torch's matmul, and the
        host's FMA peak, in float32 and float64 at the big matmul's size."""
        n, threads = self.sizes.big_matmul, settings.threads
        repeats = max(3, self.sizes.repeats // 3)
        core, widest = openblas_core(), widest_core()
        metrics = []
        for dtype in (np.float32, np.float64):
            name = np.dtype(dtype).name
            workload = matmul(n, dtype=dtype)
            flops = 2 * n ** 3
            svod_s = median_seconds(load(workload, self.device), repeats)
            with blas_threads(threads):
                numpy_s = median_seconds(workload.numpy, repeats)
            others: dict[str, float | None] = {"FMA peak": fma_peak_gflops(name, threads)}
            why: dict[str, str] = {}
            torch = torch_gflops(n, name, threads, repeats)
            if isinstance(torch, str):
                why["torch"] = torch
            else:
                others["torch"] = torch
            if widest is not None and widest != core:
                others[f"OpenBLAS ({widest} kernels)"] = openblas_gflops(n, name, threads, widest, repeats)
            note = (f"{n}x{n} {name}, {threads} threads; numpy's OpenBLAS runs its {core or 'own'} kernels here"
                    + ("" if widest is None or widest != core else " (this host's widest)"))
            metrics.append(Metric(f"matmul_anchor.{name}_gflops", "GFLOP/s", "higher", flops / svod_s / 1e9,
                                  numpy=flops / numpy_s / 1e9, note=note, others=others, why_missing=why))
        return metrics

    def _matmul(self, n: int, name: str) -> Metric:
        workload = matmul(n)
        a, b = workload.inputs
        flops = 2 * n ** 3
        repeats = max(3, self.sizes.repeats // (4 if n >= 1024 else 1))
        svod_s = median_seconds(load(workload, self.device), repeats)
        numpy_s = median_seconds(workload.numpy, repeats)
        tg = None
        if not self.tg.error:
            ta, tb = self.tg.tensor(a), self.tg.tensor(b)
            jit = self.tg.tg.TinyJit(lambda x, y: (x @ y).realize())
            tg = flops / self.tg.timed(lambda: jit(ta, tb), repeats) / 1e9
        note = f"{n}x{n} float32" + ("" if name.startswith(f"matmul{n}_") else " (--quick: smaller than the name)")
        return Metric(name, "GFLOP/s", "higher", flops / svod_s / 1e9, flops / numpy_s / 1e9, tg, note=note)

    def _compute_seconds(self, threads: int, size: int) -> float:
        device = DeviceRegistry(dataclasses.replace(settings, threads=threads)).get(self.device.name)
        kernel = KernelCache(dataclasses.replace(settings, disk_cache=False)).get(compute_bound("compute", size),
                                                                                  device)
        buffers = [svod.Buffer.from_numpy(np.zeros(size, np.float32), device),
                   svod.Buffer.from_numpy(self.rng.standard_normal(size).astype(np.float32), device)]
        return median_seconds(lambda: kernel(buffers, {}), self.sizes.repeats)

    def thread_scaling(self) -> list[Metric]:
        size = self.sizes.elements // 4
        speedup = self._compute_seconds(1, size) / self._compute_seconds(settings.threads, size)
        return [Metric("thread_speedup", "x", "higher", speedup,
                       note=f"compute-bound kernel, 1 vs {settings.threads} threads")]

    def host_parallel(self) -> list[Metric]:
        size = self.sizes.elements // 8
        single = DeviceRegistry(dataclasses.replace(settings, threads=1)).get(self.device.name)
        cache = KernelCache(dataclasses.replace(settings, disk_cache=False))
        plan = ExecutionPlan(single, cache)
        source = svod.Buffer.from_numpy(self.rng.standard_normal(size).astype(np.float32), single)
        outs = [svod.Buffer(single, dtypes.float32, size) for _ in range(2)]
        x = plan.add_buffer(source)
        asts = [compute_bound(f"independent{k}", size) for k in range(2)]
        for ast, out in zip(asts, outs, strict=True):
            plan.add_kernel(ast, [plan.add_buffer(out), x])
        plan.prepare()
        parallel = median_seconds(plan.execute, self.sizes.repeats)
        kernels = [cache.get(ast, single) for ast in asts]

        def one_after_another() -> None:
            for kernel, out in zip(kernels, outs, strict=True):
                kernel([out, source])

        sequential = median_seconds(one_after_another, self.sizes.repeats)
        plan.close()
        return [Metric("host_parallel_speedup", "x", "higher", sequential / parallel,
                       note="two independent single-threaded compute-bound kernels in one plan")]

    def plan_prepare(self) -> list[Metric]:
        tag = str(time.time_ns())
        off = dataclasses.replace(settings, disk_cache=False)
        asts = [compute_bound(f"prep{tag}_{k}", 1024, rounds=1 + k % 4) for k in range(16)]
        start = time.perf_counter()
        cache = KernelCache(off)
        for ast in asts:
            cache.get(ast, self.device)
        one_by_one = time.perf_counter() - start
        plan = ExecutionPlan(self.device, KernelCache(off))
        x = plan.add_buffer(svod.Buffer(self.device, dtypes.float32, 1024))
        for ast in asts:
            plan.add_kernel(ast, [plan.add_buffer(svod.Buffer(self.device, dtypes.float32, 1024)), x])
        start = time.perf_counter()
        plan.prepare()
        prepared = time.perf_counter() - start
        return [Metric("plan_prepare_speedup", "x", "higher", one_by_one / prepared,
                       note="cold prepare of 16 distinct kernels vs compiling them one by one")]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


FIRST_CALL = textwrap.dedent("""
    import sys, time
    from benchmarks.programs import program
    name, version, size, threads, device = sys.argv[1:6]
    if version == "numba":
        import numba
        numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
        options = {}
    else:
        import svod
        options = {"device": svod.get_device(device)}
    found = program(name)
    function, args = found.function(version), found.make(*map(int, size.split(",")))
    start = time.perf_counter()
    function(*args, **options)
    print((time.perf_counter() - start) * 1e3)
""")


def first_call_ms(program: Program, version: str, size: tuple[int, ...], device: str = "CPU") -> float:
    """The first call of ``program``'s ``version`` ("svod" or "numba", svod's on ``device``) in a fresh
    process: its compile and one run at ``size``, the imports (and svod's device) made before the clock
    starts, and an empty svod disk cache."""
    arguments = [program.name, version, ",".join(map(str, size)), str(settings.threads), device]
    return fresh_process_ms(FIRST_CALL, arguments, f"first call of {version}'s {program.name}")


def run_bench(device_name: str = "CPU", quick: bool = False, json_path: str | None = None,
              plot_path: str | None = None, suite: str | None = None, busy: bool = False) -> int:
    """The whole bench, or one step of it (``suite``: ``kernels``, the kernel suite, ``spellings``, ``numpy`` or
    ``gradients``), or with ``busy`` the kernel suite and the thread speedup twice: quiet, then beside a process
    that keeps a core busy."""
    device = svod.get_device(device_name)
    if device.device.base_type == "PYTHON":
        raise SvodError("the PYTHON reference device is too slow to benchmark; pick a compiled device",
                        stage="check", value=device_name)
    sizes = QUICK if quick else FULL
    tinygrad = Tinygrad("CL" if device.device.base_type == "CL" else "CPU")
    bench = Bench(device, sizes, tinygrad, lambda title: None)
    with progress_reporter() as progress:
        bench.progress = progress
        alone = {"kernels": bench.kernel_suite, "spellings": bench.spellings, "numpy": bench.numpy_programs,
                 "gradients": bench.gradients}
        metrics = bench.busy_suite() if busy else alone[suite]() if suite else bench.run()
    flags = (" --quick" if quick else "") + (f" --suite {suite}" if suite else "") + (" --busy" if busy else "")
    print(f"svod bench on {device.name} ({device.compiler.cache_key}){flags}")
    print(report(metrics, tinygrad.error, bench.failed))
    if json_path:
        Path(json_path).write_text(json.dumps(to_json(metrics, bench.failed), indent=2))
    if plot_path:
        plot(metrics, plot_path)
    return 1 if bench.failed else 0
