"""npbench's numba programs under ``@svod.jit``: svod beside numba and numpy on programs it did not choose.

For each npbench benchmark with a numba variant, the first of ``_numba_npr``, ``_numba_np`` and ``_numba_n`` is
taken as it is, and its svod version is the same text with only the decorators (``@nb.jit(...)`` ->
``@svod.jit``), ``prange`` (``nb.prange`` -> ``svod.prange``) and ``import svod`` changed (``svod_text``; the
line numbers stay npbench's). A program svod cannot take is reported with svod's message, never edited further.

Inputs come from npbench's own ``initialize`` at a preset (S, M, L, paper); numpy's version gives the reference.
Each version's outputs (its return values, then the arguments npbench names as outputs) are validated with
npbench's rule (``allclose``, else a relative error under ``norm_error``), after its first call and after its
last timed call (a plan replayed may differ from its first run). Times: the first call alone (compilation
included; svod's disk cache is off, as numba compiles without one), then the best of ``--repeat`` calls, each on
fresh copies of the array arguments (npbench copies them in its setup, outside the timing).

Each version of each benchmark runs in a subprocess of its own, killed after ``--timeout`` seconds, so a hang or a
crash ends that version only (numpy's outputs, the reference, pass between them in a file)::

    python -m benchmarks.npbench --npbench PATH [--preset M] [--only gemm,lu] [--timeout 120] [--json out.json]
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks.timing import settle
from svod.cli.table import format_table
from svod.errors import SvodError

VARIANTS = ("npr", "np", "n")
"""numba variants in the order one is taken: parallel with ``prange``, parallel, serial."""
DECORATOR = re.compile(r"@(?:(?:nb|numba)\.)?n?jit\b(?:\([^)]*\))?")
PRANGE = re.compile(r"(?<![\w.])(?:(?:nb|numba)\.)?prange\b")
NUMBA_IMPORT = re.compile(r"\s*(?:import\s+numba|from\s+numba\s+import)\b")
SVOD_FOLDER = Path(tempfile.gettempdir()) / "svod-npbench"
"""Where the svod versions are written (and kept: svod's messages name their lines)."""


def svod_text(text: str) -> str:
    """A numba program's text as svod's: its decorators ``@svod.jit``, its ``prange`` ``svod.prange``, and
    ``import svod`` on the line that imports numba (appended, so that every line keeps its number)."""
    lines, imported = [], False
    for line in text.splitlines(keepends=True):
        if not NUMBA_IMPORT.match(line):
            lines.append(PRANGE.sub("svod.prange", DECORATOR.sub("@svod.jit", line)))
        elif imported:
            lines.append(line)
        else:
            body = line.rstrip("\r\n")
            lines.append(f"{body}; import svod{line[len(body):]}")
            imported = True
    return "".join(lines) if imported else "import svod\n" + "".join(lines)


def valid(reference: list[Any], outputs: list[Any], info: dict[str, Any]) -> bool:
    """npbench's rule (``infrastructure/utilities.validate``): each output is ``allclose`` to numpy's (the
    benchmark's ``rtol``, ``atol``) or its relative error in the 2-norm is under ``norm_error``. Unlike npbench,
    a missing output or one of another shape fails too. A version that returns nothing where numpy's returns
    its result as well (adi's ``return u``) is held to the arguments npbench names as outputs, which
    ``call`` puts last."""
    rtol, atol, norm_error = info.get("rtol", 1e-5), info.get("atol", 1e-8), info.get("norm_error", 1e-5)
    named = len(info.get("output_args", []))
    if 0 < named == len(outputs) < len(reference):
        reference = reference[-named:]
    if len(outputs) != len(reference):
        return False
    for answer, output in zip(reference, outputs, strict=True):
        want, got = np.asarray(answer), np.asarray(output)
        if want.shape != got.shape:
            return False
        if not np.allclose(want, got, rtol=rtol, atol=atol):
            with np.errstate(all="ignore"):
                if not np.linalg.norm(want - got) / np.linalg.norm(want) < norm_error:
                    return False
    return True


@dataclass(frozen=True)
class Benchmark:
    name: str
    """npbench's short name (``bench_info``'s ``short_name``)."""
    info: dict[str, Any]
    """The ``benchmark`` object of ``bench_info/<module>.json``."""
    folder: Path
    variant: str

    @property
    def module(self) -> str:
        return str(self.info["module_name"])

    def path(self, version: str) -> Path:
        return self.folder / f"{self.module}_{version}.py"


def decorates(text: str, function: str) -> bool:
    """Whether a numba program's text defines ``function`` under a jit decorator. A variant that does not is
    passed over, as it is not numba's: npbench's ``lu_numba_np`` and ``mvt_numba_np`` call ``nb.jit(...)`` on a
    line of its own (their function is plain Python), ``cavity_flow_numba_np`` names its function otherwise."""
    return re.search(rf"^[ \t]*{DECORATOR.pattern}.*\n(?:\s*@.*\n)*\s*def {function}\b", text, re.M) is not None


def benchmarks(root: Path) -> list[Benchmark]:
    """npbench's benchmarks that have a numba variant, by name; each with the first variant that jits."""
    found = []
    for path in sorted((root / "bench_info").glob("*.json")):
        info = json.loads(path.read_text())["benchmark"]
        folder = root / "npbench" / "benchmarks" / info["relative_path"]
        files = [(v, folder / f"{info['module_name']}_numba_{v}.py") for v in VARIANTS]
        variant = next((v for v, file in files if file.exists() and decorates(file.read_text(), info["func_name"])),
                       None)
        if variant is not None:
            found.append(Benchmark(info["short_name"], info, folder, variant))
    return sorted(found, key=lambda b: b.name)


def load(path: Path, name: str) -> ModuleType:
    """The module of a Python file (svod reads a function's source from its file)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(bench: Benchmark, preset: str) -> dict[str, Any]:
    """The preset's parameters and what npbench's ``initialize`` makes of them, by name."""
    data = dict(bench.info["parameters"][preset])
    init = bench.info.get("init")
    if init:
        initialize = getattr(load(bench.folder / f"{bench.module}.py", f"{bench.module}_init"), init["func_name"])
        made = initialize(*(data[a] for a in init["input_args"]))
        names = init["output_args"]
        data.update(zip(names, made, strict=True) if len(names) > 1 else {names[0]: made})
    return data


def call(fn: Callable[..., Any], bench: Benchmark, data: dict[str, Any]) -> tuple[list[Any], float]:
    """``fn``'s outputs on fresh copies of the array arguments (its return values, then the arguments npbench
    names as outputs), and the seconds the call took."""
    fresh = {name: np.copy(value) if name in bench.info["array_args"] else value for name, value in data.items()}
    start = time.perf_counter()
    result = fn(*(fresh[name] for name in bench.info["input_args"]))
    seconds = time.perf_counter() - start
    returned = [] if result is None else list(result) if isinstance(result, tuple | list) else [result]
    return returned + [fresh[name] for name in bench.info.get("output_args", [])], seconds


FEWEST_RUNS = 3
"""Timed calls made whatever ``--budget`` says (``--repeat`` allowing): one slow call must not be a version's
only figure. On a virtual machine the first call that needs memory the process has not had yet (a fresh
output of a few hundred MB) may spend seconds in the kernel zeroing pages the host backs only then; where that
one call ate the budget, the version was timed by it alone (npbench's go_fast, whose every later call was tens
of times faster), while another version, whose slow call came later, was timed by its fast ones."""


def measure(fn: Callable[..., Any], bench: Benchmark, data: dict[str, Any], reference: list[Any] | None,
            repeat: int, budget: float) -> tuple[dict[str, Any], list[Any]]:
    """A version's first call, then the best of ``repeat`` calls (fewer once they took ``budget`` seconds, but
    at least ``FEWEST_RUNS``), and whether both the first and the last call's outputs validate against
    ``reference``; and the first call's outputs."""
    outputs, first = call(fn, bench, data)
    times: list[float] = []
    while len(times) < repeat and (len(times) < FEWEST_RUNS or sum(times) < budget):
        settle()
        last, seconds = call(fn, bench, data)
        times.append(seconds)
    record: dict[str, Any] = {"status": "valid", "first_s": first, "ms": 1000 * min(times), "runs": len(times)}
    if reference is not None:
        wrong = [when for when, got in (("first call", outputs), ("a repeated call", last))
                 if not valid(reference, got, bench.info)]
        if wrong:
            record.update(status="wrong", message=f"{' and '.join(wrong)} differ from numpy's")
    return record, outputs


