"""The ``svod`` command: ``devices``, ``demo``, ``bench`` and ``check``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from svod.cli.bench import run_bench
from svod.cli.check import run_check
from svod.cli.demo import run_demo
from svod.cli.devices import show_devices
from svod.errors import SvodError
from svod.frontend.check import DEFAULT_ULPS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="svod", description="svod kernel runtime")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("devices", help="every device kind, its compilers, and whether it works here")
    demo = commands.add_parser("demo", help="build a few kernels, check them against numpy, time them")
    demo.add_argument("--device", default="CPU", help="device to run on (default: CPU)")
    demo.add_argument("--compiler", default=None, help="compiler pair of the device (default: its primary)")
    bench = commands.add_parser("bench", help="measure svod beside numpy and tinygrad")
    bench.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (under a minute)")
    bench.add_argument("--device", default="CPU", help="device to measure (default: CPU)")
    bench.add_argument("--json", dest="json_path", help="write the metrics as JSON to this path")
    bench.add_argument("--plot", dest="plot_path", help="write a PNG chart of the ratios to this path")
    bench.add_argument("--suite", choices=["kernels", "spellings", "numpy", "gradients"],
                       help="only the suite of user kernels (softmax, conv2d ...), or only the spellings of a kernel "
                            "(the suite's loops beside NumPy in @svod.jit), or only NumPy's random numbers, gathers, "
                            "masks and sorts in @svod.jit, or only the differentiated programs (grad.<name>_ms)")
    bench.add_argument("--busy", action="store_true", help="the suite of user kernels and the thread speedup quiet, "
                                                           "then beside a process that keeps a core busy")
    checking = commands.add_parser("check", help="run a kernel or plan on every backend and the reference; show "
                                                 "differences")
    checking.add_argument("target", help="FILE.py:FUNC, a function returning (ast, @svod.kernel, @svod.jit "
                                         "or plan, arguments[, variables])")
    checking.add_argument("--ulps", type=int, default=DEFAULT_ULPS, help="float tolerance in units in the last place")
    checking.add_argument("--devices", nargs="+", metavar="DEVICE",
                          help="compare only these devices (named ones are compared even where they do not keep "
                               "IEEE 754 floats)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "devices":
            return show_devices()
        if args.command == "bench":
            return run_bench(args.device, args.quick, args.json_path, args.plot_path, args.suite,
                             args.busy)
        if args.command == "check":
            return run_check(args.target, args.ulps, args.devices)
        return run_demo(getattr(args, "device", "CPU"), getattr(args, "compiler", None))
    except SvodError as err:
        print(f"svod: {err}", file=sys.stderr)
        return 2
