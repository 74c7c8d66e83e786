"""``svod devices``: what svod can run on here, and why not where it cannot."""

from __future__ import annotations

from svod.backends import default_registry
from svod.cli.table import format_table


def show_devices() -> int:
    rows = [(s.name, ", ".join(s.compilers) or "-", "yes" if s.available else "no", s.detail)
            for s in default_registry().status()]
    print(format_table(("device", "compilers", "works here", "detail"), rows))
    return 0
