"""The ``svod`` command: ``devices``, ``demo`` and ``bench``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from svod.cli.demo import run_demo
from svod.cli.devices import show_devices
from svod.errors import SvodError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="svod", description="svod kernel runtime")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("devices", help="every device kind, its compilers, and whether it works here")
    demo = commands.add_parser("demo", help="build a few kernels, check them against numpy, time them")
    demo.add_argument("--device", default="CPU", help="device to run on (default: CPU)")
    demo.add_argument("--compiler", default=None, help="compiler pair of the device (default: its primary)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "devices":
            return show_devices()
        return run_demo(getattr(args, "device", "CPU"), getattr(args, "compiler", None))
    except SvodError as err:
        print(f"svod: {err}", file=sys.stderr)
        return 2
