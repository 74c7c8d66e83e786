"""Fixtures shared by the suite: the devices every kernel test runs on, and which of them run each front-end test
(``pytest_collection_modifyitems``)."""

from __future__ import annotations

import faulthandler
import io
import os
import sys
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import TextIO

os.environ["SVOD_CACHE_DIR"] = tempfile.mkdtemp(prefix="svod-test-cache-")  # before svod reads its settings
if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller: its workers, started later, inherit the folder
    os.environ["SVOD_TEST_FAULTS"] = tempfile.mkdtemp(prefix="svod-test-faults-")

import pytest
from hypothesis import settings

from svod.device import Device
from tests.helpers import compiled_devices, devices_here, kernel_devices, open_device

# CI explores the same examples on every run, so a landing never depends on the draw; locally each run
# draws new ones and keeps failures in .hypothesis/.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(params=kernel_devices())
def device(request: pytest.FixtureRequest) -> Device:
    """Every device that runs kernels: each CPU compiler pair, the PYTHON reference, OpenCL, CUDA, each WebGPU
    adapter; a device missing here is a skip that names what this machine lacks for it."""
    return open_device(request.param)


@pytest.fixture(params=compiled_devices())
def compiled_device(request: pytest.FixtureRequest) -> Device:
    """Every device with a real compiler (the kernels the reference is compared against)."""
    return open_device(request.param)


DEVICE_FIXTURES = {"device": kernel_devices, "compiled_device": compiled_devices}
"""Each fixture above and the devices it takes."""
FRONT_ENDS = Path(__file__).parent / "frontend"
ALWAYS = "llvm"
"""The device every front-end test runs on: the CPU's default pair, the one a user's call gets."""
DEVICES_HERE = "SVOD_TEST_DEVICES_HERE"
"""Where the controller leaves the devices it found (``devices_here``) for its workers: each worker must collect
the very tests the others do, whatever a device's start does in it."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all-devices", action="store_true",
                     help="run each front-end test on every device (by default: on llvm and one other, in turn)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each front-end test (``tests/frontend``) runs on ``ALWAYS`` and on one other device here, each test's own
    in turn, rather than on every device; ``--all-devices`` runs every one.

    A front end's tests check what it makes of Python: the devices' own tests (``tests/backends``, ``tests/codegen``
    and the property tests there, against the reference) keep the whole matrix. Running every front-end test on
    every device cost most of the suite's time for checks the devices' tests already make; each device still runs
    its share of the front ends' kernels, and the share is the same on every run (a test's name, not the draw)."""
    if config.getoption("--all-devices"):
        return
    here = tuple(os.environ[DEVICES_HERE].split(","))  # (pytest_configure found them, before any collection)
    kept, dropped = [], []
    for item in items:
        (dropped if _not_its_turn(item, here) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _not_its_turn(item: pytest.Item, here: tuple[str, ...]) -> bool:
    """Whether ``item`` is a front-end test on a device here other than ``ALWAYS``, and not the one its turn
    gives it. A device this machine lacks stays: a skip that says so."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or not item.path.is_relative_to(FRONT_ENDS):
        return False
    fixture = next((name for name in DEVICE_FIXTURES if name in callspec.params), None)
    if fixture is None or _parametrized(item, fixture):
        return False  # (devices a test names itself, it means to run on each)
    turns = [name for name in DEVICE_FIXTURES[fixture]() if name in here and name != ALWAYS]
    if callspec.params[fixture] not in turns:
        return False
    rest = sorted((name, index) for name, index in callspec.indices.items() if name != fixture)
    turn = zlib.crc32(f"{item.path.name}::{item.originalname}{rest}".encode()) % len(turns)
    return callspec.params[fixture] != turns[turn]


def _parametrized(item: pytest.Item, name: str) -> bool:
    """Whether ``item``'s own ``parametrize`` marks give ``name`` its values (rather than the fixture)."""
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return True
    return False


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """The controller finds the devices here once, for its workers (``DEVICES_HERE``). A test worker that crashes
    (a segfault in native code) writes every thread's Python stack to a file the controller shows at the end, where
    a CI log's tail has it (pytest's own dump goes to the worker's stderr)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and not config.getoption("--all-devices"):
        os.environ[DEVICES_HERE] = ",".join(devices_here())
    if worker is not None and "SVOD_TEST_FAULTS" in os.environ:
        log = (Path(os.environ["SVOD_TEST_FAULTS"]) / f"{worker}.log").open("w")
        config.stash[_FAULT_LOG] = log
        faulthandler.enable(file=log, all_threads=True)
        _keep_captured_stderr(config, Path(os.environ["SVOD_TEST_FAULTS"]) / f"{worker}.stderr")


def _keep_captured_stderr(config: pytest.Config, path: Path) -> None:
    """Capture each test's standard error into ``path`` rather than an unnamed file, so that what native code
    wrote there before it ended the process (LLVM's or the C library's last words) outlives it. This reaches
    into pytest's capture of file descriptors; where that is not what is running, nothing changes."""
    capturing = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    err = getattr(capturing, "err", None)
    syscapture = getattr(err, "syscapture", None)
    if type(err).__name__ != "FDCapture" or getattr(syscapture, "tmpfile", None) is not err.tmpfile:
        return
    named = io.TextIOWrapper(path.open("w+b", buffering=0), encoding="utf-8", errors="replace", newline="",
                             write_through=True)
    err.tmpfile = syscapture.tmpfile = named
    if err._state == "started":
        os.dup2(named.fileno(), 2)
        sys.stderr = named


_FAULT_LOG = pytest.StashKey[TextIO]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Arm the crash log again before each test: a test that starts Ray in this process (a ``Cluster``) has its
    native library put its own fatal-signal handlers in faulthandler's place, and those leave no trace here."""
    log = item.config.stash.get(_FAULT_LOG, None)
    if log is not None:
        faulthandler.disable()
        faulthandler.enable(file=log, all_threads=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each crashed worker's stacks, then one line per reason for skipping, with its count, after the result
    (``-rs`` lists each skip)."""
    if "PYTEST_XDIST_WORKER" not in os.environ and "SVOD_TEST_FAULTS" in os.environ:
        for log in sorted(Path(os.environ["SVOD_TEST_FAULTS"]).glob("*.log")):
            if text := log.read_text(errors="replace").strip():
                terminalreporter.write_line(f"test worker {log.stem} crashed; its threads, innermost call first:")
                terminalreporter.write_line(text)
                written = log.with_suffix(".stderr")
                if written.exists() and (last := written.read_text(errors="replace").strip().splitlines()[-30:]):
                    terminalreporter.write_line("what its last test wrote to standard error, last lines:")
                    terminalreporter.write_line("\n".join(last))
    reasons = Counter(_skip_reason(report) for report in terminalreporter.stats.get("skipped", []))
    if reasons:
        terminalreporter.write_line("skipped: " + "; ".join(f"{count} x {reason}" for reason, count in
                                                             reasons.most_common()))


def _skip_reason(report: pytest.TestReport) -> str:
    """A skip's reason, without what varies from test to test (its device's name, an error's detail)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    for device in ("CUDA:0", "CUDA"):
        reason = reason.replace(f"{device} is not available here", "CUDA is not available here")
    return reason.split(" (")[0]