def failure(error: BaseException) -> dict[str, Any]:
    """A version that raised: refused when svod's error (``SvodError``), otherwise crashed."""
    line = next(iter(str(error).strip().splitlines()), "")
    status = "refused" if isinstance(error, SvodError) else "crashed"
    return {"status": status, "message": f"{type(error).__name__}: {line}"}


VERSIONS = ("numpy", "numba", "svod")
"""In the order they run: numpy's outputs are the others' reference."""


def run_version(bench: Benchmark, version: str, args: argparse.Namespace, reference: Path) -> dict[str, Any]:
    """One version of ``bench`` measured (``measure``), or why it has no figures. numpy's outputs are saved to
    ``reference``; the other versions are validated against them."""
    data = inputs(bench, args.preset)
    path = bench.path(f"numba_{bench.variant}")
    if version == "numpy":
        path = bench.path("numpy")
    elif version == "svod":
        SVOD_FOLDER.mkdir(exist_ok=True)
        text = svod_text(path.read_text())
        path = SVOD_FOLDER / f"{path.stem}_svod.py"
        path.write_text(text)
    answer = None
    if version != "numpy":
        with np.load(reference) as saved:
            answer = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    try:
        fn = getattr(load(path, f"{bench.module}_{version}"), bench.info["func_name"])
        record, outputs = measure(_on_cpu(fn) if version == "svod" else fn, bench, data, answer, args.repeat,
                                  args.budget)
    except Exception as error:
        return failure(error)
    if version == "numpy":
        np.savez(reference, *outputs)
    return record


