"""Lowering, linearizing and rendering kernels to source.

What the layers above use: the pass order (``pipeline``: ``passes``, ``parts``, ``lower``), whether a
device can hold a kernel's dtypes (``check_dtypes``), how a lowered kernel uses its device
(``describe``), the ranges a value depends on (``live_ranges``), and where a checked access records a
failure (``status_slots``), and the value a reduction starts from (``reduce_identity``). Renderers are
reached through the device registry.
"""

from svod.codegen.accumulators import reduce_identity
from svod.codegen.checks import status_slots
from svod.codegen.lower import describe
from svod.codegen.pipeline import check_dtypes, lower, parts, passes
from svod.codegen.ranges import live_ranges

__all__ = ["check_dtypes", "describe", "live_ranges", "lower", "parts", "passes", "reduce_identity", "status_slots"]