def _on_cpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args: fn(*args, device="CPU")


def run_isolated(bench: Benchmark, args: argparse.Namespace) -> dict[str, Any]:
    """The benchmark's record: each version run by ``run_version`` in a subprocess of its own, killed after
    ``args.timeout`` seconds (hung) or crashed (a signal, an exit) without losing the others' figures. svod's
    disk cache is off there, so that its first call compiles, as numba's does."""
    record: dict[str, Any] = {"benchmark": bench.name, "variant": f"numba_{bench.variant}", "preset": args.preset}
    env = {**os.environ, "SVOD_CACHE": "0", "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as folder:
        reference, out = Path(folder) / "numpy.npz", Path(folder) / "record.json"
        for version in VERSIONS:
            if version != "numpy" and not reference.exists():
                record[version] = {"status": "not run", "message": "no numpy reference"}
                continue
            command = [sys.executable, "-m", "benchmarks.npbench", "--npbench", str(args.npbench), "--preset",
                       args.preset, "--repeat", str(args.repeat), "--budget", str(args.budget), "--child",
                       f"{bench.name}:{version}:{reference}", "--json", str(out)]
            child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            try:
                log, hung = child.communicate(timeout=args.timeout)[0], False
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                log, hung = child.communicate()[0], True
            if out.exists() and not hung:
                record[version] = json.loads(out.read_text())
                out.unlink()
                continue
            lines = log.decode(errors="replace").strip().splitlines()
            if hung:
                why = f"no result after {args.timeout:g} s (killed)"
            elif child.returncode < 0:
                why = f"killed by {signal.Signals(-child.returncode).name}"
            else:
                why = f"exit status {child.returncode}: {lines[-1] if lines else ''}"
            record[version] = {"status": "hung" if hung else "crashed", "message": why, "log": lines[-20:]}
    return record


def row(record: dict[str, Any]) -> list[str]:
    svod, numba, numpy = record["svod"], record["numba"], record["numpy"]

    def figure(version: dict[str, Any], key: str, form: str) -> str:
        return format(version[key], form) if key in version else "-"

    ratio = f"{numba['ms'] / svod['ms']:.2f}" if "ms" in svod and "ms" in numba else "-"
    notes = [f"{who} {v['status']}: {v.get('message', '')}" for who, v in (("numba", numba), ("numpy", numpy))
             if v["status"] != "valid"]
    return [record["benchmark"], record["variant"], svod["status"], figure(svod, "ms", ".2f"),
            figure(numba, "ms", ".2f"), figure(numpy, "ms", ".2f"), ratio, figure(svod, "first_s", ".2f"),
            figure(numba, "first_s", ".2f"),
            "; ".join([svod.get("message", ""), *notes]).strip("; ")]


HEADER = ["benchmark", "variant", "svod", "svod ms", "numba ms", "numpy ms", "numba/svod", "svod 1st s",
          "numba 1st s", "message"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npbench", type=Path, default=os.environ.get("SVOD_NPBENCH"),
                        help="an npbench checkout (default: $SVOD_NPBENCH)")
    parser.add_argument("--preset", default="M", choices=["S", "M", "L", "paper"])
    parser.add_argument("--only", default="", help="benchmarks by short or module name, comma-separated")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per version of a benchmark")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls after the first")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds of timed calls after which to stop")
    parser.add_argument("--json", type=Path, help="write the records here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.npbench is None:
        parser.error("no npbench checkout: pass --npbench PATH or set SVOD_NPBENCH")
    found = benchmarks(args.npbench)
    if args.child:  # NAME:VERSION:REFERENCE, from run_isolated
        faulthandler.enable()
        name, version, reference = args.child.split(":", 2)
        bench = next(b for b in found if b.name == name)
        args.json.write_text(json.dumps(run_version(bench, version, args, Path(reference))))
        return 0
    only = {name for name in args.only.split(",") if name}
    unknown = only - {name for b in found for name in (b.name, b.module)}
    if unknown:
        parser.error(f"no such benchmark: {', '.join(sorted(unknown))}")
    chosen = [b for b in found if not only or {b.name, b.module} & only]
    records = []
    for bench in chosen:
        start = time.perf_counter()
        records.append(run_isolated(bench, args))
        print(f"{bench.name}: svod {records[-1]['svod']['status']} ({time.perf_counter() - start:.0f} s)",
              file=sys.stderr, flush=True)
    print(format_table(HEADER, [row(r) for r in records]))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
